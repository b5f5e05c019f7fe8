/* master_link.c — a server's control connection (see master_link.h). */
#include "server/master_link.h"
#include "server/bounds.h"
#include "server/conn.h"
#include "server/hostmem.h"
#include "shared/clock.h"
#include "shared/clocksync.h"
#include "shared/hostinfo.h"
#include "shared/log.h"
#include "shared/net.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct master_link {
    server *s;
    struct bufferevent *bev;
    struct event *tick;
    struct event *new_run_ev; /* the master's reset between runs, once the run's trainers left */
    bool new_run_wait;        /* that reset is waiting for them */
    bool ready_sent;          /* `ready` went out (the kind was ready once) */
    bool reset_wait;          /* a reset is answered once the kind is ready */
    bool failed_sent;         /* `failed` went out (said once) */
    bool stopped;             /* the master's `stop` came: the trace's final ship goes at the end */
    frame_decoder dec;
    const char *token;
    char peer[300]; /* the master's HOST:PORT, for messages */
};

/* The `batch_update` object of a batch-update server's assignment. */
static int master_link_batch_update(json_t *body, batch_update_config *bu, char *err, size_t errlen)
{
    json_t *o = json_object_get(body, "batch_update");
    int64_t in = ctl_int(o, "in_features", -1), out = ctl_int(o, "out_features", -1);
    int64_t size = ctl_int(o, "batch_update_size", 0), part = ctl_int(o, "part", -1);
    int64_t parts = ctl_int(o, "parts", -1), seed = ctl_int(o, "seed", 0);
    double lr = ctl_num(o, "lr", -1), momentum = ctl_num(o, "momentum", -1);
    if (!json_is_object(o) || in < 1 || in > (1 << 20) || out < 1 || out > (1 << 20) || size < 0 ||
        size > 65536 || parts < 1 || parts > 65536 || part < 0 || part >= parts || !(lr >= 0) ||
        !(momentum >= 0)) {
        snprintf(err, errlen, "the master sent a bad batch-update assignment");
        return -1;
    }
    bu->in_features = (uint32_t)in;
    bu->out_features = (uint32_t)out;
    bu->batch_update_size = (uint32_t)size;
    bu->part = (uint32_t)part;
    bu->parts = (uint32_t)parts;
    bu->seed = (uint64_t)seed;
    bu->lr = (float)lr;
    bu->momentum = (float)momentum;
    return 0;
}

/* The `embedding` object of an embedding server's assignment. */
static int master_link_embedding(json_t *body, embedding_config *emb, char *err, size_t errlen)
{
    json_t *o = json_object_get(body, "embedding");
    int64_t rows = ctl_int(o, "num_embeddings", -1), cols = ctl_int(o, "embedding_dim", -1);
    int64_t seed = ctl_int(o, "seed", 0);
    double lr = ctl_num(o, "lr", 0.05); /* the seed's, when the master leaves it out */
    if (!json_is_object(o) || rows < 1 || cols < 1 || rows > (1ll << 31) || cols > (1ll << 31) || !(lr >= 0) ||
        lr > 1e6) {
        snprintf(err, errlen, "the master sent a bad embedding assignment");
        return -1;
    }
    emb->num_embeddings = (uint64_t)rows;
    emb->embedding_dim = (uint64_t)cols;
    emb->lr = (float)lr;
    emb->seed = (uint64_t)seed;
    return 0;
}

/* How long a server that reported its failure waits for the master's
 * verdict (as a trainer does): its last line is then the verdict. */
#define MASTER_LINK_VERDICT_S 3.0

