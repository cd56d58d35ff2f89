/*
 * manifest.h - the typed model of a manifest (schema v1, manifests/SCHEMA.md).
 *
 * manifest_load() parses a YAML file with libyaml into this model. Every
 * value keeps the source position of its node so that every later check
 * (compat lints, planner, apply errors) can point at FILE:LINE:COL.
 *
 * The model owns all of its memory; manifest_free() releases it.
 * A field that was absent in the file has .set == 0 and a NULL/0 value.
 */
#ifndef TFPROV_MANIFEST_H
#define TFPROV_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "diag.h"

/* Parser limits: a document beyond these is refused (exit 3). */
#define MANIFEST_MAX_BYTES (8u << 20) /* 8 MiB */
#define MANIFEST_MAX_NODES 200000u    /* after alias expansion */
#define MANIFEST_MAX_DEPTH 64u

struct mstr {
	char *s; /* NULL when absent */
	struct pos pos;
	int set;
};

struct mint {
	int64_t v;
	struct pos pos;
	int set;
};

struct mbool {
	int v;
	struct pos pos;
	int set;
};

/* One downloadable, pinned file. */
struct artifact {
	struct pos pos; /* the mapping */
	struct mstr name;
	struct mstr url;
	struct mstr sha256;        /* 64 lowercase hex when valid */
	struct mint size;          /* bytes; size.set == 0 is reported as a gap */
	struct mint strip;         /* leading path components to strip when unpacking */
	struct mint unpacked_size; /* bytes of file data the archive unpacks to, if recorded */
	struct mstr relative_path; /* from a redist manifest, informational */
	struct mstr component;     /* redist component name, if resolved from one */
};

struct artifact_list {
	struct artifact *v;
	size_t n;
};

/* An NVIDIA redistrib_<ver>.json reference: the JSON itself is an artifact. */
struct redist_ref {
	int set;
	struct pos pos;
	struct artifact json; /* url/sha256/size of the redistrib JSON */
	struct mstr variant;  /* cuDNN nesting: "cuda11", "cuda12" */
	struct mstr components[64];
	size_t ncomponents;
};

enum platform { PLATFORM_UNKNOWN, PLATFORM_LINUX_X86_64, PLATFORM_WSL2, PLATFORM_WINDOWS_X86_64 };
enum driver_policy { DRIVER_REQUIRE, DRIVER_SKIP };
enum placement { PLACEMENT_MERGE, PLACEMENT_SEPARATE };
enum pyenv_manager { PYENV_NONE, PYENV_CONDA, PYENV_VENV };

struct env_var {
	struct mstr name;
	struct mstr value;
};

/* A line of a conda explicit lock: URL#sha256:hex or URL#md5. */
struct conda_pkg {
	struct pos pos;
	char *url;
	char *name, *version, *build; /* parsed from the file name */
	char sha256[65];              /* "" when the line has only md5 */
	char md5[33];
};

/* A line of a pip requirements file: name==version --hash=sha256:... */
struct pip_req {
	struct pos pos;
	char *name; /* normalized (PEP 503) */
	char *raw_name;
	char *version; /* NULL when not pinned with == */
	char *spec;    /* the whole requirement before options */
	char *url;     /* direct reference "name @ URL" (a .whl), else NULL */
	char **hashes; /* sha256 hex strings */
	size_t nhashes;
};

/*
 * The Requires-Dist of one pinned distribution, as `tfprov lock` recorded
 * them from its wheel's METADATA (pip.requires): PEP 508 strings, markers kept.
 */
struct pip_requires {
	struct pos pos; /* the distribution's key */
	char *name;     /* normalized (PEP 503) */
	struct mstr *reqs;
	size_t nreqs;
};

struct gap {
	struct mstr what; /* a declared missing pin: "tensorflow transitive closure" */
};

struct manifest {
	char *path; /* as given on the command line */
	char *text; /* the raw file, for hint context */
	size_t textlen;
	char *sha256; /* of the raw bytes */

	struct mint schema;
	struct {
		struct mstr name;
		struct mstr platform_s;
		enum platform platform;
		struct mstr description;
	} stack;
	struct mstr prefix; /* absolute, root-relative; default /opt/tfprov */

	struct {
		struct mstr tensorflow, cuda, cudnn, python;
		struct pos pos;
		int set;
	} versions;

	struct {
		int set;
		struct pos pos;
		struct mstr policy_s;
		enum driver_policy policy;
		struct mstr min_version; /* the manifest's own floor */
		struct mstr gpus[16];    /* expected compute capabilities, "8.9" */
		size_t ngpus;
	} driver;

	struct {
		int set;
		struct pos pos;
		struct mstr version; /* defaults to versions.cuda */
		struct redist_ref redist;
		struct artifact_list artifacts;
		struct artifact runfile;
		int has_runfile;
	} cuda;

