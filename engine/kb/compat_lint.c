/*
 * compat_lint.c - `tfprov validate`'s compatibility lints: a manifest checked
 * against the knowledge base of compat.c.
 *
 * Every lint has a stable code (compat.*), a severity and a hint, and points
 * at the node that is wrong. Invariants:
 *  - the rules are generic; every number they compare comes from compat.yaml;
 *  - one node gets at most one diagnostic from one lint family (a K80 under
 *    TF 2.15 is "no kernels", not also "dropped by CUDA 12"), so that a
 *    mistake reads as one line;
 *  - a declared version is read from `versions:` first and the section's own
 *    `version:` second, and the diagnostic points at the one that was read;
 *  - whatever delivers a version (a section's `version:`, a redist JSON label,
 *    a runfile or cuDNN archive name, the conda lock's python, a venv
 *    interpreter, the tensorflow pin) must agree with the declared one, so
 *    that the checks above judge what will be installed.
 */
#include "kb.h"
#include "kb_int.h"
#include "error.h"
#include "version.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lint {
	const struct compat *kb;
	const struct manifest *m;
	struct diags *d;
	const char *file;
	int windows_native; /* platform windows-x86_64 */
	int windows_driver; /* the driver is a Windows one (native or WSL2) */
	const struct mstr *tf, *cuda, *cudnn, *python;
	struct mstr tf_from_pip; /* when only a pip pin names TF */
	const struct compat_tf_build *build;
};

/* The node's position, or the section's when the node carries none. */
static struct pos at(const struct mstr *s, struct pos section)
{
	return s != NULL && s->pos.line > 0 ? s->pos : section;
}

static const struct mstr *pick(const struct mstr *a, const struct mstr *b)
{
	if (a->set && a->s != NULL)
		return a;
	if (b->set && b->s != NULL)
		return b;
	return NULL;
}

/* Two versions name the same release when one is a prefix of the other ("3.10", "3.10.13"). */
static int agree(const char *a, const char *b)
{
	return version_has_prefix(a, b) || version_has_prefix(b, a);
}

static const char *series(const char *v, char buf[32])
{
	long a = version_component(v, 0), b = version_component(v, 1);

	snprintf(buf, 32, "%ld.%ld", a, b);
	return buf;
}

static void lint_tf(struct lint *L)
{
	const struct compat_tf_build *v = L->windows_native ? L->kb->tf_windows : L->kb->tf_linux;
	size_t n = L->windows_native ? L->kb->ntf_windows : L->kb->ntf_linux;
	char s[32];

	L->build = compat_tf_build(L->kb, L->tf->s, L->windows_native);
	if (L->build != NULL || n == 0)
		return;
	diags_add(L->d, DIAG_WARNING, L->file, L->tf->pos, "compat.tf-unknown",
	          "add its tested build row (tensorflow.org/install/source) to "
	          "data/compat.yaml, with its source",
	          "TensorFlow %s is not in the knowledge base (it knows %s %s to %s); CUDA, cuDNN, "
	          "Python and GPU checks are skipped",
	          series(L->tf->s, s),
	          L->windows_native ? "native Windows GPU builds" : "GPU builds", v[n - 1].name,
	          v[0].name);
}

/* Native Windows GPU ended with a TF release; later ones have no CUDA build there. */
static int lint_windows(struct lint *L)
{
	const char *last = L->kb->windows_gpu_last;
	const struct manifest *m = L->m;
	char s[32];

	if (!L->windows_native || last == NULL || version_cmp_n(L->tf->s, last, 2) <= 0)
		return 0;
	diags_add(L->d, DIAG_ERROR, L->file, at(&m->stack.platform_s, m->versions.pos),
	          "compat.windows-native-gpu", L->kb->windows_gpu_instead,
	          "TensorFlow %s has no GPU build for native Windows: native Windows GPU support "
	          "ended with TF %s",
	          series(L->tf->s, s), last);
	return 1;
}

static void lint_cuda(struct lint *L)
{
	const struct compat_tf_build *b = L->build;
	const char *c = L->cuda->s;
	char hint[512];

	if (version_component(c, 0) != version_component(b->cuda, 0)) {
		snprintf(hint, sizeof(hint),
		         "TF loads the CUDA %ld libraries (libcudart.so.%ld); use CUDA %s as "
		         "tested for %s",
		         version_component(b->cuda, 0), version_component(b->cuda, 0), b->cuda,
		         b->name);
		diags_add(L->d, DIAG_ERROR, L->file, L->cuda->pos, "compat.cuda-major-mismatch",
		          hint, "CUDA %s cannot serve %s: it was built for CUDA %s", c, b->name,
		          b->cuda);
		return;
	}
	if (version_cmp_n(c, b->cuda, 2) == 0)
		return;
	/* From CUDA 11 on the libraries of one major share their sonames. */
	if (compat_cuda_in_family(L->kb, c)) {
		snprintf(hint, sizeof(hint),
		         "%s was tested with CUDA %s; CUDA %s is the same major %ld, so TF loads "
		         "its libraries, %s",
		         b->name, b->cuda, c, version_component(c, 0),
		         version_cmp(c, b->cuda) < 0
		             ? "but they lack what the newer minor releases added; prefer the "
		               "tested one"
		             : "but that pairing is untested; prefer the tested one unless you "
		               "need the newer toolkit");
		diags_add(L->d, DIAG_WARNING, L->file, L->cuda->pos, "compat.cuda-untested", hint,
		          "CUDA %s is not the tested CUDA %s for %s", c, b->cuda, b->name);
		return;
	}
	snprintf(hint, sizeof(hint),
	         "before CUDA 11 each minor release has its own sonames (libcudart.so.10.0, "
	         "libcudart.so.10.1): %s loads the CUDA %s libraries only; use CUDA %s",
	         b->name, b->cuda, b->cuda);
	diags_add(L->d, DIAG_ERROR, L->file, L->cuda->pos, "compat.cuda-mismatch", hint,
	          "%s is built for CUDA %s, not %s", b->name, b->cuda, c);
}

