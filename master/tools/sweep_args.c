/* sweep_args.c — what a sweep is asked (master/tools/sweep_int.h): its
 * command line, one option table (shared/opts.h: the --help too) whose
 * dimension options take comma-separated lists, with every other argument
 * passed through to the points as the job's, and a sweep file; and the
 * lists of strings a sweep keeps. */
#include "master/tools/sweep_int.h"
#include "master/opts.h"
#include "shared/cli.h"
#include "shared/log.h"
#include "shared/opts.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const sweep_dim_def sweep_dims[SD_COUNT] = {
    [SD_DEVICE] = {"device", "--device"},
    [SD_TRANSPORT] = {"transport", "--transport"},
    [SD_TRAINER] = {"trainer", "--trainer"},
    [SD_NTRAINER] = {"ntrainer", "--ntrainer"},
    [SD_NSERVER] = {"nserver", "--nserver"},
    [SD_BUCKET] = {"bucket_cap_mb", "--bucket-cap-mb"},
    [SD_COMPRESS] = {"compress", "--compress"},
    [SD_HOOK] = {"hook", "--ddp-hook"},
};

/* The job's flags a sweep sets itself, per point (besides --out and
 * --runs, which are its own options). */
static const char *const sweep_job_owned[] = {"--ncudatrainer", "--ncudaserver", "--linger", NULL};

/* ---- argument lists (every list of strings a sweep keeps: NULL-ended, each string its own) ---- */

char *sweep_strdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort(); /* a few bytes of a command line: nothing sensible is left to do */
    return d;
}

void sweep_push(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 2) * sizeof **v);
    if (!nv)
        abort();
    nv[(*n)++] = sweep_strdup(s);
    nv[*n] = NULL;
    *v = nv;
}

void sweep_free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
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

/* ---- the option table -------------------------------------------------------------- */

/* A whole number in min..max for `flag`, or "FLAG 'V': what" in err. */
static int sweep_opt_number(const char *flag, const char *arg, uint64_t min, uint64_t max, const char *what,
                            uint64_t *n, char *err, size_t errlen)
{
    char why[256];
    if (cli_parse_u64(flag, arg, min, max, 0, n, why, sizeof why) == 0)
        return 0;
    text_shown shown;
    errbuf_set(err, errlen, "%s %s: %s", flag, text_show(arg, '\'', &shown), what);
    return -1;
}

static int sweep_opt_runs(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                          size_t errlen)
{
    char what[64];
    uint64_t n;
    snprintf(what, sizeof what, "a number of runs per point, 1 to %u", SWEEP_MAX_RUNS);
    if (sweep_opt_number("--runs", arg, 1, SWEEP_MAX_RUNS, what, &n, err, errlen) < 0)
        return -1;
    ((sweep *)settings)->runs = (unsigned)n;
    return 0;
}

static int sweep_opt_max_points(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                size_t errlen)
{
    char what[64];
    uint64_t n;
    snprintf(what, sizeof what, "a number of points, 1 to %u", SWEEP_MAX_POINTS);
    if (sweep_opt_number("--max-points", arg, 1, SWEEP_MAX_POINTS, what, &n, err, errlen) < 0)
        return -1;
    ((sweep *)settings)->max_points = (unsigned)n;
    return 0;
}

static int sweep_opt_order_seed(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                size_t errlen)
{
    return sweep_opt_number("--order-seed", arg, 0, UINT64_MAX, "a whole number", &((sweep *)settings)->order_seed,
                            err, errlen);
}

static int sweep_opt_order(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                           size_t errlen)
{
    if (strcmp(arg, "interleaved") != 0 && strcmp(arg, "sequential") != 0) {
        text_shown shown;
        errbuf_set(err, errlen, "--order %s: interleaved or sequential", text_show(arg, '\'', &shown));
        return -1;
    }
    ((sweep *)settings)->sequential = strcmp(arg, "sequential") == 0;
    return 0;
}

