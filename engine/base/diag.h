/*
 * diag.h - diagnostics about a manifest: FILE:LINE:COL: severity: message,
 * optionally followed by a hint line. Lines and columns are 1-based; 0 means
 * "no position" (the whole file).
 *
 * A struct diags owns copies of every string it holds.
 */
#ifndef TFPROV_DIAG_H
#define TFPROV_DIAG_H

#include <stddef.h>

enum diag_severity { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE };

struct pos {
	int line;
	int col;
};

struct diag {
	enum diag_severity sev;
	char *file;
	struct pos pos;
	char *code; /* stable identifier, e.g. "compat.cuda-untested" */
	char *msg;
	char *hint; /* may be NULL */
};

struct diags {
	struct diag *v;
	size_t n, cap;
	size_t errors, warnings;
};

void diags_add(struct diags *d, enum diag_severity sev, const char *file, struct pos pos,
               const char *code, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
void diags_release(struct diags *d);
/* Sorts by file, line, column (stable). */
void diags_sort(struct diags *d);
/* "FILE:LINE:COL: error: msg [code]" + "  hint: ..." lines, malloc'd (the
 * front end prints them: diags_print in cli/). */
char *diags_format(const struct diags *d, int color);
int diags_has(const struct diags *d, const char *code);

#endif
