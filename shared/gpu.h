/* gpu.h — what psbench-server and psbench-trainer ask of the GPU side, in
 * every build: with CUDA (the libraries loaded on first use,
 * shared/gpu/cudaload.h) or without it (every answer says so). */
#ifndef PSBENCH_GPU_H
#define PSBENCH_GPU_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* This build has the CUDA paths (CMake found the toolkit). */
bool gpu_built(void);

/* Whether --device cuda:N can run here: 0 when the CUDA runtime loads and
 * GPU N answers; else -1 with the reason, e.g. "libcudart.so.13 not found
 * (install the CUDA runtime or use --device cpu)", "no CUDA device answers
 * (cudaGetDeviceCount: ...; use --device cpu)", "CUDA device 2 does not
 * exist (this host has 1, numbered from 0)", or, in a build without CUDA,
 * "this build has no CUDA (...)". */
int gpu_probe_device(int index, char *err, size_t errlen);

/* GPU `index` (which gpu_probe_device accepted) in words, for start lines
 * ("NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90"), and, when json is not NULL,
 * as an object for results and the API: name, memory_bytes,
 * compute_capability ("9.0"), multiprocessors, driver and runtime
 * versions ("13.0"). 0, or -1 with the reason. */
int gpu_describe(int index, char *line, size_t linelen, json_t **json, char *err, size_t errlen);

/* How many GPUs answer here: >= 1, or -1 with the reason (as
 * gpu_probe_device's). */
int gpu_count(char *err, size_t errlen);

/* The NCCL library's version ("2.28.9") in buf: 0, or -1 with the reason
 * (no NCCL in this build, or libnccl not found). */
int gpu_nccl_version(char *buf, size_t len, char *err, size_t errlen);

/* gpu_probe_device for a --device SPEC (cuda or cuda:N, GPU `index`): 0,
 * or -1 with "--device SPEC: <the reason>" in err. */
int gpu_check_device(const char *spec, int index, char *err, size_t errlen);

#endif
