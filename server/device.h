/* device.h — where a server's arithmetic runs, and the memory it runs on:
 * the bottom layer.
 *
 * A device owns memory and runs arithmetic on it. It knows nothing of
 * connections, futures or kinds. Kinds hold handles — devbuf (a buffer of
 * bytes) and devsparse (a sparse accumulator) — and never a pointer into
 * device memory: every byte that crosses between the host and a device
 * goes through the calls below, so that one kind runs unchanged on host
 * memory (cpu, test) and on a GPU's (cuda: a later issue; the notes marked
 * "cuda:" say how it implements each call without synchronising).
 *
 * Where memory lives:
 *
 *   device  devbuf storage    host image (psbuf)              recv area
 *   cpu     the host image    the storage itself               the storage
 *   test    the host image    the storage; read without a      a staging buffer of its
 *                             to-host job: the process aborts  own, copied in at recv_done
 *   cuda    device memory     pinned memory, valid once a      a pinned staging ring
 *                             to-host job has completed
 *
 * The host image is a psbuf (bufpool.h): what the transport queues to
 * sockets by reference. On cpu and test it is the very memory the
 * arithmetic wrote, so no copy is added anywhere on the CPU path.
 *
 * Order. Calls on one device are ordered as a stream is: a fold sees the
 * bytes of a recv_done before it, a job sees every fold and recv_done
 * before it, jobs run in submission order and their `done` callbacks run
 * in that order, always on the reactor thread, never inside another
 * device call except device_submit (the cpu device completes inline) and
 * device_drain.
 *
 * Ownership. From device_submit until its `done` has run, the devbufs and
 * the devsparse a job names belong to the device: no fold, recv, host read,
 * reset or free may name them (the test device aborts on it). Host arrays
 * a job names (a lookup's indices) must stay valid until `done`.
 *
 * Host-visible. A devbuf's host image holds its bytes only once a job
 * with `to_host` naming it has completed, and until something writes the
 * devbuf again (a fold, a recv, a job). device_buf_host and
 * device_buf_take_host are the only ways to reach a host image; the test
 * device aborts when either is called on an image that is not host-visible
 * — that is what proves, on any machine, that the kinds would work on a
 * GPU. The cpu device's images are always host-visible.
 */
#ifndef PSBENCH_DEVICE_H
#define PSBENCH_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "server/bufpool.h"
#include "shared/devspec.h"
#include "shared/half.h"

struct event_base;

/* A buffer the device owns (opaque). */
typedef struct devbuf devbuf;
/* A sparse accumulator the device owns (opaque): rows coalesced by index,
 * the protocol's rule (shared/sparse.h). */
typedef struct devsparse devsparse;
/* Another process's GPU memory and event, opened on this device (CUDA IPC:
 * a trainer on the same GPU; opaque). */
typedef struct devpeer devpeer;

/* An exported handle's bytes (CUDA's IPC handles are 64 bytes). */
#define DEVICE_IPC_HANDLE 64

/* Where a fold's floats come from: host bytes (any alignment; valid only
 * during the call), or a peer's GPU memory at a byte offset. */
typedef struct devsrc {
    const uint8_t *host;
    devpeer *peer;
    uint64_t at;
} devsrc;

/* Every recv area is at least this long, or reaches the buffer's end. */
#define DEVICE_AREA_MIN (64u * 1024u)

typedef enum device_fold_op {
    FOLD_COPY = 0,   /* acc = x */
    FOLD_ADD,        /* acc += x */
    FOLD_ADD_SCALE,  /* acc = (acc + x) * s */
    FOLD_COPY_SCALE, /* acc = x * s */
} device_fold_op;

