/* powersgd.c — PyTorch's PowerSGD hooks on a host bucket (see powersgd.h). */
#include "trainer/powersgd.h"
#include "shared/log.h"
#include "shared/grow.h"
#include "shared/mean.h"
#include "shared/rng.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One bucket's state (PyTorch's error_dict, p_memory_dict, q_memory_dict
 * entries for its index). */
typedef struct psgd_bucket {
    uint64_t n;      /* the floats its error covers (batched: side^2); 0: not made */
    float *error;    /* n floats, use_error_feedback */
    bool have_error; /* error holds last step's (else: zeros, not added) */
    float *p, *q;    /* P and Q of its compressed tensors, in PyTorch's order (psgd_order) */
    uint64_t np, nq;
    bool have_pq; /* warm start: p, q hold the previous step's */
} psgd_bucket;

struct psgd {
    psgd_conf conf;
    uint32_t world;
    rng r; /* PyTorch's state.rng: one draw per random Q fill */
    psgd_stats st;
    uint64_t next_stats; /* the iteration of the next compression stats line */
    psgd_bucket *buckets[HOOK_MAX_BUCKETS];
    /* scratch */
    float *pack; /* uncompressed tensors packed; batched: the padded square */
    uint64_t pack_cap;
    double *acc; /* the products' sums: the largest Q's (psgd_mul_t, psgd_mul_nt) */
    uint64_t acc_cap;
    float *qt; /* the largest Q transposed */
    uint64_t qt_cap;
    bool *compress; /* per tensor of the bucket at hand */
    uint64_t compress_cap;
    uint32_t *order; /* its compressed tensors in PyTorch's order (psgd_order) */
    uint64_t order_cap;
};

psgd *psgd_new(const psgd_conf *p, uint32_t world_size)
{
    assert(world_size >= 1 && p->rank >= 1);
    psgd *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->conf = *p;
    s->world = world_size;
    psgd_reset(s);
    return s;
}

static void psgd_bucket_free(psgd_bucket *b)
{
    if (!b)
        return;
    free(b->error);
    free(b->p);
    free(b->q);
    free(b);
}

void psgd_reset(psgd *s)
{
    for (uint32_t i = 0; i < HOOK_MAX_BUCKETS; i++) {
        psgd_bucket_free(s->buckets[i]);
        s->buckets[i] = NULL;
    }
    memset(&s->st, 0, sizeof s->st);
    s->next_stats = 0;
    rng_seed(&s->r, s->conf.random_seed, RNG_STREAM_POWERSGD);
}

void psgd_free(psgd *s)
{
    if (!s)
        return;
    psgd_reset(s);
    free(s->pack);
    free(s->acc);
    free(s->qt);
    free(s->compress);
    free(s->order);
    free(s);
}

void psgd_get_stats(const psgd *s, psgd_stats *o) { *o = s->st; }

const float *psgd_error(const psgd *s, uint32_t id, uint64_t *n)
{
    const psgd_bucket *b = id < HOOK_MAX_BUCKETS ? s->buckets[id] : NULL;
    if (!b || !b->error || !b->have_error)
        return NULL;
    *n = b->n;
    return b->error;
}

/* ---- the math ---------------------------------------------------------------- */

bool psgd_should_compress(uint64_t rows, uint64_t cols, uint32_t r, double min_compression_rate)
{
    /* PyTorch's, in its (Python: exact integer, then float) arithmetic. */
    double uncompressed = (double)rows * (double)cols;
    double compressed = ((double)rows + (double)cols) * (double)r;
    return compressed * min_compression_rate < uncompressed;
}

void psgd_orthogonalize(float *m, uint64_t rows, uint32_t cols, float epsilon)
{
    for (uint32_t i = 0; i < cols; i++) {
        double ss = 0;
        for (uint64_t k = 0; k < rows; k++)
            ss += (double)m[k * cols + i] * m[k * cols + i];
        float norm = (float)sqrt(ss) + epsilon;
        for (uint64_t k = 0; k < rows; k++)
            m[k * cols + i] /= norm;
        for (uint32_t j = i + 1; j < cols; j++) {
            double dot = 0;
            for (uint64_t k = 0; k < rows; k++)
                dot += (double)m[k * cols + i] * m[k * cols + j];
            float d = (float)dot;
            for (uint64_t k = 0; k < rows; k++)
                m[k * cols + j] -= d * m[k * cols + i];
        }
    }
}

uint64_t psgd_side(uint64_t count)
{
    uint64_t s = (uint64_t)sqrt((double)count);
    while (s * s < count)
        s++;
    while (s > 0 && (s - 1) * (s - 1) >= count)
        s--;
    return s;
}

