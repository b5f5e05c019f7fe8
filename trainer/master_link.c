/* master_link.c — a trainer's control connection (see master_link.h). */
#include "trainer/master_link.h"
#include "shared/clock.h"
#include "shared/clocksync.h"
#include "shared/hostinfo.h"
#include "shared/log.h"
#include "shared/text.h"
#include "trainer/ttrace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MLINK_REPORT_S 0.5 /* metrics (the heartbeat) this often */
#define MLINK_CHECK_S 0.1  /* look for a stop this often during a pass */

int mlink_open(mlink *l, const char *master, double reach_s, bool bounded, double timeout_s, metrics *m, char *err,
               size_t errlen)
{
    double t0 = clock_now_s();
    memset(l, 0, sizeof *l);
    l->c.fd = -1;
    l->m = m;
    l->store_timeout_s = 60;
    l->connect_timeout_s = timeout_s;
    if (ctl_connect(&l->c, master, reach_s, err, errlen) < 0) {
        ctl_close(&l->c);
        l->retry = true; /* no master listens there (yet) */
        return -1;
    }
    if (bounded)
        l->c.answer_by = t0 + reach_s;
    return 0;
}

/* The master's `clock` (issue 42), answered at once: its t1 is when it
 * was read, t2 when the answer goes. A clock this trainer cannot echo is
 * dropped (the master's round then stays unanswered: its clock unaligned). */
static int mlink_answer_clock(mlink *l, const ctl_msg *msg, uint64_t t1, char *err, size_t errlen)
{
    json_t *ack = clocksync_answer(msg->body, t1, clock_now_ns());
    if (!ack) {
        log_debug("ignored a clock from the master without seq and t0");
        return 0;
    }
    int rc = ctl_send(&l->c, "clock_ack", NULL, ack, err, errlen);
    json_decref(ack);
    return rc;
}

/* ctl_recv on the master's link, every `clock` answered on the way: 1 a
 * message other than a clock, 0 none (within timeout_ms, or a clock
 * answered: the callers wait on in their loops), -1 with err. */
static int mlink_recv(mlink *l, int timeout_ms, ctl_msg *msg, char *err, size_t errlen)
{
    int got = ctl_recv(&l->c, timeout_ms, msg, err, errlen);
    if (got != 1 || strcmp(msg->type, "clock") != 0)
        return got;
    uint64_t t1 = clock_now_ns();
    int rc = mlink_answer_clock(l, msg, t1, err, errlen);
    ctl_msg_clear(msg);
    return rc < 0 ? -1 : 0;
}

static void mlink_on_stop(mlink *l, ctl_msg *msg)
{
    /* The run ends here for this trainer: its whole trace goes now, before
     * anything else it says (docs/protocol.md, "Extension: the trace"). */
    ttrace_ship(l->trace, &l->c, true);
    l->stopped = true;
    const char *st = ctl_str(msg->body, "status", "failed");
    l->stop_code = strcmp(st, "done") == 0 ? 0 : 1;
    /* The master's words go into this trainer's last line: escaped. */
    ctl_text(msg->body, "reason", l->stop_code ? "the run failed" : "", l->stop_reason, sizeof l->stop_reason);
}

/* How long a failing trainer waits for the master's verdict: the master
 * holds a failure 1 s for its cause, then stops everyone. */
#define MLINK_VERDICT_S 3.0

/* err: the master is gone (why, which may name it already), then ours. */
static void mlink_lost(const mlink *l, const char *why, const char *local, char *err, size_t errlen)
{
    if (strstr(why, l->c.peer))
        snprintf(err, errlen, "lost the master: %s; here: %s", why, local);
    else
        snprintf(err, errlen, "lost the master %s (%s); here: %s", l->c.peer, why, local);
}

/* After our `failed` report: wait for the master's stop, whose reason names
 * the node at fault (which may be another: a killed server, a host cut
 * off), and make that err, our own reason after it. */
static void mlink_await_verdict(mlink *l, char *err, size_t errlen)
{
    char local[512];
    snprintf(local, sizeof local, "%s", err);
    double deadline = clock_now_s() + MLINK_VERDICT_S;
    for (;;) {
        double left = deadline - clock_now_s();
        if (left <= 0) {
            snprintf(err, errlen, "%s (no word from the master %s within %.0f s: is this host cut off from it?)", local, l->c.peer, MLINK_VERDICT_S);
            return;
        }
        ctl_msg msg;
        char why[256];
        int got = mlink_recv(l, (int)(left * 1000) + 1, &msg, why, sizeof why);
        if (got < 0) {
            mlink_lost(l, why, local, err, errlen);
            return;
        }
        if (got == 1) {
            bool stop = strcmp(msg.type, "stop") == 0;
            if (stop)
                mlink_on_stop(l, &msg);
            ctl_msg_clear(&msg);
            if (stop) {
                if (strstr(l->stop_reason, local))
                    snprintf(err, errlen, "the run failed: %s", l->stop_reason);
                else
                    snprintf(err, errlen, "the run failed: %s (here: %s)", l->stop_reason, local);
                return;
            }
        }
    }
}

