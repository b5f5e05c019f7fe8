/* test_trace.c — unit tests for shared/trace (issue 42): the span names,
 * the steps' window, recording in and out of it, a full ring keeping its
 * oldest spans and saying what it dropped, the JSON a node ships and what
 * the decoder refuses, and a reader beside a writing thread. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "shared/trace.h"

/* A node of role trainer 0, on, capacity cap, window first..last. */
static trace_node *node_on(uint32_t cap, uint64_t first, uint64_t last)
{
    trace_conf c = {.role = TRACE_TRAINER, .rank = 0, .on = true, .capacity = cap, .window = {first, last}};
    char err[256] = "";
    trace_node *n = trace_node_new(&c, err, sizeof err);
    assert_non_null(n);
    return n;
}

/* A span of ids (batch, bucket 3, trainer 0, server 1) from t to t + 10. */
static void add_at(trace_ring *r, trace_span s, unsigned lane, uint64_t t, int64_t batch)
{
    trace_add(r, s, lane, t, t + 10, trace_ids_make(batch, 3, 0, 1));
}

static void test_names(void **state)
{
    (void)state;
    for (int s = 0; s < TRACE_NSPANS; s++) {
        assert_int_equal(trace_span_lookup(trace_span_name((trace_span)s)), s);
        assert_non_null(trace_span_category((trace_span)s));
    }
    assert_string_equal(trace_span_name(TRACE_BACKWARD_COMPUTE), "backward_compute");
    assert_string_equal(trace_span_name(TRACE_DEVICE_JOB), "device_job");
    assert_string_equal(trace_span_category(TRACE_FOLD), "server");
    assert_int_equal(trace_span_lookup("no_such_span"), -1);
    assert_int_equal(trace_span_lookup(NULL), -1);
    /* A bucket's life in order, trainer -> server -> trainer; the round
     * trip's enclosing span in no flow. */
    assert_true(trace_span_flow(TRACE_BUCKET_READY) < trace_span_flow(TRACE_PUSH_RECV));
    assert_true(trace_span_flow(TRACE_PUSH_RECV) < trace_span_flow(TRACE_FOLD));
    assert_true(trace_span_flow(TRACE_ANSWER_OUT) < trace_span_flow(TRACE_BUCKET_APPLY));
    assert_int_equal(trace_span_flow(TRACE_BUCKET_WAIT), 0);
    assert_int_equal(trace_role_lookup("server"), TRACE_SERVER);
    assert_string_equal(trace_role_name(TRACE_MASTER), "master");
    assert_int_equal(trace_role_lookup("worker"), -1);
}

static void test_window_parse(void **state)
{
    (void)state;
    trace_window w;
    char err[256];
    assert_int_equal(trace_window_parse("10:20", &w, err, sizeof err), 0);
    assert_true(w.first == 10 && w.last == 20);
    assert_int_equal(trace_window_parse("7", &w, err, sizeof err), 0);
    assert_true(w.first == 7 && w.last == 7);
    assert_int_equal(trace_window_parse("3:", &w, err, sizeof err), 0);
    assert_true(w.first == 3 && w.last == TRACE_STEP_MAX);
    const char *bad[] = {"", ":", ":5", "20:10", "-1:3", "1:x", " 1:2", "1:2:3", "99999999999999999999:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        w = (trace_window){1, 2};
        err[0] = '\0';
        assert_int_equal(trace_window_parse(bad[i], &w, err, sizeof err), -1);
        assert_contains(err, "trace steps");
        assert_true(w.first == 1 && w.last == 2); /* untouched */
    }
    assert_int_equal(trace_window_parse("20:10", &w, err, sizeof err), -1);
    assert_contains(err, "the first step is after the last");
}

