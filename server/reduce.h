/* reduce.h — the arithmetic of gradient averaging, independent of I/O.
 *
 * Dense: fold a chunk of float32 bytes (any alignment, straight from a
 * socket buffer) into an accumulator, and scale by 1/N at the end; one
 * SGD-with-momentum step; the gather and scatter of embedding rows.
 * Sparse coalescing is the protocol's own rule and
 * lives in shared/sparse.h (trainers coalesce too, in sparse allreduce).
 */
#ifndef PSBENCH_REDUCE_H
#define PSBENCH_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/sparse.h"

/* acc[i] += src[i] for n floats; src is little-endian f32 bytes. */
void reduce_add_f32(float *acc, const uint8_t *src, size_t n);
/* acc[i] = src[i] (a copy that tolerates any alignment of src). */
void reduce_copy_f32(float *acc, const uint8_t *src, size_t n);
/* acc[i] *= s. */
void reduce_scale_f32(float *acc, size_t n, float s);
/* acc[i] = (acc[i] + src[i]) * s: the last push of an element finishes
 * its mean in the pass that receives it (bit for bit sum * s). */
void reduce_add_scale_f32(float *acc, const uint8_t *src, size_t n, float s);
/* acc[i] = src[i] * s. */
void reduce_copy_scale_f32(float *acc, const uint8_t *src, size_t n, float s);

/* Where the i-th of a step's gradients is: the device's buffers are
 * handles, so the loop asks (once per source and chunk of elements). */
typedef const float *(*reduce_src_fn)(const void *ctx, uint32_t i);

/* One step of PyTorch's SGD with momentum (dampening 0, no Nesterov, no
 * weight decay) from nsrc >= 1 gradients, element by element in float:
 * g = (src(0)[i] + src(1)[i] + ...) * scale, summed in source order;
 * buf[i] = first ? g : momentum * buf[i] + g; param[i] = param[i] - lr * buf[i];
 * then out[i] = param[i] when out is not NULL. With first, buf is only
 * written. */
void reduce_sgd_momentum_f32(float *param, float *buf, reduce_src_fn src, const void *ctx, uint32_t nsrc,
                             size_t n, float scale, float lr, float momentum, bool first, float *out);

/* Embedding bags (kind `embedding`, docs/protocol.md). A lookup names
 * nnz rows of a row-major table of `cols` columns (idx) grouped into bags
 * by offsets (PyTorch EmbeddingBag's `offsets`): bag b is idx[off[b] ..
 * off[b+1]), the last bag runs to nnz. The caller has checked the indices
 * and offsets (0 <= idx < rows, off[0] = 0, non-decreasing, <= nnz).
 *
 * Gather (mode "sum"): out[b] (cols floats) = 0.0f + table[idx[i]] + ...
 * over the bag's positions i in order, in float; an empty bag is zeros. */
void reduce_gather_sum_f32(float *out, const float *table, size_t cols, const int64_t *idx, size_t nnz,
                           const int64_t *off, size_t bags);
/* Scatter SGD: for each bag b in order, each of its positions i in order,
 * table[idx[i]][c] = table[idx[i]][c] - lr * grad[b][c], in float (lr *
 * grad rounded first: no fused multiply-add). A row named twice gets both
 * steps. */
void reduce_scatter_sgd_f32(float *table, size_t cols, const int64_t *idx, size_t nnz, const int64_t *off,
                            size_t bags, const float *grad, float lr);
/* Dense SGD (PyTorch's EmbeddingBag(mode="sum", sparse=False) and SGD): the
 * table-sized gradient gsum (rows x cols floats, scratch) is zeroed, each
 * bag's gradient is added to the rows its positions name — for each bag b
 * in order, each of its positions i in order, gsum[idx[i]][c] += grad[b][c]
 * in float (a row named twice gets both, summed before any step) — then
 * every element of the table takes one step, table[e] = table[e] - lr *
 * gsum[e] (lr * gsum rounded first). Rows no bag names are stepped by
 * lr * 0 and keep their bits; the work is the whole table's, as PyTorch's. */
void reduce_dense_bag_sgd_f32(float *table, float *gsum, size_t rows, size_t cols, const int64_t *idx, size_t nnz,
                              const int64_t *off, size_t bags, const float *grad, float lr);

/* Which compiled loops the dense folds above use: want 0 the portable
 * ones, 1 the AVX2 ones where the CPU has them, -1 whatever the CPU
 * supports (the default). Returns whether the AVX2 loops are in use. Both
 * give the same bits; tests run each. */
bool reduce_use_wide(int want);
/* Whether the dense folds run the AVX2 loops: reads the choice (made as
 * reduce_use_wide(-1) would when nothing chose yet), never changes it. */
bool reduce_wide_in_use(void);

#endif
