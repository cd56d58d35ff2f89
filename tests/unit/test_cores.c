/*
 * test_cores.c - the cores a decode pool shares (engine/artifact/private/cores.h):
 * no more holders than cores, a free core goes to the lowest rank waiting (the
 * largest archive), a holder hands its core over at a yield when a lower rank
 * waits and keeps it otherwise, and a core let go while waiting for bytes is
 * counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <unistd.h>

#include "cores.h"

struct waiter {
	struct core_claim cl;
	int *order; /* where the ranks that got a core are written, in turn */
	int *next;
	pthread_mutex_t *mu;
	pthread_t th;
};

static void *take_and_note(void *arg)
{
	struct waiter *w = arg;
	claim_take(&w->cl);
	pthread_mutex_lock(w->mu);
	w->order[(*w->next)++] = (int)w->cl.rank;
	pthread_mutex_unlock(w->mu);
	claim_give(&w->cl, 0);
	return NULL;
}

/* Until n decoders wait in claim_take. */
static void settle(struct cores *k, size_t n)
{
	while (cores_waiting(k) < n)
		usleep(1000);
}

static void test_a_free_core_goes_to_the_lowest_rank_waiting(void **state)
{
	(void)state;
	struct cores *k = cores_new(1, 4);
	struct core_claim holder = {.k = k, .rank = 1};
	claim_take(&holder);
	assert_true(holder.held);
	int order[3], next = 0;
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	/* Ranks 3 then 2 then 0 start waiting; 0 must get the core first. */
	struct waiter w[3];
	int ranks[3] = {3, 2, 0};
	for (int i = 0; i < 3; i++) {
		w[i] = (struct waiter){.cl = {.k = k, .rank = (size_t)ranks[i]},
		                       .order = order,
		                       .next = &next,
		                       .mu = &mu};
		assert_int_equal(pthread_create(&w[i].th, NULL, take_and_note, &w[i]), 0);
		settle(k, (size_t)i + 1);
	}
	assert_int_equal(next, 0); /* nobody passed the holder */
	claim_give(&holder, 0);
	for (int i = 0; i < 3; i++)
		pthread_join(w[i].th, NULL);
	assert_int_equal(next, 3);
	assert_int_equal(order[0], 0);
	assert_int_equal(order[1], 2);
	assert_int_equal(order[2], 3);
	cores_free(k);
}

static void test_no_more_holders_than_cores(void **state)
{
	(void)state;
	struct cores *k = cores_new(2, 3);
	struct core_claim a = {.k = k, .rank = 0}, b = {.k = k, .rank = 1};
	claim_take(&a);
	claim_take(&b);
	int order[1], next = 0;
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct waiter c = {.cl = {.k = k, .rank = 2}, .order = order, .next = &next, .mu = &mu};
	assert_int_equal(pthread_create(&c.th, NULL, take_and_note, &c), 0);
	settle(k, 1);
	assert_int_equal(next, 0); /* a third decoder waits for one of the two cores */
	claim_give(&b, 1);         /* b waits for its bytes: its core goes to c */
	pthread_join(c.th, NULL);
	assert_int_equal(next, 1);
	assert_int_equal(cores_starved(k), 1);
	claim_give(&a, 0);
	cores_free(k);
}

static void test_a_holder_yields_only_to_a_lower_rank(void **state)
{
	(void)state;
	struct cores *k = cores_new(1, 3);
	struct core_claim small = {.k = k, .rank = 2};
	claim_take(&small);
	claim_yield(&small); /* nobody waits: it keeps the core */
	assert_true(small.held);

	int order[2], next = 0;
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct waiter big = {.cl = {.k = k, .rank = 0}, .order = order, .next = &next, .mu = &mu};
	assert_int_equal(pthread_create(&big.th, NULL, take_and_note, &big), 0);
	settle(k, 1);
	assert_int_equal(next, 0);
	/* At its next block the small archive hands the core to the largest,
	 * and gets it back when that one is done. */
	claim_yield(&small);
	assert_true(small.held);
	pthread_join(big.th, NULL);
	assert_int_equal(next, 1);
	assert_int_equal(order[0], 0);
	claim_give(&small, 0);
	assert_false(small.held);
	cores_free(k);
}

static void test_no_cores_means_no_waiting(void **state)
{
	(void)state;
	struct core_claim none = {.k = NULL, .rank = 0};
	claim_take(&none);
	claim_yield(&none);
	claim_give(&none, 1);
	assert_false(none.held);
	assert_int_equal(cores_starved(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_free_core_goes_to_the_lowest_rank_waiting),
	    cmocka_unit_test(test_no_more_holders_than_cores),
	    cmocka_unit_test(test_a_holder_yields_only_to_a_lower_rank),
	    cmocka_unit_test(test_no_cores_means_no_waiting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
