/* test_history.c — the master's chart history (master/history.c): what a
 * snapshot becomes a point, what is kept of it, the ring's bounds, the
 * document /api/v1/history serves. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
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
    assert_int_equal(history_offer(h, 100.0, &w, NULL, false), 0); /* nothing while waiting */
    snapshot_input wu = input("warmup", 1, 2);
    assert_int_equal(history_offer(h, 100.0, &wu, NULL, false), 1);
    assert_int_equal(history_offer(h, 100.5, &wu, NULL, false), 0); /* within the period */
    assert_int_equal(history_offer(h, 100.6, &wu, NULL, true), 1);  /* but the pass's last figures */
    assert_int_equal(history_offer(h, 101.7, &wu, NULL, false), 1);
    snapshot_input r = input("running", 1, 3);
    assert_int_equal(history_offer(h, 101.8, &r, NULL, false), 1); /* the phase changed: at once */
    assert_int_equal(history_offer(h, 102.8, &r, NULL, false), 1);
    snapshot_input d = input("done", 1, 5);
    assert_int_equal(history_offer(h, 102.9, &d, NULL, false), 1); /* the end, once */
    assert_int_equal(history_offer(h, 103.9, &d, NULL, false), 0); /* no more points after done */
    assert_int_equal(history_offer(h, 200.0, &d, NULL, false), 0);
    snapshot_input r2 = input("warmup", 2, 1);
    assert_int_equal(history_offer(h, 201.0, &r2, NULL, false), 1); /* the next run (--runs) */
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
        assert_int_equal(history_offer(h, 100.0 + i, &r, NULL, false), 1);
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
    assert_int_equal(history_offer(h, 100.0, &r, NULL, false), 1);
    one = history_json(h);
    size_t point = strlen(one) - strlen("{\"period_s\":1,\"window_s\":10,\"max_points\":100,\"points\":[]}");
    free(one);
    history_free(h);
    h = history_new(100, 2 * point + point / 2);
    for (int i = 0; i < 10; i++)
        assert_int_equal(history_offer(h, 100.0 + i, &r, NULL, false), 1);
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
        assert_int_equal(history_offer(h, t += 2, &r, NULL, false), 1);
        assert_int_equal(history_offer(h, t += 2, &r, NULL, false), 1);
        assert_int_equal(history_offer(h, t += 2, &d, NULL, false), 1);
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

/* The window's arithmetic on one stats: samples [from, count) in arrival
 * order, the mean from the sums, quantiles numpy's 'linear' way. */
static void test_window_of(void **state)
{
    (void)state;
    stats st;
    stats_init(&st);
    for (int i = 1; i <= 10; i++)
        stats_add(&st, (double)(11 - i) * 10.0); /* 100, 90, ..., 10: arrival order is not sorted order */
    history_window w;
    history_window_of(&st, 4, 100.0 + 90 + 80 + 70, 10.0, &w); /* the last six: 60 .. 10 */
    assert_int_equal(w.count, 6);
    assert_true(w.seconds == 10.0);
    assert_true(fabs(w.mean - 35.0) < 1e-12);
    assert_true(fabs(w.p50 - 35.0) < 1e-12);        /* h = 2.5 over 10..60 */
    assert_true(fabs(w.p90 - (50.0 + 0.5 * 10.0)) < 1e-12); /* h = 4.5 */
    history_window_of(&st, 9, 550.0 - 10.0, 3.0, &w); /* one sample */
    assert_int_equal(w.count, 1);
    assert_true(w.mean == 10.0 && w.p50 == 10.0 && w.p90 == 10.0);
    history_window_of(&st, 10, 550.0, 2.0, &w); /* none: no figures */
    assert_int_equal(w.count, 0);
    assert_true(isnan(w.mean) && isnan(w.p50) && isnan(w.p90));
    stats_free(&st);

    /* Past STATS_EXACT_MAX the samples are no longer all kept: the count
     * and mean still, from the sums; no quantiles. */
    stats_init(&st);
    for (int i = 0; i < STATS_EXACT_MAX + 20; i++)
        stats_add(&st, i < STATS_EXACT_MAX ? 1.0 : 3.0);
    double sum_from = st.sum - 20 * 3.0;
    history_window_of(&st, STATS_EXACT_MAX, sum_from, 1.0, &w);
    assert_int_equal(w.count, 20);
    assert_true(fabs(w.mean - 3.0) < 1e-6);
    assert_true(isnan(w.p50) && isnan(w.p90));
    stats_free(&st);
}

static json_t *window_of_point(json_t *pts, size_t i, const char *role, const char *rank, const char *metric)
{
    json_t *p = json_array_get(pts, i);
    json_t *m = json_object_get(json_object_get(json_object_get(json_object_get(p, "groups"), role), rank), metric);
    assert_non_null(m);
    return json_object_get(m, "window");
}

/* Points' windows: the samples since the newest point at least 10 s old, of
 * the same pass; from the pass's first point while it is younger. */
