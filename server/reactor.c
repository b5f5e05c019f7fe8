/* reactor.c — the server's event loop and the glue between its parts.
 *
 * One thread, one libevent event_base: the listening socket, every trainer
 * connection, SIGINT/SIGTERM. The loop's shape per readiness event is:
 *
 *     read what the socket has → parse frames → stream payloads into the
 *     backend → resolve complete futures (queue results) → flush output
 *
 * so that everything a round of input produces leaves in one write per
 * connection. This file also owns the trainer slots ("members") and the
 * fate of futures: resolved (results to every waiter) or failed (peer_lost
 * to every waiter).
 */
#include "server/server.h"
#include "server/backend.h"
#include "server/conn.h"
#include "shared/log.h"
#include "shared/net.h"

#include <assert.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- connections ------------------------------------------------------- */

void server_want_flush(server *s, conn *c)
{
    if (c->in_flush)
        return;
    c->in_flush = true;
    c->flush_next = s->flush_head;
    s->flush_head = c;
}

void server_flush(server *s)
{
    while (s->flush_head) {
        conn *c = s->flush_head;
        s->flush_head = c->flush_next;
        c->in_flush = false;
        c->flush_next = NULL;
        if (c->fd >= 0)
            conn_flush(c);
    }
}

void server_unlink_conn(server *s, conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->in_flush) {
        conn **pp = &s->flush_head;
        while (*pp != c)
            pp = &(*pp)->flush_next;
        *pp = c->flush_next;
        c->in_flush = false;
    }
    assert(s->nconns > 0);
    s->nconns--;
    c->prev = NULL;
    c->next = s->graveyard;
    s->graveyard = c;
}

void server_reap(server *s)
{
    while (s->graveyard) {
        conn *c = s->graveyard;
        s->graveyard = c->next;
        conn_free(c);
    }
}

static void server_on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server *s = arg;
    event_add(s->listen_ev, NULL);
}

static void server_on_accept(evutil_socket_t fd, short what, void *arg)
{
    server *s = arg;
    for (int i = 0; i < 64; i++) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The waiting connection stays in the backlog and the
                 * listener stays readable: without a pause this would spin.
                 * Try again in a second; connections that close meanwhile
                 * give descriptors back. */
                log_warn("accept: %s: not accepting for 1 s (%u connections open)", strerror(errno),
                         s->nconns);
                struct timeval tv = {1, 0};
                event_del(s->listen_ev);
                evtimer_add(s->accept_pause_ev, &tv);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
                log_warn("accept: %s", strerror(errno));
            }
            break;
        }
        net_set_nodelay(cfd);
        if (!conn_new(s, cfd))
            log_warn("out of memory: refused a connection");
    }
}

/* ---- members ----------------------------------------------------------- */

uint32_t server_member_join(server *s, conn *c, uint64_t rank, char *msg, size_t len)
{
    for (uint32_t i = 0; i < s->nmembers; i++) {
        member *m = &s->members[i];
        if (m->rank != rank)
            continue;
        if (m->conn) {
            snprintf(msg, len, "trainer rank %" PRIu64 " is already connected from %s", rank,
                     m->conn->peer);
            return CONN_NO_SLOT;
        }
        m->conn = c;
        m->lost = false;
        return i;
    }
    if (s->nmembers == s->cfg.trainers) {
        snprintf(msg, len, "this server expects %u trainers and all of them are taken", s->cfg.trainers);
        return CONN_NO_SLOT;
    }
    member *m = &s->members[s->nmembers];
    m->rank = rank;
    m->conn = c;
    m->lost = false;
    return s->nmembers++;
}

const char *server_lost_member(server *s, char *msg, size_t len)
{
    for (uint32_t i = 0; i < s->nmembers; i++)
        if (s->members[i].lost) {
            snprintf(msg, len, "trainer rank %" PRIu64 " disconnected; no bucket can complete",
                     s->members[i].rank);
            return msg;
        }
    return NULL;
}

/* pending_destroy's callback: the same release as a finished future. */
static void server_free_entry(pending_entry *e, void *arg)
{
    server_entry_release(arg, e);
}

void server_reset(server *s)
{
    for (conn *c = s->conns; c; c = c->next) {
        conn_push_detach(c);
        /* A pass ends when every trainer has read all its results. */
        outq_return_all(&c->out);
    }
    pending_destroy(&s->pending, server_free_entry, s);
    pending_init(&s->pending, s->cfg.trainers);
    metrics_reset(s->metrics);
    log_info("reset: futures and metrics cleared");
}

