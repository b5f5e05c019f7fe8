/* device_cuda.c — the `cuda` device: the server's arithmetic on a GPU,
 * finished on a CUDA stream while the reactor goes on (device.h on
 * cugpu.h).
 *
 * Where memory lives (types, not conventions):
 *   devbuf->dev   device memory (a cache of handles with their memory:
 *                 cudaMalloc is slow and cudaFree synchronises, so a
 *                 steady state of rounds allocates nothing; one stream
 *                 orders every use, so memory freed by one bucket may be
 *                 reused by the next at once);
 *   devbuf->host  its pinned host image (a bufpool of cudaHostAlloc'd
 *                 memory), made at the first to-host job, sent to the
 *                 sockets by reference as the cpu device's are;
 *   staging       a ring of chunks, each pinned host memory with a device
 *                 twin of the same size: recv areas, fold sources, the
 *                 arrays a job uploads (source pointers, indices). A full
 *                 chunk is closed with an event; it is reused once that
 *                 event completes, and the ring grows by another chunk
 *                 rather than wait.
 *   devsparse     on the host (device_host.c), as device.h allows: a
 *                 sparse emit runs on the reactor at submit, into the
 *                 output's pinned image, and completes in stream order.
 *
 * The path of a bucket: a big recv_done enqueues the host-to-device copy of
 * the area; a big fold copies its source into staging, enqueues its copy
 * and the psb_fold kernel. Small ones (CUDA_SMALL bytes or less: the
 * buckets of a many-bucket model) are batched per reactor iteration, as
 * Redis batches its writes: their bytes go into staging one after the
 * other, and at the end of the iteration one copy takes them all to the
 * GPU and one psb_fold_batch launch applies them (folds into one buffer in
 * the order they came, buffers in parallel). Jobs too are enqueued at the
 * end of the iteration, after that batch (device.h's ownership rules make
 * that reordering safe: nothing submitted after a job may touch its
 * buffers): an event, the job's kernel, the copy of its to-host buffer
 * into the pinned image, another event. Nothing waits.
 *
 * Completion is batched per reactor iteration too: the first deferred op
 * of an iteration makes the device's `flush` event active (libevent runs
 * it after the callbacks already active, before the next poll), which
 * enqueues the batch and the jobs, then one host function for every job
 * submitted so far; that function (on CUDA's callback thread) counts
 * itself done and writes an eventfd; the reactor reads the count and calls
 * the `done` of every job the finished host functions cover, in
 * submission order, with the GPU time between the job's two events, then
 * the owner's `after` once. So the buckets that resolve in one iteration
 * cost one copy in, one launch, their copies back and one wake-up.
 *
 * Failures: an operation that cannot be queued, or a stream that fails
 * later (found by polling cugpu's query every CUDA_POLL_MS while work is
 * in flight: CUDA calls no host function after an error), fails the
 * device for good — a launch failure leaves the CUDA context unusable.
 * Every job in flight and every later one completes with `error` naming
 * the GPU and CUDA's words; the kinds fail their futures with the code
 * `device`; the log names the GPU once. The reactor never hangs on it.
 *
 * Peers (CUDA IPC, device.h): a trainer on this GPU exports the memory its
 * gradients live in and an event; the device opens both once (devpeer),
 * makes its stream wait for the event's latest record when the transport
 * says a push from it came (peer_wait), and folds from that memory with the
 * same kernel that folds from staging — the source pointer is the peer's.
 * Its own side is one allocation of shared memory (share: made at the
 * first export, `--gpu-share` bytes, handed out in ranges): while it has
 * room, buffers live there, and a result taken to the host takes its
 * device bytes along (psbuf.twin), so that peers read the mean where the
 * arithmetic wrote it; the range comes back with the psbuf's last
 * reference (cuda_twin_free) — after the transport made the stream wait
 * for every reader (docs/protocol.md). A peer is closed once the next job
 * submitted after its close has completed (every fold from it was
 * enqueued before that job), or at a drain.
 *
 * Threads: everything runs on the reactor thread except the host
 * function, which only bumps an atomic counter and writes the eventfd.
 */
#include "server/cuda/kernels_host.h"
#include "server/device_host.h"
#include "shared/gpu/evring.h"
#include "shared/gpu/staging.h"
#include "shared/log.h"
#include "shared/ranges.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A staging chunk's size (a recv area is at most this long). */
#define CUDA_CHUNK (4u << 20)
/* Folds and received areas of at most this many bytes are batched. */
#define CUDA_SMALL (16u * 1024u)
/* A batch's chunk of descriptors (a ring of its own: see cuda_emit_batch). */
#define CUDA_META_CHUNK (256u * 1024u)
/* Device memory kept in recycled handles; beyond it, freed. */
#define CUDA_CACHE_BYTES ((size_t)4 << 30)
/* Handles kept for reuse. */
#define CUDA_KEEP 1024
/* Pinned host images kept by their pool when free, after a drain. During
 * a session the pool keeps every free image (cudaFreeHost may synchronise
 * the device: never on the data path); a drain (reset, a session's end)
 * trims it to this. */
#define CUDA_PINNED_KEEP ((size_t)1 << 30)
/* How often the stream is asked for a failure while work is in flight. */
#define CUDA_POLL_MS 5
/* Buffers of at least this many bytes go into the shared memory while it
 * has room (smaller ones: the cache, as before; a result that small costs
 * less on the socket than a kernel launch). */
#define CUDA_SHARE_MIN 1024u
/* Ranges of the shared memory: a fold's kernel reads floats, 256-byte
 * aligned like every allocation of the cache. */
#define CUDA_SHARE_UNIT 256u

/* A peer's memory and event, opened here (device.h: devpeer). */
struct devpeer {
    devmem base;
    uint64_t bytes;
    cugpu_event *ev;
    uint64_t close_after; /* closing: once the job of this seq has completed */
    struct devpeer *next; /* the closing list */
};

