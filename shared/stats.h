/* stats.h — running statistics for one metric (values in milliseconds).
 *
 * A `stats` keeps count/min/max/mean/variance online (Welford's algorithm,
 * merged with Chan et al.'s parallel formula), every sample up to
 * STATS_EXACT_MAX for exact percentiles, and a bounded log-linear histogram
 * for percentiles once more samples than that have been seen.
 *
 * Quantiles:
 *  - while every sample is kept (count <= STATS_EXACT_MAX and no allocation
 *    failed) they are exact, with numpy's default 'linear' method:
 *    h = q*(n-1), result = x[floor(h)] + (h-floor(h)) * (x[floor(h)+1]-x[floor(h)])
 *    over the sorted samples;
 *  - otherwise they come from the histogram: the same interpolation, but each
 *    of the two neighbouring order statistics is replaced by the midpoint of
 *    its bin. Bins are 1/128 of an octave wide, so for positive values inside
 *    the histogram's range [2^-20, 2^24) ms (about 1e-6 .. 1.6e7 ms) each
 *    midpoint is within 1/256 (0.39%) of the true sample and the result
 *    is within 0.39% (so certainly <= 1%) of the exact quantile. Values
 *    outside that range (including <= 0 and NaN) are clamped into the first
 *    or last bin and carry no error bound.
 *
 * Not thread-safe: one owner updates a stats at a time.
 */
#ifndef PSBENCH_STATS_H
#define PSBENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

#define STATS_EXACT_MAX 1000000 /* samples kept for exact percentiles */

typedef struct stats {
    uint64_t count;
    double min, max, mean, m2; /* Welford */
    double sum;
    double *samples;
    size_t nsamples, cap; /* exact samples up to STATS_EXACT_MAX, grown geometrically */
    uint64_t *hist;       /* log-linear histogram, allocated when first binned into; used for quantiles once
                           * count > STATS_EXACT_MAX. It holds every sample but samples[nbinned, nsamples):
                           * kept samples are binned a few hundred at a time (readers bin those on a copy) */
    size_t nbinned;
} stats;

typedef struct stats_summary {
    uint64_t count;
    double min, max, mean, variance, stdev, sum, p50, p75, p90, p95, p99;
} stats_summary;

void stats_init(stats *s);
void stats_free(stats *s);  /* frees the buffers; s is empty (as after stats_init) afterwards */
void stats_reset(stats *s); /* back to empty, keeps allocations */

/* Adds one sample. Returns 0, or -1 on allocation failure (count/min/max/
 * mean/variance/sum are still updated; quantiles then fall back to whatever
 * the histogram holds). NaN and negative values are accepted as given (no
 * clamping), except that the histogram clamps <= 0 and NaN into its first bin. */
int stats_add(stats *s, double v);

/* dst gets all of src: Chan et al. parallel mean/variance, samples appended
 * up to STATS_EXACT_MAX, histograms added. dst == src is allowed (doubles
 * every sample). Returns 0, or -1 on allocation failure (moments still
 * merged). */
int stats_merge(stats *dst, const stats *src);

/* q in [0,1] (clamped; NaN reads as 0). Exact when all samples are kept,
 * else from the histogram (see the top of this file). 0 when empty. Sorts a
 * scratch copy of the samples each call: use stats_summarize for several
 * quantiles. If that copy cannot be allocated the histogram answers. */
double stats_quantile(const stats *s, double q);

/* Quantile from the histogram alone, whatever samples are kept (exposed for
 * testing the approximate path). 0 when the histogram is absent or empty. */
double stats_hist_quantile(const stats *s, double q);

/* All fields at once, sorting at most once. variance is the sample variance
 * (n-1 denominator), 0 when count < 2; stdev = sqrt(variance); all zeros
 * when empty. */
void stats_summarize(const stats *s, stats_summary *out);
/* The same, for live views polled often: exact count/min/max/mean/variance,
 * and above 8192 samples quantiles from the histogram (<= 0.39% relative
 * error) instead of a sort. */
void stats_summarize_fast(const stats *s, stats_summary *out);

#endif
