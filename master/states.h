/* states.h — the run's states and a node's, and which changes between them
 * are allowed.
 *
 * The run is one enum: what the master is doing now (waiting for nodes, a
 * pass, the reset between the passes, the end of a run) — no flag beside
 * it says "but really". The tables below are the whole state machine; the
 * two setters (master_set_state in phases.c, node_set_state in node.c) assert
 * every change against them, so a change the tables do not name is a bug
 * caught where it happens. Nothing here knows the event loop: the unit
 * test (tests/unit/master/test_master_state.c) checks every allowed and every
 * refused change without a master.
 *
 *         ┌──────────────── runs remain (--runs): the next run ───────────────┐
 *         ▼                                                                    │
 *      WAITING ──(every node ready)──> WARMUP ──(every pass_done)──> RESETTING │
 *         │                                                              │     │
 *         │                                           (every reset_done) ▼     │
 *         │                          FINISHING <──(the last run)──── TIMED     │
 *         │                              │                             │       │
 *         │           (last reports in:  │              (runs remain)  ▼       │
 *         │            files written)    │                      BETWEEN_RUNS   │
 *         │                              ▼                             │       │
 *         └──(a signal, no trainer ──> DONE <──(trainers gone, servers ┘       │
 *              of the next run in)       │       reset: files written)         │
 *                                        └─────────────────────────────────────┘
 *
 *   WAITING, WARMUP, RESETTING, TIMED ──(a failure, a signal)──> FAILING ──(files written)──> FAILED
 */
#ifndef PSBENCH_MASTER_STATES_H
#define PSBENCH_MASTER_STATES_H

#include <stdbool.h>

typedef enum run_state {
    RUN_WAITING = 0, /* nodes register; servers, then trainers, are assigned; until every node is ready */
    RUN_WARMUP,      /* the warm-up pass */
    RUN_RESETTING,   /* after the warm-up: servers forget its futures, everyone its metrics */
    RUN_TIMED,       /* the timed pass */
    RUN_FINISHING,   /* the last run's timed pass is done, stop sent: the nodes' last reports awaited */
    RUN_BETWEEN_RUNS, /* a timed pass is done and runs remain: trainers stopped, servers resetting
                       * (reset new_run); their leaving and reset_done awaited */
    RUN_DONE,        /* the run's files are written; the next run follows, or the master lingers */
    RUN_FAILING,     /* the verdict is given (stop failed sent): the nodes' last reports awaited */
    RUN_FAILED,      /* the failed run's files are written; the master lingers */
    RUN_NSTATES
} run_state;

typedef enum node_state {
    NS_CONNECTED = 0, /* no register yet */
    NS_REGISTERED,    /* has a rank, waiting for its assignment */
    NS_ASSIGNED,      /* assignment sent, waiting for ready */
    NS_READY,
    NS_RUNNING,
    NS_PASS_DONE,
    NS_RESETTING,
    NS_DONE,
    NS_FAILED,
    NS_LOST,
    NS_NSTATES
} node_state;

/* Which pass the aggregated metrics are from (kept once the run ends, so
 * that a failed run's figures say which pass they are). */
typedef enum metrics_pass { PASS_NONE = 0, PASS_WARMUP, PASS_TIMED } metrics_pass;

/* Whether the tables allow from -> to (never a state to itself). */
bool run_state_allowed(run_state from, run_state to);
bool node_state_allowed(node_state from, node_state to);

/* For logs: "warm-up", "between runs", ... */
const char *run_state_name(run_state s);
/* What the HTTP API, results.json and Prometheus call it: the contract's
 * five phases ("waiting", "warmup", "running", "done", "failed"). The
 * reset is still the warm-up's phase, the end of a timed pass still
 * "running" until its files are written. */
const char *run_state_phase(run_state s);
/* As the nodes API shows it: "connected", "registered", ... */
const char *node_state_name(node_state s);

/* The run goes on: a failure now fails it (WAITING .. TIMED). */
bool run_state_live(run_state s);
/* The run is over and its files are written: the master lingers, or the
 * next run follows (DONE, FAILED). */
bool run_state_final(run_state s);

#endif
