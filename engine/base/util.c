/*
 * util.c - allocation wrappers that abort on OOM, string buffers and path
 * helpers. Nothing here knows about manifests, state or the network.
 */

#include "util.h"
#include "error.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n)
{
	tf_fatal("tfprov: out of memory allocating %zu bytes", n);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (p == NULL)
		oom(n);
	return p;
}

void *xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
	if (p == NULL)
		oom(nmemb * size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (q == NULL)
		oom(n);
	return q;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *xvasprintf(const char *fmt, va_list ap)
{
	char *p = NULL;
	if (vasprintf(&p, fmt, ap) < 0)
		oom(0);
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *p = xvasprintf(fmt, ap);
	va_end(ap);
	return p;
}

static void strbuf_grow(struct strbuf *sb, size_t extra)
{
	if (sb->len + extra + 1 <= sb->cap)
		return;
	size_t cap = sb->cap ? sb->cap : 64;
	while (cap < sb->len + extra + 1)
		cap *= 2;
	sb->buf = xrealloc(sb->buf, cap);
	sb->cap = cap;
}

void strbuf_add(struct strbuf *sb, const void *data, size_t n)
{
	strbuf_grow(sb, n);
	memcpy(sb->buf + sb->len, data, n);
	sb->len += n;
	sb->buf[sb->len] = '\0';
}

void strbuf_adds(struct strbuf *sb, const char *s)
{
	strbuf_add(sb, s, strlen(s));
}

void strbuf_addf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *p = xvasprintf(fmt, ap);
	va_end(ap);
	strbuf_adds(sb, p);
	free(p);
}

void strbuf_reset(struct strbuf *sb)
{
	sb->len = 0;
	if (sb->buf)
		sb->buf[0] = '\0';
}

char *strbuf_detach(struct strbuf *sb)
{
	char *p = sb->buf ? sb->buf : xstrdup("");
	sb->buf = NULL;
	sb->len = sb->cap = 0;
	return p;
}

void strbuf_release(struct strbuf *sb)
{
	free(sb->buf);
	sb->buf = NULL;
	sb->len = sb->cap = 0;
}

void strvec_push(struct strvec *sv, const char *s)
{
	if (sv->n + 2 > sv->cap) {
		sv->cap = sv->cap ? sv->cap * 2 : 8;
		sv->v = xrealloc(sv->v, sv->cap * sizeof(*sv->v));
	}
	sv->v[sv->n++] = xstrdup(s);
	sv->v[sv->n] = NULL;
}

void strvec_pushf(struct strvec *sv, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *p = xvasprintf(fmt, ap);
	va_end(ap);
	strvec_push(sv, p);
	free(p);
}

void strvec_release(struct strvec *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
	sv->v = NULL;
	sv->n = sv->cap = 0;
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void strvec_sort(struct strvec *sv)
{
	if (sv->n > 1)
		qsort(sv->v, sv->n, sizeof(*sv->v), cmp_strp);
}

int strvec_has(const struct strvec *sv, const char *s)
{
	return sv->n && bsearch(&s, sv->v, sv->n, sizeof(*sv->v), cmp_strp) != NULL;
}

int str_starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

int str_ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

int is_hex64(const char *s)
{
	size_t i;
	for (i = 0; s[i]; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	return i == 64;
}

void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

char *path_join(const char *a, const char *b)
{
	size_t la = strlen(a);
	while (la > 1 && a[la - 1] == '/')
		la--;
	while (*b == '/')
		b++;
	if (la == 0)
		return xstrdup(b);
	if (la == 1 && a[0] == '/')
		return xasprintf("/%s", b);
	return xasprintf("%.*s/%s", (int)la, a, b);
}

int mkdirs_at(int dirfd, const char *path, unsigned mode)
{
	char *p = xstrdup(path);
	int rc = 0;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char saved = *s;
		*s = '\0';
		if (mkdirat(dirfd, p, mode) != 0 && errno != EEXIST) {
			rc = -errno;
			goto out;
		}
		*s = saved;
		if (saved == '\0')
			break;
	}
out:
	free(p);
	return rc;
}

int read_file_at(int dirfd, const char *path, size_t max, char **out, size_t *outlen)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = read_fd(fd, max, out, outlen);
	close(fd);
	return rc;
}

int read_fd(int fd, size_t max, char **out, size_t *outlen)
{
	int rc = 0;
	struct strbuf sb = STRBUF_INIT;
	char buf[65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		if (sb.len + (size_t)n > max) {
			rc = -EFBIG;
			goto out;
		}
		strbuf_add(&sb, buf, (size_t)n);
	}
	*outlen = sb.len;
	*out = strbuf_detach(&sb);
out:
	if (rc)
		strbuf_release(&sb);
	return rc;
}

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t now_unix(void)
{
	return (int64_t)time(NULL);
}

size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t *row = xcalloc(lb + 1, sizeof(*row));
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t prev = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t cur = row[j];
			size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
			size_t best = prev + cost;
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			prev = cur;
		}
	}
	size_t d = row[lb];
	free(row);
	return d;
}

char *pip_normalize_name(const char *name)
{
	struct strbuf sb = STRBUF_INIT;
	int sep = 0;
	for (const char *p = name; *p; p++) {
		if (*p == '-' || *p == '_' || *p == '.') {
			sep = 1;
			continue;
		}
		if (sep && sb.len)
			strbuf_add(&sb, "-", 1);
		sep = 0;
		char ch = (char)tolower((unsigned char)*p);
		strbuf_add(&sb, &ch, 1);
	}
	return strbuf_detach(&sb);
}
