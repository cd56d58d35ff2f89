/*
 * apply.c - `tfprov apply MANIFEST`: plan, ask (on a TTY), apply; then the
 * machine's default stack: the first stack applied becomes it, a later one
 * with --default; how to use what was installed; and the proof: an apply
 * that changed something (or `--bench`) ends with `verify` of the stack and,
 * where a GPU checked out and bench.enabled is true, the conv benchmark,
 * recorded in state and summarised in the last lines. A proof that fails is
 * exit 8 (7 for a reboot) with the stack applied and recorded: the files are
 * right, the machine cannot compute with them; a result slower than the
 * reference by more than bench.margin_pct is a warning. A no-change apply without
 * --bench does none of it.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "module.h"
#include "plan.h"
#include "state.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * A run of this very manifest that was killed (or failed) after its last
 * step committed left its generation unfinished and the stack's current
 * generation behind what is placed. Planning it again finds nothing to do:
 * everything it wanted is there, so that generation is finished now, as
 * `status` promises, and the stack's recorded manifest is the placed one
 * again (run, env, verify and the login script read it).
 */
static int finish_unfinished(struct ctx *c, const struct manifest *m)
{
	struct state_gen *v = NULL;
	size_t n = 0;
	int rc = 0;
	int64_t sid = c->st ? state_stack_id(c->st, m->stack.name.s) : 0;
	if (sid == 0 || state_gens_list(c->st, sid, &v, &n) != 0 || n == 0)
		goto out;
	const struct state_gen *last = &v[n - 1];
	struct state_gen cur = {0};
	state_gen_current(c->st, m->stack.name.s, &cur);
	int behind = strcmp(last->result, "ok") != 0 || cur.id != last->id;
	state_gen_release(&cur);
	if (behind && last->manifest_sha256 && strcmp(last->manifest_sha256, m->sha256) == 0) {
		rc = state_gen_finish(c->st, last->id, "ok");
		if (rc == 0)
			ev_log(c, EV_INFO,
			       "The unfinished apply of this manifest (generation %lld) had placed "
			       "everything: recorded as finished.",
			       (long long)last->number);
	}
out:
	state_gens_free(v, n);
	return rc;
}

/*
 * After an apply that succeeded (or found nothing to do): the in-use mark,
 * the default (the first stack on a machine, or --default), the login
 * script brought in line with the state, and how to use the stack.
 */
static int use_stack(struct ctx *c, const struct opts *o, const struct manifest *m)
{
	const char *name = m->stack.name.s;
	char *def = NULL;
	int rc = 0, first = 0;
	if (c->st == NULL)
		return 0;
	cli_stack_mark(c, name);
	rc = state_setting_get(c->st, "default_stack", &def);
	/* Never chosen (absent, not ''): the first stack applied becomes the default. */
	first = rc == 0 && def == NULL;
	if (rc == 0 && (o->make_default || first) && (def == NULL || strcmp(def, name) != 0)) {
		rc = cli_set_default(c, name, m);
		if (rc == 0)
			ev_log(c, EV_INFO, "Login shells now enter stack %s%s%s%s.", name,
			       first ? " (the first stack on this machine)" : "",
			       def && def[0] ? ", not " : "", def && def[0] ? def : "");
		free(def);
		def = xstrdup(name);
	} else if (rc == 0) {
		rc = cli_login_sync(c, m);
	}
	if (rc == 0) {
		struct strbuf line = STRBUF_INIT;
		json_t *j = json_pack("{s:s}", "stack", name);
		cli_stack_usage(c, name, m, j, &line);
		ev_log(c, EV_INFO, "Stack %s: %s", name, line.buf);
		ev_data(c, "stack_use", j);
		json_decref(j);
		strbuf_release(&line);
	}
	if (rc == 0 && def && def[0] && strcmp(def, name) != 0)
		ev_log(c, EV_INFO,
		       "Login shells enter stack %s (the default); `tfprov default %s` switches "
		       "them to this one.",
		       def, name);
	free(def);
	return rc;
}

