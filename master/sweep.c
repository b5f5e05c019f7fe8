/* sweep.c — `psbench-master sweep`: a matrix of jobs (see sweep.h).
 *
 * The sweep is a driver, not a second master: each point is one child
 * psbench-master (this very binary, /proc/self/exe) with the point's
 * flags. That keeps a point exactly what the same command line run by
 * hand gives (the same checks, the same files, the same figures), and a
 * point that fails cannot take the sweep down. The order of work:
 *
 *   parse      dimension flags (lists), the sweep's own, the job's flags
 *   plan       each point asked for its plan (`--dry-run`'s "plan:" line),
 *              so every bad value fails the sweep before anything runs,
 *              and a hook without servers drops the server count
 *   run        point after point: the child, its results read back, a row
 *   write      sweep.json, sweep.csv, report.html (sweep_report.c)
 */
#include "master/sweep.h"

#include "master/summary.h"
#include "master/sweep_report.h"
#include "shared/atomicfile.h"
#include "shared/userpath.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SWEEP_MAX_POINTS 10000u
#define SWEEP_MAX_RUNS 1000u

/* ---- the dimensions ------------------------------------------------------------ */

/* The matrix's dimensions, outermost first: the hook varies fastest, so a
 * parameter-server point and its allreduce partner run back to back (the
 * same host state, and the ratio printed as soon as the pair is in). */
typedef enum { SD_DEVICE, SD_TRANSPORT, SD_TRAINER, SD_NTRAINER, SD_NSERVER, SD_BUCKET, SD_HOOK, SD_COUNT } sweep_dim;

typedef struct {
    const char *name;  /* in sweep.json, sweep.csv and a sweep file */
    const char *flag;  /* the sweep's flag (a list) */
    const char *alias; /* another spelling, or NULL */
} sweep_dim_def;

static const sweep_dim_def sweep_dims[SD_COUNT] = {
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

typedef struct {
    char **v; /* the values as given (each a malloc'd string) */
    size_t n;
} sweep_values;

/* One point of the matrix. */
typedef enum { SP_PLANNED, SP_DONE, SP_FAILED, SP_NOT_RUN } sweep_point_state;

typedef struct {
    unsigned index;       /* 1-based, in matrix order (duplicates dropped) */
    char **argv;          /* the child's flags after the program name (owned, NULL-ended) */
    size_t argc;
    json_t *config;       /* the point's resolved configuration (sweep.h "config") */
    char *label;          /* the varied dimensions' values */
    char dir[64];         /* "points/NNN" */
    sweep_point_state state;
    char *error;          /* why it failed, or NULL */
    json_t *runs;         /* [{run, headline}] */
    json_t *doc;          /* its sweep.json entry, made once it ended */
    double step_mean, step_low, step_high; /* step p50 over the runs (interval NAN with one run) */
    size_t nruns;
} sweep_point;

typedef struct {
    sweep_values dim[SD_COUNT];
    bool given[SD_COUNT];   /* on the command line (wins over the sweep file) */
    char **job;             /* the job's flags, every point's (owned strings) */
    size_t njob;
    unsigned runs;
    bool runs_given;
    char *out_dir;
    char *sweep_file;
    bool local;
    bool dry_run;           /* --dry-run: the points and their command lines, nothing run */
    char exe[PATH_MAX];
    sweep_point *points;
    size_t npoints;
    json_t *comparisons;
    FILE *out, *err;
    int argc;
    char **argv;
} sweep;

static volatile sig_atomic_t sweep_signal;
static volatile pid_t sweep_child;

/* ---- small helpers -------------------------------------------------------------- */

static char *sweep_strdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort(); /* a few bytes of a command line: nothing sensible is left to do */
    return d;
}

static void sweep_push(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 2) * sizeof **v);
    if (!nv)
        abort();
    nv[(*n)++] = sweep_strdup(s);
    nv[*n] = NULL;
    *v = nv;
}