static void test_conf_refused(void **state)
{
    (void)state;
    char err[256];
    trace_conf c = {.role = TRACE_SERVER, .on = true, .capacity = 0, .window = TRACE_ALL_STEPS};
    assert_null(trace_node_new(&c, err, sizeof err));
    assert_contains(err, "it holds 1 to");
    c.capacity = TRACE_CAPACITY_MAX + 1;
    assert_null(trace_node_new(&c, err, sizeof err));
    c.capacity = 16;
    c.window = (trace_window){5, 4};
    assert_null(trace_node_new(&c, err, sizeof err));
    assert_contains(err, "the first is after the last");
    c.window = TRACE_ALL_STEPS;
    c.role = TRACE_NROLES;
    assert_null(trace_node_new(&c, err, sizeof err));
    assert_contains(err, "no such role");
}

static void test_lanes(void **state)
{
    (void)state;
    trace_node *n = node_on(4, 0, 10);
    assert_int_equal(trace_lane(n, "main"), 0);
    assert_int_equal(trace_lane(n, "comm"), 1);
    assert_int_equal(trace_lane(n, "main"), 0); /* the same name, the same lane */
    assert_int_equal(trace_lane(n, ""), -1);
    assert_int_equal(trace_lane(n, NULL), -1);
    char longname[TRACE_NAME_MAX + 1];
    memset(longname, 'x', TRACE_NAME_MAX);
    longname[TRACE_NAME_MAX] = '\0';
    assert_int_equal(trace_lane(n, longname), -1);
    longname[TRACE_NAME_MAX - 1] = '\0'; /* 47 bytes and its NUL: fits */
    assert_int_equal(trace_lane(n, longname), 2);
    for (int i = 3; i < TRACE_LANES_MAX; i++) {
        char name[16];
        snprintf(name, sizeof name, "stream %d", i);
        assert_int_equal(trace_lane(n, name), i);
    }
    assert_int_equal(trace_lane(n, "one too many"), -1);
    assert_int_equal(trace_lane_count(n), TRACE_LANES_MAX);
    assert_string_equal(trace_lane_name(n, 1), "comm");
    assert_null(trace_ring_add(n, ""));
    trace_node_free(n);
}

/* Not created, or created off: nothing recorded, no buffer. */
static void test_off(void **state)
{
    (void)state;
    trace_add(NULL, TRACE_FORWARD, 0, 1, 2, trace_ids_none()); /* not created: a no-op */
    trace_conf c = {.role = TRACE_TRAINER, .on = false, .capacity = 8, .window = TRACE_ALL_STEPS};
    char err[256];
    trace_node *n = trace_node_new(&c, err, sizeof err);
    assert_non_null(n);
    assert_false(trace_node_on(n));
    int lane = trace_lane(n, "main");
    trace_ring *r = trace_ring_add(n, "main");
    assert_non_null(r);
    assert_null(r->ev);
    assert_int_equal(r->gate, TRACE_GATE_OFF);
    trace_ring_step(r, 3);
    assert_int_equal(r->gate, TRACE_GATE_OFF);
    trace_ring_step(r, TRACE_NO_STEP);
    add_at(r, TRACE_FORWARD, (unsigned)lane, 100, 3);
    assert_int_equal(trace_ring_count(r), 0);
    assert_int_equal(trace_ring_dropped(r), 0);
    trace_dump *d = trace_node_snapshot(n);
    assert_non_null(d);
    assert_int_equal(d->nev, 0);
    assert_int_equal(d->nlanes, 1);
    trace_dump_free(d);
    trace_node_free(n);
}

