/* test_mparams.c — unit tests for master/mparams (issue 43: trainer 0's
 * final parameters in `params` parts, written beside results.json): parts
 * put together into params.bin with results.json's final_params (count,
 * digest, norm); every bad part refused with the file (never the run) and
 * said in final_params.why — a digest that is not the floats', a gap, data
 * that is not base64 of whole floats or runs past the count, a part after
 * the final one, no data where data was due; parts from another trainer
 * dropped; a model too big to record, one without parameters, parts that
 * never came, each said; a stale params.bin of an earlier job removed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "master/mparams.h"
#include "shared/b64.h"
#include "shared/paramsfile.h"

static master m;
static node trainer0, trainer1;
static const float v[6] = {1.0f, -2.0f, 0.5f, 3.25f, -0.125f, 8.0f};
static char hex[65];

static int mp_setup(void **state)
{
    if (tmpdir_setup(state) < 0)
        return -1;
    m.set.out_dir = tmpdir;
    m.set.params_max = PARAMSFILE_MAX_FLOATS;
    m.state = RUN_FINISHING;
    trainer0.role = trainer1.role = AGG_TRAINER;
    trainer1.rank = 1;
    snprintf(trainer0.host, sizeof trainer0.host, "h0");
    snprintf(trainer1.host, sizeof trainer1.host, "h1");
    return paramsfile_sha256(v, 6, hex);
}

static int mp_reset(void **state)
{
    (void)state;
    mparams_next_run(&m);
    unlink(tmp_path("params.bin"));
    return 0;
}

/* A `params` part of floats [at, at + k) of v (k 0: no data). */
static void part(node *n, uint64_t count, uint64_t at, uint64_t k, const char *sha, bool final)
{
    json_t *body = json_pack("{s:I, s:I, s:s, s:f, s:b}", "count", (json_int_t)count, "offset", (json_int_t)at,
                             "sha256", sha, "l2_norm", 9.5, "final", final);
    if (k) {
        char text[64];
        b64_encode((const uint8_t *)(v + at), (size_t)k * 4, text);
        json_object_set_new(body, "data", json_string(text));
    }
    ctl_msg msg = {.body = body};
    snprintf(msg.type, sizeof msg.type, "params");
    mparams_on_params(&m, n, &msg);
    json_decref(body);
}

/* results.json's final_params as mparams_write makes it (a new reference). */
static json_t *written(void)
{
    json_t *doc = json_object();
    char err[512];
    assert_int_equal(mparams_write(&m, tmpdir, doc, err, sizeof err), 0);
    json_t *fp = json_incref(json_object_get(doc, "final_params"));
    json_decref(doc);
    return fp;
}

static void test_whole(void **state)
{
    (void)state;
    part(&trainer0, 6, 0, 4, hex, false);
    part(&trainer0, 6, 4, 2, hex, true);
    json_t *fp = written();
    assert_string_equal(json_string_value(json_object_get(fp, "file")), "params.bin");
    assert_int_equal(json_integer_value(json_object_get(fp, "count")), 6);
    assert_string_equal(json_string_value(json_object_get(fp, "sha256")), hex);
    /* The norm from what came, not the 9.5 the parts said. */
    assert_true(json_real_value(json_object_get(fp, "l2_norm")) == paramsfile_l2_norm(v, 6));
    assert_true(json_is_null(json_object_get(fp, "why")));
    float *got;
    uint64_t n;
    char why[512];
    assert_int_equal(paramsfile_of_results(tmpdir, "results.json", fp, &got, &n, why, sizeof why), 0);
    assert_int_equal(n, 6);
    assert_memory_equal(got, v, sizeof v);
    free(got);
    json_decref(fp);
}

/* After parts that end refused: no file (an earlier one removed), why. */
static void refused_with(const char *want)
{
    write_file("params.bin", "an earlier job's");
    json_t *fp = written();
    assert_true(json_is_null(json_object_get(fp, "file")));
    const char *why = json_string_value(json_object_get(fp, "why"));
    assert_non_null(why);
    assert_contains(why, "trainer 0 sent a bad params part: ");
    assert_contains(why, want);
    assert_int_equal(access(tmp_path("params.bin"), F_OK), -1);
    json_decref(fp);
}

static void test_bad_digest(void **state)
{
    (void)state;
    part(&trainer0, 6, 0, 6, "00000000000000000000000000000000000000000000000000000000000000aa", true);
    refused_with("the parameters' digest is");
}

