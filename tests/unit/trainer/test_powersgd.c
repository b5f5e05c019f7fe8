/* test_powersgd.c — trainer/powersgd.c's arithmetic on one trainer (a
 * group of one: the sum is the identity), PyTorch's powerSGD_hook.py as
 * the reference for what each step means:
 *   - _should_compress's rule, at its boundary (strict <) and for a bias;
 *   - Gram-Schmidt: orthonormal columns; a zero column is NaN with epsilon
 *     0 (PyTorch's division by a zero norm) and stays zero with epsilon;
 *   - a rank-2 gradient comes back exactly from rank-2 PowerSGD (the
 *     factors span its column space), and a rank-4 one through rank 1 keeps
 *     error feedback's invariant: the outputs' sum plus the error left is
 *     the inputs' sum;
 *   - warm start: on a fixed gradient the rank-1 approximation converges to
 *     the leading singular pair (power iteration across steps); without it
 *     every step draws a new Q and the output keeps changing;
 *   - batched_powerSGD_hook: the square side, padding that never touches
 *     the floats after the bucket, exact at full rank;
 *   - the iteration count: plain steps (the mean, bit for bit) until
 *     start_powerSGD_iter, counted at the last bucket of a step, bytes of
 *     each kind of step as predicted (psgd_compressed_floats);
 *   - PyTorch's order: a rebuilt bucket's tensors last first, the
 *     compressed ones grouped by shape (the Qs' draws), and the batched
 *     matrix of the bucket as PyTorch's flat buffer holds it.
 * The collective side (members with different gradients ending with the
 * same bits) is test_coll's test_gloo_powersgd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/rng.h"
#include "trainer/powersgd.h"

/* A group of one: the sum of one member is its own value. Counts calls. */
static int one_sum(void *ctx, float *x, size_t n, char *err, size_t errlen)
{
    (void)x;
    (void)n;
    (void)err;
    (void)errlen;
    ++*(int *)ctx;
    return 0;
}

static psgd_conf conf_of(uint32_t rank, uint64_t start, bool ef, bool warm)
{
    psgd_conf c;
    psgd_conf_default(&c);
    c.rank = rank;
    c.start_iter = start;
    c.error_feedback = ef;
    c.warm_start = warm;
    return c;
}

/* One bucket of a single rows x cols tensor, last of its step. */
static hook_bucket bucket_of(float *data, hook_tensor *t, uint64_t rows, uint64_t cols)
{
    *t = (hook_tensor){.offset = 0, .rows = rows, .cols = cols};
    return (hook_bucket){.id = 0, .data = data, .count = rows * cols, .tensors = t, .ntensors = 1, .last = true};
}

/* m (rows x cols) = sum_k s_k u_k v_k^T with random u, v. */
static void low_rank(float *m, uint64_t rows, uint64_t cols, uint32_t rank, uint64_t seed)
{
    rng r;
    rng_seed(&r, seed, 1);
    float *u = malloc(rows * rank * sizeof *u), *v = malloc(cols * rank * sizeof *v);
    assert_non_null(u);
    assert_non_null(v);
    rng_fill_normal(u, rows * rank, &r);
    rng_fill_normal(v, cols * rank, &r);
    for (uint64_t i = 0; i < rows; i++)
        for (uint64_t j = 0; j < cols; j++) {
            double a = 0;
            for (uint32_t k = 0; k < rank; k++)
                a += (double)(rank - k) * u[i * rank + k] * v[j * rank + k];
            m[i * cols + j] = (float)a;
        }
    free(u);
    free(v);
}

