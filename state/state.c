/*
 * state.c - SQLite state database, migrations and the writer lock.
 *
 * Invariants:
 *  - PRAGMA user_version equals the number of migrations applied; each
 *    migration runs in its own transaction together with the version bump,
 *    so a crash mid-migration leaves the previous version intact;
 *  - a database newer than this binary is refused, never downgraded;
 *  - only the holder of the flock on <dir>/lock writes.
 */
#include "state_private.h"
#include "error.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static const char *const migrations[] = {
    /* 1: the initial schema. */
    "CREATE TABLE stacks ("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  manifest_path TEXT,"
    "  current_gen INTEGER,"
    "  created INTEGER NOT NULL,"
    "  updated INTEGER NOT NULL);"
    "CREATE TABLE generations ("
    "  id INTEGER PRIMARY KEY,"
    "  stack_id INTEGER NOT NULL REFERENCES stacks(id) ON DELETE CASCADE,"
    "  manifest_path TEXT,"
    "  manifest_sha256 TEXT NOT NULL,"
    "  manifest_text TEXT NOT NULL,"
    "  started INTEGER NOT NULL,"
    "  finished INTEGER,"
    "  result TEXT NOT NULL DEFAULT 'running');"
    "CREATE TABLE resources ("
    "  id INTEGER PRIMARY KEY,"
    "  stack_id INTEGER NOT NULL REFERENCES stacks(id) ON DELETE CASCADE,"
    "  addr TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  desired TEXT NOT NULL,"
    "  attrs TEXT,"
    "  updated INTEGER NOT NULL,"
    "  UNIQUE(stack_id, addr));"
    "CREATE TABLE files ("
    "  path TEXT PRIMARY KEY,"
    "  resource_id INTEGER NOT NULL REFERENCES resources(id) ON DELETE CASCADE,"
    "  type TEXT NOT NULL,"
    "  sha256 TEXT,"
    "  size INTEGER NOT NULL,"
    "  mode INTEGER NOT NULL,"
    "  mtime_ns INTEGER NOT NULL,"
    "  link TEXT) WITHOUT ROWID;"
    "CREATE INDEX files_resource ON files(resource_id);"
    "CREATE TABLE journal ("
    "  id INTEGER PRIMARY KEY,"
    "  op TEXT NOT NULL,"
    "  path TEXT NOT NULL,"
    "  tmp TEXT,"
    "  backup TEXT,"
    "  created INTEGER NOT NULL);"
    "CREATE TABLE cache ("
    "  sha256 TEXT PRIMARY KEY,"
    "  size INTEGER NOT NULL,"
    "  url TEXT,"
    "  added INTEGER NOT NULL,"
    "  last_used INTEGER NOT NULL);"
    "CREATE TABLE bench_results ("
    "  id INTEGER PRIMARY KEY,"
    "  stack_id INTEGER REFERENCES stacks(id) ON DELETE SET NULL,"
    "  at INTEGER NOT NULL,"
    "  gpu TEXT, precision TEXT, ms_per_step REAL, images_per_sec REAL,"
    "  tf_version TEXT, cuda_version TEXT, cudnn_version TEXT,"
    "  source TEXT, raw TEXT);",
    /*
     * 2: the drift check reads (path, type, size, mtime_ns, mode) of every
     * file of a resource; a covering index answers it without a seek into
     * the table per file (10k seeks were half of a no-op apply).
     */
    ("DROP INDEX files_resource;"
     "CREATE INDEX files_resource ON files(resource_id, path, type, size, mtime_ns, mode);"),
    /*
     * 3: the cache table of migration 1 was never written: the download
     * cache is its directory (engine/artifact/cache.c), indexed by the file names.
     */
    "DROP TABLE IF EXISTS cache;",
    /*
     * 4: what belongs to the machine rather than to one stack: the default
     * stack login shells enter (key 'default_stack'; absent: never chosen,
     * so the first apply chooses it; '': none, chosen) and the login script
     * written for it ('login_script', root-relative), so that the next
     * choice removes exactly that file (cli/default.c).
     */
    "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;",
    /*
     * 5: a file may have several owners. Two stacks with the same CUDA
     * version share one prefix, and each of them records every file of it
     * that it needs (place.c, txn_share_tree): a path is recorded once per
     * resource, and a removal takes a file off the disk only when no other
     * resource records it.
     */
    ("CREATE TABLE files5 ("
     "  path TEXT NOT NULL,"
     "  resource_id INTEGER NOT NULL REFERENCES resources(id) ON DELETE CASCADE,"
     "  type TEXT NOT NULL,"
     "  sha256 TEXT,"
     "  size INTEGER NOT NULL,"
     "  mode INTEGER NOT NULL,"
     "  mtime_ns INTEGER NOT NULL,"
     "  link TEXT,"
     "  PRIMARY KEY(path, resource_id)) WITHOUT ROWID;"
     "INSERT INTO files5 SELECT path, resource_id, type, sha256, size, mode, mtime_ns, link "
     "FROM files;"
     "DROP TABLE files;"
     "ALTER TABLE files5 RENAME TO files;"
     "CREATE INDEX files_resource ON files(resource_id, path, type, size, mtime_ns, mode);"),
};

