/* results.c — what a finished run leaves behind: the run's headline
 * (headline.c) and, unless --tables none, the processed-metrics tables on
 * stdout (the seed's ProcessedMetricsPrinter: combined, then per rank) and,
 * with --out DIR, results.json and one CSV per group (server.csv only for a
 * job with servers), each row ending in the job's configuration. With
 * --runs other than 1, each run also prints a one-line summary and writes
 * into DIR/run-NNN/ (results.json then says which run it was). */
#include "master/hoststate.h"
#include "master/headline.h"
#include "master/master.h"
#include "master/mparams.h"
#include "master/mtrace.h"
#include "master/snapshot.h"
#include "master/summary.h"
#include "shared/hostinfo.h"
#include "shared/text.h"
#include "shared/atomicfile.h"
#include "shared/log.h"
#include "shared/userpath.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the DDP + RPC benchmark's table (the seed's benchmark_ddp_rpc.py) ---- */

#define RESULTS_EPOCH_METRIC "epoch_metric,epoch"

/* The pass the run's metrics are from, as the tables and results.json name
 * it ("timed", "warm-up"), or NULL before any pass began. A failed run's
 * figures may be the warm-up's: the metrics are reset only as the timed
 * pass starts. */
static const char *results_pass_name(const master *m)
{
    return m->metrics_pass == PASS_TIMED ? "timed" : m->metrics_pass == PASS_WARMUP ? "warm-up" : NULL;
}

/* Trainer r's samples (bags) per epoch in the timed pass, or -1 where not
 * known: the figures are not the timed pass's, or the trainer did not
 * finish it (a failed run). Never 0 in place of unknown: 0 samples/s
 * would read as a result. */
static double results_samples_per_epoch(const master *m, uint32_t r)
{
    const node *n = m->trainers[r];
    if (m->metrics_pass != PASS_TIMED || !n || !n->timed_result)
        return -1;
    json_t *s = json_object_get(n->timed_result, "bags");
    json_t *e = json_object_get(n->timed_result, "epochs");
    if (!json_is_integer(s) || !json_is_integer(e) || json_integer_value(e) <= 0)
        return -1;
    return (double)json_integer_value(s) / (double)json_integer_value(e);
}

static const char *const results_pct[] = {"p50", "p75", "p90", "p95"};

/* How the trainers used the servers (trainer/hybrid.h), in words. */
static const char *results_pattern_words(const char *pattern)
{
    return pattern && strcmp(pattern, "psbench") == 0
               ? "psbench's: lookups to every server at once, updates unanswered, a step per named row"
               : "PyTorch's benchmark's: lookups one server at a time, every update awaited, dense table gradients";
}

/* The servers' traffic in the timed pass (their `calls`, counted since the
 * reset that began it): each server's as reported, and per trainer and
 * batch, all servers together — frames and bytes of each message type and
 * in all. NULL when no server reported any. */
static json_t *results_traffic(const master *m)
{
    static const char *const types[] = {"lookup", "rows", "update", "updated"};
    json_t *servers = json_object();
    double frames[4] = {0}, bytes[4] = {0};
    bool any = false;
    for (uint32_t r = 0; servers && r < m->set.nserver; r++) {
        const node *sv = m->servers[r];
        if (!sv || !sv->calls)
            continue;
        any = true;
        char key[24];
        snprintf(key, sizeof key, "%u", r);
        json_object_set(servers, key, sv->calls);
        for (int t = 0; t < 4; t++) {
            json_t *c = json_object_get(sv->calls, types[t]);
            frames[t] += (double)json_integer_value(json_object_get(c, "frames"));
            bytes[t] += (double)json_integer_value(json_object_get(c, "bytes"));
        }
    }
    if (!any) {
        json_decref(servers);
        return NULL;
    }
    double batches = (double)m->set.ntrainer * (double)m->set.batches_per_pass;
    json_t *per = json_object();
    double all_frames = 0, all_bytes = 0;
    for (int t = 0; per && t < 4; t++) {
        json_object_set_new(per, types[t], json_pack("{s:f, s:f}", "frames", batches > 0 ? frames[t] / batches : 0.0,
                                                     "bytes", batches > 0 ? bytes[t] / batches : 0.0));
        all_frames += frames[t];
        all_bytes += bytes[t];
    }
    if (per)
        json_object_set_new(per, "all", json_pack("{s:f, s:f}", "frames", batches > 0 ? all_frames / batches : 0.0,
                                                  "bytes", batches > 0 ? all_bytes / batches : 0.0));
    return json_pack("{s:o, s:o}", "servers", servers, "per_trainer_batch", per);
}

