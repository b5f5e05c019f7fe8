/* run.c — the trainer's run driver under psbench-master (see run.h). */
#include "trainer/run.h"
#include "shared/b64.h"
#include "shared/cli.h"
#include "shared/devspec.h"
#include "shared/follow.h"
#include "shared/gpu.h"
#include "shared/hostinfo.h"
#include "shared/jobconf.h"
#include "shared/log.h"
#include "shared/net.h"
#include "shared/paramsfile.h"
#include "trainer/blasinfo.h"
#include "trainer/compute.h"
#include "trainer/hooks.h"
#include "trainer/loss_check.h"
#include "trainer/master_link.h"
#include "trainer/memneed.h"
#include "trainer/ttrace.h"
#include "trainer/workload.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What the assignment says, copied out of its JSON. */
typedef struct run_job {
    uint64_t rank, batches, data_rank, ntrainer;
    double rpc_timeout_s;
    char servers[16384]; /* "HOST:PORT,..." ("" with no servers) */
    char hook[64];
    char backend[16];
    half_type compress;  /* the trainer configuration's compress: HALF_FP32 for none and powersgd */
    bool powersgd;       /* compress powersgd: allreduce_hook as PyTorch's PowerSGD hooks */
    psgd_conf psgd;      /* ... with its state's parameters (the configuration's keys) */
    device_spec device;  /* this trainer's device: --device, placed (compute_place) */
    device_spec compute; /* what its compute layer runs on: device, or PSBENCH_TRAINER_COMPUTE's */
    modelconf model;
    json_t *assign; /* owned: the whole assignment */
} run_job;

/* ---- the assignment -------------------------------------------------------- */

static int run_parse_job(json_t *a, run_job *j, char *err, size_t errlen)
{
    j->assign = a;
    /* The counts every assignment carries: one that is missing is said to
     * be, not read as a default (rank 0 would be another trainer's). */
    static const struct {
        const char *key;
        int64_t min;
    } need[] = {{"rank", 0}, {"batches", 0}, {"data_rank", 0}, {"ntrainer", 1}};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        json_t *v = json_object_get(a, need[i].key);
        if (!json_is_integer(v) || json_integer_value(v) < need[i].min) {
            snprintf(err, errlen, "the master's assignment has %s \"%s\" (a whole number >= %lld)",
                     v ? "a bad" : "no", need[i].key, (long long)need[i].min);
            return -1;
        }
    }
    j->rank = (uint64_t)ctl_int(a, "rank", 0);
    j->batches = (uint64_t)ctl_int(a, "batches", 1);
    j->data_rank = (uint64_t)ctl_int(a, "data_rank", 0);
    j->ntrainer = (uint64_t)ctl_int(a, "ntrainer", 1);
    j->rpc_timeout_s = ctl_num(a, "rpc_timeout", 60);
    if (!(j->rpc_timeout_s > 0) || j->rpc_timeout_s > CLI_MAX_SECONDS)
        j->rpc_timeout_s = j->rpc_timeout_s > 0 ? CLI_MAX_SECONDS : 60; /* the master checks it; stay sane */
    size_t i, used = 0;
    json_t *v;
    json_array_foreach(json_object_get(a, "servers"), i, v) {
        int w = snprintf(j->servers + used, sizeof j->servers - used, "%s%s", used ? "," : "",
                         json_string_value(v) ? json_string_value(v) : "");
        if (w < 0 || (size_t)w >= sizeof j->servers - used) {
            /* a cut list would map buckets to the wrong servers */
            snprintf(err, errlen, "the assignment's server list is longer than %zu bytes", sizeof j->servers - 1);
            return -1;
        }
        used += (size_t)w;
    }
    /* The master checked these entries (and wrote their defaults); checked
     * again here with the same table, a value that reaches the workload is
     * one the master accepted, never a default of this file's own. */
    json_t *tr = json_object_get(a, "trainer");
    if (jobconf_check_entry("trainer", tr, err, errlen) < 0 ||
        jobconf_check_entry("data", json_object_get(a, "data"), err, errlen) < 0)
        return -1;
    json_t *tc = json_object_get(tr, "configurations");
    /* DdpTrainer's is required, HybridTrainer's defaults to allreduce_hook,
     * BatchUpdateTrainer has none. */
    snprintf(j->hook, sizeof j->hook, "%s", json_object_get(tc, "ddp_hook") ? jobconf_str(tc, "ddp_hook") : "");
    snprintf(j->backend, sizeof j->backend, "%s", ctl_str(a, "backend", "gloo"));
    /* DdpTrainer's (jobconf_check_entry wrote its default, none); other
     * classes have none. */
    const char *cz = json_object_get(tc, "compress") ? jobconf_str(tc, "compress") : "none";
    j->powersgd = strcmp(cz, "powersgd") == 0;
    if (j->powersgd)
        psgd_conf_of(tc, &j->psgd);
    int ct = strcmp(cz, "none") == 0 || j->powersgd ? HALF_FP32 : half_type_parse(cz);
    assert(ct == HALF_FP32 || ct == HALF_FP16 || ct == HALF_BF16); /* the schema's choices */
    j->compress = (half_type)ct;
    return modelconf_from_entry(json_object_get(a, "model"), &j->model, err, errlen);
}

