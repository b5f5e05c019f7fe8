/* sweep_int.h — the parts of `psbench-master sweep` (sweep.h) and what
 * they share: the matrix's dimensions, a point, the sweep. Layers, each
 * using only those under it:
 *
 *   sweep.c          the subcommand: parse, plan, run the points, write
 *   sweep_output.c   results read back, the table, sweep.json/.csv
 *   sweep_plan.c     the matrix: each point planned, enough steps
 *   sweep_args.c     what is asked: the command line (its option table,
 *                    the job's flags passed through), a sweep file
 *   sweep_child.c    child processes and argument lists
 */
#ifndef PSBENCH_SWEEP_INT_H
#define PSBENCH_SWEEP_INT_H

#include "shared/opts.h"

#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* A sweep's points: at most --max-points (default SWEEP_DEFAULT_POINTS),
 * which may be raised to SWEEP_MAX_POINTS. Each point is planned by a
 * child --dry-run (tens of ms) before anything runs, and each runs for
 * seconds to minutes: a product of long lists (100 x 100) is a mistake
 * far more often than a plan, and is refused before any planning. */
#define SWEEP_DEFAULT_POINTS 1000u
#define SWEEP_MAX_POINTS 100000u
/* Planning more points than this is said before it starts (about a
 * second of --dry-runs). */
#define SWEEP_PLAN_SAY 16u
#define SWEEP_MAX_RUNS 1000u

/* The matrix's dimensions, outermost first: the hook varies fastest, so a
 * parameter-server point and its allreduce partner run back to back (the
 * same host state, and the ratio printed as soon as the pair is in); the
 * compression next, so that a compressed point follows its fp32 one. */
typedef enum {
    SD_DEVICE,
    SD_TRANSPORT,
    SD_TRAINER,
    SD_NTRAINER,
    SD_NSERVER,
    SD_BUCKET,
    SD_COMPRESS,
    SD_HOOK,
    SD_COUNT
} sweep_dim;

typedef struct {
    const char *name; /* in sweep.json, sweep.csv and a sweep file */
    const char *flag; /* the sweep's option (a list; sweep_args.c's table has its aliases) */
} sweep_dim_def;

extern const sweep_dim_def sweep_dims[SD_COUNT];

typedef struct {
    char **v; /* the values as given (each a malloc'd string) */
    size_t n;
} sweep_values;

/* One point of the matrix. */
typedef enum { SP_PLANNED, SP_DONE, SP_FAILED, SP_NOT_RUN } sweep_point_state;

/* One run's steady-state steps, per trainer (results.json's steady_state),
 * owned: what the point's intervals and its pair's verdict resample. */
typedef struct {
    double **steps; /* [ntrainers][n] ms */
    size_t ntrainers, n;
} sweep_series;

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
    double step_mean, step_low, step_high; /* the steady step p50 over the runs and its 95 % interval
                                            * (noise.h; NAN: none) */
    size_t nruns;
    uint64_t plan_steps;  /* its plan's timed steps per trainer (--epochs' batches, or --steps) */
    bool steps_given;     /* --steps was among the job's flags */
    double batch_size;    /* its plan's: a step's samples */
    unsigned runs_done;   /* runs started so far (each run is a child of its own) */
    sweep_series *series; /* per run done: its steady steps */
    size_t nseries;
    json_t *busy_runs;    /* [run, ...]: the runs whose host was busy (results.json host_state) */
    bool oversubscribed;  /* a run started more busy processes than a host has cores */
    json_t *host_warnings; /* the runs' host_state warnings, each once */
    json_t *headlines;    /* each done run's whole headline (results.json), for summary.json */
    json_t *env;          /* the first run's environment of every node (sweep.h), or NULL */
    json_int_t buckets;   /* the first run's buckets per step, -1: not known */
    json_t *trace_step;   /* the first traced run's representative step (trace_an_step_json), or NULL */
    uint64_t steady_n;    /* the fewest steady steps per trainer of its runs (0: none) */
    bool ended;           /* its runs are over and its entry made */
    bool printed;         /* its row is printed (its comparisons made) */
} sweep_point;

