/*
 * python.h - the python room: making a Python env. Interpreters and venvs, the pip
 * driver, the native wheel and conda installers, which distribution owns which
 * file, and the Python downloads of a lock as artifacts.
 *
 * The one public header of engine/python/ (ARCHITECTURE.md section 2); what
 * only the room itself uses is in private/. Its parts, each with its own
 * comment below: conda, pipart, pkgfiles, pyenv, wheelfmt.
 */
#ifndef TFPROV_PYTHON_H
#define TFPROV_PYTHON_H

#include <stddef.h>
#include <stdint.h>

#include "ctx.h"
#include "error.h"

struct art;
struct artset;
struct prepared;

/*
 * conda (engine/python/conda.c) - installs a conda explicit lock natively (no conda binary), the
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
 * Fetches pkgs (verified by sha256 into the download cache) and installs them
 * into prefix with conda_install. prefix is root-relative, or a host path when
 * prefix_is_host (a throwaway env outside --root, e.g. for `tfprov lock`).
 * A package pinned by md5 only is refused (TF_EMANIFEST). `ahead`, when not
 * NULL, is parallel to pkgs: each package's artifact as the executor
 * prepared it (artifact.h), whose tree decode-ahead made is taken instead of
 * decoding the package again (conda_install's too).
 */
int conda_fetch_install(struct ctx *c, const char *prefix, int prefix_is_host,
                        const struct conda_pkg *pkgs, size_t n, struct art *ahead,
                        const char *stage, struct conda_result *res, struct why *why);

/*
 * 1 when the package cache of c (<cache>/pkgs) holds a complete entry of p
 * from the bytes the lock pins: conda_extract will reuse it, so decode-ahead
 * need not decode p (modules/pyenv.c).
 */
int conda_pkg_extracted(struct ctx *c, const struct conda_pkg *p);

/*
 * pipart (engine/python/pipart.c) - the files of a complete pip lock, named before anything changes.
 *
 * A pin `name==version --hash=sha256:H ...` names its file by hash only; the
 * URL and file name come from where pip would look: a direct reference
 * (`name @ URL`), a wheel directory (`--mirror DIR`), or a PEP 503 index
 * page (`<index>/<name>/`, whose links carry `#sha256=`). Only a file whose
 * hash the pin lists is taken (an index page is not trusted beyond that),
 * and the download is verified against that hash like every artifact. The
 * wheels whose tags cannot suit the env's interpreter (Python X.Y from the
 * manifest, the stack's platform) are left out; when that leaves none, every
 * pinned file is kept and pip or the native installer chooses at apply.
 *
 * The file name of each verified hash is kept in the cache beside it
 * (<cache>/names/<sha256>, with the URL where the index listed it), so an
 * `--offline` run and the pip step find the names again without the index.
 * The step then installs from a directory of links to the verified cache
 * files (pip with --no-index --find-links, or the native installer), never
 * from a second download. A later run whose cached copy no longer hashes
 * right (a power cut) fetches it again from where the index listed it.
 */

struct ctx;
struct artset;
struct pip_req;
struct strbuf;

struct pipart_src {
	const char *index_url; /* PEP 503 index (NULL: https://pypi.org/simple/) */
	const char *dir;       /* a directory of wheels (--mirror DIR): used instead */
	const char *pyver;     /* "3.12" of the env's interpreter, NULL when unknown */
	const char *arch;      /* "x86_64" */
};

/*
 * Adds one artifact per pinned file to out (several for a pin only when more
 * than one of its pinned files may suit the env). 0, or TF_E* with why
 * (caller frees) naming the pin and where it was looked for.
 */
int pipart_resolve(struct ctx *c, const struct pip_req *reqs, size_t n,
                   const struct pipart_src *src, struct artset *out, struct why *why);

