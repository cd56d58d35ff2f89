/*
 * cache.c - paths and moves of the content-addressed cache and of mirror dirs.
 *
 * Every move into sha256/ is a rename within one filesystem (partial/ and
 * sha256/ are siblings), so a crash leaves either the old state or the new,
 * never a half-written final file. Quarantined files keep a timestamp suffix
 * so repeated failures of one artifact never overwrite the evidence.
 */
#include "artifact.h"
#include "artifact_int.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "fs.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * The cache holds unverified and quarantined bytes, possibly copies of
 * root-only files: its directories are the owner's alone (0700, also when
 * an older tfprov made them 0755), and a symlink in place of one is refused.
 */
int cache_init(const char *dir, struct why *why)
{
	static const char *const subs[] = {"", "sha256", "partial", "quarantine"};
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
		char *p = subs[i][0] ? path_join(dir, subs[i]) : xstrdup(dir);
		struct stat st;
		int r = mkdirs_at(AT_FDCWD, p, 0700);
		if (r == 0 && (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)))
			r = -ENOTDIR;
		if (r == 0 && (st.st_mode & 0077) && chmod(p, 0700) != 0)
			r = -errno;
		if (r < 0) {
			why_fail(why, TF_EIO, "cannot use cache directory %s: %s", p,
			         r == -ENOTDIR ? "not a directory (a symlink?)" : strerror(-r));
			free(p);
			return TF_EIO;
		}
		free(p);
	}
	return 0;
}

char *cache_final_path(const char *dir, const char *sha256)
{
	return xasprintf("%s/sha256/%s", dir, sha256);
}

char *cache_part_path(const char *dir, const char *sha256)
{
	return xasprintf("%s/partial/%s.part", dir, sha256);
}

char *cache_lookup_dir(const char *dir, const char *sha256)
{
	struct stat st;
	if (dir == NULL || !is_hex64(sha256))
		return NULL;
	char *p = cache_final_path(dir, sha256);
	if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
		return p;
	free(p);
	return NULL;
}

char *cache_lookup(struct ctx *c, const char *sha256)
{
	return cache_lookup_dir(c->cache_dir, sha256);
}

int cache_commit(const char *dir, const char *sha256, const char *tmp, char **out)
{
	char *final = cache_final_path(dir, sha256);
	int ret = 0;
	if (chmod(tmp, 0444) < 0 || rename(tmp, final) < 0) {
		ret = -errno;
		free(final);
		return ret;
	}
	if (out)
		*out = final;
	else
		free(final);
	return 0;
}

/*
 * The cache files this process hashed itself: committed after their bytes
 * hashed right on the way in, or re-hashed at a lookup. A cache hit is
 * re-hashed before use (fetch.c) because a power cut can leave a name whose
 * bytes never reached the disk and because the cache may be changed behind
 * tfprov's back; neither can happen unseen within one process's life: a
 * power cut ends the process too, and a write, truncate, chmod or
 * replacement of the file moves its inode or its ctime, which no caller can
 * set. So a file seen here, unchanged in all of (dev, ino, size, mtime,
 * ctime), is not hashed a second time: the step that takes an archive
 * prefetch downloaded and hashed a moment before no longer reads it again.
 */
struct seen {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim, ctim;
	char sha256[65];
};

static struct {
	pthread_mutex_t mu;
	struct seen *v;
	size_t n, cap;
} hashed = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int seen_is(const struct seen *s, const struct stat *st, const char *sha256)
{
	return s->dev == st->st_dev && s->ino == st->st_ino && s->size == st->st_size &&
	       s->mtim.tv_sec == st->st_mtim.tv_sec && s->mtim.tv_nsec == st->st_mtim.tv_nsec &&
	       s->ctim.tv_sec == st->st_ctim.tv_sec && s->ctim.tv_nsec == st->st_ctim.tv_nsec &&
	       strcmp(s->sha256, sha256) == 0;
}

