/* sweep_plan.c — a sweep's matrix: its dimensions from the command line
 * and a sweep file, expanded into points, each planned by its own
 * --dry-run (master/tools/sweep_int.h). */
#include "master/tools/sweep_int.h"
#include "master/opts.h"
#include "shared/opts.h"

#include "shared/cli.h"
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

const sweep_dim_def sweep_dims[SD_COUNT] = {
    [SD_DEVICE] = {"device", "--device", NULL},
    [SD_TRANSPORT] = {"transport", "--transport", NULL},
    [SD_TRAINER] = {"trainer", "--trainer", NULL},
    [SD_NTRAINER] = {"ntrainer", "--ntrainer", "--number-trainers"},
    [SD_NSERVER] = {"nserver", "--nserver", "--number-ps"},
    [SD_BUCKET] = {"bucket_cap_mb", "--bucket-cap-mb", NULL},
    [SD_HOOK] = {"hook", "--ddp-hook", "--hook"},
};

/* The job's flags a sweep sets itself, per point. */
static const char *const sweep_owned_flags[] = {"--out", "--runs", "--ncudatrainer", "--ncudaserver", "--linger",
                                                NULL};


/* Split "a,b,c" into values; empty items are an error. */
static int sweep_split(sweep_values *vals, const char *flag, const char *list, FILE *err)
{
    sweep_free_list(vals->v, vals->n);
    vals->v = NULL;
    vals->n = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        text_shown ls, is;
        if (len == 0) {
            fprintf(err, "psbench-master sweep: %s %s: an empty value (a list is VALUE,VALUE,...)\n", flag,
                    text_show(list, '\'', &ls));
            return -1;
        }
        char *item = strndup(p, len);
        if (!item)
            abort();
        for (size_t i = 0; i < vals->n; i++)
            if (strcmp(vals->v[i], item) == 0) {
                fprintf(err, "psbench-master sweep: %s %s: %s is given twice\n", flag, text_show(list, '\'', &ls),
                        text_show(item, '\'', &is));
                free(item);
                return -1;
            }
        sweep_push(&vals->v, &vals->n, item);
        free(item);
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* "--flag" or "--flag=value" (also with '_' for '-') naming `name`? The
 * value after '=' goes to *inline_value. */
bool sweep_flag_is(const char *arg, const char *name, const char **inline_value)
{
    size_t i = 0;
    for (; name[i]; i++) {
        char a = arg[i] == '_' ? '-' : arg[i];
        if (a != name[i])
            return false;
    }
    if (arg[i] == '\0') {
        *inline_value = NULL;
        return true;
    }
    if (arg[i] == '=') {
        *inline_value = arg + i + 1;
        return true;
    }
    return false;
}

/* ---- parsing ---------------------------------------------------------------------- */

int sweep_usage_error(sweep *s, const char *fmt, const char *a, const char *b)
{
    fputs("psbench-master sweep: ", s->err);
    fprintf(s->err, fmt, a, b);
    fputs(" (psbench-master sweep --help)\n", s->err);
    return -1;
}

/* A number of runs, 1..SWEEP_MAX_RUNS (decimal, as every number: cli.h). */
static int sweep_parse_runs(sweep *s, const char *v)
{
    uint64_t n;
    char why[256];
    if (cli_parse_u64("--runs", v, 1, SWEEP_MAX_RUNS, 0, &n, why, sizeof why) < 0) {
        char max[16];
        text_shown shown;
        snprintf(max, sizeof max, "%u", SWEEP_MAX_RUNS);
        return sweep_usage_error(s, "--runs %s: a number of runs per point, 1 to %s", text_show(v, '\'', &shown),
                                 max);
    }
    s->runs = (unsigned)n;
    return 0;
}

/* A job's flag (arg, "--x" or "--x=v") that is no option of the master's
 * nor the sweep's, with one near it: "unknown option --order-see: did you
 * mean --order-seed?" at once (-1), among the sweep's names too, which the
 * point's master would not know to suggest. Else 0: a name the master
 * takes, or one nothing is near, which the point's --dry-run refuses in
 * the master's words. */
static int sweep_check_job_flag(sweep *s, const char *arg)
{
    if (arg[0] != '-' || arg[1] != '-' || arg[2] == '\0')
        return 0;
    char name[128];
    size_t len = strcspn(arg + 2, "=");
    if (len >= sizeof name)
        return 0;
    for (size_t i = 0; i < len; i++)
        name[i] = arg[2 + i] == '_' ? '-' : arg[2 + i]; /* both spellings, as the master */
    name[len] = '\0';
    static const char *const owns[] = {"runs", "out", "sweep-file", "order", "order-seed", "max-points",
                                       "report", "dry-run", "local", "help"};
    const char *more[sizeof owns / sizeof *owns + 2 * SD_COUNT];
    size_t n = 0;
    for (size_t i = 0; i < sizeof owns / sizeof *owns; i++)
        more[n++] = owns[i];
    for (int d = 0; d < SD_COUNT; d++) {
        more[n++] = sweep_dims[d].flag + 2;
        if (sweep_dims[d].alias)
            more[n++] = sweep_dims[d].alias + 2;
    }
    const char *near;
    if (opts_is_long_name(master_opts(), name, len, more, n, &near) || !near)
        return 0;
    text_shown shown;
    fprintf(s->err, "psbench-master sweep: unknown option --%s: did you mean --%s? (psbench-master sweep --help)\n",
            text_show(name, 0, &shown), near);
    return -1;
}

/* The command line: dimension lists, the sweep's own options, the job's. */
int sweep_parse_args(sweep *s, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int d;
        for (d = 0; d < SD_COUNT; d++)
            if (sweep_flag_is(a, sweep_dims[d].flag, &v) ||
                (sweep_dims[d].alias && sweep_flag_is(a, sweep_dims[d].alias, &v)))
                break;
        const char *own = NULL;
        static const char *const owns[] = {"--runs",       "--out",       "--sweep-file", "--order",
                                           "--order-seed", "--max-points", NULL};
        for (const char *const *o = owns; d == SD_COUNT && *o; o++)
            if (sweep_flag_is(a, *o, &v))
                own = *o;
        if (d == SD_COUNT && !own) {
            for (const char *const *o = sweep_owned_flags; *o; o++)
                if (sweep_flag_is(a, *o, &v))
                    return sweep_usage_error(s, "%s: the sweep sets it for each point%s", *o,
                                             strcmp(*o, "--ncudatrainer") == 0 || strcmp(*o, "--ncudaserver") == 0
                                                 ? " (use --device cuda with --ntrainer/--nserver)"
                                                 : "");
            if (sweep_flag_is(a, "--local", &v))
                s->local = true;
            if (sweep_flag_is(a, "--dry-run", &v)) {
                s->dry_run = true;
                continue;
            }
            if (sweep_check_job_flag(s, a) < 0)
                return -1;
            sweep_push(&s->job, &s->njob, a); /* the job's: its value, if any, follows as its own argument */
            continue;
        }
        const char *flag = d < SD_COUNT ? sweep_dims[d].flag : own;
        if (!v) {
            if (i + 1 >= argc)
                return sweep_usage_error(s, "%s needs a value%s", flag, "");
            v = argv[++i];
        }
        if (d < SD_COUNT) {
            if (sweep_split(&s->dim[d], flag, v, s->err) < 0)
                return -1;
            s->given[d] = true;
        } else if (strcmp(own, "--runs") == 0) {
            if (sweep_parse_runs(s, v) < 0)
                return -1;
            s->runs_given = true;
        } else if (strcmp(own, "--order") == 0) {
            text_shown shown;
            if (strcmp(v, "interleaved") != 0 && strcmp(v, "sequential") != 0)
                return sweep_usage_error(s, "--order %s: interleaved or sequential%s", text_show(v, '\'', &shown),
                                         "");
            s->sequential = strcmp(v, "sequential") == 0;
        } else if (strcmp(own, "--order-seed") == 0) {
            uint64_t n;
            char why[256];
            text_shown shown;
            if (cli_parse_u64("--order-seed", v, 0, UINT64_MAX, 0, &n, why, sizeof why) < 0)
                return sweep_usage_error(s, "--order-seed %s: a whole number%s", text_show(v, '\'', &shown), "");
            s->order_seed = n;
            s->order_seed_given = true;
        } else if (strcmp(own, "--max-points") == 0) {
            uint64_t n;
            char why[256], max[16];
            text_shown shown;
            snprintf(max, sizeof max, "%u", SWEEP_MAX_POINTS);
            if (cli_parse_u64("--max-points", v, 1, SWEEP_MAX_POINTS, 0, &n, why, sizeof why) < 0)
                return sweep_usage_error(s, "--max-points %s: a number of points, 1 to %s",
                                         text_show(v, '\'', &shown), max);
            s->max_points = (unsigned)n;
        } else if (strcmp(own, "--out") == 0) {
            free(s->out_dir);
            s->out_dir = sweep_strdup(v);
        } else {
            free(s->sweep_file);
            s->sweep_file = sweep_strdup(v);
        }
    }
    return 0;
}

