/*
 * compat.c - loads the compatibility knowledge base (data/compat.yaml)
 * into C structs, table by table, on the strict node reader of
 * compat_yaml.c; the queries other steps ask of it are in compat_query.c.
 *
 * Invariants:
 *  - compat.yaml is checked as strictly as a manifest: an unknown key, a
 *    missing source, a version that is not dotted digits, or a wrong node
 *    type is an error at its line:column, and nothing is returned;
 *  - every string the struct compat points at is owned by kb->pool, every
 *    array by the struct itself, so compat_free() is one walk;
 *  - no fact is known here: the loaders only read the tables
 *    (the lints live in compat_lint.c).
 */
#include "kb.h"
#include "compat_yaml.h"
#include "kb_int.h"
#include "datadir.h"
#include "error.h"
#include "version.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define COMPAT_MAX_BYTES (4u << 20)

static char default_path[PATH_MAX + 32];

static void default_path_init(void)
{
	datadir_path(NULL, "data/compat.yaml", default_path, sizeof(default_path));
}

const char *compat_default_path(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	const char *env = getenv("TFPROV_COMPAT");

	if (env != NULL && *env != '\0')
		return env;
	pthread_once(&once, default_path_init);
	return default_path;
}

/* "2.7, 3.5-3.7" -> ranges; one diagnostic for a malformed field. */
static void parse_python(struct loader *L, const yaml_node_t *n, struct compat_tf_build *b)
{
	const char *s = kbl_scalar_str(L, n);
	const char *p = s;
	size_t slots = 1;

	for (const char *q = s; *q != '\0'; q++)
		slots += *q == ',';
	b->python = xcalloc(slots, sizeof(*b->python));
	while (*p != '\0' && b->npython < slots) {
		const char *end = strchr(p, ',');
		const char *dash;
		struct compat_range *r;
		size_t len;

		if (end == NULL)
			end = p + strlen(p);
		while (p < end && *p == ' ')
			p++;
		len = (size_t)(end - p);
		while (len > 0 && p[len - 1] == ' ')
			len--;
		dash = memchr(p, '-', len);
		r = &b->python[b->npython++];
		if (dash != NULL) {
			r->lo = kbl_own(L->kb, p, (size_t)(dash - p));
			r->hi = kbl_own(L->kb, dash + 1, len - (size_t)(dash - p) - 1);
		} else {
			r->lo = r->hi = kbl_own(L->kb, p, len);
		}
		if (!version_valid(r->lo) || !version_valid(r->hi)) {
			kbl_bad(L, n,
			        "python must read like \"3.9-3.11\" or \"2.7, 3.5-3.7\", not '%s'",
			        s);
			return;
		}
		p = *end ? end + 1 : end;
	}
	if (b->npython == 0)
		kbl_bad(L, n, "python range is empty");
}

/* Informational rows (not used by the lints): only their shape and source are checked. */
static void check_info_rows(struct loader *L, const yaml_node_t *map, const char *key,
                            const char *const *keys)
{
	yaml_node_t **rows;
	size_t n;

	rows = kbl_get_rows(L, map, key, &n);
	for (size_t i = 0; i < n; i++) {
		kbl_check_keys(L, rows[i], keys);
		kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
}

static void load_tf_table(struct loader *L, const yaml_node_t *tf, const char *key,
                          struct compat_tf_build **out, size_t *nout)
{
	static const char *const table_keys[] = {"source", "note", "runtime_rule", "builds", NULL};
	static const char *const row_keys[] = {
	    "name", "version",   "python",           "compiler", "bazel", "cudnn",
	    "cuda", "cudnn_min", "cudnn_min_source", "note",     NULL};
	yaml_node_t *t = kbl_get_node(L, tf, key, YAML_MAPPING_NODE, REQ);
	yaml_node_t **rows;
	const char *source;
	size_t n;

	if (t == NULL)
		return;
	kbl_check_keys(L, t, table_keys);
	source = kbl_get_str(L, t, "source", REQ);
	*out = kbl_get_table(L, t, "builds", row_keys, sizeof(**out), &rows, &n);
	*nout = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_tf_build *b = &(*out)[i];
		const char *extra;
		yaml_node_t *py;

		b->pos = kbl_npos(rows[i]);
		b->name = kbl_get_str(L, rows[i], "name", REQ);
		b->version = kbl_get_ver(L, rows[i], "version", REQ);
		b->cuda = kbl_get_ver(L, rows[i], "cuda", REQ);
		b->cudnn = kbl_get_ver(L, rows[i], "cudnn", REQ);
		b->cudnn_min = kbl_get_ver(L, rows[i], "cudnn_min", OPT);
		if (b->cudnn_min == NULL)
			b->cudnn_min = b->cudnn;
		b->compiler = kbl_get_str(L, rows[i], "compiler", OPT);
		b->bazel = kbl_get_str(L, rows[i], "bazel", OPT);
		py = kbl_get_node(L, rows[i], "python", YAML_SCALAR_NODE, REQ);
		if (py != NULL)
			parse_python(L, py, b);
		extra = kbl_get_str(L, rows[i], "cudnn_min_source", OPT);
		if (b->cudnn_min != b->cudnn && extra == NULL)
			kbl_bad(L, rows[i], "cudnn_min needs its own cudnn_min_source");
		b->source = source;
		if (extra != NULL) {
			char *s = xasprintf("%s; cudnn_min: %s", source ? source : "", extra);
			b->source = kbl_own(L->kb, s, strlen(s));
			free(s);
		}
	}
	free(rows);
}

