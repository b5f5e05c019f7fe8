/* test_tracejob.c — unit tests for shared/tracejob (issue 42): the
 * assignment's `trace` and a node's own flags made into its conf, a trace
 * shipped in parts as it grows and put back together as the master does
 * (trace_node_snapshot_since, trace_dump_append), and the bodies the
 * master refuses. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/tracejob.h"

static void test_conf_from_assign(void **state)
{
    (void)state;
    char err[256] = "";
    trace_conf c;
    /* No `trace`, no flags: off. */
    json_t *a = json_pack("{s:I}", "rank", (json_int_t)1);
    assert_int_equal(tracejob_conf(a, NULL, TRACE_TRAINER, 1, &c, err, sizeof err), 0);
    assert_false(c.on);
    assert_int_equal(c.rank, 1);
    /* The master's window and buffer. */
    json_object_set_new(a, "trace", tracejob_assign_json((trace_window){5, 9}, 1000));
    assert_int_equal(tracejob_conf(a, NULL, TRACE_SERVER, 2, &c, err, sizeof err), 0);
    assert_true(c.on);
    assert_int_equal(c.role, TRACE_SERVER);
    assert_int_equal(c.window.first, 5);
    assert_int_equal(c.window.last, 9);
    assert_int_equal(c.capacity, 1000);
    /* The node's own flags win where given. */
    trace_flags own = {.on = false, .window_set = true, .window = {7, 8}};
    assert_int_equal(tracejob_conf(a, &own, TRACE_SERVER, 2, &c, err, sizeof err), 0);
    assert_true(c.on);
    assert_int_equal(c.window.first, 7);
    assert_int_equal(c.capacity, 1000);
    own = (trace_flags){.capacity = 3};
    assert_int_equal(tracejob_conf(a, &own, TRACE_SERVER, 2, &c, err, sizeof err), 0);
    assert_int_equal(c.capacity, 3);
    assert_int_equal(c.window.first, 5);
    /* A node traced by hand under a master that does not trace. */
    json_object_del(a, "trace");
    own = (trace_flags){.on = true};
    assert_int_equal(tracejob_conf(a, &own, TRACE_TRAINER, 0, &c, err, sizeof err), 0);
    assert_true(c.on);
    assert_int_equal(c.capacity, TRACEJOB_DEFAULT_BUFFER);
    assert_int_equal(c.window.first, 0);
    assert_int_equal(c.window.last, TRACE_STEP_MAX);
    json_decref(a);
}

static void test_conf_refused(void **state)
{
    (void)state;
    static const char *bad[] = {
        "{\"trace\": 1}",
        "{\"trace\": {\"steps\": [3, 2], \"buffer\": 10}}",
        "{\"trace\": {\"steps\": [-1, 2], \"buffer\": 10}}",
        "{\"trace\": {\"steps\": [1], \"buffer\": 10}}",
        "{\"trace\": {\"steps\": [1, 2]}}",
        "{\"trace\": {\"steps\": [1, 2], \"buffer\": 0}}",
        "{\"trace\": {\"steps\": [1, 2], \"buffer\": 99999999999}}",
        "{\"trace\": {\"steps\": [1, \"2\"], \"buffer\": 10}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *a = json_loads(bad[i], 0, NULL);
        assert_non_null(a);
        char err[256] = "";
        trace_conf c;
        assert_int_equal(tracejob_conf(a, NULL, TRACE_TRAINER, 0, &c, err, sizeof err), -1);
        assert_non_null(strstr(err, "the master sent a bad trace"));
        json_decref(a);
    }
}

/* What a fake control link got: each body kept. */
typedef struct sent {
    json_t *body[64];
    size_t n;
    int fail_at; /* the send that fails (-1: none) */
} sent;

static int send_keep(void *ctx, json_t *body, char *err, size_t errlen)
{
    sent *s = ctx;
    if ((int)s->n == s->fail_at) {
        json_decref(body);
        snprintf(err, errlen, "the link is gone");
        return -1;
    }
    assert_true(s->n < 64);
    s->body[s->n++] = body;
    return 0;
}

static void sent_clear(sent *s)
{
    for (size_t i = 0; i < s->n; i++)
        json_decref(s->body[i]);
    s->n = 0;
}

/* Puts the bodies together as the master does: the dump so far and
 * whether the last body was final. */
static trace_dump *take_all(const sent *s, trace_dump *into, bool *final)
{
    char err[256] = "";
    for (size_t i = 0; i < s->n; i++) {
        trace_dump *d = NULL;
        assert_int_equal(tracejob_take(s->body[i], &d, final, err, sizeof err), 0);
        if (!into)
            into = d;
        else {
            assert_int_equal(trace_dump_append(into, d, err, sizeof err), 0);
            trace_dump_free(d);
        }
    }
    return into;
}

