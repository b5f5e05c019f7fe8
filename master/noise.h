/* noise.h — how sure a figure is (issue 38): 95 % intervals for step times
 * and rates that stay positive, and the interval of a ratio of two sides
 * (a parameter server's step over allreduce's) that decides a winner.
 *
 * The data are runs of steps: per run, each trainer's steady-state step
 * times in step order (the first step of a pass is left out by the caller:
 * it is another workload). Two statistics of a run:
 *
 *   NOISE_P50            the median of every trainer's steps pooled (the
 *                        headline's "all" step p50), ms
 *   NOISE_SAMPLES_PER_S  the trainers' batch / mean step, summed (the
 *                        headline's "all" samples/s)
 *
 * A figure over runs is the mean of its runs' values. Its interval:
 *
 *   3 runs or more   Student t on the log scale across the runs' values:
 *                    exp(mean(log v) +- t(0.975, k-1) sd(log v) / sqrt(k));
 *                    positive by construction ("log-t over runs")
 *   fewer            a moving-block bootstrap over the steps within the
 *                    runs (circular blocks of L steps, the same blocks for
 *                    every trainer of a run, so that what couples trainers
 *                    step by step stays coupled); L from the steps'
 *                    autocorrelation (noise_block_len); the percentile
 *                    interval of NOISE_REPS replicates ("block bootstrap
 *                    over steps"): a resample of positive times is
 *                    positive
 *
 * The ratio of two sides: a two-stage bootstrap. Each replicate resamples
 * a side's runs with replacement where it has 3 or more (else keeps them),
 * then each chosen run's steps in blocks, takes the side's mean of the
 * statistic and the ratio; the interval is the replicates' 2.5 and 97.5
 * percentiles. It carries the noise between runs and within them, and a
 * winner is named only where it excludes 1.
 *
 * Deterministic: the replicates come from shared/rng.h with the caller's
 * seed, so the same data gives the same interval.
 */
#ifndef PSBENCH_NOISE_H
#define PSBENCH_NOISE_H

#include <stddef.h>
#include <stdint.h>

/* Bootstrap replicates, at most (fewer for long runs: noise_reps). */
#define NOISE_REPS 2000u

typedef enum { NOISE_P50, NOISE_SAMPLES_PER_S } noise_stat;

/* One run: ntrainers series of n steps each (ms), aligned by step index. */
typedef struct noise_run {
    const double *const *steps;
    size_t ntrainers, n;
} noise_run;

typedef struct noise_ci {
    double value;       /* the statistic (mean over the runs); NAN: no data */
    double low, high;   /* the 95 % interval; NAN: none (fewer than 2 steps) */
    size_t block;       /* the bootstrap's block length in steps (0: no bootstrap) */
    const char *method; /* "log-t over runs", "block bootstrap over steps",
                         * "two-stage bootstrap (runs, then blocks of steps)", or NULL */
} noise_ci;

/* The moving-block bootstrap's block length for x[0..n): twice the first
 * lag at which x's sample autocorrelation falls inside +-2/sqrt(n) (the
 * lags before it are the series' memory), at least 1, at most n/4 (1 below
 * 8 steps). */
size_t noise_block_len(const double *x, size_t n);

/* A run's statistic (batch_size: a step's samples, for samples/s); NAN
 * when the run has no steps. */
double noise_stat_of(const noise_run *r, noise_stat stat, double batch_size);

/* The statistic over runs[0..nruns) with its interval (above). 0, or -1
 * when out of memory. */
int noise_interval(const noise_run *runs, size_t nruns, noise_stat stat, double batch_size, uint64_t seed,
                   noise_ci *out);

/* The ratio side a / side b of the statistic (each the mean over its runs)
 * with its two-stage bootstrap interval. 0, or -1 when out of memory. */
int noise_ratio(const noise_run *a, size_t na, const noise_run *b, size_t nb, noise_stat stat, double batch_size,
                uint64_t seed, noise_ci *out);

#endif
