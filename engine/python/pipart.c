/*
 * pipart.c - the files of a complete pip lock as artifacts (python.h).
 */
#include "python.h"
#include "artifact.h"
#include "digest.h"
#include "error.h"
#include "fs.h"
#include "manifest.h"
#include "util.h"
#include "wheel.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE_MAX (32u << 20) /* an index page larger than this is refused */

struct cand {
	char *file; /* file name */
	char *url;
	char sha[65]; /* "" when the source does not say */
	int wheel;
};

struct cands {
	struct cand *v;
	size_t n;
};

static void cands_add(struct cands *cs, const char *file, const char *url, const char *sha,
                      int wheel)
{
	cs->v = xrealloc(cs->v, (cs->n + 1) * sizeof(*cs->v));
	struct cand *k = &cs->v[cs->n++];
	k->file = xstrdup(file);
	k->url = xstrdup(url);
	snprintf(k->sha, sizeof(k->sha), "%s", sha ? sha : "");
	k->wheel = wheel;
}

static void cands_release(struct cands *cs)
{
	for (size_t i = 0; i < cs->n; i++) {
		free(cs->v[i].file);
		free(cs->v[i].url);
	}
	free(cs->v);
	cs->v = NULL;
	cs->n = 0;
}

/* A file name from an index is used as a name in a directory: plain characters only. */
static int safe_name(const char *f)
{
	size_t n = strlen(f);
	if (n == 0 || n > 250 || f[0] == '.')
		return 0;
	for (const char *p = f; *p; p++)
		if (!isalnum((unsigned char)*p) && strchr("._+-!~", *p) == NULL)
			return 0;
	return 1;
}

static char *names_path(const struct ctx *c, const char *sha)
{
	return xasprintf("%s/names/%s", c->cache_dir, sha);
}

/*
 * The memo of a hash: its file name, and where that file was found (the
 * URL, and the index whose page listed it; both "" when unknown). One
 * write makes it, so a power cut leaves a prefix of it: only lines that end
 * in '\n' count, and a memo without its place names the file only.
 */
struct memo {
	char *file, *url, *index;
};

static void memo_release(struct memo *m)
{
	free(m->file);
	free(m->url);
	free(m->index);
	*m = (struct memo){0};
}

/* 0 with the memo of sha (m->file a safe name), or -ENOENT: none, or none that reads. */
static int memo_get(const struct ctx *c, const char *sha, struct memo *m)
{
	char *p = names_path(c, sha), *text = NULL;
	size_t len = 0;
	*m = (struct memo){0};
	int rc = read_file_at(AT_FDCWD, p, 8192, &text, &len);
	free(p);
	if (rc != 0)
		return -ENOENT;
	char *line[3] = {NULL, NULL, NULL}, *s = text;
	for (int i = 0; i < 3; i++) {
		char *nl = strchr(s, '\n');
		if (nl == NULL)
			break;
		*nl = '\0';
		line[i] = s;
		s = nl + 1;
	}
	if (line[0] == NULL || !safe_name(line[0])) {
		free(text);
		return -ENOENT;
	}
	m->file = xstrdup(line[0]);
	int placed = line[2] != NULL && url_is_remote(line[1]);
	m->url = xstrdup(placed ? line[1] : "");
	m->index = xstrdup(placed ? line[2] : "");
	free(text);
	return 0;
}

/* The file name recorded for a verified hash, or NULL. */
static char *names_get(const struct ctx *c, const char *sha)
{
	struct memo m;
	if (memo_get(c, sha, &m) != 0)
		return NULL;
	char *file = m.file;
	m.file = NULL;
	memo_release(&m);
	return file;
}

/*
 * Remembers a file name for a hash, and the URL it was found at on the page
 * of `index` (NULL when not from an index): a hint for later runs, never
 * trusted for bytes.
 */
