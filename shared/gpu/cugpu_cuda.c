/* cugpu_cuda.c — cugpu.h on a real GPU: the CUDA runtime through
 * shared/gpu/cudaload.h (nothing linked), a role's kernels from the fatbin its
 * build embedded (cugpu_kernels) loaded once with cudaLibraryLoadData and
 * launched by name with cudaLaunchKernel. One driver call the runtime
 * lacks (cuMemGetAddressRange: an opened IPC allocation's size) comes from
 * the driver's table, loaded the same way.
 *
 * Every call comes from one thread (the server's reactor), on which the
 * GPU is made current once, here. Streams are non-blocking (no implicit
 * synchronisation with the legacy default stream); events are created
 * for timing only when asked (cudaEventDefault: the device's method
 * metrics are GPU time between two of them).
 */
#include "shared/gpu/cugpu.h"
#include "shared/gpu/cudaload.h"
#include "shared/gpu.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_gpu {
    cugpu base;
    const cudart_api *rt;
    const cudrv_api *drv; /* the driver: what the runtime does not say */
    cudaLibrary_t lib;
    cudaKernel_t *kernels; /* by the index in cugpu_kernels.table (NULL: a library row) */
    int sms;        /* streaming multiprocessors: the grids' size */
    bool pools;     /* stream-ordered allocation (the default pool) works */
} cuda_gpu;

static int cg_failed(cugpu *g, const char *call, cudaError_t e)
{
    const cudart_api *rt = ((cuda_gpu *)g)->rt;
    snprintf(g->err, sizeof g->err, "%s on GPU %d: %s", call, g->device, rt->cudaGetErrorString(e));
    return -1;
}

static devmem cg_dev_alloc(cugpu *g, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaMalloc", e);
        return devmem_none();
    }
    return devmem_of(p);
}

static void cg_dev_free(cugpu *g, devmem p)
{
    if (!devmem_is_none(p))
        ((cuda_gpu *)g)->rt->cudaFree(p.p);
}

/* Stream-ordered: cudaMallocAsync and cudaFreeAsync from the device's
 * default pool, which keeps what is freed (its release threshold is set to
 * the maximum in cugpu_cuda_new) instead of returning it to the driver at
 * the next synchronisation. Where pools are not supported (an old driver),
 * the plain calls, which may synchronise. */
static devmem cg_dev_alloc_async(cugpu *g, cugpu_stream *s, size_t bytes)
{
    cuda_gpu *cg = (cuda_gpu *)g;
    if (!cg->pools)
        return cg_dev_alloc(g, bytes);
    void *p = NULL;
    cudaError_t e = cg->rt->cudaMallocAsync(&p, bytes ? bytes : 1, (cudaStream_t)(void *)s);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaMallocAsync", e);
        return devmem_none();
    }
    return devmem_of(p);
}

static void cg_dev_free_async(cugpu *g, cugpu_stream *s, devmem p)
{
    cuda_gpu *cg = (cuda_gpu *)g;
    if (devmem_is_none(p))
        return;
    if (!cg->pools)
        cg->rt->cudaFree(p.p);
    else
        cg->rt->cudaFreeAsync(p.p, (cudaStream_t)(void *)s);
}

static void *cg_host_alloc(cugpu *g, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaHostAlloc", e);
        return NULL;
    }
    return p;
}

static void cg_host_free(cugpu *g, void *p)
{
    if (p)
        ((cuda_gpu *)g)->rt->cudaFreeHost(p);
}

static cugpu_stream *cg_stream_new(cugpu *g)
{
    cudaStream_t s = NULL;
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaStreamCreateWithFlags", e);
        return NULL;
    }
    return (cugpu_stream *)s;
}

static void cg_stream_free(cugpu *g, cugpu_stream *s)
{
    if (!s)
        return;
    const cudart_api *rt = ((cuda_gpu *)g)->rt;
    rt->cudaStreamSynchronize((cudaStream_t)s);
    rt->cudaStreamDestroy((cudaStream_t)s);
}

/* The three directions' one call: each entry below says which side is
 * device memory, cudaMemcpyAsync takes them as raw addresses. */
static int cg_copy(cugpu *g, cugpu_stream *s, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaMemcpyAsync(dst, src, n, kind, (cudaStream_t)s);
    return e == cudaSuccess ? 0 : cg_failed(g, "cudaMemcpyAsync", e);
}

