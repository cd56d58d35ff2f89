/*
 * catalog.c - lookups in the shipped reference data (see kb.h). File
 * names carry the versions; the files themselves are read only for what a
 * stack takes from them (a closure's rows, a cuDNN JSON's archive).
 */
#include "kb.h"

#include "datadir.h"
#include "error.h"
#include "artifact.h"
#include "python.h"
#include "util.h"
#include "version.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CATALOG_MAX_FILE (16u << 20)

const char *catalog_dir(void)
{
	static char buf[PATH_MAX];
	return datadir_path("TFPROV_CATALOG", "manifests/data", buf, sizeof(buf));
}

/*
 * Calls fn for every file of dir/sub named prefix<version>suffix whose
 * version is valid; the newest for which fn returns 1 wins. 0, or -ENOENT
 * when none does.
 */
typedef int (*pick_fn)(const char *path, const char *version, void *arg);

static int newest(const char *dir, const char *sub, const char *prefix, const char *suffix,
                  pick_fn fn, void *arg, char **best_version, char **best_path)
{
	char *d = path_join(dir, sub);
	DIR *dh = opendir(d);
	struct dirent *e;
	size_t pl = strlen(prefix), sl = strlen(suffix);
	*best_version = *best_path = NULL;
	while (dh && (e = readdir(dh)) != NULL) {
		size_t n = strlen(e->d_name);
		if (n <= pl + sl || strncmp(e->d_name, prefix, pl) != 0 ||
		    strcmp(e->d_name + n - sl, suffix) != 0)
			continue;
		char *ver = xstrndup(e->d_name + pl, n - pl - sl);
		char *path = path_join(d, e->d_name);
		if (version_valid(ver) &&
		    (*best_version == NULL || version_cmp(ver, *best_version) > 0) &&
		    fn(path, ver, arg)) {
			free(*best_version);
			free(*best_path);
			*best_version = ver;
			*best_path = path;
			continue;
		}
		free(ver);
		free(path);
	}
	if (dh)
		closedir(dh);
	free(d);
	return *best_path ? 0 : -ENOENT;
}

static int in_series(const char *path, const char *version, void *arg)
{
	(void)path;
	return version_has_prefix(version, arg);
}

int catalog_cuda_redist(const char *dir, const char *series, char **label, char **path)
{
	return newest(dir, "nvidia-redist", "cuda-redistrib_", ".json", in_series, (void *)series,
	              label, path);
}

struct cudnn_want {
	const char *series, *min, *platform;
	int cuda_major;
	char *variant;
	struct redist_artifact *a;
};

/* The cudnn archive of this JSON for the CUDA major: a variant "cudaN", or a
 * flat JSON whose archive is built for it (..._cudaN-archive). */
static int cudnn_fits(const char *path, const char *version, void *arg)
{
	struct cudnn_want *w = arg;
	const char *comp[] = {"cudnn"};
	struct redist_artifact *ra = NULL;
	size_t nra = 0;
	char *variant = xasprintf("cuda%d", w->cuda_major);
	char *tag = xasprintf("_cuda%d-", w->cuda_major);
	int ok = 0;
	if (!version_has_prefix(version, w->series) || (w->min && version_cmp(version, w->min) < 0))
		goto out;
	if (redist_resolve(path, NULL, w->platform, variant, comp, 1, &ra, &nra, NULL) == 0) {
		ok = 1;
	} else {
		if (redist_resolve(path, NULL, w->platform, NULL, comp, 1, &ra, &nra, NULL) == 0 &&
		    nra == 1 && strstr(ra[0].relative_path, tag) != NULL) {
			ok = 1;
			free(variant);
			variant = NULL;
		}
	}
	if (ok) {
		redist_artifacts_free(w->a, w->a ? 1 : 0);
		free(w->variant);
		w->a = ra;
		w->variant = variant;
		ra = NULL;
		nra = 0;
		variant = NULL;
	}
out:
	redist_artifacts_free(ra, nra);
	free(variant);
	free(tag);
	return ok;
}

int catalog_cudnn_redist(const char *dir, const char *series, const char *min, int cuda_major,
                         const char *platform, char **path, char **variant,
                         struct redist_artifact **a)
{
	struct cudnn_want w = {series, min, platform, cuda_major, NULL, NULL};
	char *label = NULL;
	int rc =
	    newest(dir, "nvidia-redist", "cudnn-redistrib_", ".json", cudnn_fits, &w, &label, path);
	free(label);
	*variant = w.variant;
	*a = w.a;
	return rc;
}

