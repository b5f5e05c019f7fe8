/* snapshot_prom.c — renders a snapshot_input (snapshot.h) into the
 * Prometheus text exposition (format 0.0.4) of the master's /metrics. Pure
 * functions, as snapshot.c's: no I/O, no globals; the returned string is
 * malloc'd (the caller frees it) and NULL means allocation failure.
 *
 * Values are printed with the shortest of %.15g..%.17g that reads back
 * exactly, with '.' as the decimal point whatever the locale, and NaN /
 * +Inf / -Inf spelled the way the text format wants them. */
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

static const char *const snapshot_phases[] = {"waiting", "warmup", "running", "done", "failed"};
#define SNAPSHOT_NPHASES (sizeof snapshot_phases / sizeof snapshot_phases[0])

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
