/* history.c — the bounded ring of chart points behind /api/v1/history
 * (see history.h). Points are rendered to compact JSON when taken and kept
 * as strings, so that publishing the history each tick is one
 * concatenation, not a re-rendering of up to HISTORY_MAX_POINTS points. */
#include "master/history.h"

#include <assert.h>
#include <stdbool.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* What the dashboard charts (web/app.js): the trainers' batch time and its
 * breakdown, the servers' batch and straggler times. */
static const char *const history_metrics[] = {
    "batch_level_metric,batch_all",
    "forward_metric,forward_pass",
    "backward_metric,backward_compute",
    "optimizer_metric,step",
    "hook_future_metric,exposed_wait",
    "parameter_server_batch_metric,param_index_batch",
    "parameter_server_straggler_metric,param_index_straggler",
};

/* Where a series stood at one point: its count and sum then. */
typedef struct history_mark {
    double t;
    uint64_t count;
    double sum;
} history_mark;

/* One charted series (role, rank, metric) and its recent marks, oldest at
 * head: the window of a point starts at the newest mark at least
 * HISTORY_WINDOW_S old. The marks are of one run and pass (pass_key); a new
 * one, or a count that went down (the stats were reset), starts them over. */
typedef struct history_series {
    char *key; /* "role/rank/metric"; NULL: a free slot of the table */
    char pass_key[32];
    double t_pass;  /* the pass's first point: where a window younger than it starts */
    bool truncated; /* marks were dropped for room: the oldest is where a window starts */
    history_mark marks[HISTORY_MARKS];
    size_t head, n;
} history_series;

/* A point as rendered, and the run (--runs) it is from. */
typedef struct history_slot {
    char *json;
    uint32_t run;
} history_slot;

struct history {
    history_slot *ring;   /* cap slots; the oldest at head */
    size_t cap, head, n;
    size_t bytes, max_bytes; /* the held points' strlen, summed */
    double t_last;        /* when the last point was taken */
    char phase_last[16];  /* its phase ("" before the first) */
    uint32_t run_last;
    history_series *series; /* open addressing, nseries_cap slots (a power of two), at most half used */
    size_t nseries, nseries_cap;
};

int history_charted(const char *metric)
{
    for (size_t i = 0; metric && i < sizeof history_metrics / sizeof history_metrics[0]; i++)
        if (strcmp(metric, history_metrics[i]) == 0)
            return 1;
    return 0;
}

history *history_new(size_t max_points, size_t max_bytes)
{
    assert(max_points > 0);
    history *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->ring = calloc(max_points, sizeof *h->ring);
    if (!h->ring) {
        free(h);
        return NULL;
    }
    h->cap = max_points;
    h->max_bytes = max_bytes;
    return h;
}

void history_free(history *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->n; i++)
        free(h->ring[(h->head + i) % h->cap].json);
    for (size_t i = 0; i < h->nseries_cap; i++)
        free(h->series[i].key);
    free(h->series);
    free(h->ring);
    free(h);
}

size_t history_points(const history *h)
{
    return h->n;
}

static void history_drop_oldest(history *h)
{
    assert(h->n > 0);
    char *p = h->ring[h->head].json;
    h->bytes -= strlen(p);
    free(p);
    h->ring[h->head].json = NULL;
    h->head = (h->head + 1) % h->cap;
    h->n--;
}

/* A real, or null where JSON has no spelling for it. */
static json_t *history_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* {"count","mean","p50","p90","p99"}: what the page's statistic selector
 * offers, and the count its "mean since last poll" needs. */
static json_t *history_stats(const stats_summary *s)
{
    return json_pack("{s:I, s:o, s:o, s:o, s:o}", "count", (json_int_t)(s->count > INT64_MAX ? INT64_MAX : s->count),
                     "mean", history_num(s->mean), "p50", history_num(s->p50), "p90", history_num(s->p90), "p99",
                     history_num(s->p99));
}

/* ---- the recent window ------------------------------------------------------------ */

static int history_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's 'linear' quantile of n sorted values (n > 0), as stats.h. */
static double history_linear(const double *v, size_t n, double q)
{
    double hpos = q * (double)(n - 1);
    size_t lo = (size_t)floor(hpos);
    if (lo + 1 >= n)
        return v[n - 1];
    return v[lo] + (hpos - (double)lo) * (v[lo + 1] - v[lo]);
}

