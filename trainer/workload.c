/* workload.c — the trainer's four workloads behind workload_ops (see
 * workload.h), and what every one of them shares: the pass report, the
 * parameters out, reset, bytes and free. */
#include "trainer/workload.h"
#include "shared/log.h"
#include "trainer/model.h"
#include "trainer/params_hash.h"
#include "trainer/params_out.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>

/* ---- DummyModel training (train.c): buckets through the hook ---------------- */

typedef struct dummy_workload {
    workload base;
    train *tr;
} dummy_workload;

static int dummy_pass(workload *w, uint64_t batches, workload_tick_fn tick, void *ctx, uint64_t *done,
                      json_t **extra, char *err, size_t errlen)
{
    train *tr = ((dummy_workload *)w)->tr;
    *done = 0;
    *extra = NULL;
    if (train_pass(tr, w->h, batches, tick, ctx, err, errlen) < 0)
        return -1;
    /* DDP's bucket layouts, for results.json */
    json_t *b = train_buckets_json(tr);
    /* compress, and the comm hook PyTorch would name for it: its
     * fp16_compress_hook / bf16_compress_hook is the allreduce hook with
     * the bucket narrowed around it. rpc_hook's narrow pushes have no
     * PyTorch name: it stays rpc_hook (compress says the rest). */
    half_type ct = train_compress(tr);
    const char *compress = ct == HALF_FP32 ? "none" : half_type_name(ct);
    char comm_hook[64];
    if (ct == HALF_FP32 || !w->h || strcmp(w->h->name, "allreduce_hook") != 0)
        snprintf(comm_hook, sizeof comm_hook, "%s", w->h ? w->h->name : "none");
    else
        snprintf(comm_hook, sizeof comm_hook, "%s_compress_hook", compress);
    *extra = b ? json_pack("{s:o, s:s, s:s}", "buckets", b, "compress", compress, "comm_hook", comm_hook) : NULL;
    /* The hook's own (PowerSGD: compress, comm_hook and its figures) over it. */
    json_t *own = hook_report(w->h);
    if (*extra && own)
        json_object_update(*extra, own);
    json_decref(own);
    return 0;
}

static const double *dummy_loss(const workload *w, uint64_t *n)
{
    return train_loss_per_epoch(((const dummy_workload *)w)->tr, n);
}

static const float *dummy_params(const workload *w, uint64_t *n)
{
    return train_params(((const dummy_workload *)w)->tr, n);
}

static const loss_check *dummy_divergence(const workload *w)
{
    return train_divergence(((const dummy_workload *)w)->tr);
}

static void dummy_free(workload *w) { train_free(((dummy_workload *)w)->tr); }

static const workload_ops dummy_ops = {
    .name = "DummyModel",
    .pass = dummy_pass,
    .loss_per_epoch = dummy_loss,
    .params = dummy_params,
    .divergence = dummy_divergence,
    .free = dummy_free,
};

/* ---- batch-update (batch_update.c): fetch and push through the client ------- */

typedef struct linear_workload {
    workload base;
    batch_update *bu;
    uint64_t batches; /* per pass: the assignment's */
} linear_workload;

static int linear_pass(workload *w, uint64_t batches, workload_tick_fn tick, void *ctx, uint64_t *done,
                       json_t **extra, char *err, size_t errlen)
{
    (void)tick; /* set once on the object (batch_update_set_tick) */
    (void)ctx;
    linear_workload *lw = (linear_workload *)w;
    batch_update_report rep;
    *extra = NULL;
    /* The pass's own count (the master's start): the warm-up's may differ
     * from the timed pass's (--warmup-steps). */
    if (batch_update_pass(lw->bu, &w->cl, batches ? batches : lw->batches, 0, true, &rep, err, errlen) < 0)
        return -1;
    *done = rep.batches;
    return 0;
}

static const double *linear_loss(const workload *w, uint64_t *n)
{
    return batch_update_loss_per_epoch(((const linear_workload *)w)->bu, n);
}

static const float *linear_params(const workload *w, uint64_t *n)
{
    return batch_update_params(((const linear_workload *)w)->bu, n);
}

static const loss_check *linear_divergence(const workload *w)
{
    return batch_update_divergence(((const linear_workload *)w)->bu);
}

static void linear_free(workload *w) { batch_update_free(((linear_workload *)w)->bu); }

static const workload_ops linear_ops = {
    .name = "Linear",
    .pass = linear_pass,
    .loss_per_epoch = linear_loss,
    .params = linear_params,
    .divergence = linear_divergence,
    .free = linear_free,
};

/* ---- the HybridModel (hybrid.c): tables through the client, dense through the hook */

typedef struct hybrid_workload {
    workload base;
    hybrid *hy;
} hybrid_workload;

