/*
 * tofu.h - trust on first use: fetches a small file that nothing pins yet
 * (an NVIDIA redistrib JSON a user wrote without its sha256) so that
 * `tfprov lock` can pin it.
 *
 * The only thing that vouches for the bytes is the server's TLS certificate,
 * so the URL must be https:// (redirects too), verification is always on
 * (--ca-bundle honoured; the one small-GET client, engine/artifact/httpget.c), mirrors
 * are not asked, and --offline refuses. The bytes are read whole, capped at
 * max_bytes, hashed, and written to dest atomically. The caller
 * says so in its output and writes the hash down: from then on the file is
 * pinned like any other.
 *
 * Ownership: *errmsg is malloc'd on failure. dest must not exist; it is
 * created (whole, never replacing a file) only when the call succeeds.
 */
#ifndef TFPROV_TOFU_H
#define TFPROV_TOFU_H

#include <stdint.h>

struct ctx;

/*
 * Downloads url into the new file dest. 0 with sha256_hex and *size set;
 * TF_EOFFLINE, TF_EMANIFEST (not https), TF_ENETWORK or TF_EIO with *errmsg.
 */
int tofu_fetch(struct ctx *c, const char *url, int64_t max_bytes, const char *dest,
               char sha256_hex[65], int64_t *size, char **errmsg);

#endif
