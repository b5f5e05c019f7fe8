/* model.c — DummyModel forward/backward, described once on the compute
 * layer (compute.h: CBLAS on the cpu today), see model.h for the model, the
 * parameter order, the initialization and the threading contract of the
 * ready callback. Parameters, gradients and activations are buffers of the
 * layer; this file never touches their elements except through a host view
 * for the initialization (model_init_values) and the accessors of model.h.
 *
 * Notation: B = batch length, D = embedding_dim = dense_input_size,
 * C = dense_output_size, NL = dense_layers_count. Activations are row-major
 * [B x width]; x[0] is the bag means, x[i+1] = x[i] W_i^T + b_i, and
 * z = x[NL] feeds the softmax.
 *
 * Gradients of the loss head (CrossEntropy applied to p = softmax(z)):
 *   q = softmax(p);  dL/dp_b = (q_b - onehot(y_b)) / B  =: g_b
 *   dL/dz_b = p_b * (g_b - <g_b, p_b>)            (softmax Jacobian)
 * Linear i (Y = X W^T + b): dW = dY^T X, db = sum_b dY, dX = dY W.
 * EmbeddingBag mean: row r gets dx0_b / L once per occurrence of r in bag b.
 */
#include "trainer/model.h"
#include "shared/log.h"
#include "shared/rng.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_MAX_DIM ((uint64_t)1 << 24)       /* any one dimension */
#define MODEL_MAX_ROWS ((uint64_t)1 << 31)      /* embedding rows: slots are uint32 */
#define MODEL_MAX_FLOATS ((uint64_t)1 << 36)    /* all parameters together */
#define MODEL_MAX_LAYERS 10000u                 /* keeps names in 32 bytes */

struct dummy_model {
    model_config cfg;
    uint32_t max_batch;
    uint32_t nparams;
    model_param_info *info; /* nparams */
    uint64_t total;         /* floats in values (and the first in grads) */
    compute *dev;           /* where it computes (the caller's) */
    cbuf *values;           /* all parameters, flat, parameter order */
    cbuf *grads;            /* same layout; sparse: region 0 holds the COO rows */
    bool grads_lent;        /* grads is memory a lender keeps (model_new_lent) */
    uint64_t shadow;        /* grads' narrow shadow: its byte offset in grads, 0 for none (model_grads_shadow) */

    cbuf *act;              /* one buffer for everything below */
    cspan *x;               /* NL + 1 ranges of act: layer inputs, then z */
    cspan prob;             /* p = softmax(z), B x C */
    cspan q;                /* softmax(p), B x C */
    cspan d_a, d_b;         /* ping-pong gradients wrt activations, B x max(D, C);
                               d_a is also the forward pass's GEMM scratch */
    cbuf *loss;             /* the last forward's loss: 1 double */

    /* sparse embedding gradient: rows on the host, values in grads */
    int64_t *sp_rows;       /* unique rows, ascending; capacity num_embeddings */
    uint64_t sp_nnz;
    uint32_t *sp_slot;      /* row -> position in sp_rows; COMPUTE_NO_SLOT between batches */

    const data_batch *fwd;  /* batch of the last forward, until backward */
};

static uint32_t model_weight_index(uint32_t layer) { return 1 + 2 * layer; }
static uint32_t model_bias_index(uint32_t layer) { return 2 + 2 * layer; }

/* ---- deterministic initialization ------------------------------------------ */

/* ---- creation ------------------------------------------------------------------- */