typedef enum device_job_op {
    JOB_BARRIER = 0, /* nothing to compute (with to_host: a to-host copy) */
    JOB_SUM_SCALE,   /* dst = (srcs[0] + srcs[1] + ...) * scale, in source order */
    JOB_SPARSE_EMIT, /* out = coalesced rows of acc, values * scale */
    JOB_SGD,         /* one SGD-with-momentum step from the mean of gradients */
    JOB_GATHER,      /* EmbeddingBag(mode=sum): each bag's rows of a table, summed */
    JOB_SCATTER_SGD, /* SGD on the rows a lookup named, from each bag's gradient */
    JOB_DENSE_SGD,   /* SGD on the whole table from its dense gradient (EmbeddingBag sparse=False) */
} device_job_op;

typedef struct device_job {
    device_job_op op;
    union {
        /* cuda: one kernel over n floats reading nsrc buffers (their
         * device pointers uploaded with the job through the staging
         * ring), or nsrc - 1 in-place adds and a scale. */
        struct {
            devbuf *dst;           /* may be srcs[0] */
            devbuf *const *srcs;   /* an array the caller keeps until done */
            uint32_t nsrc;
            size_t n;              /* floats */
            float scale;
        } sum;
        /* Writes sparse_result_size(acc) bytes to out, and status: 0, or
         * -1 out of memory (then out's bytes are meaningless). cuda: the
         * accumulator lives on the host (see device_sparse_new), so the
         * emit runs on the host side, in order with the stream (a host
         * function), into out's host image, which is host-visible then. */
        struct {
            devsparse *acc;
            devbuf *out;
            float scale;
            int status;
        } emit;
        /* cuda: one kernel, element-wise, the fused loop of reduce.c. */
        struct {
            devbuf *param, *momentum_buf; /* n floats each */
            devbuf *const *srcs;          /* the round's gradients, summed in this order */
            uint32_t nsrc;
            size_t n;
            float scale;  /* the mean's scale (shared/mean.h) */
            float lr, momentum;
            bool first;   /* the first step: momentum_buf = g (never read before) */
            devbuf *out;  /* NULL, or n floats: a copy of param after the step */
        } sgd;
        /* Embedding bags (reduce.h), for JOB_GATHER, JOB_SCATTER_SGD and
         * JOB_DENSE_SGD: indices and offsets already checked against the
         * table; bag b is idx[off[b] .. off[b+1]), the last one ends at
         * nnz. idx, off and grad are host memory kept valid until done.
         * cuda: submit copies them into the pinned staging ring (a host
         * memcpy), enqueues the copy to the device and the kernel(s): for
         * a dense step, the gradient's zeroing, the bags' sums into it,
         * the step over the whole table. */
        struct {
            devbuf *table;          /* rows x cols, row-major (only read by a gather) */
            size_t cols;
            const int64_t *idx, *off;
            size_t nnz, bags;
            devbuf *out;            /* gather: bags x cols, the bags' sums */
            const float *grad;      /* scatter, dense: bags x cols, the gradient of each bag's row */
            float lr;               /* scatter, dense */
            devbuf *gsum;           /* dense: rows x cols floats, the table's gradient (scratch) */
            size_t rows;            /* dense: the table's rows */
        } bags;
    } u;
    /* NULL, or a devbuf whose host image must hold its bytes when `done`
     * runs (after the job's own work). cpu: nothing to do. test: marks it
     * host-visible. cuda: cudaMemcpyAsync(image <- device) on the stream,
     * before the host function that reports the job complete. */
    devbuf *to_host;
    /* Set by the device before `done` (whatever the caller left there):
     * error: NULL, or why the work did not happen — a GPU's error, naming
     *   the device (device-owned text, valid until the device is
     *   destroyed); the job's outputs are then meaningless.
     * gpu_ms: the GPU time of the job's work and its to-host copy, between
     *   two events recorded around them on the stream (cuda), or -1 where
     *   the device times nothing (cpu, test: the kind times on the host). */
    const char *error;
    double gpu_ms;
    /* Runs on the reactor thread once the work (and the to-host copy) is
     * complete. */
    void (*done)(struct device_job *j);
    void *arg;
    struct device_job *next; /* the device's queue */
    /* The trace (issue 42). The submitter's (device_job_for): what the job
     * is for — its future's batch and bucket, a call's batch — or, with
     * trace_batch negative, nothing a trace names (the device's own
     * barriers). Zero-filled means batch 0, bucket 0: every submitter sets
     * them. trace_t0_ns and trace_nvtx are the owner's trace hook's
     * (device.trace_job). */
    int64_t trace_batch, trace_bucket;
    uint64_t trace_t0_ns, trace_nvtx;
} device_job;

