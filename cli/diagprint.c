/*
 * diagprint.c - the front end prints diagnostics the core returns as data.
 */
#include "render.h"
#include "diag.h"

#include <stdio.h>
#include <stdlib.h>

void diags_print(const struct diags *d, FILE *f, int color)
{
	char *text = diags_format(d, color);
	fputs(text, f);
	free(text);
}
