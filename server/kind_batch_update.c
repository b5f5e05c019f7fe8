/* kind_batch_update.c — kind `batch-update`, the seed's
 * BatchUpdateParameterServer (parameter_server_test.py): the server owns
 * the parameters of Linear(in, out) — its part of them when there are
 * several servers — and takes the optimizer step itself.
 *
 * One future is open at a time: the round. Every push joins it; each push
 * is kept in a devbuf of its own (received straight from the socket into
 * the device's recv area). When `expected` (batch_update_size) pushes are
 * in, one job goes to the device: the mean of the gradients (summed in
 * slot order: the same bits whatever the arrival order) and one step of
 * SGD with momentum, which also copies the new parameters into the round's
 * answer (a devbuf made host-visible by the job), all in one pass over
 * memory. The next round opens at once; its step queues behind this one
 * on the device.
 *
 * The parameters and momentum buffer are devbufs, written only by device
 * jobs, or by their initialisation (a host fill written through the
 * device) once the futures layer has drained the device. `latest` — the
 * host image of the last completed step's answer, or of the initial
 * values — is what `fetch` answers: host bytes that nothing writes again,
 * so a fetch never waits for the device nor reads parameters a step is
 * writing. The seed adds gradients outside its lock (a race); here one
 * thread owns every buffer until it is handed to the device.
 */
#include "server/kind.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "shared/mean.h"
#include "shared/part.h"
#include "shared/rng.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bu_future {
    struct kind *k;
    future *f;
    device_job sgd_job;
    devbuf *result;      /* the parameters after this round's step */
    devbuf **srcs;       /* the stored gradients in slot order */
    kind_slot stored[];  /* per slot: the raw push */
} bu_future;

typedef struct bu_kind {
    kind base;
    uint64_t total;        /* elements of the whole model */
    uint64_t begin, count; /* this server's part */
    devbuf *params;        /* count floats: written by device jobs (and reset) */
    devbuf *momentum_buf;  /* count floats */
    psbuf *latest;         /* host bytes: the parameters after the last completed step */
    uint64_t open_round;   /* the key of the round pushes join */
    uint64_t steps_submitted, steps_done;
} bu_kind;

/* The seed's model, initialized as PyTorch initializes a Linear: the whole
 * flat vector [weight (out x in), bias (out)] ~ U(-k, k), k = 1/sqrt(in),
 * from stream RNG_STREAM_MODEL; this server keeps its part. Drawn on the
 * host, written to the parameters through the device (cpu: in place), and
 * kept as `latest` for fetch. */
static int bu_init_params(bu_kind *bk)
{
    const batch_update_config *c = &bk->base.cfg.bu;
    device *dev = bk->base.dev;
    float *all = malloc(bk->total * sizeof *all);
    psbuf *latest = bufpool_get(bk->base.pool, bk->count * sizeof(float));
    if (!all || !latest) {
        free(all);
        if (latest)
            psbuf_unref(latest);
        return -1;
    }
    rng r;
    rng_seed(&r, c->seed, RNG_STREAM_MODEL);
    rng_fill_uniform(all, bk->total, 1.0 / sqrt((double)c->in_features), &r);
    device_write(dev, bk->params, 0, all + bk->begin, bk->count * sizeof *all);
    device_write(dev, bk->momentum_buf, 0, NULL, bk->count * sizeof(float));
    memcpy(latest->data, all + bk->begin, bk->count * sizeof *all);
    free(all);
    if (bk->latest)
        psbuf_unref(bk->latest);
    bk->latest = latest;
    bk->open_round = bk->steps_submitted = bk->steps_done = 0;
    return 0;
}

static frame_errcode bu_admit(kind *k, const frame_hdr *h, uint64_t *batch, char *msg, size_t len)
{
    bu_kind *bk = (bu_kind *)k;
    if (h->layout != LAYOUT_DENSE) {
        snprintf(msg, len, "a batch-update server takes dense gradients only");
        return ERR_UNSUPPORTED;
    }
    if (h->bucket != 0) {
        snprintf(msg, len, "a batch-update server has one bucket (0), not %" PRIu64, h->bucket);
        return ERR_UNSUPPORTED;
    }
    if (h->count != bk->count) {
        snprintf(msg, len,
                 "count %" PRIu64 " is not this server's part of the model: %" PRIu64
                 " elements (%" PRIu64 "..%" PRIu64 " of %" PRIu64 ")",
                 h->count, bk->count, bk->begin, bk->begin + bk->count, bk->total);
        return ERR_SHAPE_MISMATCH;
    }
    /* The round's answer carries round + 1 (updates applied): the last
     * round that can be answered without a wrap is 2^64-2. Unreachable in
     * practice (one round per batch), refused rather than wrapped. */
    if (bk->open_round >= UINT64_MAX - 1) {
        snprintf(msg, len, "this server has applied %" PRIu64 " updates, the most its round counter holds: "
                 "restart it", bk->open_round);
        return ERR_UNSUPPORTED;
    }
    *batch = bk->open_round;
    return ERR_NONE;
}