/* The trace's ids of j (TRACE_NONE, -1, where one does not apply; a batch
 * or bucket past INT64_MAX is none). */
static inline void device_job_for(device_job *j, uint64_t batch, uint64_t bucket)
{
    j->trace_batch = batch > INT64_MAX ? -1 : (int64_t)batch;
    j->trace_bucket = bucket > INT64_MAX ? -1 : (int64_t)bucket;
}

typedef struct device device;

/* A GPU device's peers (CUDA IPC): another process's GPU memory it folds
 * from and the memory it lends results in ("peers" below says what each
 * does; device_peer_* and device_share call them). */
typedef struct devpeer_ops {
    const char *(*gpu_id)(device *d);
    devpeer *(*open)(device *d, const uint8_t *mem, uint64_t bytes, const uint8_t *ev, char *err, size_t errlen);
    void (*close)(device *d, devpeer *p);
    void (*wait)(device *d, devpeer *p);
    void (*fold)(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p, uint64_t at, size_t n,
                 float s);
    /* A narrow push from a peer's memory (n 16-bit values at `at`): as
     * device_write (copy), device_fold_narrow, _out and _pair from host
     * bytes. */
    void (*copy)(device *d, devbuf *dst, uint64_t off, devpeer *p, uint64_t at, size_t bytes);
    void (*fold_narrow)(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p, uint64_t at, size_t n,
                        float s, half_type t);
    void (*fold_narrow_out)(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off, devpeer *p,
                            uint64_t at, size_t n, float s, half_type t);
    void (*fold_narrow_pair)(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out, uint64_t elem_off,
                             devpeer *p, uint64_t at, size_t n, float s, half_type t);
    int (*share)(device *d, uint64_t want, uint8_t *mem, uint64_t *bytes, char *err, size_t errlen);
    bool (*buf_lendable)(device *d, devbuf *b);
    psbuf *(*buf_lend)(device *d, devbuf *b);
} devpeer_ops;

typedef struct device_ops {
    const char *name;
    devbuf *(*buf_new)(device *d, size_t bytes);
    void (*buf_free)(device *d, devbuf *b);
    psbuf *(*buf_host)(device *d, devbuf *b);
    psbuf *(*buf_take_host)(device *d, devbuf *b);
    uint8_t *(*recv_area)(device *d, devbuf *dst, uint64_t off, size_t *max);
    void (*recv_done)(device *d, devbuf *dst, uint64_t off, size_t n);
    void (*fold)(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                 float s);
    /* NULL, or device_fold_narrow (below): a device that widens as it
     * folds (cuda: a kernel on its stream, half the bytes uploaded); the
     * others are handed widened floats (kind_fold_narrow). */
    void (*fold_narrow)(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                        float s, half_type t);
    /* NULL, or device_fold_narrow_out (below): cpu, test and cuda have it
     * (cuda: a kernel on its stream). */
    void (*fold_narrow_out)(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off,
                            const uint8_t *src, size_t n, float s, half_type t);
    /* NULL, or device_fold_narrow_pair (below); a device has both or
     * neither. */
    void (*fold_narrow_pair)(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out, uint64_t elem_off,
                             const uint8_t *src, size_t n, float s, half_type t);
    devsparse *(*sparse_new)(device *d);
    void (*sparse_free)(device *d, devsparse *s);
    void (*sparse_reset)(device *d, devsparse *s, uint64_t rows, uint64_t cols);
    int (*sparse_map)(device *d, devsparse *s, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad);
    void (*sparse_fold)(device *d, devsparse *s, const uint32_t *slots, uint64_t e0, const uint8_t *src, size_t n);
    uint64_t (*sparse_result_size)(device *d, devsparse *s);
    void (*submit)(device *d, device_job *j);
    void (*drain)(device *d);
    void (*destroy)(device *d);
    /* NULL, or: what computes, for the start line ("GPU 0: NVIDIA H100 80GB
     * HBM3, 79.1 GiB, sm_90"), and how many payload-sized allocations the
     * device made of its own (pinned images, device memory, staging) —
     * the cpu and test devices take theirs from the server's pool. */
    void (*describe)(device *d, char *buf, size_t len);
    uint64_t (*allocs)(device *d);
    /* Peers (CUDA IPC), an interface of their own (devpeer_ops, below):
     * NULL on devices that have none (cpu, test). */
    const struct devpeer_ops *peers;
} device_ops;

