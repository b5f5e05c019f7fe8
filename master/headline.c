/* headline.c — a run's answer in a few figures (see headline.h).
 *
 * The breakdown uses bench/train_step.sh's definitions, from the same
 * trainer metrics (trainer/train.c's step marks): forward =
 * forward_metric,forward_pass; backward = backward_metric,backward_compute
 * (its compute alone: the seed's backward_metric,backward also holds the
 * exposed wait); exposed communication = hook_future_metric,exposed_wait
 * (the optimizer's wait for buckets after backward ends); optimizer =
 * optimizer_metric,step; the step = batch_level_metric,batch_all. Each is
 * the metric's mean over the pass divided by the step's mean. A workload
 * without exposed_wait (the HybridModel, trainer/hybrid.c) has the same
 * span as backward_metric,backward minus backward_compute (on DummyModel
 * the two are the same marks, TM_BWD..TM_OPT); the HybridModel's remote
 * lookups (embedding_metric,remote_lookup, before forward, awaited) are
 * exposed communication too. The four spans tile the step (consecutive
 * marks), so their shares add up to 1; "other" is the rest (a workload
 * that lacks a span: the Synthetic model has no forward). */
#include "master/headline.h"
#include "master/master.h"

#include <math.h>
#include <string.h>

#define HL_STEP "batch_level_metric,batch_all"
#define HL_SPAN "hook_future_metric,comm_span"

/* The shares' keys and the metrics they come from, in the step's order. */
#define HL_FWD "forward_metric,forward_pass"
#define HL_BWD "backward_metric,backward"
#define HL_BWD_COMPUTE "backward_metric,backward_compute"
#define HL_EXPOSED "hook_future_metric,exposed_wait"
#define HL_LOOKUP "embedding_metric,remote_lookup"
#define HL_OPT "optimizer_metric,step"

/* Trainer rank's (-1: all trainers') summary of metric, NULL if none or empty. */
static const stats_summary *hl_find(const snap_stat *st, size_t n, int64_t rank, const char *metric)
{
    for (size_t i = 0; i < n; i++)
        if (st[i].rank == rank && st[i].s.count > 0 && strcmp(st[i].role, "trainer") == 0 &&
            strcmp(st[i].metric, metric) == 0)
            return &st[i].s;
    return NULL;
}

/* The mean of trainer rank's metric, NAN if none. */
static double hl_mean(const snap_stat *st, size_t n, int64_t rank, const char *metric)
{
    const stats_summary *s = hl_find(st, n, rank, metric);
    return s ? s->mean : NAN;
}

static json_t *hl_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The gradient bytes trainer r hands its hook per step: its rebuilt
 * buckets' floats (fp32) as its timed pass reported them; -1 if not known
 * (no report yet, a workload without DDP buckets). */
static double hl_gradient_bytes(const master *m, uint32_t r)
{
    const node *t = m->trainers[r];
    json_t *b = t && t->timed_result ? json_object_get(json_object_get(t->timed_result, "buckets"), "rebuilt")
                                     : NULL;
    if (!json_is_array(b) || json_array_size(b) == 0)
        return -1;
    double floats = 0;
    size_t i;
    json_t *k;
    json_array_foreach(b, i, k) floats += (double)json_integer_value(json_object_get(k, "floats"));
    return floats * 4.0;
}

/* The embedding servers' traffic per trainer and batch, every message
 * type both ways (results.json's ddp_rpc.traffic.per_trainer_batch.all);
 * -1 when no server reported any. */
static double hl_server_bytes(const master *m)
{
    double bytes = 0;
    bool any = false;
    for (uint32_t r = 0; r < m->set.nserver; r++) {
        const node *sv = m->servers[r];
        if (!sv || !sv->calls)
            continue;
        const char *type;
        json_t *c;
        json_object_foreach(sv->calls, type, c) {
            json_t *b = json_object_get(c, "bytes");
            if (json_is_integer(b)) {
                bytes += (double)json_integer_value(b);
                any = true;
            }
        }
    }
    double batches = (double)m->set.ntrainer * (double)m->set.batches_per_pass;
    return any && batches > 0 ? bytes / batches : -1;
}