/*
 * A CUDA version must be a real release before its driver can be judged.
 * 0 known, or unknown to the knowledge base (a warning); TF_EMANIFEST no such
 * release (an error).
 */
static int cuda_known(struct lint *L)
{
	const struct compat *kb = L->kb;
	const char *c = L->cuda->s, *lo = NULL, *hi = NULL;

	if (compat_cuda_min_driver(kb, c, 0) != NULL)
		return 0;
	for (size_t i = 0; i < kb->ndrivers; i++) {
		if (lo == NULL || version_cmp(kb->drivers[i].cuda, lo) < 0)
			lo = kb->drivers[i].cuda;
		if (hi == NULL || version_cmp(kb->drivers[i].cuda, hi) > 0)
			hi = kb->drivers[i].cuda;
	}
	if (lo != NULL && version_cmp_n(c, lo, 2) > 0 && version_cmp_n(c, hi, 2) < 0) {
		diags_add(L->d, DIAG_ERROR, L->file, L->cuda->pos, "compat.cuda-no-such-release",
		          "NVIDIA's release notes list every toolkit with its minimum driver; "
		          "pick one of those",
		          "CUDA %s does not exist (no such toolkit between %s and %s)", c, lo, hi);
		return TF_EMANIFEST;
	}
	diags_add(L->d, DIAG_WARNING, L->file, L->cuda->pos, "compat.cuda-unknown",
	          "add the toolkit's row (CUDA release notes) to data/compat.yaml",
	          "CUDA %s is not in the knowledge base; its driver minimum is not checked", c);
	return 0;
}

static void lint_driver(struct lint *L)
{
	const struct manifest *m = L->m;
	const struct mstr *floor = &m->driver.min_version;
	const char *c = L->cuda->s, *col = L->windows_driver ? "Windows" : "Linux";
	const char *need = NULL, *mvc = NULL;
	char hint[512];

	if (!floor->set || floor->s == NULL)
		return;
	/* The rule every command applies (compat_gpu.c), to the declared floor. */
	switch (compat_judge_driver(L->kb, c, floor->s, L->windows_driver, &need, &mvc)) {
	case COMPAT_DRIVER_UNKNOWN:
	case COMPAT_DRIVER_OK:
		return;
	case COMPAT_DRIVER_TOO_OLD:
		if (mvc != NULL)
			snprintf(hint, sizeof(hint),
			         "raise driver.min_version to %s (CUDA %s's own minimum); %s is "
			         "the least any CUDA %ld needs (minor-version compatibility)",
			         need, c, mvc, version_component(c, 0));
		else if (compat_cuda_family_floor(L->kb, c, L->windows_driver) != NULL)
			/* A family floor above the toolkit's own minimum (CUDA 11.0). */
			snprintf(hint, sizeof(hint),
			         "raise driver.min_version to %s, CUDA %s's own minimum", need, c);
		else
			snprintf(hint, sizeof(hint),
			         "raise driver.min_version to %s; CUDA %s has no minor-version "
			         "compatibility, its minimum is strict",
			         need, c);
		diags_add(L->d, DIAG_ERROR, L->file, floor->pos, "compat.driver-below-cuda-min",
		          hint, "driver floor %s is below the %s minimum %s of CUDA %s", floor->s,
		          col, need, c);
		return;
	case COMPAT_DRIVER_MINOR_COMPAT:
		break;
	}
	snprintf(hint, sizeof(hint),
	         "CUDA %s wants %s driver >= %s; between %s and that it runs through minor-version "
	         "compatibility (limited features, no PTX JIT)",
	         c, col, need, mvc);
	diags_add(L->d, DIAG_WARNING, L->file, floor->pos, "compat.driver-minor-compat", hint,
	          "driver floor %s is below CUDA %s's own minimum %s", floor->s, c, need);
}

static void lint_cudnn(struct lint *L)
{
	const struct compat_tf_build *b = L->build;
	const char *v = L->cudnn->s;
	char hint[512];

	if (version_component(v, 0) != version_component(b->cudnn_min, 0)) {
		snprintf(hint, sizeof(hint),
		         "TF's rule: \"CuDNN library needs to have matching major version and "
		         "equal or higher minor version\"; use cuDNN %s or a later %ld.x",
		         b->cudnn_min, version_component(b->cudnn_min, 0));
		diags_add(L->d, DIAG_ERROR, L->file, L->cudnn->pos, "compat.cudnn-major-mismatch",
		          hint, "cuDNN %s cannot serve %s: it was built with cuDNN %s", v, b->name,
		          b->cudnn_min);
		return;
	}
	/* TF compares major and minor only: patch releases need not match. */
	if (version_cmp_n(v, b->cudnn_min, 2) >= 0)
		return;
	snprintf(hint, sizeof(hint), "use cuDNN %ld.%ld or a later %ld.x (%s)",
	         version_component(b->cudnn_min, 0), version_component(b->cudnn_min, 1),
	         version_component(b->cudnn_min, 0), b->source);
	diags_add(L->d, DIAG_ERROR, L->file, L->cudnn->pos, "compat.cudnn-too-old", hint,
	          "cuDNN %s is older than the cuDNN %s that %s was built with", v, b->cudnn_min,
	          b->name);
}