static void sweep_free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
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
        if (len == 0) {
            fprintf(err, "psbench-master sweep: %s '%s': an empty value (a list is VALUE,VALUE,...)\n", flag, list);
            return -1;
        }
        char *item = strndup(p, len);
        if (!item)
            abort();
        for (size_t i = 0; i < vals->n; i++)
            if (strcmp(vals->v[i], item) == 0) {
                fprintf(err, "psbench-master sweep: %s '%s': '%s' is given twice\n", flag, list, item);
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
static bool sweep_flag_is(const char *arg, const char *name, const char **inline_value)
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

static void sweep_now_iso(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- usage ------------------------------------------------------------------------ */

static void sweep_usage(FILE *f)
{
    fputs("usage: psbench-master sweep [sweep options] [job options]\n"
          "       psbench-master sweep --report DIR\n"
          "\n"
          "Runs a matrix of jobs on this host, one after the other, each point --runs\n"
          "times with its own warm-up, and answers the question the runs are for: is a\n"
          "parameter server faster than allreduce here, by how much, and where does the\n"
          "step go. One row is printed per point as it ends (as nccl-tests does); the\n"
          "folder gets sweep.csv (tidy: one row per point x run x metric, every\n"
          "configuration value a column), sweep.json, report.html (self-contained: open\n"
          "it anywhere) and each point's files under points/NNN/ (results.json, the CSVs,\n"
          "master.log).\n"
          "\n"
          "The matrix (each a comma-separated list; the product of all is run, the hook\n"
          "varying fastest):\n"
          "  --ddp-hook H,...          hooks (also --hook): rpc_hook, allreduce_hook, ...\n"
          "  --trainer ID,...          trainer configurations\n"
          "  --ntrainer N,...          trainers\n"
          "  --nserver N,...           parameter servers (a point whose hook uses none runs\n"
          "                            without, once)\n"
          "  --bucket-cap-mb MB,...    DDP bucket caps\n"
          "  --device cpu,cuda         where trainers and servers run (cuda: --ncudatrainer\n"
          "                            and --ncudaserver for the counts)\n"
          "  --transport T,...         auto, tcp, shm\n"
          "\n"
          "The sweep's own:\n"
          "  --runs N                  runs per point (default 1; 2 or more give each figure\n"
          "                            a 95% confidence interval, and a PS/allreduce ratio\n"
          "                            whose intervals overlap is called within noise)\n"
          "  --out DIR                 the sweep's folder (default sweep-YYYYMMDD-HHMMSS); it\n"
          "                            must not hold a sweep already\n"
          "  --sweep-file F            the matrix from a JSON file: {\"dimensions\": {\"hook\":\n"
          "                            [\"rpc_hook\", \"allreduce_hook\"], \"ntrainer\": [2, 4],\n"
          "                            ...}, \"runs\": 3, \"job\": [\"--local\", \"--epochs\", \"2\"]};\n"
          "                            a flag given on the command line wins over the file\n"
          "  --report DIR              write DIR/report.html again from DIR/sweep.json, run\n"
          "                            nothing\n"
          "  --dry-run                 print each point, its configuration and its command\n"
          "                            line, run nothing\n"
          "  --help                    this text\n"
          "\n"
          "Every other option is the job's (psbench-master --help) and goes to every point,\n"
          "e.g. --local, --epochs, --model, --backend, --set KIND.KEY=VALUE. With --local\n"
          "each point's servers and trainers are spawned on this host; without it, start\n"
          "the nodes by hand with --master HOST:PORT --follow (every point's master listens\n"
          "at the job's --listen): each point takes the ranks it needs, the others wait,\n"
          "and they stay up from point to point. Every point is checked first (its\n"
          "--dry-run), so a bad value stops the sweep before anything runs.\n"
          "\n"
          "Examples:\n"
          "  psbench-master sweep --local --ddp-hook rpc_hook,allreduce_hook --bucket-cap-mb 1,4,25\n"
          "  psbench-master sweep --local --ddp-hook rpc_hook,allreduce_hook --ntrainer 2,4 \\\n"
          "      --runs 3 --epochs 4 --out sw\n"
          "  psbench-master sweep --sweep-file configs/sweep.json --out sw2\n"
          "\n"
          "Exit status: 0 every point done; 1 a point failed (the others still ran) or a file\n"
          "could not be written; 2 a usage error or a point whose plan is refused.\n",
          f);
}

/* ---- parsing ---------------------------------------------------------------------- */

static int sweep_usage_error(sweep *s, const char *fmt, const char *a, const char *b)
{
    fputs("psbench-master sweep: ", s->err);
    fprintf(s->err, fmt, a, b);
    fputs(" (psbench-master sweep --help)\n", s->err);
    return -1;
}

/* A number of runs, 1..SWEEP_MAX_RUNS. */
static int sweep_parse_runs(sweep *s, const char *v)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || end == v || v[0] == '-' || n < 1 || n > SWEEP_MAX_RUNS) {
        char max[16];
        snprintf(max, sizeof max, "%u", SWEEP_MAX_RUNS);
        return sweep_usage_error(s, "--runs '%s': a number of runs per point, 1 to %s", v, max);
    }
    s->runs = (unsigned)n;
    return 0;
}