/* Real training's job: the model, the data, the trainer configuration. */
static int run_train_job(const run_job *rj, train_job *j, char *err, size_t errlen)
{
    json_t *a = rj->assign;
    json_t *dc = json_object_get(json_object_get(a, "data"), "configurations");
    json_t *tr = json_object_get(a, "trainer"), *tc = json_object_get(tr, "configurations");
    memset(j, 0, sizeof *j);
    j->model.num_embeddings = rj->model.dummy.num_embeddings;
    j->model.embedding_dim = rj->model.dummy.embedding_dim;
    j->model.dense_input_size = rj->model.dummy.dense_input_size;
    j->model.dense_output_size = rj->model.dummy.dense_output_size;
    j->model.dense_layers_count = rj->model.dummy.dense_layers_count;
    j->model.sparse = rj->model.dummy.sparse;
    /* run_parse_job checked both entries: DummyData (the only data class)
     * and, with a DummyModel, a DdpTrainer (the master pairs no other). */
    const char *tcls = json_string_value(json_object_get(tr, "class"));
    if (strcmp(tcls, "DdpTrainer") != 0) {
        snprintf(err, errlen, "the DummyModel trains under a DdpTrainer, not %s", tcls);
        return -1;
    }
    j->data.max_val = jobconf_u64(dc, "max_val");
    j->data.sample_count = jobconf_u64(dc, "sample_count");
    j->data.sample_length = jobconf_u64(dc, "sample_length");
    j->data.sparsity_percentage = (uint32_t)jobconf_u64(dc, "sparsity_percentage");
    j->lr = jobconf_f64(tc, "lr");
    j->momentum = jobconf_f64(tc, "momentum");
    j->bucket_cap_mb = jobconf_f64(tc, "bucket_cap_mb");
    j->compress = rj->compress;
    j->first_bucket_mb = jobconf_f64(tc, "first_bucket_mb");
    j->seed = (uint64_t)ctl_int(a, "seed", 0);
    j->batch_size = (uint64_t)ctl_int(a, "batch_size", 10);
    j->epochs = (uint64_t)ctl_int(a, "epochs", 1);
    j->rank = (uint32_t)rj->rank;
    j->ntrainer = (uint32_t)rj->ntrainer;
    j->allow_divergence = json_is_true(json_object_get(a, "allow_divergence"));
    return 0;
}

/* The address the other trainers reach this one at: the local end of the
 * control connection (the interface that routes to the master). */
static void run_local_address(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    buf[0] = '\0';
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, (socklen_t)len);
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf, (socklen_t)len);
}

/* Communication before compute. DDP on GPUs gives its collectives
 * high-priority streams so that bucket traffic is not queued behind the
 * rest of backward; on a CPU host the scheduler plays that part. The hook's
 * threads exist by now (at the process's nice level); lowering only the
 * calling thread, the one that runs forward, backward and the optimizer,
 * lets them and a server on the same host run first whenever busy threads
 * outnumber cores, and costs nothing when they do not. (On Linux a nice
 * value belongs to a thread: setpriority on a thread id.) */
static void run_lower_compute_priority(int nice_by)
{
    if (nice_by <= 0)
        return;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, (id_t)tid);
    if (cur == -1 && errno != 0) {
        log_warn("compute thread priority left as is: getpriority: %s", strerror(errno));
        return;
    }
    int want = cur + nice_by > 19 ? 19 : cur + nice_by;
    if (setpriority(PRIO_PROCESS, (id_t)tid, want) < 0) {
        log_warn("compute thread priority left as is: setpriority(%d): %s", want, strerror(errno));
        return;
    }
    log_info("compute thread at nice %d, communication at %d (--compute-nice)", want, cur);
}

static void run_bytes(void *ctx, uint64_t *in, uint64_t *out) { workload_bytes(ctx, in, out); }

/* ---- setting up the workload ----------------------------------------------- */

/* The hook `name` for this job (its groups formed through the master). */
static hook *run_hook(mlink *l, const trainer_run_opts *o, const run_job *j, const char *name, bool sparse,
                      const char *servers, const gpushare *gpu, char *err, size_t errlen)
{
    char here[64];
    run_local_address(l->c.fd, here, sizeof here);
    coll_store store = mlink_store(l);
    hook_setup hs = {
        .hook = name,
        .backend = j->backend,
        /* NCCL's device: the GPU this trainer computes on (a CPU one has
         * none: Gloo, or the refusal hooks.c gives for nccl; the fake GPU
         * of tests has NCCL's stand-in). */
        .device = j->device,
        .sparse_model = sparse,
        .rank = (uint32_t)j->rank,
        .ntrainer = (uint32_t)j->ntrainer,
        .servers = servers,
        .token = o->token,
        .connect_timeout_s = o->connect_timeout_s,
        .rpc_timeout_s = j->rpc_timeout_s,
        .transport = o->transport,
        .gpu = gpu,
        .store = &store,
        .store_prefix = "psbench",
        .coll_host = o->coll_host ? o->coll_host : here[0] ? here : NULL,
        .compress = j->compress,
        .powersgd = j->powersgd ? &j->psgd : NULL,
        .m = l->m,
        .trace = l->trace,
    };
    l->store_timeout_s = j->rpc_timeout_s;
    /* Metrics go to the master twice a second: if its host or our link
     * goes down they stay unacknowledged, and past --rpc-timeout the
     * connection fails, so a cut-off trainer ends even between passes. */
    net_set_user_timeout(l->c.fd, j->rpc_timeout_s);
    /* And a report that finds no room to be written (this host's link
     * down: nothing leaves, nothing is acknowledged or timed out) fails
     * after --rpc-timeout too, rather than block the trainer for good. */
    l->c.send_timeout_s = j->rpc_timeout_s;
    return hooks_new(&hs, err, errlen);
}

