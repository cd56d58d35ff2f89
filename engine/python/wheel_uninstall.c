/*
 * wheel_uninstall.c - the distributions leaving the env's copy: each one's
 * RECORD read and its files removed (directories pruned that become empty),
 * sparing a file a distribution that stays also lists (remove_older).
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

/* ------------------------------------------------------------ uninstall */

/* Removes rel and then its parents while they are empty, up to `stop`. */
static void unlink_prune(const char *stage, const char *rel, const char *stop)
{
	char *host = path_join(stage, rel);
	if (unlink(host) != 0) {
		free(host);
		return;
	}
	size_t root = strlen(stage) + 1 + strlen(stop);
	for (char *s = strrchr(host, '/'); s && (size_t)(s - host) > root; s = strrchr(host, '/')) {
		*s = '\0';
		if (rmdir(host) != 0)
			break;
	}
	free(host);
}

/* Lexically resolves dir/rec (RECORD paths may climb out of site-packages). */
char *resolve_rel(const char *dir, const char *rec)
{
	struct strvec parts = STRVEC_INIT;
	char *all = xasprintf("%s/%s", dir, rec), *save = NULL, *res = NULL;
	for (char *tok = strtok_r(all, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (strcmp(tok, ".") == 0)
			continue;
		if (strcmp(tok, "..") == 0) {
			if (parts.n == 0)
				goto out; /* above the env: not ours to remove */
			free(parts.v[--parts.n]);
			continue;
		}
		strvec_push(&parts, tok);
	}
	struct strbuf sb = STRBUF_INIT;
	for (size_t i = 0; i < parts.n; i++)
		strbuf_addf(&sb, "%s%s", i ? "/" : "", parts.v[i]);
	res = strbuf_detach(&sb);
	if (!fs_rel_is_safe(res)) {
		free(res);
		res = NULL;
	}
out:
	free(all);
	strvec_release(&parts);
	return res;
}

/* Uninstalls the distribution whose metadata is libdir/distinfo, as pip does from RECORD. */
int uninstall(struct job *j, const char *libdir, const char *distinfo, struct why *why)
{
	char *di = path_join(libdir, distinfo);
	char *rec = xasprintf("%s/%s/RECORD", j->stage, di);
	char *text = NULL;
	size_t len = 0;
	int rc = 0;
	if (read_file_at(AT_FDCWD, rec, 64u << 20, &text, &len) != 0) {
		rc = why_fail(why, TF_EFAIL,
		              "cannot uninstall %s: it has no RECORD (not installed by a wheel "
		              "installer); use pip.installer: pip",
		              distinfo);
		goto out;
	}
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *f[3] = {NULL, NULL, NULL};
		size_t nf = record_fields(line, f);
		char *rel = nf ? resolve_rel(libdir, f[0]) : NULL;
		const char *key = rel;
		if (rel && j->keep.n &&
		    bsearch(&key, j->keep.v, j->keep.n, sizeof(*j->keep.v), cmp_str) != NULL) {
			free(rel); /* another distribution that stays ships it too */
			rel = NULL;
		}
		if (rel) {
			unlink_prune(j->stage, rel, libdir);
			size_t rl = strlen(rel);
			if (rl > 3 && strcmp(rel + rl - 3, ".py") == 0 && j->sc->cache_tag[0]) {
				const char *slash = strrchr(rel, '/');
				size_t dl = slash ? (size_t)(slash - rel) : 0;
				const char *base = slash ? slash + 1 : rel;
				char *pyc = xasprintf("%.*s%s__pycache__/%.*s.%s.pyc", (int)dl, rel,
				                      slash ? "/" : "", (int)(strlen(base) - 3),
				                      base, j->sc->cache_tag);
				unlink_prune(j->stage, pyc, libdir);
				free(pyc);
			}
		}
		free(rel);
		for (size_t k = 0; k < nf; k++)
			free(f[k]);
	}
	char *host = path_join(j->stage, di);
	fs_rmtree(host);
	free(host);
out:
	free(text);
	free(rec);
	free(di);
	return rc;
}

