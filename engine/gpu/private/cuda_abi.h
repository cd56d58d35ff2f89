/*
 * cuda_abi.h - the few CUDA runtime and cuDNN types, constants and entry
 * point signatures that tfprov calls through dlsym().
 *
 * tfprov never includes NVIDIA's headers in the core (they are absent on most
 * machines tfprov runs on) and never links against the libraries. The values
 * here are copied from cuda_runtime_api.h / driver_types.h and cudnn*.h; they
 * are part of NVIDIA's stable ABI and identical in CUDA 11-13 and cuDNN 8-9
 * for everything used here. Names carry a tfp_/TFP_ prefix so that
 * tests/fixtures/cuda_abi_check.c can include this file next to the real
 * headers and static_assert that every value and the perf struct's layout
 * match (built wherever /usr/local/cuda/include/cudnn.h exists).
 *
 * cuDNN status numbers are NOT listed: cuDNN 9 renumbered them
 * (NOT_INITIALIZED is 1 in cuDNN 8, 1001 in 9), so tfprov only tests for 0
 * and asks cudnnGetErrorString for the rest.
 */
#ifndef TFPROV_CUDA_ABI_H
#define TFPROV_CUDA_ABI_H

#include <stddef.h>

/* CUDA runtime (driver_types.h) */
typedef int tfp_cudaError_t;
typedef struct CUevent_st *tfp_cudaEvent_t;
typedef struct CUstream_st *tfp_cudaStream_t;
#define TFP_cudaSuccess                       0
#define TFP_cudaErrorInsufficientDriver       35
#define TFP_cudaErrorNoDevice                 100
#define TFP_cudaMemcpyHostToDevice            1
#define TFP_cudaMemcpyDeviceToHost            2
#define TFP_cudaDevAttrComputeCapabilityMajor 75
#define TFP_cudaDevAttrComputeCapabilityMinor 76

/* cuDNN (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h) */
typedef int tfp_cudnnStatus_t;
typedef struct cudnnContext *tfp_cudnnHandle_t;
typedef struct cudnnTensorStruct *tfp_cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *tfp_cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct *tfp_cudnnConvolutionDescriptor_t;
#define TFP_CUDNN_STATUS_SUCCESS                     0
#define TFP_CUDNN_DATA_FLOAT                         0
#define TFP_CUDNN_TENSOR_NCHW                        0
#define TFP_CUDNN_CROSS_CORRELATION                  1
#define TFP_CUDNN_FMA_MATH                           3
#define TFP_CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM 0

typedef struct {
	int algo;   /* cudnnConvolutionFwdAlgo_t */
	int status; /* cudnnStatus_t */
	float time;
	size_t memory;
	int determinism; /* cudnnDeterminism_t */
	int mathType;    /* cudnnMathType_t */
	int reserved[3];
} tfp_cudnnConvolutionFwdAlgoPerf_t;

#endif
