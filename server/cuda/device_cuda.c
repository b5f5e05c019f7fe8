/* device_cuda.c — the `cuda` device: the server's arithmetic on a GPU,
 * finished on a CUDA stream while the reactor goes on (device.h on
 * cugpu.h). This file is its job engine and its ops table; its buffers,
 * host bytes in and peers are the files server/cuda/cuda_int.h lists.
 *
 * Jobs are enqueued at the end of the reactor iteration, after the batch of
 * small folds (cuda_batch.c; device.h's ownership rules make that
 * reordering safe: nothing submitted after a job may touch its buffers): a
 * mark (shared/gpu/evring.h), the job's kernel, the copy of its to-host
 * buffer into the pinned image, another mark. Nothing waits.
 *
 * Completion is batched per reactor iteration too: the first deferred op
 * of an iteration makes the device's `flush` event active (libevent runs
 * it after the callbacks already active, before the next poll), which
 * enqueues the batch and the jobs, then one host function for every job
 * submitted so far; that function (on CUDA's callback thread) counts
 * itself done and writes an eventfd; the reactor reads the count and calls
 * the `done` of every job the finished host functions cover, in
 * submission order, with the GPU time between the job's two marks, then
 * the owner's `after` once. So the buckets that resolve in one iteration
 * cost one copy in, one launch, their copies back and one wake-up.
 *
 * Failures: an operation that cannot be queued, or a stream that fails
 * later (found by polling cugpu's query every CUDA_POLL_MS while work is
 * in flight: CUDA calls no host function after an error), fails the
 * device for good (cuda_fail) — a launch failure leaves the CUDA context
 * unusable. Every job in flight and every later one completes with `error`
 * naming the GPU and CUDA's words; the kinds fail their futures with the
 * code `device`; the log names the GPU once. The reactor never hangs on it.
 *
 * Threads: everything runs on the reactor thread except the host
 * function, which only bumps an atomic counter and writes the eventfd.
 */
#include "server/cuda/cuda_int.h"
#include "server/device_host.h"
#include "shared/log.h"

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

/* Pinned host images kept by their pool when free, after a drain. During
 * a session the pool keeps every free image (cudaFreeHost may synchronise
 * the device: never on the data path); a drain (reset, a session's end)
 * trims it to this. */
#define CUDA_PINNED_KEEP ((size_t)1 << 30)
/* How often the stream is asked for a failure while work is in flight. */
#define CUDA_POLL_MS 5

/* ---- jobs -------------------------------------------------------------------------------- */

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

/* Whether dst and every source are 16-byte aligned (psb_sum_scale's float4
 * path; device allocations are, buffers in the shared memory too). */
