/*
 * signature.c - the signature policy applied to what validate, plan and apply
 * read: MANIFEST.minisig beside the manifest, the side files, and the
 * index.json of each --mirror (DIR or URL; index.json.minisig beside it).
 * Runs after the manifest is parsed and before any artifact is fetched: the
 * only network requests it makes are a URL mirror's index and signature.
 *
 * Side files: minisign signs one file, so a manifest's signature covers its
 * side files through its trusted comment, which minisign authenticates with
 * the global signature. Each side file the manifest uses must appear there as
 * a tab-separated field `python.lock_file=sha256:HEX` or
 * `pip.requirements_file=sha256:HEX`, the hash of the bytes tfprov parsed.
 * `tfprov sign` writes those fields; with minisign alone, pass them with -t
 * (manifests/SCHEMA.md). `minisign -V` verifies such a signature as it
 * verifies any other.
 *
 * What is checked: with no trusted key and no requirement, nothing. With a
 * trusted key, a signature that is present must be valid; with a requirement
 * (--require-signature, policy.yaml), one must be present too. A failure is
 * TF_EINTEGRITY (exit 5) naming the key id or the reason. A mirror whose index
 * or signature cannot be fetched is only warned about unless signatures are
 * required: its artifacts are verified by sha256 anyway, and an unreachable
 * mirror serves nothing.
 */
#include "artifact.h"
#include "cli.h"
#include "error.h"
#include "fs.h"
#include "event.h"
#include "manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The side files of m: manifest key, path as written, sha256 of the parsed bytes. */
struct side {
	const char *key;
	const char *file;
	const char *sha256;
};

static size_t side_files(const struct manifest *m, struct side out[2])
{
	size_t n = 0;
	if (m->python.lock_file.set && m->python.lock_file_sha256[0])
		out[n++] = (struct side){"python.lock_file", m->python.lock_file.s,
		                         m->python.lock_file_sha256};
	if (m->pip.requirements_file.set && m->pip.requirements_file_sha256[0])
		out[n++] = (struct side){"pip.requirements_file", m->pip.requirements_file.s,
		                         m->pip.requirements_file_sha256};
	return n;
}

char *cli_side_fields(const struct manifest *m)
{
	struct side s[2];
	struct strbuf sb = STRBUF_INIT;
	size_t n = side_files(m, s);
	for (size_t i = 0; i < n; i++)
		strbuf_addf(&sb, "\t%s=sha256:%s", s[i].key, s[i].sha256);
	return strbuf_detach(&sb);
}

/*
 * The sha256 the trusted comment gives for `key`, into hex (left as it was
 * when the comment has no such field). 0, or TF_EINTEGRITY when the field is
 * given twice with different values or malformed.
 */
static int comment_field(const char *tc, const char *key, char hex[65])
{
	int found = 0;
	size_t kl = strlen(key);
	for (const char *f = tc; f && *f; f = strchr(f, '\t') ? strchr(f, '\t') + 1 : NULL) {
		size_t fl = strcspn(f, "\t");
		if (fl <= kl || strncmp(f, key, kl) != 0 || f[kl] != '=')
			continue;
		const char *v = f + kl + 1;
		char got[65];
		if (fl - kl - 1 != 7 + 64 || strncmp(v, "sha256:", 7) != 0)
			return TF_EINTEGRITY;
		memcpy(got, v + 7, 64);
		got[64] = '\0';
		if (!is_hex64(got) || (found && strcmp(got, hex) != 0))
			return TF_EINTEGRITY;
		memcpy(hex, got, 65);
		found = 1;
	}
	return 0;
}

/* Every side file of m must be named in the trusted comment with its hash. */
static int check_sides(struct ctx *c, const struct manifest *m, const char *sig_name,
                       const char *tc)
{
	struct side s[2];
	size_t n = side_files(m, s);
	for (size_t i = 0; i < n; i++) {
		char hex[65] = "";
		if (comment_field(tc, s[i].key, hex) != 0) {
			ev_log(c, EV_ERROR, "%s: the trusted comment's %s field is malformed",
			       sig_name, s[i].key);
			return TF_EINTEGRITY;
		}
		if (hex[0] == '\0') {
			ev_log(
			    c, EV_ERROR,
			    "%s: the signature does not cover %s (%s): its trusted comment has no "
			    "%s=sha256:... field (sign with `tfprov sign`, see "
			    "manifests/SCHEMA.md)",
			    sig_name, s[i].key, s[i].file, s[i].key);
			return TF_EINTEGRITY;
		}
		if (strcmp(hex, s[i].sha256) != 0) {
			ev_log(c, EV_ERROR,
			       "%s (%s) is not the file that was signed: sha256 %s, signed %s",
			       s[i].key, s[i].file, s[i].sha256, hex);
			return TF_EINTEGRITY;
		}
	}
	return 0;
}

