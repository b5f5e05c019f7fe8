/* conn_ipc.c — CUDA IPC on a trainer connection (see conn_ipc.h).
 *
 * What the transport adds to shared memory for a CUDA trainer on the
 * server's GPU: one exchange of handles per connection (the trainer's
 * exported memory and event, opened by the device once — opening is
 * expensive — and the server's shared memory in return), then pushes and
 * results that name bytes in GPU memory by offset. Every offset a trainer
 * names is checked against what it exported before the device touches a
 * byte, exactly as `at` is against a segment; anything the trainer gets
 * wrong about the exchange itself is refused with `unsupported`, and the
 * trainer goes on over pinned memory.
 */
#include "server/conn_ipc.h"
#include "server/device.h"
#include "server/server.h"
#include "shared/log.h"
#include "shared/text.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

bool conn_ipc_offer(const server *s, bool shm)
{
    return shm && device_has_peers(s->dev) && s->kind->ops->push_peer && s->cfg.gpu_share > 0;
}

frame_errcode conn_ipc_export(server *s, conn_ipc *x, bool shm, const char *who, uint64_t rank,
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
    devpeer *peer = device_peer_open(s->dev, mem, h->segment, ev, why, sizeof why);
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
    log_debug("%s (rank %" PRIu64 "): CUDA IPC: %" PRIu64 " bytes of its GPU memory opened, %" PRIu64
              " bytes shared with it", who, rank, h->segment, share_bytes);
    return ERR_NONE;
}

frame_errcode conn_ipc_push(const conn_ipc *x, const frame_hdr *h, uint64_t max_payload, frame_hdr *hv, char *msg,
                            size_t len)
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
    if (h->count > UINT64_MAX / 4 || h->count * 4 > max_payload) {
        snprintf(msg, len, "push of %" PRIu64 " floats: more than this server's --max-payload %" PRIu64 " bytes",
                 h->count, max_payload);
        return ERR_TOO_LARGE;
    }
    uint64_t want = h->count * 4;
    if (h->dev % 4 || h->dev > x->bytes || want > x->bytes - h->dev) {
        snprintf(msg, len, "push names bytes %" PRIu64 "..%" PRIu64 " of %" PRIu64 " bytes of exported GPU memory%s",
                 h->dev, h->dev + want, x->bytes, h->dev % 4 ? " (not on a float boundary)" : "");
        return ERR_BAD_FRAME;
    }
    *hv = *h;
    hv->payload = want;
    hv->has |= FH_PAYLOAD;
    return ERR_NONE;
}

size_t conn_ipc_encode_result(const frame_hdr *h, const psbuf *payload, uint8_t *buf, size_t cap)
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

void conn_ipc_close(server *s, conn_ipc *x)
{
    if (!x->peer)
        return;
    device_peer_close(s->dev, x->peer);
    x->peer = NULL;
}