void history_window_of(const stats *st, uint64_t from, double sum_from, double seconds, history_window *out)
{
    assert(from <= st->count);
    *out = (history_window){.seconds = seconds, .count = st->count - from, .mean = NAN, .p50 = NAN, .p90 = NAN};
    if (out->count == 0)
        return;
    out->mean = (st->sum - sum_from) / (double)out->count;
    /* The samples are the window's only while every one counted is kept:
     * past STATS_EXACT_MAX (or after an allocation failed) they are not,
     * and a histogram has no order of arrival to cut a window from. */
    if (st->nsamples != st->count)
        return;
    size_t n = (size_t)out->count;
    double *v = malloc(n * sizeof *v);
    if (!v)
        return;
    memcpy(v, st->samples + from, n * sizeof *v);
    qsort(v, n, sizeof *v, history_cmp_double);
    out->p50 = history_linear(v, n, 0.5);
    out->p90 = history_linear(v, n, 0.9);
    free(v);
}

static uint64_t history_hash(const char *s)
{
    uint64_t x = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        x = (x ^ (unsigned char)*s) * 1099511628211ull;
    return x;
}

/* The slot of key: its own, or the free one it would take. */
static history_series *history_slot_of(history_series *tab, size_t cap, const char *key)
{
    size_t i = (size_t)history_hash(key) & (cap - 1);
    while (tab[i].key && strcmp(tab[i].key, key) != 0)
        i = (i + 1) & (cap - 1);
    return &tab[i];
}

/* The series of key, made when first seen. NULL: out of memory. */
static history_series *history_series_get(history *h, const char *key)
{
    if (h->nseries_cap) {
        history_series *s = history_slot_of(h->series, h->nseries_cap, key);
        if (s->key)
            return s;
    }
    if (2 * (h->nseries + 1) > h->nseries_cap) {
        size_t cap = h->nseries_cap ? 2 * h->nseries_cap : 64;
        history_series *tab = calloc(cap, sizeof *tab);
        if (!tab)
            return NULL;
        for (size_t i = 0; i < h->nseries_cap; i++)
            if (h->series[i].key)
                *history_slot_of(tab, cap, h->series[i].key) = h->series[i];
        free(h->series);
        h->series = tab;
        h->nseries_cap = cap;
    }
    history_series *s = history_slot_of(h->series, h->nseries_cap, key);
    assert(!s->key);
    if (!(s->key = strdup(key)))
        return NULL;
    h->nseries++;
    return s;
}

/* The window of st at t, from its series' marks; then t becomes a mark.
 * -1: out of memory (no window). */
static int history_window_at(history *h, double t, const snapshot_input *in, const snap_stat *st,
                             const stats *live, history_window *w)
{
    char key[300];
    snprintf(key, sizeof key, "%s/%" PRId64 "/%s", st->role, st->rank, st->metric);
    history_series *s = history_series_get(h, key);
    if (!s)
        return -1;
    char pass_key[32];
    snprintf(pass_key, sizeof pass_key, "%" PRIu32 "/%s", in->run, in->pass ? in->pass : "");
    bool reset = s->n > 0 && s->marks[(s->head + s->n - 1) % HISTORY_MARKS].count > live->count;
    if (strcmp(pass_key, s->pass_key) != 0 || reset) {
        snprintf(s->pass_key, sizeof s->pass_key, "%s", pass_key);
        s->head = s->n = 0;
        s->truncated = false;
        s->t_pass = t;
    }
    /* The newest mark at least the window's length old; none yet: the
     * whole pass (from its first point), or the oldest mark kept if some
     * had to go for room. */
    history_mark from = {.t = s->t_pass, .count = 0, .sum = 0.0};
    if (s->truncated && s->n > 0)
        from = s->marks[s->head];
    for (size_t i = 0; i < s->n; i++) {
        const history_mark *mk = &s->marks[(s->head + i) % HISTORY_MARKS];
        if (mk->t <= t - HISTORY_WINDOW_S)
            from = *mk;
    }
    history_window_of(live, from.count, from.sum, t - from.t, w);
    /* Marks older than the one the next window would start from are not
     * needed: the second-oldest being old enough, the oldest goes. */
    while (s->n >= 2 && s->marks[(s->head + 1) % HISTORY_MARKS].t <= t - HISTORY_WINDOW_S) {
        s->head = (s->head + 1) % HISTORY_MARKS;
        s->n--;
    }
    if (s->n == HISTORY_MARKS) {
        s->head = (s->head + 1) % HISTORY_MARKS;
        s->n--;
        s->truncated = true;
    }
    s->marks[(s->head + s->n) % HISTORY_MARKS] = (history_mark){.t = t, .count = live->count, .sum = live->sum};
    s->n++;
    return 0;
}

static json_t *history_window_json(const history_window *w)
{
    return json_pack("{s:f, s:I, s:o, s:o, s:o}", "seconds", round(w->seconds * 1000.0) / 1000.0, "count",
                     (json_int_t)(w->count > INT64_MAX ? INT64_MAX : w->count), "mean", history_num(w->mean),
                     "p50", history_num(w->p50), "p90", history_num(w->p90));
}

/* ---- points ----------------------------------------------------------------------- */

