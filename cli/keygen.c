/*
 * keygen.c - `tfprov keygen --key FILE`: a new minisign key pair, the secret
 * key in FILE (mode 0600) and the public key beside it (FILE with .key
 * replaced by .pub, or FILE.pub). The secret key is unencrypted, as
 * `minisign -G -W` writes it, for CI signers that keep it in a secret store;
 * `minisign -G` makes a password-protected one, which `tfprov sign` reads too.
 * Neither file is ever overwritten.
 */
#include "cli.h"
#include "error.h"
#include "event.h"
#include "artifact.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_keygen(struct ctx *c, struct opts *o)
{
	struct ms_seckey sk;
	char id[MS_KEYID_SIZE];
	if (o->key == NULL || o->args.n != 0) {
		ev_log(c, EV_ERROR, "usage: tfprov keygen --key SECRET_KEY_FILE");
		return TF_EUSAGE;
	}
	size_t n = strlen(o->key);
	char *pub = str_ends_with(o->key, ".key") ? xasprintf("%.*s.pub", (int)(n - 4), o->key)
	                                          : xasprintf("%s.pub", o->key);
	char *pk_text = NULL, *sk_text = NULL;
	int rc = 0;
	if (access(pub, F_OK) == 0) {
		ev_log(c, EV_ERROR, "%s exists; tfprov does not overwrite a key", pub);
		rc = TF_EFAIL;
		goto out;
	}
	if (ms_keygen(&sk) != 0) {
		ev_log(c, EV_ERROR, "cannot generate a key pair (OpenSSL)");
		rc = TF_EFAIL;
		goto out;
	}
	pk_text = ms_pubkey_format(&sk);
	sk_text = ms_seckey_format(&sk);
	rc = cli_write_file(c, o->key, sk_text, 0600, 1);
	if (rc == 0) {
		rc = cli_write_file(c, pub, pk_text, 0644, 1);
		if (rc != 0)
			unlink(o->key);
	}
	if (rc == 0) {
		ms_keyid(sk.keynum, id);
		ev_log(c, EV_INFO, "key %s: secret key %s, public key %s", id, o->key, pub);
	}
out:
	if (sk_text) {
		explicit_bzero(sk_text, strlen(sk_text));
		free(sk_text);
	}
	explicit_bzero(&sk, sizeof(sk));
	free(pk_text);
	free(pub);
	return rc;
}
