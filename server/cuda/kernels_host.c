/* kernels_host.c — the server's kernels as shared/cugpu.h runs them (see
 * kernels_host.h): their arguments for cudaLaunchKernel, and on the fake
 * GPU the same loops on the host with cumath.h's arithmetic (the same bits
 * as kernels.cu's). */
#include "server/cuda/kernels_host.h"
#include "server/cuda/cumath.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

/* Each kernel's host loops (<name>_run) and cudaLaunchKernel's arguments
 * (<name>_args: pointers into the launch, which the caller keeps until the
 * launch call returns, in the order of kernels.h's prototypes, and the
 * threads' worth of work). */

static void psb_fold_one(int op, float *acc, const float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        acc[i] = op == PSB_FOLD_COPY        ? x[i]
                 : op == PSB_FOLD_ADD       ? cumath_fold_add(acc[i], x[i])
                 : op == PSB_FOLD_ADD_SCALE ? cumath_fold_add_scale(acc[i], x[i], s)
                                            : cumath_fold_copy_scale(x[i], s);
}

static void psb_fold_run(const void *launch)
{
    const psb_launch *l = launch;
    psb_fold_one(l->u.fold.op, l->u.fold.acc, l->u.fold.src, l->u.fold.n, l->u.fold.s);
}

static size_t psb_fold_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.fold.n / 4 + 1, &l->u.fold.op, &l->u.fold.acc, &l->u.fold.src, &l->u.fold.n,
                      &l->u.fold.s);
}

static void psb_fold_batch_run(const void *launch)
{
    const psb_launch *l = launch;
    for (unsigned c = 0; c < l->u.batch.nchains; c++) {
        psb_fold_chain ch = l->u.batch.chains[c];
        for (uint32_t k = 0; k < ch.count; k++) {
            psb_fold_desc d = l->u.batch.descs[ch.first + k];
            psb_fold_one(d.op, d.acc, d.src, (size_t)d.n, d.s);
        }
    }
}

static size_t psb_fold_batch_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, (size_t)l->u.batch.nchains * 256 /* a block per chain */, &l->u.batch.descs,
                      &l->u.batch.chains, &l->u.batch.nchains);
}

static void psb_sum_scale_run(const void *launch)
{
    const psb_launch *l = launch;
    for (size_t i = 0; i < l->u.sum.n; i++) {
        float acc = l->u.sum.srcs[0][i];
        for (unsigned s = 1; s < l->u.sum.nsrc; s++)
            acc = cumath_add(acc, l->u.sum.srcs[s][i]);
        l->u.sum.dst[i] = cumath_mul(acc, l->u.sum.scale);
    }
}

static size_t psb_sum_scale_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    /* vec: a thread per four floats */
    return CUGPU_ARGS(a, l->u.sum.vec ? l->u.sum.n / 4 + 1 : l->u.sum.n, &l->u.sum.dst, &l->u.sum.srcs, &l->u.sum.nsrc,
                      &l->u.sum.n, &l->u.sum.scale, &l->u.sum.vec);
}

static void psb_sgd_run(const void *launch)
{
    const psb_launch *l = launch;
    for (size_t i = 0; i < l->u.sgd.n; i++) {
        float g = l->u.sgd.srcs[0][i];
        for (unsigned s = 1; s < l->u.sgd.nsrc; s++)
            g = cumath_add(g, l->u.sgd.srcs[s][i]);
        cumath_sgd(&l->u.sgd.param[i], &l->u.sgd.buf[i], cumath_mul(g, l->u.sgd.scale), l->u.sgd.lr, l->u.sgd.momentum,
                   l->u.sgd.first);
        if (l->u.sgd.out)
            l->u.sgd.out[i] = l->u.sgd.param[i];
    }
}

static size_t psb_sgd_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.sgd.n, &l->u.sgd.param, &l->u.sgd.buf, &l->u.sgd.srcs, &l->u.sgd.nsrc, &l->u.sgd.n,
                      &l->u.sgd.scale, &l->u.sgd.lr, &l->u.sgd.momentum, &l->u.sgd.first, &l->u.sgd.out);
}

static size_t kh_bag_end(const int64_t *off, size_t bags, size_t nnz, size_t b)
{
    return b + 1 < bags ? (size_t)off[b + 1] : nnz;
}

static void psb_gather_run(const void *launch)
{
    const psb_launch *l = launch;
    for (size_t b = 0; b < l->u.bags.bags; b++)
        for (size_t c = 0; c < l->u.bags.cols; c++) {
            float sum = 0.0f;
            for (size_t i = (size_t)l->u.bags.off[b], end = kh_bag_end(l->u.bags.off, l->u.bags.bags, l->u.bags.nnz, b);
                 i < end; i++)
                sum = cumath_add(sum, l->u.bags.table[(size_t)l->u.bags.idx[i] * l->u.bags.cols + c]);
            l->u.bags.out[b * l->u.bags.cols + c] = sum;
        }
}

static size_t psb_gather_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.bags.bags * l->u.bags.cols, &l->u.bags.out, &l->u.bags.table, &l->u.bags.cols,
                      &l->u.bags.idx, &l->u.bags.off, &l->u.bags.nnz, &l->u.bags.bags);
}

/* Column by column, each bag b in order, each of its positions in order:
 * the named row's element c adds bag b's gradient (the dense rule's
 * gradient): its kernel's order. */
