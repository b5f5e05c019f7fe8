// kernels.cu — the CUDA server's kernels (server/cuda/kernels.h names them).
//
// Compiled by nvcc into a fatbin (SASS for each of CMAKE_CUDA_ARCHITECTURES
// and PTX for the newest), embedded in psbench-server as data and loaded on
// the first use of the cuda device with cudaLibraryLoadData: the server
// links no CUDA library, and the same binary runs on hosts without one.
// extern "C" keeps the names kernels.h gives (no C++ mangling).
//
// The per-element arithmetic is cumath.h's, shared with the host (tests
// compare it with the cpu device bit for bit). Dense kernels use grid-stride
// loops over float4 where the buffers allow (16-byte aligned, which device
// allocations are) and one float at a time for the rest.
#include "server/cuda/cumath.h"

#include <stddef.h>
#include <stdint.h>

#include "server/cuda/kernels.h"

// ---- dense folds --------------------------------------------------------------

__device__ __forceinline__ float psb_fold_one(int op, float acc, float x, float s)
{
    switch (op) {
    case PSB_FOLD_COPY:
        return x;
    case PSB_FOLD_ADD:
        return cumath_fold_add(acc, x);
    case PSB_FOLD_ADD_SCALE:
        return cumath_fold_add_scale(acc, x, s);
    default: // PSB_FOLD_COPY_SCALE
        return cumath_fold_copy_scale(x, s);
    }
}

// acc[i] = op(acc[i], src[i], s) for i < n.
extern "C" __global__ void psb_fold(int op, float *__restrict__ acc, const float *__restrict__ src, size_t n, float s)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool vec = ((uintptr_t)acc % 16 == 0) && ((uintptr_t)src % 16 == 0);
    size_t n4 = vec ? n / 4 : 0;
    float4 *a4 = (float4 *)acc;
    const float4 *s4 = (const float4 *)src;
    for (size_t i = t; i < n4; i += stride) {
        float4 a = a4[i], x = s4[i];
        a.x = psb_fold_one(op, a.x, x.x, s);
        a.y = psb_fold_one(op, a.y, x.y, s);
        a.z = psb_fold_one(op, a.z, x.z, s);
        a.w = psb_fold_one(op, a.w, x.w, s);
        a4[i] = a;
    }
    for (size_t i = n4 * 4 + t; i < n; i += stride)
        acc[i] = psb_fold_one(op, acc[i], src[i], s);
}

// The small folds of one reactor iteration: block by block over the chains;
// a chain's folds one after the other (a barrier between them: each
// element sees them in order), its elements across the block's threads.
extern "C" __global__ void psb_fold_batch(const psb_fold_desc *__restrict__ descs,
                                          const psb_fold_chain *__restrict__ chains, unsigned nchains)
{
    for (unsigned c = blockIdx.x; c < nchains; c += gridDim.x) {
        const psb_fold_chain ch = chains[c];
        for (uint32_t k = 0; k < ch.count; k++) {
            const psb_fold_desc d = descs[ch.first + k];
            for (uint64_t i = threadIdx.x; i < d.n; i += blockDim.x)
                d.acc[i] = psb_fold_one(d.op, d.acc[i], d.src[i], d.s);
            __syncthreads();
        }
    }
}

// ---- the mean of stored pushes ---------------------------------------------------

