/*
 * kb.h - the knowledge-base room: data/compat.yaml loaded and applied (lints, the
 * static check of a pip lock, the known-bad table) and the catalog of pins
 * `tfprov init` reads.
 *
 * The one public header of engine/kb/ (ARCHITECTURE.md section 2); what
 * only the room itself uses is in private/. Its parts, each with its own
 * comment below: catalog, pipcaps, compat.
 */
#ifndef TFPROV_KB_H
#define TFPROV_KB_H

#include <stddef.h>

#include "diag.h"
#include "manifest.h"
#include "util.h"

/*
 * catalog (engine/kb/catalog.c) - the catalog `tfprov init` builds complete stacks from: the
 * public reference data shipped in manifests/data/ (manifests/data/COPY.md),
 * read as data, never computed.
 *
 *   nvidia-redist/cuda-redistrib_<label>.json   NVIDIA's CUDA redist manifests
 *   nvidia-redist/cudnn-redistrib_<label>.json  NVIDIA's cuDNN redist manifests
 *   legacy-artifacts.tsv                        runfiles and cuDNN tarballs
 *   conda/python-<X.Y>-linux-64.explicit.txt    conda explicit locks
 *   pypi-closure-tf<ver>-cp<NN>[-and-cuda].tsv  complete pip closures
 *
 * The directory is $TFPROV_CATALOG when set, else manifests/data under the
 * data directory (datadir.h): the build tree, or /usr/share/tfprov for the
 * .deb, which installs manifests/ whole.
 *
 * Ownership: every char * out-parameter is malloc'd for the caller; a struct
 * filled here is released by its _release function.
 */

const char *catalog_dir(void);

/*
 * The newest CUDA redist JSON of a series ("12.5"): 0 with *label ("12.5.1")
 * and *path; -ENOENT none. (Every lookup here says "none" with -ENOENT.)
 */
int catalog_cuda_redist(const char *dir, const char *series, char **label, char **path);

/*
 * The newest cuDNN redist JSON of a series ("9.3") at or above min (may be
 * NULL) that has an archive for CUDA major cuda_major on platform: 0 with
 * *path, *variant (NULL for a flat JSON) and the archive's fields in *a; -ENOENT none.
 */
struct redist_artifact;
int catalog_cudnn_redist(const char *dir, const char *series, const char *min, int cuda_major,
                         const char *platform, char **path, char **variant,
                         struct redist_artifact **a);

/* One row of legacy-artifacts.tsv. */
struct catalog_legacy {
	char *version; /* "11.2.2"; cuDNN rows "8.1.1.33-11.2" (cudnn-cuda) */
	char *url, *sha256, *source;
};
/*
 * The newest legacy row of product ("cuda" | "cudnn") whose version is in
 * series; for cudnn the row's CUDA ("-11.2" or "-12") must be a prefix of cuda.
 * 0 found, -ENOENT none.
 */
int catalog_legacy(const char *dir, const char *product, const char *series, const char *cuda,
                   struct catalog_legacy *out);
void catalog_legacy_release(struct catalog_legacy *l);

/* The conda explicit lock for Python X.Y on linux-64: 0 with *path; -ENOENT none. */
int catalog_conda_lock(const char *dir, const char *python, char **path);

/* One distribution of a closure: every sha256 of its files for the target, sorted. */
struct catalog_dist {
	char *name; /* PEP 503 normalized */
	char *version;
	char **sha256;
	size_t nsha256;
	/* The lowest glibc its files allow, major * 1000 + minor (PEP 600 manylinux_X_Y;
	 * manylinux1/2010/2014 = 2.5/2.12/2.17); 0 when a file needs none (pure Python). */
	int glibc;
};
struct catalog_closure {
	char *path;
	char *tf_version; /* the tensorflow (or tensorflow-gpu) row's version */
	struct catalog_dist *v;
	size_t n;
};
/*
 * The pip closure of TF tf (a series "2.20" picks the newest release, a full
 * version only itself) for CPython python ("3.12"), the [and-cuda] one when
 * and_cuda: 0 filled, -ENOENT none, TF_EIO/TF_EFAIL when the file is unreadable.
 */