static void lint_python(struct lint *L)
{
	const struct compat_tf_build *b = L->build;
	const char *py = L->python->s;
	struct strbuf sb = STRBUF_INIT;
	char *hint;

	for (size_t i = 0; i < b->npython; i++)
		if (version_cmp_n(py, b->python[i].lo, 2) >= 0 &&
		    version_cmp_n(py, b->python[i].hi, 2) <= 0)
			return;
	for (size_t i = 0; i < b->npython; i++) {
		if (i > 0)
			strbuf_adds(&sb, ", ");
		if (strcmp(b->python[i].lo, b->python[i].hi) == 0)
			strbuf_adds(&sb, b->python[i].lo);
		else
			strbuf_addf(&sb, "%s-%s", b->python[i].lo, b->python[i].hi);
	}
	hint = xasprintf("%s supports Python %s", b->name, sb.buf);
	diags_add(L->d, DIAG_ERROR, L->file, L->python->pos, "compat.python-unsupported", hint,
	          "Python %s is outside the range of %s (%s)", py, b->name, sb.buf);
	free(hint);
	strbuf_release(&sb);
}

/* A GPU of driver.gpus: the one rule of compat_gpu.c, at the GPU's line. */
static void lint_gpu(struct lint *L, const struct mstr *g)
{
	struct compat_verdict v;

	if (compat_judge_gpu(L->kb, L->build != NULL ? L->tf->s : NULL, L->cuda ? L->cuda->s : NULL,
	                     g->s, &v) == 0 &&
	    v.code != NULL)
		diags_add(L->d, v.sev, L->file, g->pos, v.code, v.hint, "%s", v.msg);
	compat_verdict_release(&v);
}

static void lint_pip_req(struct lint *L, const struct pip_req *r)
{
	const struct compat *kb = L->kb;
	const char *tf = L->tf ? L->tf->s : NULL;

	for (size_t i = 0; i < kb->npip_removed; i++) {
		const struct compat_pip_removed *x = &kb->pip_removed[i];
		const char *last = L->windows_native && x->last_real_windows ? x->last_real_windows
		                                                             : x->last_real_linux;
		char *hint;

		if (strcmp(r->name, x->name) != 0)
			continue;
		hint = xasprintf("install %s", x->replacement);
		/* Before the merge the name was the GPU package itself. */
		if (r->version != NULL && version_cmp(r->version, x->identical_since) < 0) {
			free(hint);
			continue;
		}
		if (r->version == NULL || version_cmp(r->version, last) > 0)
			diags_add(
			    L->d, DIAG_ERROR, L->file, r->pos, "compat.pip-package-removed", hint,
			    "%s%s%s does not exist: the package was removed (last real release "
			    "%s%s%s)",
			    r->raw_name, r->version ? "==" : "", r->version ? r->version : "", last,
			    x->stub ? "; " : "", x->stub ? "later ones are stubs that fail" : "");
		else
			diags_add(
			    L->d, DIAG_WARNING, L->file, r->pos, "compat.pip-package-deprecated",
			    hint,
			    "%s is a removed name, identical to tensorflow since %s; %s is its "
			    "last real release",
			    r->raw_name, x->identical_since, last);
		free(hint);
	}
	if (r->version == NULL || tf == NULL)
		return;
	/* The first group whose range the pin violates speaks for all. */
	for (size_t i = 0; i < kb->npip_requires; i++) {
		const struct compat_pip_requires *q = &kb->pip_requires[i];
		char *hint;

		if (strcmp(r->name, q->package) != 0 || !compat_spec_allows(q->tf_spec, tf) ||
		    compat_spec_allows(q->spec, r->version))
			continue;
		hint = xasprintf("pin a %s version that satisfies %s%s (%s)", q->package,
		                 q->package, q->spec, q->source);
		diags_add(L->d, DIAG_ERROR, L->file, r->pos, "compat.pip-requirement-conflict",
		          hint, "%s %s conflicts with TensorFlow %s, which requires %s%s",
		          r->raw_name, r->version, tf, q->package, q->spec);
		free(hint);
		break;
	}
	if (strcmp(r->name, "tensorflow") == 0 && L->tf != &L->tf_from_pip &&
	    !agree(r->version, tf))
		diags_add(L->d, DIAG_ERROR, L->file, r->pos, "compat.pip-tf-mismatch",
		          "the pip pin and versions.tensorflow must name the same release",
		          "pip pins tensorflow %s but the stack declares TensorFlow %s (line %d)",
		          r->version, tf, L->tf->pos.line);
}

