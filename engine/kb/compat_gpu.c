/*
 * compat_gpu.c - the one rule for a GPU, a driver and a CUDA release, as
 * `validate` (driver.gpus, driver.min_version), `plan`/`apply` (the driver
 * step: the GPUs and driver NVML reports), `doctor` (the same, for each
 * stack) and `init --gpu` all apply it. Each command words the outcome for
 * its own surface (a diagnostic, a step failure, a finding, a log line); what
 * is wrong and how badly is decided here only, from data/compat.yaml.
 *
 *  - a GPU: TF's kernels for its compute capability (none: an error; PTX only:
 *    a warning), then the CUDA release against the GPU's row (dropped: an
 *    error; older than its first CUDA: a warning), a capability the table does
 *    not list (newer than a known family: PTX at best; else unknown);
 *  - a driver against a CUDA release: at or above its own minimum, at or
 *    above its family's minor-version-compatibility floor (a warning), or
 *    below (an error: the runtime refuses to start).
 */
#include "kb.h"
#include "kb_int.h"
#include "error.h"
#include "version.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void compat_verdict_release(struct compat_verdict *v)
{
	free(v->msg);
	free(v->hint);
	memset(v, 0, sizeof(*v));
}

static void verdict(struct compat_verdict *v, enum diag_severity sev, const char *code, char *hint,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void verdict(struct compat_verdict *v, enum diag_severity sev, const char *code, char *hint,
                    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	v->msg = xvasprintf(fmt, ap);
	va_end(ap);
	v->sev = sev;
	v->code = code;
	v->hint = hint;
}

const struct compat_cc *compat_cc_row(const struct compat *kb, const char *cc)
{
	int c = compat_cc_parse(cc);

	for (size_t i = 0; c >= 0 && i < kb->nccs; i++)
		if (compat_cc_parse(kb->ccs[i].cc) == c ||
		    (kb->ccs[i].formerly != NULL && compat_cc_parse(kb->ccs[i].formerly) == c))
			return &kb->ccs[i];
	return NULL;
}

/* The newest known row of cc's major when cc is newer than all of them, else NULL. */
static const struct compat_cc *cc_family_top(const struct compat *kb, const char *cc)
{
	const struct compat_cc *top = NULL;
	int c = compat_cc_parse(cc);

	for (size_t i = 0; c >= 0 && i < kb->nccs; i++) {
		int r = compat_cc_parse(kb->ccs[i].cc);
		if (r / 10 == c / 10 && (top == NULL || r > compat_cc_parse(top->cc)))
			top = &kb->ccs[i];
	}
	return top != NULL && compat_cc_parse(top->cc) < c ? top : NULL;
}

static void kernel_list(struct strbuf *sb, const struct compat_tf_kernels *k)
{
	for (size_t i = 0; i < k->nsass; i++)
		strbuf_addf(sb, "%ssm_%d", i ? "," : "", compat_cc_parse(k->sass[i]));
	for (size_t i = 0; i < k->nptx; i++)
		strbuf_addf(sb, "%scompute_%d", sb->len ? "," : "", compat_cc_parse(k->ptx[i]));
	if (sb->len == 0)
		strbuf_addf(sb, "compute capability >= %s", k->min_cc);
}

/* A compute capability the table does not list. */
static void judge_unlisted(const struct compat *kb, const char *s, const char *cc,
                           const struct compat_tf_kernels *k, struct compat_verdict *v)
{
	const struct compat_cc *top = cc_family_top(kb, cc);
	struct strbuf sb = STRBUF_INIT;

	if (top == NULL) {
		verdict(
		    v, DIAG_WARNING, "compat.gpu-cc-unknown",
		    xstrdup("compute capabilities are listed at developer.nvidia.com/cuda-gpus"),
		    "compute capability %s is not a known NVIDIA GPU", cc);
		return;
	}
	if (k != NULL)
		kernel_list(&sb, k);
	if (v->kernels == COMPAT_KERNEL_NONE)
		verdict(v, DIAG_ERROR, "compat.gpu-no-kernels",
		        xasprintf("TF %s carries %s: no PTX it could JIT-compile for a %s GPU", s,
		                  sb.buf, top->arch),
		        "TensorFlow %s has no kernels for compute capability %s (%s): "
		        "\"device kernel image is invalid\"",
		        s, cc, top->arch);
	else
		verdict(v, DIAG_WARNING, "compat.gpu-cc-newer",
		        k != NULL ? xasprintf("TF %s carries %s; the driver JIT-compiles PTX at "
		                              "first use, which can take 30 minutes or longer; add "
		                              "the GPU's row (developer.nvidia.com/cuda-gpus) to "
		                              "data/compat.yaml",
		                              s, sb.buf)
		                  : xstrdup("add the GPU's row (developer.nvidia.com/cuda-gpus) to "
		                            "data/compat.yaml"),
		        "compute capability %s is newer than every %s GPU the knowledge base "
		        "knows (up to %s): newer than the TF build's kernels, PTX JIT at best",
		        cc, top->arch, top->cc);
	strbuf_release(&sb);
}

int compat_judge_gpu(const struct compat *kb, const char *tf, const char *cuda, const char *cc,
                     struct compat_verdict *v)
{
	const struct compat_cc *row;
	const struct compat_tf_kernels *k = NULL;
	struct strbuf sb = STRBUF_INIT;
	char s[32] = "";

	memset(v, 0, sizeof(*v));
	if (cc == NULL || compat_cc_parse(cc) < 0)
		return TF_EUSAGE;
	row = compat_cc_row(kb, cc);
	v->kernels = COMPAT_KERNEL_UNKNOWN;
	if (tf != NULL && compat_tf_build(kb, tf, 0) != NULL) {
		v->kernels = compat_tf_kernels_for(kb, tf, cc, &k);
		v->source = k != NULL ? k->source : NULL;
		snprintf(s, sizeof(s), "%ld.%ld", version_component(tf, 0),
		         version_component(tf, 1));
	}
	if (row == NULL) {
		judge_unlisted(kb, s, cc, k, v);
		return 0;
	}
	v->arch = row->arch;
	if (v->kernels == COMPAT_KERNEL_NONE) {
		kernel_list(&sb, k);
		verdict(
		    v, DIAG_ERROR, "compat.gpu-no-kernels",
		    xasprintf("TF %s carries %s; a %s GPU (%s) needs an older TF or another GPU", s,
		              sb.buf, row->arch, row->examples ? row->examples : ""),
		    "TensorFlow %s has no kernels for compute capability %s (%s): \"device "
		    "kernel image is invalid\"",
		    s, cc, row->arch);
	} else if (cuda != NULL && row->dropped_in != NULL &&
	           version_cmp_n(cuda, row->dropped_in, 2) >= 0) {
		v->source = NULL; /* a fact of the GPU's row, not of TF's kernels */
		verdict(v, DIAG_ERROR, "compat.gpu-dropped-by-cuda",
		        xasprintf("CUDA %s and later no longer target %s GPUs", row->dropped_in,
		                  row->arch),
		        "CUDA %s cannot build or run kernels for compute capability %s (%s)", cuda,
		        cc, row->arch);
	} else if (cuda != NULL && row->first_cuda != NULL &&
	           version_cmp_n(cuda, row->first_cuda, 2) < 0) {
		v->source = NULL;
		verdict(v, DIAG_WARNING, "compat.gpu-newer-than-cuda",
		        xasprintf("CUDA %s is the first to target compute capability %s; older "
		                  "toolkits reach it only through PTX JIT, if at all",
		                  row->first_cuda, cc),
		        "CUDA %s predates compute capability %s (%s)", cuda, cc, row->arch);
	} else if (v->kernels == COMPAT_KERNEL_PTX) {
		kernel_list(&sb, k);
		verdict(v, DIAG_WARNING, "compat.gpu-ptx-jit",
		        xasprintf("TF %s carries %s: the driver JIT-compiles PTX at first use, "
		                  "which can take 30 minutes or longer",
		                  s, sb.buf),
		        "TensorFlow %s has no native kernels for compute capability %s (%s)", s, cc,
		        row->arch);
	}
	strbuf_release(&sb);
	return 0;
}

enum compat_driver_fit compat_judge_driver(const struct compat *kb, const char *cuda,
                                           const char *driver, int windows, const char **min,
                                           const char **floor)
{
	const char *need = cuda ? compat_cuda_min_driver(kb, cuda, windows) : NULL;
	const char *mvc = cuda ? compat_cuda_compat_driver(kb, cuda, windows) : NULL;

	if (min != NULL)
		*min = need;
	if (floor != NULL)
		*floor = mvc;
	if (need == NULL || driver == NULL)
		return COMPAT_DRIVER_UNKNOWN;
	if (version_cmp(driver, need) >= 0)
		return COMPAT_DRIVER_OK;
	if (mvc != NULL && version_cmp(driver, mvc) >= 0)
		return COMPAT_DRIVER_MINOR_COMPAT;
	return COMPAT_DRIVER_TOO_OLD;
}

/* The newest release of a CUDA series the driver table lists ("11.2" -> "11.2.2"). */
const char *compat_cuda_release(const struct compat *kb, const char *series)
{
	const char *best = NULL;

	for (size_t i = 0; series != NULL && i < kb->ndrivers; i++)
		if (version_has_prefix(kb->drivers[i].cuda, series) &&
		    version_component(kb->drivers[i].cuda, 2) >= 0 &&
		    (best == NULL || version_cmp(kb->drivers[i].cuda, best) > 0))
			best = kb->drivers[i].cuda;
	return best;
}

int compat_stack_fits(const struct compat *kb, const char *tf, const char *cuda, int windows,
                      const char *driver, const char *const *ccs, size_t nccs)
{
	if (tf == NULL || cuda == NULL ||
	    compat_judge_driver(kb, cuda, driver, windows, NULL, NULL) != COMPAT_DRIVER_OK)
		return 0;
	for (size_t i = 0; i < nccs; i++) {
		struct compat_verdict v;
		int clean = compat_judge_gpu(kb, tf, cuda, ccs[i], &v) == 0 && v.code == NULL &&
		            v.kernels == COMPAT_KERNEL_SASS;
		compat_verdict_release(&v);
		if (!clean)
			return 0;
	}
	return 1;
}