struct device {
    const device_ops *ops;
    /* Called on the reactor thread after a batch of completions delivered
     * from outside the reactor's own call stack (so the owner can flush the
     * output they queued). NULL: nothing. */
    void (*after)(void *ctx);
    void *after_ctx;
    /* The trace (issue 42): NULL, or called by a device whose jobs run
     * apart from the reactor (cuda, fake-cuda) for each job it submits
     * (done false: the owner may note when it began, in j->trace_t0_ns and
     * j->trace_nvtx) and, on the reactor thread, as its completion is
     * seen, before its `done` (done true: the owner records the job's
     * device_job span). The cpu device's jobs are the host's work inside
     * the caller's own span, the test device's delays invented: neither
     * calls it. */
    void (*trace_job)(void *ctx, device_job *j, bool done);
    void *trace_ctx;
};

/* The device --device names (shared/devspec.h): "cpu"; "cuda" or "cuda:N"
 * (GPU N, default 0; builds with CUDA); and, for tests, "test" (jobs complete on a
 * worker thread after a random delay of up to
 * $PSBENCH_TEST_DEVICE_MAX_DELAY_US microseconds, default 2000) and
 * "fake-cuda" (the cuda device on cugpu's fake GPU, every build:
 * $PSBENCH_FAKE_GPU_DELAY_US, default 200, delays each GPU operation at
 * random; $PSBENCH_FAKE_GPU_FAIL_AT=K fails the K-th;
 * $PSBENCH_FAKE_GPU_HOLD=FILE holds every operation while FILE exists:
 * cugpu_fake_from_env). `pool` is where host images come from (cpu, test;
 * it must outlive the device; the cuda device has a pinned pool of its
 * own). Returns NULL with a reason in err for a device this build or host
 * cannot make (cuda without CUDA, or no GPU; staged is the trainer's). */
device *device_new(device_spec dev, struct event_base *base, bufpool *pool, char *err, size_t errlen);

device *device_cpu_new(bufpool *pool);
device *device_test_new(struct event_base *base, bufpool *pool, char *err, size_t errlen);
/* The cuda device on `gpu` (server/cuda/device_cuda.c), which it owns from
 * here on (destroyed with the device, or at once on failure). */
struct cugpu;
device *device_cuda_new(struct event_base *base, struct cugpu *gpu, char *err, size_t errlen);