static int model_check_config(const model_config *c, uint32_t max_batch, char *err, size_t errlen)
{
    if (c->num_embeddings == 0 || c->num_embeddings > MODEL_MAX_ROWS || c->embedding_dim == 0 ||
        c->embedding_dim > MODEL_MAX_DIM || c->dense_input_size == 0 || c->dense_input_size > MODEL_MAX_DIM ||
        c->dense_output_size == 0 || c->dense_output_size > MODEL_MAX_DIM) {
        errbuf_set(err, errlen,
                      "model: num_embeddings must be in 1..%llu and embedding_dim, dense_input_size, "
                      "dense_output_size in 1..%llu",
                      (unsigned long long)MODEL_MAX_ROWS, (unsigned long long)MODEL_MAX_DIM);
        return -1;
    }
    if (c->dense_layers_count == 0 || c->dense_layers_count > MODEL_MAX_LAYERS) {
        errbuf_set(err, errlen, "model: dense_layers_count must be in 1..%u (got %u)", MODEL_MAX_LAYERS,
                      c->dense_layers_count);
        return -1;
    }
    if (c->embedding_dim != c->dense_input_size) {
        errbuf_set(err, errlen,
                      "model: embedding_dim (%llu) must equal dense_input_size (%llu): the embedding feeds "
                      "the first dense layer",
                      (unsigned long long)c->embedding_dim, (unsigned long long)c->dense_input_size);
        return -1;
    }
    if (c->dense_layers_count > 1 && c->dense_output_size != c->dense_input_size) {
        errbuf_set(err, errlen,
                      "model: with %u dense layers in sequence, dense_output_size (%llu) must equal "
                      "dense_input_size (%llu)",
                      c->dense_layers_count, (unsigned long long)c->dense_output_size,
                      (unsigned long long)c->dense_input_size);
        return -1;
    }
    uint64_t emb = c->num_embeddings * c->embedding_dim; /* < 2^55: no overflow */
    uint64_t layer = c->dense_output_size * c->dense_input_size + c->dense_output_size;
    if (emb > MODEL_MAX_FLOATS || layer > MODEL_MAX_FLOATS ||
        (MODEL_MAX_FLOATS - emb) / layer < c->dense_layers_count) {
        errbuf_set(err, errlen, "model: too many parameters (limit %llu floats)",
                      (unsigned long long)MODEL_MAX_FLOATS);
        return -1;
    }
    if (max_batch == 0 || max_batch > MODEL_MAX_DIM) {
        errbuf_set(err, errlen, "model: max_batch must be in 1..%llu (got %u)",
                      (unsigned long long)MODEL_MAX_DIM, max_batch);
        return -1;
    }
    uint64_t wide = c->dense_input_size > c->dense_output_size ? c->dense_input_size : c->dense_output_size;
    if ((uint64_t)max_batch * wide > MODEL_MAX_FLOATS / (c->dense_layers_count + 5)) {
        errbuf_set(err, errlen, "model: activations for batches of %u are too large", max_batch);
        return -1;
    }
    return 0;
}

static void model_layout(dummy_model *m)
{
    const model_config *c = &m->cfg;
    uint64_t off = 0;
    model_param_info *p = &m->info[0];
    snprintf(p->name, sizeof p->name, "embedding.weight");
    p->ndim = 2;
    p->shape[0] = c->num_embeddings;
    p->shape[1] = c->embedding_dim;
    p->sparse = c->sparse;
    for (uint32_t l = 0; l < c->dense_layers_count; l++) {
        p = &m->info[model_weight_index(l)];
        snprintf(p->name, sizeof p->name, "dense.%u.weight", l);
        p->ndim = 2;
        p->shape[0] = c->dense_output_size;
        p->shape[1] = c->dense_input_size;
        p = &m->info[model_bias_index(l)];
        snprintf(p->name, sizeof p->name, "dense.%u.bias", l);
        p->ndim = 1;
        p->shape[0] = c->dense_output_size;
        p->shape[1] = 1;
    }
    for (uint32_t i = 0; i < m->nparams; i++) {
        m->info[i].size = m->info[i].shape[0] * m->info[i].shape[1];
        m->info[i].offset = off;
        off += m->info[i].size;
    }
    m->total = off;
}

/* Drawn on the host (the host view, or a staging copy written once). */
static void model_init_values(dummy_model *m, uint64_t seed, float *stage)
{
    cspan all = cspan_all(m->values);
    float *v = compute_host_write_begin(m->dev, all, stage);
    rng r;
    rng_seed(&r, seed, RNG_STREAM_MODEL);
    rng_fill_normal(v + m->info[0].offset, m->info[0].size, &r);
    double bound = 1.0 / sqrt((double)m->cfg.dense_input_size);
    for (uint32_t i = 1; i < m->nparams; i++)
        rng_fill_uniform(v + m->info[i].offset, m->info[i].size, bound, &r);
    compute_host_write_end(m->dev, all, v);
    compute_sync(m->dev);
}

