/* coll_nccl.c — the nccl backend of coll.h: GPU collectives with NCCL and
 * the CUDA runtime, compiled where CMake finds both (PSBENCH_HAVE_NCCL;
 * coll_nccl_none.c stands in elsewhere).
 *
 * Rank 0 makes the unique id and sets it in the store under
 * `prefix`/nccl_id; the others get it. The communicator is non-blocking
 * (ncclConfig_t.blocking = 0): initialisation and every collective are
 * polled with ncclCommGetAsyncError and cudaStreamQuery up to the group's
 * timeout, and a timeout or an error aborts the communicator
 * (ncclCommAbort), so that a dead or silent peer gives -1, never a hang.
 * Host buffers given to coll.h are staged through one device buffer of the
 * group's (grown as needed) on the group's stream. A CUDA trainer's dense
 * buckets are not: coll_allreduce_mean_f32_device reduces its device
 * gradients in place, scales them with cuBLAS (cublasSscal: x = scale x,
 * one multiply per element, the host loop's bits) on the same stream, and
 * records the group's event; completion is that event, polled. With
 * --compress fp16|bf16, coll_allreduce_compress_device narrows the bucket
 * into the staging buffer with the trainer's kernel trk_narrow_mul (loaded
 * from its fatbin on first use), allreduces ncclFloat16 / ncclBfloat16 in
 * place there and widens the sum back into the bucket (trk_widen), all on
 * the group's stream, completion by the same event.
 * allgatherv is one ncclBroadcast per member with bytes to give, fused in a
 * ncclGroupStart/ncclGroupEnd.
 *
 * The CUDA runtime and NCCL are loaded on first use (shared/gpu/cudaload.h):
 * the trainer starts on hosts without them, and a group asked for there
 * fails with the soname that is missing.
 */
#include "trainer/coll_impl.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shared/gpu/cudaload.h"
#include "shared/log.h"
#include "trainer/cuda/kernels.h"

typedef struct nccl_group {
    const cudart_api *rt; /* the CUDA runtime and NCCL, loaded (shared/gpu/cudaload.h) */
    const nccl_api *nc;
    ncclComm_t comm;     /* NULL once aborted or destroyed */
    cudaStream_t stream; /* NULL until created */
    cudaEvent_t done;    /* recorded after a device allreduce; NULL until the first */
    const cublas_api *cb; /* cuBLAS and its handle on stream: the device means' scale; */
    cublasHandle_t blas;  /* NULL until the first device allreduce that scales */
    cudaLibrary_t lib;    /* the compression kernels (trainer/cuda/kernels.h); NULL until the first use */
    cudaKernel_t narrow_mul, widen;
    unsigned max_blocks; /* 8 per SM: the kernels loop over the rest */
    void *dbuf;          /* the device staging buffer (a compressed allreduce's narrow values) */
    size_t dcap;         /* its size in bytes */
    int device;
    double timeout_s;
} nccl_group;

static void nccl_pause(void)
{
    struct timespec ts = {0, 200 * 1000}; /* 0.2 ms between polls */
    nanosleep(&ts, NULL);
}

static void nccl_abort(nccl_group *g)
{
    if (g->comm) {
        g->nc->ncclCommAbort(g->comm);
        g->comm = NULL;
    }
}

/* An NCCL error `r` in `op`: the reason into err, the communicator aborted.
 * Returns -1. */
static int nccl_failed(nccl_group *g, const char *op, ncclResult_t r, char *err, size_t errlen)
{
    const char *last = g->comm ? g->nc->ncclGetLastError(g->comm) : NULL;
    char detail[COLL_ERR_MAX];
    if (last && *last)
        snprintf(detail, sizeof detail, "%s; %s", g->nc->ncclGetErrorString(r), last);
    else
        snprintf(detail, sizeof detail, "%s", g->nc->ncclGetErrorString(r));
    if (r == ncclRemoteError || r == ncclSystemError)
        errbuf_set(err, errlen, "nccl %s: connection to a peer was lost (%s)", op, detail);
    else
        errbuf_set(err, errlen, "nccl %s: %s", op, detail);
    nccl_abort(g);
    return -1;
}

