/*
 * test_state.c - the state database: schema migrations, refusal of a newer
 * schema, the writer lock, and the placement journal's recovery.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ctx.h"
#include "error.h"
#include "place.h"
#include "state.h"
#include "state_private.h" /* the writer connection's pragmas, read on it */
#include "util.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *tmpdir(void)
{
	char tmpl[] = "/tmp/tfprov-state-XXXXXX";
	char *d = mkdtemp(tmpl);
	assert_non_null(d);
	return xstrdup(d);
}

static int sql_int(const char *db, const char *sql)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *s = NULL;
	int v = -1;
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &s, NULL), SQLITE_OK);
	if (sqlite3_step(s) == SQLITE_ROW)
		v = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(h);
	return v;
}

static void test_new_database_is_at_the_latest_version(void **unused)
{
	(void)unused;
	char *d = tmpdir();
	struct state *st = NULL;
	struct why err = {0};
	assert_int_equal(state_open(d, 1, &st, &err), 0);
	state_close(st);
	char *db = path_join(d, "state.db");
	assert_int_equal(sql_int(db, "PRAGMA user_version"), STATE_SCHEMA_VERSION);
	/* Migration 2's covering index is there; migration 3 dropped the unused cache table. */
	assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = "
	                             "'files_resource' AND sql LIKE '%mtime_ns, mode%'"),
	                 1);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'cache'"), 0);
	/* Migration 4: the machine's settings (the default stack). */
	assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'settings'"),
	                 1);
	free(db);
	free(d);
}

static void test_version_1_database_is_migrated_keeping_its_rows(void **unused)
{
	(void)unused;
	char *d = tmpdir();
	char *db = path_join(d, "state.db");
	sqlite3 *h = NULL;
	/* The schema of version 1 as an older tfprov left it, with one stack. */
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(h,
	                 "CREATE TABLE stacks (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
	                 " manifest_path TEXT, current_gen INTEGER, created INTEGER NOT NULL,"
	                 " updated INTEGER NOT NULL);"
	                 "CREATE TABLE resources (id INTEGER PRIMARY KEY, stack_id INTEGER,"
	                 " addr TEXT, kind TEXT, desired TEXT, attrs TEXT, updated INTEGER);"
	                 "CREATE TABLE files (path TEXT PRIMARY KEY, resource_id INTEGER NOT NULL,"
	                 " type TEXT NOT NULL, sha256 TEXT, size INTEGER NOT NULL, mode INTEGER"
	                 " NOT NULL, mtime_ns INTEGER NOT NULL, link TEXT) WITHOUT ROWID;"
	                 "CREATE INDEX files_resource ON files(resource_id);"
	                 "INSERT INTO stacks VALUES (1, 'old', '/m.yaml', NULL, 1, 1);"
	                 "PRAGMA user_version = 1;",
	                 NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(h);
	struct state *st = NULL;
	struct why err = {0};
	assert_int_equal(state_open(d, 0, &st, &err), 0);
	assert_int_equal(state_stack_id(st, "old"), 1);
	state_close(st);
	assert_int_equal(sql_int(db, "PRAGMA user_version"), STATE_SCHEMA_VERSION);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = "
	                             "'files_resource' AND sql LIKE '%mtime_ns, mode%'"),
	                 1);
	free(db);
	free(d);
}

/*
 * The schema of version 2 exactly as migrations 1 and 2 of an older tfprov
 * left it, with a row in every table (the cache table too, which that
 * tfprov never wrote, so a row there is the worst case).
 */
