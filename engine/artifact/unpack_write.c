/*
 * unpack_write.c - the writer, on the caller's thread: pops what a decoder
 * pushed (unpack.c's queue), checks every name and link target
 * (invariants 1-3 of unpack.c), creates each entry beneath dest with
 * O_NOFOLLOW / O_EXCL on the way and within the unpack's budget, and checks
 * every symlink again at the end with openat2(RESOLVE_BENEATH).
 */
#include "unpack_int.h"
#include "artifact_int.h"
#include "fs.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "util.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <linux/openat2.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zip.h>

/* glibc before 2.32 (the portable build's Debian 11) has no SYS_openat2;
 * the kernel headers have its number. */
#ifndef SYS_openat2
#define SYS_openat2 __NR_openat2
#endif

/* ---- path checks ---- */

int has_control(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return 1;
	return 0;
}

/*
 * Splits a relative archive name into clean components (no "", no ".").
 * Returns NULL and TF_EUNSAFE with a reason in why for an unsafe name.
 */
static char **split_name(const char *name, size_t *n, struct why *why)
{
	if (has_control(name)) {
		why_fail(why, TF_EUNSAFE, "control character in name");
		return NULL;
	}
	if (name[0] == '/') {
		why_fail(why, TF_EUNSAFE, "absolute path");
		return NULL;
	}
	char **v = NULL;
	size_t cnt = 0;
	const char *p = name;
	while (*p) {
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			for (size_t i = 0; i < cnt; i++)
				free(v[i]);
			free(v);
			why_fail(why, TF_EUNSAFE, "'..' component");
			return NULL;
		}
		if (len > 0 && !(len == 1 && p[0] == '.')) {
			v = xrealloc(v, (cnt + 1) * sizeof(*v));
			v[cnt++] = xstrndup(p, len);
		}
		p += len;
		while (*p == '/')
			p++;
	}
	*n = cnt;
	if (v == NULL)
		v = xcalloc(1, sizeof(*v));
	return v;
}

static void free_comps(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static char *join_comps(char **v, size_t from, size_t to)
{
	struct strbuf sb = STRBUF_INIT;
	for (size_t i = from; i < to; i++) {
		if (i > from)
			strbuf_add(&sb, "/", 1);
		strbuf_adds(&sb, v[i]);
	}
	return strbuf_detach(&sb);
}

/* Whether a relative symlink target, seen from the link's directory, stays inside. */
static int link_target_inside(const char *path, const char *target)
{
	long depth = 0;
	for (const char *p = path; *p; p++)
		if (*p == '/')
			depth++;
	const char *p = target;
	while (*p) {
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			if (depth == 0)
				return 0;
			depth--;
		} else if (len > 0 && !(len == 1 && p[0] == '.')) {
			depth++;
		}
		p += len;
		while (*p == '/')
			p++;
	}
	return 1;
}

/* ---- writer (caller thread) ---- */

void w_fail(struct writer *w, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	why_vfirst_of(&w->why, w->archive, err, fmt, ap);
	va_end(ap);
}

/* Names go into terminal messages: control characters are shown escaped. */
char *escape_name(const char *s)
{
	struct strbuf sb = STRBUF_INIT;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			strbuf_addf(&sb, "\\x%02x", *p);
		else
			strbuf_add(&sb, p, 1);
	}
	return strbuf_detach(&sb);
}

void w_unsafe(struct writer *w, const char *entry, const char *why)
{
	char *e = escape_name(entry);
	w_fail(w, TF_EUNSAFE, "refusing unsafe entry '%s': %s", e, why);
	free(e);
}

void drop_parent(struct writer *w)
{
	if (w->parent_fd >= 0 && w->parent_fd != w->destfd)
		close(w->parent_fd);
	w->parent_fd = -1;
	free(w->parent);
	w->parent = NULL;
}

/*
 * Opens the directory made of comps[0..n) under dest, one component at a
 * time with O_NOFOLLOW; creates missing ones when `create`. Returns an fd
 * (borrowed: valid until the next call) or w->why.code (< 0) with w->why.code set.
 */
static int open_dir(struct writer *w, char **comps, size_t n, int create, const char *entry)
{
	char *rel = join_comps(comps, 0, n);
	if (w->parent && strcmp(rel, w->parent) == 0) {
		free(rel);
		return w->parent_fd;
	}
	drop_parent(w);
	int fd = w->destfd;
	for (size_t i = 0; i < n; i++) {
		int nfd = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, comps[i], 0755) < 0 && errno != EEXIST) {
				w_fail(w, tf_err_from_errno(-errno),
				       "cannot create directory for '%s': %s", entry,
				       strerror(errno));
				goto fail;
			}
			nfd = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (nfd < 0) {
			int e = errno;
			struct stat st;
			if ((e == ELOOP || e == ENOTDIR) &&
			    fstatat(fd, comps[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode))
				w_unsafe(w, entry, "it would write through a symlink");
			else if (e == ENOTDIR)
				w_unsafe(w, entry, "a parent component is not a directory");
			else
				w_fail(w, tf_err_from_errno(-e),
				       "cannot open directory for '%s': %s", entry, strerror(e));
			goto fail;
		}
		if (fd != w->destfd)
			close(fd);
		fd = nfd;
	}
	w->parent = rel;
	w->parent_fd = fd;
	return fd;
