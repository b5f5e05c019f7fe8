/* device_host.c — buffers, sparse accumulators and arithmetic of the
 * host-memory devices (see device_host.h). */
#include "server/device_host.h"
#include "server/reduce.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Handles kept for reuse: more than the buffers of a few rounds in flight
 * is never needed. */
#define DEVICE_HOST_KEEP 1024

void device_host_init(device_host *h, bufpool *pool)
{
    memset(h, 0, sizeof *h);
    h->pool = pool;
}

void device_host_free(device_host *h)
{
    while (h->spare) {
        devbuf *b = h->spare;
        h->spare = b->next;
        free(b);
    }
    h->nspare = 0;
}

devbuf *device_host_buf_new(device_host *h, size_t bytes)
{
    devbuf *b = h->spare;
    if (b) {
        h->spare = b->next;
        h->nspare--;
    } else if (!(b = malloc(sizeof *b))) {
        return NULL;
    }
    memset(b, 0, sizeof *b);
    if (!(b->host = bufpool_get(h->pool, bytes))) {
        free(b);
        return NULL;
    }
    b->bytes = bytes;
    return b;
}

psbuf *device_host_buf_take(device_host *h, devbuf *b)
{
    psbuf *host = b->host;
    b->host = NULL;
    if (h->nspare < DEVICE_HOST_KEEP) {
        b->next = h->spare;
        h->spare = b;
        h->nspare++;
    } else {
        free(b);
    }
    return host;
}

void device_host_buf_free(device_host *h, devbuf *b)
{
    psbuf_unref(device_host_buf_take(h, b));
}

devsparse *device_host_sparse_new(void)
{
    devsparse *s = calloc(1, sizeof *s);
    if (s)
        sparse_acc_init(&s->acc);
    return s;
}

void device_host_sparse_free(devsparse *s)
{
    sparse_acc_free(&s->acc);
    free(s);
}

static inline float *device_host_f32(devbuf *b) { return (float *)(void *)b->host->data; }

/* reduce_sgd_momentum_f32's view of a job's gradients. */
static const float *device_host_src(const void *ctx, uint32_t i)
{
    devbuf *const *srcs = ctx;
    return device_host_f32(srcs[i]);
}

/* Elements a slice of device_host_fold_narrow_out: 8 KiB of scratch. */
#define DEVICE_HOST_NARROW_SLICE 2048u

void device_host_fold_narrow_out(device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off, const uint8_t *src,
                                 size_t n, float s, half_type t)
{
    assert(op == FOLD_ADD_SCALE || op == FOLD_COPY_SCALE);
    assert(t == HALF_FP16 || t == HALF_BF16);
    assert((elem_off + n) * sizeof(float) <= acc->host->len && (elem_off + n) * 2 <= out->host->len);
    const float *a = (const float *)(const void *)acc->host->data + elem_off;
    uint16_t *o = (uint16_t *)(void *)out->host->data + elem_off;
    float tmp[DEVICE_HOST_NARROW_SLICE];
    while (n > 0) {
        size_t m = n < DEVICE_HOST_NARROW_SLICE ? n : DEVICE_HOST_NARROW_SLICE;
        half_widen(t, tmp, src, m);
        /* reduce.c's loops, element for element: one add, one multiply */
        if (op == FOLD_ADD_SCALE)
            for (size_t i = 0; i < m; i++)
                tmp[i] = (a[i] + tmp[i]) * s;
        else
            for (size_t i = 0; i < m; i++)
                tmp[i] = tmp[i] * s;
        half_narrow(t, o, tmp, m);
        a += m;
        o += m;
        src += m * 2;
        n -= m;
    }
}

void device_host_fold_narrow_pair(device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out, uint64_t elem_off,
                                  const uint8_t *src, size_t n, float s, half_type t)
{
    assert(op == FOLD_ADD || op == FOLD_ADD_SCALE);
    assert(t == HALF_FP16 || t == HALF_BF16);
    assert((elem_off + n) * 2 <= stash->host->len);
    const uint8_t *a = stash->host->data + elem_off * 2;
    /* half.h's pair folds: reduce.c's add (the stash's copy and the add
     * that would follow) and multiply, element for element, in one pass */
    if (op == FOLD_ADD) {
        assert((elem_off + n) * sizeof(float) <= acc->host->len);
        half_pair_sum(t, (float *)(void *)acc->host->data + elem_off, a, src, n);
    } else {
        assert((elem_off + n) * 2 <= out->host->len);
        half_pair_mean(t, (uint16_t *)(void *)out->host->data + elem_off, a, src, n, s);
    }
}

