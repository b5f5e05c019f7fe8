/* phases.c — the run's state machine (phases.h): its setter and the
 * invariants of each state, the verdict, the passes, the reset, the end of
 * a run and the next, and the handlers of the messages that move it. */
#include "master/phases.h"
#include "master/hoststate.h"
#include "master/blame.h"
#include "master/launcher.h"
#include "master/mparams.h"
#include "master/mtrace.h"
#include "master/placement.h"
#include "master/reports.h"
#include "master/validate.h"
#include "master/wire.h"
#include "shared/log.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A trainer reported a failure. While the run is still going and others are
 * connected, it is held for PHASES_HOLD_FAILURE_S: if a node disconnects in
 * the meantime, that one is the cause (a killed trainer breaks the others'
 * collectives) and the run fails in its name. */
#define PHASES_HOLD_FAILURE_S 1.0

/* ---- the setter ------------------------------------------------------------ */

static bool phases_all(const master *m, agg_role role, node_state st)
{
    uint32_t n = role == AGG_TRAINER ? m->set.ntrainer : m->set.nserver;
    node *const *v = role == AGG_TRAINER ? m->trainers : m->servers;
    for (uint32_t i = 0; i < n; i++)
        if (!v[i] || v[i]->state != st)
            return false;
    return true;
}

/* Every slot holds a registered node of its role and rank, or nothing. */
static void phases_check_slots(const master *m)
{
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        assert(!m->trainers[i] || (m->trainers[i]->registered && m->trainers[i]->role == AGG_TRAINER &&
                                   m->trainers[i]->rank == i));
    for (uint32_t i = 0; i < m->set.nserver; i++)
        assert(!m->servers[i] || (m->servers[i]->registered && m->servers[i]->role == AGG_SERVER &&
                                  m->servers[i]->rank == i));
}

/* What must hold as the run enters each state. */
static void phases_check_entry(const master *m)
{
    phases_check_slots(m);
    switch (m->state) {
    case RUN_WAITING: /* the next run: its trainers not yet in, the servers kept */
        assert(m->run > 1 && m->metrics_pass == PASS_NONE);
        for (uint32_t i = 0; i < m->set.ntrainer; i++)
            assert(!m->trainers[i]);
        for (uint32_t i = 0; i < m->set.nserver; i++)
            assert(m->servers[i]);
        break;
    case RUN_WARMUP:
    case RUN_TIMED: /* every node ready, the trainers started */
        assert(phases_all(m, AGG_TRAINER, NS_RUNNING) && phases_all(m, AGG_SERVER, NS_READY));
        break;
    case RUN_RESETTING:
        assert(phases_all(m, AGG_TRAINER, NS_RESETTING) && phases_all(m, AGG_SERVER, NS_RESETTING));
        break;
    case RUN_FINISHING:
    case RUN_BETWEEN_RUNS: /* servers stay for the next run, or are stopped */
        assert(phases_all(m, AGG_TRAINER, NS_DONE));
        assert(phases_all(m, AGG_SERVER, m->state == RUN_FINISHING ? NS_DONE : NS_RESETTING));
        assert(m->exit_code == 0 && !m->error[0]);
        break;
    case RUN_DONE:
        assert(!m->error[0]);
        break;
    case RUN_FAILING:
    case RUN_FAILED:
        assert(m->error[0] && m->exit_code != 0);
        break;
    default:
        assert(!"no such state");
    }
}

void master_set_state(master *m, run_state to)
{
    run_state from = m->state;
    assert(run_state_allowed(from, to));
    double now = master_now();
    log_debug("run: %s -> %s", run_state_name(from), run_state_name(to));
    m->state = to;
    m->t_state = now;
    if (run_state_live(from) && !run_state_live(to))
        m->t_ended = now;
    /* agg holds one pass's metrics (reset as the timed pass starts and for
     * each run): which one, through done or failed. */
    if (to == RUN_WAITING) {
        m->t_start = now;
        m->metrics_pass = PASS_NONE;
    } else if (to == RUN_WARMUP || to == RUN_TIMED) {
        m->metrics_pass = to == RUN_WARMUP ? PASS_WARMUP : PASS_TIMED;
    }
    phases_check_entry(m);
    if (strcmp(run_state_phase(from), run_state_phase(to)) == 0)
        return;
    log_info("phase %s", run_state_phase(to));
    mtrace_phase(m, run_state_phase(to));
    /* `done` is published once the run's files are written
     * (phases_conclude): a client that sees it may read results.json.
     * `failed` at once: it is the verdict a watcher needs now, and with
     * --linger 0 the master may be gone when its files are. */
    if (!run_state_final(to))
        master_publish(m, to == RUN_FAILING);
}

