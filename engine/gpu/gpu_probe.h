/*
 * gpu_probe.h - what NVIDIA driver and GPUs this machine has.
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
#ifndef TFPROV_GPU_PROBE_H
#define TFPROV_GPU_PROBE_H

#include <stddef.h>

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

/* Extracts the driver version from /proc/driver/nvidia/version text. 0, -ENOENT
 * (no version in it) or -ERANGE (ver is too small). */
int gpu_probe_parse_procfs(const char *text, char *ver, size_t n);
/* 1 when /proc/version text names Microsoft's kernel (WSL). */
int gpu_probe_is_wsl_kernel(const char *proc_version);

#endif
