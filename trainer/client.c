/* client.c — a trainer's data-plane connections (see client.h). */
#include "trainer/client_impl.h"
#include "shared/clock.h"
#include "shared/text.h"
#include "shared/net.h"
#include "trainer/ttrace.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CLIENT_IBUF_SIZE (256u * 1024u)
#define CLIENT_IOV_MAX 64

/* The fields every answer of its type carries (docs/protocol.md): one
 * that lacks any is refused naming them, before a sink reads an absent
 * batch or count as 0. */
static int client_check_answer(const client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    uint32_t need = h->type == FT_ROWS      ? FH_BATCH | FH_BAGS | FH_COLS
                    : h->type == FT_PARAMS  ? FH_COUNT
                    : h->type == FT_UPDATED ? FH_BATCH /* the confirmed update's */
                                            : FH_BATCH | FH_BUCKET | FH_LAYOUT;
    if (h->type == FT_RESULT && h->layout == LAYOUT_DENSE)
        need |= FH_COUNT;
    else if (h->type == FT_RESULT && h->layout == LAYOUT_SPARSE)
        need |= FH_ROWS | FH_COLS | FH_NNZ;
    char missing[96];
    if (!frame_missing(h->has, need, missing, sizeof missing))
        return 0;
    snprintf(err, errlen, "server %s sent a '%s' without %s (a psbench server always sends it)", c->addr,
             frame_type_name(h->type), missing);
    return -1;
}

static int client_open_all(client *cl, const client_cfg *cfg, const client_sink *sink, char *err, size_t errlen)
{
    memset(cl, 0, sizeof *cl);
    cl->wake_fd = -1;
    cl->sink = *sink;
    cl->gpu = cfg->gpu;
    cl->dtype = cfg->dtype;
    cl->arena.seg = SHM_SEG_NONE;
    const char *mode = getenv("PSBENCH_SHM_PUSH");
    cl->push_mode = mode && strcmp(mode, "inline") == 0  ? CLIENT_PUSH_INLINE
                    : mode && strcmp(mode, "stage") == 0 ? CLIENT_PUSH_STAGE
                                                         : CLIENT_PUSH_AUTO;
    const char *servers = cfg->servers;
    size_t n = 1;
    for (const char *p = servers; *p; p++)
        n += *p == ',';
    cl->conns = calloc(n, sizeof *cl->conns);
    cl->pfd = calloc(n + 1, sizeof *cl->pfd);
    if (!cl->conns || !cl->pfd) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    long long deadline = clock_now_ms() + (long long)(cfg->timeout_s * 1000);
    const char *p = servers;
    for (size_t i = 0; i < n; i++) {
        client_conn *c = &cl->conns[i];
        c->fd = -1;
        c->rx_fd = -1;
        c->seg = SHM_SEG_NONE;
        c->srv_gpu = devmem_none();
        c->gpu_open_ms = -1;
        client_hs_enter(c, CLIENT_HS_CONNECTING, xport_get(XPORT_TCP));
        cl->nconns++;
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof c->addr) {
            snprintf(err, errlen, "--server: empty or too long address in '%s'", servers);
            return -1;
        }
        memcpy(c->addr, p, len);
        c->addr[len] = '\0';
        p += len + (p[len] == ',');
        char host[256];
        uint16_t port;
        if (net_parse_hostport(c->addr, host, sizeof host, &port, 0, err, errlen) < 0)
            return -1;
        /* Results are float32 arrays: handed to the sink in whole floats. */
        if (framed_init(&c->rd, CLIENT_IBUF_SIZE, UINT64_MAX, 4) < 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        long long left = deadline - clock_now_ms();
        c->fd = net_connect(host, port, (int)(left > 0 ? left : 1), err, errlen);
        if (c->fd < 0)
            return -1;
        /* The welcome: the server's first answer, within timeout_s of the
         * connection (a big table is filled before the master hands out
         * its address, so a psbench server answers at once). */
        if (client_handshake(cl, c, cfg, err, errlen) < 0)
            return -1;
        net_set_nonblock(c->fd, 1);
    }
    return 0;
}

int client_open(client *cl, const client_cfg *cfg, const client_sink *sink, char *err, size_t errlen)
{
    if (client_open_all(cl, cfg, sink, err, errlen) == 0)
        return 0;
    /* What the connections got so far goes back here: a caller that does
     * not close a client it could not open holds nothing. */
    client_close(cl);
    cl->wake_fd = -1;
    return -1;
}

void client_close(client *cl)
{
    for (size_t i = 0; i < cl->nconns; i++) {
        client_conn *c = &cl->conns[i];
        if (c->fd >= 0)
            close(c->fd);
        if (c->rx_fd >= 0)
            close(c->rx_fd);
        c->xp->close(cl, c);
        framed_free(&c->rd);
        free(c->q);
    }
    free(cl->conns);
    free(cl->pfd);
    shm_arena_destroy(&cl->arena);
    memset(cl, 0, sizeof *cl);
    cl->arena.seg = SHM_SEG_NONE;
}

