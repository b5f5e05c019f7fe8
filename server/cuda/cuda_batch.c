/* cuda_batch.c — host bytes on their way into the cuda device's GPU memory
 * (server/cuda/cuda_int.h): recv areas, folds, the batch of small folds,
 * and the device's failure, which every part of it may find.
 *
 * Staging (shared/gpu/staging.h, the trainer's ring too): `stage` holds
 * recv areas, fold sources and the arrays a job uploads; `meta` the
 * batches' descriptors. Neither waits: a ring grows rather than wait for
 * the GPU (the reactor never blocks).
 *
 * The path of a bucket's bytes: a big recv_done enqueues the host-to-device
 * copy of the area; a big fold copies its source into staging, enqueues its
 * copy and the psb_fold kernel. Small ones (CUDA_SMALL bytes or less: the
 * buckets of a many-bucket model) are batched per reactor iteration, as
 * Redis batches its writes: their bytes go into staging one after the
 * other, and at the end of the iteration (the device's flush, which
 * cuda_arm_flush makes active) one copy takes them all to the GPU and one
 * psb_fold_batch launch applies them (folds into one buffer in the order
 * they came, buffers in parallel). The batch's bytes are in the current
 * staging chunk: it is enqueued before that chunk can be closed, and
 * before anything else that touches a buffer it folds into.
 *
 * The lowest of the device's files: it calls none of the others.
 */
#include "server/cuda/cuda_int.h"
#include "shared/log.h"

#include <assert.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A batch's chunk of descriptors (a ring of its own: see cuda_emit_batch). */
#define CUDA_META_CHUNK (256u * 1024u)

/* ---- failure ----------------------------------------------------------------------------- */

/* The device fails for good: said once in the log; jobs in flight and every
 * later one complete with the reason (delivered by the wake event, never
 * inside the call that found the failure). */
void cuda_fail(cuda_device *c, const char *why)
{
    if (!c->failed) {
        c->failed = true;
        snprintf(c->error, sizeof c->error, "GPU %d (%s) failed: %s", c->gpu->device, c->gpu->name, why);
        log_error("device cuda: %s; every bucket from now on fails", c->error);
    }
    if (c->wake_ev)
        event_active(c->wake_ev, 0, 0);
}

/* ---- staging ----------------------------------------------------------------------------- */

int cuda_batch_init(cuda_device *c)
{
    /* The reactor never waits for staging (limit 0: the rings grow). */
    staging_init(&c->stage, c->gpu, c->stream, CUDA_CHUNK, 0);
    staging_init(&c->meta, c->gpu, c->stream, CUDA_META_CHUNK, 0);
    c->batch_gen = 1; /* a handle's chain_gen 0: in no batch */
    c->sink = malloc(DEVICE_AREA_MIN);
    return c->sink ? 0 : -1;
}

void cuda_batch_teardown(cuda_device *c)
{
    staging_free(&c->stage);
    staging_free(&c->meta);
    free(c->bdesc);
    free(c->bnext);
    free(c->chead);
    free(c->ctail);
    free(c->ccount);
    free(c->sink);
}

/* Room in ring r (staging.h); the device fails when there is none. */
static int cuda_ring_room(cuda_device *c, staging *r, size_t need)
{
    if (staging_room(r, need) < 0) {
        cuda_fail(c, r->err);
        return -1;
    }
    return 0;
}

/* Room for `need` bytes of staging. The batch's bytes are in the current
 * chunk: it is enqueued before that chunk can be closed. */
static int cuda_stage_room(cuda_device *c, size_t need)
{
    staging *r = &c->stage;
    if (c->nb && staging_left(r) < need)
        cuda_emit_batch(c);
    if (c->failed)
        return -1;
    return cuda_ring_room(c, r, need);
}

/* Copy n host bytes to the GPU through staging, now: their device address
 * as a kernel's launch takes it (a raw pointer), or NULL (the device
 * failed). */
