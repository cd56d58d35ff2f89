/*
 * locktext.c - the two lock formats a manifest carries inline or beside
 * itself: a conda explicit lock (@EXPLICIT, one URL#hash a line) and a pip
 * requirements file (hash-pinned, "\\" continuations, --hash options).
 *
 * Each parser reads text, not YAML: diagnostics are positioned from `base`
 * (inside the manifest's block scalar when `block`, else in the side file),
 * and a line of the author's file is quoted only through Q(), never whole.
 */
#include "manifest.h"
#include "locktext.h"
#include "error.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/*
 * What a diagnostic quotes of a line of a lock or requirements file: at most
 * EXCERPT_MAX bytes, printable ASCII only ('?' for the rest), "..." when cut.
 * A side file is the manifest author's choice of file, so its lines are
 * never echoed whole. Used as Q(s) in an argument list (a C11 temporary).
 */
#define EXCERPT_MAX 40
struct excerpt {
	char s[EXCERPT_MAX + 4];
};
static struct excerpt excerpt(const char *in)
{
	struct excerpt e;
	size_t i = 0;
	for (; in[i] && i < EXCERPT_MAX; i++)
		e.s[i] = in[i] >= 0x20 && in[i] < 0x7f ? in[i] : '?';
	strcpy(e.s + i, in[i] ? "..." : "");
	return e;
}
#define Q(str) (excerpt(str).s)

/*
 * One package line of an explicit lock, after @EXPLICIT: URL#sha256:<hex>
 * (or #<md5>) naming NAME-VERSION-BUILD.conda or .tar.bz2. 0 with *pk
 * filled (its strings the caller's), or 1 after a diagnostic at pos.
 * Consumes t (the '#' becomes a NUL).
 */
static int conda_pkg_line(const char *file, char *t, struct pos pos, struct conda_pkg *pk,
                          struct diags *d)
{
	char *hash = strchr(t, '#');
	memset(pk, 0, sizeof(*pk));
	pk->pos = pos;
	if (hash == NULL) {
		diags_add(d, DIAG_ERROR, file, pos, "conda.no-hash",
		          "append #sha256:<64 hex> to the URL", "conda package '%s' has no hash",
		          Q(t));
		return 1;
	}
	*hash++ = '\0';
	if (str_starts_with(hash, "sha256:") && is_hex64(hash + 7)) {
		memcpy(pk->sha256, hash + 7, 65);
	} else if (strlen(hash) == 32 && strspn(hash, "0123456789abcdef") == 32) {
		memcpy(pk->md5, hash, 33);
	} else {
		diags_add(d, DIAG_ERROR, file, pos, "conda.bad-hash",
		          "use #sha256:<64 lowercase hex> (CEP 23) or #<32 hex md5>",
		          "conda package hash '%s' is malformed", Q(hash));
		return 1;
	}
	if (!(str_starts_with(t, "https://") || str_starts_with(t, "http://") ||
	      str_starts_with(t, "file://"))) {
		diags_add(d, DIAG_ERROR, file, pos, "conda.bad-url", NULL,
		          "'%s' is not a package URL", Q(t));
		return 1;
	}
	const char *fn = strrchr(t, '/') + 1;
	size_t fl = strlen(fn);
	if (str_ends_with(fn, ".tar.bz2"))
		fl -= 8;
	else if (str_ends_with(fn, ".conda"))
		fl -= 6;
	else {
		diags_add(d, DIAG_ERROR, file, pos, "conda.bad-url",
		          "conda packages end in .conda or .tar.bz2",
		          "'%s' is not a conda package file name", Q(fn));
		return 1;
	}
	char *stem = xstrndup(fn, fl);
	char *b = strrchr(stem, '-');
	char *v = NULL;
	if (b) {
		*b = '\0';
		v = strrchr(stem, '-');
	}
	if (b == NULL || v == NULL || v == stem) {
		diags_add(d, DIAG_ERROR, file, pos, "conda.bad-url",
		          "file names are NAME-VERSION-BUILD.conda",
		          "cannot read name-version-build from '%s'", Q(fn));
		free(stem);
		return 1;
	}
	*v = '\0';
	pk->name = xstrdup(stem);
	pk->version = xstrdup(v + 1);
	pk->build = xstrdup(b + 1);
	pk->url = xstrdup(t);
	free(stem);
	return 0;
}

