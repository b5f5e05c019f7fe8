/* train.c — real training with buckets overlapped with backward (see train.h). */
#include "trainer/train.h"
#include "shared/clock.h"
#include "trainer/optim.h"
#include "trainer/params_hash.h"
#include "shared/log.h"

#include <cblas.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct train_bucket {
    comm_bucket cb;
    uint32_t first_param, last_param; /* parameter index range, inclusive */
    uint32_t pending;                 /* gradients still to come this batch */
    bool sparse;
    uint8_t *sparse_payload;          /* sparse: indices then rows (owned) */
    uint64_t sparse_cap;
} train_bucket;

struct train {
    train_job job;
    metrics *m;
    stats *m_batch, *m_fwd, *m_bwd, *m_rpc_dense, *m_rpc_sparse, *m_opt, *m_exposed;
    stats *m_span; /* first push to last result: the communication of a step */
    dummy_data *data;
    data_shard *shard;
    dummy_model *model;
    sgd *opt;
    train_bucket *buckets;
    comm_bucket **all; /* every bucket's comm_bucket, for comm_wait */
    uint32_t nbuckets;
    uint32_t *bucket_of; /* parameter -> bucket */
    comm *c;             /* during a pass */
    uint64_t batch;      /* wire batch number during a pass */
    double *loss_epoch;
};

static double train_ms(uint64_t a, uint64_t b) { return (double)(b - a) / 1e6; }

/* Reverse parameter order, capped buckets, the sparse embedding alone. */
static int train_make_buckets(train *t, char *err, size_t errlen)
{
    uint32_t np = model_nparams(t->model);
    t->buckets = calloc(np, sizeof *t->buckets);
    t->bucket_of = calloc(np, sizeof *t->bucket_of);
    if (!t->buckets || !t->bucket_of) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    uint64_t cap = (uint64_t)(t->job.bucket_cap_mb * 1024 * 1024);
    uint64_t fill = 0;
    train_bucket *b = NULL;
    for (int64_t i = (int64_t)np - 1; i >= 0; i--) {
        const model_param_info *pi = model_param(t->model, (uint32_t)i);
        uint64_t bytes = pi->size * 4;
        bool alone = pi->sparse;
        if (!b || alone || b->sparse || (fill > 0 && fill + bytes > cap)) {
            b = &t->buckets[t->nbuckets];
            b->cb.id = t->nbuckets++;
            b->last_param = (uint32_t)i;
            b->sparse = alone;
            fill = 0;
        }
        b->first_param = (uint32_t)i;
        fill += bytes;
        t->bucket_of[i] = b->cb.id;
    }
    if (t->nbuckets > COMM_MAX_BUCKETS) {
        snprintf(err, errlen, "%u buckets (bucket_cap_mb %g): at most %d; raise bucket_cap_mb", t->nbuckets,
                 t->job.bucket_cap_mb, COMM_MAX_BUCKETS);
        return -1;
    }
    if (!(t->all = calloc(t->nbuckets, sizeof *t->all))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t k = 0; k < t->nbuckets; k++)
        t->all[k] = &t->buckets[k].cb;
    /* Each dense bucket is the flat range [first_param, last_param]. */
    float *grads = model_grads(t->model);
    for (uint32_t k = 0; k < t->nbuckets; k++) {
        train_bucket *tb = &t->buckets[k];
        frame_hdr *h = &tb->cb.hdr;
        h->type = FT_PUSH;
        h->bucket = tb->cb.id;
        h->dtype = frame_str_c("f32");
        h->has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_PAYLOAD;
        if (tb->sparse) {
            const model_param_info *pi = model_param(t->model, tb->first_param);
            h->layout = LAYOUT_SPARSE;
            h->layout_str = frame_str_c("sparse");
            h->rows = pi->shape[0];
            h->cols = pi->shape[1];
            h->has |= FH_ROWS | FH_COLS | FH_NNZ;
        } else {
            const model_param_info *lo = model_param(t->model, tb->first_param);
            const model_param_info *hi = model_param(t->model, tb->last_param);
            uint64_t n = hi->offset + hi->size - lo->offset;
            h->layout = LAYOUT_DENSE;
            h->layout_str = frame_str_c("dense");
            h->count = n;
            h->payload = n * 4;
            h->has |= FH_COUNT;
            tb->cb.payload = (const uint8_t *)(grads + lo->offset);
            tb->cb.dense_dst = grads + lo->offset;
        }
    }
    log_info("%u bucket(s) for %u parameters (cap %.1f MB)", t->nbuckets, np, t->job.bucket_cap_mb);
    /* Their sizes in one line, in the order they leave (bench/train_step.sh
     * replays them through the Synthetic model). */
    char line[1024];
    size_t used = 0;
    for (uint32_t k = 0; k < t->nbuckets && used < sizeof line; k++) {
        const train_bucket *tb = &t->buckets[k];
        uint64_t floats = tb->sparse ? model_param(t->model, tb->first_param)->size : tb->cb.hdr.count;
        int w = snprintf(line + used, sizeof line - used, "%s%" PRIu64 "%s", k ? " " : "", floats,
                         tb->sparse ? "s" : "");
        used += w > 0 ? (size_t)w : 0;
    }
    if (used >= sizeof line)
        log_info("bucket floats: (%u buckets, too many to list)", t->nbuckets);
    else
        log_info("bucket floats: %s", line);
    return 0;
}