/* Fails why with "what: detail" and returns TF_ESTATE. */
static int set_err(struct why *why, const char *what, const char *detail)
{
	return why_fail(why, TF_ESTATE, "%s: %s", what, detail ? detail : "");
}

/* The first failure of a prepare or a step in this process (see state.h). */
static char failure[512];

static void note_failure(sqlite3 *db, const char *what, int rc)
{
	if (failure[0] == '\0')
		snprintf(failure, sizeof(failure), "%s: %s", what,
		         db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

int sq_prepare(struct state *st, const char *sql, sqlite3_stmt **out)
{
	*out = NULL;
	int rc = st && st->db ? sqlite3_prepare_v2(st->db, sql, -1, out, NULL) : SQLITE_MISUSE;
	if (rc != SQLITE_OK)
		note_failure(st ? st->db : NULL, "cannot prepare a query", rc);
	return rc;
}

int sq_step(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		note_failure(s ? sqlite3_db_handle(s) : NULL, "query failed", rc);
	return rc;
}

const char *state_sqlite_version(void)
{
	return sqlite3_libversion();
}

const char *state_failure(void)
{
	return failure[0] ? failure : NULL;
}

int state_note_failure(sqlite3 *db, const char *what)
{
	note_failure(db, what, SQLITE_ERROR);
	return TF_ESTATE;
}

int state_exec(struct state *st, const char *sql)
{
	char *e = NULL;
	if (sqlite3_exec(st->db, sql, NULL, NULL, &e) != SQLITE_OK) {
		sqlite3_free(e);
		return TF_ESTATE;
	}
	return 0;
}

int state_begin(struct state *st)
{
	return state_exec(st, "BEGIN IMMEDIATE");
}

int state_commit(struct state *st)
{
	return state_exec(st, "COMMIT");
}

void state_rollback(struct state *st)
{
	if (!sqlite3_get_autocommit(st->db))
		state_exec(st, "ROLLBACK");
}

static int read_version(struct state *st)
{
	sqlite3_stmt *s = NULL;
	int version = -1;
	if (sq_prepare(st, "PRAGMA user_version", &s) == SQLITE_OK && sq_step(s) == SQLITE_ROW)
		version = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	return version;
}

/*
 * Applies the missing migrations, one transaction each. The version is read
 * inside the write transaction, so two runs opening a new (or old) database
 * at once never apply the same migration twice.
 */
static int migrate(struct state *st, struct why *why)
{
	int target = (int)ARRAY_SIZE(migrations);
	/* Current already (every open but the first after an upgrade): no write transaction. */
	if (read_version(st) == target)
		return 0;
	for (;;) {
		if (state_exec(st, "BEGIN IMMEDIATE") != 0)
			return set_err(why, "cannot lock the state database for its migration",
			               sqlite3_errmsg(st->db));
		int version = read_version(st);
		if (version < 0 || version > target) {
			state_exec(st, "ROLLBACK");
			char v[96];
			snprintf(v, sizeof(v),
			         "schema version %d, this tfprov knows up to %d; upgrade tfprov",
			         version, target);
			return set_err(why, "the state database is newer than this tfprov", v);
		}
		if (version == target)
			return state_exec(st, "COMMIT") == 0
			           ? 0
			           : set_err(why, "cannot read the state database",
			                     sqlite3_errmsg(st->db));
		char *e = NULL;
		char *sql = xasprintf("%s PRAGMA user_version = %d; COMMIT;", migrations[version],
		                      version + 1);
		int rc = sqlite3_exec(st->db, sql, NULL, NULL, &e);
		free(sql);
		if (rc != SQLITE_OK) {
			state_exec(st, "ROLLBACK");
			int r = set_err(why, "state migration failed", e);
			sqlite3_free(e);
			return r;
		}
	}
}

/*
 * A reader that cannot write the state directory (status by another user, a
 * read-only mount) cannot create the WAL's -shm file, so the database is
 * opened read-only, and where SQLite still needs that file, as immutable:
 * nothing is written, nothing is migrated (an older schema is an error).
 */
static int open_readonly(struct state *st, const char *path, struct why *why)
{
	struct strbuf uri = STRBUF_INIT;
	strbuf_adds(&uri, "file:");
	for (const char *p = path; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("/-._~", ch))
			strbuf_add(&uri, p, 1);
		else
			strbuf_addf(&uri, "%%%02X", ch);
	}
	size_t base = uri.len;
	int rc = -1, clean = failure[0] == '\0';
	for (int immutable = 0; immutable < 2 && rc != 0; immutable++) {
		uri.len = base;
		strbuf_adds(&uri, immutable ? "?immutable=1" : "?mode=ro");
		if (st->db)
			sqlite3_close_v2(st->db);
		st->db = NULL;
		if (sqlite3_open_v2(uri.buf, &st->db,
		                    SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX,
		                    NULL) == SQLITE_OK &&
		    state_exec(st, "PRAGMA foreign_keys=ON") == 0)
			rc = read_version(st) == (int)ARRAY_SIZE(migrations) ? 0 : -2;
	}
	strbuf_release(&uri);
	if (rc == 0 && clean)
		failure[0] = '\0'; /* the read-only try that needed immutable is not a failure */
	if (rc == -2)
		return set_err(why, "cannot read the state database",
		               "its schema is not this tfprov's; run tfprov as its owner once");
	if (rc != 0)
		return set_err(why, "cannot open the state database read-only",
		               st->db ? sqlite3_errmsg(st->db) : "out of memory");
	sqlite3_busy_timeout(st->db, 10000);
	return 0;
}

int state_open(const char *dir, int create, struct state **out, struct why *why)
{
	struct state *st = xcalloc(1, sizeof(*st));
	int rc = 0;
	st->lockfd = -1;
	st->dir = xstrdup(dir);
	*out = NULL;
	char *path = path_join(dir, "state.db");
	if (create) {
		int r = mkdirs_at(AT_FDCWD, dir, 0755);
		if (r != 0) {
			rc = set_err(why, "cannot create the state directory", strerror(-r));
			goto out;
		}
	} else if (access(path, F_OK) != 0) {
		rc = -ENOENT; /* no state yet: not an error for readers */
		goto out;
	} else if (access(dir, W_OK) != 0) {
		rc = open_readonly(st, path, why);
		goto out;
	}
	int flags =
	    SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
	if (sqlite3_open_v2(path, &st->db, flags, NULL) != SQLITE_OK) {
		rc = set_err(why, "cannot open the state database",
		             st->db ? sqlite3_errmsg(st->db) : "out of memory");
		goto out;
	}
	sqlite3_busy_timeout(st->db, 10000);
	/*
	 * Switching a new database to WAL needs it to itself, and SQLite does not
	 * run the busy handler for that: two first runs on one root would see
	 * SQLITE_BUSY. Retry for as long as busy_timeout would have waited.
	 */
	/*
	 * synchronous=FULL: every commit syncs the WAL before it returns. The
	 * placement journal's intents are single-statement commits that must be
	 * on disk before the operation they announce (a stage created, a path
	 * renamed aside); with NORMAL a power cut keeps the renames and loses the
	 * intent, and recovery leaves the stage behind (test_power_loss.py).
	 */
	for (int tries = 0;; tries++) {
		/*
		 * synchronous=FULL: a commit returns only once the WAL is on disk.
		 * The placement journal depends on it: an intent row must be
		 * durable before the rename it announces, and a txn's records
		 * before its backups are deleted (ARCHITECTURE.md section 5).
		 */
		if (state_exec(st, "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON; "
		                   "PRAGMA synchronous=FULL") == 0)
			break;
		int busy = (sqlite3_errcode(st->db) & 0xff) == SQLITE_BUSY;
		if (!busy || tries >= 500) {
			rc = set_err(why, "cannot configure the state database",
			             sqlite3_errmsg(st->db));
			goto out;
		}
		usleep(20 * 1000);
	}
	rc = migrate(st, why);
out:
	free(path);
	if (rc != 0) {
		state_close(st);
		return rc;
	}
	*out = st;
	return 0;
}

void state_close(struct state *st)
{
	if (st == NULL)
		return;
	state_unlock(st);
	if (st->db)
		sqlite3_close_v2(st->db);
	free(st->dir);
	free(st);
}

/*
 * The holder's line. A holder that has just taken the lock may not have
 * written it yet: an empty file is read again for up to 200 ms.
 */
static char *read_holder(int fd)
{
	char buf[256];
	ssize_t n = 0;
	for (int tries = 0; tries < 10; tries++) {
		n = pread(fd, buf, sizeof(buf) - 1, 0);
		if (n > 0)
			break;
		usleep(20 * 1000);
	}
	if (n <= 0)
		return xstrdup("unknown holder");
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return xstrdup(buf);
}

int state_writer_running(const char *dir, long *pid, char **holder)
{
	char *path = path_join(dir, "lock"), line[256];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;
	FILE *f = NULL;
	*pid = 0;
	*holder = NULL;
	if (fd < 0 || fstat(fd, &st) != 0)
		goto out;
	/* The kernel's list of locks: "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ...". */
	f = fopen("/proc/locks", "re");
	while (f && !found && fgets(line, sizeof(line), f)) {
		long p = 0;
		unsigned maj = 0, mnr = 0;
		unsigned long ino = 0;
		char type[16], mode[16];
		if (sscanf(line, "%*[^:]: FLOCK %15s %15s %ld %x:%x:%lu", type, mode, &p, &maj,
		           &mnr, &ino) == 6 &&
		    strcmp(mode, "WRITE") == 0 && ino == (unsigned long)st.st_ino &&
		    maj == major(st.st_dev) && mnr == minor(st.st_dev)) {
			found = 1;
			*pid = p;
		}
	}
	if (found)
		*holder = read_holder(fd);
out:
	if (f)
		fclose(f);
	if (fd >= 0)
		close(fd);
	free(path);
	return found;
}

struct state_writer {
	char *path;         /* <dir>/lock */
	int fd;             /* holds the flock */
	struct strvec made; /* directories this run created, deepest first */
};

/* Remembers the ancestors of dir (dir included) that do not exist yet. */
static void note_missing_dirs(struct strvec *made, const char *dir)
{
	char *p = xstrdup(dir);
	struct stat st;
	while (strlen(p) > 1 && stat(p, &st) != 0 && errno == ENOENT) {
		int known = 0;
		for (size_t i = 0; i < made->n && !known; i++)
			known = strcmp(made->v[i], p) == 0;
		if (!known)
			strvec_push(made, p);
		char *slash = strrchr(p, '/');
		if (slash == NULL || slash == p)
			break;
		*slash = '\0';
	}
	free(p);
}

/*
 * Takes the flock on <dir>/lock, waiting up to timeout seconds. With `made`
 * (a writer on a root that may have no state yet) the directory is created
 * when missing, and the directories created are noted. A holder that
 * releases may remove the file (state_writer_unlock with forget): a lock
 * won on a file that is no longer at its path is dropped and the path
 * opened again, so two runs never hold locks on two different files.
 * 0 with *out the descriptor, TF_ELOCKED (*holder set), TF_ESTATE.
 */
static int take_lock(const char *dir, double timeout, struct strvec *made, int *out, char **holder)
{
	char *path = path_join(dir, "lock");
	uint64_t deadline = now_ns() + (uint64_t)(timeout * 1e9);
	int fd = -1, rc = 0, vanished = 0;
	for (;;) {
		if (fd < 0 && made) {
			note_missing_dirs(made, dir);
			if (mkdirs_at(AT_FDCWD, dir, 0755) != 0) {
				rc = TF_ESTATE;
				goto out;
			}
		}
		if (fd < 0)
			fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0 && !(errno == ENOENT && made)) {
			rc = TF_ESTATE;
			goto out;
		}
		if (fd < 0 && ++vanished < 100)
			continue; /* a holder that created no state removed the directory: again */
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
			struct stat held, now;
			if (fstat(fd, &held) == 0 && stat(path, &now) == 0 &&
			    held.st_dev == now.st_dev && held.st_ino == now.st_ino)
				break;
			close(fd); /* its holder removed it on the way out: open the path again */
			fd = -1;
			continue;
		}
		if (fd >= 0 && errno != EWOULDBLOCK && errno != EINTR) {
			rc = TF_ESTATE;
			goto out;
		}
		if (now_ns() >= deadline || tf_interrupted) {
			if (holder)
				*holder = fd >= 0 ? read_holder(fd) : xstrdup("unknown holder");
			rc = TF_ELOCKED;
			goto out;
		}
		usleep(50 * 1000);
	}
	char host[128] = "unknown";
	gethostname(host, sizeof(host) - 1);
	char when[64];
	time_t t = time(NULL);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	char *msg = xasprintf("pid %ld on %s since %s\n", (long)getpid(), host, when);
	if (ftruncate(fd, 0) == 0 && pwrite(fd, msg, strlen(msg), 0) < 0) {
		/* The message is advisory; the lock itself is what matters. */
	}
	free(msg);
	*out = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