int conda_explicit_parse(const char *file, const char *text, struct pos base, int block,
                         struct conda_pkg **pkgs, size_t *npkgs, struct diags *d)
{
	size_t errors_before = d->errors;
	int explicit_seen = 0;
	size_t idx = 0;
	const char *s = text;
	*pkgs = NULL;
	*npkgs = 0;
	size_t cap = 0;
	while (*s) {
		const char *e = strchr(s, '\n');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		char *line = xstrndup(s, n);
		char *t = line;
		while (*t == ' ' || *t == '\t')
			t++;
		size_t tl = strlen(t);
		while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\r' || t[tl - 1] == '\t'))
			t[--tl] = '\0';
		struct pos pos = block ? base : (struct pos){(int)idx + 1, 1};
		if (block) {
			pos.line = base.line + (int)idx;
			pos.col = base.col + (int)(t - line);
		}
		struct conda_pkg pk;
		if (*t == '\0' || *t == '#') {
			/* comments, including "# platform: linux-64" */
		} else if (strcmp(t, "@EXPLICIT") == 0) {
			explicit_seen = 1;
		} else if (!explicit_seen) {
			diags_add(d, DIAG_ERROR, file, pos, "conda.no-explicit",
			          "an explicit lock starts with a line '@EXPLICIT' (conda list "
			          "--explicit, conda-lock)",
			          "package line before @EXPLICIT");
		} else if (conda_pkg_line(file, t, pos, &pk, d) == 0) {
			if (*npkgs == cap) {
				cap = cap ? cap * 2 : 32;
				*pkgs = xrealloc(*pkgs, cap * sizeof(**pkgs));
			}
			(*pkgs)[(*npkgs)++] = pk;
		}
		free(line);
		idx++;
		s = e ? e + 1 : s + n;
	}
	if (!explicit_seen && d->errors == errors_before)
		diags_add(d, DIAG_ERROR, file, base, "conda.no-explicit",
		          "an explicit lock has a line '@EXPLICIT' before its package URLs",
		          "conda lock has no @EXPLICIT line");
	return d->errors > errors_before ? TF_EMANIFEST : 0;
}

/*
 * The next logical line of requirements text from *sp, "\" continuations
 * joined and comments dropped; *at is where it starts (within the block
 * when `block`), *idx counts physical lines. NULL at the end; caller frees.
 */
static char *next_logical(const char **sp, struct pos base, int block, size_t *idx, struct pos *at)
{
	struct strbuf logical = STRBUF_INIT;
	const char *s = *sp;
	if (*s == '\0')
		return NULL;
	while (*s) {
		const char *e = strchr(s, '\n');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		char *line = xstrndup(s, n);
		char *t = line;
		while (*t == ' ' || *t == '\t')
			t++;
		struct pos pos = {(int)*idx + 1, (int)(t - line) + 1};
		if (block)
			pos = (struct pos){base.line + (int)*idx, base.col + (int)(t - line)};
		if (logical.len == 0)
			*at = pos;
		char *hashc = strstr(t, " #");
		if (*t == '#')
			*t = '\0';
		else if (hashc)
			*hashc = '\0';
		size_t tl = strlen(t);
		while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\r' || t[tl - 1] == '\t'))
			t[--tl] = '\0';
		int cont = tl && t[tl - 1] == '\\';
		if (cont)
			t[--tl] = '\0';
		strbuf_addf(&logical, "%s ", t);
		free(line);
		(*idx)++;
		s = e ? e + 1 : s + n;
		if (!(cont && *s))
			break;
	}
	*sp = s;
	return strbuf_detach(&logical);
}

/*
 * Splits one logical line (NAME[extras]==VER [; marker] --hash=...) into the
 * requirement's words (into spec) and its hashes (into r); 1 when it holds a
 * bad option (diagnosed at r->pos), else 0.
 */
static int split_options(const char *file, char *buf, struct pip_req *r, struct strbuf *spec,
                         struct diags *d)
{
	char *save = NULL, *tok;
	int bad = 0;
	for (tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		if (str_starts_with(tok, "--hash=")) {
			const char *h = tok + 7;
			if (!str_starts_with(h, "sha256:") || !is_hex64(h + 7)) {
				diags_add(d, DIAG_ERROR, file, r->pos, "pip.bad-hash",
				          "use --hash=sha256:<64 lowercase hex>",
				          "malformed hash option '%s'", Q(tok));
				bad = 1;
				continue;
			}
			r->hashes = xrealloc(r->hashes, (r->nhashes + 1) * sizeof(*r->hashes));
			r->hashes[r->nhashes++] = xstrdup(h + 7);
		} else if (tok[0] == '-') {
			diags_add(d, DIAG_ERROR, file, r->pos, "pip.option",
			          "only --hash options are allowed; set the index with "
			          "pip.index_url",
			          "pip option '%s' is not allowed in pins", Q(tok));
			bad = 1;
		} else {
			if (spec->len)
				strbuf_adds(spec, " ");
			strbuf_adds(spec, tok);
		}
	}
	return bad;
}

