/*
 * pyfs.h - small filesystem helpers for the Python environment modules
 * (conda.c, pyenv.c): recursive removal, hard-link snapshots of a tree,
 * file copy, and relative-path safety checks.
 *
 * Invariants: nothing here follows a symlink while walking a tree (a link
 * inside an env is an entry, never a way out of it); all paths are host
 * paths. Functions return 0 or -errno.
 */
#ifndef TFPROV_PYFS_H
#define TFPROV_PYFS_H

#include <sys/types.h>

/* rm -rf path; a missing path is success. */
int pyfs_rmtree(const char *path);
/*
 * Recreates the tree src at dst (which must not exist): directories are
 * created, regular files hard-linked (copied when linking fails), symlinks
 * recreated. A hard-link snapshot stays intact as long as writers replace
 * files (unlink/rename) rather than rewriting them in place.
 */
int pyfs_link_tree(const char *src, const char *dst);
/* Copies a regular file to dst (created with O_EXCL) with the given mode. */
int pyfs_copy_file(const char *src, const char *dst, mode_t mode);
/* 1 when rel is relative, non-empty, and has no "." / ".." / empty component or control char. */
int pyfs_rel_is_safe(const char *rel);
/* Swaps dst with src atomically when dst exists (RENAME_EXCHANGE), then
 * removes the old tree (now at src); plain rename when dst is absent. */
int pyfs_swap_in(const char *src, const char *dst);

#endif
