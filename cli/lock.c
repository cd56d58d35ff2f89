/*
 * lock.c - `tfprov lock MANIFEST [-o OUT]`: turns the higher-level forms of a
 * manifest into the inline lockfile form (manifests/SCHEMA.md, "tfprov lock").
 *
 *  - cuda.redist / cudnn.redist: the pinned redistrib JSON is fetched (and so
 *    verified by its sha256) into the cache, resolved for the stack's
 *    platform, and written as inline artifacts with the JSON's own url,
 *    sha256 and size, under a comment naming the JSON.
 *  - pip: a partial pin set is completed into the full closure by pip's own
 *    resolver (pip_lock), and `complete: true` is set. Never a home-made
 *    resolver. pip resolves for the interpreter it runs in: for manager: conda
 *    that is the stack's own Python, from its explicit lock installed natively
 *    into a throwaway prefix (so a 3.10 stack locks on a machine whose python3
 *    is 3.11); for venv, a venv of the host's Python X.Y (an error naming the
 *    version when there is none). Each line gets every hash of the chosen
 *    version's files for that interpreter's platform. The knowledge base's caps
 *    (data/compat.yaml pip.caps) are applied by resolving again with the cap.
 *
 * Invariants:
 *  1. The YAML text is edited surgically: only the lines of the replaced
 *     blocks change (found through the key positions of the parsed tree), so
 *     comments and layout elsewhere survive review in a pull request.
 *  2. The result is parsed and linted before anything is written; a result
 *     that does not validate writes nothing (exit 1, with the diagnostics).
 *  3. The output is committed on close: a temp file in the destination
 *     directory (O_EXCL), fsynced, renamed over the target. Any failure
 *     (network, integrity, resolution) leaves the file untouched.
 *  4. `missing:` entries are the user's declarations; lock never removes
 *     them, it only says which of them the lock may have closed.
 */
#include "cli.h"
#include "kb.h"
#include "python.h"
#include "error.h"
#include "event.h"
#include "artifact.h"
#include "manifest.h"
#include "fs.h"
#include "yamltree.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One replacement of whole lines [first, last] (1-based); last == first - 1 inserts. */
struct edit {
	int first, last;
	char *text; /* complete lines, each ending in '\n' */
};

struct edits {
	struct edit v[12];
	size_t n;
};

/* The lines of a text: start offsets, plus one past the end. */
struct lines {
	const char *text;
	size_t *off; /* n + 1 entries */
	int n;
};

static void lines_init(struct lines *l, const char *text, size_t len)
{
	l->text = text;
	l->n = 0;
	l->off = xmalloc((len + 2) * sizeof(*l->off));
	size_t i = 0;
	while (i < len) {
		l->off[l->n++] = i;
		const char *nl = memchr(text + i, '\n', len - i);
		i = nl ? (size_t)(nl - text) + 1 : len;
	}
	l->off[l->n] = len;
}

/* Line k (1-based) without its newline. */
static const char *line_at(const struct lines *l, int k, size_t *len)
{
	size_t a = l->off[k - 1], b = l->off[k];
	while (b > a && (l->text[b - 1] == '\n' || l->text[b - 1] == '\r'))
		b--;
	*len = b - a;
	return l->text + a;
}

static int line_indent(const struct lines *l, int k, int *blank_or_comment)
{
	size_t len;
	const char *s = line_at(l, k, &len);
	size_t i = 0;
	while (i < len && s[i] == ' ')
		i++;
	*blank_or_comment = i == len || s[i] == '#';
	return (int)i;
}

/*
 * The last line of the block a key opens at line `key_line`, indent `ind`:
 * every following line that is more indented, or blank, or a comment, less
 * the blank lines and shallower comments that trail it.
 */
static int block_end(const struct lines *l, int key_line, int ind)
{
	int end = key_line, k;
	for (k = key_line + 1; k <= l->n; k++) {
		int bc;
		int i = line_indent(l, k, &bc);
		if (!bc && i <= ind)
			break;
		if (!bc || i > ind) {
			size_t len;
			line_at(l, k, &len);
			if (len > 0 && (size_t)i < len)
				end = k;
		}
	}
	return end;
}

/* The key node `key` of mapping `map` (not its value), or NULL. */
static const struct ynode *ymap_key(const struct ynode *map, const char *key)
{
	if (map == NULL || map->type != Y_MAP)
		return NULL;
	for (size_t i = 0; i < map->n; i++)
		if (map->keys[i]->type == Y_SCALAR && strcmp(map->keys[i]->str, key) == 0)
			return map->keys[i];
	return NULL;
}

/* A key that starts its line (block style), so its lines can be replaced. */
static int key_is_block(const struct lines *l, const struct ynode *k)
{
	int bc;
	return k->pos.line >= 1 && k->pos.line <= l->n &&
	       line_indent(l, k->pos.line, &bc) == k->pos.col - 1;
}

static void edits_add(struct edits *e, int first, int last, char *text)
{
	if (e->n == ARRAY_SIZE(e->v))
		abort(); /* a fixed, small number of edits per manifest */
	e->v[e->n++] = (struct edit){first, last, text};
}

static int cmp_edit(const void *a, const void *b)
{
	return ((const struct edit *)a)->first - ((const struct edit *)b)->first;
}

/* Applies non-overlapping edits; returns the new text (caller frees). */
static char *edits_apply(struct edits *e, const struct lines *l)
{
	struct strbuf sb = STRBUF_INIT;
	int k = 1;
	if (e->n > 1)
		qsort(e->v, e->n, sizeof(e->v[0]), cmp_edit);
	for (size_t i = 0; i < e->n; i++) {
		for (; k < e->v[i].first; k++)
			strbuf_add(&sb, l->text + l->off[k - 1], l->off[k] - l->off[k - 1]);
		if (sb.len && sb.buf[sb.len - 1] != '\n')
			strbuf_adds(&sb, "\n");
		strbuf_adds(&sb, e->v[i].text);
		k = e->v[i].last + 1;
	}
	for (; k <= l->n; k++)
		strbuf_add(&sb, l->text + l->off[k - 1], l->off[k] - l->off[k - 1]);
	return strbuf_detach(&sb);
}

