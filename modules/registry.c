/*
 * registry.c - the step kinds in dependency order (exec and plan walk this
 * list) and the lookups by kind; the paths the steps share are
 * engine/core/stackpath.c.
 */
#include "module.h"

#include <stdlib.h>
#include <string.h>

const struct module *const modules[] = {
    &module_driver, &module_cuda, &module_cudnn, &module_env, &module_pyenv, &module_pip,
};
const size_t nmodules = ARRAY_SIZE(modules);

const struct module *module_find(const char *kind)
{
	for (size_t i = 0; kind && i < nmodules; i++)
		if (strcmp(modules[i]->kind, kind) == 0)
			return modules[i];
	return NULL;
}

int module_drift(struct ctx *c, const char *kind, int64_t stack_id, const char *attrs,
                 struct strvec *found)
{
	const struct module *mod = module_find(kind);
	if (mod == NULL || mod->drift == NULL)
		return 0;
	return mod->drift(c, stack_id, attrs, found);
}

int module_restamp(struct ctx *c, const char *kind, int64_t stack_id, const char *attrs, char **out)
{
	const struct module *mod = module_find(kind);
	*out = NULL;
	if (mod == NULL || mod->restamp == NULL)
		return 0;
	return mod->restamp(c, stack_id, attrs, out);
}

int module_installed(const char *kind, const char *attrs, struct strvec *names, int *listed,
                     int64_t *n)
{
	const struct module *mod = module_find(kind);
	*listed = 0;
	*n = 0;
	if (mod == NULL || mod->installed == NULL)
		return 0;
	return mod->installed(attrs, names, listed, n);
}
