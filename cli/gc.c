/*
 * gc.c - `tfprov gc`: prunes the download cache (artifact.h) to what the
 * recorded generations need.
 *
 * Needed: every artifact that any recorded generation of any stack pins
 * (its manifest as recorded, parsed again, side files included; redist JSONs
 * and the archives they resolve to), because `rollback` and an interrupted
 * apply re-apply those manifests from the cache, offline. Removed:
 * sha256/<hex> files nothing needs, every partial/ download and every
 * quarantine/ file (bytes that failed verification, kept for a human until
 * now). pip's own cache (pip/) and conda's extracted packages (pkgs/) are
 * pip's and conda's to manage: their sizes are reported, never touched.
 *
 * The layer cache of `image build` (images/) is pruned by last use, which
 * image_gc.c decides under that cache's own lock (a build does not take the
 * writer lock): entries no build used for --image-days days (30 by
 * default), the layers only they name. Listed, asked and reported with the
 * downloads, in the same words.
 *
 * Asks like destroy (cli_confirm): without -y and without a terminal it
 * lists what it would remove and changes nothing (exit 1). It holds the
 * writer lock, so no apply downloads while it runs. A generation whose
 * manifest no longer loads (a side file gone) stops it before anything is
 * removed: what that generation needs cannot be known.
 */
#include "artifact.h"
#include "cli.h"
#include "error.h"
#include "event.h"
#include "image_int.h"
#include "manifest.h"
#include "place.h"
#include "state.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void need_art(struct strvec *need, const struct artifact *a)
{
	if (a->sha256.s)
		strvec_push(need, a->sha256.s);
}

/* Adds the archives a cached redist JSON resolves to; 0 or TF_EFAIL (logged). */
static int need_redist(struct ctx *c, struct strvec *need, const struct manifest *m,
                       const struct redist_ref *r, const char *label)
{
	struct redist_artifact *ra = NULL;
	size_t nra = 0;
	struct why err = {0};
	char *json = r->json.sha256.s ? cache_lookup(c, r->json.sha256.s) : NULL;
	const char **names = xcalloc(r->ncomponents + 1, sizeof(*names));
	int rc = 0;
	need_art(need, &r->json);
	if (json == NULL)
		goto out; /* not cached: nothing it resolves to can be cached under its name */
	for (size_t i = 0; i < r->ncomponents; i++)
		names[i] = r->components[i].s;
	const char *platform =
	    m->stack.platform == PLATFORM_WINDOWS_X86_64 ? "windows-x86_64" : "linux-x86_64";
	if (redist_resolve(json, r->json.url.s, platform, r->variant.set ? r->variant.s : NULL,
	                   names, r->ncomponents, &ra, &nra, &err) != 0) {
		ev_log(c, EV_ERROR, "%s: %s: %s", label, r->json.url.s, why_text(&err));
		rc = TF_EFAIL;
		goto out;
	}
	for (size_t i = 0; i < nra; i++)
		strvec_push(need, ra[i].sha256);
out:
	redist_artifacts_free(ra, nra);
	free(names);
	free(json);
	why_clear(&err);
	return rc;
}

/* Every sha256 a manifest pins. 0 or TF_EFAIL (logged). */
static int need_manifest(struct ctx *c, struct strvec *need, const struct manifest *m,
                         const char *label)
{
	int rc = 0;
	for (size_t i = 0; i < m->cuda.artifacts.n; i++)
		need_art(need, &m->cuda.artifacts.v[i]);
	if (m->cuda.has_runfile)
		need_art(need, &m->cuda.runfile);
	if (m->cudnn.has_artifact)
		need_art(need, &m->cudnn.artifact);
	if (m->cuda.redist.set)
		rc = need_redist(c, need, m, &m->cuda.redist, label);
	if (rc == 0 && m->cudnn.redist.set)
		rc = need_redist(c, need, m, &m->cudnn.redist, label);
	for (size_t i = 0; i < m->python.npkgs; i++)
		if (m->python.pkgs[i].sha256[0])
			strvec_push(need, m->python.pkgs[i].sha256);
	for (size_t i = 0; i < m->pip.nreqs; i++)
		for (size_t k = 0; k < m->pip.reqs[i].nhashes; k++)
			strvec_push(need, m->pip.reqs[i].hashes[k]);
	return rc;
}

/* What every recorded generation needs. 0, TF_ESTATE or TF_EFAIL (logged). */
static int needed(struct ctx *c, struct strvec *need)
{
	struct state_gen *v = NULL;
	size_t n = 0;
	int rc = state_gens_list(c->st, 0, &v, &n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const char *text = v[i].manifest_text;
		const char *path = v[i].manifest_path;
		char *label = xasprintf("stack %s generation %lld (%s)", v[i].stack,
		                        (long long)v[i].number, path ? path : "?");
		struct manifest *m = NULL;
		struct diags d = {0};
		if (manifest_load_buf(path ? path : label, text ? text : "",
		                      text ? strlen(text) : 0, &m, &d) != 0) {
			ev_log(c, EV_ERROR,
			       "cannot tell what %s needs: its recorded manifest no longer loads "
			       "(%s); "
			       "nothing was removed",
			       label, d.n ? d.v[0].msg : "unknown error");
			rc = TF_EFAIL;
		} else {
			rc = need_manifest(c, need, m, label);
		}
		manifest_free(m);
		diags_release(&d);
		free(label);
	}
	state_gens_free(v, n);
	return rc;
}

