/*
 * wheel_overlap.c - paths two distributions both ship: each wheel's RECORD
 * read from the archive and each installed distribution's from the env,
 * mapped to where it installs; equal hashes are shared (nvidia/__init__.py),
 * different ones stop the install naming both (wheel_overlaps before any
 * change, check_overlaps against what stays in the env).
 */
#include "wheel_int.h"
#include "python_int.h"
#include "pyenv_int.h"

#include "artifact.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "place.h"
#include "pool.h"
#include "python.h"
#include "fs.h"
#include "spawn.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp_owned(const void *a, const void *b)
{
	const struct owned *x = a, *y = b;
	int r = strcmp(x->rel, y->rel);
	return r ? r : strcmp(x->who, y->who);
}

/* A RECORD row's files, relative to the env: `dest` maps a row's path (NULL: skip it). */
static void owned_add(struct owned **v, size_t *n, size_t *cap, char *rel, const char *hash,
                      const char *who)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 256;
		*v = xrealloc(*v, *cap * sizeof(**v));
	}
	struct owned *o = &(*v)[(*n)++];
	o->rel = rel;
	o->who = who;
	if (hash == NULL || record_hash_decode(hash, o->hex) != 0)
		o->hex[0] = '\0';
}

/* The rows of an installed distribution's RECORD (libdir/distinfo under env). */
void owned_installed(const char *env, const char *libdir, const char *distinfo, const char *who,
                     int with_pyc, struct owned **v, size_t *n, size_t *cap)
{
	char *rec = xasprintf("%s/%s/%s/RECORD", env, libdir, distinfo), *text = NULL;
	size_t len = 0;
	if (read_file_at(AT_FDCWD, rec, 64u << 20, &text, &len) == 0) {
		for (char *line = text, *next; line && *line; line = next) {
			next = strchr(line, '\n');
			if (next)
				*next++ = '\0';
			char *f[3] = {NULL, NULL, NULL};
			size_t nf = record_fields(line, f);
			char *rel = nf ? resolve_rel(libdir, f[0]) : NULL;
			/* A .pyc embeds its source's mtime: never compared, never shared. */
			if (rel && !with_pyc && str_ends_with(rel, ".pyc")) {
				free(rel);
				rel = NULL;
			}
			if (rel && !strstr(rel, ".dist-info/"))
				owned_add(v, n, cap, rel, nf > 1 ? f[1] : NULL, who);
			else
				free(rel);
			for (size_t k = 0; k < nf; k++)
				free(f[k]);
		}
	}
	free(text);
	free(rec);
}

/* Where a wheel's RECORD path lands in the env (dest_of without failing); NULL: not compared. */
static char *wheel_dest(const struct scheme *sc, const char *libdir, const char *name,
                        const char *p)
{
	const char *slash = strchr(p, '/');
	size_t tl = slash ? (size_t)(slash - p) : 0;
	if (slash == NULL || (tl > 10 && strncmp(slash - 10, ".dist-info", 10) == 0))
		return slash ? NULL : resolve_rel(libdir, p);
	if (!(tl > 5 && strncmp(slash - 5, ".data", 5) == 0))
		return resolve_rel(libdir, p);
	const char *key = slash + 1, *sub = strchr(key, '/');
	if (sub == NULL || !sub[1])
		return NULL;
	size_t kl = (size_t)(sub - key);
	sub++;
	const char *base = kl == 7 && strncmp(key, "purelib", 7) == 0   ? sc->purelib
	                   : kl == 7 && strncmp(key, "platlib", 7) == 0 ? sc->platlib
	                   : kl == 7 && strncmp(key, "scripts", 7) == 0 ? sc->scripts
	                   : kl == 4 && strncmp(key, "data", 4) == 0    ? sc->data
	                                                                : NULL;
	if (kl == 7 && strncmp(key, "headers", 7) == 0) {
		char *h = path_join(sc->headers, name), *r = resolve_rel(h, sub);
		free(h);
		return r;
	}
	return base ? resolve_rel(base[0] ? base : ".", sub) : NULL;
}

/* The rows of a wheel file's RECORD, where they will be installed under sc. */
static void owned_wheel(const struct scheme *sc, const char *path, const char *name,
                        const char *who, struct owned **v, size_t *n, size_t *cap)
{
	char *text = NULL, *wheel = NULL;
	size_t len = 0;
	const char *libdir = sc->purelib;
	if (unpack_zip_member(path, ".dist-info/RECORD", 64u << 20, &text, &len) != 0)
		return; /* the unpack names what is wrong with it */
	if (strcmp(sc->platlib, sc->purelib) != 0 &&
	    unpack_zip_member(path, ".dist-info/WHEEL", 1u << 20, &wheel, &len) == 0) {
		char *pure = header_value(wheel, "Root-Is-Purelib");
		if (pure && strcasecmp(pure, "true") != 0)
			libdir = sc->platlib;
		free(pure);
	}
	free(wheel);
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *f[3] = {NULL, NULL, NULL};
		size_t nf = record_fields(line, f);
		char *rel = nf ? wheel_dest(sc, libdir, name, f[0]) : NULL;
		if (rel)
			owned_add(v, n, cap, rel, nf > 1 ? f[1] : NULL, who);
		for (size_t k = 0; k < nf; k++)
			free(f[k]);
	}
	free(text);
}

