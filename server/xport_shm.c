/* xport_shm.c — shared memory on one host (docs/protocol.md, "Shared memory
 * on one host"): a trainer on the server's host says its hello on the Unix
 * socket and hands over its segment (a sealed memfd, mapped read-only into
 * c->shm.seg); its pushes name their payload there by offset (`at`), checked
 * against the segment before anything reads it, and are folded straight
 * from its pages. Results in the server's segment (the pool's arena,
 * handed over with the welcome) are lent by offset to a trainer that reads
 * them in place. A hello on TCP that asks for it is redirected here.
 */
#include "server/conn_int.h"
#include "server/server.h"
#include "server/xport.h"
#include "shared/log.h"
#include "shared/shm.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

/* recvmsg on the Unix socket: a descriptor that comes with the bytes waits
 * in c->rx_fd for the frame that takes it (a hello with a segment). More
 * than one, or any after the hello, is a broken peer: closed with
 * bad_frame (conn_dispatch), never kept. */

/* Whether c came in on the Unix socket (its link is this transport). */
static bool xport_shm_on(const conn *c) { return c->link == &xport_shm; }

static ssize_t xport_shm_recv(conn *c, uint8_t *buf, size_t want)
{
    int fds[4];
    int nfds = 0;
    bool trunc = false;
    ssize_t r = shm_recv_fds(c->fd, buf, want, fds, &nfds, 4, &trunc);
    if (nfds == 0 && !trunc)
        return r;
    for (int i = 0; i < nfds; i++) {
        if (c->rx_fd < 0 && nfds == 1 && !trunc && !c->hello_done)
            c->rx_fd = fds[i];
        else
            close(fds[i]);
    }
    if (trunc || nfds > 1 || c->hello_done) {
        if (c->rx_fd >= 0) {
            close(c->rx_fd);
            c->rx_fd = -1;
        }
        conn_send_error(c, ERR_BAD_FRAME, "descriptors came that no frame takes (one, with the hello, at most)",
                        NULL);
    }
    return r;
}

/* A hello on TCP that asks for shared memory (`link` "shm") from a
 * server that offers it: not a join, but `redirect` naming the Unix
 * socket, the size of the segment results would be read from (so the
 * trainer can tell whether it could map it) and the largest segment this
 * server takes (--max-shm). The trainer connects there if it is on this
 * host, or says hello again here without asking. */
static void xport_shm_redirect(conn *c)
{
    server *s = c->srv;
    frame_hdr a = {0};
    a.type = FT_REDIRECT;
    a.version = FRAME_PROTOCOL_VERSION;
    a.server = s->cfg.rank;
    a.shm = frame_str_c(s->shm_name);
    a.segment = s->arena.seg.size;
    a.segmax = s->cfg.max_shm;
    a.has = FH_VERSION | FH_SERVER | FH_SHM | FH_SEGMENT | FH_SEGMAX;
    uint8_t buf[256];
    size_t n = frame_encode_header(&a, buf, sizeof buf);
    assert(n > 0);
    outq_push(&c->out, buf, n, NULL, 0);
    conn_want_flush(c);
    log_debug("%s asks for shared memory: redirected to @%s", c->peer, s->shm_name);
}

/* A hello over the Unix socket may hand over the trainer's segment (`segment`:
 * its size, the descriptor with the frame): mapped read-only once checked
 * (shared/shm.h: a memfd sealed against shrinking, of at most --max-shm
 * bytes). -1 after the error was sent. */
static int xport_shm_take_segment(conn *c, const frame_hdr *h)
{
    char msg[256], why[200];
    if (!(h->has & FH_SEGMENT)) {
        if (c->rx_fd >= 0) {
            conn_send_error(c, ERR_BAD_FRAME, "a descriptor came with a hello that names no segment", h);
            return -1;
        }
        return 0;
    }
    if (!xport_shm_on(c)) {
        conn_send_error(c, ERR_BAD_FRAME, "hello names a segment on a TCP connection", h);
        return -1;
    }
    if (c->rx_fd < 0) {
        conn_send_error(c, ERR_BAD_FRAME, "hello names a segment but no descriptor came with it", h);
        return -1;
    }
    int fd = c->rx_fd;
    c->rx_fd = -1;
    if (shm_seg_map_peer(&c->shm.seg, fd, c->srv->cfg.max_shm, why, sizeof why) < 0) {
        snprintf(msg, sizeof msg, "%s (--max-shm %" PRIu64 ")", why, c->srv->cfg.max_shm);
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return -1;
    }
    if (c->shm.seg.size != h->segment) {
        snprintf(msg, sizeof msg, "hello says its segment is %" PRIu64 " bytes; it is %" PRIu64, h->segment,
                 c->shm.seg.size);
        shm_seg_close(&c->shm.seg);
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return -1;
    }
    return 0;
}

