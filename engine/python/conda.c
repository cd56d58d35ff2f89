/*
 * conda.c - native installation of a conda explicit lock (see python.h).
 *
 * Order of work: (1) every package is verified (sha256 or md5 of the file)
 * and extracted into the package cache, or its cache entry reused; (2) a
 * staging prefix is created next to the final one (same filesystem, so
 * hard links from the cache and the final rename work); (3) each package's
 * files are linked or copied in lock order (later packages win a clash, as
 * in conda), placeholders replaced with the final prefix, noarch: python
 * relocated and its entry points written; (4) conda-meta/<dist>.json per
 * package and conda-meta/history are written; (5) one syncfs, then the
 * staging prefix is exchanged with the old env, which is then deleted.
 * Nothing at `prefix` changes before step 5, which is one rename.
 */
#include "python.h"
#include "python_int.h"

#include "artifact.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CONDA_MAX_META     (64u << 20)     /* paths.json of a big package */
#define CONDA_MAX_PATCHED  (2048ull << 20) /* a file rewritten in memory */
#define LEGACY_PLACEHOLDER "/opt/anaconda1anaconda2anaconda3"

#define dlog(c, ...)                                                                               \
	do {                                                                                       \
		if ((c) != NULL)                                                                   \
			ev_log((c), EV_DEBUG, __VA_ARGS__);                                        \
	} while (0)

void conda_result_release(struct conda_result *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->files[i].path);
	free(r->files);
	free(r->python_version);
	memset(r, 0, sizeof(*r));
}

static void result_add(struct conda_result *r, const char *path, const char *sha, uint64_t size,
                       unsigned mode)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 256;
		r->files = xrealloc(r->files, r->cap * sizeof(*r->files));
	}
	struct conda_file *f = &r->files[r->n++];
	f->path = xstrdup(path);
	snprintf(f->sha256, sizeof(f->sha256), "%s", sha);
	f->size = size;
	f->mode = mode;
}

/* ---- hashing ---- */

/* sha256 (digest.c, as every other hash) and md5 of a file in one pass. 0 or -errno. */
static int hash_file(const char *path, char sha[65], char md5[33], uint64_t *size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct sha256 a;
	sha256_init(&a);
	EVP_MD_CTX *b = EVP_MD_CTX_new();
	EVP_DigestInit_ex(b, EVP_md5(), NULL);
	static __thread unsigned char buf[DIGEST_READ_SIZE];
	uint64_t total = 0;
	int rc = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		sha256_update(&a, buf, (size_t)n);
		EVP_DigestUpdate(b, buf, (size_t)n);
		total += (uint64_t)n;
	}
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned dl = 0;
	sha256_final(&a, sha);
	EVP_DigestFinal_ex(b, d, &dl);
	hex_encode(d, dl, md5);
	EVP_MD_CTX_free(b);
	close(fd);
	if (size)
		*size = total;
	return rc;
}

/* ---- extraction ---- */

static char *dist_name(const struct conda_pkg *p)
{
	return xasprintf("%s-%s-%s", p->name, p->version, p->build);
}

static const char *url_last_part(const char *url)
{
	const char *s = strrchr(url, '/');
	return s ? s + 1 : url;
}

/* channel = URL up to and including the subdir ("https://.../conda-forge/linux-64"). */
static void url_channel(const char *url, char **channel, char **subdir)
{
	const char *fn = url_last_part(url);
	size_t cl = fn > url ? (size_t)(fn - url - 1) : 0;
	*channel = xstrndup(url, cl);
	const char *s = memrchr(url, '/', cl);
	*subdir = s ? xstrndup(s + 1, cl - (size_t)(s + 1 - url)) : xstrdup("");
}

static json_t *load_json(const char *dir, const char *rel)
{
	char *p = path_join(dir, rel), *text = NULL;
	size_t len = 0;
	json_t *j = NULL;
	if (read_file_at(AT_FDCWD, p, CONDA_MAX_META, &text, &len) == 0)
		j = json_loadb(text, len, 0, NULL);
	free(text);
	free(p);
	return j;
}

/* Is the cache entry complete and from the same bytes the lock pins? */
static int cache_entry_matches(const char *dir, const struct conda_pkg *p)
{
	json_t *rec = load_json(dir, "info/repodata_record.json");
	int ok = 0;
	if (rec != NULL) {
		const char *sha = json_string_value(json_object_get(rec, "sha256"));
		const char *md5 = json_string_value(json_object_get(rec, "md5"));
		if (p->sha256[0])
			ok = sha && strcmp(sha, p->sha256) == 0;
		else if (p->md5[0])
			ok = md5 && strcmp(md5, p->md5) == 0;
	}
	json_decref(rec);
	return ok;
}

static int write_json_file(const char *path, json_t *j)
{
	char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (text == NULL)
		return TF_EIO;
	int rc = fs_write_atomic(path, text, strlen(text), 0644, 0) == 0 ? 0 : TF_EIO;
	free(text);
	return rc;
}

