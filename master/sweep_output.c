/* sweep_output.c — what a sweep says: each point's results read back and
 * summed up, parameter-server points paired with their allreduce
 * partners, the table's rows and the answer, sweep.json and sweep.csv
 * (master/sweep_int.h). */
#include "master/sweep_int.h"

#include "master/summary.h"
#include "master/sweep_report.h"
#include "shared/atomicfile.h"
#include "shared/text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sweep_now_iso(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}


/* ---- a point's results ----------------------------------------------------------- */

/* The "all" trainer entry of a results.json's headline, with
 * exposed_comm_ms added (the exposed share of the mean step), or NULL. */
static json_t *sweep_run_headline(const json_t *results)
{
    json_t *rows = json_object_get(json_object_get(results, "headline"), "trainers");
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        if (!json_is_string(json_object_get(row, "trainer")) ||
            strcmp(json_string_value(json_object_get(row, "trainer")), "all") != 0)
            continue;
        json_t *h = json_deep_copy(row);
        json_t *step = json_object_get(json_object_get(json_object_get(json_object_get(results, "groups"), "trainer"),
                                                       "all"),
                                       "batch_level_metric,batch_all");
        json_t *share = json_object_get(json_object_get(h, "shares"), "exposed_comm");
        json_object_set_new(h, "exposed_comm_ms",
                            json_is_number(share) && json_is_number(json_object_get(step, "mean"))
                                ? json_real(json_number_value(share) * json_number_value(json_object_get(step, "mean")))
                                : json_null());
        return h;
    }
    return NULL;
}

/* The trainers' buckets per step (after DDP's rebuild), or -1. */
static json_int_t sweep_buckets(const json_t *results)
{
    json_t *b = json_object_get(json_object_get(json_array_get(json_object_get(results, "trainers"), 0), "buckets"),
                                "rebuilt");
    if (!json_is_array(b) || json_array_size(b) == 0)
        b = json_object_get(json_object_get(json_array_get(json_object_get(results, "trainers"), 0), "buckets"),
                            "first_iteration");
    return json_is_array(b) ? (json_int_t)json_array_size(b) : -1;
}

/* {master, trainers: [{rank, host, device, environment}], servers} of a
 * results.json. */
static json_t *sweep_environment(const json_t *results)
{
    json_t *env = json_object();
    json_object_set(env, "master", json_object_get(results, "environment"));
    static const char *const roles[] = {"trainers", "servers"};
    for (int r = 0; r < 2; r++) {
        json_t *list = json_array(), *node;
        size_t i;
        json_array_foreach(json_object_get(results, roles[r]), i, node) {
            json_array_append_new(list, json_pack("{s:O?, s:O?, s:O?, s:O?}", "rank", json_object_get(node, "rank"),
                                                  "host", json_object_get(node, "host"), "device",
                                                  json_object_get(node, "device"), "environment",
                                                  json_object_get(node, "environment")));
        }
        json_object_set_new(env, roles[r], list);
    }
    return env;
}

static const char *const sweep_figures[] = {"step_p50_ms",   "step_p90_ms",       "samples_per_s",  "bytes_per_step",
                                            "comm_span_ms",  "effective_gb_per_s", "exposed_comm_ms", NULL};
static const char *const sweep_shares[] = {"forward", "backward_compute", "exposed_comm", "optimizer", "other", NULL};

static json_t *sweep_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The point's sweep.json entry (sweep.h), from its runs. */
void sweep_point_doc(sweep_point *p, json_t *env, json_int_t buckets)
{
    size_t n = json_array_size(p->runs);
    double *x = calloc(n ? n : 1, sizeof *x);
    if (!x)
        abort();
    json_t *summary = json_object();
    for (const char *const *f = sweep_figures; *f; f++) {
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_object_get(json_object_get(json_array_get(p->runs, i), "headline"), *f);
            x[i] = json_is_number(v) ? json_number_value(v) : NAN;
        }
        summary_ci ci;
        summary_of(x, n, &ci);
        json_object_set_new(summary, *f,
                            json_pack("{s:I, s:o, s:o, s:o, s:o}", "n", (json_int_t)ci.n, "mean", sweep_num(ci.mean),
                                      "sd", sweep_num(ci.stdev), "ci95_low", sweep_num(ci.ci_low), "ci95_high",
                                      sweep_num(ci.ci_high)));
        if (strcmp(*f, "step_p50_ms") == 0) {
            p->step_mean = ci.n ? ci.mean : NAN;
            p->step_low = ci.ci_low;
            p->step_high = ci.ci_high;
            p->nruns = ci.n;
        }
    }
    json_t *shares = json_object();
    for (const char *const *k = sweep_shares; *k; k++) {
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_object_get(json_object_get(json_object_get(json_array_get(p->runs, i), "headline"),
                                                        "shares"),
                                        *k);
            x[i] = json_is_number(v) ? json_number_value(v) : NAN;
        }
        summary_ci ci;
        summary_of(x, n, &ci);
        json_object_set_new(shares, *k, ci.n ? sweep_num(ci.mean) : json_null());
    }
    free(x);
    static const char *const states[] = {[SP_PLANNED] = "not run", [SP_DONE] = "done", [SP_FAILED] = "failed",
                                         [SP_NOT_RUN] = "not run"};
    p->doc = json_pack("{s:I, s:s, s:s, s:O, s:s, s:s?, s:o, s:O, s:o, s:o, s:o}", "point", (json_int_t)p->index,
                       "dir", p->dir, "label", p->label, "config", p->config, "status", states[p->state], "error",
                       p->error, "buckets", buckets >= 0 ? json_integer(buckets) : json_null(), "runs", p->runs,
                       "summary", summary, "shares", shares, "environment", env ? env : json_null());
}