static int cg_copy_h2d(cugpu *g, cugpu_stream *s, devmem dst, const void *src, size_t n)
{
    return cg_copy(g, s, dst.p, src, n, cudaMemcpyHostToDevice);
}

static int cg_copy_d2h(cugpu *g, cugpu_stream *s, void *dst, devmem src, size_t n)
{
    return cg_copy(g, s, dst, src.p, n, cudaMemcpyDeviceToHost);
}

static int cg_copy_d2d(cugpu *g, cugpu_stream *s, devmem dst, devmem src, size_t n)
{
    return cg_copy(g, s, dst.p, src.p, n, cudaMemcpyDeviceToDevice);
}

/* Blocks of 256 threads, enough to cover `work` items, at most 8 per SM
 * (the kernels loop over the rest: grid-stride). */
static unsigned cg_blocks(const cuda_gpu *cg, size_t work)
{
    size_t b = (work + 255) / 256, cap = (size_t)cg->sms * 8;
    return (unsigned)(b == 0 ? 1 : b < cap ? b : cap);
}

static int cg_launch(cugpu *g, cugpu_stream *s, const void *l)
{
    cuda_gpu *cg = (cuda_gpu *)g;
    const cugpu_kernels *ks = g->kernels;
    int k = cugpu_launch_kernel(l);
    if (k < 0 || k >= ks->count) {
        snprintf(g->err, sizeof g->err, "unknown kernel %d", k);
        return -1;
    }
    if (!ks->table[k].name) /* a library call */
        return ks->library(l, (void *)s, g->err, sizeof g->err) < 0 ? -1 : 0;
    void *args[CUGPU_MAX_ARGS];
    size_t work = ks->table[k].args(l, args);
    dim3 grid = {cg_blocks(cg, work), 1, 1}, block = {256, 1, 1};
    cudaError_t e = cg->rt->cudaLaunchKernel((const void *)cg->kernels[k], grid, block, args, 0, (cudaStream_t)s);
    return e == cudaSuccess ? 0 : cg_failed(g, "cudaLaunchKernel", e);
}

static int cg_host_fn(cugpu *g, cugpu_stream *s, void (*fn)(void *), void *arg)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaLaunchHostFunc((cudaStream_t)s, fn, arg);
    return e == cudaSuccess ? 0 : cg_failed(g, "cudaLaunchHostFunc", e);
}

static cugpu_event *cg_event_new(cugpu *g)
{
    cudaEvent_t ev = NULL;
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaEventCreateWithFlags(&ev, cudaEventDefault);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaEventCreateWithFlags", e);
        return NULL;
    }
    return (cugpu_event *)ev;
}

static void cg_event_free(cugpu *g, cugpu_event *ev)
{
    if (ev)
        ((cuda_gpu *)g)->rt->cudaEventDestroy((cudaEvent_t)ev);
}

static int cg_event_record(cugpu *g, cugpu_stream *s, cugpu_event *ev)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)s);
    return e == cudaSuccess ? 0 : cg_failed(g, "cudaEventRecord", e);
}

static int cg_event_query(cugpu *g, cugpu_event *ev)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaSuccess)
        return 0;
    if (e == cudaErrorNotReady)
        return 1;
    return cg_failed(g, "cudaEventQuery", e);
}

static int cg_elapsed_ms(cugpu *g, cugpu_event *from, cugpu_event *to, float *ms)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaEventElapsedTime(ms, (cudaEvent_t)from, (cudaEvent_t)to);
    return e == cudaSuccess ? 0 : cg_failed(g, "cudaEventElapsedTime", e);
}

static int cg_stream_wait(cugpu *g, cugpu_stream *s, cugpu_event *ev)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)ev, 0);
    return e == cudaSuccess ? 0 : cg_failed(g, "cudaStreamWaitEvent", e);
}

/* ---- IPC: CUDA's handles are our bytes ------------------------------------------ */

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(cugpu_ipc_handle), "a CUDA IPC memory handle is 64 bytes");
_Static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(cugpu_ipc_handle), "a CUDA IPC event handle is 64 bytes");

/* cudaMalloc, never the stream-ordered pool: the default pool's memory
 * cannot be exported with cudaIpcGetMemHandle. */
