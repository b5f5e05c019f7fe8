/* stats.c — running statistics for one metric: moments, exact samples and a
 * log-linear histogram (see stats.h for the quantile semantics). */
#include "shared/stats.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Histogram layout. A positive finite v is split by frexp into m * 2^e with
 * m in [0.5, 1); the octave is e and the sub-bin is the top 7 bits of the
 * mantissa, so every bin spans 1/128 of its octave's lower bound. Octaves run
 * from e = -19 ([2^-20, 2^-19) ms, just below 1e-6) to e = 24 ([2^23, 2^24)
 * ms, just above 1e7): 44 octaves * 128 = 5632 bins, 44 KiB per stats. */
#define HIST_SUB_BITS 7
#define HIST_SUB (1 << HIST_SUB_BITS)
#define HIST_EXP_MIN (-19)
#define HIST_EXP_MAX 24
#define HIST_OCTAVES (HIST_EXP_MAX - HIST_EXP_MIN + 1)
#define HIST_BINS ((size_t)HIST_OCTAVES * HIST_SUB)

#define SAMPLES_INITIAL_CAP 64
/* Kept samples that may wait to be binned into the histogram (stats_add). */
#define STATS_BIN_BATCH 256

static size_t hist_index(double v)
{
    if (!(v > 0)) /* <= 0 and NaN: first bin */
        return 0;
    if (isinf(v))
        return HIST_BINS - 1;
    /* frexp's m * 2^e, read from the bits (frexp is a library call, and
     * this runs for every sample): a normal v is 1.f * 2^(E-1023), so
     * e = E - 1022 and m*2-1 = f, whose top 7 bits are the sub-bin. A
     * subnormal (E = 0) lies far below the first octave. */
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    int biased = (int)(bits >> 52 & 0x7ff);
    if (biased == 0)
        return 0;
    int e = biased - 1022;
    if (e < HIST_EXP_MIN)
        return 0;
    if (e > HIST_EXP_MAX)
        return HIST_BINS - 1;
    size_t sub = (size_t)(bits >> (52 - HIST_SUB_BITS) & (HIST_SUB - 1));
    return (size_t)(e - HIST_EXP_MIN) * HIST_SUB + sub;
}

static double hist_midpoint(size_t idx)
{
    assert(idx < HIST_BINS);
    int e = (int)(idx / HIST_SUB) + HIST_EXP_MIN;
    double sub = (double)(idx % HIST_SUB);
    /* Bin covers [2^(e-1) * (1 + sub/128), 2^(e-1) * (1 + (sub+1)/128)). */
    return ldexp(1.0 + (sub + 0.5) / HIST_SUB, e - 1);
}

/* Samples the histogram hist holds. Not s->count: a failed histogram
 * allocation leaves samples out, and ranks must match the bins. */
static uint64_t hist_total(const uint64_t *hist)
{
    if (!hist)
        return 0;
    uint64_t t = 0;
    for (size_t i = 0; i < HIST_BINS; i++)
        t += hist[i];
    return t;
}

static void hist_bin(uint64_t *hist, const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hist[hist_index(x[i])]++;
}

/* The histogram as it would be with every sample binned: s->hist itself
 * when no kept sample waits to be binned (see stats_add), else a copy with
 * those binned too, in *tmp for the caller to free. NULL: no histogram.
 * Without memory for the copy, s->hist alone (the last few samples left
 * out of the approximate path). s is not changed: callers may hold only a
 * const view. */
static const uint64_t *hist_view(const stats *s, uint64_t **tmp)
{
    size_t pending = s->nsamples - s->nbinned;
    *tmp = NULL;
    if (pending == 0)
        return s->hist;
    uint64_t *h = malloc(HIST_BINS * sizeof *h);
    if (!h)
        return s->hist;
    if (s->hist)
        memcpy(h, s->hist, HIST_BINS * sizeof *h);
    else
        memset(h, 0, HIST_BINS * sizeof *h);
    hist_bin(h, s->samples + s->nbinned, pending);
    *tmp = h;
    return h;
}

static double clamp_q(double q)
{
    if (!(q >= 0)) /* negative or NaN */
        return 0;
    return q > 1 ? 1 : q;
}

/* The 'linear' interpolation of stats.h, on bin midpoints: find the bins of
 * the order statistics floor(h) and floor(h)+1 in one pass. */
static double hist_quantile_total(const uint64_t *hist, uint64_t total, double q)
{
    assert(hist && total > 0);
    double h = clamp_q(q) * (double)(total - 1);
    uint64_t lo = (uint64_t)h;
    if (lo > total - 1) /* rounding of huge totals */
        lo = total - 1;
    double frac = h - (double)lo;
    uint64_t hi = lo + 1 < total ? lo + 1 : lo;

    size_t blo = HIST_BINS, bhi = HIST_BINS;
    uint64_t cum = 0;
    for (size_t i = 0; i < HIST_BINS && bhi == HIST_BINS; i++) {
        cum += hist[i];
        if (blo == HIST_BINS && cum > lo)
            blo = i;
        if (cum > hi)
            bhi = i;
    }
    assert(blo < HIST_BINS && bhi < HIST_BINS);
    double vlo = hist_midpoint(blo), vhi = hist_midpoint(bhi);
    return vlo + frac * (vhi - vlo);
}

