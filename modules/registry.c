/*
 * registry.c - the step kinds in dependency order (exec and plan walk this
 * list; the paths the steps share are engine/core/stackpath.c).
 */
#include "module.h"

#include <stdlib.h>
#include <string.h>

const struct module *const modules[] = {
    &module_driver, &module_cuda, &module_cudnn, &module_env, &module_pyenv, &module_pip,
};
const size_t nmodules = ARRAY_SIZE(modules);