void cache_note_hashed(const char *path, const char *sha256)
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || !is_hex64(sha256))
		return;
	pthread_mutex_lock(&hashed.mu);
	size_t i = 0;
	while (i < hashed.n && !(hashed.v[i].dev == st.st_dev && hashed.v[i].ino == st.st_ino))
		i++;
	if (i == hashed.n) {
		if (hashed.n == hashed.cap) {
			hashed.cap = hashed.cap ? 2 * hashed.cap : 16;
			hashed.v = xrealloc(hashed.v, hashed.cap * sizeof(*hashed.v));
		}
		hashed.n++;
	}
	hashed.v[i] = (struct seen){.dev = st.st_dev,
	                            .ino = st.st_ino,
	                            .size = st.st_size,
	                            .mtim = st.st_mtim,
	                            .ctim = st.st_ctim};
	snprintf(hashed.v[i].sha256, sizeof(hashed.v[i].sha256), "%s", sha256);
	pthread_mutex_unlock(&hashed.mu);
}

int cache_was_hashed(const char *path, const char *sha256, int64_t *size)
{
	struct stat st;
	int yes = 0;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	pthread_mutex_lock(&hashed.mu);
	for (size_t i = 0; i < hashed.n && !yes; i++)
		yes = seen_is(&hashed.v[i], &st, sha256);
	pthread_mutex_unlock(&hashed.mu);
	if (yes && size)
		*size = (int64_t)st.st_size;
	return yes;
}

char *cache_name_path(const char *dir, const char *sha256)
{
	return xasprintf("%s/names/%s", dir, sha256);
}

void cache_name_hint(const char *dir, const char *sha256, const char *url)
{
	char *base = url ? url_basename(url) : NULL;
	if (base == NULL || base[0] == '\0' || base[0] == '.' || strpbrk(base, "/\n\r") != NULL) {
		free(base);
		return;
	}
	char *names = path_join(dir, "names"), *p = cache_name_path(dir, sha256);
	char *text = xasprintf("%s\n", base);
	/* Never over a name already there (pip's hint carries more: its index). */
	if (mkdirs_at(AT_FDCWD, names, 0700) == 0)
		(void)fs_write_atomic(p, text, strlen(text), 0600, FS_NO_REPLACE);
	free(text);
	free(p);
	free(names);
	free(base);
}

