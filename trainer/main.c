/* main.c — psbench-trainer: command line, connect to the servers, run the
 * model's batches, print the trainer's metrics. */
#include "shared/atomicfile.h"
#include "shared/cli.h"
#include "shared/devspec.h"
#include "shared/follow.h"
#include "shared/frame.h"
#include "shared/gpu.h"
#include "shared/log.h"
#include "shared/metrics.h"
#include "shared/userpath.h"
#include "shared/net.h"
#include "trainer/batch_update.h"
#include "trainer/blasinfo.h"
#include "trainer/client.h"
#include "trainer/compute.h"
#include "trainer/memneed.h"
#include "trainer/opts.h"
#include "trainer/run.h"
#include "trainer/synthetic.h"

#include <assert.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int trainer_fail(const char *msg)
{
    fprintf(stderr, "psbench-trainer: %s\n", msg);
    return 2;
}


/* --summary-json of a standalone run. `rounds` are the server rounds the
 * rate counts (the batches for the synthetic model); with `with_rounds`
 * they are written too (batch-update, where the servers count them). */
static int trainer_write_summary(const char *path, metrics *m, uint64_t batches, uint64_t rounds, bool with_rounds,
                                 double seconds, uint64_t bytes_pushed, char *err, size_t errlen)
{
    stats_summary sum = {0};
    stats *bs = metrics_get(m, "batch_level_metric,batch_all");
    if (bs)
        stats_summarize(bs, &sum);
    json_t *o = json_pack("{s:I, s:f, s:f, s:f, s:f, s:I}", "batches", (json_int_t)batches, "seconds", seconds,
                          "rounds_per_s", seconds > 0 ? (double)rounds / seconds : 0.0, "batch_p50_ms", sum.p50,
                          "batch_p99_ms", sum.p99, "bytes_pushed", (json_int_t)bytes_pushed);
    if (o && with_rounds && json_object_set_new(o, "rounds", json_integer((json_int_t)rounds)) < 0) {
        json_decref(o);
        o = NULL;
    }
    /* "--summary-json: cannot write PATH: ENOSPC: ..." */
    int n = snprintf(err, errlen, "--summary-json: ");
    assert(n > 0 && (size_t)n < errlen);
    int rc = afile_write_json(path, o, JSON_INDENT(2), err + n, errlen - (size_t)n);
    json_decref(o);
    return rc;
}

/* An output file's path, checked before any work (userpath.h: its
 * directory made, no folder or FIFO in its place, a file creatable there),
 * so that a run never ends with "cannot write". 0, or -1 with err. */
static int trainer_check_out(const char *flag, const char *path, char *err, size_t errlen)
{
    char why[1024];
    if (!path || userpath_check_out_file(path, why, sizeof why) == 0)
        return 0;
    snprintf(err, errlen, "%s %s: %s", flag, path, why);
    return -1;
}

/* With the pushes in GPU memory (--device on a GPU): how each link went,
 * CUDA IPC or not and why not. */
static void trainer_log_links(const client *cl, uint64_t rank)
{
    if (!cl->gpu)
        return;
    for (size_t i = 0; i < cl->nconns; i++) {
        char link[400];
        client_describe(cl, i, link, sizeof link);
        log_info("rank %" PRIu64 ": server %s: %s", rank, cl->conns[i].addr, link);
    }
}

/* The job's memory against this process's limits and its host's, and
 * OpenBLAS's buffer mapped while that can be checked (memneed.h). */
static int trainer_check_memory(const memneed *need, char *err, size_t errlen)
{
    memroom room;
    memneed_room(&room);
    if (memneed_check(need, &room, err, errlen) < 0)
        return -1;
    return memneed_reserve_blas(need, err, errlen);
}

/* After a failed pass: where the loss diverged and what to do, when that
 * was the cause (loss_check.h). */
static void trainer_divergence_reason(const batch_update *b, const char *pass, char *err, size_t errlen)
{
    const loss_check *lc = batch_update_divergence(b);
    if (lc->diverged && !lc->allow)
        loss_check_reason(lc, pass, err, errlen);
}

/* --model batch-update without a master: an optional warm-up pass, then the
 * timed pass; prints the servers' update rounds per second. */
