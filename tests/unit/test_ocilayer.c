/*
 * test_ocilayer.c - the image room's layer writer and base reader
 * (engine/image): the same tree gives the same bytes whatever the order it
 * was made in, its modes and mtimes; entries are sorted with their parents,
 * owned by 0, stamped with the epoch, set-id and group/other write dropped;
 * what is not a file, directory or symlink fails and leaves no blob; a base
 * that is missing, not an image or a registry reference is refused; a file
 * read from a base's layers as the build's checks read it; a file taken in
 * as a blob only under the digest and size it has, copied or linked, and an
 * entry found in layers by its name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "error.h"
#include "fs.h"
#include "image.h"
#include "util.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/tfprov-test-oci-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return fs_rmtree(dir);
}

static void put(const char *root, const char *rel, const char *text, mode_t mode)
{
	char *p = path_join(root, rel);
	char *d = xstrdup(p);
	*strrchr(d, '/') = '\0';
	assert_int_equal(mkdirs_at(AT_FDCWD, d, 0777), 0);
	assert_int_equal(fs_write_new(p, text, strlen(text), 0600), 0);
	assert_int_equal(chmod(p, mode), 0);
	free(d);
	free(p);
}

/* The same content made in two orders, umasks, modes and mtimes. */
static void make_tree(const char *root, int variant)
{
	mode_t old = umask(variant ? 002 : 022); /* group write: masked */
	if (variant) {
		put(root, "opt/b/z.so", "z", 0775);
		put(root, "opt/a/x.h", "x", 0664);
	} else {
		put(root, "opt/a/x.h", "x", 0644);
		put(root, "opt/b/z.so", "z", 04755); /* set-uid: dropped */
	}
	char *l = path_join(root, "opt/b/z.so.1");
	assert_int_equal(symlink("z.so", l), 0);
	free(l);
	umask(old);
	if (variant) {
		/* Another time of day: mtimes are the epoch's. */
		char *p = path_join(root, "opt/a/x.h");
		struct timespec ts[2] = {{12345678, 9}, {12345678, 9}};
		assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
		free(p);
	}
}

static void layer_of(const char *root, const char *blobs, struct oci_desc *d)
{
	char *paths[] = {"opt/b/z.so.1", "opt/a/x.h", "opt/b/z.so"};
	struct why err = {0};
	assert_int_equal(oci_layer_write(root, paths, 3, 1234, blobs, d, &err), 0);
	assert_null(err.msg);
}

static void test_same_tree_same_bytes(void **state)
{
	(void)state;
	char *r1 = path_join(dir, "r1"), *r2 = path_join(dir, "r2"), *blobs = path_join(dir, "b");
	struct oci_desc d1 = {0}, d2 = {0};
	make_tree(r1, 0);
	make_tree(r2, 1);
	layer_of(r1, blobs, &d1);
	layer_of(r2, blobs, &d2);
	assert_string_equal(d1.digest, d2.digest);
	assert_int_equal(d1.size, d2.size);
	assert_string_equal(d1.media_type, OCI_MT_LAYER);

	/* What is in it: sorted, parents first, owner 0, the epoch, masked modes. */
	char *f = xasprintf("%s/sha256/%s", blobs, d1.digest + 7);
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	archive_read_support_format_tar(a);
	assert_int_equal(archive_read_open_filename(a, f, 10240), ARCHIVE_OK);
	static const char *const want[] = {"opt/",   "opt/a/",     "opt/a/x.h",
	                                   "opt/b/", "opt/b/z.so", "opt/b/z.so.1"};
	size_t i = 0;
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		assert_true(i < ARRAY_SIZE(want));
		assert_string_equal(archive_entry_pathname(e), want[i]);
		assert_int_equal(archive_entry_mtime(e), 1234);
		if (strcmp(want[i], "opt/b/z.so") == 0)
			assert_int_equal(archive_entry_perm(e), 0755);
		if (strcmp(want[i], "opt/b/z.so.1") == 0)
			assert_string_equal(archive_entry_symlink(e), "z.so");
		i++;
	}
	assert_int_equal(i, ARRAY_SIZE(want));
	archive_read_free(a);
	/* The headers' bytes: ustar only (no pax record, so no atime/ctime), uid/gid 0, no names. */
	char *tar = NULL;
	size_t len = 0;
	assert_int_equal(read_file_at(AT_FDCWD, f, 1 << 20, &tar, &len), 0);
	size_t off = 0, headers = 0;
	while (off + 512 <= len && tar[off] != '\0') {
		const char *h = tar + off;
		assert_true(h[156] != 'x' && h[156] != 'g');
		assert_memory_equal(h + 257, "ustar", 5);
		assert_int_equal(strtol(h + 108, NULL, 8), 0); /* uid */
		assert_int_equal(strtol(h + 116, NULL, 8), 0); /* gid */
		assert_int_equal(h[265], '\0');                /* uname */
		assert_int_equal(h[297], '\0');                /* gname */
		long size = strtol(h + 124, NULL, 8);
		off += 512 + (size_t)((size + 511) / 512) * 512;
		headers++;
	}
	assert_int_equal(headers, ARRAY_SIZE(want));
	free(tar);
	free(f);
	free(d1.media_type);
	free(d2.media_type);
	free(r1);
	free(r2);
	free(blobs);
}

