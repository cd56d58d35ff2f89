/*
 * datadir.h - where tfprov's shipped data lives (knowledge base, bench
 * reference and script, manifests), found at run time, never baked in from
 * the source tree.
 *
 * Lookup, first match wins:
 *  1. $TFPROV_DATADIR (an explicit override, e.g. for tests);
 *  2. a build tree: the marker symlink "tfprov-datadir" next to the
 *     executable, which the build points at the source tree (an installed
 *     binary has no such file beside it);
 *  3. relative to the executable: <dir of /proc/self/exe>/../share/tfprov,
 *     so a relocated install (binary + share dir copied together) works;
 *  4. the install prefix chosen at configure time, <prefix>/share/tfprov.
 * The relative paths below it mirror the source tree: data/compat.yaml,
 * bench/reference.yaml, bench/bench_conv.py, manifests/.
 */
#ifndef TFPROV_DATADIR_H
#define TFPROV_DATADIR_H

#include <stddef.h>

/* The data directory (a static string, computed once, thread-safe). */
const char *datadir(void);

/* $env when set and non-empty, else datadir()/rel formatted into buf. */
const char *datadir_path(const char *env, const char *rel, char *buf, size_t n);

#endif
