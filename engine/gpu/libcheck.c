/*
 * libcheck.c - the verify loader check (see gpu.h).
 *
 * Shared-memory protocol with the child: struct shared holds `current`, the
 * index being loaded, then the items. The child writes each item before and
 * after its dlopen, so when the child dies the parent knows which library
 * killed it and keeps every answer given before.
 */
#include "gpu.h"

#include "error.h"
#include "isolate.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Loading cuDNN 9's engine libraries (hundreds of MB) takes seconds; a
 * library that needs more than this is hung, not slow. */
#define LIBCHECK_TIMEOUT_MS 120000

struct shared {
	int current;
	int finished;
	struct libcheck_item items[];
};

struct job {
	const char *const *dirs;
	size_t ndirs;
	size_t n;
	unsigned flags;
};

const char *libcheck_state_name(enum libcheck_state state)
{
	switch (state) {
	case LIBCHECK_OK:
		return "ok";
	case LIBCHECK_NOT_FOUND:
		return "not-found";
	case LIBCHECK_LOAD_FAILED:
		return "load-failed";
	case LIBCHECK_CRASHED:
		return "crashed";
	case LIBCHECK_NOT_RUN:
		break;
	}
	return "not-run";
}

const char *libcheck_advice(const char *soname, enum libcheck_state state)
{
	if (state == LIBCHECK_OK)
		return NULL;
	if (state == LIBCHECK_CRASHED)
		return "loading this library crashed or hung the checking process: the file is "
		       "corrupt or built for another system; run `tfprov verify --deep` and "
		       "`tfprov apply` to restore it";
	if (state == LIBCHECK_LOAD_FAILED)
		return "the file is there but does not load (wrong architecture, truncated, or a "
		       "dependency missing: see the loader's error); run `tfprov verify --deep` to "
		       "compare it with what was placed, then `tfprov apply`";
	if (state == LIBCHECK_NOT_RUN)
		return "not checked: the checking process ended before reaching it";
	/* Not found: the guide's "Could not load dynamic library ..." rows. */
	if (str_starts_with(soname, "libcudnn"))
		return "cuDNN is not placed where the stack's LD_LIBRARY_PATH points: check "
		       "cudnn.placement (merge copies it into the CUDA prefix's lib64, separate "
		       "keeps its own prefix, which must be on LD_LIBRARY_PATH) and its cuDNN "
		       "major against the TF build, then run `tfprov apply`";
	if (str_starts_with(soname, "libcudart"))
		return "the CUDA runtime of this major is not in the stack's CUDA prefix: TF "
		       "2.4-2.14 load libcudart.so.11.0, TF 2.15+ libcudart.so.12; check "
		       "cuda.version against the TF build and run `tfprov apply`";
	if (str_starts_with(soname, "libcu") || str_starts_with(soname, "libnvJitLink"))
		return "a CUDA library component is missing from the stack's CUDA prefix: add it "
		       "to the cuda components (TF needs cudart, cublas, cufft, curand, cusolver, "
		       "cusparse and, for CUDA 12, nvjitlink) and run `tfprov apply`";
	return "the library is in none of the searched directories: check the stack's "
	       "LD_LIBRARY_PATH and run `tfprov apply`";
}

static void copy_trunc(char *dst, size_t n, const char *src)
{
	size_t len = strnlen(src, n - 1);
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* First dirs[i]/soname that exists (following links), like the loader's search.
 * 0, or -ENOENT when no directory has it. */
static int find_in_dirs(const struct job *job, const char *soname, char *path, size_t n)
{
	struct stat sb;
	size_t i;

	for (i = 0; i < job->ndirs; i++) {
		int len = snprintf(path, n, "%s/%s", job->dirs[i], soname);
		if (len < 0 || (size_t)len >= n)
			continue;
		if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
			return 0;
	}
	path[0] = '\0';
	return -ENOENT;
}

/* One dlopen attempt; fills the item. Handles stay open: later libraries may need them. */
static int try_load(const struct job *job, struct libcheck_item *it)
{
	struct link_map *lm = NULL;
	const char *err;
	void *h;

	if (find_in_dirs(job, it->soname, it->path, sizeof(it->path)) < 0) {
		if (!(job->flags & LIBCHECK_SYSTEM_FALLBACK)) {
			it->state = LIBCHECK_NOT_FOUND;
			copy_trunc(it->error, sizeof(it->error),
			           "not found in any searched directory");
			return -ENOENT;
		}
		h = dlopen(it->soname, RTLD_NOW | RTLD_LOCAL);
		if (h == NULL) {
			it->state = LIBCHECK_NOT_FOUND;
			err = dlerror();
			copy_trunc(it->error, sizeof(it->error),
			           err != NULL ? err : "not found by the loader");
			return -ENOENT;
		}
		it->from_system = 1;
	} else {
		h = dlopen(it->path, RTLD_NOW | RTLD_LOCAL);
		if (h == NULL) {
			it->state = LIBCHECK_LOAD_FAILED;
			err = dlerror();
			copy_trunc(it->error, sizeof(it->error),
			           err != NULL ? err : "dlopen failed");
			return TF_EFAIL;
		}
	}
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL && lm->l_name != NULL &&
	    lm->l_name[0] != '\0')
		copy_trunc(it->path, sizeof(it->path), lm->l_name);
	it->state = LIBCHECK_OK;
	it->error[0] = '\0';
	return 0;
}

