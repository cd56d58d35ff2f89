/*
 * locktext.h - what manifest.c needs of locktext.c beyond manifest.h: the
 * requirements parser with the lock-input switch of a `complete: false`
 * pip section.
 */
#ifndef TFPROV_LOCKTEXT_H
#define TFPROV_LOCKTEXT_H

#include "manifest.h"

/*
 * pip_requirements_parse() with lock_input: the pins of a `complete: false`
 * section, which `tfprov lock` completes. There a requirement may leave out
 * its hashes, or name a range (tf-keras~=2.20.0): lock resolves and hashes
 * it. Warnings, not errors.
 */
int pip_requirements_parse_lock(const char *file, const char *text, struct pos base, int block,
                                int lock_input, struct pip_req **reqs, size_t *nreqs,
                                struct diags *d);

#endif
