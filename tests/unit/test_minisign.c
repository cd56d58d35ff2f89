/*
 * minisign key and signature files: known answers from the real minisign 0.11
 * (Debian's package; a throwaway test key made with `minisign -G -W`, the
 * message "hello\n" signed with `minisign -S` and `minisign -S -l`), round
 * trips through tfprov's own keys, and malformed inputs for every parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "error.h"
#include "artifact.h"
#include "artifact_int.h"
#include "util.h"

#define PUB                                                                                        \
	"untrusted comment: minisign public key 10A18B91DC40836\n"                                 \
	"RWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J\n"
#define SEC_B64                                                                                    \
	"RWQAAEIyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAANgjEHbkY"         \
	"CgH6j/M8nisp8PRCBcODdFISK5ri6sWqhi+L584o4DsU3CCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6"         \
	"swvEPC3JAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
#define SEC "untrusted comment: minisign encrypted secret key\n" SEC_B64 "\n"
#define SIG_ED                                                                                     \
	"untrusted comment: signature from minisign secret key\n"                                  \
	"RUQ2CMQduRgKAfKDhuvUYJ+075rjoOpc3IThw/"                                                   \
	"QO5xTjuo+2rPnWoZV4PAchyK4xtoPUCkXflk6mo3tr7mRzmSJtO7"                                     \
	"SpvzOXYAg=\n"                                                                             \
	"trusted comment: timestamp:1796092604\tfile:m.txt\thashed\n"                              \
	"HbaXUm8Vb8jXMnM1GnaugAcG970h8RSdBi/Q/"                                                    \
	"DD3aqaAQr57N7yn1sjDra69nW09a+iUokfMxMueE9JPEVcjDg==\n"
#define SIG_ED_LEGACY                                                                              \
	"untrusted comment: signature from minisign secret key\n"                                  \
	"RWQ2CMQduRgKAcF9XVVmLJyc6BYOCqygIvqLvURv9a9loMlvhmA0hCn0zAivLda0xDoHO8pUqCOq6GxzXJB00BUL" \
	"yJ"                                                                                       \
	"3htswJcAk=\n"                                                                             \
	"trusted comment: timestamp:1796092604\tfile:m.txt\n"                                      \
	"NV+Y5DCnQ+G6nJT27BAYet9efLp5m5Nhh22hPJHrhZt68lbVM4NG5ZC53ufcBJs8o6X+6J4nGxPlyasgXFnxAg==" \
	"\n"

static const char msg[] = "hello\n";

static void test_minisign_known_answers(void **state)
{
	struct ms_pubkey pk;
	struct ms_sig s;
	struct why why = {0};
	char id[MS_KEYID_SIZE];
	assert_int_equal(ms_pubkey_parse(PUB, strlen(PUB), &pk, &why), 0);
	ms_keyid(pk.keynum, id);
	assert_string_equal(id, "10A18B91DC40836"); /* as minisign printed it */

	assert_int_equal(ms_sig_parse(SIG_ED, strlen(SIG_ED), &s, &why), 0);
	assert_true(s.prehashed);
	assert_string_equal(s.trusted_comment, "timestamp:1796092604\tfile:m.txt\thashed");
	assert_int_equal(ms_verify(&s, &pk, msg, strlen(msg), &why), 0);
	assert_int_equal(ms_verify(&s, &pk, "hellp\n", 6, &why), TF_EINTEGRITY);
	assert_string_equal(why.msg, "the signature does not match the file");
	/* The trusted comment is authenticated: one character changed fails. */
	s.trusted_comment[10] ^= 1;
	assert_int_equal(ms_verify(&s, &pk, msg, strlen(msg), &why), TF_EINTEGRITY);
	assert_string_equal(why.msg, "the trusted comment's signature does not match");
	ms_sig_release(&s);

	assert_int_equal(ms_sig_parse(SIG_ED_LEGACY, strlen(SIG_ED_LEGACY), &s, &why), 0);
	assert_false(s.prehashed);
	assert_int_equal(ms_verify(&s, &pk, msg, strlen(msg), &why), 0);
	assert_int_equal(ms_verify(&s, &pk, msg, strlen(msg) - 1, &why), TF_EINTEGRITY);
	ms_sig_release(&s);
	why_clear(&why);
}

