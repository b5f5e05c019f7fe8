/* hook_allreduce.c — buckets averaged among the trainers by collectives on
 * one group (coll.h): allreduce_hook, and the allreduced half of
 * sparse_rpc_hook and hybrid_hook.
 *
 * The training thread queues each finished bucket; this hook's own thread
 * runs the collectives in queue order (every member queues the same buckets
 * in the same order: backward finishes them in the same order everywhere),
 * so buckets are reduced while the rest of backward runs.
 *   dense:  allreduce (sum) in place, then times mean_scale(N); on an NCCL
 *           group a CUDA trainer hands them over in its GPU's memory
 *           (hook.device_dense) and both run there
 *           (coll_allreduce_mean_f32_device);
 *           with --compress fp16|bf16, as PyTorch's
 *           fp16_compress_hook / bf16_compress_hook (default_hooks.py,
 *           _compress_hook): the bucket cast to the narrow type and divided
 *           by the group's size in it (half_to_*_div), allreduced in the
 *           narrow type (coll_allreduce_sum_half), cast back into the fp32
 *           bucket; half the bytes on the wire; on an NCCL group the
 *           three run on the GPU (coll_allreduce_compress_device), the
 *           division as ATen's CUDA kernel makes it (times 1/N);
 *           with --compress powersgd (host buckets: on NCCL a CUDA
 *           trainer's are staged through pinned host memory), as
 *           PyTorch's powerSGD_hook / batched_powerSGD_hook (powersgd.h:
 *           plain fp32 allreduces until start_powerSGD_iter, then low-rank
 *           P and Q factors), its state reset between passes (hook_reset);
 *   sparse: as PyTorch's Gloo process group does a sparse allreduce: every
 *           member's nnz is gathered, then every member's indices and rows
 *           (one allgatherv of [indices | rows]), then the rows are coalesced
 *           in member order into the bucket's result with the values times
 *           mean_scale(N) (shared/sparse.h) — what a server returns.
 * A failed collective (a peer lost, --rpc-timeout) fails the hook: every
 * later wait returns its reason.
 */
#include "trainer/hook_impl.h"
#include "trainer/powersgd.h"
#include "shared/clock.h"
#include "shared/grow.h"
#include "shared/mean.h"
#include "shared/sparse.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ar_hook {
    hook base;
    coll *group;
    uint32_t size;
    double timeout_s;
    half_type compress; /* HALF_FP32: none */
    psgd_conf psgd_c;   /* --compress powersgd (psgd non-NULL) */
    psgd *psgd;         /* the collective thread's; reset under mu */
    stats *m_dense, *m_sparse;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* mu: the queue, the done marks, the failure */
    hook_bucket *queue[HOOK_MAX_BUCKETS];
    uint32_t qhead, qlen;
    bool done[HOOK_MAX_BUCKETS];
    bool stop, failed;
    char err[512];
    /* the collective thread's own */
    uint64_t *counts; /* per member: rows */
    uint64_t *bytes;  /* per member: bytes of [indices | rows] */
    uint8_t *mine;    /* this member's [indices | rows] */
    uint64_t mine_cap;
    uint8_t *gather;  /* the gathered [indices | rows] */
    uint64_t gather_cap;
    uint32_t *slots;
    uint64_t slots_cap;
    sparse_acc acc;
    uint16_t *narrow; /* a compressed dense bucket */
    uint64_t narrow_cap;
    /* mu: bytes given to and got from the group */
    uint64_t bytes_in, bytes_out;
    psgd_stats pstats; /* mu: the PowerSGD state's, after the last bucket */
} ar_hook;

/* _compress_hook: cast and divide by the world size in that order (the
 * divide in fp32 on the narrow value, rounded back: ATen's CPU kernel),
 * sum in the narrow type, cast back. The world size is the group's, as
 * PyTorch's process group's size. */
static int ar_dense_narrow(ar_hook *a, hook_bucket *b, uint64_t *in, uint64_t *out, char *err, size_t errlen)
{
    *out = *in = b->count * 2;
    if (!devf32_is_none(b->device_data)) /* all three on the GPU (NCCL): the division as CUDA's */
        return coll_allreduce_compress_device(a->group, b->device_data, (size_t)b->count, a->compress, err, errlen);
    if (grow_to((void **)&a->narrow, &a->narrow_cap, b->count, sizeof *a->narrow) < 0) {
        snprintf(err, errlen, "out of memory compressing bucket %u", b->id);
        return -1;
    }
    size_t n = (size_t)b->count;
    bool bf = a->compress == HALF_BF16;
    (bf ? half_to_bf16_div : half_to_fp16_div)(a->narrow, b->data, n, (float)a->size);
    if (coll_allreduce_sum_half(a->group, a->narrow, n, a->compress, err, errlen) < 0)
        return -1;
    (bf ? half_from_bf16 : half_from_fp16)(b->data, a->narrow, n);
    return 0;
}

