/*
 * artifact.h - the artifact room: getting bytes safely. The content-addressed cache, downloads
 * (libcurl), small GETs, NVIDIA's redist JSONs, trust-on-first-use, minisign
 * signatures and trust, the one archive extractor, and the artifact set with
 * its decode-ahead.
 *
 * The one public header of engine/artifact/ (ARCHITECTURE.md section 2); what
 * only the room itself uses is in private/. Its parts, each with its own
 * comment below: artifacts, cache, fetch, httpget, minisign, redist, tofu, trust, unpack.
 */
#ifndef TFPROV_ARTIFACT_H
#define TFPROV_ARTIFACT_H

#include <stdint.h>
#include <stddef.h>
#include <errno.h>

#include <time.h>

#include "ctx.h"
#include "error.h"

/*
 * artifacts (engine/artifact/artifacts.c, decode-ahead in ahead.c) - the
 * downloads a step names: fetched into the cache, unpacked. An artset owns
 * its strings and its arts' decoded trees. What a step makes of them (a
 * staged tree, its messages) is modules/step_artifacts.h.
 */

struct unpack_result;

/*
 * What a step does with an artifact, so what decode-ahead may do for it
 * before the step runs (artset_decode_ahead).
 */
enum art_unpack {
	ART_FILE = 0,  /* used as a file (a runfile, a JSON, an sdist): not decoded ahead */
	ART_TREE = 1,  /* an archive of artset_unpack (cuda, cudnn) */
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
	/*
	 * Decode-ahead's tree of this artifact in the run's scratch, NULL when
	 * none (not decoded ahead, failed, taken): its file list, and when the
	 * decoder finished (nothing in it changes after). art_take_tree moves it.
	 */
	char *tree;
	struct unpack_result *tree_res;
	struct timespec tree_done;
};

/*
 * What decode-ahead does with a wheel's tree (ART_WHEEL) once it is complete:
 * tree() runs on the decoder's thread before the tree counts as decoded (the
 * `tree_done` time art_take_tree checks against), so what it writes into
 * the tree is part of it; the pip step byte-compiles there (python.h,
 * pyc_ahead_attach). release() runs with artset_release.
 */
struct art_wheel_hook {
	void (*tree)(void *arg, const char *dir, const struct unpack_result *res);
	void (*release)(void *arg);
	void *arg;
};

struct artset {
	struct art *v;
	size_t n;
	struct art_wheel_hook hook; /* zero: none */
};

/*
 * What the executor prepared for one step (engine/run/exec.c), the step's
 * apply's last argument (module.h): the step's own artifacts, as its
 * `artifacts` hook named them and in that order, each fetched and verified
 * (art.path) and, where decode-ahead ran, decoded (art.tree). The executor
 * owns it; a step takes trees out of it (art_take_tree). Empty for a step
 * that names no artifacts.
 */
struct prepared {
	struct artset arts;
};

void artset_add(struct artset *s, const char *name, const char *url, const char *sha256,
                int64_t size, int strip);
void artset_release(struct artset *s);
/* Marks s->v[from..] as archives the step unpacks with artset_unpack. */
void artset_mark_unpack(struct artset *s, size_t from);
/* Marks s->v[i] as decoded ahead for a Python step (ART_WHEEL, ART_CONDA). */
void artset_mark_python(struct artset *s, size_t i, enum art_unpack kind);
/*
 * Fetches and verifies every artifact of s into the cache (art.path). 0 or
 * fetch_all's error, why the first failed download's failure (empty
 * when none has one).
 */
int artset_fetch_files(struct ctx *c, struct artset *s, struct why *why);
/*
 * Called by artset_unpack for each archive i, in s's order, once it is
 * unpacked completely into `part` with its file list res: 0 or TF_E*
 * (which stops artset_unpack).
 */
typedef int (*artset_merge_fn)(void *arg, size_t i, const char *part,
                               const struct unpack_result *res);
