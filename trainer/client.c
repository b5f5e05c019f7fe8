/* client.c — a trainer's data-plane connections (see client.h). */
#include "trainer/client_impl.h"
#include "shared/clock.h"
#include "shared/text.h"
#include "shared/net.h"

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

/* Format an `error` frame from a server as a one-line reason. */
void client_error_frame(const client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    char where[96] = "", code[64], msg[512];
    if ((h->has & FH_BATCH) && (h->has & FH_BUCKET))
        snprintf(where, sizeof where, " (batch %" PRIu64 " bucket %" PRIu64 ")", h->batch, h->bucket);
    /* The server's words go into this trainer's last line: escaped. */
    text_escape_n(h->message.p ? (const char *)h->message.p : "", h->message.p ? h->message.n : 0, msg, sizeof msg);
    if (!(h->has & FH_CODE)) {
        snprintf(err, errlen, "server %s answered an error without a code%s: %s", c->addr, where, msg);
        return;
    }
    text_escape_n(h->code.p ? (const char *)h->code.p : "", h->code.p ? h->code.n : 0, code, sizeof code);
    snprintf(err, errlen, "server %s answered %s%s: %s", c->addr, code, where, msg);
}

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
        if (!devmem_is_none(c->srv_gpu))
            cl->gpu->close(cl->gpu->ctx, c->srv_gpu);
        shm_seg_close(&c->seg);
        framed_free(&c->rd);
        free(c->q);
        free(c->stage); /* its pages are the arena's, released below */
    }
    free(cl->conns);
    free(cl->pfd);
    shm_arena_destroy(&cl->arena);
    memset(cl, 0, sizeof *cl);
    cl->arena.seg = SHM_SEG_NONE;
}

void *client_shared_alloc(client *cl, size_t bytes)
{
    return cl->arena.seg.base && cl->push_mode == CLIENT_PUSH_AUTO ? shm_arena_alloc(&cl->arena, bytes) : NULL;
}

void client_shared_free(client *cl, void *p)
{
    if (p && cl->arena.seg.base)
        shm_arena_free(&cl->arena, p);
}

const char *client_link(const client *cl, size_t i)
{
    return cl->conns[i].shm ? "shm" : "tcp";
}

bool client_link_gpu(const client *cl, size_t i, const char **note)
{
    if (note)
        *note = cl->conns[i].gpu_note;
    return !devmem_is_none(cl->conns[i].srv_gpu);
}

bool client_all_gpu(const client *cl)
{
    for (size_t i = 0; i < cl->nconns; i++)
        if (devmem_is_none(cl->conns[i].srv_gpu))
            return false;
    return cl->nconns > 0;
}

/* Where a push of `bucket` with len payload bytes is staged on c: its
 * pages in the client's segment, grown when a bucket grows. NULL: no room
 * (the push goes inline). */
static uint8_t *client_stage_for(client *cl, client_conn *c, uint64_t bucket, size_t len)
{
    client_stage *st = NULL;
    for (size_t k = 0; k < c->nstage; k++)
        if (c->stage[k].bucket == bucket)
            st = &c->stage[k];
    if (!st) {
        client_stage *v = realloc(c->stage, (c->nstage + 1) * sizeof *v);
        if (!v)
            return NULL;
        c->stage = v;
        st = &c->stage[c->nstage++];
        *st = (client_stage){.bucket = bucket};
    }
    if (st->cap < len) {
        shm_arena_free(&cl->arena, st->p);
        st->p = shm_arena_alloc(&cl->arena, len);
        st->cap = st->p ? len : 0;
    }
    return st->p;
}

/* h as sent over shared memory: the payload named by offset in the
 * client's segment (copied there first when it lies elsewhere and staging
 * is on). false: it goes inline, on the socket. */
static bool client_push_at(client *cl, client_conn *c, frame_hdr *h, const void **payload)
{
    uint64_t at;
    bool staged = false;
    if (!c->shm || c->no_segment || !cl->arena.seg.base || h->type != FT_PUSH || !h->payload || !*payload ||
        cl->push_mode == CLIENT_PUSH_INLINE)
        return false;
    if (!shm_arena_owns(&cl->arena, *payload, h->payload, &at)) {
        uint8_t *st = h->payload <= SIZE_MAX ? client_stage_for(cl, c, h->bucket, (size_t)h->payload) : NULL;
        if (!st)
            return false;
        memcpy(st, *payload, (size_t)h->payload);
        at = (uint64_t)(st - cl->arena.seg.base);
        staged = true;
    }
    atomic_fetch_add_explicit(&cl->bytes_out, h->payload, memory_order_relaxed);
    atomic_fetch_add_explicit(&cl->pushes_at, 1, memory_order_relaxed);
    if (staged)
        atomic_fetch_add_explicit(&cl->pushes_staged, 1, memory_order_relaxed);
    h->at = at;
    h->has |= FH_AT;
    h->payload = 0;
    h->has &= ~(uint32_t)FH_PAYLOAD;
    *payload = NULL;
    return true;
}