/* The command line: dimension lists, the sweep's own options, the job's. */
static int sweep_parse_args(sweep *s, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int d;
        for (d = 0; d < SD_COUNT; d++)
            if (sweep_flag_is(a, sweep_dims[d].flag, &v) ||
                (sweep_dims[d].alias && sweep_flag_is(a, sweep_dims[d].alias, &v)))
                break;
        const char *own = NULL;
        static const char *const owns[] = {"--runs", "--out", "--sweep-file", NULL};
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

/* A sweep file's value as a flag's text: a string, or a number. */
static int sweep_file_value(const json_t *j, char *buf, size_t len)
{
    if (json_is_string(j))
        snprintf(buf, len, "%s", json_string_value(j));
    else if (json_is_integer(j))
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
    else if (json_is_real(j))
        snprintf(buf, len, "%.17g", json_real_value(j));
    else
        return -1;
    return buf[0] ? 0 : -1;
}

/* --sweep-file F: its dimensions (those not given on the command line),
 * runs (unless given) and job flags (before the command line's). */
static int sweep_load_file(sweep *s)
{
    char why[512];
    int fd = userpath_open_read(s->sweep_file, why, sizeof why);
    if (fd < 0) {
        fprintf(s->err, "psbench-master sweep: --sweep-file %s: %s\n", s->sweep_file, why);
        return -1;
    }
    json_error_t je;
    json_t *doc = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
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
            if (!json_is_object(val)) {
                fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"dimensions\" must be an object\n",
                        s->sweep_file);
                goto out;
            }
            const char *dk;
            json_t *list;
            json_object_foreach(val, dk, list) {
                int d;
                for (d = 0; d < SD_COUNT && strcmp(dk, sweep_dims[d].name) != 0; d++)
                    ;
                if (d == SD_COUNT) {
                    fprintf(s->err,
                            "psbench-master sweep: --sweep-file %s: unknown dimension \"%s\" (device, transport, "
                            "trainer, ntrainer, nserver, bucket_cap_mb, hook)\n",
                            s->sweep_file, dk);
                    goto out;
                }
                if (s->given[d])
                    continue;
                if (!json_is_array(list) || json_array_size(list) == 0) {
                    fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"%s\" must be a non-empty list\n",
                            s->sweep_file, dk);
                    goto out;
                }
                /* The file's list, as the flag's text would give it. */
                char text[8192] = "";
                size_t used = 0, i;
                json_t *item;
                json_array_foreach(list, i, item) {
                    char buf[1024];
                    if (sweep_file_value(item, buf, sizeof buf) < 0 || strchr(buf, ',')) {
                        fprintf(s->err,
                                "psbench-master sweep: --sweep-file %s: \"%s\" item %zu must be a string or a "
                                "number (no comma)\n",
                                s->sweep_file, dk, i + 1);
                        goto out;
                    }
                    used += (size_t)snprintf(text + used, used < sizeof text ? sizeof text - used : 0, "%s%s",
                                             i ? "," : "", buf);
                }
                if (used >= sizeof text) {
                    fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"%s\" is too long\n", s->sweep_file, dk);
                    goto out;
                }
                if (sweep_split(&s->dim[d], dk, text, s->err) < 0)
                    goto out;
            }
        } else {
            fprintf(s->err, "psbench-master sweep: --sweep-file %s: unknown key \"%s\" (dimensions, runs, job)\n",
                    s->sweep_file, key);
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
    fprintf(s->err, "psbench-master sweep: --sweep-file %s: \"job\" must be a list of flags (strings or numbers)\n",
            s->sweep_file);
out:
    sweep_free_list(job, njob);
    json_decref(doc);
    return rc;
}