/* On TCP: a hello that asks for shared memory is redirected, and a server
 * that takes trainers over shared memory only refuses it. On the Unix
 * socket: the segment it hands over, if any. */
static int xport_shm_hello(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    bool asks_shm = (h->has & FH_TRANSPORT) && frame_str_eq(h->transport, "shm");
    if (!xport_shm_on(c) && asks_shm && s->shm_fd >= 0) {
        xport_shm_redirect(c);
        return -1;
    }
    if (!xport_shm_on(c) && s->cfg.transport == PSB_TRANSPORT_SHM) {
        conn_send_error(c, ERR_UNSUPPORTED,
                        "this server takes trainers over shared memory only (--transport shm): run the trainer on "
                        "this host, or the server with --transport auto",
                        h);
        return -1;
    }
    return xport_shm_take_segment(c, h);
}

/* Results are read in place by a trainer on the Unix socket that promised
 * to read them before it pushes a later batch (xport_tcp.c says why), where
 * the server has a segment: the welcome says how large. */
static void xport_shm_welcome(conn *c, bool reads_first, frame_hdr *w)
{
    server *s = c->srv;
    c->shm.in_place = xport_shm_on(c) && reads_first && s->arena.seg.base;
    if (c->shm.in_place) {
        w->segment = s->arena.seg.size;
        w->has |= FH_SEGMENT;
    }
}

/* A welcome that hands over the server's segment: its descriptor rides
 * with the frame's first byte, so it is sent here, at once, rather than
 * through the output queue (which writes with writev). Nothing is queued
 * before a hello is answered but errors; a short frame always fits an
 * empty socket buffer. Where it does not (or errors wait), the welcome
 * goes without the segment and results travel on the socket. */
static bool xport_shm_send_welcome(conn *c, uint8_t *buf, size_t n)
{
    if (!c->shm.in_place)
        return false;
    if (c->out.len == 0) {
        struct iovec iov = {buf, n};
        ssize_t w = shm_send_fd(c->fd, &iov, 1, c->srv->arena.seg.fd);
        if (w == (ssize_t)n) {
            c->srv->bytes_out += n;
            return true;
        }
        if (w > 0) {
            conn_close(c, "the welcome did not fit the socket");
            return true;
        }
    }
    c->shm.in_place = false;
    frame_hdr w = {0};
    w.type = FT_WELCOME;
    w.version = FRAME_PROTOCOL_VERSION;
    w.server = c->srv->cfg.rank;
    w.trainers = c->srv->cfg.trainers;
    w.has = FH_VERSION | FH_SERVER | FH_TRAINERS;
    n = frame_encode_header(&w, buf, 128);
    assert(n > 0);
    outq_push(&c->out, buf, n, NULL, 0);
    return true;
}

/* A push whose payload lies in the trainer's segment (`at`): where its
 * bytes are, checked against the segment before anything reads them. The
 * header is seen as if its payload followed it (p->hv: `payload` = the
 * shape's bytes), so that everything after — the shape checks, admission,
 * the kind — is TCP's. A lie about where the bytes are closes the
 * connection (bad_frame). */
