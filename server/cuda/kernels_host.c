/* kernels_host.c — the server's kernels as shared/cugpu.h runs them (see
 * kernels_host.h): their arguments for cudaLaunchKernel, and on the fake
 * GPU the same loops on the host with cumath.h's arithmetic (the same bits
 * as kernels.cu's). */
#include "server/cuda/kernels_host.h"
#include "server/cuda/cumath.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>


static size_t kh_bag_end(const int64_t *off, size_t bags, size_t nnz, size_t b)
{
    return b + 1 < bags ? (size_t)off[b + 1] : nnz;
}

/* Column by column, each bag b in order, each of its positions in order:
 * the named row's element c takes bag b's gradient — an SGD step (scatter
 * SGD) or a sum (the dense rule's gradient): their kernels' order. */
static void kh_bags_apply(const psb_launch *l, bool step)
{
    for (size_t c = 0; c < l->u.bags.cols; c++)
        for (size_t b = 0; b < l->u.bags.bags; b++) {
            float g = l->u.bags.grad[b * l->u.bags.cols + c];
            for (size_t i = (size_t)l->u.bags.off[b], end = kh_bag_end(l->u.bags.off, l->u.bags.bags, l->u.bags.nnz, b);
                 i < end; i++) {
                float *e = &l->u.bags.table[(size_t)l->u.bags.idx[i] * l->u.bags.cols + c];
                *e = step ? cumath_scatter_step(*e, g, l->u.bags.lr) : cumath_add(*e, g);
            }
        }
}

static void kh_run(const psb_launch *l)
{
    switch (l->kernel) {
    case PSB_K_FOLD: {
        float *acc = l->u.fold.acc;
        const float *x = l->u.fold.src;
        for (size_t i = 0; i < l->u.fold.n; i++)
            acc[i] = l->u.fold.op == PSB_FOLD_COPY        ? x[i]
                     : l->u.fold.op == PSB_FOLD_ADD       ? cumath_fold_add(acc[i], x[i])
                     : l->u.fold.op == PSB_FOLD_ADD_SCALE ? cumath_fold_add_scale(acc[i], x[i], l->u.fold.s)
                                                          : cumath_fold_copy_scale(x[i], l->u.fold.s);
        break;
    }
    case PSB_K_FOLD_BATCH:
        for (unsigned c = 0; c < l->u.batch.nchains; c++) {
            psb_fold_chain ch = l->u.batch.chains[c];
            for (uint32_t k = 0; k < ch.count; k++) {
                psb_fold_desc d = l->u.batch.descs[ch.first + k];
                psb_launch one = {.kernel = PSB_K_FOLD};
                one.u.fold.op = d.op;
                one.u.fold.acc = d.acc;
                one.u.fold.src = d.src;
                one.u.fold.n = (size_t)d.n;
                one.u.fold.s = d.s;
                kh_run(&one);
            }
        }
        break;
    case PSB_K_SUM_SCALE:
        for (size_t i = 0; i < l->u.sum.n; i++) {
            float acc = l->u.sum.srcs[0][i];
            for (unsigned s = 1; s < l->u.sum.nsrc; s++)
                acc = cumath_add(acc, l->u.sum.srcs[s][i]);
            l->u.sum.dst[i] = cumath_mul(acc, l->u.sum.scale);
        }
        break;
    case PSB_K_SGD:
        for (size_t i = 0; i < l->u.sgd.n; i++) {
            float g = l->u.sgd.srcs[0][i];
            for (unsigned s = 1; s < l->u.sgd.nsrc; s++)
                g = cumath_add(g, l->u.sgd.srcs[s][i]);
            cumath_sgd(&l->u.sgd.param[i], &l->u.sgd.buf[i], cumath_mul(g, l->u.sgd.scale), l->u.sgd.lr,
                       l->u.sgd.momentum, l->u.sgd.first);
            if (l->u.sgd.out)
                l->u.sgd.out[i] = l->u.sgd.param[i];
        }
        break;
    case PSB_K_GATHER:
        for (size_t b = 0; b < l->u.bags.bags; b++)
            for (size_t c = 0; c < l->u.bags.cols; c++) {
                float sum = 0.0f;
                for (size_t i = (size_t)l->u.bags.off[b], end = kh_bag_end(l->u.bags.off, l->u.bags.bags,
                                                                             l->u.bags.nnz, b);
                     i < end; i++)
                    sum = cumath_add(sum, l->u.bags.table[(size_t)l->u.bags.idx[i] * l->u.bags.cols + c]);
                l->u.bags.out[b * l->u.bags.cols + c] = sum;
            }
        break;
    case PSB_K_SCATTER_SGD:
        kh_bags_apply(l, true);
        break;
    case PSB_K_ZERO:
        for (size_t i = 0; i < l->u.dense.n; i++)
            l->u.dense.table[i] = 0.0f;
        break;
    case PSB_K_BAG_GRAD:
        kh_bags_apply(l, false);
        break;
    case PSB_K_DENSE_SGD:
        for (size_t i = 0; i < l->u.dense.n; i++)
            l->u.dense.table[i] = cumath_scatter_step(l->u.dense.table[i], l->u.dense.gsum[i], l->u.dense.lr);
        break;
    default:
        assert(!"unknown kernel");
    }
}

