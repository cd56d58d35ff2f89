/*
 * compat_platform.c - every artifact a manifest pins against stack.platform.
 *
 * An artifact says which platform it is built for in its name: a wheel in its
 * platform tag (the file name's last field, "manylinux_2_17_x86_64", a
 * compressed set split at '.'), a conda package in its channel subdir (the
 * URL's directory before the file, "linux-64"), an NVIDIA redist archive in
 * its platform key ("cuda_cudart-windows-x86_64-12.3.101-archive.zip"), a
 * runfile or a cuDNN tarball in its OS word ("_linux.run", "-windows-x64-").
 * The patterns and the stack.platform values each platform serves are data
 * (data/compat.yaml platforms). An artifact whose name matches a platform that
 * does not serve the stack's is an error at the artifact's line
 * (compat.artifact-platform); a name no row matches (a pure-Python wheel, a
 * noarch package, a name of another form) is not judged.
 */
#include "kb.h"
#include "kb_int.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static int any_match(const char *const *pats, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (fnmatch(pats[i], s, 0) == 0)
			return 1;
	return 0;
}

static int serves(const struct compat_platform *p, const char *platform)
{
	for (size_t i = 0; i < p->nstacks; i++)
		if (strcmp(p->stacks[i], platform) == 0)
			return 1;
	return 0;
}

enum kind { K_FILE, K_WHEEL, K_CONDA };

/* Whether row p claims the artifact at url. */
static int claims(const struct compat_platform *p, enum kind k, const char *url)
{
	const char *slash = strrchr(url, '/');
	const char *base = slash ? slash + 1 : url;
	int hit = 0;

	if (k == K_CONDA) {
		const char *prev = slash;
		while (prev != NULL && prev > url && prev[-1] != '/')
			prev--;
		if (prev == NULL || slash == NULL)
			return 0;
		char *subdir = xstrndup(prev, (size_t)(slash - prev));
		hit = any_match(p->conda_subdirs, p->nconda_subdirs, subdir);
		free(subdir);
		return hit;
	}
	if (k == K_WHEEL) {
		const char *dash = strrchr(base, '-');
		if (dash == NULL || !str_ends_with(base, ".whl"))
			return 0;
		char *tags = xstrndup(dash + 1, strlen(dash + 1) - 4), *save = NULL;
		for (char *t = strtok_r(tags, ".", &save); t && !hit;
		     t = strtok_r(NULL, ".", &save))
			hit = any_match(p->wheel_tags, p->nwheel_tags, t);
		free(tags);
		return hit;
	}
	return any_match(p->files, p->nfiles, base);
}

static void check(const struct compat *kb, const struct manifest *m, struct diags *d, enum kind k,
                  const char *what, const char *url, struct pos pos)
{
	const char *platform = platform_name(m->stack.platform);
	const struct compat_platform *other = NULL;
	const char *slash;

	if (url == NULL || platform == NULL)
		return;
	for (size_t i = 0; i < kb->nplatforms; i++) {
		if (!claims(&kb->platforms[i], k, url))
			continue;
		if (serves(&kb->platforms[i], platform))
			return; /* a name that fits the stack's platform too */
		if (other == NULL)
			other = &kb->platforms[i];
	}
	if (other == NULL)
		return;
	slash = strrchr(url, '/');
	char *hint = xasprintf("take the %s build of it, or change stack.platform (line %d); "
	                       "how names say their platform: data/compat.yaml platforms (%s)",
	                       platform, m->stack.platform_s.pos.line, other->source);
	diags_add(d, DIAG_ERROR, m->path, pos, "compat.artifact-platform", hint,
	          "%s %s is for %s, but stack.platform is %s", what, slash ? slash + 1 : url,
	          other->name, platform);
	free(hint);
}

void compat_lint_platform(const struct compat *kb, const struct manifest *m, struct diags *d)
{
	if (kb->nplatforms == 0 || m->stack.platform == PLATFORM_UNKNOWN)
		return;
	for (size_t i = 0; i < m->cuda.artifacts.n; i++) {
		const struct artifact *a = &m->cuda.artifacts.v[i];
		check(kb, m, d, K_FILE, "the CUDA archive", a->url.s, a->url.pos);
	}
	if (m->cuda.has_runfile)
		check(kb, m, d, K_FILE, "the CUDA runfile", m->cuda.runfile.url.s,
		      m->cuda.runfile.url.pos);
	if (m->cudnn.has_artifact)
		check(kb, m, d, K_FILE, "the cuDNN archive", m->cudnn.artifact.url.s,
		      m->cudnn.artifact.url.pos);
	for (size_t i = 0; i < m->python.npkgs; i++)
		check(kb, m, d, K_CONDA, "the conda package", m->python.pkgs[i].url,
		      m->python.pkgs[i].pos);
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].url != NULL && str_ends_with(m->pip.reqs[i].url, ".whl"))
			check(kb, m, d, K_WHEEL, "the wheel", m->pip.reqs[i].url,
			      m->pip.reqs[i].pos);
}