static int model_alloc_activations(dummy_model *m, char *err, size_t errlen)
{
    uint64_t B = m->max_batch, D = m->cfg.dense_input_size, C = m->cfg.dense_output_size;
    uint32_t NL = m->cfg.dense_layers_count;
    uint64_t wide = D > C ? D : C;
    /* x[0]: B x D; x[1..NL]: B x C; prob, q: B x C; d_a, d_b: B x wide. */
    uint64_t floats = B * D + (uint64_t)NL * B * C + 2 * B * C + 2 * B * wide;
    m->x = calloc(NL + 1, sizeof *m->x);
    if (!m->x) {
        errbuf_set(err, errlen, "model: out of memory");
        return -1;
    }
    m->act = compute_alloc(m->dev, floats, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, errlen);
    m->loss = m->act ? compute_alloc(m->dev, 1, COMPUTE_F64, COMPUTE_MEM_DEVICE, err, errlen) : NULL;
    if (!m->loss)
        return -1;
    uint64_t off = 0;
    m->x[0] = cspan_at(m->act, off, B * D);
    off += B * D;
    for (uint32_t l = 1; l <= NL; l++, off += B * C)
        m->x[l] = cspan_at(m->act, off, B * C);
    m->prob = cspan_at(m->act, off, B * C);
    off += B * C;
    m->q = cspan_at(m->act, off, B * C);
    off += B * C;
    m->d_a = cspan_at(m->act, off, B * wide);
    off += B * wide;
    m->d_b = cspan_at(m->act, off, B * wide);
    off += B * wide;
    assert(off == floats);
    return 0;
}

/* The gradient buffer: in lent memory where the lender has some and the
 * layer computes on it, else the layer's own. */
static cbuf *model_alloc_grads(dummy_model *m, const model_grads_lender *lender, char *err, size_t errlen)
{
    if (lender && compute_lends(m->dev) && m->total <= SIZE_MAX / sizeof(float)) {
        void *p = lender->get(lender->ctx, (size_t)m->total * sizeof(float));
        /* The handle alone may fail (memory): then the layer's own, the
         * lent bytes left to their lender, who keeps them anyway. */
        cbuf *b = p ? compute_lend(m->dev, p, m->total, COMPUTE_F32, err, errlen) : NULL;
        if (b) {
            m->grads_lent = true;
            return b;
        }
    }
    return compute_alloc(m->dev, m->total, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, errlen);
}

dummy_model *model_new(compute *dev, const model_config *cfg, uint64_t seed, uint32_t max_batch, char *err,
                       size_t errlen)
{
    return model_new_lent(dev, cfg, seed, max_batch, NULL, err, errlen);
}

dummy_model *model_new_lent(compute *dev, const model_config *cfg, uint64_t seed, uint32_t max_batch,
                            const model_grads_lender *lender, char *err, size_t errlen)
{
    if (model_check_config(cfg, max_batch, err, errlen) < 0)
        return NULL;
    dummy_model *m = calloc(1, sizeof *m);
    if (!m)
        goto oom;
    m->cfg = *cfg;
    m->dev = dev;
    m->max_batch = max_batch;
    m->nparams = 1 + 2 * cfg->dense_layers_count;
    m->info = calloc(m->nparams, sizeof *m->info);
    if (!m->info)
        goto oom;
    model_layout(m);
    m->values = compute_alloc(dev, m->total, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, errlen);
    m->grads = NULL;
    if (m->values && cfg->grads_shared && compute_can_share(dev)) {
        char why[256];
        /* the shadow: total 16-bit values, half as many floats (rounded up) */
        uint64_t shadow = cfg->grads_narrow ? (m->total + 1) / 2 : 0;
        if (!(m->grads = compute_alloc_shared(dev, m->total + shadow, COMPUTE_F32, why, sizeof why)))
            log_warn("gradients in ordinary device memory: %s", why);
        else
            m->shadow = shadow ? m->total * 4 : 0;
    }
    if (m->values && !m->grads)
        m->grads = model_alloc_grads(m, lender, err, errlen);
    if (!m->grads || model_alloc_activations(m, err, errlen) < 0) {
        model_free(m);
        return NULL;
    }
    if (cfg->sparse) {
        m->sp_rows = malloc(cfg->num_embeddings * sizeof *m->sp_rows);
        m->sp_slot = malloc(cfg->num_embeddings * sizeof *m->sp_slot);
        if (!m->sp_rows || !m->sp_slot)
            goto oom;
        for (uint64_t r = 0; r < cfg->num_embeddings; r++)
            m->sp_slot[r] = COMPUTE_NO_SLOT;
    }
    if (model_reinit(m, seed, err, errlen) < 0) {
        model_free(m);
        return NULL;
    }
    return m;
oom:
    model_free(m);
    errbuf_set(err, errlen, "model: out of memory");
    return NULL;
}