/* A job in flight: the device's record of it. */
typedef struct cuda_rec {
    device_job *j;
    uint64_t seq;           /* 1, 2, ... in submission order */
    evmark t0, t1;          /* around its work and its to-host copy (0: none) */
    bool host_side;         /* a sparse emit: its output was written on the host */
    struct cuda_rec *next;
} cuda_rec;

typedef struct cuda_device {
    device base;
    cugpu *gpu;
    cugpu_stream *stream;
    struct event_base *evb;
    bufpool pinned;
    /* handles and their device memory */
    devbuf *spare;
    size_t nspare, spare_bytes;
    size_t live; /* devbufs and devsparses not freed */
    /* staging: bytes (stage) and the batches' descriptors (meta) */
    staging stage, meta;
    uint8_t *sink;                     /* recv areas once the device has failed */
    /* the batch of small folds of this iteration: stage.cur's bytes
     * [bstart, bend), descriptors in arrival order, chained per buffer */
    psb_fold_desc *bdesc;
    uint32_t *bnext;                   /* the next descriptor of its chain */
    size_t nb, bcap;
    uint32_t *chead, *ctail, *ccount;  /* per chain */
    size_t nchain, ccap;
    size_t bstart, bend;
    uint64_t batch_gen;                /* the batch's number (devbuf.chain_gen) */
    devbuf *area_dst;                  /* the recv area given last */
    uint64_t area_off;
    size_t area_max;
    bool area_in_sink;
    /* jobs */
    cuda_rec *head, *tail, *rec_spare;
    cuda_rec *unemitted; /* the first job not yet enqueued (they wait for the flush) */
    uint64_t submitted;  /* seq of the last job submitted */
    uint64_t flushed;    /* seq the host functions queued so far cover */
    uint64_t completed;  /* seq of the last job the GPU has finished */
    uint64_t *fn_seq;    /* per host function queued and not yet seen: the seq it covers */
    size_t fn_cap, fn_first, fn_count;
    atomic_uint_fast64_t fns_done; /* host functions run (CUDA's thread) */
    uint64_t fns_seen;
    evring evs;          /* the jobs' timing events: held until the job is finished */
    int efd;
    struct event *wake_ev, *flush_ev, *poll_ev;
    bool flush_armed;
    bool emitting;       /* in cuda_emit_batch */
    bool failed;
    char error[640];
    uint64_t allocs; /* device memory and staging chunks made (pinned images: the pool's count) */
    /* the shared memory (peers) */
    devmem share;         /* none: none made */
    ranges share_r;
    devpeer *closing;     /* peers closed by the transport, unmapped once folds from them are done */
    uint32_t npeers;      /* open (closing ones included) */
} cuda_device;

/* ---- failure ------------------------------------------------------------- */

/* The device fails for good: said once in the log; jobs in flight and every
 * later one complete with the reason (delivered by the wake event, never
 * inside the call that found the failure). */
static void cuda_fail(cuda_device *c, const char *why)
{
    if (!c->failed) {
        c->failed = true;
        snprintf(c->error, sizeof c->error, "GPU %d (%s) failed: %s", c->gpu->device, c->gpu->name, why);
        log_error("device cuda: %s; every bucket from now on fails", c->error);
    }
    if (c->wake_ev)
        event_active(c->wake_ev, 0, 0);
}

/* ---- staging ------------------------------------------------------------------- */

/* Room in ring r (staging.h); the device fails when there is none. */
static int cuda_ring_room(cuda_device *c, staging *r, size_t need)
{
    if (staging_room(r, need) < 0) {
        cuda_fail(c, r->err);
        return -1;
    }
    return 0;
}

static void cuda_emit_batch(cuda_device *c);

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
static void *cuda_upload(cuda_device *c, const void *src, size_t n)
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

/* A buffer's floats from element `elem_off` on, as a kernel's launch takes
 * them. */
static float *cuda_f32(const devbuf *b, uint64_t elem_off) { return devf32_at(devmem_f32(b->dev), elem_off).p; }

/* ---- the batch of small folds -------------------------------------------------- */

static void cuda_arm_flush(cuda_device *c);

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

/* A small fold (or copy) into acc's floats [elem_off, elem_off + n), whose
 * bytes were just put at stage.cur's `used`: into the batch, on acc's
 * chain; the bytes are taken from the ring. */
static void cuda_defer(cuda_device *c, int op, devbuf *acc, uint64_t elem_off, size_t n, float s)
{
    if (cuda_batch_grow(c) < 0) {
        cuda_fail(c, "out of host memory");
        return;
    }
    size_t at = staging_used(&c->stage);
    const void *src = staging_dev_at(&c->stage, at).p; /* for the batch's descriptor: a launch's argument */
    if (c->nb == 0)
        c->bstart = at;
    staging_take(&c->stage, n * sizeof(float));
    c->bend = staging_used(&c->stage);
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
}

/* May small bytes be batched at stage.cur's `used`? Only right after the
 * batch's own (its bytes go to the GPU in one copy): otherwise the batch
 * is enqueued first. */
static void cuda_batch_contiguous(cuda_device *c)
{
    if (c->nb && c->stage.cur && staging_used(&c->stage) != c->bend)
        cuda_emit_batch(c);
}

/* Enqueue the batch: its bytes to the GPU in one copy, its descriptors
 * (chain by chain) in another through the meta ring, one psb_fold_batch
 * launch. The meta ring is a ring of its own so that this never needs the
 * staging ring to move on (which would need the batch enqueued first). */
