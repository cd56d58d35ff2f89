/*
 * show.c - `tfprov show STACK`: generations, resources, and with -v every
 * file. Counts and times are the ones `status` prints (recorded paths;
 * RFC 3339 UTC); with --json the same facts are one "stack_show" event.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "state.h"

#include <jansson.h>

static int print_file(const struct state_file *f, void *arg)
{
	struct ctx *c = arg;
	ev_log(c, EV_INFO, "    %c %04o %10lld %.12s %s", f->type, f->mode, (long long)f->size,
	       f->sha256[0] ? f->sha256 : "-", f->path);
	return 0;
}

static int show_generations(struct ctx *c, int64_t sid, json_t *out)
{
	struct state_stmt *s = NULL;
	int src;
	if (state_prepare(c->st,
	                  "SELECT id, started, finished, result, manifest_sha256, manifest_path "
	                  "FROM generations WHERE stack_id = ? ORDER BY id",
	                  &s) != STATE_OK)
		return TF_ESTATE;
	state_bind_int64(s, 1, sid);
	long long number = 0; /* generations are numbered per stack, from 1 */
	while ((src = state_step(s)) == STATE_ROW) {
		char started[32], finished[32];
		number++;
		cli_time(state_col_int64(s, 1), started);
		cli_time(state_col_int64(s, 2), finished);
		const char *result = state_col_text(s, 3);
		ev_log(c, EV_INFO, "  %3lld  started %s  finished %s  %-11s manifest %.12s  %s",
		       number, started, finished, result, state_col_text(s, 4),
		       state_col_text(s, 5));
		json_array_append_new(
		    out, json_pack("{s:I,s:s,s:s,s:s,s:s,s:s}", "generation", (json_int_t)number,
		                   "started", started, "finished", finished, "result",
		                   result ? result : "", "manifest_sha256", state_col_text(s, 4),
		                   "manifest", state_col_text(s, 5)));
	}
	state_finalize(s);
	return src == STATE_DONE ? 0 : TF_ESTATE;
}

static int show_resources(struct ctx *c, int64_t sid, json_t *out)
{
	struct state_stmt *s = NULL;
	int src;
	if (state_prepare(
	        c->st,
	        "SELECT r.id, r.addr, r.desired, count(f.path), sum(f.type = 'f'), "
	        "sum(f.type = 'l'), sum(f.type = 'd'), json_array_length(r.attrs, '$.installed') "
	        "FROM resources r LEFT JOIN files f "
	        "ON f.resource_id = r.id WHERE r.stack_id = ? GROUP BY r.id ORDER BY r.id",
	        &s) != STATE_OK)
		return TF_ESTATE;
	state_bind_int64(s, 1, sid);
	while ((src = state_step(s)) == STATE_ROW) {
		int64_t rid = state_col_int64(s, 0);
		long long n = state_col_int64(s, 3), nf = state_col_int64(s, 4),
		          nl = state_col_int64(s, 5), nd = state_col_int64(s, 6);
		/* pip's files live in the env: it records the distributions, as status says. */
		int has_dists = !state_col_is_null(s, 7);
		char dists[48] = "";
		if (has_dists)
			snprintf(dists, sizeof(dists), "%d distributions recorded in the env, ",
			         state_col_int(s, 7));
		ev_log(c, EV_INFO,
		       "  %-8s %s%lld paths (%lld files, %lld links, %lld directories), "
		       "config %.12s",
		       state_col_text(s, 1), dists, n, nf, nl, nd, state_col_text(s, 2));
		json_t *o =
		    json_pack("{s:s,s:I,s:I,s:I,s:I,s:s}", "step", state_col_text(s, 1), "paths",
		              (json_int_t)n, "files", (json_int_t)nf, "links", (json_int_t)nl,
		              "directories", (json_int_t)nd, "config", state_col_text(s, 2));
		if (has_dists)
			json_object_set_new(o, "distributions", json_integer(state_col_int(s, 7)));
		json_array_append_new(out, o);
		if (c->flags & CTX_VERBOSE)
			state_files_foreach(c->st, rid, print_file, c);
	}
	state_finalize(s);
	return src == STATE_DONE ? 0 : TF_ESTATE;
}

int cmd_show(struct ctx *c, struct opts *o)
{
	int64_t sid = 0;
	int rc = cli_stack_arg(c, o, "usage: tfprov show STACK", &sid);
	if (rc != 0)
		return rc;
	json_t *gens = json_array(), *res = json_array();
	ev_log(c, EV_INFO, "generations of %s:", o->args.v[0]);
	rc = show_generations(c, sid, gens);
	if (rc == 0) {
		ev_log(c, EV_INFO, "resources:");
		rc = show_resources(c, sid, res);
	}
	if (rc == 0) {
		json_t *d = json_pack("{s:s,s:O,s:O}", "name", o->args.v[0], "generations", gens,
		                      "resources", res);
		ev_data(c, "stack_show", d);
		json_decref(d);
	}
	json_decref(gens);
	json_decref(res);
	return rc;
}