/* ---- children ---------------------------------------------------------------------- */

static void sweep_on_signal(int sig)
{
    sweep_signal = sig;
    pid_t c = sweep_child;
    if (c > 0)
        kill(c, sig); /* the point's master ends its run, its children with it */
}

/* Run this binary with args (NULL-ended, args[0] the program); its stdout
 * and stderr go to the file log (created), or, with log NULL, into *text
 * (malloc'd, NUL-ended). The child's exit status (128 + signal when
 * killed), or -1 with err when it could not be started. */
static int sweep_spawn(sweep *s, char **args, const char *log, char **text, char *err, size_t errlen)
{
    int fds[2] = {-1, -1};
    int fd = -1;
    if (log) {
        fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(err, errlen, "%s: %s", log, strerror(errno));
            return -1;
        }
    } else if (pipe2(fds, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    /* A signal that comes while the child is being made waits until it is
     * known (sweep_child), then goes to it too; the child starts with
     * the default actions (a handler inherited across fork would take a
     * signal meant to end it before it execs). */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, &old);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        snprintf(err, errlen, "fork: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        if (fds[0] >= 0) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    if (pid == 0) {
        /* Its own process group: a Ctrl-C reaches the sweep, which passes
         * it on once; and it dies with the sweep. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        int o = log ? fd : fds[1];
        dup2(o, STDOUT_FILENO);
        dup2(o, STDERR_FILENO);
        execv(s->exe, args);
        dprintf(STDERR_FILENO, "psbench-master sweep: cannot run %s: %s\n", s->exe, strerror(errno));
        _exit(127);
    }
    sweep_child = pid;
    if (sweep_signal)
        kill(pid, sweep_signal);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (log) {
        close(fd);
    } else {
        close(fds[1]);
        size_t cap = 4096, used = 0;
        char *buf = malloc(cap);
        if (!buf)
            abort();
        for (;;) {
            if (used + 1024 > cap && !(buf = realloc(buf, cap *= 2)))
                abort();
            ssize_t r = read(fds[0], buf + used, cap - used - 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            used += (size_t)r;
        }
        buf[used] = '\0';
        close(fds[0]);
        *text = buf;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    sweep_child = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The child's argv: the program, the job's flags, then the point's. */
static char **sweep_child_argv(const sweep *s, const sweep_point *p, const char *const *extra)
{
    char **v = NULL;
    size_t n = 0;
    sweep_push(&v, &n, s->exe);
    for (size_t i = 0; i < s->njob; i++)
        sweep_push(&v, &n, s->job[i]);
    for (size_t i = 0; i < p->argc; i++)
        sweep_push(&v, &n, p->argv[i]);
    for (; extra && *extra; extra++)
        sweep_push(&v, &n, *extra);
    return v;
}

static size_t sweep_argv_len(char **v)
{
    size_t n = 0;
    while (v[n])
        n++;
    return n;
}

/* The last line of text that says what went wrong: the master's
 * "psbench-master: ..." line, else the last non-empty one. */
static char *sweep_error_line(const char *text)
{
    const char *best = NULL, *last = NULL;
    size_t best_len = 0, last_len = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len) {
            last = p;
            last_len = len;
            if (strncmp(p, "psbench-master: ", 16) == 0) {
                best = p;
                best_len = len;
            }
        }
        p += len + (nl ? 1 : 0);
    }
    if (!best) {
        best = last;
        best_len = last_len;
    }
    return best ? strndup(best, best_len) : sweep_strdup("no output");
}

