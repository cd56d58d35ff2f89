/*
 * minisign.c - minisign's key and signature files over OpenSSL EVP (see
 * artifact.h for the formats and their source).
 *
 * Invariants: every parser checks the whole file (line prefixes, exact
 * base64 lengths, algorithm tags, nothing but blank lines after the last
 * line) before it fills its output, and secret material is cleansed from
 * every temporary buffer before return.
 */
#include "artifact.h"
#include "artifact_int.h"
#include "error.h"
#include "util.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNTRUSTED_PREFIX "untrusted comment: "
#define TRUSTED_PREFIX   "trusted comment: "
/* minisign's COMMENTMAXBYTES: the untrusted comment line with its newline. */
#define UNTRUSTED_LINE_MAX 1024

/* Byte sizes of the decoded structures. */
#define PK_BYTES        (2 + MS_KEYNUM_BYTES + 32)
#define SIG_BYTES       (2 + MS_KEYNUM_BYTES + 64)
#define SK_BYTES        (2 + 2 + 2 + 32 + 8 + 8 + MS_KEYNUM_BYTES + 64 + 32)
#define SK_SECRET_OFF   (2 + 2 + 2 + 32 + 8 + 8) /* keynum, seed, pk, chk: encrypted */
#define SK_SECRET_BYTES (SK_BYTES - SK_SECRET_OFF)

/* scrypt needs at most this much memory for a key we accept (minisign's default: 1 GiB). */
#define SCRYPT_MAX_MEM (2ull << 30)

void ms_keyid(const unsigned char keynum[MS_KEYNUM_BYTES], char out[MS_KEYID_SIZE])
{
	uint64_t v = 0;
	for (int i = MS_KEYNUM_BYTES - 1; i >= 0; i--)
		v = (v << 8) | keynum[i];
	snprintf(out, MS_KEYID_SIZE, "%" PRIX64, v);
}

/*
 * Splits text into exactly `want` lines (a trailing '\r' dropped from each);
 * anything after them must be blank. 0 or TF_EINTEGRITY.
 */
static int split_lines(const char *text, size_t len, size_t want, const char **line, size_t *llen,
                       struct why *why)
{
	size_t i = 0, n = 0;
	if (memchr(text, '\0', len))
		return why_fail(why, TF_EINTEGRITY, "it contains a NUL byte");
	while (n < want) {
		if (i >= len)
			return why_fail(why, TF_EINTEGRITY, "it ends early");
		const char *nl = memchr(text + i, '\n', len - i);
		size_t end = nl ? (size_t)(nl - text) : len;
		line[n] = text + i;
		llen[n] = end - i;
		if (llen[n] && line[n][llen[n] - 1] == '\r')
			llen[n]--;
		n++;
		i = nl ? end + 1 : len;
	}
	for (; i < len; i++)
		if (text[i] != '\n' && text[i] != '\r' && text[i] != ' ' && text[i] != '\t')
			return why_fail(why, TF_EINTEGRITY, "it has text after its last line");
	return 0;
}

/* Decodes standard padded base64 of exactly `want` bytes. 0 or TF_EINTEGRITY. */
static int b64_decode_exact(const char *s, size_t n, unsigned char *out, size_t want)
{
	unsigned char buf[256];
	size_t pad = 0;
	if (n == 0 || n % 4 != 0 || n / 4 * 3 > sizeof(buf))
		return TF_EINTEGRITY;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		int ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		         (ch >= '0' && ch <= '9') || ch == '+' || ch == '/';
		if (ch == '=' && i >= n - 2 && (i == n - 1 || s[n - 1] == '=')) {
			pad++;
			continue;
		}
		if (!ok)
			return TF_EINTEGRITY;
	}
	if (n / 4 * 3 - pad != want)
		return TF_EINTEGRITY;
	if (EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n) != (int)(n / 4 * 3))
		return TF_EINTEGRITY;
	memcpy(out, buf, want);
	OPENSSL_cleanse(buf, sizeof(buf));
	return 0;
}

static char *b64_encode(const unsigned char *in, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)out, in, (int)n);
	return out;
}

/* Checks the untrusted comment line and decodes the base64 line after it. */
static int comment_and_blob(const char **line, const size_t *llen, unsigned char *blob,
                            size_t blob_len, const char *what, struct why *why)
{
	size_t pl = strlen(UNTRUSTED_PREFIX);
	if (llen[0] < pl || memcmp(line[0], UNTRUSTED_PREFIX, pl) != 0)
		return why_fail(why, TF_EINTEGRITY,
		                "the first line does not start with 'untrusted comment: '");
	if (llen[0] >= UNTRUSTED_LINE_MAX - 1)
		return why_fail(why, TF_EINTEGRITY,
		                "the untrusted comment is longer than minisign allows");
	if (b64_decode_exact(line[1], llen[1], blob, blob_len) != 0)
		return why_fail(why, TF_EINTEGRITY, "%s", what);
	return 0;
}