int conda_pkg_extracted(struct ctx *c, const struct conda_pkg *p)
{
	char *dist = dist_name(p), *dir = path_join(c->cache_dir, "pkgs");
	char *entry = path_join(dir, dist);
	int ok = fs_rel_is_safe(dist) && strchr(dist, '/') == NULL && cache_entry_matches(entry, p);
	free(entry);
	free(dir);
	free(dist);
	return ok;
}

/*
 * The package's files into tmp (created): the tree decode-ahead made of the
 * same verified file during the downloads (`ahead`, the step's prepared
 * artifact of this package: artifact.h), else decoded now.
 */
static int unpack_package(struct ctx *c, const struct conda_pkg *p, const char *file,
                          struct art *ahead, const char *tmp, struct unpack_result *ur,
                          struct why *why)
{
	if (c && ahead && art_take_tree(c, ahead, tmp, ur) == 0)
		return 0;
	/* One extractor for every archive (unpack.c, the one the fuzzer covers):
	 * it creates tmp itself, with the same refusals as for NVIDIA's archives. */
	return unpack_conda_package(
	    c, file, str_ends_with(file, ".conda") || str_ends_with(p->url, ".conda"), tmp, ur,
	    why);
}

/*
 * The package file against the hashes the lock pins (sha256, else md5):
 * sha, md5 and *size of its bytes. 0, TF_EIO, or TF_EINTEGRITY (a mismatch,
 * or no hash pinned), with why.
 */
static int check_package_file(const struct conda_pkg *p, const char *file, const char *dist,
                              char sha[65], char md5[33], uint64_t *size, struct why *why)
{
	int e = hash_file(file, sha, md5, size);
	if (e != 0)
		return why_fail(why, TF_EIO, "%s: %s", file, strerror(-e));
	if ((p->sha256[0] && strcmp(sha, p->sha256) != 0) ||
	    (p->md5[0] && strcmp(md5, p->md5) != 0))
		return why_fail(why, TF_EINTEGRITY, "%s: %s mismatch for %s: expected %s, got %s",
		                file, p->sha256[0] ? "sha256" : "md5", dist,
		                p->sha256[0] ? p->sha256 : p->md5, p->sha256[0] ? sha : md5);
	if (!p->sha256[0] && !p->md5[0])
		return why_fail(why, TF_EINTEGRITY, "%s: the lock pins no hash", dist);
	return 0;
}

int conda_extract(struct ctx *c, const char *pkgs_dir, const struct conda_pkg *p, const char *file,
                  struct art *ahead, char **dir, int *reused, struct why *why)
{
	char *dist = dist_name(p), *final = path_join(pkgs_dir, dist), *tmp = NULL;
	char sha[65], md5[33];
	uint64_t size = 0;
	json_t *idx = NULL;
	int rc = 0;
	*reused = 0;
	*dir = NULL;

	if (!fs_rel_is_safe(dist) || strchr(dist, '/') != NULL) {
		rc = why_fail(why, TF_EUNSAFE, "package name '%s' is not a plain file name", dist);
		goto out;
	}
	if (cache_entry_matches(final, p)) {
		dlog(c, "conda: reusing %s", final);
		*reused = 1;
		goto done;
	}
	if ((rc = check_package_file(p, file, dist, sha, md5, &size, why)) != 0)
		goto out;
	int e = mkdirs_at(AT_FDCWD, pkgs_dir, 0755);
	if (e != 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", pkgs_dir, strerror(-e));
		goto out;
	}
	char *tmpl = xasprintf("%s.tfprov-x.XXXXXX", final);
	tmp = mkdtemp(tmpl);
	if (tmp == NULL) {
		free(tmpl);
		rc = why_fail(why, TF_EIO, "%s: %s", pkgs_dir, strerror(errno));
		goto out;
	}
	rmdir(tmp);
	struct unpack_result ur = {0};
	rc = unpack_package(c, p, file, ahead, tmp, &ur, why);
	unpack_result_release(&ur);
	if (rc)
		goto out;
	chmod(tmp, 0755);
	idx = load_json(tmp, "info/index.json");
	if (!json_is_object(idx)) {
		rc = why_fail(why, TF_EINTEGRITY, "%s: no valid info/index.json", file);
		goto out;
	}
	/* repodata_record.json: index.json plus where the bytes came from. */
	char *channel, *subdir;
	url_channel(p->url, &channel, &subdir);
	json_object_set_new(idx, "url", json_string(p->url));
	json_object_set_new(idx, "channel", json_string(channel));
	json_object_set_new(idx, "fn", json_string(url_last_part(p->url)));
	json_object_set_new(idx, "sha256", json_string(sha));
	json_object_set_new(idx, "md5", json_string(md5));
	json_object_set_new(idx, "size", json_integer((json_int_t)size));
	free(channel);
	free(subdir);
	char *rec = path_join(tmp, "info/repodata_record.json");
	rc = write_json_file(rec, idx);
	free(rec);
	if (rc) {
		why_fail(why, rc, "%s: cannot write repodata_record.json", tmp);
		goto out;
	}
	fs_rmtree(final);
	if (rename(tmp, final) != 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", final, strerror(errno));
		goto out;
	}
	dlog(c, "conda: extracted %s", final);
done:
	*dir = final;
	final = NULL;
out:
	if (tmp && rc)
		fs_rmtree(tmp);
	free(tmp);
	json_decref(idx);
	free(dist);
	free(final);
	return rc;
}

