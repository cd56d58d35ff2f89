/*
 * fetch.h - downloads pinned artifacts into the content-addressed cache.
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
#ifndef TFPROV_FETCH_H
#define TFPROV_FETCH_H

#include <stddef.h>
#include <stdint.h>

struct ctx;

struct fetch_item {
	const char *name;   /* for messages */
	const char *url;    /* origin URL: http(s)://, file://, or a plain path */
	const char *sha256; /* 64 lowercase hex, required */
	int64_t size;       /* bytes, -1 when unknown (then only the hash is enforced) */
	char *path;         /* OUT: host path of the verified file in the cache (malloc'd) */
	int cached;         /* OUT: 1 if it was already in the cache (no network) */
	int err;            /* OUT: 0 or a TF_E* code */
	char *errmsg;       /* OUT: human message, malloc'd, NULL when ok */
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
 * Defaults: jobs = c->jobs or 4, stall 30 s below 1 KiB/s, connect 15 s,
 * 3 retries from 500 ms, 3 errors per host, not durable (cache hits are
 * re-hashed; the step's syncfs makes downloads durable). The environment may
 * override (tests): TFPROV_FETCH_STALL_S, TFPROV_FETCH_RETRIES,
 * TFPROV_FETCH_BACKOFF_MS, TFPROV_FETCH_HOST_ERRORS, TFPROV_FETCH_DURABLE.
 */
void fetch_opts_default(struct fetch_opts *o, const struct ctx *c);

/*
 * Downloads every item not already in c->cache_dir, in parallel (largest
 * first). Honours CTX_OFFLINE: no network at all, and a failure names what is
 * missing. A hash or size mismatch quarantines the bytes and fails the item
 * with TF_EINTEGRITY, naming expected and actual sha256, size, URL and mirror.
 * Returns 0 if all ok, else the first item's error in item order (every item's
 * err is filled). Emits EV_PROGRESS events (step "fetch").
 */
int fetch_all(struct ctx *c, struct fetch_item *items, size_t n);
int fetch_all_opts(struct ctx *c, struct fetch_item *items, size_t n, const struct fetch_opts *o);
void fetch_item_release(struct fetch_item *it);

#endif
