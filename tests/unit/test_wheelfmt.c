/*
 * test_wheelfmt.c - the one wheel-name parser and the one RECORD codec
 * (engine/python/python.h, wheelfmt), on the names and rows real wheels carry.
 *
 * The RECORD hash of an empty file, sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,
 * is the row of every empty __init__.py in pip-installed RECORDs; it is
 * base64.urlsafe_b64encode(hashlib.sha256(b"").digest()).rstrip(b"=") in
 * Python, and the sha256 of nothing is e3b0c442...b855 (FIPS 180-4 test vector).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "python.h"
#include "python_int.h"

#define EMPTY_HEX    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define EMPTY_RECORD "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"

static void test_name_of_a_manylinux_wheel(void **state)
{
	(void)state;
	struct wheel_name wn;
	assert_int_equal(
	    wheel_name_parse(
	        "tensorflow-2.20.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
	        &wn),
	    0);
	assert_string_equal(wn.name, "tensorflow");
	assert_string_equal(wn.version, "2.20.0");
	assert_null(wn.build);
	assert_string_equal(wn.py, "cp312");
	assert_string_equal(wn.abi, "cp312");
	assert_string_equal(wn.plat, "manylinux_2_17_x86_64.manylinux2014_x86_64");
	wheel_name_release(&wn);
}

static void test_name_with_build_tag_is_normalised(void **state)
{
	(void)state;
	struct wheel_name wn;
	assert_int_equal(wheel_name_parse("Tf_Keras-2.20.1-1-py3-none-any.whl", &wn), 0);
	assert_string_equal(wn.raw, "Tf_Keras");
	assert_string_equal(wn.name, "tf-keras");
	assert_string_equal(wn.version, "2.20.1");
	assert_string_equal(wn.build, "1");
	assert_string_equal(wn.py, "py3");
	assert_string_equal(wn.abi, "none");
	assert_string_equal(wn.plat, "any");
	wheel_name_release(&wn);
	assert_int_equal(
	    wheel_name_parse("nvidia_cudnn_cu12-9.3.0.75-py3-none-manylinux2014_x86_64.whl", &wn),
	    0);
	assert_string_equal(wn.name, "nvidia-cudnn-cu12");
	wheel_name_release(&wn);
}

static void test_what_is_not_a_wheel_name(void **state)
{
	(void)state;
	static const char *bad[] = {
	    "numpy-2.1.0.tar.gz",                /* an sdist */
	    "numpy-2.1.0-py3.whl",               /* too few parts */
	    "a-1-2-3-py3-none-any.whl",          /* too many */
	    "numpy%2B-2.1.0-py3-none-any.whl",   /* an escaped URL, not a name */
	    "numpy-2.1.0-py3-none-any.whl.part", /* not .whl */
	    ".whl",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct wheel_name wn;
		assert_false(wheel_name_ok(bad[i]));
		assert_int_equal(wheel_name_parse(bad[i], &wn), -EINVAL);
		assert_null(wn.name);
		wheel_name_release(&wn);
	}
	assert_true(wheel_name_ok("torch-2.4.0+cu121-cp312-cp312-linux_x86_64.whl"));
}

static void test_record_hash_both_ways(void **state)
{
	(void)state;
	char b64[RECORD_HASH_MAX], hex[65];
	record_hash_encode(EMPTY_HEX, b64);
	assert_string_equal(b64, EMPTY_RECORD);
	assert_int_equal(record_hash_decode(EMPTY_RECORD, hex), 0);
	assert_string_equal(hex, EMPTY_HEX);
	/* Every byte value survives the round trip (the urlsafe alphabet's - and _ included). */
	static const char *hexes[] = {
	    "fbae2a2cfc2cbe8fba87b1045a79ccce5f66b9d3c09ea20b6615cc3afe284dd7",
	    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
	    "0000000000000000000000000000000000000000000000000000000000000000",
	};
	for (size_t i = 0; i < 3; i++) {
		record_hash_encode(hexes[i], b64);
		assert_int_equal(strlen(b64), 7 + 43);
		assert_null(strpbrk(b64 + 7, "+/="));
		assert_int_equal(record_hash_decode(b64, hex), 0);
		assert_string_equal(hex, hexes[i]);
	}
}

static void test_record_hash_refuses_others(void **state)
{
	(void)state;
	char hex[65];
	assert_int_equal(record_hash_decode("md5=1B2M2Y8AsgTpgAmY7PhCfg", hex), -EINVAL);
	assert_int_equal(
	    record_hash_decode("sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuF", hex), -EINVAL);
	assert_int_equal(
	    record_hash_decode("sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuF!", hex), -EINVAL);
	assert_int_equal(record_hash_decode("", hex), -EINVAL);
}

static void free_fields(char *f[3], size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(f[i]);
}

static void test_record_rows(void **state)
{
	(void)state;
	char *f[3] = {NULL, NULL, NULL};
	size_t n = record_fields("numpy/__init__.py," EMPTY_RECORD ",0\r\n", f);
	assert_int_equal(n, 3);
	assert_string_equal(f[0], "numpy/__init__.py");
	assert_string_equal(f[1], EMPTY_RECORD);
	assert_string_equal(f[2], "0");
	free_fields(f, n);
	/* RECORD itself and .pyc rows: empty hash and size. */
	n = record_fields("numpy-2.1.0.dist-info/RECORD,,", f);
	assert_int_equal(n, 3);
	assert_string_equal(f[1], "");
	assert_string_equal(f[2], "");
	free_fields(f, n);
	/* A path with a comma and a quote, as Python's csv module writes it. */
	n = record_fields("\"data/a,b \"\"c\"\".txt\",sha256=x,12\n", f);
	assert_int_equal(n, 3);
	assert_string_equal(f[0], "data/a,b \"c\".txt");
	assert_string_equal(f[2], "12");
	free_fields(f, n);
	n = record_fields("lonely", f);
	assert_int_equal(n, 1);
	assert_string_equal(f[0], "lonely");
	free_fields(f, n);
}

static void test_record_row_round_trip(void **state)
{
	(void)state;
	static const char *paths[] = {"../../../bin/tensorboard", "data/a,b \"c\".txt", "x\ry"};
	for (size_t i = 0; i < 3; i++) {
		struct strbuf sb = STRBUF_INIT;
		record_put_row(&sb, paths[i], EMPTY_RECORD, "0");
		assert_true(str_ends_with(sb.buf, ",0\r\n"));
		char *f[3] = {NULL, NULL, NULL};
		size_t n = record_fields(sb.buf, f);
		assert_int_equal(n, 3);
		assert_string_equal(f[0], paths[i]);
		assert_string_equal(f[1], EMPTY_RECORD);
		free_fields(f, n);
		strbuf_release(&sb);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_name_of_a_manylinux_wheel),
	    cmocka_unit_test(test_name_with_build_tag_is_normalised),
	    cmocka_unit_test(test_what_is_not_a_wheel_name),
	    cmocka_unit_test(test_record_hash_both_ways),
	    cmocka_unit_test(test_record_hash_refuses_others),
	    cmocka_unit_test(test_record_rows),
	    cmocka_unit_test(test_record_row_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
