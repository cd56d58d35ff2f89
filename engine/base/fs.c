/*
 * fs.c - tree removal, hard-link snapshots, copies, atomic file writes and
 * the atomic swap of a directory. See fs.h.
 */
#include "fs.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_rmtree_at(int parent, const char *name)
{
	struct stat st;
	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(parent, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EACCES &&
	    fchmodat(parent, name, (st.st_mode & 07777) | 0700, 0) == 0)
		fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Entries of a directory without write permission cannot be unlinked. */
	if ((st.st_mode & 0300) != 0300)
		fchmod(fd, (st.st_mode & 07777) | 0700);
	DIR *d = fdopendir(fd);
	if (d == NULL) {
		close(fd);
		return -errno;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		rc = fs_rmtree_at(dirfd(d), de->d_name);
		if (rc)
			break;
	}
	closedir(d);
	if (rc == 0 && unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		rc = -errno;
	return rc;
}

int fs_rmtree(const char *path)
{
	return fs_rmtree_at(AT_FDCWD, path);
}

int fs_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int fs_write_new(const char *path, const void *data, size_t len, mode_t mode)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode & 07777);
	if (fd < 0)
		return -errno;
	int rc = fs_write_all(fd, data, len);
	/* The umask may have narrowed open()'s mode. */
	if (rc == 0 && fchmod(fd, mode & 07777) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* Reads of 1 MiB keep a digest fed while copying near its peak (digest.h). */
#define COPY_CHUNK (1u << 20)

int fs_copy(const char *src, const char *dst, mode_t mode, unsigned flags, fs_chunk_fn chunk,
            void *arg, uint64_t *size)
{
	int rc = 0, out = -1;
	uint64_t total = 0;
	char *buf = NULL;
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode & 07777);
	if (out < 0) {
		rc = -errno;
		goto out;
	}
	buf = xmalloc(COPY_CHUNK);
	for (;;) {
		ssize_t n = read(in, buf, COPY_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		if (chunk)
			chunk(arg, buf, (size_t)n);
		if ((rc = fs_write_all(out, buf, (size_t)n)) != 0)
			goto out;
		total += (uint64_t)n;
	}
	if ((flags & FS_EXACT_MODE) && fchmod(out, mode & 07777) != 0)
		rc = -errno;
out:
	if (out >= 0 && close(out) != 0 && rc == 0)
		rc = -errno;
	close(in);
	free(buf);
	if (rc && out >= 0)
		unlink(dst);
	if (rc == 0 && size)
		*size = total;
	return rc;
}

int fs_copy_file(const char *src, const char *dst, mode_t mode)
{
	return fs_copy(src, dst, mode, FS_EXACT_MODE, NULL, NULL, NULL);
}

/* Recreates the entry host (of lstat st) at t: fs_link_tree's one step. */
static int recreate(const char *host, const char *t, const struct stat *st)
{
	int rc = 0;
	if (S_ISDIR(st->st_mode)) {
		rc = mkdir(t, st->st_mode & 07777) == 0 ? 0 : -errno;
	} else if (S_ISLNK(st->st_mode)) {
		char target[4096];
		ssize_t n = readlink(host, target, sizeof(target) - 1);
		if (n < 0) {
			rc = -errno;
		} else {
			target[n] = '\0';
			rc = symlink(target, t) == 0 ? 0 : -errno;
		}
	} else if (S_ISREG(st->st_mode) && link(host, t) != 0) {
		rc = fs_copy_file(host, t, st->st_mode);
	} /* sockets, fifos: not part of a tree tfprov copies */
	return rc;
}

static int link_entry(void *ud, const char *rel, const char *host, const struct stat *st)
{
	char *t = path_join(ud, rel);
	int rc = recreate(host, t, st);
	free(t);
	return rc;
}

int fs_link_tree(const char *src, const char *dst)
{
	struct stat st;
	if (lstat(src, &st) != 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return recreate(src, dst, &st);
	if (mkdir(dst, st.st_mode & 07777) != 0)
		return -errno;
	return fs_walk(src, link_entry, (void *)dst);
}

int fs_rel_is_safe(const char *rel)
{
	if (rel == NULL || rel[0] == '\0' || rel[0] == '/')
		return 0;
	for (const char *p = rel; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return 0;
	const char *c = rel;
	for (;;) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		if (e == NULL)
			break;
		c = e + 1;
	}
	return 1;
}

int fs_swap_in_keep(const char *src, const char *dst)
{
	struct stat st;
	if (lstat(dst, &st) != 0) {
		if (errno != ENOENT)
			return -errno;
		return rename(src, dst) == 0 ? 0 : -errno;
	}
	if (renameat2(AT_FDCWD, src, AT_FDCWD, dst, RENAME_EXCHANGE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* No RENAME_EXCHANGE on this filesystem: dst aside, src in, the old dst to src. */
	char *aside = xasprintf("%s.tfprov-old", dst);
	int e = 0;
	fs_rmtree(aside);
	if (rename(dst, aside) != 0) {
		e = -errno;
	} else if (rename(src, dst) != 0) {
		e = -errno;
		rename(aside, dst);
	} else if (rename(aside, src) != 0) {
		e = -errno;
	}
	free(aside);
	return e;
}

int fs_swap_in(const char *src, const char *dst)
{
	struct stat st;
	int existed = lstat(dst, &st) == 0;
	int e = fs_swap_in_keep(src, dst);
	if (e != 0 || !existed)
		return e;
	/* src now holds the old tree. */
	return fs_rmtree(src);
}

int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode, unsigned flags)
{
	char *tmp = xasprintf("%s.tfprov-tmp.%d", path, (int)getpid());
	int rc = 0;
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode & 07777);
	if (fd < 0) {
		rc = -errno;
		free(tmp);
		return rc;
	}
	rc = fs_write_all(fd, data, len);
	/* The umask may have narrowed open()'s mode. */
	if (rc == 0 && fchmod(fd, mode & 07777) != 0)
		rc = -errno;
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, path,
	                         (flags & FS_NO_REPLACE) ? RENAME_NOREPLACE : 0))
		rc = -errno;
	if (rc != 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

static int walk_dir(const char *host, size_t base, fs_walk_fn cb, void *ud)
{
	DIR *d = opendir(host);
	if (d == NULL)
		return -errno;
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char *p = path_join(host, de->d_name);
		struct stat st;
		if (lstat(p, &st) != 0)
			rc = -errno;
		else
			rc = cb(ud, p + base + 1, p, &st);
		if (rc == 0 && S_ISDIR(st.st_mode))
			rc = walk_dir(p, base, cb, ud);
		free(p);
	}
	closedir(d);
	return rc;
}

int fs_walk(const char *root, fs_walk_fn cb, void *ud)
{
	return walk_dir(root, strlen(root), cb, ud);
}
