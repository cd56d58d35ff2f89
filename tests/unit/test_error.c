/*
 * test_error.c - the one error space (engine/base/error.h): every TF_E* code maps
 * to the exit code DESIGN.md and README.md document (a public contract the
 * system tests also check end to end), a -errno is reported as the system
 * error it is with exit 1, tf_err_from_errno() is the one errno mapper, and
 * struct why is the one carrier of a failure's words.
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

/* The one message carrier: code and words together, the words replaced,
 * kept first, prefixed, moved, and a NULL carrier accepted everywhere. */
static void test_the_one_message_carrier(void **state)
{
	(void)state;
	struct why w = {0}, v = {0};
	assert_string_equal(why_text(&w), "success");
	assert_int_equal(why_code(&w, TF_EIO), TF_EIO);
	assert_null(w.msg);
	assert_string_equal(why_text(&w), "input/output error");
	assert_int_equal(why_fail(&w, TF_EINTEGRITY, "%s: bad %d", "x", 5), TF_EINTEGRITY);
	assert_int_equal(w.code, TF_EINTEGRITY);
	assert_string_equal(why_text(&w), "x: bad 5");
	/* why_first keeps the first failure; why_code keeps a code already there. */
	assert_int_equal(why_first(&w, TF_EIO, "later"), TF_EIO);
	assert_string_equal(why_text(&w), "x: bad 5");
	assert_int_equal(why_code(&w, TF_EIO), TF_EIO);
	assert_int_equal(w.code, TF_EINTEGRITY);
	/* why_fail replaces, and may quote what it replaces. */
	why_fail(&w, w.code, "%s; and more", why_text(&w));
	assert_string_equal(why_text(&w), "x: bad 5; and more");
	why_prefix(&w, "%s", "archive.tar");
	assert_string_equal(why_text(&w), "archive.tar: x: bad 5; and more");
	why_move(&v, &w);
	assert_int_equal(w.code, 0);
	assert_null(w.msg);
	assert_int_equal(v.code, TF_EINTEGRITY);
	assert_string_equal(why_text(&v), "archive.tar: x: bad 5; and more");
	why_clear(&v);
	assert_int_equal(v.code, 0);
	/* A code alone gets the code's message under a prefix; an empty why none. */
	why_prefix(&v, "ctx");
	assert_null(v.msg);
	why_code(&v, TF_ENOSPC);
	why_prefix(&v, "ctx");
	assert_string_equal(why_text(&v), "ctx: no space left on device");
	why_clear(&v);
	/* Step words without a code: why_code fills the code, the words stay. */
	why_fail(&v, 0, "words");
	why_code(&v, TF_EFAIL);
	assert_int_equal(v.code, TF_EFAIL);
	assert_string_equal(why_text(&v), "words");
	why_clear(&v);
	/* NULL: the caller did not want the words; the code still comes back. */
	assert_int_equal(why_fail(NULL, TF_EIO, "lost"), TF_EIO);
	assert_int_equal(why_first(NULL, TF_EIO, "lost"), TF_EIO);
	assert_int_equal(why_code(NULL, TF_EIO), TF_EIO);
	why_prefix(NULL, "x");
	why_clear(NULL);
	assert_string_equal(why_text(NULL), "success");
	why_fail(&v, TF_EIO, "dropped");
	why_move(NULL, &v);
	assert_null(v.msg);
	why_move(&v, NULL);
	assert_int_equal(v.code, 0);
}

static int first_of(struct why *w, const char *who, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = why_vfirst_of(w, who, code, fmt, ap);
	va_end(ap);
	return rc;
}

/* The first failure of a writer or installer, said with the file it works on. */
static void test_the_first_failure_names_its_file(void **state)
{
	(void)state;
	struct why w = {0};
	assert_int_equal(first_of(&w, "a.whl", TF_EUNSAFE, "bad name %s", "../x"), TF_EUNSAFE);
	assert_string_equal(why_text(&w), "a.whl: bad name ../x");
	assert_int_equal(first_of(&w, "b.whl", TF_EIO, "later"), TF_EIO);
	assert_int_equal(w.code, TF_EUNSAFE);
	assert_string_equal(why_text(&w), "a.whl: bad name ../x");
	why_clear(&w);
	assert_int_equal(first_of(NULL, "c.whl", TF_EIO, "lost"), TF_EIO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exit_codes_are_the_documented_ones),
	    cmocka_unit_test(test_errno_is_a_system_error_with_exit_1),
	    cmocka_unit_test(test_the_one_errno_mapper),
	    cmocka_unit_test(test_the_one_message_carrier),
	    cmocka_unit_test(test_the_first_failure_names_its_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
