/*
 * stackpath.c - where a stack's parts live under its prefix: the CUDA
 * toolkit, cuDNN (merged into CUDA or beside it) and the Python env. The
 * steps place there, and verify, doctor and bench read there (module.h).
 */
#include "module.h"

#include <stdlib.h>

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

char *stack_script_path(const struct manifest *m, const char *which)
{
	char *rel = xasprintf("stacks/%s/%s", m->stack.name.s, which);
	char *p = path_join(m->prefix.s, rel);
	free(rel);
	return p;
}
