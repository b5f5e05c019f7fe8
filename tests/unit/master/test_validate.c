/* test_validate.c — the master's checks of what nodes send (master/validate.c)
 * and of the samples it aggregates (master/aggregate.c): every field's type
 * and range, named in the reason; a report is taken whole or not at all. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "master/aggregate.h"
#include "master/validate.h"

static json_t *json_of(const char *js)
{
    json_error_t je;
    json_t *o = json_loads(js, 0, &je);
    assert_non_null(o);
    return o;
}

/* fn(body) fails with a reason containing want (NULL: passes). */
typedef int (*check_fn)(json_t *body, char *err, size_t errlen);

static void expect(check_fn fn, const char *js, const char *want)
{
    json_t *o = json_of(js);
    char err[400] = "";
    int rc = fn(o, err, sizeof err);
    json_decref(o);
    if (!want) {
        if (rc != 0)
            fail_msg("%s: refused: %s", js, err);
        return;
    }
    if (rc == 0)
        fail_msg("%s: taken, expected a refusal with \"%s\"", js, want);
    if (!strstr(err, want))
        fail_msg("%s: reason \"%s\" lacks \"%s\"", js, err, want);
}

static int report_trainer(json_t *b, char *e, size_t n) { return validate_report(b, true, e, n); }
static int report_server(json_t *b, char *e, size_t n) { return validate_report(b, false, e, n); }

static void test_register(void **state)
{
    (void)state;
    expect(validate_register, "{\"role\": \"trainer\", \"host\": \"h\", \"device\": \"cuda:1\", \"pid\": 42}", NULL);
    expect(validate_register, "{\"role\": \"server\", \"port\": 9, \"listen_host\": \"::\", \"advertise\": \"h1\"}",
           NULL);
    expect(validate_register, "{\"role\": \"trainer\", \"want_rank\": null, \"environment\": null}", NULL);
    expect(validate_register, "{\"role\": \"boss\"}", "role must be trainer or server");
    expect(validate_register, "{\"role\": \"server\"}", "\"port\" is missing");
    expect(validate_register, "{\"role\": \"server\", \"port\": 70000}", "port 70000 is outside 1..65535");
    expect(validate_register, "{\"role\": \"server\", \"port\": 0}", "port 0 is outside 1..65535");
    expect(validate_register, "{\"role\": \"server\", \"port\": 9.5}", "got a number");
    expect(validate_register, "{\"role\": \"trainer\", \"pid\": -1}", "pid must be");
    expect(validate_register, "{\"role\": \"trainer\", \"want_rank\": -2}", "want_rank must be");
    expect(validate_register, "{\"role\": \"trainer\", \"want_rank\": \"0\"}", "want_rank must be");
    expect(validate_register, "{\"role\": \"trainer\", \"host\": 7}", "host must be a string");
    expect(validate_register, "{\"role\": \"trainer\", \"host\": \"\"}", "host must have 1..255 bytes");
    expect(validate_register, "{\"role\": \"trainer\", \"device\": \"cuda\\u001b\"}", "device must be printable");
    expect(validate_register, "{\"role\": \"trainer\", \"environment\": \"x\"}", "environment must be an object");
    expect(validate_register, "{\"role\": \"server\", \"port\": 9, \"listen_host\": \"a\\nb\"}", "listen_host must be printable");
    expect(validate_register, "{\"role\": \"server\", \"port\": 9, \"mem_total_bytes\": -1}", "mem_total_bytes must be");
}

/* A link's transport is its name: shm, tcp, a test build's loop, any
 * short word (a transport is a file and a registry line: the master knows
 * no list of them); nothing else. */
