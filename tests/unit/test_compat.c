/*
 * test_compat.c - the knowledge base (data/compat.yaml) and its lints.
 *
 * Loads the real compat.yaml, checks the queries other steps rely on against
 * the facts it cites, then lints every manifest of tests/manifests/guide/
 * (one mistake each: the original setup guide's, a wrong fact's or a check's)
 * and asserts that exactly the expected compat.* diagnostics come out, with
 * code, severity and line:column. The clean manifests (compat-clean.yaml and
 * tests/manifests/clean/) must yield none. Runs with the repository root as
 * the working directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb.h"
#include "kb_int.h"
#include "pep508.h"
#include "error.h"
#include "manifest.h"

#define GUIDE_DIR "tests/manifests/guide"
#define CLEAN_DIR "tests/manifests/clean"

static struct compat *kb;

static int setup(void **state)
{
	struct diags d = {0};

	(void)state;
	unsetenv("TFPROV_COMPAT");
	if (compat_load(compat_default_path(), &kb, &d) != 0) {
		{
			char *text = diags_format(&d, 0);
			fputs(text, stderr);
			free(text);
		}
		diags_release(&d);
		return -1;
	}
	diags_release(&d);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	compat_free(kb);
	return 0;
}

static size_t count_prefix(const struct diags *d, const char *prefix)
{
	size_t n = 0;

	for (size_t i = 0; i < d->n; i++)
		n += strncmp(d->v[i].code, prefix, strlen(prefix)) == 0;
	return n;
}

static void test_default_path(void **state)
{
	(void)state;
	/* From the build tree the source copy wins over the installed one. */
	assert_string_equal(compat_default_path(), TFPROV_SRCDIR "/data/compat.yaml");
	setenv("TFPROV_COMPAT", "/elsewhere/compat.yaml", 1);
	assert_string_equal(compat_default_path(), "/elsewhere/compat.yaml");
	unsetenv("TFPROV_COMPAT");
}

static void test_tables_loaded(void **state)
{
	(void)state;
	assert_int_equal(kb->ntf_linux, 23);
	assert_int_equal(kb->ntf_windows, 12);
	assert_string_equal(kb->windows_gpu_last, "2.10");
	assert_true(kb->ndrivers >= 40);
	assert_true(kb->nmvc >= 3);
	assert_true(kb->nguide >= 14);
	for (size_t i = 0; i < kb->ntf_linux; i++)
		assert_non_null(kb->tf_linux[i].source);
}

static void test_tf_builds(void **state)
{
	const struct compat_tf_build *b;

	(void)state;
	b = compat_tf_build(kb, "2.15.1", 0); /* matched by series */
	assert_non_null(b);
	assert_string_equal(b->cuda, "12.2");
	assert_string_equal(b->cudnn, "8.9");
	assert_string_equal(b->cudnn_min, "8.9.4");
	assert_int_equal(b->npython, 1);
	assert_string_equal(b->python[0].lo, "3.9");
	assert_string_equal(b->python[0].hi, "3.11");
	b = compat_tf_build(kb, "1.15.5", 0);
	assert_non_null(b);
	assert_string_equal(b->cuda, "10.0");
	assert_int_equal(b->npython, 2); /* "2.7, 3.3-3.7" */
	assert_string_equal(b->python[0].lo, "2.7");
	assert_string_equal(b->python[1].hi, "3.7");
	b = compat_tf_build(kb, "2.16.1", 0);
	assert_non_null(b);
	assert_string_equal(b->cuda, "12.3");
	assert_string_equal(b->cudnn_min, "8.9");      /* no compiled-with note: the row */
	assert_null(compat_tf_build(kb, "2.15.0", 1)); /* no native Windows GPU build */
	b = compat_tf_build(kb, "2.10.1", 1);
	assert_non_null(b);
	assert_string_equal(b->cuda, "11.2");
	assert_null(compat_tf_build(kb, "2.99.0", 0));
	assert_null(compat_tf_build(kb, NULL, 0));
}

static void test_driver_minimums(void **state)
{
	(void)state;
	/* 12.3.2 has no row of its own: 12.3 Update 1's. */
	assert_string_equal(compat_cuda_min_driver(kb, "12.3.2", 0), "545.23.08");
	assert_string_equal(compat_cuda_min_driver(kb, "12.3.2", 1), "546.12");
	assert_string_equal(compat_cuda_min_driver(kb, "12.3.0", 0), "545.23.06");
	assert_string_equal(compat_cuda_min_driver(kb, "12.3", 0), "545.23.06");
	assert_string_equal(compat_cuda_min_driver(kb, "12.2.2", 0), "535.104.05");
	assert_string_equal(compat_cuda_min_driver(kb, "11.8.0", 1), "520.06");
	assert_string_equal(compat_cuda_min_driver(kb, "11.1.1", 0), "455.32");
	assert_string_equal(compat_cuda_min_driver(kb, "10.0.130", 0), "410.48");
	assert_string_equal(compat_cuda_min_driver(kb, "10.1.243", 1), "418.96");
	/* CUDA 13 (Linux only in the table). */
	assert_string_equal(compat_cuda_min_driver(kb, "13.0.0", 0), "580.65.06");
	assert_string_equal(compat_cuda_min_driver(kb, "13.0.1", 0), "580.82.07");
	assert_string_equal(compat_cuda_min_driver(kb, "13.0.2", 0), "580.95.05");
	assert_string_equal(compat_cuda_min_driver(kb, "13.1", 0), "590.44.01");
	assert_null(compat_cuda_min_driver(kb, "13.0.2", 1));
	assert_null(compat_cuda_min_driver(kb, "12.7.0", 0)); /* there is no 12.7 */
	assert_null(compat_cuda_min_driver(kb, "9.2.148", 0));
	/* Minor-version compatibility floors per family; none before CUDA 11. */
	assert_string_equal(compat_cuda_compat_driver(kb, "12.3.2", 0), "525.60.13");
	/* 527.41 is the 12.x family floor; 528.33 is 12.0 Update 1's own minimum. */
	assert_string_equal(compat_cuda_compat_driver(kb, "12.3.2", 1), "527.41");
	assert_string_equal(compat_cuda_min_driver(kb, "12.0.1", 1), "528.33");
	assert_string_equal(compat_cuda_compat_driver(kb, "11.2.2", 0), "450.80.02");
	/*
	 * CUDA 11.0 has the 11.x family's floor, not one of its own; it is above
	 * 11.0's own minimum (450.51.06), so it runs nothing below that.
	 */
	assert_string_equal(compat_cuda_family_floor(kb, "11.0.3", 0), "450.80.02");
	assert_string_equal(compat_cuda_family_floor(kb, "11.0.3", 1), "452.39");
	assert_null(compat_cuda_compat_driver(kb, "11.0.3", 0));
	assert_null(compat_cuda_compat_driver(kb, "11.0.3", 1));
	assert_true(compat_cuda_in_family(kb, "11.0.3"));
	assert_false(compat_cuda_in_family(kb, "10.2"));
	assert_string_equal(compat_cuda_compat_driver(kb, "13.0", 0), "580");
	assert_null(compat_cuda_compat_driver(kb, "13.0", 1));
	assert_null(compat_cuda_compat_driver(kb, "10.1.243", 0));
}