static void test_ship_in_parts(void **state)
{
    (void)state;
    char err[256] = "";
    trace_conf c = {.role = TRACE_TRAINER, .rank = 3, .on = true, .capacity = 200000, .window = TRACE_ALL_STEPS};
    trace_node *n = trace_node_new(&c, err, sizeof err);
    assert_non_null(n);
    unsigned lane = (unsigned)trace_lane(n, "main");
    trace_ring *r = trace_ring_add(n, "main");
    trace_ring_step(r, 0);
    for (uint64_t i = 0; i < 10; i++)
        trace_add(r, TRACE_FORWARD, lane, 100 + i, 105 + i, trace_ids_make((int64_t)i, -1, 3, -1));
    trace_cursor cur = {0};
    sent s = {.fail_at = -1};
    /* Nothing new, not final: nothing sent; the first ten: one part. */
    assert_int_equal(tracejob_ship(n, &cur, false, send_keep, &s, err, sizeof err), 0);
    assert_int_equal(s.n, 1);
    bool final = true;
    trace_dump *all = take_all(&s, NULL, &final);
    assert_false(final);
    assert_int_equal(all->nev, 10);
    sent_clear(&s);
    assert_int_equal(tracejob_ship(n, &cur, false, send_keep, &s, err, sizeof err), 0);
    assert_int_equal(s.n, 0);
    /* A lane added later, and more spans than one part holds. */
    unsigned comm = (unsigned)trace_lane(n, "comm");
    trace_ring *r2 = trace_ring_add(n, "comm");
    trace_ring_step(r2, 1);
    size_t more = TRACEJOB_PART_EVENTS + 7;
    for (size_t i = 0; i < more; i++)
        trace_add(r2, TRACE_FRAME_OUT, comm, 1000 + i, 1001 + i, trace_ids_make(1, (int64_t)i, 3, 0));
    assert_int_equal(tracejob_ship(n, &cur, true, send_keep, &s, err, sizeof err), 0);
    assert_int_equal(s.n, 2);
    assert_false(json_is_true(json_object_get(s.body[0], "final")));
    all = take_all(&s, all, &final);
    assert_true(final);
    assert_int_equal(all->nev, 10 + more);
    assert_int_equal(all->nlanes, 2);
    assert_string_equal(all->lane[1], "comm");
    assert_int_equal(all->ev[10].start_ns, 1000);
    assert_int_equal(all->ev[10 + more - 1].ids.bucket, (int64_t)more - 1);
    sent_clear(&s);
    /* Final with nothing new: one empty part says so. */
    assert_int_equal(tracejob_ship(n, &cur, true, send_keep, &s, err, sizeof err), 0);
    assert_int_equal(s.n, 1);
    assert_true(json_is_true(json_object_get(s.body[0], "final")));
    sent_clear(&s);
    /* A failing link: the error comes back. */
    trace_add(r, TRACE_FORWARD, lane, 5000, 5001, trace_ids_none());
    s.fail_at = 0;
    assert_int_equal(tracejob_ship(n, &cur, true, send_keep, &s, err, sizeof err), -1);
    assert_string_equal(err, "the link is gone");
    /* After a reset (the next run) the cursor starts over. */
    trace_node_reset(n);
    trace_ring_step(r, 0);
    trace_add(r, TRACE_FORWARD, lane, 7000, 7001, trace_ids_none());
    s.fail_at = -1;
    assert_int_equal(tracejob_ship(n, &cur, true, send_keep, &s, err, sizeof err), 0);
    trace_dump *again = take_all(&s, NULL, &final);
    assert_int_equal(again->nev, 1);
    assert_int_equal(again->ev[0].start_ns, 7000);
    sent_clear(&s);
    trace_dump_free(again);
    trace_dump_free(all);
    /* Off or absent: nothing, whatever final says. */
    assert_int_equal(tracejob_ship(NULL, &cur, true, send_keep, &s, err, sizeof err), 0);
    assert_int_equal(s.n, 0);
    trace_node_free(n);
}

static void test_append_refused(void **state)
{
    (void)state;
    char err[256] = "";
    trace_dump *a = trace_dump_empty(TRACE_TRAINER, 0, TRACE_ALL_STEPS, 10);
    trace_dump *b = trace_dump_empty(TRACE_TRAINER, 1, TRACE_ALL_STEPS, 10);
    assert_int_equal(trace_dump_append(a, b, err, sizeof err), -1);
    assert_non_null(strstr(err, "trainer 1"));
    b->rank = 0;
    b->capacity = 11;
    assert_int_equal(trace_dump_append(a, b, err, sizeof err), -1);
    b->capacity = 10;
    strcpy(a->lane[0], "main");
    a->nlanes = 1;
    strcpy(b->lane[0], "comm");
    b->nlanes = 1;
    assert_int_equal(trace_dump_append(a, b, err, sizeof err), -1);
    assert_non_null(strstr(err, "lane 0"));
    b->nlanes = 0;
    assert_int_equal(trace_dump_append(a, b, err, sizeof err), -1);
    strcpy(b->lane[0], "main");
    b->nlanes = 1;
    assert_int_equal(trace_dump_append(a, b, err, sizeof err), 0);
    trace_dump_free(a);
    trace_dump_free(b);
}

static void test_take_refused(void **state)
{
    (void)state;
    static const char *bad[] = {
        "{\"dump\": {}}",
        "{\"final\": 1, \"dump\": {}}",
        "{\"final\": true}",
        "{\"final\": true, \"dump\": []}",
        "{\"final\": true, \"dump\": {\"v\": 1}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *b = json_loads(bad[i], 0, NULL);
        assert_non_null(b);
        char err[256] = "";
        trace_dump *d = (trace_dump *)1;
        bool final;
        assert_int_equal(tracejob_take(b, &d, &final, err, sizeof err), -1);
        assert_null(d);
        assert_true(err[0] != '\0');
        json_decref(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conf_from_assign), cmocka_unit_test(test_conf_refused),
        cmocka_unit_test(test_ship_in_parts),    cmocka_unit_test(test_append_refused),
        cmocka_unit_test(test_take_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
