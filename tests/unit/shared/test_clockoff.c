/* test_clockoff.c — unit tests for shared/clockoff (issue 42): a node's
 * clock offset from synthetic round trips, with known skews, asymmetric
 * wires and jitter; the least-delay sample chosen; samples that are not
 * round trips refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "shared/clockoff.h"

#define MS 1000000ull
#define S 1000000000ull

/* A round trip sent at master time t0 to a node whose clock reads
 * master + skew: out ns on the wire there, hold ns at the node, back ns
 * on the wire home. */
static clockoff_sample trip(uint64_t t0, int64_t skew, uint64_t out, uint64_t hold, uint64_t back)
{
    clockoff_sample s;
    s.t0 = t0;
    s.t1 = (uint64_t)((int64_t)(t0 + out) + skew);
    s.t2 = s.t1 + hold;
    s.t3 = t0 + out + hold + back;
    return s;
}

/* |got - want| <= tol */
static void assert_within(int64_t got, int64_t want, uint64_t tol)
{
    uint64_t d = got > want ? (uint64_t)(got - want) : (uint64_t)(want - got);
    if (d > tol)
        fail_msg("got %lld, want %lld within %llu", (long long)got, (long long)want, (unsigned long long)tol);
}

static void test_symmetric(void **state)
{
    (void)state;
    /* A node 5 s ahead, 100 us each way: exact. */
    clockoff_sample s = trip(1000 * S, (int64_t)(5 * S), 100000, 20000, 100000);
    int64_t off;
    uint64_t delay;
    assert_true(clockoff_sample_eval(&s, &off, &delay));
    assert_int_equal(off, (int64_t)(5 * S));
    assert_int_equal(delay, 200000);
    clockoff o;
    assert_int_equal(clockoff_estimate(&s, 1, &o), 0);
    assert_int_equal(o.offset_ns, (int64_t)(5 * S));
    assert_int_equal(o.uncertainty_ns, 100000);
    assert_int_equal(o.used, 1);
    /* The node's reading of an event on the master's clock. */
    assert_int_equal(clockoff_to_master(&o, s.t1), (int64_t)(s.t0 + 100000));
}

static void test_behind(void **state)
{
    (void)state;
    /* A node whose clock reads 3 h less (booted later): negative offset. */
    int64_t skew = -(int64_t)(3 * 3600 * S);
    clockoff_sample s = trip(4 * 3600 * S, skew, 50000, 1000, 50000);
    clockoff o;
    assert_int_equal(clockoff_estimate(&s, 1, &o), 0);
    assert_int_equal(o.offset_ns, skew);
    assert_int_equal(clockoff_to_master(&o, s.t2), (int64_t)(s.t3 - 50000));
}

/* Asymmetric wires: the estimate is off by half the asymmetry, always
 * within the stated uncertainty. */
static void test_asymmetric(void **state)
{
    (void)state;
    int64_t skew = (int64_t)(5 * S);
    clockoff_sample s = trip(10 * S, skew, 900000, 0, 100000); /* 0.9 ms out, 0.1 ms back */
    clockoff o;
    assert_int_equal(clockoff_estimate(&s, 1, &o), 0);
    assert_int_equal(o.offset_ns, skew + 400000);
    assert_int_equal(o.uncertainty_ns, 500000);
    assert_within(o.offset_ns, skew, o.uncertainty_ns);
}

/* Jittered round trips: the least-delay one is chosen, and the truth is
 * within its uncertainty. */
static void test_jitter_least_delay(void **state)
{
    (void)state;
    int64_t skew = (int64_t)(5 * S) + 123457; /* ahead by 5 s and an odd bit */
    clockoff_sample s[64];
    srand(42);
    size_t best = 0;
    uint64_t best_delay = UINT64_MAX;
    for (size_t i = 0; i < 64; i++) {
        uint64_t out = 30000 + (uint64_t)(rand() % 2000000), back = 30000 + (uint64_t)(rand() % 2000000);
        uint64_t hold = (uint64_t)(rand() % 500000);
        s[i] = trip(100 * S + i * 10 * MS, skew, out, hold, back);
        if (out + back < best_delay) {
            best_delay = out + back;
            best = i;
        }
    }
    clockoff o;
    assert_int_equal(clockoff_estimate(s, 64, &o), 0);
    assert_int_equal(o.sample, best);
    assert_int_equal(o.delay_ns, best_delay);
    assert_int_equal(o.used, 64);
    assert_within(o.offset_ns, skew, o.uncertainty_ns);
    /* A single jittered sample would be worse than the chosen one. */
    assert_true(o.uncertainty_ns <= (30000 + 2000000));
}

static void test_invalid(void **state)
{
    (void)state;
    int64_t off;
    uint64_t delay;
    clockoff_sample back_in_time = {.t0 = 100, .t3 = 50, .t1 = 10, .t2 = 20};
    assert_false(clockoff_sample_eval(&back_in_time, &off, &delay));
    clockoff_sample node_backwards = {.t0 = 100, .t3 = 200, .t1 = 30, .t2 = 20};
    assert_false(clockoff_sample_eval(&node_backwards, &off, &delay));
    clockoff_sample held_too_long = {.t0 = 100, .t3 = 200, .t1 = 1000, .t2 = 1200};
    assert_false(clockoff_sample_eval(&held_too_long, &off, &delay));
    clockoff_sample huge = {.t0 = 0, .t3 = 10, .t1 = UINT64_MAX - 5, .t2 = UINT64_MAX - 4};
    assert_false(clockoff_sample_eval(&huge, &off, &delay));
    clockoff o = {.offset_ns = 77};
    assert_int_equal(clockoff_estimate(NULL, 0, &o), -1);
    clockoff_sample bad[2] = {back_in_time, held_too_long};
    assert_int_equal(clockoff_estimate(bad, 2, &o), -1);
    assert_int_equal(o.offset_ns, 77); /* untouched */
    /* Invalid samples are skipped, not chosen for their "delay". */
    clockoff_sample mixed[3] = {held_too_long, trip(1000, 500, 40, 0, 60), back_in_time};
    assert_int_equal(clockoff_estimate(mixed, 3, &o), 0);
    assert_int_equal(o.sample, 1);
    assert_int_equal(o.used, 1);
    assert_int_equal(o.offset_ns, 490);
    assert_int_equal(o.uncertainty_ns, 50);
}

/* An odd delay: the uncertainty is rounded up so that the bound holds. */
static void test_odd_delay(void **state)
{
    (void)state;
    clockoff_sample s = trip(1000, 0, 0, 0, 7); /* all the delay one way */
    clockoff o;
    assert_int_equal(clockoff_estimate(&s, 1, &o), 0);
    assert_int_equal(o.uncertainty_ns, 4);
    assert_within(o.offset_ns, 0, o.uncertainty_ns);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_symmetric),          cmocka_unit_test(test_behind),  cmocka_unit_test(test_asymmetric),
        cmocka_unit_test(test_jitter_least_delay), cmocka_unit_test(test_invalid), cmocka_unit_test(test_odd_delay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
