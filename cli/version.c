/*
 * version.c - `tfprov --version [--verbose]`.
 *
 * With --verbose, every library tfprov links in or dlopen()s, with the version
 * the library itself reports at run time (its own version call, not the
 * header tfprov was compiled against), one per line:
 *
 *     NAME VERSION  how it is there (details)
 *
 * so that a security team, and scripts/check-eol.py, can tell what a build
 * carries: the .deb links OpenSSL, SQLite, libyaml, jansson and libdeflate
 * from the system and dlopen()s libcurl, libarchive and libzip (lazylibs.c);
 * the portable binary links them all in statically. The compression libraries
 * and libcurl's own dependencies are listed as libcurl and libarchive report
 * them (curl_version_info(), archive_version_details()). libdeflate has no
 * version call: its line gives the header's version and says so.
 */
#include "cli.h"
#include "lazylibs.h"
#include "state.h"
#include "tfprov_commit.h" /* TFPROV_COMMIT, generated at build time */

#include <archive.h>
#include <curl/curl.h>
#include <jansson.h>
#include <libdeflate.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>
#include <zip.h>

static void row(const char *name, const char *version, const char *how)
{
	printf("  %-11s %-10s %s\n", name, version && *version ? version : "?", how);
}

/* "zlib/1.2.13" in a space-separated list: its version, or NULL. */
static const char *tagged(const char *list, const char *tag, char *buf, size_t n)
{
	size_t tl = strlen(tag);
	for (const char *p = list; p && *p;) {
		size_t w = strcspn(p, " ");
		if (w > tl + 1 && strncmp(p, tag, tl) == 0 && p[tl] == '/') {
			snprintf(buf, n, "%.*s", (int)(w - tl - 1), p + tl + 1);
			return buf;
		}
		p += w;
		p += strspn(p, " ");
	}
	return NULL;
}

/* How a library of lazylibs.c is there: "dlopen()ed libcurl.so.4" or "linked in". */
static const char *how_loaded(const char *lib, char *buf, size_t n)
{
	const char *so = lazylibs_soname(lib);
	if (so == NULL)
		return "linked in";
	snprintf(buf, n, "dlopen()ed %s", so);
	return buf;
}

/* One word of a version string: "OpenSSL 3.0.17 1 Jul 2025" -> "3.0.17". */
static const char *word(const char *s, int k, char *buf, size_t n)
{
	const char *p = s;
	for (int i = 0; i < k && p && *p; i++) {
		p += strcspn(p, " ");
		p += strspn(p, " ");
	}
	snprintf(buf, n, "%.*s", (int)strcspn(p ? p : "", " "), p ? p : "");
	return buf;
}

int print_version(int verbose)
{
	char a[128], b[256], c[64];
	const curl_version_info_data *cv;
	const char *details;

	printf("tfprov %s (commit %s)\n", TFPROV_VERSION, TFPROV_COMMIT);
	if (!verbose)
		return 0;
	printf("libraries (name, version reported at run time, how):\n");
	snprintf(b, sizeof(b), "libcrypto, linked in (%s)", OpenSSL_version(OPENSSL_VERSION));
	row("openssl", word(OpenSSL_version(OPENSSL_VERSION), 1, a, sizeof(a)), b);
	cv = curl_version_info(CURLVERSION_NOW);
	row("libcurl", cv->version, how_loaded("libcurl", c, sizeof(c)));
	if (cv->ssl_version != NULL) {
		/* libssl as libcurl reports its TLS backend: "OpenSSL/3.0.17". */
		const char *slash = strchr(cv->ssl_version, '/');
		snprintf(b, sizeof(b), "libcurl's TLS (%s)", cv->ssl_version);
		row(str_starts_with(cv->ssl_version, "OpenSSL/") ? "libssl" : "tls",
		    slash ? slash + 1 : cv->ssl_version, b);
	}
	if (cv->libz_version != NULL)
		row("zlib", cv->libz_version, "through libcurl");
	if (cv->age >= 5 && cv->nghttp2_version != NULL)
		row("nghttp2", cv->nghttp2_version, "through libcurl");
	if (cv->libssh_version != NULL) { /* "libssh2/1.10.0" or "libssh/0.10.4" */
		const char *slash = strchr(cv->libssh_version, '/');
		snprintf(c, sizeof(c), "%.*s", slash ? (int)(slash - cv->libssh_version) : 6,
		         cv->libssh_version);
		row(c, slash ? slash + 1 : cv->libssh_version, "through libcurl");
	}
	if (cv->age >= 4 && cv->brotli_version != NULL)
		row("brotli", cv->brotli_version, "through libcurl");
	if (cv->age >= 9 && cv->zstd_version != NULL)
		row("zstd", cv->zstd_version, "through libcurl");
	if (cv->libidn != NULL)
		row("libidn2", cv->libidn, "through libcurl");
	details = archive_version_details();
	row("libarchive", word(archive_version_string(), 1, a, sizeof(a)),
	    how_loaded("libarchive", c, sizeof(c)));
	{
		static const struct {
			const char *tag, *name;
		} libs[] = {{"zlib", "zlib"},
		            {"liblzma", "liblzma"},
		            {"bz2lib", "bzip2"},
		            {"liblz4", "lz4"},
		            {"libzstd", "zstd"}};
		for (size_t i = 0; i < ARRAY_SIZE(libs); i++)
			if (tagged(details, libs[i].tag, a, sizeof(a)) != NULL)
				row(libs[i].name, a, "through libarchive");
	}
	row("libzip", zip_libzip_version(), how_loaded("libzip", c, sizeof(c)));
	row("sqlite", state_sqlite_version(), "linked in");
	row("libyaml", yaml_get_version_string(), "linked in");
	row("jansson", jansson_version_str(), "linked in");
	row("libdeflate", LIBDEFLATE_VERSION_STRING,
	    "linked in (its header's version: libdeflate has no version call)");
	return 0;
}
