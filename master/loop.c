/* loop.c — what the master's loop does on its own, beside the messages:
 * the tick (every MASTER_TICK_S: failure detection, deadlines, progress,
 * the snapshot, the end of a run and the linger) and the signals, acted on
 * here once run.c's run_on_signal has recorded them (loop.h).
 *
 * Every wait is bounded: registrations by the join timeout, everything
 * else by --rpc-timeout — a registered node's silence in every phase, the
 * one named being a silent server before the trainers that wait on it
 * (blame.h). While a server fills its table and reports progress, those
 * deadlines count from its last progress; after a pause of the master's
 * own (its tick late), from when it runs again.
 */
#include "master/loop.h"
#include "master/mparams.h"
#include "master/hoststate.h"
#include "master/admit.h"
#include "master/blame.h"
#include "master/launcher.h"
#include "master/phases.h"
#include "master/wire.h"
#include "shared/eta.h"
#include "shared/log.h"

#include <assert.h>
#include <event2/event.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>

/* One MASTER_PAUSE_S or more late means this master did not run meanwhile
 * — stopped (SIGSTOP), its host or VM suspended, its host starved — and
 * heard no one: that is no node's silence. Every silence and deadline
 * counts again from now (blame_since, blame_silence); a held failure waits
 * its second again. A tick late for a slow callback restarts them too,
 * which only postpones a verdict by that much. */
#define MASTER_PAUSE_S 2.0
/* The nodes' last reports after stop: waited for this long at most (the
 * tables are whole once every node has closed). */
#define LOOP_LAST_REPORTS_S 5.0

static void loop_check_paused(master *m, double now)
{
    double gap = now - m->t_last_tick;
    m->t_last_tick = now;
    if (gap < MASTER_TICK_S + MASTER_PAUSE_S)
        return;
    m->t_resumed = now;
    phases_held_restart(m, now);
    log_warn("this master did not run for %.1f s (stopped, or its host suspended): the nodes' silence counts "
             "from now", gap);
}

/* Every registered node must be heard from within --rpc-timeout, in every
 * phase (from its register on): the one to blame is named (blame_silent)
 * — the first to time out may be a trainer that only waits on it. */
static void loop_check_silence(master *m, double now)
{
    double limit = m->set.rpc_timeout_s;
    node *late = blame_late(m, now, limit);
    if (!late)
        return;
    /* Silent, for naming: half the timeout (a short --rpc-timeout) or five
     * missed heartbeats, whichever is less. */
    double min_s = limit / 2 < BLAME_SILENT_S ? limit / 2 : BLAME_SILENT_S;
    node *blame = blame_silent(m, now, min_s);
    assert(blame);
    char who[300], waiting[300];
    node_describe(blame, who, sizeof who);
    blame_waiting_on(m, blame, now, min_s, waiting, sizeof waiting);
    const char *doing = blame_doing(blame); /* before it is named lost */
    node_set_state(blame, NS_LOST);
    if (blame_silence(m, blame, now) > limit) {
        master_fail(m, "%s sent nothing for %.1f s (--rpc-timeout)%s%s", who, blame_silence(m, blame, now), doing,
                    waiting);
    } else {
        /* A silent server, not at the timeout yet, and its trainers, which
         * are: the server is the cause. */
        char then[300];
        node_describe(late, then, sizeof then);
        master_fail(m, "%s went silent %.1f s ago (its host or link is down, or it is stopped)%s (then %s sent "
                    "nothing for %.1f s (--rpc-timeout))", who, blame_silence(m, blame, now), waiting, then,
                    blame_silence(m, late, now));
    }
}

/* The join's verdict: who is missing, and who is there but not ready. */
static void loop_join_failed(master *m)
{
    uint32_t tr = 0, sv = 0;
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        tr += m->trainers[i] && m->trainers[i]->state == NS_READY;
    for (uint32_t i = 0; i < m->set.nserver; i++)
        sv += m->servers[i] != NULL;
    char detail[600] = "";
    size_t k = 0;
    for (node *n = m->nodes; n; n = n->next) {
        if (!n->registered || n->state == NS_READY || k + 100 >= sizeof detail)
            continue;
        char who[300];
        node_describe(n, who, sizeof who);
        k += (size_t)snprintf(detail + k, sizeof detail - k, "%s%s is %s", k ? "; " : " (", who,
                              node_state_name(n->state));
    }
    char fds[300];
    uint64_t refused = m->admit ? admit_refused(m->admit, fds, sizeof fds) : 0;
    if (refused)
        k += (size_t)snprintf(detail + k, sizeof detail - k, "%s%" PRIu64 " connection%s refused: %s", k ? "; " : " (",
                              refused, refused == 1 ? "" : "s", fds);
    if (k && k < sizeof detail - 1)
        snprintf(detail + k, sizeof detail - k, ")");
    master_fail(m, "only %u of %u trainers and %u of %u servers joined within %.0f s%s", tr, m->set.ntrainer, sv,
                m->set.nserver, m->set.join_timeout_s, detail);
}

/* While the run is live: a held failure's time, silence, and the deadlines
 * of the join and of the reset after the warm-up. */
static void loop_check_live(master *m, double now)
{
    phases_release_held(m, now);
    if (!run_state_live(m->state))
        return;
    loop_check_silence(m, now);
    if (m->state == RUN_WAITING && now - blame_since(m, m->t_start) > m->set.join_timeout_s)
        loop_join_failed(m);
    else if (m->state == RUN_RESETTING && now - blame_since(m, m->t_state) > m->set.rpc_timeout_s)
        master_fail(m, "reset after the warm-up did not complete within %.0f s", m->set.rpc_timeout_s);
}

