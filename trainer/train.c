/* train.c — real training with buckets overlapped with backward (see train.h). */
#include "trainer/train.h"
#include "trainer/bucket_place.h"
#include "shared/clock.h"
#include "trainer/ddp_buckets.h"
#include "trainer/gpushare.h"
#include "trainer/optim.h"
#include "trainer/steptimer.h"
#include "trainer/ttrace.h"
#include "shared/gpu/nvtx.h"
#include "shared/log.h"

#include <assert.h>
#include <cblas.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct train_bucket {
    hook_bucket hb;
    uint32_t first_param, last_param; /* parameter index range, inclusive */
    uint32_t pending;                 /* gradients still to come this batch */
    /* Staged (the gradients have no host view, train.h): the bucket's
     * pinned twin, what the hook reads and writes, made at the first pass
     * that needs it (twin_n floats); the mark after the copy into it. NULL
     * on the host-visible path. A dense bucket handed to a hook that takes
     * device memory (on_device, this pass) needs none: it leaves from the
     * gradients themselves once the mark after their writer is done. */
    cbuf *twin;
    uint64_t twin_n;
    bool on_device;
    cmark copied;
    /* Staged, on a device: the marks after its gradients (before any
     * copy) and after its mean was back in them — its hook metric, timed
     * on the stream (steptimer_sample). */
    cmark ready, back;
    /* Traced steps only: when its last gradient was computed (its
     * bucket_ready span runs from there to its hand-over). */
    uint64_t t_grads_ns;
} train_bucket;

/* One bucket layout (ddp_buckets.h): the first iteration's or the rebuilt
 * one. During a step the buckets are handed over in id order, as DDP
 * reduces them: bucket k once buckets 0..k are ready (launched), and,
 * staged, once its copy is done too (handed). */
typedef struct train_layout {
    const char *what;    /* "first iteration", "rebuilt" */
    bool ascending;      /* a bucket's parameters in DDP's order: ascending (the first iteration's) or not */
    train_bucket *buckets;
    hook_bucket **all;   /* every bucket, for hook_wait */
    uint32_t nbuckets;
    uint32_t *bucket_of; /* parameter -> bucket */
    hook_tensor *tensors; /* every dense bucket's, by parameter index (hook_bucket.tensors) */
    uint32_t launched;   /* during a step: buckets 0..launched-1 are ready (staged: their copies enqueued) */
    uint32_t handed;     /* ... and 0..handed-1 handed to the hook */
} train_layout;

struct train {
    train_job job;
    metrics *m;
    stats *m_batch, *m_fwd, *m_bwd, *m_bwd_compute, *m_opt, *m_exposed;
    stats *m_span; /* first push to last result: the communication of a step */
    /* On a device (not the cpu): forward, backward, the optimizer and the
     * batch between marks on its stream (TM_*), read once done. */
    steptimer tm;
    dummy_data *data;
    data_shard *shard;
    compute *dev;        /* where the model computes (train_job.device) */
    dummy_model *model;
    sgd *opt;
    /* DDP's two layouts: every pass's first batch uses `first` (all dense
     * gradients one bucket), the others `rebuilt` (ddp_buckets.h); cur is
     * the step's. */
    train_layout first, rebuilt, *cur;
    bool staged;         /* the gradients have no host view: buckets through pinned twins */
    bool placed;         /* staged: a pass has placed the buckets (train_place_buckets) */
    uint32_t logged_on_device; /* how many it handed over in device memory (logged when it changes) */
    uint64_t passes;     /* passes begun: each after the first starts from a fresh model */
    float *params_host;  /* staged: the parameters read back (train_params) */
    hook *h;             /* during a pass */
    uint64_t batch;      /* wire batch number during a pass */
    double *loss_epoch; /* nepochs entries: the last pass's mean loss per epoch */
    uint64_t nepochs;
    loss_check lc;       /* the pass's first loss that is not finite */
    /* CUDA IPC: the gradients exported (train_gpushare); share.gpu[0] ==
     * '\0': not made (yet, or cannot be) */
    gpushare share;
    /* The trace (train_set_trace; NULL: none): the training thread's ring. */
    ttrace *tt;
    trace_ring *ring;
};


