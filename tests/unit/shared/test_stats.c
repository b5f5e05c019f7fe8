/* test_stats.c — unit tests for shared/stats (running statistics, exact and
 * histogram quantiles, merge, reset) and shared/metrics (registry, table).
 *
 * Expected values were computed by hand with numpy's default 'linear'
 * percentile method: h = q*(n-1) over the sorted samples, interpolated
 * between x[floor(h)] and x[floor(h)+1]. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/metrics.h"
#include "shared/stats.h"

#define EPS 1e-9

static void assert_close(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol)) {
        print_error("got %.12g, want %.12g (tol %g)\n", got, want, tol);
        fail();
    }
}

static void assert_rel(double got, double want, double rel)
{
    assert_close(got, want, fabs(want) * rel);
}

static void assert_summary_zero(const stats_summary *su)
{
    stats_summary zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(su, &zero, sizeof zero);
}

static void test_empty(void **state)
{
    (void)state;
    stats s;
    stats_init(&s);
    stats_summary su;
    stats_summarize(&s, &su);
    assert_summary_zero(&su);
    assert_true(stats_quantile(&s, 0.5) == 0);
    assert_true(stats_hist_quantile(&s, 0.5) == 0);
    stats_free(&s);
}

static void test_single(void **state)
{
    (void)state;
    stats s;
    stats_init(&s);
    assert_int_equal(stats_add(&s, 3.25), 0);
    stats_summary su;
    stats_summarize(&s, &su);
    assert_int_equal(su.count, 1);
    assert_true(su.min == 3.25 && su.max == 3.25 && su.mean == 3.25 && su.sum == 3.25);
    assert_true(su.variance == 0 && su.stdev == 0);
    assert_true(su.p50 == 3.25 && su.p75 == 3.25 && su.p90 == 3.25 && su.p95 == 3.25 &&
                su.p99 == 3.25);
    assert_true(stats_quantile(&s, 0) == 3.25 && stats_quantile(&s, 1) == 3.25);
    stats_free(&s);
}

static void test_one_to_ten(void **state)
{
    (void)state;
    stats s;
    stats_init(&s);
    for (int i = 10; i >= 1; i--) /* reverse order: quantiles must sort */
        assert_int_equal(stats_add(&s, i), 0);
    stats_summary su;
    stats_summarize(&s, &su);
    assert_int_equal(su.count, 10);
    assert_close(su.min, 1, EPS);
    assert_close(su.max, 10, EPS);
    assert_close(su.sum, 55, EPS);
    assert_close(su.mean, 5.5, EPS);
    assert_close(su.variance, 82.5 / 9, EPS); /* sum of squared deviations 82.5, n-1 = 9 */
    assert_close(su.stdev, sqrt(82.5 / 9), EPS);
    assert_close(su.p50, 5.5, EPS);  /* h = 4.5 */
    assert_close(su.p75, 7.75, EPS); /* h = 6.75 */
    assert_close(su.p90, 9.1, EPS);  /* h = 8.1 */
    assert_close(su.p95, 9.55, EPS); /* h = 8.55 */
    assert_close(su.p99, 9.91, EPS); /* h = 8.91 */
    assert_close(stats_quantile(&s, 0.5), 5.5, EPS);
    assert_close(stats_quantile(&s, 0), 1, EPS);
    assert_close(stats_quantile(&s, 1), 10, EPS);
    assert_close(stats_quantile(&s, -3), 1, EPS); /* clamped */
    assert_close(stats_quantile(&s, 7), 10, EPS);
    /* stats_quantile must not reorder the kept samples */
    assert_true(s.samples[0] == 10 && s.samples[9] == 1);
    stats_free(&s);
}

static void test_small_set(void **state)
{
    (void)state;
    /* sorted: 2 4 4 4 5 5 7 9; mean 5; squared deviations sum to 32 */
    static const double x[] = {9, 4, 2, 5, 4, 7, 4, 5};
    stats s;
    stats_init(&s);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        assert_int_equal(stats_add(&s, x[i]), 0);
    stats_summary su;
    stats_summarize(&s, &su);
    assert_int_equal(su.count, 8);
    assert_close(su.min, 2, EPS);
    assert_close(su.max, 9, EPS);
    assert_close(su.mean, 5, EPS);
    assert_close(su.variance, 32.0 / 7, EPS);
    assert_close(su.p50, 4.5, EPS);  /* h = 3.5: 4 .. 5 */
    assert_close(su.p75, 5.5, EPS);  /* h = 5.25: 5 .. 7 */
    assert_close(su.p90, 7.6, EPS);  /* h = 6.3: 7 .. 9 */
    assert_close(su.p95, 8.3, EPS);  /* h = 6.65 */
    assert_close(su.p99, 8.86, EPS); /* h = 6.93 */
    stats_free(&s);
}

