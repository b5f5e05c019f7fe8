/* main.c — psbench-master: the command line, then the run.
 *
 *   psbench-master [options]            run a job (servers and trainers join
 *                                       with --master, or --local spawns them)
 *   psbench-master diff A.json B.json   compare two runs' results.json
 *   psbench-master sweep [options]      a matrix of jobs, a table, a report
 *   psbench-master trace summarize FILE where a trace.json's time went
 */
#include "master/config.h"
#include "master/tools/diff.h"
#include "master/http.h"
#include "master/launcher.h"
#include "master/master.h"
#include "master/hoststate.h"
#include "master/opts.h"
#include "master/tools/sweep.h"
#include "master/tools/trace_sum.h"
#include "shared/frame.h"
#include "shared/log.h"
#include "shared/net.h"

#include <assert.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int master_fail_usage(const char *msg)
{
    fprintf(stderr, "psbench-master: %s\n", msg);
    return 2;
}

/* The directory this executable lives in (the role binaries sit beside it). */
static void master_bin_dir(char *buf, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(buf, len, ".");
        return;
    }
    exe[n] = '\0';
    snprintf(buf, len, "%s", dirname(exe));
}

/* Every resolved flag value on one line, as the seed's launcher prints its
 * args before a run (the token never: only whether there is one). Not
 * under --log-level warn or error: stdout is the headline alone there. */
static void master_echo_args(const run_config *c)
{
    if (c->log_level < LOG_INFO)
        return;
    json_t *o = config_to_json(c);
    if (o)
        json_object_del(o, "resolved");
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (s) {
        printf("args: %s\n", s);
        fflush(stdout);
    }
    free(s);
    json_decref(o);
}