/* A step's marks on a device (steptimer.h): forward TM_START..TM_FWD,
 * backward TM_FWD..TM_BWD, the optimizer TM_OPT..TM_END, the batch
 * TM_START..TM_END; between TM_BWD and TM_OPT the stream waits for the
 * hook (the exposed wait). Each bucket's hook metric runs from the mark
 * after its gradients to the mark after its mean is back, the
 * communication span from the first bucket's to the last one's
 * (train_wait_means). */
enum { TM_START = 0, TM_FWD, TM_BWD, TM_OPT, TM_END };

/* Layout L's buckets from DDP's assignment d: a dense bucket is the
 * contiguous range of the flat gradients its parameters cover, a sparse
 * one the embedding's touched rows. 0, or -1 with err. */
static int train_make_layout(train *t, train_layout *L, const char *what, bool ascending, const ddpb_layout *d,
                             char *err, size_t errlen)
{
    uint32_t np = model_nparams(t->model);
    L->what = what;
    L->ascending = ascending;
    L->buckets = calloc(d->nbuckets ? d->nbuckets : 1, sizeof *L->buckets);
    L->bucket_of = calloc(np, sizeof *L->bucket_of);
    L->tensors = calloc(np ? np : 1, sizeof *L->tensors);
    L->all = calloc(d->nbuckets ? d->nbuckets : 1, sizeof *L->all);
    if (!L->buckets || !L->bucket_of || !L->tensors || !L->all) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (d->nbuckets > HOOK_MAX_BUCKETS) {
        snprintf(err, errlen, "%u buckets (bucket_cap_mb %g, first_bucket_mb %g): at most %d; raise bucket_cap_mb",
                 d->nbuckets, t->job.bucket_cap_mb, t->job.first_bucket_mb, HOOK_MAX_BUCKETS);
        return -1;
    }
    L->nbuckets = d->nbuckets;
    float *grads = model_grads(t->model);
    for (uint32_t k = 0; k < d->nbuckets; k++) {
        train_bucket *tb = &L->buckets[k];
        uint32_t lo = UINT32_MAX, hi = 0;
        for (uint32_t j = d->start[k]; j < d->start[k + 1]; j++) {
            uint32_t i = d->param[j];
            lo = i < lo ? i : lo;
            hi = i > hi ? i : hi;
            L->bucket_of[i] = k;
        }
        /* The model's parameters are dense ranges apart from a sparse
         * embedding (model.h), which DDP puts alone: every dense bucket is
         * a run of consecutive parameters. */
        if (hi - lo + 1 != ddpb_count(d, k)) {
            snprintf(err, errlen, "bucket %u's parameters are not consecutive (%u..%u): not a range", k, lo, hi);
            return -1;
        }
        tb->hb.id = k;
        tb->first_param = lo;
        tb->last_param = hi;
        tb->hb.sparse = model_param(t->model, lo)->sparse;
        assert(!tb->hb.sparse || lo == hi);
        uint64_t twin = 0; /* floats */
        if (tb->hb.sparse) {
            const model_param_info *pi = model_param(t->model, lo);
            tb->hb.rows = pi->shape[0];
            tb->hb.cols = pi->shape[1];
            /* at most every index of the largest batch a row of its own */
            uint64_t touched = (uint64_t)t->shard->max_len * t->data->cfg.sample_length;
            twin = touched < pi->shape[0] ? touched * pi->shape[1] : pi->size;
        } else {
            const model_param_info *plo = model_param(t->model, lo);
            const model_param_info *phi = model_param(t->model, hi);
            tb->hb.count = phi->offset + phi->size - plo->offset;
            tb->hb.data = grads ? grads + plo->offset : NULL;
            twin = tb->hb.count;
            /* Its gradients as PyTorch's bucket.gradients() views them
             * (rows x cols: shape[0] x the rest; a bias is n x 1). */
            for (uint32_t i = lo; i <= hi; i++) {
                const model_param_info *pi = model_param(t->model, i);
                L->tensors[i] = (hook_tensor){.offset = pi->offset - plo->offset, .rows = pi->shape[0],
                                              .cols = pi->ndim == 1 ? 1 : pi->shape[1]};
            }
            tb->hb.tensors = &L->tensors[lo];
            tb->hb.ntensors = hi - lo + 1;
            tb->hb.ddp_reversed = d->param[d->start[k]] != lo;
        }
        tb->hb.last = k + 1 == d->nbuckets;
        if (t->staged)
            tb->twin_n = twin;
        L->all[k] = &tb->hb;
    }
    return 0;
}

