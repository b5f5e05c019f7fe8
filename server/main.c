/* main.c — psbench-server: command line, then the reactor until a signal.
 *
 * A server averages gradient buckets pushed by its trainers: per (batch,
 * bucket) it waits for every trainer, then sends each of them the mean —
 * or, as a batch-update server, owns a model and answers every round of
 * gradients with the parameters after an SGD step — or, as an embedding
 * server, holds an EmbeddingBag table that trainers look rows up in and
 * update.
 */
#include "server/bounds.h"
#include "server/hostmem.h"
#include "server/master_link.h"
#include "server/reduce.h"
#include "server/server.h"
#include "shared/cli.h"
#include "shared/devspec.h"
#include "shared/gpu.h"
#include "shared/hostinfo.h"
#include "shared/log.h"
#include "shared/net.h"

#include <getopt.h>
#include <malloc.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void server_usage(FILE *f)
{
    fprintf(f,
        "usage: psbench-server --master HOST:PORT [options]\n"
        "       psbench-server --standalone --trainers N [options]\n"
        "\n"
        "Averages gradient buckets: for every (batch, bucket) it waits until all\n"
        "N trainers have pushed, then sends each of them the element-wise mean.\n"
        "As a batch-update server it owns the model and answers each round of\n"
        "gradients with the parameters after one SGD step. As an embedding\n"
        "server it holds an EmbeddingBag table: trainers look bags of rows up\n"
        "and send each lookup's gradient back as an SGD update.\n"
        "One thread, one event loop, every trainer connection on it.\n"
        "\n"
        "options:\n"
        "  --standalone            serve trainers without a master (needs --trainers)\n"
        "  --trainers N            trainers expected per bucket (1..65536)\n"
        "  --listen HOST:PORT      where to accept trainers (default 0.0.0.0:0, an\n"
        "                          ephemeral port; the chosen address is printed)\n"
        "  --kind KIND             average (streaming sum, default), average-batch\n"
        "                          (keep every push, sum when the last arrives),\n"
        "                          batch-update (the seed's BatchUpdateParameterServer)\n"
        "                          or embedding (the DDP+RPC benchmark's EmbeddingBag)\n"
        "  --device DEV            cpu (default), or cuda[:N]: GPU N (default 0)\n"
        "                          averages on a CUDA stream (pushes copied in as\n"
        "                          they arrive, the mean copied back once); refused at\n"
        "                          start with the reason where no GPU answers.\n"
        "                          For tests: test (the CPU, finishing every future\n"
        "                          late on a worker thread) and fake-cuda (the cuda\n"
        "                          device on a fake GPU made of host threads).\n"
        "                          $PSBENCH_SERVER_DEVICE sets the default\n"
        "  --rank R                this server's rank, sent to trainers (default 0);\n"
        "                          an embedding server's table stream. With --master:\n"
        "                          that rank, or a refusal if it is taken or outside\n"
        "                          the job's ranks\n"
        "  --max-payload BYTES     largest payload accepted (default 1G; K/M/G ok)\n"
        "  --max-queued BYTES      results queued to one trainer that is not reading\n"
        "                          before it is disconnected (default 256M); also\n"
        "                          the most result bytes lent to one trainer (below)\n"
        "  --max-open-pushes N     pushes of one trainer waiting for their answer, at\n"
        "                          most (default 8192); more is refused too_large\n"
        "  --max-open-bytes BYTES  their payload bytes, at most (default 64M). With\n"
        "                          --master both follow from the job's model (two\n"
        "                          batches of one trainer's buckets) unless given\n"
        "  --splice                splice results of 64 KiB or more (zero-copy) to\n"
        "                          trainers whose hello promised to read a batch's\n"
        "                          results before pushing on (psbench's trainers do):\n"
        "                          the kernel sends the buffer's pages, and the buffer\n"
        "                          is reused once that trainer has pushed a later\n"
        "                          batch. Faster where page references cost less than\n"
        "                          copies; measure it with bench/server_throughput.sh\n"
        "  --no-splice             copy every result into the sockets (default)\n"
        "  --transport T           auto (default; $PSBENCH_TRANSPORT sets it): TCP,\n"
        "                          and trainers on this host over shared memory — a\n"
        "                          Unix socket (abstract; a TCP hello asking for it\n"
        "                          is answered with its name: `redirect`),\n"
        "                          pushes folded from the trainer's pages, each mean\n"
        "                          written once into a segment trainers map\n"
        "                          read-only; shm: shared memory only (a TCP hello\n"
        "                          is refused); tcp: TCP only (docs/protocol.md)\n"
        "  --max-shm BYTES         the largest segment one trainer may hand over\n"
        "                          (default 64G, virtual: its pages are the\n"
        "                          trainer's); K/M/G ok\n"
        "  --gpu-share BYTES       --device cuda: GPU memory shared with CUDA\n"
        "                          trainers on this GPU (CUDA IPC over a shared-memory\n"
        "                          link: their pushes folded from their GPU memory,\n"
        "                          the means they read kept here); made at the first\n"
        "                          trainer's export (default 1G; 0: no CUDA IPC)\n"
        "batch-update (standalone; from a master, its configuration decides):\n"
        "  --in-features N         the model is Linear(N, M): default 100\n"
        "  --out-features M        default 30\n"
        "  --lr LR                 SGD learning rate (default 0.001; embedding: 0.05)\n"
        "  --momentum M            SGD momentum (default 0.9)\n"
        "  --batch-update-size K   pushes per update round (default: --trainers)\n"
        "  --seed S                initializes the parameters (default 0; embedding:\n"
        "                          the table, N(0, 1) from stream 2000 + rank)\n"
        "  --part P/N              this server holds part P of N of the flat\n"
        "                          parameter vector (default 0/1)\n"
        "embedding (standalone; --lr and --seed above apply too):\n"
        "  --num-embeddings N      rows of the table (default 300)\n"
        "  --embedding-dim D       columns of the table (default 64); N x D at\n"
        "                          most 2^31, and no more than this host's available\n"
        "                          memory (refused at start). The table is filled on\n"
        "                          the event loop a slice at a time; trainers are\n"
        "                          answered once it is complete\n"
        "  --token-file FILE       trainers must present the token on FILE's first line\n"
        "                          (keep it mode 600); with --master, the job's token\n"
        "  --token T               the token on the command line (shown by ps: prefer\n"
        "                          --token-file). Precedence: --token, --token-file,\n"
        "                          $PSBENCH_TOKEN. Without a token a server listening\n"
        "                          beyond loopback warns: anyone who reaches it can push\n"
        "                          into the run\n"
        "  --hello-timeout SECONDS a connection that has not said a good hello by\n"
        "                          then is answered bad_frame and closed (default 30)\n"
        "  --master HOST:PORT      register with a psbench-master, which assigns the\n"
        "                          rank, the trainer count and the kind\n"
        "  --connect-timeout SECONDS  with --master: keep trying to reach the master\n"
        "                          this long while it is not listening yet, and wait\n"
        "                          this long for its first answer: a peer that is not\n"
        "                          a psbench master is named (default 30)\n"
        "  --advertise HOST        the address trainers should use to reach this\n"
        "                          server (default: as the master sees it)\n"
        "  --log-level LEVEL       error, warn, info (default) or debug\n"
        "  --help, --version\n"
        "\n"
        "On exit (SIGINT/SIGTERM) it prints its metrics in milliseconds, per\n"
        "(batch, bucket) (batch-update: per round). The seed's clock starts when\n"
        "the first push has been received whole (its RPC handler runs once a\n"
        "gradient's whole message is in):\n"
        "  parameter_server_batch_metric,param_index_batch: first push received\n"
        "    whole to results queued\n"
        "  parameter_server_straggler_metric,param_index_straggler: first push\n"
        "    received whole to last push received whole\n"
        "psbench's: the same two from the first push's header (rows 3 and 4)\n"
        "  parameter_server_batch_metric,param_index_batch_from_header: the first\n"
        "    push's header to results queued (the first push's transfer included)\n"
        "  parameter_server_straggler_metric,param_index_straggler_from_header:\n"
        "    the first push's header to last push received whole\n"
        "and, after the kind's rows, per trainer rank R as it joins:\n"
        "  parameter_server_straggler_metric,trainer_lag_R: first push received\n"
        "    whole to R's push received whole, as the straggler metric counts:\n"
        "    0 for the first, the straggler figure for the last, so the\n"
        "    straggler stands out.\n"
        "The kind's rows: method_metric,average computation (or, for batch-update,\n"
        "method_metric,update: the mean and the SGD step; for embedding,\n"
        "method_metric,lookup and method_metric,update: a whole frame in to its\n"
        "work done) and, for embedding, the rows touched.\n");
}

