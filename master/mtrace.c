/* mtrace.c — the master's side of the run's trace (see mtrace.h). */
#include "master/mtrace.h"
#include "master/trace_out.h"
#include "master/validate.h"
#include "master/wire.h"
#include "shared/atomicfile.h"
#include "shared/tracejob.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The master's ring holds at most this many spans (--trace-buffer, if
 * less): a run changes phase a handful of times, and each kept span has
 * its label here, so the ring and this array fill together. */
#define MTRACE_LABELS_MAX 64

/* A node's trace as its parts came in (issue 42: `trace`). */
typedef struct mtrace_got {
    trace_dump *dump; /* its parts put together (owned), NULL: none yet */
    bool final;       /* its last part is in */
    bool refused;     /* a part was refused: the rest of its trace is dropped (said once) */
} mtrace_got;

typedef struct mtrace {
    trace_node *node;  /* the master's (owned); NULL: the master does not trace (no --trace), and
                        * takes only the traces of nodes traced by hand (--out given) */
    trace_ring *ring;  /* its phases' ring (the node's) */
    int lane;          /* "phases" */
    const char *phase; /* the phase now (static), and since when (the master's clock, ns) */
    uint64_t phase_ns;
    const char *label[MTRACE_LABELS_MAX]; /* the i-th kept span's phase (static strings) */
    size_t nlabels;
    mtrace_got *trainer, *server; /* by rank: set.ntrainer and set.nserver entries (owned) */
    /* mtrace_gathered's answer: one entry per process, rebuilt at each call
     * (owned, 1 + ntrainer + nserver of each). */
    trace_out_node *out;
    trace_dump *empty, *mine;
} mtrace;

/* The books of the nodes' traces, for a master that takes them: with
 * --trace, or with --out alone (a node traced by hand). */
static int mtrace_books(mtrace *t, const master *m, char *err, size_t errlen)
{
    size_t procs = 1 + (size_t)m->set.ntrainer + m->set.nserver;
    t->trainer = calloc(m->set.ntrainer ? m->set.ntrainer : 1, sizeof *t->trainer);
    t->server = calloc(m->set.nserver ? m->set.nserver : 1, sizeof *t->server);
    t->out = calloc(procs, sizeof *t->out);
    t->empty = calloc(procs, sizeof *t->empty);
    if (!t->trainer || !t->server || !t->out || !t->empty) {
        snprintf(err, errlen, "trace: out of memory");
        return -1;
    }
    return 0;
}

/* The master's own node and its phases' ring (--trace). */
static int mtrace_own(mtrace *t, const master *m, char *err, size_t errlen)
{
    trace_conf conf = {.role = TRACE_MASTER,
                       .rank = 0,
                       .on = true,
                       .capacity = m->set.trace_buffer < MTRACE_LABELS_MAX ? m->set.trace_buffer : MTRACE_LABELS_MAX,
                       .window = m->set.trace_steps};
    t->node = trace_node_new(&conf, err, errlen);
    t->lane = t->node ? trace_lane(t->node, "phases") : -1;
    t->ring = t->lane >= 0 ? trace_ring_add(t->node, "phases") : NULL;
    if (!t->ring) {
        if (t->node)
            snprintf(err, errlen, "trace: cannot make the master's phases ring");
        return -1;
    }
    /* The phases are between steps: kept whatever the window. */
    trace_ring_step(t->ring, TRACE_NO_STEP);
    t->phase = run_state_phase(m->state);
    t->phase_ns = clock_now_ns();
    return 0;
}

static void mtrace_forget_nodes(mtrace *t, const master *m)
{
    for (uint32_t r = 0; r < m->set.ntrainer; r++) {
        trace_dump_free(t->trainer[r].dump);
        t->trainer[r] = (mtrace_got){0};
    }
    for (uint32_t r = 0; r < m->set.nserver; r++) {
        trace_dump_free(t->server[r].dump);
        t->server[r] = (mtrace_got){0};
    }
}

static void mtrace_destroy(mtrace *t, const master *m)
{
    if (!t)
        return;
    if (t->trainer && t->server)
        mtrace_forget_nodes(t, m);
    trace_dump_free(t->mine);
    trace_node_free(t->node);
    free(t->trainer);
    free(t->server);
    free(t->out);
    free(t->empty);
    free(t);
}

int mtrace_init(master *m, char *err, size_t errlen)
{
    assert(!m->trace);
    if (!m->set.trace && !m->set.out_dir)
        return 0;
    mtrace *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "trace: out of memory");
        return -1;
    }
    if (mtrace_books(t, m, err, errlen) < 0 || (m->set.trace && mtrace_own(t, m, err, errlen) < 0)) {
        mtrace_destroy(t, m);
        return -1;
    }
    m->trace = t;
    return 0;
}

void mtrace_free(master *m)
{
    mtrace_destroy(m->trace, m);
    m->trace = NULL;
}

/* The master traces (--trace): its phases, the clocks, every node's spans. */
static bool mtrace_tracing(const master *m) { return m->trace && m->trace->node; }

