/*
 * minisign.h - Ed25519 signatures in minisign's file formats, through OpenSSL.
 *
 * The formats are those of minisign (https://jedisct1.github.io/minisign/,
 * src/minisign.h in github.com/jedisct1/minisign), so the `minisign` Debian
 * package signs what tfprov verifies and verifies what tfprov signs:
 *
 *   public key   "untrusted comment: ..." / base64("Ed" keynum[8] pk[32])
 *   secret key   "untrusted comment: ..." / base64("Ed" kdf[2] "B2" salt[32]
 *                opslimit[8] memlimit[8] keynum[8] seed[32] pk[32] chk[32]);
 *                kdf "Sc": the last 104 bytes are XORed with scrypt(password);
 *                kdf 0,0: stored in clear (`minisign -G -W`)
 *   signature    "untrusted comment: ..." / base64(alg[2] keynum[8] sig[64]) /
 *                "trusted comment: TEXT" / base64(global_sig[64])
 *
 * alg "ED" signs BLAKE2b-512(message) (minisign's default), "Ed" the message
 * itself (legacy). global_sig signs sig[64] || TEXT, so the trusted comment is
 * authenticated too. Key ids are printed as minisign prints them.
 *
 * All cryptography is OpenSSL's EVP (Ed25519, BLAKE2b-512, scrypt). The
 * secret key's checksum is BLAKE2b-256, which OpenSSL 3.0 cannot compute
 * unkeyed; a decrypted key is instead checked by deriving its public key from
 * the seed and comparing it with the stored one, which a wrong password fails.
 * The same is why keys tfprov writes are unencrypted, as `minisign -G -W`
 * writes them (zero checksum, which minisign accepts for such keys).
 *
 * Parsers take a whole file in memory and never print; on failure they return
 * TF_EINTEGRITY and point *why at a static English reason.
 */
#ifndef TFPROV_MINISIGN_H
#define TFPROV_MINISIGN_H

#include <errno.h>
#include <stddef.h>

#define MS_KEYNUM_BYTES 8
#define MS_KEYID_SIZE   17 /* up to 16 hex digits and a NUL */
/* minisign's limit on the trusted comment line (TRUSTEDCOMMENTMAXBYTES). */
#define MS_TRUSTED_COMMENT_MAX 8192
/* Larger files are not key or signature files. */
#define MS_FILE_MAX 16384

struct ms_pubkey {
	unsigned char keynum[MS_KEYNUM_BYTES];
	unsigned char pk[32];
};

struct ms_seckey {
	unsigned char keynum[MS_KEYNUM_BYTES];
	unsigned char seed[32];
	unsigned char pk[32];
};

struct ms_sig {
	int prehashed; /* "ED": sig covers BLAKE2b-512 of the message */
	unsigned char keynum[MS_KEYNUM_BYTES];
	unsigned char sig[64];
	char *trusted_comment; /* without its "trusted comment: " prefix; owned */
	unsigned char global_sig[64];
};

/* ms_seckey_parse() result when the key is encrypted and no password was given
 * (a -errno, so it can never be taken for one of tfprov's TF_E* codes). */
#define MS_NEED_PASSWORD (-ENOKEY)

/* The key id as minisign prints it: the key number as little-endian hex. */
void ms_keyid(const unsigned char keynum[MS_KEYNUM_BYTES], char out[MS_KEYID_SIZE]);

int ms_pubkey_parse(const char *text, size_t len, struct ms_pubkey *pk, const char **why);
/*
 * Parses a secret key file; an encrypted one is decrypted with password
 * (MS_NEED_PASSWORD when it is NULL). 0, MS_NEED_PASSWORD or TF_EINTEGRITY
 * (the reason in *why).
 */
int ms_seckey_parse(const char *text, size_t len, const char *password, struct ms_seckey *sk,
                    const char **why);
/* Parses a .minisig file; release with ms_sig_release(). */
int ms_sig_parse(const char *text, size_t len, struct ms_sig *sig, const char **why);
void ms_sig_release(struct ms_sig *sig);

/*
 * Checks sig against message and pk: the key numbers, the signature of the
 * message, then the global signature over the trusted comment. 0 or
 * TF_EINTEGRITY (the reason in *why).
 */
int ms_verify(const struct ms_sig *sig, const struct ms_pubkey *pk, const void *msg, size_t len,
              const char **why);

/*
 * Signs message in the prehashed form; returns the .minisig file text
 * (caller frees). Comments must be single lines; NULL on an OpenSSL failure.
 */
char *ms_sign(const struct ms_seckey *sk, const void *msg, size_t len, const char *trusted_comment,
              const char *untrusted_comment);

/* A new random key pair. 0 or TF_EFAIL. */
int ms_keygen(struct ms_seckey *sk);
/* File texts for a key pair: the public key, and the secret key unencrypted. */
char *ms_pubkey_format(const struct ms_seckey *sk);
char *ms_seckey_format(const struct ms_seckey *sk);
/* The public half of a secret key. */
void ms_seckey_public(const struct ms_seckey *sk, struct ms_pubkey *pk);

#endif