int ms_pubkey_parse(const char *text, size_t len, struct ms_pubkey *pk, struct why *why)
{
	const char *line[2];
	size_t llen[2];
	unsigned char b[PK_BYTES];
	if (split_lines(text, len, 2, line, llen, why) != 0 ||
	    comment_and_blob(line, llen, b, sizeof(b),
	                     "the second line is not the base64 of a minisign public key",
	                     why) != 0)
		return TF_EINTEGRITY;
	if (memcmp(b, "Ed", 2) != 0)
		return why_fail(why, TF_EINTEGRITY, "the key's algorithm is not Ed25519 ('Ed')");
	memcpy(pk->keynum, b + 2, MS_KEYNUM_BYTES);
	memcpy(pk->pk, b + 2 + MS_KEYNUM_BYTES, 32);
	return 0;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/*
 * libsodium's crypto_pwhash_scryptsalsa208sha256 parameter choice
 * (pickparams in libsodium's pwhash_scryptsalsa208sha256.c), which minisign's
 * opslimit and memlimit go through; the hash itself is plain scrypt.
 */
static void scrypt_params(uint64_t ops, uint64_t mem, unsigned *n_log2, uint64_t *p, uint64_t *r)
{
	uint64_t max_n;
	if (ops < 32768)
		ops = 32768;
	*r = 8;
	if (ops < mem / 32) {
		*p = 1;
		max_n = ops / (*r * 4);
	} else {
		max_n = mem / (*r * 128);
	}
	for (*n_log2 = 1; *n_log2 < 63; (*n_log2)++)
		if ((uint64_t)1 << *n_log2 > max_n / 2)
			break;
	if (!(ops < mem / 32)) {
		uint64_t maxrp = (ops / 4) / ((uint64_t)1 << *n_log2);
		if (maxrp > 0x3fffffff)
			maxrp = 0x3fffffff;
		*p = maxrp / *r;
	}
}

/* XORs the secret part of an "Sc" key with scrypt(password). 0 or TF_EINTEGRITY. */
static int sk_decrypt(unsigned char *b, const char *password, struct why *why)
{
	unsigned n_log2;
	uint64_t p, r;
	unsigned char stream[SK_SECRET_BYTES];
	scrypt_params(le64(b + 38), le64(b + 46), &n_log2, &p, &r);
	if (n_log2 > 40 || p == 0 || 128 * r * (((uint64_t)1 << n_log2) + p + 2) > SCRYPT_MAX_MEM)
		return why_fail(why, TF_EINTEGRITY,
		                "the key's scrypt parameters need more than 2 GiB of memory");
	uint64_t maxmem = 128 * r * (((uint64_t)1 << n_log2) + p + 2) + (1u << 20);
	if (EVP_PBE_scrypt(password, strlen(password), b + 6, 32, (uint64_t)1 << n_log2, r, p,
	                   maxmem, stream, sizeof(stream)) != 1)
		return why_fail(why, TF_EINTEGRITY, "scrypt failed (OpenSSL)");
	for (size_t i = 0; i < sizeof(stream); i++)
		b[SK_SECRET_OFF + i] ^= stream[i];
	OPENSSL_cleanse(stream, sizeof(stream));
	return 0;
}

/* The Ed25519 public key of a 32-byte seed. 0 or TF_EINTEGRITY. */
static int seed_public(const unsigned char seed[32], unsigned char pk[32])
{
	size_t n = 32;
	EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	int rc = k && EVP_PKEY_get_raw_public_key(k, pk, &n) == 1 && n == 32 ? 0 : TF_EINTEGRITY;
	EVP_PKEY_free(k);
	return rc;
}

int ms_seckey_parse(const char *text, size_t len, const char *password, struct ms_seckey *sk,
                    struct why *why)
{
	const char *line[2];
	size_t llen[2];
	unsigned char b[SK_BYTES], pk[32];
	int rc = TF_EINTEGRITY;
	if (split_lines(text, len, 2, line, llen, why) != 0 ||
	    comment_and_blob(line, llen, b, sizeof(b),
	                     "the second line is not the base64 of a minisign secret key",
	                     why) != 0)
		goto out;
	if (memcmp(b, "Ed", 2) != 0) {
		why_fail(why, TF_EINTEGRITY, "the key's algorithm is not Ed25519 ('Ed')");
		goto out;
	}
	if (memcmp(b + 4, "B2", 2) != 0) {
		why_fail(why, TF_EINTEGRITY, "the key's checksum algorithm is not BLAKE2b ('B2')");
		goto out;
	}
	int encrypted = memcmp(b + 2, "Sc", 2) == 0;
	if (!encrypted && memcmp(b + 2, "\0\0", 2) != 0) {
		why_fail(why, TF_EINTEGRITY,
		         "the key's encryption is neither scrypt ('Sc') nor none");
		goto out;
	}
	if (encrypted && password == NULL) {
		rc = why_code(why, MS_NEED_PASSWORD);
		goto out;
	}
	if (encrypted && sk_decrypt(b, password, why) != 0)
		goto out;
	const unsigned char *seed = b + SK_SECRET_OFF + MS_KEYNUM_BYTES;
	if (seed_public(seed, pk) != 0 || memcmp(pk, seed + 32, 32) != 0) {
		why_fail(why, TF_EINTEGRITY, "%s",
		         encrypted ? "wrong password for this key"
		                   : "the key is corrupt: its public half does not match its seed");
		goto out;
	}
	memcpy(sk->keynum, b + SK_SECRET_OFF, MS_KEYNUM_BYTES);
	memcpy(sk->seed, seed, 32);
	memcpy(sk->pk, pk, 32);
	rc = 0;
out:
	OPENSSL_cleanse(b, sizeof(b));
	return rc;
}

int ms_sig_parse(const char *text, size_t len, struct ms_sig *sig, struct why *why)
{
	const char *line[4];
	size_t llen[4], tl = strlen(TRUSTED_PREFIX);
	unsigned char b[SIG_BYTES];
	memset(sig, 0, sizeof(*sig));
	if (split_lines(text, len, 4, line, llen, why) != 0 ||
	    comment_and_blob(line, llen, b, sizeof(b),
	                     "the second line is not the base64 of a minisign signature", why) != 0)
		return TF_EINTEGRITY;
	if (memcmp(b, "ED", 2) != 0 && memcmp(b, "Ed", 2) != 0)
		return why_fail(why, TF_EINTEGRITY,
		                "the signature's algorithm is neither 'ED' nor 'Ed'");
	if (llen[2] < tl || memcmp(line[2], TRUSTED_PREFIX, tl) != 0)
		return why_fail(why, TF_EINTEGRITY,
		                "the third line does not start with 'trusted comment: '");
	if (llen[2] >= MS_TRUSTED_COMMENT_MAX - 1)
		return why_fail(why, TF_EINTEGRITY,
		                "the trusted comment is longer than minisign allows");
	if (b64_decode_exact(line[3], llen[3], sig->global_sig, 64) != 0)
		return why_fail(why, TF_EINTEGRITY,
		                "the fourth line is not the base64 of a 64-byte signature");
	sig->prehashed = b[1] == 'D';
	memcpy(sig->keynum, b + 2, MS_KEYNUM_BYTES);
	memcpy(sig->sig, b + 2 + MS_KEYNUM_BYTES, 64);
	sig->trusted_comment = xstrndup(line[2] + tl, llen[2] - tl);
	return 0;
}

void ms_sig_release(struct ms_sig *sig)
{
	free(sig->trusted_comment);
	sig->trusted_comment = NULL;
}

static int ed25519_verify(const unsigned char pk[32], const unsigned char sig[64], const void *msg,
                          size_t len)
{
	EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pk, 32);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok = k && md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, k) == 1 &&
	         EVP_DigestVerify(md, sig, 64, msg, len) == 1;
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(k);
	return ok ? 0 : TF_EINTEGRITY;
}

