/* test_cumath.c — the CUDA kernels' per-element arithmetic (server/cuda/
 * cumath.h), run on the host, against the cpu device's loops
 * (server/reduce.c): the same bits for every element, on both of reduce's
 * loop widths. That is what lets a CUDA server's means, SGD steps and
 * embedding rows equal a CPU server's, and its narrow answers (--compress)
 * a CPU server's. Runs everywhere: no GPU, no CUDA. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/cuda/cumath.h"
#include "server/cuda/kernels.h"
#include "server/reduce.h"
#include "shared/half.h"
#include "shared/rng.h"

#define N 4099 /* not a multiple of any vector width */

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Values with every magnitude and sign, a few exact ties, zeros of both
 * signs: where rounding differs if an operation is fused or reordered. */
static void fill_hard(float *v, size_t n, uint64_t seed)
{
    rng r;
    rng_seed(&r, seed, 7);
    rng_fill_normal(v, n, &r);
    for (size_t i = 0; i < n; i++) {
        if (i % 7 == 0)
            v[i] *= 1e6f;
        if (i % 11 == 0)
            v[i] = ldexpf(1.0f, (int)(i % 40) - 20) + ldexpf(1.0f, (int)(i % 40) - 44); /* near ties */
    }
    v[0] = 0.0f;
    v[1] = -0.0f;
}

static void assert_same_bits(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bits(a[i]) != bits(b[i]))
            fail_msg("element %zu: %a (cpu) vs %a (kernel arithmetic)", i, (double)a[i], (double)b[i]);
}

static void test_folds(void **state)
{
    (void)state;
    float *acc = malloc(N * sizeof *acc), *x = malloc(N * sizeof *x), *cpu = malloc(N * sizeof *cpu);
    float *gpu = malloc(N * sizeof *gpu);
    fill_hard(acc, N, 1);
    fill_hard(x, N, 2);
    const float s = 1.0f / 3.0f; /* a scale that rounds */
    for (int wide = 0; wide <= 1; wide++) {
        reduce_use_wide(wide);
        for (int op = PSB_FOLD_COPY; op <= PSB_FOLD_COPY_SCALE; op++) {
            memcpy(cpu, acc, N * sizeof *cpu);
            switch (op) {
            case PSB_FOLD_COPY: reduce_copy_f32(cpu, (const uint8_t *)x, N); break;
            case PSB_FOLD_ADD: reduce_add_f32(cpu, (const uint8_t *)x, N); break;
            case PSB_FOLD_ADD_SCALE: reduce_add_scale_f32(cpu, (const uint8_t *)x, N, s); break;
            default: reduce_copy_scale_f32(cpu, (const uint8_t *)x, N, s); break;
            }
            for (size_t i = 0; i < N; i++)
                gpu[i] = op == PSB_FOLD_COPY        ? x[i]
                         : op == PSB_FOLD_ADD       ? cumath_fold_add(acc[i], x[i])
                         : op == PSB_FOLD_ADD_SCALE ? cumath_fold_add_scale(acc[i], x[i], s)
                                                    : cumath_fold_copy_scale(x[i], s);
            assert_same_bits(cpu, gpu, N);
        }
    }
    reduce_use_wide(-1);
    free(acc);
    free(x);
    free(cpu);
    free(gpu);
}

/* psb_fold_narrow_out's per-element arithmetic (a narrow push's last fold
 * on a CUDA server) against the cpu device's: the push widened by half.c
 * (its vector path), folded by reduce.c's loops, narrowed by half.c — for
 * every 16-bit pattern as the push, fp16 and bf16, both ops, on both
 * of reduce's loop widths. NaN pushes are left out: half.h keeps their
 * payload bits per path. */