int catalog_closure(const char *dir, const char *tf, const char *python, int and_cuda,
                    struct catalog_closure *out);
void catalog_closure_release(struct catalog_closure *c);
/* The newest TF release of a series any closure of the catalog holds; NULL if none. */
char *catalog_newest_tf(const char *dir, const char *series);

/*
 * pipcaps (engine/kb/pipcaps.c) - caps on pip resolutions from the knowledge base (data/compat.yaml,
 * section pip.caps): "when a lock holds WHEN below WHEN_BELOW, PACKAGE must stay
 * below BELOW", each with the fact and its public source.
 *
 * `tfprov lock` re-resolves with a broken cap as a constraint; `tfprov lock
 * --check` reports a lock that breaks one. Only this small section is read
 * here (compat.c owns the rest of the file and accepts the key).
 *
 * Ownership: pip_caps_load() returns an array that owns its strings;
 * pip_caps_free() releases it.
 */

struct pip_cap {
	char *package, *below;   /* the capped distribution (PEP 503 name) and its bound */
	char *when, *when_below; /* the cap holds while this one is below that version */
	char *fact, *source;
	char *severity; /* "error" (default) or "warning": how validate reports it */
};

/* 0 and *caps, *n (possibly 0 caps), or TF_EFAIL with errors in d. */
int pip_caps_load(const char *path, struct pip_cap **caps, size_t *n, struct diags *d);
void pip_caps_free(struct pip_cap *caps, size_t n);

/*
 * The first cap broken by a set of pinned versions, or NULL. version_of(name, arg)
 * returns the pinned version of a PEP 503 name, or NULL when it is not pinned.
 */
const struct pip_cap *pip_caps_broken(const struct pip_cap *caps, size_t n,
                                      const char *(*version_of)(const char *, void *), void *arg,
                                      const struct pip_cap *after);

/*
 * compat (engine/kb/compat.c) - the compatibility knowledge base (data/compat.yaml) and the
 * lints `tfprov validate` draws from it.
 *
 * The knowledge base is data: TF tested builds, CUDA driver minimums,
 * minor-version compatibility floors, compute capabilities and the kernels
 * each TF build carries, pip and conda packaging facts, the sonames TF loads.
 * This code is generic over it: no version number lives in C.
 *
 * Ownership: compat_load() returns a struct compat that owns every string and
 * array reachable from it; compat_free() releases all of it. The query
 * functions return pointers into the knowledge base, valid until
 * compat_free(). Versions are compared with version_cmp() (component-wise,
 * as integers).
 */

/* An inclusive range of major.minor versions: "3.9-3.11", or "2.7" (lo == hi). */
struct compat_range {
	const char *lo, *hi;
};

/* One row of TF's "tested build configurations". */
struct compat_tf_build {
	const char *name;      /* "tensorflow-2.15.0", "tensorflow_gpu-1.15.0" */
	const char *version;   /* "2.15.0"; rows are matched by series (major.minor) */
	const char *cuda;      /* "12.2" */
	const char *cudnn;     /* "8.9", as the table says */
	const char *cudnn_min; /* what the binary was compiled against ("8.9.4"); else = cudnn */
	const char *compiler, *bazel;
	struct compat_range *python;
	size_t npython;
	const char *source;
	struct pos pos; /* in compat.yaml */
};

struct compat_driver_row {
	const char *cuda;  /* "12.6.3", "10.0" */
	const char *label; /* "12.6 Update 3" */
	const char *linux_min, *windows_min;
	struct pos pos;
};

/* Minimum driver for minor-version compatibility of from <= cuda < below. */
struct compat_mvc {
	const char *from, *below;
	const char *linux_min, *windows_min; /* windows_min may be NULL */
	const char *source;
};

struct compat_cc {
	const char *cc; /* "8.9" */
	const char *arch, *examples;
	const char *first_cuda; /* NULL when older than the table (or not known) */
	const char *dropped_in; /* first CUDA without it; NULL while supported */
	const char *formerly;   /* the number CUDA used before renamed_in ("10.1"), or NULL */
	const char *renamed_in;
};

