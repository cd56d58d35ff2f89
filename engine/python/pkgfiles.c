/* pkgfiles.c - the file lists of pip dist-info RECORDs and conda-meta records (python.h). */
#include "python.h"
#include "python_int.h"
#include "error.h"
#include "place.h"
#include "state.h"
#include "util.h"
#include "digest.h"
#include "dirwalk.h"

#include <sys/stat.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/*
 * Joins base (root-relative dir) and a relative record path, resolving "."
 * and ".."; NULL when the result is not inside `env` (or rel is absolute).
 */
static char *inside(const char *env, const char *base, const char *rel)
{
	if (rel[0] == '/' || rel[0] == '\0')
		return NULL;
	size_t el = strlen(env);
	/* The common row (no "." or ".." segment, no "//") under a base inside env: joined as is. */
	if (strstr(rel, "..") == NULL && strstr(rel, "//") == NULL && strstr(rel, "/./") == NULL &&
	    strncmp(rel, "./", 2) != 0 && strcmp(rel, ".") != 0 && !str_ends_with(rel, "/.") &&
	    !str_ends_with(rel, "/") && strncmp(base, env, el) == 0 && base[el] == '/' &&
	    !str_ends_with(base, "/"))
		return xasprintf("%s/%s", base, rel);
	char *joined = path_join(base, rel);
	struct strvec parts = STRVEC_INIT;
	char *save = NULL;
	for (char *tok = strtok_r(joined, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (strcmp(tok, ".") == 0)
			continue;
		if (strcmp(tok, "..") == 0) {
			if (parts.n)
				free(parts.v[--parts.n]);
			continue;
		}
		strvec_push(&parts, tok);
	}
	struct strbuf sb = STRBUF_INIT;
	for (size_t i = 0; i < parts.n; i++)
		strbuf_addf(&sb, "/%s", parts.v[i]);
	strvec_release(&parts);
	free(joined);
	char *out = sb.buf ? strbuf_detach(&sb) : xstrdup("/");
	if (strncmp(out, env, el) != 0 || out[el] != '/') {
		free(out);
		return NULL;
	}
	return out;
}

static void push(struct pkgfiles *x, char *path, const char *pkg, const char *norm, char src)
{
	if (x->n == x->cap) {
		x->cap = x->cap ? x->cap * 2 : 64;
		x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
	}
	struct pkgfile *f = &x->v[x->n++];
	memset(f, 0, sizeof(*f));
	f->path = path;
	f->pkg = xstrdup(pkg);
	f->norm = xstrdup(norm);
	f->size = -1;
	f->src = src;
}

static void load_record(struct ctx *c, struct pkgfiles *x, const char *env, const char *site,
                        const char *distinfo)
{
	char *rel = xasprintf("%s/%s/RECORD", site, distinfo);
	char *host = ctx_host_dir(c, rel); /* a link is followed inside the root */
	char *text = NULL;
	size_t len = 0;
	free(rel);
	if (read_file_at(AT_FDCWD, host, 64u << 20, &text, &len) != 0) {
		free(host);
		return;
	}
	free(host);
	/* "<name>-<version>.dist-info": the name has no '-' in a dist-info dir name. */
	char *base = xstrndup(distinfo, strlen(distinfo) - strlen(".dist-info"));
	char *dash = strchr(base, '-');
	char *pkg = dash ? xasprintf("%.*s %s", (int)(dash - base), base, dash + 1) : xstrdup(base);
	if (dash)
		*dash = '\0';
	char *norm = pip_normalize_name(base);
	char *save = NULL;
	for (char *line = strtok_r(text, "\r\n", &save); line;
	     line = strtok_r(NULL, "\r\n", &save)) {
		char *f[3] = {NULL, NULL, NULL};
		size_t nf = record_fields(line, f);
		char *p = inside(env, site, f[0]);
		if (p != NULL) {
			push(x, p, pkg, norm, 'p');
			struct pkgfile *e = &x->v[x->n - 1];
			if (f[1] && f[1][0] && record_hash_decode(f[1], e->sha256) != 0)
				snprintf(e->sha256, sizeof(e->sha256),
				         "?"); /* unknown algorithm: a finding */
			if (f[2] && f[2][0])
				e->size = strtoll(f[2], NULL, 10);
		}
		for (size_t k = 0; k < nf; k++)
			free(f[k]);
	}
	free(norm);
	free(pkg);
	free(base);
	free(text);
}

static void load_site(struct ctx *c, struct pkgfiles *x, const char *env, const char *site)
{
	char *host = ctx_host_dir(c, site);
	DIR *d = opendir(host);
	free(host);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		if (str_ends_with(e->d_name, ".dist-info"))
			load_record(c, x, env, site, e->d_name);
	if (d)
		closedir(d);
}

static void load_conda(struct ctx *c, struct pkgfiles *x, const char *env)
{
	char *meta = path_join(env, "conda-meta");
	char *host = ctx_host_dir(c, meta);
	DIR *d = opendir(host);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL) {
		if (!str_ends_with(e->d_name, ".json"))
			continue;
		char *mrel = path_join(meta, e->d_name);
		char *p = ctx_host_dir(c, mrel); /* a link is followed inside the root */
		json_t *j = json_load_file(p, 0, NULL);
		free(p);
		free(mrel);
		const char *name = json_string_value(json_object_get(j, "name"));
		const char *ver = json_string_value(json_object_get(j, "version"));
		json_t *files = json_object_get(j, "files");
		if (name && ver && json_is_array(files)) {
			char *pkg = xasprintf("%s %s", name, ver);
			char *norm = pip_normalize_name(name);
			size_t i;
			json_t *v;
			json_array_foreach(files, i, v)
			{
				const char *rel = json_string_value(v);
				char *fp = rel ? inside(env, env, rel) : NULL;
				if (fp)
					push(x, fp, pkg, norm, 'c');
			}
			free(pkg);
			free(norm);
		}
		json_decref(j);
	}
	if (d)
		closedir(d);
	free(host);
	free(meta);
}

