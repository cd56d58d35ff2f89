/*
 * cabundle.c - the default CA bundle for HTTPS (see cabundle.h).
 */
#include "cabundle.h"

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
