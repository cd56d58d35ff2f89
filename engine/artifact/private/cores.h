/*
 * cores.h - the cores a pool of decoders shares (artifacts.c's decode-ahead).
 *
 * A decoder holds a core while it decodes and lets it go while it waits for
 * its download's next bytes; a free core goes to the waiting decoder of the
 * lowest rank (the pool ranks its archives largest first), and a decoder
 * holding a core hands it over at its next block when a lower rank waits.
 * So on a fast link no more archives decode at once than there are cores,
 * the largest first (the longest decode never shares its core), and on a slow
 * link the decoders that starve leave their cores to archives whose bytes
 * are there. The pool's thread count (--jobs) stays the cap on how many
 * archives are open at once.
 */
#ifndef TFPROV_CORES_H
#define TFPROV_CORES_H

#include <stddef.h>
#include <stdint.h>

struct cores;

/* ncores cores shared by decoders of ranks [0, nranks). */
struct cores *cores_new(size_t ncores, size_t nranks);
void cores_free(struct cores *k);

/* Times a decoder let its core go because it had no bytes (for the bench). */
uint64_t cores_starved(const struct cores *k);
/* Decoders waiting for a core now. */
size_t cores_waiting(struct cores *k);

/* One decoder's hold on a core of k (the shares of one zip: one rank each). */
struct core_claim {
	struct cores *k; /* NULL: nothing shared, every call below does nothing */
	size_t rank;
	int held;
};

/* Waits for a core (returns without one once tf_interrupted is set). */
void claim_take(struct core_claim *cl);
/* Lets the core go; `starved`: because the decoder waits for its bytes. */
void claim_give(struct core_claim *cl, int starved);
/* Hands the core over when a decoder of a lower rank waits for one. */
void claim_yield(struct core_claim *cl);

#endif