static void test_negative_accepted(void **state)
{
    (void)state;
    stats s;
    stats_init(&s);
    stats_add(&s, -5);
    stats_add(&s, 5);
    stats_summary su;
    stats_summarize(&s, &su);
    assert_close(su.min, -5, EPS);
    assert_close(su.max, 5, EPS);
    assert_close(su.mean, 0, EPS);
    assert_close(su.variance, 50, EPS);
    assert_close(su.p50, 0, EPS);
    stats_free(&s);
}

static void fill_range(stats *s, int from, int to)
{
    for (int i = from; i <= to; i++)
        assert_int_equal(stats_add(s, i * 0.37), 0);
}

static void assert_summary_close(const stats_summary *a, const stats_summary *b)
{
    assert_int_equal(a->count, b->count);
    assert_rel(a->min, b->min, 1e-12);
    assert_rel(a->max, b->max, 1e-12);
    assert_rel(a->mean, b->mean, 1e-12);
    assert_rel(a->variance, b->variance, 1e-9);
    assert_rel(a->stdev, b->stdev, 1e-9);
    assert_rel(a->sum, b->sum, 1e-12);
    assert_rel(a->p50, b->p50, 1e-12);
    assert_rel(a->p75, b->p75, 1e-12);
    assert_rel(a->p90, b->p90, 1e-12);
    assert_rel(a->p95, b->p95, 1e-12);
    assert_rel(a->p99, b->p99, 1e-12);
}

static void test_merge(void **state)
{
    (void)state;
    stats all, a, b, empty;
    stats_init(&all);
    stats_init(&a);
    stats_init(&b);
    stats_init(&empty);
    fill_range(&all, 1, 1000);
    fill_range(&a, 1, 300);
    fill_range(&b, 301, 1000);

    assert_int_equal(stats_merge(&a, &b), 0);
    assert_int_equal(stats_merge(&a, &empty), 0); /* no-op */
    stats_summary sa, sall;
    stats_summarize(&a, &sa);
    stats_summarize(&all, &sall);
    assert_summary_close(&sa, &sall);
    assert_int_equal(a.nsamples, 1000);
    /* histograms added too: the approximate path agrees as well */
    assert_rel(stats_hist_quantile(&a, 0.9), stats_hist_quantile(&all, 0.9), 1e-12);

    /* into an empty dst */
    assert_int_equal(stats_merge(&empty, &all), 0);
    stats_summary se;
    stats_summarize(&empty, &se);
    assert_summary_close(&se, &sall);

    /* with itself: every sample twice, so the mean stays and n doubles */
    assert_int_equal(stats_merge(&all, &all), 0);
    assert_int_equal(all.count, 2000);
    assert_int_equal(all.nsamples, 2000);
    assert_rel(all.mean, sall.mean, 1e-12);
    assert_rel(all.sum, 2 * sall.sum, 1e-12);
    /* sample variance of the doubled set: m2 doubles, n-1 goes 999 -> 1999 */
    stats_summary s2;
    stats_summarize(&all, &s2);
    assert_rel(s2.variance, sall.variance * 2 * 999 / 1999, 1e-9);

    stats_free(&all);
    stats_free(&a);
    stats_free(&b);
    stats_free(&empty);
}