/*
 * Fills `dir` (existing, empty) with a link (or copy) of the verified cache
 * file of each pin, under its file name. 0 with *complete 1 when every pin
 * has one, 0 when some pin has none (nothing to say: pip downloads as
 * before), or TF_E* with why.
 */
int pipart_wheelhouse(struct ctx *c, const struct pip_req *reqs, size_t n, const char *dir,
                      int *complete, struct why *why);

/*
 * Marks the wheels out->v[from..] for decode-ahead (artset_mark_python),
 * when the lock is all wheels (an sdist sends the whole lock to pip) and the
 * env at env_path (root-relative; Python X.Y pyver) does not hold that
 * version already: the native installer then takes their trees.
 */
void pipart_mark_predecode(struct ctx *c, struct artset *out, size_t from, const char *env_path,
                           const char *pyver);

/*
 * Byte-compiling ahead (pycahead.c): each wheel decode-ahead unpacks for
 * the env at env_path (root-relative, Python X.Y pyver) gets its .py files
 * compiled in the scratch (__pycache__ beside them, naming the files where
 * they will be installed), by the env's interpreter, or for a venv not made
 * yet by the system Python `want` (X.Y) and `interpreter` find. wheel.c
 * moves those .pyc files with their sources and compiles the rest itself.
 */
void pyc_ahead_attach(struct ctx *c, struct artset *s, const char *env_path, const char *pyver,
                      const char *want, const char *interpreter);

/*
 * pkgfiles (engine/python/pkgfiles.c) - which Python package owns which file of an env, read from the
 * package managers' own records:
 *
 *  - pip (and any installer that follows the wheel spec): every
 *    <site-packages>/<name>-<version>.dist-info/RECORD lists the files the
 *    distribution installed as `path,sha256=<urlsafe base64, no padding>,size`
 *    (PyPA "Recording installed projects",
 *    https://packaging.python.org/en/latest/specifications/recording-installed-packages/);
 *    paths are relative to site-packages (`../../../bin/x` for scripts).
 *    Entries without a hash (RECORD itself, compiled .pyc) are owned but not
 *    checked.
 *  - conda: <env>/conda-meta/<dist>.json has "name", "version" and "files"
 *    (paths relative to the env).
 *
 * Trust: an entry whose path is absolute or leaves the env after
 * normalisation is ignored (never audited, never removed).
 *
 * Paths in the index are root-relative absolute paths, like the state's.
 * The index owns its strings; pkgfiles_release() frees them.
 */

struct pkgfile {
	char *path;      /* root-relative */
	char *pkg;       /* "numpy 1.26.4" */
	char *norm;      /* normalised project name (PEP 503), for matching pins */
	char sha256[65]; /* hex, "" when the record has no hash */
	int64_t size;    /* -1 when unknown */
	char src;        /* 'p' a dist-info RECORD, 'c' conda-meta */
};

struct pkgfiles {
	struct pkgfile *v;
	size_t n, cap;
};

/* Reads the records of the env at root-relative `env_prefix`. 0 (an env with no records is empty). */
int pkgfiles_load(struct ctx *c, const char *env_prefix, struct pkgfiles *out);
void pkgfiles_release(struct pkgfiles *x);
/*
 * The env of stack `stack_id` (the top directory its pyenv resource
 * recorded) and the records of its packages: every one (`dists` NULL), or
 * only the RECORD entries of the distributions named in `dists` (PEP 503
 * names, as the pip step's `installed` hook lists them: the step owns its
 * attrs, this reads none). Returns the env's root-relative path (caller
 * frees), or NULL when the stack has no env; *out is then empty.
 */
char *pkgfiles_load_stack(struct ctx *c, int64_t stack_id, const struct strvec *dists,
                          struct pkgfiles *out);

/* The record of exactly `path`, or NULL. */
const struct pkgfile *pkgfiles_find(const struct pkgfiles *x, const char *path);
/* place_owned_fn (place.h) over the struct pkgfiles x: PLACE_OWNED, PLACE_OWNS_BELOW or 0. */
int pkgfiles_owned(void *x, const char *path);

