/*
 * render.c - draws engine events: human text on stdout/stderr, or one JSON
 * object per line on stdout with --json (Terraform's machine-readable UI
 * shape: "@level", "@message", "type", plus Ansible-style changed/failed).
 *
 * Off a terminal, progress is a heartbeat line at most every few seconds per
 * item; on a terminal it is a single redrawn line.
 */
#include "ctx.h"
#include "render.h"
#include "event.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct ctx *g_ctx_for_log;

static const char *level_name(enum ev_level l)
{
	switch (l) {
	case EV_DEBUG:
		return "debug";
	case EV_INFO:
		return "info";
	case EV_WARN:
		return "warn";
	case EV_ERROR:
		return "error";
	}
	return "info";
}

static const char *kind_name(enum ev_kind k)
{
	switch (k) {
	case EV_LOG:
		return "log";
	case EV_PLAN_STEP:
		return "planned_change";
	case EV_PLAN_SUMMARY:
		return "change_summary";
	case EV_STEP_START:
		return "apply_start";
	case EV_STEP_DONE:
		return "apply_complete";
	case EV_PROGRESS:
		return "progress";
	case EV_RESULT:
		return "result";
	}
	return "log";
}

static void emit_json(const struct event *e)
{
	json_t *o = json_object();
	json_object_set_new(o, "@level", json_string(level_name(e->level)));
	json_object_set_new(o, "@timestamp", json_integer(now_unix()));
	json_object_set_new(o, "type", json_string(kind_name(e->kind)));
	if (e->msg)
		json_object_set_new(o, "@message", json_string(e->msg));
	if (e->step)
		json_object_set_new(o, "step", json_string(e->step));
	if (e->action)
		json_object_set_new(o, "action", json_string(e->action));
	if (e->item)
		json_object_set_new(o, "item", json_string(e->item));
	switch (e->kind) {
	case EV_PROGRESS:
		json_object_set_new(o, "done", json_integer((json_int_t)e->done));
		json_object_set_new(o, "total", json_integer((json_int_t)e->total));
		break;
	case EV_STEP_DONE:
		json_object_set_new(o, "changed", json_boolean(e->changed));
		json_object_set_new(o, "failed", json_boolean(e->failed));
		break;
	case EV_PLAN_SUMMARY: {
		json_t *c = json_object();
		json_object_set_new(c, "add", json_integer(e->add));
		json_object_set_new(c, "change", json_integer(e->change));
		json_object_set_new(c, "remove", json_integer(e->destroy));
		json_object_set_new(c, "read", json_integer(e->read));
		json_object_set_new(o, "changes", c);
		break;
	}
	case EV_RESULT:
		json_object_set_new(o, "exit_code", json_integer(e->exit_code));
		json_object_set_new(o, "changed", json_boolean(e->changed));
		json_object_set_new(o, "failed", json_boolean(e->failed));
		break;
	default:
		break;
	}
	char *s = json_dumps(o, JSON_COMPACT);
	fputs(s, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	free(s);
	json_decref(o);
}

static const char *symbol(const char *action)
{
	if (action == NULL)
		return " ";
	if (strcmp(action, "create") == 0)
		return "+";
	if (strcmp(action, "update") == 0)
		return "~";
	if (strcmp(action, "delete") == 0)
		return "-";
	if (strcmp(action, "replace") == 0)
		return "-/+";
	if (strcmp(action, "read") == 0)
		return "<=";
	return " ";
}

static const char *symbol_color(const char *action)
{
	if (action == NULL)
		return "";
	if (strcmp(action, "create") == 0)
		return "\033[32m";
	if (strcmp(action, "update") == 0)
		return "\033[33m";
	if (strcmp(action, "delete") == 0 || strcmp(action, "replace") == 0)
		return "\033[31m";
	if (strcmp(action, "read") == 0)
		return "\033[36m";
	return "";
}

/*
 * On a terminal, progress is a board redrawn in place: one bar per active
 * item (downloads, unpacks) and a total line with rate and ETA. Any other
 * output first erases the board, which the next progress event redraws.
 */
#define BOARD_MAX 8

struct bar {
	char step[16];
	char item[72];
	uint64_t done, total;
};

static struct {
	struct bar bars[BOARD_MAX];
	int n;
	int drawn; /* lines on screen */
	uint64_t sum_done, sum_total, t0, last_draw;
} board;

static void board_clear(void)
{
	if (board.drawn == 0)
		return;
	fprintf(stderr, "\033[%dA", board.drawn);
	for (int i = 0; i < board.drawn; i++)
		fputs("\033[K\n", stderr);
	fprintf(stderr, "\033[%dA", board.drawn);
	board.drawn = 0;
}

static void fmt_bytes(char *out, size_t n, uint64_t b)
{
	if (b >= 1000000000ull)
		snprintf(out, n, "%.2f GB", (double)b / 1e9);
	else
		snprintf(out, n, "%.1f MB", (double)b / 1e6);
}

static void board_draw(void)
{
	board_clear();
	int lines = 0;
	for (int i = 0; i < board.n; i++) {
		const struct bar *b = &board.bars[i];
		double f = b->total ? (double)b->done / (double)b->total : 0;
		char hashes[31];
		int w = (int)(f * 30);
		for (int k = 0; k < 30; k++)
			hashes[k] = k < w ? '#' : '.';
		hashes[30] = '\0';
		char d[24], t[24];
		fmt_bytes(d, sizeof(d), b->done);
		fmt_bytes(t, sizeof(t), b->total);
		fprintf(stderr, "  %-6s %-34.34s [%s] %3.0f%% %s/%s\033[K\n", b->step, b->item,
		        hashes, 100 * f, d, t);
		lines++;
	}
	double secs = (double)(now_ns() - board.t0) / 1e9;
	double rate = secs > 0 ? (double)board.sum_done / secs : 0;
	char d[24], t[24], r[24];
	fmt_bytes(d, sizeof(d), board.sum_done);
	fmt_bytes(t, sizeof(t), board.sum_total);
	fmt_bytes(r, sizeof(r), (uint64_t)rate);
	uint64_t left = board.sum_total > board.sum_done ? board.sum_total - board.sum_done : 0;
	fprintf(stderr, "  total  %s/%s  %s/s  ETA %.0f s\033[K\n", d, t, r,
	        rate > 0 ? (double)left / rate : 0.0);
	lines++;
	board.drawn = lines;
	board.last_draw = now_ns();
}

static void board_update(const struct event *e)
{
	const char *step = e->step ? e->step : "";
	const char *item = e->item ? e->item : "";
	int i;
	for (i = 0; i < board.n; i++)
		if (strcmp(board.bars[i].step, step) == 0 && strcmp(board.bars[i].item, item) == 0)
			break;
	if (i == board.n) {
		if (board.n == 0 && board.drawn == 0) {
			board.t0 = now_ns();
			board.sum_done = board.sum_total = 0;
		}
		if (board.n == BOARD_MAX)
			return;
		struct bar *b = &board.bars[board.n++];
		memset(b, 0, sizeof(*b));
		snprintf(b->step, sizeof(b->step), "%s", step);
		snprintf(b->item, sizeof(b->item), "%s", item);
		board.sum_total += e->total;
	}
	struct bar *b = &board.bars[i];
	if (e->done > b->done)
		board.sum_done += e->done - b->done;
	b->done = e->done;
	int finished = e->total && e->done >= e->total;
	if (finished) {
		board.bars[i] = board.bars[--board.n];
	}
	if (board.n == 0) {
		board_clear();
		return;
	}
	if (finished || now_ns() - board.last_draw > 100000000ull)
		board_draw();
}

static void emit_text(struct ctx *c, const struct event *e)
{
	if (e->kind != EV_PROGRESS)
		board_clear();
	int color = c->flags & CTX_COLOR;
	int quiet = c->flags & CTX_QUIET;
	static uint64_t last_beat;
	static char last_done[256];
	switch (e->kind) {
	case EV_LOG:
		if (e->level == EV_DEBUG && !(c->flags & CTX_VERBOSE))
			return;
		if (quiet && e->level < EV_WARN)
			return;
		if (e->level >= EV_WARN)
			fprintf(stderr, "tfprov: %s%s:%s %s\n", color ? "\033[1;33m" : "",
			        e->level == EV_ERROR ? "error" : "warning", color ? "\033[0m" : "",
			        e->msg);
		else
			printf("%s\n", e->msg);
		break;
	case EV_PLAN_STEP:
		if (quiet)
			return;
		printf("  %s%3s%s %s", color ? symbol_color(e->action) : "", symbol(e->action),
		       color ? "\033[0m" : "", e->step);
		if (e->msg && e->msg[0])
			printf(": %s", e->msg);
		putchar('\n');
		break;
	case EV_PLAN_SUMMARY:
		if (quiet)
			return;
		if (e->add + e->change + e->destroy == 0)
			printf("\nNo changes. The stack matches the manifest.\n");
		else
			printf("\nPlan: %d to add, %d to change, %d to destroy, %d to read.\n",
			       e->add, e->change, e->destroy, e->read);
		break;
	case EV_STEP_START:
		if (!quiet)
			printf("%s: %s...\n", e->step, e->msg ? e->msg : "applying");
		break;
	case EV_STEP_DONE:
		if (quiet && !e->failed)
			return;
		printf("%s: %s%s\n", e->step,
		       e->failed    ? "failed"
		       : e->changed ? "done"
		                    : "ok",
		       e->msg && e->msg[0] ? (e->failed ? "" : "") : "");
		if (e->msg && e->msg[0])
			printf("  %s\n", e->msg);
		break;
	case EV_PROGRESS: {
		if (quiet)
			return;
		uint64_t t = now_ns();
		static int err_tty = -1;
		if (err_tty < 0)
			err_tty = isatty(STDERR_FILENO);
		if ((c->flags & CTX_TTY) && err_tty) {
			board_update(e);
		} else if (t - last_beat > 3000000000ull || e->done == e->total) {
			char key[256];
			snprintf(key, sizeof(key), "%s/%s/%llu", e->step ? e->step : "",
			         e->item ? e->item : "", (unsigned long long)e->done);
			if (e->done == e->total && strcmp(key, last_done) == 0)
				break;
			if (e->done == e->total)
				memcpy(last_done, key, sizeof(key));
			last_beat = t;
			fprintf(stderr, "%s: %s %llu/%llu bytes\n", e->step ? e->step : "",
			        e->item ? e->item : "", (unsigned long long)e->done,
			        (unsigned long long)e->total);
		}
		break;
	}
	case EV_RESULT:
		if (e->msg && e->msg[0] && !quiet)
			printf("%s\n", e->msg);
		break;
	}
	fflush(stdout);
}

/* Downloads report from their own thread: one event is drawn at a time. */
static pthread_mutex_t emit_mu = PTHREAD_MUTEX_INITIALIZER;

void render_event(void *ud, struct ctx *c, const struct event *e)
{
	(void)ud;
	pthread_mutex_lock(&emit_mu);
	if (c == NULL)
		c = g_ctx_for_log;
	if (c == NULL) {
		if (e->msg)
			fprintf(stderr, "tfprov: %s\n", e->msg);
		goto out;
	}
	g_ctx_for_log = c;
	if (c->flags & CTX_JSON)
		emit_json(e);
	else
		emit_text(c, e);
out:
	pthread_mutex_unlock(&emit_mu);
}
