/*
 * artifacts.c - what the cuda and cudnn steps share: turning a manifest's
 * artifacts (inline, or resolved from a pinned NVIDIA redistrib JSON) into
 * verified files in the cache, and unpacking several archives into one
 * staged tree.
 *
 * Invariant: nothing here writes outside the cache and the staging directory
 * the caller got from txn_stage_dir(); placement is the caller's.
 */
#include "artifacts.h"
#include "fs.h"
#include "error.h"
#include "event.h"
#include "fetch.h"
#include "redist.h"
#include "unpack.h"
#include "cache.h"

#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/*
 * stage/ must exist before an archive other than the first is unpacked next
 * to it. If the first archive was not unpacked into stage/ yet (cached, or
 * its download started over), it moves to stage/.part0 like the others.
 */
static int ensure_stage(const char *stage, char **parts, struct step *st)
{
	struct stat sb;
	if (stat(stage, &sb) == 0)
		return 0;
	if (mkdir(stage, 0755) != 0) {
		step_fail(st, "cannot create %s: %s", stage, strerror(errno));
		return TF_EIO;
	}
	if (strcmp(parts[0], stage) == 0) {
		free(parts[0]);
		parts[0] = xasprintf("%s/.part0", stage);
	}
	return 0;
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
 * Fetches and unpacks every artifact into stage/ (created), merging their
 * trees the way NVIDIA's own tooling lays a toolkit out: the components'
 * bin, include, lib, nvvm... directories become one tree. Top-level
 * documents every archive carries (LICENSE, README) are kept from the first
 * archive; any other path two archives both provide must be identical.
 *
 * Downloading and decoding overlap: fetch_all runs on its own thread while
 * each archive that is not cached yet is unpacked from its growing .part.
 * Nothing of an archive is used before fetch_all has verified its sha256 and
 * size; an archive whose download started over (or that was cached) is
 * unpacked from the verified file afterwards.
 */
int artset_fetch_unpack(struct ctx *c, struct artset *s, const char *stage, struct staged *out,
                        struct step *st)
{
	struct fetch_job job = {c, xcalloc(s->n ? s->n : 1, sizeof(struct fetch_item)), s->n, 0, 0};
	struct unpack_result *res = xcalloc(s->n ? s->n : 1, sizeof(*res));
	int *ready = xcalloc(s->n ? s->n : 1, sizeof(*ready));
	char **parts = xcalloc(s->n ? s->n : 1, sizeof(*parts));
	pthread_t th;
	int rc = 0, threaded = 0;
	char *stopped = NULL; /* why decoding on a pinned budget stopped */
	for (size_t i = 0; i < s->n; i++) {
		job.items[i].name = s->v[i].name;
		job.items[i].url = s->v[i].url;
		job.items[i].sha256 = s->v[i].sha256;
		job.items[i].size = s->v[i].size;
		/* The first archive goes straight into stage/, the others beside it. */
		parts[i] = i == 0 ? xstrdup(stage) : xasprintf("%s/.part%zu", stage, i);
	}
	threaded = pthread_create(&th, NULL, fetch_job_run, &job) == 0;
	if (!threaded)
		fetch_job_run(&job);
	for (size_t i = 0; threaded && i < s->n; i++) {
		char *cached = cache_lookup(c, s->v[i].sha256);
		if (cached) {
			free(cached); /* unpacked from the verified file below */
			continue;
		}
		/* Unverified bytes are decoded on a budget (unpack.h); none known: wait. */
		const struct art *a = &s->v[i];
		uint64_t budget = a->unpacked >= 0 ? (uint64_t)a->unpacked
		                  : a->size > 0    ? (uint64_t)a->size * UNPACK_RATIO
		                                   : 0;
		if (budget == 0 && a->unpacked < 0)
			continue; /* no size either: unpacked once verified */
		char *part_file = cache_part_path(c->cache_dir, a->sha256);
		struct unpack_follow f = {.bytes = &job.items[i].stream_bytes,
		                          .restarts = &job.items[i].stream_restarts,
		                          .done = &job.done,
		                          .failed = &job.items[i].stream_failed,
		                          .size = a->size,
		                          .label = a->name,
		                          .budget = budget,
		                          .budget_pinned = a->unpacked >= 0};
		char *err = NULL;
		if (i > 0 && ensure_stage(stage, parts, st) != 0)
			break;
		ev_log(c, EV_DEBUG, "unpacking %s while it downloads", a->name);
		int urc =
		    unpack_archive_follow(c, part_file, &f, parts[i], a->strip, &res[i], &err);
		if (urc == 0)
			ready[i] = 1;
		else
			unpack_result_release(&res[i]);
		if (urc != 0 && budget && err && strstr(err, "decoding stopped"))
			ev_log(c, urc == TF_EINTEGRITY ? EV_ERROR : EV_INFO, "%s: %s", a->name,
			       err);
		if (urc == TF_EINTEGRITY && stopped == NULL)
			stopped = xasprintf("%s: %s", a->name, err ? err : tf_strerror(urc));
		free(err);
		free(part_file);
	}
	if (threaded)
		pthread_join(th, NULL);
	rc = job.rc;
	if (rc == 0 && stopped) {
		step_fail(st, "%s", stopped);
		rc = TF_EINTEGRITY;
	}
	free(stopped);
	for (size_t i = 0; i < s->n; i++) {
		if (job.items[i].err && rc != 0 && st->error == NULL)
			step_fail(st, "%s",
			          job.items[i].errmsg ? job.items[i].errmsg
			                              : tf_strerror(job.items[i].err));
		if (job.items[i].path)
			s->v[i].path = xstrdup(job.items[i].path);
		s->v[i].cached = job.items[i].cached;
	}
	for (size_t i = 0; i < s->n && rc == 0; i++) {
		if (!ready[i]) {
			char *err = NULL;
			if (i > 0 && (rc = ensure_stage(stage, parts, st)) != 0)
				break;
			if (strcmp(parts[i], stage) != 0)
				fs_rmtree(parts[i]);
			ev_log(c, EV_DEBUG, "unpacking %s", s->v[i].name);
			rc = unpack_archive_named(c, s->v[i].path, s->v[i].name,
			                          s->v[i].unpacked >= 0 ? s->v[i].unpacked : -1,
			                          parts[i], s->v[i].strip, &res[i], &err);
			if (rc != 0)
				step_fail(st, "%s: %s", s->v[i].name, err ? err : tf_strerror(rc));
			free(err);
			if (rc != 0)
				break;
		}
		rc = merge_part(stage, parts[i], s->v[i].name, &res[i], out, st);
	}
	if (rc == 0 && s->n == 0 && mkdir(stage, 0755) != 0) {
		step_fail(st, "cannot create %s: %s", stage, strerror(errno));
		rc = TF_EIO;
	}
	if (rc == 0 && out->n > 1) {
		qsort(out->v, out->n, sizeof(*out->v), cmp_entry);
		memset(out->ht, 0, out->htcap * sizeof(*out->ht));
		for (size_t i = 0; i < out->n; i++)
			ht_insert(out, i);
	}
	for (size_t i = 0; i < s->n; i++) {
		/* stage/ itself is the caller's: the txn removes it on failure. */
		if (parts[i] && strcmp(parts[i], stage) != 0)
			fs_rmtree(parts[i]);
		free(parts[i]);
		unpack_result_release(&res[i]);
		fetch_item_release(&job.items[i]);
	}
	free(parts);
	free(res);
	free(ready);
	free(job.items);
	return rc;
}
