/* mtrace.h — the master's side of the run's trace (issue 42, --trace):
 * its own trace node (a "phases" lane: a `phase` span per run phase, each
 * labelled with the phase's name), the clock rounds it runs with every
 * node that answers `clock` (shared/clocksync.h, docs/protocol.md), and
 * trace.json at the end of each run (master/trace_out.h): the master's
 * spans and every node's clock offset with its uncertainty.
 *
 * The nodes' own spans come in `trace` messages, in parts as they go
 * (shared/tracejob.h), kept by role and rank until the run's file is
 * written. A master without --trace but with --out still takes the trace
 * of a node traced by hand (its own --trace), and writes trace.json with
 * it: no phases, clocks unaligned (no `clock` went out).
 *
 * Every function here runs on the master's loop; with neither --trace nor
 * --out (m->trace NULL) each is a no-op but mtrace_on_clock_ack, which
 * refuses the ack (no clock was sent), and mtrace_on_trace, which drops
 * the part saying why.
 */
#ifndef PSBENCH_MASTER_MTRACE_H
#define PSBENCH_MASTER_MTRACE_H

#include "master/master.h"
#include "master/trace_out.h"
#include "shared/control.h"

/* m->trace made from m->set (NULL without --trace). 0, or -1 with err. */
int mtrace_init(master *m, char *err, size_t errlen);
void mtrace_free(master *m);
/* The run's phase became to (run_state_phase's word, static): the span of
 * the phase that ended is recorded. */
void mtrace_phase(master *m, const char *to);
/* The assignment's `trace` object (shared/tracejob.h) under --trace, or
 * NULL: nodes trace only where their own --trace says. */
json_t *mtrace_assign_json(const master *m);
/* The handler of `trace`: a part of a node's trace (docs/protocol.md,
 * "Extension: the trace"). A bad part costs that node's trace, never the
 * run (a warning says why). */
void mtrace_on_trace(master *m, node *n, ctl_msg *msg);
/* Whether any node's spans came this run. */
bool mtrace_any(const master *m);
/* Every process's spans gathered so far, as trace_out's nodes: the
 * master's own (under --trace) and each trainer's and server's of this
 * run, with its clock as estimated now; *n of them. The array and what it
 * points to are the master's, valid until the master's loop goes on.
 * NULL with *n 0 when the master neither traces nor got a node's trace. */
const trace_out_node *mtrace_gathered(master *m, size_t *n);
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
