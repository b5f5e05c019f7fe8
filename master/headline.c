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
#include "master/noise.h"

#include <math.h>
#include <stdlib.h>
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

/* The gradient bytes trainer r hands its hook per step. With --compress
 * powersgd, for its dense buckets what its hook allreduced, the mean over
 * the timed pass's steps (plain fp32 ones until start_powerSGD_iter, then
 * P, Q and the uncompressed tensors): the factors' size is no bucket's;
 * a sparse bucket (fp32) counts as below. Otherwise its rebuilt
 * buckets' floats as its timed pass reported them, each of its bucket's
 * element_bytes on the wire (2 with --compress fp16|bf16; 4 where a report
 * has none); -1 if not known (no report yet, a workload without DDP
 * buckets). */
static double hl_gradient_bytes(const master *m, uint32_t r)
{
    const node *t = m->trainers[r];
    json_t *b = t && t->timed_result ? json_object_get(json_object_get(t->timed_result, "buckets"), "rebuilt")
                                     : NULL;
    if (!json_is_array(b) || json_array_size(b) == 0)
        return -1;
    json_t *pz = json_object_get(json_object_get(t->timed_result, "powersgd"), "bytes_per_step");
    double bytes = json_is_number(pz) ? json_number_value(pz) : 0;
    size_t i;
    json_t *k;
    json_array_foreach(b, i, k) {
        if (json_is_number(pz) && !json_is_true(json_object_get(k, "sparse")))
            continue; /* PowerSGD's dense buckets: counted in its bytes */
        json_t *eb = json_object_get(k, "element_bytes");
        bytes += (double)json_integer_value(json_object_get(k, "floats")) *
                 (json_is_integer(eb) ? (double)json_integer_value(eb) : 4.0);
    }
    return bytes;
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

/* The step's shares from its four parts' mean ms (NAN: not known) and the
 * mean step: {"forward", "backward_compute", "exposed_comm", "optimizer",
 * "other"}, each part over the step; "other" the rest (0 up to rounding
 * where the four tile the step), null when no part is known. */
static json_t *hl_shares(const double part[4], double step_mean)
{
    static const char *const keys[4] = {"forward", "backward_compute", "exposed_comm", "optimizer"};
    json_t *shares = json_object();
    double known = 0;
    bool any = false;
    for (int k = 0; k < 4; k++) {
        double v = step_mean > 0 ? part[k] / step_mean : NAN;
        if (isfinite(v)) {
            known += v;
            any = true;
        }
        json_object_set_new(shares, keys[k], hl_num(v));
    }
    double other = 1.0 - known;
    json_object_set_new(shares, "other", any ? json_real(fabs(other) < 1e-9 ? 0.0 : other) : json_null());
    return shares;
}

/* ---- the steady state (issue 38) ------------------------------------------------
 *
 * A pass's first step is another workload: DDP's first iteration (every
 * gradient in one bucket after backward) and the first use of everything
 * (segments mapped, buffers registered, CUDA IPC handles opened). The
 * figures with PyTorch's names keep it; the steady state is every step
 * after each trainer's first, and the first step is reported apart. Each
 * step metric has one sample per step, in step order (shared/stats.h keeps
 * them so), so a rank's steady samples are its samples after the first. */

/* Trainer rank's statistics of a step metric, NULL if none. */
static const stats *hl_stats(const master *m, uint32_t r, const char *metric)
{
    const stats *s = agg_find(&m->agg, AGG_TRAINER, r, metric);
    return s && s->count > 0 ? s : NULL;
}

/* The mean of s without its first sample; NAN with fewer than 2. */
static double hl_steady_mean(const stats *s)
{
    if (!s || s->count < 2 || s->nsamples == 0)
        return NAN;
    return (s->sum - s->samples[0]) / (double)(s->count - 1);
}

/* A rank's steady figures: its step samples after the first (kept ones). */
typedef struct {
    uint64_t n;          /* steady steps */
    double first_ms;     /* the first step */
    double mean;         /* steady mean step (exact: from the sums) */
    const double *steps; /* the kept steady samples, nkept of them (NULL: none kept) */
    size_t nkept;
    double part[4];      /* steady means of forward, backward compute, exposed comm, optimizer */
    double span;         /* steady mean comm span */
} hl_steady_rank;

static void hl_steady_of(const master *m, uint32_t r, hl_steady_rank *o)
{
    memset(o, 0, sizeof *o);
    o->first_ms = o->mean = o->span = NAN;
    for (int k = 0; k < 4; k++)
        o->part[k] = NAN;
    const stats *step = hl_stats(m, r, HL_STEP);
    if (!step || step->nsamples == 0)
        return;
    o->n = step->count - 1;
    o->first_ms = step->samples[0];
    o->mean = hl_steady_mean(step);
    o->steps = step->samples + 1;
    o->nkept = step->nsamples - 1;
    /* A part's steady mean where it has a sample per step; else its mean
     * over the pass (a workload whose metric is not per step). */
    static const char *const parts[4] = {HL_FWD, HL_BWD_COMPUTE, HL_EXPOSED, HL_OPT};
    for (int k = 0; k < 4; k++) {
        const stats *s = hl_stats(m, r, parts[k]);
        o->part[k] = !s ? NAN : s->count == step->count ? hl_steady_mean(s) : s->mean;
    }
    if (!isfinite(o->part[2])) {
        const stats *b = hl_stats(m, r, HL_BWD);
        double bwd = !b ? NAN : b->count == step->count ? hl_steady_mean(b) : b->mean;
        o->part[2] = bwd - o->part[1];
    }
    const stats *lk = hl_stats(m, r, HL_LOOKUP);
    if (lk && isfinite(o->part[2]))
        o->part[2] += lk->count == step->count ? hl_steady_mean(lk) : lk->mean;
    const stats *sp = hl_stats(m, r, HL_SPAN);
    o->span = !sp ? NAN : sp->count == step->count ? hl_steady_mean(sp) : sp->mean;
}

static int hl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Quantile q of sorted v[0..n) (numpy's linear method). */
static double hl_quantile(const double *v, size_t n, double q)
{
    if (n == 0)
        return NAN;
    double h = q * (double)(n - 1);
    size_t k = (size_t)h;
    return k + 1 < n ? v[k] + (h - (double)k) * (v[k + 1] - v[k]) : v[k];
}

/* The bytes that cross the wire per step for one trainer, by hook:
 * PS: its push and the mean back (2 S); a ring allreduce: 2(n-1)/n S each
 * way; the DDP + RPC benchmark: the servers' measured traffic. NAN (and no
 * model) where psbench has none (a sparse bucket's bytes vary by batch). */
static double hl_wire_bytes(const master *m, double payload, bool server_traffic, const char **model)
{
    const char *hook = m->set.csv_config.hook;
    double n = (double)m->set.ntrainer;
    *model = NULL;
    if (!(payload >= 0))
        return NAN;
    if (server_traffic) {
        *model = "the servers' measured traffic, both ways";
        return payload;
    }
    if (hook && strcmp(hook, "rpc_hook") == 0 && m->set.nserver > 0) {
        *model = "parameter server: the push and the mean back";
        return 2 * payload;
    }
    if (hook && strcmp(hook, "allreduce_hook") == 0) {
        *model = "ring allreduce: 2(n-1)/n of the payload each way";
        return 2 * 2 * (n - 1) / n * payload;
    }
    return NAN;
}

/* nccl-tests' bus bandwidth factor of the hook (busbw = algbw x this), NAN
 * where none is defined: allreduce 2(n-1)/n; the parameter server's
 * busiest link, a server's, carries ntrainer / nserver payloads each way. */
static double hl_bus_factor(const master *m)
{
    const char *hook = m->set.csv_config.hook;
    double n = (double)m->set.ntrainer;
    if (hook && strcmp(hook, "allreduce_hook") == 0)
        return 2 * (n - 1) / n;
    if (hook && strcmp(hook, "rpc_hook") == 0 && m->set.nserver > 0)
        return n / (double)m->set.nserver;
    return NAN;
}

/* The steady object of a row: ranks[0..nr) are the row's trainers (one,
 * or all of them for "all"). exact: the final headline (every kept
 * sample, and the bootstrap's intervals); else the live one, whose
 * quantiles come from `live` (the pass's, first step included) beyond
 * 8192 steps. */
static json_t *hl_steady_json(const master *m, const hl_steady_rank *ranks, size_t nr, const stats_summary *live,
                              double bytes, bool server_traffic, bool exact)
{
    uint64_t n = UINT64_MAX;
    double mean_sum = 0, first_sum = 0, part_sum[4] = {0}, span_sum = 0, sps = 0;
    size_t kept = 0;
    for (size_t i = 0; i < nr; i++) {
        n = ranks[i].n < n ? ranks[i].n : n;
        first_sum += ranks[i].first_ms;
        mean_sum += ranks[i].mean;
        span_sum += ranks[i].span;
        for (int k = 0; k < 4; k++)
            part_sum[k] += ranks[i].part[k];
        sps += ranks[i].mean > 0 ? (double)m->set.batch_size * 1e3 / ranks[i].mean : NAN;
        kept += ranks[i].nkept;
    }
    if (nr == 0 || n == UINT64_MAX || n == 0)
        return json_null();
    double mean = mean_sum / (double)nr, span = span_sum / (double)nr;
    double p50 = NAN, p90 = NAN;
    bool sorted = exact || kept <= 8192;
    double *all = sorted && kept ? malloc(kept * sizeof *all) : NULL;
    if (all) {
        size_t at = 0;
        for (size_t i = 0; i < nr; i++) {
            memcpy(all + at, ranks[i].steps, ranks[i].nkept * sizeof *all);
            at += ranks[i].nkept;
        }
        qsort(all, kept, sizeof *all, hl_cmp);
        p50 = hl_quantile(all, kept, 0.5);
        p90 = hl_quantile(all, kept, 0.9);
        free(all);
    } else if (live) { /* long live passes: the histogram's, first step and all */
        p50 = live->p50;
        p90 = live->p90;
    }
    json_t *o = json_pack("{s:I, s:o, s:o, s:o, s:o, s:o}", "n", (json_int_t)n, "first_step_ms",
                          hl_num(first_sum / (double)nr), "step_p50_ms", hl_num(p50), "step_p90_ms", hl_num(p90),
                          "step_mean_ms", hl_num(mean), "samples_per_s", hl_num(sps));
    if (!o)
        return json_null();
    json_object_set_new(o, "few_steps", json_boolean(n < HEADLINE_FEW_STEPS));
    double part[4];
    for (int k = 0; k < 4; k++)
        part[k] = part_sum[k] / (double)nr;
    json_object_set_new(o, "shares", hl_shares(part, mean));
    json_object_set_new(o, "comm_span_ms", hl_num(span));
    /* nccl-tests' algbw (the payload over the time it took: the comm span)
     * and busbw (algbw x the hook's bus factor), GB = 1e9 B. */
    double algbw = bytes >= 0 && span > 0 && !server_traffic ? bytes / (span / 1e3) / 1e9 : NAN;
    json_object_set_new(o, "algbw_gb_per_s", hl_num(algbw));
    json_object_set_new(o, "busbw_gb_per_s", hl_num(algbw * hl_bus_factor(m)));
    if (exact && kept >= 2 * nr) {
        /* The run's own noise: the steps within it (noise.h). */
        const double **series = malloc(nr * sizeof *series);
        if (series) {
            size_t len = SIZE_MAX;
            for (size_t i = 0; i < nr; i++) {
                series[i] = ranks[i].steps;
                len = ranks[i].nkept < len ? ranks[i].nkept : len;
            }
            noise_run run = {.steps = series, .ntrainers = nr, .n = len};
            noise_ci c50, csps;
            if (noise_interval(&run, 1, NOISE_P50, (double)m->set.batch_size, m->set.seed, &c50) == 0 &&
                noise_interval(&run, 1, NOISE_SAMPLES_PER_S, (double)m->set.batch_size, m->set.seed, &csps) == 0 &&
                c50.method) {
                json_object_set_new(o, "step_p50_ci95", json_pack("[o, o]", hl_num(c50.low), hl_num(c50.high)));
                json_object_set_new(o, "samples_per_s_ci95",
                                    json_pack("[o, o]", hl_num(csps.low), hl_num(csps.high)));
                json_object_set_new(o, "ci_method", json_string(c50.method));
                json_object_set_new(o, "ci_block_steps", json_integer((json_int_t)c50.block));
            }
            free(series);
        }
    }
    return o;
}

/* One row: rank's (-1: all trainers') figures; bytes per step < 0: not known. */
static json_t *hl_row(const master *m, const snap_stat *st, size_t n, int64_t rank, double samples_per_s,
                      double bytes, const char *bytes_source, bool exact)
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
    part[0] = hl_mean(st, n, rank, HL_FWD);
    part[1] = hl_mean(st, n, rank, HL_BWD_COMPUTE);
    part[2] = hl_mean(st, n, rank, HL_EXPOSED);
    if (!isfinite(part[2]))
        part[2] = hl_mean(st, n, rank, HL_BWD) - part[1];
    double lookup = hl_mean(st, n, rank, HL_LOOKUP);
    if (isfinite(lookup) && isfinite(part[2]))
        part[2] += lookup;
    part[3] = hl_mean(st, n, rank, HL_OPT);
    json_object_set_new(row, "shares", hl_shares(part, step ? step->mean : NAN));
    const stats_summary *span = hl_find(st, n, rank, HL_SPAN);
    json_object_set_new(row, "bytes_per_step", bytes >= 0 ? json_real(bytes) : json_null());
    json_object_set_new(row, "bytes_source", bytes >= 0 ? json_string(bytes_source) : json_null());
    json_object_set_new(row, "comm_span_ms", span ? hl_num(span->mean) : json_null());
    /* The rate the step's traffic moved at over the span it took (first
     * bucket handed over to last mean back): bytes / span, GB = 1e9 B. */
    json_object_set_new(row, "effective_gb_per_s", bytes >= 0 && span && span->mean > 0
                                                        ? hl_num(bytes / (span->mean / 1e3) / 1e9)
                                                        : json_null());
    /* Extensions (issue 38): the wire's bytes by the hook's model, and the
     * steady state with the first step apart. */
    bool traffic = bytes_source && strcmp(bytes_source, "server traffic") == 0;
    const char *model;
    double wire = hl_wire_bytes(m, bytes, traffic, &model);
    json_object_set_new(row, "wire_bytes_per_step", hl_num(wire));
    json_object_set_new(row, "wire_bytes_model", model ? json_string(model) : json_null());
    uint32_t lo = rank < 0 ? 0 : (uint32_t)rank, hi = rank < 0 ? m->set.ntrainer : (uint32_t)rank + 1;
    hl_steady_rank *rs = calloc(hi - lo ? hi - lo : 1, sizeof *rs);
    size_t nr = 0;
    for (uint32_t r = lo; rs && r < hi; r++) {
        hl_steady_of(m, r, &rs[nr]);
        nr += rs[nr].steps != NULL;
    }
    json_object_set_new(row, "steady",
                        rs && nr == hi - lo ? hl_steady_json(m, rs, nr, step, bytes, traffic, exact) : json_null());
    free(rs);
    return row;
}

json_t *headline_json(const master *m, const snap_stat *st, size_t n, bool exact)
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
        json_array_append_new(rows, hl_row(m, st, n, r, sps, bytes,
                                           server_bytes >= 0 ? "server traffic" : "gradient buckets", exact));
    }
    /* All trainers: their samples/s together, the bytes one trainer moves
     * (their mean). */
    json_array_append_new(rows, hl_row(m, st, n, -1, samples_known && m->set.ntrainer ? all_samples : -1,
                                       nbytes == m->set.ntrainer && nbytes ? all_bytes / nbytes : -1,
                                       server_bytes >= 0 ? "server traffic" : "gradient buckets", exact));
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
    bool any = false, steady = true;
    json_array_foreach(rows, i, row) {
        any = any || json_is_number(json_object_get(row, "step_p50_ms"));
        steady = steady && json_is_object(json_object_get(row, "steady"));
    }
    if (!any)
        return;
    const char *pass = json_string_value(json_object_get(h, "pass"));
    fprintf(out, "\nheadline (%s pass): step ms, samples/s; the step's shares in %%: forward, backward compute, "
                 "exposed communication, optimizer, other; bytes per step and their rate over the comm span%s\n",
            pass ? pass : "no",
            steady ? "; steady state: each trainer's n steps after its first, the first step apart (first_ms)" : "");
    fprintf(out, "%-8s %6s %9s %9s %10s %6s %6s %6s %6s %6s %12s %9s %8s %8s %9s\n", "trainer", "n", "step_p50",
            "step_p90", "samples/s", "fwd%", "bwd%", "exp%", "opt%", "oth%", "bytes/step", "span_ms", "GB/s", "busbw",
            "first_ms");
    json_array_foreach(rows, i, row) {
        char b[16][32];
        /* The steady state where it is known; the pass's figures (first
         * step included) where it is not (a single step). */
        json_t *sd = json_object_get(row, "steady");
        const json_t *src = json_is_object(sd) ? sd : row;
        json_t *sh = json_object_get(src, "shares");
        fprintf(out, "%-8s %6s %9s %9s %10s %6s %6s %6s %6s %6s %12s %9s %8s %8s %9s\n",
                json_string_value(json_object_get(row, "trainer")),
                hl_fmt(json_object_get(sd, "n"), "%.0f", 1, b[11], sizeof b[11]),
                hl_fmt(json_object_get(src, "step_p50_ms"), "%.2f", 1, b[0], sizeof b[0]),
                hl_fmt(json_object_get(src, "step_p90_ms"), "%.2f", 1, b[1], sizeof b[1]),
                hl_fmt(json_object_get(src, "samples_per_s"), "%.1f", 1, b[2], sizeof b[2]),
                hl_fmt(json_object_get(sh, "forward"), "%.1f", 100, b[3], sizeof b[3]),
                hl_fmt(json_object_get(sh, "backward_compute"), "%.1f", 100, b[4], sizeof b[4]),
                hl_fmt(json_object_get(sh, "exposed_comm"), "%.1f", 100, b[5], sizeof b[5]),
                hl_fmt(json_object_get(sh, "optimizer"), "%.1f", 100, b[6], sizeof b[6]),
                hl_fmt(json_object_get(sh, "other"), "%.1f", 100, b[7], sizeof b[7]),
                hl_fmt(json_object_get(row, "bytes_per_step"), "%.0f", 1, b[8], sizeof b[8]),
                hl_fmt(json_object_get(src, "comm_span_ms"), "%.2f", 1, b[9], sizeof b[9]),
                hl_fmt(json_is_object(sd) ? json_object_get(sd, "algbw_gb_per_s")
                                          : json_object_get(row, "effective_gb_per_s"),
                       "%.3f", 1, b[10], sizeof b[10]),
                hl_fmt(json_object_get(sd, "busbw_gb_per_s"), "%.3f", 1, b[12], sizeof b[12]),
                hl_fmt(json_object_get(sd, "first_step_ms"), "%.2f", 1, b[13], sizeof b[13]));
    }
    json_t *all = json_array_get(rows, json_array_size(rows) - 1);
    json_t *sd = json_object_get(all, "steady");
    json_t *ci = json_object_get(sd, "step_p50_ci95");
    if (json_is_array(ci) && json_is_number(json_array_get(ci, 0)))
        fprintf(out, "step p50 (all) 95%% interval [%.2f, %.2f] ms, samples/s [%.1f, %.1f] (%s, blocks of %lld "
                     "step(s))\n",
                json_number_value(json_array_get(ci, 0)), json_number_value(json_array_get(ci, 1)),
                json_number_value(json_array_get(json_object_get(sd, "samples_per_s_ci95"), 0)),
                json_number_value(json_array_get(json_object_get(sd, "samples_per_s_ci95"), 1)),
                json_string_value(json_object_get(sd, "ci_method")),
                (long long)json_integer_value(json_object_get(sd, "ci_block_steps")));
    if (json_is_true(json_object_get(sd, "few_steps")))
        fprintf(out, "few steps (n=%lld): fewer than %d steady-state steps per trainer; the figures are a small "
                     "sample (--steps 50 or more)\n",
                (long long)json_integer_value(json_object_get(sd, "n")), HEADLINE_FEW_STEPS);
    json_t *src = json_object_get(json_array_get(rows, 0), "bytes_source");
    if (json_is_string(src))
        fprintf(out, "bytes/step: %s (%s)\n", json_string_value(src),
                strcmp(json_string_value(src), "server traffic") == 0
                    ? "every message to and from the servers, per trainer and batch"
                    : "the gradient payload a trainer hands its hook per step, in the type it travels in (fp32, or "
                      "--compress's); the reduced result comes back the same size; not the wire's bytes");
    json_t *wm = json_object_get(all, "wire_bytes_model");
    if (json_is_string(wm))
        fprintf(out, "wire: %.0f bytes per step and trainer (%s); GB/s: algbw, the payload over the comm span; "
                     "busbw: algbw x the hook's bus factor (docs/results.md)\n",
                json_number_value(json_object_get(all, "wire_bytes_per_step")), json_string_value(wm));
}
