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
 * The workloads whose client the training thread polls itself
 * (ttrace_links_here) put their frames into the compute ring too, on the
 * same lanes, beside their other spans:
 *   Synthetic     (synthetic.c) step; bucket_wait per bucket
 *   batch-update  (batch_update.c) step, forward, backward_compute; its
 *                 round with the servers as bucket 0's bucket_ready,
 *                 bucket_wait and bucket_apply (server none: every
 *                 server's)
 *   HybridModel   (hybrid.c) step, forward, backward_compute,
 *                 exposed_wait, optimizer; the dense bucket's
 *                 bucket_ready, bucket_wait and bucket_apply; and each
 *                 call the step awaits (every lookup, the seed pattern's
 *                 updates) as a bucket_wait of no bucket on lane "rpc
 *                 server R" (ttrace_rpc_lanes)
 * Each from the readings its metrics are made of: no clock is read for
 * the trace but where train.c times a bucket's apply.
 *
 * Steps: a ring's step is the batch number of the timed pass, which
 * restarts at 0 with each pass (train.h); the warm-up pass is never
 * traced: its steps are TTRACE_UNTIMED, outside every window
 * (ttrace_step_of).
 *
 * Threads: ttrace_init, the lanes (ttrace_bucket_lanes, ttrace_links,
 * ttrace_links_here, ttrace_rpc_lanes), ttrace_pass and ttrace_ship run
 * on the training thread, the one that talks to the master; the comm
 * thread reads `timed` only.
 */
#ifndef PSBENCH_TRAINER_TTRACE_H
#define PSBENCH_TRAINER_TTRACE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/control.h"
#include "shared/gpu/nvtx.h"
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
    unsigned lane_rpc[TTRACE_LINK_LANES]; /* by connection (ttrace_rpc_lanes) */
    uint32_t nrpc_lanes;
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

/* NVTX (a CUDA trainer that traces; nv: its step's ranges are on): the
 * range *open ends and the next, span next, starts (TRACE_NSPANS: none):
 * the compute lane's spans follow each other. */
static inline void ttrace_nvtx_next(bool nv, trace_nvtx_id *open, trace_span next, trace_ids ids)
{
    if (!nv)
        return;
    trace_nvtx_end(*open);
    *open = next < TRACE_NSPANS ? trace_nvtx_start(next, ids) : 0;
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

/* Lanes for the waits of cl's calls, one per connection, "rpc server R"
 * (from TTRACE_LINK_LANES - 1 on one, "rpc servers 15+"): a workload
 * that awaits calls to its servers, each answered on its own (the
 * HybridModel's lookups and updates). With them a node has at most one bucket lane
 * besides (the lanes' budget: TRACE_LANES_MAX). */
void ttrace_rpc_lanes(ttrace *t, const struct client *cl);
/* The lane of the calls on connection i. */
static inline unsigned ttrace_rpc_lane(const ttrace *t, size_t i)
{
    return t->lane_rpc[i < t->nrpc_lanes ? i : t->nrpc_lanes - 1];
}

/* The training thread's pass begins: timed or not (the warm-up). */
void ttrace_pass(ttrace *t, bool timed);

/* Ships the spans recorded since the last ship to the master over c
 * (`trace` messages, tracejob_ship); final: the last part (after it,
 * nothing more is shipped). A failure is a warning, never the run's. */
void ttrace_ship(ttrace *t, ctl_conn *c, bool final);

#endif
