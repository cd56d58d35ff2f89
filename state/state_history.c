/*
 * state_history.c - stacks and their generations read back: what status,
 * show, diff, rollback, gc and the stack information (engine/run/stackinfo.c)
 * ask of the store.
 *
 * Generations are numbered per stack from 1 (the numbers `show`,
 * `rollback --generation` and `diff --generation` take); the number is
 * counted here, never stored, so destroying a stack and applying it again
 * starts again at 1.
 */
#include "error.h"
#include "state_private.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

int state_stack_names(struct state *st, struct strvec *out)
{
	struct state_stmt *s = NULL;
	int r;
	state_prepare(st, "SELECT name FROM stacks ORDER BY name", &s);
	while ((r = state_step(s)) == STATE_ROW)
		strvec_push(out, state_col_text(s, 0));
	state_finalize(s);
	return r == STATE_DONE ? 0 : TF_ESTATE;
}

int state_stack_delete(struct state *st, int64_t id)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "DELETE FROM stacks WHERE id = ?", &s);
	state_bind_int64(s, 1, id);
	return state_run(s);
}

int state_stacks_list(struct state *st, struct state_stack_info **v, size_t *n)
{
	struct state_stmt *s = NULL;
	size_t cap = 0;
	int r;
	*v = NULL;
	*n = 0;
	state_prepare(st,
	              "SELECT s.id, s.name, s.manifest_path,"
	              " (SELECT count(*) FROM generations WHERE stack_id = s.id AND id <= "
	              "s.current_gen), g.finished,"
	              " (SELECT count(*) FROM generations WHERE stack_id = s.id),"
	              " (SELECT count(*) FROM generations WHERE stack_id = s.id AND id <= l.id),"
	              " l.result, l.manifest_path "
	              "FROM stacks s LEFT JOIN generations g ON g.id = s.current_gen "
	              "LEFT JOIN generations l ON l.id = (SELECT max(id) FROM generations "
	              "WHERE stack_id = s.id) ORDER BY s.name",
	              &s);
	while ((r = state_step(s)) == STATE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			*v = xrealloc(*v, cap * sizeof(**v));
		}
		struct state_stack_info *i = &(*v)[(*n)++];
		i->id = state_col_int64(s, 0);
		i->name = state_col_dup(s, 1);
		i->manifest_path = state_col_dup(s, 2);
		i->gen = state_col_int64(s, 3);
		i->applied = state_col_int64(s, 4);
		i->ngens = state_col_int64(s, 5);
		i->last_gen = state_col_int64(s, 6);
		i->last_result = state_col_dup(s, 7);
		i->last_manifest = state_col_dup(s, 8);
	}
	state_finalize(s);
	return r == STATE_DONE ? 0 : TF_ESTATE;
}

void state_stacks_free(struct state_stack_info *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].manifest_path);
		free(v[i].last_result);
		free(v[i].last_manifest);
	}
	free(v);
}

int state_gens_interrupted(struct state *st)
{
	return state_exec(st, "UPDATE generations SET result = 'interrupted', "
	                      "finished = strftime('%s','now') WHERE result = 'running'");
}

/* A query of generations with the columns gen_read reads; `path` is the manifest path's
 * expression, `tail` the query's WHERE and ORDER. */
#define GEN_QUERY(path, tail)                                                                      \
	"SELECT g.id, g.stack_id, s.name, (SELECT count(*) FROM generations n WHERE "              \
	"n.stack_id = g.stack_id AND n.id <= g.id), g.started, g.finished, g.result, "             \
	"g.manifest_sha256, " path ", g.manifest_text "                                            \
	"FROM generations g JOIN stacks s ON s.id = g.stack_id " tail

static void gen_read(struct state_stmt *s, struct state_gen *g)
{
	g->id = state_col_int64(s, 0);
	g->stack_id = state_col_int64(s, 1);
	g->stack = state_col_dup(s, 2);
	g->number = state_col_int64(s, 3);
	g->started = state_col_int64(s, 4);
	g->finished = state_col_int64(s, 5);
	g->result = state_col_dup(s, 6);
	g->manifest_sha256 = state_col_dup(s, 7);
	g->manifest_path = state_col_dup(s, 8);
	g->manifest_text = state_col_dup(s, 9);
}

void state_gen_release(struct state_gen *g)
{
	free(g->stack);
	free(g->result);
	free(g->manifest_sha256);
	free(g->manifest_path);
	free(g->manifest_text);
	memset(g, 0, sizeof(*g));
}

