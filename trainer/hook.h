/* hook.h — DDP communication hooks: what happens to a gradient bucket once
 * backward has finished it. Training hands each finished bucket to the hook
 * (hook_ready, while the rest of backward runs) and later waits for all of
 * them (hook_wait); it knows no wire format, no server and no collective.
 * When hook_wait returns, every bucket holds the mean over the trainers:
 * a dense bucket in place, a sparse one in its result.
 *
 * The seed's hooks, each with its metric per bucket (the time from
 * hook_ready to the mean being there, on the host's clock; a trainer on a
 * GPU times it on its stream instead: hook_bucket.gpu_timed):
 *   rpc_hook        every bucket to the parameter servers
 *                   (hook_future_metric,rpc_dense / rpc_sparse)
 *   allreduce_hook  every bucket allreduced among the trainers
 *                   (hook_future_metric,<backend>_dense_allreduce /
 *                   <backend>_sparse_allreduce)
 *   sparse_rpc_hook sparse buckets to the servers (rpc_sparse), dense ones
 *                   allreduced (<backend>_dense_allreduce)
 *   hybrid_hook     sparse buckets allreduced on a Gloo group
 *                   (hook_c10d_metric,gloo_sparse_allreduce), dense ones on
 *                   the NCCL group (hook_future_metric,nccl_dense_allreduce);
 *                   on a CPU-only job both on Gloo (gloo_dense_allreduce)
 *
 * The mean's arithmetic is the protocol's, whichever way a bucket travels:
 * the sum over the trainers, then times mean_scale(N) (shared/mean.h); a
 * sparse mean is coalesced as shared/sparse.h says. So a bucket allreduced
 * among 2 trainers has the same bits as one averaged by a server. (The seed
 * divides each gradient by N before its allreduce; scaling the sum instead
 * is the same mean and keeps the two paths equal.)
 *
 * Threads: hook_ready, hook_wait and hook_reset are called by the training
 * thread; a hook may move the bytes on threads of its own (rpc: the comm
 * thread; collectives: one thread per group), and owns a bucket's data
 * from hook_ready until hook_wait has returned for it.
 */
#ifndef PSBENCH_HOOK_H
#define PSBENCH_HOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/clock.h"
#include "shared/devmem.h"
#include "shared/devspec.h"
#include "shared/half.h"
#include "shared/metrics.h"
#include "shared/shm.h"
#include "shared/jobconf.h"

#include <jansson.h>

/* Bucket ids are 0..HOOK_MAX_BUCKETS-1. */
#define HOOK_MAX_BUCKETS 4096

/* One parameter's gradient in a dense bucket, as PyTorch's
 * GradBucket.gradients() hands it to a hook: `offset` floats from the
 * bucket's first, viewed as a rows x cols matrix, PyTorch's
 * tensor.view(shape[0], -1) (a weight [out x in] is out x in, a bias [n]
 * n x 1). What PowerSGD compresses layer by layer. */
typedef struct hook_tensor {
    uint64_t offset, rows, cols;
} hook_tensor;