/* Sorts v; TF_ECONFLICT naming the first path two owners ship with other bytes. */
static int owned_conflict(struct owned *v, size_t n, const char *base, struct why *why)
{
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_owned);
	for (size_t i = 1; i < n; i++) {
		const struct owned *a = &v[i - 1], *b = &v[i];
		if (strcmp(a->rel, b->rel) != 0 || strcmp(a->who, b->who) == 0)
			continue;
		if (a->hex[0] && strcmp(a->hex, b->hex) == 0)
			continue; /* the same bytes: shared */
		return why_fail(
		    why, TF_ECONFLICT,
		    "%s and %s both install %s%s%s with different contents (sha256 %.12s... and "
		    "%.12s...): one would overwrite the other; nothing was changed",
		    a->who, b->who, base ? base : "", base ? "/" : "", a->rel,
		    a->hex[0] ? a->hex : "(none)", b->hex[0] ? b->hex : "(none)");
	}
	return 0;
}

int wheel_overlaps(const char *const *paths, const char *const *names, size_t n, struct why *why)
{
	/* Where in an env does not matter here: a path is its scheme key and place. */
	char lib[] = "site-packages", scripts[] = "bin", data[] = "data", headers[] = "include";
	struct scheme sc = {
	    .purelib = lib, .platlib = lib, .scripts = scripts, .data = data, .headers = headers};
	struct owned *v = NULL;
	size_t nv = 0, cap = 0;
	struct strvec who = STRVEC_INIT;
	int rc;
	for (size_t i = 0; i < n; i++) {
		const char *f = names && names[i] ? names[i] : paths[i];
		const char *base = strrchr(f, '/') ? strrchr(f, '/') + 1 : f;
		struct wheel_name wn;
		if (wheel_name_parse(base, &wn) != 0) {
			strvec_push(&who, base);
			continue;
		}
		strvec_pushf(&who, "%s %s", wn.name, wn.version);
		wheel_name_release(&wn);
	}
	for (size_t i = 0; i < n; i++) {
		char *name = xstrndup(who.v[i], strcspn(who.v[i], " "));
		owned_wheel(&sc, paths[i], name, who.v[i], &v, &nv, &cap);
		free(name);
	}
	rc = owned_conflict(v, nv, NULL, why);
	for (size_t i = 0; i < nv; i++)
		free(v[i].rel);
	free(v);
	strvec_release(&who);
	return rc;
}

/* Whether `name` (PEP 503) is one of the wheels' distributions or of `drop`. */
static int leaving(const struct job *j, const char *name)
{
	for (size_t i = 0; i < j->n; i++)
		if (strcmp(j->w[i].name, name) == 0)
			return 1;
	for (size_t i = 0; j->drop && i < j->drop->n; i++)
		if (strcmp(j->drop->v[i], name) == 0)
			return 1;
	return 0;
}

/*
 * No distribution overwrites another (wheel.h): the wheels' RECORDs, read
 * from the wheel files, against each other and against the RECORDs of the
 * distributions that stay in the live env. Reads only; 0 or TF_ECONFLICT.
 */
int check_overlaps(struct job *j, struct why *why)
{
	struct owned *v = NULL;
	size_t n = 0, cap = 0;
	struct strvec have = STRVEC_INIT, who = STRVEC_INIT;
	int rc = 0;
	installed_dists(j->final, j->sc->purelib, &have);
	if (strcmp(j->sc->platlib, j->sc->purelib) != 0)
		installed_dists(j->final, j->sc->platlib, &have);
	/* Owner labels first: `who` does not grow while v points into it. */
	for (size_t i = 0; i < j->n; i++)
		strvec_pushf(&who, "%s %s", j->w[i].name, j->w[i].version);
	for (size_t k = 0; k < have.n; k++) {
		const char *f1 = strchr(have.v[k], '\x1f'), *f2 = strchr(f1 + 1, '\x1f');
		strvec_pushf(&who, "%.*s %.*s", (int)(f1 - have.v[k]), have.v[k],
		             (int)(f2 - f1 - 1), f1 + 1);
	}
	for (size_t i = 0; i < j->n; i++)
		owned_wheel(j->sc, j->w[i].src->path, j->w[i].name, who.v[i], &v, &n, &cap);
	for (size_t k = 0; k < have.n && rc == 0; k++) {
		char *name = xstrndup(have.v[k], strcspn(have.v[k], "\x1f"));
		const char *di = strrchr(have.v[k], '\x1f') + 1;
		if (!leaving(j, name)) {
			char *probe = xasprintf("%s/%s/%s", j->final, j->sc->purelib, di);
			const char *lib =
			    access(probe, F_OK) == 0 ? j->sc->purelib : j->sc->platlib;
			free(probe);
			owned_installed(j->final, lib, di, who.v[j->n + k], 0, &v, &n, &cap);
		}
		free(name);
	}
	rc = owned_conflict(v, n, j->final, why);
	for (size_t i = 0; i < n; i++)
		free(v[i].rel);
	free(v);
	strvec_release(&have);
	strvec_release(&who);
	return rc;
}

/*
 * Uninstalls from the copy the older versions of the wheels' distributions,
 * those marked for reinstall and those in j->drop; the same version stays.
 * A file a distribution that stays also lists is kept (j->keep).
 */
