/*
 * lazylibs.h - which of libcurl, libarchive and libzip tfprov loads when first
 * called (lazylibs.c) rather than links in.
 */
#ifndef TFPROV_LAZYLIBS_H
#define TFPROV_LAZYLIBS_H

/* The soname lib ("libcurl", "libarchive", "libzip") is dlopen()ed from, or NULL
 * when the build links it in (the portable release, TFPROV_LAZY_LIBS off). */
const char *lazylibs_soname(const char *lib);

#endif