/* One row per trainer and one for all: p50, p75, p90 and p95 of seconds per
 * epoch, and the samples per second at each (a trainer's mean samples per
 * epoch over that time; for all, every trainer's together; null where not
 * known); then each server's rows touched, the trainers' rpc_pattern and
 * the servers' traffic: {"pass": "timed" | "warm-up" | null, "epochs":
 * [rows], "rows_touched": {rank: n}, "rpc_pattern", "traffic":
 * results_traffic's or null}. */
static json_t *results_ddp_rpc(const master *m, const snap_stat *st, size_t n)
{
    json_t *rows = json_array();
    double all_samples = 0;
    for (uint32_t r = 0; r < m->set.ntrainer && all_samples >= 0; r++) {
        double s = results_samples_per_epoch(m, r);
        all_samples = s < 0 ? -1 : all_samples + s;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(st[i].role, "trainer") != 0 || strcmp(st[i].metric, RESULTS_EPOCH_METRIC) != 0)
            continue;
        const stats_summary *s = &st[i].s;
        double samples = st[i].rank < 0 ? all_samples
                         : st[i].rank < m->set.ntrainer ? results_samples_per_epoch(m, (uint32_t)st[i].rank)
                                                        : -1;
        double v[4] = {s->p50 / 1e3, s->p75 / 1e3, s->p90 / 1e3, s->p95 / 1e3};
        char who[24];
        if (st[i].rank < 0)
            snprintf(who, sizeof who, "all");
        else
            snprintf(who, sizeof who, "%lld", (long long)st[i].rank);
        json_t *row = json_pack("{s:s}", "trainer", who);
        for (int k = 0; k < 4; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_s_per_epoch", results_pct[k]);
            json_object_set_new(row, key, json_real(v[k]));
            snprintf(key, sizeof key, "%s_samples_per_s", results_pct[k]);
            json_object_set_new(row, key, samples >= 0 && v[k] > 0 ? json_real(samples / v[k]) : json_null());
        }
        json_array_append_new(rows, row);
    }
    json_t *touched = json_object();
    for (uint32_t r = 0; r < m->set.nserver; r++) {
        const node *sv = m->servers[r];
        char key[24];
        snprintf(key, sizeof key, "%u", r);
        json_object_set_new(touched, key, sv && sv->rows_touched >= 0 ? json_integer(node_rows_touched(sv)) : json_null());
    }
    json_t *traffic = results_traffic(m);
    const char *pass = results_pass_name(m);
    return json_pack("{s:o, s:o, s:o, s:s, s:o}", "pass", pass ? json_string(pass) : json_null(), "epochs", rows,
                     "rows_touched", touched, "rpc_pattern", m->set.rpc_pattern ? m->set.rpc_pattern : "seed",
                     "traffic", traffic ? traffic : json_null());
}

/* The seed's table, from what results_ddp_rpc computed; "-" for samples
 * per second not known. */
