/*
 * artifacts.c - what the cuda and cudnn steps share: turning a manifest's
 * artifacts (inline, or resolved from a pinned NVIDIA redistrib JSON) into
 * verified files in the cache, and unpacking several archives into one
 * staged tree.
 *
 * Invariant: nothing here writes outside the cache and the staging directory
 * the caller got from txn_stage_dir(); placement is the caller's.
 */
#include "artifact.h"
#include "artifact_int.h"
#include "unpack_pool.h"
#include "fs.h"
#include "error.h"
#include "event.h"
#include "digest.h"
#include "pool.h"

#include <pthread.h>

#include <dirent.h>
#include <sys/file.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void artset_add(struct artset *s, const char *name, const char *url, const char *sha256,
                int64_t size, int strip)
{
	s->v = xrealloc(s->v, (s->n + 1) * sizeof(*s->v));
	struct art *a = &s->v[s->n++];
	memset(a, 0, sizeof(*a));
	/* Unnamed: its file name (the URL's last part) names it in messages. */
	const char *base = strrchr(url, '/');
	a->name = xstrdup(name ? name : base && base[1] ? base + 1 : url);
	a->url = xstrdup(url);
	snprintf(a->sha256, sizeof(a->sha256), "%s", sha256);
	a->size = size;
	a->strip = strip;
	a->unpacked = -1;
}

void artset_release(struct artset *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free(s->v[i].url);
		free(s->v[i].path);
	}
	free(s->v);
	if (s->hook.release)
		s->hook.release(s->hook.arg);
	memset(s, 0, sizeof(*s));
}

void artset_add_artifact(struct artset *s, const struct artifact *a, int default_strip)
{
	artset_add(s, a->name.set ? a->name.s : NULL, a->url.s, a->sha256.s,
	           a->size.set ? a->size.v : -1, a->strip.set ? (int)a->strip.v : default_strip);
	s->v[s->n - 1].unpacked = a->unpacked_size.set ? a->unpacked_size.v : -1;
}

int artset_fetch(struct ctx *c, struct artset *s, struct step *st)
{
	struct fetch_item *items = xcalloc(s->n ? s->n : 1, sizeof(*items));
	int rc = 0;
	for (size_t i = 0; i < s->n; i++) {
		items[i].name = s->v[i].name;
		items[i].url = s->v[i].url;
		items[i].sha256 = s->v[i].sha256;
		items[i].size = s->v[i].size;
	}
	rc = fetch_all(c, items, s->n);
	for (size_t i = 0; i < s->n; i++) {
		if (items[i].err && rc != 0 && st->error == NULL)
			step_fail(st, "%s",
			          items[i].errmsg ? items[i].errmsg : tf_strerror(items[i].err));
		if (items[i].path)
			s->v[i].path = xstrdup(items[i].path);
		s->v[i].cached = items[i].cached;
		fetch_item_release(&items[i]);
	}
	free(items);
	return rc;
}

int step_fail_unpinned(struct step *s, const struct manifest *m, const char *what,
                       const struct redist_ref *r)
{
	step_fail(s,
	          "%s:%d:%d: %s %s has no sha256 yet: pin it with `tfprov lock %s` (it fetches "
	          "the JSON over TLS, trusts it on first use and writes the archives inline)",
	          m->path, r->pos.line, r->pos.col, what, r->json.url.s ? r->json.url.s : "",
	          m->path);
	return TF_EMANIFEST;
}

int artset_add_redist(struct ctx *c, struct artset *s, const struct redist_ref *r,
                      const char *platform, struct step *st)
{
	struct artset json = {0};
	struct redist_artifact *ra = NULL;
	size_t nra = 0;
	char *err = NULL;
	int rc = 0;
	const char **names = xcalloc(r->ncomponents + 1, sizeof(*names));
	artset_add_artifact(&json, &r->json, 0);
	rc = artset_fetch(c, &json, st);
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < r->ncomponents; i++)
		names[i] = r->components[i].s;
	rc = redist_resolve(json.v[0].path, r->json.url.s, platform,
	                    r->variant.set ? r->variant.s : NULL, names, r->ncomponents, &ra, &nra,
	                    &err);
	if (rc != 0) {
		step_fail(st, "%s: %s", r->json.url.s, err ? err : tf_strerror(rc));
		goto out;
	}
	for (size_t i = 0; i < nra; i++)
		artset_add(s, ra[i].component, ra[i].url, ra[i].sha256, ra[i].size, ra[i].strip);