static void psb_bag_grad_run(const void *launch)
{
    const psb_launch *l = launch;
    for (size_t c = 0; c < l->u.bags.cols; c++)
        for (size_t b = 0; b < l->u.bags.bags; b++) {
            float g = l->u.bags.grad[b * l->u.bags.cols + c];
            for (size_t i = (size_t)l->u.bags.off[b], end = kh_bag_end(l->u.bags.off, l->u.bags.bags, l->u.bags.nnz, b);
                 i < end; i++) {
                float *e = &l->u.bags.table[(size_t)l->u.bags.idx[i] * l->u.bags.cols + c];
                *e = cumath_add(*e, g);
            }
        }
}

/* Row by row, column by column, each row's occurrences in order: the
 * kernel's threads one after another. */
static void psb_scatter_sgd_run(const void *launch)
{
    const psb_launch *l = launch;
    size_t cols = l->u.rows.cols;
    for (size_t u = 0; u < l->u.rows.nu; u++)
        for (size_t c = 0; c < cols; c++) {
            float *e = &l->u.rows.table[(size_t)l->u.rows.urows[u] * cols + c];
            for (uint32_t k = l->u.rows.uoff[u]; k < l->u.rows.uoff[u + 1]; k++)
                *e = cumath_scatter_step(*e, l->u.rows.grad[(size_t)l->u.rows.occ[k] * cols + c], l->u.rows.lr);
        }
}

static size_t psb_scatter_sgd_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.rows.nu * l->u.rows.cols, &l->u.rows.table, &l->u.rows.cols, &l->u.rows.urows,
                      &l->u.rows.uoff, &l->u.rows.occ, &l->u.rows.nu, &l->u.rows.grad, &l->u.rows.lr);
}

static size_t psb_bag_grad_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.bags.cols, &l->u.bags.table, &l->u.bags.cols, &l->u.bags.idx, &l->u.bags.off,
                      &l->u.bags.nnz, &l->u.bags.bags, &l->u.bags.grad);
}

static void psb_zero_run(const void *launch)
{
    const psb_launch *l = launch;
    for (size_t i = 0; i < l->u.dense.n; i++)
        l->u.dense.table[i] = 0.0f;
}

static size_t psb_zero_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.dense.n, &l->u.dense.table, &l->u.dense.n);
}

static void psb_dense_sgd_run(const void *launch)
{
    const psb_launch *l = launch;
    for (size_t i = 0; i < l->u.dense.n; i++)
        l->u.dense.table[i] = cumath_scatter_step(l->u.dense.table[i], l->u.dense.gsum[i], l->u.dense.lr);
}

static size_t psb_dense_sgd_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.dense.n / 4 + 1, &l->u.dense.table, &l->u.dense.gsum, &l->u.dense.n, &l->u.dense.lr);
}

static void psb_fold_narrow_out_run(const void *launch)
{
    const psb_launch *l = launch;
    const int add = l->u.narrow.op == PSB_FOLD_ADD_SCALE;
    for (size_t i = 0; i < l->u.narrow.n; i++)
        l->u.narrow.out[i] =
            cumath_fold_narrow_out(add, l->u.narrow.acc[i], l->u.narrow.src[i], l->u.narrow.s, l->u.narrow.bf);
}

static size_t psb_fold_narrow_out_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.narrow.n, &l->u.narrow.op, &l->u.narrow.bf, &l->u.narrow.out, &l->u.narrow.acc,
                      &l->u.narrow.src, &l->u.narrow.n, &l->u.narrow.s);
}

static void psb_fold_narrow_pair_run(const void *launch)
{
    const psb_launch *l = launch;
    const int bf = l->u.pair.bf;
    for (size_t i = 0; i < l->u.pair.n; i++) {
        if (l->u.pair.op == PSB_FOLD_ADD)
            l->u.pair.acc[i] = cumath_pair_sum(he_widen(bf, l->u.pair.stash[i]), he_widen(bf, l->u.pair.src[i]));
        else
            l->u.pair.out[i] = cumath_pair_mean_narrow(l->u.pair.stash[i], l->u.pair.src[i], l->u.pair.s, bf);
    }
}

static size_t psb_fold_narrow_pair_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.pair.n, &l->u.pair.op, &l->u.pair.bf, &l->u.pair.acc, &l->u.pair.out, &l->u.pair.stash,
                      &l->u.pair.src, &l->u.pair.n, &l->u.pair.s);
}

static void psb_fold_narrow_in_run(const void *launch)
{
    const psb_launch *l = launch;
    for (size_t i = 0; i < l->u.widen.n; i++) {
        float x = he_widen(l->u.widen.bf, l->u.widen.src[i]);
        psb_fold_one(l->u.widen.op, &l->u.widen.acc[i], &x, 1, l->u.widen.s);
    }
}

static size_t psb_fold_narrow_in_args(const void *launch, void **a)
{
    const psb_launch *l = launch;
    return CUGPU_ARGS(a, l->u.widen.n, &l->u.widen.op, &l->u.widen.bf, &l->u.widen.acc, &l->u.widen.src, &l->u.widen.n,
                      &l->u.widen.s);
}

static const cugpu_kernel kh_table[PSB_K_COUNT] = {PSB_KERNELS(CUGPU_KERNEL_ROW)};

const cugpu_kernels psb_kernels = {
    .what = "the server's kernels",
#ifdef PSBENCH_HAVE_KERNELS
    .fatbin = psb_kernels_fatbin,
    .archs = PSBENCH_CUDA_ARCHS,
#else
    .fatbin = NULL,
    .archs = "none",
#endif
    .table = kh_table,
    .count = PSB_K_COUNT,
    .launch_size = sizeof(psb_launch),
    .library = NULL, /* no library calls */
};
