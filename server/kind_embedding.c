/* kind_embedding.c — kind `embedding`, the parameter server of the seed's
 * DDP+RPC benchmark (benchmark_ddp_rpc.py): each server holds an
 * EmbeddingBag(num_embeddings, embedding_dim, mode="sum"); trainers look
 * bags of rows up remotely and the seed's DistributedOptimizer applies SGD
 * to the rows each lookup named.
 *
 * No futures: a `lookup` or `update` concerns one trainer only and is
 * applied at once, as the seed's RPCs are. The transport hands over each
 * call with its whole payload (indices, offsets, and for an update the
 * bags' gradients); this file checks it against the table — every rule
 * before anything changes, so a refused call leaves the table as it was —
 * and submits one device job: a gather (the bags' sums into an output
 * devbuf, made host-visible: the answer), a scatter SGD (an update with
 * the sparse rule: a step per named row) or a dense SGD (an update with
 * `grad` "dense", the seed's: the table-sized gradient, then every row
 * stepped; its scratch gradient is a second table-sized devbuf).
 * Device jobs complete in submission order, so a trainer's lookup sees
 * every update it sent before, whatever the device.
 *
 * The table is a devbuf, written only by device jobs, and by its fill once
 * nothing is in flight (the futures layer drains the device before a
 * reset). start and reset only seed the fill; emb_fill draws the normals a
 * slice at a time (8 GiB take seconds) on the host, into the device's recv
 * areas (cpu: the table itself; a GPU: staging copied to the device), and
 * the reactor hands no call to a kind that is not ready.
 */
#include "server/kind.h"
#include "shared/cli.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "shared/rng.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Indices, offsets and gradients are read in place from the payload. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "payloads are little-endian");

/* The most floats a table may hold (8 GiB). */
#define EMB_MAX_FLOATS (1ull << 31)

/* A fill slice ends on a multiple of this many floats (or at the table's
 * end). rng_fill_normal draws normals in pairs, in blocks of 128 pairs:
 * filling [0, a) and then [a, n) from the same generator gives the bits of
 * one fill of [0, n) whenever a is even (each block draws until it has its
 * pairs, so no draw depends on where a block starts); 256 keeps the slices
 * on the blocks too. */
#define EMB_FILL_ALIGN 256u

typedef struct emb_kind {
    kind base;
    uint64_t rows, cols;
    devbuf *table;                  /* rows x cols floats, row-major */
    devbuf *gsum;                   /* rows x cols floats: a dense update's gradient (scratch);
                                     * made at the first dense update, NULL before */
    uint64_t submitted, completed;  /* device jobs */
    rng fill_rng;                   /* the table's stream, where the fill is */
    uint64_t filled;                /* floats of the table filled from it */
} emb_kind;

/* PyTorch initializes an EmbeddingBag's weight N(0, 1); here from the
 * seed and this server's own stream, so every server has its own table:
 * rng_fill_normal over the whole table, done by emb_fill in slices. */
static void emb_fill_begin(emb_kind *ek)
{
    const embedding_config *c = &ek->base.cfg.emb;
    rng_seed(&ek->fill_rng, c->seed, RNG_STREAM_EMBEDDING + (uint64_t)c->rank);
    ek->filled = 0;
    ek->base.fill_total = ek->rows * ek->cols * sizeof(float);
    ek->base.fill_left = ek->base.fill_total;
}

static uint64_t emb_fill(kind *k, uint64_t budget)
{
    emb_kind *ek = (emb_kind *)k;
    uint64_t n = ek->rows * ek->cols, left = n - ek->filled;
    uint64_t want = budget / sizeof(float);
    if (want < left) {
        want -= want % EMB_FILL_ALIGN;
        if (want == 0)
            want = EMB_FILL_ALIGN < left ? EMB_FILL_ALIGN : left;
    } else {
        want = left;
    }
    assert(want % 2 == 0 || want == left); /* a slice never splits a pair */
    /* In the device's recv areas: at least DEVICE_AREA_MIN bytes, so every
     * piece but the table's last holds whole blocks. */
    while (want > 0) {
        size_t max;
        float *area = (float *)(void *)device_recv_area(k->dev, ek->table, ek->filled * sizeof(float), &max);
        uint64_t take = max / sizeof(float);
        if (take < want)
            take -= take % EMB_FILL_ALIGN;
        else
            take = want;
        assert(take > 0 && (take % 2 == 0 || take == n - ek->filled));
        rng_fill_normal(area, take, &ek->fill_rng);
        device_recv_done(k->dev, ek->table, ek->filled * sizeof(float), take * sizeof(float));
        ek->filled += take;
        want -= take;
    }
    k->fill_left = (n - ek->filled) * sizeof(float);
    return k->fill_left;
}

