/*
 * state_private.h - the store's insides, for state/ only: the SQLite handle
 * and the writer lock. Nothing outside state/ includes this file or
 * <sqlite3.h> (tests/system/test_layout.py checks).
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

#endif