/* tensorflow.linux_wheels: the glibc floor of TF's Linux wheels, by series. */
static void load_tf_wheels(struct loader *L, const yaml_node_t *tf)
{
	static const char *const keys[] = {"source", "rows", NULL};
	static const char *const row_keys[] = {"tf_from", "tf_below", "glibc",
	                                       "tag",     "source",   NULL};
	yaml_node_t *w = kbl_get_node(L, tf, "linux_wheels", YAML_MAPPING_NODE, OPT);
	yaml_node_t **rows;
	size_t n;

	if (w == NULL)
		return;
	kbl_check_keys(L, w, keys);
	kbl_get_str(L, w, "source", REQ);
	L->kb->tf_glibc =
	    kbl_get_table(L, w, "rows", row_keys, sizeof(*L->kb->tf_glibc), &rows, &n);
	L->kb->ntf_glibc = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_tf_glibc *g = &L->kb->tf_glibc[i];

		g->tf_from = kbl_get_ver(L, rows[i], "tf_from", REQ);
		g->tf_below = kbl_get_ver(L, rows[i], "tf_below", OPT);
		g->glibc = kbl_get_ver(L, rows[i], "glibc", REQ);
		g->tag = kbl_get_str(L, rows[i], "tag", REQ);
		g->source = kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
}

static void load_tensorflow(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"linux_gpu",
	                                   "windows_gpu",
	                                   "windows_native_gpu",
	                                   "mixed_precision",
	                                   "pip_page_requirements",
	                                   "linux_wheels",
	                                   NULL};
	static const char *const mp_keys[] = {"policy", "min_tf", "speedup_min_cc", "source", NULL};
	static const char *const win_keys[] = {"last",    "source", "quote", "after",
	                                       "instead", "wsl2",   NULL};
	yaml_node_t *tf = kbl_get_node(L, root, "tensorflow", YAML_MAPPING_NODE, REQ);
	yaml_node_t *w;

	if (tf == NULL)
		return;
	kbl_check_keys(L, tf, keys);
	load_tf_table(L, tf, "linux_gpu", &L->kb->tf_linux, &L->kb->ntf_linux);
	load_tf_table(L, tf, "windows_gpu", &L->kb->tf_windows, &L->kb->ntf_windows);
	w = kbl_get_node(L, tf, "pip_page_requirements", YAML_MAPPING_NODE, OPT);
	if (w != NULL) {
		static const char *const pp_keys[] = {"source", "rows", NULL};
		static const char *const row_keys[] = {
		    "at",   "tf",    "python", "driver_linux", "driver_windows",
		    "cuda", "cudnn", "note",   "source",       NULL};
		yaml_node_t **rows;
		size_t n;

		kbl_check_keys(L, w, pp_keys);
		kbl_get_str(L, w, "source", REQ);
		rows = kbl_get_rows(L, w, "rows", &n);
		for (size_t i = 0; i < n; i++)
			kbl_check_keys(L, rows[i], row_keys);
		free(rows);
	}
	load_tf_wheels(L, tf);
	w = kbl_get_node(L, tf, "mixed_precision", YAML_MAPPING_NODE, OPT);
	if (w != NULL) {
		kbl_check_keys(L, w, mp_keys);
		L->kb->mixed_precision.policy = kbl_get_str(L, w, "policy", REQ);
		L->kb->mixed_precision.min_tf = kbl_get_ver(L, w, "min_tf", REQ);
		L->kb->mixed_precision.speedup_min_cc = kbl_get_ver(L, w, "speedup_min_cc", REQ);
		L->kb->mixed_precision.source = kbl_get_str(L, w, "source", REQ);
	}
	w = kbl_get_node(L, tf, "windows_native_gpu", YAML_MAPPING_NODE, REQ);
	if (w != NULL) {
		kbl_check_keys(L, w, win_keys);
		L->kb->windows_gpu_last = kbl_get_ver(L, w, "last", REQ);
		L->kb->windows_gpu_source = kbl_get_str(L, w, "source", REQ);
		L->kb->windows_gpu_instead = kbl_get_str(L, w, "instead", REQ);
	}
}

static void load_cuda(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"min_driver", "minor_version_compat", NULL};
	static const char *const md_keys[] = {"source", "note", "toolkits", NULL};
	static const char *const row_keys[] = {"cuda", "label",  "linux", "windows",
	                                       "note", "source", NULL};
	static const char *const mvc_keys[] = {"from",   "below", "linux", "windows",
	                                       "source", "note",  NULL};
	yaml_node_t *cuda = kbl_get_node(L, root, "cuda", YAML_MAPPING_NODE, REQ);
	yaml_node_t *md, **rows;
	size_t n;

	if (cuda == NULL)
		return;
	kbl_check_keys(L, cuda, keys);
	md = kbl_get_node(L, cuda, "min_driver", YAML_MAPPING_NODE, REQ);
	if (md != NULL) {
		kbl_check_keys(L, md, md_keys);
		kbl_get_str(L, md, "source", REQ);
		L->kb->drivers =
		    kbl_get_table(L, md, "toolkits", row_keys, sizeof(*L->kb->drivers), &rows, &n);
		L->kb->ndrivers = n;
		for (size_t i = 0; i < n; i++) {
			struct compat_driver_row *r = &L->kb->drivers[i];
			r->pos = kbl_npos(rows[i]);
			r->cuda = kbl_get_ver(L, rows[i], "cuda", REQ);
			r->label = kbl_get_str(L, rows[i], "label", REQ);
			r->linux_min = kbl_get_ver(L, rows[i], "linux", REQ);
			r->windows_min = kbl_get_ver(L, rows[i], "windows", OPT);
		}
		free(rows);
	}
	L->kb->mvc = kbl_get_table(L, cuda, "minor_version_compat", mvc_keys, sizeof(*L->kb->mvc),
	                           &rows, &n);
	L->kb->nmvc = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_mvc *r = &L->kb->mvc[i];
		r->from = kbl_get_ver(L, rows[i], "from", REQ);
		r->below = kbl_get_ver(L, rows[i], "below", OPT);
		r->linux_min = kbl_get_ver(L, rows[i], "linux", REQ);
		r->windows_min = kbl_get_ver(L, rows[i], "windows", OPT);
		r->source = kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
}

