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
#include "master/tools/sweep.h"

#include "master/tools/sweep_int.h"
#include "master/tools/sweep_report.h"
#include "shared/clock.h"
#include "shared/eta.h"
#include "shared/rng.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the run ------------------------------------------------------------------------ */

/* --dry-run: each point, its configuration and the command it would run. */
static void sweep_print_plan(sweep *s)
{
    fprintf(s->out, "# psbench-master sweep: dry run, nothing is started: %zu point(s) x %u run(s)\n", s->npoints,
            s->runs);
    for (size_t i = 0; i < s->npoints; i++) {
        const sweep_point *p = &s->points[i];
        char *cfg = json_dumps(p->config, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
        fprintf(s->out, "point %u: %s\n  config: %s\n  command: psbench-master", p->index, p->label,
                cfg ? cfg : "?");
        free(cfg);
        for (size_t j = 0; j < s->njob; j++)
            fprintf(s->out, " %s", s->job[j]);
        for (size_t j = 0; j < p->argc; j++)
            fprintf(s->out, " %s", p->argv[j]);
        fprintf(s->out, " --runs 1 --out %s/%s%s", s->out_dir ? s->out_dir : "DIR", p->dir,
                s->runs > 1 ? "/run-NNN" : "");
        const char *targs[4];
        char window[48];
        const char *pargs[3];
        sweep_params_args(s, pargs);
        for (const char *const *a = pargs; *a; a++)
            fprintf(s->out, " %s", *a);
        sweep_trace_args(s, p, targs, window, sizeof window);
        for (const char *const *a = targs; *a; a++)
            fprintf(s->out, " %s", *a);
        fputs("\n", s->out);
    }
    if (s->runs > 1)
        fprintf(s->out, "# each run is a job of its own (--runs 1), %s\n",
                s->sequential ? "a point's runs back to back (--order sequential)"
                              : "the runs of points that differ only in the hook alternating (--order interleaved)");
}

/* The progress line as run r of point p starts, on stderr (stdout holds
 * the table): "sweep: point 3 of 8: hook allreduce_hook, ntrainer 2, run
 * 1 of 2, time left ~4 min 10 s". On a terminal one line that rewrites
 * itself (carriage return, erase to the end; erased when the run ends),
 * else a line of its own, as a log or a CI job's output wants. The time
 * left: the runs still to go, this one included (a failed point's are
 * not), at the mean length of the runs ended so far; none before the
 * first has. */
static void sweep_progress(sweep *s, const sweep_point *p, unsigned r)
{
    unsigned left = 0;
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].state == SP_PLANNED)
            left += s->runs - s->points[i].runs_done;
    left++; /* this one: its runs_done counts it already */
    char eta[64];
    eta_format(eta_left_s(s->runs_s, s->runs_ended, left), eta, sizeof eta);
    bool tty = isatty(fileno(s->err));
    fprintf(s->err, "%ssweep: point %u of %zu: %s, run %u of %u%s%s", tty ? "\r\033[K" : "", p->index, s->npoints,
            p->label, r, s->runs, eta, tty ? "" : "\n");
    fflush(s->err);
}

/* Run r of point p: its child master (--runs 1 into the run's folder, its
 * output appended to the point's master.log), its results read back. A
 * run that fails fails the point: its later runs are not run. */