/* ---- linking ---- */

struct path_entry {
	char *path;
	char *type; /* hardlink, softlink, directory */
	char *placeholder;
	int binary;
	int no_link;
	char sha256[65];
	int64_t size;
};

static void entries_free(struct path_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].path);
		free(v[i].type);
		free(v[i].placeholder);
	}
	free(v);
}

/* Splits a small text file into lines (owned strvec). */
static void read_lines(const char *dir, const char *rel, struct strvec *out)
{
	char *p = path_join(dir, rel), *text = NULL;
	size_t len = 0;
	if (read_file_at(AT_FDCWD, p, CONDA_MAX_META, &text, &len) == 0) {
		char *save = NULL;
		for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			size_t n = strlen(l);
			while (n && (l[n - 1] == '\r' || l[n - 1] == ' '))
				l[--n] = '\0';
			if (n)
				strvec_push(out, l);
		}
	}
	free(text);
	free(p);
}

/* info/paths.json, else the legacy info/files + has_prefix + no_link. */
static int read_paths(const char *dir, struct path_entry **out, size_t *nout, struct why *why)
{
	json_t *pj = load_json(dir, "info/paths.json");
	struct path_entry *v = NULL;
	size_t n = 0;
	if (pj != NULL) {
		json_t *arr = json_object_get(pj, "paths");
		size_t i;
		json_t *it;
		v = xcalloc(json_array_size(arr) + 1, sizeof(*v));
		json_array_foreach(arr, i, it)
		{
			const char *p = json_string_value(json_object_get(it, "_path"));
			const char *t = json_string_value(json_object_get(it, "path_type"));
			const char *ph =
			    json_string_value(json_object_get(it, "prefix_placeholder"));
			const char *fm = json_string_value(json_object_get(it, "file_mode"));
			const char *sh = json_string_value(json_object_get(it, "sha256"));
			if (p == NULL)
				continue;
			struct path_entry *e = &v[n++];
			e->path = xstrdup(p);
			e->type = xstrdup(t ? t : "hardlink");
			e->placeholder = ph ? xstrdup(ph) : NULL;
			e->binary = fm && strcmp(fm, "binary") == 0;
			e->no_link = json_is_true(json_object_get(it, "no_link"));
			if (sh && is_hex64(sh))
				memcpy(e->sha256, sh, 65);
			json_t *sz = json_object_get(it, "size_in_bytes");
			e->size = json_is_integer(sz) ? (int64_t)json_integer_value(sz) : -1;
		}
		json_decref(pj);
	} else {
		struct strvec files = STRVEC_INIT, hp = STRVEC_INIT, nl = STRVEC_INIT;
		read_lines(dir, "info/files", &files);
		read_lines(dir, "info/has_prefix", &hp);
		read_lines(dir, "info/no_link", &nl);
		if (files.n == 0) {
			why_fail(why, TF_EINTEGRITY, "%s: neither info/paths.json nor info/files",
			         dir);
			strvec_release(&files);
			strvec_release(&hp);
			strvec_release(&nl);
			return TF_EINTEGRITY;
		}
		v = xcalloc(files.n + 1, sizeof(*v));
		for (size_t i = 0; i < files.n; i++) {
			struct path_entry *e = &v[n++];
			char *full = path_join(dir, files.v[i]);
			struct stat st;
			e->path = xstrdup(files.v[i]);
			e->type = xstrdup(
			    lstat(full, &st) == 0 && S_ISLNK(st.st_mode) ? "softlink" : "hardlink");
			e->size = -1;
			free(full);
			for (size_t k = 0; k < nl.n; k++)
				if (strcmp(nl.v[k], files.v[i]) == 0)
					e->no_link = 1;
			/* has_prefix: "path" (text, legacy placeholder) or "placeholder mode path". */
			for (size_t k = 0; k < hp.n; k++) {
				char ph[4096], mode[16], path[4096];
				if (sscanf(hp.v[k], "%4095s %15s %4095[^\n]", ph, mode, path) ==
				    3) {
					if (strcmp(path, files.v[i]) == 0) {
						e->placeholder = xstrdup(ph);
						e->binary = strcmp(mode, "binary") == 0;
					}
				} else if (strcmp(hp.v[k], files.v[i]) == 0) {
					e->placeholder = xstrdup(LEGACY_PLACEHOLDER);
				}
			}
		}
		strvec_release(&files);
		strvec_release(&hp);
		strvec_release(&nl);
	}
	*out = v;
	*nout = n;
	return 0;
}