/* ---- the verdict --------------------------------------------------------------- */

void master_fail(master *m, const char *fmt, ...)
{
    char why[sizeof m->error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!run_state_live(m->state)) {
        /* The first failure wins; once the timed pass is done, the run is. */
        log_debug("run %s already: not failed for: %s", run_state_name(m->state), why);
        return;
    }
    memcpy(m->error, why, sizeof m->error);
    log_error("run failed: %s", m->error);
    wire_send_all(m, "stop", json_pack("{s:s, s:s}", "status", "failed", "reason", m->error));
    m->exit_code = 1;
    master_set_state(m, RUN_FAILING);
}

void master_child_failed(void *ctx, const char *why)
{
    master_fail(ctx, "%s", why);
}

/* ---- the passes ------------------------------------------------------------------ */

static void phases_start_pass(master *m, run_state pass)
{
    assert(pass == RUN_WARMUP || pass == RUN_TIMED);
    for (uint32_t i = 0; i < m->set.ntrainer; i++) {
        node_set_state(m->trainers[i], NS_RUNNING);
        m->trainers[i]->batches_done = 0;
    }
    master_set_state(m, pass);
    results_load_mark(m, pass, true);
    json_t *body = json_pack("{s:s, s:I}", "phase", run_state_phase(pass), "batches",
                             (json_int_t)master_pass_batches(m));
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        wire_send(m->trainers[i], "start", json_incref(body));
    json_decref(body);
}

/* The timed pass is done: every node is told (servers that stay for the
 * next run get `reset` new_run instead of `stop`); "done" is announced once
 * the nodes' last reports are in (the tick). */
static void phases_finish(master *m)
{
    bool more = master_runs_remain(m);
    json_t *stop = json_pack("{s:s}", "status", "done");
    for (node *n = m->nodes; n; n = n->next) {
        if (!n->registered)
            continue;
        if (more && n->role == AGG_SERVER) {
            /* It stays for the next run: it clears this one once the
             * run's trainers have left it. */
            wire_send(n, "reset", json_pack("{s:b}", "new_run", 1));
            node_set_state(n, NS_RESETTING);
        } else {
            wire_send(n, "stop", json_incref(stop));
            node_set_state(n, NS_DONE);
        }
    }
    json_decref(stop);
    m->exit_code = 0;
    master_set_state(m, more ? RUN_BETWEEN_RUNS : RUN_FINISHING);
}

/* Every trainer finished its pass: after the warm-up, servers forget its
 * futures and everyone its metrics; after the timed pass, the run ends. */
static void phases_pass_complete(master *m)
{
    results_load_mark(m, m->state, false);
    if (m->state == RUN_WARMUP) {
        /* The seed launcher's line; under --log-level warn or error the
         * master's stdout is the headline alone. */
        if (log_get_level() >= LOG_INFO) {
            printf("benchmark warmup done\n");
            fflush(stdout);
        }
        for (node *n = m->nodes; n; n = n->next)
            if (n->registered)
                node_set_state(n, NS_RESETTING);
        master_set_state(m, RUN_RESETTING);
        wire_send_all(m, "reset", json_object());
        return;
    }
    assert(m->state == RUN_TIMED);
    m->training_s = master_now() - m->t_state;
    if (m->set.batch_update) {
        /* The seed's parameter_server_test.py reports this. */
        printf("Time spent training: %.3f s\n", m->training_s);
        fflush(stdout);
    }
    phases_finish(m);
}

static void phases_reset_complete(master *m)
{
    assert(m->state == RUN_RESETTING);
    assert(phases_all(m, AGG_TRAINER, NS_READY) && phases_all(m, AGG_SERVER, NS_READY));
    /* The warm-up's figures, whole, before they go: its last point on the
     * dashboard's charts however short the pass was (history.h). */
    master_publish(m, true);
    agg_reset(&m->agg);
    phases_start_pass(m, RUN_TIMED);
}

