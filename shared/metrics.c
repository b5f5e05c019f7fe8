/* metrics.c — registry of named metrics and its table printer (see metrics.h). */
#include "shared/metrics.h"

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One metric. Allocated on its own (not inline in the array) so the stats
 * address handed out by metrics_get survives growth of the array. */
typedef struct metric_entry {
    char *key; /* owned */
    stats st;
    bool report;   /* keep pending samples */
    bool gpu_timed; /* timed on a GPU's stream (metrics_set_gpu_timed) */
    double *pend;  /* samples not yet reported (owned) */
    size_t npend, cap_pend;
} metric_entry;

struct metrics {
    metric_entry **v; /* owned, each entry owned; insertion order */
    size_t n, cap;
    bool report;
};

/* Width of the numeric columns: "%.3f" of values below 1e8 ms fits; a larger
 * value widens its cell (printf never truncates) rather than losing digits. */
#define COL_W 12

static void entry_free(metric_entry *e)
{
    if (!e)
        return;
    stats_free(&e->st);
    free(e->pend);
    free(e->key);
    free(e);
}

static metric_entry *entry_new(const char *key)
{
    metric_entry *e = malloc(sizeof *e);
    if (!e)
        return NULL;
    size_t len = strlen(key);
    e->key = malloc(len + 1);
    if (!e->key) {
        free(e);
        return NULL;
    }
    memcpy(e->key, key, len + 1);
    stats_init(&e->st);
    e->report = false;
    e->gpu_timed = false;
    e->pend = NULL;
    e->npend = e->cap_pend = 0;
    return e;
}

metrics *metrics_new(void)
{
    return calloc(1, sizeof(metrics));
}

void metrics_free(metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        entry_free(m->v[i]);
    free(m->v);
    free(m);
}

/* The index of key, or m->n when absent. */
static size_t metrics_find(const metrics *m, const char *key)
{
    size_t i = 0;
    while (i < m->n && strcmp(m->v[i]->key, key) != 0)
        i++;
    return i;
}

/* A new entry for key at position pos (<= m->n), the later ones moved up;
 * NULL on allocation failure. */
static stats *metrics_insert(metrics *m, const char *key, size_t pos)
{
    assert(pos <= m->n);
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        metric_entry **p = realloc(m->v, cap * sizeof *p);
        if (!p)
            return NULL;
        m->v = p;
        m->cap = cap;
    }
    metric_entry *e = entry_new(key);
    if (!e)
        return NULL;
    e->report = m->report;
    memmove(&m->v[pos + 1], &m->v[pos], (m->n - pos) * sizeof *m->v);
    m->v[pos] = e;
    m->n++;
    return &e->st;
}

/* Where key's trailing number starts (strlen(key) when it has none), and
 * the number in *num. Too many digits for a uint64: no number. */
static size_t metrics_number_at(const char *key, unsigned long long *num)
{
    size_t len = strlen(key), stem = len;
    while (stem > 0 && key[stem - 1] >= '0' && key[stem - 1] <= '9')
        stem--;
    if (stem == len || len - stem > 19)
        return len;
    *num = strtoull(key + stem, NULL, 10);
    return stem;
}

stats *metrics_get(metrics *m, const char *key)
{
    assert(m && key);
    size_t i = metrics_find(m, key);
    if (i < m->n)
        return &m->v[i]->st;
    /* New: last, but a numbered family's member before the first of its
     * family with a larger number. */
    unsigned long long num = 0, other = 0;
    size_t len = strlen(key), stem = metrics_number_at(key, &num), pos = m->n;
    for (size_t k = 0; stem < len && k < m->n && pos == m->n; k++) {
        const char *ok = m->v[k]->key;
        if (strncmp(ok, key, stem) == 0 && strlen(ok) > stem && metrics_number_at(ok, &other) == stem &&
            other > num)
            pos = k;
    }
    return metrics_insert(m, key, pos);
}