static const char schema_v2[] =
    "CREATE TABLE stacks (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " manifest_path TEXT, current_gen INTEGER, created INTEGER NOT NULL,"
    " updated INTEGER NOT NULL);"
    "CREATE TABLE generations (id INTEGER PRIMARY KEY, stack_id INTEGER NOT NULL"
    " REFERENCES stacks(id) ON DELETE CASCADE, manifest_path TEXT, manifest_sha256 TEXT"
    " NOT NULL, manifest_text TEXT NOT NULL, started INTEGER NOT NULL, finished INTEGER,"
    " result TEXT NOT NULL DEFAULT 'running');"
    "CREATE TABLE resources (id INTEGER PRIMARY KEY, stack_id INTEGER NOT NULL REFERENCES"
    " stacks(id) ON DELETE CASCADE, addr TEXT NOT NULL, kind TEXT NOT NULL, desired TEXT"
    " NOT NULL, attrs TEXT, updated INTEGER NOT NULL, UNIQUE(stack_id, addr));"
    "CREATE TABLE files (path TEXT PRIMARY KEY, resource_id INTEGER NOT NULL REFERENCES"
    " resources(id) ON DELETE CASCADE, type TEXT NOT NULL, sha256 TEXT, size INTEGER NOT"
    " NULL, mode INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, link TEXT) WITHOUT ROWID;"
    "CREATE TABLE journal (id INTEGER PRIMARY KEY, op TEXT NOT NULL, path TEXT NOT NULL,"
    " tmp TEXT, backup TEXT, created INTEGER NOT NULL);"
    "CREATE TABLE cache (sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, url TEXT,"
    " added INTEGER NOT NULL, last_used INTEGER NOT NULL);"
    "CREATE TABLE bench_results (id INTEGER PRIMARY KEY, stack_id INTEGER REFERENCES"
    " stacks(id) ON DELETE SET NULL, at INTEGER NOT NULL, gpu TEXT, precision TEXT,"
    " ms_per_step REAL, images_per_sec REAL, tf_version TEXT, cuda_version TEXT,"
    " cudnn_version TEXT, source TEXT, raw TEXT);"
    "CREATE INDEX files_resource ON files(resource_id, path, type, size, mtime_ns, mode);"
    "INSERT INTO stacks VALUES (1, 'old', '/m.yaml', 1, 1, 1);"
    "INSERT INTO generations VALUES (1, 1, '/m.yaml', 'ab', 'schema: 1', 1, 2, 'ok');"
    "INSERT INTO resources VALUES (1, 1, 'env', 'env', 'd1', NULL, 1);"
    "INSERT INTO files VALUES ('/etc/x.sh', 1, 'f', NULL, 4, 420, 7, NULL);"
    "INSERT INTO journal VALUES (1, 'gc', '/etc/x.sh', NULL, '/etc/.bak', 1);"
    "INSERT INTO cache VALUES ('cd', 1, 'https://example.invalid/x', 1, 1);"
    "INSERT INTO bench_results(stack_id, at, gpu) VALUES (1, 1, 'H100');"
    "PRAGMA user_version = 2;";

/* A fresh directory holding schema_v2 as a database, opened (so migrated): *dir and *db. */
static struct state *open_v2(char **dir, char **db)
{
	*dir = tmpdir();
	*db = path_join(*dir, "state.db");
	sqlite3 *h = NULL;
	assert_int_equal(sqlite3_open(*db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h, schema_v2, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(h);
	struct state *st = NULL;
	struct why err = {0};
	assert_int_equal(state_open(*dir, 0, &st, &err), 0);
	return st;
}

static void test_version_2_database_loses_the_cache_table_and_keeps_the_rest(void **unused)
{
	(void)unused;
	char *d = NULL, *db = NULL;
	struct state *st = open_v2(&d, &db);
	struct state_gen g;
	assert_int_equal(state_gen_current(st, "old", &g), 0);
	assert_string_equal(g.manifest_text, "schema: 1");
	state_gen_release(&g);
	state_close(st);
	assert_int_equal(sql_int(db, "PRAGMA user_version"), STATE_SCHEMA_VERSION);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'cache'"), 0);
	assert_int_equal(sql_int(db, "SELECT (SELECT count(*) FROM stacks) + (SELECT count(*) FROM "
	                             "generations) + (SELECT count(*) FROM resources) + (SELECT "
	                             "count(*) FROM files) + (SELECT count(*) FROM journal) + "
	                             "(SELECT count(*) FROM bench_results)"),
	                 6);
	free(db);
	free(d);
}

/*
 * Migration 5: a v2 database's file keeps its row and owner; afterwards a
 * second resource may record the same path (a CUDA prefix two stacks share),
 * and releasing one owner's record leaves the other's.
 */
static void test_a_path_may_have_several_owners_after_migration_5(void **unused)
{
	(void)unused;
	char *d = NULL, *db = NULL;
	struct state *st = open_v2(&d, &db);
	assert_int_equal(state_file_owner(st, "/etc/x.sh"), 1);
	int64_t other = state_resource_put(st, state_stack_ensure(st, "new", "/n.yaml"), "env",
	                                   "env", "d2", NULL);
	assert_true(other > 1);
	struct state_file f = {.path = "/etc/x.sh", .type = 'f', .size = 4, .mode = 0644};
	assert_int_equal(state_file_put(st, other, &f), 0);
	assert_true(state_file_recorded_by(st, "/etc/x.sh", 1));
	assert_true(state_file_recorded_by(st, "/etc/x.sh", other));
	struct state_file o;
	char *stack = NULL;
	assert_int_equal(state_file_other(st, "/etc/x.sh", 1, &o, &stack), 0);
	assert_int_equal(o.resource_id, other);
	assert_string_equal(stack, "new");
	free(o.path);
	free(o.link);
	free(stack);
	assert_int_equal(state_file_release(st, 1, "/etc/x.sh"), 0);
	assert_false(state_file_recorded_by(st, "/etc/x.sh", 1));
	assert_int_equal(state_file_owner(st, "/etc/x.sh"), other);
	state_close(st);
	free(db);
	free(d);
}

/* A migration that fails leaves the previous version and its tables as they were. */
static void test_failed_migration_keeps_the_previous_version(void **unused)
{
	(void)unused;
	char *d = tmpdir();
	char *db = path_join(d, "state.db");
	sqlite3 *h = NULL;
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h, schema_v2, NULL, NULL, NULL), SQLITE_OK);
	/* A row of another table that references the cache row: with foreign keys on,
	 * dropping the cache table is a foreign key violation, so migration 3 fails. */
	assert_int_equal(sqlite3_exec(h,
	                              "CREATE TABLE pins (h TEXT REFERENCES cache(sha256));"
	                              "INSERT INTO pins VALUES ('cd');",
	                              NULL, NULL, NULL),
	                 SQLITE_OK);
	sqlite3_close(h);
	struct state *st = NULL;
	struct why err = {0};
	assert_int_equal(state_open(d, 0, &st, &err), TF_ESTATE);
	assert_null(st);
	assert_non_null(err.msg);
	assert_non_null(strstr(err.msg, "state migration failed"));
	why_clear(&err);
	assert_int_equal(sql_int(db, "PRAGMA user_version"), 2);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM cache"), 1);
	free(db);
	free(d);
}

