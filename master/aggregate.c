/* aggregate.c — the master's processed metrics (see aggregate.h). */
#include "master/aggregate.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *agg_role_name(agg_role r)
{
    return r == AGG_TRAINER ? "trainer" : "server";
}

int agg_init(aggregate *a)
{
    memset(a, 0, sizeof *a);
    for (int r = 0; r < AGG_NROLES; r++)
        if (!(a->g[r].all = metrics_new()))
            return -1;
    return 0;
}

void agg_free(aggregate *a)
{
    for (int r = 0; r < AGG_NROLES; r++) {
        metrics_free(a->g[r].all);
        for (uint32_t i = 0; i < a->g[r].nranks; i++)
            metrics_free(a->g[r].ranks[i]);
        free(a->g[r].ranks);
    }
    for (uint32_t i = 0; i < a->nsteps; i++)
        free(a->steps[i]);
    free(a->steps);
    memset(a, 0, sizeof *a);
}

void agg_reset(aggregate *a)
{
    for (int r = 0; r < AGG_NROLES; r++) {
        metrics_reset(a->g[r].all);
        for (uint32_t i = 0; i < a->g[r].nranks; i++)
            if (a->g[r].ranks[i])
                metrics_reset(a->g[r].ranks[i]);
    }
    /* Zeroed, kept: as the stats keep their keys, a rank's histogram
     * stays in the exposition across the reset, at 0. */
    for (uint32_t i = 0; i < a->nsteps; i++)
        if (a->steps[i])
            memset(a->steps[i], 0, sizeof *a->steps[i]);
}

/* Trainer rank's step counts, created at 0; NULL when out of memory. */
static struct agg_steps *agg_steps_of(aggregate *a, uint32_t rank)
{
    if (rank >= a->nsteps) {
        struct agg_steps **v = realloc(a->steps, (size_t)(rank + 1) * sizeof *v);
        if (!v)
            return NULL;
        for (uint32_t i = a->nsteps; i <= rank; i++)
            v[i] = NULL;
        a->steps = v;
        a->nsteps = rank + 1;
    }
    if (!a->steps[rank])
        a->steps[rank] = calloc(1, sizeof *a->steps[rank]);
    return a->steps[rank];
}

/* The bucket of a step of ms: the first bound it does not exceed (the
 * text format's `le`), SNAP_STEP_NBOUNDS above them all. */
static size_t agg_step_bucket(double ms)
{
    static const double bounds[SNAP_STEP_NBOUNDS] = {SNAP_STEP_BOUNDS_MS};
    size_t lo = 0, hi = SNAP_STEP_NBOUNDS;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ms <= bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static metrics *agg_rank(struct agg_group *g, uint32_t rank)
{
    if (rank >= g->nranks) {
        uint32_t n = rank + 1;
        metrics **v = realloc(g->ranks, n * sizeof *v);
        if (!v)
            return NULL;
        for (uint32_t i = g->nranks; i < n; i++)
            v[i] = NULL;
        g->ranks = v;
        g->nranks = n;
    }
    if (!g->ranks[rank])
        g->ranks[rank] = metrics_new();
    return g->ranks[rank];
}

/* Whether metric `key` is in m already. */
static bool agg_has(const metrics *m, const char *key)
{
    for (size_t i = 0; i < metrics_size(m); i++)
        if (strcmp(metrics_key_at(m, i), key) == 0)
            return true;
    return false;
}

int agg_add_report(aggregate *a, agg_role role, uint32_t rank, json_t *samples, char *err, size_t errlen)
{
    if (!json_is_object(samples)) {
        snprintf(err, errlen, "\"samples\" is not an object");
        return -1;
    }
    struct agg_group *g = &a->g[role];
    metrics *mr = agg_rank(g, rank);
    if (!mr) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* The whole report is checked before any sample is counted: one taken
     * in part would leave the totals of a failed report. */
    const char *key;
    json_t *arr;
    size_t fresh = 0;
    json_object_foreach(samples, key, arr) {
        if (!json_is_array(arr) || strlen(key) > 200) {
            snprintf(err, errlen, "samples of '%.64s' are not an array", key);
            return -1;
        }
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
            double ms = json_number_value(v);
            if (!json_is_number(v) || !isfinite(ms) || ms < 0 || ms > AGG_MAX_SAMPLE_MS) {
                snprintf(err, errlen, "a sample of '%.64s' is not a duration in [0, %g] ms", key, AGG_MAX_SAMPLE_MS);
                return -1;
            }
        }
        /* Only near the bound is it worth finding which names are new. */
        if (metrics_size(mr) + json_object_size(samples) > AGG_MAX_METRICS)
            fresh += !agg_has(mr, key);
    }
    if (metrics_size(mr) + fresh > AGG_MAX_METRICS) {
        snprintf(err, errlen, "more than %d distinct metrics", AGG_MAX_METRICS);
        return -1;
    }
    /* A trainer's steps are also counted into the histogram's buckets:
     * its counts made before any sample is, so that the report is still
     * taken whole or not at all. */
    struct agg_steps *steps = NULL;
    json_t *step_arr = role == AGG_TRAINER ? json_object_get(samples, AGG_STEP_METRIC) : NULL;
    if (step_arr && !(steps = agg_steps_of(a, rank))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    json_object_foreach(samples, key, arr) {
        /* metrics_get keeps a numbered family (a server's trainer_lag_R)
         * in number order, as the node does: servers report in any order. */
        stats *sr = metrics_get(mr, key);
        stats *sa = metrics_get(g->all, key);
        if (!sr || !sa) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
            double ms = json_number_value(v);
            stats_add(sr, ms);
            stats_add(sa, ms);
        }
    }
    size_t i;
    json_t *v;
    json_array_foreach(step_arr, i, v) {
        double ms = json_number_value(v);
        steps->n[agg_step_bucket(ms)]++;
        steps->count++;
        steps->sum_ms += ms;
    }
    return 0;
}

