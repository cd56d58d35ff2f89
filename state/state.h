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
 * the placement layer), cache (downloaded artifacts), bench_results.
 *
 * The store is opaque: <sqlite3.h> is included under state/ only. Queries
 * the store has no function for run through the statement API below, whose
 * every prepare, bind and step is checked. state_close() releases it all.
 */
#ifndef TFPROV_STATE_H
#define TFPROV_STATE_H

#include <stdint.h>

/* Opaque: the SQLite handle and the lock live in state_private.h. */
struct state;

#define STATE_SCHEMA_VERSION 2

/*
 * Opens (creating dir and db when `create`), runs migrations. 0 or TF_ESTATE;
 * -ENOENT (and *out NULL) when there is no database and `create` is 0.
 */
int state_open(const char *dir, int create, struct state **out, char **errmsg);
void state_close(struct state *st);
/* The last SQLite error message of this connection (borrowed). */
const char *state_errmsg(struct state *st);

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
 * The statement API: the only way code outside state/ runs a query. A
 * struct state_stmt is one prepared query. A failed prepare, bind or step is
 * remembered (the first one, with SQLite's message) so that a command never
 * reports an empty answer ("No stacks.") for a query that did not run:
 * main() turns a remembered failure into an error (exit 1) even when the
 * command did not notice.
 */
struct state_stmt;
enum { STATE_OK = 0, STATE_ROW = 100, STATE_DONE = 101 };
/* STATE_OK or TF_ESTATE; *out is NULL on failure. */
int state_prepare(struct state *st, const char *sql, struct state_stmt **out);
/* STATE_ROW, STATE_DONE, or TF_ESTATE (also for a NULL statement). */
int state_step(struct state_stmt *q);
/* Binds copy their value; text NULL binds SQL NULL. 0 or TF_ESTATE. */
int state_bind_text(struct state_stmt *q, int i, const char *s);
int state_bind_int64(struct state_stmt *q, int i, int64_t v);
int state_bind_null(struct state_stmt *q, int i);
/* Columns of the current row (text borrowed until the next step). */
const char *state_col_text(struct state_stmt *q, int i);
int64_t state_col_int64(struct state_stmt *q, int i);
int state_col_int(struct state_stmt *q, int i);
int state_col_is_null(struct state_stmt *q, int i);
int state_reset(struct state_stmt *q);
void state_finalize(struct state_stmt *q);
int64_t state_last_rowid(struct state *st);
int state_changes(struct state *st);
/* The first failed query's message, or NULL when every query ran. */
const char *state_failure(void);
/* The state directory (borrowed). */
const char *state_dir(struct state *st);

int state_exec(struct state *st, const char *sql);
int state_begin(struct state *st);
int state_commit(struct state *st);
void state_rollback(struct state *st);

/* Stacks. */
int64_t state_stack_id(struct state *st, const char *name); /* 0 when absent */
/* The stack's id, created with manifest_path when new; an existing one keeps its path. */
int64_t state_stack_ensure(struct state *st, const char *name, const char *manifest_path);
/* A run of the stack from manifest_path succeeded: it is now "from" that manifest.
 * 0 or TF_ESTATE. */
int state_stack_applied(struct state *st, int64_t id, const char *manifest_path);

/* Generations. */
int64_t state_gen_begin(struct state *st, int64_t stack_id, const char *manifest_path,
                        const char *manifest_sha256, const char *manifest_text);
int state_gen_finish(struct state *st, int64_t gen_id, const char *result);

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
/* Owner resource id of a path, 0 when tfprov does not own it. */
int64_t state_file_owner(struct state *st, const char *path);
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

#endif
