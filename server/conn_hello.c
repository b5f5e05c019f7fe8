/* conn_hello.c — a trainer's `hello` (version, token, role, rank; the
 * transport it asks for: a redirect to the Unix socket, the segment it
 * hands over) answered with `welcome`, and CUDA IPC's `export` after it.
 */
#include "server/conn_int.h"
#include "server/members.h"
#include "server/server.h"
#include "shared/log.h"
#include "server/conn_ipc.h"
#include "shared/shm.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

static void conn_send_welcome_fd(conn *c, uint8_t *buf, size_t n);
static int conn_take_segment(conn *c, const frame_hdr *h);
static void conn_send_redirect(conn *c, const frame_hdr *h);

/* Compare without an early exit, so that timing does not leak the token. */
static bool conn_token_ok(const char *want, frame_str got)
{
    size_t n = strlen(want);
    unsigned diff = (unsigned)(n ^ got.n);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < got.n ? got.p[i] : 0);
    return diff == 0;
}

void conn_on_hello(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    char msg[256];
    if (h->payload) {
        conn_send_error(c, ERR_BAD_FRAME, "hello carries no payload", h);
        return;
    }
    if (c->hello_done) {
        conn_send_error(c, ERR_UNSUPPORTED, "hello already done on this connection", h);
        return;
    }
    /* A field that is missing says so: "version 0" would send the user
     * looking for a peer that speaks protocol 0. */
    if (!(h->has & FH_VERSION)) {
        snprintf(msg, sizeof msg, "hello needs a version (this server speaks protocol %u)", FRAME_PROTOCOL_VERSION);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    if (h->version != FRAME_PROTOCOL_VERSION) {
        snprintf(msg, sizeof msg, "protocol version %" PRIu64 " is not supported (this server speaks %u)",
                 h->version, FRAME_PROTOCOL_VERSION);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    if (s->cfg.token && (!(h->has & FH_TOKEN) || !conn_token_ok(s->cfg.token, h->token))) {
        conn_send_error(c, ERR_AUTH, (h->has & FH_TOKEN) ? "wrong token" : "this server needs a token", h);
        return;
    }
    if (!(h->has & FH_ROLE)) {
        conn_send_error(c, ERR_UNSUPPORTED, "hello needs a role (\"trainer\")", h);
        return;
    }
    if (!frame_str_eq(h->role, "trainer")) {
        conn_send_error(c, ERR_UNSUPPORTED, "only role \"trainer\" may connect to a server", h);
        return;
    }
    if (!(h->has & FH_RANK)) {
        conn_send_error(c, ERR_BAD_FRAME, "hello needs a rank", h);
        return;
    }
    bool asks_shm = (h->has & FH_TRANSPORT) && frame_str_eq(h->transport, "shm");
    if (!c->shm && asks_shm && s->shm_fd >= 0) {
        conn_send_redirect(c, h);
        return;
    }
    if (!c->shm && s->cfg.transport == PSB_TRANSPORT_SHM) {
        conn_send_error(c, ERR_UNSUPPORTED,
                        "this server takes trainers over shared memory only (--transport shm): run the trainer on "
                        "this host, or the server with --transport auto",
                        h);
        return;
    }
    if (conn_take_segment(c, h) < 0)
        return;
    uint32_t slot = members_join(&s->members, c, c->peer, h->rank, msg, sizeof msg);
    if (slot == MEMBERS_NO_SLOT) {
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return;
    }
    c->hello_done = true;
    assert(s->nwaiting > 0);
    s->nwaiting--;
    evtimer_del(c->hello_ev);
    /* Results are lent only to a trainer that promises to read them before
     * it pushes a later batch: the protocol does not otherwise forbid
     * pushing ahead, and such a client would read reused pages. */
    bool reads_first = (h->has & FH_ZEROCOPY) && h->zerocopy == 1;
    if (s->cfg.splice && reads_first && !c->shm)
        outq_splice_on(&c->out, s->cfg.max_queued);
    c->in_place = c->shm && reads_first && s->arena.seg.base;
    c->ipc.offered = reads_first && conn_ipc_offer(s, c->shm);
    c->slot = slot;
    c->rank = h->rank;

    frame_hdr w = {0};
    w.type = FT_WELCOME;
    w.version = FRAME_PROTOCOL_VERSION;
    w.server = s->cfg.rank;
    w.trainers = s->cfg.trainers;
    w.has = FH_VERSION | FH_SERVER | FH_TRAINERS;
    if (c->in_place) {
        w.segment = s->arena.seg.size;
        w.has |= FH_SEGMENT;
    }
    if (c->ipc.offered) {
        w.gpu = frame_str_c(device_gpu_id(s->dev));
        w.has |= FH_GPU;
    }
    uint8_t buf[192];
    size_t n = frame_encode_header(&w, buf, sizeof buf);
    assert(n > 0);
    if (c->in_place)
        conn_send_welcome_fd(c, buf, n);
    else
        outq_push(&c->out, buf, n, NULL, 0);
    conn_want_flush(c);
    log_debug("trainer rank %" PRIu64 " joined from %s (slot %u, %s)", c->rank, c->peer, slot,
              c->shm ? (c->seg.base ? "shared memory" : "Unix socket, payloads inline") : "TCP");
}

/* A welcome that hands over the server's segment: its descriptor rides
 * with the frame's first byte, so it is sent here, at once, rather than
 * through the output queue (which writes with writev). Nothing is queued
 * before a hello is answered but errors; a short frame always fits an
 * empty socket buffer. Where it does not (or errors wait), the welcome
 * goes without the segment and results travel on the socket. */
static void conn_send_welcome_fd(conn *c, uint8_t *buf, size_t n)
{
    if (c->out.len == 0) {
        struct iovec iov = {buf, n};
        ssize_t w = shm_send_fd(c->fd, &iov, 1, c->srv->arena.seg.fd);
        if (w == (ssize_t)n) {
            c->srv->bytes_out += n;
            return;
        }
        if (w > 0) {
            conn_close(c, "the welcome did not fit the socket");
            return;
        }
    }
    c->in_place = false;
    frame_hdr w = {0};
    w.type = FT_WELCOME;
    w.version = FRAME_PROTOCOL_VERSION;
    w.server = c->srv->cfg.rank;
    w.trainers = c->srv->cfg.trainers;
    w.has = FH_VERSION | FH_SERVER | FH_TRAINERS;
    n = frame_encode_header(&w, buf, 128);
    assert(n > 0);
    outq_push(&c->out, buf, n, NULL, 0);
}

/* A hello over the Unix socket may hand over the trainer's segment (`segment`:
 * its size, the descriptor with the frame): mapped read-only once checked
 * (shared/shm.h: a memfd sealed against shrinking, of at most --max-shm
 * bytes). -1 after the error was sent. */
static int conn_take_segment(conn *c, const frame_hdr *h)
{
    char msg[256], why[200];
    if (!(h->has & FH_SEGMENT)) {
        if (c->rx_fd >= 0) {
            conn_send_error(c, ERR_BAD_FRAME, "a descriptor came with a hello that names no segment", h);
            return -1;
        }
        return 0;
    }
    if (!c->shm) {
        conn_send_error(c, ERR_BAD_FRAME, "hello names a segment on a TCP connection", h);
        return -1;
    }
    if (c->rx_fd < 0) {
        conn_send_error(c, ERR_BAD_FRAME, "hello names a segment but no descriptor came with it", h);
        return -1;
    }
    int fd = c->rx_fd;
    c->rx_fd = -1;
    if (shm_seg_map_peer(&c->seg, fd, c->srv->cfg.max_shm, why, sizeof why) < 0) {
        snprintf(msg, sizeof msg, "%s (--max-shm %" PRIu64 ")", why, c->srv->cfg.max_shm);
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return -1;
    }
    if (c->seg.size != h->segment) {
        snprintf(msg, sizeof msg, "hello says its segment is %" PRIu64 " bytes; it is %" PRIu64, h->segment,
                 c->seg.size);
        shm_seg_close(&c->seg);
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return -1;
    }
    return 0;
}

/* A hello on TCP that asks for shared memory (`link` "shm") from a
 * server that offers it: not a join, but `redirect` naming the Unix
 * socket, the size of the segment results would be read from (so the
 * trainer can tell whether it could map it) and the largest segment this
 * server takes (--max-shm). The trainer connects there if it is on this
 * host, or says hello again here without asking. */
static void conn_send_redirect(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    (void)h;
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

/* `export` (CUDA IPC): the trainer's GPU memory and event for the server's
 * shared GPU memory (conn_ipc.c decides). */
void conn_on_export(conn *c, const frame_hdr *h)
{
    char msg[400];
    uint8_t reply[512];
    size_t n = 0;
    frame_errcode code = ERR_BAD_FRAME;
    if (!c->hello_done)
        snprintf(msg, sizeof msg, "export before hello");
    else
        code = conn_ipc_export(c->srv, &c->ipc, c->shm, c->peer, c->rank, h, reply, sizeof reply, &n, msg,
                               sizeof msg);
    if (code != ERR_NONE) {
        conn_send_error(c, code, msg, h);
        conn_skip_payload(c);
        return;
    }
    outq_push(&c->out, reply, n, NULL, 0);
    conn_want_flush(c);
}
