/* snapshot.c — renders a snapshot_input into the master's HTTP documents:
 * the JSON bodies of /api/v1/status, /api/v1/nodes and /api/v1/metrics
 * (jansson, compact) and the Prometheus text exposition (format 0.0.4) of
 * /metrics. Pure functions: no I/O, no globals; every returned string is
 * malloc'd (the caller frees it) and NULL means allocation failure.
 *
 * JSON never carries NaN/Inf: a non-finite double is written as null;
 * reals carry 15 significant digits.
 * Prometheus values are printed with the shortest of %.15g..%.17g that
 * reads back exactly, with '.' as the decimal point whatever the locale,
 * and NaN / +Inf / -Inf spelled the way the text format wants them. */
#include "master/snapshot.h"

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

static const char *const snapshot_phases[] = {"waiting", "warmup", "running", "done", "failed"};
#define SNAPSHOT_NPHASES (sizeof snapshot_phases / sizeof snapshot_phases[0])

static const char *snapshot_str(const char *s)
{
    return s ? s : "";
}

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

/* A trainer's transport to its servers in a word: "shm", "tcp", or
 * "shm+tcp" where its links differ; NULL: no link (no servers, or not
 * ready yet). */
static const char *snapshot_transport(const json_t *links)
{
    bool shm = false, tcp = false;
    size_t i;
    json_t *l;
    json_array_foreach((json_t *)links, i, l) {
        const char *t = json_string_value(json_object_get(l, "transport"));
        shm |= t && strcmp(t, "shm") == 0;
        tcp |= t && strcmp(t, "tcp") == 0;
    }
    return shm && tcp ? "shm+tcp" : shm ? "shm" : tcp ? "tcp" : NULL;
}

