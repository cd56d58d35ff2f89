/*
 * mirror.c - `tfprov mirror build DIR MANIFEST...`: copies every artifact the
 * manifests need into DIR, for air-gapped fleets.
 *
 * Layout (the one fetch.c's mirror lookup reads, artifact.h):
 *   DIR/sha256/<hex>   every file, by content
 *   DIR/<basename>     the same file under its URL's basename (a hard link when
 *                      possible), so a plain web server serving DIR is a URL
 *                      mirror (`--mirror http://host/DIR`), and pip's
 *                      --find-links DIR (what `--mirror DIR` gives pip) sees
 *                      the wheels
 *   DIR/index.json     {"files": [{name, kind, file, url, sha256, size}]}
 *   DIR/index.json.minisig  with --key: its minisign signature (sign.c)
 *   DIR/simple/        PEP 503 "simple" pages for the pip files listed in
 *                      index.json (simple/index.html, simple/<project>/index.html,
 *                      links ../../<file>#sha256=<hex>), so `--mirror http://host/DIR/`
 *                      serves pip as an index at http://host/DIR/simple/
 *
 * What goes in: cuda/cudnn archives (inline, runfile, redist JSONs and what
 * they resolve to), conda packages pinned by sha256, pip direct references
 * (`name @ url --hash`) and, through the manifest Python's own `pip download
 * --require-hashes --no-deps`, the wheels of plain `name==ver --hash` pins.
 *
 * Invariants:
 *  1. Every byte is verified: artifacts go through fetch_all into the cache
 *     first (hash and size checked while streaming), and are hard-linked, or
 *     copied with hashing and checked again, into DIR; pip's wheels are
 *     hash-checked by pip, then copied with hashing and checked against the
 *     pins. A file appears at its final name only by rename().
 *  2. Idempotent: what DIR already holds is not copied again, and a run that
 *     adds nothing says so and leaves index.json unchanged.
 *  3. A basename that DIR holds with other content is an error, never
 *     overwritten: the URL mirror would serve the wrong bytes.
 */
#include "artifact.h"
#include "cli.h"
#include "digest.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "python.h"
#include "fs.h"
#include "spawn.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One file the mirror must hold. Strings owned. */
struct mfile {
	char *name;
	char *kind; /* cuda, cudnn, redist-json, runfile, conda, pip */
	char *url;  /* origin URL (or a description for pip-downloaded wheels) */
	char *base; /* file name in DIR */
	char sha256[65];
	int64_t size; /* -1 unknown until verified */
	char *src;    /* host path of the verified bytes (cache or pip's dest) */
	int from_pip; /* src is in pip's download dir, not the cache */
};

struct mset {
	struct mfile *v;
	size_t n;
	size_t copied, linked, present;
};

static struct mfile *mset_find(struct mset *s, const char *sha)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].sha256, sha) == 0)
			return &s->v[i];
	return NULL;
}

static void mset_add(struct mset *s, const char *name, const char *kind, const char *url,
                     const char *sha, int64_t size)
{
	if (mset_find(s, sha))
		return; /* two manifests share it */
	s->v = xrealloc(s->v, (s->n + 1) * sizeof(*s->v));
	struct mfile *f = &s->v[s->n++];
	memset(f, 0, sizeof(*f));
	f->name = xstrdup(name ? name : url);
	f->kind = xstrdup(kind);
	f->url = xstrdup(url);
	f->base = url_basename(url);
	snprintf(f->sha256, sizeof(f->sha256), "%s", sha);
	f->size = size;
}

