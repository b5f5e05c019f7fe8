/* hook_rpc.c — rpc_hook: buckets to the parameter servers and their means
 * back, the seed's rpc_hook over protocol v1.
 *
 * Placement: bucket k goes to server k mod (number of servers this trainer
 * was given). Under the seed's placement a trainer is given one server (all
 * its buckets go there); under `shard` it is given every server.
 *
 * Below it: the client (framed connections to the servers) driven by the
 * comm thread (comm.c), which writes pushes while backward runs and reads
 * results straight into the buckets: a dense mean over the gradients it
 * averages, a sparse one into the bucket's result buffer. This file only
 * turns buckets into pushes and results back into buckets.
 *
 * With --compress fp16|bf16 (docs/protocol.md, "Narrow pushes") a dense
 * bucket is narrowed (round to nearest even) into a buffer of its slot and
 * pushed as f16 or bf16; the server answers the mean in that type, which
 * the comm thread widens into the gradients. Sparse buckets stay f32, as
 * PyTorch's compress hooks leave them. Over shared memory the narrow
 * buffers are a shadow of the gradients in the segment (same offsets, so
 * every one is on a float boundary), named there without a copy; where
 * the segment has no room for it, each slot's buffer is ordinary memory
 * and staged. By CUDA IPC the shadow is on the GPU, after the exported
 * gradients (gpushare.shadow): a kernel narrows each bucket there before
 * the push names it, and another widens the mean into the gradients.
 */
#include "trainer/hook_impl.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "trainer/client.h"
#include "trainer/comm.h"
#include "trainer/ttrace.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rpc_slot {
    comm_bucket cb;   /* the push and its result, as the comm thread sees them */
    bool shaped;      /* cb.hdr describes this bucket */
    uint8_t *pack;    /* sparse: the push's payload (indices, then rows) */
    uint64_t pack_cap;
    uint16_t *narrow;    /* dense, --compress: the narrowed bucket, where no shadow holds it (owned) */
    uint64_t narrow_cap; /* elements */
    bool narrow_oom;     /* no memory to narrow its last bucket: pushed f32, failed at wait */
} rpc_slot;

typedef struct rpc_hook {
    hook base;
    client cl;
    const gpushare *gpu; /* every link exchanges dense buckets by CUDA IPC: they come in GPU memory */
    comm *c;
    stats *m_dense, *m_sparse;
    bool pushed;        /* a bucket has been handed over (training thread) */
    bool said_no_room;  /* send memory refused, and the log told why */
    half_type dtype;    /* dense pushes' type (--compress): HALF_FP32, or narrow */
    /* --compress over shared memory: the gradients' memory in the segment
     * (send_memory's) and a shadow as large right after it in the segment,
     * where a bucket's narrow copy lies at its gradients' offset. NULL:
     * none. */
    const uint8_t *grad_base;
    size_t grad_bytes;
    uint8_t *shadow;
    rpc_slot slots[HOOK_MAX_BUCKETS];
} rpc_hook;

/* The push header for bucket b. A bucket id's shape changes between a
 * pass's first iteration (DDP's one dense bucket) and the later ones (the
 * rebuilt buckets): rpc_ready shapes the slot again when it differs. */
static void rpc_shape(rpc_slot *s, const hook_bucket *b)
{
    frame_hdr *h = &s->cb.hdr;
    memset(h, 0, sizeof *h);
    h->type = FT_PUSH;
    h->bucket = b->id;
    h->dtype = frame_str_c("f32"); /* rpc_ready sets a dense push's */
    h->has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_PAYLOAD;
    if (b->sparse) {
        h->layout = LAYOUT_SPARSE;
        h->layout_str = frame_str_c("sparse");
        h->rows = b->rows;
        h->cols = b->cols;
        h->has |= FH_ROWS | FH_COLS | FH_NNZ;
    } else {
        h->layout = LAYOUT_DENSE;
        h->layout_str = frame_str_c("dense");
        h->count = b->count;
        h->payload = b->count * 4;
        h->has |= FH_COUNT;
    }
    s->cb.id = b->id;
    s->shaped = true;
}

/* A sparse push's payload: the indices, then the rows. On allocation
 * failure it pushes no rows, which the check in rpc_wait turns into an
 * error (ready cannot fail). */