/* Text mode: every occurrence replaced, length may change. */
static void replace_text(const char *d, size_t n, const char *ph, const char *np,
                         struct strbuf *out)
{
	size_t pl = strlen(ph);
	size_t i = 0;
	while (i < n) {
		const char *hit = pl ? memmem(d + i, n - i, ph, pl) : NULL;
		if (hit == NULL) {
			strbuf_add(out, d + i, n - i);
			break;
		}
		strbuf_add(out, d + i, (size_t)(hit - (d + i)));
		strbuf_adds(out, np);
		i = (size_t)(hit - d) + pl;
	}
}

/*
 * Binary mode: each C string containing the placeholder is rewritten in
 * place with the new prefix and padded with NULs to its old length.
 * -ENAMETOOLONG when the new prefix is longer than the placeholder.
 */
static int replace_binary(char *d, size_t n, const char *ph, const char *np)
{
	size_t pl = strlen(ph), nl = strlen(np);
	size_t i = 0;
	if (pl == 0)
		return 0;
	while (i < n) {
		char *hit = memmem(d + i, n - i, ph, pl);
		if (hit == NULL)
			break;
		if (nl > pl)
			return -ENAMETOOLONG;
		char *end = memchr(hit, '\0', (size_t)(d + n - hit));
		if (end == NULL)
			end = d + n;
		struct strbuf s = STRBUF_INIT;
		replace_text(hit, (size_t)(end - hit), ph, np, &s);
		memcpy(hit, s.buf, s.len);
		memset(hit + s.len, 0, (size_t)(end - hit) - s.len);
		strbuf_release(&s);
		i = (size_t)(end - d);
	}
	return 0;
}

struct linker {
	struct ctx *c;
	const char *prefix; /* final prefix, written into files */
	const char *stage;  /* host path of the staging prefix */
	const char *pyver;  /* "X.Y" or NULL */
	struct conda_result *res;
	int copied; /* a file had to be copied rather than linked */
};

static int place_parent(const char *stage, const char *rel)
{
	char *full = path_join(stage, rel);
	char *slash = strrchr(full, '/');
	int rc = 0;
	if (slash) {
		*slash = '\0';
		rc = mkdirs_at(AT_FDCWD, full, 0755);
	}
	free(full);
	return rc;
}

/* Maps a package path to the env path (noarch: python relocation). */
static char *target_path(const char *path, int noarch_python, const char *pyver)
{
	if (noarch_python && str_starts_with(path, "site-packages/"))
		return xasprintf("lib/python%s/%s", pyver, path);
	if (noarch_python && str_starts_with(path, "python-scripts/"))
		return xasprintf("bin/%s", path + strlen("python-scripts/"));
	return xstrdup(path);
}

/*
 * A file with the prefix placeholder: written to dst with the env's prefix in
 * its place (a binary file's cannot grow), recorded with its new hash h. 0,
 * TF_EFAIL with why, or 0 with *ioerr the -errno of a failed read or write.
 */
static int link_patched(struct linker *L, const char *pkgdir, const struct path_entry *e,
                        const char *src, const char *dst, const char *rel, const struct stat *st,
                        json_t *o, char h[65], int *ioerr, struct why *why)
{
	char *data = NULL;
	size_t len = 0;
	int rc = 0;
	if ((uint64_t)st->st_size > CONDA_MAX_PATCHED)
		return why_fail(why, TF_EFAIL, "%s: too large to patch the prefix", src);
	if ((*ioerr = read_file_at(AT_FDCWD, src, CONDA_MAX_PATCHED, &data, &len)) != 0)
		return 0;
	struct strbuf nb = STRBUF_INIT;
	if (e->binary) {
		if (replace_binary(data, len, e->placeholder, L->prefix) != 0) {
			rc = why_fail(why, TF_EFAIL,
			              "%s: binary file '%s' holds a %zu-byte prefix placeholder "
			              "but the env prefix '%s' is %zu bytes; binary files cannot "
			              "grow. Choose a shorter prefix",
			              url_last_part(pkgdir), rel, strlen(e->placeholder), L->prefix,
			              strlen(L->prefix));
			goto out;
		}
		strbuf_add(&nb, data, len);
	} else {
		replace_text(data, len, e->placeholder, L->prefix, &nb);
	}
	*ioerr = fs_write_new(dst, nb.buf ? nb.buf : "", nb.len, st->st_mode & 0777);
	sha256_buf(nb.buf ? nb.buf : "", nb.len, h);
	result_add(L->res, rel, h, nb.len, S_IFREG | (st->st_mode & 0777));
	json_object_set_new(o, "sha256_in_prefix", json_string(h));
	json_object_set_new(o, "prefix_placeholder", json_string(e->placeholder));
	json_object_set_new(o, "file_mode", json_string(e->binary ? "binary" : "text"));
out:
	strbuf_release(&nb);
	free(data);
	return rc;
}

