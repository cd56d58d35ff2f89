/*
 * ocilayer.c - blobs: a layer as a deterministic uncompressed tar
 * (libarchive, pax restricted: plain ustar headers unless a name is too
 * long), and any other blob, each hashed while it is written into a
 * temporary file of the blob directory and renamed to its digest.
 *
 * Why uncompressed: gzip output is not canonical across implementations
 * (opencontainers/umoci#508, vbatts/tar-split#49), so a compressed layer's
 * digest would depend on the compressor; uncompressed, the digest is the
 * diff_id and depends only on the tree. The entry rules are in image.h.
 */
#include "image.h"
#include "oci_int.h"

#include "digest.h"
#include "error.h"
#include "fs.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int blob_open(const char *blobdir, struct blob_out *b, struct why *why)
{
	char *dir = path_join(blobdir, "sha256");
	int rc = 0;
	memset(b, 0, sizeof(*b));
	b->fd = -1;
	if (mkdirs_at(AT_FDCWD, dir, 0755) != 0) {
		rc = why_fail(why, errno == ENOSPC ? TF_ENOSPC : TF_EIO, "%s: cannot create: %s",
		              dir, strerror(errno));
		goto out;
	}
	b->tmp = xasprintf("%s/.tfprov-blob-XXXXXX", dir);
	b->fd = mkstemp(b->tmp);
	if (b->fd < 0) {
		rc = why_fail(why, errno == ENOSPC ? TF_ENOSPC : TF_EIO, "%s: cannot create: %s",
		              dir, strerror(errno));
		free(b->tmp);
		b->tmp = NULL;
		goto out;
	}
	fchmod(b->fd, 0644);
	sha256_init(&b->h);
out:
	free(dir);
	return rc;
}

void blob_add(struct blob_out *b, const void *data, size_t n)
{
	if (b->err)
		return;
	int r = fs_write_all(b->fd, data, n);
	if (r != 0) {
		b->err = -r;
		return;
	}
	sha256_update(&b->h, data, n);
	b->size += (int64_t)n;
}

/* Finishes b: renamed to sha256/<hex> (or dropped when that blob exists), or removed on error. */
int blob_close(const char *blobdir, struct blob_out *b, int failed, const char *media_type,
               struct oci_desc *out, struct why *why)
{
	char hex[65];
	int rc = 0;
	sha256_final(&b->h, hex);
	sha256_release(&b->h);
	if (!failed && !b->err && fsync(b->fd) != 0)
		b->err = errno;
	if (close(b->fd) != 0 && !b->err)
		b->err = errno;
	b->fd = -1;
	if (failed || b->err) {
		rc = failed ? failed : (b->err == ENOSPC ? TF_ENOSPC : TF_EIO);
		if (b->err)
			why_first(why, rc, "%s: %s", blobdir, strerror(b->err));
		unlink(b->tmp);
		goto out;
	}
	if (b->expect &&
	    (strcmp(hex, b->expect) != 0 || (b->expect_size >= 0 && b->size != b->expect_size))) {
		rc = why_fail(why, TF_EINTEGRITY,
		              "its bytes (%lld) hash to sha256:%s, not to the digest that names it "
		              "(sha256:%s, %lld bytes)",
		              (long long)b->size, hex, b->expect, (long long)b->expect_size);
		unlink(b->tmp);
		goto out;
	}
	char *final = xasprintf("%s/sha256/%s", blobdir, hex);
	if (rename(b->tmp, final) != 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", final, strerror(errno));
		unlink(b->tmp);
	}
	free(final);
	if (rc == 0) {
		out->media_type = xstrdup(media_type);
		snprintf(out->digest, sizeof(out->digest), "sha256:%s", hex);
		out->size = b->size;
	}
out:
	free(b->tmp);
	b->tmp = NULL;
	return rc;
}

int oci_blob_write(const char *blobdir, const char *media_type, const void *data, size_t len,
                   struct oci_desc *out, struct why *why)
{
	struct blob_out b;
	int rc = blob_open(blobdir, &b, why);
	if (rc != 0)
		return rc;
	blob_add(&b, data, len);
	return blob_close(blobdir, &b, 0, media_type, out, why);
}

