/*
 * gpu_int.h - what only the gpu room (and its white-box tests) calls: the
 * conv probe's defaults and CPU reference, the driver version parser.
 */
#ifndef TFPROV_GPU_INT_H
#define TFPROV_GPU_INT_H

#include "gpu.h"

#include <stddef.h>

/* N=8, C=3, 256x256, K=32, 3x3, 10 iterations, tol 1e-3, 120 s. */
void convprobe_params_default(struct convprobe_params *p);

/* The CPU reference: y[n][k][oh][ow] = sum_c,r,s x[n][c][oh+r][ow+s] * f[k][c][r][s]. */
void convprobe_reference(const struct convprobe_params *p, const float *x, const float *f,
                         float *y);

/* Extracts the driver version from /proc/driver/nvidia/version text. 0, -ENOENT
 * (no version in it) or -ERANGE (ver is too small). */
int gpu_probe_parse_procfs(const char *text, char *ver, size_t n);

#endif