static void sweep_run_one(sweep *s, sweep_point *p)
{
    unsigned r = ++p->runs_done;
    char dir[PATH_MAX], pdir[PATH_MAX], log[PATH_MAX + 16], err[512];
    snprintf(pdir, sizeof pdir, "%s/%s", s->out_dir, p->dir);
    if (s->runs == 1)
        snprintf(dir, sizeof dir, "%s", pdir);
    else
        snprintf(dir, sizeof dir, "%s/run-%03u", pdir, r);
    snprintf(log, sizeof log, "%s/master.log", pdir);
    sweep_progress(s, p, r);
    double t0 = clock_now_s();
    const char *targs[4];
    char window[48];
    sweep_trace_args(s, p, targs, window, sizeof window);
    const char *pargs[3];
    sweep_params_args(s, pargs);
    const char *extra[12] = {"--runs", "1", "--out", dir};
    size_t ne = 4;
    for (const char *const *a = pargs; *a; a++)
        extra[ne++] = *a;
    for (const char *const *a = targs; *a; a++)
        extra[ne++] = *a;
    assert(ne < sizeof extra / sizeof *extra);
    extra[ne] = NULL;
    char now[32];
    sweep_now_iso(now, sizeof now);
    json_array_append_new(s->schedule, json_pack("{s:I, s:I, s:s}", "point", (json_int_t)p->index, "run",
                                                 (json_int_t)r, "started_at", now));
    if (!s->local) { /* the one place a sweep by hand can say it waits */
        char run[48] = "";
        if (s->runs > 1)
            snprintf(run, sizeof run, ", run %u of %u", r, s->runs);
        fprintf(s->out, "# point %u of %zu (%s)%s: running; nodes started by hand join it (--follow)\n", p->index,
                s->npoints, p->label, run);
    }
    fflush(s->out);
    char **args = sweep_child_argv(s, p, extra);
    char *text = NULL;
    int log_errno = 0;
    int rc = userpath_make_dir(dir, err, sizeof err) < 0
                 ? -1
                 : sweep_spawn(s, args, log, r > 1, &text, &log_errno, err, sizeof err);
    sweep_free_list(args, sweep_argv_len(args));
    if (rc >= 0 && !sweep_signal) { /* a run that ran: the pace of the next lines */
        s->runs_ended++;
        s->runs_s += clock_now_s() - t0;
    }
    if (isatty(fileno(s->err)))
        fprintf(s->err, "\r\033[K");
    if (rc < 0) {
        p->error = sweep_strdup(err);
    } else if (rc != 0) {
        /* The master's own words, from its output as the sweep kept it (not
         * read back from its log: on a full disk the log is cut short, and
         * its last line that fitted is not the reason). Where the log lost
         * some of it, the point says so too. */
        char *line = sweep_error_line(text ? text : "");
        char logw[160] = "";
        if (log_errno)
            snprintf(logw, sizeof logw, " (%s/master.log is incomplete: %s)", p->dir, strerror(log_errno));
        size_t n = strlen(line) + strlen(logw) + 96;
        p->error = malloc(n);
        if (!p->error)
            abort();
        if (sweep_signal && s->runs > 1)
            snprintf(p->error, n, "stopped by %s during run %u of %u: %s%s", sweep_signal_name(sweep_signal), r,
                     s->runs, line, logw);
        else if (sweep_signal)
            snprintf(p->error, n, "stopped by %s during its run: %s%s", sweep_signal_name(sweep_signal), line, logw);
        else if (s->runs > 1)
            snprintf(p->error, n, "run %u: exit %d: %s%s", r, rc, line, logw);
        else
            snprintf(p->error, n, "exit %d: %s%s", rc, line, logw);
        free(line);
    }
    free(text);
    bool done = rc == 0 && sweep_collect_run(s, p, r);
    if (rc == 0 && !done)
        p->error = sweep_strdup(s->runs > 1 ? "a run wrote no headline (no trainer reported a step)"
                                            : "the run wrote no headline (no trainer reported a step)");
    if (!done && sweep_signal)
        p->state = SP_NOT_RUN; /* stopped, not failed: it did not run to its end */
    else if (!done)
        p->state = SP_FAILED;
    else if (r == s->runs)
        p->state = SP_DONE;
}

/* A point whose runs are over (all done, one failed, or a signal): its
 * entry. Then the rows of every point ended, in matrix order as far as
 * the points before them have ended (interleaved runs end a group's
 * points close together; the table keeps the matrix's order, and a
 * pair's ratio is on its second row), each with the comparisons it
 * completes against the rows above it. */
