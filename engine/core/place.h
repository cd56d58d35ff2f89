/*
 * place.h - the placement layer: every filesystem change tfprov makes.
 *
 * A struct txn belongs to one step (one resource of one stack). Protocol:
 *
 *   txn_begin -> (txn_put_file | txn_put_tree | txn_remove)* -> txn_commit
 *
 * Each operation first writes its intent to the journal table (committed),
 * then stages bytes in the destination directory and renames them into place;
 * a path that existed is first renamed aside as a backup. txn_commit does one
 * syncfs per filesystem the txn wrote to (checked: a failure commits nothing),
 * then in ONE SQLite transaction records the files, the resource and
 * drops the journal rows (keeping backups as 'gc' rows that are deleted
 * after). txn_abort and place_recover undo whatever the journal says was
 * started and not committed: remove new paths, restore backups.
 *
 * So a kill at any instant leaves either the old state (recovered on the next
 * run) or the new one; never a file recorded that is not on disk, never a
 * half-written file at a final path.
 *
 * Paths given to these functions are root-relative absolute paths
 * ("/opt/tfprov/..."); the txn maps them under ctx->root.
 */
#ifndef TFPROV_PLACE_H
#define TFPROV_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "ctx.h"
#include "error.h"

struct txn;

/* A file of a staged tree, as unpack reports it (paths relative to the tree). */
struct place_entry {
	const char *path;
	char type; /* 'f', 'd', 'l' */
	const char *sha256;
	int64_t size;
	unsigned mode;
	const char *link;
};

int txn_begin(struct ctx *c, int64_t stack_id, const char *addr, const char *kind,
              struct txn **out);
/* Writes a whole small file atomically (tmp in the same dir, fsync, rename). */
int txn_put_file(struct txn *t, const char *path, const void *data, size_t len, unsigned mode);
/*
 * Moves a staged directory (a host path on the destination filesystem) to
 * `path`. The staged tree must not contain paths owned by someone else.
 * Entries (relative to the tree) are recorded.
 */
int txn_put_tree(struct txn *t, const char *staged_host_dir, const char *path,
                 const struct place_entry *entries, size_t n);
/*
 * Places a staged tree at `path` where other stacks may own parts of it
 * already (two stacks with one CUDA version share its prefix; cuDNN merged
 * into such a prefix). Afterwards this resource records exactly the tree's
 * entries and its root `path`:
 *  - an entry on disk with the content another resource records for it
 *    (type, sha256 and mode, or link target) is shared: recorded for this
 *    resource too, nothing written; one that drifted from that record is
 *    put back to those bytes;
 *  - an absent entry is placed (journaled, staged beside it, renamed), as
 *    is one only this resource records, when it changed;
 *  - what this resource recorded before and the tree no longer holds is
 *    released (txn_remove_paths: removed unless another resource records it).
 * An entry that exists with other content than another stack records, or
 * that tfprov did not place, is a conflict (TF_ECONFLICT naming the path and
 * the stack), found before any write.
 */
int txn_share_tree(struct txn *t, const char *staged_host_dir, const char *path,
                   const struct place_entry *entries, size_t n);
/*
 * Releases (as txn_remove_paths) every path this resource records outside
 * directory `keep`: a stack whose CUDA version changed leaves the old prefix
 * to the stacks that still use it, or removes it.
 */
int txn_remove_outside(struct txn *t, const char *keep);
/*
 * Replaces the directory `path` by the staged tree (a host path on the same
 * filesystem, typically from txn_stage_dir) with one journaled pair of
 * renames; the old tree is garbage once the txn commits, and an abort or a
 * kill puts it back. `path` must be a directory tfprov placed (the env a pip
 * step installs into belongs to the stack's pyenv step), or absent (then its
 * parents are created, journaled, and the tree is renamed in). Nothing is
 * recorded: the owner records the tree (txn_record_tree) or re-reads its
 * files (txn_refresh_resource).
 */
int txn_replace_dir(struct txn *t, const char *staged_host_dir, const char *path);
/* Creates a journaled staging directory next to `near_path` (root-relative)
 * for an unpack; *host_out is a host path that does not exist yet. */
int txn_stage_dir(struct txn *t, const char *near_path, char **host_out);
/* Removes a path (file, symlink or tree) tfprov placed. */
int txn_remove(struct txn *t, const char *path);
/*
 * Removes every file and link recorded for this resource (destroy / replace);
 * its recorded directories go after the commit, each only when nothing is
 * left in it: what tfprov did not place is kept and listed (txn_kept).
 */
int txn_remove_all(struct txn *t);
/* Removes `paths` (files or links, journaled like txn_remove, in one
 * journal transaction) and, after the commit, `dirs` when empty (may be NULL).
 * A path or directory another resource also records stays where it is: only
 * this resource's record of it goes (an EV_KEPT names the stack using it). */
struct strvec;
int txn_remove_paths(struct txn *t, const struct strvec *paths, const struct strvec *dirs);
/* After txn_commit: what the removal kept ("path" or "dir/"), borrowed. */
const struct strvec *txn_kept(const struct txn *t);
/* The stack this txn belongs to. */
int64_t txn_stack_id(const struct txn *t);
/*
 * Announces that `path` will be built in place by something else (python -m
 * venv writes its own path into the env, so it cannot be staged and
 * renamed): journaled, so a kill before the commit removes what was built.
 * A path that exists must be this resource's (an update), else it is a
 * conflict; it is renamed aside first as the journal row's backup, so an
 * abort or a kill puts it back and the commit deletes it.
 */