/* Is (name, version) published on the channel, per the knowledge base's version lists? */
static void conda_check_release(struct lint *L, const char *channel, const char *name,
                                const char *version, int fuzzy, struct pos pos)
{
	for (size_t i = 0; i < L->kb->nconda; i++) {
		const struct compat_conda_pkg *k = &L->kb->conda[i];
		struct strbuf sb = STRBUF_INIT;
		int found = 0;
		char *hint;

		if (strcmp(k->name, name) != 0 ||
		    (channel != NULL && strcmp(channel, k->channel) != 0))
			continue;
		for (size_t j = 0; j < k->nversions && !found; j++)
			found = fuzzy ? version_has_prefix(k->versions[j], version)
			              : version_cmp(k->versions[j], version) == 0;
		if (found)
			continue;
		if (k->discontinued_after != NULL &&
		    version_cmp(version, k->discontinued_after) > 0) {
			diags_add(L->d, DIAG_ERROR, L->file, pos,
			          "compat.conda-package-discontinued", k->successor,
			          "%s %s %s does not exist: %s stops at %s", k->channel, name,
			          version, name, k->discontinued_after);
			continue;
		}
		if (k->complete_through == NULL || version_cmp(version, k->complete_through) > 0)
			continue;
		/* Name the neighbours: the same major.minor, else the same major, else all. */
		for (int depth = 2; depth >= 0 && sb.len == 0; depth--)
			for (size_t j = 0; j < k->nversions; j++)
				if (depth == 0 ||
				    version_cmp_n(k->versions[j], version, depth) == 0)
					strbuf_addf(&sb, "%s%s", sb.len ? ", " : "",
					            k->versions[j]);
		hint = xasprintf("%s has %s %s", k->channel, name, sb.buf);
		diags_add(L->d, DIAG_ERROR, L->file, pos, "compat.conda-no-such-version", hint,
		          "%s has no %s %s", k->channel, name, version);
		free(hint);
		strbuf_release(&sb);
	}
}

/*
 * A conda package versioned by CUDA release (cudatoolkit, cuda-version) must
 * carry the stack's CUDA major: another one installs a second CUDA runtime.
 */
static size_t ncomp(const char *v)
{
	size_t n = 1;

	for (; *v != '\0'; v++)
		n += *v == '.';
	return n;
}

static void conda_cuda_major(struct lint *L, const char *name, const char *version, struct pos pos)
{
	const char *cuda = L->cuda ? L->cuda->s : NULL;
	char *hint;

	if (cuda == NULL)
		return;
	/* Before CUDA 11 each minor release is its own ABI (libcudart.so.10.0, .10.1):
	 * the release must match to the minor. */
	if (version_component(version, 0) == version_component(cuda, 0) &&
	    (compat_cuda_in_family(L->kb, cuda) || ncomp(version) < 2 ||
	     version_cmp_n(version, cuda, 2) == 0))
		return;
	if (version_component(version, 0) == version_component(cuda, 0)) {
		for (size_t i = 0; i < L->kb->nconda_cuda; i++) {
			if (strcmp(L->kb->conda_cuda[i], name) != 0)
				continue;
			hint =
			    xasprintf("before CUDA 11 each minor release has its own sonames "
			              "(libcudart.so.%ld.%ld): pin %s to CUDA %ld.%ld or drop it",
			              version_component(cuda, 0), version_component(cuda, 1), name,
			              version_component(cuda, 0), version_component(cuda, 1));
			diags_add(L->d, DIAG_ERROR, L->file, pos,
			          "compat.conda-cuda-release-mismatch", hint,
			          "conda %s %s is CUDA %ld.%ld, but the stack is CUDA %s", name,
			          version, version_component(version, 0),
			          version_component(version, 1), cuda);
			free(hint);
		}
		return;
	}
	for (size_t i = 0; i < L->kb->nconda_cuda; i++) {
		if (strcmp(L->kb->conda_cuda[i], name) != 0)
			continue;
		hint =
		    xasprintf("the stack's CUDA comes from the cuda section; drop %s or pin it to "
		              "CUDA %ld",
		              name, version_component(cuda, 0));
		diags_add(L->d, DIAG_ERROR, L->file, pos, "compat.conda-cuda-major-mismatch", hint,
		          "conda %s %s is CUDA %ld, but the stack is CUDA %s", name, version,
		          version_component(version, 0), cuda);
		free(hint);
	}
}

/*
 * conda judgement of one (name, version) on a channel; fuzzy: "=1.2" means
 * 1.2.*. Then its CUDA major, unless the version itself was refused.
 */
static void conda_check(struct lint *L, const char *channel, const char *name, const char *version,
                        int fuzzy, struct pos pos)
{
	size_t before = L->d->n;

	conda_check_release(L, channel, name, version, fuzzy, pos);
	if (L->d->n == before)
		conda_cuda_major(L, name, version, pos);
}

/* "conda-forge::cudnn=8.9.4=h123", "cudnn==8.9.4", "cudnn 8.9.*" */
static void lint_conda_spec(struct lint *L, const struct mstr *spec, const char *channel)
{
	const char *s = spec->s, *sep = strstr(s, "::");
	char *chan = NULL, *name = NULL, *ver = NULL;
	size_t n;
	int fuzzy = 1;

	if (sep != NULL) {
		chan = xstrndup(s, (size_t)(sep - s));
		s = sep + 2;
	}
	n = strcspn(s, "=<>!~ ");
	name = xstrndup(s, n);
	s += n;
	while (*s == ' ')
		s++;
	if (strncmp(s, "==", 2) == 0) {
		fuzzy = 0;
		s += 2;
	} else if (*s == '=') {
		s++;
	} else if (*s != '\0' && strchr("<>!~", *s) != NULL) {
		goto out; /* a range: not judged */
	}
	ver = xstrndup(s, strcspn(s, "= "));
	n = strlen(ver);
	while (n > 0 && (ver[n - 1] == '*' || ver[n - 1] == '.'))
		ver[--n] = '\0';
	if (version_valid(ver))
		conda_check(L, chan ? chan : channel, name, ver, fuzzy, spec->pos);
out:
	free(chan);
	free(name);
	free(ver);
}

