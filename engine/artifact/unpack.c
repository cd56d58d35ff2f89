/*
 * unpack.c - libarchive extraction split over two threads (the writer in
 * unpack_write.c, a zip's decoders in unpack_zip.c, shared in unpack_int.h).
 *
 * The decoder thread reads headers and data with libarchive and pushes
 * messages (ENTRY, DATA, FILE_END, EOF, ERROR) into a ring; the caller's
 * thread pops them, checks every entry, and creates the files. Data travels in
 * buffers from a fixed pool (UNPACK_NBUF x UNPACK_BUFSZ), so memory is bounded
 * by the pool plus libarchive's own decoder window.
 *
 * Invariants:
 *  1. Every name is checked before anything is created for it: no absolute
 *     path, no "..", no control character; after strip it is a clean relative
 *     path of components.
 *  2. Parent directories are opened one component at a time with O_NOFOLLOW,
 *     and leaves are created with O_EXCL|O_NOFOLLOW (or mkdirat/symlinkat/
 *     linkat, which never follow the last component), so no write can pass
 *     through a symlink, whatever order the archive uses.
 *  3. A symlink target is checked lexically when the link is created, and
 *     again at the end with openat2(RESOLVE_BENEATH), which catches chains of
 *     links that are each harmless alone but escape together.
 *  4. On any refusal or error the decoder is stopped, joined, and dest_dir is
 *     removed: the caller never sees a partial tree.
 *  5. Only the caller's thread emits events (the renderer is not thread-safe).
 *  6. No unpack writes more file data than its bound (unpack_bound): the
 *     declared unpacked size, else a ratio to the archive's size that no real
 *     archive reaches; the shares of one zip count against one bound. The
 *     file system must have room for the expected size before a byte is
 *     written.
 */
#include "artifact.h"
#include "artifact_int.h"
#include "unpack_int.h"
#include "unpack_pool.h"
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

static la_ssize_t follow_read(struct archive *a, void *ud, const void **out)
{
	struct follow_src *s = ud;
	for (;;) {
		if (tf_interrupted) {
			archive_set_error(a, EINTR, "interrupted");
			return ARCHIVE_FATAL;
		}
		if (__atomic_load_n(s->f->restarts, __ATOMIC_ACQUIRE) != s->restarts0) {
			archive_set_error(a, EAGAIN, "the download started over");
			return ARCHIVE_FATAL;
		}
		if (s->f->failed && __atomic_load_n(s->f->failed, __ATOMIC_ACQUIRE)) {
			archive_set_error(a, EAGAIN, "the download failed");
			return ARCHIVE_FATAL;
		}
		int done = __atomic_load_n(s->f->done, __ATOMIC_ACQUIRE);
		uint64_t avail = __atomic_load_n(s->f->bytes, __ATOMIC_ACQUIRE);
		if (s->fd < 0)
			s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
		if (s->fd >= 0 && avail > s->off) {
			claim_take(s->claim);
			claim_yield(s->claim);
			size_t want = avail - s->off < sizeof(s->buf) ? (size_t)(avail - s->off)
			                                              : sizeof(s->buf);
			ssize_t n = pread(s->fd, s->buf, want, (off_t)s->off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				archive_set_error(a, errno, "cannot read the download");
				return ARCHIVE_FATAL;
			}
			if (n > 0) {
				s->off += (uint64_t)n;
				*out = s->buf;
				return n;
			}
		}
		if (s->f->size >= 0 && s->off >= (uint64_t)s->f->size)
			return 0;
		if (done) {
			if (s->fd >= 0 && s->f->size < 0 && s->off >= avail)
				return 0;
			/* Finished short of its size, or the .part was renamed before
			 * it could be opened: the caller unpacks the final file. */
			archive_set_error(a, EAGAIN, "the download ended before the archive did");
			return ARCHIVE_FATAL;
		}
		/* Waiting for bytes holds no core: another decoder may use it. */
		claim_give(s->claim, 1);
		usleep(2000);
	}
}

/* ---- queue ---- */

static void queue_init(struct queue *q)
{
	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->can_pop, NULL);
	pthread_cond_init(&q->can_push, NULL);
	pthread_cond_init(&q->can_take, NULL);
	for (size_t i = 0; i < UNPACK_NBUF; i++)
		q->free_bufs[i] = xmalloc(UNPACK_BUFSZ);
	q->nfree = UNPACK_NBUF;
}