static void test_minisign_secret_key_signs_for_its_public_key(void **state)
{
	struct ms_seckey sk;
	struct ms_pubkey pk, derived;
	struct ms_sig s;
	struct why why = {0};
	assert_int_equal(ms_seckey_parse(SEC, strlen(SEC), NULL, &sk, &why), 0);
	assert_int_equal(ms_pubkey_parse(PUB, strlen(PUB), &pk, &why), 0);
	ms_seckey_public(&sk, &derived);
	assert_memory_equal(&derived, &pk, sizeof(pk));
	char *text = ms_sign(&sk, msg, strlen(msg), "file:m.txt\tx=1", "test");
	assert_non_null(text);
	assert_int_equal(ms_sig_parse(text, strlen(text), &s, &why), 0);
	assert_true(s.prehashed);
	assert_string_equal(s.trusted_comment, "file:m.txt\tx=1");
	assert_int_equal(ms_verify(&s, &pk, msg, strlen(msg), &why), 0);
	ms_sig_release(&s);
	free(text);
	/* Comments must be single lines that fit minisign's buffers. */
	assert_null(ms_sign(&sk, msg, strlen(msg), "a\nb", "test"));
	assert_null(ms_sign(&sk, msg, strlen(msg), "ok", "a\rb"));
	char *long_tc = xmalloc(MS_TRUSTED_COMMENT_MAX + 1);
	memset(long_tc, 'x', MS_TRUSTED_COMMENT_MAX);
	long_tc[MS_TRUSTED_COMMENT_MAX] = '\0';
	assert_null(ms_sign(&sk, msg, strlen(msg), long_tc, "test"));
	free(long_tc);
	assert_int_equal(why.code, 0); /* nothing failed */
}

static void test_minisign_keygen_round_trip(void **state)
{
	struct ms_seckey a, b, parsed;
	struct ms_pubkey pa, pb;
	struct ms_sig s;
	struct why why = {0};
	assert_int_equal(ms_keygen(&a), 0);
	assert_int_equal(ms_keygen(&b), 0);
	char *pub = ms_pubkey_format(&a), *sec = ms_seckey_format(&a);
	assert_int_equal(ms_pubkey_parse(pub, strlen(pub), &pa, &why), 0);
	assert_int_equal(ms_seckey_parse(sec, strlen(sec), NULL, &parsed, &why), 0);
	assert_memory_equal(&parsed, &a, sizeof(a));
	ms_seckey_public(&b, &pb);
	char *text = ms_sign(&parsed, msg, 3, "c", "u");
	assert_int_equal(ms_sig_parse(text, strlen(text), &s, &why), 0);
	assert_int_equal(ms_verify(&s, &pa, msg, 3, &why), 0);
	assert_int_equal(ms_verify(&s, &pb, msg, 3, &why), TF_EINTEGRITY);
	assert_string_equal(why.msg, "the signature is by another key");
	ms_sig_release(&s);
	why_clear(&why);
	free(text);
	free(pub);
	free(sec);
}

/* base64 of bytes, for building malformed files from a good one. */
static char *b64(const unsigned char *in, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)out, in, (int)n);
	return out;
}

static size_t unb64(const char *s, unsigned char *out)
{
	int n = EVP_DecodeBlock(out, (const unsigned char *)s, (int)strlen(s));
	assert_true(n > 0);
	size_t len = strlen(s);
	return (size_t)n - (s[len - 1] == '=') - (s[len - 2] == '=');
}

struct bad {
	const char *text;
	const char *why;
};

static void expect_pub_bad(const char *text, size_t len, const char *want)
{
	struct ms_pubkey pk;
	struct why why = {0};
	assert_int_equal(ms_pubkey_parse(text, len, &pk, &why), TF_EINTEGRITY);
	assert_int_equal(why.code, TF_EINTEGRITY);
	assert_non_null(why.msg);
	if (strstr(why.msg, want) == NULL)
		fail_msg("'%s': got '%s', wanted '%s'", text, why.msg, want);
	why_clear(&why);
}

