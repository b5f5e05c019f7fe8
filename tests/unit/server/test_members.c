/* test_members.c — the trainer slots (server/members.c) over the real
 * futures layer and average kind on the cpu device: joins, rejoins and
 * refusals, which endpoints hear an answer or a failure, and the end of a
 * session when the last trainer goes.
 *
 * Endpoints are opaque to members.c; here they are the addresses of a few
 * ints, and the ops record what they were handed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <event2/event.h>
#include <string.h>

#include "server/kinds.h"
#include "server/members.h"
#include "devfixture.h"

typedef struct fixture {
    dev_fixture d; /* the event loop, pool, device, metrics and kind */
    futures fut;
    members mem;
    int ep[4];       /* the endpoints: &ep[i] */
    /* what the ops saw */
    int answers, fails, ends;
    void *seen[4];   /* the endpoints of the last answer or failure */
    uint32_t nseen;
    uint64_t seen_batch;
    size_t seen_len; /* the answer's payload bytes */
    char fail_msg[256];
} fixture;

static void fx_record(fixture *x, void *const *eps, uint32_t n, const future *f)
{
    assert_true(n <= 4);
    x->nseen = n;
    memcpy(x->seen, eps, n * sizeof *eps);
    x->seen_batch = f->batch;
}

static void record_answer(void *ctx, void *const *eps, uint32_t n, const future *f, psbuf *result)
{
    fixture *x = ctx;
    x->answers++;
    fx_record(x, eps, n, f);
    x->seen_len = result->len;
}

static void record_fail(void *ctx, void *const *eps, uint32_t n, const future *f, frame_errcode code,
                    const char *msg)
{
    (void)code;
    fixture *x = ctx;
    x->fails++;
    fx_record(x, eps, n, f);
    snprintf(x->fail_msg, sizeof x->fail_msg, "%s", msg);
}

static void on_session_end(void *ctx)
{
    fixture *x = ctx;
    x->ends++;
    /* The session is over when the owner hears of it: no slot is taken. */
    assert_false(members_any_connected(&x->mem));
    assert_int_equal(x->mem.n, 0);
}

static void mem_open(fixture *x, uint32_t trainers)
{
    memset(x, 0, sizeof *x);
    kind_config kc = {.id = KIND_AVERAGE, .trainers = trainers};
    devfx_open_kind(&x->d, (device_spec){.kind = DEVICE_CPU}, 1 << 20, &kc);
    futures_metrics fm = devfx_futures_metrics(&x->d);
    members_ops ops = {.answer = record_answer, .fail = record_fail, .session_end = on_session_end, .ctx = x};
    assert_int_equal(members_init(&x->mem, trainers, &x->fut, x->d.m, &ops), 0);
    futures_hooks h = {.answer = members_on_answer, .fail = members_on_fail, .ctx = &x->mem};
    assert_int_equal(futures_init(&x->fut, x->d.k, trainers, &h, &fm), 0);
}

static void mem_close(fixture *x)
{
    futures_destroy(&x->fut);
    members_free(&x->mem);
    devfx_close(&x->d);
}

static uint32_t join(fixture *x, int ep, uint64_t rank)
{
    char msg[256];
    return members_join(&x->mem, &x->ep[ep], "peer", rank, msg, sizeof msg);
}

/* A whole dense push of n floats into (batch, bucket 0) from slot. */
static void push(fixture *x, push_ctx *p, uint32_t slot, uint64_t batch, size_t n)
{
    frame_hdr h = {0};
    h.type = FT_PUSH;
    h.batch = batch;
    h.layout = LAYOUT_DENSE;
    h.count = n;
    h.payload = n * 4;
    h.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_COUNT | FH_PAYLOAD;
    char msg[256];
    assert_int_equal(futures_admit(&x->fut, &h, slot, slot, p, msg, sizeof msg), ERR_NONE);
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_true(n <= 8);
    assert_int_equal(futures_push_data(&x->fut, p, 0, (const uint8_t *)v, n * 4), 0);
    futures_push_done(&x->fut, p);
}

static void test_join_rejoin_and_refusals(void **state)
{
    (void)state;
    fixture x;
    mem_open(&x, 2);
    assert_false(members_any_connected(&x.mem));
    assert_int_equal(join(&x, 0, 7), 0);
    assert_int_equal(join(&x, 1, 3), 1);
    assert_true(members_any_connected(&x.mem));
    /* The same rank while it is connected: refused, naming where from. */
    char msg[256];
    assert_int_equal(members_join(&x.mem, &x.ep[2], "10.0.0.9:5", 7, msg, sizeof msg), MEMBERS_NO_SLOT);
    assert_non_null(strstr(msg, "rank 7 is already connected from peer"));
    /* A third rank: every slot is taken. */
    assert_int_equal(members_join(&x.mem, &x.ep[2], "10.0.0.9:5", 5, msg, sizeof msg), MEMBERS_NO_SLOT);
    assert_non_null(strstr(msg, "expects 2 trainers and all of them are taken"));
    /* Rank 7 goes and comes back on another connection: the same slot. */
    members_lost(&x.mem, 0, &x.ep[0]);
    assert_true(x.mem.slots[0].lost);
    assert_int_equal(x.ends, 0); /* rank 3 is still there */
    assert_int_equal(join(&x, 2, 7), 0);
    assert_false(x.mem.slots[0].lost);
    assert_ptr_equal(x.mem.slots[0].ep, &x.ep[2]);
    /* Each trainer's lag metric is named by its rank. */
    assert_non_null(metrics_get(x.d.m, "parameter_server_straggler_metric,trainer_lag_7"));
    mem_close(&x);
}