/* The kernels of the TF builds tf_from <= series < tf_below (tf_below may be NULL). */
struct compat_tf_kernels {
	const char *tf_from, *tf_below;
	const char *min_cc;
	const char **sass; /* empty when unknown: then only min_cc is known */
	size_t nsass;
	const char **ptx;
	size_t nptx;
	const char *source;
};

struct compat_pip_removed {
	const char *name;
	const char *last_real_linux, *last_real_windows;
	const char *identical_since; /* before it the name was a package of its own */
	const char *stub;
	const char *replacement;
	const char *source;
};

/*
 * A requirement TF releases put on another distribution: for TF versions
 * allowed by tf_spec (">=2.15,<2.16"), package must satisfy spec (">=1.23.5,<2").
 */
struct compat_pip_requires {
	const char *tf_spec;
	const char *package; /* PEP 503 normalized */
	const char *spec;    /* "" allows any version */
	const char *source;
};

struct compat_conda_pkg {
	const char *channel, *name;
	const char **versions;
	size_t nversions;
	const char *complete_through;   /* versions above are not judged */
	const char *discontinued_after; /* NULL while maintained */
	const char *successor;          /* what replaces it, for the hint */
	const char *source;
};

enum compat_os { COMPAT_LINUX, COMPAT_WINDOWS };

struct compat_sonames {
	enum compat_os os;
	const char *cuda;  /* component prefix this entry matches, or NULL */
	const char *cudnn; /* idem */
	const char **libs;
	size_t nlibs;
	const char **companions; /* loaded by the libs themselves */
	size_t ncompanions;
	const char *derived; /* non-NULL: inferred, not observed */
	const char *source;
};

/* Distributions that install the same top-level import package. */
struct compat_import_pkg {
	const char *import; /* "tensorflow" */
	const char **dists; /* PEP 503 names */
	size_t ndists;
	const char *fix, *source;
};

/*
 * platforms: how an artifact's name says which platform it is for, and which
 * stack.platform values each platform serves (compat_platform.c).
 */
struct compat_platform {
	const char *name;
	const char **stacks; /* stack.platform values it serves; empty: none */
	size_t nstacks;
	const char **conda_subdirs; /* a conda package's channel subdir */
	size_t nconda_subdirs;
	const char **wheel_tags; /* fnmatch patterns of a wheel's platform tag */
	size_t nwheel_tags;
	const char **files; /* fnmatch patterns of a runfile's or archive's file name */
	size_t nfiles;
	const char *source;
};

/* The component that ships a library TF loads (library_components). */
struct compat_lib_component {
	const char **libs; /* soname stems: "libcublas", "libcublasLt" */
	size_t nlibs;
	const char *redist; /* "libcublas"; "cudnn" for the cudnn section */
	const char *wheel;  /* "nvidia-cublas-cu{M}" */
};

/*
 * A pip distribution built for one CUDA, its name carrying the release:
 * pattern "cupy-cuda{M}x" ({M} the major), "cupy-cuda{M}{m}" (major and one-digit
 * minor), "nvidia-*-cu{M}" (* any text).
 */
struct compat_cuda_carrier {
	const char *pattern;
	const char *source;
};

/* How TensorFlow parses an environment variable it reads. */
enum compat_env_kind {
	COMPAT_ENV_ENUM,   /* exactly one of values (case-sensitive) */
	COMPAT_ENV_BOOL,   /* ReadBoolFromEnvVar: 0, 1, true, false in any case */
	COMPAT_ENV_INT,    /* an integer (istringstream >> int64) */
	COMPAT_ENV_PYTRUE, /* Python: one of values is true, anything else false */
};

struct compat_env_var {
	const char *name;
	enum compat_env_kind kind;
	const char **values; /* ENUM and PYTRUE */
	size_t nvalues;
	const char *min, *max; /* INT: the meaningful range, or NULL */
	const char *otherwise; /* what TF does with another value */
	const char *source;
	/* Set to a true value from TF needs_from_tf on, TF imports needs_package. */
	const char *needs_package, *needs_from_tf, *needs_fact;
};

/* The glibc floor of TF's Linux wheels for tf_from <= series < tf_below (may be NULL). */
struct compat_tf_glibc {
	const char *tf_from, *tf_below;
	const char *glibc; /* "2.27" */
	const char *tag;   /* the manylinux tag it comes from */
	const char *source;
};

