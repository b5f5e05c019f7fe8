/* config_check.c — the checks of a run configuration (see config.h): the
 * flags' own values (config_check_flags), then how flags and the configs/
 * files fit together (config_check_fit): servers for the hook, the seed
 * placement's divisibility, the HybridModel's shape, batch-update rounds
 * that fill, data that feeds every trainer. (Not master/validate.c, which
 * checks the messages nodes send.) */
#include "master/config_check.h"
#include "master/config_passes.h"
#include "shared/cli.h"
#include "shared/jobconf.h"
#include "shared/log.h"
#include "shared/net.h"
#include "shared/text.h"

#include <string.h>

/* The counts: placement, nodes, epochs or steps, the batch size. */
static int check_counts(const run_config *c, char *err, size_t errlen)
{
    uint64_t tcount = (uint64_t)c->ntrainer + c->ncudatrainer;
    uint64_t scount = (uint64_t)c->nserver + c->ncudaserver;

    if (!c->placement || (strcmp(c->placement, "seed") != 0 && strcmp(c->placement, "shard") != 0)) {
        errbuf_set(err, errlen, "--placement must be seed or shard");
        return -1;
    }
    if (tcount == 0) {
        errbuf_set(err, errlen, "no trainers: --ntrainer + --ncudatrainer must be at least 1");
        return -1;
    }
    if (tcount > CONFIG_MAX_NODES || scount > CONFIG_MAX_NODES) {
        errbuf_set(err, errlen, "too many nodes: at most %u trainers and %u servers", CONFIG_MAX_NODES,
                CONFIG_MAX_NODES);
        return -1;
    }
    if (c->epochs == 0 || c->epochs > CONFIG_MAX_EPOCHS) {
        errbuf_set(err, errlen, "--epochs must be in 1..%u", CONFIG_MAX_EPOCHS);
        return -1;
    }
    if (c->steps_set && c->epochs_set) {
        errbuf_set(err, errlen, "--steps and --epochs both say how long a pass is: give one of them");
        return -1;
    }
    if (c->batch_size == 0 || c->batch_size > CONFIG_MAX_BATCH_SIZE) {
        errbuf_set(err, errlen, "--batch-size must be in 1..%u", CONFIG_MAX_BATCH_SIZE);
        return -1;
    }
    return 0;
}

/* The times and the backend. */
static int check_times(const run_config *c, char *err, size_t errlen)
{
    if (!(c->rpc_timeout_s > 0)) {
        errbuf_set(err, errlen, "--rpc-timeout must be a positive number of seconds");
        return -1;
    }
    if (!(c->linger_s >= 0)) {
        errbuf_set(err, errlen, "--linger must be 0 or a positive number of seconds");
        return -1;
    }
    if (!(c->quiet_host_s >= 0 && c->quiet_host_s <= 86400)) {
        errbuf_set(err, errlen, "--quiet-host must be 0 or a positive number of seconds up to 86400 (a day)");
        return -1;
    }
    if (!c->backend || (strcmp(c->backend, "gloo") != 0 && strcmp(c->backend, "nccl") != 0 &&
                        strcmp(c->backend, "multi") != 0)) {
        text_shown shown;
        errbuf_set(err, errlen, "--backend %s is not gloo, nccl or multi", text_show(c->backend, '\'', &shown));
        return -1;
    }
    return 0;
}

/* The ids, paths and addresses: not empty, the addresses HOST:PORT. */
static int check_strings(const run_config *c, char *err, size_t errlen)
{
    struct { const char *opt, *v; } req[] = {
        {"--trainer", c->trainer},
        {"--server", c->server},
        {"--data", c->data},
        {"--model", c->model},
        {"--data-config-path", c->data_config_path},
        {"--model-config-path", c->model_config_path},
        {"--trainer-config-path", c->trainer_config_path},
        {"--server-config-path", c->server_config_path},
        {"--listen", c->listen},
        {"--http", c->http},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (!req[i].v || !*req[i].v) {
            errbuf_set(err, errlen, "%s needs a non-empty value", req[i].opt);
            return -1;
        }
    }
    struct { const char *opt, *v; } addr[] = {{"--listen", c->listen}, {"--http", c->http}};
    for (size_t i = 0; i < 2; i++) {
        char host[256], perr[400];
        uint16_t port;
        /* net_parse_hostport's reason: "'h:99999': port 99999 is outside
         * 0..65535" says what is wrong, not only that something is. */
        if (net_parse_hostport(addr[i].v, host, sizeof host, &port, 1, perr, sizeof perr) < 0) {
            errbuf_set(err, errlen, "%s %s", addr[i].opt, perr);
            return -1;
        }
    }
    if (c->out_dir && !*c->out_dir) {
        errbuf_set(err, errlen, "--out needs a directory");
        return -1;
    }
    return 0;
}

