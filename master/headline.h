/* headline.h — a run's answer in a few figures (issue 30): per trainer the
 * step time (p50, p90) and samples per second, where the step goes
 * (forward, backward compute, optimizer, exposed communication as shares
 * of the step), the gradient bytes it hands to communication per step and
 * their effective rate over the communication span. Printed at the end of
 * a run above the per-rank tables, written into results.json and served
 * in /api/v1/status (docs/http-api.md). */
#ifndef PSBENCH_HEADLINE_H
#define PSBENCH_HEADLINE_H

#include <stddef.h>
#include <stdio.h>
#include <jansson.h>

#include "master/snapshot.h"

struct master;

/* The headline from the aggregated statistics st[0..n) (agg_snapshot) and
 * the trainers' pass reports: {"pass", "unit": "ms", "trainers": [row per
 * rank, then "all"]}; a new reference, NULL when out of memory. A figure
 * not known (no such metric, no report yet) is null, never 0. */
json_t *headline_json(const struct master *m, const snap_stat *st, size_t n);

/* The headline as text, a few lines (nothing when no trainer reported a step). */
void headline_print(const json_t *h, FILE *out);

#endif
