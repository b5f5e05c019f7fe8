/* main.c — psbench-trainer: command line, connect to the servers, run the
 * model's batches, print the trainer's metrics. */
#include "shared/atomicfile.h"
#include "shared/cli.h"
#include "shared/devspec.h"
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
#include "trainer/run.h"
#include "trainer/synthetic.h"

#include <assert.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void trainer_usage(FILE *f)
{
    fprintf(f,
        "usage: psbench-trainer --master HOST:PORT [--rank R] [options]\n"
        "       psbench-trainer --server HOST:PORT[,HOST:PORT...] --rank R --model synthetic [options]\n"
        "       psbench-trainer --server HOST:PORT[,HOST:PORT...] --rank R --model batch-update [options]\n"
        "\n"
        "With --master, the master assigns everything else (servers, model, data,\n"
        "batches) and runs the warm-up and timed passes; --rank asks for that rank\n"
        "(the master refuses it if it is taken or outside the job's ranks).\n"
        "\n"
        "Pushes gradient buckets to parameter servers and waits for their mean.\n"
        "With --model synthetic it is a pure communication benchmark: every batch\n"
        "pushes K buckets of deterministic data and checks every element of every\n"
        "result against the mean it predicts; any mismatch, error frame or timeout\n"
        "ends the run with a non-zero exit and a one-line reason.\n"
        "With --model batch-update it is the seed's BatchUpdateParameterServer\n"
        "trainer: it fetches a Linear model from servers run with --kind batch-update\n"
        "(listed in part order), and per batch draws inputs from --seed, computes the\n"
        "L1 loss's gradient, pushes it and takes the updated parameters back; it\n"
        "prints the servers' update rounds per second at the end.\n"
        "\n"
        "options:\n"
        "  --server LIST           servers, comma-separated; bucket k goes to server\n"
        "                          k mod (number of servers)\n"
        "  --rank R                this trainer's rank (ranks are 0..N-1 for N trainers)\n"
        "  --model MODEL           synthetic, or batch-update (the seed's Linear model\n"
        "                          trained through batch-update servers)\n"
        "  --buckets K             buckets per batch, all in flight at once (default 4)\n"
        "  --bucket-floats S       floats per bucket (default 262144)\n"
        "  --batches B             batches to run (default 100)\n"
        "  --in-features N         batch-update: the Linear model's inputs (default 100)\n"
        "  --out-features N        batch-update: its outputs (default 30)\n"
        "  --batch-size N          batch-update: examples per batch (default 20)\n"
        "  --seed S                batch-update: the job's seed; inputs come from rng\n"
        "                          stream 1000 + rank (default 0)\n"
        "  --warmup-batches W      run W batches first, left out of the metrics,\n"
        "                          the summary and its timing (default 0); batch-update:\n"
        "                          a warm-up pass of W batches, then the timed pass, each\n"
        "                          fetching the model and drawing the same inputs\n"
        "  --sparse                push sparse buckets (rows of --sparse-cols floats)\n"
        "  --sparse-cols C         floats per sparse row (default 16)\n"
        "  --rpc-timeout SECONDS   longest wait for a batch's results (default 60)\n"
        "  --connect-timeout SECONDS  how long to keep trying to reach a server (or the\n"
        "                          master), and then the longest wait for its first\n"
        "                          answer: a peer that is not psbench is named (default 30)\n"
        "  --token-file FILE       the job's token (the servers' and the master's): FILE's\n"
        "                          first line (keep it mode 600)\n"
        "  --token T               the token on the command line (shown by ps: prefer\n"
        "                          --token-file). Precedence: --token, --token-file,\n"
        "                          $PSBENCH_TOKEN\n"
        "  --transport T           to the servers: auto (default; $PSBENCH_TRANSPORT\n"
        "                          sets it): shared memory with a server on this\n"
        "                          host (its Unix socket, which the server names when\n"
        "                          the TCP hello asks), TCP otherwise, saying why;\n"
        "                          shm: shared memory or a one-line error; tcp: TCP\n"
        "                          only. For measurements, $PSBENCH_SHM_PUSH=stage\n"
        "                          copies every push into the segment, =inline sends\n"
        "                          push payloads on the Unix socket. A CUDA trainer\n"
        "                          (rpc_hook) whose server computes on its GPU\n"
        "                          exchanges dense buckets there by CUDA IPC\n"
        "                          (the start line says '+ CUDA IPC')\n"
        "  --device DEV            cpu (default), cuda:N (GPU N), or cuda: the seed's\n"
        "                          cuda(rank) placement, GPU (rank mod the GPUs this host\n"
        "                          shows); refused in one line where it cannot compute\n"
        "                          (no CUDA runtime, no GPU, no CUDA in this build).\n"
        "                          CUDA libraries are loaded only when asked for.\n"
        "                          fake-cuda: tests only (a GPU simulated on the host).\n"
        "                          --model synthetic (dense, not over tcp): its pushes\n"
        "                          in that GPU's memory, for servers on it (CUDA IPC);\n"
        "                          results that come that way are checked whole on\n"
        "                          the GPU\n"
        "  --summary-json FILE     write {batches, seconds, rounds_per_s, batch_p50_ms,\n"
        "                          batch_p99_ms, bytes_pushed} to FILE (batch-update: also\n"
        "                          rounds, the server updates in the timed pass)\n"
        "  --master HOST:PORT      join a psbench-master\n"
        "  --params-out FILE       with --master and a real model, or --model\n"
        "                          batch-update: write the final parameters there (raw\n"
        "                          little-endian float32, the whole model)\n"
        "  --compute-nice N        with --master and a real model: run the compute\n"
        "                          (forward/backward/optimizer) thread N nice levels\n"
        "                          below the communication thread, so that where busy\n"
        "                          threads outnumber cores bucket traffic is scheduled\n"
        "                          ahead of backward (0..19, default 10; 0: same level)\n"
        "  --collective-host HOST  with --master and a collective hook (allreduce_hook,\n"
        "                          sparse_rpc_hook, hybrid_hook): the address of this host\n"
        "                          the other trainers connect to for Gloo (default: the\n"
        "                          address this trainer reaches the master from)\n"
        "  --log-level LEVEL       error, warn, info (default) or debug\n"
        "  --help, --version\n"
        "\n"
        "Metrics (ms): hook_future_metric,rpc_dense or rpc_sparse per bucket (push\n"
        "queued to result checked), batch_level_metric,batch_all per batch.\n"
        "batch-update: batch_level_metric,batch_all, forward_metric,forward_pass,\n"
        "backward_metric,backward, hook_future_metric,update_and_fetch_model (push to\n"
        "updated parameters received), method_metric,get_model (the fetch per pass).\n"
        "At --log-level debug it logs the seed's lines per batch (trainerR processing\n"
        "one batch, reporting grads, got updated model).\n");
}

