/*
 * convprobe.c - one cuDNN Conv2D forward, timed and checked against the CPU
 * (see gpu.h).
 *
 * Flow in the child: load both libraries and resolve every entry point first
 * (a missing symbol is a load problem of that layer, reported before any
 * work), then driver -> runtime -> cuDNN -> compare. Each step that fails
 * records layer, call, status and the library's own message and jumps to the
 * single cleanup label, which releases whatever was created, in reverse.
 */
#include "gpu.h"
#include "gpu_int.h"

#include "cuda_abi.h"
#include "error.h"
#include "isolate.h"
#include "util.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cudart {
	const char *(*GetErrorString)(tfp_cudaError_t);
	tfp_cudaError_t (*RuntimeGetVersion)(int *);
	tfp_cudaError_t (*DriverGetVersion)(int *);
	tfp_cudaError_t (*GetDeviceCount)(int *);
	tfp_cudaError_t (*SetDevice)(int);
	tfp_cudaError_t (*DeviceGetAttribute)(int *, int, int);
	tfp_cudaError_t (*Malloc)(void **, size_t);
	tfp_cudaError_t (*Free)(void *);
	tfp_cudaError_t (*Memcpy)(void *, const void *, size_t, int);
	tfp_cudaError_t (*EventCreate)(tfp_cudaEvent_t *);
	tfp_cudaError_t (*EventRecord)(tfp_cudaEvent_t, tfp_cudaStream_t);
	tfp_cudaError_t (*EventSynchronize)(tfp_cudaEvent_t);
	tfp_cudaError_t (*EventElapsedTime)(float *, tfp_cudaEvent_t, tfp_cudaEvent_t);
	tfp_cudaError_t (*EventDestroy)(tfp_cudaEvent_t);
	tfp_cudaError_t (*DeviceSynchronize)(void);
};

struct cudnn {
	size_t (*GetVersion)(void);
	const char *(*GetErrorString)(tfp_cudnnStatus_t);
	tfp_cudnnStatus_t (*Create)(tfp_cudnnHandle_t *);
	tfp_cudnnStatus_t (*Destroy)(tfp_cudnnHandle_t);
	tfp_cudnnStatus_t (*CreateTensorDescriptor)(tfp_cudnnTensorDescriptor_t *);
	tfp_cudnnStatus_t (*DestroyTensorDescriptor)(tfp_cudnnTensorDescriptor_t);
	tfp_cudnnStatus_t (*SetTensor4dDescriptor)(tfp_cudnnTensorDescriptor_t, int, int, int, int,
	                                           int, int);
	tfp_cudnnStatus_t (*CreateFilterDescriptor)(tfp_cudnnFilterDescriptor_t *);
	tfp_cudnnStatus_t (*DestroyFilterDescriptor)(tfp_cudnnFilterDescriptor_t);
	tfp_cudnnStatus_t (*SetFilter4dDescriptor)(tfp_cudnnFilterDescriptor_t, int, int, int, int,
	                                           int, int);
	tfp_cudnnStatus_t (*CreateConvolutionDescriptor)(tfp_cudnnConvolutionDescriptor_t *);
	tfp_cudnnStatus_t (*DestroyConvolutionDescriptor)(tfp_cudnnConvolutionDescriptor_t);
	tfp_cudnnStatus_t (*SetConvolution2dDescriptor)(tfp_cudnnConvolutionDescriptor_t, int, int,
	                                                int, int, int, int, int, int);
	tfp_cudnnStatus_t (*SetConvolutionMathType)(tfp_cudnnConvolutionDescriptor_t, int);
	tfp_cudnnStatus_t (*GetConvolution2dForwardOutputDim)(tfp_cudnnConvolutionDescriptor_t,
	                                                      tfp_cudnnTensorDescriptor_t,
	                                                      tfp_cudnnFilterDescriptor_t, int *,
	                                                      int *, int *, int *);
	tfp_cudnnStatus_t (*GetConvolutionForwardAlgorithm_v7)(
	    tfp_cudnnHandle_t, tfp_cudnnTensorDescriptor_t, tfp_cudnnFilterDescriptor_t,
	    tfp_cudnnConvolutionDescriptor_t, tfp_cudnnTensorDescriptor_t, int, int *,
	    tfp_cudnnConvolutionFwdAlgoPerf_t *);
	tfp_cudnnStatus_t (*GetConvolutionForwardWorkspaceSize)(
	    tfp_cudnnHandle_t, tfp_cudnnTensorDescriptor_t, tfp_cudnnFilterDescriptor_t,
	    tfp_cudnnConvolutionDescriptor_t, tfp_cudnnTensorDescriptor_t, int, size_t *);
	tfp_cudnnStatus_t (*ConvolutionForward)(tfp_cudnnHandle_t, const void *,
	                                        tfp_cudnnTensorDescriptor_t, const void *,
	                                        tfp_cudnnFilterDescriptor_t, const void *,
	                                        tfp_cudnnConvolutionDescriptor_t, int, void *,
	                                        size_t, const void *, tfp_cudnnTensorDescriptor_t,
	                                        void *);
};

