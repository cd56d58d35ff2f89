/*
 * compat.c - loads the compatibility knowledge base (data/compat.yaml)
 * into C structs and answers the queries other steps need (tested TF build,
 * driver minimums, kernels per compute capability, sonames).
 *
 * Invariants:
 *  - compat.yaml is checked as strictly as a manifest: an unknown key, a
 *    missing source, a version that is not dotted digits, or a wrong node
 *    type is an error at its line:column, and nothing is returned;
 *  - every string the struct compat points at is owned by kb->pool, every
 *    array by the struct itself, so compat_free() is one walk;
 *  - no fact is known here: the queries are generic over the tables
 *    (the lints live in compat_lint.c).
 */
#include "kb.h"
#include "kb_int.h"
#include "datadir.h"
#include "error.h"
#include "version.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#define COMPAT_MAX_BYTES (4u << 20)

struct loader {
	yaml_document_t doc;
	struct compat *kb;
	const char *file;
	struct diags *d;
	int bad;
};

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

static const char *own(struct compat *kb, const char *s, size_t n)
{
	char *copy = xstrndup(s, n);

	strvec_push(&kb->pool, copy);
	free(copy);
	return kb->pool.v[kb->pool.n - 1];
}

static struct pos npos(const yaml_node_t *n)
{
	struct pos p = {(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
	return p;
}

static void bad(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void bad(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;
	struct pos p = {0, 0};
	char *msg;

	va_start(ap, fmt);
	msg = xvasprintf(fmt, ap);
	va_end(ap);
	if (n != NULL)
		p = npos(n);
	diags_add(L->d, DIAG_ERROR, L->file, p, "compat.kb-invalid",
	          "compat.yaml is tfprov's knowledge base; fix the data (see its header)", "%s",
	          msg);
	free(msg);
	L->bad = 1;
}

static yaml_node_t *node_at(struct loader *L, int idx)
{
	return yaml_document_get_node(&L->doc, idx);
}

static int is_scalar(const yaml_node_t *n, const char *s)
{
	size_t len = strlen(s);

	return n != NULL && n->type == YAML_SCALAR_NODE && n->data.scalar.length == len &&
	       memcmp(n->data.scalar.value, s, len) == 0;
}

static yaml_node_t *map_get(struct loader *L, const yaml_node_t *map, const char *key)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		if (is_scalar(node_at(L, p->key), key))
			return node_at(L, p->value);
	}
	return NULL;
}

/* Reports keys of map that are not in allowed (NULL-terminated) and duplicates. */
static void check_keys(struct loader *L, const yaml_node_t *map, const char *const *allowed)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = node_at(L, p->key);
		int ok = 0;

		if (k == NULL || k->type != YAML_SCALAR_NODE) {
			bad(L, k, "mapping keys must be scalars");
			continue;
		}
		for (const char *const *a = allowed; *a != NULL; a++)
			if (is_scalar(k, *a))
				ok = 1;
		if (!ok)
			bad(L, k, "unknown key '%.*s'", (int)k->data.scalar.length,
			    (const char *)k->data.scalar.value);
		for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *prev = node_at(L, q->key);
			if (prev != NULL && prev->type == YAML_SCALAR_NODE &&
			    prev->data.scalar.length == k->data.scalar.length &&
			    memcmp(prev->data.scalar.value, k->data.scalar.value,
			           k->data.scalar.length) == 0)
				bad(L, k, "duplicate key '%.*s'", (int)k->data.scalar.length,
				    (const char *)k->data.scalar.value);
		}
	}
}

static yaml_node_t *get_node(struct loader *L, const yaml_node_t *map, const char *key,
                             yaml_node_type_t type, int required)
{
	static const char *const names[] = {"", "a scalar", "a list", "a mapping"};
	yaml_node_t *n = map_get(L, map, key);

	if (n == NULL) {
		if (required)
			bad(L, map, "missing key '%s'", key);
		return NULL;
	}
	if (n->type != type) {
		bad(L, n, "'%s' must be %s", key, names[type]);
		return NULL;
	}
	return n;
}

static const char *scalar_str(struct loader *L, const yaml_node_t *n)
{
	return own(L->kb, (const char *)n->data.scalar.value, n->data.scalar.length);
}

enum { OPT = 0, REQ = 1 };

static const char *get_str(struct loader *L, const yaml_node_t *map, const char *key, int req)
{
	yaml_node_t *n = get_node(L, map, key, YAML_SCALAR_NODE, req);

	return n ? scalar_str(L, n) : NULL;
}

/* A version field: dotted digits ("12.3.2", "545.23.08"). */
static const char *get_ver(struct loader *L, const yaml_node_t *map, const char *key, int req)
{
	yaml_node_t *n = get_node(L, map, key, YAML_SCALAR_NODE, req);
	const char *s;

	if (n == NULL)
		return NULL;
	s = scalar_str(L, n);
	if (!version_valid(s))
		bad(L, n, "'%s' must be a dotted version, not '%s'", key, s);
	return s;
}

/* A list of scalars (a lone scalar counts as a list of one). */
static const char **get_list(struct loader *L, const yaml_node_t *map, const char *key, size_t *n,
                             int req, int versions)
{
	yaml_node_t *node = map_get(L, map, key);
	const char **v;
	size_t cnt, i = 0;

	*n = 0;
	if (node == NULL) {
		if (req)
			bad(L, map, "missing key '%s'", key);
		return NULL;
	}
	if (node->type == YAML_SCALAR_NODE) {
		v = xcalloc(1, sizeof(*v));
		v[0] = scalar_str(L, node);
		*n = 1;
		if (versions && !version_valid(v[0]))
			bad(L, node, "'%s' must be a dotted version, not '%s'", key, v[0]);
		return v;
	}
	if (node->type != YAML_SEQUENCE_NODE) {
		bad(L, node, "'%s' must be a list", key);
		return NULL;
	}
	cnt = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
	v = xcalloc(cnt ? cnt : 1, sizeof(*v));
	for (yaml_node_item_t *it = node->data.sequence.items.start;
	     it < node->data.sequence.items.top; it++) {
		yaml_node_t *e = node_at(L, *it);
		if (e == NULL || e->type != YAML_SCALAR_NODE) {
			bad(L, e, "'%s' must list scalars", key);
			continue;
		}
		v[i] = scalar_str(L, e);
		if (versions && !version_valid(v[i]))
			bad(L, e, "'%s' must list dotted versions, not '%s'", key, v[i]);
		i++;
	}
	*n = i;
	return v;
}

/* Iterates over the mappings of a list; returns the count and the array of nodes. */
static yaml_node_t **get_rows(struct loader *L, const yaml_node_t *map, const char *key, size_t *n)
{
	yaml_node_t *seq = get_node(L, map, key, YAML_SEQUENCE_NODE, REQ);
	yaml_node_t **rows;
	size_t i = 0;

	*n = 0;
	if (seq == NULL)
		return NULL;
	rows = xcalloc((size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start) + 1,
	               sizeof(*rows));
	for (yaml_node_item_t *it = seq->data.sequence.items.start;
	     it < seq->data.sequence.items.top; it++) {
		yaml_node_t *e = node_at(L, *it);
		if (e == NULL || e->type != YAML_MAPPING_NODE) {
			bad(L, e, "each entry of '%s' must be a mapping", key);
			continue;
		}
		rows[i++] = e;
	}
	*n = i;
	return rows;
}