static void names_put(const struct ctx *c, const char *sha, const char *file, const char *url,
                      const char *index)
{
	if (!safe_name(file) || !is_hex64(sha))
		return;
	if (url == NULL || index == NULL || strchr(url, '\n') || strchr(index, '\n'))
		url = index = "";
	struct memo old;
	if (memo_get(c, sha, &old) == 0) {
		int same = strcmp(old.file, file) == 0 &&
		           (url[0] == '\0' ||
		            (strcmp(old.url, url) == 0 && strcmp(old.index, index) == 0));
		memo_release(&old);
		if (same)
			return;
	}
	char *dir = path_join(c->cache_dir, "names");
	char *p = names_path(c, sha);
	char *tmp = xasprintf("%s.tmp.%ld", p, (long)getpid());
	char *text = xasprintf("%s\n%s\n%s\n", file, url, index);
	mkdirs_at(AT_FDCWD, dir, 0700);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0) {
		int ok = fs_write_all(fd, text, strlen(text)) == 0;
		ok &= close(fd) == 0;
		if (!ok || rename(tmp, p) != 0)
			unlink(tmp);
	}
	free(text);
	free(tmp);
	free(p);
	free(dir);
}

/*
 * 1 for a wheel of name==version, 2 for its sdist (.tar.gz, .zip), else 0.
 * name is PEP 503 normalised.
 */
static int file_is(const char *file, const char *name, const char *version)
{
	size_t fl = strlen(file), vl = strlen(version);
	int rc = 0;
	if (str_ends_with(file, ".whl")) {
		struct wheel_name wn;
		if (wheel_name_parse(file, &wn) != 0)
			return 0;
		rc = strcmp(wn.name, name) == 0 && strcmp(wn.version, version) == 0;
		wheel_name_release(&wn);
		return rc ? 1 : 0;
	}
	size_t el = str_ends_with(file, ".tar.gz") ? 7 : str_ends_with(file, ".zip") ? 4 : 0;
	if (el == 0 || fl < el + vl + 2)
		return 0;
	const char *ver = file + fl - el - vl;
	if (strncmp(ver, version, vl) != 0 || ver[-1] != '-')
		return 0;
	char *raw = xstrndup(file, (size_t)(ver - 1 - file)), *nm = pip_normalize_name(raw);
	rc = strcmp(nm, name) == 0;
	free(raw);
	free(nm);
	return rc ? 2 : 0;
}

/* Whether one of the "."-separated alternatives of a tag part satisfies ok(). */
static int any_tag(const char *part, int (*ok)(const char *, const struct pipart_src *),
                   const struct pipart_src *src)
{
	char *s = xstrdup(part);
	int r = 0;
	for (char *sv = NULL, *t = strtok_r(s, ".", &sv); t && !r; t = strtok_r(NULL, ".", &sv))
		r = ok(t, src);
	free(s);
	return r;
}

static int plat_ok(const char *t, const struct pipart_src *src)
{
	if (strcmp(t, "any") == 0)
		return 1;
	size_t al = strlen(src->arch), tl = strlen(t);
	return strstr(t, "linux") != NULL && tl > al && t[tl - al - 1] == '_' &&
	       strcmp(t + tl - al, src->arch) == 0;
}

/* The interpreter tag: py3, py3X or cp3X of the env's X.Y (abi3 is checked by the caller). */
static int py_ok(const char *t, const struct pipart_src *src)
{
	if (src->pyver == NULL)
		return 1;
	int maj = 0, min = 0;
	if (sscanf(src->pyver, "%d.%d", &maj, &min) != 2)
		return 1;
	char *xy = xasprintf("%d%d", maj, min), *x = xasprintf("%d", maj);
	int r = 0;
	if (str_starts_with(t, "py"))
		r = strcmp(t + 2, x) == 0 || strcmp(t + 2, xy) == 0;
	else if (str_starts_with(t, "cp"))
		r = strcmp(t + 2, xy) == 0;
	free(xy);
	free(x);
	return r;
}

/* cpXY with abi3 runs on every later 3.x. */
static int abi3_ok(const char *t, const struct pipart_src *src)
{
	int maj = 0, min = 0, tmin = 0;
	if (src->pyver == NULL || sscanf(src->pyver, "%d.%d", &maj, &min) != 2)
		return 1;
	return str_starts_with(t, "cp3") && sscanf(t + 3, "%d", &tmin) == 1 && tmin <= min &&
	       maj == 3;
}