/* A bucket's floats as the log and the results list them. */
static uint64_t train_bucket_floats(const train *t, const train_bucket *tb)
{
    return tb->hb.sparse ? model_param(t->model, tb->first_param)->size : tb->hb.count;
}

/* Layout L's sizes in one line, in the order its buckets leave
 * (bench/train_step.sh replays the rebuilt ones through the Synthetic
 * model: "bucket floats: ..."). */
static void train_log_layout(const train *t, const train_layout *L, const char *label)
{
    char line[1024];
    size_t used = 0;
    for (uint32_t k = 0; k < L->nbuckets && used < sizeof line; k++) {
        const train_bucket *tb = &L->buckets[k];
        int w = snprintf(line + used, sizeof line - used, "%s%" PRIu64 "%s", k ? " " : "",
                         train_bucket_floats(t, tb), tb->hb.sparse ? "s" : "");
        used += w > 0 ? (size_t)w : 0;
    }
    if (used >= sizeof line)
        log_info("%s: (%u buckets, too many to list)", label, L->nbuckets);
    else
        log_info("%s: %s", label, line);
}

/* DDP's buckets (ddp_buckets.h): the first iteration's and the rebuilt
 * ones, from the order backward finishes the gradients (model.h: the
 * reverse of the parameters'). */
static int train_make_buckets(train *t, char *err, size_t errlen)
{
    uint32_t np = model_nparams(t->model);
    uint64_t *bytes = calloc(np, sizeof *bytes);
    bool *sparse = calloc(np, sizeof *sparse);
    uint32_t *ready = calloc(np, sizeof *ready);
    ddpb_layout d0 = {0}, d1 = {0};
    int rc = -1;
    if (!bytes || !sparse || !ready) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < np; i++) {
        bytes[i] = model_param(t->model, i)->size * 4;
        sparse[i] = model_param(t->model, i)->sparse;
        ready[i] = np - 1 - i;
    }
    t->staged = model_grads(t->model) == NULL;
    if (ddpb_initial(bytes, sparse, np, &d0) < 0 ||
        ddpb_rebuilt(bytes, sparse, ready, np, ddpb_cap_bytes(t->job.first_bucket_mb),
                     ddpb_cap_bytes(t->job.bucket_cap_mb), &d1) < 0) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (train_make_layout(t, &t->first, "first iteration", true, &d0, err, errlen) < 0 ||
        train_make_layout(t, &t->rebuilt, "rebuilt", false, &d1, err, errlen) < 0)
        goto out;
    log_info("%u bucket(s) for %u parameters (DDP's: first bucket %g MB, then cap %g MB; the first iteration of "
             "a pass: %u)",
             t->rebuilt.nbuckets, np, t->job.first_bucket_mb, t->job.bucket_cap_mb, t->first.nbuckets);
    train_log_layout(t, &t->rebuilt, "bucket floats");
    train_log_layout(t, &t->first, "bucket floats of a pass's first iteration");
    rc = 0;
out:
    ddpb_free(&d0);
    ddpb_free(&d1);
    free(bytes);
    free(sparse);
    free(ready);
    return rc;
}

static json_t *train_layout_json(const train *t, const train_layout *L)
{
    json_t *a = json_array();
    for (uint32_t k = 0; a && k < L->nbuckets; k++) {
        const train_bucket *tb = &L->buckets[k];
        json_t *names = json_array();
        /* in DDP's order inside the bucket */
        for (uint32_t j = 0; names && j <= tb->last_param - tb->first_param; j++) {
            uint32_t i = L->ascending ? tb->first_param + j : tb->last_param - j;
            json_array_append_new(names, json_string(model_param(t->model, i)->name));
        }
        /* element_bytes: on the wire (--compress narrows dense buckets
         * only), which the headline's bytes per step count */
        size_t eb = tb->hb.sparse ? 4 : half_type_size(t->job.compress);
        json_array_append_new(a, json_pack("{s:I, s:b, s:I, s:o}", "floats", (json_int_t)train_bucket_floats(t, tb),
                                           "sparse", tb->hb.sparse, "element_bytes", (json_int_t)eb, "parameters",
                                           names ? names : json_null()));
    }
    return a;
}

half_type train_compress(const train *t) { return t->job.compress; }

json_t *train_buckets_json(const train *t)
{
    return json_pack("{s:s, s:f, s:f, s:o, s:o}", "layout", "ddp", "first_bucket_mb", t->job.first_bucket_mb,
                     "bucket_cap_mb", t->job.bucket_cap_mb, "first_iteration", train_layout_json(t, &t->first),
                     "rebuilt", train_layout_json(t, &t->rebuilt));
}