/* Regular files of DIR (keep: a predicate on the name, or NULL) into out; bytes summed. */
static void list_files(const char *dir, const struct strvec *need, struct strvec *out,
                       long long *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		if (de->d_name[0] == '.')
			continue;
		char *p = path_join(dir, de->d_name);
		if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) &&
		    (need == NULL || !strvec_has(need, de->d_name))) {
			strvec_push(out, p);
			*bytes += (long long)st.st_size;
		}
		free(p);
	}
	closedir(d);
}

/* Bytes under a directory tree (du), for what gc reports but keeps; -errno
 * when it cannot be opened. */
static long long tree_bytes(const char *dir)
{
	long long n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	if (d == NULL)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char *p = path_join(dir, de->d_name);
		if (lstat(p, &st) == 0) {
			long long sub = S_ISDIR(st.st_mode) ? tree_bytes(p) : 0;
			if (sub > 0)
				n += sub;
			else if (S_ISREG(st.st_mode))
				n += (long long)st.st_size;
		}
		free(p);
	}
	closedir(d);
	return n;
}

static double mib(long long b)
{
	return (double)b / (1024.0 * 1024.0);
}

/* The size of a cache entry for a human: "1 byte", "12.3 KiB", "4.5 MiB", "1.2 GiB". */
static void human_size(long long b, char out[32])
{
	if (b < 1024)
		snprintf(out, 32, "%lld byte%s", b, b == 1 ? "" : "s");
	else if (b < 1024 * 1024)
		snprintf(out, 32, "%.1f KiB", (double)b / 1024.0);
	else if (b < 1024LL * 1024 * 1024)
		snprintf(out, 32, "%.1f MiB", mib(b));
	else
		snprintf(out, 32, "%.1f GiB", mib(b) / 1024.0);
}

/*
 * One line of what gc would remove: the artifact's file name where the cache
 * knows it (names/<hex>, written when it was downloaded), its size, and the
 * sha256 it is kept under; the path in -v.
 */
static void show_drop(struct ctx *c, const char *path, const char *what)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	char hex[65] = "", size[32] = "?";
	struct stat st;
	if (strlen(base) >= 64) {
		memcpy(hex, base, 64);
		hex[64] = '\0';
	}
	char *name = is_hex64(hex) ? cache_name_of(c->cache_dir, hex) : NULL;
	if (lstat(path, &st) == 0)
		human_size((long long)st.st_size, size);
	if (name)
		ev_log(c, EV_INFO, "  - %s%s (%s, sha256 %.12s...)", what, name, size, hex);
	else
		ev_log(c, EV_INFO, "  - %s%s (%s, name unknown)", what, base, size);
	ev_log(c, EV_DEBUG, "    %s", path);
	free(name);
}

/* An image cache entry unused this many days goes (--image-days). */
#define IMAGE_DAYS 30

/* One line per thing gc would remove of the image cache, as show_drop's. */
static void show_image(struct ctx *c, const struct image_gc *g)
{
	for (size_t i = 0; i < g->n; i++) {
		const struct image_gc_item *it = &g->v[i];
		const char *base = strrchr(it->path, '/') + 1;
		char size[32];
		human_size(it->size, size);
		if (it->kind == IMAGE_GC_ENTRY)
			ev_log(c, EV_INFO,
			       "  - image cache entry of %s, last used %ld day%s ago (%s)",
			       it->about ? it->about : "a manifest it does not name", it->days,
			       plural_s(it->days), size);
		else if (it->kind == IMAGE_GC_LAYER && it->about)
			ev_log(c, EV_INFO, "  - image layer sha256:%.12s... of the %s step (%s)",
			       base, it->about, size);
		else if (it->kind == IMAGE_GC_LAYER)
			ev_log(c, EV_INFO, "  - image layer sha256:%.12s... no entry names (%s)",
			       base, size);
		else
			ev_log(c, EV_INFO, "  - temporary file of a killed image build %s (%s)",
			       base, size);
		ev_log(c, EV_DEBUG, "    %s", it->path);
	}
}

/* The download cache's sha256/, partial/ and quarantine/ files that go, into drop. */
static void list_downloads(struct ctx *c, const struct strvec *need, struct strvec *drop,
                           long long *bytes, size_t n[3])
{
	const char *sub[] = {"sha256", "partial", "quarantine"};
	for (size_t i = 0; i < 3; i++) {
		char *p = path_join(c->cache_dir, sub[i]);
		size_t before = drop->n;
		list_files(p, i == 0 ? need : NULL, drop, bytes);
		n[i] = drop->n - before;
		free(p);
	}
	for (size_t i = 0; i < drop->n; i++)
		show_drop(c, drop->v[i],
		          i < n[0]          ? ""
		          : i < n[0] + n[1] ? "partial download of "
		                            : "quarantined ");
	const char *kept[] = {"pip", "pkgs"};
	for (size_t i = 0; i < ARRAY_SIZE(kept); i++) {
		char *p = path_join(c->cache_dir, kept[i]);
		long long b = tree_bytes(p);
		if (b > 0)
			ev_log(c, EV_INFO,
			       "  keeping %s (%.1f MiB): %s's own cache, not tfprov's to prune", p,
			       mib(b), i == 0 ? "pip" : "conda packages");
		free(p);
	}
}