/*
 * pyenv (engine/python/pyenv.c) - `manager: venv` environments and pip, driven through the env's
 * own interpreter and pip (never a home-made installer or resolver).
 *
 * Invariants:
 *  - Every child is started with an argv and a clean environment
 *    (spawn_env_base + spawn_env_python): no PIP_* or PYTHON* variable of the
 *    user's, no pip.conf at any level (PIP_CONFIG_FILE=/dev/null), pip runs
 *    with --isolated and the interpreter with -I.
 *  - pip_install() leaves the env exactly as it was when it fails: a download
 *    phase fetches and hash-checks every wheel into a private wheelhouse
 *    before the env is touched; the install phase then runs offline from that
 *    wheelhouse, with a hard-link snapshot of the env restored on failure.
 *  - Integrity failures (hash mismatch, a pinned wheel that is not there)
 *    return TF_EINTEGRITY and name the package.
 *
 * Paths are host paths. Strings returned through char ** are owned by the
 * caller; results are released with their _release function.
 */

struct ctx;
struct pip_req;
struct txn;

/*
 * Finds an interpreter of exactly `version` ("3.10"): explicit_path when
 * given, else the system's /usr/bin/python3.X, then /usr/local/bin/python3.X,
 * then python3.X on PATH. Each candidate is asked for sys.version_info,
 * whether it has ensurepip, and the real file it runs (through a shim such
 * as pyenv's, which execs it, and symlinks); without explicit_path *path is
 * that real file, so a venv never points through a shim. `shared` (a stack
 * for all users, pyenv_for_all_users): without explicit_path, an interpreter
 * that other users cannot run (a directory above it, such as a 0700 home,
 * or the file not executable by others) is refused, with the reason.
 * 0 and *path (caller frees); TF_EPRECOND and why naming the version,
 * what was tried and how to get it otherwise.
 */
int pyenv_find_python(struct ctx *c, const char *version, const char *explicit_path, int shared,
                      char **path, struct why *why);
/* 1 when an env at host_prefix is for all users: not inside $HOME (root's too). */
int pyenv_for_all_users(const char *host_prefix);

/* 1 when prefix holds a venv of python's X.Y with its bin/python, else 0. */
int venv_reusable(const char *python, const char *prefix);
/*
 * Creates a venv with pip at prefix using `python`. An existing venv of the
 * same X.Y is kept (*created = 0); any other existing path is TF_ECONFLICT
 * (a caller replacing an env moves it aside first, journaled:
 * txn_will_create). A failed creation may leave a partial tree at prefix
 * for the caller (its txn) to remove. 0, or an error with why.
 */
int venv_create(struct ctx *c, const char *python, const char *prefix, int *created,
                struct why *why);
/*
 * venv_create for the stack's env at env_path (root-relative): the venv is
 * made --without-pip and pip (with what else the interpreter's ensurepip
 * would install: setuptools before 3.12) is installed from the
 * interpreter's own bundled wheels by the native installer, in a fraction
 * of ensurepip's time; when the interpreter does not say which wheels,
 * ensurepip runs as venv runs it. `ahead` (may be NULL): what the executor
 * prepared for the step, whose trees of those wheels are taken.
 */
int venv_create_at(struct ctx *c, const char *python, const char *env_path, struct artset *ahead,
                   int *created, struct why *why);
/*
 * The wheels venv_create_at will install into a venv of `python`, asked of
 * its ensurepip during the prefetch, put into the download cache by their
 * sha256 and added to `out` as wheels decode-ahead unpacks (ART_WHEEL), so
 * that they are unpacked and byte-compiled while the downloads run and the
 * pyenv step only moves them. Adds nothing when the interpreter does not
 * name them (the step then does it all). Returns 0.
 */
int venv_bundled_artifacts(struct ctx *c, const char *python, struct artset *out);

