/* diff_figures.c — the figures of two runs side by side
 * (master/tools/diff_int.h): the headline with its noise where a run is
 * one of a --runs series, then per group and rank every metric's stats,
 * B-A and the change, as a table and as CSV rows. */
#include "master/tools/diff_int.h"
#include "shared/userpath.h"
#include "shared/text.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The stats shown, in this order. */
static const char *const diff_stats[] = {"count", "mean", "p50", "p90", "p99", "max"};
#define NSTATS (sizeof diff_stats / sizeof diff_stats[0])
/* A metric name as shown (escaped: the file may come from anywhere). */
#define DIFF_NAME_SHOWN 1024

/* ---- the groups' tables --------------------------------------------------------------------- */

/* A stat of a metric (NULL section or metric: missing). */
static bool stat_get(json_t *section, const char *metric, const char *stat, double *out)
{
    json_t *m = json_object_get(section, metric);
    json_t *v = json_object_get(m, stat);
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

static void fmt_val(char *buf, size_t len, bool have, double v, bool count)
{
    if (!have)
        snprintf(buf, len, "-");
    else if (count)
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%.3f", v);
}

static void csv_field_num(FILE *f, bool have, double v)
{
    if (have)
        fprintf(f, ",%.6f", v);
    else
        fputc(',', f);
}

/* Print one section (group + "all" or a rank) of both files. */
static void diff_section(FILE *out, FILE *csv, const char *group, const char *rank, json_t *sa, json_t *sb)
{
    keyset metrics = {0};
    if (keyset_add_object(&metrics, sa) < 0 || keyset_add_object(&metrics, sb) < 0) {
        keyset_free(&metrics);
        return;
    }
    keyset_finish(&metrics, keyset_cmp_str);
    if (metrics.n == 0) {
        keyset_free(&metrics);
        return;
    }
    int mw = (int)strlen("metric");
    for (size_t i = 0; i < metrics.n; i++) {
        char m[DIFF_NAME_SHOWN];
        if ((int)text_escape(metrics.v[i], m, sizeof m) > mw)
            mw = (int)strlen(m);
    }

    if (strcmp(rank, "all") == 0)
        fprintf(out, "\n== %s: all ranks ==\n", group);
    else
        fprintf(out, "\n== %s: rank %s ==\n", group, rank);
    fprintf(out, "%-*s  %-5s  %12s  %12s  %12s  %8s\n", mw, "metric", "stat", "A", "B", "B-A", "change");
    for (size_t i = 0; i < metrics.n; i++) {
        char m[DIFF_NAME_SHOWN];
        text_escape(metrics.v[i], m, sizeof m); /* from a file: escaped for the terminal */
        for (size_t s = 0; s < NSTATS; s++) {
            bool count = strcmp(diff_stats[s], "count") == 0;
            double a = 0, b = 0;
            bool ha = stat_get(sa, metrics.v[i], diff_stats[s], &a);
            bool hb = stat_get(sb, metrics.v[i], diff_stats[s], &b);
            char ca[32], cb[32], cd[32], cp[32];
            fmt_val(ca, sizeof ca, ha, a, count);
            fmt_val(cb, sizeof cb, hb, b, count);
            bool hd = ha && hb;
            double d = b - a;
            if (!hd)
                snprintf(cd, sizeof cd, "-");
            else
                snprintf(cd, sizeof cd, count ? "%+.0f" : "%+.3f", d);
            bool hp = hd && (a != 0 || b == 0);
            double pct = (a != 0) ? 100.0 * d / fabs(a) : 0.0;
            if (hp)
                snprintf(cp, sizeof cp, "%+.1f%%", pct);
            else
                snprintf(cp, sizeof cp, "-");
            fprintf(out, "%-*s  %-5s  %12s  %12s  %12s  %8s\n", mw, s == 0 ? m : "", diff_stats[s], ca, cb, cd,
                    cp);
            if (csv) {
                fprintf(csv, "%s,%s,\"%s\",%s", group, rank, m, diff_stats[s]);
                csv_field_num(csv, ha, a);
                csv_field_num(csv, hb, b);
                csv_field_num(csv, hd, d);
                if (hp)
                    fprintf(csv, ",%.3f\n", pct);
                else
                    fprintf(csv, ",\n");
            }
        }
    }
    keyset_free(&metrics);
}

static void diff_group(FILE *out, FILE *csv, const char *group, json_t *ga, json_t *gb)
{
    diff_section(out, csv, group, "all", json_object_get(ga, "all"), json_object_get(gb, "all"));
    json_t *ra = json_object_get(ga, "ranks"), *rb = json_object_get(gb, "ranks");
    keyset ranks = {0};
    if (keyset_add_object(&ranks, ra) == 0 && keyset_add_object(&ranks, rb) == 0) {
        keyset_finish(&ranks, keyset_cmp_rank);
        for (size_t i = 0; i < ranks.n; i++)
            diff_section(out, csv, group, ranks.v[i], json_object_get(ra, ranks.v[i]),
                         json_object_get(rb, ranks.v[i]));
    }
    keyset_free(&ranks);
}

/* Every group's table: trainer, server, then any other group by name.
 * 0, or 1 (out of memory, said on err). */
int diff_groups(FILE *out, FILE *csv, json_t *a, json_t *b, FILE *err)
{
    json_t *ga = json_object_get(a, "groups"), *gb = json_object_get(b, "groups");
    keyset groups = {0};
    int rc = 0;
    if (keyset_add_object(&groups, ga) < 0 || keyset_add_object(&groups, gb) < 0) {
        fprintf(err, "psbench-master diff: out of memory\n");
        rc = 1;
    } else {
        keyset_finish(&groups, keyset_cmp_str);
        static const char *const first[] = {"trainer", "server"};
        for (size_t i = 0; i < 2; i++)
            if (json_object_get(ga, first[i]) || json_object_get(gb, first[i]))
                diff_group(out, csv, first[i], json_object_get(ga, first[i]), json_object_get(gb, first[i]));
        for (size_t i = 0; i < groups.n; i++)
            if (strcmp(groups.v[i], "trainer") != 0 && strcmp(groups.v[i], "server") != 0)
                diff_group(out, csv, groups.v[i], json_object_get(ga, groups.v[i]),
                           json_object_get(gb, groups.v[i]));
    }
    keyset_free(&groups);
    return rc;
}

/* ---- the headline and its noise --------------------------------------------- */

/* The headline figures compared ("shares.KEY": a share). */
static const char *const diff_hl_figures[] = {
    "step_p50_ms", "step_p90_ms", "samples_per_s", "shares.exposed_comm", "effective_gb_per_s",
};
#define DIFF_NHL (sizeof diff_hl_figures / sizeof diff_hl_figures[0])

/* The "all" row of a headline's or a summary's trainers. */
static json_t *diff_all_row(json_t *o)
{
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(o, "trainers"), i, row) {
        const char *t = json_string_value(json_object_get(row, "trainer"));
        if (t && strcmp(t, "all") == 0)
            return row;
    }
    return NULL;
}

