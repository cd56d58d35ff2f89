/*
 * render.h - the front end's output: the event handler main() registers
 * (render.c: terminal text, or one JSON object per line with --json) and
 * the printing of the diagnostics the core returns as data (diagprint.c).
 */
#ifndef TFPROV_RENDER_H
#define TFPROV_RENDER_H

#include <stdio.h>

struct ctx;
struct diags;
struct event;

void render_event(void *ud, struct ctx *c, const struct event *e);
/* Prints diags_format(d, color) to f. */
void diags_print(const struct diags *d, FILE *f, int color);

#endif