static void test_compute_capability(void **state)
{
	const struct compat_tf_kernels *row = NULL;

	(void)state;
	assert_int_equal(compat_cc_parse("8.9"), 89);
	assert_int_equal(compat_cc_parse("10.0"), 100);
	assert_int_equal(compat_cc_parse("8"), -EINVAL);
	assert_int_equal(compat_cc_parse("8.10"), -EINVAL);
	assert_int_equal(compat_cc_parse("x.y"), -EINVAL);
	assert_int_equal(compat_tf_min_cc(kb, "1.15.5"), 35);
	assert_int_equal(compat_tf_min_cc(kb, "2.12.0"), 35);
	assert_int_equal(compat_tf_min_cc(kb, "2.15.1"), 50);
	assert_int_equal(compat_tf_min_cc(kb, "2.18.0"), 60);
	assert_int_equal(compat_tf_min_cc(kb, "2.21.0"), 60);
	/* compute_XY is SASS and PTX for XY: sm_80 SASS runs on 8.9; 9.0 has its own SASS. */
	assert_int_equal(compat_tf_kernels_for(kb, "2.15.1", "8.9", &row), COMPAT_KERNEL_SASS);
	assert_non_null(row);
	assert_int_equal(compat_tf_kernels_for(kb, "2.15.1", "9.0", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.14.0", "9.0", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.15.1", "12.0", NULL), COMPAT_KERNEL_PTX);
	assert_int_equal(compat_tf_kernels_for(kb, "2.15.1", "10.3", NULL), COMPAT_KERNEL_PTX);
	assert_int_equal(compat_tf_kernels_for(kb, "2.15.1", "3.7", NULL), COMPAT_KERNEL_NONE);
	assert_int_equal(compat_tf_kernels_for(kb, "2.12.0", "3.7", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.12.0", "8.0", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.12.0", "8.6", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.4.0", "8.9", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.13.1", "9.0", NULL), COMPAT_KERNEL_PTX);
	assert_int_equal(compat_tf_kernels_for(kb, "2.18.0", "8.9", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.18.0", "9.0", NULL), COMPAT_KERNEL_SASS);
	assert_int_equal(compat_tf_kernels_for(kb, "2.18.0", "5.2", NULL), COMPAT_KERNEL_NONE);
	/* TF 2.3 had no kernels for CC 5.0 (tensorflow/tensorflow#46537). */
	assert_int_equal(compat_tf_kernels_for(kb, "2.3.1", "5.0", NULL), COMPAT_KERNEL_NONE);
	assert_int_equal(compat_tf_kernels_for(kb, "2.3.1", "5.2", NULL), COMPAT_KERNEL_SASS);
	/* Up to 2.2 only the floor is known. */
	assert_int_equal(compat_tf_kernels_for(kb, "1.15.5", "3.0", NULL), COMPAT_KERNEL_NONE);
	assert_int_equal(compat_tf_kernels_for(kb, "1.15.5", "7.5", NULL), COMPAT_KERNEL_UNKNOWN);
}

static void test_specifiers(void **state)
{
	(void)state;
	assert_true(compat_spec_allows(">=1.23.5,<2.0.0", "1.26.4"));
	assert_false(compat_spec_allows(">=1.23.5,<2.0.0", "1.23.0"));
	assert_false(compat_spec_allows(">=1.23.5,<2.0.0", "2.0.0"));
	assert_true(compat_spec_allows("", "0.0.1"));
	/* A pre-release bound sorts before its release. */
	assert_true(compat_spec_allows("<5.0.0dev", "4.25.9"));
	assert_false(compat_spec_allows("<5.0.0dev", "5.0.0"));
	assert_true(compat_spec_allows(">=2.9.0rc0,<2.10.0", "2.9.0"));
	/* ~= keeps all but the last component. */
	assert_true(compat_spec_allows("~=0.3.1", "0.3.2"));
	assert_false(compat_spec_allows("~=0.3.1", "0.4.0"));
	assert_false(compat_spec_allows("~=0.3.1", "0.3.0"));
	assert_true(compat_spec_allows("~=0.2", "0.9"));
	assert_false(compat_spec_allows("~=0.2", "1.0"));
	assert_false(compat_spec_allows("!=4.21.3", "4.21.3"));
	assert_true(compat_spec_allows("==2.15.*", "2.15.1"));
	assert_false(compat_spec_allows("==2.15.*", "2.16.0"));
	assert_false(compat_spec_allows("!=2.15.*", "2.15.0"));
	assert_true(compat_spec_allows(">2.15,<=2.16", "2.16"));
	assert_false(compat_spec_allows(">2.15", "2.15.0"));
	assert_true(compat_spec_valid(">=3.20.3,!=4.21.0,<5.0.0dev"));
	assert_true(compat_spec_valid(""));
	assert_false(compat_spec_valid("1.2"));    /* no operator */
	assert_false(compat_spec_valid(">=1.2,")); /* empty clause */
	assert_false(compat_spec_valid(",>=1.2"));
	assert_false(compat_spec_valid(">=x"));       /* not a version */
	assert_false(compat_spec_valid("~=1"));       /* ~= needs two components */
	assert_false(compat_spec_valid(">=1.*"));     /* wildcards only after == or != */
	assert_false(compat_spec_valid(">=1.2; os")); /* markers are not data here */
	/* PEP 440's grammar: its spellings are valid, junk tails are not pre-releases. */
	assert_true(compat_spec_valid(">=2.9.0rc0,<2.10.0"));
	assert_true(compat_spec_valid(">=1.0a1,<1!2.0.post1.dev3"));
	assert_true(compat_spec_valid(">=1.0-1,<2.0.Preview-2,!=1.5_rev"));
	assert_true(compat_spec_valid("==2.1.0+cu121"));
	assert_true(compat_spec_valid("!=2.15.*,>=v2.14"));
	assert_true(compat_spec_valid("~=2.2.0rc1"));
	assert_true(compat_spec_valid("===2.1-foo"));
	assert_false(compat_spec_valid(">=1.0foo"));   /* not a pre-release label */
	assert_false(compat_spec_valid("<5.0.0junk")); /* accepted as a pre-release before */
	assert_false(compat_spec_valid(">=1.0-"));
	assert_false(compat_spec_valid(">=1..0"));
	assert_false(compat_spec_valid(">=1.0rc1rc2"));
	assert_false(compat_spec_valid(">=2.1.0+cu121")); /* a local label only after == and != */
	assert_false(compat_spec_valid("==2.15.*.1"));
	assert_false(compat_spec_valid("==2.15rc1.*"));
	assert_false(compat_spec_valid("~=1.0+x"));
	assert_false(compat_spec_valid("~=1rc1"));
	assert_false(compat_spec_valid("==1.0+"));
}

/* The pip ranges of each release, as data: the group that applies decides. */
/* PEP 508 requirements and markers, evaluated for a target (pep508.c). */
static void test_pep508(void **state)
{
	struct pep508_env env;
	struct pep508_req r;
	struct why err = {0};
	const char *extras[] = {"and-cuda"};
	(void)state;
	assert_int_equal(pep508_parse("Tensorflow_Intel [and_cuda, x] (>= 2.15 , <2.16) ; "
	                              "platform_system == \"Windows\"",
	                              &r, &err),
	                 0);
	assert_string_equal(r.name, "tensorflow-intel");
	assert_int_equal(r.nextras, 2);
	assert_string_equal(r.extras[0], "and-cuda");
	assert_string_equal(r.spec, ">=2.15,<2.16");
	assert_string_equal(r.marker, "platform_system == \"Windows\"");
	pep508_env_for(&env, 0, "3.10", "3.10.13");
	assert_int_equal(pep508_marker_eval(r.marker, &env, &err), 0);
	pep508_env_for(&env, 1, "3.10", NULL);
	assert_int_equal(pep508_marker_eval(r.marker, &env, &err), 1);
	pep508_req_release(&r);
	assert_int_equal(err.code, 0);
	assert_int_equal(pep508_parse("numpy >=1.2 [", &r, &err), TF_EMANIFEST);
	assert_int_equal(err.code, TF_EMANIFEST);
	assert_string_equal(err.msg, "a version specifier PEP 440 does not know");
	assert_int_equal(pep508_parse("numpy >=1.2,,<2", &r, &err), TF_EMANIFEST);
	assert_int_equal(pep508_parse("numpy [cuda", &r, &err), TF_EMANIFEST);
	assert_string_equal(err.msg, "an unclosed extras list");
	why_clear(&err);
	pep508_env_for(&env, 0, "3.9", "3.9.19");
	/* Versions compare as versions: "3.10" > "3.9", though not as strings. */
	assert_int_equal(pep508_marker_eval("python_version >= '3.10'", &env, &err), 0);
	pep508_env_for(&env, 0, "3.10", "3.10.13");
	assert_int_equal(pep508_marker_eval("python_version >= '3.10'", &env, &err), 1);
	assert_int_equal(pep508_marker_eval("python_full_version < '3.10.14' and "
	                                    "(sys_platform == 'linux' or os_name == 'nt')",
	                                    &env, &err),
	                 1);
	assert_int_equal(pep508_marker_eval("platform_machine != 'x86_64'", &env, &err), 0);
	assert_int_equal(pep508_marker_eval("'linux' in sys_platform", &env, &err), 1);
	assert_int_equal(pep508_marker_eval("extra == 'and-cuda'", &env, &err), 0);
	env.extras = extras;
	env.nextras = 1;
	assert_int_equal(pep508_marker_eval("extra == \"and_cuda\"", &env, &err), 1);
	assert_int_equal(err.code, 0);
	assert_int_equal(pep508_marker_eval("python_versio == '3'", &env, &err), TF_EMANIFEST);
	assert_int_equal(err.code, TF_EMANIFEST);
	assert_string_equal(err.msg, "an environment marker variable PEP 508 does not define");
	assert_int_equal(pep508_marker_eval("python_version >= '3.8' and", &env, &err),
	                 TF_EMANIFEST);
	assert_int_equal(pep508_marker_eval("(python_version >= '3.8'", &env, &err), TF_EMANIFEST);
	assert_string_equal(err.msg, "an unclosed parenthesis");
	why_clear(&err);
}

static void test_pip_requires(void **state)
{
	size_t groups = 0;

	(void)state;
	for (size_t i = 0; i < kb->npip_requires; i++) {
		const struct compat_pip_requires *q = &kb->pip_requires[i];
		assert_non_null(q->source);
		if (strcmp(q->package, "numpy") == 0 && compat_spec_allows(q->tf_spec, "2.13.1"))
			assert_false(compat_spec_allows(q->spec, "1.24.4")); /* <=1.24.3 */
		if (strcmp(q->package, "ml-dtypes") == 0 &&
		    compat_spec_allows(q->tf_spec, "2.15.0"))
			assert_false(compat_spec_allows(q->spec, "0.3.2"));
		if (strcmp(q->package, "ml-dtypes") == 0 &&
		    compat_spec_allows(q->tf_spec, "2.15.1"))
			assert_true(compat_spec_allows(q->spec, "0.3.2"));
		if (strcmp(q->package, "protobuf") == 0 && compat_spec_allows(q->tf_spec, "2.9.0"))
			assert_true(compat_spec_allows(q->spec, "3.20.1")); /* capped from 2.9.1 */
		if (strcmp(q->package, "protobuf") == 0 && compat_spec_allows(q->tf_spec, "2.10.1"))
			assert_false(compat_spec_allows(q->spec, "3.20.1"));
		groups +=
		    strcmp(q->package, "keras") == 0 && compat_spec_allows(q->tf_spec, "2.17.0");
	}
	assert_int_equal(groups, 1); /* keras>=3 from 2.16 */
	assert_true(kb->npip_requires >= 60);
}

static int has(const struct strvec *sv, const char *s)
{
	for (size_t i = 0; i < sv->n; i++)
		if (strcmp(sv->v[i], s) == 0)
			return 1;
	return 0;
}

static void test_sonames(void **state)
{
	struct strvec sv = STRVEC_INIT;

	(void)state;
	assert_int_equal(compat_sonames(kb, 0, "10.0.130", "7.6.5.32", &sv), 6);
	assert_true(has(&sv, "libcudart.so.10.0"));
	assert_true(has(&sv, "libcudnn.so.7"));
	assert_false(has(&sv, "libcudart.so.10.1"));
	strvec_release(&sv);
	/* The longest prefix wins: 10.1 is not 10.0's list. */
	assert_int_equal(compat_sonames(kb, 0, "10.1.243", NULL, &sv), 1);
	assert_string_equal(sv.v[0], "libcudart.so.10.1");
	strvec_release(&sv);
	compat_sonames(kb, 0, "12.3.2", "8.9.7.29", &sv);
	assert_true(has(&sv, "libcudart.so.12"));
	assert_true(has(&sv, "libcufft.so.11"));
	assert_true(has(&sv, "libcudnn.so.8"));
	strvec_release(&sv);
	compat_sonames(kb, 1, "11.2.2", "8.1.1.33", &sv);
	assert_true(has(&sv, "cudart64_110.dll"));
	assert_true(has(&sv, "cudnn64_8.dll"));
	strvec_release(&sv);
	assert_int_equal(compat_sonames(kb, 0, "9.2", "6.0", &sv), 0);
	strvec_release(&sv);
}

/* TF 2.16-2.21: glibc floors, ranges, cuDNN 9 libraries, the pip CUDA wheels. */
static void test_current_rows(void **state)
{
	const struct compat_tf_glibc *row = NULL;
	struct strvec sv = STRVEC_INIT;
	int numpy_220 = 0, keras_220 = 0;

	(void)state;
	assert_string_equal(compat_tf_min_glibc(kb, "2.21.0", &row), "2.27");
	assert_non_null(strstr(row->source, "manylinux_2_27"));
	assert_string_equal(compat_tf_min_glibc(kb, "2.20.0", NULL), "2.17");
	assert_string_equal(compat_tf_min_glibc(kb, "1.15.4", NULL), "2.12");
	assert_null(compat_tf_min_glibc(kb, "2.16.2", &row)); /* no wheel name was read */
	assert_null(row);
	assert_null(compat_tf_min_glibc(kb, NULL, NULL));

	for (size_t i = 0; i < kb->npip_requires; i++) {
		const struct compat_pip_requires *q = &kb->pip_requires[i];
		if (!compat_spec_allows(q->tf_spec, "2.20.0"))
			continue;
		if (strcmp(q->package, "numpy") == 0 && !compat_spec_allows(q->spec, "1.25.2"))
			numpy_220++;
		if (strcmp(q->package, "keras") == 0 && !compat_spec_allows(q->spec, "3.9.0"))
			keras_220++;
		if (strcmp(q->package, "protobuf") == 0)
			assert_true(compat_spec_allows(q->spec, "6.31.1"));
	}
	assert_int_equal(numpy_220, 1);
	assert_int_equal(keras_220, 1);

	compat_sonames(kb, 0, "12.5.1", "9.3.0.75", &sv);
	assert_true(has(&sv, "libcudnn.so.9"));
	assert_true(has(&sv, "libcudart.so.12"));
	strvec_release(&sv);
	for (size_t i = 0; i < kb->nsonames; i++) {
		const struct compat_sonames *so = &kb->sonames[i];
		if (so->os != COMPAT_LINUX || so->cudnn == NULL || strcmp(so->cudnn, "9") != 0)
			continue;
		assert_int_equal(so->ncompanions, 7); /* the cuDNN 9 sub-libraries */
		assert_string_equal(so->companions[0], "libcudnn_graph.so.9");
	}

	assert_int_equal(compat_cuda_wheel_major(kb, "nvidia-cudnn-cu12"), 12);
	assert_int_equal(compat_cuda_wheel_major(kb, "nvidia-cuda-cupti-cu12"), 12);
	assert_int_equal(compat_cuda_wheel_major(kb, "nvidia-cudnn-cu11"), 11);
	assert_int_equal(compat_cuda_wheel_major(kb, "nvidia-cu12"), 0);
	assert_int_equal(compat_cuda_wheel_major(kb, "nvidia-ml-py"), 0);
	assert_int_equal(compat_cuda_wheel_major(kb, "nvidia-cudnn-cu12x"), 0);
	assert_int_equal(compat_cuda_wheel_major(kb, "numpy"), 0);
	assert_true(compat_cuda_wheel_is_runtime(kb, "nvidia-cuda-runtime-cu12"));
	assert_false(compat_cuda_wheel_is_runtime(kb, "nvidia-cuda-nvrtc-cu12"));
	assert_false(compat_cuda_wheel_is_runtime(kb, "nvidia-cuda-runtime"));
	assert_int_equal(kb->cuda_wheels.nsite_libdirs, 1);
	assert_string_equal(kb->cuda_wheels.site_libdirs[0], "nvidia/*/lib");
	/* CUDA 12.5.1's own driver floor, with its source row. */
	assert_string_equal(compat_cuda_min_driver(kb, "12.5.1", 0), "555.42.06");
}

/* ---- lints on the guide manifests ---- */

struct expect {
	const char *file; /* under tests/manifests/guide/ */
	const char *code;
	enum diag_severity sev;
	int line, col;
};

static const struct expect guide[] = {
    {"cuda-12.0-tf-2.15.yaml", "compat.cuda-untested", DIAG_WARNING, 12, 9},
    {"windows-native-tf-2.15.yaml", "compat.windows-native-gpu", DIAG_ERROR, 8, 13},
    {"conda-cudatoolkit-12.3.yaml", "compat.conda-package-discontinued", DIAG_ERROR, 48, 7},
    {"conda-lock-cudatoolkit-12.3.yaml", "compat.conda-package-discontinued", DIAG_ERROR, 50, 5},
    {"conda-cudnn-8.9.4.yaml", "compat.conda-no-such-version", DIAG_ERROR, 47, 7},
    {"numpy-1.23-tf-2.15.yaml", "compat.pip-requirement-conflict", DIAG_ERROR, 56, 5},
    {"tensorflow-gpu-2.15.0.yaml", "compat.pip-package-removed", DIAG_ERROR, 54, 5},
    {"tf-1.15-cuda-10.1.yaml", "compat.cuda-mismatch", DIAG_ERROR, 13, 9},
    {"driver-below-cuda-min.yaml", "compat.driver-below-cuda-min", DIAG_ERROR, 17, 16},
    {"driver-minor-compat.yaml", "compat.driver-minor-compat", DIAG_WARNING, 17, 16},
    {"cudnn-too-old.yaml", "compat.cudnn-too-old", DIAG_ERROR, 12, 10},
    {"python-3.12-tf-2.15.yaml", "compat.python-unsupported", DIAG_ERROR, 13, 11},
    {"gpu-cc-3.7-tf-2.15.yaml", "compat.gpu-no-kernels", DIAG_ERROR, 18, 17},
    {"gpu-cc-8.9-cuda-11.2.yaml", "compat.gpu-newer-than-cuda", DIAG_WARNING, 18, 10},
    {"gpu-cc-9.0-tf-2.12.yaml", "compat.gpu-ptx-jit", DIAG_WARNING, 18, 10},
    {"tf-unknown.yaml", "compat.tf-unknown", DIAG_WARNING, 10, 15},
    {"cuda-11.8-tf-2.15.yaml", "compat.cuda-major-mismatch", DIAG_ERROR, 11, 9},
    {"cudnn-9-tf-2.15.yaml", "compat.cudnn-major-mismatch", DIAG_ERROR, 12, 10},
    {"cuda-12.7-no-such-release.yaml", "compat.cuda-no-such-release", DIAG_ERROR, 11, 9},
    {"pip-tf-mismatch.yaml", "compat.pip-tf-mismatch", DIAG_ERROR, 54, 5},
    /* Facts that were wrong. */
    {"gpu-cc-9.0-tf-2.13.yaml", "compat.gpu-ptx-jit", DIAG_WARNING, 19, 10},
    {"cudnn-8.8-tf-2.15.yaml", "compat.cudnn-too-old", DIAG_ERROR, 13, 10},
    {"driver-cuda-11.0-below-min.yaml", "compat.driver-below-cuda-min", DIAG_ERROR, 18, 16},
    {"driver-wsl2-527.41.yaml", "compat.driver-minor-compat", DIAG_WARNING, 19, 16},
    /* Facts that were missing. */
    {"gpu-cc-10.3-cuda-12.2.yaml", "compat.gpu-newer-than-cuda", DIAG_WARNING, 17, 10},
    {"gpu-cc-11.0-tf-2.15.yaml", "compat.gpu-ptx-jit", DIAG_WARNING, 18, 10},
    {"gpu-cc-12.1-tf-2.15.yaml", "compat.gpu-ptx-jit", DIAG_WARNING, 17, 10},
    {"driver-cuda-13.0.1.yaml", "compat.cuda-major-mismatch", DIAG_ERROR, 14, 9},
    {"driver-cuda-13.0.1.yaml", "compat.driver-minor-compat", DIAG_WARNING, 19, 16},
    {"pip-protobuf-4.21.3-tf-2.12.yaml", "compat.pip-requirement-conflict", DIAG_ERROR, 56, 5},
    {"pip-keras-2-tf-2.16.yaml", "compat.pip-requirement-conflict", DIAG_ERROR, 55, 5},
    {"pip-ml-dtypes-tf-2.15.0.yaml", "compat.pip-requirement-conflict", DIAG_ERROR, 55, 5},
    {"pip-numpy-2-tf-2.18.yaml", "compat.pip-requirement-conflict", DIAG_ERROR, 55, 5},
    /* Checks that were missing. */
    {"declared-cuda-vs-section.yaml", "compat.version-disagrees", DIAG_ERROR, 19, 12},
    {"declared-cuda-vs-redist.yaml", "compat.version-disagrees", DIAG_ERROR, 20, 10},
    {"declared-cudnn-vs-artifact.yaml", "compat.version-disagrees", DIAG_ERROR, 35, 10},
    {"declared-python-vs-lock.yaml", "compat.version-disagrees", DIAG_ERROR, 47, 5},
    {"declared-python-vs-interpreter.yaml", "compat.version-disagrees", DIAG_ERROR, 43, 16},
    {"declared-tf-vs-pin.yaml", "compat.pip-tf-mismatch", DIAG_ERROR, 53, 5},
    {"declared-cuda-vs-runfile.yaml", "compat.version-disagrees", DIAG_ERROR, 19, 10},
    {"declared-cudnn-vs-redist.yaml", "compat.version-disagrees", DIAG_ERROR, 35, 10},
    {"cudnn-legacy-cuda-10.2-tgz.yaml", "compat.cudnn-cuda-build-mismatch", DIAG_ERROR, 34, 10},
    {"cudnn-cuda11-build-cuda-12.yaml", "compat.cudnn-cuda-build-mismatch", DIAG_ERROR, 36, 10},
    {"cudnn-variant-cuda11-cuda-12.yaml", "compat.cudnn-cuda-build-mismatch", DIAG_ERROR, 39, 14},
    {"conda-cudatoolkit-11.8-cuda-12.yaml", "compat.conda-cuda-major-mismatch", DIAG_ERROR, 48, 7},
    {"conda-cuda-version-12-cuda-11.yaml", "compat.conda-cuda-major-mismatch", DIAG_ERROR, 45, 7},
    {"conda-lock-cudatoolkit-11.8-cuda-12.yaml", "compat.conda-cuda-major-mismatch", DIAG_ERROR, 49,
     5},
    {"mixed-precision-tf-1.15.yaml", "compat.mixed-precision-unsupported", DIAG_ERROR, 58, 22},
    {"mixed-precision-cc-6.1.yaml", "compat.mixed-precision-no-speedup", DIAG_WARNING, 60, 22},
    {"gpu-cc-12.5-tf-2.15.yaml", "compat.gpu-cc-newer", DIAG_WARNING, 18, 10},
    /* What the packages' metadata cannot see (issue 20). */
    {"pip-requires-tf-keras-2.15-tf-2.16.yaml", "compat.pip-requires-unsatisfied", DIAG_ERROR, 59,
     5},
    {"pip-requires-missing.yaml", "compat.pip-requires-missing", DIAG_ERROR, 55, 5},
    {"pip-import-clash-tensorflow-cpu.yaml", "compat.pip-import-clash", DIAG_ERROR, 55, 5},
    {"pip-known-bad-numpy-2-tf-2.11.yaml", "compat.pip-known-bad", DIAG_ERROR, 54, 5},
    {"pip-known-bad-h5py-3-tf-1.15.yaml", "compat.pip-known-bad", DIAG_WARNING, 53, 5},
    {"env-allow-growth-1.yaml", "compat.env-value-rejected", DIAG_ERROR, 42, 32},
    {"env-legacy-keras-without-tf-keras.yaml", "compat.env-needs-package", DIAG_ERROR, 43, 26},
    {"yaml-number-python-3.10.yaml", "schema.yaml-number", DIAG_WARNING, 13, 11},
    {"cuda-package-cupy-cuda11x-cuda-12.yaml", "compat.cuda-package-mismatch", DIAG_ERROR, 57, 5},
    {"cuda-archive-nvcc-12.5-cuda-12.2.yaml", "compat.cuda-component-release", DIAG_WARNING, 27,
     12},
    {"conda-cudatoolkit-10.1-cuda-10.0.yaml", "compat.conda-cuda-release-mismatch", DIAG_ERROR, 48,
     5},
    {"cuda-libs-missing-nvjitlink.yaml", "compat.cuda-libs-missing", DIAG_ERROR, 20, 3},
    {"pip-cuda-wheels-missing-nvjitlink.yaml", "compat.cuda-libs-missing", DIAG_ERROR, 29, 3},
    {"env-overrides-derived-cuda.yaml", "compat.env-shadows-stack", DIAG_WARNING, 46, 16},
    {"env-overrides-derived-cuda.yaml", "compat.env-shadows-stack", DIAG_WARNING, 47, 22},
    {"env-overrides-derived-cuda.yaml", "compat.env-shadows-stack", DIAG_WARNING, 48, 16},
    {"env-overrides-derived-cuda.yaml", "compat.env-shadows-stack", DIAG_WARNING, 49, 11},
    {"env-overrides-derived-cuda.yaml", "compat.env-shadows-stack", DIAG_WARNING, 50, 20},
    {"env-overrides-wheel-cuda.yaml", "compat.env-shadows-stack", DIAG_WARNING, 22, 22},
    {"env-overrides-wheel-cuda.yaml", "compat.env-shadows-stack", DIAG_WARNING, 23, 16},
    {"pip-and-cuda-curand-outside-tf-2.19.yaml", "compat.and-cuda-range", DIAG_ERROR, 49, 5},
    {"pip-and-cuda-nccl-outside-tf-2.17.yaml", "compat.and-cuda-range", DIAG_ERROR, 55, 5},
    {"pip-cuda-wheels-mixed-releases-tf-2.20.yaml", "compat.cuda-wheels-mixed", DIAG_WARNING, 35,
     5},
    {"pip-min-glibc-below-tf-2.19-wheel.yaml", "compat.min-glibc-below-wheels", DIAG_ERROR, 31, 14},
    /* Companion packages (issue 33, item 1): outside their release line's TF window, ended. */
    {"companion-text-2.15-tf-2.16.yaml", "compat.companion-window", DIAG_ERROR, 59, 5},
    {"companion-io-0.37-tf-2.17.yaml", "compat.companion-window", DIAG_ERROR, 60, 5},
    {"companion-probability-0.25-tf-2.16.yaml", "compat.companion-window", DIAG_ERROR, 58, 5},
    {"companion-addons-0.22-tf-2.16.yaml", "compat.companion-window", DIAG_WARNING, 59, 5},
    {"companion-addons-0.22-tf-2.16.yaml", "compat.companion-ended", DIAG_WARNING, 59, 5},
    {"companion-keras-nlp-ended.yaml", "compat.companion-ended", DIAG_WARNING, 58, 5},
};

/* Parses and lints; the manifest itself must be valid (no schema errors). */
static void lint_file(const char *path, struct diags *d)
{
	struct manifest *m = NULL;
	int rc = manifest_load(path, &m, d);

	if (rc != 0 || d->errors != 0) {
		{
			char *text = diags_format(d, 0);
			fputs(text, stderr);
			free(text);
		}
		fail_msg("%s does not parse cleanly", path);
	}
	compat_lint(kb, m, d);
	manifest_free(m);
}

/* The expectation of file that g meets, or NULL. */
static const struct expect *expected(const char *file, const struct diag *g)
{
	for (size_t i = 0; i < ARRAY_SIZE(guide); i++) {
		const struct expect *e = &guide[i];
		if (strcmp(e->file, file) == 0 && strcmp(e->code, g->code) == 0 &&
		    e->sev == g->sev && e->line == g->pos.line && e->col == g->pos.col)
			return e;
	}
	return NULL;
}

/* How many rows of the table a file has; 0 when an earlier row already named it. */
static size_t rows_of(size_t i)
{
	size_t n = 0;

	for (size_t j = 0; j < ARRAY_SIZE(guide); j++) {
		if (strcmp(guide[j].file, guide[i].file) != 0)
			continue;
		if (j < i)
			return 0;
		n++;
	}
	return n;
}

/* Each guide file yields exactly its expected compat.* diagnostics, each with a hint. */
static void test_guide_manifests(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(guide); i++) {
		size_t want = rows_of(i), got = 0;
		struct diags d = {0};
		char *path;

		if (want == 0)
			continue;
		path = xasprintf("%s/%s", GUIDE_DIR, guide[i].file);
		lint_file(path, &d);
		for (size_t j = 0; j < d.n; j++) {
			/* The YAML-number warning belongs to the parser, with its own guide case. */
			if (strncmp(d.v[j].code, "compat.", 7) != 0 &&
			    strcmp(d.v[j].code, "schema.yaml-number") != 0)
				continue;
			if (expected(guide[i].file, &d.v[j]) == NULL) {
				{
					char *text = diags_format(&d, 0);
					fputs(text, stderr);
					free(text);
				}
				fail_msg("%s: unexpected %s at %d:%d", path, d.v[j].code,
				         d.v[j].pos.line, d.v[j].pos.col);
			}
			assert_string_equal(d.v[j].file, path);
			assert_non_null(d.v[j].hint);
			got++;
		}
		if (got != want) {
			{
				char *text = diags_format(&d, 0);
				fputs(text, stderr);
				free(text);
			}
			fail_msg("%s: %zu compat diagnostics, expected %zu", path, got, want);
		}
		diags_release(&d);
		free(path);
	}
}

/* Every file of the guide directory has an expectation above. */
static void test_guide_dir_covered(void **state)
{
	DIR *dir = opendir(GUIDE_DIR);
	struct dirent *de;
	size_t files = 0;

	(void)state;
	assert_non_null(dir);
	while ((de = readdir(dir)) != NULL) {
		int found = 0;
		if (!str_ends_with(de->d_name, ".yaml"))
			continue;
		files++;
		for (size_t i = 0; i < ARRAY_SIZE(guide); i++)
			found |= strcmp(guide[i].file, de->d_name) == 0;
		if (!found)
			fail_msg("%s/%s has no expectation in test_compat.c", GUIDE_DIR,
			         de->d_name);
	}
	closedir(dir);
	for (size_t i = 0; i < ARRAY_SIZE(guide); i++)
		files -= rows_of(i) > 0;
	assert_int_equal(files, 0); /* and no row names a file that is not there */
}

/* compat.yaml's guide_mistakes name a lint and a test manifest: they agree. */
static void test_kb_guide_table(void **state)
{
	size_t tested = 0;

	(void)state;
	for (size_t i = 0; i < kb->nguide; i++) {
		const struct compat_guide_mistake *g = &kb->guide[i];
		struct diags d = {0};

		if (g->test == NULL)
			continue;
		tested++;
		lint_file(g->test, &d);
		if (!diags_has(&d, g->lint)) {
			{
				char *text = diags_format(&d, 0);
				fputs(text, stderr);
				free(text);
			}
			fail_msg("guide mistake %s: %s does not yield %s", g->id, g->test, g->lint);
		}
		diags_release(&d);
	}
	assert_true(tested >= 11);
}

static void assert_clean(const char *path)
{
	struct diags d = {0};

	lint_file(path, &d);
	if (count_prefix(&d, "compat.") != 0) {
		{
			char *text = diags_format(&d, 0);
			fputs(text, stderr);
			free(text);
		}
		fail_msg("%s has compat diagnostics", path);
	}
	diags_release(&d);
}

/*
 * Correct stacks: compat-clean.yaml and tests/manifests/clean/ (among them the
 * A100 + TF 2.12, H100 + TF 2.15 and cuDNN 8.9.1 + TF 2.15 stacks that wrong
 * facts used to flag) yield no compat diagnostic at all.
 */
static void test_clean_manifests(void **state)
{
	DIR *dir = opendir(CLEAN_DIR);
	struct dirent *de;
	size_t files = 0;

	(void)state;
	assert_clean("tests/manifests/compat-clean.yaml");
	assert_non_null(dir);
	while ((de = readdir(dir)) != NULL) {
		char *path;
		if (!str_ends_with(de->d_name, ".yaml"))
			continue;
		path = xasprintf("%s/%s", CLEAN_DIR, de->d_name);
		assert_clean(path);
		free(path);
		files++;
	}
	closedir(dir);
	assert_true(files >= 3);
}

/* The shipped stacks may carry compat warnings, never compat errors. */
static void test_shipped_manifests(void **state)
{
	static const char *const files[] = {
	    "manifests/stable-2.21.yaml", "manifests/stable-2.20.yaml",
	    "manifests/stable-2.15.yaml", "manifests/stable-2.12.yaml",
	    "manifests/stable-2.9.yaml",  "manifests/legacy-1.15.yaml"};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		struct manifest *m = NULL;
		struct diags d = {0};

		if (access(files[i], R_OK) != 0)
			continue;
		if (manifest_load(files[i], &m, &d) == 0) {
			compat_lint(kb, m, &d);
			for (size_t j = 0; j < d.n; j++)
				if (d.v[j].sev == DIAG_ERROR &&
				    strncmp(d.v[j].code, "compat.", 7) == 0) {
					{
						char *text = diags_format(&d, 0);
						fputs(text, stderr);
						free(text);
					}
					fail_msg("%s: compat error %s", files[i], d.v[j].code);
				}
		}
		manifest_free(m);
		diags_release(&d);
	}
}