void device_host_job_run(device_job *j)
{
    switch (j->op) {
    case JOB_BARRIER:
        break;
    case JOB_SUM_SCALE: {
        assert(j->u.sum.nsrc >= 1);
        float *dst = device_host_f32(j->u.sum.dst);
        size_t n = j->u.sum.n;
        if (j->u.sum.dst != j->u.sum.srcs[0])
            memcpy(dst, j->u.sum.srcs[0]->host->data, n * sizeof(float));
        for (uint32_t i = 1; i < j->u.sum.nsrc; i++)
            reduce_add_f32(dst, j->u.sum.srcs[i]->host->data, n);
        reduce_scale_f32(dst, n, j->u.sum.scale);
        break;
    }
    case JOB_SPARSE_EMIT:
        assert(j->u.emit.out->host->len == sparse_acc_result_size(&j->u.emit.acc->acc));
        j->u.emit.status = sparse_acc_emit(&j->u.emit.acc->acc, j->u.emit.scale, j->u.emit.out->host->data);
        break;
    case JOB_SGD:
        reduce_sgd_momentum_f32(device_host_f32(j->u.sgd.param), device_host_f32(j->u.sgd.momentum_buf),
                                device_host_src, j->u.sgd.srcs, j->u.sgd.nsrc, j->u.sgd.n, j->u.sgd.scale,
                                j->u.sgd.lr, j->u.sgd.momentum, j->u.sgd.first,
                                j->u.sgd.out ? device_host_f32(j->u.sgd.out) : NULL);
        break;
    case JOB_GATHER:
        reduce_gather_sum_f32(j->u.bags.out ? device_host_f32(j->u.bags.out) : NULL,
                              device_host_f32(j->u.bags.table), j->u.bags.cols, j->u.bags.idx, j->u.bags.nnz,
                              j->u.bags.off, j->u.bags.bags);
        break;
    case JOB_SCATTER_SGD:
        reduce_scatter_sgd_f32(device_host_f32(j->u.bags.table), j->u.bags.cols, j->u.bags.idx, j->u.bags.nnz,
                               j->u.bags.off, j->u.bags.bags, j->u.bags.grad, j->u.bags.lr);
        break;
    case JOB_DENSE_SGD:
        assert(j->u.bags.gsum->host->len >= j->u.bags.rows * j->u.bags.cols * sizeof(float));
        assert(j->u.bags.table->host->len >= j->u.bags.rows * j->u.bags.cols * sizeof(float));
        reduce_dense_bag_sgd_f32(device_host_f32(j->u.bags.table), device_host_f32(j->u.bags.gsum), j->u.bags.rows,
                                 j->u.bags.cols, j->u.bags.idx, j->u.bags.nnz, j->u.bags.off, j->u.bags.bags,
                                 j->u.bags.grad, j->u.bags.lr);
        break;
    }
}

void device_host_job_bufs(const device_job *j, void (*fn)(devbuf *b, bool writes, void *arg), void *arg)
{
    switch (j->op) {
    case JOB_BARRIER:
        break;
    case JOB_SUM_SCALE:
        fn(j->u.sum.dst, true, arg);
        for (uint32_t i = 0; i < j->u.sum.nsrc; i++)
            fn(j->u.sum.srcs[i], false, arg);
        break;
    case JOB_SPARSE_EMIT:
        fn(j->u.emit.out, true, arg);
        break;
    case JOB_SGD:
        fn(j->u.sgd.param, true, arg);
        fn(j->u.sgd.momentum_buf, true, arg);
        for (uint32_t i = 0; i < j->u.sgd.nsrc; i++)
            fn(j->u.sgd.srcs[i], false, arg);
        if (j->u.sgd.out)
            fn(j->u.sgd.out, true, arg);
        break;
    case JOB_GATHER:
        fn(j->u.bags.table, false, arg);
        if (j->u.bags.out)
            fn(j->u.bags.out, true, arg);
        break;
    case JOB_SCATTER_SGD:
        fn(j->u.bags.table, true, arg);
        break;
    case JOB_DENSE_SGD:
        fn(j->u.bags.table, true, arg);
        fn(j->u.bags.gsum, true, arg);
        break;
    }
    if (j->to_host)
        fn(j->to_host, false, arg);
}

devsparse *device_host_job_sparse(const device_job *j)
{
    return j->op == JOB_SPARSE_EMIT ? j->u.emit.acc : NULL;
}
