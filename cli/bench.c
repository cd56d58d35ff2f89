/*
 * bench.c - `tfprov bench [STACK] [--history]`: how fast does the stack
 * compute on this machine's GPU, and is that what this GPU should reach?
 *
 * Order, each step gating the next:
 *  1. The GPU, checked the way `verify` checks it (stack_gpu_check): the
 *     driver first, then the native probe (one Conv2D forward through the
 *     stack's libcudart + libcudnn, compared with a CPU reference). No driver
 *     or no GPU: exit 8 with the reason and no number at all -- a CPU figure
 *     is never reported as a GPU one. A driver/library version mismatch: 7.
 *  2. The native figure (source=native): ms per forward of the probe's
 *     Conv2D, batch 8; recorded. It is not the TF step and is never compared
 *     with the TF reference numbers.
 *  3. The TensorFlow benchmark (source=tf): bench/bench_conv.py in the
 *     stack's Python env with the stack's environment (as its profile sets
 *     it), once per precision of the manifest's bench section (fp32 when none);
 *     each result is recorded. Skipped, with a note, when the stack has no
 *     Python env or bench.enabled is false. TF missing or seeing no GPU: 8.
 *  4. Each TF result is compared with bench/reference.yaml (same GPU name and
 *     precision); slower than the reference by more than bench.margin_pct
 *     (else the file's default_margin_pct, else 25%) is exit 8 when the
 *     reference is verified, a warning when it is not (the file says why).
 * `--history` prints the recorded results (of STACK, or all) and exits 0.
 *
 * Results go to the state's bench_results table, one row each in its own
 * statement (SQLite serialises it with a concurrent apply; no writer lock is
 * needed).
 * Environment overrides: TFPROV_BENCH_SCRIPT, TFPROV_BENCH_REFERENCE.
 */
#include "gpu.h"
#include "cli.h"
#include "datadir.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "stackinfo.h"
#include "state.h"
#include "yamltree.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_DEFAULT_MARGIN 25

struct bench_row {
	const char *source, *precision, *gpu, *tf, *cuda, *cudnn;
	double ms, ips;
	const char *raw;
};

static void print_header(struct ctx *c)
{
	ev_log(c, EV_INFO, "  %-6s %-13s %-28s %10s %10s  %-8s %-8s %-10s", "source", "precision",
	       "gpu", "ms/step", "images/s", "TF", "CUDA", "cuDNN");
}

static void print_row(struct ctx *c, const struct bench_row *r)
{
	ev_log(c, EV_INFO, "  %-6s %-13s %-28.28s %10.3f %10.1f  %-8s %-8s %-10s", r->source,
	       r->precision ? r->precision : "-", r->gpu ? r->gpu : "-", r->ms, r->ips,
	       r->tf ? r->tf : "-", r->cuda ? r->cuda : "-", r->cudnn ? r->cudnn : "-");
}

static int record(struct ctx *c, int64_t stack_id, const struct bench_row *r)
{
	struct state_bench_row row = {
	    .source = r->source,
	    .precision = r->precision,
	    .gpu = r->gpu,
	    .tf = r->tf,
	    .cuda = r->cuda,
	    .cudnn = r->cudnn,
	    .raw = r->raw,
	    .ms = r->ms,
	    .ips = r->ips,
	};
	int rc = state_bench_add(c->st, stack_id, &row);
	if (rc != 0)
		ev_log(c, EV_ERROR, "cannot record the result: %s", state_errmsg(c->st));
	return rc;
}

struct history {
	struct ctx *c;
	int n;
};

static int history_row(void *arg, const struct state_bench_row *r)
{
	struct history *h = arg;
	if (h->n++ == 0)
		ev_log(h->c, EV_INFO, "%-20s %-10s %-6s %-13s %-28s %10s %10s  %-8s %-8s %s",
		       "when (UTC)", "stack", "source", "precision", "gpu", "ms/step", "images/s",
		       "TF", "CUDA", "cuDNN");
	time_t at = (time_t)r->at;
	char ts[32];
	strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", gmtime(&at));
#define COL(v) ((v) ? (v) : "-")
	ev_log(h->c, EV_INFO, "%-20s %-10s %-6s %-13s %-28.28s %10.3f %10.1f  %-8s %-8s %s", ts,
	       r->stack ? r->stack : "(destroyed)", COL(r->source), COL(r->precision), COL(r->gpu),
	       r->ms, r->ips, COL(r->tf), COL(r->cuda), COL(r->cudnn));
#undef COL
	return 0;
}

