/* kernels_host.c — the trainer's kernels as shared/cugpu.h runs them (see
 * kernels_host.h): their arguments for cudaLaunchKernel, the products as
 * cuBLAS calls on the GPU's stream, and on the fake GPU the same loops on
 * the host with cmath.h's arithmetic (the kernels' bits, and the cpu
 * layer's: trainer/compute_cpu.c) and cblas_sgemm for the products (the
 * cpu layer's call). */
#include "trainer/cuda/kernels_host.h"
#include "trainer/cmath.h"

#include <assert.h>
#include <cblas.h>
#include <stdio.h>
#include <stdint.h>

#ifdef PSBENCH_HAVE_CUDA
#include "shared/gpu/cudaload.h"
#endif

/* Each loop is kernels.cu's, one item at a time in order (every item is
 * independent of the others, so the order of items changes no bits). */
static void th_run(const trk_launch *l)
{
    switch (l->kernel) {
    case TRK_K_ZERO:
        for (size_t i = 0; i < l->u.zero.words; i++)
            l->u.zero.p[i] = 0;
        break;
    case TRK_K_BIAS_ROWS:
        for (size_t i = 0; i < l->u.bias.rows * l->u.bias.cols; i++)
            l->u.bias.y[i] = l->u.bias.bias[i % l->u.bias.cols];
        break;
    case TRK_K_TRANSPOSE_BIAS:
        for (size_t e = 0; e < l->u.bias.rows * l->u.bias.cols; e++) {
            size_t i = e / l->u.bias.cols, j = e % l->u.bias.cols;
            l->u.bias.y[e] = l->u.bias.src[j * l->u.bias.rows + i] + l->u.bias.bias[j];
        }
        break;
    case TRK_K_COLSUM:
        for (size_t j = 0; j < l->u.colsum.cols; j++) {
            const float *src = l->u.colsum.src;
            float d = l->u.colsum.from_row0 ? src[j] : 0.0f;
            for (size_t i = l->u.colsum.from_row0 ? 1 : 0; i < l->u.colsum.rows; i++)
                d += src[i * l->u.colsum.cols + j];
            l->u.colsum.dst[j] = d;
        }
        break;
    case TRK_K_RELU:
        for (size_t i = 0; i < l->u.relu.n; i++)
            l->u.relu.y[i] = cm_relu(l->u.relu.x[i]);
        break;
    case TRK_K_RELU_BWD:
        for (size_t i = 0; i < l->u.relu.n; i++)
            l->u.relu.y[i] = cm_relu_bwd(l->u.relu.x[i], l->u.relu.y[i]);
        break;
    case TRK_K_BAG_MEAN:
        for (size_t e = 0; e < l->u.bag.B * l->u.bag.D; e++) {
            size_t s = e / l->u.bag.D, k = e % l->u.bag.D;
            float o = 0.0f;
            for (size_t t = 0; t < l->u.bag.L; t++)
                o += l->u.bag.table[(size_t)l->u.bag.idx[s * l->u.bag.L + t] * l->u.bag.D + k];
            l->u.bag.out[e] = o / (float)l->u.bag.L;
        }
        break;
    case TRK_K_SCALE_DIV:
        for (size_t i = 0; i < l->u.scale.n; i++)
            l->u.scale.g[i] /= l->u.scale.d;
        break;
    case TRK_K_BAG_BWD:
        for (size_t e = 0; e < l->u.bag_bwd.nnz * l->u.bag_bwd.D; e++) {
            size_t D = l->u.bag_bwd.D, u = e / D, k = e % D;
            float acc = 0.0f;
            for (uint32_t o = l->u.bag_bwd.off[u]; o < l->u.bag_bwd.off[u + 1]; o++)
                acc += l->u.bag_bwd.g[(size_t)l->u.bag_bwd.occ[o] * D + k];
            size_t row = l->u.bag_bwd.dst_rows ? (size_t)l->u.bag_bwd.dst_rows[u] : u;
            l->u.bag_bwd.dst[row * D + k] = acc;
        }
        break;
    case TRK_K_SOFTMAX_CE:
        for (size_t s = 0, C = l->u.head.C; s < l->u.head.B; s++)
            l->u.head.per[s] = cm_softmax_ce_row(l->u.head.z + s * C, l->u.head.p + s * C, l->u.head.q + s * C, C,
                                                 l->u.head.y[s]);
        break;
    case TRK_K_SOFTMAX_CE_BWD:
        for (size_t s = 0, C = l->u.head.C; s < l->u.head.B; s++)
            cm_softmax_ce_bwd_row(l->u.head.p + s * C, l->u.head.q + s * C, l->u.head.dz + s * C, C, l->u.head.y[s],
                                  l->u.head.invB);
        break;
    case TRK_K_CE_LOGITS:
        for (size_t i = 0, C = l->u.head.C; i < l->u.head.B; i++)
            l->u.head.per[i] = cm_ce_logits_row(l->u.head.z + i * C, l->u.head.dz + i * C, (int)C, l->u.head.y[i],
                                                (int)l->u.head.B);
        break;
    case TRK_K_FIRST_NE:
        for (size_t k = 0; k < l->u.ne.n; k++)
            if (!(l->u.ne.a[k] == l->u.ne.b[k]) && k < *l->u.ne.first) {
                *l->u.ne.first = k;
                break; /* the lowest, in order */
            }
        break;
    case TRK_K_L1:
        for (size_t k = 0; k < l->u.l1.n; k++) {
            l->u.l1.per[k] = cm_l1_loss(l->u.l1.v[k]);
            l->u.l1.dv[k] = cm_l1_grad(l->u.l1.v[k], l->u.l1.g);
        }
        break;
    case TRK_K_LOSS_SUM: {
        double sum = 0;
        for (size_t i = 0; i < l->u.sum.n; i++) {
            if (l->u.sum.negate)
                sum -= l->u.sum.per[i];
            else
                sum += l->u.sum.per[i];
        }
        *l->u.sum.loss = sum / l->u.sum.div;
        break;
    }
    case TRK_K_SGD:
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
        break;
    case TRK_K_SGD_ROWS:
        for (size_t e = 0; e < l->u.sgd_rows.nu * l->u.sgd_rows.cols; e++) {
            size_t cols = l->u.sgd_rows.cols, u = e / cols, j = e % cols;
            float *p = l->u.sgd_rows.table + (size_t)l->u.sgd_rows.urows[u] * cols + j;
            float w = *p;
            for (uint32_t o = l->u.sgd_rows.off[u]; o < l->u.sgd_rows.off[u + 1]; o++)
                w = cm_sgd(w, l->u.sgd_rows.nlr, l->u.sgd_rows.vals[(size_t)l->u.sgd_rows.occ[o] * cols + j]);
            *p = w;
        }
        break;
    case TRK_L_GEMM:
        cblas_sgemm(CblasRowMajor, l->u.gemm.ta ? CblasTrans : CblasNoTrans, l->u.gemm.tb ? CblasTrans : CblasNoTrans,
                    l->u.gemm.M, l->u.gemm.N, l->u.gemm.K, l->u.gemm.alpha, l->u.gemm.A, l->u.gemm.lda, l->u.gemm.B,
                    l->u.gemm.ldb, l->u.gemm.beta, l->u.gemm.C, l->u.gemm.ldc);
        break;
    default:
        assert(!"unknown kernel");
    }
}