typedef struct hook_bucket {
    uint32_t id;   /* 0.. in the order backward finishes them */
    bool sparse;
    uint64_t batch; /* set by hook_ready */
    /* dense: count floats, replaced in place by their mean; in host
     * memory (data), or — handed to a hook that takes them
     * (hook.device_dense) by a trainer computing on a GPU — in that GPU's
     * memory (device_data, written by work that is complete when the
     * bucket is handed over; a type of its own: a hook cannot dereference
     * it on the host). Exactly one of the two is set (bucket_place.h). */
    float *data;
    devf32 device_data;
    uint64_t count;
    /* dense: its parameters' gradients, ntensors of them in memory order
     * (they tile the count floats); set with the layout */
    const hook_tensor *tensors;
    uint32_t ntensors;
    /* dense: PyTorch's bucket holds these tensors the other way round
     * (bucket.gradients() and its flat buffer list them last first): a
     * rebuilt bucket, whose parameters come in the order backward
     * finished them. Where a hook's arithmetic depends on that order
     * (PowerSGD's draws, the batched hook's matrix), it follows PyTorch's. */
    bool ddp_reversed;
    /* the last bucket of its layout (PyTorch's GradBucket.is_last()): the
     * step's buckets are all handed over once it is */
    bool last;
    /* sparse: a table of rows x cols; nnz (row index, row) pairs in, the
     * coalesced mean out (shared/sparse.h's layout: nnz int64 indices, then
     * the rows), owned by the bucket and grown by the hook */
    uint64_t rows, cols;
    const int64_t *idx; /* nnz indices, unique */
    const float *vals;  /* nnz * cols */
    uint64_t nnz;
    uint8_t *result;
    uint64_t result_cap, result_nnz;
    /* when the bucket was handed over, and when its mean was there */
    uint64_t t_ready_ns, t_done_ns;
    /* the server's rank it went to (rpc: bucket mod the servers), -1:
     * none (a collective); set by hook_ready, for the trace */
    int32_t server;
    /* Its metric: the hook's stats for this kind of bucket, set when the
     * hook takes it (NULL: none). hook_wait adds the host's sample,
     * t_ready_ns to t_done_ns, unless gpu_timed: a trainer computing on a
     * GPU sets it before handing the bucket over and times the bucket
     * itself, between marks on its stream (the seed's cuda=True). */
    stats *metric;
    bool gpu_timed;
} hook_bucket;

typedef struct hook hook;

typedef struct hook_ops {
    /* Hand over a finished bucket (its batch number set). Never fails here:
     * a transport failure is reported by the next wait. */
    void (*ready)(hook *h, hook_bucket *b);
    /* Wait until every bucket of bs (each handed over since the last wait)
     * holds its mean (hook_wait records their metrics). 0, or -1 with err. */
    int (*wait)(hook *h, hook_bucket **bs, uint32_t n, char *err, size_t errlen);
    /* Between passes (the master's reset). May be NULL. */
    void (*reset)(hook *h);
    /* Add the bytes moved so far (in: results and means received, out:
     * gradients sent), for the master's payload counters. Read by the
     * training thread while the hook's threads write: the counts are
     * monotonic and only ever reported, so a torn read is off by a batch at
     * most. May be NULL. */
    void (*bytes)(const hook *h, uint64_t *in, uint64_t *out);
    /* Its connections to servers (their links: workload_links), or NULL
     * (a hook that talks to none). May be NULL. */
    const struct client *(*client)(const hook *h);
    /* Memory dense buckets leave from without a copy (hook_send_memory).
     * May be NULL: none. */
    void *(*send_memory)(hook *h, size_t bytes);
    /* What the hook adds to the pass report (results.json's trainer
     * entry): a new object whose keys are merged into it, or NULL (nothing;
     * may be NULL). Called by the training thread after the pass. */
    json_t *(*report)(hook *h);
    void (*destroy)(hook *h);
} hook_ops;

struct hook {
    const hook_ops *ops;
    const char *name; /* "rpc_hook", ... */
    /* Dense buckets may be handed over in device memory (device_data):
     * the hook reduces them there (allreduce on an NCCL group). Sparse
     * buckets are always host memory. */
    bool device_dense;
};