static void test_fold_narrow_out(void **state)
{
    (void)state;
    enum { M = 65536 };
    float *acc = malloc(M * sizeof *acc), *wide = malloc(M * sizeof *wide), *folded = malloc(M * sizeof *folded);
    uint16_t *x = malloc(M * sizeof *x), *cpu = malloc(M * sizeof *cpu);
    fill_hard(acc, N, 3);
    for (size_t i = N; i < M; i++)
        acc[i] = acc[i % N] * (float)(i % 5);
    const float s = 1.0f / 3.0f;
    for (int wide_loops = 0; wide_loops <= 1; wide_loops++) {
        reduce_use_wide(wide_loops);
        for (int bf = 0; bf <= 1; bf++) {
            half_type t = bf ? HALF_BF16 : HALF_FP16;
            for (size_t i = 0; i < M; i++)
                x[i] = (uint16_t)i;
            for (int add = 0; add <= 1; add++) {
                half_widen(t, wide, x, M);
                if (add) {
                    memcpy(folded, acc, M * sizeof *folded);
                    reduce_add_scale_f32(folded, (const uint8_t *)wide, M, s);
                } else {
                    reduce_copy_scale_f32(folded, (const uint8_t *)wide, M, s);
                }
                half_narrow(t, cpu, folded, M);
                for (size_t i = 0; i < M; i++) {
                    if (isnan(he_widen(bf, x[i])))
                        continue;
                    uint16_t g = cumath_fold_narrow_out(add, acc[i], x[i], s, bf);
                    if (g != cpu[i])
                        fail_msg("%s %s push 0x%04zX: 0x%04X (kernel arithmetic), 0x%04X (cpu)", bf ? "bf16" : "fp16",
                                 add ? "add-scale" : "copy-scale", i, g, cpu[i]);
                }
            }
        }
    }
    reduce_use_wide(-1);
    free(acc);
    free(wide);
    free(folded);
    free(x);
    free(cpu);
}

/* psb_sum_scale's per element order (sources in order, then the scale)
 * against the cpu device's fold of stored pushes: copy, add, add, ...,
 * then the scale. */
static void test_sum_scale(void **state)
{
    (void)state;
    enum { K = 5 };
    float *src[K], *cpu = malloc(N * sizeof *cpu);
    for (int k = 0; k < K; k++) {
        src[k] = malloc(N * sizeof *src[k]);
        fill_hard(src[k], N, 10 + (uint64_t)k);
    }
    const float scale = 1.0f / (float)K;
    memcpy(cpu, src[0], N * sizeof *cpu);
    for (int k = 1; k < K - 1; k++)
        reduce_add_f32(cpu, (const uint8_t *)src[k], N);
    reduce_add_scale_f32(cpu, (const uint8_t *)src[K - 1], N, scale);
    for (size_t i = 0; i < N; i++) {
        float acc = src[0][i];
        for (int k = 1; k < K; k++)
            acc = cumath_add(acc, src[k][i]);
        float g = cumath_mul(acc, scale);
        if (bits(g) != bits(cpu[i]))
            fail_msg("element %zu: %a vs %a", i, (double)cpu[i], (double)g);
    }
    for (int k = 0; k < K; k++)
        free(src[k]);
    free(cpu);
}

/* The gradients of a step, for reduce_sgd_momentum_f32. */
static const float *grad_at(const void *ctx, uint32_t i) { return ((float *const *)ctx)[i]; }

/* psb_sgd against reduce_sgd_momentum_f32, over several steps (the first
 * sets the momentum buffer). */
