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
#include "server/opts.h"
#include "server/reduce.h"
#include "server/server.h"
#include "shared/cli.h"
#include "shared/devspec.h"
#include "shared/follow.h"
#include "shared/gpu.h"
#include "shared/hostinfo.h"
#include "shared/log.h"
#include "shared/net.h"

#include <malloc.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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

/* How the options fit together, once all are parsed; then --lr and
 * --seed go to the kind they are for. 0, or -1 with err. */
static int server_check_args(server_args *a, char *err, size_t errlen)
{
    server_config *cfg = &a->cfg;
    bounds_from_flags(a->open_pushes, a->open_bytes, &cfg->open); /* the job's replace them (master_link.c) */
    const char *why = NULL;
    if (a->master && a->standalone)
        why = "--master and --standalone exclude each other";
    else if (!a->master && !a->standalone)
        why = "say --master HOST:PORT or --standalone --trainers N (see --help)";
    else if (a->standalone && !cfg->trainers)
        why = "--standalone needs --trainers N";
    else if (a->follow && !a->master)
        why = "--follow needs --master HOST:PORT (a standalone server serves until a signal)";
    else if (a->have_follow_idle && !a->follow)
        why = "--follow-idle needs --follow";
    else if (a->standalone && (cfg->trace_flags.on || cfg->trace_flags.window_set || cfg->trace_flags.capacity))
        why = "--trace, --trace-steps and --trace-buffer need --master: the trace goes to the master's trace.json";
    else if (a->master && cfg->trainers)
        why = "--trainers: with --master, the master decides the trainer count";
    else if (a->master && (a->bu_flags || a->emb_flags || a->have_lr || a->have_seed))
        why = a->emb_flags ? "the embedding flags are for --standalone: with --master, its configuration decides"
                           : "the batch-update flags are for --standalone: with --master, its configuration decides";
    else if (a->bu_flags && cfg->kind.id != KIND_BATCH_UPDATE)
        why = "--in-features, --out-features, --momentum, --batch-update-size and --part need --kind batch-update";
    else if (a->emb_flags && cfg->kind.id != KIND_EMBEDDING)
        why = "--num-embeddings and --embedding-dim need --kind embedding";
    else if ((a->have_lr || a->have_seed) && cfg->kind.id != KIND_BATCH_UPDATE && cfg->kind.id != KIND_EMBEDDING)
        why = "--lr and --seed need --kind batch-update or --kind embedding";
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    bool emb = cfg->kind.id == KIND_EMBEDDING;
    if (a->have_lr)
        *(emb ? &cfg->kind.emb.lr : &cfg->kind.bu.lr) = a->lr;
    if (a->have_seed)
        *(emb ? &cfg->kind.emb.seed : &cfg->kind.bu.seed) = a->seed;
    return 0;
}

/* --device (or $PSBENCH_SERVER_DEVICE): the one place it is checked,
 * parsed once into cfg.device (shared/devspec.h). Why this server cannot
 * serve goes to setup_err when it has a master to tell (its verdict then
 * gives the reason rather than "server 0 exited with status 2"); else it
 * is the error. 0, or -1 with err. */
static int server_check_device(server_args *a, char *setup_err, size_t setup_len, char *err, size_t errlen)
{
    if (devspec_parse("--device", a->device, DEVSPEC_SERVER, &a->cfg.device, err, errlen) < 0)
        return -1;
    /* The reason a user can act on first, in one line, before anything
     * starts: no CUDA runtime, no GPU, no such GPU, or a build without
     * CUDA (plain "cuda": GPU 0). */
    if (a->cfg.device.kind == DEVICE_CUDA &&
        gpu_check_device(a->device, devspec_gpu(a->cfg.device), err, errlen) < 0) {
        if (!a->master)
            return -1;
        snprintf(setup_err, setup_len, "%s", err);
    }
    return 0;
}

/* The token (opts_token_resolve's precedence) into cfg.token. */
static int server_take_token(server_args *a, char *err, size_t errlen)
{
    const char *source;
    int loose;
    if (opts_token_resolve(a->cfg.token, a->token_file, a->token_buf, sizeof a->token_buf, &a->cfg.token, &source,
                           &loose, err, errlen) < 0)
        return -1;
    if (loose)
        log_warn("--token-file %s is readable by other users: chmod 600 it", a->token_file);
    return 0;
}

