/*
 * wheel.h - a native installer for verified wheels (PEP 427 and the binary
 * distribution format spec, https://packaging.python.org/specifications/
 * binary-distribution-format/; installed metadata per PEP 376 and
 * https://packaging.python.org/specifications/recording-installed-packages/).
 *
 * It does what `pip install --no-deps` does with wheels that are already
 * downloaded and hash-checked, so that pip list / pip check / pip uninstall
 * see the same distributions afterwards: root files into purelib or platlib
 * (Root-Is-Purelib), <name>.data/<scheme>/ into the env's schemes (scripts
 * whose first line is #!python get the env's interpreter; headers go to
 * include/site/pythonX.Y/<name> in a venv), console and GUI entry points as
 * pip's script wrappers, INSTALLER ("tfprov"), REQUESTED, direct_url.json
 * for `name @ URL` requirements, byte-code compiled by the env's python
 * (one process, a worker per core, fed while the wheels unpack), and RECORD listing every installed file with
 * its sha256. An older version of a distribution is uninstalled from its
 * RECORD first; the same version is left alone (pip: "already satisfied").
 *
 * Atomicity: everything happens in a hard-link copy of the env staged with
 * txn_stage_dir (written files are always new inodes, so the live env is
 * never touched), and the copy replaces the env with txn_replace_dir. A
 * failure, an abort or a kill -9 leaves the env exactly as it was.
 *
 * Wheels are unpacked by unpack_archive() (every name checked, nothing
 * written outside the copy), several at once (largest first, one thread per
 * core); every file is checked against the wheel's own RECORD hash.
 */
#ifndef TFPROV_WHEEL_H
#define TFPROV_WHEEL_H

#include <stddef.h>
#include "error.h"

struct art;
struct artset;

struct ctx;
struct strvec;
struct txn;

struct wheel_src {
	const char *path;     /* a verified .whl (host path) */
	const char *req_name; /* the name as the requirement spelled it, or NULL */
	const char *url;      /* direct reference "name @ URL", else NULL */
	const char *sha256;   /* of the .whl, for direct_url.json; may be NULL */
	int reinstall;        /* installed again even when that version is there (its
	                       * files changed in place: the pip step's repair) */
	struct art *ahead;    /* the step's prepared artifact of this file, whose tree
	                       * decode-ahead made is taken (wheel_ahead_art), or NULL */
};

struct wheel_stats {
	size_t installed, skipped, removed; /* distributions */
	size_t files;                       /* files written (scripts and .pyc included) */
};

/*
 * Installs the wheels into the env at env_path (root-relative; its
 * interpreter is <env>/bin/python). 0, or an error with why: TF_EINTEGRITY
 * (a file differs from the wheel's RECORD), TF_EUNSAFE (an unsafe entry),
 * TF_EFAIL (an unsupported wheel, a failed compile), TF_EIO.
 *
 * No distribution overwrites another: before anything is staged, the paths
 * each wheel's RECORD lists (where they will be installed) are compared with
 * those of the other wheels and of the distributions that stay in the env;
 * a path two of them ship is shared when their RECORD hashes are equal (the
 * nvidia/__init__.py of every nvidia-*-cu<N> wheel) and TF_ECONFLICT naming
 * both distributions and the path when they differ. Uninstalling a
 * distribution (an older version, or one of `drop`) keeps every file that a
 * distribution staying in the env also lists.
 */
int wheel_install(struct ctx *c, struct txn *t, const char *env_path, const struct wheel_src *w,
                  size_t n, struct wheel_stats *stats, struct why *why);
/* wheel_install that first uninstalls the distributions named in `drop`
 * (PEP 503 names; may be NULL), counted in stats->removed. */
int wheel_install_drop(struct ctx *c, struct txn *t, const char *env_path,
                       const struct wheel_src *w, size_t n, const struct strvec *drop,
                       struct wheel_stats *stats, struct why *why);
/*
 * The same into an env that is being built in place and holds no
 * distribution yet (a venv made --without-pip, under txn_will_create: a kill
 * or failure removes it whole): written straight into it, no copy staged.
 * It holds the env's busy file (place.h) while its byte-compiler runs.
 * Scripts name `exe` (a host path: the interpreter that would have run pip).
 */
int wheel_install_fresh(struct ctx *c, const char *env_path, const struct wheel_src *w, size_t n,
                        const char *exe, struct wheel_stats *stats, struct why *why);

/*
 * 1 unless the env at env_path (root-relative) holds this wheel file's
 * distribution and version already (lib/python<pyver>/site-packages), which
 * wheel_install leaves alone: decode-ahead skips it (pipart_mark_predecode).
 */
/*
 * The artifact of arts (what the executor prepared for the step: artifact.h)
 * that the wheel file `file` was made from, when decode-ahead left its tree
 * there: the ART_WHEEL whose URL names the same file and whose verified file
 * `file` is (a hard link: the wheelhouse) or has the bytes of (a copy:
 * sha256). NULL when none, and when arts is NULL.
 */
struct art *wheel_ahead_art(struct artset *arts, const char *file);
int wheel_predecode_wanted(struct ctx *c, const char *env_path, const char *pyver,
                           const char *filename);

#endif
