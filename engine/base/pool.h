/*
 * pool.h - run n independent jobs on up to `jobs` threads.
 *
 * Jobs are taken in index order (callers sort them, e.g. largest first),
 * each by exactly one thread; pool_run returns when all are done. fn must be
 * thread-safe for distinct indexes; events (ev_*) may be emitted from it.
 */
#ifndef TFPROV_POOL_H
#define TFPROV_POOL_H

#include <stddef.h>

/* The number of online CPUs (at least 1). */
size_t pool_ncpu(void);

/* Calls fn(i, arg) for i in [0, n); jobs <= 1 runs them on the caller's thread. */
void pool_run(size_t n, size_t jobs, void (*fn)(size_t i, void *arg), void *arg);

#endif
