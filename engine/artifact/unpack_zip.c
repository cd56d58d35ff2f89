/*
 * unpack_zip.c - a zip (a wheel) decoded by libzip: each decoder takes a
 * share of the entries (the largest spread over the shares), inflates small
 * entries in one libdeflate call and streams large ones through zlib, and
 * pushes the messages a libarchive decoder would (unpack.c's queue); the
 * shares write through their own writers against one bound
 * (unpack_zip_parallel). Also reads one member whole (unpack_zip_member).
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
int decode_zip_part(struct decoder *d)
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

/* ---- a zip over several decoders ---- */

struct zshare_run {
	struct ctx *c;
	const char *archive, *dest;
	struct unpack_how how;
	int *stop;
	struct unpack_result res;
	struct why why;
	int rc;
	pthread_t th;
};

static void *zshare_main(void *arg)
{
	struct zshare_run *r = arg;
	r->rc = unpack_common(r->c, r->archive, &r->how, r->dest, 0, &r->res, &r->why);
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
static int zip_declared(const char *archive, uint64_t *declared, uint64_t *bound, struct why *why)
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
	return why_fail(
	    why, TF_EINTEGRITY,
	    "%s: its directory declares %llu bytes unpacked, more than %llu (%dx its %lld bytes; "
	    "no real archive expands that far: a decompression bomb); nothing unpacked",
	    archive, (unsigned long long)*declared, (unsigned long long)*bound, UNPACK_BOMB_RATIO,
	    size);
}

static int zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, const struct unpack_share *share,
                        struct unpack_result *res, struct why *why);

int unpack_zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res,
                        struct why *why)
{
	struct unpack_share none = {0};
	return zip_parallel(c, archive, dest_dir, nparts, on_file, arg, &none, res, why);
}

int unpack_pool_zip(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                    const struct unpack_share *share, struct unpack_result *res, struct why *why)
{
	return zip_parallel(c, archive, dest_dir, nparts, NULL, NULL, share, res, why);
}

/* dest_dir created with room for what the zip declares. 0 or TF_E* with why. */
static int zip_dest(struct ctx *c, const char *archive, const char *dest_dir, uint64_t declared,
                    struct unpack_result *res, struct why *why)
{
	if (mkdir(dest_dir, 0755) < 0)
		return why_fail(why, errno == EEXIST ? TF_EFAIL : tf_err_from_errno(-errno),
		                "%s: cannot create staging directory %s: %s", archive, dest_dir,
		                strerror(errno));
	struct writer rw = {.c = c, .archive = archive, .res = res, .parent_fd = -1};
	int dfd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc = dfd >= 0 ? check_room(&rw, dfd, dest_dir, declared) : 0;
	if (dfd >= 0)
		close(dfd);
	if (rc != 0) {
		rmdir(dest_dir);
		why_move(why, &rw.why);
	}
	return rc;
}

/*
 * The first real failure of the shares r[0..nparts) (not "stopped"), then
 * every share's entries gathered into res. 0 or that failure, in why.
 */
static int zshares_gather(struct zshare_run *r, int nparts, struct unpack_result *res,
                          struct why *why)
{
	int rc = 0;
	for (int pass = 0; pass < 2 && rc == 0; pass++)
		for (int k = 0; k < nparts && rc == 0; k++)
			if (r[k].rc != 0 &&
			    (pass == 1 || strstr(r[k].why.msg ? r[k].why.msg : "",
			                         "another decoder failed") == NULL)) {
				rc = r[k].rc;
				why_move(why, &r[k].why);
			}
	for (int k = 0; k < nparts; k++) {
		for (size_t i = 0; i < r[k].res.n; i++) {
			if (res->n % 256 == 0)
				res->v = xrealloc(res->v, (res->n + 256) * sizeof(*res->v));
			res->v[res->n++] = r[k].res.v[i];
		}
		res->bytes += r[k].res.bytes;
		free(r[k].res.v);
		why_clear(&r[k].why);
	}
	return rc;
}

/*
 * After every share: no name twice (two files racing for one path), every
 * symlink resolved beneath dest_dir, directory modes applied. 0 or TF_E*.
 */
static int zshares_check(struct ctx *c, const char *archive, const char *dest_dir,
                         struct unpack_result *res, struct why *why)
{
	struct writer w = {
	    .c = c, .archive = archive, .dest = dest_dir, .res = res, .parent_fd = -1};
	struct unpack_entry *v = xmalloc((res->n ? res->n : 1) * sizeof(*v));
	memcpy(v, res->v, res->n * sizeof(*v));
	qsort(v, res->n, sizeof(*v), cmp_entry_path);
	for (size_t i = 1; i < res->n && !w.why.code; i++)
		if (strcmp(v[i].path, v[i - 1].path) == 0 &&
		    (v[i].type != 'd' || v[i - 1].type != 'd'))
			w_unsafe(&w, v[i].path, "the archive holds this name twice");
	free(v);
	w.destfd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w.destfd < 0)
		w_fail(&w, TF_EIO, "cannot open %s: %s", dest_dir, strerror(errno));
	for (size_t i = 0; i < res->n && !w.why.code; i++)
		if (res->v[i].type == 'l')
			strvec_push(&w.symlinks, res->v[i].path);
	if (!w.why.code)
		check_symlinks(&w);
	if (!w.why.code)
		finish_dirs(&w);
	if (w.destfd >= 0)
		close(w.destfd);
	strvec_release(&w.symlinks);
	int rc = w.why.code;
	if (rc)
		why_move(why, &w.why);
	return rc;
}

static int zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, const struct unpack_share *share,
                        struct unpack_result *res, struct why *why)
{
	memset(res, 0, sizeof(*res));
	if (nparts < 1)
		nparts = 1;
	if (nparts > UNPACK_ZIP_PARTS_MAX)
		nparts = UNPACK_ZIP_PARTS_MAX;
	uint64_t declared = 0, bound = 0, shared = 0;
	int rc = zip_declared(archive, &declared, &bound, why);
	if (rc != 0 || (rc = zip_dest(c, archive, dest_dir, declared, res, why)) != 0)
		return why_code(why, rc);
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
			r[k].rc = why_fail(&r[k].why, TF_EFAIL, "cannot start a decoder thread");
			stop = 1;
			break;
		}
		started = k + 1;
	}
	if (!stop)
		zshare_main(&r[0]);
	for (int k = 1; k < started; k++)
		pthread_join(r[k].th, NULL);
	rc = zshares_gather(r, nparts, res, why);
	free(r);
	if (rc == 0)
		rc = zshares_check(c, archive, dest_dir, res, why);
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
	return why_code(why, rc);
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
