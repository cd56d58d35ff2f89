/*
 * status.c - `tfprov status`: every stack, its current generation and
 * versions, and a fast drift check (stat of every recorded file against size
 * and mtime).
 *
 * Generations are numbered per stack, 1 for its first apply (the numbers
 * `show`, `rollback --generation` and `diff --generation` take).
 *
 * Exit: 0 when every stack matches what was placed; 2 when a stack drifted or
 * its last apply failed or was interrupted (apply would change something:
 * the same 2 as `verify` and `plan --detailed-exitcode`); 1 when the state
 * cannot be read (never "No stacks." for a query that failed).
 * With --json each stack is one "stack_status" event holding its data.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "plan.h"
#include "stackinfo.h"
#include "state.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cli_time(int64_t t, char out[32])
{
	time_t tt = (time_t)t;
	if (t <= 0)
		snprintf(out, 32, "never");
	else
		strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));
}

/* One stack's resources: drift per resource, into `res` (JSON) and the log. */
static int stack_resources(struct ctx *c, const char *stack, int64_t sid, json_t *res, int *drifted)
{
	struct state_stmt *r = NULL;
	if (state_prepare(c->st,
	                  "SELECT id, addr, json_array_length(attrs, '$.installed') FROM resources "
	                  "WHERE stack_id = ? ORDER BY id",
	                  &r) != STATE_OK)
		return TF_ESTATE;
	state_bind_int64(r, 1, sid);
	int src;
	while ((src = state_step(r)) == STATE_ROW) {
		int missing, changed;
		int64_t rid = state_col_int64(r, 0);
		const char *addr = state_col_text(r, 1);
		long long n = (long long)drift_check(c, rid, &missing, &changed);
		json_t *o = json_pack("{s:s,s:I,s:i,s:i}", "step", addr, "paths", (json_int_t)n,
		                      "missing", missing, "changed", changed);
		if (!state_col_is_null(r, 2))
			json_object_set_new(o, "distributions", json_integer(state_col_int(r, 2)));
		json_array_append_new(res, o);
		if (missing || changed) {
			(*drifted)++;
			char *msg = xasprintf("  %s: DRIFT: %d missing, %d changed of %lld paths",
			                      addr, missing, changed, n);
			char *want = xasprintf("%lld paths as placed", n);
			char *got = xasprintf("%d missing, %d changed", missing, changed);
			ev_finding(c, EV_WARN,
			           &(struct ev_finding){.origin = "status",
			                                .kind = "drift",
			                                .severity = "warning",
			                                .stack = stack,
			                                .path = addr,
			                                .expected = want,
			                                .actual = got,
			                                .fix = "tfprov verify names the paths; "
			                                       "tfprov apply repairs them"},
			           msg);
			free(msg);
			free(want);
			free(got);
		} else if (!state_col_is_null(r, 2)) {
			/* pip's files live in the env; it records what it installed. */
			ev_log(c, EV_INFO, "  %-8s ok, %d distributions recorded in the env", addr,
			       state_col_int(r, 2));
		} else {
			ev_log(c, EV_INFO, "  %-8s ok, %lld paths", addr, n);
		}
	}
	state_finalize(r);
	return src == STATE_DONE ? 0 : TF_ESTATE;
}

/* "TensorFlow 2.15.1, CUDA 12.3.2, cuDNN 8.9.7.29, Python 3.10" of the current generation. */
static void stack_versions(struct ctx *c, const char *name, json_t *o, struct strbuf *line)
{
	struct stackinfo si;
	char *err = NULL;
	if (stackinfo_load(c, name, &si, &err) != 0) {
		free(err);
		return;
	}
	const char *label[] = {"tensorflow", "cuda", "cudnn", "python"};
	const char *shown[] = {"TensorFlow", "CUDA", "cuDNN", "Python"};
	const char *val[] = {si.tf, si.has_cuda ? si.cuda : NULL, si.has_cudnn ? si.cudnn : NULL,
	                     si.m->python.version.s ? si.m->python.version.s
	                                            : si.m->versions.python.s};
	json_t *v = json_object();
	for (int i = 0; i < 4; i++) {
		if (val[i] == NULL)
			continue;
		json_object_set_new(v, label[i], json_string(val[i]));
		strbuf_addf(line, "%s%s %s", line->len ? ", " : "", shown[i], val[i]);
	}
	json_object_set_new(o, "versions", v);
	stackinfo_release(&si);
}

