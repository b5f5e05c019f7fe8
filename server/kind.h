/* kind.h — what a parameter server does with pushes: the kinds layer.
 *
 * A kind decides what a push means (fold it into a sum, keep it, add it
 * to a gradient), what the answer is (a mean, updated parameters) and
 * which shapes belong together. It asks its device for the arithmetic and
 * reports a finished future through `resolved` — possibly long after
 * `resolve` returned. Kinds know futures as data (future.h) and the device
 * below them; they know nothing of connections.
 *
 * A kind's memory is the device's (device.h): accumulators, stored pushes,
 * models and tables are devbufs, sparse sums devsparses, and every piece of
 * arithmetic is a device fold or job. A kind reaches host bytes only
 * through the device — recv areas for bytes going in (pushes received
 * directly, fills), host images made host-visible by a job's to_host for
 * bytes going out (results, lookup answers) — so that it runs unchanged on
 * a GPU. Sparse pushes the kind keeps whole (average-batch) stay in host
 * psbufs: the device's sparse work reads host bytes.
 *
 *   average        the seed's AverageParameterServer: pushes are folded as
 *                  their bytes arrive (kind_average.c)
 *   average-batch  the seed's AverageBatchParameterServer: every push kept,
 *                  summed when the last arrives (kind_average_batch.c)
 *   batch-update   the seed's BatchUpdateParameterServer: the server owns
 *                  Linear(in, out), averages a round's gradients and takes
 *                  an SGD-with-momentum step (kind_batch_update.c)
 *   embedding      the seed's DDP+RPC benchmark: the server owns an
 *                  EmbeddingBag table; trainers look rows up and send
 *                  each lookup's gradient back as an SGD update, one
 *                  trainer at a time, no futures (kind_embedding.c)
 */
#ifndef PSBENCH_KIND_H
#define PSBENCH_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/bufpool.h"
#include "server/device.h"
#include "server/pending.h"
#include "shared/clock.h"
#include "shared/frame.h"
#include "shared/metrics.h"

typedef enum kind_id { KIND_AVERAGE = 0, KIND_AVERAGE_BATCH, KIND_BATCH_UPDATE, KIND_EMBEDDING } kind_id;

/* The batch-update server's model and optimizer (docs/protocol.md). */
typedef struct batch_update_config {
    uint32_t in_features, out_features; /* the seed: Linear(100, 30) */
    float lr, momentum;                 /* the seed: 0.001, 0.9 */
    uint32_t batch_update_size;         /* pushes per round; 0: the trainer count */
    uint64_t seed;                      /* initialization */
    uint32_t part, parts;               /* this server's share of the flat vector */
} batch_update_config;

/* The embedding server's table (docs/protocol.md, "Kind `embedding`"). */
typedef struct embedding_config {
    uint64_t num_embeddings, embedding_dim; /* the seed: 300 x 64 */
    float lr;                               /* the seed: 0.05 */
    uint64_t seed;                          /* initialization */
    uint32_t rank;                          /* the server's rank: its stream */
} embedding_config;

typedef struct kind_config {
    kind_id id;
    uint32_t trainers; /* trainers feeding this server */
    batch_update_config bu;
    embedding_config emb;
} kind_config;

/* One `lookup` or `update` (kind embedding), handed from the transport to
 * the kind once its whole payload is in. The transport allocates and frees
 * it and owns the payload and answer references; the kind owns `job` from
 * a successful call until it calls `done`. */