int state_lock(struct state *st, double timeout, char **holder)
{
	return take_lock(st->dir, timeout, NULL, &st->lockfd, holder);
}

void state_unlock(struct state *st)
{
	if (st->lockfd >= 0) {
		close(st->lockfd); /* releases the flock */
		st->lockfd = -1;
	}
}

int state_writer_lock(const char *dir, double timeout, struct state_writer **out, char **holder)
{
	struct state_writer *w = xcalloc(1, sizeof(*w));
	w->path = path_join(dir, "lock");
	int rc = take_lock(dir, timeout, &w->made, &w->fd, holder);
	if (rc != 0) {
		/* Not the holder: remove what this attempt created, if it is still empty. */
		for (size_t i = 0; i < w->made.n; i++)
			rmdir(w->made.v[i]);
		strvec_release(&w->made);
		free(w->path);
		free(w);
		*out = NULL;
		return rc;
	}
	*out = w;
	return 0;
}

void state_writer_unlock(struct state_writer *w, int forget)
{
	if (w == NULL)
		return;
	if (forget) {
		/* Still holding the lock: a waiter that wins the old file sees it gone. */
		unlink(w->path);
		for (size_t i = 0; i < w->made.n; i++)
			rmdir(w->made.v[i]); /* only if empty; in order, deepest first */
	}
	close(w->fd);
	strvec_release(&w->made);
	free(w->path);
	free(w);
}