static void load_gpus(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"compute_capabilities", "kernel_rules_source",
	                                   "tf_kernels", NULL};
	static const char *const cc_keys[] = {"cc",         "arch",       "examples",
	                                      "first_cuda", "dropped_in", "formerly",
	                                      "renamed_in", "source",     NULL};
	static const char *const k_keys[] = {"tf_from", "tf_below", "min_cc", "sass",
	                                     "ptx",     "source",   NULL};
	yaml_node_t *g = kbl_get_node(L, root, "gpus", YAML_MAPPING_NODE, REQ);
	yaml_node_t **rows;
	size_t n;

	if (g == NULL)
		return;
	kbl_check_keys(L, g, keys);
	kbl_get_str(L, g, "kernel_rules_source", REQ);
	L->kb->ccs =
	    kbl_get_table(L, g, "compute_capabilities", cc_keys, sizeof(*L->kb->ccs), &rows, &n);
	L->kb->nccs = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_cc *c = &L->kb->ccs[i];
		c->cc = kbl_get_ver(L, rows[i], "cc", REQ);
		if (c->cc != NULL && compat_cc_parse(c->cc) < 0)
			kbl_bad(L, rows[i], "cc must read like \"8.9\", not '%s'", c->cc);
		c->arch = kbl_get_str(L, rows[i], "arch", REQ);
		c->examples = kbl_get_str(L, rows[i], "examples", OPT);
		c->first_cuda = kbl_get_ver(L, rows[i], "first_cuda", OPT);
		c->dropped_in = kbl_get_ver(L, rows[i], "dropped_in", OPT);
		c->formerly = kbl_get_ver(L, rows[i], "formerly", OPT);
		c->renamed_in = kbl_get_ver(L, rows[i], "renamed_in", OPT);
		if ((c->formerly == NULL) != (c->renamed_in == NULL))
			kbl_bad(L, rows[i], "formerly and renamed_in go together");
		else if (c->formerly != NULL && compat_cc_parse(c->formerly) < 0)
			kbl_bad(L, rows[i], "formerly must read like \"10.1\", not '%s'",
			        c->formerly);
		kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
	L->kb->kernels =
	    kbl_get_table(L, g, "tf_kernels", k_keys, sizeof(*L->kb->kernels), &rows, &n);
	L->kb->nkernels = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_tf_kernels *k = &L->kb->kernels[i];
		k->tf_from = kbl_get_ver(L, rows[i], "tf_from", REQ);
		k->tf_below = kbl_get_ver(L, rows[i], "tf_below", OPT);
		k->min_cc = kbl_get_ver(L, rows[i], "min_cc", OPT);
		k->sass = kbl_get_list(L, rows[i], "sass", &k->nsass, OPT, 1);
		k->ptx = kbl_get_list(L, rows[i], "ptx", &k->nptx, OPT, 1);
		k->source = kbl_get_str(L, rows[i], "source", REQ);
		/* Without an explicit floor, the lowest SASS is it. */
		for (size_t j = 0; k->min_cc == NULL && j < k->nsass; j++)
			if (j == 0 || compat_cc_parse(k->sass[j]) < compat_cc_parse(k->min_cc))
				k->min_cc = k->sass[j];
		for (size_t j = 0; j < k->nsass; j++)
			if (compat_cc_parse(k->sass[j]) < 0)
				kbl_bad(L, rows[i], "sass entry '%s' is not a compute capability",
				        k->sass[j]);
		for (size_t j = 0; j < k->nptx; j++)
			if (compat_cc_parse(k->ptx[j]) < 0)
				kbl_bad(L, rows[i], "ptx entry '%s' is not a compute capability",
				        k->ptx[j]);
		if (k->min_cc == NULL)
			kbl_bad(L, rows[i], "a tf_kernels row needs min_cc or a sass list");
	}
	free(rows);
}

/* A specifier field: checked with compat_spec_valid(). */
static const char *get_spec(struct loader *L, const yaml_node_t *n, const char *what)
{
	const char *s = kbl_scalar_str(L, n);

	if (!compat_spec_valid(s))
		kbl_bad(L, n, "%s must be a specifier like \">=1.23.5,<2\", not '%s'", what, s);
	return s;
}

