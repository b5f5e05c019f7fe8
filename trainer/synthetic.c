/* synthetic.c — the synthetic model (see synthetic.h).
 *
 * Dense data: push (rank r, batch b, bucket k) is the window of a fixed
 * ramp `base` starting at off(r, b, k), base[j] = (j mod P) - P/2. Sending
 * it costs nothing (no data is generated per batch) and the expected sum
 * is periodic in the element index with period P, so checking a result of
 * any size needs only a P-element table per bucket.
 *
 * Sparse data: push (r, b, k) touches nnz rows of a rows x cols table with
 * a stride that makes some indices repeat inside one push (the server must
 * coalesce those too); values are small integers.
 *
 * CUDA IPC (synthetic_gpu): the ramp also lies in shareable GPU memory,
 *
 *     [ ramp: bucket_floats + P ][ scratch: the largest bucket ]
 *
 * exported to servers on the same GPU. A push on such a link names its
 * window's byte offset (`dev`) after the batch's one event record (which
 * also ends the previous batch's reads of the servers' memory: the means
 * they lent). A mean the server keeps in its GPU memory arrives as a device
 * address (sink.dev) and is checked whole on the GPU, without a copy to the
 * host: copied device to device into the scratch and compared element by
 * element with the expected mean — the window of an expected ramp on the
 * GPU, expect[] repeated, whose phase at element e is the host check's —
 * by a kernel that finds the first element that differs (compute_first_ne;
 * NaN differs from everything). At the end of the batch that index, 8
 * bytes per bucket, is read back; a bucket with one is named with the
 * element, its value read back.
 * One stream orders it all, so one scratch serves every bucket in turn.
 *
 * Narrow pushes (cfg.dtype f16 or bf16: docs/protocol.md, "Narrow
 * pushes"): the ramp narrowed once (nbase; its values, integers in
 * -512..511, are exact in f16; in bf16 those beyond ±256 round to an even
 * neighbour, so the pushes differ from the f32 ramp), and the expected
 * answer is what the server computes from them: the widened pushes summed
 * in f32 (small integers: exact in any order), times 1/N, narrowed once
 * (nexpect). Results are compared bit for bit, 2 bytes an element; the
 * check means as much as the f32 one. By CUDA IPC the narrow ramp lies in
 * the exported memory too, after the scratch (narrowed there on the GPU
 * from the ramp: the gradients' shadow of gpushare.h), and a mean lent in
 * GPU memory is widened into the scratch and compared with the widened
 * expected narrow mean.
 */
#include "trainer/synthetic.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "shared/mean.h"
#include "trainer/compute.h"
#include "trainer/ttrace.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SYN_P 1024u /* period of the dense ramp: a power of two */

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "payloads are little-endian");

/* A result being received. Results of different servers arrive
 * interleaved, so each bucket keeps its own progress. */
typedef struct syn_rx {
    uint32_t k;         /* the bucket */
    bool receiving;     /* between begin and end */
    uint64_t nnz;       /* sparse */
    uint8_t carry[8];   /* sparse: an index split across chunks */
    size_t icarry;
    uint32_t link;      /* the client connection it comes on */
    uint64_t t_in_ns;   /* the read that brought its header (the client's rx_ns) */
} syn_rx;

struct synthetic {
    synthetic_config cfg;
    uint64_t *sizes; /* cfg.sizes, owned; NULL when every bucket has bucket_floats */
    metrics *m;
    stats *m_rpc, *m_batch;
    uint32_t trainers;
    float scale;
    /* dense */
    float *base;       /* bucket_floats + SYN_P */
    float *push_base;  /* what pushes send: base, or during a run its copy in the client's shared
                        * segment (the server reads it there: nothing is copied per push) */
    float *expect;     /* 2 x SYN_P: expected mean at ramp phase j (see syn_expect_dense) */
    /* narrow pushes (cfg.dtype): the ramp narrowed, what pushes send (nbase or its copy in the
     * client's segment), and the expected narrow mean, 2 x SYN_P */
    uint16_t *nbase, *push_nbase, *nexpect;
    /* CUDA IPC (synthetic_gpu; dev NULL: none). Owned; the client that
     * uses `share` is closed first. */
    compute *dev;
    cbuf *shbuf;       /* shared: the ramp (ramp_floats), then the scratch (the largest bucket) */
    cbuf *expbuf;      /* the expected ramp (ramp_floats): expect[] repeated */
    cbuf *firstbuf;    /* per bucket: the first element of its last mean over CUDA IPC that differs
                        * (8 bytes: UINT64_MAX, none) */
    gpushare share;
    uint64_t ramp_floats;
    uint64_t *first_host; /* firstbuf read back */
    devmem *gsrc; /* per bucket: this batch's mean in the server's GPU memory (none: none) */
    uint32_t ngpu;     /* buckets with one this batch */
    uint64_t results_gpu; /* this run's timed batches: results over CUDA IPC, checked whole on the GPU */
    /* sparse */
    uint64_t nnz, rows;
    uint8_t **spush;   /* per bucket: this rank's push payload */
    float *sexp;       /* rows x cols: expected sums of the bucket being checked */
    uint64_t *uniq;    /* per bucket: expected unique rows, ascending */
    uint64_t *nuniq;
    float **sexp_b;    /* per bucket: expected sums (rows x cols) */
    /* progress of the current batch */
    uint64_t batch;
    uint64_t *t_push_ns; /* per bucket */
    const client *cl;    /* during synthetic_run: its rx_ns times results */
    bool *done;
    uint32_t remaining;
    syn_rx *rx;        /* per bucket: its result as it is received */
    synthetic_tick_fn tick;
    void *tick_ctx;
    /* The trace (synthetic_set_trace; NULL: none): the training thread's ring. */
    ttrace *tt;
    trace_ring *ring;
};

