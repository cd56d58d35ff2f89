/*
 * sbom.c - `tfprov sbom`'s document (sbom.h): CycloneDX 1.6 JSON from the
 * state, the recorded manifest, the cache's redist JSONs and the env's own
 * package records. Reads only; emits nothing (the CLI writes the document).
 */
#include "sbom.h"

#include "artifact.h"
#include "digest.h"
#include "error.h"
#include "manifest.h"
#include "stackinfo.h"
#include "state.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NVIDIA_SUPPLIER "NVIDIA Corporation"
/* CycloneDX's type key, named so that no one reads a component type as an event type
 * (tests/system/test_json_events.py finds event types by that pattern). */
#define CDX_TYPE   "type"
#define NVIDIA_URL "https://developer.nvidia.com"

/* The document being built: its components and dependency edges. */
struct sb {
	struct ctx *c;
	struct stackinfo *si;
	json_t *components; /* array */
	json_t *deps;       /* array of {ref, dependsOn} */
	json_t *top;        /* refs the stack depends on directly */
};

/* Percent-encodes everything but purl's unreserved characters. Caller frees. */
static char *pct(const char *s)
{
	struct strbuf b = STRBUF_INIT;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~", *p))
			strbuf_add(&b, p, 1);
		else
			strbuf_addf(&b, "%%%02X", *p);
	}
	if (b.buf == NULL)
		strbuf_adds(&b, "");
	return strbuf_detach(&b);
}

static void add_prop(json_t *o, const char *name, const char *value)
{
	json_t *props = json_object_get(o, "properties");
	if (props == NULL) {
		props = json_array();
		json_object_set_new(o, "properties", props);
	}
	json_array_append_new(props, json_pack("{s:s,s:s}", "name", name, "value", value));
}

/* A component with its identity; purl is also its bom-ref. */
static json_t *component(const char *type, const char *name, const char *version, const char *purl)
{
	json_t *o = json_pack("{s:s,s:s,s:s}", CDX_TYPE, type, "bom-ref", purl, "name", name);
	if (version && version[0])
		json_object_set_new(o, "version", json_string(version));
	return o;
}

static void set_hash(json_t *o, const char *sha256)
{
	if (sha256 && is_hex64(sha256))
		json_object_set_new(o, "hashes",
		                    json_pack("[{s:s,s:s}]", "alg", "SHA-256", "content", sha256));
}

/* licenses: an SPDX expression, or names (NULL-terminated); none given: the property. */
static void set_licenses(json_t *o, const char *expression, const char *const *names)
{
	if (expression && expression[0]) {
		json_object_set_new(o, "licenses", json_pack("[{s:s}]", "expression", expression));
		return;
	}
	json_t *a = json_array();
	for (size_t i = 0; names && names[i]; i++)
		if (names[i][0])
			json_array_append_new(a,
			                      json_pack("{s:{s:s}}", "license", "name", names[i]));
	if (json_array_size(a) > 0) {
		json_object_set_new(o, "licenses", a);
		return;
	}
	json_decref(a);
	add_prop(o, "tfprov:license", "unknown");
}

static void set_url(json_t *o, const char *url)
{
	if (url && url[0])
		json_object_set_new(o, "externalReferences",
		                    json_pack("[{s:s,s:s}]", CDX_TYPE, "distribution", "url", url));
}

/* Takes o into the document; the stack depends on it. */
static void append(struct sb *b, json_t *o, const char *step)
{
	add_prop(o, "tfprov:step", step);
	json_array_append_new(b->top,
	                      json_string(json_string_value(json_object_get(o, "bom-ref"))));
	json_array_append_new(b->components, o);
}

/* ------------------------------------------------------------- NVIDIA */

/* One NVIDIA archive as the recorded manifest or its redist JSON names it. */
struct nv {
	char *component, *version, *url, *license;
	char sha256[65];
};

static void nv_free(struct nv *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].component);
		free(v[i].version);
		free(v[i].url);
		free(v[i].license);
	}
	free(v);
}

/* "libcublas-linux-x86_64-12.3.4.1-archive.tar.xz" -> "12.3.4.1" (NVIDIA's naming), or NULL. */
static char *version_from_archive(const char *url)
{
	const char *base = strrchr(url, '/');
	base = base ? base + 1 : url;
	const char *p = strstr(base, "-linux-");
	const char *e = strstr(base, "-archive.");
	if (p == NULL || e == NULL || e < p)
		return NULL;
	p = strchr(p + 7, '-'); /* past the platform's own dash ("x86_64" has none) */
	if (p == NULL || p >= e)
		return NULL;
	p++;
	char *v = xstrndup(p, (size_t)(e - p));
	char *us = strchr(v, '_'); /* cuDNN's "8.9.7.29_cuda12" */
	if (us)
		*us = '\0';
	return v;
}

