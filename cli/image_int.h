/*
 * image_int.h - what the files of `tfprov image build` share: the checks of
 * the base (image_base.c) and the layer cache (image_cache.c), both called
 * by the build (image.c); and the cache's pruning (image_gc.c), called by
 * `tfprov gc` (gc.c).
 */
#ifndef TFPROV_IMAGE_INT_H
#define TFPROV_IMAGE_INT_H

#include "cli.h"
#include "image.h"
#include "manifest.h"
#include "plan.h"

#include <time.h>

/* image_base.c */

/* The stack's platform against the base's os/architecture. 0 or TF_EPRECOND (said). */
int check_base(struct ctx *c, const struct manifest *m, const struct oci_image *base,
               const char *ref);
/*
 * The base's glibc against the floor of the pip lock's wheels (the one apply
 * checks the host against, modules/pip.c): a manylinux wheel does not load on
 * an older glibc, and a base without one runs none. 0, TF_EPRECOND (said) or
 * TF_EFAIL.
 */
int check_base_glibc(struct ctx *c, const struct manifest *m, const struct oci_image *base,
                     const char *blobs, const char *ref);
/*
 * The venv venvs->v[i] (root-relative) runs pythons->v[i] (absolute, in the
 * image; "" for none to check): each must be in the base's layers (in
 * blobs), or nothing in that env runs. 0, TF_EPRECOND (said) or TF_EFAIL.
 */
int check_base_interpreters(struct ctx *c, const struct strvec *venvs, const struct strvec *pythons,
                            const struct oci_image *base, const char *blobs, const char *ref);

/* image_cache.c */

/*
 * The stack's layers of one build, as it made them or as the cache holds
 * them: n descriptors, each with the index of its step in the caller's
 * table of layer names; the venvs (root-relative) and the interpreter each
 * links to (check_base_interpreters' arguments). Owned (image_entry_release).
 */
struct image_entry {
	struct oci_desc *ls;
	int *kinds;
	size_t n;
	struct strvec venvs, pythons;
};
void image_entry_release(struct image_entry *e);

/*
 * The cache of one build: the key (sha256 of every input that determines
 * the stack's layers, see image_cache_key) and where its entry is. off says
 * why this build neither uses nor fills the cache (NULL when it does).
 */
struct image_cache {
	char key[65];
	char *dir;           /* <cache-dir>/images */
	char *entry;         /* dir/keys/<key>.json */
	char *inputs;        /* the text the key hashes, kept in the entry */
	struct why off;      /* why the cache is not used; code 0 when it is */
	int locked, lock_fd; /* dir/lock held shared (image_cache_lock) */
};
void image_cache_release(struct image_cache *ic);

/*
 * The key of the build of m on base (its plan p built), or ic->off (TF_EFAIL
 * or TF_EIO, with the reason in words): with --no-cache (no_cache), an
 * incomplete pip lock (pip resolves at build time), no interpreter for the
 * venv (its precheck refuses the build), or an input that cannot be read.
 * Never fails the build.
 */
void image_cache_key(struct ctx *c, const struct manifest *m, const struct plan *p,
                     const struct oci_image *base, int64_t epoch, int no_cache,
                     struct image_cache *ic);
/*
 * The cache's lock, dir/lock (flock): a build holds it shared from the
 * lookup of an entry until its layers are copied out, and while it stores;
 * gc holds it exclusive while it decides what goes and removes it, so an
 * entry is never pruned under a build that reads or writes it. Waits
 * (saying waiting once, when not NULL) until it is free or ^C. The fd, or
 * -errno (-EINTR: interrupted).
 */
int image_cache_lock(struct ctx *c, const char *dir, int how, const char *waiting);
/* Whether a file of the image cache is a killed store's temporary: its name
 * holds mark (".tfprov-tmp." in keys/, ".tfprov-blob-" in sha256/) and it is
 * an hour old. A store's sweep removes those; so does gc. */
struct stat;
int image_cache_is_temp(const char *name, const char *mark, const struct stat *st, time_t now);
/*
 * The entry of ic's key: 1 with *e filled (step names mapped to indexes of
 * names[0..nnames)) and the cache's lock held shared (image_cache_take or
 * image_cache_release lets it go), 0 when there is none or it does not read
 * as one (said with -v). Reads only the entry, not the blobs.
 */
int image_cache_lookup(struct ctx *c, struct image_cache *ic, const char *const *names,
                       size_t nnames, struct image_entry *e);
/*
 * e's layers into blobs (a layout's blob directory), each hashed against
 * its digest as it is copied (link_ok: oci_blob_take's). 0, the entry's
 * mtime set to now (its last use, what gc prunes by); 1 when a blob is
 * missing or does not match (said as a warning, the bad bytes moved to the
 * cache's quarantine/, the blobs taken so far removed from blobs: the caller
 * builds the layers); TF_ENOSPC or TF_EIO. Lets the lookup's lock go.
 */
int image_cache_take(struct ctx *c, struct image_cache *ic, const struct image_entry *e,
                     const char *blobs, int link_ok, const char *const *names);
/*
 * Stores e's layers (in blobs) and then the entry, each atomically (a
 * temporary file, fsync, rename), so a killed build leaves no entry that
 * names a missing or partial blob. A failure is a warning, not the build's.
 */
void image_cache_store(struct ctx *c, const struct image_cache *ic, const struct image_entry *e,
                       const char *blobs, const char *const *names);

/* image_gc.c */

/*
 * One thing gc removes from the image cache: an entry (keys/<key>.json),
 * a layer (sha256/<hex>) no kept entry names, or a killed store's
 * temporary file.
 */
enum image_gc_kind { IMAGE_GC_ENTRY, IMAGE_GC_LAYER, IMAGE_GC_TEMP };
struct image_gc_item {
	enum image_gc_kind kind;
	char *path;
	char *about; /* entry: the manifest it was built of; layer: its step; or NULL */
	long long size;
	long days; /* entry: whole days since it was last used */
};
/*
 * What gc removes of <cache-dir>/images: the entries last used (built or
 * hit: the entry file's mtime) days or more ago (days 0: every entry), the
 * layers no other entry names, the temporary files killed stores left an
 * hour ago or more. Owned (image_gc_release).
 */
struct image_gc {
	struct image_gc_item *v;
	size_t n, nentries, nlayers, ntemps;
	long long bytes;
};
void image_gc_release(struct image_gc *g);
/* What would go, under the cache's lock, into *g. 0, TF_EIO or TF_EINTR (said). */
int image_gc_list(struct ctx *c, long days, struct image_gc *g);
/*
 * Removes what listed names and still goes (the lock taken again: a build
 * may have used or stored an entry since), entries before layers. Counts
 * into *removed and *bytes. 0, TF_EIO or TF_EINTR (said).
 */
int image_gc_remove(struct ctx *c, long days, const struct image_gc *listed, size_t *removed,
                    long long *bytes);

#endif
