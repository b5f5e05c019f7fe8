/* reduce.h — the arithmetic of gradient averaging, independent of I/O.
 *
 * Dense: fold a chunk of float32 bytes (any alignment, straight from a
 * socket buffer) into an accumulator, and scale by 1/N at the end.
 * Sparse: coalesce (row index, row values) pairs from any number of pushes
 * into unique rows, then emit them with indices ascending.
 */
#ifndef PSBENCH_REDUCE_H
#define PSBENCH_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* One step of PyTorch's SGD with momentum (dampening 0, no Nesterov, no
 * weight decay) from nsrc >= 1 gradients, element by element in float:
 * g = (srcs[0][i] + srcs[1][i] + ...) * scale, summed in source order;
 * buf[i] = first ? g : momentum * buf[i] + g; param[i] = param[i] - lr * buf[i];
 * then out[i] = param[i] when out is not NULL. */
void reduce_sgd_momentum_f32(float *param, float *buf, const float *const *srcs, uint32_t nsrc, size_t n,
                             float scale, float lr, float momentum, bool first, float *out);

/* Which compiled loops the dense folds above use: want 0 the portable
 * ones, 1 the AVX2 ones where the CPU has them, -1 whatever the CPU
 * supports (the default). Returns whether the AVX2 loops are in use. Both
 * give the same bits; tests run each. */
bool reduce_use_wide(int want);


/* Sparse accumulator: open-addressing hash from row index to a dense slot
 * of `cols` floats. Memory grows with the number of distinct rows seen,
 * never with the table's declared row count. */
typedef struct sparse_acc {
    uint64_t rows, cols;
    uint64_t *keys;    /* hash table keys (row index + 1; 0 = empty) */
    uint32_t *slot_of; /* hash table values */
    size_t hcap;       /* power of two */
    uint64_t *slot_row; /* slot -> row index */
    float *vals;        /* nslots * cols */
    size_t nslots, slots_cap;
} sparse_acc;

void sparse_acc_init(sparse_acc *a);
void sparse_acc_free(sparse_acc *a);
/* Empty it for a table of rows x cols (keeps allocations). */
void sparse_acc_reset(sparse_acc *a, uint64_t rows, uint64_t cols);
/* Map nnz little-endian int64 row indices (raw bytes) to slots, creating
 * zeroed rows for new indices. Returns 0, -1 if an index is outside
 * [0, rows) (*bad gets it; nothing is inserted), -2 on allocation failure. */
int sparse_acc_map(sparse_acc *a, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad);
/* Validate indices only (same rule as sparse_acc_map). */
int sparse_indices_check(const uint8_t *idx, uint64_t nnz, uint64_t rows, int64_t *bad);
/* vals[slot * cols + col] += v for `n` floats starting at element `e0` of
 * a push's value section (element e is row e / cols, column e % cols). */
void sparse_acc_add(sparse_acc *a, const uint32_t *slots, uint64_t e0, const uint8_t *src, size_t n);
/* Payload size of the coalesced result. */
uint64_t sparse_acc_result_size(const sparse_acc *a);
/* Write the coalesced result (indices ascending, then values * scale) into
 * out, which has sparse_acc_result_size bytes. Returns 0 or -1 (alloc). */
int sparse_acc_emit(const sparse_acc *a, float scale, uint8_t *out);

#endif
