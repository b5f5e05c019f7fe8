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
bool reduce_wide_in_use(void) { return reduce_wide(); }

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
void reduce_sgd_momentum_f32(float *restrict param, float *restrict buf, reduce_src_fn src, const void *ctx,
                             uint32_t nsrc, size_t n, float scale, float lr, float momentum, bool first,
                             float *restrict out)
{
    enum { CHUNK = 1024 };
    float g[CHUNK];
    assert(nsrc >= 1);
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        memcpy(g, src(ctx, 0) + at, m * sizeof *g);
        for (uint32_t s = 1; s < nsrc; s++) {
            const float *restrict x = src(ctx, s) + at;
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

/* Where bag b's positions end: the next bag's offset, or nnz for the last. */
static inline size_t reduce_bag_end(const int64_t *off, size_t bags, size_t nnz, size_t b)
{
    return b + 1 < bags ? (size_t)off[b + 1] : nnz;
}

void reduce_gather_sum_f32(float *restrict out, const float *restrict table, size_t cols, const int64_t *idx,
                           size_t nnz, const int64_t *off, size_t bags)
{
    for (size_t b = 0; b < bags; b++) {
        float *restrict o = out + b * cols;
        for (size_t c = 0; c < cols; c++)
            o[c] = 0.0f;
        size_t end = reduce_bag_end(off, bags, nnz, b);
        assert((size_t)off[b] <= end && end <= nnz);
        for (size_t i = (size_t)off[b]; i < end; i++) {
            const float *restrict row = table + (size_t)idx[i] * cols;
            for (size_t c = 0; c < cols; c++)
                o[c] += row[c];
        }
    }
}

void reduce_scatter_sgd_f32(float *table, size_t cols, const int64_t *idx, size_t nnz, const int64_t *off,
                            size_t bags, const float *grad, float lr)
{
    for (size_t b = 0; b < bags; b++) {
        const float *g = grad + b * cols;
        size_t end = reduce_bag_end(off, bags, nnz, b);
        assert((size_t)off[b] <= end && end <= nnz);
        for (size_t i = (size_t)off[b]; i < end; i++) {
            float *row = table + (size_t)idx[i] * cols;
            for (size_t c = 0; c < cols; c++) {
                /* Two statements: the product is rounded before the
                 * subtraction whatever -ffp-contract says. */
                float step = lr * g[c];
                row[c] = row[c] - step;
            }
        }
    }
}

void reduce_dense_bag_sgd_f32(float *restrict table, float *restrict gsum, size_t rows, size_t cols,
                              const int64_t *idx, size_t nnz, const int64_t *off, size_t bags,
                              const float *restrict grad, float lr)
{
    size_t n = rows * cols;
    memset(gsum, 0, n * sizeof *gsum); /* all-zero bytes are 0.0f */
    for (size_t b = 0; b < bags; b++) {
        const float *g = grad + b * cols;
        size_t end = reduce_bag_end(off, bags, nnz, b);
        assert((size_t)off[b] <= end && end <= nnz);
        for (size_t i = (size_t)off[b]; i < end; i++) {
            assert(idx[i] >= 0 && (size_t)idx[i] < rows);
            float *row = gsum + (size_t)idx[i] * cols;
            for (size_t c = 0; c < cols; c++)
                row[c] += g[c];
        }
    }
    for (size_t e = 0; e < n; e++) {
        float step = lr * gsum[e]; /* rounded before the subtraction */
        table[e] = table[e] - step;
    }
}