const char *client_link(const client *cl, size_t i)
{
    return cl->conns[i].xp->link;
}

void client_describe(const client *cl, size_t i, char *buf, size_t len)
{
    cl->conns[i].xp->describe(&cl->conns[i], buf, len);
}

bool client_link_gpu(const client *cl, size_t i, const char **note)
{
    if (note)
        *note = cl->conns[i].gpu_note;
    return cl->conns[i].xp->cuda_ipc;
}

bool client_all_gpu(const client *cl)
{
    for (size_t i = 0; i < cl->nconns; i++)
        if (!cl->conns[i].xp->cuda_ipc)
            return false;
    return cl->nconns > 0;
}

int client_queue(client *cl, size_t i, const frame_hdr *h, const void *payload, char *err, size_t errlen)
{
    client_src src = {.host = payload};
    return client_queue_src(cl, i, h, &src, err, errlen);
}

int client_queue_src(client *cl, size_t i, const frame_hdr *h0, const client_src *src, char *err, size_t errlen)
{
    client_conn *c = &cl->conns[i];
    /* Traced: from now, before the link places its payload (a copy into
     * the segment is part of sending it). */
    uint64_t t_queued = ttrace_open(cl->trace) ? clock_now_ns() : 0;
    frame_hdr hv = *h0;
    const frame_hdr *h = &hv;
    /* How its payload travels is the link's to say, here only: inline,
     * named in the client's segment, or in GPU memory. */
    const void *payload = src->host;
    c->xp->place(cl, c, &hv, src, &payload);
    if (c->qhead + c->qlen == c->qcap) {
        if (c->qhead > 0) {
            memmove(c->q, c->q + c->qhead, c->qlen * sizeof *c->q);
            c->qhead = 0;
        } else {
            size_t cap = c->qcap ? c->qcap * 2 : 64;
            client_out *q = realloc(c->q, cap * sizeof *q);
            if (!q) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            c->q = q;
            c->qcap = cap;
        }
    }
    client_out *o = &c->q[c->qhead + c->qlen];
    o->hlen = frame_encode_header(h, o->hdr, sizeof o->hdr);
    if (!o->hlen) {
        snprintf(err, errlen, "frame header too large");
        return -1;
    }
    o->payload = payload;
    o->plen = h->payload;
    o->done = 0;
    o->t_queued_ns = t_queued;
    o->t_first_ns = 0;
    if (t_queued)
        o->ids = trace_ids_make((h->has & FH_BATCH) ? (int64_t)h->batch : TRACE_NONE,
                                (h->has & FH_BUCKET) ? (int64_t)h->bucket : TRACE_NONE, cl->trace_trainer,
                                (int32_t)c->server_rank);
    c->qlen++;
    return 0;
}

bool client_idle_out(const client *cl)
{
    for (size_t i = 0; i < cl->nconns; i++)
        if (cl->conns[i].qlen)
            return false;
    return true;
}

/* Frame o is written whole: its frame_out span, from when it was queued
 * (or the link's previous frame was written, if later — but no later than
 * the write that took its first bytes: frames written by one writev all
 * end at the clock read after it, while their bytes left during it) to now
 * (*now: read once per write). */
static void client_trace_out(client *cl, client_conn *c, const client_out *o, uint64_t *now)
{
    if (!*now)
        *now = clock_now_ns();
    uint64_t start = o->t_queued_ns > c->trace_last_out_ns ? o->t_queued_ns : c->trace_last_out_ns;
    if (o->t_first_ns && start > o->t_first_ns)
        start = o->t_first_ns > o->t_queued_ns ? o->t_first_ns : o->t_queued_ns;
    c->trace_last_out_ns = *now;
    trace_add(cl->trace, TRACE_FRAME_OUT, c->trace_lane_out, start, *now, o->ids);
}

/* Write queued frames with as few syscalls as possible. */
static int client_write(client *cl, client_conn *c, char *err, size_t errlen)
{
    while (c->qlen) {
        struct iovec iov[CLIENT_IOV_MAX];
        int n = 0;
        for (size_t k = 0; k < c->qlen && n + 2 <= CLIENT_IOV_MAX; k++) {
            client_out *o = &c->q[c->qhead + k];
            if (o->done < o->hlen) {
                iov[n].iov_base = o->hdr + o->done;
                iov[n++].iov_len = o->hlen - o->done;
            }
            uint64_t pdone = o->done > o->hlen ? o->done - o->hlen : 0;
            if (o->plen > pdone) {
                iov[n].iov_base = (void *)(o->payload + pdone);
                iov[n++].iov_len = o->plen - pdone;
            }
        }
        /* Traced frames: the clock before the write, the earliest their
         * bytes may leave (client_trace_out). */
        uint64_t t_w = c->q[c->qhead].t_queued_ns ? clock_now_ns() : 0;
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            snprintf(err, errlen, "server %s: write failed: %s", c->addr, strerror(errno));
            return -1;
        }
        atomic_fetch_add_explicit(&cl->bytes_out, (uint64_t)w, memory_order_relaxed);
        size_t left = (size_t)w;
        uint64_t now = 0; /* read once per write, for the traced frames it ends */
        while (left && c->qlen) {
            client_out *o = &c->q[c->qhead];
            uint64_t rest = o->hlen + o->plen - o->done;
            if (o->done == 0)
                o->t_first_ns = t_w; /* its first bytes left in this write */
            if (left < rest) {
                o->done += left;
                left = 0;
                break;
            }
            left -= rest;
            if (o->t_queued_ns)
                client_trace_out(cl, c, o, &now);
            c->qhead++;
            c->qlen--;
        }
        if (c->qlen == 0)
            c->qhead = 0;
    }
    return 0;
}

