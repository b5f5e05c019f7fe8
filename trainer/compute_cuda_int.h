/* compute_cuda_int.h — the cuda compute context's own header: its struct
 * and the helpers its two files share. compute_cuda.c (the context: order,
 * memory, IPC, the ops table) calls down into compute_cuda_math.c (the
 * arithmetic, its launches and staging); never the other way.
 */
#ifndef PSBENCH_TRAINER_COMPUTE_CUDA_INT_H
#define PSBENCH_TRAINER_COMPUTE_CUDA_INT_H

#include "trainer/compute_impl.h"
#include "trainer/cuda/kernels_host.h"
#include "shared/gpu/cugpu.h"
#include "shared/gpu/evring.h"
#include "shared/gpu/staging.h"
#include "shared/rowgroup.h"

#include <assert.h>

/* Events in the marks' ring (each one timed: compute_elapsed). */
#define CC_MARKS COMPUTE_TIMED_MARKS
/* The staging ring's chunks (a larger call gets a chunk its size), and the
 * bytes of chunks past which it waits for the GPU rather than make another:
 * two, one filled while the GPU reads the other. */
#define CC_STAGE_BYTES ((size_t)1 << 20)
#define CC_STAGE_LIMIT (2 * CC_STAGE_BYTES)
#define CC_ALIGN 16

typedef struct compute_cuda {
    compute base;
    char name[16]; /* "cuda" or "fake-cuda" */
    cugpu *g;
    cugpu_stream *s;
    void *blas;           /* cublasHandle_t (real GPU), else NULL */
    const void *blas_api; /* its cublas_api */
    evring marks;         /* the marks (shared/gpu/evring.h: the latest CC_MARKS held) */
    staging stage;        /* host arguments on their way (shared/gpu/staging.h) */
    /* per-sample loss terms (device), grown as needed */
    devmem per;
    size_t per_cap;
    /* a failed context's staging sink (cc_stage_sink) */
    unsigned char *sink;
    size_t sink_cap;
    /* the host's scratch for grouping occurrences by row */
    rowgroup rg;
    uint64_t live;       /* buffers not yet released */
    cugpu_event *ipc_ev; /* CUDA IPC: the event a peer waits for (compute_share_record); NULL: not made */
} compute_cuda;

static inline compute_cuda *cc(compute *c) { return (compute_cuda *)c; }

/* The GPU failed under `what` (g->err says how): the context has failed
 * (compute.h: it does nothing more; the trainer reports the reason). */
static inline void cc_fatal(compute_cuda *c, const char *what)
{
    compute_fail(&c->base, "compute (%s): %s: %s", c->name, what, c->g->err);
}

static inline bool cc_failed(const compute_cuda *c) { return compute_failed(&c->base); }

/* ---- spans ---- */

static inline float *cc_f32(cspan s)
{
    assert(cspan_valid(s) && s.buf->dtype == COMPUTE_F32 && s.buf->mem == COMPUTE_MEM_DEVICE);
    return (float *)s.buf->ptr + s.off;
}

static inline double *cc_f64(cspan s)
{
    assert(cspan_valid(s) && s.buf->dtype == COMPUTE_F64 && s.buf->mem == COMPUTE_MEM_DEVICE);
    return (double *)s.buf->ptr + s.off;
}

static inline void *cc_addr(cspan s) { return (char *)s.buf->ptr + s.off * compute_dtype_size(s.buf->dtype); }

/* A buffer of device memory (its tag says so) as the GPU layer takes it. */
static inline devmem cc_buf_dev(const cbuf *b)
{
    assert(b->mem == COMPUTE_MEM_DEVICE);
    return devmem_of(b->ptr);
}

/* A span of device memory, likewise. */
static inline devmem cc_dev(cspan s)
{
    assert(cspan_valid(s));
    return devmem_of(cc_addr(s));
}

/* ---- compute_cuda_math.c ---- */

/* One kernel (or library call) on the stream, unless the context failed. */
void cc_launch(compute_cuda *c, const trk_launch *l);
/* bytes of device memory at p zeroed, in stream order. */
void cc_zero_dev(compute_cuda *c, void *p, size_t bytes);

/* The arithmetic (compute.h's ops). */
void cc_gemm(compute *base, bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha, cspan A, uint64_t lda,
             cspan B, uint64_t ldb, float beta, cspan C, uint64_t ldc);
void cc_bias_rows(compute *base, cspan bias, uint64_t rows, uint64_t cols, cspan y);
void cc_transpose_bias(compute *base, cspan src, cspan bias, uint64_t rows, uint64_t cols, cspan y);
void cc_colsum(compute *base, cspan src, uint64_t rows, uint64_t cols, cspan dst, compute_sum_from from);
void cc_relu(compute *base, cspan x, cspan y);
void cc_relu_bwd(compute *base, cspan pre, cspan dy);
void cc_bag_mean(compute *base, cspan table, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan out);
void cc_bag_mean_bwd_dense(compute *base, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan G);
uint64_t cc_bag_mean_bwd_sparse(compute *base, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                int64_t *rows, uint32_t *slot, cspan vals);
void cc_softmax_ce(compute *base, cspan z, uint32_t B, uint64_t C, const int64_t *y, cspan prob, cspan q, cspan loss);
void cc_softmax_ce_bwd(compute *base, cspan prob, cspan q, uint32_t B, uint64_t C, const int64_t *y, cspan dz);
void cc_ce_logits(compute *base, cspan z, uint32_t R, uint32_t C, const int64_t *y, cspan dz, cspan loss);
void cc_l1(compute *base, cspan y, uint64_t n, cspan dy, cspan loss);
void cc_sgd_dense(compute *base, cspan p, cspan g, cspan buf, float lr, float momentum, bool first);
void cc_sgd_sparse(compute *base, cspan table, uint64_t cols, const int64_t *rows, const float *vals, uint64_t nnz,
                   float lr);

#endif
