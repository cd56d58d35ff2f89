/*
 * wheel.c - the native wheel installer (see wheel.h for what it writes and
 * why the live env is never touched).
 *
 * Order of work:
 *   1. ask the env's interpreter for its scheme paths (one short process);
 *   2. hard-link copy of the env into a journaled stage directory;
 *   3. uninstall older versions of the wheels' distributions from the copy;
 *   4. start the byte-compiler (the env's python, one worker per --jobs);
 *   5. per wheel, on a pool of threads, largest first: unpack into a private
 *      directory of the copy (each .py file goes to the byte-compiler the
 *      moment it is written), check each file against the wheel's RECORD,
 *      rename it into its scheme, write the entry-point scripts; then the
 *      remaining .py files (from <dist>.data/) to the byte-compiler, and
 *      wait for it;
 *   6. per wheel, in parallel: INSTALLER, REQUESTED, direct_url.json, RECORD;
 *   7. the copy replaces the env (txn_replace_dir).
 * Paths inside the copy are kept relative to it ("rel"); `stage` is its host
 * path and `final` the env's host path, which the scripts and .pyc files
 * name, since that is where they will be.
 */
#include "wheel_int.h"
#include "pyenv_int.h"

#include "artifact.h"
#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "place.h"
#include "pool.h"
#include "python.h"
#include "python_int.h"
#include "fs.h"
#include "spawn.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Wheels larger than this are decoded by several threads (unpack_zip_parallel). */
#define WHEEL_SHARE_MIN (16 << 20)
/* At most this many decoders for one wheel (each holds up to about 16 MiB:
 * its queue and a libdeflate entry in and out), as artifacts.c's DECODERS_MAX. */
#define WHEEL_SHARES_MAX 8

void whl_fail(struct whl *w, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	why_vfirst_of(&w->why, strrchr(w->src->path, '/') + 1, err, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------ small helpers */

/* The relative path from directory `from` to `to` (both relative to one root). */
char *relpath(const char *from, const char *to)
{
	const char *a = from, *b = to;
	while (*a && *b) {
		size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
		if (la != lb || strncmp(a, b, la) != 0 || b[lb] != '/')
			break;
		a += la + (a[la] == '/');
		b += lb + 1;
	}
	struct strbuf sb = STRBUF_INIT;
	while (*a) {
		strbuf_adds(&sb, "../");
		a += strcspn(a, "/");
		a += *a == '/';
	}
	strbuf_adds(&sb, b);
	return strbuf_detach(&sb);
}

void add_record(struct whl *w, const char *relfile, const char *hex, int64_t size)
{
	char *rp = relpath(w->libdir, relfile);
	char h[RECORD_HASH_MAX] = "";
	if (hex)
		record_hash_encode(hex, h);
	if (size >= 0)
		strvec_pushf(&w->records, "%s\x1f%s\x1f%lld", rp, h, (long long)size);
	else
		strvec_pushf(&w->records, "%s\x1f\x1f", rp);
	free(rp);
}

/* Writes a generated file at rel (in the copy) and records it. */
int put_generated(struct job *j, struct whl *w, const char *rel, const char *text, unsigned mode)
{
	char *host = path_join(j->stage, rel);
	char *parent = xstrndup(host, (size_t)(strrchr(host, '/') - host));
	mkdirs_at(AT_FDCWD, parent, 0755);
	int rc = fs_write_new(host, text, strlen(text), mode);
	if (rc != 0) {
		whl_fail(w, TF_EIO, "cannot write %s: %s", rel, strerror(-rc));
	} else {
		char hex[65];
		sha256_buf(text, strlen(text), hex);
		add_record(w, rel, hex, (int64_t)strlen(text));
	}
	free(parent);
	free(host);
	return rc;
}

/* ------------------------------------------------------------ the env */

static const char scheme_src[] =
    "import json, os, sys, sysconfig\n"
    "p = sysconfig.get_paths()\n"
    "xy = '%d.%d' % sys.version_info[:2]\n"
    "venv = sys.prefix != sys.base_prefix\n"
    "inc = os.path.join(sys.prefix, 'include', 'site', 'python' + xy) if venv else "
    "p['include']\n"
    "print(json.dumps({'prefix': sys.prefix, 'purelib': p['purelib'], 'platlib': "
    "p['platlib'], 'scripts': p['scripts'], 'data': p['data'], 'headers': inc, 'xy': xy, "
    "'tag': sys.implementation.cache_tag or ''}))\n";

static void scheme_release(struct scheme *s)
{
	free(s->purelib);
	free(s->platlib);
	free(s->scripts);
	free(s->data);
	free(s->headers);
	free(s->xy);
	free(s->cache_tag);
	free(s->exe);
}

/* A scheme path of the env, relative to its prefix ("" for the prefix itself). */
static char *scheme_rel(json_t *o, const char *key, const char *prefix)
{
	const char *v = json_string_value(json_object_get(o, key));
	size_t n = strlen(prefix);
	if (v == NULL || strncmp(v, prefix, n) != 0 || (v[n] != '/' && v[n] != '\0'))
		return NULL;
	v += n;
	while (*v == '/')
		v++;
	if (*v && !fs_rel_is_safe(v))
		return NULL;
	return xstrdup(v);
}

static int query_scheme(struct ctx *c, const char *final, struct scheme *s, struct why *why)
{
	char *py = xasprintf("%s/bin/python", final);
	char *argv[] = {py, "-I", "-c", (char *)scheme_src, NULL};
	struct spawn_result r = {0};
	json_t *o = NULL;
	int rc = pyenv_run_python(c, argv, 120, &r);
	if (rc == 0 && r.status == 0)
		o = json_loads(r.out.buf ? r.out.buf : "", 0, NULL);
	const char *prefix = json_string_value(json_object_get(o, "prefix"));
	if (prefix) {
		s->purelib = scheme_rel(o, "purelib", prefix);
		s->platlib = scheme_rel(o, "platlib", prefix);
		s->scripts = scheme_rel(o, "scripts", prefix);
		s->data = scheme_rel(o, "data", prefix);
		s->headers = scheme_rel(o, "headers", prefix);
		s->xy = xstrdup(json_string_value(json_object_get(o, "xy")) ?: "");
		s->cache_tag = xstrdup(json_string_value(json_object_get(o, "tag")) ?: "");
	}
	if (!s->purelib || !s->platlib || !s->scripts || !s->data || !s->headers ||
	    !s->purelib[0] || !s->scripts[0])
		rc = why_fail(why, TF_EFAIL,
		              "%s cannot tell its install scheme (or it lies outside the env): %s",
		              py,
		              r.why.msg   ? r.why.msg
		              : r.err.buf ? r.err.buf
		                          : "no output");
	s->exe = py;
	json_decref(o);
	spawn_result_release(&r);
	return rc;
}

/* ------------------------------------------------------------ install one wheel */

/* "key: value" of a WHEEL/METADATA-style file; NULL when absent. */
char *header_value(const char *text, const char *key)
{
	size_t kl = strlen(key);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncasecmp(l, key, kl) == 0 && l[kl] == ':') {
			const char *v = l + kl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			return xstrndup(v, strcspn(v, "\r\n"));
		}
	}
	return NULL;
}

