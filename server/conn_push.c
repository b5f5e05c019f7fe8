/* conn_push.c — a trainer's `push` on its connection: the header's own
 * checks, where the payload is (after the header on the socket, in the
 * trainer's segment: `at`, or in its GPU memory: `dev`), admission by the
 * futures layer and the payload's end. Its bytes on the socket are
 * streamed to the futures layer by conn.c's reader (conn_payload).
 */
#include "server/conn_int.h"
#include "server/members.h"
#include "server/server.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>

/* The current push was refused half-way (its bytes were invalid): the
 * futures layer forgets it; the rest of its payload is discarded. */
void conn_push_abort(conn *c)
{
    assert(c->sink == SINK_PUSH);
    if (c->push.f)
        futures_push_abort(&c->srv->fut, &c->push);
    c->sink = SINK_DISCARD;
}

void conn_push_forget(conn *c)
{
    assert(!c->push.f); /* the futures layer has let go of every push */
    if (c->sink == SINK_PUSH)
        c->sink = SINK_DISCARD;
}

void conn_push_finish(conn *c)
{
    c->sink = SINK_DISCARD;
    if (!c->push.f)
        return; /* its future failed meanwhile: the bytes were discarded */
    c->srv->pushes++;
    futures_push_done(&c->srv->fut, &c->push);
}

/* Check the shape fields of a push header. Returns ERR_NONE, or the code
 * to answer with and a message in msg. */
static frame_errcode conn_check_push(const frame_hdr *h, char *msg, size_t len)
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
    if (!frame_str_eq(h->dtype, "f32")) {
        snprintf(msg, len, "dtype '%.*s' is not supported (only f32)", (int)h->dtype.n, h->dtype.p);
        return ERR_UNSUPPORTED;
    }
    if (h->layout != LAYOUT_DENSE && h->layout != LAYOUT_SPARSE) {
        snprintf(msg, len, "layout '%.*s' is not supported (dense or sparse)", (int)h->layout_str.n,
                 h->layout_str.p);
        return ERR_UNSUPPORTED;
    }
    /* Only a frame we can interpret can be inconsistent with itself. */
    if (h->layout == LAYOUT_DENSE || h->layout == LAYOUT_SPARSE) {
        uint64_t want = frame_push_payload_size(h);
        if (want != h->payload) {
            snprintf(msg, len, "payload is %" PRIu64 " bytes but the shape needs %" PRIu64, h->payload,
                     want);
            return ERR_BAD_FRAME;
        }
    }
    return ERR_NONE;
}

/* A push whose payload lies in the trainer's segment (`at`): where its
 * bytes are, checked against the segment before anything reads them. The
 * header is seen as if its payload followed it (hv: `payload` = the
 * shape's bytes), so that everything after — the shape checks, admission,
 * the kind — is TCP's. NULL after an error was sent (a lie about where the
 * bytes are closes the connection: bad_frame). */
static const uint8_t *conn_shm_payload(conn *c, const frame_hdr *h, frame_hdr *hv)
{
    char msg[256];
    *hv = *h;
    if (!c->seg.base) {
        conn_send_error(c, ERR_BAD_FRAME,
                        c->shm ? "push names shared memory (at) but this trainer's hello handed over no segment"
                               : "push names shared memory (at) on a TCP connection",
                        h);
        return NULL;
    }
    if (h->payload) {
        conn_send_error(c, ERR_BAD_FRAME, "push has both a payload and at: one or the other", h);
        return NULL;
    }
    uint64_t want = frame_push_payload_size(h);
    if (want == UINT64_MAX)
        return (const uint8_t *)""; /* conn_check_push names what is wrong with the shape */
    if (want > c->srv->cfg.max_payload) {
        snprintf(msg, sizeof msg, "push of %" PRIu64 " bytes: more than this server's --max-payload %" PRIu64, want,
                 c->srv->cfg.max_payload);
        conn_send_error(c, ERR_TOO_LARGE, msg, h);
        return NULL;
    }
    if (h->at % 4 || !shm_seg_holds(&c->seg, h->at, want)) {
        snprintf(msg, sizeof msg,
                 "push names bytes %" PRIu64 "..%" PRIu64 " of a segment of %" PRIu64 " bytes%s", h->at,
                 h->at + want, c->seg.size, h->at % 4 ? " (not on a float boundary)" : "");
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return NULL;
    }
    hv->payload = want;
    hv->has |= FH_PAYLOAD;
    return c->seg.base + h->at;
}

void conn_on_push(conn *c, const frame_hdr *h0)
{
    server *s = c->srv;
    char msg[256];
    if (!c->hello_done) {
        conn_send_error(c, ERR_BAD_FRAME, "push before hello", h0);
        return;
    }
    frame_hdr hv;
    const frame_hdr *h = h0;
    const uint8_t *shared = NULL; /* the payload, in the trainer's segment */
    bool on_gpu = false;          /* the payload, in the trainer's GPU memory (CUDA IPC) */
    if (h0->has & FH_DEV) {
        frame_errcode code = conn_ipc_push(&c->ipc, h0, s->cfg.max_payload, &hv, msg, sizeof msg);
        if (code != ERR_NONE) {
            conn_send_error(c, code, msg, h0);
            return;
        }
        h = &hv;
        on_gpu = true;
    } else if (h0->has & FH_AT) {
        if (!(shared = conn_shm_payload(c, h0, &hv)))
            return;
        h = &hv;
    }
    /* The device's later work waits for what the trainer recorded before
     * this push: its gradients written, and its reads of results lent to
     * it done (docs/protocol.md, CUDA IPC). */
    if (c->ipc.peer)
        device_peer_wait(s->dev, c->ipc.peer);
    /* A trainer pushes a batch only once it has read every result of the
     * batches before: the results of those it was lent are free again. */
    if (h->has & FH_BATCH)
        outq_return(&c->out, h->batch);
    frame_errcode code = conn_check_push(h, msg, sizeof msg);
    if (code == ERR_NONE)
        code = futures_admit(&s->fut, h, c->slot, c->rank, &c->push, msg, sizeof msg);
    if (code != ERR_NONE) {
        conn_send_error(c, code, msg, h);
        if (!c->closing)
            conn_skip_payload(c);
        return;
    }
    c->sink = SINK_PUSH;
    c->big_pushes = !shared && !on_gpu && h->payload >= CONN_DIRECT_MIN;
    if (on_gpu && h->payload) {
        /* Folded on the GPU from the trainer's memory. */
        s->bytes_in += h->payload;
        s->pushes_gpu++;
        if (c->push.f) {
            pending_set_gpu_slot(c->push.f, c->slot);
            futures_push_peer(&s->fut, &c->push, c->ipc.peer, h->dev);
        }
        conn_push_finish(c);
    } else if (shared && h->payload) {
        /* Folded straight from the trainer's pages: no socket, no copy
         * into a buffer first. */
        s->bytes_in += h->payload;
        s->pushes_in_place++;
        conn_payload(c, shared, h->payload, 0);
        if (c->sink == SINK_PUSH)
            conn_push_finish(c);
    } else if (h->payload == 0) {
        conn_push_finish(c); /* sink is SINK_DISCARD again: the reader's
                              * FRAMED_END for it does nothing more */
    }
}