static void test_reset(void **state)
{
    (void)state;
    stats s;
    stats_init(&s);
    fill_range(&s, 1, 500);
    double *samples = s.samples;
    uint64_t *hist = s.hist;
    size_t cap = s.cap;
    stats_reset(&s);

    stats_summary su;
    stats_summarize(&s, &su);
    assert_summary_zero(&su);
    assert_int_equal(s.nsamples, 0);
    assert_true(stats_hist_quantile(&s, 0.5) == 0); /* histogram emptied */
    assert_ptr_equal(s.samples, samples);            /* allocations kept */
    assert_ptr_equal(s.hist, hist);
    assert_int_equal(s.cap, cap);

    stats_add(&s, 7);
    stats_add(&s, 9);
    stats_summarize(&s, &su);
    assert_int_equal(su.count, 2);
    assert_close(su.mean, 8, EPS);
    assert_close(su.min, 7, EPS);
    assert_close(su.p50, 8, EPS);
    assert_close(su.variance, 2, EPS);
    stats_free(&s);
    assert_null(s.samples);
    assert_null(s.hist);
}

/* Kept samples reach the histogram in batches (stats_add): the histogram's
 * readers see the samples still waiting too. 1000 samples leave the last
 * 232 waiting, and they are the largest: the top quantiles come from them. */
static void test_hist_sees_waiting_samples(void **state)
{
    (void)state;
    stats s, t, m;
    stats_init(&s);
    stats_init(&t);
    stats_init(&m);
    fill_range(&s, 1, 1000);
    assert_rel(stats_hist_quantile(&s, 1.0), 1000 * 0.37, 1.0 / 256); /* fill_range's values are i * 0.37 */
    assert_rel(stats_hist_quantile(&s, 0.9), 900.1 * 0.37, 1.0 / 256);
    /* the live view, past its exact limit, reads the histogram as well */
    fill_range(&t, 1, 9000);
    stats_summary su;
    stats_summarize_fast(&t, &su);
    assert_rel(su.p99, 8910.01 * 0.37, 1.0 / 256);
    /* merged: the waiting samples of both sides are counted once each */
    fill_range(&m, 1, 1000);
    assert_int_equal(stats_merge(&m, &s), 0);
    assert_rel(stats_hist_quantile(&m, 1.0), 1000 * 0.37, 1.0 / 256);
    assert_rel(stats_hist_quantile(&m, 0.5), 500.5 * 0.37, 1.0 / 256);
    stats_add(&m, 5000); /* one more, over what merged in */
    assert_rel(stats_hist_quantile(&m, 1.0), 5000, 1.0 / 256);
    assert_rel(stats_hist_quantile(&m, 0.5), 501 * 0.37, 1.0 / 256);
    stats_free(&s);
    stats_free(&t);
    stats_free(&m);
}

/* The histogram path on its own, against exact quantiles of the same data,
 * over several scales inside the documented range. */
static void test_hist_quantile_error(void **state)
{
    (void)state;
    /* 20000 * 500 = 1e7 ms: the top of the documented range */
    static const double scales[] = {5e-5, 0.001, 1, 100, 500};
    static const double qs[] = {0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1};
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
        stats s;
        stats_init(&s);
        for (int i = 1; i <= 20000; i++)
            assert_int_equal(stats_add(&s, i * scales[k]), 0);
        for (size_t j = 0; j < sizeof qs / sizeof qs[0]; j++) {
            double exact = stats_quantile(&s, qs[j]);
            assert_rel(exact, (1 + qs[j] * 19999) * scales[k], 1e-9);
            assert_rel(stats_hist_quantile(&s, qs[j]), exact, 0.01);
            /* the documented bound is tighter: half a bin, 1/256 (reached
             * exactly by a sample on a bin's lower edge, hence the slack) */
            assert_rel(stats_hist_quantile(&s, qs[j]), exact, 1.0 / 256 * (1 + 1e-9));
        }
        stats_free(&s);
    }
}

static void test_hist_clamps(void **state)
{
    (void)state;
    stats s;
    stats_init(&s);
    stats_add(&s, 0);
    stats_add(&s, -1);
    stats_add(&s, NAN);
    stats_add(&s, 1e12);
    stats_add(&s, INFINITY);
    assert_int_equal(s.count, 5);
    assert_true(isnan(s.mean)); /* accepted as given */
    /* three values in the first bin, two in the last */
    double lo = stats_hist_quantile(&s, 0), hi = stats_hist_quantile(&s, 1);
    assert_true(lo > 0 && lo < 1e-6);
    assert_true(hi > 1e7 && hi < 2e7);
    assert_true(stats_hist_quantile(&s, 0.5) == lo);
    assert_true(stats_hist_quantile(&s, 0.75) == hi);
    stats_free(&s);
}