static int trainer_batch_update(const trainer_args *a, const batch_update_config *bu)
{
    char err[1536];
    memneed need;
    memneed_linear(bu->in_features, bu->out_features, bu->batch_size, devspec_host_memory(bu->device), &need);
    if (trainer_check_memory(&need, err, sizeof err) < 0) {
        fprintf(stderr, "psbench-trainer: rank %" PRIu64 ": %s\n", bu->rank, err);
        return 1;
    }
    metrics *m = metrics_new();
    batch_update *b = m ? batch_update_new(bu, m, err, sizeof err) : NULL;
    if (!m)
        snprintf(err, sizeof err, "out of memory");
    client cl;
    memset(&cl, 0, sizeof cl);
    cl.wake_fd = -1;
    int rc = 1;
    uint64_t warmup = a->syn.warmup;
    batch_update_report rep = {0};
    client_sink sink = b ? batch_update_sink(b) : (client_sink){0};
    client_cfg cc = {.servers = a->servers, .rank = bu->rank, .token = a->token, .timeout_s = a->connect_timeout_s,
                     .transport = a->transport};
    if (!b || client_open(&cl, &cc, &sink, err, sizeof err) < 0)
        goto out;
    if (bu->rank >= cl.trainers) {
        snprintf(err, sizeof err, "--rank %" PRIu64 " is outside 0..%u: the servers expect %u trainers", bu->rank,
                 cl.trainers - 1, cl.trainers);
        goto out;
    }
    char blas[256];
    blasinfo_describe(blas, sizeof blas);
    log_info("rank %" PRIu64 ": Linear(%" PRIu64 ", %" PRIu64 "), batch size %" PRIu64 ", %zu server(s), %u "
             "trainers, %" PRIu64 " batches after %" PRIu64 " warm-up; BLAS %s",
             bu->rank, bu->in_features, bu->out_features, bu->batch_size, cl.nconns, cl.trainers, a->syn.batches,
             warmup, blas);
    if (warmup && batch_update_pass(b, &cl, warmup, 0, false, &rep, err, sizeof err) < 0) {
        trainer_divergence_reason(b, "warm-up", err, sizeof err);
        goto out;
    }
    if (batch_update_pass(b, &cl, a->syn.batches, warmup, true, &rep, err, sizeof err) < 0) {
        trainer_divergence_reason(b, warmup ? "timed" : NULL, err, sizeof err);
        goto out;
    }
    rc = 0;
    double rps = rep.seconds > 0 ? (double)rep.rounds / rep.seconds : 0.0;
    printf("psbench-trainer %" PRIu64 ": %" PRIu64 " batches, %" PRIu64 " server updates in %.3f s "
           "(%.1f rounds/s)\n", bu->rank, rep.batches, rep.rounds, rep.seconds, rps);
    char title[64];
    snprintf(title, sizeof title, "trainer %" PRIu64 " metrics (ms)", bu->rank);
    metrics_print_table(m, stdout, title);
    if (a->params_out && batch_update_write_params(b, a->params_out, err, sizeof err) < 0)
        rc = 1;
    if (rc == 0 && a->summary &&
        trainer_write_summary(a->summary, m, rep.batches, rep.rounds, true, rep.seconds, rep.bytes_pushed, err,
                              sizeof err) < 0)
        rc = 1;
out:
    client_close(&cl);
    batch_update_free(b);
    metrics_free(m);
    if (rc != 0)
        fprintf(stderr, "psbench-trainer: rank %" PRIu64 ": %s\n", bu->rank, err);
    return rc;
}

/* OpenBLAS starts its worker threads in a library constructor, before main
 * runs: as many as OPENBLAS_NUM_THREADS says, one per core by default, and
 * each spins on sched_yield for about 0.1 s of CPU before it sleeps, whether
 * or not BLAS is ever called (openblas_set_num_threads cannot take them
 * back). A trainer computes on one BLAS thread (train.c) and shares the
 * host's cores with servers and other trainers, so when the variable is
 * unset the trainer runs itself again with OPENBLAS_NUM_THREADS=1: same pid,
 * same arguments, no extra threads. If that cannot be done (no /proc), it
 * goes on as it is. */
static void trainer_one_blas_thread(char **argv)
{
    /* The binary's own path, not /proc/self/exe: the process name (what ps,
     * top and pkill see) is the file name that was executed. */
    char self[4096];
    if (getenv("OPENBLAS_NUM_THREADS"))
        return;
    ssize_t n = readlink("/proc/self/exe", self, sizeof self);
    if (n <= 0 || (size_t)n >= sizeof self)
        return;
    self[n] = '\0';
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
        return;
    execv(self, argv);
    /* Still here: BLAS keeps its threads; train.c limits it to one. */
    unsetenv("OPENBLAS_NUM_THREADS");
}

/* A warning, at start, when OpenBLAS chose kernels below what the CPU can
 * run (blasinfo.h); the start lines say which it chose. */