static devmem cg_dev_alloc_ipc(cugpu *g, size_t bytes) { return cg_dev_alloc(g, bytes); }

static void cg_dev_free_ipc(cugpu *g, devmem p) { cg_dev_free(g, p); }

static int cg_ipc_export(cugpu *g, devmem base, cugpu_ipc_handle *h)
{
    cudaIpcMemHandle_t mh;
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaIpcGetMemHandle(&mh, base.p);
    if (e != cudaSuccess)
        return cg_failed(g, "cudaIpcGetMemHandle", e);
    memcpy(h->bytes, &mh, sizeof h->bytes);
    return 0;
}

/* `bytes` is the peer's word (a trainer's `segment`, up to --max-shm;
 * a server's answer): every offset the peer names later is checked against
 * it, so it is checked here against the allocation the handle opened
 * (cuMemGetAddressRange, the driver's: the runtime has no such call), and
 * the handle closed again when the allocation is smaller or the opened
 * pointer is not its start. */
static devmem cg_ipc_open(cugpu *g, const cugpu_ipc_handle *h, size_t bytes)
{
    cuda_gpu *cg = (cuda_gpu *)g;
    cudaIpcMemHandle_t mh;
    memcpy(&mh, h->bytes, sizeof mh);
    void *p = NULL;
    cudaError_t e = cg->rt->cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaIpcOpenMemHandle", e);
        return devmem_none();
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = cg->drv->cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS) {
        snprintf(g->err, sizeof g->err, "cuMemGetAddressRange of opened IPC memory on GPU %d: CUDA driver error %d",
                 g->device, (int)r);
        cg->rt->cudaIpcCloseMemHandle(p);
        return devmem_none();
    }
    if (cugpu_ipc_check_range(g, (uintptr_t)p, (uintptr_t)base, (uint64_t)size, (uint64_t)bytes) < 0) {
        cg->rt->cudaIpcCloseMemHandle(p);
        return devmem_none();
    }
    return devmem_of(p);
}

static void cg_ipc_close(cugpu *g, devmem p)
{
    if (!devmem_is_none(p))
        ((cuda_gpu *)g)->rt->cudaIpcCloseMemHandle(p.p);
}

/* Interprocess events must be made without timing. */
static cugpu_event *cg_event_new_ipc(cugpu *g)
{
    cudaEvent_t ev = NULL;
    cudaError_t e =
        ((cuda_gpu *)g)->rt->cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaEventCreateWithFlags(cudaEventInterprocess)", e);
        return NULL;
    }
    return (cugpu_event *)ev;
}

static int cg_event_export(cugpu *g, cugpu_event *ev, cugpu_ipc_handle *h)
{
    cudaIpcEventHandle_t eh;
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaIpcGetEventHandle(&eh, (cudaEvent_t)ev);
    if (e != cudaSuccess)
        return cg_failed(g, "cudaIpcGetEventHandle", e);
    memcpy(h->bytes, &eh, sizeof h->bytes);
    return 0;
}

static cugpu_event *cg_event_open(cugpu *g, const cugpu_ipc_handle *h)
{
    cudaIpcEventHandle_t eh;
    memcpy(&eh, h->bytes, sizeof eh);
    cudaEvent_t ev = NULL;
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaIpcOpenEventHandle(&ev, eh);
    if (e != cudaSuccess) {
        cg_failed(g, "cudaIpcOpenEventHandle", e);
        return NULL;
    }
    return (cugpu_event *)ev;
}

static int cg_query(cugpu *g, cugpu_stream *s)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaStreamQuery((cudaStream_t)s);
    if (e == cudaSuccess)
        return 0;
    if (e == cudaErrorNotReady)
        return 1;
    return cg_failed(g, "the GPU's stream", e);
}

static int cg_sync(cugpu *g, cugpu_stream *s)
{
    cudaError_t e = ((cuda_gpu *)g)->rt->cudaStreamSynchronize((cudaStream_t)s);
    return e == cudaSuccess ? 0 : cg_failed(g, "cudaStreamSynchronize", e);
}

static void cg_destroy(cugpu *g)
{
    cuda_gpu *cg = (cuda_gpu *)g;
    if (cg->lib)
        cg->rt->cudaLibraryUnload(cg->lib);
    free(cg->kernels);
    free(cg);
}

