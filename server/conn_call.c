/* conn_call.c — `lookup` and `update` (kind embedding) on a trainer
 * connection: a call's payload is small, buffered whole (c->call) and then
 * handed to the kind, whose answer comes back through the call's `done`,
 * in the connection's order. Calls in flight are bounded per connection
 * (conn_calls_throttle): past the bound the connection is not read.
 */
#include "server/conn_int.h"
#include "server/members.h"
#include "server/server.h"
#include "shared/log.h"
#include "shared/clock.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Calls handed to the kind and not yet done are bounded per connection:
 * on a device that completes later (a GPU), a trainer that sends calls
 * faster than they complete would otherwise make the server hold every
 * payload. Past CONN_MAX_CALLS calls or --max-queued bytes of them, the
 * connection is not read until calls complete — they always do, so this
 * waits, it never deadlocks; a psbench trainer has two at most (an update,
 * then the next lookup, whose rows it waits for). */
#define CONN_MAX_CALLS 64u

static bool conn_calls_over(const conn *c)
{
    return c->ncalls >= CONN_MAX_CALLS || c->calls_bytes >= c->srv->cfg.max_queued;
}

static void conn_calls_throttle(conn *c)
{
    if (c->calls_held || c->fd < 0 || c->closing || !conn_calls_over(c))
        return;
    c->calls_held = true;
    event_del(c->rev);
    log_debug("%s: %u calls (%" PRIu64 " bytes) in flight: not reading until they complete", c->peer, c->ncalls,
              c->calls_bytes);
}

/* kc leaves c's calls in flight (done, or refused). */
static void conn_calls_untrack(conn *c, const kind_call *kc)
{
    assert(c->ncalls > 0);
    c->ncalls--;
    c->calls_bytes -= kc->payload ? kc->payload->len : 0;
    if (c->calls_held && !conn_calls_over(c)) {
        c->calls_held = false;
        if (c->fd < 0 || c->closing)
            return;
        /* Frames already in the input buffer wait for no socket event:
         * the read callback takes them first (from the loop, not from
         * inside this completion). While the kind fills, conn_hold
         * releases the connection later. */
        c->calls_resume = true;
        if (c->srv->filling)
            return;
        if (event_add(c->rev, NULL) < 0)
            conn_close(c, "cannot watch the connection");
        else
            event_active(c->rev, EV_READ, 0);
    }
}

/* The kind has applied a call (on the reactor thread, in call order): a
 * lookup is answered with its rows. A call whose connection closed meanwhile
 * is only freed. */
static void conn_call_done(kind_call *kc)
{
    conn *c = kc->owner;
    /* Its fold: handed to the kind until now (a call whose connection
     * closed ends its NVTX range only). */
    strace_mark fold = {kc->trace_t0_ns, kc->trace_nvtx};
    if (c && !kc->error)
        strace_end(&c->srv->trace, &fold, TRACE_FOLD, c->srv->trace.lane_reactor, kc->batch, STRACE_NONE, c->rank);
    else
        strace_drop(&fold);
    if (c) {
        assert(c->calls_head == kc); /* the device completes in submission order */
        c->calls_head = kc->next;
        if (!c->calls_head)
            c->calls_tail = NULL;
        conn_calls_untrack(c, kc);
    }
    if (c && kc->error) {
        /* The device failed the call: the trainer is told, lookup or
         * update alike, and the connection stays. */
        frame_hdr about = {0};
        about.batch = kc->batch;
        about.has = FH_BATCH;
        conn_send_error(c, ERR_DEVICE, kc->error, &about);
    } else if (c && !kc->update) {
        frame_hdr h = {0};
        h.type = FT_ROWS;
        h.batch = kc->batch;
        h.bags = kc->bags;
        h.cols = kc->cols;
        h.dtype = frame_str_c("f32");
        h.payload = kc->answer ? kc->answer->len : 0;
        h.has = FH_BATCH | FH_BAGS | FH_COLS | FH_DTYPE | FH_PAYLOAD;
        uint8_t buf[128];
        size_t n = frame_encode_header(&h, buf, sizeof buf);
        assert(n > 0);
        /* Copied, never lent: this trainer pushes no later batch that
         * would give a lent buffer back. */
        if (!c->closing && !conn_over_cap(c, "rows") &&
            outq_push_copy(&c->out, buf, n, kc->answer && kc->answer->len ? kc->answer : NULL) == 0) {
            c->srv->results++;
            conn_trace_queued(c, kc->batch, STRACE_NONE);
            call_count_add(&c->srv->calls[CALLS_ROWS], n, h.payload);
            conn_want_flush(c);
        }
    } else if (c && kc->confirm) {
        /* An update that asked for it: applied (its job completed). */
        frame_hdr h = {0};
        h.type = FT_UPDATED;
        h.batch = kc->batch;
        h.has = FH_BATCH;
        uint8_t buf[64];
        size_t n = frame_encode_header(&h, buf, sizeof buf);
        assert(n > 0);
        if (!c->closing && !conn_over_cap(c, "updated") && outq_push(&c->out, buf, n, NULL, 0) == 0) {
            conn_trace_queued(c, kc->batch, STRACE_NONE);
            call_count_add(&c->srv->calls[CALLS_UPDATED], n, 0);
            conn_want_flush(c);
        }
    }
    conn_call_free(kc);
}

