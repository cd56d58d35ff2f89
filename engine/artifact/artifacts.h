/*
 * artifacts.h - pinned artifacts of a step: fetch into the cache, unpack
 * into one staged tree. An artset owns its strings; a staged owns its
 * entries (as place_entry, ready for txn_put_tree / txn_merge_tree).
 */
#ifndef TFPROV_ARTIFACTS_H
#define TFPROV_ARTIFACTS_H

#include "module.h"

struct unpack_result;

/*
 * What a step does with an artifact, so what decode-ahead may do for it
 * before the step runs (artset_predecode).
 */
enum art_unpack {
	ART_FILE = 0,  /* used as a file (a runfile, a JSON, an sdist): not decoded ahead */
	ART_TREE = 1,  /* an archive of artset_fetch_unpack (cuda, cudnn) */
	ART_WHEEL = 2, /* a wheel the native installer unpacks (wheel.c) */
	ART_CONDA = 3, /* a conda package conda.c extracts into its package cache */
};

struct art {
	char *name;
	char *url;
	char sha256[65];
	int64_t size;
	int strip;
	int64_t unpacked; /* the lock's unpacked_size, -1 when not recorded */
	char *path;       /* after fetch: the verified file in the cache */
	int cached;
	int unpack; /* enum art_unpack: how the step unpacks it (decode-ahead may) */
};

struct artset {
	struct art *v;
	size_t n;
};

struct staged {
	struct place_entry *v;
	size_t n, cap;
	size_t *ht; /* open-addressing index of v by path: slot = index + 1 */
	size_t htcap;
};

void artset_add(struct artset *s, const char *name, const char *url, const char *sha256,
                int64_t size, int strip);
void artset_add_artifact(struct artset *s, const struct artifact *a, int default_strip);
/* Fetches the pinned redistrib JSON, resolves its components into s. */
/*
 * Fails a step whose redist JSON has no sha256 yet (lock input): names the
 * manifest position and `tfprov lock`. Returns TF_EMANIFEST.
 */
int step_fail_unpinned(struct step *s, const struct manifest *m, const char *what,
                       const struct redist_ref *r);
int artset_add_redist(struct ctx *c, struct artset *s, const struct redist_ref *r,
                      const char *platform, struct step *st);
int artset_fetch(struct ctx *c, struct artset *s, struct step *st);
void artset_release(struct artset *s);

/* Marks s->v[from..] as archives the step unpacks with artset_fetch_unpack. */
void artset_mark_unpack(struct artset *s, size_t from);
/* Marks s->v[i] as decoded ahead for a Python step (ART_WHEEL, ART_CONDA). */
void artset_mark_python(struct artset *s, size_t i, enum art_unpack kind);
/*
 * Decode-ahead: fetches and verifies every artifact of s (a whole plan's)
 * into the cache and, at the same time, unpacks those marked `unpack` with
 * artset_fetch_unpack's machinery (one pool of --jobs decoders over all of
 * them, largest first, each following its growing download on the same
 * budget) into this run's scratch directory in the cache, never into the
 * root. The results are kept on the ctx by sha256 until a step's
 * artset_fetch_unpack renames them into its stage. 0, or fetch_all's error
 * (it reported what failed; *failed == s->n), or a decode error: *failed is
 * the archive, *errmsg the message (caller frees).
 */
int artset_predecode(struct ctx *c, struct artset *s, size_t *failed, char **errmsg);
/* Removes this run's scratch (whatever no step took over) and its lock. */
void artset_predecode_release(struct ctx *c);
/*
 * A Python step's share of decode-ahead: the tree decode-ahead made of a
 * verified artifact of `kind` (ART_WHEEL, ART_CONDA), found by its sha256
 * or, when sha256 is NULL, as the verified cache file that `file` is a hard
 * link of (a wheelhouse entry), is renamed to dest (which must not exist)
 * and its file list moved into *res. It is used only when every entry of
 * the list is there with its type and size and nothing in it changed after
 * it was decoded (ctime); a damaged tree is removed. Returns 0 when taken;
 * -ENOENT when there is none to take (not decoded ahead, failed, damaged, on
 * another filesystem): the caller decodes the verified file itself.
 */
int artset_take_predecoded(struct ctx *c, enum art_unpack kind, const char *sha256,
                           const char *file, const char *dest, struct unpack_result *res);

void staged_add(struct staged *t, const char *path, char type, const char *sha256, int64_t size,
                unsigned mode, const char *link);
/* Fetches (cache first) and unpacks every artifact into one staged tree,
 * decoding each archive while it downloads. */
int artset_fetch_unpack(struct ctx *c, struct artset *s, const char *stage, struct staged *out,
                        struct step *st);
void staged_release(struct staged *t);
/*
 * The one recorder of a tree something else wrote (a runfile, a venv, a
 * conda env): adds every directory, symlink and regular file below the host
 * directory `host` (sockets, fifos left out) to t, files with their sha256
 * (NULL when unreadable). 0 or the walk's -errno.
 */
int staged_record_tree(struct staged *t, const char *host);

#endif
