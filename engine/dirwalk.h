/*
 * dirwalk.h - lstat() of many root-relative paths, sorted by path.
 *
 * A no-op apply stats every recorded file. Resolving each full path from the
 * root costs one lookup per component; files of a CUDA tree sit by hundreds
 * in a few directories (lib/, include/), so once two consecutive paths share
 * a directory, dirwalk opens that directory and stats the rest of its files
 * relative to it (one lookup each). A path whose directory differs from its
 * predecessor's is stat'ed from the root as before, so a tree of one file per
 * directory costs no more than plain lstat. Same answers as lstat(root+path).
 *
 * A struct dirwalk owns its descriptor; dirwalk_release() closes it.
 */
#ifndef TFPROV_DIRWALK_H
#define TFPROV_DIRWALK_H

#include <stddef.h>
#include <sys/stat.h>

struct dirwalk {
	const char *root; /* host path of the root, "" for "/" */
	int dirfd;        /* open descriptor of dir, or -1 */
	char dir[4096];   /* root-relative directory of the previous path */
	char buf[8192];
};

void dirwalk_init(struct dirwalk *w, const char *root);
/* lstat of a root-relative absolute path; 0 or -errno. */
int dirwalk_lstat(struct dirwalk *w, const char *path, struct stat *st);
void dirwalk_release(struct dirwalk *w);

#endif