void raw_entry_free(struct raw_entry *e)
{
	if (e == NULL)
		return;
	free(e->path);
	free(e->link);
	free(e);
}

/* Returns -ECANCELED when the consumer aborted; the message is then freed here. */
int queue_push(struct queue *q, struct msg m)
{
	pthread_mutex_lock(&q->mu);
	while (q->count == UNPACK_RING && !q->abort)
		pthread_cond_wait(&q->can_push, &q->mu);
	if (q->abort) {
		if (m.buf)
			q->free_bufs[q->nfree++] = m.buf;
		pthread_mutex_unlock(&q->mu);
		raw_entry_free(m.e);
		free(m.err);
		return -ECANCELED;
	}
	q->ring[(q->head + q->count) % UNPACK_RING] = m;
	q->count++;
	pthread_cond_signal(&q->can_pop);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

struct msg queue_pop(struct queue *q)
{
	pthread_mutex_lock(&q->mu);
	while (q->count == 0)
		pthread_cond_wait(&q->can_pop, &q->mu);
	struct msg m = q->ring[q->head];
	q->head = (q->head + 1) % UNPACK_RING;
	q->count--;
	pthread_cond_signal(&q->can_push);
	pthread_mutex_unlock(&q->mu);
	return m;
}

char *buf_take(struct queue *q)
{
	pthread_mutex_lock(&q->mu);
	while (q->nfree == 0 && !q->abort)
		pthread_cond_wait(&q->can_take, &q->mu);
	char *b = q->abort ? NULL : q->free_bufs[--q->nfree];
	pthread_mutex_unlock(&q->mu);
	return b;
}

void buf_give(struct queue *q, char *b)
{
	if (b == NULL)
		return;
	pthread_mutex_lock(&q->mu);
	q->free_bufs[q->nfree++] = b;
	pthread_cond_signal(&q->can_take);
	pthread_mutex_unlock(&q->mu);
}

void queue_abort(struct queue *q)
{
	pthread_mutex_lock(&q->mu);
	q->abort = 1;
	pthread_cond_broadcast(&q->can_push);
	pthread_cond_broadcast(&q->can_take);
	pthread_mutex_unlock(&q->mu);
}

/* After the decoder is joined: frees whatever it left in the ring and the pool. */
static void queue_destroy(struct queue *q)
{
	while (q->count > 0) {
		struct msg m = q->ring[q->head];
		q->head = (q->head + 1) % UNPACK_RING;
		q->count--;
		if (m.buf)
			q->free_bufs[q->nfree++] = m.buf;
		raw_entry_free(m.e);
		free(m.err);
	}
	for (size_t i = 0; i < q->nfree; i++)
		free(q->free_bufs[i]);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->can_pop);
	pthread_cond_destroy(&q->can_push);
	pthread_cond_destroy(&q->can_take);
}

/* ---- decoder thread ---- */

static int push_error(struct queue *q, const char *what, struct archive *a)
{
	const char *s = a ? archive_error_string(a) : NULL;
	struct msg m = {.kind = M_ERROR,
	                .err = xasprintf("%s: %s", what, s ? s : "unknown libarchive error")};
	queue_push(q, m);
	return TF_EFAIL;
}

static void set_formats(struct archive *a)
{
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	archive_read_support_format_zip(a);
}

/*
 * The data of the current file entry of a, in buffers of the pool, then
 * M_FILE_END (with its sha256 when hash_here). 0, TF_EFAIL (error pushed) or
 * -ECANCELED (consumer aborted).
 */
static int push_file_data(struct queue *q, struct archive *a, struct archive *outer,
                          struct core_claim *claim, int hash_here)
{
	struct sha256 sha;
	if (hash_here)
		sha256_init(&sha);
	for (;;) {
		char *b = buf_take(q);
		if (b == NULL) {
			if (hash_here)
				sha256_release(&sha); /* the writer stopped */
			return -ECANCELED;
		}
		claim_yield(claim);
		la_ssize_t n = archive_read_data(a, b, UNPACK_BUFSZ);
		if (n < 0) {
			buf_give(q, b);
			if (hash_here)
				sha256_release(&sha);
			return push_error(q, "cannot read archive data", a);
		}
		if (n == 0) {
			buf_give(q, b);
			break;
		}
		if (hash_here)
			sha256_update(&sha, b, (size_t)n);
		struct msg d = {.kind = M_DATA, .buf = b, .len = (size_t)n};
		if (queue_push(q, d) < 0) {
			if (hash_here)
				sha256_release(&sha);
			return -ECANCELED;
		}
		__atomic_store_n(&q->in_bytes, (uint64_t)archive_filter_bytes(outer, -1),
		                 __ATOMIC_RELAXED);
	}
	struct msg end = {.kind = M_FILE_END};
	if (hash_here)
		sha256_final(&sha, end.sha256);
	if (queue_push(q, end) < 0)
		return -ECANCELED;
	__atomic_store_n(&q->in_bytes, (uint64_t)archive_filter_bytes(outer, -1), __ATOMIC_RELAXED);
	return 0;
}