static void test_ready_links(void **state)
{
    (void)state;
    static const char *const ok[] = {"shm", "tcp", "loop", "rdma_v2"};
    static const char *const bad[] = {"", "TCP", "shm+tcp", "a b", "seventeen_letters"};
    char js[256];
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        snprintf(js, sizeof js, "{\"links\": [{\"server\": 0, \"address\": \"h:1\", \"transport\": \"%s\"}]}",
                 ok[i]);
        expect(validate_ready, js, NULL);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(js, sizeof js, "{\"links\": [{\"server\": 0, \"address\": \"h:1\", \"transport\": \"%s\"}]}",
                 bad[i]);
        expect(validate_ready, js, "links[0] must be");
    }
    expect(validate_ready, "{\"links\": [{\"server\": 0, \"address\": \"h:1\"}]}", "a transport's name");
    /* the CUDA IPC open's time: a number of ms, or null */
    static const char *const ms_ok[] = {"null", "0", "1.25", "3600000"};
    static const char *const ms_bad[] = {"-1", "\"1\"", "3600001", "true"};
    for (size_t i = 0; i < sizeof ms_ok / sizeof *ms_ok; i++) {
        snprintf(js, sizeof js,
                 "{\"links\": [{\"server\": 0, \"address\": \"h:1\", \"transport\": \"shm\", \"cuda_ipc\": true, "
                 "\"cuda_ipc_open_ms\": %s}]}",
                 ms_ok[i]);
        expect(validate_ready, js, NULL);
    }
    for (size_t i = 0; i < sizeof ms_bad / sizeof *ms_bad; i++) {
        snprintf(js, sizeof js,
                 "{\"links\": [{\"server\": 0, \"address\": \"h:1\", \"transport\": \"shm\", \"cuda_ipc\": true, "
                 "\"cuda_ipc_open_ms\": %s}]}",
                 ms_bad[i]);
        expect(validate_ready, js, "cuda_ipc_open_ms");
    }
}

static void test_reports(void **state)
{
    (void)state;
    expect(report_trainer,
           "{\"samples\": {\"batch_level_metric,batch_all\": [0, 1.5, 1e9]}, \"bytes_in\": 1, \"bytes_out\": 2, "
           "\"batches_done\": 3, \"gpu_timed\": [\"forward_metric,forward_pass\"]}",
           NULL);
    expect(report_server, "{\"rows_touched\": 5, \"initialising\": {\"done_bytes\": 1, \"total_bytes\": 2}}", NULL);
    expect(report_trainer, "{\"samples\": {\"a,b\": [-5]}}", "a sample of \"a,b\" must be a duration in [0, 1e+09] ms, got -5");
    expect(report_trainer, "{\"samples\": {\"a,b\": [1e308]}}", "got 1e+308");
    expect(report_trainer, "{\"samples\": {\"a,b\": [\"1\"]}}", "got a string");
    expect(report_trainer, "{\"samples\": {\"a,b\": 1}}", "samples of \"a,b\" must be a list");
    expect(report_trainer, "{\"samples\": []}", "samples must be an object");
    expect(report_trainer, "{\"samples\": {\"a\\nb,c\": [1]}}", "metric name \"a\\nb,c\"");
    expect(report_trainer, "{\"samples\": {\"nocomma\": [1]}}", "is not \"TYPE,NAME\"");
    expect(report_trainer, "{\"samples\": {\",x\": [1]}}", "is not \"TYPE,NAME\"");
    expect(report_trainer, "{\"samples\": {\"x,\": [1]}}", "is not \"TYPE,NAME\"");
    expect(report_trainer, "{\"samples\": {\"a,\\\"b\": [1]}}", "is not \"TYPE,NAME\"");
    expect(report_trainer, "{\"bytes_out\": -1}", "bytes_out: counters must be whole numbers >= 0, got -1");
    expect(report_trainer, "{\"batches_done\": true}", "batches_done: counters must be whole numbers >= 0, got true or false");
    expect(report_trainer, "{\"gpu_timed\": \"x\"}", "gpu_timed must be a trainer's list");
    expect(report_trainer, "{\"gpu_timed\": [1]}", "item 0 is a whole number");
    expect(report_server, "{\"gpu_timed\": []}", "gpu_timed must be a trainer's list");
    expect(report_server, "{\"rows_touched\": \"1\"}", "rows_touched must be a whole number >= 0");
    expect(report_server, "{\"initialising\": {\"done_bytes\": 3, \"total_bytes\": 2}}", "initialising needs");
}

/* A report's `host` (issue 38): every field's type and range; all five
 * tick counts or none; absent entirely from a node before it. */