void *cuda_upload(cuda_device *c, const void *src, size_t n)
{
    if (n == 0)
        n = 1;
    if (cuda_stage_room(c, n) < 0)
        return NULL;
    size_t at = staging_used(&c->stage);
    uint8_t *h = staging_host_at(&c->stage, at);
    devmem d = staging_dev_at(&c->stage, at);
    memcpy(h, src, n);
    if (c->gpu->ops->copy_h2d(c->gpu, c->stream, d, h, n) < 0) {
        cuda_fail(c, c->gpu->err);
        return NULL;
    }
    staging_take(&c->stage, n);
    return d.p;
}

/* ---- the batch of small folds ------------------------------------------------------------ */

/* The end of this reactor iteration will flush (once). */
void cuda_arm_flush(cuda_device *c)
{
    if (!c->flush_armed) {
        c->flush_armed = true;
        event_active(c->flush_ev, 0, 0);
    }
}

/* Grow the batch's arrays for one more descriptor and one more chain. */
static int cuda_batch_grow(cuda_device *c)
{
    if (c->nb == c->bcap) {
        size_t cap = c->bcap ? c->bcap * 2 : 256;
        psb_fold_desc *d = realloc(c->bdesc, cap * sizeof *d);
        if (!d)
            return -1;
        c->bdesc = d;
        uint32_t *nx = realloc(c->bnext, cap * sizeof *nx);
        if (!nx)
            return -1;
        c->bnext = nx;
        c->bcap = cap;
    }
    if (c->nchain == c->ccap) {
        size_t cap = c->ccap ? c->ccap * 2 : 64;
        uint32_t *h = realloc(c->chead, cap * sizeof *h);
        if (!h)
            return -1;
        c->chead = h;
        uint32_t *t = realloc(c->ctail, cap * sizeof *t);
        if (!t)
            return -1;
        c->ctail = t;
        uint32_t *n = realloc(c->ccount, cap * sizeof *n);
        if (!n)
            return -1;
        c->ccount = n;
        c->ccap = cap;
    }
    return 0;
}

/* A small fold (or copy) into acc's floats [elem_off, elem_off + n) from n
 * floats at device address src: into the batch, on acc's chain. 0, or -1
 * (the device failed: out of host memory). Its bytes are staged
 * (cuda_defer), or lie in a peer's GPU memory (CUDA IPC: cuda_fold_peer),
 * whose stream wait is enqueued before the batch: the small pushes of many
 * trainers folded by one launch per iteration, not one each (issue 44). */
int cuda_defer_desc(cuda_device *c, int op, devbuf *acc, uint64_t elem_off, const void *src, size_t n, float s)
{
    if (cuda_batch_grow(c) < 0) {
        cuda_fail(c, "out of host memory");
        return -1;
    }
    uint32_t i = (uint32_t)c->nb++;
    c->bdesc[i] = (psb_fold_desc){.acc = cuda_f32(acc, elem_off), .src = src, .n = n, .op = op, .s = s};
    c->bnext[i] = UINT32_MAX;
    if (acc->chain_gen == c->batch_gen) {
        uint32_t ch = acc->chain;
        c->bnext[c->ctail[ch]] = i;
        c->ctail[ch] = i;
        c->ccount[ch]++;
    } else {
        uint32_t ch = (uint32_t)c->nchain++;
        c->chead[ch] = c->ctail[ch] = i;
        c->ccount[ch] = 1;
        acc->chain = ch;
        acc->chain_gen = c->batch_gen;
    }
    cuda_arm_flush(c);
    return 0;
}

/* A small fold (or copy) whose bytes were just put at stage.cur's `used`:
 * deferred (cuda_defer_desc), the bytes taken from the ring. */