static void results_print_ddp_rpc(const json_t *d, bool failed, FILE *out)
{
    const char *pattern = json_string_value(json_object_get(d, "rpc_pattern"));
    const char *pass = json_string_value(json_object_get(d, "pass"));
    bool timed = pass && strcmp(pass, "timed") == 0;
    if (json_array_size(json_object_get(d, "epochs")) == 0) {
        /* No epoch was timed (the run failed before or during its timed
         * pass): a header without rows would read as a result. */
        fprintf(out, "\nDDP + RPC benchmark: no epoch of the timed pass completed (rpc_pattern %s)\n", pattern);
        return;
    }
    if (timed)
        fprintf(out, "\nDDP + RPC benchmark (timed pass%s, rpc_pattern %s): seconds per epoch, samples per second\n",
                failed ? ", cut short: the run failed" : "", pattern);
    else /* epochs were timed, so a pass began: the warm-up */
        fprintf(out,
                "\nDDP + RPC benchmark (%s pass: the run failed before its timed pass, rpc_pattern %s): seconds per "
                "epoch, samples per second (-: not known)\n",
                pass ? pass : "warm-up", pattern);
    fprintf(out, "rpc_pattern %s: %s\n", pattern, results_pattern_words(pattern));
    fprintf(out, "%-8s", "trainer");
    for (int k = 0; k < 4; k++)
        fprintf(out, " %10s %12s", results_pct[k], "samples/s");
    fprintf(out, "\n");
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(d, "epochs"), i, row) {
        fprintf(out, "%-8s", json_string_value(json_object_get(row, "trainer")));
        for (int k = 0; k < 4; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_s_per_epoch", results_pct[k]);
            fprintf(out, " %10.4f", json_real_value(json_object_get(row, key)));
            snprintf(key, sizeof key, "%s_samples_per_s", results_pct[k]);
            json_t *sps = json_object_get(row, key);
            if (json_is_number(sps))
                fprintf(out, " %12.1f", json_number_value(sps));
            else
                fprintf(out, " %12s", "-");
        }
        fprintf(out, "\n");
    }
    fprintf(out, "embedding rows touched by updates, per server:");
    const char *rank;
    json_t *v;
    json_object_foreach((json_t *)json_object_get(d, "rows_touched"), rank, v)
        fprintf(out, " %s: %lld", rank, (long long)json_integer_value(v));
    fprintf(out, "\n");
    json_t *per = json_object_get(json_object_get(d, "traffic"), "per_trainer_batch");
    if (per) {
        fprintf(out, "traffic per trainer and batch, all servers (rpc_pattern %s):", pattern);
        const char *type;
        json_t *t;
        json_object_foreach(per, type, t)
            fprintf(out, " %s %.2f frames %.0f bytes%s", type, json_number_value(json_object_get(t, "frames")),
                    json_number_value(json_object_get(t, "bytes")), strcmp(type, "all") == 0 ? "" : ",");
        fprintf(out, "\n");
    }
}

void results_divergence_line(const node *n, char *buf, size_t len)
{
    json_t *d = n->diverged, *l = json_object_get(d, "loss");
    const char *pass = json_string_value(json_object_get(d, "pass"));
    char loss[64];
    if (json_is_string(l))
        snprintf(loss, sizeof loss, "%s", json_string_value(l));
    else
        snprintf(loss, sizeof loss, "%g", json_number_value(l));
    snprintf(buf, len, "trainer %u (%s): loss diverged at epoch %lld, batch %lld%s%s%s (loss = %s); the run went on "
             "(--allow-divergence)", n->rank, n->host, (long long)json_integer_value(json_object_get(d, "epoch")),
             (long long)json_integer_value(json_object_get(d, "batch")), pass ? " of the " : "", pass ? pass : "",
             pass ? " pass" : "", loss);
}

/* The run's warnings, trainer by trainer: a BLAS running kernels below
 * what its CPU can (its environment's blas.warning: figures that may not
 * be this host's best), and a loss that diverged while the job allowed it
 * (--allow-divergence; without it a divergence fails the run and its
 * error says so). */
/* A steal share above this is a busy host (a few percent: the CPUs the
 * run measured were partly someone else's). */
#define RESULTS_STEAL_BUSY 0.05

void results_load_mark(master *m, run_state pass, bool start)
{
    if (pass != RUN_WARMUP && pass != RUN_TIMED)
        return;
    if (pass == RUN_TIMED)
        hoststate_mark(m, start); /* every host's state over the timed pass (hoststate.h) */
    if (!m->host_load && !(m->host_load = json_object()))
        return; /* out of memory: no load recorded */
    const char *key = pass == RUN_TIMED ? "timed" : "warm-up";
    json_t *p = json_object_get(m->host_load, key);
    if (!p) {
        p = json_pack("{s:n, s:n, s:n, s:b}", "start", "end", "steal_share", "busy", 0);
        if (!p || json_object_set_new(m->host_load, key, p) < 0)
            return; /* set_new dropped p */
    }
    json_t *now = hostinfo_load();
    if (!p || !now) {
        json_decref(now);
        return;
    }
    json_object_set_new(p, start ? "start" : "end", now);
    if (!start) {
        double steal = hostinfo_steal_share(json_object_get(p, "start"), now);
        json_object_set_new(p, "steal_share", isfinite(steal) ? json_real(steal) : json_null());
    }
    /* Busy: a load average (1 min) above the CPUs at either end, or the
     * steal over the pass above a few percent. */
    bool busy = false;
    const char *ends[2] = {"start", "end"};
    for (int i = 0; i < 2; i++) {
        json_t *r = json_object_get(p, ends[i]);
        json_t *l = json_array_get(json_object_get(r, "loadavg"), 0);
        json_int_t cpus = json_integer_value(json_object_get(r, "cpus"));
        busy = busy || (json_is_number(l) && cpus > 0 && json_number_value(l) > (double)cpus);
    }
    json_t *st = json_object_get(p, "steal_share");
    busy = busy || (json_is_number(st) && json_number_value(st) > RESULTS_STEAL_BUSY);
    json_object_set_new(p, "busy", json_boolean(busy));
}

