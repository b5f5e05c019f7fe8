/* cudaload.c — dlopen the CUDA runtime, cuBLAS, NCCL and the driver on
 * first use (see cudaload.h). */
#include "shared/gpu/cudaload.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define CUDALOAD_STR_(x) #x
#define CUDALOAD_STR(x) CUDALOAD_STR_(x) /* after macro expansion: cublasCreate_v2 */

/* The sonames of the major versions this build was compiled against.
 * CUDART_VERSION (1000 * major + 10 * minor) is an expression, not a
 * literal: CMake passes the runtime's major as PSBENCH_CUDART_MAJOR, and
 * the assertion keeps the two in step. */
#ifndef PSBENCH_CUDART_MAJOR
#error "PSBENCH_CUDART_MAJOR (the CUDA runtime's major version) must be defined by the build"
#endif
_Static_assert(CUDART_VERSION / 1000 == PSBENCH_CUDART_MAJOR,
               "PSBENCH_CUDART_MAJOR differs from the CUDART_VERSION of cuda_runtime_api.h");
#define CUDALOAD_CUDART_SONAME "libcudart.so." CUDALOAD_STR(PSBENCH_CUDART_MAJOR)
#ifdef PSBENCH_HAVE_NCCL
#define CUDALOAD_NCCL_SONAME "libnccl.so." CUDALOAD_STR(NCCL_MAJOR)
#else
#define CUDALOAD_NCCL_SONAME "libnccl.so" /* never loaded: no nccl.h at build time */
#endif
#define CUDALOAD_CUBLAS_SONAME "libcublas.so." CUDALOAD_STR(CUBLAS_VER_MAJOR)
#define CUDALOAD_CUDRV_SONAME "libcuda.so.1"

/* One library: its soname, how to fill its table, and what loading gave. */
typedef struct cudaload_lib {
    const char *soname;
    pthread_once_t once;
    int (*resolve)(struct cudaload_lib *l, void *h); /* fills the table: 0, or -1 with why */
    int ok;
    char why[512]; /* the reason when not ok */
} cudaload_lib;

static cudart_api cudaload_cudart_table;
#ifdef PSBENCH_HAVE_NCCL
static nccl_api cudaload_nccl_table;
#endif
static cublas_api cudaload_cublas_table;
static cudrv_api cudaload_cudrv_table;

/* One symbol into its slot of a table. POSIX defines the conversion of
 * dlsym's object pointer to a function pointer; memcpy states it without
 * a cast between the two kinds of pointer. */
static int cudaload_sym(cudaload_lib *l, void *h, const char *name, void *slot, size_t size)
{
    dlerror();
    void *sym = dlsym(h, name);
    if (!sym) {
        snprintf(l->why, sizeof l->why, "%s lacks %s (older than this build needs?)", l->soname, name);
        return -1;
    }
    memcpy(slot, &sym, size);
    return 0;
}

#define CUDALOAD_RESOLVE(l, h, t, fn) cudaload_sym((l), (h), CUDALOAD_STR(fn), &(t)->fn, sizeof (t)->fn)

static int cudaload_resolve_cudart(cudaload_lib *l, void *h)
{
    cudart_api *t = &cudaload_cudart_table;
    t->soname = l->soname;
    return CUDALOAD_RESOLVE(l, h, t, cudaRuntimeGetVersion) || CUDALOAD_RESOLVE(l, h, t, cudaDriverGetVersion) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaGetDeviceCount) || CUDALOAD_RESOLVE(l, h, t, cudaSetDevice) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaGetErrorString) || CUDALOAD_RESOLVE(l, h, t, cudaMalloc) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaFree) || CUDALOAD_RESOLVE(l, h, t, cudaMemcpyAsync) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaStreamCreateWithFlags) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaStreamDestroy) || CUDALOAD_RESOLVE(l, h, t, cudaStreamQuery) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaStreamSynchronize) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaGetDeviceProperties) || CUDALOAD_RESOLVE(l, h, t, cudaMemGetInfo) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaHostAlloc) || CUDALOAD_RESOLVE(l, h, t, cudaFreeHost) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaMemsetAsync) || CUDALOAD_RESOLVE(l, h, t, cudaMallocAsync) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaFreeAsync) || CUDALOAD_RESOLVE(l, h, t, cudaDeviceGetDefaultMemPool) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaMemPoolSetAttribute) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaEventCreateWithFlags) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaEventRecord) || CUDALOAD_RESOLVE(l, h, t, cudaEventQuery) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaEventElapsedTime) || CUDALOAD_RESOLVE(l, h, t, cudaEventDestroy) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaLibraryLoadData) || CUDALOAD_RESOLVE(l, h, t, cudaLibraryUnload) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaLibraryGetKernel) || CUDALOAD_RESOLVE(l, h, t, cudaLaunchKernel) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaLaunchHostFunc) || CUDALOAD_RESOLVE(l, h, t, cudaGetLastError) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaIpcGetMemHandle) || CUDALOAD_RESOLVE(l, h, t, cudaIpcOpenMemHandle) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaIpcCloseMemHandle) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaIpcGetEventHandle) ||
                   CUDALOAD_RESOLVE(l, h, t, cudaIpcOpenEventHandle) || CUDALOAD_RESOLVE(l, h, t, cudaStreamWaitEvent)
               ? -1
               : 0;
}