/* Splits a TSV line in place into at most n fields; returns how many. */
static size_t split_tabs(char *line, char **f, size_t n)
{
	size_t k = 0;
	while (k < n) {
		f[k++] = line;
		char *t = strchr(line, '\t');
		if (t == NULL)
			break;
		*t = '\0';
		line = t + 1;
	}
	return k;
}

/* The lines of a text file that are data: no comment, no header (first field "name"/"product"). */
static int read_rows(const char *path, char **buf, struct strvec *rows)
{
	size_t len = 0;
	if (read_file_at(AT_FDCWD, path, CATALOG_MAX_FILE, buf, &len) != 0)
		return TF_EIO;
	for (char *save = NULL, *l = strtok_r(*buf, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		size_t n = strlen(l);
		if (n && l[n - 1] == '\r')
			l[n - 1] = '\0';
		if (l[0] == '#' || l[0] == '\0' || str_starts_with(l, "name\t") ||
		    str_starts_with(l, "product\t"))
			continue;
		strvec_push(rows, l);
	}
	return 0;
}

int catalog_legacy(const char *dir, const char *product, const char *series, const char *cuda,
                   struct catalog_legacy *out)
{
	char *path = path_join(dir, "legacy-artifacts.tsv"), *buf = NULL;
	struct strvec rows = STRVEC_INIT;
	int rc = read_rows(path, &buf, &rows);
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; rc == 0 && i < rows.n; i++) {
		char *f[6];
		size_t nf = split_tabs(rows.v[i], f, 6);
		if (nf < 5 || strcmp(f[0], product) != 0 || strcmp(f[2], "linux-x86_64") != 0)
			continue;
		char *ver = xstrdup(f[1]), *dash = strchr(ver, '-');
		if (dash)
			*dash++ = '\0';
		int fits = version_has_prefix(ver, series) &&
		           (strcmp(product, "cudnn") != 0 ||
		            (dash && cuda && version_has_prefix(cuda, dash)));
		if (fits && (out->version == NULL || version_cmp(f[1], out->version) > 0)) {
			catalog_legacy_release(out);
			out->version = xstrdup(f[1]);
			out->url = xstrdup(f[3]);
			out->sha256 = xstrdup(f[4]);
			out->source = nf > 5 ? xstrdup(f[5]) : NULL;
		}
		free(ver);
	}
	strvec_release(&rows);
	free(buf);
	free(path);
	if (rc != 0)
		return -ENOENT; /* an unreadable table has no row either */
	return out->version ? 0 : -ENOENT;
}

void catalog_legacy_release(struct catalog_legacy *l)
{
	free(l->version);
	free(l->url);
	free(l->sha256);
	free(l->source);
	memset(l, 0, sizeof(*l));
}

