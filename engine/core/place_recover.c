/*
 * place_recover.c - undoing journal rows (the table in place.c's header):
 * one by one for txn_abort, and all of them for place_recover, which
 * place_open_state runs under the writer lock before anything else, so a
 * killed run's half-done change is put back before the next one starts.
 *
 * An undo waits for the orphans of a killed run (stage and tree locks)
 * and is durable before the rows that describe it are deleted.
 */
#include "place_txn.h"
#include "error.h"
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/*
 * Waits (10 s at most) until no process of the run that made a stage still
 * uses it. The wheel installer's byte-compiler and its workers hold a shared
 * flock on their stage directory while they live (wheel.c); a kill -9 of
 * tfprov takes them along through parent-death signals, but not in the same
 * instant, and a recovery that removed the stage meanwhile could find files
 * written into it after its walk.
 */
static void stage_wait_idle(const char *host)
{
	int fd = open(host, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	for (int i = 0; i < 1000 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK; i++)
		usleep(10000);
	close(fd);
}

/*
 * Waits (PLACE_BUSY_NAME, place.h; 120 s at most: ensurepip on a loaded
 * machine) until no orphan of a killed run still writes into a tree built in
 * place.
 */
static void tree_wait_idle(const char *host)
{
	char *busy = path_join(host, PLACE_BUSY_NAME);
	int fd = open(busy, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	free(busy);
	if (fd < 0)
		return;
	for (int i = 0; i < 12000 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK; i++)
		usleep(10000);
	close(fd);
}

/*
 * Puts a journaled snapshot (txn_snapshot_dir) back in place of host, in a
 * way that a kill at any instant of it leaves for the next recovery to
 * finish: the snapshot carries PLACE_SNAP_MARK from its creation on, so the
 * marker says which side of the exchange the snapshot is on. Not yet swapped
 * (the marker in backup): exchange the two names, and make that durable.
 * Swapped (the marker in host): remove what pip left (now at backup), then
 * the marker. Without the marker anywhere the restore had already finished.
 */
static void snap_restore(const char *host, const char *backup)
{
	char *mark_b = path_join(backup, PLACE_SNAP_MARK);
	char *mark_h = path_join(host, PLACE_SNAP_MARK);
	if (!place_exists(mark_h) && place_exists(mark_b)) {
		int e = place_exists(host) ? fs_swap_in_keep(backup, host) : 0;
		if (!place_exists(host) && rename(backup, host) != 0)
			e = -errno;
		if (e != 0 || place_sync_parent(host) != 0)
			goto out; /* the row stays; the next recovery tries again */
	}
	if (place_exists(mark_h)) {
		fs_rmtree(backup);
		unlink(mark_h);
	}
out:
	free(mark_b);
	free(mark_h);
}

/* Undoes one journal row. */
void place_undo_row(struct ctx *c, const char *op, const char *path, const char *tmp,
                    const char *backup)
{
	char *host = ctx_host_path(c, path);
	if (strcmp(op, "stage") == 0) {
		stage_wait_idle(host);
		fs_rmtree(host);
	} else if (strcmp(op, "mkdir") == 0 || strcmp(op, "rmdir") == 0) {
		/* Only when empty: anything inside is someone's. (rmdir: the
		 * directory of a committed removal, journaled with the commit.) */
		rmdir(host);
	} else if (strcmp(op, "put") == 0 || strcmp(op, "tree") == 0) {
		if (strcmp(op, "tree") == 0)
			tree_wait_idle(host);
		if (tmp && place_exists(tmp) && strcmp(op, "put") == 0)
			fs_rmtree(tmp);
		if (tmp && strcmp(op, "tree") == 0)
			fs_rmtree(tmp);
		/*
		 * No backup means the path did not exist when the intent was
		 * journaled (we hold the lock), so whatever is there now is this
		 * unfinished operation's and goes; even if an older record names
		 * the path (an update that removed, then re-created it).
		 */
		if (backup && place_exists(backup)) {
			fs_rmtree(host);
			rename(backup, host);
		} else if (backup == NULL && place_exists(host)) {
			fs_rmtree(host);
		}
	} else if (strcmp(op, "rm") == 0) {
		if (backup && place_exists(backup)) {
			fs_rmtree(host);
			rename(backup, host);
		}
	} else if (strcmp(op, "snap") == 0) {
		tree_wait_idle(host);
		if (backup)
			snap_restore(host, backup); /* the directory as it was before the txn */
	} else if (strcmp(op, "gc") == 0) {
		if (backup)
			fs_rmtree(backup);
	}
	free(host);
}

/*
 * Recovery runs again after a kill or a power cut in the middle of it, and
 * an undo is not idempotent once an older row has put a backup back: the
 * undo of a newer 'put' without backup ("whatever is at the path now is
 * ours") or 'mkdir' ("remove it if empty") would then hit the restored
 * generation's file or directory (a conda env's activate.d hook, put into the
 * new env after the env was swapped: test_power_loss.py's conda-replace
 * variant, test_durability.py). So before such a restore, the undo done so
 * far is made durable and its rows go: a second recovery starts at the
 * restore.
 */
struct undo_ref {
	const char *path;
	size_t i; /* index in the rows, newest first */
};

static int undo_ref_cmp(const void *a, const void *b)
{
	const struct undo_ref *x = a, *y = b;
	int d = strcmp(x->path, y->path);
	return d ? d : (x->i > y->i) - (x->i < y->i);
}

/* The first ref whose path is not below key in byte order. */
static size_t undo_ref_lower(const struct undo_ref *r, size_t n, const char *key)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(r[mid].path, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether a row undone since the last checkpoint (index in [from, i)) lies at
 * or under path (the refs sorted by path). */
static int undone_under(const struct undo_ref *r, size_t n, const char *path, size_t from, size_t i)
{
	size_t len = strlen(path);
	char *dir = xmalloc(len + 2);
	memcpy(dir, path, len);
	memcpy(dir + len, "/", 2);
	int hit = 0;
	for (size_t k = undo_ref_lower(r, n, path); !hit && k < n && strcmp(r[k].path, path) == 0;
	     k++)
		hit = r[k].i >= from && r[k].i < i;
	for (size_t k = undo_ref_lower(r, n, dir);
	     !hit && k < n && strncmp(r[k].path, dir, len + 1) == 0; k++)
		hit = r[k].i >= from && r[k].i < i;
	free(dir);
	return hit;
}

static int undo_restores(const struct state_journal_entry *e)
{
	return e->backup != NULL && (strcmp(e->op, "put") == 0 || strcmp(e->op, "tree") == 0 ||
	                             strcmp(e->op, "rm") == 0 || strcmp(e->op, "snap") == 0);
}

/* The undo so far made durable, then its rows (newer than `id`) removed. 0, or
 * TF_EIO / TF_ESTATE (the recovery goes on without the checkpoint). */
static int recover_checkpoint(struct ctx *c, int64_t id)
{
	if (c->rootfd >= 0 && syncfs(c->rootfd) != 0) {
		ev_log(c, EV_WARN, "recovery: cannot sync %s: %s", c->root, strerror(errno));
		return TF_EIO;
	}
	return state_journal_delete_newer(c->st, id) == 0 ? 0 : TF_ESTATE;
}

int place_recover(struct ctx *c)
{
	struct state *st = c->st;
	int n = 0;
	struct state_journal_entry *rows = NULL; /* newest first */
	size_t n_rows = 0;
	struct strvec rmdirs = STRVEC_INIT;
	state_journal_list(st, NULL, &rows, &n_rows);
	struct undo_ref *refs = xcalloc(n_rows ? n_rows : 1, sizeof(*refs));
	size_t n_refs = 0;
	for (size_t i = 0; i < n_rows; i++)
		if (strcmp(rows[i].op, "rmdir") != 0 && strcmp(rows[i].op, "gc") != 0)
			refs[n_refs++] = (struct undo_ref){rows[i].path, i};
	qsort(refs, n_refs, sizeof(*refs), undo_ref_cmp);
	size_t from = 0; /* rows before it are undone and gone from the journal */
	for (size_t i = 0; i < n_rows; i++) {
		const struct state_journal_entry *e = &rows[i];
		if (strcmp(e->op, "rmdir") == 0) {
			strvec_push(&rmdirs, e->path);
			continue;
		}
		if (undo_restores(e) && undone_under(refs, n_refs, e->path, from, i) &&
		    recover_checkpoint(c, e->id) == 0)
			from = i;
		place_undo_row(c, e->op, e->path, e->tmp, e->backup);
		if (strcmp(e->op, "gc") != 0)
			n++;
	}
	free(refs);
	/* Last, once the garbage in them is gone: a committed removal's
	 * directories, deepest first, each only when empty. */
	if (rmdirs.n > 1)
		qsort(rmdirs.v, rmdirs.n, sizeof(char *), place_path_desc);
	for (size_t i = 0; i < rmdirs.n; i++)
		place_undo_row(c, "rmdir", rmdirs.v[i], NULL, NULL);
	strvec_release(&rmdirs);
	state_journal_free(rows, n_rows);
	/*
	 * The undo is durable before the journal that describes it goes (a power
	 * cut would otherwise keep half an undo that no row names). A failed sync
	 * is said; the rows go anyway, since this run goes on to write its own.
	 */
	if (n_rows && c->rootfd >= 0 && syncfs(c->rootfd) != 0)
		ev_log(c, EV_WARN, "recovery: cannot sync %s: %s", c->root, strerror(errno));
	/* We hold the writer lock: any generation still 'running' was killed.
	 * Nothing to recover writes nothing: a run that changes nothing (exit 6,
	 * "No changes") must leave state.db byte-for-byte as it was. */
	if (n_rows)
		state_journal_clear(st, NULL);
	state_gens_interrupted(st);
	if (n_rows)
		ev_emit(c,
		        &(struct event){.kind = EV_RECOVERED,
		                        .level = EV_WARN,
		                        .recovered = {.undone = (uint64_t)n, .leftovers = n_rows}});
	return n;
}

int place_open_state(struct ctx *c, struct why *why)
{
	char *holder = NULL;
	struct why w = {0};
	int rc = state_open(c->state_dir, 1, &c->st, &w);
	if (rc != 0) {
		rc = why_fail(why, rc < 0 ? rc : TF_ESTATE, "%s (%s)", why_text(&w), c->state_dir);
		why_clear(&w);
		return rc;
	}
	rc = c->wlock ? 0 : state_lock(c->st, c->lock_timeout, &holder); /* main holds it */
	if (rc != 0 && tf_interrupted)
		/* SIGINT/SIGTERM during the wait: nothing was changed; 130, not 4. */
		rc = why_fail(why, TF_EINTR, "interrupted while waiting for the state lock (%s)",
		              holder ? holder : "unknown");
	else if (rc != 0)
		rc = why_fail(why, rc,
		              "the state in %s is locked by another tfprov run (%s); waited %.0f s "
		              "(--lock-timeout)",
		              c->state_dir, holder ? holder : "unknown", c->lock_timeout);
	free(holder);
	if (rc != 0) {
		state_close(c->st);
		c->st = NULL;
		return rc;
	}
	place_recover(c);
	return 0;
}
