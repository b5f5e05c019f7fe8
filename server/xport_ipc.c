/* xport_ipc.c — CUDA IPC on one GPU (docs/protocol.md, "CUDA IPC on one
 * GPU"), over a shared-memory link: the welcome offers it (`gpu`), the
 * trainer's `export` hands over its GPU memory and event (conn_ipc.c:
 * the exchange), its pushes name their payload there (`dev`) and are
 * folded on the GPU from its memory, and results that lie in the device's
 * shared memory are lent to it by offset.
 */
#include "server/conn_int.h"
#include "server/conn_ipc.h"
#include "server/server.h"
#include "server/xport.h"

#include <assert.h>

/* Offered only to a trainer that promised to read results before it
 * pushes a later batch (xport_tcp.c says why). */
static void xport_ipc_welcome(conn *c, bool reads_first, frame_hdr *w)
{
    server *s = c->srv;
    c->ipc.offered = reads_first && conn_ipc_offer(s, c->shm);
    if (c->ipc.offered) {
        w->gpu = frame_str_c(device_gpu_id(s->dev));
        w->has |= FH_GPU;
    }
}

/* A push naming `dev`: checked against the trainer's export. */
static frame_errcode xport_ipc_payload(conn *c, const frame_hdr *h, xport_push *p, char *msg, size_t len)
{
    return conn_ipc_push(&c->ipc, h, c->srv->cfg.max_payload, &p->hv, msg, len);
}

/* The device's later work waits for what the trainer recorded before
 * this push: its gradients written, and its reads of results lent to
 * it done (docs/protocol.md, CUDA IPC). */
static void xport_ipc_before_push(conn *c)
{
    if (c->ipc.peer)
        device_peer_wait(c->srv->dev, c->ipc.peer);
}

/* Folded on the GPU from the trainer's memory. */
static void xport_ipc_take(conn *c, const xport_push *p)
{
    server *s = c->srv;
    s->bytes_in += p->hv.payload;
    s->pushes_gpu++;
    if (c->push.f) {
        pending_set_gpu_slot(c->push.f, c->slot);
        futures_push_peer(&s->fut, &c->push, c->ipc.peer, p->hv.dev);
    }
    conn_push_finish(c);
}

/* The result's device twin, named by offset in the GPU memory the device
 * shares, for a connection whose push came from its own GPU memory (it
 * takes the mean device to device into the same bucket). */
static const uint8_t *xport_ipc_lend(conn *c, xport_answer *a, bool on_gpu, size_t *len)
{
    if (!on_gpu || !a->payload || !a->payload->twin)
        return NULL;
    assert(c->ipc.peer);
    if (!a->len[XPORT_DEVICE]) {
        a->len[XPORT_DEVICE] =
            conn_ipc_encode_result(a->h, a->payload, a->buf[XPORT_DEVICE], sizeof a->buf[XPORT_DEVICE]);
        assert(a->len[XPORT_DEVICE] > 0);
    }
    *len = a->len[XPORT_DEVICE];
    return a->buf[XPORT_DEVICE];
}

static void xport_ipc_lent(server *s, uint64_t n)
{
    s->bytes_gpu_lent += n;
}

/* The trainer's peer goes back to the device: unmapped once the device's
 * folds from it are done. */
static void xport_ipc_free(conn *c)
{
    conn_ipc_close(c->srv, &c->ipc);
}

const xport_ops xport_ipc = {
    .name = "ipc",
    .place = XPORT_DEVICE,
    .field = FH_DEV,
    .welcome = xport_ipc_welcome,
    .payload = xport_ipc_payload,
    .before_push = xport_ipc_before_push,
    .take = xport_ipc_take,
    .lend = xport_ipc_lend,
    .lent = xport_ipc_lent,
    .free = xport_ipc_free,
};