enum {
    OPT_SERVER = 256, OPT_RANK, OPT_MODEL, OPT_BUCKETS, OPT_BUCKET_FLOATS, OPT_BATCHES, OPT_SPARSE,
    OPT_SPARSE_COLS, OPT_RPC_TIMEOUT, OPT_CONNECT_TIMEOUT, OPT_TRANSPORT, OPT_TOKEN, OPT_DEVICE, OPT_SUMMARY,
    OPT_MASTER, OPT_LOG_LEVEL, OPT_HELP, OPT_VERSION, OPT_PARAMS_OUT, OPT_COMPUTE_NICE, OPT_WARMUP,
    OPT_IN_FEATURES, OPT_OUT_FEATURES, OPT_BATCH_SIZE, OPT_SEED, OPT_COLL_HOST, OPT_TOKEN_FILE,
};

static const struct option trainer_opts[] = {
    {"server", required_argument, NULL, OPT_SERVER},
    {"rank", required_argument, NULL, OPT_RANK},
    {"model", required_argument, NULL, OPT_MODEL},
    {"buckets", required_argument, NULL, OPT_BUCKETS},
    {"bucket-floats", required_argument, NULL, OPT_BUCKET_FLOATS},
    {"batches", required_argument, NULL, OPT_BATCHES},
    {"warmup-batches", required_argument, NULL, OPT_WARMUP},
    {"in-features", required_argument, NULL, OPT_IN_FEATURES},
    {"out-features", required_argument, NULL, OPT_OUT_FEATURES},
    {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"sparse", no_argument, NULL, OPT_SPARSE},
    {"sparse-cols", required_argument, NULL, OPT_SPARSE_COLS},
    {"rpc-timeout", required_argument, NULL, OPT_RPC_TIMEOUT},
    {"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"summary-json", required_argument, NULL, OPT_SUMMARY},
    {"master", required_argument, NULL, OPT_MASTER},
    {"params-out", required_argument, NULL, OPT_PARAMS_OUT},
    {"compute-nice", required_argument, NULL, OPT_COMPUTE_NICE},
    {"collective-host", required_argument, NULL, OPT_COLL_HOST},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static int trainer_fail(const char *msg)
{
    fprintf(stderr, "psbench-trainer: %s\n", msg);
    return 2;
}

/* A flag's bad value: the line names the flag. */
static int trainer_fail_flag(const char *flag, const char *msg)
{
    fprintf(stderr, "psbench-trainer: %s: %s\n", flag, msg);
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
        const char *note;
        bool ipc = client_link_gpu(cl, i, &note);
        bool shm = strcmp(client_link(cl, i), "shm") == 0;
        const char *why = note[0] ? note : shm ? "the server offered none" : "it runs over shared memory only";
        log_info("rank %" PRIu64 ": server %s: %s%s%s%s", rank, cl->conns[i].addr, shm ? "shared memory" : "TCP",
                 ipc ? " + CUDA IPC" : " (no CUDA IPC: ", ipc ? "" : why, ipc ? "" : ")");
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
static int trainer_batch_update(const batch_update_config *bu, const char *servers, const char *token,
                                double connect_timeout, psb_transport transport, uint64_t batches, uint64_t warmup, const char *summary,
                                const char *params_out)
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
    batch_update_report rep = {0};
    client_sink sink = b ? batch_update_sink(b) : (client_sink){0};
    client_cfg cc = {.servers = servers, .rank = bu->rank, .token = token, .timeout_s = connect_timeout,
                     .transport = transport};
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
             bu->rank, bu->in_features, bu->out_features, bu->batch_size, cl.nconns, cl.trainers, batches, warmup,
             blas);
    if (warmup && batch_update_pass(b, &cl, warmup, 0, false, &rep, err, sizeof err) < 0) {
        trainer_divergence_reason(b, "warm-up", err, sizeof err);
        goto out;
    }
    if (batch_update_pass(b, &cl, batches, warmup, true, &rep, err, sizeof err) < 0) {
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
    if (params_out && batch_update_write_params(b, params_out, err, sizeof err) < 0)
        rc = 1;
    if (rc == 0 && summary &&
        trainer_write_summary(summary, m, rep.batches, rep.rounds, true, rep.seconds, rep.bytes_pushed, err,
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

int main(int argc, char **argv)
{
    trainer_one_blas_thread(argv);

    synthetic_config cfg = {0};
    cfg.buckets = 4;
    cfg.bucket_floats = 262144;
    cfg.batches = 100;
    cfg.sparse_cols = 16;
    cfg.rpc_timeout_s = 60;
    double connect_timeout = 30;
    psb_transport transport = psb_transport_default();
    const char *servers = NULL, *model = NULL, *token = NULL, *summary = NULL, *master = NULL;
    const char *params_out = NULL, *coll_host = NULL, *token_file = NULL;
    static char token_buf[CLI_TOKEN_MAX + 1]; /* --token-file's token */
    uint64_t compute_nice = 10;
    batch_update_config bu = {0};
    bu.in_features = 100; /* the seed's Linear(100, 30), batch size 20 */
    bu.out_features = 30;
    bu.batch_size = 20;
    bool bu_flags = false;
    bool have_rank = false;
    const char *device = "cpu";
    log_level level = LOG_INFO;
    char err[1536];
    uint64_t v;

    cli_normalize_args(argc, argv);
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", trainer_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_SERVER:
            /* Every address now, with the flag's name: not after the
             * first servers have been joined. */
            if (net_check_hostport_list(optarg, err, sizeof err) < 0)
                return trainer_fail_flag("--server", err);
            servers = optarg;
            break;
        case OPT_RANK:
            if (cli_parse_u64("--rank", optarg, 0, 1u << 30, 0, &cfg.rank, err, sizeof err) < 0)
                return trainer_fail(err);
            have_rank = true;
            break;
        case OPT_MODEL: model = optarg; break;
        case OPT_BUCKETS:
            if (cli_parse_u64("--buckets", optarg, 1, 1u << 20, 0, &v, err, sizeof err) < 0)
                return trainer_fail(err);
            cfg.buckets = (uint32_t)v;
            break;
        case OPT_BUCKET_FLOATS:
            if (cli_parse_u64("--bucket-floats", optarg, 1, 1ull << 28, 1, &cfg.bucket_floats, err,
                              sizeof err) < 0)
                return trainer_fail(err);
            break;
        case OPT_BATCHES:
            if (cli_parse_u64("--batches", optarg, 1, UINT64_MAX / 2, 0, &cfg.batches, err, sizeof err) < 0)
                return trainer_fail(err);
            break;
        case OPT_WARMUP:
            if (cli_parse_u64("--warmup-batches", optarg, 0, 1u << 30, 0, &cfg.warmup, err, sizeof err) < 0)
                return trainer_fail(err);
            break;
        case OPT_IN_FEATURES:
            if (cli_parse_u64("--in-features", optarg, 1, 1u << 24, 0, &bu.in_features, err, sizeof err) < 0)
                return trainer_fail(err);
            bu_flags = true;
            break;
        case OPT_OUT_FEATURES:
            if (cli_parse_u64("--out-features", optarg, 1, 1u << 24, 0, &bu.out_features, err, sizeof err) < 0)
                return trainer_fail(err);
            bu_flags = true;
            break;
        case OPT_BATCH_SIZE:
            if (cli_parse_u64("--batch-size", optarg, 1, 1u << 24, 0, &bu.batch_size, err, sizeof err) < 0)
                return trainer_fail(err);
            bu_flags = true;
            break;
        case OPT_SEED:
            if (cli_parse_u64("--seed", optarg, 0, UINT64_MAX, 0, &bu.seed, err, sizeof err) < 0)
                return trainer_fail(err);
            bu_flags = true;
            break;
        case OPT_SPARSE: cfg.sparse = true; break;
        case OPT_SPARSE_COLS:
            if (cli_parse_u64("--sparse-cols", optarg, 1, 1u << 20, 0, &v, err, sizeof err) < 0)
                return trainer_fail(err);
            cfg.sparse_cols = (uint32_t)v;
            break;
        case OPT_RPC_TIMEOUT:
            if (cli_parse_seconds("--rpc-timeout", optarg, &cfg.rpc_timeout_s, err, sizeof err) < 0)
                return trainer_fail(err);
            break;
        case OPT_TRANSPORT:
            if (psb_transport_parse(optarg, &transport) < 0) {
                snprintf(err, sizeof err, "--transport: '%.64s' is not a transport (auto, tcp or shm)", optarg);
                return trainer_fail(err);
            }
            break;
        case OPT_CONNECT_TIMEOUT:
            if (cli_parse_seconds("--connect-timeout", optarg, &connect_timeout, err, sizeof err) < 0)
                return trainer_fail(err);
            break;
        case OPT_TOKEN: token = optarg; break;
        case OPT_TOKEN_FILE: token_file = optarg; break;
        case OPT_DEVICE: device = optarg; break;
        case OPT_SUMMARY: summary = optarg; break;
        case OPT_MASTER:
            if (net_check_hostport_list(optarg, err, sizeof err) < 0 || strchr(optarg, ',')) {
                if (strchr(optarg, ','))
                    snprintf(err, sizeof err, "'%s' is one HOST:PORT, not a list", optarg);
                return trainer_fail_flag("--master", err);
            }
            master = optarg;
            break;
        case OPT_PARAMS_OUT: params_out = optarg; break;
        case OPT_COLL_HOST:
            if (net_parse_host(optarg, err, sizeof err) < 0)
                return trainer_fail_flag("--collective-host", err);
            coll_host = optarg;
            break;
        case OPT_COMPUTE_NICE:
            if (cli_parse_u64("--compute-nice", optarg, 0, 19, 0, &compute_nice, err, sizeof err) < 0)
                return trainer_fail(err);
            break;
        case OPT_LOG_LEVEL:
            if (log_level_parse(optarg, &level) < 0) {
                snprintf(err, sizeof err, "--log-level: '%s' is not error, warn, info or debug", optarg);
                return trainer_fail(err);
            }
            break;
        case OPT_HELP:
        case 'h':
            trainer_usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("psbench-trainer %s (wire protocol %u)\n", PSBENCH_VERSION, FRAME_PROTOCOL_VERSION);
            return 0;
        default:
            snprintf(err, sizeof err, "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
            return trainer_fail(err);
        }
    }
    /* --device, parsed once (shared/devspec.h). */
    device_spec dev;
    if (devspec_parse("--device", device, DEVSPEC_TRAINER, &dev, err, sizeof err) < 0)
        return trainer_fail(err);
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%s' (see --help)", argv[optind]);
        return trainer_fail(err);
    }
    /* The reason a user can act on first: no CUDA here at all; then
     * whether the compute layer can run there (a context made and freed:
     * the refusal comes now, in one line, not after joining a job). */
    /* With --master, the reason also goes to the master (`failed`, once
     * joined): its verdict then names it, not only this process's exit. */
    static char setup_err[1536];
    if (dev.kind == DEVICE_CUDA && gpu_check_device(device, devspec_gpu(dev), err, sizeof err) < 0) {
        if (!master)
            return trainer_fail(err);
        snprintf(setup_err, sizeof setup_err, "%s", err);
    }
    if (dev.kind != DEVICE_CPU && !setup_err[0]) {
        device_spec probe;
        char why[400];
        compute *c = NULL;
        if (compute_place(dev, 0, &probe, why, sizeof why) == 0)
            c = compute_new(probe, why, sizeof why);
        if (!c) {
            snprintf(err, sizeof err, "--device %s: %s", device, why);
            if (!master)
                return trainer_fail(err);
            snprintf(setup_err, sizeof setup_err, "%s", err);
        }
        compute_free(c);
    }
    /* The token: --token, else --token-file, else $PSBENCH_TOKEN. */
    if (!token && token_file) {
        int loose = 0;
        if (cli_read_token_file(token_file, token_buf, sizeof token_buf, &loose, err, sizeof err) < 0)
            return trainer_fail(err);
        if (loose) {
            log_init("psbench-trainer", level);
            log_warn("--token-file %s is readable by other users: chmod 600 it", token_file);
        }
        token = token_buf;
    }
    const char *token_source = token && token != token_buf ? "--token" : NULL;
    if (!token) {
        const char *t = getenv("PSBENCH_TOKEN");
        if (t && *t) {
            token = t;
            token_source = "PSBENCH_TOKEN";
        }
    }
    if (token_source && cli_check_token(token_source, token, err, sizeof err) < 0)
        return trainer_fail(err);
    if (master) {
        if (bu_flags)
            return trainer_fail("--in-features/--out-features/--batch-size/--seed: with --master, the master "
                                "assigns the model and the job");
        if (servers || model)
            return trainer_fail("--master: the master assigns servers and model; drop --server/--model");
        if (cfg.warmup)
            return trainer_fail("--warmup-batches: with --master, the master runs the warm-up pass");
        if (trainer_check_out("--params-out", params_out, err, sizeof err) < 0)
            return trainer_fail(err);
        log_init("psbench-trainer", level);
        trainer_check_blas();
        signal(SIGPIPE, SIG_IGN);
        metrics *mm = metrics_new();
        if (!mm)
            return trainer_fail("out of memory");
        trainer_run_opts lo = {.master = master,
                               .want_rank = have_rank ? (int64_t)cfg.rank : -1,
                               .token = token,
                               .device = dev,
                               .connect_timeout_s = connect_timeout,
                               .params_out = params_out,
                               .compute_nice = (int)compute_nice,
                               .coll_host = coll_host,
                               .setup_err = setup_err[0] ? setup_err : NULL,
                               .transport = transport};
        int code = trainer_run_with_master(&lo, mm, err, sizeof err);
        if (code == 0) {
            metrics_print_table(mm, stdout, "trainer metrics, timed pass (ms)");
            fflush(stdout);
        } else {
            fprintf(stderr, "psbench-trainer: %s\n", err);
        }
        metrics_free(mm);
        return code;
    }
    if (!servers)
        return trainer_fail("--server HOST:PORT is required (see --help)");
    if (!have_rank)
        return trainer_fail("--rank R is required");
    if (!model)
        return trainer_fail("--model is required: synthetic or batch-update");
    bool is_bu = strcmp(model, "batch-update") == 0;
    if (!is_bu && strcmp(model, "synthetic") != 0) {
        snprintf(err, sizeof err, "--model '%s' is not synthetic or batch-update", model);
        return trainer_fail(err);
    }
    if (!is_bu && bu_flags)
        return trainer_fail("--in-features/--out-features/--batch-size/--seed are for --model batch-update");
    if (params_out && !is_bu)
        return trainer_fail("--params-out: the synthetic model has no parameters (use --model batch-update or "
                            "--master)");
    size_t nservers = 1;
    for (const char *p = servers; *p; p++)
        nservers += *p == ',';
    if (nservers > 64)
        return trainer_fail("--server: at most 64 servers");
    if (trainer_check_out("--params-out", params_out, err, sizeof err) < 0 ||
        trainer_check_out("--summary-json", summary, err, sizeof err) < 0)
        return trainer_fail(err);
    log_init("psbench-trainer", level);
    trainer_check_blas();
    signal(SIGPIPE, SIG_IGN);
    if (is_bu) {
        if (compute_place(dev, cfg.rank, &bu.device, err, sizeof err) < 0)
            return trainer_fail(err);
        bu.rank = cfg.rank;
        bu.rpc_timeout_s = cfg.rpc_timeout_s;
        return trainer_batch_update(&bu, servers, token, connect_timeout, transport, cfg.batches, cfg.warmup, summary,
                                    params_out);
    }

    memneed need;
    memneed_synthetic((uint64_t)cfg.buckets * cfg.bucket_floats, &need);
    if (trainer_check_memory(&need, err, sizeof err) < 0) {
        fprintf(stderr, "psbench-trainer: rank %" PRIu64 ": %s\n", cfg.rank, err);
        return 1;
    }
    metrics *m = metrics_new();
    synthetic *syn = m ? synthetic_new(&cfg, m) : NULL;
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
    if (dev.kind != DEVICE_CPU && !cfg.sparse && transport != PSB_TRANSPORT_TCP) {
        device_spec placed;
        char why[400];
        if (compute_place(dev, cfg.rank, &placed, why, sizeof why) < 0 ||
            !(gpu = synthetic_gpu(syn, placed, why, sizeof why)))
            log_info("rank %" PRIu64 ": no CUDA IPC with the servers: %s", cfg.rank, why);
    }
    client_cfg cc = {.servers = servers, .rank = cfg.rank, .token = token, .timeout_s = connect_timeout,
                     .transport = transport, .gpu = gpu};
    if (client_open(&cl, &cc, &sink, err, sizeof err) < 0) {
        rc = 1;
    } else if (cfg.rank >= cl.trainers) {
        snprintf(err, sizeof err, "--rank %" PRIu64 " is outside 0..%u: the server expects %u trainers",
                 cfg.rank, cl.trainers - 1, cl.trainers);
        rc = 1;
    } else {
        log_info("rank %" PRIu64 ": %zu server(s), %u trainers, %u buckets x %" PRIu64 " floats, %" PRIu64
                 " batches%s", cfg.rank, cl.nconns, cl.trainers, cfg.buckets, cfg.bucket_floats,
                 cfg.batches, cfg.sparse ? " (sparse)" : "");
        trainer_log_links(&cl, cfg.rank);
        if (synthetic_run(syn, &cl, &rep, err, sizeof err) < 0)
            rc = 1;
    }
    client_close(&cl);
    if (rc == 0) {
        printf("psbench-trainer %" PRIu64 ": %" PRIu64 " batches in %.3f s (%.1f batches/s), every result checked",
               cfg.rank, rep.batches, rep.seconds, rep.seconds > 0 ? (double)rep.batches / rep.seconds : 0.0);
        if (rep.results_gpu)
            printf(" (%" PRIu64 " of them over CUDA IPC, on the GPU)", rep.results_gpu);
        printf("\n");
        char title[64];
        snprintf(title, sizeof title, "trainer %" PRIu64 " metrics (ms)", cfg.rank);
        metrics_print_table(m, stdout, title);
        if (summary &&
            trainer_write_summary(summary, m, rep.batches, rep.batches, false, rep.seconds, rep.bytes_pushed, err,
                                  sizeof err) < 0)
            rc = 1;
    }
    synthetic_free(syn);
    metrics_free(m);
    if (rc != 0)
        fprintf(stderr, "psbench-trainer: rank %" PRIu64 ": %s\n", cfg.rank, err);
    return rc;
}
