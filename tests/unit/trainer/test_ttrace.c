/* test_ttrace.c — unit tests for trainer/ttrace: the trainer's trace from
 * the assignment's `trace` and its own flags (off: no node, no ring; a
 * bad `trace` refused); the warm-up's steps outside every window; the
 * bucket lanes, the links' lanes and the calls' lanes, the last of each
 * shared beyond their number; shipping over the control link, the final
 * part once and nothing after it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shared/tracejob.h"
#include "trainer/client.h"
#include "trainer/ttrace.h"

static json_t *assign_with(const char *trace)
{
    char text[256];
    snprintf(text, sizeof text, "{\"rank\": 1%s%s}", trace ? ", \"trace\": " : "", trace ? trace : "");
    json_t *a = json_loads(text, 0, NULL);
    assert_non_null(a);
    return a;
}

static void test_off_and_on(void **state)
{
    (void)state;
    ttrace t;
    char err[256];
    json_t *plain = assign_with(NULL);
    assert_int_equal(ttrace_init(&t, plain, NULL, 1, false, err, sizeof err), 0);
    assert_false(ttrace_on(&t));
    assert_null(t.compute);
    assert_null(t.comm);
    ttrace_pass(&t, true); /* nothing to do, nothing breaks */
    ttrace_free(&t);
    /* The trainer's own --trace: on, every step, the default ring. */
    trace_flags own = {.on = true};
    assert_int_equal(ttrace_init(&t, plain, &own, 1, false, err, sizeof err), 0);
    assert_true(ttrace_on(&t));
    assert_non_null(t.compute);
    assert_non_null(t.comm);
    assert_int_equal(t.compute->capacity, TRACEJOB_DEFAULT_BUFFER);
    ttrace_free(&t);
    json_decref(plain);
    /* The master's: its window and ring; the trainer's --trace-steps wins. */
    json_t *traced = assign_with("{\"steps\": [2, 3], \"buffer\": 16}");
    assert_int_equal(ttrace_init(&t, traced, NULL, 1, false, err, sizeof err), 0);
    assert_true(ttrace_on(&t));
    assert_int_equal(t.compute->capacity, 16);
    ttrace_pass(&t, true);
    assert_int_equal(ttrace_step_of(&t, 1), 1);
    trace_ring_step(t.compute, ttrace_step_of(&t, 1));
    assert_false(ttrace_open(t.compute));
    trace_ring_step(t.compute, ttrace_step_of(&t, 2));
    assert_true(ttrace_open(t.compute));
    ttrace_free(&t);
    own = (trace_flags){.window_set = true, .window = {5, 5}};
    assert_int_equal(ttrace_init(&t, traced, &own, 1, false, err, sizeof err), 0);
    ttrace_pass(&t, true);
    trace_ring_step(t.compute, ttrace_step_of(&t, 2));
    assert_false(ttrace_open(t.compute));
    trace_ring_step(t.compute, ttrace_step_of(&t, 5));
    assert_true(ttrace_open(t.compute));
    ttrace_free(&t);
    json_decref(traced);
    /* A bad `trace` from the master is the assignment's error. */
    json_t *bad = assign_with("{\"steps\": [3, 2], \"buffer\": 16}");
    assert_int_equal(ttrace_init(&t, bad, NULL, 1, false, err, sizeof err), -1);
    assert_non_null(strstr(err, "the master sent a bad trace"));
    json_decref(bad);
}

/* The warm-up pass: its batches (0, 1, ... as the timed pass's) are
 * outside every window, the widest included; the ring's gate closes at
 * the pass's start. */
static void test_warmup_never_traced(void **state)
{
    (void)state;
    ttrace t;
    char err[256];
    trace_flags own = {.on = true};
    assert_int_equal(ttrace_init(&t, NULL, &own, 0, false, err, sizeof err), 0);
    ttrace_pass(&t, true);
    trace_ring_step(t.compute, ttrace_step_of(&t, 0));
    assert_true(ttrace_open(t.compute));
    ttrace_pass(&t, false);
    assert_false(ttrace_open(t.compute));
    assert_int_equal(ttrace_step_of(&t, 0), TTRACE_UNTIMED);
    assert_true(TTRACE_UNTIMED > TRACE_STEP_MAX && TTRACE_UNTIMED != TRACE_NO_STEP);
    trace_ring_step(t.compute, ttrace_step_of(&t, 0));
    assert_false(ttrace_open(t.compute));
    trace_add(t.compute, TRACE_STEP, t.lane_compute, 1, 2, trace_ids_none());
    assert_int_equal(trace_ring_count(t.compute), 0);
    ttrace_free(&t);
}