/*
 * Fetches (cache first) and unpacks every artifact of s, one archive into
 * stage itself, several each into stage/.partN (stage created), and hands
 * each to merge. An archive decode-ahead decoded (art.tree) is renamed into
 * place; the others are decoded while they download (fetch_all on its own
 * thread, up to --jobs decoders, largest first, each following its growing
 * .part on a budget: nothing is used before fetch_all verified it; an
 * archive whose download started over, failed or ran out of budget is
 * unpacked from the verified file afterwards). Every part but stage itself
 * is removed before it returns. 0, merge's error, or TF_E* with why
 * (caller frees; NULL when fetch_all reported the failure itself).
 */
int artset_unpack(struct ctx *c, struct artset *s, const char *stage, artset_merge_fn merge,
                  void *arg, struct why *why);

/*
 * Decode-ahead (ahead.c): fetches and verifies every artifact of s (a
 * whole plan's) into the cache and, at the same time, unpacks those marked
 * `unpack` on artset_unpack's pool (one pool of --jobs decoders over all of
 * them, largest first, each following its growing download on the same
 * budget; a wheel or conda package once it is verified) into this run's
 * scratch directory in the cache, never into the root. Each tree is left
 * on its art (art.tree). *scratch is this run's scratch (created when
 * NULL), held until artset_decode_ahead_release. 0, or fetch_all's error
 * (it reported what failed; *failed == s->n), or a decode error: *failed is
 * the archive, why the message.
 */
struct ahead;
int artset_decode_ahead(struct ctx *c, struct artset *s, struct ahead **scratch, size_t *failed,
                        struct why *why);
/* Removes this run's scratch (whatever no step took over) and its lock. NULL: nothing. */
void artset_decode_ahead_release(struct ahead *scratch);
/*
 * Takes the tree decode-ahead made of `a` (a->tree): renamed to dest (which
 * must not exist), its file list moved into *res; a->tree is NULL after. A
 * wheel's or conda package's tree is used only when every entry of its list
 * is there with its type and size and nothing in it changed after it was
 * decoded (ctime); a damaged tree is removed, named in a warning. 0 when
 * taken; -ENOENT when there is none to take (not decoded ahead, failed,
 * damaged, on another filesystem): the caller decodes the verified file.
 */
int art_take_tree(struct ctx *c, struct art *a, const char *dest, struct unpack_result *res);

/*
 * Moves one entry of a decoded tree to dst inside a stage the caller owns
 * (the merge of several archives into one staged tree), creating dst's
 * directories: the rename stays in this room, steps never rename
 * (test_layout.py). 0 or -errno.
 */
int art_tree_move(const char *src, const char *dst);

/*
 * cache (engine/artifact/cache.c) - the content-addressed download cache and mirror directories.
 *
 * Layout under a cache dir (shared by every stack of the machine):
 *   sha256/<hex>                 a verified artifact, mode 0444, never rewritten
 *                                (read-only; mirror build hard-links it into a
 *                                directory a web server reads)
 *   partial/<hex>.part           a download in progress (resumed with Range), 0600
 *   quarantine/<hex>.<unixtime>  bytes that failed verification, kept for a human,
 *                                0400: they may be anything, a root-only file too
 *   names/<hex>                  the file name an artifact of that hash had where
 *                                it was downloaded from (its URL's basename, gc's
 *                                listing); for a pip artifact also the URL and the
 *                                index whose page listed it (python.h): hints for
 *                                naming the verified file and fetching it again,
 *                                never trusted for its bytes
 *   unpack/run-XXXXXX/<hex>      an apply's decode-ahead (artifact.h), held by an
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

struct ctx;

/* Creates sha256/, partial/ and quarantine/ under dir. 0 or TF_EIO (why set). */
int cache_init(const char *dir, struct why *why);
char *cache_final_path(const char *dir, const char *sha256);
/* Host path of a cached artifact if present, else NULL. */
char *cache_lookup(struct ctx *c, const char *sha256);
/*
 * Makes `tmp` (a verified file on the cache filesystem) the cache entry for
 * sha256: chmod 0444 and rename. *out gets the final path. 0 or -errno.
 */
int cache_commit(const char *dir, const char *sha256, const char *tmp, char **out);
/* names/<hex>: the file name a verified hash had where it came from (a hint). */
char *cache_name_path(const char *dir, const char *sha256);
/*
 * Removes the temporary files of names/ (fs_write_atomic's <hex>.tfprov-tmp.<pid>)
 * that a killed run left: those whose process no longer exists. Best effort;
 * the writer calls it after recovery. Returns how many it removed.
 */
