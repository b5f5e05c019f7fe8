/* kernels.h — the CUDA trainer's kernels (trainer/cuda/kernels.cu) as the
 * host launches them: their names in the fatbin (extern "C") and the
 * numbering the host's table uses (trainer/cuda/kernels_host.c), shared by
 * both sides. A kernel is found by name (cudaLibraryGetKernel) and given
 * its arguments in the order of the prototypes below; a change here is a
 * change on both sides.
 *
 * Every kernel computes each element with trainer/cmath.h's functions, in
 * the order the cpu layer (trainer/compute_cpu.c) uses, and nvcc builds
 * them without contraction (-fmad=false): where the per-element arithmetic
 * is +, -, *, / and comparisons, a GPU's result equals the cpu layer's bit
 * for bit (the fake GPU's host loops, the same functions, equal it
 * everywhere). Transcendental functions are the exception: expf, exp and
 * log on a GPU are CUDA's (within 1-2 ulps of the correctly rounded value),
 * not glibc's, so the softmax heads' outputs and the losses may differ from
 * a CPU's in the last bits.
 *
 * Sums over samples or occurrences run in their order, each element on one
 * thread: a loss (double) is summed by one thread in sample order; an
 * embedding's backward and the sparse SGD go row by row through a list of
 * occurrences built on the host from the host indices (CSR: the unique
 * rows ascending, each row's occurrences in batch order).
 */
#ifndef PSBENCH_TRAINER_CUDA_KERNELS_H
#define PSBENCH_TRAINER_CUDA_KERNELS_H

#include <stdint.h>

/* trk_sgd's mode. */
enum { TRK_SGD_PLAIN = 0, TRK_SGD_FIRST = 1, TRK_SGD_MOMENTUM = 2 };

/* The kernels, by name (sizes are size_t, flags int):
 *   trk_zero(uint32_t *p, size_t words)
 *   trk_bias_rows(float *y, const float *bias, size_t rows, size_t cols)
 *   trk_transpose_bias(float *y, const float *src, const float *bias, size_t rows, size_t cols)
 *   trk_colsum(float *dst, const float *src, size_t rows, size_t cols, int from_row0)
 *   trk_relu(float *y, const float *x, size_t n)
 *   trk_relu_bwd(float *dy, const float *pre, size_t n)
 *   trk_bag_mean(float *out, const float *table, size_t D, const int64_t *idx, size_t B, size_t L)
 *   trk_scale_div(float *g, size_t n, float d)                      g[k] /= d
 *   trk_bag_bwd(float *dst, const int64_t *dst_rows, const float *g, size_t D, const uint32_t *off,
 *               const uint32_t *occ, size_t nnz)
 *       for unique row u < nnz: its occurrences occ[off[u] .. off[u+1]) (the samples, in batch order);
 *       row (dst_rows ? dst_rows[u] : u) of dst = 0 + g[occ[...]] summed in that order
 *   trk_softmax_ce(const float *z, float *p, float *q, size_t B, size_t C, const int64_t *y, double *per)
 *   trk_softmax_ce_bwd(const float *p, const float *q, float *dz, size_t B, size_t C, const int64_t *y, float invB)
 *   trk_ce_logits(const float *z, float *dz, size_t R, size_t C, const int64_t *y, double *per)
 *   trk_l1(const float *v, float *dv, size_t n, float g, double *per)
 *   trk_loss_sum(double *loss, const double *per, size_t n, int negate, double div)
 *       one thread: sum = 0; sum -= / += per[i] in order; *loss = sum / div
 *   trk_sgd(float *w, const float *g, float *buf, size_t n, float nlr, float momentum, int mode)
 *   trk_sgd_rows(float *table, size_t cols, const int64_t *urows, const uint32_t *off, const uint32_t *occ,
 *                const float *vals, size_t nu, float nlr)
 *       for unique row u < nu: its updates vals[occ[off[u] .. off[u+1])] applied in order
 *   trk_first_ne(const float *a, const float *b, size_t n, unsigned long long *first)
 *       *first = min(*first, k) for every k with !(a[k] == b[k]) (NaN differs)
 *   trk_narrow(uint16_t *dst, const float *src, size_t n, int bf)   dst[k] = he_narrow(bf, src[k])
 *   trk_widen(float *dst, const uint16_t *src, size_t n, int bf)    dst[k] = he_widen(bf, src[k])
 *       (shared/half_elem.h; bf 1 for bf16, 0 for fp16: a narrow push by CUDA IPC and its mean) */