/* ---- buffers ------------------------------------------------------------
 *
 * device_buf_new: a buffer of `bytes` bytes (contents undefined), or NULL
 * when out of memory. cpu/test: a psbuf from the pool is both. cuda:
 * stream-ordered device memory (cudaMallocAsync, or a caching allocator of
 * its own) and a pinned host image from a pinned pool (bufpool with a
 * cudaHostAlloc allocator), taken at once or at the first to-host.
 *
 * device_buf_free: give it back (NULL: nothing). No job in flight may name
 * it (test: aborts). Its host image lives on while the transport holds
 * references to it. cuda: cudaFreeAsync on the stream.
 *
 * device_buf_host: b's host image, borrowed: only once host-visible (see
 * the top of the file; test: aborts otherwise). The caller only reads it.
 *
 * device_buf_take_host: free b and hand its host image over (a new
 * reference): how a result leaves a kind for the transport. The same rule
 * as device_buf_host. */
static inline devbuf *device_buf_new(device *d, size_t bytes) { return d->ops->buf_new(d, bytes); }
static inline void device_buf_free(device *d, devbuf *b)
{
    if (b)
        d->ops->buf_free(d, b);
}
static inline psbuf *device_buf_host(device *d, devbuf *b) { return d->ops->buf_host(d, b); }
static inline psbuf *device_buf_take_host(device *d, devbuf *b) { return d->ops->buf_take_host(d, b); }

/* ---- host bytes into a buffer ---------------------------------------------
 *
 * device_recv_area: where bytes bound for dst[off ..] may be written by the
 * host — received from a socket (the transport's direct receive, through a
 * kind's push_direct) or made by the host (a fill) — and, in *max, how many
 * (at least min(DEVICE_AREA_MIN, bytes - off), never past dst's end). Never
 * NULL. The area stays valid until the next call on this device; bytes
 * written there count only once device_recv_done says so (a receive that
 * got nothing just does not call it). cpu: dst itself. test: a staging
 * buffer of a random length. cuda: the free part of a pinned staging ring
 * (grown by another cudaHostAlloc'd chunk when full, never waited for).
 *
 * device_recv_done: the first n bytes of the area just given hold
 * dst[off .. off + n). cpu: nothing. test: copied into dst. cuda:
 * cudaMemcpyAsync(dst + off <- ring, n) on the stream, an event recorded
 * for the ring chunk's reuse, the ring's head moved on.
 *
 * device_write: both, for bytes already in host memory (src NULL: zeros). */
static inline uint8_t *device_recv_area(device *d, devbuf *dst, uint64_t off, size_t *max)
{
    return d->ops->recv_area(d, dst, off, max);
}
static inline void device_recv_done(device *d, devbuf *dst, uint64_t off, size_t n)
{
    d->ops->recv_done(d, dst, off, n);
}
static inline void device_write(device *d, devbuf *dst, uint64_t off, const void *src, size_t n)
{
    while (n > 0) {
        size_t max;
        uint8_t *area = device_recv_area(d, dst, off, &max);
        size_t take = max < n ? max : n;
        if (src) {
            memcpy(area, src, take);
            src = (const uint8_t *)src + take;
        } else {
            memset(area, 0, take);
        }
        device_recv_done(d, dst, off, take);
        off += take;
        n -= take;
    }
}

/* ---- folds -----------------------------------------------------------------
 *
 * device_fold: n little-endian float32 values from src (any alignment, a
 * socket's input buffer) folded into acc's floats [elem_off, elem_off + n)
 * by op. The source is valid only during the call. cpu/test: the loops of
 * reduce.c, inline. cuda: the bytes are copied into the staging ring (a
 * host memcpy) and a kernel reading them (mapped pinned memory, or after a
 * cudaMemcpyAsync) is enqueued; it never synchronises. */
static inline void device_fold(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src,
                               size_t n, float s)
{
    d->ops->fold(d, op, acc, elem_off, src, n, s);
}

/* device_fold_narrow_out: the last fold of a narrow push (f16 or bf16,
 * type t; docs/protocol.md "Narrow pushes") into elements whose mean it
 * completes, written narrow to out rather than back to acc: for i in
 * [elem_off, elem_off + n), out's 16-bit element i = narrow((acc[i] +
 * x) * s) with FOLD_ADD_SCALE, narrow(x * s) with FOLD_COPY_SCALE, x
 * being src's element widened (src: n little-endian 16-bit values, any
 * alignment, valid during the call); each product rounded to f32 as
 * device_fold's, then once to t (nearest even). acc is read, not
 * written. One pass where a fold and a narrowing of the mean would take
 * two over the accumulator. Only on devices that have it (kinds take
 * narrow pushes only there: the server asks device_takes_narrow). */