static void cuda_defer(cuda_device *c, int op, devbuf *acc, uint64_t elem_off, size_t n, float s)
{
    size_t at = staging_used(&c->stage);
    const void *src = staging_dev_at(&c->stage, at).p; /* for the batch's descriptor: a launch's argument */
    if (cuda_defer_desc(c, op, acc, elem_off, src, n, s) < 0)
        return;
    if (!c->bstaged) {
        c->bstart = at;
        c->bstaged = true;
    }
    staging_take(&c->stage, n * sizeof(float));
    c->bend = staging_used(&c->stage);
}

/* May small bytes be batched at stage.cur's `used`? Only right after the
 * batch's own (its bytes go to the GPU in one copy): otherwise the batch
 * is enqueued first. */
static void cuda_batch_contiguous(cuda_device *c)
{
    if (c->nb && c->bstaged && c->stage.cur && staging_used(&c->stage) != c->bend)
        cuda_emit_batch(c);
}

/* The peers' pending stream waits (cuda_peer_wait), enqueued now: before
 * anything that may read a peer's memory (cuda_emit_batch, which every op
 * that enqueues at once calls first). */
void cuda_peers_wait_now(cuda_device *c)
{
    while (c->waiting) {
        devpeer *p = c->waiting;
        c->waiting = p->wnext;
        p->wait_pending = false;
        p->wnext = NULL;
        if (!c->failed && c->gpu->ops->stream_wait(c->gpu, c->stream, p->ev) < 0)
            cuda_fail(c, c->gpu->err);
    }
}

/* Enqueue the batch: its bytes to the GPU in one copy, its descriptors
 * (chain by chain) in another through the meta ring, one psb_fold_batch
 * launch. The meta ring is a ring of its own so that this never needs the
 * staging ring to move on (which would need the batch enqueued first). */
void cuda_emit_batch(cuda_device *c)
{
    cuda_peers_wait_now(c); /* before anything that may read a peer's memory (cuda_peer_wait) */
    if (!c->nb || c->emitting)
        return;
    c->emitting = true;
    staging *k = &c->stage;
    assert(!c->bstaged || (k->cur && c->bend <= staging_used(k) && c->bstart < c->bend));
    size_t meta = c->nchain * sizeof(psb_fold_chain) + c->nb * sizeof(psb_fold_desc);
    meta = (meta + 63) & ~(size_t)63;
    if (c->bstaged && !c->failed &&
        c->gpu->ops->copy_h2d(c->gpu, c->stream, staging_dev_at(k, c->bstart), staging_host_at(k, c->bstart),
                              c->bend - c->bstart) < 0)
        cuda_fail(c, c->gpu->err);
    if (!c->failed && cuda_ring_room(c, &c->meta, meta) == 0) {
        staging *m = &c->meta;
        size_t mat = staging_used(m);
        psb_fold_chain *chains = (psb_fold_chain *)(void *)staging_host_at(m, mat);
        psb_fold_desc *descs = (psb_fold_desc *)(void *)staging_host_at(m, mat + c->nchain * sizeof(psb_fold_chain));
        /* psb_fold_desc is 32 bytes, a chain 8: descs start 8-aligned, and
         * the GPU reads them as such. */
        uint32_t at = 0;
        for (size_t ch = 0; ch < c->nchain; ch++) {
            chains[ch].first = at;
            chains[ch].count = c->ccount[ch];
            for (uint32_t i = c->chead[ch]; i != UINT32_MAX; i = c->bnext[i])
                descs[at++] = c->bdesc[i];
        }
        assert(at == c->nb);
        psb_launch l = {.kernel = PSB_K_FOLD_BATCH};
        l.u.batch.chains = staging_dev_at(m, mat).p;
        l.u.batch.descs = staging_dev_at(m, mat + c->nchain * sizeof(psb_fold_chain)).p;
        l.u.batch.nchains = (unsigned)c->nchain;
        if (c->gpu->ops->copy_h2d(c->gpu, c->stream, staging_dev_at(m, mat), staging_host_at(m, mat), meta) < 0 ||
            c->gpu->ops->launch(c->gpu, c->stream, &l) < 0)
            cuda_fail(c, c->gpu->err);
        staging_take(&c->meta, meta);
    }
    c->nb = c->nchain = 0;
    c->bstaged = false;
    c->batch_gen++;
    c->emitting = false;
}

