/* tofu.c - trust on first use over TLS (see artifact.h). */
#include "artifact.h"
#include "artifact_int.h"

#include "ctx.h"
#include "digest.h"
#include "error.h"
#include "fs.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

int tofu_fetch(struct ctx *c, const char *url, int64_t max_bytes, const char *dest,
               char sha256_hex[65], int64_t *size, struct strvec *chain, char **errmsg)
{
	int rc;

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
	char *body = NULL;
	size_t len = 0;
	long status = 0;
	rc = http_get_small_chain(c, url, HTTPGET_HTTPS, NULL, (size_t)max_bytes, &body, &len,
	                          &status, chain, errmsg);
	if (rc == TF_EINTEGRITY) {
		/* Not a redist document, as a JSON that does not parse is not: exit 3. */
		free(*errmsg);
		*errmsg = xasprintf("%s: larger than %lld bytes; not a redistrib JSON", url,
		                    (long long)max_bytes);
		return TF_EMANIFEST;
	}
	if (rc != 0) {
		char *why = *errmsg;
		*errmsg = xasprintf("%s: %s", url, why);
		free(why);
		return rc;
	}
	sha256_buf(body, len, sha256_hex);
	*size = (int64_t)len;
	int r = fs_write_atomic(dest, body, len, 0644, FS_NO_REPLACE);
	free(body);
	if (r != 0) {
		*errmsg = xasprintf("%s: cannot write: %s", dest, strerror(-r));
		return TF_EIO;
	}
	return 0;
}