train *train_new(const train_job *j, metrics *m, char *err, size_t errlen)
{
    /* Trainers share hosts with each other, their servers and their own
     * communication thread: one BLAS thread each unless the user says. */
    if (!getenv("OPENBLAS_NUM_THREADS"))
        openblas_set_num_threads(1);
    train *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->job = *j;
    t->m = m;
    t->m_batch = metrics_get(m, "batch_level_metric,batch_all");
    t->m_fwd = metrics_get(m, "forward_metric,forward_pass");
    t->m_bwd = metrics_get(m, "backward_metric,backward");
    t->m_rpc_dense = metrics_get(m, "hook_future_metric,rpc_dense");
    if (j->model.sparse)
        t->m_rpc_sparse = metrics_get(m, "hook_future_metric,rpc_sparse");
    t->m_opt = metrics_get(m, "optimizer_metric,step");
    t->m_exposed = metrics_get(m, "hook_future_metric,exposed_wait");
    t->m_span = metrics_get(m, "hook_future_metric,comm_span");
    t->data = data_generate(&j->data, j->seed, err, errlen);
    if (!t->data)
        goto fail;
    t->shard = data_shard_new(t->data, (uint32_t)j->batch_size, j->rank, j->ntrainer, err, errlen);
    if (!t->shard)
        goto fail;
    if (t->shard->dropped)
        log_warn("%" PRIu64 " batch(es) of the data set are left out so that every trainer runs %" PRIu64
                 " per epoch", t->shard->dropped, t->shard->nbatches);
    t->model = model_new(&j->model, j->seed, t->shard->max_len, err, errlen);
    if (!t->model || model_check_data(t->model, t->data, err, errlen) < 0)
        goto fail;
    t->opt = sgd_new(t->model, j->lr, j->momentum, err, errlen);
    if (!t->opt || train_make_buckets(t, err, errlen) < 0)
        goto fail;
    t->loss_epoch = calloc(j->epochs ? j->epochs : 1, sizeof *t->loss_epoch);
    if (!t->loss_epoch) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return t;
fail:
    train_free(t);
    return NULL;
}

void train_free(train *t)
{
    if (!t)
        return;
    for (uint32_t k = 0; k < t->nbuckets; k++) {
        free(t->buckets[k].cb.result);
        free(t->buckets[k].sparse_payload);
    }
    free(t->buckets);
    free(t->all);
    free(t->bucket_of);
    sgd_free(t->opt);
    model_free(t->model);
    data_shard_free(t->shard);
    data_free(t->data);
    free(t->loss_epoch);
    free(t);
}

uint64_t train_batches_per_pass(const train *t)
{
    return t->job.epochs * t->shard->nbatches;
}

/* Pack the sparse embedding gradient (indices, then rows) for the wire. */
static int train_pack_sparse(train *t, train_bucket *b)
{
    const int64_t *rows;
    const float *vals;
    uint64_t nnz = model_sparse_grad(t->model, &rows, &vals);
    uint64_t cols = b->cb.hdr.cols;
    uint64_t need = nnz * (8 + 4 * cols);
    if (need > b->sparse_cap) {
        uint8_t *p = realloc(b->sparse_payload, need ? need : 1);
        if (!p)
            return -1;
        b->sparse_payload = p;
        b->sparse_cap = need;
    }
    memcpy(b->sparse_payload, rows, nnz * 8);
    memcpy(b->sparse_payload + nnz * 8, vals, nnz * cols * 4);
    b->cb.payload = b->sparse_payload;
    b->cb.hdr.nnz = nnz;
    b->cb.hdr.payload = need;
    return 0;
}

