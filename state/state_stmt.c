/*
 * state_stmt.c - the store's statement API (state_private.h), what the
 * store's named functions are written with. A struct state_stmt is SQLite's
 * statement; every prepare, bind and step is checked and the first failure
 * remembered, so a command can tell "no rows" from "the query did not run".
 */
#include "error.h"
#include "state_private.h"

#include "util.h"

#include <stddef.h>

#define Q(q) ((sqlite3_stmt *)(q))

int state_prepare(struct state *st, const char *sql, struct state_stmt **out)
{
	sqlite3_stmt *q = NULL;
	*out = NULL;
	if (sq_prepare(st, sql, &q) != SQLITE_OK) {
		sqlite3_finalize(q);
		return TF_ESTATE;
	}
	*out = (struct state_stmt *)q;
	return STATE_OK;
}

int state_step(struct state_stmt *q)
{
	if (q == NULL)
		return state_note_failure(NULL, "cannot run a state query");
	int r = sq_step(Q(q));
	if (r == SQLITE_ROW)
		return STATE_ROW;
	if (r == SQLITE_DONE)
		return STATE_DONE;
	return TF_ESTATE;
}

static int bound(struct state_stmt *q, int r)
{
	if (r == SQLITE_OK)
		return 0;
	return state_note_failure(q ? sqlite3_db_handle(Q(q)) : NULL, "cannot bind a state query");
}

int state_bind_text(struct state_stmt *q, int i, const char *s)
{
	if (q == NULL)
		return bound(q, SQLITE_MISUSE);
	return bound(q, s ? sqlite3_bind_text(Q(q), i, s, -1, SQLITE_TRANSIENT)
	                  : sqlite3_bind_null(Q(q), i));
}

int state_bind_int64(struct state_stmt *q, int i, int64_t v)
{
	return bound(q, q ? sqlite3_bind_int64(Q(q), i, v) : SQLITE_MISUSE);
}

const char *state_col_text(struct state_stmt *q, int i)
{
	return (const char *)sqlite3_column_text(Q(q), i);
}

char *state_col_dup(struct state_stmt *q, int i)
{
	const char *t = state_col_text(q, i);
	return t ? xstrdup(t) : NULL;
}

int64_t state_col_int64(struct state_stmt *q, int i)
{
	return sqlite3_column_int64(Q(q), i);
}

int state_col_int(struct state_stmt *q, int i)
{
	return sqlite3_column_int(Q(q), i);
}

void state_finalize(struct state_stmt *q)
{
	sqlite3_finalize(Q(q));
}

int64_t state_last_rowid(struct state *st)
{
	return sqlite3_last_insert_rowid(st->db);
}

int state_run(struct state_stmt *q)
{
	int rc = state_step(q) == STATE_DONE ? 0 : TF_ESTATE;
	state_finalize(q);
	return rc;
}