/*
 * CUDA from pip wheels: <prefix><lib><major_tag><major> ("nvidia-cublas-cu12"); the
 * version of <runtime><major_tag><major> is the cudart version, whose major.minor
 * is the CUDA release; the libraries lie in site-packages/<site_libdirs> (globs).
 */
struct compat_cuda_wheels {
	const char *prefix, *major_tag, *runtime, *cudnn;
	const char **site_libdirs;
	size_t nsite_libdirs;
	/* Wheels (without -cu<N>) whose version's major.minor is the CUDA release. */
	const char **release_versioned;
	size_t nrelease_versioned;
	const char *release_source;
	const char *source; /* NULL when compat.yaml has no such table */
};

/* One nvidia-* requirement of a TF release's [and-cuda] extra: "nvidia-cublas-cu12", ">=12.5.3.2,<13.0". */
struct compat_and_cuda_pin {
	const char *name, *spec;
};

/* pip.and_cuda: the [and-cuda] extra of one TF release. */
struct compat_and_cuda {
	const char *tensorflow, *source;
	struct compat_and_cuda_pin *pins;
	size_t npins;
	int unverified; /* its source says "unverified": recorded, never judged by */
};

/*
 * companion_packages: a package installed beside TensorFlow that is tied to its
 * release (release lines, each with the TF versions it was built or tested for)
 * or has ended.
 */
enum compat_coupling {
	COMPAT_COUPLING_NONE,   /* recorded, not judged */
	COMPAT_COUPLING_TESTED, /* its project's tested window: a warning outside it */
	COMPAT_COUPLING_IMPORT, /* its import refuses another TF: an error */
	COMPAT_COUPLING_ABI,    /* binary ops built against one TF: an error */
};

struct compat_companion_release {
	const char *release; /* a version prefix: "2.20" is every 2.20.x */
	const char *tf;      /* PEP 440 specifier on the TF version: ">=2.20.0,<2.21" */
	const char *source;
};

struct compat_companion {
	const char *name; /* PEP 503 */
	enum compat_coupling coupling;
	const char *why, *source;
	const char *ended; /* "2024-05", or NULL while maintained */
	const char *ended_what, *replaced_by, *ended_source;
	struct compat_companion_release *releases; /* newest first, as the table lists them */
	size_t nreleases;
};

struct compat_guide_mistake {
	const char *id;
	const char *claim, *verdict, *correction, *source;
	const char *lint; /* diagnostic code, or NULL */
	const char *test; /* guide manifest path relative to the repo, or NULL */
};

struct compat {
	char *path;
	struct compat_tf_build *tf_linux;
	size_t ntf_linux;
	struct compat_tf_build *tf_windows;
	size_t ntf_windows;
	const char *windows_gpu_last; /* "2.10" */
	const char *windows_gpu_instead;
	const char *windows_gpu_source;
	struct {
		const char *policy;         /* "mixed_float16" */
		const char *min_tf;         /* first TF series with the policy API */
		const char *speedup_min_cc; /* below it: no math speed-up */
		const char *source;
	} mixed_precision;
	struct compat_driver_row *drivers;
	size_t ndrivers;
	struct compat_mvc *mvc;
	size_t nmvc;
	struct compat_cc *ccs;
	size_t nccs;
	struct compat_tf_kernels *kernels;
	size_t nkernels;
	struct compat_pip_removed *pip_removed;
	size_t npip_removed;
	struct compat_pip_requires *pip_requires;
	size_t npip_requires;
	struct compat_conda_pkg *conda;
	size_t nconda;
	const char **conda_cuda; /* conda packages versioned by CUDA release */
	size_t nconda_cuda;
	struct compat_sonames *sonames;
	size_t nsonames;
	struct compat_guide_mistake *guide;
	size_t nguide;
	struct compat_import_pkg *imports;
	size_t nimports;
	struct compat_env_var *env_vars;
	size_t nenv_vars;
	struct compat_cuda_carrier *carriers;
	size_t ncarriers;
	struct compat_lib_component *lib_components;
	size_t nlib_components;
	struct compat_platform *platforms;
	size_t nplatforms;
	const char *lib_components_source;
	struct pip_cap *caps; /* pip.caps, the known-bad table (pipcaps.c loads it) */
	size_t ncaps;
	struct compat_tf_glibc *tf_glibc;
	size_t ntf_glibc;
	struct compat_cuda_wheels cuda_wheels;
	struct compat_and_cuda *and_cuda;
	size_t nand_cuda;
	struct compat_companion *companion_pkgs;
	size_t ncompanion_pkgs;
	struct strvec pool; /* owns every string above */
};

