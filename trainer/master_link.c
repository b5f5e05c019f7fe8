/* master_link.c — a trainer run driven by psbench-master (see master_link.h). */
#include "trainer/master_link.h"
#include "shared/clock.h"
#include "shared/cli.h"
#include "shared/control.h"
#include "shared/log.h"
#include "trainer/batch_update.h"
#include "trainer/client.h"
#include "trainer/synthetic.h"
#include "trainer/train.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct tlink {
    ctl_conn c;
    metrics *m;
    client *cl;
    uint64_t batches_done;
    double last_report, last_check;
    bool stopped;     /* the master said stop */
    int stop_code;
    char stop_reason[256];
} tlink;

/* A metrics report (also the heartbeat); `extra` fields (may be NULL,
 * stolen) are merged in. */
static int tl_report_extra(tlink *t, const char *type, json_t *extra, char *err, size_t errlen)
{
    json_t *body = json_pack("{s:o, s:I, s:I, s:I}", "samples", ctl_take_samples(t->m), "batches_done",
                             (json_int_t)t->batches_done, "bytes_in",
                             (json_int_t)(t->cl ? t->cl->bytes_in : 0), "bytes_out",
                             (json_int_t)(t->cl ? t->cl->bytes_out : 0));
    if (extra) {
        json_object_update(body, extra);
        json_decref(extra);
    }
    int rc = ctl_send(&t->c, type, NULL, body, err, errlen);
    json_decref(body);
    t->last_report = clock_now_s();
    return rc;
}

static int tl_report(tlink *t, const char *type, char *err, size_t errlen)
{
    return tl_report_extra(t, type, NULL, err, errlen);
}

static void tl_on_stop(tlink *t, ctl_msg *msg)
{
    t->stopped = true;
    const char *st = ctl_str(msg->body, "status", "failed");
    t->stop_code = strcmp(st, "done") == 0 ? 0 : 1;
    snprintf(t->stop_reason, sizeof t->stop_reason, "%s",
             ctl_str(msg->body, "reason", t->stop_code ? "the run failed" : ""));
}

/* During a pass: report every 0.5 s, and see whether the master stopped us. */
static int tl_tick(void *ctx, uint64_t batches_done, char *err, size_t errlen)
{
    tlink *t = ctx;
    t->batches_done = batches_done;
    double now = clock_now_s();
    if (now - t->last_report >= 0.5 && tl_report(t, "metrics", err, errlen) < 0)
        return -1;
    if (now - t->last_check < 0.1)
        return 0;
    t->last_check = now;
    ctl_msg msg;
    int got = ctl_recv(&t->c, 0, &msg, err, errlen);
    if (got < 0)
        return -1;
    if (got == 1) {
        if (strcmp(msg.type, "stop") == 0) {
            tl_on_stop(t, &msg);
            snprintf(err, errlen, "stopped by the master: %s", t->stop_reason);
            ctl_msg_clear(&msg);
            return -1;
        }
        ctl_msg_clear(&msg);
    }
    return 0;
}

/* Read the synthetic model's settings from the assignment. With
 * "bucket_sizes", *sizes gets an array the caller frees (synthetic_new
 * copies it). */