/* Each model's setup from the assignment: its workload in *w (NULL with
 * err on failure; whatever it made is freed). */

/* DummyModel: buckets through the job's hook. */
static int run_setup_dummy(mlink *l, const trainer_run_opts *o, const run_job *j, workload **w, char *err,
                           size_t errlen)
{
    train_job tj;
    train *tr;
    if (run_train_job(j, &tj, err, errlen) < 0)
        return -1;
    tj.device = j->compute;
    /* Where the gradients live decides the order. On a GPU, with rpc_hook
     * to servers that may be on it: in device memory a CUDA server can
     * fold them from (CUDA IPC), exported by the hook's client — the
     * training first, then the hook. On the CPU: the hook first, the
     * gradients maybe in memory it lends (train_new). Either way the
     * workload frees the hook, then the training (workload_free): the
     * hook's GPU links go through the training's compute context, and lent
     * memory outlives the model's handle on it. With --compress the shared
     * gradients carry a narrow shadow (model.h), where rpc_hook narrows
     * each bucket on the GPU for the server to fold from. */
    bool on_gpu = devspec_on_gpu(tj.device);
    bool ipc = on_gpu && strcmp(j->hook, "rpc_hook") == 0 && j->servers[0] && o->transport != PSB_TRANSPORT_TCP;
    tj.model.grads_shared = ipc;
    tj.model.grads_narrow = ipc && j->compress != HALF_FP32; /* narrow pushes by CUDA IPC: their shadow */
    hook *h = NULL;
    if (!on_gpu && !(h = run_hook(l, o, j, j->hook, tj.model.sparse, j->servers, NULL, err, errlen)))
        return -1;
    if (!(tr = train_new(&tj, h, l->m, err, errlen))) {
        hook_free(h);
        return -1;
    }
    train_set_trace(tr, l->trace);
    /* A pass's batches come with each start. With --epochs they are whole
     * epochs of this trainer's data, and the master's count of them must be
     * this trainer's, or the epochs would not be the ones it planned; with
     * --steps (the assignment's "steps") any count, the data cycled. */
    if (!json_is_integer(json_object_get(j->assign, "steps")) &&
        tj.epochs * train_batches_per_epoch(tr) != j->batches) {
        snprintf(err, errlen, "the master expects %" PRIu64 " batches per pass, the data gives %" PRIu64, j->batches,
                 tj.epochs * train_batches_per_epoch(tr));
        hook_free(h);
        train_free(tr);
        return -1;
    }
    if (on_gpu) {
        char why[256] = "";
        const gpushare *gpu = ipc ? train_gpushare(tr, why, sizeof why) : NULL;
        if (ipc && !gpu)
            log_info("trainer %" PRIu64 ": no CUDA IPC with the servers: %s", j->rank, why);
        if (!(h = run_hook(l, o, j, j->hook, tj.model.sparse, j->servers, gpu, err, errlen))) {
            train_free(tr);
            return -1;
        }
    }
    if (!(*w = workload_dummy_new(tr, h, err, errlen)))
        return -1;
    log_info("trainer %" PRIu64 ": DummyModel through %s%s%s, %" PRIu64 " batches per pass", j->rank, j->hook,
             j->servers[0] ? ", servers " : "", j->servers, j->batches);
    run_lower_compute_priority(o->compute_nice);
    return 0;
}

/* The HybridModel: the servers' tables through the client, the dense part
 * through allreduce_hook. */