static void edits_release(struct edits *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i].text);
	e->n = 0;
}

static const char *stack_platform(const struct manifest *m)
{
	return m->stack.platform == PLATFORM_WINDOWS_X86_64 ? "windows-x86_64" : "linux-x86_64";
}

/* YAML needs no quoting for URLs, hex and component names; refuse what would. */
static int yaml_plain_ok(const char *s)
{
	if (s == NULL || *s == '\0' || strchr("-?:,[]{}#&*!|>'\"%@`", s[0]))
		return 0;
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || (p[0] == ':' && p[1] == ' ') ||
		    (p[0] == ' ' && p[1] == '#'))
			return 0;
	return 1;
}

static void add_artifact_fields(struct strbuf *sb, int ind, const struct redist_artifact *a)
{
	strbuf_addf(sb, "%*surl: %s\n", ind, "", a->url);
	strbuf_addf(sb, "%*ssha256: %s\n", ind, "", a->sha256);
	if (a->size > 0)
		strbuf_addf(sb, "%*ssize: %lld\n", ind, "", (long long)a->size);
	strbuf_addf(sb, "%*sstrip: %d\n", ind, "", a->strip);
}

/* A JSON pinned on first use: where its bytes came from and their hash. */
struct tofu_pin {
	char *path; /* the fetched file, removed by tofu_pin_release */
	char sha256[65];
	int64_t size;
	struct strvec chain; /* every URL asked, redirects included; the last served it */
};

/* "A -> B -> C", the redirect chain of a pin, and its final host. Caller frees. */
static char *chain_text(const struct strvec *chain, const char *sep)
{
	struct strbuf sb = STRBUF_INIT;
	for (size_t i = 0; i < chain->n; i++)
		strbuf_addf(&sb, "%s%s", i ? sep : "", chain->v[i]);
	return strbuf_detach(&sb);
}

static void add_provenance(struct strbuf *sb, int ind, const struct redist_ref *r,
                           const char *platform, const struct tofu_pin *t)
{
	strbuf_addf(sb, "%*s# Locked by `tfprov lock` from redistrib JSON %s\n", ind, "",
	            r->json.url.s);
	for (size_t i = 1; t && i < t->chain.n; i++)
		strbuf_addf(sb, "%*s#   redirected to %s\n", ind, "", t->chain.v[i]);
	if (t && t->chain.n > 1) {
		char *host = url_host(t->chain.v[t->chain.n - 1]);
		strbuf_addf(sb, "%*s#   served by host %s.\n", ind, "", host);
		free(host);
	}
	strbuf_addf(sb, "%*s#   (sha256 %s%s), platform %s%s%s.\n", ind, "",
	            t ? t->sha256 : r->json.sha256.s,
	            t ? ", trusted on first use: fetched over TLS with no pinned hash" : "",
	            platform, r->variant.set ? ", variant " : "",
	            r->variant.set ? r->variant.s : "");
}

/*
 * Trust on first use: a redist JSON written without its sha256 is fetched
 * from its own https:// URL (no mirror: the server's certificate is all
 * that vouches for it), hashed while it streams, and pinned from then on.
 * The output says so, with the hash, so a reviewer can compare it with a
 * second source.
 */
static int tofu_pin_fetch(struct ctx *c, const struct redist_ref *r, const char *what,
                          struct tofu_pin *t)
{
	char *dir = path_join(c->cache_dir, "tofu");
	struct why err = {0};
	int rc = mkdirs_at(AT_FDCWD, dir, 0755);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "cannot create %s: %s", dir, strerror(errno));
		free(dir);
		return TF_EIO;
	}
	t->path = xasprintf("%s/%s.%ld.json", dir, what, (long)getpid());
	free(dir);
	unlink(t->path); /* a stale file of a dead run with this pid */
	rc =
	    tofu_fetch(c, r->json.url.s, 64LL << 20, t->path, t->sha256, &t->size, &t->chain, &err);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "%s: %s", what, why_text(&err));
		why_clear(&err);
		free(t->path);
		t->path = NULL;
		return rc;
	}
	if (r->json.size.set && r->json.size.v != t->size) {
		ev_log(c, EV_ERROR, "%s %s: %lld bytes served, the manifest says %lld", what,
		       r->json.url.s, (long long)t->size, (long long)r->json.size.v);
		return TF_EINTEGRITY;
	}
	char *hops = chain_text(&t->chain, " -> ");
	char *host = url_host(t->chain.n ? t->chain.v[t->chain.n - 1] : r->json.url.s);
	ev_log(c, EV_WARN,
	       "%s %s had no sha256: trusted on first use (fetched over TLS; nothing but the "
	       "certificate of %s vouches for it): sha256 %s, %lld bytes%s%s",
	       what, r->json.url.s, host, t->sha256, (long long)t->size,
	       t->chain.n > 1 ? "; redirected: " : "", t->chain.n > 1 ? hops : "");
	free(hops);
	free(host);
	return 0;
}

static void tofu_pin_release(struct tofu_pin *t)
{
	if (t->path)
		unlink(t->path);
	free(t->path);
	t->path = NULL;
	strvec_release(&t->chain);
}

