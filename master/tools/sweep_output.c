/* sweep_output.c — what a sweep says: each point's results read back and
 * summed up, parameter-server points paired with their allreduce
 * partners, the table's rows and the answer, sweep.json and sweep.csv
 * (master/tools/sweep_int.h). */
#include "master/tools/sweep_int.h"

#include "master/headline.h"
#include "master/noise.h"
#include "master/summary.h"
#include "master/tools/sweep_report.h"
#include "master/trace_an.h"
#include "shared/atomicfile.h"
#include "shared/paramsfile.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
/* The steady state's figures summed up over runs as the old ones are (the
 * step p50 and samples/s have intervals of their own: noise.h). */
static const char *const sweep_steady_figures[] = {"step_p90_ms",    "step_mean_ms",   "first_step_ms",
                                                   "comm_span_ms",   "algbw_gb_per_s", "busbw_gb_per_s", NULL};

static json_t *sweep_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* Run i's headline figure (key in its "all" row, or in its steady
 * object), NAN when not known. */
static double sweep_run_figure(const sweep_point *p, size_t i, const char *obj, const char *key)
{
    json_t *h = json_object_get(json_array_get(p->runs, i), "headline");
    if (obj)
        h = json_object_get(h, obj);
    json_t *v = json_object_get(h, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* {n, mean, sd, ci95_low, ci95_high} of a figure over the point's runs. */
static json_t *sweep_summary_entry(const sweep_point *p, const char *obj, const char *key, double *x)
{
    size_t n = json_array_size(p->runs);
    for (size_t i = 0; i < n; i++)
        x[i] = sweep_run_figure(p, i, obj, key);
    summary_ci ci;
    summary_of(x, n, &ci);
    return json_pack("{s:I, s:o, s:o, s:o, s:o}", "n", (json_int_t)ci.n, "mean", sweep_num(ci.mean), "sd",
                     sweep_num(ci.stdev), "ci95_low", sweep_num(ci.ci_low), "ci95_high", sweep_num(ci.ci_high));
}

/* The point's runs as noise.h sees them (borrowing p->series). */
static noise_run *sweep_noise_runs(const sweep_point *p)
{
    noise_run *r = calloc(p->nseries ? p->nseries : 1, sizeof *r);
    if (!r)
        abort();
    for (size_t i = 0; i < p->nseries; i++)
        r[i] = (noise_run){.steps = (const double *const *)p->series[i].steps,
                           .ntrainers = p->series[i].ntrainers,
                           .n = p->series[i].n};
    return r;
}

/* A steady figure with its own interval (noise.h): {n: runs, mean,
 * ci95_low, ci95_high, method, block_steps}. */
static json_t *sweep_noise_entry(const sweep_point *p, noise_stat stat, uint64_t seed, noise_ci *out)
{
    noise_run *runs = sweep_noise_runs(p);
    if (noise_interval(runs, p->nseries, stat, p->batch_size, seed, out) < 0)
        abort(); /* out of memory for a few thousand doubles */
    free(runs);
    return json_pack("{s:I, s:o, s:o, s:o, s:o, s:I}", "n", (json_int_t)p->nseries, "mean", sweep_num(out->value),
                     "ci95_low", sweep_num(out->low), "ci95_high", sweep_num(out->high), "method",
                     out->method ? json_string(out->method) : json_null(), "block_steps", (json_int_t)out->block);
}

/* The point's sweep.json entry (sweep.h), from its runs. */
void sweep_point_doc(sweep *s, sweep_point *p)
{
    size_t n = json_array_size(p->runs);
    double *x = calloc(n ? n : 1, sizeof *x);
    if (!x)
        abort();
    json_t *summary = json_object();
    for (const char *const *f = sweep_figures; *f; f++)
        json_object_set_new(summary, *f, sweep_summary_entry(p, NULL, *f, x));
    json_t *shares = json_object(), *steady_shares = json_object();
    for (const char *const *k = sweep_shares; *k; k++) {
        for (int st = 0; st < 2; st++) {
            for (size_t i = 0; i < n; i++) {
                json_t *h = json_object_get(json_array_get(p->runs, i), "headline");
                json_t *v = json_object_get(json_object_get(st ? json_object_get(h, "steady") : h, "shares"), *k);
                x[i] = json_is_number(v) ? json_number_value(v) : NAN;
            }
            summary_ci ci;
            summary_of(x, n, &ci);
            json_object_set_new(st ? steady_shares : shares, *k, ci.n ? sweep_num(ci.mean) : json_null());
        }
    }
    /* The steady state (issue 38): what the table, the intervals and the
     * verdicts use. */
    noise_ci c50, csps;
    json_t *steady = json_object();
    json_object_set_new(steady, "step_p50_ms", sweep_noise_entry(p, NOISE_P50, s->order_seed ^ p->index, &c50));
    json_object_set_new(steady, "samples_per_s",
                        sweep_noise_entry(p, NOISE_SAMPLES_PER_S, s->order_seed ^ p->index, &csps));
    for (const char *const *f = sweep_steady_figures; *f; f++)
        json_object_set_new(steady, *f, sweep_summary_entry(p, "steady", *f, x));
    json_object_set_new(steady, "shares", steady_shares);
    free(x);
    p->step_mean = c50.value;
    p->step_low = c50.low;
    p->step_high = c50.high;
    p->nruns = p->nseries;
    static const char *const states[] = {[SP_PLANNED] = "not run", [SP_DONE] = "done", [SP_FAILED] = "failed",
                                         [SP_NOT_RUN] = "not run"};
    json_decref(p->doc);
    p->doc = json_pack("{s:I, s:s, s:s, s:O, s:s, s:s?, s:o, s:O, s:o, s:o, s:O}", "point", (json_int_t)p->index,
                       "dir", p->dir, "label", p->label, "config", p->config, "status", states[p->state], "error",
                       p->error, "buckets", p->buckets >= 0 ? json_integer(p->buckets) : json_null(), "runs", p->runs,
                       "summary", summary, "shares", shares, "environment", p->env ? p->env : json_null());
    /* Extensions (issue 38; docs/results.md "A sweep's table and files"). */
    json_object_set_new(p->doc, "n", json_integer((json_int_t)p->steady_n));
    json_object_set_new(p->doc, "few_steps", json_boolean(p->nseries && p->steady_n < HEADLINE_FEW_STEPS));
    json_object_set_new(p->doc, "steady", steady);
    json_object_set(p->doc, "busy_runs", p->busy_runs);
    json_object_set_new(p->doc, "busy", json_boolean(json_array_size(p->busy_runs) > 0));
    json_object_set_new(p->doc, "oversubscribed", json_boolean(p->oversubscribed));
    json_object_set(p->doc, "host_warnings", p->host_warnings);
    json_object_set_new(p->doc, "trace_step", p->trace_step ? json_incref(p->trace_step) : json_null());
    /* Issue 43: the final loss, mean over the runs; vs_fp32 once its fp32
     * point is in (sweep_cost). */
    summary_ci lc;
    double *loss = calloc(n ? n : 1, sizeof *loss);
    if (!loss)
        abort();
    size_t nl = 0, i;
    json_t *run;
    json_array_foreach(p->runs, i, run) {
        json_t *v = json_object_get(run, "final_loss");
        if (json_is_number(v))
            loss[nl++] = json_number_value(v);
    }
    summary_of(loss, nl, &lc);
    free(loss);
    json_object_set_new(p->doc, "final_loss", nl == n && nl ? sweep_num(lc.mean) : json_null());
    json_object_set_new(p->doc, "vs_fp32", json_null());
}

/* Run r's steady steps (results.json's steady_state) into p->series. */
static void sweep_keep_series(sweep_point *p, const json_t *results)
{
    json_t *tr = json_object_get(json_object_get(results, "steady_state"), "trainers");
    size_t nt = json_array_size(tr), n = SIZE_MAX, i;
    json_t *t;
    json_array_foreach(tr, i, t) {
        size_t k = json_array_size(json_object_get(t, "steps_ms"));
        n = k < n ? k : n;
    }
    if (nt == 0 || n == SIZE_MAX)
        return;
    sweep_series *v = realloc(p->series, (p->nseries + 1) * sizeof *v);
    if (!v)
        abort();
    p->series = v;
    sweep_series *ser = &p->series[p->nseries++];
    ser->ntrainers = nt;
    ser->n = n; /* aligned by step: the shortest trainer's (they run the same steps) */
    ser->steps = calloc(nt, sizeof *ser->steps);
    if (!ser->steps)
        abort();
    json_array_foreach(tr, i, t) {
        ser->steps[i] = malloc((n ? n : 1) * sizeof **ser->steps);
        if (!ser->steps[i])
            abort();
        for (size_t k = 0; k < n; k++)
            ser->steps[i][k] = json_number_value(json_array_get(json_object_get(t, "steps_ms"), k));
    }
}

/* Run r's host marks (results.json's host_state) into p. */
static void sweep_keep_host(sweep_point *p, const json_t *results, unsigned r)
{
    json_t *hs = json_object_get(results, "host_state");
    if (json_is_true(json_object_get(hs, "busy")))
        json_array_append_new(p->busy_runs, json_integer(r));
    if (json_is_true(json_object_get(hs, "oversubscribed")))
        p->oversubscribed = true;
    size_t i, j;
    json_t *w, *have;
    json_array_foreach(json_object_get(hs, "warnings"), i, w) {
        bool seen = false;
        json_array_foreach(p->host_warnings, j, have) seen = seen || json_equal(have, w);
        if (!seen && json_is_string(w))
            json_array_append(p->host_warnings, w);
    }
}

/* The representative step of the run whose results.json is at `results`
 * (its trace.json beside it), as the report draws it; NULL where the run
 * was not traced or its trace holds no step every trainer traced whole.
 * A trace that cannot be read is said (a warning: the figures stand). */
static json_t *sweep_trace_step(sweep *s, const char *results)
{
    char path[PATH_MAX + 16], why[256];
    const char *slash = strrchr(results, '/');
    snprintf(path, sizeof path, "%.*s/trace.json", slash ? (int)(slash - results) : 1, slash ? results : ".");
    json_t *doc = NULL;
    json_error_t je;
    if (access(path, F_OK) != 0)
        return NULL; /* not traced */
    if (userpath_load_json(path, 0, &doc, &je, why, sizeof why) < 0) {
        fprintf(s->err, "psbench-master sweep: warning: %s: %s\n", path, why);
        return NULL;
    }
    if (!doc) {
        fprintf(s->err, "psbench-master sweep: warning: %s:%d:%d: invalid JSON: %s\n", path, je.line, je.column,
                je.text);
        return NULL;
    }
    trace_an_trace t;
    json_t *step = NULL;
    if (trace_an_load(doc, &t, why, sizeof why) != 0) {
        fprintf(s->err, "psbench-master sweep: warning: %s: %s\n", path, why);
    } else {
        step = trace_an_representative_json(&t);
        trace_an_trace_free(&t);
        if (json_is_null(step)) {
            json_decref(step);
            step = NULL;
        }
    }
    json_decref(doc);
    return step;
}

/* A run's final loss: its trainers' last epoch's mean loss, averaged over
 * the trainers; NAN where a trainer has none, or one that is not a number
 * (a model without a loss; a loss that diverged). */
static double sweep_final_loss(const json_t *results)
{
    double sum = 0;
    size_t n = 0, i;
    json_t *t;
    json_array_foreach(json_object_get(results, "trainers"), i, t) {
        json_t *l = json_object_get(t, "loss_per_epoch");
        json_t *last = json_array_get(l, json_array_size(l) ? json_array_size(l) - 1 : 0);
        if (!json_is_number(last))
            return NAN;
        sum += json_number_value(last);
        n++;
    }
    return n ? sum / (double)n : NAN;
}

bool sweep_collect_run(sweep *s, sweep_point *p, unsigned r)
{
    char path[PATH_MAX];
    if (s->runs == 1)
        snprintf(path, sizeof path, "%s/%s/results.json", s->out_dir, p->dir);
    else
        snprintf(path, sizeof path, "%s/%s/run-%03u/results.json", s->out_dir, p->dir, r);
    json_t *res;
    json_error_t je;
    char why[256];
    /* The point's folder is the user's: a FIFO or a folder of that name
     * (a tampered sweep) is a failed run, never a wait. */
    if (userpath_load_json(path, 0, &res, &je, why, sizeof why) < 0)
        return false;
    json_t *h = sweep_run_headline(res);
    const char *phase = json_string_value(json_object_get(res, "phase"));
    bool done = h && phase && strcmp(phase, "done") == 0;
    if (done) {
        /* What the run cost training (issue 43): its final loss, and its
         * final parameters' file (results.json final_params) for the
         * comparison with an fp32 point (sweep_cost). */
        json_t *fp = json_object_get(res, "final_params");
        json_array_append_new(p->runs, json_pack("{s:I, s:o, s:o, s:o}", "run", (json_int_t)r, "headline", h,
                                                 "final_loss", sweep_num(sweep_final_loss(res)), "final_params",
                                                 fp ? json_deep_copy(fp) : json_null()));
        json_array_append(p->headlines, json_object_get(res, "headline"));
        json_t *sn = json_object_get(json_object_get(h, "steady"), "n");
        uint64_t n = json_is_integer(sn) ? (uint64_t)json_integer_value(sn) : 0;
        p->steady_n = p->nseries == 0 || n < p->steady_n ? n : p->steady_n;
        sweep_keep_series(p, res);
        sweep_keep_host(p, res, r);
    } else {
        json_decref(h);
    }
    if (!p->env) {
        p->env = sweep_environment(res);
        p->buckets = sweep_buckets(res);
    }
    json_decref(res);
    if (done && !p->trace_step)
        p->trace_step = sweep_trace_step(s, path);
    return done;
}

void sweep_finish_point(sweep *s, sweep_point *p)
{
    if (p->state == SP_DONE && json_array_size(p->runs) < s->runs) {
        p->state = SP_FAILED;
        if (!p->error)
            p->error = sweep_strdup("a run wrote no headline (no trainer reported a step)");
    }
    sweep_point_doc(s, p);
    /* Beside its runs, as a --runs series writes it: `psbench-master diff`
     * reads its noise from there. */
    if (s->runs > 1 && json_array_size(p->headlines) > 0) {
        char path[PATH_MAX], err[512];
        snprintf(path, sizeof path, "%s/%s/summary.json", s->out_dir, p->dir);
        json_t *sum = summary_json(p->headlines);
        if (!sum || afile_write_json(path, sum, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15), err,
                                     sizeof err) < 0)
            fprintf(s->err, "psbench-master sweep: %s\n", sum ? err : "out of memory for a summary");
        json_decref(sum);
    }
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

/* The comparisons point p completes (both ended done): the ratio of the
 * steady step p50s and its two-stage bootstrap interval (noise.h). A
 * winner only where the interval excludes 1. The last one made, or NULL. */
const json_t *sweep_compare(sweep *s, const sweep_point *p)
{
    const json_t *last = NULL;
    for (size_t j = 0; j < s->npoints; j++) {
        const sweep_point *q = &s->points[j];
        if (q == p || !q->printed || q->state != SP_DONE || p->state != SP_DONE)
            continue; /* each pair once: when its second row is printed */
        const sweep_point *ps = sweep_partners(p, q) ? p : sweep_partners(q, p) ? q : NULL;
        if (!ps)
            continue;
        const sweep_point *ar = ps == p ? q : p;
        if (!isfinite(ps->step_mean) || !isfinite(ar->step_mean) || ar->step_mean <= 0)
            continue;
        noise_run *a = sweep_noise_runs(ps), *b = sweep_noise_runs(ar);
        noise_ci r;
        if (noise_ratio(a, ps->nseries, b, ar->nseries, NOISE_P50, ps->batch_size,
                        s->order_seed ^ ((uint64_t)ps->index << 32 | ar->index), &r) < 0)
            abort();
        free(a);
        free(b);
        double ratio = ps->step_mean / ar->step_mean;
        bool known = isfinite(r.low) && isfinite(r.high);
        bool within = known && r.low <= 1 && r.high >= 1;
        const char *verdict = !known ? "no noise estimate" : within ? "no difference beyond noise"
                              : ratio > 1                 ? "allreduce"
                                                          : "ps";
        json_t *c = json_pack("{s:I, s:I, s:O, s:f, s:f, s:f, s:s, s:b, s:b}", "ps_point", (json_int_t)ps->index,
                              "allreduce_point", (json_int_t)ar->index, "ps_hook", json_object_get(ps->config, "hook"),
                              "ps_step_ms", ps->step_mean, "allreduce_step_ms", ar->step_mean, "ps_over_allreduce",
                              ratio, "faster", ratio > 1 ? "allreduce" : "ps", "within_noise", within, "noise_known",
                              known);
        json_object_set_new(c, "ratio_ci95_low", sweep_num(r.low));
        json_object_set_new(c, "ratio_ci95_high", sweep_num(r.high));
        json_object_set_new(c, "ci_method", r.method ? json_string(r.method) : json_null());
        json_object_set_new(c, "verdict", json_string(verdict));
        json_object_set_new(c, "n", json_integer((json_int_t)(ps->steady_n < ar->steady_n ? ps->steady_n
                                                                                          : ar->steady_n)));
        json_object_set_new(c, "busy", json_boolean(json_array_size(ps->busy_runs) + json_array_size(ar->busy_runs) > 0));
        json_object_set_new(c, "oversubscribed", json_boolean(ps->oversubscribed || ar->oversubscribed));
        json_array_append_new(s->comparisons, c);
        last = c;
    }
    return last;
}

/* ---- what compression costs (issue 43) ---------------------------------------------- */

/* fp and cp the same job but for compress, fp's `none` and cp's another? */
static bool sweep_cost_partners(const sweep_point *fp, const sweep_point *cp)
{
    const json_t *a = json_object_get(fp->config, "compress"), *b = json_object_get(cp->config, "compress");
    if (!json_is_string(a) || !json_is_string(b) || strcmp(json_string_value(a), "none") != 0 ||
        strcmp(json_string_value(b), "none") == 0)
        return false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)fp->config, k, v) {
        if (strcmp(k, "compress") != 0 && !json_equal(v, json_object_get(cp->config, k)))
            return false;
    }
    return json_object_size(fp->config) == json_object_size(cp->config);
}

