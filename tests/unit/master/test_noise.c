/* test_noise.c — master/noise.c: intervals of times and rates never go
 * negative, the method follows the runs, the block length follows the
 * steps' memory, and a ratio's interval names a winner only where the
 * sides differ beyond their noise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "master/noise.h"
#include "shared/rng.h"

/* A run of T trainers x n steps: base ms, times (1 + spread * N(0,1)-ish:
 * a sum of uniforms), every step at least 0.1 ms. */
typedef struct {
    double *v[8];
    const double *p[8];
    noise_run r;
} run_data;

static void run_make(run_data *d, size_t T, size_t n, double base, double spread, uint64_t seed)
{
    rng g;
    rng_seed(&g, seed, 77);
    for (size_t t = 0; t < T; t++) {
        d->v[t] = malloc(n * sizeof(double));
        assert_non_null(d->v[t]);
        for (size_t i = 0; i < n; i++) {
            double z = rng_unit(&g) + rng_unit(&g) + rng_unit(&g) - 1.5; /* sd 0.5 */
            double x = base * (1 + 2 * spread * z);
            d->v[t][i] = x < 0.1 ? 0.1 : x;
        }
        d->p[t] = d->v[t];
    }
    d->r = (noise_run){.steps = d->p, .ntrainers = T, .n = n};
}

static void run_free(run_data *d)
{
    for (size_t t = 0; t < d->r.ntrainers; t++)
        free(d->v[t]);
}

/* The case: 2 runs of 3 steps, one run 4x the other (988 ms
 * against 245): a t-interval over 2 runs went to [-4103, 5336]. Here both
 * figures' intervals stay positive and contain the value. */
static void test_two_wild_runs_positive(void **state)
{
    (void)state;
    double a0[] = {990, 985, 988}, a1[] = {250, 240, 245};
    const double *pa[] = {a0}, *pb[] = {a1};
    noise_run runs[2] = {{.steps = pa, .ntrainers = 1, .n = 3}, {.steps = pb, .ntrainers = 1, .n = 3}};
    noise_ci c;
    assert_int_equal(noise_interval(runs, 2, NOISE_P50, 25, 1, &c), 0);
    assert_string_equal(c.method, "block bootstrap over steps");
    assert_true(c.low > 0 && c.low <= c.value && c.value <= c.high);
    assert_true(fabs(c.value - (988 + 245) / 2.0) < 1e-9);
    assert_int_equal(noise_interval(runs, 2, NOISE_SAMPLES_PER_S, 25, 1, &c), 0);
    assert_true(c.low > 0 && c.low <= c.high);
}

/* Three runs or more: Student t on the log scale, positive however wide. */
static void test_log_t_over_runs(void **state)
{
    (void)state;
    double x0[] = {10, 10}, x1[] = {100, 100}, x2[] = {1000, 1000};
    const double *p0[] = {x0}, *p1[] = {x1}, *p2[] = {x2};
    noise_run runs[3] = {{.steps = p0, .ntrainers = 1, .n = 2},
                         {.steps = p1, .ntrainers = 1, .n = 2},
                         {.steps = p2, .ntrainers = 1, .n = 2}};
    noise_ci c;
    assert_int_equal(noise_interval(runs, 3, NOISE_P50, 10, 1, &c), 0);
    assert_string_equal(c.method, "log-t over runs");
    assert_true(fabs(c.value - 370) < 1e-9);
    /* log10: mean 2, sd 1, t(0.975, 2) = 4.303: 10^(2 +- 4.303/sqrt(3)) */
    assert_true(fabs(log10(c.low) - (2 - 4.302652729911275 / sqrt(3))) < 1e-3);
    assert_true(fabs(log10(c.high) - (2 + 4.302652729911275 / sqrt(3))) < 1e-3);
    assert_true(c.low > 0);
}

/* The block follows the memory: white noise gets short blocks, a slow
 * drift long ones (capped at n/4). */
static void test_block_length(void **state)
{
    (void)state;
    enum { N = 400 };
    double w[N], d[N];
    rng g;
    rng_seed(&g, 3, 9);
    for (int i = 0; i < N; i++) {
        w[i] = rng_unit(&g);
        d[i] = sin(i / 40.0) + 0.01 * rng_unit(&g);
    }
    assert_true(noise_block_len(w, N) <= 4);
    size_t L = noise_block_len(d, N);
    assert_true(L >= 20 && L <= N / 4);
    double c[10] = {5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
    assert_int_equal(noise_block_len(c, 10), 1);
    assert_int_equal(noise_block_len(w, 5), 1);
}

/* The ratio: two sides 20 % apart with 5 % noise exclude 1; two draws of
 * the same side include it; deterministic for a seed. */
static void test_ratio_verdict(void **state)
{
    (void)state;
    run_data a[3], b[3], c[3];
    noise_run ra[3], rb[3], rc[3];
    for (int i = 0; i < 3; i++) {
        run_make(&a[i], 2, 60, 120, 0.05, 10 + i);
        run_make(&b[i], 2, 60, 100, 0.05, 20 + i);
        run_make(&c[i], 2, 60, 100, 0.05, 30 + i);
        ra[i] = a[i].r;
        rb[i] = b[i].r;
        rc[i] = c[i].r;
    }
    noise_ci r, r2, same;
    assert_int_equal(noise_ratio(ra, 3, rb, 3, NOISE_P50, 10, 5, &r), 0);
    assert_true(r.value > 1.1 && r.value < 1.3);
    assert_true(r.low > 1 && r.low <= r.value && r.value <= r.high);
    assert_string_equal(r.method, "two-stage bootstrap (runs, then blocks of steps)");
    assert_int_equal(noise_ratio(ra, 3, rb, 3, NOISE_P50, 10, 5, &r2), 0);
    assert_memory_equal(&r, &r2, sizeof r); /* the same seed: the same interval */
    assert_int_equal(noise_ratio(rb, 3, rc, 3, NOISE_P50, 10, 5, &same), 0);
    assert_true(same.low < 1 && same.high > 1);
    /* One run a side: the steps alone still decide the clear case. */
    assert_int_equal(noise_ratio(ra, 1, rb, 1, NOISE_SAMPLES_PER_S, 10, 5, &r), 0);
    assert_true(r.high < 1); /* the slower side makes fewer samples/s */
    for (int i = 0; i < 3; i++) {
        run_free(&a[i]);
        run_free(&b[i]);
        run_free(&c[i]);
    }
}

/* Nothing to go on: no interval, never a made-up one. */
static void test_no_data(void **state)
{
    (void)state;
    double one[] = {5};
    const double *p[] = {one};
    noise_run r = {.steps = p, .ntrainers = 1, .n = 1};
    noise_ci c;
    assert_int_equal(noise_interval(&r, 1, NOISE_P50, 1, 1, &c), 0);
    assert_true(c.value == 5);
    assert_true(isnan(c.low) && isnan(c.high));
    assert_null(c.method);
    assert_int_equal(noise_interval(NULL, 0, NOISE_P50, 1, 1, &c), 0);
    assert_true(isnan(c.value));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_wild_runs_positive), cmocka_unit_test(test_log_t_over_runs),
        cmocka_unit_test(test_block_length),           cmocka_unit_test(test_ratio_verdict),
        cmocka_unit_test(test_no_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
