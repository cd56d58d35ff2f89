/*
 * artifact_int.h - what the artifact room's files share.
 *
 * Private to engine/artifact/ (a PRIVATE include directory of its library; tests
 * see it as white-box tests): what the files of the folder share and no other
 * folder calls. What other folders use is artifact.h.
 */
#ifndef TFPROV_ARTIFACT_INT_H
#define TFPROV_ARTIFACT_INT_H

#include "artifact.h"
#include "error.h"

char *cache_part_path(const char *dir, const char *sha256);

/* Same, on an explicit cache dir. */
char *cache_lookup_dir(const char *dir, const char *sha256);

/*
 * The cache files this process hashed itself (cache.c says why a second
 * hash of one is skipped): note one after its bytes hashed to sha256; 1 when
 * path is such a file, unchanged since (*size its size), else 0.
 */
void cache_note_hashed(const char *path, const char *sha256);
int cache_was_hashed(const char *path, const char *sha256, int64_t *size);

/* Writes names/<hex> with url's basename unless a name is there already; best effort. */
void cache_name_hint(const char *dir, const char *sha256, const char *url);

/* Moves a bad file to quarantine/<hex>.<unixtime>; *out gets its new path. 0 or -errno. */
int cache_quarantine(const char *dir, const char *sha256, const char *bad, char **out);

/*
 * Puts the verified file src into mirror dir as sha256/<hex> and <basename(url)>
 * (hard links when possible, else copies). 0 or -errno.
 */
int mirror_put(const char *dir, const char *src, const char *sha256, const char *url);

/*
 * Defaults: jobs = c->jobs or 4, stall 30 s below 1 KiB/s, connect 15 s,
 * 3 retries from 500 ms, 3 errors per host, not durable (cache hits are
 * re-hashed; the step's syncfs makes downloads durable). The environment may
 * override (tests): TFPROV_FETCH_STALL_S, TFPROV_FETCH_RETRIES,
 * TFPROV_FETCH_BACKOFF_MS, TFPROV_FETCH_HOST_ERRORS, TFPROV_FETCH_DURABLE.
 */
void fetch_opts_default(struct fetch_opts *o, const struct ctx *c);

int fetch_all_opts(struct ctx *c, struct fetch_item *items, size_t n, const struct fetch_opts *o);

/*
 * The same, keeping in chain (when not NULL) every URL asked in order: url,
 * then each redirect's target; the last is the URL that answered.
 */
int http_get_small_chain(const struct ctx *c, const char *url, const char *protocols,
                         const char *accept, size_t max, char **out, size_t *len, long *status,
                         struct strvec *chain, struct why *why);

int ms_pubkey_parse(const char *text, size_t len, struct ms_pubkey *pk, struct why *why);

/* "ID (source), ID (source)": the trusted keys, for messages; caller frees. */
char *trust_describe(const struct trust *t);

/*
 * unpack_archive(), naming the archive `label` (the artifact, not its cache
 * path) in events; with pinned >= 0 as unpack_archive_pinned() (below).
 */
int unpack_archive_named(struct ctx *c, const char *archive, const char *label, int64_t pinned,
                         const char *dest_dir, int strip, struct unpack_result *res,
                         struct why *why);

/* unpack_archive() (no strip) calling on_file(arg, e) for every file written. */
int unpack_archive_each(struct ctx *c, const char *archive, const char *dest_dir,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res,
                        struct why *why);

/*
 * unpack_archive() with a hard limit: an archive whose files add up to more
 * than its recorded unpacked_size is refused with TF_EINTEGRITY (and
 * dest_dir removed) the moment the limit would be passed.
 */
int unpack_archive_pinned(struct ctx *c, const char *archive, uint64_t unpacked_size,
                          const char *dest_dir, int strip, struct unpack_result *res,
                          struct why *why);

/* The bound of artifact.h's unpack comment for an archive of `archive_size` bytes; `declared` < 0: none. */
uint64_t unpack_bound(int64_t declared, int64_t archive_size);

#endif