static void test_host(void **state)
{
    (void)state;
    const char *ok = "{\"host\": {\"t\": 12.5, \"cpu_s\": 0.25, \"cpus\": 2, \"cpu_ticks\": 1000, \"idle_ticks\": 500, "
                     "\"iowait_ticks\": 10, \"steal_ticks\": 5, \"irq_ticks\": 3, \"procs_running\": 4, \"load1\": 1.5}}";
    expect(report_trainer, ok, NULL);
    expect(report_server, ok, NULL);
    expect(report_server, "{\"host\": {\"t\": 1, \"cpu_s\": 0, \"cpus\": 1}}", NULL); /* no /proc/stat */
    expect(report_server, "{\"rows_touched\": 1}", NULL);                           /* an older node */
    expect(report_trainer, "{\"host\": 1}", "host must be an object, got a whole number");
    expect(report_trainer, "{\"host\": {\"cpu_s\": 0, \"cpus\": 1}}", "host.t must be a number in 0..");
    expect(report_trainer, "{\"host\": {\"t\": -1, \"cpu_s\": 0, \"cpus\": 1}}", "host.t must be a number in 0..1e+12, got -1");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": \"0\", \"cpus\": 1}}", "host.cpu_s must be a number in 0..1e+12, got a string");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": 0}}", "host.cpus is missing");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": 0, \"cpus\": 0}}", "host.cpus must be a whole number in 1..");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": 0, \"cpus\": 1, \"load1\": -2}}", "host.load1 must be");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": 0, \"cpus\": 1, \"procs_running\": -1}}",
           "host.procs_running must be a whole number");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": 0, \"cpus\": 1, \"cpu_ticks\": 10}}",
           "host needs all of cpu_ticks, idle_ticks, iowait_ticks, steal_ticks, irq_ticks or none");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": 0, \"cpus\": 1, \"cpu_ticks\": 10, \"idle_ticks\": 8, "
           "\"iowait_ticks\": 1, \"steal_ticks\": 1, \"irq_ticks\": 1}}", "must add up to at most cpu_ticks");
    expect(report_trainer, "{\"host\": {\"t\": 1, \"cpu_s\": 0, \"cpus\": 1, \"cpu_ticks\": 10, \"idle_ticks\": 1.5, "
           "\"iowait_ticks\": 1, \"steal_ticks\": 1, \"irq_ticks\": 1}}", "host.idle_ticks must be a whole number");
}

static void test_pass_results(void **state)
{
    (void)state;
    const char *good_buckets =
        "{\"buckets\": {\"layout\": \"ddp\", \"first_bucket_mb\": 1, \"bucket_cap_mb\": 25, "
        "\"first_iteration\": [{\"floats\": 10, \"sparse\": false, \"parameters\": [\"fc1.weight\"]}], "
        "\"rebuilt\": [{\"floats\": 10, \"sparse\": true, \"parameters\": null}]}}";
    expect(validate_pass_results, good_buckets, NULL);
    expect(validate_pass_results,
           "{\"loss_per_epoch\": [0.5, \"nan\", \"inf\", \"-inf\"], \"final_params_sha256\": "
           "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\", \"bags\": 3, \"epochs\": 1}",
           NULL);
    expect(validate_pass_results, "{\"loss_per_epoch\": null, \"final_params_sha256\": null, \"buckets\": null}", NULL);
    expect(validate_pass_results, "{\"loss_per_epoch\": [\"NaN\"]}", "loss_per_epoch[0] must be a number");
    expect(validate_pass_results, "{\"loss_per_epoch\": 1}", "loss_per_epoch must be a list or null");
    expect(validate_pass_results, "{\"final_params_sha256\": \"ABCDEF\"}", "64 lowercase hex digits");
    expect(validate_pass_results, "{\"bags\": -1}", "bags must be a whole number");
    expect(validate_pass_results, "{\"buckets\": {\"layout\": \"zero\"}}", "buckets.layout must be \"ddp\"");
    expect(validate_pass_results,
           "{\"buckets\": {\"layout\": \"ddp\", \"first_bucket_mb\": -1, \"bucket_cap_mb\": 25, \"first_iteration\": [], "
           "\"rebuilt\": []}}",
           "buckets.first_bucket_mb must be a number >= 0");
    expect(validate_pass_results,
           "{\"buckets\": {\"layout\": \"ddp\", \"first_bucket_mb\": 1, \"bucket_cap_mb\": 25, \"first_iteration\": [], "
           "\"rebuilt\": [{\"floats\": 1, \"sparse\": false, \"parameters\": [\"a\\u001b[2J\"]}]}}",
           "buckets.rebuilt[0] must be");
    expect(validate_pass_results,
           "{\"buckets\": {\"layout\": \"ddp\", \"first_bucket_mb\": 1, \"bucket_cap_mb\": 25, \"first_iteration\": {}}}",
           "buckets.first_iteration must be a list");
    /* --compress powersgd's figures (issue 43): the headline reads them */
    expect(validate_pass_results,
           "{\"compress\": \"powersgd\", \"comm_hook\": \"powerSGD_hook\", \"powersgd\": {\"plain_steps\": 2, "
           "\"compressed_steps\": 18, \"bytes_per_step\": 8396.8, \"bytes_per_compressed_step\": 5632, "
           "\"matrix_approximation_rank\": 4}}",
           NULL);
    expect(validate_pass_results,
           "{\"powersgd\": {\"plain_steps\": 20, \"compressed_steps\": 0, \"bytes_per_step\": 33280, "
           "\"bytes_per_compressed_step\": null}}",
           NULL);
    expect(validate_pass_results, "{\"powersgd\": []}", "powersgd must be an object");
    expect(validate_pass_results, "{\"powersgd\": {\"bytes_per_step\": -1}}", "powersgd must be an object");
    expect(validate_pass_results, "{\"powersgd\": {\"bytes_per_step\": \"many\"}}", "powersgd must be an object");
    expect(validate_pass_results, "{\"powersgd\": {\"plain_steps\": 1.5}}", "powersgd must be an object");
    expect(validate_pass_results, "{\"powersgd\": {\"compressed_steps\": -2}}", "powersgd must be an object");
    expect(validate_failed, "{\"reason\": \"x\"}", NULL);
    expect(validate_failed, "{\"reason\": 5}", "reason must be a string");
}