static void test_lanes(void **state)
{
    (void)state;
    ttrace t;
    char err[256];
    trace_flags own = {.on = true};
    assert_int_equal(ttrace_init(&t, NULL, &own, 3, false, err, sizeof err), 0);
    ttrace_bucket_lanes(&t, 40);
    trace_node *n = t.node;
    assert_string_equal(trace_lane_name(n, ttrace_bucket_lane(&t, 0)), "bucket 0");
    assert_string_equal(trace_lane_name(n, ttrace_bucket_lane(&t, 28)), "bucket 28");
    assert_string_equal(trace_lane_name(n, ttrace_bucket_lane(&t, 29)), "bucket 29+");
    assert_string_equal(trace_lane_name(n, ttrace_bucket_lane(&t, 39)), "bucket 29+");
    ttrace_bucket_lanes(&t, 40); /* again (the same names): no new lane */
    size_t lanes = trace_lane_count(n);
    assert_int_equal(lanes, 1 + TTRACE_BUCKET_LANES);
    /* Links: a pair each, by the server's rank; from the 16th on, one pair. */
    client cl;
    memset(&cl, 0, sizeof cl);
    client_conn conns[20];
    memset(conns, 0, sizeof conns);
    for (uint32_t i = 0; i < 20; i++)
        conns[i].server_rank = 100 + i;
    cl.conns = conns;
    cl.nconns = 20;
    assert_ptr_equal(ttrace_links(&t, &cl), t.comm);
    assert_ptr_equal(cl.trace, t.comm);
    assert_int_equal(cl.trace_trainer, 3);
    assert_string_equal(trace_lane_name(n, conns[0].trace_lane_out), "to server 100");
    assert_string_equal(trace_lane_name(n, conns[0].trace_lane_in), "from server 100");
    assert_string_equal(trace_lane_name(n, conns[14].trace_lane_out), "to server 114");
    assert_string_equal(trace_lane_name(n, conns[15].trace_lane_out), "to servers 15+");
    assert_int_equal(conns[19].trace_lane_in, conns[15].trace_lane_in);
    assert_int_equal(trace_lane_count(n), lanes + 2 * TTRACE_LINK_LANES);
    /* One hook's client has the comm ring: a second one gets none. */
    client other;
    memset(&other, 0, sizeof other);
    assert_null(ttrace_links(&t, &other));
    assert_null(other.trace);
    ttrace_free(&t);
}

/* A client polled by the training thread (the batch-update and
 * HybridModel trainers'): its frames into the compute ring; its calls'
 * lanes, one per connection by the server's rank, from the 16th on one,
 * beside the one bucket lane such a workload has. Off: none. */
