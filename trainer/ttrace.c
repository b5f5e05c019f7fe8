/* ttrace.c — the trainer's trace (see ttrace.h). */
#include "trainer/ttrace.h"
#include "shared/gpu/nvtx.h"
#include "shared/log.h"
#include "trainer/client.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Lane name, or the lane 0 (compute) where the node has no room: a name
 * the node takes always fits (TRACE_NAME_MAX), and the lanes it asks for
 * are fewer than TRACE_LANES_MAX (asserted below). */
static unsigned ttrace_lane(ttrace *t, const char *name)
{
    int l = trace_lane(t->node, name);
    assert(l >= 0);
    return l < 0 ? 0 : (unsigned)l;
}

_Static_assert(1 + TTRACE_BUCKET_LANES + 2 * TTRACE_LINK_LANES <= TRACE_LANES_MAX, "the trainer's lanes fit a node");
/* A workload with calls' lanes: compute, one bucket, links and calls. */
_Static_assert(1 + 1 + 3 * TTRACE_LINK_LANES <= TRACE_LANES_MAX, "a trainer's calls' lanes fit a node");

int ttrace_init(ttrace *t, const json_t *assign, const trace_flags *own, uint32_t rank, bool cuda, char *err,
                size_t errlen)
{
    memset(t, 0, sizeof *t);
    atomic_init(&t->timed, false);
    t->rank = (int32_t)rank;
    trace_conf conf;
    if (tracejob_conf(assign, own, TRACE_TRAINER, rank, &conf, err, errlen) < 0)
        return -1;
    if (!conf.on)
        return 0;
    if (!(t->node = trace_node_new(&conf, err, errlen)))
        return -1;
    t->lane_compute = ttrace_lane(t, "compute");
    t->compute = trace_ring_add(t->node, "compute");
    t->comm = trace_ring_add(t->node, "comm");
    if (!t->compute || !t->comm) {
        snprintf(err, errlen, "trace: out of memory for rings of %" PRIu32 " spans", conf.capacity);
        ttrace_free(t);
        return -1;
    }
    /* NVTX where the trainer computes on a CUDA GPU: its spans beside the
     * kernels in Nsight Systems (shared/gpu/nvtx.h). */
    if (cuda && trace_nvtx_available()) {
        t->nvtx = true;
        trace_nvtx_enable(true);
    }
    char steps[64];
    if (conf.window.last == TRACE_STEP_MAX)
        snprintf(steps, sizeof steps, "%" PRIu64 " onwards", conf.window.first);
    else
        snprintf(steps, sizeof steps, "%" PRIu64 "..%" PRIu64, conf.window.first, conf.window.last);
    log_info("trainer %" PRIu32 ": tracing steps %s of the timed pass, %" PRIu32 " spans per ring (compute, comm)%s",
             rank, steps, conf.capacity, t->nvtx ? ", and as NVTX ranges" : "");
    return 0;
}

void ttrace_free(ttrace *t)
{
    if (t->nvtx)
        trace_nvtx_enable(false);
    trace_node_free(t->node);
    memset(t, 0, sizeof *t);
}

void ttrace_bucket_lanes(ttrace *t, uint32_t n)
{
    if (!ttrace_on(t))
        return;
    assert(t->nrpc_lanes == 0 || n <= 1); /* the budget of calls' lanes */
    for (uint32_t k = t->nbucket_lanes; k < n && k < TTRACE_BUCKET_LANES; k++) {
        char name[TRACE_NAME_MAX];
        snprintf(name, sizeof name, "bucket %" PRIu32 "%s", k, k == TTRACE_BUCKET_LANES - 1 ? "+" : "");
        t->lane_bucket[k] = ttrace_lane(t, name);
        t->nbucket_lanes = k + 1;
    }
}

