/* trace.h — a node's trace: spans recorded into bounded rings, one per
 * writer thread, shipped to the master as compact JSON (issue 42).
 *
 * A span is a named interval [start_ns, end_ns] of the node's
 * CLOCK_MONOTONIC (clock_now_ns), on a lane (which loop, thread or device
 * stream of the node drew it; each lane has a name registered once), with
 * the ids of the work it belongs to: batch, bucket, trainer rank, server
 * rank (TRACE_NONE where one does not apply). The master merges every
 * node's spans into one timeline (master/trace_out.h), its clocks aligned
 * by offsets (shared/clockoff.h).
 *
 * Recording. A node makes one trace_node (its role, rank, whether it
 * traces, each ring's capacity, the window of steps), registers its lanes,
 * and one trace_ring per thread that records: a ring has a single
 * producer, its own thread, so that recording takes no lock. The thread
 * tells its ring which step it is in (trace_ring_step); spans are kept
 * only while tracing is on and the step is in the window [first, last].
 * A full ring keeps the oldest spans of the window and counts the rest
 * dropped (the first traced steps stay whole, rather than the last ones
 * with a hole before them); trace_drop_message says so in one sentence.
 *
 * Off (no node, or a node created off), trace_add is one test of the
 * ring's gate, inlined: bench/trace_cost.c measures it.
 *
 * Threads: the node, its lanes and its rings are set up by one thread
 * before any recording; each ring is then written by its thread only;
 * trace_node_snapshot may run on any thread at any time (it copies what
 * each ring has published), trace_node_reset only while no ring records.
 */
#ifndef PSBENCH_TRACE_H
#define PSBENCH_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* ---- the span names ---------------------------------------------------------
 *
 * Declared once: X(ID, "name", "category", flow), where flow is the span's
 * place in a bucket's life from trainer to server and back (the flow
 * events that join its spans in the merged trace go through them in that
 * order where their times tie), 0 for a span no flow goes through (it
 * encloses others, or belongs to no bucket). */
#define TRACE_SPANS(X)                                                                                                 \
    /* trainer: its compute loop */                                                                                    \
    X(FORWARD, "forward", "compute", 0)                                                                                \
    X(BACKWARD_COMPUTE, "backward_compute", "compute", 0)                                                              \
    X(OPTIMIZER, "optimizer", "compute", 0)                                                                            \
    X(STEP, "step", "compute", 0)                                                                                      \
    X(EXPOSED_WAIT, "exposed_wait", "wait", 0)                                                                         \
    /* trainer: a bucket, ready -> pushed, pushed -> answer in (encloses the round trip), applied */                   \
    X(BUCKET_READY, "bucket_ready", "bucket", 1)                                                                       \
    X(BUCKET_WAIT, "bucket_wait", "bucket", 0)                                                                         \
    X(BUCKET_APPLY, "bucket_apply", "bucket", 9)                                                                       \
    /* trainer: its communication thread */                                                                            \
    X(FRAME_OUT, "frame_out", "comm", 2)                                                                               \
    X(FRAME_IN, "frame_in", "comm", 8)                                                                                 \
    /* server */                                                                                                       \
    X(PUSH_RECV, "push_recv", "server", 3)                                                                             \
    X(FOLD, "fold", "server", 4)                                                                                       \
    X(DEVICE_JOB, "device_job", "device", 5) /* on a CUDA stream: enqueue -> completion */                             \
    X(RESOLVE, "resolve", "server", 6)                                                                                 \
    X(ANSWER_OUT, "answer_out", "server", 7)                                                                           \
    /* master */                                                                                                       \
    X(PHASE, "phase", "master", 0)

typedef enum trace_span {
#define TRACE_X_ENUM(id, name, cat, flow) TRACE_##id,
    TRACE_SPANS(TRACE_X_ENUM)
#undef TRACE_X_ENUM
        TRACE_NSPANS
} trace_span;

const char *trace_span_name(trace_span s);     /* s < TRACE_NSPANS */
const char *trace_span_category(trace_span s); /* s < TRACE_NSPANS */
unsigned trace_span_flow(trace_span s);        /* s < TRACE_NSPANS; 0: in no flow */
int trace_span_lookup(const char *name);       /* the span of that name, or -1 */

/* ---- roles, ids, windows ----------------------------------------------------- */

typedef enum trace_role { TRACE_TRAINER, TRACE_SERVER, TRACE_MASTER, TRACE_NROLES } trace_role;
const char *trace_role_name(trace_role r); /* "trainer", "server", "master" */
int trace_role_lookup(const char *name);   /* the role of that name, or -1 */

/* An id that does not apply (a master's phase has no bucket, a server's
 * resolve no single trainer). Batches and buckets past INT64_MAX (the
 * protocol's counters are 64-bit) are recorded as none: JSON integers stop
 * there. */
#define TRACE_NONE (-1)

typedef struct trace_ids {
    int64_t batch, bucket;
    int32_t trainer, server;
} trace_ids;

