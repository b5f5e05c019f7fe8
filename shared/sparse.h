/* sparse.h — coalescing sparse gradients: the protocol's rule for a sparse
 * result (rows unique, indices ascending, values = sum * scale), shared by
 * the server (average kind: pushes folded as they arrive) and the trainer
 * (sparse allreduce: every member's rows gathered, then coalesced).
 *
 * The coalesced layout, on the wire and in memory: nnz little-endian int64
 * row indices, then nnz * cols float32 values, row by row.
 */
#ifndef PSBENCH_SPARSE_H
#define PSBENCH_SPARSE_H

#include <stddef.h>
#include <stdint.h>

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
