/*
 * pkgfiles.h - which Python package owns which file of an env, read from the
 * package managers' own records:
 *
 *  - pip (and any installer that follows the wheel spec): every
 *    <site-packages>/<name>-<version>.dist-info/RECORD lists the files the
 *    distribution installed as `path,sha256=<urlsafe base64, no padding>,size`
 *    (PyPA "Recording installed projects",
 *    https://packaging.python.org/en/latest/specifications/recording-installed-packages/);
 *    paths are relative to site-packages (`../../../bin/x` for scripts).
 *    Entries without a hash (RECORD itself, compiled .pyc) are owned but not
 *    checked.
 *  - conda: <env>/conda-meta/<dist>.json has "name", "version" and "files"
 *    (paths relative to the env).
 *
 * Trust: an entry whose path is absolute or leaves the env after
 * normalisation is ignored (never audited, never removed).
 *
 * Paths in the index are root-relative absolute paths, like the state's.
 * The index owns its strings; pkgfiles_release() frees them.
 */
#ifndef TFPROV_PKGFILES_H
#define TFPROV_PKGFILES_H

#include "ctx.h"

#include <stdint.h>

struct pkgfile {
	char *path;      /* root-relative */
	char *pkg;       /* "numpy 1.26.4" */
	char *norm;      /* normalised project name (PEP 503), for matching pins */
	char sha256[65]; /* hex, "" when the record has no hash */
	int64_t size;    /* -1 when unknown */
	char src;        /* 'p' a dist-info RECORD, 'c' conda-meta */
};

struct pkgfiles {
	struct pkgfile *v;
	size_t n, cap;
};

/* Reads the records of the env at root-relative `env_prefix`. 0 (an env with no records is empty). */
int pkgfiles_load(struct ctx *c, const char *env_prefix, struct pkgfiles *out);
void pkgfiles_release(struct pkgfiles *x);
/*
 * The env of stack `stack_id` (the top directory its pyenv resource
 * recorded) and the records of its packages: every one (`dists` NULL), or
 * only the RECORD entries of the distributions named in `dists` (PEP 503
 * names, as the pip step's `installed` hook lists them: the step owns its
 * attrs, this reads none). Returns the env's root-relative path (caller
 * frees), or NULL when the stack has no env; *out is then empty.
 */
char *pkgfiles_load_stack(struct ctx *c, int64_t stack_id, const struct strvec *dists,
                          struct pkgfiles *out);

/* The record of exactly `path`, or NULL. */
const struct pkgfile *pkgfiles_find(const struct pkgfiles *x, const char *path);
/* Whether some recorded file lies under directory `path`. */
int pkgfiles_has_under(const struct pkgfiles *x, const char *path);
/* place_owned_fn (place.h) over the struct pkgfiles x: PLACE_OWNED, PLACE_OWNS_BELOW or 0. */
int pkgfiles_owned(void *x, const char *path);

#endif