/* GET of a small file over http(s), TLS verified: 0, -ENOENT (HTTP 404/410) or TF_E*; why set. */
static int http_get(struct ctx *c, const char *url, size_t max, char **out, size_t *len,
                    struct why *why)
{
	long status = 0;
	int r = http_get_small(c, url, HTTPGET_HTTP_OR_HTTPS, NULL, max, out, len, &status, why);
	if (r == TF_ENETWORK && (status == 404 || status == 410))
		return -ENOENT;
	return r;
}

/* A local file or an http(s) URL: 0, -ENOENT when it does not exist, a negative code; why set. */
static int get_bytes(struct ctx *c, const char *where, size_t max, char **out, size_t *len,
                     struct why *why)
{
	if (url_is_remote(where))
		return http_get(c, where, max, out, len, why);
	int r = read_file_at(AT_FDCWD, where, max, out, len);
	if (r != 0)
		why_fail(why, r, "%s", strerror(-r));
	return r;
}

/*
 * Checks the bytes of `what` against the signature file sig_name. A missing
 * signature is an error only when one is required; one that cannot be read
 * is an error unless `soft` (a mirror: warned, as an unreachable mirror
 * serves nothing anyway). 0 or TF_EINTEGRITY; *sig filled when a signature
 * was checked (sig->trusted_comment != NULL), and with sigtext != NULL the
 * signature's text there (the caller frees it).
 */
static int check_signed(struct ctx *c, const struct trust *t, const char *what,
                        const char *sig_name, const void *data, size_t len, int soft,
                        struct ms_sig *sig, char **sigtext)
{
	char *text = NULL;
	struct why w = {0};
	size_t siglen, signer;
	char id[MS_KEYID_SIZE];
	int rc = 0;
	int r = get_bytes(c, sig_name, MS_FILE_MAX, &text, &siglen, &w);
	if (r != 0 && !t->require && (r == -ENOENT || soft)) {
		ev_log(c, r == -ENOENT ? EV_DEBUG : EV_WARN, "%s: signature not checked: %s: %s",
		       what, sig_name, why_text(&w));
		goto out;
	}
	if (r != 0) {
		ev_log(c, EV_ERROR, "%s is not signed: cannot read %s: %s%s%s", what, sig_name,
		       why_text(&w), t->require ? "; a signature is required by " : "",
		       t->require ? t->require_src : "");
		rc = TF_EINTEGRITY;
		goto out;
	}
	why_clear(&w);
	rc = trust_verify(t, data, len, sig_name, text, siglen, sig, &signer, &w);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "%s", why_text(&w));
		goto out;
	}
	ms_keyid(sig->keynum, id);
	ev_log(c, EV_INFO, "%s: signed by trusted key %s (%s)", what, id, t->src[signer]);
	if (sigtext) {
		*sigtext = text;
		text = NULL;
	}
out:
	why_clear(&w);
	free(text);
	return rc;
}

/* A mirror's index.json against index.json.minisig beside it (DIR, file:// or http(s)). */
static int check_mirror(struct ctx *c, const struct trust *t, const char *mirror)
{
	char *dir = url_local_path(mirror), *index, *text = NULL;
	struct why w = {0};
	size_t len, n = strlen(mirror);
	struct ms_sig sig = {0};
	int rc = 0;
	if (dir == NULL && (c->flags & CTX_OFFLINE)) {
		ev_log(c, EV_DEBUG, "mirror %s: not used offline; its index is not checked",
		       mirror);
		return 0;
	}
	while (dir == NULL && n > 0 && mirror[n - 1] == '/')
		n--;
	index = dir ? path_join(dir, "index.json") : xasprintf("%.*s/index.json", (int)n, mirror);
	int r = get_bytes(c, index, 64u << 20, &text, &len, &w);
	if (r == 0) {
		char *sig_name = xasprintf("%s.minisig", index);
		rc = check_signed(c, t, index, sig_name, text, len, 1, &sig, NULL);
		free(sig_name);
	} else if (t->require) {
		ev_log(c, EV_ERROR,
		       "mirror %s: cannot read %s: %s; a signed index is required by %s", mirror,
		       index, why_text(&w), t->require_src);
		rc = TF_EINTEGRITY;
	} else {
		ev_log(c, r == -ENOENT ? EV_DEBUG : EV_WARN, "mirror %s: index not checked: %s: %s",
		       mirror, index, why_text(&w));
	}
	ms_sig_release(&sig);
	why_clear(&w);
	free(text);
	free(index);
	free(dir);
	return rc;
}

