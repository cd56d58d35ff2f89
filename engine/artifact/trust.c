/*
 * trust.c - loads the signature policy (artifact.h) and checks a signature
 * against it. Files under the root are read as a process chrooted into the
 * root would read them (ctx_open_in_root): a policy.yaml or a NAME.pub that
 * is a symbolic link to /x is <root>/x, and one whose target is not inside
 * the root is refused, so no key outside the root is ever trusted. The
 * policy is read once per command, before anything is fetched.
 */
#include "artifact.h"
#include "artifact_int.h"
#include "ctx.h"
#include "error.h"
#include "event.h"
#include "yamltree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Root-relative paths, read as in a chroot (ctx_open_in_root). */
#define POLICY_PATH "/etc/tfprov/policy.yaml"
#define KEYS_DIR    "/etc/tfprov/trusted-keys.d"
#define POLICY_MAX  (64u << 10)

static void add_key(struct trust *t, const struct ms_pubkey *pk, const char *src)
{
	t->keys = xrealloc(t->keys, (t->n + 1) * sizeof(*t->keys));
	t->src = xrealloc(t->src, (t->n + 1) * sizeof(*t->src));
	t->keys[t->n] = *pk;
	t->src[t->n] = xstrdup(src);
	t->n++;
}

/*
 * Why root-relative `path` cannot be read, for a message: strerror, and when
 * it is a symbolic link, where the link points and where that is inside the
 * root (a link out of the root is read there, never followed out). Caller frees.
 */
static char *why_unreadable(const struct ctx *c, const char *path, int err)
{
	char *host = ctx_host_path(c, path), target[PATH_MAX], *out;
	ssize_t n = readlink(host, target, sizeof(target) - 1);
	if (n <= 0) {
		out = xstrdup(strerror(err));
	} else {
		target[n] = '\0';
		char *in = ctx_host_dir(c, path);
		out = xasprintf("a symbolic link to %s, which is %s inside the root: %s (files "
		                "under --root are read as in a chroot, never outside it)",
		                target, in, strerror(err));
		free(in);
	}
	free(host);
	return out;
}

/* Reads root-relative `path` as in a chroot (ctx_open_in_root). 0 or -errno. */
static int read_in_root(const struct ctx *c, const char *path, size_t max, char **text, size_t *len)
{
	int fd = ctx_open_in_root(c, path, O_RDONLY);
	if (fd < 0)
		return fd;
	int r = read_fd(fd, max, text, len);
	close(fd);
	return r;
}

/* Parses one public key and trusts it; `shown` names it in messages. */
static int add_key_text(struct trust *t, char *text, size_t len, const char *shown, struct why *why)
{
	struct why w = {0};
	struct ms_pubkey pk;
	int r = ms_pubkey_parse(text, len, &pk, &w);
	if (r != 0) {
		/* TF_EFAIL, not the parser's TF_EINTEGRITY: a policy that does not load. */
		why_fail(why, TF_EFAIL, "trusted key %s is not a minisign public key: %s", shown,
		         why_text(&w));
		why_clear(&w);
		return TF_EFAIL;
	}
	add_key(t, &pk, shown);
	return 0;
}