static int nccl_cuda_failed(nccl_group *g, const char *op, const char *call, cudaError_t ce, char *err,
                            size_t errlen)
{
    errbuf_set(err, errlen, "nccl %s: %s: %s", op, call, g->rt->cudaGetErrorString(ce));
    nccl_abort(g);
    return -1;
}

static int nccl_timed_out(nccl_group *g, const char *op, char *err, size_t errlen)
{
    errbuf_set(err, errlen, "nccl %s: timed out after %g s (--rpc-timeout)", op, g->timeout_s);
    nccl_abort(g);
    return -1;
}

/* After an NCCL call returned `r`: waits while the communicator reports
 * ncclInProgress, up to `deadline`. 0, or -1 with err (aborted). */
static int nccl_settle(nccl_group *g, const char *op, ncclResult_t r, double deadline, char *err, size_t errlen)
{
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_failed(g, op, r, err, errlen);
    for (;;) {
        ncclResult_t state = ncclSuccess;
        r = g->nc->ncclCommGetAsyncError(g->comm, &state);
        if (r != ncclSuccess)
            return nccl_failed(g, op, r, err, errlen);
        if (state == ncclSuccess)
            return 0;
        if (state != ncclInProgress)
            return nccl_failed(g, op, state, err, errlen);
        if (coll_now() >= deadline)
            return nccl_timed_out(g, op, err, errlen);
        nccl_pause();
    }
}

/* Waits until the group's stream has done its work — or, given an event,
 * until the work before the event's record has (completion by event) —
 * watching the communicator for errors, up to `deadline`. */
static int nccl_wait(nccl_group *g, const char *op, cudaEvent_t ev, double deadline, char *err, size_t errlen)
{
    for (;;) {
        cudaError_t ce = ev ? g->rt->cudaEventQuery(ev) : g->rt->cudaStreamQuery(g->stream);
        if (ce == cudaSuccess)
            return 0;
        if (ce != cudaErrorNotReady)
            return nccl_cuda_failed(g, op, ev ? "cudaEventQuery" : "cudaStreamQuery", ce, err, errlen);
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = g->nc->ncclCommGetAsyncError(g->comm, &state);
        if (r != ncclSuccess)
            return nccl_failed(g, op, r, err, errlen);
        if (state != ncclSuccess && state != ncclInProgress)
            return nccl_failed(g, op, state, err, errlen);
        if (coll_now() >= deadline)
            return nccl_timed_out(g, op, err, errlen);
        nccl_pause();
    }
}

/* The calling thread on the group's device and a staging buffer of at
 * least `bytes`. */
static int nccl_enter(nccl_group *g, const char *op, size_t bytes, char *err, size_t errlen)
{
    cudaError_t ce = g->rt->cudaSetDevice(g->device);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaSetDevice", ce, err, errlen);
    if (bytes <= g->dcap)
        return 0;
    size_t cap = g->dcap <= SIZE_MAX / 2 && g->dcap * 2 > bytes ? g->dcap * 2 : bytes;
    if (g->dbuf) {
        g->rt->cudaFree(g->dbuf); /* the stream is idle between calls */
        g->dbuf = NULL;
        g->dcap = 0;
    }
    ce = g->rt->cudaMalloc(&g->dbuf, cap);
    if (ce != cudaSuccess) {
        g->dbuf = NULL;
        return nccl_cuda_failed(g, op, "cudaMalloc", ce, err, errlen);
    }
    g->dcap = cap;
    return 0;
}

