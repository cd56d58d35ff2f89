/*
 * status.c - `tfprov status`: every stack, its current generation, and a
 * fast drift check (stat of every recorded file against size and mtime).
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "plan.h"
#include "state.h"

#include <sqlite3.h>
#include <time.h>

int cmd_status(struct ctx *c, struct opts *o)
{
	(void)o;
	if (c->st == NULL) {
		ev_log(c, EV_INFO, "No stacks: nothing was applied under %s.", c->root);
		return 0;
	}
	sqlite3_stmt *s = NULL, *r = NULL;
	int drifted = 0, nstacks = 0;
	sqlite3_prepare_v2(
	    c->st->db,
	    "SELECT s.id, s.name, s.current_gen, g.result, g.finished, s.manifest_path,"
	    " (SELECT count(*) FROM generations WHERE stack_id = s.id) "
	    "FROM stacks s LEFT JOIN generations g ON g.id = s.current_gen ORDER BY s.name",
	    -1, &s, NULL);
	while (sqlite3_step(s) == SQLITE_ROW) {
		nstacks++;
		int64_t sid = sqlite3_column_int64(s, 0);
		time_t when = (time_t)sqlite3_column_int64(s, 4);
		char ts[32] = "never";
		if (when)
			strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%SZ", gmtime(&when));
		ev_log(c, EV_INFO, "stack %s: generation %lld of %lld, applied %s, from %s",
		       sqlite3_column_text(s, 1), (long long)sqlite3_column_int64(s, 2),
		       (long long)sqlite3_column_int64(s, 6), ts, sqlite3_column_text(s, 5));
		sqlite3_prepare_v2(
		    c->st->db,
		    "SELECT id, addr, json_array_length(attrs, '$.installed') FROM resources "
		    "WHERE stack_id = ? ORDER BY id",
		    -1, &r, NULL);
		sqlite3_bind_int64(r, 1, sid);
		while (sqlite3_step(r) == SQLITE_ROW) {
			int missing, changed;
			int64_t rid = sqlite3_column_int64(r, 0);
			long long n = (long long)drift_check(c, rid, &missing, &changed);
			if (missing || changed) {
				drifted++;
				ev_log(c, EV_WARN,
				       "  %s: DRIFT: %d missing, %d changed of %lld files",
				       sqlite3_column_text(r, 1), missing, changed, n);
			} else if (sqlite3_column_type(r, 2) != SQLITE_NULL) {
				/* pip's files live in the env; it records what it installed. */
				ev_log(c, EV_INFO,
				       "  %-8s ok, %d distributions recorded in the env",
				       sqlite3_column_text(r, 1), sqlite3_column_int(r, 2));
			} else {
				ev_log(c, EV_INFO, "  %-8s ok, %lld files",
				       sqlite3_column_text(r, 1), n);
			}
		}
		sqlite3_finalize(r);
	}
	sqlite3_finalize(s);
	sqlite3_prepare_v2(
	    c->st->db, "SELECT count(*) FROM generations WHERE result IN ('failed','interrupted')",
	    -1, &s, NULL);
	if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) > 0)
		ev_log(c, EV_INFO,
		       "%d generation(s) failed or were interrupted (see `tfprov show`).",
		       sqlite3_column_int(s, 0));
	sqlite3_finalize(s);
	if (nstacks == 0)
		ev_log(c, EV_INFO, "No stacks.");
	return drifted ? TF_EXIT_CHANGES : 0;
}