void synthetic_set_batches(synthetic *s, uint64_t batches)
{
    s->cfg.batches = batches;
}

void synthetic_set_tick(synthetic *s, synthetic_tick_fn fn, void *ctx)
{
    s->tick = fn;
    s->tick_ctx = ctx;
}

void synthetic_set_trace(synthetic *s, ttrace *tt, client *cl)
{
    if (!ttrace_on(tt))
        return;
    s->tt = tt;
    s->ring = ttrace_links_here(tt, cl);
    ttrace_bucket_lanes(tt, s->cfg.buckets);
}

/* Floats in dense bucket k. */
static uint64_t syn_floats(const synthetic *s, uint64_t k)
{
    return s->sizes ? s->sizes[k] : s->cfg.bucket_floats;
}

static uint32_t syn_off(uint64_t r, uint64_t b, uint64_t k)
{
    return (uint32_t)((r * 7 + b * 3 + k * 5) & (SYN_P - 1));
}

static uint64_t syn_row(const synthetic *s, uint64_t r, uint64_t b, uint64_t k, uint64_t i)
{
    return (i * 3 + r * 5 + b * 7 + k * 11) % s->rows;
}

static float syn_val(uint64_t r, uint64_t b, uint64_t k, uint64_t i, uint64_t c)
{
    return (float)((int)((r + i + c + b + k) & 63) - 32);
}

static float syn_widen(half_type t, uint16_t v)
{
    return t == HALF_FP16 ? half_fp16_to_float(v) : half_bf16_to_float(v);
}

synthetic *synthetic_new(const synthetic_config *cfg, metrics *m)
{
    synthetic *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = *cfg;
    s->m = m;
    s->m_batch = metrics_get(m, "batch_level_metric,batch_all");
    s->m_rpc = metrics_get(m, cfg->sparse ? "hook_future_metric,rpc_sparse" : "hook_future_metric,rpc_dense");
    if (!s->m_rpc || !s->m_batch)
        goto fail;
    if (cfg->sizes) {
        assert(!cfg->sparse);
        if (!(s->sizes = malloc(cfg->buckets * sizeof *s->sizes)))
            goto fail;
        memcpy(s->sizes, cfg->sizes, cfg->buckets * sizeof *s->sizes);
        for (uint32_t k = 0; k < cfg->buckets; k++)
            assert(s->sizes[k] >= 1 && s->sizes[k] <= cfg->bucket_floats);
    }
    s->cfg.sizes = s->sizes;
    s->t_push_ns = calloc(cfg->buckets, sizeof *s->t_push_ns);
    s->done = calloc(cfg->buckets, sizeof *s->done);
    s->rx = calloc(cfg->buckets, sizeof *s->rx);
    if (!s->t_push_ns || !s->done || !s->rx)
        goto fail;
    for (uint32_t k = 0; k < cfg->buckets; k++)
        s->rx[k].k = k;
    if (!cfg->sparse) {
        s->base = malloc((cfg->bucket_floats + SYN_P) * sizeof *s->base);
        s->expect = malloc(2 * SYN_P * sizeof *s->expect);
        if (!s->base || !s->expect)
            goto fail;
        for (uint64_t j = 0; j < cfg->bucket_floats + SYN_P; j++)
            s->base[j] = (float)((int)(j & (SYN_P - 1)) - (int)(SYN_P / 2));
        if (cfg->dtype != HALF_FP32) {
            s->nbase = malloc((cfg->bucket_floats + SYN_P) * sizeof *s->nbase);
            s->nexpect = malloc(2 * SYN_P * sizeof *s->nexpect);
            if (!s->nbase || !s->nexpect)
                goto fail;
            half_narrow(cfg->dtype, s->nbase, s->base, cfg->bucket_floats + SYN_P);
        }
    } else {
        s->nnz = cfg->bucket_floats / cfg->sparse_cols;
        if (s->nnz == 0)
            s->nnz = 1;
        s->rows = 2 * s->nnz + 1;
        s->spush = calloc(cfg->buckets, sizeof *s->spush);
        s->sexp_b = calloc(cfg->buckets, sizeof *s->sexp_b);
        s->uniq = malloc((size_t)cfg->buckets * s->rows * sizeof *s->uniq);
        s->nuniq = calloc(cfg->buckets, sizeof *s->nuniq);
        if (!s->spush || !s->sexp_b || !s->uniq || !s->nuniq)
            goto fail;
        for (uint32_t k = 0; k < cfg->buckets; k++) {
            s->spush[k] = malloc(s->nnz * (8 + 4 * (size_t)cfg->sparse_cols));
            s->sexp_b[k] = malloc(s->rows * cfg->sparse_cols * sizeof(float));
            if (!s->spush[k] || !s->sexp_b[k])
                goto fail;
        }
    }
    return s;
fail:
    synthetic_free(s);
    return NULL;
}