/* ---- the plan ---------------------------------------------------------------------- */

/* The point's plan from its --dry-run: its "plan:" line as JSON, or NULL
 * with the reason in *why (malloc'd). */
static json_t *sweep_dry_run(sweep *s, sweep_point *p, char **why)
{
    static const char *const dry[] = {"--dry-run", NULL};
    char **args = sweep_child_argv(s, p, dry);
    char err[512], *text = NULL;
    int rc = sweep_spawn(s, args, NULL, &text, err, sizeof err);
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
static char *sweep_label(const sweep *s, const json_t *config, bool without_hook)
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
static int sweep_plan(sweep *s)
{
    size_t total = 1;
    for (int d = 0; d < SD_COUNT; d++) {
        size_t n = s->dim[d].n ? s->dim[d].n : 1;
        if (total > SWEEP_MAX_POINTS / n) {
            fprintf(s->err, "psbench-master sweep: the matrix has more than %u points\n", SWEEP_MAX_POINTS);
            return -1;
        }
        total *= n;
    }
    for (size_t i = 0; i < s->dim[SD_DEVICE].n; i++)
        if (strcmp(s->dim[SD_DEVICE].v[i], "cpu") != 0 && strcmp(s->dim[SD_DEVICE].v[i], "cuda") != 0) {
            fprintf(s->err, "psbench-master sweep: --device '%s': cpu or cuda\n", s->dim[SD_DEVICE].v[i]);
            return -1;
        }
    s->points = calloc(total, sizeof *s->points);
    if (!s->points)
        abort();
    for (size_t k = 0; k < total; k++) {
        size_t at[SD_COUNT];
        sweep_coords(s, k, at);
        sweep_point *p = &s->points[s->npoints];
        const char *dev = sweep_value(s, at, SD_DEVICE);
        bool cuda = dev && strcmp(dev, "cuda") == 0;
        const char *nt = sweep_value(s, at, SD_NTRAINER), *ns = sweep_value(s, at, SD_NSERVER);
        char ntbuf[16], nsbuf[16];
        char *why = NULL;
        /* First as a CPU job: does the hook use servers, and how many? */
        sweep_point_flags(p, s, at, false, nt, ns);
        json_t *plan = sweep_dry_run(s, p, &why);
        if (plan) {
            bool servers = json_is_true(json_object_get(plan, "uses_servers"));
            snprintf(ntbuf, sizeof ntbuf, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(plan, "ntrainer")));
            snprintf(nsbuf, sizeof nsbuf, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(plan, "nserver")));
            if (cuda || (!servers && ns)) {
                sweep_point_clear(p);
                sweep_point_flags(p, s, at, cuda, cuda ? ntbuf : nt, servers ? nsbuf : ns ? "0" : NULL);
                json_decref(plan);
                plan = sweep_dry_run(s, p, &why);
            }
        }
        if (!plan) {
            char *cmd = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&cmd, &len);
            for (size_t i = 0; f && i < p->argc; i++)
                fprintf(f, " %s", p->argv[i]);
            if (f)
                fclose(f);
            fprintf(s->err, "psbench-master sweep: point %zu of %zu (%s) is refused: %s\n", k + 1, total,
                    cmd && cmd[0] ? cmd + 1 : "the job's flags", why);
            free(cmd);
            free(why);
            sweep_point_clear(p);
            return -1;
        }
        bool dup = false;
        for (size_t j = 0; j < s->npoints && !dup; j++)
            dup = sweep_same_args(&s->points[j], p);
        if (dup) {
            sweep_point_clear(p);
            json_decref(plan);
            continue;
        }
        p->config = sweep_config(plan, sweep_value(s, at, SD_TRANSPORT));
        json_decref(plan);
        p->index = (unsigned)++s->npoints;
        p->label = sweep_label(s, p->config, false);
        snprintf(p->dir, sizeof p->dir, "points/%03u", p->index);
        p->runs = json_array();
        p->state = SP_PLANNED;
        p->step_mean = p->step_low = p->step_high = NAN;
    }
    return 0;
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
static void sweep_point_doc(sweep_point *p, json_t *env, json_int_t buckets)
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
static void sweep_collect(sweep *s, sweep_point *p)
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
static double sweep_compare(sweep *s, const sweep_point *p)
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