static int tl_model(json_t *assign, synthetic_config *sc, uint64_t **sizes, char *err, size_t errlen)
{
    json_t *model = json_object_get(assign, "model");
    json_t *conf = json_object_get(model, "configurations");
    json_t *list = json_object_get(conf, "bucket_sizes");
    *sizes = NULL;
    sc->buckets = (uint32_t)ctl_int(conf, "buckets", 4);
    sc->bucket_floats = (uint64_t)ctl_int(conf, "bucket_floats", 262144);
    sc->sparse = json_is_true(json_object_get(conf, "sparse"));
    sc->sparse_cols = (uint32_t)ctl_int(conf, "sparse_cols", 16);
    if (json_is_array(list) && json_array_size(list) > 0 && !sc->sparse) {
        /* The master validated the list; still, nothing here trusts it. */
        size_t n = json_array_size(list);
        if (n > 65536 || !(*sizes = malloc(n * sizeof **sizes))) {
            snprintf(err, errlen, "the Synthetic model's bucket_sizes cannot be used");
            return -1;
        }
        sc->buckets = (uint32_t)n;
        sc->bucket_floats = 0;
        for (size_t k = 0; k < n; k++) {
            json_int_t v = json_integer_value(json_array_get(list, k));
            if (v < 1 || v > ((json_int_t)1 << 32)) {
                snprintf(err, errlen, "the Synthetic model's bucket_sizes[%zu] is invalid", k);
                return -1;
            }
            (*sizes)[k] = (uint64_t)v;
            if ((uint64_t)v > sc->bucket_floats)
                sc->bucket_floats = (uint64_t)v;
        }
        sc->sizes = *sizes;
    }
    if (sc->buckets < 1 || sc->bucket_floats < 1 || sc->sparse_cols < 1) {
        snprintf(err, errlen, "the Synthetic model configuration is invalid");
        return -1;
    }
    return 0;
}

/* Wait for one control message, reporting (heartbeat) while waiting. */
static int tl_wait(tlink *t, ctl_msg *msg, char *err, size_t errlen)
{
    for (;;) {
        int got = ctl_recv(&t->c, 250, msg, err, errlen);
        if (got != 0)
            return got < 0 ? -1 : 0;
        if (clock_now_s() - t->last_report >= 0.5 && tl_report(t, "metrics", err, errlen) < 0)
            return -1;
    }
}

/* What runs a pass: the synthetic model, real training or the batch-update
 * trainer. */
typedef struct tl_runner {
    synthetic *syn;
    train *tr;
    comm *c;
    batch_update *bu;
    uint64_t batches; /* per pass (batch-update) */
} tl_runner;

static int tl_run_pass(tlink *t, tl_runner *r, client *cl, char *err, size_t errlen)
{
    if (r->bu) {
        batch_update_report rep;
        if (batch_update_pass(r->bu, cl, r->batches, 0, true, &rep, err, errlen) < 0)
            return -1;
        t->batches_done = rep.batches;
        return tl_report(t, "pass_done", err, errlen);
    }
    if (r->syn) {
        synthetic_report rep = {0};
        if (synthetic_run(r->syn, cl, &rep, err, errlen) < 0)
            return -1;
        t->batches_done = rep.batches;
        return tl_report(t, "pass_done", err, errlen);
    }
    if (train_pass(r->tr, r->c, tl_tick, t, err, errlen) < 0)
        return -1;
    /* Every trainer reports its losses and a digest of its parameters:
     * synchronous training must leave them bit-identical. */
    uint64_t ne;
    const double *loss = train_loss_per_epoch(r->tr, &ne);
    json_t *losses = json_array();
    for (uint64_t e = 0; e < ne; e++)
        json_array_append_new(losses, json_real(loss[e]));
    char hex[65] = "";
    train_params_sha256(r->tr, hex);
    return tl_report_extra(t, "pass_done",
                           json_pack("{s:o, s:s}", "loss_per_epoch", losses, "final_params_sha256", hex),
                           err, errlen);
}

/* The final parameters, raw little-endian float32 in parameter order (what
 * final_params_sha256 digests), for comparisons across runs. */
static int tl_write_params(train *tr, const char *path, char *err, size_t errlen)
{
    const dummy_model *m = train_model(tr);
    FILE *f = fopen(path, "wb");
    size_t n = (size_t)model_total_size(m);
    if (!f || fwrite(model_values_const(m), sizeof(float), n, f) != n || fclose(f) != 0) {
        snprintf(err, errlen, "--params-out %s: cannot write", path);
        return -1;
    }
    return 0;
}

