/*
 * dirwalk.c - see dirwalk.h. Invariant: dirfd, when open, is the directory
 * named by dir under the root, resolved inside it (ctx_host_dir).
 */
#include "dirwalk.h"
#include "ctx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void dirwalk_init(struct dirwalk *w, const struct ctx *c)
{
	w->c = c;
	w->dirfd = -1;
	w->dir[0] = '\0';
	w->have_dir = 0;
}

int dirwalk_lstat(struct dirwalk *w, const char *path, struct stat *st)
{
	const char *base = strrchr(path, '/');
	if (base == NULL)
		return -ENAMETOOLONG;
	size_t dl = (size_t)(base - path);
	if (dl >= sizeof(w->dir))
		return -ENAMETOOLONG;
	if (!w->have_dir || strlen(w->dir) != dl || memcmp(w->dir, path, dl) != 0) {
		if (w->dirfd >= 0)
			close(w->dirfd);
		memcpy(w->dir, path, dl);
		w->dir[dl] = '\0';
		char *host = ctx_host_dir(w->c, dl ? w->dir : "/");
		w->dirfd = open(host, O_PATH | O_DIRECTORY | O_CLOEXEC);
		w->have_dir = 1;
		free(host);
	}
	if (w->dirfd < 0)
		return -ENOENT;
	return fstatat(w->dirfd, base + 1, st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

void dirwalk_release(struct dirwalk *w)
{
	if (w->dirfd >= 0)
		close(w->dirfd);
	w->dirfd = -1;
}