void mlink_close(mlink *l, bool failed, char *err, size_t errlen)
{
    if (failed && l->joined && !l->stopped && l->c.fd >= 0) {
        /* Tell the master why, so that it can name us in its failure (or
         * name another node, the cause). */
        char why[256];
        json_t *body = json_pack("{s:s}", "reason", err);
        if (body && l->fail_detail)
            json_object_update_missing(body, l->fail_detail);
        int sent = ctl_send(&l->c, "failed", NULL, body, why, sizeof why);
        json_decref(body);
        if (sent == 0) {
            mlink_await_verdict(l, err, errlen);
        } else {
            char local[512];
            snprintf(local, sizeof local, "%s", err);
            mlink_lost(l, why, local, err, errlen);
        }
    }
    ctl_close(&l->c);
    json_decref(l->fail_detail);
    l->fail_detail = NULL;
}

void mlink_set_fail_detail(mlink *l, json_t *detail)
{
    json_decref(l->fail_detail);
    l->fail_detail = detail;
}

/* The metrics timed on the trainer's GPU (metrics_set_gpu_timed), by key;
 * NULL when none (a CPU trainer's reports do not carry the list). */
static json_t *mlink_gpu_timed(metrics *m)
{
    if (!m || metrics_gpu_timed_count(m) == 0)
        return NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < metrics_size(m); i++)
        if (metrics_gpu_timed_at(m, i))
            json_array_append_new(a, json_string(metrics_key_at(m, i)));
    return a;
}

int mlink_report(mlink *l, const char *type, json_t *extra, char *err, size_t errlen)
{
    uint64_t in = 0, out = 0;
    if (l->bytes)
        l->bytes(l->bytes_ctx, &in, &out);
    json_t *body = json_pack("{s:o, s:I, s:I, s:I}", "samples", ctl_take_samples(l->m), "batches_done",
                             (json_int_t)l->batches_done, "bytes_in", (json_int_t)in, "bytes_out",
                             (json_int_t)out);
    json_t *gpu = mlink_gpu_timed(l->m);
    if (gpu)
        json_object_set_new(body, "gpu_timed", gpu);
    /* This host's CPU and this process's own at this moment: the master
     * measures each host's state over the timed pass from them (issue 38). */
    hostinfo_sample hs;
    hostinfo_sample_take(&hs);
    json_t *host = hostinfo_sample_json(&hs);
    if (host)
        json_object_set_new(body, "host", host);
    if (extra) {
        json_object_update(body, extra);
        json_decref(extra);
    }
    int rc = ctl_send(&l->c, type, NULL, body, err, errlen);
    json_decref(body);
    l->last_report = clock_now_s();
    /* The spans recorded since the last report, from this thread, never
     * more often than the reports (a failure is a warning). */
    if (rc == 0)
        ttrace_ship(l->trace, &l->c, false);
    return rc;
}

int mlink_wait(mlink *l, ctl_msg *msg, char *err, size_t errlen)
{
    for (;;) {
        int got = mlink_recv(l, 250, msg, err, errlen);
        if (got < 0)
            return -1;
        if (got == 1) {
            if (strcmp(msg->type, "stop") == 0)
                mlink_on_stop(l, msg);
            return 0;
        }
        if (clock_now_s() - l->last_report >= MLINK_REPORT_S && mlink_report(l, "metrics", NULL, err, errlen) < 0)
            return -1;
    }
}

int mlink_register(mlink *l, const char *token, json_t *body, json_t **assign, char *err, size_t errlen)
{
    if (assign)
        *assign = NULL;
    /* "clock" (extension, issue 42): this trainer answers `clock`, so
     * that a master with --trace may send it one. */
    if (body)
        json_object_set_new(body, "clock", json_true());
    int rc = ctl_send(&l->c, "register", token, body, err, errlen);
    json_decref(body);
    if (rc < 0) {
        l->retry = !ctl_master_answered(&l->c);
        return -1;
    }
    ctl_msg msg;
    if (ctl_recv_first(&l->c, l->connect_timeout_s, &msg, err, errlen) < 0) {
        /* No master answered: a master that was ending, a silent or
         * stopped one, a peer in another protocol. */
        l->retry = !ctl_master_answered(&l->c);
        return -1;
    }
    l->joined = true;
    if (!assign && (strcmp(msg.type, "registered") == 0 || strcmp(msg.type, "assign") == 0)) {
        /* Joined only to report a failure (mlink_close): no assignment. */
        ctl_msg_clear(&msg);
        return 0;
    }
    if (strcmp(msg.type, "registered") == 0) {
        /* A master: the assignment comes once every server is ready. */
        ctl_msg_clear(&msg);
        if (mlink_wait(l, &msg, err, errlen) < 0)
            return -1;
    } else if (strcmp(msg.type, "stop") == 0) {
        mlink_on_stop(l, &msg);
    }
    if (strcmp(msg.type, "stop") == 0) {
        if (strcmp(ctl_str(msg.body, "status", "refused"), "refused") == 0)
        {
            /* "retry" (extension): no place for this trainer now, perhaps
             * in a later job (docs/protocol.md). */
            l->refused = true;
            l->retry = json_is_true(json_object_get(msg.body, "retry"));
            char why[512];
            snprintf(err, errlen, "the master refused this trainer: %s",
                     ctl_text(msg.body, "reason", "?", why, sizeof why));
        }
        else
            snprintf(err, errlen, "the run failed: %s", l->stop_reason);
        ctl_msg_clear(&msg);
        return -1;
    }
    if (strcmp(msg.type, "assign") != 0) {
        snprintf(err, errlen, "expected an assignment from the master, got '%s'", msg.type);
        ctl_msg_clear(&msg);
        return -1;
    }
    *assign = msg.body;
    msg.body = NULL;
    ctl_msg_clear(&msg);
    return 0;
}