static void test_newer_schema_is_refused_not_downgraded(void **unused)
{
	(void)unused;
	char *d = tmpdir();
	char *db = path_join(d, "state.db");
	sqlite3 *h = NULL;
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(h, "CREATE TABLE future (x); PRAGMA user_version = 99;", NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(h);
	struct state *st = NULL;
	struct why err = {0};
	assert_int_equal(state_open(d, 0, &st, &err), TF_ESTATE);
	assert_null(st);
	assert_non_null(err.msg);
	assert_non_null(strstr(err.msg, "newer than this tfprov"));
	assert_non_null(strstr(err.msg, "99"));
	why_clear(&err);
	assert_int_equal(sql_int(db, "PRAGMA user_version"), 99);
	free(db);
	free(d);
}

static void test_second_writer_is_refused_naming_the_holder(void **unused)
{
	(void)unused;
	char *d = tmpdir();
	struct state *a = NULL, *b = NULL;
	struct why err = {0};
	char *holder = NULL;
	assert_int_equal(state_open(d, 1, &a, &err), 0);
	assert_int_equal(state_open(d, 1, &b, &err), 0);
	assert_int_equal(state_lock(a, 0, NULL), 0);
	assert_int_equal(state_lock(b, 0.2, &holder), TF_ELOCKED);
	assert_non_null(holder);
	char pid[32];
	snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());
	assert_non_null(strstr(holder, pid));
	free(holder);
	state_unlock(a);
	assert_int_equal(state_lock(b, 0, NULL), 0);
	state_close(a);
	state_close(b);
	free(d);
}

/*
 * The writer lock of a root with no state yet: it creates the state dir, a
 * second writer is refused naming the holder, and a holder that created no
 * state leaves nothing behind (lock file and the directories it made).
 */
static void test_writer_lock_on_a_fresh_root_leaves_no_trace(void **unused)
{
	(void)unused;
	char *root = tmpdir();
	char *dir = path_join(root, "var/lib/tfprov");
	char *var = path_join(root, "var");
	struct state_writer *a = NULL, *b = NULL;
	char *holder = NULL;
	assert_int_equal(state_writer_lock(dir, 0, &a, NULL), 0);
	assert_int_equal(access(dir, F_OK), 0);
	assert_int_equal(state_writer_lock(dir, 0.1, &b, &holder), TF_ELOCKED);
	assert_null(b);
	char pid[32];
	snprintf(pid, sizeof(pid), "pid %ld on ", (long)getpid());
	assert_non_null(holder);
	assert_non_null(strstr(holder, pid));
	free(holder);
	/* The old kind of lock (state_lock) excludes it too: one file. */
	struct state *st = NULL;
	struct why err = {0};
	assert_int_equal(state_open(dir, 1, &st, &err), 0);
	assert_int_equal(state_lock(st, 0, NULL), TF_ELOCKED);
	state_close(st);
	char *db = path_join(dir, "state.db");
	unlink(db);
	char *wal = xasprintf("%s-wal", db), *shm = xasprintf("%s-shm", db);
	unlink(wal);
	unlink(shm);
	state_writer_unlock(a, 1);
	assert_int_not_equal(access(var, F_OK), 0); /* var/lib/tfprov/lock and its dirs: gone */
	assert_int_equal(state_writer_lock(dir, 0, &b, NULL), 0);
	state_writer_unlock(b, 0); /* kept: a run that created state keeps its lock file */
	char *lock = path_join(dir, "lock");
	assert_int_equal(access(lock, F_OK), 0);
	free(lock);
	free(wal);
	free(shm);
	free(db);
	free(var);
	free(dir);
	free(root);
}

