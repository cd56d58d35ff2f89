/*
 * stubs.c - step kinds whose apply lands with their own issues (the artifact
 * pipeline, the GPU stack, the Python env). They already describe what they
 * would do, so `plan` shows every step and every URL; apply refuses with
 * "not implemented yet" before changing anything.
 */
#include "error.h"
#include "module.h"

#include <stdlib.h>
#include <string.h>

static int pyenv_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
			struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	if (!m->python.set)
		return 1;
	char *prefix = stack_env_prefix(m);
	strbuf_addf(canon, "prefix=%s\nmanager=%d\nversion=%s\n", prefix, (int)m->python.manager,
		    m->python.version.s ? m->python.version.s : "");
	for (size_t i = 0; i < m->python.npkgs; i++) {
		strbuf_addf(canon, "pkg=%s %s%s\n", m->python.pkgs[i].url, m->python.pkgs[i].sha256,
			    m->python.pkgs[i].md5);
		strvec_push(urls, m->python.pkgs[i].url);
	}
	strbuf_addf(detail, "%s env %s with Python %s (%zu packages)",
		    m->python.manager == PYENV_CONDA ? "conda" : "venv", prefix,
		    m->python.version.s ? m->python.version.s : "?", m->python.npkgs);
	free(prefix);
	return 0;
}

static int pip_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
		      struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	(void)urls;
	if (!m->pip.set)
		return 1;
	strbuf_addf(canon, "index=%s\ncomplete=%d\n", m->pip.index_url.s ? m->pip.index_url.s : "",
		    m->pip.complete.v);
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		strbuf_addf(canon, "req=%s", m->pip.reqs[i].spec);
		for (size_t j = 0; j < m->pip.reqs[i].nhashes; j++)
			strbuf_addf(canon, " %s", m->pip.reqs[i].hashes[j]);
		strbuf_adds(canon, "\n");
	}
	strbuf_addf(detail, "%zu pinned package%s from %s%s", m->pip.nreqs,
		    m->pip.nreqs == 1 ? "" : "s",
		    m->pip.index_url.s ? m->pip.index_url.s : "the default index",
		    m->pip.complete.v ? " (complete lock, --no-deps)" : "");
	return 0;
}

static int not_yet(struct ctx *c, const struct manifest *m, struct step *s, struct txn *t)
{
	(void)c;
	(void)m;
	(void)t;
	step_fail(s, "the %s step is not implemented yet", s->addr);
	return TF_ENOTIMPL;
}

const struct module module_pyenv = {.kind = "pyenv", .desire = pyenv_desire, .apply = not_yet};
const struct module module_pip = {.kind = "pip", .desire = pip_desire, .apply = not_yet};