void master_link_report_failure(ctl_conn *c, const char *reason, char *err, size_t errlen)
{
    char local[512], why[256];
    snprintf(local, sizeof local, "%s", reason);
    snprintf(err, errlen, "%s", local);
    json_t *body = json_pack("{s:s}", "reason", local);
    int sent = body ? ctl_send(c, "failed", NULL, body, why, sizeof why) : -1;
    json_decref(body);
    if (sent < 0)
        return;
    double deadline = clock_now_s() + MASTER_LINK_VERDICT_S;
    for (;;) {
        double left = deadline - clock_now_s();
        ctl_msg m;
        if (left <= 0 || ctl_recv(c, (int)(left * 1000) + 1, &m, why, sizeof why) <= 0)
            return; /* no verdict: the local reason stands */
        bool stop = strcmp(m.type, "stop") == 0;
        if (stop)
            snprintf(err, errlen, "the run failed: %s", ctl_str(m.body, "reason", local));
        ctl_msg_clear(&m);
        if (stop)
            return;
    }
}

/* The job's model (an assignment's `model`, extension): what one trainer
 * may hold here follows from it (bounds.h), unless --max-open-* said. A
 * master that sends none leaves the flags' defaults. */
static int master_link_bounds(json_t *body, server_config *cfg, char *err, size_t errlen)
{
    json_t *model = json_object_get(body, "model");
    if (!model || cfg->open_flags)
        return 0;
    modelconf mc;
    char why[256];
    if (modelconf_from_entry(model, &mc, why, sizeof why) < 0) {
        snprintf(err, errlen, "the master sent a model this server cannot read: %s", why);
        return -1;
    }
    bounds_from_model(&mc, &cfg->open);
    modelconf_free(&mc);
    log_info("one trainer may have %u pushes and %" PRIu64 " bytes waiting here (%s)", cfg->open.pushes,
             cfg->open.bytes, cfg->open.source);
    return 0;
}

/* The device as the master hears of it: the test devices as what they
 * stand for (the master places and checks servers by it). */
static const char *master_link_device(device_spec d, char buf[DEVSPEC_NAME_MAX])
{
    switch (d.kind) {
    case DEVICE_TEST:
        return "cpu";
    case DEVICE_FAKE_CUDA:
        return "cuda";
    default:
        return devspec_name(d, buf);
    }
}

/* The answer to the master's `clock` m (issue 42), read just now: t1 is
 * when it was read, t2 when the answer goes. NULL: a clock without seq and
 * t0 (dropped: that round stays unanswered). */
static json_t *link_clock_ack(const ctl_msg *m)
{
    uint64_t t1 = clock_now_ns();
    return clocksync_answer(m->body, t1, clock_now_ns());
}