static void mset_release(struct mset *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free(s->v[i].kind);
		free(s->v[i].url);
		free(s->v[i].base);
		free(s->v[i].src);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static void add_art(struct mset *s, const struct artifact *a, const char *kind)
{
	if (a->url.s && a->sha256.s)
		mset_add(s, a->name.set ? a->name.s : NULL, kind, a->url.s, a->sha256.s,
		         a->size.set ? a->size.v : -1);
}

static const char *stack_platform(const struct manifest *m)
{
	return m->stack.platform == PLATFORM_WINDOWS_X86_64 ? "windows-x86_64" : "linux-x86_64";
}

/* Fetches the items of s[from..] into the cache; fills src and size. */
static int fetch_range(struct ctx *c, struct mset *s, size_t from)
{
	size_t n = s->n - from;
	if (n == 0)
		return 0;
	struct fetch_item *it = xcalloc(n, sizeof(*it));
	for (size_t i = 0; i < n; i++) {
		it[i].name = s->v[from + i].name;
		it[i].url = s->v[from + i].url;
		it[i].sha256 = s->v[from + i].sha256;
		it[i].size = s->v[from + i].size;
	}
	int rc = fetch_all(c, it, n);
	for (size_t i = 0; i < n; i++) {
		struct mfile *f = &s->v[from + i];
		if (it[i].path) {
			struct stat st;
			f->src = xstrdup(it[i].path);
			if (stat(f->src, &st) == 0)
				f->size = (int64_t)st.st_size;
		}
		fetch_item_release(&it[i]);
	}
	free(it);
	return rc;
}

/* Adds the archives a verified redist JSON resolves to. */
static int add_redist(struct ctx *c, struct mset *s, const struct manifest *m,
                      const struct redist_ref *r, const char *kind)
{
	struct redist_artifact *ra = NULL;
	size_t nra = 0;
	struct why err = {0};
	const struct mfile *j = mset_find(s, r->json.sha256.s);
	const char **names = xcalloc(r->ncomponents + 1, sizeof(*names));
	int rc = 0;
	for (size_t i = 0; i < r->ncomponents; i++)
		names[i] = r->components[i].s;
	if (j == NULL || j->src == NULL) {
		rc = TF_EFAIL;
		goto out;
	}
	rc = redist_resolve(j->src, r->json.url.s, stack_platform(m),
	                    r->variant.set ? r->variant.s : NULL, names, r->ncomponents, &ra, &nra,
	                    &err);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "%s: %s: %s", m->path, r->json.url.s, why_text(&err));
		goto out;
	}
	for (size_t i = 0; i < nra; i++)
		mset_add(s, ra[i].component, kind, ra[i].url, ra[i].sha256, ra[i].size);
out:
	redist_artifacts_free(ra, nra);
	free(names);
	why_clear(&err);
	return rc;
}

/* Everything a manifest pins by URL, except pip's plain pins (collected apart). */
static void collect(struct mset *s, const struct manifest *m, struct strvec *md5_only)
{
	for (size_t i = 0; i < m->cuda.artifacts.n; i++)
		add_art(s, &m->cuda.artifacts.v[i], "cuda");
	if (m->cuda.has_runfile)
		add_art(s, &m->cuda.runfile, "runfile");
	if (m->cuda.redist.set)
		add_art(s, &m->cuda.redist.json, "redist-json");
	if (m->cudnn.has_artifact)
		add_art(s, &m->cudnn.artifact, "cudnn");
	if (m->cudnn.redist.set)
		add_art(s, &m->cudnn.redist.json, "redist-json");
	for (size_t i = 0; i < m->python.npkgs; i++) {
		const struct conda_pkg *p = &m->python.pkgs[i];
		if (p->sha256[0])
			mset_add(s, p->name, "conda", p->url, p->sha256, -1);
		else
			strvec_pushf(md5_only, "%s (%s)", p->url, m->path);
	}
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];
		if (q->url && q->nhashes == 1)
			mset_add(s, q->raw_name ? q->raw_name : q->name, "pip", q->url,
			         q->hashes[0], -1);
	}
}

/* A plain pin, or a direct reference with several candidate hashes: pip's job. */
static int pip_needs_download(const struct pip_req *q)
{
	return q->nhashes > 0 && !(q->url && q->nhashes == 1);
}

/* 1 when DIR already holds a file with one of the pin's hashes. */
static int pin_mirrored(const char *dir, const struct pip_req *q)
{
	for (size_t h = 0; h < q->nhashes; h++) {
		char *p = mirror_dir_lookup(dir, q->hashes[h], NULL);
		free(p);
		if (p)
			return 1;
	}
	return 0;
}