/* The CUDA IPC side (synthetic_gpu), whatever of it was made. */
static void syn_gpu_free(synthetic *s)
{
    if (s->dev) {
        compute_release(s->dev, s->shbuf);
        compute_release(s->dev, s->expbuf);
        compute_release(s->dev, s->firstbuf);
        compute_free(s->dev);
    }
    free(s->first_host);
    free(s->gsrc);
    s->dev = NULL;
    s->shbuf = s->expbuf = s->firstbuf = NULL;
    s->first_host = NULL;
    s->gsrc = NULL;
    memset(&s->share, 0, sizeof s->share);
}

half_type synthetic_dtype(const synthetic *s) { return s->cfg.dtype; }

void synthetic_free(synthetic *s)
{
    if (!s)
        return;
    free(s->sizes);
    free(s->t_push_ns);
    free(s->done);
    free(s->rx);
    free(s->base);
    free(s->expect);
    free(s->nbase);
    free(s->nexpect);
    syn_gpu_free(s);
    for (uint32_t k = 0; s->spush && k < s->cfg.buckets; k++)
        free(s->spush[k]);
    for (uint32_t k = 0; s->sexp_b && k < s->cfg.buckets; k++)
        free(s->sexp_b[k]);
    free(s->spush);
    free(s->sexp_b);
    free(s->uniq);
    free(s->nuniq);
    free(s);
}

/* ---- expectations ------------------------------------------------------ */

/* Rank r's push of (b, k) starts at ramp phase r*7 + c(b, k), so the mean
 * at element i is expect[(c + i) mod P] with expect[j] = (1/N) sum_r
 * ramp(r*7 + j): one table for the whole run. It is stored twice over so
 * that any run of up to P elements from any phase is contiguous, and a
 * result chunk is checked with memcmp. */
static void syn_expect_dense(synthetic *s)
{
    half_type t = s->cfg.dtype;
    for (uint32_t j = 0; j < SYN_P; j++) {
        float sum = 0;
        for (uint64_t r = 0; r < s->trainers; r++) {
            uint32_t at = (syn_off(r, 0, 0) + j) & (SYN_P - 1);
            sum += t == HALF_FP32 ? s->base[at] : syn_widen(t, s->nbase[at]);
        }
        s->expect[j] = s->expect[j + SYN_P] = sum * s->scale;
        if (t != HALF_FP32) {
            uint16_t e;
            half_narrow(t, &e, &s->expect[j], 1);
            s->nexpect[j] = s->nexpect[j + SYN_P] = e;
        }
    }
}

static void syn_build_sparse(synthetic *s, uint64_t b)
{
    uint64_t cols = s->cfg.sparse_cols;
    for (uint32_t k = 0; k < s->cfg.buckets; k++) {
        uint8_t *p = s->spush[k];
        float *vals = (float *)(void *)(p + 8 * s->nnz);
        for (uint64_t i = 0; i < s->nnz; i++) {
            int64_t row = (int64_t)syn_row(s, s->cfg.rank, b, k, i);
            memcpy(p + 8 * i, &row, 8);
            for (uint64_t c = 0; c < cols; c++)
                vals[i * cols + c] = syn_val(s->cfg.rank, b, k, i, c);
        }
        /* Expected sums over every rank, then the touched rows in order. */
        float *e = s->sexp_b[k];
        memset(e, 0, s->rows * cols * sizeof *e);
        uint8_t *touched = calloc(s->rows, 1);
        for (uint64_t r = 0; r < s->trainers; r++)
            for (uint64_t i = 0; i < s->nnz; i++) {
                uint64_t row = syn_row(s, r, b, k, i);
                if (touched)
                    touched[row] = 1;
                for (uint64_t c = 0; c < cols; c++)
                    e[row * cols + c] += syn_val(r, b, k, i, c);
            }
        uint64_t *u = s->uniq + (size_t)k * s->rows;
        s->nuniq[k] = 0;
        for (uint64_t row = 0; row < s->rows; row++)
            if (!touched || touched[row])
                u[s->nuniq[k]++] = row;
        free(touched);
    }
}