/* Read the point's results back (each run's results.json). */
void sweep_collect(sweep *s, sweep_point *p)
{
    json_t *env = NULL;
    json_int_t buckets = -1;
    for (unsigned r = 1; r <= s->runs; r++) {
        char path[PATH_MAX];
        if (s->runs == 1)
            snprintf(path, sizeof path, "%s/%s/results.json", s->out_dir, p->dir);
        else
            snprintf(path, sizeof path, "%s/%s/run-%03u/results.json", s->out_dir, p->dir, r);
        json_t *res = json_load_file(path, 0, NULL);
        if (!res)
            break;
        json_t *h = sweep_run_headline(res);
        const char *phase = json_string_value(json_object_get(res, "phase"));
        if (h && phase && strcmp(phase, "done") == 0)
            json_array_append_new(p->runs, json_pack("{s:I, s:o}", "run", (json_int_t)r, "headline", h));
        else
            json_decref(h);
        if (!env) {
            env = sweep_environment(res);
            buckets = sweep_buckets(res);
        }
        json_decref(res);
    }
    if (p->state == SP_DONE && json_array_size(p->runs) < s->runs) {
        p->state = SP_FAILED;
        if (!p->error)
            p->error = sweep_strdup("a run wrote no headline (no trainer reported a step)");
    }
    sweep_point_doc(p, env, buckets);
}

/* ---- PS against allreduce ---------------------------------------------------------- */

/* Same job but for the hook (and the servers it brings)? */
static bool sweep_partners(const sweep_point *ps, const sweep_point *ar)
{
    static const char *const same[] = {"model", "ntrainer", "bucket_cap_mb", "device", "transport", NULL};
    const json_t *hook = json_object_get(ar->config, "hook");
    if (!json_is_true(json_object_get(ps->config, "uses_servers")) ||
        json_is_true(json_object_get(ar->config, "uses_servers")) || !json_is_string(hook) ||
        strcmp(json_string_value(hook), "allreduce_hook") != 0)
        return false;
    for (const char *const *k = same; *k; k++)
        if (!json_equal(json_object_get(ps->config, *k), json_object_get(ar->config, *k)))
            return false;
    return true;
}

/* The comparisons point p completes (both ended done). The ratio of the
 * last one made, NAN if none. */
double sweep_compare(sweep *s, const sweep_point *p)
{
    double ratio = NAN;
    for (size_t j = 0; j < s->npoints; j++) {
        const sweep_point *q = &s->points[j];
        if (q == p || q->state != SP_DONE || p->state != SP_DONE)
            continue;
        const sweep_point *ps = sweep_partners(p, q) ? p : sweep_partners(q, p) ? q : NULL;
        if (!ps)
            continue;
        const sweep_point *ar = ps == p ? q : p;
        if (!isfinite(ps->step_mean) || !isfinite(ar->step_mean) || ar->step_mean <= 0)
            continue;
        ratio = ps->step_mean / ar->step_mean;
        bool known = ps->nruns >= 2 && ar->nruns >= 2;
        bool overlap = known && ps->step_low <= ar->step_high && ar->step_low <= ps->step_high;
        json_array_append_new(s->comparisons,
                              json_pack("{s:I, s:I, s:O, s:f, s:f, s:f, s:s, s:b, s:b}", "ps_point",
                                        (json_int_t)ps->index, "allreduce_point", (json_int_t)ar->index, "ps_hook",
                                        json_object_get(ps->config, "hook"), "ps_step_ms", ps->step_mean,
                                        "allreduce_step_ms", ar->step_mean, "ps_over_allreduce", ratio, "faster",
                                        ratio > 1 ? "allreduce" : "ps", "within_noise", overlap, "noise_known", known));
    }
    return ratio;
}