/* A dimension's list, as given: split once the line is read (sweep_split,
 * as a sweep file's lists are), the last one given winning. */
#define SWEEP_DIM(d, n, al, m, h)                                                                              \
    {.kind = OPT_STRING, .name = n, .aliases = al, .meta = m, .to = OPT_AT(sweep, list[d]),                   \
     .given = {OPT_AT(sweep, given[d])}, .help = h}
static const char *const sweep_hook_aliases[] = {"hook", NULL};
static const char *const sweep_ntrainer_aliases[] = {"number-trainers", NULL};
static const char *const sweep_nserver_aliases[] = {"number-ps", NULL};

static const opt_spec sweep_specs[] = {
    {.kind = OPT_TEXT,
     .help = "usage: psbench-master sweep [sweep options] [job options]\n"
             "       psbench-master sweep --report DIR\n"
             "\n"
             "Runs a matrix of jobs on this host, one after the other, each point --runs\n"
             "times with its own warm-up, and answers the question the runs are for: is a\n"
             "parameter server faster than allreduce here, by how much, and where does the\n"
             "step go. One row is printed per point as it ends (as nccl-tests does), and on\n"
             "stderr, while a run goes, \"point k of N: LABEL, run r of R, time left ~T\" (on\n"
             "a terminal one line that rewrites itself, else a line per run); the\n"
             "folder gets sweep.csv (tidy: one row per point x run x metric, every\n"
             "configuration value a column), sweep.json, report.html (self-contained: open\n"
             "it anywhere) and each point's files under points/NNN/ (results.json, the CSVs,\n"
             "master.log).\n"
             "\n"
             "The matrix (each a comma-separated list; the product of all is run, the hook\n"
             "varying fastest):\n"},
    SWEEP_DIM(SD_HOOK, "ddp-hook", sweep_hook_aliases, "H,...", "hooks (also --hook): rpc_hook, allreduce_hook, ..."),
    SWEEP_DIM(SD_TRAINER, "trainer", NULL, "ID,...", "trainer configurations"),
    SWEEP_DIM(SD_NTRAINER, "ntrainer", sweep_ntrainer_aliases, "N,...", "trainers"),
    SWEEP_DIM(SD_NSERVER, "nserver", sweep_nserver_aliases, "N,...",
              "parameter servers (a point whose hook uses none runs\n"
              "without, once)"),
    SWEEP_DIM(SD_BUCKET, "bucket-cap-mb", NULL, "MB,...", "DDP bucket caps"),
    SWEEP_DIM(SD_COMPRESS, "compress", NULL, "C,...",
              "the gradients' type on the wire: none, fp16, bf16, ...\n"
              "(as the job's --compress takes it); a point that differs\n"
              "from a `none` one only in it shows its final loss less\n"
              "that one's and the relative distance of their final\n"
              "parameters; a point whose hook refuses a value is\n"
              "refused with the sweep, as any point's bad value"),
    SWEEP_DIM(SD_DEVICE, "device", NULL, "cpu,cuda",
              "where trainers and servers run (cuda: --ncudatrainer\n"
              "and --ncudaserver for the counts)"),
    SWEEP_DIM(SD_TRANSPORT, "transport", NULL, "T,...", "auto, tcp, shm"),
    {.kind = OPT_TEXT,
     .help = "\n"
             "The sweep's own:\n"},
    {.kind = OPT_CUSTOM, .name = "runs", .meta = "N", .parse = sweep_opt_runs, .given = {OPT_AT(sweep, runs_given)},
     .help = "runs per point (default 1), each a job of its own with\n"
             "its own warm-up. The figures are the steady state's\n"
             "(every step after each trainer's first) with a 95%\n"
             "interval: Student t on the log scale from 3 runs, a\n"
             "block bootstrap over the steps below; a PS/allreduce\n"
             "ratio names a winner only where its interval (a\n"
             "bootstrap over runs and steps) excludes 1"},
    {.kind = OPT_CUSTOM, .name = "order", .meta = "interleaved|sequential", .parse = sweep_opt_order,
     .help = "\n"
             "interleaved (default): the runs of points that differ\n"
             "only in the hook alternate (PS, allreduce, PS, ...), the\n"
             "first side drawn from --order-seed, so that a drift of\n"
             "the host lands on both; sequential: a point's runs back\n"
             "to back"},
    {.kind = OPT_CUSTOM, .name = "order-seed", .meta = "N", .parse = sweep_opt_order_seed,
     .given = {OPT_AT(sweep, order_seed_given)}, .help = "the draw's seed (default: from the clock; printed)"},
    {.kind = OPT_STRING, .name = "out", .meta = "DIR", .to = OPT_AT(sweep, out_dir),
     .help = "the sweep's folder (default sweep-YYYYMMDD-HHMMSS); it\n"
             "must not hold a sweep already"},
    {.kind = OPT_STRING, .name = "sweep-file", .meta = "F", .to = OPT_AT(sweep, sweep_file),
     .help = "the matrix from a JSON file: {\"dimensions\": {\"hook\":\n"
             "[\"rpc_hook\", \"allreduce_hook\"], \"ntrainer\": [2, 4],\n"
             "...}, \"runs\": 3, \"job\": [\"--local\", \"--epochs\", \"2\"]};\n"
             "a flag given on the command line wins over the file"},
    {.kind = OPT_CUSTOM, .name = "max-points", .meta = "N", .parse = sweep_opt_max_points,
     .help = "refuse a matrix of more than N points (default 1000,\n"
             "at most 100000): every point is checked by its own\n"
             "--dry-run before anything runs, and runs for minutes"},
    /* Alone: where it stands, the rest of the line is not read. */
    {.kind = OPT_STRING, .name = "report", .meta = "DIR", .to = OPT_AT(sweep, report), .action = SWEEP_REPORT,
     .missing = "needs a folder",
     .help = "write DIR/report.html again from DIR/sweep.json, run\n"
             "nothing"},
    {.kind = OPT_FLAG, .name = "no-trace", .to = OPT_AT(sweep, no_trace),
     .help = "run the points untraced: no step's timeline in the\n"
             "report (by default each run traces the last 5 steps of\n"
             "its timed pass, --trace --trace-steps A:B; a job's own\n"
             "--trace-steps is its window)"},
    {.kind = OPT_FLAG, .name = "dry-run", .to = OPT_AT(sweep, dry_run),
     .help = "print each point, its configuration and its command\n"
             "line, run nothing"},
    {.shared = &opts_help, .help = "this text"},
    {.kind = OPT_TEXT,
     .help = "\n"
             "Every other option is the job's (psbench-master --help) and goes to every point,\n"
             "e.g. --local, --steps, --epochs, --model, --backend, --quiet-host, --set\n"
             "KIND.KEY=VALUE. Unless the job gives --steps, every point runs at least 50\n"
             "steady-state steps per trainer and run: where --epochs (or its default) gives\n"
             "fewer, the sweep runs --steps 51 --warmup-steps 10 instead and says so. With --local\n"
             "each point's servers and trainers are spawned on this host; without it, start\n"
             "the nodes by hand with --master HOST:PORT --follow (every point's master listens\n"
             "at the job's --listen): each point takes the ranks it needs, the others wait,\n"
             "and they stay up from point to point. Every point is checked first (its\n"
             "--dry-run), so a bad value stops the sweep before anything runs.\n"
             "\n"
             "Examples:\n"
             "  psbench-master sweep --local --ddp-hook rpc_hook,allreduce_hook --bucket-cap-mb 1,4,25\n"
             "  psbench-master sweep --local --ddp-hook rpc_hook,allreduce_hook --ntrainer 2,4 \\\n"
             "      --runs 3 --steps 60 --out sw\n"
             "  psbench-master sweep --sweep-file configs/sweep.json --out sw2\n"
             "\n"
             "Exit status: 0 every point done; 1 a point failed (the others still ran) or a file\n"
             "could not be written; 2 a usage error or a point whose plan is refused; 128 + N\n"
             "signal N stopped the sweep: 130 SIGINT, 143 SIGTERM, 129 SIGHUP (treated as\n"
             "SIGTERM). A signal stops the point running (its master ends its run), writes\n"
             "sweep.json and sweep.csv with the points done and marks the rest \"not run\"\n"
             "(the interrupted one with why); the last line says so.\n"},
    OPTS_END,
};
#undef SWEEP_DIM