typedef struct kind_call {
    bool update;            /* false: a lookup */
    uint64_t batch;         /* echoed in the answer */
    uint64_t nnz, bags, cols; /* the header's (cols: updates only) */
    bool dense;             /* update: grad "dense" (the table's dense gradient, whole-table SGD) */
    bool confirm;           /* update: answered `updated` once applied (the transport's) */
    psbuf *payload;         /* the frame's payload; NULL when it is empty */
    uint64_t t_ns;          /* when the call was handed over (the method metric) */
    const char *error;      /* set by the kind before done: NULL, or why the
                             * device could not apply the call (device text) */
    psbuf *answer;          /* lookup: bags x cols float32, set by the kind
                             * before done (NULL for 0 bags): the host image
                             * of the gather's output; the transport drops
                             * the reference */
    device_job job;         /* the kind's */
    /* The transport's: runs on the reactor thread once the call is applied
     * (in call order: the device completes jobs in submission order). */
    void (*done)(struct kind_call *c);
    void *owner;            /* the transport's: the connection, NULL once it closed */
    uint64_t trace_t0_ns, trace_nvtx; /* the transport's: the call's fold in the trace (server/strace.h) */
    struct kind_call *next; /* the transport's: the owner's calls in flight */
} kind_call;

/* One push in progress, owned by the connection that receives it. The kind
 * keeps its per-push scratch here (the index buffers of a sparse push), so
 * that it is reused from one push to the next. */
typedef struct push_ctx {
    future *f;             /* NULL: no push (or detached from a failed future) */
    uint32_t slot;
    bool first;            /* this push opened f */
    uint64_t len;          /* payload bytes */
    uint64_t nnz;          /* sparse: rows in this push */
    uint8_t *idx;          /* sparse: the raw int64 indices */
    uint32_t *rowslot;     /* sparse: accumulator slot of each row */
    uint64_t idx_cap;      /* capacity of idx/rowslot in rows */
    char err[128];         /* reason when push_data fails */
    struct push_ctx *next_in_future; /* f->pushes */
} push_ctx;

typedef struct kind kind;

typedef struct kind_ops {
    const char *name;
    /* Takes dense pushes in f16 or bf16 (docs/protocol.md, "Narrow
     * pushes"): folded in f32 as the widened values' f32 pushes would be,
     * the f32 mean narrowed once and answered in the push's type. A
     * push's bytes then arrive 2 an element: offsets are the payload's
     * (kind average receives a first push's straight into its stash). */
    bool narrow;
    /* Kind-specific admission of a push header already checked for its
     * fields: the future key (*batch; bucket is the header's) and the
     * shape rules that do not depend on other pushes. ERR_NONE, or the
     * code with a reason in msg. */
    frame_errcode (*admit)(kind *k, const frame_hdr *h, uint64_t *batch, char *msg, size_t len);
    /* A push into p->f was accepted: allocate what it needs. 0 or -1. */
    int (*push_begin)(kind *k, push_ctx *p);
    /* Where payload bytes from offset `off` may be received directly (no
     * arithmetic needed for them), and how many; NULL if they must go
     * through push_data. With NULL, a non-zero *max is how many bytes are
     * worth reading for push_data before this push may be received
     * directly (reading more would have push_data copy the excess). The
     * place is a device recv area (device_recv_area): valid until the
     * next call into the kind or its device. */
    uint8_t *(*push_direct)(kind *k, push_ctx *p, uint64_t off, size_t *max);
    /* n bytes were received at the pointer push_direct gave for `off`
     * (the kind tells its device: device_recv_done). The caller keeps
     * off + n on a float boundary (or the payload's end). */
    void (*push_direct_done)(kind *k, push_ctx *p, uint64_t off, size_t n);
    /* `n` payload bytes at offset `off` arrived (any alignment of src;
     * off + n is a multiple of 4 unless it is the end of the payload).
     * Returns 0, or -1 when the push is invalid (p->err says why). */
    int (*push_data)(kind *k, push_ctx *p, uint64_t off, const uint8_t *src, size_t n);
    /* A dense push's whole payload (p->len bytes) lies in a peer's GPU
     * memory at byte offset `at` (CUDA IPC, checked against the peer's
     * size): fold it from there, as push_data would from host bytes (the
     * transport made the device wait for the peer first). NULL: the kind
     * takes no such push (the server offers none). */
    void (*push_peer)(kind *k, push_ctx *p, devpeer *peer, uint64_t at);
    /* The push stops before its payload is complete: forget its bytes. */
    void (*push_abort)(kind *k, push_ctx *p);
    /* Every push of f is in: compute the answer and report it through
     * k->resolved (now or later, on the reactor thread). */
    void (*resolve)(kind *k, future *f);
    /* Free whatever f holds (failed, cancelled or finished futures). */
    void (*release)(kind *k, future *f);
    /* Once the kind has its device and pool (batch-update: the model's
     * first values). May be NULL. 0, or -1 (out of memory). */
    int (*start)(kind *k);
    /* Between passes, after every future is gone (batch-update: a fresh
     * model, as the seed builds one per pass). May be NULL. */
    void (*reset)(kind *k);
    /* Work that start and reset leave to be done a slice at a time
     * (embedding: its table, up to 8 GiB of normals, seconds of work), so
     * that the reactor serves its master link and its listener in between
     * (reactor.c drives it). start and reset set fill_total and fill_left;
     * fill does about `budget` bytes more and returns fill_left (0: the
     * kind is ready). Nothing else may be asked of a kind that is not
     * ready. NULL: start and reset finish their work themselves. */
    uint64_t (*fill)(kind *k, uint64_t budget);
    /* `fetch`: the answer's header fields and payload (a new reference).
     * NULL: the kind has no fetch (`unsupported`). 0, or -1 (memory). */
    int (*fetch)(kind *k, frame_hdr *out, psbuf **payload);
    /* `lookup` and `update` (kind embedding; NULL: `unsupported`). Check
     * the call against the table (nothing changes when it fails) and start
     * it: ERR_NONE, and c->done runs later (or before this returns, on the
     * cpu device); otherwise the code (bad_index, shape_mismatch) with a
     * reason in msg, and done never runs. */
    frame_errcode (*lookup)(kind *k, kind_call *c, char *msg, size_t len);
    frame_errcode (*update)(kind *k, kind_call *c, char *msg, size_t len);
    void (*destroy)(kind *k);
} kind_ops;