struct pip_opts {
	const char *index_url;         /* --index-url; NULL: pip's default */
	const char *const *find_links; /* --find-links, NULL-terminated; may be NULL */
	int no_index;                  /* --no-index (find-links only) */
	int links_verified;            /* find_links[0] holds only files this run verified
	                                * against the pins' hashes (pipart_wheelhouse) */
	int complete;                  /* the pins are the full closure: --no-deps */
	int allow_sdist;               /* 0: --only-binary=:all: (no build code runs); 1: an
	                                * sdist pinned by hash builds offline with
	                                * --no-build-isolation, after the lock's setuptools
	                                * and wheel are installed */
	int resolve_rest;              /* --allow-incomplete-lock: after the verified pins,
	                                * pip resolves what they leave open, unhashed */
	const char *cache_dir;         /* pip's cache; NULL: --no-cache-dir */
	const char *cert;              /* CA bundle for --cert; NULL: default */
	double timeout_s;              /* per pip run; 0: 1 hour */
	/* pip_lock: when set, receives "name\tRequires-Dist" per requirement of each
	 * chosen distribution ("name\t" for one without any), from its METADATA as
	 * pip's report gives it, markers kept. */
	struct strvec *requires;
	/* pip_lock: when set, receives "name\tRequires-Python" for each chosen
	 * distribution that declares one (its METADATA, else the index's
	 * data-requires-python). */
	struct strvec *requires_python;
	/* pip_lock: when set, receives "name\tfile name" for each file whose hash
	 * the distribution's lock line holds (the file pip chose may repeat). */
	struct strvec *files;
	/* Set: the work directory (the wheelhouse) is journaled in this txn, so
	 * a kill leaves nothing behind; env_path is the env, root-relative. */
	struct txn *txn;
	const char *env_path;
	/* With txn and a complete lock: the installer the pip step chose in
	 * pip's place (wheelhouse_installer), or NULL for pip alone. */
	const struct pip_native *native;
	/* The repair (PEP 503 names; may be NULL): installed again although that
	 * version is there (pip: --force-reinstall of every pin), and
	 * uninstalled (the native installer only). */
	const struct strvec *reinstall, *drop;
	/* What the executor prepared for the pip step (artifact.h): the native
	 * installer takes the trees decode-ahead made of its wheels. NULL: none. */
	struct artset *ahead;
	/* Set by pip_install while pip changes the env in place: the pip
	 * processes' stdin, the env's busy file (place.h, PLACE_BUSY_NAME). */
	int stdin_fd;
};

/*
 * An installer the pip step hands to pip_install() in pip's place
 * (pip_opts.native), so that pip's driver knows no other installer. fill()
 * fills the empty wheelhouse `wheels` from o->find_links without pip;
 * install() installs the verified wheelhouse into the env through o->txn.
 * Each returns 0 with *done = 1, 0 with *done = 0 when it declines (nothing
 * changed: pip does that part), or an error with why.
 */
struct pip_native {
	int (*fill)(struct ctx *c, const char *prefix, const struct pip_req *reqs, size_t n,
	            const struct pip_opts *o, const char *wheels, int *done, struct why *why);
	int (*install)(struct ctx *c, const char *wheels, const struct pip_req *reqs, size_t n,
	               const struct pip_opts *o, int *done, struct why *why);
};

/* The native installer (wheelhouse.c): a complete lock of wheels installed by wheel.c. */
extern const struct pip_native wheelhouse_installer;

struct pip_dist {
	char *name; /* PEP 503 normalised */
	char *version;
	char *sha256; /* from the requirements when pinned there, else NULL */
	char *stamp;  /* env_dist_stamps: its files' lstat as a digest, else NULL */
};

struct pip_result {
	struct pip_dist *v; /* everything installed in the env after the run */
	size_t n;
	char *failed_pkg; /* on TF_EINTEGRITY: the package named by pip */
	char *log;        /* pip's stderr tail of the failing run, or NULL */
};