static void trainer_check_blas(void)
{
    char warn[512];
    if (blasinfo_warning(warn, sizeof warn))
        log_warn("%s", warn);
}

/* Whether --device can compute here. The reason a user can act on first:
 * no CUDA here at all; then whether the compute layer can run there (a
 * context made and freed: the refusal comes now, in one line, not after
 * joining a job). With --master the reason also goes to the master
 * (`failed`, once joined: its verdict then names it, not only this
 * process's exit) through setup_err; else it is the error. 0, or -1 with
 * err. */
static int trainer_check_device(const trainer_args *a, char *setup_err, size_t setup_len, char *err, size_t errlen)
{
    if (a->dev.kind == DEVICE_CUDA && gpu_check_device(a->device, devspec_gpu(a->dev), err, errlen) < 0) {
        if (!a->master)
            return -1;
        snprintf(setup_err, setup_len, "%s", err);
    }
    if (a->dev.kind == DEVICE_CPU || setup_err[0])
        return 0;
    device_spec probe;
    char why[400];
    compute *c = NULL;
    if (compute_place(a->dev, 0, &probe, why, sizeof why) == 0)
        c = compute_new(probe, why, sizeof why);
    compute_free(c);
    if (c)
        return 0;
    snprintf(err, errlen, "--device %s: %s", a->device, why);
    if (!a->master)
        return -1;
    snprintf(setup_err, setup_len, "%s", err);
    return 0;
}

/* The token (opts_token_resolve's precedence) into a->token. */
static int trainer_take_token(trainer_args *a, char *err, size_t errlen)
{
    const char *source;
    int loose;
    if (opts_token_resolve(a->token, a->token_file, a->token_buf, sizeof a->token_buf, &a->token, &source, &loose,
                           err, errlen) < 0)
        return -1;
    if (loose) {
        log_init("psbench-trainer", a->log_level);
        log_warn("--token-file %s is readable by other users: chmod 600 it", a->token_file);
    }
    return 0;
}

/* One job under the master: its passes, then its metrics. reach_s: how
 * long to keep trying to reach the master. The exit code. */
static int trainer_master_job(const trainer_args *a, const char *setup_err, double reach_s)
{
    char err[1536];
    /* A trainer that cannot run here (--device cuda where no GPU answers)
     * says so at once, before it spends up to --connect-timeout reaching a
     * master that may not be there to tell; the master's verdict stays its
     * last line. A follower's supervisor speaks for its tries. */
    if (setup_err[0] && !a->follow)
        log_error("%s: this trainer cannot run; telling the master at %s (up to %g s, --connect-timeout)",
                  setup_err, a->master, reach_s);
    metrics *mm = metrics_new();
    if (!mm)
        return trainer_fail("out of memory");
    trainer_run_opts lo = {.master = a->master,
                           .want_rank = a->have_rank ? (int64_t)a->syn.rank : -1,
                           .token = a->token,
                           .device = a->dev,
                           .connect_timeout_s = a->connect_timeout_s,
                           .reach_s = reach_s,
                           .follow = a->follow,
                           .params_out = a->params_out,
                           .compute_nice = (int)a->compute_nice,
                           .coll_host = a->coll_host,
                           .setup_err = setup_err[0] ? setup_err : NULL,
                           .transport = a->transport,
                           .trace = a->trace};
    lo.trace.capacity = (uint32_t)a->trace_buffer; /* 0: not given; at most TRACE_CAPACITY_MAX (opts.c) */
    int code = trainer_run_with_master(&lo, mm, err, sizeof err);
    if (code == 0) {
        metrics_print_table(mm, stdout, "trainer metrics, timed pass (ms)");
        fflush(stdout);
    } else if (code == PSB_EXIT_RETRY && a->follow) {
        follow_say_retry(err); /* the supervisor says it, once */
    } else {
        fprintf(stderr, "psbench-trainer: %s\n", err);
    }
    metrics_free(mm);
    return code;
}

/* --follow: one job, in follow_run's child. The device is checked here,
 * not before the fork (a CUDA context does not survive one). */
static int trainer_follow_job(void *ctx, double reach_s)
{
    const trainer_args *a = ctx;
    static char setup_err[1536];
    char err[1536];
    if (trainer_check_device(a, setup_err, sizeof setup_err, err, sizeof err) < 0)
        return trainer_fail(err);
    return trainer_master_job(a, setup_err, reach_s);
}

/* --master: the master assigns the job; this trainer runs its passes
 * (with --follow, job after job). */
