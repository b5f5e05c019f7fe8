/* test_clockskew.c — the test-only clock skew (shared/clocksync.h,
 * $PSBENCH_TEST_CLOCK_SKEW_NS): a node's clock answers and its shipped
 * trace move by it together, so that a master sees one host's clock as
 * another's. Its own process: the skew is read once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "shared/clocksync.h"
#include "shared/tracejob.h"

static int keep(void *ctx, json_t *body, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    *(json_t **)ctx = body;
    return 0;
}

static void test_skew_moves_answers_and_spans(void **state)
{
    (void)state;
    assert_int_equal(setenv("PSBENCH_TEST_CLOCK_SKEW_NS", "-1000", 1), 0);
    assert_int_equal(clocksync_node_time(5000), 4000);
    assert_int_equal(clocksync_node_time(999), 0); /* never below 0 */
    json_t *clock = json_pack("{s:I, s:I}", "seq", (json_int_t)1, "t0", (json_int_t)77);
    json_t *ack = clocksync_answer(clock, 3000, 3500);
    assert_int_equal(json_integer_value(json_object_get(ack, "t0")), 77); /* the master's, untouched */
    assert_int_equal(json_integer_value(json_object_get(ack, "t1")), 2000);
    assert_int_equal(json_integer_value(json_object_get(ack, "t2")), 2500);
    json_decref(ack);
    json_decref(clock);
    /* The trace shipped moves by the same. */
    char err[256];
    trace_conf c = {.role = TRACE_SERVER, .rank = 0, .on = true, .capacity = 8, .window = TRACE_ALL_STEPS};
    trace_node *n = trace_node_new(&c, err, sizeof err);
    unsigned lane = (unsigned)trace_lane(n, "reactor");
    trace_ring *r = trace_ring_add(n, "reactor");
    trace_ring_step(r, 0);
    trace_add(r, TRACE_FOLD, lane, 10000, 10400, trace_ids_make(0, 0, 0, 0));
    trace_cursor cur = {0};
    json_t *body = NULL;
    assert_int_equal(tracejob_ship(n, &cur, true, keep, &body, err, sizeof err), 0);
    trace_dump *d = NULL;
    bool final = false;
    assert_int_equal(tracejob_take(body, &d, &final, err, sizeof err), 0);
    assert_int_equal(d->ev[0].start_ns, 9000);
    assert_int_equal(d->ev[0].end_ns, 9400);
    trace_dump_free(d);
    json_decref(body);
    trace_node_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_skew_moves_answers_and_spans)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
