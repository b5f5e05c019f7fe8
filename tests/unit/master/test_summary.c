/* test_summary.c — unit tests for master/summary (the --runs summary):
 * t(0.975, df) against the table's known values and beyond it, the mean,
 * standard deviation and 95 % interval of known samples (computed by hand:
 * {1,2,3,4,5} gives 3 +/- 2.7764 * sqrt(2.5) / sqrt(5)), one sample giving
 * no spread (NAN, not 0), a null figure skipped, and summary_json over
 * three headlines. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <jansson.h>

#include "master/summary.h"

static void test_t975(void **state)
{
    (void)state;
    assert_true(fabs(summary_t975(1) - 12.7062) < 1e-4);
    assert_true(fabs(summary_t975(4) - 2.7764) < 1e-4);
    assert_true(fabs(summary_t975(30) - 2.0423) < 1e-4);
    /* Beyond the table: t(0.975, 60) = 2.0003, t(0.975, 120) = 1.9799. */
    assert_true(fabs(summary_t975(60) - 2.0003) < 1e-3);
    assert_true(fabs(summary_t975(120) - 1.9799) < 1e-3);
}

static void test_known_samples(void **state)
{
    (void)state;
    const double x[] = {1, 2, 3, 4, 5};
    summary_ci c;
    summary_of(x, 5, &c);
    assert_int_equal(c.n, 5);
    assert_true(fabs(c.mean - 3) < 1e-12);
    assert_true(fabs(c.stdev - sqrt(2.5)) < 1e-12);
    /* Positive values: the interval on the log scale. */
    double lm = (log(1) + log(2) + log(3) + log(4) + log(5)) / 5, lss = 0;
    for (int i = 1; i <= 5; i++)
        lss += (log(i) - lm) * (log(i) - lm);
    double half = 2.7764 * sqrt(lss / 4) / sqrt(5);
    assert_true(fabs(c.ci_low - exp(lm - half)) < 1e-9);
    assert_true(fabs(c.ci_high - exp(lm + half)) < 1e-9);
    assert_true(c.ci_low > 0);
    /* A figure that may be 0 (a share): the plain interval. */
    const double z[] = {0, 1, 2, 3, 4};
    summary_of(z, 5, &c);
    half = 2.7764 * sqrt(2.5) / sqrt(5);
    assert_true(fabs(c.ci_low - (2 - half)) < 1e-9);
    assert_true(fabs(c.ci_high - (2 + half)) < 1e-9);
    /* Two samples: no interval (issue 38: t(0.975, 1) = 12.7 took a time's
     * below 0), the deviation still. */
    const double y[] = {10, 12};
    summary_of(y, 2, &c);
    assert_true(fabs(c.mean - 11) < 1e-12);
    assert_true(fabs(c.stdev - sqrt(2)) < 1e-12);
    assert_true(isnan(c.ci_low) && isnan(c.ci_high));
    /* The two runs: 988 and 245 ms. */
    const double w[] = {988, 245, 600};
    summary_of(w, 3, &c);
    assert_true(c.ci_low > 0 && c.ci_low < c.mean && c.mean < c.ci_high);
}

static void test_one_sample_and_unknown(void **state)
{
    (void)state;
    const double x[] = {7.5, NAN};
    summary_ci c;
    summary_of(x, 2, &c);
    assert_int_equal(c.n, 1);
    assert_true(c.mean == 7.5);
    assert_true(isnan(c.stdev) && isnan(c.ci_low) && isnan(c.ci_high));
}

static void test_json(void **state)
{
    (void)state;
    json_t *hs = json_array();
    const double p50[] = {87.6, 138.0, 113.7};
    for (int i = 0; i < 3; i++)
        json_array_append_new(hs, json_pack("{s:[{s:s, s:f, s:{s:f}, s:n}]}", "trainers", "trainer", "all",
                                            "step_p50_ms", p50[i], "shares", "forward", 0.25, "samples_per_s"));
    json_t *s = summary_json(hs);
    assert_non_null(s);
    assert_int_equal(json_integer_value(json_object_get(s, "runs")), 3);
    json_t *all = json_array_get(json_object_get(s, "trainers"), 0);
    assert_string_equal(json_string_value(json_object_get(all, "trainer")), "all");
    json_t *c = json_object_get(all, "step_p50_ms");
    assert_int_equal(json_integer_value(json_object_get(c, "n")), 3);
    assert_true(fabs(json_real_value(json_object_get(c, "mean")) - 113.1) < 1e-9);
    /* Deviations -25.5, 24.9, 0.6: sd = sqrt(1270.62 / 2). */
    double sd = sqrt((25.5 * 25.5 + 24.9 * 24.9 + 0.6 * 0.6) / 2);
    assert_true(fabs(json_real_value(json_object_get(c, "stdev")) - sd) < 1e-9);
    /* A time: its interval on the log scale (issue 38). */
    double lm = (log(87.6) + log(138.0) + log(113.7)) / 3, lss = 0;
    for (int i = 0; i < 3; i++)
        lss += (log(p50[i]) - lm) * (log(p50[i]) - lm);
    double half = 4.3027 * sqrt(lss / 2) / sqrt(3);
    assert_true(fabs(json_real_value(json_array_get(json_object_get(c, "ci95"), 0)) - exp(lm - half)) < 1e-9);
    assert_true(fabs(json_real_value(json_array_get(json_object_get(c, "ci95"), 1)) - exp(lm + half)) < 1e-9);
    /* A share with no spread: stdev 0, an interval of width 0. */
    json_t *f = json_object_get(all, "shares.forward");
    assert_true(fabs(json_real_value(json_object_get(f, "stdev"))) < 1e-12);
    /* A figure no run knew: n 0, mean null. */
    json_t *sps = json_object_get(all, "samples_per_s");
    assert_int_equal(json_integer_value(json_object_get(sps, "n")), 0);
    assert_true(json_is_null(json_object_get(sps, "mean")));
    json_decref(s);
    json_decref(hs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t975),
        cmocka_unit_test(test_known_samples),
        cmocka_unit_test(test_one_sample_and_unknown),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