static void test_sgd(void **state)
{
    (void)state;
    enum { K = 3 };
    float *p_cpu = malloc(N * sizeof(float)), *b_cpu = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    float *p_gpu = malloc(N * sizeof(float)), *b_gpu = malloc(N * sizeof(float));
    float *g[K];
    fill_hard(p_cpu, N, 20);
    memcpy(p_gpu, p_cpu, N * sizeof(float));
    for (int k = 0; k < K; k++) {
        g[k] = malloc(N * sizeof(float));
        fill_hard(g[k], N, 30 + (uint64_t)k);
    }
    const float scale = 1.0f / K, lr = 0.001f, momentum = 0.9f;
    for (int step = 0; step < 4; step++) {
        reduce_sgd_momentum_f32(p_cpu, b_cpu, grad_at, g, K, N, scale, lr, momentum, step == 0, out);
        for (size_t i = 0; i < N; i++) {
            float gi = g[0][i];
            for (int k = 1; k < K; k++)
                gi = cumath_add(gi, g[k][i]);
            cumath_sgd(&p_gpu[i], &b_gpu[i], cumath_mul(gi, scale), lr, momentum, step == 0);
        }
        assert_same_bits(p_cpu, p_gpu, N);
        assert_same_bits(b_cpu, b_gpu, N);
        assert_same_bits(out, p_gpu, N);
    }
    for (int k = 0; k < K; k++)
        free(g[k]);
    free(p_cpu);
    free(b_cpu);
    free(out);
    free(p_gpu);
    free(b_gpu);
}

/* psb_gather and psb_scatter_sgd's order (a bag's positions in order, a
 * repeated row stepped twice) against the cpu's bag loops. */
static void test_bags(void **state)
{
    (void)state;
    enum { ROWS = 50, COLS = 33, NNZ = 40, BAGS = 6 };
    float *table = malloc(ROWS * COLS * sizeof(float)), *t_gpu = malloc(ROWS * COLS * sizeof(float));
    float *grad = malloc(BAGS * COLS * sizeof(float));
    float out_cpu[BAGS * COLS], out_gpu[BAGS * COLS];
    int64_t idx[NNZ], off[BAGS] = {0, 5, 5, 17, 30, 31}; /* bag 1 empty */
    for (int i = 0; i < NNZ; i++)
        idx[i] = (i * 7) % 13; /* rows repeat within and across bags */
    fill_hard(table, ROWS * COLS, 40);
    fill_hard(grad, BAGS * COLS, 41);
    memcpy(t_gpu, table, ROWS * COLS * sizeof(float));
    reduce_gather_sum_f32(out_cpu, table, COLS, idx, NNZ, off, BAGS);
    for (int b = 0; b < BAGS; b++)
        for (int c = 0; c < COLS; c++) {
            float sum = 0.0f;
            for (int i = (int)off[b], end = b + 1 < BAGS ? (int)off[b + 1] : NNZ; i < end; i++)
                sum = cumath_add(sum, table[idx[i] * COLS + c]);
            out_gpu[b * COLS + c] = sum;
        }
    assert_same_bits(out_cpu, out_gpu, BAGS * COLS);
    const float lr = 0.05f;
    reduce_scatter_sgd_f32(table, COLS, idx, NNZ, off, BAGS, grad, lr);
    for (int c = 0; c < COLS; c++)
        for (int b = 0; b < BAGS; b++)
            for (int i = (int)off[b], end = b + 1 < BAGS ? (int)off[b + 1] : NNZ; i < end; i++) {
                float *e = &t_gpu[idx[i] * COLS + c];
                *e = cumath_scatter_step(*e, grad[b * COLS + c], lr);
            }
    assert_same_bits(table, t_gpu, ROWS * COLS);
    free(table);
    free(t_gpu);
    free(grad);
}

/* A fused multiply-add would differ: the test can tell (so that the bit
 * comparisons above would catch a kernel that fused). */
static void test_detects_fusion(void **state)
{
    (void)state;
    /* (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the last term is lost when the
     * product is rounded on its own, kept by a fused multiply-add. */
    float a = 1.0f + ldexpf(1.0f, -12), b = a, c = -(1.0f + ldexpf(1.0f, -11));
    float fused = fmaf(a, b, c);
    float separate = cumath_add(cumath_mul(a, b), c);
    assert_true(bits(fused) != bits(separate));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folds),     cmocka_unit_test(test_fold_narrow_out),
        cmocka_unit_test(test_sum_scale), cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_bags),      cmocka_unit_test(test_detects_fusion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