/* Past STATS_EXACT_MAX the kept samples stop growing and quantiles come from
 * the histogram, within 1% of the exact answer for uniform 1..N. */
static void test_beyond_exact_max(void **state)
{
    (void)state;
    const int n = STATS_EXACT_MAX + 5000;
    stats s;
    stats_init(&s);
    for (int i = 1; i <= n; i++)
        assert_int_equal(stats_add(&s, i), 0);
    assert_int_equal(s.count, (uint64_t)n);
    assert_int_equal(s.nsamples, STATS_EXACT_MAX);
    assert_int_equal(s.cap, STATS_EXACT_MAX);

    stats_summary su;
    stats_summarize(&s, &su);
    assert_close(su.min, 1, EPS);
    assert_close(su.max, n, EPS);
    assert_rel(su.mean, (n + 1) / 2.0, 1e-12);
    assert_rel(su.variance, (double)n * (n + 1) / 12.0, 1e-9); /* var of 1..n, n-1 denominator */
    const double qs[] = {0.5, 0.75, 0.9, 0.95, 0.99};
    const double got[] = {su.p50, su.p75, su.p90, su.p95, su.p99};
    for (size_t j = 0; j < 5; j++) {
        double exact = 1 + qs[j] * (n - 1);
        assert_rel(got[j], exact, 0.01);
        assert_true(stats_quantile(&s, qs[j]) == stats_hist_quantile(&s, qs[j]));
        assert_true(got[j] == stats_hist_quantile(&s, qs[j]));
    }

    /* merging past the cap: samples truncated, histogram path, right count */
    stats t;
    stats_init(&t);
    stats_add(&t, 1);
    assert_int_equal(stats_merge(&t, &s), 0);
    assert_int_equal(t.count, (uint64_t)n + 1);
    assert_int_equal(t.nsamples, STATS_EXACT_MAX);
    assert_rel(stats_quantile(&t, 0.5), n / 2.0, 0.01);
    stats_free(&t);
    stats_free(&s);
}

static void test_metrics_registry(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    assert_non_null(m);
    assert_int_equal(metrics_size(m), 0);

    stats *dense = metrics_get(m, "hook_future_metric,rpc_dense");
    stats *fwd = metrics_get(m, "forward_metric,forward_pass");
    assert_non_null(dense);
    assert_non_null(fwd);
    assert_ptr_equal(metrics_get(m, "hook_future_metric,rpc_dense"), dense);
    assert_int_equal(metrics_size(m), 2);

    /* stats pointers stay valid however many metrics follow */
    char key[64];
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "extra_metric,m%d", i);
        assert_non_null(metrics_get(m, key));
    }
    assert_int_equal(metrics_size(m), 42);
    assert_ptr_equal(metrics_get(m, "hook_future_metric,rpc_dense"), dense);
    assert_ptr_equal(metrics_at(m, 1), fwd);
    assert_string_equal(metrics_key_at(m, 0), "hook_future_metric,rpc_dense");
    assert_string_equal(metrics_key_at(m, 1), "forward_metric,forward_pass");
    assert_string_equal(metrics_key_at(m, 41), "extra_metric,m39");

    for (int i = 1; i <= 10; i++)
        assert_int_equal(stats_add(metrics_get(m, "hook_future_metric,rpc_dense"), i), 0);
    assert_int_equal(stats_add(metrics_get(m, "method_metric,average computation"), 2.5), 0);
    assert_int_equal(metrics_size(m), 43);
    assert_int_equal(dense->count, 10);
    assert_close(stats_quantile(dense, 0.9), 9.1, EPS);

    metrics_reset(m);
    assert_int_equal(metrics_size(m), 43);
    assert_int_equal(dense->count, 0);
    assert_int_equal(metrics_at(m, 42)->count, 0);
    assert_string_equal(metrics_key_at(m, 42), "method_metric,average computation");
    metrics_free(m);
    metrics_free(NULL);
}

/* A numbered family (a server's trainer_lag_R) reads in number order
 * whatever order its members came in; other keys keep insertion order, and
 * a family's members keep their stats however many come later. */