/* The `redist:` key of section `sec` in the tree; NULL with why when not editable. */
static const struct ynode *redist_key(const struct ynode *root, const char *sec,
                                      const struct lines *l, struct why *why)
{
	const struct ynode *k = ymap_key(ymap_get(root, sec), "redist");
	if (k == NULL)
		why_fail(why, TF_EMANIFEST, "%s.redist: not found in the text", sec);
	else if (!key_is_block(l, k))
		why_fail(why, TF_EMANIFEST,
		         "%s:%d:%d: %s.redist is written in flow style; write %s as a "
		         "block mapping so lock can edit it",
		         "manifest", k->pos.line, k->pos.col, sec, sec);
	else
		return k;
	return NULL;
}

/* Resolves one verified redist JSON; 0 or an error (logged). */
static int resolve_ref(struct ctx *c, const struct redist_ref *r, const char *json_path,
                       const char *platform, struct redist_artifact **ra, size_t *nra)
{
	const char **names = xcalloc(r->ncomponents + 1, sizeof(*names));
	struct why err = {0};
	for (size_t i = 0; i < r->ncomponents; i++)
		names[i] = r->components[i].s;
	int rc =
	    redist_resolve(json_path, r->json.url.s, platform, r->variant.set ? r->variant.s : NULL,
	                   names, r->ncomponents, ra, nra, &err);
	if (rc != 0)
		ev_log(c, EV_ERROR, "%s: %s", r->json.url.s, why_text(&err));
	for (size_t i = 0; rc == 0 && i < *nra; i++)
		if (!yaml_plain_ok((*ra)[i].url) || !yaml_plain_ok((*ra)[i].component)) {
			ev_log(c, EV_ERROR,
			       "%s: component %s has a URL lock cannot write as plain "
			       "YAML: %s",
			       r->json.url.s, (*ra)[i].component, (*ra)[i].url);
			rc = TF_EMANIFEST;
		}
	why_clear(&err);
	free(names);
	return rc;
}

/* cuda's `artifacts:`, one per component of its redist JSON. */
static void add_cuda_artifacts(struct strbuf *sb, int ind, const struct redist_ref *ref,
                               const struct redist_artifact *ra, size_t nra, struct strvec *done)
{
	strbuf_addf(sb, "%*sartifacts:\n", ind, "");
	for (size_t a = 0; a < nra; a++) {
		strbuf_addf(sb, "%*s- name: %s", ind + 2, "", ra[a].component);
		if (ra[a].version && yaml_plain_ok(ra[a].version))
			strbuf_addf(sb, "   # %s", ra[a].version);
		strbuf_adds(sb, "\n");
		add_artifact_fields(sb, ind + 4, &ra[a]);
	}
	strvec_pushf(done, "cuda: %zu components inline from %s", nra, ref->json.url.s);
}

/* cudnn's one `artifact:`: the JSON's only component, or the one named cudnn (a cuDNN
 * JSON may list samples or tests next to the library). 0 or TF_EMANIFEST. */
static int add_cudnn_artifact(struct ctx *c, struct strbuf *sb, int ind,
                              const struct redist_ref *ref, const struct redist_artifact *ra,
                              size_t nra, struct strvec *done)
{
	size_t pick = nra;
	for (size_t a = 0; a < nra; a++)
		if (nra == 1 || strcmp(ra[a].component, "cudnn") == 0)
			pick = a;
	if (pick == nra) {
		ev_log(c, EV_ERROR,
		       "%s: %zu components and none named cudnn; cudnn "
		       "takes one artifact",
		       ref->json.url.s, nra);
		return TF_EMANIFEST;
	}
	strbuf_addf(sb, "%*sartifact:\n", ind, "");
	strbuf_addf(sb, "%*sname: %s", ind + 2, "", ra[pick].component);
	if (ra[pick].version && yaml_plain_ok(ra[pick].version))
		strbuf_addf(sb, "   # %s", ra[pick].version);
	strbuf_adds(sb, "\n");
	add_artifact_fields(sb, ind + 2, &ra[pick]);
	strvec_pushf(done, "cudnn: %s inline from %s", ra[pick].component, ref->json.url.s);
	return 0;
}

/*
 * Fetches both redist JSONs (one fetch_all: a failure names every one that is
 * missing) and adds the edits that replace the `redist:` blocks.
 */
static int lock_redist(struct ctx *c, const struct manifest *m, const struct ynode *root,
                       const struct lines *l, struct edits *e, struct strvec *done)
{
	const struct redist_ref *refs[2] = {NULL, NULL};
	const char *secs[2] = {"cuda", "cudnn"};
	struct tofu_pin tofu[2] = {{0}, {0}};
	struct fetch_item items[2];
	struct redist_artifact *ra = NULL;
	size_t nra = 0, n = 0;
	const char *platform = stack_platform(m);
	int rc = 0;
	memset(items, 0, sizeof(items));
	if (m->cuda.redist.set)
		refs[0] = &m->cuda.redist;
	if (m->cudnn.redist.set)
		refs[1] = &m->cudnn.redist;
	for (int i = 0; i < 2; i++) {
		if (refs[i] == NULL)
			continue;
		if (!refs[i]->json.sha256.set) {
			rc = tofu_pin_fetch(c, refs[i],
			                    i == 0 ? "cuda redistrib JSON" : "cudnn redistrib JSON",
			                    &tofu[i]);
			if (rc != 0)
				goto out;
			continue;
		}
		items[n].name = i == 0 ? "cuda redistrib JSON" : "cudnn redistrib JSON";
		items[n].url = refs[i]->json.url.s;
		items[n].sha256 = refs[i]->json.sha256.s;
		items[n].size = refs[i]->json.size.set ? refs[i]->json.size.v : -1;
		n++;
	}
	if (n > 0)
		rc = fetch_all(c, items, n);
	if (rc != 0)
		goto out; /* fetch_all named each failure */
	for (int i = 0, j = 0; i < 2; i++) {
		if (refs[i] == NULL)
			continue;
		const char *path = tofu[i].path ? tofu[i].path : items[j++].path;
		struct why msg = {0};
		const struct ynode *k = redist_key(root, secs[i], l, &msg);
		if (k == NULL) {
			ev_log(c, EV_ERROR, "%s", why_text(&msg));
			why_clear(&msg);
			rc = TF_EMANIFEST;
			goto out;
		}
		rc = resolve_ref(c, refs[i], path, platform, &ra, &nra);
		if (rc != 0)
			goto out;
		int ind = k->pos.col - 1;
		struct strbuf sb = STRBUF_INIT;
		add_provenance(&sb, ind, refs[i], platform, tofu[i].path ? &tofu[i] : NULL);
		if (i == 0)
			add_cuda_artifacts(&sb, ind, refs[i], ra, nra, done);
		else
			rc = add_cudnn_artifact(c, &sb, ind, refs[i], ra, nra, done);
		if (rc != 0) {
			strbuf_release(&sb);
			goto out;
		}
		edits_add(e, k->pos.line, block_end(l, k->pos.line, ind), strbuf_detach(&sb));
		redist_artifacts_free(ra, nra);
		ra = NULL;
		nra = 0;
	}
out:
	redist_artifacts_free(ra, nra);
	for (size_t i = 0; i < n; i++)
		fetch_item_release(&items[i]);
	tofu_pin_release(&tofu[0]);
	tofu_pin_release(&tofu[1]);
	return rc;
}