/* groups[role][rank or "all"][metric] = stats (and window, when w). 0 or -1. */
static int history_put(json_t *groups, const snap_stat *st, const history_window *w)
{
    char key[24];
    if (st->rank < 0)
        strcpy(key, "all");
    else
        snprintf(key, sizeof key, "%" PRId64, st->rank);
    json_t *role = json_object_get(groups, st->role);
    if (!role) {
        role = json_object();
        if (!role || json_object_set_new(groups, st->role, role) != 0)
            return -1;
    }
    json_t *rank = json_object_get(role, key);
    if (!rank) {
        rank = json_object();
        if (!rank || json_object_set_new(role, key, rank) != 0)
            return -1;
    }
    json_t *v = history_stats(&st->s);
    if (v && w && json_object_set_new(v, "window", history_window_json(w)) != 0) {
        json_decref(v);
        return -1;
    }
    return json_object_set_new(rank, st->metric, v) == 0 ? 0 : -1;
}

static char *history_render(history *h, double t, const snapshot_input *in, const stats *const *live)
{
    json_t *groups = json_object();
    int bad = !groups;
    for (size_t i = 0; !bad && i < in->nstats; i++) {
        const snap_stat *st = &in->stats[i];
        if (!st->role || !history_charted(st->metric))
            continue;
        history_window w;
        bool windowed = live && live[i] && history_window_at(h, t, in, st, live[i], &w) == 0;
        bad = history_put(groups, st, windowed ? &w : NULL) != 0;
    }
    if (bad) {
        json_decref(groups);
        return NULL;
    }
    json_t *p = json_pack("{s:f, s:I, s:s, s:o, s:o}", "t", round(t * 1000.0) / 1000.0, "run", (json_int_t)in->run,
                          "phase", in->phase, "pass", in->pass ? json_string(in->pass) : json_null(), "groups",
                          groups);
    if (!p)
        return NULL;
    char *s = json_dumps(p, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(p);
    return s;
}

int history_offer(history *h, double t, const snapshot_input *in, const stats *const *live, bool last)
{
    const char *ph = in->phase ? in->phase : "";
    bool passing = strcmp(ph, "warmup") == 0 || strcmp(ph, "running") == 0;
    bool end = strcmp(ph, "done") == 0 || strcmp(ph, "failed") == 0;
    bool changed = strcmp(ph, h->phase_last) != 0 || in->run != h->run_last;
    if (!(passing && (changed || last || t - h->t_last >= HISTORY_PERIOD_S)) && !(end && changed))
        return 0;
    char *s = history_render(h, t, in, live);
    if (!s)
        return -1;
    size_t len = strlen(s);
    /* A series of runs (--runs, 0: until stopped) keeps the current run
     * and the one before: the page shows the run under way whole, and
     * the one it follows, and the master does not grow with the series. */
    while (h->n > 0 && h->ring[h->head].run + HISTORY_KEEP_RUNS <= in->run)
        history_drop_oldest(h);
    if (h->n == h->cap)
        history_drop_oldest(h);
    while (h->n > 0 && h->bytes + len > h->max_bytes)
        history_drop_oldest(h);
    h->ring[(h->head + h->n) % h->cap] = (history_slot){.json = s, .run = in->run};
    h->n++;
    h->bytes += len;
    h->t_last = t;
    h->run_last = in->run;
    snprintf(h->phase_last, sizeof h->phase_last, "%s", ph);
    return 1;
}

char *history_last_json(const history *h)
{
    const char *p = h->n ? h->ring[(h->head + h->n - 1) % h->cap].json : "null";
    size_t total = strlen(p) + 96;
    char *out = malloc(total);
    if (!out)
        return NULL;
    int n = snprintf(out, total, "{\"period_s\":%g,\"window_s\":%g,\"point\":%s}", HISTORY_PERIOD_S,
                     HISTORY_WINDOW_S, p);
    assert(n > 0 && (size_t)n < total);
    return out;
}

char *history_json(const history *h)
{
    char head[128];
    int hl = snprintf(head, sizeof head, "{\"period_s\":%g,\"window_s\":%g,\"max_points\":%zu,\"points\":[",
                      HISTORY_PERIOD_S, HISTORY_WINDOW_S, h->cap);
    assert(hl > 0 && (size_t)hl < sizeof head);
    size_t total = (size_t)hl + h->bytes + h->n + 3;
    char *out = malloc(total);
    if (!out)
        return NULL;
    char *w = out;
    memcpy(w, head, (size_t)hl);
    w += hl;
    for (size_t i = 0; i < h->n; i++) {
        const char *p = h->ring[(h->head + i) % h->cap].json;
        size_t len = strlen(p);
        if (i)
            *w++ = ',';
        memcpy(w, p, len);
        w += len;
    }
    memcpy(w, "]}", 3);
    assert((size_t)(w + 3 - out) <= total);
    return out;
}
