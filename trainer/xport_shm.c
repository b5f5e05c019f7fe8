/* xport_shm.c — the shared-memory transport of a trainer's connection
 * (xport.h; docs/protocol.md, shared memory): the server's Unix socket,
 * reached by following its redirect; the hello hands over the client's
 * segment, where pushes name their payload (staged there when it lies
 * elsewhere), and the welcome the server's, where results are read in
 * place. CUDA IPC builds on it (xport_ipc.c); this file knows nothing of
 * that, and calls only what lies beneath the transports (client_io.c). */
#include "trainer/client_impl.h"
#include "shared/shm.h"

#include <assert.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* recvmsg, keeping the one descriptor a welcome may bring (c->rx_fd) and
 * closing any other. */
static ssize_t xshm_recv(client_conn *c, uint8_t *dst, size_t room)
{
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

/* The hello hands over the client's segment: the server maps it
 * read-only and pushes name their bytes in it. None when this server
 * takes less than the segment is (no_segment). */
static int xshm_hello_segment(const client *cl, const client_conn *c, uint64_t *size)
{
    if (c->no_segment || !cl->arena.seg.base)
        return -1;
    *size = cl->arena.seg.size;
    return cl->arena.seg.fd;
}

/* A welcome over the Unix socket may hand over the server's segment,
 * where results are read in place: mapped read-only once checked. */
static int xshm_welcomed(client_conn *c, const frame_hdr *w, char *err, size_t errlen)
{
    char why[200];
    int fd = c->rx_fd;
    c->rx_fd = -1;
    if (!(w->has & FH_SEGMENT)) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    if (fd < 0) {
        snprintf(err, errlen, "server %s: its welcome names a segment but no descriptor came with it", c->addr);
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

/* The client's segment, made before the first hello that hands it over:
 * no larger than that server takes (max; 0: not said). */
static int xshm_arena(client *cl, uint64_t max, char *err, size_t errlen)
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
static bool xshm_room_for(uint64_t bytes, char *why, size_t len)
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

/* Connect c to the socket the redirect r names, where that is possible
 * from here, making the client's segment: 1 when c's socket is now the
 * Unix one; 0 when not, with why (c still on TCP). */
static int xshm_connect(client *cl, client_conn *c, const frame_hdr *r, char *why, size_t len)
{
    char name[128];
    if (!(r->has & FH_SHM) || !shm_name_ok(r->shm.p, r->shm.n) || r->shm.n >= sizeof name) {
        snprintf(why, len, "the server's redirect names no usable socket");
        return 0;
    }
    memcpy(name, r->shm.p, r->shm.n);
    name[r->shm.n] = '\0';
    if ((r->has & FH_SEGMENT) && !xshm_room_for(r->segment, why, len))
        return 0;
    int ufd = shm_connect(name, why, len);
    if (ufd < 0)
        return 0;
    uint64_t max = (r->has & FH_SEGMAX) ? r->segmax : 0;
    if (xshm_arena(cl, max, why, len) < 0) {
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
    return 1;
}

/* The server redirected c (TCP) to its Unix socket: follow where it can
 * (xshm_connect; 1: the caller moves c to this transport); 0 when not,
 * with why (c still on TCP); -1 when shared memory was a must (--transport
 * shm), with why. */
static int xshm_follow(client *cl, client_conn *c, const client_cfg *cfg, const frame_hdr *r, char *why, size_t len)
{
    char reason[256];
    int moved = xshm_connect(cl, c, r, reason, sizeof reason);
    if (!moved && cfg->transport == PSB_TRANSPORT_SHM) {
        snprintf(why, len, "server %s: no shared memory (--transport shm): %s", c->addr, reason);
        return -1;
    }
    if (!moved)
        snprintf(why, len, "%s", reason);
    return moved;
}

/* Every link asks for shared memory but where the trainer's --transport
 * is tcp. */
static bool xshm_asked(const client_cfg *cfg) { return cfg->transport != PSB_TRANSPORT_TCP; }

/* The server welcomed a hello that asked: it offers TCP only. */
static int xshm_declined(const client_cfg *cfg, client_conn *c, char *err, size_t errlen)
{
    if (cfg->transport == PSB_TRANSPORT_SHM) {
        snprintf(err, errlen, "server %s offers no shared memory (--transport shm; the server's is tcp)", c->addr);
        return -1;
    }
    snprintf(c->link_note, sizeof c->link_note, "the server offers TCP only (its --transport is tcp)");
    return 0;
}

/* Where a push of `bucket` with len payload bytes is staged on c: its
 * pages in the client's segment, grown when a bucket grows. NULL: no room
 * (the push goes inline). The pages are reused at the bucket's next push
 * on c: it comes after this one's result, hence after the server read
 * them (the hello's zerocopy promise). */
static uint8_t *xshm_stage_for(client *cl, client_conn *c, uint64_t bucket, size_t len)
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
 * is on); else inline, on the socket. Bytes only in GPU memory never come
 * here: a caller has them only where every link is CUDA IPC. */
void xport_shm_place(client *cl, client_conn *c, frame_hdr *h, const client_src *src, const void **payload)
{
    uint64_t at;
    bool staged = false;
    assert(src->host || !src->on_dev);
    if (c->no_segment || !cl->arena.seg.base || h->type != FT_PUSH || !h->payload || !*payload ||
        cl->push_mode == CLIENT_PUSH_INLINE)
        return;
    if (!shm_arena_owns(&cl->arena, *payload, h->payload, &at)) {
        uint8_t *st = h->payload <= SIZE_MAX ? xshm_stage_for(cl, c, h->bucket, (size_t)h->payload) : NULL;
        if (!st)
            return;
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
}

/* An answer whose payload lies in the server's segment (`at`): where,
 * checked before anything reads it (refused where the server handed over
 * no segment: TCP, or none), then handed to the sink as if it had
 * followed; the reader's end of this (empty) frame follows. */
int xport_shm_read_at(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    uint64_t want = h->type == FT_RESULT ? frame_push_payload_size(h)
                    : h->type == FT_PARAMS && h->count <= UINT64_MAX / 4 ? h->count * 4
                                                                        : UINT64_MAX;
    if (!c->seg.base || h->payload || want == UINT64_MAX || h->at % 4 || !shm_seg_holds(&c->seg, h->at, want)) {
        snprintf(err, errlen, "server %s sent a '%s' naming bytes %" PRIu64 "..+%" PRIu64 " of %s", c->addr,
                 frame_type_name(h->type), h->at, want == UINT64_MAX ? 0 : want,
                 c->seg.base ? "its segment, outside it (or with a payload too)" : "a segment it never handed over");
        return -1;
    }
    frame_hdr hv = *h;
    hv.payload = want;
    hv.has |= FH_PAYLOAD;
    hv.has &= ~(uint32_t)FH_AT;
    if (client_begin(cl, c, &hv, err, errlen) < 0)
        return -1;
    if (!want)
        return 0;
    atomic_fetch_add_explicit(&cl->bytes_in, want, memory_order_relaxed);
    return cl->sink.data(cl->sink.ctx, c->frame, 0, c->seg.base + h->at, want, err, errlen);
}

/* Results are read in the server's segment; GPU memory was never
 * exported on this link (client_check_dev refuses it, naming why). */
static int xshm_read_in_place(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    if (h->has & FH_DEV) {
        uint64_t want;
        int r = client_check_dev(cl, c, h, &want, err, errlen);
        assert(r < 0); /* none exported: c is not on CUDA IPC */
        (void)r;
        return -1;
    }
    return xport_shm_read_at(cl, c, h, err, errlen);
}

/* The server's segment and the stages' index; the client's pages (the
 * stages' included) are the arena's, released with the client. */
void xport_shm_close(client *cl, client_conn *c)
{
    (void)cl;
    shm_seg_close(&c->seg);
    free(c->stage);
    c->stage = NULL;
    c->nstage = 0;
}

static void xshm_describe(const client_conn *c, char *buf, size_t len)
{
    client_describe_no_ipc(c, "shared memory", "the server offered none", buf, len);
}

/* Memory in the client's segment (client.h): none where no link shares
 * memory, or where $PSBENCH_SHM_PUSH has every payload staged or inline. */
void *client_shared_alloc(client *cl, size_t bytes)
{
    return cl->arena.seg.base && cl->push_mode == CLIENT_PUSH_AUTO ? shm_arena_alloc(&cl->arena, bytes) : NULL;
}

void client_shared_free(client *cl, void *p)
{
    if (p && cl->arena.seg.base)
        shm_arena_free(&cl->arena, p);
}

const xport_ops xport_shm_ops = {
    .link = "shm",
    .cuda_ipc = false,
    .describe = xshm_describe,
    .hello_segment = xshm_hello_segment,
    .recv = xshm_recv,
    .welcomed = xshm_welcomed,
    .gpu_link = true, /* CUDA IPC is offered on the Unix socket */
    .asked = xshm_asked,
    .declined = xshm_declined,
    .follow = xshm_follow,
    .gpu_offer = NULL,
    .place = xport_shm_place,
    .read_in_place = xshm_read_in_place,
    .close = xport_shm_close,
};