static inline bool device_takes_narrow(const device *d)
{
    assert((d->ops->fold_narrow_out != NULL) == (d->ops->fold_narrow_pair != NULL));
    /* a device with peers takes their narrow pushes too */
    assert(!d->ops->fold_narrow_out || !d->ops->peers ||
           (d->ops->peers->fold_narrow_out && d->ops->peers->fold_narrow_pair && d->ops->peers->fold_narrow &&
            d->ops->peers->copy));
    return d->ops->fold_narrow_out != NULL;
}
static inline void device_fold_narrow_out(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off,
                                          const uint8_t *src, size_t n, float s, half_type t)
{
    d->ops->fold_narrow_out(d, op, acc, out, elem_off, src, n, s, t);
}

/* device_fold_narrow_pair: a narrow push's fold into elements that only
 * one other push has reached so far, whose values were kept as they came
 * (stash: 16-bit values of type t, element i at byte 2i) rather than
 * widened into the accumulator: for i in [elem_off, elem_off + n), with a
 * = stash's element widened and x src's (n 16-bit values, any alignment,
 * valid during the call),
 *   FOLD_ADD        acc's float i = a + x (acc's first write there);
 *   FOLD_ADD_SCALE  out's 16-bit element i = narrow((a + x) * s), acc
 *                   neither read nor written (it may be NULL): the mean of
 *                   two pushes, complete;
 * each operation rounded as device_fold's, so the bits are those of a
 * FOLD_COPY of the widened stash followed by that fold (and, for the
 * second, device_fold_narrow_out). Why: the first push of a narrow future
 * is then received as it is (2 bytes an element, no widening), and with
 * two trainers no f32 accumulator is touched at all. */
static inline void device_fold_narrow_pair(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                           uint64_t elem_off, const uint8_t *src, size_t n, float s, half_type t)
{
    d->ops->fold_narrow_pair(d, op, stash, acc, out, elem_off, src, n, s, t);
}

/* device_fold_narrow: as device_fold of n f32 values, each x the widened
 * 16-bit src element (type t, any alignment, valid during the call) —
 * where the device has it (else kind_fold_narrow widens on the host). */
static inline bool device_has_fold_narrow(const device *d) { return d->ops->fold_narrow != NULL; }
static inline void device_fold_narrow(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src,
                                      size_t n, float s, half_type t)
{
    d->ops->fold_narrow(d, op, acc, elem_off, src, n, s, t);
}

/* The narrow folds and the stash's copy from either source, advanced by
 * skip bytes (a peer's memory: the devpeer_ops; host bytes: the calls
 * above, and device_write). */
static inline void device_fold_narrow_out_from(device *d, device_fold_op op, devbuf *acc, devbuf *out,
                                               uint64_t elem_off, devsrc src, uint64_t skip, size_t n, float s,
                                               half_type t)
{
    if (src.peer)
        d->ops->peers->fold_narrow_out(d, op, acc, out, elem_off, src.peer, src.at + skip, n, s, t);
    else
        device_fold_narrow_out(d, op, acc, out, elem_off, src.host + skip, n, s, t);
}
static inline void device_fold_narrow_pair_from(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                                uint64_t elem_off, devsrc src, uint64_t skip, size_t n, float s,
                                                half_type t)
{
    if (src.peer)
        d->ops->peers->fold_narrow_pair(d, op, stash, acc, out, elem_off, src.peer, src.at + skip, n, s, t);
    else
        device_fold_narrow_pair(d, op, stash, acc, out, elem_off, src.host + skip, n, s, t);
}
static inline void device_write_from(device *d, devbuf *dst, uint64_t off, devsrc src, uint64_t skip, size_t bytes)
{
    if (src.peer)
        d->ops->peers->copy(d, dst, off, src.peer, src.at + skip, bytes);
    else
        device_write(d, dst, off, src.host + skip, bytes);
}