/* ---- messages --------------------------------------------------------------------- */

/* A message that this node's state does not expect, and that the protocol
 * gives no error for: dropped, saying why (at debug level: a node that
 * follows the protocol never sends one). */
static void phases_drop(const node *n, const char *type, const char *expects)
{
    char who[300];
    node_describe(n, who, sizeof who);
    log_debug("%s sent %s while %s: dropped (%s)", who, type, node_state_name(n->state), expects);
}

void phases_on_metrics(master *m, node *n, ctl_msg *msg)
{
    char verdict[600];
    if (reports_metrics(m, n, msg->body, verdict, sizeof verdict) < 0)
        master_fail(m, "%s", verdict);
}

void phases_on_ready(master *m, node *n, ctl_msg *msg)
{
    char why[300];
    if (validate_ready(msg->body, why, sizeof why) < 0) {
        master_fail(m, "%s %u (%s) sent a bad ready: %s", agg_role_name(n->role), n->rank, n->host, why);
        return;
    }
    if (n->state != NS_ASSIGNED) {
        phases_drop(n, "ready", "ready answers an assignment");
        return;
    }
    json_t *links = json_object_get(msg->body, "links");
    if (n->role == AGG_TRAINER && json_is_array(links) && json_array_size(links)) {
        json_decref(n->links);
        n->links = json_incref(links);
    }
    node_set_state(n, NS_READY);
    if (n->role == AGG_SERVER) {
        /* Its table is filled: trainers may now be told where it is. */
        n->init_total = n->init_done = 0;
        m->t_init_progress = master_now();
        placement_assign_trainers(m);
    }
    if (m->state == RUN_WAITING && phases_all(m, AGG_TRAINER, NS_READY) && phases_all(m, AGG_SERVER, NS_READY))
        phases_start_pass(m, RUN_WARMUP);
}

void phases_on_pass_done(master *m, node *n, ctl_msg *msg)
{
    /* Only a trainer running a pass may end it. */
    if (n->role != AGG_TRAINER || n->state != NS_RUNNING || (m->state != RUN_WARMUP && m->state != RUN_TIMED)) {
        master_fail(m, "%s %u (%s) sent pass_done out of turn (phase %s)", agg_role_name(n->role), n->rank,
                    n->host, run_state_phase(m->state));
        return;
    }
    char verdict[600];
    if (reports_metrics(m, n, msg->body, verdict, sizeof verdict) < 0 ||
        reports_pass_results(m, n, msg->body, verdict, sizeof verdict) < 0) {
        master_fail(m, "%s", verdict);
        return;
    }
    node_set_state(n, NS_PASS_DONE);
    if (phases_all(m, AGG_TRAINER, NS_PASS_DONE))
        phases_pass_complete(m);
}

void phases_on_reset_done(master *m, node *n, ctl_msg *msg)
{
    (void)msg;
    if (n->state != NS_RESETTING) {
        phases_drop(n, "reset_done", "reset_done answers a reset");
        return;
    }
    node_set_state(n, NS_READY);
    if (n->role == AGG_SERVER) {
        n->init_total = n->init_done = 0;
        m->t_init_progress = master_now();
    }
    if (m->state == RUN_RESETTING && phases_all(m, AGG_TRAINER, NS_READY) && phases_all(m, AGG_SERVER, NS_READY))
        phases_reset_complete(m);
}

void phases_on_failed(master *m, node *n, ctl_msg *msg)
{
    char why[512];
    reports_failure(n, msg->body, why, sizeof why);
    if (n->state == NS_FAILED) {
        log_debug("%s (it had failed already)", why);
        return;
    }
    node_set_state(n, NS_FAILED);
    if (!run_state_live(m->state)) {
        log_debug("%s (the run is %s already)", why, run_state_name(m->state));
        return;
    }
    if (n->role == AGG_SERVER) {
        /* A server reports what it cannot do itself (a trainer refused for
         * want of descriptors): it is the cause. */
        master_fail(m, "%s", why);
        return;
    }
    if (m->held_until > 0) {
        log_debug("%s (a failure is held already: the first one is given)", why);
        return;
    }
    snprintf(m->held_failure, sizeof m->held_failure, "%s", why);
    m->held_until = master_now() + PHASES_HOLD_FAILURE_S;
    log_info("%s (waiting %.0f s for its cause)", why, PHASES_HOLD_FAILURE_S);
}

