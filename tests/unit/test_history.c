/* test_history.c — the master's chart history (master/history.c): what a
 * snapshot becomes a point, what is kept of it, the ring's bounds, the
 * document /api/v1/history serves. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "master/history.h"

#define M_BATCH "batch_level_metric,batch_all"
#define M_RPC "hook_future_metric,rpc_dense"
#define M_FWD "forward_metric,forward_pass"
#define M_STRAG "parameter_server_straggler_metric,param_index_straggler"

static stats_summary summary(uint64_t count, double mean)
{
    return (stats_summary){.count = count, .mean = mean, .p50 = mean, .p90 = 2 * mean, .p99 = 3 * mean,
                           .min = 0, .max = 4 * mean};
}

static snap_stat fixture[4];

static snapshot_input input(const char *phase, uint32_t run, uint64_t count)
{
    fixture[0] = (snap_stat){"trainer", 0, M_BATCH, summary(count, 10.0)};
    fixture[1] = (snap_stat){"trainer", 0, M_RPC, summary(count, 1.0)}; /* not charted */
    fixture[2] = (snap_stat){"trainer", -1, M_FWD, summary(count, 4.0)};
    fixture[3] = (snap_stat){"server", 1, M_STRAG, summary(count, 0.5)};
    return (snapshot_input){.phase = phase, .pass = strcmp(phase, "warmup") == 0 ? "warmup" : "timed",
                            .run = run, .stats = fixture, .nstats = 4};
}

static json_t *doc(const history *h)
{
    char *s = history_json(h);
    assert_non_null(s);
    json_error_t err;
    json_t *v = json_loads(s, JSON_REJECT_DUPLICATES, &err);
    free(s);
    assert_non_null(v);
    return v;
}

static void test_what_becomes_a_point(void **state)
{
    (void)state;
    history *h = history_new(10, 1 << 20);
    assert_non_null(h);
    snapshot_input w = input("waiting", 1, 0);
    assert_int_equal(history_offer(h, 100.0, &w, false), 0); /* nothing while waiting */
    snapshot_input wu = input("warmup", 1, 2);
    assert_int_equal(history_offer(h, 100.0, &wu, false), 1);
    assert_int_equal(history_offer(h, 100.5, &wu, false), 0); /* within the period */
    assert_int_equal(history_offer(h, 100.6, &wu, true), 1);  /* but the pass's last figures */
    assert_int_equal(history_offer(h, 101.7, &wu, false), 1);
    snapshot_input r = input("running", 1, 3);
    assert_int_equal(history_offer(h, 101.8, &r, false), 1); /* the phase changed: at once */
    assert_int_equal(history_offer(h, 102.8, &r, false), 1);
    snapshot_input d = input("done", 1, 5);
    assert_int_equal(history_offer(h, 102.9, &d, false), 1); /* the end, once */
    assert_int_equal(history_offer(h, 103.9, &d, false), 0); /* no more points after done */
    assert_int_equal(history_offer(h, 200.0, &d, false), 0);
    snapshot_input r2 = input("warmup", 2, 1);
    assert_int_equal(history_offer(h, 201.0, &r2, false), 1); /* the next run (--runs) */
    assert_int_equal(history_points(h), 7);

    json_t *v = doc(h);
    assert_int_equal(json_integer_value(json_object_get(v, "max_points")), 10);
    json_t *pts = json_object_get(v, "points");
    assert_int_equal(json_array_size(pts), 7);
    json_t *p0 = json_array_get(pts, 0);
    assert_string_equal(json_string_value(json_object_get(p0, "phase")), "warmup");
    assert_string_equal(json_string_value(json_object_get(p0, "pass")), "warmup");
    assert_int_equal(json_integer_value(json_object_get(p0, "run")), 1);
    assert_true(json_real_value(json_object_get(p0, "t")) == 100.0);
    json_t *g = json_object_get(p0, "groups");
    json_t *b = json_object_get(json_object_get(json_object_get(g, "trainer"), "0"), M_BATCH);
    assert_int_equal(json_integer_value(json_object_get(b, "count")), 2);
    assert_true(json_real_value(json_object_get(b, "mean")) == 10.0);
    assert_true(json_real_value(json_object_get(b, "p90")) == 20.0);
    /* only what the page charts */
    assert_null(json_object_get(json_object_get(json_object_get(g, "trainer"), "0"), M_RPC));
    assert_non_null(json_object_get(json_object_get(json_object_get(g, "trainer"), "all"), M_FWD));
    assert_non_null(json_object_get(json_object_get(json_object_get(g, "server"), "1"), M_STRAG));
    assert_string_equal(json_string_value(json_object_get(json_array_get(pts, 5), "phase")), "done");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, 6), "run")), 2);
    json_decref(v);
    history_free(h);
}

static void test_bounded(void **state)
{
    (void)state;
    history *h = history_new(3, 1 << 20);
    snapshot_input r = input("running", 1, 1);
    for (int i = 0; i < 10; i++)
        assert_int_equal(history_offer(h, 100.0 + i, &r, false), 1);
    assert_int_equal(history_points(h), 3);
    json_t *v = doc(h);
    json_t *pts = json_object_get(v, "points");
    assert_int_equal(json_array_size(pts), 3);
    /* the newest kept, oldest first */
    assert_true(json_real_value(json_object_get(json_array_get(pts, 0), "t")) == 107.0);
    assert_true(json_real_value(json_object_get(json_array_get(pts, 2), "t")) == 109.0);
    json_decref(v);
    history_free(h);

    /* bytes bound: a budget of about two points keeps two */
    h = history_new(100, 1);
    char *one;
    assert_int_equal(history_offer(h, 100.0, &r, false), 1);
    one = history_json(h);
    size_t point = strlen(one) - strlen("{\"period_s\":1,\"max_points\":100,\"points\":[]}");
    free(one);
    history_free(h);
    h = history_new(100, 2 * point + point / 2);
    for (int i = 0; i < 10; i++)
        assert_int_equal(history_offer(h, 100.0 + i, &r, false), 1);
    assert_int_equal(history_points(h), 2);
    history_free(h);
}

/* A series (--runs) keeps the current run and the one before: the
 * master does not grow with the series (tests/multihost/test_soak.py). */
static void test_series_keeps_two_runs(void **state)
{
    (void)state;
    history *h = history_new(100, 1 << 20);
    double t = 100.0;
    for (uint32_t run = 1; run <= 5; run++) {
        snapshot_input r = input("running", run, 3), d = input("done", run, 3);
        assert_int_equal(history_offer(h, t += 2, &r, false), 1);
        assert_int_equal(history_offer(h, t += 2, &r, false), 1);
        assert_int_equal(history_offer(h, t += 2, &d, false), 1);
        assert_int_equal(history_points(h), run == 1 ? 3 : 6); /* 3 points a run, 2 runs kept */
        json_t *v = doc(h);
        json_t *pts = json_object_get(v, "points");
        assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, 0), "run")), run == 1 ? 1 : run - 1);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(pts, json_array_size(pts) - 1), "run")),
                         run);
        json_decref(v);
    }
    history_free(h);
}

static void test_empty(void **state)
{
    (void)state;
    history *h = history_new(5, 1 << 20);
    char *s = history_json(h);
    assert_string_equal(s, "{\"period_s\":1,\"max_points\":5,\"points\":[]}");
    free(s);
    history_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_what_becomes_a_point),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_series_keeps_two_runs),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