/* model_backward's callback: a bucket whose last gradient is in leaves now. */
static void train_on_ready(void *ctx, uint32_t param)
{
    train *t = ctx;
    train_bucket *b = &t->buckets[t->bucket_of[param]];
    if (--b->pending > 0)
        return;
    if (b->sparse && train_pack_sparse(t, b) < 0) {
        b->cb.hdr.nnz = 0; /* out of memory: push nothing; the check below fails the step */
        b->cb.hdr.payload = 0;
    }
    comm_push(t->c, &b->cb, t->batch);
}

static int train_step(train *t, const data_batch *batch, double *loss, char *err, size_t errlen)
{
    uint64_t t0 = clock_now_ns();
    *loss = model_forward(t->model, batch);
    uint64_t t1 = clock_now_ns();
    for (uint32_t k = 0; k < t->nbuckets; k++)
        t->buckets[k].pending = t->buckets[k].last_param - t->buckets[k].first_param + 1;
    model_backward(t->model, batch, train_on_ready, t);
    uint64_t t2 = clock_now_ns();
    if (comm_wait(t->c, t->all, t->nbuckets, err, errlen) < 0)
        return -1;
    uint64_t t3 = clock_now_ns();
    /* The means are in: the dense ones in place, the sparse one aside. */
    uint64_t first_push = UINT64_MAX, last_done = 0;
    for (uint32_t k = 0; k < t->nbuckets; k++) {
        train_bucket *b = &t->buckets[k];
        if (b->cb.t_push_ns < first_push)
            first_push = b->cb.t_push_ns;
        if (b->cb.t_done_ns > last_done)
            last_done = b->cb.t_done_ns;
        metrics_add(b->sparse ? t->m_rpc_sparse : t->m_rpc_dense, train_ms(b->cb.t_push_ns, b->cb.t_done_ns));
        if (!b->sparse) {
            for (uint32_t i = b->first_param; i <= b->last_param; i++)
                sgd_step_dense(t->opt, t->model, i, model_param_grad(t->model, i));
            continue;
        }
        uint64_t nnz = b->cb.result_nnz;
        const int64_t *rows = (const int64_t *)(const void *)b->cb.result;
        const float *vals = (const float *)(const void *)(b->cb.result + nnz * 8);
        if (sgd_step_sparse(t->opt, t->model, b->first_param, rows, vals, nnz, err, errlen) < 0)
            return -1;
    }
    uint64_t t4 = clock_now_ns();
    metrics_add(t->m_fwd, train_ms(t0, t1));
    metrics_add(t->m_bwd, train_ms(t1, t2));
    metrics_add(t->m_exposed, train_ms(t2, t3));
    metrics_add(t->m_span, train_ms(first_push, last_done));
    metrics_add(t->m_opt, train_ms(t3, t4));
    metrics_add(t->m_batch, train_ms(t0, t4));
    return 0;
}

int train_pass(train *t, comm *c, train_tick_fn tick, void *ctx, char *err, size_t errlen)
{
    t->c = c;
    t->batch = 0;
    for (uint64_t e = 0; e < t->job.epochs; e++) {
        double sum = 0;
        for (uint64_t i = 0; i < t->shard->nbatches; i++) {
            double loss;
            if (train_step(t, &t->shard->batches[i], &loss, err, errlen) < 0) {
                t->c = NULL;
                return -1;
            }
            sum += loss;
            t->batch++;
            if (tick && tick(ctx, t->batch, err, errlen) < 0) {
                t->c = NULL;
                return -1;
            }
        }
        t->loss_epoch[e] = sum / (double)t->shard->nbatches;
    }
    t->c = NULL;
    return 0;
}

const double *train_loss_per_epoch(const train *t, uint64_t *n)
{
    *n = t->job.epochs;
    return t->loss_epoch;
}

int train_params_sha256(const train *t, char hex[65])
{
    return params_sha256(t->model, hex);
}

const dummy_model *train_model(const train *t)
{
    return t->model;
}