/* Pushes the entries of an open archive. 0 at EOF, TF_EFAIL (error pushed) or
 * -ECANCELED (consumer aborted). */
static int decode_stream(struct queue *q, struct archive *a, struct archive *outer,
                         struct core_claim *claim)
{
	struct archive_entry *ae;
	for (;;) {
		int r = archive_read_next_header(a, &ae);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r < ARCHIVE_WARN)
			return push_error(q, "cannot read archive header", a);
		struct raw_entry *e = xcalloc(1, sizeof(*e));
		/*
		 * A name the archive marks as UTF-8 (zip's flag, pax headers) has
		 * no form in a C/ASCII locale: libarchive then gives NULL for the
		 * locale form, so ask for the UTF-8 one. Found by
		 * test_wheel_conformance: a wheel's non-ASCII file was dropped.
		 */
		const char *p = archive_entry_pathname(ae);
		if (p == NULL)
			p = archive_entry_pathname_utf8(ae);
		if (p == NULL || p[0] == '\0') {
			free(e);
			struct msg m = {.kind = M_ERROR,
			                .err = xstrdup("an entry's name cannot be read (neither in "
			                               "this locale nor as UTF-8)")};
			queue_push(q, m);
			return TF_EFAIL;
		}
		e->path = xstrdup(p);
		const char *hl = archive_entry_hardlink(ae);
		const char *sl = archive_entry_symlink(ae);
		if (hl == NULL)
			hl = archive_entry_hardlink_utf8(ae);
		if (sl == NULL && archive_entry_filetype(ae) == AE_IFLNK)
			sl = archive_entry_symlink_utf8(ae);
		e->hard = hl != NULL;
		e->link = hl ? xstrdup(hl) : sl ? xstrdup(sl) : NULL;
		e->type = archive_entry_filetype(ae);
		e->perm = archive_entry_perm(ae);
		e->size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : -1;
		if (archive_entry_mtime_is_set(ae)) {
			e->has_mtime = 1;
			e->mtime.tv_sec = archive_entry_mtime(ae);
			e->mtime.tv_nsec = archive_entry_mtime_nsec(ae);
		}
		int is_file = e->type == AE_IFREG && !e->hard;
		/*
		 * Balance the two threads: where decoding is cheap (zstd, gzip,
		 * plain tar, zip) the writer is the bottleneck, so the decoder
		 * hashes; for xz and bzip2 the decoder is, so the writer hashes.
		 */
		int code = archive_filter_code(outer, 0);
		int hash_here = is_file && code != ARCHIVE_FILTER_XZ &&
		                code != ARCHIVE_FILTER_LZMA && code != ARCHIVE_FILTER_BZIP2;
		e->decoder_hashes = hash_here;
		struct msg m = {.kind = M_ENTRY, .e = e};
		if (queue_push(q, m) < 0)
			return -ECANCELED;
		if (!is_file)
			continue;
		int rc = push_file_data(q, a, outer, claim, hash_here);
		if (rc != 0)
			return rc;
	}
}

/* A .conda is a zip whose pkg-*.tar.zst and info-*.tar.zst hold the files. */
struct inner_src {
	struct archive *outer;
	char buf[UNPACK_BUFSZ];
};

static la_ssize_t inner_read(struct archive *a, void *ud, const void **out)
{
	struct inner_src *s = ud;
	*out = s->buf;
	return archive_read_data(s->outer, s->buf, sizeof(s->buf));
}

