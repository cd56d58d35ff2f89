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
 *  - no cap of the knowledge base (data/compat.yaml pip.caps, the known-bad
 *    table) is broken by the pinned versions (pip pins and conda packages
 *    together): validate reports those (compat.pip-known-bad), with the rest
 *    of the static lock check (compat_lock.c).
 * A manifest that does not parse gets its parser diagnostics only.
 */
#include "cli.h"
#include "kb.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "python.h"
#include "version.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void check_one(const struct manifest *m, struct diags *d)
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
}

int lock_check(struct ctx *c, struct opts *o)
{
	size_t bad = 0;
	int rc = 0;
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
			check_one(m, &d);
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
	return rc;
}