/* The call's whole payload is in: hand it to the kind. */
void conn_call_finish(conn *c)
{
    server *s = c->srv;
    kind_call *kc = c->call;
    c->call = NULL;
    c->sink = SINK_DISCARD;
    kc->t_ns = clock_now_ns();
    /* Its payload is in: push_recv ends; the kind's work is its fold. */
    strace *t = &s->trace;
    strace_end(t, &c->tr_recv, TRACE_PUSH_RECV, t->lane_reactor, c->tr_batch, STRACE_NONE, c->rank);
    strace_mark fold = strace_begin(t, TRACE_FOLD, kc->batch, STRACE_NONE, c->rank);
    kc->trace_t0_ns = fold.t0_ns;
    kc->trace_nvtx = fold.nvtx;
    kc->done = conn_call_done;
    kc->owner = c;
    /* In the list before the kind sees it: the cpu device calls done
     * before lookup/update return. */
    kc->next = NULL;
    kind_call *prev_tail = c->calls_tail;
    if (prev_tail)
        prev_tail->next = kc;
    else
        c->calls_head = kc;
    c->calls_tail = kc;
    c->ncalls++;
    c->calls_bytes += kc->payload ? kc->payload->len : 0;
    char msg[256];
    bool update = kc->update; /* kc may be gone once the kind has it (done ran inline) */
    frame_errcode code = update ? s->kind->ops->update(s->kind, kc, msg, sizeof msg)
                                : s->kind->ops->lookup(s->kind, kc, msg, sizeof msg);
    if (code == ERR_NONE) {
        if (update)
            s->updates++;
        else
            s->lookups++;
        conn_calls_throttle(c);
        return;
    }
    /* Refused: done will never run; take it off the list again (it is the
     * tail: nothing was added since). */
    assert(c->calls_tail == kc);
    strace_drop(&fold);
    c->calls_tail = prev_tail;
    if (prev_tail)
        prev_tail->next = NULL;
    else
        c->calls_head = NULL;
    conn_calls_untrack(c, kc);
    frame_hdr about = {0};
    about.batch = kc->batch;
    about.has = FH_BATCH;
    conn_send_error(c, code, msg, &about);
    conn_call_free(kc);
}

/* Check the fields of a lookup/update header. ERR_NONE, or the code to
 * answer with and a message in msg. */
