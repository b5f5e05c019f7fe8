/* pending.h — the index of a server's futures: one per (batch, bucket).
 *
 * A plain container: a hash table of futures by key, recycled entries, and
 * the resolved marks. What a future means and when it changes state is
 * future.c's. The table also remembers, per bucket,
 * the newest batch already resolved, so that a late push is answered
 * `stale_batch` instead of opening a future that can never complete.
 */
#ifndef PSBENCH_PENDING_H
#define PSBENCH_PENDING_H

#include <stdbool.h>
#include <stdint.h>

#include "shared/frame.h"
#include "shared/half.h"

/* A future's life (future.c owns every change of state):
 *
 *   OPEN ──(every push complete)──> RESOLVING ──(device done)──> DONE
 *     │                                                   (answered, retired)
 *     └──(a pusher lost)──> FAILED (a tombstone until the session ends)
 *
 * A RESOLVING future's buffers belong to its kind's device until the
 * completion arrives; drain (reset, shutdown, end of session) marks such
 * futures cancelled and waits for the device, so they retire unanswered. */
typedef enum future_state { FUTURE_OPEN = 0, FUTURE_RESOLVING, FUTURE_DONE, FUTURE_FAILED } future_state;

struct push_ctx;

typedef struct future {
    uint64_t batch, bucket; /* the key: batch-update keys by its round */
    future_state state;
    bool cancelled;      /* drained while RESOLVING: retire without answering */
    frame_layout layout;
    half_type dtype;     /* the pushes' element type on the wire (narrow pushes: f16, bf16; the
                          * accumulation is f32 whatever it is, and the answer goes back in it) */
    uint64_t count;      /* dense: elements */
    uint64_t rows, cols; /* sparse: table shape */
    uint32_t started;    /* pushes whose header was accepted */
    uint32_t completed;  /* pushes whose payload has fully arrived */
    uint64_t *pushed;    /* bitmap over trainer slots: header accepted */
    uint64_t *slot_bytes; /* per trainer slot: its push's payload bytes (what it holds here) */
    uint64_t *gpu_pushed; /* bitmap over trainer slots: its push came from its GPU memory (CUDA IPC) */
    bool holds;          /* its pushes count against their slots' bounds (future.c) */
    uint64_t t_first_ns; /* the first push's header admitted */
    uint64_t t_first_whole_ns; /* the first push received whole (its payload complete);
                                * 0 until then */
    uint64_t t_last_ns;  /* the last push received whole */
    uint64_t t_resolve_ns; /* handed to the kind to resolve */
    uint64_t round;      /* batch-update: updates applied once this resolves; 0: none */
    uint32_t gpu_pushes; /* pushes folded from a trainer's GPU memory (CUDA IPC): when all were, every
                          * reader of the result reads it there, and no host copy of it is made */
    uint64_t trace_t0_ns, trace_nvtx; /* its resolve, for the trace: futures_hooks.trace's */
    struct push_ctx *pushes; /* pushes streaming into it now */
    void *kstate;        /* the kind's per-future state */
    struct future *next; /* hash chain */
} future;

typedef struct pending_table {
    future **heads;
    size_t nheads; /* power of two */
    size_t count;
    uint32_t nslots; /* trainer slots, for bitmaps */
    /* Per bucket: the newest batch resolved. A mark exists only once a
     * batch of the bucket has resolved, so every batch number, 2^64-1
     * included, can be recorded without a wrap (a "newest + 1" would turn
     * 2^64-1 into 0, and the bucket would forget what it had answered). */
    struct pending_mark {
        uint64_t bucket, newest;
    } *marks;
    size_t nmarks, marks_cap;
    /* The marks' index by bucket: open addressing, mark number + 1 (0:
     * empty), mark_slots a power of two at least twice marks_cap. A model
     * may have thousands of buckets: a linear scan per push would cost
     * their square per batch. */
    uint32_t *mark_idx;
    size_t mark_slots;
    /* Entries that resolved, kept for the next batch's futures: a round of
     * K buckets would otherwise allocate and free 2K blocks. */
    future *spare;
    size_t nspare;
} pending_table;

int pending_init(pending_table *t, uint32_t nslots);
/* Frees every entry with pending_free_fn (may be NULL). */
void pending_destroy(pending_table *t, void (*free_fn)(future *, void *), void *arg);
/* The same, but the table stays usable: empty, with no resolved marks (a
 * new pass or session starts at batch 0). Allocates nothing. */
void pending_clear(pending_table *t, void (*free_fn)(future *, void *), void *arg);
future *pending_find(pending_table *t, uint64_t batch, uint64_t bucket);
/* True when (batch, bucket) was resolved already or is older than the
 * newest resolved batch of that bucket. */
bool pending_is_stale(const pending_table *t, uint64_t batch, uint64_t bucket);
/* True when some batch of `bucket` has resolved (the bucket is known). */
bool pending_has_mark(const pending_table *t, uint64_t bucket);
/* New zeroed entry in the table, or NULL on allocation failure. */
future *pending_create(pending_table *t, uint64_t batch, uint64_t bucket);
/* Unlink e (does not free its buffers: that is the caller's). If
 * `resolved`, record it for stale detection. */
void pending_remove(pending_table *t, future *e, bool resolved);
void pending_free_entry(future *e);
/* Like pending_free_entry, but keeps e for a later pending_create. */
void pending_recycle(pending_table *t, future *e);

static inline bool pending_has_slot(const future *e, uint32_t slot)
{
    return (e->pushed[slot / 64] >> (slot % 64)) & 1;
}
static inline void pending_set_slot(future *e, uint32_t slot)
{
    e->pushed[slot / 64] |= (uint64_t)1 << (slot % 64);
}
/* Slot's push into e came from its GPU memory (CUDA IPC): it reads the
 * result there too. */
static inline bool pending_gpu_slot(const future *e, uint32_t slot)
{
    return (e->gpu_pushed[slot / 64] >> (slot % 64)) & 1;
}
static inline void pending_set_gpu_slot(future *e, uint32_t slot)
{
    if (!pending_gpu_slot(e, slot))
        e->gpu_pushes++;
    e->gpu_pushed[slot / 64] |= (uint64_t)1 << (slot % 64);
}
static inline void pending_clear_slot(future *e, uint32_t slot)
{
    if (pending_gpu_slot(e, slot)) {
        e->gpu_pushes--;
        e->gpu_pushed[slot / 64] &= ~((uint64_t)1 << (slot % 64));
    }
    e->pushed[slot / 64] &= ~((uint64_t)1 << (slot % 64));
}

/* Visit every entry (the callback may not remove entries). */
void pending_foreach(pending_table *t, void (*fn)(future *, void *), void *arg);

#endif
