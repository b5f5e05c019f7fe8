/* xport_ipc.c — CUDA IPC on one GPU (docs/protocol.md, "CUDA IPC on one
 * GPU"), over a shared-memory link: the welcome offers it (`gpu`), the
 * trainer's `export` hands over its GPU memory and event, its pushes name
 * their payload there (`dev`) and are folded on the GPU from its memory,
 * and results that lie in the device's shared memory are lent to it by
 * offset.
 *
 * One exchange of handles per connection (the trainer's exported memory
 * and event, opened by the device once — opening is expensive — and the
 * server's shared memory in return). Every offset a trainer names is
 * checked against what it exported before the device touches a byte,
 * exactly as `at` is against a segment; anything the trainer gets wrong
 * about the exchange itself is refused with `unsupported`, and the
 * trainer goes on over pinned memory.
 */
#include "server/conn_int.h"
#include "server/device.h"
#include "server/server.h"
#include "server/xport.h"
#include "server/xport_ipc.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "shared/text.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Whether a welcome offers CUDA IPC (`gpu`): a shared-memory link (shm), a
 * device with peers, a kind that takes pushes from them, --gpu-share > 0. */
static bool xport_ipc_offer(const server *s, bool shm)
{
    return shm && device_has_peers(s->dev) && s->kind->ops->push_peer && s->cfg.gpu_share > 0;
}

frame_errcode xport_ipc_export(server *s, xport_ipc_state *x, bool shm, const char *who, uint64_t rank,
                               const frame_hdr *h, uint8_t *reply, size_t cap, size_t *rlen, char *msg, size_t len)
{
    char why[400];
    if (!shm) {
        snprintf(msg, len, "export on a TCP connection (CUDA IPC runs over shared memory only)");
        return ERR_BAD_FRAME;
    }
    if (h->payload) {
        snprintf(msg, len, "export carries no payload");
        return ERR_BAD_FRAME;
    }
    if (!x->offered) {
        snprintf(msg, len, "this server offered no CUDA IPC (its device is %s%s)", s->dev->ops->name,
                 s->cfg.gpu_share ? "" : ", --gpu-share 0");
        return ERR_UNSUPPORTED;
    }
    if (x->peer) {
        snprintf(msg, len, "export already done on this connection");
        return ERR_UNSUPPORTED;
    }
    char missing[64];
    if (frame_missing(h->has, FH_GPU | FH_SEGMENT | FH_IPC, missing, sizeof missing)) {
        snprintf(msg, len, "export needs gpu, segment and ipc (missing: %s)", missing);
        return ERR_UNSUPPORTED;
    }
    const char *mine = device_gpu_id(s->dev);
    if (!frame_str_eq(h->gpu, mine)) {
        snprintf(msg, len, "export names GPU %.*s; this server computes on %s", (int)(h->gpu.n > 64 ? 64 : h->gpu.n),
                 h->gpu.p, mine);
        return ERR_UNSUPPORTED;
    }
    uint8_t mem[DEVICE_IPC_HANDLE], ev[DEVICE_IPC_HANDLE];
    if (h->ipc.n != 4 * DEVICE_IPC_HANDLE || text_unhex(h->ipc.p, DEVICE_IPC_HANDLE, mem) < 0 ||
        text_unhex(h->ipc.p + 2 * DEVICE_IPC_HANDLE, DEVICE_IPC_HANDLE, ev) < 0) {
        snprintf(msg, len, "export's ipc must be %u hex digits (a memory handle, then an event handle)",
                 4 * DEVICE_IPC_HANDLE);
        return ERR_UNSUPPORTED;
    }
    if (h->segment == 0 || h->segment > s->cfg.max_shm) {
        snprintf(msg, len, "export of %" PRIu64 " bytes of GPU memory: a trainer may export 1 to %" PRIu64
                 " (--max-shm)", h->segment, s->cfg.max_shm);
        return ERR_UNSUPPORTED;
    }
    uint64_t t0 = clock_now_ns(); /* cudaIpcOpenMemHandle: milliseconds, once per connection */
    devpeer *peer = device_peer_open(s->dev, mem, h->segment, ev, why, sizeof why);
    uint64_t open_ns = clock_now_ns() - t0;
    if (!peer) {
        snprintf(msg, len, "cannot open the trainer's export: %s", why);
        return ERR_UNSUPPORTED;
    }
    uint8_t share[DEVICE_IPC_HANDLE];
    uint64_t share_bytes;
    if (device_share(s->dev, s->cfg.gpu_share, share, &share_bytes, why, sizeof why) < 0) {
        device_peer_close(s->dev, peer);
        snprintf(msg, len, "no GPU memory to share: %s", why);
        return ERR_UNSUPPORTED;
    }
    char hex[2 * DEVICE_IPC_HANDLE + 1];
    text_hex(share, sizeof share, hex);
    frame_hdr a = {0};
    a.type = FT_EXPORT;
    a.gpu = frame_str_c(mine);
    a.segment = share_bytes;
    a.ipc = frame_str_c(hex);
    a.has = FH_GPU | FH_SEGMENT | FH_IPC;
    *rlen = frame_encode_header(&a, reply, cap);
    if (*rlen == 0) {
        device_peer_close(s->dev, peer);
        snprintf(msg, len, "server error: the export reply does not fit");
        return ERR_UNSUPPORTED;
    }
    x->peer = peer;
    x->bytes = h->segment;
    s->ipc_opens++;
    s->ipc_open_ns += open_ns;
    log_debug("%s (rank %" PRIu64 "): CUDA IPC: %" PRIu64 " bytes of its GPU memory opened in %.3f ms, %" PRIu64
              " bytes shared with it", who, rank, h->segment, (double)open_ns / 1e6, share_bytes);
    return ERR_NONE;
}