static void cuda_emit_batch(cuda_device *c)
{
    if (!c->nb || c->emitting)
        return;
    c->emitting = true;
    staging *k = &c->stage;
    assert(k->cur && c->bend <= staging_used(k) && c->bstart < c->bend);
    size_t meta = c->nchain * sizeof(psb_fold_chain) + c->nb * sizeof(psb_fold_desc);
    meta = (meta + 63) & ~(size_t)63;
    if (!c->failed &&
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
    c->batch_gen++;
    c->emitting = false;
}

/* ---- buffers -------------------------------------------------------------------- */

static void *cuda_pinned_alloc(void *ctx, size_t bytes)
{
    cuda_device *c = ctx;
    return c->gpu->ops->host_alloc(c->gpu, bytes);
}

static void cuda_pinned_free(void *ctx, void *p)
{
    cuda_device *c = ctx;
    c->gpu->ops->host_free(c->gpu, p);
}

/* A buffer in the shared memory, or NULL when it has no room (or there is
 * none). */
static devbuf *cuda_buf_new_shared(cuda_device *c, size_t bytes)
{
    if (devmem_is_none(c->share) || bytes < CUDA_SHARE_MIN)
        return NULL;
    uint64_t off = ranges_alloc(&c->share_r, bytes);
    if (off == RANGES_NONE)
        return NULL;
    devbuf *b = calloc(1, sizeof *b);
    if (!b) {
        ranges_free(&c->share_r, off);
        return NULL;
    }
    b->dev = devmem_at(c->share, off);
    b->dev_cap = (bytes + CUDA_SHARE_UNIT - 1) / CUDA_SHARE_UNIT * CUDA_SHARE_UNIT;
    b->share_off = off;
    b->bytes = bytes;
    c->live++;
    return b;
}

static devbuf *cuda_buf_new(device *d, size_t bytes)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    devbuf *shared = cuda_buf_new_shared(c, bytes);
    if (shared)
        return shared;
    /* The recycled handle whose memory fits best, no more than twice the
     * size (the bufpool's rule: a bucket finds last round's memory). */
    devbuf **best = NULL;
    for (devbuf **pp = &c->spare; *pp; pp = &(*pp)->next) {
        devbuf *b = *pp;
        if (b->dev_cap >= bytes && b->dev_cap / 2 <= bytes && (!best || b->dev_cap < (*best)->dev_cap))
            best = pp;
    }
    devbuf *b;
    if (best) {
        b = *best;
        *best = b->next;
        c->nspare--;
        c->spare_bytes -= b->dev_cap;
    } else {
        if (!(b = calloc(1, sizeof *b)))
            return NULL;
        size_t cap = bytes ? (bytes + 255) & ~(size_t)255 : 256;
        if (devmem_is_none(b->dev = c->gpu->ops->dev_alloc_async(c->gpu, c->stream, cap))) {
            log_warn("device cuda: %s", c->gpu->err);
            free(b);
            return NULL;
        }
        b->dev_cap = cap;
        c->allocs++;
    }
    b->host = NULL;
    b->bytes = bytes;
    b->jobs = 0;
    b->host_valid = false;
    b->share_off = RANGES_NONE;
    b->host_only = false;
    b->chain_gen = 0;
    b->next = NULL;
    c->live++;
    return b;
}

/* The handle back to the cache, with its device memory (or freed). */
static void cuda_handle_recycle(cuda_device *c, devbuf *b)
{
    assert(b->jobs == 0);
    assert(!b->host);
    /* Small folds into it still waiting for the flush go first: its memory
     * may be freed, or handed out again, now. */
    if (c->nb && b->chain_gen == c->batch_gen)
        cuda_emit_batch(c);
    b->chain_gen = 0;
    c->live--;
    if (b->share_off != RANGES_NONE) {
        /* Reused by work queued on the stream from now on: after every
         * use of it so far. */
        ranges_free(&c->share_r, b->share_off);
        free(b);
        return;
    }
    if (devmem_is_none(b->dev)) {
        free(b); /* lent: its range went with the host image (psbuf.twin) */
        return;
    }
    if (c->nspare < CUDA_KEEP && c->spare_bytes + b->dev_cap <= CUDA_CACHE_BYTES) {
        b->next = c->spare;
        c->spare = b;
        c->nspare++;
        c->spare_bytes += b->dev_cap;
        return;
    }
    /* In stream order: after the jobs queued on it, without waiting. */
    c->gpu->ops->dev_free_async(c->gpu, c->stream, b->dev);
    free(b);
}

static void cuda_buf_free(device *d, devbuf *b)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    if (b->host) {
        psbuf_unref(b->host);
        b->host = NULL;
    }
    cuda_handle_recycle(c, b);
}

static psbuf *cuda_buf_host(device *d, devbuf *b)
{
    ((cuda_device *)d)->area_dst = NULL;
    assert(b->host && b->host_valid && b->jobs == 0);
    return b->host;
}

static psbuf *cuda_buf_take_host(device *d, devbuf *b)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(b->host && b->host_valid && b->jobs == 0);
    psbuf *host = b->host;
    b->host = NULL;
    if (b->share_off != RANGES_NONE && !b->host_only) {
        /* The device bytes go along: peers read the result there. */
        assert(!host->twin);
        host->twin = b->share_off + 1;
        b->share_off = RANGES_NONE;
        b->dev = devmem_none();
    }
    cuda_handle_recycle(c, b);
    return host;
}

static int cuda_host_image(cuda_device *c, devbuf *b);

static bool cuda_buf_lendable(device *d, devbuf *b)
{
    (void)d;
    return b->share_off != RANGES_NONE && !b->host_only;
}

static psbuf *cuda_buf_lend(device *d, devbuf *b)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(cuda_buf_lendable(d, b) && b->jobs == 0);
    /* A host image of the right length from the pinned pool (recycled:
     * nothing is copied into it), carrying the device bytes. */
    if (!b->host && cuda_host_image(c, b) < 0) {
        cuda_buf_free(d, b);
        return NULL;
    }
    b->host_valid = true;
    psbuf *host = cuda_buf_take_host(d, b);
    assert(host->twin);
    host->twin_only = true;
    return host;
}