/* The model's gradient memory from the hook (model_grads_lender). */
static void *train_grads_from_hook(void *ctx, size_t bytes) { return hook_send_memory(ctx, bytes); }

train *train_new(const train_job *j, hook *h, metrics *m, char *err, size_t errlen)
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
    t->data = data_generate(&j->data, j->seed, err, errlen);
    if (!t->data)
        goto fail;
    t->shard = data_shard_new(t->data, (uint32_t)j->batch_size, j->rank, j->ntrainer, err, errlen);
    if (!t->shard)
        goto fail;
    if (t->shard->dropped)
        log_warn("%" PRIu64 " batch(es) of the data set are left out so that every trainer runs %" PRIu64
                 " per epoch", t->shard->dropped, t->shard->nbatches);
    if (!(t->dev = compute_new(j->device, err, errlen)))
        goto fail;
    /* The metrics in the seed's order; on a device the step's own are
     * GPU-timed (the seed's cuda=True). */
    steptimer_init(&t->tm, t->dev);
    t->m_batch = steptimer_span(&t->tm, m, "batch_level_metric,batch_all", TM_START, TM_END);
    t->m_fwd = steptimer_span(&t->tm, m, "forward_metric,forward_pass", TM_START, TM_FWD);
    /* backward as the seed times loss.backward(), which under DDP returns
     * once every bucket's reduction is done: compute and the exposed wait;
     * the compute alone is psbench's backward_compute. */
    t->m_bwd = steptimer_span(&t->tm, m, "backward_metric,backward", TM_FWD, TM_OPT);
    t->m_bwd_compute = steptimer_span(&t->tm, m, "backward_metric,backward_compute", TM_FWD, TM_BWD);
    t->m_opt = steptimer_span(&t->tm, m, "optimizer_metric,step", TM_OPT, TM_END);
    t->m_exposed = steptimer_span(&t->tm, m, "hook_future_metric,exposed_wait", TM_BWD, TM_OPT);
    t->m_span = metrics_get(m, "hook_future_metric,comm_span");
    model_grads_lender lender = {train_grads_from_hook, h};
    t->model = model_new_lent(t->dev, &j->model, j->seed, t->shard->max_len, h ? &lender : NULL, err, errlen);
    if (!t->model || model_check_data(t->model, t->data, err, errlen) < 0)
        goto fail;
    if (model_grads_lent(t->model))
        log_info("gradients (%.1f MiB) in %s's shared memory: dense buckets are sent without a copy",
                 (double)model_total_size(t->model) * sizeof(float) / (1 << 20), h->name);
    t->opt = sgd_new(t->model, j->lr, j->momentum, err, errlen);
    if (!t->opt || train_make_buckets(t, err, errlen) < 0)
        goto fail;
    return t;
fail:
    train_free(t);
    return NULL;
}

static void train_layout_free(train *t, train_layout *L)
{
    for (uint32_t k = 0; L->buckets && k < L->nbuckets; k++) {
        hook_bucket_release(&L->buckets[k].hb);
        compute_release(t->dev, L->buckets[k].twin);
    }
    free(L->buckets);
    free(L->all);
    free(L->bucket_of);
    free(L->tensors);
}

void train_free(train *t)
{
    if (!t)
        return;
    steptimer_release(&t->tm);
    train_layout_free(t, &t->first);
    train_layout_free(t, &t->rebuilt);
    free(t->params_host);
    sgd_free(t->opt);
    model_free(t->model);
    compute_free(t->dev);
    data_shard_free(t->shard);
    data_free(t->data);
    free(t->loss_epoch);
    free(t);
}

/* ---- CUDA IPC: the gradients shared with a server on this GPU ---------------- */

const gpushare *train_gpushare(train *t, char *why, size_t whylen)
{
    if (!t->share.gpu[0] &&
        gpushare_init(&t->share, t->dev, model_grads_buf(t->model), model_grads_shadow(t->model), why, whylen) < 0)
        return NULL;
    return &t->share;
}

uint64_t train_batches_per_epoch(const train *t)
{
    return t->shard->nbatches;
}

/* Where each bucket's data is for hook h this pass, in both layouts:
 * staged, a dense bucket stays on the GPU for a hook that takes device
 * memory (NCCL), every other one gets its pinned twin (made here the first
 * time). 0, or -1 with err. */
