/*
 * cache.h - the content-addressed download cache and mirror directories.
 *
 * Layout under a cache dir (shared by every stack of the machine):
 *   sha256/<hex>                 a verified artifact, mode 0444, never rewritten
 *                                (read-only; mirror build hard-links it into a
 *                                directory a web server reads)
 *   partial/<hex>.part           a download in progress (resumed with Range), 0600
 *   quarantine/<hex>.<unixtime>  bytes that failed verification, kept for a human,
 *                                0400: they may be anything, a root-only file too
 *   names/<hex>                  the file name a pip artifact of that hash had where
 *                                it was found (pipart.h): a hint for naming the
 *                                verified file, never trusted for its bytes
 *   unpack/run-XXXXXX/<hex>      an apply's decode-ahead (artifacts.h), held by an
 *                                flock on unpack/run-XXXXXX.lock; removed when the
 *                                run ends, or by the next run if it was killed
 *
 * The cache dir and these three are 0700: unverified bytes are the owner's alone.
 *
 * Invariant: a file appears under sha256/ only by rename() after its bytes
 * hashed to its name, so lookups trust the name. A mirror directory
 * (`tfprov mirror build`, `--mirror DIR`) holds sha256/<hex> plus a copy or hard
 * link under the artifact's basename, so a plain web server can serve it as a
 * URL mirror too. All returned strings are malloc'd; the caller frees them.
 */
#ifndef TFPROV_CACHE_H
#define TFPROV_CACHE_H

#include <stdint.h>

struct ctx;

/* Creates sha256/, partial/ and quarantine/ under dir. 0 or TF_EIO (errmsg set). */
int cache_init(const char *dir, char **errmsg);
char *cache_final_path(const char *dir, const char *sha256);
char *cache_part_path(const char *dir, const char *sha256);
/* Host path of a cached artifact if present, else NULL. */
char *cache_lookup(struct ctx *c, const char *sha256);
/* Same, on an explicit cache dir. */
char *cache_lookup_dir(const char *dir, const char *sha256);
/*
 * Makes `tmp` (a verified file on the cache filesystem) the cache entry for
 * sha256: chmod 0444 and rename. *out gets the final path. 0 or -errno.
 */
int cache_commit(const char *dir, const char *sha256, const char *tmp, char **out);
/* Moves a bad file to quarantine/<hex>.<unixtime>; *out gets its new path. 0 or -errno. */
int cache_quarantine(const char *dir, const char *sha256, const char *bad, char **out);

/* The last path component of a URL, without query or fragment ("" never: "download"). */
char *url_basename(const char *url);
/* 1 for http:// and https:// URLs (network); 0 for file:// and plain paths. */
int url_is_remote(const char *url);
/* Host path of a file:// URL or plain path (malloc'd); NULL for remote URLs. */
char *url_local_path(const char *url);
/* The host[:port] part of a remote URL (malloc'd), for per-host error counting. */
char *url_host(const char *url);
/* Looks an artifact up in a mirror directory: sha256/<hex>, then <basename>. */
char *mirror_dir_lookup(const char *dir, const char *sha256, const char *url);
/*
 * Puts the verified file src into mirror dir as sha256/<hex> and <basename(url)>
 * (hard links when possible, else copies). 0 or -errno.
 */
int mirror_put(const char *dir, const char *src, const char *sha256, const char *url);

/* Copies src to dst (created O_EXCL, mode 0644), hashing on the way. 0 or -errno. */
int copy_file_hashing(const char *src, const char *dst, char hex[65], int64_t *size);

#endif
