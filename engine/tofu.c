/* tofu.c - trust on first use over TLS (see tofu.h). */
#include "tofu.h"

#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "util.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

struct sink {
	int fd;
	struct sha256 h;
	int64_t n, max;
	int too_big, werr;
};

static size_t write_cb(char *p, size_t sz, size_t nm, void *ud)
{
	struct sink *s = ud;
	size_t len = sz * nm;
	if (s->n + (int64_t)len > s->max) {
		s->too_big = 1;
		return 0;
	}
	for (size_t off = 0; off < len;) {
		ssize_t w = write(s->fd, p + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			s->werr = errno ? errno : EIO;
			return 0;
		}
		off += (size_t)w;
	}
	sha256_update(&s->h, p, len);
	s->n += (int64_t)len;
	return len;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void init_curl(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int tofu_fetch(struct ctx *c, const char *url, int64_t max_bytes, const char *dest,
               char sha256_hex[65], int64_t *size, char **errmsg)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	struct sink s = {.fd = -1, .max = max_bytes};
	CURL *h = NULL;
	int rc = 0;

	if (c->flags & CTX_OFFLINE) {
		*errmsg = xasprintf("%s: --offline forbids fetching it, and nothing pins it yet "
		                    "(trust on first use needs the network once)",
		                    url);
		return TF_EOFFLINE;
	}
	if (!str_starts_with(url, "https://")) {
		*errmsg =
		    xasprintf("%s: trust on first use needs TLS; give the https:// URL or pin "
		              "the file by sha256",
		              url);
		return TF_EMANIFEST;
	}
	s.fd = open(dest, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (s.fd < 0) {
		*errmsg = xasprintf("%s: cannot create: %s", dest, strerror(errno));
		return TF_EIO;
	}
	sha256_init(&s.h);
	pthread_once(&once, init_curl);
	h = curl_easy_init();
	if (h == NULL)
		tf_fatal("curl_easy_init");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "https");
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	if (c->ca_bundle)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_bundle);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 15L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "tfprov/0.1");
	CURLcode cc = curl_easy_perform(h);
	if (s.too_big) {
		*errmsg = xasprintf("%s: larger than %lld bytes; not a redistrib JSON", url,
		                    (long long)max_bytes);
		rc = TF_EINTEGRITY;
	} else if (s.werr) {
		*errmsg = xasprintf("%s: cannot write: %s", dest, strerror(s.werr));
		rc = TF_EIO;
	} else if (cc != CURLE_OK) {
		*errmsg = xasprintf("%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
		rc = TF_ENETWORK;
	} else if (fsync(s.fd) != 0) {
		*errmsg = xasprintf("%s: cannot write: %s", dest, strerror(errno));
		rc = TF_EIO;
	}
	sha256_final(&s.h, sha256_hex);
	sha256_release(&s.h);
	*size = s.n;
	curl_easy_cleanup(h);
	close(s.fd);
	if (rc != 0)
		unlink(dest);
	return rc;
}
