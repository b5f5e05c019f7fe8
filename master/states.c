/* states.c — the tables of the run's and a node's state changes, and
 * their names (states.h). */
#include "master/states.h"

#include <assert.h>

#define TO(s) (1u << (s))

/* The run: from each state, the states it may go to (states.h draws them). */
static const unsigned run_next[RUN_NSTATES] = {
    /* Every node ready: the warm-up. A signal between runs, before any
     * trainer of the next run registered: the series ends with the last
     * complete run, whose files are written (DONE). */
    [RUN_WAITING] = TO(RUN_WARMUP) | TO(RUN_FAILING) | TO(RUN_DONE),
    [RUN_WARMUP] = TO(RUN_RESETTING) | TO(RUN_FAILING),
    [RUN_RESETTING] = TO(RUN_TIMED) | TO(RUN_FAILING),
    [RUN_TIMED] = TO(RUN_FINISHING) | TO(RUN_BETWEEN_RUNS) | TO(RUN_FAILING),
    /* The timed pass completed: the run is done whatever comes now (a
     * node lost while it ends fails the next run, if any): no FAILING. */
    [RUN_FINISHING] = TO(RUN_DONE),
    [RUN_BETWEEN_RUNS] = TO(RUN_DONE),
    [RUN_DONE] = TO(RUN_WAITING), /* runs remain (--runs) */
    [RUN_FAILING] = TO(RUN_FAILED),
    [RUN_FAILED] = 0,
};

/* A node: from each state, the states it may go to. Any registered node
 * may report its failure (FAILED) or be lost (LOST: it disconnected or
 * fell silent while the run went on); only what a node does in its turn
 * moves it forward. */
#define NS_ENDS (TO(NS_FAILED) | TO(NS_LOST))
static const unsigned node_next[NS_NSTATES] = {
    [NS_CONNECTED] = TO(NS_REGISTERED),
    [NS_REGISTERED] = TO(NS_ASSIGNED) | NS_ENDS,
    [NS_ASSIGNED] = TO(NS_READY) | NS_ENDS,
    /* A pass starts (trainers); the warm-up's reset or, between runs, a
     * server's reset (new_run); stop after the last run (servers). */
    [NS_READY] = TO(NS_RUNNING) | TO(NS_RESETTING) | TO(NS_DONE) | NS_ENDS,
    [NS_RUNNING] = TO(NS_PASS_DONE) | NS_ENDS,
    /* The warm-up's reset, or the end of the timed pass. */
    [NS_PASS_DONE] = TO(NS_RESETTING) | TO(NS_DONE) | NS_ENDS,
    /* reset_done; or stop when a signal ends the runs while it resets. */
    [NS_RESETTING] = TO(NS_READY) | TO(NS_DONE) | NS_ENDS,
    /* Told to stop, it may still fail on its way out (its words are kept). */
    [NS_DONE] = TO(NS_FAILED),
    [NS_FAILED] = 0,
    /* Named silent while still connected, it may yet say why it failed. */
    [NS_LOST] = TO(NS_FAILED),
};

bool run_state_allowed(run_state from, run_state to)
{
    return from < RUN_NSTATES && to < RUN_NSTATES && (run_next[from] & TO(to)) != 0;
}

bool node_state_allowed(node_state from, node_state to)
{
    return from < NS_NSTATES && to < NS_NSTATES && (node_next[from] & TO(to)) != 0;
}

static const char *const run_names[RUN_NSTATES] = {
    [RUN_WAITING] = "waiting",     [RUN_WARMUP] = "warm-up",           [RUN_RESETTING] = "resetting",
    [RUN_TIMED] = "timed",         [RUN_FINISHING] = "finishing",      [RUN_BETWEEN_RUNS] = "between runs",
    [RUN_DONE] = "done",           [RUN_FAILING] = "failing",          [RUN_FAILED] = "failed",
};

/* The contract's phases (DESIGN.md, the HTTP API). */
static const char *const run_phases[RUN_NSTATES] = {
    [RUN_WAITING] = "waiting",     [RUN_WARMUP] = "warmup",            [RUN_RESETTING] = "warmup",
    [RUN_TIMED] = "running",       [RUN_FINISHING] = "running",        [RUN_BETWEEN_RUNS] = "running",
    [RUN_DONE] = "done",           [RUN_FAILING] = "failed",           [RUN_FAILED] = "failed",
};

static const char *const node_names[NS_NSTATES] = {
    [NS_CONNECTED] = "connected", [NS_REGISTERED] = "registered", [NS_ASSIGNED] = "assigned",
    [NS_READY] = "ready",         [NS_RUNNING] = "running",       [NS_PASS_DONE] = "pass_done",
    [NS_RESETTING] = "resetting", [NS_DONE] = "done",             [NS_FAILED] = "failed",
    [NS_LOST] = "lost",
};

const char *run_state_name(run_state s)
{
    assert(s < RUN_NSTATES);
    return run_names[s];
}

const char *run_state_phase(run_state s)
{
    assert(s < RUN_NSTATES);
    return run_phases[s];
}

const char *node_state_name(node_state s)
{
    assert(s < NS_NSTATES);
    return node_names[s];
}

bool run_state_live(run_state s)
{
    return s == RUN_WAITING || s == RUN_WARMUP || s == RUN_RESETTING || s == RUN_TIMED;
}

bool run_state_final(run_state s)
{
    return s == RUN_DONE || s == RUN_FAILED;
}
