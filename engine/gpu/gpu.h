/*
 * gpu.h - the gpu room: asking the hardware, each probe in a forked child. NVML,
 * the loadability of the libraries TensorFlow loads, a native cuDNN
 * convolution, and the runner of the TensorFlow benchmark script.
 *
 * The one public header of engine/gpu/ (ARCHITECTURE.md section 2); what
 * only the room itself uses is in private/. Its parts, each with its own
 * comment below: benchrun, convprobe, gpu_probe, libcheck.
 */
#ifndef TFPROV_GPU_H
#define TFPROV_GPU_H

#include <stddef.h>

#include "error.h"
#include "util.h"

/*
 * benchrun (engine/gpu/benchrun.c) - runs the GPU conv benchmark script (bench/bench_conv.py)
 * in a stack's interpreter with the stack's environment, and reads the one
 * JSON object it prints into a struct bench_result.
 *
 * The script's contract: exit 0 with {"ok": true, ...} on a measurement;
 * exit 3 with {"ok": false, "reason": ...} when TensorFlow sees no GPU (or
 * is missing); anything else is a failure of the benchmark itself.
 * Strings in a result are owned by it; bench_result_release() frees them.
 */

struct ctx;

struct bench_opts {
	const char *python;      /* the env's interpreter */
	const char *script;      /* path of bench_conv.py */
	char *const *envp;       /* the stack's environment (complete) */
	const char *const *args; /* extra script arguments, NULL-terminated; may be NULL */
	double timeout_s;        /* 0: 30 minutes */
};

struct bench_result {
	int ok;          /* a GPU measurement was made */
	int exit_status; /* the script's exit status */
	char *reason;    /* why not ok */
	char *gpu, *precision, *tf_version, *cuda_version, *cudnn_version;
	int batch_size, steps;
	double ms_per_step, images_per_sec;
	char *raw_json; /* the object as printed */
};

/*
 * 0 when the script ran and printed a valid object (check ok: no GPU is
 * ok == 0 with a reason, and the caller maps it to TF_EVERIFY); TF_EFAIL
 * with why when it could not run or printed no JSON.
 */
int bench_run(struct ctx *c, const struct bench_opts *o, struct bench_result *r, struct why *why);
void bench_result_release(struct bench_result *r);

/*
 * convprobe (engine/gpu/convprobe.c) - prove that a stack's CUDA runtime and cuDNN compute
 * correctly, without Python or TensorFlow.
 *
 * dlopen()s the given libcudart and libcudnn (no link-time dependency: tfprov
 * builds and runs where neither exists), runs one Conv2D forward through
 * cuDNN's legacy API (the same in cuDNN 8 and 9), times it with CUDA events,
 * and compares the output with a convolution computed on the CPU. The whole
 * probe runs in a child process (isolate.h: tfprov exec'd afresh): a broken
 * runtime cannot crash tfprov.
 *
 * The convolution is the guide's benchmark layer: Conv2D(32, 3x3) on
 * 256x256x3 images, stride 1, no padding, cross-correlation (what TF calls a
 * convolution), NCHW float32 with cuDNN's FMA math (no TF32), so the CPU
 * reference must agree to within `tol`.
 *
 * When something fails, `layer` says whose fault it is, `call` which entry
 * point answered, `status` its code and `error` the library's own words
 * (cudaGetErrorString, cudnnGetErrorString):
 *   "driver"  no usable driver or device (cudaGetDeviceCount: 35, 100, ...)
 *   "runtime" libcudart missing or failing (dlopen, cudaMalloc, cudaMemcpy ...)
 *   "cudnn"   libcudnn missing or failing (dlopen, cudnnCreate ...)
 *   "compare" computed, but the output differs from the CPU reference
 *   "child"   the probe process crashed or hung
 * Even when the driver layer fails, cudnnCreate is still called once so the
 * report also says how cuDNN reacts (cudnn_create_status/_error).
 *
 * struct convprobe_result owns no heap memory.
 */

struct convprobe_params {
	int n, c, h, w; /* input: batch, channels, height, width */
	int k, r, s;    /* filters: count, height, width */
	int iters;      /* timed forwards after one warm-up */
	double tol;     /* max abs error allowed against the CPU reference */
	int timeout_ms; /* for the whole probe */
};