/* A busy host's warning for a pass (results_load_mark), into w. */
static void results_load_warning(const json_t *p, const char *pass, json_t *w)
{
    if (!json_is_true(json_object_get(p, "busy")))
        return;
    char line[512], loads[128] = "";
    const char *ends[2] = {"start", "end"};
    json_int_t cpus = 0;
    for (int i = 0; i < 2; i++) {
        json_t *r = json_object_get(p, ends[i]);
        json_t *l = json_array_get(json_object_get(r, "loadavg"), 0);
        if (json_is_number(l)) {
            size_t n = strlen(loads);
            snprintf(loads + n, sizeof loads - n, "%s%.2f at its %s", n ? ", " : "", json_number_value(l), ends[i]);
            cpus = json_integer_value(json_object_get(r, "cpus"));
        }
    }
    json_t *st = json_object_get(p, "steal_share");
    char steal[64] = "not known";
    if (json_is_number(st))
        snprintf(steal, sizeof steal, "%.1f%%", 100 * json_number_value(st));
    snprintf(line, sizeof line, "the master's host was busy during the %s pass (load average %s, over %lld CPUs; "
             "CPU steal %s): its figures may be noise", pass, loads[0] ? loads : "not known", (long long)cpus, steal);
    json_array_append_new(w, json_string(line));
}

static json_t *results_warnings(const master *m)
{
    json_t *w = json_array();
    if (w && m->host_load) {
        results_load_warning(json_object_get(m->host_load, "warm-up"), "warm-up", w);
        results_load_warning(json_object_get(m->host_load, "timed"), "timed", w);
    }
    /* Every host's: busy during the timed pass, oversubscribed (issue 38). */
    json_t *hs = w ? hoststate_json(m) : NULL;
    json_array_extend(w, json_object_get(hs, "warnings"));
    json_decref(hs);
    for (uint32_t r = 0; w && r < m->set.ntrainer; r++) {
        const node *n = m->trainers[r];
        if (!n)
            continue;
        const char *blas = json_string_value(json_object_get(json_object_get(n->environment, "blas"), "warning"));
        char line[768];
        if (blas) {
            char shown[400]; /* the trainer's words, printed after the tables: escaped */
            text_escape(blas, shown, sizeof shown);
            snprintf(line, sizeof line, "trainer %u (%s): %s", r, n->host, shown);
            json_array_append_new(w, json_string(line));
        }
        if (n->diverged && m->set.allow_divergence) {
            results_divergence_line(n, line, sizeof line);
            json_array_append_new(w, json_string(line));
        }
    }
    return w;
}

/* Which trainers' metrics a GPU timed, after the tables: one line per
 * distinct list, with its ranks ("GPU-timed (CUDA events on the
 * trainer's stream) on trainers 0, 1: forward_metric,forward_pass ...");
 * nothing when none (CPU trainers). */
static void results_print_gpu_timed(const master *m, FILE *out)
{
    for (uint32_t r = 0; r < m->set.ntrainer; r++) {
        const node *n = m->trainers[r];
        if (!n || !n->gpu_timed || json_array_size(n->gpu_timed) == 0)
            continue;
        bool seen = false;
        for (uint32_t q = 0; q < r && !seen; q++)
            seen = m->trainers[q] && m->trainers[q]->gpu_timed && json_equal(m->trainers[q]->gpu_timed, n->gpu_timed);
        if (seen)
            continue;
        fprintf(out, "GPU-timed (CUDA events on the trainer's stream) on trainers");
        const char *sep = " ";
        for (uint32_t q = r; q < m->set.ntrainer; q++) {
            if (m->trainers[q] && m->trainers[q]->gpu_timed && json_equal(m->trainers[q]->gpu_timed, n->gpu_timed)) {
                fprintf(out, "%s%u", sep, q);
                sep = ", ";
            }
        }
        fprintf(out, ":");
        size_t i;
        json_t *k;
        json_array_foreach(n->gpu_timed, i, k)
            fprintf(out, " %s", json_string_value(k));
        fprintf(out, "\n");
    }
}

