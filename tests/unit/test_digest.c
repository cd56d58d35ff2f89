/* SHA-256 streaming (known vectors, chunk boundaries) and cache/URL helpers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "artifact.h"
#include "digest.h"

static void test_vectors(void **state)
{
	char hex[65];
	sha256_buf("", 0, hex);
	assert_string_equal(hex,
	                    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	sha256_buf("abc", 3, hex);
	assert_string_equal(hex,
	                    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_streaming_equals_one_shot(void **state)
{
	size_t n = 3 * DIGEST_READ_SIZE + 12345;
	unsigned char *buf = malloc(n);
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)(i * 131 + (i >> 9));
	char one[65], two[65], file[65];
	sha256_buf(buf, n, one);
	struct sha256 s;
	sha256_init(&s);
	for (size_t off = 0; off < n; off += 7777)
		sha256_update(&s, buf + off, off + 7777 < n ? 7777 : n - off);
	assert_int_equal(s.bytes, n);
	sha256_final(&s, two);
	assert_string_equal(one, two);

	char path[] = "/tmp/tfprov-digest-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
	close(fd);
	int64_t size = 0;
	assert_int_equal(sha256_file(path, file, &size), 0);
	assert_string_equal(one, file);
	assert_int_equal(size, (int64_t)n);
	unlink(path);
	assert_true(sha256_file(path, file, NULL) < 0);
	free(buf);
}

static void test_reset_restarts(void **state)
{
	char a[65], b[65];
	struct sha256 s;
	sha256_init(&s);
	sha256_update(&s, "garbage", 7);
	sha256_reset(&s);
	sha256_update(&s, "abc", 3);
	sha256_final(&s, a);
	sha256_buf("abc", 3, b);
	assert_string_equal(a, b);
	sha256_release(&s); /* idempotent after final */
}

static void test_url_helpers(void **state)
{
	char *s = url_basename("https://h/x/y/cudnn-8.tar.xz?sig=1#f");
	assert_string_equal(s, "cudnn-8.tar.xz");
	free(s);
	s = url_basename("https://h/");
	assert_string_equal(s, "h");
	free(s);
	s = url_host("https://user:pw@mirror.example:8443/a/b");
	assert_string_equal(s, "mirror.example:8443");
	free(s);
	assert_true(url_is_remote("http://x"));
	assert_false(url_is_remote("file:///x"));
	s = url_local_path("file:///tmp/a%20b");
	assert_string_equal(s, "/tmp/a b");
	free(s);
	assert_null(url_local_path("file://otherhost/x"));
	assert_null(url_local_path("ftp://x/y"));
	s = url_local_path("/plain/path");
	assert_string_equal(s, "/plain/path");
	free(s);
}

/* sha256_files: the same digests as sha256_file on 1, 3 or 16 threads; a missing file is -ENOENT. */
static void test_files_on_threads(void **state)
{
	(void)state;
	char dir[] = "/tmp/tfprov-digest-XXXXXX";
	assert_non_null(mkdtemp(dir));
	enum { N = 9 };
	char *paths[N];
	for (int i = 0; i < N; i++) {
		paths[i] = malloc(64);
		snprintf(paths[i], 64, "%s/f%d", dir, i);
		if (i == 4)
			continue; /* missing */
		FILE *f = fopen(paths[i], "wb");
		assert_non_null(f);
		for (int k = 0; k < (i + 1) * 70001; k++)
			fputc((k * 31 + i) & 0xff, f);
		fclose(f);
	}
	size_t jobs[] = {1, 3, 16};
	for (size_t j = 0; j < 3; j++) {
		char hex[N][65];
		int rc[N];
		sha256_files(paths, N, jobs[j], hex, rc);
		for (int i = 0; i < N; i++) {
			if (i == 4) {
				assert_int_equal(rc[i], -ENOENT);
				continue;
			}
			char want[65];
			assert_int_equal(sha256_file(paths[i], want, NULL), 0);
			assert_int_equal(rc[i], 0);
			assert_string_equal(hex[i], want);
		}
	}
	for (int i = 0; i < N; i++) {
		unlink(paths[i]);
		free(paths[i]);
	}
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_vectors),
	    cmocka_unit_test(test_streaming_equals_one_shot),
	    cmocka_unit_test(test_reset_restarts),
	    cmocka_unit_test(test_url_helpers),
	    cmocka_unit_test(test_files_on_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