int master_link_join(ctl_conn *c, const char *master, server_config *cfg, const char *advertise, int64_t want_rank,
                     json_t *environment, double reach_s, bool bounded, double connect_timeout_s,
                     const char *fail_reason, bool *retry, char *err, size_t errlen)
{
    char device_name[DEVSPEC_NAME_MAX];
    double t0 = clock_now_s();
    *retry = true; /* until the master has answered: no master to join (yet) */
    if (ctl_connect(c, master, reach_s, err, errlen) < 0)
        return -1;
    if (bounded)
        c->answer_by = t0 + reach_s;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    json_t *body = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "role", "server", "host", host, "device",
                             master_link_device(cfg->device, device_name), "listen_host", cfg->host, "port",
                             (json_int_t)cfg->port, "pid", (json_int_t)getpid());
    if (advertise)
        json_object_set_new(body, "advertise", json_string(advertise));
    if (environment)
        json_object_set(body, "environment", environment);
    if (want_rank >= 0)
        json_object_set_new(body, "want_rank", json_integer(want_rank));
    /* What an embedding table must fit in: the master refuses tables that
     * cannot, before any server allocates. */
    uint64_t mem_total, mem_available;
    if (hostmem_read(&mem_total, &mem_available) == 0) {
        json_object_set_new(body, "mem_total_bytes", json_integer((json_int_t)mem_total));
        json_object_set_new(body, "mem_available_bytes", json_integer((json_int_t)mem_available));
    }
    /* "clock" (extension, issue 42): this server answers `clock`. */
    json_object_set_new(body, "clock", json_true());
    int rc = ctl_send(c, "register", cfg->token, body, err, errlen);
    json_decref(body);
    if (rc < 0)
        return -1;
    for (bool first = true;; first = false) {
        ctl_msg m;
        int got = first ? ctl_recv_first(c, connect_timeout_s, &m, err, errlen) : ctl_recv(c, 1000, &m, err, errlen);
        *retry = got < 0 && !ctl_master_answered(c);
        if (got < 0)
            return -1;
        if (got == 0)
            continue; /* after `registered`: the master bounds the wait (its join timeout) */
        if (strcmp(m.type, "clock") == 0) {
            /* Answered at once, as on the loop (link_on_message). */
            json_t *ack = link_clock_ack(&m);
            ctl_msg_clear(&m);
            rc = ack ? ctl_send(c, "clock_ack", NULL, ack, err, errlen) : 0;
            json_decref(ack);
            if (rc < 0)
                return -1;
            continue;
        }
        if (fail_reason && (strcmp(m.type, "registered") == 0 || strcmp(m.type, "assign") == 0)) {
            /* Joined only to say why this server cannot serve. */
            ctl_msg_clear(&m);
            master_link_report_failure(c, fail_reason, err, errlen);
            return -1;
        }
        if (strcmp(m.type, "stop") == 0) {
            /* Refused (a wrong token, no slot), or the run failed before
             * the assignment (tables too big for their hosts). */
            char why[512];
            ctl_text(m.body, "reason", "?", why, sizeof why); /* the master's words: escaped */
            /* "retry" (extension): no place for this server now, perhaps
             * in a later job (docs/protocol.md). */
            *retry = json_is_true(json_object_get(m.body, "retry"));
            if (fail_reason) /* refused or not, the cause here is this server's own */
                snprintf(err, errlen, "%s", fail_reason);
            else if (strcmp(ctl_str(m.body, "status", "refused"), "refused") == 0)
                snprintf(err, errlen, "the master refused this server: %s", why);
            else
                snprintf(err, errlen, "the run failed: %s", why);
            ctl_msg_clear(&m);
            return -1;
        }
        if (strcmp(m.type, "assign") != 0) {
            ctl_msg_clear(&m);
            continue;
        }
        int64_t rank = ctl_int(m.body, "rank", -1), trainers = ctl_int(m.body, "trainers", 0);
        const char *kind_str = ctl_str(m.body, "kind", "average");
        /* Missing is said as missing, a value out of range with the value. */
        const char *bad = !json_is_integer(json_object_get(m.body, "rank"))       ? "no rank (a whole number)"
                          : !json_is_integer(json_object_get(m.body, "trainers")) ? "no trainer count"
                          : rank < 0 || rank > UINT32_MAX                          ? "a rank outside 0..2^32-1"
                          : trainers < 1 || trainers > 65536                       ? "a trainer count outside 1..65536"
                                                                                   : NULL;
        if (bad) {
            snprintf(err, errlen, "the master sent a bad assignment: %s", bad);
            ctl_msg_clear(&m);
            return -1;
        }
        cfg->rank = (uint32_t)rank;
        cfg->trainers = (uint32_t)trainers;
        cfg->master_timeout_s = ctl_num(m.body, "rpc_timeout", 30);
        if (kind_parse(kind_str, &cfg->kind.id) < 0) {
            snprintf(err, errlen, "the master asked for server kind '%s', which this build does not have",
                     kind_str);
            ctl_msg_clear(&m);
            return -1;
        }
        int kind_rc = cfg->kind.id == KIND_BATCH_UPDATE ? master_link_batch_update(m.body, &cfg->kind.bu, err, errlen)
                      : cfg->kind.id == KIND_EMBEDDING ? master_link_embedding(m.body, &cfg->kind.emb, err, errlen)
                                                       : 0;
        if (kind_rc == 0)
            kind_rc = master_link_bounds(m.body, cfg, err, errlen);
        /* The trace (issue 42): the assignment's `trace` with this
         * server's own flags. */
        char why[256];
        if (kind_rc == 0 &&
            (kind_rc = tracejob_conf(m.body, &cfg->trace_flags, TRACE_SERVER, cfg->rank, &cfg->trace, why,
                                     sizeof why)) < 0)
            snprintf(err, errlen, "%s", why);
        ctl_msg_clear(&m);
        return kind_rc;
    }
}

