/*
 * artifacts.c - the artifact set: the downloads a step names (URL, sha256,
 * size, strip, how it unpacks them), fetched and verified into the cache
 * (artset_fetch_files) or fetched and unpacked at once, each archive decoded
 * while it downloads (artset_unpack, on decode.c's pool). Plain inputs and
 * plain paths: what a step makes of them (a staged tree, its messages) is
 * the step's (modules/step_artifacts.c).
 *
 * Invariant: nothing here writes outside the cache and the directory the
 * caller names.
 */
#include "artifact.h"
#include "artifact_int.h"
#include "decode.h"
#include "unpack_pool.h"
#include "fs.h"
#include "error.h"
#include "event.h"

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
		free(s->v[i].tree);
		if (s->v[i].tree_res)
			unpack_result_release(s->v[i].tree_res);
		free(s->v[i].tree_res);
	}
	free(s->v);
	if (s->hook.release)
		s->hook.release(s->hook.arg);
	memset(s, 0, sizeof(*s));
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

int artset_fetch_files(struct ctx *c, struct artset *s, struct why *why)
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
		if (items[i].why.code && rc != 0)
			why_first(why, items[i].why.code, "%s", why_text(&items[i].why));
		if (items[i].path) {
			free(s->v[i].path);
			s->v[i].path = xstrdup(items[i].path);
		}
		s->v[i].cached = items[i].cached;
		fetch_item_release(&items[i]);
	}
	free(items);
	return rc;
}

/*
 * The fetch of artset_unpack: every archive not decoded ahead decoded while
 * it downloads, then from the verified files. 0, or the first failure, in
 * why (empty when fetch_all's own report is all there is).
 */
static int unpack_fetch(struct decode *d, struct fetch_job *job, size_t jobs, struct why *why)
{
	size_t n = d->s->n, stopped = 0;
	decode_plan(d);
	int rc = decode_fetch(d, jobs, &stopped);
	/* A pinned budget exceeded by bytes that then verified: the lock is wrong. */
	if (rc == 0 && stopped < n) {
		why_move(why, &d->stopped[stopped]);
		rc = TF_EINTEGRITY;
	}
	for (size_t i = 0; i < n; i++)
		if (job->items[i].why.code && rc != 0)
			why_first(why, job->items[i].why.code, "%s", why_text(&job->items[i].why));
	if (rc == 0)
		decode_verified(d, jobs);
	return rc;
}

int artset_unpack(struct ctx *c, struct artset *s, const char *stage, artset_merge_fn merge,
                  void *arg, struct why *why)
{
	size_t n = s->n;
	struct fetch_job job;
	struct decode d;
	int rc = 0;
	decode_init(&d, c, s, &job);
	for (size_t i = 0; i < n; i++)
		/* One archive goes straight into stage/, several beside each other in it. */
		d.parts[i] = n == 1 ? xstrdup(stage) : xasprintf("%s/.part%zu", stage, i);
	if ((n > 1 || n == 0) && mkdir(stage, 0755) != 0) {
		rc = why_fail(why, TF_EIO, "cannot create %s: %s", stage, strerror(errno));
		goto out;
	}
	/* An archive decode-ahead unpacked (ahead.c) is renamed into place. */
	for (size_t i = 0; i < n; i++)
		d.ready[i] = art_take_tree(c, &s->v[i], d.parts[i], &d.res[i]) == 0;
	rc = unpack_fetch(&d, &job, decoders(c), why);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (d.why[i].code != 0 || !d.ready[i]) {
			why_code(&d.why[i], TF_EINTR); /* not decoded, no failure: interrupted */
			rc = why_fail(why, d.why[i].code, "%s: %s", s->v[i].name,
			              why_text(&d.why[i]));
			break;
		}
		rc = merge(arg, i, d.parts[i], &d.res[i]);
	}
out:
	decode_release(&d, stage);
	return rc;
}

int art_tree_move(const char *src, const char *dst)
{
	const char *slash = strrchr(dst, '/');
	if (slash && slash != dst) {
		char *parent = xstrndup(dst, (size_t)(slash - dst));
		mkdirs_at(AT_FDCWD, parent, 0755);
		free(parent);
	}
	return rename(src, dst) == 0 ? 0 : -errno;
}
