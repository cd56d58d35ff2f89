/*
 * event.h - the engine never prints; it emits events.
 *
 * The front end registers a handler at start (ev_set_handler; cli/render.c
 * turns events into terminal text or into one JSON object per line with
 * --json), as libalpm's callbacks do. Strings in an event are borrowed for
 * the duration of the emit call only. Events may come from several threads
 * (downloads): the handler serialises them.
 */
#ifndef TFPROV_EVENT_H
#define TFPROV_EVENT_H

#include <stdint.h>

struct json_t;

/* The version of the --json event schema (docs/json-events.md). */
#define TFPROV_JSON_UI_VERSION "1.0"

struct ctx;

enum ev_kind {
	EV_LOG,          /* a message at a level */
	EV_PLAN_STEP,    /* one planned step: step, action, msg (detail) */
	EV_PLAN_SUMMARY, /* counts: add, change, destroy, read */
	EV_STEP_START,   /* apply: a step begins */
	EV_STEP_DONE,    /* apply: a step ended: changed, failed, msg */
	EV_PROGRESS,     /* bytes done/total for an item (download, unpack) */
	EV_RESULT,       /* end of a command: exit code and msg */
	EV_DATA,         /* a command's result as data (type, data): --json only */
};

enum ev_level { EV_DEBUG, EV_INFO, EV_WARN, EV_ERROR };

struct event {
	enum ev_kind kind;
	enum ev_level level;
	const char *step;   /* step address, e.g. "cuda" or "env" */
	const char *action; /* noop, create, update, replace, delete, read */
	const char *item;   /* progress: the artifact or file */
	const char *msg;
	uint64_t done, total;
	int changed, failed;
	int add, change, destroy, read; /* EV_PLAN_SUMMARY */
	int exit_code;                  /* EV_RESULT */
	const char *type;               /* EV_DATA: the event's "type" */
	struct json_t *data;            /* EV_DATA: its "data" object (borrowed) */
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

#endif