/* Steps kept per trainer in results.json's steady_state: enough for any
 * interval, and a bound on the file (about 2 MB a trainer). */
#define RESULTS_MAX_STEADY_STEPS 100000u

/* {"metric": "batch_level_metric,batch_all", "unit": "ms", "max_steps",
 * "trainers": [{"rank", "first_step_ms", "n", "steps_ms": [...]}]}: each
 * trainer's steps of the pass after its first, in order (the first
 * RESULTS_MAX_STEADY_STEPS; n counts them all). */
static json_t *results_steady_state(const master *m)
{
    json_t *list = json_array();
    for (uint32_t r = 0; list && r < m->set.ntrainer; r++) {
        const stats *s = agg_find(&m->agg, AGG_TRAINER, r, "batch_level_metric,batch_all");
        if (!s || s->nsamples == 0)
            continue;
        json_t *steps = json_array();
        for (size_t i = 1; steps && i < s->nsamples && i <= RESULTS_MAX_STEADY_STEPS; i++)
            json_array_append_new(steps, json_real(s->samples[i]));
        json_array_append_new(list, json_pack("{s:I, s:f, s:I, s:o}", "rank", (json_int_t)r, "first_step_ms",
                                              s->samples[0], "n", (json_int_t)(s->count - 1), "steps_ms",
                                              steps ? steps : json_array()));
    }
    return json_pack("{s:s, s:s, s:I, s:o}", "metric", "batch_level_metric,batch_all", "unit", "ms", "max_steps",
                     (json_int_t)RESULTS_MAX_STEADY_STEPS, "trainers", list ? list : json_array());
}

void results_print(master *m)
{
    printf("\npsbench run %s%s%s\n", m->state == RUN_DONE ? "done" : "failed", m->error[0] ? ": " : "",
           m->error);
    /* A failed run's figures: which pass, before any of them. */
    const char *pass = results_pass_name(m);
    if (m->state != RUN_DONE && pass)
        printf("the figures below are the %s pass's%s\n", pass,
               m->metrics_pass == PASS_WARMUP ? " (the run failed before its timed pass)" : ", up to the failure");
    /* The headline first: the answer without the tables (--tables none,
     * --log-level warn) and above them with. */
    size_t nh = 0;
    snap_stat *hst = agg_snapshot(&m->agg, true, &nh);
    json_t *h = hst ? headline_json(m, hst, nh, true) : NULL;
    if (h)
        headline_print(h, stdout);
    /* A series keeps each done run's headline for its summary: the last
     * SUMMARY_MAX_RUNS of them, so that a series until stopped (--runs 0)
     * does not grow the master without bound. */
    if (h && m->set.runs != 1 && m->state == RUN_DONE && m->metrics_pass == PASS_TIMED) {
        if (!m->run_headlines)
            m->run_headlines = summary_runs_new();
        if (m->run_headlines && summary_runs_add(m->run_headlines, h) < 0)
            log_warn("out of memory: run %u is left out of the series' summary", m->run);
    }
    json_decref(h);
    free(hst);
    if (m->set.tables) {
        agg_print_tables(&m->agg, stdout);
        results_print_gpu_timed(m, stdout);
    }
    json_t *warnings = results_warnings(m);
    size_t i;
    json_t *w;
    json_array_foreach(warnings, i, w)
        printf("warning: %s\n", json_string_value(w));
    json_decref(warnings);
    if (m->set.embedding) {
        size_t ns = 0;
        snap_stat *st = agg_snapshot(&m->agg, true, &ns);
        json_t *d = st ? results_ddp_rpc(m, st, ns) : NULL;
        if (d)
            results_print_ddp_rpc(d, m->state != RUN_DONE, stdout);
        json_decref(d);
        free(st);
    }
    if (m->set.runs != 1) {
        char of[32] = "";
        if (m->set.runs)
            snprintf(of, sizeof of, "/%u", m->set.runs);
        if (m->state == RUN_DONE)
            printf("run %u%s done: %u trainer(s) x %" PRIu64 " batches, timed pass %.3f s\n", m->run, of,
                   m->set.ntrainer, m->set.batches_per_pass, m->training_s);
        else
            printf("run %u%s failed: %s\n", m->run, of, m->error);
    }
    fflush(stdout);
}