out:
	redist_artifacts_free(ra, nra);
	free(names);
	free(err);
	artset_release(&json);
	return rc;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct place_entry *)a)->path, ((const struct place_entry *)b)->path);
}

static size_t path_hash(const char *p)
{
	size_t h = 1469598103934665603ull;
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

static void ht_insert(struct staged *t, size_t idx)
{
	size_t mask = t->htcap - 1;
	size_t i = path_hash(t->v[idx].path) & mask;
	while (t->ht[i])
		i = (i + 1) & mask;
	t->ht[i] = idx + 1;
}

/* Archives of 10k files: a linear search per entry would be quadratic. */
static struct place_entry *staged_find(struct staged *t, const char *path)
{
	if (t->htcap == 0)
		return NULL;
	size_t mask = t->htcap - 1;
	for (size_t i = path_hash(path) & mask; t->ht[i]; i = (i + 1) & mask)
		if (strcmp(t->v[t->ht[i] - 1].path, path) == 0)
			return &t->v[t->ht[i] - 1];
	return NULL;
}

void staged_add(struct staged *t, const char *path, char type, const char *sha256, int64_t size,
                unsigned mode, const char *link)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 256;
		t->v = xrealloc(t->v, t->cap * sizeof(*t->v));
	}
	struct place_entry *e = &t->v[t->n++];
	e->path = xstrdup(path);
	e->type = type;
	e->sha256 = sha256 ? xstrdup(sha256) : NULL;
	e->size = size;
	e->mode = mode;
	e->link = link ? xstrdup(link) : NULL;
	if (2 * t->n > t->htcap) {
		free(t->ht);
		t->htcap = t->htcap ? t->htcap * 2 : 1024;
		while (2 * t->n > t->htcap)
			t->htcap *= 2;
		t->ht = xcalloc(t->htcap, sizeof(*t->ht));
		for (size_t i = 0; i < t->n; i++)
			ht_insert(t, i);
	} else {
		ht_insert(t, t->n - 1);
	}
}

void staged_release(struct staged *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free((char *)t->v[i].path);
		free((char *)t->v[i].sha256);
		free((char *)t->v[i].link);
	}
	free(t->v);
	free(t->ht);
	memset(t, 0, sizeof(*t));
}

