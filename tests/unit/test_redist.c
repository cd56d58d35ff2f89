/* Redist resolution on NVIDIA's real manifests (committed under manifests/data). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "artifact.h"

#define DIR       "manifests/data/nvidia-redist/"
#define CUDA_URL  "https://developer.download.nvidia.com/compute/cuda/redist/redistrib_12.3.2.json"
#define CUDNN_URL "https://developer.download.nvidia.com/compute/cudnn/redist/redistrib_8.6.0.json"

static void test_cuda_components(void **state)
{
	const char *comps[] = {"cuda_cudart", "libcublas"};
	struct redist_artifact *a = NULL;
	size_t n = 0;
	struct why err = {0};
	int r = redist_resolve(DIR "cuda-redistrib_12.3.2.json", CUDA_URL, "linux-x86_64", NULL,
	                       comps, 2, &a, &n, &err);
	assert_int_equal(r, 0);
	assert_int_equal(n, 2);
	assert_string_equal(a[0].component, "cuda_cudart");
	assert_string_equal(a[0].version, "12.3.101");
	assert_string_equal(a[0].url, "https://developer.download.nvidia.com/compute/cuda/redist/"
	                              "cuda_cudart/linux-x86_64/"
	                              "cuda_cudart-linux-x86_64-12.3.101-archive.tar.xz");
	assert_string_equal(a[0].sha256,
	                    "e37d478d1e7a10490d55fb87a5ef379a18c648f3010e1d3687c4298ddc3e9e19");
	assert_int_equal(a[0].size, 1088388);
	assert_int_equal(a[0].strip, 1);
	assert_string_equal(a[1].component, "libcublas");
	assert_true(strstr(a[1].relative_path, "libcublas/linux-x86_64/") == a[1].relative_path);
	redist_artifacts_free(a, n);
}

static void test_cudnn_nested_variant(void **state)
{
	const char *comps[] = {"cudnn"};
	struct redist_artifact *a = NULL;
	size_t n = 0;
	struct why err = {0};
	int r = redist_resolve(DIR "cudnn-redistrib_8.6.0.json", CUDNN_URL, "linux-x86_64",
	                       "cuda11", comps, 1, &a, &n, &err);
	assert_int_equal(r, 0);
	assert_int_equal(n, 1);
	assert_string_equal(a[0].version, "8.6.0.163");
	assert_string_equal(a[0].url, "https://developer.download.nvidia.com/compute/cudnn/redist/"
	                              "cudnn/linux-x86_64/"
	                              "cudnn-linux-x86_64-8.6.0.163_cuda11-archive.tar.xz");
	assert_string_equal(a[0].sha256,
	                    "bbc396df47294c657edc09c600674d608cb1bfc80b82dcf4547060c21711159e");
	assert_int_equal(a[0].size, 864470696);
	redist_artifacts_free(a, n);

	/* Two variants and none named: an error that lists them. */
	r = redist_resolve(DIR "cudnn-redistrib_8.6.0.json", CUDNN_URL, "linux-x86_64", NULL, comps,
	                   1, &a, &n, &err);
	assert_int_equal(r, TF_EMANIFEST);
	assert_non_null(strstr(err.msg, "cuda10"));
	assert_non_null(strstr(err.msg, "cuda11"));
	why_clear(&err);

	r = redist_resolve(DIR "cudnn-redistrib_8.6.0.json", CUDNN_URL, "linux-x86_64", "cuda12",
	                   comps, 1, &a, &n, &err);
	assert_int_equal(r, TF_EMANIFEST);
	assert_non_null(strstr(err.msg, "no variant 'cuda12'"));
	why_clear(&err);
}

