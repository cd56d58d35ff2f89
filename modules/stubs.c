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

static void artifact_line(struct strvec *urls, const struct artifact *a)
{
	if (a->url.set)
		strvec_push(urls, a->url.s);
}

static int cuda_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
		       struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	if (!m->cuda.set)
		return 1;
	char *prefix = stack_cuda_prefix(m);
	strbuf_addf(canon, "prefix=%s\n", prefix);
	for (size_t i = 0; i < m->cuda.artifacts.n; i++) {
		const struct artifact *a = &m->cuda.artifacts.v[i];
		strbuf_addf(canon, "artifact=%s %s\n", a->sha256.s, a->url.s);
		artifact_line(urls, a);
	}
	if (m->cuda.redist.set) {
		strbuf_addf(canon, "redist=%s\n", m->cuda.redist.json.sha256.s);
		artifact_line(urls, &m->cuda.redist.json);
		for (size_t i = 0; i < m->cuda.redist.ncomponents; i++)
			strbuf_addf(canon, "component=%s\n", m->cuda.redist.components[i].s);
	}
	if (m->cuda.has_runfile) {
		strbuf_addf(canon, "runfile=%s\n", m->cuda.runfile.sha256.s);
		artifact_line(urls, &m->cuda.runfile);
	}
	strbuf_addf(detail, "CUDA %s into %s (%zu archive%s%s)", m->cuda.version.s, prefix,
		    m->cuda.artifacts.n, m->cuda.artifacts.n == 1 ? "" : "s",
		    m->cuda.has_runfile ? ", runfile" : "");
	free(prefix);
	return 0;
}

static int cudnn_desire(struct ctx *c, const struct manifest *m, struct strbuf *canon,
			struct strbuf *detail, struct strvec *urls)
{
	(void)c;
	if (!m->cudnn.set)
		return 1;
	char *prefix = stack_cudnn_prefix(m);
	strbuf_addf(canon, "prefix=%s\nplacement=%d\n", prefix, (int)m->cudnn.placement);
	if (m->cudnn.has_artifact) {
		strbuf_addf(canon, "artifact=%s\n", m->cudnn.artifact.sha256.s);
		artifact_line(urls, &m->cudnn.artifact);
	}
	if (m->cudnn.redist.set) {
		strbuf_addf(canon, "redist=%s\n", m->cudnn.redist.json.sha256.s);
		artifact_line(urls, &m->cudnn.redist.json);
	}
	strbuf_addf(detail, "cuDNN %s, %s into %s", m->cudnn.version.s ? m->cudnn.version.s : "?",
		    m->cudnn.placement == PLACEMENT_MERGE ? "merged" : "separate", prefix);
	free(prefix);
	return 0;
}

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

const struct module module_cuda = {.kind = "cuda", .desire = cuda_desire, .apply = not_yet};
const struct module module_cudnn = {.kind = "cudnn", .desire = cudnn_desire, .apply = not_yet};
const struct module module_pyenv = {.kind = "pyenv", .desire = pyenv_desire, .apply = not_yet};
const struct module module_pip = {.kind = "pip", .desire = pip_desire, .apply = not_yet};
