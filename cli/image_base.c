/*
 * image_base.c - the base of `tfprov image build` checked against the stack
 * (image.c): its platform, its glibc against the floor of the pip lock's
 * wheels, the interpreters the stack's venvs link to. A build whose layers
 * come from the image cache (image_cache.c) runs the same checks.
 */
#include "image_int.h"

#include "error.h"
#include "event.h"
#include "kb.h"
#include "version.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *arch_of(enum platform p)
{
	return p == PLATFORM_LINUX_X86_64 ? "amd64" : NULL;
}

/* The stack's platform against the base's os/architecture. 0 or TF_EPRECOND (said). */
int check_base(struct ctx *c, const struct manifest *m, const struct oci_image *base,
               const char *ref)
{
	const char *os = json_string_value(json_object_get(base->config, "os"));
	const char *arch = json_string_value(json_object_get(base->config, "architecture"));
	const char *want = arch_of(m->stack.platform);
	if (want == NULL) {
		ev_log(c, EV_ERROR, "stack %s is for %s: an image is built for linux-x86_64 only",
		       m->stack.name.s, platform_name(m->stack.platform));
		return TF_EPRECOND;
	}
	if (os == NULL || strcmp(os, "linux") != 0 || arch == NULL || strcmp(arch, want) != 0) {
		ev_log(c, EV_ERROR,
		       "the base %s is %s/%s, the stack %s is for %s (linux/%s): choose a base of "
		       "that platform",
		       ref, os ? os : "?", arch ? arch : "?", m->stack.name.s,
		       platform_name(m->stack.platform), want);
		return TF_EPRECOND;
	}
	return 0;
}

/* "2.36" from the first "<key>" followed by a version in text, or "" (out holds 16). */
static void version_after(const char *text, size_t len, const char *key, char out[16])
{
	const char *p = text, *end = text + len;
	size_t kl = strlen(key);
	out[0] = '\0';
	while ((p = memmem(p, (size_t)(end - p), key, kl)) != NULL) {
		p += kl;
		size_t n = 0;
		while (p + n < end && n < 15 && (isdigit((unsigned char)p[n]) || p[n] == '.'))
			n++;
		while (n > 0 && p[n - 1] == '.')
			n--;
		if (n > 0 && memchr(p, '.', n)) {
			memcpy(out, p, n);
			out[n] = '\0';
			return;
		}
	}
}

/*
 * The base's glibc: the version its libc.so.6 says it is ("... stable release
 * version 2.36."; an older libc.so.6 -> libc-2.31.so by its target's name), else
 * the libc6 package in its dpkg status. ver gets "" when the base shows none;
 * where says what was read. 0 or TF_EFAIL (a layer that does not read).
 */
static int base_glibc(const struct oci_image *base, const char *blobs, char ver[16], char **where,
                      struct why *why)
{
	static char *const libc[] = {"/lib/x86_64-linux-gnu/libc.so.6",
	                             "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6",
	                             "/usr/lib64/libc.so.6", "/lib/libc.so.6"};
	static char *const status[] = {"/var/lib/dpkg/status"};
	char *data = NULL, *name = NULL;
	size_t len = 0;
	int rc = oci_image_read_file(base, blobs, libc, ARRAY_SIZE(libc), 32u << 20, &data, &len,
	                             &name, why);
	ver[0] = '\0';
	*where = NULL;
	if (rc == 0 && data) {
		version_after(data, len, "release version ", ver);
		if (ver[0] == '\0')
			version_after(name, strlen(name), "/libc-", ver);
		if (ver[0])
			*where = xstrdup(name);
	}
	free(data);
	free(name);
	data = name = NULL;
	if (rc == TF_EFAIL || ver[0])
		return rc;
	rc = oci_image_read_file(base, blobs, status, 1, 64u << 20, &data, &len, NULL, why);
	if (rc == 0 && data) {
		/* The libc6 stanza's Version: "2.36-9+deb12u4" is glibc 2.36. */
		const char *st = memmem(data, len, "\nPackage: libc6\n", 16);
		if (st == NULL && str_starts_with(data, "Package: libc6\n"))
			st = data;
		const char *next = st ? strstr(st + 1, "\n\n") : NULL;
		const char *v = st ? strstr(st, "\nVersion: ") : NULL;
		if (v && (next == NULL || v < next)) {
			version_after(v, strlen(v), "\nVersion: ", ver);
			if (ver[0])
				*where = xstrdup("the libc6 package in /var/lib/dpkg/status");
		}
	}
	free(data);
	return rc == TF_EFAIL ? rc : 0;
}