/* The name, the direct reference's URL and the pinned version of r->spec. */
static void read_spec(struct pip_req *r)
{
	size_t nl = strcspn(r->spec, "[=<>!~; ");
	r->raw_name = xstrndup(r->spec, nl);
	r->name = pip_normalize_name(r->raw_name);
	const char *eq = strstr(r->spec, "==");
	const char *at = strchr(r->spec, '@');
	if (at && !eq) {
		/* PEP 440 direct reference to a wheel: the version is in its name. */
		at++;
		while (*at == ' ')
			at++;
		r->url = xstrndup(at, strcspn(at, " ;"));
		const char *fn = strrchr(r->url, '/');
		fn = fn ? fn + 1 : r->url;
		const char *v = strchr(fn, '-');
		if (str_ends_with(r->url, ".whl") && v && strchr(v + 1, '-'))
			r->version = xstrndup(v + 1, strcspn(v + 1, "-"));
	} else if (eq && eq[2] != '=') {
		const char *v = eq + 2;
		r->version = xstrndup(v, strcspn(v, " ;,"));
	}
	if (r->version && strpbrk(r->version, "*<>!~,")) {
		free(r->version);
		r->version = NULL;
	}
}

/* A pin without one version or without a hash: an error, or lock input's warning. */
static void check_pinned(const char *file, const struct pip_req *r, int lock_input, struct diags *d)
{
	if (lock_input && (r->version == NULL || r->nhashes == 0))
		diags_add(d, DIAG_WARNING, file, r->pos, "pip.lock-input",
		          "run `tfprov lock`: pip's resolver pins it and adds every hash",
		          "requirement '%s' is %s yet", Q(r->spec),
		          r->version == NULL ? "not pinned to one version" : "not hashed");
	else if (r->version == NULL)
		diags_add(d, DIAG_ERROR, file, r->pos, "pip.unpinned",
		          "pin an exact version with ==, as `pip-compile --generate-hashes` or "
		          "`uv export` write it, or reference a wheel: name @ https://.../x.whl",
		          "requirement '%s' is not pinned to one version", Q(r->spec));
	else if (r->nhashes == 0)
		diags_add(d, DIAG_ERROR, file, r->pos, "pip.no-hash",
		          "add --hash=sha256:<hex> for every file of this release",
		          "requirement '%s' has no --hash", Q(r->spec));
}

/*
 * lock_input: the pins of a `complete: false` section, which `tfprov lock`
 * completes. There a requirement may leave out its hashes, or name a range
 * (tf-keras~=2.20.0): lock resolves and hashes it. Warnings, not errors.
 */
int pip_requirements_parse_lock(const char *file, const char *text, struct pos base, int block,
                                int lock_input, struct pip_req **reqs, size_t *nreqs,
                                struct diags *d)
{
	size_t errors_before = d->errors;
	size_t cap = 0, idx = 0;
	const char *s = text;
	struct pos lpos = base;
	char *buf;
	*reqs = NULL;
	*nreqs = 0;
	while ((buf = next_logical(&s, base, block, &idx, &lpos)) != NULL) {
		struct pip_req r;
		memset(&r, 0, sizeof(r));
		r.pos = lpos;
		struct strbuf spec = STRBUF_INIT;
		int bad = split_options(file, buf, &r, &spec, d);
		free(buf);
		if (spec.len == 0) {
			strbuf_release(&spec);
			for (size_t i = 0; i < r.nhashes; i++)
				free(r.hashes[i]);
			free(r.hashes);
			if (r.nhashes)
				diags_add(d, DIAG_ERROR, file, lpos, "pip.syntax", NULL,
				          "hash without a requirement");
			continue;
		}
		r.spec = strbuf_detach(&spec);
		read_spec(&r);
		if (!bad)
			check_pinned(file, &r, lock_input, d);
		if (*nreqs == cap) {
			cap = cap ? cap * 2 : 32;
			*reqs = xrealloc(*reqs, cap * sizeof(**reqs));
		}
		(*reqs)[(*nreqs)++] = r;
	}
	return d->errors > errors_before ? TF_EMANIFEST : 0;
}

int pip_requirements_parse(const char *file, const char *text, struct pos base, int block,
                           struct pip_req **reqs, size_t *nreqs, struct diags *d)
{
	return pip_requirements_parse_lock(file, text, base, block, 0, reqs, nreqs, d);
}