/* cl's lanes, and its frames into ring r. */
static trace_ring *ttrace_link_lanes(ttrace *t, client *cl, trace_ring *r)
{
    for (size_t i = 0; i < cl->nconns; i++) {
        client_conn *c = &cl->conns[i];
        char out[TRACE_NAME_MAX], in[TRACE_NAME_MAX];
        if (i < TTRACE_LINK_LANES - 1) {
            snprintf(out, sizeof out, "to server %" PRIu32, c->server_rank);
            snprintf(in, sizeof in, "from server %" PRIu32, c->server_rank);
        } else {
            snprintf(out, sizeof out, "to servers %d+", TTRACE_LINK_LANES - 1);
            snprintf(in, sizeof in, "from servers %d+", TTRACE_LINK_LANES - 1);
        }
        c->trace_lane_out = (uint16_t)ttrace_lane(t, out);
        c->trace_lane_in = (uint16_t)ttrace_lane(t, in);
    }
    cl->trace_trainer = t->rank;
    cl->trace = r;
    return r;
}

trace_ring *ttrace_links(ttrace *t, client *cl)
{
    cl->trace = NULL;
    if (!ttrace_on(t) || t->comm_taken)
        return NULL;
    t->comm_taken = true;
    return ttrace_link_lanes(t, cl, t->comm);
}

trace_ring *ttrace_links_here(ttrace *t, client *cl)
{
    cl->trace = NULL;
    if (!ttrace_on(t))
        return NULL;
    return ttrace_link_lanes(t, cl, t->compute);
}

void ttrace_rpc_lanes(ttrace *t, const client *cl)
{
    if (!ttrace_on(t))
        return;
    assert(t->nbucket_lanes <= 1); /* the budget above */
    for (size_t i = t->nrpc_lanes; i < cl->nconns && i < TTRACE_LINK_LANES; i++) {
        char name[TRACE_NAME_MAX];
        if (i < TTRACE_LINK_LANES - 1)
            snprintf(name, sizeof name, "rpc server %" PRIu32, cl->conns[i].server_rank);
        else
            snprintf(name, sizeof name, "rpc servers %d+", TTRACE_LINK_LANES - 1);
        t->lane_rpc[i] = ttrace_lane(t, name);
        t->nrpc_lanes = (uint32_t)i + 1;
    }
}

void ttrace_pass(ttrace *t, bool timed)
{
    if (!ttrace_on(t))
        return;
    atomic_store_explicit(&t->timed, timed, memory_order_relaxed);
    /* The training thread's ring closes until its first timed step
     * (train.c sets each step). The comm ring follows the batches of the
     * buckets it is handed (comm.c). */
    trace_ring_step(t->compute, TTRACE_UNTIMED);
}

/* tracejob_send_fn: one `trace` message on the master's link. */
static int ttrace_send(void *ctx, json_t *body, char *err, size_t errlen)
{
    int rc = ctl_send(ctx, "trace", NULL, body, err, errlen);
    json_decref(body);
    return rc;
}

void ttrace_ship(ttrace *t, ctl_conn *c, bool final)
{
    if (!ttrace_on(t) || t->final_sent || c->fd < 0)
        return;
    char err[512];
    if (tracejob_ship(t->node, &t->cur, final, ttrace_send, c, err, sizeof err) < 0)
        log_warn("trainer %" PRId32 ": trace not sent to the master: %s", t->rank, err);
    if (final) {
        t->final_sent = true;
        char buf[256];
        trace_drops d = {0};
        trace_drops r = trace_ring_drops(t->compute), s = trace_ring_drops(t->comm);
        /* The node's drops in one sentence (the master says them too). */
        d.count = r.count + s.count;
        d.first_step = r.count && (!s.count || r.first_step < s.first_step) ? r.first_step : s.first_step;
        d.last_step = r.count && (!s.count || r.last_step > s.last_step) ? r.last_step : s.last_step;
        char who[48];
        snprintf(who, sizeof who, "trainer %" PRId32, t->rank);
        if (trace_drop_message(&d, t->compute->capacity, who, buf, sizeof buf))
            log_warn("%s", buf);
    }
}