static int bu_push_begin(kind *k, push_ctx *p)
{
    future *f = p->f;
    uint32_t n = k->cfg.trainers;
    if (p->first) {
        bu_future *st = calloc(1, sizeof *st + n * sizeof st->stored[0]);
        if (!st)
            return -1;
        st->k = k;
        st->f = f;
        f->kstate = st;
    }
    bu_future *st = f->kstate;
    return kind_stored_begin(k, st->stored, p, false);
}

static uint8_t *bu_push_direct(kind *k, push_ctx *p, uint64_t off, size_t *max)
{
    bu_future *st = p->f->kstate;
    return kind_stored_direct(k, st->stored, p, 0, off, max);
}

static void bu_log_got(kind *k, push_ctx *p, uint64_t end)
{
    if (end == p->len)
        log_debug("PS got %u/%u updates", p->f->completed + 1, k->expected);
}

static void bu_push_direct_done(kind *k, push_ctx *p, uint64_t off, size_t n)
{
    bu_future *st = p->f->kstate;
    kind_stored_direct_done(k, st->stored, p, off, n);
    bu_log_got(k, p, off + n);
}

static int bu_push_data(kind *k, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    bu_future *st = p->f->kstate;
    kind_stored_data(k, st->stored, p, off, src, n);
    bu_log_got(k, p, off + n);
    return 0;
}

static void bu_push_peer(kind *k, push_ctx *p, devpeer *peer, uint64_t at)
{
    bu_future *st = p->f->kstate;
    kind_stored_peer(k, st->stored, p, peer, at);
    bu_log_got(k, p, p->len);
}

static void bu_push_abort(kind *k, push_ctx *p)
{
    bu_future *st = p->f->kstate;
    if (st)
        kind_stored_abort(k, st->stored, p);
}

static void bu_step_done(device_job *j)
{
    bu_future *st = j->arg;
    bu_kind *bk = (bu_kind *)st->k;
    future *f = st->f;
    metrics_add(bk->base.m_compute, kind_job_ms(j, f->t_resolve_ns));
    bk->steps_done++;
    if (j->error) {
        /* The model is in an unknown state: the device failed under the
         * step; this round and the device's later work fail alike. */
        bk->base.resolved(bk->base.resolved_ctx, f, NULL, ERR_DEVICE, j->error);
        return;
    }
    psbuf *result = device_buf_take_host(bk->base.dev, st->result);
    st->result = NULL;
    /* The answer is also what a fetch gets from now on. */
    psbuf_ref(result);
    if (bk->latest)
        psbuf_unref(bk->latest);
    bk->latest = result;
    log_debug("PS updated model");
    bk->base.resolved(bk->base.resolved_ctx, f, result, ERR_NONE, NULL);
}

static void bu_resolve(kind *k, future *f)
{
    bu_kind *bk = (bu_kind *)k;
    bu_future *st = f->kstate;
    uint32_t n = k->cfg.trainers;
    assert(f->batch == bk->open_round && bk->open_round < UINT64_MAX - 1); /* bu_admit */
    bk->open_round++; /* later pushes open the next round */
    f->round = f->batch + 1;
    st->srcs = malloc(n * sizeof *st->srcs);
    st->result = device_buf_new(k->dev, bk->count * sizeof(float));
    if (!st->srcs || !st->result) {
        k->resolved(k->resolved_ctx, f, NULL, ERR_PEER_LOST, "out of memory taking the update step");
        return;
    }
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (st->stored[i].dev)
            st->srcs[m++] = st->stored[i].dev;
    assert(m == k->expected);
    memset(&st->sgd_job, 0, sizeof st->sgd_job);
    st->sgd_job.op = JOB_SGD;
    st->sgd_job.u.sgd.param = bk->params;
    st->sgd_job.u.sgd.momentum_buf = bk->momentum_buf;
    st->sgd_job.u.sgd.srcs = st->srcs;
    st->sgd_job.u.sgd.nsrc = m;
    st->sgd_job.u.sgd.n = bk->count;
    st->sgd_job.u.sgd.scale = mean_scale(m);
    st->sgd_job.u.sgd.lr = k->cfg.bu.lr;
    st->sgd_job.u.sgd.momentum = k->cfg.bu.momentum;
    st->sgd_job.u.sgd.first = bk->steps_submitted == 0;
    st->sgd_job.u.sgd.out = st->result;
    st->sgd_job.to_host = st->result;
    st->sgd_job.done = bu_step_done;
    device_job_for(&st->sgd_job, f->batch, f->bucket);
    st->sgd_job.arg = st;
    bk->steps_submitted++;
    device_submit(k->dev, &st->sgd_job);
}