/* The real model's job from the assignment. */
static int tl_train_job(json_t *a, train_job *j, char *err, size_t errlen)
{
    json_t *mc = json_object_get(json_object_get(a, "model"), "configurations");
    json_t *data = json_object_get(a, "data");
    json_t *dc = json_object_get(data, "configurations");
    json_t *tc = json_object_get(json_object_get(a, "trainer"), "configurations");
    memset(j, 0, sizeof *j);
    j->model.num_embeddings = (uint64_t)ctl_int(mc, "num_embeddings", 0);
    j->model.embedding_dim = (uint64_t)ctl_int(mc, "embedding_dim", 0);
    j->model.dense_input_size = (uint64_t)ctl_int(mc, "dense_input_size", 0);
    j->model.dense_output_size = (uint64_t)ctl_int(mc, "dense_output_size", 0);
    j->model.dense_layers_count = (uint32_t)ctl_int(mc, "dense_layers_count", 1);
    j->model.sparse = json_is_true(json_object_get(mc, "sparse"));
    if (strcmp(ctl_str(data, "class", ""), "DummyData") != 0) {
        snprintf(err, errlen, "data class '%s' is not in this build (it has DummyData)", ctl_str(data, "class", ""));
        return -1;
    }
    j->data.max_val = (uint64_t)ctl_int(dc, "max_val", 0);
    j->data.sample_count = (uint64_t)ctl_int(dc, "sample_count", ctl_int(dc, "input_samples", 0));
    j->data.sample_length = (uint64_t)ctl_int(dc, "sample_length", ctl_int(dc, "input_dim", 0));
    j->data.sparsity_percentage = (uint32_t)ctl_int(dc, "sparsity_percentage", 0);
    const char *hook = ctl_str(tc, "ddp_hook", "rpc_hook");
    if (strcmp(hook, "rpc_hook") != 0 && strcmp(hook, "rpc") != 0) {
        snprintf(err, errlen, "hook '%s' needs NCCL allreduce among GPU trainers, which this CPU build does "
                 "not have; use a trainer configuration with ddp_hook rpc_hook (e.g. --trainer DdpRpcTrainer)",
                 hook);
        return -1;
    }
    j->lr = ctl_num(tc, "lr", 0.01);
    j->momentum = ctl_num(tc, "momentum", 0.0);
    j->bucket_cap_mb = ctl_num(tc, "bucket_cap_mb", 25.0);
    j->seed = (uint64_t)ctl_int(a, "seed", 0);
    j->batch_size = (uint64_t)ctl_int(a, "batch_size", 10);
    j->epochs = (uint64_t)ctl_int(a, "epochs", 1);
    j->rank = (uint32_t)ctl_int(a, "rank", 0);
    j->ntrainer = (uint32_t)ctl_int(a, "ntrainer", 1);
    return 0;
}

/* The batch-update trainer's job from the assignment: the Linear model's
 * sizes, the (resolved) batch size, the seed and the rank. */
static int tl_batch_update_job(json_t *a, batch_update_config *bc, double rpc_timeout, char *err, size_t errlen)
{
    json_t *mc = json_object_get(json_object_get(a, "model"), "configurations");
    memset(bc, 0, sizeof *bc);
    json_int_t in = ctl_int(mc, "in_features", 0), out = ctl_int(mc, "out_features", 0);
    json_int_t bs = ctl_int(a, "batch_size", 0);
    if (in < 1 || out < 1 || bs < 1) {
        snprintf(err, errlen, "the assignment's Linear model or batch size is invalid");
        return -1;
    }
    bc->in_features = (uint64_t)in;
    bc->out_features = (uint64_t)out;
    bc->batch_size = (uint64_t)bs;
    bc->seed = (uint64_t)ctl_int(a, "seed", 0);
    bc->rank = (uint64_t)ctl_int(a, "rank", 0);
    bc->rpc_timeout_s = rpc_timeout;
    return 0;
}