static int record_entry(void *ud, const char *rel, const char *host, const struct stat *sb)
{
	if (S_ISDIR(sb->st_mode)) {
		staged_add(ud, rel, 'd', NULL, 0, sb->st_mode & 07777, NULL);
	} else if (S_ISLNK(sb->st_mode)) {
		char buf[4096];
		ssize_t n = readlink(host, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		staged_add(ud, rel, 'l', NULL, 0, sb->st_mode & 07777, buf);
	} else if (S_ISREG(sb->st_mode)) {
		char hex[65];
		int64_t size = 0;
		int ok = sha256_file(host, hex, &size) == 0;
		staged_add(ud, rel, 'f', ok ? hex : NULL, size, sb->st_mode & 07777, NULL);
	} /* sockets, fifos: not part of a tree */
	return 0;
}

int staged_record_tree(struct staged *t, const char *host)
{
	return fs_walk(host, record_entry, t);
}

/*
 * Unpacks every artifact into stage/ (created), merging their trees the way
 * NVIDIA's own tooling lays a toolkit out: the components' bin, include, lib,
 * nvvm... directories become one tree. Top-level documents every archive
 * carries (LICENSE, README) are kept from the first archive; any other path
 * two archives both provide must be identical, else it is an error.
 */
/*
 * Moves one unpacked archive (part/) into the merged tree (stage/). The first
 * archive is unpacked into stage/ itself (part == stage): its entries are
 * only registered, which saves a rename per file.
 */
static int merge_part(const char *stage, const char *part, const char *name,
                      const struct unpack_result *res, struct staged *out, struct step *st)
{
	int rc = 0;
	int in_place = strcmp(stage, part) == 0;
	for (size_t k = 0; k < res->n && rc == 0; k++) {
		const struct unpack_entry *e = &res->v[k];
		char *src = path_join(part, e->path);
		char *dst = path_join(stage, e->path);
		struct place_entry *prev = staged_find(out, e->path);
		if (in_place) {
			char type = e->type == 'h' ? 'f' : (char)e->type;
			if (prev == NULL)
				staged_add(out, e->path, type, e->sha256[0] ? e->sha256 : NULL,
				           type == 'd' ? 0 : e->size, e->mode, e->link);
		} else if (e->type == 'd') {
			if (prev == NULL) {
				mkdirs_at(AT_FDCWD, dst, 0755);
				staged_add(out, e->path, 'd', NULL, 0, e->mode, NULL);
			}
		} else if (prev) {
			int same =
			    prev->sha256 && e->sha256[0] && strcmp(prev->sha256, e->sha256) == 0;
			if (!same && strchr(e->path, '/') != NULL) {
				step_fail(
				    st,
				    "%s and an earlier archive both provide %s with different "
				    "content",
				    name, e->path);
				rc = TF_ECONFLICT;
			}
		} else {
			char type = e->type == 'h' ? 'f' : (char)e->type;
			char *parent = xstrndup(dst, (size_t)(strrchr(dst, '/') - dst));
			mkdirs_at(AT_FDCWD, parent, 0755);
			free(parent);
			if (rename(src, dst) != 0) {
				step_fail(st, "cannot stage %s: %s", e->path, strerror(errno));
				rc = TF_EIO;
			} else {
				staged_add(out, e->path, type, e->sha256[0] ? e->sha256 : NULL,
				           e->size, e->mode, e->link);
			}
		}
		free(src);
		free(dst);
	}
	return rc;
}

struct fetch_job {
	struct ctx *c;
	struct fetch_item *items;
	size_t n;
	int rc;
	int done;
};

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

static size_t decoders(const struct ctx *c)
{
	size_t n = pool_ncpu();
	if (c->jobs > 0)
		return (size_t)c->jobs;
	return n < DECODERS_MIN ? DECODERS_MIN : n < DECODERS_MAX ? n : DECODERS_MAX;
}

/* A wheel larger than this is decoded ahead by every decoder (wheel.c's WHEEL_SHARE_MIN). */
#define PREDECODE_ZIP_SHARE_MIN (16 << 20)

/* The archives of one artset being decoded, up to --jobs at once. */
struct decode {
	struct ctx *c;
	struct artset *s;
	struct fetch_job *fj;
	size_t *order; /* indexes of the archives decoded here, largest first */
	size_t norder;
	char **parts; /* where each archive is unpacked; NULL: not decoded here */
	struct unpack_result *res;
	int *ready;          /* unpacked completely */
	int *rc;             /* after the download: unpack_archive's result */
	char **err;          /* ... and its message */
	char **stopped;      /* before: why decoding on a pinned budget stopped */
	int verified;        /* 0: follow the downloads; 1: from the verified files */
	size_t jobs;         /* decoders */
	struct cores *cores; /* the cores they share (cores.h) */
	size_t *rank;        /* each archive's place in `order`: its claim on a core */
	pthread_mutex_t mu;
	int *taken;            /* decode_pick gave it to a decoder */
	int64_t *known;        /* size of the verified file, when the lock has none */
	struct timespec *done; /* when the tree was complete (artset_take_predecoded) */
};

/* The verified file (or the cache's copy), on the lock's unpacked_size if any. */
static int unpack_verified(struct decode *d, struct art *a, const char *file, size_t i, char **err)
{
	struct unpack_share sh = {.cores = d->cores, .rank = d->rank[i]};
	return unpack_pool_archive(d->c, file, a->name, a->unpacked >= 0 ? a->unpacked : -1,
	                           d->parts[i], a->strip, &sh, &d->res[i], err);
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
	return __atomic_load_n(&d->fj->done, __ATOMIC_ACQUIRE) && it->err == 0 && it->path;
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
static int unpack_python(struct decode *d, size_t i, const char *file, char **err)
{
	struct art *a = &d->s->v[i];
	char *base = url_basename(a->url);
	char *dir = xstrndup(d->parts[i], (size_t)(strrchr(d->parts[i], '/') - d->parts[i]));
	char *named = NULL;
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
		rc = unpack_pool_zip(d->c, src, d->parts[i], parts, &sh, &d->res[i], err);
		if (rc == 0 && d->s->hook.tree && !tf_interrupted)
			d->s->hook.tree(d->s->hook.arg, d->parts[i], &d->res[i]);
	} else {
		rc = unpack_pool_conda(d->c, src, str_ends_with(base, ".conda"), d->parts[i], &sh,
		                       &d->res[i], err);
	}
	/* Complete: any change to the tree after this moment is seen (tree_damage). */
	if (rc == 0)
		clock_gettime(CLOCK_REALTIME, &d->done[i]);
	if (named)
		unlink(named);
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
	free(d->err[i]);
	d->err[i] = NULL;
	if (a->unpack == ART_WHEEL || a->unpack == ART_CONDA) {
		char *file = download_verified(d, i) ? cache_lookup(d->c, a->sha256) : NULL;
		if (file == NULL)
			return; /* the download failed: fetch_all says why */
		ev_log(d->c, EV_DEBUG, "unpacking %s ahead of its step", a->name);
		d->rc[i] = unpack_python(d, i, file, &d->err[i]);
		d->ready[i] = d->rc[i] == 0;
		free(file);
		return;
	}
	if (d->verified) {
		ev_log(d->c, EV_DEBUG, "unpacking %s", a->name);
		d->rc[i] = unpack_verified(d, a, a->path, i, &d->err[i]);
		d->ready[i] = d->rc[i] == 0;
		return;
	}
	char *cached = cache_lookup(d->c, a->sha256);
	char *err = NULL;
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
		rc = unpack_verified(d, a, cached, i, &err);
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
		                           &err);
		if (rc != 0 && err && strstr(err, "decoding stopped"))
			ev_log(d->c, rc == TF_EINTEGRITY ? EV_ERROR : EV_INFO, "%s: %s", a->name,
			       err);
		if (rc == TF_EINTEGRITY)
			d->stopped[i] = xasprintf("%s: %s", a->name, err ? err : tf_strerror(rc));
		free(part_file);
		/*
		 * The download finished (verified, renamed into the cache) before
		 * this decoder reached it, or outran the budget and verified: decode
		 * the verified file now rather than after every other decoder, so
		 * that no thread idles while the largest archive is still decoding.
		 */
		if (rc != 0 && rc != TF_EINTEGRITY && !tf_interrupted && download_verified(d, i) &&
		    (cached = cache_lookup(d->c, a->sha256)) != NULL) {
			free(err);
			err = NULL;
			ev_log(d->c, EV_DEBUG, "unpacking %s (verified)", a->name);
			rc = unpack_verified(d, a, cached, i, &err);
			free(cached);
		}
	}
	d->ready[i] = rc == 0;
	free(err);
}