/* The channel of a conda URL: the path segment before the subdir ("linux-64"). */
static char *url_channel(const char *url)
{
	const char *end = strrchr(url, '/'), *sub, *start;

	if (end == NULL)
		return NULL;
	sub = end;
	while (sub > url && sub[-1] != '/')
		sub--;
	if (sub == url)
		return NULL;
	start = sub - 1;
	while (start > url && start[-1] != '/')
		start--;
	return xstrndup(start, (size_t)(sub - 1 - start));
}

static void lint_conda(struct lint *L)
{
	const struct manifest *m = L->m;
	const char *channel = m->python.channel.set ? m->python.channel.s : NULL;

	for (size_t i = 0; i < m->python.nspecs; i++)
		if (m->python.specs[i].s != NULL)
			lint_conda_spec(L, &m->python.specs[i], channel);
	for (size_t i = 0; i < m->python.npkgs; i++) {
		const struct conda_pkg *p = &m->python.pkgs[i];
		char *chan;

		if (p->name == NULL || p->version == NULL || p->url == NULL)
			continue;
		chan = url_channel(p->url);
		if (chan != NULL)
			conda_check(L, chan, p->name, p->version, 0, p->pos);
		free(chan);
	}
}

/* ---- declared versions against the sections that deliver them ---- */

static const char *url_base(const char *url)
{
	const char *slash = strrchr(url, '/');

	return slash ? slash + 1 : url;
}

/* The run of digits and dots at s (without a trailing dot), or NULL. */
static char *version_at(const char *s)
{
	size_t n = strspn(s, "0123456789.");

	while (n > 0 && s[n - 1] == '.')
		n--;
	if (n == 0)
		return NULL;
	return xstrndup(s, n);
}

/* "redistrib_12.3.2.json" -> "12.3.2"; NULL for another name. */
static char *redist_label(const struct mstr *url)
{
	const char *b = url->s ? url_base(url->s) : NULL;
	char *v;

	if (b == NULL || strncmp(b, "redistrib_", 10) != 0 || !str_ends_with(b, ".json"))
		return NULL;
	v = version_at(b + 10);
	if (v != NULL && strlen(b + 10) != strlen(v) + 5) {
		free(v);
		return NULL;
	}
	return v;
}

/* "cuda_11.2.2_460.32.03_linux.run" -> "11.2.2" */
static char *runfile_version(const struct mstr *url)
{
	const char *b = url->s ? url_base(url->s) : NULL;

	if (b == NULL || strncmp(b, "cuda_", 5) != 0)
		return NULL;
	return version_at(b + 5);
}

/*
 * A cuDNN archive's own version and the CUDA it was built for, from NVIDIA's
 * file names: "cudnn-linux-x86_64-8.9.7.29_cuda12-archive.tar.xz" (redist) or
 * "cudnn-11.2-linux-x64-v8.1.1.33.tgz" (legacy). 0 when the name is neither.
 */
static int cudnn_archive(const struct mstr *url, char **version, char **cuda)
{
	const char *b = url->s ? url_base(url->s) : NULL, *tag, *start;

	*version = *cuda = NULL;
	if (b == NULL || strncmp(b, "cudnn-", 6) != 0)
		return 0;
	if ((tag = strstr(b, "_cuda")) != NULL) {
		start = tag;
		while (start > b && start[-1] != '-')
			start--;
		*version = xstrndup(start, (size_t)(tag - start));
		*cuda = version_at(tag + 5);
	} else if ((tag = strstr(b, "-v")) != NULL) {
		*version = version_at(tag + 2);
		*cuda = version_at(b + 6);
	}
	if (*version == NULL || !version_valid(*version) || *cuda == NULL) {
		free(*version);
		free(*cuda);
		*version = *cuda = NULL;
		return 0;
	}
	return 1;
}

static void disagree(struct lint *L, struct pos pos, const char *what, const char *got,
                     const char *key, const struct mstr *declared)
{
	char *hint =
	    xasprintf("validate judges the stack by %s; make both name the same release", key);

	diags_add(L->d, DIAG_ERROR, L->file, pos, "compat.version-disagrees", hint,
	          "%s is %s, but %s says %s (line %d)", what, got, key, declared->s,
	          declared->pos.line);
	free(hint);
}

/* A section's own version field against versions.<key>. */
static void check_section(struct lint *L, const struct mstr *section, const struct mstr *declared,
                          const char *what, const char *key)
{
	if (section->set && section->s != NULL && declared->set && declared->s != NULL &&
	    !agree(section->s, declared->s))
		disagree(L, section->pos, what, section->s, key, declared);
}

/* A version read from a file name (owned by got) against the one in use. */
static void check_derived(struct lint *L, char *got, const struct mstr *url, const char *what,
                          const struct mstr *used, const char *key)
{
	if (got != NULL && used != NULL && !agree(got, used->s))
		disagree(L, url->pos, what, got, key, used);
	free(got);
}

/* The key a picked version was read from, for the message. */
static const char *key_of(const struct mstr *used, const struct mstr *versions_field,
                          const char *vkey, const char *skey)
{
	return used == versions_field ? vkey : skey;
}