static int run_setup_hybrid(mlink *l, const trainer_run_opts *o, const run_job *j, workload **w, char *err,
                            size_t errlen)
{
    json_t *tc = json_object_get(json_object_get(j->assign, "trainer"), "configurations");
    hybrid_config hc = {0};
    hc.number_ps = 1;
    for (const char *p = j->servers; *p; p++)
        hc.number_ps += *p == ',';
    hc.num_embeddings = j->model.hybrid.num_embeddings;
    hc.embedding_dim = j->model.hybrid.embedding_dim;
    const char *tcls = json_string_value(json_object_get(json_object_get(j->assign, "trainer"), "class"));
    if (strcmp(tcls, "HybridTrainer") != 0) {
        snprintf(err, errlen, "the HybridModel trains under a HybridTrainer, not %s", tcls);
        return -1;
    }
    hc.batches = jobconf_u64(tc, "batches"); /* checked by run_parse_job */
    hc.lr = jobconf_f64(tc, "lr");
    hc.seed = (uint64_t)ctl_int(j->assign, "seed", 0);
    hc.rank = j->rank;
    hc.rpc_timeout_s = j->rpc_timeout_s;
    hc.allow_divergence = json_is_true(json_object_get(j->assign, "allow_divergence"));
    hc.device = j->compute;
    const char *pattern = jobconf_str(tc, "rpc_pattern"); /* checked (and defaulted) by run_parse_job */
    if (hybrid_pattern_parse(pattern, &hc.pattern) < 0) {
        snprintf(err, errlen, "HybridTrainer: rpc_pattern '%s' is not seed or psbench", pattern ? pattern : "");
        return -1;
    }
    hybrid *hy = hybrid_new(&hc, l->m, err, errlen);
    if (!hy)
        return -1;
    /* Only the dense part travels through the hook: no servers for it. */
    hook *h = run_hook(l, o, j, "allreduce_hook", false, "", NULL, err, errlen);
    if (!h) {
        hybrid_free(hy);
        return -1;
    }
    if (!(*w = workload_hybrid_new(hy, h, err, errlen)))
        return -1;
    client_sink sink = hybrid_sink(hy);
    if (workload_open_client(*w, &(client_cfg){.servers = j->servers, .rank = j->rank, .token = o->token, .timeout_s = o->connect_timeout_s, .transport = o->transport}, &sink, err, errlen) < 0)
        return -1;
    hybrid_set_trace(hy, l->trace, &(*w)->cl);
    log_info("trainer %" PRIu64 ": HybridModel, %u embedding server(s) of %" PRIu64 " x %" PRIu64 ", dense part "
             "through allreduce_hook, %" PRIu64 " batches per epoch, rpc_pattern %s (%s)", j->rank, hc.number_ps,
             hc.num_embeddings, hc.embedding_dim, hc.batches, hybrid_pattern_name(hc.pattern),
             hc.pattern == HYBRID_SEED ? "PyTorch's benchmark's: lookups one server at a time, updates awaited, "
                                         "dense table gradients"
                                       : "psbench's: lookups to every server at once, updates unanswered, sparse row "
                                         "steps");
    run_lower_compute_priority(o->compute_nice);
    return 0;
}

/* Synthetic: pushes through its client. */
static int run_setup_synthetic(mlink *l, const trainer_run_opts *o, const run_job *j, workload **w, char *err,
                               size_t errlen)
{
    synthetic_config sc = {0};
    sc.rank = j->data_rank;
    sc.batches = j->batches;
    sc.rpc_timeout_s = j->rpc_timeout_s;
    sc.buckets = j->model.syn.buckets;
    sc.bucket_floats = j->model.syn.bucket_floats;
    sc.sizes = j->model.syn.sizes;
    sc.sparse = j->model.syn.sparse;
    sc.sparse_cols = j->model.syn.sparse_cols;
    sc.dtype = sc.sparse ? HALF_FP32 : j->compress; /* --compress: narrow dense pushes (the master refuses sparse) */
    synthetic *syn = synthetic_new(&sc, l->m);
    if (!syn) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    synthetic_set_tick(syn, mlink_tick, l);
    client_sink sink = synthetic_sink(syn);
    /* On a GPU, dense, to servers that may be on it: the pushes in
     * shareable GPU memory (CUDA IPC), which the synthetic owns; the
     * workload closes the client before it frees the synthetic. */
    const gpushare *gpu = NULL;
    if (devspec_on_gpu(j->compute) && !sc.sparse && o->transport != PSB_TRANSPORT_TCP) {
        char why[300] = "";
        if (!(gpu = synthetic_gpu(syn, j->compute, why, sizeof why)))
            log_info("trainer %" PRIu64 ": no CUDA IPC with the servers: %s", j->rank, why);
    }
    if (!(*w = workload_synthetic_new(syn, err, errlen)))
        return -1;
    log_info("trainer %" PRIu64 ": model Synthetic, servers %s, %" PRIu64 " batches per pass", j->rank, j->servers,
             j->batches);
    if (workload_open_client(*w, &(client_cfg){.servers = j->servers, .rank = j->rank, .token = o->token, .timeout_s = o->connect_timeout_s, .transport = o->transport, .gpu = gpu, .dtype = sc.dtype}, &sink, err, errlen) < 0)
        return -1;
    synthetic_set_trace(syn, l->trace, &(*w)->cl);
    return 0;
}

/* Linear (batch-update): fetch and push through its client. */
static int run_setup_linear(mlink *l, const trainer_run_opts *o, const run_job *j, workload **w, char *err,
                            size_t errlen)
{
    json_int_t bs = ctl_int(j->assign, "batch_size", 0);
    if (bs < 1) {
        snprintf(err, errlen, "the assignment's batch size is invalid");
        return -1;
    }
    batch_update_config bc = {0};
    bc.in_features = j->model.linear.in_features;
    bc.out_features = j->model.linear.out_features;
    bc.batch_size = (uint64_t)bs;
    bc.seed = (uint64_t)ctl_int(j->assign, "seed", 0);
    bc.rank = j->rank;
    bc.rpc_timeout_s = j->rpc_timeout_s;
    bc.epochs = (uint64_t)ctl_int(j->assign, "epochs", 1);
    bc.allow_divergence = json_is_true(json_object_get(j->assign, "allow_divergence"));
    bc.device = j->compute;
    batch_update *bu = batch_update_new(&bc, l->m, err, errlen);
    if (!bu)
        return -1;
    batch_update_set_tick(bu, mlink_tick, l);
    client_sink sink = batch_update_sink(bu);
    if (!(*w = workload_linear_new(bu, j->batches, err, errlen)))
        return -1;
    log_info("trainer %" PRIu64 ": model Linear, servers %s, %" PRIu64 " batches per pass", j->rank, j->servers,
             j->batches);
    if (workload_open_client(*w, &(client_cfg){.servers = j->servers, .rank = j->rank, .token = o->token, .timeout_s = o->connect_timeout_s, .transport = o->transport}, &sink, err, errlen) < 0)
        return -1;
    batch_update_set_trace(bu, l->trace, &(*w)->cl);
    return 0;
}

