/* mock_cuda.c — a stand-in for the CUDA runtime and driver (one library,
 * built as libcudart.so.<major>, with libcuda.so.1 a link to it): enough of
 * both for shared/gpu/cugpu_cuda.c to make a GPU, allocate, export and open
 * IPC memory, on a machine without a GPU or a driver
 * (tests/unit/shared/test_cugpu_mock.c).
 *
 * Every symbol shared/gpu/cudaload.c resolves is here, with the toolkit's own
 * declarations (cuda_runtime_api.h, cuda.h), so the compiler holds each to
 * the real signature. "Device memory" is host memory; an IPC handle holds
 * the allocation's base and size; opening one returns that base (the real
 * runtime refuses a handle of its own process; the stand-in opens it, so
 * one process can play both peers). cuMemGetAddressRange answers from the
 * table of allocations, as the driver answers from its own: the size of
 * the object, never what a caller claims. Calls the tests do not need
 * fail with cudaErrorNotSupported.
 *
 * One library for both: the loader opens a file once however it is named
 * (same inode), so the runtime's allocations are the driver's.
 *
 * The test steers it through the mock_cuda_* functions (found with dlsym):
 * opens and closes counted, an open that answers a pointer inside the
 * allocation, a range query that fails.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MOCK_EXPORT __attribute__((visibility("default")))
#define MOCK_MAX_ALLOCS 64
#define MOCK_HANDLE_MAGIC 0x4b434f4d42535050ull /* "PPSBMOCK" */

typedef struct mock_alloc {
    uint8_t *base; /* NULL: a free slot */
    size_t size;
} mock_alloc;

/* One thread calls in (the test's); no locking. */
static mock_alloc mock_allocs[MOCK_MAX_ALLOCS];
static int mock_opens, mock_closes;
static size_t mock_open_offset;  /* added to the pointer an open answers */
static int mock_range_fails;     /* cuMemGetAddressRange answers an error */

typedef struct mock_handle {
    uint64_t magic;
    uint64_t base; /* the allocation's address */
} mock_handle;

_Static_assert(sizeof(mock_handle) <= sizeof(cudaIpcMemHandle_t), "the stand-in's handle fits CUDA's");

/* ---- the test's levers -------------------------------------------------------- */

MOCK_EXPORT int mock_cuda_is_mock(void) { return 1; }
MOCK_EXPORT int mock_cuda_opens(void) { return mock_opens; }
MOCK_EXPORT int mock_cuda_closes(void) { return mock_closes; }
MOCK_EXPORT void mock_cuda_set_open_offset(size_t off) { mock_open_offset = off; }
MOCK_EXPORT void mock_cuda_set_range_fails(int fails) { mock_range_fails = fails; }

static mock_alloc *mock_find(uintptr_t p)
{
    for (int i = 0; i < MOCK_MAX_ALLOCS; i++) {
        mock_alloc *a = &mock_allocs[i];
        if (a->base && p >= (uintptr_t)a->base && p - (uintptr_t)a->base < a->size)
            return a;
    }
    return NULL;
}

/* ---- the runtime: what cugpu_cuda.c uses here ------------------------------------ */

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "stand-in CUDA error"; }

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device != 0)
        return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    strcpy(prop->name, "psbench stand-in GPU");
    memset(prop->uuid.bytes, 0x5a, sizeof prop->uuid.bytes);
    prop->totalGlobalMem = (size_t)1 << 30;
    prop->multiProcessorCount = 1;
    prop->major = 9;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
    for (int i = 0; i < MOCK_MAX_ALLOCS; i++)
        if (!mock_allocs[i].base) {
            if (!(mock_allocs[i].base = calloc(1, size)))
                return cudaErrorMemoryAllocation;
            mock_allocs[i].size = size;
            *p = mock_allocs[i].base;
            return cudaSuccess;
        }
    return cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
    mock_alloc *a = mock_find((uintptr_t)p);
    if (!a || a->base != p)
        return cudaErrorInvalidValue;
    free(a->base);
    *a = (mock_alloc){0};
    return cudaSuccess;
}

/* No pools: cugpu_cuda.c falls back to the plain calls, as on an old
 * driver. */
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    (void)pool;
    (void)device;
    return cudaErrorNotSupported;
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, enum cudaJitOption *jo, void **jv,
                                unsigned int nj, enum cudaLibraryOption *lo, void **lv, unsigned int nl)
{
    (void)code, (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    static int token;
    *lib = (cudaLibrary_t)(void *)&token;
    return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t lib)
{
    (void)lib;
    return cudaSuccess;
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name)
{
    (void)lib, (void)name;
    static int token;
    *k = (cudaKernel_t)(void *)&token;
    return cudaSuccess;
}

/* An allocation's base only, as CUDA exports the allocation, not a pointer
 * into it. */
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    mock_alloc *a = mock_find((uintptr_t)p);
    if (!a || a->base != p)
        return cudaErrorInvalidValue;
    mock_handle mh = {MOCK_HANDLE_MAGIC, (uint64_t)(uintptr_t)a->base};
    memset(h, 0, sizeof *h);
    memcpy(h, &mh, sizeof mh);
    return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags)
{
    (void)flags;
    mock_handle mh;
    memcpy(&mh, &h, sizeof mh);
    mock_alloc *a = mh.magic == MOCK_HANDLE_MAGIC ? mock_find((uintptr_t)mh.base) : NULL;
    if (!a || (uintptr_t)a->base != mh.base)
        return cudaErrorInvalidResourceHandle;
    mock_opens++;
    *p = a->base + (mock_open_offset < a->size ? mock_open_offset : 0);
    return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
    if (!mock_find((uintptr_t)p))
        return cudaErrorInvalidValue;
    mock_closes++;
    return cudaSuccess;
}

/* ---- the driver ------------------------------------------------------------------ */

CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    mock_alloc *a = mock_find((uintptr_t)p);
    if (mock_range_fails || !a)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = (CUdeviceptr)(uintptr_t)a->base;
    if (size)
        *size = a->size;
    return CUDA_SUCCESS;
}

/* ---- the rest of what shared/gpu/cudaload.c resolves: not needed here --------------- */

#define MOCK_UNSUPPORTED return cudaErrorNotSupported

cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    (void)d, (void)s, (void)n, (void)k, (void)st;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f)
{
    (void)s, (void)f;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaStreamQuery(cudaStream_t s)
{
    (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t)
{
    (void)f, (void)t;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int f)
{
    (void)p, (void)n, (void)f;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaFreeHost(void *p)
{
    (void)p;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    (void)p, (void)v, (void)n, (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    (void)p, (void)n, (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    (void)p, (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v)
{
    (void)p, (void)a, (void)v;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
    (void)e, (void)f;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e, (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    (void)ms, (void)a, (void)b;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    (void)e;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t sm, cudaStream_t s)
{
    (void)f, (void)g, (void)b, (void)a, (void)sm, (void)s;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *u)
{
    (void)s, (void)fn, (void)u;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t e)
{
    (void)h, (void)e;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *e, cudaIpcEventHandle_t h)
{
    (void)e, (void)h;
    MOCK_UNSUPPORTED;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)
{
    (void)s, (void)e, (void)f;
    MOCK_UNSUPPORTED;
}