static void test_fifo_fails_and_leaves_no_blob(void **state)
{
	(void)state;
	char *root = path_join(dir, "f"), *blobs = path_join(dir, "fb");
	struct why err = {0};
	put(root, "a/file", "x", 0644);
	char *fifo = path_join(root, "a/pipe");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	char *paths[] = {"a/file", "a/pipe"};
	struct oci_desc d = {0};
	assert_int_equal(oci_layer_write(root, paths, 2, 1, blobs, &d, &err), TF_EFAIL);
	assert_non_null(strstr(err.msg, "neither a file"));
	char *sub = path_join(blobs, "sha256");
	DIR *dd = opendir(sub);
	struct dirent *de;
	int n = 0;
	while (dd && (de = readdir(dd)) != NULL)
		n += de->d_name[0] != '.';
	closedir(dd);
	assert_int_equal(n, 0);
	free(sub);
	free(fifo);
	why_clear(&err);
	free(root);
	free(blobs);
}

static void test_bad_bases(void **state)
{
	(void)state;
	struct oci_image im;
	char *scratch = path_join(dir, "s"), *missing = path_join(dir, "nope");
	struct why err = {0};
	mkdir(scratch, 0755);
	assert_int_equal(oci_image_read(missing, scratch, NULL, &im, &err), TF_EFAIL);
	assert_non_null(strstr(err.msg, "No such file"));
	why_clear(&err);
	assert_int_equal(oci_image_read(dir, scratch, NULL, &im, &err), TF_EFAIL);
	assert_non_null(strstr(err.msg, "not an OCI image layout"));
	why_clear(&err);
	assert_int_equal(oci_image_read("docker://debian:12", scratch, NULL, &im, &err), TF_EUSAGE);
	assert_non_null(strstr(err.msg, "registries are not supported yet"));
	why_clear(&err);
	free(scratch);
	free(missing);
}

/* A symlink at root/rel to target, its parents made. */
static void put_link(const char *root, const char *rel, const char *target)
{
	char *p = path_join(root, rel);
	char *d = xstrdup(p);
	*strrchr(d, '/') = '\0';
	assert_int_equal(mkdirs_at(AT_FDCWD, d, 0777), 0);
	assert_int_equal(symlink(target, p), 0);
	free(d);
	free(p);
}

/* The contents of the first of paths in im, or NULL; *res the name reached. */
static char *cat(const struct oci_image *im, const char *blobs, const char *a, const char *b,
                 size_t max, char **res)
{
	char *paths[] = {(char *)a, (char *)b}, *data = NULL;
	struct why err = {0};
	size_t len = 0;
	assert_int_equal(
	    oci_image_read_file(im, blobs, paths, b ? 2 : 1, max, &data, &len, res, &err), 0);
	assert_null(err.msg);
	if (data)
		assert_int_equal(len, strlen(data));
	return data;
}

