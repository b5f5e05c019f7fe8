/* device_cpu.c — the `cpu` device: arithmetic on the reactor's own thread.
 *
 * Folds and jobs run inline with the loops of reduce.c; a job's `done` is
 * called before device_submit returns, so nothing is ever in flight and
 * drain has nothing to wait for. device_job_run is also what the test
 * device runs on its worker thread: one implementation of the arithmetic
 * for every host-memory device.
 */
#include "server/device.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void device_job_run(device_job *j)
{
    switch (j->op) {
    case JOB_BARRIER:
        break;
    case JOB_SUM_SCALE: {
        assert(j->u.sum.nsrc >= 1);
        float *dst = j->u.sum.dst;
        size_t n = j->u.sum.n;
        if (dst != j->u.sum.srcs[0])
            memcpy(dst, j->u.sum.srcs[0], n * sizeof(float));
        for (uint32_t i = 1; i < j->u.sum.nsrc; i++)
            reduce_add_f32(dst, (const uint8_t *)j->u.sum.srcs[i], n);
        reduce_scale_f32(dst, n, j->u.sum.scale);
        break;
    }
    case JOB_SPARSE_EMIT:
        j->u.emit.status = sparse_acc_emit(j->u.emit.acc, j->u.emit.scale, j->u.emit.out);
        break;
    case JOB_SGD:
        reduce_sgd_momentum_f32(j->u.sgd.param, j->u.sgd.momentum_buf, j->u.sgd.srcs, j->u.sgd.nsrc, j->u.sgd.n,
                                j->u.sgd.scale, j->u.sgd.lr, j->u.sgd.momentum, j->u.sgd.first, j->u.sgd.out);
        break;
    case JOB_GATHER:
        reduce_gather_sum_f32(j->u.bags.out, j->u.bags.table, j->u.bags.cols, j->u.bags.idx, j->u.bags.nnz,
                              j->u.bags.off, j->u.bags.bags);
        break;
    case JOB_SCATTER_SGD:
        reduce_scatter_sgd_f32(j->u.bags.table, j->u.bags.cols, j->u.bags.idx, j->u.bags.nnz, j->u.bags.off,
                               j->u.bags.bags, j->u.bags.grad, j->u.bags.lr);
        break;
    }
}

void device_fold_run(device_fold_op op, float *acc, const uint8_t *src, size_t n, float s)
{
    switch (op) {
    case FOLD_COPY:
        reduce_copy_f32(acc, src, n);
        break;
    case FOLD_ADD:
        reduce_add_f32(acc, src, n);
        break;
    case FOLD_ADD_SCALE:
        reduce_add_scale_f32(acc, src, n, s);
        break;
    case FOLD_COPY_SCALE:
        reduce_copy_scale_f32(acc, src, n, s);
        break;
    }
}

static void cpu_fold(device *d, device_fold_op op, float *acc, const uint8_t *src, size_t n, float s)
{
    (void)d;
    device_fold_run(op, acc, src, n, s);
}

static void cpu_submit(device *d, device_job *j)
{
    (void)d;
    device_job_run(j);
    j->done(j);
}

static void cpu_drain(device *d) { (void)d; }

static void cpu_destroy(device *d) { free(d); }

static const device_ops cpu_ops = {
    .name = "cpu",
    .fold = cpu_fold,
    .submit = cpu_submit,
    .drain = cpu_drain,
    .destroy = cpu_destroy,
};

device *device_cpu_new(void)
{
    device *d = calloc(1, sizeof *d);
    if (d)
        d->ops = &cpu_ops;
    return d;
}

device *device_new(const char *name, struct event_base *base, char *err, size_t errlen)
{
    /* Decide the fold loops' width now, before any other thread may fold. */
    reduce_use_wide(-1);
    device *d = NULL;
    if (strcmp(name, "cpu") == 0)
        d = device_cpu_new();
    else if (strcmp(name, "test") == 0)
        return device_test_new(base, err, errlen);
    else {
        snprintf(err, errlen, "device '%s' is not in this build (cpu, or test for tests)", name);
        return NULL;
    }
    if (!d)
        snprintf(err, errlen, "out of memory");
    return d;
}
