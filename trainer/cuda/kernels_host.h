/* kernels_host.h — the trainer's kernels (kernels.h) as the GPU layer
 * (shared/cugpu.h) runs them: one launch described as a trk_launch, and
 * trk_kernels, the table the cuda compute layer (trainer/compute_cuda.c)
 * gives cugpu_cuda_new (the embedded fatbin, cuBLAS for the products) and
 * cugpu_fake_new (the same loops on the host, cblas_sgemm). */
#ifndef PSBENCH_TRAINER_CUDA_KERNELS_HOST_H
#define PSBENCH_TRAINER_CUDA_KERNELS_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "shared/gpu/cugpu.h"
#include "trainer/cuda/kernels.h"

/* One launch: which (TRK_K_*, or TRK_L_GEMM) and its arguments, as
 * kernels.cu takes them (device pointers). */
typedef struct trk_launch {
    int kernel;
    union {
        struct {
            uint32_t *p;
            size_t words;
        } zero;
        struct { /* bias_rows (src unused), transpose_bias */
            float *y;
            const float *src, *bias;
            size_t rows, cols;
        } bias;
        struct {
            float *dst;
            const float *src;
            size_t rows, cols;
            int from_row0;
        } colsum;
        struct { /* relu: y = relu(x); relu_bwd: y = dy, x = pre */
            float *y;
            const float *x;
            size_t n;
        } relu;
        struct {
            float *out;
            const float *table;
            size_t D;
            const int64_t *idx;
            size_t B, L;
        } bag;
        struct {
            float *g;
            size_t n;
            float d;
        } scale;
        struct {
            float *dst;
            const int64_t *dst_rows; /* NULL: compact rows */
            const float *g;
            size_t D;
            const uint32_t *off, *occ;
            size_t nnz;
        } bag_bwd;
        struct { /* softmax_ce, softmax_ce_bwd (dz, invB), ce_logits (z, dz, per) */
            const float *z;
            float *p, *q, *dz;
            size_t B, C;
            const int64_t *y;
            double *per;
            float invB;
        } head;
        struct {
            const float *v;
            float *dv;
            size_t n;
            float g;
            double *per;
        } l1;
        struct {
            const float *a, *b;
            size_t n;
            unsigned long long *first;
        } ne;
        struct {
            double *loss;
            const double *per;
            size_t n;
            int negate;
            double div;
        } sum;
        struct {
            float *w;
            const float *g;
            float *buf;
            size_t n;
            float nlr, momentum;
            int mode; /* TRK_SGD_* */
        } sgd;
        struct {
            float *table;
            size_t cols;
            const int64_t *urows;
            const uint32_t *off, *occ;
            const float *vals;
            size_t nu;
            float nlr;
        } sgd_rows;
        struct { /* row-major C = alpha op(A) op(B) + beta C, M x K times K x N */
            int ta, tb, M, N, K, lda, ldb, ldc;
            float alpha, beta;
            const float *A, *B;
            float *C;
            /* the real GPU's cuBLAS (a cublasHandle_t and the loaded
             * cublas_api); unused on the fake GPU */
            void *handle;
            const void *api;
        } gemm;
        struct { /* trk_narrow: src f32, dst 16-bit; trk_widen: the other way */
            void *dst;
            const void *src;
            size_t n;
            int bf;
        } half;
    } u;
} trk_launch;

extern const cugpu_kernels trk_kernels;

#endif
