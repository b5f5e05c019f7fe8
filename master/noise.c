/* noise.c — intervals that mean something (see noise.h). */
#include "master/noise.h"

#include "master/summary.h"
#include "shared/rng.h"

#include <assert.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Elements one interval may touch over all its replicates, about: long
 * runs get fewer replicates (never under 200) rather than minutes of work. */
#define NOISE_BUDGET 40000000.0
#define NOISE_MIN_REPS 200u

/* ---- order statistics -------------------------------------------------------------- */

/* The k-th smallest of x[0..n) (0-based), reordering x so that
 * x[0..k) <= x[k] <= x[k+1..n) (Wirth's selection). */
static double noise_select(double *x, size_t n, size_t k)
{
    assert(k < n);
    long l = 0, m = (long)n - 1, K = (long)k;
    while (l < m) {
        double pivot = x[K];
        long i = l, j = m;
        do {
            while (x[i] < pivot)
                i++;
            while (pivot < x[j])
                j--;
            if (i <= j) {
                double t = x[i];
                x[i] = x[j];
                x[j] = t;
                i++;
                j--;
            }
        } while (i <= j);
        if (j < K)
            l = i;
        if (K < i)
            m = j;
    }
    return x[k];
}

/* Quantile q of x[0..n), numpy's linear method (shared/stats.h), reordering x. */
static double noise_quantile(double *x, size_t n, double q)
{
    if (n == 0)
        return NAN;
    double h = q * (double)(n - 1);
    size_t k = (size_t)h;
    double lo = noise_select(x, n, k);
    if (k + 1 >= n || h == (double)k)
        return lo;
    /* x[k+1..n) are all >= x[k] after the selection: the next order
     * statistic is their minimum. */
    double next = x[k + 1];
    for (size_t i = k + 2; i < n; i++)
        if (x[i] < next)
            next = x[i];
    return lo + (h - (double)k) * (next - lo);
}

static int noise_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- block length ------------------------------------------------------------------ */

size_t noise_block_len(const double *x, size_t n)
{
    if (n < 8)
        return 1;
    double mean = 0;
    for (size_t i = 0; i < n; i++)
        mean += x[i];
    mean /= (double)n;
    double c0 = 0;
    for (size_t i = 0; i < n; i++)
        c0 += (x[i] - mean) * (x[i] - mean);
    if (!(c0 > 0))
        return 1; /* a constant series has no memory */
    double bound = 2.0 / sqrt((double)n);
    size_t max = n / 4, lag;
    for (lag = 1; lag <= max; lag++) {
        double c = 0;
        for (size_t i = 0; i + lag < n; i++)
            c += (x[i] - mean) * (x[i + lag] - mean);
        if (fabs(c / c0) < bound)
            break;
    }
    size_t L = 2 * (lag - 1);
    return L < 1 ? 1 : L > max ? max : L;
}

/* The per-step mean over a run's trainers, into out[0..n). */
static void noise_step_means(const noise_run *r, double *out)
{
    for (size_t i = 0; i < r->n; i++) {
        double s = 0;
        for (size_t t = 0; t < r->ntrainers; t++)
            s += r->steps[t][i];
        out[i] = s / (double)r->ntrainers;
    }
}

/* ---- a run's statistic ---------------------------------------------------------- */

/* The statistic of run r over the steps idx[0..r->n) (NULL: in order);
 * buf holds ntrainers * n doubles. */
static double noise_stat_at(const noise_run *r, const size_t *idx, noise_stat stat, double batch_size, double *buf)
{
    size_t n = r->n, T = r->ntrainers;
    if (n == 0 || T == 0)
        return NAN;
    if (stat == NOISE_P50) {
        for (size_t t = 0; t < T; t++)
            for (size_t i = 0; i < n; i++)
                buf[t * n + i] = r->steps[t][idx ? idx[i] : i];
        return noise_quantile(buf, T * n, 0.5);
    }
    double sps = 0;
    for (size_t t = 0; t < T; t++) {
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += r->steps[t][idx ? idx[i] : i];
        if (!(s > 0))
            return NAN;
        sps += batch_size * 1e3 / (s / (double)n);
    }
    return sps;
}

