/* conn_push.c — a trainer's `push` on its connection: the header's own
 * checks, where the payload is (after the header on the socket, in the
 * trainer's segment: `at`, or in its GPU memory: `dev`), admission by the
 * futures layer, its bytes as they come (conn_push_data: from the reader,
 * conn_dispatch.c, or from the transport that takes the payload where it
 * lies) and the payload's end.
 */
#include "server/conn_int.h"
#include "server/members.h"
#include "server/server.h"
#include "server/xport.h"
#include "shared/clock.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>

/* ---- the trace ---------------------------------------------------------- */

void conn_fold_begin(conn *c)
{
    if (c->tr_recv.t0_ns && !c->tr_fold.t0_ns)
        c->tr_fold = strace_begin(&c->srv->trace, TRACE_FOLD, c->tr_batch, c->tr_bucket, c->rank);
}

void conn_fold_end(conn *c)
{
    if (c->tr_fold.t0_ns)
        c->tr_fold_end_ns = clock_now_ns();
}

/* The push's (or call's) payload is in: its push_recv ends now, its fold
 * where its last chunk's did. */
static void conn_trace_received(conn *c)
{
    strace *t = &c->srv->trace;
    strace_end_at(t, &c->tr_fold, TRACE_FOLD, t->lane_reactor, c->tr_fold_end_ns, c->tr_batch, c->tr_bucket,
                  c->rank);
    strace_end(t, &c->tr_recv, TRACE_PUSH_RECV, t->lane_reactor, c->tr_batch, c->tr_bucket, c->rank);
}

/* ---- the push --------------------------------------------------------------- */

/* The current push was refused half-way (its bytes were invalid): the
 * futures layer forgets it; the rest of its payload is discarded. */
static void conn_push_abort(conn *c)
{
    assert(c->sink == SINK_PUSH);
    conn_trace_forget(c);
    if (c->push.f)
        futures_push_abort(&c->srv->fut, &c->push);
    c->sink = SINK_DISCARD;
}

void conn_push_data(conn *c, const uint8_t *p, size_t n, uint64_t off)
{
    conn_fold_begin(c);
    int rc = c->push.f ? futures_push_data(&c->srv->fut, &c->push, off, p, n) : 0;
    conn_fold_end(c);
    if (rc < 0) {
        frame_hdr about = {0};
        about.batch = c->push.f->batch;
        about.bucket = c->push.f->bucket;
        about.has = FH_BATCH | FH_BUCKET;
        conn_send_error(c, ERR_SHAPE_MISMATCH, c->push.err, &about);
        conn_push_abort(c);
    }
}

void conn_push_forget(conn *c)
{
    assert(!c->push.f); /* the futures layer has let go of every push */
    conn_trace_forget(c);
    if (c->sink == SINK_PUSH)
        c->sink = SINK_DISCARD;
}

void conn_push_finish(conn *c)
{
    c->sink = SINK_DISCARD;
    if (!c->push.f) {
        conn_trace_forget(c);
        return; /* its future failed meanwhile: the bytes were discarded */
    }
    c->srv->pushes++;
    /* Before the futures layer has it: the resolve it may start follows. */
    conn_trace_received(c);
    futures_push_done(&c->srv->fut, &c->push);
}

/* Check the shape fields of a push header (want: the bytes its shape
 * needs, xport_push; announced: the narrow type the connection's hello
 * announced, HALF_FP32 for none). Returns ERR_NONE, or the code to answer
 * with and a message in msg. */