void phases_node_closed(master *m, node *n)
{
    assert(n->registered && !n->bev);
    char who[300];
    node_describe(n, who, sizeof who);
    if (m->state == RUN_FINISHING || m->state == RUN_BETWEEN_RUNS || m->state == RUN_DONE || n->state == NS_DONE) {
        log_debug("%s disconnected after the run", who);
        return;
    }
    if (n->state == NS_FAILED) {
        /* It said why before it left: its failure (held) names it. */
        if (m->held_until > 0 && strncmp(m->held_failure, who, strlen(who)) == 0) {
            m->held_until = 0;
            master_fail(m, "%s", m->held_failure);
        }
        return;
    }
    if (n->state == NS_LOST) {
        log_debug("%s disconnected (named lost already)", who);
        return;
    }
    node_set_state(n, NS_LOST);
    if (m->held_until > 0) {
        /* Another node's failure is held: this loss is its likely cause. */
        m->held_until = 0;
        master_fail(m, "%s disconnected (then %s)", who, m->held_failure);
        return;
    }
    master_fail(m, "%s disconnected", who);
}

void phases_node_broken(master *m, node *n, const char *what)
{
    char who[300];
    node_describe(n, who, sizeof who);
    if (run_state_live(m->state))
        master_fail(m, "%s sent a malformed control message: %s", who, what);
    else
        log_warn("%s sent a malformed control message: %s", who, what);
    if (n->state != NS_FAILED)
        node_set_state(n, NS_FAILED);
}

/* ---- the held failure --------------------------------------------------------------- */

/* A node that went silent (a host cut off, its link down, a process
 * stopped) is the likelier cause of a peer's timeout than the peer that
 * reported it: the run fails in the silent node's name, with the report
 * after it. */
void phases_release_held(master *m, double now)
{
    if (!(m->held_until > 0 && now >= m->held_until))
        return;
    m->held_until = 0;
    node *silent = blame_silent(m, now, BLAME_SILENT_S);
    if (silent) {
        char who[300];
        node_describe(silent, who, sizeof who);
        node_set_state(silent, NS_LOST);
        master_fail(m, "%s went silent %.1f s ago (its host or link is down, or it is stopped) (then %s)", who,
                    blame_silence(m, silent, now), m->held_failure);
        return;
    }
    master_fail(m, "%s", m->held_failure);
}

void phases_held_restart(master *m, double now)
{
    if (m->held_until > 0)
        m->held_until = now + PHASES_HOLD_FAILURE_S;
}

/* ---- the end of a run, and the next ---------------------------------------------------- */

int phases_between_runs(const master *m, char *why, size_t len)
{
    for (uint32_t i = 0; i < m->set.nserver; i++) {
        const node *n = m->servers[i];
        assert(n);
        if (!n->bev) {
            snprintf(why, len, "server %u (%s) disconnected between runs %u and %u", n->rank, n->host, m->run,
                     m->run + 1);
            return -1;
        }
    }
    for (uint32_t i = 0; i < m->set.ntrainer; i++) {
        const node *n = m->trainers[i];
        if (n && n->bev) {
            snprintf(why, len, "trainer %u (%s) of run %u had not left", n->rank, n->host, m->run);
            return 0;
        }
    }
    for (uint32_t i = 0; i < m->set.nserver; i++) {
        const node *n = m->servers[i];
        if (n->state != NS_READY) {
            snprintf(why, len, "server %u (%s) had not answered the reset after run %u", n->rank, n->host,
                     m->run);
            return 0;
        }
    }
    if (m->launcher && !launcher_trainers_exited(m->launcher)) {
        snprintf(why, len, "the trainers of run %u had not exited", m->run);
        return 0;
    }
    return 1;
}