static int hybrid_wpass(workload *w, uint64_t batches, workload_tick_fn tick, void *ctx, uint64_t *done,
                        json_t **extra, char *err, size_t errlen)
{
    hybrid_report rep;
    *extra = NULL;
    if (hybrid_pass(((hybrid_workload *)w)->hy, &w->cl, w->h, batches, tick, ctx, &rep, err, errlen) < 0)
        return -1;
    *done = rep.batches;
    /* "bags": the samples of this benchmark ("samples" is the metrics map);
     * "indices": theirs (what a lookup's payload carries with the bags) */
    *extra = json_pack("{s:I, s:I, s:I}", "bags", (json_int_t)rep.samples, "indices", (json_int_t)rep.indices,
                       "epochs", (json_int_t)rep.epochs);
    /* The dense part's hook (compress: its compress and comm_hook) */
    json_t *own = hook_report(w->h);
    if (*extra && own)
        json_object_update(*extra, own);
    json_decref(own);
    return 0;
}

static const double *hybrid_loss(const workload *w, uint64_t *n)
{
    return hybrid_loss_per_epoch(((const hybrid_workload *)w)->hy, n);
}

static const float *hybrid_params(const workload *w, uint64_t *n)
{
    return hybrid_dense_params(((const hybrid_workload *)w)->hy, n);
}

static const loss_check *hybrid_wdivergence(const workload *w)
{
    return hybrid_divergence(((const hybrid_workload *)w)->hy);
}

static void hybrid_wfree(workload *w) { hybrid_free(((hybrid_workload *)w)->hy); }

static const workload_ops hybrid_ops = {
    .name = "HybridModel",
    .pass = hybrid_wpass,
    .loss_per_epoch = hybrid_loss,
    .params = hybrid_params,
    .divergence = hybrid_wdivergence,
    .free = hybrid_wfree,
};

/* ---- the Synthetic model (synthetic.c): pure communication ------------------- */

typedef struct synthetic_workload {
    workload base;
    synthetic *syn;
} synthetic_workload;

static int synthetic_pass(workload *w, uint64_t batches, workload_tick_fn tick, void *ctx, uint64_t *done,
                          json_t **extra, char *err, size_t errlen)
{
    (void)tick; /* set once on the object (synthetic_set_tick) */
    (void)ctx;
    synthetic_report rep = {0};
    *extra = NULL;
    if (batches)
        synthetic_set_batches(((synthetic_workload *)w)->syn, batches);
    if (synthetic_run(((synthetic_workload *)w)->syn, &w->cl, &rep, err, errlen) < 0)
        return -1;
    *done = rep.batches;
    /* compress, as a DummyModel trainer says it (no hook to name). */
    half_type ct = synthetic_dtype(((synthetic_workload *)w)->syn);
    *extra = json_pack("{s:s}", "compress", ct == HALF_FP32 ? "none" : half_type_name(ct));
    return 0;
}

static void synthetic_wfree(workload *w) { synthetic_free(((synthetic_workload *)w)->syn); }

/* No loss, no parameters: reported as nulls. */
static const workload_ops synthetic_ops = {
    .name = "Synthetic",
    .pass = synthetic_pass,
    .free = synthetic_wfree,
};

/* ---- constructors --------------------------------------------------------------- */

/* A zeroed workload of `size` bytes with ops; NULL with err (the caller
 * frees its object). */
static workload *workload_alloc(size_t size, const workload_ops *ops, hook *h, char *err, size_t errlen)
{
    workload *w = calloc(1, size);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->ops = ops;
    w->h = h;
    w->cl.wake_fd = -1;
    return w;
}

workload *workload_dummy_new(train *tr, hook *h, char *err, size_t errlen)
{
    dummy_workload *w = (dummy_workload *)workload_alloc(sizeof *w, &dummy_ops, h, err, errlen);
    if (!w) {
        train_free(tr);
        hook_free(h);
        return NULL;
    }
    w->tr = tr;
    return &w->base;
}

workload *workload_linear_new(batch_update *bu, uint64_t batches, char *err, size_t errlen)
{
    linear_workload *w = (linear_workload *)workload_alloc(sizeof *w, &linear_ops, NULL, err, errlen);
    if (!w) {
        batch_update_free(bu);
        return NULL;
    }
    w->bu = bu;
    w->batches = batches;
    return &w->base;
}

workload *workload_hybrid_new(hybrid *hy, hook *h, char *err, size_t errlen)
{
    hybrid_workload *w = (hybrid_workload *)workload_alloc(sizeof *w, &hybrid_ops, h, err, errlen);
    if (!w) {
        hybrid_free(hy);
        hook_free(h);
        return NULL;
    }
    w->hy = hy;
    return &w->base;
}

