/* ttrace.h — the trainer's trace (issue 42): its trace node, made from
 * the master's assignment and the trainer's own --trace flags
 * (shared/tracejob.h), its rings and lanes, and its spans shipped to the
 * master after each report.
 *
 * Rings, one per writer thread (shared/trace.h: a single producer each):
 *   compute  the training thread: forward, backward_compute,
 *            exposed_wait, optimizer, step (lane "compute") and each
 *            bucket's bucket_ready, bucket_wait, bucket_apply (lane
 *            "bucket K": a bucket's three spans follow each other, the
 *            buckets overlap; buckets from TTRACE_BUCKET_LANES - 1 on
 *            share the last lane, "bucket 29+")
 *   comm     rpc_hook's communication thread (comm.c, client.c):
 *            frame_out per push, lane "to server R"; frame_in per answer,
 *            lane "from server R" (links from TTRACE_LINK_LANES - 1 on
 *            share the last pair, "to servers 15+" / "from servers 15+")
 *
 * The Synthetic model (synthetic.c) polls its client on the training
 * thread: its step, bucket_wait and frame spans all go into the compute
 * ring, on the same lanes.
 *
 * Steps: a ring's step is the batch number of the timed pass, which
 * restarts at 0 with each pass (train.h); the warm-up pass is never
 * traced: its steps are TTRACE_UNTIMED, outside every window
 * (ttrace_step_of).
 *
 * Threads: ttrace_init, the lanes (ttrace_bucket_lanes, ttrace_links),
 * ttrace_pass and ttrace_ship run on the training thread, the one that
 * talks to the master; the comm thread reads `timed` only.
 */
#ifndef PSBENCH_TRAINER_TTRACE_H
#define PSBENCH_TRAINER_TTRACE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/control.h"
#include "shared/trace.h"
#include "shared/tracejob.h"

#define TTRACE_BUCKET_LANES 30 /* lanes for buckets: "bucket 0" .. "bucket 28", "bucket 29+" */
#define TTRACE_LINK_LANES 16   /* lane pairs for links: ... "to servers 15+", "from servers 15+" */

/* A step outside every window: trace windows end at TRACE_STEP_MAX, and
 * TRACE_NO_STEP (every step) is another value. The warm-up pass's. */
#define TTRACE_UNTIMED (TRACE_STEP_MAX + 1)

typedef struct ttrace {
    trace_node *node;           /* owned; NULL: the trainer does not trace */
    trace_ring *compute, *comm; /* the node's (NULL: not tracing) */
    bool comm_taken;            /* the comm ring is one hook's (ttrace_links) */
    unsigned lane_compute;
    unsigned lane_bucket[TTRACE_BUCKET_LANES];
    uint32_t nbucket_lanes;
    int32_t rank;      /* the trainer's, for the spans' ids */
    atomic_bool timed; /* the pass running is the timed one */
    bool nvtx;         /* NVTX ranges too (a CUDA trainer that traces) */
    trace_cursor cur;  /* what was shipped */
    bool final_sent;   /* the last part went: nothing more is shipped */
} ttrace;

/* Whether r keeps spans now: trace_add's own gate, for the few places
 * that read the clock only for a span (nothing is read when off). */
static inline bool ttrace_open(const trace_ring *r)
{
    return __builtin_expect(r != NULL && r->gate == TRACE_GATE_OPEN, 0);
}

/* The trace step of the pass's batch: itself in the timed pass, else
 * outside every window. */
static inline uint64_t ttrace_step_of(const ttrace *t, uint64_t batch)
{
    if (!atomic_load_explicit(&t->timed, memory_order_relaxed) || batch > TRACE_STEP_MAX)
        return TTRACE_UNTIMED;
    return batch;
}

/* The trainer's trace from its assignment (the master's `trace`) and its
 * own flags (own: NULL for none); cuda: it computes on a CUDA GPU (NVTX
 * ranges too). Off, t holds no node and every ring is NULL. 0, or -1 with
 * err (a bad `trace` from the master, out of memory). */
int ttrace_init(ttrace *t, const json_t *assign, const trace_flags *own, uint32_t rank, bool cuda, char *err,
                size_t errlen);
void ttrace_free(ttrace *t);
static inline bool ttrace_on(const ttrace *t) { return t && t->node; }

/* Lanes for n buckets (the most a layout has): lane_bucket[0..). */
void ttrace_bucket_lanes(ttrace *t, uint32_t n);
/* The lane of bucket k's spans. */
static inline unsigned ttrace_bucket_lane(const ttrace *t, uint32_t k)
{
    return t->lane_bucket[k < t->nbucket_lanes ? k : t->nbucket_lanes - 1];
}

/* The comm ring and a client's lanes (client.h: its trace fields), for
 * the hook whose thread polls that client; a second hook gets none
 * (NULL: its client records nothing). */
struct client;
trace_ring *ttrace_links(ttrace *t, struct client *cl);
/* The same for a client the training thread polls itself (the Synthetic
 * model's): its frames go into the compute ring. */
trace_ring *ttrace_links_here(ttrace *t, struct client *cl);

/* The training thread's pass begins: timed or not (the warm-up). */
void ttrace_pass(ttrace *t, bool timed);

/* Ships the spans recorded since the last ship to the master over c
 * (`trace` messages, tracejob_ship); final: the last part (after it,
 * nothing more is shipped). A failure is a warning, never the run's. */
void ttrace_ship(ttrace *t, ctl_conn *c, bool final);

#endif
