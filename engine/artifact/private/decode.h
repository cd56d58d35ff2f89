/*
 * decode.h - the decoder pool of the artifact room (decode.c): one
 * fetch_all on its own thread while up to --jobs decoders unpack the
 * archives of an artset, largest first, following their growing downloads
 * (or from the verified files), sharing the machine's cores (cores.h).
 * Used by decode-ahead (ahead.c) and by artset_unpack (artifacts.c).
 * Private to the artifact folder.
 */
#ifndef TFPROV_DECODE_H
#define TFPROV_DECODE_H

#include "artifact.h"
#include "cores.h"
#include "error.h"

#include <pthread.h>
#include <time.h>

struct fetch_job {
	struct ctx *c;
	struct fetch_item *items;
	size_t n;
	int rc;
	int done;
};

/* The archives of one artset being decoded, up to --jobs at once. */
struct decode {
	struct ctx *c;
	struct artset *s;
	struct fetch_job *fj;
	size_t *order; /* indexes of the archives decoded here, largest first */
	size_t norder;
	char **parts; /* where each archive is unpacked; NULL: not decoded here */
	struct unpack_result *res;
	int *ready;          /* unpacked completely */
	struct why *why;     /* after the download: why unpack_archive failed */
	struct why *stopped; /* before: why decoding on a pinned budget stopped */
	int verified;        /* 0: follow the downloads; 1: from the verified files */
	size_t jobs;         /* decoders */
	struct cores *cores; /* the cores they share (cores.h) */
	size_t *rank;        /* each archive's place in `order`: its claim on a core */
	pthread_mutex_t mu;
	int *taken;            /* decode_pick gave it to a decoder */
	int64_t *known;        /* size of the verified file, when the lock has none */
	struct timespec *done; /* when the tree was complete (art_take_tree) */
};

/* How many archives decode at once: --jobs, else one per core in [4, 8]. */
size_t decoders(const struct ctx *c);
/* Every artifact of s downloaded by job; none decoded until decode_plan(). */
void decode_init(struct decode *d, struct ctx *c, struct artset *s, struct fetch_job *job);
/* The decoders' queue: every archive with a part and not ready, largest first. */
void decode_plan(struct decode *d);
/*
 * Runs fetch_all on its own thread while the pool decodes d->order from the
 * growing downloads; then fills each artifact's path in the cache. Returns
 * fetch_all's result; *stopped the first archive whose pinned budget was
 * exceeded by bytes that then verified (the lock is wrong), or n.
 */
int decode_fetch(struct decode *d, size_t jobs, size_t *stopped);
/* After a verified fetch: what the decoders did not finish, from the verified files. */
void decode_verified(struct decode *d, size_t jobs);
/* Removes every part but `keep` (NULL: none) and frees what d holds. */
void decode_release(struct decode *d, const char *keep);

#endif
