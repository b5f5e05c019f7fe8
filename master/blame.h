/* blame.h — which node to name when nodes fall silent, and since when a
 * deadline counts. Reads the master's nodes and clocks; changes nothing
 * (the verdicts are loop.c's and phases.c's).
 */
#ifndef PSBENCH_MASTER_BLAME_H
#define PSBENCH_MASTER_BLAME_H

#include "master/master.h"

/* A node is silent when nothing came from it for this long: its heartbeat
 * (metrics) comes twice a second, so 5 missed ones. */
#define BLAME_SILENT_S 2.5

/* Where a deadline counts from: t, or later — a server's table fill's last
 * progress (a fill of several GiB may take longer than --rpc-timeout, and
 * keeps moving), or the moment this master ran again after a pause of its
 * own (loop.c). */
double blame_since(const master *m, double t);
/* How long node n has said nothing, as far as this master can tell: not
 * across a pause of the master's own, when it heard no one. */
double blame_silence(const master *m, const node *n, double now);
/* The node to name when nodes fall silent (NULL: none is): among the
 * registered, connected nodes silent for min_s or more, those that fell
 * silent within BLAME_SILENT_S of the first one to (those that stopped
 * together); a server before any trainer, then the one silent longest. A
 * node that reported its failure is not silent: it waits for the verdict. */
node *blame_silent(const master *m, double now, double min_s);
/* For a silent server: "; trainers 0, 1, which wait on it, went silent
 * too" — the trainers it feeds that are silent as well (empty if none). */
void blame_waiting_on(const master *m, const node *s, double now, double min_s, char *buf, size_t len);
/* The registered, connected node silent longest beyond limit (NULL: none). */
node *blame_late(const master *m, double now, double limit);
/* What a node was doing when it fell silent, for the verdict (empty in a
 * pass, where the phase says it). */
const char *blame_doing(const node *n);

#endif
