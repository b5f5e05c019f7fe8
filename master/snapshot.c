/* snapshot.c — renders a snapshot_input into the master's HTTP documents:
 * the JSON bodies of /api/v1/status, /api/v1/nodes and /api/v1/metrics
 * (jansson, compact); the Prometheus text exposition of /metrics is
 * snapshot_prom.c's. Pure functions: no I/O, no globals; every returned
 * string is malloc'd (the caller frees it) and NULL means allocation
 * failure.
 *
 * JSON never carries NaN/Inf: a non-finite double is written as null;
 * reals carry 15 significant digits. */
#include "master/snapshot.h"
#include "master/snapshot_int.h"

#include <stdbool.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---- JSON helpers -------------------------------------------------------- */

static const char *const snapshot_roles[] = {"trainer", "server"};
#define SNAPSHOT_NROLES (sizeof snapshot_roles / sizeof snapshot_roles[0])

/* A JSON number, or null for NaN / +-Inf (JSON has no spelling for them). */
static json_t *snapshot_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* A JSON string, or null for a NULL pointer. */
static json_t *snapshot_jstr(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *snapshot_uint(uint64_t v)
{
    return json_integer(v > (uint64_t)INT64_MAX ? (json_int_t)INT64_MAX : (json_int_t)v);
}

/* obj[key] = v (reference stolen, even on failure). Returns 0 or -1. */
static int snapshot_set(json_t *obj, const char *key, json_t *v)
{
    return json_object_set_new(obj, key, v) == 0 ? 0 : -1;
}

/* Serialises doc compactly and drops it. NULL if doc is NULL. Reals get 15
 * significant digits (jansson's default of 17 turns 0.1 into
 * 0.10000000000000001); every decimal of up to 15 digits reads back as the
 * same double, and the rest are off by < 1e-14 relative. */
static char *snapshot_dump(json_t *doc)
{
    if (!doc)
        return NULL;
    char *s = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(doc);
    return s;
}

/* ---- /api/v1/status --------------------------------------------------------- */

/* {"trainer": n, "server": n, <other roles>: n}: both known keys always present. */
static json_t *snapshot_role_counts(const snapshot_input *in)
{
    json_t *counts = json_object();
    int bad = !counts;
    for (size_t r = 0; !bad && r < SNAPSHOT_NROLES; r++)
        bad = snapshot_set(counts, snapshot_roles[r], json_integer(0)) != 0;
    for (size_t i = 0; !bad && i < in->nnodes; i++) {
        const char *role = in->nodes[i].role;
        if (!role)
            continue;
        json_t *n = json_object_get(counts, role);
        if (n)
            json_integer_set(n, json_integer_value(n) + 1);
        else
            bad = snapshot_set(counts, role, json_integer(1)) != 0;
    }
    if (bad) {
        json_decref(counts);
        return NULL;
    }
    return counts;
}

static json_t *snapshot_progress(const snapshot_input *in)
{
    json_t *p = json_object();
    if (!p || snapshot_set(p, "batches_done", snapshot_uint(in->batches_done)) ||
        snapshot_set(p, "batches_total", snapshot_uint(in->batches_total))) {
        json_decref(p);
        return NULL;
    }
    return p;
}

/* The servers filling their tables: [{"rank", "done_bytes", "total_bytes"}]. */
static json_t *snapshot_initialising(const snapshot_input *in)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < in->nnodes; i++) {
        const snap_node *n = &in->nodes[i];
        if (strcmp(n->role, "server") != 0 || n->init_total_bytes == 0)
            continue;
        json_t *o = json_object();
        if (json_array_append_new(arr, o) != 0 || snapshot_set(o, "rank", json_integer(n->rank)) ||
            snapshot_set(o, "done_bytes", snapshot_uint(n->init_done_bytes)) ||
            snapshot_set(o, "total_bytes", snapshot_uint(n->init_total_bytes))) {
            json_decref(arr); /* o with it, if it went in */
            return NULL;
        }
    }
    return arr;
}

