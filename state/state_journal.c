/*
 * state_journal.c - the journal table: the placement layer's write-ahead
 * intents (engine/core/place.c, ARCHITECTURE.md section 4).
 *
 * An intent is committed (synchronous=FULL) before the operation it
 * announces; after the change that made it commits, an intent with a backup
 * stays as a "gc" entry until the backup is gone, and the directories a
 * removal emptied stay as "rmdir" entries until removed. Recovery reads them
 * newest first and undoes what was started and not committed.
 */
#include "error.h"
#include "state_private.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

int state_journal_add(struct state *st, const char *op, const char *path, const char *tmp,
                      const char *backup, int64_t *id)
{
	struct state_stmt *s = NULL;
	int rc = TF_ESTATE;
	if (id)
		*id = 0;
	state_prepare(st, "INSERT INTO journal(op, path, tmp, backup, created) VALUES (?,?,?,?,?)",
	              &s);
	state_bind_text(s, 1, op);
	state_bind_text(s, 2, path);
	state_bind_text(s, 3, tmp);
	state_bind_text(s, 4, backup);
	state_bind_int64(s, 5, now_unix());
	if (state_step(s) == STATE_DONE) {
		rc = 0;
		if (id)
			*id = state_last_rowid(st);
	}
	state_finalize(s);
	return rc;
}

#define JOURNAL_COLS "SELECT id, op, path, tmp, backup FROM journal "

static void entry_read(struct state_stmt *s, struct state_journal_entry *e)
{
	e->id = state_col_int64(s, 0);
	e->op = state_col_dup(s, 1);
	e->path = state_col_dup(s, 2);
	e->tmp = state_col_dup(s, 3);
	e->backup = state_col_dup(s, 4);
}

int state_journal_get(struct state *st, int64_t id, struct state_journal_entry *out)
{
	struct state_stmt *s = NULL;
	memset(out, 0, sizeof(*out));
	state_prepare(st, JOURNAL_COLS "WHERE id = ?", &s);
	state_bind_int64(s, 1, id);
	int r = state_step(s);
	if (r == STATE_ROW)
		entry_read(s, out);
	state_finalize(s);
	return r == STATE_ROW || r == STATE_DONE ? 0 : TF_ESTATE;
}

int state_journal_list(struct state *st, const char *op, struct state_journal_entry **v, size_t *n)
{
	struct state_stmt *s = NULL;
	size_t cap = 0;
	int r;
	*v = NULL;
	*n = 0;
	state_prepare(st, JOURNAL_COLS "WHERE ?1 IS NULL OR op = ?1 ORDER BY id DESC", &s);
	state_bind_text(s, 1, op);
	while ((r = state_step(s)) == STATE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			*v = xrealloc(*v, cap * sizeof(**v));
		}
		entry_read(s, &(*v)[(*n)++]);
	}
	state_finalize(s);
	return r == STATE_DONE ? 0 : TF_ESTATE;
}

void state_journal_entry_release(struct state_journal_entry *e)
{
	free(e->op);
	free(e->path);
	free(e->tmp);
	free(e->backup);
	memset(e, 0, sizeof(*e));
}

void state_journal_free(struct state_journal_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		state_journal_entry_release(&v[i]);
	free(v);
}

int state_journal_delete(struct state *st, int64_t id)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "DELETE FROM journal WHERE id = ?", &s);
	state_bind_int64(s, 1, id);
	return state_run(s);
}

int state_journal_delete_newer(struct state *st, int64_t id)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "DELETE FROM journal WHERE id > ? AND op <> 'rmdir'", &s);
	state_bind_int64(s, 1, id);
	return state_run(s);
}

int state_journal_clear(struct state *st, const char *op)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "DELETE FROM journal WHERE ?1 IS NULL OR op = ?1", &s);
	state_bind_text(s, 1, op);
	return state_run(s);
}

int state_journal_settle(struct state *st, int64_t id)
{
	struct state_stmt *s = NULL;
	state_prepare(st, "UPDATE journal SET op = 'gc' WHERE id = ? AND backup IS NOT NULL", &s);
	state_bind_int64(s, 1, id);
	int rc = state_run(s);
	if (rc != 0)
		return rc;
	state_prepare(st, "DELETE FROM journal WHERE id = ? AND op <> 'gc'", &s);
	state_bind_int64(s, 1, id);
	return state_run(s);
}
