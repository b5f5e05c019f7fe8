/* client_hello.c — a trainer's handshake with one server (see
 * client_impl.h): hello, welcome, the redirect to the server's Unix socket
 * and shared memory, the export of CUDA IPC (docs/protocol.md). Blocking:
 * it runs before the connection is handed to client_poll. */
#include "trainer/client_impl.h"
#include "shared/clock.h"
#include "shared/peer.h"
#include "shared/text.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* A server's trainer count: what psbench-server and the master allow. */
#define CLIENT_MAX_TRAINERS 65536u

/* The first bytes the server sent, before any frame was handed out: what
 * the reader holds (nothing of the first frame is consumed before it is
 * whole). */
static const uint8_t *client_first_bytes(const client_conn *c, size_t *n)
{
    *n = framed_buffered(&c->rd);
    return c->rd.buf + c->rd.off;
}

/* recv; on a Unix socket recvmsg, keeping the one descriptor a welcome may
 * bring (c->rx_fd) and closing any other. */
static ssize_t client_recv(client_conn *c, uint8_t *dst, size_t room)
{
    if (!c->shm)
        return recv(c->fd, dst, room, 0);
    int fds[4], nfds = 0;
    bool trunc = false;
    ssize_t r = shm_recv_fds(c->fd, dst, room, fds, &nfds, 4, &trunc);
    for (int i = 0; i < nfds; i++) {
        if (c->rx_fd < 0)
            c->rx_fd = fds[i];
        else
            close(fds[i]);
    }
    return r;
}

/* Blocking read of exactly one frame header (no payload) during the
 * handshake, for at most timeout_s: the server's first answer (`want`:
 * welcome; FT_REDIRECT: a redirect or a welcome), or its answer to an
 * export (FT_EXPORT: 1 when it is an error, which *h describes). A peer
 * that is not a psbench server is named (shared/peer.h). */
static int client_read_answer(client_conn *c, frame_type want, double timeout_s, frame_hdr *h, char *err,
                              size_t errlen)
{
    long long deadline = clock_now_ms() + (long long)(timeout_s * 1000);
    for (;;) {
        framed_event ev;
        framed_ev k = framed_next(&c->rd, &ev);
        if (k == FRAMED_HEADER) {
            *h = ev.hdr;
            if (h->type == FT_ERROR && want == FT_EXPORT && !h->payload) {
                /* A refused export: the caller goes on without it. */
                k = framed_next(&c->rd, &ev);
                assert(k == FRAMED_END);
                return 1;
            }
            if (h->type == FT_ERROR) {
                client_error_frame(c, h, err, errlen);
                return -1;
            }
            if ((h->type != want && !(want == FT_REDIRECT && h->type == FT_WELCOME)) || h->payload) {
                char type[160];
                text_escape_n((const char *)h->type_str.p, h->type_str.n > 32 ? 32 : h->type_str.n, type, sizeof type);
                snprintf(err, errlen, "%s is not a psbench server (it answered a psbench '%s' frame%s)", c->addr, type,
                         h->type == FT_OTHER ? ", as the master's control port does" : ", not welcome");
                return -1;
            }
            k = framed_next(&c->rd, &ev); /* the end of its (empty) payload */
            assert(k == FRAMED_END);
            return 0;
        }
        size_t n;
        const uint8_t *first = client_first_bytes(c, &n);
        if (k != FRAMED_NEED_MORE) {
            if (!peer_not_psbench(c->addr, "server", first, n, err, errlen))
                snprintf(err, errlen, "server %s: bad frame: %s", c->addr, framed_err(&c->rd));
            return -1;
        }
        long long left = deadline - clock_now_ms();
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
            if (n == 0 || !peer_not_psbench(c->addr, "server", first, n, err, errlen))
                peer_no_answer(c->addr, "server", false, timeout_s, err, errlen);
            return -1;
        }
        size_t room;
        uint8_t *dst = framed_space(&c->rd, &room);
        ssize_t r = client_recv(c, dst, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            first = client_first_bytes(c, &n);
            if (n == 0)
                peer_no_answer(c->addr, "server", true, 0, err, errlen);
            else if (!peer_not_psbench(c->addr, "server", first, n, err, errlen))
                snprintf(err, errlen, "server %s closed the connection during hello", c->addr);
            return -1;
        }
        framed_wrote(&c->rd, (size_t)r);
    }
}

/* A welcome over the Unix socket may hand over the server's segment,
 * where results are read in place: mapped read-only once checked. */
static int client_take_segment(client_conn *c, const frame_hdr *w, char *err, size_t errlen)
{
    char why[200];
    int fd = c->rx_fd;
    c->rx_fd = -1;
    if (!(w->has & FH_SEGMENT)) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    if (!c->shm || fd < 0) {
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "server %s: its welcome names a segment %s", c->addr,
                 c->shm ? "but no descriptor came with it" : "on a TCP connection");
        return -1;
    }
    if (shm_seg_map_peer(&c->seg, fd, UINT64_MAX, why, sizeof why) < 0 || c->seg.size != w->segment) {
        if (c->seg.base)
            snprintf(why, sizeof why, "its welcome says %" PRIu64 " bytes, the segment has %" PRIu64, w->segment,
                     c->seg.size);
        snprintf(err, errlen, "server %s: its segment: %s", c->addr, why);
        return -1;
    }
    return 0;
}

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
    /* Over shared memory the hello hands over the client's segment: the
     * server maps it read-only and pushes name their bytes in it. */
    int seg_fd = c->shm && !c->no_segment && cl->arena.seg.base ? cl->arena.seg.fd : -1;
    if (seg_fd >= 0) {
        h.segment = cl->arena.seg.size;
        h.has |= FH_SEGMENT;
    }
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
    if (client_take_segment(c, &w, err, errlen) < 0)
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