static void sweep_print_header(sweep *s)
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
            fprintf(o, "  %*s", sweep_width(s, d), sweep_dims[d].name);
    fprintf(o, "  %7s  %9s  %9s  %7s  %10s  %8s  %7s  %6s\n", "buckets", "MB/step", "step_ms", "+-95%", "samples/s",
            "exposed%", "GB/s", "PS/AR");
    fflush(o);
}

static double sweep_summary_mean(const sweep_point *p, const char *fig)
{
    json_t *v = json_object_get(json_object_get(json_object_get(p->doc, "summary"), fig), "mean");
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void sweep_print_row(sweep *s, const sweep_point *p, double ratio)
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
        fprintf(o, "  %*s", sweep_width(s, d), buf);
    }
    if (p->state != SP_DONE) {
        fprintf(o, "  FAILED: %s (%s/%s/master.log)\n", p->error ? p->error : "?", s->out_dir, p->dir);
        fflush(o);
        return;
    }
    json_t *b = json_object_get(p->doc, "buckets");
    char buckets[24] = "-", half[24] = "-", r[24] = "-";
    if (json_is_integer(b))
        snprintf(buckets, sizeof buckets, "%" JSON_INTEGER_FORMAT, json_integer_value(b));
    if (isfinite(p->step_high))
        snprintf(half, sizeof half, "%.2f", (p->step_high - p->step_low) / 2);
    if (isfinite(ratio))
        snprintf(r, sizeof r, "%.2f", ratio);
    json_t *exp = json_object_get(json_object_get(p->doc, "shares"), "exposed_comm");
    fprintf(o, "  %7s  %9.2f  %9.2f  %7s  %10.1f  %8.1f  %7.3f  %6s\n", buckets,
            sweep_summary_mean(p, "bytes_per_step") / 1e6, p->step_mean, half, sweep_summary_mean(p, "samples_per_s"),
            json_is_number(exp) ? 100 * json_number_value(exp) : NAN, sweep_summary_mean(p, "effective_gb_per_s"), r);
    fflush(o);
}

/* The answer, after the last row: each PS point against its allreduce. */
static void sweep_print_answer(sweep *s)
{
    FILE *o = s->out;
    size_t n = json_array_size(s->comparisons), i;
    json_t *c;
    fprintf(o, "#\n# PS/AR: the parameter server's step p50 over allreduce's at the same point (>1: allreduce is "
               "faster)\n");
    if (n == 0) {
        fprintf(o, "# the answer: no point ran both a parameter-server hook and allreduce_hook on the same "
                   "configuration (give --ddp-hook rpc_hook,allreduce_hook)\n");
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

static void sweep_csv_field(FILE *f, const char *v)
{
    if (!strpbrk(v, ",\"\n")) {
        fputs(v, f);
        return;
    }
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '"')
            fputc('"', f);
        fputc(*v, f);
    }
    fputc('"', f);
}