static void link_send(struct master_link *l, const char *type, json_t *body)
{
    uint8_t *buf;
    size_t len;
    if (ctl_encode(type, NULL, body, &buf, &len) == 0) {
        bufferevent_write(l->bev, buf, len);
        free(buf);
    }
    json_decref(body);
}

/* tracejob's send: one `trace` message on the link (its body taken). */
static int link_send_trace(void *ctx, json_t *body, char *err, size_t errlen)
{
    struct master_link *l = ctx;
    uint8_t *buf;
    size_t len;
    int rc = ctl_encode("trace", NULL, body, &buf, &len);
    json_decref(body);
    if (rc < 0) {
        snprintf(err, errlen, "a trace message could not be encoded");
        return -1;
    }
    rc = bufferevent_write(l->bev, buf, len);
    free(buf);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory for a trace message of %zu bytes", len);
        return -1;
    }
    return 0;
}

static void link_report(struct master_link *l)
{
    server *s = l->s;
    /* rows_touched: index positions the embedding kind's updates applied
     * since the server started (0 for the other kinds), a counter like
     * bytes_in. */
    json_t *body = json_pack("{s:o, s:I, s:I, s:I}", "samples", ctl_take_samples(s->metrics), "bytes_in",
                             (json_int_t)s->bytes_in, "bytes_out", (json_int_t)s->bytes_out, "rows_touched",
                             (json_int_t)s->kind->rows_touched);
    /* The embedding kind's traffic by message type since the last reset
     * (the pass's): frames, bytes on the wire, payload bytes. */
    if (body && s->kind->cfg.id == KIND_EMBEDDING) {
        json_t *calls = json_object();
        for (int t = 0; calls && t < CALLS_TYPES; t++)
            json_object_set_new(calls, server_calls_names[t],
                                json_pack("{s:I, s:I, s:I}", "frames", (json_int_t)s->calls[t].frames, "bytes",
                                          (json_int_t)s->calls[t].bytes, "payload_bytes",
                                          (json_int_t)s->calls[t].payload));
        if (calls)
            json_object_set_new(body, "calls", calls);
    }
    /* While the kind fills its table: how far it has got (the master's
     * status shows it, and its deadlines wait while it moves). */
    if (body && !kind_ready(s->kind))
        json_object_set_new(body, "initialising",
                            json_pack("{s:I, s:I}", "done_bytes",
                                      (json_int_t)(s->kind->fill_total - s->kind->fill_left), "total_bytes",
                                      (json_int_t)s->kind->fill_total));
    /* This host's CPU and this process's own (issue 38: the master
     * measures each host's state over the timed pass from them). */
    hostinfo_sample hs;
    hostinfo_sample_take(&hs);
    json_t *host = body ? hostinfo_sample_json(&hs) : NULL;
    if (host)
        json_object_set_new(body, "host", host);
    link_send(l, "metrics", body);
    /* The spans since the last report, at the reports' cadence (one
     * snapshot and its JSON: a short pause of the reactor). */
    strace_ship(&s->trace, false, link_send_trace, l);
}

/* The kind is ready (the reactor's fill is done, or there was nothing to
 * fill): the first time `ready`, after a reset its `reset_done`. */
static void link_kind_ready(server *s)
{
    struct master_link *l = s->link;
    if (!l)
        return;
    link_report(l);
    if (!l->ready_sent) {
        l->ready_sent = true;
        link_send(l, "ready", json_object());
    } else if (l->reset_wait) {
        l->reset_wait = false;
        link_send(l, "reset_done", json_object());
    }
}