/* device_fold_from: as device_fold, from src advanced by skip bytes (a
 * peer's memory: device_fold_peer, below). */
static inline void device_fold_peer(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p,
                                    uint64_t at, size_t n, float s)
{
    d->ops->peers->fold(d, op, acc, elem_off, p, at, n, s);
}
static inline void device_fold_from(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devsrc src,
                                    uint64_t skip, size_t n, float s)
{
    if (src.peer)
        device_fold_peer(d, op, acc, elem_off, src.peer, src.at + skip, n, s);
    else
        device_fold(d, op, acc, elem_off, src.host + skip, n, s);
}

/* ---- sparse accumulators ----------------------------------------------------
 *
 * A sparse push folds into a devsparse: its row indices are mapped to
 * slots (creating zeroed rows), then its values are added slot by slot;
 * a JOB_SPARSE_EMIT writes the coalesced result (indices ascending,
 * values scaled: shared/sparse.h) into a devbuf of sparse_result_size
 * bytes. On every device in this version the accumulator and its
 * arithmetic live on the host (shared/sparse.c): the rows are few and
 * hashed by index, which a GPU gains nothing from. A cuda device may keep
 * them there (its emit a host function in stream order) or move them
 * later; the kinds do not change either way.
 *
 * device_sparse_new: an empty accumulator, NULL when out of memory.
 * device_sparse_reset: empty it for a table of rows x cols (keeps memory).
 * device_sparse_map: 0, -1 when an index is outside [0, rows) (*bad gets
 *   it; nothing is inserted), -2 out of memory. slots[i] is the slot of
 *   idx[i] (nnz little-endian int64, any alignment).
 * device_sparse_fold: n values (from element e0 of the push's value
 *   section; element e is row e / cols, column e % cols) added to the rows
 *   of `slots`; src lives only during the call.
 * device_sparse_result_size: bytes the emit will write. */
static inline devsparse *device_sparse_new(device *d) { return d->ops->sparse_new(d); }
static inline void device_sparse_free(device *d, devsparse *s)
{
    if (s)
        d->ops->sparse_free(d, s);
}
static inline void device_sparse_reset(device *d, devsparse *s, uint64_t rows, uint64_t cols)
{
    d->ops->sparse_reset(d, s, rows, cols);
}
static inline int device_sparse_map(device *d, devsparse *s, const uint8_t *idx, uint64_t nnz, uint32_t *slots,
                                    int64_t *bad)
{
    return d->ops->sparse_map(d, s, idx, nnz, slots, bad);
}
static inline void device_sparse_fold(device *d, devsparse *s, const uint32_t *slots, uint64_t e0,
                                      const uint8_t *src, size_t n)
{
    d->ops->sparse_fold(d, s, slots, e0, src, n);
}
static inline uint64_t device_sparse_result_size(device *d, devsparse *s)
{
    return d->ops->sparse_result_size(d, s);
}

/* ---- jobs --------------------------------------------------------------------
 *
 * device_submit: enqueue j; j->done runs later on the reactor thread (cpu:
 * before device_submit returns). cuda: the job's kernels and its to-host
 * copy on the stream, then cudaLaunchHostFunc with a function that puts j
 * on a completed list (a mutex) and writes an eventfd the reactor's
 * event_base watches, as the test device does; the reactor then calls the
 * done callbacks in order and `after`. No call here waits for the GPU.
 *
 * device_drain: wait for every job submitted so far and run their done
 * callbacks before returning (reset, shutdown and the end of a session go
 * through it, so that nothing is freed under work in flight). cuda:
 * cudaStreamSynchronize, then deliver — the one call allowed to wait.
 *
 * device_destroy: drain, then free the device. Every devbuf and devsparse
 * must have been freed first. */
