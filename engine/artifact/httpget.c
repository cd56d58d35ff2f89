/* httpget.c - one GET of a small file into memory (see artifact.h). */
#include "artifact.h"

#include "cabundle.h"
#include "ctx.h"
#include "error.h"
#include "util.h"

#include <curl/curl.h>
#include <stdlib.h>

struct body {
	struct strbuf sb;
	size_t max;
	int too_big;
};

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

int http_get_small(const struct ctx *c, const char *url, const char *protocols, const char *accept,
                   size_t max, char **out, size_t *len, long *status, char **err)
{
	struct curl_slist *hdr = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	struct body b = {STRBUF_INIT, max, 0};
	long code = 0;

	https_global_init();
	CURL *h = curl_easy_init();
	if (h == NULL)
		tf_fatal("curl_easy_init");
	curl_easy_setopt(h, CURLOPT_URL, url);
	if (accept != NULL) {
		char *line = xasprintf("Accept: %s", accept);
		hdr = curl_slist_append(NULL, line);
		free(line);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	}
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
	https_policy(h, protocols, c->ca_bundle);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 15L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "tfprov/0.1");
	CURLcode rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdr);
	*status = code;
	if (rc == CURLE_OK && code == 200) {
		*len = b.sb.len;
		*out = strbuf_detach(&b.sb);
		return 0;
	}
	strbuf_release(&b.sb);
	if (b.too_big) {
		*err = xasprintf("larger than %zu bytes", max);
		return TF_EINTEGRITY;
	}
	if (rc == CURLE_OK)
		*err = xasprintf("HTTP %ld", code);
	else
		*err = xstrdup(errbuf[0] ? errbuf : curl_easy_strerror(rc));
	return TF_ENETWORK;
}