/* The lints read positions from the model, whoever filled it. */
static void test_hand_built_model(void **state)
{
	struct manifest m;
	struct pip_req req;
	struct diags d = {0};

	(void)state;
	memset(&m, 0, sizeof(m));
	memset(&req, 0, sizeof(req));
	m.path = "hand.yaml";
	m.stack.platform = PLATFORM_WSL2;
	m.versions.tensorflow = (struct mstr){"2.15.1", {3, 15}, 1};
	m.versions.cuda = (struct mstr){"12.2.2", {4, 9}, 1};
	m.versions.python = (struct mstr){"3.8", {5, 11}, 1};
	m.cudnn.version = (struct mstr){"8.9.7.29", {20, 12}, 1};
	/* WSL2 runs the Windows driver: 528.33 is below 12.2.2's 537.13. */
	m.driver.min_version = (struct mstr){"528.33", {7, 16}, 1};
	m.python.channel = (struct mstr){"conda-forge", {30, 12}, 1};
	m.python.specs[0] = (struct mstr){"conda-forge::cudnn==8.9.4.25", {31, 7}, 1};
	m.python.specs[1] = (struct mstr){"cudnn>=8.9", {32, 7}, 1};
	m.python.specs[2] = (struct mstr){"cudatoolkit=11.8", {33, 7}, 1};
	m.python.nspecs = 3;
	req.pos = (struct pos){40, 5};
	req.name = "numpy";
	req.raw_name = "NumPy";
	req.version = "2.0.0";
	m.pip.reqs = &req;
	m.pip.nreqs = 1;

	compat_lint(kb, &m, &d);
	diags_sort(&d);
	assert_int_equal(count_prefix(&d, "compat."), 5);
	assert_string_equal(d.v[0].code, "compat.python-unsupported");
	assert_int_equal(d.v[0].pos.line, 5);
	assert_int_equal(d.v[0].pos.col, 11);
	assert_string_equal(d.v[1].code, "compat.driver-minor-compat");
	assert_int_equal(d.v[1].pos.line, 7);
	assert_string_equal(d.v[2].code, "compat.conda-no-such-version");
	assert_int_equal(d.v[2].pos.line, 31);
	/* cudatoolkit=11.8 exists, but not in a CUDA 12 stack. */
	assert_string_equal(d.v[3].code, "compat.conda-cuda-major-mismatch");
	assert_int_equal(d.v[3].pos.line, 33);
	assert_string_equal(d.v[4].code, "compat.pip-requirement-conflict");
	assert_int_equal(d.v[4].pos.line, 40);
	assert_int_equal(d.v[4].pos.col, 5);
	assert_string_equal(d.v[4].file, "hand.yaml");
	diags_release(&d);

	/* No TF in versions: the pip pin names it. tensorflow-gpu 1.15 is no mistake. */
	memset(&m, 0, sizeof(m));
	memset(&req, 0, sizeof(req));
	m.path = "hand.yaml";
	req.pos = (struct pos){9, 5};
	req.name = "tensorflow";
	req.raw_name = "tensorflow";
	req.version = "2.99.0";
	m.pip.reqs = &req;
	m.pip.nreqs = 1;
	compat_lint(kb, &m, &d);
	assert_int_equal(d.n, 1);
	assert_string_equal(d.v[0].code, "compat.tf-unknown");
	assert_int_equal(d.v[0].pos.line, 9);
	diags_release(&d);
	req.name = "tensorflow-gpu";
	req.version = "1.15.5";
	compat_lint(kb, &m, &d);
	assert_int_equal(d.n, 0);
	req.version = "2.10.0";
	compat_lint(kb, &m, &d);
	assert_true(diags_has(&d, "compat.pip-package-deprecated"));
	assert_int_equal(d.errors, 0);
	diags_release(&d);

	/*
	 * GPUs: Jetson Thor under its CUDA 12 number 10.1 is known (the 11.0 row);
	 * 3.9 is newer than every Kepler but TF 2.15 has no PTX for it; 13.0 is of
	 * no known family; a 10.0 gets compute_90 PTX.
	 */
	memset(&m, 0, sizeof(m));
	m.path = "hand.yaml";
	m.versions.tensorflow = (struct mstr){"2.15.1", {3, 15}, 1};
	m.driver.gpus[0] = (struct mstr){"10.1", {10, 1}, 1};
	m.driver.gpus[1] = (struct mstr){"3.9", {11, 1}, 1};
	m.driver.gpus[2] = (struct mstr){"13.0", {12, 1}, 1};
	m.driver.ngpus = 3;
	compat_lint(kb, &m, &d);
	diags_sort(&d);
	assert_int_equal(d.n, 3);
	assert_string_equal(d.v[0].code, "compat.gpu-ptx-jit");
	assert_int_equal(d.v[0].pos.line, 10);
	assert_non_null(strstr(d.v[0].msg, "(Blackwell)"));
	assert_string_equal(d.v[1].code, "compat.gpu-no-kernels");
	assert_int_equal(d.v[1].pos.line, 11);
	assert_string_equal(d.v[2].code, "compat.gpu-cc-unknown");
	assert_int_equal(d.v[2].pos.line, 12);
	diags_release(&d);
	/* Without a known TF build a newer family member is still named as such. */
	m.versions.tensorflow = (struct mstr){"2.99.0", {3, 15}, 1};
	m.driver.gpus[0] = (struct mstr){"10.7", {10, 1}, 1};
	m.driver.ngpus = 1;
	compat_lint(kb, &m, &d);
	assert_true(diags_has(&d, "compat.gpu-cc-newer"));
	assert_true(diags_has(&d, "compat.tf-unknown"));
	assert_int_equal(d.n, 2);
	diags_release(&d);
}

