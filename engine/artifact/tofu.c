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
               char sha256_hex[65], int64_t *size, struct strvec *chain, struct why *why)
{
	int rc;

	if (c->flags & CTX_OFFLINE)
		return why_fail(why, TF_EOFFLINE,
		                "%s: --offline forbids fetching it, and nothing pins it yet (trust "
		                "on first use needs the network once)",
		                url);
	if (!str_starts_with(url, "https://"))
		return why_fail(why, TF_EMANIFEST,
		                "%s: trust on first use needs TLS; give the https:// URL or pin "
		                "the file by sha256",
		                url);
	char *body = NULL;
	size_t len = 0;
	long status = 0;
	rc = http_get_small_chain(c, url, HTTPGET_HTTPS, NULL, (size_t)max_bytes, &body, &len,
	                          &status, chain, why);
	if (rc == TF_EINTEGRITY) {
		/* Not a redist document, as a JSON that does not parse is not: exit 3. */
		return why_fail(why, TF_EMANIFEST,
		                "%s: larger than %lld bytes; not a redistrib JSON", url,
		                (long long)max_bytes);
	}
	if (rc != 0) {
		why_prefix(why, "%s", url);
		return rc;
	}
	sha256_buf(body, len, sha256_hex);
	*size = (int64_t)len;
	int r = fs_write_atomic(dest, body, len, 0644, FS_NO_REPLACE);
	free(body);
	if (r != 0)
		return why_fail(why, TF_EIO, "%s: cannot write: %s", dest, strerror(-r));
	return 0;
}
