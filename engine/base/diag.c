/* diag.c - collecting, ordering and printing manifest diagnostics. */
#include "diag.h"
#include "util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void diags_add(struct diags *d, enum diag_severity sev, const char *file, struct pos pos,
               const char *code, const char *hint, const char *fmt, ...)
{
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->v = xrealloc(d->v, d->cap * sizeof(*d->v));
	}
	va_list ap;
	va_start(ap, fmt);
	struct diag *g = &d->v[d->n++];
	g->sev = sev;
	g->file = xstrdup(file ? file : "<manifest>");
	g->pos = pos;
	g->code = xstrdup(code ? code : "");
	g->msg = xvasprintf(fmt, ap);
	g->hint = hint ? xstrdup(hint) : NULL;
	va_end(ap);
	if (sev == DIAG_ERROR)
		d->errors++;
	else if (sev == DIAG_WARNING)
		d->warnings++;
}

void diags_release(struct diags *d)
{
	for (size_t i = 0; i < d->n; i++) {
		free(d->v[i].file);
		free(d->v[i].code);
		free(d->v[i].msg);
		free(d->v[i].hint);
	}
	free(d->v);
	memset(d, 0, sizeof(*d));
}

static int diag_cmp(const void *pa, const void *pb)
{
	const struct diag *a = pa, *b = pb;
	int c = strcmp(a->file, b->file);
	if (c)
		return c;
	if (a->pos.line != b->pos.line)
		return a->pos.line < b->pos.line ? -1 : 1;
	if (a->pos.col != b->pos.col)
		return a->pos.col < b->pos.col ? -1 : 1;
	return a < b ? -1 : 1;
}

void diags_sort(struct diags *d)
{
	if (d->n > 1)
		qsort(d->v, d->n, sizeof(*d->v), diag_cmp);
}

char *diags_format(const struct diags *d, int color)
{
	static const char *names[] = {"error", "warning", "note"};
	static const char *colors[] = {"\033[1;31m", "\033[1;35m", "\033[1;36m"};
	struct strbuf b = {0};
	for (size_t i = 0; i < d->n; i++) {
		const struct diag *g = &d->v[i];
		if (g->pos.line > 0)
			strbuf_addf(&b, "%s:%d:%d: ", g->file, g->pos.line,
			            g->pos.col > 0 ? g->pos.col : 1);
		else
			strbuf_addf(&b, "%s: ", g->file);
		if (color)
			strbuf_addf(&b, "%s%s:\033[0m ", colors[g->sev], names[g->sev]);
		else
			strbuf_addf(&b, "%s: ", names[g->sev]);
		strbuf_addf(&b, "%s", g->msg);
		if (g->code[0])
			strbuf_addf(&b, " [%s]", g->code);
		strbuf_addf(&b, "\n");
		if (g->hint)
			strbuf_addf(&b, "  hint: %s\n", g->hint);
	}
	return strbuf_detach(&b);
}

int diags_has(const struct diags *d, const char *code)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->v[i].code, code) == 0)
			return 1;
	return 0;
}