int model_reinit(dummy_model *m, uint64_t seed, char *err, size_t errlen)
{
    if (!compute_span_view(m->dev, cspan_all(m->values))) {
        float *stage = malloc(m->total * sizeof *stage);
        if (!stage) {
            errbuf_set(err, errlen, "model: out of memory");
            return -1;
        }
        model_init_values(m, seed, stage);
        free(stage);
    } else {
        model_init_values(m, seed, NULL);
    }
    model_zero_grad(m);
    return 0;
}

void model_free(dummy_model *m)
{
    if (!m)
        return;
    free(m->info);
    if (m->dev) {
        compute_release(m->dev, m->values);
        compute_release(m->dev, m->grads);
        compute_release(m->dev, m->act);
        compute_release(m->dev, m->loss);
    }
    free(m->x);
    free(m->sp_rows);
    free(m->sp_slot);
    free(m);
}

int model_check_data(const dummy_model *m, const dummy_data *d, char *err, size_t errlen)
{
    uint64_t mv = d->cfg.max_val;
    if (mv > m->cfg.num_embeddings) {
        errbuf_set(err, errlen,
                      "data indices are drawn from [0, max_val=%llu) but the model's embedding has only "
                      "num_embeddings=%llu rows",
                      (unsigned long long)mv, (unsigned long long)m->cfg.num_embeddings);
        return -1;
    }
    if (mv > m->cfg.dense_output_size) {
        errbuf_set(err, errlen,
                      "data targets are drawn from [0, max_val=%llu) but the model has only "
                      "dense_output_size=%llu classes",
                      (unsigned long long)mv, (unsigned long long)m->cfg.dense_output_size);
        return -1;
    }
    return 0;
}

/* ---- accessors ------------------------------------------------------------------ */

const model_config *model_cfg(const dummy_model *m) { return &m->cfg; }
uint32_t model_nparams(const dummy_model *m) { return m->nparams; }
uint64_t model_total_size(const dummy_model *m) { return m->total; }
compute *model_compute(const dummy_model *m) { return m->dev; }
cbuf *model_values_buf(dummy_model *m) { return m->values; }
cbuf *model_grads_buf(dummy_model *m) { return m->grads; }
uint64_t model_grads_shadow(const dummy_model *m) { return m->shadow; }
bool model_grads_lent(const dummy_model *m) { return m->grads_lent; }
float *model_values(dummy_model *m) { return compute_host_view(m->dev, m->values); }
const float *model_values_const(const dummy_model *m) { return compute_host_view(m->dev, m->values); }
float *model_grads(dummy_model *m) { return compute_host_view(m->dev, m->grads); }

const model_param_info *model_param(const dummy_model *m, uint32_t i)
{
    assert(i < m->nparams);
    return &m->info[i];
}

cspan model_values_span(dummy_model *m, uint32_t i)
{
    assert(i < m->nparams);
    return cspan_at(m->values, m->info[i].offset, m->info[i].size);
}

cspan model_grad_span(dummy_model *m, uint32_t i)
{
    assert(i < m->nparams);
    return cspan_at(m->grads, m->info[i].offset, m->info[i].size);
}

cspan model_prob_span(dummy_model *m, uint32_t B)
{
    assert(B >= 1 && B <= m->max_batch);
    return cspan_sub(m->prob, 0, (uint64_t)B * m->cfg.dense_output_size);
}

float *model_param_values(dummy_model *m, uint32_t i)
{
    return compute_span_view(m->dev, model_values_span(m, i));
}

float *model_param_grad(dummy_model *m, uint32_t i)
{
    assert(i < m->nparams);
    return m->info[i].sparse ? NULL : compute_span_view(m->dev, model_grad_span(m, i));
}

uint64_t model_sparse_grad(const dummy_model *m, const int64_t **rows, const float **vals)
{
    assert(m->cfg.sparse);
    *rows = m->sp_rows;
    *vals = compute_span_view(m->dev, cspan_at(m->grads, m->info[0].offset, m->info[0].size));
    return m->sp_nnz;
}

void model_zero_grad(dummy_model *m)
{
    compute_zero(m->dev, cspan_all(m->grads));
    m->sp_nnz = 0;
}