const stats *agg_find(const aggregate *a, agg_role role, int64_t rank, const char *metric)
{
    const struct agg_group *g = &a->g[role];
    metrics *m = rank < 0 ? g->all : (uint64_t)rank < g->nranks ? g->ranks[rank] : NULL;
    if (!m)
        return NULL;
    for (size_t i = 0; i < metrics_size(m); i++)
        if (strcmp(metrics_key_at(m, i), metric) == 0)
            return metrics_at(m, i);
    return NULL;
}

static void agg_push_stats(snap_stat *out, size_t *n, agg_role role, int64_t rank, metrics *m, bool exact)
{
    for (size_t i = 0; i < metrics_size(m); i++) {
        snap_stat *st = &out[(*n)++];
        st->role = agg_role_name(role);
        st->rank = rank;
        st->metric = metrics_key_at(m, i);
        if (exact)
            stats_summarize(metrics_at(m, i), &st->s);
        else
            stats_summarize_fast(metrics_at(m, i), &st->s);
    }
}

snap_stat *agg_snapshot(aggregate *a, bool exact, size_t *n)
{
    size_t cap = 0;
    for (int r = 0; r < AGG_NROLES; r++) {
        cap += metrics_size(a->g[r].all);
        for (uint32_t i = 0; i < a->g[r].nranks; i++)
            if (a->g[r].ranks[i])
                cap += metrics_size(a->g[r].ranks[i]);
    }
    snap_stat *out = calloc(cap ? cap : 1, sizeof *out);
    *n = 0;
    if (!out)
        return NULL;
    for (int r = 0; r < AGG_NROLES; r++) {
        for (uint32_t i = 0; i < a->g[r].nranks; i++)
            if (a->g[r].ranks[i])
                agg_push_stats(out, n, (agg_role)r, i, a->g[r].ranks[i], exact);
        agg_push_stats(out, n, (agg_role)r, -1, a->g[r].all, exact);
    }
    return out;
}

snap_step_hist *agg_step_hists(const aggregate *a, size_t *n)
{
    size_t cap = 0;
    for (uint32_t r = 0; r < a->nsteps; r++)
        cap += a->steps[r] != NULL;
    *n = 0;
    snap_step_hist *out = cap ? calloc(cap, sizeof *out) : NULL;
    if (!out)
        return NULL;
    for (uint32_t r = 0; r < a->nsteps; r++) {
        const struct agg_steps *s = a->steps[r];
        if (!s)
            continue;
        snap_step_hist *h = &out[(*n)++];
        h->rank = r;
        uint64_t cum = 0;
        for (size_t k = 0; k < SNAP_STEP_NBOUNDS; k++)
            h->le[k] = cum += s->n[k];
        h->count = s->count;
        assert(cum + s->n[SNAP_STEP_NBOUNDS] == s->count);
        h->sum_ms = s->sum_ms;
    }
    return out;
}

/* The ranks of a group that recorded anything. */
static uint32_t agg_ranks_reported(const struct agg_group *g)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->nranks; i++)
        n += g->ranks[i] && metrics_size(g->ranks[i]) > 0;
    return n;
}

void agg_print_tables(aggregate *a, FILE *out)
{
    char title[96];
    for (int r = 0; r < AGG_NROLES; r++) {
        if (metrics_size(a->g[r].all) == 0)
            continue;
        /* One server's "all servers" table would repeat its own, row for
         * row: printed from two servers on (results.json and server.csv
         * keep the combined rows whatever the count). */
        bool all = r != AGG_SERVER || agg_ranks_reported(&a->g[r]) >= 2;
        snprintf(title, sizeof title, "\nall %ss (ms)", agg_role_name((agg_role)r));
        if (all)
            metrics_print_table(a->g[r].all, out, title);
        for (uint32_t i = 0; i < a->g[r].nranks; i++) {
            if (!a->g[r].ranks[i])
                continue;
            snprintf(title, sizeof title, "\n%s %u (ms)", agg_role_name((agg_role)r), i);
            metrics_print_table(a->g[r].ranks[i], out, title);
        }
    }
}