/* Each group maps packages to specifiers; flattened into one row per package. */
static void load_requires(struct loader *L, yaml_node_t **rows, size_t n)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++) {
		yaml_node_t *pk = kbl_map_get(L, rows[i], "packages");
		if (pk != NULL && pk->type == YAML_MAPPING_NODE)
			total +=
			    (size_t)(pk->data.mapping.pairs.top - pk->data.mapping.pairs.start);
	}
	L->kb->pip_requires = xcalloc(total ? total : 1, sizeof(*L->kb->pip_requires));
	for (size_t i = 0; i < n; i++) {
		static const char *const rq_keys[] = {"tensorflow", "packages", "source", NULL};
		yaml_node_t *tf, *pk;
		const char *tf_spec = NULL, *source;

		kbl_check_keys(L, rows[i], rq_keys);
		tf = kbl_get_node(L, rows[i], "tensorflow", YAML_SCALAR_NODE, REQ);
		if (tf != NULL)
			tf_spec = get_spec(L, tf, "tensorflow");
		source = kbl_get_str(L, rows[i], "source", REQ);
		pk = kbl_get_node(L, rows[i], "packages", YAML_MAPPING_NODE, REQ);
		if (pk == NULL)
			continue;
		for (yaml_node_pair_t *q = pk->data.mapping.pairs.start;
		     q < pk->data.mapping.pairs.top; q++) {
			yaml_node_t *k = kbl_node_at(L, q->key), *v = kbl_node_at(L, q->value);
			struct compat_pip_requires *r;
			const char *name;

			if (k == NULL || k->type != YAML_SCALAR_NODE || v == NULL ||
			    v->type != YAML_SCALAR_NODE) {
				kbl_bad(L, k, "packages maps a distribution name to a specifier");
				continue;
			}
			name = kbl_pep503(L, kbl_scalar_str(L, k));
			for (yaml_node_pair_t *o = pk->data.mapping.pairs.start; o < q; o++)
				if (kbl_is_scalar(kbl_node_at(L, o->key),
				                  (const char *)k->data.scalar.value))
					kbl_bad(L, k, "duplicate key '%s'", name);
			r = &L->kb->pip_requires[L->kb->npip_requires++];
			r->tf_spec = tf_spec;
			r->package = name;
			r->spec = get_spec(L, v, "a package's range");
			r->source = source;
		}
	}
}

/* pip.import_packages: distributions that install the same import package. */
static void load_imports(struct loader *L, const yaml_node_t *p)
{
	static const char *const keys[] = {"import", "distributions", "fix",
	                                   "note",   "source",        NULL};
	yaml_node_t **rows;
	size_t n;

	L->kb->imports =
	    kbl_get_table(L, p, "import_packages", keys, sizeof(*L->kb->imports), &rows, &n);
	L->kb->nimports = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_import_pkg *r = &L->kb->imports[i];

		r->import = kbl_get_str(L, rows[i], "import", REQ);
		r->dists = kbl_get_list(L, rows[i], "distributions", &r->ndists, REQ, 0);
		for (size_t j = 0; j < r->ndists; j++)
			r->dists[j] = kbl_pep503(L, r->dists[j]);
		if (r->ndists < 2)
			kbl_bad(L, rows[i],
			        "an import package row names two distributions or more");
		r->fix = kbl_get_str(L, rows[i], "fix", REQ);
		r->source = kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
}

/* pip.cuda_carriers: distributions whose name carries the CUDA they are built for. */
static void load_carriers(struct loader *L, const yaml_node_t *p)
{
	static const char *const keys[] = {"pattern", "source", NULL};
	yaml_node_t **rows;
	size_t n;

	L->kb->carriers =
	    kbl_get_table(L, p, "cuda_carriers", keys, sizeof(*L->kb->carriers), &rows, &n);
	L->kb->ncarriers = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_cuda_carrier *c = &L->kb->carriers[i];

		c->pattern = kbl_get_str(L, rows[i], "pattern", REQ);
		c->source = kbl_get_str(L, rows[i], "source", REQ);
		if (c->pattern != NULL && strstr(c->pattern, "{M}") == NULL)
			kbl_bad(L, rows[i], "a CUDA carrier pattern names the major as {M}");
	}
	free(rows);
}

/* library_components: which component ships each library TF loads. */
static void load_lib_components(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"libs", "redist", "wheel", NULL};
	yaml_node_t **rows;
	size_t n;

	if (kbl_map_get(L, root, "library_components") == NULL)
		return;
	L->kb->lib_components_source = kbl_get_str(L, root, "library_components_source", REQ);
	L->kb->lib_components = kbl_get_table(L, root, "library_components", keys,
	                                      sizeof(*L->kb->lib_components), &rows, &n);
	L->kb->nlib_components = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_lib_component *c = &L->kb->lib_components[i];

		c->libs = kbl_get_list(L, rows[i], "libs", &c->nlibs, REQ, 0);
		c->redist = kbl_get_str(L, rows[i], "redist", REQ);
		c->wheel = kbl_get_str(L, rows[i], "wheel", REQ);
		if (c->wheel != NULL && strstr(c->wheel, "{M}") == NULL)
			kbl_bad(L, rows[i], "a wheel name carries the CUDA major as {M}");
	}
	free(rows);
}

/* platforms: which platform an artifact's name says, and the stacks each serves. */
static void load_platforms(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {
	    "name", "stacks", "conda_subdirs", "wheel_tags", "files", "source", NULL};
	yaml_node_t **rows;
	size_t n;

	if (kbl_map_get(L, root, "platforms") == NULL)
		return;
	L->kb->platforms =
	    kbl_get_table(L, root, "platforms", keys, sizeof(*L->kb->platforms), &rows, &n);
	L->kb->nplatforms = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_platform *p = &L->kb->platforms[i];

		p->name = kbl_get_str(L, rows[i], "name", REQ);
		p->stacks = kbl_get_list(L, rows[i], "stacks", &p->nstacks, OPT, 0);
		p->conda_subdirs =
		    kbl_get_list(L, rows[i], "conda_subdirs", &p->nconda_subdirs, OPT, 0);
		p->wheel_tags = kbl_get_list(L, rows[i], "wheel_tags", &p->nwheel_tags, OPT, 0);
		p->files = kbl_get_list(L, rows[i], "files", &p->nfiles, OPT, 0);
		p->source = kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
}

