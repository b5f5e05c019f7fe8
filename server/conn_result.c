/* conn_result.c — every frame that carries parameters to a trainer: the
 * futures' outcomes (`result`, or the error that fails a future: members.c
 * hands them the connections), and `fetch`'s `params`. A result's header
 * is encoded once for all its connections, its payload queued by
 * reference — on the socket, or lent to a trainer that reads it in place.
 */
#include "server/conn_int.h"
#include "server/members.h"
#include "server/server.h"
#include "server/xport.h"
#include "shared/log.h"

#include <assert.h>
#include <stdio.h>

/* The transport that lends answer a to c, the most specific first
 * (xport_all): NULL when c reads it on the socket. *hdr, *len: the header
 * that names the payload where c reads it. */
static const xport_ops *conn_result_lender(conn *c, xport_answer *a, bool on_gpu, const uint8_t **hdr, size_t *len)
{
    for (size_t i = xport_count; i-- > 0;) {
        const xport_ops *x = xport_all[i];
        if (x->lend && (*hdr = x->lend(c, a, on_gpu, len)) != NULL)
            return x;
    }
    return NULL;
}

/* Queue answer a to c: the header bytes are copied, the payload added by
 * reference. A connection that reads it in place — in GPU memory, when
 * its push came from its own (on_gpu: it takes the mean device to device
 * into the same bucket), or in the server's segment — gets that header
 * (the payload named by offset), and the payload stays lent until it
 * pushes a later batch than `batch`. */
static int conn_queue_result(conn *c, xport_answer *a, uint64_t batch, bool on_gpu)
{
    if (c->closing || conn_over_cap(c, "results"))
        return -1;
    psbuf *payload = a->payload;
    const uint8_t *lent = NULL;
    size_t lent_len = 0;
    const xport_ops *x = conn_result_lender(c, a, on_gpu, &lent, &lent_len);
    /* A result kept on the device only (every pusher reads it there):
     * only a CUDA IPC link can have pushed into it. */
    assert(!payload || !payload->twin_only || (x && x->place == XPORT_DEVICE));
    if (lent) {
        /* Within --max-queued of loans; a twin-only result is lent
         * whatever the loans (it has nothing to send on the socket; its
         * memory is the device's share, bounded by --gpu-share). */
        uint64_t cap = payload->twin_only ? UINT64_MAX : c->srv->cfg.max_queued;
        int r = outq_push_shared(&c->out, lent, lent_len, payload, batch, cap);
        if (r < 0)
            return -1;
        if (r == 0) {
            c->srv->bytes_out += payload->len;
            x->lent(c->srv, payload->len);
            conn_want_flush(c);
            return 0;
        }
        /* past the loans' cap: sent on the socket like any other */
    }
    if (!a->len[XPORT_INLINE]) {
        a->len[XPORT_INLINE] = frame_encode_header(a->h, a->buf[XPORT_INLINE], sizeof a->buf[XPORT_INLINE]);
        assert(a->len[XPORT_INLINE] > 0);
    }
    if (outq_push(&c->out, a->buf[XPORT_INLINE], a->len[XPORT_INLINE], payload && payload->len ? payload : NULL,
                  batch) < 0)
        return -1;
    conn_want_flush(c);
    return 0;
}

/* `fetch` (batch-update): the current parameters of this server's part. */
void conn_on_fetch(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    if (h->payload) {
        conn_send_error(c, ERR_BAD_FRAME, "fetch carries no payload", h);
        return;
    }
    if (!s->kind->ops->fetch) {
        char msg[96];
        snprintf(msg, sizeof msg, "a %s server has no parameters to fetch", s->kind->ops->name);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    frame_hdr out = {0};
    out.type = FT_PARAMS;
    psbuf *payload = NULL;
    if (s->kind->ops->fetch(s->kind, &out, &payload) < 0) {
        conn_send_error(c, ERR_TOO_LARGE, "server out of memory", h);
        return;
    }
    out.payload = payload->len;
    out.has |= FH_PAYLOAD;
    xport_answer a;
    xport_answer_init(&a, &out, payload);
    /* Tagged batch 0: if it is spliced or read in place, the loan ends at
     * the trainer's first push of a later batch. The kind never writes
     * this buffer again (each step answers with a new one), so a loan is
     * safe either way. */
    conn_queue_result(c, &a, 0, false);
    psbuf_unref(payload);
}

void conn_deliver_fail(void *ctx, void *const *eps, uint32_t n, const future *f, frame_errcode code,
                       const char *msg)
{
    (void)ctx;
    frame_hdr about = {0};
    about.batch = f->batch;
    about.bucket = f->bucket;
    about.has = FH_BATCH | FH_BUCKET;
    for (uint32_t i = 0; i < n; i++)
        conn_send_error(eps[i], code, msg, &about);
}

/* One header for every pusher, encoded once; the payload shared by
 * reference. */
void conn_deliver_answer(void *ctx, void *const *eps, uint32_t n, const future *f, psbuf *result)
{
    server *s = ctx;
    frame_hdr h = {0};
    h.type = FT_RESULT;
    h.batch = f->batch;
    h.bucket = f->bucket;
    h.dtype = frame_str_c(frame_dtype_name(f->dtype)); /* the pushes' type: narrow pushes, a narrow mean */
    h.layout = f->layout;
    h.layout_str = frame_str_c(f->layout == LAYOUT_DENSE ? "dense" : "sparse");
    h.payload = result->len;
    h.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_PAYLOAD;
    if (f->layout == LAYOUT_DENSE) {
        h.count = f->count;
        h.has |= FH_COUNT;
    } else {
        h.rows = f->rows;
        h.cols = f->cols;
        h.nnz = result->len / (8 + 4 * f->cols);
        h.has |= FH_ROWS | FH_COLS | FH_NNZ;
    }
    if (f->round) {
        h.round = f->round;
        h.has |= FH_ROUND;
    }
    xport_answer a;
    xport_answer_init(&a, &h, result);
    for (uint32_t i = 0; i < n; i++)
        if (conn_queue_result(eps[i], &a, f->batch, pending_gpu_slot(f, ((conn *)eps[i])->slot)) == 0) {
            s->results++;
            conn_trace_queued(eps[i], f->batch, f->bucket);
        }
    if (result && result->twin_only)
        s->results_gpu_only++;
}
