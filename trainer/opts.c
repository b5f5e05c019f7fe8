/* opts.c — psbench-trainer's option table (shared/opts.h): every option
 * once, with its argument, default, help text and field of trainer_args;
 * the few that need more than a range have a parser here. */
#include "trainer/opts.h"
#include "shared/net.h"
#include "shared/text.h"
#include "shared/trace.h"

#include <string.h>

#define AT(F) OPT_AT(trainer_args, F)

/* --server LIST: every address now, with the flag's name, not after the
 * first servers have been joined. */
static int trainer_opt_servers(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                               size_t errlen)
{
    (void)o;
    char why[512];
    if (net_check_hostport_list(arg, why, sizeof why) < 0) {
        errbuf_set(err, errlen, "%s: %s", flag, why);
        return -1;
    }
    ((trainer_args *)settings)->servers = arg;
    return 0;
}

/* --master HOST:PORT: one address, not a list. */
static int trainer_opt_master(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                              size_t errlen)
{
    (void)o;
    char why[512];
    if (net_check_hostport_list(arg, why, sizeof why) < 0 || strchr(arg, ',')) {
        if (strchr(arg, ',')) {
            text_shown shown;
            snprintf(why, sizeof why, "%s is one HOST:PORT, not a list", text_show(arg, '\'', &shown));
        }
        errbuf_set(err, errlen, "%s: %s", flag, why);
        return -1;
    }
    ((trainer_args *)settings)->master = arg;
    return 0;
}

/* --collective-host HOST: a host alone. */
static int trainer_opt_host(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                            size_t errlen)
{
    (void)o;
    char why[256];
    if (net_parse_host(arg, why, sizeof why) < 0) {
        errbuf_set(err, errlen, "%s: %s", flag, why);
        return -1;
    }
    ((trainer_args *)settings)->coll_host = arg;
    return 0;
}

/* --device: cpu, cuda, cuda:N, or fake-cuda (tests: no real GPU), parsed
 * once into a->dev as it is read (shared/devspec.h: a trainer's kinds). */
static int trainer_opt_device(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                              size_t errlen)
{
    (void)o;
    trainer_args *a = settings;
    device_spec dev;
    if (devspec_parse(flag, arg, DEVSPEC_TRAINER, &dev, err, errlen) < 0)
        return -1;
    a->device = arg;
    a->dev = dev;
    return 0;
}

/* --trace-steps A:B: the window (trace_window_parse), worded as the
 * master's flag is. */
static int trainer_opt_trace_steps(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                   size_t errlen)
{
    (void)o;
    trainer_args *a = settings;
    char why[256];
    if (trace_window_parse(arg, &a->trace.window, why, sizeof why) < 0) {
        /* The reason without trace.c's own quote of the value (raw):
         * the value is shown escaped here. */
        const char *reason = strstr(why, "': ");
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s: %s", flag, text_show(arg, '\'', &shown), reason ? reason + 3 : why);
        return -1;
    }
    a->trace.window_set = true;
    return 0;
}

/* --compress's values without a master (the master's are its own flag). */
static const char *const trainer_compress_names[] = {"none", "fp16", "bf16", NULL};