/* Where this run's files go: --out DIR, or DIR/run-NNN with --runs other than 1. */
static void results_dir(const master *m, char *buf, size_t len)
{
    if (m->set.runs == 1)
        snprintf(buf, len, "%s", m->set.out_dir);
    else
        snprintf(buf, len, "%s/run-%03u", m->set.out_dir, m->run);
}

/* The master's own host (shared/hostinfo.h) and when the run ended. */
/* The launcher psbench-node read this rank's place from (extension,
 * issue 40; docs/results.md): its $PSBENCH_LAUNCHER, a JSON object, or
 * null when the master was not started by psbench-node. A value that is
 * not an object is not the master's to trust: null, and a warning. */
static json_t *results_launcher(void)
{
    const char *env = getenv("PSBENCH_LAUNCHER");
    if (!env || !*env)
        return json_null();
    json_error_t je;
    json_t *o = json_loads(env, 0, &je);
    if (json_is_object(o))
        return o;
    json_decref(o);
    log_warn("PSBENCH_LAUNCHER is not a JSON object (%s): results.json's launcher is null", je.text);
    return json_null();
}

static json_t *results_environment(void)
{
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_t *env = hostinfo_json();
    if (env)
        json_object_set_new(env, "finished_at", json_string(when));
    return env ? env : json_object();
}

/* One node's entry: rank, host, device, and what it computes with as it
 * registered ("environment"), when it did. */
static json_t *results_node(uint32_t rank, const node *n)
{
    json_t *o = json_pack("{s:I, s:s, s:s}", "rank", (json_int_t)rank, "host", n ? n->host : "", "device",
                          n ? n->device : "");
    if (o && n && n->environment)
        json_object_set(o, "environment", n->environment);
    return o;
}

/* A CSV text field: quoted, with its quotes doubled, where it holds a
 * comma, a quote or a line break (the configuration files' ids are the
 * user's). */
static void results_csv_text(FILE *f, const char *s)
{
    fputc(',', f);
    text_csv_field(f, s);
}

/* The configuration columns every row ends with (master_settings.csv_config):
 * the same names and values as a sweep's sweep.csv, so that the CSVs of
 * several jobs or runs concatenate into one table. */
#define RESULTS_CSV_CONFIG_HEADER "hook,trainer,model,ntrainer,nserver,bucket_cap_mb,device,transport,run"

static void results_csv_config(FILE *f, const master *m)
{
    results_csv_text(f, m->set.csv_config.hook);
    results_csv_text(f, m->set.csv_config.trainer);
    results_csv_text(f, m->set.csv_config.model);
    fprintf(f, ",%u,%u,", m->set.ntrainer, m->set.nserver);
    if (isfinite(m->set.csv_config.bucket_cap_mb)) /* empty: the trainer class has no buckets */
        fprintf(f, "%.15g", m->set.csv_config.bucket_cap_mb);
    results_csv_text(f, m->set.csv_config.device);
    results_csv_text(f, m->set.csv_config.transport);
    fprintf(f, ",%u\n", m->run);
}

/* One group's CSV: built in memory, then written whole (afile_write). The
 * statistics' columns first, as they always were, then the configuration's. */
static int results_csv(const master *m, const char *dir, const snap_stat *st, size_t n, const char *role,
                       char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.csv", dir, role);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        snprintf(err, errlen, "cannot write %s: out of memory", path);
        return -1;
    }
    fprintf(f, "rank,metric,count,min,max,mean,variance,stdev,p50,p75,p90,p95,p99," RESULTS_CSV_CONFIG_HEADER "\n");
    for (size_t i = 0; i < n; i++) {
        if (strcmp(st[i].role, role) != 0)
            continue;
        const stats_summary *s = &st[i].s;
        char rank[24];
        if (st[i].rank < 0)
            snprintf(rank, sizeof rank, "all");
        else
            snprintf(rank, sizeof rank, "%lld", (long long)st[i].rank);
        /* Metric names hold a comma: quote the field. */
        fprintf(f, "%s,\"%s\",%llu,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f", rank, st[i].metric,
                (unsigned long long)s->count, s->min, s->max, s->mean, s->variance, s->stdev, s->p50, s->p75,
                s->p90, s->p95, s->p99);
        results_csv_config(f, m);
    }
    return afile_write_memstream(path, f, &text, &len, err, errlen);
}