/* Places one entry; appends its paths_data object to pd. */
static int link_entry(struct linker *L, const char *pkgdir, const struct path_entry *e,
                      int noarch_python, json_t *files, json_t *pd, struct why *why)
{
	char *src = path_join(pkgdir, e->path);
	char *rel = target_path(e->path, noarch_python, L->pyver);
	char *dst = path_join(L->stage, rel);
	int rc = 0, err = 0;
	struct stat st;
	json_t *o = json_object();

	if (!fs_rel_is_safe(e->path) || !fs_rel_is_safe(rel)) {
		rc = why_fail(why, TF_EUNSAFE, "%s: unsafe path '%s' in paths.json", pkgdir,
		              e->path);
		goto out;
	}
	if ((err = place_parent(L->stage, rel)) != 0)
		goto io;
	if (strcmp(e->type, "directory") == 0) {
		if ((err = mkdirs_at(AT_FDCWD, dst, 0755)) != 0)
			goto io;
		json_object_set_new(o, "path_type", json_string("directory"));
		goto record;
	}
	if (lstat(src, &st) != 0) {
		rc = why_fail(why, TF_EINTEGRITY, "%s: '%s' is listed but missing from the package",
		              pkgdir, e->path);
		goto out;
	}
	if (S_ISLNK(st.st_mode)) {
		char target[4096];
		ssize_t n = readlink(src, target, sizeof(target) - 1);
		if (n < 0) {
			err = -errno;
			goto io;
		}
		target[n] = '\0';
		unlink(dst);
		if (symlink(target, dst) != 0) {
			err = -errno;
			goto io;
		}
		char h[65];
		sha256_buf(target, (size_t)n, h);
		result_add(L->res, rel, h, (uint64_t)n, S_IFLNK | 0777);
		json_object_set_new(o, "path_type", json_string("softlink"));
		goto record;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = why_fail(why, TF_EUNSAFE, "%s: '%s' is not a regular file", pkgdir, e->path);
		goto out;
	}
	json_object_set_new(o, "path_type", json_string("hardlink"));
	char h[65];
	if (e->placeholder != NULL) {
		rc = link_patched(L, pkgdir, e, src, dst, rel, &st, o, h, &err, why);
		if (rc != 0)
			goto out;
		if (err)
			goto io;
	} else {
		unlink(dst);
		if (e->no_link || link(src, dst) != 0) {
			if (!e->no_link)
				L->copied = 1;
			if ((err = fs_copy_file(src, dst, st.st_mode & 0777)) != 0)
				goto io;
		}
		if (e->sha256[0]) {
			memcpy(h, e->sha256, 65);
		} else {
			char md5[33];
			uint64_t sz;
			if ((err = hash_file(dst, h, md5, &sz)) != 0)
				goto io;
		}
		result_add(L->res, rel, h, (uint64_t)st.st_size, S_IFREG | (st.st_mode & 0777));
	}
	json_object_set_new(o, "sha256", json_string(e->sha256[0] ? e->sha256 : h));
	json_object_set_new(o, "size_in_bytes", json_integer((json_int_t)st.st_size));
record:
	json_object_set_new(o, "_path", json_string(rel));
	if (strcmp(e->type, "directory") != 0)
		json_array_append_new(files, json_string(rel));
	json_array_append(pd, o);
	goto out;
io:
	rc = why_fail(why, TF_EIO, "%s: %s", dst, strerror(-err));
out:
	json_decref(o);
	free(src);
	free(rel);
	free(dst);
	return rc;
}

/* Writes bin/<name> for "name = module:func" (conda's entry-point template). */
static int write_entry_point(struct linker *L, const char *spec, json_t *files, json_t *pd,
                             struct why *why)
{
	char name[256], module[512], func[256];
	if (sscanf(spec, " %255[^= ] = %511[^: ] : %255s", name, module, func) != 3 ||
	    !fs_rel_is_safe(name) || strchr(name, '/') != NULL)
		return why_fail(why, TF_EINTEGRITY, "invalid entry point '%s' in info/link.json",
		                spec);
	char *python = xasprintf("%s/bin/python", L->prefix);
	struct strbuf sb = STRBUF_INIT;
	/* Linux truncates a shebang at 127 bytes: use sh to exec a long path. */
	if (strlen(python) + 2 < 127)
		strbuf_addf(&sb, "#!%s\n", python);
	else
		strbuf_addf(&sb, "#!/bin/sh\n'''exec' \"%s\" \"$0\" \"$@\"\n' '''\n", python);
	char *fattr = xstrdup(func), *dot = strchr(fattr, '.');
	if (dot)
		*dot = '\0';
	strbuf_addf(&sb,
	            "# -*- coding: utf-8 -*-\n"
	            "import re\n"
	            "import sys\n\n"
	            "from %s import %s\n\n"
	            "if __name__ == '__main__':\n"
	            "    sys.argv[0] = re.sub(r'(-script\\.pyw?|\\.exe)?$', '', sys.argv[0])\n"
	            "    sys.exit(%s())\n",
	            module, fattr, func);
	free(fattr);
	char *rel = xasprintf("bin/%s", name), *dst = path_join(L->stage, rel);
	int rc = place_parent(L->stage, rel);
	if (rc == 0)
		rc = fs_write_new(dst, sb.buf, sb.len, 0755);
	if (rc != 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", dst, strerror(-rc));
	} else {
		char h[65];
		sha256_buf(sb.buf, sb.len, h);
		result_add(L->res, rel, h, sb.len, S_IFREG | 0755);
		json_array_append_new(files, json_string(rel));
		json_t *o = json_object();
		json_object_set_new(o, "_path", json_string(rel));
		json_object_set_new(o, "path_type", json_string("unix_python_entry_point"));
		json_object_set_new(o, "sha256", json_string(h));
		json_object_set_new(o, "size_in_bytes", json_integer((json_int_t)sb.len));
		json_array_append_new(pd, o);
	}
	free(python);
	free(rel);
	free(dst);
	strbuf_release(&sb);
	return rc;
}