#ifdef PSBENCH_HAVE_NCCL
static int cudaload_resolve_nccl(cudaload_lib *l, void *h)
{
    nccl_api *t = &cudaload_nccl_table;
    t->soname = l->soname;
    return CUDALOAD_RESOLVE(l, h, t, ncclGetVersion) || CUDALOAD_RESOLVE(l, h, t, ncclGetUniqueId) ||
                   CUDALOAD_RESOLVE(l, h, t, ncclCommInitRankConfig) || CUDALOAD_RESOLVE(l, h, t, ncclCommFinalize) ||
                   CUDALOAD_RESOLVE(l, h, t, ncclCommDestroy) || CUDALOAD_RESOLVE(l, h, t, ncclCommAbort) ||
                   CUDALOAD_RESOLVE(l, h, t, ncclCommGetAsyncError) ||
                   CUDALOAD_RESOLVE(l, h, t, ncclGetErrorString) || CUDALOAD_RESOLVE(l, h, t, ncclGetLastError) ||
                   CUDALOAD_RESOLVE(l, h, t, ncclAllReduce) || CUDALOAD_RESOLVE(l, h, t, ncclAllGather) ||
                   CUDALOAD_RESOLVE(l, h, t, ncclBroadcast) || CUDALOAD_RESOLVE(l, h, t, ncclGroupStart) ||
                   CUDALOAD_RESOLVE(l, h, t, ncclGroupEnd)
               ? -1
               : 0;
}
#endif

static int cudaload_resolve_cublas(cudaload_lib *l, void *h)
{
    cublas_api *t = &cudaload_cublas_table;
    t->soname = l->soname;
    return CUDALOAD_RESOLVE(l, h, t, cublasGetVersion) || CUDALOAD_RESOLVE(l, h, t, cublasCreate) ||
                   CUDALOAD_RESOLVE(l, h, t, cublasDestroy) || CUDALOAD_RESOLVE(l, h, t, cublasSetStream) ||
                   CUDALOAD_RESOLVE(l, h, t, cublasSgemm) || CUDALOAD_RESOLVE(l, h, t, cublasSscal)
               ? -1
               : 0;
}

/* The driver's symbols by the names cuda.h gives them (its macros pick
 * the versioned entry points of the ABI this build was compiled for:
 * cuMemGetAddressRange_v2). */
static int cudaload_resolve_cudrv(cudaload_lib *l, void *h)
{
    cudrv_api *t = &cudaload_cudrv_table;
    t->soname = l->soname;
    return CUDALOAD_RESOLVE(l, h, t, cuMemGetAddressRange) ? -1 : 0;
}

enum { CUDALOAD_CUDART = 0, CUDALOAD_NCCL, CUDALOAD_CUBLAS, CUDALOAD_CUDRV };
static cudaload_lib cudaload_libs[] = {
    [CUDALOAD_CUDART] = {CUDALOAD_CUDART_SONAME, PTHREAD_ONCE_INIT, cudaload_resolve_cudart, 0, ""},
#ifdef PSBENCH_HAVE_NCCL
    [CUDALOAD_NCCL] = {CUDALOAD_NCCL_SONAME, PTHREAD_ONCE_INIT, cudaload_resolve_nccl, 0, ""},
#endif
    [CUDALOAD_CUBLAS] = {CUDALOAD_CUBLAS_SONAME, PTHREAD_ONCE_INIT, cudaload_resolve_cublas, 0, ""},
    [CUDALOAD_CUDRV] = {CUDALOAD_CUDRV_SONAME, PTHREAD_ONCE_INIT, cudaload_resolve_cudrv, 0, ""},
};