static void rpc_pack_sparse(rpc_slot *s, const hook_bucket *b)
{
    uint64_t need = b->nnz * (8 + 4 * b->cols);
    if (need > s->pack_cap) {
        uint8_t *p = realloc(s->pack, need ? need : 1);
        if (!p) {
            s->cb.hdr.nnz = 0;
            s->cb.hdr.payload = 0;
            s->cb.payload = s->pack;
            return;
        }
        s->pack = p;
        s->pack_cap = need;
    }
    memcpy(s->pack, b->idx, b->nnz * 8);
    memcpy(s->pack + b->nnz * 8, b->vals, b->nnz * b->cols * 4);
    s->cb.hdr.nnz = b->nnz;
    s->cb.hdr.payload = need;
    s->cb.payload = s->pack;
}

/* The slot's header describes bucket b as it is now. */
static bool rpc_shaped_as(const rpc_slot *s, const hook_bucket *b)
{
    const frame_hdr *h = &s->cb.hdr;
    if (!s->shaped || (h->layout == LAYOUT_SPARSE) != b->sparse)
        return false;
    return b->sparse ? h->rows == b->rows && h->cols == b->cols : h->count == b->count;
}

/* Where bucket b's narrow copy goes: its place in the shadow, or the
 * slot's own buffer (grown). NULL: out of memory. */
static uint16_t *rpc_narrow_dst(rpc_hook *r, rpc_slot *s, const hook_bucket *b)
{
    const uint8_t *d = (const uint8_t *)b->data;
    if (r->shadow && d >= r->grad_base && b->count <= (r->grad_bytes - (size_t)(d - r->grad_base)) / 4)
        return (uint16_t *)(void *)(r->shadow + (d - r->grad_base));
    if (b->count > s->narrow_cap) {
        uint16_t *n = realloc(s->narrow, (b->count ? b->count : 1) * sizeof *n);
        if (!n)
            return NULL;
        s->narrow = n;
        s->narrow_cap = b->count;
    }
    return s->narrow;
}

/* A dense bucket in host memory as its push: f32 where it lies, or
 * narrowed (--compress), the mean widened back into it. */
static void rpc_dense_host(rpc_hook *r, rpc_slot *s, const hook_bucket *b)
{
    half_type t = r->dtype;
    uint16_t *nb = t != HALF_FP32 ? rpc_narrow_dst(r, s, b) : NULL;
    s->narrow_oom = t != HALF_FP32 && !nb;
    if (!nb)
        t = HALF_FP32; /* out of memory: pushed as it is, and the wait fails saying why */
    else
        half_narrow(t, nb, b->data, b->count);
    s->cb.wire = t;
    s->cb.hdr.dtype = frame_str_c(frame_dtype_name(t));
    s->cb.hdr.payload = b->count * half_type_size(t);
    s->cb.payload = nb ? (const uint8_t *)nb : (const uint8_t *)b->data;
    s->cb.dense_dst = b->data;
}

static void rpc_ready(hook *h, hook_bucket *b)
{
    rpc_hook *r = (rpc_hook *)h;
    assert(b->id < HOOK_MAX_BUCKETS);
    assert(b->sparse || (b->data != NULL) != !devf32_is_none(b->device_data));
    assert(devf32_is_none(b->device_data) || r->gpu); /* device_dense only then */
    rpc_slot *s = &r->slots[b->id];
    r->pushed = true;
    if (!rpc_shaped_as(s, b))
        rpc_shape(s, b);
    /* Where the bucket lies, never how it travels: the client's link
     * decides that (trainer/xport.h). */
    s->cb.on_dev = false;
    if (b->sparse) {
        rpc_pack_sparse(s, b);
    } else if (!devf32_is_none(b->device_data)) {
        /* In the exported gradients (every link is CUDA IPC then), or
         * narrowed on the GPU into their shadow (--compress); the server's
         * stream waits for the event recorded now, after its writer (and
         * after the copies of earlier means: the loans' end). */
        const gpushare *g = r->gpu;
        uint64_t at = devmem_offset(g->base, devf32_mem(b->device_data));
        if (r->dtype != HALF_FP32) {
            at = g->shadow + at / 2;
            g->narrow(g->ctx, devmem_at(g->base, at), devf32_mem(b->device_data), b->count, r->dtype);
        }
        s->cb.wire = r->dtype;
        s->cb.hdr.dtype = frame_str_c(frame_dtype_name(r->dtype));
        s->cb.hdr.payload = b->count * half_type_size(r->dtype);
        s->cb.on_dev = true;
        s->cb.dev = at;
        s->cb.payload = NULL;
        s->cb.dense_dst = NULL;
        g->record(g->ctx);
    } else {
        rpc_dense_host(r, s, b);
    }
    b->metric = b->sparse ? r->m_sparse : r->m_dense;
    uint32_t link = (uint32_t)(b->id % r->cl.nconns);
    b->server = (int32_t)r->cl.conns[link].server_rank;
    comm_push(r->c, &s->cb, link, b->batch);
    b->t_ready_ns = s->cb.t_push_ns;
}

