/*
 * env.c - the `env` step: the stack's environment as two POSIX sh scripts,
 * <prefix>/stacks/<stack>/activate.sh and deactivate.sh, rendered from the
 * one computation of it (engine/core/stackenv.c). Login shells never read
 * them directly: the machine's login script (<profile_dir>/tfprov.sh, written
 * by `tfprov default` and apply, cli/default.c) sources the default stack's
 * activate.sh, and the venv and conda activation hooks (pyenv.c) source the
 * stack's own. Never an edit of a user's shell rc.
 *
 * What the environment holds and why (stackenv.h has the whole list):
 *  - CUDA_HOME / CUDA_PATH: the versioned prefix this stack installed;
 *  - PATH, LD_LIBRARY_PATH: the env's bin and CUDA's bin; CUDA's lib64 (and
 *    cuDNN's own lib when placed beside CUDA) in front of whatever is there;
 *  - XLA_FLAGS=--xla_gpu_cuda_data_dir: XLA looks for ptxas/libdevice there;
 *  - TF_FORCE_GPU_ALLOW_GROWTH=true: TensorFlow allocates GPU memory as it
 *    needs it instead of reserving nearly all of it at start. It has nothing
 *    to do with Tensor Cores (the setup guide's claim is wrong); it avoids
 *    one process starving others of GPU memory. A manifest can override it.
 *
 * The step is applied after every other step of the run has committed
 * (module.h, `activates`): the scripts a login shell reads change only when
 * the whole generation did, never for a run that fails or is killed before.
 *
 * A stack applied by an older tfprov had <profile_dir>/tfprov-<stack>.sh,
 * read by every login shell: the step's update removes it (txn_remove_all of
 * what the resource recorded) and places the new scripts.
 */
#include "module.h"
#include "stackenv.h"

#include <stdlib.h>
#include <string.h>

static void env_render(const struct manifest *m, struct strbuf *act, struct strbuf *deact)
{
	struct stackenv se;
	char *dpath = stack_script_path(m, "deactivate.sh");
	stackenv_build(m, m->stack.name.s, NULL, &se);
	stackenv_sh_activate(&se, dpath, act);
	stackenv_sh_deactivate(deact);
	stackenv_release(&se);
	free(dpath);
}

static enum desire env_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                              struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	(void)urls;
	struct strbuf act = STRBUF_INIT, deact = STRBUF_INIT;
	char *path = stack_script_path(m, "activate.sh");
	env_render(m, &act, &deact);
	strbuf_addf(canon, "path=%s\n%s\n%s", path, act.buf, deact.buf);
	strbuf_addf(detail, "stack environment %s", path);
	free(path);
	strbuf_release(&act);
	strbuf_release(&deact);
	return DESIRE_WANTED;
}

static int env_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                     struct prepared *prep)
{
	(void)c;
	(void)prep; /* downloads nothing */
	struct strbuf act = STRBUF_INIT, deact = STRBUF_INIT;
	char *apath = stack_script_path(m, "activate.sh");
	char *dpath = stack_script_path(m, "deactivate.sh");
	int rc = 0;
	/* A renamed stack or prefix, or an older tfprov's profile script: removed first. */
	if (s->res_id)
		rc = txn_remove_all(t);
	env_render(m, &act, &deact);
	if (rc == 0)
		rc = txn_put_file(t, dpath, deact.buf, deact.len, 0644);
	if (rc == 0)
		rc = txn_put_file(t, apath, act.buf, act.len, 0644);
	free(apath);
	free(dpath);
	strbuf_release(&act);
	strbuf_release(&deact);
	return rc;
}

const struct module module_env = {
    .kind = "env",
    .desire = env_desire,
    .apply = env_apply,
    .activates = 1, /* applied last: a failed generation activates nothing */
};