static int decode_conda(struct queue *q, struct archive *outer, struct core_claim *claim)
{
	struct archive_entry *ae;
	struct inner_src *src = xmalloc(sizeof(*src));
	int ret = 0;
	src->outer = outer;
	for (;;) {
		int r = archive_read_next_header(outer, &ae);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			ret = push_error(q, "cannot read .conda container", outer);
			break;
		}
		const char *name = archive_entry_pathname(ae);
		if (name == NULL || !str_ends_with(name, ".tar.zst") ||
		    (!str_starts_with(name, "pkg-") && !str_starts_with(name, "info-")))
			continue; /* metadata.json and friends are not part of the tree */
		struct archive *in = archive_read_new();
		archive_read_support_filter_zstd(in);
		archive_read_support_format_tar(in);
		if (archive_read_open(in, src, NULL, inner_read, NULL) != ARCHIVE_OK) {
			ret = push_error(q, "cannot open inner tarball of .conda", in);
			archive_read_free(in);
			break;
		}
		ret = decode_stream(q, in, outer, claim);
		archive_read_free(in);
		if (ret < 0)
			break;
	}
	free(src);
	return ret;
}

static void *decoder_main(void *arg)
{
	struct decoder *d = arg;
	struct queue *q = d->q;
	/*
	 * Names an archive marks as UTF-8 (zip's flag 11, pax headers) are
	 * converted to this thread's locale; in the C locale a non-ASCII one
	 * has no form at all. This thread reads UTF-8 (built into glibc), and
	 * names stay bytes everywhere else.
	 */
	locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	if (utf8 != (locale_t)0)
		uselocale(utf8);
	if (d->nparts > 0) {
		claim_take(&d->claim);
		if (decode_zip_part(d) == 0) {
			struct msg m = {.kind = M_EOF};
			queue_push(q, m);
		}
		claim_give(&d->claim, 0);
		if (utf8 != (locale_t)0) {
			uselocale(LC_GLOBAL_LOCALE);
			freelocale(utf8);
		}
		return NULL;
	}
	struct archive *a = archive_read_new();
	struct follow_src *fs = NULL;
	int r;
	if (d->conda) {
		archive_read_support_format_zip(a);
	} else {
		set_formats(a);
	}
	if (d->follow) {
		fs = xmalloc(sizeof(*fs));
		fs->path = d->archive;
		fs->f = d->follow;
		fs->fd = -1;
		fs->off = 0;
		fs->restarts0 = __atomic_load_n(d->follow->restarts, __ATOMIC_ACQUIRE);
		fs->claim = &d->claim; /* taken when bytes are there */
		r = archive_read_open(a, fs, NULL, follow_read, NULL);
	} else {
		claim_take(&d->claim);
		r = archive_read_open_filename(a, d->archive, 1u << 20);
	}
	if (r != ARCHIVE_OK) {
		push_error(q, "cannot open archive", a);
		goto out;
	}
	r = d->conda ? decode_conda(q, a, &d->claim) : decode_stream(q, a, a, &d->claim);
	if (r == 0) {
		struct msg m = {.kind = M_EOF};
		queue_push(q, m);
	}
out:
	archive_read_free(a);
	claim_give(&d->claim, 0);
	if (utf8 != (locale_t)0) {
		uselocale(LC_GLOBAL_LOCALE);
		freelocale(utf8);
	}
	if (fs) {
		if (fs->fd >= 0)
			close(fs->fd);
		free(fs);
	}
	return NULL;
}

void unpack_result_release(struct unpack_result *res)
{
	for (size_t i = 0; i < res->n; i++) {
		free(res->v[i].path);
		free(res->v[i].link);
	}
	free(res->v);
	res->v = NULL;
	res->n = 0;
	res->bytes = 0;
}

uint64_t unpack_bound(int64_t declared, int64_t archive_size)
{
	if (declared >= 0)
		return (uint64_t)declared;
	uint64_t r = archive_size > 0 ? (uint64_t)archive_size * UNPACK_BOMB_RATIO : 0;
	return r > UNPACK_BOMB_FLOOR ? r : UNPACK_BOMB_FLOOR;
}

/*
 * Room for `expected` bytes on the file system of dirfd (`where` names it in
 * the message): 0, or TF_ENOSPC with the message set through w.
 */
int check_room(struct writer *w, int dirfd, const char *where, uint64_t expected)
{
	struct statvfs vs;
	if (fstatvfs(dirfd, &vs) != 0)
		return 0; /* unknown: the writes say so if they fail */
	uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
	if (avail >= expected)
		return 0;
	w_fail(w, TF_ENOSPC,
	       "needs %llu bytes unpacked and %s has %llu bytes free; nothing was unpacked",
	       (unsigned long long)expected, where, (unsigned long long)avail);
	return TF_ENOSPC;
}

