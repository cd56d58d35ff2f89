/*
 * test_cache_memo.c - the cache files a process hashed itself
 * (engine/artifact/cache.c, cache_note_hashed / cache_was_hashed): a noted
 * file unchanged is known; the same file under another sha256, after a
 * write, a truncate to the same size and back, a chmod, or replaced by
 * another file of the same bytes is not, so fetch.c hashes it again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact_int.h"

static const char HEX_A[] = "5276d3636a075a03520ff018fef5381202ae5fba72235b3178fb03e5838a8b25";
static const char HEX_B[] = "6764cd597e2d10ed622e8808e7736250cdbc91c18a2ad8d3fca915a41f7009d6";

/* A fresh file of `text` in a fresh directory; the path, caller frees. */
static char *fresh(const char *text)
{
	char tmpl[] = "/tmp/tfprov-memo-XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	char *p = malloc(strlen(tmpl) + 8);
	sprintf(p, "%s/f", tmpl);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return p;
}

static void drop(char *p)
{
	unlink(p);
	*strrchr(p, '/') = '\0';
	rmdir(p);
	free(p);
}

/* Coarse file times tick every few ms: let one pass before a change. */
static void tick(void)
{
	usleep(20 * 1000);
}

static void test_noted_file_is_known_under_its_own_sha256_only(void **state)
{
	(void)state;
	char *p = fresh("twelve bytes");
	int64_t size = -1;
	assert_int_equal(cache_was_hashed(p, HEX_A, &size), 0);
	cache_note_hashed(p, HEX_A);
	assert_int_equal(cache_was_hashed(p, HEX_A, &size), 1);
	assert_int_equal(size, 12);
	assert_int_equal(cache_was_hashed(p, HEX_B, NULL), 0);
	drop(p);
}

static void test_any_change_since_makes_it_unknown(void **state)
{
	(void)state;
	/* A write of the same size. */
	char *p = fresh("twelve bytes");
	cache_note_hashed(p, HEX_A);
	tick();
	int fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "T", 1, 0), 1);
	close(fd);
	assert_int_equal(cache_was_hashed(p, HEX_A, NULL), 0);
	drop(p);

	/* A truncate and a write back to the same size and bytes. */
	p = fresh("twelve bytes");
	cache_note_hashed(p, HEX_A);
	tick();
	assert_int_equal(truncate(p, 5), 0);
	assert_int_equal(truncate(p, 12), 0);
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "twelve bytes", 12, 0), 12);
	close(fd);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 12);
	assert_int_equal(cache_was_hashed(p, HEX_A, NULL), 0);
	drop(p);

	/* A chmod (the cache's files are 0444: a writer makes them writable first). */
	p = fresh("twelve bytes");
	cache_note_hashed(p, HEX_A);
	tick();
	assert_int_equal(chmod(p, 0644), 0);
	assert_int_equal(cache_was_hashed(p, HEX_A, NULL), 0);
	drop(p);

	/* Replaced by another file with the same bytes. */
	p = fresh("twelve bytes");
	cache_note_hashed(p, HEX_A);
	char *q = fresh("twelve bytes");
	assert_int_equal(rename(q, p), 0);
	*strrchr(q, '/') = '\0';
	rmdir(q);
	free(q);
	assert_int_equal(cache_was_hashed(p, HEX_A, NULL), 0);
	drop(p);

	/* Gone. */
	p = fresh("twelve bytes");
	cache_note_hashed(p, HEX_A);
	unlink(p);
	assert_int_equal(cache_was_hashed(p, HEX_A, NULL), 0);
	drop(p);
}

static void test_noting_again_replaces_the_record(void **state)
{
	(void)state;
	char *p = fresh("twelve bytes");
	cache_note_hashed(p, HEX_A);
	tick();
	assert_int_equal(truncate(p, 5), 0);
	assert_int_equal(cache_was_hashed(p, HEX_A, NULL), 0);
	cache_note_hashed(p, HEX_B); /* re-hashed: the new bytes */
	int64_t size = -1;
	assert_int_equal(cache_was_hashed(p, HEX_B, &size), 1);
	assert_int_equal(size, 5);
	assert_int_equal(cache_was_hashed(p, HEX_A, NULL), 0);
	drop(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_noted_file_is_known_under_its_own_sha256_only),
	    cmocka_unit_test(test_any_change_since_makes_it_unknown),
	    cmocka_unit_test(test_noting_again_replaces_the_record),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
