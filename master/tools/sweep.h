/* sweep.h — `psbench-master sweep`: a matrix of jobs, one table, a report.
 *
 *   psbench-master sweep --local --ddp-hook rpc_hook,allreduce_hook \
 *       --ntrainer 2,4 --bucket-cap-mb 1,4,25 --runs 3 --out sw
 *
 * Every dimension flag takes a comma-separated list; the matrix is their
 * product (the hook varies fastest, so a PS point and its allreduce partner
 * are neighbours; --compress next, so a compressed point follows its fp32
 * one). Every other flag is the job's own and goes to every
 * point unchanged. Each run of a point is one job: a child psbench-master
 * (this binary) with the point's flags, `--runs 1`, `--out
 * DIR/points/NNN[/run-NNN]`; the runs of points that differ only in the
 * hook alternate (--order interleaved, the first side drawn from
 * --order-seed) unless --order sequential. Every point is checked with
 * `--dry-run` before the first one starts, so a bad value fails the sweep
 * at once, naming the point; where the job's --epochs gives fewer than
 * SWEEP_MIN_STEADY_STEPS steady steps and no --steps, every point runs
 * --steps instead (sweep_choose_steps). As each point's runs end, its row
 * is printed (nccl-tests' way, in matrix order); at the end DIR gets
 * sweep.json (below), sweep.csv (tidy) and report.html (sweep_report.h).
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
 *         "device": "cpu", "transport": "auto", "uses_servers": true,
 *         "compress": "none" | "bf16" | ... | null (the trainer class has none) },
 *       "status": "done" | "failed" | "not run",
 *       "error": null | "the point's failure, one line" (a point a signal stopped,
 *                "not run": "stopped by SIGINT during its run: ...", "... after 1 of 3 runs"),
 *       "buckets": 9,                               the trainers' buckets (after DDP's rebuild)
 *       "runs": [ { "run": 1, "headline": {...},   each run's results.json headline,
 *                   "final_loss": 4.85 | null,      the "all" trainer entry (docs/results.md);
 *                   "final_params": {...} | null } ],  its final loss (the trainers' last epoch,
 *                                                   mean) and results.json's final_params
 *       "summary": {                                across the point's runs (summary.h):
 *         "step_p50_ms":        { "n", "mean", "sd", "ci95_low", "ci95_high" },
 *         "step_p90_ms", "samples_per_s", "bytes_per_step", "comm_span_ms",
 *         "effective_gb_per_s", "exposed_comm_ms": the same shape },
 *       "shares": { "forward", "backward_compute", "exposed_comm", "optimizer",
 *                   "other" },                      the step's shares, mean over runs (0..1)
 *       "environment": { "master": {...}, "trainers": [ { "rank", "host", "device",
 *                        "environment" } ], "servers": [ same ] }   the first run's
 *       "n": 50,                                    steady steps per trainer and run, the fewest
 *       "few_steps": false,                         n < HEADLINE_FEW_STEPS
 *       "steady": {                                 the steady state (every step after each
 *                                                   trainer's first; issue 38):
 *         "step_p50_ms":   { "n" (runs), "mean", "ci95_low", "ci95_high",
 *                            "method", "block_steps" },     its interval: master/noise.h
 *         "samples_per_s": the same shape,
 *         "step_p90_ms", "step_mean_ms", "first_step_ms", "comm_span_ms",
 *         "algbw_gb_per_s", "busbw_gb_per_s": as "summary"'s entries,
 *         "shares": { ... } },                      means over runs
 *       "busy_runs": [2], "busy": true,             runs whose host_state was busy
 *       "oversubscribed": false,                    a run's host_state said so
 *       "host_warnings": [ "..." ],                 the runs' host_state warnings, each once
 *       "final_loss": 4.85 | null,                  mean over the runs (issue 43)
 *       "vs_fp32": null | {...},                    its entry of "compression" below
 *       "trace_step": null | {...}                  the first traced run's representative step
 *                                                   (master/trace_an.h trace_an_step_json; each run
 *                                                   traces its timed pass's last 5 steps unless
 *                                                   --no-trace), what the report's timeline draws
 *   } ],
 *   "comparisons": [ {                              one per PS point whose allreduce
 *       "ps_point": 1, "allreduce_point": 2,        partner (same config but the hook,
 *       "ps_hook": "rpc_hook",                      and no servers) also ran
 *       "ps_step_ms": 80.1, "allreduce_step_ms": 70.2,   steady step p50, mean over runs
 *       "ps_over_allreduce": 1.14,                  >1: the parameter server is slower
 *       "faster": "allreduce" | "ps",               the lower step, noise or not
 *       "within_noise": false,                      the ratio's 95% interval contains 1
 *       "noise_known": true,                        the interval exists (2 steady steps a run)
 *       "ratio_ci95_low": 1.05, "ratio_ci95_high": 1.22,   two-stage bootstrap (noise.h)
 *       "ci_method": "two-stage bootstrap (runs, then blocks of steps)",
 *       "verdict": "allreduce" | "ps" | "no difference beyond noise" | "no noise estimate",
 *       "n": 50, "busy": false, "oversubscribed": false } ],
 *   "order": "interleaved" | "sequential", "order_seed": 348824198,
 *   "steps_chosen": 51 | null,                      the --steps the sweep chose itself
 *   "min_steady_steps": 50,
 *   "schedule": [ { "point": 2, "run": 1, "started_at": "..." } ]   the runs' order
 *   "compression": [ {                              issue 43: one per point that differs from
 *       "point": 2, "fp32_point": 1,                a compress "none" point only in compress
 *       "compress": "bf16",                         (both done)
 *       "loss_diff": -8.2e-09,                      its final loss less the fp32 point's, mean over runs
 *       "params_distance": 1.5e-05,                 ||params - fp32's|| / ||fp32's|| (trainer 0's
 *                                                   params.bin, run by run), mean over runs
 *       "why": null | "run 1: ...",                 the first run's reason there is no distance
 *       "runs": [ { "run", "final_loss", "fp32_final_loss", "loss_diff", "params_distance",
 *                   "why" } ] } ]                   each run against the fp32 point's of its number
 * }
 */
#ifndef PSBENCH_SWEEP_H
#define PSBENCH_SWEEP_H

#include <stdio.h>

/* argv[0] is the subcommand ("sweep"). 0: every point done; 1: a point
 * failed or the files could not be written; 2: usage; 128 + N: signal N
 * stopped it (the files written, the points not run marked so). */
int sweep_main(int argc, char **argv, FILE *out, FILE *err);

#endif