static void test_metrics_numbered_family(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    assert_non_null(m);
    assert_non_null(metrics_get(m, "parameter_server_batch_metric,param_index_batch"));
    stats *lag10 = metrics_get(m, "lag_10");
    assert_non_null(metrics_get(m, "lag_2"));
    assert_non_null(metrics_get(m, "method_metric,average computation"));
    assert_non_null(metrics_get(m, "lag_0"));
    assert_non_null(metrics_get(m, "lag_9"));
    assert_non_null(metrics_get(m, "other_1")); /* another family: last */
    assert_non_null(metrics_get(m, "lag_"));    /* no number: last */
    assert_non_null(metrics_get(m, "lag_11"));  /* the largest: where it is created */
    assert_ptr_equal(metrics_get(m, "lag_10"), lag10);
    static const char *const want[] = {"parameter_server_batch_metric,param_index_batch", "lag_0", "lag_2", "lag_9",
                                       "lag_10", "method_metric,average computation", "other_1", "lag_", "lag_11"};
    assert_int_equal(metrics_size(m), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_string_equal(metrics_key_at(m, i), want[i]);
    assert_ptr_equal(metrics_at(m, 4), lag10);
    metrics_free(m);
}

/* Finds the row for key and returns its count column. */
static unsigned long long row_count(const char *table, const char *key)
{
    const char *row = strstr(table, key);
    assert_non_null(row);
    unsigned long long count = 0;
    assert_int_equal(sscanf(row + strlen(key), "%llu", &count), 1);
    return count;
}

static void test_metrics_print_table(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    assert_non_null(m);
    for (int i = 1; i <= 10; i++)
        stats_add(metrics_get(m, "batch_level_metric,batch_all"), i);
    for (int i = 0; i < 3; i++)
        stats_add(metrics_get(m, "parameter_server_straggler_metric,param_index_straggler"), 1.5);
    metrics_get(m, "backward_metric,backward"); /* present, never recorded */

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    metrics_print_table(m, f, "Trainer metrics (rank 0)");
    assert_int_equal(fclose(f), 0);
    assert_non_null(buf);

    assert_true(strncmp(buf, "Trainer metrics (rank 0)\n", 25) == 0);
    const char *header = buf + 25;
    assert_true(strncmp(header, "metric ", 7) == 0);
    static const char *const cols[] = {"count", "min",   "max", "mean", "variance",
                                       "stdev", "p50",   "p90", "p99"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        assert_non_null(strstr(header, cols[i]));

    assert_int_equal(row_count(buf, "batch_level_metric,batch_all"), 10);
    assert_int_equal(
        row_count(buf, "parameter_server_straggler_metric,param_index_straggler"), 3);
    assert_int_equal(row_count(buf, "backward_metric,backward"), 0);
    /* 1..10: mean 5.500, variance 9.167, p90 9.100, 3 decimals */
    const char *row = strstr(buf, "batch_level_metric,batch_all");
    const char *eol = strchr(row, '\n');
    assert_non_null(eol);
    char line[512];
    size_t n = (size_t)(eol - row);
    assert_true(n < sizeof line);
    memcpy(line, row, n);
    line[n] = '\0';
    assert_non_null(strstr(line, " 5.500"));
    assert_non_null(strstr(line, " 9.167"));
    assert_non_null(strstr(line, " 9.100"));
    assert_non_null(strstr(line, " 9.910"));

    /* rows in insertion order, keys aligned to the longest one */
    const char *r1 = strstr(buf, "batch_level_metric,batch_all");
    const char *r2 = strstr(buf, "parameter_server_straggler_metric");
    const char *r3 = strstr(buf, "backward_metric,backward");
    assert_true(r1 < r2 && r2 < r3);
    assert_int_equal(strchr(r1, '\n') - r1, strchr(r2, '\n') - r2);

    free(buf);
    metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_one_to_ten),
        cmocka_unit_test(test_small_set),
        cmocka_unit_test(test_negative_accepted),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_hist_sees_waiting_samples),
        cmocka_unit_test(test_hist_quantile_error),
        cmocka_unit_test(test_hist_clamps),
        cmocka_unit_test(test_beyond_exact_max),
        cmocka_unit_test(test_metrics_registry),
        cmocka_unit_test(test_metrics_numbered_family),
        cmocka_unit_test(test_metrics_print_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