/* After server_reset: answer now, or once the fresh table is filled. */
static void link_reset_answer(struct master_link *l)
{
    link_report(l);
    if (kind_ready(l->s->kind))
        link_send(l, "reset_done", json_object());
    else
        l->reset_wait = true;
}

/* A trainer was refused for want of a descriptor: the run cannot go on
 * as configured; the master fails it naming this server. */
static void link_out_of_fds(server *s, const char *why)
{
    struct master_link *l = s->link;
    if (!l || l->failed_sent)
        return;
    l->failed_sent = true;
    link_send(l, "failed", json_pack("{s:s}", "reason", why));
}

static void link_on_tick(evutil_socket_t fd, short what, void *arg)
{
    link_report(arg);
}

static void link_stop(server *s, int code, const char *why)
{
    s->exit_code = code;
    if (why)
        snprintf(s->exit_reason, sizeof s->exit_reason, "%s", why);
    event_base_loopbreak(s->base);
}

/* The reset between runs, once no trainer of the last run is connected:
 * clear everything (a fresh model or table), answer reset_done. */
static void link_on_new_run(evutil_socket_t fd, short what, void *arg)
{
    struct master_link *l = arg;
    if (!l->new_run_wait || members_any_connected(&l->s->members))
        return;
    l->new_run_wait = false;
    server_reset(l->s);
    /* The run's whole trace, before reset_done; the next run's starts
     * empty, untraced until its timed pass. */
    strace_ship(&l->s->trace, true, link_send_trace, l);
    strace_new_run(&l->s->trace);
    link_reset_answer(l);
}

static void link_trainers_left(server *s)
{
    struct master_link *l = s->link;
    if (l && l->new_run_wait)
        event_active(l->new_run_ev, EV_TIMEOUT, 0); /* from the loop, not inside a connection's close */
}

static void link_on_message(struct master_link *l, ctl_msg *m)
{
    server *s = l->s;
    if (strcmp(m->type, "clock") == 0) {
        /* The master's clock rounds (issue 42): answered at once, on the
         * loop that reads the link. */
        json_t *ack = link_clock_ack(m);
        if (ack)
            link_send(l, "clock_ack", ack);
        else
            log_debug("ignoring a clock without seq and t0");
    } else if (strcmp(m->type, "reset") == 0 && json_is_true(json_object_get(m->body, "new_run"))) {
        /* Between runs (--runs): this run's samples go now; the rest once
         * its trainers have left (they may still be closing). */
        link_report(l);
        l->new_run_wait = true;
        event_active(l->new_run_ev, EV_TIMEOUT, 0);
    } else if (strcmp(m->type, "reset") == 0) {
        /* After the warm-up (the one reset in a run that is not new_run):
         * the timed pass begins, and with it the trace. */
        server_reset(s);
        strace_timed(&s->trace);
        link_reset_answer(l); /* its report flushes what is left (nothing: metrics were reset) */
    } else if (strcmp(m->type, "stop") == 0) {
        const char *st = ctl_str(m->body, "status", "failed");
        l->stopped = true;
        if (strcmp(st, "done") == 0) {
            link_stop(s, 0, NULL);
        } else {
            /* The master's verdict names the node at fault: it becomes
             * this server's last line. */
            char why[600], reason[512];
            snprintf(why, sizeof why, "the run failed: %s",
                     ctl_text(m->body, "reason", "no reason given", reason, sizeof reason));
            link_stop(s, 1, why);
        }
    } else {
        log_debug("ignoring control message '%s'", m->type);
    }
}

/* ctl_read_stream's view of the input evbuffer. */
static const uint8_t *link_pullup(void *in, size_t n)
{
    return evbuffer_pullup(in, (ev_ssize_t)n);
}

