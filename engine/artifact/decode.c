/*
 * decode.c - the decoder pool (decode.h): which archive a free decoder
 * takes (decode_pick: the largest that can start now, over every step),
 * how it decodes it (decode_one: following its download on a budget, from
 * the cache, or from the verified file), and the pool's bookkeeping.
 *
 * Invariant: nothing decoded from unverified bytes counts before fetch_all
 * has verified its download; nothing is written outside the parts the
 * caller named (d->parts).
 */
#include "decode.h"
#include "artifact_int.h"
#include "unpack_pool.h"
#include "fs.h"
#include "error.h"
#include "event.h"
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void *fetch_job_run(void *arg)
{
	struct fetch_job *j = arg;
	j->rc = fetch_all(j->c, j->items, j->n);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Archives open at once: --jobs, else one per core up to DECODERS_MAX,
 * and at least DECODERS_MIN: a decoder that follows a download over a slow
 * link waits on the network, not on a core, and with only one per core the
 * smaller archives of a stack wait for the largest downloads to end before
 * anyone decodes them (bench/current_stack.py at 100 Mbit/s on 2 cores: the
 * prefetch ended 1.7 s after the last byte with 2 decoders, 1.2 s with 4).
 * They decode on the machine's cores only (cores.h): a decoder holds a core
 * while it decodes and lets it go while it waits for bytes, and the largest
 * archive waiting gets the next free core. Four decoders on two cores each
 * decoding cost the fast-link CUDA apply 20% (issue 31: libcublas, a third of
 * the work, shared its core with smaller archives).
 * Each decoder holds its decompressor's window and unpack.c's buffer pool:
 * measured with bench/cold_apply.py --rss-jobs on NVIDIA's CUDA 11.8 archives
 * (xz -6), peak RSS 36 MiB with one decoder, 61 with 2, 77 with 4, 117 with 8
 * (12-25 MiB per extra decoder), so the default stays near 120 MiB on any
 * machine; that was with 8 MiB in flight a decoder, 2 MiB since (70 MiB
 * with 4 on the same archives). More decoders would not help a CUDA stack anyway: its largest
 * archive (libcublas) alone is over a third of the decoding.
 */
#define DECODERS_MAX 8
#define DECODERS_MIN 4

size_t decoders(const struct ctx *c)
{
	size_t n = pool_ncpu();
	if (c->jobs > 0)
		return (size_t)c->jobs;
	return n < DECODERS_MIN ? DECODERS_MIN : n < DECODERS_MAX ? n : DECODERS_MAX;
}

/* A wheel larger than this is decoded ahead by every decoder (wheel.c's WHEEL_SHARE_MIN). */
#define PREDECODE_ZIP_SHARE_MIN (16 << 20)

/* The verified file (or the cache's copy), on the lock's unpacked_size if any. */
static int unpack_verified(struct decode *d, struct art *a, const char *file, size_t i,
                           struct why *why)
{
	struct unpack_share sh = {.cores = d->cores, .rank = d->rank[i]};
	return unpack_pool_archive(d->c, file, a->name, a->unpacked >= 0 ? a->unpacked : -1,
	                           d->parts[i], a->strip, &sh, &d->res[i], why);
}

/* A Python artifact's download verified (in the cache), or never to be. */
static int download_over(const struct decode *d, size_t i)
{
	const struct fetch_item *it = &d->fj->items[i];
	return d->verified || __atomic_load_n(&it->stream_verified, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&it->stream_failed, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&d->fj->done, __ATOMIC_ACQUIRE);
}

/* The download is over and verified: its file in the cache may be decoded. */
static int download_verified(const struct decode *d, size_t i)
{
	const struct fetch_item *it = &d->fj->items[i];
	if (d->verified || __atomic_load_n(&it->stream_verified, __ATOMIC_ACQUIRE))
		return 1;
	return __atomic_load_n(&d->fj->done, __ATOMIC_ACQUIRE) && it->why.code == 0 && it->path;
}

/*
 * The next archive for a free decoder: the largest one that can be decoded
 * now, over every step. An archive of artset_fetch_unpack (marked ART_TREE,
 * or not marked at all: a caller's own artset) follows its download, so it
 * can always start; a wheel or conda package is a zip (or
 * decoded whole), so it starts once its download is verified, and is sized
 * by its verified file when the lock gives no size. SIZE_MAX: none left.
 */
static size_t decode_pick(struct decode *d)
{
	for (;;) {
		size_t best = SIZE_MAX, left = 0;
		pthread_mutex_lock(&d->mu);
		for (size_t k = 0; k < d->norder; k++) {
			size_t i = d->order[k];
			struct art *a = &d->s->v[i];
			if (d->taken[i])
				continue;
			left++;
			if ((a->unpack == ART_WHEEL || a->unpack == ART_CONDA) &&
			    !download_over(d, i))
				continue;
			if (a->size <= 0 && d->known[i] == 0) {
				char *f = cache_lookup(d->c, a->sha256);
				struct stat st;
				d->known[i] = f && stat(f, &st) == 0 ? st.st_size : -1;
				free(f);
			}
			int64_t sz = a->size > 0 ? a->size : d->known[i];
			int64_t bz = best == SIZE_MAX         ? -2
			             : d->s->v[best].size > 0 ? d->s->v[best].size
			                                      : d->known[best];
			if (sz > bz)
				best = i;
		}
		if (best != SIZE_MAX)
			d->taken[best] = 1;
		pthread_mutex_unlock(&d->mu);
		if (best != SIZE_MAX || left == 0 || tf_interrupted)
			return best;
		usleep(5000);
	}
}

/*
 * A wheel or conda package, from its verified file, decoded as its step
 * would (unpack_zip_parallel, unpack_conda_package), into d->parts[i]. The
 * decoder reads it through a hard link named as the step names it (the
 * URL's file name), so that progress events name the wheel, not its hash.
 */
static int unpack_python(struct decode *d, size_t i, const char *file, struct why *why)
{
	struct art *a = &d->s->v[i];
	char *base = url_basename(a->url);
	char *dir = xstrndup(d->parts[i], (size_t)(strrchr(d->parts[i], '/') - d->parts[i]));
	char *named = NULL;
	/* The link and its unlink move the file's ctime: a file this run hashed
	 * stays known as hashed (cache_was_hashed), or its step hashes it again. */
	int hashed = cache_was_hashed(file, a->sha256, NULL);
	if (fs_rel_is_safe(base) && strchr(base, '/') == NULL && base[0] != '.' &&
	    strlen(base) < 200) {
		named = path_join(dir, base);
		if (link(file, named) != 0) {
			free(named);
			named = NULL;
		}
	}
	const char *src = named ? named : file;
	struct unpack_share sh = {.cores = d->cores, .rank = d->rank[i]};
	int rc;
	if (a->unpack == ART_WHEEL) {
		/* A large wheel on every core, as wheel.c does it. */
		size_t ncpu = pool_ncpu();
		int parts =
		    a->size > PREDECODE_ZIP_SHARE_MIN || d->known[i] > PREDECODE_ZIP_SHARE_MIN
		        ? (int)(d->jobs < ncpu ? d->jobs : ncpu)
		        : 1;
		rc = unpack_pool_zip(d->c, src, d->parts[i], parts, &sh, &d->res[i], why);
		if (rc == 0 && d->s->hook.tree && !tf_interrupted)
			d->s->hook.tree(d->s->hook.arg, d->parts[i], &d->res[i]);
	} else {
		rc = unpack_pool_conda(d->c, src, str_ends_with(base, ".conda"), d->parts[i], &sh,
		                       &d->res[i], why);
	}
	/* Complete: any change to the tree after this moment is seen (tree_damage). */
	if (rc == 0)
		clock_gettime(CLOCK_REALTIME, &d->done[i]);
	if (named)
		unlink(named);
	if (named && hashed)
		cache_note_hashed(file, a->sha256);
	free(named);
	free(dir);
	free(base);
	return rc;
}

/*
 * One archive, on one of the pool's threads (decode_pick chooses which).
 * While downloading: a cached archive (verified when it was stored, and
 * re-hashed by fetch_all before use) is decoded from the cache once
 * fetch_all has re-hashed it; any other from its growing .part on a budget
 * (artifact.h: the lock's unpacked_size, else UNPACK_RATIO x its size, neither:
 * it waits for the verification); a failure there is not an error, the
 * archive is decoded again from the verified file, except a pinned budget
 * exceeded (stopped[i]). A wheel or conda package only from its verified
 * file. After the download: from the verified file, whatever the result.
 */
static void decode_one(size_t k, void *arg)
{
	struct decode *d = arg;
	(void)k;
	size_t i = decode_pick(d);
	if (i == SIZE_MAX)
		return;
	struct art *a = &d->s->v[i];
	if (d->ready[i] || d->parts[i] == NULL || tf_interrupted)
		return;
	/* A second pass (decode_verified) over an archive that failed: a new message. */
	why_clear(&d->why[i]);
	if (a->unpack == ART_WHEEL || a->unpack == ART_CONDA) {
		char *file = download_verified(d, i) ? cache_lookup(d->c, a->sha256) : NULL;
		if (file == NULL)
			return; /* the download failed: fetch_all says why */
		ev_log(d->c, EV_DEBUG, "unpacking %s ahead of its step", a->name);
		d->ready[i] = why_code(&d->why[i], unpack_python(d, i, file, &d->why[i])) == 0;
		free(file);
		return;
	}
	if (d->verified) {
		ev_log(d->c, EV_DEBUG, "unpacking %s", a->name);
		d->ready[i] =
		    why_code(&d->why[i], unpack_verified(d, a, a->path, i, &d->why[i])) == 0;
		return;
	}
	char *cached = cache_lookup(d->c, a->sha256);
	struct why w = {0};
	int rc;
	if (cached) {
		/* fetch_all re-hashes a cached copy first (and fetches it again
		 * when it does not match): decode what it verified. */
		while (!download_over(d, i) && !tf_interrupted)
			usleep(2000);
		free(cached);
		cached = download_verified(d, i) ? cache_lookup(d->c, a->sha256) : NULL;
		if (cached == NULL)
			return; /* decoded after the fetch, if it verified at all */
		ev_log(d->c, EV_DEBUG, "unpacking %s from the cache", a->name);
		rc = unpack_verified(d, a, cached, i, &w);
		free(cached);
	} else {
		uint64_t budget = a->unpacked >= 0 ? (uint64_t)a->unpacked
		                  : a->size > 0    ? (uint64_t)a->size * UNPACK_RATIO
		                                   : 0;
		if (budget == 0 && a->unpacked < 0)
			return; /* no size either: unpacked once verified */
		char *part_file = cache_part_path(d->c->cache_dir, a->sha256);
		struct unpack_follow f = {.bytes = &d->fj->items[i].stream_bytes,
		                          .restarts = &d->fj->items[i].stream_restarts,
		                          .done = &d->fj->done,
		                          .failed = &d->fj->items[i].stream_failed,
		                          .size = a->size,
		                          .label = a->name,
		                          .budget = budget,
		                          .budget_pinned = a->unpacked >= 0,
		                          .share = {.cores = d->cores, .rank = d->rank[i]}};
		ev_log(d->c, EV_DEBUG, "unpacking %s while it downloads", a->name);
		rc = unpack_archive_follow(d->c, part_file, &f, d->parts[i], a->strip, &d->res[i],
		                           &w);
		if (rc == TF_EINTEGRITY) {
			/* A pinned budget exceeded: the step fails with these words. */
			why_prefix(&w, "%s", a->name);
			why_move(&d->stopped[i], &w);
			why_code(&d->stopped[i], rc);
		} else if (rc != 0 && w.msg && strstr(w.msg, "decoding stopped")) {
			/* Not a failure: decoded again once the download verified. Said
			 * to -v alone when the download failed: that has its own event. */
			int lost = __atomic_load_n(f.failed, __ATOMIC_ACQUIRE);
			ev_log(d->c, lost ? EV_DEBUG : EV_INFO, "%s: %s", a->name, w.msg);
		}
		free(part_file);
		/*
		 * The download finished (verified, renamed into the cache) before
		 * this decoder reached it, or outran the budget and verified: decode
		 * the verified file now rather than after every other decoder, so
		 * that no thread idles while the largest archive is still decoding.
		 */
		if (rc != 0 && rc != TF_EINTEGRITY && !tf_interrupted && download_verified(d, i) &&
		    (cached = cache_lookup(d->c, a->sha256)) != NULL) {
			why_clear(&w);
			ev_log(d->c, EV_DEBUG, "unpacking %s (verified)", a->name);
			rc = unpack_verified(d, a, cached, i, &w);
			free(cached);
		}
	}
	d->ready[i] = rc == 0;
	why_clear(&w);
}

static int cmp_art_size(const void *x, const void *y, void *arg)
{
	const struct art *v = arg;
	int64_t a = v[*(const size_t *)x].size, b = v[*(const size_t *)y].size;
	return a < b ? 1 : a > b ? -1 : 0;
}

/* Every artifact of s downloaded by job; none decoded until decode_plan(). */
void decode_init(struct decode *d, struct ctx *c, struct artset *s, struct fetch_job *job)
{
	size_t n = s->n, one = n ? n : 1;
	memset(job, 0, sizeof(*job));
	job->c = c;
	job->items = xcalloc(one, sizeof(struct fetch_item));
	job->n = n;
	for (size_t i = 0; i < n; i++) {
		job->items[i].name = s->v[i].name;
		job->items[i].url = s->v[i].url;
		job->items[i].sha256 = s->v[i].sha256;
		job->items[i].size = s->v[i].size;
	}
	memset(d, 0, sizeof(*d));
	d->c = c;
	d->s = s;
	d->fj = job;
	d->order = xcalloc(one, sizeof(size_t));
	d->parts = xcalloc(one, sizeof(char *));
	d->res = xcalloc(one, sizeof(struct unpack_result));
	d->ready = xcalloc(one, sizeof(int));
	d->why = xcalloc(one, sizeof(struct why));
	d->stopped = xcalloc(one, sizeof(struct why));
	d->taken = xcalloc(one, sizeof(int));
	d->known = xcalloc(one, sizeof(int64_t));
	d->done = xcalloc(one, sizeof(struct timespec));
	d->jobs = decoders(c);
	d->rank = xcalloc(one, sizeof(size_t));
	d->cores = cores_new(pool_ncpu(), one);
	pthread_mutex_init(&d->mu, NULL);
}

/* The decoders' queue: every archive with a part and not ready, largest first. */
void decode_plan(struct decode *d)
{
	d->norder = 0;
	for (size_t i = 0; i < d->s->n; i++)
		if (d->parts[i] && !d->ready[i]) {
			d->order[d->norder++] = i;
			d->taken[i] = 0;
		}
	qsort_r(d->order, d->norder, sizeof(*d->order), cmp_art_size, d->s->v);
	for (size_t k = 0; k < d->norder; k++)
		d->rank[d->order[k]] = k;
}

/*
 * Runs fetch_all on its own thread while the pool decodes d->order from the
 * growing downloads (decode_one); then fills each artifact's path in the
 * cache. Returns fetch_all's result; *stopped the first archive whose pinned
 * budget was exceeded by bytes that then verified (the lock is wrong), or n.
 */
int decode_fetch(struct decode *d, size_t jobs, size_t *stopped)
{
	struct artset *s = d->s;
	pthread_t th;
	int threaded = pthread_create(&th, NULL, fetch_job_run, d->fj) == 0;
	if (!threaded)
		fetch_job_run(d->fj);
	else
		pool_run(d->norder, jobs, decode_one, d);
	if (threaded)
		pthread_join(th, NULL);
	*stopped = s->n;
	for (size_t i = 0; i < s->n; i++) {
		if (d->stopped[i].code && *stopped == s->n)
			*stopped = i;
		if (d->fj->items[i].path && s->v[i].path == NULL)
			s->v[i].path = xstrdup(d->fj->items[i].path);
		s->v[i].cached = d->fj->items[i].cached;
	}
	return d->fj->rc;
}

/* After a verified fetch: what the decoders did not finish, from the verified files. */
void decode_verified(struct decode *d, size_t jobs)
{
	d->verified = 1;
	decode_plan(d);
	pool_run(d->norder, jobs, decode_one, d);
}

void decode_release(struct decode *d, const char *keep)
{
	for (size_t i = 0; i < d->s->n; i++) {
		/* stage/ itself is the caller's: the txn removes it on failure. */
		if (d->parts[i] && (keep == NULL || strcmp(d->parts[i], keep) != 0))
			fs_rmtree(d->parts[i]);
		free(d->parts[i]);
		why_clear(&d->why[i]);
		why_clear(&d->stopped[i]);
		unpack_result_release(&d->res[i]);
		fetch_item_release(&d->fj->items[i]);
	}
	free(d->order);
	free(d->parts);
	free(d->res);
	free(d->ready);
	free(d->why);
	free(d->stopped);
	free(d->taken);
	free(d->known);
	free(d->done);
	free(d->rank);
	if (cores_starved(d->cores))
		ev_log(d->c, EV_DEBUG, "decoders let a core go %llu times waiting for bytes",
		       (unsigned long long)cores_starved(d->cores));
	cores_free(d->cores);
	pthread_mutex_destroy(&d->mu);
	free(d->fj->items);
}