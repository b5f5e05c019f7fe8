/* kernels.h — the CUDA server's kernels as the host launches them: their
 * names in the fatbin (server/cuda/kernels.cu, extern "C") and the fold
 * ops' numbering, shared by both sides. The host finds a kernel by name
 * (cudaLibraryGetKernel) and passes its arguments in the order of the
 * prototypes below; a change here is a change on both sides. */
#ifndef PSBENCH_CUDA_KERNELS_H
#define PSBENCH_CUDA_KERNELS_H

/* psb_fold's op: the dense folds of server/device.h, per element
 * (cumath.h). */
enum { PSB_FOLD_COPY = 0, PSB_FOLD_ADD = 1, PSB_FOLD_ADD_SCALE = 2, PSB_FOLD_COPY_SCALE = 3 };

/* The kernels, by name (arguments as in kernels.cu):
 *   psb_fold(int op, float *acc, const float *src, size_t n, float s)
 *   psb_sum_scale(float *dst, const float *const *srcs, unsigned nsrc, size_t n, float scale)
 *   psb_sgd(float *param, float *buf, const float *const *srcs, unsigned nsrc, size_t n, float scale,
 *           float lr, float momentum, int first, float *out)
 *   psb_gather(float *out, const float *table, size_t cols, const int64_t *idx, const int64_t *off,
 *              size_t nnz, size_t bags)
 *   psb_scatter_sgd(float *table, size_t cols, const int64_t *idx, const int64_t *off, size_t nnz,
 *                   size_t bags, const float *grad, float lr) */
#define PSB_KERNEL_NAMES "psb_fold", "psb_sum_scale", "psb_sgd", "psb_gather", "psb_scatter_sgd"
enum { PSB_K_FOLD = 0, PSB_K_SUM_SCALE, PSB_K_SGD, PSB_K_GATHER, PSB_K_SCATTER_SGD, PSB_K_COUNT };

/* The fatbin, embedded by the build (kernels_fatbin.c, generated from
 * kernels.cu): what cudaLibraryLoadData takes. */
extern const unsigned char psb_kernels_fatbin[];
extern const unsigned long psb_kernels_fatbin_size;

#endif