struct kind {
    const kind_ops *ops;
    kind_config cfg;
    uint32_t expected; /* pushes that complete a future */
    device *dev;
    bufpool *pool;
    stats *m_compute;  /* the seed's method metric: average computation / update;
                        * embedding: method_metric,lookup */
    stats *m_update;   /* embedding: method_metric,update (NULL for the others) */
    uint64_t rows_touched; /* embedding: index positions updates have applied */
    uint64_t fill_total, fill_left; /* bytes of the last start/reset's fill, and still to do */
    /* How a kind reports a resolved future: result is a new reference the
     * callee takes, or NULL when it could not be computed (then `why`). */
    void (*resolved)(void *ctx, future *f, psbuf *result, frame_errcode code, const char *why);
    void *resolved_ctx;
};

/* Constructors of the kind files (kinds.c's kind_new dispatches to them;
 * the result gets its pool and metrics there). A kind allocates its
 * device memory (a model, a table) from `dev`, which outlives it. */
kind *kind_average_new(const kind_config *cfg, device *dev, char *err, size_t errlen);
kind *kind_average_batch_new(const kind_config *cfg, device *dev, char *err, size_t errlen);
kind *kind_batch_update_new(const kind_config *cfg, device *dev, char *err, size_t errlen);
kind *kind_embedding_new(const kind_config *cfg, device *dev, char *err, size_t errlen);

/* One push kept whole (average-batch, batch-update): dense pushes in a
 * devbuf of their own (received straight into device memory, or its
 * staging), sparse ones in a host psbuf (the device's sparse work reads
 * host bytes: device.h). */
typedef struct kind_slot {
    devbuf *dev;
    psbuf *host;
} kind_slot;

/* Per future an array `stored` over the slots. begin takes p's buffer (0
 * or -1); direct gives where bytes from `off` are received straight from
 * the socket, except for the first `skip` bytes, which go through
 * push_data (sparse indices, checked once they are in); direct_done and
 * data put bytes in place; abort and release give buffers back. */