/* The folder of point p's run r. */
static void sweep_run_dir(const sweep *s, const sweep_point *p, json_int_t r, char *buf, size_t len)
{
    if (s->runs == 1)
        snprintf(buf, len, "%s/%s", s->out_dir, p->dir);
    else
        snprintf(buf, len, "%s/%s/run-%03" JSON_INTEGER_FORMAT, s->out_dir, p->dir, r);
}

/* Run entry rc of the compressed point cp against the fp32 point fp's run
 * of the same number: the loss difference and the parameters' relative
 * distance, or why not (the first reason into *why, if not set yet). */
static json_t *sweep_cost_run(const sweep *s, const sweep_point *fp, const sweep_point *cp, const json_t *rc, char *why,
                              size_t whylen)
{
    json_int_t r = json_integer_value(json_object_get(rc, "run"));
    const json_t *rf = NULL, *x;
    size_t i;
    json_array_foreach(fp->runs, i, x) {
        if (json_integer_value(json_object_get(x, "run")) == r)
            rf = x;
    }
    json_t *lc = json_object_get(rc, "final_loss"), *lf = rf ? json_object_get(rf, "final_loss") : NULL;
    json_t *o = json_pack("{s:I, s:O?, s:O?}", "run", r, "final_loss", lc, "fp32_final_loss", lf);
    json_object_set_new(o, "loss_diff",
                        json_is_number(lc) && json_is_number(lf)
                            ? json_real(json_number_value(lc) - json_number_value(lf))
                            : json_null());
    char w[1200] = "", dir[PATH_MAX], what[PATH_MAX + 32];
    float *a = NULL, *b = NULL;
    uint64_t na = 0, nb = 0;
    if (!rf) {
        snprintf(w, sizeof w, "point %u has no run %" JSON_INTEGER_FORMAT, fp->index, r);
    } else {
        sweep_run_dir(s, fp, r, dir, sizeof dir);
        snprintf(what, sizeof what, "%s/results.json", dir);
        if (paramsfile_of_results(dir, what, json_object_get(rf, "final_params"), &a, &na, w, sizeof w) == 0) {
            sweep_run_dir(s, cp, r, dir, sizeof dir);
            snprintf(what, sizeof what, "%s/results.json", dir);
            if (paramsfile_of_results(dir, what, json_object_get(rc, "final_params"), &b, &nb, w, sizeof w) == 0 &&
                na != nb)
                snprintf(w, sizeof w, "point %u has %" PRIu64 " parameters, point %u %" PRIu64, fp->index, na,
                         cp->index, nb);
        }
    }
    json_object_set_new(o, "params_distance", w[0] ? json_null() : sweep_num(paramsfile_rel_distance(a, b, na)));
    json_object_set_new(o, "why", w[0] ? json_string(w) : json_null());
    if (w[0] && !why[0])
        snprintf(why, whylen, "run %" JSON_INTEGER_FORMAT ": %s", r, w);
    free(a);
    free(b);
    return o;
}