/* When every trainer has left and nothing is pending, the job is over: the
 * next trainers to connect start a new one at batch 0. */
static void server_maybe_new_session(server *s)
{
    for (uint32_t i = 0; i < s->nmembers; i++)
        if (s->members[i].conn)
            return;
    for (conn *c = s->conns; c; c = c->next)
        if (c->fd >= 0 && c->hello_done)
            return;
    /* What is left are failed futures (tombstones) of the old job. */
    pending_destroy(&s->pending, server_free_entry, s);
    pending_init(&s->pending, s->cfg.trainers);
    s->nmembers = 0;
    log_info("all trainers left: ready for a new job");
}

typedef struct lost_ctx {
    server *s;
    uint32_t slot;
    char msg[160];
    pending_entry **victims;
    size_t n, cap;
} lost_ctx;

static void server_collect_lost(pending_entry *e, void *arg)
{
    lost_ctx *lc = arg;
    if (e->failed || e->resolving || pending_has_slot(e, lc->slot))
        return;
    if (lc->n == lc->cap) {
        size_t cap = lc->cap ? lc->cap * 2 : 16;
        pending_entry **v = realloc(lc->victims, cap * sizeof *v);
        if (!v)
            return;
        lc->victims = v;
        lc->cap = cap;
    }
    lc->victims[lc->n++] = e;
}

void server_member_lost(server *s, uint32_t slot, conn *c)
{
    assert(slot < s->nmembers && s->members[slot].conn == c);
    member *m = &s->members[slot];
    m->conn = NULL;
    m->lost = true;
    /* Futures this trainer never pushed to can never complete: tell the
     * trainers waiting on them now, rather than let them time out. */
    lost_ctx lc = {.s = s, .slot = slot};
    snprintf(lc.msg, sizeof lc.msg, "trainer rank %" PRIu64 " disconnected before pushing", m->rank);
    pending_foreach(&s->pending, server_collect_lost, &lc);
    for (size_t i = 0; i < lc.n; i++)
        server_entry_fail(s, lc.victims[i], lc.msg);
    free(lc.victims);
    server_maybe_new_session(s);
}

/* ---- futures ----------------------------------------------------------- */

void server_entry_release(server *s, pending_entry *e)
{
    s->be->ops->release(s->be, e);
}

void server_entry_fail(server *s, pending_entry *e, const char *why)
{
    assert(!e->failed);
    e->failed = true;
    log_warn("batch %" PRIu64 " bucket %" PRIu64 " failed: %s", e->batch, e->bucket, why);
    /* Stop connections still streaming into it before its buffers go. */
    for (conn *c = s->conns; c; c = c->next)
        if (c->sink == SINK_PUSH && c->push.e == e)
            conn_push_detach(c);
    server_entry_release(s, e);
    frame_hdr about = {0};
    about.batch = e->batch;
    about.bucket = e->bucket;
    about.has = FH_BATCH | FH_BUCKET;
    char msg[256];
    snprintf(msg, sizeof msg, "batch %" PRIu64 " bucket %" PRIu64 " cannot complete: %s", e->batch,
             e->bucket, why);
    for (uint32_t i = 0; i < s->nmembers; i++) {
        conn *c = s->members[i].conn;
        if (c && pending_has_slot(e, i))
            conn_send_error(c, ERR_PEER_LOST, msg, &about);
    }
    /* The entry stays as a tombstone so that late pushes to it are told
     * peer_lost too; it goes with the session. */
}

void server_push_completed(server *s, pending_entry *e)
{
    if (e->completed < s->cfg.trainers)
        return;
    assert(e->completed == s->cfg.trainers && e->started == s->cfg.trainers);
    e->t_last_ns = clock_now_ns();
    metrics_add(s->m_straggler, (double)(e->t_last_ns - e->t_first_ns) / 1e6);
    e->resolving = true;
    s->be->ops->resolve(s->be, e);
}

