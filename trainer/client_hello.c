/* client_hello.c — a trainer's handshake with one server (see
 * client_impl.h): hello, welcome, the redirect to the server's Unix socket
 * and the offer of CUDA IPC (docs/protocol.md), as explicit states
 * (client_hs); what each transport adds to them is its ops table's
 * (trainer/xport.h), reached through the registry, never by name; its
 * blocking reads are client_io.c's. Blocking: it runs before the
 * connection is handed to client_poll. */
#include "trainer/client_impl.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/uio.h>

/* A server's trainer count: what psbench-server and the master allow. */
#define CLIENT_MAX_TRAINERS 65536u

/* Say hello on c: over the Unix socket with the client's segment; on TCP
 * asking for shared memory when ask_shm. 0, or -1 with err. */
static int client_send_hello(client *cl, client_conn *c, uint64_t rank, const char *token, bool ask_shm, char *err,
                             size_t errlen)
{
    frame_hdr h = {0};
    h.type = FT_HELLO;
    h.version = FRAME_PROTOCOL_VERSION;
    h.role = frame_str_c("trainer");
    h.rank = rank;
    /* This trainer reads every result of a batch before it pushes the next
     * one (the synthetic run and comm_wait both do): the server may lend it
     * results by reference (docs/protocol.md, zero-copy results). */
    h.zerocopy = 1;
    h.has = FH_VERSION | FH_ROLE | FH_RANK | FH_ZEROCOPY;
    if (token) {
        h.token = frame_str_c(token);
        h.has |= FH_TOKEN;
    }
    if (ask_shm) {
        h.transport = frame_str_c("shm");
        h.has |= FH_TRANSPORT;
    }
    /* What the link hands over with it: over shared memory the client's
     * segment, which the server maps read-only. */
    int seg_fd = c->xp->hello_segment(cl, c, &h.segment);
    if (seg_fd >= 0)
        h.has |= FH_SEGMENT;
    uint8_t buf[1024];
    size_t n = frame_encode_header(&h, buf, sizeof buf);
    struct iovec iov = {buf, n};
    if (!n || shm_send_fd(c->fd, &iov, 1, seg_fd) != (ssize_t)n) {
        snprintf(err, errlen, "server %s: cannot send hello", c->addr);
        return -1;
    }
    return 0;
}

/* The server's welcome, checked; w is read already. */
static int client_welcomed(client *cl, client_conn *c, const frame_hdr *wp, char *err, size_t errlen)
{
    frame_hdr w = *wp;
    if (c->xp->welcomed(c, &w, err, errlen) < 0)
        return -1;
    /* Each field checked for presence first, then for its range: "0
     * trainers" is what a missing count would read as. */
    char missing[96];
    if (frame_missing(w.has, FH_VERSION | FH_SERVER | FH_TRAINERS, missing, sizeof missing)) {
        snprintf(err, errlen, "server %s: welcome without %s (a psbench server always sends it)", c->addr, missing);
        return -1;
    }
    if (w.version != FRAME_PROTOCOL_VERSION) {
        snprintf(err, errlen, "server %s speaks protocol version %" PRIu64 "; this trainer speaks %u", c->addr,
                 w.version, FRAME_PROTOCOL_VERSION);
        return -1;
    }
    if (w.trainers == 0 || w.trainers > CLIENT_MAX_TRAINERS) {
        snprintf(err, errlen, "server %s: its welcome says %" PRIu64 " trainers (1..%u)", c->addr, w.trainers,
                 CLIENT_MAX_TRAINERS);
        return -1;
    }
    if (w.server > UINT32_MAX) {
        snprintf(err, errlen, "server %s: its welcome says server rank %" PRIu64 " (at most %u)", c->addr, w.server,
                 UINT32_MAX);
        return -1;
    }
    if (cl->trainers && cl->trainers != w.trainers) {
        snprintf(err, errlen, "servers disagree on the trainer count (%u vs %" PRIu64 " at %s)",
                 cl->trainers, w.trainers, c->addr);
        return -1;
    }
    cl->trainers = (uint32_t)w.trainers;
    c->server_rank = (uint32_t)w.server;
    return 0;
}

/* The one place a connection's handshake state changes, and its
 * transport with it: forward only, never back to a lesser transport. */
void client_hs_enter(client_conn *c, client_hs st, xport_kind k)
{
    assert(st >= c->hs && (!c->xp || k >= c->xp->kind));
    c->hs = st;
    c->xp = xport_get(k);
}

/* Hello and welcome on c, connected over TCP: asking for shared memory
 * unless the transport is tcp, following a redirect where it can (auto:
 * else on TCP, the reason in link_note; shm: else an error); then CUDA
 * IPC where the welcome offers it and the link takes it. */
int client_handshake(client *cl, client_conn *c, const client_cfg *cfg, char *err, size_t errlen)
{
    bool ask = cfg->transport != PSB_TRANSPORT_TCP;
    frame_hdr a;
    client_hs_enter(c, CLIENT_HS_HELLO, XPORT_TCP);
    if (client_send_hello(cl, c, cfg->rank, cfg->token, ask, err, errlen) < 0 ||
        client_read_answer(c, ask ? FT_REDIRECT : FT_WELCOME, cfg->timeout_s, &a, err, errlen) < 0)
        return -1;
    if (a.type == FT_REDIRECT) {
        char why[256];
        int moved = xport_get(XPORT_SHM)->follow(cl, c, &a, why, sizeof why);
        if (!moved && cfg->transport == PSB_TRANSPORT_SHM) {
            snprintf(err, errlen, "server %s: no shared memory (--transport shm): %s", c->addr, why);
            return -1;
        }
        if (moved)
            client_hs_enter(c, CLIENT_HS_FOLLOWED, XPORT_SHM);
        else
            snprintf(c->link_note, sizeof c->link_note, "%s", why);
        /* Again: on the Unix socket with the segment, or here without
         * asking. */
        if (client_send_hello(cl, c, cfg->rank, cfg->token, false, err, errlen) < 0 ||
            client_read_answer(c, FT_WELCOME, cfg->timeout_s, &a, err, errlen) < 0)
            return -1;
    } else if (ask) {
        if (cfg->transport == PSB_TRANSPORT_SHM) {
            snprintf(err, errlen, "server %s offers no shared memory (--transport shm; the server's is tcp)",
                     c->addr);
            return -1;
        }
        snprintf(c->link_note, sizeof c->link_note, "the server offers TCP only (its --transport is tcp)");
    }
    if (client_welcomed(cl, c, &a, err, errlen) < 0)
        return -1;
    client_hs_enter(c, CLIENT_HS_WELCOMED, c->xp->kind);
    bool ipc = false;
    if ((a.has & FH_GPU) && c->xp->gpu_link &&
        xport_get(XPORT_IPC)->gpu_offer(cl, c, &a, cfg->timeout_s, &ipc, err, errlen) < 0)
        return -1;
    client_hs_enter(c, CLIENT_HS_READY, ipc ? XPORT_IPC : c->xp->kind);
    return 0;
}