/* The products, row-major, each sum in double in a fixed order and
 * rounded once (the same bits on every host; loops the compiler
 * vectorizes without reordering a sum). Scratch: s->qt (c r floats: Q
 * transposed) and s->acc (c r doubles). */

/* sum a[j] b[j], j < n: eight running sums (j mod 8), added pairwise. */
static double psgd_dot(const float *a, const float *b, uint64_t n)
{
    double l[8] = {0};
    uint64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++)
            l[k] += (double)a[j + k] * b[j + k];
    for (int k = 0; j < n; j++, k++)
        l[k] += (double)a[j] * b[j];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* qt (r x c) = q^T, q c x r. */
static void psgd_transpose(float *qt, const float *q, uint64_t c, uint32_t r)
{
    for (uint64_t j = 0; j < c; j++)
        for (uint32_t k = 0; k < r; k++)
            qt[k * c + j] = q[j * r + k];
}

/* p (n x r) = m (n x c) q (c x r). */
static void psgd_mul(psgd *s, float *p, const float *m, const float *q, uint64_t n, uint64_t c, uint32_t r)
{
    psgd_transpose(s->qt, q, c, r);
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < r; k++)
            p[i * r + k] = (float)psgd_dot(m + i * c, s->qt + k * c, c);
}

/* q (c x r) = m^T p, m n x c, p n x r: for each row of m in order, its
 * multiple added to each of the r sums. */
static void psgd_mul_t(psgd *s, float *q, const float *m, const float *p, uint64_t n, uint64_t c, uint32_t r)
{
    double *acc = s->acc; /* r x c: acc[k c + j] */
    memset(acc, 0, (size_t)(c * r) * sizeof *acc);
    for (uint64_t i = 0; i < n; i++) {
        const float *mi = m + i * c;
        for (uint32_t k = 0; k < r; k++) {
            double pk = p[i * r + k], *ak = acc + k * c;
            for (uint64_t j = 0; j < c; j++)
                ak[j] += (double)mi[j] * pk;
        }
    }
    for (uint64_t j = 0; j < c; j++)
        for (uint32_t k = 0; k < r; k++)
            q[j * r + k] = (float)acc[k * c + j];
}

/* m (n x c) = p q^T: each row the sum over k in order of p[i,k] q[:,k]. */
static void psgd_mul_nt(psgd *s, float *m, const float *p, const float *q, uint64_t n, uint64_t c, uint32_t r)
{
    psgd_transpose(s->qt, q, c, r);
    double *row = s->acc; /* c doubles */
    for (uint64_t i = 0; i < n; i++) {
        memset(row, 0, (size_t)c * sizeof *row);
        for (uint32_t k = 0; k < r; k++) {
            double pk = p[i * r + k];
            const float *qk = s->qt + k * c;
            for (uint64_t j = 0; j < c; j++)
                row[j] += pk * (double)qk[j];
        }
        float *mi = m + i * c;
        for (uint64_t j = 0; j < c; j++)
            mi[j] = (float)row[j];
    }
}

/* Room for the products of a c x r Q. */
static int psgd_scratch(psgd *s, uint64_t cr)
{
    return grow_to((void **)&s->acc, &s->acc_cap, cr, sizeof *s->acc) < 0 ||
                   grow_to((void **)&s->qt, &s->qt_cap, cr, sizeof *s->qt) < 0
               ? -1
               : 0;
}

static uint32_t psgd_rank_of(const psgd_conf *p, uint64_t rows, uint64_t cols)
{
    uint64_t r = p->rank;
    r = rows < r ? rows : r;
    return (uint32_t)(cols < r ? cols : r);
}

uint64_t psgd_compressed_floats(const psgd_conf *p, const hook_bucket *b)
{
    if (p->batched) {
        uint64_t side = psgd_side(b->count);
        return 2 * side * psgd_rank_of(p, side, side);
    }
    uint64_t n = 0;
    for (uint32_t t = 0; t < b->ntensors; t++) {
        const hook_tensor *ht = &b->tensors[t];
        uint32_t r = psgd_rank_of(p, ht->rows, ht->cols);
        n += psgd_should_compress(ht->rows, ht->cols, r, p->min_compression_rate) ? (ht->rows + ht->cols) * r
                                                                                  : ht->rows * ht->cols;
    }
    return n;
}

/* ---- one bucket -------------------------------------------------------------- */

/* Bucket id's state for n floats of error and P, Q of np, nq: made (or made
 * anew where the layout changed: another bucket has that id now). */