fail:
	if (fd != w->destfd)
		close(fd);
	free(rel);
	return w->why.code;
}

static struct unpack_entry *add_result(struct writer *w, const char *path, int type,
                                       const char *link, unsigned mode, int64_t size)
{
	struct unpack_result *r = w->res;
	if (r->n == w->cap) {
		w->cap = w->cap ? w->cap * 2 : 256;
		r->v = xrealloc(r->v, w->cap * sizeof(*r->v));
	}
	struct unpack_entry *e = &r->v[r->n++];
	memset(e, 0, sizeof(*e));
	e->path = xstrdup(path);
	e->type = type;
	e->link = link ? xstrdup(link) : NULL;
	e->mode = mode;
	e->size = size;
	return e;
}

/*
 * Removes a non-directory leaf so a later archive entry can replace it (tar
 * semantics). 0, a TF_E* set in w->why.code, or -errno when fstatat failed.
 */
static int clear_leaf(struct writer *w, int pfd, const char *base, const char *entry)
{
	struct stat st;
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode)) {
		w_fail(w, TF_EUNSAFE, "refusing entry '%s': it would replace a directory", entry);
		return TF_EUNSAFE;
	}
	if (unlinkat(pfd, base, 0) < 0) {
		w_fail(w, TF_EIO, "cannot replace '%s': %s", entry, strerror(errno));
		return TF_EIO;
	}
	return 0;
}

/*
 * Bytes not verified yet are decoded on a budget: `len` more bytes must fit
 * in it, and the download being followed must not have failed. Otherwise the
 * unpack stops now (the queue is aborted, so the decoder stops too) instead
 * of decoding what is already known to be useless or hostile.
 */
int over_budget(struct writer *w, struct queue *q, size_t len)
{
	uint64_t done = w->shared ? __atomic_load_n(w->shared, __ATOMIC_RELAXED) : w->res->bytes;
	if (w->follow && w->follow->failed && __atomic_load_n(w->follow->failed, __ATOMIC_ACQUIRE))
		w_fail(w, TF_EFAIL, "the download failed; decoding stopped");
	else if (w->pinned && done + len > w->budget)
		w_fail(w, TF_EINTEGRITY,
		       "unpacks to more than its recorded unpacked_size of %llu bytes; decoding "
		       "stopped",
		       (unsigned long long)w->budget);
	else if (w->budget && done + len > w->budget)
		w_fail(w, TF_EFAIL,
		       "more than %llu bytes (%dx its size) before its download was verified; "
		       "decoding stopped",
		       (unsigned long long)w->budget, UNPACK_RATIO);
	else if (w->bound && done + len > w->bound)
		w_fail(w, TF_EINTEGRITY,
		       "unpacks to more than %llu bytes, %dx its %lld bytes (no real archive "
		       "expands that far: a decompression bomb); decoding stopped, nothing placed",
		       (unsigned long long)w->bound, UNPACK_BOMB_RATIO, (long long)w->archive_size);
	else
		return 0;
	queue_abort(q);
	return 1;
}