/* A sweep file's value as a flag's text: a string, or a number; -1 for
 * another type, an empty string, or one longer than the buffer (cut, it
 * would be another value). */
static int sweep_file_value(const json_t *j, char *buf, size_t len)
{
    int n;
    if (json_is_string(j))
        n = snprintf(buf, len, "%s", json_string_value(j));
    else if (json_is_integer(j))
        n = snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
    else if (json_is_real(j))
        n = snprintf(buf, len, "%.17g", json_real_value(j));
    else
        return -1;
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* A sweep file's "dimensions" object: each list not given on the command
 * line, as the flag's text would give it. 0, or -1 (said). */
static int sweep_file_dims(sweep *s, const json_t *dims)
{
    if (!json_is_object(dims)) {
        fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"dimensions\" must be an object\n", s->sweep_file);
        return -1;
    }
    const char *dk;
    json_t *list;
    json_object_foreach((json_t *)dims, dk, list) {
        int d;
        for (d = 0; d < SD_COUNT && strcmp(dk, sweep_dims[d].name) != 0; d++)
            ;
        if (d == SD_COUNT) {
            text_shown ks;
            fprintf(s->err,
                    "psbench-master sweep: --sweep-file %s: unknown dimension %s (device, transport, "
                    "trainer, ntrainer, nserver, bucket_cap_mb, hook)\n",
                    s->sweep_file, text_show(dk, '"', &ks));
            return -1;
        }
        if (s->given[d])
            continue;
        if (!json_is_array(list) || json_array_size(list) == 0) {
            fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"%s\" must be a non-empty list\n",
                    s->sweep_file, dk);
            return -1;
        }
        char text[8192] = "";
        size_t used = 0, i;
        json_t *item;
        json_array_foreach(list, i, item) {
            char buf[1024];
            if (sweep_file_value(item, buf, sizeof buf) < 0 || strchr(buf, ',')) {
                fprintf(s->err,
                        "psbench-master sweep: --sweep-file %s: \"%s\" item %zu must be a string or a number "
                        "(no comma, at most %zu characters)\n",
                        s->sweep_file, dk, i + 1, sizeof buf - 1);
                return -1;
            }
            used += (size_t)snprintf(text + used, used < sizeof text ? sizeof text - used : 0, "%s%s",
                                     i ? "," : "", buf);
        }
        if (used >= sizeof text) {
            fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"%s\" is too long\n", s->sweep_file, dk);
            return -1;
        }
        if (sweep_split(&s->dim[d], dk, text, s->err) < 0)
            return -1;
    }
    return 0;
}