static int child_check(void *arg, void *mem)
{
	const struct job *job = arg;
	struct shared *sh = mem;
	int progress = 1;
	size_t i;

	/* Retry until a pass loads nothing new: a dependency listed later may
	 * satisfy an earlier failure. A crash is recorded by the parent. */
	while (progress) {
		progress = 0;
		for (i = 0; i < job->n; i++) {
			struct libcheck_item *it = &sh->items[i];

			if (it->state == LIBCHECK_OK || it->state == LIBCHECK_NOT_FOUND ||
			    it->state == LIBCHECK_CRASHED)
				continue;
			sh->current = (int)i;
			if (try_load(job, it) == 0)
				progress = 1;
		}
	}
	sh->current = -1;
	sh->finished = 1;
	return 0;
}

int libcheck_child_main(int argc, char **argv, void *shared, size_t size)
{
	struct job job;
	char *end1, *end2;

	if (argc < 2)
		return 64;
	job.flags = (unsigned)strtoul(argv[0], &end1, 10);
	job.n = strtoul(argv[1], &end2, 10);
	if (*end1 != '\0' || *end2 != '\0' ||
	    job.n > (size - sizeof(struct shared)) / sizeof(struct libcheck_item))
		return 64;
	job.dirs = (const char *const *)argv + 2;
	job.ndirs = (size_t)argc - 2;
	return child_check(&job, shared);
}

int libcheck_run(const char *const *dirs, size_t ndirs, const char *const *sonames, size_t nsonames,
                 unsigned flags, struct libcheck_result *res)
{
	struct job job = {dirs, ndirs, nsonames, flags};
	size_t size = sizeof(struct shared) + nsonames * sizeof(struct libcheck_item);
	struct strbuf sb = STRBUF_INIT;
	struct isolate_status st;
	struct libcheck_item *it;
	struct isolate_shm shm;
	struct shared *sh;
	const char **args;
	char nums[2][24];
	size_t i, round;
	int ret = 0;

	memset(res, 0, sizeof(*res));
	for (i = 0; i < ndirs; i++) {
		if (i > 0)
			strbuf_adds(&sb, ":");
		strbuf_adds(&sb, dirs[i]);
	}
	res->searched = strbuf_detach(&sb);
	res->n = nsonames;
	res->items = xcalloc(nsonames ? nsonames : 1, sizeof(*res->items));

	if (isolate_shm_open(&shm, size) < 0)
		return TF_EFAIL;
	sh = shm.p;
	/* The exec'd child's arguments: FLAGS N DIRS... */
	args = xcalloc(ndirs + 2, sizeof(*args));
	snprintf(nums[0], sizeof(nums[0]), "%u", flags);
	snprintf(nums[1], sizeof(nums[1]), "%zu", nsonames);
	args[0] = nums[0];
	args[1] = nums[1];
	for (i = 0; i < ndirs; i++)
		args[2 + i] = dirs[i];
	sh->current = -1;
	for (i = 0; i < nsonames; i++)
		copy_trunc(sh->items[i].soname, sizeof(sh->items[i].soname), sonames[i]);
	/* A library that kills the child is marked and the check starts over
	 * without it, so one bad file does not hide the state of the others. */
	for (round = 0; round <= nsonames; round++) {
		for (i = 0; i < nsonames; i++) {
			if (sh->items[i].state != LIBCHECK_CRASHED)
				sh->items[i].state = LIBCHECK_NOT_RUN;
		}
		sh->current = -1;
		if (isolate_exec("libcheck", args, ndirs + 2, child_check, &job, &shm,
		                 LIBCHECK_TIMEOUT_MS, &st) < 0) {
			ret = TF_EFAIL;
			goto out;
		}
		if (st.maxrss_kib > res->child_maxrss_kib)
			res->child_maxrss_kib = st.maxrss_kib;
		if (sh->finished)
			break;
		isolate_describe(&st, LIBCHECK_TIMEOUT_MS, res->child, sizeof(res->child));
		if (sh->current < 0 || (size_t)sh->current >= nsonames)
			break; /* died outside any dlopen: nothing to skip next time */
		it = &sh->items[sh->current];
		it->state = LIBCHECK_CRASHED;
		snprintf(it->error, sizeof(it->error), "loading it: %s", res->child);
	}
	for (i = 0; i < nsonames; i++) {
		it = &res->items[i];
		*it = sh->items[i];
		it->soname[sizeof(it->soname) - 1] = '\0';
		it->path[sizeof(it->path) - 1] = '\0';
		it->error[sizeof(it->error) - 1] = '\0';
		/* A pointer written by the child is meaningless here; recompute. */
		it->advice = libcheck_advice(it->soname, it->state);
		if (it->state != LIBCHECK_OK)
			res->nfail++;
	}
	ret = res->nfail ? TF_EVERIFY : 0;
out:
	free(args);
	isolate_shm_close(&shm);
	return ret;
}

void libcheck_result_release(struct libcheck_result *res)
{
	free(res->items);
	free(res->searched);
	memset(res, 0, sizeof(*res));
}