static int ed25519_sign(const unsigned char seed[32], const void *msg, size_t len,
                        unsigned char sig[64])
{
	size_t n = 64;
	EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok = k && md && EVP_DigestSignInit(md, NULL, NULL, NULL, k) == 1 &&
	         EVP_DigestSign(md, sig, &n, msg, len) == 1 && n == 64;
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(k);
	return ok ? 0 : TF_EINTEGRITY;
}

static int blake2b512(const void *msg, size_t len, unsigned char out[64])
{
	unsigned int n = 0;
	return EVP_Digest(msg, len, out, &n, EVP_blake2b512(), NULL) == 1 && n == 64
	           ? 0
	           : TF_EINTEGRITY;
}

/* sig[64] || trusted comment: what the global signature covers; caller frees. */
static unsigned char *global_msg(const unsigned char sig[64], const char *tc, size_t *len)
{
	size_t n = strlen(tc);
	unsigned char *g = xmalloc(64 + n);
	memcpy(g, sig, 64);
	memcpy(g + 64, tc, n);
	*len = 64 + n;
	return g;
}

int ms_verify(const struct ms_sig *sig, const struct ms_pubkey *pk, const void *msg, size_t len,
              struct why *why)
{
	unsigned char h[64];
	size_t glen;
	if (memcmp(sig->keynum, pk->keynum, MS_KEYNUM_BYTES) != 0)
		return why_fail(why, TF_EINTEGRITY, "the signature is by another key");
	if (sig->prehashed && blake2b512(msg, len, h) != 0)
		return why_fail(why, TF_EINTEGRITY, "BLAKE2b-512 failed (OpenSSL)");
	if (ed25519_verify(pk->pk, sig->sig, sig->prehashed ? h : msg, sig->prehashed ? 64 : len) !=
	    0)
		return why_fail(why, TF_EINTEGRITY, "the signature does not match the file");
	unsigned char *g = global_msg(sig->sig, sig->trusted_comment, &glen);
	int rc = ed25519_verify(pk->pk, sig->global_sig, g, glen);
	free(g);
	if (rc != 0)
		return why_fail(why, TF_EINTEGRITY,
		                "the trusted comment's signature does not match");
	return 0;
}