char *snapshot_status_json(const snapshot_input *in)
{
    json_t *doc = json_object();
    if (!doc || snapshot_set(doc, "phase", snapshot_jstr(in->phase)) ||
        snapshot_set(doc, "error", snapshot_jstr(in->error)) ||
        snapshot_set(doc, "progress", snapshot_progress(in)) ||
        snapshot_set(doc, "nodes", snapshot_role_counts(in)) ||
        snapshot_set(doc, "elapsed_s", snapshot_num(in->elapsed_s)) ||
        snapshot_set(doc, "run", json_integer(in->run)) || snapshot_set(doc, "runs", json_integer(in->runs)) ||
        snapshot_set(doc, "servers_initialising", snapshot_initialising(in)) ||
        snapshot_set(doc, "headline", in->headline ? json_deep_copy(in->headline) : json_null()) ||
        snapshot_set(doc, "host_state", in->host_state ? json_deep_copy(in->host_state) : json_null())) {
        json_decref(doc);
        return NULL;
    }
    return snapshot_dump(doc);
}

/* ---- /api/v1/config -------------------------------------------------------- */

char *snapshot_config_json(const void *config)
{
    if (!config)
        return NULL;
    /* A copy: snapshot_dump drops its argument, and the loop keeps its own. */
    return snapshot_dump(json_deep_copy(config));
}

/* ---- /api/v1/nodes ---------------------------------------------------------- */

static int snapshot_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A trainer's transport to its servers in a word: its links' transport
 * ("shm", "tcp"), or their names in order joined by "+" where its links
 * differ ("shm+tcp"); NULL: no link (no servers, or not ready yet). */
static const char *snapshot_transport(const json_t *links, char *buf, size_t len)
{
    const char *names[8];
    size_t n = 0;
    size_t i;
    json_t *l;
    json_array_foreach((json_t *)links, i, l) {
        const char *t = json_string_value(json_object_get(l, "transport"));
        size_t k = 0;
        while (t && k < n && strcmp(names[k], t) != 0)
            k++;
        if (t && k == n && n < sizeof names / sizeof names[0])
            names[n++] = t;
    }
    if (n == 0)
        return NULL;
    qsort(names, n, sizeof names[0], snapshot_cmp_str);
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < n && at < len; k++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", k ? "+" : "", names[k]);
    return buf;
}