// dst[i] = (srcs[0][i] + srcs[1][i] + ... ) * scale, summed in source order.
// vec (the host found dst and every source 16-byte aligned): four floats a
// load and a store (float4) for the first n / 4 * 4 elements, the same
// arithmetic per element; the rest one at a time (issue 44: 16-byte
// accesses are what a device-to-device copy moves its bytes with).
extern "C" __global__ void psb_sum_scale(float *dst, const float *const *__restrict__ srcs, unsigned nsrc, size_t n,
                                         float scale, int vec)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t n4 = vec ? n / 4 : 0;
    for (size_t i = t; i < n4; i += stride) {
        float4 a = ((const float4 *)srcs[0])[i];
        for (unsigned s = 1; s < nsrc; s++) {
            const float4 x = ((const float4 *)srcs[s])[i];
            a.x = cumath_add(a.x, x.x);
            a.y = cumath_add(a.y, x.y);
            a.z = cumath_add(a.z, x.z);
            a.w = cumath_add(a.w, x.w);
        }
        a.x = cumath_mul(a.x, scale);
        a.y = cumath_mul(a.y, scale);
        a.z = cumath_mul(a.z, scale);
        a.w = cumath_mul(a.w, scale);
        ((float4 *)dst)[i] = a;
    }
    for (size_t i = n4 * 4 + t; i < n; i += stride) {
        float acc = srcs[0][i];
        for (unsigned s = 1; s < nsrc; s++)
            acc = cumath_add(acc, srcs[s][i]);
        dst[i] = cumath_mul(acc, scale);
    }
}

// ---- SGD with momentum (batch-update) --------------------------------------------

// g = (srcs[0][i] + ...) * scale; the step on param[i] and buf[i]; out[i] =
// the new param[i] when out is not NULL.
extern "C" __global__ void psb_sgd(float *__restrict__ param, float *__restrict__ buf,
                                   const float *const *__restrict__ srcs, unsigned nsrc, size_t n, float scale,
                                   float lr, float momentum, int first, float *__restrict__ out)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float g = srcs[0][i];
        for (unsigned s = 1; s < nsrc; s++)
            g = cumath_add(g, srcs[s][i]);
        g = cumath_mul(g, scale);
        float p = param[i], b = buf[i];
        cumath_sgd(&p, &b, g, lr, momentum, first);
        param[i] = p;
        buf[i] = b;
        if (out)
            out[i] = p;
    }
}

// ---- embedding bags ----------------------------------------------------------------

// Where bag b's positions end: the next bag's offset, or nnz for the last.
__device__ __forceinline__ size_t psb_bag_end(const int64_t *off, size_t bags, size_t nnz, size_t b)
{
    return b + 1 < bags ? (size_t)off[b + 1] : nnz;
}

// out[b][c] = 0 + table[idx[off[b]]][c] + ... over bag b's positions in
// order. One thread per (bag, column).
extern "C" __global__ void psb_gather(float *__restrict__ out, const float *__restrict__ table, size_t cols,
                                      const int64_t *__restrict__ idx, const int64_t *__restrict__ off, size_t nnz,
                                      size_t bags)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < bags * cols; t += stride) {
        size_t b = t / cols, c = t % cols;
        float sum = 0.0f;
        for (size_t i = (size_t)off[b], end = psb_bag_end(off, bags, nnz, b); i < end; i++)
            sum = cumath_add(sum, table[(size_t)idx[i] * cols + c]);
        out[t] = sum;
    }
}

// Scatter SGD, row-parallel: for each unique row u the lookup named
// (urows, ascending) and each column c, one thread walks u's occurrences
// in position order (occ[uoff[u] .. uoff[u+1]): the bags they came from)
// and applies table[urows[u]][c] -= lr * grad[bag][c] for each — so a row
// named twice takes both steps in the CPU's order (server/reduce.c), and
// every (row, column) of the update runs at once (nu x cols threads).
extern "C" __global__ void psb_scatter_sgd(float *__restrict__ table, size_t cols, const int64_t *__restrict__ urows,
                                           const uint32_t *__restrict__ uoff, const uint32_t *__restrict__ occ,
                                           size_t nu, const float *__restrict__ grad, float lr)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < nu * cols; t += stride) {
        size_t u = t / cols, c = t % cols;
        float *e = &table[(size_t)urows[u] * cols + c];
        float v = *e;
        for (uint32_t k = uoff[u]; k < uoff[u + 1]; k++)
            v = cumath_scatter_step(v, grad[(size_t)occ[k] * cols + c], lr);
        *e = v;
    }
}

