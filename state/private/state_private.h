/*
 * state_private.h - the store's insides, for state/ only: the SQLite handle,
 * the writer lock and the statement API the store's functions are written
 * with. Nothing outside state/ includes this file or <sqlite3.h>, and no SQL
 * is written outside state/ (tests/system/test_layout.py checks).
 */
#ifndef TFPROV_STATE_PRIVATE_H
#define TFPROV_STATE_PRIVATE_H

#include "state.h"

#include <sqlite3.h>

struct state {
	sqlite3 *db;
	char *dir;
	int lockfd; /* -1 when not holding the writer lock */
};

/* Remembers the first failure of a query (state_failure()); returns TF_ESTATE. */
int state_note_failure(sqlite3 *db, const char *what);
/* The store's own prepare and step: SQLite's result codes, a failure noted. */
int sq_prepare(struct state *st, const char *sql, sqlite3_stmt **out);
int sq_step(sqlite3_stmt *s);
/* Runs SQL text without parameters. 0 or TF_ESTATE. */
int state_exec(struct state *st, const char *sql);

/*
 * The statement API (state_stmt.c): a struct state_stmt is one prepared
 * query. A failed prepare, bind or step is remembered (the first one, with
 * SQLite's message, see state_failure) so that a command never reports an
 * empty answer for a query that did not run: main() turns a remembered
 * failure into an error (exit 1) even when the command did not notice.
 */
struct state_stmt;
enum { STATE_OK = 0, STATE_ROW = 100, STATE_DONE = 101 };
/* STATE_OK or TF_ESTATE; *out is NULL on failure. */
int state_prepare(struct state *st, const char *sql, struct state_stmt **out);
/* STATE_ROW, STATE_DONE, or TF_ESTATE (also for a NULL statement). */
int state_step(struct state_stmt *q);
/* Binds copy their value; text NULL binds SQL NULL. 0 or TF_ESTATE. */
int state_bind_text(struct state_stmt *q, int i, const char *s);
int state_bind_int64(struct state_stmt *q, int i, int64_t v);
/* Columns of the current row (text borrowed until the next step). */
const char *state_col_text(struct state_stmt *q, int i);
/* The column's text malloc'd, NULL for SQL NULL. */
char *state_col_dup(struct state_stmt *q, int i);
int64_t state_col_int64(struct state_stmt *q, int i);
int state_col_int(struct state_stmt *q, int i);
void state_finalize(struct state_stmt *q);
int64_t state_last_rowid(struct state *st);
/* Runs a statement that returns no rows (binds done). 0 or TF_ESTATE; finalizes it. */
int state_run(struct state_stmt *q);

#endif
