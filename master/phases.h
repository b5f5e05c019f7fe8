/* phases.h — the run's state machine (states.h draws it): the one setter,
 * the verdict, the passes and the reset between them, the end of a run and
 * the next one (--runs), and what each node's message or lost connection
 * does to the run.
 *
 *   waiting  — nodes connect and register; each gets a rank and is told so
 *              at once. Servers are assigned once all of them have
 *              registered and their embedding tables fit their hosts'
 *              memory; trainers once every server is ready — its table
 *              filled (placement.h).
 *   warm-up  — when every node is ready: one full pass.
 *   resetting — servers clear their futures, everyone clears metrics; the
 *              master waits for every reset_done.
 *   timed    — the timed pass.
 *   finishing — stop (done) sent to every node; their last reports awaited
 *              (a few seconds at most), then the tables and files are
 *              written: done (the API shows `done` only then: whoever sees
 *              it can read results.json). HTTP stays up for --linger.
 *   between runs — with --runs, while runs remain: the trainers get stop
 *              (done), the servers a `reset` with "new_run" (they flush
 *              their metrics, wait until the run's trainers have left
 *              them, clear everything, answer reset_done). Once the
 *              trainers are gone (--local: exited) and every server is
 *              ready, the run is done (tables, files) and the next one
 *              waits for trainers with cleared metrics, slots, store and
 *              progress.
 *   failing  — a failure in any live state: stop (failed) to every node,
 *              `failed` published at once; their last reports awaited, then
 *              the files: failed. A failed run ends the master, whatever
 *              runs remain.
 *
 * A node that disconnects, reports a failure or stops sending (loop.c)
 * fails the run, named by role, rank and host.
 */
#ifndef PSBENCH_MASTER_PHASES_H
#define PSBENCH_MASTER_PHASES_H

#include "master/master.h"
#include "shared/control.h"

/* The one place the run's state changes: the change is checked against the
 * table (states.h) and asserted, logged at debug level ("run: warm-up ->
 * resetting"), the time stamped, the invariants of the state entered
 * asserted; a change of the published phase is logged ("phase done") and
 * published (but done and failed: once their files are written). */
void master_set_state(master *m, run_state to);

/* Messages (run.c's table: wire.h). */
void phases_on_metrics(master *m, node *n, ctl_msg *msg);
void phases_on_ready(master *m, node *n, ctl_msg *msg);
void phases_on_pass_done(master *m, node *n, ctl_msg *msg);
void phases_on_reset_done(master *m, node *n, ctl_msg *msg);
void phases_on_failed(master *m, node *n, ctl_msg *msg);
/* A registered node's connection ended (wire_ops.closed). */
void phases_node_closed(master *m, node *n);
/* A registered node sent what is no control message (wire_ops.broken). */
void phases_node_broken(master *m, node *n, const char *what);

/* The held failure (master.h): given once its second is up (in its silent
 * cause's name, if a node fell silent meanwhile); restarted after a pause
 * of the master's own. From the tick. */
void phases_release_held(master *m, double now);
void phases_held_restart(master *m, double now);

/* Whether the next run may start: 1 yes; 0 not yet (why: what it waits
 * for); -1 never (why: the reason). The last run's trainers must have left
 * (--local: exited) and every server must have answered its reset. */
int phases_between_runs(const master *m, char *why, size_t len);
/* The end of a run: finishing or between runs -> done, failing -> failed;
 * the tables and files written and published. The master lingers after
 * the last run when `linger` (the tick's ending, not a signal's) and
 * --linger say so: m->leave_at. */
void phases_conclude(master *m, bool linger);
/* done -> waiting: the next run (--runs), its state cleared, the servers
 * kept. */
void phases_next_run(master *m);
/* A signal while a run ends: no further run; servers that were to stay
 * for one are stopped. */
void phases_end_runs(master *m);
/* A signal between runs, before any trainer of the next one registered:
 * the series ends with the last complete run (its files are written);
 * the servers are stopped, and the master leaves. */
void phases_stop_between_runs(master *m);

#endif
