/* hoststate.h — the state of every host that took part in a run (issue 38:
 * the host's state is part of the result). A busy host measures the other
 * processes, an oversubscribed one the scheduler, and the figures should
 * say so wherever they are read.
 *
 * Each node adds a `host` object (shared/hostinfo.h's reading: its host's
 * CPU ticks, runnable tasks, load, and its own process CPU seconds) to every
 * report; the master keeps, per node, the last reading before the timed
 * pass, the first and the last inside it, and a live window of the last
 * 5 to 10 s; its own readings it takes as the pass starts and ends and on
 * its tick. Per host, over the timed pass:
 *   - the host's shares (steal, non-idle) come from one window of one
 *     process on it: the master's own where it is there (its readings are
 *     taken exactly as the pass starts and ends), else the node's widest;
 *   - the job's share is the sum over the job's processes on the host of
 *     each one's own CPU rate over its own window (each window is within
 *     a report's period, half a second, of the pass), plus the master's;
 *   - the others' share is the non-idle share less the job's.
 * Shares are rates, so windows that differ by a report's period add up.
 *
 * Busy: steal above HOSTSTATE_STEAL_BUSY, or others above
 * HOSTSTATE_OTHERS_BUSY of the host's capacity. Oversubscribed: more of the
 * job's busy processes (trainers, servers) on a host than it has cores.
 */
#ifndef PSBENCH_MASTER_HOSTSTATE_H
#define PSBENCH_MASTER_HOSTSTATE_H

#include "master/hosttrack.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct master;
struct node;

/* A node's report body (validated): its `host`, if any, into its track. */
void hoststate_report(struct master *m, struct node *n, const json_t *body);
/* The timed pass starts or ends (the master's reading then). */
void hoststate_mark(struct master *m, bool start);
/* The tick: the master's live reading. */
void hoststate_tick(struct master *m);
/* The next run (--runs): its passes are measured afresh. */
void hoststate_next_run(struct master *m);
/* results.json's "host_state" (docs/results.md), a new object. */
json_t *hoststate_json(const struct master *m);
/* /api/v1/status's "host_state": null before any node registered, else
 * {"busy", "oversubscribed", "warnings"}; the live view while the run is
 * live, the verdict once the timed pass ended. A new value. */
json_t *hoststate_status(const struct master *m);
/* --quiet-host: wait up to `seconds` for this host to be quiet (over 1-s
 * readings), saying once what it waits for; when it never is, the run is
 * marked busy (hs.quiet_failed, its warning). */
void hoststate_quiet_wait(struct master *m, double seconds);

#endif
