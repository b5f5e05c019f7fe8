/* model.c — DummyModel forward/backward on the CPU with CBLAS (see model.h
 * for the model, the parameter order, the initialization and the threading
 * contract of the ready callback).
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

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_MAX_DIM ((uint64_t)1 << 24)       /* any one dimension */
#define MODEL_MAX_ROWS ((uint64_t)1 << 31)      /* embedding rows: slots are uint32 */
#define MODEL_MAX_FLOATS ((uint64_t)1 << 36)    /* all parameters together */
#define MODEL_MAX_LAYERS 10000u                 /* keeps names in 32 bytes */
#define MODEL_NO_SLOT UINT32_MAX

struct dummy_model {
    model_config cfg;
    uint32_t max_batch;
    uint32_t nparams;
    model_param_info *info; /* nparams */
    uint64_t total;         /* floats in values (and in grads) */
    float *values;          /* all parameters, flat, parameter order */
    float *grads;           /* same layout; sparse: region 0 holds the COO rows */

    float *act;             /* one allocation for everything below */
    float **x;              /* NL + 1 pointers into act: layer inputs, then z */
    float *prob;            /* p = softmax(z), B x C */
    float *q;               /* softmax(p), B x C */
    float *d_a, *d_b;       /* ping-pong gradients wrt activations, B x max(D, C);
                               d_a is also the forward pass's GEMM scratch */

    /* sparse embedding gradient */
    int64_t *sp_rows;       /* unique rows, ascending; capacity num_embeddings */
    uint64_t sp_nnz;
    uint32_t *sp_slot;      /* row -> position in sp_rows; MODEL_NO_SLOT between batches */

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

static void model_init_values(dummy_model *m, uint64_t seed)
{
    rng r;
    rng_seed(&r, seed, RNG_STREAM_MODEL);
    rng_fill_normal(model_param_values(m, 0), m->info[0].size, &r);
    double bound = 1.0 / sqrt((double)m->cfg.dense_input_size);
    for (uint32_t i = 1; i < m->nparams; i++)
        rng_fill_uniform(model_param_values(m, i), m->info[i].size, bound, &r);
}

static int model_alloc_activations(dummy_model *m)
{
    uint64_t B = m->max_batch, D = m->cfg.dense_input_size, C = m->cfg.dense_output_size;
    uint32_t NL = m->cfg.dense_layers_count;
    uint64_t wide = D > C ? D : C;
    /* x[0]: B x D; x[1..NL]: B x C; prob, q: B x C; d_a, d_b: B x wide. */
    uint64_t floats = B * D + (uint64_t)NL * B * C + 2 * B * C + 2 * B * wide;
    m->x = calloc(NL + 1, sizeof *m->x);
    m->act = malloc(floats * sizeof *m->act);
    if (!m->x || !m->act)
        return -1;
    float *p = m->act;
    m->x[0] = p;
    p += B * D;
    for (uint32_t l = 1; l <= NL; l++, p += B * C)
        m->x[l] = p;
    m->prob = p;
    p += B * C;
    m->q = p;
    p += B * C;
    m->d_a = p;
    p += B * wide;
    m->d_b = p;
    p += B * wide;
    assert(p == m->act + floats);
    return 0;
}

dummy_model *model_new(const model_config *cfg, uint64_t seed, uint32_t max_batch, char *err, size_t errlen)
{
    if (model_check_config(cfg, max_batch, err, errlen) < 0)
        return NULL;
    dummy_model *m = calloc(1, sizeof *m);
    if (!m)
        goto oom;
    m->cfg = *cfg;
    m->max_batch = max_batch;
    m->nparams = 1 + 2 * cfg->dense_layers_count;
    m->info = calloc(m->nparams, sizeof *m->info);
    if (!m->info)
        goto oom;
    model_layout(m);
    m->values = malloc(m->total * sizeof *m->values);
    m->grads = calloc(m->total, sizeof *m->grads);
    if (!m->values || !m->grads || model_alloc_activations(m) < 0)
        goto oom;
    if (cfg->sparse) {
        m->sp_rows = malloc(cfg->num_embeddings * sizeof *m->sp_rows);
        m->sp_slot = malloc(cfg->num_embeddings * sizeof *m->sp_slot);
        if (!m->sp_rows || !m->sp_slot)
            goto oom;
        for (uint64_t r = 0; r < cfg->num_embeddings; r++)
            m->sp_slot[r] = MODEL_NO_SLOT;
    }
    model_init_values(m, seed);
    return m;
oom:
    model_free(m);
    errbuf_set(err, errlen, "model: out of memory");
    return NULL;
}

void model_free(dummy_model *m)
{
    if (!m)
        return;
    free(m->info);
    free(m->values);
    free(m->grads);
    free(m->x);
    free(m->act);
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
float *model_values(dummy_model *m) { return m->values; }
const float *model_values_const(const dummy_model *m) { return m->values; }
float *model_grads(dummy_model *m) { return m->grads; }

const model_param_info *model_param(const dummy_model *m, uint32_t i)
{
    assert(i < m->nparams);
    return &m->info[i];
}

float *model_param_values(dummy_model *m, uint32_t i)
{
    assert(i < m->nparams);
    return m->values + m->info[i].offset;
}

float *model_param_grad(dummy_model *m, uint32_t i)
{
    assert(i < m->nparams);
    return m->info[i].sparse ? NULL : m->grads + m->info[i].offset;
}

uint64_t model_sparse_grad(const dummy_model *m, const int64_t **rows, const float **vals)
{
    assert(m->cfg.sparse);
    *rows = m->sp_rows;
    *vals = m->grads + m->info[0].offset;
    return m->sp_nnz;
}

void model_zero_grad(dummy_model *m)
{
    memset(m->grads, 0, m->total * sizeof *m->grads);
    m->sp_nnz = 0;
}

/* ---- forward ---------------------------------------------------------------------- */

static void model_embedding_forward(dummy_model *m, const data_batch *b)
{
    uint64_t D = m->cfg.embedding_dim, L = b->sample_length;
    const float *W = model_param_values(m, 0);
    for (uint32_t s = 0; s < b->len; s++) {
        float *out = m->x[0] + s * D;
        memset(out, 0, D * sizeof *out);
        for (uint64_t t = 0; t < L; t++) {
            int64_t r = b->indices[s * L + t];
            assert(r >= 0 && (uint64_t)r < m->cfg.num_embeddings);
            const float *row = W + (uint64_t)r * D;
            for (uint64_t k = 0; k < D; k++)
                out[k] += row[k];
        }
        for (uint64_t k = 0; k < D; k++)
            out[k] /= (float)L; /* mean: the sum over the bag's size, as PyTorch */
    }
}

/* y = x W^T + bias for layer l, x: B x in, y: B x out.
 *
 * Computed as y^T = W x^T into scratch, then transposed with the bias
 * added: for the benchmark's small batches OpenBLAS 0.3.21 runs that shape
 * about 2.5x faster than x W^T on one thread (B = 10, 1024 x 1024: 0.67 ms
 * against 1.66 ms including the transpose), and the transpose costs B x out
 * copies. scratch (B x out floats) is a backward buffer, free during the
 * forward pass. */
static void model_linear_forward(dummy_model *m, uint32_t l, uint32_t B, float *scratch)
{
    uint64_t in = m->cfg.dense_input_size, out = m->cfg.dense_output_size;
    const float *W = model_param_values(m, model_weight_index(l));
    const float *bias = model_param_values(m, model_bias_index(l));
    float *y = m->x[l + 1];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)out, (int)B, (int)in, 1.0f, W, (int)in, m->x[l],
                (int)in, 0.0f, scratch, (int)B);
    for (uint32_t s = 0; s < B; s++)
        for (uint64_t o = 0; o < out; o++)
            y[s * out + o] = scratch[o * B + s] + bias[o];
}

