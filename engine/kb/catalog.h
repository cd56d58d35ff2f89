/*
 * catalog.h - the catalog `tfprov init` builds complete stacks from: the
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
#ifndef TFPROV_CATALOG_H
#define TFPROV_CATALOG_H

#include <stddef.h>

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

#endif