/*
 * The list `key` of map as a table: its mapping rows (*rows, freed by the caller),
 * each checked against row_keys, and a zeroed array of *n elements of size bytes
 * (one at least) for the caller to fill.
 */
static void *get_table(struct loader *L, const yaml_node_t *map, const char *key,
                       const char *const *row_keys, size_t size, yaml_node_t ***rows, size_t *n)
{
	*rows = get_rows(L, map, key, n);
	for (size_t i = 0; i < *n; i++)
		check_keys(L, (*rows)[i], row_keys);
	return xcalloc(*n ? *n : 1, size);
}

/* The PEP 503 name (pip_normalize_name), owned by the knowledge base. */
static const char *pep503(struct loader *L, const char *name)
{
	char *norm = pip_normalize_name(name);
	const char *out = own(L->kb, norm, strlen(norm));
	free(norm);
	return out;
}

/* "2.7, 3.5-3.7" -> ranges; one diagnostic for a malformed field. */
static void parse_python(struct loader *L, const yaml_node_t *n, struct compat_tf_build *b)
{
	const char *s = scalar_str(L, n);
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
			r->lo = own(L->kb, p, (size_t)(dash - p));
			r->hi = own(L->kb, dash + 1, len - (size_t)(dash - p) - 1);
		} else {
			r->lo = r->hi = own(L->kb, p, len);
		}
		if (!version_valid(r->lo) || !version_valid(r->hi)) {
			bad(L, n,
			    "python must read like \"3.9-3.11\" or \"2.7, 3.5-3.7\", not '%s'", s);
			return;
		}
		p = *end ? end + 1 : end;
	}
	if (b->npython == 0)
		bad(L, n, "python range is empty");
}