static int trainer_with_master(const trainer_args *a, const char *setup_err)
{
    char err[1536];
    if (a->bu_flags)
        return trainer_fail("--in-features/--out-features/--batch-size/--seed: with --master, the master "
                            "assigns the model and the job");
    if (a->servers || a->model)
        return trainer_fail("--master: the master assigns servers and model; drop --server/--model");
    if (a->compress)
        return trainer_fail("--compress: with --master, the master assigns it (its --compress)");
    if (a->syn.warmup)
        return trainer_fail("--warmup-batches: with --master, the master runs the warm-up pass");
    if (trainer_check_out("--params-out", a->params_out, err, sizeof err) < 0)
        return trainer_fail(err);
    log_init("psbench-trainer", a->log_level);
    trainer_check_blas();
    signal(SIGPIPE, SIG_IGN);
    if (a->follow) {
        follow_opts fo = {.idle_s = a->follow_idle_s, .connect_timeout_s = a->connect_timeout_s, .master = a->master};
        return follow_run(&fo, trainer_follow_job, (void *)a);
    }
    return trainer_master_job(a, setup_err, a->connect_timeout_s);
}

/* Without a master: the options a standalone run needs, and how they fit.
 * *is_bu: --model batch-update. 0, or -1 with err. */
static int trainer_check_standalone(const trainer_args *a, bool *is_bu, char *err, size_t errlen)
{
    const char *why = NULL;
    *is_bu = a->model && strcmp(a->model, "batch-update") == 0;
    size_t nservers = 1;
    for (const char *p = a->servers; p && *p; p++)
        nservers += *p == ',';
    if (!a->servers)
        why = "--server HOST:PORT is required (see --help)";
    else if (!a->have_rank)
        why = "--rank R is required";
    else if (!a->model)
        why = "--model is required: synthetic or batch-update";
    else if (!*is_bu && strcmp(a->model, "synthetic") != 0) {
        snprintf(err, errlen, "--model '%s' is not synthetic or batch-update", a->model);
        return -1;
    } else if (!*is_bu && a->bu_flags)
        why = "--in-features/--out-features/--batch-size/--seed are for --model batch-update";
    else if (a->params_out && !*is_bu)
        why = "--params-out: the synthetic model has no parameters (use --model batch-update or --master)";
    else if (a->compress && strcmp(a->compress, "none") != 0 && *is_bu)
        why = "--compress: --model batch-update pushes f32 (its server answers with the model's parameters)";
    else if (a->compress && strcmp(a->compress, "none") != 0 && a->syn.sparse)
        why = "--compress: --sparse pushes stay f32 (only dense pushes may be narrow)";
    else if (nservers > 64)
        why = "--server: at most 64 servers";
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (trainer_check_out("--params-out", a->params_out, err, errlen) < 0 ||
        trainer_check_out("--summary-json", a->summary, err, errlen) < 0)
        return -1;
    return 0;
}

/* A synthetic run's outcome, on stdout (its summary file too). */
static int trainer_synthetic_report(const trainer_args *a, metrics *m, const synthetic_report *rep, char *err,
                                    size_t errlen)
{
    uint64_t rank = a->syn.rank;
    printf("psbench-trainer %" PRIu64 ": %" PRIu64 " batches in %.3f s (%.1f batches/s), every result checked",
           rank, rep->batches, rep->seconds, rep->seconds > 0 ? (double)rep->batches / rep->seconds : 0.0);
    if (rep->results_gpu)
        printf(" (%" PRIu64 " of them over CUDA IPC, on the GPU)", rep->results_gpu);
    printf("\n");
    char title[64];
    snprintf(title, sizeof title, "trainer %" PRIu64 " metrics (ms)", rank);
    metrics_print_table(m, stdout, title);
    if (a->summary && trainer_write_summary(a->summary, m, rep->batches, rep->batches, false, rep->seconds,
                                            rep->bytes_pushed, err, errlen) < 0)
        return -1;
    return 0;
}

/* --model synthetic without a master: its batches against the servers,
 * every result checked. */
