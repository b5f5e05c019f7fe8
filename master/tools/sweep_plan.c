/* sweep_plan.c — a sweep's matrix (master/tools/sweep_int.h): the
 * dimensions' product expanded into points, each planned by its own
 * --dry-run, and enough steps for every point. */
#include "master/tools/sweep_int.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the plan ---------------------------------------------------------------------- */

/* The point's plan from its --dry-run: its "plan:" line as JSON, or NULL
 * with the reason in *why (malloc'd). */
static json_t *sweep_dry_run(sweep *s, sweep_point *p, char **why)
{
    static const char *const dry[] = {"--dry-run", NULL};
    char **args = sweep_child_argv(s, p, dry);
    char err[512], *text = NULL;
    int rc = sweep_spawn(s, args, NULL, false, &text, NULL, err, sizeof err);
    sweep_free_list(args, sweep_argv_len(args));
    if (rc < 0) {
        *why = sweep_strdup(err);
        return NULL;
    }
    json_t *plan = NULL;
    const char *line = strstr(text, "\nplan: ");
    if (rc == 0 && line) {
        const char *start = line + 7, *end = strchr(start, '\n');
        plan = json_loadb(start, end ? (size_t)(end - start) : strlen(start), 0, NULL);
    }
    if (!plan)
        *why = rc == 0 ? sweep_strdup("its --dry-run printed no plan") : sweep_error_line(text);
    free(text);
    return plan;
}

static void sweep_point_flag(sweep_point *p, const char *flag, const char *value)
{
    sweep_push(&p->argv, &p->argc, flag);
    sweep_push(&p->argv, &p->argc, value);
}

/* The matrix's coordinates of point k (k in 0..product-1), hook fastest. */
static void sweep_coords(const sweep *s, size_t k, size_t *at)
{
    for (int d = SD_COUNT - 1; d >= 0; d--) {
        size_t n = s->dim[d].n ? s->dim[d].n : 1;
        at[d] = k % n;
        k /= n;
    }
}

/* The value of dimension d at coordinates at, or NULL (not a dimension). */
static const char *sweep_value(const sweep *s, const size_t *at, int d)
{
    return s->dim[d].n ? s->dim[d].v[at[d]] : NULL;
}

/* The point's flags for coordinates at; the counts by device, the server
 * count only where the hook uses servers (plan: a first --dry-run). */
static void sweep_point_flags(sweep_point *p, const sweep *s, const size_t *at, bool cuda, const char *ntrainer,
                              const char *nserver)
{
    static const int plain[] = {SD_TRANSPORT, SD_TRAINER, SD_BUCKET, SD_COMPRESS, SD_HOOK};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        const char *v = sweep_value(s, at, plain[i]);
        if (v)
            sweep_point_flag(p, sweep_dims[plain[i]].flag, v);
    }
    if (cuda) {
        sweep_point_flag(p, "--ntrainer", "0");
        sweep_point_flag(p, "--ncudatrainer", ntrainer);
        sweep_point_flag(p, "--nserver", "0");
        if (nserver)
            sweep_point_flag(p, "--ncudaserver", nserver);
    } else {
        if (ntrainer)
            sweep_point_flag(p, "--ntrainer", ntrainer);
        if (nserver)
            sweep_point_flag(p, "--nserver", nserver);
    }
}

static void sweep_point_clear(sweep_point *p)
{
    sweep_free_list(p->argv, p->argc);
    p->argv = NULL;
    p->argc = 0;
}

/* Two points the same job (a hook without servers makes the server counts
 * one point)? */
static bool sweep_same_args(const sweep_point *a, const sweep_point *b)
{
    if (a->argc != b->argc)
        return false;
    for (size_t i = 0; i < a->argc; i++)
        if (strcmp(a->argv[i], b->argv[i]) != 0)
            return false;
    return true;
}

/* The label of the dimensions with more than one value but those in skip
 * (a bit per sweep_dim), the hook first. */