/* PowerSGD's sums: the group's fp32 allreduce. */
static int ar_psgd_sum(void *ctx, float *x, size_t n, char *err, size_t errlen)
{
    return coll_allreduce_sum_f32(((ar_hook *)ctx)->group, x, n, err, errlen);
}

static int ar_dense(ar_hook *a, hook_bucket *b, uint64_t *in, uint64_t *out, char *err, size_t errlen)
{
    if (a->psgd) {
        assert(devf32_is_none(b->device_data)); /* refused at hook_allreduce_new */
        if (psgd_reduce(a->psgd, b, ar_psgd_sum, a, out, err, errlen) < 0)
            return -1;
        *in = *out;
        return 0;
    }
    if (a->compress != HALF_FP32)
        return ar_dense_narrow(a, b, in, out, err, errlen);
    *out = *in = b->count * 4;
    if (!devf32_is_none(b->device_data)) /* the sum and its scale on the GPU, in place (NCCL) */
        return coll_allreduce_mean_f32_device(a->group, b->device_data, (size_t)b->count, mean_scale(a->size), err,
                                              errlen);
    if (coll_allreduce_sum_f32(a->group, b->data, (size_t)b->count, err, errlen) < 0)
        return -1;
    if (a->size > 1) {
        float s = mean_scale(a->size);
        for (uint64_t i = 0; i < b->count; i++)
            b->data[i] *= s;
    }
    return 0;
}

static int ar_sparse(ar_hook *a, hook_bucket *b, uint64_t *in, uint64_t *out, char *err, size_t errlen)
{
    uint64_t row_bytes = 8 + 4 * b->cols;
    uint64_t mine = b->nnz;
    if (coll_allgather(a->group, &mine, sizeof mine, a->counts, err, errlen) < 0)
        return -1;
    uint64_t total = 0;
    for (uint32_t r = 0; r < a->size; r++) {
        if (a->counts[r] > b->rows) {
            snprintf(err, errlen, "sparse allreduce of bucket %u: member %u sent %" PRIu64 " rows of a %" PRIu64
                     "-row table", b->id, r, a->counts[r], b->rows);
            return -1;
        }
        total += a->counts[r];
    }
    /* Each member contributes its indices then its rows, contiguous. */
    if (grow_to((void **)&a->mine, &a->mine_cap, mine * row_bytes, 1) < 0 ||
        grow_to((void **)&a->gather, &a->gather_cap, total * row_bytes, 1) < 0) {
        snprintf(err, errlen, "out of memory gathering sparse bucket %u", b->id);
        return -1;
    }
    memcpy(a->mine, b->idx, mine * 8);
    memcpy(a->mine + mine * 8, b->vals, mine * b->cols * 4);
    for (uint32_t r = 0; r < a->size; r++)
        a->bytes[r] = a->counts[r] * row_bytes;
    if (coll_allgatherv(a->group, a->mine, mine * row_bytes, a->bytes, a->gather, err, errlen) < 0)
        return -1;
    /* Coalesce in member order. */
    sparse_acc_reset(&a->acc, b->rows, b->cols);
    uint64_t most = 0;
    for (uint32_t r = 0; r < a->size; r++)
        most = a->counts[r] > most ? a->counts[r] : most;
    if (grow_to((void **)&a->slots, &a->slots_cap, most, sizeof *a->slots) < 0) {
        snprintf(err, errlen, "out of memory coalescing sparse bucket %u", b->id);
        return -1;
    }
    const uint8_t *p = a->gather;
    for (uint32_t r = 0; r < a->size; r++) {
        uint64_t n = a->counts[r];
        int64_t bad = 0;
        int m = sparse_acc_map(&a->acc, p, n, a->slots, &bad);
        if (m == -1) {
            snprintf(err, errlen, "sparse allreduce of bucket %u: member %u sent row %" PRId64 " of a %" PRIu64
                     "-row table", b->id, r, bad, b->rows);
            return -1;
        }
        if (m < 0) {
            snprintf(err, errlen, "out of memory coalescing sparse bucket %u", b->id);
            return -1;
        }
        sparse_acc_add(&a->acc, a->slots, 0, p + n * 8, (size_t)(n * b->cols));
        p += n * row_bytes;
    }
    uint64_t nnz = a->acc.nslots;
    if (hook_bucket_reserve(b, nnz) < 0 || sparse_acc_emit(&a->acc, mean_scale(a->size), b->result) < 0) {
        snprintf(err, errlen, "out of memory for the mean of sparse bucket %u", b->id);
        return -1;
    }
    b->result_nnz = nnz;
    *out = mine * row_bytes;
    *in = total * row_bytes;
    return 0;
}