static void kh_host_run(const void *launch) { kh_run(launch); }

/* cudaLaunchKernel's arguments: pointers into the launch (which the caller
 * keeps until the launch call returns), in the order of kernels.h's
 * prototypes; *work, the threads' worth of work. */
static int kh_args(const void *launch, void **a, size_t *work)
{
    /* The kernels take pointers to their arguments, never write them. */
    psb_launch *l = (psb_launch *)(uintptr_t)launch;
    switch (l->kernel) {
    case PSB_K_FOLD:
        a[0] = &l->u.fold.op;
        a[1] = &l->u.fold.acc;
        a[2] = &l->u.fold.src;
        a[3] = &l->u.fold.n;
        a[4] = &l->u.fold.s;
        *work = l->u.fold.n / 4 + 1;
        break;
    case PSB_K_FOLD_BATCH:
        a[0] = &l->u.batch.descs;
        a[1] = &l->u.batch.chains;
        a[2] = &l->u.batch.nchains;
        *work = (size_t)l->u.batch.nchains * 256; /* a block per chain */
        break;
    case PSB_K_SUM_SCALE:
        a[0] = &l->u.sum.dst;
        a[1] = &l->u.sum.srcs;
        a[2] = &l->u.sum.nsrc;
        a[3] = &l->u.sum.n;
        a[4] = &l->u.sum.scale;
        *work = l->u.sum.n;
        break;
    case PSB_K_SGD:
        a[0] = &l->u.sgd.param;
        a[1] = &l->u.sgd.buf;
        a[2] = &l->u.sgd.srcs;
        a[3] = &l->u.sgd.nsrc;
        a[4] = &l->u.sgd.n;
        a[5] = &l->u.sgd.scale;
        a[6] = &l->u.sgd.lr;
        a[7] = &l->u.sgd.momentum;
        a[8] = &l->u.sgd.first;
        a[9] = &l->u.sgd.out;
        *work = l->u.sgd.n;
        break;
    case PSB_K_GATHER:
        a[0] = &l->u.bags.out;
        a[1] = &l->u.bags.table;
        a[2] = &l->u.bags.cols;
        a[3] = &l->u.bags.idx;
        a[4] = &l->u.bags.off;
        a[5] = &l->u.bags.nnz;
        a[6] = &l->u.bags.bags;
        *work = l->u.bags.bags * l->u.bags.cols;
        break;
    case PSB_K_SCATTER_SGD:
        a[0] = &l->u.bags.table;
        a[1] = &l->u.bags.cols;
        a[2] = &l->u.bags.idx;
        a[3] = &l->u.bags.off;
        a[4] = &l->u.bags.nnz;
        a[5] = &l->u.bags.bags;
        a[6] = &l->u.bags.grad;
        a[7] = &l->u.bags.lr;
        *work = l->u.bags.cols;
        break;
    case PSB_K_ZERO:
        a[0] = &l->u.dense.table;
        a[1] = &l->u.dense.n;
        *work = l->u.dense.n;
        break;
    case PSB_K_BAG_GRAD:
        a[0] = &l->u.bags.table;
        a[1] = &l->u.bags.cols;
        a[2] = &l->u.bags.idx;
        a[3] = &l->u.bags.off;
        a[4] = &l->u.bags.nnz;
        a[5] = &l->u.bags.bags;
        a[6] = &l->u.bags.grad;
        *work = l->u.bags.cols;
        break;
    case PSB_K_DENSE_SGD:
        a[0] = &l->u.dense.table;
        a[1] = &l->u.dense.gsum;
        a[2] = &l->u.dense.n;
        a[3] = &l->u.dense.lr;
        *work = l->u.dense.n / 4 + 1;
        break;
    default:
        return -1;
    }
    return l->kernel;
}

static const char *const kh_names[] = {PSB_KERNEL_NAMES};

const cugpu_kernels psb_kernels = {
    .what = "the server's kernels",
#ifdef PSBENCH_HAVE_KERNELS
    .fatbin = psb_kernels_fatbin,
    .archs = PSBENCH_CUDA_ARCHS,
#else
    .fatbin = NULL,
    .archs = "none",
#endif
    .names = kh_names,
    .count = PSB_K_COUNT,
    .launch_size = sizeof(psb_launch),
    .args = kh_args,
    .host_run = kh_host_run,
    .library = NULL, /* no library calls */
};