/* The mean of key over the entries that have it; NAN if any lacks it. */
static double sweep_cost_mean(const json_t *runs, const char *key)
{
    double sum = 0;
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r) {
        json_t *v = json_object_get(r, key);
        if (!json_is_number(v))
            return NAN;
        sum += json_number_value(v);
    }
    return json_array_size(runs) ? sum / (double)json_array_size(runs) : NAN;
}

void sweep_cost(sweep *s, sweep_point *p)
{
    for (size_t j = 0; j < s->npoints; j++) {
        sweep_point *q = &s->points[j];
        if (q == p || !q->printed || q->state != SP_DONE || p->state != SP_DONE)
            continue; /* each pair once: when its second row is printed */
        sweep_point *fp = sweep_cost_partners(p, q) ? p : sweep_cost_partners(q, p) ? q : NULL;
        if (!fp)
            continue;
        sweep_point *cp = fp == p ? q : p;
        json_t *runs = json_array(), *rc;
        char why[1300] = "";
        size_t i;
        json_array_foreach(cp->runs, i, rc)
            json_array_append_new(runs, sweep_cost_run(s, fp, cp, rc, why, sizeof why));
        json_t *c = json_pack("{s:I, s:I, s:O}", "point", (json_int_t)cp->index, "fp32_point", (json_int_t)fp->index,
                              "compress", json_object_get(cp->config, "compress"));
        json_object_set_new(c, "loss_diff", sweep_num(sweep_cost_mean(runs, "loss_diff")));
        json_object_set_new(c, "params_distance", sweep_num(sweep_cost_mean(runs, "params_distance")));
        json_object_set_new(c, "why", why[0] ? json_string(why) : json_null());
        json_object_set_new(c, "runs", runs);
        json_array_append(s->costs, c);
        json_object_set_new(cp->doc, "vs_fp32", c);
    }
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
    static const char *const keys[] = {"hook",          "trainer", "model",     "ntrainer", "nserver",
                                       "bucket_cap_mb", "device",  "transport", "compress", NULL};
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
    fprintf(o, " %u run(s) each\n", s->runs);
    if (s->runs > 1)
        fprintf(o, "# order: %s\n",
                s->sequential ? "sequential (each point's runs back to back: --order sequential)"
                              : "interleaved (the runs of points that differ only in the hook alternate)");
    if (!s->sequential)
        fprintf(o, "# order seed: %" PRIu64 " (--order-seed %" PRIu64 " repeats which side runs first)\n",
                s->order_seed, s->order_seed);
    fprintf(o, "#\n#%6s", "point");
    for (int d = 0; d < SD_COUNT; d++)
        if (s->dim[d].n >= 2)
            fprintf(o, "  %*s", s->width[d] = sweep_width(s, d), sweep_dims[d].name);
    fprintf(o, "  %7s  %9s  %5s  %9s  %19s  %10s  %8s  %7s  %7s  %6s  %15s  ", "buckets", "MB/step", "n", "step_ms",
            "95% interval", "samples/s", "exposed%", "algbw", "busbw", "PS/AR", "PS/AR 95%");
    /* What compression costs, where it varies (issue 43). */
    if (s->dim[SD_COMPRESS].n >= 2)
        fprintf(o, "%10s  %10s  %10s  ", "loss", "dloss", "pdist");
    fprintf(o, "marks\n");
    fflush(o);
}

