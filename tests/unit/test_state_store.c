/*
 * test_state_store.c - the store's named operations (state.h): the journal
 * the placement layer writes, stacks and generations as status, show, diff,
 * rollback and gc read them, the records of resources and files, and the
 * step's own answer about its attrs (module_installed), all on a real
 * SQLite database in a temporary directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "error.h"
#include "module.h"
#include "state.h"
#include "util.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

struct fixture {
	char *dir;
	struct state *st;
};

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	char tmpl[] = "/tmp/tfprov-store-XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	f->dir = xstrdup(tmpl);
	struct why err = {0};
	assert_int_equal(state_open(f->dir, 1, &f->st, &err), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	state_close(f->st);
	char *cmd = xasprintf("rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(f->dir);
	free(f);
	return 0;
}

/* Runs SQL on the database through a second connection (what an older tfprov or a
 * damaged file would hold). */
static void raw(struct fixture *f, const char *sql)
{
	char *db = path_join(f->dir, "state.db");
	sqlite3 *h = NULL;
	assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
	assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(h);
	free(db);
}

/* One generation of a stack, finished with `result`. */
static int64_t gen(struct state *st, int64_t sid, const char *path, const char *text,
                   const char *result)
{
	int64_t g = state_gen_begin(st, sid, path, "00", text);
	assert_true(g > 0);
	if (result)
		assert_int_equal(state_gen_finish(st, g, result), 0);
	return g;
}

