/* mtrace.h — the master's side of the run's trace (issue 42, --trace):
 * its own trace node (a "phases" lane: a `phase` span per run phase, each
 * labelled with the phase's name), the clock rounds it runs with every
 * node that answers `clock` (shared/clocksync.h, docs/protocol.md), and
 * trace.json at the end of each run (master/trace_out.h): the master's
 * spans and every node's clock offset with its uncertainty.
 *
 * Every function here runs on the master's loop; with --trace off
 * (m->trace NULL) each is a no-op but mtrace_on_clock_ack, which refuses
 * the ack (no clock was sent).
 */
#ifndef PSBENCH_MASTER_MTRACE_H
#define PSBENCH_MASTER_MTRACE_H

#include "master/master.h"
#include "shared/control.h"

/* m->trace made from m->set (NULL without --trace). 0, or -1 with err. */
int mtrace_init(master *m, char *err, size_t errlen);
void mtrace_free(master *m);
/* The run's phase became to (run_state_phase's word, static): the span of
 * the phase that ended is recorded. */
void mtrace_phase(master *m, const char *to);
/* A node registered: its clock rounds start (where it answers `clock`). */
void mtrace_node_registered(master *m, node *n);
/* The handler of `clock_ack`. */
void mtrace_on_clock_ack(master *m, node *n, ctl_msg *msg);
/* DIR/trace.json for the run that just ended (written whole: shared/
 * atomicfile.h). 0, or -1 with err. */
int mtrace_write(master *m, const char *dir, char *err, size_t errlen);
/* The next run (--runs) begins: the master's spans so far go. */
void mtrace_next_run(master *m);

#endif
