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

const struct module *module_find(const char *kind)
{
	for (size_t i = 0; kind && i < nmodules; i++)
		if (strcmp(modules[i]->kind, kind) == 0)
			return modules[i];
	return NULL;
}

int module_installed(const char *kind, const char *attrs, int *listed, int64_t *n)
{
	const struct module *mod = module_find(kind);
	*listed = 0;
	*n = 0;
	if (mod == NULL || mod->installed == NULL)
		return 0;
	return mod->installed(attrs, listed, n);
}

void step_fail(struct step *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	free(s->error);
	s->error = xvasprintf(fmt, ap);
	va_end(ap);
}