/* The summary of the series a results.json is a run of (--runs: its
 * folder's parent holds summary.json, master/summary.h), when it summed up
 * two runs or more; else NULL. */
static json_t *diff_series_summary(const char *file, json_t *doc)
{
    json_t *runs = json_object_get(doc, "runs");
    if (!json_is_integer(runs) || json_integer_value(runs) == 1)
        return NULL;
    char path[4200];
    const char *slash = strrchr(file, '/');
    int dlen = slash ? (int)(slash - file) : 0;
    /* DIR/run-NNN/results.json -> DIR/summary.json */
    snprintf(path, sizeof path, "%.*s%s../summary.json", dlen, file, slash ? "/" : "");
    char why[256];
    json_error_t je;
    json_t *s;
    if (userpath_load_json(path, 0, &s, &je, why, sizeof why) < 0)
        return NULL;
    if (!s || json_integer_value(json_object_get(s, "runs")) < 2) {
        json_decref(s);
        return NULL;
    }
    /* A folder reused by a later series keeps older run-NNN folders: the
     * summary must hold this run's step p50 among its values. */
    json_t *mine = json_object_get(diff_all_row(json_object_get(doc, "headline")), "step_p50_ms");
    json_t *values = json_object_get(json_object_get(diff_all_row(s), "step_p50_ms"), "values");
    bool found = false;
    size_t i;
    json_t *v;
    json_array_foreach(values, i, v) found = found || (json_is_number(mine) && json_is_number(v) &&
                                                       json_number_value(v) == json_number_value(mine));
    if (!found) {
        json_decref(s);
        return NULL;
    }
    return s;
}