static double max_abs(const float *x, uint64_t n)
{
    double m = 0;
    for (uint64_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

static double max_diff(const float *a, const float *b, uint64_t n)
{
    double m = 0;
    for (uint64_t i = 0; i < n; i++)
        m = fabs((double)a[i] - b[i]) > m ? fabs((double)a[i] - b[i]) : m;
    return m;
}

static void test_should_compress(void **state)
{
    (void)state;
    /* (rows + cols) r rate < rows cols */
    assert_true(psgd_should_compress(128, 32, 4, 2)); /* 1280 < 4096 */
    assert_false(psgd_should_compress(8, 8, 2, 2));   /* 64 < 64: no, strict */
    assert_true(psgd_should_compress(8, 8, 2, 1.99)); /* 63.68 < 64 */
    assert_false(psgd_should_compress(128, 1, 1, 2)); /* a bias: 258 < 128 never */
}

static void test_should_compress_bias_rate(void **state)
{
    (void)state;
    /* A low enough rate compresses even a bias: PyTorch's rule has no
     * other test ((1000 + 1) 0.5 = 500.5 < 1000). */
    assert_true(psgd_should_compress(1000, 1, 1, 0.5));
    assert_true(psgd_should_compress(1000, 2, 1, 0));
    assert_false(psgd_should_compress(0, 5, 1, 0)); /* 0 < 0: an empty tensor never */
}

static void test_orthogonalize(void **state)
{
    (void)state;
    enum { R = 50, C = 4 };
    float m[R * C];
    rng r;
    rng_seed(&r, 3, 1);
    rng_fill_normal(m, R * C, &r);
    psgd_orthogonalize(m, R, C, 0);
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++) {
            double d = 0;
            for (int k = 0; k < R; k++)
                d += (double)m[k * C + a] * m[k * C + b];
            assert_true(fabs(d - (a == b)) < 1e-5);
        }
    /* A zero column: NaN with epsilon 0, as PyTorch's 0 / 0 ... */
    float z[R * C];
    rng_fill_normal(z, R * C, &r);
    for (int k = 0; k < R; k++)
        z[k * C + 1] = 0;
    float ze[R * C];
    memcpy(ze, z, sizeof z);
    psgd_orthogonalize(z, R, C, 0);
    assert_true(isnan(z[1]));
    /* ... and zero with an epsilon, the other columns still orthonormal. */
    psgd_orthogonalize(ze, R, C, 1e-8f);
    for (int k = 0; k < R; k++)
        assert_true(ze[k * C + 1] == 0);
    for (int a = 0; a < C; a++) {
        double d = 0;
        for (int k = 0; k < R; k++)
            d += (double)ze[k * C + a] * ze[k * C + a];
        assert_true(a == 1 ? d == 0 : fabs(d - 1) < 1e-5);
    }
}

static void test_low_rank_exact(void **state)
{
    (void)state;
    enum { R = 40, C = 30 };
    float g[R * C], x[R * C];
    low_rank(g, R, C, 2, 11);
    psgd_conf c = conf_of(2, 2, true, true);
    psgd *s = psgd_new(&c, 1);
    assert_non_null(s);
    hook_tensor t;
    int calls = 0;
    char err[256];
    for (int step = 0; step < 6; step++) {
        memcpy(x, g, sizeof g);
        hook_bucket b = bucket_of(x, &t, R, C);
        uint64_t bytes = 0;
        assert_int_equal(psgd_reduce(s, &b, one_sum, &calls, &bytes, err, sizeof err), 0);
        /* plain, then P (40 x 2) and Q (30 x 2): the tensor compresses */
        assert_int_equal(bytes, step < 2 ? R * C * 4 : (R + C) * 2 * 4);
        assert_true(max_diff(x, g, R * C) <= 1e-5 * max_abs(g, R * C));
    }
    psgd_free(s);
}

static void test_error_feedback_invariant(void **state)
{
    (void)state;
    enum { R = 24, C = 20, STEPS = 12 };
    float g[R * C], x[R * C];
    static double in_sum[R * C], out_sum[R * C];
    psgd_conf c = conf_of(1, 2, true, true);
    psgd *s = psgd_new(&c, 1);
    assert_non_null(s);
    hook_tensor t;
    int calls = 0;
    char err[256];
    for (int step = 0; step < STEPS; step++) {
        low_rank(g, R, C, 4, 100 + (uint64_t)step);
        memcpy(x, g, sizeof g);
        hook_bucket b = bucket_of(x, &t, R, C);
        uint64_t bytes;
        assert_int_equal(psgd_reduce(s, &b, one_sum, &calls, &bytes, err, sizeof err), 0);
        for (int i = 0; i < R * C; i++) {
            in_sum[i] += g[i];
            out_sum[i] += x[i];
        }
    }
    /* Rank 1 of rank-4 gradients loses much of each step, but nothing is
     * lost for good: the outputs' sum plus the error held is the inputs'
     * sum (each step: input + old error = output + new error). */
    uint64_t n = 0;
    const float *e = psgd_error(s, 0, &n);
    assert_non_null(e);
    assert_int_equal(n, R * C);
    double lossy = 0, closed = 0, mag = 0;
    for (int i = 0; i < R * C; i++) {
        lossy = fmax(lossy, fabs(in_sum[i] - out_sum[i]));
        closed = fmax(closed, fabs(in_sum[i] - out_sum[i] - e[i]));
        mag = fmax(mag, fabs(in_sum[i]));
    }
    assert_true(lossy > 0.05 * mag);
    assert_true(closed < 1e-4 * mag);
    psgd_free(s);
}

/* Warm start: on a fixed gradient (no error feedback), the rank-1 output
 * converges to s1 u1 v1^T; without warm start each step starts from a new
 * random Q and the outputs keep differing. */
static void test_warm_start(void **state)
{
    (void)state;
    enum { R = 30, C = 20, STEPS = 60 };
    float g[R * C], x[R * C], prev[R * C];
    low_rank(g, R, C, 3, 7);
    for (int warm = 0; warm < 2; warm++) {
        psgd_conf c = conf_of(1, 0, false, warm);
        psgd *s = psgd_new(&c, 1);
        assert_non_null(s);
        hook_tensor t;
        int calls = 0;
        char err[256];
        double last_change = 0;
        for (int step = 0; step < STEPS; step++) {
            memcpy(x, g, sizeof g);
            hook_bucket b = bucket_of(x, &t, R, C);
            uint64_t bytes;
            assert_int_equal(psgd_reduce(s, &b, one_sum, &calls, &bytes, err, sizeof err), 0);
            if (step > 0)
                last_change = max_diff(x, prev, R * C);
            memcpy(prev, x, sizeof x);
        }
        if (warm)
            assert_true(last_change <= 1e-5 * max_abs(g, R * C)); /* converged */
        else
            assert_true(last_change > 1e-3 * max_abs(g, R * C)); /* a new Q every step */
        psgd_free(s);
    }
}

static void test_batched(void **state)
{
    (void)state;
    assert_int_equal(psgd_side(0), 0);
    assert_int_equal(psgd_side(1), 1);
    assert_int_equal(psgd_side(4), 2);
    assert_int_equal(psgd_side(5), 3);
    assert_int_equal(psgd_side(16), 4);
    assert_int_equal(psgd_side(17), 5);
    assert_int_equal(psgd_side(8320), 92); /* 91^2 = 8281 < 8320 <= 8464 */
    assert_int_equal(psgd_side(1ull << 40), 1ull << 20);
    assert_int_equal(psgd_side((1ull << 40) + 1), (1ull << 20) + 1);
    /* A bucket of 13 floats (a 13 x 1 bias: batched splits nothing off):
     * side 4, padded with 3 zeros, the square of full rank; at rank 4 it
     * comes back exactly; the floats after the bucket are never touched;
     * 2 x 4 x 4 floats moved. */
    float mem[17], want[13];
    rng r;
    rng_seed(&r, 21, 1);
    rng_fill_normal(want, 13, &r);
    memcpy(mem, want, sizeof want);
    for (int i = 13; i < 17; i++)
        mem[i] = 12345.0f;
    psgd_conf c = conf_of(4, 0, true, true);
    c.batched = true;
    psgd *s = psgd_new(&c, 1);
    assert_non_null(s);
    hook_tensor t = {.offset = 0, .rows = 13, .cols = 1};
    hook_bucket b = {.id = 3, .data = mem, .count = 13, .tensors = &t, .ntensors = 1, .last = true};
    assert_int_equal(psgd_compressed_floats(&c, &b), 2 * 4 * 4);
    int calls = 0;
    char err[256];
    uint64_t bytes;
    assert_int_equal(psgd_reduce(s, &b, one_sum, &calls, &bytes, err, sizeof err), 0);
    assert_int_equal(bytes, 2 * 4 * 4 * 4);
    assert_int_equal(calls, 2); /* P and Q; nothing split off */
    assert_true(max_diff(mem, want, 13) <= 1e-5 * max_abs(want, 13));
    for (int i = 13; i < 17; i++)
        assert_true(mem[i] == 12345.0f);
    /* its error: side^2 floats, the padding's included */
    uint64_t n = 0;
    assert_non_null(psgd_error(s, 3, &n));
    assert_int_equal(n, 16);
    /* rank above the side: the side (PyTorch would assert) */
    c.rank = 9;
    assert_int_equal(psgd_compressed_floats(&c, &b), 2 * 4 * 4);
    psgd_free(s);
}

/* Two buckets a step, a compressible weight and a bias in the first:
 * plain steps give the bucket back unchanged (the mean of one, bit for
 * bit), the count moves at the second bucket (the last), the bytes of each
 * step are the predicted ones. */
static void test_iterations_and_bytes(void **state)
{
    (void)state;
    enum { W = 64 * 16, B = 64, N0 = W + B, N1 = 100 };
    float *a = malloc(N0 * sizeof *a), *a0 = malloc(N0 * sizeof *a0), b1[N1], b10[N1];
    assert_non_null(a);
    assert_non_null(a0);
    rng r;
    rng_seed(&r, 5, 1);
    hook_tensor t0[2] = {{.offset = 0, .rows = 64, .cols = 16}, {.offset = W, .rows = 64, .cols = 1}};
    hook_tensor t1 = {.offset = 0, .rows = 100, .cols = 1};
    psgd_conf c = conf_of(2, 3, true, true);
    psgd *s = psgd_new(&c, 1);
    assert_non_null(s);
    char err[256];
    for (int step = 0; step < 5; step++) {
        rng_fill_normal(a, N0, &r);
        rng_fill_normal(b1, N1, &r);
        memcpy(a0, a, N0 * sizeof *a);
        memcpy(b10, b1, sizeof b1);
        hook_bucket k0 = {.id = 0, .data = a, .count = N0, .tensors = t0, .ntensors = 2, .last = false};
        hook_bucket k1 = {.id = 1, .data = b1, .count = N1, .tensors = &t1, .ntensors = 1, .last = true};
        int calls = 0;
        uint64_t by0, by1;
        assert_int_equal(psgd_reduce(s, &k0, one_sum, &calls, &by0, err, sizeof err), 0);
        psgd_stats st;
        psgd_get_stats(s, &st);
        assert_int_equal(st.iter, (uint64_t)step); /* not yet: bucket 0 is not the last */
        assert_int_equal(psgd_reduce(s, &k1, one_sum, &calls, &by1, err, sizeof err), 0);
        psgd_get_stats(s, &st);
        assert_int_equal(st.iter, (uint64_t)step + 1);
        if (step < 3) {
            assert_int_equal(by0, N0 * 4);
            assert_int_equal(calls, 2);
            assert_memory_equal(a, a0, N0 * sizeof *a);
        } else {
            /* P 64 x 2, Q 16 x 2, the bias 64 uncompressed; the 100 x 1
             * bucket all uncompressed (no P or Q: one sum) */
            assert_int_equal(by0, (64 * 2 + 16 * 2 + 64) * 4);
            assert_int_equal(psgd_compressed_floats(&c, &k0), 64 * 2 + 16 * 2 + 64);
            assert_int_equal(calls, 3 + 1);
            /* the bias is the mean (itself plus its zero error) */
            assert_memory_equal(a + W, a0 + W, B * sizeof *a);
        }
        assert_int_equal(by1, N1 * 4);
        assert_memory_equal(b1, b10, sizeof b1);
        assert_int_equal(st.plain_steps, (uint64_t)(step < 3 ? step + 1 : 3));
        assert_int_equal(st.compressed_steps, (uint64_t)(step < 3 ? 0 : step - 2));
    }
    /* a reset starts again: plain */
    psgd_reset(s);
    psgd_stats st;
    psgd_get_stats(s, &st);
    assert_int_equal(st.iter, 0);
    assert_int_equal(st.plain_bytes + st.compressed_bytes, 0);
    psgd_free(s);
    free(a);
    free(a0);
}

/* The same seed, the same outputs; another seed, others (the random Q). */
static void test_seeded(void **state)
{
    (void)state;
    enum { R = 20, C = 12 };
    float g[R * C], x[3][R * C];
    low_rank(g, R, C, 4, 9);
    for (int k = 0; k < 3; k++) {
        psgd_conf c = conf_of(1, 0, false, false);
        c.random_seed = k == 2 ? 1 : 0;
        psgd *s = psgd_new(&c, 1);
        assert_non_null(s);
        hook_tensor t;
        memcpy(x[k], g, sizeof g);
        hook_bucket b = bucket_of(x[k], &t, R, C);
        int calls = 0;
        char err[256];
        uint64_t bytes;
        assert_int_equal(psgd_reduce(s, &b, one_sum, &calls, &bytes, err, sizeof err), 0);
        psgd_free(s);
    }
    assert_memory_equal(x[0], x[1], sizeof x[0]);
    assert_memory_not_equal(x[0], x[2], sizeof x[0]);
}

/* PyTorch's order. A bucket of A (12x8), B (10x8), C (12x8) and a bias D
 * (12x1) in memory, rebuilt (ddp_reversed: PyTorch's bucket holds D, C, B,
 * A), is the PyTorch bucket whose compressed tensors, grouped by shape,
 * are C, A, B: each tensor ends with the bits it gets in a bucket laid out
 * C, A, B, D in memory, not reversed. The same memory not reversed draws
 * A's Q first: other bits. Batched: the reversed bucket is the matrix of
 * D, C, B, A: the bits of that memory, not reversed. */
enum { PO_A = 96, PO_B = 80, PO_C = 96, PO_D = 12, PO_N = PO_A + PO_B + PO_C + PO_D };

static void po_run(float *mem, const hook_tensor *t, bool reversed, bool batched)
{
    psgd_conf c = conf_of(2, 0, false, false);
    c.batched = batched;
    psgd *s = psgd_new(&c, 1);
    assert_non_null(s);
    hook_bucket b = {.id = 0, .data = mem, .count = PO_N, .tensors = t, .ntensors = 4, .last = true,
                     .ddp_reversed = reversed};
    int calls = 0;
    char err[256];
    uint64_t bytes;
    assert_int_equal(psgd_reduce(s, &b, one_sum, &calls, &bytes, err, sizeof err), 0);
    /* every matrix compressed at rank 2; the bias not (layer-wise) */
    assert_int_equal(bytes, 4 * (batched ? 2 * 2 * psgd_side(PO_N) : 2 * (12 + 8 + 10 + 8 + 12 + 8) + PO_D));
    psgd_free(s);
}

/* The four tensors' shapes: A, B, C and the bias D. */
static const uint64_t po_rows[4] = {12, 10, 12, 12}, po_cols[4] = {8, 8, 8, 1};

/* mem: the tensors src[i] in the order `order` (tensor numbers), t their
 * layout, at[i] where tensor i starts. */
static void po_lay(float *mem, hook_tensor t[4], uint64_t at[4], const float *const src[4], const int order[4])
{
    uint64_t off = 0;
    for (int k = 0; k < 4; k++) {
        int i = order[k];
        uint64_t n = po_rows[i] * po_cols[i];
        t[k] = (hook_tensor){.offset = off, .rows = po_rows[i], .cols = po_cols[i]};
        at[i] = off;
        memcpy(mem + off, src[i], n * sizeof *mem);
        off += n;
    }
}

/* Memory A B C D, reversed, ends tensor by tensor with the bits of memory
 * `same`, not reversed; memory A B C D not reversed with other ones
 * (layer-wise: A's, its Q drawn first). */
static void po_check(const float *const src[4], const int same[4], bool batched)
{
    static const int abcd[4] = {0, 1, 2, 3};
    float x[PO_N], y[PO_N], z[PO_N];
    hook_tensor tx[4], ty[4], tz[4];
    uint64_t ax[4], ay[4], az[4];
    po_lay(x, tx, ax, src, abcd);
    po_run(x, tx, true, batched);
    po_lay(y, ty, ay, src, same);
    po_run(y, ty, false, batched);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(x + ax[i], y + ay[i], po_rows[i] * po_cols[i] * sizeof(float));
    po_lay(z, tz, az, src, abcd);
    po_run(z, tz, false, batched);
    assert_memory_not_equal(z, x, (batched ? PO_N : PO_A) * sizeof(float));
}

static void test_pytorch_order(void **state)
{
    (void)state;
    float all[PO_N];
    rng r;
    rng_seed(&r, 77, 1);
    rng_fill_normal(all, PO_A, &r);
    rng_fill_normal(all + PO_A, PO_B, &r);
    rng_fill_normal(all + PO_A + PO_B, PO_C, &r);
    rng_fill_normal(all + PO_A + PO_B + PO_C, PO_D, &r);
    const float *const src[4] = {all, all + PO_A, all + PO_A + PO_B, all + PO_A + PO_B + PO_C};
    po_check(src, (const int[4]){2, 0, 1, 3}, false); /* layer-wise: C A B D */
    po_check(src, (const int[4]){3, 2, 1, 0}, true);  /* batched: the matrix of D C B A */
}

/* A failed sum fails the bucket with its reason. */
static int failing_sum(void *ctx, float *x, size_t n, char *err, size_t errlen)
{
    (void)ctx;
    (void)x;
    (void)n;
    snprintf(err, errlen, "peer lost");
    return -1;
}

static void test_sum_fails(void **state)
{
    (void)state;
    float g[16 * 16];
    low_rank(g, 16, 16, 2, 1);
    for (uint64_t start = 0; start < 2; start++) {
        psgd_conf c = conf_of(1, start, false, false);
        psgd *s = psgd_new(&c, 1);
        assert_non_null(s);
        hook_tensor t;
        hook_bucket b = bucket_of(g, &t, 16, 16);
        char err[256] = "";
        uint64_t bytes;
        assert_int_equal(psgd_reduce(s, &b, failing_sum, NULL, &bytes, err, sizeof err), -1);
        assert_string_equal(err, "peer lost");
        psgd_free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_should_compress),
        cmocka_unit_test(test_should_compress_bias_rate),
        cmocka_unit_test(test_orthogonalize),
        cmocka_unit_test(test_low_rank_exact),
        cmocka_unit_test(test_error_feedback_invariant),
        cmocka_unit_test(test_warm_start),
        cmocka_unit_test(test_batched),
        cmocka_unit_test(test_iterations_and_bytes),
        cmocka_unit_test(test_seeded),
        cmocka_unit_test(test_pytorch_order),
        cmocka_unit_test(test_sum_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