/* companion_packages: the table as loaded, the release line of a pin, lock's constraint. */
static void test_companions(void **state)
{
	const struct compat_companion *text, *io, *gcs, *tfa, *df, *tfp, *nlp;
	const struct compat_companion_release *r;
	char *c;

	(void)state;
	text = compat_companion(kb, "tensorflow-text");
	io = compat_companion(kb, "tensorflow-io");
	gcs = compat_companion(kb, "tensorflow-io-gcs-filesystem");
	tfa = compat_companion(kb, "tensorflow-addons");
	df = compat_companion(kb, "tensorflow-decision-forests");
	tfp = compat_companion(kb, "tensorflow-probability");
	nlp = compat_companion(kb, "keras-nlp");
	assert_non_null(text);
	assert_non_null(io);
	assert_non_null(gcs);
	assert_non_null(tfa);
	assert_non_null(df);
	assert_non_null(tfp);
	assert_non_null(nlp);
	assert_non_null(compat_companion(kb, "tf-keras"));
	assert_null(compat_companion(kb, "numpy"));
	assert_int_equal(text->coupling, COMPAT_COUPLING_ABI);
	assert_int_equal(gcs->coupling, COMPAT_COUPLING_NONE);
	assert_int_equal(tfa->coupling, COMPAT_COUPLING_TESTED);
	assert_int_equal(tfp->coupling, COMPAT_COUPLING_IMPORT);
	assert_string_equal(tfa->ended, "2024-05");
	assert_non_null(tfa->replaced_by);
	assert_null(io->ended); /* no public end of life: not invented */
	assert_null(text->ended);
	assert_non_null(nlp->ended);
	assert_int_equal(nlp->nreleases, 0);
	for (size_t i = 0; i < kb->ncompanion_pkgs; i++)
		for (size_t j = 0; j < kb->companion_pkgs[i].nreleases; j++)
			assert_true(strstr(kb->companion_pkgs[i].releases[j].source, "https://") !=
			            NULL);

	/* The release line: the longest matching prefix; "2.16" is not "2.1". */
	r = compat_companion_line(text, "2.16.1");
	assert_non_null(r);
	assert_string_equal(r->release, "2.16");
	assert_string_equal(compat_companion_line(text, "2.1.4")->release, "2.1");
	assert_null(compat_companion_line(text, "3.0.0"));
	assert_string_equal(compat_companion_line(df, "1.10.1")->release, "1.10.1");
	assert_string_equal(compat_companion_line(df, "1.10.0")->release, "1.10.0");
	assert_string_equal(compat_companion_line(df, "1.8.1")->release, "1.8");
	assert_string_equal(compat_companion_line(df, "0.1.5")->release, "0.1");
	assert_string_equal(compat_companion_line(df, "0.1.9")->release, "0.1.9");
	assert_null(compat_companion_line(df, "0.10.0")); /* "0.1" is not a prefix of it */
	assert_string_equal(compat_companion_line(tfa, "0.17.1")->release, "0.17.1");
	assert_null(compat_companion_line(tfa, "0.17.0")); /* not in the matrix */

	/* The constraint lock adds: the newest line made for the TF, only when outside. */
	c = compat_companion_constraint(kb, "tensorflow-text", "2.15.0", "2.16.1");
	assert_non_null(c);
	assert_string_equal(c, "tensorflow-text==2.16.*");
	free(c);
	assert_null(compat_companion_constraint(kb, "tensorflow-text", "2.16.1", "2.16.2"));
	c = compat_companion_constraint(kb, "tensorflow-io", "0.37.1", "2.15.1");
	assert_string_equal(c, "tensorflow-io==0.36.*");
	free(c);
	/* No line for TF 2.17: nothing to constrain to (validate reports it). */
	assert_null(compat_companion_constraint(kb, "tensorflow-io", "0.37.1", "2.17.0"));
	c = compat_companion_constraint(kb, "tensorflow-decision-forests", "1.9.2", "2.16.1");
	assert_string_equal(c, "tensorflow-decision-forests==1.9.1.*");
	free(c);
	c = compat_companion_constraint(kb, "tensorflow-probability", "0.25.0", "2.15.1");
	assert_string_equal(c, "tensorflow-probability==0.23.*");
	free(c);
	assert_null(compat_companion_constraint(kb, "tensorflow-probability", "0.25.0", "2.21.0"));
	/* Recorded, not judged: TF requires tensorflow-io-gcs-filesystem>=0.23.1 only. */
	assert_null(
	    compat_companion_constraint(kb, "tensorflow-io-gcs-filesystem", "0.37.1", "2.15.1"));
	assert_null(compat_companion_constraint(kb, "numpy", "2.0.0", "2.15.1"));
}

