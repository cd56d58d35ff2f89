/*
 * show.c - `tfprov show STACK`: generations, resources, and with -v every
 * file. Counts and times are the ones `status` prints (recorded paths;
 * RFC 3339 UTC); with --json the same facts are one "stack_show" event.
 */
#include "cli.h"
#include "stackinfo.h"
#include "error.h"
#include "event.h"
#include "module.h"
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
	struct state_gen *v = NULL;
	size_t n = 0;
	int rc = state_gens_list(c->st, sid, &v, &n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		char started[32], finished[32];
		long long number = (long long)v[i].number; /* per stack, from 1 */
		cli_time(v[i].started, started);
		cli_time(v[i].finished, finished);
		const char *result = v[i].result;
		ev_log(c, EV_INFO, "  %3lld  started %s  finished %s  %-11s manifest %.12s  %s",
		       number, started, finished, result, v[i].manifest_sha256, v[i].manifest_path);
		json_array_append_new(
		    out, json_pack("{s:I,s:s,s:s,s:s,s:s,s:s}", "generation", (json_int_t)number,
		                   "started", started, "finished", finished, "result",
		                   result ? result : "", "manifest_sha256", v[i].manifest_sha256,
		                   "manifest", v[i].manifest_path));
	}
	state_gens_free(v, n);
	return rc;
}

static int show_resources(struct ctx *c, int64_t sid, json_t *out)
{
	struct state_resource *v = NULL;
	size_t nv = 0;
	int rc = state_resources_list(c->st, sid, &v, &nv);
	for (size_t i = 0; i < nv && rc == 0; i++) {
		struct state_file_counts k;
		int has_dists;
		int64_t ndists;
		rc = state_files_counts(c->st, v[i].id, &k);
		/* pip's files live in the env: it records the distributions, as status says. */
		if (rc == 0)
			rc = module_installed(v[i].kind, v[i].attrs, NULL, &has_dists, &ndists);
		if (rc != 0)
			break;
		long long n = k.paths, nf = k.files, nl = k.links, nd = k.dirs;
		char dists[48] = "";
		if (has_dists)
			snprintf(dists, sizeof(dists), "%lld distribution%s recorded in the env, ",
			         (long long)ndists, plural_s(ndists));
		ev_log(c, EV_INFO,
		       "  %-8s %s%lld path%s (%lld file%s, %lld link%s, %lld director%s), "
		       "config %.12s",
		       v[i].addr, dists, n, plural_s(n), nf, plural_s(nf), nl, plural_s(nl), nd,
		       plural(nd, "y", "ies"), v[i].desired);
		json_t *o =
		    json_pack("{s:s,s:I,s:I,s:I,s:I,s:s}", "step", v[i].addr, "paths",
		              (json_int_t)n, "files", (json_int_t)nf, "links", (json_int_t)nl,
		              "directories", (json_int_t)nd, "config", v[i].desired);
		if (has_dists)
			json_object_set_new(o, "distributions", json_integer(ndists));
		json_array_append_new(out, o);
		if (c->flags & CTX_VERBOSE)
			state_files_foreach(c->st, v[i].id, print_file, c);
	}
	state_resources_free(v, nv);
	return rc;
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
		struct stackinfo si;
		struct why err = {0};
		if (stackinfo_load(c, o->args.v[0], &si, &err) == 0) {
			struct strbuf line = STRBUF_INIT;
			cli_stack_usage(c, o->args.v[0], si.m, d, &line);
			ev_log(c, EV_INFO, "%s", line.buf);
			strbuf_release(&line);
			stackinfo_release(&si);
		}
		why_clear(&err);
		ev_data(c, "stack_show", d);
		json_decref(d);
	}
	json_decref(gens);
	json_decref(res);
	return rc;
}
