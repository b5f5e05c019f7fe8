/* kernels_host.h — the server's kernels (kernels.h) as the GPU layer
 * (shared/cugpu.h) runs them: one launch described as a psb_launch, and
 * psb_kernels, the table that the cuda device gives cugpu_cuda_new (the
 * embedded fatbin) and cugpu_fake_new (the same loops on the host). */
#ifndef PSBENCH_CUDA_KERNELS_HOST_H
#define PSBENCH_CUDA_KERNELS_HOST_H

#include <stddef.h>

#include "server/cuda/kernels.h"
#include "shared/gpu/cugpu.h"

/* One kernel launch: which (PSB_K_*) and its arguments, as kernels.cu
 * takes them (device pointers; srcs is a device array of device
 * pointers). */
typedef struct psb_launch {
    int kernel;
    union {
        struct {
            int op; /* PSB_FOLD_* */
            float *acc;
            const float *src;
            size_t n;
            float s;
        } fold;
        struct {
            const psb_fold_desc *descs; /* device memory */
            const psb_fold_chain *chains;
            unsigned nchains;
        } batch;
        struct {
            float *dst;
            const float *const *srcs;
            unsigned nsrc;
            size_t n;
            float scale;
            int vec; /* dst and every source 16-byte aligned: float4 accesses */
        } sum;
        struct {
            float *param, *buf;
            const float *const *srcs;
            unsigned nsrc;
            size_t n;
            float scale, lr, momentum;
            int first;
            float *out; /* NULL: none */
        } sgd;
        struct {
            float *table; /* the table (gather reads it, scatter steps it); bag_grad: the gradient it sums into */
            size_t cols;
            const int64_t *idx, *off;
            size_t nnz, bags;
            float *out;        /* gather */
            const float *grad; /* scatter, bag_grad */
            float lr;          /* scatter */
        } bags;
        struct {
            float *table;      /* zero: the buffer zeroed; dense_sgd: the table stepped */
            const float *gsum; /* dense_sgd: the table's gradient */
            size_t n;
            float lr;          /* dense_sgd */
        } dense;
        struct {
            int op, bf; /* PSB_FOLD_ADD_SCALE or PSB_FOLD_COPY_SCALE; bf16 or fp16 */
            uint16_t *out;
            const float *acc;
            const uint16_t *src;
            size_t n;
            float s;
        } narrow;
        struct {
            int op, bf;    /* PSB_FOLD_ADD or PSB_FOLD_ADD_SCALE; bf16 or fp16 */
            float *acc;    /* PSB_FOLD_ADD's output */
            uint16_t *out; /* PSB_FOLD_ADD_SCALE's */
            const uint16_t *stash, *src;
            size_t n;
            float s;
        } pair;
        struct { /* psb_scatter_sgd: the lookup's rows grouped (shared/rowgroup.h) */
            float *table;
            size_t cols;
            const int64_t *urows;
            const uint32_t *uoff, *occ; /* occ: the bag of each occurrence */
            size_t nu;
            const float *grad;
            float lr;
        } rows;
        struct {
            int op, bf; /* any PSB_FOLD_*; bf16 or fp16 */
            float *acc;
            const uint16_t *src;
            size_t n;
            float s;
        } widen;
    } u;
} psb_launch;


extern const cugpu_kernels psb_kernels;

#endif