void phases_conclude(master *m, bool linger)
{
    assert(m->state == RUN_FINISHING || m->state == RUN_BETWEEN_RUNS || m->state == RUN_FAILING);
    run_state to = m->state == RUN_FAILING ? RUN_FAILED : RUN_DONE;
    master_set_state(m, to);
    results_print(m);
    char err[256];
    if (results_write(m, err, sizeof err) < 0) {
        log_error("%s", err);
        if (m->exit_code == 0)
            m->exit_code = 1;
    }
    if (to == RUN_FAILED || !master_runs_remain(m))
        results_summary(m);
    master_publish(m, true); /* the end, now that its files are there */
    /* A signal ends the runs and, once a run is done, the master: it
     * lingers only after a run the signal failed. (A done run with runs
     * to go is followed by the next at once.) */
    bool stays = linger && m->set.linger_s > 0 && !(to == RUN_DONE && (m->signals || master_runs_remain(m)));
    m->leave_at = m->t_ended + (stays ? m->set.linger_s : 0);
    if (stays)
        log_info("HTTP stays up for %.0f s (--linger)", m->set.linger_s);
}

/* Free the last run's trainer nodes, and closed connections that never
 * registered: a long series of runs must not grow the master. */
static void phases_forget_trainers(master *m)
{
    for (node **pp = &m->nodes; *pp;) {
        node *n = *pp;
        if (n->registered ? n->role == AGG_SERVER : n->bev != NULL) {
            pp = &n->next;
            continue;
        }
        *pp = n->next;
        wire_free_node(n);
    }
    memset(m->trainers, 0, m->set.ntrainer * sizeof *m->trainers);
}

/* The books of a run, emptied for the next: metrics (not even a metric's
 * name stays), the rendezvous store, the servers' per-run counts. */
static void phases_clear_books(master *m)
{
    aggregate fresh;
    if (agg_init(&fresh) == 0) {
        agg_free(&m->agg);
        m->agg = fresh;
    } else {
        agg_free(&fresh);
        agg_reset(&m->agg);
    }
    kv_free(&m->kv);
    kv_init(&m->kv);
    for (uint32_t i = 0; i < m->set.nserver; i++) {
        m->servers[i]->rows_base = m->servers[i]->rows_touched;
        json_decref(m->servers[i]->calls); /* the next report's are the next run's */
        m->servers[i]->calls = NULL;
    }
    m->held_until = 0;
    m->training_s = 0;
    json_decref(m->host_load); /* the next run's passes are measured afresh */
    m->host_load = NULL;
    hoststate_next_run(m);
}

void phases_next_run(master *m)
{
    assert(m->state == RUN_DONE && master_runs_remain(m));
    char why[400];
    int ok = phases_between_runs(m, why, sizeof why);
    phases_forget_trainers(m);
    phases_clear_books(m);
    m->run++;
    master_set_state(m, RUN_WAITING);
    /* After the change: the last run's closing phase goes with its spans,
     * and this run's trace begins waiting. */
    mtrace_next_run(m);
    mparams_next_run(m);
    if (ok != 1) {
        master_fail(m, "%s%s", why, ok == 0 ? " within --rpc-timeout" : "");
        return;
    }
    /* --quiet-host: before this run's trainers start (its wait does not
     * count against the join's). */
    hoststate_quiet_wait(m, m->set.quiet_host_s);
    m->t_start = master_now();
    if (m->launcher && launcher_restart_trainers(m->launcher, why, sizeof why) < 0) {
        master_fail(m, "%s", why);
        return;
    }
    if (m->set.runs)
        log_info("run %u of %u: waiting for %u trainer(s)", m->run, m->set.runs, m->set.ntrainer);
    else
        log_info("run %u: waiting for %u trainer(s)", m->run, m->set.ntrainer);
}

void phases_end_runs(master *m)
{
    assert(!master_runs_remain(m));
    for (node *n = m->nodes; n; n = n->next) {
        if (!n->registered || n->role != AGG_SERVER || n->state == NS_DONE)
            continue;
        wire_send(n, "stop", json_pack("{s:s}", "status", "done"));
        /* One that failed or was lost keeps saying so. */
        if (n->state != NS_FAILED && n->state != NS_LOST)
            node_set_state(n, NS_DONE);
    }
}

void phases_stop_between_runs(master *m)
{
    assert(m->state == RUN_WAITING && m->run > 1 && !master_runs_remain(m));
    log_info("stopped after run %u", m->run - 1);
    results_summary(m);
    phases_end_runs(m);
    m->exit_code = 0;
    master_set_state(m, RUN_DONE);
    m->leave_at = m->t_ended;
}