int catalog_conda_lock(const char *dir, const char *python, char **path)
{
	*path = xasprintf("%s/conda/python-%s-linux-64.explicit.txt", dir, python);
	if (access(*path, R_OK) == 0)
		return 0;
	free(*path);
	*path = NULL;
	return -ENOENT;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_dist(const void *a, const void *b)
{
	return strcmp(((const struct catalog_dist *)a)->name,
	              ((const struct catalog_dist *)b)->name);
}

static int closure_read(const char *path, struct catalog_closure *out)
{
	char *buf = NULL;
	struct strvec rows = STRVEC_INIT;
	int rc = read_rows(path, &buf, &rows);
	for (size_t i = 0; rc == 0 && i < rows.n; i++) {
		char *f[4];
		if (split_tabs(rows.v[i], f, 4) < 4 || strlen(f[3]) != 64) {
			rc = TF_EFAIL;
			break;
		}
		char *name = pip_normalize_name(f[0]);
		struct catalog_dist *d = NULL;
		for (size_t k = 0; k < out->n && d == NULL; k++)
			if (strcmp(out->v[k].name, name) == 0)
				d = &out->v[k];
		if (d == NULL) {
			out->v = xrealloc(out->v, (out->n + 1) * sizeof(*out->v));
			d = &out->v[out->n++];
			memset(d, 0, sizeof(*d));
			d->name = name;
			d->version = xstrdup(f[1]);
			d->glibc = -1;
			name = NULL;
		} else if (strcmp(d->version, f[1]) != 0) {
			rc = TF_EFAIL; /* one version per distribution */
		}
		free(name);
		int dup = 0;
		for (size_t h = 0; d && h < d->nsha256; h++)
			dup |= strcmp(d->sha256[h], f[3]) == 0;
		if (d) {
			int g = wheel_glibc_floor(f[2]);
			d->glibc = d->glibc < 0                ? g
			           : (g == 0 || d->glibc == 0) ? 0
			           : g < d->glibc              ? g
			                                       : d->glibc;
		}
		if (rc == 0 && !dup) {
			d->sha256 = xrealloc(d->sha256, (d->nsha256 + 1) * sizeof(char *));
			d->sha256[d->nsha256++] = xstrdup(f[3]);
		}
	}
	for (size_t k = 0; k < out->n; k++) {
		qsort(out->v[k].sha256, out->v[k].nsha256, sizeof(char *), cmp_str);
		if (strcmp(out->v[k].name, "tensorflow") == 0 ||
		    (strcmp(out->v[k].name, "tensorflow-gpu") == 0 && out->tf_version == NULL)) {
			free(out->tf_version);
			out->tf_version = xstrdup(out->v[k].version);
		}
	}
	if (out->n)
		qsort(out->v, out->n, sizeof(*out->v), cmp_dist);
	if (rc == 0 && out->tf_version == NULL)
		rc = TF_EFAIL;
	strvec_release(&rows);
	free(buf);
	return rc;
}

struct closure_want {
	const char *tf, *suffix;
	int exact;
};

static int closure_fits(const char *path, const char *version, void *arg)
{
	struct closure_want *w = arg;
	(void)path;
	/* A file named tf1.15 holds a 1.15.x release: a series matches by prefix. */
	return w->exact ? version_has_prefix(w->tf, version) : version_has_prefix(version, w->tf);
}

int catalog_closure(const char *dir, const char *tf, const char *python, int and_cuda,
                    struct catalog_closure *out)
{
	char *suffix = xasprintf("-cp%ld%ld%s.tsv", version_component(python, 0),
	                         version_component(python, 1), and_cuda ? "-and-cuda" : "");
	const char *dot = strchr(tf, '.');
	struct closure_want w = {tf, suffix, dot != NULL && strchr(dot + 1, '.') != NULL};
	char *ver = NULL, *path = NULL;
	memset(out, 0, sizeof(*out));
	int rc = newest(dir, ".", "pypi-closure-tf", suffix, closure_fits, &w, &ver, &path);
	free(suffix);
	free(ver);
	if (rc != 0)
		return rc;
	out->path = path;
	rc = closure_read(path, out);
	if (rc == 0 && w.exact && strcmp(out->tf_version, tf) != 0)
		rc = -ENOENT; /* the file holds another release of the series */
	if (rc != 0)
		catalog_closure_release(out);
	return rc;
}

void catalog_closure_release(struct catalog_closure *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->v[i].name);
		free(c->v[i].version);
		for (size_t h = 0; h < c->v[i].nsha256; h++)
			free(c->v[i].sha256[h]);
		free(c->v[i].sha256);
	}
	free(c->v);
	free(c->path);
	free(c->tf_version);
	memset(c, 0, sizeof(*c));
}

char *catalog_newest_tf(const char *dir, const char *series)
{
	DIR *dh = opendir(dir);
	struct dirent *e;
	char *best = NULL;
	while (dh && (e = readdir(dh)) != NULL) {
		if (!str_starts_with(e->d_name, "pypi-closure-tf") ||
		    !str_ends_with(e->d_name, ".tsv") || strstr(e->d_name, "win") != NULL)
			continue;
		struct catalog_closure c = {0};
		char *path = path_join(dir, e->d_name);
		if (closure_read(path, &c) == 0 && version_has_prefix(c.tf_version, series) &&
		    (best == NULL || version_cmp(c.tf_version, best) > 0)) {
			free(best);
			best = xstrdup(c.tf_version);
		}
		catalog_closure_release(&c);
		free(path);
	}
	if (dh)
		closedir(dh);
	return best;
}
