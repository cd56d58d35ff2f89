/*
 * conda.h - installs a conda explicit lock natively (no conda binary), the
 * way micromamba does: extract each verified package into a package cache,
 * link its files into a staging prefix, apply prefix replacement, write the
 * conda-meta records, then swap the staging prefix in atomically.
 *
 * Invariants:
 *  - A package cache entry <pkgs_dir>/<name>-<version>-<build>/ exists only
 *    complete: it is extracted into a temporary sibling and renamed, and it
 *    carries info/repodata_record.json with the sha256/md5 it came from; an
 *    entry whose record disagrees with the lock is extracted again.
 *  - Archive entries are checked before they are written: absolute paths,
 *    "..", control characters, device nodes and links leaving the package
 *    are refused (TF_EUNSAFE); set-uid/set-gid bits are dropped.
 *  - Files carry the FINAL prefix (prefix replacement writes `prefix`, never
 *    the staging path); a binary file whose placeholder is shorter than the
 *    prefix is refused and named.
 *  - The env at `prefix` is replaced only by a complete new env: in apply by
 *    the placement layer's journaled replace of the stage the pyenv step
 *    gives (so recovery after a kill knows both trees); elsewhere by
 *    renameat2 RENAME_EXCHANGE. On any failure the old env (or none) remains.
 *
 * `prefix` is the env's path as programs will see it (root-relative when
 * ctx->root is not "/"); `pkgs_dir` and `files` are host paths.
 */
#ifndef TFPROV_CONDA_H
#define TFPROV_CONDA_H

#include <stddef.h>
#include <stdint.h>

struct ctx;
struct conda_pkg;

struct conda_file {
	char *path;      /* relative to the prefix */
	char sha256[65]; /* of the bytes in the env (symlinks: of the link target text) */
	uint64_t size;
	unsigned mode; /* st_mode bits, including the file type */
};

struct conda_result {
	struct conda_file *files; /* every file and symlink placed, conda-meta included */
	size_t n, cap;
	size_t extracted, reused; /* package cache: newly extracted / reused entries */
	char *python_version;     /* "X.Y" when the lock has python, else NULL */
};

void conda_result_release(struct conda_result *r);

/*
 * Installs pkgs[i] (package file files[i]) into prefix, in the given
 * (topological) order. With `stage` (a host path that does not exist yet,
 * e.g. from txn_stage_dir) the env is built there, files carrying `prefix`,
 * and left for the caller to place (txn_replace_dir); without, it is built
 * in a sibling of prefix, synced and swapped in (a throwaway env: tfprov
 * lock). 0, or a TF_E* code with *errmsg (caller frees).
 */
int conda_install(struct ctx *c, const char *prefix, const char *pkgs_dir,
                  const struct conda_pkg *pkgs, char *const *files, size_t n, const char *stage,
                  struct conda_result *res, char **errmsg);

/*
 * Fetches pkgs (verified by sha256 into the download cache) and installs them
 * into prefix with conda_install. prefix is root-relative, or a host path when
 * prefix_is_host (a throwaway env outside --root, e.g. for `tfprov lock`).
 * A package pinned by md5 only is refused (TF_EMANIFEST).
 */
int conda_fetch_install(struct ctx *c, const char *prefix, int prefix_is_host,
                        const struct conda_pkg *pkgs, size_t n, const char *stage,
                        struct conda_result *res, char **errmsg);

/*
 * Extracts one package file into <pkgs_dir>/<dist>/ unless a complete entry
 * for the same hash is there (*reused = 1). *dir gets the entry's path.
 */
int conda_extract(struct ctx *c, const char *pkgs_dir, const struct conda_pkg *p, const char *file,
                  char **dir, int *reused, char **errmsg);

/*
 * 1 when the package cache of c (<cache>/pkgs) holds a complete entry of p
 * from the bytes the lock pins: conda_extract will reuse it, so decode-ahead
 * need not decode p (modules/python.c).
 */
int conda_pkg_extracted(struct ctx *c, const struct conda_pkg *p);

#endif
