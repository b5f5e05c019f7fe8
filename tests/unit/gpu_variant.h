/* gpu_variant.h — the prelude of a unit test that also runs on a real GPU
 * as its own ctest entry (PSBENCH_COMPUTE=cuda, label gpu): whether this
 * run is that variant, and whether a GPU answers for it. */
#ifndef PSBENCH_TESTS_GPU_VARIANT_H
#define PSBENCH_TESTS_GPU_VARIANT_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/gpu.h"

/* The exit code ctest reads as "skipped" (SKIP_RETURN_CODE 77). */
#define GPU_VARIANT_SKIP 77

/* False: the host variant (fake GPU, staged device). True: the GPU
 * variant; then *ready says whether GPU 0 answers (if not, the reason is
 * printed and the test returns GPU_VARIANT_SKIP). */
static inline bool gpu_variant(bool *ready)
{
    const char *which = getenv("PSBENCH_COMPUTE");
    if (!which || strcmp(which, "cuda") != 0)
        return false;
    char why[512];
    *ready = gpu_probe_device(0, why, sizeof why) == 0;
    if (!*ready)
        printf("skipped: %s\n", why);
    return true;
}

#endif