/* --sweep-file F: its dimensions (those not given on the command line),
 * runs (unless given) and job flags (before the command line's). */
int sweep_load_file(sweep *s)
{
    char why[512];
    json_error_t je;
    json_t *doc;
    if (userpath_load_json(s->sweep_file, JSON_REJECT_DUPLICATES, &doc, &je, why, sizeof why) == -1) {
        fprintf(s->err, "psbench-master sweep: --sweep-file %s: %s\n", s->sweep_file, why);
        return -1;
    }
    if (!json_is_object(doc)) {
        fprintf(s->err, "psbench-master sweep: --sweep-file %s: %s\n", s->sweep_file,
                doc ? "not a JSON object" : je.text);
        json_decref(doc);
        return -1;
    }
    int rc = -1;
    const char *key;
    json_t *val;
    char **job = NULL;
    size_t njob = 0;
    json_object_foreach(doc, key, val) {
        if (strcmp(key, "runs") == 0) {
            if (!json_is_integer(val) || json_integer_value(val) < 1 || json_integer_value(val) > SWEEP_MAX_RUNS) {
                fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"runs\" must be an integer, 1 to %u\n",
                        s->sweep_file, SWEEP_MAX_RUNS);
                goto out;
            }
            if (!s->runs_given)
                s->runs = (unsigned)json_integer_value(val);
        } else if (strcmp(key, "job") == 0) {
            size_t i;
            json_t *f;
            if (!json_is_array(val))
                goto bad_job;
            json_array_foreach(val, i, f) {
                char buf[4096];
                if (sweep_file_value(f, buf, sizeof buf) < 0)
                    goto bad_job;
                sweep_push(&job, &njob, buf);
            }
        } else if (strcmp(key, "dimensions") == 0) {
            if (sweep_file_dims(s, val) < 0)
                goto out;
        } else {
            text_shown ks;
            fprintf(s->err, "psbench-master sweep: --sweep-file %s: unknown key %s (dimensions, runs, job)\n",
                    s->sweep_file, text_show(key, '"', &ks));
            goto out;
        }
    }
    /* The file's job flags first: the command line's come after, and win. */
    for (size_t i = 0; i < s->njob; i++)
        sweep_push(&job, &njob, s->job[i]);
    sweep_free_list(s->job, s->njob);
    s->job = job;
    s->njob = njob;
    job = NULL;
    njob = 0;
    for (size_t i = 0; i < s->njob; i++)
        if (strcmp(s->job[i], "--local") == 0)
            s->local = true;
    rc = 0;
    goto out;