/* A file of an earlier job in a run's folder that this run does not
 * write: removed, so that the folder holds one job's files. Not there is
 * fine; a failure only warns (the run's own files are written). */
static void results_remove_stale(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) < 0 && errno != ENOENT)
        log_warn("cannot remove %s, an earlier job's (this job has no servers): %s", path, strerror(errno));
}

/* The files of one run, in the order results_write writes them. */
static const char *const results_files[] = {"results.json", "trainer.csv", "server.csv", MPARAMS_FILE};

/* Make dir (a run's folder under --out) and check its files can be
 * written; errors start "--out OUT: ". */
static int results_prepare_dir(const char *out, const char *dir, char *err, size_t errlen)
{
    char why[4400];
    if (userpath_make_dir(dir, why, sizeof why) < 0) {
        snprintf(err, errlen, "--out %s: %s", out, why);
        return -1;
    }
    for (size_t i = 0; i < sizeof results_files / sizeof results_files[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, results_files[i]);
        if (userpath_check_out_file(path, why, sizeof why) < 0) {
            snprintf(err, errlen, "--out %s: %s", out, why);
            return -1;
        }
    }
    return 0;
}

int results_check_out(const char *out_dir, uint32_t runs, char *err, size_t errlen)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, runs == 1 ? "%s" : "%s/run-001", out_dir) >= (int)sizeof dir) {
        snprintf(err, errlen, "--out: path too long");
        return -1;
    }
    return results_prepare_dir(out_dir, dir, err, errlen);
}

/* results.json's "trainers": each one's register, its timed pass's
 * result and what it reported besides. */
static json_t *results_trainers(master *m)
{
    json_t *trainers = json_array();
    for (uint32_t r = 0; r < m->set.ntrainer; r++) {
        node *n = m->trainers[r];
        json_t *t = results_node(r, n);
        if (t && n && n->timed_result)
            json_object_update(t, n->timed_result);
        /* The warm-up pass's loss and digest (null: none reported). */
        json_object_set_new(t, "warmup", n && n->warmup_result ? json_incref(n->warmup_result) : json_null());
        json_object_set_new(t, "diverged", n && n->diverged ? json_incref(n->diverged) : json_null());
        /* Its links to servers and how each travels (shared memory or
         * TCP, and why TCP where shared memory was tried): [] without. */
        json_object_set_new(t, "links", n && n->links ? json_deep_copy(n->links) : json_array());
        /* The metrics its GPU timed (extension): [] for a CPU trainer. */
        json_object_set_new(t, "gpu_timed", n && n->gpu_timed ? json_deep_copy(n->gpu_timed) : json_array());
        json_array_append_new(trainers, t);
    }
    return trainers;
}

/* results.json's extensions to the seed's document (docs/results.md),
 * into doc: the DDP + RPC figures, the headline, the steady-state steps,
 * the pass, the hosts' load and state, the timings, the launcher, the
 * run of a series. st: the metrics' snapshot (ns entries), or NULL. */
