/*
 * lockcheck.c - `tfprov lock --check MANIFEST...`: for CI and pre-commit.
 *
 * Reads only (no network, no state). Exit 0 when every manifest is completely
 * locked and its lock is consistent with what it declares; exit 3 with one
 * FILE:LINE:COL diagnostic per problem otherwise. A manifest is completely
 * locked when `tfprov lock` would change nothing in it:
 *  - no cuda.redist / cudnn.redist reference left to resolve at apply;
 *  - a pip section has `complete: true`, and pins each distribution once (the
 *    manifest parser already refuses a requirement without == or a hash);
 * and consistent when:
 *  - validate passes: its diagnostics come first, in the same list (among
 *    them the tensorflow pin against versions.tensorflow, compat.pip-tf-mismatch,
 *    and a conda lock's python against versions.python, compat.version-disagrees);
 *  - a complete lock pins tensorflow;
 *  - no cap of the knowledge base (data/compat.yaml pip.caps) is broken by the
 *    pinned versions (pip pins and conda packages together).
 * A manifest that does not parse gets its parser diagnostics only.
 */
#include "cli.h"
#include "compat.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "pipcaps.h"
#include "pyenv.h"
#include "version.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pinned {
	const struct manifest *m;
	struct pos pos; /* of the last lookup's hit */
};

/* The pinned version of a PEP 503 name: a pip pin first, else a conda package. */
static const char *pinned_version(const char *name, void *arg)
{
	struct pinned *p = arg;
	for (size_t i = 0; i < p->m->pip.nreqs; i++) {
		const struct pip_req *q = &p->m->pip.reqs[i];
		if (q->name && q->version && strcmp(q->name, name) == 0) {
			p->pos = q->pos;
			return q->version;
		}
	}
	for (size_t i = 0; i < p->m->python.npkgs; i++) {
		const struct conda_pkg *k = &p->m->python.pkgs[i];
		if (!k->name || !k->version)
			continue;
		char *n = pip_normalize_name(k->name);
		int hit = strcmp(n, name) == 0;
		free(n);
		if (hit) {
			p->pos = k->pos;
			return k->version;
		}
	}
	return NULL;
}

static void check_pip(const struct manifest *m, const char *hint, struct diags *d)
{
	const char *f = m->path;
	if (!m->pip.set)
		return;
	if (!m->pip.complete.v)
		diags_add(d, DIAG_ERROR, f, m->pip.complete.set ? m->pip.complete.pos : m->pip.pos,
		          "lock.incomplete", hint,
		          "the pip lock is not complete (%s): apply would let pip resolve the rest",
		          m->pip.complete.set ? "complete: false" : "no `complete: true`");
	const char *tf = NULL;
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];
		const char *nm = q->name ? q->name : q->raw_name;
		for (size_t j = 0; j < i && q->name; j++)
			if (m->pip.reqs[j].name && strcmp(m->pip.reqs[j].name, q->name) == 0)
				diags_add(d, DIAG_ERROR, f, q->pos, "lock.duplicate", NULL,
				          "pip: %s is pinned twice (first at line %d)", nm,
				          m->pip.reqs[j].pos.line);
		if (q->name && strcmp(q->name, "tensorflow") == 0)
			tf = q->version ? q->version : "";
	}
	if (m->pip.complete.v && tf == NULL && m->versions.tensorflow.s)
		diags_add(
		    d, DIAG_ERROR, f, m->pip.pos, "lock.version-mismatch", NULL,
		    "the complete pip lock has no tensorflow pin, but versions.tensorflow is %s",
		    m->versions.tensorflow.s);
}

static void check_one(const struct manifest *m, const struct pip_cap *caps, size_t ncaps,
                      struct diags *d)
{
	const char *f = m->path;
	char *hint = xasprintf("run `tfprov lock %s` to write the resolved pins into it", f);
	if (m->cuda.redist.set)
		diags_add(d, DIAG_ERROR, f, m->cuda.redist.pos, "lock.unresolved", hint,
		          "cuda.redist is resolved at apply from %s", m->cuda.redist.json.url.s);
	if (m->cudnn.redist.set)
		diags_add(d, DIAG_ERROR, f, m->cudnn.redist.pos, "lock.unresolved", hint,
		          "cudnn.redist is resolved at apply from %s", m->cudnn.redist.json.url.s);
	check_pip(m, hint, d);
	free(hint);
	struct pinned p = {m, {0, 0}};
	for (const struct pip_cap *cap = NULL;
	     (cap = pip_caps_broken(caps, ncaps, pinned_version, &p, cap)) != NULL;) {
		const char *v = pinned_version(cap->package, &p); /* sets p.pos */
		const char *w = pinned_version(cap->when, &(struct pinned){m, {0, 0}});
		char *src = xasprintf("source: %s", cap->source);
		diags_add(d, DIAG_ERROR, f, p.pos, "lock.cap", src,
		          "%s %s with %s %s: the knowledge base caps %s below %s while %s is below "
		          "%s (%s)",
		          cap->package, v, cap->when, w, cap->package, cap->below, cap->when,
		          cap->when_below, cap->fact);
		free(src);
	}
}

int lock_check(struct ctx *c, struct opts *o)
{
	struct pip_cap *caps = NULL;
	size_t ncaps = 0, bad = 0;
	struct diags kd = {0};
	int rc = 0;
	if (pip_caps_load(compat_default_path(), &caps, &ncaps, &kd) != 0) {
		diags_print(&kd, stderr, 0);
		diags_release(&kd);
		ev_log(c, EV_ERROR, "cannot load the pip caps of %s", compat_default_path());
		return TF_EFAIL;
	}
	diags_release(&kd);
	for (size_t i = 0; i < o->args.n; i++) {
		struct manifest *m = NULL;
		struct diags d = {0};
		int lrc = cli_lint_manifest(c, o->args.v[i], &m, &d);
		if (lrc == TF_EFAIL) { /* the knowledge base: reported */
			diags_release(&d);
			rc = TF_EFAIL;
			break;
		}
		if (m)
			check_one(m, caps, ncaps, &d);
		if (d.errors) /* as validate: warnings only beside an error */
			cli_print_diags(c, &d);
		if (d.errors) {
			bad++;
			ev_log(c, EV_ERROR, "%s: not completely locked: %zu problem%s",
			       o->args.v[i], d.errors, d.errors == 1 ? "" : "s");
		} else {
			ev_log(c, EV_INFO, "%s: locked (%zu pip pin%s%s)", m->path, m->pip.nreqs,
			       m->pip.nreqs == 1 ? "" : "s", m->pip.set ? ", complete" : "");
		}
		diags_release(&d);
		manifest_free(m);
	}
	if (bad && rc == 0)
		rc = TF_EMANIFEST;
	pip_caps_free(caps, ncaps);
	return rc;
}