/* Runs `sql` with one text parameter; the first column of the first row, or 0. */
static int64_t query_int_text(struct state *st, const char *sql, const char *text)
{
	sqlite3_stmt *s = NULL;
	int64_t v = 0;
	sq_prepare(st, sql, &s);
	sqlite3_bind_text(s, 1, text, -1, SQLITE_STATIC);
	if (sq_step(s) == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

int64_t state_stack_id(struct state *st, const char *name)
{
	return query_int_text(st, "SELECT id FROM stacks WHERE name = ?", name);
}

int64_t state_stack_ensure(struct state *st, const char *name, const char *manifest_path)
{
	int64_t id = state_stack_id(st, name);
	sqlite3_stmt *s = NULL;
	if (id)
		return id; /* its manifest_path changes when a run commits (state_stack_applied) */
	sq_prepare(st,
	           "INSERT INTO stacks(name, manifest_path, created, updated) "
	           "VALUES (?, ?, ?, ?)",
	           &s);
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, manifest_path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, now_unix());
	sqlite3_bind_int64(s, 4, now_unix());
	if (sq_step(s) == SQLITE_DONE)
		id = sqlite3_last_insert_rowid(st->db);
	sqlite3_finalize(s);
	return id;
}

int state_stack_applied(struct state *st, int64_t id, const char *manifest_path)
{
	sqlite3_stmt *s = NULL;
	if (sq_prepare(st, "UPDATE stacks SET manifest_path = ?, updated = ? WHERE id = ?", &s) !=
	    SQLITE_OK)
		return TF_ESTATE;
	sqlite3_bind_text(s, 1, manifest_path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, now_unix());
	sqlite3_bind_int64(s, 3, id);
	int rc = sq_step(s) == SQLITE_DONE ? 0 : TF_ESTATE;
	sqlite3_finalize(s);
	return rc;
}

int64_t state_gen_begin(struct state *st, int64_t stack_id, const char *manifest_path,
                        const char *manifest_sha256, const char *manifest_text)
{
	sqlite3_stmt *s = NULL;
	int64_t id = 0;
	sq_prepare(st,
	           "INSERT INTO generations(stack_id, manifest_path, manifest_sha256, "
	           "manifest_text, started) VALUES (?, ?, ?, ?, ?)",
	           &s);
	sqlite3_bind_int64(s, 1, stack_id);
	sqlite3_bind_text(s, 2, manifest_path, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, manifest_sha256, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, manifest_text, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, now_unix());
	if (sq_step(s) == SQLITE_DONE)
		id = sqlite3_last_insert_rowid(st->db);
	sqlite3_finalize(s);
	return id;
}

int state_gen_finish(struct state *st, int64_t gen_id, const char *result)
{
	sqlite3_stmt *s = NULL;
	/*
	 * One transaction: a kill between the two statements left a generation
	 * "ok" that the stack did not point at, and nothing ever finished it.
	 */
	int rc = state_exec(st, "SAVEPOINT gen_finish");
	if (rc != 0)
		return rc;
	sq_prepare(st, "UPDATE generations SET finished = ?, result = ? WHERE id = ?", &s);
	sqlite3_bind_int64(s, 1, now_unix());
	sqlite3_bind_text(s, 2, result, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, gen_id);
	if (sq_step(s) != SQLITE_DONE)
		rc = TF_ESTATE;
	sqlite3_finalize(s);
	if (rc == 0 && strcmp(result, "ok") == 0) {
		sq_prepare(st,
		           "UPDATE stacks SET current_gen = ?, updated = ? WHERE id = "
		           "(SELECT stack_id FROM generations WHERE id = ?)",
		           &s);
		sqlite3_bind_int64(s, 1, gen_id);
		sqlite3_bind_int64(s, 2, now_unix());
		sqlite3_bind_int64(s, 3, gen_id);
		if (sq_step(s) != SQLITE_DONE)
			rc = TF_ESTATE;
		sqlite3_finalize(s);
	}
	if (rc == 0)
		rc = state_exec(st, "RELEASE gen_finish");
	if (rc != 0) {
		state_exec(st, "ROLLBACK TO gen_finish");
		state_exec(st, "RELEASE gen_finish");
	}
	return rc;
}

static char *col_dup(sqlite3_stmt *s, int i)
{
	const unsigned char *t = sqlite3_column_text(s, i);
	return t ? xstrdup((const char *)t) : NULL;
}

int state_resource_get(struct state *st, int64_t stack_id, const char *addr,
                       struct state_resource *out)
{
	sqlite3_stmt *s = NULL;
	int rc = -ENOENT;
	memset(out, 0, sizeof(*out));
	sq_prepare(st,
	           "SELECT id, addr, kind, desired, attrs FROM resources "
	           "WHERE stack_id = ? AND addr = ?",
	           &s);
	sqlite3_bind_int64(s, 1, stack_id);
	sqlite3_bind_text(s, 2, addr, -1, SQLITE_STATIC);
	if (sq_step(s) == SQLITE_ROW) {
		out->id = sqlite3_column_int64(s, 0);
		out->addr = col_dup(s, 1);
		out->kind = col_dup(s, 2);
		out->desired = col_dup(s, 3);
		out->attrs = col_dup(s, 4);
		rc = 0;
	}
	sqlite3_finalize(s);
	return rc;
}

void state_resource_release(struct state_resource *r)
{
	free(r->addr);
	free(r->kind);
	free(r->desired);
	free(r->attrs);
	memset(r, 0, sizeof(*r));
}

int64_t state_resource_put(struct state *st, int64_t stack_id, const char *addr, const char *kind,
                           const char *desired, const char *attrs)
{
	sqlite3_stmt *s = NULL;
	int64_t id = 0;
	sq_prepare(st,
	           "INSERT INTO resources(stack_id, addr, kind, desired, attrs, updated) "
	           "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(stack_id, addr) DO UPDATE SET "
	           "kind = excluded.kind, desired = excluded.desired, "
	           "attrs = excluded.attrs, updated = excluded.updated RETURNING id",
	           &s);
	sqlite3_bind_int64(s, 1, stack_id);
	sqlite3_bind_text(s, 2, addr, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, desired, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 5, attrs, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 6, now_unix());
	if (sq_step(s) == SQLITE_ROW)
		id = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return id;
}

int state_resource_delete(struct state *st, int64_t res_id)
{
	sqlite3_stmt *s = NULL;
	int rc = 0;
	sq_prepare(st, "DELETE FROM resources WHERE id = ?", &s);
	sqlite3_bind_int64(s, 1, res_id);
	if (sq_step(s) != SQLITE_DONE)
		rc = TF_ESTATE;
	sqlite3_finalize(s);
	return rc;
}

int state_file_put(struct state *st, int64_t res_id, const struct state_file *f)
{
	sqlite3_stmt *s = NULL;
	int rc = 0;
	char type[2] = {f->type, 0};
	sq_prepare(st,
	           "INSERT OR REPLACE INTO files(path, resource_id, type, sha256, size, mode, "
	           "mtime_ns, link) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
	           &s);
	sqlite3_bind_text(s, 1, f->path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, res_id);
	sqlite3_bind_text(s, 3, type, -1, SQLITE_STATIC);
	if (f->sha256[0])
		sqlite3_bind_text(s, 4, f->sha256, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, f->size);
	sqlite3_bind_int(s, 6, (int)f->mode);
	sqlite3_bind_int64(s, 7, f->mtime_ns);
	if (f->link)
		sqlite3_bind_text(s, 8, f->link, -1, SQLITE_STATIC);
	if (sq_step(s) != SQLITE_DONE)
		rc = TF_ESTATE;
	sqlite3_finalize(s);
	return rc;
}

int state_file_delete(struct state *st, const char *path)
{
	sqlite3_stmt *s = NULL;
	int rc = 0;
	sq_prepare(st, "DELETE FROM files WHERE path = ?", &s);
	sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
	if (sq_step(s) != SQLITE_DONE)
		rc = TF_ESTATE;
	sqlite3_finalize(s);
	return rc;
}

int64_t state_file_owner(struct state *st, const char *path)
{
	return query_int_text(st, "SELECT resource_id FROM files WHERE path = ? LIMIT 1", path);
}

int state_file_release(struct state *st, int64_t res_id, const char *path)
{
	sqlite3_stmt *s = NULL;
	int rc = 0;
	sq_prepare(st, "DELETE FROM files WHERE path = ? AND resource_id = ?", &s);
	sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, res_id);
	if (sq_step(s) != SQLITE_DONE)
		rc = TF_ESTATE;
	sqlite3_finalize(s);
	return rc;
}