static char *sweep_label_skip(const sweep *s, const json_t *config, unsigned skip, bool without_hook)
{
    static const int order[] = {SD_HOOK,    SD_COMPRESS, SD_DEVICE,  SD_TRANSPORT,
                                SD_TRAINER, SD_NTRAINER, SD_NSERVER, SD_BUCKET};
    _Static_assert(sizeof order / sizeof order[0] == SD_COUNT, "every dimension in the label");
    char buf[1024];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        int d = order[i];
        if (s->dim[d].n < 2 || (skip >> d & 1u))
            continue;
        json_t *v = json_object_get(config, sweep_dims[d].name);
        char val[256];
        if (json_is_string(v))
            snprintf(val, sizeof val, "%s", json_string_value(v));
        else if (json_is_number(v))
            snprintf(val, sizeof val, "%g", json_number_value(v));
        else
            snprintf(val, sizeof val, "-");
        used += (size_t)snprintf(buf + used, used < sizeof buf ? sizeof buf - used : 0, "%s%s%s%s", used ? " " : "",
                                 d == SD_HOOK ? "" : sweep_dims[d].name, d == SD_HOOK ? "" : "=", val);
    }
    return sweep_strdup(buf[0] ? buf : without_hook ? "every point" : "the job");
}

/* The point's label: the values of the dimensions with more than one, the
 * hook first; without_hook: the others only ("where" a pair ran). */
char *sweep_label(const sweep *s, const json_t *config, bool without_hook)
{
    return sweep_label_skip(s, config, without_hook ? 1u << SD_HOOK | 1u << SD_NSERVER : 0, without_hook);
}

char *sweep_label_without_compress(const sweep *s, const json_t *config)
{
    return sweep_label_skip(s, config, 1u << SD_COMPRESS, true);
}

/* The point's configuration from its plan (sweep.h "config"). */
static json_t *sweep_config(const json_t *plan, const char *transport)
{
    json_t *cap = json_object_get(plan, "bucket_cap_mb");
    json_t *cz = json_object_get(plan, "compress");
    return json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:s, s:O, s:O}", "hook", json_object_get(plan, "hook"),
                     "trainer", json_object_get(plan, "trainer"), "model", json_object_get(plan, "model"), "ntrainer",
                     json_object_get(plan, "ntrainer"), "nserver", json_object_get(plan, "nserver"), "bucket_cap_mb",
                     cap ? cap : json_null(), "device", json_object_get(plan, "device"), "transport",
                     transport ? transport : json_string_value(json_object_get(plan, "transport")), "uses_servers",
                     json_object_get(plan, "uses_servers"), "compress", cz ? cz : json_null());
}

/* Every point of the matrix, planned: 0, or -1 (the point and why on err). */
/* The plan of the point at coordinates at, into p: its flags and its
 * dry run's plan (a new reference), or NULL with why (malloc'd). First as
 * a CPU job: does the hook use servers, and how many? Then, for CUDA or
 * for a hook without servers, the flags that say so, planned again. */
static json_t *sweep_plan_point(sweep *s, const size_t *at, sweep_point *p, char **why)
{
    const char *dev = sweep_value(s, at, SD_DEVICE);
    bool cuda = dev && strcmp(dev, "cuda") == 0;
    const char *nt = sweep_value(s, at, SD_NTRAINER), *ns = sweep_value(s, at, SD_NSERVER);
    sweep_point_flags(p, s, at, false, nt, ns);
    json_t *plan = sweep_dry_run(s, p, why);
    if (!plan)
        return NULL;
    bool servers = json_is_true(json_object_get(plan, "uses_servers"));
    if (!cuda && (servers || !ns))
        return plan;
    char ntbuf[24], nsbuf[24];
    snprintf(ntbuf, sizeof ntbuf, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(plan, "ntrainer")));
    snprintf(nsbuf, sizeof nsbuf, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(plan, "nserver")));
    json_decref(plan);
    sweep_point_clear(p);
    sweep_point_flags(p, s, at, cuda, cuda ? ntbuf : nt, servers ? nsbuf : ns ? "0" : NULL);
    return sweep_dry_run(s, p, why);
}

/* "hook 2 x ntrainer 3" of the dimensions with more than one value into
 * buf; the product of every dimension's count, saturated at SIZE_MAX. */
