/* metrics.h — the seed's MetricsLogger: a registry of named metrics, each a
 * `stats`, keyed by the seed's "type,name" string (for example
 * "hook_future_metric,rpc_dense"), kept in insertion order, plus a table
 * printer in the shape of the seed's ProcessedMetricsPrinter.
 *
 * Each metric lives in its own allocation, so a stats pointer returned by
 * metrics_get or metrics_at stays valid until metrics_free, however many
 * metrics are added later. Not thread-safe.
 */
#ifndef PSBENCH_METRICS_H
#define PSBENCH_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "shared/stats.h"

typedef struct metrics metrics; /* opaque */

metrics *metrics_new(void); /* NULL on allocation failure */
void metrics_free(metrics *m); /* NULL is a no-op */

/* Find or create; NULL on allocation failure. The key is copied. A new key
 * goes last, but one that ends in a number (a family such as
 * "...,trainer_lag_R", one per trainer rank) goes before the first key of
 * its family with a larger number: a family reads in number order whatever
 * order its members were created in (trainers join a server in any order,
 * servers report to the master in any order). */
stats *metrics_get(metrics *m, const char *key);

size_t metrics_size(const metrics *m);
const char *metrics_key_at(const metrics *m, size_t i); /* i < metrics_size */
stats *metrics_at(metrics *m, size_t i);                /* i < metrics_size */
void metrics_reset(metrics *m); /* every stats back to empty, keys (and GPU-timed marks) kept */

/* GPU-timed metrics: metric `key` (created if absent) is measured between
 * two marks on a device's stream (CUDA events: the seed's
 * record_start(..., cuda=True)), not by the host's clock. A trainer's
 * reports name them (`gpu_timed`, docs/protocol.md). -1: out of memory. */
int metrics_set_gpu_timed(metrics *m, const char *key);
/* The same for a stats obtained from metrics_get/metrics_at (only those). */
void metrics_mark_gpu_timed(stats *st);
bool metrics_gpu_timed_at(const metrics *m, size_t i); /* i < metrics_size */
size_t metrics_gpu_timed_count(const metrics *m);

/* Reporting to a master: once enabled, metrics_add also keeps each new
 * sample until metrics_take_pending hands it over, so that a node can
 * stream exactly the samples recorded since its last report. */
void metrics_enable_reporting(metrics *m);
/* stats_add on a stats obtained from metrics_get/metrics_at (only those),
 * plus the pending copy when reporting is enabled. */
void metrics_add(stats *st, double ms);
/* The samples of metric i recorded since the last metrics_clear_pending. */
size_t metrics_pending(const metrics *m, size_t i, const double **samples);
void metrics_clear_pending(metrics *m);

/* A title line, then a header and one row per metric (insertion order, but
 * a numbered family in number order):
 * metric | count | min | max | mean | variance | stdev | p50 | p90 | p99,
 * values in milliseconds with 3 decimals, the metric column as wide as the
 * longest key. */
void metrics_print_table(metrics *m, FILE *out, const char *title);

#endif
