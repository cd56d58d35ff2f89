/*
 * module.c - what the core provides to every step (module.h): action names,
 * the step kinds by name, step failures, and the prefixes a manifest's steps
 * share.
 */
#include "module.h"
#include "util.h"

#include "error.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *action_name(enum action a)
{
	static const char *names[] = {"noop", "create", "update", "replace", "delete", "read"};
	return names[a];
}

void step_fail(struct step *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	free(s->error);
	s->error = xvasprintf(fmt, ap);
	va_end(ap);
}
