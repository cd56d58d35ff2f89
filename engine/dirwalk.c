/*
 * dirwalk.c - see dirwalk.h. Invariant: dirfd, when open, is the directory
 * named by dir under root.
 */
#include "dirwalk.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

void dirwalk_init(struct dirwalk *w, const char *root)
{
	w->root = strcmp(root, "/") == 0 ? "" : root;
	w->dirfd = -1;
	w->dir[0] = '\0';
}

int dirwalk_lstat(struct dirwalk *w, const char *path, struct stat *st)
{
	const char *base = strrchr(path, '/');
	size_t rl = strlen(w->root), pl = strlen(path);
	if (base == NULL || rl + pl + 1 > sizeof(w->buf))
		return -ENAMETOOLONG;
	size_t dl = (size_t)(base - path);
	if (dl < sizeof(w->dir) && strlen(w->dir) == dl && memcmp(w->dir, path, dl) == 0) {
		if (w->dirfd < 0) {
			memcpy(w->buf, w->root, rl);
			memcpy(w->buf + rl, path, dl);
			w->buf[rl + dl] = '\0';
			w->dirfd = open(w->buf[0] ? w->buf : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
		}
		if (w->dirfd >= 0)
			return fstatat(w->dirfd, base + 1, st, AT_SYMLINK_NOFOLLOW) == 0 ? 0
			                                                                 : -errno;
	} else {
		if (w->dirfd >= 0)
			close(w->dirfd);
		w->dirfd = -1;
		if (dl < sizeof(w->dir)) {
			memcpy(w->dir, path, dl);
			w->dir[dl] = '\0';
		} else {
			w->dir[0] = '\0';
		}
	}
	memcpy(w->buf, w->root, rl);
	memcpy(w->buf + rl, path, pl + 1);
	return lstat(w->buf, st) == 0 ? 0 : -errno;
}

void dirwalk_release(struct dirwalk *w)
{
	if (w->dirfd >= 0)
		close(w->dirfd);
	w->dirfd = -1;
}
