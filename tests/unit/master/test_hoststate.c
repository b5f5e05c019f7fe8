/* test_hoststate.c — the host's state's arithmetic (master/hoststate.c,
 * shared/hostinfo.c): a window's shares from two readings, the busy and
 * oversubscribed verdicts, a track's timed and live windows, and
 * results.json's host_state of a master built by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "master/hoststate.h"
#include "master/master.h"

/* A reading at t: `busy` user ticks and `idle` idle ticks since boot, 10
 * steal, 5 irq; the process's CPU cpu_s. */
static hostinfo_sample at(double t, double cpu_s, uint64_t user, uint64_t idle, uint64_t steal)
{
    hostinfo_sample s = {0};
    s.t = t;
    s.cpu_s = cpu_s;
    s.ticks_ok = true;
    s.idle = idle;
    s.steal = steal;
    s.irq = 5;
    s.total = user + idle + steal + 5;
    s.procs_running = 3;
    s.load1 = 1.0;
    s.cpus = 2;
    return s;
}

static void test_window(void **state)
{
    (void)state;
    /* 10 s on 2 CPUs: 2000 ticks; 600 user, 1300 idle, 100 steal. */
    hostinfo_sample a = at(100, 1.0, 1000, 5000, 10), b = at(110, 4.0, 1600, 6300, 110);
    hostinfo_window w = hostinfo_window_of(&a, &b);
    assert_true(fabs(w.seconds - 10) < 1e-9);
    assert_true(fabs(w.steal - 0.05) < 1e-9);
    assert_true(fabs(w.busy - 0.30) < 1e-9);
    assert_true(fabs(w.own - 0.15) < 1e-9); /* 3 CPU s of 20 */
    /* irq and softirq ticks are busy too: the job's processes' own CPU
     * time holds the softirq they run (a loopback send's receive). */
    hostinfo_sample c = b;
    c.irq += 100;
    c.total += 100;
    w = hostinfo_window_of(&a, &c);
    assert_true(fabs(w.busy - 700.0 / 2100.0) < 1e-9);
    assert_true(fabs(w.steal - 100.0 / 2100.0) < 1e-9);
    /* No tick between them (a static fake /proc): not known. */
    w = hostinfo_window_of(&a, &a);
    assert_true(isnan(w.steal) && isnan(w.busy) && isnan(w.own));
    /* Counters that went back (another boot): not known. */
    w = hostinfo_window_of(&b, &a);
    assert_true(isnan(w.busy));
}

static void test_verdict(void **state)
{
    (void)state;
    char why[600];
    assert_int_equal(hoststate_verdict(0.01, 0.5, 0.45, 0.05, 2, why, sizeof why), 0);
    assert_string_equal(why, "");
    /* Exactly at the limits is not busy. */
    assert_int_equal(hoststate_verdict(0.05, 0.5, 0.4, 0.10, 2, why, sizeof why), 0);
    assert_int_equal(hoststate_verdict(0.0, 0.73, 0.30, 0.43, 2, why, sizeof why), 1);
    assert_non_null(strstr(why, "other processes used 43 % of its 2 CPUs (the job's own 30 %, all non-idle 73 %"));
    assert_null(strstr(why, "steal"));
    assert_int_equal(hoststate_verdict(0.12, 0.2, 0.2, 0.0, 4, why, sizeof why), 1);
    assert_non_null(strstr(why, "CPU steal was 12 %"));
    assert_null(strstr(why, "other processes"));
    assert_int_equal(hoststate_verdict(0.12, 0.9, 0.1, 0.8, 4, why, sizeof why), 1);
    assert_non_null(strstr(why, "other processes used 80 % of its 4 CPUs"));
    assert_non_null(strstr(why, "; CPU steal was 12 %"));
    /* Not known: the job's share (an old node), or the ticks. */
    assert_int_equal(hoststate_verdict(0.0, 0.5, NAN, NAN, 2, why, sizeof why), -1);
    assert_int_equal(hoststate_verdict(NAN, NAN, 0.1, NAN, 2, why, sizeof why), -1);
    /* Steal alone is enough to say busy. */
    assert_int_equal(hoststate_verdict(0.2, NAN, NAN, NAN, 2, why, sizeof why), 1);
}

static void test_oversubscribed(void **state)
{
    (void)state;
    assert_true(hoststate_oversubscribed(4, 1, 2));
    assert_true(hoststate_oversubscribed(2, 1, 2));
    assert_false(hoststate_oversubscribed(1, 1, 2));
    assert_false(hoststate_oversubscribed(2, 0, 2));
    assert_false(hoststate_oversubscribed(8, 1, 0)); /* cores not known */
}