/* clock_ack (issue 42): four readings, whole numbers >= 0, all there. */
static void test_clock_ack(void **state)
{
    (void)state;
    expect(validate_clock_ack, "{\"seq\": 1, \"t0\": 10, \"t1\": 0, \"t2\": 9223372036854775807}", NULL);
    expect(validate_clock_ack, "{\"t0\": 10, \"t1\": 11, \"t2\": 12}", "seq is missing");
    expect(validate_clock_ack, "{\"seq\": 1, \"t0\": 10, \"t1\": 11}", "t2 is missing");
    expect(validate_clock_ack, "{\"seq\": 1, \"t0\": -1, \"t1\": 11, \"t2\": 12}", "t0 must be a whole number");
    expect(validate_clock_ack, "{\"seq\": 1, \"t0\": 1.5, \"t1\": 11, \"t2\": 12}", "got a number");
    expect(validate_clock_ack, "{\"seq\": \"1\", \"t0\": 1, \"t1\": 11, \"t2\": 12}", "got a string");
    expect(validate_register, "{\"role\": \"trainer\", \"clock\": true}", NULL);
    expect(validate_register, "{\"role\": \"trainer\", \"clock\": 1}", "clock must be true or false");
}

/* A report with one bad sample counts none of its samples; a rank's
 * distinct metrics are bounded. */
static void test_aggregate_whole_or_nothing(void **state)
{
    (void)state;
    aggregate a;
    assert_int_equal(agg_init(&a), 0);
    char err[200];
    json_t *bad = json_of("{\"x,a\": [1, 2], \"x,b\": [3, -1]}");
    assert_int_equal(agg_add_report(&a, AGG_TRAINER, 0, bad, err, sizeof err), -1);
    json_decref(bad);
    size_t n = 0;
    snap_stat *st = agg_snapshot(&a, true, &n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(st[i].s.count, 0);
    free(st);
    json_t *many = json_object();
    for (int i = 0; i <= AGG_MAX_METRICS; i++) {
        char key[32];
        snprintf(key, sizeof key, "x,m%d", i);
        json_object_set_new(many, key, json_pack("[f]", 1.0));
    }
    assert_int_equal(agg_add_report(&a, AGG_TRAINER, 0, many, err, sizeof err), -1);
    assert_non_null(strstr(err, "distinct metrics"));
    json_object_del(many, "x,m0");
    assert_int_equal(agg_add_report(&a, AGG_TRAINER, 0, many, err, sizeof err), 0);
    json_decref(many);
    agg_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register),
        cmocka_unit_test(test_ready_links),
        cmocka_unit_test(test_reports),
        cmocka_unit_test(test_host),
        cmocka_unit_test(test_pass_results),
        cmocka_unit_test(test_clock_ack),
        cmocka_unit_test(test_aggregate_whole_or_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