static json_t *array_or_empty(json_t *v)
{
	return json_is_array(v) ? json_incref(v) : json_array();
}

/*
 * conda-meta/<dist>.json's object (rec): the fields conda and micromamba
 * read, from the package's repodata record (idx), the lock's entry p and
 * what was linked (files, pd).
 */
static void package_record(struct linker *L, const struct conda_pkg *p, const char *pkgdir,
                           const char *file, const char *pkgs_dir, json_t *idx, json_t *files,
                           json_t *pd, json_t *rec)
{
	char *channel, *subdir;
	url_channel(p->url, &channel, &subdir);
	const char *fields[] = {"name",    "version", "build",     "build_number",   "subdir",
	                        "license", "noarch",  "timestamp", "track_features", "features",
	                        "md5",     "sha256",  "size"};
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		json_t *v = json_object_get(idx, fields[i]);
		if (v != NULL)
			json_object_set(rec, fields[i], v);
	}
	json_object_set_new(rec, "name", json_string(p->name));
	json_object_set_new(rec, "version", json_string(p->version));
	json_object_set_new(rec, "build", json_string(p->build));
	if (json_object_get(rec, "build_number") == NULL)
		json_object_set_new(rec, "build_number", json_integer(0));
	if (json_object_get(rec, "subdir") == NULL)
		json_object_set_new(rec, "subdir", json_string(subdir));
	json_object_set_new(rec, "channel", json_string(channel));
	json_object_set_new(rec, "url", json_string(p->url));
	json_object_set_new(rec, "fn", json_string(url_last_part(p->url)));
	json_object_set_new(rec, "depends", array_or_empty(json_object_get(idx, "depends")));
	json_object_set_new(rec, "constrains", array_or_empty(json_object_get(idx, "constrains")));
	json_object_set_new(rec, "files", json_incref(files));
	json_t *pdo = json_object();
	json_object_set_new(pdo, "paths_version", json_integer(1));
	json_object_set_new(pdo, "paths", json_incref(pd));
	json_object_set_new(rec, "paths_data", pdo);
	json_t *lk = json_object();
	json_object_set_new(lk, "source", json_string(pkgdir));
	json_object_set_new(lk, "type", json_integer(L->copied ? 3 : 1)); /* 1 hardlink, 3 copy */
	json_object_set_new(rec, "link", lk);
	json_object_set_new(rec, "extracted_package_dir", json_string(pkgdir));
	char *tarball = path_join(pkgs_dir, url_last_part(p->url));
	json_object_set_new(rec, "package_tarball_full_path", json_string(file ? file : tarball));
	free(tarball);
	json_object_set_new(rec, "requested_spec", json_string("None"));
	free(channel);
	free(subdir);
}

