/* follow.h — --follow: a node started by hand that serves job after job
 * of whatever master listens at its --master (a sweep's points, the runs
 * of --runs), until none has come for --follow-idle seconds.
 *
 * A supervisor, not a loop inside the node: the process that parsed the
 * options forks one child per job, and the child runs the node's usual
 * one-job path (register, serve or train, exit) from a clean slate, so no
 * one-shot state of a job is ever reused. The child's exit status says
 * what happened:
 *
 *   PSB_EXIT_RETRY  no job this time: the master refused with "retry"
 *                   (this job needs no more of the role, the run is over,
 *                   ...) or could not be reached. The supervisor waits
 *                   FOLLOW_RETRY_S and tries again; --follow-idle seconds
 *                   of only this and it exits 0, saying why.
 *   0, 1            a job ran (done, failed) or a signal killed the
 *                   child: the next one is waited for, the idle clock
 *                   starts again.
 *   anything else   the node cannot follow (a wrong token, a refused
 *                   register, bad flags): the supervisor exits with it.
 *
 * SIGINT and SIGTERM go to the child (the job in progress stops as it
 * would without --follow) and end the supervisor; the child dies with the
 * supervisor (PR_SET_PDEATHSIG). Only the generic loop lives here: each
 * role's job is its own (server/, trainer/).
 */
#ifndef PSBENCH_FOLLOW_H
#define PSBENCH_FOLLOW_H

#include <stdbool.h>

/* A job's exit status under --follow: no job this time, try again
 * (EX_TEMPFAIL). Without --follow no node exits with it. */
#define PSB_EXIT_RETRY 75

/* Between two tries that got no job. */
#define FOLLOW_RETRY_S 0.5

/* One job, run in the child. reach_s: how long it may keep trying to reach
 * the master (--connect-timeout, capped by what is left of --follow-idle,
 * so that a master that never comes ends the node on time). Returns the
 * exit status (PSB_EXIT_RETRY: no job this time). */
typedef int (*follow_job_fn)(void *ctx, double reach_s);

typedef struct follow_opts {
    double idle_s;            /* --follow-idle: exit 0 after this long with no job */
    double connect_timeout_s; /* --connect-timeout: the most a try may wait for the master */
    const char *master;       /* HOST:PORT, for the lines it prints */
} follow_opts;

/* Jobs until idle, a signal, or a job status that ends following. Returns
 * the exit status; a child killed by the signal that stopped us is
 * reported as 128 + that signal. */
int follow_run(const follow_opts *o, follow_job_fn job, void *ctx);

/* In the child: why it had no job (the master's refusal, "cannot reach
 * ..."), for the supervisor, which says it once (again when it changes)
 * rather than every half second. A no-op outside a follower's child. */
void follow_say_retry(const char *why);
/* In the child: whether it runs under follow_run. */
bool follow_in_child(void);

#endif
