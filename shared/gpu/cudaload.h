/* cudaload.h — the CUDA runtime, cuBLAS, NCCL and the few driver calls the
 * runtime lacks, loaded when first used.
 *
 * CUDA is optional: psbench's binaries must start, and run CPU jobs, on
 * hosts that have none of it. So a build made with the CUDA toolkit links
 * none of these libraries. Each is dlopen'ed by its versioned soname — the
 * major version this build was compiled against (libcudart.so.13,
 * libcublas.so.13, libnccl.so.2; the driver's libcuda.so.1, whose soname
 * has not changed since CUDA 1) — the first time something asks for it,
 * and its symbols are resolved once into a table of function pointers named
 * as the library names them (rt->cudaMalloc, nc->ncclAllReduce). A library
 * or a symbol that is missing gives NULL and a one-line reason naming the
 * soname ("libcudart.so.13 not found"); the caller, which knows what the
 * user asked for, turns it into the user's error ("--device cuda:
 * libcudart.so.13 not found (install the CUDA runtime or use --device
 * cpu)").
 *
 * Thread-safe: each library is loaded at most once (pthread_once), the
 * tables are read-only afterwards and live until the process exits (never
 * dlclose'd: the CUDA runtime and NCCL keep threads of their own).
 *
 * Compiled only where CMake found the toolkit (PSBENCH_HAVE_CUDA): the
 * types come from the toolkit's headers. Where it was not found, nothing of
 * CUDA is built and the callers say so (e.g. coll_nccl_none.c).
 */
#ifndef PSBENCH_CUDALOAD_H
#define PSBENCH_CUDALOAD_H

#include <stddef.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#ifdef PSBENCH_HAVE_NCCL
#include <nccl.h>
#endif

/* A field for the library function `fn`, of its declared type. Functions
 * the headers rename by macro (cublasCreate → cublasCreate_v2) get the
 * name the library exports. */
#define CUDALOAD_FN(fn) __typeof__(fn) *fn

/* The CUDA runtime (libcudart). */
typedef struct cudart_api {
    const char *soname;
    CUDALOAD_FN(cudaRuntimeGetVersion);
    CUDALOAD_FN(cudaDriverGetVersion);
    CUDALOAD_FN(cudaGetDeviceCount);
    CUDALOAD_FN(cudaSetDevice);
    CUDALOAD_FN(cudaGetErrorString);
    CUDALOAD_FN(cudaMalloc);
    CUDALOAD_FN(cudaFree);
    CUDALOAD_FN(cudaMemcpyAsync);
    CUDALOAD_FN(cudaStreamCreateWithFlags);
    CUDALOAD_FN(cudaStreamDestroy);
    CUDALOAD_FN(cudaStreamQuery);
    /* The server's cuda device: streams and events, pinned memory, the
     * kernels' fatbin loaded at run time (no linked runtime to register
     * it), host callbacks. */
    CUDALOAD_FN(cudaStreamSynchronize);
    CUDALOAD_FN(cudaGetDeviceProperties);
    CUDALOAD_FN(cudaMemGetInfo);
    CUDALOAD_FN(cudaHostAlloc);
    CUDALOAD_FN(cudaFreeHost);
    CUDALOAD_FN(cudaMemsetAsync);
    /* Stream-ordered device memory (CUDA 11.2+): no synchronisation on
     * the server's data path. */
    CUDALOAD_FN(cudaMallocAsync);
    CUDALOAD_FN(cudaFreeAsync);
    CUDALOAD_FN(cudaDeviceGetDefaultMemPool);
    CUDALOAD_FN(cudaMemPoolSetAttribute);
    CUDALOAD_FN(cudaEventCreateWithFlags);
    CUDALOAD_FN(cudaEventRecord);
    CUDALOAD_FN(cudaEventQuery);
    CUDALOAD_FN(cudaEventElapsedTime);
    CUDALOAD_FN(cudaEventDestroy);
    CUDALOAD_FN(cudaLibraryLoadData);
    CUDALOAD_FN(cudaLibraryUnload);
    CUDALOAD_FN(cudaLibraryGetKernel);
    CUDALOAD_FN(cudaLaunchKernel);
    CUDALOAD_FN(cudaLaunchHostFunc);
    CUDALOAD_FN(cudaGetLastError);
    /* CUDA IPC between roles on one host: device memory and events
     * exported by handle, opened by the peer; a stream that waits for an
     * event (local or opened) on the GPU, not on the host. */
    CUDALOAD_FN(cudaIpcGetMemHandle);
    CUDALOAD_FN(cudaIpcOpenMemHandle);
    CUDALOAD_FN(cudaIpcCloseMemHandle);
    CUDALOAD_FN(cudaIpcGetEventHandle);
    CUDALOAD_FN(cudaIpcOpenEventHandle);
    CUDALOAD_FN(cudaStreamWaitEvent);
} cudart_api;

