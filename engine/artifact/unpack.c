/*
 * unpack.c - libarchive extraction split over two threads.
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

/* glibc before 2.32 (the portable build's Debian 11) has no SYS_openat2;
 * the kernel headers have its number. */
#ifndef SYS_openat2
#define SYS_openat2 __NR_openat2
#endif

#define UNPACK_BUFSZ         (64u * 1024)
#define UNPACK_NBUF          32 /* 2 MiB in flight at most */
#define UNPACK_RING          1024
#define PROGRESS_INTERVAL_NS 250000000ull

enum mkind { M_ENTRY, M_DATA, M_FILE_END, M_EOF, M_ERROR };

struct raw_entry {
	char *path;
	char *link; /* symlink target or hardlink name */
	int hard;
	unsigned type; /* AE_IF* */
	unsigned perm;
	int64_t size;
	int has_mtime;
	struct timespec mtime;
	int decoder_hashes; /* the digest comes with M_FILE_END */
};

struct msg {
	enum mkind kind;
	struct raw_entry *e;
	char *buf;
	size_t len;
	char *err;
	char sha256[65]; /* M_FILE_END: the file's digest when the decoder hashed it */
};

struct queue {
	pthread_mutex_t mu;
	pthread_cond_t can_pop, can_push, can_take;
	struct msg ring[UNPACK_RING];
	size_t head, count;
	char *free_bufs[UNPACK_NBUF];
	size_t nfree;
	int abort;
	uint64_t in_bytes; /* compressed bytes consumed, for progress */
};

struct decoder {
	struct queue *q;
	const char *archive;
	int conda;
	const struct unpack_follow *follow; /* non-NULL: read a .part as it grows */
	int part, nparts;                   /* nparts > 0: this share of a zip (libzip) */
	uint64_t *zip_in;                   /* compressed bytes decoded by all the shares */
	struct core_claim claim;            /* the pool's core this decoder holds, if any */
};

/* Reads a file that another thread is still appending to (unpack_follow). */
struct follow_src {
	const char *path;
	const struct unpack_follow *f;
	struct core_claim *claim;
	int fd;
	int restarts0;
	uint64_t off;
	char buf[1u << 20];
};

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

static void raw_entry_free(struct raw_entry *e)
{
	if (e == NULL)
		return;
	free(e->path);
	free(e->link);
	free(e);
}

/* Returns -ECANCELED when the consumer aborted; the message is then freed here. */
static int queue_push(struct queue *q, struct msg m)
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

static struct msg queue_pop(struct queue *q)
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

static char *buf_take(struct queue *q)
{
	pthread_mutex_lock(&q->mu);
	while (q->nfree == 0 && !q->abort)
		pthread_cond_wait(&q->can_take, &q->mu);
	char *b = q->abort ? NULL : q->free_bufs[--q->nfree];
	pthread_mutex_unlock(&q->mu);
	return b;
}

static void buf_give(struct queue *q, char *b)
{
	if (b == NULL)
		return;
	pthread_mutex_lock(&q->mu);
	q->free_bufs[q->nfree++] = b;
	pthread_cond_signal(&q->can_take);
	pthread_mutex_unlock(&q->mu);
}

static void queue_abort(struct queue *q)
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
		__atomic_store_n(&q->in_bytes, (uint64_t)archive_filter_bytes(outer, -1),
		                 __ATOMIC_RELAXED);
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

static int has_control(const char *s);
static char *escape_name(const char *s);

/* ---- zip decoder: one share of the entries of a zip (unpack_zip_parallel) ---- */

/* Entries up to this size are inflated by libdeflate in one call (its only
 * mode: the whole entry in memory); larger ones stream through zlib
 * (libzip) so memory stays bounded whatever the entry. */
#define ZIP_WHOLE_MAX (4u << 20)