/*
 * The base's glibc against the floor of the pip lock's wheels (the one apply
 * checks the host against, modules/pip.c): a manylinux wheel does not load on
 * an older glibc, and a base without one runs none. 0, TF_EPRECOND (said) or
 * TF_EFAIL.
 */
int check_base_glibc(struct ctx *c, const struct manifest *m, const struct oci_image *base,
                     const char *blobs, const char *ref)
{
	struct compat *kb = NULL;
	struct diags d = {0};
	const char *source = NULL, *tf = NULL, *need;
	char ver[16], *where = NULL;
	struct why err = {0};
	int rc = 0;
	if (!m->pip.set)
		return 0;
	int loaded = compat_load(compat_default_path(), &kb, &d) == 0;
	need = compat_manifest_min_glibc(loaded ? kb : NULL, m, &source, &tf);
	if (need == NULL)
		goto out;
	rc = base_glibc(base, blobs, ver, &where, &err);
	if (rc != 0) {
		ev_log(c, EV_ERROR, "base %s: %s", ref, why_text(&err));
	} else if (ver[0] == '\0') {
		ev_log(
		    c, EV_ERROR,
		    "the base %s has no glibc (no libc.so.6 in /lib/x86_64-linux-gnu, "
		    "/usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64 or /lib, no libc6 in "
		    "/var/lib/dpkg/status), and the pip lock's wheels need glibc >= %s (%s%s%s): "
		    "choose a glibc-based base",
		    ref, need, source, tf ? " of TensorFlow " : "", tf ? tf : "");
		rc = TF_EPRECOND;
	} else if (version_cmp(ver, need) < 0) {
		ev_log(c, EV_ERROR,
		       "the base %s has glibc %s (%s), older than %s, which the pip lock's wheels "
		       "need (%s%s%s): they would not load in the image. Choose a base with glibc "
		       ">= %s, or a stack whose wheels need less",
		       ref, ver, where, need, source, tf ? " of TensorFlow " : "", tf ? tf : "",
		       need);
		rc = TF_EPRECOND;
	} else {
		ev_log(c, EV_DEBUG, "base %s: glibc %s (%s), the wheels need %s", ref, ver, where,
		       need);
	}
out:
	free(where);
	why_clear(&err);
	compat_free(kb);
	diags_release(&d);
	return rc;
}

int check_base_interpreters(struct ctx *c, const struct strvec *venvs, const struct strvec *pythons,
                            const struct oci_image *base, const char *blobs, const char *ref)
{
	struct why err = {0};
	int rc = 0;
	int *found = xcalloc(pythons->n + 1, sizeof(int));
	if (pythons->n)
		rc = oci_image_has_paths(base, blobs, pythons->v, pythons->n, found, &err);
	if (rc != 0)
		ev_log(c, EV_ERROR, "base %s: %s", ref, why_text(&err));
	for (size_t i = 0; rc == 0 && i < pythons->n && i < venvs->n; i++) {
		if (pythons->v[i][0] == '\0' || found[i])
			continue;
		ev_log(c, EV_ERROR,
		       "the venv /%s runs %s, which the base %s does not have: choose a base with "
		       "that Python, or name the base's interpreter in python.interpreter",
		       venvs->v[i], pythons->v[i], ref);
		rc = TF_EPRECOND;
	}
	free(found);
	why_clear(&err);
	return rc;
}