/* The payload size the header promises: 8 * (nnz + bags), plus for an
 * update 4 * bags * cols. UINT64_MAX on overflow. */
static uint64_t emb_payload_size(const kind_call *c)
{
    if (c->nnz > UINT64_MAX / 16 || c->bags > UINT64_MAX / 16)
        return UINT64_MAX;
    uint64_t n = 8 * (c->nnz + c->bags);
    if (!c->update)
        return n;
    if (c->cols && c->bags > (UINT64_MAX - n) / 4 / c->cols)
        return UINT64_MAX;
    return n + 4 * c->bags * c->cols;
}

/* Every rule of docs/protocol.md ("Kind `embedding`") that a call's
 * payload must follow, checked before anything changes. */
static frame_errcode emb_check(const emb_kind *ek, const kind_call *c, char *msg, size_t len)
{
    if (c->update && c->cols != ek->cols) {
        snprintf(msg, len, "update with cols %" PRIu64 ", but this server's rows have %" PRIu64 " columns", c->cols,
                 ek->cols);
        return ERR_SHAPE_MISMATCH;
    }
    uint64_t want = emb_payload_size(c), have = c->payload ? c->payload->len : 0;
    if (want != have) {
        snprintf(msg, len, "payload is %" PRIu64 " bytes but nnz %" PRIu64 " and bags %" PRIu64 " need %" PRIu64,
                 have, c->nnz, c->bags, want);
        return ERR_SHAPE_MISMATCH;
    }
    if (!have)
        return ERR_NONE;
    const int64_t *idx = (const int64_t *)(const void *)c->payload->data;
    const int64_t *off = idx + c->nnz;
    for (uint64_t b = 0; b < c->bags; b++) {
        if (b == 0 && off[0] != 0) {
            snprintf(msg, len, "offsets[0] is %" PRId64 ", not 0", off[0]);
            return ERR_BAD_INDEX;
        }
        if (b > 0 && off[b] < off[b - 1]) {
            snprintf(msg, len, "offsets decrease: offsets[%" PRIu64 "] = %" PRId64 " < offsets[%" PRIu64 "] = %" PRId64,
                     b, off[b], b - 1, off[b - 1]);
            return ERR_BAD_INDEX;
        }
        if ((uint64_t)off[b] > c->nnz) {
            snprintf(msg, len, "offsets[%" PRIu64 "] = %" PRId64 " is past nnz %" PRIu64, b, off[b], c->nnz);
            return ERR_BAD_INDEX;
        }
    }
    for (uint64_t i = 0; i < c->nnz; i++)
        if (idx[i] < 0 || (uint64_t)idx[i] >= ek->rows) {
            snprintf(msg, len, "index %" PRId64 " (position %" PRIu64 ") is outside [0, %" PRIu64 ")", idx[i], i,
                     ek->rows);
            return ERR_BAD_INDEX;
        }
    return ERR_NONE;
}

/* The call a job belongs to (each call carries its own job). */
static kind_call *emb_call_of(device_job *j)
{
    return (kind_call *)(void *)((char *)j - offsetof(kind_call, job));
}

static void emb_done(device_job *j)
{
    emb_kind *ek = j->arg;
    kind_call *c = emb_call_of(j);
    ek->completed++;
    c->error = j->error;
    if (j->u.bags.out && !j->error) {
        assert(!c->answer);
        c->answer = device_buf_take_host(ek->base.dev, j->u.bags.out);
        j->u.bags.out = NULL;
    } else if (j->u.bags.out) {
        device_buf_free(ek->base.dev, j->u.bags.out); /* the device failed: no rows */
        j->u.bags.out = NULL;
    }
    double ms = kind_job_ms(j, c->t_ns);
    if (c->update) {
        /* Positions that belong to a bag: every one when there are bags
         * (offsets[0] = 0), none otherwise. */
        ek->base.rows_touched += c->bags ? c->nnz : 0;
        metrics_add(ek->base.m_update, ms);
    } else {
        metrics_add(ek->base.m_compute, ms);
    }
    log_debug("%s batch %" PRIu64 ": %" PRIu64 " bags, %" PRIu64 " indices, %.3f ms", c->update ? "update" : "lookup",
              c->batch, c->bags, c->nnz, ms);
    c->done(c);
}