void pip_result_release(struct pip_result *r);

/*
 * Installs reqs into the env at prefix with <prefix>/bin/python -m pip:
 * --require-hashes, --no-deps when o->complete, --no-input, isolated.
 * On success res lists what the env holds. On failure the env is unchanged.
 */
int pip_install(struct ctx *c, const char *prefix, const struct pip_req *reqs, size_t n,
                const struct pip_opts *o, struct pip_result *res, struct why *why);

/*
 * Lists the distributions of the env at prefix (host path) as `pip list`
 * does, without starting its interpreter: every .dist-info (METADATA) and
 * .egg-info (PKG-INFO) of lib/python/site-packages, Name and Version,
 * the name PEP 503-normalised, the first of a name kept, sorted by name.
 * 0, or an error with why when the env has no site-packages.
 */
int env_dists(const char *prefix, struct pip_result *res, struct why *why);
/*
 * env_dists of the env at root-relative env_prefix, each distribution with
 * its stamp: the sha256 of the lstat (size, mtime, mode; "-" when missing)
 * of every file its RECORD lists, in path order. A file patched in place,
 * removed or replaced changes its distribution's stamp; reading it costs one
 * lstat per file (the fast check of `status` and `plan`), the per-file
 * hashes stay `verify --deep`'s. A distribution without a RECORD has the
 * stamp of no files.
 */
int env_dist_stamps(struct ctx *c, const char *env_prefix, struct pip_result *res, struct why *why);
/* The env the pyenv step of stack `stack_id` recorded (root-relative; caller frees), or NULL. */
char *pkgfiles_stack_env(struct ctx *c, int64_t stack_id);

/*
 * Completes a partial pin set (requirements text, hashes optional) into the
 * full closure with hashes via pip's resolver: pip install --dry-run
 * --ignore-installed --report. *out is requirements text with --hash lines,
 * sorted by name (caller frees). The hashes are those of the files pip chose
 * for this interpreter and platform.
 */
int pip_lock(struct ctx *c, const char *prefix, const char *reqs_text, const struct pip_opts *o,
             char **out, struct why *why);

struct spawn_result;

/* The PEP 503 index of an http(s) mirror built by `mirror build`: URL/simple/. */
char *pip_mirror_index(const char *mirror_url);
/*
 * Points o at a mirror: an http(s) mirror's PEP 503 pages (index_url, the
 * string returned in *simple for the caller to free), or a directory of
 * wheels (find-links only, --no-index; links must live as long as o).
 */
void pip_opts_mirror(struct pip_opts *o, const char *mirror, const char *links[2], char **simple);

/*
 * wheelfmt (engine/python/wheelfmt.c) - the two text formats of the binary distribution format, one
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

struct strbuf;

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
/*
 * The lowest glibc a wheel file name's platform tags allow, major * 1000 +
 * minor (PEP 600 manylinux_X_Y = glibc X.Y; manylinux1/2010/2014 = 2.5/2.12/2.17,
 * PEPs 513, 571, 599); 0 when it needs none (pure Python, an sdist).
 */
int wheel_glibc_floor(const char *filename);

/*
 * No distribution overwrites another, checked on the wheel files alone (host
 * paths of verified .whl files, with their file names, PEP 427, when the
 * paths are not: NULL to use the paths), before any step changes anything: each
 * wheel's RECORD read from the archive, a path two wheels ship shared when
 * their RECORD hashes are equal, else TF_ECONFLICT with why naming both
 * distributions and the path. The native installer checks again against
 * the env's own distributions (private/wheel.h).
 */
int wheel_overlaps(const char *const *paths, const char *const *names, size_t n, struct why *why);

/* RECORD's hash column holds at most "sha256=" and 43 characters. */
#define RECORD_HASH_MAX 52

#endif
