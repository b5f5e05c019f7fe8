/* test_clocksync.c — unit tests for shared/clocksync (issue 42): the
 * master's rounds of `clock` (one out at a time, CLOCKSYNC_ROUNDS in all),
 * acks matched to the clock out or refused with a reason, the estimate
 * from the least-delay round; the node's answer echoing seq and t0. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "shared/clocksync.h"

/* Every round answered: the rounds stop at CLOCKSYNC_ROUNDS and the
 * estimate is the least-delay round's. */
static void test_rounds(void **state)
{
    (void)state;
    clocksync c;
    clocksync_init(&c);
    char err[256];
    clockoff o;
    assert_int_equal(clocksync_estimate(&c, &o), -1);
    uint64_t t = 1000000;
    for (int i = 0; i < CLOCKSYNC_ROUNDS; i++) {
        assert_true(clocksync_due(&c));
        uint64_t seq = clocksync_send(&c, t);
        assert_int_equal(seq, (uint64_t)i + 1);
        assert_false(clocksync_due(&c)); /* one out at a time */
        /* The node is 5000 ns ahead; round 3 is the fastest (delay 100). */
        uint64_t wire = i == 3 ? 50 : 500 + 10 * (uint64_t)i;
        uint64_t t1 = t + wire + 5000, t2 = t1 + 20, t3 = t + 2 * wire + 20;
        assert_int_equal(clocksync_ack(&c, seq, t, t1, t2, t3, err, sizeof err), 0);
        t += 100000;
    }
    assert_false(clocksync_due(&c));
    assert_int_equal(c.n, CLOCKSYNC_ROUNDS);
    assert_int_equal(clocksync_estimate(&c, &o), 0);
    assert_int_equal(o.sample, 3);
    assert_int_equal(o.offset_ns, 5000);
    assert_int_equal(o.uncertainty_ns, 50);
}

/* Acks that answer no clock out are refused, saying so; the clock out
 * stays out for its own ack. */
static void test_refused(void **state)
{
    (void)state;
    clocksync c;
    clocksync_init(&c);
    char err[256];
    assert_int_equal(clocksync_ack(&c, 1, 10, 20, 30, 40, err, sizeof err), -1);
    assert_non_null(strstr(err, "none is out"));
    uint64_t seq = clocksync_send(&c, 100);
    assert_int_equal(clocksync_ack(&c, seq + 1, 100, 120, 130, 150, err, sizeof err), -1);
    assert_non_null(strstr(err, "answers no clock sent"));
    assert_int_equal(clocksync_ack(&c, seq, 99, 120, 130, 150, err, sizeof err), -1); /* t0 not the one sent */
    assert_true(c.pending);
    /* No round trip (t2 before t1): refused, the round spent. */
    assert_int_equal(clocksync_ack(&c, seq, 100, 130, 120, 150, err, sizeof err), -1);
    assert_non_null(strstr(err, "no round trip"));
    assert_false(c.pending);
    assert_int_equal(c.n, 0);
    assert_true(clocksync_due(&c));
    seq = clocksync_send(&c, 200);
    assert_int_equal(clocksync_ack(&c, seq, 200, 210, 211, 230, err, sizeof err), 0);
    assert_int_equal(c.n, 1);
}

/* A node that never answers: one clock stays out, nothing more is due,
 * and there is no estimate (its clock stays unaligned). */
static void test_silent(void **state)
{
    (void)state;
    clocksync c;
    clocksync_init(&c);
    clocksync_send(&c, 5);
    assert_false(clocksync_due(&c));
    clockoff o;
    assert_int_equal(clocksync_estimate(&c, &o), -1);
}

/* The node's answer echoes seq and t0 and adds its readings; a clock
 * without them gets none. */
static void test_answer(void **state)
{
    (void)state;
    json_t *clock = json_pack("{s:I, s:I}", "seq", (json_int_t)7, "t0", (json_int_t)123456789);
    json_t *a = clocksync_answer(clock, 1000, 1010);
    assert_non_null(a);
    assert_int_equal(json_integer_value(json_object_get(a, "seq")), 7);
    assert_int_equal(json_integer_value(json_object_get(a, "t0")), 123456789);
    assert_int_equal(json_integer_value(json_object_get(a, "t1")), 1000);
    assert_int_equal(json_integer_value(json_object_get(a, "t2")), 1010);
    json_decref(a);
    json_decref(clock);
    clock = json_pack("{s:s, s:I}", "seq", "7", "t0", (json_int_t)1);
    assert_null(clocksync_answer(clock, 1, 2));
    json_decref(clock);
    clock = json_pack("{s:I}", "seq", (json_int_t)-1);
    assert_null(clocksync_answer(clock, 1, 2));
    json_decref(clock);
    assert_null(clocksync_answer(NULL, 1, 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_silent),
        cmocka_unit_test(test_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
