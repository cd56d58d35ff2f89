/*
 * step_artifacts.c - what the archive steps (cuda, cudnn, pyenv's redist)
 * make of the artifact room's plain artifact sets: a manifest's artifacts
 * (inline, or resolved from a pinned NVIDIA redistrib JSON) turned into an
 * artset, fetched with the step failed on error, and several archives
 * unpacked into one staged tree, merged the way NVIDIA's own tooling lays a
 * toolkit out.
 *
 * Invariant: nothing here writes outside the cache and the staging directory
 * the caller got from txn_stage_dir(); placement is the caller's.
 */
#include "step_artifacts.h"
#include "digest.h"
#include "error.h"
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void artset_add_artifact(struct artset *s, const struct artifact *a, int default_strip)
{
	artset_add(s, a->name.set ? a->name.s : NULL, a->url.s, a->sha256.s,
	           a->size.set ? a->size.v : -1, a->strip.set ? (int)a->strip.v : default_strip);
	s->v[s->n - 1].unpacked = a->unpacked_size.set ? a->unpacked_size.v : -1;
}

int artset_fetch(struct ctx *c, struct artset *s, struct step *st)
{
	struct why w = {0};
	int rc = artset_fetch_files(c, s, &w);
	if (rc != 0 && w.msg && st->why.msg == NULL)
		why_move(&st->why, &w);
	why_clear(&w);
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
	struct why w = {0};
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
	                    &w);
	if (rc != 0) {
		step_fail(st, "%s: %s", r->json.url.s, why_text(&w));
		goto out;
	}
	for (size_t i = 0; i < nra; i++)
		artset_add(s, ra[i].component, ra[i].url, ra[i].sha256, ra[i].size, ra[i].strip);
out:
	redist_artifacts_free(ra, nra);
	free(names);
	why_clear(&w);
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
			int mv = art_tree_move(src, dst);
			if (mv != 0) {
				step_fail(st, "cannot stage %s: %s", e->path, strerror(-mv));
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
struct merge {
	const char *stage;
	struct artset *s;
	struct staged *out;
	struct step *st;
};

static int merge_one(void *arg, size_t i, const char *part, const struct unpack_result *res)
{
	struct merge *g = arg;
	return merge_part(g->stage, part, g->s->v[i].name, res, g->out, g->st);
}

int artset_fetch_unpack(struct ctx *c, struct artset *s, const char *stage, struct staged *out,
                        struct step *st)
{
	struct merge g = {.stage = stage, .s = s, .out = out, .st = st};
	struct why w = {0};
	int rc = artset_unpack(c, s, stage, merge_one, &g, &w);
	if (rc != 0 && w.msg && st->why.msg == NULL)
		why_move(&st->why, &w);
	why_clear(&w);
	if (rc == 0 && out->n > 1) {
		qsort(out->v, out->n, sizeof(*out->v), cmp_entry);
		memset(out->ht, 0, out->htcap * sizeof(*out->ht));
		for (size_t i = 0; i < out->n; i++)
			ht_insert(out, i);
	}
	return rc;
}