static inline void device_describe(device *d, char *buf, size_t len)
{
    if (d->ops->describe)
        d->ops->describe(d, buf, len);
    else
        snprintf(buf, len, "%s", d->ops->name);
}
static inline uint64_t device_allocs(device *d) { return d->ops->allocs ? d->ops->allocs(d) : 0; }

/* ---- peers: another process's GPU memory (CUDA IPC) ---------------------------
 *
 * A GPU device can fold from the memory of a process on the same GPU (a
 * CUDA trainer) and lend it the results it computes in memory that process
 * can open (docs/protocol.md, "CUDA IPC on one GPU"), through its
 * devpeer_ops; cpu and test cannot (no peers: device_has_peers is false).
 *
 * device_gpu_id: the GPU's UUID, which a peer compares with its own.
 * device_peer_open: the peer's exported memory (`mem`, its handle; `bytes`
 *   of it usable) and its IPC event (`ev`), opened once; NULL with the
 *   reason (not openable, another GPU, out of memory). Closed with
 *   device_peer_close, once no fold in flight reads it (cuda: the device
 *   waits for its stream before unmapping; close is rare: a connection's
 *   end).
 * device_peer_wait: work submitted from now on waits until the peer's
 *   event's latest record is complete — as it stands now, or later (cuda:
 *   as it stands when the device next enqueues work, at the latest at the
 *   end of this reactor iteration: one wait per peer and iteration; a
 *   later record only waits for more of the peer's own work); the host
 *   never waits (cudaStreamWaitEvent).
 * device_fold_peer: as device_fold, from the peer's memory at byte offset
 *   `at` (the caller checked at + 4n against the peer's size); a narrow
 *   push's folds likewise (device_fold_narrow_out_from and the others
 *   above: at + 2n checked).
 * device_share: the device's own exported memory, `want` bytes made at the
 *   first call (the server's --gpu-share; later calls get that one): its
 *   handle into mem and its size; 0, or -1 with why (then the device lends
 *   nothing). From then
 *   on device_buf_new places buffers there while it has room, and
 *   device_buf_take_host hands over, with the host image of a buffer whose
 *   device memory holds its bytes, that memory (psbuf.twin: its offset in
 *   the shared memory, plus one): a peer reads the result there, device
 *   to device, for as long as the psbuf lives. */
static inline bool device_has_peers(const device *d) { return d->ops->peers != NULL; }
static inline const char *device_gpu_id(device *d) { return d->ops->peers->gpu_id(d); }
static inline devpeer *device_peer_open(device *d, const uint8_t *mem, uint64_t bytes, const uint8_t *ev,
                                        char *err, size_t errlen)
{
    return d->ops->peers->open(d, mem, bytes, ev, err, errlen);
}
static inline void device_peer_close(device *d, devpeer *p)
{
    if (p)
        d->ops->peers->close(d, p);
}
static inline void device_peer_wait(device *d, devpeer *p) { d->ops->peers->wait(d, p); }
static inline int device_share(device *d, uint64_t want, uint8_t *mem, uint64_t *bytes, char *err, size_t errlen)
{
    return d->ops->peers->share(d, want, mem, bytes, err, errlen);
}

static inline bool device_buf_lendable(device *d, devbuf *b)
{
    return d->ops->peers && d->ops->peers->buf_lendable(d, b);
}
static inline psbuf *device_buf_lend(device *d, devbuf *b) { return d->ops->peers->buf_lend(d, b); }

static inline void device_submit(device *d, device_job *j) { d->ops->submit(d, j); }
static inline void device_drain(device *d) { d->ops->drain(d); }
static inline void device_destroy(device *d)
{
    if (d)
        d->ops->destroy(d);
}

#endif