static void sweep_end_point(sweep *s, sweep_point *p)
{
    if (p->state == SP_PLANNED && p->runs_done) { /* stopped between its runs */
        char why[96];
        snprintf(why, sizeof why, "stopped by %s after %u of %u runs", sweep_signal_name(sweep_signal),
                 p->runs_done, s->runs);
        p->error = sweep_strdup(why);
    }
    if (p->state == SP_PLANNED) /* a signal stopped the sweep before it ended */
        p->state = SP_NOT_RUN;
    sweep_finish_point(s, p);
    p->ended = true;
    while (s->next_row < s->npoints && s->points[s->next_row].ended) {
        sweep_point *q = &s->points[s->next_row++];
        const json_t *c = q->state == SP_NOT_RUN ? NULL : sweep_compare(s, q);
        if (q->state != SP_NOT_RUN)
            sweep_cost(s, q);
        q->printed = true;
        if (q->state != SP_NOT_RUN)
            sweep_print_row(s, q, c);
    }
}

/* The order the runs are taken in: point indexes (0-based), one entry a
 * run. Sequential: each point's runs back to back, in matrix order.
 * Interleaved: the points that differ only in the hook (and the servers
 * it brings) form a group; a group's runs alternate (A B A B ...), its
 * points in an order drawn from --order-seed, so that a drift of the host
 * does not land on one side of a comparison. *n: the entries. */
static size_t *sweep_order(sweep *s, size_t *n)
{
    size_t total = s->npoints * s->runs, k = 0;
    size_t *order = malloc((total ? total : 1) * sizeof *order);
    bool *placed = calloc(s->npoints ? s->npoints : 1, sizeof *placed);
    size_t *group = malloc((s->npoints ? s->npoints : 1) * sizeof *group);
    if (!order || !placed || !group)
        abort();
    rng g;
    rng_seed(&g, s->order_seed, 0x6f72646572ull); /* "order" */
    for (size_t i = 0; i < s->npoints; i++) {
        if (placed[i])
            continue;
        size_t ng = 0;
        char *where = sweep_label(s, s->points[i].config, true);
        for (size_t j = i; j < s->npoints; j++) {
            char *w = s->sequential ? NULL : sweep_label(s, s->points[j].config, true);
            bool same = j == i || (w && strcmp(w, where) == 0 &&
                                   json_equal(json_object_get(s->points[j].config, "trainer"),
                                              json_object_get(s->points[i].config, "trainer")));
            free(w);
            if (!placed[j] && same) {
                placed[j] = true;
                group[ng++] = j;
            }
        }
        free(where);
        for (size_t a = ng; a > 1; a--) { /* Fisher-Yates: which side runs first */
            size_t b = (size_t)rng_below(&g, a), t = group[a - 1];
            group[a - 1] = group[b];
            group[b] = t;
        }
        for (unsigned r = 0; r < s->runs; r++)
            for (size_t a = 0; a < ng; a++)
                order[k++] = group[a];
    }
    assert(k == total);
    free(placed);
    free(group);
    *n = k;
    return order;
}

static void sweep_free(sweep *s)
{
    for (int d = 0; d < SD_COUNT; d++)
        sweep_free_list(s->dim[d].v, s->dim[d].n);
    sweep_free_list(s->job, s->njob);
    sweep_points_free(s);
    json_decref(s->comparisons);
    json_decref(s->costs);
    json_decref(s->schedule);
    free(s->out_dir);
    free(s->sweep_file);
}