/* env_vars: what TensorFlow accepts in the environment variables it reads. */
static void load_env_vars(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"name",      "kind", "values", "min",   "max",
	                                   "otherwise", "note", "source", "needs", NULL};
	static const char *const kinds[] = {"enum", "bool", "int", "python-true", NULL};
	yaml_node_t **rows;
	size_t n;

	if (kbl_map_get(L, root, "env_vars") == NULL)
		return;
	L->kb->env_vars =
	    kbl_get_table(L, root, "env_vars", keys, sizeof(*L->kb->env_vars), &rows, &n);
	L->kb->nenv_vars = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_env_var *e = &L->kb->env_vars[i];
		yaml_node_t *k;
		int kind = -1;

		e->name = kbl_get_str(L, rows[i], "name", REQ);
		k = kbl_get_node(L, rows[i], "kind", YAML_SCALAR_NODE, REQ);
		for (int j = 0; k != NULL && kinds[j] != NULL; j++)
			if (kbl_is_scalar(k, kinds[j]))
				kind = j;
		if (k != NULL && kind < 0)
			kbl_bad(L, k, "kind must be enum, bool, int or python-true");
		e->kind = kind < 0 ? COMPAT_ENV_ENUM : (enum compat_env_kind)kind;
		if (e->kind == COMPAT_ENV_ENUM || e->kind == COMPAT_ENV_PYTRUE)
			e->values = kbl_get_list(L, rows[i], "values", &e->nvalues, REQ, 0);
		e->min = kbl_get_ver(L, rows[i], "min", OPT);
		e->max = kbl_get_ver(L, rows[i], "max", OPT);
		e->otherwise = kbl_get_str(L, rows[i], "otherwise", REQ);
		e->source = kbl_get_str(L, rows[i], "source", REQ);
		if ((k = kbl_get_node(L, rows[i], "needs", YAML_MAPPING_NODE, OPT)) != NULL) {
			static const char *const nk[] = {"package", "from_tf", "fact", NULL};
			kbl_check_keys(L, k, nk);
			e->needs_package = kbl_pep503(L, kbl_get_str(L, k, "package", REQ));
			e->needs_from_tf = kbl_get_ver(L, k, "from_tf", REQ);
			e->needs_fact = kbl_get_str(L, k, "fact", REQ);
		}
	}
	free(rows);
}

/* pip.and_cuda: each pin "name<spec>" split into its PEP 503 name and its specifier. */
static void load_and_cuda(struct loader *L, const yaml_node_t *p, const char *const *keys)
{
	yaml_node_t **rows;
	size_t n;

	L->kb->and_cuda =
	    kbl_get_table(L, p, "and_cuda", keys, sizeof(*L->kb->and_cuda), &rows, &n);
	L->kb->nand_cuda = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_and_cuda *a = &L->kb->and_cuda[i];
		const char **pins;

		a->tensorflow = kbl_get_ver(L, rows[i], "tensorflow", REQ);
		a->source = kbl_get_str(L, rows[i], "source", REQ);
		a->unverified = a->source != NULL && strncmp(a->source, "unverified", 10) == 0;
		pins = kbl_get_list(L, rows[i], "pins", &a->npins, REQ, 0);
		a->pins = xcalloc(a->npins ? a->npins : 1, sizeof(*a->pins));
		for (size_t j = 0; j < a->npins; j++) {
			size_t k = strcspn(pins[j], "=<>!~ ");
			char *name = xstrndup(pins[j], k);

			a->pins[j].name = kbl_pep503(L, name);
			a->pins[j].spec = pins[j] + k;
			if (!compat_spec_valid(a->pins[j].spec))
				kbl_bad(L, rows[i],
				        "pip.and_cuda: '%s' is not name and version specifier",
				        pins[j]);
			free(name);
		}
		free(pins);
	}
	free(rows);
}