/* bufpool_mem.twin_free: a lent result's range, back (device.h). */
static void cuda_twin_free(void *ctx, uint64_t twin)
{
    cuda_device *c = ctx;
    assert(twin && !devmem_is_none(c->share));
    uint64_t len = ranges_free(&c->share_r, twin - 1);
    assert(len > 0);
    (void)len;
}

/* ---- host bytes in ------------------------------------------------------------------- */

static uint8_t *cuda_recv_area(device *d, devbuf *dst, uint64_t off, size_t *max)
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

static void cuda_recv_done(device *d, devbuf *dst, uint64_t off, size_t n)
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

static const int cuda_fold_ops[] = {
    [FOLD_COPY] = PSB_FOLD_COPY,
    [FOLD_ADD] = PSB_FOLD_ADD,
    [FOLD_ADD_SCALE] = PSB_FOLD_ADD_SCALE,
    [FOLD_COPY_SCALE] = PSB_FOLD_COPY_SCALE,
};

static void cuda_fold(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                      float s)
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
        cuda_defer(c, cuda_fold_ops[op], acc, elem_off, n, s);
        return;
    }
    cuda_emit_batch(c); /* the small folds into acc before this one */
    while (n > 0 && !c->failed) {
        size_t take = n < CUDA_CHUNK / sizeof(float) ? n : CUDA_CHUNK / sizeof(float);
        const float *x = cuda_upload(c, src, take * sizeof(float));
        if (!x)
            return;
        psb_launch l = {.kernel = PSB_K_FOLD};
        l.u.fold.op = cuda_fold_ops[op];
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

/* ---- sparse accumulators: on the host --------------------------------------------------- */

static devsparse *cuda_sparse_new(device *d)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    devsparse *s = device_host_sparse_new();
    if (s)
        c->live++;
    return s;
}

static void cuda_sparse_free(device *d, devsparse *s)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(s->jobs == 0);
    c->live--;
    device_host_sparse_free(s);
}

static void cuda_sparse_reset(device *d, devsparse *s, uint64_t rows, uint64_t cols)
{
    ((cuda_device *)d)->area_dst = NULL;
    sparse_acc_reset(&s->acc, rows, cols);
}

static int cuda_sparse_map(device *d, devsparse *s, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad)
{
    ((cuda_device *)d)->area_dst = NULL;
    return sparse_acc_map(&s->acc, idx, nnz, slots, bad);
}

static void cuda_sparse_fold(device *d, devsparse *s, const uint32_t *slots, uint64_t e0, const uint8_t *src,
                             size_t n)
{
    ((cuda_device *)d)->area_dst = NULL;
    sparse_acc_add(&s->acc, slots, e0, src, n);
}

static uint64_t cuda_sparse_result_size(device *d, devsparse *s)
{
    ((cuda_device *)d)->area_dst = NULL;
    return sparse_acc_result_size(&s->acc);
}

/* ---- jobs ------------------------------------------------------------------------------- */

static void cuda_claim(devbuf *b, bool writes, void *arg)
{
    (void)arg;
    b->jobs++;
    if (writes)
        b->host_valid = false;
}

static void cuda_unclaim(devbuf *b, bool writes, void *arg)
{
    (void)writes;
    (void)arg;
    assert(b->jobs > 0);
    b->jobs--;
}

/* The pinned image of b (made now if it has none). 0, or -1. */
static int cuda_host_image(cuda_device *c, devbuf *b)
{
    if (b->host)
        return 0;
    if (!(b->host = bufpool_get(&c->pinned, b->bytes))) {
        char why[600];
        snprintf(why, sizeof why, "no pinned host memory for a %zu-byte result: %s", b->bytes, c->gpu->err);
        cuda_fail(c, why);
        return -1;
    }
    return 0;
}