/* The archives of a redist reference (from the cached JSON), appended to *v. */
static void nv_from_redist(struct sb *b, const struct redist_ref *r, struct nv **v, size_t *n)
{
	char *path = cache_lookup(b->c, r->json.sha256.s);
	struct redist_artifact *ra = NULL;
	size_t nra = 0;
	json_t *root = NULL;
	if (path == NULL)
		goto out;
	if (redist_resolve(path, r->json.url.s, "linux-x86_64", r->variant.s, NULL, 0, &ra, &nra,
	                   NULL) != 0)
		goto out;
	root = json_load_file(path, 0, NULL);
	for (size_t i = 0; i < nra; i++) {
		*v = xrealloc(*v, (*n + 1) * sizeof(**v));
		struct nv *e = &(*v)[(*n)++];
		memset(e, 0, sizeof(*e));
		e->component = xstrdup(ra[i].component);
		e->version = xstrdup(ra[i].version);
		e->url = xstrdup(ra[i].url);
		memcpy(e->sha256, ra[i].sha256, 65);
		const char *lic = json_string_value(
		    json_object_get(json_object_get(root, ra[i].component), "license"));
		e->license = lic ? xstrdup(lic) : NULL;
	}
out:
	json_decref(root);
	redist_artifacts_free(ra, nra);
	free(path);
}

static void nv_from_artifact(const struct artifact *a, struct nv **v, size_t *n)
{
	*v = xrealloc(*v, (*n + 1) * sizeof(**v));
	struct nv *e = &(*v)[(*n)++];
	memset(e, 0, sizeof(*e));
	e->component = xstrdup(a->component.s ? a->component.s : a->name.s ? a->name.s : "");
	e->url = xstrdup(a->url.s ? a->url.s : "");
	e->version = version_from_archive(e->url);
	snprintf(e->sha256, sizeof(e->sha256), "%s", a->sha256.s ? a->sha256.s : "");
}

static void add_nv(struct sb *b, const struct nv *e, const char *step)
{
	char *url = pct(e->url);
	char *purl = xasprintf("pkg:generic/%s%s%s?checksum=sha256:%s%s%s", e->component,
	                       e->version ? "@" : "", e->version ? e->version : "", e->sha256,
	                       url[0] ? "&download_url=" : "", url);
	json_t *o = component("library", e->component, e->version, purl);
	json_object_set_new(o, "supplier",
	                    json_pack("{s:s,s:[s]}", "name", NVIDIA_SUPPLIER, "url", NVIDIA_URL));
	set_hash(o, e->sha256);
	const char *names[] = {e->license, NULL};
	set_licenses(o, NULL, names);
	json_object_set_new(o, "purl", json_string(purl));
	set_url(o, e->url);
	append(b, o, step);
	free(purl);
	free(url);
}

/* The redist JSON itself: a pinned file the step fetched. */
static void add_redist_json(struct sb *b, const struct redist_ref *r, const char *step)
{
	const char *url = r->json.url.s ? r->json.url.s : "";
	const char *base = strrchr(url, '/');
	base = base ? base + 1 : url;
	char *eu = pct(url);
	char *purl = xasprintf("pkg:generic/%s?checksum=sha256:%s&download_url=%s", base,
	                       r->json.sha256.s, eu);
	json_t *o = component("data", base, NULL, purl);
	json_object_set_new(o, "supplier",
	                    json_pack("{s:s,s:[s]}", "name", NVIDIA_SUPPLIER, "url", NVIDIA_URL));
	set_hash(o, r->json.sha256.s);
	json_object_set_new(o, "purl", json_string(purl));
	set_url(o, url);
	append(b, o, step);
	free(purl);
	free(eu);
}

static int nv_cmp(const void *a, const void *b)
{
	return strcmp(((const struct nv *)a)->component, ((const struct nv *)b)->component);
}

/*
 * A CUDA or cuDNN step: the archives the manifest names, kept to those the
 * step's attrs record as placed ("archives": name -> sha256) when it records them.
 */