/* A push naming `dev`: checked against x's export (ERR_BAD_FRAME: the
 * connection closes; ERR_TOO_LARGE), and *hv = h with its payload length,
 * for the checks every push goes through. */
static frame_errcode xport_ipc_check(const xport_ipc_state *x, const frame_hdr *h, uint64_t max_payload,
                                     frame_hdr *hv, char *msg, size_t len)
{
    if (!x->peer) {
        snprintf(msg, len, "push names dev (GPU memory) on a connection without an export");
        return ERR_BAD_FRAME;
    }
    if ((h->has & FH_AT) || h->payload) {
        snprintf(msg, len, "push names dev and also %s", (h->has & FH_AT) ? "at" : "a payload");
        return ERR_BAD_FRAME;
    }
    if (!(h->has & FH_LAYOUT) || h->layout != LAYOUT_DENSE || !(h->has & FH_COUNT)) {
        snprintf(msg, len, "a push by dev is dense, with a count");
        return ERR_BAD_FRAME;
    }
    /* f32, or the narrow type the push names (conn_check_push refuses a
     * type the hello did not announce; its bytes are checked here first) */
    int dt = (h->has & FH_DTYPE) ? frame_dtype_type(h->dtype) : HALF_FP32;
    uint64_t esz = dt < 0 ? 4 : half_type_size((half_type)dt);
    if (h->count > UINT64_MAX / esz || h->count * esz > max_payload) {
        snprintf(msg, len, "push of %" PRIu64 " %s values: more than this server's --max-payload %" PRIu64 " bytes",
                 h->count, dt < 0 ? "f32" : frame_dtype_name(dt), max_payload);
        return ERR_TOO_LARGE;
    }
    uint64_t want = h->count * esz;
    if (h->dev % esz || h->dev > x->bytes || want > x->bytes - h->dev) {
        snprintf(msg, len, "push names bytes %" PRIu64 "..%" PRIu64 " of %" PRIu64 " bytes of exported GPU memory%s",
                 h->dev, h->dev + want, x->bytes,
                 h->dev % esz ? (esz == 4 ? " (not on a float boundary)" : " (not on a 2-byte boundary)") : "");
        return ERR_BAD_FRAME;
    }
    *hv = *h;
    hv->payload = want;
    hv->has |= FH_PAYLOAD;
    return ERR_NONE;
}

/* h as read from the GPU memory the server shares (`dev`, no payload), 0
 * when the result has no bytes there (psbuf.twin). */
static size_t xport_ipc_encode_result(const frame_hdr *h, const psbuf *payload, uint8_t *buf, size_t cap)
{
    if (!payload || !payload->len || !payload->twin)
        return 0;
    frame_hdr hd = *h;
    hd.payload = 0;
    hd.has &= ~(uint32_t)FH_PAYLOAD;
    hd.dev = payload->twin - 1;
    hd.has |= FH_DEV;
    return frame_encode_header(&hd, buf, cap);
}

/* The connection is over: its peer goes back to the device. */
static void xport_ipc_close(server *s, xport_ipc_state *x)
{
    if (!x->peer)
        return;
    device_peer_close(s->dev, x->peer);
    x->peer = NULL;
}

/* Offered only to a trainer that promised to read results before it
 * pushes a later batch (xport_tcp.c says why). */
static void xport_ipc_welcome(conn *c, bool reads_first, frame_hdr *w)
{
    server *s = c->srv;
    c->ipc.offered = reads_first && xport_ipc_offer(s, c->link == &xport_shm);
    if (c->ipc.offered) {
        w->gpu = frame_str_c(device_gpu_id(s->dev));
        w->has |= FH_GPU;
    }
}

/* A push naming `dev`: checked against the trainer's export. */
static frame_errcode xport_ipc_payload(conn *c, const frame_hdr *h, xport_push *p, char *msg, size_t len)
{
    return xport_ipc_check(&c->ipc, h, c->srv->cfg.max_payload, &p->hv, msg, len);
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
        conn_fold_begin(c);
        futures_push_peer(&s->fut, &c->push, c->ipc.peer, p->hv.dev);
        conn_fold_end(c);
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
            xport_ipc_encode_result(a->h, a->payload, a->buf[XPORT_DEVICE], sizeof a->buf[XPORT_DEVICE]);
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
    xport_ipc_close(c->srv, &c->ipc);
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