/* ---- result checking (client sink) ------------------------------------- */

static int syn_begin(void *ctx, uint32_t server, const frame_hdr *h, void **frame, char *err, size_t errlen)
{
    synthetic *s = ctx;
    if (!(h->has & FH_BATCH) || !(h->has & FH_BUCKET) || h->batch != s->batch ||
        h->bucket >= s->cfg.buckets || s->done[h->bucket] || s->rx[h->bucket].receiving) {
        snprintf(err, errlen, "unexpected result (batch %" PRIu64 " bucket %" PRIu64
                 ") while waiting for batch %" PRIu64, h->batch, h->bucket, s->batch);
        return -1;
    }
    uint64_t k = h->bucket;
    if (!s->cfg.sparse) {
        if (h->layout != LAYOUT_DENSE || h->count != syn_floats(s, k) ||
            frame_dtype_type(h->dtype) != (int)s->cfg.dtype ||
            h->payload != syn_floats(s, k) * half_type_size(s->cfg.dtype)) {
            snprintf(err, errlen, "result for bucket %" PRIu64 " has the wrong shape", k);
            return -1;
        }
    } else {
        uint64_t cols = s->cfg.sparse_cols;
        if (h->layout != LAYOUT_SPARSE || h->rows != s->rows || h->cols != cols ||
            h->nnz != s->nuniq[k] || h->payload != h->nnz * (8 + 4 * cols)) {
            snprintf(err, errlen,
                     "sparse result for bucket %" PRIu64 " has the wrong shape (nnz %" PRIu64
                     ", expected %" PRIu64 " unique rows)",
                     k, h->nnz, s->nuniq[k]);
            return -1;
        }
        s->rx[k].nnz = h->nnz;
        s->rx[k].icarry = 0;
    }
    s->rx[k].receiving = true;
    s->rx[k].link = server;
    s->rx[k].t_in_ns = s->cl->rx_ns;
    *frame = &s->rx[k];
    return 0;
}

static int syn_mismatch(synthetic *s, uint64_t k, uint64_t elem, float got, float want, char *err,
                        size_t errlen)
{
    snprintf(err, errlen,
             "wrong mean in batch %" PRIu64 " bucket %" PRIu64 " element %" PRIu64 ": got %.9g, expected %.9g",
             s->batch, k, elem, got, want);
    return -1;
}

