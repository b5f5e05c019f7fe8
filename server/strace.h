/* strace.h — a server's trace (issue 42): its spans, recorded on the
 * reactor thread into one ring, shipped to the master over the control
 * link (shared/tracejob.h).
 *
 * What a server records, per push and per future (docs/results.md, "The
 * trace"), each with the push's batch and bucket, the trainer's rank
 * (none for a resolve) and the server's rank:
 *
 *   push_recv   a push frame from its header (decoded) to its payload in;
 *               a payload in shared memory or GPU memory: the frame's
 *               handling. Embedding: a lookup or update frame.
 *   fold        the push's bytes handed to the kind, from the first
 *               chunk's start to the last one's end (the average kind
 *               folds as the bytes arrive; average-batch and batch-update
 *               keep them for the resolve). Embedding: the call handed to
 *               the kind until it is applied.
 *   device_job  a job on a CUDA stream (the cuda device, and fake-cuda),
 *               from its submission to its completion seen by the reactor,
 *               on the lane "cuda stream".
 *   resolve     the future's last push in to its answer ready.
 *   answer_out  an answer frame (result; embedding: rows, updated) to one
 *               trainer, from queued to its last byte in the socket (read
 *               in place: its header).
 *
 * Every server thread that records is the reactor's (a device's jobs
 * complete there too), hence one ring, "reactor". Lanes: "reactor", and
 * "cuda stream" on a cuda device.
 *
 * Which spans are kept: none before the timed pass (the master's `reset`
 * after the warm-up says it began: strace_timed), then those of the
 * batches in the window (--trace-steps; a server has no steps of its own:
 * batches restart at 0 in the timed pass, so batch N is step N). The ring's
 * step is set to the span's batch as it is recorded.
 *
 * On a CUDA device (not fake-cuda) the same spans are NVTX ranges too
 * (shared/gpu/nvtx.h), for Nsight Systems: a range begins where the span
 * does (strace_begin) and ends where it is recorded.
 *
 * Off (the assignment and the flags leave the trace off), node and ring
 * are NULL and every call here is one test.
 */
#ifndef PSBENCH_SERVER_STRACE_H
#define PSBENCH_SERVER_STRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/devspec.h"
#include "shared/gpu/nvtx.h"
#include "shared/trace.h"
#include "shared/tracejob.h"

typedef struct strace {
    trace_node *node; /* owned; NULL: no trace */
    trace_ring *ring; /* the reactor's (the node's); NULL: no trace */
    unsigned lane_reactor;
    unsigned lane_stream; /* a cuda device's stream (has_stream) */
    bool has_stream;
    bool timed;          /* the timed pass has begun: spans of the window's batches are kept */
    bool nvtx;           /* NVTX ranges too (a real CUDA device) */
    int32_t rank;        /* the server's, as the ids carry it */
    trace_window window; /* the batches kept (the conf's) */
    trace_cursor cur;    /* what was shipped */
} strace;

/* An id that does not apply (a resolve's trainer, a call's bucket): ids
 * here are the protocol's unsigned counters and ranks, and any past
 * what the trace carries (INT64_MAX, INT32_MAX) is none. */
#define STRACE_NONE UINT64_MAX

/* A span begun: when (0: not kept: outside the window, before the timed
 * pass, or no trace) and its NVTX range (0: none). */
typedef struct strace_mark {
    uint64_t t0_ns;
    uint64_t nvtx;
} strace_mark;

/* The trace conf (tracejob_conf's) on this server's device: off (conf->on
 * false) leaves t inert. 0, or -1 with the reason (out of memory). */
int strace_init(strace *t, const trace_conf *conf, device_spec dev, char *err, size_t errlen);
void strace_free(strace *t);

/* Whether spans of batch are kept now. */
static inline bool strace_keeps(const strace *t, uint64_t batch)
{
    if (__builtin_expect(t->ring == NULL, 1))
        return false;
    return t->timed && batch >= t->window.first && batch <= t->window.last;
}

/* A span of batch begins now (its NVTX range with it): its mark. */
strace_mark strace_begin_slow(strace *t, trace_span s, uint64_t batch, uint64_t bucket, uint64_t trainer);
static inline strace_mark strace_begin(strace *t, trace_span s, uint64_t batch, uint64_t bucket, uint64_t trainer)
{
    if (!strace_keeps(t, batch))
        return (strace_mark){0, 0};
    return strace_begin_slow(t, s, batch, bucket, trainer);
}

/* The span m began ends at t1_ns (0: now): recorded on lane (with the
 * ids; the window decides on batch), its NVTX range ended; m is cleared.
 * Nothing when m was not kept. */
void strace_end_at(strace *t, strace_mark *m, trace_span s, unsigned lane, uint64_t t1_ns, uint64_t batch,
                   uint64_t bucket, uint64_t trainer);
static inline void strace_end(strace *t, strace_mark *m, trace_span s, unsigned lane, uint64_t batch, uint64_t bucket,
                              uint64_t trainer)
{
    if (m->t0_ns)
        strace_end_at(t, m, s, lane, 0, batch, bucket, trainer);
}

/* The span m began will not be recorded (what it timed was refused, or
 * cut off): its NVTX range ends, m is cleared. */
static inline void strace_drop(strace_mark *m)
{
    trace_nvtx_end(m->nvtx);
    *m = (strace_mark){0, 0};
}

/* The timed pass begins (the master's reset after the warm-up): spans are
 * kept from now on. */
void strace_timed(strace *t);

/* Ships the spans recorded since the last ship (tracejob_ship) through
 * send; final: the run's last. A failure is a warning: the run goes on. A
 * final ship says in a warning what the ring dropped, if anything. */
void strace_ship(strace *t, bool final, tracejob_send_fn send, void *ctx);

/* The next run (--runs): the rings emptied, the cursor back to the start,
 * and nothing kept until its timed pass. After the run's final ship. */
void strace_new_run(strace *t);

#endif
