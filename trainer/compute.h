/* compute.h — where a trainer's model arithmetic runs, and the memory it
 * runs on: one small table of operations (compute_ops) behind which each
 * device has an implementation. DummyModel (model.c), the batch-update
 * Linear (batch_update.c), the HybridModel's dense part (hybrid.c) and SGD
 * (optim.c) describe their arithmetic once with these calls and never know
 * which device runs it.
 *
 *   device  compute_cpu.c   today's CBLAS loops, run inline; memory is host memory
 *   cuda    compute_cuda.c  cuBLAS for the products, kernels for the rest
 *                           (trainer/cuda/kernels.cu; trainer/cmath.h: the
 *                           same per-element math), one stream, memory on
 *                           the GPU; "fake-cuda": the same on the fake GPU
 *                           of shared/gpu/cugpu.h (tests, any machine)
 *   staged  compute_staged.c tests only: the cpu's arithmetic, but device
 *                           memory has no host view and copies complete
 *                           late (at the next operation, wait, sync or
 *                           done), a read's destination poisoned until
 *                           then: the GPU's host-access paths on any
 *                           machine (compute_new("staged"))
 *
 * Where memory lives is a type, as Gloo's host/pinned/device workspaces:
 * the layer allocates and frees the buffers it computes on (cbuf: a handle
 * with its element count, element type and memory kind), or, on the cpu,
 * computes on host memory someone else owns and lends it (compute_lend:
 * gradients in the shared segment a hook sends from). Models hold
 * handles and name ranges of them (cspan); they never dereference device
 * memory. Host access is explicit:
 *
 *   compute_read / compute_write   a range to / from host memory, enqueued
 *                                  (cpu: memcpy at once; cuda: an async copy,
 *                                  complete at the next mark or sync: until
 *                                  then the host side must stay as it is)
 *   compute_host_view              the buffer's own host address, or NULL
 *                                  where its memory is not host-visible
 *                                  (cpu: always the address: zero copy)
 *   compute_span_device            a device range's GPU address, for NCCL
 *                                  on the same GPU (NULL off a GPU)
 *   compute_host_read / _write_*   the view where there is one, else a
 *                                  caller's staging area and a copy
 *
 * Hooks and the optimizer may use a host view (model_grads, hook buckets,
 * the parameters out) only where it is not NULL and only for a range whose
 * writer is done: after compute_wait on the mark recorded once its op was
 * enqueued, or after compute_sync. Elsewhere (a device) they copy through
 * compute_read / compute_write into pinned host memory.
 *
 * Order. Operations on one context are enqueued in order, as on a stream:
 * each sees every write enqueued before it. The cpu implementation runs
 * each one inline, so it is complete on return. compute_mark records a
 * point in that order (cheap: a counter on the cpu, an event on a stream);
 * compute_done asks whether everything before it has finished,
 * compute_wait waits for it, compute_sync for everything. A bucket's
 * gradient range is handed to a hook with the mark recorded after the op
 * that wrote it (on the cpu: at once). Every mark is a point of its own
 * (two marks with nothing between them are two numbers, in order).
 *
 * Time between marks (compute_elapsed): each mark also records when the
 * context reached it — on a GPU the time its event completes on the
 * stream (cudaEventElapsedTime: the marks' events keep timing enabled;
 * the fake GPU's carry the host time its worker reached them), on the cpu
 * and the staged device the monotonic clock when the mark was taken. A
 * trainer on a device times forward, backward, the optimizer and the batch
 * between two marks (the seed's record_start(..., cuda=True)), read once
 * both are done, so that timing never stalls the next batch
 * (trainer/steptimer.h). Only a context's latest COMPUTE_TIMED_MARKS
 * marks can be timed: a GPU's older ones' events have been recorded again.
 *
 * Host arguments. Index arrays (a batch's indices and targets, the sparse
 * rows and values a server sent) are host memory; an operation reads them
 * while it is enqueued (cuda: copied into its staging ring then), so the
 * caller may reuse them once the call returns.
 *
 * Shapes are row-major. Sizes are element counts; a cspan's offset and
 * length are elements of its buffer's type. Every operation asserts that its
 * spans lie inside their buffers and have the lengths its shape needs.
 *
 * Threads: a context is used by one thread (the trainer's). A host view may
 * be read and written by another thread (a hook's) for a range no enqueued
 * operation touches meanwhile.
 */
