/* follow.h — --follow: a node started by hand that serves job after job
 * of whatever master listens at its --master (a sweep's points, the runs
 * of --runs), until none has come for --follow-idle seconds.
 *
 * A supervisor, not a loop inside the node: the process that parsed the
 * options forks one child per job, and the child runs the node's usual
 * one-job path (register, serve or train, exit) from a clean slate, so no
 * one-shot state of a job is ever reused.
 *
 * A try has two states. Reaching: no master has answered yet (the child
 * connects, registers, waits for the first answer); it takes no longer
 * than what --follow-idle has left (at least FOLLOW_RETRY_S), each wait of
 * the child bounded so, and the supervisor kills a child that is still
 * reaching FOLLOW_TEARDOWN_S past that. A job: the child said a master
 * answered (follow_say_answered, from ctl_recv_first), and the job runs by
 * its own bounds. Whatever ends a try that never reached a job — a master
 * that could not be reached, a SYN that is never answered, a peer that
 * closes, stays silent or answers in another protocol — is no job: it does
 * not count, nor restart the idle clock. The child's exit status says the
 * rest:
 *
 *   PSB_EXIT_RETRY  no job this time: no master answered, or it refused
 *                   with "retry" (this job needs no more of the role, the
 *                   run is over, ...). The supervisor waits FOLLOW_RETRY_S
 *                   and tries again; --follow-idle seconds of only this
 *                   and it exits 0, saying why.
 *   0, 1            after a master answered: a job ran (done, failed) or
 *                   a signal killed the child: the next one is waited
 *                   for, the idle clock starts again. Before: no job.
 *   anything else   the node cannot follow (a wrong token, a refused
 *                   register, bad flags): the supervisor exits with it.
 *
 * SIGINT, SIGTERM and SIGHUP (passed on as SIGTERM, as the master treats
 * it) end the supervisor. While it waits — between jobs, or for a master
 * to answer — it exits 0 with a line naming the signal; during a job the
 * signal goes to the job, which stops as it would without --follow. The
 * child dies with the supervisor (PR_SET_PDEATHSIG). Only the generic loop
 * lives here: each role's job is its own (server/, trainer/).
 */
#ifndef PSBENCH_FOLLOW_H
#define PSBENCH_FOLLOW_H

#include <stdbool.h>

/* A job's exit status under --follow: no job this time, try again
 * (EX_TEMPFAIL). Without --follow no node exits with it. */
#define PSB_EXIT_RETRY 75

/* Between two tries that got no job. */
#define FOLLOW_RETRY_S 0.5

/* How far past its reach a try that no master answered may run before the
 * supervisor kills it: the HTTP probe of a silent peer (PEER_PROBE_MS) and
 * the job's setup before it connects, with room to spare. */
#define FOLLOW_TEARDOWN_S 5.0

/* The byte a child writes back once a master answered (the rest it writes
 * is text: a reason, escaped). */
#define FOLLOW_MARK_ANSWERED '\001'

/* One job, run in the child. reach_s: how long it may take to reach the
 * master and hear its first answer, together (--connect-timeout, capped
 * by what is left of --follow-idle, so that a master that never comes, or
 * never answers, ends the node on time). Returns the exit status
 * (PSB_EXIT_RETRY: no job this time). */
typedef int (*follow_job_fn)(void *ctx, double reach_s);

typedef struct follow_opts {
    double idle_s;            /* --follow-idle: exit 0 after this long with no job */
    double connect_timeout_s; /* --connect-timeout: the most a try may wait for the master */
    const char *master;       /* HOST:PORT, for the lines it prints */
} follow_opts;

/* Jobs until idle, a signal, or a job status that ends following. Returns
 * the exit status; a job killed by the signal that stopped us is reported
 * as 128 + that signal (129 for SIGHUP, passed on as SIGTERM). */
int follow_run(const follow_opts *o, follow_job_fn job, void *ctx);

/* In the child: why it had no job (the master's refusal, "cannot reach
 * ..."), for the supervisor, which says it once (again when it changes)
 * rather than every half second. A no-op outside a follower's child. */
void follow_say_retry(const char *why);
/* In the child: a master answered the register (its first answer came):
 * from here the try is a job, however it ends. A no-op outside a
 * follower's child. */
void follow_say_answered(void);
/* In the child: whether it runs under follow_run. */
bool follow_in_child(void);

#endif