static int bench_history(struct ctx *c, const char *stack)
{
	if (c->st == NULL) {
		ev_log(c, EV_INFO, "No benchmark results: nothing was applied under %s.", c->root);
		return 0;
	}
	struct history h = {.c = c};
	int rc = state_bench_each(c->st, stack, history_row, &h);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "cannot read the benchmark history: %s", state_errmsg(c->st));
		return rc;
	}
	if (h.n == 0)
		ev_log(c, EV_INFO, "No benchmark results%s%s yet.", stack ? " for stack " : "",
		       stack ? stack : "");
	return 0;
}

/*
 * The reference entry for gpu+precision: 0 found (ms, verified set), -ENOENT
 * none, TF_EFAIL unreadable.
 */
static int reference_lookup(const char *path, const char *gpu, const char *precision, double *ms,
                            int *verified, int *default_margin)
{
	char *buf = NULL;
	size_t len = 0;
	struct diags d = {0};
	struct ynode *root = NULL;
	int empty = 0, rc = TF_EFAIL;
	struct ytree_limits lim = {10000, 16};
	if (read_file_at(AT_FDCWD, path, 1 << 20, &buf, &len) != 0)
		goto out;
	root = ytree_parse(path, buf, len, &lim, &d, &empty);
	if (root == NULL || root->type != Y_MAP)
		goto out;
	rc = -ENOENT;
	struct ynode *dm = ymap_get(root, "default_margin_pct");
	if (dm && dm->type == Y_SCALAR)
		*default_margin = atoi(dm->str);
	struct ynode *refs = ymap_get(root, "references");
	for (size_t i = 0; refs && refs->type == Y_SEQ && i < refs->n; i++) {
		struct ynode *g = ymap_get(refs->items[i], "gpu");
		struct ynode *p = ymap_get(refs->items[i], "precision");
		struct ynode *m = ymap_get(refs->items[i], "ms_per_step");
		struct ynode *v = ymap_get(refs->items[i], "verified");
		if (!g || !p || !m || g->type != Y_SCALAR || p->type != Y_SCALAR ||
		    m->type != Y_SCALAR)
			continue;
		if (strcmp(g->str, gpu) != 0 || strcmp(p->str, precision) != 0)
			continue;
		*ms = strtod(m->str, NULL);
		*verified = v && v->type == Y_SCALAR && strcmp(v->str, "true") == 0;
		rc = 0;
		break;
	}
out:
	ytree_free(root);
	diags_release(&d);
	free(buf);
	return rc;
}

/* Judges one TF result against the reference; TF_EVERIFY when verifiably too slow. */
/*
 * ...; `note` (may be NULL) gets the verdict in a few words for apply's summary, and
 * then a result slower than a verified reference is a warning, not TF_EVERIFY.
 */