static const cugpu_ops cuda_ops = {
    .name = "cuda",
    .dev_alloc = cg_dev_alloc,
    .dev_free = cg_dev_free,
    .dev_alloc_async = cg_dev_alloc_async,
    .dev_free_async = cg_dev_free_async,
    .host_alloc = cg_host_alloc,
    .host_free = cg_host_free,
    .stream_new = cg_stream_new,
    .stream_free = cg_stream_free,
    .copy_h2d = cg_copy_h2d,
    .copy_d2h = cg_copy_d2h,
    .copy_d2d = cg_copy_d2d,
    .launch = cg_launch,
    .host_fn = cg_host_fn,
    .event_new = cg_event_new,
    .event_free = cg_event_free,
    .event_record = cg_event_record,
    .event_query = cg_event_query,
    .elapsed_ms = cg_elapsed_ms,
    .stream_wait = cg_stream_wait,
    .dev_alloc_ipc = cg_dev_alloc_ipc,
    .dev_free_ipc = cg_dev_free_ipc,
    .ipc_export = cg_ipc_export,
    .ipc_open = cg_ipc_open,
    .ipc_close = cg_ipc_close,
    .event_new_ipc = cg_event_new_ipc,
    .event_export = cg_event_export,
    .event_open = cg_event_open,
    .query = cg_query,
    .sync = cg_sync,
    .destroy = cg_destroy,
};

cugpu *cugpu_cuda_new(int device, const cugpu_kernels *k, char *err, size_t errlen)
{
    char name[sizeof ((cugpu *)0)->name];
    if (gpu_describe(device, name, sizeof name, NULL, err, errlen) < 0)
        return NULL;
    const cudart_api *rt = cudaload_cudart(NULL, 0); /* loaded: gpu_describe did */
    /* The driver, for the size of what an IPC handle opens: without it no
     * peer's claim could be checked, so no GPU is made at all. */
    char why[512];
    const cudrv_api *drv = cudaload_cudrv(why, sizeof why);
    if (!drv) {
        snprintf(err, errlen, "GPU %d: %s (the NVIDIA driver's library, beside the CUDA runtime)", device, why);
        return NULL;
    }
    cuda_gpu *cg = calloc(1, sizeof *cg);
    if (!cg) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cg->base.ops = &cuda_ops;
    cg->base.kernels = k;
    cg->base.device = device;
    cg->rt = rt;
    cg->drv = drv;
    snprintf(cg->base.name, sizeof cg->base.name, "%s", name);
    struct cudaDeviceProp prop;
    cudaError_t e;
    if ((e = rt->cudaSetDevice(device)) != cudaSuccess ||
        (e = rt->cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        snprintf(err, errlen, "GPU %d: %s", device, rt->cudaGetErrorString(e));
        free(cg);
        return NULL;
    }
    cg->sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(cg->base.uuid, sizeof cg->base.uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
             u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    cg->pools = rt->cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess &&
                rt->cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess;
    if (!cg->pools)
        rt->cudaGetLastError(); /* not sticky: clear it */
    if (!k->fatbin) {
        snprintf(err, errlen, "GPU %d: this build has no code for %s", device, k->what);
        cg_destroy(&cg->base);
        return NULL;
    }
    e = rt->cudaLibraryLoadData(&cg->lib, k->fatbin, NULL, NULL, 0, NULL, NULL, 0);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "GPU %d (%s): %s do not load (cudaLibraryLoadData: %s; this build has code for CUDA "
                 "architectures %s)", device, cg->base.name, k->what, rt->cudaGetErrorString(e), k->archs);
        cg->lib = NULL;
        cg_destroy(&cg->base);
        return NULL;
    }
    if (!(cg->kernels = calloc((size_t)k->count, sizeof *cg->kernels))) {
        snprintf(err, errlen, "out of memory");
        cg_destroy(&cg->base);
        return NULL;
    }
    for (int i = 0; i < k->count; i++)
        if (k->table[i].name &&
            (e = rt->cudaLibraryGetKernel(&cg->kernels[i], cg->lib, k->table[i].name)) != cudaSuccess) {
            snprintf(err, errlen, "GPU %d: kernel %s: %s", device, k->table[i].name, rt->cudaGetErrorString(e));
            cg_destroy(&cg->base);
            return NULL;
        }
    return &cg->base;
}