/* Whether a wheel's tags (PEP 425, from its file name) may suit the env. */
static int wheel_fits(const char *file, const struct pipart_src *src)
{
	struct wheel_name wn;
	if (wheel_name_parse(file, &wn) != 0)
		return 0;
	int r = any_tag(wn.plat, plat_ok, src) &&
	        (any_tag(wn.py, py_ok, src) ||
	         (strstr(wn.abi, "abi3") && any_tag(wn.py, abi3_ok, src)));
	wheel_name_release(&wn);
	return r;
}

/* An index page over http(s), TLS verified (artifact.h); a 404 is the pin's absence. */
/* A page that is not there (404) is the index saying no, not a network failure. */
static int page_rc(int rc, long status)
{
	return rc == TF_ENETWORK && status == 404 ? TF_EINTEGRITY : rc;
}

static int get_page(const struct ctx *c, const char *url, char **html, struct why *why)
{
	size_t len = 0;
	long status = 0;
	int rc = http_get_small(c, url, HTTPGET_HTTP_OR_HTTPS, "text/html", PAGE_MAX, html, &len,
	                        &status, why);
	return page_rc(rc, status);
}

/* The value of attribute `attr` in the tag starting at p (up to '>'), or NULL. */
static char *attr_value(const char *p, const char *end, const char *attr)
{
	size_t al = strlen(attr);
	for (const char *q = p; q + al + 1 < end; q++) {
		if (strncasecmp(q, attr, al) != 0 || q[al] != '=' || !isspace((unsigned char)q[-1]))
			continue;
		char quote = q[al + 1];
		const char *v = q + al + 2, *e;
		if (quote != '"' && quote != '\'')
			return NULL;
		if ((e = memchr(v, quote, (size_t)(end - v))) == NULL)
			return NULL;
		/* The only entity a PEP 503 href needs. */
		struct strbuf b = STRBUF_INIT;
		for (const char *s = v; s < e; s++) {
			if (strncmp(s, "&amp;", 5) == 0 && s + 5 <= e) {
				strbuf_adds(&b, "&");
				s += 4;
			} else {
				strbuf_add(&b, s, 1);
			}
		}
		return strbuf_detach(&b);
	}
	return NULL;
}

/* An href relative to the page it is on. */
static char *resolve_href(const char *page, const char *href)
{
	if (str_starts_with(href, "http://") || str_starts_with(href, "https://"))
		return xstrdup(href);
	if (href[0] == '/') {
		const char *s = strstr(page, "://");
		const char *slash = s ? strchr(s + 3, '/') : NULL;
		size_t n = slash ? (size_t)(slash - page) : strlen(page);
		return xasprintf("%.*s%s", (int)n, page, href);
	}
	const char *last = strrchr(page, '/');
	return xasprintf("%.*s%s", (int)(last ? last - page + 1 : 0), page, href);
}

/* Candidates for name==version on a PEP 503 page. */
static void page_cands(const char *page_url, const char *html, const char *name,
                       const char *version, struct cands *out)
{
	for (const char *p = html; (p = strchr(p, '<')) != NULL; p++) {
		if (strncasecmp(p, "<a", 2) != 0 || !isspace((unsigned char)p[2]))
			continue;
		const char *end = strchr(p, '>');
		if (end == NULL)
			break;
		char *href = attr_value(p + 2, end, "href");
		if (href) {
			char *frag = strchr(href, '#');
			char sha[65] = "";
			if (frag) {
				*frag++ = '\0';
				if (str_starts_with(frag, "sha256=") && is_hex64(frag + 7))
					snprintf(sha, sizeof(sha), "%s", frag + 7);
			}
			char *url = resolve_href(page_url, href);
			char *file = url_basename(url);
			int kind = safe_name(file) ? file_is(file, name, version) : 0;
			if (kind)
				cands_add(out, file, url, sha, kind == 1);
			free(file);
			free(url);
			free(href);
		}
		p = end;
	}
}