int state_file_other(struct state *st, const char *path, int64_t res_id, struct state_file *out,
                     char **stack)
{
	sqlite3_stmt *s = NULL;
	int rc = 0;
	memset(out, 0, sizeof(*out));
	if (stack)
		*stack = NULL;
	sq_prepare(st,
	           "SELECT f.type, f.sha256, f.size, f.mode, f.mtime_ns, f.link, f.resource_id, "
	           "st.name FROM files f JOIN resources r ON r.id = f.resource_id JOIN stacks st "
	           "ON st.id = r.stack_id WHERE f.path = ? AND f.resource_id <> ? "
	           "ORDER BY f.resource_id LIMIT 1",
	           &s);
	sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, res_id);
	int r = sq_step(s);
	if (r == SQLITE_ROW) {
		const unsigned char *t = sqlite3_column_text(s, 0);
		out->type = t ? (char)t[0] : 'f';
		const unsigned char *h = sqlite3_column_text(s, 1);
		if (h)
			snprintf(out->sha256, sizeof(out->sha256), "%s", (const char *)h);
		out->size = sqlite3_column_int64(s, 2);
		out->mode = (unsigned)sqlite3_column_int(s, 3);
		out->mtime_ns = sqlite3_column_int64(s, 4);
		const unsigned char *l = sqlite3_column_text(s, 5);
		out->link = l ? xstrdup((const char *)l) : NULL;
		out->resource_id = sqlite3_column_int64(s, 6);
		out->path = xstrdup(path);
		if (stack)
			*stack = xstrdup((const char *)sqlite3_column_text(s, 7));
	} else if (r != SQLITE_DONE) {
		rc = TF_ESTATE;
	}
	sqlite3_finalize(s);
	return rc;
}