/* The proof of an applied stack (see the top of this file). 0 or its failure. */
static int prove(struct ctx *c, const struct manifest *m)
{
	const char *name = m->stack.name.s;
	struct strvec sum = STRVEC_INIT;
	int skipped = 0, has_cuda = 0, b = 0;
	int bench_on = m->bench.set && m->bench.enabled.set && m->bench.enabled.v;
	ev_log(c, EV_INFO, "\nProof of stack %s:", name);
	int v = cli_verify_stack(c, name, &skipped, &has_cuda);
	if (v == 0 && has_cuda && !skipped && bench_on)
		b = cli_bench_stack(c, name, &sum);
	ev_log(c, EV_INFO, "\nStack %s, proof:", name);
	if (v == TF_EREBOOT)
		ev_log(c, EV_ERROR,
		       "  verify: files and libraries ok; REBOOT required before the GPU "
		       "can be used");
	else if (v != 0)
		ev_log(c, EV_ERROR, "  verify: FAILED (see above)");
	else if (!has_cuda)
		ev_log(c, EV_INFO, "  verify: ok (files; no CUDA step: no library or GPU check)");
	else if (skipped)
		ev_log(c, EV_WARN,
		       "  verify: files and libraries ok; GPU compute check SKIPPED (no "
		       "GPU): the stack is NOT proven to compute on a GPU");
	else
		ev_log(c, EV_INFO, "  verify: ok (files, libraries, GPU compute)");
	if (has_cuda && v == 0 && skipped)
		ev_log(c, EV_WARN, "  benchmark: SKIPPED (no GPU): no number was measured");
	else if (has_cuda && v != 0)
		ev_log(c, EV_ERROR, "  benchmark: not run: verify failed");
	else if (has_cuda && !bench_on)
		ev_log(c, EV_INFO,
		       "  benchmark: not run (bench.enabled is not true; `tfprov bench "
		       "%s` runs it)",
		       name);
	else if (has_cuda)
		for (size_t i = 0; i < sum.n; i++)
			ev_log(c,
			       strstr(sum.v[i], "FAILED")   ? EV_ERROR
			       : strstr(sum.v[i], "SLOWER") ? EV_WARN
			                                    : EV_INFO,
			       "  benchmark: %s", sum.v[i]);
	strvec_release(&sum);
	int rc = v == TF_EREBOOT ? TF_EREBOOT : v != 0 || b != 0 ? TF_EVERIFY : 0;
	if (rc == TF_EVERIFY)
		ev_log(c, EV_ERROR,
		       "stack %s is applied and recorded, but it is not proven to work here (see "
		       "above)",
		       name);
	return rc;
}

int cmd_apply(struct ctx *c, struct opts *o)
{
	struct manifest *m = NULL;
	struct plan p;
	char *sigtext = NULL;
	uint64_t t0 = now_ns();
	int rc = cli_load_manifest(c, o->args.v[0], &m, 1); /* warnings too, as plan shows them */
	if (rc == 0)
		rc = cli_check_signature_keep(c, m, &sigtext);
	if (rc != 0) {
		manifest_free(m);
		return rc;
	}
	plan_build(c, m, &p);
	if (!plan_has_changes(&p)) {
		plan_emit(c, &p);
		ev_log(c, EV_DEBUG, "checked in %.1f ms", (double)(now_ns() - t0) / 1e6);
		rc = finish_unfinished(c, m);
		if (rc == 0 && c->st)
			rc = use_stack(c, o, m);
		if (rc == 0)
			rc = cli_keep_signature(c, m, sigtext);
		if (rc == 0 && c->st && o->bench)
			rc = prove(c, m);
		goto out;
	}
	ev_log(c, EV_INFO, "Stack %s (%s) from %s:\n", m->stack.name.s,
	       platform_name(m->stack.platform), m->path);
	plan_emit(c, &p);
	if (!cli_confirm(c, "apply",
	                 "Do you want to perform these actions?\n  tfprov will perform the "
	                 "actions described above.")) {
		rc = TF_EFAIL;
		goto out;
	}
	/* Not under a command running in the stack (tfprov run): wait or exit 4. */
	rc = c->st ? cli_stack_claim(c, m->stack.name.s, "apply") : 0;
	if (rc == 0) {
		struct why w = {0};
		rc = cli_say_why(c, plan_apply(c, m, &p, &w), &w);
	}
	if (rc == 0)
		ev_log(c, EV_INFO, "\nApply complete: %d added, %d changed, %d destroyed (%.1f s).",
		       p.add, p.change, p.destroy, (double)(now_ns() - t0) / 1e9);
	if (rc == 0)
		rc = cli_keep_signature(c, m, sigtext);
	if (rc == 0)
		rc = use_stack(c, o, m);
	if (rc == 0)
		rc = prove(c, m);
	else if (rc == TF_EINTR)
		ev_log(c, EV_ERROR,
		       "interrupted; every finished step is recorded, the rest will "
		       "be done by the next apply");
out:
	free(sigtext);
	plan_release(&p);
	manifest_free(m);
	return rc;
}