/* Writes one regular file; consumes its DATA messages through FILE_END. */
static void write_file(struct writer *w, struct queue *q, int pfd, const char *base,
                       const char *rel, struct raw_entry *e)
{
	unsigned mode = e->perm & 0777;
	if (mode == 0)
		mode = 0644; /* zip from Windows: no Unix mode at all */
	int fd = -1;
	struct sha256 sha;
	uint64_t total = 0;
	char given[65] = "";
	sha256_init(&sha);
	if (!w->why.code) {
		fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno == EEXIST && clear_leaf(w, pfd, base, rel) == 0)
			fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			            0600);
		if (fd < 0)
			w_fail(w, tf_err_from_errno(-errno), "cannot create '%s': %s", rel,
			       strerror(errno));
	}
	for (;;) {
		struct msg m = queue_pop(q);
		if (m.kind == M_DATA) {
			if (over_budget(w, q, m.len)) {
				buf_give(q, m.buf);
				break;
			}
			if (fd >= 0 && !w->why.code) {
				if (!e->decoder_hashes)
					sha256_update(&sha, m.buf, m.len);
				int werr = fs_write_all(fd, m.buf, m.len);
				if (werr != 0)
					w_fail(w, tf_err_from_errno(werr), "cannot write '%s': %s",
					       rel, strerror(-werr));
				total += m.len;
				w->res->bytes += m.len;
				if (w->shared)
					__atomic_add_fetch(w->shared, m.len, __ATOMIC_RELAXED);
			}
			buf_give(q, m.buf);
			continue;
		}
		if (m.kind == M_FILE_END) {
			memcpy(given, m.sha256, sizeof(given));
			break;
		}
		/* ERROR mid-file (truncated archive): report it and stop. */
		if (m.kind == M_ERROR)
			w_fail(w, w->corrupt, "%s (in '%s')", m.err, rel);
		else
			w_fail(w, w->corrupt, "archive ended inside '%s'", rel);
		free(m.err);
		raw_entry_free(m.e);
		break;
	}
	if (fd >= 0) {
		if (!w->why.code && fchmod(fd, mode) < 0)
			w_fail(w, TF_EIO, "cannot chmod '%s': %s", rel, strerror(errno));
		if (!w->why.code && e->has_mtime) {
			struct timespec ts[2] = {e->mtime, e->mtime};
			futimens(fd, ts);
		}
		if (close(fd) < 0)
			w_fail(w, tf_err_from_errno(-errno), "cannot write '%s': %s", rel,
			       strerror(errno));
	}
	if (w->why.code) {
		sha256_release(&sha);
		return;
	}
	struct unpack_entry *r = add_result(w, rel, 'f', NULL, mode, (int64_t)total);
	if (given[0]) {
		memcpy(r->sha256, given, sizeof(given));
		sha256_release(&sha);
	} else {
		sha256_final(&sha, r->sha256);
	}
	if (w->on_file)
		w->on_file(w->on_file_arg, r);
}

/*
 * Skips the data of a file entry that is not written. The decoder may end
 * (EOF) or fail (ERROR) inside it: that ends the unpack too, or the main loop
 * would wait for a message that never comes (found by fuzz_unpack).
 */
static void drain_file(struct writer *w, struct queue *q)
{
	for (;;) {
		struct msg m = queue_pop(q);
		buf_give(q, m.buf);
		raw_entry_free(m.e);
		if (m.kind == M_ERROR)
			w_fail(w, w->corrupt, "%s", m.err);
		else if (m.kind == M_EOF || m.kind == M_ENTRY)
			w_fail(w, w->corrupt, "archive ended inside an entry");
		free(m.err);
		if (m.kind != M_DATA)
			return;
	}
}

/* A hard link entry rel (components comps[0..n)) to an earlier entry of the archive. */
static void put_hard_link(struct writer *w, const struct raw_entry *e, char **comps, size_t n,
                          const char *rel)
{
	struct why why = {0};
	size_t ln = 0;
	char **lcomps = split_name(e->link ? e->link : "", &ln, &why);
	char *lrel = NULL;
	if (lcomps == NULL) {
		why_prefix(&why, "hard link target");
		w_unsafe(w, e->path, why_text(&why));
		why_clear(&why);
		goto out;
	}
	if (ln <= (size_t)w->strip) {
		w_unsafe(w, e->path, "hard link target outside the destination");
		goto out;
	}
	lrel = join_comps(lcomps, (size_t)w->strip, ln);
	int sfd = open_dir(w, lcomps + w->strip, ln - (size_t)w->strip - 1, 0, e->path);
	if (sfd < 0)
		goto out;
	int sdup = dup(sfd);
	int pfd = open_dir(w, comps + w->strip, n - (size_t)w->strip - 1, 1, e->path);
	if (pfd >= 0) {
		const char *base = comps[n - 1];
		if (clear_leaf(w, pfd, base, rel) == 0 &&
		    linkat(sdup, lcomps[ln - 1], pfd, base, 0) < 0)
			w_fail(w, errno == ENOENT ? TF_EIO : tf_err_from_errno(-errno),
			       "cannot hard link '%s' to '%s': %s", rel, lrel, strerror(errno));
	}
	close(sdup);
	if (w->why.code)
		goto out;
	/* The link shares the data of an earlier entry: copy its record. */
	struct unpack_entry *src = NULL;
	for (size_t i = w->res->n; i-- > 0;)
		if (strcmp(w->res->v[i].path, lrel) == 0) {
			src = &w->res->v[i];
			break;
		}
	struct unpack_entry *r =
	    add_result(w, rel, 'h', lrel, src ? src->mode : 0, src ? src->size : 0);
	if (src)
		memcpy(r->sha256, src->sha256, sizeof(r->sha256));
out:
	free_comps(lcomps, ln);
	free(lrel);
}