size_t metrics_size(const metrics *m)
{
    return m->n;
}

const char *metrics_key_at(const metrics *m, size_t i)
{
    assert(i < m->n);
    return m->v[i]->key;
}

stats *metrics_at(metrics *m, size_t i)
{
    assert(i < m->n);
    return &m->v[i]->st;
}

void metrics_mark_gpu_timed(stats *st)
{
    ((metric_entry *)(void *)((char *)st - offsetof(metric_entry, st)))->gpu_timed = true;
}

int metrics_set_gpu_timed(metrics *m, const char *key)
{
    stats *st = metrics_get(m, key);
    if (!st)
        return -1;
    metrics_mark_gpu_timed(st);
    return 0;
}

bool metrics_gpu_timed_at(const metrics *m, size_t i)
{
    assert(i < m->n);
    return m->v[i]->gpu_timed;
}

size_t metrics_gpu_timed_count(const metrics *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += m->v[i]->gpu_timed;
    return n;
}

void metrics_reset(metrics *m)
{
    for (size_t i = 0; i < m->n; i++) {
        stats_reset(&m->v[i]->st);
        m->v[i]->npend = 0;
    }
}

void metrics_print_table(metrics *m, FILE *out, const char *title)
{
    int kw = (int)strlen("metric");
    for (size_t i = 0; i < m->n; i++) {
        size_t len = strlen(m->v[i]->key);
        if (len > (size_t)kw)
            kw = (int)len;
    }

    fprintf(out, "%s\n", title ? title : "");
    fprintf(out, "%-*s %*s %*s %*s %*s %*s %*s %*s %*s %*s\n", kw, "metric", COL_W, "count",
            COL_W, "min", COL_W, "max", COL_W, "mean", COL_W, "variance", COL_W, "stdev", COL_W,
            "p50", COL_W, "p90", COL_W, "p99");
    for (size_t i = 0; i < m->n; i++) {
        stats_summary su;
        stats_summarize(&m->v[i]->st, &su);
        fprintf(out, "%-*s %*llu %*.3f %*.3f %*.3f %*.3f %*.3f %*.3f %*.3f %*.3f\n", kw,
                m->v[i]->key, COL_W, (unsigned long long)su.count, COL_W, su.min, COL_W, su.max,
                COL_W, su.mean, COL_W, su.variance, COL_W, su.stdev, COL_W, su.p50, COL_W, su.p90,
                COL_W, su.p99);
    }
    /* Which rows a GPU timed (a CUDA trainer's step metrics); none: no line. */
    if (metrics_gpu_timed_count(m) > 0) {
        fprintf(out, "GPU-timed (events on the trainer's stream):");
        for (size_t i = 0; i < m->n; i++)
            if (m->v[i]->gpu_timed)
                fprintf(out, " %s", m->v[i]->key);
        fprintf(out, "\n");
    }
}

void metrics_enable_reporting(metrics *m)
{
    m->report = true;
    for (size_t i = 0; i < m->n; i++)
        m->v[i]->report = true;
}

void metrics_add(stats *st, double ms)
{
    metric_entry *e = (metric_entry *)(void *)((char *)st - offsetof(metric_entry, st));
    stats_add(st, ms);
    if (!e->report)
        return;
    if (e->npend == e->cap_pend) {
        size_t cap = e->cap_pend ? e->cap_pend * 2 : 256;
        double *p = realloc(e->pend, cap * sizeof *p);
        if (!p)
            return; /* the report misses this sample; the local stats have it */
        e->pend = p;
        e->cap_pend = cap;
    }
    e->pend[e->npend++] = ms;
}

size_t metrics_pending(const metrics *m, size_t i, const double **samples)
{
    assert(i < m->n);
    *samples = m->v[i]->pend;
    return m->v[i]->npend;
}

void metrics_clear_pending(metrics *m)
{
    for (size_t i = 0; i < m->n; i++)
        m->v[i]->npend = 0;
}