typedef struct {
    sweep_values dim[SD_COUNT];
    const char *list[SD_COUNT]; /* the command line's lists as given (argv's), split into dim */
    bool given[SD_COUNT];   /* on the command line (wins over the sweep file) */
    char **job;             /* the job's flags, every point's (owned strings) */
    size_t njob;
    unsigned runs;
    bool runs_given;
    unsigned max_points;    /* --max-points (SWEEP_DEFAULT_POINTS) */
    char *out_dir;
    char *sweep_file;
    const char *report;     /* --report DIR (argv's) */
    bool local;
    bool dry_run;           /* --dry-run: the points and their command lines, nothing run */
    bool no_trace;          /* --no-trace: the points run without --trace (sweep_trace_args) */
    bool sequential;        /* --order sequential: a point's runs back to back (else interleaved) */
    uint64_t order_seed;    /* --order-seed: which side of each pair runs first */
    bool order_seed_given;
    uint64_t steps_chosen;  /* the --steps the sweep chose itself (0: the job's own) */
    size_t next_row;        /* the table's next row, in matrix order (sweep_end_point) */
    json_t *schedule;       /* [{point, run, started_at}] in the order the runs were taken */
    unsigned runs_ended;    /* runs that ran to their end (done or failed): the progress line's pace */
    double runs_s;          /* their seconds, all together */
    char exe[PATH_MAX];
    sweep_point *points;
    size_t npoints;
    json_t *comparisons;
    json_t *costs;          /* sweep.json "compression": each compressed point against its fp32 one */
    int width[SD_COUNT];    /* the table's column of each varied dimension (sweep_print_header) */
    FILE *out, *err;
    int argc;
    char **argv;
} sweep;

/* ---- sweep_child.c ---- */

extern volatile sig_atomic_t sweep_signal; /* the signal that stops the sweep, or 0 */

char *sweep_strdup(const char *s);
/* Append a copy of s to the NULL-ended list *v of *n strings. */
void sweep_push(char ***v, size_t *n, const char *s);
void sweep_free_list(char **v, size_t n);
/* SIGINT, SIGTERM, SIGHUP: record the first, pass each on to the running
 * child (whose master treats SIGHUP as SIGTERM). */
void sweep_on_signal(int sig);
/* "SIGINT", "SIGTERM", "SIGHUP". */
const char *sweep_signal_name(int sig);
/* Run this binary with args (NULL-ended, args[0] the program); its stdout
 * and stderr through a pipe into the file log (created, or appended to
 * with append; NULL: none) and, when text is not NULL, into *text (the
 * output's end, malloc'd) whatever the log took; *log_errno (if not NULL)
 * the errno of the log's first failed write, or 0. The child's exit
 * status (128 + signal when killed), or -1 with err when it could not be
 * started. */
int sweep_spawn(sweep *s, char **args, const char *log, bool append, char **text, int *log_errno, char *err,
                size_t errlen);
/* The child's argv: the program, the job's flags, the point's, extra. */
char **sweep_child_argv(const sweep *s, const sweep_point *p, const char *const *extra);
size_t sweep_argv_len(char **v);
/* The steps each point traces: the last SWEEP_TRACE_STEPS of its timed
 * pass (the steady state; fewer where the pass is shorter). */
#define SWEEP_TRACE_STEPS 5u
/* The flags that make a point's run trace its last steps ("--trace",
 * "--trace-steps", "A:B" into the caller's buf; NULL-ended, in args[4]):
 * "--trace" alone where the job gives its own --trace-steps; none
 * (args[0] NULL) under --no-trace or where the job gives --trace. */
void sweep_trace_args(const sweep *s, const sweep_point *p, const char *args[4], char *buf, size_t len);
/* A sweep over --compress compares its points' final parameters: each
 * point records them up to the file's bound (PARAMSFILE_MAX_FLOATS,
 * shared/paramsfile.h): "--params-max" and that number in args[3]
 * (NULL-ended), unless the job gives its own --params-max; none where
 * compress does not vary. */