static const opts_table sweep_table = {.prog = "psbench-master sweep", .specs = sweep_specs, .help_col = 28};

void sweep_usage(FILE *f)
{
    opts_usage(&sweep_table, f);
}

/* ---- the job's flags ------------------------------------------------------------- */

/* A job's flag (arg, "--x" or "--x=v") that is no option of the master's
 * nor the sweep's, with one near it: "unknown option --order-see: did you
 * mean --order-seed?" at once (-1 with err), among the sweep's names too,
 * which the point's master would not know to suggest. Else 0: a name the
 * master takes, or one nothing is near, which the point's --dry-run
 * refuses in the master's words. */
static int sweep_check_job_flag(const char *arg, char *err, size_t errlen)
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
    const char *own[OPTS_MAX];
    size_t n = 0;
    opt_spec o;
    for (size_t i = 0; opts_entry(&sweep_table, i, &o); i++) {
        if (o.kind == OPT_TEXT)
            continue;
        own[n++] = o.name;
        for (size_t a = 0; o.aliases && o.aliases[a]; a++)
            own[n++] = o.aliases[a];
    }
    const char *near;
    if (opts_is_long_name(master_opts(), name, len, own, n, &near) || !near)
        return 0;
    text_shown shown;
    errbuf_set(err, errlen, "unknown option --%s: did you mean --%s?", text_show(name, 0, &shown), near);
    return -1;
}