static int by_path(const void *a, const void *b)
{
	return strcmp(((const struct pkgfile *)a)->path, ((const struct pkgfile *)b)->path);
}

int pkgfiles_load(struct ctx *c, const char *env_prefix, struct pkgfiles *out)
{
	memset(out, 0, sizeof(*out));
	char *lib = path_join(env_prefix, "lib");
	char *host = ctx_host_dir(c, lib);
	DIR *d = opendir(host);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL) {
		if (!str_starts_with(e->d_name, "python"))
			continue;
		char *site = xasprintf("%s/%s/site-packages", lib, e->d_name);
		load_site(c, out, env_prefix, site);
		free(site);
	}
	if (d)
		closedir(d);
	free(host);
	free(lib);
	load_conda(c, out, env_prefix);
	if (out->n)
		qsort(out->v, out->n, sizeof(*out->v), by_path);
	return 0;
}

void pkgfiles_release(struct pkgfiles *x)
{
	for (size_t i = 0; i < x->n; i++) {
		free(x->v[i].path);
		free(x->v[i].pkg);
		free(x->v[i].norm);
	}
	free(x->v);
	memset(x, 0, sizeof(*x));
}

/* Index of the first record whose path is >= key. */
static size_t lower_bound(const struct pkgfiles *x, const char *key)
{
	size_t lo = 0, hi = x->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(x->v[mid].path, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct pkgfile *pkgfiles_find(const struct pkgfiles *x, const char *path)
{
	size_t i = lower_bound(x, path);
	return i < x->n && strcmp(x->v[i].path, path) == 0 ? &x->v[i] : NULL;
}

int pkgfiles_has_under(const struct pkgfiles *x, const char *path)
{
	char *key = xasprintf("%s/", path);
	size_t i = lower_bound(x, key);
	int r = i < x->n && str_starts_with(x->v[i].path, key);
	free(key);
	return r;
}

int pkgfiles_owned(void *x, const char *path)
{
	return pkgfiles_find(x, path)        ? PLACE_OWNED
	       : pkgfiles_has_under(x, path) ? PLACE_OWNS_BELOW
	                                     : 0;
}

char *pkgfiles_stack_env(struct ctx *c, int64_t stack_id)
{
	char *env = NULL;
	if (c->st != NULL)
		state_step_top_dir(c->st, stack_id, "pyenv", &env);
	return env;
}

static char *recorded_env(struct ctx *c, int64_t sid)
{
	char *env = NULL;
	if (c->st != NULL)
		state_step_top_dir(c->st, sid, "pyenv", &env);
	return env;
}

char *pkgfiles_load_stack(struct ctx *c, int64_t stack_id, const struct strvec *dists,
                          struct pkgfiles *out)
{
	struct pkgfiles all = {0};
	memset(out, 0, sizeof(*out));
	char *env = recorded_env(c, stack_id);
	if (env == NULL)
		return NULL;
	if (dists == NULL) {
		pkgfiles_load(c, env, out);
		return env;
	}
	if (dists->n == 0)
		return env;
	const struct strvec *names = dists;
	size_t i;
	pkgfiles_load(c, env, &all);
	/* Keep the installed distributions' entries (all stays sorted by path). */
	for (i = 0; i < all.n; i++) {
		int mine = 0;
		for (size_t k = 0; k < names->n && !mine; k++)
			mine = all.v[i].src == 'p' && strcmp(names->v[k], all.v[i].norm) == 0;
		if (mine) {
			out->v = out->v == NULL ? xcalloc(all.n, sizeof(*out->v)) : out->v;
			out->v[out->n++] = all.v[i];
		} else {
			free(all.v[i].path);
			free(all.v[i].pkg);
			free(all.v[i].norm);
		}
	}
	out->cap = out->n;
	free(all.v);
	return env;
}

/* ------------------------------------------------------------ installed distributions */

/* The value of "Key:" in the header block of a METADATA/PKG-INFO text, or NULL. */
static char *metadata_field(const char *text, const char *key)
{
	size_t kl = strlen(key);
	for (const char *l = text; l && *l && *l != '\n' && *l != '\r';
	     l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncasecmp(l, key, kl) == 0 && l[kl] == ':') {
			const char *v = l + kl + 1;
			v += strspn(v, " \t");
			size_t n = strcspn(v, "\r\n");
			while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
				n--;
			return n ? xstrndup(v, n) : NULL;
		}
	}
	return NULL;
}

static int cmp_dist(const void *a, const void *b)
{
	return strcmp(((const struct pip_dist *)a)->name, ((const struct pip_dist *)b)->name);
}

/* One entry of a site directory: a .dist-info or .egg-info (directory or file). */
static void list_one(int sfd, const char *name, struct pip_result *res, size_t *cap)
{
	char *meta = NULL, *text = NULL;
	size_t len = 0;
	if (str_ends_with(name, ".dist-info"))
		meta = xasprintf("%s/METADATA", name);
	else if (str_ends_with(name, ".egg-info"))
		meta = xasprintf("%s/PKG-INFO", name);
	else
		return;
	/* An .egg-info may be the metadata file itself. */
	if (read_file_at(sfd, meta, 1 << 20, &text, &len) != 0 &&
	    (!str_ends_with(name, ".egg-info") ||
	     read_file_at(sfd, name, 1 << 20, &text, &len) != 0)) {
		free(meta);
		return;
	}
	char *nm = metadata_field(text, "Name"), *ver = metadata_field(text, "Version");
	if (nm && ver) {
		char *norm = pip_normalize_name(nm);
		int dup = 0;
		for (size_t i = 0; i < res->n && !dup; i++)
			dup = strcmp(res->v[i].name, norm) == 0;
		if (dup) {
			free(norm);
		} else {
			if (res->n + 1 >= *cap) {
				*cap = *cap ? *cap * 2 : 64;
				res->v = xrealloc(res->v, *cap * sizeof(*res->v));
			}
			res->v[res->n++] = (struct pip_dist){.name = norm, .version = ver};
			ver = NULL;
		}
	}
	free(nm);
	free(ver);
	free(text);
	free(meta);
}

int env_dists(const char *prefix, struct pip_result *res, struct why *why)
{
	char *lib = path_join(prefix, "lib");
	DIR *d = opendir(lib);
	size_t cap = 0, sites = 0;
	struct dirent *e;
	if (d == NULL) {
		int e0 = errno;
		int rc = why_fail(why, tf_err_from_errno(-e0),
		                  "cannot list the env's distributions: %s: %s", lib, strerror(e0));
		free(lib);
		return rc;
	}
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "python", 6) != 0)
			continue;
		char *site = xasprintf("%s/%s/site-packages", lib, e->d_name);
		int sfd = open(site, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
		struct dirent *f;
		if (sd)
			sites++;
		while (sd && (f = readdir(sd)) != NULL)
			list_one(sfd, f->d_name, res, &cap);
		if (sd)
			closedir(sd);
		else if (sfd >= 0)
			close(sfd);
		free(site);
	}
	closedir(d);
	if (sites == 0) {
		why_fail(why, TF_EFAIL,
		         "cannot list the env's distributions: no %s/python*/site-packages", lib);
		free(lib);
		return TF_EFAIL;
	}
	free(lib);
	if (res->n > 1)
		qsort(res->v, res->n, sizeof(*res->v), cmp_dist);
	return 0;
}