static void load_pip(struct loader *L, const yaml_node_t *root)
{
	/* "caps" is read by pipcaps.c. */
	static const char *const keys[] = {"removed",         "requires",      "and_cuda",
	                                   "notes",           "cuda_wheels",   "caps",
	                                   "import_packages", "cuda_carriers", NULL};
	static const char *const cw_keys[] = {"prefix",         "major_tag",    "runtime",
	                                      "cudnn",          "site_libdirs", "release_versioned",
	                                      "release_source", "source",       NULL};
	static const char *const rm_keys[] = {"name",        "last_real", "identical_since", "stub",
	                                      "replacement", "quote",     "source",          NULL};
	static const char *const lr_keys[] = {"linux", "windows", NULL};
	static const char *const ac_keys[] = {"tensorflow", "source", "pins", "note", NULL};
	static const char *const note_keys[] = {"fact", "source", NULL};
	yaml_node_t *p = kbl_get_node(L, root, "pip", YAML_MAPPING_NODE, REQ);
	yaml_node_t *w;
	yaml_node_t **rows;
	size_t n;

	if (p == NULL)
		return;
	kbl_check_keys(L, p, keys);
	if (kbl_map_get(L, p, "and_cuda") != NULL)
		load_and_cuda(L, p, ac_keys);
	if (kbl_map_get(L, p, "notes") != NULL)
		check_info_rows(L, p, "notes", note_keys);
	w = kbl_get_node(L, p, "cuda_wheels", YAML_MAPPING_NODE, OPT);
	if (w != NULL) {
		kbl_check_keys(L, w, cw_keys);
		L->kb->cuda_wheels.prefix = kbl_get_str(L, w, "prefix", REQ);
		L->kb->cuda_wheels.major_tag = kbl_get_str(L, w, "major_tag", REQ);
		L->kb->cuda_wheels.runtime = kbl_get_str(L, w, "runtime", REQ);
		L->kb->cuda_wheels.cudnn = kbl_get_str(L, w, "cudnn", REQ);
		L->kb->cuda_wheels.site_libdirs =
		    kbl_get_list(L, w, "site_libdirs", &L->kb->cuda_wheels.nsite_libdirs, REQ, 0);
		L->kb->cuda_wheels.source = kbl_get_str(L, w, "source", REQ);
		L->kb->cuda_wheels.release_versioned = kbl_get_list(
		    L, w, "release_versioned", &L->kb->cuda_wheels.nrelease_versioned, OPT, 0);
		if (L->kb->cuda_wheels.release_versioned != NULL)
			L->kb->cuda_wheels.release_source =
			    kbl_get_str(L, w, "release_source", REQ);
	}
	L->kb->pip_removed =
	    kbl_get_table(L, p, "removed", rm_keys, sizeof(*L->kb->pip_removed), &rows, &n);
	L->kb->npip_removed = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_pip_removed *r = &L->kb->pip_removed[i];
		yaml_node_t *lr;
		const char *name;

		name = kbl_get_str(L, rows[i], "name", REQ);
		r->name = name ? kbl_pep503(L, name) : NULL;
		lr = kbl_get_node(L, rows[i], "last_real", YAML_MAPPING_NODE, REQ);
		if (lr != NULL) {
			kbl_check_keys(L, lr, lr_keys);
			r->last_real_linux = kbl_get_ver(L, lr, "linux", REQ);
			r->last_real_windows = kbl_get_ver(L, lr, "windows", OPT);
		}
		r->identical_since = kbl_get_ver(L, rows[i], "identical_since", REQ);
		r->stub = kbl_get_ver(L, rows[i], "stub", OPT);
		r->replacement = kbl_get_str(L, rows[i], "replacement", REQ);
		r->source = kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
	rows = kbl_get_rows(L, p, "requires", &n);
	load_requires(L, rows, n);
	free(rows);
	if (kbl_map_get(L, p, "import_packages") != NULL)
		load_imports(L, p);
	if (kbl_map_get(L, p, "cuda_carriers") != NULL)
		load_carriers(L, p);
}

static void load_conda(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"packages", "cuda_packages", NULL};
	static const char *const cp_keys[] = {"name", "source", NULL};
	static const char *const pk_keys[] = {
	    "channel",   "name",         "versions", "complete_through", "discontinued_after",
	    "successor", "latest_known", "note",     "source",           NULL};
	yaml_node_t *c = kbl_get_node(L, root, "conda", YAML_MAPPING_NODE, REQ);
	yaml_node_t **rows;
	size_t n;

	if (c == NULL)
		return;
	kbl_check_keys(L, c, keys);
	L->kb->conda = kbl_get_table(L, c, "packages", pk_keys, sizeof(*L->kb->conda), &rows, &n);
	L->kb->nconda = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_conda_pkg *k = &L->kb->conda[i];
		k->channel = kbl_get_str(L, rows[i], "channel", REQ);
		k->name = kbl_get_str(L, rows[i], "name", REQ);
		k->versions = kbl_get_list(L, rows[i], "versions", &k->nversions, REQ, 1);
		k->complete_through = kbl_get_ver(L, rows[i], "complete_through", OPT);
		k->discontinued_after = kbl_get_ver(L, rows[i], "discontinued_after", OPT);
		k->successor = kbl_get_str(L, rows[i], "successor", OPT);
		kbl_get_ver(L, rows[i], "latest_known", OPT);
		k->source = kbl_get_str(L, rows[i], "source", REQ);
		if (k->discontinued_after != NULL && k->successor == NULL)
			kbl_bad(L, rows[i], "a discontinued package needs a successor");
	}
	free(rows);
	if (kbl_map_get(L, c, "cuda_packages") == NULL)
		return;
	L->kb->conda_cuda =
	    kbl_get_table(L, c, "cuda_packages", cp_keys, sizeof(*L->kb->conda_cuda), &rows, &n);
	for (size_t i = 0; i < n; i++) {
		const char *name;

		kbl_get_str(L, rows[i], "source", REQ);
		name = kbl_get_str(L, rows[i], "name", REQ);
		if (name != NULL)
			L->kb->conda_cuda[L->kb->nconda_cuda++] = name;
	}
	free(rows);
}

static void load_sonames(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"platform",   "cuda",    "cudnn",  "libs",
	                                   "companions", "derived", "source", NULL};
	yaml_node_t **rows;
	size_t n;

	L->kb->sonames =
	    kbl_get_table(L, root, "sonames", keys, sizeof(*L->kb->sonames), &rows, &n);
	L->kb->nsonames = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_sonames *s = &L->kb->sonames[i];
		yaml_node_t *plat;

		plat = kbl_get_node(L, rows[i], "platform", YAML_SCALAR_NODE, REQ);
		if (plat != NULL && kbl_is_scalar(plat, "windows"))
			s->os = COMPAT_WINDOWS;
		else if (plat != NULL && !kbl_is_scalar(plat, "linux"))
			kbl_bad(L, plat, "platform must be linux or windows");
		s->cuda = kbl_get_ver(L, rows[i], "cuda", OPT);
		s->cudnn = kbl_get_ver(L, rows[i], "cudnn", OPT);
		if ((s->cuda == NULL) == (s->cudnn == NULL))
			kbl_bad(L, rows[i], "a sonames entry names either cuda or cudnn");
		s->libs = kbl_get_list(L, rows[i], "libs", &s->nlibs, REQ, 0);
		s->companions = kbl_get_list(L, rows[i], "companions", &s->ncompanions, OPT, 0);
		s->derived = kbl_get_str(L, rows[i], "derived", OPT);
		s->source = kbl_get_str(L, rows[i], "source", REQ);
	}
	free(rows);
}