static void lint_cuda_sources(struct lint *L)
{
	const struct manifest *m = L->m;
	const char *key = key_of(L->cuda, &m->versions.cuda, "versions.cuda", "cuda.version");

	check_section(L, &m->cuda.version, &m->versions.cuda, "cuda.version", "versions.cuda");
	if (m->cuda.redist.set)
		check_derived(L, redist_label(&m->cuda.redist.json.url), &m->cuda.redist.json.url,
		              "the redist JSON's release", L->cuda, key);
	if (m->cuda.has_runfile)
		check_derived(L, runfile_version(&m->cuda.runfile.url), &m->cuda.runfile.url,
		              "the runfile's release", L->cuda, key);
}

static void cudnn_build(struct lint *L, long build, struct pos pos, const char *what)
{
	long major = version_component(L->cuda->s, 0);
	char *hint;

	if (build == major)
		return;
	hint = xasprintf("take the cuDNN build for CUDA %ld (the _cuda%ld archive, or variant "
	                 "cuda%ld of a multi-variant redist JSON)",
	                 major, major, major);
	diags_add(L->d, DIAG_ERROR, L->file, pos, "compat.cudnn-cuda-build-mismatch", hint,
	          "%s is built for CUDA %ld, but the stack is CUDA %s", what, build, L->cuda->s);
	free(hint);
}

static void lint_cudnn_sources(struct lint *L)
{
	const struct manifest *m = L->m;
	const struct mstr *url = &m->cudnn.artifact.url;
	const char *key = key_of(L->cudnn, &m->versions.cudnn, "versions.cudnn", "cudnn.version");
	char *version, *cuda;

	check_section(L, &m->cudnn.version, &m->versions.cudnn, "cudnn.version", "versions.cudnn");
	if (m->cudnn.has_artifact && cudnn_archive(url, &version, &cuda)) {
		char *what = xasprintf("the cuDNN archive %s", url_base(url->s));
		if (L->cuda != NULL)
			cudnn_build(L, version_component(cuda, 0), url->pos, what);
		check_derived(L, version, url, what, L->cudnn, key);
		free(what);
		free(cuda);
	}
	if (m->cudnn.redist.set) {
		const struct mstr *v = &m->cudnn.redist.variant;
		check_derived(L, redist_label(&m->cudnn.redist.json.url), &m->cudnn.redist.json.url,
		              "the cuDNN redist JSON's release", L->cudnn, key);
		if (L->cuda != NULL && v->set && v->s != NULL && strncmp(v->s, "cuda", 4) == 0 &&
		    version_valid(v->s + 4))
			cudnn_build(L, version_component(v->s + 4, 0), v->pos, "the cuDNN variant");
	}
}

static void lint_python_sources(struct lint *L)
{
	const struct manifest *m = L->m;
	const struct mstr *in = &m->python.interpreter;
	const char *key =
	    key_of(L->python, &m->versions.python, "versions.python", "python.version");

	check_section(L, &m->python.version, &m->versions.python, "python.version",
	              "versions.python");
	if (L->python == NULL)
		return;
	for (size_t i = 0; i < m->python.npkgs; i++) {
		const struct conda_pkg *p = &m->python.pkgs[i];
		if (p->name != NULL && p->version != NULL && strcmp(p->name, "python") == 0 &&
		    !agree(p->version, L->python->s))
			disagree(L, p->pos, "the conda lock's python package", p->version, key,
			         L->python);
	}
	/* "/usr/bin/python3.9": the version in the name, when it has major.minor. */
	if (in->set && in->s != NULL && strncmp(url_base(in->s), "python", 6) == 0) {
		char *v = version_at(url_base(in->s) + 6);
		if (v != NULL && strchr(v, '.') == NULL) {
			free(v);
			v = NULL;
		}
		char *what = xasprintf("python.interpreter %s", in->s);
		check_derived(L, v, in, what, L->python, key);
		free(what);
	}
}

/*
 * A wheel pinned by URL names its release and the Python it is built for:
 * "tensorflow-2.15.1-cp310-cp310-manylinux_2_17_x86_64.whl". Its version
 * against versions.tensorflow (for tensorflow's own wheel) and its CPython tag
 * against versions.python (an abi3 tag is a floor), at the requirement's line.
 */
static void lint_wheel_names(struct lint *L)
{
	const struct manifest *m = L->m;
	const char *pkey =
	    L->python ? key_of(L->python, &m->versions.python, "versions.python", "python.version")
	              : NULL;

	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *r = &m->pip.reqs[i];
		const char *base = r->url ? url_base(r->url) : NULL;
		char *f[8], *copy, *save = NULL;
		size_t n = 0;

		if (base == NULL || !str_ends_with(base, ".whl") || r->name == NULL)
			continue;
		copy = xstrndup(base, strlen(base) - 4);
		for (char *t = strtok_r(copy, "-", &save); t && n < 8;
		     t = strtok_r(NULL, "-", &save))
			f[n++] = t;
		if (n != 5 && n != 6) { /* name-ver(-build)-py-abi-plat */
			free(copy);
			continue;
		}
		char *what = xasprintf("the wheel %s", base);
		if (L->tf != NULL && L->tf != &L->tf_from_pip &&
		    strcmp(r->name, "tensorflow") == 0 && version_valid(f[1]) &&
		    !agree(f[1], L->tf->s))
			disagree(L, r->pos, what, f[1], "versions.tensorflow", L->tf);
		if (L->python != NULL) {
			int abi3 = strcmp(f[n - 2], "abi3") == 0, fits = 0, judged = 0;
			char *tags = xstrdup(f[n - 3]), *s2 = NULL, got[16] = "";
			for (char *t = strtok_r(tags, ".", &s2); t; t = strtok_r(NULL, ".", &s2)) {
				if (strncmp(t, "cp", 2) != 0 || strlen(t) < 4 || strlen(t) > 5 ||
				    strspn(t + 2, "0123456789") != strlen(t + 2))
					continue;
				snprintf(got, sizeof(got), "%c.%s", t[2], t + 3);
				judged = 1;
				fits |= abi3 ? version_cmp_n(L->python->s, got, 2) >= 0
				             : version_cmp_n(L->python->s, got, 2) == 0;
			}
			free(tags);
			if (judged && !fits) {
				char *g =
				    xasprintf("for CPython %s%s", got, abi3 ? " and later" : "");
				disagree(L, r->pos, what, g, pkey, L->python);
				free(g);
			}
		}
		free(what);
		free(copy);
	}
}