/* The steady figure's mean over the runs, NAN if none. */
static double sweep_steady_mean(const sweep_point *p, const char *fig)
{
    json_t *v = json_object_get(json_object_get(json_object_get(p->doc, "steady"), fig), "mean");
    return json_is_number(v) ? json_number_value(v) : NAN;
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

/* "[lo, hi]" with fmt, or "-". */
static const char *sweep_fmt_ci(char *buf, size_t len, const char *fmt, double lo, double hi)
{
    if (!isfinite(lo) || !isfinite(hi))
        return "-";
    char a[32], b[32];
    snprintf(a, sizeof a, fmt, lo);
    snprintf(b, sizeof b, fmt, hi);
    snprintf(buf, len, "[%s, %s]", a, b);
    return buf;
}

/* The point's marks: busy runs, oversubscribed, few steps. */
static void sweep_marks(const sweep *s, const sweep_point *p, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    if (json_array_size(p->busy_runs))
        used += (size_t)snprintf(buf + used, len - used, "busy (%zu of %u runs) ", json_array_size(p->busy_runs),
                                 s->runs);
    if (p->oversubscribed && used < len)
        used += (size_t)snprintf(buf + used, len - used, "oversubscribed ");
    if (p->nseries && p->steady_n < HEADLINE_FEW_STEPS && used < len)
        used += (size_t)snprintf(buf + used, len - used, "few steps (n=%" PRIu64 ") ", p->steady_n);
    if (used && used <= len)
        buf[used - 1] = '\0';
}

void sweep_print_row(sweep *s, const sweep_point *p, const json_t *c)
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
    json_t *exp = json_object_get(json_object_get(json_object_get(p->doc, "steady"), "shares"), "exposed_comm");
    char buckets[24] = "-", mb[24], n[24], step[24], ci[48], sps[24], expo[24], alg[24], bus[24], r[24], rci[48],
         marks[160];
    if (json_is_integer(b))
        snprintf(buckets, sizeof buckets, "%" JSON_INTEGER_FORMAT, json_integer_value(b));
    sweep_marks(s, p, marks, sizeof marks);
    fprintf(o, "  %7s  %9s  %5s  %9s  %19s  %10s  %8s  %7s  %7s  %6s  %15s  ", buckets,
            sweep_fmt(mb, sizeof mb, "%.2f", sweep_summary_mean(p, "bytes_per_step") / 1e6),
            sweep_fmt(n, sizeof n, "%.0f", p->nseries ? (double)p->steady_n : NAN),
            sweep_fmt(step, sizeof step, "%.2f", p->step_mean),
            sweep_fmt_ci(ci, sizeof ci, "%.2f", p->step_low, p->step_high),
            sweep_fmt(sps, sizeof sps, "%.1f", sweep_steady_mean(p, "samples_per_s")),
            sweep_fmt(expo, sizeof expo, "%.1f", json_is_number(exp) ? 100 * json_number_value(exp) : NAN),
            sweep_fmt(alg, sizeof alg, "%.3f", sweep_steady_mean(p, "algbw_gb_per_s")),
            sweep_fmt(bus, sizeof bus, "%.3f", sweep_steady_mean(p, "busbw_gb_per_s")),
            sweep_fmt(r, sizeof r, "%.2f", c ? json_number_value(json_object_get(c, "ps_over_allreduce")) : NAN),
            c ? sweep_fmt_ci(rci, sizeof rci, "%.2f", json_number_value(json_object_get(c, "ratio_ci95_low")),
                             json_number_value(json_object_get(c, "ratio_ci95_high")))
              : "-");
    if (s->dim[SD_COMPRESS].n >= 2) {
        /* The final loss; against the fp32 point where it was printed
         * above (else the answer says it). */
        json_t *loss = json_object_get(p->doc, "final_loss"), *vs = json_object_get(p->doc, "vs_fp32");
        json_t *dl = json_object_get(vs, "loss_diff"), *pd = json_object_get(vs, "params_distance");
        char l[24], d[24], dist[24];
        fprintf(o, "%10s  %10s  %10s  ",
                sweep_fmt(l, sizeof l, "%.6g", json_is_number(loss) ? json_number_value(loss) : NAN),
                sweep_fmt(d, sizeof d, "%+.3g", json_is_number(dl) ? json_number_value(dl) : NAN),
                sweep_fmt(dist, sizeof dist, "%.3g", json_is_number(pd) ? json_number_value(pd) : NAN));
    }
    fprintf(o, "%s\n", marks);
    fflush(o);
}

