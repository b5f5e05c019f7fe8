/* test_master_state.c — the master's state machines (master/states.c): every
 * change of the run's state and of a node's, allowed or refused, against
 * the list below (written out here, apart from the tables: a change of the
 * machine must change both), and the names the HTTP API, results.json and
 * Prometheus publish for each state. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "master/states.h"

typedef struct change {
    int from, to;
} change;

/* The run: every change the master makes (docs/architecture.md, "The
 * run's states"). */
static const change run_allowed[] = {
    {RUN_WAITING, RUN_WARMUP},         /* every node ready */
    {RUN_WAITING, RUN_FAILING},        /* join timeout, a node lost, a signal */
    {RUN_WAITING, RUN_DONE},           /* a signal between runs, nobody of the next one in */
    {RUN_WARMUP, RUN_RESETTING},       /* every trainer's pass_done */
    {RUN_WARMUP, RUN_FAILING},
    {RUN_RESETTING, RUN_TIMED},        /* every reset_done */
    {RUN_RESETTING, RUN_FAILING},
    {RUN_TIMED, RUN_FINISHING},        /* the last run's timed pass done */
    {RUN_TIMED, RUN_BETWEEN_RUNS},     /* runs remain */
    {RUN_TIMED, RUN_FAILING},
    {RUN_FINISHING, RUN_DONE},         /* files written */
    {RUN_BETWEEN_RUNS, RUN_DONE},      /* files written (the next run follows) */
    {RUN_DONE, RUN_WAITING},           /* the next run */
    {RUN_FAILING, RUN_FAILED},         /* files written */
};

/* A node. */
static const change node_allowed[] = {
    {NS_CONNECTED, NS_REGISTERED},
    {NS_REGISTERED, NS_ASSIGNED},  {NS_REGISTERED, NS_FAILED},  {NS_REGISTERED, NS_LOST},
    {NS_ASSIGNED, NS_READY},       {NS_ASSIGNED, NS_FAILED},    {NS_ASSIGNED, NS_LOST},
    {NS_READY, NS_RUNNING},        {NS_READY, NS_RESETTING},    {NS_READY, NS_DONE},
    {NS_READY, NS_FAILED},         {NS_READY, NS_LOST},
    {NS_RUNNING, NS_PASS_DONE},    {NS_RUNNING, NS_FAILED},     {NS_RUNNING, NS_LOST},
    {NS_PASS_DONE, NS_RESETTING},  {NS_PASS_DONE, NS_DONE},     {NS_PASS_DONE, NS_FAILED},
    {NS_PASS_DONE, NS_LOST},
    {NS_RESETTING, NS_READY},      {NS_RESETTING, NS_DONE},     {NS_RESETTING, NS_FAILED},
    {NS_RESETTING, NS_LOST},
    {NS_DONE, NS_FAILED},
    {NS_LOST, NS_FAILED},
};

static bool listed(const change *v, size_t n, int from, int to)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].from == from && v[i].to == to)
            return true;
    return false;
}

/* Every pair of states, out of range ones included: allowed exactly when
 * listed. */
static void test_run_changes(void **state)
{
    (void)state;
    size_t n = sizeof run_allowed / sizeof run_allowed[0], allowed = 0;
    for (int from = 0; from <= RUN_NSTATES; from++)
        for (int to = 0; to <= RUN_NSTATES; to++) {
            bool want = listed(run_allowed, n, from, to);
            bool got = run_state_allowed((run_state)from, (run_state)to);
            if (got != want)
                fail_msg("run %d -> %d: %s, expected %s", from, to, got ? "allowed" : "refused",
                         want ? "allowed" : "refused");
            allowed += got;
        }
    assert_int_equal(allowed, n);
}

static void test_node_changes(void **state)
{
    (void)state;
    size_t n = sizeof node_allowed / sizeof node_allowed[0], allowed = 0;
    for (int from = 0; from <= NS_NSTATES; from++)
        for (int to = 0; to <= NS_NSTATES; to++) {
            bool want = listed(node_allowed, n, from, to);
            bool got = node_state_allowed((node_state)from, (node_state)to);
            if (got != want)
                fail_msg("node %s -> %s: %s, expected %s", from < NS_NSTATES ? node_state_name(from) : "?",
                         to < NS_NSTATES ? node_state_name(to) : "?", got ? "allowed" : "refused",
                         want ? "allowed" : "refused");
            allowed += got;
        }
    assert_int_equal(allowed, n);
}

/* Every state of the run is reachable from waiting, and only failed has no
 * way out: no state the master could be stuck in, none it never uses. */
static void test_run_reachable(void **state)
{
    (void)state;
    bool seen[RUN_NSTATES] = {[RUN_WAITING] = true};
    for (int pass = 0; pass < RUN_NSTATES; pass++)
        for (int from = 0; from < RUN_NSTATES; from++)
            for (int to = 0; seen[from] && to < RUN_NSTATES; to++)
                seen[to] |= run_state_allowed((run_state)from, (run_state)to);
    for (int s = 0; s < RUN_NSTATES; s++) {
        if (!seen[s])
            fail_msg("run state %s is unreachable", run_state_name((run_state)s));
        bool out = false;
        for (int to = 0; to < RUN_NSTATES; to++)
            out |= run_state_allowed((run_state)s, (run_state)to);
        assert_int_equal(out, s != RUN_FAILED);
    }
}

/* What each state is published as: the contract's five phases (DESIGN.md),
 * which tests, the dashboard and Prometheus read. */
static void test_published_names(void **state)
{
    (void)state;
    static const char *const phase[RUN_NSTATES] = {
        [RUN_WAITING] = "waiting", [RUN_WARMUP] = "warmup",  [RUN_RESETTING] = "warmup",
        [RUN_TIMED] = "running",   [RUN_FINISHING] = "running", [RUN_BETWEEN_RUNS] = "running",
        [RUN_DONE] = "done",       [RUN_FAILING] = "failed", [RUN_FAILED] = "failed",
    };
    for (int s = 0; s < RUN_NSTATES; s++) {
        assert_string_equal(run_state_phase((run_state)s), phase[s]);
        assert_non_null(run_state_name((run_state)s));
        /* live: a failure now fails the run; final: its files are written */
        assert_int_equal(run_state_live((run_state)s), s <= RUN_TIMED);
        assert_int_equal(run_state_final((run_state)s), s == RUN_DONE || s == RUN_FAILED);
    }
    static const char *const nodes[NS_NSTATES] = {"connected", "registered", "assigned", "ready", "running",
                                                  "pass_done", "resetting", "done", "failed", "lost"};
    for (int s = 0; s < NS_NSTATES; s++)
        assert_string_equal(node_state_name((node_state)s), nodes[s]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_changes),
        cmocka_unit_test(test_node_changes),
        cmocka_unit_test(test_run_reachable),
        cmocka_unit_test(test_published_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
