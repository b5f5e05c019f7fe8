/* hybrid.c — the seed's HybridModel trainer (see hybrid.h). The dense part
 * is described once on the compute layer (compute.h): its parameters,
 * gradients and activations are the layer's buffers; the host touches them
 * only where the network does (the looked-up rows in, the rows' gradients
 * out, the dense bucket through the hook), through host views or staging. */
#include "trainer/hybrid.h"
#include "trainer/bucket_place.h"
#include "trainer/answers.h"
#include "trainer/compute.h"
#include "trainer/steptimer.h"
#include "trainer/ttrace.h"
#include "shared/clock.h"
#include "shared/text.h"
#include "shared/jobconf.h"
#include "shared/log.h"
#include "shared/rng.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HYBRID_LAYERS 5
#define HYBRID_MAX_INDICES 50 /* the seed's randint(20, 50) */

/* The seed's dense part: widths of the layers' inputs and outputs, and the
 * ReLU after the second layer. */
static const uint32_t hybrid_width[HYBRID_LAYERS + 1] = {HYBRID_ROW, 256, 128, 64, 32, HYBRID_CLASSES};
static const bool hybrid_relu_after[HYBRID_LAYERS] = {false, true, false, false, false};

/* A traced call to one server (a lookup, a confirmed update): when it
 * went (its wait's start: the reading that starts the --rpc-timeout) and
 * the read that brought its answer's header (its frame_in's start). */
typedef struct hybrid_call {
    uint64_t t_call_ns, t_in_ns;
} hybrid_call;

struct hybrid {
    hybrid_config cfg;
    uint32_t k;           /* output rows per bag: P*D / 512 */
    stats *m_batch, *m_lookup, *m_fwd, *m_bwd, *m_bwd_compute, *m_opt, *m_epoch;
    stats *m_update;      /* seed pattern: from the updates sent to the last `updated` */
    steptimer tm; /* on a device: the step's metrics between marks (HM_*) */
    /* the dense part, on the compute layer */
    compute *dev;
    uint64_t nparams;
    cbuf *params, *grads;
    uint64_t w_off[HYBRID_LAYERS], b_off[HYBRID_LAYERS];
    cbuf *act[HYBRID_LAYERS + 1]; /* act[0] = the looked-up rows, act[l+1] = layer l's output */
    cbuf *pre[HYBRID_LAYERS];     /* layer l's output before its ReLU (where it has one) */
    cbuf *dact, *dnext;           /* backward scratch: R x 512 each */
    cbuf *loss;                   /* 1 double */
    float *rows_in;               /* the looked-up rows on the host: act[0]'s view, or a staging copy */
    float *rows_grad;             /* staging for dnext's rows where it has no view (else NULL) */
    /* the batch */
    rng data;
    int64_t idx[HYBRID_MAX_INDICES], off[HYBRID_MAX_INDICES];
    uint64_t nnz, bags, rows; /* rows = bags * k */
    int64_t *target;          /* one per output row: HYBRID_MAX_INDICES * k */
    uint8_t *lookup;          /* the lookup payload: indices, offsets */
    uint8_t **update;         /* per server: indices, offsets, the bags' gradients */
    /* answers */
    const client *cl;
    answers ans;              /* one lookup answer per server (the seed's pattern: one server at a time) */
    answers acks;             /* one `updated` per server (updates sent with confirm) */
    uint64_t batch;           /* the wire batch number */
    uint64_t ack_batch;       /* the batch whose updates asked for `updated` last */
    hook_bucket bucket;       /* the dense gradients: grads' view, twin's, or grads on the GPU (a device hook) */
    hook_tensor tensors[2 * HYBRID_LAYERS]; /* the bucket's: each layer's weight (out x in) and bias, in memory order */
    cbuf *twin;               /* staged (grads without a host view): the bucket in pinned memory; else NULL */
    bool placed;              /* a pass has placed the bucket (hybrid_place_bucket) */
    float *params_host;       /* staged: the parameters read back (hybrid_dense_params) */
    double *loss_epoch;
    uint64_t nepochs;
    loss_check lc;            /* the pass's first loss that is not finite */
    /* The trace (hybrid_set_trace; NULL: none): the training thread's
     * ring, and per server its lookup and its update (number_ps each;
     * written in traced steps only). */
    ttrace *tt;
    trace_ring *ring;
    hybrid_call *lookup_call, *update_call;
};

/* ---- set-up ------------------------------------------------------------------ */

static const char *const hybrid_pattern_names[] = {"seed", "psbench"};

const char *hybrid_pattern_name(hybrid_pattern p)
{
    assert((unsigned)p < sizeof hybrid_pattern_names / sizeof *hybrid_pattern_names);
    return hybrid_pattern_names[p];
}

int hybrid_pattern_parse(const char *name, hybrid_pattern *out)
{
    for (unsigned p = 0; name && p < sizeof hybrid_pattern_names / sizeof *hybrid_pattern_names; p++)
        if (strcmp(name, hybrid_pattern_names[p]) == 0) {
            *out = (hybrid_pattern)p;
            return 0;
        }
    return -1;
}