int client_queue(client *cl, size_t i, const frame_hdr *h0, const void *payload, char *err, size_t errlen)
{
    client_conn *c = &cl->conns[i];
    frame_hdr hv = *h0;
    const frame_hdr *h = &hv;
    if (h0->has & FH_DEV) {
        /* Its bytes are in the trainer's GPU memory: the header says where. */
        assert(!devmem_is_none(c->srv_gpu) && !payload && !h0->payload);
        atomic_fetch_add_explicit(&cl->bytes_out, h0->count * 4, memory_order_relaxed);
    } else {
        client_push_at(cl, c, &hv, &payload);
    }
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
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            snprintf(err, errlen, "server %s: write failed: %s", c->addr, strerror(errno));
            return -1;
        }
        atomic_fetch_add_explicit(&cl->bytes_out, (uint64_t)w, memory_order_relaxed);
        size_t left = (size_t)w;
        while (left && c->qlen) {
            client_out *o = &c->q[c->qhead];
            uint64_t rest = o->hlen + o->plen - o->done;
            if (left < rest) {
                o->done += left;
                left = 0;
                break;
            }
            left -= rest;
            c->qhead++;
            c->qlen--;
        }
        if (c->qlen == 0)
            c->qhead = 0;
    }
    return 0;
}

/* An answer whose payload lies in the server's segment (`at`): where,
 * checked before anything reads it; hv is h as if the payload followed. */
static const uint8_t *client_answer_at(const client_conn *c, const frame_hdr *h, frame_hdr *hv, char *err,
                                       size_t errlen)
{
    uint64_t want = h->type == FT_RESULT ? frame_push_payload_size(h)
                    : h->type == FT_PARAMS && h->count <= UINT64_MAX / 4 ? h->count * 4
                                                                        : UINT64_MAX;
    if (!c->seg.base || h->payload || want == UINT64_MAX || h->at % 4 || !shm_seg_holds(&c->seg, h->at, want)) {
        snprintf(err, errlen, "server %s sent a '%s' naming bytes %" PRIu64 "..+%" PRIu64 " of %s", c->addr,
                 frame_type_name(h->type), h->at, want == UINT64_MAX ? 0 : want,
                 c->seg.base ? "its segment, outside it (or with a payload too)" : "a segment it never handed over");
        return NULL;
    }
    *hv = *h;
    hv->payload = want;
    hv->has |= FH_PAYLOAD;
    hv->has &= ~(uint32_t)FH_AT;
    return c->seg.base + h->at;
}

/* A dense result whose mean lies in the server's GPU memory (`dev`):
 * where (none: refused, with err), checked before anything reads it; hv is
 * h as if the payload followed. */
static devmem client_answer_dev(const client *cl, const client_conn *c, const frame_hdr *h, frame_hdr *hv,
                                char *err, size_t errlen)
{
    uint64_t want = h->type == FT_RESULT && h->layout == LAYOUT_DENSE ? frame_push_payload_size(h)
                    : h->type == FT_PARAMS && h->count <= UINT64_MAX / 4 ? h->count * 4
                                                                        : UINT64_MAX;
    if (devmem_is_none(c->srv_gpu) || !cl->sink.dev || h->payload || (h->has & FH_AT) || want == UINT64_MAX ||
        h->dev % 4 ||
        h->dev > c->srv_gpu_bytes || want > c->srv_gpu_bytes - h->dev) {
        snprintf(err, errlen, "server %s sent a '%s' naming bytes %" PRIu64 "..+%" PRIu64 " of %s", c->addr,
                 frame_type_name(h->type), h->dev, want == UINT64_MAX ? 0 : want,
                 !devmem_is_none(c->srv_gpu) ? "its GPU memory, outside it (or not a dense result, or with a payload too)"
                                             : "GPU memory it never exported to this trainer");
        return devmem_none();
    }
    *hv = *h;
    hv->payload = want;
    hv->has |= FH_PAYLOAD;
    hv->has &= ~(uint32_t)FH_DEV;
    return devmem_at(c->srv_gpu, h->dev);
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
            frame_hdr hv;
            const uint8_t *shared = NULL;
            devmem on_gpu = devmem_none();
            if ((h->has & FH_DEV) && devmem_is_none(on_gpu = client_answer_dev(cl, c, h, &hv, err, errlen)))
                return -1;
            if ((h->has & FH_AT) && !(shared = client_answer_at(c, h, &hv, err, errlen)))
                return -1;
            c->frame = NULL;
            if (cl->sink.begin(cl->sink.ctx, (uint32_t)(c - cl->conns), shared || !devmem_is_none(on_gpu) ? &hv : h,
                               &c->frame, err, errlen) < 0)
                return -1;
            if (!devmem_is_none(on_gpu)) { /* in the server's GPU memory: copied device to device */
                atomic_fetch_add_explicit(&cl->bytes_in, hv.payload, memory_order_relaxed);
                if (cl->sink.dev(cl->sink.ctx, c->frame, on_gpu, hv.payload, err, errlen) < 0)
                    return -1;
            }
            /* Read where the server wrote it; the reader's end of this
             * (empty) frame follows. */
            if (shared && hv.payload) {
                atomic_fetch_add_explicit(&cl->bytes_in, hv.payload, memory_order_relaxed);
                if (cl->sink.data(cl->sink.ctx, c->frame, 0, shared, hv.payload, err, errlen) < 0)
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
