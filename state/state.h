/*
 * state.h - the state database: one SQLite file per root.
 *
 * <state_dir>/state.db, WAL, foreign keys on, schema version in
 * PRAGMA user_version with ordered migrations (FreeBSD pkg's pattern).
 * One writer at a time: an flock on <state_dir>/lock, whose content names
 * the holder (pid, host, start time) for the "locked" message.
 *
 * Tables: stacks, generations (one per apply, with the manifest text, so a
 * rollback can re-apply it), resources (one per step of a stack, with the
 * hash of the desired configuration it was applied from), files (every path
 * tfprov placed: sha256, size, mode, mtime), journal (write-ahead intents of
 * the placement layer), bench_results.
 *
 * The store is closed: <sqlite3.h> and every SQL string live under state/
 * only, and the rest of tfprov asks through the named functions below (the
 * statement API is state_private.h's). A query that fails is remembered
 * (state_failure) so that a command never reports an empty answer
 * ("No stacks.") for a query that did not run. state_close() releases it all.
 */
#ifndef TFPROV_STATE_H
#define TFPROV_STATE_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"

struct strvec;

/* Opaque: the SQLite handle and the lock live in state_private.h. */
struct state;

#define STATE_SCHEMA_VERSION 5

/*
 * Opens (creating dir and db when `create`), runs migrations. 0 or TF_ESTATE;
 * -ENOENT (and *out NULL) when there is no database and `create` is 0.
 */
int state_open(const char *dir, int create, struct state **out, struct why *why);
void state_close(struct state *st);
/* The last SQLite error message of this connection (borrowed). */
const char *state_errmsg(struct state *st);
/* The version of the SQLite library linked in, as it reports it at run time
 * (`tfprov --version --verbose`: the store is the one part that speaks SQLite). */
const char *state_sqlite_version(void);

/*
 * Takes the writer lock, waiting up to timeout seconds. TF_ELOCKED with
 * *holder (malloc'd "pid 123 on host since 2026-...") when still held.
 */
int state_lock(struct state *st, double timeout, char **holder);
void state_unlock(struct state *st);

/*
 * The writer lock held apart from the database, as every writing command
 * takes it at its start (before its first fetch), also on a root that has
 * no state yet: the state directory is created if missing, and the
 * directories created are remembered. Same file, same holder line and same
 * results as state_lock. state_writer_unlock(w, forget) releases it; with
 * forget (the run created no state) it first removes the lock file and the
 * directories it created, if empty, so such a run leaves no trace. NULL: no-op.
 */
struct state_writer;
int state_writer_lock(const char *dir, double timeout, struct state_writer **out, char **holder);
void state_writer_unlock(struct state_writer *w, int forget);

/*
 * Whether a writer holds <dir>/lock now (asked of the kernel's /proc/locks,
 * so a reader never takes the lock itself): 1 with *pid (0 when in another
 * pid namespace) and *holder (the holder's line, malloc'd), else 0.
 */
int state_writer_running(const char *dir, long *pid, char **holder);

/* The first failed query's message, or NULL when every query ran. */
const char *state_failure(void);
/* A write transaction (BEGIN IMMEDIATE) around the calls that follow. 0 or TF_ESTATE. */
int state_begin(struct state *st);
int state_commit(struct state *st);
/* Undoes an open transaction; nothing when none is open. */
void state_rollback(struct state *st);

/* Stacks. */
int64_t state_stack_id(struct state *st, const char *name); /* 0 when absent */
/* The stack's id, created with manifest_path when new; an existing one keeps its path. */
int64_t state_stack_ensure(struct state *st, const char *name, const char *manifest_path);
/* A run of the stack from manifest_path succeeded: it is now "from" that manifest.
 * 0 or TF_ESTATE. */
int state_stack_applied(struct state *st, int64_t id, const char *manifest_path);
/* Appends every stack's name to out, in name order. 0 or TF_ESTATE. */
int state_stack_names(struct state *st, struct strvec *out);
/*
 * The machine's settings (migration 4): *out the value of key, NULL when it
 * is absent (caller frees); set with value NULL removes it. 0 or TF_ESTATE.
 */
int state_setting_get(struct state *st, const char *key, char **out);
int state_setting_set(struct state *st, const char *key, const char *value);
/* Forgets stack `id` with its generations, resources and files. 0 or TF_ESTATE. */
int state_stack_delete(struct state *st, int64_t id);
/*
 * Seals the state for a container image (state_image.c): every time set to
 * epoch (file mtimes to epoch seconds), manifest_path recorded instead of the
 * host's, the journal and benchmark results dropped, the file rebuilt
 * (VACUUM) and checkpointed. 0 or TF_ESTATE.
 */