int state_file_recorded_by(struct state *st, const char *path, int64_t res_id)
{
	sqlite3_stmt *s = NULL;
	sq_prepare(st, "SELECT 1 FROM files WHERE path = ? AND resource_id = ?", &s);
	sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, res_id);
	int found = sq_step(s) == SQLITE_ROW;
	sqlite3_finalize(s);
	return found;
}

int state_sharers_under(struct state *st, const char *addr, int64_t stack_id, const char *prefix,
                        struct strvec *stacks, struct strvec *desired, struct strvec *attrs)
{
	sqlite3_stmt *s = NULL;
	int rc;
	sq_prepare(
	    st,
	    "SELECT st.name, r.desired, coalesce(r.attrs, '') FROM resources r JOIN stacks st "
	    "ON st.id = r.stack_id "
	    "WHERE r.addr = ?1 AND r.stack_id <> ?2 AND EXISTS (SELECT 1 FROM files f WHERE "
	    /* One range of the (resource_id, path) index: an OR of the path and
	     * its subtree scanned every file of each other stack's resource
	     * (bench/many_stacks.py: the no-op grew with the stacks). [P, P||'0')
	     * holds P, P/... and siblings such as P-x, which the substr drops. */
	    "f.resource_id = r.id AND f.path >= ?3 AND f.path < ?3 || '0' AND (f.path = ?3 "
	    "OR substr(f.path, length(?3) + 1, 1) = '/')) ORDER BY st.name",
	    &s);
	sqlite3_bind_text(s, 1, addr, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, stack_id);
	sqlite3_bind_text(s, 3, prefix, -1, SQLITE_STATIC);
	while ((rc = sq_step(s)) == SQLITE_ROW) {
		strvec_push(stacks, (const char *)sqlite3_column_text(s, 0));
		if (desired)
			strvec_push(desired, (const char *)sqlite3_column_text(s, 1));
		if (attrs)
			strvec_push(attrs, (const char *)sqlite3_column_text(s, 2));
	}
	sqlite3_finalize(s);
	return rc == SQLITE_DONE ? 0 : TF_ESTATE;
}