/* Candidates for name==version in a wheel directory, each hashed. */
static void dir_cands(const char *dir, const char *name, const char *version, struct cands *out)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		int kind = safe_name(de->d_name) ? file_is(de->d_name, name, version) : 0;
		if (kind == 0)
			continue;
		char *p = path_join(dir, de->d_name);
		char sha[65] = "";
		if (sha256_file(p, sha, NULL) != 0)
			sha[0] = '\0';
		cands_add(out, de->d_name, p, sha, kind == 1);
		free(p);
	}
	if (d)
		closedir(d);
}

static int pinned(const struct pip_req *q, const char *sha)
{
	for (size_t h = 0; h < q->nhashes; h++)
		if (strcmp(q->hashes[h], sha) == 0)
			return 1;
	return 0;
}

/*
 * The candidates to declare: pinned ones (wheels before sdists), those that
 * may suit the env when any does. Marks them in use[]; returns how many.
 */
static size_t choose(const struct cands *cs, const struct pip_req *q, const struct pipart_src *src,
                     int *use)
{
	size_t n = 0;
	for (int pass = 0; pass < 4 && n == 0; pass++) {
		int want_wheel = pass < 2, want_fit = pass % 2 == 0;
		for (size_t i = 0; i < cs->n; i++) {
			const struct cand *k = &cs->v[i];
			use[i] = pinned(q, k->sha) && k->wheel == want_wheel &&
			         (!want_fit || !k->wheel || wheel_fits(k->file, src));
			n += (size_t)use[i];
		}
	}
	return n;
}

/* Label of a pin in messages: name==version (file). */
static char *label(const struct pip_req *q, const char *file)
{
	const char *name = q->raw_name ? q->raw_name : q->name ? q->name : "?";
	return q->version ? xasprintf("%s==%s (%s)", name, q->version, file)
	                  : xasprintf("%s (%s)", name, file);
}

/*
 * 1. Files of this pin already verified into the cache: no index needed,
 * when the memo says where the file was found (this index's page, or the
 * wheel directory). The fetch takes the bytes from the cache by their hash;
 * that URL is where it goes when the cached copy no longer hashes right (a
 * power cut can leave a name whose bytes never reached the disk).
 */
static void memo_cands(struct ctx *c, const struct pip_req *q, const struct pipart_src *src,
                       const char *index, struct cands *cs)
{
	for (size_t h = 0; h < q->nhashes; h++) {
		struct memo m;
		char *path = cache_lookup(c, q->hashes[h]);
		if (path && memo_get(c, q->hashes[h], &m) == 0) {
			char *url = NULL;
			if (!file_is(m.file, q->name, q->version))
				url = NULL;
			else if (src->dir)
				url = path_join(src->dir, m.file);
			else if (m.url[0] && strcmp(m.index, index) == 0)
				url = xstrdup(m.url);
			if (url)
				cands_add(cs, m.file, url, q->hashes[h],
				          str_ends_with(m.file, ".whl"));
			free(url);
			memo_release(&m);
		}
		free(path);
	}
}

/* 1 when the files memo_cands found answer for the pin (step 1 of resolve_one). */
static int memo_answers(const struct cands *cs, const struct pip_req *q,
                        const struct pipart_src *src)
{
	int *use = xcalloc(cs->n + 1, sizeof(*use));
	int yes = cs->n && choose(cs, q, src, use);
	free(use);
	return yes;
}

/* The index page URL of a pin (the caller frees it). */
static char *page_url(const struct pip_req *q, const char *index)
{
	return xasprintf("%s%s%s/", index, str_ends_with(index, "/") ? "" : "/", q->name);
}

/*
 * One pin into out. known: what memo_cands found for it (taken over). got:
 * its index page when pipart_resolve fetched it with the others (NULL:
 * fetched here when needed).
 */
