/*
 * cores.c - the cores a pool of decoders shares (private/cores.h).
 *
 * One mutex and one condition variable; waiters are counted per rank, and
 * `best` is the lowest rank with a waiter, so that a holder's yield check is
 * one relaxed load.
 */
#include "cores.h"
#include "error.h"
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct cores {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t free;
	size_t nranks;
	unsigned *waiting; /* per rank */
	size_t best;       /* the lowest rank waiting; nranks: none */
	uint64_t starved;
};

struct cores *cores_new(size_t ncores, size_t nranks)
{
	struct cores *k = xcalloc(1, sizeof(*k));
	pthread_mutex_init(&k->mu, NULL);
	pthread_cond_init(&k->cv, NULL);
	k->free = ncores ? ncores : 1;
	k->nranks = nranks ? nranks : 1;
	k->waiting = xcalloc(k->nranks, sizeof(*k->waiting));
	k->best = k->nranks;
	return k;
}

void cores_free(struct cores *k)
{
	if (k == NULL)
		return;
	pthread_mutex_destroy(&k->mu);
	pthread_cond_destroy(&k->cv);
	free(k->waiting);
	free(k);
}

uint64_t cores_starved(const struct cores *k)
{
	return k ? __atomic_load_n(&k->starved, __ATOMIC_RELAXED) : 0;
}

size_t cores_waiting(struct cores *k)
{
	size_t n = 0;
	pthread_mutex_lock(&k->mu);
	for (size_t r = 0; r < k->nranks; r++)
		n += k->waiting[r];
	pthread_mutex_unlock(&k->mu);
	return n;
}

static void rescan_best(struct cores *k)
{
	size_t r = 0;
	while (r < k->nranks && k->waiting[r] == 0)
		r++;
	__atomic_store_n(&k->best, r, __ATOMIC_RELAXED);
}

void claim_take(struct core_claim *cl)
{
	struct cores *k = cl->k;
	if (k == NULL || cl->held)
		return;
	size_t rank = cl->rank < k->nranks ? cl->rank : k->nranks - 1;
	pthread_mutex_lock(&k->mu);
	k->waiting[rank]++;
	if (rank < k->best)
		__atomic_store_n(&k->best, rank, __ATOMIC_RELAXED);
	while ((k->free == 0 || k->best < rank) && !tf_interrupted) {
		/* Timed: an interrupt (a signal handler's flag) is seen. */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 50 * 1000 * 1000;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&k->cv, &k->mu, &until);
	}
	k->waiting[rank]--;
	if (k->waiting[rank] == 0 && k->best == rank)
		rescan_best(k);
	if (k->free > 0 && !tf_interrupted) {
		k->free--;
		cl->held = 1;
	}
	pthread_mutex_unlock(&k->mu);
	/* Another waiter of this rank, or the next rank, may go on now. */
	pthread_cond_broadcast(&k->cv);
}

void claim_give(struct core_claim *cl, int starved)
{
	struct cores *k = cl->k;
	if (k == NULL || !cl->held)
		return;
	pthread_mutex_lock(&k->mu);
	k->free++;
	cl->held = 0;
	if (starved)
		__atomic_fetch_add(&k->starved, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&k->mu);
	pthread_cond_broadcast(&k->cv);
}

void claim_yield(struct core_claim *cl)
{
	struct cores *k = cl->k;
	if (k == NULL || !cl->held || __atomic_load_n(&k->best, __ATOMIC_RELAXED) >= cl->rank)
		return;
	claim_give(cl, 0);
	claim_take(cl);
}