/* Runs one pip command from the throwaway venv; 0 or TF_EFAIL with why. */
static int run_pip_download(struct ctx *c, const char *venv, const char *reqfile, const char *dest,
                            const struct manifest *m, struct why *why)
{
	struct strvec argv = STRVEC_INIT, env = STRVEC_INIT;
	struct spawn_result r = {0};
	struct spawn_opts so = {0};
	const char *index = m->pip.index_url.s;
	char *simple = NULL;
	if (c->mirrors.n && (str_starts_with(c->mirrors.v[0], "http://") ||
	                     str_starts_with(c->mirrors.v[0], "https://")))
		index = simple = pip_mirror_index(c->mirrors.v[0]);
	strvec_pushf(&argv, "%s/bin/python", venv);
	strvec_push(&argv, "-I");
	strvec_push(&argv, "-m");
	strvec_push(&argv, "pip");
	strvec_push(&argv, "download");
	strvec_push(&argv, "--isolated");
	strvec_push(&argv, "--disable-pip-version-check");
	strvec_push(&argv, "--no-input");
	strvec_push(&argv, "--require-hashes");
	strvec_push(&argv, "--no-deps");
	/* A complete lock may pin an sdist (pip reads its metadata to download it). */
	if (!m->pip.complete.v)
		strvec_push(&argv, "--only-binary=:all:");
	strvec_push(&argv, "--no-cache-dir");
	if (index)
		strvec_pushf(&argv, "--index-url=%s", index);
	if (c->ca_bundle)
		strvec_pushf(&argv, "--cert=%s", c->ca_bundle);
	strvec_pushf(&argv, "--dest=%s", dest);
	strvec_pushf(&argv, "--requirement=%s", reqfile);
	spawn_env_base(&env);
	spawn_env_python(&env);
	so.argv = argv.v;
	so.envp = env.v;
	so.timeout_s = 3600;
	so.flags = SPAWN_KILL_ON_INTR;
	int rc = spawn_run(&so, &r);
	if (rc == 0 && (r.status != 0 || r.timed_out))
		rc = why_fail(why, TF_EFAIL, "pip download failed (exit %d): %s", r.status,
		              r.err.buf ? r.err.buf : "");
	else if (rc != 0)
		why_fail(why, rc, "pip download: %s", why_text(&r.why));
	spawn_result_release(&r);
	strvec_release(&argv);
	strvec_release(&env);
	free(simple);
	return rc;
}

/*
 * Downloads the wheels of the manifest's hash-pinned pins that DIR lacks with
 * pip (in a throwaway venv of the manifest's Python) into tmp/wheels, and adds
 * each to s with its verified hash.
 */
static int pip_wheels(struct ctx *c, struct mset *s, const struct manifest *m, const char *dir,
                      const char *tmp)
{
	struct strbuf reqs = STRBUF_INIT;
	struct strvec names = STRVEC_INIT;
	char *python = NULL, *venv = NULL, *dest = NULL, *reqfile = NULL;
	struct why err = {0};
	const char *ver = m->python.version.set ? m->python.version.s : m->versions.python.s;
	int rc = 0, created = 0;
	DIR *dh = NULL;

	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];
		if (!pip_needs_download(q) || pin_mirrored(dir, q))
			continue;
		strbuf_adds(&reqs, q->spec);
		for (size_t h = 0; h < q->nhashes; h++)
			strbuf_addf(&reqs, " --hash=sha256:%s", q->hashes[h]);
		strbuf_adds(&reqs, "\n");
		strvec_push(&names, q->spec);
	}
	if (names.n == 0)
		goto out;
	if (c->flags & CTX_OFFLINE) {
		rc = why_fail(&err, TF_EOFFLINE,
		              "%zu pip pin%s not in %s (first: %s), and --offline forbids pip "
		              "download",
		              names.n, names.n == 1 ? " is" : "s are", dir, names.v[0]);
		goto out;
	}
	rc = pyenv_find_python(c, ver,
	                       m->python.manager == PYENV_VENV ? m->python.interpreter.s : NULL, 0,
	                       &python, &err);
	if (rc != 0)
		goto out;
	venv = xasprintf("%s/venv-%s", tmp, ver);
	rc = venv_create(c, python, venv, &created, &err);
	if (rc != 0)
		goto out;
	dest = xasprintf("%s/wheels", tmp);
	reqfile = xasprintf("%s/requirements.txt", tmp);
	mkdirs_at(AT_FDCWD, dest, 0755);
	FILE *f = fopen(reqfile, "we");
	if (f == NULL || fputs(reqs.buf, f) < 0 || fclose(f) != 0) {
		rc = why_fail(&err, TF_EIO, "cannot write %s: %s", reqfile, strerror(errno));
		goto out;
	}
	ev_log(c, EV_INFO, "mirror: pip download of %zu pin%s with Python %s", names.n,
	       names.n == 1 ? "" : "s", ver);
	rc = run_pip_download(c, venv, reqfile, dest, m, &err);
	if (rc != 0)
		goto out;
	dh = opendir(dest);
	struct dirent *de;
	while (dh && (de = readdir(dh)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char hex[65];
		int64_t size = 0;
		char *p = path_join(dest, de->d_name);
		if (sha256_file(p, hex, &size) != 0) {
			free(p);
			continue;
		}
		if (mset_find(s, hex) == NULL) {
			char *desc = xasprintf("pip download %s", de->d_name);
			mset_add(s, de->d_name, "pip", desc, hex, size);
			struct mfile *mf = &s->v[s->n - 1];
			free(mf->base);
			mf->base = xstrdup(de->d_name);
			free(mf->url);
			mf->url = xstrdup(m->pip.index_url.s ? m->pip.index_url.s
			                                     : "pip's default index");
			mf->src = xstrdup(p);
			mf->from_pip = 1;
			free(desc);
		}
		free(p);
	}
out:
	if (rc != 0)
		ev_log(c, EV_ERROR, "%s: pip wheels: %s", m->path, why_text(&err));
	if (dh)
		closedir(dh);
	strbuf_release(&reqs);
	strvec_release(&names);
	free(python);
	why_clear(&err);
	free(venv);
	free(dest);
	free(reqfile);
	return rc;
}