/* Links one package into the stage and writes its conda-meta record. */
static int link_package(struct linker *L, const struct conda_pkg *p, const char *pkgdir,
                        const char *file, const char *pkgs_dir, struct why *why)
{
	struct path_entry *ents = NULL;
	size_t nent = 0;
	json_t *idx = load_json(pkgdir, "info/repodata_record.json");
	json_t *link = load_json(pkgdir, "info/link.json");
	json_t *files = json_array(), *pd = json_array(), *rec = json_object();
	char *dist = dist_name(p), *meta = NULL;
	int rc = read_paths(pkgdir, &ents, &nent, why);
	if (rc)
		goto out;
	json_t *na = json_object_get(idx, "noarch");
	const char *natype =
	    json_string_value(json_object_get(json_object_get(link, "noarch"), "type"));
	int noarch_python = (json_is_string(na) && strcmp(json_string_value(na), "python") == 0) ||
	                    (natype && strcmp(natype, "python") == 0);
	if (noarch_python && L->pyver == NULL) {
		rc = why_fail(why, TF_EMANIFEST,
		              "%s is a noarch: python package but the lock has no python package "
		              "to install it for",
		              dist);
		goto out;
	}
	L->copied = 0;
	for (size_t i = 0; i < nent && rc == 0; i++)
		rc = link_entry(L, pkgdir, &ents[i], noarch_python, files, pd, why);
	if (rc)
		goto out;
	json_t *eps = json_object_get(json_object_get(link, "noarch"), "entry_points");
	size_t k;
	json_t *ep;
	json_array_foreach(eps, k, ep)
	{
		if (!json_is_string(ep))
			continue;
		rc = write_entry_point(L, json_string_value(ep), files, pd, why);
		if (rc)
			goto out;
	}

	package_record(L, p, pkgdir, file, pkgs_dir, idx, files, pd, rec);

	char *rel = xasprintf("conda-meta/%s.json", dist);
	meta = path_join(L->stage, rel);
	rc = write_json_file(meta, rec);
	if (rc) {
		why_fail(why, rc, "%s: cannot write", meta);
	} else {
		char sha[65], md5[33];
		uint64_t sz = 0;
		hash_file(meta, sha, md5, &sz);
		result_add(L->res, rel, sha, sz, S_IFREG | 0644);
	}
	free(rel);
out:
	entries_free(ents, nent);
	json_decref(idx);
	json_decref(link);
	json_decref(files);
	json_decref(pd);
	json_decref(rec);
	free(dist);
	free(meta);
	return rc;
}

/* conda-meta/history: the old env's history plus one revision for this install. */
static int write_history(struct linker *L, const char *host_prefix, const struct conda_pkg *pkgs,
                         size_t n, struct why *why)
{
	struct strbuf sb = STRBUF_INIT;
	char *old = path_join(host_prefix, "conda-meta/history"), *text = NULL;
	size_t len = 0;
	if (read_file_at(AT_FDCWD, old, 16u << 20, &text, &len) == 0)
		strbuf_add(&sb, text, len);
	free(text);
	free(old);
	char when[64];
	time_t t = time(NULL);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	strbuf_addf(&sb, "==> %s <==\n# cmd: tfprov apply (explicit lock)\n", when);
	strbuf_adds(&sb, "# conda version: 4.14.0\n");
	for (size_t i = 0; i < n; i++) {
		char *channel, *subdir;
		url_channel(pkgs[i].url, &channel, &subdir);
		const char *cname = channel;
		/* conda's short form: conda-forge/linux-64::name-version-build */
		const char *anaconda = strstr(channel, "conda.anaconda.org/");
		if (anaconda)
			cname = anaconda + strlen("conda.anaconda.org/");
		strbuf_addf(&sb, "+%s::%s-%s-%s\n", cname, pkgs[i].name, pkgs[i].version,
		            pkgs[i].build);
		free(channel);
		free(subdir);
	}
	char *rel = xstrdup("conda-meta/history"), *dst = path_join(L->stage, rel);
	int rc = fs_write_new(dst, sb.buf, sb.len, 0644);
	if (rc) {
		rc = why_fail(why, TF_EIO, "%s: %s", dst, strerror(-rc));
	} else {
		char h[65];
		sha256_buf(sb.buf, sb.len, h);
		result_add(L->res, rel, h, sb.len, S_IFREG | 0644);
	}
	free(rel);
	free(dst);
	strbuf_release(&sb);
	return rc;
}

int conda_fetch_install(struct ctx *c, const char *prefix, int prefix_is_host,
                        const struct conda_pkg *pkgs, size_t n, struct art *ahead,
                        const char *stage, struct conda_result *res, struct why *why)
{
	struct fetch_item *items = xcalloc(n ? n : 1, sizeof(*items));
	char **files = xcalloc(n ? n : 1, sizeof(*files));
	char *dir = path_join(c->cache_dir, "pkgs");
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		const struct conda_pkg *p = &pkgs[i];
		if (p->sha256[0] == '\0') {
			rc = why_fail(
			    why, TF_EMANIFEST,
			    "%s-%s-%s is pinned by md5 only; tfprov verifies downloads by sha256: "
			    "regenerate the lock with `conda list --explicit --sha256`",
			    p->name, p->version, p->build);
			goto out;
		}
		items[i].name = p->name;
		items[i].url = p->url;
		items[i].sha256 = p->sha256;
		items[i].size = -1;
	}
	rc = fetch_all(c, items, n);
	for (size_t i = 0; i < n; i++) {
		if (rc != 0 && items[i].why.code)
			why_first(why, items[i].why.code, "%s", why_text(&items[i].why));
		files[i] = items[i].path ? xstrdup(items[i].path) : NULL;
	}
	if (rc == 0) {
		mkdirs_at(AT_FDCWD, dir, 0755);
		rc = conda_install(prefix_is_host ? NULL : c, prefix, dir, pkgs, files, n, ahead,
		                   stage, res, why);
	}
out:
	for (size_t i = 0; i < n; i++) {
		fetch_item_release(&items[i]);
		free(files[i]);
	}
	free(items);
	free(files);
	free(dir);
	return why_code(why, rc);
}