/* ", time left ~N s" (shared/eta.h): the rest of this run at the pace of
 * the pass so far (its batches done over its time); in the warm-up, the
 * rest of it and the whole timed pass. Nothing before the first batch is
 * in: no pace yet, and a guess would mislead. */
static void loop_time_left(const master *m, uint64_t done, uint64_t total, double elapsed, char *buf, size_t len)
{
    uint64_t rest = total - done;
    if (m->state == RUN_WARMUP)
        rest += m->set.batches_per_pass * m->set.ntrainer;
    eta_format(eta_left_s(elapsed, (double)done, (double)rest), buf, len);
}

static void loop_progress_line(master *m, double now)
{
    if (m->state != RUN_WARMUP && m->state != RUN_TIMED)
        return;
    if (now - m->t_last_progress < 2.0)
        return;
    m->t_last_progress = now;
    uint64_t done = 0, total = master_pass_batches(m) * m->set.ntrainer;
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        done += m->trainers[i]->batches_done;
    assert(done <= total); /* each trainer's is checked against its pass (reports.c) */
    double elapsed = now - m->t_state;
    char left[64] = "";
    loop_time_left(m, done, total, elapsed, left, sizeof left);
    log_info("%s: %" PRIu64 "/%" PRIu64 " batches (%.0f%%), %.1f s%s", run_state_phase(m->state), done, total,
             total ? 100.0 * (double)done / (double)total : 0.0, elapsed, left);
}

/* Whether a run that ended may be concluded: nodes send a last metrics
 * report when they stop, then close — wait (briefly) for every one of them
 * so the tables are whole; before another run, for the trainers to leave
 * and the servers to reset (their reset_done follows their last report). */
static bool loop_settled(const master *m, double now)
{
    char why[400];
    /* Trainer 0's final parameters (mparams.h), as long as they keep
     * coming: --rpc-timeout since the run ended or since the last part. */
    double since;
    if (m->state != RUN_FAILING && mparams_coming(m, &since) &&
        now - blame_since(m, since > m->t_ended ? since : m->t_ended) < m->set.rpc_timeout_s)
        return false;
    if (m->state == RUN_BETWEEN_RUNS)
        return phases_between_runs(m, why, sizeof why) != 0 ||
               now - blame_since(m, m->t_ended) >= m->set.rpc_timeout_s;
    for (const node *n = m->nodes; n; n = n->next)
        if (n->registered && n->bev)
            return now - blame_since(m, m->t_ended) >= LOOP_LAST_REPORTS_S;
    return true;
}

/* Once the run's files are written: the children (--local) and the
 * linger, then the master leaves. */
static void loop_leave(master *m, double now)
{
    assert(run_state_final(m->state));
    bool children_gone = !m->launcher || launcher_all_exited(m->launcher);
    if (m->launcher && !children_gone && now - m->t_ended > m->set.rpc_timeout_s)
        launcher_kill_all(m->launcher);
    if (children_gone && now >= m->leave_at)
        event_base_loopbreak(m->base);
}

void loop_tick(master *m)
{
    double now = master_now();
    loop_check_paused(m, now);
    hoststate_tick(m); /* the live view of this host (/api/v1/status host_state) */
    wire_drop_idle(m, now);
    if (run_state_live(m->state))
        loop_check_live(m, now);
    loop_progress_line(m, now);
    if (!run_state_final(m->state) && m->state != RUN_FAILING)
        master_publish(m, false);
    if (run_state_live(m->state))
        return;
    if (!run_state_final(m->state)) {
        if (!loop_settled(m, now))
            return;
        phases_conclude(m, true);
        if (m->state == RUN_DONE && master_runs_remain(m)) {
            phases_next_run(m);
            return;
        }
    }
    loop_leave(m, now);
}

/* ---- signals -------------------------------------------------------------- */

static const char *loop_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

static bool loop_any_trainer(const master *m)
{
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        if (m->trainers[i])
            return true;
    return false;
}

/* SIGINT, SIGTERM and SIGHUP (a closed terminal or SSH session) alike: by
 * the run's state. Any signal ends the series of runs (master_runs_remain). */
static void loop_act_on_signal(master *m, int sig)
{
    switch (m->state) {
    case RUN_WAITING:
        if (m->run > 1 && !m->launcher && !loop_any_trainer(m)) {
            /* Between runs, nobody of the next one in yet: end after the
             * last complete run (its output is written). */
            phases_stop_between_runs(m);
            return;
        }
        break;
    case RUN_FINISHING:
    case RUN_BETWEEN_RUNS:
        /* The run is done; only the nodes' last reports are awaited. Write
         * the results with what is in, keep the run's exit code, no
         * linger, no further run. */
        phases_end_runs(m);
        phases_conclude(m, false);
        return;
    case RUN_DONE:
    case RUN_FAILING:
    case RUN_FAILED:
        /* A second signal, or one during --linger: leave now (a failed
         * run's files are written on the way out: master_run). */
        if (m->launcher)
            launcher_kill_all(m->launcher);
        event_base_loopbreak(m->base);
        return;
    default:
        break;
    }
    assert(run_state_live(m->state));
    master_fail(m, "interrupted (%s)", loop_signal_name(sig));
    /* As shells report a process that a signal ended: 128 + its number. */
    m->exit_code = 128 + sig;
}

void loop_on_signals(master *m)
{
    while (m->signals_acted < m->signals) {
        m->signals_acted++;
        loop_act_on_signal(m, m->last_signal);
    }
}