static void test_gap(void **state)
{
    (void)state;
    part(&trainer0, 6, 0, 2, hex, false);
    part(&trainer0, 6, 4, 2, hex, true);
    refused_with("offset 4: 6 parameters and offset 2 expected");
}

static void test_past_the_count(void **state)
{
    (void)state;
    part(&trainer0, 6, 0, 4, hex, false);
    part(&trainer0, 6, 2, 4, hex, false); /* overlaps the first part: offset 4 is next */
    refused_with("offset 2");
    mp_reset(NULL);
    part(&trainer0, 3, 0, 2, hex, false);
    part(&trainer0, 3, 2, 4, hex, true); /* 4 floats where 1 is left */
    refused_with("data must be base64 of 1 to 1 whole float32s");
}

static void test_not_base64(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:i, s:i, s:s, s:f, s:b, s:s}", "count", 6, "offset", 0, "sha256", hex, "l2_norm", 1.0,
                             "final", 1, "data", "not base64!");
    ctl_msg msg = {.body = body};
    mparams_on_params(&m, &trainer0, &msg);
    json_decref(body);
    refused_with("data must be base64");
}

static void test_after_final_and_missing_data(void **state)
{
    (void)state;
    part(&trainer0, 6, 0, 6, hex, true);
    part(&trainer0, 6, 6, 0, hex, true);
    refused_with("a part after the final one");
    mp_reset(NULL);
    part(&trainer0, 6, 0, 0, hex, true);
    refused_with("no data for 6 parameters");
    mp_reset(NULL);
    json_t *body = json_pack("{s:i, s:i}", "count", -1, "offset", 0);
    ctl_msg msg = {.body = body};
    mparams_on_params(&m, &trainer0, &msg);
    json_decref(body);
    refused_with("count and offset must be whole numbers >= 0");
}

static void test_said_why(void **state)
{
    (void)state;
    /* Another trainer's parts: dropped, nothing came. */
    part(&trainer1, 6, 0, 6, hex, true);
    json_t *fp = written();
    assert_true(json_is_null(json_object_get(fp, "file")));
    assert_true(json_is_null(json_object_get(fp, "count")));
    assert_string_equal(json_string_value(json_object_get(fp, "why")),
                        "trainer 0's final parameters did not come before the run's files were written");
    json_decref(fp);
    mp_reset(NULL);
    /* Too many to record: their count, digest and norm only. */
    part(&trainer0, PARAMSFILE_MAX_FLOATS + 1, 0, 0, hex, true);
    fp = written();
    assert_true(json_is_null(json_object_get(fp, "file")));
    assert_int_equal(json_integer_value(json_object_get(fp, "count")), PARAMSFILE_MAX_FLOATS + 1);
    assert_true(json_real_value(json_object_get(fp, "l2_norm")) == 9.5);
    assert_contains(json_string_value(json_object_get(fp, "why")),
                    "the model has 16777217 parameters, more than the 16777216 (64 MiB) this run records "
                    "(--params-max, at most 16777216)");
    json_decref(fp);
    mp_reset(NULL);
    /* No parameters (Synthetic). */
    json_t *body =
        json_pack("{s:i, s:i, s:n, s:f, s:b}", "count", 0, "offset", 0, "sha256", "l2_norm", 0.0, "final", 1);
    ctl_msg msg = {.body = body};
    mparams_on_params(&m, &trainer0, &msg);
    json_decref(body);
    fp = written();
    assert_int_equal(json_integer_value(json_object_get(fp, "count")), 0);
    assert_string_equal(json_string_value(json_object_get(fp, "why")), "the model has no parameters");
    json_decref(fp);
    mp_reset(NULL);
    /* A failed run. */
    m.state = RUN_FAILED;
    fp = written();
    assert_string_equal(json_string_value(json_object_get(fp, "why")),
                        "the run failed: trainer 0 sent no final parameters");
    m.state = RUN_FINISHING;
    json_decref(fp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_whole, mp_reset),
        cmocka_unit_test_teardown(test_bad_digest, mp_reset),
        cmocka_unit_test_teardown(test_gap, mp_reset),
        cmocka_unit_test_teardown(test_past_the_count, mp_reset),
        cmocka_unit_test_teardown(test_not_base64, mp_reset),
        cmocka_unit_test_teardown(test_after_final_and_missing_data, mp_reset),
        cmocka_unit_test_teardown(test_said_why, mp_reset),
    };
    return cmocka_run_group_tests(tests, mp_setup, tmpdir_teardown);
}
