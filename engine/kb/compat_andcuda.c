/*
 * compat_andcuda.c - a lock's nvidia-*-cu<N> wheels against TensorFlow's
 * [and-cuda] extra and against each other.
 *
 *  - pip.and_cuda records the extra of each TF release that has one (the
 *    requirement of each nvidia-* distribution); a pinned CUDA wheel the
 *    extra of the stack's TF rules out is an error at the pin
 *    (compat.and-cuda-range). The row of the TF release itself is used, else
 *    the newest recorded release of the same minor below it; a row whose
 *    source is unverified judges nothing.
 *  - the wheels whose version is the CUDA release's (pip.cuda_wheels.
 *    release_versioned: cudart 12.3.101 is CUDA 12.3, cublas 12.5.3.2 is 12.5, but
 *    cublas 11.11.3.6 is CUDA 11.8's: a listed name with its -cu<N> is that major's)
 *    come from one CUDA release; pins of several releases are a warning at the
 *    first pin of another release than the runtime's (compat.cuda-wheels-mixed).
 */
#include "kb.h"
#include "kb_int.h"
#include "version.h"

#include <stdlib.h>
#include <string.h>

/* The and_cuda row that speaks for TF version tf; NULL when none does. */
static const struct compat_and_cuda *row_for(const struct compat *kb, const char *tf)
{
	const struct compat_and_cuda *best = NULL;

	for (size_t i = 0; i < kb->nand_cuda; i++) {
		const struct compat_and_cuda *a = &kb->and_cuda[i];

		if (a->tensorflow == NULL || version_cmp_n(a->tensorflow, tf, 2) != 0 ||
		    version_cmp(a->tensorflow, tf) > 0)
			continue;
		if (best == NULL || version_cmp(a->tensorflow, best->tensorflow) > 0)
			best = a;
	}
	return best;
}

const struct compat_and_cuda *compat_and_cuda_tested(const struct compat *kb, const char *tf)
{
	const struct compat_and_cuda *a = row_for(kb, tf), *best = NULL;
	const struct compat_tf_build *b = compat_tf_build(kb, tf, 0);

	if (a != NULL && !a->unverified)
		return a;
	for (size_t i = 0; b != NULL && i < kb->nand_cuda; i++) {
		const struct compat_and_cuda *r = &kb->and_cuda[i];
		const struct compat_tf_build *rb = r->unverified || r->tensorflow == NULL
		                                       ? NULL
		                                       : compat_tf_build(kb, r->tensorflow, 0);

		if (rb == NULL || version_cmp_n(rb->cuda, b->cuda, 2) != 0 ||
		    version_cmp_n(rb->cudnn, b->cudnn, 2) != 0)
			continue;
		if (best == NULL || version_cmp(r->tensorflow, best->tensorflow) > 0)
			best = r;
	}
	return best;
}

const char *compat_and_cuda_tested_version(const struct compat_and_cuda_pin *p, char *buf,
                                           size_t size)
{
	/* "==12.5.82" or ">=12.5.82,<13.0": the first clause names the tested wheel. */
	size_t n;

	if (p->spec == NULL || (strncmp(p->spec, "==", 2) != 0 && strncmp(p->spec, ">=", 2) != 0))
		return NULL;
	n = strcspn(p->spec + 2, ",");
	if (n == 0 || n >= size)
		return NULL;
	memcpy(buf, p->spec + 2, n);
	buf[n] = '\0';
	return version_valid(buf) ? buf : NULL;
}

static const struct compat_and_cuda_pin *pin_of(const struct compat_and_cuda *a, const char *name)
{
	for (size_t i = 0; i < a->npins; i++)
		if (strcmp(a->pins[i].name, name) == 0)
			return &a->pins[i];
	return NULL;
}

/* name without "-cu<N>" is one of the release-versioned wheels, or name itself is (an
 * entry with its "-cu<N>" counts for that CUDA major only: cuBLAS from CUDA 12 on). */