/* The call's job over its bags, submitted: op with the call's indices and
 * offsets (the payload is 64-byte aligned, so both arrays are aligned for
 * int64), and what only that op uses (out, made host-visible; or grad and
 * lr). */
static void emb_submit(emb_kind *ek, kind_call *c, device_job_op op, devbuf *out, const float *grad)
{
    assert(op != JOB_DENSE_SGD || ek->gsum);
    const int64_t *p = c->payload ? (const int64_t *)(const void *)c->payload->data : NULL;
    device_job *j = &c->job;
    memset(j, 0, sizeof *j);
    j->op = op;
    j->u.bags.table = ek->table;
    j->u.bags.cols = ek->cols;
    j->u.bags.idx = p;
    j->u.bags.off = p ? p + c->nnz : NULL;
    j->u.bags.nnz = c->nnz;
    j->u.bags.bags = c->bags;
    j->u.bags.out = out;
    j->u.bags.grad = grad;
    j->u.bags.lr = ek->base.cfg.emb.lr;
    j->u.bags.gsum = op == JOB_DENSE_SGD ? ek->gsum : NULL;
    j->u.bags.rows = ek->rows;
    j->to_host = out;
    j->done = emb_done;
    j->arg = ek;
    device_job_for(j, c->batch, UINT64_MAX); /* a call has no bucket */
    ek->submitted++;
    device_submit(ek->base.dev, j);
}

static frame_errcode emb_lookup(kind *k, kind_call *c, char *msg, size_t len)
{
    emb_kind *ek = (emb_kind *)k;
    assert(!c->update && !c->answer);
    assert(kind_ready(k)); /* the reactor holds trainers' input while the table fills */
    frame_errcode code = emb_check(ek, c, msg, len);
    if (code != ERR_NONE)
        return code;
    c->cols = ek->cols;
    devbuf *out = NULL;
    if (c->bags && !(out = device_buf_new(k->dev, c->bags * ek->cols * sizeof(float)))) {
        snprintf(msg, len, "server out of memory for %" PRIu64 " rows of the answer", c->bags);
        return ERR_TOO_LARGE;
    }
    /* Even an empty lookup goes through the device: its answer must not
     * overtake the answers of earlier calls still in flight. */
    emb_submit(ek, c, JOB_GATHER, out, NULL);
    return ERR_NONE;
}

static frame_errcode emb_update(kind *k, kind_call *c, char *msg, size_t len)
{
    emb_kind *ek = (emb_kind *)k;
    assert(c->update);
    assert(kind_ready(k));
    frame_errcode code = emb_check(ek, c, msg, len);
    if (code != ERR_NONE)
        return code;
    const float *grad = c->payload ? (const float *)(const void *)(c->payload->data + 8 * (c->nnz + c->bags)) : NULL;
    /* The seed's EmbeddingBag is not sparse: its gradient is the table's
     * size, and SGD steps every row. The scratch for it is made once, at
     * the first such update (a table's worth of memory). */
    if (c->dense && !ek->gsum && !(ek->gsum = device_buf_new(k->dev, ek->rows * ek->cols * sizeof(float)))) {
        snprintf(msg, len, "server out of memory for the table's dense gradient (%" PRIu64 " x %" PRIu64 " floats)",
                 ek->rows, ek->cols);
        return ERR_TOO_LARGE;
    }
    emb_submit(ek, c, c->dense ? JOB_DENSE_SGD : JOB_SCATTER_SGD, NULL, grad);
    return ERR_NONE;
}

/* A push is refused by admit, so the push ops below are never reached. */
static frame_errcode emb_admit(kind *k, const frame_hdr *h, uint64_t *batch, char *msg, size_t len)
{
    (void)k;
    (void)h;
    (void)batch;
    snprintf(msg, len, "an embedding server takes lookup and update, not push");
    return ERR_UNSUPPORTED;
}

