/* httpget.c - GETs of small files into memory, one or many at once (see artifact.h). */
#include "artifact.h"
#include "artifact_int.h"

#include "cabundle.h"
#include "ctx.h"
#include "error.h"
#include "util.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

struct body {
	struct strbuf sb;
	size_t max;
	int too_big;
	CURL *h;
	struct strvec *chain; /* every URL asked, redirects included; NULL: not kept */
};

/* At each response's status line: the URL that response answers, once. */
static size_t header_seen(char *p, size_t size, size_t n, void *ud)
{
	struct body *b = ud;
	const char *u = NULL;
	if (b->chain && size * n > 5 && strncmp(p, "HTTP/", 5) == 0 &&
	    curl_easy_getinfo(b->h, CURLINFO_EFFECTIVE_URL, &u) == CURLE_OK && u &&
	    (b->chain->n == 0 || strcmp(b->chain->v[b->chain->n - 1], u) != 0))
		strvec_push(b->chain, u);
	return size * n;
}

static size_t body_write(char *p, size_t size, size_t n, void *ud)
{
	struct body *b = ud;
	if (b->sb.len + size * n > b->max) {
		b->too_big = 1;
		return 0;
	}
	strbuf_add(&b->sb, p, size * n);
	return size * n;
}

/* A handle for one GET into b, its header list in *hdr (the caller frees both). */
static CURL *small_handle(const struct ctx *c, const char *url, const char *protocols,
                          const char *accept, struct body *b, char *errbuf, struct curl_slist **hdr)
{
	https_global_init();
	CURL *h = curl_easy_init();
	if (h == NULL)
		tf_fatal("curl_easy_init");
	curl_easy_setopt(h, CURLOPT_URL, url);
	*hdr = NULL;
	if (accept != NULL) {
		char *line = xasprintf("Accept: %s", accept);
		*hdr = curl_slist_append(NULL, line);
		free(line);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdr);
	}
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
	b->h = h;
	if (b->chain) {
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_seen);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, b);
	}
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
	https_policy(h, protocols, c->ca_bundle);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 15L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "tfprov/0.1");
	return h;
}

/* The result of one finished GET, as http_get_small returns it. */
static int small_result(CURL *h, CURLcode rc, struct body *b, const char *errbuf, size_t max,
                        char **out, size_t *len, long *status, struct why *why)
{
	long code = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	*status = code;
	if (rc == CURLE_OK && code == 200) {
		*len = b->sb.len;
		*out = strbuf_detach(&b->sb);
		return 0;
	}
	strbuf_release(&b->sb);
	if (b->too_big)
		return why_fail(why, TF_EINTEGRITY, "larger than %zu bytes", max);
	if (rc == CURLE_OK)
		return why_fail(why, TF_ENETWORK, "HTTP %ld", code);
	return why_fail(why, TF_ENETWORK, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
}

int http_get_small(const struct ctx *c, const char *url, const char *protocols, const char *accept,
                   size_t max, char **out, size_t *len, long *status, struct why *why)
{
	return http_get_small_chain(c, url, protocols, accept, max, out, len, status, NULL, why);
}

int http_get_small_chain(const struct ctx *c, const char *url, const char *protocols,
                         const char *accept, size_t max, char **out, size_t *len, long *status,
                         struct strvec *chain, struct why *why)
{
	struct curl_slist *hdr = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	struct body b = {STRBUF_INIT, max, 0, NULL, chain};
	CURL *h = small_handle(c, url, protocols, accept, &b, errbuf, &hdr);
	CURLcode rc = curl_easy_perform(h);
	int ret = small_result(h, rc, &b, errbuf, max, out, len, status, why);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdr);
	return ret;
}

/* Connections a host gets from http_get_small_many. */
#define SMALL_MANY_PER_HOST 8

void http_get_small_many(const struct ctx *c, struct http_small *v, size_t n, const char *protocols,
                         const char *accept, size_t max)
{
	if (n == 0)
		return;
	struct one {
		CURL *h;
		struct curl_slist *hdr;
		struct body b;
		char errbuf[CURL_ERROR_SIZE];
	} *o = xcalloc(n, sizeof(*o));
	CURLM *m = curl_multi_init();
	if (m == NULL)
		tf_fatal("curl_multi_init");
	/* One connection pool for them all: kept alive and reused, and
	 * multiplexed where the server speaks HTTP/2 (PyPI does). */
	curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)SMALL_MANY_PER_HOST);
	curl_multi_setopt(m, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
	for (size_t i = 0; i < n; i++) {
		o[i].b = (struct body){STRBUF_INIT, max, 0, NULL, NULL};
		o[i].h =
		    small_handle(c, v[i].url, protocols, accept, &o[i].b, o[i].errbuf, &o[i].hdr);
		curl_easy_setopt(o[i].h, CURLOPT_PRIVATE, (void *)&o[i]);
		curl_multi_add_handle(m, o[i].h);
	}
	int running = 1;
	while (running) {
		if (curl_multi_perform(m, &running) != CURLM_OK)
			break;
		if (running)
			curl_multi_poll(m, NULL, 0, 1000, NULL);
	}
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(m, &left)) != NULL) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		struct one *x = NULL;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
		size_t i = (size_t)(x - o);
		small_result(x->h, msg->data.result, &x->b, x->errbuf, max, &v[i].body, &v[i].len,
		             &v[i].status, &v[i].why);
		v[i].done = 1;
	}
	for (size_t i = 0; i < n; i++) {
		if (!v[i].done) {
			strbuf_release(&o[i].b.sb);
			why_fail(&v[i].why, TF_ENETWORK, "the transfer did not finish");
			v[i].done = 1;
		}
		curl_multi_remove_handle(m, o[i].h);
		curl_easy_cleanup(o[i].h);
		curl_slist_free_all(o[i].hdr);
	}
	curl_multi_cleanup(m);
	free(o);
}
