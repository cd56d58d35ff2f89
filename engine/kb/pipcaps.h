/*
 * pipcaps.h - caps on pip resolutions from the knowledge base (data/compat.yaml,
 * section pip.caps): "when a lock holds WHEN below WHEN_BELOW, PACKAGE must stay
 * below BELOW", each with the fact and its public source.
 *
 * `tfprov lock` re-resolves with a broken cap as a constraint; `tfprov lock
 * --check` reports a lock that breaks one. Only this small section is read
 * here (compat.c owns the rest of the file and accepts the key).
 *
 * Ownership: pip_caps_load() returns an array that owns its strings;
 * pip_caps_free() releases it.
 */
#ifndef TFPROV_PIPCAPS_H
#define TFPROV_PIPCAPS_H

#include <stddef.h>

#include "diag.h"

struct pip_cap {
	char *package, *below;   /* the capped distribution (PEP 503 name) and its bound */
	char *when, *when_below; /* the cap holds while this one is below that version */
	char *fact, *source;
	char *severity; /* "error" (default) or "warning": how validate reports it */
};

/* 0 and *caps, *n (possibly 0 caps), or TF_EFAIL with errors in d. */
int pip_caps_load(const char *path, struct pip_cap **caps, size_t *n, struct diags *d);
void pip_caps_free(struct pip_cap *caps, size_t n);

/*
 * The first cap broken by a set of pinned versions, or NULL. version_of(name, arg)
 * returns the pinned version of a PEP 503 name, or NULL when it is not pinned.
 */
const struct pip_cap *pip_caps_broken(const struct pip_cap *caps, size_t n,
                                      const char *(*version_of)(const char *, void *), void *arg,
                                      const struct pip_cap *after);

#endif
