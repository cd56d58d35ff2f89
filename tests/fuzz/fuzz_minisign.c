/*
 * fuzz_minisign.c - libFuzzer target for minisign's file parsers: any bytes
 * are read as a public key, a secret key (never decrypted: its scrypt cost is
 * the key owner's choice) and a signature; a parsed signature is checked
 * against a parsed key and the input. Parsers must refuse with a reason,
 * never crash, hang or leak.
 */
#include "error.h"
#include "artifact.h"
#include "artifact_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct why why = {0};
	struct ms_pubkey pk = {{0}, {0}};
	struct ms_seckey sk;
	struct ms_sig sig;
	int have_pk = ms_pubkey_parse(text, size, &pk, &why) == 0;
	int r = ms_seckey_parse(text, size, NULL, &sk, &why);
	if (r != 0 && r != TF_EINTEGRITY && r != MS_NEED_PASSWORD)
		abort();
	if (r == TF_EINTEGRITY && (why.code != r || why.msg == NULL))
		abort(); /* every refusal says why */
	if (ms_sig_parse(text, size, &sig, &why) == 0) {
		if (sig.trusted_comment == NULL)
			abort();
		ms_verify(&sig, &pk, data, size, &why);
		ms_sig_release(&sig);
	}
	(void)have_pk;
	why_clear(&why);
	return 0;
}