/* Each package extracted into the package cache (or found there): dirs[i]. */
static int extract_all(struct ctx *c, const char *pkgs_dir, const struct conda_pkg *pkgs,
                       char *const *files, size_t n, struct art *ahead, char **dirs,
                       struct conda_result *res, struct why *why)
{
	for (size_t i = 0; i < n; i++) {
		int reused = 0, rc;
		if (tf_interrupted)
			return why_fail(why, TF_EINTR, "interrupted");
		rc = conda_extract(c, pkgs_dir, &pkgs[i], files[i], ahead ? &ahead[i] : NULL,
		                   &dirs[i], &reused, why);
		if (rc)
			return rc;
		if (reused)
			res->reused++;
		else
			res->extracted++;
	}
	return 0;
}

/*
 * The directory the env is built in (*stage, with its conda-meta/): the
 * caller's stage_in, else a sibling of host. 0 or TF_EIO.
 */
static int stage_open(const char *host, const char *stage_in, char **stage, struct why *why)
{
	char *parent = xstrdup(host), *slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		mkdirs_at(AT_FDCWD, parent, 0755);
	}
	free(parent);
	if (stage_in) {
		/* The caller's (journaled) stage: built there, placed by the caller. */
		*stage = mkdir(stage_in, 0755) == 0 ? xstrdup(stage_in) : NULL;
	} else {
		char *tmpl = xasprintf("%s.tfprov-stage.XXXXXX", host);
		if ((*stage = mkdtemp(tmpl)) == NULL)
			free(tmpl);
	}
	if (*stage == NULL)
		return why_fail(why, TF_EIO, "%s: cannot create a staging directory: %s", host,
		                strerror(errno));
	chmod(*stage, 0755);
	char *cm = path_join(*stage, "conda-meta");
	mkdir(cm, 0755);
	free(cm);
	return 0;
}

/* A throwaway env (tfprov lock, tests): stage made durable, then swapped in at host. */
static int stage_swap_in(const char *stage, const char *host, struct why *why)
{
	int sfd = open(stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0 || syncfs(sfd) != 0) {
		why_fail(why, TF_EIO, "%s: cannot make the new environment durable (syncfs): %s",
		         stage, strerror(errno));
		if (sfd >= 0)
			close(sfd);
		return TF_EIO;
	}
	close(sfd);
	int e = fs_swap_in(stage, host);
	if (e != 0)
		return why_fail(why, TF_EIO, "%s: cannot move the new environment into place: %s",
		                host, strerror(-e));
	return 0;
}

int conda_install(struct ctx *c, const char *prefix, const char *pkgs_dir,
                  const struct conda_pkg *pkgs, char *const *files, size_t n, struct art *ahead,
                  const char *stage_in, struct conda_result *res, struct why *why)
{
	char *host = c ? ctx_host_path(c, prefix) : xstrdup(prefix);
	char **dirs = xcalloc(n + 1, sizeof(*dirs));
	char *stage = NULL;
	int rc = 0;

	if (prefix[0] != '/') {
		rc = why_fail(why, TF_EUSAGE, "conda prefix '%s' must be an absolute path", prefix);
		goto out;
	}
	/* The interpreter version for noarch: python (from the lock's python). */
	for (size_t i = 0; i < n; i++)
		if (strcmp(pkgs[i].name, "python") == 0) {
			const char *v = pkgs[i].version, *d1 = strchr(v, '.');
			const char *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
			res->python_version = d2 ? xstrndup(v, (size_t)(d2 - v)) : xstrdup(v);
		}
	if ((rc = extract_all(c, pkgs_dir, pkgs, files, n, ahead, dirs, res, why)) != 0)
		goto out;
	if ((rc = stage_open(host, stage_in, &stage, why)) != 0)
		goto out;
	struct linker L = {
	    .c = c, .prefix = prefix, .stage = stage, .pyver = res->python_version, .res = res};
	for (size_t i = 0; i < n; i++) {
		if (tf_interrupted) {
			rc = why_fail(why, TF_EINTR, "interrupted");
			goto out;
		}
		dlog(c, "conda: linking %s-%s-%s", pkgs[i].name, pkgs[i].version, pkgs[i].build);
		rc = link_package(&L, &pkgs[i], dirs[i], files[i], pkgs_dir, why);
		if (rc)
			goto out;
	}
	rc = write_history(&L, host, pkgs, n, why);
	/* With the caller's stage the caller places it (txn_replace_dir; its commit syncs). */
	if (rc == 0 && stage_in == NULL)
		rc = stage_swap_in(stage, host, why);
	if (rc == 0) {
		free(stage);
		stage = NULL;
	}
out:
	if (stage) {
		fs_rmtree(stage);
		free(stage);
	}
	if (rc) {
		for (size_t i = 0; i < res->n; i++)
			free(res->files[i].path);
		res->n = 0;
	}
	for (size_t i = 0; i < n; i++)
		free(dirs[i]);
	free(dirs);
	free(host);
	return rc;
}