/* Entry point tables: name, offset in the struct, required. */
struct sym {
	const char *name;
	size_t off;
	int required;
};

#define RT(f)                                                                                      \
	{                                                                                          \
		"cuda" #f, offsetof(struct cudart, f), 1                                           \
	}
static const struct sym cudart_syms[] = {
    RT(GetErrorString),
    RT(RuntimeGetVersion),
    RT(DriverGetVersion),
    RT(GetDeviceCount),
    RT(SetDevice),
    RT(DeviceGetAttribute),
    RT(Malloc),
    RT(Free),
    RT(Memcpy),
    RT(EventCreate),
    RT(EventRecord),
    RT(EventSynchronize),
    RT(EventElapsedTime),
    RT(EventDestroy),
    RT(DeviceSynchronize),
};
#undef RT
#define DN(f, req)                                                                                 \
	{                                                                                          \
		"cudnn" #f, offsetof(struct cudnn, f), req                                         \
	}
static const struct sym cudnn_syms[] = {
    DN(GetVersion, 1),
    DN(GetErrorString, 1),
    DN(Create, 1),
    DN(Destroy, 1),
    DN(CreateTensorDescriptor, 1),
    DN(DestroyTensorDescriptor, 1),
    DN(SetTensor4dDescriptor, 1),
    DN(CreateFilterDescriptor, 1),
    DN(DestroyFilterDescriptor, 1),
    DN(SetFilter4dDescriptor, 1),
    DN(CreateConvolutionDescriptor, 1),
    DN(DestroyConvolutionDescriptor, 1),
    DN(SetConvolution2dDescriptor, 1),
    DN(SetConvolutionMathType, 0), /* cuDNN >= 7 */
    DN(GetConvolution2dForwardOutputDim, 1),
    DN(GetConvolutionForwardAlgorithm_v7, 0), /* else IMPLICIT_GEMM, no workspace */
    DN(GetConvolutionForwardWorkspaceSize, 1),
    DN(ConvolutionForward, 1),
};
#undef DN

/* A workspace larger than this is not worth it for a probe. */
#define MAX_WORKSPACE ((size_t)256 << 20)

/* The child's exit status when the probe ran and found a fault; any other
 * non-zero end (a signal, a sanitizer's exit 1) means the child died. */
#define PROBE_FAILED 2

struct job {
	const char *cudart_path;
	const char *cudnn_path;
};

void convprobe_params_default(struct convprobe_params *p)
{
	p->n = 8;
	p->c = 3;
	p->h = 256;
	p->w = 256;
	p->k = 32;
	p->r = 3;
	p->s = 3;
	p->iters = 10;
	p->tol = 1e-3;
	p->timeout_ms = 120000;
}

