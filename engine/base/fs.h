/*
 * fs.h - the filesystem helpers every part uses: recursive removal, hard-link
 * snapshots of a tree, file copy, atomic whole-file writes, relative-path
 * safety checks, and the swap of a directory.
 *
 * Invariants: nothing here follows a symlink while walking a tree (a link
 * inside a tree is an entry, never a way out of it); paths are host paths
 * (callers resolve root-relative paths inside the root first). Functions
 * return 0 or -errno.
 */
#ifndef TFPROV_FS_H
#define TFPROV_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* rm -rf path; a missing path is success. Directories without write or
 * search permission (an archive may set 0555) are made accessible first. */
int fs_rmtree(const char *path);
/* The same, for name relative to the directory descriptor parent. */
int fs_rmtree_at(int parent, const char *name);

struct stat;
/*
 * Calls cb for every entry below root (root itself excluded), parents before
 * children, never following a symlink: rel is the path relative to root,
 * host the full path, st its lstat. A non-zero return from cb stops the walk
 * and is returned; an unreadable directory is -errno.
 */
typedef int (*fs_walk_fn)(void *ud, const char *rel, const char *host, const struct stat *st);
int fs_walk(const char *root, fs_walk_fn cb, void *ud);

enum { FS_NO_REPLACE = 1 << 0 /* fail with -EEXIST when path exists */ };
/*
 * Writes len bytes to path as a whole or not at all: a temporary file beside
 * path (O_EXCL, mode), fsync, then rename over path (renameat2 NOREPLACE with
 * FS_NO_REPLACE). On failure the temporary file is removed and path is as
 * before.
 */
int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode, unsigned flags);
/*
 * Recreates the tree src at dst (which must not exist): directories are
 * created, regular files hard-linked (copied when linking fails), symlinks
 * recreated. A hard-link snapshot stays intact as long as writers replace
 * files (unlink/rename) rather than rewriting them in place.
 */
int fs_link_tree(const char *src, const char *dst);
/* Writes all len bytes of data to fd, retrying short writes and EINTR. 0 or -errno. */
int fs_write_all(int fd, const void *data, size_t len);
/*
 * Writes data as a new file at path with exactly mode, replacing a file that
 * is there (unlinked first, then created with O_EXCL, never through a
 * symlink). Not atomic: for files inside a staging tree. 0 or -errno.
 */
int fs_write_new(const char *path, const void *data, size_t len, mode_t mode);
/* Called with each chunk fs_copy reads (a digest fed while copying). */
typedef void (*fs_chunk_fn)(void *arg, const void *data, size_t n);
enum { FS_EXACT_MODE = 1 << 0 /* fchmod to mode: the umask does not narrow it */ };
/*
 * The one file copier: copies the regular file src to dst (created with
 * O_EXCL, never through a symlink, mode narrowed by the umask unless
 * FS_EXACT_MODE), handing each chunk to chunk when non-NULL; *size (may be
 * NULL) gets the byte count. On failure dst is removed. 0 or -errno.
 */
int fs_copy(const char *src, const char *dst, mode_t mode, unsigned flags, fs_chunk_fn chunk,
            void *arg, uint64_t *size);
/* Copies a regular file to dst (created with O_EXCL) with exactly the given mode. */
int fs_copy_file(const char *src, const char *dst, mode_t mode);
/* 1 when rel is relative, non-empty, and has no "." / ".." / empty component or control char. */
int fs_rel_is_safe(const char *rel);
/* Swaps dst with src atomically when dst exists (RENAME_EXCHANGE), then
 * removes the old tree (now at src); plain rename when dst is absent. */
int fs_swap_in(const char *src, const char *dst);
/* The same exchange, keeping the old dst at src (a plain rename when dst is absent). */
int fs_swap_in_keep(const char *src, const char *dst);

#endif