/* ---- forward ---------------------------------------------------------------------- */

/* y = x W^T + bias for layer l, x: B x in, y: B x out.
 *
 * Computed as y^T = W x^T into scratch, then transposed with the bias
 * added: for the benchmark's small batches OpenBLAS 0.3.21 runs that shape
 * about 2.5x faster than x W^T on one thread (B = 10, 1024 x 1024: 0.67 ms
 * against 1.66 ms including the transpose), and the transpose costs B x out
 * copies. scratch (B x out floats) is a backward buffer, free during the
 * forward pass. */
static void model_linear_forward(dummy_model *m, uint32_t l, uint32_t B, cspan scratch)
{
    uint64_t in = m->cfg.dense_input_size, out = m->cfg.dense_output_size;
    cspan W = model_values_span(m, model_weight_index(l));
    cspan bias = model_values_span(m, model_bias_index(l));
    compute_gemm(m->dev, false, true, out, B, in, 1.0f, W, in, m->x[l], in, 0.0f, scratch, B);
    compute_transpose_bias(m->dev, scratch, bias, B, out, m->x[l + 1]);
}

double model_forward(dummy_model *m, const data_batch *b)
{
    assert(b->len >= 1 && b->len <= m->max_batch && b->sample_length >= 1);
    uint32_t B = b->len, NL = m->cfg.dense_layers_count;
    uint64_t C = m->cfg.dense_output_size;
    compute_bag_mean(m->dev, model_values_span(m, 0), m->cfg.embedding_dim, b->indices, B, b->sample_length,
                     m->x[0]);
    for (uint32_t l = 0; l < NL; l++)
        model_linear_forward(m, l, B, m->d_a);
    compute_softmax_ce(m->dev, m->x[NL], B, C, b->targets, m->prob, m->q, cspan_all(m->loss));
    m->fwd = b;
    return compute_loss(m->dev, cspan_all(m->loss));
}

/* ---- backward --------------------------------------------------------------------- */

/* Layer l's bias and weight gradients from dy (B x out), each announced as
 * soon as it is enqueued (on the cpu: written); then dx = dy W (B x in). */
static void model_linear_backward(dummy_model *m, uint32_t l, uint32_t B, cspan dy, cspan dx, model_ready_fn ready,
                                  void *ctx)
{
    uint64_t in = m->cfg.dense_input_size, out = m->cfg.dense_output_size;
    uint32_t wi = model_weight_index(l), bi = model_bias_index(l);

    compute_colsum(m->dev, dy, B, out, model_grad_span(m, bi), COMPUTE_SUM_FROM_ROW0);
    if (ready)
        ready(ctx, bi);

    compute_gemm(m->dev, true, false, out, in, B, 1.0f, dy, out, m->x[l], in, 0.0f, model_grad_span(m, wi), in);
    if (ready)
        ready(ctx, wi);

    compute_gemm(m->dev, false, false, B, in, out, 1.0f, dy, out, model_values_span(m, wi), in, 0.0f, dx, in);
}

void model_backward(dummy_model *m, const data_batch *b, model_ready_fn ready, void *ctx)
{
    assert(m->fwd == b && "model_backward needs the batch of the last model_forward");
    uint32_t B = b->len, NL = m->cfg.dense_layers_count;
    uint64_t D = m->cfg.embedding_dim;
    cspan dy = m->d_a, dx = m->d_b;
    compute_softmax_ce_bwd(m->dev, m->prob, m->q, B, m->cfg.dense_output_size, b->targets, dy);
    for (uint32_t l = NL; l-- > 0;) {
        model_linear_backward(m, l, B, dy, dx, ready, ctx);
        cspan t = dy;
        dy = dx;
        dx = t;
    }
    /* dy is now d(bag means), B x D: divided by the bag size once per bag
     * (PyTorch's mean backward), then scatter-added. */
    if (m->cfg.sparse)
        m->sp_nnz = compute_bag_mean_bwd_sparse(m->dev, dy, D, b->indices, B, b->sample_length, m->sp_rows,
                                                m->sp_slot, model_grad_span(m, 0));
    else
        compute_bag_mean_bwd_dense(m->dev, dy, D, b->indices, B, b->sample_length, model_grad_span(m, 0));
    if (ready)
        ready(ctx, 0);
    m->fwd = NULL;
}