/* Each kernel, named once: TRK_K_<ID> is its index in the host's table
 * (kernels_host.c: trk_kernels, a row per entry, its host functions
 * <name>_run and <name>_args), <name> its symbol in the fatbin. The last
 * row, TRK_L_GEMM, is not a kernel: a library call (cuBLAS's sgemm;
 * cblas_sgemm on the fake GPU), queued in stream order as the kernels are. */
#define TRK_KERNELS(X, LIB)                                                                                            \
    X(TRK_K_ZERO, trk_zero)                                                                                            \
    X(TRK_K_BIAS_ROWS, trk_bias_rows)                                                                                  \
    X(TRK_K_TRANSPOSE_BIAS, trk_transpose_bias)                                                                        \
    X(TRK_K_COLSUM, trk_colsum)                                                                                        \
    X(TRK_K_RELU, trk_relu)                                                                                            \
    X(TRK_K_RELU_BWD, trk_relu_bwd)                                                                                    \
    X(TRK_K_BAG_MEAN, trk_bag_mean)                                                                                    \
    X(TRK_K_SCALE_DIV, trk_scale_div)                                                                                  \
    X(TRK_K_BAG_BWD, trk_bag_bwd)                                                                                      \
    X(TRK_K_SOFTMAX_CE, trk_softmax_ce)                                                                                \
    X(TRK_K_SOFTMAX_CE_BWD, trk_softmax_ce_bwd)                                                                        \
    X(TRK_K_CE_LOGITS, trk_ce_logits)                                                                                  \
    X(TRK_K_L1, trk_l1)                                                                                                \
    X(TRK_K_LOSS_SUM, trk_loss_sum)                                                                                    \
    X(TRK_K_SGD, trk_sgd)                                                                                              \
    X(TRK_K_SGD_ROWS, trk_sgd_rows)                                                                                    \
    X(TRK_K_FIRST_NE, trk_first_ne)                                                                                    \
    X(TRK_K_NARROW, trk_narrow)                                                                                        \
    X(TRK_K_WIDEN, trk_widen)                                                                                          \
    LIB(TRK_L_GEMM, trk_gemm)
#define TRK_K_ENUM(ID, name) ID,
enum { TRK_KERNELS(TRK_K_ENUM, TRK_K_ENUM) TRK_K_COUNT };
#undef TRK_K_ENUM

/* The collectives' kernels: in the same fatbin, loaded by name by the nccl
 * collectives (trainer/coll_nccl.c), which launch them on their own stream
 * (trk_widen is also a row of the table above, for the compute layer); on the
 * fake GPU the fake NCCL (coll_gloo.cpp) runs the same per-element
 * functions (shared/half_elem.h) on the host. bf: 1 for bf16, 0 for fp16.
 *   trk_narrow_mul(uint16_t *dst, const float *src, size_t n, float inv, int bf)
 *       dst[k] = he_narrow_mul(bf, src[k], inv): a bucket cast, then times
 *       1/world_size (PyTorch's fp16_compress_hook on CUDA)
 *   trk_widen(float *dst, const uint16_t *src, size_t n, int bf)
 *       dst[k] = he_widen(bf, src[k]) */
#define TRK_COLL_NARROW_MUL "trk_narrow_mul"
#define TRK_COLL_WIDEN "trk_widen"

/* The fatbin, embedded by the build (trk_kernels_fatbin.c, generated from
 * kernels.cu): what cudaLibraryLoadData takes. */
extern const unsigned char trk_kernels_fatbin[];
extern const unsigned long trk_kernels_fatbin_size;

#endif