static int train_place_layout(train *t, train_layout *L, const hook *h, char *err, size_t errlen)
{
    for (uint32_t k = 0; k < L->nbuckets; k++) {
        train_bucket *tb = &L->buckets[k];
        cspan grads = tb->hb.sparse ? cspan_none()
                                    : cspan_at(model_grads_buf(t->model),
                                               model_param(t->model, tb->first_param)->offset, tb->hb.count);
        if (bucket_place(&tb->hb, h, t->dev, grads, &tb->twin, tb->twin_n, err, errlen) < 0)
            return -1;
        tb->on_device = !devf32_is_none(tb->hb.device_data);
        tb->hb.gpu_timed = steptimer_on(&t->tm); /* its hook metric: train_wait_means */
    }
    return 0;
}

static int train_place_buckets(train *t, const hook *h, char *err, size_t errlen)
{
    if (!t->staged)
        return 0; /* host views: the gradients themselves */
    if (train_place_layout(t, &t->first, h, err, errlen) < 0 || train_place_layout(t, &t->rebuilt, h, err, errlen) < 0)
        return -1;
    uint32_t on_device = 0;
    for (uint32_t k = 0; k < t->rebuilt.nbuckets; k++)
        on_device += t->rebuilt.buckets[k].on_device;
    if (!t->placed || on_device != t->logged_on_device) {
        log_info("%s: %u bucket(s) handed over in device memory, %u through pinned host memory", h->name, on_device,
                 t->rebuilt.nbuckets - on_device);
        t->logged_on_device = on_device;
        t->placed = true;
    }
    return 0;
}

/* Staged: hand the launched buckets over in order, each once the copy
 * into its twin is done — as far as they are done (wait: all of them,
 * waiting for each). */
static void train_hand_over(train *t, bool wait)
{
    train_layout *L = t->cur;
    /* A failed GPU wrote nothing worth sending: nothing leaves (train_step
     * stops at its status before waiting for the hook). */
    while (L->handed < L->launched && !compute_failed(t->dev)) {
        train_bucket *b = &L->buckets[L->handed];
        if (wait)
            compute_wait(t->dev, b->copied);
        else if (!compute_done(t->dev, b->copied))
            return;
        if (compute_failed(t->dev)) /* done because it failed */
            return;
        L->handed++;
        hook_ready(t->h, &b->hb, t->batch);
        if (b->hb.gpu_timed && b->hb.metric) /* the hook named its metric: the GPU times it */
            metrics_mark_gpu_timed(b->hb.metric);
    }
}

/* Staged: the bucket's gradients into its twin (the sparse one's values;
 * its rows are host memory already), the copy's mark recorded; backward
 * goes on, and the bucket leaves once the copy is done. */
static void train_stage(train *t, train_bucket *b)
{
    b->ready = compute_mark(t->dev);
    if (b->on_device) { /* no copy: the hook reads the gradients once their writer is done */
        b->copied = b->ready;
        return;
    }
    float *twin = compute_host_view(t->dev, b->twin);
    cspan src;
    if (b->hb.sparse) {
        const float *vals;
        b->hb.nnz = model_sparse_grad(t->model, &b->hb.idx, &vals);
        assert(!vals && b->hb.nnz * b->hb.cols <= cbuf_count(b->twin));
        src = cspan_sub(model_grad_span(t->model, b->first_param), 0, b->hb.nnz * b->hb.cols);
        b->hb.vals = twin;
    } else {
        src = cspan_at(model_grads_buf(t->model), model_param(t->model, b->first_param)->offset, b->hb.count);
    }
    compute_read(t->dev, src, twin);
    b->copied = compute_mark(t->dev);
}

/* Bucket b's gradients are all in: launch it, and every bucket after it
 * whose gradients are in too, in id order — DDP reduces its buckets in
 * sequence (bucket k once 0..k are ready). A bucket leaves once the
 * operations that wrote it are done (the mark recorded now; on the cpu
 * they are); the sparse one carries the embedding's touched rows, which
 * the model keeps until the next backward. Staged, it leaves from its
 * pinned twin once the copy into it is done (train_stage, train_hand_over). */