/* ---- the table -------------------------------------------------------------------- */

/* Column width of dimension d: its name or its longest value. */
static int sweep_width(const sweep *s, int d)
{
    size_t w = strlen(sweep_dims[d].name);
    for (size_t i = 0; i < s->npoints; i++) {
        json_t *v = json_object_get(s->points[i].config, sweep_dims[d].name);
        char buf[256];
        snprintf(buf, sizeof buf, "%s", json_is_string(v) ? json_string_value(v) : "");
        if (json_is_number(v))
            snprintf(buf, sizeof buf, "%g", json_number_value(v));
        if (strlen(buf) > w)
            w = strlen(buf);
    }
    return (int)w;
}

void sweep_print_header(sweep *s)
{
    FILE *o = s->out;
    fprintf(o, "# psbench-master sweep: %zu point(s) x %u run(s), into %s/\n", s->npoints, s->runs, s->out_dir);
    /* What every point shares, once. */
    fprintf(o, "# the same at every point:");
    static const char *const keys[] = {"hook", "trainer", "model", "ntrainer", "nserver", "bucket_cap_mb", "device",
                                       "transport", NULL};
    for (const char *const *k = keys; *k; k++) {
        json_t *v0 = json_object_get(s->points[0].config, *k);
        bool same = true;
        for (size_t i = 1; i < s->npoints && same; i++)
            same = json_equal(v0, json_object_get(s->points[i].config, *k));
        if (!same)
            continue;
        if (json_is_string(v0))
            fprintf(o, " %s %s,", *k, json_string_value(v0));
        else if (json_is_number(v0))
            fprintf(o, " %s %g,", *k, json_number_value(v0));
        else
            fprintf(o, " %s (the configuration's),", *k);
    }
    fprintf(o, " %u run(s) each\n#\n#%6s", s->runs, "point");
    for (int d = 0; d < SD_COUNT; d++)
        if (s->dim[d].n >= 2)
            fprintf(o, "  %*s", s->width[d] = sweep_width(s, d), sweep_dims[d].name);
    fprintf(o, "  %7s  %9s  %9s  %7s  %10s  %8s  %7s  %6s\n", "buckets", "MB/step", "step_ms", "+-95%", "samples/s",
            "exposed%", "GB/s", "PS/AR");
    fflush(o);
}

