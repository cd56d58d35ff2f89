/*
 * event.c - the core's events go to the handler the front end registers
 * (cli/render.c draws them for a terminal or writes JSON lines); with none
 * registered (unit tests, fuzzers) they are dropped. See event.h.
 */
#include "event.h"

#include "util.h"

#include <stdarg.h>
#include <stdlib.h>

static ev_handler_fn handler;
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