#ifndef PSBENCH_COMPUTE_H
#define PSBENCH_COMPUTE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/devmem.h"
#include "shared/devspec.h"

/* Where a buffer's memory is. */
typedef enum compute_mem {
    COMPUTE_MEM_DEVICE = 0, /* where the context computes (cpu: host memory) */
    COMPUTE_MEM_PINNED,     /* page-locked host memory: async copies to and from the device */
    COMPUTE_MEM_HOST,       /* ordinary host memory */
} compute_mem;

typedef enum compute_dtype {
    COMPUTE_F32 = 0,
    COMPUTE_F64, /* losses: one double each */
} compute_dtype;

typedef struct compute compute;
/* A buffer the layer owns (opaque): n elements of one type, in one kind of
 * memory. */
typedef struct cbuf cbuf;

/* A range of a buffer: elements [off, off + n). */
typedef struct cspan {
    cbuf *buf;
    uint64_t off, n;
} cspan;

/* A point in a context's order of operations. */
typedef uint64_t cmark;

/* How many of a context's latest marks compute_elapsed can time (a GPU's
 * ring of events; the cpu's ring of times). A training step takes 5 marks
 * and 3 per bucket (trainer/train.c): a step of up to 339 buckets is
 * timed whole. */
#define COMPUTE_TIMED_MARKS 1024

/* COMPUTE_NO_SLOT: the value of every entry of a sparse backward's slot
 * scratch between calls. */
#define COMPUTE_NO_SLOT UINT32_MAX

/* Column sums (compute_colsum): how each sum starts. */
typedef enum compute_sum_from {
    COMPUTE_SUM_FROM_ROW0 = 0, /* dst = src[0]; dst += src[i], i >= 1 (model.c's) */
    COMPUTE_SUM_FROM_ZERO,     /* dst = 0; dst += src[i], i >= 0 (hybrid.c's, batch_update.c's) */
} compute_sum_from;

/* A buffer of device memory exported for another process on the same GPU
 * (CUDA IPC: a CUDA server folding a trainer's gradients where they are):
 * what that process needs to open it, and the context's IPC event, which
 * compute_share_record records in the context's order. */
#define COMPUTE_IPC_HANDLE 64
typedef struct compute_share {
    char gpu[48];                           /* the GPU's UUID (cugpu.h) */
    unsigned char mem[COMPUTE_IPC_HANDLE];  /* the buffer's memory handle */
    unsigned char ev[COMPUTE_IPC_HANDLE];   /* the context's IPC event's handle */
    uint64_t bytes;                         /* the buffer's size */
    devmem base;                            /* its device address here (compute_span_device's) */
} compute_share;

