/* pending.h — the futures of a server: one entry per (batch, bucket).
 *
 * An entry holds the accumulator, which trainer slots have pushed, when the
 * first push arrived, and whether it failed. It resolves when all expected
 * trainers have completed their push. The table also remembers, per bucket,
 * the newest batch already resolved, so that a late push is answered
 * `stale_batch` instead of opening a future that can never complete.
 */
#ifndef PSBENCH_PENDING_H
#define PSBENCH_PENDING_H

#include <stdbool.h>
#include <stdint.h>

#include "shared/frame.h"
#include "server/bufpool.h"
#include "server/reduce.h"

typedef struct pending_entry {
    uint64_t batch, bucket;
    frame_layout layout;
    uint64_t count;      /* dense: elements */
    uint64_t rows, cols; /* sparse: table shape */
    uint32_t started;    /* pushes whose header was accepted */
    uint32_t completed;  /* pushes whose payload has fully arrived */
    uint64_t *pushed;    /* bitmap over trainer slots: header accepted */
    bool failed;         /* a pusher died mid-payload or left for good */
    bool resolving;      /* handed to the backend, waiting for it */
    uint64_t t_first_ns; /* first push header */
    uint64_t t_last_ns;  /* the last push's payload complete */
    psbuf *acc;          /* dense accumulator / result (kind average) */
    sparse_acc *sacc;    /* sparse accumulator (kind average) */
    psbuf **stored;      /* per slot: the raw push (kind average-batch) */
    void *backend_state; /* owned by the backend */
    struct pending_entry *next; /* hash chain */
} pending_entry;

typedef struct pending_table {
    pending_entry **heads;
    size_t nheads; /* power of two */
    size_t count;
    uint32_t nslots; /* trainer slots, for bitmaps */
    /* Per bucket: newest resolved batch + 1 (0 = none). */
    struct pending_mark {
        uint64_t bucket, next_batch;
        bool used;
    } *marks;
    size_t nmarks, marks_cap;
    /* Entries that resolved, kept for the next batch's futures: a round of
     * K buckets would otherwise allocate and free 2K blocks. */
    pending_entry *spare;
    size_t nspare;
} pending_table;

int pending_init(pending_table *t, uint32_t nslots);
/* Frees every entry with pending_free_fn (may be NULL). */
void pending_destroy(pending_table *t, void (*free_fn)(pending_entry *, void *), void *arg);
pending_entry *pending_find(pending_table *t, uint64_t batch, uint64_t bucket);
/* True when (batch, bucket) was resolved already or is older than the
 * newest resolved batch of that bucket. */
bool pending_is_stale(const pending_table *t, uint64_t batch, uint64_t bucket);
/* New zeroed entry in the table, or NULL on allocation failure. */
pending_entry *pending_create(pending_table *t, uint64_t batch, uint64_t bucket);
/* Unlink e (does not free its buffers: that is the caller's). If
 * `resolved`, record it for stale detection. */
void pending_remove(pending_table *t, pending_entry *e, bool resolved);
void pending_entry_free(pending_entry *e);
/* Like pending_entry_free, but keeps e for a later pending_create. */
void pending_recycle(pending_table *t, pending_entry *e);

static inline bool pending_has_slot(const pending_entry *e, uint32_t slot)
{
    return (e->pushed[slot / 64] >> (slot % 64)) & 1;
}
static inline void pending_set_slot(pending_entry *e, uint32_t slot)
{
    e->pushed[slot / 64] |= (uint64_t)1 << (slot % 64);
}
static inline void pending_clear_slot(pending_entry *e, uint32_t slot)
{
    e->pushed[slot / 64] &= ~((uint64_t)1 << (slot % 64));
}

/* Visit every entry (the callback may not remove entries). */
void pending_foreach(pending_table *t, void (*fn)(pending_entry *, void *), void *arg);
/* Forget every resolved mark (a new session starts at batch 0). */
void pending_forget_marks(pending_table *t);

#endif