/* The CUDA driver (libcuda, the NVIDIA driver's: the runtime runs on it,
 * so every host with a GPU has it), for what the runtime does not say.
 * Its calls act on the context the runtime made current (the device's
 * primary context). */
typedef struct cudrv_api {
    const char *soname;
    /* The allocation an address lies in (base, size): an IPC handle's
     * opened memory checked against the size its peer claims
     * (shared/gpu/cugpu_cuda.c). cuda.h names it cuMemGetAddressRange_v2. */
    CUDALOAD_FN(cuMemGetAddressRange);
} cudrv_api;

#ifdef PSBENCH_HAVE_NCCL
/* NCCL (libnccl): where the build found its header (nccl.h is not part
 * of every CUDA toolkit; without it the CUDA paths build, NCCL does not). */
typedef struct nccl_api {
    const char *soname;
    CUDALOAD_FN(ncclGetVersion);
    CUDALOAD_FN(ncclGetUniqueId);
    CUDALOAD_FN(ncclCommInitRankConfig);
    CUDALOAD_FN(ncclCommFinalize);
    CUDALOAD_FN(ncclCommDestroy);
    CUDALOAD_FN(ncclCommAbort);
    CUDALOAD_FN(ncclCommGetAsyncError);
    CUDALOAD_FN(ncclGetErrorString);
    CUDALOAD_FN(ncclGetLastError);
    CUDALOAD_FN(ncclAllReduce);
    CUDALOAD_FN(ncclAllGather);
    CUDALOAD_FN(ncclBroadcast);
    CUDALOAD_FN(ncclGroupStart);
    CUDALOAD_FN(ncclGroupEnd);
} nccl_api;
#endif

/* cuBLAS (libcublas): the dense products of the CUDA trainers, the scale
 * of their NCCL means. */
typedef struct cublas_api {
    const char *soname;
    CUDALOAD_FN(cublasGetVersion);
    CUDALOAD_FN(cublasCreate);
    CUDALOAD_FN(cublasDestroy);
    CUDALOAD_FN(cublasSetStream);
    CUDALOAD_FN(cublasSgemm);
    /* The mean of an NCCL allreduce on device buffers: the sum times
     * 1/N, one multiply per element as on the host (trainer/coll_nccl.c). */
    CUDALOAD_FN(cublasSscal);
} cublas_api;

/* The table of each library, loaded on the first call: NULL with the
 * reason in err (when err is not NULL) where the library or one of its
 * symbols is missing. Later calls return the same table, or fail with the
 * same reason, at once. */
const cudart_api *cudaload_cudart(char *err, size_t errlen);
#ifdef PSBENCH_HAVE_NCCL
const nccl_api *cudaload_nccl(char *err, size_t errlen);
const char *cudaload_nccl_soname(void);
#endif
const cublas_api *cudaload_cublas(char *err, size_t errlen);
/* The driver's table (needs no runtime: loaded on its own). */
const cudrv_api *cudaload_cudrv(char *err, size_t errlen);

/* The sonames this build loads ("libcudart.so.13", ...). */
const char *cudaload_cudart_soname(void);
const char *cudaload_cudrv_soname(void);
const char *cudaload_cublas_soname(void);

#endif