struct ep {
	char *name, *module, *attr;
};

/* [console_scripts] and [gui_scripts] of entry_points.txt, in file order. */
static int parse_entry_points(struct whl *w, const char *text, struct ep **out, size_t *nout)
{
	int in = 0;
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char *line = xstrndup(l, strcspn(l, "\r\n"));
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '[') {
			in = strncmp(s, "[console_scripts]", 17) == 0 ||
			     strncmp(s, "[gui_scripts]", 13) == 0;
		} else if (in && *s && *s != '#' && *s != ';' && strchr(s, '=')) {
			char *eq = strchr(s, '=');
			char *name = xstrndup(s, (size_t)(eq - s));
			for (size_t k = strlen(name); k > 0 && isspace((unsigned char)name[k - 1]);)
				name[--k] = '\0';
			char *v = eq + 1;
			while (isspace((unsigned char)*v))
				v++;
			v[strcspn(v, " \t[")] = '\0';
			char *colon = strchr(v, ':');
			if (!colon || colon == v || !colon[1] || !name[0] || strchr(name, '/')) {
				whl_fail(
				    w, TF_EFAIL,
				    "invalid script entry point %s (a module:callable is required)",
				    name);
				free(name);
				free(line);
				return TF_EFAIL;
			}
			*out = xrealloc(*out, (*nout + 1) * sizeof(**out));
			(*out)[*nout].name = name;
			(*out)[*nout].module = xstrndup(v, (size_t)(colon - v));
			(*out)[*nout].attr = xstrdup(colon + 1);
			(*nout)++;
		}
		free(line);
	}
	return 0;
}

/* distlib's shebang for pip's wrappers: /bin/sh trampoline when too long or spaced. */
static char *shebang(const char *exe)
{
	if (strlen(exe) + 3 <= 127 && strchr(exe, ' ') == NULL)
		return xasprintf("#!%s\n", exe);
	return xasprintf("#!/bin/sh\n'''exec' %s \"$0\" \"$@\"\n' '''\n", exe);
}

static void write_script(struct job *j, struct whl *w, const char *name, const struct ep *e)
{
	char *rel = path_join(j->sc->scripts, name);
	char *sb = shebang(j->sc->exe);
	char *imp = xstrndup(e->attr, strcspn(e->attr, "."));
	/* pip 23's wrapper (distlib SCRIPT_TEMPLATE), byte for byte. */
	char *text = xasprintf("%s# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom %s import "
	                       "%s\nif __name__ == '__main__':\n    sys.argv[0] = "
	                       "re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    "
	                       "sys.exit(%s())\n",
	                       sb, e->module, imp, e->attr);
	put_generated(j, w, rel, text, 0755);
	free(text);
	free(imp);
	free(sb);
	free(rel);
}