static int cmp_art_size(const void *x, const void *y, void *arg)
{
	const struct art *v = arg;
	int64_t a = v[*(const size_t *)x].size, b = v[*(const size_t *)y].size;
	return a < b ? 1 : a > b ? -1 : 0;
}

/* Every artifact of s downloaded by job; none decoded until decode_plan(). */
static void decode_init(struct decode *d, struct ctx *c, struct artset *s, struct fetch_job *job)
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
	d->rc = xcalloc(one, sizeof(int));
	d->err = xcalloc(one, sizeof(char *));
	d->stopped = xcalloc(one, sizeof(char *));
	d->taken = xcalloc(one, sizeof(int));
	d->known = xcalloc(one, sizeof(int64_t));
	d->done = xcalloc(one, sizeof(struct timespec));
	d->jobs = decoders(c);
	d->rank = xcalloc(one, sizeof(size_t));
	d->cores = cores_new(pool_ncpu(), one);
	pthread_mutex_init(&d->mu, NULL);
}

/* The decoders' queue: every archive with a part and not ready, largest first. */
static void decode_plan(struct decode *d)
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
static int decode_fetch(struct decode *d, size_t jobs, size_t *stopped)
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
		if (d->stopped[i] && *stopped == s->n)
			*stopped = i;
		if (d->fj->items[i].path && s->v[i].path == NULL)
			s->v[i].path = xstrdup(d->fj->items[i].path);
		s->v[i].cached = d->fj->items[i].cached;
	}
	return d->fj->rc;
}

/* After a verified fetch: what the decoders did not finish, from the verified files. */
static void decode_verified(struct decode *d, size_t jobs)
{
	d->verified = 1;
	decode_plan(d);
	pool_run(d->norder, jobs, decode_one, d);
}