static int resolve_one(struct ctx *c, const struct pip_req *q, const struct pipart_src *src,
                       const char *index, struct cands *known, struct http_small *got,
                       struct artset *out, struct why *why)
{
	struct cands cs = *known;
	*known = (struct cands){0};
	int *use = NULL, rc = 0;
	char *page = NULL;
	const char *sep = str_ends_with(index, "/") ? "" : "/";
	/* The candidates' URLs are where this index's pages list them (memo). */
	int from_index = !src->dir && !(c->flags & CTX_OFFLINE);
	use = xcalloc(cs.n + 1, sizeof(*use));
	if (cs.n && choose(&cs, q, src, use))
		goto add;
	cands_release(&cs);
	/* 2. Where pip would look. */
	if (src->dir) {
		dir_cands(src->dir, q->name, q->version, &cs);
	} else if (c->flags & CTX_OFFLINE) {
		/* No index offline: the names of files verified earlier. */
		for (size_t h = 0; h < q->nhashes; h++) {
			char *file = names_get(c, q->hashes[h]);
			if (file && file_is(file, q->name, q->version)) {
				char *url = xasprintf("%s%s%s/%s", index, sep, q->name, file);
				cands_add(&cs, file, url, q->hashes[h],
				          str_ends_with(file, ".whl"));
				free(url);
			}
			free(file);
		}
	} else {
		char *html = NULL;
		struct why e = {0};
		page = page_url(q, index);
		if (got && got->done) {
			html = got->body;
			got->body = NULL;
			rc = page_rc(got->why.code, got->status);
			why_move(&e, &got->why);
		} else {
			rc = get_page(c, page, &html, &e);
		}
		if (rc != 0) {
			why_code(&e, rc);
			why_fail(why, rc, "%s==%s: cannot read the index page %s (%s)",
			         q->raw_name ? q->raw_name : q->name, q->version, page,
			         why_text(&e));
			why_clear(&e);
			goto out;
		}
		page_cands(page, html, q->name, q->version, &cs);
		free(html);
	}
	free(use);
	use = xcalloc(cs.n + 1, sizeof(*use));
	if (choose(&cs, q, src, use) == 0) {
		/*
		 * No file with a pinned hash. Offline, the pin is declared by its
		 * hash and the fetch names it among the missing. Else a file of the
		 * pin that suits the env is declared with the pinned hash, so the
		 * download fails verification naming both hashes; with none at all,
		 * the pin is named here.
		 */
		size_t pick = cs.n;
		for (size_t i = 0; i < cs.n && pick == cs.n; i++)
			if (!cs.v[i].wheel || wheel_fits(cs.v[i].file, src))
				pick = i;
		if (pick < cs.n) {
			snprintf(cs.v[pick].sha, sizeof(cs.v[pick].sha), "%s", q->hashes[0]);
			use[pick] = 1;
		} else if ((c->flags & CTX_OFFLINE) && !src->dir) {
			char *name =
			    xasprintf("%s==%s", q->raw_name ? q->raw_name : q->name, q->version);
			char *url = xasprintf("%s%s%s/", index, sep, q->name);
			artset_add(out, name, url, q->hashes[0], -1, 0);
			free(name);
			free(url);
			goto out;
		} else {
			rc = why_fail(why, TF_EINTEGRITY,
			              "%s==%s: %s has no file of this version with a hash the lock "
			              "pins (sha256 %s%s)",
			              q->raw_name ? q->raw_name : q->name, q->version,
			              src->dir ? src->dir : page, q->hashes[0],
			              q->nhashes > 1 ? ", ..." : "");
			goto out;
		}
	}
add:
	for (size_t i = 0; i < cs.n; i++) {
		if (!use[i])
			continue;
		char *l = label(q, cs.v[i].file);
		artset_add(out, l, cs.v[i].url, cs.v[i].sha, -1, 0);
		names_put(c, cs.v[i].sha, cs.v[i].file, from_index ? cs.v[i].url : NULL, index);
		free(l);
	}
out:
	free(page);
	free(use);
	cands_release(&cs);
	return rc;
}