	struct {
		int set;
		struct pos pos;
		struct mstr version;
		struct mstr placement_s;
		enum placement placement;
		/*
		 * Not the manifest's: set by the planner (or read back from the
		 * state) when `merge` was asked but another stack merged a different
		 * cuDNN into the CUDA prefix the stacks share, so this stack's goes
		 * beside it (placement is then PLACEMENT_SEPARATE); why names them.
		 */
		int placement_auto;
		char placement_why[256];
		struct artifact artifact;
		int has_artifact;
		struct redist_ref redist;
	} cudnn;

	struct {
		int set;
		struct pos pos;
		struct env_var *vars;
		size_t nvars;
		struct mstr profile_dir; /* default /etc/profile.d */
	} env;

	struct {
		int set;
		struct pos pos;
		struct mstr manager_s;
		enum pyenv_manager manager;
		struct mstr name;
		struct mstr version;       /* defaults to versions.python */
		struct mstr interpreter;   /* venv: explicit python path */
		struct mstr lock;          /* conda explicit text, inline */
		struct mstr lock_file;     /* or a path relative to the manifest */
		char lock_file_sha256[65]; /* of the lock_file bytes parsed; "" when none */
		struct conda_pkg *pkgs;
		size_t npkgs;
		struct mstr specs[32]; /* conda match specs the user asked for, e.g. cudnn=8.9.4 */
		size_t nspecs;
		struct mstr channel;
	} python;

	struct {
		int set;
		struct pos pos;
		struct mstr requirements;          /* inline */
		struct mstr requirements_file;     /* or a file */
		char requirements_file_sha256[65]; /* of its bytes as parsed; "" when none */
		struct mstr index_url;
		struct mbool complete;   /* the lock is the full closure: --no-deps */
		struct mstr installer_s; /* native (default) | pip */
		struct mstr min_glibc;   /* the glibc the lock's wheels need (manylinux floor) */
		int use_pip; /* installer: pip; native needs a complete lock of wheels */
		struct pip_req *reqs;
		size_t nreqs;
		struct pip_requires *requires; /* pip.requires, in file order */
		size_t nrequires;
		struct pos requires_pos;
		/* pip.requires_python: {distribution: Requires-Python}, `tfprov lock`
		 * writes it; name PEP 503 normalised in pip_requires.name, the
		 * specifier (at its value's position) in the first of reqs. */
		struct pip_requires *requires_python;
		size_t nrequires_python;
	} pip;

	struct gap *gaps; /* `missing:` entries: known holes in the pins */
	size_t ngaps;

	struct {
		int set;
		struct pos pos;
		struct mbool enabled;
		struct mint batch_size;
		struct mint steps;
		struct mstr precisions[4];
		size_t nprecisions;
		struct mint margin_pct;
	} bench;
};

/*
 * Parses `path`. Returns 0 and *out on success (warnings may be in d);
 * TF_EMANIFEST with errors in d otherwise (and *out NULL).
 */
int manifest_load(const char *path, struct manifest **out, struct diags *d);
/* Same, from memory (tests, fuzzers). `name` is used in diagnostics. */
int manifest_load_buf(const char *name, const char *buf, size_t len, struct manifest **out,
                      struct diags *d);
/*
 * The shape of a recorded manifest, for what only needs where a stack's parts
 * live and its env (`tfprov run`, `env`, `shell`, the login script): parsed
 * and checked as manifest_load_buf does, but no side file (python.lock_file,
 * pip.requirements_file) is read and nothing is hashed (m->sha256 is ""), so
 * it neither starts OpenSSL nor depends on the manifest's directory still
 * being there.
 */
int manifest_load_shape(const char *name, const char *buf, size_t len, struct manifest **out,
                        struct diags *d);
void manifest_free(struct manifest *m);

/*
 * What only `tfprov lock` can use: the first redist JSON without a sha256
 * ("cuda.redist" or "cudnn.redist"), else a pip pin without a hash ("pip"),
 * else NULL. *at gets the node's position. Plan, apply and mirror refuse it.
 */
const char *manifest_lock_pending(const struct manifest *m, struct pos *at);

/* Parses conda explicit text into pkgs; diagnostics positioned from base. */
int conda_explicit_parse(const char *file, const char *text, struct pos base, int block,
                         struct conda_pkg **pkgs, size_t *npkgs, struct diags *d);
/* Parses requirements text (pip hash-pinned format). */
int pip_requirements_parse(const char *file, const char *text, struct pos base, int block,
                           struct pip_req **reqs, size_t *nreqs, struct diags *d);

const char *platform_name(enum platform p);

#endif