/* One row: rank's (-1: all trainers') figures; bytes per step < 0: not known. */
static json_t *hl_row(const snap_stat *st, size_t n, int64_t rank, double samples_per_s,
                      double bytes, const char *bytes_source)
{
    const stats_summary *step = hl_find(st, n, rank, HL_STEP);
    char who[24];
    if (rank < 0)
        snprintf(who, sizeof who, "all");
    else
        snprintf(who, sizeof who, "%lld", (long long)rank);
    json_t *row = json_pack("{s:s, s:o, s:o, s:o}", "trainer", who, "step_p50_ms",
                            step ? hl_num(step->p50) : json_null(), "step_p90_ms",
                            step ? hl_num(step->p90) : json_null(), "samples_per_s",
                            samples_per_s >= 0 ? hl_num(samples_per_s) : json_null());
    /* The four parts' mean ms (NAN: not known), in the step's order. */
    double part[4];
    static const char *const keys[4] = {"forward", "backward_compute", "exposed_comm", "optimizer"};
    part[0] = hl_mean(st, n, rank, HL_FWD);
    part[1] = hl_mean(st, n, rank, HL_BWD_COMPUTE);
    part[2] = hl_mean(st, n, rank, HL_EXPOSED);
    if (!isfinite(part[2]))
        part[2] = hl_mean(st, n, rank, HL_BWD) - part[1];
    double lookup = hl_mean(st, n, rank, HL_LOOKUP);
    if (isfinite(lookup) && isfinite(part[2]))
        part[2] += lookup;
    part[3] = hl_mean(st, n, rank, HL_OPT);
    json_t *shares = json_object();
    double known = 0;
    bool any = false;
    for (size_t k = 0; k < 4; k++) {
        double v = step && step->mean > 0 ? part[k] / step->mean : NAN;
        if (isfinite(v)) {
            known += v;
            any = true;
        }
        json_object_set_new(shares, keys[k], hl_num(v));
    }
    /* The rest: 0 up to rounding where the four tile the step. */
    double other = 1.0 - known;
    json_object_set_new(shares, "other", any ? json_real(fabs(other) < 1e-9 ? 0.0 : other) : json_null());
    json_object_set_new(row, "shares", shares);
    const stats_summary *span = hl_find(st, n, rank, HL_SPAN);
    json_object_set_new(row, "bytes_per_step", bytes >= 0 ? json_real(bytes) : json_null());
    json_object_set_new(row, "bytes_source", bytes >= 0 ? json_string(bytes_source) : json_null());
    json_object_set_new(row, "comm_span_ms", span ? hl_num(span->mean) : json_null());
    /* The rate the step's traffic moved at over the span it took (first
     * bucket handed over to last mean back): bytes / span, GB = 1e9 B. */
    json_object_set_new(row, "effective_gb_per_s", bytes >= 0 && span && span->mean > 0
                                                        ? hl_num(bytes / (span->mean / 1e3) / 1e9)
                                                        : json_null());
    return row;
}

json_t *headline_json(const master *m, const snap_stat *st, size_t n)
{
    json_t *rows = json_array();
    if (!rows)
        return NULL;
    double server_bytes = m->set.embedding ? hl_server_bytes(m) : -1;
    double all_samples = 0, all_bytes = 0;
    uint32_t nbytes = 0;
    bool samples_known = true;
    for (uint32_t r = 0; r < m->set.ntrainer; r++) {
        const stats_summary *step = hl_find(st, n, r, HL_STEP);
        /* A step's samples are the batch: samples/s through the mean step
         * (the p50 would overstate a skewed pass's throughput). */
        double sps = step && step->mean > 0 ? (double)m->set.batch_size * 1e3 / step->mean : -1;
        samples_known = samples_known && sps >= 0;
        all_samples += sps;
        double bytes = server_bytes >= 0 ? server_bytes : hl_gradient_bytes(m, r);
        if (bytes >= 0) {
            all_bytes += bytes;
            nbytes++;
        }
        json_array_append_new(rows, hl_row(st, n, r, sps, bytes,
                                           server_bytes >= 0 ? "server traffic" : "gradient buckets"));
    }
    /* All trainers: their samples/s together, the bytes one trainer moves
     * (their mean). */
    json_array_append_new(rows, hl_row(st, n, -1, samples_known && m->set.ntrainer ? all_samples : -1,
                                       nbytes == m->set.ntrainer && nbytes ? all_bytes / nbytes : -1,
                                       server_bytes >= 0 ? "server traffic" : "gradient buckets"));
    const char *pass = m->metrics_pass == PASS_TIMED ? "timed" : m->metrics_pass == PASS_WARMUP ? "warm-up" : NULL;
    return json_pack("{s:o, s:s, s:o}", "pass", pass ? json_string(pass) : json_null(), "unit", "ms", "trainers",
                     rows);
}