static int matches(const char *s, const char *prefix, int dotted)
{
	/* pip(\d+(\.\d+)?)?$ and easy_install(-\d+\.\d+)?$ */
	size_t n = strlen(prefix);
	if (strncmp(s, prefix, n) != 0)
		return 0;
	s += n;
	if (*s == '\0')
		return 1;
	if (dotted && *s++ != '-')
		return 0;
	if (!isdigit((unsigned char)*s))
		return 0;
	while (isdigit((unsigned char)*s))
		s++;
	if (*s == '.' && isdigit((unsigned char)s[1]))
		for (s++; isdigit((unsigned char)*s);)
			s++;
	else if (dotted)
		return 0;
	return *s == '\0';
}

/* Scripts for the entry points, with pip's extra names for pip and easy_install. */
static void write_entry_points(struct job *j, struct whl *w, const struct ep *eps, size_t n)
{
	const struct ep *pip = NULL, *ei = NULL;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(eps[i].name, "pip") == 0)
			pip = &eps[i];
		if (strcmp(eps[i].name, "easy_install") == 0)
			ei = &eps[i];
	}
	for (size_t i = 0; i < n && !w->why.code; i++) {
		if ((pip && matches(eps[i].name, "pip", 0)) ||
		    (ei && matches(eps[i].name, "easy_install", 1)))
			continue;
		write_script(j, w, eps[i].name, &eps[i]);
	}
	if (pip) {
		char *n1 = xasprintf("pip%.*s", (int)strcspn(j->sc->xy, "."), j->sc->xy);
		char *n2 = xasprintf("pip%s", j->sc->xy);
		write_script(j, w, "pip", pip);
		write_script(j, w, n1, pip);
		write_script(j, w, n2, pip);
		free(n1);
		free(n2);
	}
	if (ei) {
		char *n2 = xasprintf("easy_install-%s", j->sc->xy);
		write_script(j, w, "easy_install", ei);
		write_script(j, w, n2, ei);
		free(n2);
	}
}

struct rec_ent {
	char *path, *hash;
};

static int cmp_rec(const void *a, const void *b)
{
	return strcmp(((const struct rec_ent *)a)->path, ((const struct rec_ent *)b)->path);
}

/* The wheel's RECORD as a sorted array, for the per-file hash check. */
static struct rec_ent *load_record(const char *text, size_t *n)
{
	struct rec_ent *v = NULL;
	*n = 0;
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char *f[3] = {NULL, NULL, NULL};
		size_t nf = record_fields(l, f);
		if (nf >= 2 && f[0][0]) {
			v = xrealloc(v, (*n + 1) * sizeof(*v));
			v[*n].path = f[0];
			v[*n].hash = f[1];
			(*n)++;
			f[0] = f[1] = NULL;
		}
		for (size_t k = 0; k < nf; k++)
			free(f[k]);
	}
	if (*n)
		qsort(v, *n, sizeof(*v), cmp_rec);
	return v;
}

/* Where an archive path goes, relative to the copy; NULL: not installed. */
char *dest_of(struct job *j, struct whl *w, const char *p, const char *datadir, int *script)
{
	*script = 0;
	size_t dl = strlen(datadir);
	if (strncmp(p, datadir, dl) != 0 || p[dl] != '/')
		return path_join(w->libdir, p);
	const char *key = p + dl + 1, *sub = strchr(key, '/');
	if (sub == NULL || !sub[1]) {
		whl_fail(w, TF_EFAIL, "unexpected file %s (.data contents are <scheme>/<path>)", p);
		return NULL;
	}
	size_t kl = (size_t)(sub - key);
	sub++;
	if (kl == 7 && strncmp(key, "purelib", 7) == 0)
		return path_join(j->sc->purelib, sub);
	if (kl == 7 && strncmp(key, "platlib", 7) == 0)
		return path_join(j->sc->platlib, sub);
	if (kl == 4 && strncmp(key, "data", 4) == 0)
		return j->sc->data[0] ? path_join(j->sc->data, sub) : xstrdup(sub);
	if (kl == 7 && strncmp(key, "headers", 7) == 0) {
		const char *nm = w->src->req_name ? w->src->req_name : w->name;
		char *h = path_join(j->sc->headers, nm), *r = path_join(h, sub);
		free(h);
		return r;
	}
	if (kl == 7 && strncmp(key, "scripts", 7) == 0) {
		*script = 1;
		return path_join(j->sc->scripts, sub);
	}
	whl_fail(w, TF_EFAIL, "unknown scheme key in %s (purelib, platlib, headers, scripts, data)",
	         p);
	return NULL;
}

