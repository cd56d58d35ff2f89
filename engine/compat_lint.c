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
 *    `version:` second, and the diagnostic points at the one that was read.
 */
#include "compat.h"
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
	if (compat_cuda_compat_driver(L->kb, c, L->windows_driver) != NULL) {
		snprintf(hint, sizeof(hint),
		         "%s was tested with CUDA %s; CUDA %s runs it only through minor-version "
		         "compatibility%s",
		         b->name, b->cuda, c,
		         version_cmp(c, b->cuda) < 0
		             ? " and lacks what the newer toolkit added; prefer the tested one"
		             : "; prefer the tested one unless you need the newer toolkit");
		diags_add(L->d, DIAG_WARNING, L->file, L->cuda->pos, "compat.cuda-untested", hint,
		          "CUDA %s is not the tested CUDA %s for %s", c, b->cuda, b->name);
		return;
	}
	snprintf(hint, sizeof(hint),
	         "before CUDA 11 there is no minor-version compatibility: %s loads the %s "
	         "libraries only; use CUDA %s",
	         b->name, b->cuda, b->cuda);
	diags_add(L->d, DIAG_ERROR, L->file, L->cuda->pos, "compat.cuda-mismatch", hint,
	          "%s is built for CUDA %s, not %s", b->name, b->cuda, c);
}

/*
 * A CUDA version must be a real release before its driver can be judged.
 * 1 known; 0 unknown to the knowledge base (warning); -1 no such release (error).
 */
