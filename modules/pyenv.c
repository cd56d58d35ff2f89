/*
 * pyenv.c - the `pyenv` step: the stack's Python env.
 *
 * Manager conda installs the manifest's explicit lock natively (conda.c:
 * extract, link, prefix replacement, conda-meta into a journaled stage,
 * placed by txn_replace_dir; the packages were fetched and verified before
 * any step ran, pyenv_artifacts) and writes hooks into etc/conda/activate.d
 * and deactivate.d so `conda activate` enters the stack (and its bin/activate
 * for a venv);
 * manager venv uses a system interpreter of exactly the manifest's X.Y.
 * Every file of the env is recorded. The `pip` step (pip.c) depends on it.
 */
#include "artifact.h"
#include "step_artifacts.h"
#include "kb.h"
#include "python.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "fs.h"
#include "module.h"
#include "stackenv.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static enum desire pyenv_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
                                struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	if (!m->python.set)
		return DESIRE_NONE;
	char *prefix = stack_env_prefix(m);
	char *hook = stack_script_path(m, "activate.sh");
	/* hooks=: the stack scripts its activation hooks source (write_hook, venv_hook). */
	strbuf_addf(canon, "prefix=%s\nmanager=%d\nversion=%s\ninterpreter=%s\nhooks=%s\n", prefix,
	            (int)m->python.manager, m->python.version.s ? m->python.version.s : "",
	            m->python.interpreter.s ? m->python.interpreter.s : "", hook);
	free(hook);
	for (size_t i = 0; i < m->python.npkgs; i++) {
		strbuf_addf(canon, "pkg=%s %s%s\n", m->python.pkgs[i].url, m->python.pkgs[i].sha256,
		            m->python.pkgs[i].md5);
		strvec_push(urls, m->python.pkgs[i].url);
	}
	if (m->python.manager == PYENV_CONDA)
		strbuf_addf(detail, "conda env %s from an explicit lock (%zu package%s)", prefix,
		            m->python.npkgs, plural_s((long long)m->python.npkgs));
	else
		strbuf_addf(detail, "venv %s with Python %s", prefix,
		            m->python.version.s ? m->python.version.s : "?");
	free(prefix);
	return DESIRE_WANTED;
}

/*
 * The interpreter the stack's venv is made of (pyenv_find_python): the one
 * every user can run when the env is for all users (not inside $HOME).
 */
static int venv_python(struct ctx *c, const struct manifest *m, char **python, struct why *why)
{
	char *prefix = stack_env_prefix(m);
	char *host = ctx_host_path(c, prefix);
	int rc = pyenv_find_python(c, m->python.version.s, m->python.interpreter.s,
	                           pyenv_for_all_users(host ? host : prefix), python, why);
	free(host);
	free(prefix);
	return rc;
}

/* Records every path of an env that was built outside the txn (conda swap, venv). */
static int record_env(struct ctx *c, struct txn *t, const char *prefix)
{
	char *host = ctx_host_path(c, prefix);
	struct staged tree = {0};
	staged_record_tree(&tree, host);
	int rc = txn_record_tree(t, prefix, tree.v, tree.n);
	staged_release(&tree);
	free(host);
	return rc;
}

/*
 * The conda env is built in a journaled stage beside the prefix (files carry
 * the final prefix) and put in place by the placement layer's journaled
 * replace: a kill at any point leaves the old env (or none) for recovery to
 * restore, or the new one committed.
 */
static int conda_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                       const char *prefix, struct prepared *prep)
{
	struct conda_result res = {0};
	char *stage = NULL;
	struct why err = {0};
	/* pyenv_artifacts named one artifact per package, in the lock's order. */
	struct art *ahead = prep->arts.n == m->python.npkgs ? prep->arts.v : NULL;
	int rc = txn_stage_dir(t, prefix, &stage);
	if (rc == 0)
		rc = conda_fetch_install(c, prefix, 0, m->python.pkgs, m->python.npkgs, ahead,
		                         stage, &res, &err);
	else
		why_move(&err, txn_why(t));
	if (rc == 0 && (rc = txn_replace_dir(t, stage, prefix)) != 0)
		why_move(&err, txn_why(t));
	if (rc != 0)
		step_fail_why(s, rc, &err);
	else
		ev_log(c, EV_INFO,
		       "pyenv: conda env %s: %zu package%s (%zu extracted, %zu from the cache)",
		       prefix, m->python.npkgs, plural_s((long long)m->python.npkgs), res.extracted,
		       res.reused);
	why_clear(&err);
	free(stage);
	conda_result_release(&res);
	return rc;
}

/*
 * A venv records its own path (bin/activate, pyvenv.cfg, pip's script
 * shebangs, its .pyc files), so it is built at its final path: an env of the
 * same X.Y is kept; any other is moved aside by the journal first
 * (txn_will_create: the row's backup), so a kill or failure puts it back and
 * the commit deletes it.
 */