/* The device pointers of a job's sources, uploaded: a device array. */
static const float *const *cuda_upload_srcs(cuda_device *c, devbuf *const *srcs, uint32_t n)
{
    const void *ptrs[64];
    const void **p = n <= 64 ? ptrs : malloc(n * sizeof *p);
    if (!p) {
        cuda_fail(c, "out of host memory");
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        p[i] = cuda_f32(srcs[i], 0);
    const float *const *dev = cuda_upload(c, p, n * sizeof *p);
    if (p != ptrs)
        free(p);
    return dev;
}

/* A dense embedding step: the gradient zeroed, the bags' gradients summed
 * into it, the step over the whole table — three launches in stream order
 * (kernels.cu). 0, or -1 (the device failed). */
static int cuda_enqueue_dense(cuda_device *c, const device_job *j)
{
    size_t n = j->u.bags.rows * j->u.bags.cols;
    psb_launch z = {.kernel = PSB_K_ZERO}, g = {.kernel = PSB_K_BAG_GRAD}, sgd = {.kernel = PSB_K_DENSE_SGD};
    z.u.dense.table = cuda_f32(j->u.bags.gsum, 0);
    z.u.dense.n = n;
    g.u.bags.table = cuda_f32(j->u.bags.gsum, 0);
    g.u.bags.cols = j->u.bags.cols;
    g.u.bags.nnz = j->u.bags.nnz;
    g.u.bags.bags = j->u.bags.bags;
    sgd.u.dense.table = cuda_f32(j->u.bags.table, 0);
    sgd.u.dense.gsum = cuda_f32(j->u.bags.gsum, 0);
    sgd.u.dense.n = n;
    sgd.u.dense.lr = j->u.bags.lr;
    const cugpu_ops *o = c->gpu->ops;
    if (o->launch(c->gpu, c->stream, &z) < 0) {
        cuda_fail(c, c->gpu->err);
        return -1;
    }
    if (j->u.bags.bags > 0) { /* no bag: a zero gradient, the step alone */
        if (!(g.u.bags.idx = cuda_upload(c, j->u.bags.idx, j->u.bags.nnz * sizeof(int64_t))) ||
            !(g.u.bags.off = cuda_upload(c, j->u.bags.off, j->u.bags.bags * sizeof(int64_t))) ||
            !(g.u.bags.grad = cuda_upload(c, j->u.bags.grad, j->u.bags.bags * j->u.bags.cols * sizeof(float))))
            return -1;
        if (o->launch(c->gpu, c->stream, &g) < 0) {
            cuda_fail(c, c->gpu->err);
            return -1;
        }
    }
    if (o->launch(c->gpu, c->stream, &sgd) < 0) {
        cuda_fail(c, c->gpu->err);
        return -1;
    }
    return 0;
}

/* Enqueue a job's work. 0, or -1 (the device failed). */
static int cuda_enqueue_work(cuda_device *c, cuda_rec *r)
{
    device_job *j = r->j;
    psb_launch l = {0};
    switch (j->op) {
    case JOB_BARRIER:
        return 0;
    case JOB_SUM_SCALE:
        l.kernel = PSB_K_SUM_SCALE;
        l.u.sum.dst = cuda_f32(j->u.sum.dst, 0);
        if (!(l.u.sum.srcs = cuda_upload_srcs(c, j->u.sum.srcs, j->u.sum.nsrc)))
            return -1;
        l.u.sum.nsrc = j->u.sum.nsrc;
        l.u.sum.n = j->u.sum.n;
        l.u.sum.scale = j->u.sum.scale;
        break;
    case JOB_SPARSE_EMIT:
        /* On the host, now: the accumulator is host memory and complete
         * (its folds ran on this thread); the result goes straight into
         * the output's pinned image. */
        if (cuda_host_image(c, j->u.emit.out) < 0)
            return -1;
        assert(j->u.emit.out->bytes == sparse_acc_result_size(&j->u.emit.acc->acc));
        j->u.emit.status = sparse_acc_emit(&j->u.emit.acc->acc, j->u.emit.scale, j->u.emit.out->host->data);
        j->u.emit.out->host_only = true;
        r->host_side = true;
        return 0;
    case JOB_SGD:
        l.kernel = PSB_K_SGD;
        l.u.sgd.param = cuda_f32(j->u.sgd.param, 0);
        l.u.sgd.buf = cuda_f32(j->u.sgd.momentum_buf, 0);
        if (!(l.u.sgd.srcs = cuda_upload_srcs(c, j->u.sgd.srcs, j->u.sgd.nsrc)))
            return -1;
        l.u.sgd.nsrc = j->u.sgd.nsrc;
        l.u.sgd.n = j->u.sgd.n;
        l.u.sgd.scale = j->u.sgd.scale;
        l.u.sgd.lr = j->u.sgd.lr;
        l.u.sgd.momentum = j->u.sgd.momentum;
        l.u.sgd.first = j->u.sgd.first;
        l.u.sgd.out = j->u.sgd.out ? cuda_f32(j->u.sgd.out, 0) : NULL;
        break;
    case JOB_GATHER:
    case JOB_SCATTER_SGD:
        if (j->u.bags.bags == 0 || (j->op == JOB_GATHER && !j->u.bags.out))
            return 0; /* nothing to compute */
        l.kernel = j->op == JOB_GATHER ? PSB_K_GATHER : PSB_K_SCATTER_SGD;
        l.u.bags.table = cuda_f32(j->u.bags.table, 0);
        l.u.bags.cols = j->u.bags.cols;
        l.u.bags.nnz = j->u.bags.nnz;
        l.u.bags.bags = j->u.bags.bags;
        if (!(l.u.bags.idx = cuda_upload(c, j->u.bags.idx, j->u.bags.nnz * sizeof(int64_t))) ||
            !(l.u.bags.off = cuda_upload(c, j->u.bags.off, j->u.bags.bags * sizeof(int64_t))))
            return -1;
        if (j->op == JOB_GATHER) {
            l.u.bags.out = cuda_f32(j->u.bags.out, 0);
        } else {
            if (!(l.u.bags.grad = cuda_upload(c, j->u.bags.grad, j->u.bags.bags * j->u.bags.cols * sizeof(float))))
                return -1;
            l.u.bags.lr = j->u.bags.lr;
        }
        break;
    case JOB_DENSE_SGD:
        return cuda_enqueue_dense(c, j);
    }
    if (c->gpu->ops->launch(c->gpu, c->stream, &l) < 0) {
        cuda_fail(c, c->gpu->err);
        return -1;
    }
    return 0;
}

/* A job's work, its to-host copy, and the events around them. */
static void cuda_enqueue(cuda_device *c, cuda_rec *r)
{
    device_job *j = r->j;
    const cugpu_ops *g = c->gpu->ops;
    if (evring_mark(&c->evs, &r->t0) < 0) {
        cuda_fail(c, c->gpu->err);
        return;
    }
    if (cuda_enqueue_work(c, r) < 0)
        return;
    devbuf *h = j->to_host;
    /* A sparse emit's output is already in its image. */
    if (h && !(r->host_side && h == j->u.emit.out)) {
        if (cuda_host_image(c, h) < 0)
            return;
        if (g->copy_d2h(c->gpu, c->stream, h->host->data, h->dev, h->bytes) < 0) {
            cuda_fail(c, c->gpu->err);
            return;
        }
    }
    if (evring_mark(&c->evs, &r->t1) < 0)
        cuda_fail(c, c->gpu->err);
}

static void cuda_submit(device *d, device_job *j)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    cuda_rec *r = c->rec_spare;
    if (r)
        c->rec_spare = r->next;
    else if (!(r = calloc(1, sizeof *r))) {
        /* No record: nothing can track the job; the device fails with a
         * reason rather than lose it (done runs here, its only way out). */
        cuda_fail(c, "out of host memory");
        j->error = c->error;
        j->gpu_ms = -1;
        j->done(j);
        return;
    }
    memset(r, 0, sizeof *r);
    r->j = j;
    r->seq = ++c->submitted;
    j->error = NULL;
    j->gpu_ms = -1;
    device_host_job_bufs(j, cuda_claim, NULL);
    if (j->op == JOB_SPARSE_EMIT)
        j->u.emit.acc->jobs++;
    /* Enqueued at the end of the iteration (cuda_emit_jobs). */
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    if (!c->unemitted)
        c->unemitted = r;
    if (c->failed) {
        event_active(c->wake_ev, 0, 0);
        return;
    }
    cuda_arm_flush(c);
    if (!evtimer_pending(c->poll_ev, NULL)) {
        struct timeval tv = {0, CUDA_POLL_MS * 1000};
        evtimer_add(c->poll_ev, &tv);
    }
}