static int rpc_wait(hook *h, hook_bucket **bs, uint32_t n, char *err, size_t errlen)
{
    rpc_hook *r = (rpc_hook *)h;
    comm_bucket *cbs[HOOK_MAX_BUCKETS];
    assert(n <= HOOK_MAX_BUCKETS);
    for (uint32_t i = 0; i < n; i++)
        cbs[i] = &r->slots[bs[i]->id].cb;
    int rc = comm_wait(r->c, cbs, n, err, errlen);
    for (uint32_t i = 0; i < n; i++) {
        if (!bs[i]->sparse && r->slots[bs[i]->id].narrow_oom) {
            /* The cause, rather than what a server said of an f32 push among narrow ones. */
            snprintf(err, errlen, "out of memory narrowing bucket %u (%" PRIu64 " elements) to %s", bs[i]->id,
                     bs[i]->count, half_type_name(r->dtype));
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        hook_bucket *b = bs[i];
        rpc_slot *s = &r->slots[b->id];
        if (b->sparse && s->cb.hdr.nnz != b->nnz) {
            snprintf(err, errlen, "out of memory packing sparse bucket %u", b->id);
            return -1;
        }
        b->t_done_ns = s->cb.t_done_ns;
        if (!devf32_is_none(b->device_data)) {
            /* The mean into the bucket, device to device from the
             * server's memory (a narrow one widened on the way), or up
             * from the socket's bytes, in the trainer's stream order: what
             * it enqueues next sees it. */
            if (devmem_is_none(s->cb.result_dev))
                r->gpu->upload(r->gpu->ctx, devf32_mem(b->device_data), s->cb.result, b->count * 4); /* widened */
            else if (s->cb.wire != HALF_FP32)
                r->gpu->widen(r->gpu->ctx, devf32_mem(b->device_data), s->cb.result_dev, b->count, s->cb.wire);
            else
                r->gpu->copy(r->gpu->ctx, devf32_mem(b->device_data), s->cb.result_dev, b->count * 4);
        } else if (b->sparse) {
            /* The result was read into the comm bucket's buffer: trade
             * buffers with the bucket instead of copying. */
            uint8_t *res = b->result;
            uint64_t cap = b->result_cap;
            b->result = s->cb.result;
            b->result_cap = s->cb.result_cap;
            b->result_nnz = s->cb.result_nnz;
            s->cb.result = res;
            s->cb.result_cap = cap;
        }
    }
    return 0;
}

static void rpc_bytes(const hook *h, uint64_t *in, uint64_t *out)
{
    const rpc_hook *r = (const rpc_hook *)h;
    *in += atomic_load_explicit(&r->cl.bytes_in, memory_order_relaxed);
    *out += atomic_load_explicit(&r->cl.bytes_out, memory_order_relaxed);
}

static const struct client *rpc_client(const hook *h)
{
    return &((const rpc_hook *)h)->cl;
}

/* Memory in the client's segment (hook_send_memory): a dense bucket that
 * lies there is pushed by offset, where one elsewhere is first copied into
 * the segment, per push (trainer/xport_shm.c). The client owns it until
 * client_close.
 * The segment's free list is the comm thread's once pushes flow (staging
 * areas), hence only before the first bucket. */
static void *rpc_send_memory(hook *h, size_t bytes)
{
    rpc_hook *r = (rpc_hook *)h;
    assert(!r->pushed);
    if (!r->cl.arena.seg.base)
        return NULL; /* no link shares memory: TCP sends from anywhere alike */
    void *p = client_shared_alloc(&r->cl, bytes);
    if (p && r->dtype != HALF_FP32 && !r->shadow) {
        /* The narrow copies' shadow (half of it used: the same offsets keep
         * each copy on a float boundary); without room, slot buffers,
         * staged. */
        r->shadow = client_shared_alloc(&r->cl, bytes);
        if (r->shadow) {
            r->grad_base = p;
            r->grad_bytes = bytes;
        } else {
            log_info("%s: no room for the narrow copies of the gradients in the shared segment: every dense "
                     "push is copied into it first",
                     h->name);
        }
    }
    if (p || r->said_no_room)
        return p;
    r->said_no_room = true;
    if (r->cl.push_mode != CLIENT_PUSH_AUTO)
        log_info("%s: gradients in ordinary memory ($PSBENCH_SHM_PUSH=%s): every dense push %s", h->name,
                 r->cl.push_mode == CLIENT_PUSH_STAGE ? "stage" : "inline",
                 r->cl.push_mode == CLIENT_PUSH_STAGE ? "is copied into the shared segment first"
                                                      : "goes on the socket");
    else
        log_warn("%s: no room for %.1f MiB of gradients in the shared segment (%.1f MiB): they stay in "
                 "ordinary memory, and every dense push is copied into the segment first (or sent on the "
                 "socket where no room is left for that either)",
                 h->name, (double)bytes / (1 << 20), (double)r->cl.arena.seg.size / (1 << 20));
    return NULL;
}

static void rpc_destroy(hook *h)
{
    rpc_hook *r = (rpc_hook *)h;
    comm_stop(r->c);
    client_close(&r->cl);
    for (uint32_t k = 0; k < HOOK_MAX_BUCKETS; k++) {
        free(r->slots[k].pack);
        free(r->slots[k].narrow);
        free(r->slots[k].cb.result);
    }
    free(r);
}

static const hook_ops rpc_ops = {
    .ready = rpc_ready,
    .wait = rpc_wait,
    .bytes = rpc_bytes,
    .client = rpc_client,
    .send_memory = rpc_send_memory,
    .destroy = rpc_destroy,
};

hook *hook_rpc_new(const hook_setup *s, const char *name, bool dense, bool sparse, char *err, size_t errlen)
{
    if (!s->servers || !*s->servers) {
        snprintf(err, errlen, "%s sends buckets to parameter servers, and this job has none (--nserver 0); use "
                 "allreduce_hook (e.g. --trainer DdpTrainer) or start servers", name);
        return NULL;
    }
    rpc_hook *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->base.ops = &rpc_ops;
    r->base.name = name;
    r->dtype = dense ? s->compress : HALF_FP32; /* sparse buckets stay f32 */
    r->cl.wake_fd = -1;
    r->m_dense = dense ? metrics_get(s->m, "hook_future_metric,rpc_dense") : NULL;
    r->m_sparse = sparse ? metrics_get(s->m, "hook_future_metric,rpc_sparse") : NULL;
    client_sink none = {0};
    client_cfg cc = {.servers = s->servers,
                     .rank = s->rank,
                     .token = s->token,
                     .timeout_s = s->connect_timeout_s,
                     .transport = s->transport,
                     /* Narrow buckets go by CUDA IPC from the gradients'
                      * shadow; without one, from host memory. */
                     .gpu = r->dtype == HALF_FP32 || (s->gpu && s->gpu->shadow) ? s->gpu : NULL,
                     .dtype = r->dtype};
    if (client_open(&r->cl, &cc, &none, err, errlen) == 0) {
        /* Traced: the comm thread's ring, each link's lanes (ttrace.h). */
        ttrace_links(s->trace, &r->cl);
        r->c = comm_start(&r->cl, s->rpc_timeout_s, s->trace, err, errlen);
    }
    if (!r->c) {
        client_close(&r->cl);
        free(r);
        return NULL;
    }
    if (s->gpu && (r->dtype == HALF_FP32 || s->gpu->shadow) && client_all_gpu(&r->cl)) {
        r->gpu = s->gpu;
        r->base.device_dense = true;
    }
    return &r->base;
}
