/*
 * libcheck.h - can the libraries a TensorFlow build loads be loaded from the
 * stack's directories? The check behind `tfprov verify`.
 *
 * A forked child (isolate.h) looks for each soname in the given directories
 * in order, the way LD_LIBRARY_PATH is searched, and dlopen()s the file it
 * finds by absolute path; a broken library can crash or hang only the child.
 * Each result names the soname, the file loaded, the directories searched,
 * the loader's own error and, for a failure, the fix from the setup guide's
 * troubleshooting table.
 *
 * Dependencies: the loader of a running process does not re-read
 * LD_LIBRARY_PATH, so a listed library's DT_NEEDED entries are satisfied by
 * libraries already loaded under that soname, then by the loader's normal
 * search. The child therefore loads the whole list and retries failures until
 * no more succeed: list a library's stack-local dependencies too (the TF lists
 * below do) and the order of the list does not matter.
 *
 * The sonames are data: callers pass any list; the list TF loads for a CUDA
 * and cuDNN generation is the knowledge base's (data/compat.yaml sonames,
 * compat_tf_libraries()), the same one validate checks the artifacts against.
 * struct libcheck_result owns its items; release it with
 * libcheck_result_release().
 */
#ifndef TFPROV_LIBCHECK_H
#define TFPROV_LIBCHECK_H

#include "util.h"

#include <stddef.h>

enum libcheck_flags {
	/* A soname absent from every dir may come from the loader's default search
	 * (ld.so cache, system dirs); it is then ok with from_system set. */
	LIBCHECK_SYSTEM_FALLBACK = 1 << 0,
};

enum libcheck_state {
	LIBCHECK_NOT_RUN = 0, /* the child died before reaching it */
	LIBCHECK_OK,
	LIBCHECK_NOT_FOUND,   /* in none of the directories (nor the system, with the flag) */
	LIBCHECK_LOAD_FAILED, /* found, but dlopen failed */
	LIBCHECK_CRASHED,     /* loading it killed or hung the child */
};

struct libcheck_item {
	char soname[96];
	enum libcheck_state state;
	int from_system;    /* loaded through the default search, not from the dirs */
	char path[1024];    /* file found/loaded ("" when not found) */
	char error[640];    /* dlerror(), or what happened */
	const char *advice; /* static text for a failure, NULL when ok */
};

struct libcheck_result {
	struct libcheck_item *items;
	size_t n;
	size_t nfail;
	char *searched;  /* the dirs, ':'-joined (an LD_LIBRARY_PATH value); owned */
	char child[128]; /* how the child ended when it did not finish: "killed by signal 11 ..." */
};

/*
 * Checks every soname against dirs. Returns 0 when all load, TF_EVERIFY when
 * one or more fail (see res->items), TF_EFAIL when no child could be started.
 * res is always initialised; release it.
 */
int libcheck_run(const char *const *dirs, size_t ndirs, const char *const *sonames, size_t nsonames,
                 unsigned flags, struct libcheck_result *res);
void libcheck_result_release(struct libcheck_result *res);

/* The troubleshooting advice for a soname in a given failure state (static). */
const char *libcheck_advice(const char *soname, enum libcheck_state state);
const char *libcheck_state_name(enum libcheck_state state);

#endif
