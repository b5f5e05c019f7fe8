/* kernels_host.c — the trainer's kernels as shared/cugpu.h runs them (see
 * kernels_host.h): their arguments for cudaLaunchKernel, the products as
 * cuBLAS calls on the GPU's stream, and on the fake GPU the same loops on
 * the host with cmath.h's arithmetic (the kernels' bits, and the cpu
 * layer's: trainer/compute_cpu.c) and cblas_sgemm for the products (the
 * cpu layer's call). */
#include "trainer/cuda/kernels_host.h"
#include "trainer/cmath.h"
#include "shared/half_elem.h"

#include <assert.h>
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>

#ifdef PSBENCH_HAVE_CUDA
#include "shared/gpu/cudaload.h"
#endif

/* Each kernel's host loops (<name>_run: kernels.cu's, one item at a time
 * in order; every item is independent of the others, so the order of items
 * changes no bits) and cudaLaunchKernel's arguments (<name>_args: pointers
 * into the launch, which the caller keeps until the launch call returns, in
 * the order of kernels.h's prototypes, and the threads' worth of work). */

static void trk_zero_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t i = 0; i < l->u.zero.words; i++)
        l->u.zero.p[i] = 0;
}

static size_t trk_zero_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.zero.words, &l->u.zero.p, &l->u.zero.words);
}

static void trk_bias_rows_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t i = 0; i < l->u.bias.rows * l->u.bias.cols; i++)
        l->u.bias.y[i] = l->u.bias.bias[i % l->u.bias.cols];
}

static size_t trk_bias_rows_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.bias.rows * l->u.bias.cols, &l->u.bias.y, &l->u.bias.bias, &l->u.bias.rows,
                      &l->u.bias.cols);
}

static void trk_transpose_bias_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t e = 0; e < l->u.bias.rows * l->u.bias.cols; e++) {
        size_t i = e / l->u.bias.cols, j = e % l->u.bias.cols;
        l->u.bias.y[e] = l->u.bias.src[j * l->u.bias.rows + i] + l->u.bias.bias[j];
    }
}

static size_t trk_transpose_bias_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.bias.rows * l->u.bias.cols, &l->u.bias.y, &l->u.bias.src, &l->u.bias.bias,
                      &l->u.bias.rows, &l->u.bias.cols);
}

static void trk_colsum_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t j = 0; j < l->u.colsum.cols; j++) {
        const float *src = l->u.colsum.src;
        float d = l->u.colsum.from_row0 ? src[j] : 0.0f;
        for (size_t i = l->u.colsum.from_row0 ? 1 : 0; i < l->u.colsum.rows; i++)
            d += src[i * l->u.colsum.cols + j];
        l->u.colsum.dst[j] = d;
    }
}

static size_t trk_colsum_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.colsum.cols, &l->u.colsum.dst, &l->u.colsum.src, &l->u.colsum.rows, &l->u.colsum.cols,
                      &l->u.colsum.from_row0);
}

static void trk_relu_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t i = 0; i < l->u.relu.n; i++)
        l->u.relu.y[i] = cm_relu(l->u.relu.x[i]);
}

static size_t trk_relu_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.relu.n, &l->u.relu.y, &l->u.relu.x, &l->u.relu.n);
}

static void trk_relu_bwd_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t i = 0; i < l->u.relu.n; i++)
        l->u.relu.y[i] = cm_relu_bwd(l->u.relu.x[i], l->u.relu.y[i]);
}

static size_t trk_relu_bwd_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.relu.n, &l->u.relu.y, &l->u.relu.x, &l->u.relu.n);
}

static void trk_bag_mean_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t e = 0; e < l->u.bag.B * l->u.bag.D; e++) {
        size_t s = e / l->u.bag.D, k = e % l->u.bag.D;
        float o = 0.0f;
        for (size_t t = 0; t < l->u.bag.L; t++)
            o += l->u.bag.table[(size_t)l->u.bag.idx[s * l->u.bag.L + t] * l->u.bag.D + k];
        l->u.bag.out[e] = o / (float)l->u.bag.L;
    }
}

static size_t trk_bag_mean_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.bag.B * l->u.bag.D, &l->u.bag.out, &l->u.bag.table, &l->u.bag.D, &l->u.bag.idx,
                      &l->u.bag.B, &l->u.bag.L);
}

static void trk_scale_div_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t i = 0; i < l->u.scale.n; i++)
        l->u.scale.g[i] /= l->u.scale.d;
}

static size_t trk_scale_div_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.scale.n, &l->u.scale.g, &l->u.scale.n, &l->u.scale.d);
}

