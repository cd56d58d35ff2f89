/*
 * lazylibs.c - libcurl, libarchive and libzip loaded when first called, not
 * when tfprov starts.
 *
 * Why: `tfprov run STACK -- CMD` stands before every command a user runs, and
 * on Debian 12 those three libraries pull in some 40 more (GnuTLS, Kerberos,
 * LDAP, libxml2, ICU ...): loading and relocating them is most of a process
 * start (bench/README.md, run_cost.sh: an empty program linked to all of
 * them starts in ~15 ms, to the rest in ~2.6 ms). Only the commands that
 * download or unpack need them, and those take seconds anyway.
 *
 * How: this file defines each function of those libraries that tfprov calls,
 * with the prototype of the library's own header (so the compiler checks
 * every one), as a trampoline that resolves the real function with dlsym on
 * first use, from the library dlopen()ed once. The build links tfprov without
 * -lcurl -larchive -lzip when TFPROV_LAZY_LIBS is set (CMakeLists.txt, the
 * default for the Debian build; the Debian package Depends on the three
 * libraries by name, as dpkg-shlibdeps no longer sees them). The portable
 * release links everything statically and compiles this file to nothing.
 *
 * The variadic setters (curl_easy_setopt, curl_multi_setopt,
 * curl_easy_getinfo) pass their one argument on as a pointer-sized word:
 * every option tfprov sets is a long, a pointer, a curl_off_t or a function
 * pointer, all one 8-byte word on the LP64 ABIs tfprov builds for (asserted
 * below). archive_set_error formats its message here and passes it as "%s".
 */
#include "lazylibs.h"

#include <stddef.h>

#ifdef TFPROV_LAZY_LIBS

#define CURL_DISABLE_TYPECHECK
#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <zip.h>

#include "error.h"

#include <string.h>

_Static_assert(sizeof(long) == sizeof(void *) && sizeof(curl_off_t) == sizeof(void *),
               "curl option arguments are forwarded as one pointer-sized word");

#ifndef TFPROV_SONAME_CURL
#define TFPROV_SONAME_CURL "libcurl.so.4"
#endif
#ifndef TFPROV_SONAME_ARCHIVE
#define TFPROV_SONAME_ARCHIVE "libarchive.so.13"
#endif
#ifndef TFPROV_SONAME_ZIP
#define TFPROV_SONAME_ZIP "libzip.so.4"
#endif

enum { L_CURL, L_ARCHIVE, L_ZIP, L_N };

static const char *const sonames[L_N] = {TFPROV_SONAME_CURL, TFPROV_SONAME_ARCHIVE,
                                         TFPROV_SONAME_ZIP};
static void *handles[L_N];
static pthread_once_t once[L_N] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

/* The package depends on these libraries: this is a broken install, which no caller can handle. */
__attribute__((noreturn)) static void die(const char *what, const char *name)
{
	tf_fatal("%s %s: %s (reinstall tfprov's dependencies)", what, name, dlerror());
}

static void open_curl(void)
{
	handles[L_CURL] = dlopen(sonames[L_CURL], RTLD_NOW | RTLD_GLOBAL);
}
static void open_archive(void)
{
	handles[L_ARCHIVE] = dlopen(sonames[L_ARCHIVE], RTLD_NOW | RTLD_GLOBAL);
}
static void open_zip(void)
{
	handles[L_ZIP] = dlopen(sonames[L_ZIP], RTLD_NOW | RTLD_GLOBAL);
}

static void *lazy_sym(int lib, const char *name)
{
	static void (*const openers[L_N])(void) = {open_curl, open_archive, open_zip};
	pthread_once(&once[lib], openers[lib]);
	if (handles[lib] == NULL)
		die("cannot load", sonames[lib]);
	void *p = dlsym(handles[lib], name);
	if (p == NULL)
		die("cannot find", name);
	return p;
}

