/*
 * unpack_int.h - the insides of the one archive extractor, shared by its
 * three files: unpack.c (the decoder thread's archive streams, the queue
 * between it and the writer, the entry points), unpack_zip.c (a zip decoded
 * by libzip, in shares over several decoders), unpack_write.c (the writer on
 * the caller's thread: every path check and every file created). Private to
 * the artifact folder; see unpack.c for the invariants.
 */
#ifndef TFPROV_UNPACK_INT_H
#define TFPROV_UNPACK_INT_H

#include "artifact.h"
#include "error.h"
#include "unpack_pool.h"
#include "util.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define UNPACK_BUFSZ         (64u * 1024)
#define UNPACK_NBUF          32 /* 2 MiB in flight at most */
#define UNPACK_RING          1024
#define PROGRESS_INTERVAL_NS 250000000ull

enum mkind { M_ENTRY, M_DATA, M_FILE_END, M_EOF, M_ERROR };

struct raw_entry {
	char *path;
	char *link; /* symlink target or hardlink name */
	int hard;
	unsigned type; /* AE_IF* */
	unsigned perm;
	int64_t size;
	int has_mtime;
	struct timespec mtime;
	int decoder_hashes; /* the digest comes with M_FILE_END */
};

struct msg {
	enum mkind kind;
	struct raw_entry *e;
	char *buf;
	size_t len;
	char *err;
	char sha256[65]; /* M_FILE_END: the file's digest when the decoder hashed it */
};

struct queue {
	pthread_mutex_t mu;
	pthread_cond_t can_pop, can_push, can_take;
	struct msg ring[UNPACK_RING];
	size_t head, count;
	char *free_bufs[UNPACK_NBUF];
	size_t nfree;
	int abort;
	uint64_t in_bytes; /* compressed bytes consumed, for progress */
};

struct decoder {
	struct queue *q;
	const char *archive;
	int conda;
	const struct unpack_follow *follow; /* non-NULL: read a .part as it grows */
	int part, nparts;                   /* nparts > 0: this share of a zip (libzip) */
	uint64_t *zip_in;                   /* compressed bytes decoded by all the shares */
	struct core_claim claim;            /* the pool's core this decoder holds, if any */
};

/* Reads a file that another thread is still appending to (unpack_follow). */
struct follow_src {
	const char *path;
	const struct unpack_follow *f;
	struct core_claim *claim;
	int fd;
	int restarts0;
	uint64_t off;
	char buf[1u << 20];
};

/* The writer: the caller thread's side of one unpack (unpack_write.c). */
struct writer {
	struct ctx *c;
	const char *archive;
	const char *dest;
	int destfd;
	int strip;
	struct unpack_result *res;
	size_t cap;
	char *parent;   /* cached parent dir, relative ("" for dest) */
	int parent_fd;  /* its fd (destfd itself for "") */
	struct why why; /* the first failure (w_fail) */
	struct strvec symlinks;
	uint64_t last_progress;
	int64_t archive_size;
	const char *label;
	const struct unpack_follow *follow;
	uint64_t budget; /* most file bytes this unpack may write (0: no limit unless pinned) */
	/*
	 * What a decoding error is: bytes that cannot be decoded are a damaged
	 * archive (TF_EINTEGRITY, exit 5) once they are the final file; while a
	 * download is followed they may just be incomplete (TF_EIO: the caller
	 * unpacks the verified file instead).
	 */
	int corrupt;
	int pinned;             /* the budget is the recorded unpacked_size */
	uint64_t bound;         /* not pinned: the hard bound (unpack_bound), 0: none */
	uint64_t *shared;       /* a share of a zip: the file bytes of every share */
	unpack_file_fn on_file; /* each regular file once written and closed */
	void *on_file_arg;
};

/* What an unpack_common call decodes, and how. */
struct unpack_how {
	const char *label;
	const struct unpack_follow *follow;
	int64_t pinned;
	int conda;
	unpack_file_fn on_file;
	void *on_file_arg;
	/* A share of unpack_zip_parallel: dest_dir exists and is the caller's
	 * to remove; symlinks and directory modes are checked after every share. */
	int part, nparts;
	uint64_t *zip_in;
	const int *stop;           /* set when another share failed */
	uint64_t bound;            /* a share: the zip's bound (unpack_zip_parallel) */
	uint64_t *shared;          /* a share: file bytes written by every share */
	struct unpack_share share; /* a decoder of a pool sharing cores */
};

/* The queue between a decoder thread and the writer (unpack.c). */
void raw_entry_free(struct raw_entry *e);
int queue_push(struct queue *q, struct msg m);
struct msg queue_pop(struct queue *q);
char *buf_take(struct queue *q);
void buf_give(struct queue *q, char *b);
void queue_abort(struct queue *q);
/* Room for `expected` bytes on dirfd's file system: 0, or TF_ENOSPC through w. */
int check_room(struct writer *w, int dirfd, const char *where, uint64_t expected);
/* One unpack: a decoder thread (or share of a zip) and the writer (unpack.c). */
int unpack_common(struct ctx *c, const char *archive, const struct unpack_how *how,
                  const char *dest_dir, int strip, struct unpack_result *res, struct why *why);
/* The decoder's share of a zip (unpack_zip.c): the messages decode_stream pushes. */
int decode_zip_part(struct decoder *d);

/* The writer (unpack_write.c). */
int has_control(const char *s);
/* Names go into terminal messages: control characters are shown escaped. */
char *escape_name(const char *s);
void w_fail(struct writer *w, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void w_unsafe(struct writer *w, const char *entry, const char *why);
void drop_parent(struct writer *w);
int over_budget(struct writer *w, struct queue *q, size_t len);
/* Checks one entry and creates it (with its data, popped from q). */
void handle_entry(struct writer *w, struct queue *q, struct raw_entry *e);
/* Every symlink again, resolved beneath dest (openat2): no chain escapes. */
void check_symlinks(struct writer *w);
void finish_dirs(struct writer *w);
void maybe_progress(struct writer *w, struct queue *q, int force);

#endif
