/*
 * cabundle.c - the default CA bundle and the TLS policy for HTTPS (see
 * cabundle.h).
 */
#include "cabundle.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char *const bundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
};

const char *ca_bundle_for(const char *explicit_path)
{
	const char *env = getenv("SSL_CERT_FILE");
	struct stat st;

	if (explicit_path != NULL)
		return explicit_path;
	if (env != NULL && *env != '\0')
		return env;
	for (size_t i = 0; i < sizeof(bundles) / sizeof(bundles[0]); i++)
		if (stat(bundles[i], &st) == 0 && S_ISREG(st.st_mode))
			return bundles[i];
	return NULL;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

void https_global_init(void)
{
	pthread_once(&curl_once, curl_init_once);
}

void https_policy(void *curl, const char *protocols, const char *explicit_path)
{
	CURL *h = curl;
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, protocols);
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, protocols);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	const char *ca = ca_bundle_for(explicit_path);
	if (ca != NULL)
		curl_easy_setopt(h, CURLOPT_CAINFO, ca);
}