/* ---- host bytes in ----------------------------------------------------------------------- */

uint8_t *cuda_recv_area(device *d, devbuf *dst, uint64_t off, size_t *max)
{
    cuda_device *c = (cuda_device *)d;
    assert(off < dst->bytes && dst->jobs == 0);
    size_t left = dst->bytes - off;
    size_t least = left < DEVICE_AREA_MIN ? left : DEVICE_AREA_MIN;
    c->area_dst = dst;
    c->area_off = off;
    if (c->failed || cuda_stage_room(c, least) < 0) {
        /* Bytes still have to go somewhere: they are dropped. */
        c->area_in_sink = true;
        c->area_max = *max = least;
        return c->sink;
    }
    size_t room = staging_left(&c->stage);
    c->area_in_sink = false;
    c->area_max = *max = room < left ? room : left;
    return staging_host_at(&c->stage, staging_used(&c->stage));
}

void cuda_recv_done(device *d, devbuf *dst, uint64_t off, size_t n)
{
    cuda_device *c = (cuda_device *)d;
    assert(c->area_dst == dst && c->area_off == off && n <= c->area_max);
    c->area_dst = NULL;
    dst->host_valid = false;
    if (c->area_in_sink || c->failed || n == 0)
        return;
    if (n <= CUDA_SMALL && off % sizeof(float) == 0 && n % sizeof(float) == 0) {
        /* Batched: a copy of whole floats at the end of this iteration. */
        cuda_batch_contiguous(c);
        cuda_defer(c, PSB_FOLD_COPY, dst, off / sizeof(float), n / sizeof(float), 0.0f);
        return;
    }
    cuda_emit_batch(c); /* what was folded into dst before these bytes */
    if (c->failed)
        return;
    uint8_t *h = staging_host_at(&c->stage, staging_used(&c->stage));
    if (c->gpu->ops->copy_h2d(c->gpu, c->stream, devmem_at(dst->dev, off), h, n) < 0) {
        cuda_fail(c, c->gpu->err);
        return;
    }
    staging_take(&c->stage, n);
}

void cuda_fold(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n, float s)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(acc->jobs == 0 && (elem_off + n) * sizeof(float) <= acc->bytes);
    acc->host_valid = false;
    if (c->failed || n == 0)
        return;
    if (n * sizeof(float) <= CUDA_SMALL) {
        /* Batched: the bytes into staging now, the fold at the end of the
         * iteration with the others. */
        cuda_batch_contiguous(c);
        if (cuda_stage_room(c, n * sizeof(float)) < 0)
            return;
        cuda_batch_contiguous(c); /* the room may be a new chunk */
        memcpy(staging_host_at(&c->stage, staging_used(&c->stage)), src, n * sizeof(float));
        cuda_defer(c, cuda_fold_op(op), acc, elem_off, n, s);
        return;
    }
    cuda_emit_batch(c); /* the small folds into acc before this one */
    while (n > 0 && !c->failed) {
        size_t take = n < CUDA_CHUNK / sizeof(float) ? n : CUDA_CHUNK / sizeof(float);
        const float *x = cuda_upload(c, src, take * sizeof(float));
        if (!x)
            return;
        psb_launch l = {.kernel = PSB_K_FOLD};
        l.u.fold.op = cuda_fold_op(op);
        l.u.fold.acc = cuda_f32(acc, elem_off);
        l.u.fold.src = x;
        l.u.fold.n = take;
        l.u.fold.s = s;
        if (c->gpu->ops->launch(c->gpu, c->stream, &l) < 0) {
            cuda_fail(c, c->gpu->err);
            return;
        }
        src += take * sizeof(float);
        elem_off += take;
        n -= take;
    }
}

