/*
 * image_gc.c - what `tfprov gc` (gc.c) removes of the layer cache of
 * `tfprov image build` (image_cache.c, <cache-dir>/images/). The download
 * cache keeps what the recorded generations pin; nothing records an image,
 * so an entry goes by its last use instead: the mtime of keys/<key>.json,
 * which a store sets and a hit refreshes (one utimensat on the hit, nothing
 * on a lookup that misses; it survives reboots, and a copy of the cache
 * that drops mtimes makes entries look new, never old).
 *
 * Invariants:
 *  1. A layer stays while an entry that stays names it: the CUDA layer the
 *     images of several stacks share goes with the last of them. A layer
 *     that no entry names (its entry removed by hand, a store killed
 *     between its blobs and its entry) goes.
 *  2. Nothing is decided or removed while a build reads an entry or stores
 *     one: gc holds the cache's lock exclusive (image_cache_lock), a build
 *     shared. An entry is never pruned half-way under a build.
 *  3. Entries go before the layers they name, their directory synced
 *     between, so an entry does not name a layer that is gone; were one to
 *     (a crash between), a build finds the layer missing: a miss, built
 *     and stored again.
 *  4. What is removed is decided again under the lock after the user was
 *     asked, and only what both lists name goes: a build may have hit an
 *     entry, or stored one that names a listed layer, meanwhile.
 *  5. An entry that does not read (another format, cut short by hand) names
 *     no layers; it goes by its mtime as any other.
 */
#include "image_int.h"

#include "error.h"
#include "event.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void image_gc_release(struct image_gc *g)
{
	for (size_t i = 0; i < g->n; i++) {
		free(g->v[i].path);
		free(g->v[i].about);
	}
	free(g->v);
	memset(g, 0, sizeof(*g));
}

/* Whether path is in listed (sorted; NULL: anything goes). */
static int allowed(const struct strvec *listed, const char *path)
{
	return listed == NULL || strvec_has(listed, path);
}

/* "<hex> <step>" rows, sorted, compared by their hex. */
static int cmp_hex(const void *a, const void *b)
{
	return strncmp(*(char *const *)a, *(char *const *)b, 64);
}

/* Takes path and about. */
static void push(struct image_gc *g, enum image_gc_kind kind, char *path, char *about,
                 const struct stat *st, long days)
{
	g->v = xrealloc(g->v, (g->n + 1) * sizeof(*g->v));
	g->v[g->n++] = (struct image_gc_item){.kind = kind,
	                                      .path = path,
	                                      .about = about,
	                                      .size = (long long)st->st_size,
	                                      .days = days};
	g->bytes += (long long)st->st_size;
	if (kind == IMAGE_GC_ENTRY)
		g->nentries++;
	else if (kind == IMAGE_GC_LAYER)
		g->nlayers++;
	else
		g->ntemps++;
}

/* The manifest an entry's build was of: its inputs' "manifest PATH SHA256 SIZE" line. */
static char *manifest_of(json_t *j)
{
	const char *in = json_string_value(json_object_get(j, "inputs"));
	const char *l = in ? strstr(in, "\nmanifest ") : NULL;
	if (l == NULL)
		return NULL;
	l += strlen("\nmanifest ");
	char *line = xstrndup(l, strcspn(l, "\n"));
	for (int k = 0; k < 2; k++) {
		char *sp = strrchr(line, ' ');
		if (sp)
			*sp = '\0';
	}
	return line;
}

/* An entry's layers: each hex into hexes (or, steps: "<hex> <step>" rows). */
static void entry_layers(json_t *j, struct strvec *hexes, int steps)
{
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(j, "layers"), i, v)
	{
		const char *d = json_string_value(json_object_get(v, "digest"));
		const char *step = json_string_value(json_object_get(v, "step"));
		if (d == NULL || strncmp(d, "sha256:", 7) != 0 || !is_hex64(d + 7))
			continue;
		if (steps)
			strvec_pushf(hexes, "%s %s", d + 7, step ? step : "");
		else
			strvec_push(hexes, d + 7);
	}
}

/* The next regular file of d, its stat in *st; NULL at the end. */
static struct dirent *next_file(DIR *d, struct stat *st)
{
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (fstatat(dirfd(d), de->d_name, st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st->st_mode))
			return de;
	return NULL;
}

/* A killed store's temporary p (in listed) into g: 1 (p taken), else 0. */
static int take_temp(struct image_gc *g, char *p, const char *name, const char *mark,
                     const struct stat *st, time_t now, const struct strvec *listed)
{
	if (!image_cache_is_temp(name, mark, st, now) || !allowed(listed, p))
		return 0;
	push(g, IMAGE_GC_TEMP, p, NULL, st, 0);
	return 1;
}

/*
 * keys/: the entries that go (old, and in listed) into g, the layers of
 * those that stay into keep, of those that go into gone ("<hex> <step>").
 */
static int scan_entries(const char *keys, time_t now, long days, const struct strvec *listed,
                        struct image_gc *g, struct strvec *keep, struct strvec *gone)
{
	struct dirent *de;
	DIR *d = opendir(keys);
	if (d == NULL)
		return errno == ENOENT ? 0 : TF_EIO;
	struct stat st;
	while ((de = next_file(d, &st)) != NULL) {
		char *p = path_join(keys, de->d_name);
		long age = (long)(now - st.st_mtime);
		int old = days == 0 || age >= days * 86400L;
		if (take_temp(g, p, de->d_name, ".tfprov-tmp.", &st, now, listed))
			continue;
		if (!str_ends_with(de->d_name, ".json")) {
			free(p);
			continue;
		}
		json_t *j = json_load_file(p, 0, NULL);
		if (old && allowed(listed, p)) {
			entry_layers(j, gone, 1);
			push(g, IMAGE_GC_ENTRY, p, manifest_of(j), &st, age > 0 ? age / 86400 : 0);
		} else {
			entry_layers(j, keep, 0);
			free(p);
		}
		json_decref(j);
	}
	closedir(d);
	return 0;
}