static int emb_push_begin(kind *k, push_ctx *p)
{
    (void)k;
    (void)p;
    assert(!"embedding: no push is ever admitted");
    return -1;
}

static uint8_t *emb_push_direct(kind *k, push_ctx *p, uint64_t off, size_t *max)
{
    (void)k;
    (void)p;
    (void)off;
    *max = 0;
    return NULL;
}

static void emb_push_direct_done(kind *k, push_ctx *p, uint64_t off, size_t n)
{
    (void)k;
    (void)p;
    (void)off;
    (void)n;
}

static int emb_push_data(kind *k, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    (void)k;
    (void)off;
    (void)src;
    (void)n;
    snprintf(p->err, sizeof p->err, "an embedding server takes no push");
    return -1;
}

static void emb_push_abort(kind *k, push_ctx *p)
{
    (void)k;
    (void)p;
}

static void emb_resolve(kind *k, future *f)
{
    (void)f;
    k->resolved(k->resolved_ctx, f, NULL, ERR_PEER_LOST, "an embedding server has no futures");
}

static void emb_release(kind *k, future *f)
{
    (void)k;
    (void)f;
}

static int emb_start(kind *k)
{
    emb_fill_begin((emb_kind *)k);
    return 0;
}

/* Between passes, a fresh table from the seed: the seed builds a new
 * model (and its servers' tables) for every run. */
static void emb_reset(kind *k)
{
    emb_kind *ek = (emb_kind *)k;
    assert(ek->submitted == ek->completed); /* drained by the futures layer */
    emb_fill_begin(ek);
}

static void emb_destroy(kind *k)
{
    emb_kind *ek = (emb_kind *)k;
    assert(ek->submitted == ek->completed); /* nothing may still write the table */
    device_buf_free(k->dev, ek->table);
    device_buf_free(k->dev, ek->gsum);
    free(ek);
}

static const kind_ops emb_ops = {
    .name = "embedding",
    .admit = emb_admit,
    .push_begin = emb_push_begin,
    .push_direct = emb_push_direct,
    .push_direct_done = emb_push_direct_done,
    .push_data = emb_push_data,
    .push_abort = emb_push_abort,
    .resolve = emb_resolve,
    .release = emb_release,
    .start = emb_start,
    .reset = emb_reset,
    .fill = emb_fill,
    .lookup = emb_lookup,
    .update = emb_update,
    .destroy = emb_destroy,
};

kind *kind_embedding_new(const kind_config *cfg, device *dev, char *err, size_t errlen)
{
    const embedding_config *c = &cfg->emb;
    if (c->num_embeddings == 0 || c->embedding_dim == 0 || c->num_embeddings > EMB_MAX_FLOATS ||
        c->embedding_dim > EMB_MAX_FLOATS || c->num_embeddings * c->embedding_dim > EMB_MAX_FLOATS) {
        snprintf(err, errlen,
                 "embedding: a table of %" PRIu64 " x %" PRIu64 " is not allowed (each at least 1, at most 2^31 "
                 "floats in all)",
                 c->num_embeddings, c->embedding_dim);
        return NULL;
    }
    if (!(c->lr >= 0) || !isfinite(c->lr)) {
        snprintf(err, errlen, "embedding: lr must be finite and >= 0");
        return NULL;
    }
    emb_kind *ek = calloc(1, sizeof *ek);
    if (!ek) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ek->base.ops = &emb_ops;
    ek->base.dev = dev;
    ek->base.cfg = *cfg;
    ek->rows = c->num_embeddings;
    ek->cols = c->embedding_dim;
    ek->table = device_buf_new(dev, ek->rows * ek->cols * sizeof(float));
    if (!ek->table) {
        free(ek);
        char size[32];
        cli_format_bytes(c->num_embeddings * c->embedding_dim * sizeof(float), size, sizeof size);
        snprintf(err, errlen, "embedding: out of memory for a table of %" PRIu64 " x %" PRIu64 " floats (%s)",
                 c->num_embeddings, c->embedding_dim, size);
        return NULL;
    }
    return &ek->base;
}
