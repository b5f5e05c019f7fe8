/* opts.c — psbench-server's option table (shared/opts.h): every option
 * once, with its argument, default, help text and field of server_args;
 * the few that need more than a range have a parser here. */
#include "server/opts.h"
#include "server/kinds.h"
#include "shared/cli.h"
#include "shared/net.h"
#include "shared/text.h"
#include "shared/trace.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT(F) OPT_AT(server_args, F)

/* --listen HOST:PORT: port 0 is an ephemeral port. */
static int server_opt_listen(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                             size_t errlen)
{
    (void)o;
    server_args *a = settings;
    char why[256];
    if (net_parse_hostport(arg, a->cfg.host, sizeof a->cfg.host, &a->cfg.port, 1, why, sizeof why) < 0) {
        errbuf_set(err, errlen, "%s: %s", flag, why);
        return -1;
    }
    return 0;
}

static int server_opt_kind(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                           size_t errlen)
{
    (void)o;
    server_args *a = settings;
    if (kind_parse(arg, &a->cfg.kind.id) < 0) {
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s is not average, average-batch, batch-update or embedding", flag,
                   text_show(arg, '\'', &shown));
        return -1;
    }
    return 0;
}

/* --lr, --momentum: a decimal number in 0..1e6, checked as the float it
 * is used as (1e-46 would be 0: every step a no-op). */