/* A .data/scripts file: "#!python..." becomes the env's interpreter (pip's fix_script). */
static void place_script(struct job *j, struct whl *w, const char *src, const char *dst,
                         const char *rel, unsigned mode, const struct unpack_entry *e)
{
	char *text = NULL;
	size_t len = 0;
	if (read_file_at(AT_FDCWD, src, 1u << 30, &text, &len) != 0) {
		whl_fail(w, TF_EIO, "cannot read %s", e->path);
		return;
	}
	if (len < 8 || memcmp(text, "#!python", 8) != 0) {
		if (rename(src, dst) != 0)
			whl_fail(w, TF_EIO, "cannot place %s: %s", rel, strerror(errno));
		else
			add_record(w, rel, e->sha256, e->size);
		free(text);
		return;
	}
	const char *nl = memchr(text, '\n', len);
	size_t rest = nl ? len - (size_t)(nl + 1 - text) : 0;
	struct strbuf sb = STRBUF_INIT;
	strbuf_addf(&sb, "#!%s\n", j->sc->exe);
	strbuf_add(&sb, nl ? nl + 1 : "", rest);
	int rc = fs_write_new(dst, sb.buf, sb.len, mode);
	if (rc != 0) {
		whl_fail(w, TF_EIO, "cannot write %s: %s", rel, strerror(-rc));
	} else {
		char hex[65];
		sha256_buf(sb.buf, sb.len, hex);
		add_record(w, rel, hex, (int64_t)sb.len);
	}
	strbuf_release(&sb);
	free(text);
}

/*
 * PEP 427: an installer refuses a Wheel-Version whose major version is
 * greater than the one it reads (1), and takes any 0.x or 1.x (pip warns
 * for 1.x newer than 1.0 and installs). Components are decimal integers,
 * as pip parses them; 0, or -EINVAL to refuse.
 */
static int check_wheel_version(const char *v)
{
	long major = -1;
	for (const char *p = v;;) {
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		char *end;
		long n = strtol(p, &end, 10);
		if (major < 0)
			major = n;
		while (isspace((unsigned char)*end))
			end++;
		if (*end == '\0')
			break;
		if (*end != '.')
			return -EINVAL;
		p = end + 1;
	}
	return major <= 1 ? 0 : -EINVAL;
}

/*
 * setuptools ships, beside a .data/scripts file per entry point, wrappers
 * named EP, EP.exe, EP-script.py or EP.pya; pip leaves all of them out and
 * generates EP from the entry point (pip's is_entrypoint_wrapper).
 */
static int entrypoint_wrapper(const char *base, const struct ep *eps, size_t neps)
{
	size_t n = strlen(base), keep = n;
	if (n >= 4 &&
	    (strcasecmp(base + n - 4, ".exe") == 0 || strcasecmp(base + n - 4, ".pya") == 0))
		keep = n - 4;
	else if (n >= 10 && strcasecmp(base + n - 10, "-script.py") == 0)
		keep = n - 10;
	for (size_t k = 0; k < neps; k++)
		if (strlen(eps[k].name) == keep && strncmp(eps[k].name, base, keep) == 0)
			return 1;
	return 0;
}

static char *read_meta(struct whl *w, const char *tmp, const char *file, int required)
{
	char *p = xasprintf("%s/%s/%s", tmp, w->distinfo, file), *text = NULL;
	size_t len = 0;
	if (read_file_at(AT_FDCWD, p, 16u << 20, &text, &len) != 0 && required)
		whl_fail(w, TF_EFAIL, "%s/%s is missing", w->distinfo, file);
	free(p);
	return text;
}

/* Finds the one .dist-info directory and checks that it names this distribution. */
static void find_distinfo(struct whl *w, const struct unpack_result *res)
{
	for (size_t i = 0; i < res->n && !w->why.code; i++) {
		const char *p = res->v[i].path;
		size_t k = strcspn(p, "/");
		if (k < 10 || strncmp(p + k - 10, ".dist-info", 10) != 0)
			continue;
		if (w->distinfo == NULL) {
			w->distinfo = xstrndup(p, k);
		} else if (strncmp(w->distinfo, p, k) != 0 || w->distinfo[k] != '\0') {
			whl_fail(w, TF_EFAIL, "more than one .dist-info directory");
		}
	}
	if (w->why.code)
		return;
	char *raw = w->distinfo ? xstrndup(w->distinfo, strcspn(w->distinfo, "-")) : NULL;
	char *norm = raw ? pip_normalize_name(raw) : NULL;
	if (norm == NULL || strcmp(norm, w->name) != 0)
		whl_fail(w, TF_EFAIL, "%s does not start with %s",
		         w->distinfo ? w->distinfo
		                     : "no "
		                       ".dist-info",
		         w->name);
	free(raw);
	free(norm);
}

/*
 * A .py file the byte-compiler gets the moment the decoder has written it:
 * one installed at the root of the lib dir (not from <dist>.data/), when
 * purelib and platlib are one directory (a venv's), so its place does not
 * depend on the WHEEL file read after the unpack.
 */
static int compiled_early(const struct job *j, const char *p)
{
	return j->cc && strcmp(j->sc->purelib, j->sc->platlib) == 0 &&
	       wheel_entry_compiles_early(p);
}

struct early {
	struct job *j;
	const char *tmprel; /* the wheel's unpack directory, relative to the copy */
};

static void compile_early(void *arg, const struct unpack_entry *e)
{
	struct early *x = arg;
	if (!compiled_early(x->j, e->path))
		return;
	char *tmp = path_join(x->tmprel, e->path), *rel = path_join(x->j->sc->purelib, e->path);
	compiler_send(x->j->cc, tmp, rel);
	free(tmp);
	free(rel);
}