static void test_window(void **state)
{
    (void)state;
    trace_node *n = node_on(64, 10, 12);
    unsigned lane = (unsigned)trace_lane(n, "main");
    trace_ring *r = trace_ring_add(n, "main");
    assert_int_equal(r->gate, TRACE_GATE_OUTSIDE);
    add_at(r, TRACE_FORWARD, lane, 1, 0); /* before any step: not kept */
    for (uint64_t step = 8; step <= 14; step++) {
        trace_ring_step(r, step);
        add_at(r, TRACE_FORWARD, lane, step * 100, (int64_t)step);
        add_at(r, TRACE_OPTIMIZER, lane, step * 100 + 50, (int64_t)step);
    }
    assert_int_equal(trace_ring_count(r), 6); /* steps 10, 11, 12: two spans each */
    trace_ring_step(r, TRACE_NO_STEP);        /* between steps: kept */
    assert_int_equal(r->gate, TRACE_GATE_OPEN);
    add_at(r, TRACE_PHASE, lane, 5000, TRACE_NONE);
    assert_int_equal(trace_ring_count(r), 7);
    trace_dump *d = trace_node_snapshot(n);
    assert_int_equal(d->nev, 7);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(d->ev[i].ids.batch, 10 + (int64_t)i / 2);
        assert_int_equal(d->ev[i].span, i % 2 ? TRACE_OPTIMIZER : TRACE_FORWARD);
        assert_int_equal(d->ev[i].end_ns - d->ev[i].start_ns, 10);
    }
    assert_int_equal(d->ev[6].span, TRACE_PHASE);
    assert_int_equal(d->drops.count, 0);
    trace_dump_free(d);

    /* Reset: empty, and outside until a step is set again. */
    trace_node_reset(n);
    assert_int_equal(trace_ring_count(r), 0);
    assert_int_equal(r->gate, TRACE_GATE_OUTSIDE);
    add_at(r, TRACE_FORWARD, lane, 1, 0);
    assert_int_equal(trace_ring_count(r), 0);
    trace_ring_step(r, 11);
    add_at(r, TRACE_FORWARD, lane, 1, 11);
    assert_int_equal(trace_ring_count(r), 1);
    trace_node_free(n);
}

/* Full: the oldest spans stay, the rest are counted, and said. */
static void test_wrap(void **state)
{
    (void)state;
    trace_node *n = node_on(4, 10, 20);
    unsigned lane = (unsigned)trace_lane(n, "main");
    trace_ring *r = trace_ring_add(n, "main");
    char buf[256];
    trace_drops none = trace_ring_drops(r);
    assert_null(trace_drop_message(&none, 4, NULL, buf, sizeof buf));
    for (uint64_t step = 10; step <= 14; step++) {
        trace_ring_step(r, step);
        add_at(r, TRACE_FORWARD, lane, step * 100, (int64_t)step);
        add_at(r, TRACE_BACKWARD_COMPUTE, lane, step * 100 + 20, (int64_t)step);
    }
    assert_int_equal(trace_ring_count(r), 4);
    assert_int_equal(trace_ring_dropped(r), 6);
    trace_drops dr = trace_ring_drops(r);
    assert_int_equal(dr.first_step, 12);
    assert_int_equal(dr.last_step, 14);
    assert_string_equal(trace_drop_message(&dr, 4, NULL, buf, sizeof buf),
                        "trace: 6 spans of steps 12..14 dropped: the ring holds 4; raise --trace-buffer");

    trace_dump *d = trace_node_snapshot(n);
    assert_int_equal(d->nev, 4);
    assert_int_equal(d->ev[0].ids.batch, 10); /* the first traced steps, whole */
    assert_int_equal(d->ev[3].ids.batch, 11);
    assert_int_equal(d->drops.count, 6);
    assert_int_equal(d->capacity, 4);
    trace_dump_free(d);

    /* The sentence of the issue, with thousands marked. */
    trace_drops big = {.count = 12345, .first_step = 10, .last_step = 20};
    assert_string_equal(trace_drop_message(&big, 65536, NULL, buf, sizeof buf),
                        "trace: 12,345 spans of steps 10..20 dropped: the ring holds 65,536; raise --trace-buffer");
    trace_drops one = {.count = 1, .first_step = 7, .last_step = 7};
    assert_string_equal(trace_drop_message(&one, 1000000, "server 2", buf, sizeof buf),
                        "trace of server 2: 1 span of step 7 dropped: the ring holds 1,000,000; raise --trace-buffer");
    trace_drops between = {.count = 999, .first_step = TRACE_NO_STEP, .last_step = TRACE_NO_STEP};
    assert_contains(trace_drop_message(&between, 100, NULL, buf, sizeof buf), "999 spans between steps dropped");
    trace_node_free(n);
}