int state_image_seal(struct state *st, int64_t epoch, const char *manifest_path);
/* A stack as status lists it; generations are numbered per stack from 1. */
struct state_stack_info {
	int64_t id;
	char *name;
	char *manifest_path; /* the manifest the stack is "from" */
	int64_t gen;         /* number of the current generation, 0 when none */
	int64_t applied;     /* unix time the current generation finished, 0 never */
	int64_t ngens;       /* generations recorded */
	int64_t last_gen;    /* number of the latest generation, 0 when none */
	char *last_result;   /* its result ("ok", "failed", ...), NULL when none */
	char *last_manifest; /* its manifest path, NULL when none */
};
/* Every stack, in name order: *v (state_stacks_free) and *n. 0 or TF_ESTATE. */
int state_stacks_list(struct state *st, struct state_stack_info **v, size_t *n);
void state_stacks_free(struct state_stack_info *v, size_t n);

/* Generations. */
int64_t state_gen_begin(struct state *st, int64_t stack_id, const char *manifest_path,
                        const char *manifest_sha256, const char *manifest_text);
int state_gen_finish(struct state *st, int64_t gen_id, const char *result);
/* Every generation still "running" was killed (the caller holds the writer lock): "interrupted". */
int state_gens_interrupted(struct state *st);
/* A generation read back; every string malloc'd, NULL when not recorded. */
struct state_gen {
	int64_t id; /* 0: no such generation */
	int64_t stack_id;
	char *stack;               /* the stack's name */
	int64_t number;            /* per stack, from 1 */
	int64_t started, finished; /* unix time; finished 0 while it runs */
	char *result;              /* "running", "ok", "failed", "interrupted" */
	char *manifest_sha256, *manifest_path, *manifest_text;
};
void state_gen_release(struct state_gen *g);
/* The generations of stack_id (of every stack when 0), oldest first: *v (state_gens_free). */
int state_gens_list(struct state *st, int64_t stack_id, struct state_gen **v, size_t *n);
void state_gens_free(struct state_gen *v, size_t n);
/* Generation `number` of a stack into *out (out->id 0 when none). 0 or TF_ESTATE. */
int state_gen_by_number(struct state *st, int64_t stack_id, int64_t number, struct state_gen *out);
/* Stack `name`'s current generation (out->id 0 when none); its path falls back to the stack's. */
int state_gen_current(struct state *st, const char *name, struct state_gen *out);
/* Rollback's target: successful generation `number`, or with 0 the last successful one
 * before the current; out->id 0 when none. 0 or TF_ESTATE. */
int state_gen_rollback_target(struct state *st, int64_t stack_id, int64_t number,
                              struct state_gen *out);

/* Resources. */
struct state_resource {
	int64_t id;
	char *addr;
	char *kind;
	char *desired; /* hash of the applied configuration */
	char *attrs;   /* JSON text */
};
int state_resource_get(struct state *st, int64_t stack_id, const char *addr,
                       struct state_resource *out); /* 0 found, -ENOENT absent */
void state_resource_release(struct state_resource *r);
int64_t state_resource_put(struct state *st, int64_t stack_id, const char *addr, const char *kind,
                           const char *desired, const char *attrs);
int state_resource_delete(struct state *st, int64_t res_id);
/* Every resource of a stack, oldest first: *v (state_resources_free) and *n. 0 or TF_ESTATE. */
int state_resources_list(struct state *st, int64_t stack_id, struct state_resource **v, size_t *n);
void state_resources_free(struct state_resource *v, size_t n);
/* *match 1 when resource res_id is step `addr` of stack stack_id, else 0. 0 or TF_ESTATE. */
int state_resource_matches(struct state *st, int64_t res_id, int64_t stack_id, const char *addr,
                           int *match);

/* Benchmark results (strings borrowed: for the call, or for the callback). */
struct state_bench_row {
	int64_t at;        /* unix time; 0 on add means now */
	const char *stack; /* NULL when the stack was destroyed (read only) */
	const char *source, *precision, *gpu, *tf, *cuda, *cudnn, *raw;
	double ms, ips;
};
int state_bench_add(struct state *st, int64_t stack_id, const struct state_bench_row *r);
/* Calls fn for every result of `stack` (all when NULL), oldest first; a
 * non-zero return from fn stops and is returned. 0 or TF_ESTATE. */
int state_bench_each(struct state *st, const char *stack,
                     int (*fn)(void *arg, const struct state_bench_row *r), void *arg);

/* Files. */
struct state_file {
	char *path; /* root-relative absolute path */
	char type;  /* 'f', 'l', 'd' */
	char sha256[65];
	int64_t size;
	unsigned mode;
	int64_t mtime_ns;
	char *link;
	int64_t resource_id;
};
int state_file_put(struct state *st, int64_t res_id, const struct state_file *f);
int state_file_delete(struct state *st, const char *path);
/* An owner resource id of a path (the lowest when several), 0 when tfprov does not own it. */
int64_t state_file_owner(struct state *st, const char *path);
/* Forgets resource res_id's record of `path` only (other owners keep theirs). 0 or TF_ESTATE. */
int state_file_release(struct state *st, int64_t res_id, const char *path);
/*
 * A record of `path` by a resource other than res_id (a file several stacks
 * share): *out filled (path and link malloc'd: the caller frees them), and
 * *stack (may be NULL) the owner stack's name, malloc'd; out->resource_id 0
 * when no other resource records it. 0 or TF_ESTATE.
 */