static void test_journal_add_get_list_and_settle(void **state)
{
	struct fixture *f = *state;
	int64_t put = 0, mk = 0, rm = 0;
	assert_int_equal(state_journal_add(f->st, "put", "/opt/a", "/opt/.s/a", "/opt/.bak", &put),
	                 0);
	assert_int_equal(state_journal_add(f->st, "mkdir", "/opt/d", NULL, NULL, &mk), 0);
	assert_int_equal(state_journal_add(f->st, "rm", "/opt/b", NULL, "/opt/.del", &rm), 0);
	assert_true(put > 0 && mk > put && rm > mk);

	struct state_journal_entry e;
	assert_int_equal(state_journal_get(f->st, put, &e), 0);
	assert_int_equal(e.id, put);
	assert_string_equal(e.op, "put");
	assert_string_equal(e.path, "/opt/a");
	assert_string_equal(e.tmp, "/opt/.s/a");
	assert_string_equal(e.backup, "/opt/.bak");
	state_journal_entry_release(&e);
	assert_int_equal(state_journal_get(f->st, mk, &e), 0);
	assert_null(e.tmp);
	assert_null(e.backup);
	state_journal_entry_release(&e);
	assert_int_equal(state_journal_get(f->st, rm + 100, &e), 0);
	assert_int_equal(e.id, 0); /* absent */

	/* Newest first: recovery undoes in reverse. */
	struct state_journal_entry *v = NULL;
	size_t n = 0;
	assert_int_equal(state_journal_list(f->st, NULL, &v, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].id, rm);
	assert_int_equal(v[2].id, put);
	state_journal_free(v, n);

	/* Committed: an entry with a backup stays as "gc", one without goes. */
	assert_int_equal(state_journal_settle(f->st, put), 0);
	assert_int_equal(state_journal_settle(f->st, mk), 0);
	assert_int_equal(state_journal_list(f->st, "gc", &v, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(v[0].id, put);
	assert_string_equal(v[0].backup, "/opt/.bak");
	state_journal_free(v, n);
	assert_int_equal(state_journal_get(f->st, mk, &e), 0);
	assert_int_equal(e.id, 0);

	assert_int_equal(state_journal_add(f->st, "rmdir", "/opt/x", NULL, NULL, NULL), 0);
	assert_int_equal(state_journal_clear(f->st, "rmdir"), 0);
	assert_int_equal(state_journal_list(f->st, NULL, &v, &n), 0);
	assert_int_equal(n, 2); /* the gc and the rm entries */
	state_journal_free(v, n);
	assert_int_equal(state_journal_delete(f->st, rm), 0);
	assert_int_equal(state_journal_list(f->st, NULL, &v, &n), 0);
	assert_int_equal(n, 1);
	state_journal_free(v, n);
	assert_int_equal(state_journal_clear(f->st, NULL), 0);
	assert_int_equal(state_journal_list(f->st, NULL, &v, &n), 0);
	assert_int_equal(n, 0);
	assert_null(v);
}

/* Generations are numbered per stack, whatever the other stacks did in between. */
static void test_generations_are_numbered_per_stack(void **state)
{
	struct fixture *f = *state;
	int64_t a = state_stack_ensure(f->st, "a", "/a.yaml");
	int64_t b = state_stack_ensure(f->st, "b", "/b.yaml");
	gen(f->st, a, "/a1.yaml", "a: 1", "ok");
	gen(f->st, b, "/b1.yaml", "b: 1", "ok");
	gen(f->st, a, "/a2.yaml", "a: 2", "failed");
	gen(f->st, a, "/a3.yaml", "a: 3", NULL); /* still running */

	struct state_gen *v = NULL;
	size_t n = 0;
	assert_int_equal(state_gens_list(f->st, a, &v, &n), 0);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(v[i].number, (int64_t)i + 1);
		assert_string_equal(v[i].stack, "a");
	}
	assert_string_equal(v[1].result, "failed");
	assert_string_equal(v[2].result, "running");
	assert_int_equal(v[2].finished, 0);
	assert_string_equal(v[2].manifest_text, "a: 3");
	state_gens_free(v, n);

	assert_int_equal(state_gens_list(f->st, 0, &v, &n), 0); /* every stack, oldest first */
	assert_int_equal(n, 4);
	assert_string_equal(v[1].stack, "b");
	assert_int_equal(v[1].number, 1);
	assert_int_equal(v[2].number, 2);
	state_gens_free(v, n);

	struct state_gen g;
	assert_int_equal(state_gen_by_number(f->st, a, 2, &g), 0);
	assert_string_equal(g.manifest_path, "/a2.yaml");
	assert_int_equal(g.number, 2);
	state_gen_release(&g);
	assert_int_equal(state_gen_by_number(f->st, a, 4, &g), 0);
	assert_int_equal(g.id, 0);
	assert_int_equal(state_gen_by_number(f->st, a, 0, &g), 0);
	assert_int_equal(g.id, 0);

	/* A kill left generation 3 running: recovery marks it interrupted. */
	assert_int_equal(state_gens_interrupted(f->st), 0);
	assert_int_equal(state_gen_by_number(f->st, a, 3, &g), 0);
	assert_string_equal(g.result, "interrupted");
	assert_true(g.finished > 0);
	state_gen_release(&g);
}

static void test_current_generation_and_rollback_target(void **state)
{
	struct fixture *f = *state;
	int64_t a = state_stack_ensure(f->st, "a", "/a.yaml");
	struct state_gen g;
	assert_int_equal(state_gen_current(f->st, "a", &g), 0);
	assert_int_equal(g.id, 0); /* nothing applied yet */
	assert_int_equal(state_gen_rollback_target(f->st, a, 0, &g), 0);
	assert_int_equal(g.id, 0);

	gen(f->st, a, NULL, "a: 1", "ok"); /* no path of its own: the stack's */
	gen(f->st, a, "/a2.yaml", "a: 2", "failed");
	int64_t g3 = gen(f->st, a, "/a3.yaml", "a: 3", "ok");
	gen(f->st, a, "/a4.yaml", "a: 4", "failed");

	assert_int_equal(state_gen_current(f->st, "a", &g), 0);
	assert_int_equal(g.id, g3);
	assert_int_equal(g.number, 3);
	assert_int_equal(g.stack_id, a);
	assert_string_equal(g.manifest_text, "a: 3");
	state_gen_release(&g);
	assert_int_equal(state_gen_current(f->st, "nope", &g), 0);
	assert_int_equal(g.id, 0);

	/* Back from 3: the last success before the current one is 1, whose path is the stack's. */
	assert_int_equal(state_gen_rollback_target(f->st, a, 0, &g), 0);
	assert_int_equal(g.number, 1);
	assert_string_equal(g.manifest_text, "a: 1");
	state_gen_release(&g);
	assert_int_equal(state_gen_rollback_target(f->st, a, 3, &g), 0);
	assert_int_equal(g.id, g3);
	state_gen_release(&g);
	assert_int_equal(state_gen_rollback_target(f->st, a, 2, &g), 0);
	assert_int_equal(g.id, 0); /* generation 2 failed */
	assert_int_equal(state_gen_rollback_target(f->st, a, 9, &g), 0);
	assert_int_equal(g.id, 0);
}

static void test_current_generation_path_falls_back_to_the_stack(void **state)
{
	struct fixture *f = *state;
	int64_t a = state_stack_ensure(f->st, "a", "/a.yaml");
	gen(f->st, a, NULL, "a: 1", "ok");
	struct state_gen g;
	assert_int_equal(state_gen_current(f->st, "a", &g), 0);
	assert_string_equal(g.manifest_path, "/a.yaml");
	state_gen_release(&g);
	/* The same generation listed keeps what was recorded: no path. */
	assert_int_equal(state_gen_by_number(f->st, a, 1, &g), 0);
	assert_null(g.manifest_path);
	state_gen_release(&g);
}

static void test_stacks_list_names_and_delete(void **state)
{
	struct fixture *f = *state;
	int64_t b = state_stack_ensure(f->st, "b", "/b.yaml");
	int64_t a = state_stack_ensure(f->st, "a", "/a.yaml");
	gen(f->st, b, "/b1.yaml", "b: 1", "ok");
	gen(f->st, b, "/b2.yaml", "b: 2", "interrupted");
	int64_t rid = state_resource_put(f->st, b, "env", "env", "d1", NULL);
	struct state_file file = {.path = "/etc/b.sh", .type = 'f', .size = 1, .mode = 0644};
	assert_int_equal(state_file_put(f->st, rid, &file), 0);

	struct state_stack_info *v = NULL;
	size_t n = 0;
	assert_int_equal(state_stacks_list(f->st, &v, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(v[0].name, "a"); /* name order */
	assert_int_equal(v[0].id, a);
	assert_int_equal(v[0].gen, 0);
	assert_int_equal(v[0].ngens, 0);
	assert_int_equal(v[0].applied, 0);
	assert_null(v[0].last_result);
	assert_string_equal(v[1].name, "b");
	assert_int_equal(v[1].gen, 1);
	assert_true(v[1].applied > 0);
	assert_int_equal(v[1].ngens, 2);
	assert_int_equal(v[1].last_gen, 2);
	assert_string_equal(v[1].last_result, "interrupted");
	assert_string_equal(v[1].last_manifest, "/b2.yaml");
	assert_string_equal(v[1].manifest_path, "/b.yaml");
	state_stacks_free(v, n);

	struct strvec names = STRVEC_INIT;
	assert_int_equal(state_stack_names(f->st, &names), 0);
	assert_int_equal(names.n, 2);
	assert_string_equal(names.v[0], "a");
	assert_string_equal(names.v[1], "b");
	strvec_release(&names);

	/* Deleting a stack takes its generations, resources and files along. */
	assert_int_equal(state_stack_delete(f->st, b), 0);
	assert_int_equal(state_stack_id(f->st, "b"), 0);
	assert_int_equal(state_file_owner(f->st, "/etc/b.sh"), 0);
	struct state_gen *g = NULL;
	assert_int_equal(state_gens_list(f->st, 0, &g, &n), 0);
	assert_int_equal(n, 0);
	state_gens_free(g, n);
}

static void put_file(struct state *st, int64_t rid, const char *path, char type)
{
	struct state_file f = {.path = (char *)path, .type = type, .size = 3, .mode = 0755};
	f.mtime_ns = 42;
	if (type == 'f')
		memcpy(f.sha256, "ab", 3);
	assert_int_equal(state_file_put(st, rid, &f), 0);
}

struct seen {
	struct strvec paths;
	int64_t sizes;
	int stop_after; /* 0: never */
};

static int see(const struct state_file *f, void *arg)
{
	struct seen *s = arg;
	strvec_push(&s->paths, f->path);
	s->sizes += f->size;
	assert_int_equal(f->mtime_ns, 42);
	assert_int_equal(f->mode, 0755);
	return s->stop_after && (int)s->paths.n == s->stop_after ? 7 : 0;
}

static void test_records_of_resources_and_files(void **state)
{
	struct fixture *f = *state;
	int64_t a = state_stack_ensure(f->st, "a", "/a.yaml");
	int64_t b = state_stack_ensure(f->st, "b", "/b.yaml");
	int64_t env = state_resource_put(f->st, a, "pyenv", "pyenv", "d1", NULL);
	int64_t pip = state_resource_put(f->st, a, "pip", "pip", "d2", "{\"installed\":[]}");
	int64_t other = state_resource_put(f->st, b, "pyenv", "pyenv", "d3", NULL);
	put_file(f->st, env, "/opt/envs/a", 'd');
	put_file(f->st, env, "/opt/envs/a/bin", 'd');
	put_file(f->st, env, "/opt/envs/a/bin/python", 'l');
	put_file(f->st, env, "/opt/envs/a/pyvenv.cfg", 'f');
	put_file(f->st, env, "/opt/envs/ab", 'd'); /* a sibling, not under /opt/envs/a */
	put_file(f->st, other, "/opt/envs/b", 'd');

	struct state_resource *v = NULL;
	size_t n = 0;
	assert_int_equal(state_resources_list(f->st, a, &v, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(v[0].id, env);
	assert_string_equal(v[1].addr, "pip");
	assert_string_equal(v[1].kind, "pip");
	assert_string_equal(v[1].desired, "d2");
	assert_string_equal(v[1].attrs, "{\"installed\":[]}");
	assert_null(v[0].attrs);
	state_resources_free(v, n);

	int match = -1;
	assert_int_equal(state_resource_matches(f->st, env, a, "pyenv", &match), 0);
	assert_int_equal(match, 1);
	assert_int_equal(state_resource_matches(f->st, env, b, "pyenv", &match), 0);
	assert_int_equal(match, 0);
	assert_int_equal(state_resource_matches(f->st, pip, a, "pyenv", &match), 0);
	assert_int_equal(match, 0);

	struct state_file_counts k;
	assert_int_equal(state_files_counts(f->st, env, &k), 0);
	assert_int_equal(k.paths, 5);
	assert_int_equal(k.files, 1);
	assert_int_equal(k.links, 1);
	assert_int_equal(k.dirs, 3);
	assert_int_equal(state_files_counts(f->st, pip, &k), 0);
	assert_int_equal(k.paths, 0);

	struct seen s = {STRVEC_INIT, 0, 0};
	assert_int_equal(state_files_foreach_stat(f->st, env, see, &s), 0);
	assert_int_equal(s.paths.n, 5);
	assert_string_equal(s.paths.v[0], "/opt/envs/a"); /* path order */
	assert_string_equal(s.paths.v[4], "/opt/envs/ab");
	assert_int_equal(s.sizes, 15);
	strvec_release(&s.paths);
	s.stop_after = 2; /* the callback's non-zero return stops and is returned */
	assert_int_equal(state_files_foreach_stat(f->st, env, see, &s), 7);
	assert_int_equal(s.paths.n, 2);
	strvec_release(&s.paths);

	struct strvec dirs = STRVEC_INIT;
	assert_int_equal(state_stack_dirs(f->st, a, &dirs), 0);
	assert_int_equal(dirs.n, 3);
	assert_string_equal(dirs.v[0], "/opt/envs/a");
	assert_string_equal(dirs.v[1], "/opt/envs/a/bin");
	assert_string_equal(dirs.v[2], "/opt/envs/ab");
	strvec_release(&dirs);

	char *top = NULL;
	assert_int_equal(state_step_top_dir(f->st, a, "pyenv", &top), 0);
	assert_string_equal(top, "/opt/envs/a");
	free(top);
	assert_int_equal(state_step_top_dir(f->st, a, "pip", &top), 0);
	assert_null(top);

	int found = -1;
	assert_int_equal(state_file_any_under(f->st, "/opt/envs/a", &found), 0);
	assert_int_equal(found, 1);
	assert_int_equal(state_file_any_under(f->st, "/opt/envs/a/bin/python", &found), 0);
	assert_int_equal(found, 0);
	assert_int_equal(state_file_any_under(f->st, "/srv", &found), 0);
	assert_int_equal(found, 0);

	/* The tree of /opt/envs/a goes; its sibling /opt/envs/ab stays. */
	assert_int_equal(state_file_delete_tree(f->st, "/opt/envs/a"), 0);
	assert_int_equal(state_files_count(f->st, env), 1);
	assert_int_equal(state_file_owner(f->st, "/opt/envs/ab"), env);
	assert_int_equal(state_files_delete(f->st, env), 0);
	assert_int_equal(state_files_count(f->st, env), 0);
	assert_int_equal(state_file_owner(f->st, "/opt/envs/b"), other);
}

/* A query that cannot run is an error, never an empty answer, and it is remembered. */
static void test_a_failed_query_is_an_error_not_an_empty_answer(void **state)
{
	struct fixture *f = *state;
	raw(f, "DROP TABLE journal; DROP TABLE files;");
	struct state_journal_entry *v = NULL;
	size_t n = 0;
	assert_int_equal(state_journal_list(f->st, NULL, &v, &n), TF_ESTATE);
	assert_int_equal(n, 0);
	int found = -1;
	assert_int_equal(state_file_any_under(f->st, "/opt", &found), TF_ESTATE);
	assert_int_equal(found, 0);
	char *top = (char *)"x";
	assert_int_equal(state_step_top_dir(f->st, 1, "pyenv", &top), TF_ESTATE);
	assert_null(top);
	assert_int_equal(state_journal_add(f->st, "put", "/a", NULL, NULL, NULL), TF_ESTATE);
	assert_non_null(state_failure());
	assert_non_null(strstr(state_failure(), "journal"));
}

/* Status and show ask the step about its attrs; only pip records distributions. */
static void test_the_step_answers_for_its_attrs(void **unused)
{
	(void)unused;
	int listed = -1;
	int64_t n = -1;
	assert_int_equal(module_installed("pip",
	                                  "{\"installed\":[{\"name\":\"a\"},{\"name\":\"b\"}],"
	                                  "\"unhashed\":[]}",
	                                  NULL, &listed, &n),
	                 0);
	assert_int_equal(listed, 1);
	assert_int_equal(n, 2);
	/* The names, PEP 503-normalised, for the planner and the env's file index. */
	struct strvec names = STRVEC_INIT;
	assert_int_equal(module_installed("pip", "{\"installed\":[{\"name\":\"Tf_Keras\"}]}",
	                                  &names, &listed, &n),
	                 0);
	assert_int_equal(names.n, 1);
	assert_string_equal(names.v[0], "tf-keras");
	strvec_release(&names);
	assert_int_equal(module_installed("pip", "{\"installed\":[]}", NULL, &listed, &n), 0);
	assert_int_equal(listed, 1);
	assert_int_equal(n, 0);
	assert_int_equal(module_installed("pip", "{}", NULL, &listed, &n), 0);
	assert_int_equal(listed, 0);
	assert_int_equal(module_installed("pip", NULL, NULL, &listed, &n), 0);
	assert_int_equal(listed, 0);
	assert_int_equal(module_installed("pip", "{\"installed\":", NULL, &listed, &n), TF_ESTATE);
	assert_int_equal(module_installed("env", "{\"installed\":[1]}", NULL, &listed, &n), 0);
	assert_int_equal(listed, 0); /* not the env step's to say */
	assert_int_equal(module_installed("nope", NULL, NULL, &listed, &n), 0);
	assert_int_equal(listed, 0);
	assert_null(module_find("nope"));
	assert_ptr_equal(module_find("pip"), &module_pip);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_journal_add_get_list_and_settle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_generations_are_numbered_per_stack, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_current_generation_and_rollback_target, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_current_generation_path_falls_back_to_the_stack,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stacks_list_names_and_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_records_of_resources_and_files, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_failed_query_is_an_error_not_an_empty_answer,
	                                    setup, teardown),
	    cmocka_unit_test(test_the_step_answers_for_its_attrs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
