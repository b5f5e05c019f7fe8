/* test_nvtx.c — unit tests for shared/gpu/nvtx (issue 42): the trace's
 * spans as NVTX ranges, seen through an injection library
 * (tests/tools/nvtx_inject.c, named by $NVTX_INJECTION64_PATH: NVTX loads
 * it as it would Nsight Systems' and it writes each call as a line to
 * $PSB_NVTX_OUT) — the domain "psbench", each range under its span's name
 * with the span as its category and the batch as its payload, ended by
 * id from any thread; nothing at all while off. Skipped (77) in a build
 * without CUDA (no NVTX) or without the library.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "shared/gpu/nvtx.h"

/* What the library wrote so far ("" before its first line). */
static char *nvtx_lines(void)
{
    char *s = slurp(tmp_path("nvtx.txt"), NULL);
    return s ? s : strdup("");
}

static trace_ids ids_of_batch(int64_t batch) { return trace_ids_make(batch, 3, 1, 0); }

/* First, before anything turned NVTX on: off, a range is 0 and nothing
 * reaches NVTX (not even its initialisation: no domain yet). */
static void test_off_records_nothing(void **state)
{
    (void)state;
    trace_nvtx_enable(false);
    assert_int_equal(trace_nvtx_start(TRACE_FOLD, ids_of_batch(1)), 0);
    trace_nvtx_end(0);
    char *got = nvtx_lines();
    assert_string_equal(got, "");
    free(got);
}

typedef struct ender {
    trace_nvtx_id id;
} ender;

static void *end_on_another_thread(void *arg)
{
    trace_nvtx_end(((ender *)arg)->id);
    return NULL;
}

/* On: the domain once, then each range under its name, its category the
 * span + 1, its payload the batch; ended by id, also from another thread
 * than the one that started it (a device job ends where its completion
 * is seen). */
static void test_ranges(void **state)
{
    (void)state;
    trace_nvtx_enable(true);
    trace_nvtx_id fold = trace_nvtx_start(TRACE_FOLD, ids_of_batch(5));
    trace_nvtx_id job = trace_nvtx_start(TRACE_DEVICE_JOB, ids_of_batch(7));
    trace_nvtx_id resolve = trace_nvtx_start(TRACE_RESOLVE, trace_ids_none());
    assert_true(fold != 0 && job != 0 && resolve != 0);
    assert_true(fold != job && job != resolve);
    pthread_t th;
    ender e = {job};
    assert_int_equal(pthread_create(&th, NULL, end_on_another_thread, &e), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    trace_nvtx_end(fold);
    trace_nvtx_end(resolve);
    char want[512];
    snprintf(want, sizeof want,
             "domain psbench\n"
             "start %" PRIu64 " fold %d 5\n"
             "start %" PRIu64 " device_job %d 7\n"
             "start %" PRIu64 " resolve %d -1\n"
             "end %" PRIu64 "\n"
             "end %" PRIu64 "\n"
             "end %" PRIu64 "\n",
             fold, TRACE_FOLD + 1, job, TRACE_DEVICE_JOB + 1, resolve, TRACE_RESOLVE + 1, job, fold, resolve);
    char *got = nvtx_lines();
    assert_string_equal(got, want);
    free(got);
}

/* Every span has its name as a registered string. */
static void test_every_span_name(void **state)
{
    (void)state;
    trace_nvtx_enable(true);
    char *before = nvtx_lines();
    size_t at = strlen(before);
    free(before);
    for (int s = 0; s < TRACE_NSPANS; s++)
        trace_nvtx_end(trace_nvtx_start((trace_span)s, ids_of_batch(s)));
    char *got = nvtx_lines();
    const char *p = got + at;
    for (int s = 0; s < TRACE_NSPANS; s++) {
        uint64_t id, id2;
        char name[64];
        int cat;
        int64_t payload;
        int used = 0;
        assert_int_equal(sscanf(p, "start %" SCNu64 " %63s %d %" SCNd64 "\nend %" SCNu64 "\n%n", &id, name, &cat,
                                &payload, &id2, &used),
                         5);
        assert_string_equal(name, trace_span_name((trace_span)s));
        assert_int_equal(cat, s + 1);
        assert_int_equal(payload, s);
        assert_int_equal(id, id2);
        p += used;
    }
    assert_string_equal(p, "");
    free(got);
}

/* Off again: ranges are 0 and the file does not grow. */
static void test_off_again(void **state)
{
    (void)state;
    char *before = nvtx_lines();
    trace_nvtx_enable(false);
    trace_nvtx_id id = trace_nvtx_start(TRACE_DEVICE_JOB, ids_of_batch(9));
    assert_int_equal(id, 0);
    trace_nvtx_end(id);
    char *after = nvtx_lines();
    assert_string_equal(after, before);
    free(before);
    free(after);
}

/* The scratch folder, and the library's output in it, before NVTX's first
 * call reads the environment. */
static int nvtx_setup(void **state)
{
    if (tmpdir_setup(state) != 0)
        return -1;
    return setenv("PSB_NVTX_OUT", tmp_path("nvtx.txt"), 1);
}

int main(void)
{
    if (!trace_nvtx_available()) {
        printf("skipped: built without CUDA (no NVTX)\n");
        return 77;
    }
    const char *lib = getenv("NVTX_INJECTION64_PATH");
    if (!lib || !*lib) {
        printf("skipped: NVTX_INJECTION64_PATH names no injection library (tests/tools/nvtx_inject.c)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_records_nothing),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_every_span_name),
        cmocka_unit_test(test_off_again),
    };
    return cmocka_run_group_tests(tests, nvtx_setup, tmpdir_teardown);
}