static json_t *snapshot_node_json(const snap_node *n)
{
    const char *transport = n->links ? snapshot_transport(n->links) : NULL;
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

/* ---- Prometheus text ---------------------------------------------------------- */

/* A growable string; err sticks once any append fails. */
typedef struct snapshot_buf {
    char *p;
    size_t len, cap;
    int err;
} snapshot_buf;

static int snapshot_reserve(snapshot_buf *b, size_t extra)
{
    if (b->err)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->err = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void snapshot_putn(snapshot_buf *b, const char *s, size_t n)
{
    if (snapshot_reserve(b, n) != 0)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void snapshot_puts(snapshot_buf *b, const char *s)
{
    snapshot_putn(b, s, strlen(s));
}

/* The first n bytes of a label value with the text format's escapes:
 * \\, \" and \n. */
static void snapshot_put_label_n(snapshot_buf *b, const char *s, size_t n)
{
    for (const char *end = s + n; s < end; s++) {
        if (*s == '\\')
            snapshot_puts(b, "\\\\");
        else if (*s == '"')
            snapshot_puts(b, "\\\"");
        else if (*s == '\n')
            snapshot_puts(b, "\\n");
        else
            snapshot_putn(b, s, 1);
    }
}

/* A label value with the text format's escapes (NULL: ""). */
static void snapshot_put_label(snapshot_buf *b, const char *s)
{
    s = snapshot_str(s);
    snapshot_put_label_n(b, s, strlen(s));
}

/* Shortest %.15g..%.17g that reads back as v, the decimal point forced to
 * '.' (snprintf and strtod share the locale, so the round trip is sound). */
static void snapshot_fmt_double(char out[40], double v)
{
    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    /* %g emits only digits, sign, 'e' and the locale's decimal point (which
     * may be several bytes): map that point to a single '.'. */
    size_t o = 0;
    int in_point = 0;
    for (const char *c = tmp; *c; c++) {
        int plain = (*c >= '0' && *c <= '9') || *c == '-' || *c == '+' || *c == 'e';
        if (plain)
            out[o++] = *c;
        else if (!in_point)
            out[o++] = '.';
        in_point = !plain;
    }
    out[o] = '\0';
}

static void snapshot_put_double(snapshot_buf *b, double v)
{
    char s[40];
    snapshot_fmt_double(s, v);
    snapshot_puts(b, s);
}

static void snapshot_put_u64(snapshot_buf *b, uint64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, v);
    snapshot_puts(b, s);
}

static void snapshot_put_family(snapshot_buf *b, const char *name, const char *type, const char *help)
{
    snapshot_puts(b, "# HELP ");
    snapshot_puts(b, name);
    snapshot_puts(b, " ");
    snapshot_puts(b, help);
    snapshot_puts(b, "\n# TYPE ");
    snapshot_puts(b, name);
    snapshot_puts(b, " ");
    snapshot_puts(b, type);
    snapshot_puts(b, "\n");
}

/* The rank label: decimal, or "all" for the role-wide view (rank < 0). */
static void snapshot_put_rank(snapshot_buf *b, int64_t rank)
{
    char s[24];
    if (rank < 0)
        strcpy(s, "all");
    else
        snprintf(s, sizeof s, "%" PRId64, rank);
    snapshot_puts(b, s);
}

/* The duration families: one rank's, and the whole role's (rank < 0).
 * Apart, so that sum(psbench_metric_duration_seconds_count) counts every
 * sample once, not twice (issue 30). */
#define SNAPSHOT_PER_RANK "psbench_metric_duration_seconds"
#define SNAPSHOT_PER_ROLE "psbench_role_metric_duration_seconds"

/* FAMILY[SUFFIX]{role="..",rank="..",metric="..",run="..",pass=".." then
 * the caller closes the braces; the role-wide family has no rank label, a
 * snapshot with no pass yet no pass label. */
static void snapshot_put_stat_labels(snapshot_buf *b, const char *suffix, const snap_stat *st,
                                     const snapshot_input *in)
{
    snapshot_puts(b, st->rank < 0 ? SNAPSHOT_PER_ROLE : SNAPSHOT_PER_RANK);
    snapshot_puts(b, suffix);
    snapshot_puts(b, "{role=\"");
    snapshot_put_label(b, st->role);
    if (st->rank >= 0) {
        snapshot_puts(b, "\",rank=\"");
        snapshot_put_rank(b, st->rank);
    }
    snapshot_puts(b, "\",metric=\"");
    snapshot_put_label(b, st->metric);
    snapshot_puts(b, "\",run=\"");
    snapshot_put_u64(b, in->run);
    if (in->pass) {
        snapshot_puts(b, "\",pass=\"");
        snapshot_put_label(b, in->pass);
    }
    /* "type,name" in halves too, split at the first comma (no comma: the
     * type is "" and the name the whole), so that a query can select by
     * either without a regular expression. After the labels that were
     * there first: their text is unchanged for anyone matching it. */
    const char *metric = snapshot_str(st->metric);
    const char *comma = strchr(metric, ',');
    snapshot_puts(b, "\",metric_type=\"");
    snapshot_put_label_n(b, metric, comma ? (size_t)(comma - metric) : 0);
    snapshot_puts(b, "\",metric_name=\"");
    snapshot_put_label(b, comma ? comma + 1 : metric);
    snapshot_puts(b, "\"");
}

static void snapshot_prom_stat(snapshot_buf *b, const snap_stat *st, const snapshot_input *in)
{
    static const char *const qname[] = {"0.5", "0.9", "0.99"};
    const double qms[] = {st->s.p50, st->s.p90, st->s.p99};
    for (size_t q = 0; q < 3; q++) {
        snapshot_put_stat_labels(b, "", st, in);
        snapshot_puts(b, ",quantile=\"");
        snapshot_puts(b, qname[q]);
        snapshot_puts(b, "\"} ");
        snapshot_put_double(b, qms[q] / 1000.0);
        snapshot_puts(b, "\n");
    }
    snapshot_put_stat_labels(b, "_sum", st, in);
    snapshot_puts(b, "} ");
    snapshot_put_double(b, st->s.mean * (double)st->s.count / 1000.0);
    snapshot_puts(b, "\n");
    snapshot_put_stat_labels(b, "_count", st, in);
    snapshot_puts(b, "} ");
    snapshot_put_u64(b, st->s.count);
    snapshot_puts(b, "\n");
}

static void snapshot_prom_durations(snapshot_buf *b, const snapshot_input *in)
{
    /* A family's samples must be together: the per-rank ones first, then
     * the role-wide ones. */
    snapshot_put_family(b, SNAPSHOT_PER_RANK, "summary",
                        "Durations of the benchmark's metrics (PyTorch's benchmark's type,name) per role and "
                        "rank, of the run and pass labelled; the whole role is "
                        SNAPSHOT_PER_ROLE ".");
    for (size_t i = 0; i < in->nstats; i++)
        if (in->stats[i].rank >= 0)
            snapshot_prom_stat(b, &in->stats[i], in);
    snapshot_put_family(b, SNAPSHOT_PER_ROLE, "summary",
                        "Durations of the benchmark's metrics over every rank of a role (all trainers, all "
                        "servers), of the run and pass labelled.");
    for (size_t i = 0; i < in->nstats; i++)
        if (in->stats[i].rank < 0)
            snapshot_prom_stat(b, &in->stats[i], in);
}

static void snapshot_prom_phase(snapshot_buf *b, const snapshot_input *in)
{
    snapshot_put_family(b, "psbench_phase", "gauge",
                        "Current run phase (1 for the current phase, 0 otherwise).");
    for (size_t i = 0; i < SNAPSHOT_NPHASES; i++) {
        snapshot_puts(b, "psbench_phase{phase=\"");
        snapshot_puts(b, snapshot_phases[i]);
        snapshot_puts(b, in->phase && strcmp(in->phase, snapshot_phases[i]) == 0 ? "\"} 1\n" : "\"} 0\n");
    }
}

/* Orders nodes by (role, state) for counting; qsort has no context argument,
 * so the array holds pointers. */
static int snapshot_cmp_role_state(const void *a, const void *b)
{
    const snap_node *x = *(const snap_node *const *)a, *y = *(const snap_node *const *)b;
    int c = strcmp(snapshot_str(x->role), snapshot_str(y->role));
    return c ? c : strcmp(snapshot_str(x->state), snapshot_str(y->state));
}

static void snapshot_prom_nodes(snapshot_buf *b, const snapshot_input *in)
{
    snapshot_put_family(b, "psbench_nodes", "gauge", "Registered nodes by role and state.");
    if (in->nnodes == 0)
        return;
    const snap_node **sorted = malloc(in->nnodes * sizeof *sorted);
    if (!sorted) {
        b->err = 1;
        return;
    }
    for (size_t i = 0; i < in->nnodes; i++)
        sorted[i] = &in->nodes[i];
    qsort(sorted, in->nnodes, sizeof *sorted, snapshot_cmp_role_state);
    for (size_t i = 0, j; i < in->nnodes; i = j) {
        for (j = i + 1; j < in->nnodes && snapshot_cmp_role_state(&sorted[i], &sorted[j]) == 0; j++)
            ;
        snapshot_puts(b, "psbench_nodes{role=\"");
        snapshot_put_label(b, sorted[i]->role);
        snapshot_puts(b, "\",state=\"");
        snapshot_put_label(b, sorted[i]->state);
        snapshot_puts(b, "\"} ");
        snapshot_put_u64(b, (uint64_t)(j - i));
        snapshot_puts(b, "\n");
    }
    free(sorted);
}

static void snapshot_prom_batches(snapshot_buf *b, const snapshot_input *in)
{
    snapshot_put_family(b, "psbench_batches_completed_total", "counter",
                        "Batches finished by all trainers, all passes.");
    snapshot_puts(b, "psbench_batches_completed_total ");
    snapshot_put_u64(b, in->batches_completed_total);
    snapshot_puts(b, "\n");
}

static void snapshot_prom_payload_sample(snapshot_buf *b, const snap_node *n, const char *dir, uint64_t v)
{
    snapshot_puts(b, "psbench_payload_bytes_total{role=\"");
    snapshot_put_label(b, n->role);
    snapshot_puts(b, "\",rank=\"");
    snapshot_put_rank(b, (int64_t)n->rank);
    snapshot_puts(b, "\",direction=\"");
    snapshot_puts(b, dir);
    snapshot_puts(b, "\"} ");
    snapshot_put_u64(b, v);
    snapshot_puts(b, "\n");
}

static void snapshot_prom_payload(snapshot_buf *b, const snapshot_input *in)
{
    snapshot_put_family(b, "psbench_payload_bytes_total", "counter",
                        "Data-plane payload bytes reported by each node, by direction.");
    for (size_t i = 0; i < in->nnodes; i++) {
        snapshot_prom_payload_sample(b, &in->nodes[i], "in", in->nodes[i].bytes_in);
        snapshot_prom_payload_sample(b, &in->nodes[i], "out", in->nodes[i].bytes_out);
    }
}

/* psbench_embedding_rows_touched_total{rank}: embedding servers only. */
static void snapshot_prom_rows(snapshot_buf *b, const snapshot_input *in)
{
    bool any = false;
    for (size_t i = 0; i < in->nnodes; i++)
        any |= in->nodes[i].rows_touched >= 0;
    if (!any)
        return;
    snapshot_put_family(b, "psbench_embedding_rows_touched_total", "counter",
                        "Embedding table rows changed by updates, by server (the DDP + RPC benchmark).");
    for (size_t i = 0; i < in->nnodes; i++) {
        if (in->nodes[i].rows_touched < 0)
            continue;
        snapshot_puts(b, "psbench_embedding_rows_touched_total{rank=\"");
        snapshot_put_rank(b, (int64_t)in->nodes[i].rank);
        snapshot_puts(b, "\"} ");
        snapshot_put_u64(b, (uint64_t)in->nodes[i].rows_touched);
        snapshot_puts(b, "\n");
    }
}

/* psbench_build_info{version,compiler,protocol} 1: what built the master. */
static void snapshot_prom_build(snapshot_buf *b, const snapshot_input *in)
{
    const snap_build *bi = in->build;
    if (!bi)
        return;
    snapshot_put_family(b, "psbench_build_info", "gauge",
                        "The psbench that serves these metrics: its version, the compiler that built it and its "
                        "wire protocol (value 1).");
    snapshot_puts(b, "psbench_build_info{version=\"");
    snapshot_put_label(b, bi->version);
    snapshot_puts(b, "\",compiler=\"");
    snapshot_put_label(b, bi->compiler);
    snapshot_puts(b, "\",protocol=\"");
    snapshot_put_u64(b, bi->protocol);
    snapshot_puts(b, "\"} 1\n");
}

/* psbench_run_info{hook,model,trainer,trainer_class,server_kind,
 * bucket_cap_mb,device,transport,ntrainer,nserver,run} 1: the job, for a
 * dashboard to show and to join on (group_left) by instance. */
static void snapshot_prom_run_info(snapshot_buf *b, const snapshot_input *in)
{
    const snap_run_info *ri = in->info;
    if (!ri)
        return;
    snapshot_put_family(b, "psbench_run_info", "gauge",
                        "The job's configuration as sweep.csv names it, and the run of --runs (value 1).");
    const struct {
        const char *key, *v;
    } str[] = {{"hook", ri->hook},
               {"model", ri->model},
               {"trainer", ri->trainer},
               {"trainer_class", ri->trainer_class},
               {"server_kind", ri->server_kind}};
    snapshot_puts(b, "psbench_run_info{");
    for (size_t i = 0; i < sizeof str / sizeof str[0]; i++) {
        snapshot_puts(b, i ? "\"," : "");
        snapshot_puts(b, str[i].key);
        snapshot_puts(b, "=\"");
        snapshot_put_label(b, str[i].v);
    }
    /* As the CSVs write it (results.c): %.15g, empty where the trainer
     * class has no buckets. */
    char cap[40] = "";
    if (isfinite(ri->bucket_cap_mb))
        snprintf(cap, sizeof cap, "%.15g", ri->bucket_cap_mb);
    snapshot_puts(b, "\",bucket_cap_mb=\"");
    snapshot_put_label(b, cap); /* a locale's decimal comma passes as it is: a label, not a value */
    snapshot_puts(b, "\",device=\"");
    snapshot_put_label(b, ri->device);
    snapshot_puts(b, "\",transport=\"");
    snapshot_put_label(b, ri->transport);
    snapshot_puts(b, "\",ntrainer=\"");
    snapshot_put_u64(b, ri->ntrainer);
    snapshot_puts(b, "\",nserver=\"");
    snapshot_put_u64(b, ri->nserver);
    snapshot_puts(b, "\",run=\"");
    snapshot_put_u64(b, in->run);
    snapshot_puts(b, "\"} 1\n");
}

/* The headline's figures (headline.h) as gauges, one per trainer row. A
 * figure is row[obj][key] (obj NULL: the row itself) times mul over div:
 * the headline's ms become seconds, its GB/s bytes per second (Prometheus
 * wants base units; ms / 1000 as the summaries divide them, not * 1e-3,
 * so that the two read the same). `part` names the label of a figure that is one of
 * several parts of a family (the shares). */
typedef struct snapshot_figure {
    const char *family, *help;
    const char *obj, *key;
    double mul, div;
    const char *part;
} snapshot_figure;

static const snapshot_figure snapshot_figures[] = {
    {"psbench_step_p50_seconds", "The headline's step time (batch_level_metric,batch_all), median.", NULL,
     "step_p50_ms", 1, 1000, NULL},
    {"psbench_step_p90_seconds", "The headline's step time, 90th percentile.", NULL, "step_p90_ms", 1, 1000, NULL},
    {"psbench_samples_per_second", "The headline's samples per second: the batch size over the mean step; "
                                   "trainer=\"all\" sums the trainers.",
     NULL, "samples_per_s", 1, 1, NULL},
    {"psbench_step_share", "The headline's share of the mean step (0-1) by part: forward, backward_compute, "
                           "exposed_comm, optimizer, other.",
     "shares", NULL, 1, 1, "part"},
    {"psbench_bytes_per_step", "The headline's bytes one trainer hands communication per step (gradient "
                               "buckets, or the DDP + RPC benchmark's server traffic).",
     NULL, "bytes_per_step", 1, 1, NULL},
    {"psbench_comm_span_seconds", "The headline's communication span (hook_future_metric,comm_span), mean.", NULL,
     "comm_span_ms", 1, 1000, NULL},
    {"psbench_effective_bytes_per_second", "The headline's bytes per step over the communication span.", NULL,
     "effective_gb_per_s", 1e9, 1, NULL},
    {"psbench_steady_step_p50_seconds", "The headline's steady-state step time (its \"steady\" figures), median.",
     "steady", "step_p50_ms", 1, 1000, NULL},
    {"psbench_steady_step_p90_seconds", "The headline's steady-state step time, 90th percentile.", "steady",
     "step_p90_ms", 1, 1000, NULL},
    {"psbench_steady_samples_per_second", "The headline's steady-state samples per second.", "steady",
     "samples_per_s", 1, 1, NULL},
    {"psbench_steady_steps", "The steps the headline's steady-state figures are over.", "steady", "n", 1, 1, NULL},
};

/* The shares' keys, in the step's order (headline.c). */
static const char *const snapshot_share_parts[] = {"forward", "backward_compute", "exposed_comm", "optimizer",
                                                   "other"};
#define SNAPSHOT_NPARTS (sizeof snapshot_share_parts / sizeof snapshot_share_parts[0])

/* Figure f's value in row (NULL: the object or the key is not there, or the
 * figure is null: never 0 for a figure not known). part: the key for a
 * figure with parts. */
static bool snapshot_figure_value(const snapshot_figure *f, const json_t *row, const char *part, double *v)
{
    const json_t *o = f->obj ? json_object_get(row, f->obj) : row;
    const json_t *x = json_object_get(o, f->part ? part : f->key);
    if (!json_is_number(x) || !isfinite(json_number_value(x)))
        return false;
    *v = json_number_value(x) * f->mul / f->div;
    return true;
}

/* One family of the headline: HELP and TYPE only where a row has the
 * figure (a workload without a span has no comm span gauge at all). */
static void snapshot_prom_figure(snapshot_buf *b, const snapshot_input *in, const json_t *rows,
                                 const snapshot_figure *f)
{
    size_t nparts = f->part ? SNAPSHOT_NPARTS : 1;
    bool header = false;
    size_t i;
    const json_t *row;
    json_array_foreach((json_t *)rows, i, row) {
        const char *who = json_string_value(json_object_get(row, "trainer"));
        if (!who)
            continue;
        for (size_t p = 0; p < nparts; p++) {
            double v;
            if (!snapshot_figure_value(f, row, snapshot_share_parts[p], &v))
                continue;
            if (!header)
                snapshot_put_family(b, f->family, "gauge", f->help);
            header = true;
            snapshot_puts(b, f->family);
            snapshot_puts(b, "{trainer=\"");
            snapshot_put_label(b, who);
            if (f->part) {
                snapshot_puts(b, "\",");
                snapshot_puts(b, f->part);
                snapshot_puts(b, "=\"");
                snapshot_puts(b, snapshot_share_parts[p]);
            }
            snapshot_puts(b, "\",run=\"");
            snapshot_put_u64(b, in->run);
            if (in->pass) {
                snapshot_puts(b, "\",pass=\"");
                snapshot_put_label(b, in->pass);
            }
            snapshot_puts(b, "\"} ");
            snapshot_put_double(b, v);
            snapshot_puts(b, "\n");
        }
    }
}

static void snapshot_prom_headline(snapshot_buf *b, const snapshot_input *in)
{
    const json_t *rows = in->headline ? json_object_get(in->headline, "trainers") : NULL;
    if (!json_is_array(rows))
        return;
    for (size_t f = 0; f < sizeof snapshot_figures / sizeof snapshot_figures[0]; f++)
        snapshot_prom_figure(b, in, rows, &snapshot_figures[f]);
}

/* rank="R",run="N"[,pass="P"] of a step histogram's samples. */
static void snapshot_put_step_labels(snapshot_buf *b, const snap_step_hist *h, const snapshot_input *in)
{
    snapshot_puts(b, "rank=\"");
    snapshot_put_u64(b, h->rank);
    snapshot_puts(b, "\",run=\"");
    snapshot_put_u64(b, in->run);
    if (in->pass) {
        snapshot_puts(b, "\",pass=\"");
        snapshot_put_label(b, in->pass);
    }
    snapshot_puts(b, "\"");
}

/* psbench_step_duration_seconds: each trainer rank's step times as a
 * histogram (cumulative buckets, _sum, _count), which, unlike the
 * summaries' quantiles, add up over ranks: histogram_quantile(0.5, sum by
 * (le) (...)) is the median step of all trainers. */
static void snapshot_prom_steps(snapshot_buf *b, const snapshot_input *in)
{
    static const double bounds_ms[SNAP_STEP_NBOUNDS] = {SNAP_STEP_BOUNDS_MS};
    if (in->nsteps == 0)
        return;
    snapshot_put_family(b, "psbench_step_duration_seconds", "histogram",
                        "Step times (batch_level_metric,batch_all) per trainer rank, of the run and pass labelled.");
    for (size_t i = 0; i < in->nsteps; i++) {
        const snap_step_hist *h = &in->steps[i];
        for (size_t k = 0; k <= SNAP_STEP_NBOUNDS; k++) {
            snapshot_puts(b, "psbench_step_duration_seconds_bucket{");
            snapshot_put_step_labels(b, h, in);
            snapshot_puts(b, ",le=\"");
            snapshot_put_double(b, k < SNAP_STEP_NBOUNDS ? bounds_ms[k] / 1000.0 : INFINITY);
            snapshot_puts(b, "\"} ");
            snapshot_put_u64(b, k < SNAP_STEP_NBOUNDS ? h->le[k] : h->count);
            snapshot_puts(b, "\n");
        }
        snapshot_puts(b, "psbench_step_duration_seconds_sum{");
        snapshot_put_step_labels(b, h, in);
        snapshot_puts(b, "} ");
        snapshot_put_double(b, h->sum_ms / 1000.0);
        snapshot_puts(b, "\npsbench_step_duration_seconds_count{");
        snapshot_put_step_labels(b, h, in);
        snapshot_puts(b, "} ");
        snapshot_put_u64(b, h->count);
        snapshot_puts(b, "\n");
    }
}

char *snapshot_prometheus(const snapshot_input *in)
{
    snapshot_buf b = {0};
    if (snapshot_reserve(&b, 0) == 0) /* an empty input still yields a string */
        b.p[0] = '\0';
    snapshot_prom_durations(&b, in);
    snapshot_prom_phase(&b, in);
    snapshot_prom_nodes(&b, in);
    snapshot_prom_batches(&b, in);
    snapshot_prom_payload(&b, in);
    snapshot_prom_rows(&b, in);
    snapshot_prom_build(&b, in);
    snapshot_prom_run_info(&b, in);
    snapshot_prom_headline(&b, in);
    snapshot_prom_steps(&b, in);
    if (b.err) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