/* A narrow fold's launches (cuda_fold_narrow_in, _out, _pair): src's n
 * 16-bit values read where they lie — a peer's GPU memory (CUDA IPC), in
 * one launch — or staged as they came from the host (half a float push's
 * bytes over PCIe) a chunk at a time; for each, the launch `fill` makes
 * for elements [elem_off, elem_off + take) read from x (device memory).
 * Never batched: the small folds and copies before it (into its
 * accumulator, its stash) are enqueued first (and any peer's pending
 * wait). */
typedef void (*cuda_narrow_fill)(psb_launch *l, const void *ctx, uint64_t elem_off, const uint16_t *x, size_t take);

static void cuda_narrow_launches(cuda_device *c, devsrc src, uint64_t elem_off, size_t n, cuda_narrow_fill fill,
                                 const void *ctx)
{
    if (c->failed || n == 0)
        return;
    cuda_emit_batch(c);
    const size_t chunk = src.peer ? n : CUDA_CHUNK / 2;
    assert(!src.peer || (src.at % 2 == 0 && src.at <= src.peer->bytes && n * 2 <= src.peer->bytes - src.at));
    while (n > 0 && !c->failed) {
        size_t take = n < chunk ? n : chunk;
        const uint16_t *x =
            src.peer ? (const uint16_t *)devmem_at(src.peer->base, src.at).p : cuda_upload(c, src.host, take * 2);
        if (!x)
            return;
        psb_launch l;
        fill(&l, ctx, elem_off, x, take);
        if (c->gpu->ops->launch(c->gpu, c->stream, &l) < 0) {
            cuda_fail(c, c->gpu->err);
            return;
        }
        if (src.host)
            src.host += take * 2;
        elem_off += take;
        n -= take;
    }
}

/* What a narrow fold's launches share beyond the chunk: its buffers, op,
 * type and scale. */
typedef struct cuda_narrow_args {
    device_fold_op op;
    devbuf *acc, *out, *stash;
    float s;
    half_type t;
} cuda_narrow_args;

static void cuda_fill_narrow_in(psb_launch *l, const void *ctx, uint64_t elem_off, const uint16_t *x, size_t take)
{
    const cuda_narrow_args *a = ctx;
    *l = (psb_launch){.kernel = PSB_K_FOLD_NARROW_IN};
    l->u.widen.op = cuda_fold_op(a->op);
    l->u.widen.bf = a->t == HALF_BF16;
    l->u.widen.acc = cuda_f32(a->acc, elem_off);
    l->u.widen.src = x;
    l->u.widen.n = take;
    l->u.widen.s = a->s;
}

/* device_fold_narrow (device.h): psb_fold_narrow_in widening on the GPU
 * as it folds into acc. */
void cuda_fold_narrow_in(cuda_device *c, device_fold_op op, devbuf *acc, uint64_t elem_off, devsrc src, size_t n,
                         float s, half_type t)
{
    c->area_dst = NULL;
    assert(t == HALF_FP16 || t == HALF_BF16);
    assert(acc->jobs == 0 && (elem_off + n) * sizeof(float) <= acc->bytes);
    acc->host_valid = false;
    cuda_narrow_args a = {.op = op, .acc = acc, .s = s, .t = t};
    cuda_narrow_launches(c, src, elem_off, n, cuda_fill_narrow_in, &a);
}

void cuda_fold_narrow(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                      float s, half_type t)
{
    cuda_fold_narrow_in((cuda_device *)d, op, acc, elem_off, (devsrc){.host = src}, n, s, t);
}

