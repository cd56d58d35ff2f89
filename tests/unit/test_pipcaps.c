/*
 * test_pipcaps.c - the pip.caps section of the knowledge base (pipcaps.c).
 *
 * Loads the real data/compat.yaml: the setuptools<82 cap for TensorBoard before
 * 2.21 and the h5py<3 cap for TensorFlow 1.x (a warning in validate) must be
 * there with their facts and sources, and must judge version sets the way each
 * cap says: what `tfprov lock` re-resolves on. A malformed caps section is
 * refused with a positioned error.
 * Runs with the repository root as the working directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb.h"

struct pins {
	const char *tb, *st, *tf, *h5py;
};

static const char *lookup(const char *name, void *arg)
{
	const struct pins *p = arg;
	if (strcmp(name, "tensorboard") == 0)
		return p->tb;
	if (strcmp(name, "setuptools") == 0)
		return p->st;
	if (strcmp(name, "tensorflow") == 0)
		return p->tf;
	if (strcmp(name, "h5py") == 0)
		return p->h5py;
	return NULL;
}

/* Loads the shipped knowledge base's caps; the row that caps package must be there. */
static const struct pip_cap *shipped_cap(const char *package, struct pip_cap **caps, size_t *n)
{
	struct diags d = {0};
	const struct pip_cap *c = NULL;
	unsetenv("TFPROV_COMPAT");
	assert_int_equal(pip_caps_load(compat_default_path(), caps, n, &d), 0);
	assert_int_equal(d.n, 0);
	diags_release(&d);
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*caps)[i].package, package) == 0)
			c = &(*caps)[i];
	assert_non_null(c);
	return c;
}

static void test_setuptools_cap_from_kb(void **state)
{
	struct pip_cap *caps = NULL;
	size_t n = 0;
	(void)state;
	const struct pip_cap *st = shipped_cap("setuptools", &caps, &n);
	assert_string_equal(st->below, "82");
	assert_string_equal(st->when, "tensorboard");
	assert_string_equal(st->when_below, "2.21");
	assert_non_null(strstr(st->fact, "pkg_resources"));
	assert_non_null(strstr(st->source, "pypa/setuptools"));

	struct pins bad = {"2.15.2", "82.0.0", NULL, NULL}, ok = {"2.15.2", "81.0.0", NULL, NULL},
	            new_tb = {"2.21.0", "82.0", NULL, NULL}, no_st = {"2.12.3", NULL, NULL, NULL};
	assert_ptr_equal(pip_caps_broken(caps, n, lookup, &bad, NULL), st);
	assert_null(pip_caps_broken(caps, n, lookup, &ok, NULL));
	assert_null(pip_caps_broken(caps, n, lookup, &new_tb, NULL));
	/* TensorBoard 2.20 still imports pkg_resources: the cap holds. */
	struct pins tb220 = {"2.20.0", "82.0.1", NULL, NULL};
	assert_ptr_equal(pip_caps_broken(caps, n, lookup, &tb220, NULL), st);
	assert_null(pip_caps_broken(caps, n, lookup, &no_st, NULL));
	pip_caps_free(caps, n);
}

/* The row that was pip.known_bad: h5py 3 with TF 1.x is a cap, reported as a warning. */
static void test_h5py_cap_for_tf1_from_kb(void **state)
{
	struct pip_cap *caps = NULL;
	size_t n = 0;
	(void)state;
	const struct pip_cap *h5 = shipped_cap("h5py", &caps, &n);
	assert_string_equal(h5->below, "3");
	assert_string_equal(h5->when, "tensorflow");
	assert_string_equal(h5->when_below, "2");
	assert_non_null(h5->severity);
	assert_string_equal(h5->severity, "warning");
	assert_non_null(strstr(h5->fact, "decode"));
	assert_non_null(strstr(h5->source, "tensorflow/tensorflow#44467"));

	/* legacy-1.15's pins: h5py 3.2.1 with TF 1.15.4 breaks it; lock pins h5py<3. */
	struct pins legacy = {NULL, NULL, "1.15.4", "3.2.1"};
	assert_ptr_equal(pip_caps_broken(caps, n, lookup, &legacy, NULL), h5);
	/* Boundaries: h5py 3 exactly is capped; 2.10.0 is below the cap; TF 2.0.0 is free. */
	struct pins three = {NULL, NULL, "1.15.4", "3"}, fix = {NULL, NULL, "1.15.4", "2.10.0"},
	            tf2 = {NULL, NULL, "2.0.0", "3.2.1"}, no_h5 = {NULL, NULL, "1.15.4", NULL};
	assert_ptr_equal(pip_caps_broken(caps, n, lookup, &three, NULL), h5);
	assert_null(pip_caps_broken(caps, n, lookup, &fix, NULL));
	assert_null(pip_caps_broken(caps, n, lookup, &tf2, NULL));
	assert_null(pip_caps_broken(caps, n, lookup, &no_h5, NULL));
	pip_caps_free(caps, n);
}

static void test_malformed_caps_refused(void **state)
{
	char path[] = "/tmp/tfprov-pipcaps-XXXXXX";
	int fd = mkstemp(path);
	(void)state;
	assert_true(fd >= 0);
	const char *y = "pip:\n  caps:\n    - package: setuptools\n      below: eighty-two\n"
	                "      when: tensorboard\n      when_below: \"2.16\"\n"
	                "      fact: x\n      source: y\n";
	assert_int_equal(write(fd, y, strlen(y)), (ssize_t)strlen(y));
	close(fd);
	struct pip_cap *caps = NULL;
	size_t n = 0;
	struct diags d = {0};
	assert_int_not_equal(pip_caps_load(path, &caps, &n, &d), 0);
	assert_int_equal(n, 0);
	assert_int_equal(d.errors, 1);
	assert_int_equal(d.v[0].pos.line, 4);
	assert_non_null(strstr(d.v[0].msg, "below"));
	diags_release(&d);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_setuptools_cap_from_kb),
	    cmocka_unit_test(test_h5py_cap_for_tf1_from_kb),
	    cmocka_unit_test(test_malformed_caps_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