/* companion_packages: packages tied to a TF release, or ended (compat_companion.c). */
static void load_companion_pkgs(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"name", "coupling", "why",      "source",
	                                   "note", "ended",    "releases", NULL};
	static const char *const ended_keys[] = {"date", "what", "replaced_by", "source", NULL};
	static const char *const rel_keys[] = {"release", "tf", "source", "note", NULL};
	static const char *const couplings[] = {"none", "tested", "import", "abi", NULL};
	yaml_node_t **rows;
	size_t n;

	if (kbl_map_get(L, root, "companion_packages") == NULL)
		return;
	L->kb->companion_pkgs = kbl_get_table(L, root, "companion_packages", keys,
	                                      sizeof(*L->kb->companion_pkgs), &rows, &n);
	L->kb->ncompanion_pkgs = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_companion *c = &L->kb->companion_pkgs[i];
		const char *name = kbl_get_str(L, rows[i], "name", REQ);
		yaml_node_t *k = kbl_get_node(L, rows[i], "coupling", YAML_SCALAR_NODE, REQ);
		yaml_node_t *e, **rel;
		size_t nrel;
		int coupling = -1;

		c->name = name ? kbl_pep503(L, name) : NULL;
		for (int j = 0; k != NULL && couplings[j] != NULL; j++)
			if (kbl_is_scalar(k, couplings[j]))
				coupling = j;
		if (k != NULL && coupling < 0)
			kbl_bad(L, k, "coupling must be none, tested, import or abi");
		c->coupling = coupling < 0 ? COMPAT_COUPLING_NONE : (enum compat_coupling)coupling;
		c->why = kbl_get_str(L, rows[i], "why", REQ);
		c->source = kbl_get_str(L, rows[i], "source", REQ);
		for (size_t j = 0; c->name != NULL && j < i; j++)
			if (L->kb->companion_pkgs[j].name != NULL &&
			    strcmp(L->kb->companion_pkgs[j].name, c->name) == 0)
				kbl_bad(L, rows[i], "companion package '%s' is listed twice",
				        c->name);
		if ((e = kbl_get_node(L, rows[i], "ended", YAML_MAPPING_NODE, OPT)) != NULL) {
			kbl_check_keys(L, e, ended_keys);
			c->ended = kbl_get_str(L, e, "date", REQ);
			c->ended_what = kbl_get_str(L, e, "what", REQ);
			c->replaced_by = kbl_get_str(L, e, "replaced_by", REQ);
			c->ended_source = kbl_get_str(L, e, "source", REQ);
		}
		if (kbl_map_get(L, rows[i], "releases") == NULL) {
			if (c->ended == NULL)
				kbl_bad(L, rows[i],
				        "a companion package has releases, or has ended");
			continue;
		}
		c->releases = kbl_get_table(L, rows[i], "releases", rel_keys, sizeof(*c->releases),
		                            &rel, &nrel);
		c->nreleases = nrel;
		for (size_t j = 0; j < nrel; j++) {
			struct compat_companion_release *r = &c->releases[j];
			yaml_node_t *tf = kbl_get_node(L, rel[j], "tf", YAML_SCALAR_NODE, REQ);

			r->release = kbl_get_ver(L, rel[j], "release", REQ);
			r->tf = tf ? get_spec(L, tf, "a companion's tf") : NULL;
			r->source = kbl_get_str(L, rel[j], "source", REQ);
		}
		free(rel);
	}
	free(rows);
}

static void load_guide(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"id",     "claim", "verdict", "correction",
	                                   "source", "lint",  "test",    NULL};
	yaml_node_t **rows;
	size_t n;

	L->kb->guide =
	    kbl_get_table(L, root, "guide_mistakes", keys, sizeof(*L->kb->guide), &rows, &n);
	L->kb->nguide = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_guide_mistake *g = &L->kb->guide[i];
		g->id = kbl_get_str(L, rows[i], "id", REQ);
		g->claim = kbl_get_str(L, rows[i], "claim", REQ);
		g->verdict = kbl_get_str(L, rows[i], "verdict", REQ);
		g->correction = kbl_get_str(L, rows[i], "correction", REQ);
		g->source = kbl_get_str(L, rows[i], "source", REQ);
		g->lint = kbl_get_str(L, rows[i], "lint", OPT);
		g->test = kbl_get_str(L, rows[i], "test", OPT);
		if (g->test != NULL && g->lint == NULL)
			kbl_bad(L, rows[i], "a guide test needs the lint it proves");
	}
	free(rows);
}

