/* aggregate.h — the master's processed metrics: per role, per rank and per
 * metric running statistics, plus the combined "all trainers" / "all
 * servers" view (the seed's ProcessedMetricsPrinter, kept live).
 *
 * Nodes stream their raw samples; every sample goes into its rank's stats
 * and into its role's combined stats, so both are exact over the run.
 */
#ifndef PSBENCH_AGGREGATE_H
#define PSBENCH_AGGREGATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "master/snapshot.h"
#include "shared/metrics.h"

typedef enum agg_role { AGG_TRAINER = 0, AGG_SERVER = 1, AGG_NROLES } agg_role;

/* The step metric, whose samples the aggregate also counts into the
 * buckets of /metrics' histogram (snapshot.h's SNAP_STEP_BOUNDS_MS). */
#define AGG_STEP_METRIC "batch_level_metric,batch_all"

typedef struct aggregate {
    struct agg_group {
        metrics *all;
        metrics **ranks; /* index = rank; NULL until that rank reports */
        uint32_t nranks;
    } g[AGG_NROLES];
    /* Each trainer rank's step samples by bucket, counted as they arrive
     * (exact whatever their number: the stats keep every sample only up
     * to a million). index = rank; NULL until that rank reports a step. */
    struct agg_steps {
        uint64_t n[SNAP_STEP_NBOUNDS + 1]; /* per bucket, not cumulative; the last: above every bound */
        uint64_t count;
        double sum_ms;
    } **steps;
    uint32_t nsteps;
} aggregate;

const char *agg_role_name(agg_role r);
int agg_init(aggregate *a);
void agg_free(aggregate *a);
void agg_reset(aggregate *a);
/* Distinct metrics one rank may report, at most: the seed's and psbench's
 * are a few dozen (a server adds one per trainer it feeds); a node that
 * sends ever new names must not grow the master or its tables without
 * bound. */
#define AGG_MAX_METRICS 4096
/* A sample, at most (ms): see validate.h's VALIDATE_MAX_SAMPLE_MS. */
#define AGG_MAX_SAMPLE_MS 1e9
/* Add a node's report: {"samples": {"type,name": [ms, ...], ...}}, all of
 * it or, when any of it is malformed (not a list of durations in
 * [0, AGG_MAX_SAMPLE_MS] ms, or more than AGG_MAX_METRICS names for the
 * rank), none of it. Returns 0 or -1 (a reason in err). */
int agg_add_report(aggregate *a, agg_role role, uint32_t rank, json_t *samples, char *err, size_t errlen);
/* The snap_stat list for a snapshot (malloc'd; *n entries), rank stats
 * then the role's combined stats. `exact`: sorted quantiles; otherwise the
 * live, histogram-based ones above 8192 samples. */
snap_stat *agg_snapshot(aggregate *a, bool exact, size_t *n);
/* Rank `rank`'s statistics of `metric` in `role` (rank -1: the role's
 * combined ones; their samples in the order they came: shared/stats.h),
 * NULL when it has none. Read-only: the aggregate is not changed. */
const stats *agg_find(const aggregate *a, agg_role role, int64_t rank, const char *metric);
/* Each trainer rank's step histogram (malloc'd, by rank; *n entries): the
 * ranks that ever reported a step, their counts since the last
 * agg_reset (a rank stays, at 0, across resets as its stats' keys do).
 * NULL with *n 0 when none (or out of memory). */
snap_step_hist *agg_step_hists(const aggregate *a, size_t *n);
/* Tables like the seed's printer: combined, then each rank (the servers'
 * combined table only from two servers on: one's would repeat its own). */
void agg_print_tables(aggregate *a, FILE *out);

#endif
