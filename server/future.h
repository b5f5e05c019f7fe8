/* future.h — the futures layer: one module owns a future from admission to
 * retirement.
 *
 * The transport hands it each push header (futures_admit), the payload
 * chunks (futures_push_data / _direct), and the end of each push
 * (futures_push_done); it applies the admission rules (peer lost, stale
 * batch, duplicate push, shape mismatch), asks the kind to resolve a future
 * once every push is in, and tells the transport the outcome through two
 * hooks: `answer` (queue the result to every pusher) and `fail` (peer_lost
 * to every pusher). Every change of a future's state happens here (the
 * states are in pending.h); there is one retire path (futures_retire) and
 * one drain step (futures_drain) that reset, shutdown and the end of a
 * session go through while device work may still be in flight.
 */
#ifndef PSBENCH_FUTURE_H
#define PSBENCH_FUTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/kind.h"
#include "server/pending.h"
#include "shared/frame.h"
#include "shared/metrics.h"

typedef struct futures_hooks {
    /* f resolved: send `result` (borrowed) to every slot in f->pushed. */
    void (*answer)(void *ctx, future *f, psbuf *result);
    /* f failed: tell every slot in f->pushed `code` (peer_lost, or
     * device when the device failed its work) with msg. */
    void (*fail)(void *ctx, future *f, frame_errcode code, const char *msg);
    void *ctx;
    /* NULL, or the trace's (issue 42): f is handed to the kind to resolve
     * (begin; f->trace_t0_ns and f->trace_nvtx are the hook's), and the
     * kind's answer for it is back (end, before `answer` or `fail`;
     * answered: it has a result to send, not failed nor drained). */
    void (*trace)(void *ctx, future *f, bool begin, bool answered);
    void *trace_ctx;
} futures_hooks;

/* Where a future's times go (docs/protocol.md, "Server metrics"). The
 * seed's clock starts when the first push has been received whole, as its
 * RPC handler first runs once a gradient's whole message is in; psbench's
 * *_from_header figures start at the first push's header, so the first
 * push's transfer is in them. */
typedef struct futures_metrics {
    stats *batch;                 /* first push whole to the answer queued */
    stats *straggler;             /* first push whole to the last push whole */
    stats *batch_from_header;     /* first push's header to the answer queued */
    stats *straggler_from_header; /* first push's header to the last push whole */
} futures_metrics;

/* What one trainer may make the server hold (docs/protocol.md, "Bounds"):
 * its pushes waiting for their answer — how many, and their payload bytes
 * — and the distinct buckets a session may resolve. A trainer pushes a
 * batch only once it has every result of the one before, so it needs one
 * batch of its buckets; the bounds are two batches' worth (derived from
 * the job's model when the master sends it, else --max-open-pushes and
 * --max-open-bytes). A push past them is refused `too_large`. */
typedef struct futures_limits {
    uint32_t pushes;   /* per trainer slot; 0: no bound */
    uint64_t bytes;    /* per trainer slot; 0: no bound */
    uint32_t buckets;  /* distinct buckets per session; 0: no bound */
    bool first_free;   /* a trainer holding nothing may push any size (--max-payload bounds
                        * it): without the job's model one push's size is not known */
    char source[160];  /* where they come from, for the refusal's message */
} futures_limits;

typedef struct futures {
    pending_table table;
    futures_limits lim;
    uint32_t *held_n;     /* per slot: its pushes in futures not yet answered or failed */
    uint64_t *held_bytes; /* per slot: their payload bytes */
    uint32_t ntomb;       /* failed futures kept as tombstones */
    kind *k;
    uint32_t nslots;      /* trainer slots */
    futures_hooks hooks;
    futures_metrics m;
    stats **m_lag;        /* per slot: first push whole to this slot's push whole */
    uint32_t resolving;   /* futures in RESOLVING */
    uint64_t *lost;       /* bitmap over slots: connected once, gone now */
    uint32_t nlost;
    uint64_t *lost_rank;  /* per slot: its rank when it was lost */
    uint32_t first_lost;  /* the lost slot refusals name: the first lost of those
                           * still lost (the cause; others may have left after it) */
} futures;

/* m: every one of its metrics must be there. */
int futures_init(futures *t, kind *k, uint32_t nslots, const futures_hooks *h, const futures_metrics *m);
/* Drain, then free every future. */
void futures_destroy(futures *t);
/* The bounds of what one trainer may hold (futures_limits). */
void futures_set_limits(futures *t, const futures_limits *lim);
/* Where slot's lag goes (the per-trainer straggler metric; NULL: nowhere):
 * for each future, from its first push received whole to this slot's push
 * received whole, so the slowest slot's lag is the straggler figure and
 * the first slot's is 0. Futures of one push have no lag. */
void futures_set_lag_metric(futures *t, uint32_t slot, stats *m);

/* Admit a push header from slot (rank for messages) into p. ERR_NONE: p is
 * bound to its future and the payload follows (or the push is already
 * complete when the payload is empty: see *complete). Otherwise the code
 * to answer with and a reason in msg; p is untouched. */
frame_errcode futures_admit(futures *t, const frame_hdr *h, uint32_t slot, uint64_t rank, push_ctx *p,
                            char *msg, size_t len);

/* Payload of the push bound to p (see kind.h for the contracts). */
static inline uint8_t *futures_push_direct(futures *t, push_ctx *p, uint64_t off, size_t *max)
{
    return t->k->ops->push_direct(t->k, p, off, max);
}
static inline void futures_push_direct_done(futures *t, push_ctx *p, uint64_t off, size_t n)
{
    t->k->ops->push_direct_done(t->k, p, off, n);
}
static inline int futures_push_data(futures *t, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    return t->k->ops->push_data(t->k, p, off, src, n);
}
/* The whole dense payload of p from a peer's GPU memory (kind push_peer). */
static inline void futures_push_peer(futures *t, push_ctx *p, devpeer *peer, uint64_t at)
{
    t->k->ops->push_peer(t->k, p, peer, at);
}
/* The push's payload is complete: the future resolves if it was the last. */
void futures_push_done(futures *t, push_ctx *p);
/* The push was refused half-way (push_data failed): forget it. */
void futures_push_abort(futures *t, push_ctx *p);
/* The pusher disconnected half-way: its partial bytes cannot be trusted,
 * so the future fails. */
void futures_push_lost(futures *t, push_ctx *p);

/* A trainer slot's connection went away: every open future it has not
 * pushed to can never complete, and fails; so does every open future
 * whose pushers are all gone (nobody waits for it, and its memory goes
 * back). Until it is back, pushes that would open a future get peer_lost. */
void futures_member_lost(futures *t, uint32_t slot, uint64_t rank);
void futures_member_back(futures *t, uint32_t slot);

/* Wait for device work in flight; futures it finishes retire unanswered. */
void futures_drain(futures *t);
/* Between passes: drain, forget every future and resolved mark, then let
 * the kind reset (batch-update: a fresh model). Lost slots stay lost. */
void futures_reset(futures *t);
/* A new job on the same server: as reset, and no slot is lost any more. */
void futures_new_session(futures *t);

#endif
