/* run.c — the master's process: its event loop and what is wired to it.
 *
 * One libevent event_base runs the control plane. Its parts, from the
 * bottom up (no part calls one above it):
 *
 *   states.c    the run's and a node's states and their tables
 *   node.c      a node's one state setter, its name in logs and verdicts
 *   wire.c      connections: accept, read (the bounds before a register),
 *               send, refuse; a whole message to its type's handler
 *   placement.c registrations, ranks, the seed's placement, the memory
 *               check, the assignments
 *   reports.c   metrics, pass results, failures into the books
 *   blame.c     which silent node to name
 *   publish.c   the snapshot the HTTP thread serves
 *   phases.c    the run's state machine and the messages that move it
 *   loop.c      the tick and the signals
 *   run.c       (this file) the handler table by message type, the
 *               rendezvous store's handler, the loop's events, init/free
 *
 * What comes in is gated before any handler sees it: admit.c takes
 * connections (bounds on those that have not registered and on
 * descriptors), wire.c the bytes of a node that has not registered, and
 * validate.c every field of every message.
 */
#include "master/master.h"
#include "master/summary.h"
#include "master/admit.h"
#include "master/history.h"
#include "master/loop.h"
#include "master/mparams.h"
#include "master/mtrace.h"
#include "master/phases.h"
#include "master/placement.h"
#include "master/wire.h"
#include "shared/log.h"
#include "shared/net.h"

#include <assert.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ---------------------------------------------------------------- */

static void run_on_register(master *m, node *n, ctl_msg *msg)
{
    char verdict[sizeof m->error];
    if (placement_register(m, n, msg, verdict, sizeof verdict) < 0)
        master_fail(m, "%s", verdict);
}

static void run_kv_answer(void *who, const char *key, const char *value, void *ctx)
{
    (void)ctx;
    wire_send(who, "kv_value", json_pack("{s:s, s:s}", "key", key, "value", value));
}

/* The rendezvous store (kvstore.h): trainers only. */
static void run_on_kv(master *m, node *n, ctl_msg *msg)
{
    bool set = strcmp(msg->type, "kv_set") == 0;
    const char *key = ctl_str(msg->body, "key", NULL);
    const char *value = ctl_str(msg->body, "value", NULL);
    char err[160];
    int rc;
    if (n->role != AGG_TRAINER) {
        snprintf(err, sizeof err, "only trainers form groups");
        rc = -1;
    } else if (!key || (set && !value)) {
        snprintf(err, sizeof err, "%s needs a string key%s", msg->type, set ? " and a string value" : "");
        rc = -1;
    } else if (set) {
        rc = kv_set(&m->kv, key, value, run_kv_answer, m, err, sizeof err);
    } else {
        rc = kv_get(&m->kv, key, n, run_kv_answer, m, err, sizeof err);
    }
    if (rc < 0)
        master_fail(m, "%s %u (%s) sent a bad %s: %s", agg_role_name(n->role), n->rank, n->host, msg->type, err);
}

/* Every message a node may send (docs/protocol.md, "Control plane"); any
 * other type is logged and dropped. Before its register, a node may send
 * nothing else. */
static const wire_handler run_handlers[] = {
    {"register", run_on_register, true},
    {"metrics", phases_on_metrics, false},
    {"ready", phases_on_ready, false},
    {"pass_done", phases_on_pass_done, false},
    {"reset_done", phases_on_reset_done, false},
    {"failed", phases_on_failed, false},
    {"kv_set", run_on_kv, false},
    {"kv_get", run_on_kv, false},
    {"clock_ack", mtrace_on_clock_ack, false},
    {"trace", mtrace_on_trace, false},
    {"params", mparams_on_params, false},
};

static void run_on_closed(master *m, node *n)
{
    kv_forget(&m->kv, n);
    phases_node_closed(m, n);
}

static const wire_ops run_wire_ops = {
    .handlers = run_handlers,
    .nhandlers = sizeof run_handlers / sizeof run_handlers[0],
    .closed = run_on_closed,
    .broken = phases_node_broken,
};

/* ---- the loop's events ---------------------------------------------------------- */

static void run_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    loop_tick(arg);
}

/* The signals that stop the master (master_init), by name. */
static const int run_signals[MASTER_NSIGNALS] = {SIGINT, SIGTERM, SIGHUP};