int cache_sweep_temps(const char *dir);
/* The file name names/<hex> records, or NULL. */
char *cache_name_of(const char *dir, const char *sha256);

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

/* Copies src to dst (created O_EXCL, mode 0644), hashing on the way. 0 or -errno. */
int copy_file_hashing(const char *src, const char *dst, char hex[65], int64_t *size);

/*
 * fetch (engine/artifact/fetch.c) - downloads pinned artifacts into the content-addressed cache.
 *
 * Every byte is hashed while it arrives (no second pass) and the size is
 * enforced during the transfer; a file reaches <cache>/sha256/<hex> only
 * after both matched. Sources, in order: the cache itself, each mirror
 * (a URL mirror is mirror + "/" + basename(url); a DIR mirror is looked up
 * as DIR/sha256/<hex> and DIR/<basename>), then the origin URL
 * (http, https, file:// or a plain path). TLS verification is always on.
 *
 * Ownership: fetch_all() fills the OUT fields of each item; release them with
 * fetch_item_release(). The IN fields are borrowed and never freed.
 */

struct ctx;

struct fetch_item {
	const char *name;   /* for messages */
	const char *url;    /* origin URL: http(s)://, file://, or a plain path */
	const char *sha256; /* 64 lowercase hex, required */
	int64_t size;       /* bytes, -1 when unknown (then only the hash is enforced) */
	char *path;         /* OUT: host path of the verified file in the cache (malloc'd) */
	int cached;         /* OUT: 1 if it was already in the cache (no network) */
	struct why why;     /* OUT: the failure (code 0 when ok) and its words */
	char *source; /* OUT: the URL or path the bytes came from (malloc'd), NULL if cached */
	/*
	 * OUT, live while fetch_all runs on another thread (read with atomics):
	 * how many bytes of <cache>/partial/<sha256>.part are written, from
	 * offset 0, and how often the .part was cut to start over. An unpacker
	 * can follow the .part while it downloads (unpack_archive_follow); the
	 * bytes are only trusted once fetch_all has verified them. stream_failed
	 * is set the moment an attempt fails (hash, size, error): a follower
	 * stops decoding then. stream_verified is set the moment the verified
	 * file is in the cache (downloaded, or a cached copy re-hashed): a
	 * decoder that cannot follow a growing file (a zip) starts then.
	 */
	uint64_t stream_bytes;
	int stream_restarts;
	int stream_failed;
	int stream_verified;
};

/* Tuning knobs; fetch_opts_default() fills them from ctx and the environment. */
struct fetch_opts {
	int jobs;             /* parallel transfers */
	long stall_seconds;   /* abort an attempt slower than low_speed_bytes/s for this long */
	long low_speed_bytes; /* bytes per second */
	long connect_timeout; /* seconds */
	int retries;          /* attempts per source after the first */
	long backoff_ms;      /* first retry delay; doubles each time */
	int host_max_errors;  /* a host is skipped for the rest of the run after this many */
	int durable;          /* fdatasync a download before it enters the cache */
};

/*
 * Downloads every item not already in c->cache_dir, in parallel (largest
 * first). Honours CTX_OFFLINE: no network at all, and a failure names what is
 * missing. A hash or size mismatch quarantines the bytes and fails the item
 * with TF_EINTEGRITY, naming expected and actual sha256, size, URL and mirror.
 * Returns 0 if all ok, else the first item's error in item order (every item's
 * err is filled). Emits EV_PROGRESS events (step "fetch").
 */
int fetch_all(struct ctx *c, struct fetch_item *items, size_t n);
void fetch_item_release(struct fetch_item *it);

