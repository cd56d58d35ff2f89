/*
 * util.h - memory, strings and small helpers shared by every part of tfprov.
 *
 * OOM policy: every allocation goes through xmalloc/xcalloc/xrealloc/xstrdup,
 * which abort with a message when memory runs out (FreeBSD pkg's policy).
 * Callers therefore never check for NULL from these.
 *
 * struct strbuf is a growable NUL-terminated byte buffer; the caller owns it
 * and releases it with strbuf_release().
 */
#ifndef TFPROV_UTIL_H
#define TFPROV_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

struct strbuf {
	char *buf;
	size_t len;
	size_t cap;
};

#define STRBUF_INIT                                                                                \
	{                                                                                          \
		NULL, 0, 0                                                                         \
	}
void strbuf_add(struct strbuf *sb, const void *data, size_t n);
void strbuf_adds(struct strbuf *sb, const char *s);
void strbuf_addf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_reset(struct strbuf *sb);
/* Returns the buffer (never NULL) and leaves sb empty; caller frees. */
char *strbuf_detach(struct strbuf *sb);
void strbuf_release(struct strbuf *sb);

/* A growable array of owned strings. */
struct strvec {
	char **v;
	size_t n;
	size_t cap;
};
#define STRVEC_INIT                                                                                \
	{                                                                                          \
		NULL, 0, 0                                                                         \
	}
void strvec_push(struct strvec *sv, const char *s);
void strvec_pushf(struct strvec *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strvec_release(struct strvec *sv);
/* Sorts sv by strcmp, for strvec_has: a set of thousands looked up thousands of times. */
void strvec_sort(struct strvec *sv);
/* Whether sorted sv holds s (binary search). */
int strvec_has(const struct strvec *sv, const char *s);

int str_starts_with(const char *s, const char *prefix);
int str_ends_with(const char *s, const char *suffix);
int is_hex64(const char *s);
void hex_encode(const unsigned char *in, size_t n, char *out /* 2n+1 */);

/* Counts in English: plural(1, "path", "paths") is "path"; plural_s(n) the bare "s". */
static inline const char *plural(long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}
static inline const char *plural_s(long long n)
{
	return plural(n, "", "s");
}

/* Joins a and b with exactly one '/'; caller frees. */
char *path_join(const char *a, const char *b);
/* mkdir -p relative to dirfd (AT_FDCWD allowed). 0 or -errno. */
int mkdirs_at(int dirfd, const char *path, unsigned mode);
/* Reads a whole small file (refuses > max bytes with -EFBIG). 0 or -errno. */
int read_file_at(int dirfd, const char *path, size_t max, char **out, size_t *outlen);
/* The same from an open descriptor (not closed). */
int read_fd(int fd, size_t max, char **out, size_t *outlen);

/* Monotonic clock in nanoseconds. */
uint64_t now_ns(void);
/* Wall clock, seconds since the epoch. */
int64_t now_unix(void);
/* Levenshtein distance for did-you-mean hints. */
size_t edit_distance(const char *a, const char *b);

/* PEP 503 normalisation: lowercase, runs of -_. become '-'; caller frees.
 * The one normaliser of Python package names (wheel, pip, lock, mirror). */
char *pip_normalize_name(const char *name);

#endif
