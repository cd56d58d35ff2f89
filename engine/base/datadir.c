/*
 * datadir.c - run-time lookup of the shipped data directory (see datadir.h).
 * Only the install prefix is compiled in (TFPROV_INSTALL_DATADIR); the
 * source tree is reached through the build tree's marker, never by a path
 * stored in the binary.
 */
#include "datadir.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TFPROV_INSTALL_DATADIR
#define TFPROV_INSTALL_DATADIR "/usr/local/share/tfprov"
#endif

static char dir[PATH_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int is_dir_realpath(const char *path)
{
	char real[PATH_MAX];

	if (realpath(path, real) == NULL || access(real, R_OK | X_OK) != 0)
		return 0;
	snprintf(dir, sizeof(dir), "%s", real);
	return 1;
}

static void lookup(void)
{
	const char *env = getenv("TFPROV_DATADIR");
	char exe[PATH_MAX], cand[PATH_MAX + 32];
	ssize_t n;

	if (env != NULL && *env != '\0') {
		snprintf(dir, sizeof(dir), "%s", env);
		return;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;

		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash != NULL) {
			*slash = '\0';
			snprintf(cand, sizeof(cand), "%s/tfprov-datadir", exe);
			if (is_dir_realpath(cand))
				return;
			snprintf(cand, sizeof(cand), "%s/../share/tfprov", exe);
			if (is_dir_realpath(cand))
				return;
		}
	}
	snprintf(dir, sizeof(dir), "%s", TFPROV_INSTALL_DATADIR);
}

const char *datadir(void)
{
	pthread_once(&once, lookup);
	return dir;
}

const char *datadir_path(const char *env, const char *rel, char *buf, size_t n)
{
	const char *e = env != NULL ? getenv(env) : NULL;

	if (e != NULL && *e != '\0')
		return e;
	snprintf(buf, n, "%s/%s", datadir(), rel);
	return buf;
}
