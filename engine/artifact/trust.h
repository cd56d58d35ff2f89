/*
 * trust.h - the signature policy: which minisign keys are trusted and
 * whether a signature is required.
 *
 * Sources, all read when a command needs the policy:
 *   --trusted-key FILE (repeatable)            minisign public key files
 *   ROOT/etc/tfprov/trusted-keys.d/NAME.pub   the same, one key a file
 *   ROOT/etc/tfprov/policy.yaml               `require_signature: true|false`
 *   --require-signature                        require, whatever the file says
 * A malformed key or policy file is an error, never skipped: a policy that
 * cannot be read must not silently become a weaker one.
 *
 * The struct owns its arrays; trust_release() frees them.
 */
#ifndef TFPROV_TRUST_H
#define TFPROV_TRUST_H

#include <stddef.h>

#include "minisign.h"

struct ctx;

struct trust {
	struct ms_pubkey *keys;
	char **src; /* where keys[i] came from, for messages */
	size_t n;
	int require;
	const char *require_src; /* "--require-signature" or the policy file; static or src-owned */
	char *policy_path;       /* host path of policy.yaml, for messages */
};

/* Loads the policy for this run; 0 or TF_EFAIL (logged, naming the file). */
int trust_load(struct ctx *c, struct trust *t);
void trust_release(struct trust *t);

/*
 * Checks `sigtext` (a .minisig file's bytes, named sig_name in messages) as a
 * signature of msg by one of the trusted keys. 0 with *sig filled (release it)
 * and *signer the key's index; or TF_EINTEGRITY with *why (malloc'd) naming
 * the key id or the reason.
 */
int trust_verify(const struct trust *t, const void *msg, size_t len, const char *sig_name,
                 const char *sigtext, size_t siglen, struct ms_sig *sig, size_t *signer,
                 char **why);

/* "ID (source), ID (source)": the trusted keys, for messages; caller frees. */
char *trust_describe(const struct trust *t);

#endif
