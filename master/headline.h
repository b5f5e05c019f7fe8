/* headline.h — a run's answer in a few figures (issue 30): per trainer the
 * step time (p50, p90) and samples per second, where the step goes
 * (forward, backward compute, optimizer, exposed communication as shares
 * of the step), the gradient bytes it hands to communication per step and
 * their effective rate over the communication span. Printed at the end of
 * a run above the per-rank tables, written into results.json and served
 * in /api/v1/status (docs/http-api.md). */
#ifndef PSBENCH_HEADLINE_H
#define PSBENCH_HEADLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <jansson.h>

#include "master/snapshot.h"

struct master;

/* Fewer steady-state steps than this per trainer: a figure is marked
 * "few steps (n=...)" wherever it is shown (issue 38). */
#define HEADLINE_FEW_STEPS 20

/* The headline from the aggregated statistics st[0..n) (agg_snapshot) and
 * the trainers' pass reports: {"pass", "unit": "ms", "trainers": [row per
 * rank, then "all"]}; a new reference, NULL when out of memory. A figure
 * not known (no such metric, no report yet) is null, never 0.
 *
 * Each row also has (extensions, issue 38; docs/results.md "How psbench
 * measures") "wire_bytes_per_step" and "wire_bytes_model", and "steady":
 * null, or the steady state: every step after each trainer's first,
 * {"n" (steady steps per trainer; "all": the fewest), "first_step_ms" (the
 * first step apart; "all": the trainers' mean), "step_p50_ms",
 * "step_p90_ms", "step_mean_ms", "samples_per_s", "few_steps" (n <
 * HEADLINE_FEW_STEPS), "shares", "comm_span_ms", "algbw_gb_per_s",
 * "busbw_gb_per_s"} and, exact only, the run's own 95 % intervals
 * "step_p50_ci95", "samples_per_s_ci95" with "ci_method" and
 * "ci_block_steps" (master/noise.h). exact: the final headline (every
 * kept sample, the bootstrap); else the live one (cheap: the quantiles of
 * long passes from the histogram). */
json_t *headline_json(const struct master *m, const snap_stat *st, size_t n, bool exact);

/* The headline as text, a few lines (nothing when no trainer reported a step). */
void headline_print(const json_t *h, FILE *out);

#endif