static int nccl_allreduce_sum_f32(coll *c, float *buf, size_t n, char *err, size_t errlen)
{
    nccl_group *g = c->impl;
    const char *op = "allreduce";
    const double deadline = coll_now() + g->timeout_s;
    const size_t bytes = n * sizeof(float);
    if (nccl_enter(g, op, bytes, err, errlen) != 0)
        return -1;
    cudaError_t ce = g->rt->cudaMemcpyAsync(g->dbuf, buf, bytes, cudaMemcpyHostToDevice, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaMemcpyAsync", ce, err, errlen);
    ncclResult_t r = g->nc->ncclAllReduce(g->dbuf, g->dbuf, n, ncclFloat32, ncclSum, g->comm, g->stream);
    if (nccl_settle(g, op, r, deadline, err, errlen) != 0)
        return -1;
    ce = g->rt->cudaMemcpyAsync(buf, g->dbuf, bytes, cudaMemcpyDeviceToHost, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaMemcpyAsync", ce, err, errlen);
    return nccl_wait(g, op, NULL, deadline, err, errlen);
}

/* cuBLAS on the group's stream, made on first use. */
static int nccl_blas(nccl_group *g, const char *op, char *err, size_t errlen)
{
    if (g->blas)
        return 0;
    char why[256];
    if (!(g->cb = cudaload_cublas(why, sizeof why))) {
        errbuf_set(err, errlen, "nccl %s: the mean's scale needs cuBLAS: %s", op, why);
        nccl_abort(g);
        return -1;
    }
    cublasStatus_t st = g->cb->cublasCreate(&g->blas);
    if (st == CUBLAS_STATUS_SUCCESS && (st = g->cb->cublasSetStream(g->blas, g->stream)) != CUBLAS_STATUS_SUCCESS) {
        g->cb->cublasDestroy(g->blas);
        g->blas = NULL;
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        g->blas = NULL;
        errbuf_set(err, errlen, "nccl %s: cuBLAS handle: status %d", op, (int)st);
        nccl_abort(g);
        return -1;
    }
    return 0;
}

/* The event a device allreduce's completion is polled on, made on first use. */
static int nccl_done_event(nccl_group *g, const char *op, char *err, size_t errlen)
{
    if (g->done)
        return 0;
    cudaError_t ce = g->rt->cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        g->done = NULL;
        return nccl_cuda_failed(g, op, "cudaEventCreateWithFlags", ce, err, errlen);
    }
    return 0;
}

static int nccl_allreduce_mean_f32_device(coll *c, devf32 dbuf, size_t n, float scale, char *err, size_t errlen)
{
    nccl_group *g = c->impl;
    const char *op = "allreduce";
    const double deadline = coll_now() + g->timeout_s;
    cudaError_t ce = g->rt->cudaSetDevice(g->device);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaSetDevice", ce, err, errlen);
    if (nccl_done_event(g, op, err, errlen) != 0)
        return -1;
    /* The caller's writes are complete (coll.h): the stream needs no
     * event of theirs to wait on. In place, as DDP's bucket views. */
    ncclResult_t r = g->nc->ncclAllReduce(dbuf.p, dbuf.p, n, ncclFloat32, ncclSum, g->comm, g->stream);
    if (nccl_settle(g, op, r, deadline, err, errlen) != 0)
        return -1;
    if (scale != 1.0f) {
        if (nccl_blas(g, op, err, errlen) != 0)
            return -1;
        for (size_t off = 0; off < n;) { /* cuBLAS counts in int */
            int part = n - off > (size_t)INT32_MAX ? INT32_MAX : (int)(n - off);
            cublasStatus_t st = g->cb->cublasSscal(g->blas, part, &scale, devf32_at(dbuf, off).p, 1);
            if (st != CUBLAS_STATUS_SUCCESS) {
                errbuf_set(err, errlen, "nccl %s: cublasSscal: status %d", op, (int)st);
                nccl_abort(g);
                return -1;
            }
            off += (size_t)part;
        }
    }
    ce = g->rt->cudaEventRecord(g->done, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaEventRecord", ce, err, errlen);
    return nccl_wait(g, op, g->done, deadline, err, errlen);
}

/* The compression kernels, loaded from the trainer's fatbin on first use. */
static int nccl_kernels(nccl_group *g, const char *op, char *err, size_t errlen)
{
    if (g->lib)
        return 0;
    struct cudaDeviceProp prop;
    cudaError_t ce = g->rt->cudaGetDeviceProperties(&prop, g->device);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaGetDeviceProperties", ce, err, errlen);
    g->max_blocks = prop.multiProcessorCount > 0 ? 8u * (unsigned)prop.multiProcessorCount : 8u;
    ce = g->rt->cudaLibraryLoadData(&g->lib, trk_kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0);
    if (ce != cudaSuccess) {
        g->lib = NULL;
        return nccl_cuda_failed(g, op,
                                "cudaLibraryLoadData (the trainer's kernels: does this build have code for this GPU?)",
                                ce, err, errlen);
    }
    if ((ce = g->rt->cudaLibraryGetKernel(&g->narrow_mul, g->lib, TRK_COLL_NARROW_MUL)) != cudaSuccess ||
        (ce = g->rt->cudaLibraryGetKernel(&g->widen, g->lib, TRK_COLL_WIDEN)) != cudaSuccess) {
        g->rt->cudaLibraryUnload(g->lib);
        g->lib = NULL;
        return nccl_cuda_failed(g, op, "cudaLibraryGetKernel", ce, err, errlen);
    }
    return 0;
}

/* One grid-stride kernel over n elements, on the group's stream. */
static int nccl_launch(nccl_group *g, const char *op, cudaKernel_t k, size_t n, void **args, char *err, size_t errlen)
{
    size_t b = (n + 255) / 256;
    dim3 grid = {(unsigned)(b < g->max_blocks ? b : g->max_blocks), 1, 1}, block = {256, 1, 1};
    cudaError_t ce = g->rt->cudaLaunchKernel((const void *)k, grid, block, args, 0, g->stream);
    return ce == cudaSuccess ? 0 : nccl_cuda_failed(g, op, "cudaLaunchKernel", ce, err, errlen);
}

static int nccl_allreduce_compress_device(coll *c, devf32 dbuf, size_t n, half_type t, char *err, size_t errlen)
{
    nccl_group *g = c->impl;
    const char *op = t == HALF_BF16 ? "allreduce (bf16)" : "allreduce (fp16)";
    const double deadline = coll_now() + g->timeout_s;
    if (nccl_enter(g, op, n * sizeof(uint16_t), err, errlen) != 0 || nccl_done_event(g, op, err, errlen) != 0 ||
        nccl_kernels(g, op, err, errlen) != 0)
        return -1;
    uint16_t *narrow = g->dbuf;
    float *bucket = dbuf.p; /* a device pointer, handed to the kernels as such */
    float inv = 1.0f / (float)c->size;
    int bf = t == HALF_BF16;
    void *to[] = {&narrow, &bucket, &n, &inv, &bf};
    if (nccl_launch(g, op, g->narrow_mul, n, to, err, errlen) != 0)
        return -1;
    ncclResult_t r =
        g->nc->ncclAllReduce(narrow, narrow, n, bf ? ncclBfloat16 : ncclFloat16, ncclSum, g->comm, g->stream);
    if (nccl_settle(g, op, r, deadline, err, errlen) != 0)
        return -1;
    void *back[] = {&bucket, &narrow, &n, &bf};
    if (nccl_launch(g, op, g->widen, n, back, err, errlen) != 0)
        return -1;
    cudaError_t ce = g->rt->cudaEventRecord(g->done, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaEventRecord", ce, err, errlen);
    return nccl_wait(g, op, g->done, deadline, err, errlen);
}

static int nccl_allgather(coll *c, const void *in, size_t bytes, void *out, char *err, size_t errlen)
{
    nccl_group *g = c->impl;
    const char *op = "allgather";
    const double deadline = coll_now() + g->timeout_s;
    const size_t total = bytes * c->size;
    if (nccl_enter(g, op, total, err, errlen) != 0)
        return -1;
    uint8_t *mine = (uint8_t *)g->dbuf + (size_t)c->rank * bytes;
    cudaError_t ce = g->rt->cudaMemcpyAsync(mine, in, bytes, cudaMemcpyHostToDevice, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaMemcpyAsync", ce, err, errlen);
    ncclResult_t r = g->nc->ncclAllGather(mine, g->dbuf, bytes, ncclUint8, g->comm, g->stream); /* in place */
    if (nccl_settle(g, op, r, deadline, err, errlen) != 0)
        return -1;
    ce = g->rt->cudaMemcpyAsync(out, g->dbuf, total, cudaMemcpyDeviceToHost, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaMemcpyAsync", ce, err, errlen);
    return nccl_wait(g, op, NULL, deadline, err, errlen);
}

static int nccl_allgatherv(coll *c, const void *in, size_t bytes, const uint64_t *counts, uint64_t total, void *out,
                           char *err, size_t errlen)
{
    nccl_group *g = c->impl;
    const char *op = "allgatherv";
    const double deadline = coll_now() + g->timeout_s;
    if (nccl_enter(g, op, (size_t)total, err, errlen) != 0)
        return -1;
    uint8_t *d = g->dbuf;
    size_t mine = 0;
    for (uint32_t r = 0; r < c->rank; r++)
        mine += (size_t)counts[r];
    cudaError_t ce = cudaSuccess;
    if (bytes > 0)
        ce = g->rt->cudaMemcpyAsync(d + mine, in, bytes, cudaMemcpyHostToDevice, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaMemcpyAsync", ce, err, errlen);
    ncclResult_t first = g->nc->ncclGroupStart();
    size_t off = 0;
    for (uint32_t r = 0; r < c->size && (first == ncclSuccess || first == ncclInProgress); r++) {
        if (counts[r] > 0)
            first = g->nc->ncclBroadcast(d + off, d + off, (size_t)counts[r], ncclUint8, (int)r, g->comm, g->stream);
        off += (size_t)counts[r];
    }
    ncclResult_t end = g->nc->ncclGroupEnd(); /* closes the group even after an error */
    if (nccl_settle(g, op, first != ncclSuccess && first != ncclInProgress ? first : end, deadline, err, errlen) != 0)
        return -1;
    ce = g->rt->cudaMemcpyAsync(out, d, (size_t)total, cudaMemcpyDeviceToHost, g->stream);
    if (ce != cudaSuccess)
        return nccl_cuda_failed(g, op, "cudaMemcpyAsync", ce, err, errlen);
    return nccl_wait(g, op, NULL, deadline, err, errlen);
}

/* Frees g and what it holds: the communicator finalised and destroyed when
 * `clean`, else (or when finalising fails) aborted. */
static void nccl_group_free(nccl_group *g, bool clean)
{
    if (!g)
        return;
    g->rt->cudaSetDevice(g->device);
    if (g->comm && clean) {
        char why[COLL_ERR_MAX];
        if (nccl_settle(g, "free", g->nc->ncclCommFinalize(g->comm), coll_now() + g->timeout_s, why, sizeof why) == 0) {
            g->nc->ncclCommDestroy(g->comm);
            g->comm = NULL;
        }
    }
    nccl_abort(g);
    if (g->blas)
        g->cb->cublasDestroy(g->blas);
    if (g->lib)
        g->rt->cudaLibraryUnload(g->lib);
    if (g->done)
        g->rt->cudaEventDestroy(g->done);
    if (g->stream)
        g->rt->cudaStreamDestroy(g->stream);
    if (g->dbuf)
        g->rt->cudaFree(g->dbuf);
    free(g);
}

static void nccl_destroy(coll *c)
{
    nccl_group_free(c->impl, !c->failed);
    c->impl = NULL;
}

static const coll_ops nccl_ops = {
    .name = "nccl",
    .allreduce_sum_f32 = nccl_allreduce_sum_f32,
    .allreduce_mean_f32_device = nccl_allreduce_mean_f32_device,
    .allgather = nccl_allgather,
    .allgatherv = nccl_allgatherv,
    .destroy = nccl_destroy,
    .allreduce_compress_device = nccl_allreduce_compress_device,
};

/* Rank 0 makes the unique id and sets it; the others get it. */
static int nccl_share_id(const nccl_group *g, uint32_t rank, const coll_store *store, const char *prefix,
                         ncclUniqueId *id, char *err, size_t errlen)
{
    char why[COLL_ERR_MAX] = "";
    char *key = coll_key(prefix, "nccl_id");
    if (!key) {
        errbuf_set(err, errlen, "nccl init: out of memory");
        return -1;
    }
    int rc = -1;
    if (rank == 0) {
        ncclResult_t r = g->nc->ncclGetUniqueId(id);
        if (r != ncclSuccess)
            errbuf_set(err, errlen, "nccl init: ncclGetUniqueId: %s", g->nc->ncclGetErrorString(r));
        else if (store->set(store->ctx, key, id, sizeof *id, why, sizeof why) != 0)
            errbuf_set(err, errlen, "nccl init: rendezvous failed: store set '%s': %s", key, why);
        else
            rc = 0;
    } else {
        uint8_t *val = NULL;
        size_t len = 0;
        if (store->get(store->ctx, key, &val, &len, why, sizeof why) != 0) {
            errbuf_set(err, errlen, "nccl init: rendezvous failed: store get '%s': %s", key, why);
        } else if (len != sizeof *id) {
            errbuf_set(err, errlen, "nccl init: store key '%s' holds %zu bytes, not an NCCL unique id (%zu)", key,
                       len, sizeof *id);
        } else {
            memcpy(id, val, sizeof *id);
            rc = 0;
        }
        free(val);
    }
    free(key);
    return rc;
}

coll *coll_nccl_new(uint32_t rank, uint32_t size, int cuda_device, const coll_store *store, const char *prefix,
                    double timeout_s, char *err, size_t errlen)
{
    if (coll_check_args("nccl", rank, size, store, timeout_s, err, errlen) != 0)
        return NULL;
    char why[512];
    const nccl_api *nc = cudaload_nccl(why, sizeof why);
    if (!nc) {
        errbuf_set(err, errlen, "nccl: %s (install %s or use --backend gloo)", why,
                   strstr(why, "libcudart") ? "the CUDA runtime" : "NCCL");
        return NULL;
    }
    const cudart_api *rt = cudaload_cudart(NULL, 0);
    assert(rt); /* NCCL's table is only given once the runtime's is loaded */
    int ndev = 0;
    cudaError_t ce = rt->cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        errbuf_set(err, errlen, "nccl: no CUDA device answers (cudaGetDeviceCount: %s)",
                   ce != cudaSuccess ? rt->cudaGetErrorString(ce) : "0 devices");
        return NULL;
    }
    if (cuda_device < 0 || cuda_device >= ndev) {
        errbuf_set(err, errlen, "nccl: CUDA device %d does not exist (this host has %d, numbered from 0)",
                   cuda_device, ndev);
        return NULL;
    }
    ce = rt->cudaSetDevice(cuda_device);
    if (ce != cudaSuccess) {
        errbuf_set(err, errlen, "nccl: cudaSetDevice(%d): %s", cuda_device, rt->cudaGetErrorString(ce));
        return NULL;
    }
    nccl_group *g = calloc(1, sizeof *g);
    if (!g) {
        errbuf_set(err, errlen, "nccl: out of memory");
        return NULL;
    }
    g->rt = rt;
    g->nc = nc;
    g->device = cuda_device;
    g->timeout_s = timeout_s;

    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* every wait is ours to bound */
    coll *c = NULL;
    if (nccl_share_id(g, rank, store, prefix, &id, err, errlen) != 0)
        goto fail;
    ncclResult_t r = g->nc->ncclCommInitRankConfig(&g->comm, (int)size, id, (int)rank, &cfg);
    if (nccl_settle(g, "init", r, coll_now() + timeout_s, err, errlen) != 0)
        goto fail;
    ce = g->rt->cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        g->stream = NULL;
        nccl_cuda_failed(g, "init", "cudaStreamCreateWithFlags", ce, err, errlen);
        goto fail;
    }
    c = coll_wrap(&nccl_ops, g, rank, size, err, errlen);
    if (!c)
        goto fail;
    return c;
fail:
    nccl_group_free(g, false);
    return NULL;
}

bool coll_have_nccl(void) { return true; }
