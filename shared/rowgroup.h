/* rowgroup.h — a lookup's indices grouped by row, each row's occurrences
 * in their order: the compressed-row (CSR) lists that let a GPU give each
 * row (and column) a thread of its own while a row named twice still
 * takes its updates in the order the CPU applies them.
 *
 * Both roles' GPU code builds them on the host from host indices: the
 * trainer's embedding backward and sparse SGD (trainer/compute_cuda_math.c),
 * the server's scatter SGD (server/cuda/device_cuda.c).
 *
 *   rowgroup_sort: keys[0..n) (rows, each in 0..INT64_MAX) sorted by (row,
 *     position) into g's scratch (grown, kept for the next call); 0, or
 *     -1 out of memory (g as it was). g->n and g->nu (the unique rows)
 *     then describe them.
 *   rowgroup_csr: the sorted occurrences as lists: urows[u] the u-th unique
 *     row (ascending, nu of them), off[u] the index of its first
 *     occurrence (nu + 1 entries, off[nu] = n), occ[k] what occurrence k
 *     stands for: of[position] where `of` is given (the bag of an index),
 *     else position / div (div >= 1: the sample of an index, for div =
 *     indices per sample).
 *   rowgroup_free: the scratch. */
#ifndef PSBENCH_ROWGROUP_H
#define PSBENCH_ROWGROUP_H

#include <stddef.h>
#include <stdint.h>

typedef struct rowgroup_occ {
    int64_t row;
    uint32_t pos;
} rowgroup_occ;

typedef struct rowgroup {
    rowgroup_occ *occ; /* n of them, sorted */
    size_t cap;
    size_t n, nu;
} rowgroup;

int rowgroup_sort(rowgroup *g, const int64_t *keys, size_t n);
void rowgroup_csr(const rowgroup *g, const uint32_t *of, uint64_t div, int64_t *urows, uint32_t *off, uint32_t *occ);
void rowgroup_free(rowgroup *g);

#endif
