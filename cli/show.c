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
	struct state_stmt *s = NULL;
	state_prepare(c->st,
	              "SELECT id, started, result, manifest_sha256, manifest_path FROM generations "
	              "WHERE stack_id = ? ORDER BY id",
	              &s);
	state_bind_int64(s, 1, sid);
	ev_log(c, EV_INFO, "generations of %s:", o->args.v[0]);
	while (state_step(s) == STATE_ROW) {
		time_t t = (time_t)state_col_int64(s, 1);
		char ts[32];
		strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%SZ", gmtime(&t));
		ev_log(c, EV_INFO, "  %3lld  %s  %-11s manifest %.12s  %s",
		       (long long)state_col_int64(s, 0), ts, state_col_text(s, 2),
		       state_col_text(s, 3), state_col_text(s, 4));
	}
	state_finalize(s);
	state_prepare(c->st, "SELECT id, addr, desired FROM resources WHERE stack_id = ?", &s);
	state_bind_int64(s, 1, sid);
	ev_log(c, EV_INFO, "resources:");
	while (state_step(s) == STATE_ROW) {
		int64_t rid = state_col_int64(s, 0);
		ev_log(c, EV_INFO, "  %-8s %lld files, config %.12s", state_col_text(s, 1),
		       (long long)state_files_count(c->st, rid), state_col_text(s, 2));
		if (c->flags & CTX_VERBOSE)
			state_files_foreach(c->st, rid, print_file, c);
	}
	state_finalize(s);
	return 0;
}