typedef struct compute_ops {
    const char *name; /* "cpu", "cuda" */
    void (*destroy)(compute *c);

    /* ---- memory ---- */
    /* n elements of type t in memory `mem`, zeroed; NULL with err. */
    cbuf *(*alloc)(compute *c, uint64_t n, compute_dtype t, compute_mem mem, char *err, size_t errlen);
    void (*release)(compute *c, cbuf *b);
    /* A buffer over n elements of type t at p, host memory lent by the
     * caller (compute_lend). NULL where the context cannot compute on
     * host memory it did not allocate (a GPU, the staged device). */
    cbuf *(*lend)(compute *c, void *p, uint64_t n, compute_dtype t, char *err, size_t errlen);
    void *(*host_view)(compute *c, cbuf *b);
    /* The buffer's address on the context's GPU, for a library that takes
     * device pointers on the same GPU (NCCL); none where the context has
     * no GPU (cpu, staged) or b is not device memory. */
    devmem (*device_view)(compute *c, cbuf *b);
    void (*read)(compute *c, cspan src, void *dst);
    void (*write)(compute *c, cspan dst, const void *src);
    void (*zero)(compute *c, cspan dst);

    /* ---- order ---- */
    cmark (*mark)(compute *c);
    bool (*done)(compute *c, cmark m);
    void (*wait)(compute *c, cmark m);
    void (*sync)(compute *c);
    /* The time from mark `from` to mark `to` (from <= to) in ms, never
     * waiting: 0 with *ms once both are done; 1: not yet done; -1: a mark
     * too old to time (compute_elapsed). */
    int (*elapsed)(compute *c, cmark from, cmark to, double *ms);

    /* ---- arithmetic (float32 unless said) ---- */
    /* C = alpha op(A) op(B) + beta C, op(X) = X or X^T; M x K times K x N. */
    void (*gemm)(compute *c, bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha, cspan A,
                 uint64_t lda, cspan B, uint64_t ldb, float beta, cspan C, uint64_t ldc);
    /* y[i][j] = bias[j], rows x cols. */
    void (*bias_rows)(compute *c, cspan bias, uint64_t rows, uint64_t cols, cspan y);
    /* y[i][j] = src[j][i] + bias[j]: src cols x rows, y rows x cols. */
    void (*transpose_bias)(compute *c, cspan src, cspan bias, uint64_t rows, uint64_t cols, cspan y);
    /* dst[j] = sum_i src[i][j] over rows x cols, in row order. */
    void (*colsum)(compute *c, cspan src, uint64_t rows, uint64_t cols, cspan dst, compute_sum_from from);
    /* y = max(x, 0); dy = pre > 0 ? dy : 0 (in place). */
    void (*relu)(compute *c, cspan x, cspan y);
    void (*relu_bwd)(compute *c, cspan pre, cspan dy);

    /* EmbeddingBag(mode=mean), bags of L indices (host, B x L, each a row
     * of table: rows x D): out[b] = mean of the bag's rows (B x D). */
    void (*bag_mean)(compute *c, cspan table, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan out);
    /* Its backward from dx (B x D; scratch: divided by L in place first, as
     * PyTorch's mean backward). Dense: G (rows x D) = 0, then dx[b] / L
     * added to every row of bag b, once per occurrence. */
    void (*bag_mean_bwd_dense)(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                               cspan G);
    /* Sparse: the unique rows of the batch, ascending, into rows (host,
     * capacity: the table's rows) and one compact row of D floats per
     * unique row into vals; returns their count nnz. slot: host scratch of
     * the table's rows entries, all COMPUTE_NO_SLOT, left so. The count and
     * rows are known on return (computed from the host indices); the values
     * as any enqueued write. */
    uint64_t (*bag_mean_bwd_sparse)(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                    int64_t *rows, uint32_t *slot, cspan vals);

    /* DummyModel's head, B samples of C classes, targets y (host):
     * prob = softmax(z), q = softmax(prob) per sample; loss (1 double) =
     * mean_b -log q_b[y_b]. Backward: dz from prob and q (cmath.h). */
    void (*softmax_ce)(compute *c, cspan z, uint32_t B, uint64_t C, const int64_t *y, cspan prob, cspan q,
                       cspan loss);
    void (*softmax_ce_bwd)(compute *c, cspan prob, cspan q, uint32_t B, uint64_t C, const int64_t *y, cspan dz);
    /* HybridModel's head: cross-entropy of logits z (R x C), targets y
     * (host); dz = its gradient, loss (1 double) = the mean over R. */
    void (*ce_logits)(compute *c, cspan z, uint32_t R, uint32_t C, const int64_t *y, cspan dz, cspan loss);
    /* L1 loss against zeros over n outputs: loss (1 double) = mean |y|,
     * dy = sign(y) / n. */
    void (*l1)(compute *c, cspan y, uint64_t n, cspan dy, cspan loss);

    /* SGD on p from g (both n floats). buf.buf NULL: p -= lr g. Else
     * momentum: buf = g on the first step, buf = momentum buf + g after;
     * p -= lr buf. */
    void (*sgd_dense)(compute *c, cspan p, cspan g, cspan buf, float lr, float momentum, bool first);
    /* SGD on the listed rows of table (cols wide) from vals (host, nnz x
     * cols), rows (host) in range, applied in order (repeats twice). */
    void (*sgd_sparse)(compute *c, cspan table, uint64_t cols, const int64_t *rows, const float *vals, uint64_t nnz,
                       float lr);

    /* ---- CUDA IPC (NULL where the context has no GPU: cpu, staged) ---- */
    cbuf *(*alloc_shared)(compute *c, uint64_t n, compute_dtype t, char *err, size_t errlen);
    int (*share_export)(compute *c, cbuf *b, compute_share *x, char *err, size_t errlen);
    void (*share_record)(compute *c);
    devmem (*peer_open)(compute *c, const unsigned char *mem, uint64_t bytes, char *err, size_t errlen);
    void (*peer_close)(compute *c, devmem p);
    void (*copy_from_peer)(compute *c, cspan dst, devmem src);
    void (*first_ne)(compute *c, cspan a, cspan b, cspan first);
    void (*narrow)(compute *c, devmem dst, cspan src, int bf);
    void (*widen)(compute *c, cspan dst, devmem src, int bf);
} compute_ops;