/* dst = softmax(src) over n entries. */
static void model_softmax(float *dst, const float *src, uint64_t n)
{
    float mx = src[0];
    for (uint64_t k = 1; k < n; k++)
        mx = src[k] > mx ? src[k] : mx;
    double sum = 0;
    for (uint64_t k = 0; k < n; k++) {
        dst[k] = expf(src[k] - mx);
        sum += dst[k];
    }
    float inv = (float)(1.0 / sum);
    for (uint64_t k = 0; k < n; k++)
        dst[k] *= inv;
}

double model_forward(dummy_model *m, const data_batch *b)
{
    assert(b->len >= 1 && b->len <= m->max_batch && b->sample_length >= 1);
    uint32_t B = b->len, NL = m->cfg.dense_layers_count;
    uint64_t C = m->cfg.dense_output_size;
    model_embedding_forward(m, b);
    for (uint32_t l = 0; l < NL; l++)
        model_linear_forward(m, l, B, m->d_a);
    const float *z = m->x[NL];
    double loss = 0;
    for (uint32_t s = 0; s < B; s++) {
        const float *zs = z + s * C;
        float *p = m->prob + s * C, *q = m->q + s * C;
        model_softmax(p, zs, C);
        model_softmax(q, p, C);
        /* CE(p, y) = -log softmax(p)[y] = -log q[y]; q[y] >= e^0 / (C e^1)
         * since p is in [0, 1], so the log is always finite. */
        int64_t y = b->targets[s];
        assert(y >= 0 && (uint64_t)y < C);
        loss -= log((double)q[y]);
    }
    m->fwd = b;
    return loss / B;
}

/* ---- backward --------------------------------------------------------------------- */

/* dz (B x C) from the loss head, see the top of this file. */
static void model_head_backward(dummy_model *m, const data_batch *b, float *dz)
{
    uint64_t C = m->cfg.dense_output_size;
    float invB = 1.0f / (float)b->len;
    for (uint32_t s = 0; s < b->len; s++) {
        const float *p = m->prob + s * C, *q = m->q + s * C;
        float *g = dz + s * C;
        int64_t y = b->targets[s];
        double dot = 0;
        for (uint64_t k = 0; k < C; k++) {
            g[k] = (q[k] - (k == (uint64_t)y ? 1.0f : 0.0f)) * invB;
            dot += (double)g[k] * p[k];
        }
        float fdot = (float)dot;
        for (uint64_t k = 0; k < C; k++)
            g[k] = p[k] * (g[k] - fdot);
    }
}