static void results_extensions(master *m, json_t *doc, const snap_stat *st, size_t ns)
{
    if (m->set.embedding && st)
        json_object_set_new(doc, "ddp_rpc", results_ddp_rpc(m, st, ns));
    /* The run's headline (extension, headline.h; docs/http-api.md). */
    if (st)
        json_object_set_new(doc, "headline", headline_json(m, st, ns, true));
    /* Each trainer's steady-state steps in order (extension, issue 38):
     * what a sweep's intervals and verdicts resample. */
    json_object_set_new(doc, "steady_state", results_steady_state(m));
    /* Which pass the groups' figures are from (extension): "timed", or
     * "warm-up" when the run failed before its timed pass; null when none
     * began. */
    const char *pass = results_pass_name(m);
    json_object_set_new(doc, "metrics_pass", pass ? json_string(pass) : json_null());
    /* The master host's load at each pass's start and end (extension;
     * results_load_mark): {} when no pass began. */
    json_object_set_new(doc, "host_load", m->host_load ? json_deep_copy(m->host_load) : json_object());
    /* Every host that took part: busy, oversubscribed (extension, issue 38;
     * hoststate.h). */
    json_object_set_new(doc, "host_state", hoststate_json(m));
    /* The timed pass's duration ("Time spent training"), once it ended. */
    if (m->training_s > 0)
        json_object_set_new(doc, "training_seconds", json_real(m->training_s));
    json_object_set_new(doc, "launcher", results_launcher());
    if (m->set.runs != 1) {
        json_object_set_new(doc, "run", json_integer(m->run));
        json_object_set_new(doc, "runs", json_integer(m->set.runs));
    }
}

int results_write(master *m, char *err, size_t errlen)
{
    if (!m->set.out_dir)
        return 0;
    char dir[4096];
    results_dir(m, dir, sizeof dir);
    /* The folder (a later run's is new); the files were checked at start
     * (results_check_out), and a write's own error says more now. */
    char why[4400];
    if (userpath_make_dir(dir, why, sizeof why) < 0) {
        snprintf(err, errlen, "--out %s: %s", m->set.out_dir, why);
        return -1;
    }
    size_t ns = 0;
    snap_stat *st = agg_snapshot(&m->agg, true, &ns);
    snapshot_input in = {0};
    in.stats = st;
    in.nstats = st ? ns : 0;
    json_t *trainers = results_trainers(m), *servers = json_array();
    for (uint32_t r = 0; r < m->set.nserver; r++)
        json_array_append_new(servers, results_node(r, m->servers[r]));
    json_t *doc = json_pack("{s:O, s:o, s:s, s:o, s:o, s:o, s:o, s:o}", "configuration",
                            m->set.config_json ? m->set.config_json : json_null(), "environment",
                            results_environment(), "phase", m->state == RUN_DONE ? "done" : "failed", "error",
                            m->error[0] ? json_string(m->error) : json_null(), "groups",
                            (json_t *)snapshot_groups_json(&in), "trainers", trainers, "servers", servers,
                            "warnings", results_warnings(m));
    if (doc)
        results_extensions(m, doc, st, ns);
    char path[4200];
    /* params.bin before the results.json that names it (mparams.h) */
    if (doc && mparams_write(m, dir, doc, err, errlen) < 0) {
        json_decref(doc);
        free(st);
        return -1;
    }
    snprintf(path, sizeof path, "%s/results.json", dir);
    /* Whole files or none: a full disk keeps the old complete file. */
    int rc = afile_write_json(path, doc, JSON_INDENT(2), err, errlen);
    json_decref(doc);
    if (rc == 0)
        rc = results_csv(m, dir, st, in.nstats, "trainer", err, errlen);
    /* A job without servers has no server.csv (an empty one would read as
     * servers that recorded nothing); one left in DIR by an earlier job with
     * servers would pass for this job's, so it goes. */
    bool with_servers = m->set.nserver > 0;
    if (rc == 0 && with_servers)
        rc = results_csv(m, dir, st, in.nstats, "server", err, errlen);
    else if (rc == 0)
        results_remove_stale(dir, "server.csv");
    free(st);
    if (rc == 0)
        log_info("wrote %s/results.json, trainer.csv%s", dir, with_servers ? ", server.csv" : "");
    if (rc == 0)
        rc = mtrace_write(m, dir, err, errlen); /* --trace: trace.json beside them */
    return rc;
}

void results_summary(master *m)
{
    if (m->set.runs == 1 || summary_runs_count(m->run_headlines) == 0)
        return;
    json_t *s = summary_runs_json(m->run_headlines);
    if (!s)
        return;
    summary_print(s, stdout);
    fflush(stdout);
    if (m->set.out_dir) {
        char path[4200], err[4400];
        snprintf(path, sizeof path, "%s/summary.json", m->set.out_dir);
        if (afile_write_json(path, s, JSON_INDENT(2), err, sizeof err) < 0)
            log_error("%s", err);
        else
            log_info("wrote %s", path);
    }
    json_decref(s);
}