static int compare_reference(struct ctx *c, const struct stackinfo *si, const struct bench_row *r,
                             struct strbuf *note)
{
	char buf[4096];
	const char *path =
	    datadir_path("TFPROV_BENCH_REFERENCE", "bench/reference.yaml", buf, sizeof(buf));
	double ref = 0;
	int verified = 0, margin = BENCH_DEFAULT_MARGIN;
	int look = reference_lookup(path, r->gpu, r->precision, &ref, &verified, &margin);
	if (si->m->bench.margin_pct.set)
		margin = (int)si->m->bench.margin_pct.v;
	if (look < 0 && look != -ENOENT) {
		ev_log(c, EV_WARN, "  %s: the reference numbers %s cannot be read: not compared",
		       r->precision, path);
		if (note)
			strbuf_adds(note, "reference unreadable: not compared");
		return 0;
	}
	if (look == -ENOENT) {
		ev_log(c, EV_INFO, "  %s: no reference number for %s in %s: not compared",
		       r->precision, r->gpu, path);
		if (note)
			strbuf_addf(note, "no reference for this GPU");
		return 0;
	}
	double limit = ref * (1.0 + margin / 100.0);
	if (r->ms <= limit) {
		ev_log(c, EV_INFO, "  %s: %.3f ms/step is within %d%% of the reference %.3f ms%s",
		       r->precision, r->ms, margin, ref,
		       verified ? "" : " (an unverified reference)");
		if (note)
			strbuf_addf(note, "reference %.3f ms: %+.0f%%, within %d%%%s", ref,
			            (r->ms / ref - 1.0) * 100.0, margin,
			            verified ? "" : " (unverified)");
		return 0;
	}
	if (!verified) {
		ev_log(c, EV_WARN,
		       "  %s: %.3f ms/step is slower than the reference %.3f ms by more than %d%%; "
		       "the reference is unverified (its source did not say how it measured), so "
		       "this is not a failure",
		       r->precision, r->ms, ref, margin);
		if (note)
			strbuf_addf(note,
			            "reference %.3f ms: %+.0f%%, SLOWER than %d%% (unverified "
			            "reference: a warning)",
			            ref, (r->ms / ref - 1.0) * 100.0, margin);
		return 0;
	}
	/* After an apply (note given) slowness is a warning: the stack is applied and works. */
	ev_log(c, note ? EV_WARN : EV_ERROR,
	       "  %s: %.3f ms/step is slower than the reference %.3f ms for %s by more than %d%% "
	       "(limit %.3f ms): check clocks and power limits (nvidia-smi -q -d "
	       "PERFORMANCE), other processes on the GPU, and the PCIe link",
	       r->precision, r->ms, ref, r->gpu, margin, limit);
	if (note) {
		strbuf_addf(note, "reference %.3f ms: %+.0f%%, SLOWER than the %d%% margin", ref,
		            (r->ms / ref - 1.0) * 100.0, margin);
		return 0;
	}
	return TF_EVERIFY;
}

static char *cudnn_version_text(long v)
{
	if (v >= 90000) /* cuDNN 9: major*10000 + minor*100 + patch */
		return xasprintf("%ld.%ld.%ld", v / 10000, v / 100 % 100, v % 100);
	if (v > 0) /* cuDNN 8 and older: major*1000 + minor*100 + patch */
		return xasprintf("%ld.%ld.%ld", v / 1000, v / 100 % 10, v % 100);
	return NULL;
}