static void test_cudnn_flat_entries(void **state)
{
	const char *comps[] = {"cudnn"};
	struct redist_artifact *a = NULL;
	size_t n = 0;
	struct why err = {0};
	int r = redist_resolve(DIR "cudnn-redistrib_8.9.4.25.json",
	                       "https://developer.download.nvidia.com/compute/cudnn/redist/"
	                       "redistrib_8.9.4.25.json",
	                       "linux-x86_64", "cuda12", comps, 1, &a, &n, &err);
	assert_int_equal(r, 0);
	assert_int_equal(n, 1);
	assert_string_equal(a[0].sha256,
	                    "82d04906c0d6828561bbddc68f8b18cf0a334ef1162f6eff7bc88dc3313e15d1");
	assert_int_equal(a[0].size, 887509908);
	assert_non_null(strstr(a[0].url, "/compute/cudnn/redist/cudnn/linux-x86_64/"
	                                 "cudnn-linux-x86_64-8.9.4.25_cuda12-archive.tar.xz"));
	redist_artifacts_free(a, n);

	/* The flat 8.9.4.25 archive is built for CUDA 12 only. */
	r = redist_resolve(DIR "cudnn-redistrib_8.9.4.25.json", NULL, "linux-x86_64", "cuda11",
	                   comps, 1, &a, &n, &err);
	assert_int_equal(r, TF_EMANIFEST);
	assert_non_null(strstr(err.msg, "cuda11"));
	why_clear(&err);
}

static void test_errors_name_choices(void **state)
{
	const char *comps[] = {"cuda_cudartt"};
	struct redist_artifact *a = NULL;
	size_t n = 0;
	struct why err = {0};
	int r = redist_resolve(DIR "cuda-redistrib_12.3.2.json", CUDA_URL, "linux-x86_64", NULL,
	                       comps, 1, &a, &n, &err);
	assert_int_equal(r, TF_EMANIFEST);
	assert_non_null(strstr(err.msg, "did you mean 'cuda_cudart'"));
	why_clear(&err);

	const char *c2[] = {"nvidia_fs"};
	r = redist_resolve(DIR "cuda-redistrib_12.3.2.json", CUDA_URL, "windows-x86_64", NULL, c2,
	                   1, &a, &n, &err);
	assert_int_equal(r, TF_EMANIFEST);
	assert_non_null(strstr(err.msg, "no platform 'windows-x86_64'"));
	why_clear(&err);

	r = redist_resolve(DIR "nonexistent.json", NULL, "linux-x86_64", NULL, comps, 1, &a, &n,
	                   &err);
	assert_int_equal(r, TF_EIO);
	why_clear(&err);
}

static void test_all_components(void **state)
{
	struct redist_artifact *a = NULL;
	size_t n = 0;
	struct why err = {0};
	int r = redist_resolve(DIR "cuda-redistrib_11.8.0.json", NULL, "linux-x86_64", NULL, NULL,
	                       0, &a, &n, &err);
	assert_int_equal(r, 0);
	assert_true(n > 20);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(strlen(a[i].sha256), 64);
		assert_true(a[i].size > 0);
		/* No json_url: URLs are relative to the JSON's directory. */
		assert_true(strncmp(a[i].url, DIR, strlen(DIR)) == 0);
	}
	redist_artifacts_free(a, n);
}

/* A pinned JSON whose relative_path escapes in disguise is refused, whatever the disguise. */
static void test_relative_path_escapes_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {"%2e%2e/%2e%2e/etc/hostname",
	                                  "../../etc/hostname",
	                                  "a/./b.tar.xz",
	                                  "a//b.tar.xz",
	                                  "a\\\\..\\\\b" /* JSON for a\\..\\b */,
	                                  "x.tar.xz?y=/../z",
	                                  "/etc/hostname",
	                                  "a/"};
	const char *comps[] = {"evil"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char path[] = "/tmp/tfprov-redist-XXXXXX";
		int fd = mkstemp(path);
		assert_true(fd >= 0);
		FILE *f = fdopen(fd, "w");
		fprintf(f,
		        "{\"evil\": {\"version\": \"1\", \"linux-x86_64\": {\"relative_path\": "
		        "\"%s\", \"sha256\": \"%064d\", \"size\": \"10\"}}}",
		        bad[i], 0);
		fclose(f);
		struct redist_artifact *a = NULL;
		size_t n = 0;
		struct why err = {0};
		int r = redist_resolve(path, "file:///srv/redistrib_1.json", "linux-x86_64", NULL,
		                       comps, 1, &a, &n, &err);
		unlink(path);
		assert_int_equal(r, TF_EMANIFEST);
		assert_non_null(strstr(err.msg, "bad relative_path"));
		why_clear(&err);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cuda_components),
	    cmocka_unit_test(test_cudnn_nested_variant),
	    cmocka_unit_test(test_cudnn_flat_entries),
	    cmocka_unit_test(test_errors_name_choices),
	    cmocka_unit_test(test_all_components),
	    cmocka_unit_test(test_relative_path_escapes_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