/* Every id none. */
static inline trace_ids trace_ids_none(void) { return (trace_ids){TRACE_NONE, TRACE_NONE, TRACE_NONE, TRACE_NONE}; }
/* The ids from the protocol's counters and ranks (TRACE_NONE passes through;
 * a batch or bucket past INT64_MAX becomes none). */
static inline trace_ids trace_ids_make(int64_t batch, int64_t bucket, int32_t trainer, int32_t server)
{
    return (trace_ids){batch < 0 ? TRACE_NONE : batch, bucket < 0 ? TRACE_NONE : bucket,
                       trainer < 0 ? TRACE_NONE : trainer, server < 0 ? TRACE_NONE : server};
}

/* A writer between steps (the master's phases, a server between jobs):
 * its spans are kept whenever tracing is on, whatever the window. */
#define TRACE_NO_STEP UINT64_MAX

/* The steps traced: first..last, both included (--trace-steps A:B), at
 * most TRACE_STEP_MAX (JSON carries them as integers). */
typedef struct trace_window {
    uint64_t first, last;
} trace_window;
#define TRACE_STEP_MAX ((uint64_t)INT64_MAX)
#define TRACE_ALL_STEPS ((trace_window){0, TRACE_STEP_MAX})

/* "A:B" (A <= B), "A:" (A onwards) or "A" (that step alone), decimal.
 * 0, or -1 with the reason in err. */
int trace_window_parse(const char *s, trace_window *w, char *err, size_t errlen);

/* ---- events ---------------------------------------------------------------- */

typedef struct trace_event {
    uint64_t start_ns, end_ns; /* the node's CLOCK_MONOTONIC; end_ns >= start_ns */
    trace_ids ids;
    uint16_t span; /* trace_span */
    uint16_t lane; /* < the node's lane count */
} trace_event;

/* Bounds, on a node and on what a decoder accepts. */
#define TRACE_LANES_MAX 64
#define TRACE_RINGS_MAX 64
#define TRACE_NAME_MAX 48                   /* a lane's or a ring's name, with its NUL */
#define TRACE_CAPACITY_MAX (1u << 22)       /* spans a ring holds: 4 Mi (192 MiB) */
#define TRACE_EVENTS_MAX (1u << 24)         /* spans in one node's dump */
#define TRACE_JSON_MAX ((size_t)1024 << 20) /* bytes of one node's JSON */

/* ---- recording ----------------------------------------------------------------- */

typedef struct trace_node trace_node; /* opaque */

typedef struct trace_conf {
    trace_role role;
    uint32_t rank;
    bool on;             /* off: the node records nothing (and allocates no ring buffer) */
    uint32_t capacity;   /* spans each ring holds, 1..TRACE_CAPACITY_MAX (--trace-buffer) */
    trace_window window; /* the steps traced (--trace-steps) */
} trace_conf;

/* NULL with the reason in err: a bad conf, or out of memory. */
trace_node *trace_node_new(const trace_conf *conf, char *err, size_t errlen);
void trace_node_free(trace_node *n); /* its rings with it; NULL is a no-op */
bool trace_node_on(const trace_node *n);

/* The lane called name: its number (the same for the same name), or -1
 * (no room: TRACE_LANES_MAX; an empty name or one of TRACE_NAME_MAX bytes
 * or more). */
int trace_lane(trace_node *n, const char *name);
size_t trace_lane_count(const trace_node *n);
const char *trace_lane_name(const trace_node *n, size_t lane); /* lane < trace_lane_count */

/* Where a ring stands: the gate trace_add tests. Off: the node is off;
 * outside: the ring's step is not in the window (or none was set yet);
 * open: spans are kept (or counted dropped once the ring is full). */
typedef enum trace_gate { TRACE_GATE_OFF, TRACE_GATE_OUTSIDE, TRACE_GATE_OPEN } trace_gate;

/* One writer thread's ring. The fields are trace.c's: they are in the
 * header only so that trace_add's gate inlines. */
typedef struct trace_ring {
    trace_gate gate; /* written by the ring's thread only */
    uint64_t step;   /* the step trace_ring_step set (TRACE_NO_STEP: between steps) */
    trace_node *node;
    trace_event *ev; /* capacity spans (owned); NULL when the node is off */
    uint32_t capacity;
    _Atomic uint32_t n; /* spans kept: [0, n) are published (release) */
    _Atomic uint64_t dropped;
    uint64_t drop_first; /* the step of the first dropped span (written once, published by dropped) */
    /* The step of the last dropped span: rewritten at every drop while a
     * reader may look, so atomic; a reader may see a later drop's step
     * than its count of dropped says, never an earlier one than the first. */
    _Atomic uint64_t drop_last;
    char name[TRACE_NAME_MAX];
} trace_ring;

/* A ring for one writer thread (name: the thread, for messages), owned by
 * the node. NULL: TRACE_RINGS_MAX rings already, a bad name, or out of
 * memory. Its gate starts outside: nothing is kept before trace_ring_step. */
trace_ring *trace_ring_add(trace_node *n, const char *name);

/* The step the ring's thread is in from now on (TRACE_NO_STEP: between
 * steps); called by that thread. */
