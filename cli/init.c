/*
 * init.c - `tfprov init --tensorflow X.Y [--python 3.N] [--cuda-from redist|pip]
 * [--gpu auto|CC|NAME] [--platform P] [-o FILE [--force]]`: a new manifest in
 * one command.
 *
 * The versions come from the knowledge base (data/compat.yaml): TF's tested
 * CUDA and cuDNN, a Python of its range, the toolkit's driver floor. The pins
 * come from the catalog (engine/kb/kb.h: the public reference data in
 * manifests/data): NVIDIA's redist JSONs, runfiles and cuDNN tarballs, conda
 * explicit locks, complete pip closures. Nothing is computed or guessed:
 *
 *  - every pin the catalog holds is written inline, as `tfprov lock` would
 *    write it; when it holds them all the result is a complete lock that
 *    validates offline and passes `lock --check`;
 *  - what it lacks is written in the form `tfprov lock` completes online (a
 *    redist JSON URL without sha256, pinned on first use; pip pins without
 *    hashes, resolved and hashed by pip's resolver), or, where no public fact
 *    names the file (a cuDNN release of a series), left out and named under
 *    `missing:`, with a comment saying what to add.
 *
 * Refused before anything is written: a TF or Python the knowledge base says
 * cannot work together (exit 3, with the fact and its source); input it does
 * not know (exit 64). The result is parsed and linted before it is written,
 * and -o never replaces a file without --force.
 */
#include "kb.h"
#include "cli.h"
#include "datadir.h"
#include "error.h"
#include "event.h"
#include "gpu.h"
#include "manifest.h"
#include "python.h"
#include "artifact.h"
#include "util.h"
#include "version.h"
#include "yamltree.h"

#include <ctype.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NVIDIA_CUDA_REDIST  "https://developer.download.nvidia.com/compute/cuda/redist/"
#define NVIDIA_CUDNN_REDIST "https://developer.download.nvidia.com/compute/cudnn/redist/"

/* What init decided, and the text it writes. */
struct init {
	struct ctx *c;
	const struct opts *o;
	struct compat *kb;
	struct ynode *kbtree; /* compat.yaml as a tree: sources and pip.and_cuda rows */
	char *kbtext;
	const char *cat; /* catalog directory */
	const struct compat_tf_build *build;
	const char *platform;
	int windows, pip_cuda;
	char tf[32], series[16], python[16], cuda[32], cudnn[32], name[65];
	struct strvec gpus;    /* compute capabilities for driver.gpus */
	struct strvec missing; /* `missing:` entries */
	struct strvec notes;   /* header comment lines */
	struct strbuf cuda_sec, cudnn_sec, python_sec, pip_sec;
	const char *conda_text; /* the conda lock used, for what it supplies */
	char *conda_buf;
	int complete; /* every pin from the catalog */
};

/* "TF-SRC" -> "TF-SRC (<text of sources.TF-SRC>)", else the string itself. Caller frees. */
static char *source_text(const struct init *in, const char *src)
{
	const struct ynode *srcs = ymap_get(in->kbtree, "sources");
	size_t k = strcspn(src, " ;,(");
	for (size_t i = 0; srcs && srcs->type == Y_MAP && i < srcs->n; i++) {
		const struct ynode *key = srcs->keys[i], *val = srcs->items[i];
		if (key->type == Y_SCALAR && val->type == Y_SCALAR && strlen(key->str) == k &&
		    strncmp(key->str, src, k) == 0)
			return xasprintf("%.*s (%s)%s", (int)k, src, val->str, src + k);
	}
	return xstrdup(src);
}

/* The Python ranges of the build as text: "3.9-3.11". Caller frees. */
static char *python_ranges(const struct compat_tf_build *b)
{
	struct strbuf sb = STRBUF_INIT;
	for (size_t i = 0; i < b->npython; i++) {
		if (i)
			strbuf_adds(&sb, ", ");
		if (version_cmp(b->python[i].lo, b->python[i].hi) == 0)
			strbuf_adds(&sb, b->python[i].lo);
		else
			strbuf_addf(&sb, "%s-%s", b->python[i].lo, b->python[i].hi);
	}
	return strbuf_detach(&sb);
}

static int python_in_range(const struct compat_tf_build *b, const char *py)
{
	for (size_t i = 0; i < b->npython; i++)
		if (version_cmp_n(py, b->python[i].lo, 2) >= 0 &&
		    version_cmp_n(py, b->python[i].hi, 2) <= 0)
			return 1;
	return 0;
}

/* "major.minor" of v into out. */
static void series_of(const char *v, char *out, size_t n)
{
	snprintf(out, n, "%ld.%ld", version_component(v, 0), version_component(v, 1));
}

/* ---- GPUs ------------------------------------------------------------------ */

/* Words of a GPU name, lowercase, vendor words dropped ("NVIDIA GeForce RTX 4090"). */
static size_t gpu_words(const char *s, char w[8][24])
{
	size_t n = 0;
	while (*s && n < 8) {
		while (*s && !isalnum((unsigned char)*s))
			s++;
		size_t k = 0;
		char buf[24];
		while (isalnum((unsigned char)*s)) {
			if (k + 1 < sizeof(buf))
				buf[k++] = (char)tolower((unsigned char)*s);
			s++;
		}
		buf[k] = '\0';
		if (k && strcmp(buf, "nvidia") != 0 && strcmp(buf, "geforce") != 0 &&
		    strcmp(buf, "tesla") != 0)
			snprintf(w[n++], sizeof(w[0]), "%s", buf);
	}
	return n;
}

/* A word of an example ("40xx": xx are digits) against a word of the name; a
 * wildcard word may carry a letter suffix ("4070ti"). */
static int word_match(const char *pat, const char *w, int last)
{
	size_t i = 0;
	for (; pat[i]; i++) {
		if (pat[i] == 'x' && pat[i + 1] == 'x' && isdigit((unsigned char)w[i]) &&
		    isdigit((unsigned char)w[i + 1])) {
			i++;
			continue;
		}
		if (pat[i] != w[i])
			return 0;
	}
	if (w[i] == '\0')
		return 1;
	return last && strstr(pat, "xx") != NULL &&
	       strspn(w + i, "abcdefghijklmnopqrstuvwxyz") == strlen(w + i);
}

/*
 * The compute capability of a GPU name, from the examples of the knowledge
 * base's compute capability rows; the longest matching example wins.
 */