static int cuda_sum_vec(const float *dst, devbuf *const *srcs, uint32_t n)
{
    int vec = (uintptr_t)dst % 16 == 0;
    for (uint32_t i = 0; i < n; i++)
        vec &= (uintptr_t)cuda_f32(srcs[i], 0) % 16 == 0;
    return vec;
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

/* Scatter SGD (issue 44): the lookup's rows grouped on the host
 * (shared/rowgroup.h: each unique row's occurrences in position order,
 * each standing for its bag) and uploaded with the bags' gradients; one
 * launch, a thread per (row, column), each row's steps in the CPU's order.
 * 0, or -1 (the device failed). */
static int cuda_enqueue_scatter(cuda_device *c, const device_job *j)
{
    size_t nnz = j->u.bags.nnz, bags = j->u.bags.bags, cols = j->u.bags.cols;
    if (bags == 0 || nnz == 0)
        return 0; /* no row named: nothing to compute */
    /* one host scratch: the lists (nu <= nnz unique rows first: 8-byte
     * aligned), then each position's bag */
    int64_t *urows = malloc(nnz * 8 + (nnz + 1) * 4 + nnz * 4 + nnz * 4);
    if (!urows || rowgroup_sort(&c->rg, j->u.bags.idx, nnz) < 0) {
        free(urows);
        cuda_fail(c, "out of host memory grouping a lookup's rows");
        return -1;
    }
    uint32_t *uoff = (uint32_t *)(void *)(urows + nnz), *occ = uoff + nnz + 1, *bag_of = occ + nnz;
    for (size_t b = 0; b < bags; b++) {
        size_t end = b + 1 < bags ? (size_t)j->u.bags.off[b + 1] : nnz;
        assert((size_t)j->u.bags.off[b] <= end && end <= nnz); /* the kind checked the offsets */
        for (size_t i = (size_t)j->u.bags.off[b]; i < end; i++)
            bag_of[i] = (uint32_t)b;
    }
    size_t nu = c->rg.nu;
    rowgroup_csr(&c->rg, bag_of, 1, urows, uoff, occ);
    psb_launch l = {.kernel = PSB_K_SCATTER_SGD};
    l.u.rows.table = cuda_f32(j->u.bags.table, 0);
    l.u.rows.cols = cols;
    l.u.rows.nu = nu;
    l.u.rows.lr = j->u.bags.lr;
    int rc = -1;
    if ((l.u.rows.urows = cuda_upload(c, urows, nu * sizeof *urows)) &&
        (l.u.rows.uoff = cuda_upload(c, uoff, (nu + 1) * sizeof *uoff)) &&
        (l.u.rows.occ = cuda_upload(c, occ, nnz * sizeof *occ)) &&
        (l.u.rows.grad = cuda_upload(c, j->u.bags.grad, bags * cols * sizeof(float)))) {
        rc = c->gpu->ops->launch(c->gpu, c->stream, &l);
        if (rc < 0)
            cuda_fail(c, c->gpu->err);
    }
    free(urows);
    return rc;
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
        l.u.sum.vec = cuda_sum_vec(l.u.sum.dst, j->u.sum.srcs, j->u.sum.nsrc);
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
    case JOB_SCATTER_SGD:
        return cuda_enqueue_scatter(c, j);
    case JOB_GATHER:
        if (j->u.bags.bags == 0 || !j->u.bags.out)
            return 0; /* nothing to compute */
        l.kernel = PSB_K_GATHER;
        l.u.bags.table = cuda_f32(j->u.bags.table, 0);
        l.u.bags.cols = j->u.bags.cols;
        l.u.bags.nnz = j->u.bags.nnz;
        l.u.bags.bags = j->u.bags.bags;
        if (!(l.u.bags.idx = cuda_upload(c, j->u.bags.idx, j->u.bags.nnz * sizeof(int64_t))) ||
            !(l.u.bags.off = cuda_upload(c, j->u.bags.off, j->u.bags.bags * sizeof(int64_t))))
            return -1;
        l.u.bags.out = cuda_f32(j->u.bags.out, 0);
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
    /* The trace's device_job begins here: submitted, its enqueue on the
     * stream follows at the end of this loop iteration. */
    if (c->base.trace_job)
        c->base.trace_job(c->base.trace_ctx, j, false);
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
        if (c->base.trace_job)
            c->base.trace_job(c->base.trace_ctx, j, true);
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
    cuda_buf_drop_spares(c); /* on the stream: before it goes */
    if (c->stream)
        g->ops->stream_free(g, c->stream);
    cuda_batch_teardown(c);
    evring_free(&c->evs);
    while (c->rec_spare) {
        cuda_rec *r = c->rec_spare;
        c->rec_spare = r->next;
        free(r);
    }
    cuda_buf_teardown(c);
    free(c->fn_seq);
    rowgroup_free(&c->rg);
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

/* ---- peers: a close waits for the next job ----------------------------------------------- */

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
    cuda_peer_park(c, p, c->submitted + 1);
    device_job *j = calloc(1, sizeof *j);
    if (j) {
        j->op = JOB_BARRIER;
        j->trace_batch = j->trace_bucket = -1; /* the device's own: no batch */
        j->done = cuda_reap_done;
        cuda_submit(d, j);
    }
    cuda_peers_reap(c, false);
}

/* ---- the device -------------------------------------------------------------------------- */

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

/* Peers (CUDA IPC, device.h): opened, waited on and folded from by
 * cuda_peer.c, closed here (the engine's barrier), results lent from
 * cuda_buf.c's shared memory. */
static const devpeer_ops cuda_peer_ops = {
    .gpu_id = cuda_gpu_id,
    .open = cuda_peer_open,
    .close = cuda_peer_close,
    .wait = cuda_peer_wait,
    .fold = cuda_fold_peer,
    .copy = cuda_copy_peer,
    .fold_narrow = cuda_fold_narrow_peer,
    .fold_narrow_out = cuda_fold_narrow_out_peer,
    .fold_narrow_pair = cuda_fold_narrow_pair_peer,
    .share = cuda_share,
    .buf_lendable = cuda_buf_lendable,
    .buf_lend = cuda_buf_lend,
};

static const device_ops cuda_ops = {
    .name = "cuda",
    .buf_new = cuda_buf_new,
    .buf_free = cuda_buf_free,
    .buf_host = cuda_buf_host,
    .buf_take_host = cuda_buf_take_host,
    .recv_area = cuda_recv_area,
    .recv_done = cuda_recv_done,
    .fold = cuda_fold,
    .fold_narrow = cuda_fold_narrow,
    .fold_narrow_out = cuda_fold_narrow_out,
    .fold_narrow_pair = cuda_fold_narrow_pair,
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
    .peers = &cuda_peer_ops,
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
    atomic_init(&c->fns_done, 0);
    cuda_buf_init(c);
    c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->stream = gpu->ops->stream_new(gpu);
    if (!c->stream || evring_init(&c->evs, gpu, c->stream, 16, true) < 0) {
        snprintf(err, errlen, "--device cuda: GPU %d: %s", gpu->device, gpu->err);
        cuda_destroy(&c->base);
        return NULL;
    }
    bool sink = cuda_batch_init(c) == 0;
    if (c->efd >= 0) {
        c->wake_ev = event_new(base, c->efd, EV_READ | EV_PERSIST, cuda_on_wake, c);
        c->flush_ev = event_new(base, -1, 0, cuda_on_flush, c);
        c->poll_ev = evtimer_new(base, cuda_on_poll, c);
    }
    if (c->efd < 0 || !sink || !c->wake_ev || !c->flush_ev || !c->poll_ev || event_add(c->wake_ev, NULL) < 0) {
        snprintf(err, errlen, "cannot set up the cuda device: %s", c->efd < 0 ? strerror(errno) : "out of memory");
        cuda_destroy(&c->base);
        return NULL;
    }
    return &c->base;
}