/* "HOST:PORT", with brackets around an IPv6 host. */
static void master_hostport(char *buf, size_t len, const char *host, unsigned port)
{
    snprintf(buf, len, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}

/* One warning per port that listens beyond loopback while the job has no
 * token: anyone who reaches the control port can register a node, and the
 * (read-only) HTTP port shows the run to anyone. */
static void master_warn_open_ports(const run_config *c, const char *lhost, unsigned lport, const char *hhost,
                                   unsigned hport)
{
    if (c->token)
        return;
    char a[300];
    if (!net_host_is_loopback(lhost)) {
        master_hostport(a, sizeof a, lhost, lport);
        log_warn("control port %s accepts nodes from any host and no token is set (--token-file FILE or "
                 "PSBENCH_TOKEN); anyone who reaches it can join the run", a);
    }
    if (!net_host_is_loopback(hhost)) {
        master_hostport(a, sizeof a, hhost, hport);
        log_warn("HTTP port %s (API and dashboard, read-only) is open beyond loopback and no token is set "
                 "(--token-file FILE or PSBENCH_TOKEN); it shows the run's metrics and nodes to anyone who "
                 "reaches it", a);
    }
}

/* The configuration columns of the per-run CSVs (master_settings.csv_config):
 * the values a sweep's sweep.csv gives the same names. */
static void master_csv_config(const run_config *c, master_settings *set)
{
    json_t *tconf = c->resolved.trainer.conf;
    const char *hook = c->resolved.hook ? c->resolved.hook : json_string_value(json_object_get(tconf, "ddp_hook"));
    json_t *cap = json_object_get(tconf, "bucket_cap_mb");
    set->csv_config.hook = hook ? hook : "";
    set->csv_config.trainer = c->trainer;
    set->csv_config.model = c->model;
    bool cuda = c->ncudatrainer + c->ncudaserver > 0, cpu = c->ntrainer + c->nserver > 0;
    set->csv_config.device = cuda && cpu ? "mixed" : cuda ? "cuda" : "cpu"; /* as --dry-run's plan says it */
    set->csv_config.transport = psb_transport_name(c->transport);
    /* NAN: the trainer class has no buckets (its CSV field is empty, as in
     * sweep.csv); a DdpTrainer's resolved configuration always names its cap. */
    set->csv_config.bucket_cap_mb = json_is_number(cap) ? json_number_value(cap) : NAN;
}

/* The run's settings from the resolved configuration: the owned JSON
 * (batch_update, embedding, config_json) is released by
 * master_settings_free. 0, or -1 (out of memory). */
static int master_settings_from(const run_config *c, master_settings *set)
{
    bool hybrid = c->resolved.hybrid, bu = c->resolved.batch_update;
    *set = (master_settings){
        .ntrainer = c->ntrainer + c->ncudatrainer,
        .nserver = c->nserver + c->ncudaserver,
        .ncudatrainer = c->ncudatrainer,
        .ncudaserver = c->ncudaserver,
        /* Batch-update: every trainer feeds every server, each owning a
         * contiguous range of the parameters; HybridModel: every trainer
         * looks up in every server's table. */
        .shard = strcmp(c->placement, "shard") == 0 || hybrid || bu,
        .batches_per_pass = config_batches_per_pass(c),
        .batches_warmup = config_batches_warmup(c),
        .epochs = config_pass_epochs(c),
        .steps = c->steps,
        .batch_size = c->batch_size,
        .seed = c->seed,
        .rpc_timeout_s = c->rpc_timeout_s,
        /* People start nodes by hand on other hosts: give them time to join. */
        .join_timeout_s = c->join_timeout_set ? c->join_timeout_s : c->rpc_timeout_s > 120 ? c->rpc_timeout_s : 120,
        .token = c->token,
        .server_kind = c->resolved.server_kind,
        .batch_update = bu ? config_batch_update_json(c) : NULL,
        .embedding = hybrid ? config_embedding_json(c) : NULL,
        .rpc_pattern = hybrid ? c->resolved.hy.rpc_pattern : NULL,
        .model = config_model_json(c),
        .data = c->resolved.data.json,
        .trainer = c->resolved.trainer.json,
        .config_json = config_to_json(c),
        .backend = c->backend,
        .nccl_group = c->resolved.hook_collective && c->backend &&
                      (strcmp(c->backend, "nccl") == 0 || strcmp(c->backend, "multi") == 0),
        .out_dir = c->out_dir,
        .linger_s = c->linger_s,
        .quiet_host_s = c->quiet_host_s,
        .runs = c->runs,
        .allow_divergence = c->allow_divergence,
        /* --tables, else all but under --log-level warn or error: the
         * headline only (issue 30). */
        .tables = c->tables ? strcmp(c->tables, "all") == 0 : c->log_level >= LOG_INFO,
        .trace = c->trace,
        .trace_steps = TRACE_ALL_STEPS,
        .trace_buffer = (uint32_t)c->trace_buffer,
        .params_max = c->params_max,
    };
    master_csv_config(c, set);
    /* --trace-steps was checked as it was parsed (opts.c). */
    if (c->trace_steps) {
        char why[256];
        int ok = trace_window_parse(c->trace_steps, &set->trace_steps, why, sizeof why);
        assert(ok == 0);
        (void)ok;
    }
    return (bu && !set->batch_update) || (hybrid && !set->embedding) ? -1 : 0;
}

static void master_settings_free(master_settings *set)
{
    json_decref(set->config_json);
    json_decref(set->batch_update);
    json_decref(set->embedding);
}

/* What the job is, at start. */
static void master_log_job(const run_config *c, const master_settings *set)
{
    /* A job without servers says nothing about them. */
    if (set->nserver == 0)
        log_info("job: %u trainer(s) (pure DDP: trainers allreduce among themselves), model %s, %" PRIu64
                 " batches per trainer per pass (warm-up, then timed)", set->ntrainer, c->model,
                 set->batches_per_pass);
    else
        log_info("job: %u trainer(s), %u server(s) (%s), model %s, %" PRIu64
                 " batches per trainer per pass (warm-up, then timed)",
                 set->ntrainer, set->nserver,
                 set->batch_update ? "batch-update: every trainer feeds every server"
                 : set->embedding  ? "DDP + RPC: every trainer looks up in every server's table"
                 : set->shard      ? "shard placement"
                                   : "seed placement",
                 c->model, set->batches_per_pass);
    if (set->embedding)
        log_info("DDP + RPC: rpc_pattern %s (%s)", set->rpc_pattern,
                 strcmp(set->rpc_pattern, "seed") == 0
                     ? "PyTorch's benchmark's: lookups one server at a time, every update awaited, dense table "
                       "gradients"
                     : "psbench's, not PyTorch's benchmark's: lookups to every server at once, updates "
                       "unanswered, a step per named row");
    const char *stay = set->nserver ? "the servers stay, " : "";
    if (set->runs == 0)
        log_info("the job runs back to back until stopped (--runs 0): %sthe trainers join again for every run",
                 stay);
    else if (set->runs > 1)
        log_info("the job runs %u times back to back (--runs): %sthe trainers join again for every run",
                 set->runs, stay);
}

/* The command line and the configuration files, resolved into c, and
 * where the results go checked; the args line echoed. 0, or the exit
 * code (--help, --version: 0; an error: 2, said on stderr). *done: the
 * process exits with that code now. */
static int master_configure(run_config *c, int argc, char **argv, bool *done)
{
    char err[1024];
    *done = true;
    int rc = config_parse_args(c, argc, argv, err, sizeof err);
    if (rc == OPTS_HELP) {
        config_usage(stdout);
        config_usage_ids(c, stdout);
    }
    if (rc == OPTS_VERSION)
        opts_version(master_opts(), stdout);
    if (rc == OPTS_HELP || rc == OPTS_VERSION)
        return 0;
    /* The flags' own values, then the files' (every key of every entry),
     * then how the two fit (a batch-update job has no seed placement): the
     * first error is the cause, e.g. a bad embedding_dim in the model file
     * rather than the placement it would upset. */
    if (rc == 0)
        rc = config_resolve(c, err, sizeof err);
    /* Then where the results go: a run must not end with "cannot write". */
    if (rc == 0 && c->out_dir && results_check_out(c->out_dir, c->runs, err, sizeof err) < 0)
        rc = -1;
    if (rc != 0)
        return master_fail_usage(err);
    log_init("psbench-master", c->log_level);
    master_echo_args(c);
    if (c->token && c->token_file && c->token_file_loose)
        log_warn("--token-file %s is readable by other users: chmod 600 it", c->token_file);
    *done = false;
    return 0;
}

/* --local with a default port that is taken (another master, a notebook
 * on 8080): an ephemeral one instead, said on stderr, rather than failing
 * to bind. A port given (--listen, --http, --master-port) stays as given:
 * another one would not be where the user points nodes or a browser. The
 * probe binds and closes; the real bind follows at once. */
static void master_local_free_port(const run_config *c, const char *what, const char *host, uint16_t *port,
                                   bool given)
{
    if (!c->local || given || *port == 0)
        return;
    char err[256];
    uint16_t bound = 0;
    int fd = net_listen(host, *port, 1, &bound, err, sizeof err);
    if (fd >= 0) {
        close(fd);
        return;
    }
    fd = net_listen(host, 0, 1, &bound, err, sizeof err);
    if (fd < 0)
        return; /* the real bind says why */
    close(fd);
    log_warn("%s port %u on %s is taken: using %u instead (--local picks a free one; give the port to insist)",
             what, *port, host, bound);
    *port = bound;
}

/* --dry-run's last line, "plan: {JSON}": the resolved job in a few keys a
 * program can read (`psbench-master sweep` reads it for each point): hook
 * (null: the trainer class has none), uses_servers, trainer, model,
 * server, ntrainer/nserver (all devices), ncudatrainer/ncudaserver,
 * bucket_cap_mb (null: not a DDP trainer), device (cpu, cuda or mixed),
 * transport, backend, epochs, batch_size; steps and warmup_steps (the
 * timed and warm-up passes' batches per trainer, however given),
 * steps_given (--steps was) and compress (the trainer configuration's:
 * none, fp16, ...; null: the trainer class has none). */
static void master_dry_run_plan(const run_config *c, const master_settings *set)
{
    json_t *tconf = c->resolved.trainer.conf;
    json_t *cap = json_object_get(tconf, "bucket_cap_mb");
    uint32_t nt = set->ntrainer, nct = set->ncudatrainer, ns = set->nserver, ncs = set->ncudaserver;
    bool cuda = nct > 0 || ncs > 0, cpu = nt > nct || ns > ncs;
    json_t *plan = json_pack("{s:o, s:b, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:o, s:s, s:s, s:s, s:I, s:I}",
                             "hook", json_object_get(tconf, "ddp_hook") ? json_deep_copy(json_object_get(tconf, "ddp_hook")) : json_null(),
                             "uses_servers", ns > 0 && c->resolved.hook_servers, "trainer", c->resolved.trainer.id,
                             "model", c->resolved.model.id, "server", c->resolved.server.id, "ntrainer", (json_int_t)nt,
                             "nserver", (json_int_t)ns, "ncudatrainer", (json_int_t)nct, "ncudaserver", (json_int_t)ncs,
                             "bucket_cap_mb", cap ? json_real(json_number_value(cap)) : json_null(),
                             "device", cuda && cpu ? "mixed" : cuda ? "cuda" : "cpu",
                             "transport", psb_transport_name(c->transport), "backend", c->backend,
                             "epochs", (json_int_t)c->epochs, "batch_size", (json_int_t)c->batch_size);
    if (plan) {
        json_object_set_new(plan, "steps", json_integer((json_int_t)set->batches_per_pass));
        json_object_set_new(plan, "warmup_steps", json_integer((json_int_t)set->batches_warmup));
        json_object_set_new(plan, "steps_given", json_boolean(c->steps_set));
        json_t *cz = json_object_get(tconf, "compress");
        json_object_set_new(plan, "compress", json_is_string(cz) ? json_string(json_string_value(cz)) : json_null());
    }
    char *text = plan ? json_dumps(plan, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) : NULL;
    if (text)
        printf("plan: %s\n", text);
    free(text);
    json_decref(plan);
}

/* --dry-run: the plan the flags and files resolve to, on stdout: the job,
 * which trainer feeds which server, the buckets and their bytes where the
 * master knows them (a Synthetic model's; a DummyModel's are cut by the
 * trainers from its layers and bucket_cap_mb), the ports. */
static void master_dry_run(const run_config *c, const master_settings *set, const char *lhost, uint16_t lport,
                           const char *hhost, uint16_t hport)
{
    const char *tcls = c->resolved.trainer.cls;
    json_t *tconf = c->resolved.trainer.conf;
    const char *hook = json_string_value(json_object_get(tconf, "ddp_hook"));
    printf("dry run: nothing is started\n");
    /* A job without servers says nothing about them. */
    bool servers = set->nserver > 0;
    printf("job: %u trainer(s) (%u CUDA), ", set->ntrainer, set->ncudatrainer);
    if (servers)
        printf("%u server(s) (%u CUDA), ", set->nserver, set->ncudaserver);
    if (c->steps)
        printf("%" PRIu64 " step(s) (--steps; %" PRIu64 " epoch(s) of the data) of batch size %" PRIu64
               ", %" PRIu64 " batches per trainer per pass\n", c->steps, set->epochs, c->batch_size,
               set->batches_per_pass);
    else
        printf("%" PRIu64 " epoch(s) of batch size %" PRIu64 ", %" PRIu64 " batches per trainer per pass\n", c->epochs,
               c->batch_size, set->batches_per_pass);
    if (set->batches_warmup != set->batches_per_pass)
        printf("warm-up pass: %" PRIu64 " batches per trainer\n", set->batches_warmup);
    printf("model: %s (%s); data: %s (%s); trainer: %s (%s%s%s)", c->resolved.model.id, c->resolved.model.cls,
           c->resolved.data.id, c->resolved.data.cls, c->resolved.trainer.id, tcls, hook ? ", ddp_hook " : "",
           hook ? hook : "");
    if (servers)
        printf("; server: %s (%s, kind %s)", c->resolved.server.id, c->resolved.server.cls, c->resolved.server_kind);
    printf("\n");
    if (!servers) {
        printf("placement: pure DDP: the trainers allreduce among themselves (%s)\n", c->backend);
    } else if (!c->resolved.hook_servers) {
        printf("placement: no trainer feeds a server: the trainers allreduce among themselves (%s)\n", c->backend);
    } else if (set->shard) {
        printf("placement: every trainer feeds every server (%s)\n",
               set->batch_update ? "batch-update: each server owns a range of the parameters"
               : set->embedding  ? "DDP + RPC: each server holds an embedding table"
                                 : "shard: bucket k goes to server k mod nserver");
    } else {
        uint32_t group = set->ntrainer / set->nserver; /* config_check_fit: it divides */
        printf("placement: seed (trainer r feeds server r / %u)\n", group);
        for (uint32_t s = 0; s < set->nserver; s++) {
            printf("  server %u <- trainer(s)", s);
            for (uint32_t t = s * group; t < (s + 1) * group && t < set->ntrainer; t++)
                printf(" %u", t);
            printf("\n");
        }
    }
    if (c->resolved.synthetic) {
        const config_synthetic *y = &c->resolved.syn;
        printf("buckets: %u of %" PRIu64 " floats (%s): %" PRIu64 " bytes per trainer per step each way\n",
               y->buckets, y->bucket_floats, y->sparse ? "sparse" : "dense",
               (uint64_t)y->buckets * y->bucket_floats * sizeof(float));
    } else if (c->resolved.batch_update) {
        /* trainer/batch_update.c: Linear(in, out)'s weight and bias, one
         * flat vector split over the servers (--part). */
        uint64_t total = c->resolved.bu.out_features * c->resolved.bu.in_features + c->resolved.bu.out_features;
        printf("buckets: the Linear model's %" PRIu64 " parameters, split over the %u server(s): %" PRIu64
               " bytes per trainer per step each way\n", total, set->nserver, total * (uint64_t)sizeof(float));
    } else if (json_object_get(tconf, "bucket_cap_mb")) {
        printf("buckets: cut by each trainer from the model's gradients (bucket_cap_mb %g, first_bucket_mb %g): "
               "their count and bytes per step are the trainers' to know (results.json has them)\n",
               json_number_value(json_object_get(tconf, "bucket_cap_mb")),
               json_number_value(json_object_get(tconf, "first_bucket_mb")));
    } else {
        printf("buckets: the trainers' (trainer class %s)\n", tcls);
    }
    char a[300];
    master_hostport(a, sizeof a, lhost, lport);
    printf("ports: control %s", a);
    master_hostport(a, sizeof a, hhost, hport);
    printf(", HTTP %s", a);
    if (c->local)
        printf(" (--local: %s would be spawned here, transport %s)", servers ? "servers and trainers" : "trainers",
               psb_transport_name(c->transport));
    printf("\n");
    master_dry_run_plan(c, set);
    fflush(stdout);
}

/* --local: the servers and trainers started here, told the token in
 * their environment. 0, or -1 with err. */
static int master_start_local(master *m, const run_config *c, const master_settings *set, const char *lhost,
                              char *err, size_t errlen)
{
    char bin[PATH_MAX];
    master_bin_dir(bin, sizeof bin);
    if (c->token)
        setenv("PSBENCH_TOKEN", c->token, 1); /* the children read it from there */
    launcher_job job = {.base = m->base,
                        .nserver = set->nserver,
                        .ntrainer = set->ntrainer,
                        .ncudaserver = set->ncudaserver,
                        .ncudatrainer = set->ncudatrainer,
                        .transport = c->transport,
                        .child_stdout = set->tables,
                        .child_failed = master_child_failed,
                        .ctx = m};
    m->launcher = launcher_start(&job, bin, lhost, m->ctl_port, err, errlen);
    return m->launcher ? 0 : -1;
}

/* The run: the control plane and HTTP up, the nodes started or awaited,
 * then the run's loop. The exit code. */
static int master_serve(master *m, const run_config *c, const master_settings *set, const char *lhost,
                        uint16_t lport, const char *hhost, uint16_t hport)
{
    char err[1024];
    /* An address that cannot be listened on is a bad --listen or --http
     * value: exit 2, as any, before any node is started. */
    int rc = master_init(m, set, lhost, lport, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "psbench-master: %s\n", err);
        return rc == MASTER_INIT_ADDRESS ? 2 : 1;
    }
    uint16_t bound_http = 0;
    bool bad_address;
    m->http = http_start(hhost, hport, &bound_http, &bad_address, err, sizeof err);
    if (!m->http) {
        fprintf(stderr, "psbench-master: %s\n", err);
        return bad_address ? 2 : 1;
    }
    master_publish(m, false); /* served from the first request on */
    log_info("control plane on %s:%u", lhost, m->ctl_port);
    log_info("HTTP on http://%s:%u/", hhost, bound_http);
    if (c->local && c->log_level >= LOG_INFO) {
        /* Where to point a browser: a wildcard host is this host's loopback. */
        const char *h = strcmp(hhost, "0.0.0.0") == 0 || strcmp(hhost, "::") == 0 ? "127.0.0.1" : hhost;
        char a[300];
        master_hostport(a, sizeof a, h, bound_http);
        printf("dashboard: http://%s/\n", a);
        fflush(stdout);
    }
    master_warn_open_ports(c, lhost, m->ctl_port, hhost, bound_http);
    master_log_job(c, set);
    /* --quiet-host: before the nodes start; the join's time counts from
     * after it. */
    hoststate_quiet_wait(m, set->quiet_host_s);
    m->t_start = m->t_state = master_now();
    if (c->local && master_start_local(m, c, set, lhost, err, sizeof err) < 0) {
        fprintf(stderr, "psbench-master: %s\n", err);
        return 1;
    }
    if (!c->local && set->nserver)
        log_info("waiting for %u server(s) and %u trainer(s): start them with --master HOST:%u",
                 set->nserver, set->ntrainer, m->ctl_port);
    else if (!c->local)
        log_info("waiting for %u trainer(s): start them with --master HOST:%u", set->ntrainer, m->ctl_port);
    int code = master_run(m);
    if (m->state == RUN_FAILED)
        fprintf(stderr, "psbench-master: run failed: %s\n", m->error);
    return code;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "diff") == 0)
        return diff_main(argc - 1, argv + 1, stdout, stderr);
    if (argc > 1 && strcmp(argv[1], "sweep") == 0)
        return sweep_main(argc - 1, argv + 1, stdout, stderr);
    if (argc > 1 && strcmp(argv[1], "trace") == 0)
        return trace_main(argc - 1, argv + 1, stdout, stderr);

    run_config c;
    bool done;
    int code = master_configure(&c, argc, argv, &done);
    if (done) {
        config_free(&c);
        return code;
    }
    char err[1024], lhost[256], hhost[256];
    uint16_t lport, hport;
    if (net_parse_hostport(c.listen, lhost, sizeof lhost, &lport, 1, err, sizeof err) < 0 ||
        net_parse_hostport(c.http, hhost, sizeof hhost, &hport, 1, err, sizeof err) < 0) {
        config_free(&c);
        return master_fail_usage(err);
    }
    /* --master-port sets the port without listen_set: a port other than
     * the default's was given. */
    master_local_free_port(&c, "control", lhost, &lport, c.listen_set || lport != CONFIG_DEFAULT_LISTEN_PORT);
    master_local_free_port(&c, "HTTP", hhost, &hport, c.http_set);
    master_settings set;
    if (master_settings_from(&c, &set) < 0) {
        master_settings_free(&set);
        config_free(&c);
        return master_fail_usage("out of memory");
    }
    if (c.dry_run) {
        master_dry_run(&c, &set, lhost, lport, hhost, hport);
        master_settings_free(&set);
        config_free(&c);
        return 0;
    }
    master m;
    code = master_serve(&m, &c, &set, lhost, lport, hhost, hport);
    if (m.launcher)
        launcher_free(m.launcher);
    http_stop(m.http);
    master_free(&m);
    master_settings_free(&set);
    config_free(&c);
    return code;
}