void server_entry_resolved(server *s, pending_entry *e, psbuf *result)
{
    frame_hdr h = {0};
    h.type = FT_RESULT;
    h.batch = e->batch;
    h.bucket = e->bucket;
    h.dtype = frame_str_c("f32");
    h.layout = e->layout;
    h.layout_str = frame_str_c(e->layout == LAYOUT_DENSE ? "dense" : "sparse");
    h.payload = result->len;
    h.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_PAYLOAD;
    if (e->layout == LAYOUT_DENSE) {
        h.count = e->count;
        h.has |= FH_COUNT;
    } else {
        h.rows = e->rows;
        h.cols = e->cols;
        h.nnz = result->len / (8 + 4 * e->cols);
        h.has |= FH_ROWS | FH_COLS | FH_NNZ;
    }
    /* One header for all waiters; the payload is shared by reference. */
    uint8_t buf[256];
    size_t n = frame_encode_header(&h, buf, sizeof buf);
    assert(n > 0);
    for (uint32_t i = 0; i < s->nmembers; i++) {
        conn *c = s->members[i].conn;
        if (c && pending_has_slot(e, i) && conn_queue_result(c, buf, n, result, e->batch) == 0)
            s->results++;
    }
    metrics_add(s->m_batch, (double)(clock_now_ns() - e->t_first_ns) / 1e6);
    server_entry_release(s, e);
    pending_remove(&s->pending, e, true);
    pending_recycle(&s->pending, e);
}

/* ---- lifecycle --------------------------------------------------------- */

static void server_on_signal(evutil_socket_t sig, short what, void *arg)
{
    server *s = arg;
    log_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    event_base_loopbreak(s->base);
}

int server_init(server *s, const server_config *cfg, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (!(s->cfg.hello_timeout_s > 0))
        s->cfg.hello_timeout_s = 30; /* a config that left it out */
    s->listen_fd = -1;
    frame_decoder_init(&s->dec, cfg->max_payload);
    bufpool_init(&s->pool, (size_t)1 << 30);
    s->metrics = metrics_new();
    s->members = calloc(cfg->trainers, sizeof *s->members);
    s->base = event_base_new();
    if (!s->metrics || !s->members || !s->base || pending_init(&s->pending, cfg->trainers) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->be = backend_cpu_new(s);
    if (!s->be) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (cfg->listen_fd >= 0) {
        s->listen_fd = cfg->listen_fd;
        s->bound_port = cfg->port;
    } else {
        s->listen_fd = net_listen(cfg->host, cfg->port, 1024, &s->bound_port, err, errlen);
        if (s->listen_fd < 0)
            return -1;
    }
    s->listen_ev = event_new(s->base, s->listen_fd, EV_READ | EV_PERSIST, server_on_accept, s);
    s->accept_pause_ev = evtimer_new(s->base, server_on_accept_resume, s);
    s->sig_ev[0] = evsignal_new(s->base, SIGINT, server_on_signal, s);
    s->sig_ev[1] = evsignal_new(s->base, SIGTERM, server_on_signal, s);
    if (!s->listen_ev || !s->accept_pause_ev || !s->sig_ev[0] || !s->sig_ev[1] || event_add(s->listen_ev, NULL) < 0 ||
        event_add(s->sig_ev[0], NULL) < 0 || event_add(s->sig_ev[1], NULL) < 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return -1;
    }
    /* Pre-create the metrics in the seed's order so the table reads the
     * same whatever happens first. */
    s->m_batch = metrics_get(s->metrics, "parameter_server_batch_metric,param_index_batch");
    s->m_straggler = metrics_get(s->metrics, "parameter_server_straggler_metric,param_index_straggler");
    s->m_average = metrics_get(s->metrics, "method_metric,average computation");
    if (!s->m_batch || !s->m_straggler || !s->m_average) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int server_run(server *s)
{
    signal(SIGPIPE, SIG_IGN);
    int rc = event_base_dispatch(s->base);
    return rc < 0 ? -1 : 0;
}

void server_free(server *s)
{
    while (s->conns)
        conn_close(s->conns, "server shutting down");
    server_reap(s);
    if (s->be) {
        pending_destroy(&s->pending, server_free_entry, s);
        s->be->ops->destroy(s->be);
    }
    for (int i = 0; i < 2; i++)
        if (s->sig_ev[i])
            event_free(s->sig_ev[i]);
    if (s->listen_ev)
        event_free(s->listen_ev);
    if (s->accept_pause_ev)
        event_free(s->accept_pause_ev);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->base)
        event_base_free(s->base);
    bufpool_destroy(&s->pool);
    metrics_free(s->metrics);
    free(s->members);
    frame_decoder_free(&s->dec);
}