/* Hashes src against hex and size (-1: any): 0, TF_EINTEGRITY or TF_EIO (why set). */
static int blob_check(const char *src, const char *hex, int64_t size, struct why *why)
{
	char got[65];
	int64_t n = 0;
	if (sha256_file(src, got, &n) != 0)
		return why_fail(why, TF_EIO, "%s: %s", src, strerror(errno));
	if (strcmp(got, hex) != 0 || (size >= 0 && n != size))
		return why_fail(why, TF_EINTEGRITY,
		                "%s: its bytes (%lld) hash to sha256:%s, not to the digest that "
		                "names it (sha256:%s, %lld bytes)",
		                src, (long long)n, got, hex, (long long)size);
	return 0;
}

int oci_blob_take(const char *src, const char *blobdir, const char *digest, int64_t size,
                  int link_ok, struct why *why)
{
	const char *hex = digest + 7;
	if (strncmp(digest, "sha256:", 7) != 0 || !is_hex64(hex))
		return why_fail(why, TF_EFAIL, "%s: not a sha256 digest", digest);
	char *dst = xasprintf("%s/sha256/%s", blobdir, hex);
	int rc = 0;
	if (link_ok) {
		char *sub = path_join(blobdir, "sha256");
		rc = blob_check(src, hex, size, why);
		if (rc == 0 && mkdirs_at(AT_FDCWD, sub, 0755) == 0 &&
		    (access(dst, F_OK) == 0 || link(src, dst) == 0)) {
			free(sub);
			free(dst);
			return 0;
		}
		free(sub);
		if (rc != 0) {
			free(dst);
			return why_code(why, rc);
		}
		/* Another filesystem: copied, and hashed again while it is. */
	}
	struct blob_out b;
	struct oci_desc d = {0};
	char *buf = xmalloc(1 << 20);
	int fd = open(src, O_RDONLY | O_CLOEXEC), failed = 0;
	ssize_t k = 0;
	if (fd < 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", src, strerror(errno));
	} else {
		rc = blob_open(blobdir, &b, why);
	}
	if (rc == 0) {
		b.expect = hex;
		b.expect_size = size;
		while ((k = read(fd, buf, 1 << 20)) > 0 && !b.err)
			blob_add(&b, buf, (size_t)k);
		if (k < 0)
			failed = why_fail(why, TF_EIO, "%s: %s", src, strerror(errno));
		rc = blob_close(blobdir, &b, failed, "", &d, why);
		if (rc == TF_EINTEGRITY)
			why_prefix(why, "%s", src);
	}
	if (fd >= 0)
		close(fd);
	free(d.media_type);
	free(buf);
	free(dst);
	return why_code(why, rc);
}