static void th_host_run(const void *launch) { th_run(launch); }

/* cuBLAS on the stream: row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, the same memory read with the roles swapped. */
static int th_library(const void *launch, void *stream, char *err, size_t errlen)
{
    const trk_launch *l = launch;
    if (l->kernel != TRK_L_GEMM)
        return 0;
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
    return 1;
#else
    (void)stream;
    snprintf(err, errlen, "this build has no cuBLAS");
    return -1;
#endif
}

/* cudaLaunchKernel's arguments: pointers into the launch (which the caller
 * keeps until the launch call returns), in the order of kernels.h's
 * prototypes; *work, the threads' worth of work. */
static int th_args(const void *launch, void **a, size_t *work)
{
    trk_launch *l = (trk_launch *)(uintptr_t)launch; /* the kernels never write their arguments */
    int n = 0;
#define ARG(x) (a[n++] = (void *)&(x))
    switch (l->kernel) {
    case TRK_K_ZERO:
        ARG(l->u.zero.p), ARG(l->u.zero.words);
        *work = l->u.zero.words;
        break;
    case TRK_K_BIAS_ROWS:
        ARG(l->u.bias.y), ARG(l->u.bias.bias), ARG(l->u.bias.rows), ARG(l->u.bias.cols);
        *work = l->u.bias.rows * l->u.bias.cols;
        break;
    case TRK_K_TRANSPOSE_BIAS:
        ARG(l->u.bias.y), ARG(l->u.bias.src), ARG(l->u.bias.bias), ARG(l->u.bias.rows), ARG(l->u.bias.cols);
        *work = l->u.bias.rows * l->u.bias.cols;
        break;
    case TRK_K_COLSUM:
        ARG(l->u.colsum.dst), ARG(l->u.colsum.src), ARG(l->u.colsum.rows), ARG(l->u.colsum.cols),
            ARG(l->u.colsum.from_row0);
        *work = l->u.colsum.cols;
        break;
    case TRK_K_RELU:
    case TRK_K_RELU_BWD:
        ARG(l->u.relu.y), ARG(l->u.relu.x), ARG(l->u.relu.n);
        *work = l->u.relu.n;
        break;
    case TRK_K_BAG_MEAN:
        ARG(l->u.bag.out), ARG(l->u.bag.table), ARG(l->u.bag.D), ARG(l->u.bag.idx), ARG(l->u.bag.B),
            ARG(l->u.bag.L);
        *work = l->u.bag.B * l->u.bag.D;
        break;
    case TRK_K_SCALE_DIV:
        ARG(l->u.scale.g), ARG(l->u.scale.n), ARG(l->u.scale.d);
        *work = l->u.scale.n;
        break;
    case TRK_K_BAG_BWD:
        ARG(l->u.bag_bwd.dst), ARG(l->u.bag_bwd.dst_rows), ARG(l->u.bag_bwd.g), ARG(l->u.bag_bwd.D),
            ARG(l->u.bag_bwd.off), ARG(l->u.bag_bwd.occ), ARG(l->u.bag_bwd.nnz);
        *work = l->u.bag_bwd.nnz * l->u.bag_bwd.D;
        break;
    case TRK_K_SOFTMAX_CE:
        ARG(l->u.head.z), ARG(l->u.head.p), ARG(l->u.head.q), ARG(l->u.head.B), ARG(l->u.head.C), ARG(l->u.head.y),
            ARG(l->u.head.per);
        *work = l->u.head.B;
        break;
    case TRK_K_SOFTMAX_CE_BWD:
        ARG(l->u.head.p), ARG(l->u.head.q), ARG(l->u.head.dz), ARG(l->u.head.B), ARG(l->u.head.C), ARG(l->u.head.y),
            ARG(l->u.head.invB);
        *work = l->u.head.B;
        break;
    case TRK_K_CE_LOGITS:
        ARG(l->u.head.z), ARG(l->u.head.dz), ARG(l->u.head.B), ARG(l->u.head.C), ARG(l->u.head.y), ARG(l->u.head.per);
        *work = l->u.head.B;
        break;
    case TRK_K_FIRST_NE:
        ARG(l->u.ne.a), ARG(l->u.ne.b), ARG(l->u.ne.n), ARG(l->u.ne.first);
        *work = l->u.ne.n;
        break;
    case TRK_K_L1:
        ARG(l->u.l1.v), ARG(l->u.l1.dv), ARG(l->u.l1.n), ARG(l->u.l1.g), ARG(l->u.l1.per);
        *work = l->u.l1.n;
        break;
    case TRK_K_LOSS_SUM:
        ARG(l->u.sum.loss), ARG(l->u.sum.per), ARG(l->u.sum.n), ARG(l->u.sum.negate), ARG(l->u.sum.div);
        *work = 1;
        break;
    case TRK_K_SGD:
        ARG(l->u.sgd.w), ARG(l->u.sgd.g), ARG(l->u.sgd.buf), ARG(l->u.sgd.n), ARG(l->u.sgd.nlr),
            ARG(l->u.sgd.momentum), ARG(l->u.sgd.mode);
        *work = l->u.sgd.n;
        break;
    case TRK_K_SGD_ROWS:
        ARG(l->u.sgd_rows.table), ARG(l->u.sgd_rows.cols), ARG(l->u.sgd_rows.urows), ARG(l->u.sgd_rows.off),
            ARG(l->u.sgd_rows.occ), ARG(l->u.sgd_rows.vals), ARG(l->u.sgd_rows.nu), ARG(l->u.sgd_rows.nlr);
        *work = l->u.sgd_rows.nu * l->u.sgd_rows.cols;
        break;
    default:
        return -1;
    }
#undef ARG
    (void)n;
    return l->kernel;
}

static const char *const th_names[] = {TRK_KERNEL_NAMES};

const cugpu_kernels trk_kernels = {
    .what = "the trainer's kernels",
#ifdef PSBENCH_HAVE_TRAINER_KERNELS
    .fatbin = trk_kernels_fatbin,
    .archs = PSBENCH_CUDA_ARCHS,
#else
    .fatbin = NULL,
    .archs = "none",
#endif
    .names = th_names,
    .count = TRK_K_COUNT,
    .launch_size = sizeof(trk_launch),
    .args = th_args,
    .host_run = th_host_run,
    .library = th_library,
};