static int zip_fail(struct queue *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int zip_fail(struct queue *q, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	struct msg m = {.kind = M_ERROR, .err = xvasprintf(fmt, ap)};
	va_end(ap);
	queue_push(q, m);
	return TF_EFAIL;
}

/*
 * Which share decodes entry i: largest compressed entries first, each to the
 * share with the fewest bytes so far (every share computes the same table).
 */
struct zshare {
	zip_uint64_t idx, csize;
};

static int cmp_zshare(const void *a, const void *b)
{
	const struct zshare *x = a, *y = b;
	if (x->csize != y->csize)
		return x->csize < y->csize ? 1 : -1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static unsigned char *zip_owners(zip_t *za, zip_uint64_t n, int nparts)
{
	unsigned char *own = xcalloc(n ? n : 1, 1);
	if (nparts <= 1)
		return own;
	struct zshare *v = xcalloc(n ? n : 1, sizeof(*v));
	uint64_t load[256] = {0};
	for (zip_uint64_t i = 0; i < n; i++) {
		zip_stat_t st;
		v[i].idx = i;
		v[i].csize = zip_stat_index(za, i, 0, &st) == 0 && (st.valid & ZIP_STAT_COMP_SIZE)
		                 ? st.comp_size
		                 : 0;
	}
	qsort(v, n, sizeof(*v), cmp_zshare);
	for (zip_uint64_t i = 0; i < n; i++) {
		int best = 0;
		for (int k = 1; k < nparts; k++)
			if (load[k] < load[best])
				best = k;
		own[v[i].idx] = (unsigned char)best;
		load[best] += v[i].csize + 512; /* per entry: headers, a file to create */
	}
	free(v);
	return own;
}

/* Pushes `len` bytes as DATA messages (pool buffers); -ECANCELED when the writer stopped. */
static int zip_push_bytes(struct queue *q, const unsigned char *p, size_t len, struct sha256 *sha)
{
	for (size_t off = 0; off < len;) {
		char *b = buf_take(q);
		if (b == NULL)
			return -ECANCELED;
		size_t k = len - off < UNPACK_BUFSZ ? len - off : UNPACK_BUFSZ;
		memcpy(b, p + off, k);
		sha256_update(sha, b, k);
		struct msg d = {.kind = M_DATA, .buf = b, .len = k};
		if (queue_push(q, d) < 0)
			return -ECANCELED;
		off += k;
	}
	return 0;
}

/*
 * One zip decoder's inflater: libdeflate's state and the whole-entry buffers,
 * kept for its share of the entries (grown to the largest, at most
 * ZIP_WHOLE_MAX and a little more each), not allocated again for every entry:
 * malloc's heap kept what each entry freed, on every decoder's thread.
 */
struct zinflate {
	struct libdeflate_decompressor *dd;
	unsigned char *in, *out;
	size_t cin, cout;
};

static unsigned char *zbuf(unsigned char **p, size_t *cap, size_t need)
{
	if (need > *cap) {
		free(*p);
		*p = xmalloc(need ? need : 1);
		*cap = need;
	}
	return *p;
}

/* The data of one regular file entry, then FILE_END; 0, TF_EFAIL (error pushed) or
 * -ECANCELED (stopped). */
static int zip_entry_data(struct queue *q, zip_t *za, zip_uint64_t i, const zip_stat_t *st,
                          const char *name, struct zinflate *z)
{
	struct sha256 sha;
	sha256_init(&sha);
	int ret = 0;
	if (st->comp_method == ZIP_CM_DEFLATE && st->size <= ZIP_WHOLE_MAX &&
	    st->comp_size <= ZIP_WHOLE_MAX + (ZIP_WHOLE_MAX >> 4) + 64) {
		/* Whole: the raw deflate stream in, the entry out, its CRC checked. */
		unsigned char *in = zbuf(&z->in, &z->cin, st->comp_size);
		unsigned char *out = zbuf(&z->out, &z->cout, st->size);
		zip_file_t *zf = zip_fopen_index(za, i, ZIP_FL_COMPRESSED);
		zip_int64_t got = zf ? zip_fread(zf, in, st->comp_size) : -1;
		size_t actual = 0;
		if (got < 0 || (zip_uint64_t)got != st->comp_size)
			ret = zip_fail(q, "cannot read archive data of '%s': %s", name,
			               zf ? zip_file_strerror(zf) : zip_strerror(za));
		else if (libdeflate_deflate_decompress(z->dd, in, st->comp_size, out, st->size,
		                                       &actual) != LIBDEFLATE_SUCCESS ||
		         actual != st->size)
			ret = zip_fail(q,
			               "cannot read archive data of '%s': not a valid deflate "
			               "stream of its recorded size",
			               name);
		else if ((st->valid & ZIP_STAT_CRC) &&
		         libdeflate_crc32(0, out, st->size) != st->crc)
			ret = zip_fail(q, "cannot read archive data of '%s': CRC error", name);
		else if (zip_push_bytes(q, out, st->size, &sha) < 0)
			ret = -ECANCELED;
		if (zf)
			zip_fclose(zf);
	} else {
		/* Streaming (large entries, stored ones, other methods): libzip
		 * inflates with zlib and checks the CRC at the end. */
		zip_file_t *zf = zip_fopen_index(za, i, 0);
		uint64_t total = 0;
		if (zf == NULL)
			ret = zip_fail(q, "cannot read archive data of '%s': %s", name,
			               zip_strerror(za));
		while (ret == 0) {
			char *b = buf_take(q);
			if (b == NULL) {
				ret = -ECANCELED;
				break;
			}
			zip_int64_t n = zip_fread(zf, b, UNPACK_BUFSZ);
			if (n <= 0) {
				buf_give(q, b);
				if (n < 0)
					ret = zip_fail(q, "cannot read archive data of '%s': %s",
					               name, zip_file_strerror(zf));
				break;
			}
			total += (uint64_t)n;
			if (total > st->size) {
				buf_give(q, b);
				ret = zip_fail(
				    q, "archive data of '%s' longer than its recorded size", name);
				break;
			}
			sha256_update(&sha, b, (size_t)n);
			struct msg d = {.kind = M_DATA, .buf = b, .len = (size_t)n};
			if (queue_push(q, d) < 0)
				ret = -ECANCELED;
		}
		if (ret == 0 && total != st->size)
			ret = zip_fail(q, "archive data of '%s' shorter than its recorded size",
			               name);
		if (zf)
			zip_fclose(zf);
	}
	if (ret != 0) {
		sha256_release(&sha);
		return ret;
	}
	struct msg end = {.kind = M_FILE_END};
	sha256_final(&sha, end.sha256);
	return queue_push(q, end);
}

/*
 * This decoder's share of the zip: the same messages as decode_stream, so
 * the writer applies every rule of this file to them. Names are read as
 * zipfile (pip) reads them: UTF-8 when the entry says so, else CP437.
 */
static int decode_zip_part(struct decoder *d)
{
	struct queue *q = d->q;
	int zerr = 0, ret = 0;
	zip_t *za = zip_open(d->archive, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
	if (za == NULL) {
		zip_error_t ze;
		zip_error_init_with_code(&ze, zerr);
		zip_fail(q, "cannot open archive: %s", zip_error_strerror(&ze));
		zip_error_fini(&ze);
		return TF_EFAIL;
	}
	zip_int64_t n = zip_get_num_entries(za, 0);
	unsigned char *own = zip_owners(za, n > 0 ? (zip_uint64_t)n : 0, d->nparts);
	struct zinflate z = {.dd = libdeflate_alloc_decompressor()};
	for (zip_int64_t i = 0; i < n && ret == 0; i++) {
		if (own[i] != d->part)
			continue;
		claim_yield(&d->claim);
		zip_stat_t st;
		zip_uint8_t opsys = 0;
		zip_uint32_t attr = 0;
		if (zip_stat_index(za, (zip_uint64_t)i, ZIP_FL_ENC_STRICT, &st) != 0 ||
		    (st.valid &
		     (ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD)) !=
		        (ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE |
		         ZIP_STAT_COMP_METHOD)) {
			ret = zip_fail(q, "cannot read archive header: %s", zip_strerror(za));
			break;
		}
		if (st.name == NULL || st.name[0] == '\0') {
			ret = zip_fail(q, "an entry has no name");
			break;
		}
		/*
		 * libzip's CP437 shows bytes 0x01-0x1f and 0x7f as graphic
		 * characters; zipfile (pip) keeps them as control characters, which
		 * the writer refuses. So an ASCII name, or one with such a byte, is
		 * taken as its raw bytes.
		 */
		const char *raw = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
		int ascii = raw != NULL;
		for (const unsigned char *c = (const unsigned char *)raw; c && *c; c++)
			ascii &= *c < 0x80;
		const char *name = raw && (ascii || has_control(raw)) ? raw : st.name;
		zip_file_get_external_attributes(za, (zip_uint64_t)i, 0, &opsys, &attr);
		unsigned mode = opsys == ZIP_OPSYS_UNIX ? attr >> 16 : 0;
		size_t nl = strlen(name);
		struct raw_entry *e = xcalloc(1, sizeof(*e));
		e->path = xstrdup(name);
		e->perm = mode & 07777;
		e->type = name[nl - 1] == '/' ? AE_IFDIR
		          : (mode & S_IFMT)   ? mode & S_IFMT
		                              : AE_IFREG;
		e->size = (int64_t)st.size;
		if (st.valid & ZIP_STAT_MTIME) {
			e->has_mtime = 1;
			e->mtime.tv_sec = st.mtime;
		}
		if (e->type == AE_IFLNK) {
			/* A symlink's data is its target (the writer checks it). */
			char buf[4096];
			zip_file_t *zf =
			    st.size < sizeof(buf) ? zip_fopen_index(za, (zip_uint64_t)i, 0) : NULL;
			zip_int64_t got = zf ? zip_fread(zf, buf, st.size) : -1;
			if (zf)
				zip_fclose(zf);
			if (got < 0 || (zip_uint64_t)got != st.size) {
				raw_entry_free(e);
				ret =
				    zip_fail(q, "cannot read the target of symlink '%s'", st.name);
				break;
			}
			e->link = xstrndup(buf, (size_t)got);
		}
		int is_file = e->type == AE_IFREG;
		e->decoder_hashes = is_file;
		char *e_name = escape_name(name); /* for messages; e is the writer's once pushed */
		struct msg m = {.kind = M_ENTRY, .e = e};
		if (queue_push(q, m) < 0) {
			free(e_name);
			ret = -ECANCELED;
			break;
		}
		if (is_file)
			ret = zip_entry_data(q, za, (zip_uint64_t)i, &st, e_name, &z);
		free(e_name);
		uint64_t all = __atomic_add_fetch(d->zip_in, st.comp_size, __ATOMIC_RELAXED);
		__atomic_store_n(&q->in_bytes, all, __ATOMIC_RELAXED);
	}
	libdeflate_free_decompressor(z.dd);
	free(z.in);
	free(z.out);
	free(own);
	zip_discard(za);
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

/* ---- path checks ---- */

static int has_control(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return 1;
	return 0;
}

/*
 * Splits a relative archive name into clean components (no "", no ".").
 * Returns NULL and a reason for an unsafe name.
 */
static char **split_name(const char *name, size_t *n, const char **why)
{
	if (has_control(name)) {
		*why = "control character in name";
		return NULL;
	}
	if (name[0] == '/') {
		*why = "absolute path";
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
			*why = "'..' component";
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

struct writer {
	struct ctx *c;
	const char *archive;
	const char *dest;
	int destfd;
	int strip;
	struct unpack_result *res;
	size_t cap;
	char *parent;  /* cached parent dir, relative ("" for dest) */
	int parent_fd; /* its fd (destfd itself for "") */
	int err;
	char *errmsg;
	struct strvec symlinks;
	uint64_t last_progress;
	int64_t archive_size;
	const char *label;
	const struct unpack_follow *follow;
	uint64_t budget; /* most file bytes this unpack may write (0: no limit unless pinned) */
	/*
	 * What a decoding error is: bytes that cannot be decoded are a damaged
	 * archive (TF_EINTEGRITY, exit 5) once they are the final file; while a
	 * download is followed they may just be incomplete (TF_EIO: the caller
	 * unpacks the verified file instead).
	 */
	int corrupt;
	int pinned;             /* the budget is the recorded unpacked_size */
	uint64_t bound;         /* not pinned: the hard bound (unpack_bound), 0: none */
	uint64_t *shared;       /* a share of a zip: the file bytes of every share */
	unpack_file_fn on_file; /* each regular file once written and closed */
	void *on_file_arg;
};

static void w_fail(struct writer *w, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void w_fail(struct writer *w, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tf_fail_first(&w->err, &w->errmsg, err, w->archive, fmt, ap);
	va_end(ap);
}

/* Names go into terminal messages: control characters are shown escaped. */
static char *escape_name(const char *s)
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

static void w_unsafe(struct writer *w, const char *entry, const char *why)
{
	char *e = escape_name(entry);
	w_fail(w, TF_EUNSAFE, "refusing unsafe entry '%s': %s", e, why);
	free(e);
}

static void drop_parent(struct writer *w)
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
 * (borrowed: valid until the next call) or w->err (< 0) with w->err set.
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
	return w->err;
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
 * semantics). 0, a TF_E* set in w->err, or -errno when fstatat failed.
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
static int over_budget(struct writer *w, struct queue *q, size_t len)
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
	if (!w->err) {
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
			if (fd >= 0 && !w->err) {
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
		if (!w->err && fchmod(fd, mode) < 0)
			w_fail(w, TF_EIO, "cannot chmod '%s': %s", rel, strerror(errno));
		if (!w->err && e->has_mtime) {
			struct timespec ts[2] = {e->mtime, e->mtime};
			futimens(fd, ts);
		}
		if (close(fd) < 0)
			w_fail(w, tf_err_from_errno(-errno), "cannot write '%s': %s", rel,
			       strerror(errno));
	}
	if (w->err) {
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

static void handle_entry(struct writer *w, struct queue *q, struct raw_entry *e)
{
	const char *why = NULL;
	size_t n = 0, ln = 0;
	char **comps = NULL, **lcomps = NULL;
	char *rel = NULL, *lrel = NULL;
	int is_file = e->type == AE_IFREG && !e->hard;
	int consumed = 0;

	comps = split_name(e->path, &n, &why);
	if (comps == NULL) {
		w_unsafe(w, e->path, why);
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
		lcomps = split_name(e->link ? e->link : "", &ln, &why);
		if (lcomps == NULL) {
			char *reason = xasprintf("hard link target: %s", why);
			w_unsafe(w, e->path, reason);
			free(reason);
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
				       "cannot hard link '%s' to '%s': %s", rel, lrel,
				       strerror(errno));
		}
		close(sdup);
		if (w->err)
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
		goto out;
	}

	int pfd = open_dir(w, comps + w->strip, n - (size_t)w->strip - 1, 1, e->path);
	if (pfd < 0)
		goto out;
	const char *base = comps[n - 1];
	switch (e->type) {
	case AE_IFREG:
		consumed = 1;
		write_file(w, q, pfd, base, rel, e);
		break;
	case AE_IFDIR: {
		struct stat st;
		if (mkdirat(pfd, base, 0755) < 0 && errno != EEXIST) {
			w_fail(w, tf_err_from_errno(-errno), "cannot create directory '%s': %s",
			       rel, strerror(errno));
			break;
		}
		if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
			w_unsafe(w, e->path, "a directory entry over an existing non-directory");
			break;
		}
		/* Applied at the end so restrictive modes never block our own writes. */
		add_result(w, rel, 'd', NULL, (e->perm & 0777) | 0700, 0);
		break;
	}
	case AE_IFLNK: {
		const char *t = e->link ? e->link : "";
		if (has_control(t)) {
			w_unsafe(w, e->path, "control character in symlink target");
			break;
		}
		if (t[0] == '/' || t[0] == '\0' || !link_target_inside(rel, t)) {
			w_unsafe(w, e->path, "symlink target leaves the destination");
			break;
		}
		if (clear_leaf(w, pfd, base, rel) < 0)
			break;
		if (symlinkat(t, pfd, base) < 0) {
			w_fail(w, tf_err_from_errno(-errno), "cannot create symlink '%s': %s", rel,
			       strerror(errno));
			break;
		}
		strvec_push(&w->symlinks, rel);
		add_result(w, rel, 'l', t, 0777, 0);
		break;
	}
	}
out:
	if (is_file && !consumed)
		drain_file(w, q);
	free_comps(comps, n);
	free_comps(lcomps, ln);
	free(rel);
	free(lrel);
}

/* Resolves every symlink with RESOLVE_BENEATH: chains may escape where single links do not. */
static void check_symlinks(struct writer *w)
{
	for (size_t i = 0; i < w->symlinks.n && !w->err; i++) {
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

static void finish_dirs(struct writer *w)
{
	/* Deepest (latest created) first, so a read-only parent is set last. */
	for (size_t i = w->res->n; i-- > 0;) {
		struct unpack_entry *e = &w->res->v[i];
		if (e->type == 'd' && e->mode != 0755)
			fchmodat(w->destfd, e->path, e->mode, AT_SYMLINK_NOFOLLOW);
	}
}

static void maybe_progress(struct writer *w, struct queue *q, int force)
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

struct unpack_how {
	const char *label;
	const struct unpack_follow *follow;
	int64_t pinned;
	int conda;
	unpack_file_fn on_file;
	void *on_file_arg;
	/* A share of unpack_zip_parallel: dest_dir exists and is the caller's
	 * to remove; symlinks and directory modes are checked after every share. */
	int part, nparts;
	uint64_t *zip_in;
	const int *stop;           /* set when another share failed */
	uint64_t bound;            /* a share: the zip's bound (unpack_zip_parallel) */
	uint64_t *shared;          /* a share: file bytes written by every share */
	struct unpack_share share; /* a decoder of a pool sharing cores */
};

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
static int check_room(struct writer *w, int dirfd, const char *where, uint64_t expected)
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

static int unpack_common(struct ctx *c, const char *archive, const struct unpack_how *how,
                         const char *dest_dir, int strip, struct unpack_result *res, char **errmsg);

int unpack_archive(struct ctx *c, const char *archive, const char *dest_dir, int strip,
                   struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.pinned = -1};
	return unpack_common(c, archive, &how, dest_dir, strip, res, errmsg);
}

int unpack_archive_named(struct ctx *c, const char *archive, const char *label, int64_t pinned,
                         const char *dest_dir, int strip, struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.label = label, .pinned = pinned};
	return unpack_common(c, archive, &how, dest_dir, strip, res, errmsg);
}

int unpack_conda_package(struct ctx *c, const char *file, int is_conda, const char *dest_dir,
                         struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.pinned = -1, .conda = is_conda};
	return unpack_common(c, file, &how, dest_dir, 0, res, errmsg);
}

int unpack_archive_pinned(struct ctx *c, const char *archive, uint64_t unpacked_size,
                          const char *dest_dir, int strip, struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.pinned = (int64_t)unpacked_size};
	return unpack_common(c, archive, &how, dest_dir, strip, res, errmsg);
}

int unpack_archive_each(struct ctx *c, const char *archive, const char *dest_dir,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.pinned = -1, .on_file = on_file, .on_file_arg = arg};
	return unpack_common(c, archive, &how, dest_dir, 0, res, errmsg);
}

int unpack_pool_archive(struct ctx *c, const char *archive, const char *label, int64_t pinned,
                        const char *dest_dir, int strip, const struct unpack_share *share,
                        struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.label = label, .pinned = pinned, .share = *share};
	return unpack_common(c, archive, &how, dest_dir, strip, res, errmsg);
}

int unpack_pool_conda(struct ctx *c, const char *file, int is_conda, const char *dest_dir,
                      const struct unpack_share *share, struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.pinned = -1, .conda = is_conda, .share = *share};
	return unpack_common(c, file, &how, dest_dir, 0, res, errmsg);
}

int unpack_archive_follow(struct ctx *c, const char *part, const struct unpack_follow *follow,
                          const char *dest_dir, int strip, struct unpack_result *res, char **errmsg)
{
	struct unpack_how how = {.follow = follow, .pinned = -1};
	return unpack_common(c, part, &how, dest_dir, strip, res, errmsg);
}

static int unpack_common(struct ctx *c, const char *archive, const struct unpack_how *how,
                         const char *dest_dir, int strip, struct unpack_result *res, char **errmsg)
{
	const char *label = how->label;
	const struct unpack_follow *follow = how->follow;
	int64_t pinned = how->pinned;
	int conda = how->conda;
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
	                             (conda || str_ends_with(archive, ".conda")),
	                    .follow = follow,
	                    .part = how->part,
	                    .nparts = how->nparts,
	                    .zip_in = how->zip_in};
	const struct unpack_share *sh = follow ? &follow->share : &how->share;
	d.claim = (struct core_claim){.k = sh->cores, .rank = sh->rank};
	int share = how->nparts > 0;
	pthread_t th;
	int started = 0, created = 0;
	struct stat st;

	memset(res, 0, sizeof(*res));
	*errmsg = NULL;
	w.label = strrchr(archive, '/') ? strrchr(archive, '/') + 1 : archive;
	if (follow && follow->label)
		w.label = follow->label;
	if (label)
		w.label = label;
	w.corrupt = follow ? TF_EIO : TF_EINTEGRITY;
	w.budget = pinned >= 0 ? (uint64_t)pinned : 0;
	w.pinned = pinned >= 0;
	if (follow) {
		w.archive_size = follow->size;
		w.follow = follow;
		w.budget = follow->budget;
		w.pinned = follow->budget_pinned;
	} else if (stat(archive, &st) < 0) {
		w_fail(&w, TF_EIO, "cannot read: %s", strerror(errno));
		goto out;
	} else {
		w.archive_size = st.st_size;
	}
	if (share) {
		w.bound = how->bound;
		w.shared = how->shared;
		if (how->bound) /* the zip's own size, for the message */
			w.archive_size = stat(archive, &st) == 0 ? st.st_size : w.archive_size;
	} else if (!w.pinned && w.archive_size > 0) {
		w.bound = unpack_bound(-1, w.archive_size);
	}
	if (!share && mkdir(dest_dir, 0755) < 0) {
		w_fail(&w, errno == EEXIST ? TF_EFAIL : tf_err_from_errno(-errno),
		       "cannot create staging directory %s: %s", dest_dir, strerror(errno));
		goto out;
	}
	created = !share;
	w.destfd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w.destfd < 0) {
		w_fail(&w, TF_EIO, "cannot open %s: %s", dest_dir, strerror(errno));
		goto out;
	}
	/* The declared size, else the archive's own: it unpacks to no less. */
	if (!share && check_room(&w, w.destfd, dest_dir,
	                         w.pinned             ? w.budget
	                         : w.archive_size > 0 ? (uint64_t)w.archive_size
	                                              : 0) != 0)
		goto out;

	q = xmalloc(sizeof(*q));
	queue_init(q);
	d.q = q;
	if (pthread_create(&th, NULL, decoder_main, &d) != 0) {
		w_fail(&w, TF_EFAIL, "cannot start the decoder thread");
		goto out;
	}
	started = 1;

	for (;;) {
		if (tf_interrupted)
			w_fail(&w, TF_EINTR, "interrupted");
		if (how->stop && __atomic_load_n(how->stop, __ATOMIC_ACQUIRE))
			w_fail(&w, TF_EFAIL, "stopped: another decoder failed");
		if (w.err || over_budget(&w, q, 0))
			break;
		struct msg m = queue_pop(q);
		if (m.kind == M_EOF)
			break;
		if (m.kind == M_ERROR) {
			w_fail(&w, w.corrupt, "%s", m.err);
			free(m.err);
			break;
		}
		if (m.kind == M_ENTRY) {
			handle_entry(&w, q, m.e);
			raw_entry_free(m.e);
		} else {
			/* DATA/FILE_END outside a file cannot happen; free defensively. */
			buf_give(q, m.buf);
		}
		if (how->part == 0)
			maybe_progress(&w, q, 0);
	}
	if (!w.err && !share)
		check_symlinks(&w);
	if (!w.err && !share) {
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
	if (w.err) {
		if (created)
			fs_rmtree(dest_dir);
		unpack_result_release(res);
		*errmsg = w.errmsg;
		return w.err;
	}
	return 0;
}