workload *workload_synthetic_new(synthetic *syn, char *err, size_t errlen)
{
    synthetic_workload *w = (synthetic_workload *)workload_alloc(sizeof *w, &synthetic_ops, NULL, err, errlen);
    if (!w) {
        synthetic_free(syn);
        return NULL;
    }
    w->syn = syn;
    return &w->base;
}

int workload_open_client(workload *w, const client_cfg *cfg, const client_sink *sink, char *err, size_t errlen)
{
    if (client_open(&w->cl, cfg, sink, err, errlen) < 0)
        return -1;
    w->cl_open = true;
    return 0;
}

/* ---- what they share ----------------------------------------------------------- */

json_t *workload_pass_report(const workload *w, const char *pass, json_t *extra)
{
    json_t *o;
    if (!w->ops->loss_per_epoch || !w->ops->params) {
        /* Nulls, so that every trainer's entry has the same keys. */
        o = json_pack("{s:n, s:n}", "loss_per_epoch", "final_params_sha256");
    } else {
        uint64_t ne = 0, n = 0;
        const double *loss = w->ops->loss_per_epoch(w, &ne);
        const float *params = w->ops->params(w, &n);
        json_t *losses = json_array();
        for (uint64_t e = 0; e < ne; e++)
            json_array_append_new(losses, loss_json(loss[e]));
        char hex[65] = "";
        if (params)
            params_sha256_floats(params, n, hex);
        else
            log_error("the parameters could not be read back (out of memory): no digest");
        o = json_pack("{s:o, s:s?}", "loss_per_epoch", losses, "final_params_sha256", params ? hex : NULL);
    }
    const loss_check *lc = w->ops->divergence ? w->ops->divergence(w) : NULL;
    json_t *d = lc ? loss_check_json(lc, pass) : NULL;
    if (o && d) {
        char why[256];
        loss_check_reason(lc, pass, why, sizeof why);
        log_warn("%s: going on (--allow-divergence)", why);
        json_object_set_new(o, "diverged", d);
    } else {
        json_decref(d);
    }
    if (o && extra)
        json_object_update(o, extra);
    json_decref(extra);
    return o;
}

int workload_write_params(const workload *w, const char *path, char *err, size_t errlen)
{
    if (!w->ops->params)
        return 0;
    uint64_t n = 0;
    const float *p = w->ops->params(w, &n);
    if (!p) {
        snprintf(err, errlen, "--params-out: the parameters could not be read back (out of memory)");
        return -1;
    }
    return params_write(path, p, n, err, errlen);
}

void workload_reset(workload *w) { hook_reset(w->h); }

void workload_bytes(const workload *w, uint64_t *in, uint64_t *out)
{
    if (w->cl_open) {
        *in += w->cl.bytes_in;
        *out += w->cl.bytes_out;
    }
    hook_bytes(w->h, in, out);
}

static void workload_client_pushes(const client *cl, uint64_t *at, uint64_t *staged)
{
    if (!cl)
        return;
    *at += atomic_load_explicit(&cl->pushes_at, memory_order_relaxed);
    *staged += atomic_load_explicit(&cl->pushes_staged, memory_order_relaxed);
}

void workload_shm_pushes(const workload *w, uint64_t *at, uint64_t *staged)
{
    if (w->cl_open)
        workload_client_pushes(&w->cl, at, staged);
    workload_client_pushes(hook_client(w->h), at, staged);
}

static void workload_client_links(const client *cl, json_t *arr)
{
    for (size_t i = 0; cl && i < cl->nconns; i++) {
        const client_conn *c = &cl->conns[i];
        const char *gpu_note;
        bool gpu = client_link_gpu(cl, i, &gpu_note);
        /* the open of the server's memory: a first use, reported apart */
        json_t *open_ms = gpu && c->gpu_open_ms >= 0 ? json_real(c->gpu_open_ms) : json_null();
        json_array_append_new(arr, json_pack("{s:I, s:s, s:s, s:o, s:b, s:o, s:o}", "server",
                                             (json_int_t)c->server_rank, "address", c->addr, "transport",
                                             client_link(cl, i), "note",
                                             c->link_note[0] ? json_string(c->link_note) : json_null(), "cuda_ipc",
                                             gpu, "cuda_ipc_note", gpu_note[0] ? json_string(gpu_note) : json_null(),
                                             "cuda_ipc_open_ms", open_ms));
    }
}

json_t *workload_links(const workload *w)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    if (w->cl_open)
        workload_client_links(&w->cl, arr);
    workload_client_links(hook_client(w->h), arr);
    return arr;
}

void workload_free(workload *w)
{
    if (!w)
        return;
    hook_free(w->h);
    if (w->cl_open)
        client_close(&w->cl);
    w->ops->free(w);
    free(w);
}