int compat_load(const char *path, struct compat **out, struct diags *d)
{
	static const char *const keys[] = {"schema",
	                                   "sources",
	                                   "tensorflow",
	                                   "cuda",
	                                   "gpus",
	                                   "pip",
	                                   "conda",
	                                   "sonames",
	                                   "env_vars",
	                                   "guide_mistakes",
	                                   "library_components",
	                                   "library_components_source",
	                                   "platforms",
	                                   "companion_packages",
	                                   NULL};
	struct loader L = {0};
	yaml_parser_t parser;
	int parser_ok = 0, doc_ok = 0, rc = 0;
	yaml_node_t *root, *schema;
	char *buf = NULL;
	size_t len = 0;
	int err;

	*out = NULL;
	L.file = path;
	L.d = d;
	err = read_file_at(AT_FDCWD, path, COMPAT_MAX_BYTES, &buf, &len);
	if (err != 0) {
		diags_add(d, DIAG_ERROR, path, (struct pos){0, 0}, "compat.kb-unreadable",
		          "set TFPROV_COMPAT to the knowledge base (data/compat.yaml)",
		          "cannot read the compatibility knowledge base: %s", strerror(-err));
		rc = TF_EIO;
		goto out;
	}
	if (!yaml_parser_initialize(&parser)) {
		rc = TF_EFAIL;
		goto out;
	}
	parser_ok = 1;
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	if (!yaml_parser_load(&parser, &L.doc)) {
		struct pos p = {(int)parser.problem_mark.line + 1,
		                (int)parser.problem_mark.column + 1};
		diags_add(d, DIAG_ERROR, path, p, "compat.kb-invalid", NULL, "YAML: %s",
		          parser.problem ? parser.problem : "syntax error");
		rc = TF_EFAIL;
		goto out;
	}
	doc_ok = 1;
	L.kb = xcalloc(1, sizeof(*L.kb));
	L.kb->path = xstrdup(path);
	root = yaml_document_get_root_node(&L.doc);
	if (root == NULL || root->type != YAML_MAPPING_NODE) {
		kbl_bad(&L, root, "compat.yaml must be a mapping");
		goto out;
	}
	kbl_check_keys(&L, root, keys);
	schema = kbl_get_node(&L, root, "schema", YAML_SCALAR_NODE, REQ);
	if (schema != NULL && !kbl_is_scalar(schema, "1")) {
		kbl_bad(&L, schema, "unsupported compat.yaml schema (this tfprov reads 1)");
		goto out;
	}
	kbl_get_node(&L, root, "sources", YAML_MAPPING_NODE, REQ);
	load_tensorflow(&L, root);
	load_cuda(&L, root);
	load_gpus(&L, root);
	load_pip(&L, root);
	load_conda(&L, root);
	load_sonames(&L, root);
	load_env_vars(&L, root);
	load_lib_components(&L, root);
	load_platforms(&L, root);
	load_companion_pkgs(&L, root);
	load_guide(&L, root);
	/* The known-bad table has one loader, shared with lock and lock --check. */
	if (!L.bad && pip_caps_load(path, &L.kb->caps, &L.kb->ncaps, d) != 0)
		L.bad = 1;
out:
	if (L.bad) {
		rc = TF_EFAIL;
		compat_free(L.kb);
		L.kb = NULL;
	}
	if (rc == 0)
		*out = L.kb;
	if (doc_ok)
		yaml_document_delete(&L.doc);
	if (parser_ok)
		yaml_parser_delete(&parser);
	free(buf);
	return rc;
}

void compat_free(struct compat *kb)
{
	if (kb == NULL)
		return;
	for (size_t i = 0; i < kb->ntf_linux; i++)
		free(kb->tf_linux[i].python);
	for (size_t i = 0; i < kb->ntf_windows; i++)
		free(kb->tf_windows[i].python);
	free(kb->tf_linux);
	free(kb->tf_windows);
	free(kb->drivers);
	free(kb->mvc);
	free(kb->ccs);
	for (size_t i = 0; i < kb->nkernels; i++) {
		free(kb->kernels[i].sass);
		free(kb->kernels[i].ptx);
	}
	free(kb->kernels);
	free(kb->pip_removed);
	free(kb->pip_requires);
	for (size_t i = 0; i < kb->nconda; i++)
		free(kb->conda[i].versions);
	free(kb->conda);
	free(kb->conda_cuda);
	for (size_t i = 0; i < kb->nsonames; i++) {
		free(kb->sonames[i].libs);
		free(kb->sonames[i].companions);
	}
	free(kb->sonames);
	free(kb->guide);
	for (size_t i = 0; i < kb->nimports; i++)
		free(kb->imports[i].dists);
	free(kb->imports);
	free(kb->carriers);
	for (size_t i = 0; i < kb->nlib_components; i++)
		free(kb->lib_components[i].libs);
	free(kb->lib_components);
	for (size_t i = 0; i < kb->nplatforms; i++) {
		free(kb->platforms[i].stacks);
		free(kb->platforms[i].conda_subdirs);
		free(kb->platforms[i].wheel_tags);
		free(kb->platforms[i].files);
	}
	free(kb->platforms);
	for (size_t i = 0; i < kb->nenv_vars; i++)
		free(kb->env_vars[i].values);
	free(kb->env_vars);
	pip_caps_free(kb->caps, kb->ncaps);
	free(kb->tf_glibc);
	free(kb->cuda_wheels.site_libdirs);
	free(kb->cuda_wheels.release_versioned);
	for (size_t i = 0; i < kb->nand_cuda; i++)
		free(kb->and_cuda[i].pins);
	free(kb->and_cuda);
	for (size_t i = 0; i < kb->ncompanion_pkgs; i++)
		free(kb->companion_pkgs[i].releases);
	free(kb->companion_pkgs);
	strvec_release(&kb->pool);
	free(kb->path);
	free(kb);
}
