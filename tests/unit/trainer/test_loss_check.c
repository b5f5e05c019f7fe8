/* test_loss_check.c — unit tests for trainer/loss_check: finite losses
 * pass; the first loss that is not finite is kept (epoch, batch, value)
 * and stops training unless divergence is allowed; later ones never
 * replace it; a new pass starts clean; losses as JSON ("nan", "inf",
 * "-inf" for the values JSON lacks); the reason names where and the pass. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/loss_check.h"

static void test_stops_at_first_divergence(void **state)
{
    (void)state;
    loss_check c;
    char err[256] = "";
    loss_check_start(&c, false);
    assert_int_equal(loss_check_batch(&c, 0, 0, 2.5, err, sizeof err), 0);
    assert_int_equal(loss_check_batch(&c, 0, 1, 1e308, err, sizeof err), 0);
    assert_false(c.diverged);
    assert_null(loss_check_json(&c, "timed"));
    assert_int_equal(loss_check_batch(&c, 1, 3, NAN, err, sizeof err), -1);
    assert_true(c.diverged);
    assert_string_equal(err, "loss diverged at epoch 1, batch 3 (loss = nan)");
    char why[512];
    loss_check_reason(&c, "warm-up", why, sizeof why);
    assert_string_equal(why, "loss diverged at epoch 1, batch 3 of the warm-up pass (loss = nan): lower the learning "
                             "rate (the trainer configuration's lr), or let the run go on with psbench-master "
                             "--allow-divergence");
    json_t *j = loss_check_json(&c, "warm-up");
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"batch\":3,\"epoch\":1,\"loss\":\"nan\",\"pass\":\"warm-up\"}");
    free(s);
    json_decref(j);
    /* A new pass forgets it. */
    loss_check_start(&c, false);
    assert_false(c.diverged);
    assert_int_equal(loss_check_batch(&c, 0, 0, -INFINITY, err, sizeof err), -1);
    assert_string_equal(err, "loss diverged at epoch 0, batch 0 (loss = -inf)");
}

static void test_allowed_keeps_first_and_goes_on(void **state)
{
    (void)state;
    loss_check c;
    char err[256] = "untouched";
    loss_check_start(&c, true);
    assert_int_equal(loss_check_batch(&c, 0, 4, INFINITY, err, sizeof err), 0);
    assert_int_equal(loss_check_batch(&c, 0, 5, NAN, err, sizeof err), 0);
    assert_int_equal(loss_check_batch(&c, 2, 0, 1.0, err, sizeof err), 0);
    assert_string_equal(err, "untouched");
    assert_true(c.diverged);
    assert_int_equal(c.epoch, 0);
    assert_int_equal(c.batch, 4);
    assert_true(isinf(c.loss) && c.loss > 0);
    char why[512];
    loss_check_reason(&c, NULL, why, sizeof why);
    assert_string_equal(why, "loss diverged at epoch 0, batch 4 (loss = inf)");
}

static void test_loss_json(void **state)
{
    (void)state;
    json_t *a = json_array();
    json_array_append_new(a, loss_json(0.25));
    json_array_append_new(a, loss_json(NAN));
    json_array_append_new(a, loss_json(INFINITY));
    json_array_append_new(a, loss_json(-INFINITY));
    assert_int_equal(json_array_size(a), 4); /* json_real(NaN) is NULL: nothing may be dropped */
    char *s = json_dumps(a, JSON_COMPACT);
    assert_string_equal(s, "[0.25,\"nan\",\"inf\",\"-inf\"]");
    free(s);
    json_decref(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stops_at_first_divergence),
        cmocka_unit_test(test_allowed_keeps_first_and_goes_on),
        cmocka_unit_test(test_loss_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