static void trk_bag_bwd_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t e = 0; e < l->u.bag_bwd.nnz * l->u.bag_bwd.D; e++) {
        size_t D = l->u.bag_bwd.D, u = e / D, k = e % D;
        float acc = 0.0f;
        for (uint32_t o = l->u.bag_bwd.off[u]; o < l->u.bag_bwd.off[u + 1]; o++)
            acc += l->u.bag_bwd.g[(size_t)l->u.bag_bwd.occ[o] * D + k];
        size_t row = l->u.bag_bwd.dst_rows ? (size_t)l->u.bag_bwd.dst_rows[u] : u;
        l->u.bag_bwd.dst[row * D + k] = acc;
    }
}

static size_t trk_bag_bwd_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.bag_bwd.nnz * l->u.bag_bwd.D, &l->u.bag_bwd.dst, &l->u.bag_bwd.dst_rows, &l->u.bag_bwd.g,
                      &l->u.bag_bwd.D, &l->u.bag_bwd.off, &l->u.bag_bwd.occ, &l->u.bag_bwd.nnz);
}

static void trk_softmax_ce_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t s = 0, C = l->u.head.C; s < l->u.head.B; s++)
        l->u.head.per[s] =
            cm_softmax_ce_row(l->u.head.z + s * C, l->u.head.p + s * C, l->u.head.q + s * C, C, l->u.head.y[s]);
}

static size_t trk_softmax_ce_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.head.B, &l->u.head.z, &l->u.head.p, &l->u.head.q, &l->u.head.B, &l->u.head.C,
                      &l->u.head.y, &l->u.head.per);
}

static void trk_softmax_ce_bwd_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t s = 0, C = l->u.head.C; s < l->u.head.B; s++)
        cm_softmax_ce_bwd_row(l->u.head.p + s * C, l->u.head.q + s * C, l->u.head.dz + s * C, C, l->u.head.y[s],
                              l->u.head.invB);
}

static size_t trk_softmax_ce_bwd_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.head.B, &l->u.head.p, &l->u.head.q, &l->u.head.dz, &l->u.head.B, &l->u.head.C,
                      &l->u.head.y, &l->u.head.invB);
}

static void trk_ce_logits_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t i = 0, C = l->u.head.C; i < l->u.head.B; i++)
        l->u.head.per[i] =
            cm_ce_logits_row(l->u.head.z + i * C, l->u.head.dz + i * C, (int)C, l->u.head.y[i], (int)l->u.head.B);
}

static size_t trk_ce_logits_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.head.B, &l->u.head.z, &l->u.head.dz, &l->u.head.B, &l->u.head.C, &l->u.head.y,
                      &l->u.head.per);
}

static void trk_l1_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t k = 0; k < l->u.l1.n; k++) {
        l->u.l1.per[k] = cm_l1_loss(l->u.l1.v[k]);
        l->u.l1.dv[k] = cm_l1_grad(l->u.l1.v[k], l->u.l1.g);
    }
}

static size_t trk_l1_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.l1.n, &l->u.l1.v, &l->u.l1.dv, &l->u.l1.n, &l->u.l1.g, &l->u.l1.per);
}

static void trk_loss_sum_run(const void *launch)
{
    const trk_launch *l = launch;
    double sum = 0;
    for (size_t i = 0; i < l->u.sum.n; i++) {
        if (l->u.sum.negate)
            sum -= l->u.sum.per[i];
        else
            sum += l->u.sum.per[i];
    }
    *l->u.sum.loss = sum / l->u.sum.div;
}

static size_t trk_loss_sum_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, 1, &l->u.sum.loss, &l->u.sum.per, &l->u.sum.n, &l->u.sum.negate, &l->u.sum.div);
}

static void trk_sgd_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t k = 0; k < l->u.sgd.n; k++) {
        float step = l->u.sgd.g[k];
        if (l->u.sgd.mode == TRK_SGD_FIRST) {
            l->u.sgd.buf[k] = step;
        } else if (l->u.sgd.mode == TRK_SGD_MOMENTUM) {
            step = cm_momentum(l->u.sgd.momentum, l->u.sgd.buf[k], step);
            l->u.sgd.buf[k] = step;
        }
        l->u.sgd.w[k] = cm_sgd(l->u.sgd.w[k], l->u.sgd.nlr, step);
    }
}

static size_t trk_sgd_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.sgd.n, &l->u.sgd.w, &l->u.sgd.g, &l->u.sgd.buf, &l->u.sgd.n, &l->u.sgd.nlr,
                      &l->u.sgd.momentum, &l->u.sgd.mode);
}

