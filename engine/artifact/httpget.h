/*
 * httpget.h - one GET of a small file into memory, for the few fetches that
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
#ifndef TFPROV_HTTPGET_H
#define TFPROV_HTTPGET_H

#include <stddef.h>

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
                   size_t max, char **out, size_t *len, long *status, char **err);

#endif