bad_job:
    fprintf(s->err,
            "psbench-master sweep: --sweep-file %s: \"job\" must be a list of flags (strings or numbers of at most "
            "4095 characters)\n",
            s->sweep_file);
out:
    sweep_free_list(job, njob);
    json_decref(doc);
    return rc;
}

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
    static const int plain[] = {SD_TRANSPORT, SD_TRAINER, SD_BUCKET, SD_HOOK};
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

/* The point's label: the values of the dimensions with more than one, the
 * hook first; without_hook: the others only ("where" a pair ran). */
char *sweep_label(const sweep *s, const json_t *config, bool without_hook)
{
    static const int order[] = {SD_HOOK, SD_DEVICE, SD_TRANSPORT, SD_TRAINER, SD_NTRAINER, SD_NSERVER, SD_BUCKET};
    char buf[1024];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        int d = order[i];
        if (s->dim[d].n < 2 || (without_hook && (d == SD_HOOK || d == SD_NSERVER)))
            continue;
        json_t *v = json_object_get(config, sweep_dims[d].name);
        char val[256];
        if (json_is_string(v))
            snprintf(val, sizeof val, "%s", json_string_value(v));
        else if (json_is_number(v))
            snprintf(val, sizeof val, "%g", json_number_value(v));
        else
            snprintf(val, sizeof val, "-");
        used += (size_t)snprintf(buf + used, used < sizeof buf ? sizeof buf - used : 0, "%s%s%s%s",
                                 used ? " " : "", d == SD_HOOK ? "" : sweep_dims[d].name, d == SD_HOOK ? "" : "=", val);
    }
    return sweep_strdup(buf[0] ? buf : without_hook ? "every point" : "the job");
}

/* The point's configuration from its plan (sweep.h "config"). */
static json_t *sweep_config(const json_t *plan, const char *transport)
{
    json_t *cap = json_object_get(plan, "bucket_cap_mb");
    return json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:s, s:O}", "hook", json_object_get(plan, "hook"),
                     "trainer", json_object_get(plan, "trainer"), "model", json_object_get(plan, "model"),
                     "ntrainer", json_object_get(plan, "ntrainer"), "nserver", json_object_get(plan, "nserver"),
                     "bucket_cap_mb", cap ? cap : json_null(), "device", json_object_get(plan, "device"),
                     "transport", transport ? transport : json_string_value(json_object_get(plan, "transport")),
                     "uses_servers", json_object_get(plan, "uses_servers"));
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
