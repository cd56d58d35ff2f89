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
#include "error.h"
#include "event.h"
#include "fetch.h"
#include "redist.h"
#include "unpack.h"

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
	a->name = xstrdup(name ? name : url);
	a->url = xstrdup(url);
	snprintf(a->sha256, sizeof(a->sha256), "%s", sha256);
	a->size = size;
	a->strip = strip;
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
}

static struct place_entry *staged_find(struct staged *t, const char *path)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i].path, path) == 0)
			return &t->v[i];
	return NULL;
}

void staged_release(struct staged *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free((char *)t->v[i].path);
		free((char *)t->v[i].sha256);
		free((char *)t->v[i].link);
	}
	free(t->v);
	memset(t, 0, sizeof(*t));
}

/*
 * Unpacks every artifact into stage/ (created), merging their trees the way
 * NVIDIA's own tooling lays a toolkit out: the components' bin, include, lib,
 * nvvm... directories become one tree. Top-level documents every archive
 * carries (LICENSE, README) are kept from the first archive; any other path
 * two archives both provide must be identical, else it is an error.
 */
int staged_unpack(struct ctx *c, struct artset *s, const char *stage, struct staged *out,
                  struct step *st)
{
	int rc = 0;
	if (mkdir(stage, 0755) != 0) {
		step_fail(st, "cannot create %s: %s", stage, strerror(errno));
		return TF_EIO;
	}
	for (size_t i = 0; i < s->n && rc == 0; i++) {
		struct unpack_result res = {0};
		char *err = NULL;
		char *part = xasprintf("%s/.part%zu", stage, i);
		ev_log(c, EV_DEBUG, "unpacking %s", s->v[i].name);
		rc = unpack_archive(c, s->v[i].path, part, s->v[i].strip, &res, &err);
		if (rc != 0) {
			step_fail(st, "%s: %s", s->v[i].name, err ? err : tf_strerror(rc));
			free(err);
			free(part);
			break;
		}
		for (size_t k = 0; k < res.n && rc == 0; k++) {
			struct unpack_entry *e = &res.v[k];
			char *src = path_join(part, e->path);
			char *dst = path_join(stage, e->path);
			struct place_entry *prev = staged_find(out, e->path);
			if (e->type == 'd') {
				if (prev == NULL) {
					mkdirs_at(AT_FDCWD, dst, 0755);
					staged_add(out, e->path, 'd', NULL, 0, e->mode, NULL);
				}
			} else if (prev) {
				int same = prev->sha256 && e->sha256[0] &&
				           strcmp(prev->sha256, e->sha256) == 0;
				if (!same && strchr(e->path, '/') != NULL) {
					step_fail(st,
					          "%s and an earlier archive both provide %s with "
					          "different content",
					          s->v[i].name, e->path);
					rc = TF_ECONFLICT;
				}
			} else {
				char type = e->type == 'h' ? 'f' : (char)e->type;
				char *parent = xstrndup(dst, (size_t)(strrchr(dst, '/') - dst));
				mkdirs_at(AT_FDCWD, parent, 0755);
				free(parent);
				if (rename(src, dst) != 0) {
					step_fail(st, "cannot stage %s: %s", e->path,
					          strerror(errno));
					rc = TF_EIO;
				} else {
					staged_add(out, e->path, type,
					           e->sha256[0] ? e->sha256 : NULL, e->size,
					           e->mode, e->link);
				}
			}
			free(src);
			free(dst);
		}
		unpack_result_release(&res);
		remove_tree(part);
		free(part);
	}
	if (rc == 0 && out->n > 1)
		qsort(out->v, out->n, sizeof(*out->v), cmp_entry);
	return rc;
}