static void link_on_read(struct bufferevent *bev, void *arg)
{
    struct master_link *l = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        ctl_msg m;
        size_t used;
        frame_status st = ctl_read_stream(&l->dec, evbuffer_get_length(in), link_pullup, in, &m, &used);
        if (st == FRAME_NEED_MORE)
            return;
        if (st != FRAME_OK) {
            link_stop(l->s, 1, "the master sent a malformed control message");
            return;
        }
        evbuffer_drain(in, used);
        link_on_message(l, &m);
        ctl_msg_clear(&m);
    }
}

static void link_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct master_link *l = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        char why[400];
        snprintf(why, sizeof why, "lost the master %s: %s", l->peer,
                 (what & BEV_EVENT_EOF) ? "it closed the connection" : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        link_stop(l->s, 1, why);
    }
}

int master_link_attach(server *s, ctl_conn *c, char *err, size_t errlen)
{
    struct master_link *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    l->s = s;
    snprintf(l->peer, sizeof l->peer, "%s", c->peer);
    frame_decoder_init(&l->dec, CTL_MAX_BODY);
    net_set_nonblock(c->fd, 1);
    /* Reports go out twice a second: if the master's host or our link goes
     * down they stay unacknowledged, and past the run's --rpc-timeout the
     * connection fails (link_on_event), so a cut-off server ends. */
    if (s->cfg.master_timeout_s > 0)
        net_set_user_timeout(c->fd, s->cfg.master_timeout_s);
    l->bev = bufferevent_socket_new(s->base, c->fd, BEV_OPT_CLOSE_ON_FREE);
    l->tick = event_new(s->base, -1, EV_PERSIST, link_on_tick, l);
    l->new_run_ev = event_new(s->base, -1, 0, link_on_new_run, l);
    struct timeval half = {0, 500000};
    if (!l->bev || !l->tick || !l->new_run_ev || event_add(l->tick, &half) < 0) {
        snprintf(err, errlen, "cannot attach the master connection");
        return -1;
    }
    c->fd = -1; /* the bufferevent owns it now */
    bufferevent_setcb(l->bev, link_on_read, NULL, link_on_event, l);
    bufferevent_enable(l->bev, EV_READ | EV_WRITE);
    s->link = l;
    s->trainers_left = link_trainers_left;
    s->kind_ready = link_kind_ready;
    s->out_of_fds = link_out_of_fds;
    metrics_enable_reporting(s->metrics);
    /* Ready now, or once the reactor has filled the kind's table. */
    if (kind_ready(s->kind))
        link_kind_ready(s);
    /* Bytes already read during the join (a `stop` right behind the
     * assignment, say) belong to the next messages. A socket bufferevent
     * keeps the end of its input frozen (only it adds there): thaw it for
     * this one addition. Nothing will announce those bytes, so run the
     * read callback once from the loop. */
    if (c->len) {
        struct evbuffer *in = bufferevent_get_input(l->bev);
        evbuffer_unfreeze(in, 0);
        int added = evbuffer_add(in, c->buf, c->len);
        evbuffer_freeze(in, 0);
        if (added < 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        bufferevent_trigger(l->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
    }
    return 0;
}

void master_link_free(server *s)
{
    struct master_link *l = s->link;
    if (!l)
        return;
    /* A last report, so the master's tables hold every sample: written
     * here and now (the reactor has stopped), blocking, best effort. With
     * them, after a `stop`, the trace's final part. */
    link_report(l);
    if (l->stopped)
        strace_ship(&s->trace, true, link_send_trace, l);
    evutil_socket_t fd = bufferevent_getfd(l->bev);
    struct evbuffer *out = bufferevent_get_output(l->bev);
    net_set_nonblock(fd, 0);
    /* A bufferevent keeps the start of its output frozen for its own
     * writer; we are the writer now. */
    evbuffer_unfreeze(out, 1);
    while (evbuffer_get_length(out) > 0 && evbuffer_write(out, fd) > 0)
        ;
    event_free(l->tick);
    event_free(l->new_run_ev);
    bufferevent_free(l->bev);
    frame_decoder_free(&l->dec);
    free(l);
    s->link = NULL;
}