/* Two rings of one node: the snapshot holds both, drops summed. */
static void test_rings(void **state)
{
    (void)state;
    trace_node *n = node_on(2, 0, 100);
    unsigned main_lane = (unsigned)trace_lane(n, "main"), comm = (unsigned)trace_lane(n, "comm");
    trace_ring *a = trace_ring_add(n, "main"), *b = trace_ring_add(n, "comm");
    trace_ring_step(a, 1);
    trace_ring_step(b, 3);
    add_at(a, TRACE_FORWARD, main_lane, 10, 1);
    add_at(b, TRACE_FRAME_OUT, comm, 20, 1);
    add_at(b, TRACE_FRAME_IN, comm, 30, 1);
    add_at(b, TRACE_FRAME_IN, comm, 40, 1); /* dropped at step 3 */
    trace_ring_step(a, 5);
    add_at(a, TRACE_FORWARD, main_lane, 50, 5);
    add_at(a, TRACE_FORWARD, main_lane, 60, 5); /* dropped at step 5 */
    trace_dump *d = trace_node_snapshot(n);
    assert_int_equal(d->nev, 4);
    assert_int_equal(d->ev[0].lane, main_lane);
    assert_int_equal(d->ev[2].lane, comm);
    assert_int_equal(d->drops.count, 2);
    assert_int_equal(d->drops.first_step, 3);
    assert_int_equal(d->drops.last_step, 5);
    trace_dump_free(d);
    trace_node_free(n);
}

static void assert_dumps_equal(const trace_dump *a, const trace_dump *b)
{
    assert_int_equal(a->role, b->role);
    assert_int_equal(a->rank, b->rank);
    assert_true(a->window.first == b->window.first && a->window.last == b->window.last);
    assert_int_equal(a->capacity, b->capacity);
    assert_int_equal(a->nlanes, b->nlanes);
    for (size_t i = 0; i < a->nlanes; i++)
        assert_string_equal(a->lane[i], b->lane[i]);
    assert_int_equal(a->nev, b->nev);
    for (size_t i = 0; i < a->nev; i++) {
        const trace_event *x = &a->ev[i], *y = &b->ev[i];
        assert_true(x->start_ns == y->start_ns && x->end_ns == y->end_ns && x->span == y->span && x->lane == y->lane);
        assert_true(x->ids.batch == y->ids.batch && x->ids.bucket == y->ids.bucket &&
                    x->ids.trainer == y->ids.trainer && x->ids.server == y->ids.server);
    }
    assert_true(a->drops.count == b->drops.count && a->drops.first_step == b->drops.first_step &&
                a->drops.last_step == b->drops.last_step);
}