/* With --master: listen first (the master tells trainers where to find
 * us), then join. A port that is taken is said to the master too (the
 * register names the port asked for); an ephemeral one that fails leaves
 * nothing to register. Returns 0, or the exit code with the reason on
 * stderr. */
static int server_join(server_args *a, ctl_conn *link, double reach_s, char *setup_err, size_t setup_len)
{
    server_config *cfg = &a->cfg;
    char err[256];
    cfg->listen_fd = net_listen_flag("--listen", cfg->host, cfg->port, 1024, &cfg->port, err, sizeof err);
    if (cfg->listen_fd < 0 && cfg->port == 0)
        return server_fail(setup_err[0] ? setup_err : err);
    if (cfg->listen_fd < 0 && !setup_err[0])
        snprintf(setup_err, setup_len, "%s", err);
    json_t *env = server_environment(cfg->device);
    bool retry;
    int joined = master_link_join(link, a->master, cfg, a->advertise, a->have_rank ? (int64_t)cfg->rank : -1, env,
                                  reach_s, a->follow, a->connect_timeout_s, setup_err[0] ? setup_err : NULL, &retry, err,
                                  sizeof err);
    json_decref(env);
    if (joined < 0) {
        ctl_close(link);
        if (cfg->listen_fd >= 0)
            close(cfg->listen_fd);
        if (a->follow && retry) { /* no job this time: the supervisor says why, once */
            follow_say_retry(err);
            return PSB_EXIT_RETRY;
        }
        return setup_err[0] ? server_fail_run(err) : server_fail(err);
    }
    log_info("joined master %s as server %u (%u trainers per bucket)", a->master, cfg->rank, cfg->trainers);
    return 0;
}

/* The totals after the run, on stdout. */
static void server_print_totals(const server *s)
{
    const server_config *cfg = &s->cfg;
    printf("psbench-server %u: %" PRIu64 " pushes in, %" PRIu64 " results out, %" PRIu64
           " bytes in, %" PRIu64 " bytes out, %" PRIu64 " payload buffers allocated",
           cfg->rank, s->pushes, s->results, s->bytes_in, s->bytes_out, s->pool.allocs + device_allocs(s->dev));
    if (cfg->kind.id == KIND_EMBEDDING)
        printf(", %" PRIu64 " lookups, %" PRIu64 " updates, %" PRIu64 " rows touched", s->lookups, s->updates,
               s->kind->rows_touched);
    printf("\n");
    if (cfg->kind.id == KIND_EMBEDDING) {
        /* Since the start or the last reset: frames (bytes, payload bytes). */
        printf("psbench-server %u: calls:", cfg->rank);
        for (int t = 0; t < CALLS_TYPES; t++)
            printf("%s %s %" PRIu64 " (%" PRIu64 " bytes, %" PRIu64 " payload)", t ? "," : "", server_calls_names[t],
                   s->calls[t].frames, s->calls[t].bytes, s->calls[t].payload);
        printf("\n");
    }
    printf("psbench-server %u: result payload bytes: %" PRIu64 " spliced (zero-copy), %" PRIu64
           " copied, %" PRIu64 " read in place (shared memory); %" PRIu64 " pushes folded from trainers' "
           "segments\n",
           cfg->rank, s->bytes_spliced, s->bytes_copied, s->bytes_in_place, s->pushes_in_place);
    if (s->dev && device_has_peers(s->dev))
        printf("psbench-server %u: CUDA IPC: %" PRIu64 " pushes folded from trainers' GPU memory, %" PRIu64
               " result bytes read by trainers from the server's, %" PRIu64 " results never copied to the host\n",
               cfg->rank, s->pushes_gpu, s->bytes_gpu_lent, s->results_gpu_only);
    if (s->ipc_opens) /* a first use, apart from every step's figures */
        printf("psbench-server %u: CUDA IPC opens: %" PRIu64 " trainers' exports opened in %.3f ms (%.3f ms each), "
               "each once, as its connection began\n",
               cfg->rank, s->ipc_opens, (double)s->ipc_open_ns / 1e6, (double)s->ipc_open_ns / 1e6 / (double)s->ipc_opens);
    metrics_print_table(s->metrics, stdout, "server metrics (ms)");
    fflush(stdout);
}

/* Before the ready line, which scripts wait for: a data port open beyond
 * loopback without a token. */