/* The check on a hand-built lock: versions.tensorflow when TF is not pinned by pip. */
static void test_companion_lint(void **state)
{
	struct pip_req reqs[3] = {0};
	struct manifest m = {0};
	struct diags d = {0};

	(void)state;
	m.path = "hand.yaml";
	m.versions.tensorflow.s = "2.18.0";
	m.versions.tensorflow.set = 1;
	m.versions.tensorflow.pos = (struct pos){9, 15};
	reqs[0].name = "tf-keras";
	reqs[0].version = "2.17.0";
	reqs[0].pos = (struct pos){20, 5};
	reqs[1].name = "tensorflow-text";
	reqs[1].version = "2.18.1";
	reqs[1].pos = (struct pos){22, 5};
	reqs[2].name = "tensorflow-addons";
	reqs[2].version = "0.23.0"; /* not in the matrix: only its end is said */
	reqs[2].pos = (struct pos){24, 5};
	m.pip.reqs = reqs;
	m.pip.nreqs = 3;
	compat_lint_companions(kb, &m, &d);
	assert_int_equal(d.n, 2);
	assert_string_equal(d.v[0].code, "compat.companion-window");
	assert_int_equal(d.v[0].sev, DIAG_ERROR);
	assert_int_equal(d.v[0].pos.line, 20);
	assert_int_equal(d.v[0].pos.col, 5);
	assert_non_null(strstr(d.v[0].msg, "tf-keras 2.17.0 is built for TensorFlow >=2.17,<2.18, "
	                                   "but the stack's TensorFlow is 2.18.0 (line 9)"));
	assert_non_null(strstr(d.v[0].hint, "take tf-keras==2.18.*"));
	assert_non_null(strstr(d.v[0].hint, "https://github.com/keras-team/tf-keras/blob/"));
	assert_string_equal(d.v[1].code, "compat.companion-ended");
	assert_int_equal(d.v[1].sev, DIAG_WARNING);
	assert_int_equal(d.v[1].pos.line, 24);
	assert_non_null(strstr(d.v[1].msg, "tensorflow-addons 0.23.0 has ended (2024-05)"));
	assert_non_null(strstr(d.v[1].hint, "replaced by Keras and TF core"));
	diags_release(&d);

	/* Without any TF version only the ended project is said. */
	m.versions.tensorflow.set = 0;
	m.versions.tensorflow.s = NULL;
	compat_lint_companions(kb, &m, &d);
	assert_int_equal(d.n, 1);
	assert_string_equal(d.v[0].code, "compat.companion-ended");
	diags_release(&d);
}