/* ---- memory ------------------------------------------------------------------ */

/* The job's memory against this process's limits and its host's memory,
 * then OpenBLAS's buffer mapped while that can be checked (memneed.h):
 * "out of memory" with the figures now, not a failure part way or a
 * trainer spinning inside OpenBLAS. */
static int run_check_memory(const run_job *j, char *err, size_t errlen)
{
    bool host = devspec_host_memory(j->compute);
    memneed need = {0};
    switch (j->model.cls) {
    case MODEL_DUMMY: {
        train_job tj;
        if (run_train_job(j, &tj, err, errlen) < 0)
            return -1;
        memneed_dummy(&tj, host, &need);
        if (j->powersgd)
            memneed_add_powersgd(&tj, &j->psgd, &need);
        memneed_add_threads(&need, 1); /* the hook's */
        break;
    }
    case MODEL_LINEAR:
        memneed_linear(j->model.linear.in_features, j->model.linear.out_features,
                       (uint64_t)ctl_int(j->assign, "batch_size", 1), host, &need);
        break;
    case MODEL_HYBRID:
        memneed_hybrid(host, &need);
        memneed_add_threads(&need, 1); /* allreduce_hook's */
        break;
    case MODEL_SYNTHETIC: {
        const modelconf *mc = &j->model;
        uint64_t floats = 0;
        for (uint32_t b = 0; b < mc->syn.buckets; b++)
            floats += mc->syn.sizes ? mc->syn.sizes[b] : mc->syn.bucket_floats;
        memneed_synthetic(floats, &need);
        break;
    }
    }
    memroom room;
    memneed_room(&room);
    log_debug("trainer %" PRIu64 ": memory needed: model %" PRIu64 " B, data %" PRIu64 " B, OpenBLAS %" PRIu64
              " B, stacks %" PRIu64 " B; address space %" PRIu64 " of %" PRIu64 " B, data %" PRIu64 " of %" PRIu64
              " B, host %" PRIu64 " B available", j->rank, need.model, need.data, need.blas, need.stacks,
              room.as_used, room.as_limit, room.data_used, room.data_limit, room.available);
    if (memneed_check(&need, &room, err, errlen) < 0)
        return -1;
    return memneed_reserve_blas(&need, err, errlen);
}

static int run_setup(mlink *l, const trainer_run_opts *o, const run_job *j, workload **w, char *err, size_t errlen)
{
    *w = NULL;
    if (j->model.cls == MODEL_DUMMY)
        return run_setup_dummy(l, o, j, w, err, errlen);
    if (!j->servers[0]) {
        snprintf(err, errlen, "the assignment names no server (the %s model talks to servers only)",
                 j->model.cls == MODEL_SYNTHETIC ? "Synthetic" : j->model.cls == MODEL_HYBRID ? "HybridModel" : "Linear");
        return -1;
    }
    if (j->model.cls == MODEL_HYBRID)
        return run_setup_hybrid(l, o, j, w, err, errlen);
    if (j->model.cls == MODEL_SYNTHETIC)
        return run_setup_synthetic(l, o, j, w, err, errlen);
    return run_setup_linear(l, o, j, w, err, errlen);
}

/* ---- passes ----------------------------------------------------------------- */

/* A pass that failed. When its loss diverged (and the job does not allow
 * that), the reason says where and what to do, and the `failed` report
 * carries where (results.json). -1. */
static int run_pass_failed(mlink *l, const workload *w, const char *pass, char *err, size_t errlen)
{
    const loss_check *lc = w->ops->divergence ? w->ops->divergence(w) : NULL;
    if (lc && lc->diverged && !lc->allow) {
        loss_check_reason(lc, pass, err, errlen);
        json_t *d = loss_check_json(lc, pass);
        mlink_set_fail_detail(l, d ? json_pack("{s:o}", "diverged", d) : NULL);
    }
    return -1;
}

/* One pass of the workload; `pass` names it ("warm-up", "timed"). Every
 * trainer reports its losses per epoch and the digest of its parameters
 * with pass_done: synchronous training must leave them identical. */