/* Drawn on the host (the view of params, or a staging copy written once). */
static int hybrid_init_params(hybrid *h)
{
    cspan all = cspan_all(h->params);
    float *stage = NULL;
    if (!compute_span_view(h->dev, all) && !(stage = malloc(h->nparams * sizeof *stage)))
        return -1;
    float *p = compute_host_write_begin(h->dev, all, stage);
    rng r;
    rng_seed(&r, h->cfg.seed, RNG_STREAM_MODEL);
    for (int l = 0; l < HYBRID_LAYERS; l++) {
        double bound = 1.0 / sqrt((double)hybrid_width[l]);
        rng_fill_uniform(p + h->w_off[l], (uint64_t)hybrid_width[l + 1] * hybrid_width[l], bound, &r);
        rng_fill_uniform(p + h->b_off[l], hybrid_width[l + 1], bound, &r);
    }
    compute_host_write_end(h->dev, all, p);
    compute_sync(h->dev);
    free(stage);
    return 0;
}

/* A step's marks on a device (steptimer.h): the batch HM_START..HM_END,
 * forward HM_LOOKED_UP..HM_FWD, backward HM_FWD..HM_OPT (and its compute
 * alone, backward_compute, HM_FWD..HM_BWD: with the dense bucket's copy
 * to its twin), the optimizer HM_OPT..HM_END; the dense
 * bucket's hook metric from the mark after its gradients to the mark
 * after its mean is back in them (hybrid_step). */
enum { HM_START = 0, HM_LOOKED_UP, HM_FWD, HM_BWD, HM_OPT, HM_END };