/*
 * The .pyc pycahead.c compiled ahead of tmp/<path> (beside it, in
 * __pycache__, under this env's cache tag), or NULL when it is none of
 * those files: one compiled_early would queue, with the lib dir where the
 * .pyc names its source.
 */
static char *ahead_pyc(const struct job *j, const char *tmp, const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!j->ahead || slash == NULL || !compiled_early(j, path))
		return NULL;
	size_t stem = strlen(slash + 1) - 3;
	char *pyc = xasprintf("%s/%.*s/__pycache__/%.*s.%s.pyc", tmp, (int)(slash - path), path,
	                      (int)stem, slash + 1, j->sc->cache_tag);
	struct stat st;
	if (lstat(pyc, &st) == 0 && S_ISREG(st.st_mode))
		return pyc;
	free(pyc);
	return NULL;
}

/* Moves the .pyc made ahead of a source beside the source's new place dst. */
static int move_pyc(const char *pyc, const char *dst)
{
	char *dir = xasprintf("%.*s/__pycache__", (int)(strrchr(dst, '/') - dst), dst);
	char *to = path_join(dir, strrchr(pyc, '/') + 1);
	int rc = (mkdir(dir, 0755) == 0 || errno == EEXIST) && rename(pyc, to) == 0 ? 0 : -errno;
	free(to);
	free(dir);
	return rc;
}

/*
 * The wheel's entries into tmp (created): the tree decode-ahead made of this
 * very file while the downloads ran (its prepared artifact, w->src->ahead:
 * wheel_ahead_art), its .py files then queued for the
 * byte-compiler as compile_early does during a decode; else decoded here,
 * by `parts` decoders. Either way every entry is checked against RECORD
 * after this, from the sha256 computed while it was written.
 */
static int decode_wheel(struct job *j, struct whl *w, const char *tmp, int parts, struct early *x,
                        struct unpack_result *res, struct why *why)
{
	if (w->src->ahead && art_take_tree(j->c, w->src->ahead, tmp, res) == 0) {
		for (size_t i = 0; i < res->n; i++) {
			char *pyc =
			    res->v[i].type == 'f' ? ahead_pyc(j, tmp, res->v[i].path) : NULL;
			if (pyc == NULL && res->v[i].type == 'f')
				compile_early(x, &res->v[i]);
			free(pyc); /* compiled ahead: place_entry moves it */
		}
		return 0;
	}
	return unpack_zip_parallel(j->c, w->src->path, tmp, parts, compile_early, x, res, why);
}

struct art *wheel_ahead_art(struct artset *arts, const char *file)
{
	const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
	for (size_t i = 0; arts && i < arts->n; i++) {
		struct art *a = &arts->v[i];
		if (a->unpack != ART_WHEEL || a->tree == NULL || a->path == NULL)
			continue;
		char *name = url_basename(a->url);
		int named = strcmp(name, base) == 0;
		free(name);
		if (!named)
			continue;
		struct stat fs, as;
		char hex[65];
		if (stat(file, &fs) == 0 && stat(a->path, &as) == 0 &&
		    ((fs.st_dev == as.st_dev && fs.st_ino == as.st_ino) ||
		     (fs.st_size == as.st_size && sha256_file(file, hex, NULL) == 0 &&
		      strcmp(hex, a->sha256) == 0)))
			return a;
	}
	return NULL;
}

/*
 * 1 unless the env at env_path (root-relative) already holds this wheel's
 * distribution at its version in lib/pythonX.Y/site-packages: wheel_install
 * would leave it alone, so decode-ahead need not decode it.
 */
int wheel_predecode_wanted(struct ctx *c, const char *env_path, const char *pyver,
                           const char *filename)
{
	struct whl w = {0};
	struct wheel_src src = {.path = filename};
	struct strvec have = STRVEC_INIT;
	int want = 1;
	w.src = &src;
	if (pyver == NULL || parse_filename(&w) != 0)
		return 1;
	char *host = ctx_host_path(c, env_path);
	char *lib = xasprintf("lib/python%s/site-packages", pyver);
	installed_dists(host, lib, &have);
	size_t nl = strlen(w.name), vl = strlen(w.version);
	for (size_t k = 0; k < have.n && want; k++)
		want = !(strncmp(have.v[k], w.name, nl) == 0 && have.v[k][nl] == '\x1f' &&
		         strncmp(have.v[k] + nl + 1, w.version, vl) == 0 &&
		         have.v[k][nl + 1 + vl] == '\x1f');
	strvec_release(&have);
	free(lib);
	free(host);
	free(w.name);
	free(w.version);
	return want;
}

/* One wheel on its way in: its unpack directory and what its metadata says. */
struct unpacked {
	char *tmprel, *tmp; /* the unpack directory, relative to the copy and on the host */
	struct unpack_result res;
	char *wheel, *record, *eptext; /* WHEEL, RECORD, entry_points.txt (or NULL) */
	struct rec_ent *rec;           /* RECORD, sorted by path */
	size_t nrec;
	struct ep *eps; /* console and GUI entry points */
	size_t neps;
	char *datadir; /* "<dist>-<ver>.data" */
};