/* ---- a zip over several decoders ---- */

struct zshare_run {
	struct ctx *c;
	const char *archive, *dest;
	struct unpack_how how;
	int *stop;
	struct unpack_result res;
	char *err;
	int rc;
	pthread_t th;
};

static void *zshare_main(void *arg)
{
	struct zshare_run *r = arg;
	r->rc = unpack_common(r->c, r->archive, &r->how, r->dest, 0, &r->res, &r->err);
	if (r->rc != 0)
		__atomic_store_n(r->stop, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int cmp_entry_path(const void *a, const void *b)
{
	return strcmp(((const struct unpack_entry *)a)->path,
	              ((const struct unpack_entry *)b)->path);
}

/*
 * What a zip says it unpacks to (its central directory's sizes, which the
 * decoders hold every entry to) and its bound; a zip that declares more than
 * its bound is refused before anything is written (TF_EINTEGRITY). A zip
 * libzip cannot open is left to the decoders to name.
 */
static int zip_declared(const char *archive, uint64_t *declared, uint64_t *bound, char **errmsg)
{
	struct stat st;
	long long size = stat(archive, &st) == 0 ? (long long)st.st_size : 0;
	*bound = unpack_bound(-1, size);
	int zerr = 0;
	zip_t *za = zip_open(archive, ZIP_RDONLY, &zerr);
	if (za == NULL)
		return 0;
	zip_int64_t n = zip_get_num_entries(za, 0);
	for (zip_int64_t i = 0; i < n; i++) {
		zip_stat_t zs;
		if (zip_stat_index(za, (zip_uint64_t)i, 0, &zs) == 0 && (zs.valid & ZIP_STAT_SIZE))
			*declared += zs.size;
	}
	zip_discard(za);
	if (*declared <= *bound)
		return 0;
	*errmsg = xasprintf("%s: its directory declares %llu bytes unpacked, more than %llu "
	                    "(%dx its %lld bytes; no real archive expands that far: a "
	                    "decompression bomb); nothing unpacked",
	                    archive, (unsigned long long)*declared, (unsigned long long)*bound,
	                    UNPACK_BOMB_RATIO, size);
	return TF_EINTEGRITY;
}

static int zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, const struct unpack_share *share,
                        struct unpack_result *res, char **errmsg);

int unpack_zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res, char **errmsg)
{
	struct unpack_share none = {0};
	return zip_parallel(c, archive, dest_dir, nparts, on_file, arg, &none, res, errmsg);
}