int config_check_flags(const run_config *c, char *err, size_t errlen)
{
    if (check_counts(c, err, errlen) < 0 || check_times(c, err, errlen) < 0 || check_strings(c, err, errlen) < 0)
        return -1;
    return 0;
}

/* The batch-update benchmark's counts: a server owns the model, the
 * servers can split it, and the rounds of batch_update_size pushes fill. */
static int check_batch_update(const run_config *c, char *err, size_t errlen)
{
    const config_batch_update *b = &c->resolved.bu;
    const char *sid = c->resolved.server.id;
    uint64_t total = b->out_features * b->in_features + b->out_features;
    uint64_t trainers = (uint64_t)c->ntrainer + c->ncudatrainer;
    uint64_t servers = (uint64_t)c->nserver + c->ncudaserver;
    if (servers == 0) {
        errbuf_set(err, errlen,
                   "server '%s' (BatchUpdateParameterServer) owns the model: --nserver 0 (pure DDP) cannot run "
                   "it; use --nserver 1 or more", sid);
        return -1;
    }
    if (servers > total) {
        errbuf_set(err, errlen, "%llu servers cannot split Linear(%llu, %llu)'s %llu parameters",
                   (unsigned long long)servers, (unsigned long long)b->in_features,
                   (unsigned long long)b->out_features, (unsigned long long)total);
        return -1;
    }
    uint64_t k = b->batch_update_size; /* config_load: 0 in the file is the trainer count */
    if (k > trainers) {
        errbuf_set(err, errlen,
                   "server '%s': batch_update_size %llu is more than the %llu trainers; a trainer waits for "
                   "each update, so a round of more pushes than trainers never fills", sid,
                   (unsigned long long)k, (unsigned long long)trainers);
        return -1;
    }
    uint64_t pushes = trainers * c->epochs * b->batches;
    if (k == 0 || (!c->steps && pushes % k != 0)) {
        errbuf_set(err, errlen,
                   "server '%s': batch_update_size %llu does not divide the %llu pushes per pass (%llu trainers "
                   "x %llu batches x %llu epochs): the last round would never fill", sid,
                   (unsigned long long)k, (unsigned long long)pushes, (unsigned long long)trainers,
                   (unsigned long long)b->batches, (unsigned long long)c->epochs);
        return -1;
    }
    /* With --steps / --warmup-steps, each pass's pushes must fill their
     * rounds too. */
    uint64_t passes[2] = {c->steps, c->warmup_steps};
    for (int i = 0; i < 2; i++) {
        if (passes[i] && (trainers * passes[i]) % k != 0) {
            errbuf_set(err, errlen,
                       "server '%s': batch_update_size %llu does not divide the %llu pushes of a pass (%llu trainers "
                       "x %s %llu): the last round would never fill", sid, (unsigned long long)k,
                       (unsigned long long)(trainers * passes[i]), (unsigned long long)trainers,
                       i ? "--warmup-steps" : "--steps", (unsigned long long)passes[i]);
            return -1;
        }
    }
    return 0;
}

/* The seed launcher's placement checks: CPU trainers feed CPU servers,
 * CUDA trainers CUDA servers, each group split evenly. */