json_t *mtrace_assign_json(const master *m)
{
    return mtrace_tracing(m) ? tracejob_assign_json(m->set.trace_steps, m->set.trace_buffer) : NULL;
}

/* The span of the phase now, up to now, with its label. */
static void mtrace_close_phase(mtrace *t, uint64_t now)
{
    uint32_t before = trace_ring_count(t->ring);
    trace_add(t->ring, TRACE_PHASE, (unsigned)t->lane, t->phase_ns, now, trace_ids_none());
    /* A full ring counts the span dropped rather than keep it: a label
     * only for a span kept, so that the i-th label is the i-th span's. */
    if (trace_ring_count(t->ring) > before && t->nlabels < MTRACE_LABELS_MAX)
        t->label[t->nlabels++] = t->phase;
    t->phase_ns = now;
}

void mtrace_phase(master *m, const char *to)
{
    mtrace *t = m->trace;
    if (!mtrace_tracing(m))
        return;
    mtrace_close_phase(t, clock_now_ns());
    t->phase = to;
}

void mtrace_next_run(master *m)
{
    mtrace *t = m->trace;
    if (!t)
        return;
    mtrace_forget_nodes(t, m);
    if (!t->node)
        return;
    trace_node_reset(t->node);
    trace_ring_step(t->ring, TRACE_NO_STEP); /* reset leaves the gate outside */
    t->nlabels = 0;
}

/* ---- the clock rounds ------------------------------------------------------------- */

/* The next clock to n, when one is due. */
static void mtrace_send_clock(node *n)
{
    if (!clocksync_due(&n->clk) || !n->bev)
        return;
    uint64_t t0 = clock_now_ns();
    uint64_t seq = clocksync_send(&n->clk, t0);
    wire_send(n, "clock", json_pack("{s:I, s:I}", "seq", (json_int_t)seq, "t0", (json_int_t)t0));
}

void mtrace_node_registered(master *m, node *n)
{
    /* A node older than the exchange never said it answers: it is sent
     * no clock (it might take one for an answer it waits for), and its
     * clock stays unaligned in the trace. */
    if (!mtrace_tracing(m) || !n->clock_answers)
        return;
    clocksync_init(&n->clk);
    mtrace_send_clock(n);
}

void mtrace_on_clock_ack(master *m, node *n, ctl_msg *msg)
{
    uint64_t t3 = clock_now_ns(); /* first: the round trip ends as the ack is read */
    char why[300], who[320];
    int rc = validate_clock_ack(msg->body, why, sizeof why);
    if (rc == 0 && !mtrace_tracing(m)) {
        snprintf(why, sizeof why, "no clock was sent (--trace is off)");
        rc = -1;
    }
    if (rc == 0)
        rc = clocksync_ack(&n->clk, (uint64_t)ctl_int(msg->body, "seq", 0), (uint64_t)ctl_int(msg->body, "t0", 0),
                           (uint64_t)ctl_int(msg->body, "t1", 0), (uint64_t)ctl_int(msg->body, "t2", 0), t3, why,
                           sizeof why);
    if (rc < 0) {
        /* A clock is the trace's alone: a bad ack costs the node's
         * alignment, never the run. */
        node_describe(n, who, sizeof who);
        log_warn("%s: clock_ack refused: %s", who, why);
    }
    mtrace_send_clock(n);
}

/* ---- the nodes' traces ------------------------------------------------------------ */

/* The book of n's trace (a node with a rank of the job). */
static mtrace_got *mtrace_got_of(mtrace *t, const master *m, const node *n)
{
    if (n->role == AGG_TRAINER)
        return n->rank < m->set.ntrainer ? &t->trainer[n->rank] : NULL;
    return n->rank < m->set.nserver ? &t->server[n->rank] : NULL;
}

/* A part of n's trace taken into g. 0, or -1 with why. */
static int mtrace_take_part(mtrace_got *g, const node *n, const json_t *body, bool *final, char *why, size_t len)
{
    trace_dump *d = NULL;
    if (g->final) {
        snprintf(why, len, "a part after its final one");
        return -1;
    }
    if (tracejob_take(body, &d, final, why, len) < 0)
        return -1;
    trace_role role = n->role == AGG_TRAINER ? TRACE_TRAINER : TRACE_SERVER;
    if (d->role != role || d->rank != n->rank) {
        snprintf(why, len, "it is the trace of %s %" PRIu32 ", not its own", trace_role_name(d->role), d->rank);
        trace_dump_free(d);
        return -1;
    }
    if (!g->dump) {
        g->dump = d;
        return 0;
    }
    int rc = trace_dump_append(g->dump, d, why, len);
    trace_dump_free(d);
    return rc;
}