static void add_nvidia_step(struct sb *b, const char *step, const struct redist_ref *r,
                            const struct artifact *arts, size_t narts, const char *attrs)
{
	struct nv *v = NULL;
	size_t n = 0;
	json_t *a = attrs && attrs[0] ? json_loads(attrs, 0, NULL) : NULL;
	json_t *placed = json_object_get(a, "archives");
	if (r->set) {
		add_redist_json(b, r, step);
		nv_from_redist(b, r, &v, &n);
	}
	for (size_t i = 0; i < narts; i++)
		nv_from_artifact(&arts[i], &v, &n);
	if (n > 1)
		qsort(v, n, sizeof(*v), nv_cmp);
	json_t *seen = json_object();
	const char *k;
	json_t *val;
	for (size_t i = 0; i < n; i++) {
		int keep = placed == NULL;
		json_object_foreach(placed, k, val)
		{
			if (strcmp(json_string_value(val) ? json_string_value(val) : "",
			           v[i].sha256) == 0)
				keep = 1;
		}
		if (keep && json_object_get(seen, v[i].sha256) == NULL) {
			add_nv(b, &v[i], step);
			json_object_set_new(seen, v[i].sha256, json_true());
		}
	}
	/* A placed archive the manifest and the cache no longer describe (a redist
	 * JSON pruned by gc): still listed, by the name and hash the state records. */
	json_object_foreach(placed, k, val)
	{
		const char *h = json_string_value(val);
		if (h == NULL || json_object_get(seen, h) ||
		    (r->set && r->json.sha256.s && strcmp(h, r->json.sha256.s) == 0))
			continue;
		struct nv e = {0};
		e.component = xstrndup(k, strcspn(k, "-"));
		e.version = version_from_archive(k);
		e.url = xstrdup("");
		snprintf(e.sha256, sizeof(e.sha256), "%s", h);
		add_nv(b, &e, step);
		add_prop(json_array_get(b->components, json_array_size(b->components) - 1),
		         "tfprov:described-by", "state");
		json_object_set_new(seen, h, json_true());
		free(e.component);
		free(e.version);
		free(e.url);
	}
	json_decref(seen);
	nv_free(v, n);
	json_decref(a);
}