// ---- dense embedding steps (EmbeddingBag sparse=False, then SGD) -------------------
//
// Three launches in stream order: psb_zero(gsum), psb_bag_grad, psb_dense_sgd
// — the bits of reduce_dense_bag_sgd_f32 (server/reduce.c).

// x[i] = 0 for i < n.
extern "C" __global__ void psb_zero(float *__restrict__ x, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = 0.0f;
}

// For each bag b in order, each of its positions i in order:
// gsum[idx[i]][c] += grad[b][c]. One thread owns a column for the whole
// update, so that a row's repeats are summed in position order.
extern "C" __global__ void psb_bag_grad(float *__restrict__ gsum, size_t cols, const int64_t *__restrict__ idx,
                                        const int64_t *__restrict__ off, size_t nnz, size_t bags,
                                        const float *__restrict__ grad)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += stride)
        for (size_t b = 0; b < bags; b++) {
            float g = grad[b * cols + c];
            for (size_t i = (size_t)off[b], end = psb_bag_end(off, bags, nnz, b); i < end; i++) {
                float *e = &gsum[(size_t)idx[i] * cols + c];
                *e = cumath_add(*e, g);
            }
        }
}

// table[i] = table[i] - lr * gsum[i] over the whole table.
extern "C" __global__ void psb_dense_sgd(float *__restrict__ table, const float *__restrict__ gsum, size_t n, float lr)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool vec = ((uintptr_t)table % 16 == 0) && ((uintptr_t)gsum % 16 == 0);
    size_t n4 = vec ? n / 4 : 0;
    float4 *t4 = (float4 *)table;
    const float4 *g4 = (const float4 *)gsum;
    for (size_t i = t; i < n4; i += stride) {
        float4 a = t4[i], g = g4[i];
        a.x = cumath_scatter_step(a.x, g.x, lr);
        a.y = cumath_scatter_step(a.y, g.y, lr);
        a.z = cumath_scatter_step(a.z, g.z, lr);
        a.w = cumath_scatter_step(a.w, g.w, lr);
        t4[i] = a;
    }
    for (size_t i = n4 * 4 + t; i < n; i += stride)
        table[i] = cumath_scatter_step(table[i], gsum[i], lr);
}

// ---- narrow pushes (--compress fp16|bf16) ---------------------------------------

// A narrow push's last fold: out[i] = narrow(op(acc[i], widen(src[i]), s)), acc read only.
extern "C" __global__ void psb_fold_narrow_out(int op, int bf, uint16_t *__restrict__ out,
                                               const float *__restrict__ acc, const uint16_t *__restrict__ src,
                                               size_t n, float s)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const int add = op == PSB_FOLD_ADD_SCALE;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = cumath_fold_narrow_out(add, acc[i], src[i], s, bf);
}

// A narrow push's fold into the f32 accumulator: acc[i] = op(acc[i], widen(src[i]), s)
// (a copy where it is the first, an add where others are still to come).
extern "C" __global__ void psb_fold_narrow_in(int op, int bf, float *__restrict__ acc, const uint16_t *__restrict__ src,
                                              size_t n, float s)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc[i] = psb_fold_one(op, acc[i], he_widen(bf, src[i]), s);
}

// A narrow push's fold where only the stashed first push has been: their
// f32 sum into acc (PSB_FOLD_ADD), or their mean narrowed into out.
extern "C" __global__ void psb_fold_narrow_pair(int op, int bf, float *__restrict__ acc, uint16_t *__restrict__ out,
                                                const uint16_t *__restrict__ stash, const uint16_t *__restrict__ src,
                                                size_t n, float s)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (op == PSB_FOLD_ADD)
        for (size_t i = t; i < n; i += stride)
            acc[i] = cumath_pair_sum(he_widen(bf, stash[i]), he_widen(bf, src[i]));
    else
        for (size_t i = t; i < n; i += stride)
            out[i] = cumath_pair_mean_narrow(stash[i], src[i], s, bf);
}