/* Every implementation's context starts with this. */
struct compute {
    const compute_ops *ops;
    /* The first failure ("" while none): set by the implementation
     * (compute_fail, compute_impl.h), read through compute_status. */
    char failure[256];
};

/* Failure. A GPU can fail under a context (a launch or copy that fails, a
 * lost device, no memory for the context's own scratch): the context keeps
 * the first reason and from then on does nothing more — every operation
 * below returns at once (a read leaves its destination as it was, a sparse
 * backward returns 0 rows), allocations fail with the reason, and marks,
 * waits and syncs return as if done, so nothing hangs on work that will
 * never complete. Whoever drives it asks compute_status where a step's
 * results leave the process (before a bucket goes to a hook, at the end of
 * a step) and stops there with the reason: a failed trainer reports
 * `failed`, it does not exit or send what it never computed. The cpu
 * never fails. */
static inline bool compute_failed(const compute *c) { return c->failure[0] != '\0'; }
/* 0, or -1 with the first failure in err. */
int compute_status(const compute *c, char *err, size_t errlen);

/* The context for device `dev` (shared/devspec.h: cpu, cuda, cuda:N;
 * fake-cuda and staged for tests; plain cuda, unplaced, is GPU 0); NULL
 * with a one-line reason in err for a device this build or host cannot
 * compute on (no GPU answers, no CUDA in this build, the server's test
 * device). */
compute *compute_new(device_spec dev, char *err, size_t errlen);
/* The device trainer `rank` computes on, for --device `asked`: the same,
 * except plain "cuda", which is the seed's cuda(rank) placement: GPU
 * (rank mod the GPUs this host shows), "cuda:K". 0, or -1 with the reason
 * (no GPU answers). */
int compute_place(device_spec asked, uint64_t rank, device_spec *out, char *err, size_t errlen);
/* NULL: nothing. Every buffer must have been released. */
void compute_free(compute *c);
const char *compute_name(const compute *c);

uint64_t cbuf_count(const cbuf *b);
compute_mem cbuf_mem(const cbuf *b);
compute_dtype cbuf_dtype(const cbuf *b);

/* All of b / elements [off, off + n) of b. */
cspan cspan_all(cbuf *b);
static inline cspan cspan_at(cbuf *b, uint64_t off, uint64_t n)
{
    cspan s = {b, off, n};
    return s;
}
/* Elements [off, off + n) of s. */
static inline cspan cspan_sub(cspan s, uint64_t off, uint64_t n)
{
    assert(off <= s.n && n <= s.n - off);
    cspan r = {s.buf, s.off + off, n};
    return r;
}
/* No buffer: "none" where an operation takes an optional one. */
static inline cspan cspan_none(void)
{
    cspan s = {0, 0, 0};
    return s;
}

/* Host access through a staging area where the memory is not host-visible.
 * compute_host_read: s's elements on the host — the view, or `stage`
 * (s.n elements) filled and synchronised. compute_host_write_begin: where
 * to write s's new elements — the view, or `stage`;
 * compute_host_write_end enqueues the copy when p is not the view. */
const void *compute_host_read(compute *c, cspan s, void *stage);
void *compute_host_write_begin(compute *c, cspan s, void *stage);
void compute_host_write_end(compute *c, cspan s, const void *p);
/* The host address of s's first element, or NULL (not host-visible). */
void *compute_span_view(compute *c, cspan s);
/* The GPU address of s's first element (device_view), or none. Work
 * elsewhere (an NCCL stream) may use it only for a range whose writer is
 * done (compute_done on a mark recorded after it) and no enqueued
 * operation touches meanwhile. */
devmem compute_span_device(compute *c, cspan s);