/* A signal only records that it came; the loop acts on it at once, from
 * an event of its own (loop_on_signals), never from here. */
static void run_on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    master *m = arg;
    m->signals++;
    m->last_signal = (int)sig;
    event_active(m->sig_act_ev, EV_TIMEOUT, 0);
}

static void run_on_signals(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    loop_on_signals(arg);
}

/* ---- lifecycle ------------------------------------------------------------------- */

/* The tick, the signals and the deferred event that acts on them. */
static int run_add_events(master *m)
{
    m->tick_ev = event_new(m->base, -1, EV_PERSIST, run_on_tick, m);
    struct timeval half = {0, (int)(MASTER_TICK_S * 1e6)};
    bool ok = m->tick_ev && event_add(m->tick_ev, &half) == 0;
    m->sig_act_ev = event_new(m->base, -1, 0, run_on_signals, m);
    ok = ok && m->sig_act_ev;
    for (int i = 0; ok && i < MASTER_NSIGNALS; i++) {
        m->sig_ev[i] = evsignal_new(m->base, run_signals[i], run_on_signal, m);
        ok = m->sig_ev[i] && event_add(m->sig_ev[i], NULL) == 0;
    }
    return ok ? 0 : -1;
}

int master_init(master *m, const master_settings *set, const char *listen_host, uint16_t listen_port,
                char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->set = *set;
    m->wire = &run_wire_ops;
    m->run = 1;
    m->state = RUN_WAITING;
    m->metrics_pass = PASS_NONE;
    m->t_start = m->t_state = master_now();
    m->trainers = calloc(set->ntrainer ? set->ntrainer : 1, sizeof *m->trainers);
    m->servers = calloc(set->nserver ? set->nserver : 1, sizeof *m->servers); /* 0: pure DDP */
    kv_init(&m->kv);
    m->base = event_base_new();
    if (!m->trainers || !m->servers || !m->base || agg_init(&m->agg) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* A connection per node, the HTTP API's, the --local children's pipes:
     * as many descriptors as the hard limit allows, as servers do. */
    unsigned long long was, now;
    if (net_raise_fd_limit(&was, &now) == 0 && now != was)
        log_debug("descriptor limit raised from %llu to %llu", was, now);
    /* net_listen: the same socket set-up as the servers' data plane. */
    int fd = net_listen_flag("--listen", listen_host, listen_port, 128, &m->ctl_port, err, errlen);
    if (fd < 0)
        return MASTER_INIT_ADDRESS;
    m->admit = admit_new(m->base, fd, wire_on_accept, m, err, errlen);
    if (!m->admit)
        return -1;
    if (run_add_events(m) < 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return -1;
    }
    return mtrace_init(m, err, errlen);
}

int master_run(master *m)
{
    signal(SIGPIPE, SIG_IGN);
    master_publish(m, false);
    m->t_last_tick = master_now();
    event_base_dispatch(m->base);
    /* The loop ends once the run is over — or, at a second signal, while a
     * failed run still awaited its nodes' last reports: still report. */
    assert(run_state_final(m->state) || m->state == RUN_FAILING);
    if (m->state == RUN_FAILING)
        phases_conclude(m, false);
    return m->exit_code;
}

void master_free(master *m)
{
    /* Nothing may call back into the master from here on: its events and
     * the listener go first. */
    if (m->tick_ev)
        event_free(m->tick_ev);
    if (m->sig_act_ev)
        event_free(m->sig_act_ev);
    for (int i = 0; i < MASTER_NSIGNALS; i++)
        if (m->sig_ev[i])
            event_free(m->sig_ev[i]);
    admit_free(m->admit);
    summary_runs_free(m->run_headlines);
    json_decref(m->host_load);
    while (m->nodes) {
        node *n = m->nodes;
        m->nodes = n->next;
        wire_free_node(n);
    }
    /* libevent frees a bufferevent from its loop (finalizers), and
     * event_base_free does not run them all (one whose reading stopped at
     * its read mark stays): run the loop once more, with nothing of the
     * master's left on it, so that none freed just now outlives the base. */
    if (m->base) {
        event_base_loop(m->base, EVLOOP_NONBLOCK);
        event_base_free(m->base);
    }
    agg_free(&m->agg);
    mtrace_free(m);
    mparams_free(m);
    history_free(m->history);
    kv_free(&m->kv);
    free(m->trainers);
    free(m->servers);
}