int unpack_archive(struct ctx *c, const char *archive, const char *dest_dir, int strip,
                   struct unpack_result *res, struct why *why)
{
	struct unpack_how how = {.pinned = -1};
	return unpack_common(c, archive, &how, dest_dir, strip, res, why);
}

int unpack_archive_named(struct ctx *c, const char *archive, const char *label, int64_t pinned,
                         const char *dest_dir, int strip, struct unpack_result *res,
                         struct why *why)
{
	struct unpack_how how = {.label = label, .pinned = pinned};
	return unpack_common(c, archive, &how, dest_dir, strip, res, why);
}

int unpack_conda_package(struct ctx *c, const char *file, int is_conda, const char *dest_dir,
                         struct unpack_result *res, struct why *why)
{
	struct unpack_how how = {.pinned = -1, .conda = is_conda};
	return unpack_common(c, file, &how, dest_dir, 0, res, why);
}

int unpack_archive_pinned(struct ctx *c, const char *archive, uint64_t unpacked_size,
                          const char *dest_dir, int strip, struct unpack_result *res,
                          struct why *why)
{
	struct unpack_how how = {.pinned = (int64_t)unpacked_size};
	return unpack_common(c, archive, &how, dest_dir, strip, res, why);
}

int unpack_archive_each(struct ctx *c, const char *archive, const char *dest_dir,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res,
                        struct why *why)
{
	struct unpack_how how = {.pinned = -1, .on_file = on_file, .on_file_arg = arg};
	return unpack_common(c, archive, &how, dest_dir, 0, res, why);
}

int unpack_pool_archive(struct ctx *c, const char *archive, const char *label, int64_t pinned,
                        const char *dest_dir, int strip, const struct unpack_share *share,
                        struct unpack_result *res, struct why *why)
{
	struct unpack_how how = {.label = label, .pinned = pinned, .share = *share};
	return unpack_common(c, archive, &how, dest_dir, strip, res, why);
}

int unpack_pool_conda(struct ctx *c, const char *file, int is_conda, const char *dest_dir,
                      const struct unpack_share *share, struct unpack_result *res, struct why *why)
{
	struct unpack_how how = {.pinned = -1, .conda = is_conda, .share = *share};
	return unpack_common(c, file, &how, dest_dir, 0, res, why);
}

int unpack_archive_follow(struct ctx *c, const char *part, const struct unpack_follow *follow,
                          const char *dest_dir, int strip, struct unpack_result *res,
                          struct why *why)
{
	struct unpack_how how = {.follow = follow, .pinned = -1};
	return unpack_common(c, part, &how, dest_dir, strip, res, why);
}

/*
 * What an unpack may write and how its messages name it: the label, the
 * budget (pinned, a followed download's, or the bound of the archive's
 * size), the bound of a zip's share. 0, or TF_EIO through w (the archive
 * cannot be read).
 */
static int writer_limits(struct writer *w, const char *archive, const struct unpack_how *how)
{
	const struct unpack_follow *follow = how->follow;
	int64_t pinned = how->pinned;
	int share = how->nparts > 0;
	struct stat st;
	w->label = strrchr(archive, '/') ? strrchr(archive, '/') + 1 : archive;
	if (follow && follow->label)
		w->label = follow->label;
	if (how->label)
		w->label = how->label;
	w->corrupt = follow ? TF_EIO : TF_EINTEGRITY;
	w->budget = pinned >= 0 ? (uint64_t)pinned : 0;
	w->pinned = pinned >= 0;
	if (follow) {
		w->archive_size = follow->size;
		w->follow = follow;
		w->budget = follow->budget;
		w->pinned = follow->budget_pinned;
	} else if (stat(archive, &st) < 0) {
		w_fail(w, TF_EIO, "cannot read: %s", strerror(errno));
		return TF_EIO;
	} else {
		w->archive_size = st.st_size;
	}
	if (share) {
		w->bound = how->bound;
		w->shared = how->shared;
		if (how->bound) /* the zip's own size, for the message */
			w->archive_size = stat(archive, &st) == 0 ? st.st_size : w->archive_size;
	} else if (!w->pinned && w->archive_size > 0) {
		w->bound = unpack_bound(-1, w->archive_size);
	}
	return 0;
}