void state_gens_free(struct state_gen *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		state_gen_release(&v[i]);
	free(v);
}

/* The generations of stack ?1, of every stack when 0. */
static const char gens_list_sql[] =
    GEN_QUERY("g.manifest_path", "WHERE ?1 = 0 OR g.stack_id = ?1 ORDER BY g.id");

int state_gens_list(struct state *st, int64_t stack_id, struct state_gen **v, size_t *n)
{
	struct state_stmt *s = NULL;
	size_t cap = 0;
	int r;
	*v = NULL;
	*n = 0;
	state_prepare(st, gens_list_sql, &s);
	state_bind_int64(s, 1, stack_id);
	while ((r = state_step(s)) == STATE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			*v = xrealloc(*v, cap * sizeof(**v));
		}
		gen_read(s, &(*v)[(*n)++]);
	}
	state_finalize(s);
	return r == STATE_DONE ? 0 : TF_ESTATE;
}

/* Runs a one-row generation query (binds done) into *out; finalizes it. */
static int gen_one(struct state_stmt *s, struct state_gen *out)
{
	int r = state_step(s);
	if (r == STATE_ROW)
		gen_read(s, out);
	state_finalize(s);
	return r == STATE_ROW || r == STATE_DONE ? 0 : TF_ESTATE;
}

/* Generation ?2 of stack ?1 (numbered from 1). */
static const char gen_by_number_sql[] =
    GEN_QUERY("g.manifest_path", "WHERE g.stack_id = ?1 ORDER BY g.id LIMIT 1 OFFSET ?2 - 1");

/* The current generation of the stack named ?1. */
static const char gen_current_sql[] =
    GEN_QUERY("coalesce(g.manifest_path, s.manifest_path, s.name)",
              "WHERE s.name = ?1 AND g.id = s.current_gen");

/* Of stack ?1, successful generation number ?2, or with ?2 = 0 the last successful one before
 * the current. */
static const char gen_rollback_sql[] = GEN_QUERY(
    "g.manifest_path",
    "WHERE g.stack_id = ?1 AND g.result = 'ok' AND (?2 > 0 AND g.id = (SELECT id FROM "
    "generations WHERE stack_id = ?1 ORDER BY id LIMIT 1 OFFSET ?2 - 1) OR ?2 = 0 AND g.id < "
    "(SELECT current_gen FROM stacks WHERE id = ?1)) ORDER BY g.id DESC LIMIT 1");

int state_gen_by_number(struct state *st, int64_t stack_id, int64_t number, struct state_gen *out)
{
	struct state_stmt *s = NULL;
	memset(out, 0, sizeof(*out));
	if (number < 1)
		return 0;
	state_prepare(st, gen_by_number_sql, &s);
	state_bind_int64(s, 1, stack_id);
	state_bind_int64(s, 2, number);
	return gen_one(s, out);
}

int state_gen_current(struct state *st, const char *name, struct state_gen *out)
{
	struct state_stmt *s = NULL;
	memset(out, 0, sizeof(*out));
	state_prepare(st, gen_current_sql, &s);
	state_bind_text(s, 1, name);
	return gen_one(s, out);
}

int state_gen_rollback_target(struct state *st, int64_t stack_id, int64_t number,
                              struct state_gen *out)
{
	struct state_stmt *s = NULL;
	memset(out, 0, sizeof(*out));
	state_prepare(st, gen_rollback_sql, &s);
	state_bind_int64(s, 1, stack_id);
	state_bind_int64(s, 2, number);
	return gen_one(s, out);
}

int state_setting_get(struct state *st, const char *key, char **out)
{
	struct state_stmt *s = NULL;
	int r;
	*out = NULL;
	state_prepare(st, "SELECT value FROM settings WHERE key = ?", &s);
	state_bind_text(s, 1, key);
	if ((r = state_step(s)) == STATE_ROW)
		*out = state_col_dup(s, 0);
	state_finalize(s);
	return r == STATE_ROW || r == STATE_DONE ? 0 : TF_ESTATE;
}

int state_setting_set(struct state *st, const char *key, const char *value)
{
	struct state_stmt *s = NULL;
	if (value == NULL) {
		state_prepare(st, "DELETE FROM settings WHERE key = ?", &s);
		state_bind_text(s, 1, key);
	} else {
		state_prepare(st, "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", &s);
		state_bind_text(s, 1, key);
		state_bind_text(s, 2, value);
	}
	return state_run(s);
}