/*
 * httpget (engine/artifact/httpget.c) - one GET of a small file into memory, for the few fetches that
 * are not artifacts: a manifest's .minisig and a mirror's index.json
 * (cli/signature.c), and the NVIDIA redistrib JSON that `lock` pins on first
 * use (engine/artifact/tofu.c). Artifacts go through fetch.c (cache, resume, mirrors,
 * parallel); these are read whole, capped, and never cached.
 *
 * One TLS policy for all of them: peer and host verification always on,
 * --ca-bundle honoured, redirects only to the protocols the caller allows,
 * connect timeout 15 s, abort below 1 KiB/s for 30 s.
 *
 * Ownership: on 0, *out is malloc'd (NUL-terminated, *len bytes before it);
 * on failure *err is malloc'd and *out is untouched.
 */

struct ctx;

/* protocols as for CURLOPT_PROTOCOLS_STR: "https" or "http,https". */
#define HTTPGET_HTTPS         "https"
#define HTTPGET_HTTP_OR_HTTPS "http,https"

/*
 * GET url, at most max bytes, with an Accept header when accept is not NULL
 * (a PEP 503 index page asks for text/html). 0 on HTTP 200; TF_ENETWORK with *status the
 * HTTP status (0 when no response came: DNS, TLS, connect, timeout);
 * TF_EINTEGRITY when the body is larger than max.
 */
int http_get_small(const struct ctx *c, const char *url, const char *protocols, const char *accept,
                   size_t max, char **out, size_t *len, long *status, struct why *why);

/* One GET of http_get_small_many: url in; the rest out, as http_get_small's. */
struct http_small {
	const char *url;
	int done;
	char *body; /* the caller frees it */
	size_t len;
	long status;
	struct why why; /* code 0 on HTTP 200; the caller clears it */
};
/*
 * Every GET of v at once, each as http_get_small would do it, on one pool of
 * connections (up to 8 a host, kept alive and reused; HTTP/2 multiplexed
 * where the server speaks it): index pages are many small files from one
 * host, and one at a time each costs its round trips again.
 */
void http_get_small_many(const struct ctx *c, struct http_small *v, size_t n, const char *protocols,
                         const char *accept, size_t max);

/*
 * minisign (engine/artifact/minisign.c) - Ed25519 signatures in minisign's file formats, through OpenSSL.
 *
 * The formats are those of minisign (https://jedisct1.github.io/minisign/,
 * src/minisign.h in github.com/jedisct1/minisign), so the `minisign` Debian
 * package signs what tfprov verifies and verifies what tfprov signs:
 *
 *   public key   "untrusted comment: ..." / base64("Ed" keynum[8] pk[32])
 *   secret key   "untrusted comment: ..." / base64("Ed" kdf[2] "B2" salt[32]
 *                opslimit[8] memlimit[8] keynum[8] seed[32] pk[32] chk[32]);
 *                kdf "Sc": the last 104 bytes are XORed with scrypt(password);
 *                kdf 0,0: stored in clear (`minisign -G -W`)
 *   signature    "untrusted comment: ..." / base64(alg[2] keynum[8] sig[64]) /
 *                "trusted comment: TEXT" / base64(global_sig[64])
 *
 * alg "ED" signs BLAKE2b-512(message) (minisign's default), "Ed" the message
 * itself (legacy). global_sig signs sig[64] || TEXT, so the trusted comment is
 * authenticated too. Key ids are printed as minisign prints them.
 *
 * All cryptography is OpenSSL's EVP (Ed25519, BLAKE2b-512, scrypt). The
 * secret key's checksum is BLAKE2b-256, which OpenSSL 3.0 cannot compute
 * unkeyed; a decrypted key is instead checked by deriving its public key from
 * the seed and comparing it with the stored one, which a wrong password fails.
 * The same is why keys tfprov writes are unencrypted, as `minisign -G -W`
 * writes them (zero checksum, which minisign accepts for such keys).
 *
 * Parsers take a whole file in memory and never print; on failure they return
 * TF_EINTEGRITY with the reason, a phrase in English, in why (the caller
 * prefixes it with what was being read: why_prefix).
 */

#define MS_KEYNUM_BYTES 8
#define MS_KEYID_SIZE   17 /* up to 16 hex digits and a NUL */
/* minisign's limit on the trusted comment line (TRUSTEDCOMMENTMAXBYTES). */
#define MS_TRUSTED_COMMENT_MAX 8192
/* Larger files are not key or signature files. */
#define MS_FILE_MAX 16384