static void bu_release(kind *k, future *f)
{
    bu_future *st = f->kstate;
    if (!st)
        return;
    f->kstate = NULL;
    kind_stored_release(k, st->stored, k->cfg.trainers);
    device_buf_free(k->dev, st->result);
    free(st->srcs);
    free(st);
}

static int bu_start(kind *k) { return bu_init_params((bu_kind *)k); }

static void bu_reset(kind *k)
{
    bu_kind *bk = (bu_kind *)k;
    /* Drained by the futures layer: no step is in flight. */
    assert(bk->steps_done == bk->steps_submitted);
    if (bu_init_params(bk) < 0)
        log_error("out of memory building a fresh model: the old parameters stay");
}

static int bu_fetch(kind *k, frame_hdr *out, psbuf **payload)
{
    bu_kind *bk = (bu_kind *)k;
    if (!bk->latest)
        return -1;
    out->bucket = 0;
    out->round = bk->steps_done;
    out->offset = bk->begin;
    out->count = bk->count;
    out->total = bk->total;
    out->dtype = frame_str_c("f32");
    out->layout = LAYOUT_DENSE;
    out->layout_str = frame_str_c("dense");
    out->has |= FH_BUCKET | FH_ROUND | FH_OFFSET | FH_COUNT | FH_TOTAL | FH_DTYPE | FH_LAYOUT;
    psbuf_ref(bk->latest);
    *payload = bk->latest;
    return 0;
}

static void bu_destroy(kind *k)
{
    bu_kind *bk = (bu_kind *)k;
    if (bk->latest)
        psbuf_unref(bk->latest);
    device_buf_free(k->dev, bk->params);
    device_buf_free(k->dev, bk->momentum_buf);
    free(bk);
}

static const kind_ops bu_ops = {
    .name = "batch-update",
    .admit = bu_admit,
    .push_begin = bu_push_begin,
    .push_direct = bu_push_direct,
    .push_direct_done = bu_push_direct_done,
    .push_data = bu_push_data,
    .push_peer = bu_push_peer,
    .push_abort = bu_push_abort,
    .resolve = bu_resolve,
    .release = bu_release,
    .start = bu_start,
    .reset = bu_reset,
    .fetch = bu_fetch,
    .destroy = bu_destroy,
};

/* The parameters get their values in bu_start, once kind_new has given
 * the kind its buffer pool. */
kind *kind_batch_update_new(const kind_config *cfg, device *dev, char *err, size_t errlen)
{
    const batch_update_config *c = &cfg->bu;
    if (c->in_features == 0 || c->out_features == 0 || c->in_features > (1u << 20) ||
        c->out_features > (1u << 20)) {
        snprintf(err, errlen, "batch-update: in and out features must be 1..1048576 (got %u, %u)",
                 c->in_features, c->out_features);
        return NULL;
    }
    uint64_t total = (uint64_t)c->out_features * c->in_features + c->out_features;
    if (total > (1ull << 28)) {
        snprintf(err, errlen, "batch-update: Linear(%u, %u) has %" PRIu64 " parameters (at most 2^28)",
                 c->in_features, c->out_features, total);
        return NULL;
    }
    if (c->parts == 0 || c->part >= c->parts || c->parts > total) {
        snprintf(err, errlen, "batch-update: part %u of %u does not exist for %" PRIu64 " parameters", c->part,
                 c->parts, total);
        return NULL;
    }
    if (!(c->lr >= 0) || !isfinite(c->lr) || !(c->momentum >= 0) || !isfinite(c->momentum)) {
        snprintf(err, errlen, "batch-update: lr and momentum must be finite and >= 0");
        return NULL;
    }
    uint32_t expected = c->batch_update_size ? c->batch_update_size : cfg->trainers;
    if (expected > cfg->trainers) {
        snprintf(err, errlen, "batch-update: batch_update_size %u is more than the %u trainers", expected,
                 cfg->trainers);
        return NULL;
    }
    bu_kind *bk = calloc(1, sizeof *bk);
    if (!bk) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    bk->base.ops = &bu_ops;
    bk->base.dev = dev;
    bk->base.cfg = *cfg;
    bk->base.expected = expected;
    bk->total = total;
    bk->begin = part_begin(total, c->part, c->parts);
    bk->count = part_begin(total, c->part + 1, c->parts) - bk->begin;
    bk->params = device_buf_new(dev, bk->count * sizeof(float));
    bk->momentum_buf = device_buf_new(dev, bk->count * sizeof(float));
    if (!bk->params || !bk->momentum_buf) {
        bu_destroy(&bk->base);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return &bk->base;
}
