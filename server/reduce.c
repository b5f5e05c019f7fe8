/* reduce.c — dense and sparse gradient reduction (see reduce.h). */
#include "server/reduce.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Loads through memcpy: socket buffers give no alignment guarantee, and
 * compilers turn these into plain (vectorised) unaligned loads. */
static inline float reduce_load(const uint8_t *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

/* The dense folds stream the accumulator from L3 or memory: with 256-bit
 * loads and stores the core keeps more of those misses in flight. Folding
 * 16 MiB in 256 KiB chunks, just after as much other traffic, took 1.0 to
 * 1.5 ms with SSE2 and 0.8 to 1.1 ms with AVX2 on an AMD EPYC VM. Each
 * loop is compiled twice and picked per call by what the CPU has; each
 * element is one add and one multiply either way (no FMA), so every
 * result has the same bits. */
#define REDUCE_LOOPS(sfx, attr)                                                                   \
    attr static void reduce_add_##sfx(float *restrict acc, const uint8_t *restrict src, size_t n)  \
    {                                                                                             \
        for (size_t i = 0; i < n; i++)                                                            \
            acc[i] += reduce_load(src + 4 * i);                                                   \
    }                                                                                             \
    attr static void reduce_add_scale_##sfx(float *restrict acc, const uint8_t *restrict src,      \
                                            size_t n, float s)                                    \
    {                                                                                             \
        for (size_t i = 0; i < n; i++)                                                            \
            acc[i] = (acc[i] + reduce_load(src + 4 * i)) * s;                                     \
    }                                                                                             \
    attr static void reduce_copy_scale_##sfx(float *restrict acc, const uint8_t *restrict src,     \
                                             size_t n, float s)                                   \
    {                                                                                             \
        for (size_t i = 0; i < n; i++)                                                            \
            acc[i] = reduce_load(src + 4 * i) * s;                                                \
    }

REDUCE_LOOPS(base, )
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define REDUCE_HAVE_AVX2 1
REDUCE_LOOPS(avx2, __attribute__((target("avx2"))))
#endif

/* -1: not decided yet. Decided by device_new before any device thread
 * starts, and only read after that (tests switch it between runs). */
static int reduce_wide_sel = -1;

bool reduce_use_wide(int want)
{
#ifdef REDUCE_HAVE_AVX2
    __builtin_cpu_init(); /* done by a constructor already; cheap and safe again */
    bool cpu = __builtin_cpu_supports("avx2");
#else
    bool cpu = false;
#endif
    reduce_wide_sel = want == 0 ? 0 : cpu ? 1 : 0;
    return reduce_wide_sel == 1;
}

static inline bool reduce_wide(void)
{
    if (reduce_wide_sel < 0)
        reduce_use_wide(-1);
    return reduce_wide_sel == 1;
}

#ifdef REDUCE_HAVE_AVX2
#define REDUCE_CALL(fn, ...) (reduce_wide() ? fn##_avx2(__VA_ARGS__) : fn##_base(__VA_ARGS__))
#else
#define REDUCE_CALL(fn, ...) fn##_base(__VA_ARGS__)
#endif

void reduce_add_f32(float *restrict acc, const uint8_t *restrict src, size_t n)
{
    REDUCE_CALL(reduce_add, acc, src, n);
}

void reduce_copy_f32(float *restrict acc, const uint8_t *restrict src, size_t n)
{
    memcpy(acc, src, n * sizeof(float));
}

void reduce_scale_f32(float *acc, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        acc[i] *= s;
}

void reduce_add_scale_f32(float *restrict acc, const uint8_t *restrict src, size_t n, float s)
{
    REDUCE_CALL(reduce_add_scale, acc, src, n, s);
}

void reduce_copy_scale_f32(float *restrict acc, const uint8_t *restrict src, size_t n, float s)
{
    REDUCE_CALL(reduce_copy_scale, acc, src, n, s);
}

/* One pass over memory in chunks that stay in L1: the gradients' mean is
 * formed in a small buffer and used at once, instead of a pass for the sum,
 * one for the scale and one for the step (a third of the memory traffic on
 * Linear(1024, 1024)). Per element the operations are those of the three
 * passes, in the same order. */
void reduce_sgd_momentum_f32(float *restrict param, float *restrict buf, const float *const *srcs, uint32_t nsrc,
                             size_t n, float scale, float lr, float momentum, bool first, float *restrict out)
{
    enum { CHUNK = 1024 };
    float g[CHUNK];
    assert(nsrc >= 1);
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        memcpy(g, srcs[0] + at, m * sizeof *g);
        for (uint32_t s = 1; s < nsrc; s++) {
            const float *restrict x = srcs[s] + at;
            for (size_t i = 0; i < m; i++)
                g[i] += x[i];
        }
        float *restrict p = param + at, *restrict b = buf + at;
        for (size_t i = 0; i < m; i++) {
            float gi = g[i] * scale;
            float bi = first ? gi : momentum * b[i] + gi;
            b[i] = bi;
            p[i] = p[i] - lr * bi;
        }
        if (out)
            memcpy(out + at, p, m * sizeof *p);
    }
}

/* ---- sparse ------------------------------------------------------------ */

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
        reduce_add_f32(a->vals + slots[row] * cols + col, src + 4 * i, take);
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