static json_t *snapshot_node_json(const snap_node *n)
{
    char tbuf[160];
    const char *transport = n->links ? snapshot_transport(n->links, tbuf, sizeof tbuf) : NULL;
    json_t *o = json_object();
    if (!o || snapshot_set(o, "role", snapshot_jstr(n->role)) ||
        snapshot_set(o, "rank", json_integer(n->rank)) ||
        snapshot_set(o, "host", snapshot_jstr(n->host)) ||
        snapshot_set(o, "device", snapshot_jstr(n->device)) ||
        snapshot_set(o, "state", snapshot_jstr(n->state)) ||
        snapshot_set(o, "last_seen_s", snapshot_num(round(n->last_seen_s * 1000.0) / 1000.0)) ||
        (n->rows_touched >= 0 && snapshot_set(o, "rows_touched", snapshot_uint((uint64_t)n->rows_touched))) ||
        (n->environment && snapshot_set(o, "environment", json_deep_copy(n->environment))) ||
        (n->gpu_timed && snapshot_set(o, "gpu_timed", json_deep_copy(n->gpu_timed))) ||
        (transport && snapshot_set(o, "transport", snapshot_jstr(transport))) ||
        (n->links && snapshot_set(o, "links", json_deep_copy(n->links)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *snapshot_nodes_json(const snapshot_input *in)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (size_t i = 0; i < in->nnodes; i++) {
        if (json_array_append_new(arr, snapshot_node_json(&in->nodes[i])) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return snapshot_dump(arr);
}

/* ---- /api/v1/metrics -------------------------------------------------------- */

/* STATS = {"count","min","max","mean","variance","stdev","p50","p75","p90","p95","p99"}. */
static json_t *snapshot_stats_json(const stats_summary *s)
{
    const struct {
        const char *key;
        double v;
    } f[] = {{"min", s->min},   {"max", s->max},       {"mean", s->mean}, {"variance", s->variance},
             {"stdev", s->stdev}, {"p50", s->p50},     {"p75", s->p75},   {"p90", s->p90},
             {"p95", s->p95},   {"p99", s->p99}};
    json_t *o = json_object();
    if (!o || snapshot_set(o, "count", snapshot_uint(s->count))) {
        json_decref(o);
        return NULL;
    }
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (snapshot_set(o, f[i].key, snapshot_num(f[i].v))) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* Borrowed reference to obj[key], created as {} when absent. NULL on failure. */
static json_t *snapshot_child(json_t *obj, const char *key)
{
    json_t *c = json_object_get(obj, key);
    if (c)
        return c;
    c = json_object();
    if (!c || json_object_set_new(obj, key, c) != 0)
        return NULL;
    return c;
}

/* Borrowed reference to groups[role], created as {"all": {}, "ranks": {}}. */
static json_t *snapshot_group(json_t *groups, const char *role)
{
    json_t *g = snapshot_child(groups, role);
    if (!g || !snapshot_child(g, "all") || !snapshot_child(g, "ranks"))
        return NULL;
    return g;
}

/* Puts one stat at groups[role].all[metric] or groups[role].ranks["R"][metric]. */
static int snapshot_add_stat(json_t *groups, const snap_stat *st)
{
    json_t *g = snapshot_group(groups, snapshot_str(st->role));
    if (!g)
        return -1;
    json_t *dst;
    if (st->rank < 0) {
        dst = json_object_get(g, "all");
    } else {
        char key[24];
        snprintf(key, sizeof key, "%" PRId64, st->rank);
        dst = snapshot_child(json_object_get(g, "ranks"), key);
    }
    if (!dst)
        return -1;
    return snapshot_set(dst, snapshot_str(st->metric), snapshot_stats_json(&st->s));
}

void *snapshot_groups_json(const snapshot_input *in)
{
    json_t *groups = json_object();
    int bad = !groups;
    for (size_t r = 0; !bad && r < SNAPSHOT_NROLES; r++)
        bad = snapshot_group(groups, snapshot_roles[r]) == NULL;
    for (size_t i = 0; !bad && i < in->nstats; i++)
        bad = snapshot_add_stat(groups, &in->stats[i]) != 0;
    if (bad) {
        json_decref(groups);
        return NULL;
    }
    return groups;
}

/* "counters" (extension): counts that are not durations, per role, "all"
 * and by rank — today the embedding servers' rows touched. NULL (no key)
 * when no node has any. */
static json_t *snapshot_counters_json(const snapshot_input *in)
{
    json_t *ranks = json_object();
    uint64_t all = 0;
    bool any = false;
    for (size_t i = 0; ranks && i < in->nnodes; i++) {
        const snap_node *n = &in->nodes[i];
        if (n->rows_touched < 0)
            continue;
        char key[24];
        snprintf(key, sizeof key, "%u", n->rank);
        json_t *o = json_pack("{s:o}", "rows_touched", snapshot_uint((uint64_t)n->rows_touched));
        if (!o || json_object_set_new(ranks, key, o) < 0) {
            json_decref(ranks);
            return NULL;
        }
        all += (uint64_t)n->rows_touched;
        any = true;
    }
    if (!any) {
        json_decref(ranks);
        return NULL;
    }
    return json_pack("{s:{s:{s:o}, s:o}}", "server", "all", "rows_touched", snapshot_uint(all), "ranks", ranks);
}

char *snapshot_metrics_json(const snapshot_input *in)
{
    json_t *doc = json_object();
    if (!doc || snapshot_set(doc, "unit", json_string("ms")) ||
        snapshot_set(doc, "phase", snapshot_jstr(in->phase)) ||
        snapshot_set(doc, "groups", snapshot_groups_json(in))) {
        json_decref(doc);
        return NULL;
    }
    json_t *counters = snapshot_counters_json(in);
    if (counters && snapshot_set(doc, "counters", counters)) {
        json_decref(doc);
        return NULL;
    }
    return snapshot_dump(doc);
}