/* An argument that is none of the sweep's options: the job's, passed to
 * every point as given (a flag's value, if any, follows as an argument of
 * its own), unless the sweep sets it per point. The job's --local is the
 * sweep's to know too: its points' nodes are spawned. */
static int sweep_job_arg(const char *arg, void *settings, char *err, size_t errlen)
{
    sweep *s = settings;
    const char *v;
    for (const char *const *o = sweep_job_owned; *o; o++)
        if (sweep_flag_is(arg, *o, &v)) {
            errbuf_set(err, errlen, "%s: the sweep sets it for each point%s", *o,
                       strcmp(*o, "--linger") != 0 ? " (use --device cuda with --ntrainer/--nserver)" : "");
            return -1;
        }
    if (sweep_flag_is(arg, "--local", &v))
        s->local = true;
    if (sweep_check_job_flag(arg, err, errlen) < 0)
        return -1;
    sweep_push(&s->job, &s->njob, arg);
    return 0;
}

int sweep_parse_args(sweep *s, int argc, char **argv)
{
    char err[1024];
    int rc = opts_init(&sweep_table, s, err, sizeof err);
    if (rc == 0)
        rc = opts_parse_args(&sweep_table, argc, argv, s, sweep_job_arg, err, sizeof err);
    if (rc < 0) {
        fprintf(s->err, "psbench-master sweep: %s (psbench-master sweep --help)\n", err);
        return -1;
    }
    for (int d = 0; rc == OPTS_OK && d < SD_COUNT; d++)
        if (s->list[d] && sweep_split(&s->dim[d], sweep_dims[d].flag, s->list[d], s->err) < 0)
            return -1;
    return rc;
}

/* ---- a sweep file ------------------------------------------------------------------ */

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
                    "trainer, ntrainer, nserver, bucket_cap_mb, compress, hook)\n",
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