static const struct compat_cc *gpu_by_name(const struct compat *kb, const char *name)
{
	char w[8][24], e[8][24];
	size_t nw = gpu_words(name, w), best_len = 0;
	const struct compat_cc *best = NULL;
	for (size_t i = 0; i < kb->nccs && nw; i++) {
		char *ex = xstrdup(kb->ccs[i].examples ? kb->ccs[i].examples : "");
		for (char *p = ex; *p; p++)
			if (*p == '(' || *p == ')')
				*p = ',';
		for (char *save = NULL, *tok = strtok_r(ex, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			size_t ne = gpu_words(tok, e), k = 0;
			if (ne == 0 || ne > nw)
				continue;
			while (k < ne && word_match(e[k], w[k], k + 1 == ne))
				k++;
			if (k == ne && ne > best_len) {
				best = &kb->ccs[i];
				best_len = ne;
			}
		}
		free(ex);
	}
	return best;
}

static void add_gpu(struct init *in, const char *cc)
{
	for (size_t i = 0; i < in->gpus.n; i++)
		if (strcmp(in->gpus.v[i], cc) == 0)
			return;
	strvec_push(&in->gpus, cc);
}

/*
 * A GPU by the rule validate, plan and doctor apply (compat_judge_gpu), for
 * the TF and CUDA this manifest gets. Explicit (--gpu CC|NAME): a GPU TF has
 * no kernels for is refused (exit 3); auto: every finding is a warning, since
 * the machine that runs init need not be the one that applies.
 */
static int judge_gpu(struct init *in, const char *label, const char *cc, int refuse)
{
	struct compat_verdict v;
	int rc = 0;
	if (compat_judge_gpu(in->kb, in->tf, in->cuda[0] ? in->cuda : NULL, cc, &v) != 0)
		return 0;
	char *src = v.source ? source_text(in, v.source) : NULL;
	if (v.code != NULL && v.sev == DIAG_ERROR && refuse) {
		ev_log(in->c, EV_ERROR,
		       "%s (compute capability %s): %s; %s [%s] (source: %s); nothing was written",
		       label, cc, v.msg, v.hint, v.code, src ? src : "data/compat.yaml gpus");
		rc = TF_EMANIFEST;
	} else if (v.code != NULL) {
		ev_log(in->c, EV_WARN, "%s (compute capability %s): %s; %s [%s] (source: %s)",
		       label, cc, v.msg, v.hint, v.code, src ? src : "data/compat.yaml gpus");
	}
	free(src);
	/* A GPU the stack cannot serve is not one it is for (validate would refuse it). */
	if (v.code == NULL || v.sev != DIAG_ERROR)
		add_gpu(in, cc);
	compat_verdict_release(&v);
	return rc;
}

/* --gpu CC|NAME: exit 64 for what the knowledge base does not know. */
static int gpu_explicit(struct init *in, const char *arg)
{
	char cc[16];
	const struct compat_cc *row = NULL;
	if (compat_cc_parse(arg) >= 0) {
		for (size_t i = 0; i < in->kb->nccs && row == NULL; i++)
			if (compat_cc_parse(in->kb->ccs[i].cc) == compat_cc_parse(arg))
				row = &in->kb->ccs[i];
		if (row == NULL) {
			ev_log(in->c, EV_ERROR,
			       "--gpu %s: no GPU has compute capability %s in the knowledge base "
			       "(data/compat.yaml gpus.compute_capabilities)",
			       arg, arg);
			return TF_EUSAGE;
		}
	} else {
		row = gpu_by_name(in->kb, arg);
		if (row == NULL) {
			ev_log(
			    in->c, EV_ERROR,
			    "--gpu %s: unknown GPU name; give its compute capability (e.g. --gpu "
			    "8.9) or a name the knowledge base lists (A100, H100, L4, RTX 4090, "
			    "T4, V100, ...: data/compat.yaml gpus.compute_capabilities)",
			    arg);
			return TF_EUSAGE;
		}
	}
	snprintf(cc, sizeof(cc), "%s", row->cc);
	char *label = compat_cc_parse(arg) >= 0
	                  ? xasprintf("%s GPUs (%s)", row->arch ? row->arch : "these",
	                              row->examples ? row->examples : "")
	                  : xasprintf("%s (%s)", arg, row->arch ? row->arch : "");
	int rc = judge_gpu(in, label, cc, 1);
	free(label);
	return rc;
}

/* --gpu auto: this machine's driver and GPUs through NVML (or procfs), warnings only. */
static void gpu_auto(struct init *in, const char *cuda_for_driver)
{
	struct gpu_probe p;
	gpu_probe_run(&p);
	if (!p.found) {
		ev_log(in->c, EV_WARN,
		       "--gpu auto: no NVIDIA driver answered here (%s); the manifest is written "
		       "without driver.gpus, and apply checks the driver where it runs",
		       p.error[0] ? p.error : "no driver");
		return;
	}
	/* A series ("12.5", what the wheels carry): its newest release's floor. */
	const char *rel = cuda_for_driver && version_component(cuda_for_driver, 2) < 0
	                      ? compat_cuda_release(in->kb, cuda_for_driver)
	                      : cuda_for_driver;
	const char *min = NULL, *compat = NULL;
	enum compat_driver_fit fit = compat_judge_driver(
	    in->kb, rel ? rel : cuda_for_driver, p.driver_version, in->windows, &min, &compat);
	if (fit == COMPAT_DRIVER_MINOR_COMPAT)
		ev_log(in->c, EV_WARN,
		       "driver %s is below CUDA %s's minimum %s; it runs it only through "
		       "minor-version compatibility (>= %s, a limited feature set)",
		       p.driver_version, cuda_for_driver, min, compat);
	else if (fit == COMPAT_DRIVER_TOO_OLD)
		ev_log(in->c, EV_WARN,
		       "driver %s cannot run CUDA %s: it needs %s or newer (data/compat.yaml "
		       "cuda.min_driver); apply will stop at the driver step (exit 6)",
		       p.driver_version, cuda_for_driver, min);
	else
		ev_log(in->c, EV_INFO, "driver %s (%s)%s%s", p.driver_version, p.source,
		       min ? ": at or above CUDA's minimum " : "", min ? min : "");
	for (int i = 0; i < p.ngpus; i++) {
		char cc[16];
		if (p.gpus[i].cc_major < 0) {
			ev_log(in->c, EV_WARN, "GPU %s: compute capability unknown (%s)",
			       p.gpus[i].name, p.source);
			continue;
		}
		snprintf(cc, sizeof(cc), "%d.%d", p.gpus[i].cc_major, p.gpus[i].cc_minor);
		ev_log(in->c, EV_INFO, "GPU %d: %s, compute capability %s", i, p.gpus[i].name, cc);
		judge_gpu(in, p.gpus[i].name, cc, 0);
	}
}

/* ---- CUDA and cuDNN --------------------------------------------------------- */

/*
 * The CUDA components to take from a redist JSON: those a shipped stack of
 * the same CUDA major names (the .yaml files of manifests/, reviewed, each with its
 * reason), less any the JSON lacks. *from names that stack.
 */
static int shipped_components(int major, struct strvec *out, char **from)
{
	char *dir = path_join(datadir(), "manifests");
	DIR *dh = opendir(dir);
	struct dirent *e;
	*from = NULL;
	while (dh && (e = readdir(dh)) != NULL && *from == NULL) {
		if (!str_ends_with(e->d_name, ".yaml"))
			continue;
		char *path = path_join(dir, e->d_name);
		struct manifest *m = NULL;
		struct diags d = {0};
		if (manifest_load(path, &m, &d) == 0 && m->cuda.artifacts.n > 0 &&
		    m->cuda.version.s && version_component(m->cuda.version.s, 0) == major) {
			for (size_t i = 0; i < m->cuda.artifacts.n; i++)
				if (m->cuda.artifacts.v[i].name.s)
					strvec_push(out, m->cuda.artifacts.v[i].name.s);
			*from = xasprintf("manifests/%s", e->d_name);
		}
		manifest_free(m);
		diags_release(&d);
		free(path);
	}
	if (dh)
		closedir(dh);
	free(dir);
	return *from ? 0 : 1;
}

static void add_artifact(struct strbuf *sb, int ind, const struct redist_artifact *a)
{
	strbuf_addf(sb, "%*surl: %s\n", ind, "", a->url);
	strbuf_addf(sb, "%*ssha256: %s\n", ind, "", a->sha256);
	if (a->size > 0)
		strbuf_addf(sb, "%*ssize: %lld\n", ind, "", (long long)a->size);
	strbuf_addf(sb, "%*sstrip: %d\n", ind, "", a->strip);
}

static int plan_cuda(struct init *in)
{
	const char *series = in->build->cuda;
	char *label = NULL, *path = NULL, *from = NULL;
	struct why err = {0};
	struct strvec comps = STRVEC_INIT;
	struct redist_artifact *ra = NULL;
	size_t nra = 0;
	struct catalog_legacy lg = {0};
	struct strbuf *sb = &in->cuda_sec;
	int major = (int)version_component(series, 0), rc = 0;
	const char *plat = in->windows ? "windows-x86_64" : "linux-x86_64";

	int have_comps = shipped_components(major, &comps, &from) == 0;
	if (have_comps && catalog_cuda_redist(in->cat, series, &label, &path) == 0) {
		/* Only the components this JSON has (libnvjitlink starts with CUDA 12). */
		const char **names = xcalloc(comps.n + 1, sizeof(*names));
		size_t nn = 0;
		for (size_t i = 0; i < comps.n; i++) {
			struct redist_artifact *one = NULL;
			size_t n1 = 0;
			const char *c1[] = {comps.v[i]};
			if (redist_resolve(path, NVIDIA_CUDA_REDIST "x.json", plat, NULL, c1, 1,
			                   &one, &n1, &err) == 0)
				names[nn++] = comps.v[i];
			redist_artifacts_free(one, n1);
			why_clear(&err);
		}
		char *json_url = xasprintf(NVIDIA_CUDA_REDIST "redistrib_%s.json", label);
		rc = redist_resolve(path, json_url, plat, NULL, names, nn, &ra, &nra, &err);
		free(json_url);
		free(names);
		if (rc != 0) {
			ev_log(in->c, EV_ERROR, "%s: %s", path, why_text(&err));
			goto out;
		}
		snprintf(in->cuda, sizeof(in->cuda), "%s", label);
		strbuf_addf(sb, "cuda:\n  version: %s\n", label);
		strbuf_addf(sb,
		            "  # From NVIDIA's redistrib_%s.json (catalog: nvidia-redist/"
		            "cuda-redistrib_%s.json);\n  # components as %s names them.\n",
		            label, label, from);
		strbuf_adds(sb, "  artifacts:\n");
		for (size_t i = 0; i < nra; i++) {
			strbuf_addf(sb, "    - name: %s", ra[i].component);
			if (ra[i].version)
				strbuf_addf(sb, "   # %s", ra[i].version);
			strbuf_adds(sb, "\n");
			add_artifact(sb, 6, &ra[i]);
		}
		strvec_pushf(&in->notes, "CUDA %s: NVIDIA's redist archives, from the catalog",
		             label);
	} else if (have_comps && version_cmp_n(series, "11.4", 2) >= 0 &&
	           compat_cuda_release(in->kb, series)) {
		/* The redist era, but the catalog has no JSON: lock pins it on first use. */
		const char *rel = compat_cuda_release(in->kb, series);
		snprintf(in->cuda, sizeof(in->cuda), "%s", rel);
		in->complete = 0;
		strbuf_addf(sb, "cuda:\n  version: %s\n", rel);
		strbuf_adds(
		    sb, "  # Not in tfprov's catalog: `tfprov lock` fetches this JSON over TLS,\n"
		        "  # pins its sha256 on first use and writes the archives inline.\n");
		strbuf_addf(sb, "  redist:\n    url: " NVIDIA_CUDA_REDIST "redistrib_%s.json\n",
		            rel);
		strbuf_adds(sb, "    components: [");
		for (size_t i = 0; i < comps.n; i++)
			strbuf_addf(sb, "%s%s", i ? ", " : "", comps.v[i]);
		strbuf_adds(sb, "]\n");
		strvec_pushf(&in->notes,
		             "CUDA %s: NVIDIA's redist JSON, pinned by `tfprov lock` on first use",
		             rel);
	} else if (catalog_legacy(in->cat, "cuda", series, NULL, &lg) == 0) {
		snprintf(in->cuda, sizeof(in->cuda), "%s", lg.version);
		strbuf_addf(sb, "cuda:\n  version: %s\n", lg.version);
		strbuf_addf(sb,
		            "  # A runfile toolkit (before NVIDIA's redist manifests); catalog: "
		            "legacy-artifacts.tsv\n");
		strbuf_addf(sb, "  runfile:\n    url: %s\n    sha256: %s\n", lg.url, lg.sha256);
		strvec_pushf(&in->notes, "CUDA %s: NVIDIA's runfile, from the catalog (no size)",
		             lg.version);
	} else {
		snprintf(in->cuda, sizeof(in->cuda), "%s", series);
		in->complete = 0;
		strvec_pushf(
		    &in->missing,
		    "cuda: CUDA %s (TensorFlow %s's tested build) is not in tfprov's catalog "
		    "(no redist JSON or runfile, or no shipped stack of CUDA %d naming its "
		    "components): add cuda.runfile, or cuda.redist with components",
		    series, in->series, major);
	}
out:
	catalog_legacy_release(&lg);
	redist_artifacts_free(ra, nra);
	strvec_release(&comps);
	free(label);
	free(path);
	free(from);
	why_clear(&err);
	return rc;
}

static void plan_cudnn(struct init *in)
{
	const char *series = in->build->cudnn;
	int major = (int)version_component(in->cuda, 0);
	char *path = NULL, *variant = NULL;
	struct redist_artifact *a = NULL;
	struct catalog_legacy lg = {0};
	struct strbuf *sb = &in->cudnn_sec;

	if (in->cuda_sec.len == 0) {
		snprintf(in->cudnn, sizeof(in->cudnn), "%s", series);
		return; /* no CUDA section: cuDNN has nowhere to go */
	}
	if (catalog_cudnn_redist(in->cat, series, in->build->cudnn_min, major,
	                         in->windows ? "windows-x86_64" : "linux-x86_64", &path, &variant,
	                         &a) == 0) {
		const char *base = strrchr(path, '/');
		char *url = xasprintf(NVIDIA_CUDNN_REDIST "%s", a->relative_path);
		snprintf(in->cudnn, sizeof(in->cudnn), "%s", a->version ? a->version : series);
		strbuf_addf(sb, "cudnn:\n  version: %s\n  placement: merge\n", in->cudnn);
		strbuf_addf(sb, "  # From NVIDIA's %s (catalog: nvidia-redist/%s)%s%s\n",
		            base ? base + 1 + strlen("cudnn-") : path, base ? base + 1 : path,
		            variant ? ", variant " : "", variant ? variant : "");
		strbuf_adds(sb, "  artifact:\n");
		free(a->url);
		a->url = url;
		add_artifact(sb, 4, a);
		strvec_pushf(&in->notes, "cuDNN %s for CUDA %d: from the catalog", in->cudnn,
		             major);
	} else if (catalog_legacy(in->cat, "cudnn", series, in->cuda, &lg) == 0) {
		char *dash = strchr(lg.version, '-');
		snprintf(in->cudnn, sizeof(in->cudnn), "%.*s",
		         (int)(dash ? (size_t)(dash - lg.version) : strlen(lg.version)),
		         lg.version);
		strbuf_addf(sb, "cudnn:\n  version: %s\n  placement: merge\n", in->cudnn);
		strbuf_addf(sb,
		            "  # A cuDNN tarball (top directory cuda/, hence strip: 1); catalog: "
		            "legacy-artifacts.tsv\n");
		strbuf_addf(sb, "  artifact:\n    url: %s\n    sha256: %s\n    strip: 1\n", lg.url,
		            lg.sha256);
		strvec_pushf(&in->notes, "cuDNN %s: a tarball from the catalog (no size)",
		             in->cudnn);
	} else {
		snprintf(in->cudnn, sizeof(in->cudnn), "%s", series);
		in->complete = 0;
		strvec_pushf(
		    &in->missing,
		    "cudnn: no cuDNN %s for CUDA %d in tfprov's catalog (TensorFlow %s's "
		    "tested build): add cudnn.redist with NVIDIA's redistrib_<version>.json "
		    "URL (" NVIDIA_CUDNN_REDIST "), then run tfprov lock",
		    series, major, in->series);
	}
	catalog_legacy_release(&lg);
	redist_artifacts_free(a, a ? 1 : 0);
	free(path);
	free(variant);
}

/* ---- Python and pip ----------------------------------------------------------- */

/* Whether the conda lock holds a package (a line ".../<name>-<ver>-..."). */
static int conda_has(const char *text, const char *name)
{
	char *pat = xasprintf("/%s-", name);
	int has = 0;
	for (const char *p = strstr(text, pat); p && !has; p = strstr(p + 1, pat))
		has = isdigit((unsigned char)p[strlen(pat)]);
	free(pat);
	return has;
}

static void plan_python(struct init *in)
{
	char *path = NULL;
	size_t len = 0;
	struct strbuf *sb = &in->python_sec;
	if (catalog_conda_lock(in->cat, in->python, &path) == 0 &&
	    read_file_at(AT_FDCWD, path, 4u << 20, &in->conda_buf, &len) == 0) {
		in->conda_text = in->conda_buf;
		strbuf_addf(sb, "python:\n  manager: conda\n  version: \"%s\"\n", in->python);
		strbuf_addf(sb,
		            "  # conda-forge explicit lock, installed by tfprov itself (no conda "
		            "needed);\n  # catalog: conda/python-%s-linux-64.explicit.txt\n",
		            in->python);
		strbuf_adds(sb, "  lock: |\n");
		for (const char *l = in->conda_buf; *l;) {
			size_t n = strcspn(l, "\n");
			if (n)
				strbuf_addf(sb, "    %.*s\n", (int)n, l);
			l += n + (l[n] == '\n');
		}
		strvec_pushf(&in->notes, "Python %s: a conda explicit lock from the catalog",
		             in->python);
	} else {
		char *py = NULL;
		struct why err = {0};
		strbuf_addf(sb, "python:\n  manager: venv\n  version: \"%s\"\n", in->python);
		/* The interpreter plan would choose (every user's), written down so the
		 * stack does not change with root's PATH. */
		if (pyenv_find_python(in->c, in->python, NULL, 1, &py, &err) == 0) {
			strbuf_addf(sb,
			            "  # chosen by tfprov init: a python%s every user can run "
			            "(the system's first)\n  interpreter: %s\n",
			            in->python, py);
			strvec_pushf(&in->notes, "Python %s: the venv is made of %s", in->python,
			             py);
		} else {
			strvec_pushf(&in->notes, "Python %s: no interpreter found here: %s",
			             in->python, err.msg ? err.msg : "not found");
		}
		free(py);
		why_clear(&err);
		strbuf_addf(sb,
		            "  # The host's python%s (apt install python%s-venv, or build it);\n"
		            "  # tfprov's catalog has no conda lock for Python %s.\n",
		            in->python, in->python, in->python);
		strvec_pushf(
		    &in->missing,
		    "python: no conda lock for Python %s in tfprov's catalog: the venv uses "
		    "the host's python%s, not pinned by hash",
		    in->python, in->python);
	}
	free(path);
}

struct versions {
	const struct catalog_closure *cl;
	const char *conda;
};

static const char *closure_version(const char *name, void *arg)
{
	const struct versions *v = arg;
	for (size_t i = 0; i < v->cl->n; i++)
		if (strcmp(v->cl->v[i].name, name) == 0)
			return v->cl->v[i].version;
	return NULL;
}

/* Supplied by the conda lock, so left out of the pip lock (as the shipped stacks do). */
static int from_conda(const struct init *in, const char *name)
{
	return in->conda_text &&
	       (strcmp(name, "setuptools") == 0 || strcmp(name, "wheel") == 0 ||
	        strcmp(name, "pip") == 0) &&
	       conda_has(in->conda_text, name);
}

/* 1 when the closure breaks a cap of the knowledge base (a package the conda lock
 * supplies aside), the first such cap said; else 0. */
static int closure_breaks_cap(struct init *in, struct catalog_closure *cl)
{
	struct pip_cap *caps = NULL;
	size_t ncaps = 0;
	struct diags d = {0};
	struct versions v = {cl, in->conda_text};
	const struct pip_cap *bad = NULL;
	if (pip_caps_load(compat_default_path(), &caps, &ncaps, &d) == 0)
		for (const struct pip_cap *p =
		         pip_caps_broken(caps, ncaps, closure_version, &v, NULL);
		     p && bad == NULL; p = pip_caps_broken(caps, ncaps, closure_version, &v, p))
			if (!from_conda(in, p->package))
				bad = p;
	if (bad)
		ev_log(in->c, EV_WARN,
		       "the catalog's closure %s breaks a cap of the knowledge base (%s; "
		       "source: %s): written as pins for `tfprov lock` instead",
		       cl->path, bad->fact, bad->source);
	diags_release(&d);
	pip_caps_free(caps, ncaps);
	return bad != NULL;
}

/* [and-cuda]: a closure whose CUDA or cuDNN wheels are not TF's tested ones, said; the
 * note for `missing` (malloc'd), or NULL when they are. */
static char *closure_untested(struct init *in, struct catalog_closure *cl)
{
	struct versions cv = {cl, NULL};
	const char *rt = closure_version("nvidia-cuda-runtime-cu12", &cv);
	const char *dnn = closure_version("nvidia-cudnn-cu12", &cv);
	if (!((rt && version_cmp_n(rt, in->build->cuda, 2) != 0) ||
	      (dnn && version_cmp_n(dnn, in->build->cudnn, 2) != 0)))
		return NULL;
	ev_log(in->c, EV_WARN,
	       "the catalog's closure %s carries CUDA %s and cuDNN %s, not TensorFlow "
	       "%s's tested CUDA %s and cuDNN %s: written as pins of the tested "
	       "wheels for `tfprov lock` instead",
	       cl->path, rt ? rt : "?", dnn ? dnn : "?", in->series, in->build->cuda,
	       in->build->cudnn);
	return xasprintf("pip: the catalog's closure of tensorflow[and-cuda] %s "
	                 "carries CUDA %s wheels, not the tested CUDA %s ones: "
	                 "run tfprov lock",
	                 cl->tf_version, rt ? rt : "?", in->build->cuda);
}

/* The pip section from the catalog's closure: complete, every hash. */
static void pip_write_closure(struct init *in, struct catalog_closure *cl, const char *pkg)
{
	struct strbuf *sb = &in->pip_sec;
	const char *base = cl->path ? strrchr(cl->path, '/') : NULL;
	size_t n = 0;
	snprintf(in->tf, sizeof(in->tf), "%s", cl->tf_version);
	/* [and-cuda]: the CUDA and cuDNN the wheels carry are the stack's. */
	struct versions cv = {cl, NULL};
	const char *rt = closure_version("nvidia-cuda-runtime-cu12", &cv);
	const char *dnn = closure_version("nvidia-cudnn-cu12", &cv);
	if (in->pip_cuda && rt)
		series_of(rt, in->cuda, sizeof(in->cuda));
	if (in->pip_cuda && dnn)
		snprintf(in->cudnn, sizeof(in->cudnn), "%s", dnn);
	strbuf_addf(sb,
	            "  # The complete closure of %s%s %s for CPython %s on linux x86_64,\n"
	            "  # every hash of each package's files (pip picks one); catalog: %s%s.\n",
	            pkg, in->pip_cuda ? "[and-cuda]" : "", cl->tf_version, in->python,
	            base ? base + 1 : cl->path,
	            in->conda_text ? "\n  # setuptools, wheel and pip come from the conda lock"
	                           : "");
	int glibc = 0;
	for (size_t i = 0; i < cl->n; i++)
		if (!from_conda(in, cl->v[i].name) && cl->v[i].glibc > glibc)
			glibc = cl->v[i].glibc;
	strbuf_adds(sb, "  complete: true\n");
	if (glibc > 0)
		strbuf_addf(sb,
		            "  # The highest manylinux floor of the set (each package's lowest "
		            "among its\n  # files); checked against the host at plan time.\n"
		            "  min_glibc: \"%d.%d\"\n",
		            glibc / 1000, glibc % 1000);
	strbuf_adds(sb, "  requirements: |\n");
	for (size_t i = 0; i < cl->n; i++) {
		if (from_conda(in, cl->v[i].name))
			continue;
		strbuf_addf(sb, "    %s==%s", cl->v[i].name, cl->v[i].version);
		for (size_t h = 0; h < cl->v[i].nsha256; h++)
			strbuf_addf(sb, " \\\n        --hash=sha256:%s", cl->v[i].sha256[h]);
		strbuf_adds(sb, "\n");
		n++;
	}
	strvec_pushf(&in->notes, "pip: the complete closure from the catalog (%zu pins)", n);
}

/* The pip section as pins for `tfprov lock` to complete: TF, and with [and-cuda] the
 * nvidia wheels of its tested CUDA and cuDNN. */
static void pip_write_pins(struct init *in, const char *pkg, const struct compat_and_cuda *tested,
                           const char *untested)
{
	struct strbuf *sb = &in->pip_sec;
	in->complete = 0;
	strbuf_adds(sb, "  # Not in tfprov's catalog: `tfprov lock` resolves these pins with "
	                "pip's own\n  # resolver, for this Python, and writes the whole "
	                "closure with every hash.\n");
	if (tested)
		strbuf_addf(sb,
		            "  # The nvidia-*-cu12 wheels of TensorFlow %s's tested CUDA %s and "
		            "cuDNN %s:\n  # the [and-cuda] extra of tensorflow %s "
		            "(data/compat.yaml pip.and_cuda).\n",
		            in->series, in->build->cuda, in->build->cudnn, tested->tensorflow);
	strbuf_adds(sb, "  complete: false\n  requirements: |\n");
	strbuf_addf(sb, "    %s%s==%s\n", pkg, in->pip_cuda ? "[and-cuda]" : "", in->tf);
	for (size_t i = 0; tested && i < tested->npins; i++) {
		char v[64];
		const char *ver = compat_and_cuda_tested_version(&tested->pins[i], v, sizeof(v));
		if (ver == NULL || compat_cuda_wheel_major(in->kb, tested->pins[i].name) == 0)
			continue;
		strbuf_addf(sb, "    %s==%s\n", tested->pins[i].name, ver);
		if (compat_cuda_wheel_is_runtime(in->kb, tested->pins[i].name))
			series_of(ver, in->cuda, sizeof(in->cuda));
		else if (strcmp(tested->pins[i].name, "nvidia-cudnn-cu12") == 0)
			snprintf(in->cudnn, sizeof(in->cudnn), "%s", ver);
	}
	if (untested)
		strvec_push(&in->missing, untested);
	else
		strvec_pushf(&in->missing,
		             "pip: the closure of %s %s for Python %s is not in tfprov's "
		             "catalog: run tfprov lock",
		             pkg, in->tf, in->python);
}

static int plan_pip(struct init *in)
{
	struct catalog_closure cl = {0};
	const char *pkg = version_component(in->tf, 0) == 1 ? "tensorflow-gpu" : "tensorflow";
	int rc = catalog_closure(in->cat, in->tf, in->python, in->pip_cuda, &cl);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	/* A cap of the knowledge base broken by the closure: not complete then. */
	if (rc == 0 && closure_breaks_cap(in, &cl))
		rc = -ENOENT; /* as if the catalog had no closure */
	/* [and-cuda]: TF's tested CUDA and cuDNN, not the newest wheels a resolve took. */
	const struct compat_and_cuda *tested =
	    in->pip_cuda ? compat_and_cuda_tested(in->kb, in->tf) : NULL;
	char *untested = NULL;
	if (rc == 0 && in->pip_cuda) {
		untested = closure_untested(in, &cl);
		if (untested)
			rc = -ENOENT;
	}
	strbuf_adds(&in->pip_sec, "pip:\n  index_url: https://pypi.org/simple\n");
	if (rc == 0)
		pip_write_closure(in, &cl, pkg);
	else
		pip_write_pins(in, pkg, tested, untested);
	catalog_closure_release(&cl);
	free(untested);
	return 0;
}

/* ---- choices ------------------------------------------------------------------ */

/* The oldest TF with a tensorflow[and-cuda] row in the knowledge base (pip.and_cuda). */
static const struct ynode *and_cuda_first(const struct init *in)
{
	const struct ynode *rows = ymap_get(ymap_get(in->kbtree, "pip"), "and_cuda");
	const struct ynode *best = NULL;
	for (size_t i = 0; rows && rows->type == Y_SEQ && i < rows->n; i++) {
		const struct ynode *tf = ymap_get(rows->items[i], "tensorflow");
		if (tf && tf->type == Y_SCALAR && version_valid(tf->str) &&
		    (best == NULL || version_cmp(tf->str, ymap_get(best, "tensorflow")->str) < 0))
			best = rows->items[i];
	}
	return best;
}

/* Python: the given one (in range, else exit 3), or the newest in range the catalog serves best. */
static int choose_python(struct init *in)
{
	const struct compat_tf_build *b = in->build;
	if (in->o->python) {
		if (python_in_range(b, in->o->python)) {
			snprintf(in->python, sizeof(in->python), "%s", in->o->python);
			return 0;
		}
		char *r = python_ranges(b), *src = source_text(in, b->source);
		ev_log(in->c, EV_ERROR,
		       "TensorFlow %s supports Python %s, not %s (source: %s); nothing was written",
		       in->series, r, in->o->python, src);
		free(r);
		free(src);
		return TF_EMANIFEST;
	}
	int best_score = -1;
	for (size_t i = 0; i < b->npython; i++) {
		long maj = version_component(b->python[i].lo, 0);
		for (long mi = version_component(b->python[i].lo, 1);
		     mi <= version_component(b->python[i].hi, 1) && maj == 3; mi++) {
			char py[16], *p = NULL;
			struct catalog_closure cl = {0};
			snprintf(py, sizeof(py), "%ld.%ld", maj, mi);
			int score =
			    (catalog_closure(in->cat, in->tf, py, in->pip_cuda, &cl) == 0) * 2 +
			    (catalog_conda_lock(in->cat, py, &p) == 0);
			catalog_closure_release(&cl);
			free(p);
			if (score >= best_score) {
				best_score = score;
				snprintf(in->python, sizeof(in->python), "%s", py);
			}
		}
	}
	return in->python[0] ? 0 : TF_EMANIFEST;
}

static int check_args(struct init *in)
{
	const struct opts *o = in->o;
	if (o->tensorflow == NULL) {
		ev_log(in->c, EV_ERROR, "init needs --tensorflow X.Y (e.g. --tensorflow 2.20)");
		return TF_EUSAGE;
	}
	if (!version_valid(o->tensorflow) || strchr(o->tensorflow, '.') == NULL ||
	    strlen(o->tensorflow) >= sizeof(in->tf)) {
		ev_log(in->c, EV_ERROR, "--tensorflow %s: not a TensorFlow version (X.Y or X.Y.Z)",
		       o->tensorflow);
		return TF_EUSAGE;
	}
	if (o->python &&
	    (!version_valid(o->python) || version_component(o->python, 0) != 3 ||
	     strchr(o->python, '.') == NULL || strchr(strchr(o->python, '.') + 1, '.') != NULL ||
	     strlen(o->python) > 8)) {
		ev_log(in->c, EV_ERROR, "--python %s: give a Python 3 series, e.g. --python 3.12",
		       o->python);
		return TF_EUSAGE;
	}
	if (o->cuda_from && strcmp(o->cuda_from, "redist") != 0 &&
	    strcmp(o->cuda_from, "pip") != 0) {
		ev_log(
		    in->c, EV_ERROR,
		    "--cuda-from %s: redist (NVIDIA's archives) or pip (the nvidia-*-cu12 wheels)",
		    o->cuda_from);
		return TF_EUSAGE;
	}
	in->platform = o->platform ? o->platform : "linux-x86_64";
	if (strcmp(in->platform, "linux-x86_64") != 0 && strcmp(in->platform, "wsl2") != 0 &&
	    strcmp(in->platform, "windows-x86_64") != 0) {
		ev_log(in->c, EV_ERROR, "--platform %s: linux-x86_64, wsl2 or windows-x86_64",
		       in->platform);
		return TF_EUSAGE;
	}
	in->windows = strcmp(in->platform, "windows-x86_64") == 0;
	in->pip_cuda = o->cuda_from && strcmp(o->cuda_from, "pip") == 0;
	if (o->out && strcmp(o->out, "-") != 0 && !o->force && access(o->out, F_OK) == 0) {
		ev_log(in->c, EV_ERROR, "%s exists; init does not replace a file without --force",
		       o->out);
		return TF_EUSAGE;
	}
	return 0;
}

/* TF version, build row and the combinations the knowledge base rules out. */
static int choose_tf(struct init *in)
{
	const char *tf = in->o->tensorflow;
	series_of(tf, in->series, sizeof(in->series));
	if (in->windows && in->kb->windows_gpu_last &&
	    version_cmp_n(tf, in->kb->windows_gpu_last, 2) > 0) {
		char *src = source_text(in, in->kb->windows_gpu_source);
		ev_log(in->c, EV_ERROR,
		       "TensorFlow %s has no GPU build for native Windows: native Windows GPU "
		       "support ended with TF %s (source: %s); %s",
		       in->series, in->kb->windows_gpu_last, src,
		       in->kb->windows_gpu_instead ? in->kb->windows_gpu_instead : "");
		free(src);
		return TF_EMANIFEST;
	}
	if (in->windows) {
		ev_log(in->c, EV_ERROR,
		       "init writes linux-x86_64 and wsl2 stacks; tfprov's catalog has no native "
		       "Windows pins yet (use --platform wsl2)");
		return TF_EUSAGE;
	}
	in->build = compat_tf_build(in->kb, tf, 0);
	if (in->build == NULL) {
		const struct compat_tf_build *v = in->kb->tf_linux;
		size_t n = in->kb->ntf_linux;
		ev_log(in->c, EV_ERROR,
		       "--tensorflow %s: unknown TensorFlow version; the knowledge base "
		       "(data/compat.yaml) has tested GPU builds from %s to %s",
		       tf, n ? v[n - 1].version : "?", n ? v[0].version : "?");
		return TF_EUSAGE;
	}
	if (in->pip_cuda) {
		const struct ynode *first = and_cuda_first(in);
		const char *v = first ? ymap_get(first, "tensorflow")->str : NULL;
		const struct ynode *src = first ? ymap_get(first, "source") : NULL;
		if (v == NULL || version_cmp_n(tf, v, 2) < 0) {
			ev_log(
			    in->c, EV_ERROR,
			    "--cuda-from pip: TensorFlow %s has no tensorflow[and-cuda] extra; the "
			    "knowledge base's first is %s (source: %s); use --cuda-from redist",
			    in->series, v ? v : "none",
			    src && src->type == Y_SCALAR ? src->str
			                                 : "data/compat.yaml pip.and_cuda");
			return TF_EMANIFEST;
		}
	}
	/* The release: as given, else the newest the catalog or the knowledge base knows. */
	const char *dot = strchr(tf, '.');
	if (strchr(dot + 1, '.')) {
		snprintf(in->tf, sizeof(in->tf), "%s", tf);
	} else {
		char *cat = catalog_newest_tf(in->cat, in->series);
		const char *kbv =
		    version_has_prefix(in->build->version, in->series) ? in->build->version : NULL;
		const char *best = cat && (!kbv || version_cmp(cat, kbv) > 0) ? cat : kbv;
		snprintf(in->tf, sizeof(in->tf), "%s", best ? best : tf);
		free(cat);
	}
	return 0;
}

/* ---- the text ------------------------------------------------------------------ */

static char *render(struct init *in)
{
	struct strbuf sb = STRBUF_INIT;
	/* A series ("12.9", what [and-cuda] wheels carry): its newest release's floor. */
	const char *rel = strchr(strchr(in->cuda, '.') ? strchr(in->cuda, '.') + 1 : "", '.')
	                      ? in->cuda
	                      : compat_cuda_release(in->kb, in->cuda);
	const char *min = compat_cuda_min_driver(in->kb, rel ? rel : in->cuda, in->windows);
	char *ranges = python_ranges(in->build);
	strbuf_addf(&sb, "# %s: TensorFlow %s GPU on %s, written by `tfprov init`.\n", in->name,
	            in->tf, in->platform);
	strbuf_addf(&sb,
	            "#   TensorFlow %s's tested build: CUDA %s, cuDNN %s, Python %s\n"
	            "#   (data/compat.yaml, tensorflow.linux_gpu).\n",
	            in->series, in->build->cuda, in->build->cudnn, ranges);
	free(ranges);
	for (size_t i = 0; i < in->notes.n; i++)
		strbuf_addf(&sb, "#   %s\n", in->notes.v[i]);
	if (in->complete)
		strbuf_addf(&sb,
		            "# Every pin is copied from tfprov's catalog (manifests/data, public "
		            "sources\n# named in its README): a complete lock, usable offline%s.\n",
		            in->missing.n
		                ? "; what no\n# public source pins is listed under `missing:`"
		                : "");
	else
		strbuf_adds(&sb,
		            "# Not every pin is in tfprov's catalog: run `tfprov lock` on this "
		            "file (it needs\n# the network once), review the diff, then apply. "
		            "What is still open is\n# listed under `missing:`.\n");
	strbuf_addf(&sb, "schema: 1\nstack:\n  name: %s\n  platform: %s\n", in->name, in->platform);
	strbuf_addf(&sb, "  description: TensorFlow %s, CUDA %s%s, cuDNN %s, Python %s\n", in->tf,
	            in->cuda, in->pip_cuda ? " (nvidia-*-cu12 wheels)" : "", in->cudnn, in->python);
	strbuf_adds(&sb, "prefix: /opt/tfprov\n");
	strbuf_addf(&sb,
	            "versions:\n  tensorflow: \"%s\"\n  cuda: \"%s\"\n  cudnn: \"%s\"\n  python: "
	            "\"%s\"\n",
	            in->tf, in->cuda, in->cudnn, in->python);
	strbuf_adds(&sb, "driver:\n  policy: require\n");
	if (min)
		strbuf_addf(&sb,
		            "  # CUDA %s's own minimum driver (data/compat.yaml cuda.min_driver).\n"
		            "  min_version: \"%s\"\n",
		            rel ? rel : in->cuda, min);
	if (in->gpus.n) {
		strbuf_adds(&sb, "  gpus: [");
		for (size_t i = 0; i < in->gpus.n; i++)
			strbuf_addf(&sb, "%s\"%s\"", i ? ", " : "", in->gpus.v[i]);
		strbuf_adds(&sb, "]\n");
	}
	strbuf_add(&sb, in->cuda_sec.buf ? in->cuda_sec.buf : "", in->cuda_sec.len);
	strbuf_add(&sb, in->cudnn_sec.buf ? in->cudnn_sec.buf : "", in->cudnn_sec.len);
	strbuf_adds(&sb, "env:\n  vars:\n    # TF allocates GPU memory as needed instead of "
	                 "mapping nearly all of it.\n    TF_FORCE_GPU_ALLOW_GROWTH: \"true\"\n");
	strbuf_add(&sb, in->python_sec.buf, in->python_sec.len);
	strbuf_add(&sb, in->pip_sec.buf, in->pip_sec.len);
	if (in->missing.n) {
		strbuf_adds(&sb, "missing:\n");
		for (size_t i = 0; i < in->missing.n; i++)
			strbuf_addf(&sb, "  - \"%s\"\n", in->missing.v[i]);
	}
	strbuf_adds(&sb, "bench:\n  enabled: true\n");
	return strbuf_detach(&sb);
}

/* Parses and lints the text; errors are a bug here (exit 1, nothing written). */
static int check_text(struct init *in, const char *name, const char *text)
{
	struct diags d = {0};
	struct manifest *m = NULL;
	int rc = manifest_load_buf(name, text, strlen(text), &m, &d);
	if (rc == 0)
		compat_lint(in->kb, m, &d);
	if (d.errors || (d.n && !(in->c->flags & CTX_QUIET)))
		cli_print_diags(in->c, &d);
	if (d.errors) {
		ev_log(
		    in->c, EV_ERROR,
		    "the manifest init made does not validate (%zu error%s); nothing was written",
		    d.errors, d.errors == 1 ? "" : "s");
		rc = TF_EFAIL;
	}
	manifest_free(m);
	diags_release(&d);
	return rc;
}

/* The stack name: the output file's stem when it is a valid name, else tf-X.Y. */
static void choose_name(struct init *in)
{
	const char *out = in->o->out;
	const char *base = out ? strrchr(out, '/') : NULL;
	base = base ? base + 1 : out;
	size_t n = base ? strcspn(base, ".") : 0;
	if (base && str_ends_with(base, ".yaml"))
		n = strlen(base) - 5;
	if (base && strcmp(base, "-") != 0 && n > 0 && n < sizeof(in->name) && base[0] != '.' &&
	    strspn(base, "abcdefghijklmnopqrstuvwxyz0123456789._-") >= n)
		snprintf(in->name, sizeof(in->name), "%.*s", (int)n, base);
	else
		snprintf(in->name, sizeof(in->name), "tf-%s", in->series);
}

int cmd_init(struct ctx *c, struct opts *o)
{
	struct init in;
	struct diags d = {0};
	char *text = NULL;
	size_t len = 0;
	int rc, empty = 0;
	memset(&in, 0, sizeof(in));
	in.c = c;
	in.o = o;
	in.complete = 1;
	in.cat = catalog_dir();
	rc = check_args(&in);
	if (rc != 0)
		goto out;
	if (access(in.cat, R_OK | X_OK) != 0)
		ev_log(c, EV_WARN,
		       "the catalog %s cannot be read (%s): every pin is left to `tfprov lock`",
		       in.cat, strerror(errno));
	if (compat_load(compat_default_path(), &in.kb, &d) != 0 ||
	    read_file_at(AT_FDCWD, compat_default_path(), 8u << 20, &in.kbtext, &len) != 0) {
		diags_print(&d, stderr, 0);
		ev_log(c, EV_ERROR, "cannot load the knowledge base %s", compat_default_path());
		rc = TF_EFAIL;
		goto out;
	}
	struct ytree_limits lim = {MANIFEST_MAX_NODES, MANIFEST_MAX_DEPTH};
	in.kbtree = ytree_parse(compat_default_path(), in.kbtext, len, &lim, &d, &empty);
	if ((rc = choose_tf(&in)) != 0 || (rc = choose_python(&in)) != 0)
		goto out;
	choose_name(&in);
	if (!in.pip_cuda) {
		if ((rc = plan_cuda(&in)) != 0)
			goto out;
		plan_cudnn(&in);
	}
	plan_python(&in);
	if ((rc = plan_pip(&in)) != 0)
		goto out;
	if (in.pip_cuda) {
		/* CUDA is what the wheels carry; without the closure, TF's tested build. */
		if (in.cuda[0] == '\0')
			snprintf(in.cuda, sizeof(in.cuda), "%s", in.build->cuda);
		if (in.cudnn[0] == '\0')
			snprintf(in.cudnn, sizeof(in.cudnn), "%s", in.build->cudnn);
		strvec_pushf(&in.notes, "CUDA and cuDNN: the nvidia-*-cu12 wheels of "
		                        "tensorflow[and-cuda] (no redist archives)");
	}
	/* After the CUDA is chosen: the GPU rule judges TF's kernels and the CUDA. */
	if (o->gpu && strcmp(o->gpu, "auto") != 0 && (rc = gpu_explicit(&in, o->gpu)) != 0)
		goto out;
	if (o->gpu && strcmp(o->gpu, "auto") == 0)
		gpu_auto(&in, in.cuda);
	text = render(&in);
	rc = check_text(&in, o->out && strcmp(o->out, "-") ? o->out : "<init>", text);
	if (rc != 0)
		goto out;
	if (o->out == NULL || strcmp(o->out, "-") == 0) {
		fflush(stdout);
		fputs(text, stdout);
		fflush(stdout);
	} else {
		rc = cli_write_file(c, o->out, text, 0644, !o->force);
		if (rc != 0)
			goto out;
		ev_log(c, EV_INFO, "wrote %s: TensorFlow %s, CUDA %s, cuDNN %s, Python %s (%s%s)",
		       o->out, in.tf, in.cuda, in.cudnn, in.python,
		       in.complete ? "a complete lock from the catalog"
		                   : "not complete: run `tfprov lock` next",
		       in.missing.n ? "; gaps under missing:" : "");
	}
	if (!in.complete)
		ev_log(c, EV_INFO,
		       "next: tfprov lock %s (fetches and pins what the catalog lacks), review the "
		       "diff, then tfprov apply",
		       o->out && strcmp(o->out, "-") ? o->out : "FILE");
out:
	diags_release(&d);
	free(text);
	ytree_free(in.kbtree);
	free(in.kbtext);
	free(in.conda_buf);
	compat_free(in.kb);
	strvec_release(&in.gpus);
	strvec_release(&in.missing);
	strvec_release(&in.notes);
	strbuf_release(&in.cuda_sec);
	strbuf_release(&in.cudnn_sec);
	strbuf_release(&in.python_sec);
	strbuf_release(&in.pip_sec);
	return rc;
}