static int syn_data(void *ctx, void *frame, uint64_t off, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    synthetic *s = ctx;
    syn_rx *rx = frame;
    uint64_t k = rx->k;
    assert(rx->receiving);
    if (!s->cfg.sparse && s->cfg.dtype != HALF_FP32) {
        /* 2 bytes an element: off + n is even */
        uint64_t e0 = off / 2, m = n / 2;
        uint32_t pos = (uint32_t)((syn_off(0, s->batch, k) + e0) & (SYN_P - 1));
        while (m > 0) {
            uint64_t seg = m < SYN_P ? m : SYN_P;
            if (memcmp(p, s->nexpect + pos, seg * 2) != 0) {
                for (uint64_t i = 0; i < seg; i++) {
                    uint16_t v;
                    memcpy(&v, p + 2 * i, 2);
                    if (v != s->nexpect[pos + i])
                        return syn_mismatch(s, k, e0 + i, syn_widen(s->cfg.dtype, v),
                                            syn_widen(s->cfg.dtype, s->nexpect[pos + i]), err, errlen);
                }
            }
            p += seg * 2;
            e0 += seg;
            m -= seg;
            pos = (uint32_t)((pos + seg) & (SYN_P - 1));
        }
        return 0;
    }
    if (!s->cfg.sparse) {
        uint64_t e0 = off / 4, m = n / 4;
        uint32_t pos = (uint32_t)((syn_off(0, s->batch, k) + e0) & (SYN_P - 1));
        while (m > 0) {
            uint64_t seg = m < SYN_P ? m : SYN_P;
            if (memcmp(p, s->expect + pos, seg * 4) != 0) {
                for (uint64_t i = 0; i < seg; i++) {
                    float v;
                    memcpy(&v, p + 4 * i, 4);
                    if (v != s->expect[pos + i])
                        return syn_mismatch(s, k, e0 + i, v, s->expect[pos + i], err, errlen);
                }
            }
            p += seg * 4;
            e0 += seg;
            m -= seg;
            pos = (uint32_t)((pos + seg) & (SYN_P - 1));
        }
        return 0;
    }
    uint64_t cols = s->cfg.sparse_cols;
    uint64_t ibytes = rx->nnz * 8;
    const uint64_t *u = s->uniq + k * s->rows;
    size_t i = 0;
    /* Index section: int64s may be split across chunks (chunks end on
     * 4-byte bounds), so assemble each in a carry buffer. */
    while (i < n && off + i < ibytes) {
        size_t take = 8 - rx->icarry < n - i ? 8 - rx->icarry : n - i;
        memcpy(rx->carry + rx->icarry, p + i, take);
        rx->icarry += take;
        i += take;
        if (rx->icarry < 8)
            continue;
        rx->icarry = 0;
        int64_t row;
        memcpy(&row, rx->carry, 8);
        uint64_t j = (off + i) / 8 - 1;
        if (row < 0 || (uint64_t)row != u[j]) {
            snprintf(err, errlen, "sparse result bucket %" PRIu64 ": index %" PRIu64 " is %" PRId64
                     ", expected %" PRIu64 " (ascending unique rows)", k, j, row, u[j]);
            return -1;
        }
    }
    for (; i + 4 <= n; i += 4) {
        uint64_t e = (off + i - ibytes) / 4;
        uint64_t row = u[e / cols], c = e % cols;
        float want = s->sexp_b[k][row * cols + c] * s->scale;
        float v;
        memcpy(&v, p + i, 4);
        if (v != want)
            return syn_mismatch(s, k, e, v, want, err, errlen);
    }
    return 0;
}

/* A mean in a server's GPU memory (CUDA IPC), checked whole on the GPU
 * (see the top of the file): copied into the scratch and compared with the
 * expected window, the first element that differs into bucket k's slot —
 * all enqueued now (the server lent the memory until our next push of a
 * later batch, whose event record comes after these), read at the end of
 * the batch (syn_check_gpu). One stream orders it all, so one scratch
 * serves every bucket in turn. */
static int syn_dev(void *ctx, void *frame, devmem src, uint64_t n, char *err, size_t errlen)
{
    synthetic *s = ctx;
    syn_rx *rx = frame;
    uint64_t k = rx->k;
    (void)err;
    (void)errlen;
    /* The client hands results over by device address only to a client
     * that exported (ours: synthetic_gpu), and syn_begin checked the shape. */
    half_type t = s->cfg.dtype;
    uint64_t f = syn_floats(s, k);
    assert(rx->receiving && s->dev && !s->cfg.sparse && n == f * half_type_size(t) && devmem_is_none(s->gsrc[k]));
    if (t != HALF_FP32) /* widened: expbuf holds the expected narrow mean widened */
        s->share.widen(s->share.ctx, devmem_at(s->share.base, s->ramp_floats * 4), src, f, t);
    else
        s->share.copy(s->share.ctx, devmem_at(s->share.base, s->ramp_floats * 4), src, n);
    compute_first_ne(s->dev, cspan_at(s->shbuf, s->ramp_floats, f), cspan_at(s->expbuf, syn_off(0, s->batch, k), f),
                     cspan_at(s->firstbuf, k, 1));
    s->gsrc[k] = src;
    s->ngpu++;
    return 0;
}

/* The batch's means over CUDA IPC (syn_dev): for each, the first element
 * that differs read back (8 bytes a bucket); one that does is named with
 * the value it has (one float read back from the mean). */
static int syn_check_gpu(synthetic *s, char *err, size_t errlen)
{
    if (!s->ngpu)
        return 0;
    compute_read(s->dev, cspan_all(s->firstbuf), s->first_host);
    compute_sync(s->dev);
    char why[300];
    if (compute_status(s->dev, why, sizeof why) < 0) {
        snprintf(err, errlen, "checking batch %" PRIu64 "'s results over CUDA IPC: %s", s->batch, why);
        return -1;
    }
    for (uint32_t k = 0; k < s->cfg.buckets; k++) {
        if (devmem_is_none(s->gsrc[k]))
            continue;
        uint64_t e = s->first_host[k];
        if (e != UINT64_MAX) {
            float got;
            half_type t = s->cfg.dtype;
            uint32_t j = (syn_off(0, s->batch, k) + e) & (SYN_P - 1);
            devmem scratch = devmem_at(s->share.base, s->ramp_floats * 4);
            assert(e < syn_floats(s, k));
            if (t != HALF_FP32)
                s->share.widen(s->share.ctx, scratch, devmem_at(s->gsrc[k], e * 2), 1, t);
            else
                s->share.copy(s->share.ctx, scratch, devmem_at(s->gsrc[k], e * 4), 4);
            compute_read(s->dev, cspan_at(s->shbuf, s->ramp_floats, 1), &got);
            compute_sync(s->dev);
            syn_mismatch(s, k, e, got, t != HALF_FP32 ? syn_widen(t, s->nexpect[j]) : s->expect[j], err, errlen);
            size_t used = strlen(err);
            snprintf(err + used, errlen - used, " (a result over CUDA IPC, checked on the GPU)");
            return -1;
        }
        s->gsrc[k] = devmem_none();
        if (s->batch >= s->cfg.warmup)
            s->results_gpu++;
    }
    s->ngpu = 0;
    return 0;
}

