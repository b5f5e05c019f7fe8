/* cuda_int.h — the cuda device's own header (server/cuda/): its struct,
 * and what its files call in one another. The files, lowest first; each
 * calls only into those below it:
 *
 *   cuda_batch.c   host bytes in: staging, recv areas, folds, the batch
 *                  of small folds (and the device's failure);
 *   cuda_buf.c     buffers: device memory, pinned images, the shared memory
 *                  peers read, lending, the sparse accumulators (host);
 *   cuda_peer.c    peers (CUDA IPC): opened, waited for, folded from,
 *                  closed once the GPU is past them;
 *   device_cuda.c  the job engine (submission, the flush at the end of a
 *                  reactor iteration, completion), drains, the device's
 *                  ops table.
 *
 * The GPU itself is shared/gpu/cugpu.h; staging and the jobs' timing events
 * are the rings both roles use (shared/gpu/staging.h, shared/gpu/evring.h).
 * Everything runs on the reactor thread except the host function the
 * engine queues (device_cuda.c).
 */
#ifndef PSBENCH_SERVER_CUDA_INT_H
#define PSBENCH_SERVER_CUDA_INT_H

#include "server/cuda/kernels_host.h"
#include "server/device_host.h"
#include "shared/gpu/evring.h"
#include "shared/gpu/staging.h"
#include "shared/ranges.h"
#include "shared/rowgroup.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A staging chunk's size (a recv area is at most this long). */
#define CUDA_CHUNK (4u << 20)
/* Folds (from the host or a peer) and received areas of at most this many
 * bytes are batched (cuda_batch.c). */
#define CUDA_SMALL (16u * 1024u)
/* Ranges of the shared memory: a fold's kernel reads floats, 256-byte
 * aligned like every allocation of the cache. */
#define CUDA_SHARE_UNIT 256u

struct event_base;
struct event;

/* A peer's memory and event, opened here (device.h: devpeer). */
struct devpeer {
    devmem base;
    uint64_t bytes;
    cugpu_event *ev;
    uint64_t close_after; /* closing: once the job of this seq has completed */
    struct devpeer *next; /* the closing list */
    bool wait_pending;    /* a push from it came: the stream waits for its event before the next op */
    struct devpeer *wnext; /* the waiting list */
};

/* A job in flight: the device's record of it. */
typedef struct cuda_rec {
    device_job *j;
    uint64_t seq;   /* 1, 2, ... in submission order */
    evmark t0, t1;  /* around its work and its to-host copy (0: none) */
    bool host_side; /* a sparse emit: its output was written on the host */
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
    uint8_t *sink; /* recv areas once the device has failed */
    /* the batch of small folds of this iteration: stage.cur's bytes
     * [bstart, bend) where bstaged (a small fold from a peer's memory has
     * no staged bytes: its descriptor names the peer's), descriptors in
     * arrival order, chained per buffer */
    psb_fold_desc *bdesc;
    uint32_t *bnext; /* the next descriptor of its chain */
    size_t nb, bcap;
    uint32_t *chead, *ctail, *ccount; /* per chain */
    size_t nchain, ccap;
    size_t bstart, bend;
    bool bstaged;
    uint64_t batch_gen; /* the batch's number (devbuf.chain_gen) */
    devbuf *area_dst;   /* the recv area given last */
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
    evring evs; /* the jobs' timing events: held until the job is finished */
    int efd;
    struct event *wake_ev, *flush_ev, *poll_ev;
    bool flush_armed;
    bool emitting; /* in cuda_emit_batch */
    bool failed;
    char error[640];
    uint64_t allocs; /* device memory and staging chunks made (pinned images: the pool's count) */
    /* the shared memory (peers) */
    devmem share; /* none: none made */
    ranges share_r;
    devpeer *closing; /* peers closed by the transport, unmapped once folds from them are done */
    devpeer *waiting; /* peers whose stream wait is pending (cuda_peer_wait) */
    uint32_t npeers;  /* open (closing ones included) */
    rowgroup rg;      /* scatter SGD: the lookup's rows grouped on the host (device_cuda.c) */
} cuda_device;

/* A buffer's floats from element `elem_off` on, as a kernel's launch takes
 * them. */
static inline float *cuda_f32(const devbuf *b, uint64_t elem_off) { return devf32_at(devmem_f32(b->dev), elem_off).p; }

/* device.h's fold op as the kernels spell it. */
static inline int cuda_fold_op(device_fold_op op)
{
    static const int ops[] = {
        [FOLD_COPY] = PSB_FOLD_COPY,
        [FOLD_ADD] = PSB_FOLD_ADD,
        [FOLD_ADD_SCALE] = PSB_FOLD_ADD_SCALE,
        [FOLD_COPY_SCALE] = PSB_FOLD_COPY_SCALE,
    };
    return ops[op];
}

/* ---- cuda_batch.c ---- */

/* The device fails for good: said once in the log; jobs in flight and every
 * later one complete with the reason (delivered by the wake event, never
 * inside the call that found the failure). */
void cuda_fail(cuda_device *c, const char *why);
/* The staging rings and the failed device's sink (c->stream made). 0, or
 * -1 (out of memory). */