static void test_window_in_points(void **state)
{
    (void)state;
    history *h = history_new(100, 1 << 20);
    stats batch;
    stats_init(&batch);
    snapshot_input in = input("running", 1, 0);
    const stats *live[4] = {&batch, NULL, NULL, NULL}; /* the rank-0 batch time only */
    /* Ten samples a second, each second's of value (second + 1). */
    for (int k = 0; k <= 25; k++) {
        for (int j = 0; j < 10; j++)
            stats_add(&batch, (double)(k + 1));
        in = input("running", 1, batch.count);
        assert_int_equal(history_offer(h, 100.0 + k, &in, live, false), 1);
    }
    json_t *v = doc(h);
    assert_true(json_real_value(json_object_get(v, "window_s")) == 10.0 ||
                json_integer_value(json_object_get(v, "window_s")) == 10);
    json_t *pts = json_object_get(v, "points");
    assert_int_equal(json_array_size(pts), 26);
    /* t = 105: the pass is 5 s old (its first point at 100): all of it. */
    json_t *w = window_of_point(pts, 5, "trainer", "0", M_BATCH);
    assert_non_null(w);
    assert_true(json_real_value(json_object_get(w, "seconds")) == 5.0);
    assert_int_equal(json_integer_value(json_object_get(w, "count")), 60);
    assert_true(fabs(json_real_value(json_object_get(w, "mean")) - 3.5) < 1e-9);
    /* t = 120: from the mark at 110 (count 110): the samples of 111 .. 120,
     * values 12 .. 21. */
    w = window_of_point(pts, 20, "trainer", "0", M_BATCH);
    assert_true(json_real_value(json_object_get(w, "seconds")) == 10.0);
    assert_int_equal(json_integer_value(json_object_get(w, "count")), 100);
    assert_true(fabs(json_real_value(json_object_get(w, "mean")) - 16.5) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(w, "p50")) - 16.5) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(w, "p90")) - 20.1) < 1e-9); /* h = 89.1: 20 and 21 */
    /* The cumulative figures beside it are the fixture's, untouched. */
    json_t *m = json_object_get(json_object_get(json_object_get(json_object_get(json_array_get(pts, 20), "groups"),
                                                                "trainer"), "0"), M_BATCH);
    assert_true(json_real_value(json_object_get(m, "p50")) == 10.0);
    /* A series without live stats has no window. */
    assert_null(window_of_point(pts, 20, "trainer", "all", M_FWD));
    json_decref(v);

    /* A new pass (the stats reset): the window starts over, from its first
     * point; an empty one has a count of 0 and null figures. */
    stats_reset(&batch);
    in = input("running", 1, 0);
    in.pass = "timed2"; /* another pass of the same run */
    assert_int_equal(history_offer(h, 126.0, &in, live, true), 1);
    for (int j = 0; j < 4; j++)
        stats_add(&batch, 7.0);
    assert_int_equal(history_offer(h, 128.0, &in, live, false), 1);
    v = doc(h);
    pts = json_object_get(v, "points");
    w = window_of_point(pts, 26, "trainer", "0", M_BATCH);
    assert_int_equal(json_integer_value(json_object_get(w, "count")), 0);
    assert_true(json_is_null(json_object_get(w, "p50")) && json_is_null(json_object_get(w, "mean")));
    w = window_of_point(pts, 27, "trainer", "0", M_BATCH);
    assert_int_equal(json_integer_value(json_object_get(w, "count")), 4);
    assert_true(json_real_value(json_object_get(w, "seconds")) == 2.0);
    assert_true(json_real_value(json_object_get(w, "p50")) == 7.0);
    json_decref(v);
    stats_free(&batch);
    history_free(h);
}

/* The 16 MiB bound counts the windows: points with them are longer, and a
 * budget of about two such points still keeps two. */
static void test_window_counted_in_bound(void **state)
{
    (void)state;
    stats batch;
    stats_init(&batch);
    stats_add(&batch, 1.0);
    const stats *live[4] = {&batch, NULL, NULL, &batch};
    snapshot_input r = input("running", 1, 1);
    history *h = history_new(100, 1);
    assert_int_equal(history_offer(h, 100.0, &r, NULL, false), 1);
    char *s = history_json(h);
    size_t bare = strlen(s);
    free(s);
    history_free(h);
    h = history_new(100, 1);
    assert_int_equal(history_offer(h, 100.0, &r, live, false), 1);
    s = history_json(h);
    size_t point = strlen(s) - strlen("{\"period_s\":1,\"window_s\":10,\"max_points\":100,\"points\":[]}");
    assert_true(strlen(s) > bare);
    free(s);
    history_free(h);
    h = history_new(100, 2 * point + point / 2);
    for (int i = 0; i < 10; i++)
        assert_int_equal(history_offer(h, 100.0 + i, &r, live, false), 1);
    assert_int_equal(history_points(h), 2);
    s = history_json(h);
    assert_true(strlen(s) <= 2 * point + point / 2 + 64);
    free(s);
    history_free(h);
    stats_free(&batch);
}

static void test_empty(void **state)
{
    (void)state;
    history *h = history_new(5, 1 << 20);
    char *s = history_json(h);
    assert_string_equal(s, "{\"period_s\":1,\"window_s\":10,\"max_points\":5,\"points\":[]}");
    free(s);
    s = history_last_json(h);
    assert_string_equal(s, "{\"period_s\":1,\"window_s\":10,\"point\":null}");
    free(s);
    snapshot_input r = input("running", 1, 1);
    assert_int_equal(history_offer(h, 100.0, &r, NULL, false), 1);
    assert_int_equal(history_offer(h, 101.0, &r, NULL, false), 1);
    s = history_last_json(h);
    json_error_t err;
    json_t *v = json_loads(s, JSON_REJECT_DUPLICATES, &err);
    free(s);
    assert_non_null(v);
    assert_true(json_real_value(json_object_get(json_object_get(v, "point"), "t")) == 101.0);
    json_decref(v);
    history_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_what_becomes_a_point),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_series_keeps_two_runs),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_window_of),
        cmocka_unit_test(test_window_in_points),
        cmocka_unit_test(test_window_counted_in_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