int cmd_status(struct ctx *c, struct opts *o)
{
	(void)o;
	if (c->st == NULL) {
		ev_log(c, EV_INFO, "No stacks: nothing was applied under %s.", c->root);
		return 0;
	}
	struct state_stmt *s = NULL;
	int drifted = 0, unfinished = 0, nstacks = 0, rc = 0, src;
	if (state_prepare(
	        c->st,
	        "SELECT s.id, s.name,"
	        " (SELECT count(*) FROM generations WHERE stack_id = s.id AND id <= "
	        "s.current_gen), g.finished, s.manifest_path,"
	        " (SELECT count(*) FROM generations WHERE stack_id = s.id),"
	        " (SELECT count(*) FROM generations WHERE stack_id = s.id AND id <= l.id),"
	        " l.result, l.manifest_path "
	        "FROM stacks s LEFT JOIN generations g ON g.id = s.current_gen "
	        "LEFT JOIN generations l ON l.id = (SELECT max(id) FROM generations "
	        "WHERE stack_id = s.id) ORDER BY s.name",
	        &s) != STATE_OK)
		return TF_ESTATE;
	while ((src = state_step(s)) == STATE_ROW) {
		nstacks++;
		int64_t sid = state_col_int64(s, 0);
		const char *name = state_col_text(s, 1);
		const char *last = state_col_text(s, 7);
		char ts[32];
		cli_time(state_col_int64(s, 3), ts);
		json_t *j = json_pack("{s:s,s:I,s:I,s:s,s:s}", "name", name, "generation",
		                      (json_int_t)state_col_int64(s, 2), "generations",
		                      (json_int_t)state_col_int64(s, 5), "applied", ts, "manifest",
		                      state_col_text(s, 4));
		struct strbuf ver = STRBUF_INIT;
		stack_versions(c, name, j, &ver);
		ev_log(c, EV_INFO, "stack %s: generation %lld of %lld, applied %s, from %s%s%s",
		       name, (long long)state_col_int64(s, 2), (long long)state_col_int64(s, 5), ts,
		       state_col_text(s, 4), ver.len ? "\n  " : "", ver.len ? ver.buf : "");
		strbuf_release(&ver);
		if (last && strcmp(last, "ok") != 0) {
			unfinished++;
			json_object_set_new(j, "last_apply", json_string(last));
			/* Re-applying the manifest the stack already runs is a no-op that
			 * records nothing, so only that run's own manifest finishes it. */
			const char *lm = state_col_text(s, 8);
			char *msg = xasprintf(
			    "  stack %s: the last apply (generation %lld, of %s) %s; `tfprov "
			    "apply %s` finishes it",
			    name, (long long)state_col_int64(s, 6), lm ? lm : "?",
			    strcmp(last, "interrupted") == 0 ? "was interrupted"
			    : strcmp(last, "running") == 0   ? "is running or was killed"
			                                     : "failed",
			    lm ? lm : "MANIFEST");
			char *fix = xasprintf("tfprov apply %s", lm ? lm : "MANIFEST");
			ev_finding(c, EV_WARN,
			           &(struct ev_finding){.origin = "status",
			                                .kind = "unfinished_apply",
			                                .severity = "warning",
			                                .stack = name,
			                                .path = lm,
			                                .expected = "ok",
			                                .actual = last,
			                                .fix = fix},
			           msg);
			free(fix);
			free(msg);
		}
		json_t *res = json_array();
		int before = drifted;
		if ((rc = stack_resources(c, name, sid, res, &drifted)) != 0) {
			json_decref(res);
			json_decref(j);
			break;
		}
		json_object_set_new(j, "resources", res);
		json_object_set_new(j, "drift", json_boolean(drifted > before));
		ev_data(c, "stack_status", j);
		json_decref(j);
	}
	state_finalize(s);
	if (rc == 0 && src != STATE_DONE)
		rc = TF_ESTATE;
	if (rc != 0)
		return rc;
	if (nstacks == 0)
		ev_log(c, EV_INFO, "No stacks.");
	return drifted || unfinished ? TF_ECHANGES : 0;
}