/*
 * The knowledge base to use: $TFPROV_COMPAT if set, else data/compat.yaml
 * under the data directory found at run time (datadir.h: build tree, then
 * <exe>/../share/tfprov, then the install prefix). Returns a static or
 * environment string.
 */
const char *compat_default_path(void);

/*
 * Loads and checks compat.yaml. 0 and *out on success; TF_EIO when the file
 * cannot be read, TF_EFAIL when it is malformed, with diagnostics (positioned
 * in compat.yaml) in d and *out NULL.
 */
int compat_load(const char *path, struct compat **out, struct diags *d);
void compat_free(struct compat *kb);

/*
 * Lints a manifest against the knowledge base; diagnostics carry m->path and
 * the position of the offending node. Returns the number of errors added.
 */
int compat_lint(const struct compat *kb, const struct manifest *m, struct diags *d);

/* The tested build of a TF version (matched by major.minor); NULL if unknown. */
const struct compat_tf_build *compat_tf_build(const struct compat *kb, const char *tf_version,
                                              int windows_native);

/*
 * The toolkit's own minimum driver (Linux or Windows column; WSL2 uses the
 * Windows driver); NULL when the CUDA version is unknown.
 */
const char *compat_cuda_min_driver(const struct compat *kb, const char *cuda, int windows);

/* A compute capability as an integer: "8.9" -> 89, "10.0" -> 100; -EINVAL if malformed. */
int compat_cc_parse(const char *cc);

enum compat_kernel {
	COMPAT_KERNEL_UNKNOWN, /* the TF version or its kernel list is unknown */
	COMPAT_KERNEL_SASS,    /* native code runs */
	COMPAT_KERNEL_PTX,     /* only through PTX JIT at first use */
	COMPAT_KERNEL_NONE,    /* "device kernel image is invalid" */
};

/*
 * The one rule for a GPU, a driver and a CUDA release (compat_gpu.c), applied
 * by validate (driver.gpus), plan/apply (the driver step), doctor and init
 * --gpu alike; each words the verdict for its own surface.
 */
struct compat_verdict {
	const char *code;       /* "compat.gpu-no-kernels", ...; NULL when nothing is wrong */
	enum diag_severity sev; /* DIAG_ERROR or DIAG_WARNING when code is set */
	char *msg, *hint;       /* owned; NULL when code is NULL */
	enum compat_kernel kernels;
	const char *arch;   /* the GPU's architecture when the table lists it */
	const char *source; /* the source of TF's kernel row, when one was read */
};
/*
 * A GPU of compute capability cc under TF version tf and CUDA release cuda
 * (either may be NULL: not judged): TF's kernels for it, then the CUDA release
 * against the GPU's row. 0, or TF_EUSAGE when cc is malformed.
 */
int compat_judge_gpu(const struct compat *kb, const char *tf, const char *cuda, const char *cc,
                     struct compat_verdict *v);
void compat_verdict_release(struct compat_verdict *v);

enum compat_driver_fit {
	COMPAT_DRIVER_UNKNOWN,      /* the CUDA release or the driver is unknown */
	COMPAT_DRIVER_OK,           /* at or above CUDA's own minimum */
	COMPAT_DRIVER_MINOR_COMPAT, /* below it, at or above the family's floor */
	COMPAT_DRIVER_TOO_OLD,      /* below both: the runtime refuses to start */
};
/* A driver version against a CUDA release; *min and *floor (may be NULL) get the two floors. */
enum compat_driver_fit compat_judge_driver(const struct compat *kb, const char *cuda,
                                           const char *driver, int windows, const char **min,
                                           const char **floor);