static void fail(struct convprobe_result *o, const char *layer, const char *call, int status,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void fail(struct convprobe_result *o, const char *layer, const char *call, int status,
                 const char *fmt, ...)
{
	va_list ap;

	snprintf(o->layer, sizeof(o->layer), "%s", layer);
	snprintf(o->call, sizeof(o->call), "%s", call);
	o->status = status;
	va_start(ap, fmt);
	vsnprintf(o->error, sizeof(o->error), fmt, ap);
	va_end(ap);
}

static const char *rt_str(const struct cudart *rt, tfp_cudaError_t e)
{
	const char *s = rt->GetErrorString != NULL ? rt->GetErrorString(e) : NULL;
	return s != NULL ? s : "unknown error";
}

static const char *dn_str(const struct cudnn *dn, tfp_cudnnStatus_t e)
{
	const char *s = dn->GetErrorString != NULL ? dn->GetErrorString(e) : NULL;
	return s != NULL ? s : "unknown status";
}

/* dlopen + resolve; on failure fills o for `layer` and returns NULL. */
static void *load(const char *path, const struct sym *syms, size_t nsyms, void *table,
                  const char *layer, struct convprobe_result *o)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	const char *err;
	size_t i;

	if (h == NULL) {
		err = dlerror();
		fail(o, layer, "dlopen", -1, "dlopen %s: %s", path, err ? err : "failed");
		return NULL;
	}
	for (i = 0; i < nsyms; i++) {
		void *p = dlsym(h, syms[i].name);
		if (p == NULL && syms[i].required) {
			fail(o, layer, "dlsym", -1,
			     "%s has no %s: not a CUDA runtime/cuDNN it can use", path,
			     syms[i].name);
			dlclose(h);
			return NULL;
		}
		memcpy((char *)table + syms[i].off, &p, sizeof(p));
	}
	return h;
}

/* Deterministic values in [-1, 1): the same input on every run and machine. */
static void fill(float *v, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
	}
}

void convprobe_reference(const struct convprobe_params *p, const float *x, const float *f, float *y)
{
	int oh = p->h - p->r + 1, ow = p->w - p->s + 1;
	int n, k, c, i, j, r, s;

	for (n = 0; n < p->n; n++)
		for (k = 0; k < p->k; k++)
			for (i = 0; i < oh; i++)
				for (j = 0; j < ow; j++) {
					double acc = 0;
					for (c = 0; c < p->c; c++)
						for (r = 0; r < p->r; r++)
							for (s = 0; s < p->s; s++)
								acc +=
								    (double)
								        x[(((size_t)n * p->c + c) *
								               p->h +
								           i + r) *
								              p->w +
								          j + s] *
								    f[(((size_t)k * p->c + c) *
								           p->r +
								       r) *
								          p->s +
								      s];
					y[(((size_t)n * p->k + k) * oh + i) * ow + j] = (float)acc;
				}
}

/* One probe in the child: the libraries, what was made with them, freed by probe_release. */
struct probe {
	struct convprobe_result *o;
	const struct convprobe_params *p;
	struct cudart rt;
	struct cudnn dn;
	tfp_cudnnHandle_t handle;
	tfp_cudnnTensorDescriptor_t xd, yd;
	tfp_cudnnFilterDescriptor_t fd;
	tfp_cudnnConvolutionDescriptor_t cd;
	tfp_cudaEvent_t ev0, ev1;
	void *dx, *df, *dy, *dws;
	float *x, *f, *y, *yref;
	size_t nx, nf, ny;
};