static size_t sweep_product(const sweep *s, char *buf, size_t len)
{
    size_t total = 1, used = 0;
    buf[0] = '\0';
    for (int d = 0; d < SD_COUNT; d++) {
        size_t n = s->dim[d].n ? s->dim[d].n : 1;
        total = total > SIZE_MAX / n ? SIZE_MAX : total * n;
        if (n > 1 && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s %zu", used ? " x " : "", sweep_dims[d].name, n);
    }
    return total;
}

/* The matrix's size, its points bounded by --max-points; 0 when out of
 * bounds (said: the product, its factors and the flag that raises it). */
static size_t sweep_matrix_size(sweep *s)
{
    char dims[512];
    size_t total = sweep_product(s, dims, sizeof dims);
    unsigned max = s->max_points ? s->max_points : SWEEP_DEFAULT_POINTS;
    if (total > max) {
        fprintf(s->err,
                "psbench-master sweep: the matrix has %zu points (%s), more than --max-points %u: give fewer "
                "values, or raise --max-points (at most %u)\n",
                total, dims, max, SWEEP_MAX_POINTS);
        return 0;
    }
    for (size_t i = 0; i < s->dim[SD_DEVICE].n; i++)
        if (strcmp(s->dim[SD_DEVICE].v[i], "cpu") != 0 && strcmp(s->dim[SD_DEVICE].v[i], "cuda") != 0) {
            text_shown ds;
            fprintf(s->err, "psbench-master sweep: --device %s: cpu or cuda\n",
                    text_show(s->dim[SD_DEVICE].v[i], '\'', &ds));
            return 0;
        }
    return total;
}

/* Point k of total refused: its flags and the child's reason, on err. */
static void sweep_plan_refused(sweep *s, const sweep_point *p, size_t k, size_t total, const char *why)
{
    char *cmd = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&cmd, &len);
    text_shown shown;
    for (size_t i = 0; f && i < p->argc; i++)
        fprintf(f, " %s", text_show(p->argv[i], 0, &shown));
    if (f)
        fclose(f);
    fprintf(s->err, "psbench-master sweep: point %zu of %zu (%s) is refused: %s\n", k + 1, total,
            cmd && cmd[0] ? cmd + 1 : "the job's flags", why);
    free(cmd);
}

int sweep_plan(sweep *s)
{
    size_t total = sweep_matrix_size(s);
    if (total == 0)
        return -1;
    /* Each point's --dry-run takes tens of ms: a large matrix is seconds of
     * planning, said before it starts (where it is long enough to wonder
     * about; a refusal of a small one stays its one line) and, once every
     * point passed, how long it took. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (total > SWEEP_PLAN_SAY) {
        fprintf(s->out, "# plan: checking %zu point(s), each by its --dry-run, before anything runs\n", total);
        fflush(s->out);
    }
    s->points = calloc(total, sizeof *s->points);
    if (!s->points)
        abort();
    for (size_t k = 0; k < total; k++) {
        size_t at[SD_COUNT];
        sweep_coords(s, k, at);
        sweep_point *p = &s->points[s->npoints];
        char *why = NULL;
        json_t *plan = sweep_plan_point(s, at, p, &why);
        if (!plan) {
            sweep_plan_refused(s, p, k, total, why);
            free(why);
            sweep_point_clear(p);
            return -1;
        }
        bool dup = false;
        for (size_t j = 0; j < s->npoints && !dup; j++)
            dup = sweep_same_args(&s->points[j], p);
        if (dup) { /* a hook without servers: one point for every server count */
            sweep_point_clear(p);
            json_decref(plan);
            continue;
        }
        p->config = sweep_config(plan, sweep_value(s, at, SD_TRANSPORT));
        p->plan_steps = (uint64_t)json_integer_value(json_object_get(plan, "steps"));
        p->steps_given = json_is_true(json_object_get(plan, "steps_given"));
        p->batch_size = (double)json_integer_value(json_object_get(plan, "batch_size"));
        json_decref(plan);
        p->index = (unsigned)++s->npoints;
        p->label = sweep_label(s, p->config, false);
        snprintf(p->dir, sizeof p->dir, "points/%03u", p->index);
        p->runs = json_array();
        p->busy_runs = json_array();
        p->host_warnings = json_array();
        p->headlines = json_array();
        p->buckets = -1;
        p->state = SP_PLANNED;
        p->step_mean = p->step_low = p->step_high = NAN;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(s->out, "# plan: %zu point(s) checked in %.1f s\n", total,
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    fflush(s->out);
    return 0;
}

