/*
 * sign.c - `tfprov sign --key KEY MANIFEST...`: writes MANIFEST.minisig, a
 * minisign signature (prehashed form) whose trusted comment carries the
 * sha256 of each side file (signature.c says why). Also what `mirror build
 * --key` uses to sign index.json, and the secret key loader.
 *
 * A manifest is signed only if it validates: the bytes signed are the bytes
 * parsed (m->text), and the side-file hashes are those of the bytes parsed.
 * Every file is written to a temporary name and renamed into place.
 */
#include "cli.h"
#include "fs.h"
#include "error.h"
#include "event.h"
#include "manifest.h"
#include "artifact.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

int cli_write_file(struct ctx *c, const char *path, const char *text, unsigned mode, int no_replace)
{
	int rc = fs_write_atomic(path, text, strlen(text), mode, no_replace ? FS_NO_REPLACE : 0);
	if (rc != 0)
		ev_log(c, EV_ERROR, "cannot write %s: %s", path,
		       rc == -EEXIST ? "it exists; tfprov does not overwrite a key"
		                     : strerror(-rc));
	return rc ? TF_EIO : 0;
}

/* One line from stdin, without echo on a terminal; NULL at EOF. Caller frees. */
static char *read_password(const char *path)
{
	struct termios old, quiet;
	char buf[1024];
	int tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
	if (tty) {
		fprintf(stderr, "Password for %s: ", path);
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
	}
	char *line = fgets(buf, sizeof(buf), stdin);
	if (tty) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
		fputc('\n', stderr);
	}
	if (line == NULL)
		return NULL;
	buf[strcspn(buf, "\r\n")] = '\0';
	char *pw = xstrdup(buf);
	explicit_bzero(buf, sizeof(buf));
	return pw;
}

int cli_load_seckey(struct ctx *c, const char *path, struct ms_seckey *sk)
{
	char *text = NULL, *pw = NULL;
	size_t len;
	struct why why = {0};
	int r = read_file_at(AT_FDCWD, path, MS_FILE_MAX, &text, &len);
	if (r != 0) {
		ev_log(c, EV_ERROR, "secret key %s: %s", path, strerror(-r));
		return TF_EFAIL;
	}
	r = ms_seckey_parse(text, len, NULL, sk, &why);
	if (r == MS_NEED_PASSWORD) {
		pw = read_password(path);
		why_clear(&why);
		if (pw == NULL)
			why_fail(&why, r,
			         "it is encrypted and no password was given on standard input");
		else
			r = ms_seckey_parse(text, len, pw, sk, &why);
	}
	if (pw) {
		explicit_bzero(pw, strlen(pw));
		free(pw);
	}
	explicit_bzero(text, len);
	free(text);
	if (r != 0)
		ev_log(c, EV_ERROR, "secret key %s: %s", path, why_text(&why));
	why_clear(&why);
	return r != 0 ? TF_EFAIL : 0;
}

/* Signs data into PATH.minisig with `tc` (minisign's own fields first). */
static int sign_into(struct ctx *c, const struct ms_seckey *sk, const char *path, const void *data,
                     size_t len, const char *extra)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	char id[MS_KEYID_SIZE];
	ms_keyid(sk->keynum, id);
	char *tc =
	    xasprintf("timestamp:%lld\tfile:%s\thashed%s", (long long)now_unix(), base, extra);
	char *uc = xasprintf("signature from tfprov, key %s", id);
	char *text = ms_sign(sk, data, len, tc, uc);
	char *out = xasprintf("%s.minisig", path);
	int rc = 0;
	if (text == NULL) {
		ev_log(c, EV_ERROR,
		       "cannot sign %s: the file name or comment is too long, or "
		       "OpenSSL failed",
		       path);
		rc = TF_EFAIL;
	} else {
		rc = cli_write_file(c, out, text, 0644, 0);
	}
	if (rc == 0)
		ev_log(c, EV_INFO, "%s: signed with key %s -> %s", path, id, out);
	free(out);
	free(text);
	free(uc);
	free(tc);
	return rc;
}

int cli_sign_mirror_index(struct ctx *c, const char *dir, const struct ms_seckey *sk)
{
	char *path = path_join(dir, "index.json"), *sigpath = xasprintf("%s.minisig", path);
	char *data = NULL, *old = NULL;
	size_t len, oldlen;
	int rc = 0;
	int r = read_file_at(AT_FDCWD, path, 64u << 20, &data, &len);
	if (r != 0) {
		ev_log(c, EV_ERROR, "cannot read %s: %s", path, strerror(-r));
		rc = TF_EIO;
		goto out;
	}
	/* Idempotent: a signature by this key that still verifies is kept. */
	if (read_file_at(AT_FDCWD, sigpath, MS_FILE_MAX, &old, &oldlen) == 0) {
		struct ms_sig sig;
		struct ms_pubkey pk;
		ms_seckey_public(sk, &pk);
		/* Any failure means "sign again": its words are not wanted. */
		int ok = ms_sig_parse(old, oldlen, &sig, NULL) == 0 &&
		         ms_verify(&sig, &pk, data, len, NULL) == 0;
		ms_sig_release(&sig);
		if (ok) {
			ev_log(c, EV_INFO, "%s is signed and current", sigpath);
			goto out;
		}
	}
	rc = sign_into(c, sk, path, data, len, "");
out:
	free(old);
	free(data);
	free(sigpath);
	free(path);
	return rc;
}

int cmd_sign(struct ctx *c, struct opts *o)
{
	struct ms_seckey sk;
	int rc = 0;
	if (o->key == NULL) {
		ev_log(c, EV_ERROR, "usage: tfprov sign --key SECRET_KEY MANIFEST...");
		return TF_EUSAGE;
	}
	rc = cli_load_seckey(c, o->key, &sk);
	for (size_t i = 0; i < o->args.n && rc == 0; i++) {
		struct manifest *m = NULL;
		rc = cli_load_manifest(c, o->args.v[i], &m, 0);
		if (rc == 0) {
			char *extra = cli_side_fields(m);
			rc = sign_into(c, &sk, m->path, m->text, m->textlen, extra);
			free(extra);
		}
		manifest_free(m);
	}
	explicit_bzero(&sk, sizeof(sk));
	return rc;
}