/*
 * Puts src at path (absent): a hard link when src is a verified cache file,
 * else a copy hashed on the way and checked (*copied set). 0, or -errno /
 * TF_EINTEGRITY.
 */
static int put_file(const char *src, const char *path, const char *sha, int may_link, int *copied)
{
	char hex[65];
	char *tmp = xasprintf("%s.tfprov-tmp.%d", path, (int)getpid());
	int r;
	unlink(tmp);
	*copied = !(may_link && link(src, tmp) == 0);
	if (!*copied) {
		r = 0;
	} else {
		r = copy_file_hashing(src, tmp, hex, NULL);
		if (r == 0 && strcmp(hex, sha) != 0)
			r = TF_EINTEGRITY;
	}
	if (r == 0 && rename(tmp, path) != 0)
		r = -errno;
	if (r != 0)
		unlink(tmp);
	free(tmp);
	return r;
}

static int same_file(const char *a, const char *b, int64_t size)
{
	struct stat sa, sb;
	if (stat(a, &sa) != 0 || stat(b, &sb) != 0)
		return 0;
	if (sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino)
		return 1;
	return sb.st_size == sa.st_size && (size < 0 || sb.st_size == size);
}

/* Places one file as sha256/<hex> and <basename>. 0 or an error (logged). */
static int place_one(struct ctx *c, struct mset *s, struct mfile *f, const char *dir)
{
	char *by_hash = cache_final_path(dir, f->sha256);
	char *named = path_join(dir, f->base);
	struct stat st;
	int rc = 0, did = 0, copied; /* did: 0 present, 1 linked, 2 copied */
	if (stat(by_hash, &st) != 0) {
		int r = put_file(f->src, by_hash, f->sha256, !f->from_pip, &copied);
		if (r < 0) {
			ev_log(c, EV_ERROR, "%s: cannot put %s: %s", f->name, by_hash,
			       r == TF_EINTEGRITY ? "the copy does not hash to its sha256"
			                          : strerror(-r));
			rc = r == TF_EINTEGRITY ? TF_EINTEGRITY : TF_EIO;
			goto out;
		}
		did = copied ? 2 : 1;
	}
	if (lstat(named, &st) != 0) {
		int r = put_file(by_hash, named, f->sha256, 1, &copied);
		if (r < 0) {
			ev_log(c, EV_ERROR, "%s: cannot put %s: %s", f->name, named, strerror(-r));
			rc = TF_EIO;
			goto out;
		}
		did = did ? did : copied ? 2 : 1;
	} else if (!same_file(by_hash, named, f->size)) {
		ev_log(c, EV_ERROR,
		       "%s: %s already holds a different file; two artifacts share "
		       "the basename %s, which a URL mirror cannot serve",
		       f->name, named, f->base);
		rc = TF_ECONFLICT;
		goto out;
	}
	if (did == 1)
		s->linked++;
	else if (did == 2)
		s->copied++;
	else
		s->present++;
	if (did)
		ev_log(c, EV_DEBUG, "mirror: %s %s", did == 1 ? "linked" : "copied", f->base);
out:
	free(by_hash);
	free(named);
	return rc;
}