/* A directory entry `base` in the directory pfd (rel: its path). */
static void put_dir(struct writer *w, int pfd, const char *base, const char *rel,
                    const struct raw_entry *e)
{
	struct stat st;
	if (mkdirat(pfd, base, 0755) < 0 && errno != EEXIST) {
		w_fail(w, tf_err_from_errno(-errno), "cannot create directory '%s': %s", rel,
		       strerror(errno));
		return;
	}
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
		w_unsafe(w, e->path, "a directory entry over an existing non-directory");
		return;
	}
	/* Applied at the end so restrictive modes never block our own writes. */
	add_result(w, rel, 'd', NULL, (e->perm & 0777) | 0700, 0);
}

/* A symlink entry `base` in the directory pfd, its target checked lexically first. */
static void put_symlink(struct writer *w, int pfd, const char *base, const char *rel,
                        const struct raw_entry *e)
{
	const char *t = e->link ? e->link : "";
	if (has_control(t)) {
		w_unsafe(w, e->path, "control character in symlink target");
		return;
	}
	if (t[0] == '/' || t[0] == '\0' || !link_target_inside(rel, t)) {
		w_unsafe(w, e->path, "symlink target leaves the destination");
		return;
	}
	if (clear_leaf(w, pfd, base, rel) < 0)
		return;
	if (symlinkat(t, pfd, base) < 0) {
		w_fail(w, tf_err_from_errno(-errno), "cannot create symlink '%s': %s", rel,
		       strerror(errno));
		return;
	}
	strvec_push(&w->symlinks, rel);
	add_result(w, rel, 'l', t, 0777, 0);
}

void handle_entry(struct writer *w, struct queue *q, struct raw_entry *e)
{
	struct why why = {0};
	size_t n = 0;
	char *rel = NULL;
	int is_file = e->type == AE_IFREG && !e->hard;
	int consumed = 0;
	char **comps = split_name(e->path, &n, &why);
	if (comps == NULL) {
		w_unsafe(w, e->path, why_text(&why));
		why_clear(&why);
		goto out;
	}
	if (!e->hard && e->type != AE_IFREG && e->type != AE_IFDIR && e->type != AE_IFLNK) {
		w_unsafe(w, e->path,
		         e->type == AE_IFIFO    ? "FIFO"
		         : e->type == AE_IFSOCK ? "socket"
		                                : "device node");
		goto out;
	}
	if (n <= (size_t)w->strip)
		goto out; /* stripped away entirely, like tar --strip-components */
	rel = join_comps(comps, (size_t)w->strip, n);
	if (e->hard) {
		put_hard_link(w, e, comps, n, rel);
		goto out;
	}
	int pfd = open_dir(w, comps + w->strip, n - (size_t)w->strip - 1, 1, e->path);
	if (pfd < 0)
		goto out;
	const char *base = comps[n - 1];
	if (e->type == AE_IFREG) {
		consumed = 1;
		write_file(w, q, pfd, base, rel, e);
	} else if (e->type == AE_IFDIR) {
		put_dir(w, pfd, base, rel, e);
	} else if (e->type == AE_IFLNK) {
		put_symlink(w, pfd, base, rel, e);
	}
out:
	if (is_file && !consumed)
		drain_file(w, q);
	free_comps(comps, n);
	free(rel);
}

/* Resolves every symlink with RESOLVE_BENEATH: chains may escape where single links do not. */
void check_symlinks(struct writer *w)
{
	for (size_t i = 0; i < w->symlinks.n && !w->why.code; i++) {
		struct open_how how = {.flags = O_PATH | O_CLOEXEC,
		                       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
		long fd = syscall(SYS_openat2, w->destfd, w->symlinks.v[i], &how, sizeof(how));
		if (fd >= 0) {
			close((int)fd);
			continue;
		}
		if (errno == ENOSYS)
			return; /* old kernel: the lexical check at creation stands alone */
		if (errno == EXDEV || errno == ELOOP)
			w_unsafe(w, w->symlinks.v[i],
			         "symlink chain resolves outside the destination");
	}
}

void finish_dirs(struct writer *w)
{
	/* Deepest (latest created) first, so a read-only parent is set last. */
	for (size_t i = w->res->n; i-- > 0;) {
		struct unpack_entry *e = &w->res->v[i];
		if (e->type == 'd' && e->mode != 0755)
			fchmodat(w->destfd, e->path, e->mode, AT_SYMLINK_NOFOLLOW);
	}
}

void maybe_progress(struct writer *w, struct queue *q, int force)
{
	uint64_t t = now_ns();
	if (!force && t - w->last_progress < PROGRESS_INTERVAL_NS)
		return;
	w->last_progress = t;
	uint64_t done = __atomic_load_n(&q->in_bytes, __ATOMIC_RELAXED);
	uint64_t total = w->archive_size > 0 ? (uint64_t)w->archive_size : 0;
	if (force || done > total)
		done = total; /* never more done than the whole */
	ev_progress(w->c, "unpack", w->label, done, total);
}