static psgd_bucket *psgd_bucket_of(psgd *s, uint32_t id, uint64_t n)
{
    psgd_bucket *b = s->buckets[id];
    if (b && b->n != n) {
        psgd_bucket_free(b);
        b = s->buckets[id] = NULL;
    }
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b)
            return NULL;
        b->n = n;
        if (s->conf.error_feedback && !(b->error = calloc(n ? n : 1, sizeof *b->error))) {
            free(b);
            return NULL;
        }
        s->buckets[id] = b;
    }
    return b;
}

/* P and Q room; whether Q must be drawn (not warm). */
static int psgd_pq(psgd_bucket *pb, uint64_t np, uint64_t nq, bool warm_start, bool *random)
{
    *random = !warm_start || !pb->have_pq || pb->np != np || pb->nq != nq;
    if (!*random)
        return 0;
    float *p = realloc(pb->p, (size_t)(np ? np : 1) * sizeof *p);
    if (p)
        pb->p = p;
    float *q = realloc(pb->q, (size_t)(nq ? nq : 1) * sizeof *q);
    if (q)
        pb->q = q;
    if (!p || !q)
        return -1;
    pb->np = np;
    pb->nq = nq;
    return 0;
}

/* Error feedback in: x += error (from the second step on), error = x. */
static void psgd_feedback_in(psgd_bucket *pb, float *x, uint64_t n)
{
    if (pb->have_error)
        for (uint64_t i = 0; i < n; i++)
            x[i] += pb->error[i];
    memcpy(pb->error, x, (size_t)n * sizeof *x);
}

/* ... and out: error = input - result. */
static void psgd_feedback_out(psgd_bucket *pb, const float *x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        pb->error[i] -= x[i];
    pb->have_error = true;
}

static void psgd_scale(float *x, uint64_t n, uint32_t world)
{
    if (world > 1) {
        float sc = mean_scale(world);
        for (uint64_t i = 0; i < n; i++)
            x[i] *= sc;
    }
}

/* The random seed of one fill, and the generator it seeds. */
static void psgd_draw_rng(psgd *s, rng *out)
{
    uint64_t seed = rng_below(&s->r, 1000000000);
    rng_seed(out, seed, RNG_STREAM_POWERSGD);
}

static int psgd_oom(hook_bucket *b, char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory compressing bucket %u (PowerSGD)", b->id);
    return -1;
}

/* The compressed tensors (s->compress) of b in the order PyTorch's
 * powerSGD_hook lays out their P and Q and fills their Qs with one
 * generator: bucket.gradients()'s (b->ddp_reversed: memory order reversed),
 * grouped by shape, the groups in the order their first tensor comes (its
 * shape_to_tensors dict). Each is placed after the last one of its shape
 * placed so far. Returns how many. */
static uint32_t psgd_order(psgd *s, const hook_bucket *b)
{
    uint32_t n = 0, *o = s->order;
    for (uint32_t i = 0; i < b->ntensors; i++) {
        uint32_t t = b->ddp_reversed ? b->ntensors - 1 - i : i;
        if (!s->compress[t])
            continue;
        const hook_tensor *ht = &b->tensors[t];
        uint32_t at = n;
        for (uint32_t j = n; j-- > 0;) {
            const hook_tensor *hj = &b->tensors[o[j]];
            if (hj->rows == ht->rows && hj->cols == ht->cols) {
                at = j + 1;
                break;
            }
        }
        memmove(o + at + 1, o + at, (size_t)(n - at) * sizeof *o);
        o[at] = t;
        n++;
    }
    return n;
}