/* Merges s into DIR/index.json (by sha256); writes only when it changed. */
static int write_index(struct ctx *c, struct mset *s, const char *dir, int *changed)
{
	char *path = path_join(dir, "index.json");
	char *tmp = xasprintf("%s.tfprov-tmp.%d", path, (int)getpid());
	json_t *root = json_load_file(path, 0, NULL);
	json_t *files;
	int rc = 0;
	*changed = 0;
	if (!json_is_object(root) || !json_is_array(json_object_get(root, "files"))) {
		json_decref(root);
		root = json_pack("{s:i,s:[]}", "version", 1, "files");
	}
	files = json_object_get(root, "files");
	for (size_t i = 0; i < s->n; i++) {
		struct mfile *f = &s->v[i];
		size_t k;
		json_t *e;
		int found = 0;
		json_array_foreach(files, k, e)
		{
			const char *h = json_string_value(json_object_get(e, "sha256"));
			if (h && strcmp(h, f->sha256) == 0)
				found = 1;
		}
		if (found)
			continue;
		json_array_append_new(files,
		                      json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "name", f->name,
		                                "kind", f->kind, "file", f->base, "url", f->url,
		                                "sha256", f->sha256, "size", (json_int_t)f->size));
		*changed = 1;
	}
	if (*changed) {
		if (json_dump_file(root, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) != 0 ||
		    rename(tmp, path) != 0) {
			ev_log(c, EV_ERROR, "cannot write %s: %s", path, strerror(errno));
			unlink(tmp);
			rc = TF_EIO;
		}
	}
	json_decref(root);
	free(tmp);
	free(path);
	return rc;
}

/* The PEP 503 project of a wheel or sdist file name; NULL when it is not one. */
static char *dist_project(const char *file)
{
	size_t n = strlen(file);
	for (size_t i = 0; i < n; i++)
		if (!(isalnum((unsigned char)file[i]) || strchr("._+-!", file[i])))
			return NULL; /* nothing from a mirror's listing goes into HTML unchecked */
	char *name = NULL;
	if (str_ends_with(file, ".whl")) {
		struct wheel_name wn;
		if (wheel_name_parse(file, &wn) != 0)
			return NULL;
		name = wn.raw;
		wn.raw = NULL;
		wheel_name_release(&wn);
	} else if (str_ends_with(file, ".tar.gz") || str_ends_with(file, ".zip")) {
		const char *dash = strrchr(file, '-');
		if (dash && dash != file)
			name = xstrndup(file, (size_t)(dash - file));
	}
	if (name == NULL || name[0] == '\0') {
		free(name);
		return NULL;
	}
	char *norm = pip_normalize_name(name);
	free(name);
	return norm;
}

/* Writes path with text unless it already holds exactly that (then *changed is
 * set). 0 or -errno. */