/* The TF benchmark for each precision. Returns 0 or TF_EVERIFY. */
static int bench_tf(struct ctx *c, const struct stackinfo *si, int *printed_header,
                    struct strvec *summary)
{
	const struct manifest *m = si->m;
	struct strvec env = STRVEC_INIT;
	char buf[4096];
	int rc = 0;
	if (m->bench.set && m->bench.enabled.set && !m->bench.enabled.v) {
		ev_log(c, EV_INFO, "TensorFlow benchmark: not run (bench.enabled: false)");
		if (summary)
			strvec_push(summary,
			            "TensorFlow benchmark: not run (bench.enabled: false)");
		return 0;
	}
	if (si->python == NULL || access(si->python, X_OK) != 0) {
		ev_log(c, EV_WARN, "TensorFlow benchmark: not run: the stack has no Python env%s%s",
		       si->python ? " at " : "", si->python ? si->python : "");
		if (summary)
			strvec_push(summary,
			            "TensorFlow benchmark: not run (the stack has no Python env)");
		return 0;
	}
	const char *script =
	    datadir_path("TFPROV_BENCH_SCRIPT", "bench/bench_conv.py", buf, sizeof(buf));
	stackinfo_env(si, &env);
	size_t np = m->bench.nprecisions ? m->bench.nprecisions : 1;
	for (size_t i = 0; i < np && !tf_interrupted; i++) {
		const char *prec = m->bench.nprecisions ? m->bench.precisions[i].s : "fp32";
		struct strvec args = STRVEC_INIT;
		struct bench_result r = {0};
		struct why err = {0};
		strvec_push(&args, "--precision");
		strvec_push(&args, prec);
		if (m->bench.batch_size.set)
			strvec_pushf(&args, "--batch-size=%lld", (long long)m->bench.batch_size.v);
		if (m->bench.steps.set)
			strvec_pushf(&args, "--steps=%lld", (long long)m->bench.steps.v);
		struct bench_opts bo = {.python = si->python,
		                        .script = script,
		                        .envp = env.v,
		                        .args = (const char *const *)args.v};
		ev_log(c, EV_INFO, "TensorFlow benchmark (%s) in %s ...", prec, si->env_prefix);
		if (bench_run(c, &bo, &r, &err) != 0) {
			ev_log(c, EV_ERROR, "TensorFlow benchmark (%s) failed: %s", prec,
			       why_text(&err));
			if (summary)
				strvec_pushf(summary, "%s: FAILED: %s", prec, why_text(&err));
			rc = TF_EVERIFY;
		} else if (!r.ok) {
			ev_log(c, EV_ERROR, "TensorFlow benchmark (%s): no GPU number: %s", prec,
			       r.reason ? r.reason : "no reason given");
			if (summary)
				strvec_pushf(summary, "%s: FAILED: no GPU number: %s", prec,
				             r.reason ? r.reason : "no reason given");
			rc = TF_EVERIFY;
		} else {
			struct bench_row row = {
			    .source = "tf",
			    .precision = r.precision ? r.precision : prec,
			    .gpu = r.gpu,
			    .tf = r.tf_version ? r.tf_version : si->tf,
			    .cuda = r.cuda_version ? r.cuda_version : si->cuda,
			    .cudnn = r.cudnn_version ? r.cudnn_version : si->cudnn,
			    .ms = r.ms_per_step,
			    .ips = r.images_per_sec,
			    .raw = r.raw_json,
			};
			record(c, si->stack_id, &row);
			if (!*printed_header) {
				print_header(c);
				*printed_header = 1;
			}
			print_row(c, &row);
			struct strbuf note = STRBUF_INIT;
			if (compare_reference(c, si, &row, summary ? &note : NULL) != 0)
				rc = TF_EVERIFY;
			if (summary)
				strvec_pushf(summary, "%s %.3f ms/step, %.1f images/s on %s (%s)",
				             row.precision, row.ms, row.ips,
				             row.gpu ? row.gpu : "GPU 0", note.buf ? note.buf : "");
			strbuf_release(&note);
		}
		why_clear(&err);
		bench_result_release(&r);
		strvec_release(&args);
	}
	strvec_release(&env);
	return rc;
}

static int bench_native(struct ctx *c, const struct stackinfo *si, const struct stack_gpu *g)
{
	const struct convprobe_result *r = &g->conv;
	char *cudnn = cudnn_version_text(r->cudnn_version);
	json_t *j = json_pack(
	    "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, "
	    "s:i, s:I, s:i, s:i, s:i, s:I}",
	    "probe", "conv2d-forward", "n", r->params.n, "c", r->params.c, "h", r->params.h, "w",
	    r->params.w, "k", r->params.k, "r", r->params.r, "s", r->params.s, "iters",
	    r->params.iters, "ms_per_forward", r->ms_per_forward, "gflops", r->gflops,
	    "max_abs_err", r->max_abs_err, "tol", r->params.tol, "algo", r->algo, "workspace",
	    (json_int_t)r->workspace, "runtime_version", r->runtime_version, "driver_version",
	    r->driver_version, "cc", r->cc_major * 10 + r->cc_minor, "cudnn_version",
	    (json_int_t)r->cudnn_version);
	char *raw = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	struct bench_row row = {
	    .source = "native",
	    .precision = "fp32",
	    .gpu = g->probe.ngpus > 0 ? g->probe.gpus[0].name : "GPU 0",
	    .tf = si->tf,
	    .cuda = si->cuda,
	    .cudnn = cudnn ? cudnn : si->cudnn,
	    .ms = r->ms_per_forward,
	    .ips = r->images_per_s,
	    .raw = raw,
	};
	int rc = record(c, si->stack_id, &row);
	ev_log(c, EV_INFO,
	       "native probe: Conv2D forward %dx%dx%dx%d -> %d filters %dx%d through cuDNN %s: "
	       "matches the CPU reference (max abs error %.3g); not the TF step, so it is not "
	       "compared with the TF references",
	       r->params.n, r->params.c, r->params.h, r->params.w, r->params.k, r->params.r,
	       r->params.s, row.cudnn ? row.cudnn : "?", r->max_abs_err);
	print_header(c);
	print_row(c, &row);
	free(raw);
	json_decref(j);
	free(cudnn);
	return rc;
}