static int one_line(const char *s)
{
	return strchr(s, '\n') == NULL && strchr(s, '\r') == NULL;
}

char *ms_sign(const struct ms_seckey *sk, const void *msg, size_t len, const char *trusted_comment,
              const char *untrusted_comment)
{
	unsigned char h[64], blob[SIG_BYTES], gsig[64];
	size_t glen;
	char *out = NULL;
	if (!one_line(trusted_comment) || !one_line(untrusted_comment) ||
	    strlen(TRUSTED_PREFIX) + strlen(trusted_comment) >= MS_TRUSTED_COMMENT_MAX - 1 ||
	    strlen(UNTRUSTED_PREFIX) + strlen(untrusted_comment) >= UNTRUSTED_LINE_MAX - 1)
		return NULL;
	memcpy(blob, "ED", 2);
	memcpy(blob + 2, sk->keynum, MS_KEYNUM_BYTES);
	if (blake2b512(msg, len, h) != 0 || ed25519_sign(sk->seed, h, 64, blob + 10) != 0)
		return NULL;
	unsigned char *g = global_msg(blob + 10, trusted_comment, &glen);
	if (ed25519_sign(sk->seed, g, glen, gsig) == 0) {
		char *b1 = b64_encode(blob, sizeof(blob)), *b2 = b64_encode(gsig, sizeof(gsig));
		out = xasprintf(UNTRUSTED_PREFIX "%s\n%s\n" TRUSTED_PREFIX "%s\n%s\n",
		                untrusted_comment, b1, trusted_comment, b2);
		free(b1);
		free(b2);
	}
	free(g);
	return out;
}

int ms_keygen(struct ms_seckey *sk)
{
	if (RAND_bytes(sk->keynum, MS_KEYNUM_BYTES) != 1 || RAND_priv_bytes(sk->seed, 32) != 1 ||
	    seed_public(sk->seed, sk->pk) != 0)
		return TF_EFAIL;
	return 0;
}

void ms_seckey_public(const struct ms_seckey *sk, struct ms_pubkey *pk)
{
	memcpy(pk->keynum, sk->keynum, MS_KEYNUM_BYTES);
	memcpy(pk->pk, sk->pk, 32);
}

char *ms_pubkey_format(const struct ms_seckey *sk)
{
	unsigned char b[PK_BYTES];
	char id[MS_KEYID_SIZE];
	memcpy(b, "Ed", 2);
	memcpy(b + 2, sk->keynum, MS_KEYNUM_BYTES);
	memcpy(b + 2 + MS_KEYNUM_BYTES, sk->pk, 32);
	ms_keyid(sk->keynum, id);
	char *b64 = b64_encode(b, sizeof(b));
	char *out = xasprintf(UNTRUSTED_PREFIX "minisign public key %s\n%s\n", id, b64);
	free(b64);
	return out;
}

char *ms_seckey_format(const struct ms_seckey *sk)
{
	unsigned char b[SK_BYTES];
	memset(b, 0, sizeof(b));
	memcpy(b, "Ed", 2);
	memcpy(b + 4, "B2", 2);
	memcpy(b + SK_SECRET_OFF, sk->keynum, MS_KEYNUM_BYTES);
	memcpy(b + SK_SECRET_OFF + MS_KEYNUM_BYTES, sk->seed, 32);
	memcpy(b + SK_SECRET_OFF + MS_KEYNUM_BYTES + 32, sk->pk, 32);
	char *b64 = b64_encode(b, sizeof(b));
	char *out = xasprintf(UNTRUSTED_PREFIX "minisign secret key (unencrypted)\n%s\n", b64);
	OPENSSL_cleanse(b, sizeof(b));
	OPENSSL_cleanse(b64, strlen(b64));
	free(b64);
	return out;
}