/* ---- CUDA IPC: memory shared with a process on the same GPU ----
 *
 * compute_alloc_shared: n zeroed elements of device memory another process
 *   on this GPU can open (a COMPUTE_MEM_DEVICE buffer in every other
 *   respect), NULL with err where the context cannot (no GPU: cpu, staged;
 *   no IPC memory left).
 * compute_share_export: b's handle (b from compute_alloc_shared) and the
 *   context's IPC event (made at the first call). 0, or -1 with err.
 * compute_share_record: that event, recorded now in the context's order:
 *   a process waiting for it waits for everything enqueued so far.
 * compute_peer_open / _close: another process's exported memory (`bytes`
 *   of it), mapped here: a device address, none with err.
 * compute_copy_from_peer: dst's elements from device address src (a
 *   peer's memory), device to device, enqueued in the context's order.
 * compute_first_ne: the index of the first element where float spans a
 *   and b (as long) differ (NaN differs from everything), or UINT64_MAX
 *   when none does, into `first` (one 8-byte element: a COMPUTE_F64
 *   buffer's, read back as a uint64_t), enqueued: a check of a peer's
 *   result where it is, with nothing copied to the host but that.
 * compute_narrow: src's floats narrowed (round to nearest even; bf16 where
 *   bf, else fp16: shared/half_elem.h) into src.n 16-bit values at device
 *   address dst (2-byte aligned: inside an exported buffer, a narrow
 *   push's), enqueued.
 * compute_widen: dst's floats from the dst.n 16-bit values at
 *   device address src (a peer's memory, or this context's), widened
 *   exactly, enqueued. */
static inline bool compute_can_share(const compute *c) { return c->ops->alloc_shared != NULL; }
cbuf *compute_alloc_shared(compute *c, uint64_t n, compute_dtype t, char *err, size_t errlen);
int compute_share_export(compute *c, cbuf *b, compute_share *x, char *err, size_t errlen);
static inline void compute_share_record(compute *c)
{
    if (!compute_failed(c))
        c->ops->share_record(c);
}
devmem compute_peer_open(compute *c, const unsigned char *mem, uint64_t bytes, char *err, size_t errlen);
static inline void compute_peer_close(compute *c, devmem p)
{
    if (!devmem_is_none(p))
        c->ops->peer_close(c, p);
}
static inline void compute_copy_from_peer(compute *c, cspan dst, devmem src)
{
    if (!compute_failed(c))
        c->ops->copy_from_peer(c, dst, src);
}
static inline void compute_first_ne(compute *c, cspan a, cspan b, cspan first)
{
    if (!compute_failed(c))
        c->ops->first_ne(c, a, b, first);
}
static inline void compute_narrow(compute *c, devmem dst, cspan src, int bf)
{
    if (!compute_failed(c))
        c->ops->narrow(c, dst, src, bf);
}
static inline void compute_widen(compute *c, cspan dst, devmem src, int bf)
{
    if (!compute_failed(c))
        c->ops->widen(c, dst, src, bf);
}

/* ---- the calls: each is its table's operation ---- */

static inline cbuf *compute_alloc(compute *c, uint64_t n, compute_dtype t, compute_mem mem, char *err, size_t errlen)
{
    if (compute_status(c, err, errlen) < 0)
        return NULL;
    return c->ops->alloc(c, n, t, mem, err, errlen);
}
/* Lent memory. Someone who moves a buffer's bytes from memory of their own
 * (a hook sending gradients from a shared segment, hook.h) may lend it to
 * a context that computes on host memory: compute_lends says whether c
 * does (the cpu: its device memory is host memory), compute_lend wraps n
 * elements of type t at p (host memory, aligned for t, kept by the lender
 * until after compute_release) in a buffer of kind COMPUTE_MEM_DEVICE that
 * the context computes on as on its own. It is not zeroed; releasing it
 * frees the handle, never the memory. NULL with err where the context
 * cannot (compute_lends false, or no memory for the handle). */
static inline bool compute_lends(const compute *c) { return c->ops->lend != NULL; }
cbuf *compute_lend(compute *c, void *p, uint64_t n, compute_dtype t, char *err, size_t errlen);
/* NULL: nothing. */
static inline void compute_release(compute *c, cbuf *b)
{
    if (b)
        c->ops->release(c, b);
}
static inline void *compute_host_view(compute *c, cbuf *b) { return c->ops->host_view(c, b); }
static inline void compute_read(compute *c, cspan src, void *dst)
{
    if (!compute_failed(c))
        c->ops->read(c, src, dst);
}
static inline void compute_write(compute *c, cspan dst, const void *src)
{
    if (!compute_failed(c))
        c->ops->write(c, dst, src);
}
static inline void compute_zero(compute *c, cspan dst)
{
    if (!compute_failed(c))
        c->ops->zero(c, dst);
}
static inline cmark compute_mark(compute *c) { return c->ops->mark(c); }
static inline bool compute_done(compute *c, cmark m) { return c->ops->done(c, m); }
static inline void compute_wait(compute *c, cmark m) { c->ops->wait(c, m); }
static inline void compute_sync(compute *c) { c->ops->sync(c); }
/* The time from mark `from` to mark `to` (from <= to, both of this
 * context) in milliseconds, as the device's clock saw it: 0 with *ms
 * (>= 0) once both are done; 1 while they are not (nothing waits: ask
 * again after compute_done or compute_wait says so); -1 when a mark is too
 * old to be timed (only the latest COMPUTE_TIMED_MARKS marks can be). */
