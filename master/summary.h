/* summary.h — noise you can see (issue 30): with --runs N, the runs'
 * headlines (headline.h) summed up figure by figure — mean, standard
 * deviation and a 95 % confidence interval of the mean (Student t, on the
 * log scale for times and rates; from 3 runs: issue 38) — printed
 * after the last run and written to --out DIR/summary.json
 * (docs/http-api.md). One run gives a mean and no spread: its deviation and
 * interval are null, never 0. */
#ifndef PSBENCH_SUMMARY_H
#define PSBENCH_SUMMARY_H

#include <stddef.h>
#include <stdio.h>
#include <jansson.h>

/* The runs a series' summary covers at most: the last ones (a series until
 * stopped, --runs 0, keeps no more). */
#define SUMMARY_MAX_RUNS 1000u

/* Runs a 95 % interval needs, at least (issue 38: two give t = 12.7). */
#define SUMMARY_MIN_RUNS_CI 3u

/* One figure over n runs. stdev is NAN for n < 2, the interval for n <
 * SUMMARY_MIN_RUNS_CI. */
typedef struct {
    size_t n;
    double mean;
    double stdev;   /* sample standard deviation (n - 1) */
    double ci_low;  /* every value positive (a time, a rate): exp(mean(log x) -/+ t(0.975, n - 1) *
                     * sd(log x) / sqrt(n)), positive by construction; else mean -/+ t * stdev / sqrt(n) */
    double ci_high;
} summary_ci;

/* The two-sided 95 % quantile of Student's t with df degrees of freedom
 * (t(0.975, df)); df >= 1. */
double summary_t975(unsigned df);

/* The summary of x[0..n) into *out; the NAN values in x are skipped (a
 * figure a run did not know). */
void summary_of(const double *x, size_t n, summary_ci *out);

/* The summary of headlines (a JSON array of headline_json objects, one
 * per run): {"runs", "confidence": 0.95, "interval": "Student t",
 * "trainers": [{"trainer", FIGURE: {"n", "mean", "stdev", "ci95":
 * [low, high], "values": [...]}, ...}]}, the figures those of the first
 * run's rows (step_p50_ms, step_p90_ms, samples_per_s, bytes_per_step,
 * comm_span_ms, effective_gb_per_s, the shares as shares.KEY, and the steady
 * state's n, step_p50_ms, step_p90_ms, samples_per_s, first_step_ms as
 * steady.KEY (issue 38); units
 * the headline's). A new
 * reference; NULL when out of memory. */
json_t *summary_json(const json_t *headlines);

/* A series' runs as the summary reads them (each run's rows' figures as
 * doubles: a series until stopped keeps up to SUMMARY_MAX_RUNS of them, so
 * they must be small), and their summary: summary_json's document. */
typedef struct summary_runs summary_runs;
summary_runs *summary_runs_new(void); /* NULL when out of memory */
void summary_runs_free(summary_runs *s);
/* Keep headline's figures (the oldest run goes past SUMMARY_MAX_RUNS). 0,
 * or -1 when out of memory. */
int summary_runs_add(summary_runs *s, const json_t *headline);
size_t summary_runs_count(const summary_runs *s);
json_t *summary_runs_json(const summary_runs *s);

/* The summary's "all" row as text, a figure a line (nothing without one). */
void summary_print(const json_t *s, FILE *out);

#endif
