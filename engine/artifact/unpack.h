/*
 * unpack.h - safe, streaming extraction of artifacts with libarchive.
 *
 * Decoding (the expensive part for xz) runs on its own thread and file
 * creation on the caller's, connected by a bounded queue, so the two use both
 * cores and memory stays bounded whatever the archive size
 * (measured: on two cores this is the only way to beat the shell; bench/README.md).
 *
 * Safety: an archive can only create regular files, directories, symlinks
 * and hard links strictly inside dest_dir. Anything else is refused with
 * TF_EUNSAFE and dest_dir is removed entirely, so nothing is ever placed.
 *
 * Ownership: *res and *errmsg are filled by the callee and freed by the
 * caller (unpack_result_release(), free()).
 */
#ifndef TFPROV_UNPACK_H
#define TFPROV_UNPACK_H

#include <stddef.h>
#include <stdint.h>

struct ctx;

struct unpack_entry {
	char *path;    /* relative to dest, after strip */
	int type;      /* 'f' file, 'd' dir, 'l' symlink, 'h' hardlink */
	char *link;    /* symlink target or hardlink (relative) source, else NULL */
	unsigned mode; /* permission bits after set-uid/gid dropped */
	int64_t size;
	char sha256[65]; /* files (and hard links to them): computed while writing */
};

struct unpack_result {
	struct unpack_entry *v;
	size_t n;
	uint64_t bytes; /* file data written */
};

/*
 * Streams `archive` (tar.xz, tar.gz/tgz, tar.bz2, tar.zst, plain tar, zip, and
 * .conda: the inner pkg-*.tar.zst and info-*.tar.zst are extracted) into
 * `dest_dir`, which must not exist yet (its parent must). Strips `strip`
 * leading components (entries with no component left are skipped). Refuses
 * with TF_EUNSAFE: absolute paths, '..' components, control characters in
 * names, device nodes, FIFOs and sockets, symlinks/hardlinks whose target
 * leaves dest, an entry that would write through a symlink. Drops set-uid,
 * set-gid and sticky bits. No fsync: the caller does one syncfs.
 * Returns 0, TF_EUNSAFE, TF_EINTEGRITY (bytes that do not decode: a
 * truncated or corrupt archive), TF_EIO (unreadable file, write error),
 * TF_ENOSPC, TF_EINTR or TF_EFAIL (dest exists) with *errmsg set.
 */
int unpack_archive(struct ctx *c, const char *archive, const char *dest_dir, int strip,
                   struct unpack_result *res, char **errmsg);
/*
 * unpack_archive(), naming the archive `label` (the artifact, not its cache
 * path) in events; with pinned >= 0 as unpack_archive_pinned() below.
 */
int unpack_archive_named(struct ctx *c, const char *archive, const char *label, int64_t pinned,
                         const char *dest_dir, int strip, struct unpack_result *res, char **errmsg);
void unpack_result_release(struct unpack_result *res);

/* Called on the writing thread for each regular file once it is written,
 * closed and hashed (e->path relative to dest_dir; e is valid for the call). */
typedef void (*unpack_file_fn)(void *arg, const struct unpack_entry *e);
/* unpack_archive() (no strip) calling on_file(arg, e) for every file written. */
int unpack_archive_each(struct ctx *c, const char *archive, const char *dest_dir,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res,
                        char **errmsg);

/*
 * unpack_archive_each() of a zip (a wheel) by `nparts` decoders at once
 * (1..UNPACK_ZIP_PARTS_MAX), each with its share of the entries (largest
 * first, balanced by compressed bytes), all writing into dest_dir under
 * every rule above; on_file is called from several threads. Entries up to
 * 4 MiB are inflated by libdeflate, larger ones stream through zlib. A name
 * held twice is refused (TF_EUNSAFE); any failure stops every decoder and
 * removes dest_dir.
 */
#define UNPACK_ZIP_PARTS_MAX 16
int unpack_zip_parallel(struct ctx *c, const char *archive, const char *dest_dir, int nparts,
                        unpack_file_fn on_file, void *arg, struct unpack_result *res,
                        char **errmsg);

/*
 * unpack_archive() of a conda package (conda.c): `is_conda` says the file is
 * a .conda container whatever its name (a cache file may have none); else it
 * is a .tar.bz2. Same refusals, no strip.
 */
int unpack_conda_package(struct ctx *c, const char *file, int is_conda, const char *dest_dir,
                         struct unpack_result *res, char **errmsg);

/*
 * unpack_archive() with a hard limit: an archive whose files add up to more
 * than its recorded unpacked_size is refused with TF_EINTEGRITY (and
 * dest_dir removed) the moment the limit would be passed.
 */
int unpack_archive_pinned(struct ctx *c, const char *archive, uint64_t unpacked_size,
                          const char *dest_dir, int strip, struct unpack_result *res,
                          char **errmsg);

/* Budget for an archive not verified yet whose unpacked size is not recorded:
 * this many times its compressed size (NVIDIA's redist archives unpack to 2-4x). */
#define UNPACK_RATIO 20

/* A file being downloaded by another thread (fetch_item's stream fields). */
struct unpack_follow {
	const uint64_t *bytes; /* bytes written so far, from offset 0 */
	const int *restarts;   /* changes when the file is cut to start over */
	const int *done;       /* set once the writer has finished (ok or not) */
	const int *failed;     /* set when this download failed (hash, size, error), or NULL */
	int64_t size;          /* the expected size, -1 if unknown */
	const char *label;     /* name in progress events and messages, or NULL */
	uint64_t budget;       /* most file bytes to write before verification, 0: none */
	int budget_pinned;     /* budget is the recorded unpacked_size (see below) */
};

/*
 * unpack_archive() of a file that is still being written: decoding overlaps
 * the download. The bytes are not verified yet: the caller places nothing
 * until the download's sha256 is checked. Fails (and removes dest_dir) when
 * the download starts over, ends early or fails; the caller then unpacks the
 * final, verified file with unpack_archive().
 *
 * Unverified bytes are decoded on a budget: writing more than `budget` file
 * bytes stops the decoder at once and removes dest_dir. A pinned budget (the
 * lock's unpacked_size) exceeded is TF_EINTEGRITY; otherwise (a ratio of
 * the compressed size) it is TF_EFAIL, and the caller waits for the
 * verification before unpacking anything.
 */
int unpack_archive_follow(struct ctx *c, const char *part, const struct unpack_follow *follow,
                          const char *dest_dir, int strip, struct unpack_result *res,
                          char **errmsg);

#endif
