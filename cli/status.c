/*
 * status.c - `tfprov status [STACK]`: every stack (or the one named), its
 * current generation and versions, and a fast drift check (stat of every
 * recorded file against size and mtime). A named stack is checked alone, so
 * the time does not grow with the other stacks of the machine; an unknown
 * name is exit 1.
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

#include <fcntl.h>
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
	struct state_resource *v = NULL;
	size_t nv = 0;
	int rc = state_resources_list(c->st, sid, &v, &nv);
	for (size_t i = 0; i < nv && rc == 0; i++) {
		int missing, changed, listed;
		int64_t dists;
		const char *addr = v[i].addr;
		/* pip's files live in the env; it records what it installed (its attrs). */
		rc = module_installed(v[i].kind, v[i].attrs, NULL, &listed, &dists);
		if (rc != 0)
			break;
		long long n = (long long)drift_check(c, v[i].id, &missing, &changed);
		struct strvec found = STRVEC_INIT;
		if (module_drift(c, v[i].kind, sid, v[i].attrs, &found) != 0)
			strvec_push(&found, "its env's distributions cannot be read");
		json_t *o = json_pack("{s:s,s:I,s:i,s:i}", "step", addr, "paths", (json_int_t)n,
		                      "missing", missing, "changed", changed);
		if (listed)
			json_object_set_new(o, "distributions", json_integer(dists));
		if (found.n) {
			json_t *fa = json_array();
			for (size_t k = 0; k < found.n; k++)
				json_array_append_new(fa, json_string(found.v[k]));
			json_object_set_new(o, "distribution_drift", fa);
		}
		json_array_append_new(res, o);
		for (size_t k = 0; k < found.n; k++) {
			char *msg = xasprintf("  %s: DRIFT: %s", addr, found.v[k]);
			ev_finding(
			    c, EV_WARN,
			    &(struct ev_finding){.origin = "status",
			                         .kind = "drift",
			                         .severity = "warning",
			                         .stack = stack,
			                         .path = addr,
			                         .expected = "the distributions as installed",
			                         .actual = found.v[k],
			                         .fix = "tfprov apply repairs them"},
			    msg);
			free(msg);
		}
		size_t nfound = found.n;
		if (nfound && !(missing || changed))
			(*drifted)++;
		strvec_release(&found);
		if (missing || changed) {
			(*drifted)++;
			char *msg = xasprintf("  %s: DRIFT: %d missing, %d changed of %lld path%s",
			                      addr, missing, changed, n, plural_s(n));
			char *want = xasprintf("%lld path%s as placed", n, plural_s(n));
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
		} else if (nfound) {
			/* named above */
		} else if (listed) {
			ev_log(c, EV_INFO, "  %-8s ok, %lld distribution%s recorded in the env",
			       addr, (long long)dists, plural_s(dists));
		} else {
			ev_log(c, EV_INFO, "  %-8s ok, %lld path%s", addr, n, plural_s(n));
		}
	}
	state_resources_free(v, nv);
	return rc;
}