static void train_launch(train *t)
{
    train_layout *L = t->cur;
    bool any = false;
    while (L->launched < L->nbuckets && L->buckets[L->launched].pending == 0) {
        train_bucket *b = &L->buckets[L->launched++];
        any = true;
        if (t->staged) {
            train_stage(t, b);
            continue;
        }
        compute_wait(t->dev, compute_mark(t->dev));
        if (b->hb.sparse)
            b->hb.nnz = model_sparse_grad(t->model, &b->hb.idx, &b->hb.vals);
        L->handed++;
        hook_ready(t->h, &b->hb, t->batch);
    }
    if (any && t->staged)
        train_hand_over(t, false);
}

/* model_backward's callback: parameter param's gradient is final. */
static void train_on_ready(void *ctx, uint32_t param)
{
    train *t = ctx;
    train_bucket *b = &t->cur->buckets[t->cur->bucket_of[param]];
    assert(b->pending > 0);
    if (--b->pending == 0) {
        if (ttrace_open(t->ring)) /* read for the trace only */
            b->t_grads_ns = clock_now_ns();
        train_launch(t);
    }
}

/* Every bucket's mean in. Host views: one wait, the means in place.
 * Staged: bucket by bucket in order, each dense mean copied back into the
 * gradients as soon as it is in (ahead of the optimizer's steps, enqueued
 * after it), then a mark that ends the bucket's hook metric on a device. */
static int train_wait_means(train *t, char *err, size_t errlen)
{
    train_layout *L = t->cur;
    if (!t->staged)
        return hook_wait(t->h, L->all, L->nbuckets, err, errlen);
    for (uint32_t k = 0; k < L->nbuckets; k++) {
        train_bucket *b = &L->buckets[k];
        if (hook_wait(t->h, &L->all[k], 1, err, errlen) < 0)
            return -1;
        if (!b->hb.sparse && !b->on_device)
            compute_write(t->dev,
                          cspan_at(model_grads_buf(t->model), model_param(t->model, b->first_param)->offset,
                                   b->hb.count),
                          b->hb.data);
        if (steptimer_on(&t->tm)) {
            b->back = compute_mark(t->dev);
            steptimer_sample(&t->tm, b->hb.metric, b->ready, b->back);
        }
    }
    if (steptimer_on(&t->tm) && L->nbuckets > 0) /* handed over in id order */
        steptimer_sample(&t->tm, t->m_span, L->buckets[0].ready, L->buckets[L->nbuckets - 1].back);
    return 0;
}

/* ---- the trace (ttrace.h) ------------------------------------------------- */

void train_set_trace(train *t, ttrace *tt)
{
    if (!ttrace_on(tt))
        return;
    t->tt = tt;
    t->ring = tt->compute;
    ttrace_bucket_lanes(tt, t->first.nbuckets > t->rebuilt.nbuckets ? t->first.nbuckets : t->rebuilt.nbuckets);
}

/* The ids of this step's spans (bucket: TRACE_NONE for the step's own). */
static trace_ids train_trace_ids(const train *t, int64_t bucket, int32_t server)
{
    return trace_ids_make((int64_t)t->batch, bucket, (int32_t)t->job.rank, server);
}

/* The step's spans from the very readings its metrics are made of
 * (train_step: t0..t4), so that their sums are the metrics' on the cpu. */
static void train_trace_step(train *t, uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3, uint64_t t4)
{
    trace_ids ids = train_trace_ids(t, TRACE_NONE, TRACE_NONE);
    unsigned lane = t->tt->lane_compute;
    trace_add(t->ring, TRACE_FORWARD, lane, t0, t1, ids);
    trace_add(t->ring, TRACE_BACKWARD_COMPUTE, lane, t1, t2, ids);
    trace_add(t->ring, TRACE_EXPOSED_WAIT, lane, t2, t3, ids);
    trace_add(t->ring, TRACE_OPTIMIZER, lane, t3, t4, ids);
    trace_add(t->ring, TRACE_STEP, lane, t0, t4, ids);
}

/* Bucket b's spans, its mean applied from a0 to a1: ready (its last
 * gradient -> handed to the hook), wait (handed -> its mean in: the hook's
 * metric's sample), apply (the optimizer's steps over its parameters). */