int pipart_resolve(struct ctx *c, const struct pip_req *reqs, size_t n,
                   const struct pipart_src *src, struct artset *out, struct why *why)
{
	const char *index = src->index_url ? src->index_url : "https://pypi.org/simple/";
	int rc = 0;
	/*
	 * The index pages of every pin the cache cannot answer for, fetched at
	 * once: one at a time, 40 pins behind a 50 ms round trip left the link
	 * idle for seconds before the first download.
	 */
	struct http_small *pages = xcalloc(n + 1, sizeof(*pages));
	struct http_small *want = xcalloc(n + 1, sizeof(*want));
	struct cands *known = xcalloc(n + 1, sizeof(*known));
	size_t *at = xcalloc(n + 1, sizeof(*at)), nwant = 0;
	for (size_t i = 0; i < n; i++) {
		const struct pip_req *q = &reqs[i];
		if (q->nhashes == 0 || q->url || q->name == NULL || q->version == NULL)
			continue;
		memo_cands(c, q, src, index, &known[i]);
		if (src->dir || (c->flags & CTX_OFFLINE) || memo_answers(&known[i], q, src))
			continue;
		at[nwant] = i;
		want[nwant++].url = page_url(q, index);
	}
	http_get_small_many(c, want, nwant, HTTPGET_HTTP_OR_HTTPS, "text/html", PAGE_MAX);
	for (size_t k = 0; k < nwant; k++) {
		pages[at[k]] = want[k];
		pages[at[k]].url = NULL;
		free((char *)want[k].url);
	}
	free(want);
	free(at);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct pip_req *q = &reqs[i];
		if (q->nhashes == 0)
			continue; /* pip refuses it (--require-hashes) at apply */
		if (q->url) {
			char *file = url_basename(q->url);
			char *l = label(q, file);
			artset_add(out, l, q->url, q->hashes[0], -1, 0);
			names_put(c, q->hashes[0], file, NULL, NULL);
			free(l);
			free(file);
			continue;
		}
		if (q->name == NULL || q->version == NULL)
			continue; /* not name==version: pip resolves it at apply */
		rc = resolve_one(c, q, src, index, &known[i], &pages[i], out, why);
	}
	for (size_t i = 0; i < n; i++) {
		free(pages[i].body);
		why_clear(&pages[i].why);
		cands_release(&known[i]);
	}
	free(pages);
	free(known);
	return rc;
}

int pipart_wheelhouse(struct ctx *c, const struct pip_req *reqs, size_t n, const char *dir,
                      int *complete, struct why *why)
{
	int rc = 0;
	*complete = 1;
	for (size_t i = 0; i < n && rc == 0 && *complete; i++) {
		const struct pip_req *q = &reqs[i];
		int found = 0;
		for (size_t h = 0; h < q->nhashes && rc == 0; h++) {
			char *file = names_get(c, q->hashes[h]),
			     *path = cache_lookup(c, q->hashes[h]);
			if (file && path) {
				char *dst = path_join(dir, file);
				if (access(dst, F_OK) == 0) {
					found = 1; /* the same file pinned twice */
				} else if (link(path, dst) == 0) {
					found = 1;
				} else {
					char hex[65];
					int64_t size = 0;
					int e = copy_file_hashing(path, dst, hex, &size);
					if (e == 0 && strcmp(hex, q->hashes[h]) == 0) {
						found = 1;
					} else {
						rc = why_fail(
						    why, e ? TF_EIO : TF_EINTEGRITY,
						    "%s: cannot copy into %s: %s", path, dir,
						    e ? strerror(-e) : "the copy's sha256 differs");
					}
				}
				free(dst);
			}
			free(file);
			free(path);
		}
		if (rc == 0 && !found)
			*complete = 0;
	}
	return rc;
}

void pipart_mark_predecode(struct ctx *c, struct artset *out, size_t from, const char *env_path,
                           const char *pyver)
{
	int all = 1;
	for (size_t i = from; i < out->n && all; i++) {
		char *base = url_basename(out->v[i].url);
		struct wheel_name wn;
		all = wheel_name_parse(base, &wn) == 0;
		if (all)
			wheel_name_release(&wn);
		free(base);
	}
	for (size_t i = from; i < out->n && all; i++) {
		char *base = url_basename(out->v[i].url);
		if (wheel_predecode_wanted(c, env_path, pyver, base))
			artset_mark_python(out, i, ART_WHEEL);
		free(base);
	}
}