static frame_errcode conn_check_call(conn *c, const frame_hdr *h, bool update, char *msg, size_t len)
{
    const char *what = update ? "update" : "lookup";
    if (!(update ? c->srv->kind->ops->update : c->srv->kind->ops->lookup)) {
        snprintf(msg, len, "a %s server takes no %s (kind embedding does)", c->srv->kind->ops->name, what);
        return ERR_UNSUPPORTED;
    }
    const uint32_t need = FH_BATCH | FH_NNZ | FH_BAGS | (update ? FH_COLS : 0);
    char missing[96];
    if (frame_missing(h->has, need, missing, sizeof missing)) {
        snprintf(msg, len, "%s (missing: %s)",
                 update ? "update needs batch, nnz, bags and cols" : "lookup needs batch, nnz and bags", missing);
        return ERR_BAD_FRAME;
    }
    if ((h->has & FH_DTYPE) && !frame_str_eq(h->dtype, "f32")) {
        snprintf(msg, len, "dtype '%.*s' is not supported (only f32)", (int)(h->dtype.n > 32 ? 32 : h->dtype.n),
                 h->dtype.p);
        return ERR_UNSUPPORTED;
    }
    /* An update's optional `confirm` and `grad` (a lookup ignores them). */
    if (update && (h->has & FH_CONFIRM) && h->confirm > 1) {
        snprintf(msg, len, "update: confirm %" PRIu64 " is not supported (0 or 1)", h->confirm);
        return ERR_UNSUPPORTED;
    }
    if (update && (h->has & FH_GRAD) && !frame_str_eq(h->grad, "sparse") && !frame_str_eq(h->grad, "dense")) {
        snprintf(msg, len, "update: grad '%.*s' is not supported (sparse or dense)",
                 (int)(h->grad.n > 32 ? 32 : h->grad.n), h->grad.p);
        return ERR_UNSUPPORTED;
    }
    /* The payload's size must follow from the header (the kind checks cols
     * against its table). */
    uint64_t want = UINT64_MAX;
    if (h->nnz <= UINT64_MAX / 16 && h->bags <= UINT64_MAX / 16) {
        want = 8 * (h->nnz + h->bags);
        if (update && h->cols && h->bags > (UINT64_MAX - want) / 4 / h->cols)
            want = UINT64_MAX;
        else if (update)
            want += 4 * h->bags * h->cols;
    }
    if (want != h->payload) {
        if (want == UINT64_MAX)
            snprintf(msg, len, "%s: nnz %" PRIu64 " and bags %" PRIu64 " are too large", what, h->nnz, h->bags);
        else
            snprintf(msg, len, "%s payload is %" PRIu64 " bytes but nnz, bags%s need %" PRIu64, what, h->payload,
                     update ? " and cols" : "", want);
        return ERR_SHAPE_MISMATCH;
    }
    return ERR_NONE;
}

/* `lookup` and `update`: the payload is buffered whole (c->call), then
 * handed to the kind (conn_call_finish). */
void conn_on_call(conn *c, const frame_hdr *h)
{
    bool update = h->type == FT_UPDATE;
    char msg[256];
    call_count_add(&c->srv->calls[update ? CALLS_UPDATE : CALLS_LOOKUP], c->hlen, h->payload);
    if (!c->hello_done) {
        conn_send_error(c, ERR_BAD_FRAME, update ? "update before hello" : "lookup before hello", h);
        return;
    }
    /* The call's frame in is the embedding kind's push_recv. */
    conn_trace_forget(c);
    c->tr_batch = h->batch;
    if (h->has & FH_BATCH)
        c->tr_recv = strace_begin(&c->srv->trace, TRACE_PUSH_RECV, c->tr_batch, STRACE_NONE, c->rank);
    frame_errcode code = conn_check_call(c, h, update, msg, sizeof msg);
    if (code != ERR_NONE) {
        conn_trace_forget(c);
        conn_send_error(c, code, msg, h);
        if (!c->closing)
            conn_skip_payload(c);
        return;
    }
    assert(!c->call);
    kind_call *kc = calloc(1, sizeof *kc);
    psbuf *payload = h->payload ? bufpool_get(&c->srv->pool, h->payload) : NULL;
    if (!kc || (h->payload && !payload)) {
        free(kc);
        if (payload)
            psbuf_unref(payload);
        conn_trace_forget(c);
        conn_send_error(c, ERR_TOO_LARGE, "server out of memory", h);
        return;
    }
    kc->update = update;
    kc->batch = h->batch;
    kc->nnz = h->nnz;
    kc->bags = h->bags;
    kc->cols = update ? h->cols : 0;
    kc->dense = update && (h->has & FH_GRAD) && frame_str_eq(h->grad, "dense");
    kc->confirm = update && (h->has & FH_CONFIRM) && h->confirm == 1;
    kc->payload = payload;
    c->call = kc;
    c->sink = SINK_CALL;
    if (!h->payload)
        conn_call_finish(c);
}
