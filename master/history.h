/* history.h — the run as the dashboard charts it, kept by the master.
 *
 * A bounded ring of points, each the charted metrics' statistics at one
 * instant (sampled from the published snapshots, at most one a
 * HISTORY_PERIOD_S while a pass runs, one more when the run ends), served
 * as GET /api/v1/history: a page opened late, or during --linger, draws the
 * whole run rather than flat lines from the moment it opened. Each point is
 * rendered once, when it is taken; the document is their concatenation.
 * Pure data: no I/O, no threads (the loop owns it; the HTTP thread sees
 * only the published document).
 */
#ifndef PSBENCH_HISTORY_H
#define PSBENCH_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/snapshot.h"

#define HISTORY_PERIOD_S 1.0
#define HISTORY_MAX_POINTS 3600u             /* an hour at one point a second */
#define HISTORY_MAX_BYTES ((size_t)16 << 20) /* the points' rendered size, whatever the ranks */
#define HISTORY_KEEP_RUNS 2u                 /* a series keeps the current run and the one before */
#define HISTORY_WINDOW_S 10.0                /* a point's "window": the samples of the last 10 s */
#define HISTORY_MARKS 32u /* (time, count) marks a series keeps to find where its window starts */

typedef struct history history;

/* An empty history holding at most max_points points of max_bytes in all
 * (the oldest go first). NULL: out of memory. */
history *history_new(size_t max_points, size_t max_bytes);
void history_free(history *h);

/* Offers the snapshot in (its phase, run, stats) at time t (seconds since
 * the epoch). It becomes a point when its phase is "warmup" or "running"
 * and HISTORY_PERIOD_S has passed since the last point, the phase changed
 * or `last` says it is a pass's last (exact) figures, and when it is the
 * first of a "done" or "failed": nothing is taken while waiting or once
 * the run has ended. Only the charted metrics are kept (history_charted).
 * live, when not NULL, is parallel to in->stats: the stats each summarises
 * (borrowed for the call; an entry may be NULL). Each charted metric whose
 * stats are known so also gets its
 * window: the samples that arrived in the last HISTORY_WINDOW_S of the same
 * run and pass, found from the count it had at an earlier point (a mark)
 * and read from the stats' kept samples (in arrival order); past
 * STATS_EXACT_MAX samples only its count and mean (history_window).
 * Returns 1 if a point was taken, 0 if not, -1 out of memory (the point
 * is lost, the history intact). */
int history_offer(history *h, double t, const snapshot_input *in, const stats *const *live, bool last);

/* GET /api/v1/history:
 * {"period_s", "window_s", "max_points", "points": [{"t", "run", "phase", "pass",
 *   "groups": {"trainer": {RANK|"all": {METRIC: {"count","mean","p50","p90","p99",
 *                                                "window": {"seconds","count","mean","p50","p90"}}}},
 *              "server": {...}}}, ...]}, oldest first. NULL: out of memory. */
char *history_json(const history *h);

/* GET /api/v1/history/last: {"period_s", "window_s", "point": the newest
 * point as in history_json | null}: what a page that loaded the history
 * polls for the next points. NULL: out of memory. */
char *history_last_json(const history *h);

/* Points held now (for tests). */
size_t history_points(const history *h);

/* The window of one series: the samples [from, to) of st (arrival order)
 * over `seconds`. count is to - from and the mean comes from the sums
 * (sum_to - sum_from), always; p50 and p90 (numpy's linear method, as
 * stats.h) only while st keeps every sample it counted, else NaN, as are
 * the mean and quantiles of an empty window. Pure: exposed for tests. */
typedef struct history_window {
    double seconds;
    uint64_t count;
    double mean, p50, p90;
} history_window;
void history_window_of(const stats *st, uint64_t from, double sum_from, double seconds, history_window *out);

/* 1 if metric is one the dashboard charts (and the history keeps). */
int history_charted(const char *metric);

#endif