/* --report DIR: DIR/report.html again from DIR/sweep.json. */
static int sweep_rerender(const char *dir, FILE *err)
{
    char path[PATH_MAX], msg[512];
    if (snprintf(path, sizeof path, "%s/sweep.json", dir) >= (int)sizeof path) {
        text_shown shown;
        fprintf(err, "psbench-master sweep: --report %s: %s\n", text_show(dir, 0, &shown), strerror(ENAMETOOLONG));
        return 1;
    }
    json_error_t je;
    json_t *doc;
    /* A regular file only, read whole up to a bound (userpath.h): a FIFO
     * named sweep.json in the folder must not block the sweep for ever. */
    int lrc = userpath_load_json(path, 0, &doc, &je, msg, sizeof msg);
    if (lrc == -1) {
        fprintf(err, "psbench-master sweep: --report %s: cannot read %s: %s\n", dir, path, msg);
        return 1;
    }
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

/* Every point's runs in the order drawn (sweep_order), each point's row as
 * it ends, then the answer and the files. The exit code (sweep.h). */
static int sweep_run(sweep *s)
{
    char started[32];
    s->comparisons = json_array();
    s->costs = json_array();
    s->schedule = json_array();
    struct sigaction sa = {.sa_handler = sweep_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sweep_now_iso(started, sizeof started);
    if (!s->local) /* every point's master listens where the job's flags say: the same address */
        fprintf(s->out, "# nodes started by hand: start them with --master HOST:PORT --follow (the job's --listen, "
                        "port 29500 unless given); each point takes the ranks it needs, the others wait\n");
    sweep_print_header(s);
    int code = 0;
    size_t norder;
    size_t *order = sweep_order(s, &norder);
    for (size_t k = 0; k < norder && !sweep_signal; k++) {
        sweep_point *p = &s->points[order[k]];
        if (p->state != SP_PLANNED)
            continue; /* failed at an earlier run */
        sweep_run_one(s, p);
        if (p->state != SP_PLANNED)
            sweep_end_point(s, p);
    }
    free(order);
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].state == SP_PLANNED)
            sweep_end_point(s, &s->points[i]);
    size_t ndone = 0, nfailed = 0;
    for (size_t i = 0; i < s->npoints; i++) {
        ndone += s->points[i].state == SP_DONE;
        nfailed += s->points[i].state == SP_FAILED;
        if (s->points[i].state != SP_DONE)
            code = 1; /* failed (or not run: a signal, whose code wins below) */
    }
    sweep_print_answer(s);
    if (sweep_write(s, started) < 0)
        code = 1;
    if (sweep_signal) {
        /* As the master ends for a signal (128 + its number), apart from
         * 1, a point that failed: the points not run never had a chance.
         * Last, after the files: what they hold. */
        code = 128 + sweep_signal;
        fprintf(s->out, "# stopped by a signal (%s): %zu of %zu point(s) done, %zu failed, %zu not run (marked so "
                        "in sweep.json and sweep.csv); exit %d\n",
                sweep_signal_name(sweep_signal), ndone, s->npoints, nfailed, s->npoints - ndone - nfailed, code);
    }
    return code;
}

int sweep_main(int argc, char **argv, FILE *out, FILE *err)
{
    sweep s = {.runs = 1, .out = out, .err = err, .argc = argc - 1, .argv = argv + 1};
    int code = 2;
    int rc = sweep_parse_args(&s, argc, argv);
    if (rc == OPTS_HELP) {
        sweep_usage(out);
        code = 0;
        goto out;
    }
    if (rc == SWEEP_REPORT) {
        code = sweep_rerender(s.report, err);
        goto out;
    }
    if (rc < 0 || (s.sweep_file && sweep_load_file(&s) < 0))
        goto out;
    ssize_t n = readlink("/proc/self/exe", s.exe, sizeof s.exe - 1);
    if (n <= 0) {
        fprintf(err, "psbench-master sweep: /proc/self/exe: %s\n", strerror(errno));
        code = 1;
        goto out;
    }
    s.exe[n] = '\0';
    if ((!s.dry_run && sweep_out_dir(&s) < 0) || sweep_plan(&s) < 0 || sweep_choose_steps(&s) < 0)
        goto out;
    if (!s.order_seed_given) /* drawn, and printed: --order-seed repeats it */
        s.order_seed = ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) & 0x7fffffffu;
    if (s.dry_run) {
        sweep_print_plan(&s);
        code = 0;
        goto out;
    }
    code = sweep_run(&s);
out:
    sweep_free(&s);
    return code;
}
