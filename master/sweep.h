/* sweep.h — `psbench-master sweep`: a matrix of jobs, one table, a report.
 *
 *   psbench-master sweep --local --ddp-hook rpc_hook,allreduce_hook \
 *       --ntrainer 2,4 --bucket-cap-mb 1,4,25 --runs 3 --out sw
 *
 * Every dimension flag takes a comma-separated list; the matrix is their
 * product (the hook varies fastest, so a PS point and its allreduce partner
 * run one after the other). Every other flag is the job's own and goes to
 * every point unchanged. Each point is one job: a child psbench-master
 * (this binary) with the point's flags, `--runs N`, `--out DIR/points/NNN`,
 * `--tables none`. Every point is checked with `--dry-run` before the
 * first one starts, so a bad value fails the sweep at once, naming the
 * point. As each point ends, one row is printed (nccl-tests' way); at the
 * end DIR gets sweep.json (below), sweep.csv (tidy) and report.html
 * (sweep_report.h).
 *
 * sweep.json, version 1 (the one document the CSV and the report come from):
 *
 * {
 *   "psbench_sweep": 1,
 *   "command": ["psbench-master", "sweep", ...],   argv as given
 *   "started_at": "2026-11-28T01:00:00Z", "finished_at": "...",
 *   "runs": 3,                                      --runs per point
 *   "dimensions": ["hook", "ntrainer", "bucket_cap_mb"],  those varied, matrix order
 *   "points": [ {
 *       "point": 1,                                 1-based, matrix order
 *       "dir": "points/001",                        relative to the sweep folder
 *       "label": "rpc_hook ntrainer=2 bucket_cap_mb=1",
 *       "config": {                                 every dimension's value, varied or not
 *         "hook": "rpc_hook", "trainer": "DdpRpcTrainer", "model": "DummyModel",
 *         "ntrainer": 2, "nserver": 1, "bucket_cap_mb": 1.0 | null (the configuration's),
 *         "device": "cpu", "transport": "auto", "uses_servers": true },
 *       "status": "done" | "failed" | "not run",
 *       "error": null | "the point's failure, one line",
 *       "buckets": 9,                               the trainers' buckets (after DDP's rebuild)
 *       "runs": [ { "run": 1, "headline": {...} } ], each run's results.json headline,
 *                                                   the "all" trainer entry (docs/results.md)
 *       "summary": {                                across the point's runs (summary.h):
 *         "step_p50_ms":        { "n", "mean", "sd", "ci95_low", "ci95_high" },
 *         "step_p90_ms", "samples_per_s", "bytes_per_step", "comm_span_ms",
 *         "effective_gb_per_s", "exposed_comm_ms": the same shape },
 *       "shares": { "forward", "backward_compute", "exposed_comm", "optimizer",
 *                   "other" },                      the step's shares, mean over runs (0..1)
 *       "environment": { "master": {...}, "trainers": [ { "rank", "host", "device",
 *                        "environment" } ], "servers": [ same ] }   the first run's
 *   } ],
 *   "comparisons": [ {                              one per PS point whose allreduce
 *       "ps_point": 1, "allreduce_point": 2,        partner (same config but the hook,
 *       "ps_hook": "rpc_hook",                      and no servers) also ran
 *       "ps_step_ms": 80.1, "allreduce_step_ms": 70.2,   step p50, mean over runs
 *       "ps_over_allreduce": 1.14,                  >1: the parameter server is slower
 *       "faster": "allreduce" | "ps",
 *       "within_noise": false,                      both 95% intervals overlap (runs >= 2)
 *       "noise_known": true } ]                     false with one run per point
 * }
 */
#ifndef PSBENCH_SWEEP_H
#define PSBENCH_SWEEP_H

#include <stdio.h>

/* argv[0] is the subcommand ("sweep"). 0: every point done; 1: a point
 * failed or the files could not be written; 2: usage. */
int sweep_main(int argc, char **argv, FILE *out, FILE *err);

#endif