static void test_track(void **state)
{
    (void)state;
    hs_track t;
    memset(&t, 0, sizeof t);
    hostinfo_sample a, b;
    assert_false(hs_track_timed(&t, &a, &b));
    hostinfo_sample r0 = at(1, 0, 0, 100, 0), r1 = at(2, 0, 0, 300, 0), r2 = at(3, 0, 0, 500, 0);
    hostinfo_sample r3 = at(4, 0, 0, 700, 0);
    hs_track_push(&t, &r0, false);
    hs_track_push(&t, &r1, true);
    /* One reading inside the pass: from the one before it. */
    assert_true(hs_track_timed(&t, &a, &b));
    assert_true(a.t == 1 && b.t == 2);
    hs_track_push(&t, &r2, true);
    assert_true(hs_track_timed(&t, &a, &b));
    assert_true(a.t == 2 && b.t == 3);
    /* After the pass: it stays as it was. */
    hs_track_push(&t, &r3, false);
    assert_true(hs_track_timed(&t, &a, &b));
    assert_true(a.t == 2 && b.t == 3);
    /* Live: the oldest kept reading is at least HOSTSTATE_LIVE_S back
     * once there are that many seconds of them. */
    assert_true(hs_track_live(&t, &a, &b));
    assert_true(a.t == 1 && b.t == 4);
    for (int i = 5; i <= 30; i++) {
        hostinfo_sample r = at(i, 0, 0, 100 * (uint64_t)i, 0);
        hs_track_push(&t, &r, false);
        assert_true(hs_track_live(&t, &a, &b));
        assert_true(b.t == i);
        assert_true(b.t - a.t <= 2 * HOSTSTATE_LIVE_S);
        if (i > 12)
            assert_true(b.t - a.t >= HOSTSTATE_LIVE_S);
    }
    hs_track_timed_start(&t);
    hostinfo_sample r31 = at(31, 0, 0, 3100, 0);
    hs_track_push(&t, &r31, true);
    assert_false(hs_track_timed(&t, &a, &b)); /* pre is from before the earlier pass: not used after it */
}

/* A master with 2 trainers and a server on host "h1" (not this host), and
 * its results.json's host_state. */
static void test_json(void **state)
{
    (void)state;
    static master m;
    static node n[3];
    static node *tr[2], *sv[1];
    memset(&m, 0, sizeof m);
    memset(n, 0, sizeof n);
    m.set.ntrainer = 2;
    m.set.nserver = 1;
    m.trainers = tr;
    m.servers = sv;
    m.training_s = 10;
    for (int i = 0; i < 3; i++) {
        n[i].registered = true;
        n[i].role = i < 2 ? AGG_TRAINER : AGG_SERVER;
        n[i].rank = i < 2 ? (uint32_t)i : 0;
        snprintf(n[i].host, sizeof n[i].host, "h1.example");
        n[i].environment = json_pack("{s:s, s:i, s:i}", "hostname", "h1", "cpus", 4, "cpus_allowed", 2);
        n[i].next = i < 2 ? &n[i + 1] : NULL;
        /* Over 10 s on 2 CPUs (2000 ticks): 1200 non-idle, each node 2 CPU s
         * (10 % of the host each): others 60 - 30 = 30 %. */
        hostinfo_sample a = at(100, 1, 1000, 5000, 10), b = at(110, 3, 2200, 5800, 10);
        hs_track_push(&n[i].hs, &a, true);
        hs_track_push(&n[i].hs, &b, true);
    }
    m.nodes = &n[0];
    tr[0] = &n[0];
    tr[1] = &n[1];
    sv[0] = &n[2];
    json_t *hs = hoststate_json(&m);
    /* Before the pass ended: the hosts, no timed figures, oversubscribed
     * (3 processes on 2 allowed cores). */
    assert_true(json_is_null(json_object_get(hs, "busy")));
    assert_true(json_is_true(json_object_get(hs, "oversubscribed")));
    json_t *h = json_array_get(json_object_get(hs, "hosts"), 0);
    assert_string_equal(json_string_value(json_object_get(h, "host")), "h1");
    assert_int_equal(json_integer_value(json_object_get(h, "cpus")), 2);
    assert_int_equal(json_integer_value(json_object_get(h, "job_processes")), 3);
    assert_true(json_is_false(json_object_get(h, "master")));
    assert_true(json_is_null(json_object_get(h, "timed")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(hs, "warnings"), 0)),
                        "host h1 is oversubscribed: the job started 3 busy processes (2 trainers, 1 server) on 2 "
                        "cores: its figures measure the scheduler too");
    json_decref(hs);
    m.hs.timed_done = true;
    hs = hoststate_json(&m);
    h = json_array_get(json_object_get(hs, "hosts"), 0);
    json_t *t = json_object_get(h, "timed");
    assert_true(fabs(json_real_value(json_object_get(t, "cpu_busy_share")) - 0.6) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(t, "job_cpu_share")) - 0.3) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(t, "other_cpu_share")) - 0.3) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(t, "steal_share"))) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(t, "runnable_per_core")) - 1.5) < 1e-9);
    assert_true(json_is_true(json_object_get(t, "busy")));
    assert_true(json_is_true(json_object_get(hs, "busy")));
    assert_non_null(strstr(json_string_value(json_object_get(t, "why")), "other processes used 30 % of its 2 CPUs"));
    assert_int_equal(json_array_size(json_object_get(hs, "warnings")), 2);
    json_decref(hs);
    /* A node that sent no readings (older): the job's share, and the
     * verdict, are not known. */
    memset(&n[2].hs, 0, sizeof n[2].hs);
    hs = hoststate_json(&m);
    t = json_object_get(json_array_get(json_object_get(hs, "hosts"), 0), "timed");
    assert_true(json_is_null(json_object_get(t, "job_cpu_share")));
    assert_true(json_is_null(json_object_get(t, "busy")));
    assert_true(json_is_null(json_object_get(hs, "busy")));
    json_decref(hs);
    for (int i = 0; i < 3; i++)
        json_decref(n[i].environment);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window),     cmocka_unit_test(test_verdict), cmocka_unit_test(test_oversubscribed),
        cmocka_unit_test(test_track),      cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