/* Unpacks the wheel into its private directory of the copy; .py files go to the compiler. */
static void unpack_wheel(struct job *j, struct whl *w, struct unpacked *u)
{
	struct early x = {j, u->tmprel};
	struct why e = {0};
	/* A large wheel is decoded by every core (its entries shared out). */
	int parts = 1;
	if (w->size > WHEEL_SHARE_MIN)
		parts = j->c->jobs > 0 ? j->c->jobs : (int)pool_ncpu();
	if (parts > WHEEL_SHARES_MAX)
		parts = WHEEL_SHARES_MAX;
	int rc = decode_wheel(j, w, u->tmp, parts, &x, &u->res, &e);
	if (rc != 0)
		whl_fail(w, rc, "%s", why_text(&e));
	why_clear(&e);
}

/* Reads the .dist-info: WHEEL (version, lib dir), RECORD and the entry points. */
static void read_metadata(struct job *j, struct whl *w, struct unpacked *u)
{
	find_distinfo(w, &u->res);
	if (w->why.code)
		return;
	u->wheel = read_meta(w, u->tmp, "WHEEL", 1);
	u->record = read_meta(w, u->tmp, "RECORD", 1);
	u->eptext = read_meta(w, u->tmp, "entry_points.txt", 0);
	if (w->why.code)
		return;
	char *wv = header_value(u->wheel, "Wheel-Version"),
	     *pure = header_value(u->wheel, "Root-Is-Purelib");
	if (wv == NULL)
		whl_fail(w, TF_EFAIL, "WHEEL has no Wheel-Version");
	else if (check_wheel_version(wv) != 0)
		whl_fail(w, TF_EFAIL,
		         "unsupported Wheel-Version %s (this installer reads 0.x and 1.x, PEP 427)",
		         wv);
	w->libdir = pure && strcasecmp(pure, "true") == 0 ? j->sc->purelib : j->sc->platlib;
	free(wv);
	free(pure);
	if (w->why.code || (u->eptext && parse_entry_points(w, u->eptext, &u->eps, &u->neps) != 0))
		return;
	u->rec = load_record(u->record, &u->nrec);
	u->datadir = xasprintf("%.*s.data", (int)(strlen(w->distinfo) - 10), w->distinfo);
}

/* Checks one unpacked file against the wheel's RECORD and moves it into its scheme. */
static void place_entry(struct job *j, struct whl *w, const struct unpacked *u,
                        const struct unpack_entry *e)
{
	if (e->type != 'f') {
		whl_fail(w, TF_EUNSAFE, "%s is a link; wheels hold regular files", e->path);
		return;
	}
	struct rec_ent key = {(char *)e->path, NULL}, *r;
	r = u->nrec ? bsearch(&key, u->rec, u->nrec, sizeof(*u->rec), cmp_rec) : NULL;
	if (r && r->hash[0]) {
		char h[RECORD_HASH_MAX];
		record_hash_encode(e->sha256, h);
		if (strcmp(h, r->hash) != 0) {
			whl_fail(w, TF_EINTEGRITY, "%s does not match the wheel's RECORD hash",
			         e->path);
			return;
		}
	}
	int script = 0;
	char *rel = dest_of(j, w, e->path, u->datadir, &script);
	if (rel == NULL)
		return;
	unsigned mode = e->mode & 0111 ? 0755 : 0644;
	if (script) {
		const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
		if (entrypoint_wrapper(base, u->eps, u->neps)) {
			/* pip generates it from the entry point instead, and keeps
			 * the wheel's RECORD row as it was. */
			strvec_pushf(&w->records, "%s\x1f%s\x1f%lld", e->path, r ? r->hash : "",
			             (long long)e->size);
			free(rel);
			return;
		}
	}
	char *src = path_join(u->tmp, e->path), *dst = path_join(j->stage, rel);
	char *parent = xstrndup(dst, (size_t)(strrchr(dst, '/') - dst));
	char *pyc = script ? NULL : ahead_pyc(j, u->tmp, e->path);
	mkdirs_at(AT_FDCWD, parent, 0755);
	if (script) {
		place_script(j, w, src, dst, rel, mode, e);
	} else if ((e->mode & 07777) != mode && chmod(src, mode) != 0) {
		whl_fail(w, TF_EIO, "cannot chmod %s: %s", e->path, strerror(errno));
	} else if (rename(src, dst) != 0) {
		whl_fail(w, TF_EIO, "cannot place %s: %s", rel, strerror(errno));
	} else {
		add_record(w, rel, e->sha256, e->size);
		size_t rl = strlen(rel);
		if (rl > 3 && strcmp(rel + rl - 3, ".py") == 0 &&
		    (str_starts_with(rel, j->sc->purelib) ||
		     str_starts_with(rel, j->sc->platlib))) {
			strvec_push(&w->pys, rel);
			if (pyc != NULL && move_pyc(pyc, dst) == 0)
				__atomic_add_fetch(&j->nahead, 1, __ATOMIC_RELAXED);
			else if (!compiled_early(j, e->path) || pyc != NULL)
				strvec_push(&w->late, rel);
		}
	}
	free(pyc);
	free(parent);
	free(src);
	free(dst);
	free(rel);
}