/* The trainers' lag metrics read in rank order (trainer_lag_0 first),
 * whatever order the trainers join in: the server's table and reports. */
static void test_lag_metrics_in_rank_order(void **state)
{
    (void)state;
    fixture x;
    mem_open(&x, 3);
    assert_int_equal(join(&x, 0, 2), 0);
    assert_int_equal(join(&x, 1, 0), 1);
    assert_int_equal(join(&x, 2, 1), 2);
    size_t first = metrics_size(x.d.m);
    for (size_t i = 0; i < metrics_size(x.d.m); i++)
        if (strstr(metrics_key_at(x.d.m, i), "trainer_lag_") && i < first)
            first = i;
    assert_true(first + 3 <= metrics_size(x.d.m));
    assert_string_equal(metrics_key_at(x.d.m, first), "parameter_server_straggler_metric,trainer_lag_0");
    assert_string_equal(metrics_key_at(x.d.m, first + 1), "parameter_server_straggler_metric,trainer_lag_1");
    assert_string_equal(metrics_key_at(x.d.m, first + 2), "parameter_server_straggler_metric,trainer_lag_2");
    mem_close(&x);
}

static void test_answer_goes_to_connected_pushers(void **state)
{
    (void)state;
    fixture x;
    mem_open(&x, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(join(&x, i, (uint64_t)(10 + i)), (uint32_t)i);
    push_ctx p[3] = {{0}};
    push(&x, &p[0], 0, 4, 8);
    push(&x, &p[1], 1, 4, 8);
    /* Slot 1 pushed and then went: the bucket still completes, and its
     * answer reaches the two that are still there. */
    members_lost(&x.mem, 1, &x.ep[1]);
    assert_int_equal(x.fails, 0);
    push(&x, &p[2], 2, 4, 8);
    assert_int_equal(x.answers, 1); /* the cpu device answers inline */
    assert_int_equal(x.seen_batch, 4);
    assert_int_equal(x.seen_len, 8 * 4);
    assert_int_equal(x.nseen, 2);
    assert_ptr_equal(x.seen[0], &x.ep[0]);
    assert_ptr_equal(x.seen[1], &x.ep[2]);
    for (int i = 0; i < 3; i++)
        push_ctx_free(&p[i]);
    mem_close(&x);
}

static void test_loss_fails_the_pushers_then_session_ends(void **state)
{
    (void)state;
    fixture x;
    mem_open(&x, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(join(&x, i, (uint64_t)(20 + i)), (uint32_t)i);
    push_ctx p[2] = {{0}};
    push(&x, &p[0], 0, 9, 4);
    push(&x, &p[1], 2, 9, 4);
    /* Slot 1 never pushed to (9, 0): the future fails, and the two that
     * pushed into it hear why. */
    members_lost(&x.mem, 1, &x.ep[1]);
    assert_int_equal(x.fails, 1);
    assert_int_equal(x.seen_batch, 9);
    assert_int_equal(x.nseen, 2);
    assert_ptr_equal(x.seen[0], &x.ep[0]);
    assert_ptr_equal(x.seen[1], &x.ep[2]);
    assert_non_null(strstr(x.fail_msg, "rank 21 disconnected before pushing"));
    /* The others go: the session ends once, with the last of them. */
    members_lost(&x.mem, 0, &x.ep[0]);
    assert_int_equal(x.ends, 0);
    members_lost(&x.mem, 2, &x.ep[2]);
    assert_int_equal(x.ends, 1);
    /* A new job: slots from 0 again, and the lost marks are gone (a push
     * opens a future instead of hearing peer_lost). */
    assert_int_equal(join(&x, 3, 99), 0);
    push_ctx q = {0};
    push(&x, &q, 0, 0, 4);
    assert_int_equal(x.fails, 1);
    for (int i = 0; i < 2; i++)
        push_ctx_free(&p[i]);
    push_ctx_free(&q);
    mem_close(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_rejoin_and_refusals),
        cmocka_unit_test(test_lag_metrics_in_rank_order),
        cmocka_unit_test(test_answer_goes_to_connected_pushers),
        cmocka_unit_test(test_loss_fails_the_pushers_then_session_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