static void reqs_free(struct pip_req *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].raw_name);
		free(v[i].version);
		free(v[i].spec);
		free(v[i].url);
		for (size_t h = 0; h < v[i].nhashes; h++)
			free(v[i].hashes[h]);
		free(v[i].hashes);
	}
	free(v);
}

static const struct pip_req *find_req(const struct manifest *m, const char *norm)
{
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		char *n = pip_normalize_name(m->pip.reqs[i].name ? m->pip.reqs[i].name
		                                                 : m->pip.reqs[i].raw_name);
		int eq = strcmp(n, norm) == 0;
		free(n);
		if (eq)
			return &m->pip.reqs[i];
	}
	return NULL;
}

/* What pip gets: the pins without hashes (hash-checking mode would refuse every
 * unpinned dependency), plus TF itself when the pins do not name it yet. */
static char *pip_input(const struct manifest *m, char **seed)
{
	struct strbuf sb = STRBUF_INIT;
	int has_tf = 0;
	*seed = NULL;
	for (size_t i = 0; i < m->pip.nreqs; i++) {
		const struct pip_req *q = &m->pip.reqs[i];
		const char *n = q->name ? q->name : q->raw_name;
		if (strcmp(n, "tensorflow") == 0 || strcmp(n, "tensorflow-gpu") == 0 ||
		    strcmp(n, "tensorflow-cpu") == 0)
			has_tf = 1;
		if (q->url && q->nhashes && strchr(q->url, '#') == NULL)
			/* A URL fragment hash does not switch pip to hash-checking mode. */
			strbuf_addf(&sb, "%s @ %s#sha256=%s\n", q->raw_name ? q->raw_name : q->name,
			            q->url, q->hashes[0]);
		else
			strbuf_addf(&sb, "%s\n", q->spec);
	}
	if (!has_tf && m->versions.tensorflow.set) {
		const char *tf = m->versions.tensorflow.s;
		*seed = xasprintf("%s==%s",
		                  str_starts_with(tf, "1.") ? "tensorflow-gpu" : "tensorflow", tf);
		strbuf_addf(&sb, "%s\n", *seed);
	}
	return strbuf_detach(&sb);
}

/*
 * Turns pip's closure into the requirements block: the user's own hashes are
 * kept for what they pinned (pip's choice must be one of them, else exit 5),
 * and direct references keep their URL. The provenance notes of pip_lock
 * (index pages that redirected: every URL and the host that answered) come
 * first, as comments of the block.
 */