/* Dispatch the frames and payload chunks that have arrived on c. */
static int client_process(client *cl, client_conn *c, char *err, size_t errlen)
{
    for (;;) {
        framed_event ev;
        switch (framed_next(&c->rd, &ev)) {
        case FRAMED_NEED_MORE:
            return 0;
        case FRAMED_DATA:
            if (cl->sink.data(cl->sink.ctx, c->frame, ev.off, ev.data, ev.n, err, errlen) < 0)
                return -1;
            break;
        case FRAMED_END:
            if (cl->sink.end(cl->sink.ctx, c->frame, err, errlen) < 0)
                return -1;
            break;
        case FRAMED_HEADER: {
            const frame_hdr *h = &ev.hdr;
            if (h->type == FT_ERROR) {
                client_error_frame(c, h, err, errlen);
                return -1;
            }
            /* params: batch-update's fetch; rows: an embedding lookup;
             * updated: an embedding update sent with confirm */
            if (h->type != FT_RESULT && h->type != FT_PARAMS && h->type != FT_ROWS && h->type != FT_UPDATED) {
                char type[160];
                text_escape_n((const char *)h->type_str.p, h->type_str.n > 32 ? 32 : h->type_str.n, type, sizeof type);
                snprintf(err, errlen, "server %s sent an unexpected '%s' frame", c->addr, type);
                return -1;
            }
            if (client_check_answer(c, h, err, errlen) < 0)
                return -1;
            /* A payload named where it lies (the server's segment or GPU
             * memory): the link reads it there. */
            if (h->has & (FH_AT | FH_DEV)) {
                if (c->xp->read_in_place(cl, c, h, err, errlen) < 0)
                    return -1;
            } else if (client_begin(cl, c, h, err, errlen) < 0) {
                return -1;
            }
            break;
        }
        case FRAMED_BAD:
        case FRAMED_TOO_LARGE:
            snprintf(err, errlen, "server %s sent a bad frame: %s", c->addr, framed_err(&c->rd));
            return -1;
        }
    }
}

static int client_read(client *cl, client_conn *c, char *err, size_t errlen)
{
    for (int i = 0; i < 16; i++) {
        size_t want;
        uint8_t *dst = framed_space(&c->rd, &want);
        ssize_t r = recv(c->fd, dst, want, 0);
        if (r == 0) {
            snprintf(err, errlen, "server %s closed the connection", c->addr);
            return -1;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            snprintf(err, errlen, "server %s: read failed: %s", c->addr, strerror(errno));
            return -1;
        }
        atomic_fetch_add_explicit(&cl->bytes_in, (uint64_t)r, memory_order_relaxed);
        framed_wrote(&c->rd, (size_t)r);
        cl->rx_ns = clock_now_ns();
        if (client_process(cl, c, err, errlen) < 0)
            return -1;
        if ((size_t)r < want)
            return 0;
    }
    return 0;
}

int client_poll(client *cl, int timeout_ms, char *err, size_t errlen)
{
    struct pollfd *pfd = cl->pfd;
    size_t n = cl->nconns;
    /* Write eagerly first: most of the time the socket takes it all and
     * poll only has to wait for results. */
    for (size_t i = 0; i < cl->nconns; i++)
        if (cl->conns[i].qlen && client_write(cl, &cl->conns[i], err, errlen) < 0)
            return -1;
    for (size_t i = 0; i < n; i++) {
        pfd[i].fd = cl->conns[i].fd;
        pfd[i].events = POLLIN | (cl->conns[i].qlen ? POLLOUT : 0);
        pfd[i].revents = 0;
    }
    size_t np = n;
    if (cl->wake_fd >= 0) {
        pfd[np].fd = cl->wake_fd;
        pfd[np].events = POLLIN;
        pfd[np++].revents = 0;
    }
    int rc = poll(pfd, (nfds_t)np, timeout_ms);
    if (rc < 0) {
        if (errno == EINTR)
            return 0;
        snprintf(err, errlen, "poll: %s", strerror(errno));
        return -1;
    }
    if (np > n && (pfd[n].revents & POLLIN)) {
        uint64_t v;
        if (read(cl->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
            return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
            if (client_read(cl, &cl->conns[i], err, errlen) < 0)
                return -1;
        if (pfd[i].revents & POLLOUT)
            if (client_write(cl, &cl->conns[i], err, errlen) < 0)
                return -1;
    }
    return 0;
}
