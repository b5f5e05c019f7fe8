// kernels.cu — the CUDA trainer's kernels (trainer/cuda/kernels.h names
// them and says what each computes): every compute op of trainer/compute.h
// but the products (cuBLAS).
//
// Compiled by nvcc into a fatbin (SASS for each of CMAKE_CUDA_ARCHITECTURES,
// PTX for the newest) with -fmad=false (no a*b+c contracted into one FMA:
// each operation rounds on its own, as on the CPU), embedded in
// psbench-trainer as data and loaded with cudaLibraryLoadData on the first
// use of the cuda compute layer; extern "C" keeps kernels.h's names.
//
// The per-element and per-row arithmetic is trainer/cmath.h's (its
// functions are __host__ __device__ here), in the cpu layer's order; the
// fake GPU runs the same functions on the host (kernels_host.c). Every
// kernel is a grid-stride loop over its items (elements, rows or samples).
#include "trainer/cmath.h"

#include <stddef.h>
#include <stdint.h>

#include "shared/half_elem.h"
#include "trainer/cuda/kernels.h"

#define TRK_FOR(i, n)                                                                                                 \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ---- memory and dense layers ------------------------------------------------------

extern "C" __global__ void trk_zero(uint32_t *p, size_t words)
{
    TRK_FOR(i, words)
    p[i] = 0;
}

extern "C" __global__ void trk_bias_rows(float *y, const float *bias, size_t rows, size_t cols)
{
    TRK_FOR(i, rows * cols)
    y[i] = bias[i % cols];
}

extern "C" __global__ void trk_transpose_bias(float *y, const float *src, const float *bias, size_t rows, size_t cols)
{
    TRK_FOR(e, rows * cols)
    {
        size_t i = e / cols, j = e % cols;
        y[e] = src[j * rows + i] + bias[j];
    }
}

// One thread per column, the rows in order.
extern "C" __global__ void trk_colsum(float *dst, const float *src, size_t rows, size_t cols, int from_row0)
{
    TRK_FOR(j, cols)
    {
        float d = from_row0 ? src[j] : 0.0f;
        for (size_t i = from_row0 ? 1 : 0; i < rows; i++)
            d += src[i * cols + j];
        dst[j] = d;
    }
}

extern "C" __global__ void trk_relu(float *y, const float *x, size_t n)
{
    TRK_FOR(i, n)
    y[i] = cm_relu(x[i]);
}

extern "C" __global__ void trk_relu_bwd(float *dy, const float *pre, size_t n)
{
    TRK_FOR(i, n)
    dy[i] = cm_relu_bwd(pre[i], dy[i]);
}

// ---- EmbeddingBag (mean) ------------------------------------------------------------

// One thread per output element: the bag's rows in order, then / L.
extern "C" __global__ void trk_bag_mean(float *out, const float *table, size_t D, const int64_t *idx, size_t B,
                                        size_t L)
{
    TRK_FOR(e, B * D)
    {
        size_t s = e / D, k = e % D;
        float o = 0.0f;
        for (size_t t = 0; t < L; t++)
            o += table[(size_t)idx[s * L + t] * D + k];
        out[e] = o / (float)L;
    }
}

extern "C" __global__ void trk_scale_div(float *g, size_t n, float d)
{
    TRK_FOR(i, n)
    g[i] /= d;
}

// One thread per (unique row, column): the row's occurrences in batch order.
extern "C" __global__ void trk_bag_bwd(float *dst, const int64_t *dst_rows, const float *g, size_t D,
                                       const uint32_t *off, const uint32_t *occ, size_t nnz)
{
    TRK_FOR(e, nnz * D)
    {
        size_t u = e / D, k = e % D;
        float acc = 0.0f;
        for (uint32_t o = off[u]; o < off[u + 1]; o++)
            acc += g[(size_t)occ[o] * D + k];
        size_t row = dst_rows ? (size_t)dst_rows[u] : u;
        dst[row * D + k] = acc;
    }
}

// ---- loss heads: one thread per sample (cmath.h's row functions) -----------------------