static int run_pass(mlink *l, workload *w, uint64_t batches, const char *pass, char *err, size_t errlen)
{
    uint64_t done = 0;
    json_t *extra = NULL;
    if (w->ops->pass(w, batches, mlink_tick, l, &done, &extra, err, errlen) < 0)
        return run_pass_failed(l, w, pass, err, errlen);
    if (done)
        l->batches_done = done;
    /* Whether pushes over shared memory copied their payloads (staged)
     * or were named where they lay (the gradients in the segment). */
    uint64_t at = 0, staged = 0;
    workload_shm_pushes(w, &at, &staged);
    if (at)
        log_info("%s pass done: %" PRIu64 " pushes so far by offset in the shared segment, %" PRIu64
                 " of them staged (copied into it first)", pass, at, staged);
    return mlink_report(l, "pass_done", workload_pass_report(w, pass, extra), err, errlen);
}

/* The start line's second half: how each link to a server travels. */
static void run_log_links(uint64_t rank, const json_t *links)
{
    char line[1024] = "";
    size_t used = 0, i;
    json_t *l;
    json_array_foreach((json_t *)links, i, l) {
        const char *note = json_string_value(json_object_get(l, "note"));
        const char *gnote = json_string_value(json_object_get(l, "cuda_ipc_note"));
        bool gpu = json_is_true(json_object_get(l, "cuda_ipc"));
        int w = snprintf(line + used, sizeof line - used, "%sserver %" JSON_INTEGER_FORMAT " %s%s%s%s%s%s%s%s",
                         i ? ", " : "", json_integer_value(json_object_get(l, "server")),
                         strcmp(json_string_value(json_object_get(l, "transport")), "shm") == 0 ? "shared memory"
                                                                                                : "TCP",
                         gpu ? " + CUDA IPC" : "", note ? " (" : "", note ? note : "", note ? ")" : "",
                         gnote ? " (no CUDA IPC: " : "", gnote ? gnote : "", gnote ? ")" : "");
        if (w < 0 || (size_t)w >= sizeof line - used)
            break;
        used += (size_t)w;
    }
    if (used)
        log_info("trainer %" PRIu64 ": transport: %s", rank, line);
}

/* The floats of one `params` part (docs/protocol.md): 4 MiB of them, about
 * 5.6 MiB of base64, well under the control plane's CTL_MAX_BODY. */
#define RUN_PARAMS_PART ((uint64_t)1 << 20)

/* The master's `final_params` (extension, issue 43: with --out it asks
 * trainer 0): on stop, this trainer's final parameters in `params` parts,
 * in order, the last one final; where they are more than the master's
 * max_count, one part without data (their count, digest and norm). A
 * model without parameters (Synthetic) sends one part of count 0 and no
 * data. 0, or -1 with err (the connection failed). */
