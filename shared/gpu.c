/* gpu.c — the GPU side's answers in every build (see gpu.h). */
#include "shared/gpu.h"

#include <stdio.h>

#ifdef PSBENCH_HAVE_CUDA
#include "shared/cudaload.h"

bool gpu_built(void) { return true; }

int gpu_probe_device(int index, char *err, size_t errlen)
{
    char why[256]; /* a soname and the loader's words */
    const cudart_api *rt = cudaload_cudart(why, sizeof why);
    if (!rt) {
        snprintf(err, errlen, "%s (install the CUDA runtime or use --device cpu)", why);
        return -1;
    }
    int n = 0;
    cudaError_t ce = rt->cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n == 0) {
        snprintf(err, errlen, "no CUDA device answers (cudaGetDeviceCount: %s; use --device cpu)",
                 ce != cudaSuccess ? rt->cudaGetErrorString(ce) : "0 devices");
        return -1;
    }
    if (index < 0 || index >= n) {
        snprintf(err, errlen, "CUDA device %d does not exist (this host has %d, numbered from 0)", index, n);
        return -1;
    }
    return 0;
}

#else

bool gpu_built(void) { return false; }

int gpu_probe_device(int index, char *err, size_t errlen)
{
    (void)index;
    snprintf(err, errlen, "this build has no CUDA (the CUDA toolkit was not found when it was built; use "
                          "--device cpu)");
    return -1;
}

#endif

int gpu_check_device(const char *spec, int index, char *err, size_t errlen)
{
    char why[400];
    if (gpu_probe_device(index, why, sizeof why) == 0)
        return 0;
    snprintf(err, errlen, "--device %s: %s", spec, why);
    return -1;
}