static frame_errcode conn_check_push(const frame_hdr *h, uint64_t want, half_type announced, char *msg, size_t len)
{
    const uint32_t need = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT;
    char missing[96];
    if (frame_missing(h->has, need, missing, sizeof missing)) {
        snprintf(msg, len, "push needs batch, bucket, dtype and layout (missing: %s)", missing);
        return ERR_BAD_FRAME;
    }
    if (h->layout == LAYOUT_DENSE && !(h->has & FH_COUNT)) {
        snprintf(msg, len, "dense push needs count (missing)");
        return ERR_BAD_FRAME;
    }
    if (h->layout == LAYOUT_SPARSE && frame_missing(h->has, FH_ROWS | FH_COLS | FH_NNZ, missing, sizeof missing)) {
        snprintf(msg, len, "sparse push needs rows, cols and nnz (missing: %s)", missing);
        return ERR_BAD_FRAME;
    }
    if (h->layout == LAYOUT_SPARSE && h->cols == 0) {
        snprintf(msg, len, "sparse push with cols = 0");
        return ERR_BAD_FRAME;
    }
    /* f32 always; f16 or bf16 (narrow pushes) only as the hello said. */
    int dt = frame_dtype_type(h->dtype);
    if (dt < 0 || h->dtype.n == 0) {
        snprintf(msg, len, "dtype '%.*s' is not supported (f32; f16 or bf16 where the hello announced it)",
                 (int)(h->dtype.n > 16 ? 16 : h->dtype.n), h->dtype.p);
        return ERR_UNSUPPORTED;
    }
    if (dt != HALF_FP32 && (half_type)dt != announced) {
        if (announced == HALF_FP32)
            snprintf(msg, len, "dtype %s: this connection's hello announced no narrow type (hello dtype %s)",
                     frame_dtype_name(dt), frame_dtype_name(dt));
        else
            snprintf(msg, len, "dtype %s: this connection's hello announced %s", frame_dtype_name(dt),
                     frame_dtype_name(announced));
        return ERR_UNSUPPORTED;
    }
    if (dt != HALF_FP32 && h->layout == LAYOUT_SPARSE) {
        snprintf(msg, len, "dtype %s on a sparse push: sparse pushes are f32", frame_dtype_name(dt));
        return ERR_UNSUPPORTED;
    }
    if (h->layout != LAYOUT_DENSE && h->layout != LAYOUT_SPARSE) {
        snprintf(msg, len, "layout '%.*s' is not supported (dense or sparse)", (int)h->layout_str.n,
                 h->layout_str.p);
        return ERR_UNSUPPORTED;
    }
    /* Only a frame we can interpret can be inconsistent with itself. */
    if (h->layout == LAYOUT_DENSE || h->layout == LAYOUT_SPARSE) {
        if (want != h->payload) {
            snprintf(msg, len, "payload is %" PRIu64 " bytes but the shape needs %" PRIu64, h->payload,
                     want);
            return ERR_BAD_FRAME;
        }
    }
    return ERR_NONE;
}

/* Where push h's payload is, decided once: the transport that holds it
 * (xport_of_push), the bytes its shape needs, and the header as if the
 * payload followed it (p->hv), so that everything after — the shape
 * checks, admission, the kind — is the same for every transport. */
static frame_errcode conn_push_place(conn *c, const frame_hdr *h, xport_push *p, char *msg, size_t len)
{
    p->x = xport_of_push(h);
    p->want = frame_push_payload_size(h);
    p->hv = *h;
    p->bytes = NULL;
    return p->x->payload ? p->x->payload(c, h, p, msg, len) : ERR_NONE;
}

void conn_on_push(conn *c, const frame_hdr *h0)
{
    server *s = c->srv;
    char msg[256];
    if (!c->hello_done) {
        conn_send_error(c, ERR_BAD_FRAME, "push before hello", h0);
        return;
    }
    /* Its push_recv begins with the header (a push without a batch is
     * refused below). */
    conn_trace_forget(c);
    c->tr_batch = h0->batch;
    c->tr_bucket = (h0->has & FH_BUCKET) ? h0->bucket : STRACE_NONE;
    if (h0->has & FH_BATCH)
        c->tr_recv = strace_begin(&s->trace, TRACE_PUSH_RECV, c->tr_batch, c->tr_bucket, c->rank);
    xport_push p;
    frame_errcode code = conn_push_place(c, h0, &p, msg, sizeof msg);
    if (code != ERR_NONE) {
        conn_trace_forget(c);
        conn_send_error(c, code, msg, h0);
        return;
    }
    const frame_hdr *h = &p.hv;
    for (size_t i = 0; i < xport_count; i++)
        if (xport_all[i]->before_push)
            xport_all[i]->before_push(c);
    /* A trainer pushes a batch only once it has read every result of the
     * batches before: the results of those it was lent are free again. */
    if (h->has & FH_BATCH)
        outq_return(&c->out, h->batch);
    code = conn_check_push(h, p.want, c->dtype, msg, sizeof msg);
    if (code == ERR_NONE)
        code = futures_admit(&s->fut, h, c->slot, c->rank, &c->push, msg, sizeof msg);
    if (code != ERR_NONE) {
        conn_trace_forget(c);
        conn_send_error(c, code, msg, h);
        if (!c->closing)
            conn_skip_payload(c);
        return;
    }
    c->sink = SINK_PUSH;
    /* A payload on the socket, large enough, may be received straight
     * into its place; one elsewhere is taken from there at once. */
    c->big_pushes = p.x->place == XPORT_INLINE && h->payload >= CONN_DIRECT_MIN &&
                    c->push.f->dtype == HALF_FP32; /* a narrow payload is widened: never received directly */
    if (p.x->take && h->payload) {
        p.x->take(c, &p);
    } else if (h->payload == 0) {
        conn_push_finish(c); /* sink is SINK_DISCARD again: the reader's
                              * FRAMED_END for it does nothing more */
    }
}