hybrid *hybrid_new(const hybrid_config *c, metrics *m, char *err, size_t errlen)
{
    uint64_t width = (uint64_t)c->number_ps * c->embedding_dim;
    if (hybrid_shape_check(c->number_ps, c->embedding_dim, err, errlen) < 0)
        return NULL;
    if (c->num_embeddings < 1 || c->batches < 1 || width / HYBRID_ROW > 4096) {
        snprintf(err, errlen, "HybridModel: num_embeddings and batches must be at least 1 (and P x D at most "
                 "4096 x 512)");
        return NULL;
    }
    hybrid *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->cfg = *c;
    h->k = (uint32_t)(width / HYBRID_ROW);
    h->m_batch = metrics_get(m, "batch_level_metric,batch_all");
    h->m_lookup = metrics_get(m, "embedding_metric,remote_lookup");
    h->m_fwd = metrics_get(m, "forward_metric,forward_pass");
    /* backward as psbench's DummyModel times it (the PS benchmark's
     * loss.backward() under DDP): the compute and the waits until the
     * optimizer may step — the dense bucket's mean and, in the seed's
     * pattern, the servers' confirmations (its dist_autograd.backward and
     * opt.step are both synchronous); backward_compute the compute alone. */
    h->m_bwd = metrics_get(m, "backward_metric,backward");
    h->m_bwd_compute = metrics_get(m, "backward_metric,backward_compute");
    h->m_opt = metrics_get(m, "optimizer_metric,step");
    h->m_epoch = metrics_get(m, "epoch_metric,epoch");
    if (c->pattern == HYBRID_SEED && !(h->m_update = metrics_get(m, "embedding_metric,remote_update"))) {
        snprintf(err, errlen, "out of memory");
        hybrid_free(h);
        return NULL;
    }
    uint64_t n = 0;
    for (int l = 0; l < HYBRID_LAYERS; l++) {
        h->w_off[l] = n;
        n += (uint64_t)hybrid_width[l + 1] * hybrid_width[l];
        h->b_off[l] = n;
        n += hybrid_width[l + 1];
    }
    h->nparams = n;
    uint64_t R = (uint64_t)HYBRID_MAX_INDICES * h->k; /* at most one bag per index */
    if (!(h->dev = compute_new(c->device, err, errlen))) {
        hybrid_free(h);
        return NULL;
    }
    /* On a device, the step's own metrics are GPU-timed (the seed's
     * cuda=True); the lookup and the epoch stay the host's. */
    steptimer_init(&h->tm, h->dev);
    if (!steptimer_span(&h->tm, m, "batch_level_metric,batch_all", HM_START, HM_END) ||
        !steptimer_span(&h->tm, m, "forward_metric,forward_pass", HM_LOOKED_UP, HM_FWD) ||
        !steptimer_span(&h->tm, m, "backward_metric,backward", HM_FWD, HM_OPT) ||
        !steptimer_span(&h->tm, m, "backward_metric,backward_compute", HM_FWD, HM_BWD) ||
        !steptimer_span(&h->tm, m, "optimizer_metric,step", HM_OPT, HM_END)) {
        snprintf(err, errlen, "out of memory");
        hybrid_free(h);
        return NULL;
    }
    /* The layer's buffers: a failure says why in err. */
    char cerr[256] = "";
    compute *d = h->dev;
    bool ok = (h->params = compute_alloc(d, n, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) &&
              (h->grads = compute_alloc(d, n, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) &&
              (h->loss = compute_alloc(d, 1, COMPUTE_F64, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) &&
              (h->dact = compute_alloc(d, R * HYBRID_ROW, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) &&
              (h->dnext = compute_alloc(d, R * HYBRID_ROW, COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr, sizeof cerr));
    for (int l = 0; l <= HYBRID_LAYERS && ok; l++)
        ok = (h->act[l] = compute_alloc(d, R * hybrid_width[l], COMPUTE_F32, COMPUTE_MEM_DEVICE, cerr,
                                        sizeof cerr)) != NULL;
    for (int l = 0; l < HYBRID_LAYERS && ok; l++)
        ok = !hybrid_relu_after[l] || (h->pre[l] = compute_alloc(d, R * hybrid_width[l + 1], COMPUTE_F32,
                                                                 COMPUTE_MEM_DEVICE, cerr, sizeof cerr)) != NULL;
    if (!ok) {
        hybrid_free(h);
        snprintf(err, errlen, "HybridModel: %s", cerr);
        return NULL;
    }
    /* The host's side: where answers land, where updates are cut from, the
     * bucket the hook sends (it reads and writes host memory). */
    h->rows_in = compute_host_view(d, h->act[0]);
    if (!h->rows_in)
        ok = (h->rows_in = malloc(R * HYBRID_ROW * sizeof(float))) != NULL;
    if (ok && !compute_host_view(d, h->dnext))
        ok = (h->rows_grad = malloc(R * HYBRID_ROW * sizeof(float))) != NULL;
    /* The dense bucket: the gradients' view, or (a device's memory) a twin
     * in pinned memory the gradients are copied into after backward and
     * the mean out of before the step. */
    if (ok && !compute_host_view(d, h->grads) &&
        !(h->twin = compute_alloc(d, n, COMPUTE_F32, COMPUTE_MEM_PINNED, cerr, sizeof cerr))) {
        hybrid_free(h);
        snprintf(err, errlen, "HybridModel: %s", cerr);
        return NULL;
    }
    ok = ok && h->m_batch && h->m_lookup && h->m_fwd && h->m_bwd && h->m_bwd_compute && h->m_opt && h->m_epoch;
    h->lookup = malloc(2 * HYBRID_MAX_INDICES * 8);
    h->target = malloc(R * sizeof *h->target);
    h->update = calloc(c->number_ps, sizeof *h->update);
    h->lookup_call = calloc(c->number_ps, sizeof *h->lookup_call);
    h->update_call = calloc(c->number_ps, sizeof *h->update_call);
    ok = ok && h->lookup && h->target && h->update && h->lookup_call && h->update_call &&
         answers_init(&h->ans, c->number_ps) == 0 &&
         answers_init(&h->acks, c->number_ps) == 0;
    for (uint32_t p = 0; p < c->number_ps && ok; p++)
        ok = (h->update[p] = malloc(2 * HYBRID_MAX_INDICES * 8 + HYBRID_MAX_INDICES * c->embedding_dim * 4)) != NULL;
    if (!ok) {
        hybrid_free(h);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->bucket.id = 0;
    h->bucket.data = compute_host_view(d, h->twin ? h->twin : h->grads);
    h->bucket.count = n;
    /* Its tensors, for a hook whose arithmetic is per tensor (PowerSGD):
     * PyTorch's shapes (a weight out x in, a bias viewed out x 1), and
     * DDP's bucket holds them last first (the order backward makes them,
     * which DDP's buckets follow from the start: reverse registration). */
    for (int l = 0; l < HYBRID_LAYERS; l++) {
        h->tensors[2 * l] = (hook_tensor){.offset = h->w_off[l], .rows = hybrid_width[l + 1], .cols = hybrid_width[l]};
        h->tensors[2 * l + 1] = (hook_tensor){.offset = h->b_off[l], .rows = hybrid_width[l + 1], .cols = 1};
    }
    h->bucket.tensors = h->tensors;
    h->bucket.ntensors = 2 * HYBRID_LAYERS;
    h->bucket.ddp_reversed = true;
    h->bucket.last = true; /* the step's only bucket (GradBucket.is_last: PowerSGD counts its steps by it) */
    if (hybrid_init_params(h) < 0) {
        hybrid_free(h);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return h;
}

void hybrid_free(hybrid *h)
{
    if (!h)
        return;
    steptimer_release(&h->tm);
    if (h->dev) {
        if (h->act[0] && h->rows_in != compute_host_view(h->dev, h->act[0]))
            free(h->rows_in);
        compute_release(h->dev, h->params);
        compute_release(h->dev, h->grads);
        compute_release(h->dev, h->loss);
        for (int l = 0; l <= HYBRID_LAYERS; l++)
            compute_release(h->dev, h->act[l]);
        for (int l = 0; l < HYBRID_LAYERS; l++)
            compute_release(h->dev, h->pre[l]);
        compute_release(h->dev, h->dact);
        compute_release(h->dev, h->dnext);
        compute_release(h->dev, h->twin);
        compute_free(h->dev);
    }
    free(h->rows_grad);
    free(h->params_host);
    free(h->lookup);
    free(h->target);
    for (uint32_t p = 0; h->update && p < h->cfg.number_ps; p++)
        free(h->update[p]);
    free(h->update);
    free(h->lookup_call);
    free(h->update_call);
    answers_free(&h->ans);
    answers_free(&h->acks);
    free(h->loss_epoch);
    hook_bucket_release(&h->bucket);
    free(h);
}

const double *hybrid_loss_per_epoch(const hybrid *h, uint64_t *n)
{
    *n = h->nepochs;
    return h->loss_epoch;
}

const loss_check *hybrid_divergence(const hybrid *h)
{
    return &h->lc;
}

const float *hybrid_dense_params(hybrid *h, uint64_t *n)
{
    *n = h->nparams;
    const float *v = compute_host_view(h->dev, h->params);
    if (v)
        return v;
    if (!h->params_host && !(h->params_host = malloc(h->nparams * sizeof *h->params_host)))
        return NULL;
    compute_read(h->dev, cspan_all(h->params), h->params_host);
    compute_sync(h->dev);
    return h->params_host;
}

/* ---- data ---------------------------------------------------------------------- */

/* The seed's _get_batch: randint(20, 50) indices, offsets from 0 advancing
 * by randint(1, 10) while below the count, a target per output row. */
static void hybrid_draw(hybrid *h)
{
    rng *r = &h->data;
    h->nnz = 20 + rng_below(r, 31);
    for (uint64_t i = 0; i < h->nnz; i++)
        h->idx[i] = (int64_t)rng_below(r, h->cfg.num_embeddings);
    h->bags = 0;
    for (uint64_t start = 0; start < h->nnz; start += 1 + rng_below(r, 10))
        h->off[h->bags++] = (int64_t)start;
    h->rows = h->bags * h->k;
    for (uint64_t i = 0; i < h->rows; i++)
        h->target[i] = (int64_t)rng_below(r, HYBRID_CLASSES);
    memcpy(h->lookup, h->idx, h->nnz * 8);
    memcpy(h->lookup + h->nnz * 8, h->off, h->bags * 8);
}

/* ---- answers (client sink) ------------------------------------------------------ */

static int hybrid_begin(void *ctx, uint32_t server, const frame_hdr *hd, void **frame, char *err, size_t errlen)
{
    hybrid *h = ctx;
    if (hd->type == FT_UPDATED && answers_begin(&h->acks, server, frame)) {
        /* An update sent with confirm has been applied: this batch's. */
        if (hd->batch != h->ack_batch || hd->payload != 0) {
            snprintf(err, errlen, "server %s confirmed the update of batch %" PRIu64 " (with %" PRIu64 " payload "
                     "bytes); this trainer waits for batch %" PRIu64 "'s", h->cl->conns[server].addr, hd->batch,
                     hd->payload, h->ack_batch);
            return -1;
        }
        if (ttrace_open(h->ring))
            h->update_call[server].t_in_ns = h->cl->rx_ns;
        return 0;
    }
    if (hd->type != FT_ROWS || !answers_begin(&h->ans, server, frame)) {
        char type[160];
        text_escape_n((const char *)hd->type_str.p, hd->type_str.n > 32 ? 32 : hd->type_str.n, type, sizeof type);
        snprintf(err, errlen, "server %u sent an unexpected '%s' (this trainer waits for lookup answers)", server,
                 type);
        return -1;
    }
    if (hd->batch != h->batch || hd->bags != h->bags || hd->cols != h->cfg.embedding_dim ||
        hd->payload != h->bags * h->cfg.embedding_dim * 4) {
        snprintf(err, errlen, "server %s answered lookup %" PRIu64 " with %" PRIu64 " bags x %" PRIu64
                 " columns (batch %" PRIu64 "); it asked %" PRIu64 " x %" PRIu64 " (num_embeddings/embedding_dim "
                 "differ between trainer and servers?)", h->cl->conns[server].addr, h->batch, hd->bags, hd->cols,
                 hd->batch, h->bags, h->cfg.embedding_dim);
        return -1;
    }
    if (ttrace_open(h->ring))
        h->lookup_call[server].t_in_ns = h->cl->rx_ns;
    return 0;
}

/* Server p's row of bag b goes to columns [p*D, (p+1)*D) of bag b's
 * concatenated row; off is a multiple of 4 (client.h). */
static int hybrid_data(void *ctx, void *frame, uint64_t off, const uint8_t *src, size_t n, char *err, size_t errlen)
{
    hybrid *h = ctx;
    uint64_t p = answers_server(&h->ans, frame), D = h->cfg.embedding_dim;
    uint64_t width = (uint64_t)h->cfg.number_ps * D;
    uint64_t e = off / 4, left = n / 4;
    float *x = h->rows_in;
    while (left > 0) {
        uint64_t b = e / D, c = e % D, take = D - c < left ? D - c : left;
        memcpy(x + b * width + p * D + c, src, take * 4);
        src += take * 4;
        e += take;
        left -= take;
    }
    return 0;
}

/* Server p's answer to call c is in (its last byte: the client's rx_ns):
 * its frame_in, and, where the step awaits it (every lookup; an update
 * in the seed's pattern), its wait as a bucket_wait of no bucket on the
 * server's lane of calls. */
static void hybrid_trace_answer(hybrid *h, size_t p, const hybrid_call *c, uint64_t batch, bool awaited)
{
    const client_conn *cn = &h->cl->conns[p];
    trace_ids ids = trace_ids_make((int64_t)batch, TRACE_NONE, h->tt->rank, (int32_t)cn->server_rank);
    if (awaited)
        trace_add(h->ring, TRACE_BUCKET_WAIT, ttrace_rpc_lane(h->tt, p), c->t_call_ns, h->cl->rx_ns, ids);
    trace_add(h->ring, TRACE_FRAME_IN, cn->trace_lane_in, c->t_in_ns, h->cl->rx_ns, ids);
}

static int hybrid_end(void *ctx, void *frame, char *err, size_t errlen)
{
    hybrid *h = ctx;
    (void)err;
    (void)errlen;
    bool ack = answers_owns(&h->acks, frame);
    answers *a = ack ? &h->acks : &h->ans;
    if (ttrace_open(h->ring)) {
        size_t p = answers_server(a, frame);
        if (ack) /* awaited by its step in the seed's pattern; in psbench's, the pass's last, after it */
            hybrid_trace_answer(h, p, &h->update_call[p], h->ack_batch, h->cfg.pattern == HYBRID_SEED);
        else
            hybrid_trace_answer(h, p, &h->lookup_call[p], h->batch, true);
    }
    answers_end(a, frame, h->cl->rx_ns);
    return 0;
}

client_sink hybrid_sink(hybrid *h)
{
    client_sink k = {hybrid_begin, hybrid_data, hybrid_end, h, NULL};
    return k;
}

/* ---- the trace (ttrace.h) ------------------------------------------------------ */

void hybrid_set_trace(hybrid *h, ttrace *tt, client *cl)
{
    if (!ttrace_on(tt))
        return;
    h->tt = tt;
    h->ring = ttrace_links_here(tt, cl);
    ttrace_bucket_lanes(tt, 1); /* the dense bucket's */
    ttrace_rpc_lanes(tt, cl);
}

/* The step's spans from the very readings its metrics are made of
 * (hybrid_step: t0..t5), so that their sums are the metrics' on the cpu:
 * the lookups are t0..t1 (remote_lookup; their calls' waits are
 * hybrid_trace_answer's), backward t2..t4 its compute and then its wait
 * (the dense bucket's mean, and in the seed's pattern the updates'
 * confirmations). The dense bucket: ready (backward done -> handed to
 * the hook), wait (the hook's sample), apply (the optimizer's step: every
 * dense parameter is in it). */
static void hybrid_trace_step(hybrid *h, uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3, uint64_t t4,
                              uint64_t t5)
{
    trace_ids ids = trace_ids_make((int64_t)h->batch, TRACE_NONE, h->tt->rank, TRACE_NONE);
    unsigned lane = h->tt->lane_compute;
    trace_add(h->ring, TRACE_FORWARD, lane, t1, t2, ids);
    trace_add(h->ring, TRACE_BACKWARD_COMPUTE, lane, t2, t3, ids);
    trace_add(h->ring, TRACE_EXPOSED_WAIT, lane, t3, t4, ids);
    trace_add(h->ring, TRACE_OPTIMIZER, lane, t4, t5, ids);
    trace_add(h->ring, TRACE_STEP, lane, t0, t5, ids);
    const hook_bucket *b = &h->bucket;
    assert(t3 <= b->t_ready_ns && b->t_ready_ns <= b->t_done_ns && b->t_done_ns <= t4);
    ids.bucket = b->id;
    lane = ttrace_bucket_lane(h->tt, b->id);
    trace_add(h->ring, TRACE_BUCKET_READY, lane, t3, b->t_ready_ns, ids);
    trace_add(h->ring, TRACE_BUCKET_WAIT, lane, b->t_ready_ns, b->t_done_ns, ids);
    trace_add(h->ring, TRACE_BUCKET_APPLY, lane, t4, t5, ids);
}

/* ---- the dense part -------------------------------------------------------------- */

static cspan hybrid_w(hybrid *h, int l)
{
    return cspan_at(h->params, h->w_off[l], (uint64_t)hybrid_width[l + 1] * hybrid_width[l]);
}

static cspan hybrid_b(hybrid *h, int l)
{
    return cspan_at(h->params, h->b_off[l], hybrid_width[l + 1]);
}

/* The first rows x width elements of buffer b. */
static cspan hybrid_rows(cbuf *b, uint64_t rows, uint32_t width) { return cspan_at(b, 0, rows * width); }

/* Forward over h->rows rows (the looked-up rows in rows_in); returns the
 * mean cross-entropy and leaves the logits' gradient in dnext. */
static double hybrid_forward(hybrid *h)
{
    compute *d = h->dev;
    uint64_t R = h->rows;
    compute_host_write_end(d, hybrid_rows(h->act[0], R, HYBRID_ROW), h->rows_in);
    for (int l = 0; l < HYBRID_LAYERS; l++) {
        uint32_t in = hybrid_width[l], out = hybrid_width[l + 1];
        cspan y = hybrid_rows(hybrid_relu_after[l] ? h->pre[l] : h->act[l + 1], R, out);
        compute_bias_rows(d, hybrid_b(h, l), R, out, y);
        compute_gemm(d, false, true, R, out, in, 1.0f, hybrid_rows(h->act[l], R, in), in, hybrid_w(h, l), in, 1.0f,
                     y, out);
        if (hybrid_relu_after[l])
            compute_relu(d, y, hybrid_rows(h->act[l + 1], R, out));
    }
    /* Cross-entropy of the logits; the softmax's gradient goes to dnext. */
    compute_ce_logits(d, hybrid_rows(h->act[HYBRID_LAYERS], R, HYBRID_CLASSES), (uint32_t)R, HYBRID_CLASSES,
                      h->target, hybrid_rows(h->dnext, R, HYBRID_CLASSES), cspan_all(h->loss));
    return compute_loss(d, cspan_all(h->loss));
}

/* Backward from the logits' gradient (in dnext) to every dense gradient and
 * to the looked-up rows' gradient (left in dnext, R x 512). */
static void hybrid_backward(hybrid *h)
{
    compute *d = h->dev;
    uint64_t R = h->rows;
    for (int l = HYBRID_LAYERS - 1; l >= 0; l--) {
        uint32_t in = hybrid_width[l], out = hybrid_width[l + 1];
        cspan dy = hybrid_rows(h->dnext, R, out);
        if (hybrid_relu_after[l])
            compute_relu_bwd(d, hybrid_rows(h->pre[l], R, out), dy);
        /* dW = dy^T x, db = column sums of dy, dx = dy W */
        compute_gemm(d, true, false, out, in, R, 1.0f, dy, out, hybrid_rows(h->act[l], R, in), in, 0.0f,
                     cspan_at(h->grads, h->w_off[l], (uint64_t)out * in), in);
        compute_colsum(d, dy, R, out, cspan_at(h->grads, h->b_off[l], out), COMPUTE_SUM_FROM_ZERO);
        compute_gemm(d, false, false, R, in, out, 1.0f, dy, out, hybrid_w(h, l), in, 0.0f,
                     hybrid_rows(h->dact, R, in), in);
        cbuf *t = h->dnext;
        h->dnext = h->dact;
        h->dact = t;
    }
}

/* ---- tests only: the dense part on given rows ------------------------------------- */

uint64_t hybrid_dense_max_rows(const hybrid *h) { return (uint64_t)HYBRID_MAX_INDICES * h->k; }

int hybrid_dense_fwd_bwd(hybrid *h, const float *rows, const int64_t *targets, uint64_t R, double *loss,
                         float *grads, float *rows_grad, char *err, size_t errlen)
{
    if (R < 1 || R > hybrid_dense_max_rows(h)) {
        snprintf(err, errlen, "HybridModel: %" PRIu64 " rows (1..%" PRIu64 ")", R, hybrid_dense_max_rows(h));
        return -1;
    }
    for (uint64_t i = 0; i < R; i++) {
        if (targets[i] < 0 || targets[i] >= HYBRID_CLASSES) {
            snprintf(err, errlen, "HybridModel: target %" PRIu64 " is %" PRId64 " (0..%d)", i, targets[i],
                     HYBRID_CLASSES - 1);
            return -1;
        }
    }
    memcpy(h->rows_in, rows, R * HYBRID_ROW * sizeof *rows);
    memcpy(h->target, targets, R * sizeof *targets);
    h->rows = R;
    *loss = hybrid_forward(h);
    hybrid_backward(h);
    if (grads)
        compute_read(h->dev, cspan_all(h->grads), grads);
    if (rows_grad)
        compute_read(h->dev, hybrid_rows(h->dnext, R, HYBRID_ROW), rows_grad);
    compute_sync(h->dev);
    return 0;
}

/* ---- one batch ----------------------------------------------------------------- */

static int hybrid_lookup_queue(hybrid *h, client *cl, uint32_t p, char *err, size_t errlen)
{
    frame_hdr hd = {0};
    hd.type = FT_LOOKUP;
    hd.batch = h->batch;
    hd.nnz = h->nnz;
    hd.bags = h->bags;
    hd.payload = 8 * (h->nnz + h->bags);
    hd.has = FH_BATCH | FH_NNZ | FH_BAGS | FH_PAYLOAD;
    return client_queue(cl, p, &hd, h->lookup, err, errlen);
}

/* The batch's lookups: the seed's one server after the other, each answer
 * awaited before the next lookup leaves (its rpc_sync in a loop); psbench's
 * to every server at once. */
static int hybrid_lookups(hybrid *h, client *cl, char *err, size_t errlen)
{
    if (h->cfg.pattern == HYBRID_SEED) {
        for (uint32_t p = 0; p < h->cfg.number_ps; p++) {
            answers_expect_one(&h->ans, p);
            uint64_t t0 = clock_now_ns();
            if (ttrace_open(h->ring))
                h->lookup_call[p].t_call_ns = t0;
            if (hybrid_lookup_queue(h, cl, p, err, errlen) < 0 ||
                answers_wait(&h->ans, cl, t0, h->cfg.rpc_timeout_s, "the answer to a lookup", NULL, NULL, 0, err,
                             errlen) < 0)
                return -1;
        }
        return 0;
    }
    answers_expect(&h->ans);
    uint64_t t0 = clock_now_ns();
    for (uint32_t p = 0; p < h->cfg.number_ps; p++) {
        if (ttrace_open(h->ring))
            h->lookup_call[p].t_call_ns = t0;
        if (hybrid_lookup_queue(h, cl, p, err, errlen) < 0)
            return -1;
    }
    return answers_wait(&h->ans, cl, t0, h->cfg.rpc_timeout_s, "the answer to a lookup", NULL, NULL, 0, err, errlen);
}

/* Every server's update: its lookup, and the gradient of its D columns of
 * every bag's concatenated row (the k rows of 512 a bag became, summed
 * back into the bag's row). With confirm, each server answers `updated`
 * once it has applied it (h->acks awaits them). */
static int hybrid_updates(hybrid *h, client *cl, bool confirm, char *err, size_t errlen)
{
    if (confirm) {
        answers_expect(&h->acks);
        h->ack_batch = h->batch;
    }
    uint64_t D = h->cfg.embedding_dim, width = (uint64_t)h->cfg.number_ps * D;
    const float *dx = compute_host_read(h->dev, hybrid_rows(h->dnext, h->rows, HYBRID_ROW), h->rows_grad);
    if (compute_status(h->dev, err, errlen) < 0) /* a failed GPU: no gradient to send the servers */
        return -1;
    for (uint32_t p = 0; p < h->cfg.number_ps; p++) {
        uint8_t *u = h->update[p];
        memcpy(u, h->lookup, 8 * (h->nnz + h->bags));
        float *g = (float *)(void *)(u + 8 * (h->nnz + h->bags));
        for (uint64_t b = 0; b < h->bags; b++)
            memcpy(g + b * D, dx + b * width + p * D, D * sizeof *g);
        frame_hdr hd = {0};
        hd.type = FT_UPDATE;
        hd.batch = h->batch;
        hd.nnz = h->nnz;
        hd.bags = h->bags;
        hd.cols = D;
        hd.dtype = frame_str_c("f32");
        hd.payload = 8 * (h->nnz + h->bags) + 4 * h->bags * D;
        hd.has = FH_BATCH | FH_NNZ | FH_BAGS | FH_COLS | FH_DTYPE | FH_PAYLOAD;
        if (h->cfg.pattern == HYBRID_SEED) { /* the seed's EmbeddingBag is not sparse */
            hd.grad = frame_str_c("dense");
            hd.has |= FH_GRAD;
        }
        if (confirm) {
            hd.confirm = 1;
            hd.has |= FH_CONFIRM;
        }
        if (client_queue(cl, p, &hd, u, err, errlen) < 0)
            return -1;
    }
    return 0;
}


/* One batch; `last`: the pass's last (its updates are confirmed in either
 * pattern: hybrid_pass waits for them). */
static int hybrid_step(hybrid *h, client *cl, hook *hk, bool last, double *loss, char *err, size_t errlen)
{
    const bool seed = h->cfg.pattern == HYBRID_SEED;
    /* The trace's step: this batch, in the timed pass (ttrace.h). */
    if (h->ring)
        trace_ring_step(h->ring, ttrace_step_of(h->tt, h->batch));
    bool nv = h->tt && h->tt->nvtx && ttrace_open(h->ring);
    trace_ids nv_ids = trace_ids_none();
    if (nv)
        nv_ids = trace_ids_make((int64_t)h->batch, TRACE_NONE, h->tt->rank, TRACE_NONE);
    trace_nvtx_id nv_step = nv ? trace_nvtx_start(TRACE_STEP, nv_ids) : 0, nv_part = 0;
    uint64_t t0 = clock_now_ns();
    steptimer_mark(&h->tm, HM_START);
    hybrid_draw(h);
    if (hybrid_lookups(h, cl, err, errlen) < 0)
        return -1;
    uint64_t t1 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_FORWARD, nv_ids);
    steptimer_mark(&h->tm, HM_LOOKED_UP);
    *loss = hybrid_forward(h);
    steptimer_mark(&h->tm, HM_FWD);
    uint64_t t2 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_BACKWARD_COMPUTE, nv_ids);
    hybrid_backward(h);
    /* Staged: the dense gradients into the bucket's twin, handed over
     * once that copy is done (the updates are cut meanwhile) — or, for a
     * hook that takes device memory (NCCL), the gradients themselves once
     * backward is done, no copy either way. */
    hook_bucket *b = &h->bucket;
    const bool on_gpu = !devf32_is_none(b->device_data); /* hybrid_place_bucket */
    cmark ready = 0, copied = 0;
    if (h->twin) {
        ready = copied = compute_mark(h->dev);
        if (!on_gpu) {
            compute_read(h->dev, cspan_all(h->grads), b->data);
            copied = compute_mark(h->dev);
        }
    }
    steptimer_mark(&h->tm, HM_BWD);
    uint64_t t3 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_EXPOSED_WAIT, nv_ids);
    /* The servers' updates leave now (the comm of the dense bucket runs
     * meanwhile). psbench: the next lookups queue behind them on each
     * connection, so a server applies them first; seed: every server's
     * `updated` is awaited before the step (below). */
    uint64_t t_upd = clock_now_ns();
    if (ttrace_open(h->ring))
        for (uint32_t p = 0; p < h->cfg.number_ps; p++)
            h->update_call[p].t_call_ns = t_upd;
    if (hybrid_updates(h, cl, seed || last, err, errlen) < 0)
        return -1;
    if (h->twin)
        compute_wait(h->dev, copied);
    /* A GPU that failed (compute.h) computed nothing to send. */
    if (compute_status(h->dev, err, errlen) < 0)
        return -1;
    hook_ready(hk, b, h->batch);
    if (b->gpu_timed && b->metric) /* the hook named its metric: the GPU times it */
        metrics_mark_gpu_timed(b->metric);
    if (client_poll(cl, 0, err, errlen) < 0) /* write the updates */
        return -1;
    if (hook_wait(hk, &b, 1, err, errlen) < 0)
        return -1;
    /* The seed's synchronous backward and optimizer step: every server has
     * applied this batch's update before the next batch begins. */
    if (seed && (answers_wait(&h->acks, cl, t_upd, h->cfg.rpc_timeout_s, "the confirmation of an update", NULL, NULL,
                              0, err, errlen) < 0))
        return -1;
    if (seed)
        metrics_add(h->m_update, clock_ms(t_upd, h->acks.t_last_ns));
    uint64_t t4 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_OPTIMIZER, nv_ids);
    if (h->twin && !on_gpu) /* the mean back into the gradients, ahead of the step */
        compute_write(h->dev, cspan_all(h->grads), b->data);
    if (b->gpu_timed)
        steptimer_sample(&h->tm, b->metric, ready, compute_mark(h->dev));
    steptimer_mark(&h->tm, HM_OPT);
    /* p -= lr g: the same bits as p + (-lr) g. */
    compute_sgd_dense(h->dev, cspan_all(h->params), cspan_all(h->grads), cspan_none(), (float)h->cfg.lr, 0.0f,
                      false);
    steptimer_mark(&h->tm, HM_END);
    compute_sync(h->dev);
    if (compute_status(h->dev, err, errlen) < 0) /* the update did not happen */
        return -1;
    uint64_t t5 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_NSPANS, nv_ids);
    trace_nvtx_end(nv_step);
    if (ttrace_open(h->ring)) /* the metrics' own readings (on a device, the host's view) */
        hybrid_trace_step(h, t0, t1, t2, t3, t4, t5);
    metrics_add(h->m_lookup, clock_ms(t0, t1));
    if (steptimer_on(&h->tm)) { /* synchronised: recorded at once */
        steptimer_end(&h->tm);
        return 0;
    }
    metrics_add(h->m_fwd, clock_ms(t1, t2));
    metrics_add(h->m_bwd, clock_ms(t2, t4));
    metrics_add(h->m_bwd_compute, clock_ms(t2, t3));
    metrics_add(h->m_opt, clock_ms(t4, t5));
    metrics_add(h->m_batch, clock_ms(t0, t5));
    return 0;
}

/* Where the dense bucket leaves from for hook hk: the gradients' host
 * view; staged, the pinned twin (made at hybrid_new) — or, for a hook that
 * takes device memory (NCCL), the gradients on the GPU (bucket_place.h).
 * Said once, and again if it changes. 0, or -1 with err. */
static int hybrid_place_bucket(hybrid *h, const hook *hk, char *err, size_t errlen)
{
    hook_bucket *b = &h->bucket;
    if (!h->twin)
        return 0; /* host view: set at hybrid_new */
    bool was = !devf32_is_none(b->device_data);
    if (bucket_place(b, hk, h->dev, cspan_all(h->grads), &h->twin, cbuf_count(h->grads), err, errlen) < 0)
        return -1;
    bool on_gpu = !devf32_is_none(b->device_data);
    b->gpu_timed = steptimer_on(&h->tm); /* its hook metric: hybrid_step */
    if (!h->placed || on_gpu != was)
        log_info("%s: the dense bucket is handed over in %s", hk->name,
                 on_gpu ? "device memory" : "pinned host memory");
    h->placed = true;
    return 0;
}

int hybrid_pass(hybrid *h, client *cl, hook *hk, uint64_t batches, hybrid_tick_fn tick, void *ctx,
                hybrid_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    if (batches % h->cfg.batches != 0) {
        snprintf(err, errlen, "a pass of %" PRIu64 " batches is not whole epochs of %" PRIu64, batches,
                 h->cfg.batches);
        return -1;
    }
    uint64_t epochs = batches / h->cfg.batches;
    if (cl->nconns != h->cfg.number_ps) {
        snprintf(err, errlen, "HybridModel: %zu servers, the configuration says %u", cl->nconns, h->cfg.number_ps);
        return -1;
    }
    double *le = realloc(h->loss_epoch, (epochs ? epochs : 1) * sizeof *le);
    if (!le) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->loss_epoch = le;
    h->nepochs = 0;
    h->cl = cl;
    if (hybrid_place_bucket(h, hk, err, errlen) < 0)
        return -1;
    if (hybrid_init_params(h) < 0) { /* the seed builds a fresh model per pass */
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    loss_check_start(&h->lc, h->cfg.allow_divergence);
    steptimer_drop(&h->tm);
    uint64_t t_pass = clock_now_ns();
    h->batch = 0;
    for (uint64_t e = 0; e < epochs; e++) {
        uint64_t t_epoch = clock_now_ns();
        /* Every epoch is the same batches (hybrid.h). */
        rng_seed(&h->data, h->cfg.seed, RNG_STREAM_HYBRID + h->cfg.rank);
        double sum = 0;
        for (uint64_t i = 0; i < h->cfg.batches; i++) {
            double loss;
            bool last = e + 1 == epochs && i + 1 == h->cfg.batches;
            if (hybrid_step(h, cl, hk, last, &loss, err, errlen) < 0 ||
                loss_check_batch(&h->lc, e, i, loss, err, errlen) < 0)
                return -1;
            sum += loss;
            rep->batches++;
            rep->samples += h->bags;
            rep->indices += h->nnz;
            h->batch++;
            if (tick && tick(ctx, rep->batches, err, errlen) < 0)
                return -1;
        }
        metrics_add(h->m_epoch, clock_ms(t_epoch, clock_now_ns()));
        h->loss_epoch[e] = sum / (double)h->cfg.batches;
        h->nepochs = e + 1;
        rep->epochs++;
    }
    /* The pass's last updates are applied before the pass is reported
     * (they asked for `updated`; the seed's pattern has waited already):
     * the master's reset then finds nothing of this pass in flight. */
    if (answers_wait(&h->acks, cl, clock_now_ns(), h->cfg.rpc_timeout_s, "the confirmation of the pass's last update",
                     NULL, NULL, 0, err, errlen) < 0)
        return -1;
    rep->seconds = (double)(clock_now_ns() - t_pass) / 1e9;
    return 0;
}