static int load_text(const char *text, struct diags *d, struct compat **out);

/* A malformed companion_packages table is refused at its nodes, like any other table. */
static void test_companion_kb_errors(void **state)
{
	static const char broken[] =
	    "companion_packages:\n"
	    "  - {name: a, coupling: loose, why: w, source: s, releases: [{release: \"1.0\", tf: "
	    "\">=2.1\", source: s}]}\n"
	    "  - {name: b, coupling: abi, why: w, source: s}\n"
	    "  - {name: c, coupling: abi, why: w, source: s, releases: [{release: \"1.0\", tf: "
	    "\"2.1\", source: s}]}\n"
	    "  - {name: C, coupling: tested, why: w, source: s, ended: {date: \"2024-05\"}}\n";
	struct compat *bad = NULL;
	struct diags d = {0};
	char *text = NULL, *all;
	size_t len = 0;
	const char *from, *to;
	int seen[4] = {0};

	(void)state;
	assert_int_equal(read_file_at(AT_FDCWD, compat_default_path(), 1u << 22, &text, &len), 0);
	from = strstr(text, "\ncompanion_packages:\n");
	to = strstr(text,
	            "\n# -----------------------------------------------------------------------"
	            "----\n# 7.");
	assert_non_null(from);
	assert_non_null(to);
	all = xasprintf("%.*s\n%s%s", (int)(from - text), text, broken, to);
	assert_int_equal(load_text(all, &d, &bad), TF_EFAIL);
	assert_null(bad);
	for (size_t i = 0; i < d.n; i++) {
		assert_string_equal(d.v[i].code, "compat.kb-invalid");
		seen[0] |=
		    strstr(d.v[i].msg, "coupling must be none, tested, import or abi") != NULL;
		seen[1] |= strstr(d.v[i].msg, "has releases, or has ended") != NULL;
		seen[2] |= strstr(d.v[i].msg, "must be a specifier") != NULL;
		seen[3] |= strstr(d.v[i].msg, "'c' is listed twice") != NULL;
	}
	for (int k = 0; k < 4; k++)
		if (!seen[k]) {
			char *out = diags_format(&d, 0);
			fputs(out, stderr);
			free(out);
			fail_msg("companion table error %d not reported", k);
		}
	assert_true(diags_has(&d, "compat.kb-invalid"));
	diags_release(&d);
	free(all);
	free(text);
}