int unpack_pool_zip(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                    const struct unpack_share *share, struct unpack_result *res, char **errmsg)
{
	return zip_parallel(c, archive, dest_dir, nparts, NULL, NULL, share, res, errmsg);
}

static int zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, const struct unpack_share *share,
                        struct unpack_result *res, char **errmsg)
{
	memset(res, 0, sizeof(*res));
	*errmsg = NULL;
	if (nparts < 1)
		nparts = 1;
	if (nparts > UNPACK_ZIP_PARTS_MAX)
		nparts = UNPACK_ZIP_PARTS_MAX;
	uint64_t declared = 0, bound = 0, shared = 0;
	int rc = zip_declared(archive, &declared, &bound, errmsg);
	if (rc != 0)
		return rc;
	if (mkdir(dest_dir, 0755) < 0) {
		*errmsg = xasprintf("%s: cannot create staging directory %s: %s", archive, dest_dir,
		                    strerror(errno));
		return errno == EEXIST ? TF_EFAIL : tf_err_from_errno(-errno);
	}
	{
		struct writer rw = {.c = c, .archive = archive, .res = res, .parent_fd = -1};
		int dfd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		rc = dfd >= 0 ? check_room(&rw, dfd, dest_dir, declared) : 0;
		if (dfd >= 0)
			close(dfd);
		if (rc != 0) {
			rmdir(dest_dir);
			*errmsg = rw.errmsg;
			return rc;
		}
	}
	int stop = 0;
	uint64_t zip_in = 0;
	struct zshare_run *r = xcalloc((size_t)nparts, sizeof(*r));
	int started = 0;
	for (int k = 0; k < nparts; k++) {
		r[k] = (struct zshare_run){.c = c,
		                           .archive = archive,
		                           .dest = dest_dir,
		                           .stop = &stop,
		                           .how = {.pinned = -1,
		                                   .on_file = on_file,
		                                   .on_file_arg = arg,
		                                   .part = k,
		                                   .nparts = nparts,
		                                   .zip_in = &zip_in,
		                                   .stop = &stop,
		                                   .bound = bound,
		                                   .shared = &shared,
		                                   .share = *share}};
		if (k > 0 && pthread_create(&r[k].th, NULL, zshare_main, &r[k]) != 0) {
			r[k].rc = TF_EFAIL;
			r[k].err = xstrdup("cannot start a decoder thread");
			stop = 1;
			break;
		}
		started = k + 1;
	}
	if (!stop)
		zshare_main(&r[0]);
	for (int k = 1; k < started; k++)
		pthread_join(r[k].th, NULL);
	/* The first real failure is the one to report, not "stopped". */
	for (int pass = 0; pass < 2 && rc == 0; pass++)
		for (int k = 0; k < nparts && rc == 0; k++)
			if (r[k].rc != 0 &&
			    (pass == 1 ||
			     strstr(r[k].err ? r[k].err : "", "another decoder failed") == NULL)) {
				rc = r[k].rc;
				*errmsg = r[k].err;
				r[k].err = NULL;
			}
	for (int k = 0; k < nparts; k++) {
		for (size_t i = 0; i < r[k].res.n; i++) {
			if (res->n % 256 == 0)
				res->v = xrealloc(res->v, (res->n + 256) * sizeof(*res->v));
			res->v[res->n++] = r[k].res.v[i];
		}
		res->bytes += r[k].res.bytes;
		free(r[k].res.v);
		free(r[k].err);
	}
	free(r);
	struct writer w = {
	    .c = c, .archive = archive, .dest = dest_dir, .res = res, .parent_fd = -1};
	if (rc == 0) {
		/* One name twice would be two files racing for one path: refused. */
		struct unpack_entry *v = xmalloc((res->n ? res->n : 1) * sizeof(*v));
		memcpy(v, res->v, res->n * sizeof(*v));
		qsort(v, res->n, sizeof(*v), cmp_entry_path);
		for (size_t i = 1; i < res->n && !w.err; i++)
			if (strcmp(v[i].path, v[i - 1].path) == 0 &&
			    (v[i].type != 'd' || v[i - 1].type != 'd'))
				w_unsafe(&w, v[i].path, "the archive holds this name twice");
		free(v);
		w.destfd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (w.destfd < 0)
			w_fail(&w, TF_EIO, "cannot open %s: %s", dest_dir, strerror(errno));
		for (size_t i = 0; i < res->n && !w.err; i++)
			if (res->v[i].type == 'l')
				strvec_push(&w.symlinks, res->v[i].path);
		if (!w.err)
			check_symlinks(&w);
		if (!w.err)
			finish_dirs(&w);
		if (w.destfd >= 0)
			close(w.destfd);
		strvec_release(&w.symlinks);
		if (w.err) {
			rc = w.err;
			*errmsg = w.errmsg;
		}
	}
	if (rc != 0) {
		fs_rmtree(dest_dir);
		unpack_result_release(res);
	} else {
		struct stat st;
		uint64_t total = stat(archive, &st) == 0 ? (uint64_t)st.st_size : 0;
		ev_progress(c, "unpack",
		            strrchr(archive, '/') ? strrchr(archive, '/') + 1 : archive, total,
		            total);
	}
	return rc;
}