/* Enqueue the batch, then every job submitted and not yet enqueued, in
 * order. */
static void cuda_emit_jobs(cuda_device *c)
{
    cuda_emit_batch(c);
    for (cuda_rec *r = c->unemitted; r && !c->failed; r = r->next)
        cuda_enqueue(c, r);
    c->unemitted = NULL;
}

/* Hand a finished (or failed) job back: its buffers, its GPU time. */
static void cuda_finish(cuda_device *c, cuda_rec *r)
{
    device_job *j = r->j;
    device_host_job_bufs(j, cuda_unclaim, NULL);
    if (j->op == JOB_SPARSE_EMIT)
        j->u.emit.acc->jobs--;
    if (c->failed) {
        j->error = c->error;
    } else {
        float ms;
        if (r->t0 && r->t1 && evring_elapsed(&c->evs, r->t0, r->t1, &ms) == 0)
            j->gpu_ms = ms;
        if (j->to_host)
            j->to_host->host_valid = true;
    }
    /* Jobs finish in the order their marks were recorded: every mark up to
     * this job's last is done with. */
    evring_release(&c->evs, r->t1 ? r->t1 : r->t0);
    r->next = c->rec_spare;
    c->rec_spare = r;
}

static void cuda_peers_reap(cuda_device *c, bool all);

/* Every job the GPU has finished (or all, once failed), in order; then the
 * owner's `after`. */
static void cuda_deliver(cuda_device *c)
{
    uint64_t done = atomic_load(&c->fns_done);
    while (c->fns_seen < done && c->fn_count) {
        c->completed = c->fn_seq[c->fn_first];
        c->fn_first = (c->fn_first + 1) % c->fn_cap;
        c->fn_count--;
        c->fns_seen++;
    }
    bool any = false;
    if (c->failed)
        c->unemitted = NULL; /* they fail with the others */
    while (c->head && (c->failed || c->head->seq <= c->completed)) {
        cuda_rec *r = c->head;
        c->head = r->next;
        if (!c->head)
            c->tail = NULL;
        device_job *j = r->j;
        cuda_finish(c, r);
        j->done(j);
        any = true;
    }
    if (c->closing)
        cuda_peers_reap(c, false);
    if (any && c->base.after)
        c->base.after(c->base.after_ctx);
}

/* CUDA's callback thread: one more host function has run. */
static void cuda_host_fn(void *arg)
{
    cuda_device *c = arg;
    atomic_fetch_add(&c->fns_done, 1);
    uint64_t one = 1;
    ssize_t w = write(c->efd, &one, sizeof one);
    (void)w; /* an eventfd counter does not overflow at this rate */
}

/* The end of this reactor iteration will flush (once). */
static void cuda_arm_flush(cuda_device *c)
{
    if (!c->flush_armed) {
        c->flush_armed = true;
        event_active(c->flush_ev, 0, 0);
    }
}

/* End of the reactor iteration: the batch of small folds, the jobs, and one
 * host function for every job submitted since the last one. */
static void cuda_on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cuda_device *c = arg;
    c->flush_armed = false;
    cuda_emit_jobs(c);
    if (c->failed || c->submitted == c->flushed)
        return;
    if (c->fn_count == c->fn_cap) {
        size_t cap = c->fn_cap ? c->fn_cap * 2 : 64;
        uint64_t *q = malloc(cap * sizeof *q);
        if (!q) {
            cuda_fail(c, "out of host memory");
            return;
        }
        for (size_t i = 0; i < c->fn_count; i++)
            q[i] = c->fn_seq[(c->fn_first + i) % c->fn_cap];
        free(c->fn_seq);
        c->fn_seq = q;
        c->fn_cap = cap;
        c->fn_first = 0;
    }
    if (c->gpu->ops->host_fn(c->gpu, c->stream, cuda_host_fn, c) < 0) {
        cuda_fail(c, c->gpu->err);
        return;
    }
    c->fn_seq[(c->fn_first + c->fn_count) % c->fn_cap] = c->submitted;
    c->fn_count++;
    c->flushed = c->submitted;
}

static void cuda_on_wake(evutil_socket_t fd, short what, void *arg)
{
    cuda_device *c = arg;
    uint64_t n;
    if (fd >= 0 && (what & EV_READ)) {
        ssize_t r = read(c->efd, &n, sizeof n);
        (void)r; /* EAGAIN: activated by hand, nothing written */
    }
    cuda_deliver(c);
}

/* While work is in flight: has the stream failed? (No host function runs
 * after an error, so completions alone would never say.) */
static void cuda_on_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cuda_device *c = arg;
    if (!c->head || c->failed)
        return;
    if (c->gpu->ops->query(c->gpu, c->stream) < 0) {
        cuda_fail(c, c->gpu->err);
        return;
    }
    struct timeval tv = {0, CUDA_POLL_MS * 1000};
    evtimer_add(c->poll_ev, &tv);
}