/* What compression cost, each compressed point against its fp32 one
 * (sweep_cost), where the sweep varies compress. */
static void sweep_print_costs(const sweep *s)
{
    FILE *o = s->out;
    if (s->dim[SD_COMPRESS].n < 2)
        return;
    fprintf(o, "# loss: the final loss (the trainers' last epoch, mean over the runs); dloss: less the fp32 "
               "point's (compress none, the same job otherwise); pdist: ||params - fp32's|| / ||fp32's||, the "
               "final parameters' relative L2 distance (trainer 0's params.bin, run by run, mean)\n");
    if (json_array_size(s->costs) == 0) {
        fprintf(o, "# compression: no point differs from a compress none point only in compress (both done)\n");
        return;
    }
    size_t i;
    json_t *c;
    json_array_foreach(s->costs, i, c) {
        const sweep_point *cp = &s->points[json_integer_value(json_object_get(c, "point")) - 1];
        const sweep_point *fp = &s->points[json_integer_value(json_object_get(c, "fp32_point")) - 1];
        char *where = sweep_label_without_compress(s, cp->config);
        json_t *dl = json_object_get(c, "loss_diff"), *pd = json_object_get(c, "params_distance");
        const char *why = json_string_value(json_object_get(c, "why"));
        char d[32], dist[1400];
        sweep_fmt(d, sizeof d, "%+.3g", json_is_number(dl) ? json_number_value(dl) : NAN);
        if (json_is_number(pd))
            snprintf(dist, sizeof dist, "%.3g", json_number_value(pd));
        else
            snprintf(dist, sizeof dist, "not comparable: %s", why ? why : "a run has no distance");
        fprintf(o, "# compression: %s: %s (point %u) against none (point %u): loss %s, parameters' distance %s\n",
                where, json_string_value(json_object_get(c, "compress")), cp->index, fp->index,
                json_is_number(dl) ? d : "not comparable (a final loss is not a number)", dist);
        free(where);
    }
}

