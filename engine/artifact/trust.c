/*
 * trust.c - loads the signature policy (artifact.h) and checks a signature
 * against it. Files under the root are opened relative to the root's
 * descriptor; the policy is read once per command, before anything is fetched.
 */
#include "artifact.h"
#include "ctx.h"
#include "error.h"
#include "event.h"
#include "yamltree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Root-relative, for openat on the root's descriptor; "/" + these in messages. */
#define POLICY_REL   "etc/tfprov/policy.yaml"
#define KEYS_DIR_REL "etc/tfprov/trusted-keys.d"
#define POLICY_PATH  "/" POLICY_REL
#define KEYS_DIR     "/" KEYS_DIR_REL
#define POLICY_MAX   (64u << 10)

static void add_key(struct trust *t, const struct ms_pubkey *pk, const char *src)
{
	t->keys = xrealloc(t->keys, (t->n + 1) * sizeof(*t->keys));
	t->src = xrealloc(t->src, (t->n + 1) * sizeof(*t->src));
	t->keys[t->n] = *pk;
	t->src[t->n] = xstrdup(src);
	t->n++;
}

/* Reads one public key file (dirfd-relative path; `shown` in messages). */
static int load_key_at(struct ctx *c, struct trust *t, int dirfd, const char *path,
                       const char *shown)
{
	char *text = NULL;
	size_t len;
	const char *why = NULL;
	struct ms_pubkey pk;
	int r = read_file_at(dirfd, path, MS_FILE_MAX, &text, &len);
	if (r != 0) {
		ev_log(c, EV_ERROR, "trusted key %s: %s", shown, strerror(-r));
		return TF_EFAIL;
	}
	r = ms_pubkey_parse(text, len, &pk, &why);
	free(text);
	if (r != 0) {
		ev_log(c, EV_ERROR, "trusted key %s is not a minisign public key: %s", shown, why);
		return TF_EFAIL;
	}
	add_key(t, &pk, shown);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every NAME.pub of ROOT/etc/tfprov/trusted-keys.d, in name order. */
static int load_key_dir(struct ctx *c, struct trust *t)
{
	struct strvec names = STRVEC_INIT;
	int rc = 0;
	int fd = openat(c->rootfd, KEYS_DIR_REL, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0) {
		char *shown = ctx_host_path(c, KEYS_DIR);
		ev_log(c, EV_ERROR, "%s: %s", shown, strerror(errno));
		free(shown);
		return TF_EFAIL;
	}
	DIR *d = fdopendir(dup(fd));
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' && str_ends_with(e->d_name, ".pub"))
			strvec_push(&names, e->d_name);
	if (d)
		closedir(d);
	if (names.n)
		qsort(names.v, names.n, sizeof(*names.v), cmp_str);
	for (size_t i = 0; i < names.n && rc == 0; i++) {
		char *rel = xasprintf(KEYS_DIR "/%s", names.v[i]);
		char *shown = ctx_host_path(c, rel);
		free(rel);
		rc = load_key_at(c, t, fd, names.v[i], shown);
		free(shown);
	}
	close(fd);
	strvec_release(&names);
	return rc;
}

/* ROOT/etc/tfprov/policy.yaml: a mapping with `require_signature: true|false`. */
static int load_policy(struct ctx *c, struct trust *t)
{
	char *text = NULL;
	size_t len;
	struct diags d = {0};
	struct ytree_limits lim = {1000, 8};
	int empty = 0, rc = 0;
	const char *p = t->policy_path;
	int r = read_file_at(c->rootfd, POLICY_REL, POLICY_MAX, &text, &len);
	if (r == -ENOENT)
		return 0;
	if (r != 0) {
		ev_log(c, EV_ERROR, "%s: %s", p, strerror(-r));
		return TF_EFAIL;
	}
	struct ynode *root = ytree_parse(p, text, len, &lim, &d, &empty);
	if (root == NULL && !empty) {
		ev_log(c, EV_ERROR, "%s:%d:%d: %s", p, d.n ? d.v[0].pos.line : 0,
		       d.n ? d.v[0].pos.col : 0, d.n ? d.v[0].msg : "invalid YAML");
		rc = TF_EFAIL;
		goto out;
	}
	if (root && root->type != Y_MAP) {
		ev_log(c, EV_ERROR,
		       "%s:%d:%d: the policy must be a mapping (require_signature: true)", p,
		       root->pos.line, root->pos.col);
		rc = TF_EFAIL;
		goto out;
	}
	for (size_t i = 0; root && i < root->n && rc == 0; i++) {
		const struct ynode *k = root->keys[i], *v = root->items[i];
		if (k->type != Y_SCALAR || strcmp(k->str, "require_signature") != 0) {
			ev_log(c, EV_ERROR,
			       "%s:%d:%d: unknown key (the policy knows require_signature)", p,
			       k->pos.line, k->pos.col);
			rc = TF_EFAIL;
		} else if (v->type != Y_SCALAR || v->style != YS_PLAIN ||
		           (strcmp(v->str, "true") != 0 && strcmp(v->str, "false") != 0)) {
			ev_log(c, EV_ERROR, "%s:%d:%d: require_signature must be true or false", p,
			       v->pos.line, v->pos.col);
			rc = TF_EFAIL;
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

int trust_load(struct ctx *c, struct trust *t)
{
	int rc = 0;
	memset(t, 0, sizeof(*t));
	t->policy_path = ctx_host_path(c, POLICY_PATH);
	if (c->flags & CTX_REQUIRE_SIG) {
		t->require = 1;
		t->require_src = "--require-signature";
	}
	for (size_t i = 0; i < c->trusted_keys.n && rc == 0; i++)
		rc = load_key_at(c, t, AT_FDCWD, c->trusted_keys.v[i], c->trusted_keys.v[i]);
	if (rc == 0)
		rc = load_key_dir(c, t);
	if (rc == 0)
		rc = load_policy(c, t);
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
                 const char *sigtext, size_t siglen, struct ms_sig *sig, size_t *signer, char **why)
{
	const char *reason = NULL;
	char id[MS_KEYID_SIZE];
	*why = NULL;
	if (ms_sig_parse(sigtext, siglen, sig, &reason) != 0) {
		*why = xasprintf("%s is not a minisign signature: %s", sig_name, reason);
		return TF_EINTEGRITY;
	}
	ms_keyid(sig->keynum, id);
	/* Every trusted key with the signature's key id is tried (ids are not unique). */
	size_t tried = 0;
	for (size_t i = 0; i < t->n; i++) {
		if (memcmp(t->keys[i].keynum, sig->keynum, MS_KEYNUM_BYTES) != 0)
			continue;
		if (ms_verify(sig, &t->keys[i], msg, len, &reason) == 0) {
			*signer = i;
			return 0;
		}
		free(*why);
		*why = xasprintf("%s: signature by key %s (%s) is not valid: %s", sig_name, id,
		                 t->src[i], reason);
		tried++;
	}
	if (tried == 0) {
		char *keys = trust_describe(t);
		*why = xasprintf("%s: signed by key %s, which is not trusted (trusted: %s)",
		                 sig_name, id, t->n ? keys : "none");
		free(keys);
	}
	ms_sig_release(sig);
	return TF_EINTEGRITY;
}