extern "C" __global__ void trk_softmax_ce(const float *z, float *p, float *q, size_t B, size_t C, const int64_t *y,
                                          double *per)
{
    TRK_FOR(s, B)
    per[s] = cm_softmax_ce_row(z + s * C, p + s * C, q + s * C, C, y[s]);
}

extern "C" __global__ void trk_softmax_ce_bwd(const float *p, const float *q, float *dz, size_t B, size_t C,
                                              const int64_t *y, float invB)
{
    TRK_FOR(s, B)
    cm_softmax_ce_bwd_row(p + s * C, q + s * C, dz + s * C, C, y[s], invB);
}

extern "C" __global__ void trk_ce_logits(const float *z, float *dz, size_t R, size_t C, const int64_t *y, double *per)
{
    TRK_FOR(i, R)
    per[i] = cm_ce_logits_row(z + i * C, dz + i * C, (int)C, y[i], (int)R);
}

extern "C" __global__ void trk_l1(const float *v, float *dv, size_t n, float g, double *per)
{
    TRK_FOR(k, n)
    {
        per[k] = cm_l1_loss(v[k]);
        dv[k] = cm_l1_grad(v[k], g);
    }
}

// One thread: the samples' terms in order, as the CPU sums them.
extern "C" __global__ void trk_loss_sum(double *loss, const double *per, size_t n, int negate, double div)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (negate)
            sum -= per[i];
        else
            sum += per[i];
    }
    *loss = sum / div;
}

// The first element where a and b differ (a check: synthetic.c), by
// atomicMin; *first is UINT64_MAX before, and stays so when none does.
extern "C" __global__ void trk_first_ne(const float *a, const float *b, size_t n, unsigned long long *first)
{
    TRK_FOR(k, n)
    if (!(a[k] == b[k]))
        atomicMin(first, (unsigned long long)k);
}

// ---- SGD ------------------------------------------------------------------------------

extern "C" __global__ void trk_sgd(float *w, const float *g, float *buf, size_t n, float nlr, float momentum, int mode)
{
    TRK_FOR(k, n)
    {
        float step = g[k];
        if (mode == TRK_SGD_FIRST) {
            buf[k] = step;
        } else if (mode == TRK_SGD_MOMENTUM) {
            step = cm_momentum(momentum, buf[k], step);
            buf[k] = step;
        }
        w[k] = cm_sgd(w[k], nlr, step);
    }
}

// One thread per (unique row, column): the row's updates in the order given.
extern "C" __global__ void trk_sgd_rows(float *table, size_t cols, const int64_t *urows, const uint32_t *off,
                                        const uint32_t *occ, const float *vals, size_t nu, float nlr)
{
    TRK_FOR(e, nu * cols)
    {
        size_t u = e / cols, j = e % cols;
        float *p = table + (size_t)urows[u] * cols + j;
        float w = *p;
        for (uint32_t o = off[u]; o < off[u + 1]; o++)
            w = cm_sgd(w, nlr, vals[(size_t)occ[o] * cols + j]);
        *p = w;
    }
}

// ---- compressed allreduce (--compress fp16|bf16 on NCCL) ------------------------------
// Launched by the nccl collectives (trainer/coll_nccl.c) on their own
// stream, not through the compute layer's table: kernels.h, "the
// collectives' kernels". The per-element conversions are shared/half_elem.h's.

// dst = narrow(float(narrow(src)) * inv): PyTorch's cast-then-div_ on a CUDA bucket.
extern "C" __global__ void trk_narrow_mul(uint16_t *dst, const float *src, size_t n, float inv, int bf)
{
    TRK_FOR(k, n)
    dst[k] = he_narrow_mul(bf, src[k], inv);
}

// dst = narrow(src): a bucket's narrow push by CUDA IPC (rpc_hook --compress), round to nearest even.
extern "C" __global__ void trk_narrow(uint16_t *dst, const float *src, size_t n, int bf)
{
    TRK_FOR(k, n)
    dst[k] = he_narrow(bf, src[k]);
}

// dst = float(src): the bucket's copy_ back from the narrow sum (and a narrow mean into the gradients).
extern "C" __global__ void trk_widen(float *dst, const uint16_t *src, size_t n, int bf)
{
    TRK_FOR(k, n)
    dst[k] = he_widen(bf, src[k]);
}