static int bench_named(struct ctx *c, const char *name, int *printed, struct strvec *summary);

int cmd_bench(struct ctx *c, struct opts *o)
{
	struct strvec names = STRVEC_INIT;
	const char *name = o->args.n ? o->args.v[0] : NULL;
	int rc = 0, printed = 0;
	if (o->history) {
		rc = bench_history(c, name);
		goto out;
	}
	if (c->st == NULL || stackinfo_names(c, &names) != 0 || names.n == 0) {
		ev_log(c, EV_ERROR, "nothing to benchmark: no stack was applied under %s", c->root);
		rc = TF_EFAIL;
		goto out;
	}
	if (name == NULL) {
		if (names.n > 1) {
			ev_log(c, EV_ERROR,
			       "%zu stacks are applied: name the one to benchmark "
			       "(tfprov bench STACK)",
			       names.n);
			rc = TF_EUSAGE;
			goto out;
		}
		name = names.v[0];
	}
	rc = bench_named(c, name, &printed, NULL);
out:
	if (rc == TF_EVERIFY && !o->history)
		ev_log(c, EV_ERROR, "bench: FAILED");
	strvec_release(&names);
	return rc;
}

int cli_bench_stack(struct ctx *c, const char *name, struct strvec *summary)
{
	int printed = 0;
	return bench_named(c, name, &printed, summary);
}

/* cmd_bench's steps 1-4 for one stack; summary as cli_bench_stack. */
static int bench_named(struct ctx *c, const char *name, int *printed, struct strvec *summary)
{
	struct stackinfo si = {0};
	struct stack_gpu g;
	struct why err = {0};
	int rc = stackinfo_load(c, name, &si, &err);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "%s", err.msg ? err.msg : "no such stack");
		if (rc == -ENOENT)
			ev_log(c, EV_ERROR, "no stack named %s", name);
		rc = rc == -ENOENT ? TF_EFAIL : rc;
		goto out;
	}
	if (!si.has_cuda) {
		ev_log(c, EV_ERROR,
		       "stack %s has no CUDA step: there is nothing to benchmark on a "
		       "GPU",
		       name);
		rc = TF_EFAIL;
		goto out;
	}
	ev_log(c, EV_INFO, "bench %s: TensorFlow %s, CUDA %s, cuDNN %s", name, si.tf ? si.tf : "?",
	       si.cuda ? si.cuda : "?", si.cudnn ? si.cudnn : "?");
	stack_gpu_check(&si, &g);
	switch (g.verdict) {
	case STACK_GPU_OK:
		break;
	case STACK_GPU_ABSENT:
		ev_log(c, EV_ERROR,
		       "no GPU is present: %s. No benchmark was run: a CPU figure is never "
		       "reported as a GPU one",
		       g.reason);
		rc = TF_EVERIFY;
		goto out;
	case STACK_GPU_REBOOT:
		ev_log(c, EV_ERROR, "%s. Reboot, then run `tfprov bench` again", g.reason);
		rc = TF_EREBOOT;
		goto out;
	case STACK_GPU_NOT_RUN:
	case STACK_GPU_FAILED:
		ev_log(c, EV_ERROR,
		       "the GPU check failed at the %s layer: %s. No benchmark was run; `tfprov "
		       "verify %s` says more",
		       g.layer, g.reason, name);
		rc = TF_EVERIFY;
		goto out;
	}
	rc = bench_native(c, &si, &g);
	if (rc != 0)
		goto out;
	if (summary)
		strvec_pushf(
		    summary, "native Conv2D probe %.3f ms per forward on %s (not the TF step)",
		    g.conv.ms_per_forward, g.probe.ngpus > 0 ? g.probe.gpus[0].name : "GPU 0");
	rc = bench_tf(c, &si, printed, summary);
out:
	why_clear(&err);
	stackinfo_release(&si);
	return rc;
}