/* Dist-info directories present in libdir: "name\x1fversion\x1fdirname". */
void installed_dists(const char *stage, const char *libdir, struct strvec *out)
{
	char *host = path_join(stage, libdir);
	DIR *d = opendir(host);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		const char *nm = de->d_name;
		size_t n = strlen(nm);
		const char *dash = strchr(nm, '-');
		if (n < 11 || strcmp(nm + n - 10, ".dist-info") != 0 || dash == NULL)
			continue;
		char *raw = xstrndup(nm, (size_t)(dash - nm));
		char *norm = pip_normalize_name(raw);
		strvec_pushf(out, "%s\x1f%.*s\x1f%s", norm, (int)(n - 10 - (size_t)(dash + 1 - nm)),
		             dash + 1, nm);
		free(norm);
		free(raw);
	}
	if (d)
		closedir(d);
	free(host);
}

int remove_older(struct job *j, struct wheel_stats *stats, struct why *why)
{
	const struct scheme *sc = j->sc;
	struct whl *w = j->w;
	struct strvec have = STRVEC_INIT;
	int rc = 0;
	installed_dists(j->stage, sc->purelib, &have);
	if (strcmp(sc->platlib, sc->purelib) != 0)
		installed_dists(j->stage, sc->platlib, &have);
	/* Which go: 'u' uninstall, 's' the same version stays, 0 untouched. */
	char *fate = xcalloc(have.n ? have.n : 1, 1);
	for (size_t k = 0; k < have.n; k++) {
		char *f[3] = {have.v[k], strchr(have.v[k], '\x1f'), NULL};
		size_t nl = (size_t)(f[1] - f[0]);
		f[1]++;
		f[2] = strchr(f[1], '\x1f') + 1;
		for (size_t i = 0; i < j->n; i++) {
			if (strncmp(f[0], w[i].name, nl) != 0 || w[i].name[nl] != '\0')
				continue;
			int same = (size_t)(f[2] - f[1] - 1) == strlen(w[i].version) &&
			           strncmp(f[1], w[i].version, strlen(w[i].version)) == 0;
			if (same && !w[i].src->reinstall) {
				w[i].skip = 1;
				stats->skipped++;
				fate[k] = 's';
			} else {
				fate[k] = 'u';
			}
		}
		for (size_t d = 0; j->drop && d < j->drop->n; d++)
			if (strlen(j->drop->v[d]) == nl && strncmp(j->drop->v[d], f[0], nl) == 0)
				fate[k] = 'u';
	}
	/* The files of the distributions that stay, sorted: uninstall spares them. */
	struct owned *v = NULL;
	size_t n = 0, cap = 0;
	for (size_t k = 0; k < have.n; k++) {
		if (fate[k] == 'u')
			continue;
		const char *di = strrchr(have.v[k], '\x1f') + 1;
		char *probe = xasprintf("%s/%s/%s", j->stage, sc->purelib, di);
		const char *lib = access(probe, F_OK) == 0 ? sc->purelib : sc->platlib;
		free(probe);
		owned_installed(j->stage, lib, di, "", 1, &v, &n, &cap);
	}
	for (size_t i = 0; i < n; i++)
		strvec_push(&j->keep, v[i].rel);
	for (size_t i = 0; i < n; i++)
		free(v[i].rel);
	free(v);
	if (j->keep.n > 1)
		qsort(j->keep.v, j->keep.n, sizeof(*j->keep.v), cmp_str);
	for (size_t k = 0; k < have.n && rc == 0; k++) {
		if (fate[k] != 'u')
			continue;
		const char *di = strrchr(have.v[k], '\x1f') + 1;
		const char *lib = sc->purelib;
		char *probe = xasprintf("%s/%s/%s", j->stage, sc->purelib, di);
		if (access(probe, F_OK) != 0)
			lib = sc->platlib;
		free(probe);
		rc = uninstall(j, lib, di, why);
		stats->removed++;
	}
	free(fate);
	strvec_release(&have);
	return rc;
}

/* Unpacks and places the wheels on a pool of threads, the byte-compiler fed alongside. */
