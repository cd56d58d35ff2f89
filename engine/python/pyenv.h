/*
 * pyenv.h - `manager: venv` environments and pip, driven through the env's
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
#ifndef TFPROV_PYENV_H
#define TFPROV_PYENV_H

#include <stddef.h>

struct ctx;
struct pip_req;
struct txn;

/*
 * Finds an interpreter of exactly `version` ("3.10"): explicit_path when
 * given, else python3.X on PATH, /usr/bin/python3.X, /usr/local/bin/python3.X.
 * Each candidate is asked for sys.version_info and whether it has ensurepip.
 * 0 and *path (caller frees); TF_EPRECOND and *errmsg naming the version and
 * how to get it otherwise.
 */
int pyenv_find_python(struct ctx *c, const char *version, const char *explicit_path, char **path,
                      char **errmsg);

/* 1 when prefix holds a venv of python's X.Y with its bin/python, else 0. */
int venv_reusable(const char *python, const char *prefix);
/*
 * Creates a venv with pip at prefix using `python`. An existing venv of the
 * same X.Y is kept (*created = 0); any other existing path is TF_ECONFLICT
 * (a caller replacing an env moves it aside first, journaled:
 * txn_will_create). A failed creation may leave a partial tree at prefix
 * for the caller (its txn) to remove. 0, or an error with *errmsg.
 */
int venv_create(struct ctx *c, const char *python, const char *prefix, int *created, char **errmsg);

struct pip_opts {
	const char *index_url;         /* --index-url; NULL: pip's default */
	const char *const *find_links; /* --find-links, NULL-terminated; may be NULL */
	int no_index;                  /* --no-index (find-links only) */
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
	/* Set: the work directory (the wheelhouse) is journaled in this txn, so
	 * a kill leaves nothing behind; env_path is the env, root-relative. */
	struct txn *txn;
	const char *env_path;
	/* With txn and a complete lock: the installer the pip step chose in
	 * pip's place (wheelhouse_installer), or NULL for pip alone. */
	const struct pip_native *native;
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
 * changed: pip does that part), or an error with *errmsg.
 */
struct pip_native {
	int (*fill)(struct ctx *c, const char *prefix, const struct pip_req *reqs, size_t n,
	            const struct pip_opts *o, const char *wheels, int *done, char **errmsg);
	int (*install)(struct ctx *c, const char *wheels, const struct pip_req *reqs, size_t n,
	               const struct pip_opts *o, int *done, char **errmsg);
};

/* The native installer (wheelhouse.c): a complete lock of wheels installed by wheel.c. */
extern const struct pip_native wheelhouse_installer;

struct pip_dist {
	char *name; /* PEP 503 normalised */
	char *version;
	char *sha256; /* from the requirements when pinned there, else NULL */
};

struct pip_result {
	struct pip_dist *v; /* everything installed in the env after the run */
	size_t n;
	char *failed_pkg; /* on TF_EINTEGRITY: the package named by pip */
	char *log;        /* pip's stderr tail of the failing run, or NULL */
};

void pip_result_release(struct pip_result *r);

/* Writes requirements text (one "spec --hash=sha256:..." line each); caller frees. */
char *pip_requirements_text(const struct pip_req *reqs, size_t n);

/*
 * Installs reqs into the env at prefix with <prefix>/bin/python -m pip:
 * --require-hashes, --no-deps when o->complete, --no-input, isolated.
 * On success res lists what the env holds. On failure the env is unchanged.
 */
int pip_install(struct ctx *c, const char *prefix, const struct pip_req *reqs, size_t n,
                const struct pip_opts *o, struct pip_result *res, char **errmsg);

/* Lists the env's distributions (pip list --format=json). */
int pip_list(struct ctx *c, const char *prefix, struct pip_result *res, char **errmsg);

/*
 * Completes a partial pin set (requirements text, hashes optional) into the
 * full closure with hashes via pip's resolver: pip install --dry-run
 * --ignore-installed --report. *out is requirements text with --hash lines,
 * sorted by name (caller frees). The hashes are those of the files pip chose
 * for this interpreter and platform.
 */
int pip_lock(struct ctx *c, const char *prefix, const char *reqs_text, const struct pip_opts *o,
             char **out, char **errmsg);

struct spawn_result;
/* Runs argv (the env's interpreter first) with the hardened Python
 * environment, output captured in r; 0 when it ran (see spawn_run). */
int pyenv_run_python(struct ctx *c, char *const *argv, double timeout_s, struct spawn_result *r);

/* The PEP 503 index of an http(s) mirror built by `mirror build`: URL/simple/. */
char *pip_mirror_index(const char *mirror_url);
/*
 * Points o at a mirror: an http(s) mirror's PEP 503 pages (index_url, the
 * string returned in *simple for the caller to free), or a directory of
 * wheels (find-links only, --no-index; links must live as long as o).
 */
void pip_opts_mirror(struct pip_opts *o, const char *mirror, const char *links[2], char **simple);

#endif
