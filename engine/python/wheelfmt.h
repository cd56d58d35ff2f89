/*
 * wheelfmt.h - the two text formats of the binary distribution format, one
 * codec each (https://packaging.python.org/specifications/
 * binary-distribution-format/, PEP 427; installed RECORD per
 * https://packaging.python.org/specifications/recording-installed-packages/):
 *
 *  - a wheel's file name, {name}-{version}[-{build}]-{python}-{abi}-{platform}.whl
 *    (PEP 425 tags, each part may hold "."-separated alternatives);
 *  - a RECORD row, `path,sha256=<urlsafe base64, no padding>,size`, CSV with
 *    the quoting of Python's csv module (a field holding a comma, a quote or
 *    a line break is quoted, a quote doubled).
 *
 * Every wheel file name and every RECORD in tfprov is read and written here:
 * the native installer (wheel.c), the wheelhouse (wheelhouse.c), the pip
 * artifacts (pipart.c), the owners' index (pkgfiles.c) and `mirror build`.
 * Strings returned are owned by the caller.
 */
#ifndef TFPROV_WHEELFMT_H
#define TFPROV_WHEELFMT_H

#include <stddef.h>

struct strbuf;

/* 1 when the file name is a valid wheel name (PEP 427 characters, 4 or 5 dashes, .whl). */
int wheel_name_ok(const char *filename);

struct wheel_name {
	char *name; /* the project, PEP 503 normalised */
	char *raw;  /* the project as the file spells it */
	char *version;
	char *build;           /* the build tag, or NULL */
	char *py, *abi, *plat; /* the tag parts, "." alternatives kept */
};

/*
 * Splits a wheel file name (no directory). 0 and *out (release with
 * wheel_name_release), or -EINVAL when it is not a wheel name (wheel_name_ok).
 */
int wheel_name_parse(const char *filename, struct wheel_name *out);
void wheel_name_release(struct wheel_name *w);

/* RECORD's hash column holds at most "sha256=" and 43 characters. */
#define RECORD_HASH_MAX 52

/* A sha256 in hex as RECORD's "sha256=<urlsafe base64, no padding>". */
void record_hash_encode(const char *hex, char out[RECORD_HASH_MAX]);
/* RECORD's "sha256=..." column to hex; 0, or -EINVAL for another algorithm or a bad digest. */
int record_hash_decode(const char *field, char hex[65]);

/*
 * Splits one RECORD line (up to its line break) into at most three fields,
 * each allocated (the caller frees them); returns how many it found.
 */
size_t record_fields(const char *line, char *f[3]);
/* Appends one RECORD row "path,hash,size\r\n", the path quoted when it needs it. */
void record_put_row(struct strbuf *sb, const char *path, const char *hash, const char *size);

#endif