static int venv_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                      const char *prefix, struct prepared *prep)
{
	char *python = NULL;
	struct why err = {0};
	char *host = ctx_host_path(c, prefix);
	int created = 0;
	int rc = venv_python(c, m, &python, &err);
	if (rc == 0 && !venv_reusable(python, host) && (rc = txn_will_create(t, prefix)) != 0)
		why_move(&err, txn_why(t));
	if (rc == 0)
		rc = venv_create_at(c, python, prefix, &prep->arts, &created, &err);
	if (rc != 0)
		step_fail_why(s, rc, &err);
	else
		ev_log(c, EV_INFO, "pyenv: venv %s %s with %s", prefix,
		       created ? "created" : "kept", python);
	free(python);
	why_clear(&err);
	free(host);
	return rc;
}

/*
 * The hooks that make the env's own activators enter the stack: the scripts
 * in etc/conda/activate.d and deactivate.d (`conda activate`), or lines in
 * a venv's bin/activate. Both source the stack's activate.sh/deactivate.sh
 * (the env step's, from stackenv.c), so every way into the stack gets the
 * same environment.
 */
static char *hook_line(const struct manifest *m, const char *which, int only_if_in)
{
	char *path = stack_script_path(m, which);
	struct strbuf sb = STRBUF_INIT;
	if (only_if_in) {
		strbuf_adds(&sb, "if [ \"${TFPROV_STACK-}\" = ");
		sh_quote(&sb, m->stack.name.s);
		strbuf_adds(&sb, " ] && [ -r ");
	} else {
		strbuf_adds(&sb, "if [ -r ");
	}
	sh_quote(&sb, path);
	strbuf_adds(&sb, " ]; then . ");
	sh_quote(&sb, path);
	strbuf_adds(&sb, "; fi");
	free(path);
	return strbuf_detach(&sb);
}

static int write_hook(struct ctx *c, const struct manifest *m, struct txn *t, const char *prefix)
{
	(void)c;
	static const char *const dirs[] = {"activate", "deactivate"};
	int rc = 0;
	for (size_t i = 0; i < 2 && rc == 0; i++) {
		char *hook =
		    xasprintf("%s/etc/conda/%s.d/tfprov-%s.sh", prefix, dirs[i], m->stack.name.s);
		char *which = xasprintf("%s.sh", dirs[i]);
		char *line = hook_line(m, which, i == 1);
		char *text = xasprintf("# Written by tfprov: %s the tfprov stack '%s'.\n%s\n",
		                       i ? "leaves" : "enters", m->stack.name.s, line);
		/* The hook is part of the freshly built env tree, so it is placed in it directly. */
		rc = txn_put_file(t, hook, text, strlen(text), 0644);
		free(hook);
		free(which);
		free(line);
		free(text);
	}
	return rc;
}

#define VENV_MARK "  # tfprov stack env"

/*
 * A venv has no activate.d: the stack's activate.sh is sourced from the end
 * of bin/activate, and its deactivate.sh from the start of the deactivate
 * function it defines (which activate also calls first, so activating twice
 * leaves the first one). Lines of an earlier tfprov (marked) are replaced.
 * The new bin/activate is a placed file (journaled, renamed over the old
 * one), after the env's tree was recorded.
 */
static int venv_hook(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                     const char *prefix)
{
	char *rel = xasprintf("%s/bin/activate", prefix);
	char *host = ctx_host_path(c, rel);
	char *text = NULL;
	size_t len = 0;
	int rc = 0;
	struct stat st;
	if (read_file_at(AT_FDCWD, host, 1 << 20, &text, &len) != 0 || stat(host, &st) != 0) {
		step_fail(s, "cannot read %s", rel);
		rc = TF_EIO;
	} else {
		static const char deact[] = "deactivate () {\n";
		struct strbuf b = STRBUF_INIT;
		char *on = hook_line(m, "activate.sh", 0), *off = hook_line(m, "deactivate.sh", 1);
		for (char *line = text; line < text + len;) {
			char *nl = memchr(line, '\n', (size_t)(text + len - line));
			size_t k = nl ? (size_t)(nl - line + 1) : (size_t)(text + len - line);
			char *one = xstrndup(line, k);
			if (strstr(one, "# tfprov stack env") == NULL)
				strbuf_adds(&b, one);
			if (strcmp(one, deact) == 0)
				strbuf_addf(&b, "    %s" VENV_MARK "\n", off);
			free(one);
			line += k;
		}
		if (b.len > 0 && b.buf[b.len - 1] != '\n')
			strbuf_adds(&b, "\n");
		strbuf_addf(&b, "%s" VENV_MARK "\n", on);
		rc = txn_put_file(t, rel, b.buf, b.len, st.st_mode & 07777);
		strbuf_release(&b);
		free(on);
		free(off);
	}
	free(text);
	free(host);
	free(rel);
	return rc;
}