void sweep_params_args(const sweep *s, const char *args[3]);
/* The line of a child's output that says what went wrong (malloc'd). */
char *sweep_error_line(const char *text);

/* ---- sweep_args.c ---- */

/* sweep_parse_args's answer to --report DIR (s->report): render again. */
#define SWEEP_REPORT OPTS_OWN
/* "--flag" or "--flag=value" ('_' for '-' too) naming `name`? */
bool sweep_flag_is(const char *arg, const char *name, const char **inline_value);
/* The --help text. */
void sweep_usage(FILE *f);
/* The command line: dimension lists (split into s->dim), the sweep's own
 * options, the job's flags (s->job, as given). OPTS_OK, OPTS_HELP,
 * SWEEP_REPORT (at --report: the rest of the line unread), or -1 (said). */
int sweep_parse_args(sweep *s, int argc, char **argv);
/* --sweep-file: what the command line did not give. 0 or -1 (said). */
int sweep_load_file(sweep *s);

/* ---- sweep_plan.c ---- */

/* Every point planned (s->points). 0 or -1 (the point and why, said). */
int sweep_plan(sweep *s);
/* Enough steps (issue 38): where the job's flags give a point fewer than
 * SWEEP_MIN_STEADY_STEPS steady steps and no --steps, every point runs
 * --steps SWEEP_MIN_STEADY_STEPS + 1 instead (--epochs dropped; with
 * --warmup-steps SWEEP_WARMUP_STEPS unless given), planned again, and the
 * sweep says so. 0 or -1 (said). */
int sweep_choose_steps(sweep *s);
void sweep_points_free(sweep *s);
/* The varied dimensions' values, the hook first; without_hook: the others
 * only, where a pair ran (malloc'd). */
char *sweep_label(const sweep *s, const json_t *config, bool without_hook);
/* The varied dimensions' values but the compression's (malloc'd): where a
 * compressed point and its fp32 one ran. */
char *sweep_label_without_compress(const sweep *s, const json_t *config);

/* At least this many steady-state steps per trainer and run unless the
 * job's --steps asks for fewer (the sweep sets --steps to reach it). */
#define SWEEP_MIN_STEADY_STEPS 50u
/* The warm-up the sweep gives when it sets the steps and the job gives none. */
#define SWEEP_WARMUP_STEPS 10u

/* ---- sweep_output.c ---- */

void sweep_now_iso(char *buf, size_t len);
/* The point's sweep.json entry (p->doc) from its runs. */
void sweep_point_doc(sweep *s, sweep_point *p);
/* Run r's results read back (its results.json): its headline, steady
 * steps and host marks into p. false when it has none (a failed run). */
bool sweep_collect_run(sweep *s, sweep_point *p, unsigned r);
/* The point's entry made from the runs collected (and its summary.json
 * written beside its runs, for `psbench-master diff`). */
void sweep_finish_point(sweep *s, sweep_point *p);
/* The comparisons p completes with the rows printed above it; the last one
 * made (borrowed), NULL if none. */
const json_t *sweep_compare(sweep *s, const sweep_point *p);
/* What compression costs (issue 43), made as p's row is printed: for each
 * printed point that differs from p only in compress, one of them `none`,
 * the compressed one's final loss less the fp32 one's and the relative L2
 * distance of their final parameters (their runs' params.bin, run by run),
 * into s->costs and the compressed point's entry ("vs_fp32"). */
void sweep_cost(sweep *s, sweep_point *p);
void sweep_print_header(sweep *s);
void sweep_print_row(sweep *s, const sweep_point *p, const json_t *comparison);
void sweep_print_answer(sweep *s);
/* sweep.json, sweep.csv, report.html. 0, or -1 (said on s->err). */
int sweep_write(sweep *s, const char *started);

#endif