static void cuda_drain(device *d)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    if (c->stream)
        cuda_emit_jobs(c);
    if (!c->failed && c->stream && c->gpu->ops->sync(c->gpu, c->stream) < 0)
        cuda_fail(c, c->gpu->err);
    /* Every host function queued has run (or never will: failed). */
    c->fns_seen = atomic_load(&c->fns_done);
    c->fn_count = 0;
    c->completed = c->flushed = c->submitted;
    if (!c->failed) {
        staging_reset(&c->stage);
        staging_reset(&c->meta);
    }
    cuda_deliver(c);
    assert(!c->head);
    cuda_peers_reap(c, true); /* the stream is idle: no fold reads them */
    bufpool_trim(&c->pinned, CUDA_PINNED_KEEP); /* the GPU is idle: freeing waits for nothing */
}

static void cuda_destroy(device *d)
{
    cuda_device *c = (cuda_device *)d;
    cuda_drain(d);
    assert(c->live == 0);
    assert(c->npeers == 0); /* every connection closed its peer */
    cugpu *g = c->gpu;
    while (c->spare) {
        devbuf *b = c->spare;
        c->spare = b->next;
        g->ops->dev_free_async(g, c->stream, b->dev); /* a handle exists only with a stream */
        free(b);
    }
    if (c->stream)
        g->ops->stream_free(g, c->stream);
    staging_free(&c->stage);
    staging_free(&c->meta);
    free(c->bdesc);
    free(c->bnext);
    free(c->chead);
    free(c->ctail);
    free(c->ccount);
    evring_free(&c->evs);
    while (c->rec_spare) {
        cuda_rec *r = c->rec_spare;
        c->rec_spare = r->next;
        free(r);
    }
    bufpool_destroy(&c->pinned); /* every lent twin is back */
    if (!devmem_is_none(c->share)) {
        assert(c->share_r.used_bytes == 0);
        g->ops->dev_free_ipc(g, c->share);
        ranges_destroy(&c->share_r);
    }
    free(c->fn_seq);
    free(c->sink);
    if (c->wake_ev)
        event_free(c->wake_ev);
    if (c->flush_ev)
        event_free(c->flush_ev);
    if (c->poll_ev)
        event_free(c->poll_ev);
    if (c->efd >= 0)
        close(c->efd);
    cugpu_destroy(g);
    free(c);
}

/* ---- peers (CUDA IPC) ---------------------------------------------------------------------- */

static const char *cuda_gpu_id(device *d)
{
    return ((cuda_device *)d)->gpu->uuid;
}

static devpeer *cuda_peer_open(device *d, const uint8_t *mem, uint64_t bytes, const uint8_t *ev, char *err,
                               size_t errlen)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    const cugpu_ops *o = c->gpu->ops;
    devpeer *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cugpu_ipc_handle hm, he;
    memcpy(hm.bytes, mem, sizeof hm.bytes);
    memcpy(he.bytes, ev, sizeof he.bytes);
    if (c->failed) {
        snprintf(err, errlen, "%s", c->error);
        free(p);
        return NULL;
    }
    if (devmem_is_none(p->base = o->ipc_open(c->gpu, &hm, bytes))) {
        snprintf(err, errlen, "GPU memory: %s", c->gpu->err);
        free(p);
        return NULL;
    }
    if (!(p->ev = o->event_open(c->gpu, &he))) {
        snprintf(err, errlen, "event: %s", c->gpu->err);
        o->ipc_close(c->gpu, p->base);
        free(p);
        return NULL;
    }
    p->bytes = bytes;
    c->npeers++;
    return p;
}

static void cuda_peer_unmap(cuda_device *c, devpeer *p)
{
    assert(c->npeers > 0);
    c->npeers--;
    c->gpu->ops->event_free(c->gpu, p->ev);
    c->gpu->ops->ipc_close(c->gpu, p->base);
    free(p);
}

/* Closed peers whose folds are all done (every one of them, after a drain
 * or once the device failed: nothing runs any more). */
static void cuda_peers_reap(cuda_device *c, bool all)
{
    for (devpeer **pp = &c->closing; *pp;) {
        devpeer *p = *pp;
        if (all || c->failed || c->completed >= p->close_after) {
            *pp = p->next;
            cuda_peer_unmap(c, p);
        } else {
            pp = &p->next;
        }
    }
}

/* The device's own barrier after a peer's close (cuda_peer_close). */
static void cuda_reap_done(device_job *j)
{
    free(j);
}

static void cuda_peer_close(device *d, devpeer *p)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    /* Folds from p were enqueued before the next job (jobs go on the
     * stream after every fold before them): unmapped once it completes —
     * never waiting here. That job is one of the device's own, a barrier
     * submitted now: a trainer that leaves last must not keep its memory
     * mapped until the next session's first bucket (a drain reaps it too,
     * and does where the barrier cannot be allocated). */
    cuda_emit_batch(c);
    p->close_after = c->submitted + 1;
    p->next = c->closing;
    c->closing = p;
    device_job *j = calloc(1, sizeof *j);
    if (j) {
        j->op = JOB_BARRIER;
        j->done = cuda_reap_done;
        cuda_submit(d, j);
    }
    cuda_peers_reap(c, false);
}

static void cuda_peer_wait(device *d, devpeer *p)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    if (c->failed)
        return;
    if (c->gpu->ops->stream_wait(c->gpu, c->stream, p->ev) < 0)
        cuda_fail(c, c->gpu->err);
}