int state_foreign_step_file_under(struct state *st, const char *addr, const char *stack,
                                  const char *prefix, char **other_stack, char **path)
{
	sqlite3_stmt *q = NULL;
	int rc = 0;
	*other_stack = *path = NULL;
	if (sqlite3_prepare_v2(
	        st->db,
	        "SELECT st.name, f.path FROM files f JOIN resources r ON r.id = "
	        "f.resource_id JOIN stacks st ON st.id = r.stack_id WHERE r.addr = ?3 "
	        "AND st.name <> ?1 AND f.path > ?2 || '/' AND f.path < ?2 || '0' "
	        "LIMIT 1",
	        -1, &q, NULL) != SQLITE_OK)
		return state_note_failure(st->db, "cannot prepare a state query");
	sqlite3_bind_text(q, 1, stack, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, prefix, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 3, addr, -1, SQLITE_STATIC);
	int r = sqlite3_step(q);
	if (r == SQLITE_ROW) {
		*other_stack = xstrdup((const char *)sqlite3_column_text(q, 0));
		*path = xstrdup((const char *)sqlite3_column_text(q, 1));
	} else if (r != SQLITE_DONE) {
		rc = state_note_failure(st->db, "a state query failed");
	}
	sqlite3_finalize(q);
	return rc;
}