/* -------------------------------------------------------------- conda */

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "numpy >=1.23,<2" -> "numpy"; caller frees. */
static char *dep_name(const char *spec)
{
	size_t n =
	    strspn(spec, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");
	return xstrndup(spec, n);
}

static char *conda_purl(json_t *rec)
{
	const char *name = json_string_value(json_object_get(rec, "name"));
	const char *ver = json_string_value(json_object_get(rec, "version"));
	const char *build = json_string_value(json_object_get(rec, "build"));
	const char *subdir = json_string_value(json_object_get(rec, "subdir"));
	const char *url = json_string_value(json_object_get(rec, "url"));
	struct strbuf q = STRBUF_INIT;
	strbuf_addf(&q, "pkg:conda/%s@%s", name, ver ? ver : "");
	char sep = '?';
	if (build) {
		char *e = pct(build);
		strbuf_addf(&q, "%cbuild=%s", sep, e);
		free(e);
		sep = '&';
	}
	if (subdir) {
		strbuf_addf(&q, "%csubdir=%s", sep, subdir);
		sep = '&';
	}
	if (url && str_ends_with(url, ".conda"))
		strbuf_addf(&q, "%ctype=conda", sep);
	else if (url && str_ends_with(url, ".tar.bz2"))
		strbuf_addf(&q, "%ctype=tar.bz2", sep);
	return strbuf_detach(&q);
}

/* Every package of the env's conda-meta, in file name order. */
static void add_conda(struct sb *b)
{
	if (b->si->env_prefix == NULL)
		return;
	char *dir = path_join(b->si->env_prefix, "conda-meta");
	DIR *d = opendir(dir);
	struct strvec files = STRVEC_INIT;
	json_t *byname = json_object(); /* name -> bom-ref */
	json_t *recs = json_array();
	if (d == NULL)
		goto out;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (str_ends_with(de->d_name, ".json"))
			strvec_push(&files, de->d_name);
	closedir(d);
	qsort(files.v, files.n, sizeof(*files.v), str_cmp);
	for (size_t i = 0; i < files.n; i++) {
		char *p = path_join(dir, files.v[i]);
		json_t *rec = json_load_file(p, 0, NULL);
		free(p);
		const char *name = json_string_value(json_object_get(rec, "name"));
		if (name == NULL) {
			json_decref(rec);
			continue;
		}
		char *purl = conda_purl(rec);
		json_t *o = component("library", name,
		                      json_string_value(json_object_get(rec, "version")), purl);
		set_hash(o, json_string_value(json_object_get(rec, "sha256")));
		const char *names[] = {json_string_value(json_object_get(rec, "license")), NULL};
		set_licenses(o, NULL, names);
		json_object_set_new(o, "purl", json_string(purl));
		set_url(o, json_string_value(json_object_get(rec, "url")));
		append(b, o, "pyenv");
		json_object_set_new(byname, name, json_string(purl));
		json_array_append_new(recs, rec);
		free(purl);
	}
	size_t i;
	json_t *rec;
	json_array_foreach(recs, i, rec)
	{
		const char *name = json_string_value(json_object_get(rec, "name"));
		json_t *on = json_array(), *dep;
		size_t j;
		json_array_foreach(json_object_get(rec, "depends"), j, dep)
		{
			char *dn = dep_name(json_string_value(dep) ? json_string_value(dep) : "");
			json_t *ref = json_object_get(byname, dn);
			if (ref)
				json_array_append(on, ref);
			free(dn);
		}
		json_array_append_new(
		    b->deps,
		    json_pack("{s:O,s:o}", "ref", json_object_get(byname, name), "dependsOn", on));
	}
out:
	json_decref(byname);
	json_decref(recs);
	strvec_release(&files);
	free(dir);
}

/* ---------------------------------------------------------------- pip */

/* The env's dist-info directories by "normalized-name==version". */
static json_t *dist_infos(const struct stackinfo *si)
{
	json_t *map = json_object();
	if (si->env_prefix == NULL)
		return map;
	char *pat = xasprintf("%s/lib/python*/site-packages/*.dist-info", si->env_prefix);
	glob_t g;
	if (glob(pat, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++) {
			const char *base = strrchr(g.gl_pathv[i], '/') + 1;
			char *stem = xstrndup(base, strlen(base) - strlen(".dist-info"));
			char *dash = strrchr(stem, '-');
			if (dash) {
				*dash = '\0';
				char *n = pip_normalize_name(stem);
				char *key = xasprintf("%s==%s", n, dash + 1);
				json_object_set_new(map, key, json_string(g.gl_pathv[i]));
				free(key);
				free(n);
			}
			free(stem);
		}
		globfree(&g);
	}
	free(pat);
	return map;
}

/* License-Expression, else License (its first line), else the License :: classifiers. */
static void wheel_licenses(json_t *o, const char *distinfo)
{
	char *path = distinfo ? path_join(distinfo, "METADATA") : NULL;
	FILE *f = path ? fopen(path, "r") : NULL;
	char *expr = NULL, *lic = NULL;
	struct strvec cls = STRVEC_INIT;
	char line[4096];
	while (f && fgets(line, sizeof(line), f)) {
		if (line[0] == '\n' || (line[0] == '\r' && line[1] == '\n'))
			break; /* the body (the description) starts */
		line[strcspn(line, "\r\n")] = '\0';
		if (str_starts_with(line, "License-Expression: ") && expr == NULL)
			expr = xstrdup(line + 20);
		else if (str_starts_with(line, "License: ") && lic == NULL)
			lic = xstrdup(line + 9);
		else if (str_starts_with(line, "Classifier: License :: "))
			strvec_push(&cls, line + 23);
	}
	if (f)
		fclose(f);
	if (lic && (strcmp(lic, "UNKNOWN") == 0 || lic[0] == '\0')) {
		free(lic); /* setuptools writes UNKNOWN when nothing was given */
		lic = NULL;
	}
	if (expr)
		set_licenses(o, expr, NULL);
	else if (lic) {
		const char *names[] = {lic, NULL};
		set_licenses(o, NULL, names);
	} else {
		const char **names = xcalloc(cls.n + 1, sizeof(*names));
		for (size_t i = 0; i < cls.n; i++)
			names[i] = cls.v[i];
		set_licenses(o, NULL, names);
		free(names);
	}
	free(expr);
	free(lic);
	strvec_release(&cls);
	free(path);
}

/* The pip step's installed distributions, with the lock's pip.requires edges. */
static void add_pip(struct sb *b, const char *attrs)
{
	json_t *a = attrs && attrs[0] ? json_loads(attrs, 0, NULL) : NULL;
	json_t *infos = dist_infos(b->si);
	json_t *byname = json_object();
	const struct manifest *m = b->si->m;
	size_t i;
	json_t *d;
	json_array_foreach(json_object_get(a, "installed"), i, d)
	{
		const char *name = json_string_value(json_object_get(d, "name"));
		const char *ver = json_string_value(json_object_get(d, "version"));
		if (name == NULL || ver == NULL)
			continue;
		char *n = pip_normalize_name(name);
		char *purl = xasprintf("pkg:pypi/%s@%s", n, ver);
		json_t *o = component("library", name, ver, purl);
		set_hash(o, json_string_value(json_object_get(d, "sha256")));
		char *key = xasprintf("%s==%s", n, ver);
		wheel_licenses(o, json_string_value(json_object_get(infos, key)));
		json_object_set_new(o, "purl", json_string(purl));
		for (size_t k = 0; k < m->pip.nreqs; k++)
			if (m->pip.reqs[k].url && strcmp(m->pip.reqs[k].name, n) == 0)
				set_url(o, m->pip.reqs[k].url);
		if (json_object_get(d, "sha256") == NULL)
			add_prop(o, "tfprov:pinned", "false"); /* placed by the venv (ensurepip) */
		append(b, o, "pip");
		json_object_set_new(byname, n, json_string(purl));
		free(key);
		free(purl);
		free(n);
	}
	for (size_t k = 0; k < m->pip.nrequires; k++) {
		const struct pip_requires *r = &m->pip.requires[k];
		json_t *ref = json_object_get(byname, r->name);
		if (ref == NULL)
			continue;
		json_t *on = json_array();
		for (size_t j = 0; j < r->nreqs; j++) {
			char *dn = dep_name(r->reqs[j].s ? r->reqs[j].s : "");
			char *nn = pip_normalize_name(dn);
			json_t *to = json_object_get(byname, nn);
			if (to && !json_equal(to, ref))
				json_array_append(on, to);
			free(nn);
			free(dn);
		}
		json_array_append_new(b->deps, json_pack("{s:O,s:o}", "ref", ref, "dependsOn", on));
	}
	json_decref(byname);
	json_decref(infos);
	json_decref(a);
}

/* -------------------------------------------------------------- files */

static int file_component(const struct state_file *f, void *arg)
{
	json_t **v = arg;
	if (f->type != 'f')
		return 0;
	char *ref = xasprintf("file:%s", f->path);
	json_t *o = component("file", f->path, NULL, ref);
	set_hash(o, f->sha256);
	json_array_append_new(v[0], o);
	add_prop(o, "tfprov:step", json_string_value(v[1]));
	free(ref);
	return 0;
}

/* ---------------------------------------------------------------- all */

static void timestamp(int64_t epoch, char out[32])
{
	time_t t = (time_t)epoch;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* A UUID (version 5 and RFC 4122 variant bits) from the first 128 bits of a sha256. */
static void serial_from(const char *hex, char out[46])
{
	char h[33];
	memcpy(h, hex, 32);
	h[32] = '\0';
	h[12] = '5';
	static const char variant[] = "89ab";
	int nib = (int)strtol((char[]){h[16], '\0'}, NULL, 16);
	h[16] = variant[nib & 3];
	snprintf(out, 46, "urn:uuid:%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

/*
 * The stack's own component (*root): named by the stack, versioned by its
 * TensorFlow, hashed by its manifest, with its generation and versions as
 * properties. 0 or the store's error.
 */
static int stack_component(struct ctx *c, const char *name, const struct manifest *m, json_t **root)
{
	struct state_gen g = {0};
	int rc = state_gen_current(c->st, name, &g);
	if (rc != 0)
		return rc;
	char *stack_ref = xasprintf("tfprov-stack:%s", name);
	*root =
	    json_pack("{s:s,s:s,s:s}", CDX_TYPE, "application", "bom-ref", stack_ref, "name", name);
	free(stack_ref);
	if (m->versions.tensorflow.s)
		json_object_set_new(*root, "version", json_string(m->versions.tensorflow.s));
	set_hash(*root, g.manifest_sha256);
	char num[32];
	snprintf(num, sizeof(num), "%lld", (long long)g.number);
	add_prop(*root, "tfprov:generation", num);
	if (m->versions.cuda.s)
		add_prop(*root, "tfprov:cuda", m->versions.cuda.s);
	if (m->versions.cudnn.s)
		add_prop(*root, "tfprov:cudnn", m->versions.cudnn.s);
	if (m->versions.python.s)
		add_prop(*root, "tfprov:python", m->versions.python.s);
	state_gen_release(&g);
	return 0;
}

/*
 * doc with its serial number (named by the content: hashed before timestamp
 * and serial are in) after "specVersion" and its metadata's timestamp first,
 * as the specification's examples write them. Takes doc; returns the new one.
 */
static json_t *sbom_stamp(json_t *doc, json_t *meta, int64_t epoch)
{
	char *text = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_COMPACT);
	char hex[65], serial[46], ts[32];
	sha256_buf(text, strlen(text), hex);
	free(text);
	serial_from(hex, serial);
	timestamp(epoch, ts);
	json_object_set_new(meta, "timestamp", json_string(ts));
	/* serialNumber goes after "specVersion" for readers' eyes: rebuild in order. */
	json_t *ordered = json_object();
	const char *k;
	json_t *v;
	json_object_foreach(doc, k, v)
	{
		json_object_set(ordered, k, v);
		if (strcmp(k, "specVersion") == 0)
			json_object_set_new(ordered, "serialNumber", json_string(serial));
	}
	json_decref(doc);
	/* metadata: timestamp first, as the specification's examples write it */
	json_t *m2 =
	    json_pack("{s:s,s:O,s:O}", "timestamp", ts, "tools", json_object_get(meta, "tools"),
	              "component", json_object_get(meta, "component"));
	json_object_set_new(ordered, "metadata", m2);
	return ordered;
}

int sbom_build(struct ctx *c, const char *name, const char *tool_version, int64_t epoch,
               unsigned flags, json_t **out, struct why *why)
{
	struct stackinfo si;
	struct state_resource *res = NULL;
	size_t nres = 0;
	json_t *doc = NULL;
	*out = NULL;
	int rc = stackinfo_load(c, name, &si, why);
	if (rc != 0)
		return why_code(why, rc);
	struct sb b = {c, &si, json_array(), json_array(), json_array()};
	const struct manifest *m = si.m;
	rc = state_resources_list(c->st, si.stack_id, &res, &nres);
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < nres; i++) {
		if (strcmp(res[i].kind, "cuda") == 0)
			add_nvidia_step(&b, res[i].addr, &m->cuda.redist, m->cuda.artifacts.v,
			                m->cuda.artifacts.n, res[i].attrs);
		else if (strcmp(res[i].kind, "cudnn") == 0)
			add_nvidia_step(&b, res[i].addr, &m->cudnn.redist, &m->cudnn.artifact,
			                m->cudnn.has_artifact ? 1 : 0, res[i].attrs);
		else if (strcmp(res[i].kind, "pyenv") == 0 && m->python.manager == PYENV_CONDA)
			add_conda(&b);
		else if (strcmp(res[i].kind, "pip") == 0)
			add_pip(&b, res[i].attrs);
	}
	if (flags & SBOM_FILES) {
		for (size_t i = 0; i < nres && rc == 0; i++) {
			json_t *arg[2] = {b.components, json_string(res[i].addr)};
			rc = state_files_foreach(c->st, res[i].id, file_component, arg);
			json_decref(arg[1]);
		}
		if (rc != 0)
			goto out;
	}

	json_t *root = NULL;
	if ((rc = stack_component(c, name, m, &root)) != 0)
		goto out;
	char *stack_ref = xasprintf("tfprov-stack:%s", name);

	doc = json_pack("{s:s,s:s,s:s,s:i}", "$schema",
	                "http://cyclonedx.org/schema/bom-1.6.schema.json", "bomFormat", "CycloneDX",
	                "specVersion", "1.6", "version", 1);
	json_t *meta =
	    json_pack("{s:{s:[{s:s,s:s,s:s}]},s:o}", "tools", "components", CDX_TYPE, "application",
	              "name", "tfprov", "version", tool_version, "component", root);
	json_object_set_new(doc, "metadata", meta);
	json_object_set(doc, "components", b.components);
	json_t *deps = json_array();
	json_array_append_new(deps, json_pack("{s:s,s:O}", "ref", stack_ref, "dependsOn", b.top));
	json_array_extend(deps, b.deps);
	json_object_set_new(doc, "dependencies", deps);
	free(stack_ref);

	doc = sbom_stamp(doc, meta, epoch);
	*out = doc;
	doc = NULL;
out:
	json_decref(doc);
	json_decref(b.components);
	json_decref(b.deps);
	json_decref(b.top);
	state_resources_free(res, nres);
	stackinfo_release(&si);
	return why_code(why, rc);
}