static int write_if_changed(const char *path, const char *text, int *changed)
{
	char *old = NULL;
	size_t len = 0;
	if (read_file_at(AT_FDCWD, path, 1u << 24, &old, &len) == 0 && len == strlen(text) &&
	    memcmp(old, text, len) == 0) {
		free(old);
		return 0;
	}
	free(old);
	int rc = fs_write_atomic(path, text, strlen(text), 0644, 0);
	if (rc == 0)
		*changed = 1;
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * DIR/simple/: one PEP 503 page per project of the pip files in DIR/index.json
 * (every manifest ever mirrored into DIR), and the root page listing them.
 */
static int write_simple(struct ctx *c, const char *dir, int *changed)
{
	char *ipath = path_join(dir, "index.json");
	json_t *root = json_load_file(ipath, 0, NULL);
	json_t *files = json_object_get(root, "files");
	struct strvec lines = STRVEC_INIT; /* "project\tfile\tsha256" */
	struct strbuf top = STRBUF_INIT, page = STRBUF_INIT;
	char *simple = path_join(dir, "simple");
	int rc = 0;
	size_t k;
	json_t *e;
	json_array_foreach(files, k, e)
	{
		const char *kind = json_string_value(json_object_get(e, "kind"));
		const char *file = json_string_value(json_object_get(e, "file"));
		const char *sha = json_string_value(json_object_get(e, "sha256"));
		if (!kind || strcmp(kind, "pip") != 0 || !file || !sha || !is_hex64(sha))
			continue;
		char *proj = dist_project(file);
		if (proj == NULL) {
			ev_log(c, EV_WARN, "mirror: %s is not a wheel or sdist name; not indexed",
			       file);
			continue;
		}
		strvec_pushf(&lines, "%s\t%s\t%s", proj, file, sha);
		free(proj);
	}
	if (lines.n > 1)
		qsort(lines.v, lines.n, sizeof(*lines.v), cmp_str);
	mkdirs_at(AT_FDCWD, simple, 0755);
	strbuf_adds(&top, "<!DOCTYPE html>\n<html><body>\n");
	for (size_t i = 0; i < lines.n && rc >= 0; i++) {
		size_t plen = strcspn(lines.v[i], "\t");
		if (i == 0 || strncmp(lines.v[i - 1], lines.v[i], plen + 1) != 0) {
			strbuf_reset(&page);
			strbuf_addf(&page, "<!DOCTYPE html>\n<html><body>\n");
			strbuf_addf(&top, "<a href=\"%.*s/\">%.*s</a>\n", (int)plen, lines.v[i],
			            (int)plen, lines.v[i]);
		}
		const char *file = lines.v[i] + plen + 1;
		size_t flen = strcspn(file, "\t");
		strbuf_addf(&page, "<a href=\"../../%.*s#sha256=%s\">%.*s</a>\n", (int)flen, file,
		            file + flen + 1, (int)flen, file);
		if (i + 1 == lines.n || strncmp(lines.v[i + 1], lines.v[i], plen + 1) != 0) {
			strbuf_adds(&page, "</body></html>\n");
			char *pdir = xasprintf("%s/%.*s", simple, (int)plen, lines.v[i]);
			char *ppath = path_join(pdir, "index.html");
			mkdirs_at(AT_FDCWD, pdir, 0755);
			rc = write_if_changed(ppath, page.buf, changed);
			free(pdir);
			free(ppath);
		}
	}
	strbuf_adds(&top, "</body></html>\n");
	if (rc >= 0) {
		char *tpath = path_join(simple, "index.html");
		rc = write_if_changed(tpath, top.buf, changed);
		free(tpath);
	}
	if (rc < 0)
		ev_log(c, EV_ERROR, "cannot write the PEP 503 pages under %s: %s", simple,
		       strerror(-rc));
	json_decref(root);
	strvec_release(&lines);
	strbuf_release(&top);
	strbuf_release(&page);
	free(simple);
	free(ipath);
	return rc < 0 ? TF_EIO : 0;
}

static int mirror_build(struct ctx *c, const char *dir, char **manifests, size_t nman)
{
	struct manifest **ms = xcalloc(nman, sizeof(*ms));
	struct mset s = {0};
	struct strvec md5_only = STRVEC_INIT;
	char *tmp = NULL;
	int rc = 0, changed = 0;

	for (size_t i = 0; i < nman; i++) {
		rc = cli_load_manifest(c, manifests[i], &ms[i], 0);
		if (rc != 0)
			goto out;
		struct pos at;
		const char *what = manifest_lock_pending(ms[i], &at);
		if (what) {
			ev_log(c, EV_ERROR,
			       "%s:%d:%d: %s is not pinned by hash yet; run `tfprov lock %s` first",
			       ms[i]->path, at.line, at.col, what, ms[i]->path);
			rc = TF_EMANIFEST;
			goto out;
		}
	}
	if (mkdirs_at(AT_FDCWD, dir, 0755) != 0) {
		ev_log(c, EV_ERROR, "cannot create %s: %s", dir, strerror(errno));
		rc = TF_EIO;
		goto out;
	}
	char *sub = path_join(dir, "sha256");
	mkdirs_at(AT_FDCWD, sub, 0755);
	free(sub);
	for (size_t i = 0; i < nman; i++)
		collect(&s, ms[i], &md5_only);
	/* Pass 1: what the manifests pin directly (the redist JSONs among them). */
	rc = fetch_range(c, &s, 0);
	if (rc != 0)
		goto out;
	/* Pass 2: what the verified redist JSONs resolve to. */
	size_t mark = s.n;
	for (size_t i = 0; i < nman && rc == 0; i++) {
		if (ms[i]->cuda.redist.set)
			rc = add_redist(c, &s, ms[i], &ms[i]->cuda.redist, "cuda");
		if (rc == 0 && ms[i]->cudnn.redist.set)
			rc = add_redist(c, &s, ms[i], &ms[i]->cudnn.redist, "cudnn");
	}
	if (rc == 0)
		rc = fetch_range(c, &s, mark);
	if (rc != 0)
		goto out;
	/* Pass 3: wheels of plain hash pins, through pip. */
	const char *td = getenv("TMPDIR");
	tmp = xasprintf("%s/tfprov-mirror.XXXXXX", td && td[0] ? td : "/tmp");
	if (mkdtemp(tmp) == NULL) {
		ev_log(c, EV_ERROR, "cannot create %s: %s", tmp, strerror(errno));
		free(tmp);
		tmp = NULL;
		rc = TF_EIO;
		goto out;
	}
	for (size_t i = 0; i < nman && rc == 0; i++)
		if (ms[i]->pip.nreqs) {
			char *sub_tmp = xasprintf("%s/%zu", tmp, i);
			mkdirs_at(AT_FDCWD, sub_tmp, 0755);
			rc = pip_wheels(c, &s, ms[i], dir, sub_tmp);
			free(sub_tmp);
		}
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < s.n && rc == 0 && !tf_interrupted; i++)
		rc = place_one(c, &s, &s.v[i], dir);
	if (rc == 0 && tf_interrupted)
		rc = TF_EINTR;
	if (rc == 0)
		rc = write_index(c, &s, dir, &changed);
	if (rc == 0)
		rc = write_simple(c, dir, &changed);
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < md5_only.n; i++)
		ev_log(c, EV_WARN,
		       "not mirrored (pinned by md5 only; tfprov verifies by sha256): %s",
		       md5_only.v[i]);
	if (s.copied + s.linked == 0 && !changed)
		ev_log(c, EV_INFO, "mirror %s is up to date: %zu files, nothing copied", dir, s.n);
	else
		ev_log(c, EV_INFO,
		       "mirror %s: %zu files (%zu copied, %zu hard-linked from the cache, "
		       "%zu already there); index.json and simple/ %s",
		       dir, s.n, s.copied, s.linked, s.present, changed ? "updated" : "unchanged");
