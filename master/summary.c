/* summary.c — the runs of a --runs series summed up (see summary.h).
 *
 * The interval is the textbook one for the mean of a few samples: the runs
 * are few (3 to 10) and their spread unknown, so the normal's 1.96 would
 * be too narrow; t(0.975, df) comes from a table up to 30 degrees of
 * freedom and from the Cornish-Fisher expansion beyond (error < 1e-4). */
#include "master/summary.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* t(0.975, df) for df = 1..30. */
static const double summary_t_table[30] = {
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010,  2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796,  2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
};

double summary_t975(unsigned df)
{
    assert(df >= 1);
    if (df <= 30)
        return summary_t_table[df - 1];
    const double z = 1.959964, d = (double)df;
    return z + (z * z * z + z) / (4 * d) + (5 * pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * d * d);
}

void summary_of(const double *x, size_t n, summary_ci *out)
{
    double sum = 0;
    size_t k = 0;
    bool positive = true;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) {
            sum += x[i];
            k++;
            positive = positive && x[i] > 0;
        }
    out->n = k;
    out->mean = k ? sum / (double)k : NAN;
    out->stdev = out->ci_low = out->ci_high = NAN;
    if (k < 2)
        return;
    double ss = 0; /* two passes: the deviations, not sum of squares minus square of sum */
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]))
            ss += (x[i] - out->mean) * (x[i] - out->mean);
    out->stdev = sqrt(ss / (double)(k - 1));
    /* Issue 38: two runs give no interval worth the name (t = 12.7: a
     * time's went to [-4103, 5336] ms); from three on, a time or a rate
     * (every value positive) gets its interval on the log scale, positive
     * by construction; a figure that may be 0 (a share) the plain one. */
    if (k < SUMMARY_MIN_RUNS_CI)
        return;
    double t = summary_t975((unsigned)(k - 1));
    if (positive) {
        double lm = 0, lss = 0;
        for (size_t i = 0; i < n; i++)
            if (isfinite(x[i]))
                lm += log(x[i]);
        lm /= (double)k;
        for (size_t i = 0; i < n; i++)
            if (isfinite(x[i]))
                lss += (log(x[i]) - lm) * (log(x[i]) - lm);
        double half = t * sqrt(lss / (double)(k - 1)) / sqrt((double)k);
        out->ci_low = exp(lm - half);
        out->ci_high = exp(lm + half);
        return;
    }
    double half = t * out->stdev / sqrt((double)k);
    out->ci_low = out->mean - half;
    out->ci_high = out->mean + half;
}

static json_t *summary_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The figures of a headline row that are summed up, "shares.KEY" for a share. */
static const char *const summary_figures[] = {
    "step_p50_ms",   "step_p90_ms",    "samples_per_s",           "shares.forward",
    "shares.backward_compute", "shares.exposed_comm", "shares.optimizer", "shares.other",
    "bytes_per_step", "comm_span_ms", "effective_gb_per_s",
    /* The steady state (issue 38: every step after each trainer's first). */
    "steady.n", "steady.step_p50_ms", "steady.step_p90_ms", "steady.samples_per_s", "steady.first_step_ms",
};
#define SUMMARY_NFIG (sizeof summary_figures / sizeof summary_figures[0])

/* Figure fig of a headline row, NAN if null or absent. */
static double summary_get(const json_t *row, const char *fig)
{
    const json_t *v;
    if (strncmp(fig, "shares.", 7) == 0)
        v = json_object_get(json_object_get(row, "shares"), fig + 7);
    else if (strncmp(fig, "steady.", 7) == 0)
        v = json_object_get(json_object_get(row, "steady"), fig + 7);
    else
        v = json_object_get(row, fig);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The row of trainer who in a headline, NULL if none. */
static const json_t *summary_row(const json_t *h, const char *who)
{
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(h, "trainers"), i, row) {
        const char *t = json_string_value(json_object_get(row, "trainer"));
        if (t && strcmp(t, who) == 0)
            return row;
    }
    return NULL;
}

/* ---- a series' runs, kept small ------------------------------------------------
 *
 * A series until stopped keeps up to SUMMARY_MAX_RUNS runs: each as the
 * doubles the summary reads (its rows' figures), not as the headline's
 * JSON, whose objects cost kilobytes a run (tests/multihost/test_soak.py
 * bounds the master's growth per run). */
struct summary_runs {
    char (*rows)[32]; /* the rows' trainers, the first run's ("0", "1", ..., "all") */
    size_t nrows;
    double *v;        /* [run][row][figure], a ring of SUMMARY_MAX_RUNS runs */
    size_t first, n;  /* the oldest run kept, and how many */
};

summary_runs *summary_runs_new(void) { return calloc(1, sizeof(summary_runs)); }

void summary_runs_free(summary_runs *s)
{
    if (!s)
        return;
    free(s->rows);
    free(s->v);
    free(s);
}

size_t summary_runs_count(const summary_runs *s) { return s ? s->n : 0; }

static double *summary_at(const summary_runs *s, size_t k, size_t row)
{
    return s->v + (((s->first + k) % SUMMARY_MAX_RUNS) * s->nrows + row) * SUMMARY_NFIG;
}