static int check_seed_placement(const run_config *c, char *err, size_t errlen)
{
    if (c->ntrainer > 0 && c->ncudatrainer > 0 && (c->nserver == 0 || c->ncudaserver == 0)) {
        errbuf_set(err, errlen,
                "CPU and CUDA trainers together need both CPU and CUDA servers "
                "(--ntrainer %u --ncudatrainer %u, --nserver %u --ncudaserver %u)",
                c->ntrainer, c->ncudatrainer, c->nserver, c->ncudaserver);
        return -1;
    }
    if (c->nserver > 0 && c->ntrainer == 0) {
        errbuf_set(err, errlen, "--nserver %u needs CPU trainers: --ntrainer is 0", c->nserver);
        return -1;
    }
    if (c->ntrainer > 0 && c->nserver == 0) {
        errbuf_set(err, errlen, "--ntrainer %u needs CPU servers: --nserver is 0", c->ntrainer);
        return -1;
    }
    if (c->nserver > 0 && c->ntrainer % c->nserver != 0) {
        errbuf_set(err, errlen,
                "--ntrainer %u is not divisible by --nserver %u (placement seed gives every server "
                "ntrainer / nserver trainers; use --placement shard for other counts)",
                c->ntrainer, c->nserver);
        return -1;
    }
    if (c->ncudaserver > 0 && c->ncudatrainer == 0) {
        errbuf_set(err, errlen, "--ncudaserver %u needs CUDA trainers: --ncudatrainer is 0", c->ncudaserver);
        return -1;
    }
    if (c->ncudatrainer > 0 && c->ncudaserver == 0) {
        errbuf_set(err, errlen, "--ncudatrainer %u needs CUDA servers: --ncudaserver is 0", c->ncudatrainer);
        return -1;
    }
    if (c->ncudaserver > 0 && c->ncudatrainer % c->ncudaserver != 0) {
        errbuf_set(err, errlen,
                "--ncudatrainer %u is not divisible by --ncudaserver %u (placement seed gives every "
                "server ncudatrainer / ncudaserver trainers; use --placement shard for other counts)",
                c->ncudatrainer, c->ncudaserver);
        return -1;
    }
    return 0;
}

/* --compress powersgd: PyTorch's powerSGD_hook / batched_powerSGD_hook run
 * by allreduce_hook on gloo and nccl (CPU trainers, and CUDA trainers'
 * buckets staged through host memory), a DummyModel or a HybridModel's
 * dense part (their tensors are what it factors). A run whose timed pass is no longer than
 * start_powerSGD_iter never compresses: said once, not refused (PyTorch's
 * default is 1000 steps of plain allreduce). */
static int check_powersgd(const run_config *c, char *err, size_t errlen)
{
    const char *hook = c->resolved.hook;
    if (c->resolved.mc.cls == MODEL_SYNTHETIC) {
        errbuf_set(err, errlen,
                   "--compress powersgd: model '%s' (Synthetic) pushes fp32 buckets to the servers and has no "
                   "tensors to factor; PowerSGD compresses a DummyModel's gradients with --ddp-hook allreduce_hook, "
                   "and a HybridModel's dense part",
                   c->resolved.model.id);
        return -1;
    }
    if (hook && (strcmp(hook, "rpc_hook") == 0 || strcmp(hook, "rpc") == 0)) {
        errbuf_set(err, errlen,
                   "--compress powersgd: PowerSGD through the parameter servers is not built: each bucket's P "
                   "needs every trainer's sum, orthogonalized, before its Q can be computed (two dependent "
                   "allreduces a bucket), which a server's average of pushes does not give; trainer '%s' runs "
                   "rpc_hook (--ddp-hook allreduce_hook runs it)",
                   c->resolved.trainer.id);
        return -1;
    }
    if (!hook || strcmp(hook, "allreduce_hook") != 0) {
        errbuf_set(err, errlen,
                   "--compress powersgd: only allreduce_hook runs PowerSGD (PyTorch's powerSGD_hook); trainer "
                   "'%s' runs %s",
                   c->resolved.trainer.id, hook ? hook : "no communication hook");
        return -1;
    }
    psgd_conf p;
    psgd_conf_of(c->resolved.trainer.conf, &p);
    uint64_t steps = config_batches_per_pass(c);
    if (steps > 0 && p.start_iter >= steps)
        log_warn("--compress powersgd: start_powerSGD_iter %llu >= the run's %llu steps: it never compresses "
                 "(--powersgd-start-iter)",
                 (unsigned long long)p.start_iter, (unsigned long long)steps);
    return 0;
}

/* --compress fp16|bf16 (the trainer configuration's compress):
 * allreduce_hook narrows its buckets, on Gloo (host buckets) and on NCCL
 * (a CUDA trainer's buckets, on its GPU); rpc_hook pushes its dense buckets narrow
 * (docs/protocol.md, "Narrow pushes"), and so does the dense Synthetic
 * model, to servers of kind average or average-batch, on the CPU or a
 * GPU; a HybridModel's dense part is
 * allreduce_hook's (HybridTrainer's compress, powersgd too). Batch-update
 * jobs never get here:
 * their trainer class has no compress key, which the flag's own check
 * refuses. */
