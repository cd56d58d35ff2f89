/*
 * wheel_int.h - the insides of the native wheel installer, shared by its
 * files: wheel.c (the driver and installing one wheel), wheel_record.c
 * (INSTALLER, REQUESTED, direct_url.json and RECORD of each installed
 * wheel), wheel_compile.c (the byte-compiler process), wheel_uninstall.c
 * (the older versions leaving the copy) and wheel_overlap.c (paths two
 * distributions both ship). Private to engine/python/.
 */
#ifndef TFPROV_WHEEL_INT_H
#define TFPROV_WHEEL_INT_H

#include "error.h"
#include "wheel.h"
#include "ctx.h"
#include "spawn.h"
#include "util.h"

#include <pthread.h>
#include <stdint.h>

struct compiler;

struct scheme {
	char *purelib, *platlib, *scripts, *data, *headers; /* relative to the env */
	char *xy, *cache_tag;
	char *exe; /* the interpreter scripts name: <final>/bin/python */
};

struct whl {
	const struct wheel_src *src;
	int64_t size;
	char *name, *version;  /* from the file name; name PEP 503-normalised */
	char *distinfo;        /* "<dist>-<ver>.dist-info" */
	const char *libdir;    /* purelib or platlib */
	int skip;              /* the same version is installed already */
	struct strvec records; /* "relpath\x1fhash\x1fsize" */
	struct strvec pys;     /* rel paths of installed .py files (their .pyc in RECORD) */
	struct strvec late;    /* those the byte-compiler gets after the unpack */
	struct why why;        /* the first failure (whl_fail) */
};

struct job {
	struct ctx *c;
	const char *stage, *final;
	struct scheme *sc;
	struct whl *w;
	size_t n;
	struct compiler *cc;       /* the byte-compiler, fed while unpacking */
	int ahead;                 /* the lib dir is where pycahead.c's .pyc files name */
	size_t nahead;             /* .pyc files taken from decode-ahead's trees */
	const struct strvec *drop; /* PEP 503 names to uninstall; may be NULL */
	struct strvec keep; /* sorted: files of the dists that stay (uninstall spares them) */
};

/* The byte-compiler (wheel_compile.c): one process of the env's python. */
struct compiler {
	struct ctx *c;
	int fd, child_fd; /* our end of the socket pair, the child's stdin */
	pthread_t th;
	pthread_mutex_t mu;
	int armed;   /* compiler_start set it up: the process starts with the first file */
	int running; /* the process was started */
	int exited;  /* set by the thread when the child is gone */
	int lost;    /* a line could not be sent: the child is gone */
	int rc;
	struct spawn_result r;
	char *argv[8];
	struct strvec env;
	size_t sent;
};

struct owned {
	char *rel;       /* relative to the env */
	char hex[65];    /* "" when its RECORD row has no hash */
	const char *who; /* "name version" (borrowed) */
};

void whl_fail(struct whl *w, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
char *relpath(const char *from, const char *to);
void add_record(struct whl *w, const char *relfile, const char *hex, int64_t size);
int put_generated(struct job *j, struct whl *w, const char *rel, const char *text, unsigned mode);
char *header_value(const char *text, const char *key);
char *dest_of(struct job *j, struct whl *w, const char *p, const char *datadir, int *script);
char *resolve_rel(const char *dir, const char *rec);
int uninstall(struct job *j, const char *libdir, const char *distinfo, struct why *why);
void installed_dists(const char *stage, const char *libdir, struct strvec *out);
int remove_older(struct job *j, struct wheel_stats *stats, struct why *why);
int cmp_str(const void *a, const void *b);
void finish_job(size_t i, void *arg);
int compiler_start(struct compiler *cp, struct job *j, struct why *why);
void compiler_send(struct compiler *cp, const char *tmp, const char *rel);
int compiler_finish(struct compiler *cp, struct why *why);
void owned_installed(const char *env, const char *libdir, const char *distinfo, const char *who,
                     int with_pyc, struct owned **v, size_t *n, size_t *cap);
int check_overlaps(struct job *j, struct why *why);
int parse_filename(struct whl *w);

#endif
