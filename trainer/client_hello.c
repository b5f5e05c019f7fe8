/* client_hello.c — a trainer's handshake with one server (see
 * client_impl.h): hello, welcome, the redirect to the server's Unix socket
 * and the offer of CUDA IPC (docs/protocol.md), as explicit states
 * (client_hs); what each transport adds to them is its ops table's
 * (trainer/xport.h), reached through the registry, never by name; its
 * blocking reads are client_io.c's. Blocking: it runs before the
 * connection is handed to client_poll. */
#include "trainer/client_impl.h"
#include "shared/text.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/uio.h>

/* A server's trainer count: what psbench-server and the master allow. */
#define CLIENT_MAX_TRAINERS 65536u

/* Say hello on c: over the Unix socket with the client's segment; on TCP
 * asking for transport `ask` by name (NULL: none). 0, or -1 with err. */
static int client_send_hello(client *cl, client_conn *c, uint64_t rank, const char *token, const xport_ops *ask,
                             char *err, size_t errlen)
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
    if (ask) {
        h.transport = frame_str_c(ask->link);
        h.has |= FH_TRANSPORT;
    }
    if (cl->dtype != HALF_FP32) { /* narrow pushes: the welcome must echo it */
        h.dtype = frame_str_c(frame_dtype_name(cl->dtype));
        h.has |= FH_DTYPE;
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
    /* A server that does not know narrow pushes ignores the hello's
     * dtype (unknown keys are ignored) and would refuse every push: the
     * echo is what says it takes them. */
    if (cl->dtype != HALF_FP32 && (!(w.has & FH_DTYPE) || frame_dtype_type(w.dtype) != (int)cl->dtype)) {
        snprintf(err, errlen,
                 "server %s does not take %s pushes (--compress %s): its welcome does not echo the hello's dtype "
                 "%s, so it is a server without narrow pushes (docs/protocol.md, \"Narrow pushes\"); use --compress "
                 "none with it",
                 c->addr, frame_dtype_name(cl->dtype), half_type_name(cl->dtype), frame_dtype_name(cl->dtype));
        return -1;
    }
    cl->trainers = (uint32_t)w.trainers;
    c->server_rank = (uint32_t)w.server;
    return 0;
}

/* The one place a connection's handshake state changes, and its
 * transport with it: forward only, never back to a lesser transport. */
void client_hs_enter(client_conn *c, client_hs st, const xport_ops *x)
{
    assert(st >= c->hs && (!c->xp || xport_order(x) >= xport_order(c->xp)));
    c->hs = st;
    c->xp = x;
}

/* The transport the first hello asks for by name: the last in the
 * registry that the configuration asks for (NULL: none). */
static const xport_ops *client_asked(const client_cfg *cfg)
{
    const xport_ops *ask = NULL;
    for (size_t i = 0; i < xport_count; i++)
        if (xport_registry[i]->asked && xport_registry[i]->asked(cfg))
            ask = xport_registry[i];
    return ask;
}

/* The welcome a (on TCP) answers the hello that asked for `ask`: the
 * transport it names (`link`) was asked for, and c moves onto it; or it
 * names none, and ask declines (a note, or an error). *to: c's transport
 * from here. 0, or -1 with err. */
static int client_taken(const client_cfg *cfg, client_conn *c, const xport_ops *ask, const frame_hdr *a,
                        const xport_ops **to, char *err, size_t errlen)
{
    *to = c->xp;
    if (a->has & FH_TRANSPORT) {
        const xport_ops *x = xport_named(a->transport.p, a->transport.n);
        if (!x || x != ask || c->xp != xport_get(XPORT_TCP)) {
            char name[64];
            text_escape_n((const char *)a->transport.p, a->transport.n > 32 ? 32 : a->transport.n, name, sizeof name);
            snprintf(err, errlen, "server %s: its welcome puts the link on transport '%s', which this trainer did "
                     "not ask for", c->addr, name);
            return -1;
        }
        *to = x;
        return 0;
    }
    return ask && c->xp == xport_get(XPORT_TCP) && ask->declined ? ask->declined(cfg, c, err, errlen) : 0;
}

/* Hello and welcome on c, connected over TCP: asking for a transport by
 * name where the configuration does (shared memory unless the transport
 * is tcp), following a redirect where it can (auto: else on TCP, the
 * reason in link_note; shm: else an error) or taking the transport the
 * welcome names; then CUDA IPC where the welcome offers it and the link
 * takes it. */
int client_handshake(client *cl, client_conn *c, const client_cfg *cfg, char *err, size_t errlen)
{
    const xport_ops *ask = client_asked(cfg), *to;
    frame_hdr a;
    client_hs_enter(c, CLIENT_HS_HELLO, xport_get(XPORT_TCP));
    if (client_send_hello(cl, c, cfg->rank, cfg->token, ask, err, errlen) < 0 ||
        client_read_answer(c, ask && ask->follow ? FT_REDIRECT : FT_WELCOME, cfg->timeout_s, &a, err, errlen) < 0)
        return -1;
    if (a.type == FT_REDIRECT) {
        assert(ask && ask->follow); /* client_read_answer takes a redirect only then */
        char why[512];
        int moved = ask->follow(cl, c, cfg, &a, why, sizeof why);
        if (moved < 0) {
            snprintf(err, errlen, "%s", why);
            return -1;
        }
        if (moved)
            client_hs_enter(c, CLIENT_HS_FOLLOWED, ask);
        else
            snprintf(c->link_note, sizeof c->link_note, "%s", why);
        /* Again: on the Unix socket with the segment, or here without
         * asking. */
        if (client_send_hello(cl, c, cfg->rank, cfg->token, NULL, err, errlen) < 0 ||
            client_read_answer(c, FT_WELCOME, cfg->timeout_s, &a, err, errlen) < 0)
            return -1;
        ask = NULL;
    }
    if (client_welcomed(cl, c, &a, err, errlen) < 0 || client_taken(cfg, c, ask, &a, &to, err, errlen) < 0)
        return -1;
    client_hs_enter(c, CLIENT_HS_WELCOMED, to);
    bool ipc = false;
    if ((a.has & FH_GPU) && c->xp->gpu_link &&
        xport_get(XPORT_IPC)->gpu_offer(cl, c, &a, cfg->timeout_s, &ipc, err, errlen) < 0)
        return -1;
    client_hs_enter(c, CLIENT_HS_READY, ipc ? xport_get(XPORT_IPC) : c->xp);
    return 0;
}