/* Bucket rx->k's result is in: its bucket_wait (its rpc metric's
 * readings) and its frame_in, on the training thread's ring. */
static void syn_trace_result(synthetic *s, const syn_rx *rx)
{
    const client_conn *c = &s->cl->conns[rx->link];
    trace_ids ids = trace_ids_make((int64_t)s->batch, rx->k, s->tt->rank, (int32_t)c->server_rank);
    trace_add(s->ring, TRACE_BUCKET_WAIT, ttrace_bucket_lane(s->tt, rx->k), s->t_push_ns[rx->k], s->cl->rx_ns, ids);
    trace_add(s->ring, TRACE_FRAME_IN, c->trace_lane_in, rx->t_in_ns, s->cl->rx_ns, ids);
}

static int syn_end(void *ctx, void *frame, char *err, size_t errlen)
{
    synthetic *s = ctx;
    syn_rx *rx = frame;
    uint64_t k = rx->k;
    assert(rx->receiving && !s->done[k]);
    rx->receiving = false;
    s->done[k] = true;
    s->remaining--;
    if (s->batch >= s->cfg.warmup) {
        metrics_add(s->m_rpc, clock_ms(s->t_push_ns[k], s->cl->rx_ns));
        if (ttrace_open(s->ring))
            syn_trace_result(s, rx);
    }
    return 0;
}

client_sink synthetic_sink(synthetic *s)
{
    client_sink k = {syn_begin, syn_data, syn_end, s, syn_dev};
    return k;
}

const gpushare *synthetic_gpu(synthetic *s, device_spec device, char *why, size_t whylen)
{
    char name[DEVSPEC_NAME_MAX];
    assert(!s->dev);
    if (s->cfg.sparse) {
        snprintf(why, whylen, "sparse pushes do not travel by CUDA IPC");
        return NULL;
    }
    compute *c = compute_new(device, why, whylen);
    if (!c)
        return NULL;
    if (!compute_can_share(c)) {
        snprintf(why, whylen, "device %s shares no GPU memory", compute_name(c));
        compute_free(c);
        return NULL;
    }
    s->ramp_floats = s->cfg.bucket_floats + SYN_P;
    uint64_t largest = s->cfg.bucket_floats; /* every bucket's floats are at most this */
    bool narrow = s->cfg.dtype != HALF_FP32;
    uint64_t nfloats = narrow ? (s->ramp_floats + 1) / 2 : 0; /* the narrow ramp: 16-bit values */
    s->dev = c;
    s->first_host = calloc(s->cfg.buckets, sizeof *s->first_host);
    s->gsrc = calloc(s->cfg.buckets, sizeof *s->gsrc);
    if (!s->first_host || !s->gsrc) {
        snprintf(why, whylen, "out of memory");
    } else if ((s->shbuf = compute_alloc_shared(c, s->ramp_floats + largest + nfloats, COMPUTE_F32, why, whylen)) &&
               (s->expbuf = compute_alloc(c, s->ramp_floats, COMPUTE_F32, COMPUTE_MEM_DEVICE, why, whylen)) &&
               (s->firstbuf = compute_alloc(c, s->cfg.buckets, COMPUTE_F64, COMPUTE_MEM_DEVICE, why, whylen))) {
        /* The ramp up once (the host copy stays: links without CUDA IPC
         * send from it), and narrowed after the scratch where pushes are
         * narrow, complete before the handle leaves this call. */
        compute_write(c, cspan_at(s->shbuf, 0, s->ramp_floats), s->base);
        uint64_t shadow = narrow ? (s->ramp_floats + largest) * 4 : 0;
        if (gpushare_init(&s->share, c, s->shbuf, shadow, why, whylen) == 0) {
            if (narrow) /* the narrow ramp, as nbase (half_elem.h's rounding on both sides) */
                s->share.narrow(s->share.ctx, devmem_at(s->share.base, shadow), s->share.base, s->ramp_floats,
                                s->cfg.dtype);
            compute_sync(c);
        }
        if (compute_status(c, why, whylen) == 0 && s->share.gpu[0]) {
            log_info("synthetic: %s pushes from GPU memory on %s for servers on that GPU (CUDA IPC); every result "
                     "over CUDA IPC checked whole on the GPU (every element compared with the expected mean there)",
                     frame_dtype_name(s->cfg.dtype), devspec_name(device, name));
            return &s->share;
        }
    }
    syn_gpu_free(s);
    return NULL;
}