static void trk_sgd_rows_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t e = 0; e < l->u.sgd_rows.nu * l->u.sgd_rows.cols; e++) {
        size_t cols = l->u.sgd_rows.cols, u = e / cols, j = e % cols;
        float *p = l->u.sgd_rows.table + (size_t)l->u.sgd_rows.urows[u] * cols + j;
        float w = *p;
        for (uint32_t o = l->u.sgd_rows.off[u]; o < l->u.sgd_rows.off[u + 1]; o++)
            w = cm_sgd(w, l->u.sgd_rows.nlr, l->u.sgd_rows.vals[(size_t)l->u.sgd_rows.occ[o] * cols + j]);
        *p = w;
    }
}

static size_t trk_sgd_rows_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.sgd_rows.nu * l->u.sgd_rows.cols, &l->u.sgd_rows.table, &l->u.sgd_rows.cols,
                      &l->u.sgd_rows.urows, &l->u.sgd_rows.off, &l->u.sgd_rows.occ, &l->u.sgd_rows.vals,
                      &l->u.sgd_rows.nu, &l->u.sgd_rows.nlr);
}

static void trk_first_ne_run(const void *launch)
{
    const trk_launch *l = launch;
    for (size_t k = 0; k < l->u.ne.n; k++)
        if (!(l->u.ne.a[k] == l->u.ne.b[k]) && k < *l->u.ne.first) {
            *l->u.ne.first = k;
            break; /* the lowest, in order */
        }
}

static size_t trk_first_ne_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.ne.n, &l->u.ne.a, &l->u.ne.b, &l->u.ne.n, &l->u.ne.first);
}

static void trk_narrow_run(const void *launch)
{
    const trk_launch *l = launch;
    uint16_t *dst = l->u.half.dst;
    const float *src = l->u.half.src;
    for (size_t k = 0; k < l->u.half.n; k++)
        dst[k] = he_narrow(l->u.half.bf, src[k]);
}

static size_t trk_narrow_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.half.n, &l->u.half.dst, &l->u.half.src, &l->u.half.n, &l->u.half.bf);
}

static void trk_widen_run(const void *launch)
{
    const trk_launch *l = launch;
    float *dst = l->u.half.dst;
    const uint16_t *src = l->u.half.src;
    for (size_t k = 0; k < l->u.half.n; k++)
        dst[k] = he_widen(l->u.half.bf, src[k]);
}

static size_t trk_widen_args(const void *launch, void **a)
{
    const trk_launch *l = launch;
    return CUGPU_ARGS(a, l->u.half.n, &l->u.half.dst, &l->u.half.src, &l->u.half.n, &l->u.half.bf);
}

static void trk_gemm_run(const void *launch)
{
    const trk_launch *l = launch;
    cblas_sgemm(CblasRowMajor, l->u.gemm.ta ? CblasTrans : CblasNoTrans, l->u.gemm.tb ? CblasTrans : CblasNoTrans,
                l->u.gemm.M, l->u.gemm.N, l->u.gemm.K, l->u.gemm.alpha, l->u.gemm.A, l->u.gemm.lda, l->u.gemm.B,
                l->u.gemm.ldb, l->u.gemm.beta, l->u.gemm.C, l->u.gemm.ldc);
}

/* cuBLAS on the stream: row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, the same memory read with the roles swapped. */
static int th_library(const void *launch, void *stream, char *err, size_t errlen)
{
    const trk_launch *l = launch;
    assert(l->kernel == TRK_L_GEMM); /* the one library row */
#ifdef PSBENCH_HAVE_CUDA
    const cublas_api *bl = l->u.gemm.api;
    cublasHandle_t h = l->u.gemm.handle;
    cublasStatus_t st = bl->cublasSetStream(h, (cudaStream_t)stream);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = bl->cublasSgemm(h, l->u.gemm.tb ? CUBLAS_OP_T : CUBLAS_OP_N, l->u.gemm.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                             l->u.gemm.N, l->u.gemm.M, l->u.gemm.K, &l->u.gemm.alpha, l->u.gemm.B, l->u.gemm.ldb,
                             l->u.gemm.A, l->u.gemm.lda, &l->u.gemm.beta, l->u.gemm.C, l->u.gemm.ldc);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasSgemm: cuBLAS status %d", (int)st);
        return -1;
    }
    return 0;
#else
    (void)stream;
    snprintf(err, errlen, "this build has no cuBLAS");
    return -1;
#endif
}

static const cugpu_kernel th_table[TRK_K_COUNT] = {TRK_KERNELS(CUGPU_KERNEL_ROW, CUGPU_LIBRARY_ROW)};

const cugpu_kernels trk_kernels = {
    .what = "the trainer's kernels",
#ifdef PSBENCH_HAVE_TRAINER_KERNELS
    .fatbin = trk_kernels_fatbin,
    .archs = PSBENCH_CUDA_ARCHS,
#else
    .fatbin = NULL,
    .archs = "none",
#endif
    .table = th_table,
    .count = TRK_K_COUNT,
    .launch_size = sizeof(trk_launch),
    .library = th_library,
};