out:
	if (tmp)
		fs_rmtree(tmp);
	free(tmp);
	for (size_t i = 0; i < nman; i++)
		manifest_free(ms[i]);
	free(ms);
	mset_release(&s);
	strvec_release(&md5_only);
	return rc;
}

int cmd_mirror(struct ctx *c, struct opts *o)
{
	if (o->args.n < 3 || strcmp(o->args.v[0], "build") != 0) {
		ev_log(c, EV_ERROR, "usage: tfprov mirror build DIR MANIFEST...");
		return TF_EUSAGE;
	}
	char *dir = o->args.v[1][0] == '/' ? xstrdup(o->args.v[1]) : NULL;
	if (dir == NULL) {
		char cwd[4096];
		dir =
		    getcwd(cwd, sizeof(cwd)) ? path_join(cwd, o->args.v[1]) : xstrdup(o->args.v[1]);
	}
	/* --key: the key is loaded (password asked) before the build, used after. */
	struct ms_seckey sk;
	int rc = o->key ? cli_load_seckey(c, o->key, &sk) : 0;
	if (rc == 0)
		rc = mirror_build(c, dir, o->args.v + 2, o->args.n - 2);
	if (rc == 0 && o->key)
		rc = cli_sign_mirror_index(c, dir, &sk);
	explicit_bzero(&sk, sizeof(sk));
	free(dir);
	return rc;
}