/* Informational rows (not used by the lints): only their shape and source are checked. */
static void check_info_rows(struct loader *L, const yaml_node_t *map, const char *key,
                            const char *const *keys)
{
	yaml_node_t **rows;
	size_t n;

	rows = get_rows(L, map, key, &n);
	for (size_t i = 0; i < n; i++) {
		check_keys(L, rows[i], keys);
		get_str(L, rows[i], "source", REQ);
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
	yaml_node_t *t = get_node(L, tf, key, YAML_MAPPING_NODE, REQ);
	yaml_node_t **rows;
	const char *source;
	size_t n;

	if (t == NULL)
		return;
	check_keys(L, t, table_keys);
	source = get_str(L, t, "source", REQ);
	*out = get_table(L, t, "builds", row_keys, sizeof(**out), &rows, &n);
	*nout = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_tf_build *b = &(*out)[i];
		const char *extra;
		yaml_node_t *py;

		b->pos = npos(rows[i]);
		b->name = get_str(L, rows[i], "name", REQ);
		b->version = get_ver(L, rows[i], "version", REQ);
		b->cuda = get_ver(L, rows[i], "cuda", REQ);
		b->cudnn = get_ver(L, rows[i], "cudnn", REQ);
		b->cudnn_min = get_ver(L, rows[i], "cudnn_min", OPT);
		if (b->cudnn_min == NULL)
			b->cudnn_min = b->cudnn;
		b->compiler = get_str(L, rows[i], "compiler", OPT);
		b->bazel = get_str(L, rows[i], "bazel", OPT);
		py = get_node(L, rows[i], "python", YAML_SCALAR_NODE, REQ);
		if (py != NULL)
			parse_python(L, py, b);
		extra = get_str(L, rows[i], "cudnn_min_source", OPT);
		if (b->cudnn_min != b->cudnn && extra == NULL)
			bad(L, rows[i], "cudnn_min needs its own cudnn_min_source");
		b->source = source;
		if (extra != NULL) {
			char *s = xasprintf("%s; cudnn_min: %s", source ? source : "", extra);
			b->source = own(L->kb, s, strlen(s));
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
	yaml_node_t *w = get_node(L, tf, "linux_wheels", YAML_MAPPING_NODE, OPT);
	yaml_node_t **rows;
	size_t n;

	if (w == NULL)
		return;
	check_keys(L, w, keys);
	get_str(L, w, "source", REQ);
	L->kb->tf_glibc = get_table(L, w, "rows", row_keys, sizeof(*L->kb->tf_glibc), &rows, &n);
	L->kb->ntf_glibc = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_tf_glibc *g = &L->kb->tf_glibc[i];

		g->tf_from = get_ver(L, rows[i], "tf_from", REQ);
		g->tf_below = get_ver(L, rows[i], "tf_below", OPT);
		g->glibc = get_ver(L, rows[i], "glibc", REQ);
		g->tag = get_str(L, rows[i], "tag", REQ);
		g->source = get_str(L, rows[i], "source", REQ);
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
	yaml_node_t *tf = get_node(L, root, "tensorflow", YAML_MAPPING_NODE, REQ);
	yaml_node_t *w;

	if (tf == NULL)
		return;
	check_keys(L, tf, keys);
	load_tf_table(L, tf, "linux_gpu", &L->kb->tf_linux, &L->kb->ntf_linux);
	load_tf_table(L, tf, "windows_gpu", &L->kb->tf_windows, &L->kb->ntf_windows);
	w = get_node(L, tf, "pip_page_requirements", YAML_MAPPING_NODE, OPT);
	if (w != NULL) {
		static const char *const pp_keys[] = {"source", "rows", NULL};
		static const char *const row_keys[] = {
		    "at",   "tf",    "python", "driver_linux", "driver_windows",
		    "cuda", "cudnn", "note",   "source",       NULL};
		yaml_node_t **rows;
		size_t n;

		check_keys(L, w, pp_keys);
		get_str(L, w, "source", REQ);
		rows = get_rows(L, w, "rows", &n);
		for (size_t i = 0; i < n; i++)
			check_keys(L, rows[i], row_keys);
		free(rows);
	}
	load_tf_wheels(L, tf);
	w = get_node(L, tf, "mixed_precision", YAML_MAPPING_NODE, OPT);
	if (w != NULL) {
		check_keys(L, w, mp_keys);
		L->kb->mixed_precision.policy = get_str(L, w, "policy", REQ);
		L->kb->mixed_precision.min_tf = get_ver(L, w, "min_tf", REQ);
		L->kb->mixed_precision.speedup_min_cc = get_ver(L, w, "speedup_min_cc", REQ);
		L->kb->mixed_precision.source = get_str(L, w, "source", REQ);
	}
	w = get_node(L, tf, "windows_native_gpu", YAML_MAPPING_NODE, REQ);
	if (w != NULL) {
		check_keys(L, w, win_keys);
		L->kb->windows_gpu_last = get_ver(L, w, "last", REQ);
		L->kb->windows_gpu_source = get_str(L, w, "source", REQ);
		L->kb->windows_gpu_instead = get_str(L, w, "instead", REQ);
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
	yaml_node_t *cuda = get_node(L, root, "cuda", YAML_MAPPING_NODE, REQ);
	yaml_node_t *md, **rows;
	size_t n;

	if (cuda == NULL)
		return;
	check_keys(L, cuda, keys);
	md = get_node(L, cuda, "min_driver", YAML_MAPPING_NODE, REQ);
	if (md != NULL) {
		check_keys(L, md, md_keys);
		get_str(L, md, "source", REQ);
		L->kb->drivers =
		    get_table(L, md, "toolkits", row_keys, sizeof(*L->kb->drivers), &rows, &n);
		L->kb->ndrivers = n;
		for (size_t i = 0; i < n; i++) {
			struct compat_driver_row *r = &L->kb->drivers[i];
			r->pos = npos(rows[i]);
			r->cuda = get_ver(L, rows[i], "cuda", REQ);
			r->label = get_str(L, rows[i], "label", REQ);
			r->linux_min = get_ver(L, rows[i], "linux", REQ);
			r->windows_min = get_ver(L, rows[i], "windows", OPT);
		}
		free(rows);
	}
	L->kb->mvc =
	    get_table(L, cuda, "minor_version_compat", mvc_keys, sizeof(*L->kb->mvc), &rows, &n);
	L->kb->nmvc = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_mvc *r = &L->kb->mvc[i];
		r->from = get_ver(L, rows[i], "from", REQ);
		r->below = get_ver(L, rows[i], "below", OPT);
		r->linux_min = get_ver(L, rows[i], "linux", REQ);
		r->windows_min = get_ver(L, rows[i], "windows", OPT);
		r->source = get_str(L, rows[i], "source", REQ);
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
	yaml_node_t *g = get_node(L, root, "gpus", YAML_MAPPING_NODE, REQ);
	yaml_node_t **rows;
	size_t n;

	if (g == NULL)
		return;
	check_keys(L, g, keys);
	get_str(L, g, "kernel_rules_source", REQ);
	L->kb->ccs =
	    get_table(L, g, "compute_capabilities", cc_keys, sizeof(*L->kb->ccs), &rows, &n);
	L->kb->nccs = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_cc *c = &L->kb->ccs[i];
		c->cc = get_ver(L, rows[i], "cc", REQ);
		if (c->cc != NULL && compat_cc_parse(c->cc) < 0)
			bad(L, rows[i], "cc must read like \"8.9\", not '%s'", c->cc);
		c->arch = get_str(L, rows[i], "arch", REQ);
		c->examples = get_str(L, rows[i], "examples", OPT);
		c->first_cuda = get_ver(L, rows[i], "first_cuda", OPT);
		c->dropped_in = get_ver(L, rows[i], "dropped_in", OPT);
		c->formerly = get_ver(L, rows[i], "formerly", OPT);
		c->renamed_in = get_ver(L, rows[i], "renamed_in", OPT);
		if ((c->formerly == NULL) != (c->renamed_in == NULL))
			bad(L, rows[i], "formerly and renamed_in go together");
		else if (c->formerly != NULL && compat_cc_parse(c->formerly) < 0)
			bad(L, rows[i], "formerly must read like \"10.1\", not '%s'", c->formerly);
		get_str(L, rows[i], "source", REQ);
	}
	free(rows);
	L->kb->kernels = get_table(L, g, "tf_kernels", k_keys, sizeof(*L->kb->kernels), &rows, &n);
	L->kb->nkernels = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_tf_kernels *k = &L->kb->kernels[i];
		k->tf_from = get_ver(L, rows[i], "tf_from", REQ);
		k->tf_below = get_ver(L, rows[i], "tf_below", OPT);
		k->min_cc = get_ver(L, rows[i], "min_cc", OPT);
		k->sass = get_list(L, rows[i], "sass", &k->nsass, OPT, 1);
		k->ptx = get_list(L, rows[i], "ptx", &k->nptx, OPT, 1);
		k->source = get_str(L, rows[i], "source", REQ);
		/* Without an explicit floor, the lowest SASS is it. */
		for (size_t j = 0; k->min_cc == NULL && j < k->nsass; j++)
			if (j == 0 || compat_cc_parse(k->sass[j]) < compat_cc_parse(k->min_cc))
				k->min_cc = k->sass[j];
		for (size_t j = 0; j < k->nsass; j++)
			if (compat_cc_parse(k->sass[j]) < 0)
				bad(L, rows[i], "sass entry '%s' is not a compute capability",
				    k->sass[j]);
		for (size_t j = 0; j < k->nptx; j++)
			if (compat_cc_parse(k->ptx[j]) < 0)
				bad(L, rows[i], "ptx entry '%s' is not a compute capability",
				    k->ptx[j]);
		if (k->min_cc == NULL)
			bad(L, rows[i], "a tf_kernels row needs min_cc or a sass list");
	}
	free(rows);
}

/* A specifier field: checked with compat_spec_valid(). */
static const char *get_spec(struct loader *L, const yaml_node_t *n, const char *what)
{
	const char *s = scalar_str(L, n);

	if (!compat_spec_valid(s))
		bad(L, n, "%s must be a specifier like \">=1.23.5,<2\", not '%s'", what, s);
	return s;
}

/* Each group maps packages to specifiers; flattened into one row per package. */
static void load_requires(struct loader *L, yaml_node_t **rows, size_t n)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++) {
		yaml_node_t *pk = map_get(L, rows[i], "packages");
		if (pk != NULL && pk->type == YAML_MAPPING_NODE)
			total +=
			    (size_t)(pk->data.mapping.pairs.top - pk->data.mapping.pairs.start);
	}
	L->kb->pip_requires = xcalloc(total ? total : 1, sizeof(*L->kb->pip_requires));
	for (size_t i = 0; i < n; i++) {
		static const char *const rq_keys[] = {"tensorflow", "packages", "source", NULL};
		yaml_node_t *tf, *pk;
		const char *tf_spec = NULL, *source;

		check_keys(L, rows[i], rq_keys);
		tf = get_node(L, rows[i], "tensorflow", YAML_SCALAR_NODE, REQ);
		if (tf != NULL)
			tf_spec = get_spec(L, tf, "tensorflow");
		source = get_str(L, rows[i], "source", REQ);
		pk = get_node(L, rows[i], "packages", YAML_MAPPING_NODE, REQ);
		if (pk == NULL)
			continue;
		for (yaml_node_pair_t *q = pk->data.mapping.pairs.start;
		     q < pk->data.mapping.pairs.top; q++) {
			yaml_node_t *k = node_at(L, q->key), *v = node_at(L, q->value);
			struct compat_pip_requires *r;
			const char *name;

			if (k == NULL || k->type != YAML_SCALAR_NODE || v == NULL ||
			    v->type != YAML_SCALAR_NODE) {
				bad(L, k, "packages maps a distribution name to a specifier");
				continue;
			}
			name = pep503(L, scalar_str(L, k));
			for (yaml_node_pair_t *o = pk->data.mapping.pairs.start; o < q; o++)
				if (is_scalar(node_at(L, o->key),
				              (const char *)k->data.scalar.value))
					bad(L, k, "duplicate key '%s'", name);
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
	    get_table(L, p, "import_packages", keys, sizeof(*L->kb->imports), &rows, &n);
	L->kb->nimports = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_import_pkg *r = &L->kb->imports[i];

		r->import = get_str(L, rows[i], "import", REQ);
		r->dists = get_list(L, rows[i], "distributions", &r->ndists, REQ, 0);
		for (size_t j = 0; j < r->ndists; j++)
			r->dists[j] = pep503(L, r->dists[j]);
		if (r->ndists < 2)
			bad(L, rows[i], "an import package row names two distributions or more");
		r->fix = get_str(L, rows[i], "fix", REQ);
		r->source = get_str(L, rows[i], "source", REQ);
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
	    get_table(L, p, "cuda_carriers", keys, sizeof(*L->kb->carriers), &rows, &n);
	L->kb->ncarriers = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_cuda_carrier *c = &L->kb->carriers[i];

		c->pattern = get_str(L, rows[i], "pattern", REQ);
		c->source = get_str(L, rows[i], "source", REQ);
		if (c->pattern != NULL && strstr(c->pattern, "{M}") == NULL)
			bad(L, rows[i], "a CUDA carrier pattern names the major as {M}");
	}
	free(rows);
}

