/* master_link.c — a trainer run driven by psbench-master (see master_link.h). */
#include "trainer/master_link.h"
#include "shared/control.h"
#include "shared/log.h"
#include "trainer/client.h"
#include "trainer/synthetic.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static double tl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int tl_report(tlink *t, const char *type, char *err, size_t errlen)
{
    json_t *body = json_pack("{s:o, s:I, s:I, s:I}", "samples", ctl_take_samples(t->m), "batches_done",
                             (json_int_t)t->batches_done, "bytes_in",
                             (json_int_t)(t->cl ? t->cl->bytes_in : 0), "bytes_out",
                             (json_int_t)(t->cl ? t->cl->bytes_out : 0));
    int rc = ctl_send(&t->c, type, NULL, body, err, errlen);
    json_decref(body);
    t->last_report = tl_now();
    return rc;
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
    double now = tl_now();
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

/* Read the synthetic model's settings from the assignment. */
static int tl_model(json_t *assign, synthetic_config *sc, char *err, size_t errlen)
{
    json_t *model = json_object_get(assign, "model");
    const char *cls = ctl_str(model, "class", "");
    json_t *conf = json_object_get(model, "configurations");
    if (strcmp(cls, "Synthetic") != 0) {
        snprintf(err, errlen, "model class '%s' is not in this build (it has Synthetic)", cls);
        return -1;
    }
    sc->buckets = (uint32_t)ctl_int(conf, "buckets", 4);
    sc->bucket_floats = (uint64_t)ctl_int(conf, "bucket_floats", 262144);
    sc->sparse = json_is_true(json_object_get(conf, "sparse"));
    sc->sparse_cols = (uint32_t)ctl_int(conf, "sparse_cols", 16);
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
        if (tl_now() - t->last_report >= 0.5 && tl_report(t, "metrics", err, errlen) < 0)
            return -1;
    }
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
    synthetic_config sc = {0};
    sc.rank = (uint64_t)ctl_int(msg.body, "data_rank", 0);
    sc.batches = (uint64_t)ctl_int(msg.body, "batches", 1);
    sc.rpc_timeout_s = ctl_num(msg.body, "rpc_timeout", 60);
    uint64_t rank = (uint64_t)ctl_int(msg.body, "rank", 0);
    json_t *servers = json_object_get(msg.body, "servers");
    char list[4096] = "";
    size_t i;
    json_t *v;
    json_array_foreach(servers, i, v) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "", json_string_value(v));
    }
    int mrc = tl_model(msg.body, &sc, err, errlen);
    ctl_msg_clear(&msg);
    if (mrc < 0 || !list[0]) {
        if (!list[0])
            snprintf(err, errlen, "the assignment names no server");
        return 1;
    }
    log_info("trainer %" PRIu64 ": servers %s, %u buckets x %" PRIu64 " floats, %" PRIu64 " batches per pass",
             rank, list, sc.buckets, sc.bucket_floats, sc.batches);

    synthetic *syn = synthetic_new(&sc, t->m);
    if (!syn) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    synthetic_set_tick(syn, tl_tick, t);
    client cl;
    client_sink sink = synthetic_sink(syn);
    int code = 1;
    if (client_open(&cl, list, rank, o->token, o->connect_timeout_s, &sink, err, errlen) < 0)
        goto out;
    t->cl = &cl;
    if (ctl_send(&t->c, "ready", NULL, NULL, err, errlen) < 0)
        goto out;
    for (;;) {
        if (tl_wait(t, &msg, err, errlen) < 0)
            goto out;
        if (strcmp(msg.type, "start") == 0) {
            synthetic_report rep = {0};
            t->batches_done = 0;
            ctl_msg_clear(&msg);
            if (synthetic_run(syn, &cl, &rep, err, errlen) < 0)
                goto out;
            t->batches_done = rep.batches;
            if (tl_report(t, "pass_done", err, errlen) < 0)
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
            goto out;
        } else {
            ctl_msg_clear(&msg);
        }
    }
out:
    t->cl = NULL;
    client_close(&cl);
    synthetic_free(syn);
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
