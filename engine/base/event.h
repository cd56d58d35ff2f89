/*
 * event.h - the engine never prints; it emits events.
 *
 * The front end registers a handler at start (ev_set_handler; cli/render.c
 * turns events into terminal text or into one JSON object per line with
 * --json), as libalpm's callbacks do. Strings in an event are borrowed for
 * the duration of the emit call only. Events may come from several threads
 * (downloads): the handler serialises them.
 *
 * What a --json consumer acts on is a typed event carrying facts as fields
 * (a download, a verification, a placement, a finding: pkg's
 * pkg_emit_file_mismatch, libalpm's event union); the front end phrases
 * those for a terminal. EV_LOG is prose for people: a consumer gets it as
 * "@message" and should never have to parse it.
 */
#ifndef TFPROV_EVENT_H
#define TFPROV_EVENT_H

#include <stddef.h>
#include <stdint.h>

struct json_t;

/*
 * The version of the --json event schema (docs/json-events.md, where its
 * changelog is): the major number changes only when a field is removed or
 * changes meaning.
 */
#define TFPROV_JSON_UI_VERSION "1.6"

struct ctx;

/*
 * Every kind of event with the "type" it has in --json (docs/json-events.md
 * documents each; tests/system/test_json_events.py fails on one it does not).
 * EV_DATA's type is the caller's (ev_data).
 */
#define EV_KINDS(X)                                                                                \
	X(EV_LOG, "log")                         /* a message at a level */                        \
	X(EV_PLAN_STEP, "planned_change")        /* one planned step: step, action, msg */         \
	X(EV_PLAN_SUMMARY, "change_summary")     /* counts: add, change, destroy, read */          \
	X(EV_STEP_START, "apply_start")          /* apply: a step begins */                        \
	X(EV_STEP_DONE, "apply_complete")        /* apply: a step ended: changed, failed */        \
	X(EV_PROGRESS, "progress")               /* bytes done/total of an item */                 \
	X(EV_DOWNLOAD_START, "download_start")   /* art: an attempt from one source */             \
	X(EV_DOWNLOAD_RETRY, "download_retry")   /* art: an attempt failed, another follows */     \
	X(EV_DOWNLOAD_FAILED, "download_failed") /* art: no source gave the artifact */            \
	X(EV_DOWNLOAD_DONE, "download_done")     /* art: verified and in the cache */              \
	X(EV_VERIFIED, "artifact_verified")      /* art: size and sha256 as the manifest says */   \
	X(EV_MISMATCH, "artifact_mismatch")      /* art: size or sha256 differ; quarantined */     \
	X(EV_OFFLINE, "offline_missing")         /* offline: what --offline could not find */      \
	X(EV_PLACED, "placed")                   /* place: a file or tree committed */             \
	X(EV_REMOVED, "removed")                 /* place: paths removed, committed */             \
	X(EV_KEPT, "kept")                       /* place: left in place, not tfprov's */          \
	X(EV_RECOVERED, "recovered")             /* recovered: a killed run's journal undone */    \
	X(EV_FINDING, "finding")                 /* finding: of verify, status or doctor */        \
	X(EV_RESULT, "result")                   /* end of a command: exit code */                 \
	X(EV_DATA, "data")                       /* a command's result as data (type, data) */

#define EV_KIND_ENUM(k, name) k,
enum ev_kind { EV_KINDS(EV_KIND_ENUM) };
#undef EV_KIND_ENUM

/* The "type" of a kind in --json ("data" for EV_DATA, whose event names its own). */
const char *ev_kind_name(enum ev_kind k);

enum ev_level { EV_DEBUG, EV_INFO, EV_WARN, EV_ERROR };

/*
 * One artifact of the download pipeline (EV_DOWNLOAD_*, EV_VERIFIED,
 * EV_MISMATCH); the event's item is its name.
 */
struct ev_art {
	const char *sha256;      /* the manifest's (expected) sha256 */
	int64_t size;            /* the manifest's size in bytes, -1 when it names none */
	const char *source;      /* URL or mirror file the bytes came from; "cache" */
	const char *mirror;      /* the --mirror the source belongs to, or NULL */
	uint64_t offset;         /* EV_DOWNLOAD_START: the byte a resumed attempt starts at */
	uint64_t bytes;          /* bytes received or checked */
	int from_cache;          /* EV_DOWNLOAD_DONE: no network: the verified cache copy */
	const char *path;        /* EV_DOWNLOAD_DONE: the file in the cache */
	const char *check;       /* EV_MISMATCH: "size" or "sha256", the check that failed */
	const char *expected;    /* EV_MISMATCH: expected value of that check */
	const char *actual;      /* EV_MISMATCH: what the bytes have ("more" when too long) */
	const char *quarantined; /* EV_MISMATCH: where the bytes were moved, or NULL */
	const char *error;       /* EV_DOWNLOAD_RETRY/FAILED: what went wrong */
};

