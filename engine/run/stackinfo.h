/*
 * stackinfo.h - what an applied stack is, read back from the state: the
 * manifest of its current generation (generations.manifest_text, parsed again
 * with manifest_load_buf), its versions, and the host paths where its CUDA,
 * cuDNN and Python env were placed. verify, bench and doctor work from this,
 * never from a manifest file that may have changed since the apply.
 *
 * Invariants:
 *  - Paths in struct stackinfo are host paths (ctx_host_path of the manifest's
 *    root-relative paths), so `--root` needs no string joins by callers.
 *  - lib_dirs is the stack's loader search order, the same as the env step's
 *    LD_LIBRARY_PATH: cuDNN's own lib when its placement is separate, then
 *    the CUDA prefix's lib64 (which may hold the cuDNN another stack sharing
 *    the prefix merged: this stack's own must come first). A stack that takes CUDA from nvidia-*-cu<N> pip
 *    wheels (no cuda section) has no LD_LIBRARY_PATH at all: its lib_dirs are
 *    where TensorFlow loads those libraries from, the env's
 *    site-packages/nvidia/<lib>/lib (the knowledge base's pip.cuda_wheels).
 *  - The struct owns everything it points to; stackinfo_release() frees it.
 */
#ifndef TFPROV_STACKINFO_H
#define TFPROV_STACKINFO_H

#include <stdint.h>

#include "error.h"
#include "gpu.h"
#include "ctx.h"
#include "util.h"

struct manifest;
struct compat;

struct stackinfo {
	char *name;
	int64_t stack_id;
	int64_t gen;        /* current generation, numbered per stack from 1 */
	struct manifest *m; /* the manifest of that generation; owned */
	const char *tf;     /* versions, borrowed from m; NULL when absent */
	const char *cuda;
	const char *cudnn;
	int has_cuda; /* the stack carries CUDA: a cuda step, or CUDA pip wheels */
	int has_cudnn;
	int cuda_from_pip; /* CUDA and cuDNN come from nvidia-*-cu<N> wheels in the env;
	                      cuda/cudnn are then the runtime and cuDNN wheel versions */
	char *cuda_prefix; /* host paths; NULL when the stack has no such part */
	char *cudnn_prefix;
	char *env_prefix;
	char *python;    /* <env>/bin/python, NULL without a Python env */
	char *profile;   /* the env step's activate.sh (host path) */
	char *host_root; /* the --root the host paths are under ("/": none) */
	struct strvec lib_dirs;
};

/* Names of the applied stacks, sorted. 0, or TF_ESTATE. */
int stackinfo_names(struct ctx *c, struct strvec *names);

/*
 * Loads stack `name` from the state. 0; -ENOENT when no such stack exists;
 * TF_EMANIFEST when its recorded manifest no longer parses (why says what).
 */
int stackinfo_load(struct ctx *c, const char *name, struct stackinfo *out, struct why *why);

/*
 * Sets m's cuDNN placement to what the stack's last apply chose (the cudnn
 * step's recorded attrs): PLACEMENT_SEPARATE when the planner placed it
 * beside a CUDA prefix shared with a stack that merged another cuDNN
 * (plan_resolve_placement). Every reader of a recorded manifest calls this,
 * so run, env, verify and bench find the cuDNN where it is.
 */
void stackinfo_recorded_placement(struct ctx *c, int64_t stack_id, struct manifest *m);

/*
 * Fills a stackinfo from a manifest that may not be applied (doctor MANIFEST):
 * same paths, stack_id and gen 0. Takes ownership of m.
 */
void stackinfo_from_manifest(struct ctx *c, struct manifest *m, struct stackinfo *out);

void stackinfo_release(struct stackinfo *si);

/*
 * The sonames TF loads for the stack's CUDA and cuDNN, with the libraries they
 * load themselves (the knowledge base's sonames: libs and companions, the list
 * validate checks the artifacts against), without duplicates. Returns how
 * many; 0 when kb is NULL or knows neither version.
 */
size_t stackinfo_sonames(const struct stackinfo *si, const struct compat *kb, struct strvec *out);

/* First lib_dirs[i]/<name> starting with `prefix` ("libcudart.so.") that exists; caller frees. */
char *stackinfo_find_lib(const struct stackinfo *si, const char *prefix);

/*
 * The environment the stack's programs run with (verify, bench, doctor): a
 * clean base (spawn_env_base) and the caller's LD_LIBRARY_PATH, entered into
 * the stack as `tfprov run` enters it (stackenv.c, host paths).
 */
void stackinfo_env(const struct stackinfo *si, struct strvec *env);

/* What the GPU answers for a stack: the driver probe, then the native conv probe. */
enum stack_gpu_verdict {
	STACK_GPU_OK,      /* a GPU computed the probe convolution and it matched the CPU */
	STACK_GPU_ABSENT,  /* no NVIDIA driver, or a driver without GPUs */
	STACK_GPU_REBOOT,  /* NVML: driver/library version mismatch (upgrade without reboot) */
	STACK_GPU_FAILED,  /* the probe ran and failed: see conv.layer */
	STACK_GPU_NOT_RUN, /* the stack has no libcudart/libcudnn to probe with */
};

struct stack_gpu {
	enum stack_gpu_verdict verdict;
	struct gpu_probe probe;
	struct convprobe_result conv; /* valid when probe_ran */
	int probe_ran;
	char layer[16];   /* the failing layer: driver, runtime, cudnn, compare, child */
	char reason[768]; /* one line: what failed and why; "" when ok */
};

/*
 * Asks the driver (gpu_probe), then, when a GPU is there, runs convprobe with
 * the stack's libcudart and libcudnn. Without a driver the probe is not run:
 * a stand-in or a runtime that answers without a GPU must not pass for one.
 * Fills *out; returns 0 (the verdict says what happened).
 */
int stack_gpu_check(const struct stackinfo *si, struct stack_gpu *out);
const char *stack_gpu_verdict_name(enum stack_gpu_verdict v);

/* The value the stack's env gives TF_FORCE_GPU_ALLOW_GROWTH ("true" unless the manifest overrides). */
const char *stackinfo_allow_growth(const struct stackinfo *si);

#endif