static int samples_reserve(stats *s, size_t need)
{
    assert(need <= STATS_EXACT_MAX);
    if (need <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : SAMPLES_INITIAL_CAP;
    while (cap < need)
        cap *= 2;
    if (cap > STATS_EXACT_MAX)
        cap = STATS_EXACT_MAX;
    double *p = realloc(s->samples, cap * sizeof *p);
    if (!p)
        return -1;
    s->samples = p;
    s->cap = cap;
    return 0;
}

static int hist_ensure(stats *s)
{
    if (!s->hist)
        s->hist = calloc(HIST_BINS, sizeof *s->hist);
    return s->hist ? 0 : -1;
}

/* Bin the kept samples that are not in the histogram yet. */
static int hist_catch_up(stats *s)
{
    if (s->nbinned == s->nsamples)
        return 0;
    if (hist_ensure(s) < 0)
        return -1;
    hist_bin(s->hist, s->samples + s->nbinned, s->nsamples - s->nbinned);
    s->nbinned = s->nsamples;
    return 0;
}

/* Total order for qsort: NaNs last, so the comparator stays consistent. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y))
        return isnan(x) - isnan(y);
    return (x > y) - (x < y);
}

/* Exact 'linear' quantiles over the kept samples, sorting one scratch copy
 * (s is const: callers may read it while holding only a const view). */
static int exact_fill(const stats *s, const double *qs, double *out, size_t k)
{
    size_t n = s->nsamples;
    assert(n > 0);
    double *x = malloc(n * sizeof *x);
    if (!x)
        return -1;
    memcpy(x, s->samples, n * sizeof *x);
    qsort(x, n, sizeof *x, cmp_double);
    for (size_t i = 0; i < k; i++) {
        double h = clamp_q(qs[i]) * (double)(n - 1);
        size_t lo = (size_t)h;
        if (lo >= n - 1)
            out[i] = x[n - 1];
        else
            out[i] = x[lo] + (h - (double)lo) * (x[lo + 1] - x[lo]);
    }
    free(x);
    return 0;
}

/* Quantiles by the best source available: all samples (exact), else the
 * histogram, else whatever samples survived allocation failures, else the
 * mean as a last resort. */
static void quantiles_fill(const stats *s, const double *qs, double *out, size_t k)
{
    if (s->count == 0) {
        for (size_t i = 0; i < k; i++)
            out[i] = 0;
        return;
    }
    bool all_kept = s->nsamples == s->count;
    if (all_kept && exact_fill(s, qs, out, k) == 0)
        return;
    uint64_t *tmp;
    const uint64_t *hist = hist_view(s, &tmp);
    uint64_t total = hist_total(hist);
    if (total > 0) {
        for (size_t i = 0; i < k; i++)
            out[i] = hist_quantile_total(hist, total, qs[i]);
        free(tmp);
        return;
    }
    free(tmp);
    if (!all_kept && s->nsamples > 0 && exact_fill(s, qs, out, k) == 0)
        return;
    for (size_t i = 0; i < k; i++)
        out[i] = s->mean;
}

void stats_init(stats *s)
{
    memset(s, 0, sizeof *s);
}

void stats_free(stats *s)
{
    free(s->samples);
    free(s->hist);
    stats_init(s);
}

void stats_reset(stats *s)
{
    s->count = 0;
    s->min = s->max = s->mean = s->m2 = s->sum = 0;
    s->nsamples = 0;
    s->nbinned = 0;
    if (s->hist)
        memset(s->hist, 0, HIST_BINS * sizeof *s->hist);
}

int stats_add(stats *s, double v)
{
    if (s->count == 0) {
        s->min = s->max = v;
    } else {
        if (v < s->min)
            s->min = v;
        if (v > s->max)
            s->max = v;
    }
    s->count++;
    double delta = v - s->mean;
    s->mean += delta / (double)s->count;
    s->m2 += delta * (v - s->mean);
    s->sum += v;

    /* A kept sample reaches the histogram later, STATS_BIN_BATCH at a
     * time: one histogram is 44 KiB, and a bin touched per sample was a
     * cache miss per sample (a server adds a few hundred samples to a
     * dozen of them per round of small buckets). Readers bin what waits
     * on a copy (hist_view). A sample that is not kept goes there at once,
     * after every kept one before it. */
    int rc = 0;
    bool kept = false;
    if (s->nsamples < STATS_EXACT_MAX) {
        if (samples_reserve(s, s->nsamples + 1) == 0) {
            s->samples[s->nsamples++] = v;
            kept = true;
        } else {
            rc = -1;
        }
    }
    if (kept) {
        if (s->nsamples - s->nbinned >= STATS_BIN_BATCH && hist_catch_up(s) < 0)
            rc = -1; /* tried again at the next add */
    } else if (hist_catch_up(s) == 0 && hist_ensure(s) == 0) {
        s->hist[hist_index(v)]++;
    } else {
        rc = -1;
    }
    return rc;
}

int stats_merge(stats *dst, const stats *src)
{
    if (src->count == 0)
        return 0;
    /* dst's histogram holds all of dst before src's is added: what src
     * appends to dst's samples is then in the histogram already (below). */
    int rc = hist_catch_up(dst) < 0 ? -1 : 0;
    /* Snapshot src first: dst may be src. */
    double nb = (double)src->count, mb = src->mean, m2b = src->m2;
    double minb = src->min, maxb = src->max, sumb = src->sum;
    size_t take = src->nsamples;

    if (dst->count == 0) {
        dst->mean = mb;
        dst->m2 = m2b;
        dst->min = minb;
        dst->max = maxb;
    } else {
        double na = (double)dst->count, n = na + nb;
        double delta = mb - dst->mean;
        dst->mean += delta * (nb / n);
        dst->m2 += m2b + delta * delta * (na * nb / n);
        if (minb < dst->min)
            dst->min = minb;
        if (maxb > dst->max)
            dst->max = maxb;
    }
    dst->count += src->count;
    dst->sum += sumb;

    /* src's kept samples not binned yet (none when dst == src: caught up
     * above), binned into dst's histogram with src's histogram. */
    size_t src_from = src->nbinned, src_to = src->nsamples;
    if (src->hist || src_from < src_to) {
        if (hist_ensure(dst) == 0) {
            if (src->hist)
                for (size_t i = 0; i < HIST_BINS; i++)
                    dst->hist[i] += src->hist[i];
            hist_bin(dst->hist, src->samples + src_from, src_to - src_from);
        } else {
            rc = -1;
        }
    }
    if (take > STATS_EXACT_MAX - dst->nsamples)
        take = STATS_EXACT_MAX - dst->nsamples;
    if (take > 0) {
        if (samples_reserve(dst, dst->nsamples + take) == 0) {
            /* Read src->samples after the reserve: if dst == src it moved.
             * The ranges never overlap because take <= the old nsamples. */
            memcpy(dst->samples + dst->nsamples, src->samples, take * sizeof *dst->samples);
            dst->nsamples += take;
        } else {
            rc = -1;
        }
    }
    /* The appended samples are in the histogram (src's, and the binning
     * above); without a histogram they are binned on the next catch-up. */
    if (dst->hist)
        dst->nbinned = dst->nsamples;
    return rc;
}

double stats_quantile(const stats *s, double q)
{
    double out;
    quantiles_fill(s, &q, &out, 1);
    return out;
}

double stats_hist_quantile(const stats *s, double q)
{
    uint64_t *tmp;
    const uint64_t *hist = hist_view(s, &tmp);
    uint64_t total = hist_total(hist);
    double v = total ? hist_quantile_total(hist, total, q) : 0;
    free(tmp);
    return v;
}

/* Live views: exact moments, quantiles from the histogram (<= 0.39%
 * relative error) once there are too many samples to sort twice a second;
 * exact below STATS_FAST_EXACT. */
#define STATS_FAST_EXACT 8192

void stats_summarize_fast(const stats *s, stats_summary *out)
{
    if (s->count <= STATS_FAST_EXACT || !s->hist) {
        stats_summarize(s, out);
        return;
    }
    stats_summary exact_moments;
    /* Moments without the sort: summarize a view with no samples kept. */
    stats view = *s;
    view.nsamples = 0;
    view.nbinned = 0;
    stats_summarize(&view, &exact_moments);
    *out = exact_moments;
    uint64_t *tmp;
    const uint64_t *hist = hist_view(s, &tmp);
    uint64_t total = hist_total(hist);
    if (total > 0) {
        out->p50 = hist_quantile_total(hist, total, 0.50);
        out->p75 = hist_quantile_total(hist, total, 0.75);
        out->p90 = hist_quantile_total(hist, total, 0.90);
        out->p95 = hist_quantile_total(hist, total, 0.95);
        out->p99 = hist_quantile_total(hist, total, 0.99);
    }
    free(tmp);
}

void stats_summarize(const stats *s, stats_summary *out)
{
    memset(out, 0, sizeof *out);
    if (s->count == 0)
        return;
    out->count = s->count;
    out->min = s->min;
    out->max = s->max;
    out->mean = s->mean;
    out->sum = s->sum;
    if (s->count >= 2) {
        double var = s->m2 / (double)(s->count - 1);
        out->variance = var < 0 ? 0 : var; /* rounding can leave m2 a hair below 0 */
        out->stdev = sqrt(out->variance);
    }
    static const double qs[5] = {0.50, 0.75, 0.90, 0.95, 0.99};
    double v[5];
    quantiles_fill(s, qs, v, 5);
    out->p50 = v[0];
    out->p75 = v[1];
    out->p90 = v[2];
    out->p95 = v[3];
    out->p99 = v[4];
}