static void test_round_trip(void **state)
{
    (void)state;
    trace_conf c = {.role = TRACE_SERVER, .rank = 3, .on = true, .capacity = 3, .window = {2, 9}};
    char err[256];
    trace_node *n = trace_node_new(&c, err, sizeof err);
    unsigned reactor = (unsigned)trace_lane(n, "reactor"), stream = (unsigned)trace_lane(n, "stream 0");
    trace_ring *r = trace_ring_add(n, "reactor");
    trace_ring_step(r, 2);
    uint64_t base = 987654321012345ull; /* a monotonic clock days after boot */
    trace_add(r, TRACE_PUSH_RECV, reactor, base + 5, base + 900, trace_ids_make(2, 7, 1, 3));
    trace_add(r, TRACE_DEVICE_JOB, stream, base, base, trace_ids_make(2, 7, TRACE_NONE, 3)); /* empty span */
    trace_add(r, TRACE_RESOLVE, reactor, base + 1000, base + 1200, trace_ids_none());
    trace_add(r, TRACE_ANSWER_OUT, reactor, base + 1300, base + 1400, trace_ids_make(2, 7, 1, 3)); /* dropped */
    trace_dump *d = trace_node_snapshot(n);
    char *json = trace_dump_encode(d);
    assert_non_null(json);
    assert_contains(json, "\"role\":\"server\"");
    assert_contains(json, "\"lanes\":[\"reactor\",\"stream 0\"]");
    trace_dump *back = trace_dump_decode(json, strlen(json), err, sizeof err);
    if (!back)
        fail_msg("%s", err);
    assert_dumps_equal(d, back);

    /* And again from the decoded one: the same text. */
    char *again = trace_dump_encode(back);
    assert_string_equal(json, again);
    free(again);
    free(json);
    trace_dump_free(back);
    trace_dump_free(d);

    /* An empty node's dump, and the all-steps window. */
    c.window = TRACE_ALL_STEPS;
    trace_node *e = trace_node_new(&c, err, sizeof err);
    d = trace_node_snapshot(e);
    json = trace_dump_encode(d);
    back = trace_dump_decode(json, strlen(json), err, sizeof err);
    assert_non_null(back);
    assert_dumps_equal(d, back);
    assert_true(back->window.last == TRACE_STEP_MAX);
    free(json);
    trace_dump_free(back);
    trace_dump_free(d);
    trace_node_free(e);
    trace_node_free(n);
}

/* A valid document with one part replaced: "%s" stands for the events. */
#define HEAD                                                                                                           \
    "{\"v\":1,\"role\":\"trainer\",\"rank\":0,\"window\":[0,9],\"capacity\":8,\"lanes\":[\"main\"],"                   \
    "\"names\":[\"forward\",\"fold\"],\"dropped\":{\"count\":0,\"first_step\":-1,\"last_step\":-1},\"t0\":1000,"