static void server_warn_open_port(const server *s)
{
    const server_config *cfg = &s->cfg;
    if (cfg->token || net_host_is_loopback(cfg->host))
        return;
    char addr[300];
    snprintf(addr, sizeof addr, strchr(cfg->host, ':') ? "[%s]:%u" : "%s:%u", cfg->host, s->bound_port);
    log_warn("data port %s accepts trainers from any host and no token is set (--token-file FILE or "
             "PSBENCH_TOKEN); anyone who reaches it can push into the run", addr);
}

/* The server made, joined to its master if it has one, run until a
 * signal; its totals printed. The exit code. */
static int server_serve(server_args *a, ctl_conn *link)
{
    server_config *cfg = &a->cfg;
    char err[256];
    server s;
    if (server_init(&s, cfg, err, sizeof err) < 0 || (a->master && master_link_attach(&s, link, err, sizeof err) < 0)) {
        /* Joined: the master hears why (an embedding table it could not
         * allocate, a device that would not start), not only that the
         * connection closed. */
        bool joined = a->master != NULL;
        if (joined) {
            char verdict[sizeof err];
            master_link_report_failure(link, err, verdict, sizeof verdict);
            snprintf(err, sizeof err, "%s", verdict);
        }
        ctl_close(link);
        server_free(&s);
        return joined ? server_fail_run(err) : server_fail(err);
    }
    ctl_close(link);
    server_warn_open_port(&s);
    char cpu[256], dev[256];
    hostinfo_cpu_model(cpu, sizeof cpu);
    device_describe(s.dev, dev, sizeof dev);
    log_info("listening on %s:%u (kind %s, %u trainers, device %s, %s folds; CPU %s, %ld cores; built by %s)",
             cfg->host, s.bound_port, kind_name(cfg->kind.id), cfg->trainers, dev,
             reduce_wide_in_use() ? "AVX2" : "portable", cpu, sysconf(_SC_NPROCESSORS_ONLN), hostinfo_compiler());
    int rc = server_run(&s);
    master_link_free(&s);
    server_print_totals(&s);
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

/* --follow: one job, in follow_run's child. The device is checked here,
 * not before the fork (a CUDA context does not survive one). */
static int server_follow_job(void *ctx, double reach_s)
{
    server_args *a = ctx;
    char setup_err[512] = "", err[256];
    if (server_check_device(a, setup_err, sizeof setup_err, err, sizeof err) < 0)
        return server_fail(err);
    ctl_conn link = {.fd = -1};
    int rc = server_join(a, &link, reach_s, setup_err, sizeof setup_err);
    return rc != 0 ? rc : server_serve(a, &link);
}

int main(int argc, char **argv)
{
    static server_args a; /* cfg.token may point into it while the server runs */
    char err[256];
    if (server_args_init(&a, err, sizeof err) < 0)
        return server_fail(err);
    int rc = opts_parse_cli(server_opts(), argc, argv, &a, err, sizeof err);
    if (rc < 0)
        return server_fail(err);
    if (rc != OPTS_OK)
        return 0;
    char setup_err[512] = "";
    if (server_check_args(&a, err, sizeof err) < 0 ||
        (!a.follow && server_check_device(&a, setup_err, sizeof setup_err, err, sizeof err) < 0))
        return server_fail(err);
    log_init("psbench-server", a.log_level);
    if (server_take_token(&a, err, sizeof err) < 0)
        return server_fail(err);
    server_raise_fd_limit();
    if (a.standalone && a.cfg.kind.id == KIND_EMBEDDING &&
        server_check_table_memory(&a.cfg.kind.emb, err, sizeof err) < 0)
        return server_fail(err);

    /* Each round allocates and frees many small blocks (futures, output
     * chains). With glibc's default 128 KiB trim threshold the heap top is
     * returned to the kernel and faulted back in every round: keep it. */
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 16 << 20);

    if (a.follow) {
        follow_opts fo = {.idle_s = a.follow_idle_s, .connect_timeout_s = a.connect_timeout_s, .master = a.master};
        return follow_run(&fo, server_follow_job, &a);
    }
    ctl_conn link = {.fd = -1};
    if (a.master && (rc = server_join(&a, &link, a.connect_timeout_s, setup_err, sizeof setup_err)) != 0)
        return rc;
    return server_serve(&a, &link);
}