enum {
    OPT_STANDALONE = 256, OPT_TRAINERS, OPT_LISTEN, OPT_KIND, OPT_DEVICE, OPT_RANK,
    OPT_MAX_PAYLOAD, OPT_MAX_QUEUED, OPT_TOKEN, OPT_MASTER, OPT_LOG_LEVEL, OPT_HELP, OPT_VERSION,
    OPT_ADVERTISE, OPT_SPLICE, OPT_NO_SPLICE, OPT_HELLO_TIMEOUT, OPT_MAX_OPEN_PUSHES, OPT_MAX_OPEN_BYTES,
    OPT_CONNECT_TIMEOUT, OPT_IN_FEATURES, OPT_OUT_FEATURES,
    OPT_LR, OPT_MOMENTUM, OPT_BU_SIZE, OPT_SEED, OPT_PART, OPT_NUM_EMBEDDINGS, OPT_EMBEDDING_DIM,
    OPT_TOKEN_FILE, OPT_TRANSPORT, OPT_MAX_SHM, OPT_GPU_SHARE,
};

static const struct option server_opts[] = {
    {"standalone", no_argument, NULL, OPT_STANDALONE},
    {"trainers", required_argument, NULL, OPT_TRAINERS},
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"kind", required_argument, NULL, OPT_KIND},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"rank", required_argument, NULL, OPT_RANK},
    {"max-payload", required_argument, NULL, OPT_MAX_PAYLOAD},
    {"max-queued", required_argument, NULL, OPT_MAX_QUEUED},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"master", required_argument, NULL, OPT_MASTER},
    {"advertise", required_argument, NULL, OPT_ADVERTISE},
    {"splice", no_argument, NULL, OPT_SPLICE},
    {"no-splice", no_argument, NULL, OPT_NO_SPLICE},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"max-shm", required_argument, NULL, OPT_MAX_SHM},
    {"gpu-share", required_argument, NULL, OPT_GPU_SHARE},
    {"hello-timeout", required_argument, NULL, OPT_HELLO_TIMEOUT},
    {"max-open-pushes", required_argument, NULL, OPT_MAX_OPEN_PUSHES},
    {"max-open-bytes", required_argument, NULL, OPT_MAX_OPEN_BYTES},
    {"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
    {"in-features", required_argument, NULL, OPT_IN_FEATURES},
    {"out-features", required_argument, NULL, OPT_OUT_FEATURES},
    {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"batch-update-size", required_argument, NULL, OPT_BU_SIZE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"part", required_argument, NULL, OPT_PART},
    {"num-embeddings", required_argument, NULL, OPT_NUM_EMBEDDINGS},
    {"embedding-dim", required_argument, NULL, OPT_EMBEDDING_DIM},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* A trainer connection may hold three descriptors: its socket and the pipe
 * its zero-copy results go through (outq.h). Allow as many as the hard
 * limit does, as servers do, rather than stop at a soft limit of 1024. */
static void server_raise_fd_limit(void)
{
    unsigned long long was, now;
    if (net_raise_fd_limit(&was, &now) == 0 && now != was)
        log_debug("descriptor limit raised from %llu to %llu", was, now);
}

/* A standalone embedding server's table must fit this host's memory: it
 * is refused at start, not by the OOM killer mid-run. (With a master, the
 * master checks every server's table against its host at assignment.) */
static int server_check_table_memory(const embedding_config *emb, char *err, size_t errlen)
{
    uint64_t total, available;
    if (emb->num_embeddings > (1ull << 31) || emb->embedding_dim > (1ull << 31) ||
        hostmem_read(&total, &available) < 0)
        return 0; /* the kind refuses the shape itself; no reading, no check */
    uint64_t bytes = emb->num_embeddings * emb->embedding_dim * sizeof(float);
    if (bytes <= available)
        return 0;
    char b[32], a[32], t[32];
    cli_format_bytes(bytes, b, sizeof b);
    cli_format_bytes(available, a, sizeof a);
    cli_format_bytes(total, t, sizeof t);
    snprintf(err, errlen,
             "embedding: a table of %" PRIu64 " x %" PRIu64 " floats (%s) does not fit this host's memory "
             "(%s available of %s): use a smaller --num-embeddings or --embedding-dim",
             emb->num_embeddings, emb->embedding_dim, b, a, t);
    return -1;
}

static int server_fail(const char *msg)
{
    fprintf(stderr, "psbench-server: %s\n", msg);
    return 2;
}

/* The run failed (this server's setup, reported to the master): its
 * reason or the master's verdict, exit 1 as for any failed run. */
static int server_fail_run(const char *msg)
{
    fprintf(stderr, "psbench-server: %s\n", msg);
    return 1;
}

/* A flag's bad value: the line names the flag. */
static int server_fail_flag(const char *flag, const char *msg)
{
    fprintf(stderr, "psbench-server: %s: %s\n", flag, msg);
    return 2;
}

/* What this server computes with, for its register: the host
 * (shared/hostinfo.h) and which loops its dense folds run ("avx2" or
 * "portable": server/reduce.h; the same bits either way, not the same
 * speed). */
/* What this server computes with: the host, its fold, and with --device
 * cuda[:N] the GPU (gpu_describe). */
static json_t *server_environment(device_spec dev)
{
    json_t *env = hostinfo_json();
    if (!env)
        return NULL;
    json_object_set_new(env, "fold", json_string(reduce_wide_in_use() ? "avx2" : "portable"));
    json_t *gpu = NULL;
    char line[256], err[256];
    if (dev.kind == DEVICE_CUDA &&
        gpu_describe(devspec_gpu(dev), line, sizeof line, &gpu, err, sizeof err) == 0 && gpu)
        json_object_set_new(env, "gpu", gpu);
    else if (dev.kind == DEVICE_FAKE_CUDA) /* tests: named as what it is */
        json_object_set_new(env, "gpu", json_pack("{s:s, s:s}", "name", "fake GPU (host memory; tests only)", "uuid",
                                                  "fake-GPU"));
    return env;
}

int main(int argc, char **argv)
{
    server_config cfg = {0};
    strcpy(cfg.host, "0.0.0.0");
    cfg.max_payload = FRAME_MAX_PAYLOAD_DEFAULT;
    cfg.max_queued = 256ull << 20;
    cfg.hello_timeout_s = 30;
    cfg.transport = psb_transport_default();
    cfg.max_shm = SHM_SEG_DEFAULT_MAX;
    cfg.gpu_share = (uint64_t)1 << 30;
    uint32_t open_pushes = BOUNDS_DEFAULT_PUSHES;
    uint64_t open_bytes = BOUNDS_DEFAULT_BYTES;
    cfg.kind.id = KIND_AVERAGE;
    cfg.kind.bu = (batch_update_config){.in_features = 100, .out_features = 30, .lr = 0.001f,
                                        .momentum = 0.9f, .parts = 1};
    cfg.kind.emb = (embedding_config){.num_embeddings = 300, .embedding_dim = 64, .lr = 0.05f};
    bool standalone = false, bu_flags = false, emb_flags = false;
    bool have_lr = false, have_seed = false; /* for either kind: applied once the kind is known */
    float lr = 0;
    uint64_t seed = 0;
    bool have_rank = false;
    double connect_timeout_s = 30; /* --connect-timeout: keep trying the master */
    const char *master = NULL, *advertise = NULL, *device_name = NULL, *token_file = NULL;
    static char token_buf[CLI_TOKEN_MAX + 1]; /* --token-file's token */
    cfg.listen_fd = -1;
    log_level level = LOG_INFO;
    char err[256];
    uint64_t v;

    cli_normalize_args(argc, argv);
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", server_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_STANDALONE:
            standalone = true;
            break;
        case OPT_TRAINERS:
            if (cli_parse_u64("--trainers", optarg, 1, 65536, 0, &v, err, sizeof err) < 0)
                return server_fail(err);
            cfg.trainers = (uint32_t)v;
            break;
        case OPT_LISTEN:
            if (net_parse_hostport(optarg, cfg.host, sizeof cfg.host, &cfg.port, 1, err, sizeof err) < 0)
                return server_fail_flag("--listen", err);
            break;
        case OPT_KIND:
            if (kind_parse(optarg, &cfg.kind.id) < 0) {
                snprintf(err, sizeof err, "--kind: '%s' is not average, average-batch, batch-update or embedding",
                         optarg);
                return server_fail(err);
            }
            break;
        case OPT_DEVICE:
            device_name = optarg;
            break;
        case OPT_IN_FEATURES:
        case OPT_OUT_FEATURES:
        case OPT_BU_SIZE:
            if (cli_parse_u64(opt == OPT_IN_FEATURES    ? "--in-features"
                              : opt == OPT_OUT_FEATURES ? "--out-features"
                                                        : "--batch-update-size",
                              optarg, opt == OPT_BU_SIZE ? 0 : 1, 1u << 20, 0, &v, err, sizeof err) < 0)
                return server_fail(err);
            if (opt == OPT_IN_FEATURES)
                cfg.kind.bu.in_features = (uint32_t)v;
            else if (opt == OPT_OUT_FEATURES)
                cfg.kind.bu.out_features = (uint32_t)v;
            else
                cfg.kind.bu.batch_update_size = (uint32_t)v;
            bu_flags = true;
            break;
        case OPT_LR:
        case OPT_MOMENTUM: {
            char *end;
            double d = strtod(optarg, &end);
            if (end == optarg || *end || !(d >= 0) || d > 1e6) {
                snprintf(err, sizeof err, "%s: '%s' is not a number in 0..1e6",
                         opt == OPT_LR ? "--lr" : "--momentum", optarg);
                return server_fail(err);
            }
            if (opt == OPT_LR) {
                lr = (float)d;
                have_lr = true;
            } else {
                cfg.kind.bu.momentum = (float)d;
                bu_flags = true;
            }
            break;
        }
        case OPT_SEED:
            if (cli_parse_u64("--seed", optarg, 0, UINT64_MAX, 0, &seed, err, sizeof err) < 0)
                return server_fail(err);
            have_seed = true;
            break;
        case OPT_NUM_EMBEDDINGS:
        case OPT_EMBEDDING_DIM:
            /* Each at most 2^31; their product is checked with the kind. */
            if (cli_parse_u64(opt == OPT_NUM_EMBEDDINGS ? "--num-embeddings" : "--embedding-dim", optarg, 1,
                              1ull << 31, 0, &v, err, sizeof err) < 0)
                return server_fail(err);
            if (opt == OPT_NUM_EMBEDDINGS)
                cfg.kind.emb.num_embeddings = v;
            else
                cfg.kind.emb.embedding_dim = v;
            emb_flags = true;
            break;
        case OPT_PART: {
            unsigned long long p, n;
            char extra;
            if (sscanf(optarg, "%llu/%llu%c", &p, &n, &extra) != 2 || n == 0 || p >= n || n > 65536) {
                snprintf(err, sizeof err, "--part: '%s' is not P/N with 0 <= P < N <= 65536", optarg);
                return server_fail(err);
            }
            cfg.kind.bu.part = (uint32_t)p;
            cfg.kind.bu.parts = (uint32_t)n;
            bu_flags = true;
            break;
        }
        case OPT_RANK:
            if (cli_parse_u64("--rank", optarg, 0, UINT32_MAX, 0, &v, err, sizeof err) < 0)
                return server_fail(err);
            cfg.rank = (uint32_t)v;
            have_rank = true;
            break;
        case OPT_MAX_PAYLOAD:
            if (cli_parse_u64("--max-payload", optarg, 1, UINT64_MAX, 1, &cfg.max_payload, err,
                              sizeof err) < 0)
                return server_fail(err);
            break;
        case OPT_MAX_QUEUED:
            if (cli_parse_u64("--max-queued", optarg, 1, UINT64_MAX, 1, &cfg.max_queued, err,
                              sizeof err) < 0)
                return server_fail(err);
            break;
        case OPT_TOKEN:
            cfg.token = optarg;
            break;
        case OPT_TOKEN_FILE:
            token_file = optarg;
            break;
        case OPT_MASTER: {
            /* Checked here, with the flag's name, not when connecting. */
            char mh[256];
            uint16_t mp;
            if (net_parse_hostport(optarg, mh, sizeof mh, &mp, 0, err, sizeof err) < 0)
                return server_fail_flag("--master", err);
            master = optarg;
            break;
        }
        case OPT_ADVERTISE:
            if (net_parse_host(optarg, err, sizeof err) < 0)
                return server_fail_flag("--advertise", err);
            advertise = optarg;
            break;
        case OPT_SPLICE:
            cfg.splice = true;
            break;
        case OPT_NO_SPLICE:
            cfg.splice = false;
            break;
        case OPT_TRANSPORT:
            if (psb_transport_parse(optarg, &cfg.transport) < 0) {
                snprintf(err, sizeof err, "'%.64s' is not a transport (auto, tcp or shm)", optarg);
                return server_fail_flag("--transport", err);
            }
            break;
        case OPT_MAX_SHM:
            if (cli_parse_u64("--max-shm", optarg, 4096, UINT64_MAX, 1, &cfg.max_shm, err, sizeof err) < 0)
                return server_fail(err);
            break;
        case OPT_GPU_SHARE:
            if (cli_parse_u64("--gpu-share", optarg, 0, (uint64_t)1 << 40, 1, &cfg.gpu_share, err, sizeof err) < 0)
                return server_fail(err);
            break;
        case OPT_CONNECT_TIMEOUT:
            if (cli_parse_seconds("--connect-timeout", optarg, &connect_timeout_s, err, sizeof err) < 0)
                return server_fail(err);
            break;
        case OPT_MAX_OPEN_PUSHES:
            if (cli_parse_u64("--max-open-pushes", optarg, 1, UINT32_MAX, 0, &v, err, sizeof err) < 0)
                return server_fail(err);
            open_pushes = (uint32_t)v;
            cfg.open_flags = true;
            break;
        case OPT_MAX_OPEN_BYTES:
            if (cli_parse_u64("--max-open-bytes", optarg, 1, UINT64_MAX, 1, &open_bytes, err, sizeof err) < 0)
                return server_fail(err);
            cfg.open_flags = true;
            break;
        case OPT_HELLO_TIMEOUT:
            if (cli_parse_seconds("--hello-timeout", optarg, &cfg.hello_timeout_s, err, sizeof err) < 0)
                return server_fail(err);
            break;
        case OPT_LOG_LEVEL:
            if (log_level_parse(optarg, &level) < 0) {
                snprintf(err, sizeof err, "--log-level: '%s' is not error, warn, info or debug", optarg);
                return server_fail(err);
            }
            break;
        case OPT_HELP:
        case 'h':
            server_usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("psbench-server %s (wire protocol %u)\n", PSBENCH_VERSION, FRAME_PROTOCOL_VERSION);
            return 0;
        default:
            snprintf(err, sizeof err, "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
            return server_fail(err);
        }
    }
    if (optind < argc) {
        snprintf(err, sizeof err, "unexpected argument '%s' (see --help)", argv[optind]);
        return server_fail(err);
    }
    bounds_from_flags(open_pushes, open_bytes, &cfg.open); /* the job's replace them (master_link.c) */
    if (master && standalone)
        return server_fail("--master and --standalone exclude each other");
    if (!master && !standalone)
        return server_fail("say --master HOST:PORT or --standalone --trainers N (see --help)");
    if (standalone && !cfg.trainers)
        return server_fail("--standalone needs --trainers N");
    if (master && cfg.trainers)
        return server_fail("--trainers: with --master, the master decides the trainer count");
    if (master && (bu_flags || emb_flags || have_lr || have_seed))
        return server_fail(emb_flags ? "the embedding flags are for --standalone: with --master, its "
                                       "configuration decides"
                                     : "the batch-update flags are for --standalone: with --master, its "
                                       "configuration decides");
    if (bu_flags && cfg.kind.id != KIND_BATCH_UPDATE)
        return server_fail("--in-features, --out-features, --momentum, --batch-update-size and --part need "
                           "--kind batch-update");
    if (emb_flags && cfg.kind.id != KIND_EMBEDDING)
        return server_fail("--num-embeddings and --embedding-dim need --kind embedding");
    if ((have_lr || have_seed) && cfg.kind.id != KIND_BATCH_UPDATE && cfg.kind.id != KIND_EMBEDDING)
        return server_fail("--lr and --seed need --kind batch-update or --kind embedding");
    if (cfg.kind.id == KIND_EMBEDDING) {
        if (have_lr)
            cfg.kind.emb.lr = lr;
        if (have_seed)
            cfg.kind.emb.seed = seed;
    } else {
        if (have_lr)
            cfg.kind.bu.lr = lr;
        if (have_seed)
            cfg.kind.bu.seed = seed;
    }
    if (!device_name) {
        const char *d = getenv("PSBENCH_SERVER_DEVICE");
        device_name = d && *d ? d : "cpu";
    }
    /* --device, parsed once (shared/devspec.h). */
    if (devspec_parse("--device", device_name, DEVSPEC_SERVER, &cfg.device, err, sizeof err) < 0)
        return server_fail(err);
    /* Why this server cannot serve, found before it joined its master: the
     * master hears it (`failed`) once joined, so that its verdict gives the
     * reason rather than "server 0 exited with status 2". */
    char setup_err[512] = "";
    /* The reason a user can act on first, in one line, before anything
     * starts: no CUDA runtime, no GPU, no such GPU, or a build without
     * CUDA (plain "cuda": GPU 0). */
    if (cfg.device.kind == DEVICE_CUDA &&
        gpu_check_device(device_name, devspec_gpu(cfg.device), err, sizeof err) < 0) {
        if (!master)
            return server_fail(err);
        snprintf(setup_err, sizeof setup_err, "%s", err);
    }
    log_init("psbench-server", level);
    /* The token: --token, else --token-file, else $PSBENCH_TOKEN. */
    if (!cfg.token && token_file) {
        int loose = 0;
        if (cli_read_token_file(token_file, token_buf, sizeof token_buf, &loose, err, sizeof err) < 0)
            return server_fail(err);
        if (loose)
            log_warn("--token-file %s is readable by other users: chmod 600 it", token_file);
        cfg.token = token_buf;
    }
    const char *token_source = cfg.token && cfg.token != token_buf ? "--token" : NULL;
    if (!cfg.token) {
        const char *t = getenv("PSBENCH_TOKEN");
        if (t && *t) {
            cfg.token = t;
            token_source = "PSBENCH_TOKEN";
        }
    }
    if (token_source && cli_check_token(token_source, cfg.token, err, sizeof err) < 0)
        return server_fail(err);
    server_raise_fd_limit();
    if (standalone && cfg.kind.id == KIND_EMBEDDING &&
        server_check_table_memory(&cfg.kind.emb, err, sizeof err) < 0)
        return server_fail(err);

    /* Each round allocates and frees many small blocks (futures, output
     * chains). With glibc's default 128 KiB trim threshold the heap top is
     * returned to the kernel and faulted back in every round: keep it. */
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 16 << 20);

    ctl_conn link = {.fd = -1};
    if (master) {
        /* Listen first: the master tells trainers where to find us. A port
         * that is taken is said to the master too (the register names the
         * port asked for); an ephemeral one that fails leaves nothing to
         * register. */
        cfg.listen_fd = net_listen(cfg.host, cfg.port, 1024, &cfg.port, err, sizeof err);
        if (cfg.listen_fd < 0 && cfg.port == 0)
            return server_fail(setup_err[0] ? setup_err : err);
        if (cfg.listen_fd < 0 && !setup_err[0])
            snprintf(setup_err, sizeof setup_err, "--listen: %s", err);
        json_t *env = server_environment(cfg.device);
        int joined = master_link_join(&link, master, &cfg, advertise, have_rank ? (int64_t)cfg.rank : -1, env,
                                      connect_timeout_s, setup_err[0] ? setup_err : NULL, err, sizeof err);
        json_decref(env);
        if (joined < 0) {
            ctl_close(&link);
            if (cfg.listen_fd >= 0)
                close(cfg.listen_fd);
            return setup_err[0] ? server_fail_run(err) : server_fail(err);
        }
        log_info("joined master %s as server %u (%u trainers per bucket)", master, cfg.rank, cfg.trainers);
    }

    server s;
    if (server_init(&s, &cfg, err, sizeof err) < 0 ||
        (master && master_link_attach(&s, &link, err, sizeof err) < 0)) {
        /* Joined: the master hears why (an embedding table it could not
         * allocate, a device that would not start), not only that the
         * connection closed. */
        bool joined = master != NULL;
        if (joined) {
            char verdict[sizeof err];
            master_link_report_failure(&link, err, verdict, sizeof verdict);
            snprintf(err, sizeof err, "%s", verdict);
        }
        ctl_close(&link);
        server_free(&s);
        return joined ? server_fail_run(err) : server_fail(err);
    }
    ctl_close(&link);
    /* Before the ready line, which scripts wait for. */
    if (!cfg.token && !net_host_is_loopback(cfg.host)) {
        char addr[300];
        snprintf(addr, sizeof addr, strchr(cfg.host, ':') ? "[%s]:%u" : "%s:%u", cfg.host, s.bound_port);
        log_warn("data port %s accepts trainers from any host and no token is set (--token-file FILE or "
                 "PSBENCH_TOKEN); anyone who reaches it can push into the run", addr);
    }
    char cpu[256], dev[256];
    hostinfo_cpu_model(cpu, sizeof cpu);
    device_describe(s.dev, dev, sizeof dev);
    log_info("listening on %s:%u (kind %s, %u trainers, device %s, %s folds; CPU %s, %ld cores; built by %s)",
             cfg.host, s.bound_port, kind_name(cfg.kind.id), cfg.trainers, dev,
             reduce_wide_in_use() ? "AVX2" : "portable", cpu, sysconf(_SC_NPROCESSORS_ONLN), hostinfo_compiler());
    int rc = server_run(&s);
    master_link_free(&s);
    printf("psbench-server %u: %" PRIu64 " pushes in, %" PRIu64 " results out, %" PRIu64
           " bytes in, %" PRIu64 " bytes out, %" PRIu64 " payload buffers allocated",
           cfg.rank, s.pushes, s.results, s.bytes_in, s.bytes_out, s.pool.allocs + device_allocs(s.dev));
    if (cfg.kind.id == KIND_EMBEDDING)
        printf(", %" PRIu64 " lookups, %" PRIu64 " updates, %" PRIu64 " rows touched", s.lookups, s.updates,
               s.kind->rows_touched);
    printf("\n");
    if (cfg.kind.id == KIND_EMBEDDING) {
        /* Since the start or the last reset: frames (bytes, payload bytes). */
        printf("psbench-server %u: calls:", cfg.rank);
        for (int t = 0; t < CALLS_TYPES; t++)
            printf("%s %s %" PRIu64 " (%" PRIu64 " bytes, %" PRIu64 " payload)", t ? "," : "", server_calls_names[t],
                   s.calls[t].frames, s.calls[t].bytes, s.calls[t].payload);
        printf("\n");
    }
    printf("psbench-server %u: result payload bytes: %" PRIu64 " spliced (zero-copy), %" PRIu64
           " copied, %" PRIu64 " read in place (shared memory); %" PRIu64 " pushes folded from trainers' "
           "segments\n",
           cfg.rank, s.bytes_spliced, s.bytes_copied, s.bytes_in_place, s.pushes_in_place);
    if (s.dev && device_has_peers(s.dev))
        printf("psbench-server %u: CUDA IPC: %" PRIu64 " pushes folded from trainers' GPU memory, %" PRIu64
               " result bytes read by trainers from the server's, %" PRIu64 " results never copied to the host\n",
               cfg.rank, s.pushes_gpu, s.bytes_gpu_lent, s.results_gpu_only);
    metrics_print_table(s.metrics, stdout, "server metrics (ms)");
    fflush(stdout);
    int code = s.exit_code ? s.exit_code : (rc < 0 ? 1 : 0);
    char reason[sizeof s.exit_reason];
    snprintf(reason, sizeof reason, "%s", s.exit_reason[0] ? s.exit_reason : "the run failed");
    server_free(&s);
    /* Last, after whatever closing the connections logged: the one line
     * that says why the server stopped. */
    if (code)
        fprintf(stderr, "psbench-server: %s\n", reason);
    return code;
}