struct convprobe_result {
	int ok;         /* 1: computed and matched the reference */
	char layer[16]; /* "" when ok, else driver|runtime|cudnn|compare|child */
	char call[64];  /* the failing call, e.g. "cudaGetDeviceCount" */
	int status;     /* its return code */
	char error[512];

	int runtime_version; /* cudaRuntimeGetVersion: 12030 = 12.3; 0 unknown */
	int driver_version;  /* cudaDriverGetVersion: 0 = no driver */
	long cudnn_version;  /* cudnnGetVersion: 8907, 91900 */
	int device_count;
	int cc_major, cc_minor; /* -1 when not reached */
	int cudnn_create_status; /* cudnnCreate's answer, also when the driver failed; -1 not called */
	char cudnn_create_error[96];

	struct convprobe_params params;
	int out_n, out_c, out_h, out_w;
	int algo;              /* cuDNN forward algorithm used */
	size_t workspace;      /* its workspace, bytes */
	double ms_per_forward; /* mean of params.iters, CUDA event timing */
	double images_per_s;
	double gflops;
	double max_abs_err; /* against the CPU reference */
};

/*
 * Runs the probe. p may be NULL for the defaults (private/gpu_int.h). Returns 0 when ok,
 * TF_EVERIFY when the probe ran and failed (see out), TF_EFAIL when no child
 * process could be started. *out is always filled.
 */
int convprobe_run(const char *cudart_path, const char *cudnn_path, const struct convprobe_params *p,
                  struct convprobe_result *out);

/*
 * gpu_probe (engine/gpu/gpu_probe.c) - what NVIDIA driver and GPUs this machine has.
 *
 * Order of sources, first that answers wins:
 *   1. NVML: dlopen("libnvidia-ml.so.1") through the normal loader search
 *      (LD_LIBRARY_PATH, then the ld.so cache), on WSL2 also
 *      /usr/lib/wsl/lib/libnvidia-ml.so.1. Gives the driver version, the
 *      CUDA version the driver supports, and each GPU's name and compute
 *      capability. Runs in a child process (isolate.h): a broken NVML or one
 *      that hangs on a wedged GPU cannot take tfprov down.
 *   2. procfs: /proc/driver/nvidia/version ("NVRM version: ... Kernel Module
 *      535.104.05 ...") and /proc/driver/nvidia/gpus/<bus id>/information for the
 *      GPU names; compute capabilities are then unknown (-1).
 *   3. none: found = 0, error says what each source answered, e.g.
 *      "nvmlInit_v2: Driver Not Loaded (9); /proc/driver/nvidia/version: No
 *      such file or directory".
 * WSL2 is recognised independently of the source: the driver lives on the
 * Windows side, so a Linux driver must never be planned there.
 *
 * Test overrides (environment; production leaves them unset):
 *   LD_LIBRARY_PATH            where the loader finds libnvidia-ml.so.1 (a stand-in)
 *   TFPROV_NO_NVML=1           skip NVML entirely (exercise the procfs fallback)
 *   TFPROV_NVML_TIMEOUT_MS     how long NVML may take (default 30000)
 *   TFPROV_PROC_DRIVER_NVIDIA  directory replacing /proc/driver/nvidia
 *   TFPROV_PROC_VERSION        file replacing /proc/version (WSL detection)
 *   TFPROV_WSL_LIB_DIR         directory replacing /usr/lib/wsl/lib
 *
 * All strings in struct gpu_probe are NUL-terminated and truncated to fit;
 * the struct owns no heap memory.
 */

#define GPU_PROBE_MAX_GPUS 16

struct gpu_info {
	char name[96];
	int cc_major, cc_minor; /* -1 when unknown (procfs) */
};

struct gpu_probe {
	int found;               /* 1: a driver answered (NVML or procfs) */
	char driver_version[32]; /* "535.104.05" */
	int cuda_driver_version; /* highest CUDA the driver supports, 12020 = 12.2; 0 unknown */
	int ngpus;               /* GPUs listed in gpus[] (at most GPU_PROBE_MAX_GPUS) */
	int ngpus_total;         /* GPUs the driver reported, may exceed ngpus */
	struct gpu_info gpus[GPU_PROBE_MAX_GPUS];
	int wsl;         /* 1 on WSL2 */
	char source[16]; /* "nvml" | "procfs" | "none" */
	int nvml_status; /* last failing NVML return code, 0 if none; -1: NVML not loadable */
	char error[256]; /* why NVML (and procfs) did not answer; "" when NVML did */
};