static int psgd_layerwise(psgd *s, hook_bucket *b, psgd_sum_fn sum, void *ctx, uint64_t *floats, char *err,
                          size_t errlen)
{
    const psgd_conf *c = &s->conf;
    float *x = b->data;
    psgd_bucket *pb = psgd_bucket_of(s, b->id, b->count);
    if (!pb || grow_to((void **)&s->compress, &s->compress_cap, b->ntensors, sizeof *s->compress) < 0 ||
        grow_to((void **)&s->order, &s->order_cap, b->ntensors, sizeof *s->order) < 0)
        return psgd_oom(b, err, errlen);
    if (c->error_feedback)
        psgd_feedback_in(pb, x, b->count);
    /* Step I: which tensors are compressed; P's and Q's sizes. */
    uint64_t np = 0, nq = 0, nunc = 0, most = 0;
    for (uint32_t t = 0; t < b->ntensors; t++) {
        const hook_tensor *ht = &b->tensors[t];
        uint32_t r = psgd_rank_of(c, ht->rows, ht->cols);
        s->compress[t] = psgd_should_compress(ht->rows, ht->cols, r, c->min_compression_rate);
        s->st.numel_before += ht->rows * ht->cols;
        if (s->compress[t]) {
            np += ht->rows * r;
            nq += ht->cols * r;
            most = ht->cols * r > most ? ht->cols * r : most;
            s->st.numel_after += (ht->rows + ht->cols) * r;
        } else {
            nunc += ht->rows * ht->cols;
            s->st.numel_after += ht->rows * ht->cols;
        }
    }
    if (b->last && s->st.iter >= s->next_stats) {
        /* PyTorch's _report_compression_stats */
        log_info("PowerSGD compression stats: iter %" PRIu64 ", total before compression %" PRIu64
                 ", total after compression %" PRIu64 ", rate %.4g",
                 s->st.iter, s->st.numel_before, s->st.numel_after,
                 (double)s->st.numel_before / (double)(s->st.numel_after ? s->st.numel_after : 1));
        s->next_stats = s->st.iter + c->stats_every;
    }
    bool random;
    if (psgd_pq(pb, np, nq, c->warm_start, &random) < 0 ||
        grow_to((void **)&s->pack, &s->pack_cap, nunc, sizeof *s->pack) < 0 || psgd_scratch(s, most) < 0)
        return psgd_oom(b, err, errlen);
    /* Step III: Q, drawn or warm, orthogonalized; P = M Q. */
    rng qr;
    if (random)
        psgd_draw_rng(s, &qr);
    uint32_t ncomp = psgd_order(s, b);
    uint64_t po = 0, qo = 0;
    for (uint32_t i = 0; i < ncomp; i++) {
        const hook_tensor *ht = &b->tensors[s->order[i]];
        uint32_t r = psgd_rank_of(c, ht->rows, ht->cols);
        float *q = pb->q + qo, *p = pb->p + po;
        if (random)
            rng_fill_normal(q, ht->cols * r, &qr);
        psgd_orthogonalize(q, ht->cols, r, (float)c->epsilon);
        psgd_mul(s, p, x + ht->offset, q, ht->rows, ht->cols, r);
        po += ht->rows * r;
        qo += ht->cols * r;
    }
    /* Step II: the uncompressed tensors, packed, allreduced, their mean. */
    uint64_t u = 0;
    for (uint32_t t = 0; t < b->ntensors; t++)
        if (!s->compress[t]) {
            const hook_tensor *ht = &b->tensors[t];
            memcpy(s->pack + u, x + ht->offset, (size_t)(ht->rows * ht->cols) * sizeof *x);
            u += ht->rows * ht->cols;
        }
    if (nunc && sum(ctx, s->pack, (size_t)nunc, err, errlen) < 0)
        return -1;
    psgd_scale(s->pack, nunc, s->world);
    u = 0;
    for (uint32_t t = 0; t < b->ntensors; t++)
        if (!s->compress[t]) {
            const hook_tensor *ht = &b->tensors[t];
            memcpy(x + ht->offset, s->pack + u, (size_t)(ht->rows * ht->cols) * sizeof *x);
            u += ht->rows * ht->cols;
        }
    /* P summed (no scale: orthogonalized next), orthogonalized; Q = M^T P. */
    if (np && sum(ctx, pb->p, (size_t)np, err, errlen) < 0)
        return -1;
    po = qo = 0;
    for (uint32_t i = 0; i < ncomp; i++) {
        const hook_tensor *ht = &b->tensors[s->order[i]];
        uint32_t r = psgd_rank_of(c, ht->rows, ht->cols);
        psgd_orthogonalize(pb->p + po, ht->rows, r, (float)c->epsilon);
        psgd_mul_t(s, pb->q + qo, x + ht->offset, pb->p + po, ht->rows, ht->cols, r);
        po += ht->rows * r;
        qo += ht->cols * r;
    }
    /* Q's mean; M = P Q^T. */
    if (nq && sum(ctx, pb->q, (size_t)nq, err, errlen) < 0)
        return -1;
    psgd_scale(pb->q, nq, s->world);
    po = qo = 0;
    for (uint32_t i = 0; i < ncomp; i++) {
        const hook_tensor *ht = &b->tensors[s->order[i]];
        uint32_t r = psgd_rank_of(c, ht->rows, ht->cols);
        psgd_mul_nt(s, x + ht->offset, pb->p + po, pb->q + qo, ht->rows, ht->cols, r);
        po += ht->rows * r;
        qo += ht->cols * r;
    }
    if (c->error_feedback)
        psgd_feedback_out(pb, x, b->count);
    pb->have_pq = c->warm_start;
    *floats = nunc + np + nq;
    return 0;
}