/* The totals of what gc would remove, one line for downloads, one for images. */
static void show_totals(struct ctx *c, const size_t n[3], long long bytes,
                        const struct image_gc *ig, long days)
{
	char total[32];
	if (n[0] + n[1] + n[2]) {
		human_size(bytes, total);
		ev_log(c, EV_INFO,
		       "gc: %zu unused artifact%s, %zu partial download%s, %zu quarantined file%s: "
		       "%s in %s",
		       n[0], plural_s((long long)n[0]), n[1], plural_s((long long)n[1]), n[2],
		       plural_s((long long)n[2]), total, c->cache_dir);
	}
	if (ig->n) {
		human_size(ig->bytes, total);
		ev_log(
		    c, EV_INFO,
		    "gc: %zu image cache entr%s no build used in %ld day%s, %zu image layer%s no "
		    "other entry names, %zu temporary file%s: %s in %s/images",
		    ig->nentries, plural(ig->nentries, "y", "ies"), days, plural_s(days),
		    ig->nlayers, plural_s((long long)ig->nlayers), ig->ntemps,
		    plural_s((long long)ig->ntemps), total, c->cache_dir);
	}
}

/* Unlinks the download cache's files in drop (with their name hints); counts what went. */
static int remove_downloads(struct ctx *c, const struct strvec *drop, size_t nsha, size_t *removed,
                            long long *bytes)
{
	int rc = 0;
	for (size_t i = 0; i < drop->n; i++) {
		struct stat st;
		long long size = lstat(drop->v[i], &st) == 0 ? (long long)st.st_size : 0;
		if (unlink(drop->v[i]) != 0 && errno != ENOENT) {
			ev_log(c, EV_ERROR, "cannot remove %s: %s", drop->v[i], strerror(errno));
			rc = TF_EIO;
			continue;
		}
		(*removed)++;
		*bytes += size;
		/* Its name hint goes with it. */
		const char *base = strrchr(drop->v[i], '/') + 1;
		if (i < nsha && is_hex64(base)) {
			char *np = cache_name_path(c->cache_dir, base);
			unlink(np);
			free(np);
		}
	}
	return rc;
}

int cmd_gc(struct ctx *c, struct opts *o)
{
	struct strvec need = STRVEC_INIT, drop = STRVEC_INIT;
	struct image_gc ig = {0};
	long long bytes = 0;
	size_t n[3] = {0}, removed = 0;
	long days = o->days >= 0 ? o->days : IMAGE_DAYS; /* checked by main.c */
	struct stat st;
	int rc = 0;
	if (stat(c->cache_dir, &st) != 0) {
		ev_log(c, EV_INFO, "No download cache at %s: nothing to collect.", c->cache_dir);
		return 0;
	}
	if (c->st == NULL) {
		/* Nothing recorded; take the lock anyway, so a first apply is not pruned. */
		struct why w = {0};
		rc = cli_say_why(c, place_open_state(c, &w), &w);
		if (rc != 0)
			return rc;
	}
	rc = needed(c, &need);
	if (rc != 0)
		goto out;
	strvec_sort(&need); /* generations pin tens of thousands of hashes */
	list_downloads(c, &need, &drop, &bytes, n);
	rc = image_gc_list(c, days, &ig);
	if (rc != 0)
		goto out;
	show_image(c, &ig);
	if (drop.n == 0 && ig.n == 0) {
		ev_log(c, EV_INFO,
		       "The cache %s holds only what recorded generations need and what image "
		       "builds used in the last %ld day%s.",
		       c->cache_dir, days, plural_s(days));
		goto out;
	}
	show_totals(c, n, bytes, &ig, days);
	if (!cli_confirm(c, "gc",
	                 ig.n == 0 ? "Do you want to remove these files?\n  Recorded generations "
	                             "do not need them; a later apply downloads them again."
	                           : "Do you want to remove these files?\n  Recorded generations "
	                             "do not need them; a later apply downloads them again, a "
	                             "later image build builds its layers again.")) {
		rc = TF_EFAIL;
		goto out;
	}
	long long gone = 0; /* bytes removed, not listed: a failed unlink frees none */
	rc = remove_downloads(c, &drop, n[0], &removed, &gone);
	int irc = image_gc_remove(c, days, &ig, &removed, &gone);
	rc = rc != 0 ? rc : irc;
	c->changed = removed > 0;
	char freed[32];
	human_size(gone, freed);
	ev_log(c, EV_INFO, "Removed %zu file%s (%s).", removed, plural_s((long long)removed),
	       freed);
out:
	image_gc_release(&ig);
	strvec_release(&need);
	strvec_release(&drop);
	return rc;
}