/* dlopen's reason, shortened to what a user needs: "not found" when the
 * file is nowhere the loader looks, else the loader's own words (a
 * dependency missing, a wrong architecture). */
static void cudaload_open_failed(cudaload_lib *l, const char *dlerr)
{
    if (!dlerr)
        dlerr = "unknown error";
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s: cannot open shared object file", l->soname);
    if (strncmp(dlerr, prefix, strlen(prefix)) == 0)
        snprintf(l->why, sizeof l->why, "%s not found", l->soname);
    else
        snprintf(l->why, sizeof l->why, "%s cannot be loaded: %s", l->soname, dlerr);
}

static void cudaload_load(cudaload_lib *l)
{
    dlerror();
    /* RTLD_LOCAL: the symbols stay in our table, out of the process's
     * namespace, where another copy of CUDA (a user's library) may be. */
    void *h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        cudaload_open_failed(l, dlerror());
        return;
    }
    if (l->resolve(l, h) != 0) {
        dlclose(h);
        return;
    }
    l->ok = 1;
}

static void cudaload_once_cudart(void) { cudaload_load(&cudaload_libs[CUDALOAD_CUDART]); }
#ifdef PSBENCH_HAVE_NCCL
static void cudaload_once_nccl(void) { cudaload_load(&cudaload_libs[CUDALOAD_NCCL]); }
#endif
static void cudaload_once_cublas(void) { cudaload_load(&cudaload_libs[CUDALOAD_CUBLAS]); }
static void cudaload_once_cudrv(void) { cudaload_load(&cudaload_libs[CUDALOAD_CUDRV]); }

/* Loads library `which` once; 1 when it is usable, else 0 with its reason. */
static int cudaload_ready(int which, void (*once_fn)(void), char *err, size_t errlen)
{
    cudaload_lib *l = &cudaload_libs[which];
    pthread_once(&l->once, once_fn);
    if (!l->ok && err && errlen)
        snprintf(err, errlen, "%s", l->why);
    return l->ok;
}

const cudart_api *cudaload_cudart(char *err, size_t errlen)
{
    return cudaload_ready(CUDALOAD_CUDART, cudaload_once_cudart, err, errlen) ? &cudaload_cudart_table : NULL;
}

/* NCCL and cuBLAS run on the CUDA runtime's devices and streams: the
 * runtime first, so that a host without it hears of the runtime, the
 * cause. */
#ifdef PSBENCH_HAVE_NCCL
const nccl_api *cudaload_nccl(char *err, size_t errlen)
{
    if (!cudaload_cudart(err, errlen))
        return NULL;
    return cudaload_ready(CUDALOAD_NCCL, cudaload_once_nccl, err, errlen) ? &cudaload_nccl_table : NULL;
}
#endif

const cublas_api *cudaload_cublas(char *err, size_t errlen)
{
    if (!cudaload_cudart(err, errlen))
        return NULL;
    return cudaload_ready(CUDALOAD_CUBLAS, cudaload_once_cublas, err, errlen) ? &cudaload_cublas_table : NULL;
}

/* The driver on its own: the runtime loads the same libcuda.so.1 (dlopen
 * hands back the one already loaded), and a host without the runtime has
 * no use for it. */
const cudrv_api *cudaload_cudrv(char *err, size_t errlen)
{
    return cudaload_ready(CUDALOAD_CUDRV, cudaload_once_cudrv, err, errlen) ? &cudaload_cudrv_table : NULL;
}

const char *cudaload_cudart_soname(void) { return CUDALOAD_CUDART_SONAME; }
const char *cudaload_cudrv_soname(void) { return CUDALOAD_CUDRV_SONAME; }
#ifdef PSBENCH_HAVE_NCCL
const char *cudaload_nccl_soname(void) { return CUDALOAD_NCCL_SONAME; }
#endif
const char *cudaload_cublas_soname(void) { return CUDALOAD_CUBLAS_SONAME; }