/* sha256/: the layers no kept entry names (and in listed), temporaries, into g. */
static int scan_layers(const char *sha, time_t now, const struct strvec *listed, struct image_gc *g,
                       const struct strvec *keep, const struct strvec *gone)
{
	struct dirent *de;
	DIR *d = opendir(sha);
	if (d == NULL)
		return errno == ENOENT ? 0 : TF_EIO;
	struct stat st;
	while ((de = next_file(d, &st)) != NULL) {
		char *p = path_join(sha, de->d_name);
		if (take_temp(g, p, de->d_name, ".tfprov-blob-", &st, now, listed))
			continue;
		if (!is_hex64(de->d_name) || strvec_has(keep, de->d_name) || !allowed(listed, p)) {
			free(p);
			continue;
		}
		const char *name = de->d_name;
		char **row =
		    gone->n ? bsearch(&name, gone->v, gone->n, sizeof(*gone->v), cmp_hex) : NULL;
		const char *step = row ? *row + 65 : "";
		push(g, IMAGE_GC_LAYER, p, step[0] ? xstrdup(step) : NULL, &st, 0);
	}
	closedir(d);
	return 0;
}

/* What goes of dir (images/), the lock held; only what listed names, when not NULL. */
static int scan(struct ctx *c, const char *dir, long days, const struct strvec *listed,
                struct image_gc *g)
{
	char *keys = path_join(dir, "keys"), *sha = path_join(dir, "sha256");
	struct strvec keep = STRVEC_INIT, gone = STRVEC_INIT;
	time_t now = time(NULL);
	const char *failed = keys;
	int rc = scan_entries(keys, now, days, listed, g, &keep, &gone);
	if (rc == 0) {
		strvec_sort(&keep);
		if (gone.n > 1)
			qsort(gone.v, gone.n, sizeof(*gone.v), cmp_hex);
		failed = sha;
		rc = scan_layers(sha, now, listed, g, &keep, &gone);
	}
	if (rc != 0) /* errno: the opendir that failed, nothing ran after it */
		ev_log(c, EV_ERROR, "cannot read the image cache's %s: %s", failed,
		       strerror(errno));
	strvec_release(&keep);
	strvec_release(&gone);
	free(keys);
	free(sha);
	return rc;
}

/* The cache's lock, exclusive, into *fd. 0, TF_EINTR or TF_EIO (said). */
static int lock_for_gc(struct ctx *c, const char *dir, int *fd)
{
	*fd = image_cache_lock(c, dir, LOCK_EX,
	                       "gc: waiting for an image build to finish with the image cache");
	if (*fd >= 0)
		return 0;
	if (*fd == -EINTR)
		return TF_EINTR;
	ev_log(c, EV_ERROR, "cannot lock the image cache: %s/lock: %s", dir, strerror(-*fd));
	return TF_EIO;
}

int image_gc_list(struct ctx *c, long days, struct image_gc *g)
{
	char *dir = path_join(c->cache_dir, "images");
	int fd = -1, rc = 0;
	memset(g, 0, sizeof(*g));
	if (access(dir, F_OK) == 0)
		rc = lock_for_gc(c, dir, &fd);
	if (fd >= 0)
		rc = scan(c, dir, days, NULL, g);
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

/* Unlinks g's entries (entries 1) or everything else, layers and temporaries
 * (entries 0); counts what went. */
static int unlink_items(struct ctx *c, const struct image_gc *g, int entries, size_t *removed,
                        long long *bytes)
{
	int rc = 0;
	for (size_t i = 0; i < g->n; i++) {
		if ((g->v[i].kind == IMAGE_GC_ENTRY) != entries)
			continue;
		if (unlink(g->v[i].path) != 0 && errno != ENOENT) {
			ev_log(c, EV_ERROR, "cannot remove %s: %s", g->v[i].path, strerror(errno));
			rc = TF_EIO;
			continue;
		}
		(*removed)++;
		*bytes += g->v[i].size;
	}
	return rc;
}

int image_gc_remove(struct ctx *c, long days, const struct image_gc *listed, size_t *removed,
                    long long *bytes)
{
	char *dir = path_join(c->cache_dir, "images"), *keys = path_join(dir, "keys");
	struct image_gc g = {0};
	struct strvec paths = STRVEC_INIT;
	int lock = -1, rc = 0;
	if (listed->n == 0)
		goto out;
	for (size_t i = 0; i < listed->n; i++)
		strvec_push(&paths, listed->v[i].path);
	strvec_sort(&paths);
	rc = lock_for_gc(c, dir, &lock);
	if (rc == 0)
		rc = scan(c, dir, days, &paths, &g);
	if (rc == 0)
		rc = unlink_items(c, &g, 1, removed, bytes);
	/* The entries' removal durable before the layers they named go (invariant 3):
	 * when it cannot be made so, the layers stay for the next gc. */
	int fd = rc == 0 ? open(keys, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (rc == 0 && ((fd < 0 && errno != ENOENT) || (fd >= 0 && fsync(fd) != 0))) {
		ev_log(c, EV_ERROR, "cannot sync %s: %s; the layers stay for the next gc", keys,
		       strerror(errno));
		rc = TF_EIO;
	}
	if (fd >= 0)
		close(fd);
	if (rc == 0)
		rc = unlink_items(c, &g, 0, removed, bytes);
out:
	if (lock >= 0)
		close(lock);
	image_gc_release(&g);
	strvec_release(&paths);
	free(keys);
	free(dir);
	return rc;
}
