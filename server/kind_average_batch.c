/* kind_average_batch.c — kind `average-batch`, the seed's
 * AverageBatchParameterServer: every push is kept in a buffer of its own
 * (received straight from the socket), and the last one to arrive starts
 * the sum — in slot order, so the bits of a mean do not depend on arrival
 * order — on the device.
 *
 * Sparse pushes are checked as soon as their row indices are in (a bad
 * push is refused then, rather than failing everybody's future at resolve
 * time), coalesced on the reactor at resolve time and emitted on the
 * device.
 */
#include "server/kind.h"
#include "shared/clock.h"
#include "shared/mean.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct avgb_future {
    struct kind *k;
    future *f;
    device_job job;
    psbuf *result;          /* the buffer the answer is written to */
    sparse_acc sacc;        /* sparse: the coalesced rows */
    bool sacc_used;
    const float **srcs;     /* dense: the stored pushes in slot order */
    psbuf *stored[];        /* per slot: the raw push */
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
    return kind_stored_begin(k, st->stored, p);
}

static uint8_t *avgb_push_direct(kind *k, push_ctx *p, uint64_t off, size_t *max)
{
    (void)k;
    avgb_future *st = p->f->kstate;
    /* Sparse row indices go through push_data, which checks them once they
     * are all in. */
    uint64_t ibytes = p->f->layout == LAYOUT_SPARSE ? p->nnz * 8 : 0;
    return kind_stored_direct(st->stored, p, ibytes, off, max);
}

static void avgb_push_direct_done(kind *k, push_ctx *p, uint64_t off, size_t n)
{
    (void)k;
    (void)p;
    (void)off;
    (void)n; /* the bytes are where they belong */
}

static int avgb_push_data(kind *k, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    (void)k;
    future *f = p->f;
    avgb_future *st = f->kstate;
    memcpy(st->stored[p->slot]->data + off, src, n);
    uint64_t ibytes = p->nnz * 8;
    if (f->layout == LAYOUT_SPARSE && off < ibytes && off + n >= ibytes) {
        int64_t bad;
        if (sparse_indices_check(st->stored[p->slot]->data, p->nnz, f->rows, &bad) < 0) {
            snprintf(p->err, sizeof p->err, "row index %" PRId64 " outside 0..%" PRIu64, bad,
                     f->rows ? f->rows - 1 : 0);
            return -1;
        }
    }
    return 0;
}

static void avgb_push_abort(kind *k, push_ctx *p)
{
    (void)k;
    avgb_future *st = p->f->kstate;
    if (st)
        kind_stored_abort(st->stored, p);
}

static void avgb_done(device_job *j)
{
    avgb_future *st = j->arg;
    kind *k = st->k;
    future *f = st->f;
    metrics_add(k->m_compute, clock_ms(f->t_resolve_ns, clock_now_ns()));
    psbuf *result = st->result;
    st->result = NULL;
    const char *why = NULL;
    if (f->layout == LAYOUT_SPARSE && j->u.emit.status < 0) {
        psbuf_unref(result);
        result = NULL;
        why = "out of memory computing the mean";
    }
    k->resolved(k->resolved_ctx, f, result, why);
}

/* Coalesce the stored sparse pushes (indices already checked). */
static int avgb_coalesce(avgb_future *st, uint32_t n)
{
    future *f = st->f;
    sparse_acc_init(&st->sacc);
    st->sacc_used = true;
    sparse_acc_reset(&st->sacc, f->rows, f->cols);
    uint32_t *slots = NULL;
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        psbuf *pb = st->stored[i];
        if (!pb)
            continue;
        uint64_t nnz = pb->len / (8 + 4 * f->cols);
        uint32_t *ns = realloc(slots, (nnz ? nnz : 1) * sizeof *ns);
        int64_t bad;
        if (!ns || sparse_acc_map(&st->sacc, pb->data, nnz, ns, &bad) < 0) {
            free(ns ? ns : slots);
            return -1;
        }
        slots = ns;
        sparse_acc_add(&st->sacc, slots, 0, pb->data + nnz * 8, nnz * f->cols);
    }
    free(slots);
    return rc;
}

static void avgb_resolve(kind *k, future *f)
{
    avgb_future *st = f->kstate;
    uint32_t n = k->cfg.trainers;
    memset(&st->job, 0, sizeof st->job);
    st->job.done = avgb_done;
    st->job.arg = st;
    if (f->layout == LAYOUT_DENSE) {
        st->srcs = malloc(n * sizeof *st->srcs);
        if (!st->srcs) {
            k->resolved(k->resolved_ctx, f, NULL, "out of memory computing the mean");
            return;
        }
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++)
            if (st->stored[i])
                st->srcs[m++] = (const float *)(void *)st->stored[i]->data;
        assert(m == k->expected);
        /* The first push becomes the accumulator and the result. */
        for (uint32_t i = 0; i < n && !st->result; i++)
            if (st->stored[i]) {
                st->result = st->stored[i];
                st->stored[i] = NULL;
            }
        st->job.op = JOB_SUM_SCALE;
        st->job.u.sum.dst = (float *)(void *)st->result->data;
        st->job.u.sum.srcs = st->srcs;
        st->job.u.sum.nsrc = m;
        st->job.u.sum.n = f->count;
        st->job.u.sum.scale = mean_scale(n);
    } else {
        if (avgb_coalesce(st, n) < 0 ||
            !(st->result = bufpool_get(k->pool, sparse_acc_result_size(&st->sacc)))) {
            k->resolved(k->resolved_ctx, f, NULL, "out of memory computing the mean");
            return;
        }
        st->job.op = JOB_SPARSE_EMIT;
        st->job.u.emit.acc = &st->sacc;
        st->job.u.emit.out = st->result->data;
        st->job.u.emit.scale = mean_scale(n);
    }
    device_submit(k->dev, &st->job);
}

static void avgb_release(kind *k, future *f)
{
    avgb_future *st = f->kstate;
    if (!st)
        return;
    f->kstate = NULL;
    kind_stored_release(st->stored, k->cfg.trainers);
    if (st->result)
        psbuf_unref(st->result);
    if (st->sacc_used)
        sparse_acc_free(&st->sacc);
    free(st->srcs);
    free(st);
}

static void avgb_destroy(kind *k) { free(k); }

static const kind_ops avgb_ops = {
    .name = "average-batch",
    .admit = avgb_admit,
    .push_begin = avgb_push_begin,
    .push_direct = avgb_push_direct,
    .push_direct_done = avgb_push_direct_done,
    .push_data = avgb_push_data,
    .push_abort = avgb_push_abort,
    .resolve = avgb_resolve,
    .release = avgb_release,
    .destroy = avgb_destroy,
};

kind *kind_average_batch_new(const kind_config *cfg, char *err, size_t errlen)
{
    (void)cfg;
    kind *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    k->ops = &avgb_ops;
    return k;
}