struct ms_pubkey {
	unsigned char keynum[MS_KEYNUM_BYTES];
	unsigned char pk[32];
};

struct ms_seckey {
	unsigned char keynum[MS_KEYNUM_BYTES];
	unsigned char seed[32];
	unsigned char pk[32];
};

struct ms_sig {
	int prehashed; /* "ED": sig covers BLAKE2b-512 of the message */
	unsigned char keynum[MS_KEYNUM_BYTES];
	unsigned char sig[64];
	char *trusted_comment; /* without its "trusted comment: " prefix; owned */
	unsigned char global_sig[64];
};

/* ms_seckey_parse() result when the key is encrypted and no password was given
 * (a -errno, so it can never be taken for one of tfprov's TF_E* codes). */
#define MS_NEED_PASSWORD (-ENOKEY)

/* The key id as minisign prints it: the key number as little-endian hex. */
void ms_keyid(const unsigned char keynum[MS_KEYNUM_BYTES], char out[MS_KEYID_SIZE]);

/*
 * Parses a secret key file; an encrypted one is decrypted with password
 * (MS_NEED_PASSWORD when it is NULL, the code alone in why). 0,
 * MS_NEED_PASSWORD or TF_EINTEGRITY (the reason in why).
 */
int ms_seckey_parse(const char *text, size_t len, const char *password, struct ms_seckey *sk,
                    struct why *why);
/* Parses a .minisig file; release with ms_sig_release(). */
int ms_sig_parse(const char *text, size_t len, struct ms_sig *sig, struct why *why);
void ms_sig_release(struct ms_sig *sig);

/*
 * Checks sig against message and pk: the key numbers, the signature of the
 * message, then the global signature over the trusted comment. 0 or
 * TF_EINTEGRITY (the reason in why).
 */
int ms_verify(const struct ms_sig *sig, const struct ms_pubkey *pk, const void *msg, size_t len,
              struct why *why);

/*
 * Signs message in the prehashed form; returns the .minisig file text
 * (caller frees). Comments must be single lines; NULL on an OpenSSL failure.
 */
char *ms_sign(const struct ms_seckey *sk, const void *msg, size_t len, const char *trusted_comment,
              const char *untrusted_comment);

/* A new random key pair. 0 or TF_EFAIL. */
int ms_keygen(struct ms_seckey *sk);
/* File texts for a key pair: the public key, and the secret key unencrypted. */
char *ms_pubkey_format(const struct ms_seckey *sk);
char *ms_seckey_format(const struct ms_seckey *sk);
/* The public half of a secret key. */
void ms_seckey_public(const struct ms_seckey *sk, struct ms_pubkey *pk);

/*
 * redist (engine/artifact/redist.c) - NVIDIA redistrib_<ver>.json resolution (CUDA and cuDNN).
 *
 * A redist manifest maps component -> platform -> {relative_path, sha256,
 * size}, or, for cuDNN 8.x, component -> platform -> variant ("cuda11") ->
 * {...}. The archive URL is the directory of the JSON's own URL plus
 * relative_path (NVIDIA's parse_redist.py rule). The JSON must itself have
 * been verified (it is an artifact pinned by sha256) before it is resolved.
 *
 * Ownership: *out is an array of *nout artifacts, all strings malloc'd; free
 * with redist_artifacts_free(). why is filled on failure.
 */

struct redist_artifact {
	char *component;
	char *version;
	char *url;
	char *relative_path;
	char sha256[65];
	int64_t size;
	int strip; /* NVIDIA archives have one top directory: always 1 */
};

/*
 * Resolves `components` (all components that exist for `platform` when
 * ncomponents is 0) for `platform` (e.g. "linux-x86_64") and an optional
 * cuDNN `variant` ("cuda12"; NULL picks the only one, else it is an error).
 * json_url may be NULL: URLs are then made relative to json_path's directory.
 * Returns 0 or TF_EMANIFEST (unknown component/platform/variant, bad hash)
 * or TF_EIO (unreadable JSON), with why naming what and offering choices.
 */
int redist_resolve(const char *json_path, const char *json_url, const char *platform,
                   const char *variant, const char *const *components, size_t ncomponents,
                   struct redist_artifact **out, size_t *nout, struct why *why);
