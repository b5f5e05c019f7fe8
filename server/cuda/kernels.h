/* kernels.h — the CUDA server's kernels as the host launches them: their
 * names in the fatbin (server/cuda/kernels.cu, extern "C") and the fold
 * ops' numbering, shared by both sides. The host finds a kernel by name
 * (cudaLibraryGetKernel) and passes its arguments in the order of the
 * prototypes below; a change here is a change on both sides. */
#ifndef PSBENCH_CUDA_KERNELS_H
#define PSBENCH_CUDA_KERNELS_H

#include <stdint.h>

/* psb_fold's op: the dense folds of server/device.h, per element
 * (cumath.h). */
enum { PSB_FOLD_COPY = 0, PSB_FOLD_ADD = 1, PSB_FOLD_ADD_SCALE = 2, PSB_FOLD_COPY_SCALE = 3 };

/* psb_fold_batch's arguments, laid out alike by the host (C) and the GPU:
 * the small folds (and copies) of one reactor iteration in one launch.
 * A chain is the folds into one buffer, in the order they were made: one
 * block applies them one after the other (so each element sees them in
 * that order, bit for bit as one psb_fold each); chains are independent. */
typedef struct psb_fold_desc {
    float *acc;
    const float *src;
    uint64_t n;
    int32_t op; /* PSB_FOLD_* */
    float s;
} psb_fold_desc;
typedef struct psb_fold_chain {
    uint32_t first, count; /* descs[first .. first + count) */
} psb_fold_chain;

/* The kernels, by name (arguments as in kernels.cu):
 *   psb_fold(int op, float *acc, const float *src, size_t n, float s)
 *   psb_fold_batch(const psb_fold_desc *descs, const psb_fold_chain *chains, unsigned nchains)
 *   psb_sum_scale(float *dst, const float *const *srcs, unsigned nsrc, size_t n, float scale, int vec)
 *       vec: dst and every source 16-byte aligned (float4 accesses; the same bits)
 *   psb_sgd(float *param, float *buf, const float *const *srcs, unsigned nsrc, size_t n, float scale,
 *           float lr, float momentum, int first, float *out)
 *   psb_gather(float *out, const float *table, size_t cols, const int64_t *idx, const int64_t *off,
 *              size_t nnz, size_t bags)
 *   psb_scatter_sgd(float *table, size_t cols, const int64_t *urows, const uint32_t *uoff, const uint32_t *occ,
 *                   size_t nu, const float *grad, float lr)
 *       the lookup's rows grouped (shared/rowgroup.h: occ the bag of each occurrence): a thread per (row, column)
 *   psb_zero(float *x, size_t n)
 *   psb_bag_grad(float *gsum, size_t cols, const int64_t *idx, const int64_t *off, size_t nnz, size_t bags,
 *                const float *grad)
 *   psb_dense_sgd(float *table, const float *gsum, size_t n, float lr)
 *   psb_fold_narrow_out(int op, int bf, uint16_t *out, const float *acc, const uint16_t *src, size_t n, float s)
 *       out[i] = cumath_fold_narrow_out(op == PSB_FOLD_ADD_SCALE, acc[i], src[i], s, bf): op is
 *       PSB_FOLD_ADD_SCALE or PSB_FOLD_COPY_SCALE, bf 1 for bf16, 0 for fp16 (a narrow push's last fold)
 *   psb_fold_narrow_pair(int op, int bf, float *acc, uint16_t *out, const uint16_t *stash, const uint16_t *src,
 *                        size_t n, float s)
 *       op PSB_FOLD_ADD: acc[i] = widen(stash[i]) + widen(src[i]); PSB_FOLD_ADD_SCALE:
 *       out[i] = cumath_pair_mean_narrow(stash[i], src[i], s, bf) (device.h, device_fold_narrow_pair)
 *   psb_fold_narrow_in(int op, int bf, float *acc, const uint16_t *src, size_t n, float s)
 *       acc[i] = op(acc[i], widen(src[i]), s), op any PSB_FOLD_* (device.h, device_fold_narrow)
 * (psb_zero, psb_bag_grad and psb_dense_sgd, in that order, are a dense embedding step: JOB_DENSE_SGD) */
/* Each kernel, named once: PSB_K_<ID> is its index in the host's table
 * (kernels_host.c: psb_kernels, a row per entry, its host functions
 * <name>_run and <name>_args), <name> its symbol in the fatbin. */
#define PSB_KERNELS(X)                                                                                                 \
    X(PSB_K_FOLD, psb_fold)                                                                                            \
    X(PSB_K_SUM_SCALE, psb_sum_scale)                                                                                  \
    X(PSB_K_SGD, psb_sgd)                                                                                              \
    X(PSB_K_GATHER, psb_gather)                                                                                        \
    X(PSB_K_SCATTER_SGD, psb_scatter_sgd)                                                                              \
    X(PSB_K_FOLD_BATCH, psb_fold_batch)                                                                                \
    X(PSB_K_ZERO, psb_zero)                                                                                            \
    X(PSB_K_BAG_GRAD, psb_bag_grad)                                                                                    \
    X(PSB_K_DENSE_SGD, psb_dense_sgd)                                                                                  \
    X(PSB_K_FOLD_NARROW_OUT, psb_fold_narrow_out)                                                                      \
    X(PSB_K_FOLD_NARROW_PAIR, psb_fold_narrow_pair)                                                                    \
    X(PSB_K_FOLD_NARROW_IN, psb_fold_narrow_in)
#define PSB_K_ENUM(ID, name) ID,
enum { PSB_KERNELS(PSB_K_ENUM) PSB_K_COUNT };
#undef PSB_K_ENUM

/* The fatbin, embedded by the build (kernels_fatbin.c, generated from
 * kernels.cu): what cudaLibraryLoadData takes. */
extern const unsigned char psb_kernels_fatbin[];
extern const unsigned long psb_kernels_fatbin_size;

#endif