int cuda_batch_init(cuda_device *c);
/* Frees what cuda_batch_init made and the batch's arrays (the stream gone). */
void cuda_batch_teardown(cuda_device *c);
/* n host bytes to the GPU through staging, now: their device address, or
 * NULL (the device failed). */
void *cuda_upload(cuda_device *c, const void *src, size_t n);
/* The end of this reactor iteration will flush (once): device_cuda.c's
 * flush event made active. */
void cuda_arm_flush(cuda_device *c);
/* The peers' pending stream waits enqueued (cuda_peer_wait: before
 * anything that may read a peer's memory; cuda_emit_batch calls it first). */
void cuda_peers_wait_now(cuda_device *c);
/* A small fold from n floats at device address src (a peer's GPU memory:
 * cuda_peer.c) into the batch. 0, or -1 (the device failed). */
int cuda_defer_desc(cuda_device *c, int op, devbuf *acc, uint64_t elem_off, const void *src, size_t n, float s);
/* Enqueue the batch of small folds (nothing when it is empty). */
void cuda_emit_batch(cuda_device *c);
uint8_t *cuda_recv_area(device *d, devbuf *dst, uint64_t off, size_t *max);
void cuda_recv_done(device *d, devbuf *dst, uint64_t off, size_t n);
void cuda_fold(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n, float s);
void cuda_fold_narrow(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                      float s, half_type t);
void cuda_fold_narrow_out(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off, const uint8_t *src,
                          size_t n, float s, half_type t);
void cuda_fold_narrow_pair(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out, uint64_t elem_off,
                           const uint8_t *src, size_t n, float s, half_type t);
/* The narrow folds from either source (host bytes, staged; a peer's
 * memory, read in place): what the device ops above and the peers' below
 * (cuda_peer.c) call. */
void cuda_fold_narrow_in(cuda_device *c, device_fold_op op, devbuf *acc, uint64_t elem_off, devsrc src, size_t n,
                         float s, half_type t);
void cuda_fold_narrow_out_from(cuda_device *c, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off,
                               devsrc src, size_t n, float s, half_type t);
void cuda_fold_narrow_pair_from(cuda_device *c, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                uint64_t elem_off, devsrc src, size_t n, float s, half_type t);

/* ---- cuda_buf.c ---- */

/* The pinned pool (before anything can fail: cuda_buf_teardown destroys it). */
void cuda_buf_init(cuda_device *c);
/* The cached handles' device memory freed on the stream (before it goes). */
void cuda_buf_drop_spares(cuda_device *c);
/* The pinned pool and the shared memory (every twin back, no range used). */
void cuda_buf_teardown(cuda_device *c);
/* The pinned image of b (made now if it has none). 0, or -1 (the device
 * failed). */
int cuda_host_image(cuda_device *c, devbuf *b);
devbuf *cuda_buf_new(device *d, size_t bytes);
void cuda_buf_free(device *d, devbuf *b);
psbuf *cuda_buf_host(device *d, devbuf *b);
psbuf *cuda_buf_take_host(device *d, devbuf *b);
bool cuda_buf_lendable(device *d, devbuf *b);
psbuf *cuda_buf_lend(device *d, devbuf *b);
int cuda_share(device *d, uint64_t want, uint8_t *mem, uint64_t *bytes, char *err, size_t errlen);
devsparse *cuda_sparse_new(device *d);
void cuda_sparse_free(device *d, devsparse *s);
void cuda_sparse_reset(device *d, devsparse *s, uint64_t rows, uint64_t cols);
int cuda_sparse_map(device *d, devsparse *s, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad);
void cuda_sparse_fold(device *d, devsparse *s, const uint32_t *slots, uint64_t e0, const uint8_t *src, size_t n);
uint64_t cuda_sparse_result_size(device *d, devsparse *s);

/* ---- cuda_peer.c ---- */

const char *cuda_gpu_id(device *d);
devpeer *cuda_peer_open(device *d, const uint8_t *mem, uint64_t bytes, const uint8_t *ev, char *err, size_t errlen);
/* A peer the transport closed, unmapped once the job of seq `after` has
 * completed (cuda_peers_reap). */
void cuda_peer_park(cuda_device *c, devpeer *p, uint64_t after);
/* Closed peers whose folds are all done (every one of them, with `all`,
 * after a drain, or once the device failed: nothing runs any more). */
void cuda_peers_reap(cuda_device *c, bool all);
void cuda_peer_wait(device *d, devpeer *p);
void cuda_fold_peer(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p, uint64_t at, size_t n,
                    float s);
void cuda_copy_peer(device *d, devbuf *dst, uint64_t off, devpeer *p, uint64_t at, size_t bytes);
void cuda_fold_narrow_peer(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p, uint64_t at,
                           size_t n, float s, half_type t);
void cuda_fold_narrow_out_peer(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off, devpeer *p,
                               uint64_t at, size_t n, float s, half_type t);
void cuda_fold_narrow_pair_peer(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                uint64_t elem_off, devpeer *p, uint64_t at, size_t n, float s, half_type t);

#endif