int cache_sweep_temps(const char *dir)
{
	char *names = path_join(dir, "names");
	DIR *d = opendir(names);
	struct dirent *e;
	int n = 0;

	while (d != NULL && (e = readdir(d)) != NULL) {
		const char *t = strstr(e->d_name, ".tfprov-tmp.");
		char *end = NULL;
		long pid;

		if (t == NULL)
			continue;
		errno = 0;
		pid = strtol(t + strlen(".tfprov-tmp."), &end, 10);
		if (errno != 0 || end == NULL || *end != '\0' || pid <= 0 ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue; /* its writer may still run */
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	}
	if (d != NULL)
		closedir(d);
	free(names);
	return n;
}

char *cache_name_of(const char *dir, const char *sha256)
{
	char *p = cache_name_path(dir, sha256), *text = NULL;
	size_t len = 0;
	int r = read_file_at(AT_FDCWD, p, 8192, &text, &len);
	free(p);
	if (r != 0)
		return NULL;
	size_t n = strcspn(text, "\n");
	char *name = n && text[n] == '\n' ? xstrndup(text, n) : NULL;
	free(text);
	return name;
}

int cache_quarantine(const char *dir, const char *sha256, const char *bad, char **out)
{
	char *q = xasprintf("%s/quarantine/%s.%lld", dir, sha256, (long long)now_unix());
	/* Keep every failure: add a counter when one already landed this second. */
	for (int i = 1; access(q, F_OK) == 0 && i < 1000; i++) {
		free(q);
		q = xasprintf("%s/quarantine/%s.%lld.%d", dir, sha256, (long long)now_unix(), i);
	}
	if (rename(bad, q) < 0) {
		int e = -errno;
		free(q);
		return e;
	}
	chmod(q, 0400); /* the bytes may be a root-only file's: the owner's alone */
	if (out)
		*out = q;
	else
		free(q);
	return 0;
}

char *url_basename(const char *url)
{
	size_t end = strcspn(url, "?#");
	while (end > 0 && url[end - 1] == '/')
		end--;
	size_t start = end;
	while (start > 0 && url[start - 1] != '/')
		start--;
	if (start == end)
		return xstrdup("download");
	return xstrndup(url + start, end - start);
}

int url_is_remote(const char *url)
{
	return str_starts_with(url, "http://") || str_starts_with(url, "https://");
}

char *url_local_path(const char *url)
{
	if (url_is_remote(url))
		return NULL;
	if (str_starts_with(url, "file://")) {
		const char *p = url + 7;
		/* file://localhost/x and file:///x only: another host is not local. */
		if (str_starts_with(p, "localhost/"))
			p += 9;
		if (p[0] != '/')
			return NULL;
		/* Undo %XX escapes so file:// URLs of names with spaces work. */
		struct strbuf sb = STRBUF_INIT;
		for (; *p; p++) {
			unsigned v;
			if (p[0] == '%' && p[1] && p[2] && sscanf(p + 1, "%2x", &v) == 1) {
				char ch = (char)v;
				strbuf_add(&sb, &ch, 1);
				p += 2;
			} else {
				strbuf_add(&sb, p, 1);
			}
		}
		return strbuf_detach(&sb);
	}
	if (strstr(url, "://") != NULL)
		return NULL;
	return xstrdup(url);
}

char *url_host(const char *url)
{
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	const char *at = NULL;
	size_t n = strcspn(p, "/?#");
	/* Drop user:password@ so credentials never appear in messages. */
	for (size_t i = 0; i < n; i++)
		if (p[i] == '@')
			at = p + i;
	if (at) {
		n -= (size_t)(at + 1 - p);
		p = at + 1;
	}
	return xstrndup(p, n);
}

char *mirror_dir_lookup(const char *dir, const char *sha256, const char *url)
{
	struct stat st;
	char *p = cache_final_path(dir, sha256);
	if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
		return p;
	free(p);
	if (url == NULL)
		return NULL;
	char *base = url_basename(url);
	p = path_join(dir, base);
	free(base);
	if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
		return p;
	free(p);
	return NULL;
}

static void feed_sha256(void *arg, const void *data, size_t n)
{
	sha256_update(arg, data, n);
}

int copy_file_hashing(const char *src, const char *dst, char hex[65], int64_t *size)
{
	struct sha256 s;
	uint64_t total = 0;
	sha256_init(&s);
	int rc = fs_copy(src, dst, 0644, 0, feed_sha256, &s, &total);
	if (rc < 0) {
		sha256_release(&s);
		return rc;
	}
	sha256_final(&s, hex);
	if (size)
		*size = (int64_t)total;
	return 0;
}

static int place_link_or_copy(const char *src, const char *dst)
{
	char hex[65];
	struct stat st;
	if (lstat(dst, &st) == 0)
		return 0; /* already there: mirror dirs are append-only */
	if (link(src, dst) == 0)
		return 0;
	char *tmp = xasprintf("%s.tmp.%d", dst, (int)getpid());
	int r = copy_file_hashing(src, tmp, hex, NULL);
	if (r == 0 && rename(tmp, dst) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	free(tmp);
	return r;
}

int mirror_put(const char *dir, const char *src, const char *sha256, const char *url)
{
	char *sub = path_join(dir, "sha256");
	int r = mkdirs_at(AT_FDCWD, sub, 0755);
	free(sub);
	if (r < 0)
		return r;
	char *final = cache_final_path(dir, sha256);
	r = place_link_or_copy(src, final);
	if (r == 0 && url != NULL) {
		char *base = url_basename(url);
		char *named = path_join(dir, base);
		r = place_link_or_copy(final, named);
		free(named);
		free(base);
	}
	free(final);
	return r;
}