static double sweep_summary_mean(const sweep_point *p, const char *fig)
{
    json_t *v = json_object_get(json_object_get(json_object_get(p->doc, "summary"), fig), "mean");
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* v in fmt, or "-" where the figure is not known (a workload without it). */
static const char *sweep_fmt(char *buf, size_t len, const char *fmt, double v)
{
    if (!isfinite(v))
        return "-";
    snprintf(buf, len, fmt, v);
    return buf;
}

void sweep_print_row(sweep *s, const sweep_point *p, double ratio)
{
    FILE *o = s->out;
    fprintf(o, " %6u", p->index);
    for (int d = 0; d < SD_COUNT; d++) {
        if (s->dim[d].n < 2)
            continue;
        json_t *v = json_object_get(p->config, sweep_dims[d].name);
        char buf[256];
        snprintf(buf, sizeof buf, "%s", json_is_string(v) ? json_string_value(v) : "-");
        if (json_is_number(v))
            snprintf(buf, sizeof buf, "%g", json_number_value(v));
        fprintf(o, "  %*s", s->width[d], buf);
    }
    if (p->state != SP_DONE) {
        fprintf(o, "  FAILED: %s (%s/%s/master.log)\n", p->error ? p->error : "?", s->out_dir, p->dir);
        fflush(o);
        return;
    }
    json_t *b = json_object_get(p->doc, "buckets");
    json_t *exp = json_object_get(json_object_get(p->doc, "shares"), "exposed_comm");
    char buckets[24] = "-", mb[24], step[24], half[24], sps[24], expo[24], gbs[24], r[24];
    if (json_is_integer(b))
        snprintf(buckets, sizeof buckets, "%" JSON_INTEGER_FORMAT, json_integer_value(b));
    fprintf(o, "  %7s  %9s  %9s  %7s  %10s  %8s  %7s  %6s\n", buckets,
            sweep_fmt(mb, sizeof mb, "%.2f", sweep_summary_mean(p, "bytes_per_step") / 1e6),
            sweep_fmt(step, sizeof step, "%.2f", p->step_mean),
            sweep_fmt(half, sizeof half, "%.2f", (p->step_high - p->step_low) / 2),
            sweep_fmt(sps, sizeof sps, "%.1f", sweep_summary_mean(p, "samples_per_s")),
            sweep_fmt(expo, sizeof expo, "%.1f", json_is_number(exp) ? 100 * json_number_value(exp) : NAN),
            sweep_fmt(gbs, sizeof gbs, "%.3f", sweep_summary_mean(p, "effective_gb_per_s")),
            sweep_fmt(r, sizeof r, "%.2f", ratio));
    fflush(o);
}

/* The answer, after the last row: each PS point against its allreduce. */
void sweep_print_answer(sweep *s)
{
    FILE *o = s->out;
    size_t n = json_array_size(s->comparisons), i;
    json_t *c;
    fprintf(o, "#\n# PS/AR: the parameter server's step p50 over allreduce's at the same point (>1: allreduce is "
               "faster)\n");
    if (n == 0) {
        fprintf(o, "# the answer: no point ran both a parameter-server hook and allreduce_hook on the same "
                   "configuration (for a DdpTrainer: --ddp-hook rpc_hook,allreduce_hook)\n");
        return;
    }
    /* Faster only beyond noise: with intervals that overlap, neither is. */
    unsigned ps = 0, ar = 0, noise = 0;
    json_array_foreach(s->comparisons, i, c) {
        if (json_is_true(json_object_get(c, "within_noise")))
            noise++;
        else if (strcmp(json_string_value(json_object_get(c, "faster")), "ps") == 0)
            ps++;
        else
            ar++;
    }
    fprintf(o, "# the answer: of %zu point(s), the parameter server is faster at %u, allreduce at %u", n, ps, ar);
    if (noise)
        fprintf(o, ", within noise at %u", noise);
    fprintf(o, "%s\n", json_is_true(json_object_get(json_array_get(s->comparisons, 0), "noise_known"))
                           ? ""
                           : " (one run per point: no noise estimate; --runs 3 gives one)");
    json_array_foreach(s->comparisons, i, c) {
        const sweep_point *ps_point = &s->points[json_integer_value(json_object_get(c, "ps_point")) - 1];
        const sweep_point *ar_point = &s->points[json_integer_value(json_object_get(c, "allreduce_point")) - 1];
        char *where = sweep_label(s, ps_point->config, true);
        bool within = json_is_true(json_object_get(c, "within_noise"));
        bool ps_faster = strcmp(json_string_value(json_object_get(c, "faster")), "ps") == 0;
        fprintf(o, "#   %s: %s %.2f ms, %s %.2f ms: PS/AR %.2f, %s\n", where,
                json_string_value(json_object_get(ps_point->config, "hook")), ps_point->step_mean,
                json_string_value(json_object_get(ar_point->config, "hook")), ar_point->step_mean,
                json_real_value(json_object_get(c, "ps_over_allreduce")),
                within ? "within noise (the 95% intervals overlap)"
                : !json_is_true(json_object_get(c, "noise_known"))
                    ? (ps_faster ? "the parameter server faster (one run each: no noise estimate)"
                                 : "allreduce faster (one run each: no noise estimate)")
                    : (ps_faster ? "the parameter server faster, beyond noise" : "allreduce faster, beyond noise"));
        free(where);
    }
}

/* ---- the files ---------------------------------------------------------------------- */

static void sweep_csv_json(FILE *f, const json_t *v)
{
    char buf[64];
    if (json_is_string(v))
        text_csv_field(f, json_string_value(v));
    else if (json_is_integer(v))
        fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v)) {
        snprintf(buf, sizeof buf, "%.15g", json_real_value(v));
        fputs(buf, f);
    } else if (json_is_boolean(v))
        fputs(json_is_true(v) ? "true" : "false", f);
}

static const char *const sweep_csv_config[] = {"hook",          "trainer", "model",     "ntrainer",     "nserver",
                                               "bucket_cap_mb", "device",  "transport", "uses_servers", NULL};