static int release_versioned(const struct compat *kb, const char *name)
{
	const char *tag = NULL, *t = kb->cuda_wheels.major_tag;

	/* The last "-cu": "nvidia-cublas-cu12" has one inside the library name. */
	for (const char *p = name; t != NULL && (p = strstr(p, t)) != NULL; p++)
		tag = p;
	if (tag == NULL)
		return 0;
	for (size_t i = 0; i < kb->cuda_wheels.nrelease_versioned; i++) {
		const char *w = kb->cuda_wheels.release_versioned[i];

		if (strcmp(w, name) == 0 ||
		    (strlen(w) == (size_t)(tag - name) && strncmp(w, name, strlen(w)) == 0))
			return 1;
	}
	return 0;
}

static void check_range(const struct compat *kb, const struct manifest *m, const char *tf,
                        struct diags *d)
{
	const struct compat_and_cuda *a = row_for(kb, tf);

	if (a == NULL || a->unverified)
		return;
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *r = &m->pip.reqs[i];
		const struct compat_and_cuda_pin *p;
		char *hint;

		if (r->name == NULL || r->version == NULL ||
		    compat_cuda_wheel_major(kb, r->name) == 0)
			continue;
		p = pin_of(a, r->name);
		if (p == NULL || compat_spec_allows(p->spec, r->version))
			continue;
		hint = xasprintf(
		    "pin a %s that satisfies %s, as `pip install tensorflow[and-cuda]==%s` "
		    "would; source: %s",
		    r->raw_name, p->spec, a->tensorflow, a->source);
		if (version_cmp(a->tensorflow, tf) == 0)
			diags_add(d, DIAG_ERROR, m->path, r->pos, "compat.and-cuda-range", hint,
			          "%s==%s is outside TensorFlow %s's [and-cuda] requirement %s%s",
			          r->raw_name, r->version, tf, p->name, p->spec);
		else
			diags_add(
			    d, DIAG_ERROR, m->path, r->pos, "compat.and-cuda-range", hint,
			    "%s==%s is outside TensorFlow %s's [and-cuda] requirement %s%s (that "
			    "of %s, the newest recorded release of the minor)",
			    r->raw_name, r->version, tf, p->name, p->spec, a->tensorflow);
		free(hint);
	}
}

static void check_mixed(const struct compat *kb, const struct manifest *m, struct diags *d)
{
	const struct pip_req *rt = NULL;

	for (size_t i = 0; i < m->pip.nreqs && rt == NULL; i++) {
		const struct pip_req *r = &m->pip.reqs[i];

		if (r->name != NULL && r->version != NULL && kb->cuda_wheels.runtime != NULL &&
		    strncmp(r->name, kb->cuda_wheels.runtime, strlen(kb->cuda_wheels.runtime)) ==
		        0 &&
		    compat_cuda_wheel_major(kb, r->name) > 0)
			rt = r;
	}
	if (rt == NULL)
		return;
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *r = &m->pip.reqs[i];
		char *hint;

		if (r == rt || r->name == NULL || r->version == NULL ||
		    !release_versioned(kb, r->name) ||
		    version_cmp_n(r->version, rt->version, 2) == 0)
			continue;
		hint =
		    xasprintf("take every CUDA wheel from one CUDA release, as NVIDIA's redist of "
		              "a release ships them together (%s)",
		              kb->cuda_wheels.release_source);
		diags_add(
		    d, DIAG_WARNING, m->path, r->pos, "compat.cuda-wheels-mixed", hint,
		    "%s==%s is from CUDA %ld.%ld, %s==%s (line %d) from CUDA %ld.%ld: the pins "
		    "mix CUDA releases",
		    r->raw_name, r->version, version_component(r->version, 0),
		    version_component(r->version, 1), rt->raw_name, rt->version, rt->pos.line,
		    version_component(rt->version, 0), version_component(rt->version, 1));
		free(hint);
		return;
	}
}

void compat_lint_cuda_wheels(const struct compat *kb, const struct manifest *m, const char *tf,
                             struct diags *d)
{
	if (tf != NULL)
		check_range(kb, m, tf, d);
	check_mixed(kb, m, d);
}