int mlink_tick(void *ctx, uint64_t batches_done, char *err, size_t errlen)
{
    mlink *l = ctx;
    l->batches_done = batches_done;
    double now = clock_now_s();
    if (now - l->last_report >= MLINK_REPORT_S && mlink_report(l, "metrics", NULL, err, errlen) < 0)
        return -1;
    if (now - l->last_check < MLINK_CHECK_S)
        return 0;
    l->last_check = now;
    ctl_msg msg;
    int got = mlink_recv(l, 0, &msg, err, errlen);
    if (got < 0)
        return -1;
    if (got == 1) {
        if (strcmp(msg.type, "stop") == 0) {
            mlink_on_stop(l, &msg);
            snprintf(err, errlen, "stopped by the master: %s", l->stop_reason);
            ctl_msg_clear(&msg);
            return -1;
        }
        ctl_msg_clear(&msg);
    }
    return 0;
}

/* ---- the rendezvous store ------------------------------------------------- */

/* Values travel as hex in the JSON bodies (they are small: addresses, an
 * NCCL id). */
static char *mlink_hex(const uint8_t *p, size_t n)
{
    char *s = malloc(2 * n + 1);
    if (s)
        text_hex(p, n, s);
    return s;
}

static int mlink_unhex(const char *s, uint8_t **out, size_t *len)
{
    size_t n = strlen(s);
    if (n % 2)
        return -1;
    uint8_t *p = malloc(n / 2 ? n / 2 : 1);
    if (!p)
        return -1;
    if (text_unhex(s, n / 2, p) < 0) {
        free(p);
        return -1;
    }
    *out = p;
    *len = n / 2;
    return 0;
}

static int mlink_kv_set(void *ctx, const char *key, const void *val, size_t len, char *err, size_t errlen)
{
    mlink *l = ctx;
    char *hex = mlink_hex(val, len);
    if (!hex) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    json_t *body = json_pack("{s:s, s:s}", "key", key, "value", hex);
    free(hex);
    int rc = ctl_send(&l->c, "kv_set", NULL, body, err, errlen);
    json_decref(body);
    return rc;
}

static int mlink_kv_get(void *ctx, const char *key, uint8_t **val, size_t *len, char *err, size_t errlen)
{
    mlink *l = ctx;
    json_t *body = json_pack("{s:s}", "key", key);
    int rc = ctl_send(&l->c, "kv_get", NULL, body, err, errlen);
    json_decref(body);
    if (rc < 0)
        return -1;
    double deadline = clock_now_s() + l->store_timeout_s;
    for (;;) {
        double left = deadline - clock_now_s();
        if (left <= 0) {
            snprintf(err, errlen, "timed out after %g s waiting for the other trainers to join the group "
                     "(--rpc-timeout; key %s)", l->store_timeout_s, key);
            return -1;
        }
        ctl_msg msg;
        int got = mlink_recv(l, left < 0.25 ? (int)(left * 1000) + 1 : 250, &msg, err, errlen);
        if (got < 0)
            return -1;
        if (got == 0) {
            if (clock_now_s() - l->last_report >= MLINK_REPORT_S && mlink_report(l, "metrics", NULL, err, errlen) < 0)
                return -1;
            continue;
        }
        if (strcmp(msg.type, "stop") == 0) {
            mlink_on_stop(l, &msg);
            snprintf(err, errlen, "stopped by the master while joining the group: %s", l->stop_reason);
            ctl_msg_clear(&msg);
            return -1;
        }
        if (strcmp(msg.type, "kv_value") == 0 && strcmp(ctl_str(msg.body, "key", ""), key) == 0) {
            rc = mlink_unhex(ctl_str(msg.body, "value", ""), val, len);
            ctl_msg_clear(&msg);
            if (rc < 0)
                snprintf(err, errlen, "the master sent a malformed value for %s", key);
            return rc;
        }
        log_warn("ignored '%s' from the master while joining a group", msg.type);
        ctl_msg_clear(&msg);
    }
}

coll_store mlink_store(mlink *l)
{
    coll_store s = {mlink_kv_set, mlink_kv_get, l};
    return s;
}