static void test_minisign_public_key_malformed(void **state)
{
	static const struct bad cases[] = {
	    {"", "ends early"},
	    {"untrusted comment: x\n", "ends early"},
	    {"comment: x\nRWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J\n",
	     "does not start with 'untrusted comment: '"},
	    {"untrusted comment: x\nRWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3\n",
	     "not the base64"},
	    {"untrusted comment: x\nRWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J==\n",
	     "not the base64"},
	    {"untrusted comment: x\nRWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEP!3J\n",
	     "not the base64"},
	    {"untrusted comment: x\nRWQ2CMQd uRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J\n",
	     "not the base64"},
	    {"untrusted comment: "
	     "x\nRWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J\nmore\n",
	     "text after its last line"},
	    /* A secret key where a public key is expected: wrong length. */
	    {SEC, "not the base64"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		expect_pub_bad(cases[i].text, strlen(cases[i].text), cases[i].why);

	/* A NUL byte anywhere. */
	char nul[] = PUB;
	nul[5] = '\0';
	expect_pub_bad(nul, sizeof(nul) - 1, "NUL");

	/* The right length with another algorithm tag. */
	unsigned char raw[64];
	size_t n = unb64("RWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J", raw);
	assert_int_equal(n, 42);
	raw[1] = 'D';
	char *enc = b64(raw, n);
	char *text = xasprintf("untrusted comment: x\n%s\n", enc);
	expect_pub_bad(text, strlen(text), "not Ed25519");
	free(text);
	free(enc);

	/* An untrusted comment longer than minisign reads. */
	struct strbuf sb = STRBUF_INIT;
	strbuf_adds(&sb, "untrusted comment: ");
	for (int i = 0; i < 1100; i++)
		strbuf_adds(&sb, "x");
	strbuf_adds(&sb, "\nRWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J\n");
	expect_pub_bad(sb.buf, sb.len, "longer than minisign allows");
	strbuf_release(&sb);

	/* CRLF line ends and trailing blank lines are fine. */
	struct ms_pubkey pk;
	struct why why = {0};
	const char *crlf = "untrusted comment: x\r\n"
	                   "RWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J\r\n\r\n";
	assert_int_equal(ms_pubkey_parse(crlf, strlen(crlf), &pk, &why), 0);
	assert_int_equal(why.code, 0);
}

/* The test secret key with one byte at `off` replaced; returns the file text. */
static char *sec_with(size_t off, unsigned char v)
{
	unsigned char raw[200];
	size_t n = unb64(SEC_B64, raw);
	assert_int_equal(n, 158);
	raw[off] = v;
	char *enc = b64(raw, n);
	char *text = xasprintf("untrusted comment: x\n%s\n", enc);
	free(enc);
	return text;
}

static void expect_sec(char *text, const char *password, int rc, const char *want)
{
	struct ms_seckey sk;
	struct why why = {0};
	assert_int_equal(ms_seckey_parse(text, strlen(text), password, &sk, &why), rc);
	assert_int_equal(why.code, rc);
	if (want && (why.msg == NULL || strstr(why.msg, want) == NULL))
		fail_msg("got '%s', wanted '%s'", why.msg ? why.msg : "(null)", want);
	why_clear(&why);
	free(text);
}

static void test_minisign_secret_key_malformed(void **state)
{
	expect_sec(sec_with(0, 'X'), NULL, TF_EINTEGRITY, "not Ed25519");
	expect_sec(sec_with(2, 'X'), NULL, TF_EINTEGRITY, "neither scrypt");
	expect_sec(sec_with(4, 'X'), NULL, TF_EINTEGRITY, "checksum algorithm");
	/* The seed no longer matches the stored public half. */
	expect_sec(sec_with(70, 0x55), NULL, TF_EINTEGRITY, "corrupt");
	/* Marked scrypt-encrypted: a password is needed, and a wrong one is caught
	 * (opslimit and memlimit 0 make libsodium's smallest scrypt parameters). */
	unsigned char raw[200];
	size_t n = unb64(SEC_B64, raw);
	memcpy(raw + 2, "Sc", 2);
	char *b = b64(raw, n);
	char *text = xasprintf("untrusted comment: x\n%s\n", b);
	expect_sec(xstrdup(text), NULL, MS_NEED_PASSWORD, NULL);
	expect_sec(xstrdup(text), "password", TF_EINTEGRITY, "wrong password");
	free(text);
	free(b);
	/* Truncated: one base64 quantum short. */
	char *cut = xasprintf("untrusted comment: x\n%.*s\n", (int)strlen(SEC_B64) - 4, SEC_B64);
	expect_sec(cut, NULL, TF_EINTEGRITY, "not the base64");
}

static void expect_sig_bad(const char *text, const char *want)
{
	struct ms_sig s;
	struct why why = {0};
	assert_int_equal(ms_sig_parse(text, strlen(text), &s, &why), TF_EINTEGRITY);
	assert_null(s.trusted_comment);
	assert_int_equal(why.code, TF_EINTEGRITY);
	if (why.msg == NULL || strstr(why.msg, want) == NULL)
		fail_msg("got '%s', wanted '%s'", why.msg ? why.msg : "(null)", want);
	why_clear(&why);
}

static void test_minisign_signature_malformed(void **state)
{
	const char *l1 = "untrusted comment: signature from minisign secret key\n";
	const char *l2 =
	    "RUQ2CMQduRgKAfKDhuvUYJ+075rjoOpc3IThw/QO5xTjuo+2rPnWoZV4PAchyK4xtoPUCkXflk6mo3tr7"
	    "mRzmSJtO7SpvzOXYAg=\n";
	const char *l3 = "trusted comment: timestamp:1796092604\tfile:m.txt\thashed\n";
	const char *l4 = "HbaXUm8Vb8jXMnM1GnaugAcG970h8RSdBi/Q/DD3aqaAQr57N7yn1sjDra69nW09a+"
	                 "iUokfMxMueE9JPEVcjDg==\n";
	char *t;
	/* Three lines of four. */
	t = xasprintf("%s%s%s", l1, l2, l3);
	expect_sig_bad(t, "ends early");
	free(t);
	t = xasprintf("%s%s%s%s%s", l1, l2, l3, l4, "extra\n");
	expect_sig_bad(t, "text after its last line");
	free(t);
	t = xasprintf("%s%s%s%s", "untrusted: x\n", l2, l3, l4);
	expect_sig_bad(t, "untrusted comment");
	free(t);
	t = xasprintf("%s%s%s%s", l1, l2, "comment: x\n", l4);
	expect_sig_bad(t, "'trusted comment: '");
	free(t);
	/* The global signature cut short, and the signature line given twice. */
	t = xasprintf("%s%s%s%.84s\n", l1, l2, l3, l4);
	expect_sig_bad(t, "fourth line");
	free(t);
	t = xasprintf("%s%s%s%s", l1, l2, l3, l2);
	expect_sig_bad(t, "fourth line");
	free(t);
	/* A public key's base64 where the signature belongs. */
	t = xasprintf("%s%s\n%s%s", l1, "RWQ2CMQduRgKASCW1kTCzCUVFtncoNGfWmzM151wRvUP09q6swvEPC3J",
	              l3, l4);
	expect_sig_bad(t, "second line");
	free(t);
	/* An unknown algorithm tag. */
	unsigned char raw[100];
	char *line2 = xstrndup(l2, strlen(l2) - 1);
	size_t n = unb64(line2, raw);
	free(line2);
	assert_int_equal(n, 74);
	raw[1] = 'X';
	char *enc = b64(raw, n);
	t = xasprintf("%s%s\n%s%s", l1, enc, l3, l4);
	expect_sig_bad(t, "neither 'ED' nor 'Ed'");
	free(t);
	free(enc);
	/* A trusted comment longer than minisign's buffer. */
	struct strbuf sb = STRBUF_INIT;
	strbuf_adds(&sb, l1);
	strbuf_adds(&sb, l2);
	strbuf_adds(&sb, "trusted comment: ");
	for (int i = 0; i < MS_TRUSTED_COMMENT_MAX; i++)
		strbuf_adds(&sb, "x");
	strbuf_adds(&sb, "\n");
	strbuf_adds(&sb, l4);
	expect_sig_bad(sb.buf, "longer than minisign allows");
	strbuf_release(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_minisign_known_answers),
	    cmocka_unit_test(test_minisign_secret_key_signs_for_its_public_key),
	    cmocka_unit_test(test_minisign_keygen_round_trip),
	    cmocka_unit_test(test_minisign_public_key_malformed),
	    cmocka_unit_test(test_minisign_secret_key_malformed),
	    cmocka_unit_test(test_minisign_signature_malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