int state_file_other(struct state *st, const char *path, int64_t res_id, struct state_file *out,
                     char **stack);
/* 1 when resource res_id records `path`, else 0. */
int state_file_recorded_by(struct state *st, const char *path, int64_t res_id);
/*
 * The stacks other than stack_id whose step `addr` records `prefix` or a path
 * under it, in name order, each with that resource's desired digest and its
 * attrs ("" when none) when `desired` and `attrs` are not NULL: who shares a
 * CUDA prefix, what it placed there, and which cuDNN it merged. 0 or TF_ESTATE.
 */
int state_sharers_under(struct state *st, const char *addr, int64_t stack_id, const char *prefix,
                        struct strvec *stacks, struct strvec *desired, struct strvec *attrs);
/*
 * A file recorded for step `addr` of a stack other than `stack`, under the
 * directory `prefix`: 0 with *other_stack and *path (malloc'd; left NULL
 * when there is none), or TF_ESTATE.
 */
int state_foreign_step_file_under(struct state *st, const char *addr, const char *stack,
                                  const char *prefix, char **other_stack, char **path);
typedef int (*state_file_cb)(const struct state_file *f, void *arg);
int state_files_foreach(struct state *st, int64_t res_id, state_file_cb cb, void *arg);
int64_t state_files_count(struct state *st, int64_t res_id);
/* Like state_files_foreach with only path, type, size, mode and mtime_ns read (the covering
 * index answers it: what the drift check compares). 0, TF_ESTATE or cb's non-zero return. */
int state_files_foreach_stat(struct state *st, int64_t res_id, state_file_cb cb, void *arg);
/* The recorded paths of a resource by type. */
struct state_file_counts {
	int64_t paths, files, links, dirs;
};
int state_files_counts(struct state *st, int64_t res_id, struct state_file_counts *out);
/* Forgets every file record of resource res_id. 0 or TF_ESTATE. */
int state_files_delete(struct state *st, int64_t res_id);
/* Forgets the record of `path` and of every path recorded under it. 0 or TF_ESTATE. */
int state_file_delete_tree(struct state *st, const char *path);
/* *found 1 when some path is recorded under directory `dir`, else 0. 0 or TF_ESTATE. */
int state_file_any_under(struct state *st, const char *dir, int *found);
/* Appends the directories recorded for the stack's steps to out, in path order. */
int state_stack_dirs(struct state *st, int64_t stack_id, struct strvec *out);
/* The shortest directory recorded for step `addr` of a stack (the top of its tree):
 * *path malloc'd, NULL when none. 0 or TF_ESTATE. */
int state_step_top_dir(struct state *st, int64_t stack_id, const char *addr, char **path);

/*
 * The journal: the placement layer's write-ahead intents (place.c). `op` is
 * the operation ("put", "rm", "mkdir", "stage", "snap", "gc", "rmdir" ...);
 * tmp and backup are NULL when the operation has none.
 */
struct state_journal_entry {
	int64_t id; /* 0: no such entry */
	char *op, *path, *tmp, *backup;
};
/* Adds an intent, durable when this returns outside a transaction; *id its id (id may be NULL). */
int state_journal_add(struct state *st, const char *op, const char *path, const char *tmp,
                      const char *backup, int64_t *id);
/* Entry `id` into *out (malloc'd strings, out->id 0 when absent). 0 or TF_ESTATE. */
int state_journal_get(struct state *st, int64_t id, struct state_journal_entry *out);
/* The entries of operation `op` (all when NULL), newest first: *v (state_journal_free). */
int state_journal_list(struct state *st, const char *op, struct state_journal_entry **v, size_t *n);
void state_journal_entry_release(struct state_journal_entry *e);
void state_journal_free(struct state_journal_entry *v, size_t n);
/* Removes entry `id`. 0 or TF_ESTATE. */
int state_journal_delete(struct state *st, int64_t id);
/* Removes every entry newer than `id` but the "rmdir" ones (the recovery's
 * progress, place_recover). 0 or TF_ESTATE. */
int state_journal_delete_newer(struct state *st, int64_t id);
/* Removes every entry of operation `op` (all when NULL). 0 or TF_ESTATE. */
int state_journal_clear(struct state *st, const char *op);
/* Entry `id`'s change is committed: its backup, if any, is left as a "gc" entry to remove;
 * an entry without one goes. 0 or TF_ESTATE. */
int state_journal_settle(struct state *st, int64_t id);

#endif