int env_dist_stamps(struct ctx *c, const char *env_prefix, struct pip_result *res, struct why *why)
{
	char *host = ctx_host_path(c, env_prefix);
	struct pkgfiles x = {0};
	int rc = env_dists(host, res, why);
	free(host);
	if (rc != 0)
		return rc;
	struct sha256 *sha = xcalloc(res->n ? res->n : 1, sizeof(*sha));
	for (size_t i = 0; i < res->n; i++)
		sha256_init(&sha[i]);
	pkgfiles_load(c, env_prefix, &x);
	/* x is sorted by path: dirwalk keeps each directory open for its files
	 * (resolved inside the root, as drift.c stats recorded files). */
	struct dirwalk w;
	dirwalk_init(&w, c);
	for (size_t i = 0; i < x.n; i++) {
		const struct pkgfile *f = &x.v[i];
		struct pip_dist key = {.name = f->norm};
		struct pip_dist *d =
		    f->src == 'p' ? bsearch(&key, res->v, res->n, sizeof(*res->v), cmp_dist) : NULL;
		if (d == NULL)
			continue;
		struct stat st;
		char line[96];
		if (dirwalk_lstat(&w, f->path, &st) == 0)
			snprintf(line, sizeof(line), "\t%lld %lld.%09ld %o\n",
			         (long long)st.st_size, (long long)st.st_mtim.tv_sec,
			         st.st_mtim.tv_nsec, (unsigned)(st.st_mode & 07777));
		else
			snprintf(line, sizeof(line), "\t-\n");
		struct sha256 *h = &sha[d - res->v];
		sha256_update(h, f->path, strlen(f->path));
		sha256_update(h, line, strlen(line));
	}
	dirwalk_release(&w);
	for (size_t i = 0; i < res->n; i++) {
		char hex[65];
		sha256_final(&sha[i], hex);
		sha256_release(&sha[i]);
		res->v[i].stamp = xstrdup(hex);
	}
	free(sha);
	pkgfiles_release(&x);
	return 0;
}