double noise_stat_of(const noise_run *r, noise_stat stat, double batch_size)
{
    double *buf = malloc((r->n * r->ntrainers ? r->n * r->ntrainers : 1) * sizeof *buf);
    if (!buf)
        return NAN;
    double v = noise_stat_at(r, NULL, stat, batch_size, buf);
    free(buf);
    return v;
}

/* ---- resampling ------------------------------------------------------------------- */

/* One circular moving-block resample of n step indices, blocks of L. */
static void noise_blocks(rng *g, size_t n, size_t L, size_t *idx)
{
    size_t i = 0;
    while (i < n) {
        size_t start = (size_t)rng_below(g, n);
        for (size_t k = 0; k < L && i < n; k++)
            idx[i++] = (start + k) % n;
    }
}

/* Scratch for one side's runs: block lengths, an index buffer and a
 * statistic buffer big enough for the longest run. */
typedef struct {
    size_t *block; /* per run */
    size_t *idx;
    double *buf;
} noise_scratch;

static void noise_scratch_free(noise_scratch *s)
{
    free(s->block);
    free(s->idx);
    free(s->buf);
}

static int noise_scratch_init(noise_scratch *s, const noise_run *runs, size_t nruns)
{
    size_t maxn = 1, maxel = 1;
    for (size_t i = 0; i < nruns; i++) {
        if (runs[i].n > maxn)
            maxn = runs[i].n;
        if (runs[i].n * runs[i].ntrainers > maxel)
            maxel = runs[i].n * runs[i].ntrainers;
    }
    s->block = calloc(nruns ? nruns : 1, sizeof *s->block);
    s->idx = malloc(maxn * sizeof *s->idx);
    s->buf = malloc((maxel > maxn ? maxel : maxn) * sizeof *s->buf);
    if (!s->block || !s->idx || !s->buf) {
        noise_scratch_free(s);
        return -1;
    }
    for (size_t i = 0; i < nruns; i++) {
        noise_step_means(&runs[i], s->buf);
        s->block[i] = noise_block_len(s->buf, runs[i].n);
    }
    return 0;
}

/* The elements one replicate of these runs touches. */
static double noise_elements(const noise_run *runs, size_t nruns)
{
    double e = 0;
    for (size_t i = 0; i < nruns; i++)
        e += (double)runs[i].n * (double)runs[i].ntrainers;
    return e;
}

static unsigned noise_reps(double elements)
{
    double r = elements > 0 ? NOISE_BUDGET / elements : NOISE_REPS;
    return r >= NOISE_REPS ? NOISE_REPS : r <= NOISE_MIN_REPS ? NOISE_MIN_REPS : (unsigned)r;
}

/* One replicate of a side: its runs resampled (with 3 or more) and each
 * chosen run's steps in blocks; the mean of their statistic. */
static double noise_side_replicate(rng *g, const noise_run *runs, size_t nruns, noise_scratch *s, noise_stat stat,
                                   double batch_size)
{
    double sum = 0;
    for (size_t k = 0; k < nruns; k++) {
        size_t r = nruns >= 3 ? (size_t)rng_below(g, nruns) : k;
        noise_blocks(g, runs[r].n, s->block[r], s->idx);
        double v = noise_stat_at(&runs[r], s->idx, stat, batch_size, s->buf);
        if (!isfinite(v))
            return NAN;
        sum += v;
    }
    return sum / (double)nruns;
}

/* The 2.5 and 97.5 percentiles of v[0..n) (finite values only). */
static void noise_percentiles(double *v, size_t n, double *lo, double *hi)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            v[m++] = v[i];
    if (m < 2) {
        *lo = *hi = NAN;
        return;
    }
    qsort(v, m, sizeof *v, noise_cmp);
    double h = 0.025 * (double)(m - 1), H = 0.975 * (double)(m - 1);
    size_t k = (size_t)h, K = (size_t)H;
    *lo = v[k] + (h - (double)k) * (k + 1 < m ? v[k + 1] - v[k] : 0);
    *hi = v[K] + (H - (double)K) * (K + 1 < m ? v[K + 1] - v[K] : 0);
}

/* ---- the figures -------------------------------------------------------------------- */

