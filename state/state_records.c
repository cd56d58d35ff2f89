/*
 * state_records.c - the resources of a stack and the files they own, read
 * and forgotten in the shapes the planner, the drift check, the placement
 * layer, verify, status and show need.
 *
 * A resource's attrs are its step's own JSON: the store hands them over as
 * text and never reads inside them (the step that wrote them answers for
 * them, module.h).
 */
#include "error.h"
#include "state_private.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int state_resources_list(struct state *st, int64_t stack_id, struct state_resource **v, size_t *n)
{
	struct state_stmt *s = NULL;
	size_t cap = 0;
	int r;
	*v = NULL;
	*n = 0;
	state_prepare(st,
	              "SELECT id, addr, kind, desired, attrs FROM resources WHERE stack_id = ? "
	              "ORDER BY id",
	              &s);
	state_bind_int64(s, 1, stack_id);
	while ((r = state_step(s)) == STATE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			*v = xrealloc(*v, cap * sizeof(**v));
		}
		struct state_resource *res = &(*v)[(*n)++];
		res->id = state_col_int64(s, 0);
		res->addr = state_col_dup(s, 1);
		res->kind = state_col_dup(s, 2);
		res->desired = state_col_dup(s, 3);
		res->attrs = state_col_dup(s, 4);
	}
	state_finalize(s);
	return r == STATE_DONE ? 0 : TF_ESTATE;
}

void state_resources_free(struct state_resource *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		state_resource_release(&v[i]);
	free(v);
}

int state_resource_matches(struct state *st, int64_t res_id, int64_t stack_id, const char *addr,
                           int *match)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "SELECT 1 FROM resources WHERE id = ? AND stack_id = ? AND addr = ?", &s);
	state_bind_int64(s, 1, res_id);
	state_bind_int64(s, 2, stack_id);
	state_bind_text(s, 3, addr);
	int r = state_step(s);
	state_finalize(s);
	*match = r == STATE_ROW;
	return r == STATE_ROW || r == STATE_DONE ? 0 : TF_ESTATE;
}

int state_files_foreach_stat(struct state *st, int64_t res_id, state_file_cb cb, void *arg)
{
	struct state_stmt *s = NULL;
	int r = 0, rc = 0;
	state_prepare(st,
	              "SELECT path, type, size, mtime_ns, mode FROM files WHERE resource_id = ? "
	              "ORDER BY path",
	              &s);
	state_bind_int64(s, 1, res_id);
	while (rc == 0 && (r = state_step(s)) == STATE_ROW) {
		struct state_file f;
		memset(&f, 0, sizeof(f));
		const char *t = state_col_text(s, 1);
		f.path = (char *)state_col_text(s, 0);
		f.type = t ? t[0] : 'f';
		f.size = state_col_int64(s, 2);
		f.mtime_ns = state_col_int64(s, 3);
		f.mode = (unsigned)state_col_int(s, 4);
		f.resource_id = res_id;
		rc = cb(&f, arg);
	}
	state_finalize(s);
	return rc != 0 ? rc : r == STATE_DONE ? 0 : TF_ESTATE;
}

int state_files_counts(struct state *st, int64_t res_id, struct state_file_counts *out)
{
	struct state_stmt *s = NULL;
	memset(out, 0, sizeof(*out));
	state_prepare(st,
	              "SELECT count(*), total(type = 'f'), total(type = 'l'), total(type = 'd') "
	              "FROM files WHERE resource_id = ?",
	              &s);
	state_bind_int64(s, 1, res_id);
	int r = state_step(s);
	if (r == STATE_ROW) {
		out->paths = state_col_int64(s, 0);
		out->files = state_col_int64(s, 1);
		out->links = state_col_int64(s, 2);
		out->dirs = state_col_int64(s, 3);
	}
	state_finalize(s);
	return r == STATE_ROW ? 0 : TF_ESTATE;
}

int state_files_delete(struct state *st, int64_t res_id)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "DELETE FROM files WHERE resource_id = ?", &s);
	state_bind_int64(s, 1, res_id);
	return state_run(s);
}

int state_file_delete_tree(struct state *st, const char *path)
{
	struct state_stmt *s = NULL;
	state_prepare(
	    st, "DELETE FROM files WHERE path = ?1 OR (path > ?1 || '/' AND path < ?1 || '0')", &s);
	state_bind_text(s, 1, path);
	return state_run(s);
}

int state_file_any_under(struct state *st, const char *dir, int *found)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "SELECT 1 FROM files WHERE path > ?1 || '/' AND path < ?1 || '0' LIMIT 1",
	              &s);
	state_bind_text(s, 1, dir);
	int r = state_step(s);
	state_finalize(s);
	*found = r == STATE_ROW;
	return r == STATE_ROW || r == STATE_DONE ? 0 : TF_ESTATE;
}

int state_stack_dirs(struct state *st, int64_t stack_id, struct strvec *out)
{
	struct state_stmt *s = NULL;
	int r;
	state_prepare(st,
	              "SELECT f.path FROM files f JOIN resources r ON r.id = f.resource_id "
	              "WHERE r.stack_id = ? AND f.type = 'd' ORDER BY f.path",
	              &s);
	state_bind_int64(s, 1, stack_id);
	while ((r = state_step(s)) == STATE_ROW)
		strvec_push(out, state_col_text(s, 0));
	state_finalize(s);
	return r == STATE_DONE ? 0 : TF_ESTATE;
}

int state_step_top_dir(struct state *st, int64_t stack_id, const char *addr, char **path)
{
	struct state_stmt *s = NULL;
	*path = NULL;
	state_prepare(st,
	              "SELECT f.path FROM files f JOIN resources r ON r.id = f.resource_id "
	              "WHERE r.stack_id = ? AND r.addr = ? AND f.type = 'd' "
	              "ORDER BY length(f.path) LIMIT 1",
	              &s);
	state_bind_int64(s, 1, stack_id);
	state_bind_text(s, 2, addr);
	int r = state_step(s);
	if (r == STATE_ROW)
		*path = state_col_dup(s, 0);
	state_finalize(s);
	return r == STATE_ROW || r == STATE_DONE ? 0 : TF_ESTATE;
}