int summary_runs_add(summary_runs *s, const json_t *headline)
{
    if (!s->rows) { /* the rows are the first run's (every run of a series has the same trainers) */
        const json_t *rows = json_object_get(headline, "trainers");
        size_t n = json_array_size(rows);
        if (n == 0)
            return 0;
        s->rows = calloc(n, sizeof *s->rows);
        s->v = malloc((size_t)SUMMARY_MAX_RUNS * n * SUMMARY_NFIG * sizeof *s->v);
        if (!s->rows || !s->v) {
            free(s->rows);
            free(s->v);
            s->rows = NULL;
            s->v = NULL;
            return -1;
        }
        for (size_t r = 0; r < n; r++) {
            const char *who = json_string_value(json_object_get(json_array_get(rows, r), "trainer"));
            snprintf(s->rows[r], sizeof s->rows[r], "%s", who ? who : "");
        }
        s->nrows = n;
    }
    if (s->n == SUMMARY_MAX_RUNS) { /* the oldest goes */
        s->first = (s->first + 1) % SUMMARY_MAX_RUNS;
        s->n--;
    }
    for (size_t r = 0; r < s->nrows; r++) {
        double *x = summary_at(s, s->n, r);
        const json_t *row = summary_row(headline, s->rows[r]);
        for (size_t f = 0; f < SUMMARY_NFIG; f++)
            x[f] = summary_get(row, summary_figures[f]);
    }
    s->n++;
    return 0;
}

json_t *summary_runs_json(const summary_runs *s)
{
    size_t nruns = s->n;
    json_t *rows = json_array();
    double *x = malloc((nruns ? nruns : 1) * sizeof *x);
    if (!rows || !x) {
        json_decref(rows);
        free(x);
        return NULL;
    }
    for (size_t r = 0; r < s->nrows; r++) {
        json_t *row = json_pack("{s:s}", "trainer", s->rows[r]);
        for (size_t f = 0; row && f < SUMMARY_NFIG; f++) {
            json_t *values = json_array();
            for (size_t k = 0; k < nruns; k++) {
                x[k] = summary_at(s, k, r)[f];
                json_array_append_new(values, summary_num(x[k]));
            }
            summary_ci c;
            summary_of(x, nruns, &c);
            json_object_set_new(row, summary_figures[f],
                                json_pack("{s:I, s:o, s:o, s:[o, o], s:o}", "n", (json_int_t)c.n, "mean",
                                          summary_num(c.mean), "stdev", summary_num(c.stdev), "ci95",
                                          summary_num(c.ci_low), summary_num(c.ci_high), "values", values));
        }
        json_array_append_new(rows, row);
    }
    free(x);
    /* Units are the headline's, figure by figure (ms, samples/s, fractions, bytes, GB/s). */
    return json_pack("{s:I, s:f, s:s, s:o}", "runs", (json_int_t)nruns, "confidence", 0.95, "interval",
                     "Student t on the log scale (3 runs or more)", "trainers", rows);
}

json_t *summary_json(const json_t *headlines)
{
    summary_runs *s = summary_runs_new();
    size_t i;
    json_t *h;
    bool ok = s != NULL;
    json_array_foreach(headlines, i, h) ok = ok && summary_runs_add(s, h) == 0;
    json_t *out = ok ? summary_runs_json(s) : NULL;
    summary_runs_free(s);
    return out;
}

void summary_print(const json_t *s, FILE *out)
{
    const json_t *all = summary_row(s, "all");
    if (!all)
        return;
    fprintf(out, "\nsummary over %lld runs, all trainers: mean, standard deviation, 95%% confidence interval of "
                 "the mean (Student t on the log scale, from 3 runs; shares in %%)\n",
            (long long)json_integer_value(json_object_get(s, "runs")));
    fprintf(out, "%-24s %4s %12s %12s %27s\n", "figure", "n", "mean", "stdev", "95% interval");
    for (size_t f = 0; f < SUMMARY_NFIG; f++) {
        const json_t *c = json_object_get(all, summary_figures[f]);
        const json_t *mean = json_object_get(c, "mean"), *sd = json_object_get(c, "stdev");
        const json_t *ci = json_object_get(c, "ci95");
        if (!json_is_number(mean))
            continue;
        double scale = strncmp(summary_figures[f], "shares.", 7) == 0 ? 100 : 1;
        char sdb[32] = "-", cib[64] = "- (one run: no spread)";
        if (json_is_number(sd)) {
            snprintf(sdb, sizeof sdb, "%.4g", json_number_value(sd) * scale);
            snprintf(cib, sizeof cib, "- (fewer than %u runs)", SUMMARY_MIN_RUNS_CI);
        }
        if (json_is_number(json_array_get(ci, 0)))
            snprintf(cib, sizeof cib, "[%.4g, %.4g]", json_number_value(json_array_get(ci, 0)) * scale,
                     json_number_value(json_array_get(ci, 1)) * scale);
        fprintf(out, "%-24s %4lld %12.4g %12s %27s\n", summary_figures[f],
                (long long)json_integer_value(json_object_get(c, "n")), json_number_value(mean) * scale, sdb, cib);
    }
}