int kind_stored_begin(kind *k, kind_slot *stored, const push_ctx *p, bool sparse);
uint8_t *kind_stored_direct(kind *k, kind_slot *stored, const push_ctx *p, uint64_t skip, uint64_t off,
                            size_t *max);
void kind_stored_direct_done(kind *k, kind_slot *stored, const push_ctx *p, uint64_t off, size_t n);
void kind_stored_data(kind *k, kind_slot *stored, const push_ctx *p, uint64_t off, const uint8_t *src, size_t n);
/* A dense push's payload, whole, from a peer's GPU memory (push_peer). */
void kind_stored_peer(kind *k, kind_slot *stored, const push_ctx *p, devpeer *peer, uint64_t at);
void kind_stored_abort(kind *k, kind_slot *stored, const push_ctx *p);
void kind_stored_release(kind *k, kind_slot *stored, uint32_t nslots);

/* A narrow push's n elements of type t (f16, bf16; any alignment) folded
 * into acc's floats [elem_off, elem_off + n) by op, as device_fold folds
 * f32: a copy is widened straight into the device's recv areas (on the
 * cpu device, the accumulator itself), any other op widens a slice at a
 * time into a small scratch the device folds from — or, on a device that
 * widens as it folds (device_fold_narrow: cuda), the 16-bit values go to
 * it as they are. So the sum is of the exact widened values in f32, on
 * every device. kind_fold_narrow_from: from src advanced by skip bytes (a
 * peer's GPU memory: the device's peer fold, always a widening one). */
void kind_fold_narrow(kind *k, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n, float s,
                      half_type t);
void kind_fold_narrow_from(kind *k, device_fold_op op, devbuf *acc, uint64_t elem_off, devsrc src, uint64_t skip,
                           size_t n, float s, half_type t);
/* The answer of a narrow future: the f32 mean `wide` (taken: unref'd)
 * narrowed once, round to nearest even (half_to_fp16 / half_to_bf16),
 * into a buffer of the pool. NULL: out of memory. */
psbuf *kind_result_narrow(kind *k, psbuf *wide, half_type t);

/* Scratch for a sparse push's indices: grow p's buffers to nnz rows. */
int kind_push_grow_idx(push_ctx *p, uint64_t nnz);
void push_ctx_free(push_ctx *p);


/* Whether the kind's state is complete: nothing of its start or last reset
 * is left to fill (kind_ops.fill). */
static inline bool kind_ready(const kind *k)
{
    return k->fill_left == 0;
}
/* Fill about `budget` bytes more; returns the bytes still to fill. */
uint64_t kind_fill(kind *k, uint64_t budget);


/* Whether f's dense result, computed into b, may stay on the device (CUDA
 * IPC): every push of f was folded from a trainer's GPU memory — so every
 * reader of the result is such a trainer, reading it where b is — and b
 * lives in the memory the device shares. Then no to-host job is needed:
 * kind_result_take lends b instead (device.h, device_buf_lend). */
static inline bool kind_result_stays(kind *k, const future *f, devbuf *b)
{
    return f->layout == LAYOUT_DENSE && f->gpu_pushes > 0 && f->gpu_pushes == f->completed &&
           device_buf_lendable(k->dev, b);
}
/* The result leaves the kind (b is freed): lent where it stays on the
 * device, else its host image. NULL: out of memory. */
static inline psbuf *kind_result_take(kind *k, devbuf *b, bool stays)
{
    return stays ? device_buf_lend(k->dev, b) : device_buf_take_host(k->dev, b);
}

/* A job's time for a method metric: the device's own measure where it has
 * one (cuda: GPU time between two events on its stream, the seed's
 * cuda=True), else the host's time since t0_ns. */
static inline double kind_job_ms(const device_job *j, uint64_t t0_ns)
{
    return j->gpu_ms >= 0 ? j->gpu_ms : clock_ms(t0_ns, clock_now_ns());
}

#endif