static void decode_release(struct decode *d, const char *keep)
{
	for (size_t i = 0; i < d->s->n; i++) {
		/* stage/ itself is the caller's: the txn removes it on failure. */
		if (d->parts[i] && (keep == NULL || strcmp(d->parts[i], keep) != 0))
			fs_rmtree(d->parts[i]);
		free(d->parts[i]);
		free(d->err[i]);
		free(d->stopped[i]);
		unpack_result_release(&d->res[i]);
		fetch_item_release(&d->fj->items[i]);
	}
	free(d->order);
	free(d->parts);
	free(d->res);
	free(d->ready);
	free(d->rc);
	free(d->err);
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

/*
 * Decode-ahead (exec.c's prefetch): archives unpacked before their step runs,
 * into this run's scratch directory in the cache, <cache>/unpack/run-XXXXXX/
 * <sha256>, held by an flock'ed run-XXXXXX.lock beside it for the run's
 * lifetime. Kept in memory by sha256 until a step takes one over
 * (predecoded_take) or the run ends (artset_predecode_release).
 */
struct predecoded_entry {
	char sha256[65];
	int kind; /* enum art_unpack */
	int strip;
	int taken;
	char *name;
	char *base; /* the URL's file name */
	char *path;
	struct unpack_result res;
	int64_t size; /* of the verified file */
	dev_t dev;    /* the verified cache file (a wheelhouse links it) */
	ino_t ino;
	struct timespec done; /* the tree was complete; nothing in it changes after */
};

struct predecoded {
	char *dir;
	char *lock;
	int lockfd;
	struct predecoded_entry *v;
	size_t n;
};

/*
 * Removes the scratch of runs that are gone: a run-X.lock nobody holds, with
 * its run-X/; a run-X/ whose lock is gone (a run's directory is made only
 * once its lock is held, and the lock is removed only after it).
 */
static void scratch_clean_stale(struct ctx *c, const char *base)
{
	DIR *dir = opendir(base);
	struct dirent *e;
	while (dir && (e = readdir(dir)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *p = path_join(base, e->d_name);
		if (str_ends_with(e->d_name, ".lock")) {
			int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
			if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
				char *run = xstrndup(p, strlen(p) - 5);
				ev_log(c, EV_DEBUG, "removing %s: left by a run that ended", run);
				fs_rmtree(run);
				unlink(p);
				free(run);
			}
			if (fd >= 0)
				close(fd);
		} else {
			char *lock = xasprintf("%s.lock", p);
			struct stat st;
			if (lstat(lock, &st) != 0 && errno == ENOENT) {
				ev_log(c, EV_DEBUG, "removing %s: left by a run that ended", p);
				fs_rmtree(p);
			}
			free(lock);
		}
		free(p);
	}
	if (dir)
		closedir(dir);
}

/* This run's scratch directory, its lock held; stale ones removed first. */
static int scratch_open(struct ctx *c, struct predecoded *p, char **errmsg)
{
	char *base = path_join(c->cache_dir, "unpack");
	int rc = 0;
	if (mkdir(base, 0700) != 0 && errno != EEXIST) {
		*errmsg = xasprintf("cannot create %s: %s", base, strerror(errno));
		free(base);
		return TF_EIO;
	}
	for (int tries = 0; p->dir == NULL && rc == 0; tries++) {
		char *lock = xasprintf("%s/run-XXXXXX.lock", base);
		int fd = mkostemps(lock, 5, O_CLOEXEC);
		struct stat a, b;
		if (fd < 0 || flock(fd, LOCK_EX) != 0) {
			*errmsg =
			    xasprintf("cannot create a lock in %s: %s", base, strerror(errno));
			rc = TF_EIO;
		} else if (fstat(fd, &a) == 0 && stat(lock, &b) == 0 && a.st_ino == b.st_ino &&
		           a.st_dev == b.st_dev) {
			/* Still ours: another run's stale sweep did not take it first. */
			char *run = xstrndup(lock, strlen(lock) - 5);
			if (mkdir(run, 0700) != 0) {
				*errmsg = xasprintf("cannot create %s: %s", run, strerror(errno));
				rc = TF_EIO;
				unlink(lock);
				free(run);
			} else {
				p->dir = run;
				p->lock = lock;
				p->lockfd = fd;
				lock = NULL;
				fd = -1;
			}
		} else if (tries > 8) {
			*errmsg = xasprintf("cannot hold a lock in %s", base);
			rc = TF_EIO;
		}
		if (fd >= 0)
			close(fd);
		free(lock);
	}
	free(base);
	return rc;
}

void artset_mark_unpack(struct artset *s, size_t from)
{
	for (size_t i = from; i < s->n; i++)
		s->v[i].unpack = ART_TREE;
}

void artset_mark_python(struct artset *s, size_t i, enum art_unpack kind)
{
	if (i < s->n)
		s->v[i].unpack = kind;
}

int artset_predecode(struct ctx *c, struct artset *s, size_t *failed, char **errmsg)
{
	struct fetch_job job;
	struct decode d;
	size_t jobs = decoders(c), stopped = 0, n = s->n, npy = 0;
	int rc = 0;
	*failed = n;
	*errmsg = NULL;
	decode_init(&d, c, s, &job);
	struct predecoded *p = c->predecoded;
	if (p == NULL) {
		p = c->predecoded = xcalloc(1, sizeof(*p));
		p->lockfd = -1;
	}
	char *base = path_join(c->cache_dir, "unpack");
	scratch_clean_stale(c, base);
	free(base);
	/*
	 * A tree in a cache on another filesystem than the root cannot be
	 * renamed into a stage: the steps unpack their archives themselves then
	 * (decoding twice would cost more than decoding late). A conda package
	 * is extracted into the package cache, beside the scratch: always.
	 */
	struct stat rs, cs;
	int same_fs = (c->rootfd >= 0 ? fstat(c->rootfd, &rs) : stat(c->root, &rs)) == 0 &&
	              stat(c->cache_dir, &cs) == 0 && rs.st_dev == cs.st_dev;
	if (!same_fs)
		ev_log(c, EV_DEBUG,
		       "the cache %s is on another filesystem than the root: each step unpacks "
		       "its archives",
		       c->cache_dir);
	for (size_t i = 0; i < n; i++) {
		int first = s->v[i].unpack != ART_FILE && (same_fs || s->v[i].unpack == ART_CONDA);
		for (size_t j = 0; j < i && first; j++)
			first = !(s->v[j].unpack != ART_FILE &&
			          strcmp(s->v[j].sha256, s->v[i].sha256) == 0);
		for (size_t j = 0; j < p->n && first; j++)
			first = strcmp(p->v[j].sha256, s->v[i].sha256) != 0;
		if (!first)
			continue;
		if (p->dir == NULL && (rc = scratch_open(c, p, errmsg)) != 0) {
			*failed = i;
			goto out;
		}
		d.parts[i] = path_join(p->dir, s->v[i].sha256);
		npy += s->v[i].unpack != ART_TREE;
	}
	decode_plan(&d);
	if (d.norder)
		ev_log(
		    c, EV_DEBUG,
		    "decoding %zu archive%s (%zu wheels and conda packages) while they download, "
		    "into %s",
		    d.norder, d.norder == 1 ? "" : "s", npy, p->dir);
	rc = decode_fetch(&d, jobs, &stopped);
	if (rc != 0)
		goto out; /* fetch_all reported what failed */
	if (stopped < n) {
		*failed = stopped;
		*errmsg = xstrdup(d.stopped[stopped]);
		rc = TF_EINTEGRITY;
		goto out;
	}
	decode_verified(&d, jobs);
	for (size_t i = 0; i < n; i++) {
		if (d.parts[i] == NULL)
			continue;
		if (s->v[i].unpack != ART_TREE && (d.rc[i] != 0 || !d.ready[i])) {
			/* Its step decodes it again and reports what is wrong, as ever. */
			ev_log(c, EV_DEBUG, "%s: not decoded ahead (%s): its step decodes it",
			       s->v[i].name,
			       d.err[i] ? d.err[i] : tf_strerror(d.rc[i] ? d.rc[i] : TF_EINTR));
			continue;
		}
		if (d.rc[i] != 0 || !d.ready[i]) {
			rc = d.rc[i] ? d.rc[i] : TF_EINTR;
			*failed = i;
			*errmsg = xasprintf("%s: %s", s->v[i].name,
			                    d.err[i] ? d.err[i] : tf_strerror(rc));
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (d.parts[i] == NULL || !d.ready[i])
			continue;
		p->v = xrealloc(p->v, (p->n + 1) * sizeof(*p->v));
		struct predecoded_entry *e = &p->v[p->n++];
		memset(e, 0, sizeof(*e));
		snprintf(e->sha256, sizeof(e->sha256), "%s", s->v[i].sha256);
		e->kind = s->v[i].unpack;
		e->strip = s->v[i].strip;
		e->name = xstrdup(s->v[i].name);
		struct stat fst;
		e->base = url_basename(s->v[i].url);
		e->size = -1;
		if (s->v[i].path && stat(s->v[i].path, &fst) == 0) {
			e->dev = fst.st_dev;
			e->ino = fst.st_ino;
			e->size = fst.st_size;
		}
		e->done = d.done[i];
		e->path = d.parts[i];
		e->res = d.res[i];
		d.parts[i] = NULL;
		memset(&d.res[i], 0, sizeof(d.res[i]));
	}
out:
	decode_release(&d, NULL);
	return rc;
}

void artset_predecode_release(struct ctx *c)
{
	struct predecoded *p = c->predecoded;
	if (p == NULL)
		return;
	for (size_t i = 0; i < p->n; i++) {
		free(p->v[i].path);
		free(p->v[i].name);
		free(p->v[i].base);
		unpack_result_release(&p->v[i].res);
	}
	if (p->dir) {
		fs_rmtree(p->dir);
		unlink(p->lock);
	}
	if (p->lockfd >= 0)
		close(p->lockfd);
	free(p->dir);
	free(p->lock);
	free(p->v);
	free(p);
	c->predecoded = NULL;
}

/*
 * Takes over the archive decode-ahead unpacked (same sha256, same strip):
 * its tree renamed to dest, its file list into *res. 0 when there is none or
 * the rename fails (another filesystem, ...): then it is decoded again.
 */
static int predecoded_take(struct ctx *c, const struct art *a, const char *dest,
                           struct unpack_result *res)
{
	struct predecoded *p = c->predecoded;
	for (size_t i = 0; p && i < p->n; i++) {
		struct predecoded_entry *e = &p->v[i];
		if (e->taken || e->kind != ART_TREE || e->strip != a->strip ||
		    strcmp(e->sha256, a->sha256) != 0)
			continue;
		e->taken = 1;
		if (rename(e->path, dest) != 0) {
			ev_log(c, EV_DEBUG, "%s: cannot move %s to %s (%s): unpacking it again",
			       a->name, e->path, dest, strerror(errno));
			fs_rmtree(e->path);
			unpack_result_release(&e->res);
			return 0;
		}
		ev_log(c, EV_DEBUG, "%s: unpacked ahead, moved into %s", a->name, dest);
		*res = e->res;
		memset(&e->res, 0, sizeof(e->res));
		return 1;
	}
	return 0;
}

static int ts_after(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec > b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec > b->tv_nsec);
}

/*
 * What is wrong with a tree taken from the scratch (malloc'd), or NULL: an
 * entry of its list missing or of another type or size, or changed after
 * the decoder finished (a file's or directory's ctime, which no one can set
 * back, is later than that).
 */
static char *tree_damage(const char *dir, const struct unpack_result *res,
                         const struct timespec *done)
{
	char *bad = NULL;
	for (size_t k = 0; k < res->n && bad == NULL; k++) {
		const struct unpack_entry *e = &res->v[k];
		char *p = path_join(dir, e->path);
		struct stat st;
		if (lstat(p, &st) != 0)
			bad = xasprintf("%s: %s", e->path, strerror(errno));
		else if ((e->type == 'd' && !S_ISDIR(st.st_mode)) ||
		         (e->type == 'l' && !S_ISLNK(st.st_mode)) ||
		         ((e->type == 'f' || e->type == 'h') &&
		          (!S_ISREG(st.st_mode) || st.st_size != e->size)))
			bad = xasprintf("%s is not the %s it was", e->path,
			                e->type == 'd'   ? "directory"
			                : e->type == 'l' ? "link"
			                                 : "file");
		else if (ts_after(&st.st_ctim, done))
			bad = xasprintf("%s changed after it was decoded", e->path);
		free(p);
	}
	return bad;
}

/*
 * Is file the verified artifact of e? The same inode (a hard link of the
 * cache file), else a file of the same name and size whose sha256 is e's
 * (a copy: the wheelhouse copies what it installs, pyenv.c).
 */
static int same_artifact(const struct predecoded_entry *e, const char *file, const struct stat *fst)
{
	if (e->ino != 0 && e->dev == fst->st_dev && e->ino == fst->st_ino)
		return 1;
	const char *b = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
	char hex[65];
	return e->base && strcmp(e->base, b) == 0 && e->size == fst->st_size &&
	       sha256_file(file, hex, NULL) == 0 && strcmp(hex, e->sha256) == 0;
}

int artset_take_predecoded(struct ctx *c, enum art_unpack kind, const char *sha256,
                           const char *file, const char *dest, struct unpack_result *res)
{
	struct predecoded *p = c ? c->predecoded : NULL;
	struct stat fst;
	if (p == NULL || (sha256 == NULL && (file == NULL || stat(file, &fst) != 0)))
		return -ENOENT;
	for (size_t i = 0; i < p->n; i++) {
		struct predecoded_entry *e = &p->v[i];
		if (e->taken || e->kind != (int)kind)
			continue;
		if (sha256 ? strcmp(e->sha256, sha256) != 0 : !same_artifact(e, file, &fst))
			continue;
		e->taken = 1;
		if (rename(e->path, dest) != 0) {
			ev_log(c, errno == EXDEV ? EV_DEBUG : EV_WARN,
			       "%s: cannot move its tree decoded ahead %s to %s (%s): unpacking it "
			       "again",
			       e->name, e->path, dest, strerror(errno));
			fs_rmtree(e->path);
			unpack_result_release(&e->res);
			return -ENOENT;
		}
		char *bad = tree_damage(dest, &e->res, &e->done);
		if (bad) {
			ev_log(
			    c, EV_WARN,
			    "%s: its tree decoded ahead in the cache's scratch was changed (%s): "
			    "unpacking it again",
			    e->name, bad);
			free(bad);
			fs_rmtree(dest);
			unpack_result_release(&e->res);
			return -ENOENT;
		}
		ev_log(c, EV_DEBUG, "%s: unpacked ahead, taken from the scratch into %s", e->name,
		       dest);
		*res = e->res;
		memset(&e->res, 0, sizeof(e->res));
		return 0;
	}
	return -ENOENT;
}

/*
 * Fetches and unpacks every artifact into stage/ (created), merging their
 * trees the way NVIDIA's own tooling lays a toolkit out: the components'
 * bin, include, lib, nvvm... directories become one tree. Top-level
 * documents every archive carries (LICENSE, README) are kept from the first
 * archive; any other path two archives both provide must be identical.
 *
 * An archive decode-ahead already unpacked (artset_predecode) is renamed
 * into place. Downloading and decoding the others overlap: fetch_all runs on
 * its own thread while up to --jobs archives (default: one per core),
 * largest first, are unpacked from their growing .part files (each decoder
 * with its own writer thread, unpack.c), every one into its own stage/.partN
 * (a single archive: into stage/ itself). Unverified bytes are decoded on a
 * budget (decode_one); nothing of an archive is used before fetch_all has
 * verified its sha256 and size; an archive whose download started over,
 * failed or ran out of budget is unpacked from the verified file afterwards.
 * The merge into stage/ runs last, in the manifest's order. Memory: each
 * decoder holds at most unpack.c's buffer pool plus its decompressor's
 * window.
 */
int artset_fetch_unpack(struct ctx *c, struct artset *s, const char *stage, struct staged *out,
                        struct step *st)
{
	size_t n = s->n, stopped = 0;
	struct fetch_job job;
	struct decode d;
	size_t jobs = decoders(c);
	int rc = 0;
	decode_init(&d, c, s, &job);
	for (size_t i = 0; i < n; i++)
		/* One archive goes straight into stage/, several beside each other in it. */
		d.parts[i] = n == 1 ? xstrdup(stage) : xasprintf("%s/.part%zu", stage, i);
	if ((n > 1 || n == 0) && mkdir(stage, 0755) != 0) {
		step_fail(st, "cannot create %s: %s", stage, strerror(errno));
		rc = TF_EIO;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		d.ready[i] = predecoded_take(c, &s->v[i], d.parts[i], &d.res[i]);
	decode_plan(&d);
	rc = decode_fetch(&d, jobs, &stopped);
	/* A pinned budget exceeded by bytes that then verified: the lock is wrong. */
	if (rc == 0 && stopped < n) {
		step_fail(st, "%s", d.stopped[stopped]);
		rc = TF_EINTEGRITY;
	}
	for (size_t i = 0; i < n; i++)
		if (job.items[i].err && rc != 0 && st->error == NULL)
			step_fail(st, "%s",
			          job.items[i].errmsg ? job.items[i].errmsg
			                              : tf_strerror(job.items[i].err));
	if (rc == 0)
		decode_verified(&d, jobs);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (d.rc[i] != 0 || !d.ready[i]) {
			rc = d.rc[i] ? d.rc[i] : TF_EINTR;
			step_fail(st, "%s: %s", s->v[i].name,
			          d.err[i] ? d.err[i] : tf_strerror(rc));
			break;
		}
		rc = merge_part(stage, d.parts[i], s->v[i].name, &d.res[i], out, st);
	}
	if (rc == 0 && out->n > 1) {
		qsort(out->v, out->n, sizeof(*out->v), cmp_entry);
		memset(out->ht, 0, out->htcap * sizeof(*out->ht));
		for (size_t i = 0; i < out->n; i++)
			ht_insert(out, i);
	}
out:
	decode_release(&d, stage);
	return rc;
}