/* A runtime or cuDNN call of a probe stage: on failure, said (fail) and the stage ends (1). */
#define RT_CALL(P, layer, name, expr)                                                              \
	do {                                                                                       \
		tfp_cudaError_t ce_ = (expr);                                                      \
		if (ce_ != TFP_cudaSuccess) {                                                      \
			fail((P)->o, layer, name, ce_, "%s: %s (%d)", name, rt_str(&(P)->rt, ce_), \
			     ce_);                                                                 \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)
#define DN_CALL(P, name, expr)                                                                     \
	do {                                                                                       \
		tfp_cudnnStatus_t cs_ = (expr);                                                    \
		if (cs_ != TFP_CUDNN_STATUS_SUCCESS) {                                             \
			fail((P)->o, "cudnn", name, cs_, "%s: %s (%d)", name,                      \
			     dn_str(&(P)->dn, cs_), cs_);                                          \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

/* cudnnCreate, its status kept in the result whatever it is; 0 with a handle. */
static int probe_create_handle(struct probe *P)
{
	struct convprobe_result *o = P->o;
	tfp_cudnnStatus_t cs = P->dn.Create(&P->handle);
	o->cudnn_create_status = cs;
	snprintf(o->cudnn_create_error, sizeof(o->cudnn_create_error), "%s", dn_str(&P->dn, cs));
	if (cs != TFP_CUDNN_STATUS_SUCCESS)
		P->handle = NULL;
	return cs != TFP_CUDNN_STATUS_SUCCESS;
}

/* Driver: the runtime asks the driver for devices first; device 0 is used. */
static int probe_device(struct probe *P)
{
	struct convprobe_result *o = P->o;
	tfp_cudaError_t ce = P->rt.GetDeviceCount(&o->device_count);
	if (ce != TFP_cudaSuccess || o->device_count <= 0) {
		if (ce != TFP_cudaSuccess)
			fail(o, "driver", "cudaGetDeviceCount", ce, "cudaGetDeviceCount: %s (%d)",
			     rt_str(&P->rt, ce), ce);
		else
			fail(o, "driver", "cudaGetDeviceCount", 0,
			     "cudaGetDeviceCount: no CUDA device (0 devices)");
		o->device_count = 0;
		/* Still ask cuDNN, so the report shows what a TF user would see from it. */
		probe_create_handle(P);
		return 1;
	}
	RT_CALL(P, "driver", "cudaSetDevice", P->rt.SetDevice(0));
	P->rt.DeviceGetAttribute(&o->cc_major, TFP_cudaDevAttrComputeCapabilityMajor, 0);
	P->rt.DeviceGetAttribute(&o->cc_minor, TFP_cudaDevAttrComputeCapabilityMinor, 0);
	return 0;
}

/* cuDNN: handle and descriptors, the output's shape checked. */
static int probe_describe(struct probe *P)
{
	struct convprobe_result *o = P->o;
	const struct convprobe_params *p = P->p;
	struct cudnn *dn = &P->dn;
	int on, oc, oh, ow;
	if (probe_create_handle(P) != 0) {
		fail(o, "cudnn", "cudnnCreate", o->cudnn_create_status, "cudnnCreate: %s (%d)",
		     dn_str(dn, o->cudnn_create_status), o->cudnn_create_status);
		return 1;
	}
	DN_CALL(P, "cudnnCreateTensorDescriptor", dn->CreateTensorDescriptor(&P->xd));
	DN_CALL(P, "cudnnCreateTensorDescriptor", dn->CreateTensorDescriptor(&P->yd));
	DN_CALL(P, "cudnnCreateFilterDescriptor", dn->CreateFilterDescriptor(&P->fd));
	DN_CALL(P, "cudnnCreateConvolutionDescriptor", dn->CreateConvolutionDescriptor(&P->cd));
	DN_CALL(P, "cudnnSetTensor4dDescriptor",
	        dn->SetTensor4dDescriptor(P->xd, TFP_CUDNN_TENSOR_NCHW, TFP_CUDNN_DATA_FLOAT, p->n,
	                                  p->c, p->h, p->w));
	DN_CALL(P, "cudnnSetFilter4dDescriptor",
	        dn->SetFilter4dDescriptor(P->fd, TFP_CUDNN_DATA_FLOAT, TFP_CUDNN_TENSOR_NCHW, p->k,
	                                  p->c, p->r, p->s));
	DN_CALL(P, "cudnnSetConvolution2dDescriptor",
	        dn->SetConvolution2dDescriptor(P->cd, 0, 0, 1, 1, 1, 1, TFP_CUDNN_CROSS_CORRELATION,
	                                       TFP_CUDNN_DATA_FLOAT));
	/* Plain FP32 FMA (no TF32), so the CPU reference can be held to tol. */
	if (dn->SetConvolutionMathType != NULL)
		DN_CALL(P, "cudnnSetConvolutionMathType",
		        dn->SetConvolutionMathType(P->cd, TFP_CUDNN_FMA_MATH));
	DN_CALL(P, "cudnnGetConvolution2dForwardOutputDim",
	        dn->GetConvolution2dForwardOutputDim(P->cd, P->xd, P->fd, &on, &oc, &oh, &ow));
	if (on != p->n || oc != p->k || oh != p->h - p->r + 1 || ow != p->w - p->s + 1) {
		fail(o, "cudnn", "cudnnGetConvolution2dForwardOutputDim", 0,
		     "cuDNN computes an output of %dx%dx%dx%d, expected %dx%dx%dx%d", on, oc, oh,
		     ow, p->n, p->k, p->h - p->r + 1, p->w - p->s + 1);
		return 1;
	}
	o->out_n = on;
	o->out_c = oc;
	o->out_h = oh;
	o->out_w = ow;
	DN_CALL(P, "cudnnSetTensor4dDescriptor",
	        dn->SetTensor4dDescriptor(P->yd, TFP_CUDNN_TENSOR_NCHW, TFP_CUDNN_DATA_FLOAT, on,
	                                  oc, oh, ow));
	return 0;
}

/* The algorithm (cuDNN's heuristic order, the first within the workspace cap) and its
 * workspace. */
static int probe_algo(struct probe *P)
{
	struct convprobe_result *o = P->o;
	struct cudnn *dn = &P->dn;
	o->algo = TFP_CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
	if (dn->GetConvolutionForwardAlgorithm_v7 != NULL) {
		tfp_cudnnConvolutionFwdAlgoPerf_t perf[16];
		int nperf = 0, j;

		DN_CALL(P, "cudnnGetConvolutionForwardAlgorithm_v7",
		        dn->GetConvolutionForwardAlgorithm_v7(P->handle, P->xd, P->fd, P->cd, P->yd,
		                                              (int)ARRAY_SIZE(perf), &nperf, perf));
		for (j = 0; j < nperf; j++) {
			if (perf[j].status == TFP_CUDNN_STATUS_SUCCESS &&
			    perf[j].memory <= MAX_WORKSPACE) {
				o->algo = perf[j].algo;
				break;
			}
		}
	}
	DN_CALL(P, "cudnnGetConvolutionForwardWorkspaceSize",
	        dn->GetConvolutionForwardWorkspaceSize(P->handle, P->xd, P->fd, P->cd, P->yd,
	                                               o->algo, &o->workspace));
	return 0;
}

/* Runtime: memory, copies, events; the warm-up and the timed loop, the result back. */
static int probe_forward(struct probe *P)
{
	struct convprobe_result *o = P->o;
	const struct convprobe_params *p = P->p;
	struct cudart *rt = &P->rt;
	float ms = 0, alpha = 1.0f, beta = 0.0f;
	size_t nx = P->nx, nf = P->nf, ny = P->ny;

	P->x = xmalloc(nx * sizeof(float));
	P->f = xmalloc(nf * sizeof(float));
	P->y = xcalloc(ny, sizeof(float));
	P->yref = xmalloc(ny * sizeof(float));
	fill(P->x, nx, 12345);
	fill(P->f, nf, 777);
	RT_CALL(P, "runtime", "cudaMalloc", rt->Malloc(&P->dx, nx * sizeof(float)));
	RT_CALL(P, "runtime", "cudaMalloc", rt->Malloc(&P->df, nf * sizeof(float)));
	RT_CALL(P, "runtime", "cudaMalloc", rt->Malloc(&P->dy, ny * sizeof(float)));
	if (o->workspace > 0)
		RT_CALL(P, "runtime", "cudaMalloc", rt->Malloc(&P->dws, o->workspace));
	RT_CALL(P, "runtime", "cudaMemcpy",
	        rt->Memcpy(P->dx, P->x, nx * sizeof(float), TFP_cudaMemcpyHostToDevice));
	RT_CALL(P, "runtime", "cudaMemcpy",
	        rt->Memcpy(P->df, P->f, nf * sizeof(float), TFP_cudaMemcpyHostToDevice));
	RT_CALL(P, "runtime", "cudaEventCreate", rt->EventCreate(&P->ev0));
	RT_CALL(P, "runtime", "cudaEventCreate", rt->EventCreate(&P->ev1));

	/* Warm-up (lazy module loading, autotuning caches), then the timed loop;
	 * the events bracket device work, not the launch calls. */
	DN_CALL(P, "cudnnConvolutionForward",
	        P->dn.ConvolutionForward(P->handle, &alpha, P->xd, P->dx, P->fd, P->df, P->cd,
	                                 o->algo, P->dws, o->workspace, &beta, P->yd, P->dy));
	RT_CALL(P, "runtime", "cudaDeviceSynchronize", rt->DeviceSynchronize());
	RT_CALL(P, "runtime", "cudaEventRecord", rt->EventRecord(P->ev0, NULL));
	for (size_t i = 0; i < (size_t)p->iters; i++)
		DN_CALL(P, "cudnnConvolutionForward",
		        P->dn.ConvolutionForward(P->handle, &alpha, P->xd, P->dx, P->fd, P->df,
		                                 P->cd, o->algo, P->dws, o->workspace, &beta, P->yd,
		                                 P->dy));
	RT_CALL(P, "runtime", "cudaEventRecord", rt->EventRecord(P->ev1, NULL));
	RT_CALL(P, "runtime", "cudaEventSynchronize", rt->EventSynchronize(P->ev1));
	RT_CALL(P, "runtime", "cudaEventElapsedTime", rt->EventElapsedTime(&ms, P->ev0, P->ev1));
	RT_CALL(P, "runtime", "cudaMemcpy",
	        rt->Memcpy(P->y, P->dy, ny * sizeof(float), TFP_cudaMemcpyDeviceToHost));
	o->ms_per_forward = p->iters > 0 ? ms / p->iters : 0;
	if (o->ms_per_forward > 0) {
		o->images_per_s = p->n * 1000.0 / o->ms_per_forward;
		o->gflops = 2.0 * ny * p->c * p->r * p->s / (o->ms_per_forward * 1e6);
	}
	return 0;
}

/* Compare with the CPU. NaN never compares greater, so test it explicitly. */
static int probe_compare(struct probe *P)
{
	struct convprobe_result *o = P->o;
	const struct convprobe_params *p = P->p;
	convprobe_reference(p, P->x, P->f, P->yref);
	o->max_abs_err = 0;
	for (size_t i = 0; i < P->ny; i++) {
		double d = fabs((double)P->y[i] - P->yref[i]);
		if (isnan(d) || d > o->max_abs_err)
			o->max_abs_err = isnan(d) ? INFINITY : d;
	}
	if (!(o->max_abs_err <= p->tol)) {
		fail(o, "compare", "cudnnConvolutionForward", 0,
		     "output differs from the CPU reference: max abs error %g > tolerance %g",
		     o->max_abs_err, p->tol);
		return 1;
	}
	return 0;
}

#undef RT_CALL
#undef DN_CALL

static void probe_release(struct probe *P)
{
	struct cudart *rt = &P->rt;
	struct cudnn *dn = &P->dn;
	if (P->ev1 != NULL)
		rt->EventDestroy(P->ev1);
	if (P->ev0 != NULL)
		rt->EventDestroy(P->ev0);
	if (P->dws != NULL)
		rt->Free(P->dws);
	if (P->dy != NULL)
		rt->Free(P->dy);
	if (P->df != NULL)
		rt->Free(P->df);
	if (P->dx != NULL)
		rt->Free(P->dx);
	if (P->cd != NULL)
		dn->DestroyConvolutionDescriptor(P->cd);
	if (P->fd != NULL)
		dn->DestroyFilterDescriptor(P->fd);
	if (P->yd != NULL)
		dn->DestroyTensorDescriptor(P->yd);
	if (P->xd != NULL)
		dn->DestroyTensorDescriptor(P->xd);
	if (P->handle != NULL)
		dn->Destroy(P->handle);
	free(P->yref);
	free(P->y);
	free(P->f);
	free(P->x);
}

static int probe_child(void *arg, void *shared)
{
	const struct job *job = arg;
	struct probe P;
	void *hrt = NULL, *hdn = NULL;
	int ok = 0;

	memset(&P, 0, sizeof(P));
	P.o = shared;
	P.p = &P.o->params;
	hrt = load(job->cudart_path, cudart_syms, ARRAY_SIZE(cudart_syms), &P.rt, "runtime", P.o);
	if (hrt != NULL)
		hdn =
		    load(job->cudnn_path, cudnn_syms, ARRAY_SIZE(cudnn_syms), &P.dn, "cudnn", P.o);
	if (hdn != NULL) {
		P.o->cudnn_version = (long)P.dn.GetVersion();
		P.rt.RuntimeGetVersion(&P.o->runtime_version);
		P.rt.DriverGetVersion(&P.o->driver_version);
		ok = probe_device(&P) == 0 && probe_describe(&P) == 0 && probe_algo(&P) == 0;
	}
	if (ok) {
		const struct convprobe_params *p = P.p;
		P.nx = (size_t)p->n * p->c * p->h * p->w;
		P.nf = (size_t)p->k * p->c * p->r * p->s;
		P.ny = (size_t)P.o->out_n * P.o->out_c * P.o->out_h * P.o->out_w;
		ok = probe_forward(&P) == 0 && probe_compare(&P) == 0;
	}
	if (hdn != NULL)
		probe_release(&P);
	/* No dlclose: the child exits next, and unloading GPU libraries at exit
	 * is a known source of crashes that would hide the real answer. */
	(void)hrt;
	P.o->ok = ok;
	return ok ? 0 : PROBE_FAILED;
}

int convprobe_child_main(int argc, char **argv, void *shared, size_t size)
{
	struct job job;

	if (argc != 2 || size < sizeof(struct convprobe_result))
		return 64;
	job.cudart_path = argv[0];
	job.cudnn_path = argv[1];
	return probe_child(&job, shared);
}

int convprobe_run(const char *cudart_path, const char *cudnn_path, const struct convprobe_params *p,
                  struct convprobe_result *out)
{
	struct job job = {cudart_path, cudnn_path};
	const char *args[] = {cudart_path, cudnn_path};
	struct convprobe_result *sh;
	struct isolate_status st;
	struct isolate_shm shm;
	int ret;

	memset(out, 0, sizeof(*out));
	if (p != NULL)
		out->params = *p;
	else
		convprobe_params_default(&out->params);
	out->cudnn_create_status = -1;
	out->cc_major = out->cc_minor = -1;
	if (out->params.n <= 0 || out->params.c <= 0 || out->params.k <= 0 || out->params.r <= 0 ||
	    out->params.s <= 0 || out->params.h < out->params.r || out->params.w < out->params.s ||
	    out->params.iters < 0) {
		fail(out, "child", "params", 0, "invalid convolution shape");
		return TF_EUSAGE;
	}
	if (cudart_path == NULL || cudnn_path == NULL) {
		fail(out, "child", "params", 0, "no cudart or cudnn library to probe");
		return TF_EUSAGE;
	}
	if (isolate_shm_open(&shm, sizeof(*sh)) < 0) {
		fail(out, "child", "memfd", 0, "cannot share memory with the probe process");
		return TF_EFAIL;
	}
	sh = shm.p;
	*sh = *out;
	/* The probe loads cuDNN (hundreds of MB): in tfprov exec'd afresh, not in a
	 * copy of the run that verifies (isolate.h). */
	if (isolate_exec("convprobe", args, 2, probe_child, &job, &shm, out->params.timeout_ms,
	                 &st) < 0) {
		isolate_shm_close(&shm);
		fail(out, "child", "fork", 0, "cannot start the probe process");
		return TF_EFAIL;
	}
	*out = *sh;
	isolate_shm_close(&shm);
	out->layer[sizeof(out->layer) - 1] = '\0';
	out->call[sizeof(out->call) - 1] = '\0';
	out->error[sizeof(out->error) - 1] = '\0';
	out->cudnn_create_error[sizeof(out->cudnn_create_error) - 1] = '\0';
	if (!st.exited || (st.exit_code != 0 && st.exit_code != PROBE_FAILED)) {
		char how[96];

		isolate_describe(&st, out->params.timeout_ms, how, sizeof(how));
		fail(out, "child", "probe", 0, "the probe process %s (a library crashed or hung)",
		     how);
		out->ok = 0;
	}
	ret = out->ok ? 0 : TF_EVERIFY;
	return ret;
}