static int cuda_known(struct lint *L)
{
	const struct compat *kb = L->kb;
	const char *c = L->cuda->s, *lo = NULL, *hi = NULL;

	if (compat_cuda_min_driver(kb, c, 0) != NULL)
		return 1;
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
		return -1;
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
	const char *need = compat_cuda_min_driver(L->kb, c, L->windows_driver);
	const char *mvc = compat_cuda_compat_driver(L->kb, c, L->windows_driver);
	char hint[512];

	if (!floor->set || floor->s == NULL || need == NULL)
		return;
	if (version_cmp(floor->s, need) >= 0)
		return;
	if (mvc == NULL || version_cmp(floor->s, mvc) < 0) {
		if (mvc != NULL)
			snprintf(hint, sizeof(hint),
			         "raise driver.min_version to %s (CUDA %s's own minimum); %s is "
			         "the least any CUDA %ld needs (minor-version compatibility)",
			         need, c, mvc, version_component(c, 0));
		else
			snprintf(hint, sizeof(hint),
			         "raise driver.min_version to %s; CUDA %s has no minor-version "
			         "compatibility, its minimum is strict",
			         need, c);
		diags_add(L->d, DIAG_ERROR, L->file, floor->pos, "compat.driver-below-cuda-min",
		          hint, "driver floor %s is below the %s minimum %s of CUDA %s", floor->s,
		          col, need, c);
		return;
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
	if (version_cmp(v, b->cudnn_min) >= 0)
		return;
	snprintf(hint, sizeof(hint), "use cuDNN %s or a later %ld.x (%s)", b->cudnn_min,
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

static const struct compat_cc *cc_row(const struct compat *kb, const char *cc)
{
	int c = compat_cc_parse(cc);

	for (size_t i = 0; i < kb->nccs; i++)
		if (compat_cc_parse(kb->ccs[i].cc) == c)
			return &kb->ccs[i];
	return NULL;
}

static void kernel_list(struct strbuf *sb, const struct compat_tf_kernels *k)
{
	for (size_t i = 0; i < k->nsass; i++)
		strbuf_addf(sb, "%ssm_%d", i ? "," : "", compat_cc_parse(k->sass[i]));
	for (size_t i = 0; i < k->nptx; i++)
		strbuf_addf(sb, "%scompute_%d", sb->len ? "," : "", compat_cc_parse(k->ptx[i]));
	if (sb->len == 0)
		strbuf_addf(sb, "compute capability >= %s", k->min_cc);
}

static void lint_gpu(struct lint *L, const struct mstr *g)
{
	const struct compat_cc *row = cc_row(L->kb, g->s);
	const char *tf = L->tf ? L->tf->s : NULL, *cuda = L->cuda ? L->cuda->s : NULL;
	const struct compat_tf_kernels *k = NULL;
	enum compat_kernel kern = COMPAT_KERNEL_UNKNOWN;
	struct strbuf sb = STRBUF_INIT;
	char *hint = NULL;
	char s[32];

	if (row == NULL) {
		diags_add(L->d, DIAG_WARNING, L->file, g->pos, "compat.gpu-cc-unknown",
		          "compute capabilities are listed at developer.nvidia.com/cuda-gpus",
		          "compute capability %s is not a known NVIDIA GPU", g->s);
		return;
	}
	if (L->build != NULL) {
		kern = compat_tf_kernels_for(L->kb, tf, g->s, &k);
		series(tf, s);
	}
	if (kern == COMPAT_KERNEL_NONE) {
		kernel_list(&sb, k);
		hint = xasprintf("TF %s carries %s; a %s GPU (%s) needs an older TF or another GPU",
		                 s, sb.buf, row->arch, row->examples ? row->examples : "");
		diags_add(L->d, DIAG_ERROR, L->file, g->pos, "compat.gpu-no-kernels", hint,
		          "TensorFlow %s has no kernels for compute capability %s (%s): "
		          "\"device kernel image is invalid\"",
		          s, g->s, row->arch);
		goto out;
	}
	if (cuda != NULL && row->dropped_in != NULL &&
	    version_cmp_n(cuda, row->dropped_in, 2) >= 0) {
		hint = xasprintf("CUDA %s and later no longer target %s GPUs", row->dropped_in,
		                 row->arch);
		diags_add(L->d, DIAG_ERROR, L->file, g->pos, "compat.gpu-dropped-by-cuda", hint,
		          "CUDA %s cannot build or run kernels for compute capability %s (%s)",
		          cuda, g->s, row->arch);
		goto out;
	}
	if (cuda != NULL && row->first_cuda != NULL &&
	    version_cmp_n(cuda, row->first_cuda, 2) < 0) {
		hint = xasprintf("CUDA %s is the first to target compute capability %s; older "
		                 "toolkits reach it only through PTX JIT, if at all",
		                 row->first_cuda, g->s);
		diags_add(L->d, DIAG_WARNING, L->file, g->pos, "compat.gpu-newer-than-cuda", hint,
		          "CUDA %s predates compute capability %s (%s)", cuda, g->s, row->arch);
		goto out;
	}
	if (kern == COMPAT_KERNEL_PTX) {
		kernel_list(&sb, k);
		hint =
		    xasprintf("TF %s carries %s: the driver JIT-compiles PTX at first use, which "
		              "can take 30 minutes or longer",
		              s, sb.buf);
		diags_add(L->d, DIAG_WARNING, L->file, g->pos, "compat.gpu-ptx-jit", hint,
		          "TensorFlow %s has no native kernels for compute capability %s (%s)", s,
		          g->s, row->arch);
	}
out:
	free(hint);
	strbuf_release(&sb);
}

/* A pip specifier set like ">=1.23.5,<2"; "~=" and unknown operators pass. */
static int spec_allows(const char *spec, const char *v)
{
	char *copy = xstrdup(spec), *save = NULL;
	int ok = 1;

	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && ok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *p = tok, *rhs;
		int c;

		while (*p == ' ')
			p++;
		rhs = p + strspn(p, "<>=!~");
		while (*rhs == ' ')
			rhs++;
		c = version_cmp(v, rhs);
		if (strncmp(p, ">=", 2) == 0)
			ok = c >= 0;
		else if (strncmp(p, "<=", 2) == 0)
			ok = c <= 0;
		else if (strncmp(p, "==", 2) == 0)
			ok = c == 0;
		else if (strncmp(p, "!=", 2) == 0)
			ok = c != 0;
		else if (*p == '<')
			ok = c < 0;
		else if (*p == '>')
			ok = c > 0;
	}
	free(copy);
	return ok;
}

static void lint_pip_req(struct lint *L, const struct pip_req *r)
{
	const struct compat *kb = L->kb;
	const char *tf = L->tf ? L->tf->s : NULL;
	char s1[32], s2[32];

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
	for (size_t i = 0; i < kb->npip_requires; i++) {
		const struct compat_pip_requires *q = &kb->pip_requires[i];
		char *hint;

		if (strcmp(r->name, q->package) != 0 || version_cmp_n(tf, q->tf_series, 2) != 0 ||
		    spec_allows(q->spec, r->version))
			continue;
		hint = xasprintf("pin a %s version that satisfies %s%s", q->package, q->package,
		                 q->spec);
		diags_add(L->d, DIAG_ERROR, L->file, r->pos, "compat.pip-requirement-conflict",
		          hint, "%s %s conflicts with TensorFlow %s, which requires %s%s",
		          r->raw_name, r->version, q->tf_series, q->package, q->spec);
		free(hint);
	}
	if (strcmp(r->name, "tensorflow") == 0 && L->tf != &L->tf_from_pip &&
	    version_cmp_n(r->version, tf, 2) != 0)
		diags_add(L->d, DIAG_ERROR, L->file, r->pos, "compat.pip-tf-mismatch",
		          "the pip pin and versions.tensorflow must name the same release",
		          "pip pins tensorflow %s but the stack declares TensorFlow %s",
		          series(r->version, s1), series(tf, s2));
}

/* conda judgement of one (name, version) on a channel; fuzzy: "=1.2" means 1.2.* */
static void conda_check(struct lint *L, const char *channel, const char *name, const char *version,
                        int fuzzy, struct pos pos)
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

int compat_lint(const struct compat *kb, const struct manifest *m, struct diags *d)
{
	struct lint L = {0};
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
	if (L.cuda != NULL)
		lint_driver(&L);
	for (size_t i = 0; i < m->driver.ngpus; i++)
		if (m->driver.gpus[i].s != NULL)
			lint_gpu(&L, &m->driver.gpus[i]);
	for (size_t i = 0; i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name != NULL)
			lint_pip_req(&L, &m->pip.reqs[i]);
	lint_conda(&L);
	return (int)(d->errors - errors);
}