/* Between b's memory and PyTorch's flat buffer of it, x (b->count
 * floats): its tensors last first where b->ddp_reversed, else the same
 * order. back: x into b's memory; else b's memory into x. */
static void psgd_ddp_flat(hook_bucket *b, float *x, bool back)
{
    if (!b->ddp_reversed) {
        if (back)
            memcpy(b->data, x, (size_t)b->count * sizeof *x);
        else
            memcpy(x, b->data, (size_t)b->count * sizeof *x);
        return;
    }
    uint64_t at = 0;
    for (uint32_t i = b->ntensors; i-- > 0;) {
        const hook_tensor *ht = &b->tensors[i];
        size_t n = (size_t)(ht->rows * ht->cols);
        if (back)
            memcpy(b->data + ht->offset, x + at, n * sizeof *x);
        else
            memcpy(x + at, b->data + ht->offset, n * sizeof *x);
        at += n;
    }
    assert(at == b->count);
}

static int psgd_batched(psgd *s, hook_bucket *b, psgd_sum_fn sum, void *ctx, uint64_t *floats, char *err, size_t errlen)
{
    const psgd_conf *c = &s->conf;
    uint64_t side = psgd_side(b->count), n = side * side;
    uint32_t r = psgd_rank_of(c, side, side);
    psgd_bucket *pb = psgd_bucket_of(s, b->id, n);
    bool random;
    if (!pb || grow_to((void **)&s->pack, &s->pack_cap, n, sizeof *s->pack) < 0 || psgd_scratch(s, side * r) < 0 ||
        psgd_pq(pb, side * r, side * r, c->warm_start, &random) < 0)
        return psgd_oom(b, err, errlen);
    /* PyTorch's flat buffer (its tensors in its order), resized to side^2
     * with zeros after it. */
    float *x = s->pack;
    psgd_ddp_flat(b, x, false);
    memset(x + b->count, 0, (size_t)(n - b->count) * sizeof *x);
    if (c->error_feedback)
        psgd_feedback_in(pb, x, n);
    if (random) {
        rng qr;
        psgd_draw_rng(s, &qr);
        rng_fill_normal(pb->q, side * r, &qr);
    }
    psgd_orthogonalize(pb->q, side, r, (float)c->epsilon);
    psgd_mul(s, pb->p, x, pb->q, side, side, r);
    if (sum(ctx, pb->p, (size_t)(side * r), err, errlen) < 0)
        return -1;
    psgd_orthogonalize(pb->p, side, r, (float)c->epsilon);
    psgd_mul_t(s, pb->q, x, pb->p, side, side, r);
    if (sum(ctx, pb->q, (size_t)(side * r), err, errlen) < 0)
        return -1;
    psgd_scale(pb->q, side * r, s->world);
    psgd_mul_nt(s, x, pb->p, pb->q, side, side, r);
    if (c->error_feedback)
        psgd_feedback_out(pb, x, n);
    psgd_ddp_flat(b, x, true);
    pb->have_pq = c->warm_start;
    *floats = 2 * side * r;
    return 0;
}

int psgd_reduce(psgd *s, hook_bucket *b, psgd_sum_fn sum, void *ctx, uint64_t *bytes, char *err, size_t errlen)
{
    assert(!b->sparse && b->data && b->id < HOOK_MAX_BUCKETS);
    uint64_t floats = 0;
    bool plain = s->st.iter < s->conf.start_iter;
    if (plain) {
        /* PyTorch's vanilla allreduce; psbench's mean (allreduce_hook's) */
        if (sum(ctx, b->data, (size_t)b->count, err, errlen) < 0)
            return -1;
        psgd_scale(b->data, b->count, s->world);
        floats = b->count;
    } else {
        assert(b->ntensors > 0 || b->count == 0);
        int rc = s->conf.batched ? psgd_batched(s, b, sum, ctx, &floats, err, errlen)
                                 : psgd_layerwise(s, b, sum, ctx, &floats, err, errlen);
        if (rc < 0)
            return -1;
    }
    *bytes = floats * 4;
    if (plain)
        s->st.plain_bytes += *bytes;
    else
        s->st.compressed_bytes += *bytes;
    if (b->last)
        psgd_step_done(s);
    return 0;
}

void psgd_step_done(psgd *s)
{
    /* PyTorch's maybe_increase_iter */
    if (s->st.iter < s->conf.start_iter)
        s->st.plain_steps++;
    else
        s->st.compressed_steps++;
    if (++s->st.iter == s->conf.start_iter && s->conf.start_iter > 0)
        log_info("PowerSGD: compressing from now on, after %" PRIu64 " plain iterations", s->st.iter);
}