/*
 * A base's merged filesystem read as the build's checks read it: the last
 * layer's file wins, absolute and relative symlinks (a merged /usr's /lib)
 * are followed, a parent a layer does not list is a directory, a directory
 * or a missing name has no contents, max truncates; a layer that is not a
 * tar fails naming its digest.
 */
static void test_read_file_across_layers(void **state)
{
	(void)state;
	char *one = path_join(dir, "one"), *two = path_join(dir, "two");
	char *blobs = path_join(dir, "blobs"), *res = NULL, *d;
	struct why err = {0};
	struct oci_desc l[2] = {{0}};
	put(one, "usr/lib/x86_64-linux-gnu/libc.so.6", "glibc 2.36", 0755);
	put(one, "etc/a", "old", 0644);
	put_link(one, "lib", "usr/lib");
	put(two, "etc/a", "new", 0644);
	put_link(two, "usr/bin/py", "../lib/x86_64-linux-gnu/libc.so.6");
	put_link(two, "usr/bin/abs", "/lib/x86_64-linux-gnu/libc.so.6");
	char *p1[] = {"usr/lib/x86_64-linux-gnu/libc.so.6", "etc/a", "lib"};
	char *p2[] = {"etc/a", "usr/bin/py", "usr/bin/abs"};
	assert_int_equal(oci_layer_write(one, p1, 3, 1, blobs, &l[0], &err), 0);
	assert_int_equal(oci_layer_write(two, p2, 3, 1, blobs, &l[1], &err), 0);
	struct oci_image im = {.layers = l, .nlayers = 2};

	d = cat(&im, blobs, "/nope", "/lib/x86_64-linux-gnu/libc.so.6", 1 << 20, &res);
	assert_string_equal(d, "glibc 2.36");
	assert_string_equal(res, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	free(d);
	free(res);
	d = cat(&im, blobs, "/etc/a", NULL, 1 << 20, NULL);
	assert_string_equal(d, "new");
	free(d);
	d = cat(&im, blobs, "/usr/bin/py", NULL, 5, NULL);
	assert_string_equal(d, "glibc");
	free(d);
	d = cat(&im, blobs, "/usr/bin/abs", NULL, 1 << 20, NULL);
	assert_string_equal(d, "glibc 2.36");
	free(d);
	assert_null(cat(&im, blobs, "/etc", "/usr/lib/nope", 1 << 20, &res));
	assert_null(res);
	char *paths[] = {"/usr/bin/py", "/usr/lib/x86_64-linux-gnu", "/bin/sh"};
	int found[3] = {0};
	assert_int_equal(oci_image_has_paths(&im, blobs, paths, 3, found, &err), 0);
	assert_true(found[0] && found[1] && !found[2]);

	/* A layer that is not a tar: TF_EFAIL naming it by its digest. */
	struct oci_desc junk = {0};
	assert_int_equal(oci_blob_write(blobs, OCI_MT_LAYER, "not a tar", 9, &junk, &err), 0);
	struct oci_image bad = {.layers = &junk, .nlayers = 1};
	char *data = NULL, *one_path[] = {"/etc/a"};
	size_t len = 0;
	assert_int_equal(oci_image_read_file(&bad, blobs, one_path, 1, 64, &data, &len, NULL, &err),
	                 TF_EFAIL);
	assert_null(data);
	assert_non_null(strstr(err.msg, junk.digest));
	why_clear(&err);
	free(junk.media_type);
	free(l[0].media_type);
	free(l[1].media_type);
	free(blobs);
	free(one);
	free(two);
}

/* Every file of blobs/sha256 (temporaries too), counted. */
static int blob_files(const char *blobs)
{
	char *sub = path_join(blobs, "sha256");
	DIR *dd = opendir(sub);
	struct dirent *de;
	int n = 0;
	while (dd && (de = readdir(dd)) != NULL)
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	if (dd)
		closedir(dd);
	free(sub);
	return n;
}

static void test_blob_take_verifies(void **state)
{
	(void)state;
	char *src = path_join(dir, "src"), *blobs = path_join(dir, "tb"), hex[65];
	struct why err = {0};
	char digest[72], bad[72];
	put(dir, "src", "hello, layer", 0600);
	sha256_buf("hello, layer", 12, hex);
	snprintf(digest, sizeof(digest), "sha256:%s", hex);
	snprintf(bad, sizeof(bad), "sha256:%s", hex);
	bad[7] = bad[7] == '0' ? '1' : '0';
	for (int link_ok = 0; link_ok < 2; link_ok++) {
		/* Another digest, or the right one with another size: nothing kept. */
		assert_int_equal(oci_blob_take(src, blobs, bad, 12, link_ok, &err), TF_EINTEGRITY);
		assert_non_null(strstr(err.msg, hex));
		why_clear(&err);
		assert_int_equal(oci_blob_take(src, blobs, digest, 13, link_ok, &err),
		                 TF_EINTEGRITY);
		why_clear(&err);
		assert_int_equal(blob_files(blobs), 0);
	}
	/* Copied: the bytes, another inode; linked: the same inode. */
	char *dst = xasprintf("%s/sha256/%s", blobs, hex), *text = NULL;
	size_t len = 0;
	struct stat a, b;
	assert_int_equal(oci_blob_take(src, blobs, digest, 12, 0, &err), 0);
	assert_int_equal(read_file_at(AT_FDCWD, dst, 64, &text, &len), 0);
	assert_memory_equal(text, "hello, layer", 12);
	assert_int_equal(stat(src, &a), 0);
	assert_int_equal(stat(dst, &b), 0);
	assert_true(a.st_ino != b.st_ino);
	assert_int_equal(b.st_mode & 07777, 0644);
	assert_int_equal(unlink(dst), 0);
	assert_int_equal(oci_blob_take(src, blobs, digest, -1, 1, &err), 0);
	assert_int_equal(stat(dst, &b), 0);
	assert_true(a.st_ino == b.st_ino);
	assert_int_equal(blob_files(blobs), 1);
	assert_int_equal(oci_blob_take(src, blobs, "md5:00", 12, 0, &err), TF_EFAIL);
	why_clear(&err);
	free(text);
	free(dst);
	free(src);
	free(blobs);
}

static int is_libcuda(const char *name)
{
	const char *base = strrchr(name, '/');
	return strncmp(base ? base + 1 : name, "libcuda.so", 10) == 0;
}

static void test_layers_find(void **state)
{
	(void)state;
	char *root = path_join(dir, "lf"), *blobs = path_join(dir, "lfb"), *found;
	struct why err = {0};
	struct oci_desc d[2] = {{0}, {0}};
	char *one[] = {"opt/a/x.h"}, *two[] = {"opt/cuda/compat/libcuda.so.1", "opt/cuda/z"};
	put(root, "opt/a/x.h", "x", 0644);
	put(root, "opt/cuda/compat/libcuda.so.1", "elf", 0755);
	put(root, "opt/cuda/z", "z", 0644);
	assert_int_equal(oci_layer_write(root, one, 1, 1, blobs, &d[0], &err), 0);
	assert_int_equal(oci_layer_write(root, two, 2, 1, blobs, &d[1], &err), 0);
	assert_int_equal(oci_layers_find(d, 1, blobs, is_libcuda, &found, &err), 0);
	assert_null(found);
	assert_int_equal(oci_layers_find(d, 2, blobs, is_libcuda, &found, &err), 0);
	assert_string_equal(found, "/opt/cuda/compat/libcuda.so.1");
	free(found);
	/* A layer that is not a tar does not read. */
	char *p = xasprintf("%s/sha256/%s", blobs, d[0].digest + 7);
	char *rel = xasprintf("sha256/%s", d[0].digest + 7);
	assert_int_equal(unlink(p), 0);
	put(blobs, rel, "not a tar", 0644);
	free(rel);
	assert_int_equal(oci_layers_find(d, 1, blobs, is_libcuda, &found, &err), TF_EFAIL);
	assert_non_null(err.msg);
	why_clear(&err);
	free(p);
	free(d[0].media_type);
	free(d[1].media_type);
	free(root);
	free(blobs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_same_tree_same_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fifo_fails_and_leaves_no_blob, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_bases, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_file_across_layers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_blob_take_verifies, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_layers_find, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