/* The answer, after the last row: each PS point against its allreduce. */
void sweep_print_answer(sweep *s)
{
    FILE *o = s->out;
    size_t n = json_array_size(s->comparisons), i;
    json_t *c;
    fprintf(o, "#\n# step_ms: the steady state's step p50 (every step after each trainer's first), mean over the "
               "runs; n: steady steps per trainer and run\n"
               "# PS/AR: the parameter server's step_ms over allreduce's at the same point (>1: allreduce is "
               "faster), its 95%% interval from a two-stage bootstrap (runs, then blocks of steps)\n");
    size_t busy = 0, over = 0;
    for (size_t k = 0; k < s->npoints; k++) {
        busy += json_array_size(s->points[k].busy_runs) > 0;
        over += s->points[k].oversubscribed;
    }
    if (busy)
        fprintf(o, "# busy: %zu point(s) ran while the host was busy (other processes, or steal): their figures "
                   "measure the host as much as psbench (results.json host_state; --quiet-host SECONDS waits)\n",
                busy);
    if (over)
        fprintf(o, "# oversubscribed: %zu point(s) started more busy processes than a host has cores: they "
                   "measure the scheduler too\n",
                over);
    sweep_print_costs(s);
    if (n == 0) {
        fprintf(o, "# the answer: no point ran both a parameter-server hook and allreduce_hook on the same "
                   "configuration (for a DdpTrainer: --ddp-hook rpc_hook,allreduce_hook)\n");
        return;
    }
    /* A winner only where the ratio's interval excludes 1. */
    unsigned ps = 0, ar = 0, noise = 0, unknown = 0;
    json_array_foreach(s->comparisons, i, c) {
        const char *v = json_string_value(json_object_get(c, "verdict"));
        if (strcmp(v, "ps") == 0)
            ps++;
        else if (strcmp(v, "allreduce") == 0)
            ar++;
        else if (strcmp(v, "no difference beyond noise") == 0)
            noise++;
        else
            unknown++;
    }
    fprintf(o, "# the answer: of %zu point(s), the parameter server is faster beyond noise at %u, allreduce at %u, "
               "no difference beyond noise at %u",
            n, ps, ar, noise);
    if (unknown)
        fprintf(o, ", no noise estimate at %u (a single steady step: --steps)", unknown);
    fprintf(o, "\n");
    json_array_foreach(s->comparisons, i, c) {
        const sweep_point *ps_point = &s->points[json_integer_value(json_object_get(c, "ps_point")) - 1];
        const sweep_point *ar_point = &s->points[json_integer_value(json_object_get(c, "allreduce_point")) - 1];
        char *where = sweep_label(s, ps_point->config, true);
        const char *v = json_string_value(json_object_get(c, "verdict"));
        char ci[64];
        fprintf(o, "#   %s: %s %.2f ms, %s %.2f ms: PS/AR %.2f %s, %s%s%s\n", where,
                json_string_value(json_object_get(ps_point->config, "hook")), ps_point->step_mean,
                json_string_value(json_object_get(ar_point->config, "hook")), ar_point->step_mean,
                json_real_value(json_object_get(c, "ps_over_allreduce")),
                sweep_fmt_ci(ci, sizeof ci, "%.2f", json_number_value(json_object_get(c, "ratio_ci95_low")),
                             json_number_value(json_object_get(c, "ratio_ci95_high"))),
                strcmp(v, "ps") == 0          ? "the parameter server faster, beyond noise"
                : strcmp(v, "allreduce") == 0 ? "allreduce faster, beyond noise"
                                              : v,
                json_is_true(json_object_get(c, "busy")) ? " (busy host)" : "",
                json_is_true(json_object_get(c, "oversubscribed")) ? " (oversubscribed)" : "");
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
/* Configuration columns after the others (issue 43): a reader of the
 * older columns by position still finds them where they were. */
static const char *const sweep_csv_config_late[] = {"compress", NULL};

/* sweep.csv's metrics of a run: the headline's figures, its shares, the
 * buckets, then the steady state's (issue 38: from the headline's
 * "steady" and row). */
static const struct {
    const char *metric, *unit;
} sweep_csv_figs[] = {{"step_p50_ms", "ms"},       {"step_p90_ms", "ms"},  {"samples_per_s", "1/s"},
                      {"bytes_per_step", "bytes"}, {"comm_span_ms", "ms"}, {"effective_gb_per_s", "GB/s"},
                      {"exposed_comm_ms", "ms"}};
static const struct {
    const char *metric, *key, *unit;
    bool steady;
} sweep_csv_extra[] = {{"steady_step_p50_ms", "step_p50_ms", "ms", true},
                       {"steady_step_p90_ms", "step_p90_ms", "ms", true},
                       {"steady_samples_per_s", "samples_per_s", "1/s", true},
                       {"first_step_ms", "first_step_ms", "ms", true},
                       {"algbw_gb_per_s", "algbw_gb_per_s", "GB/s", true},
                       {"busbw_gb_per_s", "busbw_gb_per_s", "GB/s", true},
                       {"wire_bytes_per_step", "wire_bytes_per_step", "bytes", false}};
enum {
    SWEEP_CSV_NFIGS = sizeof sweep_csv_figs / sizeof sweep_csv_figs[0],
    SWEEP_CSV_NSHARES = 5,
    SWEEP_CSV_NEXTRA = sizeof sweep_csv_extra / sizeof sweep_csv_extra[0],
    /* and (issue 43) final_loss, loss_vs_fp32, params_distance_vs_fp32 */
    SWEEP_CSV_NMETRICS = SWEEP_CSV_NFIGS + SWEEP_CSV_NSHARES + 1 + SWEEP_CSV_NEXTRA + 3
};

/* Run `run` of point p: a row per metric it has (a number). */
static void sweep_csv_run(FILE *f, const sweep_point *p, const json_t *run)
{
    enum {
        NFIGS = SWEEP_CSV_NFIGS,
        NSHARES = SWEEP_CSV_NSHARES,
        NEXTRA = SWEEP_CSV_NEXTRA,
        AT = SWEEP_CSV_NMETRICS - 3
    };
    json_t *status = json_object_get(p->doc, "status");
    json_t *h = json_object_get(run, "headline");
    const char *metric[SWEEP_CSV_NMETRICS], *unit[SWEEP_CSV_NMETRICS];
    json_t *value[SWEEP_CSV_NMETRICS];
    char share[NSHARES][48];
    for (int m = 0; m < NFIGS; m++) {
        metric[m] = sweep_csv_figs[m].metric;
        unit[m] = sweep_csv_figs[m].unit;
        value[m] = json_object_get(h, sweep_csv_figs[m].metric);
    }
    for (int k = 0; k < NSHARES; k++) {
        snprintf(share[k], sizeof share[k], "share_%s", sweep_shares[k]);
        metric[NFIGS + k] = share[k];
        unit[NFIGS + k] = "fraction";
        value[NFIGS + k] = json_object_get(json_object_get(h, "shares"), sweep_shares[k]);
    }
    metric[NFIGS + NSHARES] = "buckets";
    unit[NFIGS + NSHARES] = "count";
    value[NFIGS + NSHARES] = json_object_get(p->doc, "buckets");
    for (int k = 0; k < NEXTRA; k++) {
        metric[NFIGS + NSHARES + 1 + k] = sweep_csv_extra[k].metric;
        unit[NFIGS + NSHARES + 1 + k] = sweep_csv_extra[k].unit;
        value[NFIGS + NSHARES + 1 + k] = json_object_get(sweep_csv_extra[k].steady ? json_object_get(h, "steady") : h,
                                                         sweep_csv_extra[k].key);
    }
    json_int_t rn = json_integer_value(json_object_get(run, "run"));
    json_t *vs = NULL, *x;
    size_t xi;
    json_array_foreach(json_object_get(json_object_get(p->doc, "vs_fp32"), "runs"), xi, x) {
        if (json_integer_value(json_object_get(x, "run")) == rn)
            vs = x;
    }
    static const char *const cost_metric[] = {"final_loss", "loss_vs_fp32", "params_distance_vs_fp32"};
    static const char *const cost_unit[] = {"loss", "loss", "relative"};
    for (int c = 0; c < 3; c++) {
        metric[AT + c] = cost_metric[c];
        unit[AT + c] = cost_unit[c];
    }
    value[AT] = json_object_get(run, "final_loss");
    value[AT + 1] = json_object_get(vs, "loss_diff");
    value[AT + 2] = json_object_get(vs, "params_distance");
    json_t *sn = json_object_get(json_object_get(h, "steady"), "n");
    size_t b;
    json_t *br;
    bool busy = false;
    json_array_foreach(p->busy_runs, b, br) busy = busy || json_integer_value(br) == rn;
    for (int m = 0; m < SWEEP_CSV_NMETRICS; m++) {
        if (!json_is_number(value[m]))
            continue;
        fprintf(f, "%u,%" JSON_INTEGER_FORMAT ",", p->index, rn);
        text_csv_field(f, p->label);
        for (const char *const *k = sweep_csv_config; *k; k++) {
            fputc(',', f);
            sweep_csv_json(f, json_object_get(p->config, *k));
        }
        fprintf(f, ",%s,%s,", json_string_value(status), metric[m]);
        sweep_csv_json(f, value[m]);
        fprintf(f, ",%s,", unit[m]);
        sweep_csv_json(f, sn);
        fprintf(f, ",%s,%s", busy ? "true" : "false", p->oversubscribed ? "true" : "false");
        for (const char *const *c = sweep_csv_config_late; *c; c++) {
            fputc(',', f);
            sweep_csv_json(f, json_object_get(p->config, *c));
        }
        fputc('\n', f);
    }
}

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
    /* n, busy and oversubscribed (issue 38) last: a reader of the older
     * columns by position still finds them where they were. */
    fputs(",status,metric,value,unit,n,busy,oversubscribed", f);
    for (const char *const *k = sweep_csv_config_late; *k; k++)
        fprintf(f, ",%s", *k);
    fputc('\n', f);
    for (size_t i = 0; i < s->npoints; i++) {
        size_t r;
        json_t *run;
        json_array_foreach(s->points[i].runs, r, run) sweep_csv_run(f, &s->points[i], run);
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
    json_array_append_new(cmd, json_string("sweep")); /* argv as given: the subcommand too */
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
    /* How the runs were taken (issue 38). */
    json_object_set_new(doc, "order", json_string(s->sequential ? "sequential" : "interleaved"));
    json_object_set_new(doc, "order_seed", json_integer((json_int_t)s->order_seed));
    json_object_set_new(doc, "steps_chosen", s->steps_chosen ? json_integer((json_int_t)s->steps_chosen) : json_null());
    json_object_set_new(doc, "min_steady_steps", json_integer(SWEEP_MIN_STEADY_STEPS));
    json_object_set_new(doc, "schedule", s->schedule ? json_incref(s->schedule) : json_array());
    /* Issue 43: each compressed point against its fp32 one (sweep_cost). */
    json_object_set(doc, "compression", s->costs);
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