/*
 * dest_dir created (not for a zip's share: the caller's) and opened as
 * w->destfd, with room for what it will hold. 0 or the error through w;
 * *created when this call made it.
 */
static int writer_open_dest(struct writer *w, const char *dest_dir, int share, int *created)
{
	if (!share && mkdir(dest_dir, 0755) < 0) {
		w_fail(w, errno == EEXIST ? TF_EFAIL : tf_err_from_errno(-errno),
		       "cannot create staging directory %s: %s", dest_dir, strerror(errno));
		return w->why.code;
	}
	*created = !share;
	w->destfd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w->destfd < 0) {
		w_fail(w, TF_EIO, "cannot open %s: %s", dest_dir, strerror(errno));
		return w->why.code;
	}
	/* The declared size, else the archive's own: it unpacks to no less. */
	if (!share && check_room(w, w->destfd, dest_dir,
	                         w->pinned             ? w->budget
	                         : w->archive_size > 0 ? (uint64_t)w->archive_size
	                                               : 0) != 0)
		return w->why.code;
	return 0;
}

/* The writer's loop: every message of the decoder until EOF, an error, or a stop. */
static void writer_drain(struct writer *w, struct queue *q, const struct unpack_how *how)
{
	for (;;) {
		if (tf_interrupted)
			w_fail(w, TF_EINTR, "interrupted");
		if (how->stop && __atomic_load_n(how->stop, __ATOMIC_ACQUIRE))
			w_fail(w, TF_EFAIL, "stopped: another decoder failed");
		if (w->why.code || over_budget(w, q, 0))
			break;
		struct msg m = queue_pop(q);
		if (m.kind == M_EOF)
			break;
		if (m.kind == M_ERROR) {
			w_fail(w, w->corrupt, "%s", m.err);
			free(m.err);
			break;
		}
		if (m.kind == M_ENTRY) {
			handle_entry(w, q, m.e);
			raw_entry_free(m.e);
		} else {
			/* DATA/FILE_END outside a file cannot happen; free defensively. */
			buf_give(q, m.buf);
		}
		if (how->part == 0)
			maybe_progress(w, q, 0);
	}
}

int unpack_common(struct ctx *c, const char *archive, const struct unpack_how *how,
                  const char *dest_dir, int strip, struct unpack_result *res, struct why *why)
{
	const struct unpack_follow *follow = how->follow;
	struct writer w = {.c = c,
	                   .archive = archive,
	                   .dest = dest_dir,
	                   .destfd = -1,
	                   .strip = strip < 0 ? 0 : strip,
	                   .res = res,
	                   .parent_fd = -1,
	                   .on_file = how->on_file,
	                   .on_file_arg = how->on_file_arg};
	struct queue *q = NULL;
	struct decoder d = {.archive = archive,
	                    .conda = !follow && how->nparts == 0 &&
	                             (how->conda || str_ends_with(archive, ".conda")),
	                    .follow = follow,
	                    .part = how->part,
	                    .nparts = how->nparts,
	                    .zip_in = how->zip_in};
	const struct unpack_share *sh = follow ? &follow->share : &how->share;
	d.claim = (struct core_claim){.k = sh->cores, .rank = sh->rank};
	int share = how->nparts > 0;
	pthread_t th;
	int started = 0, created = 0;

	memset(res, 0, sizeof(*res));
	if (writer_limits(&w, archive, how) != 0 ||
	    writer_open_dest(&w, dest_dir, share, &created) != 0)
		goto out;
	q = xmalloc(sizeof(*q));
	queue_init(q);
	d.q = q;
	if (pthread_create(&th, NULL, decoder_main, &d) != 0) {
		w_fail(&w, TF_EFAIL, "cannot start the decoder thread");
		goto out;
	}
	started = 1;
	writer_drain(&w, q, how);
	if (!w.why.code && !share)
		check_symlinks(&w);
	if (!w.why.code && !share) {
		finish_dirs(&w);
		maybe_progress(&w, q, 1);
	}
out:
	if (started) {
		queue_abort(q);
		pthread_join(th, NULL);
	}
	if (q) {
		queue_destroy(q);
		free(q);
	}
	drop_parent(&w);
	if (w.destfd >= 0)
		close(w.destfd);
	strvec_release(&w.symlinks);
	if (w.why.code) {
		if (created)
			fs_rmtree(dest_dir);
		unpack_result_release(res);
		int rc = w.why.code;
		why_move(why, &w.why);
		return rc;
	}
	return 0;
}