static void sweep_csv_json(FILE *f, const json_t *v)
{
    char buf[64];
    if (json_is_string(v))
        sweep_csv_field(f, json_string_value(v));
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
                sweep_csv_field(f, p->label);
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
static int sweep_write(sweep *s, const char *started)
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
    if (afile_write_json(path, doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER, err, sizeof err) < 0) {
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

/* ---- the run ------------------------------------------------------------------------ */

/* --dry-run: each point, its configuration and the command it would run. */
static void sweep_print_plan(sweep *s)
{
    fprintf(s->out, "# psbench-master sweep: dry run, nothing is started: %zu point(s) x %u run(s)\n", s->npoints,
            s->runs);
    for (size_t i = 0; i < s->npoints; i++) {
        const sweep_point *p = &s->points[i];
        char *cfg = json_dumps(p->config, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fprintf(s->out, "point %u: %s\n  config: %s\n  command: psbench-master", p->index, p->label,
                cfg ? cfg : "?");
        free(cfg);
        for (size_t j = 0; j < s->njob; j++)
            fprintf(s->out, " %s", s->job[j]);
        for (size_t j = 0; j < p->argc; j++)
            fprintf(s->out, " %s", p->argv[j]);
        fprintf(s->out, " --runs %u --out %s/%s\n", s->runs, s->out_dir ? s->out_dir : "DIR", p->dir);
    }
}

/* One point: its child master, its results, its row. */
static void sweep_run_point(sweep *s, sweep_point *p)
{
    char dir[PATH_MAX], log[PATH_MAX + 16], runs[16], err[512];
    snprintf(dir, sizeof dir, "%s/%s", s->out_dir, p->dir);
    snprintf(log, sizeof log, "%s/master.log", dir);
    snprintf(runs, sizeof runs, "%u", s->runs);
    if (isatty(fileno(s->err)))
        fprintf(s->err, "sweep: point %u of %zu: %s ...\r", p->index, s->npoints, p->label);
    const char *extra[] = {"--runs", runs, "--out", dir, NULL};
    char **args = sweep_child_argv(s, p, extra);
    int rc = userpath_make_dir(dir, err, sizeof err) < 0 ? -1 : sweep_spawn(s, args, log, NULL, err, sizeof err);
    sweep_free_list(args, sweep_argv_len(args));
    if (isatty(fileno(s->err)))
        fprintf(s->err, "\033[K");
    p->state = rc == 0 ? SP_DONE : SP_FAILED;
    if (rc < 0) {
        p->error = sweep_strdup(err);
    } else if (rc != 0) {
        /* The master's own words, from its log. */
        FILE *f = fopen(log, "r");
        char *text = NULL;
        size_t len = 0;
        if (f) {
            FILE *m = open_memstream(&text, &len);
            char buf[4096];
            size_t r;
            while (m && (r = fread(buf, 1, sizeof buf, f)) > 0)
                fwrite(buf, 1, r, m);
            if (m)
                fclose(m);
            fclose(f);
        }
        char *line = sweep_error_line(text ? text : "");
        size_t n = strlen(line) + 48;
        p->error = malloc(n);
        if (!p->error)
            abort();
        if (sweep_signal)
            snprintf(p->error, n, "stopped by a signal: %s", line);
        else
            snprintf(p->error, n, "exit %d: %s", rc, line);
        free(line);
        free(text);
    }
    sweep_collect(s, p);
    sweep_print_row(s, p, sweep_compare(s, p));
}

static void sweep_free(sweep *s)
{
    for (int d = 0; d < SD_COUNT; d++)
        sweep_free_list(s->dim[d].v, s->dim[d].n);
    sweep_free_list(s->job, s->njob);
    for (size_t i = 0; i < s->npoints; i++) {
        sweep_point *p = &s->points[i];
        sweep_free_list(p->argv, p->argc);
        json_decref(p->config);
        json_decref(p->runs);
        json_decref(p->doc);
        free(p->label);
        free(p->error);
    }
    free(s->points);
    json_decref(s->comparisons);
    free(s->out_dir);
    free(s->sweep_file);
}

/* --report DIR: DIR/report.html again from DIR/sweep.json. */
static int sweep_rerender(const char *dir, FILE *err)
{
    char path[PATH_MAX], msg[512];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc || !json_is_integer(json_object_get(doc, "psbench_sweep"))) {
        fprintf(err, "psbench-master sweep: %s: %s\n", path, doc ? "not a sweep.json (no \"psbench_sweep\")" : je.text);
        json_decref(doc);
        return 1;
    }
    snprintf(path, sizeof path, "%s/report.html", dir);
    int rc = sweep_report_write(path, doc, msg, sizeof msg);
    json_decref(doc);
    if (rc < 0) {
        fprintf(err, "psbench-master sweep: %s\n", msg);
        return 1;
    }
    return 0;
}

/* The sweep's folder: made, and not holding a sweep already. */
static int sweep_out_dir(sweep *s)
{
    if (!s->out_dir) {
        char name[64];
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        strftime(name, sizeof name, "sweep-%Y%m%d-%H%M%S", &tm);
        s->out_dir = sweep_strdup(name);
    }
    char path[PATH_MAX], why[512];
    snprintf(path, sizeof path, "%s/sweep.json", s->out_dir);
    struct stat st;
    if (stat(path, &st) == 0 || (snprintf(path, sizeof path, "%s/points", s->out_dir), stat(path, &st) == 0)) {
        fprintf(s->err, "psbench-master sweep: --out %s holds a sweep already: give another folder\n", s->out_dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/sweep.csv", s->out_dir);
    if (userpath_check_out_file(path, why, sizeof why) < 0) {
        fprintf(s->err, "psbench-master sweep: --out %s: %s\n", s->out_dir, why);
        return -1;
    }
    return 0;
}

int sweep_main(int argc, char **argv, FILE *out, FILE *err)
{
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            sweep_usage(out);
            return 0;
        }
        if (sweep_flag_is(argv[i], "--report", &v)) {
            if (!v && i + 1 >= argc) {
                fprintf(err, "psbench-master sweep: --report needs a folder (psbench-master sweep --help)\n");
                return 2;
            }
            return sweep_rerender(v ? v : argv[i + 1], err);
        }
    }
    sweep s = {.runs = 1, .out = out, .err = err, .argc = argc - 1, .argv = argv + 1};
    int code = 2;
    char started[32];
    if (sweep_parse_args(&s, argc, argv) < 0 || (s.sweep_file && sweep_load_file(&s) < 0))
        goto out;
    ssize_t n = readlink("/proc/self/exe", s.exe, sizeof s.exe - 1);
    if (n <= 0) {
        fprintf(err, "psbench-master sweep: /proc/self/exe: %s\n", strerror(errno));
        code = 1;
        goto out;
    }
    s.exe[n] = '\0';
    if ((!s.dry_run && sweep_out_dir(&s) < 0) || sweep_plan(&s) < 0)
        goto out;
    if (s.dry_run) {
        sweep_print_plan(&s);
        code = 0;
        goto out;
    }
    s.comparisons = json_array();
    struct sigaction sa = {.sa_handler = sweep_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sweep_now_iso(started, sizeof started);
    if (!s.local) /* every point's master listens where the job's flags say: the same address */
        fprintf(out, "# nodes started by hand: start them with --master HOST:PORT --follow (the job's --listen, "
                     "port 29500 unless given); each point takes the ranks it needs, the others wait\n");
    sweep_print_header(&s);
    code = 0;
    for (size_t i = 0; i < s.npoints; i++) {
        sweep_point *p = &s.points[i];
        if (sweep_signal) {
            p->state = SP_NOT_RUN;
            sweep_point_doc(p, NULL, -1);
            continue;
        }
        sweep_run_point(&s, p);
    }
    for (size_t i = 0; i < s.npoints; i++)
        if (s.points[i].state != SP_DONE)
            code = 1; /* failed, or not run (a signal) */
    if (sweep_signal)
        fprintf(out, "# stopped by a signal: the points not run are marked so\n");
    sweep_print_answer(&s);
    if (sweep_write(&s, started) < 0)
        code = 1;
out:
    sweep_free(&s);
    return code;
}