/* Communication before compute. DDP on GPUs gives its collectives
 * high-priority streams so that bucket traffic is not queued behind the
 * rest of backward; on a CPU host the scheduler plays that part. The comm
 * thread exists by now (at the process's nice level); lowering only the
 * calling thread, the one that runs forward, backward and the optimizer,
 * lets the comm thread and a server on the same host run first whenever
 * busy threads outnumber cores, and costs nothing when they do not. (On
 * Linux a nice value belongs to a thread: setpriority on a thread id.) */
static void tl_lower_compute_priority(int nice_by)
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

static int tl_run(tlink *t, const trainer_link_opts *o, char *err, size_t errlen)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    json_t *body = json_pack("{s:s, s:s, s:s, s:I}", "role", "trainer", "host", host, "device", o->device,
                             "pid", (json_int_t)getpid());
    if (o->want_rank >= 0)
        json_object_set_new(body, "want_rank", json_integer(o->want_rank));
    int rc = ctl_send(&t->c, "register", o->token, body, err, errlen);
    json_decref(body);
    if (rc < 0)
        return 1;

    ctl_msg msg;
    if (tl_wait(t, &msg, err, errlen) < 0)
        return 1;
    if (strcmp(msg.type, "stop") == 0) {
        snprintf(err, errlen, "the master refused this trainer: %s", ctl_str(msg.body, "reason", "?"));
        t->stopped = true; /* nothing to report back */
        ctl_msg_clear(&msg);
        return 1;
    }
    if (strcmp(msg.type, "assign") != 0) {
        snprintf(err, errlen, "expected an assignment from the master, got '%s'", msg.type);
        ctl_msg_clear(&msg);
        return 1;
    }
    uint64_t rank = (uint64_t)ctl_int(msg.body, "rank", 0);
    uint64_t batches = (uint64_t)ctl_int(msg.body, "batches", 1);
    double rpc_timeout = ctl_num(msg.body, "rpc_timeout", 60);
    if (!(rpc_timeout > 0) || rpc_timeout > CLI_MAX_SECONDS)
        rpc_timeout = rpc_timeout > 0 ? CLI_MAX_SECONDS : 60; /* the master checks it; stay sane anyway */
    char list[16384] = "";
    size_t i, used = 0;
    json_t *v;
    bool too_long = false;
    json_array_foreach(json_object_get(msg.body, "servers"), i, v) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "",
                         json_string_value(v) ? json_string_value(v) : "");
        if (w < 0 || (size_t)w >= sizeof list - used) {
            too_long = true; /* a cut list would map buckets to the wrong servers */
            break;
        }
        used += (size_t)w;
    }
    /* Copied: the assignment's body is freed before the run. */
    char cls[64];
    snprintf(cls, sizeof cls, "%s", ctl_str(json_object_get(msg.body, "model"), "class", ""));
    tl_runner r = {0};
    int setup = 0;
    if (too_long) {
        snprintf(err, errlen, "the assignment's server list is longer than %zu bytes", sizeof list - 1);
        setup = -1;
    } else if (!list[0]) {
        snprintf(err, errlen, "the assignment names no server");
        setup = -1;
    } else if (strcmp(cls, "Synthetic") == 0) {
        synthetic_config sc = {0};
        sc.rank = (uint64_t)ctl_int(msg.body, "data_rank", 0);
        sc.batches = batches;
        sc.rpc_timeout_s = rpc_timeout;
        uint64_t *sizes = NULL;
        setup = tl_model(msg.body, &sc, &sizes, err, errlen);
        if (setup == 0 && !(r.syn = synthetic_new(&sc, t->m))) {
            snprintf(err, errlen, "out of memory");
            setup = -1;
        }
        free(sizes);
        if (r.syn)
            synthetic_set_tick(r.syn, tl_tick, t);
    } else if (strcmp(cls, "DummyModel") == 0) {
        train_job j;
        setup = tl_train_job(msg.body, &j, err, errlen);
        if (setup == 0 && !(r.tr = train_new(&j, t->m, err, errlen)))
            setup = -1;
        if (setup == 0 && train_batches_per_pass(r.tr) != batches) {
            snprintf(err, errlen, "the master expects %" PRIu64 " batches per pass, the data gives %" PRIu64,
                     batches, train_batches_per_pass(r.tr));
            setup = -1;
        }
    } else if (strcmp(cls, "Linear") == 0) {
        batch_update_config bc;
        setup = tl_batch_update_job(msg.body, &bc, rpc_timeout, err, errlen);
        if (setup == 0 && !(r.bu = batch_update_new(&bc, t->m, err, errlen)))
            setup = -1;
        if (r.bu) {
            batch_update_set_tick(r.bu, tl_tick, t);
            r.batches = batches;
        }
    } else {
        snprintf(err, errlen, "model class '%s' is not in this build (Synthetic, DummyModel, Linear)", cls);
        setup = -1;
    }
    ctl_msg_clear(&msg);
    client cl;
    memset(&cl, 0, sizeof cl);
    cl.wake_fd = -1;
    int code = 1;
    if (setup < 0)
        goto out;
    log_info("trainer %" PRIu64 ": model %s, servers %s, %" PRIu64 " batches per pass", rank, cls, list, batches);
    client_sink sink = {0};
    if (r.syn)
        sink = synthetic_sink(r.syn);
    if (r.bu)
        sink = batch_update_sink(r.bu);
    if (client_open(&cl, list, rank, o->token, o->connect_timeout_s, &sink, err, errlen) < 0)
        goto out;
    t->cl = &cl;
    if (r.tr && !(r.c = comm_start(&cl, rpc_timeout, err, errlen)))
        goto out;
    if (r.tr)
        tl_lower_compute_priority(o->compute_nice);
    if (ctl_send(&t->c, "ready", NULL, NULL, err, errlen) < 0)
        goto out;
    for (;;) {
        if (tl_wait(t, &msg, err, errlen) < 0)
            goto out;
        if (strcmp(msg.type, "start") == 0) {
            ctl_msg_clear(&msg);
            t->batches_done = 0;
            if (tl_run_pass(t, &r, &cl, err, errlen) < 0)
                goto out;
        } else if (strcmp(msg.type, "reset") == 0) {
            ctl_msg_clear(&msg);
            metrics_reset(t->m);
            t->batches_done = 0;
            if (ctl_send(&t->c, "reset_done", NULL, NULL, err, errlen) < 0)
                goto out;
        } else if (strcmp(msg.type, "stop") == 0) {
            tl_on_stop(t, &msg);
            ctl_msg_clear(&msg);
            code = t->stop_code;
            if (code)
                snprintf(err, errlen, "the master stopped the run: %s", t->stop_reason);
            else if (r.tr && o->params_out && tl_write_params(r.tr, o->params_out, err, errlen) < 0)
                code = 1;
            else if (r.bu && o->params_out && batch_update_write_params(r.bu, o->params_out, err, errlen) < 0)
                code = 1;
            goto out;
        } else {
            ctl_msg_clear(&msg);
        }
    }
out:
    comm_stop(r.c);
    t->cl = NULL;
    client_close(&cl);
    synthetic_free(r.syn);
    train_free(r.tr);
    batch_update_free(r.bu);
    return code;
}

int trainer_run_with_master(const trainer_link_opts *o, metrics *m, char *err, size_t errlen)
{
    tlink t = {0};
    t.m = m;
    metrics_enable_reporting(m);
    if (ctl_connect(&t.c, o->master, o->connect_timeout_s, err, errlen) < 0) {
        ctl_close(&t.c);
        return 1;
    }
    int code = tl_run(&t, o, err, errlen);
    if (code != 0 && !t.stopped) {
        /* Tell the master why, so that it can name us in its failure. */
        char ignore[64];
        json_t *body = json_pack("{s:s}", "reason", err);
        ctl_send(&t.c, "failed", NULL, body, ignore, sizeof ignore);
        json_decref(body);
    }
    ctl_close(&t.c);
    return code;
}
