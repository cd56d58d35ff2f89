/*
 * unpack_pool.h - unpacking for artifacts.c's decode-ahead pool: following a
 * download as it grows, and decoders that share the machine's cores
 * (cores.h). Private to the artifact folder.
 */
#ifndef TFPROV_UNPACK_POOL_H
#define TFPROV_UNPACK_POOL_H

#include "artifact.h"
#include "cores.h"
#include "error.h"

/* A decoder of a pool: the cores it shares and its archive's rank there. */
struct unpack_share {
	struct cores *cores; /* NULL: not shared */
	size_t rank;
};

/* A file being downloaded by another thread (fetch_item's stream fields). */
struct unpack_follow {
	const uint64_t *bytes; /* bytes written so far, from offset 0 */
	const int *restarts;   /* changes when the file is cut to start over */
	const int *done;       /* set once the writer has finished (ok or not) */
	const int *failed;     /* set when this download failed (hash, size, error), or NULL */
	int64_t size;          /* the expected size, -1 if unknown */
	const char *label;     /* name in progress events and messages, or NULL */
	uint64_t budget;       /* most file bytes to write before verification, 0: none */
	int budget_pinned;     /* budget is the recorded unpacked_size (see below) */
	struct unpack_share share;
};

/*
 * unpack_archive() of a file that is still being written: decoding overlaps
 * the download. The bytes are not verified yet: the caller places nothing
 * until the download's sha256 is checked. Fails (and removes dest_dir) when
 * the download starts over, ends early or fails; the caller then unpacks the
 * final, verified file with unpack_archive().
 *
 * Unverified bytes are decoded on a budget: writing more than `budget` file
 * bytes stops the decoder at once and removes dest_dir. A pinned budget (the
 * lock's unpacked_size) exceeded is TF_EINTEGRITY; otherwise (a ratio of
 * the compressed size) it is TF_EFAIL, and the caller waits for the
 * verification before unpacking anything.
 *
 * The decoder holds a core of follow->share while it decodes and lets it go
 * whenever it waits for the download's next bytes.
 */
int unpack_archive_follow(struct ctx *c, const char *part, const struct unpack_follow *follow,
                          const char *dest_dir, int strip, struct unpack_result *res,
                          struct why *why);

/* unpack_archive_named(), unpack_zip_parallel() (no callback) and
 * unpack_conda_package() for a decoder of a pool sharing cores. */
int unpack_pool_archive(struct ctx *c, const char *archive, const char *label, int64_t pinned,
                        const char *dest_dir, int strip, const struct unpack_share *share,
                        struct unpack_result *res, struct why *why);
int unpack_pool_zip(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                    const struct unpack_share *share, struct unpack_result *res, struct why *why);
int unpack_pool_conda(struct ctx *c, const char *file, int is_conda, const char *dest_dir,
                      const struct unpack_share *share, struct unpack_result *res, struct why *why);

#endif