void redist_artifacts_free(struct redist_artifact *v, size_t n);

/*
 * tofu (engine/artifact/tofu.c) - trust on first use: fetches a small file that nothing pins yet
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
 * Ownership: why is filled on failure. dest must not exist; it is
 * created (whole, never replacing a file) only when the call succeeds.
 */

struct ctx;

/*
 * Downloads url into the new file dest. 0 with sha256_hex and *size set,
 * and chain (when not NULL) holding every URL of the redirect chain, url
 * first and the one that served the bytes last (redirects stay on https);
 * TF_EOFFLINE, TF_EMANIFEST (not https, or larger than max_bytes: no redist
 * document), TF_ENETWORK or TF_EIO with why.
 */
int tofu_fetch(struct ctx *c, const char *url, int64_t max_bytes, const char *dest,
               char sha256_hex[65], int64_t *size, struct strvec *chain, struct why *why);

/*
 * trust (engine/artifact/trust.c) - the signature policy: which minisign keys are trusted and
 * whether a signature is required.
 *
 * Sources, all read when a command needs the policy:
 *   --trusted-key FILE (repeatable)            minisign public key files
 *   ROOT/etc/tfprov/trusted-keys.d/NAME.pub   the same, one key a file
 *   ROOT/etc/tfprov/policy.yaml               `require_signature: true|false`
 *   --require-signature                        require, whatever the file says
 * A malformed key or policy file is an error, never skipped: a policy that
 * cannot be read must not silently become a weaker one.
 *
 * The struct owns its arrays; trust_release() frees them.
 */

struct ctx;

struct trust {
	struct ms_pubkey *keys;
	char **src; /* where keys[i] came from, for messages */
	size_t n;
	int require;
	const char *require_src; /* "--require-signature" or the policy file; static or src-owned */
	char *policy_path;       /* host path of policy.yaml, for messages */
};

/* Loads the policy for this run; 0 or TF_EFAIL with why naming the file. */
int trust_load(struct ctx *c, struct trust *t, struct why *why);
void trust_release(struct trust *t);

/*
 * Checks `sigtext` (a .minisig file's bytes, named sig_name in messages) as a
 * signature of msg by one of the trusted keys. 0 with *sig filled (release it)
 * and *signer the key's index; or TF_EINTEGRITY with *why (malloc'd) naming
 * the key id or the reason.
 */
int trust_verify(const struct trust *t, const void *msg, size_t len, const char *sig_name,
                 const char *sigtext, size_t siglen, struct ms_sig *sig, size_t *signer,
                 struct why *why);

/*
 * unpack (engine/artifact/unpack.c) - safe, streaming extraction of artifacts with libarchive.
 *
 * Decoding (the expensive part for xz) runs on its own thread and file
 * creation on the caller's, connected by a bounded queue, so the two use both
 * cores and memory stays bounded whatever the archive size
 * (measured: on two cores this is the only way to beat the shell; bench/README.md).
 *
 * Safety: an archive can only create regular files, directories, symlinks
 * and hard links strictly inside dest_dir. Anything else is refused with
 * TF_EUNSAFE and dest_dir is removed entirely, so nothing is ever placed.
 *
 * Ownership: *res and why are filled by the callee and released by the
 * caller (unpack_result_release(), free()).
 */

struct ctx;

struct unpack_entry {
	char *path;    /* relative to dest, after strip */
	int type;      /* 'f' file, 'd' dir, 'l' symlink, 'h' hardlink */
	char *link;    /* symlink target or hardlink (relative) source, else NULL */
	unsigned mode; /* permission bits after set-uid/gid dropped */
	int64_t size;
	char sha256[65]; /* files (and hard links to them): computed while writing */
};

struct unpack_result {
	struct unpack_entry *v;
	size_t n;
	uint64_t bytes; /* file data written */
};