int noise_interval(const noise_run *runs, size_t nruns, noise_stat stat, double batch_size, uint64_t seed,
                   noise_ci *out)
{
    *out = (noise_ci){.value = NAN, .low = NAN, .high = NAN};
    if (nruns == 0)
        return 0;
    double *v = malloc(nruns * sizeof *v);
    if (!v)
        return -1;
    double sum = 0, lsum = 0;
    size_t k = 0;
    bool positive = true;
    for (size_t i = 0; i < nruns; i++) {
        v[i] = noise_stat_of(&runs[i], stat, batch_size);
        if (!isfinite(v[i])) {
            free(v);
            return 0; /* a run without steps: no figure */
        }
        positive = positive && v[i] > 0;
        sum += v[i];
        k++;
    }
    out->value = sum / (double)k;
    if (k >= 3 && positive) {
        for (size_t i = 0; i < k; i++)
            lsum += log(v[i]);
        double lm = lsum / (double)k, ss = 0;
        for (size_t i = 0; i < k; i++)
            ss += (log(v[i]) - lm) * (log(v[i]) - lm);
        double half = summary_t975((unsigned)(k - 1)) * sqrt(ss / (double)(k - 1)) / sqrt((double)k);
        out->low = exp(lm - half);
        out->high = exp(lm + half);
        out->method = "log-t over runs";
        free(v);
        return 0;
    }
    free(v);
    size_t steps = 0;
    for (size_t i = 0; i < nruns; i++)
        steps += runs[i].n;
    if (steps < 2 * nruns)
        return 0; /* a single step a run: nothing to resample */
    noise_scratch s;
    if (noise_scratch_init(&s, runs, nruns) < 0)
        return -1;
    unsigned reps = noise_reps(noise_elements(runs, nruns));
    double *rv = malloc(reps * sizeof *rv);
    if (!rv) {
        noise_scratch_free(&s);
        return -1;
    }
    rng g;
    rng_seed(&g, seed, 0x6e6f697365ull); /* "noise" */
    for (unsigned i = 0; i < reps; i++)
        rv[i] = noise_side_replicate(&g, runs, nruns, &s, stat, batch_size);
    noise_percentiles(rv, reps, &out->low, &out->high);
    out->block = s.block[0];
    out->method = "block bootstrap over steps";
    free(rv);
    noise_scratch_free(&s);
    return 0;
}

int noise_ratio(const noise_run *a, size_t na, const noise_run *b, size_t nb, noise_stat stat, double batch_size,
                uint64_t seed, noise_ci *out)
{
    *out = (noise_ci){.value = NAN, .low = NAN, .high = NAN};
    if (na == 0 || nb == 0)
        return 0;
    double sa = 0, sb = 0;
    for (size_t i = 0; i < na; i++)
        sa += noise_stat_of(&a[i], stat, batch_size);
    for (size_t i = 0; i < nb; i++)
        sb += noise_stat_of(&b[i], stat, batch_size);
    sa /= (double)na;
    sb /= (double)nb;
    if (!isfinite(sa) || !isfinite(sb) || !(sb > 0))
        return 0;
    out->value = sa / sb;
    noise_scratch s[2];
    if (noise_scratch_init(&s[0], a, na) < 0)
        return -1;
    if (noise_scratch_init(&s[1], b, nb) < 0) {
        noise_scratch_free(&s[0]);
        return -1;
    }
    unsigned reps = noise_reps(noise_elements(a, na) + noise_elements(b, nb));
    double *rv = malloc(reps * sizeof *rv);
    int rc = -1;
    if (rv) {
        rng g;
        rng_seed(&g, seed, 0x726174696full); /* "ratio" */
        for (unsigned i = 0; i < reps; i++) {
            double ra = noise_side_replicate(&g, a, na, &s[0], stat, batch_size);
            double rb = noise_side_replicate(&g, b, nb, &s[1], stat, batch_size);
            rv[i] = rb > 0 ? ra / rb : NAN;
        }
        noise_percentiles(rv, reps, &out->low, &out->high);
        out->block = s[0].block[0];
        out->method = "two-stage bootstrap (runs, then blocks of steps)";
        rc = 0;
    }
    free(rv);
    noise_scratch_free(&s[0]);
    noise_scratch_free(&s[1]);
    return rc;
}