/* Places every file of the wheel but its own RECORD (which is written anew). */
static void place_files(struct job *j, struct whl *w, const struct unpacked *u)
{
	char *own_record = xasprintf("%s/RECORD", w->distinfo);
	for (size_t i = 0; i < u->res.n && !w->why.code; i++) {
		const struct unpack_entry *e = &u->res.v[i];
		if (e->type == 'd' || (e->type == 'f' && strcmp(e->path, own_record) == 0))
			continue;
		place_entry(j, w, u, e);
	}
	free(own_record);
}

static void unpacked_release(struct unpacked *u)
{
	fs_rmtree(u->tmp);
	for (size_t i = 0; i < u->nrec; i++) {
		free(u->rec[i].path);
		free(u->rec[i].hash);
	}
	for (size_t i = 0; i < u->neps; i++) {
		free(u->eps[i].name);
		free(u->eps[i].module);
		free(u->eps[i].attr);
	}
	free(u->rec);
	free(u->eps);
	free(u->datadir);
	free(u->wheel);
	free(u->record);
	free(u->eptext);
	free(u->tmp);
	free(u->tmprel);
	unpack_result_release(&u->res);
}

/* Installs one wheel into the copy: unpack, metadata, files, entry-point scripts. */
static void install_one(struct job *j, struct whl *w, size_t idx)
{
	struct unpacked u = {0};
	u.tmprel = xasprintf("%s/.tfprov-whl-%zu", j->sc->purelib, idx);
	u.tmp = path_join(j->stage, u.tmprel);
	unpack_wheel(j, w, &u);
	if (!w->why.code)
		read_metadata(j, w, &u);
	if (!w->why.code)
		place_files(j, w, &u);
	if (!w->why.code)
		write_entry_points(j, w, u.eps, u.neps);
	unpacked_release(&u);
}

static void install_job(size_t i, void *arg)
{
	struct job *j = arg;
	if (!j->w[i].skip && !tf_interrupted)
		install_one(j, &j->w[i], i);
}

/* ------------------------------------------------------------ driver */

static int cmp_size_desc(const void *a, const void *b)
{
	const struct whl *x = a, *y = b;
	return x->size < y->size ? 1 : x->size > y->size ? -1 : 0;
}

/* Name and version from "name-ver-...whl"; 0 or -EINVAL. */
int parse_filename(struct whl *w)
{
	const char *f = strrchr(w->src->path, '/') ? strrchr(w->src->path, '/') + 1 : w->src->path;
	struct wheel_name wn;
	int rc = wheel_name_parse(f, &wn);
	if (rc != 0)
		return rc;
	w->name = wn.name;
	w->version = wn.version;
	wn.name = wn.version = NULL;
	wheel_name_release(&wn);
	return 0;
}

/* Each wheel's name, version and size from its file, largest first (the pool's order). */
static int wheels_prepare(const struct wheel_src *src, size_t n, struct whl *w, struct why *why)
{
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		w[i].src = &src[i];
		w[i].size = stat(src[i].path, &st) == 0 ? st.st_size : 0;
		if (parse_filename(&w[i]) != 0)
			return why_fail(why, TF_EFAIL, "%s is not a wheel file name (PEP 427)",
			                src[i].path);
	}
	if (n > 1)
		qsort(w, n, sizeof(*w), cmp_size_desc);
	return 0;
}

/* The hard-link copy of the env the wheels go into, staged (journaled) in the txn. */
static int stage_copy(struct txn *t, const char *env_path, const char *final, char **stage,
                      uint64_t *t0, struct why *why)
{
	int rc = txn_stage_dir(t, env_path, stage);
	if (rc != 0) {
		why_move(why, txn_why(t));
		return why_code(why, rc);
	}
	*t0 = now_ns();
	if (fs_link_tree(final, *stage) != 0)
		return why_fail(why, TF_EIO, "cannot copy %s (hard links): %s", final,
		                strerror(errno));
	return 0;
}

/* One path a distribution ships, for the overlap check and the keep set. */
static int unpack_all(struct job *j, struct why *why)
{
	struct whl *w = j->w;
	int rc = 0;
	pool_run(j->n, j->c->jobs > 0 ? (size_t)j->c->jobs : pool_ncpu(), install_job, j);
	for (size_t i = 0; i < j->n; i++)
		for (size_t k = 0; k < w[i].late.n && !w[i].why.code; k++)
			compiler_send(j->cc, NULL, w[i].late.v[k]);
	for (size_t i = 0; i < j->n && rc == 0; i++)
		if (w[i].why.code) {
			rc = w[i].why.code;
			why_move(why, &w[i].why);
		}
	if (rc == 0 && tf_interrupted)
		rc = why_fail(why, TF_EINTR, "interrupted");
	return rc;
}