static void cuda_fill_narrow_out(psb_launch *l, const void *ctx, uint64_t elem_off, const uint16_t *x, size_t take)
{
    const cuda_narrow_args *a = ctx;
    *l = (psb_launch){.kernel = PSB_K_FOLD_NARROW_OUT};
    l->u.narrow.op = cuda_fold_op(a->op);
    l->u.narrow.bf = a->t == HALF_BF16;
    l->u.narrow.out = (uint16_t *)devmem_at(a->out->dev, elem_off * 2).p;
    l->u.narrow.acc = cuda_f32(a->acc, elem_off);
    l->u.narrow.src = x;
    l->u.narrow.n = take;
    l->u.narrow.s = a->s;
}

/* A narrow push's last fold (device.h): psb_fold_narrow_out widening,
 * folding and narrowing on the GPU into out; acc is read only. */
void cuda_fold_narrow_out_from(cuda_device *c, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off,
                               devsrc src, size_t n, float s, half_type t)
{
    c->area_dst = NULL;
    assert(op == FOLD_ADD_SCALE || op == FOLD_COPY_SCALE);
    assert(t == HALF_FP16 || t == HALF_BF16);
    assert(acc->jobs == 0 && out->jobs == 0);
    assert((elem_off + n) * sizeof(float) <= acc->bytes && (elem_off + n) * 2 <= out->bytes);
    out->host_valid = false;
    cuda_narrow_args a = {.op = op, .acc = acc, .out = out, .s = s, .t = t};
    cuda_narrow_launches(c, src, elem_off, n, cuda_fill_narrow_out, &a);
}

void cuda_fold_narrow_out(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off, const uint8_t *src,
                          size_t n, float s, half_type t)
{
    cuda_fold_narrow_out_from((cuda_device *)d, op, acc, out, elem_off, (devsrc){.host = src}, n, s, t);
}

static void cuda_fill_narrow_pair(psb_launch *l, const void *ctx, uint64_t elem_off, const uint16_t *x, size_t take)
{
    const cuda_narrow_args *a = ctx;
    *l = (psb_launch){.kernel = PSB_K_FOLD_NARROW_PAIR};
    l->u.pair.op = cuda_fold_op(a->op);
    l->u.pair.bf = a->t == HALF_BF16;
    l->u.pair.acc = a->op == FOLD_ADD ? cuda_f32(a->acc, elem_off) : NULL;
    l->u.pair.out = a->op == FOLD_ADD_SCALE ? (uint16_t *)devmem_at(a->out->dev, elem_off * 2).p : NULL;
    l->u.pair.stash = (const uint16_t *)devmem_at(a->stash->dev, elem_off * 2).p;
    l->u.pair.src = x;
    l->u.pair.n = take;
    l->u.pair.s = a->s;
}

/* device_fold_narrow_pair (device.h): psb_fold_narrow_pair adding the
 * push's values to the stash's on the GPU. */
void cuda_fold_narrow_pair_from(cuda_device *c, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                uint64_t elem_off, devsrc src, size_t n, float s, half_type t)
{
    c->area_dst = NULL;
    assert(op == FOLD_ADD || op == FOLD_ADD_SCALE);
    assert(t == HALF_FP16 || t == HALF_BF16);
    devbuf *dst = op == FOLD_ADD ? acc : out;
    assert(stash->jobs == 0 && dst->jobs == 0);
    assert((elem_off + n) * 2 <= stash->bytes && (elem_off + n) * (op == FOLD_ADD ? 4 : 2) <= dst->bytes);
    dst->host_valid = false;
    cuda_narrow_args a = {.op = op, .acc = acc, .out = out, .stash = stash, .s = s, .t = t};
    cuda_narrow_launches(c, src, elem_off, n, cuda_fill_narrow_pair, &a);
}

void cuda_fold_narrow_pair(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out, uint64_t elem_off,
                           const uint8_t *src, size_t n, float s, half_type t)
{
    cuda_fold_narrow_pair_from((cuda_device *)d, op, stash, acc, out, elem_off, (devsrc){.host = src}, n, s, t);
}