/*
 * The policy for m, its signature read from sig_name (NULL: MANIFEST.minisig
 * beside it); *sigtext, when not NULL, gets the verified signature's text.
 */
static int check_manifest(struct ctx *c, const struct manifest *m, const char *what,
                          int check_mirrors, const char *sig_name, char **sigtext)
{
	struct trust t;
	struct ms_sig sig = {0};
	char *beside = xasprintf("%s.minisig", m->path);
	struct why w = {0};
	int rc = trust_load(c, &t, &w);
	if (rc != 0)
		ev_log(c, EV_ERROR, "%s", why_text(&w));
	why_clear(&w);
	if (rc != 0 || (t.n == 0 && !t.require))
		goto out;
	if (t.n == 0) {
		char *dir = ctx_host_path(c, "/etc/tfprov/trusted-keys.d");
		ev_log(c, EV_ERROR,
		       "%s: %s requires a signature but no key is trusted: give --trusted-key "
		       "FILE or put KEY.pub in %s",
		       what, t.require_src, dir);
		free(dir);
		rc = TF_EINTEGRITY;
		goto out;
	}
	rc = check_signed(c, &t, what, sig_name ? sig_name : beside, m->text, m->textlen, 0, &sig,
	                  sigtext);
	if (rc == 0 && sig.trusted_comment)
		rc = check_sides(c, m, what, sig.trusted_comment);
	for (size_t i = 0; rc == 0 && check_mirrors && i < c->mirrors.n; i++)
		rc = check_mirror(c, &t, c->mirrors.v[i]);
	if (rc != 0 && sigtext) {
		free(*sigtext);
		*sigtext = NULL;
	}
out:
	free(beside);
	ms_sig_release(&sig);
	trust_release(&t);
	return rc;
}

int cli_check_signature(struct ctx *c, const struct manifest *m, int check_mirrors)
{
	return check_manifest(c, m, m->path, check_mirrors, NULL, NULL);
}

/* <state_dir>/signatures/<manifest sha256>.minisig: a generation's verified signature. */
static char *kept_signature_path(const struct ctx *c, const char *manifest_sha256)
{
	return xasprintf("%s/signatures/%s.minisig", c->state_dir, manifest_sha256);
}

int cli_check_signature_keep(struct ctx *c, const struct manifest *m, char **sigtext)
{
	*sigtext = NULL;
	return check_manifest(c, m, m->path, 1, NULL, sigtext);
}

int cli_keep_signature(struct ctx *c, const struct manifest *m, const char *sigtext)
{
	if (sigtext == NULL || c->st == NULL)
		return 0;
	char *dir = path_join(c->state_dir, "signatures"),
	     *path = kept_signature_path(c, m->sha256);
	int rc = 0, r = mkdirs_at(AT_FDCWD, dir, 0755);
	if (r == 0)
		r = fs_write_atomic(path, sigtext, strlen(sigtext), 0644, 0);
	if (r != 0) {
		ev_log(c, EV_ERROR, "cannot keep the manifest's signature for rollback: %s: %s",
		       path, strerror(-r));
		rc = TF_EIO;
	}
	free(dir);
	free(path);
	return rc;
}

int cli_check_signature_kept(struct ctx *c, const struct manifest *m, long long gen)
{
	char *kept = kept_signature_path(c, m->sha256);
	char *what = xasprintf("%s (generation %lld)", m->path, gen);
	struct stat st;
	/* Kept when it was applied; else the one beside the recorded path, if it signs these bytes. */
	const char *sig_name = stat(kept, &st) == 0 ? kept : NULL;
	int rc = check_manifest(c, m, what, 1, sig_name, NULL);
	free(what);
	free(kept);
	return rc;
}
