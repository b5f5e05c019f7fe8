/* kind_average_batch.c — kind `average-batch`, the seed's
 * AverageBatchParameterServer: every push is kept in a buffer of its own
 * (a devbuf, received straight from the socket into the device's recv
 * area), and the last one to arrive starts the sum — in slot order, so the
 * bits of a mean do not depend on arrival order — on the device, into the
 * first push's buffer, made host-visible.
 *
 * Sparse pushes are kept in host buffers and checked as soon as their row
 * indices are in (a bad push is refused then, rather than failing
 * everybody's future at resolve time); at resolve time they are folded
 * into a device sparse accumulator, in slot order, and emitted on the
 * device.
 *
 * A narrow push (f16, bf16) is kept widened, in f32 (kind_stored_data
 * widens it as its bytes come), so the sum is the f32 path's exactly; the
 * mean is narrowed once into the answer.
 */
#include "server/kind.h"
#include "shared/clock.h"
#include "shared/mean.h"
#include "shared/sparse.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct avgb_future {
    struct kind *k;
    future *f;
    device_job job;
    devbuf *result;         /* the buffer the answer is written to */
    bool stays;             /* dense: the result stays on the device (kind_result_stays) */
    devsparse *sacc;        /* sparse: the coalesced rows */
    devbuf **srcs;          /* dense: the stored pushes in slot order */
    kind_slot stored[];     /* per slot: the raw push */
} avgb_future;

static frame_errcode avgb_admit(kind *k, const frame_hdr *h, uint64_t *batch, char *msg, size_t len)
{
    (void)k;
    (void)msg;
    (void)len;
    *batch = h->batch;
    return ERR_NONE;
}

static int avgb_push_begin(kind *k, push_ctx *p)
{
    future *f = p->f;
    uint32_t n = k->cfg.trainers;
    if (p->first) {
        avgb_future *st = calloc(1, sizeof *st + n * sizeof st->stored[0]);
        if (!st)
            return -1;
        st->k = k;
        st->f = f;
        f->kstate = st;
    }
    avgb_future *st = f->kstate;
    return kind_stored_begin(k, st->stored, p, f->layout == LAYOUT_SPARSE);
}

static uint8_t *avgb_push_direct(kind *k, push_ctx *p, uint64_t off, size_t *max)
{
    avgb_future *st = p->f->kstate;
    /* Sparse row indices go through push_data, which checks them once they
     * are all in. */
    uint64_t ibytes = p->f->layout == LAYOUT_SPARSE ? p->nnz * 8 : 0;
    return kind_stored_direct(k, st->stored, p, ibytes, off, max);
}

static void avgb_push_direct_done(kind *k, push_ctx *p, uint64_t off, size_t n)
{
    avgb_future *st = p->f->kstate;
    kind_stored_direct_done(k, st->stored, p, off, n);
}

static void avgb_push_peer(kind *k, push_ctx *p, devpeer *peer, uint64_t at)
{
    avgb_future *st = p->f->kstate;
    kind_stored_peer(k, st->stored, p, peer, at);
}

static int avgb_push_data(kind *k, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    future *f = p->f;
    avgb_future *st = f->kstate;
    kind_stored_data(k, st->stored, p, off, src, n);
    uint64_t ibytes = p->nnz * 8;
    if (f->layout == LAYOUT_SPARSE && off < ibytes && off + n >= ibytes) {
        int64_t bad;
        if (sparse_indices_check(st->stored[p->slot].host->data, p->nnz, f->rows, &bad) < 0) {
            snprintf(p->err, sizeof p->err, "row index %" PRId64 " outside 0..%" PRIu64, bad,
                     f->rows ? f->rows - 1 : 0);
            return -1;
        }
    }
    return 0;
}

static void avgb_push_abort(kind *k, push_ctx *p)
{
    avgb_future *st = p->f->kstate;
    if (st)
        kind_stored_abort(k, st->stored, p);
}

static void avgb_done(device_job *j)
{
    avgb_future *st = j->arg;
    kind *k = st->k;
    future *f = st->f;
    metrics_add(k->m_compute, kind_job_ms(j, f->t_resolve_ns));
    psbuf *result = NULL;
    const char *why = NULL;
    frame_errcode code = ERR_NONE;
    if (j->error) {
        why = j->error;
        code = ERR_DEVICE;
    } else if (f->layout == LAYOUT_SPARSE && j->u.emit.status < 0) {
        why = "out of memory computing the mean";
    } else {
        result = kind_result_take(k, st->result, st->stays);
        st->result = NULL;
        if (f->layout == LAYOUT_DENSE && f->dtype != HALF_FP32)
            result = kind_result_narrow(k, result, f->dtype); /* the f32 mean, narrowed once */
        if (!result) {
            why = "out of memory for the result";
            code = ERR_DEVICE;
        }
    }
    k->resolved(k->resolved_ctx, f, result, code, why);
}

