/* xport_ipc.c — CUDA IPC on a shared-memory link (xport.h;
 * docs/protocol.md, CUDA IPC): with the server on this trainer's GPU, the
 * trainer exports its gradients' memory and event and opens the server's;
 * dense pushes then name their bytes in the exported memory (`dev`) and
 * dense results are copied device to device from the server's. Everything
 * else travels as over shared memory (xport_shm.c), which this builds on
 * and which knows nothing of it; the handshake reaches the export through
 * this ops table (gpu_offer). */
#include "trainer/client_impl.h"
#include "trainer/xport.h"
#include "shared/clock.h"
#include "shared/shm.h"
#include "shared/text.h"

#include <stdatomic.h>
#include <stdio.h>
#include <sys/uio.h>

/* The welcome offered CUDA IPC (`gpu`) on a shared-memory link, which
 * becomes this one where it goes through; on the same GPU, export the
 * gradients' memory and event and open the server's memory. A refusal, or
 * another GPU, or gradients not in shareable memory, is a note, not an
 * error: the link goes on over pinned memory. 0 (*ipc: opened), or -1
 * with err (the connection failed). */
static int xipc_gpu_offer(client *cl, client_conn *c, const frame_hdr *w, double timeout_s, bool *ipc, char *err,
                          size_t errlen)
{
    *ipc = false;
    const gpushare *g = cl->gpu;
    if (!g) {
        snprintf(c->gpu_note, sizeof c->gpu_note, "this trainer's gradients are not in shareable GPU memory");
        return 0;
    }
    if (!frame_str_eq(w->gpu, g->gpu)) {
        snprintf(c->gpu_note, sizeof c->gpu_note, "the server computes on GPU %.*s, this trainer on %s",
                 (int)(w->gpu.n > 48 ? 48 : w->gpu.n), w->gpu.p, g->gpu);
        return 0;
    }
    char hex[4 * GPUSHARE_HANDLE + 1];
    text_hex(g->mem, GPUSHARE_HANDLE, hex);
    text_hex(g->ev, GPUSHARE_HANDLE, hex + 2 * GPUSHARE_HANDLE);
    frame_hdr h = {0};
    h.type = FT_EXPORT;
    h.gpu = frame_str_c(g->gpu);
    h.segment = g->bytes;
    h.ipc = frame_str_c(hex);
    h.has = FH_GPU | FH_SEGMENT | FH_IPC;
    uint8_t buf[1024];
    size_t n = frame_encode_header(&h, buf, sizeof buf);
    struct iovec iov = {buf, n};
    if (!n || shm_send_fd(c->fd, &iov, 1, -1) != (ssize_t)n) {
        snprintf(err, errlen, "server %s: cannot send export", c->addr);
        return -1;
    }
    frame_hdr a;
    int r = client_read_answer(c, FT_EXPORT, timeout_s, &a, err, errlen);
    if (r < 0)
        return -1;
    if (r == 1) {
        char msg[160];
        text_escape_n(a.message.p, a.message.n > 120 ? 120 : a.message.n, msg, sizeof msg);
        snprintf(c->gpu_note, sizeof c->gpu_note, "the server refused the export: %s", msg);
        return 0;
    }
    unsigned char mem[GPUSHARE_HANDLE];
    char missing[64];
    if (frame_missing(a.has, FH_GPU | FH_SEGMENT | FH_IPC, missing, sizeof missing) || !frame_str_eq(a.gpu, g->gpu) ||
        a.ipc.n != 2 * GPUSHARE_HANDLE || text_unhex(a.ipc.p, GPUSHARE_HANDLE, mem) < 0 || a.segment == 0) {
        snprintf(err, errlen, "server %s: its export answer is not one (gpu, segment, ipc: a %u-byte handle)",
                 c->addr, GPUSHARE_HANDLE);
        return -1;
    }
    char why[300];
    uint64_t t0 = clock_now_ns();
    c->srv_gpu = g->open(g->ctx, mem, a.segment, why, sizeof why);
    c->gpu_open_ms = clock_ms(t0, clock_now_ns());
    if (devmem_is_none(c->srv_gpu)) {
        c->gpu_open_ms = -1;
        /* The server holds our export; we cannot read its results there:
         * a server that sends one ends the link with a clear error. */
        snprintf(err, errlen, "server %s: cannot open its GPU memory: %s", c->addr, why);
        return -1;
    }
    c->srv_gpu_bytes = a.segment;
    *ipc = true;
    return 0;
}

/* A dense push whose bytes lie in the trainer's exported GPU memory is
 * named there (`dev`: f32 in the gradients, or narrow in their shadow):
 * the server folds it from there, after the event the caller recorded
 * (callers name only dense pushes there); any other goes as over shared
 * memory. */
static void xipc_place(client *cl, client_conn *c, frame_hdr *h, const client_src *src, const void **payload)
{
    if (!src->on_dev) {
        xport_shm_place(cl, c, h, src, payload);
        return;
    }
    atomic_fetch_add_explicit(&cl->bytes_out, frame_push_payload_size(h), memory_order_relaxed); /* f32 or narrow */
    h->dev = src->dev;
    h->has = (h->has | FH_DEV) & ~(uint32_t)FH_PAYLOAD;
    h->payload = 0;
    *payload = NULL;
}

/* A dense result whose mean lies in the server's GPU memory (`dev`):
 * where, checked before anything reads it (client_check_dev), begun at
 * the sink as if it had followed and copied device to device. */
static int xipc_read_dev(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    uint64_t want;
    if (client_check_dev(cl, c, h, &want, err, errlen) < 0)
        return -1;
    frame_hdr hv = *h;
    hv.payload = want;
    hv.has |= FH_PAYLOAD;
    hv.has &= ~(uint32_t)FH_DEV;
    if (client_begin(cl, c, &hv, err, errlen) < 0)
        return -1;
    atomic_fetch_add_explicit(&cl->bytes_in, want, memory_order_relaxed);
    return cl->sink.dev(cl->sink.ctx, c->frame, devmem_at(c->srv_gpu, h->dev), want, err, errlen);
}

/* Dense results in the server's GPU memory, the others in its segment. */
static int xipc_read_in_place(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    if (h->has & FH_DEV)
        return xipc_read_dev(cl, c, h, err, errlen);
    return xport_shm_read_at(cl, c, h, err, errlen);
}

/* The server's GPU memory, opened by the export; then what shared memory
 * holds. */
static void xipc_close(client *cl, client_conn *c)
{
    if (!devmem_is_none(c->srv_gpu))
        cl->gpu->close(cl->gpu->ctx, c->srv_gpu);
    c->srv_gpu = devmem_none();
    xport_shm_close(cl, c);
}

static void xipc_describe(const client_conn *c, char *buf, size_t len)
{
    (void)c;
    snprintf(buf, len, "shared memory + CUDA IPC");
}

const xport_ops xport_ipc_ops = {
    .link = "shm",
    .cuda_ipc = true,
    .describe = xipc_describe,
    /* The handshake is over when a link becomes this one, by its offer: */
    .hello_segment = NULL,
    .recv = NULL,
    .welcomed = NULL,
    .gpu_link = false,
    .follow = NULL,
    .gpu_offer = xipc_gpu_offer,
    .place = xipc_place,
    .read_in_place = xipc_read_in_place,
    .close = xipc_close,
};
