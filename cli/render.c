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
#include "util.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <time.h>

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

/* "2026-12-01T02:50:00.123456Z": RFC 3339, UTC, microseconds. */
static void rfc3339_now_us(char out[40])
{
	struct timespec ts;
	struct tm tm;
	char sec[32];
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(sec, sizeof(sec), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, 40, "%.20s.%06dZ", sec, (int)(ts.tv_nsec / 1000) % 1000000);
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* --offline's one error: how many artifacts are missing, and their names. */
static char *phrase_offline(const struct ev_offline *o)
{
	struct strbuf names = STRBUF_INIT;
	for (size_t i = 0; i < o->n; i++)
		strbuf_addf(&names, "%s%s", i ? ", " : "", o->missing[i].name);
	char *s = xasprintf("--offline: %zu artifact%s not in the cache %s%s and cannot be "
	                    "downloaded: %s. Run once with network, or give --mirror DIR",
	                    o->n, o->n == 1 ? " is" : "s are", o->cache ? o->cache : "?",
	                    o->nmirrors ? " nor in a mirror" : "", names.buf);
	strbuf_release(&names);
	return s;
}

/*
 * The sentence of a typed event the core sent without one (malloc'd), or
 * NULL when the kind has nothing to say to a person. The same sentence is
 * the "@message" of its JSON line.
 */
static char *phrase(const struct event *e)
{
	const struct ev_art *a = &e->art;
	const struct ev_place *p = &e->place;
	const char *item = e->item ? e->item : "?";
	switch (e->kind) {
	case EV_DOWNLOAD_START:
		if (a->offset)
			return xasprintf("%s: downloading from %s, resuming at byte %llu", item,
			                 a->source, (unsigned long long)a->offset);
		return xasprintf("%s: downloading from %s", item, a->source);
	case EV_DOWNLOAD_RETRY:
	case EV_DOWNLOAD_FAILED:
		return xasprintf("%s: %s", item, a->error ? a->error : "failed");
	case EV_DOWNLOAD_DONE:
		if (a->from_cache)
			return xasprintf("%s: the verified copy in the cache (%llu bytes)", item,
			                 (unsigned long long)a->bytes);
		return xasprintf("%s: downloaded from %s into the cache (%llu bytes)", item,
		                 a->source, (unsigned long long)a->bytes);
	case EV_VERIFIED:
		return xasprintf("%s: %llu bytes with sha256 %s, as the manifest says (%s)", item,
		                 (unsigned long long)a->bytes, a->sha256, a->source);
	case EV_MISMATCH:
		return xasprintf("%s %s did not match its %s (expected %s, got %s); moved to %s",
		                 a->source, item, a->check, a->expected, a->actual,
		                 a->quarantined ? a->quarantined : "quarantine");
	case EV_OFFLINE:
		return phrase_offline(&e->offline);
	case EV_PLACED:
		return xasprintf("%s: placed %s %s%s (%llu entries)", e->step, p->what, p->path,
		                 p->replaced ? ", replacing the old one" : "",
		                 (unsigned long long)p->count);
	case EV_REMOVED:
		return xasprintf("%s: removed %s (%llu paths)", e->step, p->path,
		                 (unsigned long long)p->count);
	case EV_KEPT:
		return xasprintf("kept %s: %s", p->path, p->why);
	case EV_RECOVERED: {
		const struct ev_recovered *r = &e->recovered;
		if (r->undone)
			return xasprintf("recovered from an interrupted run: undid %llu unfinished "
			                 "operation%s",
			                 (unsigned long long)r->undone, r->undone == 1 ? "" : "s");
		return xasprintf("recovered from an interrupted run: its change was committed; "
		                 "removed %llu leftover backup%s",
		                 (unsigned long long)r->leftovers, r->leftovers == 1 ? "" : "s");
	}
	case EV_FINDING:
		return xasprintf("%s: %s%s%s", e->finding.kind,
		                 e->finding.path ? e->finding.path : "", e->finding.why ? ": " : "",
		                 e->finding.why ? e->finding.why : "");
	default:
		return NULL;
	}
}

/* The fields of a typed event (docs/json-events.md). */
static void json_typed(json_t *o, const struct event *e)
{
	const struct ev_art *a = &e->art;
	const struct ev_place *p = &e->place;
	const struct ev_finding *f = &e->finding;
	json_t *size = a->size >= 0 ? json_integer((json_int_t)a->size) : json_null();
	switch (e->kind) {
	case EV_DOWNLOAD_START:
		json_object_set_new(o, "source", str_or_null(a->source));
		json_object_set_new(o, "mirror", str_or_null(a->mirror));
		json_object_set_new(o, "sha256", str_or_null(a->sha256));
		json_object_set_new(o, "size", size);
		json_object_set_new(o, "offset", json_integer((json_int_t)a->offset));
		return;
	case EV_DOWNLOAD_RETRY:
	case EV_DOWNLOAD_FAILED:
		json_object_set_new(o, "source", str_or_null(a->source));
		json_object_set_new(o, "error", str_or_null(a->error));
		break;
	case EV_DOWNLOAD_DONE:
		json_object_set_new(o, "sha256", str_or_null(a->sha256));
		json_object_set_new(o, "size", json_integer((json_int_t)a->bytes));
		json_object_set_new(o, "source", str_or_null(a->source));
		json_object_set_new(o, "from_cache", json_boolean(a->from_cache));
		json_object_set_new(o, "path", str_or_null(a->path));
		break;
	case EV_VERIFIED:
		json_object_set_new(o, "sha256", str_or_null(a->sha256));
		json_object_set_new(o, "size", json_integer((json_int_t)a->bytes));
		json_object_set_new(o, "source", str_or_null(a->source));
		break;
	case EV_MISMATCH:
		json_object_set_new(o, "check", str_or_null(a->check));
		json_object_set_new(o, "expected", str_or_null(a->expected));
		json_object_set_new(o, "actual", str_or_null(a->actual));
		json_object_set_new(o, "sha256", str_or_null(a->sha256));
		json_object_set_new(o, "size", size);
		json_object_set_new(o, "bytes", json_integer((json_int_t)a->bytes));
		json_object_set_new(o, "source", str_or_null(a->source));
		json_object_set_new(o, "mirror", str_or_null(a->mirror));
		json_object_set_new(o, "quarantined", str_or_null(a->quarantined));
		return;
	case EV_OFFLINE: {
		json_t *miss = json_array(), *mirrors = json_array();
		for (size_t i = 0; i < e->offline.n; i++) {
			const struct ev_missing *m = &e->offline.missing[i];
			json_array_append_new(
			    miss, json_pack("{s:o, s:o, s:o, s:o}", "name", str_or_null(m->name),
			                    "sha256", str_or_null(m->sha256), "size",
			                    m->size >= 0 ? json_integer((json_int_t)m->size)
			                                 : json_null(),
			                    "url", str_or_null(m->url)));
		}
		for (size_t i = 0; i < e->offline.nmirrors; i++)
			json_array_append_new(mirrors, json_string(e->offline.mirrors[i]));
		json_object_set_new(o, "missing", miss);
		json_object_set_new(o, "cache", str_or_null(e->offline.cache));
		json_object_set_new(o, "mirrors", mirrors);
		break;
	}
	case EV_PLACED:
		json_object_set_new(o, "path", str_or_null(p->path));
		json_object_set_new(o, "what", str_or_null(p->what));
		json_object_set_new(o, "count", json_integer((json_int_t)p->count));
		json_object_set_new(o, "replaced", json_boolean(p->replaced));
		break;
	case EV_REMOVED:
		json_object_set_new(o, "path", str_or_null(p->path));
		json_object_set_new(o, "count", json_integer((json_int_t)p->count));
		break;
	case EV_KEPT:
		json_object_set_new(o, "path", str_or_null(p->path));
		json_object_set_new(o, "why", str_or_null(p->why));
		break;
	case EV_RECOVERED:
		json_object_set_new(o, "undone", json_integer((json_int_t)e->recovered.undone));
		json_object_set_new(o, "leftovers",
		                    json_integer((json_int_t)e->recovered.leftovers));
		break;
	case EV_FINDING:
		json_object_set_new(o, "origin", str_or_null(f->origin));
		json_object_set_new(o, "kind", str_or_null(f->kind));
		json_object_set_new(o, "severity", str_or_null(f->severity));
		json_object_set_new(o, "stack", str_or_null(f->stack));
		json_object_set_new(o, "path", str_or_null(f->path));
		json_object_set_new(o, "expected", str_or_null(f->expected));
		json_object_set_new(o, "actual", str_or_null(f->actual));
		json_object_set_new(o, "why", str_or_null(f->why));
		json_object_set_new(o, "fix", str_or_null(f->fix));
		if (f->code)
			json_object_set_new(o, "code", json_string(f->code));
		if (f->package)
			json_object_set_new(o, "package", json_string(f->package));
		break;
	default:
		break;
	}
	json_decref(size);
}

static void emit_json(const struct event *e)
{
	json_t *o = json_object();
	json_object_set_new(o, "@level", json_string(level_name(e->level)));
	char ts[40];
	rfc3339_now_us(ts);
	json_object_set_new(o, "@timestamp", json_string(ts));
	json_object_set_new(o, "type", json_string(e->type ? e->type : ev_kind_name(e->kind)));
	char *said = e->msg ? NULL : phrase(e);
	if (e->msg || said)
		json_object_set_new(o, "@message", json_string(e->msg ? e->msg : said));
	free(said);
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
	case EV_DATA:
		if (e->data)
			json_object_set(o, "data", (json_t *)e->data);
		break;
	case EV_RESULT:
		json_object_set_new(o, "exit_code", json_integer(e->exit_code));
		json_object_set_new(o, "changed", json_boolean(e->changed));
		json_object_set_new(o, "failed", json_boolean(e->failed));
		break;
	default:
		json_typed(o, e);
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
 * Progress, one entry per active item (a download, an unpack), keyed by step
 * and item name.
 *
 * On a terminal it is a board redrawn in place at the bottom: one bar per
 * item and a total line with rate and ETA. Each line is cut to the width
 * the terminal reports (TIOCGWINSZ, asked again after SIGWINCH) minus one
 * column, so no line ever wraps and the cursor-up count is exact; any other
 * output, and the end of the run, erase it, so nothing of it is left in the
 * scrollback.
 *
 * Off a terminal: one line when an item starts, one when it ends, and a
 * heartbeat for the items still running every HEARTBEAT_NS, each line
 * starting with an RFC 3339 UTC timestamp.
 */
#define BOARD_MAX    8
#define HEARTBEAT_NS 5000000000ull

struct bar {
	char step[16];
	char item[96];
	uint64_t done, total, t0;
};

static struct {
	struct bar bars[BOARD_MAX];
	int n;
	int drawn; /* lines on screen */
	int cols;  /* terminal width, 0 until asked */
	uint64_t sum_done, sum_total, t0, last_draw, last_beat;
	char ended[16][112]; /* recently finished items: repeated end events are dropped */
	int nended, next_end;
} board;

static volatile sig_atomic_t winch = 1;

static void on_winch(int sig)
{
	(void)sig;
	winch = 1;
}

static int term_cols(void)
{
	static int installed;
	if (!installed) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_winch;
		sa.sa_flags = SA_RESTART;
		sigaction(SIGWINCH, &sa, NULL);
		installed = 1;
	}
	if (winch) {
		struct winsize ws;
		winch = 0;
		board.cols =
		    ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
	}
	return board.cols;
}

static void rfc3339_now(char out[32])
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void board_clear(void)
{
	if (board.drawn == 0)
		return;
	/* Up to the first board line, then erase from there to the end of the screen. */
	fprintf(stderr, "\r\033[%dA\033[J", board.drawn);
	board.drawn = 0;
	fflush(stderr);
}

static void fmt_bytes(char *out, size_t n, uint64_t b)
{
	if (b >= 1000000000ull)
		snprintf(out, n, "%.2f GB", (double)b / 1e9);
	else if (b >= 1000000ull)
		snprintf(out, n, "%.1f MB", (double)b / 1e6);
	else
		snprintf(out, n, "%.1f kB", (double)b / 1e3);
}

/* Writes one board line cut to the terminal width less one column (never wraps). */
static void board_line(const char *text)
{
	int max = term_cols() - 1;
	fprintf(stderr, "%.*s\033[K\n", max > 0 ? max : 0, text);
}

static void board_draw(void)
{
	board_clear();
	int lines = 0, cols = term_cols();
	/* The item name gets what the fixed parts leave (at least 8 columns). */
	int name_w = cols - 1 - (2 + 7 + 1 + 2 + 20 + 6 + 22);
	if (name_w < 8)
		name_w = 8;
	char line[512];
	for (int i = 0; i < board.n; i++) {
		const struct bar *b = &board.bars[i];
		double f = b->total ? (double)b->done / (double)b->total : 0;
		if (f > 1)
			f = 1;
		char hashes[21];
		int w = (int)(f * 20);
		for (int k = 0; k < 20; k++)
			hashes[k] = k < w ? '#' : '.';
		hashes[20] = '\0';
		char d[24], t[24];
		fmt_bytes(d, sizeof(d), b->done);
		fmt_bytes(t, sizeof(t), b->total);
		snprintf(line, sizeof(line), "  %-6s %-*.*s [%s] %3.0f%% %s/%s", b->step, name_w,
		         name_w, b->item, hashes, 100 * f, d, t);
		board_line(line);
		lines++;
	}
	double secs = (double)(now_ns() - board.t0) / 1e9;
	double rate = secs > 0 ? (double)board.sum_done / secs : 0;
	char d[24], t[24], r[24];
	fmt_bytes(d, sizeof(d), board.sum_done);
	fmt_bytes(t, sizeof(t), board.sum_total);
	fmt_bytes(r, sizeof(r), (uint64_t)rate);
	uint64_t left = board.sum_total > board.sum_done ? board.sum_total - board.sum_done : 0;
	snprintf(line, sizeof(line), "  total  %s/%s  %s/s  ETA %.0f s", d, t, r,
	         rate > 0 ? (double)left / rate : 0.0);
	board_line(line);
	lines++;
	board.drawn = lines;
	board.last_draw = now_ns();
	fflush(stderr);
}

/* Off a terminal: "<time> <step> <item>: <what>". */
static void progress_line(const struct bar *b, const char *what)
{
	char ts[32], d[24], t[24];
	rfc3339_now(ts);
	fmt_bytes(d, sizeof(d), b->done);
	fmt_bytes(t, sizeof(t), b->total);
	if (strcmp(what, "started") == 0)
		fprintf(stderr, "%s %s %s: started (%s)\n", ts, b->step, b->item, t);
	else if (strcmp(what, "done") == 0)
		fprintf(stderr, "%s %s %s: done, %s in %.1f s\n", ts, b->step, b->item, t,
		        (double)(now_ns() - b->t0) / 1e9);
	else
		fprintf(stderr, "%s %s %s: %s of %s (%.0f%%)\n", ts, b->step, b->item, d, t,
		        b->total ? 100.0 * (double)b->done / (double)b->total : 0.0);
}

static void progress_update(const struct event *ev, int tty)
{
	struct event copy = *ev;
	const struct event *e = &copy;
	/* An artifact without a name is shown by its file name, not its whole URL. */
	if (copy.item && strstr(copy.item, "://") && strrchr(copy.item, '/')[1])
		copy.item = strrchr(copy.item, '/') + 1;
	char key[112];
	snprintf(key, sizeof(key), "%s/%s", e->step ? e->step : "", e->item ? e->item : "");
	int i;
	for (i = 0; i < board.n; i++)
		if (strcmp(board.bars[i].step, e->step ? e->step : "") == 0 &&
		    strcmp(board.bars[i].item, e->item ? e->item : "") == 0)
			break;
	int finished = e->total && e->done >= e->total;
	if (i == board.n) {
		for (int k = 0; k < board.nended; k++)
			if (strcmp(board.ended[k], key) == 0 && finished)
				return; /* the same end reported twice */
		if (board.n == BOARD_MAX)
			return;
		if (board.n == 0) {
			board.last_beat = now_ns();
			if (board.drawn == 0) {
				board.t0 = board.last_beat;
				board.sum_done = board.sum_total = 0;
			}
		}
		struct bar *b = &board.bars[board.n++];
		memset(b, 0, sizeof(*b));
		snprintf(b->step, sizeof(b->step), "%s", e->step ? e->step : "");
		snprintf(b->item, sizeof(b->item), "%s", e->item ? e->item : "");
		b->t0 = now_ns();
		b->total = e->total;
		board.sum_total += e->total;
		if (!tty)
			progress_line(b, "started");
	}
	struct bar *b = &board.bars[i];
	if (e->total != b->total) {
		board.sum_total += e->total - b->total; /* the total became known */
		b->total = e->total;
	}
	uint64_t done = e->done > b->total && b->total ? b->total : e->done;
	if (done > b->done)
		board.sum_done += done - b->done;
	b->done = done;
	if (finished) {
		if (!tty)
			progress_line(b, "done");
		/* A ring of the last 16: nended counts up to 16, next_end is where the next goes. */
		snprintf(board.ended[board.next_end], sizeof(board.ended[0]), "%s", key);
		board.next_end = (board.next_end + 1) % 16;
		if (board.nended < 16)
			board.nended++;
		board.bars[i] = board.bars[--board.n];
	}
	uint64_t t = now_ns();
	if (!tty) {
		if (board.n && t - board.last_beat > HEARTBEAT_NS) {
			for (int k = 0; k < board.n; k++)
				progress_line(&board.bars[k], "beat");
			board.last_beat = t;
		}
		return;
	}
	if (board.n == 0) {
		board_clear();
		return;
	}
	if (finished || winch || t - board.last_draw > 100000000ull)
		board_draw();
}

/* A sentence at a level: warnings and errors on stderr, the rest on stdout. */
static void text_line(struct ctx *c, enum ev_level level, const char *msg)
{
	int color = c->flags & CTX_COLOR;
	if (msg == NULL || (level == EV_DEBUG && !(c->flags & CTX_VERBOSE)))
		return;
	if ((c->flags & CTX_QUIET) && level < EV_WARN)
		return;
	if (level >= EV_WARN)
		fprintf(stderr, "tfprov: %s%s:%s %s\n", color ? "\033[1;33m" : "",
		        level == EV_ERROR ? "error" : "warning", color ? "\033[0m" : "", msg);
	else
		printf("%s\n", msg);
}

static void emit_text(struct ctx *c, const struct event *e)
{
	if (e->kind != EV_PROGRESS)
		board_clear();
	int color = c->flags & CTX_COLOR;
	int quiet = c->flags & CTX_QUIET;
	switch (e->kind) {
	case EV_LOG:
		text_line(c, e->level, e->msg);
		break;
	case EV_DOWNLOAD_START:
	case EV_DOWNLOAD_RETRY:
	case EV_DOWNLOAD_FAILED:
	case EV_DOWNLOAD_DONE:
	case EV_VERIFIED:
	case EV_MISMATCH:
	case EV_OFFLINE:
	case EV_PLACED:
	case EV_REMOVED:
	case EV_KEPT:
	case EV_RECOVERED:
	case EV_FINDING: {
		char *said = e->msg ? NULL : phrase(e);
		text_line(c, e->level, e->msg ? e->msg : said);
		free(said);
		break;
	}
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
		static int err_tty = -1;
		if (err_tty < 0)
			err_tty = isatty(STDERR_FILENO);
		progress_update(e, (c->flags & CTX_TTY) && err_tty);
		break;
	}
	case EV_RESULT:
		if (e->msg && e->msg[0] && !quiet)
			printf("%s\n", e->msg);
		break;
	case EV_DATA:
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