int txn_will_create(struct txn *t, const char *path);

/*
 * A tree built in place by another program (a venv: `python -m venv`, whose
 * ensurepip runs pip as a grandchild) holds PLACE_BUSY_NAME open, with a
 * shared flock, as the stdin of that program and so of its children. A
 * kill -9 of tfprov kills the direct child (parent-death signal), not the
 * grandchildren; recovery waits (bounded) for the exclusive lock before it
 * removes the tree, so no orphan writes into a tree being removed.
 */
#define PLACE_BUSY_NAME ".tfprov-busy"
/*
 * Records a tree built through this txn (txn_replace_dir, txn_will_create:
 * a path this txn journaled) or that this resource placed before; any other
 * tree is refused (TF_ECONFLICT). The records are written at the commit.
 */
int txn_record_tree(struct txn *t, const char *path, const struct place_entry *entries, size_t n);
/* Forgets every record of this resource at commit (the files are rebuilt):
 * it changes nothing before the commit's one SQLite transaction. */
int txn_forget_all(struct txn *t);
/* Re-reads, inside the commit's SQLite transaction, the recorded files of
 * another resource of this stack that this step changed on purpose (pip
 * inside the env): missing ones are forgotten, changed ones rehashed. A kill
 * before the commit leaves those records as they were, with the env (the
 * step's journaled snapshot puts it back). */
int txn_refresh_resource(struct txn *t, const char *addr);
/* Records desired/attrs and makes everything durable and recorded. */
int txn_commit(struct txn *t, const char *desired, const char *attrs);
void txn_abort(struct txn *t);
/* The txn's last failure (borrowed: the caller may take it with why_move);
 * empty when a failure came from elsewhere than the txn's own operations. */
struct why *txn_why(struct txn *t);

/* Opens (creating) the state db, takes the writer lock (c->lock_timeout) and
 * recovers interrupted runs. 0, or TF_ELOCKED, TF_EINTR or TF_ESTATE with its
 * words in why (who holds the lock, how long it waited). */
int place_open_state(struct ctx *c, struct why *why);

/*
 * What the placement layer knows about ownership, for steps (which do not
 * talk to the store): 1 when tfprov placed path (any stack), else 0.
 */
int place_is_owned(struct ctx *c, const char *path);
/*
 * A file that step `addr` of a stack other than `stack` placed under prefix:
 * 0 with *other_stack and *path (malloc'd; NULL when there is none), or an
 * error.
 */
int place_foreign_step_file(struct ctx *c, const char *addr, const char *stack, const char *prefix,
                            char **other_stack, char **path);
/*
 * The stacks other than `stack` whose step `addr` records `prefix` or a path
 * under it (who shares a CUDA prefix), in name order, with that resource's
 * desired digest and attrs ("" when none) when `desired` and `attrs` are not
 * NULL. 0 or TF_ESTATE; nothing without a state.
 */
int place_sharers(struct ctx *c, const char *addr, const char *stack, const char *prefix,
                  struct strvec *stacks, struct strvec *desired, struct strvec *attrs);

/*
 * Makes a hard-link snapshot of the directory `path` (root-relative) beside
 * it and journals it, for a program that changes the tree in place (pip in
 * an env). From here until the txn commits, txn_abort() and the recovery of
 * a killed run put the snapshot back in place of path (the recovery first
 * waits for PLACE_BUSY_NAME); the commit deletes it. The snapshot is durable
 * before the row that names it, and it carries PLACE_SNAP_MARK, so that a
 * recovery killed half-way through putting it back is finished by the next
 * one. The caller must neither remove nor swap the snapshot itself. 0 with
 * *snap_host (its host path; caller frees), or an error (txn_why).
 */
#define PLACE_SNAP_MARK ".tfprov-snapshot"
int txn_snapshot_dir(struct txn *t, const char *path, char **snap_host);

/* Undoes interrupted transactions found in the journal. Needs the writer lock.
 * Returns the number of operations undone, or a negative error. */
int place_recover(struct ctx *c);

/*
 * Whether an owner besides the state's records (an installer's package
 * records, pkgfiles_owned) owns a root-relative path: PLACE_OWNED for path
 * itself, PLACE_OWNS_BELOW when not path but something below directory
 * path, 0 neither.
 */
enum { PLACE_OWNED = 1, PLACE_OWNS_BELOW = 2 };
typedef int (*place_owned_fn)(void *arg, const char *path);
/*
 * The one walk for what tfprov did not place (the refusal to replace a tree,
 * destroy's listing, verify --deep's audit): appends to `out` what lies in
 * directory `dir` (root-relative, walked through recorded and tfprov-made
 * directories and those `owned` owns or owns something below) that no
 * record and no `owned` (may be NULL: nobody else) owns: "path", or "dir/"
 * for a directory, listed once at its top.
 */
void place_foreign(struct ctx *c, const char *dir, place_owned_fn owned, void *arg,
                   struct strvec *out);
/* place_foreign over recorded directories: each top one walked once, in path order. */
void place_foreign_dirs(struct ctx *c, const struct strvec *dirs, place_owned_fn owned, void *arg,
                        struct strvec *out);

#endif