/* ---- the run ----------------------------------------------------------- */

static int syn_push_batch(synthetic *s, client *cl, uint64_t b, char *err, size_t errlen)
{
    /* Every bucket is queued now, within microseconds: one clock read. */
    uint64_t now = clock_now_ns();
    bool recorded = false;
    /* A failed GPU records no event: a push by offset would leave the
     * server waiting for one. Stop here with the reason instead. */
    char why[300];
    if (s->dev && compute_status(s->dev, why, sizeof why) < 0) {
        snprintf(err, errlen, "the GPU the pushes live on failed: %s", why);
        return -1;
    }
    for (uint32_t k = 0; k < s->cfg.buckets; k++) {
        size_t link = k % cl->nconns; /* buckets go round-robin over the servers (shard placement) */
        frame_hdr h = {0};
        h.type = FT_PUSH;
        h.batch = b;
        h.bucket = k;
        h.dtype = frame_str_c("f32");
        h.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_PAYLOAD;
        client_src src = {0};
        if (!s->cfg.sparse && s->cfg.dtype != HALF_FP32) {
            h.layout_str = frame_str_c("dense");
            h.dtype = frame_str_c(frame_dtype_name(s->cfg.dtype));
            h.count = syn_floats(s, k);
            h.has |= FH_COUNT;
            h.payload = h.count * 2;
            src.host = s->push_nbase + syn_off(s->cfg.rank, b, k);
            if (s->dev) { /* as below, in the narrow ramp */
                src.dev = s->share.shadow + (uint64_t)syn_off(s->cfg.rank, b, k) * 2;
                src.on_dev = true;
                if (!recorded && client_link_gpu(cl, link, NULL)) {
                    s->share.record(s->share.ctx);
                    recorded = true;
                }
            }
        } else if (!s->cfg.sparse) {
            h.layout_str = frame_str_c("dense");
            h.count = syn_floats(s, k);
            h.has |= FH_COUNT;
            h.payload = h.count * 4;
            src.host = s->push_base + syn_off(s->cfg.rank, b, k);
            if (s->dev) {
                /* The same bytes in our exported GPU memory: a CUDA IPC
                 * link names them there (the client decides). One event
                 * record per batch, before its first such push: the server
                 * waits for it, so it follows the ramp's upload and the
                 * copies out of the means it lent us last batch. */
                src.dev = (uint64_t)syn_off(s->cfg.rank, b, k) * 4;
                src.on_dev = true;
                if (!recorded && client_link_gpu(cl, link, NULL)) {
                    s->share.record(s->share.ctx);
                    recorded = true;
                }
            }
        } else {
            h.layout_str = frame_str_c("sparse");
            h.rows = s->rows;
            h.cols = s->cfg.sparse_cols;
            h.nnz = s->nnz;
            h.has |= FH_ROWS | FH_COLS | FH_NNZ;
            h.payload = s->nnz * (8 + 4 * (uint64_t)s->cfg.sparse_cols);
            src.host = s->spush[k];
        }
        s->t_push_ns[k] = now;
        s->done[k] = false;
        if (client_queue_src(cl, link, &h, &src, err, errlen) < 0)
            return -1;
    }
    s->remaining = s->cfg.buckets;
    return 0;
}

/* The expected ramp on the GPU for this run's trainer count (expect[],
 * repeated), and no mean pending from a pass that failed. */
static int syn_gpu_expect(synthetic *s, char *err, size_t errlen)
{
    memset(s->gsrc, 0, s->cfg.buckets * sizeof *s->gsrc);
    s->ngpu = 0;
    float *e = malloc(s->ramp_floats * sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint64_t j = 0; j < s->ramp_floats; j++) /* a narrow mean's widened: the results are widened to compare */
        e[j] = s->cfg.dtype != HALF_FP32 ? syn_widen(s->cfg.dtype, s->nexpect[j & (SYN_P - 1)])
                                         : s->expect[j & (SYN_P - 1)];
    compute_write(s->dev, cspan_all(s->expbuf), e);
    compute_sync(s->dev);
    free(e);
    char why[300];
    if (compute_status(s->dev, why, sizeof why) < 0) {
        snprintf(err, errlen, "the GPU the results are checked on failed: %s", why);
        return -1;
    }
    return 0;
}