static la_ssize_t on_write(struct archive *a, void *ud, const void *buf, size_t n)
{
	struct blob_out *b = ud;
	blob_add(b, buf, n);
	if (b->err) {
		archive_set_error(a, b->err, "%s", strerror(b->err));
		return ARCHIVE_FATAL; /* any negative value is a failed write */
	}
	return (la_ssize_t)n;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* paths plus every parent directory of each, sorted, without duplicates. */
static void layer_entries(char *const *paths, size_t n, struct strvec *out)
{
	struct strvec all = STRVEC_INIT;
	for (size_t i = 0; i < n; i++) {
		char *p = xstrdup(paths[i]);
		strvec_push(&all, p);
		for (char *s = strrchr(p, '/'); s != NULL; s = strrchr(p, '/')) {
			*s = '\0';
			if (p[0])
				strvec_push(&all, p);
		}
		free(p);
	}
	if (all.n)
		qsort(all.v, all.n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < all.n; i++)
		if (out->n == 0 || strcmp(out->v[out->n - 1], all.v[i]) != 0)
			strvec_push(out, all.v[i]);
	strvec_release(&all);
}

/* Writes one entry (the tree's rel) into a. 0, TF_EIO or TF_EFAIL. */
static int write_entry(struct archive *a, struct archive_entry *e, const char *root,
                       const char *rel, int64_t epoch, struct why *why)
{
	char *host = path_join(root, rel);
	struct stat st;
	int rc = 0, fd = -1;
	char target[4096];
	if (lstat(host, &st) != 0) {
		rc = why_fail(why, TF_EIO, "%s: %s", host, strerror(errno));
		goto out;
	}
	archive_entry_set_pathname(e, rel);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	archive_entry_set_mtime(e, (time_t)epoch, 0);
	if (S_ISDIR(st.st_mode)) {
		archive_entry_set_filetype(e, AE_IFDIR);
		archive_entry_set_perm(e, st.st_mode & 0755);
		archive_entry_set_size(e, 0);
	} else if (S_ISLNK(st.st_mode)) {
		ssize_t k = readlink(host, target, sizeof(target) - 1);
		if (k < 0) {
			rc = why_fail(why, TF_EIO, "%s: %s", host, strerror(errno));
			goto out;
		}
		target[k] = '\0';
		archive_entry_set_filetype(e, AE_IFLNK);
		archive_entry_set_perm(e, 0777);
		archive_entry_set_symlink(e, target);
		archive_entry_set_size(e, 0);
	} else if (S_ISREG(st.st_mode)) {
		fd = open(host, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			rc = why_fail(why, TF_EIO, "%s: %s", host, strerror(errno));
			goto out;
		}
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, st.st_mode & 0755);
		archive_entry_set_size(e, st.st_size);
	} else {
		rc = why_fail(why, TF_EFAIL, "%s: neither a file, a directory nor a symlink", host);
		goto out;
	}
	if (archive_write_header(a, e) != ARCHIVE_OK) {
		rc = why_fail(why, TF_EIO, "%s: %s", rel, archive_error_string(a));
		goto out;
	}
	if (fd >= 0) {
		static char buf[1 << 16];
		int64_t left = st.st_size;
		while (left > 0) {
			ssize_t k = read(fd, buf, sizeof(buf));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				rc = why_fail(why, TF_EIO, "%s: %s", host,
				              k < 0 ? strerror(errno) : "changed while being read");
				goto out;
			}
			if (archive_write_data(a, buf, (size_t)k) != k) {
				rc = why_fail(why, TF_EIO, "%s: %s", rel, archive_error_string(a));
				goto out;
			}
			left -= k;
		}
	}
out:
	if (fd >= 0)
		close(fd);
	free(host);
	return rc;
}

int oci_layer_write(const char *root, char *const *paths, size_t n, int64_t epoch,
                    const char *blobdir, struct oci_desc *out, struct why *why)
{
	struct strvec ents = STRVEC_INIT;
	struct blob_out b;
	struct archive *a = NULL;
	struct archive_entry *e = NULL;
	int rc = blob_open(blobdir, &b, why);
	if (rc != 0)
		return rc;
	layer_entries(paths, n, &ents);
	a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_in_last_block(a,
	                                      1); /* no padding to 10 KiB: the bytes are the tar */
	if (archive_write_open(a, &b, NULL, on_write, NULL) != ARCHIVE_OK) {
		rc = why_fail(why, TF_EIO, "%s: %s", blobdir, archive_error_string(a));
		goto out;
	}
	e = archive_entry_new();
	for (size_t i = 0; i < ents.n && rc == 0; i++) {
		archive_entry_clear(e);
		rc = write_entry(a, e, root, ents.v[i], epoch, why);
	}
	if (rc == 0 && archive_write_close(a) != ARCHIVE_OK) {
		rc = why_first(why, TF_EIO, "%s: %s", blobdir, archive_error_string(a));
	}
out:
	if (e)
		archive_entry_free(e);
	archive_write_free(a);
	if (rc == TF_EIO && b.err == ENOSPC) {
		rc = TF_ENOSPC;
		if (why)
			why->code = rc; /* the words stay: what ran out of space */
	}
	rc = blob_close(blobdir, &b, rc, OCI_MT_LAYER, out, why);
	strvec_release(&ents);
	return rc;
}

char *oci_json_dump(const json_t *json)
{
	char *s = json_dumps(json, JSON_COMPACT | JSON_SORT_KEYS);
	if (s == NULL)
		tf_fatal("out of memory");
	return s;
}