/*
 * Streams `archive` (tar.xz, tar.gz/tgz, tar.bz2, tar.zst, plain tar, zip, and
 * .conda: the inner pkg-*.tar.zst and info-*.tar.zst are extracted) into
 * `dest_dir`, which must not exist yet (its parent must). Strips `strip`
 * leading components (entries with no component left are skipped). Refuses
 * with TF_EUNSAFE: absolute paths, '..' components, control characters in
 * names, device nodes, FIFOs and sockets, symlinks/hardlinks whose target
 * leaves dest, an entry that would write through a symlink. Drops set-uid,
 * set-gid and sticky bits. No fsync: the caller does one syncfs.
 * Returns 0, TF_EUNSAFE, TF_EINTEGRITY (bytes that do not decode: a
 * truncated or corrupt archive), TF_EIO (unreadable file, write error),
 * TF_ENOSPC, TF_EINTR or TF_EFAIL (dest exists) with why set.
 */
int unpack_archive(struct ctx *c, const char *archive, const char *dest_dir, int strip,
                   struct unpack_result *res, struct why *why);
void unpack_result_release(struct unpack_result *res);

/* Called on the writing thread for each regular file once it is written,
 * closed and hashed (e->path relative to dest_dir; e is valid for the call). */
typedef void (*unpack_file_fn)(void *arg, const struct unpack_entry *e);

/*
 * unpack_archive_each() of a zip (a wheel) by `nparts` decoders at once
 * (1..UNPACK_ZIP_PARTS_MAX), each with its share of the entries (largest
 * first, balanced by compressed bytes), all writing into dest_dir under
 * every rule above; on_file is called from several threads. Entries up to
 * 4 MiB are inflated by libdeflate, larger ones stream through zlib. A name
 * held twice is refused (TF_EUNSAFE); any failure stops every decoder and
 * removes dest_dir.
 */
#define UNPACK_ZIP_PARTS_MAX 16
int unpack_zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res,
                        struct why *why);

/*
 * The text of the first entry of zip `archive` named "<x><suffix>" with no
 * '/' in <x> (suffix ".dist-info/RECORD": a wheel's RECORD), NUL-terminated, at most `max` bytes; nothing is written to disk. 0 and
 * *text (caller frees), -ENOENT when there is no such entry, -EFBIG when it
 * is larger than max, -EIO when the archive cannot be read.
 */
int unpack_zip_member(const char *archive, const char *suffix, size_t max, char **text,
                      size_t *len);

/*
 * unpack_archive() of a conda package (conda.c): `is_conda` says the file is
 * a .conda container whatever its name (a cache file may have none); else it
 * is a .tar.bz2. Same refusals, no strip.
 */
int unpack_conda_package(struct ctx *c, const char *file, int is_conda, const char *dest_dir,
                         struct unpack_result *res, struct why *why);

/* Budget for an archive not verified yet whose unpacked size is not recorded:
 * this many times its compressed size (NVIDIA's redist archives unpack to 2-4x). */
#define UNPACK_RATIO 20

/*
 * The hard bound on every unpack, verified or not (a pinned hash proves who
 * made an archive, not that it is sane). With an unpacked size declared (the
 * manifest's unpacked_size) that size is the bound. Otherwise the file data
 * may reach UNPACK_BOMB_RATIO times the archive's size, and never less than
 * UNPACK_BOMB_FLOOR. Measured over 1,548 real archives (scripts/unpack-ratios.py
 * on Debian 12's packages and PyPI's wheels here, ARCHITECTURE.md section 1):
 * NVIDIA's own (libcudart 4.6x, libcublas 2.1x, libcublasLt 2.8x, NVML 3.1x)
 * and wheels (pip 3.6x) are far below; the largest of all is 32.5x (a 38 KB
 * package of headers, under the floor anyway), the largest above 640 KB
 * 21.8x: the ratio leaves a margin of 3x over every archive measured, 21x
 * over NVIDIA's. Zeros reach 1,000x through deflate, far more through xz or
 * zstd.
 * Past the bound the unpack stops with TF_EINTEGRITY (exit 5) and removes
 * what it wrote. Before a byte is written the file system under the target
 * must have room for the expected size (the declared size, a zip's own
 * directory, else the archive's size): TF_ENOSPC otherwise.
 */
#define UNPACK_BOMB_RATIO 100
#define UNPACK_BOMB_FLOOR (64ull << 20)

#endif