/* Writes each wheel's INSTALLER, REQUESTED, direct_url.json and RECORD; counts the work. */
static int write_metadata(struct job *j, struct wheel_stats *stats, struct why *why)
{
	struct whl *w = j->w;
	int rc = 0;
	pool_run(j->n, j->c->jobs > 0 ? (size_t)j->c->jobs : pool_ncpu(), finish_job, j);
	for (size_t i = 0; i < j->n && rc == 0; i++) {
		if (w[i].why.code) {
			rc = w[i].why.code;
			why_move(why, &w[i].why);
		}
		if (!w[i].skip) {
			stats->installed++;
			stats->files += w[i].records.n;
		}
	}
	return rc;
}

/* wheel_install, or wheel_install_fresh when t is NULL (exe: its scripts' interpreter). */
static int install_wheels(struct ctx *c, struct txn *t, const char *env_path,
                          const struct wheel_src *src, size_t n, const struct strvec *drop,
                          const char *exe, struct wheel_stats *stats, struct why *why)
{
	struct scheme sc = {0};
	struct whl *w = xcalloc(n ? n : 1, sizeof(*w));
	char *final = ctx_host_path(c, env_path), *stage = NULL;
	struct job j = {c, NULL, final, &sc, w, n, NULL, 0, 0, drop, STRVEC_INIT};
	uint64_t t0 = 0;
	int rc = 0;
	memset(stats, 0, sizeof(*stats));
	if ((rc = wheels_prepare(src, n, w, why)) != 0)
		goto out;
	if ((rc = query_scheme(c, final, &sc, why)) != 0)
		goto out;
	if (exe != NULL) {
		free(sc.exe);
		sc.exe = xstrdup(exe);
	}
	if ((rc = check_overlaps(&j, why)) != 0)
		goto out;
	if (t != NULL) {
		rc = stage_copy(t, env_path, final, &stage, &t0, why);
	} else {
		stage = xstrdup(final);
		t0 = now_ns();
	}
	j.stage = stage;
	if (rc == 0)
		rc = remove_older(&j, stats, why);
	if (rc != 0)
		goto out;
	uint64_t t1 = now_ns();
	struct compiler cc;
	if ((rc = compiler_start(&cc, &j, why)) != 0) {
		compiler_finish(&cc, NULL);
		goto out;
	}
	j.cc = &cc;
	char *site = xasprintf("lib/python%s/site-packages", sc.xy);
	j.ahead = strcmp(sc.purelib, site) == 0 && strcmp(sc.platlib, site) == 0;
	free(site);
	rc = unpack_all(&j, why);
	uint64_t t2 = now_ns();
	/* The .pyc files are in place before RECORD lists them. */
	struct why cerr = {0};
	int crc = compiler_finish(&cc, &cerr);
	j.cc = NULL;
	if (rc == 0 && crc != 0) {
		rc = crc;
		why_move(why, &cerr);
	}
	why_clear(&cerr);
	uint64_t t3 = now_ns();
	if (rc == 0)
		rc = write_metadata(&j, stats, why);
	ev_log(c, EV_DEBUG,
	       "wheels: copy + uninstall %.2f s, unpack (byte-compiling alongside) %.2f s, "
	       "byte-compile tail %.2f s, RECORD %.2f s; %zu .pyc files compiled ahead",
	       (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9, (double)(t3 - t2) / 1e9,
	       (double)(now_ns() - t3) / 1e9, j.nahead);
	if (rc == 0 && t != NULL && (rc = txn_replace_dir(t, stage, env_path)) != 0) {
		why_move(why, txn_why(t));
		why_code(why, rc);
	}
out:
	/* On failure the stage is the txn's to remove (journaled). */
	for (size_t i = 0; i < n; i++) {
		free(w[i].name);
		free(w[i].version);
		free(w[i].distinfo);
		why_clear(&w[i].why);
		strvec_release(&w[i].records);
		strvec_release(&w[i].pys);
		strvec_release(&w[i].late);
	}
	free(w);
	strvec_release(&j.keep);
	scheme_release(&sc);
	free(stage);
	free(final);
	return rc;
}

int wheel_install(struct ctx *c, struct txn *t, const char *env_path, const struct wheel_src *src,
                  size_t n, struct wheel_stats *stats, struct why *why)
{
	return install_wheels(c, t, env_path, src, n, NULL, NULL, stats, why);
}

int wheel_install_drop(struct ctx *c, struct txn *t, const char *env_path,
                       const struct wheel_src *src, size_t n, const struct strvec *drop,
                       struct wheel_stats *stats, struct why *why)
{
	return install_wheels(c, t, env_path, src, n, drop, NULL, stats, why);
}

int wheel_install_fresh(struct ctx *c, const char *env_path, const struct wheel_src *src, size_t n,
                        const char *exe, struct wheel_stats *stats, struct why *why)
{
	char *host = ctx_host_path(c, env_path);
	int busy = pyenv_busy_hold(host);
	int rc = install_wheels(c, NULL, env_path, src, n, NULL, exe, stats, why);
	pyenv_busy_release(host, busy);
	free(host);
	return rc;
}
