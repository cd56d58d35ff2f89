/*
 * pool.c - a minimal work-sharing thread pool (see pool.h): threads take the
 * next index from one atomic counter; the caller's thread works too.
 */
#include "pool.h"
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct pool {
	size_t n, next;
	void (*fn)(size_t, void *);
	void *arg;
};

static void *worker(void *p)
{
	struct pool *pl = p;
	for (;;) {
		size_t i = __atomic_fetch_add(&pl->next, 1, __ATOMIC_RELAXED);
		if (i >= pl->n)
			return NULL;
		pl->fn(i, pl->arg);
	}
}

size_t pool_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (size_t)n : 1;
}

void pool_run(size_t n, size_t jobs, void (*fn)(size_t i, void *arg), void *arg)
{
	struct pool pl = {n, 0, fn, arg};
	if (jobs > n)
		jobs = n;
	pthread_t *th = xcalloc(jobs ? jobs : 1, sizeof(*th));
	size_t started = 0;
	for (size_t k = 1; k < jobs; k++)
		if (pthread_create(&th[started], NULL, worker, &pl) == 0)
			started++;
	worker(&pl);
	for (size_t k = 0; k < started; k++)
		pthread_join(th[k], NULL);
	free(th);
}
