/* batch_update.c — the batch-update trainer (see batch_update.h). The
 * Linear model's arithmetic runs on the compute layer (compute.h); the
 * parameters cross to the host where the network needs them: the servers'
 * answers are written into them, the gradient is pushed from it. */
#include "trainer/batch_update.h"
#include "trainer/answers.h"
#include "trainer/params_out.h"
#include "shared/clock.h"
#include "shared/text.h"
#include "shared/log.h"
#include "shared/part.h"
#include "shared/rng.h"
#include "trainer/steptimer.h"
#include "trainer/ttrace.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A batch's marks on a device (steptimer.h): forward BU_START..BU_FWD,
 * backward BU_FWD..BU_BWD, the hook BU_BWD..BU_END (the loss read, the
 * gradient pushed, the servers' parameters written back), the batch
 * BU_START..BU_END. */
enum { BU_START = 0, BU_FWD, BU_BWD, BU_END };

struct batch_update {
    batch_update_config cfg;
    stats *m_batch, *m_fwd, *m_bwd, *m_hook, *m_get;
    /* On a device: forward, backward, the hook (the push to the new
     * parameters back on the device) and the batch between marks on its
     * stream (BU_*; the seed's cuda=True), recorded once done (the batch
     * ends with the parameters' copy, its mark read by the next batch's
     * loss at the latest). get_model stays the host's. */
    steptimer tm;
    uint64_t total;     /* out*in + out */
    compute *dev;       /* where it computes (cfg.device) */
    cbuf *params;       /* [W, b] */
    cbuf *grad;         /* [dW, db] */
    cbuf *x, *y, *dy;   /* batch x in, batch x out, batch x out */
    cbuf *x_next;       /* the next batch's inputs, drawn while a round is out */
    cbuf *loss;         /* 1 double */
    float *params_h;    /* the parameters on the host: their view, or a staging copy */
    float *grad_h;      /* staging for the gradient where it has no view (else NULL) */
    float *x_stage;     /* staging for drawn inputs where they have no view (else NULL) */
    rng inputs;
    /* per pass */
    const client *cl;
    size_t nparts;
    uint64_t *part_off; /* nparts + 1 */
    answers ans;        /* one answer per server (nparts) */
    frame_type expect;  /* FT_PARAMS while fetching, FT_RESULT while waiting for a round */
    bool have_round0, have_round;
    uint64_t round0, round; /* server 0: updates at the fetch, at the last result */
    batch_update_tick_fn tick;
    void *tick_ctx;
    double *loss_epoch; /* cfg.epochs entries: the last pass's loss per epoch */
    loss_check lc;      /* the pass's first loss that is not finite */
    uint64_t nloss;     /* how many of them the last pass filled */
    uint64_t batch;     /* during a pass: the batch running (its index in the pass) */
    /* The trace (batch_update_set_trace; NULL: none): the training
     * thread's ring, and per part the read that brought its result's
     * header (its frame_in's start; nparts, with part_off). */
    ttrace *tt;
    trace_ring *ring;
    uint64_t *t_in_ns;
};

batch_update *batch_update_new(const batch_update_config *cfg, metrics *m, char *err, size_t errlen)
{
    const uint64_t lim = 1u << 24;
    if (cfg->in_features < 1 || cfg->in_features > lim || cfg->out_features < 1 || cfg->out_features > lim ||
        cfg->batch_size < 1 || cfg->batch_size > lim) {
        snprintf(err, errlen, "the Linear model needs in_features, out_features and a batch size in 1..%" PRIu64,
                 lim);
        return NULL;
    }
    uint64_t in = cfg->in_features, out = cfg->out_features, B = cfg->batch_size;
    if (out * in + out > (1ull << 31) || B * in > (1ull << 31) || B * out > (1ull << 31)) {
        snprintf(err, errlen, "Linear(%" PRIu64 ", %" PRIu64 ") with batch size %" PRIu64 " is too large", in, out,
                 B);
        return NULL;
    }
    batch_update *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    b->cfg = *cfg;
    if (b->cfg.epochs == 0)
        b->cfg.epochs = 1;
    b->total = out * in + out;
    char cerr[256] = "";
    if (!(b->dev = compute_new(cfg->device, err, errlen))) {
        batch_update_free(b);
        return NULL;
    }
    steptimer_init(&b->tm, b->dev);
    b->m_batch = steptimer_span(&b->tm, m, "batch_level_metric,batch_all", BU_START, BU_END);
    b->m_fwd = steptimer_span(&b->tm, m, "forward_metric,forward_pass", BU_START, BU_FWD);
    b->m_bwd = steptimer_span(&b->tm, m, "backward_metric,backward", BU_FWD, BU_BWD);
    b->m_hook = steptimer_span(&b->tm, m, "hook_future_metric,update_and_fetch_model", BU_BWD, BU_END);
    b->m_get = metrics_get(m, "method_metric,get_model");
    compute *d = b->dev;
    if (!(b->params = compute_alloc(d, b->total, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) ||
        !(b->grad = compute_alloc(d, b->total, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) ||
        !(b->x = compute_alloc(d, B * in, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) ||
        !(b->x_next = compute_alloc(d, B * in, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) ||
        !(b->y = compute_alloc(d, B * out, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) ||
        !(b->dy = compute_alloc(d, B * out, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) ||
        !(b->loss = compute_alloc(d, 1, COMPUTE_F64, COMPUTE_MEM_DEVICE, cerr, sizeof cerr))) {
        batch_update_free(b);
        snprintf(err, errlen, "%s", cerr);
        return NULL;
    }
    bool ok = true;
    if (!(b->params_h = compute_host_view(d, b->params)))
        ok = (b->params_h = calloc(b->total, sizeof *b->params_h)) != NULL;
    if (ok && !compute_host_view(d, b->grad))
        ok = (b->grad_h = malloc(b->total * sizeof *b->grad_h)) != NULL;
    if (ok && !compute_host_view(d, b->x))
        ok = (b->x_stage = malloc(B * in * sizeof *b->x_stage)) != NULL;
    b->loss_epoch = b->cfg.epochs <= lim ? calloc(b->cfg.epochs, sizeof *b->loss_epoch) : NULL;
    if (!ok || !b->loss_epoch || !b->m_batch || !b->m_fwd || !b->m_bwd || !b->m_hook || !b->m_get) {
        batch_update_free(b);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return b;
}

void batch_update_free(batch_update *b)
{
    if (!b)
        return;
    steptimer_release(&b->tm);
    if (b->dev) {
        if (b->params && b->params_h != compute_host_view(b->dev, b->params))
            free(b->params_h);
        compute_release(b->dev, b->params);
        compute_release(b->dev, b->grad);
        compute_release(b->dev, b->x);
        compute_release(b->dev, b->x_next);
        compute_release(b->dev, b->y);
        compute_release(b->dev, b->dy);
        compute_release(b->dev, b->loss);
        compute_free(b->dev);
    }
    free(b->grad_h);
    free(b->x_stage);
    free(b->loss_epoch);
    free(b->part_off);
    free(b->t_in_ns);
    answers_free(&b->ans);
    free(b);
}

void batch_update_set_tick(batch_update *b, batch_update_tick_fn fn, void *ctx)
{
    b->tick = fn;
    b->tick_ctx = ctx;
}

const float *batch_update_params(const batch_update *b, uint64_t *total)
{
    *total = b->total;
    return b->params_h;
}

int batch_update_write_params(const batch_update *b, const char *path, char *err, size_t errlen)
{
    return params_write(path, b->params_h, b->total, err, errlen);
}

/* ---- arithmetic ------------------------------------------------------------ */

void batch_update_forward(compute *c, cspan W, cspan bias, cspan x, uint64_t batch, uint64_t in, uint64_t out,
                          cspan y)
{
    compute_bias_rows(c, bias, batch, out, y);
    compute_gemm(c, false, true, batch, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
}

void batch_update_backward(compute *c, cspan x, cspan y, uint64_t batch, uint64_t in, uint64_t out, cspan dy,
                           cspan dW, cspan db, cspan loss)
{
    /* L1Loss (mean) against zeros: d/dy mean(|y|) = sign(y) / numel. */
    compute_l1(c, y, batch * out, dy, loss);
    compute_gemm(c, true, false, out, in, batch, 1.0f, dy, out, x, in, 0.0f, dW, in);
    compute_colsum(c, dy, batch, out, db, COMPUTE_SUM_FROM_ZERO);
}

/* ---- answers from the servers (client sink) ------------------------------- */

static const char *bu_what(frame_type t)
{
    return t == FT_PARAMS ? "the parameters (fetch)" : "the updated parameters (result)";
}

static int bu_begin(void *ctx, uint32_t server, const frame_hdr *h, void **frame, char *err, size_t errlen)
{
    batch_update *b = ctx;
    if (server >= b->nparts) {
        snprintf(err, errlen, "an answer from an unknown server (%u)", server);
        return -1;
    }
    const char *addr = b->cl->conns[server].addr;
    if (h->type != b->expect || !answers_begin(&b->ans, server, frame)) {
        char type[160];
        text_escape_n((const char *)h->type_str.p, h->type_str.n > 32 ? 32 : h->type_str.n, type, sizeof type);
        snprintf(err, errlen, "server %s sent an unexpected '%s' while this trainer waits for %s", addr, type,
                 bu_what(b->expect));
        return -1;
    }
    uint64_t off = b->part_off[server], count = b->part_off[server + 1] - off;
    if (h->type == FT_PARAMS && (h->has & FH_TOTAL) && h->total != b->total) {
        snprintf(err, errlen,
                 "server %s holds a model of %" PRIu64 " elements; Linear(%" PRIu64 ", %" PRIu64 ") has %" PRIu64
                 " (in_features/out_features differ between trainer and server)",
                 addr, h->total, b->cfg.in_features, b->cfg.out_features, b->total);
        return -1;
    }
    if (h->type == FT_PARAMS && (h->has & FH_OFFSET) && h->offset != off) {
        snprintf(err, errlen,
                 "server %s holds the part that starts at element %" PRIu64 ", but it is server %u of %zu here, "
                 "whose part starts at %" PRIu64 " (list the servers in part order)",
                 addr, h->offset, server, b->nparts, off);
        return -1;
    }
    if ((h->has & FH_LAYOUT) && h->layout != LAYOUT_DENSE) {
        snprintf(err, errlen, "server %s sent %s that are not dense", addr, bu_what(b->expect));
        return -1;
    }
    if ((h->has & FH_DTYPE) && !frame_str_eq(h->dtype, "f32")) {
        char dtype[160];
        text_escape_n((const char *)h->dtype.p, h->dtype.n > 32 ? 32 : h->dtype.n, dtype, sizeof dtype);
        snprintf(err, errlen, "server %s sent %s of dtype '%s', not f32", addr, bu_what(b->expect), dtype);
        return -1;
    }
    if (!(h->has & FH_COUNT) || h->count != count || h->payload != count * 4) {
        snprintf(err, errlen, "server %s sent %s of %" PRIu64 " elements (%" PRIu64 " bytes); its part has %" PRIu64,
                 addr, bu_what(b->expect), h->count, h->payload, count);
        return -1;
    }
    if (h->type == FT_RESULT && ttrace_open(b->ring))
        b->t_in_ns[server] = b->cl->rx_ns;
    if (server == 0 && (h->has & FH_ROUND)) {
        if (h->type == FT_PARAMS) {
            b->round0 = h->round;
            b->have_round0 = true;
        } else {
            b->round = h->round;
            b->have_round = true;
        }
    }
    return 0;
}

static int bu_data(void *ctx, void *frame, uint64_t off, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    batch_update *b = ctx;
    size_t server = answers_server(&b->ans, frame);
    memcpy((uint8_t *)(b->params_h + b->part_off[server]) + off, p, n);
    return 0;
}

/* Part `server`'s result is in: its frame_in, from the read that brought
 * its header to the one that brought its last byte (the client's). */
static void bu_trace_in(batch_update *b, size_t server)
{
    const client_conn *c = &b->cl->conns[server];
    trace_add(b->ring, TRACE_FRAME_IN, c->trace_lane_in, b->t_in_ns[server], b->cl->rx_ns,
              trace_ids_make((int64_t)b->batch, 0, b->tt->rank, (int32_t)c->server_rank));
}

static int bu_end(void *ctx, void *frame, char *err, size_t errlen)
{
    batch_update *b = ctx;
    if (b->expect == FT_RESULT && ttrace_open(b->ring))
        bu_trace_in(b, answers_server(&b->ans, frame));
    answers_end(&b->ans, frame, b->cl->rx_ns);
    return 0;
}

client_sink batch_update_sink(batch_update *b)
{
    client_sink k = {bu_begin, bu_data, bu_end, b, NULL};
    return k;
}

/* ---- the trace (ttrace.h) ---------------------------------------------------- */

void batch_update_set_trace(batch_update *b, ttrace *tt, client *cl)
{
    if (!ttrace_on(tt))
        return;
    b->tt = tt;
    b->ring = ttrace_links_here(tt, cl);
    ttrace_bucket_lanes(tt, 1); /* the round's */
}

/* Batch i's spans from the very readings its metrics are made of
 * (batch_update_pass: t0..t_end), so that their sums are the metrics' on
 * the cpu. The round is bucket 0 (the one the wire's pushes and results
 * name), every server's: the model is split across them. */
static void bu_trace_batch(batch_update *b, uint64_t i, uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3,
                           uint64_t t_push, uint64_t t_end)
{
    trace_ids ids = trace_ids_make((int64_t)i, TRACE_NONE, b->tt->rank, TRACE_NONE);
    unsigned lane = b->tt->lane_compute;
    trace_add(b->ring, TRACE_FORWARD, lane, t1, t2, ids);
    trace_add(b->ring, TRACE_BACKWARD_COMPUTE, lane, t2, t3, ids);
    trace_add(b->ring, TRACE_STEP, lane, t0, t_end, ids);
    uint64_t t_last = b->ans.t_last_ns;
    assert(t3 <= t_push && t_push <= t_last && t_last <= t_end);
    ids.bucket = 0;
    lane = ttrace_bucket_lane(b->tt, 0);
    trace_add(b->ring, TRACE_BUCKET_READY, lane, t3, t_push, ids);
    trace_add(b->ring, TRACE_BUCKET_WAIT, lane, t_push, t_last, ids);
    trace_add(b->ring, TRACE_BUCKET_APPLY, lane, t_last, t_end, ids);
}

/* ---- the pass --------------------------------------------------------------- */

static int bu_setup_parts(batch_update *b, const client *cl, char *err, size_t errlen)
{
    if (b->nparts == cl->nconns)
        return 0;
    if (cl->nconns < 1 || cl->nconns > b->total) {
        snprintf(err, errlen, "%zu servers cannot split a model of %" PRIu64 " elements", cl->nconns, b->total);
        return -1;
    }
    free(b->part_off);
    free(b->t_in_ns);
    answers_free(&b->ans);
    b->nparts = cl->nconns;
    b->part_off = malloc((b->nparts + 1) * sizeof *b->part_off);
    b->t_in_ns = calloc(b->nparts, sizeof *b->t_in_ns);
    if (!b->part_off || !b->t_in_ns || answers_init(&b->ans, b->nparts) < 0) {
        b->nparts = 0;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t p = 0; p <= b->nparts; p++)
        b->part_off[p] = part_begin(b->total, p, b->nparts);
    return 0;
}

/* Expect one answer of type t from every server. */
static void bu_expect(batch_update *b, frame_type t)
{
    b->expect = t;
    answers_expect(&b->ans);
}

/* Poll until every server answered; t0 (ns) starts the --rpc-timeout. */
static int bu_wait(batch_update *b, client *cl, uint64_t t0, uint64_t batches_done, char *err, size_t errlen)
{
    if (answers_wait(&b->ans, cl, t0, b->cfg.rpc_timeout_s, bu_what(b->expect), b->tick, b->tick_ctx,
                     batches_done, err, errlen) < 0)
        return -1;
    /* Every part is in: they are the parameters now. */
    compute_host_write_end(b->dev, cspan_all(b->params), b->params_h);
    return 0;
}

/* The next batch's inputs, drawn on the host into x_next. */
static void bu_draw(batch_update *b)
{
    cspan s = cspan_all(b->x_next);
    float *p = compute_host_write_begin(b->dev, s, b->x_stage);
    rng_fill_normal(p, s.n, &b->inputs);
    compute_host_write_end(b->dev, s, p);
}

static int bu_fetch(batch_update *b, client *cl, char *err, size_t errlen)
{
    bu_expect(b, FT_PARAMS);
    b->have_round0 = b->have_round = false;
    uint64_t t0 = clock_now_ns();
    for (size_t p = 0; p < b->nparts; p++) {
        frame_hdr h = {0};
        h.type = FT_FETCH;
        h.bucket = 0;
        h.has = FH_BUCKET;
        if (client_queue(cl, p, &h, NULL, err, errlen) < 0)
            return -1;
    }
    return bu_wait(b, cl, t0, 0, err, errlen);
}

static int bu_push(batch_update *b, client *cl, uint64_t batch, char *err, size_t errlen)
{
    const float *grad = compute_host_read(b->dev, cspan_all(b->grad), b->grad_h);
    for (size_t p = 0; p < b->nparts; p++) {
        frame_hdr h = {0};
        h.type = FT_PUSH;
        h.batch = batch;
        h.bucket = 0;
        h.dtype = frame_str_c("f32");
        h.layout_str = frame_str_c("dense");
        h.count = b->part_off[p + 1] - b->part_off[p];
        h.payload = h.count * 4;
        h.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_COUNT | FH_PAYLOAD;
        /* The gradient stays unchanged until every result is in, which
         * implies every push was written. */
        if (client_queue(cl, p, &h, grad + b->part_off[p], err, errlen) < 0)
            return -1;
    }
    return 0;
}

const loss_check *batch_update_divergence(const batch_update *b) { return &b->lc; }

const double *batch_update_loss_per_epoch(const batch_update *b, uint64_t *n)
{
    *n = b->nloss;
    return b->loss_epoch;
}

int batch_update_pass(batch_update *b, client *cl, uint64_t batches, uint64_t first_batch, bool record,
                      batch_update_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    steptimer_drop(&b->tm); /* a failed pass's: not this one's */
    b->nloss = 0;
    loss_check_start(&b->lc, b->cfg.allow_divergence);
    /* The pass's epochs: the configuration's, or one a batch when a pass
     * is shorter than that (the master's --warmup-steps may make it so). */
    uint64_t E = b->cfg.epochs < batches ? b->cfg.epochs : batches;
    if (E == 0)
        E = 1;
    if (bu_setup_parts(b, cl, err, errlen) < 0)
        return -1;
    b->cl = cl;
    uint64_t in = b->cfg.in_features, out = b->cfg.out_features, B = b->cfg.batch_size;
    uint64_t rank = b->cfg.rank;
    cspan W = cspan_at(b->params, 0, out * in), bias = cspan_at(b->params, out * in, out);
    cspan dW = cspan_at(b->grad, 0, out * in), db = cspan_at(b->grad, out * in, out);

    /* The seed's get_model: a fresh copy of the server's model per pass. */
    uint64_t t_start = clock_now_ns();
    if (bu_fetch(b, cl, err, errlen) < 0)
        return -1;
    if (record)
        metrics_add(b->m_get, clock_ms(t_start, b->ans.t_last_ns));
    /* The seed's torch.randn after manual_seed: the same inputs every pass. */
    rng_seed(&b->inputs, b->cfg.seed, RNG_STREAM_INPUTS + rank);
    uint64_t t_batches = clock_now_ns();
    /* Batch i's inputs are drawn while round i-1 is out (the stream's
     * order is the same): the trainer would only wait otherwise. */
    if (batches > 0)
        bu_draw(b);

    for (uint64_t i = 0; i < batches; i++) {
        b->batch = i;
        /* The trace's step: this batch, in the timed pass (ttrace.h). */
        if (b->ring)
            trace_ring_step(b->ring, ttrace_step_of(b->tt, i));
        bool nv = b->tt && b->tt->nvtx && ttrace_open(b->ring);
        trace_ids nv_ids = trace_ids_none();
        if (nv)
            nv_ids = trace_ids_make((int64_t)i, TRACE_NONE, b->tt->rank, TRACE_NONE);
        trace_nvtx_id nv_step = nv ? trace_nvtx_start(TRACE_STEP, nv_ids) : 0, nv_part = 0;
        uint64_t t0 = clock_now_ns();
        log_debug("trainer%" PRIu64 " processing one batch", rank);
        cbuf *x = b->x_next;
        b->x_next = b->x;
        b->x = x;
        ttrace_nvtx_next(nv, &nv_part, TRACE_FORWARD, nv_ids);
        uint64_t t1 = clock_now_ns();
        steptimer_mark(&b->tm, BU_START);
        batch_update_forward(b->dev, W, bias, cspan_all(b->x), B, in, out, cspan_all(b->y));
        steptimer_mark(&b->tm, BU_FWD);
        compute_sync(b->dev);
        uint64_t t2 = clock_now_ns();
        ttrace_nvtx_next(nv, &nv_part, TRACE_BACKWARD_COMPUTE, nv_ids);
        batch_update_backward(b->dev, cspan_all(b->x), cspan_all(b->y), B, in, out, cspan_all(b->dy), dW, db,
                              cspan_all(b->loss));
        steptimer_mark(&b->tm, BU_BWD);
        double loss = compute_loss(b->dev, cspan_all(b->loss));
        uint64_t t3 = clock_now_ns();
        ttrace_nvtx_next(nv, &nv_part, TRACE_NSPANS, nv_ids);
        /* A GPU that failed computed nothing to push (compute.h). */
        if (compute_status(b->dev, err, errlen) < 0)
            return -1;
        /* Epoch e holds batches [e*n/E, (e+1)*n/E): equal lengths where E
         * divides n, as the master's passes are. */
        uint64_t e = i * E / batches;
        if (e >= b->nloss) {
            b->loss_epoch[e] = 0;
            b->nloss = e + 1;
        }
        b->loss_epoch[e] += loss;
        /* A diverged model would only be pushed to every other trainer:
         * stop here unless the job allows it (loss_check.h). */
        if (loss_check_batch(&b->lc, e, i - (e * batches + E - 1) / E, loss, err, errlen) < 0)
            return -1;
        log_debug("trainer%" PRIu64 " reporting grads", rank);
        bu_expect(b, FT_RESULT);
        if (bu_push(b, cl, first_batch + i, err, errlen) < 0)
            return -1;
        uint64_t t_push = clock_now_ns();
        if (i + 1 < batches) {
            /* Send the pushes first (client_poll writes before it waits). */
            if (client_poll(cl, 0, err, errlen) < 0)
                return -1;
            bu_draw(b);
        }
        if (bu_wait(b, cl, t_push, i, err, errlen) < 0)
            return -1;
        steptimer_mark(&b->tm, BU_END); /* after the new parameters' copy */
        log_debug("trainer%" PRIu64 " got updated model", rank);
        uint64_t t_end = clock_now_ns();
        trace_nvtx_end(nv_step);
        if (ttrace_open(b->ring)) /* the metrics' own readings */
            bu_trace_batch(b, i, t0, t1, t2, t3, t_push, t_end);
        if (record && steptimer_on(&b->tm)) {
            steptimer_end(&b->tm); /* recorded once its marks are done, never waited for here */
        } else if (record) {
            metrics_add(b->m_fwd, clock_ms(t1, t2));
            metrics_add(b->m_bwd, clock_ms(t2, t3));
            metrics_add(b->m_hook, clock_ms(t_push, b->ans.t_last_ns));
            metrics_add(b->m_batch, clock_ms(t0, t_end));
        }
        rep->batches++;
        rep->bytes_pushed += b->total * 4;
        if (b->tick && b->tick(b->tick_ctx, i + 1, err, errlen) < 0)
            return -1;
    }
    steptimer_flush(&b->tm); /* the last batches: their parameters copied */
    rep->seconds = (double)(clock_now_ns() - t_batches) / 1e9;
    for (uint64_t e = 0; e < b->nloss; e++) {
        uint64_t first = (e * batches + E - 1) / E;     /* ceil(e*n/E) */
        uint64_t end = ((e + 1) * batches + E - 1) / E; /* ceil((e+1)*n/E) */
        b->loss_epoch[e] /= (double)(end - first);
    }
    if (b->have_round0 && b->have_round && b->round >= b->round0)
        rep->rounds = b->round - b->round0;
    else
        rep->rounds = rep->batches;
    return 0;
}
