/*
 * test_version.c - version_cmp and friends, on the versions tfprov really
 * compares: driver floors from NVIDIA's table (2 or 3 components, zero-padded
 * fields), CUDA and cuDNN labels, TF releases.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "version.h"

static int sign(int x)
{
	return (x > 0) - (x < 0);
}

static void test_numeric_not_lexical(void **state)
{
	(void)state;
	/* A string compare gets both of these wrong. */
	assert_int_equal(sign(version_cmp("535.104.05", "535.86.09")), 1);
	assert_int_equal(sign(version_cmp("10.0", "9.2")), 1);
	assert_int_equal(sign(version_cmp("2.9", "2.15.1")), -1);
	assert_int_equal(sign(version_cmp("545.23.06", "545.23.08")), -1);
	assert_int_equal(sign(version_cmp("12.3.2", "12.3.2")), 0);
}

static void test_missing_components_are_zero(void **state)
{
	(void)state;
	assert_int_equal(version_cmp("455.32", "455.32.0"), 0);
	assert_int_equal(sign(version_cmp("455.32", "455.32.1")), -1);
	/* 570.26 (2 components) against 560.35.05 (3): major decides. */
	assert_int_equal(sign(version_cmp("570.26", "560.35.05")), 1);
	assert_int_equal(sign(version_cmp("12", "11.8.0")), 1);
}

static void test_leading_zeros_and_big_numbers(void **state)
{
	(void)state;
	assert_int_equal(version_cmp("535.104.05", "535.104.5"), 0);
	assert_int_equal(version_cmp("1.007", "1.7"), 0);
	assert_int_equal(sign(version_cmp("1.0", "1.00000000000000000000001")), -1);
	/* Longer than any integer type: still ordered correctly. */
	assert_int_equal(
	    sign(version_cmp("1.99999999999999999999999", "1.100000000000000000000000")), -1);
}

static void test_prerelease_tail(void **state)
{
	(void)state;
	assert_int_equal(sign(version_cmp("2.15.0rc1", "2.15.0")), -1);
	assert_int_equal(sign(version_cmp("2.15.0rc1", "2.15.0rc2")), -1);
	assert_int_equal(sign(version_cmp("2.15.1rc1", "2.15.0")), 1);
}

static void test_null_and_empty(void **state)
{
	(void)state;
	assert_int_equal(version_cmp(NULL, NULL), 0);
	assert_int_equal(version_cmp("", NULL), 0);
	assert_int_equal(sign(version_cmp(NULL, "0")), -1);
	assert_int_equal(sign(version_cmp("0", "")), 1);
}

static void test_cmp_n_and_prefix(void **state)
{
	(void)state;
	assert_int_equal(version_cmp_n("12.3.2", "12.3", 2), 0);
	assert_int_equal(version_cmp_n("12.3.2", "12.4.0", 1), 0);
	assert_int_equal(sign(version_cmp_n("12.3.2", "12.4.0", 2)), -1);
	assert_true(version_has_prefix("12.3.2", "12.3"));
	assert_true(version_has_prefix("12.3.2", "12"));
	assert_true(version_has_prefix("8.9.7.29", "8.9.7.29"));
	assert_false(version_has_prefix("12.30", "12.3"));
	assert_false(version_has_prefix("12", "12.3"));
	assert_false(version_has_prefix("11.8.0", "12"));
}

static void test_valid_and_component(void **state)
{
	(void)state;
	assert_true(version_valid("535.104.05"));
	assert_true(version_valid("12"));
	assert_false(version_valid(""));
	assert_false(version_valid(NULL));
	assert_false(version_valid("12."));
	assert_false(version_valid(".12"));
	assert_false(version_valid("12..3"));
	assert_false(version_valid("12.3a"));
	assert_int_equal(version_component("535.104.05", 0), 535);
	assert_int_equal(version_component("535.104.05", 1), 104);
	assert_int_equal(version_component("535.104.05", 2), 5);
	assert_int_equal(version_component("535.104.05", 3), 0);
	assert_int_equal(version_component("2.15.0rc1", 2), -1);
	assert_int_equal(version_component("1.99999999999999999999999", 1), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_numeric_not_lexical),
	    cmocka_unit_test(test_missing_components_are_zero),
	    cmocka_unit_test(test_leading_zeros_and_big_numbers),
	    cmocka_unit_test(test_prerelease_tail),
	    cmocka_unit_test(test_null_and_empty),
	    cmocka_unit_test(test_cmp_n_and_prefix),
	    cmocka_unit_test(test_valid_and_component),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