/* library_components: which component ships each library TF loads. */
static void load_lib_components(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"libs", "redist", "wheel", NULL};
	yaml_node_t **rows;
	size_t n;

	if (map_get(L, root, "library_components") == NULL)
		return;
	L->kb->lib_components_source = get_str(L, root, "library_components_source", REQ);
	L->kb->lib_components = get_table(L, root, "library_components", keys,
	                                  sizeof(*L->kb->lib_components), &rows, &n);
	L->kb->nlib_components = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_lib_component *c = &L->kb->lib_components[i];

		c->libs = get_list(L, rows[i], "libs", &c->nlibs, REQ, 0);
		c->redist = get_str(L, rows[i], "redist", REQ);
		c->wheel = get_str(L, rows[i], "wheel", REQ);
		if (c->wheel != NULL && strstr(c->wheel, "{M}") == NULL)
			bad(L, rows[i], "a wheel name carries the CUDA major as {M}");
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

	if (map_get(L, root, "platforms") == NULL)
		return;
	L->kb->platforms =
	    get_table(L, root, "platforms", keys, sizeof(*L->kb->platforms), &rows, &n);
	L->kb->nplatforms = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_platform *p = &L->kb->platforms[i];

		p->name = get_str(L, rows[i], "name", REQ);
		p->stacks = get_list(L, rows[i], "stacks", &p->nstacks, OPT, 0);
		p->conda_subdirs =
		    get_list(L, rows[i], "conda_subdirs", &p->nconda_subdirs, OPT, 0);
		p->wheel_tags = get_list(L, rows[i], "wheel_tags", &p->nwheel_tags, OPT, 0);
		p->files = get_list(L, rows[i], "files", &p->nfiles, OPT, 0);
		p->source = get_str(L, rows[i], "source", REQ);
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

	if (map_get(L, root, "env_vars") == NULL)
		return;
	L->kb->env_vars = get_table(L, root, "env_vars", keys, sizeof(*L->kb->env_vars), &rows, &n);
	L->kb->nenv_vars = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_env_var *e = &L->kb->env_vars[i];
		yaml_node_t *k;
		int kind = -1;

		e->name = get_str(L, rows[i], "name", REQ);
		k = get_node(L, rows[i], "kind", YAML_SCALAR_NODE, REQ);
		for (int j = 0; k != NULL && kinds[j] != NULL; j++)
			if (is_scalar(k, kinds[j]))
				kind = j;
		if (k != NULL && kind < 0)
			bad(L, k, "kind must be enum, bool, int or python-true");
		e->kind = kind < 0 ? COMPAT_ENV_ENUM : (enum compat_env_kind)kind;
		if (e->kind == COMPAT_ENV_ENUM || e->kind == COMPAT_ENV_PYTRUE)
			e->values = get_list(L, rows[i], "values", &e->nvalues, REQ, 0);
		e->min = get_ver(L, rows[i], "min", OPT);
		e->max = get_ver(L, rows[i], "max", OPT);
		e->otherwise = get_str(L, rows[i], "otherwise", REQ);
		e->source = get_str(L, rows[i], "source", REQ);
		if ((k = get_node(L, rows[i], "needs", YAML_MAPPING_NODE, OPT)) != NULL) {
			static const char *const nk[] = {"package", "from_tf", "fact", NULL};
			check_keys(L, k, nk);
			e->needs_package = pep503(L, get_str(L, k, "package", REQ));
			e->needs_from_tf = get_ver(L, k, "from_tf", REQ);
			e->needs_fact = get_str(L, k, "fact", REQ);
		}
	}
	free(rows);
}

