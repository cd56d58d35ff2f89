/*
 * event.c - the core's events go to the handler the front end registers
 * (cli/render.c draws them for a terminal or writes JSON lines); with none
 * registered (unit tests, fuzzers) they are dropped. See event.h.
 */
#include "event.h"

#include "ctx.h"
#include "util.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>

static ev_handler_fn handler;

const char *ev_kind_name(enum ev_kind k)
{
#define EV_KIND_NAME(kind, name)                                                                   \
	case kind:                                                                                 \
		return name;
	switch (k) {
		EV_KINDS(EV_KIND_NAME)
	}
#undef EV_KIND_NAME
	return "log";
}
static void *handler_ud;

void ev_set_handler(ev_handler_fn fn, void *ud)
{
	handler = fn;
	handler_ud = ud;
}

void ev_emit(struct ctx *c, const struct event *e)
{
	if (handler)
		handler(handler_ud, c, e);
}

void ev_log(struct ctx *c, enum ev_level lvl, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	struct event e = {.kind = EV_LOG, .level = lvl, .msg = msg};
	ev_emit(c, &e);
	free(msg);
}

void ev_progress(struct ctx *c, const char *step, const char *item, uint64_t done, uint64_t total)
{
	struct event e = {.kind = EV_PROGRESS,
	                  .level = EV_INFO,
	                  .step = step,
	                  .item = item,
	                  .done = done,
	                  .total = total};
	ev_emit(c, &e);
}

void ev_finding(struct ctx *c, enum ev_level lvl, const struct ev_finding *f, const char *msg)
{
	struct event e = {.kind = EV_FINDING, .level = lvl, .msg = msg, .finding = *f};
	ev_emit(c, &e);
}

void ev_data(struct ctx *c, const char *type, struct json_t *data)
{
	if (!(c->flags & CTX_JSON))
		return;
	struct event e = {.kind = EV_DATA, .level = EV_INFO, .type = type, .data = data};
	ev_emit(c, &e);
}

void ev_version(struct ctx *c, const char *version)
{
	if (!(c->flags & CTX_JSON))
		return;
	json_t *d = json_pack("{s:s,s:s}", "tfprov", version, "ui", TFPROV_JSON_UI_VERSION);
	char *msg = xasprintf("tfprov %s", version);
	struct event e = {
	    .kind = EV_DATA, .level = EV_INFO, .type = "version", .data = d, .msg = msg};
	ev_emit(c, &e);
	free(msg);
	json_decref(d);
}