static void test_links_here_and_calls(void **state)
{
    (void)state;
    ttrace t;
    char err[256];
    client cl;
    memset(&cl, 0, sizeof cl);
    client_conn conns[20];
    memset(conns, 0, sizeof conns);
    for (uint32_t i = 0; i < 20; i++)
        conns[i].server_rank = 200 + i;
    cl.conns = conns;
    cl.nconns = 20;
    assert_int_equal(ttrace_init(&t, NULL, NULL, 2, false, err, sizeof err), 0);
    assert_null(ttrace_links_here(&t, &cl));
    ttrace_rpc_lanes(&t, &cl);
    assert_int_equal(t.nrpc_lanes, 0);
    ttrace_free(&t);
    trace_flags own = {.on = true};
    assert_int_equal(ttrace_init(&t, NULL, &own, 2, false, err, sizeof err), 0);
    trace_node *n = t.node;
    assert_ptr_equal(ttrace_links_here(&t, &cl), t.compute);
    assert_ptr_equal(cl.trace, t.compute);
    assert_int_equal(cl.trace_trainer, 2);
    assert_false(t.comm_taken); /* a hook's client may still have the comm ring */
    ttrace_bucket_lanes(&t, 1);
    ttrace_rpc_lanes(&t, &cl);
    assert_string_equal(trace_lane_name(n, ttrace_rpc_lane(&t, 0)), "rpc server 200");
    assert_string_equal(trace_lane_name(n, ttrace_rpc_lane(&t, 14)), "rpc server 214");
    assert_string_equal(trace_lane_name(n, ttrace_rpc_lane(&t, 15)), "rpc servers 15+");
    assert_int_equal(ttrace_rpc_lane(&t, 19), ttrace_rpc_lane(&t, 15));
    size_t lanes = trace_lane_count(n);
    assert_int_equal(lanes, 1 + 1 + 3 * TTRACE_LINK_LANES);
    assert_true(lanes <= TRACE_LANES_MAX);
    ttrace_rpc_lanes(&t, &cl); /* again: no new lane */
    assert_int_equal(trace_lane_count(n), lanes);
    ttrace_free(&t);
}

/* The `trace` messages on the other end of the link: each's `final`. */
static size_t read_parts(int fd, bool *final, size_t max, size_t *spans)
{
    uint8_t *buf = malloc(1 << 20);
    assert_non_null(buf);
    ssize_t len = recv(fd, buf, 1 << 20, MSG_DONTWAIT);
    size_t off = 0, n = 0;
    *spans = 0;
    frame_decoder d;
    frame_decoder_init(&d, CTL_MAX_BODY);
    while (len > 0 && off < (size_t)len && n < max) {
        ctl_msg m;
        size_t used;
        assert_int_equal(ctl_decode(&d, buf + off, (size_t)len - off, &m, &used), FRAME_OK);
        assert_string_equal(m.type, "trace");
        final[n++] = json_is_true(json_object_get(m.body, "final"));
        *spans += json_array_size(json_object_get(json_object_get(m.body, "dump"), "events"));
        ctl_msg_clear(&m);
        off += used;
    }
    frame_decoder_free(&d);
    free(buf);
    return n;
}

static void test_ship(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ctl_conn c;
    memset(&c, 0, sizeof c);
    c.fd = sv[0];
    ttrace t;
    char err[256];
    trace_flags own = {.on = true};
    assert_int_equal(ttrace_init(&t, NULL, &own, 0, false, err, sizeof err), 0);
    bool final[8];
    size_t spans;
    ttrace_ship(&t, &c, false); /* nothing new: nothing sent */
    assert_int_equal(read_parts(sv[1], final, 8, &spans), 0);
    ttrace_pass(&t, true);
    trace_ring_step(t.compute, ttrace_step_of(&t, 0));
    trace_add(t.compute, TRACE_FORWARD, t.lane_compute, 10, 20, trace_ids_make(0, -1, 0, -1));
    ttrace_ship(&t, &c, false);
    assert_int_equal(read_parts(sv[1], final, 8, &spans), 1);
    assert_false(final[0]);
    assert_int_equal(spans, 1);
    trace_add(t.compute, TRACE_STEP, t.lane_compute, 10, 30, trace_ids_make(0, -1, 0, -1));
    ttrace_ship(&t, &c, true);
    assert_int_equal(read_parts(sv[1], final, 8, &spans), 1);
    assert_true(final[0]);
    assert_int_equal(spans, 1);
    /* After the final part nothing more goes, final or not. */
    trace_add(t.compute, TRACE_OPTIMIZER, t.lane_compute, 30, 40, trace_ids_make(0, -1, 0, -1));
    ttrace_ship(&t, &c, false);
    ttrace_ship(&t, &c, true);
    assert_int_equal(read_parts(sv[1], final, 8, &spans), 0);
    ttrace_free(&t);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_and_on), cmocka_unit_test(test_warmup_never_traced),
        cmocka_unit_test(test_lanes),      cmocka_unit_test(test_links_here_and_calls),
        cmocka_unit_test(test_ship),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
