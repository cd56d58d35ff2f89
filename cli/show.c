/* show.c - `tfprov show STACK`: generations, resources, and with -v every file. */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "state.h"

#include <time.h>

static int print_file(const struct state_file *f, void *arg)
{
	struct ctx *c = arg;
	ev_log(c, EV_INFO, "    %c %04o %10lld %.12s %s", f->type, f->mode, (long long)f->size,
	       f->sha256[0] ? f->sha256 : "-", f->path);
	return 0;
}

int cmd_show(struct ctx *c, struct opts *o)
{
	int64_t sid = 0;
	int rc = cli_stack_arg(c, o, "usage: tfprov show STACK", &sid);
	if (rc != 0)
		return rc;
	sqlite3_stmt *s = NULL;
	sqlite3_prepare_v2(
	    c->st->db,
	    "SELECT id, started, result, manifest_sha256, manifest_path FROM generations "
	    "WHERE stack_id = ? ORDER BY id",
	    -1, &s, NULL);
	sqlite3_bind_int64(s, 1, sid);
	ev_log(c, EV_INFO, "generations of %s:", o->args.v[0]);
	while (sqlite3_step(s) == SQLITE_ROW) {
		time_t t = (time_t)sqlite3_column_int64(s, 1);
		char ts[32];
		strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%SZ", gmtime(&t));
		ev_log(c, EV_INFO, "  %3lld  %s  %-11s manifest %.12s  %s",
		       (long long)sqlite3_column_int64(s, 0), ts, sqlite3_column_text(s, 2),
		       sqlite3_column_text(s, 3), sqlite3_column_text(s, 4));
	}
	sqlite3_finalize(s);
	sqlite3_prepare_v2(c->st->db, "SELECT id, addr, desired FROM resources WHERE stack_id = ?",
	                   -1, &s, NULL);
	sqlite3_bind_int64(s, 1, sid);
	ev_log(c, EV_INFO, "resources:");
	while (sqlite3_step(s) == SQLITE_ROW) {
		int64_t rid = sqlite3_column_int64(s, 0);
		ev_log(c, EV_INFO, "  %-8s %lld files, config %.12s", sqlite3_column_text(s, 1),
		       (long long)state_files_count(c->st, rid), sqlite3_column_text(s, 2));
		if (c->flags & CTX_VERBOSE)
			state_files_foreach(c->st, rid, print_file, c);
	}
	sqlite3_finalize(s);
	return 0;
}