/* ---- the bench step's mixed precision ---- */

static void lint_mixed_precision(struct lint *L)
{
	const struct compat *kb = L->kb;
	const struct manifest *m = L->m;
	const char *policy = kb->mixed_precision.policy,
	           *min_cc = kb->mixed_precision.speedup_min_cc;
	char s[32];

	for (size_t i = 0; policy != NULL && i < m->bench.nprecisions; i++) {
		const struct mstr *p = &m->bench.precisions[i];
		struct strbuf sb = STRBUF_INIT;
		char *hint;

		if (p->s == NULL || strcmp(p->s, policy) != 0)
			continue;
		if (L->tf != NULL && version_cmp_n(L->tf->s, kb->mixed_precision.min_tf, 2) < 0) {
			hint = xasprintf("drop %s from bench.precisions (%s)", policy,
			                 kb->mixed_precision.source);
			diags_add(L->d, DIAG_ERROR, L->file, p->pos,
			          "compat.mixed-precision-unsupported", hint,
			          "%s needs TensorFlow %s or later (the Keras mixed precision "
			          "policy API); the stack is TensorFlow %s",
			          policy, kb->mixed_precision.min_tf, series(L->tf->s, s));
			free(hint);
			continue;
		}
		for (size_t j = 0; j < m->driver.ngpus; j++) {
			const struct mstr *g = &m->driver.gpus[j];
			const struct compat_cc *row = g->s ? compat_cc_row(kb, g->s) : NULL;
			int c = g->s ? compat_cc_parse(g->s) : -1;

			if (c < 0 || c >= compat_cc_parse(min_cc))
				continue;
			strbuf_addf(&sb, "%s%s", sb.len ? ", " : "", g->s);
			if (row != NULL)
				strbuf_addf(&sb, " (%s: %s)", row->arch,
				            row->examples ? row->examples : "");
		}
		if (sb.len > 0) {
			hint =
			    xasprintf("Tensor Cores start at compute capability %s; keep fp32 for "
			              "these GPUs or expect memory savings only",
			              min_cc);
			diags_add(L->d, DIAG_WARNING, L->file, p->pos,
			          "compat.mixed-precision-no-speedup", hint,
			          "%s gives no math speed-up on compute capability below %s: %s",
			          policy, min_cc, sb.buf);
			free(hint);
		}
		strbuf_release(&sb);
	}
}

/*
 * CUDA from nvidia-*-cu<N> wheels (tensorflow[and-cuda]): with a cuda section too,
 * the stack carries two CUDAs; alone, the wheels must name the declared releases.
 * *wheel_cuda gets the runtime wheel as the CUDA the driver must serve.
 */
static void lint_pip_cuda(struct lint *L, struct mstr *wheel_cuda)
{
	const struct manifest *m = L->m;
	const struct pip_req *first = NULL, *rt = NULL, *dnn = NULL;
	size_t n = compat_pip_cuda(L->kb, m, &first, &rt, &dnn);
	char *hint;

	if (n == 0)
		return;
	if (m->cuda.set) {
		const struct mstr *cv = pick(&m->cuda.version, &m->versions.cuda);

		hint = xasprintf("keep one CUDA: drop the %s*%s%d pins and let the cuda and cudnn "
		                 "sections serve TensorFlow, or drop those sections and take CUDA "
		                 "from the wheels as tensorflow[and-cuda] does",
		                 L->kb->cuda_wheels.prefix, L->kb->cuda_wheels.major_tag,
		                 compat_cuda_wheel_major(L->kb, first->name));
		diags_add(L->d, DIAG_WARNING, L->file, first->pos, "compat.cuda-twice", hint,
		          "two CUDAs: the cuda section installs CUDA %s (line %d) and the pip lock "
		          "carries %zu CUDA wheel%s (%s%s%s); which libraries TensorFlow loads "
		          "then depends on the loader's search order",
		          cv && cv->s ? cv->s : "?", m->cuda.pos.line, n, n == 1 ? "" : "s",
		          first->raw_name, first->version ? "==" : "",
		          first->version ? first->version : "");
		free(hint);
		return;
	}
	if (rt != NULL && rt->version != NULL) {
		char buf[32];

		if (L->cuda != NULL && version_cmp_n(L->cuda->s, rt->version, 2) != 0 &&
		    !agree(L->cuda->s, rt->version))
			disagree(
			    L, rt->pos, rt->raw_name, rt->version,
			    key_of(L->cuda, &m->versions.cuda, "versions.cuda", "cuda.version"),
			    L->cuda);
		else if (L->cuda == NULL)
			diags_add(L->d, DIAG_WARNING, L->file, rt->pos, "compat.version-undeclared",
			          "write versions.cuda so validate judges the stack by it",
			          "%s %s carries CUDA %s, which versions.cuda does not declare",
			          rt->raw_name, rt->version, series(rt->version, buf));
		wheel_cuda->s = rt->version;
		wheel_cuda->pos = rt->pos;
		wheel_cuda->set = 1;
	}
	if (dnn != NULL && dnn->version != NULL && L->cudnn != NULL &&
	    !agree(L->cudnn->s, dnn->version))
		disagree(L, dnn->pos, dnn->raw_name, dnn->version,
		         key_of(L->cudnn, &m->versions.cudnn, "versions.cudnn", "cudnn.version"),
		         L->cudnn);
}