/*
 * The writer's connection: WAL, and synchronous=FULL, so a commit (a journal
 * intent, a txn's records) is on disk before the call returns and before the
 * placement layer renames what the intent announces.
 */
static int conn_int(struct state *st, const char *sql)
{
	struct state_stmt *s = NULL;
	int v = -1;
	assert_int_equal(state_prepare(st, sql, &s), STATE_OK);
	if (state_step(s) == STATE_ROW)
		v = (int)state_col_int64(s, 0);
	state_finalize(s);
	return v;
}

static void test_writer_is_wal_with_synchronous_full(void **unused)
{
	(void)unused;
	char *d = tmpdir();
	struct state *st = NULL;
	struct why err = {0};
	assert_int_equal(state_open(d, 1, &st, &err), 0);
	assert_int_equal(conn_int(st, "PRAGMA synchronous"), 2); /* FULL */
	struct state_stmt *s = NULL;
	assert_int_equal(state_prepare(st, "PRAGMA journal_mode", &s), STATE_OK);
	assert_int_equal(state_step(s), STATE_ROW);
	assert_string_equal(state_col_text(s, 0), "wal");
	state_finalize(s);
	state_close(st);
	free(d);
}

/* An interrupted put: the new file is removed, the old one restored, no leftovers. */
static void test_recovery_undoes_an_unfinished_update(void **unused)
{
	(void)unused;
	char *root = tmpdir();
	struct ctx c;
	memset(&c, 0, sizeof(c));
	c.rootfd = -1;
	c.root = root;
	c.state_dir = path_join(root, "var/lib/tfprov");
	struct why err = {0};
	assert_int_equal(state_open(c.state_dir, 1, &c.st, &err), 0);
	int64_t stack = state_stack_ensure(c.st, "s", "/m.yaml");
	struct txn *t = NULL;
	assert_int_equal(txn_begin(&c, stack, "env", "env", &t), 0);
	assert_int_equal(txn_put_file(t, "/etc/x.sh", "old\n", 4, 0644), 0);
	assert_int_equal(txn_commit(t, "d1", NULL), 0);
	txn_abort(t);

	/* Start an update and "crash": the txn is never committed or aborted. */
	assert_int_equal(txn_begin(&c, stack, "env", "env", &t), 0);
	assert_int_equal(txn_remove_all(t), 0);
	assert_int_equal(txn_put_file(t, "/etc/x.sh", "new!\n", 5, 0644), 0);
	char *host = path_join(root, "etc/x.sh");
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(read_file_at(AT_FDCWD, host, 100, &text, &len), 0);
	assert_string_equal(text, "new!\n");
	free(text);

	assert_true(place_recover(&c) > 0);
	assert_int_equal(read_file_at(AT_FDCWD, host, 100, &text, &len), 0);
	assert_string_equal(text, "old\n");
	free(text);
	/* Nothing but the restored file in /etc: no .tfprov-* left behind. */
	char *etc = path_join(root, "etc");
	char *cmd = xasprintf("test $(ls -A %s | wc -l) -eq 1", etc);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(etc);
	free(host);
	txn_abort(t); /* frees the crashed txn: recovery already emptied its journal */
	state_close(c.st);
	free(c.state_dir);
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_new_database_is_at_the_latest_version),
	    cmocka_unit_test(test_version_1_database_is_migrated_keeping_its_rows),
	    cmocka_unit_test(test_version_2_database_loses_the_cache_table_and_keeps_the_rest),
	    cmocka_unit_test(test_a_path_may_have_several_owners_after_migration_5),
	    cmocka_unit_test(test_failed_migration_keeps_the_previous_version),
	    cmocka_unit_test(test_newer_schema_is_refused_not_downgraded),
	    cmocka_unit_test(test_second_writer_is_refused_naming_the_holder),
	    cmocka_unit_test(test_writer_lock_on_a_fresh_root_leaves_no_trace),
	    cmocka_unit_test(test_recovery_undoes_an_unfinished_update),
	    cmocka_unit_test(test_writer_is_wal_with_synchronous_full),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