/* The real function `name`, resolved once (a race resolves it twice, to the same value). */
#define REAL(lib, name)                                                                            \
	({                                                                                         \
		static __typeof__(name) *fn_;                                                      \
		__typeof__(name) *f_ = __atomic_load_n(&fn_, __ATOMIC_ACQUIRE);                    \
		if (f_ == NULL) {                                                                  \
			f_ = (__typeof__(name) *)lazy_sym(lib, #name);                             \
			__atomic_store_n(&fn_, f_, __ATOMIC_RELEASE);                              \
		}                                                                                  \
		f_;                                                                                \
	})

#define LAZY(lib, ret, name, params, args)                                                         \
	ret name params                                                                            \
	{                                                                                          \
		return REAL(lib, name) args;                                                       \
	}
#define LAZY_VOID(lib, name, params, args)                                                         \
	void name params                                                                           \
	{                                                                                          \
		REAL(lib, name) args;                                                              \
	}

/* libcurl */
LAZY_VOID(L_CURL, curl_easy_cleanup, (CURL * h), (h))
LAZY(L_CURL, CURL *, curl_easy_init, (void), ())
LAZY(L_CURL, CURLcode, curl_easy_perform, (CURL * h), (h))
LAZY(L_CURL, const char *, curl_easy_strerror, (CURLcode c), (c))
LAZY(L_CURL, CURLcode, curl_global_init, (long flags), (flags))
LAZY(L_CURL, CURLMcode, curl_multi_add_handle, (CURLM * m, CURL *h), (m, h))
LAZY(L_CURL, CURLMcode, curl_multi_cleanup, (CURLM * m), (m))
LAZY(L_CURL, CURLMsg *, curl_multi_info_read, (CURLM * m, int *n), (m, n))
LAZY(L_CURL, CURLM *, curl_multi_init, (void), ())
LAZY(L_CURL, CURLMcode, curl_multi_perform, (CURLM * m, int *running), (m, running))
LAZY(L_CURL, CURLMcode, curl_multi_poll,
     (CURLM * m, struct curl_waitfd extra_fds[], unsigned int n, int timeout_ms, int *ret),
     (m, extra_fds, n, timeout_ms, ret))
LAZY(L_CURL, CURLMcode, curl_multi_remove_handle, (CURLM * m, CURL *h), (m, h))
LAZY(L_CURL, struct curl_slist *, curl_slist_append, (struct curl_slist * l, const char *s), (l, s))
LAZY_VOID(L_CURL, curl_slist_free_all, (struct curl_slist * l), (l))

/* The variadic ones: one pointer-sized argument forwarded (see above). */
#define ONE_WORD(last)                                                                             \
	va_list ap;                                                                                \
	va_start(ap, last);                                                                        \
	void *arg = va_arg(ap, void *);                                                            \
	va_end(ap)

CURLcode curl_easy_setopt(CURL *h, CURLoption o, ...)
{
	ONE_WORD(o);
	return REAL(L_CURL, curl_easy_setopt)(h, o, arg);
}

CURLcode curl_easy_getinfo(CURL *h, CURLINFO i, ...)
{
	ONE_WORD(i);
	return REAL(L_CURL, curl_easy_getinfo)(h, i, arg);
}

CURLMcode curl_multi_setopt(CURLM *m, CURLMoption o, ...)
{
	ONE_WORD(o);
	return REAL(L_CURL, curl_multi_setopt)(m, o, arg);
}

/* libarchive */
LAZY(L_ARCHIVE, __LA_MODE_T, archive_entry_filetype, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, const char *, archive_entry_hardlink, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, const char *, archive_entry_hardlink_utf8, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, time_t, archive_entry_mtime, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, int, archive_entry_mtime_is_set, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, long, archive_entry_mtime_nsec, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, const char *, archive_entry_pathname, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, const char *, archive_entry_pathname_utf8, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, __LA_MODE_T, archive_entry_perm, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, la_int64_t, archive_entry_size, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, int, archive_entry_size_is_set, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, const char *, archive_entry_symlink, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, const char *, archive_entry_symlink_utf8, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, const char *, archive_error_string, (struct archive * a), (a))
LAZY(L_ARCHIVE, la_int64_t, archive_filter_bytes, (struct archive * a, int n), (a, n))
LAZY(L_ARCHIVE, int, archive_filter_code, (struct archive * a, int n), (a, n))
LAZY(L_ARCHIVE, la_ssize_t, archive_read_data, (struct archive * a, void *buf, size_t n),
     (a, buf, n))
LAZY(L_ARCHIVE, int, archive_read_free, (struct archive * a), (a))
LAZY(L_ARCHIVE, struct archive *, archive_read_new, (void), ())
LAZY(L_ARCHIVE, int, archive_read_next_header, (struct archive * a, struct archive_entry **e),
     (a, e))
LAZY(L_ARCHIVE, int, archive_read_open,
     (struct archive * a, void *data, archive_open_callback *o, archive_read_callback *r,
      archive_close_callback *c),
     (a, data, o, r, c))
LAZY(L_ARCHIVE, int, archive_read_open_filename, (struct archive * a, const char *f, size_t n),
     (a, f, n))
LAZY(L_ARCHIVE, int, archive_read_support_filter_all, (struct archive * a), (a))
LAZY(L_ARCHIVE, int, archive_read_support_filter_zstd, (struct archive * a), (a))
LAZY(L_ARCHIVE, int, archive_read_support_format_gnutar, (struct archive * a), (a))
LAZY(L_ARCHIVE, int, archive_read_support_format_tar, (struct archive * a), (a))
LAZY(L_ARCHIVE, int, archive_read_support_format_zip, (struct archive * a), (a))

/* The deterministic layer writer (engine/image/ocilayer.c). */
LAZY(L_ARCHIVE, struct archive_entry *, archive_entry_new, (void), ())
LAZY_VOID(L_ARCHIVE, archive_entry_free, (struct archive_entry * e), (e))
LAZY(L_ARCHIVE, struct archive_entry *, archive_entry_clear, (struct archive_entry * e), (e))
LAZY_VOID(L_ARCHIVE, archive_entry_set_pathname, (struct archive_entry * e, const char *p), (e, p))
LAZY_VOID(L_ARCHIVE, archive_entry_set_filetype, (struct archive_entry * e, unsigned int t), (e, t))
LAZY_VOID(L_ARCHIVE, archive_entry_set_perm, (struct archive_entry * e, __LA_MODE_T m), (e, m))
LAZY_VOID(L_ARCHIVE, archive_entry_set_size, (struct archive_entry * e, la_int64_t n), (e, n))
LAZY_VOID(L_ARCHIVE, archive_entry_set_mtime, (struct archive_entry * e, time_t t, long ns),
          (e, t, ns))
LAZY_VOID(L_ARCHIVE, archive_entry_set_uid, (struct archive_entry * e, la_int64_t u), (e, u))
LAZY_VOID(L_ARCHIVE, archive_entry_set_gid, (struct archive_entry * e, la_int64_t g), (e, g))
LAZY_VOID(L_ARCHIVE, archive_entry_set_symlink, (struct archive_entry * e, const char *t), (e, t))
LAZY(L_ARCHIVE, struct archive *, archive_write_new, (void), ())
LAZY(L_ARCHIVE, int, archive_write_set_format_pax_restricted, (struct archive * a), (a))
LAZY(L_ARCHIVE, int, archive_write_set_bytes_in_last_block, (struct archive * a, int n), (a, n))
LAZY(L_ARCHIVE, int, archive_write_open,
     (struct archive * a, void *data, archive_open_callback *o, archive_write_callback *w,
      archive_close_callback *c),
     (a, data, o, w, c))
LAZY(L_ARCHIVE, int, archive_write_header, (struct archive * a, struct archive_entry *e), (a, e))
LAZY(L_ARCHIVE, la_ssize_t, archive_write_data, (struct archive * a, const void *b, size_t n),
     (a, b, n))
LAZY(L_ARCHIVE, int, archive_write_close, (struct archive * a), (a))
LAZY(L_ARCHIVE, int, archive_write_free, (struct archive * a), (a))

void archive_set_error(struct archive *a, int err, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	REAL(L_ARCHIVE, archive_set_error)(a, err, "%s", msg);
}

/* libzip */
LAZY_VOID(L_ZIP, zip_discard, (zip_t * z), (z))
LAZY_VOID(L_ZIP, zip_error_fini, (zip_error_t * e), (e))
LAZY_VOID(L_ZIP, zip_error_init_with_code, (zip_error_t * e, int code), (e, code))
LAZY(L_ZIP, const char *, zip_error_strerror, (zip_error_t * e), (e))
LAZY(L_ZIP, int, zip_fclose, (zip_file_t * f), (f))
LAZY(L_ZIP, int, zip_file_get_external_attributes,
     (zip_t * z, zip_uint64_t i, zip_flags_t fl, zip_uint8_t *os, zip_uint32_t *attr),
     (z, i, fl, os, attr))
LAZY(L_ZIP, const char *, zip_file_strerror, (zip_file_t * f), (f))
LAZY(L_ZIP, zip_file_t *, zip_fopen_index, (zip_t * z, zip_uint64_t i, zip_flags_t fl), (z, i, fl))
LAZY(L_ZIP, zip_int64_t, zip_fread, (zip_file_t * f, void *buf, zip_uint64_t n), (f, buf, n))
LAZY(L_ZIP, const char *, zip_get_name, (zip_t * z, zip_uint64_t i, zip_flags_t fl), (z, i, fl))
LAZY(L_ZIP, zip_int64_t, zip_get_num_entries, (zip_t * z, zip_flags_t fl), (z, fl))
LAZY(L_ZIP, zip_t *, zip_open, (const char *path, int flags, int *err), (path, flags, err))
LAZY(L_ZIP, int, zip_stat_index, (zip_t * z, zip_uint64_t i, zip_flags_t fl, zip_stat_t *st),
     (z, i, fl, st))
LAZY(L_ZIP, const char *, zip_strerror, (zip_t * z), (z))

/* The version calls of `tfprov --version --verbose`. */
LAZY(L_CURL, curl_version_info_data *, curl_version_info, (CURLversion v), (v))
LAZY(L_ARCHIVE, const char *, archive_version_string, (void), ())
LAZY(L_ARCHIVE, const char *, archive_version_details, (void), ())
LAZY(L_ZIP, const char *, zip_libzip_version, (void), ())

const char *lazylibs_soname(const char *lib)
{
	if (strcmp(lib, "libcurl") == 0)
		return sonames[L_CURL];
	if (strcmp(lib, "libarchive") == 0)
		return sonames[L_ARCHIVE];
	if (strcmp(lib, "libzip") == 0)
		return sonames[L_ZIP];
	return NULL;
}

#else
const char *lazylibs_soname(const char *lib)
{
	(void)lib; /* the portable build links them statically */
	return NULL;
}
#endif /* TFPROV_LAZY_LIBS */
