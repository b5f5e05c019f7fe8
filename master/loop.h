/* loop.h — the master's own doings on its event loop: the tick and the
 * signals (loop.c). run.c's callbacks call these; nothing else does.
 */
#ifndef PSBENCH_MASTER_LOOP_H
#define PSBENCH_MASTER_LOOP_H

#include "master/master.h"

/* The tick is due every MASTER_TICK_S. */
#define MASTER_TICK_S 0.5

/* Failure detection (held failures, silence, the join and reset
 * deadlines, a pause of the master's own), connections that never
 * registered, the progress line, the snapshot; once a run has ended, its
 * conclusion when the nodes' last reports are in, the next run, and the
 * master's leaving (children, --linger). */
void loop_tick(master *m);
/* Act on every signal recorded since the last call, by the run's state:
 * a live run fails ("interrupted (SIGINT)", exit 128 + the signal); a run
 * that is ending is concluded at once with no further run and no linger;
 * between runs, before any trainer of the next one, the series ends with
 * the last run; once the run is over (or a second signal), the master
 * leaves now. */
void loop_on_signals(master *m);

#endif
