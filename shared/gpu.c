/* gpu.c — the GPU side's answers in every build (see gpu.h). */
#include "shared/gpu.h"

#include <stdio.h>

#ifdef PSBENCH_HAVE_CUDA
#include "shared/gpu/cudaload.h"

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

int gpu_count(char *err, size_t errlen)
{
    if (gpu_probe_device(0, err, errlen) < 0)
        return -1;
    int n = 0;
    cudaload_cudart(NULL, 0)->cudaGetDeviceCount(&n);
    return n;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from the 16 bytes of a UUID. */
static void gpu_uuid_text(const unsigned char *u, char *buf, size_t len)
{
    snprintf(buf, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
             u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

int gpu_nccl_version(char *buf, size_t len, char *err, size_t errlen)
{
#ifdef PSBENCH_HAVE_NCCL
    char why[256];
    const nccl_api *nc = cudaload_nccl(why, sizeof why);
    int v = 0;
    if (!nc || nc->ncclGetVersion(&v) != ncclSuccess) {
        snprintf(err, errlen, "%s", nc ? "ncclGetVersion failed" : why);
        return -1;
    }
    /* 2.9 and later: 10000 * major + 100 * minor + patch; before, 1000 *. */
    if (v >= 10000)
        snprintf(buf, len, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
    else
        snprintf(buf, len, "%d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
    return 0;
#else
    (void)buf;
    (void)len;
    snprintf(err, errlen, "this build has no NCCL (nccl.h was not found when it was built)");
    return -1;
#endif
}

int gpu_describe(int index, char *line, size_t linelen, json_t **json, char *err, size_t errlen)
{
    if (gpu_probe_device(index, err, errlen) < 0)
        return -1;
    const cudart_api *rt = cudaload_cudart(NULL, 0);
    struct cudaDeviceProp prop;
    int driver = 0, runtime = 0;
    cudaError_t ce = rt->cudaGetDeviceProperties(&prop, index);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "GPU %d: cudaGetDeviceProperties: %s", index, rt->cudaGetErrorString(ce));
        return -1;
    }
    rt->cudaDriverGetVersion(&driver);
    rt->cudaRuntimeGetVersion(&runtime);
    snprintf(line, linelen, "%.100s, %.1f GiB, sm_%d%d", prop.name,
             (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024), prop.major, prop.minor);
    if (json) {
        char cc[16], drv[16], rtv[16];
        snprintf(cc, sizeof cc, "%d.%d", prop.major, prop.minor);
        snprintf(drv, sizeof drv, "%d.%d", driver / 1000, driver % 1000 / 10);
        snprintf(rtv, sizeof rtv, "%d.%d", runtime / 1000, runtime % 1000 / 10);
        char uuid[64];
        gpu_uuid_text((const unsigned char *)prop.uuid.bytes, uuid, sizeof uuid);
        *json = json_pack("{s:i, s:s, s:s, s:I, s:s, s:i, s:s, s:s}", "index", index, "name", prop.name, "uuid", uuid,
                          "memory_bytes", (json_int_t)prop.totalGlobalMem, "compute_capability", cc,
                          "multiprocessors", prop.multiProcessorCount, "driver", drv, "runtime", rtv);
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

int gpu_count(char *err, size_t errlen) { return gpu_probe_device(0, err, errlen); }

int gpu_nccl_version(char *buf, size_t len, char *err, size_t errlen)
{
    (void)buf;
    (void)len;
    snprintf(err, errlen, "this build has no CUDA");
    return -1;
}

int gpu_describe(int index, char *line, size_t linelen, json_t **json, char *err, size_t errlen)
{
    (void)line;
    (void)linelen;
    (void)json;
    return gpu_probe_device(index, err, errlen);
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