/* pip.and_cuda: each pin "name<spec>" split into its PEP 503 name and its specifier. */
static void load_and_cuda(struct loader *L, const yaml_node_t *p, const char *const *keys)
{
	yaml_node_t **rows;
	size_t n;

	L->kb->and_cuda = get_table(L, p, "and_cuda", keys, sizeof(*L->kb->and_cuda), &rows, &n);
	L->kb->nand_cuda = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_and_cuda *a = &L->kb->and_cuda[i];
		const char **pins;

		a->tensorflow = get_ver(L, rows[i], "tensorflow", REQ);
		a->source = get_str(L, rows[i], "source", REQ);
		a->unverified = a->source != NULL && strncmp(a->source, "unverified", 10) == 0;
		pins = get_list(L, rows[i], "pins", &a->npins, REQ, 0);
		a->pins = xcalloc(a->npins ? a->npins : 1, sizeof(*a->pins));
		for (size_t j = 0; j < a->npins; j++) {
			size_t k = strcspn(pins[j], "=<>!~ ");
			char *name = xstrndup(pins[j], k);

			a->pins[j].name = pep503(L, name);
			a->pins[j].spec = pins[j] + k;
			if (!compat_spec_valid(a->pins[j].spec))
				bad(L, rows[i],
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
	yaml_node_t *p = get_node(L, root, "pip", YAML_MAPPING_NODE, REQ);
	yaml_node_t *w;
	yaml_node_t **rows;
	size_t n;

	if (p == NULL)
		return;
	check_keys(L, p, keys);
	if (map_get(L, p, "and_cuda") != NULL)
		load_and_cuda(L, p, ac_keys);
	if (map_get(L, p, "notes") != NULL)
		check_info_rows(L, p, "notes", note_keys);
	w = get_node(L, p, "cuda_wheels", YAML_MAPPING_NODE, OPT);
	if (w != NULL) {
		check_keys(L, w, cw_keys);
		L->kb->cuda_wheels.prefix = get_str(L, w, "prefix", REQ);
		L->kb->cuda_wheels.major_tag = get_str(L, w, "major_tag", REQ);
		L->kb->cuda_wheels.runtime = get_str(L, w, "runtime", REQ);
		L->kb->cuda_wheels.cudnn = get_str(L, w, "cudnn", REQ);
		L->kb->cuda_wheels.site_libdirs =
		    get_list(L, w, "site_libdirs", &L->kb->cuda_wheels.nsite_libdirs, REQ, 0);
		L->kb->cuda_wheels.source = get_str(L, w, "source", REQ);
		L->kb->cuda_wheels.release_versioned = get_list(
		    L, w, "release_versioned", &L->kb->cuda_wheels.nrelease_versioned, OPT, 0);
		if (L->kb->cuda_wheels.release_versioned != NULL)
			L->kb->cuda_wheels.release_source = get_str(L, w, "release_source", REQ);
	}
	L->kb->pip_removed =
	    get_table(L, p, "removed", rm_keys, sizeof(*L->kb->pip_removed), &rows, &n);
	L->kb->npip_removed = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_pip_removed *r = &L->kb->pip_removed[i];
		yaml_node_t *lr;
		const char *name;

		name = get_str(L, rows[i], "name", REQ);
		r->name = name ? pep503(L, name) : NULL;
		lr = get_node(L, rows[i], "last_real", YAML_MAPPING_NODE, REQ);
		if (lr != NULL) {
			check_keys(L, lr, lr_keys);
			r->last_real_linux = get_ver(L, lr, "linux", REQ);
			r->last_real_windows = get_ver(L, lr, "windows", OPT);
		}
		r->identical_since = get_ver(L, rows[i], "identical_since", REQ);
		r->stub = get_ver(L, rows[i], "stub", OPT);
		r->replacement = get_str(L, rows[i], "replacement", REQ);
		r->source = get_str(L, rows[i], "source", REQ);
	}
	free(rows);
	rows = get_rows(L, p, "requires", &n);
	load_requires(L, rows, n);
	free(rows);
	if (map_get(L, p, "import_packages") != NULL)
		load_imports(L, p);
	if (map_get(L, p, "cuda_carriers") != NULL)
		load_carriers(L, p);
}

static void load_conda(struct loader *L, const yaml_node_t *root)
{
	static const char *const keys[] = {"packages", "cuda_packages", NULL};
	static const char *const cp_keys[] = {"name", "source", NULL};
	static const char *const pk_keys[] = {
	    "channel",   "name",         "versions", "complete_through", "discontinued_after",
	    "successor", "latest_known", "note",     "source",           NULL};
	yaml_node_t *c = get_node(L, root, "conda", YAML_MAPPING_NODE, REQ);
	yaml_node_t **rows;
	size_t n;

	if (c == NULL)
		return;
	check_keys(L, c, keys);
	L->kb->conda = get_table(L, c, "packages", pk_keys, sizeof(*L->kb->conda), &rows, &n);
	L->kb->nconda = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_conda_pkg *k = &L->kb->conda[i];
		k->channel = get_str(L, rows[i], "channel", REQ);
		k->name = get_str(L, rows[i], "name", REQ);
		k->versions = get_list(L, rows[i], "versions", &k->nversions, REQ, 1);
		k->complete_through = get_ver(L, rows[i], "complete_through", OPT);
		k->discontinued_after = get_ver(L, rows[i], "discontinued_after", OPT);
		k->successor = get_str(L, rows[i], "successor", OPT);
		get_ver(L, rows[i], "latest_known", OPT);
		k->source = get_str(L, rows[i], "source", REQ);
		if (k->discontinued_after != NULL && k->successor == NULL)
			bad(L, rows[i], "a discontinued package needs a successor");
	}
	free(rows);
	if (map_get(L, c, "cuda_packages") == NULL)
		return;
	L->kb->conda_cuda =
	    get_table(L, c, "cuda_packages", cp_keys, sizeof(*L->kb->conda_cuda), &rows, &n);
	for (size_t i = 0; i < n; i++) {
		const char *name;

		get_str(L, rows[i], "source", REQ);
		name = get_str(L, rows[i], "name", REQ);
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

	L->kb->sonames = get_table(L, root, "sonames", keys, sizeof(*L->kb->sonames), &rows, &n);
	L->kb->nsonames = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_sonames *s = &L->kb->sonames[i];
		yaml_node_t *plat;

		plat = get_node(L, rows[i], "platform", YAML_SCALAR_NODE, REQ);
		if (plat != NULL && is_scalar(plat, "windows"))
			s->os = COMPAT_WINDOWS;
		else if (plat != NULL && !is_scalar(plat, "linux"))
			bad(L, plat, "platform must be linux or windows");
		s->cuda = get_ver(L, rows[i], "cuda", OPT);
		s->cudnn = get_ver(L, rows[i], "cudnn", OPT);
		if ((s->cuda == NULL) == (s->cudnn == NULL))
			bad(L, rows[i], "a sonames entry names either cuda or cudnn");
		s->libs = get_list(L, rows[i], "libs", &s->nlibs, REQ, 0);
		s->companions = get_list(L, rows[i], "companions", &s->ncompanions, OPT, 0);
		s->derived = get_str(L, rows[i], "derived", OPT);
		s->source = get_str(L, rows[i], "source", REQ);
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

	if (map_get(L, root, "companion_packages") == NULL)
		return;
	L->kb->companion_pkgs = get_table(L, root, "companion_packages", keys,
	                                  sizeof(*L->kb->companion_pkgs), &rows, &n);
	L->kb->ncompanion_pkgs = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_companion *c = &L->kb->companion_pkgs[i];
		const char *name = get_str(L, rows[i], "name", REQ);
		yaml_node_t *k = get_node(L, rows[i], "coupling", YAML_SCALAR_NODE, REQ);
		yaml_node_t *e, **rel;
		size_t nrel;
		int coupling = -1;

		c->name = name ? pep503(L, name) : NULL;
		for (int j = 0; k != NULL && couplings[j] != NULL; j++)
			if (is_scalar(k, couplings[j]))
				coupling = j;
		if (k != NULL && coupling < 0)
			bad(L, k, "coupling must be none, tested, import or abi");
		c->coupling = coupling < 0 ? COMPAT_COUPLING_NONE : (enum compat_coupling)coupling;
		c->why = get_str(L, rows[i], "why", REQ);
		c->source = get_str(L, rows[i], "source", REQ);
		for (size_t j = 0; c->name != NULL && j < i; j++)
			if (L->kb->companion_pkgs[j].name != NULL &&
			    strcmp(L->kb->companion_pkgs[j].name, c->name) == 0)
				bad(L, rows[i], "companion package '%s' is listed twice", c->name);
		if ((e = get_node(L, rows[i], "ended", YAML_MAPPING_NODE, OPT)) != NULL) {
			check_keys(L, e, ended_keys);
			c->ended = get_str(L, e, "date", REQ);
			c->ended_what = get_str(L, e, "what", REQ);
			c->replaced_by = get_str(L, e, "replaced_by", REQ);
			c->ended_source = get_str(L, e, "source", REQ);
		}
		if (map_get(L, rows[i], "releases") == NULL) {
			if (c->ended == NULL)
				bad(L, rows[i], "a companion package has releases, or has ended");
			continue;
		}
		c->releases =
		    get_table(L, rows[i], "releases", rel_keys, sizeof(*c->releases), &rel, &nrel);
		c->nreleases = nrel;
		for (size_t j = 0; j < nrel; j++) {
			struct compat_companion_release *r = &c->releases[j];
			yaml_node_t *tf = get_node(L, rel[j], "tf", YAML_SCALAR_NODE, REQ);

			r->release = get_ver(L, rel[j], "release", REQ);
			r->tf = tf ? get_spec(L, tf, "a companion's tf") : NULL;
			r->source = get_str(L, rel[j], "source", REQ);
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

	L->kb->guide = get_table(L, root, "guide_mistakes", keys, sizeof(*L->kb->guide), &rows, &n);
	L->kb->nguide = n;
	for (size_t i = 0; i < n; i++) {
		struct compat_guide_mistake *g = &L->kb->guide[i];
		g->id = get_str(L, rows[i], "id", REQ);
		g->claim = get_str(L, rows[i], "claim", REQ);
		g->verdict = get_str(L, rows[i], "verdict", REQ);
		g->correction = get_str(L, rows[i], "correction", REQ);
		g->source = get_str(L, rows[i], "source", REQ);
		g->lint = get_str(L, rows[i], "lint", OPT);
		g->test = get_str(L, rows[i], "test", OPT);
		if (g->test != NULL && g->lint == NULL)
			bad(L, rows[i], "a guide test needs the lint it proves");
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
		bad(&L, root, "compat.yaml must be a mapping");
		goto out;
	}
	check_keys(&L, root, keys);
	schema = get_node(&L, root, "schema", YAML_SCALAR_NODE, REQ);
	if (schema != NULL && !is_scalar(schema, "1")) {
		bad(&L, schema, "unsupported compat.yaml schema (this tfprov reads 1)");
		goto out;
	}
	get_node(&L, root, "sources", YAML_MAPPING_NODE, REQ);
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

/* ---- queries ---- */

static size_t ncomponents(const char *v)
{
	size_t n = 1;

	for (; *v != '\0'; v++)
		n += *v == '.';
	return n;
}

/* One clause: its operator length (0 when none) and the version after it. */
static size_t spec_op(const char *clause, const char **rhs)
{
	static const char *const ops[] = {"===", "~=", "==", "!=", ">=", "<=", ">", "<", NULL};
	size_t n = 0;

	for (const char *const *o = ops; *o != NULL && n == 0; o++)
		if (strncmp(clause, *o, strlen(*o)) == 0)
			n = strlen(*o);
	*rhs = clause + n;
	while (**rhs == ' ')
		(*rhs)++;
	return n;
}

/* Calls fn on each trimmed clause of spec; stops at the first 0. */
static int spec_each(const char *spec, int (*fn)(const char *clause, const char *v), const char *v)
{
	char *copy = xstrdup(spec), *save = NULL;
	int ok = 1;

	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && ok;
	     tok = strtok_r(NULL, ",", &save)) {
		size_t len;

		while (*tok == ' ')
			tok++;
		len = strlen(tok);
		while (len > 0 && tok[len - 1] == ' ')
			tok[--len] = '\0';
		ok = fn(tok, v);
	}
	free(copy);
	return ok;
}

/*
 * PEP 440's version grammar (https://peps.python.org/pep-0440/#appendix-b-parsing-version-strings-with-regular-expressions),
 * case-insensitive, with the spellings it normalises (alpha, pre, rev, '-'/'_'
 * separators, implicit numbers, a leading 'v'), in POSIX ERE; and the prefix
 * form of == and != ("2.15.*": a release then ".*").
 */
static const char pep440_version_re[] = "^v?([0-9]+!)?[0-9]+(\\.[0-9]+)*"
                                        "([-_.]?(alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?"
                                        "((-[0-9]+)|([-_.]?(post|rev|r)[-_.]?[0-9]*))?"
                                        "([-_.]?dev[-_.]?[0-9]*)?"
                                        "(\\+[a-z0-9]+([-_.][a-z0-9]+)*)?$";
static const char pep440_prefix_re[] = "^v?([0-9]+!)?[0-9]+(\\.[0-9]+)*\\.\\*$";

static int re_matches(const char *re, const char *s)
{
	regex_t r;
	int ok;

	if (regcomp(&r, re, REG_EXTENDED | REG_ICASE | REG_NOSUB) != 0)
		return 0;
	ok = regexec(&r, s, 0, NULL, 0) == 0;
	regfree(&r);
	return ok;
}

/* The release components of a valid version ("1!2.3rc1" -> 2). */
static int release_components(const char *v)
{
	const char *p = v + (tolower((unsigned char)*v) == 'v'), *bang = strchr(p, '!');
	int n = 1;

	if (bang != NULL)
		p = bang + 1;
	for (; *p != '\0'; p++) {
		if (*p == '.' && isdigit((unsigned char)p[1]))
			n++;
		else if (!isdigit((unsigned char)*p))
			break;
	}
	return n;
}

/*
 * One clause as PEP 440's version specifiers allow it
 * (https://peps.python.org/pep-0440/#version-specifiers): a local label
 * ("+cu121") and a ".*" prefix only after == and !=, ~= with two release
 * components at least, === with any string; any other tail ("1.0foo",
 * "1.0-", "2.x") is refused, not taken for a pre-release.
 */
static int clause_valid(const char *clause, const char *unused)
{
	const char *rhs;
	size_t op = spec_op(clause, &rhs);
	int eq = strncmp(clause, "==", 2) == 0 || strncmp(clause, "!=", 2) == 0;

	(void)unused;
	if (op == 0 || *rhs == '\0')
		return 0;
	if (op == 3) /* ===: arbitrary equality, any string without blanks */
		return strpbrk(rhs, " \t") == NULL;
	if (str_ends_with(rhs, ".*"))
		return eq && re_matches(pep440_prefix_re, rhs);
	if (!re_matches(pep440_version_re, rhs))
		return 0;
	if (strchr(rhs, '+') != NULL && !eq)
		return 0;
	return strncmp(clause, "~=", 2) != 0 || release_components(rhs) >= 2;
}

int compat_spec_valid(const char *spec)
{
	return spec != NULL && (*spec == '\0' || (strstr(spec, ",,") == NULL && *spec != ',' &&
	                                          spec[strlen(spec) - 1] != ',' &&
	                                          spec_each(spec, clause_valid, NULL)));
}

static int clause_allows(const char *clause, const char *v)
{
	const char *rhs;
	size_t op = spec_op(clause, &rhs);
	char *base = xstrdup(rhs), *star = strchr(base, '*');
	int c, ok = 1;

	if (star != NULL) /* "==2.15.*": a prefix; the '.' before '*' goes too */
		star[-1] = '\0';
	c = version_cmp(v, base);
	if (star != NULL)
		ok = version_has_prefix(v, base) == (clause[0] == '=');
	else if (strncmp(clause, "~=", 2) == 0) /* >= base, same release but the last */
		ok = c >= 0 && version_cmp_n(v, base, (int)ncomponents(base) - 1) == 0;
	else if (op == 3 || strncmp(clause, "==", 2) == 0)
		ok = c == 0;
	else if (strncmp(clause, "!=", 2) == 0)
		ok = c != 0;
	else if (strncmp(clause, ">=", 2) == 0)
		ok = c >= 0;
	else if (strncmp(clause, "<=", 2) == 0)
		ok = c <= 0;
	else if (*clause == '>')
		ok = c > 0;
	else if (*clause == '<')
		ok = c < 0;
	free(base);
	return ok;
}

int compat_spec_allows(const char *spec, const char *version)
{
	return spec == NULL || *spec == '\0' || spec_each(spec, clause_allows, version);
}

const struct compat_tf_build *compat_tf_build(const struct compat *kb, const char *tf_version,
                                              int windows_native)
{
	const struct compat_tf_build *v = windows_native ? kb->tf_windows : kb->tf_linux;
	size_t n = windows_native ? kb->ntf_windows : kb->ntf_linux;

	if (tf_version == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (version_cmp_n(v[i].version, tf_version, 2) == 0)
			return &v[i];
	return NULL;
}

/* The row of a toolkit: the newest of its major.minor at or below it, else the oldest. */
static const struct compat_driver_row *driver_row(const struct compat *kb, const char *cuda)
{
	const struct compat_driver_row *best = NULL, *lowest = NULL;

	if (cuda == NULL)
		return NULL;
	for (size_t i = 0; i < kb->ndrivers; i++) {
		const struct compat_driver_row *r = &kb->drivers[i];
		if (version_cmp_n(r->cuda, cuda, 2) != 0)
			continue;
		if (lowest == NULL || version_cmp(r->cuda, lowest->cuda) < 0)
			lowest = r;
		if (version_cmp(r->cuda, cuda) <= 0 &&
		    (best == NULL || version_cmp(r->cuda, best->cuda) > 0))
			best = r;
	}
	return best ? best : lowest;
}

const char *compat_cuda_min_driver(const struct compat *kb, const char *cuda, int windows)
{
	const struct compat_driver_row *r = driver_row(kb, cuda);

	if (r == NULL)
		return NULL;
	return windows ? r->windows_min : r->linux_min;
}

static const struct compat_mvc *mvc_row(const struct compat *kb, const char *cuda)
{
	for (size_t i = 0; cuda != NULL && i < kb->nmvc; i++) {
		const struct compat_mvc *r = &kb->mvc[i];
		if (version_cmp(cuda, r->from) >= 0 &&
		    (r->below == NULL || version_cmp(cuda, r->below) < 0))
			return r;
	}
	return NULL;
}

int compat_cuda_in_family(const struct compat *kb, const char *cuda)
{
	return mvc_row(kb, cuda) != NULL;
}

const char *compat_cuda_family_floor(const struct compat *kb, const char *cuda, int windows)
{
	const struct compat_mvc *r = mvc_row(kb, cuda);

	if (r == NULL)
		return NULL;
	return windows ? r->windows_min : r->linux_min;
}

const char *compat_cuda_compat_driver(const struct compat *kb, const char *cuda, int windows)
{
	const char *floor = compat_cuda_family_floor(kb, cuda, windows);
	const char *own = compat_cuda_min_driver(kb, cuda, windows);

	if (floor != NULL && own != NULL && version_cmp(floor, own) >= 0)
		return NULL; /* the family floor does not reach below this toolkit's own */
	return floor;
}

int compat_cc_parse(const char *cc)
{
	long major, minor;

	if (cc == NULL || !version_valid(cc) || strchr(cc, '.') == NULL ||
	    strchr(strchr(cc, '.') + 1, '.') != NULL)
		return -EINVAL;
	major = version_component(cc, 0);
	minor = version_component(cc, 1);
	if (major < 0 || major > 99 || minor < 0 || minor > 9 || strlen(strchr(cc, '.') + 1) != 1)
		return -EINVAL;
	return (int)(major * 10 + minor);
}

static const struct compat_tf_kernels *kernels_row(const struct compat *kb, const char *tf)
{
	if (tf == NULL)
		return NULL;
	for (size_t i = 0; i < kb->nkernels; i++) {
		const struct compat_tf_kernels *k = &kb->kernels[i];
		if (version_cmp_n(tf, k->tf_from, 2) >= 0 &&
		    (k->tf_below == NULL || version_cmp_n(tf, k->tf_below, 2) < 0))
			return k;
	}
	return NULL;
}

int compat_tf_min_cc(const struct compat *kb, const char *tf_version)
{
	const struct compat_tf_kernels *k = kernels_row(kb, tf_version);

	return k ? compat_cc_parse(k->min_cc) : -ENOENT;
}

enum compat_kernel compat_tf_kernels_for(const struct compat *kb, const char *tf_version,
                                         const char *cc, const struct compat_tf_kernels **row)
{
	const struct compat_tf_kernels *k = kernels_row(kb, tf_version);
	int c = compat_cc_parse(cc);

	if (row != NULL)
		*row = k;
	if (k == NULL || c < 0)
		return COMPAT_KERNEL_UNKNOWN;
	if (k->nsass == 0 && k->nptx == 0)
		return c < compat_cc_parse(k->min_cc) ? COMPAT_KERNEL_NONE : COMPAT_KERNEL_UNKNOWN;
	/* SASS runs on the same major with an equal or higher minor. */
	for (size_t i = 0; i < k->nsass; i++) {
		int s = compat_cc_parse(k->sass[i]);
		if (s / 10 == c / 10 && s <= c)
			return COMPAT_KERNEL_SASS;
	}
	/* PTX is JIT-compiled for any equal or newer GPU. */
	for (size_t i = 0; i < k->nptx; i++)
		if (compat_cc_parse(k->ptx[i]) <= c)
			return COMPAT_KERNEL_PTX;
	return COMPAT_KERNEL_NONE;
}

/* The entry with the longest prefix of version (for the cuda or the cudnn key). */
static const struct compat_sonames *sonames_best(const struct compat *kb, enum compat_os os,
                                                 const char *version, int cudnn)
{
	const struct compat_sonames *best = NULL;
	size_t best_len = 0;

	if (version == NULL)
		return NULL;
	for (size_t i = 0; i < kb->nsonames; i++) {
		const struct compat_sonames *s = &kb->sonames[i];
		const char *key = cudnn ? s->cudnn : s->cuda;
		if (s->os != os || key == NULL || !version_has_prefix(version, key))
			continue;
		if (ncomponents(key) > best_len) {
			best = s;
			best_len = ncomponents(key);
		}
	}
	return best;
}

size_t compat_sonames(const struct compat *kb, int windows, const char *cuda, const char *cudnn,
                      struct strvec *out)
{
	enum compat_os os = windows ? COMPAT_WINDOWS : COMPAT_LINUX;
	const struct compat_sonames *s[2];
	size_t added = 0;

	s[0] = sonames_best(kb, os, cuda, 0);
	s[1] = sonames_best(kb, os, cudnn, 1);
	for (size_t k = 0; k < 2; k++) {
		for (size_t i = 0; s[k] != NULL && i < s[k]->nlibs; i++) {
			strvec_push(out, s[k]->libs[i]);
			added++;
		}
	}
	return added;
}

size_t compat_tf_libraries(const struct compat *kb, int windows, const char *cuda,
                           const char *cudnn, struct strvec *out)
{
	enum compat_os os = windows ? COMPAT_WINDOWS : COMPAT_LINUX;
	const struct compat_sonames *s[2];
	size_t added = 0;

	s[0] = sonames_best(kb, os, cuda, 0);
	s[1] = sonames_best(kb, os, cudnn, 1);
	for (size_t k = 0; k < 2; k++) {
		for (size_t i = 0; s[k] != NULL && i < s[k]->nlibs; i++, added++)
			strvec_push(out, s[k]->libs[i]);
		for (size_t i = 0; s[k] != NULL && i < s[k]->ncompanions; i++, added++)
			strvec_push(out, s[k]->companions[i]);
	}
	return added;
}

const struct compat_lib_component *compat_lib_component(const struct compat *kb, const char *soname)
{
	size_t stem = strcspn(soname, ".");

	for (size_t i = 0; i < kb->nlib_components; i++)
		for (size_t j = 0; j < kb->lib_components[i].nlibs; j++)
			if (strlen(kb->lib_components[i].libs[j]) == stem &&
			    strncmp(kb->lib_components[i].libs[j], soname, stem) == 0)
				return &kb->lib_components[i];
	/* cuDNN's sub-libraries (libcudnn_ops_infer.so.8) come with libcudnn. */
	for (size_t i = 0; i < kb->nlib_components; i++)
		for (size_t j = 0; j < kb->lib_components[i].nlibs; j++) {
			size_t n = strlen(kb->lib_components[i].libs[j]);
			if (strncmp(kb->lib_components[i].libs[j], soname, n) == 0 &&
			    soname[n] == '_')
				return &kb->lib_components[i];
		}
	return NULL;
}

const char *compat_tf_min_glibc(const struct compat *kb, const char *tf_version,
                                const struct compat_tf_glibc **row)
{
	if (row != NULL)
		*row = NULL;
	if (tf_version == NULL)
		return NULL;
	for (size_t i = 0; i < kb->ntf_glibc; i++) {
		const struct compat_tf_glibc *g = &kb->tf_glibc[i];

		if (version_cmp_n(tf_version, g->tf_from, 2) < 0)
			continue;
		if (g->tf_below != NULL && version_cmp_n(tf_version, g->tf_below, 2) >= 0)
			continue;
		if (row != NULL)
			*row = g;
		return g->glibc;
	}
	return NULL;
}

const char *compat_manifest_min_glibc(const struct compat *kb, const struct manifest *m,
                                      const char **why, const char **tf)
{
	const struct compat_tf_glibc *row = NULL;
	const char *v = m->versions.tensorflow.s, *need = NULL;
	*why = NULL;
	*tf = NULL;
	for (size_t i = 0; v == NULL && i < m->pip.nreqs; i++)
		if (m->pip.reqs[i].name && strcmp(m->pip.reqs[i].name, "tensorflow") == 0)
			v = m->pip.reqs[i].version;
	if (kb != NULL && compat_tf_min_glibc(kb, v, &row)) {
		need = row->glibc;
		*why = row->tag;
		*tf = v;
	}
	if (m->pip.min_glibc.set && (need == NULL || version_cmp(m->pip.min_glibc.s, need) > 0)) {
		need = m->pip.min_glibc.s;
		*why = "pip.min_glibc";
		*tf = NULL;
	}
	return need;
}

int compat_cuda_wheel_major(const struct compat *kb, const char *name)
{
	const struct compat_cuda_wheels *w = &kb->cuda_wheels;
	const char *tag;
	size_t plen;
	long major;
	char *end;

	if (w->source == NULL || name == NULL)
		return 0;
	plen = strlen(w->prefix);
	if (strncmp(name, w->prefix, plen) != 0)
		return 0;
	/* The last "-cu" followed by digits only: "nvidia-cuda-cupti-cu12". */
	tag = NULL;
	for (const char *p = name + plen; (p = strstr(p, w->major_tag)) != NULL; p++)
		tag = p;
	if (tag == NULL || tag == name + plen)
		return 0;
	tag += strlen(w->major_tag);
	if (!isdigit((unsigned char)*tag))
		return 0;
	major = strtol(tag, &end, 10);
	if (*end != '\0' || major <= 0 || major > 1000)
		return 0;
	return (int)major;
}

static int wheel_is(const struct compat *kb, const char *name, const char *stem);

int compat_cuda_wheel_is_runtime(const struct compat *kb, const char *name)
{
	return wheel_is(kb, name, kb->cuda_wheels.runtime);
}

/* name is <stem><major_tag><digits> for the stem (e.g. nvidia-cudnn). */
static int wheel_is(const struct compat *kb, const char *name, const char *stem)
{
	const char *tag = kb->cuda_wheels.major_tag;
	size_t n;

	if (stem == NULL || compat_cuda_wheel_major(kb, name) == 0)
		return 0;
	n = strlen(stem);
	return strncmp(name, stem, n) == 0 && strncmp(name + n, tag, strlen(tag)) == 0 &&
	       isdigit((unsigned char)name[n + strlen(tag)]);
}

size_t compat_pip_cuda(const struct compat *kb, const struct manifest *m,
                       const struct pip_req **first, const struct pip_req **runtime,
                       const struct pip_req **cudnn)
{
	size_t n = 0;

	if (first != NULL)
		*first = NULL;
	if (runtime != NULL)
		*runtime = NULL;
	if (cudnn != NULL)
		*cudnn = NULL;
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *r = &m->pip.reqs[i];

		if (r->name == NULL || compat_cuda_wheel_major(kb, r->name) == 0)
			continue;
		if (n++ == 0 && first != NULL)
			*first = r;
		if (runtime != NULL && *runtime == NULL &&
		    wheel_is(kb, r->name, kb->cuda_wheels.runtime))
			*runtime = r;
		if (cudnn != NULL && *cudnn == NULL && wheel_is(kb, r->name, kb->cuda_wheels.cudnn))
			*cudnn = r;
	}
	return n;
}

const char *compat_stack_cuda(const struct compat *kb, const struct manifest *m,
                              const struct pip_req **from_wheel)
{
	const struct pip_req *rt = NULL;

	if (from_wheel != NULL)
		*from_wheel = NULL;
	if (!m->cuda.set && kb != NULL && compat_pip_cuda(kb, m, NULL, &rt, NULL) > 0 &&
	    rt != NULL && rt->version != NULL) {
		if (from_wheel != NULL)
			*from_wheel = rt;
		return rt->version;
	}
	if (m->cuda.version.set && m->cuda.version.s != NULL)
		return m->cuda.version.s;
	return m->versions.cuda.s;
}