/* A figure of a run's headline (all trainers), NAN when not known. */
static double diff_hl_value(json_t *doc, const char *fig)
{
    json_t *row = diff_all_row(json_object_get(doc, "headline"));
    json_t *v = strncmp(fig, "shares.", 7) == 0 ? json_object_get(json_object_get(row, "shares"), fig + 7)
                                                 : json_object_get(row, fig);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The headline of both runs, all trainers: a side with a series' summary
 * shows its mean and 95% interval; where both have one, a difference whose
 * intervals overlap is within noise. */
void diff_headline(FILE *out, const char *const *files, json_t *a, json_t *b)
{
    json_t *sum[2] = {diff_series_summary(files[0], a), diff_series_summary(files[1], b)};
    json_t *docs[2] = {a, b};
    bool any = diff_all_row(json_object_get(a, "headline")) || diff_all_row(json_object_get(b, "headline"));
    if (any || sum[0] || sum[1]) {
        fprintf(out, "headline, all trainers (a series: its mean [95%% interval] over its runs):\n");
        fprintf(out, "  %-20s %28s %28s %9s  %s\n", "figure", "A", "B", "change", "noise");
    }
    for (size_t f = 0; (any || sum[0] || sum[1]) && f < DIFF_NHL; f++) {
        double v[2], lo[2] = {NAN, NAN}, hi[2] = {NAN, NAN};
        char cell[2][64];
        bool scale100 = strncmp(diff_hl_figures[f], "shares.", 7) == 0;
        for (int d = 0; d < 2; d++) {
            json_t *c = json_object_get(diff_all_row(sum[d]), diff_hl_figures[f]);
            if (c) {
                json_t *m = json_object_get(c, "mean"), *ci = json_object_get(c, "ci95");
                v[d] = json_is_number(m) ? json_number_value(m) : NAN;
                if (json_is_number(json_array_get(ci, 0)) && json_is_number(json_array_get(ci, 1))) {
                    lo[d] = json_number_value(json_array_get(ci, 0));
                    hi[d] = json_number_value(json_array_get(ci, 1));
                }
            } else {
                v[d] = diff_hl_value(docs[d], diff_hl_figures[f]);
            }
            double k = scale100 ? 100 : 1;
            if (!isfinite(v[d]))
                snprintf(cell[d], sizeof cell[d], "-");
            else if (isfinite(lo[d]))
                snprintf(cell[d], sizeof cell[d], "%.4g [%.4g, %.4g]", v[d] * k, lo[d] * k, hi[d] * k);
            else
                snprintf(cell[d], sizeof cell[d], "%.4g", v[d] * k);
        }
        char change[32] = "-";
        if (isfinite(v[0]) && isfinite(v[1]) && v[0] != 0)
            snprintf(change, sizeof change, "%+.1f%%", 100 * (v[1] - v[0]) / fabs(v[0]));
        const char *noise = "-";
        if (isfinite(lo[0]) && isfinite(lo[1]))
            noise = lo[0] <= hi[1] && lo[1] <= hi[0] ? "within noise" : "beyond noise";
        fprintf(out, "  %-20s %28s %28s %9s  %s\n", diff_hl_figures[f], cell[0], cell[1], change, noise);
    }
    if (!sum[0] && !sum[1])
        fprintf(out, "one run each: no noise estimate (a --runs N series on both sides gives one)\n");
    else if (!sum[0] || !sum[1])
        fprintf(out, "%s is one run (no summary.json of its series beside it): no noise estimate\n",
                sum[0] ? "B" : "A");
    else
        fprintf(out, "noise: within noise where the two 95%% intervals overlap (%lld and %lld runs)\n",
                (long long)json_integer_value(json_object_get(sum[0], "runs")),
                (long long)json_integer_value(json_object_get(sum[1], "runs")));
    json_decref(sum[0]);
    json_decref(sum[1]);
}
