/*
 * kb_int.h - what the knowledge base's files share.
 *
 * Private to engine/kb/ (a PRIVATE include directory of its library; tests
 * see it as white-box tests): what the files of the folder share and no other
 * folder calls. What other folders use is kb.h.
 */
#ifndef TFPROV_KB_INT_H
#define TFPROV_KB_INT_H

#include "kb.h"

/*
 * The static check of the whole pip lock for its target (compat_lock.c):
 * recorded requirements, import-package clashes, the known-bad table.
 * python: the stack's Python (major.minor), or NULL.
 */
void compat_lint_lock(const struct compat *kb, const struct manifest *m, const char *python,
                      int windows, struct diags *d);
/*
 * Every package that carries CUDA against the stack's CUDA (cuda: versions.cuda
 * or cuda.version, or NULL): pip distributions named for a CUDA release
 * (pip.cuda_carriers) and the cuda section's archives of release-versioned
 * components, at NVIDIA's granularity: the major from CUDA 11 on (minor-version
 * compatibility), the minor before it.
 */
void compat_lint_cuda_carriers(const struct compat *kb, const struct manifest *m,
                               const struct mstr *cuda, struct diags *d);
/*
 * The libraries TF's CUDA and cuDNN generation loads are shipped by the stack's
 * artifacts: the cuda section's archives or redist components (a runfile ships
 * all), the cudnn section, or in the pip-CUDA form the nvidia-*-cu<M> wheels.
 */
void compat_lint_cuda_libs(const struct compat *kb, const struct manifest *m,
                           const struct mstr *cuda, const struct mstr *cudnn, struct diags *d);
/* env.vars against how TensorFlow parses the variables it reads. */
void compat_lint_env(const struct compat *kb, const struct manifest *m, struct diags *d);
/*
 * env.vars against what tfprov derives for the stack (stackenv_build): a value
 * that drops the stack's own CUDA (or env) or puts another CUDA before it.
 */
void compat_lint_env_derived(const struct compat *kb, const struct manifest *m, struct diags *d);
/* Every artifact whose name says another platform than stack.platform (compat_platform.c). */
void compat_lint_platform(const struct compat *kb, const struct manifest *m, struct diags *d);

/*
 * The least driver that runs cuda through minor-version compatibility, below
 * its own minimum. NULL when there is no such floor: before CUDA 11, or when
 * the family's floor is not below the toolkit's own minimum (CUDA 11.0:
 * 450.80.02 against 450.51.06), or the table has no value for the platform.
 */
const char *compat_cuda_compat_driver(const struct compat *kb, const char *cuda, int windows);
/* The family's minor-version-compatibility floor as the table gives it; NULL if none. */
const char *compat_cuda_family_floor(const struct compat *kb, const char *cuda, int windows);
/* 1 when cuda is in a family of the minor_version_compat table (CUDA 11 and later). */
int compat_cuda_in_family(const struct compat *kb, const char *cuda);

/*
 * PEP 440 specifier sets as the knowledge base writes them: clauses joined by
 * ',', each an operator (>=, <=, >, <, ==, !=, ~=, ===) and a version PEP 440
 * allows (its grammar and spellings; == and != may take a trailing ".*" or a
 * local label, ~= needs two release components); a pre-release tail
 * ("5.0.0dev", "2.9.0rc0") sorts before its release. Any other tail is
 * invalid. "" allows everything.
 */
int compat_spec_valid(const char *spec);
int compat_spec_allows(const char *spec, const char *version);

/* The lowest compute capability a TF version has kernels for (as compat_cc_parse); -ENOENT
 * unknown. */
int compat_tf_min_cc(const struct compat *kb, const char *tf_version);

/* How a TF version's kernels reach a GPU of compute capability cc ("8.9"). */
enum compat_kernel compat_tf_kernels_for(const struct compat *kb, const char *tf_version,
                                         const char *cc, const struct compat_tf_kernels **row);

/* The row of a compute capability, by its number or its former one; NULL if unlisted. */
const struct compat_cc *compat_cc_row(const struct compat *kb, const char *cc);

/*
 * Appends to out the library names TF loads for a CUDA and a cuDNN version
 * (either may be NULL) on Linux or Windows. Returns how many were appended;
 * 0 when the knowledge base has no entry.
 */
size_t compat_sonames(const struct compat *kb, int windows, const char *cuda, const char *cudnn,
                      struct strvec *out);

/* The component row that ships soname ("libcublasLt.so.12"), or NULL. */
const struct compat_lib_component *compat_lib_component(const struct compat *kb,
                                                        const char *soname);

/*
 * The glibc floor of a TF version's own Linux wheels ("2.27"); NULL when the
 * knowledge base has no row for its series. *row (may be NULL) gets the row.
 */
const char *compat_tf_min_glibc(const struct compat *kb, const char *tf_version,
                                const struct compat_tf_glibc **row);

/*
 * The lock's nvidia-*-cu<N> pins against the [and-cuda] extra of TF version tf
 * (NULL: not judged) and against each other (one CUDA release).
 */
void compat_lint_cuda_wheels(const struct compat *kb, const struct manifest *m, const char *tf,
                             struct diags *d);

/*
 * The lock's companion pins against the stack's TF (its pip pin, else
 * versions.tensorflow): compat.companion-window outside a release line's
 * window, compat.companion-ended for an ended project.
 */
void compat_lint_companions(const struct compat *kb, const struct manifest *m, struct diags *d);

#endif