/* "%8.2f" of a number, "-" for null, into buf. */
static const char *hl_fmt(const json_t *v, const char *fmt, double scale, char *buf, size_t len)
{
    if (json_is_number(v))
        snprintf(buf, len, fmt, json_number_value(v) * scale);
    else
        snprintf(buf, len, "-");
    return buf;
}

void headline_print(const json_t *h, FILE *out)
{
    json_t *rows = json_object_get(h, "trainers");
    size_t i;
    json_t *row;
    bool any = false;
    json_array_foreach(rows, i, row) any = any || json_is_number(json_object_get(row, "step_p50_ms"));
    if (!any)
        return;
    const char *pass = json_string_value(json_object_get(h, "pass"));
    fprintf(out, "\nheadline (%s pass): step ms, samples/s; the step's shares in %%: forward, backward compute, "
                 "exposed communication, optimizer, other; bytes per step and their rate over the comm span\n",
            pass ? pass : "no");
    fprintf(out, "%-8s %9s %9s %10s %6s %6s %6s %6s %6s %12s %9s %8s\n", "trainer", "step_p50", "step_p90",
            "samples/s", "fwd%", "bwd%", "exp%", "opt%", "oth%", "bytes/step", "span_ms", "GB/s");
    json_array_foreach(rows, i, row) {
        char b[12][32];
        json_t *sh = json_object_get(row, "shares");
        fprintf(out, "%-8s %9s %9s %10s %6s %6s %6s %6s %6s %12s %9s %8s\n",
                json_string_value(json_object_get(row, "trainer")),
                hl_fmt(json_object_get(row, "step_p50_ms"), "%.2f", 1, b[0], sizeof b[0]),
                hl_fmt(json_object_get(row, "step_p90_ms"), "%.2f", 1, b[1], sizeof b[1]),
                hl_fmt(json_object_get(row, "samples_per_s"), "%.1f", 1, b[2], sizeof b[2]),
                hl_fmt(json_object_get(sh, "forward"), "%.1f", 100, b[3], sizeof b[3]),
                hl_fmt(json_object_get(sh, "backward_compute"), "%.1f", 100, b[4], sizeof b[4]),
                hl_fmt(json_object_get(sh, "exposed_comm"), "%.1f", 100, b[5], sizeof b[5]),
                hl_fmt(json_object_get(sh, "optimizer"), "%.1f", 100, b[6], sizeof b[6]),
                hl_fmt(json_object_get(sh, "other"), "%.1f", 100, b[7], sizeof b[7]),
                hl_fmt(json_object_get(row, "bytes_per_step"), "%.0f", 1, b[8], sizeof b[8]),
                hl_fmt(json_object_get(row, "comm_span_ms"), "%.2f", 1, b[9], sizeof b[9]),
                hl_fmt(json_object_get(row, "effective_gb_per_s"), "%.3f", 1, b[10], sizeof b[10]));
    }
    json_t *src = json_object_get(json_array_get(rows, 0), "bytes_source");
    if (json_is_string(src))
        fprintf(out, "bytes/step: %s (%s)\n", json_string_value(src),
                strcmp(json_string_value(src), "server traffic") == 0
                    ? "every message to and from the servers, per trainer and batch"
                    : "the gradient payload a trainer hands its hook per step, fp32; the reduced result comes back "
                      "the same size; not the wire's bytes");
}