/* Fold the stored sparse pushes (indices already checked) into a device
 * accumulator, in slot order. 0, or -1 out of memory. */
static int avgb_coalesce(kind *k, avgb_future *st, uint32_t n)
{
    future *f = st->f;
    if (!(st->sacc = device_sparse_new(k->dev)))
        return -1;
    device_sparse_reset(k->dev, st->sacc, f->rows, f->cols);
    uint32_t *slots = NULL;
    for (uint32_t i = 0; i < n; i++) {
        psbuf *pb = st->stored[i].host;
        if (!pb)
            continue;
        uint64_t nnz = pb->len / (8 + 4 * f->cols);
        uint32_t *ns = realloc(slots, (nnz ? nnz : 1) * sizeof *ns);
        int64_t bad;
        if (!ns || device_sparse_map(k->dev, st->sacc, pb->data, nnz, ns, &bad) < 0) {
            free(ns ? ns : slots);
            return -1;
        }
        slots = ns;
        device_sparse_fold(k->dev, st->sacc, slots, 0, pb->data + nnz * 8, nnz * f->cols);
    }
    free(slots);
    return 0;
}

static void avgb_resolve(kind *k, future *f)
{
    avgb_future *st = f->kstate;
    uint32_t n = k->cfg.trainers;
    memset(&st->job, 0, sizeof st->job);
    st->job.done = avgb_done;
    st->job.arg = st;
    device_job_for(&st->job, f->batch, f->bucket);
    if (f->layout == LAYOUT_DENSE) {
        st->srcs = malloc(n * sizeof *st->srcs);
        if (!st->srcs) {
            k->resolved(k->resolved_ctx, f, NULL, ERR_PEER_LOST, "out of memory computing the mean");
            return;
        }
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++)
            if (st->stored[i].dev)
                st->srcs[m++] = st->stored[i].dev;
        assert(m == k->expected);
        /* The first push becomes the accumulator and the result. */
        for (uint32_t i = 0; i < n && !st->result; i++)
            if (st->stored[i].dev) {
                st->result = st->stored[i].dev;
                st->stored[i].dev = NULL;
            }
        st->job.op = JOB_SUM_SCALE;
        st->job.u.sum.dst = st->result;
        st->job.u.sum.srcs = st->srcs;
        st->job.u.sum.nsrc = m;
        st->job.u.sum.n = f->count;
        st->job.u.sum.scale = mean_scale(n);
    } else {
        if (avgb_coalesce(k, st, n) < 0 ||
            !(st->result = device_buf_new(k->dev, device_sparse_result_size(k->dev, st->sacc)))) {
            k->resolved(k->resolved_ctx, f, NULL, ERR_PEER_LOST, "out of memory computing the mean");
            return;
        }
        st->job.op = JOB_SPARSE_EMIT;
        st->job.u.emit.acc = st->sacc;
        st->job.u.emit.out = st->result;
        st->job.u.emit.scale = mean_scale(n);
    }
    /* A narrow future's f32 mean is narrowed on the host (avgb_done): it
     * comes back, and its answer goes as host bytes even by CUDA IPC. */
    st->stays = f->dtype == HALF_FP32 && kind_result_stays(k, f, st->result);
    st->job.to_host = st->stays ? NULL : st->result;
    device_submit(k->dev, &st->job);
}

static void avgb_release(kind *k, future *f)
{
    avgb_future *st = f->kstate;
    if (!st)
        return;
    f->kstate = NULL;
    kind_stored_release(k, st->stored, k->cfg.trainers);
    device_buf_free(k->dev, st->result);
    device_sparse_free(k->dev, st->sacc);
    free(st->srcs);
    free(st);
}

static void avgb_destroy(kind *k) { free(k); }

static const kind_ops avgb_ops = {
    .name = "average-batch",
    .narrow = true,
    .admit = avgb_admit,
    .push_begin = avgb_push_begin,
    .push_direct = avgb_push_direct,
    .push_direct_done = avgb_push_direct_done,
    .push_data = avgb_push_data,
    .push_peer = avgb_push_peer,
    .push_abort = avgb_push_abort,
    .resolve = avgb_resolve,
    .release = avgb_release,
    .destroy = avgb_destroy,
};

kind *kind_average_batch_new(const kind_config *cfg, device *dev, char *err, size_t errlen)
{
    (void)cfg;
    kind *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    k->ops = &avgb_ops;
    k->dev = dev;
    return k;
}
