/* cuda_buf.c — the cuda device's buffers (server/cuda/cuda_int.h): device
 * memory, its pinned host images, the shared memory peers read, and the
 * sparse accumulators.
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
 *   devsparse     on the host (device_host.c), as device.h allows: a
 *                 sparse emit runs on the reactor at submit, into the
 *                 output's pinned image, and completes in stream order.
 *
 * The shared memory (CUDA IPC, device.h): one allocation, made at the
 * first export (cuda_share: `--gpu-share` bytes, handed out in ranges).
 * While it has room, buffers live there, and a result taken to the host
 * takes its device bytes along (psbuf.twin), so that peers read the mean
 * where the arithmetic wrote it; the range comes back with the psbuf's last
 * reference (cuda_twin_free) — after the transport made the stream wait for
 * every reader (docs/protocol.md). A result may also be lent: a host image
 * that carries only the device bytes (cuda_buf_lend).
 *
 * Calls down into cuda_batch.c only (the batch, the failure).
 */
#include "server/cuda/cuda_int.h"
#include "server/device_host.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Device memory kept in recycled handles; beyond it, freed. */
#define CUDA_CACHE_BYTES ((size_t)4 << 30)
/* Handles kept for reuse. */
#define CUDA_KEEP 1024
/* Buffers of at least this many bytes go into the shared memory while it
 * has room (smaller ones: the cache, as before; a result that small costs
 * less on the socket than a kernel launch). */
#define CUDA_SHARE_MIN 1024u

/* ---- the pinned pool --------------------------------------------------------------------- */

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

/* bufpool_mem.twin_free: a lent result's range, back (device.h). */
static void cuda_twin_free(void *ctx, uint64_t twin)
{
    cuda_device *c = ctx;
    assert(twin && !devmem_is_none(c->share));
    uint64_t len = ranges_free(&c->share_r, twin - 1);
    assert(len > 0);
    (void)len;
}

void cuda_buf_init(cuda_device *c)
{
    bufpool_mem mem = {.alloc = cuda_pinned_alloc, .free = cuda_pinned_free, .twin_free = cuda_twin_free, .ctx = c};
    bufpool_init_mem(&c->pinned, SIZE_MAX, &mem); /* trimmed in drains only */
}

void cuda_buf_drop_spares(cuda_device *c)
{
    cugpu *g = c->gpu;
    while (c->spare) {
        devbuf *b = c->spare;
        c->spare = b->next;
        g->ops->dev_free_async(g, c->stream, b->dev); /* a handle exists only with a stream */
        free(b);
    }
    c->nspare = 0;
    c->spare_bytes = 0;
}

void cuda_buf_teardown(cuda_device *c)
{
    bufpool_destroy(&c->pinned); /* every lent twin is back */
    if (!devmem_is_none(c->share)) {
        assert(c->share_r.used_bytes == 0);
        c->gpu->ops->dev_free_ipc(c->gpu, c->share);
        ranges_destroy(&c->share_r);
    }
}

/* ---- buffers ----------------------------------------------------------------------------- */

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

devbuf *cuda_buf_new(device *d, size_t bytes)
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

void cuda_buf_free(device *d, devbuf *b)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    if (b->host) {
        psbuf_unref(b->host);
        b->host = NULL;
    }
    cuda_handle_recycle(c, b);
}

psbuf *cuda_buf_host(device *d, devbuf *b)
{
    ((cuda_device *)d)->area_dst = NULL;
    assert(b->host && b->host_valid && b->jobs == 0);
    return b->host;
}

psbuf *cuda_buf_take_host(device *d, devbuf *b)
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

/* The pinned image of b (made now if it has none). 0, or -1. */
int cuda_host_image(cuda_device *c, devbuf *b)
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

bool cuda_buf_lendable(device *d, devbuf *b)
{
    (void)d;
    return b->share_off != RANGES_NONE && !b->host_only;
}

psbuf *cuda_buf_lend(device *d, devbuf *b)
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

/* ---- the shared memory ------------------------------------------------------------------- */

int cuda_share(device *d, uint64_t want, uint8_t *mem, uint64_t *bytes, char *err, size_t errlen)
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

/* ---- sparse accumulators: on the host ---------------------------------------------------- */

devsparse *cuda_sparse_new(device *d)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    devsparse *s = device_host_sparse_new();
    if (s)
        c->live++;
    return s;
}

void cuda_sparse_free(device *d, devsparse *s)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(s->jobs == 0);
    c->live--;
    device_host_sparse_free(s);
}

void cuda_sparse_reset(device *d, devsparse *s, uint64_t rows, uint64_t cols)
{
    ((cuda_device *)d)->area_dst = NULL;
    sparse_acc_reset(&s->acc, rows, cols);
}

int cuda_sparse_map(device *d, devsparse *s, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad)
{
    ((cuda_device *)d)->area_dst = NULL;
    return sparse_acc_map(&s->acc, idx, nnz, slots, bad);
}

void cuda_sparse_fold(device *d, devsparse *s, const uint32_t *slots, uint64_t e0, const uint8_t *src, size_t n)
{
    ((cuda_device *)d)->area_dst = NULL;
    sparse_acc_add(&s->acc, slots, e0, src, n);
}

uint64_t cuda_sparse_result_size(device *d, devsparse *s)
{
    ((cuda_device *)d)->area_dst = NULL;
    return sparse_acc_result_size(&s->acc);
}
