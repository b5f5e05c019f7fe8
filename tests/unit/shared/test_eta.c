/* test_eta.c — the time left at the pace so far (shared/eta.h): the
 * master's progress line and the sweep's say it in these words. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "shared/eta.h"

static void test_left(void **state)
{
    (void)state;
    assert_true(fabs(eta_left_s(10.0, 20, 30) - 15.0) < 1e-9); /* 0.5 s a unit, 30 to go */
    assert_true(eta_left_s(10.0, 20, 0) == 0.0);                 /* nothing to go */
    assert_true(eta_left_s(0.0, 0, 5) < 0);                      /* no pace yet */
    assert_true(eta_left_s(3.0, 0, 5) < 0);                      /* time gone, nothing done */
    assert_true(eta_left_s(0.0, 4, 5) < 0);
}

static void test_format(void **state)
{
    (void)state;
    char buf[64];
    eta_format(-1, buf, sizeof buf);
    assert_string_equal(buf, "");
    eta_format(NAN, buf, sizeof buf);
    assert_string_equal(buf, "");
    eta_format(0.0, buf, sizeof buf);
    assert_string_equal(buf, ", time left ~0.0 s");
    eta_format(4.26, buf, sizeof buf);
    assert_string_equal(buf, ", time left ~4.3 s");
    eta_format(9.96, buf, sizeof buf);
    assert_string_equal(buf, ", time left ~10 s");
    eta_format(42.4, buf, sizeof buf);
    assert_string_equal(buf, ", time left ~42 s");
    eta_format(119.6, buf, sizeof buf);
    assert_string_equal(buf, ", time left ~2 min 0 s");
    eta_format(250.2, buf, sizeof buf);
    assert_string_equal(buf, ", time left ~4 min 10 s");
    eta_format(7200.0, buf, sizeof buf);
    assert_string_equal(buf, ", time left ~120 min 0 s");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_left),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