/* A --trusted-key FILE: a path of the invoking user's, not under the root. */
static int load_key_file(struct trust *t, const char *path, struct why *why)
{
	char *text = NULL;
	size_t len;
	int r = read_file_at(AT_FDCWD, path, MS_FILE_MAX, &text, &len);
	if (r != 0)
		return why_fail(why, TF_EFAIL, "trusted key %s: %s", path, strerror(-r));
	r = add_key_text(t, text, len, path, why);
	free(text);
	return r;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Every NAME.pub of ROOT/etc/tfprov/trusted-keys.d, in name order, each read
 * as in a chroot: a key whose link leads out of the root is never trusted.
 */
static int load_key_dir(struct ctx *c, struct trust *t, struct why *why)
{
	struct strvec names = STRVEC_INIT;
	int rc = 0;
	int fd = ctx_open_in_root(c, KEYS_DIR, O_RDONLY | O_DIRECTORY);
	if (fd == -ENOENT) {
		struct stat st;
		char *host = ctx_host_path(c, KEYS_DIR);
		int link = lstat(host, &st) == 0; /* there, but not inside the root */
		free(host);
		if (!link)
			return 0;
	}
	if (fd < 0) {
		char *shown = ctx_host_path(c, KEYS_DIR),
		     *reason = why_unreadable(c, KEYS_DIR, -fd);
		why_fail(why, TF_EFAIL, "%s: %s", shown, reason);
		free(reason);
		free(shown);
		return TF_EFAIL;
	}
	DIR *d = fdopendir(fd);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' && str_ends_with(e->d_name, ".pub"))
			strvec_push(&names, e->d_name);
	if (d)
		closedir(d);
	else
		close(fd);
	if (names.n)
		qsort(names.v, names.n, sizeof(*names.v), cmp_str);
	for (size_t i = 0; i < names.n && rc == 0; i++) {
		char *rel = xasprintf(KEYS_DIR "/%s", names.v[i]);
		char *shown = ctx_host_path(c, rel), *text = NULL;
		size_t len;
		int r = read_in_root(c, rel, MS_FILE_MAX, &text, &len);
		if (r != 0) {
			char *reason = why_unreadable(c, rel, -r);
			rc = why_fail(why, TF_EFAIL, "trusted key %s: %s", shown, reason);
			free(reason);
		} else {
			rc = add_key_text(t, text, len, shown, why);
		}
		free(text);
		free(rel);
		free(shown);
	}
	strvec_release(&names);
	return rc;
}

/* ROOT/etc/tfprov/policy.yaml: a mapping with `require_signature: true|false`. */
static int load_policy(struct ctx *c, struct trust *t, struct why *why)
{
	char *text = NULL;
	size_t len;
	struct diags d = {0};
	struct ytree_limits lim = {1000, 8};
	int empty = 0, rc = 0;
	const char *p = t->policy_path;
	struct stat st;
	int r = read_in_root(c, POLICY_PATH, POLICY_MAX, &text, &len);
	/* Absent is no policy; a link whose target is not inside the root is refused. */
	if (r == -ENOENT && lstat(p, &st) != 0)
		return 0;
	if (r != 0) {
		char *reason = why_unreadable(c, POLICY_PATH, -r);
		why_fail(why, TF_EFAIL, "%s: %s", p, reason);
		free(reason);
		return TF_EFAIL;
	}
	struct ynode *root = ytree_parse(p, text, len, &lim, &d, &empty);
	if (root == NULL && !empty) {
		rc = why_fail(why, TF_EFAIL, "%s:%d:%d: %s", p, d.n ? d.v[0].pos.line : 0,
		              d.n ? d.v[0].pos.col : 0, d.n ? d.v[0].msg : "invalid YAML");
		goto out;
	}
	if (root && root->type != Y_MAP) {
		rc = why_fail(why, TF_EFAIL,
		              "%s:%d:%d: the policy must be a mapping (require_signature: true)", p,
		              root->pos.line, root->pos.col);
		goto out;
	}
	for (size_t i = 0; root && i < root->n && rc == 0; i++) {
		const struct ynode *k = root->keys[i], *v = root->items[i];
		if (k->type != Y_SCALAR || strcmp(k->str, "require_signature") != 0) {
			rc = why_fail(why, TF_EFAIL,
			              "%s:%d:%d: unknown key (the policy knows require_signature)",
			              p, k->pos.line, k->pos.col);
		} else if (v->type != Y_SCALAR || v->style != YS_PLAIN ||
		           (strcmp(v->str, "true") != 0 && strcmp(v->str, "false") != 0)) {
			rc = why_fail(why, TF_EFAIL,
			              "%s:%d:%d: require_signature must be true or false", p,
			              v->pos.line, v->pos.col);
		} else if (strcmp(v->str, "true") == 0 && !t->require) {
			t->require = 1;
			t->require_src = t->policy_path;
		}
	}
out:
	ytree_free(root);
	diags_release(&d);
	free(text);
	return rc;
}

int trust_load(struct ctx *c, struct trust *t, struct why *why)
{
	int rc = 0;
	memset(t, 0, sizeof(*t));
	t->policy_path = ctx_host_path(c, POLICY_PATH);
	if (c->flags & CTX_REQUIRE_SIG) {
		t->require = 1;
		t->require_src = "--require-signature";
	}
	for (size_t i = 0; i < c->trusted_keys.n && rc == 0; i++)
		rc = load_key_file(t, c->trusted_keys.v[i], why);
	if (rc == 0)
		rc = load_key_dir(c, t, why);
	if (rc == 0)
		rc = load_policy(c, t, why);
	return rc;
}

void trust_release(struct trust *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->src[i]);
	free(t->src);
	free(t->keys);
	free(t->policy_path);
	memset(t, 0, sizeof(*t));
}

char *trust_describe(const struct trust *t)
{
	struct strbuf sb = STRBUF_INIT;
	char id[MS_KEYID_SIZE];
	for (size_t i = 0; i < t->n; i++) {
		ms_keyid(t->keys[i].keynum, id);
		strbuf_addf(&sb, "%s%s (%s)", i ? ", " : "", id, t->src[i]);
	}
	return strbuf_detach(&sb);
}

int trust_verify(const struct trust *t, const void *msg, size_t len, const char *sig_name,
                 const char *sigtext, size_t siglen, struct ms_sig *sig, size_t *signer,
                 struct why *why)
{
	char id[MS_KEYID_SIZE];
	if (ms_sig_parse(sigtext, siglen, sig, why) != 0) {
		why_prefix(why, "%s is not a minisign signature", sig_name);
		return TF_EINTEGRITY;
	}
	ms_keyid(sig->keynum, id);
	/* Every trusted key with the signature's key id is tried (ids are not unique). */
	size_t tried = 0;
	for (size_t i = 0; i < t->n; i++) {
		if (memcmp(t->keys[i].keynum, sig->keynum, MS_KEYNUM_BYTES) != 0)
			continue;
		if (ms_verify(sig, &t->keys[i], msg, len, why) == 0) {
			why_clear(why); /* an earlier key of the same id failed: not a failure */
			*signer = i;
			return 0;
		}
		why_prefix(why, "%s: signature by key %s (%s) is not valid", sig_name, id,
		           t->src[i]);
		tried++;
	}
	if (tried == 0) {
		char *keys = trust_describe(t);
		why_fail(why, TF_EINTEGRITY,
		         "%s: signed by key %s, which is not trusted (trusted: %s)", sig_name, id,
		         t->n ? keys : "none");
		free(keys);
	}
	ms_sig_release(sig);
	return TF_EINTEGRITY;
}