static int trainer_synthetic(const trainer_args *a)
{
    synthetic_config sc = a->syn;
    const synthetic_config *cfg = &sc;
    /* --compress: the choices are none, fp16, bf16 (opts.c). */
    sc.dtype = !a->compress || strcmp(a->compress, "none") == 0 ? HALF_FP32 : (half_type)half_type_parse(a->compress);
    char err[1536];
    memneed need;
    memneed_synthetic((uint64_t)cfg->buckets * cfg->bucket_floats, &need);
    if (trainer_check_memory(&need, err, sizeof err) < 0) {
        fprintf(stderr, "psbench-trainer: rank %" PRIu64 ": %s\n", cfg->rank, err);
        return 1;
    }
    metrics *m = metrics_new();
    synthetic *syn = m ? synthetic_new(cfg, m) : NULL;
    if (!syn) {
        metrics_free(m);
        return trainer_fail("out of memory");
    }
    client cl;
    client_sink sink = synthetic_sink(syn);
    int rc = 0;
    synthetic_report rep = {0};
    /* --device on a GPU: dense pushes from GPU memory to servers on that
     * GPU (CUDA IPC); syn owns it, and the client is closed first. */
    const gpushare *gpu = NULL;
    if (a->dev.kind != DEVICE_CPU && !cfg->sparse && a->transport != PSB_TRANSPORT_TCP) {
        device_spec placed;
        char why[400];
        if (compute_place(a->dev, cfg->rank, &placed, why, sizeof why) < 0 ||
            !(gpu = synthetic_gpu(syn, placed, why, sizeof why)))
            log_info("rank %" PRIu64 ": no CUDA IPC with the servers: %s", cfg->rank, why);
    }
    client_cfg cc = {.servers = a->servers, .rank = cfg->rank, .token = a->token, .timeout_s = a->connect_timeout_s,
                     .transport = a->transport, .gpu = gpu, .dtype = cfg->dtype};
    if (client_open(&cl, &cc, &sink, err, sizeof err) < 0) {
        rc = 1;
    } else if (cfg->rank >= cl.trainers) {
        snprintf(err, sizeof err, "--rank %" PRIu64 " is outside 0..%u: the server expects %u trainers",
                 cfg->rank, cl.trainers - 1, cl.trainers);
        rc = 1;
    } else {
        log_info("rank %" PRIu64 ": %zu server(s), %u trainers, %u buckets x %" PRIu64 " floats, %" PRIu64
                 " batches%s", cfg->rank, cl.nconns, cl.trainers, cfg->buckets, cfg->bucket_floats,
                 cfg->batches, cfg->sparse ? " (sparse)" : "");
        trainer_log_links(&cl, cfg->rank);
        if (synthetic_run(syn, &cl, &rep, err, sizeof err) < 0)
            rc = 1;
    }
    client_close(&cl);
    if (rc == 0 && trainer_synthetic_report(a, m, &rep, err, sizeof err) < 0)
        rc = 1;
    synthetic_free(syn);
    metrics_free(m);
    if (rc != 0)
        fprintf(stderr, "psbench-trainer: rank %" PRIu64 ": %s\n", cfg->rank, err);
    return rc;
}

int main(int argc, char **argv)
{
    trainer_one_blas_thread(argv);

    static trainer_args a; /* a.token may point into it while the trainer runs */
    char err[1536];
    if (trainer_args_init(&a, err, sizeof err) < 0)
        return trainer_fail(err);
    int rc = opts_parse_cli(trainer_opts(), argc, argv, &a, err, sizeof err);
    if (rc < 0)
        return trainer_fail(err);
    if (rc != OPTS_OK)
        return 0;
    static char setup_err[1536];
    if (a.follow && !a.master)
        return trainer_fail("--follow needs --master HOST:PORT");
    if (a.have_follow_idle && !a.follow)
        return trainer_fail("--follow-idle needs --follow");
    /* The trace goes to the master, which merges it: none without one. */
    if (!a.master && (a.trace.on || a.trace.window_set || a.trace_buffer))
        return trainer_fail("--trace, --trace-steps, --trace-buffer: need --master HOST:PORT (the master "
                            "merges the trace into its --out DIR/trace.json)");
    /* Under --follow the device is checked in each job's process. */
    if ((!a.follow && trainer_check_device(&a, setup_err, sizeof setup_err, err, sizeof err) < 0) ||
        trainer_take_token(&a, err, sizeof err) < 0)
        return trainer_fail(err);
    if (a.master)
        return trainer_with_master(&a, setup_err);
    bool is_bu;
    if (trainer_check_standalone(&a, &is_bu, err, sizeof err) < 0)
        return trainer_fail(err);
    log_init("psbench-trainer", a.log_level);
    trainer_check_blas();
    signal(SIGPIPE, SIG_IGN);
    if (!is_bu)
        return trainer_synthetic(&a);
    batch_update_config bu = a.bu;
    if (compute_place(a.dev, a.syn.rank, &bu.device, err, sizeof err) < 0)
        return trainer_fail(err);
    bu.rank = a.syn.rank;
    bu.rpc_timeout_s = a.syn.rpc_timeout_s;
    return trainer_batch_update(&a, &bu);
}