/* The client's segment, made before the first hello that hands it over:
 * no larger than that server takes (max; 0: not said). */
static int client_arena(client *cl, uint64_t max, char *err, size_t errlen)
{
    if (cl->arena.seg.base)
        return 0;
    uint64_t size = shm_default_size();
    if (max && size > max)
        size = max;
    return shm_arena_init(&cl->arena, "psbench-trainer", size, true, err, errlen);
}

/* Whether `bytes` of address space are there to map a server's segment
 * (an address-space limit, ulimit -v, may leave less): tried, not kept. */
static bool client_room_for(uint64_t bytes, char *why, size_t len)
{
    void *p = bytes <= SIZE_MAX ? mmap(NULL, (size_t)bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                                : MAP_FAILED;
    if (p == MAP_FAILED) {
        snprintf(why, len, "no address space to map the server's segment of %" PRIu64 " MiB (ulimit -v?)", bytes >> 20);
        return false;
    }
    munmap(p, (size_t)bytes);
    return true;
}

/* The server redirected c (TCP) to its Unix socket: connect there when
 * that is possible from here, handing over the client's segment. 1 when c
 * is now on the Unix socket; 0 when not, with why (c still on TCP). */
static int client_follow(client *cl, client_conn *c, const frame_hdr *r, char *why, size_t len)
{
    char name[128];
    if (!(r->has & FH_SHM) || !shm_name_ok(r->shm.p, r->shm.n) || r->shm.n >= sizeof name) {
        snprintf(why, len, "the server's redirect names no usable socket");
        return 0;
    }
    memcpy(name, r->shm.p, r->shm.n);
    name[r->shm.n] = '\0';
    if ((r->has & FH_SEGMENT) && !client_room_for(r->segment, why, len))
        return 0;
    int ufd = shm_connect(name, why, len);
    if (ufd < 0)
        return 0;
    uint64_t max = (r->has & FH_SEGMAX) ? r->segmax : 0;
    if (client_arena(cl, max, why, len) < 0) {
        close(ufd);
        return 0;
    }
    /* Made for an earlier server that takes more: this one gets none, and
     * pushes go on its socket (results are still read in place). */
    c->no_segment = max && cl->arena.seg.size > max;
    /* Nothing more comes on the TCP connection: the redirect was read
     * whole, and the server sends nothing unasked. */
    close(c->fd);
    c->fd = ufd;
    c->shm = true;
    return 1;
}

/* CUDA IPC (docs/protocol.md): the server's welcome offered it (`gpu`);
 * on the same GPU, export the gradients' memory and event and open the
 * server's memory. A refusal, or another GPU, is a note, not an error:
 * the link goes on over pinned memory. 0, or -1 with err (the connection
 * failed). */
static int client_export(client *cl, client_conn *c, const frame_hdr *w, double timeout_s, char *err, size_t errlen)
{
    const gpushare *g = cl->gpu;
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
    if (devmem_is_none(c->srv_gpu = g->open(g->ctx, mem, a.segment, why, sizeof why))) {
        /* The server holds our export; we cannot read its results there:
         * a server that sends one ends the link with a clear error. */
        snprintf(err, errlen, "server %s: cannot open its GPU memory: %s", c->addr, why);
        return -1;
    }
    c->srv_gpu_bytes = a.segment;
    return 0;
}

/* Hello and welcome on c, connected over TCP: asking for shared memory
 * unless the transport is tcp, following a redirect where it can (auto:
 * else on TCP, the reason in link_note; shm: else an error). */
int client_handshake(client *cl, client_conn *c, const client_cfg *cfg, char *err, size_t errlen)
{
    bool ask = cfg->transport != PSB_TRANSPORT_TCP;
    frame_hdr a;
    if (client_send_hello(cl, c, cfg->rank, cfg->token, ask, err, errlen) < 0 ||
        client_read_answer(c, ask ? FT_REDIRECT : FT_WELCOME, cfg->timeout_s, &a, err, errlen) < 0)
        return -1;
    if (a.type == FT_REDIRECT) {
        char why[256];
        int moved = client_follow(cl, c, &a, why, sizeof why);
        if (!moved && cfg->transport == PSB_TRANSPORT_SHM) {
            snprintf(err, errlen, "server %s: no shared memory (--transport shm): %s", c->addr, why);
            return -1;
        }
        if (!moved)
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
    if (c->shm && (a.has & FH_GPU)) {
        if (!cl->gpu)
            snprintf(c->gpu_note, sizeof c->gpu_note, "this trainer's gradients are not in shareable GPU memory");
        else if (client_export(cl, c, &a, cfg->timeout_s, err, errlen) < 0)
            return -1;
    }
    return 0;
}