/* ---- errors in compat.yaml are diagnostics too ---- */

static int load_text(const char *text, struct diags *d, struct compat **out)
{
	char path[] = "/tmp/tfprov-compat-XXXXXX";
	int fd = mkstemp(path);
	int rc;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	rc = compat_load(path, out, d);
	unlink(path);
	return rc;
}

static void test_kb_errors(void **state)
{
	struct compat *bad = NULL;
	struct diags d = {0};

	(void)state;
	assert_int_equal(compat_load("/nonexistent/compat.yaml", &bad, &d), TF_EIO);
	assert_null(bad);
	assert_true(diags_has(&d, "compat.kb-unreadable"));
	diags_release(&d);

	assert_int_equal(load_text("schema: 2\n", &d, &bad), TF_EFAIL);
	assert_null(bad);
	assert_int_equal(d.v[0].pos.line, 1);
	assert_int_equal(d.v[0].pos.col, 9);
	diags_release(&d);

	assert_int_equal(load_text("schema: 1\nsources: {}\n  bad: [\n", &d, &bad), TF_EFAIL);
	assert_true(diags_has(&d, "compat.kb-invalid"));
	diags_release(&d);

	/* A malformed Python range is one diagnostic, at its node, and no overflow. */
	assert_int_equal(
	    load_text("schema: 1\n"
	              "tensorflow:\n"
	              "  linux_gpu:\n"
	              "    source: TF-SRC\n"
	              "    builds:\n"
	              "      - {name: t, version: 2.15.0, python: \",,,,,,\", cudnn: \"8.9\", "
	              "cuda: \"12.2\"}\n",
	              &d, &bad),
	    TF_EFAIL);
	{
		size_t python = 0;
		for (size_t i = 0; i < d.n; i++)
			if (strstr(d.v[i].msg, "python must read like")) {
				python++;
				assert_int_equal(d.v[i].pos.line, 6);
				assert_int_equal(d.v[i].pos.col, 44);
			}
		assert_int_equal(python, 1);
	}
	diags_release(&d);

	/* A wheel floor row without its glibc, and a non-version, are found where they are. */
	assert_int_equal(load_text("schema: 1\n"
	                           "tensorflow:\n"
	                           "  linux_wheels:\n"
	                           "    source: PEP-600\n"
	                           "    rows:\n"
	                           "      - {tf_from: \"2.21\", tag: t, source: s}\n"
	                           "      - {tf_from: \"2.20\", glibc: new, tag: t, source: s}\n",
	                           &d, &bad),
	                 TF_EFAIL);
	{
		int missing = 0, notver = 0;
		for (size_t i = 0; i < d.n; i++) {
			if (strstr(d.v[i].msg, "missing key 'glibc'") && d.v[i].pos.line == 6)
				missing++;
			if (strstr(d.v[i].msg, "'glibc' must be a dotted version") &&
			    d.v[i].pos.line == 7)
				notver++;
		}
		assert_int_equal(missing, 1);
		assert_int_equal(notver, 1);
	}
	diags_release(&d);

	/*
	 * pip.requires: a range that is no specifier; cuda_wheels without its runtime;
	 * the old pip.known_bad table (now rows of pip.caps) is an unknown key.
	 */
	assert_int_equal(load_text("schema: 1\n"
	                           "pip:\n"
	                           "  requires:\n"
	                           "    - {tensorflow: \"==2.9.0\", source: s,\n"
	                           "       packages: {h5py: \"three\"}}\n"
	                           "  cuda_wheels: {prefix: nvidia-, major_tag: -cu, cudnn: x,\n"
	                           "                site_libdirs: [a], source: s}\n"
	                           "  known_bad: []\n",
	                           &d, &bad),
	                 TF_EFAIL);
	{
		int spec = 0, runtime = 0, old = 0;
		for (size_t i = 0; i < d.n; i++) {
			if (strstr(d.v[i].msg, "range must be a specifier") && d.v[i].pos.line == 5)
				spec++;
			if (strstr(d.v[i].msg, "missing key 'runtime'") && d.v[i].pos.line == 6)
				runtime++;
			if (strstr(d.v[i].msg, "unknown key 'known_bad'") && d.v[i].pos.line == 8)
				old++;
		}
		assert_int_equal(spec, 1);
		assert_int_equal(runtime, 1);
		assert_int_equal(old, 1);
	}
	diags_release(&d);

	/* A typo and a non-version in an otherwise real table are found where they are. */
	assert_int_equal(
	    load_text("schema: 1\n"
	              "sources: {}\n"
	              "tensorflow:\n"
	              "  linux_gpu:\n"
	              "    source: TF-SRC\n"
	              "    builds:\n"
	              "      - {name: t, version: 2.15.0, python: \"3.9-3.11\", cudnn: \"8.9\",\n"
	              "         cuda: twelve, cudn_min: 8.9.4}\n",
	              &d, &bad),
	    TF_EFAIL);
	assert_null(bad);
	{
		int typo = 0, version = 0;
		for (size_t i = 0; i < d.n; i++) {
			if (strstr(d.v[i].msg, "unknown key 'cudn_min'") && d.v[i].pos.line == 8 &&
			    d.v[i].pos.col == 24)
				typo = 1;
			if (strstr(d.v[i].msg, "'cuda' must be a dotted version") &&
			    d.v[i].pos.line == 8 && d.v[i].pos.col == 16)
				version = 1;
		}
		if (!typo || !version) {
			{
				char *text = diags_format(&d, 0);
				fputs(text, stderr);
				free(text);
			}
			fail_msg("compat.yaml errors not positioned");
		}
	}
	diags_release(&d);

	/* pip requirement groups: a bad specifier, a duplicate, a list where a map goes. */
	assert_int_equal(
	    load_text("schema: 1\n"
	              "pip:\n"
	              "  requires:\n"
	              "    - tensorflow: \"2.15\"\n"
	              "      source: x\n"
	              "      packages: {numpy: \"<2\", numpy: \"<3\", wrapt: \"1.15\"}\n"
	              "    - {tensorflow: \">=2.16\", source: x, packages: [keras]}\n",
	              &d, &bad),
	    TF_EFAIL);
	assert_null(bad);
	{
		int spec_tf = 0, dup = 0, spec_pkg = 0, map = 0;
		for (size_t i = 0; i < d.n; i++) {
			const struct diag *g = &d.v[i];
			spec_tf |= strstr(g->msg, "tensorflow must be a specifier") &&
			           g->pos.line == 4 && g->pos.col == 19;
			dup |= strstr(g->msg, "duplicate key 'numpy'") && g->pos.line == 6 &&
			       g->pos.col == 31;
			spec_pkg |=
			    strstr(g->msg, "not '1.15'") && g->pos.line == 6 && g->pos.col == 51;
			map |= strstr(g->msg, "'packages' must be a mapping") && g->pos.line == 7;
		}
		if (!spec_tf || !dup || !spec_pkg || !map) {
			{
				char *text = diags_format(&d, 0);
				fputs(text, stderr);
				free(text);
			}
			fail_msg("pip requires errors not positioned");
		}
	}
	diags_release(&d);

	/* A renamed compute capability names both numbers. */
	assert_int_equal(load_text("schema: 1\n"
	                           "gpus:\n"
	                           "  compute_capabilities:\n"
	                           "    - {cc: \"11.0\", arch: B, formerly: \"10.1\", source: x}\n"
	                           "    - {cc: \"11.1\", arch: B, formerly: \"10\", renamed_in: "
	                           "\"13.0\", source: x}\n",
	                           &d, &bad),
	                 TF_EFAIL);
	assert_true(diags_has(&d, "compat.kb-invalid"));
	{
		int together = 0, form = 0;
		for (size_t i = 0; i < d.n; i++) {
			together |= strstr(d.v[i].msg, "formerly and renamed_in go together") &&
			            d.v[i].pos.line == 4;
			form |=
			    strstr(d.v[i].msg, "formerly must read like") && d.v[i].pos.line == 5;
		}
		if (!together || !form) {
			{
				char *text = diags_format(&d, 0);
				fputs(text, stderr);
				free(text);
			}
			fail_msg("compute capability rename errors not found");
		}
	}
	diags_release(&d);
}

