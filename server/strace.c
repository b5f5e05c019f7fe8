/* strace.c — a server's trace (see strace.h). */
#include "server/strace.h"
#include "shared/clock.h"
#include "shared/gpu/nvtx.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int strace_init(strace *t, const trace_conf *conf, device_spec dev, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (!conf->on)
        return 0;
    char why[256];
    if (!(t->node = trace_node_new(conf, why, sizeof why))) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    int reactor = trace_lane(t->node, "reactor");
    /* fake-cuda runs the cuda device's engine on host threads: its stream
     * is as real to the trace as a GPU's. */
    bool stream = dev.kind == DEVICE_CUDA || dev.kind == DEVICE_FAKE_CUDA;
    int lane = stream ? trace_lane(t->node, "cuda stream") : 0;
    t->ring = trace_ring_add(t->node, "reactor");
    if (reactor < 0 || lane < 0 || !t->ring) {
        snprintf(err, errlen, "trace: out of memory for a ring of %" PRIu32 " spans", conf->capacity);
        strace_free(t);
        return -1;
    }
    t->lane_reactor = (unsigned)reactor;
    t->lane_stream = (unsigned)lane;
    t->has_stream = stream;
    t->window = conf->window;
    t->rank = conf->rank > INT32_MAX ? TRACE_NONE : (int32_t)conf->rank;
    /* Ranges only where Nsight has a GPU to show them beside. */
    t->nvtx = dev.kind == DEVICE_CUDA && trace_nvtx_available();
    if (t->nvtx)
        trace_nvtx_enable(true);
    return 0;
}

void strace_free(strace *t)
{
    if (t->nvtx)
        trace_nvtx_enable(false);
    trace_node_free(t->node);
    memset(t, 0, sizeof *t);
}

/* The ids of a span: the protocol's counters (past INT64_MAX: none), the
 * trainer's rank (past INT32_MAX: none), this server's rank. */
static trace_ids strace_ids(const strace *t, uint64_t batch, uint64_t bucket, uint64_t trainer)
{
    return trace_ids_make(batch > INT64_MAX ? TRACE_NONE : (int64_t)batch,
                          bucket > INT64_MAX ? TRACE_NONE : (int64_t)bucket,
                          trainer > INT32_MAX ? TRACE_NONE : (int32_t)trainer, t->rank);
}

strace_mark strace_begin_slow(strace *t, trace_span s, uint64_t batch, uint64_t bucket, uint64_t trainer)
{
    strace_mark m = {clock_now_ns(), 0};
    if (t->nvtx)
        m.nvtx = trace_nvtx_start(s, strace_ids(t, batch, bucket, trainer));
    return m;
}

/* The span [t0_ns, t1_ns] into the ring, where batch is kept. */
static void strace_add(strace *t, trace_span s, unsigned lane, uint64_t t0_ns, uint64_t t1_ns, uint64_t batch,
                       uint64_t bucket, uint64_t trainer)
{
    if (!strace_keeps(t, batch))
        return;
    assert(t0_ns <= t1_ns);
    /* The ring's step is the span's batch: the node's window decides. */
    trace_ring_step(t->ring, batch);
    trace_add(t->ring, s, lane, t0_ns, t1_ns, strace_ids(t, batch, bucket, trainer));
}

void strace_end_at(strace *t, strace_mark *m, trace_span s, unsigned lane, uint64_t t1_ns, uint64_t batch,
                   uint64_t bucket, uint64_t trainer)
{
    if (!m->t0_ns)
        return;
    strace_add(t, s, lane, m->t0_ns, t1_ns ? t1_ns : clock_now_ns(), batch, bucket, trainer);
    strace_drop(m);
}

void strace_timed(strace *t)
{
    if (t->ring)
        t->timed = true;
}

void strace_ship(strace *t, bool final, tracejob_send_fn send, void *ctx)
{
    if (!t->node)
        return;
    char err[256];
    if (tracejob_ship(t->node, &t->cur, final, send, ctx, err, sizeof err) < 0)
        log_warn("trace: not sent (%s); the run goes on", err);
    char who[32], msg[256];
    trace_drops d = trace_ring_drops(t->ring);
    snprintf(who, sizeof who, "server %d", (int)t->rank);
    if (final && trace_drop_message(&d, t->ring->capacity, who, msg, sizeof msg))
        log_warn("%s", msg);
}

void strace_new_run(strace *t)
{
    if (!t->node)
        return;
    trace_node_reset(t->node);
    memset(&t->cur, 0, sizeof t->cur);
    t->timed = false;
}
