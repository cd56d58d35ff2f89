/*
 * manifest_model.c - what is asked of a loaded manifest outside its parser
 * (manifest.c): the pin `tfprov lock` still owes, the platform's name, and
 * the release of the model, which owns every string it points at.
 */
#include "manifest.h"

#include <stdlib.h>

const char *manifest_lock_pending(const struct manifest *m, struct pos *at)
{
	if (m->cuda.redist.set && !m->cuda.redist.json.sha256.set) {
		*at = m->cuda.redist.pos;
		return "cuda.redist";
	}
	if (m->cudnn.redist.set && !m->cudnn.redist.json.sha256.set) {
		*at = m->cudnn.redist.pos;
		return "cudnn.redist";
	}
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].nhashes == 0) {
			*at = m->pip.reqs[i].pos;
			return "pip";
		}
	return NULL;
}

static void mstr_free(struct mstr *s)
{
	free(s->s);
}

static void artifact_free(struct artifact *a)
{
	mstr_free(&a->name);
	mstr_free(&a->url);
	mstr_free(&a->sha256);
	mstr_free(&a->relative_path);
	mstr_free(&a->component);
}

static void redist_free(struct redist_ref *r)
{
	artifact_free(&r->json);
	mstr_free(&r->variant);
	for (size_t i = 0; i < r->ncomponents; i++)
		mstr_free(&r->components[i]);
}

void manifest_free(struct manifest *m)
{
	if (m == NULL)
		return;
	free(m->path);
	free(m->text);
	free(m->sha256);
	mstr_free(&m->stack.name);
	mstr_free(&m->stack.platform_s);
	mstr_free(&m->stack.description);
	mstr_free(&m->prefix);
	mstr_free(&m->versions.tensorflow);
	mstr_free(&m->versions.cuda);
	mstr_free(&m->versions.cudnn);
	mstr_free(&m->versions.python);
	mstr_free(&m->driver.policy_s);
	mstr_free(&m->driver.min_version);
	mstr_free(&m->pip.min_glibc);
	for (size_t i = 0; i < m->driver.ngpus; i++)
		mstr_free(&m->driver.gpus[i]);
	mstr_free(&m->cuda.version);
	redist_free(&m->cuda.redist);
	for (size_t i = 0; i < m->cuda.artifacts.n; i++)
		artifact_free(&m->cuda.artifacts.v[i]);
	free(m->cuda.artifacts.v);
	artifact_free(&m->cuda.runfile);
	mstr_free(&m->cudnn.version);
	mstr_free(&m->cudnn.placement_s);
	artifact_free(&m->cudnn.artifact);
	redist_free(&m->cudnn.redist);
	for (size_t i = 0; i < m->env.nvars; i++) {
		mstr_free(&m->env.vars[i].name);
		mstr_free(&m->env.vars[i].value);
	}
	free(m->env.vars);
	mstr_free(&m->env.profile_dir);
	mstr_free(&m->python.manager_s);
	mstr_free(&m->python.name);
	mstr_free(&m->python.version);
	mstr_free(&m->python.interpreter);
	mstr_free(&m->python.lock);
	mstr_free(&m->python.lock_file);
	mstr_free(&m->python.channel);
	for (size_t i = 0; i < m->python.nspecs; i++)
		mstr_free(&m->python.specs[i]);
	for (size_t i = 0; i < m->python.npkgs; i++) {
		free(m->python.pkgs[i].url);
		free(m->python.pkgs[i].name);
		free(m->python.pkgs[i].version);
		free(m->python.pkgs[i].build);
	}
	free(m->python.pkgs);
	mstr_free(&m->pip.requirements);
	mstr_free(&m->pip.requirements_file);
	mstr_free(&m->pip.index_url);
	mstr_free(&m->pip.installer_s);
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		struct pip_req *r = &m->pip.reqs[i];
		free(r->name);
		free(r->raw_name);
		free(r->version);
		free(r->spec);
		free(r->url);
		for (size_t j = 0; j < r->nhashes; j++)
			free(r->hashes[j]);
		free(r->hashes);
	}
	free(m->pip.reqs);
	for (size_t i = 0; i < m->pip.nrequires; i++) {
		for (size_t j = 0; j < m->pip.requires[i].nreqs; j++)
			free(m->pip.requires[i].reqs[j].s);
		free(m->pip.requires[i].reqs);
		free(m->pip.requires[i].name);
	}
	free(m->pip.requires);
	for (size_t i = 0; i < m->pip.nrequires_python; i++) {
		for (size_t j = 0; j < m->pip.requires_python[i].nreqs; j++)
			free(m->pip.requires_python[i].reqs[j].s);
		free(m->pip.requires_python[i].reqs);
		free(m->pip.requires_python[i].name);
	}
	free(m->pip.requires_python);
	for (size_t i = 0; i < m->ngaps; i++)
		mstr_free(&m->gaps[i].what);
	free(m->gaps);
	for (size_t i = 0; i < m->bench.nprecisions; i++)
		mstr_free(&m->bench.precisions[i]);
	free(m);
}

const char *platform_name(enum platform p)
{
	switch (p) {
	case PLATFORM_LINUX_X86_64:
		return "linux-x86_64";
	case PLATFORM_WSL2:
		return "wsl2";
	case PLATFORM_WINDOWS_X86_64:
		return "windows-x86_64";
	default:
		return "unknown";
	}
}