static void train_trace_bucket(train *t, const train_bucket *b, uint64_t a0, uint64_t a1)
{
    const hook_bucket *hb = &b->hb;
    trace_ids ids = train_trace_ids(t, hb->id, hb->server);
    unsigned lane = ttrace_bucket_lane(t->tt, hb->id);
    uint64_t grads = b->t_grads_ns && b->t_grads_ns <= hb->t_ready_ns ? b->t_grads_ns : hb->t_ready_ns;
    trace_add(t->ring, TRACE_BUCKET_READY, lane, grads, hb->t_ready_ns, ids);
    trace_add(t->ring, TRACE_BUCKET_WAIT, lane, hb->t_ready_ns, hb->t_done_ns, ids);
    trace_add(t->ring, TRACE_BUCKET_APPLY, lane, a0, a1, ids);
}

static int train_step(train *t, const data_batch *batch, double *loss, char *err, size_t errlen)
{
    /* The trace's step: this batch, in the timed pass (ttrace.h). */
    if (t->ring)
        trace_ring_step(t->ring, ttrace_step_of(t->tt, t->batch));
    bool nv = t->tt && t->tt->nvtx && ttrace_open(t->ring);
    trace_nvtx_id nv_step = 0, nv_part = 0;
    if (nv)
        nv_step = trace_nvtx_start(TRACE_STEP, train_trace_ids(t, TRACE_NONE, TRACE_NONE));
    ttrace_nvtx_next(nv, &nv_part, TRACE_FORWARD, train_trace_ids(t, TRACE_NONE, TRACE_NONE));
    uint64_t t0 = clock_now_ns();
    steptimer_mark(&t->tm, TM_START);
    *loss = model_forward(t->model, batch);
    steptimer_mark(&t->tm, TM_FWD);
    uint64_t t1 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_BACKWARD_COMPUTE, train_trace_ids(t, TRACE_NONE, TRACE_NONE));
    /* DDP's first iteration reduces every dense gradient as one bucket
     * after backward; from the second on, the rebuilt buckets. */
    train_layout *L = t->cur = t->batch == 0 ? &t->first : &t->rebuilt;
    for (uint32_t k = 0; k < L->nbuckets; k++)
        L->buckets[k].pending = L->buckets[k].last_param - L->buckets[k].first_param + 1;
    L->launched = L->handed = 0;
    model_backward(t->model, batch, train_on_ready, t);
    steptimer_mark(&t->tm, TM_BWD); /* after the buckets' copies too */
    assert(compute_failed(t->dev) || L->launched == L->nbuckets);
    if (t->staged)
        train_hand_over(t, true); /* the copies still running */
    /* A GPU that failed (compute.h) has handed nothing more over: stop
     * with its reason rather than wait for buckets that never left. */
    if (compute_status(t->dev, err, errlen) < 0)
        return -1;
    uint64_t t2 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_EXPOSED_WAIT, train_trace_ids(t, TRACE_NONE, TRACE_NONE));
    if (train_wait_means(t, err, errlen) < 0)
        return -1;
    uint64_t t3 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_OPTIMIZER, train_trace_ids(t, TRACE_NONE, TRACE_NONE));
    steptimer_mark(&t->tm, TM_OPT);
    /* The means are in: the dense ones in place, the sparse one aside.
     * Traced, each bucket's steps are its bucket_apply (a clock read
     * after each, for the trace only). */
    bool traced = ttrace_open(t->ring);
    uint64_t first_push = UINT64_MAX, last_done = 0, applied = t3;
    for (uint32_t k = 0; k < L->nbuckets; k++) {
        train_bucket *b = &L->buckets[k];
        if (b->hb.t_ready_ns < first_push)
            first_push = b->hb.t_ready_ns;
        if (b->hb.t_done_ns > last_done)
            last_done = b->hb.t_done_ns;
        if (!b->hb.sparse) {
            for (uint32_t i = b->first_param; i <= b->last_param; i++)
                sgd_step_param(t->opt, t->model, i); /* the mean, in place */
        } else if (sgd_step_sparse(t->opt, t->model, b->first_param, hook_result_idx(&b->hb),
                                   hook_result_vals(&b->hb), b->hb.result_nnz, err, errlen) < 0) {
            return -1;
        }
        if (traced) {
            uint64_t now = clock_now_ns();
            train_trace_bucket(t, b, applied, now);
            applied = now;
        }
    }
    uint64_t t4 = clock_now_ns();
    ttrace_nvtx_next(nv, &nv_part, TRACE_NSPANS, train_trace_ids(t, TRACE_NONE, TRACE_NONE));
    if (nv)
        trace_nvtx_end(nv_step);
    /* The host's view on a device (its metrics are the stream's). */
    if (traced)
        train_trace_step(t, t0, t1, t2, t3, t4);
    if (steptimer_on(&t->tm)) {
        /* Every metric of the step, the hook's too, is recorded once its
         * marks are done (steptimer: never waited for by the timer). */
        steptimer_mark(&t->tm, TM_END);
        /* The step ends with the stream synchronised, as the seed's ends
         * with torch.cuda.synchronize: the next one starts from a GPU
         * that has applied this one's update. */
        compute_sync(t->dev);
        if (compute_status(t->dev, err, errlen) < 0) /* the update did not happen */
            return -1;
        steptimer_end(&t->tm);
        return 0;
    }
    metrics_add(t->m_fwd, clock_ms(t0, t1));
    metrics_add(t->m_bwd, clock_ms(t1, t3));
    metrics_add(t->m_bwd_compute, clock_ms(t1, t2));
    metrics_add(t->m_exposed, clock_ms(t2, t3));
    metrics_add(t->m_span, clock_ms(first_push, last_done));
    metrics_add(t->m_opt, clock_ms(t3, t4));
    metrics_add(t->m_batch, clock_ms(t0, t4));
    return 0;
}

