/*
 * compat_companion.c - the packages installed beside TensorFlow that are tied
 * to its release or have ended (data/compat.yaml companion_packages), against
 * a manifest's pip lock.
 *
 *  - A pinned companion's release line (the longest version prefix of the
 *    table that matches the pin) names the TF versions it was built or tested
 *    for. The stack's TF outside that window is compat.companion-window at
 *    the pin: an error for binary ops built against one TF (abi) and for an
 *    import that refuses another TF (import), a warning for a tested window
 *    (tested). A pin that matches no line, or a package recorded only
 *    (coupling none), is not judged: the knowledge base does not know it.
 *  - An ended project is compat.companion-ended at the pin, a warning with
 *    its end date and what replaced it.
 *  - `tfprov lock` asks compat_companion_constraint() for the release line
 *    made for the stack's TF when pip's resolution picked another.
 *
 * Invariants: the stack's TF is its tensorflow pin (tensorflow-gpu,
 * tensorflow-cpu: the same release), else versions.tensorflow; a pin that an
 * earlier lint already refused with an error (its own recorded requirement on
 * tensorflow, compat.pip-requires-unsatisfied) gets no second error here.
 */
#include "kb.h"
#include "kb_int.h"
#include "version.h"

#include <stdlib.h>
#include <string.h>

const struct compat_companion *compat_companion(const struct compat *kb, const char *name)
{
	for (size_t i = 0; name != NULL && i < kb->ncompanion_pkgs; i++)
		if (kb->companion_pkgs[i].name != NULL &&
		    strcmp(kb->companion_pkgs[i].name, name) == 0)
			return &kb->companion_pkgs[i];
	return NULL;
}

static int ncomponents(const char *v)
{
	int n = 1;

	for (; *v != '\0'; v++)
		n += *v == '.';
	return n;
}

const struct compat_companion_release *compat_companion_line(const struct compat_companion *c,
                                                             const char *version)
{
	const struct compat_companion_release *best = NULL;

	for (size_t i = 0; version != NULL && i < c->nreleases; i++) {
		const struct compat_companion_release *r = &c->releases[i];

		if (r->release == NULL || !version_has_prefix(version, r->release))
			continue;
		if (best == NULL || ncomponents(r->release) > ncomponents(best->release))
			best = r;
	}
	return best;
}

/* The newest release line whose window holds tf; NULL when none does. */
static const struct compat_companion_release *line_for_tf(const struct compat_companion *c,
                                                          const char *tf)
{
	const struct compat_companion_release *best = NULL;

	for (size_t i = 0; i < c->nreleases; i++) {
		const struct compat_companion_release *r = &c->releases[i];

		if (r->tf == NULL || r->release == NULL || !compat_spec_allows(r->tf, tf))
			continue;
		if (best == NULL || version_cmp(r->release, best->release) > 0)
			best = r;
	}
	return best;
}

/* The newest release line of the table; NULL when it has none. */
static const struct compat_companion_release *newest_line(const struct compat_companion *c)
{
	const struct compat_companion_release *best = NULL;

	for (size_t i = 0; i < c->nreleases; i++)
		if (c->releases[i].release != NULL &&
		    (best == NULL || version_cmp(c->releases[i].release, best->release) > 0))
			best = &c->releases[i];
	return best;
}

/* 1 when the pinned version is outside its release line's window for tf. */
static int outside(const struct compat_companion *c, const char *version, const char *tf,
                   const struct compat_companion_release **line)
{
	*line = NULL;
	if (c->coupling == COMPAT_COUPLING_NONE || version == NULL || tf == NULL)
		return 0;
	*line = compat_companion_line(c, version);
	return *line != NULL && (*line)->tf != NULL && !compat_spec_allows((*line)->tf, tf);
}