static int run_send_params(mlink *l, const workload *w, json_t *ask, char *err, size_t errlen)
{
    uint64_t max = (uint64_t)ctl_int(ask, "max_count", 0), n = 0;
    const float *v = w->ops->params ? w->ops->params(w, &n) : NULL;
    char hex[65] = "";
    if (w->ops->params && !v) {
        snprintf(err, errlen, "the parameters could not be read back (out of memory)");
        return -1;
    }
    if (v && paramsfile_sha256(v, n, hex) < 0) {
        snprintf(err, errlen, "the parameters' digest could not be computed");
        return -1;
    }
    double norm = v ? paramsfile_l2_norm(v, n) : 0;
    bool data = v && n > 0 && n <= max;
    char *text = data ? malloc(b64_encoded_len((size_t)(n < RUN_PARAMS_PART ? n : RUN_PARAMS_PART) * 4) + 1) : NULL;
    if (data && !text) {
        snprintf(err, errlen, "out of memory sending the parameters");
        return -1;
    }
    /* Test-only: a pause before each part, as a big model's parts take on
     * a loaded host (tests/integration/test_compress_cost.py). */
    const char *pause_env = getenv("PSBENCH_TEST_PARAMS_PAUSE_MS");
    long pause_ms = pause_env ? strtol(pause_env, NULL, 10) : 0;
    uint64_t at = 0;
    do {
        if (pause_ms > 0 && pause_ms <= 60000) {
            struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        uint64_t k = data ? (n - at < RUN_PARAMS_PART ? n - at : RUN_PARAMS_PART) : 0;
        json_t *body = json_pack("{s:I, s:I, s:s?, s:f, s:b}", "count", (json_int_t)n, "offset", (json_int_t)at,
                                 "sha256", v ? hex : NULL, "l2_norm", norm, "final", !data || at + k == n);
        if (data) {
            b64_encode((const uint8_t *)(v + at), (size_t)k * 4, text);
            json_object_set_new(body, "data", json_string(text));
        }
        int rc = ctl_send(&l->c, "params", NULL, body, err, errlen);
        json_decref(body);
        if (rc < 0) {
            free(text);
            return -1;
        }
        at += k;
    } while (data && at < n);
    free(text);
    return 0;
}

/* After setup: ready, then the master's passes until stop. Returns the
 * exit code. */
static int run_loop(mlink *l, const trainer_run_opts *o, workload *w, const run_job *j, char *err, size_t errlen)
{
    /* With where its links go: shown by the master (/api/v1/nodes,
     * results.json). */
    json_t *links = workload_links(w);
    run_log_links(j->rank, links);
    json_t *body = links ? json_pack("{s:o}", "links", links) : NULL;
    int sent = ctl_send(&l->c, "ready", NULL, body, err, errlen);
    json_decref(body);
    if (sent < 0)
        return 1;
    for (;;) {
        ctl_msg msg;
        if (mlink_wait(l, &msg, err, errlen) < 0)
            return 1;
        if (strcmp(msg.type, "start") == 0) {
            uint64_t batches = (uint64_t)ctl_int(msg.body, "batches", (int64_t)j->batches);
            const char *pass = strcmp(ctl_str(msg.body, "phase", ""), "warmup") == 0 ? "warm-up" : "timed";
            ctl_msg_clear(&msg);
            l->batches_done = 0;
            ttrace_pass(l->trace, strcmp(pass, "timed") == 0); /* the warm-up is never traced */
            if (run_pass(l, w, batches, pass, err, errlen) < 0)
                return 1;
        } else if (strcmp(msg.type, "reset") == 0) {
            ctl_msg_clear(&msg);
            metrics_reset(l->m);
            workload_reset(w);
            l->batches_done = 0;
            if (ctl_send(&l->c, "reset_done", NULL, NULL, err, errlen) < 0)
                return 1;
        } else if (strcmp(msg.type, "stop") == 0) {
            ctl_msg_clear(&msg);
            if (l->stop_code) {
                snprintf(err, errlen, "the master stopped the run: %s", l->stop_reason);
                return l->stop_code;
            }
            if (o->params_out && workload_write_params(w, o->params_out, err, errlen) < 0)
                return 1;
            /* The run is done: parameters the master did not take (it
             * left, its link broke) cost its params.bin, not the run. */
            json_t *ask = json_object_get(j->assign, "final_params");
            if (json_is_object(ask) && run_send_params(l, w, ask, err, errlen) < 0)
                log_warn("the final parameters did not reach the master: %s (its results.json says why there is "
                         "no params.bin)",
                         err);
            return 0;
        } else {
            ctl_msg_clear(&msg);
        }
    }
}

/* What this trainer computes with, for its register: the host
 * (shared/hostinfo.h) and the BLAS (blasinfo.h). */
/* The GPUs a trainer on `device` may compute on, for the master (which
 * refuses two NCCL ranks on one GPU) and for results.json: every GPU this
 * host shows (index order: plain "cuda" picks one by rank), the one asked
 * for (cuda_index; -1: by rank), and the NCCL version where it loads. */
static void run_environment_gpu(json_t *env, device_spec device)
{
    char why[256], host[256] = "";
    if (device.kind == DEVICE_FAKE_CUDA) {
        /* Each process's fake GPU is its own memory: a UUID of its own, so
         * that the master lets fake-cuda trainers of one host form an NCCL
         * group (of the stand-in, coll_nccl_fake_new). */
        char uuid[64];
        snprintf(uuid, sizeof uuid, "fake-GPU-%ld", (long)getpid());
        gethostname(host, sizeof host - 1);
        json_object_set_new(env, "gpus", json_pack("[{s:s, s:s}]", "name", "fake GPU (host memory; tests only)",
                                                   "uuid", uuid));
        json_object_set_new(env, "cuda_index", json_integer(0));
        return;
    }
    if (device.kind != DEVICE_CUDA)
        return;
    json_t *gpus = json_array();
    int n = gpu_count(why, sizeof why);
    for (int i = 0; i < n; i++) {
        char line[256];
        json_t *g = NULL;
        if (gpu_describe(i, line, sizeof line, &g, why, sizeof why) == 0 && g)
            json_array_append_new(gpus, g);
    }
    json_object_set_new(env, "gpus", gpus);
    json_object_set_new(env, "cuda_index", json_integer(devspec_cuda_index(device)));
    char nccl[32];
    if (gpu_nccl_version(nccl, sizeof nccl, why, sizeof why) == 0)
        json_object_set_new(env, "nccl", json_string(nccl));
}

static json_t *run_environment(device_spec device)
{
    json_t *env = hostinfo_json();
    json_t *blas = blasinfo_json();
    char warn[512];
    /* The master repeats it in its output and results.json: a warning on
     * a far host's stderr is easily missed. */
    if (blas && blasinfo_warning(warn, sizeof warn))
        json_object_set_new(blas, "warning", json_string(warn));
    if (env)
        json_object_set_new(env, "blas", blas);
    else
        json_decref(blas);
    if (!env)
        env = json_object();
    run_environment_gpu(env, device);
    return env;
}

/* The start line: this trainer's rank and what it computes with. */
static int run_log_start(const run_job *j)
{
    char blas[256], cpu[256];
    blasinfo_describe(blas, sizeof blas);
    hostinfo_cpu_model(cpu, sizeof cpu);
    log_info("trainer %" PRIu64 ": psbench %s; BLAS %s; CPU %s, %ld cores; built by %s", j->rank, PSBENCH_VERSION,
             blas, cpu, sysconf(_SC_NPROCESSORS_ONLN), hostinfo_compiler());
    char name[DEVSPEC_NAME_MAX];
    devspec_name(j->device, name);
    if (j->device.kind == DEVICE_CUDA) {
        char gpu[256], nccl[32], why[256];
        if (gpu_describe(devspec_cuda_index(j->device), gpu, sizeof gpu, NULL, why, sizeof why) < 0)
            snprintf(gpu, sizeof gpu, "%s", why);
        if (gpu_nccl_version(nccl, sizeof nccl, why, sizeof why) < 0)
            snprintf(nccl, sizeof nccl, "none");
        log_info("trainer %" PRIu64 ": device %s (%s); NCCL %s", j->rank, name, gpu, nccl);
    } else if (j->device.kind != DEVICE_CPU) {
        log_info("trainer %" PRIu64 ": device %s", j->rank, name);
    }
    return 0;
}

/* --device as given, placed now that the rank is known; and the compute
 * layer's device: the same, or (tests only) the environment's
 * PSBENCH_TRAINER_COMPUTE — "staged" runs the GPU's host-access paths on
 * the cpu's arithmetic (compute_staged.c), so that a --local job on any
 * machine checks them against the cpu's bits. What the trainer reports as
 * its device stays --device's. */
static int run_place_device(const trainer_run_opts *o, run_job *j, char *err, size_t errlen)
{
    if (compute_place(o->device, j->rank, &j->device, err, errlen) < 0)
        return -1;
    j->compute = j->device;
    const char *e = getenv("PSBENCH_TRAINER_COMPUTE");
    if (!e || !*e)
        return 0;
    if (devspec_parse("PSBENCH_TRAINER_COMPUTE", e, DEVSPEC_COMPUTE, &j->compute, err, errlen) < 0)
        return -1;
    char name[DEVSPEC_NAME_MAX];
    log_warn("computing on '%s' (PSBENCH_TRAINER_COMPUTE: for tests only), not --device %s", e,
             devspec_name(j->device, name));
    return 0;
}

/* The trainer's trace from its assignment and its own flags (ttrace.h),
 * the link's from now on where it traces. NVTX ranges too where it
 * computes on a CUDA GPU (not the fake one). */
static int run_trace_init(mlink *l, ttrace *tt, const trainer_run_opts *o, const run_job *j, char *err,
                          size_t errlen)
{
    if (ttrace_init(tt, j->assign, &o->trace, (uint32_t)j->rank, j->compute.kind == DEVICE_CUDA, err, errlen) < 0)
        return -1;
    l->trace = ttrace_on(tt) ? tt : NULL;
    return 0;
}

int trainer_run_with_master(const trainer_run_opts *o, metrics *m, char *err, size_t errlen)
{
    mlink l;
    metrics_enable_reporting(m);
    if (mlink_open(&l, o->master, o->reach_s, o->follow, o->connect_timeout_s, m, err, errlen) < 0) {
        if (o->follow)
            return PSB_EXIT_RETRY; /* err says why: no master there now */
        if (o->setup_err) { /* the cause first, then that no master heard it */
            char reach[512];
            snprintf(reach, sizeof reach, "%s", err);
            snprintf(err, errlen, "%s (not told to the master: %s)", o->setup_err, reach);
        }
        return 1;
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char device[DEVSPEC_NAME_MAX];
    json_t *body = json_pack("{s:s, s:s, s:s, s:I, s:o}", "role", "trainer", "host", host, "device",
                             devspec_name(o->device, device), "pid", (json_int_t)getpid(), "environment",
                             run_environment(o->device));
    if (o->want_rank >= 0)
        json_object_set_new(body, "want_rank", json_integer(o->want_rank));
    if (o->setup_err) {
        /* The master's verdict then names this trainer and the reason,
         * instead of "trainer 0 (pid N) exited with status 2". */
        int joined = mlink_register(&l, o->token, body, NULL, err, errlen);
        if (joined < 0 && o->follow && l.retry) { /* this job has no place for it: nothing to report */
            mlink_close(&l, false, err, errlen);
            return PSB_EXIT_RETRY;
        }
        snprintf(err, errlen, "%s", o->setup_err); /* refused or not: the cause is this trainer's */
        mlink_close(&l, true, err, errlen);
        return 1;
    }
    run_job j;
    memset(&j, 0, sizeof j);
    workload *w = NULL;
    int code = 1;
    json_t *assign = NULL;
    ttrace tt;
    memset(&tt, 0, sizeof tt);
    if (mlink_register(&l, o->token, body, &assign, err, errlen) == 0 && run_parse_job(assign, &j, err, errlen) == 0 &&
        run_place_device(o, &j, err, errlen) == 0 && run_log_start(&j) == 0 &&
        run_trace_init(&l, &tt, o, &j, err, errlen) == 0 && run_check_memory(&j, err, errlen) == 0 &&
        run_setup(&l, o, &j, &w, err, errlen) == 0) {
        l.bytes = run_bytes;
        l.bytes_ctx = w;
        code = run_loop(&l, o, w, &j, err, errlen);
    } else if (o->follow && (l.retry || l.refused)) {
        code = l.retry ? PSB_EXIT_RETRY : 2; /* no job this time; or never: the supervisor stops */
    }
    l.bytes = NULL;
    /* The master hears why before the servers and peers see this trainer
     * leave: its failure (held for a cause) is then the first it has, not a
     * peer's `peer_lost` that this trainer's departure would cause. */
    mlink_close(&l, code != 0, err, errlen);
    workload_free(w); /* its threads first: they record into the trace */
    l.trace = NULL;
    ttrace_free(&tt);
    modelconf_free(&j.model);
    json_decref(assign);
    return code;
}