/* Layer l's bias and weight gradients from dy (B x out), each announced as
 * soon as it is written; then dx = dy W (B x in) if dx is not NULL. */
static void model_linear_backward(dummy_model *m, uint32_t l, uint32_t B, const float *dy, float *dx,
                                  model_ready_fn ready, void *ctx)
{
    uint64_t in = m->cfg.dense_input_size, out = m->cfg.dense_output_size;
    uint32_t wi = model_weight_index(l), bi = model_bias_index(l);

    float *db = model_param_grad(m, bi);
    memcpy(db, dy, out * sizeof *db);
    for (uint32_t s = 1; s < B; s++)
        for (uint64_t k = 0; k < out; k++)
            db[k] += dy[s * out + k];
    if (ready)
        ready(ctx, bi);

    float *dW = model_param_grad(m, wi);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)B, 1.0f, dy, (int)out, m->x[l],
                (int)in, 0.0f, dW, (int)in);
    if (ready)
        ready(ctx, wi);

    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)in, (int)out, 1.0f, dy, (int)out,
                    model_param_values(m, wi), (int)in, 0.0f, dx, (int)in);
}

static int model_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sparse: collect the unique rows of the batch (marking them in sp_slot,
 * so the cost is O(B L + nnz log nnz), never O(num_embeddings)), sort them,
 * then accumulate into nnz compact rows. */
static void model_embedding_backward_sparse(dummy_model *m, const data_batch *b, float *dx0)
{
    uint64_t D = m->cfg.embedding_dim, L = b->sample_length;
    uint64_t nnz = 0;
    for (uint64_t k = 0; k < (uint64_t)b->len * L; k++) {
        int64_t r = b->indices[k];
        if (m->sp_slot[r] == MODEL_NO_SLOT) {
            m->sp_slot[r] = 0; /* mark; the real slot is set after sorting */
            m->sp_rows[nnz++] = r;
        }
    }
    assert(nnz <= m->cfg.num_embeddings);
    qsort(m->sp_rows, nnz, sizeof *m->sp_rows, model_cmp_i64);
    for (uint64_t k = 0; k < nnz; k++)
        m->sp_slot[m->sp_rows[k]] = (uint32_t)k;
    float *vals = m->grads + m->info[0].offset; /* nnz <= num_embeddings rows fit */
    memset(vals, 0, nnz * D * sizeof *vals);
    for (uint32_t s = 0; s < b->len; s++) {
        const float *g = dx0 + s * D;
        for (uint64_t t = 0; t < L; t++) {
            float *row = vals + (uint64_t)m->sp_slot[b->indices[s * L + t]] * D;
            for (uint64_t k = 0; k < D; k++)
                row[k] += g[k];
        }
    }
    for (uint64_t k = 0; k < nnz; k++)
        m->sp_slot[m->sp_rows[k]] = MODEL_NO_SLOT;
    m->sp_nnz = nnz;
}

static void model_embedding_backward_dense(dummy_model *m, const data_batch *b, const float *dx0)
{
    uint64_t D = m->cfg.embedding_dim, L = b->sample_length;
    float *G = model_param_grad(m, 0);
    memset(G, 0, m->info[0].size * sizeof *G);
    for (uint32_t s = 0; s < b->len; s++) {
        const float *g = dx0 + s * D;
        for (uint64_t t = 0; t < L; t++) {
            float *row = G + (uint64_t)b->indices[s * L + t] * D;
            for (uint64_t k = 0; k < D; k++)
                row[k] += g[k];
        }
    }
}

void model_backward(dummy_model *m, const data_batch *b, model_ready_fn ready, void *ctx)
{
    assert(m->fwd == b && "model_backward needs the batch of the last model_forward");
    uint32_t B = b->len, NL = m->cfg.dense_layers_count;
    uint64_t D = m->cfg.embedding_dim;
    float *dy = m->d_a, *dx = m->d_b;
    model_head_backward(m, b, dy);
    for (uint32_t l = NL; l-- > 0;) {
        model_linear_backward(m, l, B, dy, dx, ready, ctx);
        float *t = dy;
        dy = dx;
        dx = t;
    }
    /* dy is now d(bag means), B x D. Divide by the bag size once per bag
     * (PyTorch's mean backward), then scatter-add. */
    float L = (float)b->sample_length;
    for (uint64_t k = 0; k < (uint64_t)B * D; k++)
        dy[k] /= L;
    if (m->cfg.sparse)
        model_embedding_backward_sparse(m, b, dy);
    else
        model_embedding_backward_dense(m, b, dy);
    if (ready)
        ready(ctx, 0);
    m->fwd = NULL;
}