/* The newest release of a CUDA series the driver table lists ("11.2" -> "11.2.2"), or NULL. */
const char *compat_cuda_release(const struct compat *kb, const char *series);
/*
 * 1 when a stack of TF tf and CUDA cuda runs cleanly on this driver and these
 * GPUs: the driver at or above CUDA's own minimum, native kernels and no
 * finding for every GPU.
 */
int compat_stack_fits(const struct compat *kb, const char *tf, const char *cuda, int windows,
                      const char *driver, const char *const *ccs, size_t nccs);

/*
 * Every library TF loads for a CUDA and a cuDNN version (either may be a bare
 * major, "12"): the sonames entries' libs and their companions, as verify
 * dlopens them. Returns how many were appended.
 */
size_t compat_tf_libraries(const struct compat *kb, int windows, const char *cuda,
                           const char *cudnn, struct strvec *out);

/*
 * The glibc a manifest's pip lock needs on Linux: the higher of the floor of
 * TensorFlow's own wheel (its series' row; the TF version from versions or the
 * lock's tensorflow pin) and pip.min_glibc. NULL when neither says. *source:
 * the row's wheel tag or "pip.min_glibc"; *tf: the row's TF version, NULL when the
 * floor is pip.min_glibc. kb may be NULL (pip.min_glibc only). Shared by apply's
 * host check (modules/pip.c) and image build's check of the base.
 */
const char *compat_manifest_min_glibc(const struct compat *kb, const struct manifest *m,
                                      const char **source, const char **tf);

/*
 * The CUDA major a pip distribution name carries when it is one of NVIDIA's CUDA
 * wheels ("nvidia-cudnn-cu12" -> 12, PEP 503 names); 0 when it is not one.
 */
int compat_cuda_wheel_major(const struct compat *kb, const char *name);
/*
 * The [and-cuda] extra whose lower bounds are the wheels of TF version tf's
 * tested CUDA and cuDNN: the verified row of tf's minor, else the newest
 * verified row of a release with the same tested CUDA and cuDNN series (2.21
 * shares 2.20's 12.5 / 9.3). NULL when none is recorded.
 */
const struct compat_and_cuda *compat_and_cuda_tested(const struct compat *kb, const char *tf);
/* The version a pin of that row names ("==V" or ">=V,..."): V in buf, else NULL. */
const char *compat_and_cuda_tested_version(const struct compat_and_cuda_pin *p, char *buf,
                                           size_t size);
/* 1 when name is the CUDA runtime wheel ("nvidia-cuda-runtime-cu12"). */
int compat_cuda_wheel_is_runtime(const struct compat *kb, const char *name);

/*
 * CUDA from pip wheels in a manifest's pip lock: the number of nvidia-*-cu<N>
 * pins; *first (may be NULL) the first of them, *runtime the CUDA runtime pin
 * and *cudnn the cuDNN pin (NULL when absent). Pointers into m.
 */
struct pip_req;
size_t compat_pip_cuda(const struct compat *kb, const struct manifest *m,
                       const struct pip_req **first, const struct pip_req **runtime,
                       const struct pip_req **cudnn);

/*
 * The CUDA version the driver must serve: the runtime wheel's version (the
 * cudart component version, e.g. "12.9.79") when the stack takes CUDA from
 * pip wheels and has no cuda section, else cuda.version / versions.cuda.
 * *from_wheel (may be NULL) tells which. NULL when the manifest names none.
 */
const char *compat_stack_cuda(const struct compat *kb, const struct manifest *m,
                              const struct pip_req **from_wheel);

/*
 * Companion packages (compat_companion.c). The row of a PEP 503 name, or NULL;
 * the release line of version in it (the longest matching prefix), or NULL.
 */
const struct compat_companion *compat_companion(const struct compat *kb, const char *name);
const struct compat_companion_release *compat_companion_line(const struct compat_companion *c,
                                                             const char *version);
/*
 * The constraint `tfprov lock` adds when a resolved companion pin (name ==
 * version) is outside the window of its release line for TF tf: "name==2.16.*",
 * the newest line made for tf (malloc'd); NULL when the pin is fine, is not
 * judged, or no line is made for tf.
 */
char *compat_companion_constraint(const struct compat *kb, const char *name, const char *version,
                                  const char *tf);

#endif