/* One artifact --offline could not find (in struct ev_offline). */
struct ev_missing {
	const char *name;
	const char *sha256;
	int64_t size; /* -1 when the manifest names none */
	const char *url;
};

/*
 * Every artifact --offline could not find, in the cache nor in a mirror
 * (EV_OFFLINE), said once for all of them rather than once per artifact.
 */
struct ev_offline {
	const struct ev_missing *missing;
	size_t n;
	const char *cache;          /* the download cache looked in */
	const char *const *mirrors; /* the --mirror looked in, in order */
	size_t nmirrors;
};

/* One placement of a step's transaction (EV_PLACED, EV_REMOVED, EV_KEPT); step is the txn's. */
struct ev_place {
	const char *path; /* root-relative */
	const char *what; /* EV_PLACED: "file", "tree" or "share" (files into a shared tree) */
	uint64_t count;   /* entries placed (a tree's, with its directories) or removed (files
	                    * and links); 0: not counted (a tree replaced whole) */
	int replaced;     /* EV_PLACED: a previous version was moved aside and replaced */
	const char *why;  /* EV_KEPT: why it stays */
};

/* What the recovery of a killed run did (EV_RECOVERED), before this run's work. */
struct ev_recovered {
	uint64_t undone;    /* unfinished operations undone (0: its change had committed) */
	uint64_t leftovers; /* its journal rows, cleared (with the backups they kept) */
};

/* One finding of verify, status or doctor (EV_FINDING). */
struct ev_finding {
	const char *origin;   /* "verify", "status" or "doctor" */
	const char *kind;     /* what was found (docs/json-events.md lists them per origin) */
	const char *severity; /* "ok", "note", "warning", "error" or "reboot" */
	const char *stack;    /* the stack it concerns, or NULL (the machine) */
	const char *path;     /* the path or object (soname) it concerns, or NULL */
	const char *expected; /* what tfprov placed or requires, or NULL */
	const char *actual;   /* what is there, or NULL */
	const char *code;     /* verify files: A, M, U or X (as audit_finding) */
	const char *package;  /* verify files: the pip or conda package owning path */
	const char *why;      /* the reason or detail, or NULL */
	const char *fix;      /* what to do, or NULL */
};

struct event {
	enum ev_kind kind;
	enum ev_level level;
	const char *step;   /* step address, e.g. "cuda" or "env" */
	const char *action; /* noop, create, update, replace, delete, read */
	const char *item;   /* progress: the artifact or file */
	const char *msg; /* the sentence; typed events without one are phrased by the front end */
	uint64_t done, total;
	int changed, failed;
	int add, change, destroy, read; /* EV_PLAN_SUMMARY */
	int exit_code;                  /* EV_RESULT */
	const char *type;               /* EV_DATA: the event's "type" */
	struct json_t *data;            /* EV_DATA: its "data" object (borrowed) */
	struct ev_art art;              /* EV_DOWNLOAD_*, EV_VERIFIED, EV_MISMATCH */
	struct ev_place place;          /* EV_PLACED, EV_REMOVED, EV_KEPT */
	struct ev_finding finding;      /* EV_FINDING */
	struct ev_offline offline;      /* EV_OFFLINE */
	struct ev_recovered recovered;  /* EV_RECOVERED */
};

typedef void (*ev_handler_fn)(void *ud, struct ctx *c, const struct event *e);
/* Registers the one handler every event goes to (NULL: events are dropped). */
void ev_set_handler(ev_handler_fn fn, void *ud);
void ev_emit(struct ctx *c, const struct event *e);
void ev_log(struct ctx *c, enum ev_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * A command's result as data (status, show, verify, diagnostics): one JSON
 * event {"type": type, "data": data} with --json; nothing on a terminal,
 * where the command logs the same facts as text. Does not take data.
 */
void ev_data(struct ctx *c, const char *type, struct json_t *data);
/* With --json, the first event of a run: the program and schema version. */
void ev_version(struct ctx *c, const char *version);
void ev_progress(struct ctx *c, const char *step, const char *item, uint64_t done, uint64_t total);
/* A finding (EV_FINDING) at a level, with the front end's sentence msg (NULL: phrased). */
void ev_finding(struct ctx *c, enum ev_level lvl, const struct ev_finding *f, const char *msg);

#endif
