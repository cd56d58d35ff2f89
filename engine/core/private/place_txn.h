/*
 * place_txn.h - the insides of a placement transaction, shared by the three
 * files of the placement layer and nothing else:
 *   place.c         - the txn: journal rows, files and trees put, removals,
 *                     records, the commit and the abort;
 *   place_share.c   - a tree shared by several stacks (txn_share_tree);
 *   place_recover.c - undoing journal rows: an abort's, or a killed run's
 *                     at the next open of the state.
 */
#ifndef TFPROV_PLACE_TXN_H
#define TFPROV_PLACE_TXN_H

#include "error.h"
#include "place.h"
#include "event.h"
#include "state.h"
#include "util.h"

#include <sys/types.h>

struct txn {
	struct ctx *c;
	int64_t stack_id;
	char *addr;
	char *kind;
	int64_t *jids; /* journal rows of this txn */
	size_t njids, capj;
	struct state_file *adds;
	size_t nadds, capa;
	struct strvec dels;   /* record paths (and their subtrees) to forget */
	struct strvec rmdirs; /* directories to remove after the commit if empty */
	struct strvec kept;   /* what the removal found and kept (not placed by tfprov) */
	struct why why;       /* the last failure (txn_fail) */
	unsigned seq;
	int forget_all;
	struct strvec jpaths;   /* the path of each journal row of this txn (jids order) */
	struct strvec syncdirs; /* a directory on each filesystem this txn wrote to */
	dev_t *devs;
	size_t ndevs;
	struct strvec refresh;  /* resources of this stack to re-read at the commit */
	struct strvec releases; /* paths whose record of this resource goes (others keep theirs) */
	int64_t res_id;         /* txn_my_resource's answer once asked (-1: not yet) */
	struct event *said;     /* EV_PLACED/EV_REMOVED, emitted once committed (txn_said_add) */
	size_t nsaid;
};

/* The paths and types ('f', 'l', 'd') of a resource's records (place_collect_cb). */
struct collect {
	struct strvec paths;
	struct strvec types;
};

/* state_files_foreach's callback filling a struct collect. */
int place_collect_cb(const struct state_file *f, void *arg);

/* Notes a placement (path borrowed until the txn ends) for the commit to report. */
void txn_said_add(struct txn *t, enum ev_kind kind, const char *what, const char *path,
                  uint64_t count, int replaced);
/* Writes the journal's intent row before the change it describes. 0 or TF_ESTATE. */
int txn_journal_add(struct txn *t, const char *op, const char *path, const char *tmp,
                    const char *backup);
/* Keeps the txn's failure (txn_why) and returns rc. */
int txn_fail(struct txn *t, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Whether host exists (lstat: a dangling link does). */
int place_exists(const char *host);
/* Adds a record (copied) for the commit to write. */
void txn_add_record(struct txn *t, const struct state_file *f);
/* This txn's resource as recorded before it (0: a new one); asked of the store once. */
int64_t txn_my_resource(struct txn *t);
/* A fresh name beside host: <dir>/.tfprov-<tag>-<pid>-<seq>-<name> (malloc'd). */
char *txn_sibling(struct txn *t, const char *host, const char *tag);
/* Fills f's mtime (and size when unknown) from what is at host. */
void place_stat_record(struct state_file *f, const char *host);
/* Creates the missing directories above path (root-relative), each journaled first. */
int txn_mkdirs_journaled(struct txn *t, const char *path);
/* fsync of the directory that holds host. */
int place_sync_parent(const char *host);
/* qsort comparator: paths in reverse order, a directory after what it holds. */
int place_path_desc(const void *a, const void *b);
/* Undoes one journal row (place_recover.c). */
void place_undo_row(struct ctx *c, const char *op, const char *path, const char *tmp,
                    const char *backup);

#endif