int state_files_foreach(struct state *st, int64_t res_id, state_file_cb cb, void *arg)
{
	sqlite3_stmt *s = NULL;
	int rc = 0;
	sq_prepare(st,
	           "SELECT path, type, sha256, size, mode, mtime_ns, link, resource_id "
	           "FROM files WHERE resource_id = ? ORDER BY path",
	           &s);
	sqlite3_bind_int64(s, 1, res_id);
	while ((rc = sq_step(s)) == SQLITE_ROW) {
		struct state_file f;
		memset(&f, 0, sizeof(f));
		f.path = (char *)sqlite3_column_text(s, 0);
		const unsigned char *t = sqlite3_column_text(s, 1);
		f.type = t ? (char)t[0] : 'f';
		const unsigned char *h = sqlite3_column_text(s, 2);
		if (h)
			snprintf(f.sha256, sizeof(f.sha256), "%s", (const char *)h);
		f.size = sqlite3_column_int64(s, 3);
		f.mode = (unsigned)sqlite3_column_int(s, 4);
		f.mtime_ns = sqlite3_column_int64(s, 5);
		f.link = (char *)sqlite3_column_text(s, 6);
		f.resource_id = sqlite3_column_int64(s, 7);
		int r = cb(&f, arg);
		if (r != 0) {
			sqlite3_finalize(s);
			return r;
		}
	}
	sqlite3_finalize(s);
	return rc == SQLITE_DONE ? 0 : TF_ESTATE;
}

int64_t state_files_count(struct state *st, int64_t res_id)
{
	sqlite3_stmt *s = NULL;
	int64_t n = 0;
	sq_prepare(st, "SELECT count(*) FROM files WHERE resource_id = ?", &s);
	sqlite3_bind_int64(s, 1, res_id);
	if (sq_step(s) == SQLITE_ROW)
		n = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return n;
}

const char *state_errmsg(struct state *st)
{
	return st && st->db ? sqlite3_errmsg(st->db) : "no state database";
}