int unpack_zip_member(const char *archive, const char *suffix, size_t max, char **text, size_t *len)
{
	int zerr = 0, rc = -ENOENT;
	zip_t *za = zip_open(archive, ZIP_RDONLY, &zerr);
	*text = NULL;
	*len = 0;
	if (za == NULL)
		return -EIO;
	zip_int64_t n = zip_get_num_entries(za, 0);
	size_t sl = strlen(suffix);
	for (zip_int64_t i = 0; i < n && rc == -ENOENT; i++) {
		const char *name = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
		size_t nl = name ? strlen(name) : 0;
		zip_stat_t st;
		/* "<x><suffix>" with no '/' in <x>: a wheel's top-level .dist-info. */
		if (nl <= sl || strcmp(name + nl - sl, suffix) != 0 ||
		    memchr(name, '/', nl - sl) != NULL)
			continue;
		if (zip_stat_index(za, (zip_uint64_t)i, 0, &st) != 0 || st.size > max) {
			rc = -EFBIG;
			break;
		}
		zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
		char *buf = xmalloc((size_t)st.size + 1);
		zip_int64_t got = zf ? zip_fread(zf, buf, st.size) : -1;
		if (zf)
			zip_fclose(zf);
		if (got < 0 || (zip_uint64_t)got != st.size) {
			free(buf);
			rc = -EIO;
			break;
		}
		buf[got] = '\0';
		*text = buf;
		*len = (size_t)got;
		rc = 0;
	}
	zip_discard(za);
	return rc;
}
