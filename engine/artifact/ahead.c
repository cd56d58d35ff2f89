/*
 * ahead.c - decode-ahead: while exec.c's prefetch downloads every artifact
 * of a plan, the archives a step will unpack (each art's `unpack`: cuda's
 * and cudnn's archives, conda packages, the native installer's wheels) are
 * decoded by one pool (decode.c) into this run's scratch directory in the
 * cache, <cache>/unpack/run-XXXXXX/<sha256>, held by an flock'ed
 * run-XXXXXX.lock beside it for the run's lifetime. Each tree is left on its
 * own art (tree, tree_res, tree_done): the executor hands a step its arts,
 * and the step takes the tree with art_take_tree, or decodes the verified
 * file itself when there is none.
 *
 * Inputs are plain: what an art says (URL, sha256, size, strip, kind).
 * Invariant: nothing here writes outside the cache.
 */
#include "decode.h"
#include "artifact_int.h"
#include "fs.h"
#include "error.h"
#include "event.h"

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

/* This run's scratch directory and the lock that holds it. */
struct ahead {
	char *dir;
	char *lock;
	int lockfd;
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
static int scratch_open(struct ctx *c, struct ahead *p, struct why *why)
{
	char *base = path_join(c->cache_dir, "unpack");
	int rc = 0;
	if (mkdir(base, 0700) != 0 && errno != EEXIST) {
		rc = why_fail(why, TF_EIO, "cannot create %s: %s", base, strerror(errno));
		free(base);
		return rc;
	}
	for (int tries = 0; p->dir == NULL && rc == 0; tries++) {
		char *lock = xasprintf("%s/run-XXXXXX.lock", base);
		int fd = mkostemps(lock, 5, O_CLOEXEC);
		struct stat a, b;
		if (fd < 0 || flock(fd, LOCK_EX) != 0) {
			rc = why_fail(why, TF_EIO, "cannot create a lock in %s: %s", base,
			              strerror(errno));
		} else if (fstat(fd, &a) == 0 && stat(lock, &b) == 0 && a.st_ino == b.st_ino &&
		           a.st_dev == b.st_dev) {
			/* Still ours: another run's stale sweep did not take it first. */
			char *run = xstrndup(lock, strlen(lock) - 5);
			if (mkdir(run, 0700) != 0) {
				rc = why_fail(why, TF_EIO, "cannot create %s: %s", run,
				              strerror(errno));
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
			rc = why_fail(why, TF_EIO, "cannot hold a lock in %s", base);
		}
		if (fd >= 0)
			close(fd);
		free(lock);
	}
	free(base);
	return rc;
}

/*
 * Which archives of s decode-ahead decodes into the scratch (d->parts set):
 * those marked `unpack`, each sha256 once; on a cache on another filesystem
 * than the root only conda packages (a tree there cannot be renamed into a
 * stage: the steps unpack their archives themselves then, since decoding
 * twice would cost more than decoding late; a conda package is extracted
 * into the package cache, beside the scratch). *npy: how many of them are
 * wheels or conda packages. 0 or scratch_open's error (*failed the art).
 */
static int ahead_choose(struct ctx *c, struct artset *s, struct ahead *p, struct decode *d,
                        size_t *npy, size_t *failed, struct why *why)
{
	struct stat rs, cs;
	int same_fs = (c->rootfd >= 0 ? fstat(c->rootfd, &rs) : stat(c->root, &rs)) == 0 &&
	              stat(c->cache_dir, &cs) == 0 && rs.st_dev == cs.st_dev;
	int rc;
	if (!same_fs)
		ev_log(c, EV_DEBUG,
		       "the cache %s is on another filesystem than the root: each step unpacks "
		       "its archives",
		       c->cache_dir);
	for (size_t i = 0; i < s->n; i++) {
		int first = s->v[i].unpack != ART_FILE && (same_fs || s->v[i].unpack == ART_CONDA);
		for (size_t j = 0; j < i && first; j++)
			first = !(s->v[j].unpack != ART_FILE &&
			          strcmp(s->v[j].sha256, s->v[i].sha256) == 0);
		if (!first)
			continue;
		if (p->dir == NULL && (rc = scratch_open(c, p, why)) != 0) {
			*failed = i;
			return rc;
		}
		d->parts[i] = path_join(p->dir, s->v[i].sha256);
		*npy += s->v[i].unpack != ART_TREE;
	}
	return 0;
}

/*
 * After the downloads: an archive of cuda or cudnn that did not decode is
 * the run's error (*failed, why); a wheel or conda package that did not
 * is decoded again by its step, which reports why as it always did.
 */
static int ahead_check(struct ctx *c, struct artset *s, struct decode *d, size_t *failed,
                       struct why *why)
{
	for (size_t i = 0; i < s->n; i++) {
		if (d->parts[i] == NULL || (d->why[i].code == 0 && d->ready[i]))
			continue;
		why_code(&d->why[i], TF_EINTR); /* not decoded, no failure: interrupted */
		if (s->v[i].unpack != ART_TREE) {
			ev_log(c, EV_DEBUG, "%s: not decoded ahead (%s): its step decodes it",
			       s->v[i].name, why_text(&d->why[i]));
			continue;
		}
		*failed = i;
		return why_fail(why, d->why[i].code, "%s: %s", s->v[i].name, why_text(&d->why[i]));
	}
	return 0;
}

int artset_decode_ahead(struct ctx *c, struct artset *s, struct ahead **scratch, size_t *failed,
                        struct why *why)
{
	struct fetch_job job;
	struct decode d;
	size_t jobs = decoders(c), stopped = 0, n = s->n, npy = 0;
	int rc = 0;
	*failed = n;
	decode_init(&d, c, s, &job);
	struct ahead *p = *scratch;
	if (p == NULL) {
		p = *scratch = xcalloc(1, sizeof(*p));
		p->lockfd = -1;
	}
	char *base = path_join(c->cache_dir, "unpack");
	scratch_clean_stale(c, base);
	free(base);
	if ((rc = ahead_choose(c, s, p, &d, &npy, failed, why)) != 0)
		goto out;
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
		why_move(why, &d.stopped[stopped]);
		rc = TF_EINTEGRITY;
		goto out;
	}
	decode_verified(&d, jobs);
	if ((rc = ahead_check(c, s, &d, failed, why)) != 0)
		goto out;
	/* Each tree stays on its art until its step takes it (art_take_tree). */
	for (size_t i = 0; i < n; i++) {
		if (d.parts[i] == NULL || !d.ready[i])
			continue;
		struct art *a = &s->v[i];
		a->tree = d.parts[i];
		a->tree_res = xmalloc(sizeof(*a->tree_res));
		*a->tree_res = d.res[i];
		a->tree_done = d.done[i];
		d.parts[i] = NULL;
		memset(&d.res[i], 0, sizeof(d.res[i]));
	}
out:
	decode_release(&d, NULL);
	return rc;
}

void artset_decode_ahead_release(struct ahead *p)
{
	if (p == NULL)
		return;
	if (p->dir) {
		fs_rmtree(p->dir);
		unlink(p->lock);
	}
	if (p->lockfd >= 0)
		close(p->lockfd);
	free(p->dir);
	free(p->lock);
	free(p);
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

int art_take_tree(struct ctx *c, struct art *a, const char *dest, struct unpack_result *res)
{
	char *tree = a->tree, *bad = NULL;
	struct unpack_result *r = a->tree_res;
	int rc = -ENOENT;
	if (tree == NULL)
		return -ENOENT;
	a->tree = NULL;
	a->tree_res = NULL;
	if (rename(tree, dest) != 0) {
		int e = errno;
		if (a->unpack == ART_TREE)
			ev_log(c, EV_DEBUG, "%s: cannot move %s to %s (%s): unpacking it again",
			       a->name, tree, dest, strerror(e));
		else
			ev_log(c, e == EXDEV ? EV_DEBUG : EV_WARN,
			       "%s: cannot move its tree decoded ahead %s to %s (%s): unpacking it "
			       "again",
			       a->name, tree, dest, strerror(e));
		fs_rmtree(tree);
	} else if (a->unpack != ART_TREE && (bad = tree_damage(dest, r, &a->tree_done)) != NULL) {
		ev_log(c, EV_WARN,
		       "%s: its tree decoded ahead in the cache's scratch was changed (%s): "
		       "unpacking it again",
		       a->name, bad);
		free(bad);
		fs_rmtree(dest);
	} else {
		if (a->unpack == ART_TREE)
			ev_log(c, EV_DEBUG, "%s: unpacked ahead, moved into %s", a->name, dest);
		else
			ev_log(c, EV_DEBUG, "%s: unpacked ahead, taken from the scratch into %s",
			       a->name, dest);
		*res = *r;
		memset(r, 0, sizeof(*r));
		rc = 0;
	}
	unpack_result_release(r);
	free(r);
	free(tree);
	return rc;
}
