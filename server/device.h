/* device.h — where a server's arithmetic runs: the bottom layer.
 *
 * A device is given only what it needs: buffers, element counts, scale
 * factors, a completion callback. It knows nothing of connections, futures
 * or kinds. Two sorts of work:
 *
 *  - Streaming folds (device_fold): a chunk of little-endian float32 bytes
 *    straight from a socket buffer into an accumulator. The source is valid
 *    only during the call, so a device consumes it before returning (the
 *    CPU does the arithmetic; a CUDA device stages the bytes in pinned
 *    memory and enqueues the copy and the sum on its stream).
 *
 *  - Jobs (device_submit): the work that finishes a future — the mean of
 *    stored pushes, a sparse result, an SGD step, or a plain barrier — and
 *    the embedding kind's lookups (gather) and updates (scatter SGD). A job
 *    completes asynchronously: its `done` callback runs later, always on
 *    the reactor thread, in submission order. The `cpu` device runs the job
 *    and calls `done` inline; the `test` device runs it on a worker thread
 *    after a random delay and wakes the reactor (an eventfd on its
 *    event_base); a CUDA device would enqueue it on a stream and wake the
 *    reactor from a host callback.
 *
 * Until `done` has run, the job's buffers belong to the device: the caller
 * must not read, write or free them. device_drain waits for every job
 * submitted so far and runs their `done` callbacks before it returns: reset,
 * shutdown and the end of a job go through it so that nothing is freed under
 * work still in flight.
 */
#ifndef PSBENCH_DEVICE_H
#define PSBENCH_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/reduce.h"

struct event_base;

typedef enum device_fold_op {
    FOLD_COPY = 0,   /* acc = x */
    FOLD_ADD,        /* acc += x */
    FOLD_ADD_SCALE,  /* acc = (acc + x) * s */
    FOLD_COPY_SCALE, /* acc = x * s */
} device_fold_op;

typedef enum device_job_op {
    JOB_BARRIER = 0, /* nothing to compute: completes after the jobs before it */
    JOB_SUM_SCALE,   /* dst = (srcs[0] + srcs[1] + ...) * scale, in source order */
    JOB_SPARSE_EMIT, /* out = coalesced rows of acc, values * scale */
    JOB_SGD,         /* one SGD-with-momentum step from the mean of gradients */
    JOB_GATHER,      /* EmbeddingBag(mode=sum): each bag's rows of a table, summed */
    JOB_SCATTER_SGD, /* SGD on the rows a lookup named, from each bag's gradient */
} device_job_op;

typedef struct device_job {
    device_job_op op;
    union {
        struct {
            float *dst;             /* may be srcs[0] */
            const float *const *srcs;
            uint32_t nsrc;
            size_t n;
            float scale;
        } sum;
        struct {
            const sparse_acc *acc;
            uint8_t *out; /* sparse_acc_result_size(acc) bytes */
            float scale;
            int status;   /* set by the device: 0, or -1 out of memory */
        } emit;
        struct {
            float *param, *momentum_buf;
            const float *const *srcs; /* the round's gradients, summed in this order */
            uint32_t nsrc;
            size_t n;
            float scale; /* the mean's scale (shared/mean.h) */
            float lr, momentum;
            bool first;  /* the first step: momentum_buf = g */
            float *out;  /* NULL, or n floats: a copy of param after the step */
        } sgd;
        /* Embedding bags (reduce.h), for JOB_GATHER and JOB_SCATTER_SGD:
         * indices and offsets already checked against the table; bag b is
         * idx[off[b] .. off[b+1]), the last one ends at nnz. */
        struct {
            float *table;       /* rows x cols, row-major (only read by a gather) */
            size_t cols;
            const int64_t *idx, *off;
            size_t nnz, bags;
            float *out;         /* gather: bags x cols, the bags' sums */
            const float *grad;  /* scatter: bags x cols, the gradient of each bag's row */
            float lr;           /* scatter */
        } bags;
    } u;
    /* Runs on the reactor thread once the work is complete. */
    void (*done)(struct device_job *j);
    void *arg;
    struct device_job *next; /* the device's queue */
} device_job;

typedef struct device device;

typedef struct device_ops {
    const char *name;
    void (*fold)(device *d, device_fold_op op, float *acc, const uint8_t *src, size_t n, float s);
    void (*submit)(device *d, device_job *j);
    void (*drain)(device *d);
    void (*destroy)(device *d);
} device_ops;

struct device {
    const device_ops *ops;
    /* Called on the reactor thread after a batch of completions delivered
     * from outside the reactor's own call stack (so the owner can flush the
     * output they queued). NULL: nothing. */
    void (*after)(void *ctx);
    void *after_ctx;
};

/* Names the --device flag takes: "cpu", and "test" (tests only: jobs
 * complete on a worker thread after a random delay of up to
 * $PSBENCH_TEST_DEVICE_MAX_DELAY_US microseconds, default 2000). Returns
 * NULL with a reason in err for any other name. */
device *device_new(const char *name, struct event_base *base, char *err, size_t errlen);

device *device_cpu_new(void);
device *device_test_new(struct event_base *base, char *err, size_t errlen);

/* The CPU implementations every host-memory device shares: a fold, and a
 * job's arithmetic (no completion). */
void device_fold_run(device_fold_op op, float *acc, const uint8_t *src, size_t n, float s);
void device_job_run(device_job *j);

static inline void device_fold(device *d, device_fold_op op, float *acc, const uint8_t *src, size_t n,
                               float s)
{
    d->ops->fold(d, op, acc, src, n, s);
}
static inline void device_submit(device *d, device_job *j) { d->ops->submit(d, j); }
static inline void device_drain(device *d) { d->ops->drain(d); }
static inline void device_destroy(device *d)
{
    if (d)
        d->ops->destroy(d);
}

#endif