/*
 * pip.min_glibc against the manylinux tag of TF's own wheel (tf_glibc): a floor
 * below it says the lock runs where pip finds no installable tensorflow file.
 */
static void lint_min_glibc(struct lint *L)
{
	const struct mstr *g = &L->m->pip.min_glibc;
	const struct compat_tf_glibc *row = NULL;
	char *hint;

	if (!g->set || g->s == NULL || L->tf == NULL || L->windows_native ||
	    compat_tf_min_glibc(L->kb, L->tf->s, &row) == NULL ||
	    version_cmp(g->s, row->glibc) >= 0)
		return;
	hint = xasprintf("write pip.min_glibc: \"%s\" or higher (`tfprov init` and "
	                 "scripts/closure-to-requirements.py --glibc "
	                 "compute it from the wheel tags); source: %s",
	                 row->glibc, row->source);
	diags_add(L->d, DIAG_ERROR, L->file, g->pos, "compat.min-glibc-below-wheels", hint,
	          "pip.min_glibc %s is below glibc %s, which TensorFlow %s's wheel (%s) needs",
	          g->s, row->glibc, L->tf->s, row->tag);
	free(hint);
}

int compat_lint(const struct compat *kb, const struct manifest *m, struct diags *d)
{
	struct lint L = {0};
	struct mstr wheel_cuda = {0};
	size_t errors = d->errors;

	L.kb = kb;
	L.m = m;
	L.d = d;
	L.file = m->path;
	L.windows_native = m->stack.platform == PLATFORM_WINDOWS_X86_64;
	L.windows_driver = L.windows_native || m->stack.platform == PLATFORM_WSL2;
	L.tf =
	    m->versions.tensorflow.set && m->versions.tensorflow.s ? &m->versions.tensorflow : NULL;
	L.cuda = pick(&m->versions.cuda, &m->cuda.version);
	L.cudnn = pick(&m->versions.cudnn, &m->cudnn.version);
	L.python = pick(&m->versions.python, &m->python.version);
	for (size_t i = 0; L.tf == NULL && i < m->pip.nreqs; i++) {
		const struct pip_req *r = &m->pip.reqs[i];
		if (strcmp(r->name, "tensorflow") == 0 && r->version != NULL) {
			L.tf_from_pip.s = r->version;
			L.tf_from_pip.pos = r->pos;
			L.tf_from_pip.set = 1;
			L.tf = &L.tf_from_pip;
		}
	}

	/* A CUDA release that does not exist is the one thing to say about it. */
	if (L.cuda != NULL && cuda_known(&L) < 0)
		L.cuda = NULL;
	if (L.tf != NULL && !lint_windows(&L)) {
		lint_tf(&L);
		if (L.build != NULL && L.cuda != NULL)
			lint_cuda(&L);
		if (L.build != NULL && L.cudnn != NULL)
			lint_cudnn(&L);
		if (L.build != NULL && L.python != NULL)
			lint_python(&L);
	}
	lint_pip_cuda(&L, &wheel_cuda);
	if (L.cuda != NULL || wheel_cuda.set) {
		/* The driver serves the CUDA the runtime wheel carries (12.9.79: 12.9 Update 1). */
		const struct mstr *declared = L.cuda;
		if (wheel_cuda.set)
			L.cuda = &wheel_cuda;
		lint_driver(&L);
		L.cuda = declared;
	}
	if (L.cuda != NULL)
		lint_cuda_sources(&L);
	lint_cudnn_sources(&L);
	lint_python_sources(&L);
	lint_wheel_names(&L);
	lint_mixed_precision(&L);
	for (size_t i = 0; i < m->driver.ngpus; i++)
		if (m->driver.gpus[i].s != NULL)
			lint_gpu(&L, &m->driver.gpus[i]);
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name != NULL)
			lint_pip_req(&L, &m->pip.reqs[i]);
	lint_conda(&L);
	lint_min_glibc(&L);
	compat_lint_lock(kb, m, L.python ? L.python->s : NULL, L.windows_native, d);
	compat_lint_env(kb, m, d);
	compat_lint_env_derived(kb, m, d);
	compat_lint_platform(kb, m, d);
	compat_lint_cuda_wheels(kb, m, L.tf ? L.tf->s : NULL, d);
	compat_lint_companions(kb, m, d);
	compat_lint_cuda_carriers(kb, m, L.cuda, d);
	compat_lint_cuda_libs(kb, m, L.cuda, L.cudnn, d);
	return (int)(d->errors - errors);
}