static const opt_spec trainer_specs[] = {
    {.kind = OPT_TEXT,
     .help =
         "usage: psbench-trainer --master HOST:PORT [--rank R] [options]\n"
         "       psbench-trainer --server HOST:PORT[,HOST:PORT...] --rank R --model synthetic [options]\n"
         "       psbench-trainer --server HOST:PORT[,HOST:PORT...] --rank R --model batch-update [options]\n"
         "\n"
         "With --master, the master assigns everything else (servers, model, data,\n"
         "batches) and runs the warm-up and timed passes; --rank asks for that rank\n"
         "(the master refuses it if it is taken or outside the job's ranks).\n"
         "The job's --compress (fp16, bf16: allreduce_hook's buckets as PyTorch's\n"
         "fp16/bf16_compress_hook, rpc_hook's and the Synthetic model's dense pushes\n"
         "narrow; powersgd: as its powerSGD_hook, with the PowerSGDState keys of\n"
         "the trainer configuration) comes with the assignment too; without a\n"
         "master, --compress is --model synthetic's (dense, fp16 or bf16);\n"
         "--model batch-update pushes fp32.\n"
         "\n"
         "Pushes gradient buckets to parameter servers and waits for their mean.\n"
         "With --model synthetic it is a pure communication benchmark: every batch\n"
         "pushes K buckets of deterministic data and checks every element of every\n"
         "result against the mean it predicts; any mismatch, error frame or timeout\n"
         "ends the run with a non-zero exit and a one-line reason.\n"
         "With --model batch-update it is PyTorch's BatchUpdateParameterServer\n"
         "trainer: it fetches a Linear model from servers run with --kind batch-update\n"
         "(listed in part order), and per batch draws inputs from --seed, computes the\n"
         "L1 loss's gradient, pushes it and takes the updated parameters back; it\n"
         "prints the servers' update rounds per second at the end.\n"
         "\n"
         "options:\n"},
    {.name = "server", .meta = "LIST", .kind = OPT_CUSTOM, .parse = trainer_opt_servers, .to = AT(servers),
     .example = "127.0.0.1:1,127.0.0.1:2",
     .help = "servers, comma-separated; bucket k goes to server\n"
             "k mod (number of servers)"},
    {.name = "rank", .meta = "R", .kind = OPT_U64, .min = 0, .max = 1u << 30, .to = AT(syn.rank),
     .given = {AT(have_rank)},
     .help = "this trainer's rank (ranks are 0..N-1 for N trainers)"},
    {.name = "model", .meta = "MODEL", .kind = OPT_STRING, .to = AT(model), .example = "synthetic",
     .help = "synthetic, or batch-update (PyTorch's benchmark's\n"
             "Linear model, trained through batch-update servers)"},
    {.name = "buckets", .meta = "K", .kind = OPT_U64, .min = 1, .max = 1u << 20, .to = AT(syn.buckets), .def = "4",
     .help = "buckets per batch, all in flight at once (default 4)"},
    {.name = "bucket-floats", .meta = "S", .kind = OPT_U64, .min = 1, .max = 1ull << 28, .sizes = true,
     .to = AT(syn.bucket_floats), .def = "262144",
     .help = "floats per bucket (default 262144)"},
    {.name = "batches", .meta = "B", .kind = OPT_U64, .min = 1, .max = UINT64_MAX / 2, .to = AT(syn.batches),
     .def = "100",
     .help = "batches to run (default 100)"},
    {.name = "in-features", .meta = "N", .kind = OPT_U64, .min = 1, .max = 1u << 24, .to = AT(bu.in_features),
     .def = "100", .given = {AT(bu_flags)},
     .help = "batch-update: the Linear model's inputs (default 100)"},
    {.name = "out-features", .meta = "N", .kind = OPT_U64, .min = 1, .max = 1u << 24, .to = AT(bu.out_features),
     .def = "30", .given = {AT(bu_flags)},
     .help = "batch-update: its outputs (default 30)"},
    {.name = "batch-size", .meta = "N", .kind = OPT_U64, .min = 1, .max = 1u << 24, .to = AT(bu.batch_size),
     .def = "20", .given = {AT(bu_flags)},
     .help = "batch-update: examples per batch (default 20)"},
    {.name = "seed", .meta = "S", .kind = OPT_U64, .min = 0, .max = UINT64_MAX, .to = AT(bu.seed),
     .given = {AT(bu_flags)},
     .help = "batch-update: the job's seed; inputs come from rng\n"
             "stream 1000 + rank (default 0)"},
    {.name = "warmup-batches", .meta = "W", .kind = OPT_U64, .min = 0, .max = 1u << 30, .to = AT(syn.warmup),
     .help = "run W batches first, left out of the metrics,\n"
             "the summary and its timing (default 0); batch-update:\n"
             "a warm-up pass of W batches, then the timed pass, each\n"
             "fetching the model and drawing the same inputs"},
    {.name = "compress", .meta = "none|fp16|bf16", .kind = OPT_CHOICE, .choices = trainer_compress_names,
     .to = AT(compress),
     .help = "synthetic: its dense pushes in f16 or bf16 (the\n"
             "protocol's narrow pushes: announced in the hello,\n"
             "answered in that type, every element still checked\n"
             "bit for bit) or f32 (none, the default)"},
    {.name = "sparse", .kind = OPT_FLAG, .to = AT(syn.sparse),
     .help = "push sparse buckets (rows of --sparse-cols floats)"},
    {.name = "sparse-cols", .meta = "C", .kind = OPT_U64, .min = 1, .max = 1u << 20, .to = AT(syn.sparse_cols),
     .def = "16",
     .help = "floats per sparse row (default 16)"},
    {.name = "rpc-timeout", .meta = "SECONDS", .kind = OPT_SECONDS, .to = AT(syn.rpc_timeout_s), .def = "60",
     .help = "longest wait for a batch's results (default 60)"},
    {.shared = &opts_connect_timeout, .to = AT(connect_timeout_s),
     .help = "how long to keep trying to reach a server (or the\n"
             "master), and then the longest wait for its first\n"
             "answer: a peer that is not psbench is named (default 30)"},
    {.shared = &opts_token_file, .to = AT(token_file),
     .help = "the job's token (the servers' and the master's): FILE's\n"
             "first line (keep it mode 600)"},
    {.shared = &opts_token, .to = AT(token),
     .help = "the token on the command line (shown by ps: prefer\n"
             "--token-file). Precedence: --token, --token-file,\n"
             "$PSBENCH_TOKEN"},
    {.shared = &opts_transport, .to = AT(transport),
     .help = "to the servers: auto (default; $PSBENCH_TRANSPORT\n"
             "sets it): shared memory with a server on this\n"
             "host (its Unix socket, which the server names when\n"
             "the TCP hello asks), TCP otherwise, saying why;\n"
             "shm: shared memory or a one-line error; tcp: TCP\n"
             "only. For measurements, $PSBENCH_SHM_PUSH=stage\n"
             "copies every push into the segment, =inline sends\n"
             "push payloads on the Unix socket. A CUDA trainer\n"
             "(rpc_hook) whose server computes on its GPU\n"
             "exchanges dense buckets there by CUDA IPC\n"
             "(the start line says '+ CUDA IPC')"},
    {.shared = &opts_device, .to = AT(device), .parse = trainer_opt_device, .def = "cpu",
     .help = "cpu (default), cuda:N (GPU N), or cuda: PyTorch's\n"
             "cuda(rank) placement, GPU (rank mod the GPUs this host\n"
             "shows); refused in one line where it cannot compute\n"
             "(no CUDA runtime, no GPU, no CUDA in this build).\n"
             "CUDA libraries are loaded only when asked for.\n"
             "fake-cuda: tests only (a GPU simulated on the host).\n"
             "--model synthetic (dense, not over tcp): its pushes\n"
             "in that GPU's memory, for servers on it (CUDA IPC);\n"
             "results that come that way are checked whole on\n"
             "the GPU"},
    {.name = "summary-json", .meta = "FILE", .kind = OPT_STRING, .to = AT(summary),
     .help = "write {batches, seconds, rounds_per_s, batch_p50_ms,\n"
             "batch_p99_ms, bytes_pushed} to FILE (batch-update: also\n"
             "rounds, the server updates in the timed pass)"},
    {.name = "master", .meta = "HOST:PORT", .kind = OPT_CUSTOM, .parse = trainer_opt_master, .to = AT(master),
     .example = "127.0.0.1:29500",
     .help = "join a psbench-master"},
    {.shared = &opts_follow, .to = AT(follow), .help = OPTS_FOLLOW_HELP},
    {.shared = &opts_follow_idle, .to = AT(follow_idle_s), .given = {AT(have_follow_idle)},
     .help = OPTS_FOLLOW_IDLE_HELP},
    {.name = "params-out", .meta = "FILE", .kind = OPT_STRING, .to = AT(params_out),
     .help = "with --master and a real model, or --model\n"
             "batch-update: write the final parameters there (raw\n"
             "little-endian float32, the whole model)"},
    {.name = "compute-nice", .meta = "N", .kind = OPT_U64, .min = 0, .max = 19, .to = AT(compute_nice),
     .def = "10",
     .help = "with --master and a real model: run the compute\n"
             "(forward/backward/optimizer) thread N nice levels\n"
             "below the communication thread, so that where busy\n"
             "threads outnumber cores bucket traffic is scheduled\n"
             "ahead of backward (0..19, default 10; 0: same level)"},
    {.name = "collective-host", .meta = "HOST", .kind = OPT_CUSTOM, .parse = trainer_opt_host, .to = AT(coll_host),
     .example = "10.0.0.1",
     .help = "with --master and a collective hook (allreduce_hook,\n"
             "sparse_rpc_hook, hybrid_hook): the address of this host\n"
             "the other trainers connect to for Gloo (default: the\n"
             "address this trainer reaches the master from)"},
    {.name = "trace", .kind = OPT_FLAG, .to = AT(trace.on),
     .help = "with --master: record this trainer's trace (its compute,\n"
             "buckets and frames) and send it to the master, which\n"
             "merges it into DIR/trace.json; on by itself where the\n"
             "master runs with --trace (default off)"},
    {.name = "trace-steps", .meta = "A:B", .kind = OPT_CUSTOM, .parse = trainer_opt_trace_steps,
     .to = AT(trace.window), .example = "10:20",
     .help = "the steps of the timed pass traced: A:B (both\n"
             "included), A: (A onwards) or A (that step alone)\n"
             "(default: the master's --trace-steps, else every step)"},
    {.name = "trace-buffer", .meta = "N", .kind = OPT_U64, .min = 1, .max = TRACE_CAPACITY_MAX,
     .to = AT(trace_buffer),
     .help = "spans each of its rings holds (default: the master's\n"
             "--trace-buffer, else 65536; at most 4194304); a full\n"
             "ring keeps the first spans and says how many it dropped"},
    {.shared = &opts_log_level, .to = AT(log_level),
     .help = "error, warn, info (default) or debug"},
    {.shared = &opts_help, .head = "--help, --version", .help = ""},
    {.shared = &opts_version_opt},
    {.kind = OPT_TEXT,
     .help =
         "\n"
         "Metrics (ms): hook_future_metric,rpc_dense or rpc_sparse per bucket (push\n"
         "queued to result checked), batch_level_metric,batch_all per batch.\n"
         "batch-update: batch_level_metric,batch_all, forward_metric,forward_pass,\n"
         "backward_metric,backward, hook_future_metric,update_and_fetch_model (push to\n"
         "updated parameters received), method_metric,get_model (the fetch per pass).\n"
         "At --log-level debug it logs PyTorch's benchmark's lines per batch\n"
         "(trainerR processing one batch, reporting grads, got updated model).\n"},

    OPTS_END,
};

static const opts_table trainer_table = {
    .prog = "psbench-trainer",
    .specs = trainer_specs,
    .help_col = 26,
    .stop_at_help = true,
};

const opts_table *trainer_opts(void)
{
    return &trainer_table;
}

int trainer_args_init(trainer_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    return opts_init(&trainer_table, a, err, errlen);
}
