/*
 * convprobe.h - prove that a stack's CUDA runtime and cuDNN compute
 * correctly, without Python or TensorFlow.
 *
 * dlopen()s the given libcudart and libcudnn (no link-time dependency: tfprov
 * builds and runs where neither exists), runs one Conv2D forward through
 * cuDNN's legacy API (the same in cuDNN 8 and 9), times it with CUDA events,
 * and compares the output with a convolution computed on the CPU. The whole
 * probe runs in a child process (isolate.h): a broken runtime cannot crash
 * tfprov.
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
#ifndef TFPROV_CONVPROBE_H
#define TFPROV_CONVPROBE_H

#include <stddef.h>

struct convprobe_params {
	int n, c, h, w; /* input: batch, channels, height, width */
	int k, r, s;    /* filters: count, height, width */
	int iters;      /* timed forwards after one warm-up */
	double tol;     /* max abs error allowed against the CPU reference */
	int timeout_ms; /* for the whole probe */
};

/* N=8, C=3, 256x256, K=32, 3x3, 10 iterations, tol 1e-3, 120 s. */
void convprobe_params_default(struct convprobe_params *p);

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
 * Runs the probe. p may be NULL for the defaults. Returns 0 when ok,
 * TF_EVERIFY when the probe ran and failed (see out), TF_EFAIL when no child
 * process could be started. *out is always filled.
 */
int convprobe_run(const char *cudart_path, const char *cudnn_path, const struct convprobe_params *p,
                  struct convprobe_result *out);

/* The CPU reference: y[n][k][oh][ow] = sum_c,r,s x[n][c][oh+r][ow+s] * f[k][c][r][s]. */
void convprobe_reference(const struct convprobe_params *p, const float *x, const float *f,
                         float *y);

#endif