/* ---- enough steps ------------------------------------------------------------------- */

void sweep_points_free(sweep *s)
{
    for (size_t i = 0; i < s->npoints; i++) {
        sweep_point *p = &s->points[i];
        sweep_free_list(p->argv, p->argc);
        json_decref(p->config);
        json_decref(p->runs);
        json_decref(p->doc);
        json_decref(p->trace_step);
        json_decref(p->busy_runs);
        json_decref(p->host_warnings);
        json_decref(p->headlines);
        json_decref(p->env);
        free(p->label);
        free(p->error);
        for (size_t r = 0; r < p->nseries; r++) {
            for (size_t t = 0; t < p->series[r].ntrainers; t++)
                free(p->series[r].steps[t]);
            free(p->series[r].steps);
        }
        free(p->series);
    }
    free(s->points);
    s->points = NULL;
    s->npoints = 0;
}

/* Drop `flag` (and its value) from the job's flags; whether it was there. */
static bool sweep_job_drop(sweep *s, const char *flag)
{
    bool found = false;
    size_t w = 0;
    for (size_t i = 0; i < s->njob; i++) {
        const char *v;
        if (sweep_flag_is(s->job[i], flag, &v)) {
            found = true;
            free(s->job[i]);
            if (!v && i + 1 < s->njob)
                free(s->job[++i]);
            continue;
        }
        s->job[w++] = s->job[i];
    }
    s->njob = w;
    if (s->job)
        s->job[w] = NULL;
    return found;
}

static bool sweep_job_has(const sweep *s, const char *flag)
{
    const char *v;
    for (size_t i = 0; i < s->njob; i++)
        if (sweep_flag_is(s->job[i], flag, &v))
            return true;
    return false;
}

int sweep_choose_steps(sweep *s)
{
    const sweep_point *few = NULL;
    for (size_t i = 0; i < s->npoints; i++) {
        const sweep_point *p = &s->points[i];
        if (p->steps_given)
            return 0; /* the job's --steps: its choice, fewer or not (marked "few steps" if so) */
        if (p->plan_steps < SWEEP_MIN_STEADY_STEPS + 1 && (!few || p->plan_steps < few->plan_steps))
            few = p;
    }
    if (!few)
        return 0;
    char steps[24], warm[24];
    snprintf(steps, sizeof steps, "%u", SWEEP_MIN_STEADY_STEPS + 1);
    snprintf(warm, sizeof warm, "%u", SWEEP_WARMUP_STEPS);
    bool epochs = sweep_job_drop(s, "--epochs");
    bool warm_given = sweep_job_has(s, "--warmup-steps");
    sweep_push(&s->job, &s->njob, "--steps");
    sweep_push(&s->job, &s->njob, steps);
    if (!warm_given) {
        sweep_push(&s->job, &s->njob, "--warmup-steps");
        sweep_push(&s->job, &s->njob, warm);
    }
    s->steps_chosen = SWEEP_MIN_STEADY_STEPS + 1;
    fprintf(s->out,
            "# steps: %s gives %" PRIu64 " step(s) per trainer at point %u (%s), %" PRIu64
            " steady-state after the first; every point runs --steps %s%s%s instead: at least %u steady-state "
            "steps per trainer and run (--steps N chooses)\n",
            epochs ? "--epochs" : "the default --epochs", few->plan_steps, few->index, few->label,
            few->plan_steps ? few->plan_steps - 1 : 0, steps, warm_given ? "" : " --warmup-steps ",
            warm_given ? "" : warm, SWEEP_MIN_STEADY_STEPS);
    fflush(s->out);
    sweep_points_free(s);
    return sweep_plan(s);
}
