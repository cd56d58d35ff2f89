/*
 * test_error.c - the one error space (engine/base/error.h): every TF_E* code maps
 * to the exit code DESIGN.md and README.md document (a public contract the
 * system tests also check end to end), a -errno is reported as the system
 * error it is with exit 1, and tf_err_from_errno() is the one errno mapper.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "error.h"

static void test_exit_codes_are_the_documented_ones(void **state)
{
	(void)state;
	assert_int_equal(tf_exit_code(0), 0);
	assert_int_equal(tf_exit_code(TF_EFAIL), 1);
	assert_int_equal(tf_exit_code(TF_EIO), 1);
	assert_int_equal(tf_exit_code(TF_ENOSPC), 1);
	assert_int_equal(tf_exit_code(TF_ECHANGES), 2);
	assert_int_equal(tf_exit_code(TF_EMANIFEST), 3);
	assert_int_equal(tf_exit_code(TF_ELOCKED), 4);
	assert_int_equal(tf_exit_code(TF_EINTEGRITY), 5);
	assert_int_equal(tf_exit_code(TF_EUNSAFE), 5);
	assert_int_equal(tf_exit_code(TF_EPRECOND), 6);
	assert_int_equal(tf_exit_code(TF_EREBOOT), 7);
	assert_int_equal(tf_exit_code(TF_EVERIFY), 8);
	assert_int_equal(tf_exit_code(TF_EUSAGE), 64);
	assert_int_equal(tf_exit_code(TF_EINTR), 130);
}

static void test_errno_is_a_system_error_with_exit_1(void **state)
{
	(void)state;
	assert_int_equal(tf_exit_code(-ENOENT), 1);
	assert_string_equal(tf_strerror(-ENOENT), strerror(ENOENT));
	/* Nothing positive is a code: a stray status is an error, not an exit code. */
	assert_int_equal(tf_exit_code(2), 1);
	assert_string_equal(tf_strerror(2), "unknown error");
	assert_string_equal(tf_strerror(TF_ECHANGES), "changes pending");
}

static void test_the_one_errno_mapper(void **state)
{
	(void)state;
	assert_int_equal(tf_err_from_errno(-ENOSPC), TF_ENOSPC);
	assert_int_equal(tf_err_from_errno(-EDQUOT), TF_ENOSPC);
	assert_int_equal(tf_err_from_errno(-EINTR), TF_EINTR);
	assert_int_equal(tf_err_from_errno(-EIO), TF_EIO);
	assert_int_equal(tf_err_from_errno(-EACCES), TF_EIO);
	/* A code that is already tfprov's, and success, pass through. */
	assert_int_equal(tf_err_from_errno(TF_EINTEGRITY), TF_EINTEGRITY);
	assert_int_equal(tf_err_from_errno(0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exit_codes_are_the_documented_ones),
	    cmocka_unit_test(test_errno_is_a_system_error_with_exit_1),
	    cmocka_unit_test(test_the_one_errno_mapper),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