/* sweep.csv: one row per point x run x metric (tidy). */
static char *sweep_csv(const sweep *s, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        abort();
    fputs("point,run,label", f);
    for (const char *const *k = sweep_csv_config; *k; k++)
        fprintf(f, ",%s", *k);
    fputs(",status,metric,value,unit\n", f);
    static const struct {
        const char *metric, *unit;
    } figs[] = {{"step_p50_ms", "ms"},       {"step_p90_ms", "ms"},  {"samples_per_s", "1/s"},
                {"bytes_per_step", "bytes"}, {"comm_span_ms", "ms"}, {"effective_gb_per_s", "GB/s"},
                {"exposed_comm_ms", "ms"}};
    enum { NFIGS = sizeof figs / sizeof figs[0], NSHARES = 5, NMETRICS = NFIGS + NSHARES + 1 };
    for (size_t i = 0; i < s->npoints; i++) {
        const sweep_point *p = &s->points[i];
        json_t *status = json_object_get(p->doc, "status");
        size_t r;
        json_t *run;
        json_array_foreach(p->runs, r, run) {
            json_t *h = json_object_get(run, "headline");
            /* The run's metrics: the headline's figures, its shares, the buckets. */
            const char *metric[NMETRICS], *unit[NMETRICS];
            json_t *value[NMETRICS];
            char share[NSHARES][48];
            for (int m = 0; m < NFIGS; m++) {
                metric[m] = figs[m].metric;
                unit[m] = figs[m].unit;
                value[m] = json_object_get(h, figs[m].metric);
            }
            for (int k = 0; k < NSHARES; k++) {
                snprintf(share[k], sizeof share[k], "share_%s", sweep_shares[k]);
                metric[NFIGS + k] = share[k];
                unit[NFIGS + k] = "fraction";
                value[NFIGS + k] = json_object_get(json_object_get(h, "shares"), sweep_shares[k]);
            }
            metric[NMETRICS - 1] = "buckets";
            unit[NMETRICS - 1] = "count";
            value[NMETRICS - 1] = json_object_get(p->doc, "buckets");
            for (int m = 0; m < NMETRICS; m++) {
                if (!json_is_number(value[m]))
                    continue;
                fprintf(f, "%u,%" JSON_INTEGER_FORMAT ",", p->index, json_integer_value(json_object_get(run, "run")));
                text_csv_field(f, p->label);
                for (const char *const *k = sweep_csv_config; *k; k++) {
                    fputc(',', f);
                    sweep_csv_json(f, json_object_get(p->config, *k));
                }
                fprintf(f, ",%s,%s,", json_string_value(status), metric[m]);
                sweep_csv_json(f, value[m]);
                fprintf(f, ",%s\n", unit[m]);
            }
        }
    }
    fclose(f);
    return buf;
}

/* sweep.json, sweep.csv, report.html. 0, or -1 (said on err). */
int sweep_write(sweep *s, const char *started)
{
    char finished[32], path[PATH_MAX], err[512];
    sweep_now_iso(finished, sizeof finished);
    json_t *cmd = json_array(), *points = json_array(), *dims = json_array();
    json_array_append_new(cmd, json_string("psbench-master"));
    for (int i = 0; i < s->argc; i++)
        json_array_append_new(cmd, json_string(s->argv[i]));
    for (int d = 0; d < SD_COUNT; d++)
        if (s->dim[d].n >= 2)
            json_array_append_new(dims, json_string(sweep_dims[d].name));
    for (size_t i = 0; i < s->npoints; i++)
        json_array_append(points, s->points[i].doc);
    json_t *doc = json_pack("{s:i, s:o, s:s, s:s, s:I, s:o, s:o, s:O}", "psbench_sweep", 1, "command", cmd,
                            "started_at", started, "finished_at", finished, "runs", (json_int_t)s->runs,
                            "dimensions", dims, "points", points, "comparisons", s->comparisons);
    int rc = 0;
    snprintf(path, sizeof path, "%s/sweep.json", s->out_dir);
    if (afile_write_json(path, doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15), err,
                         sizeof err) < 0) {
        fprintf(s->err, "psbench-master sweep: %s\n", err);
        rc = -1;
    }
    size_t len;
    char *csv = sweep_csv(s, &len);
    snprintf(path, sizeof path, "%s/sweep.csv", s->out_dir);
    if (afile_write(path, csv, len, err, sizeof err) < 0) {
        fprintf(s->err, "psbench-master sweep: %s\n", err);
        rc = -1;
    }
    free(csv);
    snprintf(path, sizeof path, "%s/report.html", s->out_dir);
    if (sweep_report_write(path, doc, err, sizeof err) < 0) {
        fprintf(s->err, "psbench-master sweep: %s\n", err);
        rc = -1;
    }
    json_decref(doc);
    if (rc == 0)
        fprintf(s->out, "# files: %s/sweep.csv, %s/sweep.json, %s/report.html, %s/points/\n", s->out_dir, s->out_dir,
                s->out_dir, s->out_dir);
    return rc;
}

