/*
 * cabundle.h - the CA certificates HTTPS downloads trust when no --ca-bundle
 * is given.
 *
 * libcurl has one CA path compiled in (Debian's is
 * /etc/ssl/certs/ca-certificates.crt); the portable release binary
 * (scripts/build-release.sh) links its own libcurl and OpenSSL and must find
 * the host's bundle on Debian, Ubuntu, RHEL, Fedora, SUSE and Alpine alike.
 * Lookup, first match wins:
 *  1. $SSL_CERT_FILE when set and non-empty (OpenSSL's own override; used
 *     as given, so a wrong value fails loudly naming it);
 *  2. the first regular file among the distributions' bundle paths, the
 *     list Go's crypto/x509 searches
 *     (https://go.dev/src/crypto/x509/root_linux.go):
 *       /etc/ssl/certs/ca-certificates.crt            Debian, Ubuntu, Gentoo
 *       /etc/pki/tls/certs/ca-bundle.crt              Fedora, RHEL
 *       /etc/ssl/ca-bundle.pem                        openSUSE, SLES
 *       /etc/pki/tls/cacert.pem                       OpenELEC
 *       /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem  CentOS/RHEL 7+
 *       /etc/ssl/cert.pem                             Alpine
 *  3. none: NULL, and libcurl's compiled-in default applies.
 */
#ifndef TFPROV_CABUNDLE_H
#define TFPROV_CABUNDLE_H

/* The bundle to give CURLOPT_CAINFO, or NULL; `explicit_path` (--ca-bundle)
 * wins when non-NULL. The result is a static string or explicit_path. */
const char *ca_bundle_for(const char *explicit_path);

/*
 * The one TLS policy of every HTTP(S) client of tfprov (fetch.c's downloads,
 * httpget.c's small GETs): https_global_init() initialises libcurl once per
 * process (thread-safe), before a first curl handle; https_policy() sets on
 * the handle `curl` (a CURL *) the protocols it may use and be redirected
 * to (e.g. "http,https"), peer and host verification (always on), and the CA
 * bundle ca_bundle_for(explicit_path) when there is one.
 */
void https_global_init(void);
void https_policy(void *curl, const char *protocols, const char *explicit_path);

#endif