/* Fills *out (always, even on failure). Returns 0; "no driver" is out->found == 0. */
int gpu_probe_run(struct gpu_probe *out);

/* 1 when /proc/version text names Microsoft's kernel (WSL). */
int gpu_probe_is_wsl_kernel(const char *proc_version);

/*
 * libcheck (engine/gpu/libcheck.c) - can the libraries a TensorFlow build loads be loaded from the
 * stack's directories? The check behind `tfprov verify`.
 *
 * A child (isolate.h; tfprov's own binary exec'd afresh, so that it does not
 * carry a copy of the run's memory) looks for each soname in the given directories
 * in order, the way LD_LIBRARY_PATH is searched, and dlopen()s the file it
 * finds by absolute path; a broken library can crash or hang only the child.
 * Each result names the soname, the file loaded, the directories searched,
 * the loader's own error and, for a failure, the fix from the setup guide's
 * troubleshooting table.
 *
 * Dependencies: the loader of a running process does not re-read
 * LD_LIBRARY_PATH, so a listed library's DT_NEEDED entries are satisfied by
 * libraries already loaded under that soname, then by the loader's normal
 * search. The child therefore loads the whole list and retries failures until
 * no more succeed: list a library's stack-local dependencies too (the TF lists
 * below do) and the order of the list does not matter.
 *
 * The sonames are data: callers pass any list; the list TF loads for a CUDA
 * and cuDNN generation is the knowledge base's (data/compat.yaml sonames,
 * compat_tf_libraries()), the same one validate checks the artifacts against.
 * struct libcheck_result owns its items; release it with
 * libcheck_result_release().
 */

enum libcheck_flags {
	/* A soname absent from every dir may come from the loader's default search
	 * (ld.so cache, system dirs); it is then ok with from_system set. */
	LIBCHECK_SYSTEM_FALLBACK = 1 << 0,
};

enum libcheck_state {
	LIBCHECK_NOT_RUN = 0, /* the child died before reaching it */
	LIBCHECK_OK,
	LIBCHECK_NOT_FOUND,   /* in none of the directories (nor the system, with the flag) */
	LIBCHECK_LOAD_FAILED, /* found, but dlopen failed */
	LIBCHECK_CRASHED,     /* loading it killed or hung the child */
};

struct libcheck_item {
	char soname[96];
	enum libcheck_state state;
	int from_system;    /* loaded through the default search, not from the dirs */
	char path[1024];    /* file found/loaded ("" when not found) */
	char error[640];    /* dlerror(), or what happened */
	const char *advice; /* static text for a failure, NULL when ok */
};

struct libcheck_result {
	struct libcheck_item *items;
	size_t n;
	size_t nfail;
	char *searched;  /* the dirs, ':'-joined (an LD_LIBRARY_PATH value); owned */
	char child[128]; /* how the child ended when it did not finish: "killed by signal 11 ..." */
	long child_maxrss_kib; /* the checking child's peak resident set, the largest round's */
};

/*
 * Checks every soname against dirs. Returns 0 when all load, TF_EVERIFY when
 * one or more fail (see res->items), TF_EFAIL when no child could be started.
 * res is always initialised; release it.
 */
int libcheck_run(const char *const *dirs, size_t ndirs, const char *const *sonames, size_t nsonames,
                 unsigned flags, struct libcheck_result *res);
void libcheck_result_release(struct libcheck_result *res);

/*
 * The children of libcheck_run and convprobe_run are the program's own
 * binary run again as `PROGRAM GPU_ISOLATED_ARG ...` (isolate.h), so that
 * they do not start with a copy of the caller's memory. A program opts in by calling
 * gpu_isolated_main(argc, argv) first thing in main(): on such a command
 * line it runs the child and exits; otherwise it returns. A program that
 * does not call it gets a forked child, as before.
 */
#define GPU_ISOLATED_ARG "--isolated-child"
void gpu_isolated_main(int argc, char **argv);

/* The troubleshooting advice for a soname in a given failure state (static). */
const char *libcheck_advice(const char *soname, enum libcheck_state state);
const char *libcheck_state_name(enum libcheck_state state);

#endif