static int check_compress(const run_config *c, char *err, size_t errlen)
{
    json_t *v = c->resolved.loaded ? json_object_get(c->resolved.trainer.conf, "compress") : NULL;
    const char *cz = json_is_string(v) ? json_string_value(v) : "none";
    if (strcmp(cz, "none") == 0)
        return 0;
    if (strcmp(cz, "powersgd") == 0)
        return check_powersgd(c, err, errlen);
    const char *hook = c->resolved.hook;
    bool narrow_pushes =
        c->resolved.mc.cls == MODEL_SYNTHETIC || (hook && (strcmp(hook, "rpc_hook") == 0 || strcmp(hook, "rpc") == 0));
    if (c->resolved.mc.cls == MODEL_SYNTHETIC && c->resolved.mc.syn.sparse) {
        errbuf_set(err, errlen,
                   "--compress %s: model '%s' (Synthetic) pushes sparse buckets, which stay fp32 (only dense "
                   "pushes may be narrow); --compress none",
                   cz, c->resolved.model.id);
        return -1;
    }
    if (narrow_pushes)
        return 0;
    if (!hook || strcmp(hook, "allreduce_hook") != 0) {
        errbuf_set(err, errlen,
                   "--compress %s: only allreduce_hook (PyTorch's %s_compress_hook) and rpc_hook (narrow pushes) "
                   "compress so far; trainer '%s' runs %s",
                   cz, cz, c->resolved.trainer.id, hook ? hook : "no communication hook");
        return -1;
    }
    return 0;
}

int config_check_fit(const run_config *c, char *err, size_t errlen)
{
    uint64_t tcount = (uint64_t)c->ntrainer + c->ncudatrainer;
    uint64_t scount = (uint64_t)c->nserver + c->ncudaserver;

    if (config_check_flags(c, err, errlen) < 0)
        return -1;
    bool shard = strcmp(c->placement, "shard") == 0;
    if (c->resolved.loaded && c->resolved.batch_update && check_batch_update(c, err, errlen) < 0)
        return -1;
    bool serverless = c->resolved.loaded && !c->resolved.hook_servers;
    if (c->resolved.loaded && c->resolved.hybrid) {
        if (scount == 0) {
            errbuf_set(err, errlen, "the HybridModel's embedding tables live on parameter servers: --number-ps "
                       "(--nserver) must be at least 1");
            return -1;
        }
        if (hybrid_shape_check(scount, c->resolved.mc.hybrid.embedding_dim, err, errlen) < 0)
            return -1;
    }
    if (scount == 0 && !serverless) {
        if (c->resolved.loaded && c->resolved.hook)
            errbuf_set(err, errlen,
                       "no servers: %s sends buckets to parameter servers, so --nserver + --ncudaserver must be "
                       "at least 1 (PyTorch's benchmark's pure-DDP run, --nserver 0, takes a hook without servers: "
                       "--trainer DdpTrainer for allreduce_hook)", c->resolved.hook);
        else
            errbuf_set(err, errlen, "no servers: --nserver + --ncudaserver must be at least 1");
        return -1;
    }
    /* Batch-update and HybridModel trainers use every server. */
    if (!shard && scount > 0 && !serverless &&
        !(c->resolved.loaded && (c->resolved.batch_update || c->resolved.hybrid))) {
        if (check_seed_placement(c, err, errlen) < 0)
            return -1;
    }
    if (c->resolved.loaded && c->resolved.hook_collective && strcmp(c->backend, "nccl") == 0 &&
        c->ncudatrainer < tcount) {
        errbuf_set(err, errlen,
                   "--backend nccl needs CUDA trainers, and %llu of the trainers are CPUs (--ntrainer %u): CPU "
                   "trainers allreduce with gloo (--backend gloo, or multi: NCCL on GPUs, Gloo on CPUs)",
                   (unsigned long long)(tcount - c->ncudatrainer), c->ntrainer);
        return -1;
    }
    if (check_compress(c, err, errlen) < 0)
        return -1;
    uint64_t samples = c->resolved.loaded ? c->resolved.samples : 0;
    if (samples > 0 && !c->resolved.batch_update && !c->resolved.hybrid && config_batches_per_pass(c) == 0) {
        uint64_t nb = (samples + c->batch_size - 1) / c->batch_size;
        errbuf_set(err, errlen,
                "data '%s' has %llu samples: %llu batch%s of %llu cannot feed %llu trainers "
                "(lower --batch-size or use more samples)",
                c->data, (unsigned long long)samples, (unsigned long long)nb, nb == 1 ? "" : "es",
                (unsigned long long)c->batch_size, (unsigned long long)tcount);
        return -1;
    }
    return 0;
}