static int syn_run(synthetic *s, client *cl, synthetic_report *rep, char *err, size_t errlen)
{
    s->trainers = cl->trainers;
    s->cl = cl;
    s->scale = mean_scale(cl->trainers);
    if (!s->cfg.sparse)
        syn_expect_dense(s);
    uint64_t t_start = clock_now_ns();
    uint64_t timeout_ns = (uint64_t)(s->cfg.rpc_timeout_s * 1e9);
    uint64_t total = s->cfg.warmup + s->cfg.batches;
    rep->bytes_pushed = 0;
    s->results_gpu = 0;
    if (s->dev && syn_gpu_expect(s, err, errlen) < 0)
        return -1;
    for (uint64_t b = 0; b < total; b++) {
        s->batch = b;
        /* The trace's step: this batch, in a master's timed pass (ttrace.h). */
        if (s->ring)
            trace_ring_step(s->ring, b < s->cfg.warmup ? TTRACE_UNTIMED : ttrace_step_of(s->tt, b));
        uint64_t t0 = clock_now_ns();
        if (b == s->cfg.warmup)
            t_start = t0; /* the timed batches start here */
        if (s->cfg.sparse)
            syn_build_sparse(s, b);
        if (syn_push_batch(s, cl, b, err, errlen) < 0)
            return -1;
        while (s->remaining > 0) {
            uint64_t now = clock_now_ns();
            if (now - t0 > timeout_ns) {
                int64_t k = 0;
                while (k < (int64_t)s->cfg.buckets && s->done[k])
                    k++;
                snprintf(err, errlen, "timed out after %.1f s waiting for the result of batch %" PRIu64
                         " bucket %" PRId64 " (--rpc-timeout)", s->cfg.rpc_timeout_s, b, k);
                return -1;
            }
            uint64_t left_ms = (timeout_ns - (now - t0)) / 1000000 + 1;
            uint64_t cap_ms = s->tick ? 250 : 1000;
            if (client_poll(cl, (int)(left_ms < cap_ms ? left_ms : cap_ms), err, errlen) < 0)
                return -1;
            if (s->tick && s->remaining > 0 && s->tick(s->tick_ctx, b, err, errlen) < 0)
                return -1;
        }
        if (syn_check_gpu(s, err, errlen) < 0)
            return -1;
        if (b < s->cfg.warmup)
            continue; /* no tick either: warm-up is for runs without a master */
        uint64_t t1 = clock_now_ns();
        metrics_add(s->m_batch, clock_ms(t0, t1));
        if (ttrace_open(s->ring)) /* the metric's own readings */
            trace_add(s->ring, TRACE_STEP, s->tt->lane_compute, t0, t1,
                      trace_ids_make((int64_t)b, TRACE_NONE, s->tt->rank, TRACE_NONE));
        for (uint32_t k = 0; k < s->cfg.buckets; k++)
            rep->bytes_pushed += s->cfg.sparse ? s->nnz * (8 + 4 * (uint64_t)s->cfg.sparse_cols)
                                               : syn_floats(s, k) * half_type_size(s->cfg.dtype);
        if (s->tick && s->tick(s->tick_ctx, b + 1, err, errlen) < 0)
            return -1;
    }
    rep->batches = s->cfg.batches;
    rep->seconds = (double)(clock_now_ns() - t_start) / 1e9;
    rep->results_gpu = s->results_gpu;
    if (s->results_gpu)
        log_info("synthetic: %" PRIu64 " results over CUDA IPC checked whole on the GPU; the others on the host",
                 s->results_gpu);
    return 0;
}

/* The pushes' data lives in the client's shared segment for the run when
 * there is one (a push then copies nothing: the server folds from these
 * pages), else where it always is. */
int synthetic_run(synthetic *s, client *cl, synthetic_report *rep, char *err, size_t errlen)
{
    bool narrow = s->cfg.dtype != HALF_FP32;
    size_t n = s->cfg.bucket_floats + SYN_P;
    size_t bytes = n * (narrow ? sizeof *s->nbase : sizeof *s->base);
    void *shared = s->cfg.sparse ? NULL : client_shared_alloc(cl, bytes);
    if (shared)
        memcpy(shared, narrow ? (const void *)s->nbase : (const void *)s->base, bytes);
    s->push_base = shared && !narrow ? shared : s->base;
    s->push_nbase = shared && narrow ? shared : s->nbase;
    int rc = syn_run(s, cl, rep, err, errlen);
    s->push_base = s->base;
    s->push_nbase = s->nbase;
    client_shared_free(cl, shared);
    return rc;
}
