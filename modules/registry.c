/*
 * registry.c - the step kinds in dependency order, and the paths they share.
 */
#include "module.h"

#include <stdlib.h>
#include <string.h>

const struct module *const modules[] = {
    &module_driver, &module_cuda, &module_cudnn, &module_env, &module_pyenv, &module_pip,
};
const size_t nmodules = ARRAY_SIZE(modules);

char *stack_cuda_prefix(const struct manifest *m)
{
	char *v = xasprintf("cuda/%s", m->cuda.version.s ? m->cuda.version.s : "unknown");
	char *p = path_join(m->prefix.s, v);
	free(v);
	return p;
}

char *stack_cudnn_prefix(const struct manifest *m)
{
	if (m->cudnn.placement == PLACEMENT_MERGE)
		return stack_cuda_prefix(m);
	char *v = xasprintf("cudnn/%s-cuda%s", m->cudnn.version.s ? m->cudnn.version.s : "unknown",
	                    m->cuda.version.s ? m->cuda.version.s : "unknown");
	char *p = path_join(m->prefix.s, v);
	free(v);
	return p;
}

char *stack_env_prefix(const struct manifest *m)
{
	char *v = xasprintf("envs/%s", m->python.name.s ? m->python.name.s : m->stack.name.s);
	char *p = path_join(m->prefix.s, v);
	free(v);
	return p;
}
