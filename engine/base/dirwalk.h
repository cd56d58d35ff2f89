/*
 * dirwalk.h - lstat() of many root-relative paths, sorted by path.
 *
 * A no-op apply stats every recorded file. Resolving each full path from the
 * root costs one lookup per component; files of a CUDA tree sit by hundreds
 * in a few directories (lib/, include/), so dirwalk opens each directory once,
 * resolved inside the root with chroot semantics (ctx_host_dir), and stats
 * its files relative to it (one lookup each, the last component not
 * followed). Paths sorted by directory open each directory once.
 *
 * A struct dirwalk owns its descriptor; dirwalk_release() closes it.
 */
#ifndef TFPROV_DIRWALK_H
#define TFPROV_DIRWALK_H

#include <stddef.h>
#include <sys/stat.h>

struct ctx;

struct dirwalk {
	const struct ctx *c;
	int dirfd;      /* open descriptor of dir, or -1 */
	int have_dir;   /* dir (and dirfd) describe the previous path */
	char dir[4096]; /* root-relative directory of the previous path */
};

void dirwalk_init(struct dirwalk *w, const struct ctx *c);
/* lstat of a root-relative absolute path; 0 or -errno. */
int dirwalk_lstat(struct dirwalk *w, const char *path, struct stat *st);
void dirwalk_release(struct dirwalk *w);

#endif