/*
 * The one GPU / driver rule every command applies (compat_gpu.c): the verdicts
 * validate turns into diagnostics, plan into a step failure or warning, doctor
 * into findings, init into log lines.
 */
static void expect_gpu(const char *tf, const char *cuda, const char *cc, const char *code,
                       enum diag_severity sev)
{
	struct compat_verdict v;

	assert_int_equal(compat_judge_gpu(kb, tf, cuda, cc, &v), 0);
	if (code == NULL) {
		if (v.code != NULL)
			fail_msg("%s/%s/%s: unexpected %s: %s", tf, cuda, cc, v.code, v.msg);
	} else {
		if (v.code == NULL || strcmp(v.code, code) != 0)
			fail_msg("%s/%s/%s: want %s, got %s", tf, cuda, cc, code,
			         v.code ? v.code : "nothing");
		assert_int_equal(v.sev, sev);
		assert_non_null(v.msg);
		assert_non_null(v.hint);
	}
	compat_verdict_release(&v);
}

static void test_one_gpu_rule(void **state)
{
	struct compat_verdict v;
	const char *min = NULL, *floor = NULL;
	const char *ampere[] = {"8.6"}, *kepler_ada[] = {"3.7", "8.9"};

	(void)state;
	/* TF 1.15 with CUDA 10.0 on an RTX 3090: CUDA 10.0 predates Ampere (CUDA 11.1). */
	expect_gpu("1.15.4", "10.0.130", "8.6", "compat.gpu-newer-than-cuda", DIAG_WARNING);
	expect_gpu("1.15.4", "10.0.130", "8.9", "compat.gpu-newer-than-cuda", DIAG_WARNING);
	expect_gpu("2.15.1", "12.3.2", "3.7", "compat.gpu-no-kernels", DIAG_ERROR);
	expect_gpu("2.9.0", "11.2.2", "8.6", NULL, DIAG_ERROR);
	expect_gpu("2.20.0", "12.5.1", "8.9", NULL, DIAG_ERROR);
	expect_gpu(NULL, NULL, "9.9", "compat.gpu-cc-newer", DIAG_WARNING);
	expect_gpu(NULL, NULL, "4.0", "compat.gpu-cc-unknown", DIAG_WARNING);
	assert_int_equal(compat_judge_gpu(kb, "2.15.1", NULL, "x.y", &v), TF_EUSAGE);
	compat_verdict_release(&v);
	/* A driver: own minimum, minor-version compatibility, too old. */
	assert_int_equal(compat_judge_driver(kb, "12.5.1", "555.42.06", 0, &min, &floor),
	                 COMPAT_DRIVER_OK);
	assert_string_equal(min, "555.42.06");
	assert_int_equal(compat_judge_driver(kb, "12.5.1", "545.23.08", 0, NULL, &floor),
	                 COMPAT_DRIVER_MINOR_COMPAT);
	assert_string_equal(floor, "525.60.13");
	assert_int_equal(compat_judge_driver(kb, "12.5.1", "470.256.02", 0, NULL, NULL),
	                 COMPAT_DRIVER_TOO_OLD);
	assert_int_equal(compat_judge_driver(kb, "10.0.130", "400.1", 0, NULL, NULL),
	                 COMPAT_DRIVER_TOO_OLD);
	assert_int_equal(compat_judge_driver(kb, NULL, "470.256.02", 0, NULL, NULL),
	                 COMPAT_DRIVER_UNKNOWN);
	/* A stack fits a machine when both are clean. */
	assert_string_equal(compat_cuda_release(kb, "11.2"), "11.2.2");
	assert_true(compat_stack_fits(kb, "2.9.0", "11.2.2", 0, "470.256.02", ampere, 1));
	assert_false(compat_stack_fits(kb, "1.15.4", "10.0.130", 0, "470.256.02", ampere, 1));
	assert_false(compat_stack_fits(kb, "2.12.0", "11.8.0", 0, "470.256.02", ampere, 1));
	assert_false(compat_stack_fits(kb, "2.9.0", "11.2.2", 0, "560.35.03", kepler_ada, 2));
	/* init --cuda-from pip: 2.21's tested wheels are 2.20's [and-cuda] lower bounds. */
	const struct compat_and_cuda *a = compat_and_cuda_tested(kb, "2.21.0");
	assert_non_null(a);
	assert_string_equal(a->tensorflow, "2.20.0");
	char buf[64];
	for (size_t i = 0; i < a->npins; i++)
		if (strcmp(a->pins[i].name, "nvidia-cuda-runtime-cu12") == 0)
			assert_string_equal(
			    compat_and_cuda_tested_version(&a->pins[i], buf, sizeof(buf)),
			    "12.5.82");
	assert_null(compat_and_cuda_tested(kb, "2.13.0"));
	/* A release's own row, else the newest recorded release of its minor. */
	assert_string_equal(compat_and_cuda_tested(kb, "2.17.0")->tensorflow, "2.17.0");
	assert_string_equal(compat_and_cuda_tested(kb, "2.17.1")->tensorflow, "2.17.0");
	assert_string_equal(compat_and_cuda_tested(kb, "2.15.0")->tensorflow, "2.15.0");
	assert_string_equal(compat_and_cuda_tested(kb, "2.14.1")->tensorflow, "2.14.0");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default_path),
	    cmocka_unit_test(test_tables_loaded),
	    cmocka_unit_test(test_tf_builds),
	    cmocka_unit_test(test_driver_minimums),
	    cmocka_unit_test(test_compute_capability),
	    cmocka_unit_test(test_sonames),
	    cmocka_unit_test(test_specifiers),
	    cmocka_unit_test(test_pip_requires),
	    cmocka_unit_test(test_pep508),
	    cmocka_unit_test(test_guide_manifests),
	    cmocka_unit_test(test_guide_dir_covered),
	    cmocka_unit_test(test_kb_guide_table),
	    cmocka_unit_test(test_clean_manifests),
	    cmocka_unit_test(test_shipped_manifests),
	    cmocka_unit_test(test_hand_built_model),
	    cmocka_unit_test(test_kb_errors),
	    cmocka_unit_test(test_current_rows),
	    cmocka_unit_test(test_one_gpu_rule),
	    cmocka_unit_test(test_companions),
	    cmocka_unit_test(test_companion_lint),
	    cmocka_unit_test(test_companion_kb_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