int train_pass(train *t, hook *h, uint64_t steps, train_tick_fn tick, void *ctx, char *err, size_t errlen)
{
    /* The seed builds a fresh model, optimizer and DDP wrapper for every
     * pass: each pass after the first starts again from the parameters the
     * seed gives (the same on every pass) with no momentum, and its first
     * iteration is DDP's first (train_step). */
    if (t->passes++ > 0) {
        if (model_reinit(t->model, t->job.seed, err, errlen) < 0)
            return -1;
        sgd_reset(t->opt);
    }
    /* `steps` batches, the data cycled as epochs (--steps may end one
     * part-way: its mean loss is over the batches it had). */
    uint64_t per_epoch = t->shard->nbatches;
    assert(per_epoch > 0);
    uint64_t epochs = (steps + per_epoch - 1) / per_epoch;
    double *le = realloc(t->loss_epoch, (epochs ? epochs : 1) * sizeof *le);
    if (!le) {
        snprintf(err, errlen, "out of memory for %" PRIu64 " epochs' losses", epochs);
        return -1;
    }
    t->loss_epoch = le;
    t->nepochs = 0;
    if (train_place_buckets(t, h, err, errlen) < 0)
        return -1;
    t->h = h;
    t->batch = 0;
    steptimer_drop(&t->tm); /* a failed pass's: not this one's */
    loss_check_start(&t->lc, t->job.allow_divergence);
    for (uint64_t e = 0; e < epochs; e++) {
        double sum = 0;
        uint64_t n = steps - e * per_epoch < per_epoch ? steps - e * per_epoch : per_epoch;
        for (uint64_t i = 0; i < n; i++) {
            double loss;
            /* Checked after the step: every trainer finishes the batch (its
             * gradients reach the servers), so peers that diverge at the
             * same batch stop at the same point rather than wait. */
            if (train_step(t, &t->shard->batches[i], &loss, err, errlen) < 0 ||
                loss_check_batch(&t->lc, e, i, loss, err, errlen) < 0) {
                t->h = NULL;
                return -1;
            }
            sum += loss;
            t->batch++;
            if (tick && tick(ctx, t->batch, err, errlen) < 0) {
                t->h = NULL;
                return -1;
            }
        }
        t->loss_epoch[e] = sum / (double)n;
        t->nepochs = e + 1;
    }
    /* The last steps' GPU times: the stream synchronised, as the seed's
     * pass ends (torch.cuda.synchronize). */
    steptimer_flush(&t->tm);
    t->h = NULL;
    return 0;
}

const double *train_loss_per_epoch(const train *t, uint64_t *n)
{
    *n = t->nepochs;
    return t->loss_epoch;
}

const loss_check *train_divergence(const train *t)
{
    return &t->lc;
}

const dummy_model *train_model(const train *t)
{
    return t->model;
}

const float *train_params(train *t, uint64_t *n)
{
    *n = model_total_size(t->model);
    const float *v = model_values_const(t->model);
    if (v)
        return v;
    if (!t->params_host && !(t->params_host = malloc(*n * sizeof *t->params_host)))
        return NULL;
    compute_read(t->dev, cspan_all(model_values_buf(t->model)), t->params_host);
    compute_sync(t->dev);
    return t->params_host;
}