static int server_opt_number(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                             size_t errlen)
{
    double d;
    char why[256];
    text_shown shown;
    if (cli_parse_real(flag, arg, &d, why, sizeof why) < 0 || !(d >= 0) || d > 1e6) {
        errbuf_set(err, errlen, "%s: %s is not a number in 0..1e6", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    const char *f32 = cli_float_problem(d);
    if (f32) {
        errbuf_set(err, errlen, "%s: %s: %s", flag, text_show(arg, 0, &shown), f32);
        return -1;
    }
    assert(o->to.type == OPT_C_FLOAT);
    *(float *)((char *)settings + o->to.off1 - 1) = (float)d;
    return 0;
}

/* --part P/N: this server's share of the flat parameter vector. */
static int server_opt_part(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                           size_t errlen)
{
    (void)o;
    server_args *a = settings;
    /* Two decimal numbers (cli_is_decimal): sscanf's %llu would take
     * blanks, a sign (wrapping "-1") and overflow silently. */
    uint64_t p = 0, n = 0;
    const char *slash = strchr(arg, '/');
    char num[32], why[256];
    bool ok = slash && (size_t)(slash - arg) < sizeof num;
    if (ok) {
        snprintf(num, sizeof num, "%.*s", (int)(slash - arg), arg);
        ok = cli_parse_u64(flag, num, 0, 65535, 0, &p, why, sizeof why) == 0 &&
             cli_parse_u64(flag, slash + 1, 1, 65536, 0, &n, why, sizeof why) == 0 && p < n;
    }
    if (!ok) {
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s is not P/N with 0 <= P < N <= 65536", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    a->cfg.kind.bu.part = (uint32_t)p;
    a->cfg.kind.bu.parts = (uint32_t)n;
    return 0;
}

/* --advertise HOST: a host alone, checked now with the flag's name. */
static int server_opt_advertise(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                size_t errlen)
{
    (void)o;
    char why[256];
    if (net_parse_host(arg, why, sizeof why) < 0) {
        errbuf_set(err, errlen, "%s: %s", flag, why);
        return -1;
    }
    ((server_args *)settings)->advertise = arg;
    return 0;
}

/* --trace-steps A:B: the window of batches traced (trace_window_parse). */
static int server_opt_trace_steps(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                  size_t errlen)
{
    (void)o;
    trace_flags *f = &((server_args *)settings)->cfg.trace_flags;
    char why[256];
    if (trace_window_parse(arg, &f->window, why, sizeof why) < 0) {
        /* The reason without trace.c's own quote of the value (raw):
         * the value is shown escaped here. */
        const char *reason = strstr(why, "': ");
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s: %s", flag, text_show(arg, '\'', &shown), reason ? reason + 3 : why);
        return -1;
    }
    f->window_set = true;
    return 0;
}

/* --device's default: $PSBENCH_SERVER_DEVICE, else cpu. The value is
 * checked once parsing is done (main.c), whichever gave it. */
static int server_opt_device_default(const opt_spec *o, void *settings)
{
    (void)o;
    const char *d = getenv("PSBENCH_SERVER_DEVICE");
    ((server_args *)settings)->device = d && *d ? d : "cpu";
    return 0;
}

static const opt_spec server_specs[] = {
    {.kind = OPT_TEXT,
     .help =
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
         "options:\n"},
    {.name = "standalone", .kind = OPT_FLAG, .to = AT(standalone),
     .help = "serve trainers without a master (needs --trainers)"},
    {.name = "trainers", .meta = "N", .kind = OPT_U64, .min = 1, .max = 65536, .to = AT(cfg.trainers),
     .example = "3",
     .help = "trainers expected per bucket (1..65536)"},
    {.name = "listen", .meta = "HOST:PORT", .kind = OPT_CUSTOM, .parse = server_opt_listen, .def = "0.0.0.0:0",
     .example = "127.0.0.1:5000",
     .help = "where to accept trainers (default 0.0.0.0:0, an\n"
             "ephemeral port; the chosen address is printed)"},
    {.name = "kind", .meta = "KIND", .kind = OPT_CUSTOM, .parse = server_opt_kind, .def = "average",
     .example = "embedding",
     .help = "average (streaming sum, default), average-batch\n"
             "(keep every push, sum when the last arrives),\n"
             "batch-update (PyTorch's BatchUpdateParameterServer)\n"
             "or embedding (the DDP+RPC benchmark's EmbeddingBag)"},
    {.shared = &opts_device, .to = AT(device), .init = server_opt_device_default,
     .help = "cpu (default), or cuda[:N]: GPU N (default 0)\n"
             "averages on a CUDA stream (pushes copied in as\n"
             "they arrive, the mean copied back once); refused at\n"
             "start with the reason where no GPU answers.\n"
             "For tests: test (the CPU, finishing every future\n"
             "late on a worker thread) and fake-cuda (the cuda\n"
             "device on a fake GPU made of host threads).\n"
             "$PSBENCH_SERVER_DEVICE sets the default"},
    {.name = "rank", .meta = "R", .kind = OPT_U64, .min = 0, .max = UINT32_MAX, .to = AT(cfg.rank),
     .given = {AT(have_rank)},
     .help = "this server's rank, sent to trainers (default 0);\n"
             "an embedding server's table stream. With --master:\n"
             "that rank, or a refusal if it is taken or outside\n"
             "the job's ranks"},
    {.name = "max-payload", .meta = "BYTES", .kind = OPT_U64, .min = 1, .max = UINT64_MAX, .sizes = true,
     .to = AT(cfg.max_payload), .def = "1G",
     .help = "largest payload accepted (default 1G; K/M/G ok)"},
    {.name = "max-queued", .meta = "BYTES", .kind = OPT_U64, .min = 1, .max = UINT64_MAX, .sizes = true,
     .to = AT(cfg.max_queued), .def = "256M",
     .help = "results queued to one trainer that is not reading\n"
             "before it is disconnected (default 256M); also\n"
             "the most result bytes lent to one trainer (below)"},
    {.name = "max-open-pushes", .meta = "N", .kind = OPT_U64, .min = 1, .max = UINT32_MAX, .to = AT(open_pushes),
     .def = "8192", .given = {AT(cfg.open_flags)},
     .help = "pushes of one trainer waiting for their answer, at\n"
             "most (default 8192); more is refused too_large"},
    {.name = "max-open-bytes", .meta = "BYTES", .kind = OPT_U64, .min = 1, .max = UINT64_MAX, .sizes = true,
     .to = AT(open_bytes), .def = "64M", .given = {AT(cfg.open_flags)},
     .help = "their payload bytes, at most (default 64M). With\n"
             "--master both follow from the job's model (two\n"
             "batches of one trainer's buckets) unless given"},
    {.name = "splice", .kind = OPT_FLAG, .to = AT(cfg.splice),
     .help = "splice results of 64 KiB or more (zero-copy) to\n"
             "trainers whose hello promised to read a batch's\n"
             "results before pushing on (psbench's trainers do):\n"
             "the kernel sends the buffer's pages, and the buffer\n"
             "is reused once that trainer has pushed a later\n"
             "batch. Faster where page references cost less than\n"
             "copies; measure it with bench/server_throughput.sh"},
    {.name = "no-splice", .kind = OPT_FLAG, .negate = true, .to = AT(cfg.splice),
     .help = "copy every result into the sockets (default)"},
    {.shared = &opts_transport, .to = AT(cfg.transport),
     .help = "auto (default; $PSBENCH_TRANSPORT sets it): TCP,\n"
             "and trainers on this host over shared memory — a\n"
             "Unix socket (abstract; a TCP hello asking for it\n"
             "is answered with its name: `redirect`),\n"
             "pushes folded from the trainer's pages, each mean\n"
             "written once into a segment trainers map\n"
             "read-only; shm: shared memory only (a TCP hello\n"
             "is refused); tcp: TCP only (docs/protocol.md)"},
    {.name = "max-shm", .meta = "BYTES", .kind = OPT_U64, .min = 4096, .max = UINT64_MAX, .sizes = true,
     .to = AT(cfg.max_shm), .def = "64G",
     .help = "the largest segment one trainer may hand over\n"
             "(default 64G, virtual: its pages are the\n"
             "trainer's); K/M/G ok"},
    {.name = "gpu-share", .meta = "BYTES", .kind = OPT_U64, .min = 0, .max = (uint64_t)1 << 40, .sizes = true,
     .to = AT(cfg.gpu_share), .def = "1G",
     .help = "--device cuda: GPU memory shared with CUDA\n"
             "trainers on this GPU (CUDA IPC over a shared-memory\n"
             "link: their pushes folded from their GPU memory,\n"
             "the means they read kept here); made at the first\n"
             "trainer's export (default 1G; 0: no CUDA IPC)"},
    {.kind = OPT_TEXT,
     .help =
         "batch-update (standalone; from a master, its configuration decides):\n"},
    {.name = "in-features", .meta = "N", .kind = OPT_U64, .min = 1, .max = 1u << 20,
     .to = AT(cfg.kind.bu.in_features), .def = "100", .given = {AT(bu_flags)},
     .help = "the model is Linear(N, M): default 100"},
    {.name = "out-features", .meta = "M", .kind = OPT_U64, .min = 1, .max = 1u << 20,
     .to = AT(cfg.kind.bu.out_features), .def = "30", .given = {AT(bu_flags)},
     .help = "default 30"},
    {.name = "lr", .meta = "LR", .kind = OPT_CUSTOM, .parse = server_opt_number, .to = AT(lr),
     .given = {AT(have_lr)}, .example = "0.5",
     .help = "SGD learning rate (default 0.001; embedding: 0.05)"},
    {.name = "momentum", .meta = "M", .kind = OPT_CUSTOM, .parse = server_opt_number,
     .to = AT(cfg.kind.bu.momentum), .def = "0.9", .given = {AT(bu_flags)}, .example = "0.5",
     .help = "SGD momentum (default 0.9)"},
    {.name = "batch-update-size", .meta = "K", .kind = OPT_U64, .min = 0, .max = 1u << 20,
     .to = AT(cfg.kind.bu.batch_update_size), .given = {AT(bu_flags)},
     .help = "pushes per update round (default: --trainers)"},
    {.name = "seed", .meta = "S", .kind = OPT_U64, .min = 0, .max = UINT64_MAX, .to = AT(seed),
     .given = {AT(have_seed)},
     .help = "initializes the parameters (default 0; embedding:\n"
             "the table, N(0, 1) from stream 2000 + rank)"},
    {.name = "part", .meta = "P/N", .kind = OPT_CUSTOM, .parse = server_opt_part, .def = "0/1",
     .given = {AT(bu_flags)}, .example = "1/2",
     .help = "this server holds part P of N of the flat\n"
             "parameter vector (default 0/1)"},
    {.kind = OPT_TEXT,
     .help =
         "embedding (standalone; --lr and --seed above apply too):\n"},
    {.name = "num-embeddings", .meta = "N", .kind = OPT_U64, .min = 1, .max = 1ull << 31,
     .to = AT(cfg.kind.emb.num_embeddings), .def = "300", .given = {AT(emb_flags)},
     .help = "rows of the table (default 300)"},
    {.name = "embedding-dim", .meta = "D", .kind = OPT_U64, .min = 1, .max = 1ull << 31,
     .to = AT(cfg.kind.emb.embedding_dim), .def = "64", .given = {AT(emb_flags)},
     .help = "columns of the table (default 64); N x D at\n"
             "most 2^31, and no more than this host's available\n"
             "memory (refused at start). The table is filled on\n"
             "the event loop a slice at a time; trainers are\n"
             "answered once it is complete"},
    {.kind = OPT_TEXT,
     .help =
         "general (every kind, standalone or with --master):\n"},
    {.shared = &opts_token_file, .to = AT(token_file),
     .help = "trainers must present the token on FILE's first line\n"
             "(keep it mode 600); with --master, the job's token"},
    {.shared = &opts_token, .to = AT(cfg.token),
     .help = "the token on the command line (shown by ps: prefer\n"
             "--token-file). Precedence: --token, --token-file,\n"
             "$PSBENCH_TOKEN. Without a token a server listening\n"
             "beyond loopback warns: anyone who reaches it can push\n"
             "into the run"},
    {.name = "hello-timeout", .meta = "SECONDS", .kind = OPT_SECONDS, .to = AT(cfg.hello_timeout_s), .def = "30",
     .help = "a connection that has not said a good hello by\n"
             "then is answered bad_frame and closed (default 30)"},
    {.name = "master", .meta = "HOST:PORT", .kind = OPT_HOSTPORT, .min = 1, .to = AT(master),
     .help = "register with a psbench-master, which assigns the\n"
             "rank, the trainer count and the kind"},
    {.shared = &opts_connect_timeout, .to = AT(connect_timeout_s),
     .help = "with --master: keep trying to reach the master\n"
             "this long while it is not listening yet, and wait\n"
             "this long for its first answer: a peer that is not\n"
             "a psbench master is named (default 30)"},
    {.shared = &opts_follow, .to = AT(follow), .help = OPTS_FOLLOW_HELP},
    {.shared = &opts_follow_idle, .to = AT(follow_idle_s), .given = {AT(have_follow_idle)},
     .help = OPTS_FOLLOW_IDLE_HELP},
    {.name = "advertise", .meta = "HOST", .kind = OPT_CUSTOM, .parse = server_opt_advertise, .to = AT(advertise),
     .example = "10.0.0.1",
     .help = "the address trainers should use to reach this\n"
             "server (default: as the master sees it)"},
    {.name = "trace", .kind = OPT_FLAG, .to = AT(cfg.trace_flags.on),
     .help = "record this server's trace and send it to the\n"
             "master for its trace.json (needs --master; the\n"
             "master's --trace turns it on too): each push\n"
             "received and folded, device job, resolve and\n"
             "answer sent (docs/results.md; default off)"},
    {.name = "trace-steps", .meta = "A:B", .kind = OPT_CUSTOM, .parse = server_opt_trace_steps, .example = "10:20",
     .help = "the steps traced: A:B (both included), A: (A\n"
             "onwards) or A (that step alone); a server's step\n"
             "is a push's batch in the timed pass (default:\n"
             "the master's --trace-steps, else every step)"},
    {.name = "trace-buffer", .meta = "N", .kind = OPT_U64, .min = 1, .max = TRACE_CAPACITY_MAX,
     .to = AT(cfg.trace_flags.capacity),
     .help = "spans the ring holds (default: the master's\n"
             "--trace-buffer, else 65536; at most 4194304); a\n"
             "full ring keeps the first spans and says how many\n"
             "it dropped"},
    {.shared = &opts_log_level, .to = AT(log_level),
     .help = "error, warn, info (default) or debug"},
    {.shared = &opts_help, .head = "--help, --version", .help = ""},
    {.shared = &opts_version_opt},
    {.kind = OPT_TEXT,
     .help =
         "\n"
         "On exit (SIGINT/SIGTERM) it prints its metrics in milliseconds, per\n"
         "(batch, bucket) (batch-update: per round). The clock starts, as in\n"
         "PyTorch's benchmark, when the first push has been received whole (its\n"
         "RPC handler runs once a gradient's whole message is in):\n"
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
         "work done) and, for embedding, the rows touched.\n"},
    OPTS_END,
};

static const opts_table server_table = {
    .prog = "psbench-server",
    .specs = server_specs,
    .help_col = 26,
    .stop_at_help = true,
};

const opts_table *server_opts(void)
{
    return &server_table;
}

int server_args_init(server_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->cfg.listen_fd = -1;
    /* --lr's default depends on the kind: each kind's own. */
    a->cfg.kind.bu.lr = 0.001f;
    a->cfg.kind.emb.lr = 0.05f;
    return opts_init(&server_table, a, err, errlen);
}