static void cuda_fold_peer(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p, uint64_t at,
                           size_t n, float s)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(acc->jobs == 0 && (elem_off + n) * sizeof(float) <= acc->bytes);
    assert(at % sizeof(float) == 0 && at <= p->bytes && n * sizeof(float) <= p->bytes - at);
    acc->host_valid = false;
    if (c->failed || n == 0)
        return;
    cuda_emit_batch(c); /* the small folds into acc before this one */
    psb_launch l = {.kernel = PSB_K_FOLD};
    l.u.fold.op = cuda_fold_ops[op];
    l.u.fold.acc = cuda_f32(acc, elem_off);
    l.u.fold.src = devmem_f32(devmem_at(p->base, at)).p;
    l.u.fold.n = n;
    l.u.fold.s = s;
    if (c->gpu->ops->launch(c->gpu, c->stream, &l) < 0)
        cuda_fail(c, c->gpu->err);
}

static int cuda_share(device *d, uint64_t want, uint8_t *mem, uint64_t *bytes, char *err, size_t errlen)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    const cugpu_ops *o = c->gpu->ops;
    if (devmem_is_none(c->share)) {
        if (c->failed) {
            snprintf(err, errlen, "%s", c->error);
            return -1;
        }
        want = (want + CUDA_SHARE_UNIT - 1) / CUDA_SHARE_UNIT * CUDA_SHARE_UNIT;
        if (!want) {
            snprintf(err, errlen, "no GPU memory to share (--gpu-share 0)");
            return -1;
        }
        if (devmem_is_none(c->share = o->dev_alloc_ipc(c->gpu, want))) {
            snprintf(err, errlen, "%" PRIu64 " bytes of GPU memory to share: %s", want, c->gpu->err);
            return -1;
        }
        if (ranges_init(&c->share_r, want, CUDA_SHARE_UNIT) < 0) {
            o->dev_free_ipc(c->gpu, c->share);
            c->share = devmem_none();
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        c->allocs++;
    }
    cugpu_ipc_handle h;
    if (o->ipc_export(c->gpu, c->share, &h) < 0) {
        snprintf(err, errlen, "%s", c->gpu->err);
        return -1;
    }
    memcpy(mem, h.bytes, sizeof h.bytes);
    *bytes = c->share_r.size;
    return 0;
}

static void cuda_describe(device *d, char *buf, size_t len)
{
    cuda_device *c = (cuda_device *)d;
    snprintf(buf, len, "cuda (GPU %d: %s)", c->gpu->device, c->gpu->name);
}

static uint64_t cuda_allocs(device *d)
{
    cuda_device *c = (cuda_device *)d;
    return c->allocs + c->stage.allocs + c->meta.allocs + c->pinned.allocs;
}

static const device_ops cuda_ops = {
    .name = "cuda",
    .buf_new = cuda_buf_new,
    .buf_free = cuda_buf_free,
    .buf_host = cuda_buf_host,
    .buf_take_host = cuda_buf_take_host,
    .recv_area = cuda_recv_area,
    .recv_done = cuda_recv_done,
    .fold = cuda_fold,
    .sparse_new = cuda_sparse_new,
    .sparse_free = cuda_sparse_free,
    .sparse_reset = cuda_sparse_reset,
    .sparse_map = cuda_sparse_map,
    .sparse_fold = cuda_sparse_fold,
    .sparse_result_size = cuda_sparse_result_size,
    .submit = cuda_submit,
    .drain = cuda_drain,
    .destroy = cuda_destroy,
    .describe = cuda_describe,
    .allocs = cuda_allocs,
    .gpu_id = cuda_gpu_id,
    .peer_open = cuda_peer_open,
    .peer_close = cuda_peer_close,
    .peer_wait = cuda_peer_wait,
    .fold_peer = cuda_fold_peer,
    .share = cuda_share,
    .buf_lendable = cuda_buf_lendable,
    .buf_lend = cuda_buf_lend,
};

device *device_cuda_new(struct event_base *base, cugpu *gpu, char *err, size_t errlen)
{
    cuda_device *c = calloc(1, sizeof *c);
    if (!c) {
        cugpu_destroy(gpu);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->base.ops = &cuda_ops;
    c->gpu = gpu;
    c->evb = base;
    c->efd = -1;
    c->batch_gen = 1; /* a handle's chain_gen 0: in no batch */
    atomic_init(&c->fns_done, 0);
    bufpool_mem mem = {.alloc = cuda_pinned_alloc, .free = cuda_pinned_free, .twin_free = cuda_twin_free, .ctx = c};
    bufpool_init_mem(&c->pinned, SIZE_MAX, &mem); /* trimmed in drains only */
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->sink = malloc(DEVICE_AREA_MIN);
    c->stream = gpu->ops->stream_new(gpu);
    if (!c->stream || evring_init(&c->evs, gpu, c->stream, 16, true) < 0) {
        snprintf(err, errlen, "--device cuda: GPU %d: %s", gpu->device, gpu->err);
        cuda_destroy(&c->base);
        return NULL;
    }
    /* The reactor never waits for staging (limit 0: the rings grow). */
    staging_init(&c->stage, gpu, c->stream, CUDA_CHUNK, 0);
    staging_init(&c->meta, gpu, c->stream, CUDA_META_CHUNK, 0);
    if (c->efd >= 0) {
        c->wake_ev = event_new(base, c->efd, EV_READ | EV_PERSIST, cuda_on_wake, c);
        c->flush_ev = event_new(base, -1, 0, cuda_on_flush, c);
        c->poll_ev = evtimer_new(base, cuda_on_poll, c);
    }
    if (c->efd < 0 || !c->sink || !c->wake_ev || !c->flush_ev || !c->poll_ev || event_add(c->wake_ev, NULL) < 0) {
        snprintf(err, errlen, "cannot set up the cuda device: %s", c->efd < 0 ? strerror(errno) : "out of memory");
        cuda_destroy(&c->base);
        return NULL;
    }
    return &c->base;
}
