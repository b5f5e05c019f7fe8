/* mtrace.c — the master's side of the run's trace (see mtrace.h). */
#include "master/mtrace.h"
#include "master/trace_out.h"
#include "master/validate.h"
#include "master/wire.h"
#include "shared/atomicfile.h"
#include "shared/log.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The master's ring holds at most this many spans (--trace-buffer, if
 * less): a run changes phase a handful of times, and each kept span has
 * its label here, so the ring and this array fill together. */
#define MTRACE_LABELS_MAX 64

typedef struct mtrace {
    trace_node *node;  /* the master's (owned) */
    trace_ring *ring;  /* its phases' ring (the node's) */
    int lane;          /* "phases" */
    const char *phase; /* the phase now (static), and since when (the master's clock, ns) */
    uint64_t phase_ns;
    const char *label[MTRACE_LABELS_MAX]; /* the i-th kept span's phase (static strings) */
    size_t nlabels;
} mtrace;

int mtrace_init(master *m, char *err, size_t errlen)
{
    assert(!m->trace);
    if (!m->set.trace)
        return 0;
    mtrace *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "trace: out of memory");
        return -1;
    }
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
        trace_node_free(t->node);
        free(t);
        return -1;
    }
    /* The phases are between steps: kept whatever the window. */
    trace_ring_step(t->ring, TRACE_NO_STEP);
    t->phase = run_state_phase(m->state);
    t->phase_ns = clock_now_ns();
    m->trace = t;
    return 0;
}

void mtrace_free(master *m)
{
    mtrace *t = m->trace;
    if (!t)
        return;
    trace_node_free(t->node);
    free(t);
    m->trace = NULL;
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
    if (!t)
        return;
    mtrace_close_phase(t, clock_now_ns());
    t->phase = to;
}

void mtrace_next_run(master *m)
{
    mtrace *t = m->trace;
    if (!t)
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
    if (!m->trace || !n->clock_answers)
        return;
    clocksync_init(&n->clk);
    mtrace_send_clock(n);
}

void mtrace_on_clock_ack(master *m, node *n, ctl_msg *msg)
{
    uint64_t t3 = clock_now_ns(); /* first: the round trip ends as the ack is read */
    char why[300], who[320];
    int rc = validate_clock_ack(msg->body, why, sizeof why);
    if (rc == 0 && !m->trace) {
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

/* ---- trace.json --------------------------------------------------------------------- */

/* A node's entry: an empty dump (its spans come in a later version) with
 * the window and rings it will trace with, and its clock as the rounds
 * left it. */
static void mtrace_node_entry(const master *m, const node *n, trace_dump *d, trace_out_node *o)
{
    memset(d, 0, sizeof *d);
    d->role = n->role == AGG_TRAINER ? TRACE_TRAINER : TRACE_SERVER;
    d->rank = n->rank;
    d->window = m->set.trace_steps;
    d->capacity = m->set.trace_buffer;
    *o = (trace_out_node){.dump = d, .state = TRACE_OUT_UNALIGNED};
    if (n->clock_answers && clocksync_estimate(&n->clk, &o->clock) == 0)
        o->state = TRACE_OUT_ALIGNED;
}

int mtrace_write(master *m, const char *dir, char *err, size_t errlen)
{
    mtrace *t = m->trace;
    if (!t)
        return 0;
    /* The phase now (done, failed) up to the write. */
    mtrace_close_phase(t, clock_now_ns());
    size_t cap = 1 + (size_t)m->set.ntrainer + m->set.nserver, n = 0;
    trace_out_node *nodes = calloc(cap, sizeof *nodes);
    trace_dump *empty = calloc(cap, sizeof *empty);
    trace_dump *mine = trace_node_snapshot(t->node);
    int rc = -1;
    if (!nodes || !empty || !mine) {
        snprintf(err, errlen, "cannot write %s/trace.json: out of memory", dir);
        goto out;
    }
    /* The i-th label is the i-th span's (mtrace_close_phase). */
    assert(mine->nev == t->nlabels || t->nlabels == MTRACE_LABELS_MAX);
    nodes[n++] =
        (trace_out_node){.dump = mine, .state = TRACE_OUT_SAME, .label = mine->nev <= t->nlabels ? t->label : NULL};
    for (uint32_t r = 0; r < m->set.ntrainer; r++)
        if (m->trainers[r]) {
            mtrace_node_entry(m, m->trainers[r], &empty[n], &nodes[n]);
            n++;
        }
    for (uint32_t r = 0; r < m->set.nserver; r++)
        if (m->servers[r]) {
            mtrace_node_entry(m, m->servers[r], &empty[n], &nodes[n]);
            n++;
        }
    char why[256];
    size_t len = 0;
    char *json = trace_out_json(nodes, n, &len, why, sizeof why);
    if (!json) {
        snprintf(err, errlen, "cannot write %s/trace.json: %s", dir, why);
        goto out;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    rc = afile_write(path, json, len, err, errlen);
    free(json);
    if (rc == 0)
        log_info("wrote %s (open it in Perfetto, ui.perfetto.dev, or chrome://tracing)", path);
out:
    trace_dump_free(mine);
    free(empty);
    free(nodes);
    return rc;
}