static int pip_merge(struct ctx *c, const struct manifest *m, const char *locked, int ind,
                     struct strbuf *sb, size_t *count)
{
	struct diags d = {0};
	struct pip_req *r = NULL;
	size_t n = 0;
	int rc = 0;
	pip_requirements_parse("pip lock output", locked, (struct pos){1, 1}, 0, &r, &n, &d);
	if (d.errors) {
		ev_log(c, EV_ERROR, "pip's resolver returned pins lock cannot read: %s",
		       d.v[0].msg);
		rc = TF_EFAIL;
		goto out;
	}
	for (const char *l = locked; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (str_starts_with(l, "# index page redirected: "))
			strbuf_addf(sb, "%*s%.*s\n", ind, "", (int)strcspn(l, "\n"), l);
	for (size_t i = 0; i < n; i++) {
		char *norm = pip_normalize_name(r[i].name ? r[i].name : r[i].raw_name);
		const struct pip_req *u = find_req(m, norm);
		free(norm);
		if (u && u->nhashes > 0) {
			int ok = 0;
			for (size_t h = 0; h < u->nhashes && r[i].nhashes; h++)
				ok |= strcmp(u->hashes[h], r[i].hashes[0]) == 0;
			if (!ok) {
				ev_log(c, EV_ERROR,
				       "pip: %s %s: the file pip's resolver chose has sha256 %s, "
				       "which is "
				       "not among the manifest's pinned hashes for %s",
				       r[i].raw_name ? r[i].raw_name : r[i].name,
				       r[i].version ? r[i].version : "",
				       r[i].nhashes ? r[i].hashes[0] : "?", u->spec);
				rc = TF_EINTEGRITY;
				goto out;
			}
		}
		const struct pip_req *hs = u && u->nhashes ? u : &r[i];
		if (u && u->url)
			strbuf_addf(sb, "%*s%s @ %s", ind, "", u->raw_name ? u->raw_name : u->name,
			            u->url);
		else
			strbuf_addf(sb, "%*s%s==%s", ind, "", r[i].name ? r[i].name : r[i].raw_name,
			            r[i].version);
		for (size_t h = 0; h < hs->nhashes; h++)
			strbuf_addf(sb, " \\\n%*s--hash=sha256:%s", ind + 4, "", hs->hashes[h]);
		strbuf_adds(sb, "\n");
	}
	*count = n;
out:
	reqs_free(r, n);
	diags_release(&d);
	return rc;
}

struct locked_set {
	struct pip_req *r;
	size_t n;
};

static const char *locked_version(const char *name, void *arg)
{
	const struct locked_set *s = arg;
	for (size_t i = 0; i < s->n; i++)
		if (s->r[i].name && strcmp(s->r[i].name, name) == 0)
			return s->r[i].version;
	/* TensorFlow under its GPU name (tensorflow-gpu to 2.11; tfprov init writes it for 1.x). */
	if (strcmp(name, "tensorflow") == 0)
		return locked_version("tensorflow-gpu", arg);
	return NULL;
}

/*
 * A resolved companion package (data/compat.yaml companion_packages) outside the
 * window of its release line for the resolved TF: the constraint that takes the
 * line made for that TF ("tensorflow-io==0.36.*"), or NULL. *name gets the package.
 */
static char *companion_constraint(const struct compat *kb, const struct locked_set *s,
                                  const char **name, const char **version)
{
	const char *tf = locked_version("tensorflow", (void *)s);

	for (size_t i = 0; kb != NULL && tf != NULL && i < s->n; i++) {
		char *c = compat_companion_constraint(kb, s->r[i].name, s->r[i].version, tf);
		if (c != NULL) {
			*name = s->r[i].name;
			*version = s->r[i].version;
			return c;
		}
	}
	return NULL;
}

/*
 * pip_lock, then the knowledge base's caps (data/compat.yaml pip.caps): while
 * the closure breaks one (setuptools 82 with a TensorBoard before 2.21, h5py 3
 * with TF 1.x), the cap joins pip's input as a constraint and pip resolves again.
 * Likewise a companion package outside the TF window of its release line
 * (companion_packages): the line made for the resolved TF joins the input.
 */
static int lock_capped(struct ctx *c, const char *env, const char *input, const struct pip_opts *o,
                       char **locked, struct why *why)
{
	const struct pip_cap *caps;
	size_t ncaps, rounds;
	struct diags d = {0};
	struct strbuf in = STRBUF_INIT;
	struct compat *kb = NULL;
	/* The knowledge base owns the caps (kb->caps) and the companion packages. */
	int rc = compat_load(compat_default_path(), &kb, &d);
	if (rc != 0) {
		diags_print(&d, stderr, 0);
		why_fail(why, rc, "cannot load the knowledge base %s", compat_default_path());
		goto out;
	}
	caps = kb->caps;
	ncaps = kb->ncaps;
	rounds = ncaps + kb->ncompanion_pkgs;
	strbuf_adds(&in, input);
	for (size_t round = 0; round <= rounds; round++) {
		free(*locked);
		*locked = NULL;
		rc = pip_lock(c, env, in.buf, o, locked, why);
		if (rc != 0)
			break;
		struct locked_set s = {0};
		struct diags pd = {0};
		const char *cname = NULL, *cversion = NULL;
		char *constraint = NULL;
		pip_requirements_parse("pip lock output", *locked, (struct pos){1, 1}, 0, &s.r,
		                       &s.n, &pd);
		const struct pip_cap *cap = pip_caps_broken(caps, ncaps, locked_version, &s, NULL);
		if (cap) {
			ev_log(c, EV_INFO,
			       "pip: %s %s with %s %s breaks a cap of the knowledge base (%s; "
			       "source: %s): resolving again with %s<%s",
			       cap->package, locked_version(cap->package, &s), cap->when,
			       locked_version(cap->when, &s), cap->fact, cap->source, cap->package,
			       cap->below);
			strbuf_addf(&in, "%s<%s\n", cap->package, cap->below);
		} else if ((constraint = companion_constraint(kb, &s, &cname, &cversion)) != NULL) {
			const struct compat_companion_release *line =
			    compat_companion_line(compat_companion(kb, cname), cversion);
			ev_log(c, EV_INFO,
			       "pip: %s %s is not made for tensorflow %s (its release line is for "
			       "tensorflow%s; source: %s): resolving again with %s",
			       cname, cversion, locked_version("tensorflow", &s), line->tf,
			       line->source, constraint);
			strbuf_addf(&in, "%s\n", constraint);
		}
		reqs_free(s.r, s.n);
		diags_release(&pd);
		if (cap == NULL && constraint == NULL)
			break;
		free(constraint);
		if (round == rounds)
			rc = why_fail(why, TF_EFAIL, "the knowledge base's caps cannot all be met");
	}
out:
	diags_release(&d);
	strbuf_release(&in);
	compat_free(kb);
	return why_code(why, rc);
}

/* Runs pip's resolver in a throwaway venv; *locked gets its requirements text. */
static int pip_resolve(struct ctx *c, const struct manifest *m, const char *input, char **locked,
                       char **where, struct strvec *requires, struct strvec *requires_python,
                       struct strvec *files)
{
	const char *ver = m->python.version.set ? m->python.version.s : m->versions.python.s;
	const char *interp = m->python.manager == PYENV_VENV ? m->python.interpreter.s : NULL;
	char *python = NULL, *venv = NULL, *cache = NULL, *tmp = NULL, *simple = NULL;
	struct why err = {0};
	const char *links[2] = {NULL, NULL};
	struct pip_opts o = {0};
	int rc = 0, created = 0;