/*
 * manager: venv needs a system interpreter of exactly X.Y. Looking for it
 * changes nothing, so it is a precondition: a missing python3.X stops apply
 * (exit 6) before the cuda/cudnn/env steps write anything, rather than half-way.
 */
static int pyenv_precheck(struct ctx *c, const struct manifest *m, struct step *s)
{
	char *prefix = stack_env_prefix(m);
	int clash = step_foreign_clash(c, s, "pyenv", m, prefix,
	                               "give this stack's python.name another name, or destroy the "
	                               "other stack first");
	free(prefix);
	if (clash != 0)
		return clash;
	if (m->python.manager != PYENV_VENV)
		return 0;
	char *python = NULL;
	struct why err = {0};
	int rc = venv_python(c, m, &python, &err);
	if (rc != 0) {
		step_fail_why(s, rc, &err);
	} else if (s->action != ACT_NOOP) {
		/* plan shows it (plan_observe runs this before the plan is drawn). */
		char *d = xasprintf("%s: %s", s->detail ? s->detail : "venv", python);
		free(s->detail);
		s->detail = d;
	}
	free(python);
	why_clear(&err);
	return rc;
}

/*
 * A venv about to be made: the wheels its pip comes from are unpacked and
 * byte-compiled ahead with the downloads (venv_bundled_artifacts), for the
 * env's site-packages, by the interpreter the venv will run.
 */
static void venv_ahead(struct ctx *c, const struct manifest *m, struct artset *out)
{
	char *python = NULL, *prefix = stack_env_prefix(m);
	char *host = ctx_host_path(c, prefix);
	if (venv_python(c, m, &python, NULL) == 0 && !venv_reusable(python, host)) {
		size_t from = out->n;
		venv_bundled_artifacts(c, python, out);
		if (out->n > from)
			pyc_ahead_attach(c, out, prefix, m->python.version.s, m->python.version.s,
			                 m->python.interpreter.s);
	}
	free(python);
	free(host);
	free(prefix);
}

/*
 * The conda packages of the lock, fetched and verified into the cache with
 * every other download of the plan before the first step changes anything;
 * conda_fetch_install then finds each one there.
 */
static int pyenv_artifacts(struct ctx *c, const struct manifest *m, struct artset *out,
                           struct step *s)
{
	if (m->python.manager == PYENV_VENV) {
		venv_ahead(c, m, out);
		return 0;
	}
	for (size_t i = 0; i < m->python.npkgs; i++) {
		const struct conda_pkg *p = &m->python.pkgs[i];
		if (p->sha256[0] == '\0') {
			step_fail(s,
			          "%s:%d:%d: %s-%s-%s is pinned by md5 only; tfprov verifies "
			          "downloads by sha256: regenerate the lock with `conda list "
			          "--explicit --sha256`",
			          m->path, p->pos.line, p->pos.col, p->name, p->version, p->build);
			return TF_EMANIFEST;
		}
		char *name = xasprintf("%s-%s-%s", p->name, p->version, p->build);
		artset_add(out, name, p->url, p->sha256, -1, 0);
		free(name);
		/* Extracted ahead, while the other downloads run, unless the
		 * package cache has it already (conda.c reuses that). */
		if (!conda_pkg_extracted(c, p))
			artset_mark_python(out, out->n - 1, ART_CONDA);
	}
	return 0;
}

/* prep: the conda packages, or the wheels of the venv's pip, as pyenv_artifacts named them. */
static int pyenv_apply(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t,
                       struct prepared *prep)
{
	char *prefix = stack_env_prefix(m);
	int rc;
	/* The old records go; the rebuilt env is recorded afresh. */
	rc = txn_forget_all(t);
	if (rc == 0 && m->python.manager == PYENV_CONDA)
		rc = conda_apply(c, m, s, t, prefix, prep);
	else if (rc == 0)
		rc = venv_apply(c, m, s, t, prefix, prep);
	/* The conda hook first, so its directories (etc/conda/activate.d) are
	 * recorded with the env and go with it when the env is removed. */
	if (rc == 0 && m->python.manager == PYENV_CONDA)
		rc = write_hook(c, m, t, prefix);
	/* A failed txn call keeps its message in the txn: the executor makes it the step's. */
	if (rc == 0)
		rc = record_env(c, t, prefix);
	if (rc == 0 && m->python.manager == PYENV_VENV)
		rc = venv_hook(c, m, s, t, prefix);
	free(prefix);
	return rc;
}

const struct module module_pyenv = {
    .kind = "pyenv",
    .desire = pyenv_desire,
    .precheck = pyenv_precheck,
    .apply = pyenv_apply,
    .artifacts = pyenv_artifacts,
};