static void *ar_main(void *arg)
{
    ar_hook *a = arg;
    char err[512];
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && !a->failed && a->qlen == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop || a->failed)
            break;
        hook_bucket *b = a->queue[a->qhead];
        a->qhead = (a->qhead + 1) % HOOK_MAX_BUCKETS;
        a->qlen--;
        pthread_mutex_unlock(&a->mu);
        uint64_t in = 0, out = 0;
        int rc = b->sparse ? ar_sparse(a, b, &in, &out, err, sizeof err) : ar_dense(a, b, &in, &out, err, sizeof err);
        if (rc == 0 && b->sparse && b->last && a->psgd)
            psgd_step_done(a->psgd); /* PowerSGD's steps end with a sparse model's embedding bucket */
        b->t_done_ns = clock_now_ns();
        pthread_mutex_lock(&a->mu);
        a->bytes_in += in;
        a->bytes_out += out;
        if (a->psgd)
            psgd_get_stats(a->psgd, &a->pstats);
        if (rc < 0) {
            a->failed = true;
            snprintf(a->err, sizeof a->err, "%s", err);
        } else {
            a->done[b->id] = true;
        }
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void ar_ready(hook *h, hook_bucket *b)
{
    ar_hook *a = (ar_hook *)h;
    assert(b->id < HOOK_MAX_BUCKETS);
    b->t_ready_ns = clock_now_ns();
    b->metric = b->sparse ? a->m_sparse : a->m_dense;
    pthread_mutex_lock(&a->mu);
    assert(a->qlen < HOOK_MAX_BUCKETS);
    a->done[b->id] = false;
    a->queue[(a->qhead + a->qlen) % HOOK_MAX_BUCKETS] = b;
    a->qlen++;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static int ar_wait(hook *h, hook_bucket **bs, uint32_t n, char *err, size_t errlen)
{
    ar_hook *a = (ar_hook *)h;
    struct timespec deadline = clock_deadline(a->timeout_s);
    int rc = 0;
    pthread_mutex_lock(&a->mu);
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        while (!a->done[bs[i]->id] && !a->failed) {
            if (pthread_cond_timedwait(&a->cv, &a->mu, &deadline) == ETIMEDOUT) {
                snprintf(err, errlen, "timed out after %g s waiting for the %s of batch %" PRIu64 " bucket %u "
                         "(--rpc-timeout)", a->timeout_s, a->base.name, bs[i]->batch, bs[i]->id);
                rc = -1;
                break;
            }
        }
        if (rc == 0 && a->failed) {
            snprintf(err, errlen, "%s", a->err);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static void ar_bytes(const hook *h, uint64_t *in, uint64_t *out)
{
    ar_hook *a = (ar_hook *)(uintptr_t)h; /* the lock is not part of the value */
    pthread_mutex_lock(&a->mu);
    *in += a->bytes_in;
    *out += a->bytes_out;
    pthread_mutex_unlock(&a->mu);
}

/* Between passes: PyTorch's PowerSGDState is made with each DDP model, and
 * a pass starts from a fresh model. The collective thread is idle (every
 * bucket waited for); mu orders its last use before this. */
static void ar_reset(hook *h)
{
    ar_hook *a = (ar_hook *)h;
    pthread_mutex_lock(&a->mu);
    if (a->psgd) {
        psgd_reset(a->psgd);
        psgd_get_stats(a->psgd, &a->pstats);
    }
    pthread_mutex_unlock(&a->mu);
}

/* With PowerSGD: {"compress": "powersgd", "comm_hook": PyTorch's hook,
 * "powersgd": {its state's parameters, "plain_steps", "compressed_steps",
 * "bytes_per_step" (the mean over the pass's steps of the bytes
 * allreduced each way), "bytes_per_compressed_step" (null without one)}}.
 * With fp16 or bf16: {"compress", "comm_hook": PyTorch's
 * fp16_compress_hook / bf16_compress_hook}. Without compression: nothing. */
static json_t *ar_report(hook *h)
{
    ar_hook *a = (ar_hook *)h;
    if (!a->psgd && a->compress == HALF_FP32)
        return NULL;
    if (!a->psgd) {
        char ch[32];
        snprintf(ch, sizeof ch, "%s_compress_hook", half_type_name(a->compress));
        return json_pack("{s:s, s:s}", "compress", half_type_name(a->compress), "comm_hook", ch);
    }
    pthread_mutex_lock(&a->mu);
    psgd_stats st = a->pstats;
    pthread_mutex_unlock(&a->mu);
    json_t *p = psgd_conf_json(&a->psgd_c);
    uint64_t steps = st.plain_steps + st.compressed_steps;
    double per = steps ? (double)(st.plain_bytes + st.compressed_bytes) / (double)steps : 0;
    json_t *pc = st.compressed_steps ? json_real((double)st.compressed_bytes / (double)st.compressed_steps)
                                     : json_null();
    if (!p || json_object_set_new(p, "plain_steps", json_integer((json_int_t)st.plain_steps)) < 0 ||
        json_object_set_new(p, "compressed_steps", json_integer((json_int_t)st.compressed_steps)) < 0 ||
        json_object_set_new(p, "bytes_per_step", steps ? json_real(per) : json_null()) < 0 ||
        json_object_set_new(p, "bytes_per_compressed_step", pc) < 0) {
        json_decref(p);
        return NULL;
    }
    return json_pack("{s:s, s:s, s:o}", "compress", "powersgd", "comm_hook", psgd_hook_name(&a->psgd_c), "powersgd",
                     p);
}

static void ar_destroy(hook *h)
{
    ar_hook *a = (ar_hook *)h;
    if (a->started) {
        /* A collective in flight ends within the group's timeout. */
        pthread_mutex_lock(&a->mu);
        a->stop = true;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->th, NULL);
    }
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    coll_free(a->group);
    sparse_acc_free(&a->acc);
    free(a->counts);
    free(a->bytes);
    free(a->mine);
    free(a->gather);
    free(a->slots);
    free(a->narrow);
    psgd_free(a->psgd);
    free(a);
}

static const hook_ops ar_ops = {
    .ready = ar_ready,
    .wait = ar_wait,
    .bytes = ar_bytes,
    .reset = ar_reset,
    .report = ar_report,
    .destroy = ar_destroy,
};

hook *hook_allreduce_new(const char *name, coll *group, half_type compress, const psgd_conf *powersgd,
                         double timeout_s, metrics *m, const char *dense_metric, const char *sparse_metric, char *err,
                         size_t errlen)
{
    assert(compress == HALF_FP32 || compress == HALF_FP16 || compress == HALF_BF16);
    assert(!powersgd || compress == HALF_FP32);
    if (compress != HALF_FP32 && !(coll_on_device(group) ? coll_has_half_device(group) : coll_has_half(group))) {
        snprintf(err, errlen,
                 "--compress %s: %s on %s does not compress; allreduce_hook compresses on gloo and nccl "
                 "(--backend gloo|nccl) or runs uncompressed (--compress none)",
                 half_type_name(compress), name, coll_backend(group));
        coll_free(group);
        return NULL;
    }
    ar_hook *a = calloc(1, sizeof *a);
    if (!a) {
        coll_free(group);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->base.ops = &ar_ops;
    a->base.name = name;
    /* NCCL: a CUDA trainer's buckets where they are; but PowerSGD factors
     * on the host (powersgd.h), so with it they come staged through pinned
     * host memory, and its P and Q sums are the group's host-buffer
     * allreduces (NCCL's staged through its device buffer). */
    a->base.device_dense = coll_on_device(group) && !powersgd;
    a->group = group;
    a->compress = compress;
    a->size = coll_size(group);
    if (powersgd) {
        a->psgd_c = *powersgd;
        if (!(a->psgd = psgd_new(powersgd, a->size))) {
            coll_free(group);
            free(a);
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        psgd_get_stats(a->psgd, &a->pstats);
    }
    a->timeout_s = timeout_s;
    a->m_dense = dense_metric ? metrics_get(m, dense_metric) : NULL;
    a->m_sparse = sparse_metric ? metrics_get(m, sparse_metric) : NULL;
    sparse_acc_init(&a->acc);
    pthread_mutex_init(&a->mu, NULL);
    clock_cond_init(&a->cv);
    a->counts = calloc(a->size, sizeof *a->counts);
    a->bytes = calloc(a->size, sizeof *a->bytes);
    int rc = !a->counts || !a->bytes ? ENOMEM : pthread_create(&a->th, NULL, ar_main, a);
    if (rc != 0) {
        /* EAGAIN: no memory for its stack (`ulimit -v`), or no thread left. */
        snprintf(err, errlen, "cannot start the %s thread: %s%s", name, strerror(rc),
                 rc == EAGAIN ? " (out of memory for its stack, or out of threads)" : "");
        ar_destroy(&a->base);
        return NULL;
    }
    a->started = true;
    return &a->base;
}