void mtrace_on_trace(master *m, node *n, ctl_msg *msg)
{
    mtrace *t = m->trace;
    char why[300], who[320];
    node_describe(n, who, sizeof who);
    mtrace_got *g = t ? mtrace_got_of(t, m, n) : NULL;
    if (!g) {
        /* Traced by hand under a master that writes no file: said once
         * per node, at its first part. */
        if (json_is_true(json_object_get(msg->body, "final")))
            log_warn("%s: its trace is dropped: this master writes no trace.json (no --out)", who);
        return;
    }
    if (g->refused)
        return;
    bool final = false;
    if (mtrace_take_part(g, n, msg->body, &final, why, sizeof why) < 0) {
        /* The trace is the trace's alone: a bad part costs the node's
         * trace, never the run. */
        log_warn("%s: trace refused: %s; the rest of its trace is dropped", who, why);
        g->refused = true;
        trace_dump_free(g->dump);
        g->dump = NULL;
        return;
    }
    g->final = final;
    char drop[300];
    if (final && trace_drop_message(&g->dump->drops, g->dump->capacity, who, drop, sizeof drop))
        log_warn("%s", drop);
}

/* A node's entry: what came of its trace (or an empty dump with the window
 * and rings it traces with), and its clock as the rounds left it. */
static void mtrace_node_entry(const master *m, const node *n, const mtrace_got *g, trace_dump *empty, trace_out_node *o)
{
    const trace_dump *d = g && g->dump ? g->dump : NULL;
    if (!d) {
        memset(empty, 0, sizeof *empty);
        empty->role = n->role == AGG_TRAINER ? TRACE_TRAINER : TRACE_SERVER;
        empty->rank = n->rank;
        empty->window = m->set.trace_steps;
        empty->capacity = m->set.trace_buffer;
        d = empty;
    }
    *o = (trace_out_node){.dump = d, .state = TRACE_OUT_UNALIGNED};
    if (n->clock_answers && clocksync_estimate(&n->clk, &o->clock) == 0)
        o->state = TRACE_OUT_ALIGNED;
}

/* Every process's entry into t->out: the master first, then trainers and
 * servers by rank. The master's spans are snapshot into t->mine. */
static size_t mtrace_entries(master *m, mtrace *t)
{
    size_t n = 0;
    trace_dump_free(t->mine);
    t->mine = NULL;
    if (t->node && (t->mine = trace_node_snapshot(t->node))) {
        /* The i-th label is the i-th span's (mtrace_close_phase). */
        assert(t->mine->nev == t->nlabels || t->nlabels == MTRACE_LABELS_MAX);
        t->out[n++] = (trace_out_node){
            .dump = t->mine, .state = TRACE_OUT_SAME, .label = t->mine->nev <= t->nlabels ? t->label : NULL};
    }
    for (uint32_t r = 0; r < m->set.ntrainer; r++)
        if (m->trainers[r]) {
            mtrace_node_entry(m, m->trainers[r], &t->trainer[r], &t->empty[n], &t->out[n]);
            n++;
        }
    for (uint32_t r = 0; r < m->set.nserver; r++)
        if (m->servers[r]) {
            mtrace_node_entry(m, m->servers[r], &t->server[r], &t->empty[n], &t->out[n]);
            n++;
        }
    return n;
}

const trace_out_node *mtrace_gathered(master *m, size_t *n)
{
    *n = 0;
    if (!mtrace_tracing(m) && !mtrace_any(m))
        return NULL;
    *n = mtrace_entries(m, m->trace);
    return m->trace->out;
}

bool mtrace_any(const master *m)
{
    const mtrace *t = m->trace;
    if (!t)
        return false;
    for (uint32_t r = 0; r < m->set.ntrainer; r++)
        if (t->trainer[r].dump)
            return true;
    for (uint32_t r = 0; r < m->set.nserver; r++)
        if (t->server[r].dump)
            return true;
    return false;
}

/* The nodes whose trace is not whole: said before the file is written. */
static void mtrace_warn_incomplete(const master *m, mtrace *t)
{
    char who[320];
    for (const node *n = m->nodes; n; n = n->next) {
        const mtrace_got *g = n->registered ? mtrace_got_of(t, m, n) : NULL;
        if (!g || g->final || g->refused || (!g->dump && !mtrace_tracing(m)))
            continue;
        node_describe(n, who, sizeof who);
        log_warn("%s: its trace is %s: its last part never came (it left before the run's end)", who,
                 g->dump ? "incomplete" : "missing");
    }
}

int mtrace_write(master *m, const char *dir, char *err, size_t errlen)
{
    mtrace *t = m->trace;
    /* No --trace and no node traced by hand: no file. */
    if (!t || (!t->node && !mtrace_any(m)))
        return 0;
    /* The phase now (done, failed) up to the write. */
    if (t->node)
        mtrace_close_phase(t, clock_now_ns());
    mtrace_warn_incomplete(m, t);
    size_t n = mtrace_entries(m, t);
    if (t->node && !t->mine) {
        snprintf(err, errlen, "cannot write %s/trace.json: out of memory", dir);
        return -1;
    }
    char why[256];
    size_t len = 0;
    char *json = trace_out_json(t->out, n, &len, why, sizeof why);
    if (!json) {
        snprintf(err, errlen, "cannot write %s/trace.json: %s", dir, why);
        return -1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    int rc = afile_write(path, json, len, err, errlen);
    free(json);
    if (rc == 0)
        log_info("wrote %s (open it in Perfetto, ui.perfetto.dev, or chrome://tracing)", path);
    return rc;
}