static inline void hook_ready(hook *h, hook_bucket *b, uint64_t batch)
{
    b->batch = batch;
    b->server = -1;
    h->ops->ready(h, b);
}
/* The one place a bucket's host-timed metric is recorded. */
static inline int hook_wait(hook *h, hook_bucket **bs, uint32_t n, char *err, size_t errlen)
{
    if (h->ops->wait(h, bs, n, err, errlen) < 0)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        if (bs[i]->metric && !bs[i]->gpu_timed)
            metrics_add(bs[i]->metric, clock_ms(bs[i]->t_ready_ns, bs[i]->t_done_ns));
    return 0;
}
static inline void hook_reset(hook *h)
{
    if (h && h->ops->reset)
        h->ops->reset(h);
}
static inline void hook_bytes(const hook *h, uint64_t *in, uint64_t *out)
{
    if (h && h->ops->bytes)
        h->ops->bytes(h, in, out);
}
static inline const struct client *hook_client(const hook *h)
{
    return h && h->ops->client ? h->ops->client(h) : NULL;
}
/* `bytes` of host memory (page-aligned) from which a dense bucket is sent
 * without a copy — rpc_hook whose links share memory with their servers:
 * its client's segment, where a push is named by offset (else each is
 * first copied there, docs/protocol.md) — for the gradients to be computed
 * in. NULL: the hook has none (TCP, collectives: they send from anywhere at
 * the same cost), or no room left (it says why, once, in the log). The
 * memory is the hook's, valid until hook_free; ask before the first bucket
 * is handed over (the hook's threads use the same memory afterwards). */
static inline void *hook_send_memory(hook *h, size_t bytes)
{
    return h && h->ops->send_memory ? h->ops->send_memory(h, bytes) : NULL;
}
static inline json_t *hook_report(hook *h)
{
    return h && h->ops->report ? h->ops->report(h) : NULL;
}
static inline void hook_free(hook *h)
{
    if (h)
        h->ops->destroy(h);
}

/* What a hook is made from (hooks_new, hooks.h): the run driver fills it
 * from the master's assignment. */
struct coll_store;
struct gpushare;
typedef struct hook_setup {
    const char *hook;      /* rpc_hook, allreduce_hook, sparse_rpc_hook, hybrid_hook */
    const char *backend;   /* the collectives' backend: gloo, nccl or multi (gloo on the CPU) */
    /* The trainer's device, placed (compute_place): a GPU (cuda:N, NCCL's
     * device), the fake GPU of tests (fake-cuda: NCCL is its stand-in,
     * coll_nccl_fake_new), or the cpu. */
    device_spec device;
    bool sparse_model;     /* the model has a sparse bucket (its metrics exist) */
    uint32_t rank, ntrainer; /* this trainer in the group of all trainers */
    /* rpc */
    const char *servers;   /* "HOST:PORT,..." or NULL/"" (no servers) */
    const char *token;
    double connect_timeout_s;
    double rpc_timeout_s;  /* every wait, and every collective */
    psb_transport transport; /* to the servers */
    /* NULL, or the trainer's GPU and its gradients' shared memory: rpc
     * takes dense buckets in GPU memory where every server it talks to
     * exchanges them by CUDA IPC (gpushare.h). */
    const struct gpushare *gpu;
    /* collectives */
    const struct coll_store *store; /* rendezvous (coll.h) */
    const char *store_prefix; /* keys of this job's groups start with it */
    const char *coll_host;  /* where this trainer's Gloo transport listens (NULL: host name) */
    /* --compress: HALF_FP32 (none, the zero value), HALF_FP16 or HALF_BF16:
     * allreduce_hook's dense buckets as PyTorch's fp16/bf16_compress_hook */
    half_type compress;
    /* --compress powersgd (compress then HALF_FP32): allreduce_hook as
     * PyTorch's powerSGD_hook / batched_powerSGD_hook with this state's
     * parameters (trainer/powersgd.h); NULL: none */
    const psgd_conf *powersgd;
    metrics *m;
    /* The trainer's trace (NULL: none): rpc's comm thread records its
     * frames there (ttrace.h). */
    struct ttrace *trace;
} hook_setup;

/* Make a sparse bucket's result room for nnz rows. 0, or -1 (memory). */
int hook_bucket_reserve(hook_bucket *b, uint64_t nnz);
/* The result's indices and rows. */
static inline const int64_t *hook_result_idx(const hook_bucket *b)
{
    return (const int64_t *)(const void *)b->result;
}
static inline const float *hook_result_vals(const hook_bucket *b)
{
    return (const float *)(const void *)(b->result + b->result_nnz * 8);
}
void hook_bucket_release(hook_bucket *b);

#endif
