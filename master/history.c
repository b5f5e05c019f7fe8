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

/* groups[role][rank or "all"][metric] = stats. 0 or -1. */
static int history_put(json_t *groups, const snap_stat *st)
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
    return json_object_set_new(rank, st->metric, history_stats(&st->s)) == 0 ? 0 : -1;
}

static char *history_render(double t, const snapshot_input *in)
{
    json_t *groups = json_object();
    int bad = !groups;
    for (size_t i = 0; !bad && i < in->nstats; i++)
        if (in->stats[i].role && history_charted(in->stats[i].metric))
            bad = history_put(groups, &in->stats[i]) != 0;
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

int history_offer(history *h, double t, const snapshot_input *in, bool last)
{
    const char *ph = in->phase ? in->phase : "";
    bool live = strcmp(ph, "warmup") == 0 || strcmp(ph, "running") == 0;
    bool end = strcmp(ph, "done") == 0 || strcmp(ph, "failed") == 0;
    bool changed = strcmp(ph, h->phase_last) != 0 || in->run != h->run_last;
    if (!(live && (changed || last || t - h->t_last >= HISTORY_PERIOD_S)) && !(end && changed))
        return 0;
    char *s = history_render(t, in);
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

char *history_json(const history *h)
{
    char head[128];
    int hl = snprintf(head, sizeof head, "{\"period_s\":%g,\"max_points\":%zu,\"points\":[", HISTORY_PERIOD_S,
                      h->cap);
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