static void test_decode_refused(void **state)
{
    (void)state;
    const struct {
        const char *json, *why;
    } bad[] = {
        {"", "not JSON"},
        {"{\"v\":1,", "not JSON"},
        {"[1,2]", "not an object"},
        {HEAD "\"events\":[[0,0,0,5,1,2,0,1]]", "not JSON"}, /* cut short */
        {HEAD "\"events\":{}}", "\"events\" is not an array"},
        {HEAD "\"events\":[[0,0,0,5,1,2,0]]}", "event 0 is not an array of 8 integers"},
        {HEAD "\"events\":[[0,0,0,5,1,2,0,1],[0,0,0,5,1,2,0,\"x\"]]}", "event 1 is not an array of 8"},
        {HEAD "\"events\":[[0,0,0,-5,1,2,0,1]]}", "event 0 ends before it starts"},
        {HEAD "\"events\":[[0,0,-1,5,1,2,0,1]]}", "event 0 starts before t0"},
        {HEAD "\"events\":[[2,0,0,5,1,2,0,1]]}", "event 0: name 2 out of range (2 names)"},
        {HEAD "\"events\":[[0,1,0,5,1,2,0,1]]}", "event 0: lane 1 out of range (1 lanes)"},
        {HEAD "\"events\":[[0,0,0,5,-2,2,0,1]]}", "an id out of range"},
        {HEAD "\"events\":[[0,0,0,5,1,2,0,2147483648]]}", "an id out of range"},
        {HEAD "\"events\":[[0,0,9223372036854775000,5000,1,2,0,1]]}", "past the clock's range"},
        {"{\"v\":2,\"events\":[],\"t0\":0}", "version 2"},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"worker\"}", "\"role\" is not trainer, server or master"},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"server\",\"rank\":-1}", "\"rank\" is not an integer"},
        {"{\"v\":1,\"events\":[]}", "no \"t0\""},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"server\",\"rank\":0,\"capacity\":0}", "\"capacity\""},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"server\",\"rank\":0,\"capacity\":1,\"window\":[5,4]}",
         "\"window\""},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"server\",\"rank\":0,\"capacity\":1,\"window\":[4,5],"
         "\"lanes\":[\"\"]}",
         "lane 0's name"},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"server\",\"rank\":0,\"capacity\":1,\"window\":[4,5],"
         "\"lanes\":[],\"dropped\":[]}",
         "\"dropped\" is not an object"},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"server\",\"rank\":0,\"capacity\":1,\"window\":[4,5],"
         "\"lanes\":[],\"dropped\":{\"count\":0,\"first_step\":-1,\"last_step\":-1},\"names\":[\"fold\",\"warp\"]}",
         "unknown span name 'warp'"},
        {"{\"v\":1,\"t0\":0,\"events\":[],\"role\":\"server\",\"rank\":0,\"capacity\":1,\"window\":[4,5],"
         "\"lanes\":[],\"dropped\":{\"count\":0,\"first_step\":-1,\"last_step\":-1},\"names\":[7]}",
         "unknown span name (not a string)"},
        {"{\"v\":1,\"v\":1}", "not JSON"}, /* a key twice */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        trace_dump *d = trace_dump_decode(bad[i].json, strlen(bad[i].json), err, sizeof err);
        if (d)
            fail_msg("case %zu decoded: %s", i, bad[i].json);
        assert_contains(err, bad[i].why);
    }
    /* The same head with good events decodes: the cases above fail for
     * their one reason. */
    const char *good = HEAD "\"events\":[[1,0,0,5,1,2,0,1]]}";
    char err[256];
    trace_dump *d = trace_dump_decode(good, strlen(good), err, sizeof err);
    assert_non_null(d);
    assert_int_equal(d->ev[0].span, TRACE_FOLD);
    assert_int_equal(d->ev[0].start_ns, 1000);
    assert_int_equal(d->ev[0].end_ns, 1005);
    trace_dump_free(d);
    /* Over the size bound: refused before parsing (the length alone). */
    assert_null(trace_dump_decode(good, TRACE_JSON_MAX + 1, err, sizeof err));
    assert_contains(err, "more than");
}

/* One thread records while another takes snapshots: every snapshot is a
 * whole prefix of what was recorded. */
#define WRITER_SPANS 20000
static void *writer_main(void *arg)
{
    trace_ring *r = arg;
    trace_ring_step(r, 1);
    for (uint64_t i = 0; i < WRITER_SPANS; i++)
        trace_add(r, TRACE_FRAME_OUT, 0, i * 10, i * 10 + 5, trace_ids_make((int64_t)i, 0, 0, 0));
    return NULL;
}

static void test_reader_beside_writer(void **state)
{
    (void)state;
    trace_node *n = node_on(WRITER_SPANS / 2, 0, 10);
    trace_lane(n, "comm");
    trace_ring *r = trace_ring_add(n, "comm");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_main, r), 0);
    for (int k = 0; k < 50; k++) {
        trace_dump *d = trace_node_snapshot(n);
        assert_non_null(d);
        for (size_t i = 0; i < d->nev; i++)
            assert_true(d->ev[i].ids.batch == (int64_t)i && d->ev[i].start_ns == i * 10);
        trace_dump_free(d);
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(trace_ring_count(r), WRITER_SPANS / 2);
    assert_int_equal(trace_ring_dropped(r), WRITER_SPANS / 2);
    trace_node_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_window_parse),
        cmocka_unit_test(test_conf_refused),
        cmocka_unit_test(test_lanes),
        cmocka_unit_test(test_off),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_wrap),
        cmocka_unit_test(test_rings),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_decode_refused),
        cmocka_unit_test(test_reader_beside_writer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