	o.index_url = m->pip.index_url.s;
	o.requires = requires;
	o.requires_python = requires_python;
	o.files = files;
	if (c->mirrors.n)
		pip_opts_mirror(&o, c->mirrors.v[0], links, &simple);
	*where = xstrdup(o.no_index    ? links[0]
	                 : o.index_url ? o.index_url
	                               : "https://pypi.org/simple");
	if ((c->flags & CTX_OFFLINE) && !o.no_index) {
		ev_log(c, EV_ERROR,
		       "pip: cannot resolve the closure offline: --offline forbids "
		       "reaching %s; give --mirror DIR with the wheels",
		       *where);
		return TF_EOFFLINE;
	}
	if (ver == NULL) {
		ev_log(c, EV_ERROR, "pip: the manifest names no Python version to resolve for");
		return TF_EMANIFEST;
	}
	int conda = m->python.manager == PYENV_CONDA && m->python.npkgs > 0;
	if (!conda) {
		rc = pyenv_find_python(c, ver, interp, 0, &python, &err);
		if (rc != 0) {
			why_fail(&err, rc,
			         "%s; pip resolves for the interpreter it runs in, so lock "
			         "needs a Python %s here (or a manager: conda stack, whose "
			         "explicit lock tfprov installs to resolve with its own Python)",
			         why_text(&err), ver);
			goto out;
		}
	}
	const char *td = getenv("TMPDIR");
	tmp = xasprintf("%s/tfprov-lock.XXXXXX", td && td[0] ? td : "/tmp");
	if (mkdtemp(tmp) == NULL) {
		rc = why_fail(&err, TF_EIO, "cannot create a temporary directory %s: %s", tmp,
		              strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	if (conda) {
		/* The stack's own interpreter, whatever python3 this machine has: the
		 * explicit conda lock installed natively into a throwaway prefix. */
		struct conda_result cr = {0};
		venv = path_join(tmp, "env");
		ev_log(c, EV_INFO, "pip: installing the conda lock (%zu packages) into %s",
		       m->python.npkgs, venv);
		rc = conda_fetch_install(c, venv, 1, m->python.pkgs, m->python.npkgs, NULL, NULL,
		                         &cr, &err);
		conda_result_release(&cr);
		if (rc != 0)
			goto out;
		python = path_join(venv, "bin/python");
	} else {
		venv = path_join(tmp, "venv");
		rc = venv_create(c, python, venv, &created, &err);
		if (rc != 0)
			goto out;
	}
	ev_log(c, EV_INFO, "pip: resolving with %s (Python %s) against %s", python, ver, *where);
	cache = path_join(c->cache_dir, "pip");
	o.cache_dir = cache;
	o.cert = c->ca_bundle;
	rc = lock_capped(c, venv, input, &o, locked, &err);
	/* Hashes were left out of pip's input, so "no matching distribution" is an
	 * unreachable or incomplete index here, not an integrity failure. */
	if (rc == TF_EINTEGRITY && (err.msg == NULL || (strstr(err.msg, "hash") == NULL &&
	                                                strstr(err.msg, "METADATA") == NULL)))
		rc = TF_EFAIL;
out:
	if (rc != 0)
		ev_log(c, EV_ERROR, "pip: cannot complete the pins (%s) from %s: %s",
		       m->pip.nreqs ? "see below" : "none yet", *where, why_text(&err));
	if (tmp)
		fs_rmtree(tmp);
	free(tmp);
	free(venv);
	free(cache);
	free(python);
	free(simple);
	why_clear(&err);
	return rc;
}

/*
 * pip.requires: each locked distribution's Requires-Dist from its METADATA
 * (pip's report), markers kept, so that validate and lock --check judge the
 * whole lock for its target without the wheels. Single-quoted YAML scalars:
 * markers hold double quotes. requires lists "name\trequirement" lines.
 */
static void requires_block(struct strbuf *sb, int ind, const struct strvec *requires)
{
	const char *prev = NULL;
	size_t plen = 0;

	if (requires->n == 0)
		return;
	strbuf_addf(sb, "%*srequires:   # Requires-Dist of each pin, from its wheel's METADATA\n",
	            ind, "");
	for (size_t i = 0; i < requires->n; i++) {
		const char *line = requires->v[i], *tab = strchr(line, '\t');
		size_t nlen = tab ? (size_t)(tab - line) : strlen(line);
		const char *req = tab ? tab + 1 : "";

		if (prev == NULL || plen != nlen || strncmp(prev, line, nlen) != 0)
			strbuf_addf(sb, "%*s%.*s:%s\n", ind + 2, "", (int)nlen, line,
			            *req ? "" : " []");
		prev = line;
		plen = nlen;
		if (*req == '\0')
			continue;
		strbuf_addf(sb, "%*s- '", ind + 4, "");
		for (const char *p = req; *p; p++)
			strbuf_adds(sb, *p == '\'' ? "''" : (char[2]){*p, '\0'});
		strbuf_adds(sb, "'\n");
	}
}

/*
 * pip.requires_python: each locked distribution's Requires-Python (its
 * METADATA, else the index's data-requires-python), for validate and lock
 * --check to judge against the stack's Python. Lines are "name\tspecifier".
 */
static void requires_python_block(struct strbuf *sb, int ind, const struct strvec *rp)
{
	if (rp->n == 0)
		return;
	strbuf_addf(sb, "%*srequires_python:   # Requires-Python of each pin that declares one\n",
	            ind, "");
	for (size_t i = 0; i < rp->n; i++) {
		const char *line = rp->v[i], *tab = strchr(line, '\t');
		if (tab == NULL)
			continue;
		strbuf_addf(sb, "%*s%.*s: '", ind + 2, "", (int)(tab - line), line);
		for (const char *p = tab + 1; *p; p++)
			strbuf_adds(sb, *p == '\'' ? "''" : (char[2]){*p, '\0'});
		strbuf_adds(sb, "'\n");
	}
}

/*
 * The glibc the lock's Linux wheels need (SCHEMA.md, pip.min_glibc): per
 * distribution the lowest manylinux floor among the files its line pins (a
 * file that needs none, pure Python or an sdist, makes it 0), then the
 * highest over the lock; major * 1000 + minor, 0 when none needs one. files
 * holds "name\tfile name" lines (pip_opts.files).
 */
static int lock_glibc_floor(const struct strvec *files)
{
	struct strvec names = STRVEC_INIT;
	int need = 0;

	for (size_t i = 0; i < files->n; i++) {
		const char *tab = strchr(files->v[i], '\t');
		int seen = 0, floor = -1;
		if (tab == NULL)
			continue;
		size_t nlen = (size_t)(tab - files->v[i]);
		for (size_t k = 0; k < names.n && !seen; k++)
			seen = strlen(names.v[k]) == nlen &&
			       strncmp(names.v[k], files->v[i], nlen) == 0;
		if (seen)
			continue;
		strvec_pushf(&names, "%.*s", (int)nlen, files->v[i]);
		for (size_t j = i; j < files->n; j++) {
			if (strncmp(files->v[j], files->v[i], nlen + 1) != 0)
				continue;
			int g = wheel_glibc_floor(files->v[j] + nlen + 1);
			floor = floor < 0 || g < floor ? g : floor;
		}
		if (floor > need)
			need = floor;
	}
	strvec_release(&names);
	return need;
}

/*
 * A block the manifest already has (`requires:`, `requires_python:` of an older
 * lock) is replaced: when it follows the requirements block, the edit grows
 * over it; elsewhere it is removed by an edit of its own. Returns the last line
 * the requirements edit covers.
 */
static int requires_replace(const struct ynode *pip, const char *key, const struct lines *l,
                            struct edits *e, int first, int rend)
{
	const struct ynode *qk = ymap_key(pip, key);
	int qend;

	if (qk == NULL || !key_is_block(l, qk))
		return rend;
	qend = block_end(l, qk->pos.line, qk->pos.col - 1);
	if (qk->pos.line == rend + 1)
		return qend;
	if (qk->pos.line > rend || qend < first)
		edits_add(e, qk->pos.line, qend, xstrdup(""));
	return rend;
}

static int lock_pip(struct ctx *c, const struct manifest *m, const struct ynode *root,
                    const struct lines *l, struct edits *e, struct strvec *done)
{
	const struct ynode *pip = ymap_get(root, "pip");
	const struct ynode *rk = ymap_key(pip, "requirements");
	const struct ynode *ck = ymap_key(pip, "complete");
	const struct ynode *gk = ymap_key(pip, "min_glibc");
	char *seed = NULL, *input = NULL, *locked = NULL, *where = NULL;
	struct strbuf sb = STRBUF_INIT;
	struct strvec requires = STRVEC_INIT, requires_python = STRVEC_INIT, files = STRVEC_INIT;
	size_t count = 0;
	int rc = 0, glibc;

	if (!m->pip.set || (m->pip.complete.set && m->pip.complete.v))
		return 0;
	if (rk == NULL || !key_is_block(l, rk) || (ck && !key_is_block(l, ck)) ||
	    (gk && !key_is_block(l, gk))) {
		ev_log(c, EV_ERROR,
		       "pip: lock completes inline `requirements:` in a block mapping%s",
		       m->pip.requirements_file.set
		           ? "; pip.requirements_file is not rewritten yet: inline it, or lock it "
		             "with pip-compile --generate-hashes"
		           : "");
		return TF_EMANIFEST;
	}
	input = pip_input(m, &seed);
	rc = pip_resolve(c, m, input, &locked, &where, &requires, &requires_python, &files);
	if (rc != 0) {
		for (size_t i = 0; i < m->pip.nreqs; i++)
			ev_log(c, EV_ERROR, "  not resolved: %s", m->pip.reqs[i].spec);
		if (seed)
			ev_log(c, EV_ERROR, "  not resolved: %s", seed);
		goto out;
	}
	int ind = rk->pos.col - 1;
	strbuf_addf(&sb, "%*srequirements: |\n", ind, "");
	strbuf_addf(
	    &sb, "%*s# Completed by `tfprov lock` through pip's resolver (Python %s, %s).\n",
	    ind + 2, "", m->python.version.set ? m->python.version.s : m->versions.python.s, where);
	rc = pip_merge(c, m, locked, ind + 2, &sb, &count);
	if (rc != 0)
		goto out;
	int rend = block_end(l, rk->pos.line, ind);
	requires_block(&sb, ind, &requires);
	requires_python_block(&sb, ind, &requires_python);
	glibc = lock_glibc_floor(&files);
	if (gk == NULL && glibc > 0)
		strbuf_addf(&sb, "%*smin_glibc: \"%d.%d\"   # the lock's manylinux floor\n", ind,
		            "", glibc / 1000, glibc % 1000);
	rend = requires_replace(pip, "requires", l, e, rk->pos.line, rend);
	rend = requires_replace(pip, "requires_python", l, e, rk->pos.line, rend);
	edits_add(e, rk->pos.line, rend, strbuf_detach(&sb));
	if (gk)
		/* A floor an older lock wrote follows the wheels locked now (none: removed). */
		edits_add(e, gk->pos.line, block_end(l, gk->pos.line, gk->pos.col - 1),
		          glibc > 0 ? xasprintf("%*smin_glibc: \"%d.%d\"   # the lock's manylinux "
		                                "floor\n",
		                                gk->pos.col - 1, "", glibc / 1000, glibc % 1000)
		                    : xstrdup(""));
	if (ck)
		edits_add(e, ck->pos.line, block_end(l, ck->pos.line, ck->pos.col - 1),
		          xasprintf("%*scomplete: true\n", ck->pos.col - 1, ""));
	else
		edits_add(e, rend + 1, rend, xasprintf("%*scomplete: true\n", ind, ""));
	strvec_pushf(
	    done, "pip: %zu pin%s -> a closure of %zu package%s with hashes (complete: true)",
	    m->pip.nreqs + (seed ? 1 : 0), plural_s((long long)(m->pip.nreqs + (seed ? 1 : 0))),
	    count, plural_s((long long)count));
out:
	strbuf_release(&sb);
	strvec_release(&requires);
	strvec_release(&requires_python);
	strvec_release(&files);
	free(seed);
	free(input);
	free(locked);
	free(where);
	return rc;
}

/* Parses and lints the result as `validate` would. 0 or TF_EMANIFEST (printed). */
static int validate_text(struct ctx *c, const char *name, const char *text)
{
	struct diags d = {0};
	struct manifest *m = NULL;
	struct compat *kb = NULL;
	int rc = manifest_load_buf(name, text, strlen(text), &m, &d);
	if (rc == 0 && compat_load(compat_default_path(), &kb, &d) == 0)
		compat_lint(kb, m, &d);
	if (d.errors) {
		diags_sort(&d);
		fflush(stdout);
		diags_print(&d, stderr, 0);
		ev_log(c, EV_ERROR,
		       "the locked manifest does not validate (%zu error%s); nothing "
		       "was written",
		       d.errors, d.errors == 1 ? "" : "s");
		rc = TF_EMANIFEST;
	}
	compat_free(kb);
	manifest_free(m);
	diags_release(&d);
	return rc;
}

/* Commit on close (fs_write_atomic). 0 or TF_EIO (logged). */
static int write_atomic(struct ctx *c, const char *dst, const char *text, mode_t mode)
{
	int rc = fs_write_atomic(dst, text, strlen(text), mode, 0);
	if (rc != 0)
		ev_log(c, EV_ERROR, "cannot write %s: %s", dst, strerror(-rc));
	return rc ? TF_EIO : 0;
}

/* Says which declared gaps the lock may have closed; it never removes them. */
static void report_gaps(struct ctx *c, const struct manifest *m, int redist, int pip)
{
	for (size_t i = 0; i < m->ngaps; i++) {
		const char *w = m->gaps[i].what.s;
		if (w == NULL)
			continue;
		int closes =
		    (pip && str_starts_with(w, "pip:")) ||
		    (redist && (str_starts_with(w, "cuda:") || str_starts_with(w, "cudnn:")));
		if (closes)
			ev_log(c, EV_INFO,
			       "gap closed by this lock (line %d, `missing:` kept; remove "
			       "it once reviewed): %s",
			       m->gaps[i].what.pos.line, w);
	}
}

int cmd_lock(struct ctx *c, struct opts *o)
{
	const char *in = o->args.v[0];
	const char *out = o->out ? o->out : in;
	int to_stdout = strcmp(out, "-") == 0;
	struct manifest *m = NULL;
	struct ynode *root = NULL;
	struct lines l = {0};
	struct edits e = {0};
	struct strvec done = STRVEC_INIT;
	struct diags d = {0};
	char *text = NULL;
	int rc, empty = 0;

	if (o->check)
		return lock_check(c, o);
	if (o->args.n != 1) {
		ev_log(c, EV_ERROR, "usage: tfprov lock MANIFEST [-o OUT|-]");
		return TF_EUSAGE;
	}
	if (to_stdout)
		c->flags |= CTX_QUIET; /* stdout is the manifest */
	rc = cli_load_manifest(c, in, &m, 0);
	if (rc != 0)
		goto out;
	struct ytree_limits lim = {MANIFEST_MAX_NODES, MANIFEST_MAX_DEPTH};
	root = ytree_parse(in, m->text, m->textlen, &lim, &d, &empty);
	if (root == NULL) {
		rc = TF_EMANIFEST;
		goto out;
	}
	lines_init(&l, m->text, m->textlen);

	rc = lock_redist(c, m, root, &l, &e, &done);
	if (rc == 0)
		rc = lock_pip(c, m, root, &l, &e, &done);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "%s: not locked; the file is untouched", in);
		goto out;
	}
	text = e.n ? edits_apply(&e, &l) : xstrndup(m->text, m->textlen);
	rc = validate_text(c, to_stdout ? in : out, text);
	if (rc != 0)
		goto out;
	if (to_stdout) {
		fputs(text, stdout);
		fflush(stdout);
	} else if (e.n == 0 && strcmp(out, in) == 0) {
		ev_log(c, EV_INFO, "%s is already a full lockfile; nothing to do", in);
	} else {
		struct stat st;
		mode_t mode = stat(out, &st) == 0  ? (st.st_mode & 07777)
		              : stat(in, &st) == 0 ? (st.st_mode & 07777)
		                                   : 0644;
		rc = write_atomic(c, out, text, mode);
		if (rc != 0)
			goto out;
	}
	for (size_t i = 0; i < done.n; i++)
		ev_log(c, EV_INFO, "locked %s", done.v[i]);
	report_gaps(c, m, m->cuda.redist.set || m->cudnn.redist.set,
	            m->pip.set && !(m->pip.complete.set && m->pip.complete.v));
	if (!to_stdout && (e.n || strcmp(out, in) != 0))
		ev_log(c, EV_INFO, "wrote %s", out);
out:
	if (d.errors) {
		diags_print(&d, stderr, 0);
		rc = TF_EMANIFEST;
	}
	diags_release(&d);
	edits_release(&e);
	strvec_release(&done);
	free(l.off);
	free(text);
	ytree_free(root);
	manifest_free(m);
	return rc;
}