/* "TensorFlow 2.15.1, CUDA 12.3.2, cuDNN 8.9.7.29, Python 3.10" of the current generation. */
static void stack_versions(struct ctx *c, const char *name, json_t *o, struct strbuf *line)
{
	struct stackinfo si;
	struct why err = {0};
	if (stackinfo_load(c, name, &si, &err) != 0) {
		why_clear(&err);
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
	strbuf_adds(line, "\n  ");
	cli_stack_usage(c, name, si.m, o, line);
	stackinfo_release(&si);
}

/*
 * A writer (apply, rollback, destroy, gc) running on this root, said first:
 * while the first apply runs, no stack is recorded yet, and "No stacks" would
 * be wrong. 1 when one runs.
 */
static int say_running_writer(struct ctx *c)
{
	long pid = 0;
	char *holder = NULL, *argv = NULL;
	const char *what = NULL;
	if (!state_writer_running(c->state_dir, &pid, &holder))
		return 0;
	char *cmdline = pid > 0 ? xasprintf("/proc/%ld/cmdline", pid) : NULL;
	size_t len = 0;
	static const char *const cmds[] = {"apply", "rollback", "destroy", "gc"};
	static const char *const says[] = {"an apply", "a rollback", "a destroy", "a gc"};
	if (cmdline && read_file_at(AT_FDCWD, cmdline, 1 << 16, &argv, &len) == 0)
		for (size_t i = 0; i < len; i += strlen(argv + i) + 1)
			for (size_t k = 0; k < ARRAY_SIZE(cmds); k++)
				if (what == NULL && strcmp(argv + i, cmds[k]) == 0)
					what = says[k];
	if (what == NULL)
		what = "a tfprov run that changes this root";
	ev_log(c, EV_INFO,
	       "%c%s is running under %s (%s): what it changes shows here as each step "
	       "commits.",
	       what[0] - 'a' + 'A', what + 1, c->root, holder);
	free(cmdline);
	free(argv);
	free(holder);
	return 1;
}

int cmd_status(struct ctx *c, struct opts *o)
{
	int running = say_running_writer(c);
	const char *only = o->args.n == 1 ? o->args.v[0] : NULL;
	if (only && (c->st == NULL || state_stack_id(c->st, only) == 0)) {
		ev_log(c, EV_ERROR, "no stack named '%s' under %s", only, c->root);
		return TF_EFAIL;
	}
	if (c->st == NULL) {
		if (running)
			ev_log(c, EV_INFO, "No stack is recorded yet under %s.", c->root);
		else
			ev_log(c, EV_INFO, "No stacks: nothing was applied under %s.", c->root);
		return 0;
	}
	struct state_stack_info *v = NULL;
	size_t nv = 0;
	int drifted = 0, unfinished = 0, nstacks = 0, rc;
	if ((rc = state_stacks_list(c->st, &v, &nv)) != 0)
		return rc;
	char *def = cli_default_stack(c);
	if (nv)
		ev_log(c, EV_INFO, "Default stack (login shells): %s",
		       def ? def : "none (`tfprov default STACK` chooses one)");
	json_t *dj = json_pack("{s:s?}", "stack", def);
	ev_data(c, "default_stack", dj);
	json_decref(dj);
	free(def);
	for (size_t i = 0; i < nv; i++) {
		if (only && strcmp(v[i].name, only) != 0)
			continue;
		nstacks++;
		int64_t sid = v[i].id;
		const char *name = v[i].name;
		const char *last = v[i].last_result;
		char ts[32];
		cli_time(v[i].applied, ts);
		json_t *j = json_pack("{s:s,s:I,s:I,s:s,s:s}", "name", name, "generation",
		                      (json_int_t)v[i].gen, "generations", (json_int_t)v[i].ngens,
		                      "applied", ts, "manifest", v[i].manifest_path);
		struct strbuf ver = STRBUF_INIT;
		stack_versions(c, name, j, &ver);
		ev_log(c, EV_INFO, "stack %s: generation %lld of %lld, applied %s, from %s%s%s",
		       name, (long long)v[i].gen, (long long)v[i].ngens, ts, v[i].manifest_path,
		       ver.len ? "\n  " : "", ver.len ? ver.buf : "");
		strbuf_release(&ver);
		if (last && strcmp(last, "ok") != 0) {
			unfinished++;
			json_object_set_new(j, "last_apply", json_string(last));
			/* Re-applying the manifest the stack already runs is a no-op that
			 * records nothing, so only that run's own manifest finishes it. */
			const char *lm = v[i].last_manifest;
			char *msg = xasprintf(
			    "  stack %s: the last apply (generation %lld, of %s) %s; `tfprov "
			    "apply %s` finishes it",
			    name, (long long)v[i].last_gen, lm ? lm : "?",
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
	state_stacks_free(v, nv);
	if (rc != 0)
		return rc;
	if (nstacks == 0)
		ev_log(c, EV_INFO, "%s", running ? "No stack is recorded yet." : "No stacks.");
	return drifted || unfinished ? TF_ECHANGES : 0;
}