char *compat_companion_constraint(const struct compat *kb, const char *name, const char *version,
                                  const char *tf)
{
	const struct compat_companion *c = compat_companion(kb, name);
	const struct compat_companion_release *line, *fit;

	if (c == NULL || !outside(c, version, tf, &line))
		return NULL;
	fit = line_for_tf(c, tf);
	return fit ? xasprintf("%s==%s.*", c->name, fit->release) : NULL;
}

/* The stack's TF: the tensorflow pin (or its GPU/CPU name), else versions.tensorflow. */
static const struct mstr *stack_tf(const struct manifest *m, struct mstr *pin)
{
	static const char *const names[] = {"tensorflow", "tensorflow-gpu", "tensorflow-cpu", NULL};

	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];

		for (size_t j = 0; q->name != NULL && q->version != NULL && names[j] != NULL; j++)
			if (strcmp(q->name, names[j]) == 0) {
				pin->s = q->version;
				pin->pos = q->pos;
				pin->set = 1;
				return pin;
			}
	}
	if (m->versions.tensorflow.set && m->versions.tensorflow.s != NULL)
		return &m->versions.tensorflow;
	return NULL;
}

/* An error already at this node (an earlier lint's): say nothing more there. */
static int already_refused(const struct diags *d, const char *file, struct pos pos)
{
	for (size_t i = 0; i < d->n; i++) {
		const struct diag *g = &d->v[i];

		if (g->sev == DIAG_ERROR && g->pos.line == pos.line && g->pos.col == pos.col &&
		    strcmp(g->file, file) == 0)
			return 1;
	}
	return 0;
}

static void window_diag(const struct compat_companion *c,
                        const struct compat_companion_release *line, const struct pip_req *q,
                        const struct mstr *tf, const char *file, struct diags *d)
{
	static const char *const verbs[] = {"", "is tested with", "imports only with",
	                                    "is built for"};
	const struct compat_companion_release *fit = line_for_tf(c, tf->s), *last = newest_line(c);
	char *fix, *hint;

	if (fit != NULL)
		fix = xasprintf(
		    "take %s==%s.*, the release line for TensorFlow %s (tfprov lock picks "
		    "it)",
		    c->name, fit->release, tf->s);
	else
		fix = xasprintf(
		    "no %s release line is made for TensorFlow %s (the newest, %s, is for "
		    "TensorFlow %s): drop it or take a TensorFlow in its window",
		    c->name, tf->s, last ? last->release : "?", last && last->tf ? last->tf : "?");
	hint = xasprintf("%s; %s; source: %s", fix, c->why ? c->why : "", line->source);
	diags_add(d, c->coupling == COMPAT_COUPLING_TESTED ? DIAG_WARNING : DIAG_ERROR, file,
	          q->pos, "compat.companion-window", hint,
	          "%s %s %s TensorFlow %s, but the stack's TensorFlow is %s (line %d)", c->name,
	          q->version, verbs[c->coupling], line->tf, tf->s, tf->pos.line);
	free(fix);
	free(hint);
}

void compat_lint_companions(const struct compat *kb, const struct manifest *m, struct diags *d)
{
	struct mstr pin = {0};
	const struct mstr *tf = stack_tf(m, &pin);

	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];
		const struct compat_companion *c = compat_companion(kb, q->name);
		const struct compat_companion_release *line;

		if (c == NULL)
			continue;
		if (c->ended != NULL) {
			char *hint = xasprintf("replaced by %s; source: %s", c->replaced_by,
			                       c->ended_source);
			diags_add(d, DIAG_WARNING, m->path, q->pos, "compat.companion-ended", hint,
			          "%s%s%s has ended (%s): %s", c->name, q->version ? " " : "",
			          q->version ? q->version : "", c->ended, c->ended_what);
			free(hint);
		}
		if (tf == NULL || !outside(c, q->version, tf->s, &line) ||
		    already_refused(d, m->path, q->pos))
			continue;
		window_diag(c, line, q, tf, m->path, d);
	}
}