void trace_ring_step(trace_ring *r, uint64_t step);

/* Out of line: keeps the span, or counts it dropped when the ring is full.
 * Called through trace_add only. */
void trace_ring_put(trace_ring *r, trace_span s, unsigned lane, uint64_t start_ns, uint64_t end_ns, trace_ids ids);

/* Records span s on lane from start_ns to end_ns (clock_now_ns readings of
 * this thread's ring; end_ns >= start_ns). r may be NULL (tracing not set
 * up): nothing is recorded. */
static inline void trace_add(trace_ring *r, trace_span s, unsigned lane, uint64_t start_ns, uint64_t end_ns,
                             trace_ids ids)
{
    if (__builtin_expect(r == NULL || r->gate != TRACE_GATE_OPEN, 1))
        return;
    trace_ring_put(r, s, lane, start_ns, end_ns, ids);
}

uint32_t trace_ring_count(const trace_ring *r);   /* spans kept */
uint64_t trace_ring_dropped(const trace_ring *r); /* spans dropped */

/* Every ring emptied and its drops forgotten, gates outside (the next run;
 * no ring may be recording). */
void trace_node_reset(trace_node *n);

/* ---- a node's trace as data: snapshot, JSON, decode ------------------------------ */

/* What was dropped: spans, and the steps of the first and last of them. */
typedef struct trace_drops {
    uint64_t count;
    uint64_t first_step, last_step; /* meaningful when count > 0 */
} trace_drops;

typedef struct trace_dump {
    trace_role role;
    uint32_t rank;
    trace_window window;
    uint32_t capacity; /* each ring's */
    size_t nlanes;
    char lane[TRACE_LANES_MAX][TRACE_NAME_MAX];
    trace_event *ev; /* owned */
    size_t nev;
    trace_drops drops; /* every ring's together */
} trace_dump;

/* A copy of what the node's rings hold now, ring after ring, each in
 * recording order. NULL: out of memory. */
trace_dump *trace_node_snapshot(const trace_node *n);
void trace_dump_free(trace_dump *d); /* NULL is a no-op */

/* Where a reader of the node's rings stands: the spans of each ring it has
 * taken. Zeroed: nothing taken yet. */
typedef struct trace_cursor {
    uint32_t taken[TRACE_RINGS_MAX];
} trace_cursor;
/* As trace_node_snapshot, only the spans published since cur (NULL: every
 * span), and cur moved past them: a node ships its trace in parts, as it
 * goes. Drops are the rings' totals. A ring reset since (trace_node_reset)
 * is read from its start. May run on any thread, as the snapshot. */
trace_dump *trace_node_snapshot_since(const trace_node *n, trace_cursor *cur);

/* A dump with no span (NULL: out of memory). */
trace_dump *trace_dump_empty(trace_role role, uint32_t rank, trace_window window, uint32_t capacity);
/* more's spans after into's, its lanes (a node's lanes only grow: into's
 * must be their first ones) and its drops (totals) in place of into's:
 * the master puts a node's parts together. 0, or -1 with the reason (a
 * part of another node, another window or ring size, lanes that do not
 * follow, over TRACE_EVENTS_MAX, out of memory); into unchanged then. */
int trace_dump_append(trace_dump *into, const trace_dump *more, char *err, size_t errlen);

/* The dump as compact JSON for the master (malloc'd; NULL: out of memory):
 * {"v":1,"role":"trainer","rank":0,"window":[A,B],"capacity":N,
 *  "lanes":["main","comm"],"names":["forward",...],
 *  "dropped":{"count":n,"first_step":s,"last_step":s},"t0":ns,
 *  "events":[[name,lane,start-t0,end-start,batch,bucket,trainer,server],...]}
 * name indexes "names" (every span name this build knows), ids are -1 for
 * none, times integers of ns. */
char *trace_dump_encode(const trace_dump *d);
/* The same document as a JSON value, for count spans from the first'th
 * (a part of the dump; first + count <= d->nev). NULL: out of memory. */
json_t *trace_dump_json(const trace_dump *d, size_t first, size_t count);

/* The dump that JSON encodes (len bytes; NUL not needed), or NULL with the
 * reason in err: not JSON, over a bound, a field missing or of the wrong
 * type, a span name this build does not know, a lane or name index out of
 * range, end before start, an id below -1. */
trace_dump *trace_dump_decode(const char *json, size_t len, char *err, size_t errlen);
/* The same from the JSON value (borrowed). */
trace_dump *trace_dump_from_json(const json_t *doc, char *err, size_t errlen);

/* The sentence for drops, into buf; NULL when nothing was dropped:
 * "trace: 12,345 spans of steps 10..20 dropped: the ring holds 65,536;
 * raise --trace-buffer". who (NULL: none) goes after "trace", as in
 * "trace of trainer 0: ...". */
const char *trace_drop_message(const trace_drops *d, uint32_t capacity, const char *who, char *buf, size_t len);
/* The drops of one ring so far. */
trace_drops trace_ring_drops(const trace_ring *r);

#endif
