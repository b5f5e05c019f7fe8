/* sparse.c — the sparse accumulator (see sparse.h). */
#include "shared/sparse.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void sparse_acc_init(sparse_acc *a)
{
    memset(a, 0, sizeof *a);
}

void sparse_acc_free(sparse_acc *a)
{
    free(a->keys);
    free(a->slot_of);
    free(a->slot_row);
    free(a->vals);
    memset(a, 0, sizeof *a);
}

void sparse_acc_reset(sparse_acc *a, uint64_t rows, uint64_t cols)
{
    if (a->keys)
        memset(a->keys, 0, a->hcap * sizeof *a->keys);
    if (a->cols != cols) {
        /* Slot storage is sized in rows of `cols`: start over. */
        free(a->vals);
        a->vals = NULL;
        free(a->slot_row);
        a->slot_row = NULL;
        a->slots_cap = 0;
    }
    a->rows = rows;
    a->cols = cols;
    a->nslots = 0;
}

static inline uint64_t sparse_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static int sparse_grow_table(sparse_acc *a)
{
    size_t ncap = a->hcap ? a->hcap * 2 : 1024;
    uint64_t *nk = calloc(ncap, sizeof *nk);
    uint32_t *ns = malloc(ncap * sizeof *ns);
    if (!nk || !ns) {
        free(nk);
        free(ns);
        return -1;
    }
    for (size_t i = 0; i < a->hcap; i++) {
        if (!a->keys[i])
            continue;
        size_t h = sparse_hash(a->keys[i]) & (ncap - 1);
        while (nk[h])
            h = (h + 1) & (ncap - 1);
        nk[h] = a->keys[i];
        ns[h] = a->slot_of[i];
    }
    free(a->keys);
    free(a->slot_of);
    a->keys = nk;
    a->slot_of = ns;
    a->hcap = ncap;
    return 0;
}

static int sparse_grow_slots(sparse_acc *a)
{
    size_t ncap = a->slots_cap ? a->slots_cap * 2 : 256;
    if (a->cols && ncap > SIZE_MAX / sizeof(float) / a->cols)
        return -1;
    float *nv = realloc(a->vals, ncap * a->cols * sizeof(float));
    if (!nv)
        return -1;
    a->vals = nv;
    uint64_t *nr = realloc(a->slot_row, ncap * sizeof *nr);
    if (!nr)
        return -1;
    a->slot_row = nr;
    a->slots_cap = ncap;
    return 0;
}

static inline int64_t sparse_load_index(const uint8_t *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

int sparse_indices_check(const uint8_t *idx, uint64_t nnz, uint64_t rows, int64_t *bad)
{
    for (uint64_t i = 0; i < nnz; i++) {
        int64_t r = sparse_load_index(idx + 8 * i);
        if (r < 0 || (uint64_t)r >= rows) {
            *bad = r;
            return -1;
        }
    }
    return 0;
}

int sparse_acc_map(sparse_acc *a, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad)
{
    if (sparse_indices_check(idx, nnz, a->rows, bad) < 0)
        return -1;
    for (uint64_t i = 0; i < nnz; i++) {
        uint64_t key = (uint64_t)sparse_load_index(idx + 8 * i) + 1;
        /* Keep the table at most half full. */
        if ((a->nslots + 1) * 2 > a->hcap && sparse_grow_table(a) < 0)
            return -2;
        size_t h = sparse_hash(key) & (a->hcap - 1);
        while (a->keys[h] && a->keys[h] != key)
            h = (h + 1) & (a->hcap - 1);
        if (!a->keys[h]) {
            if (a->nslots == a->slots_cap && sparse_grow_slots(a) < 0)
                return -2;
            a->keys[h] = key;
            a->slot_of[h] = (uint32_t)a->nslots;
            a->slot_row[a->nslots] = key - 1;
            memset(a->vals + a->nslots * a->cols, 0, a->cols * sizeof(float));
            a->nslots++;
        }
        slots[i] = a->slot_of[h];
    }
    return 0;
}

/* acc[i] += src[i] for n little-endian floats at any alignment (loads
 * through memcpy: compilers make them plain vector loads). */
static void sparse_add_row(float *restrict acc, const uint8_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, src + 4 * i, sizeof f);
        acc[i] += f;
    }
}

void sparse_acc_add(sparse_acc *a, const uint32_t *slots, uint64_t e0, const uint8_t *src, size_t n)
{
    uint64_t cols = a->cols;
    uint64_t row = e0 / cols, col = e0 % cols;
    size_t i = 0;
    while (i < n) {
        size_t take = cols - col;
        if (take > n - i)
            take = n - i;
        assert(slots[row] < a->nslots);
        sparse_add_row(a->vals + slots[row] * cols + col, src + 4 * i, take);
        i += take;
        row++;
        col = 0;
    }
}

uint64_t sparse_acc_result_size(const sparse_acc *a)
{
    return a->nslots * (8 + 4 * a->cols);
}

static int sparse_cmp_row(const void *x, const void *y, void *arg)
{
    const uint64_t *rows = arg;
    uint64_t a = rows[*(const uint32_t *)x], b = rows[*(const uint32_t *)y];
    return (a > b) - (a < b);
}

int sparse_acc_emit(const sparse_acc *a, float scale, uint8_t *out)
{
    uint32_t *order = malloc((a->nslots ? a->nslots : 1) * sizeof *order);
    if (!order)
        return -1;
    for (size_t i = 0; i < a->nslots; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, a->nslots, sizeof *order, sparse_cmp_row, a->slot_row);
    uint8_t *vals = out + 8 * a->nslots;
    for (size_t i = 0; i < a->nslots; i++) {
        int64_t r = (int64_t)a->slot_row[order[i]];
        memcpy(out + 8 * i, &r, 8);
        const float *src = a->vals + (size_t)order[i] * a->cols;
        for (uint64_t c = 0; c < a->cols; c++) {
            float v = src[c] * scale;
            memcpy(vals + 4 * (i * a->cols + c), &v, 4);
        }
    }
    free(order);
    return 0;
}
