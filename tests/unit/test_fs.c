/*
 * test_fs.c - the one write-all loop, new-file writer and file copier of
 * engine/base/fs.h: every byte reaches a slow reader, a closed pipe is an error,
 * a copy feeds its digest exactly the bytes it wrote, an existing destination
 * is never overwritten by a copy, a failed copy leaves nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "digest.h"
#include "fs.h"
#include "util.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/tfprov-test-fs-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return fs_rmtree(dir);
}

static char *in_dir(const char *name)
{
	return path_join(dir, name);
}

/* 3 MiB of a pattern: more than one read of the copier and one pipe buffer. */
static char *pattern(size_t n)
{
	char *p = xmalloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 131 + i / 4096);
	return p;
}

static void write_all_writes_everything_through_a_pipe(void **state)
{
	(void)state;
	size_t n = 3u << 20;
	char *data = pattern(n);
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The reader drains in small pieces: the writer waits on a full pipe many times. */
		close(fds[1]);
		struct sha256 s;
		char buf[1000], hex[65];
		ssize_t r;
		sha256_init(&s);
		while ((r = read(fds[0], buf, sizeof(buf))) > 0)
			sha256_update(&s, buf, (size_t)r);
		sha256_final(&s, hex);
		char want[65];
		sha256_buf(data, n, want);
		_exit(strcmp(hex, want) == 0 ? 0 : 1);
	}
	close(fds[0]);
	assert_int_equal(fs_write_all(fds[1], data, n), 0);
	close(fds[1]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	free(data);
}

static void write_all_reports_a_closed_pipe(void **state)
{
	(void)state;
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	close(fds[0]);
	signal(SIGPIPE, SIG_IGN);
	assert_int_equal(fs_write_all(fds[1], "x", 1), -EPIPE);
	close(fds[1]);
}

static void write_new_replaces_and_sets_the_exact_mode(void **state)
{
	(void)state;
	char *p = in_dir("new");
	mode_t old = umask(077);
	assert_int_equal(fs_write_new(p, "first", 5, 0644), 0);
	assert_int_equal(fs_write_new(p, "second", 6, 0755), 0);
	umask(old);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755); /* not narrowed by the umask */
	assert_int_equal(st.st_size, 6);
	char hex[65], want[65];
	assert_int_equal(sha256_file(p, hex, NULL), 0);
	sha256_buf("second", 6, want);
	assert_string_equal(hex, want);
	free(p);
}

static void write_new_never_follows_a_symlink(void **state)
{
	(void)state;
	char *target = in_dir("target"), *link = in_dir("link");
	assert_int_equal(fs_write_new(target, "keep", 4, 0644), 0);
	assert_int_equal(symlink(target, link), 0);
	/* The link is the clash that is replaced: the file it named is untouched. */
	assert_int_equal(fs_write_new(link, "new", 3, 0644), 0);
	struct stat st;
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(stat(target, &st), 0);
	assert_int_equal(st.st_size, 4);
	free(target);
	free(link);
}

struct fed {
	struct sha256 s;
	uint64_t bytes;
};

static void feed(void *arg, const void *data, size_t n)
{
	struct fed *f = arg;
	sha256_update(&f->s, data, n);
	f->bytes += n;
}

static void copy_feeds_the_chunk_callback_what_it_writes(void **state)
{
	(void)state;
	size_t n = (3u << 20) + 7;
	char *data = pattern(n);
	char *src = in_dir("src"), *dst = in_dir("dst");
	assert_int_equal(fs_write_new(src, data, n, 0600), 0);
	struct fed f = {.bytes = 0};
	uint64_t size = 0;
	sha256_init(&f.s);
	assert_int_equal(fs_copy(src, dst, 0640, FS_EXACT_MODE, feed, &f, &size), 0);
	char fed_hex[65], dst_hex[65], want[65];
	sha256_final(&f.s, fed_hex);
	sha256_buf(data, n, want);
	assert_int_equal(sha256_file(dst, dst_hex, NULL), 0);
	assert_string_equal(fed_hex, want);
	assert_string_equal(dst_hex, want);
	assert_int_equal(size, n);
	assert_int_equal(f.bytes, n);
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	free(src);
	free(dst);
	free(data);
}

static void copy_never_overwrites_and_a_failed_copy_leaves_nothing(void **state)
{
	(void)state;
	char *src = in_dir("csrc"), *dst = in_dir("cdst"), *missing = in_dir("missing");
	assert_int_equal(fs_write_new(src, "abc", 3, 0644), 0);
	assert_int_equal(fs_write_new(dst, "old", 3, 0644), 0);
	assert_int_equal(fs_copy_file(src, dst, 0644), -EEXIST);
	char hex[65], want[65];
	assert_int_equal(sha256_file(dst, hex, NULL), 0);
	sha256_buf("old", 3, want);
	assert_string_equal(hex, want); /* the existing file is as it was */
	char *none = in_dir("none");
	assert_int_equal(fs_copy(missing, none, 0644, 0, NULL, NULL, NULL), -ENOENT);
	assert_int_equal(access(none, F_OK), -1);
	/* A source that cannot be read (a directory): the half-made copy is removed. */
	assert_int_equal(fs_copy(dir, none, 0644, 0, NULL, NULL, NULL), -EISDIR);
	assert_int_equal(access(none, F_OK), -1);
	free(src);
	free(dst);
	free(missing);
	free(none);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(write_all_writes_everything_through_a_pipe),
	    cmocka_unit_test(write_all_reports_a_closed_pipe),
	    cmocka_unit_test(write_new_replaces_and_sets_the_exact_mode),
	    cmocka_unit_test(write_new_never_follows_a_symlink),
	    cmocka_unit_test(copy_feeds_the_chunk_callback_what_it_writes),
	    cmocka_unit_test(copy_never_overwrites_and_a_failed_copy_leaves_nothing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
