/*
 * test_cabundle.c - the CA bundle HTTPS downloads trust without --ca-bundle
 * (engine/artifact/private/cabundle.h): --ca-bundle wins, then $SSL_CERT_FILE, then the first
 * distribution path that is a regular file. Which distribution path a real
 * root has is covered by tests/system/test_release.py (Debian's path in a
 * Debian 11 root, RHEL's in a Debian 13 root).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cabundle.h"

static void explicit_path_wins(void **state)
{
	(void)state;
	setenv("SSL_CERT_FILE", "/env/bundle.pem", 1);
	assert_string_equal(ca_bundle_for("/given.pem"), "/given.pem");
	unsetenv("SSL_CERT_FILE");
	assert_string_equal(ca_bundle_for("/given.pem"), "/given.pem");
}

static void ssl_cert_file_wins_over_the_distribution_paths(void **state)
{
	(void)state;
	/* Used as given, even when missing: the download then fails naming it. */
	setenv("SSL_CERT_FILE", "/nonexistent/bundle.pem", 1);
	assert_string_equal(ca_bundle_for(NULL), "/nonexistent/bundle.pem");
	unsetenv("SSL_CERT_FILE");
}

static void empty_ssl_cert_file_is_unset(void **state)
{
	struct stat st;
	const char *got;

	(void)state;
	setenv("SSL_CERT_FILE", "", 1);
	got = ca_bundle_for(NULL);
	unsetenv("SSL_CERT_FILE");
	/* This machine (Debian, ca-certificates installed by install-deps) has
	 * Debian's bundle, the first path looked at. */
	if (stat("/etc/ssl/certs/ca-certificates.crt", &st) == 0) {
		assert_non_null(got);
		assert_string_equal(got, "/etc/ssl/certs/ca-certificates.crt");
	} else if (got != NULL) {
		assert_int_equal(stat(got, &st), 0);
		assert_true(S_ISREG(st.st_mode));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(explicit_path_wins),
	    cmocka_unit_test(ssl_cert_file_wins_over_the_distribution_paths),
	    cmocka_unit_test(empty_ssl_cert_file_is_unset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
