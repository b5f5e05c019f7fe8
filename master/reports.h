/* reports.h — what nodes report, taken into the master's books: metrics
 * (counters, samples, a server's fill, a trainer's GPU-timed list), a
 * pass's results, a loss that diverged, a failure's reason. Every field is
 * checked first (validate.h) and a report is applied whole or not at all.
 *
 * It fails no run itself: a report the run cannot take returns -1 with the
 * verdict, naming the node and the field; the caller gives it.
 */
#ifndef PSBENCH_MASTER_REPORTS_H
#define PSBENCH_MASTER_REPORTS_H

#include "master/master.h"

/* A metrics report (or the metrics part of pass_done). 0, or -1 with the
 * verdict. Samples are not aggregated while the run resets (they are the
 * warm-up's last, and the timed pass's books start empty). */
int reports_metrics(master *m, node *n, json_t *body, char *verdict, size_t len);
/* A trainer's pass_done, its metrics taken already: its results checked,
 * its divergence (allowed by --allow-divergence, or the verdict), and the
 * results kept for results.json (the timed pass's, or the warm-up's). 0, or
 * -1 with the verdict. */
int reports_pass_results(master *m, node *n, json_t *body, char *verdict, size_t len);
/* A node's `failed`: where its loss diverged is kept (a trainer's), and
 * `why` says who failed and why, the node's words escaped. */
void reports_failure(node *n, json_t *body, char *why, size_t len);

#endif