static frame_errcode xport_shm_payload(conn *c, const frame_hdr *h, xport_push *p, char *msg, size_t len)
{
    if (!c->shm.seg.base) {
        snprintf(msg, len, "%s",
                 xport_shm_on(c) ? "push names shared memory (at) but this trainer's hello handed over no segment"
                        : "push names shared memory (at) on a TCP connection");
        return ERR_BAD_FRAME;
    }
    if (h->payload) {
        snprintf(msg, len, "push has both a payload and at: one or the other");
        return ERR_BAD_FRAME;
    }
    uint64_t want = p->want;
    if (want == UINT64_MAX) {
        p->bytes = (const uint8_t *)""; /* conn_check_push names what is wrong with the shape */
        return ERR_NONE;
    }
    if (want > c->srv->cfg.max_payload) {
        snprintf(msg, len, "push of %" PRIu64 " bytes: more than this server's --max-payload %" PRIu64, want,
                 c->srv->cfg.max_payload);
        return ERR_TOO_LARGE;
    }
    /* On its element's boundary: 4 bytes, 2 for a narrow dense push
     * (f16, bf16: docs/protocol.md, "Narrow pushes"). */
    int dt = frame_dtype_type(h->dtype);
    uint64_t align = h->layout == LAYOUT_DENSE && (dt == HALF_FP16 || dt == HALF_BF16) ? 2 : 4;
    if (h->at % align || !shm_seg_holds(&c->shm.seg, h->at, want)) {
        snprintf(msg, len, "push names bytes %" PRIu64 "..%" PRIu64 " of a segment of %" PRIu64 " bytes%s", h->at,
                 h->at + want, c->shm.seg.size,
                 h->at % align ? (align == 4 ? " (not on a float boundary)" : " (not on an element's boundary)") : "");
        return ERR_BAD_FRAME;
    }
    p->hv.payload = want;
    p->hv.has |= FH_PAYLOAD;
    p->bytes = c->shm.seg.base + h->at;
    return ERR_NONE;
}

/* Folded straight from the trainer's pages: no socket, no copy into a
 * buffer first. */
static void xport_shm_take(conn *c, const xport_push *p)
{
    server *s = c->srv;
    s->bytes_in += p->hv.payload;
    s->pushes_in_place++;
    conn_push_data(c, p->bytes, p->hv.payload, 0);
    if (c->sink == SINK_PUSH)
        conn_push_finish(c);
}

/* h as read in place from the server's segment: `at` instead of a payload
 * after the header, for a trainer that reads in place when the payload lies
 * in the segment. */
static const uint8_t *xport_shm_lend(conn *c, xport_answer *a, bool on_gpu, size_t *len)
{
    (void)on_gpu;
    uint64_t at;
    if (!c->shm.in_place || a->absent[XPORT_SEGMENT])
        return NULL;
    if (!a->len[XPORT_SEGMENT]) {
        const psbuf *payload = a->payload;
        if (!payload || !payload->len || !shm_arena_owns(&c->srv->arena, payload->data, payload->len, &at)) {
            a->absent[XPORT_SEGMENT] = true;
            return NULL;
        }
        frame_hdr ha = *a->h;
        ha.payload = 0;
        ha.has &= ~(uint32_t)FH_PAYLOAD;
        ha.at = at;
        ha.has |= FH_AT;
        a->len[XPORT_SEGMENT] = frame_encode_header(&ha, a->buf[XPORT_SEGMENT], sizeof a->buf[XPORT_SEGMENT]);
        if (!a->len[XPORT_SEGMENT]) {
            a->absent[XPORT_SEGMENT] = true;
            return NULL;
        }
    }
    *len = a->len[XPORT_SEGMENT];
    return a->buf[XPORT_SEGMENT];
}

static void xport_shm_lent(server *s, uint64_t n)
{
    s->bytes_in_place += n;
}

/* A descriptor that came and no frame took. */
static void xport_shm_close(conn *c)
{
    if (c->rx_fd >= 0) {
        close(c->rx_fd);
        c->rx_fd = -1;
    }
}

/* Nothing reads the trainer's segment after the close: no push in flight. */
static void xport_shm_free(conn *c)
{
    shm_seg_close(&c->shm.seg);
}

const xport_ops xport_shm = {
    .name = "shm",
    .peer_name = shm_peer_name,
    .recv = xport_shm_recv,
    .place = XPORT_SEGMENT,
    .field = FH_AT,
    .hello = xport_shm_hello,
    .welcome = xport_shm_welcome,
    .send_welcome = xport_shm_send_welcome,
    .payload = xport_shm_payload,
    .take = xport_shm_take,
    .lend = xport_shm_lend,
    .lent = xport_shm_lent,
    .close = xport_shm_close,
    .free = xport_shm_free,
};