static inline int compute_elapsed(compute *c, cmark from, cmark to, double *ms)
{
    return c->ops->elapsed(c, from, to, ms);
}

static inline void compute_gemm(compute *c, bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha,
                                cspan A, uint64_t lda, cspan B, uint64_t ldb, float beta, cspan C, uint64_t ldc)
{
    if (compute_failed(c))
        return;
    c->ops->gemm(c, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static inline void compute_bias_rows(compute *c, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    if (compute_failed(c))
        return;
    c->ops->bias_rows(c, bias, rows, cols, y);
}
static inline void compute_transpose_bias(compute *c, cspan src, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    if (compute_failed(c))
        return;
    c->ops->transpose_bias(c, src, bias, rows, cols, y);
}
static inline void compute_colsum(compute *c, cspan src, uint64_t rows, uint64_t cols, cspan dst,
                                  compute_sum_from from)
{
    if (compute_failed(c))
        return;
    c->ops->colsum(c, src, rows, cols, dst, from);
}
static inline void compute_relu(compute *c, cspan x, cspan y)
{
    if (!compute_failed(c))
        c->ops->relu(c, x, y);
}
static inline void compute_relu_bwd(compute *c, cspan pre, cspan dy)
{
    if (!compute_failed(c))
        c->ops->relu_bwd(c, pre, dy);
}
static inline void compute_bag_mean(compute *c, cspan table, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                    cspan out)
{
    if (compute_failed(c))
        return;
    c->ops->bag_mean(c, table, D, idx, B, L, out);
}
static inline void compute_bag_mean_bwd_dense(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B,
                                              uint64_t L, cspan G)
{
    if (compute_failed(c))
        return;
    c->ops->bag_mean_bwd_dense(c, dx, D, idx, B, L, G);
}
static inline uint64_t compute_bag_mean_bwd_sparse(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B,
                                                   uint64_t L, int64_t *rows, uint32_t *slot, cspan vals)
{
    if (compute_failed(c))
        return 0;
    return c->ops->bag_mean_bwd_sparse(c, dx, D, idx, B, L, rows, slot, vals);
}
static inline void compute_softmax_ce(compute *c, cspan z, uint32_t B, uint64_t C, const int64_t *y, cspan prob,
                                      cspan q, cspan loss)
{
    if (compute_failed(c))
        return;
    c->ops->softmax_ce(c, z, B, C, y, prob, q, loss);
}
static inline void compute_softmax_ce_bwd(compute *c, cspan prob, cspan q, uint32_t B, uint64_t C, const int64_t *y,
                                          cspan dz)
{
    if (compute_failed(c))
        return;
    c->ops->softmax_ce_bwd(c, prob, q, B, C, y, dz);
}
static inline void compute_ce_logits(compute *c, cspan z, uint32_t R, uint32_t C, const int64_t *y, cspan dz,
                                     cspan loss)
{
    if (compute_failed(c))
        return;
    c->ops->ce_logits(c, z, R, C, y, dz, loss);
}
static inline void compute_l1(compute *c, cspan y, uint64_t n, cspan dy, cspan loss)
{
    if (compute_failed(c))
        return;
    c->ops->l1(c, y, n, dy, loss);
}
static inline void compute_sgd_dense(compute *c, cspan p, cspan g, cspan buf, float lr, float momentum, bool first)
{
    if (compute_failed(c))
        return;
    c->ops->sgd_dense(c, p, g, buf, lr, momentum, first);
}
static inline void compute_sgd_sparse(compute *c, cspan table, uint64_t cols, const int64_t *rows, const float *vals,
                                      uint64_t nnz, float lr)
{
    if (compute_failed(c))
        return;
    c->ops->sgd_sparse(c, table, cols, rows, vals, nnz, lr);
}

/* A loss an operation wrote (1 double at loss), on the host: waits for it
 * (NaN where the context has failed). */
double compute_loss(compute *c, cspan loss);

#endif
