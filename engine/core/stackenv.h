/*
 * stackenv.h - the one place a stack's environment is computed: what
 * `tfprov run`, `tfprov env`, `tfprov shell`, the login script, the venv and
 * conda activation hooks and the verify/bench children all get, so they
 * cannot disagree.
 *
 * From the manifest of the stack's recorded generation:
 *  - PATH: the env's bin, then CUDA's bin (archive stacks), in front;
 *  - LD_LIBRARY_PATH: only this stack's CUDA lib64 and cuDNN's own lib when
 *    it is placed beside CUDA; nothing for a stack whose CUDA comes from
 *    nvidia-*-cu<N> wheels (TensorFlow finds those itself);
 *  - CUDA_HOME, CUDA_PATH, XLA_FLAGS=--xla_gpu_cuda_data_dir=<CUDA>;
 *  - VIRTUAL_ENV (venv) or CONDA_PREFIX and CONDA_DEFAULT_ENV (conda), with
 *    PYTHONHOME unset as both activators do;
 *  - TF_FORCE_GPU_ALLOW_GROWTH=true unless the manifest sets it, then the
 *    manifest's env.vars (which win over everything above);
 *  - TFPROV_STACK=<name>: the marker.
 *
 * Entering a stack records how to leave it, in the environment itself, so
 * that any later consumer (another `tfprov env`, `tfprov run`, a sourced
 * activate.sh) removes it completely before adding another:
 *   _TFPROV_VARS   the plain variables the stack set or unset
 *   _TFPROV_OLD_V  the value V had before (absent: V was unset, see below)
 *   _TFPROV_PATHS  the list variables it prepended to
 *   _TFPROV_ADD_V  the directories it added to V (':'-separated); leaving
 *                  removes each once, so what the user added meanwhile stays
 *   _TFPROV_UNSET  the variables that had no value before
 * A directory already in the list is not added again (activating twice does
 * not pile up). The POSIX sh scripts (stackenv_sh_*) and the C functions
 * (stackenv_enter, stackenv_leave) implement exactly these rules;
 * tests/system/test_stack_env.py compares them.
 */
#ifndef TFPROV_STACKENV_H
#define TFPROV_STACKENV_H

#include "util.h"

struct manifest;

enum senv_kind {
	SENV_SET,     /* NAME=value */
	SENV_UNSET,   /* NAME removed */
	SENV_PREPEND, /* value: directories, ':'-separated, put in front of NAME */
};

struct senv_var {
	char *name;
	enum senv_kind kind;
	char *value; /* NULL for SENV_UNSET */
};

struct stackenv {
	char *stack;
	struct senv_var *v;
	size_t n;
};

/*
 * The environment of stack `name` as manifest m describes it. Paths are the
 * manifest's (root-relative, as a process inside the root sees them); with
 * host_root non-NULL and not "/", each is prefixed with it (what a process on
 * the host running against --root sees). cuDNN's libraries are where
 * stack_cudnn_prefix puts them (stackpath.c), as the steps place them.
 */
void stackenv_build(const struct manifest *m, const char *name, const char *host_root,
                    struct stackenv *out);
void stackenv_release(struct stackenv *se);

/* Leaves whatever stack env (the markers above) says is active. 1 left one, 0 none active. */
int stackenv_leave(struct strvec *env);
/* Leaves the active stack, then enters se. */
void stackenv_enter(const struct stackenv *se, struct strvec *env);

/* environ as a strvec (NAME=VALUE), for the two functions above. */
void stackenv_environ(struct strvec *env);

/*
 * POSIX sh scripts: deactivate (generic: leaves the active stack, whichever
 * it is) and activate (sources deactivate_path first when a stack is active,
 * then enters se). Installed by the env step as <prefix>/stacks/<name>/.
 */
void stackenv_sh_deactivate(struct strbuf *sb);
void stackenv_sh_activate(const struct stackenv *se, const char *deactivate_path,
                          struct strbuf *sb);

/* Single-quotes v for POSIX sh ('...' with ' as '\''). */
void sh_quote(struct strbuf *sb, const char *v);

/* Whether `name` is one of the marker variables above (a manifest may not set them). */
int stackenv_reserved(const char *name);

#endif
