/* conn.c — one trainer connection's life and output: opened (conn_open,
 * for conn_dispatch.c's conn_new), held, closed and freed; the frames the
 * server sends, queued and written; and the services every handler uses
 * (conn_int.h): errors, the output cap, discarding a payload. It is the
 * bottom of the connection's files and calls none of them: above it are
 * the handlers (the hello in conn_hello.c, pushes in conn_push.c, results
 * and `fetch` in conn_result.c, lookups and updates in conn_call.c) and
 * the transports (xport*.c: conn.c reaches them only through their ops in
 * the registry, for the link a connection is opened on and to release
 * what each holds for it), and on top the reader and dispatch
 * (conn_dispatch.c), which hands conn_open its read callback.
 *
 * Writing: every frame the server sends is appended to c->out (an outq:
 * header bytes, payload by reference). A connection with output goes on the
 * server's flush list and asks for the reactor's end-of-iteration pass
 * (loopend_want), which calls conn_flush once per connection: the results
 * of many buckets, and of every trainer's input of this loop iteration,
 * leave in one writev. A closed connection goes on the graveyard list the
 * same way and is freed by that pass (conn_free), once no callback of the
 * iteration can hold it. Closing forgets what was being received: the push
 * (its future fails, in the futures layer) and the call (freed), and tells
 * the calls in flight that nobody waits for them.
 *
 * Errors follow the protocol table: bad_frame, auth and too_large are sent
 * and then the connection closes; every other error discards that frame's
 * payload and keeps the connection.
 */
#include "server/conn_int.h"
#include "server/members.h"
#include "server/server.h"
#include "server/xport.h"
#include "shared/text.h"
#include "shared/log.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void conn_on_write(evutil_socket_t fd, short what, void *arg);
static int conn_flush_out(conn *c);
static void conn_on_hello_timeout(evutil_socket_t fd, short what, void *arg);

/* Write c's output in the reactor's pass at the end of this iteration. */
void conn_want_flush(conn *c)
{
    server *s = c->srv;
    if (c->in_flush)
        return;
    c->in_flush = true;
    c->flush_next = s->flush_head;
    s->flush_head = c;
    loopend_want(&s->pass);
}

/* c was closed: off the live and flush lists, onto the graveyard, freed by
 * the reactor's pass. */
static void conn_bury(conn *c)
{
    server *s = c->srv;
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
    if (!c->hello_done) {
        assert(s->nwaiting > 0);
        s->nwaiting--;
    }
    c->prev = NULL;
    c->next = s->graveyard;
    s->graveyard = c;
    loopend_want(&s->pass);
}

/* Start reading, and the hello deadline if there was no hello yet. */
static int conn_arm(conn *c)
{
    double ht = c->srv->cfg.hello_timeout_s;
    struct timeval htv = {(time_t)ht, (suseconds_t)((ht - (double)(time_t)ht) * 1e6)};
    if (event_add(c->rev, NULL) < 0)
        return -1;
    return c->hello_done ? 0 : evtimer_add(c->hello_ev, &htv);
}

void conn_hold(conn *c, bool hold)
{
    if (c->fd < 0 || c->closing)
        return; /* closed, or reading no more anyway */
    if (hold) {
        event_del(c->rev);
        evtimer_del(c->hello_ev);
    } else if (c->calls_held) {
        /* still not read: its calls in flight release it (conn_calls_untrack) */
    } else if (conn_arm(c) < 0) {
        conn_close(c, "cannot watch the connection");
    } else if (c->calls_resume) {
        event_active(c->rev, EV_READ, 0);
    }
}

/* outq's `written`: an answer's last byte went into the socket (read in
 * place: its header), and with it its answer_out. */
static void conn_trace_written(void *ctx, outq_item *it)
{
    conn *c = ctx;
    strace *t = &c->srv->trace;
    strace_mark m = {it->trace_t0_ns, it->trace_nvtx};
    strace_end(t, &m, TRACE_ANSWER_OUT, t->lane_reactor, it->trace_batch, it->trace_bucket, c->rank);
}

void conn_trace_queued(conn *c, uint64_t batch, uint64_t bucket)
{
    strace_mark m = strace_begin(&c->srv->trace, TRACE_ANSWER_OUT, batch, bucket, c->rank);
    if (m.t0_ns)
        outq_trace_last(&c->out, m.t0_ns, m.nvtx, batch, bucket);
}

/* A push's or call's spans, begun as its header came, dropped: it was
 * refused or cut off, and records nothing (docs/results.md). */
void conn_trace_forget(conn *c)
{
    strace_drop(&c->tr_recv);
    strace_drop(&c->tr_fold);
}

conn *conn_open(server *s, int fd, bool shm, event_callback_fn on_read)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->srv = s;
    c->fd = fd;
    c->shm.seg = SHM_SEG_NONE;
    c->rx_fd = -1;
    c->slot = MEMBERS_NO_SLOT;
    c->link = shm ? &xport_shm : &xport_tcp;
    c->link->peer_name(fd, c->peer, sizeof c->peer);
    int rd_ok = framed_init(&c->rd, CONN_IBUF_SIZE, s->cfg.max_payload, 4);
    outq_init(&c->out);
    if (s->trace.ring) {
        c->out.written = conn_trace_written;
        c->out.written_ctx = c;
    }
    c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_read, c);
    c->wev = event_new(s->base, fd, EV_WRITE | EV_PERSIST, conn_on_write, c);
    c->hello_ev = evtimer_new(s->base, conn_on_hello_timeout, c);
    if (rd_ok < 0 || !c->rev || !c->wev || !c->hello_ev || (!s->filling && conn_arm(c) < 0)) {
        if (c->rev)
            event_free(c->rev);
        if (c->wev)
            event_free(c->wev);
        if (c->hello_ev)
            event_free(c->hello_ev);
        framed_free(&c->rd);
        free(c);
        close(fd);
        return NULL;
    }
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    s->nwaiting++;
    log_debug("connection from %s", c->peer);
    return c;
}

/* ---- output ------------------------------------------------------------ */

/* A peer that stops reading what we send (results, or the error frames its
 * bad frames earn) would make us hold all of it: past --max-queued bytes it
 * is dropped. One frame may overshoot the cap, so any single result fits.
 * Returns true when c was dropped. */
bool conn_over_cap(conn *c, const char *what)
{
    if (c->out.bytes <= c->srv->cfg.max_queued)
        return false;
    log_warn("dropping %s (rank %" PRIu64 "): more than %" PRIu64 " bytes of %s queued and not read", c->peer,
             c->rank, c->srv->cfg.max_queued, what);
    c->closing = true;
    event_del(c->rev);
    conn_want_flush(c);
    return true;
}

static bool conn_code_is_fatal(frame_errcode code)
{
    return code == ERR_BAD_FRAME || code == ERR_AUTH || code == ERR_TOO_LARGE;
}

/* Queue an error frame. `fatal` codes close the connection after it is
 * written. */
void conn_send_error(conn *c, frame_errcode code, const char *msg, const frame_hdr *about)
{
    frame_hdr h = {0};
    h.type = FT_ERROR;
    h.code = frame_str_c(frame_errcode_name(code));
    h.message = frame_str_c(msg);
    h.has = FH_CODE | FH_MESSAGE;
    if (about && (about->has & FH_BATCH)) {
        h.batch = about->batch;
        h.has |= FH_BATCH;
    }
    if (about && (about->has & FH_BUCKET)) {
        h.bucket = about->bucket;
        h.has |= FH_BUCKET;
    }
    uint8_t buf[FRAME_PREFIX_LEN + 1024 + 256];
    size_t n = frame_encode_header(&h, buf, sizeof buf);
    assert(n > 0);
    char shown[2048]; /* msg may quote the trainer's strings (dtype, layout, type): escaped for the log */
    text_escape(msg, shown, sizeof shown);
    log_debug("%s: error %s: %s", c->peer, frame_errcode_name(code), shown);
    if (c->closing || conn_over_cap(c, "error frames"))
        return;
    outq_push(&c->out, buf, n, NULL, 0);
    if (conn_code_is_fatal(code)) {
        c->closing = true;
        event_del(c->rev);
        log_warn("closing %s: %s: %s", c->peer, frame_errcode_name(code), shown);
    }
    conn_want_flush(c);
}

/* Count the result bytes that left, and say why zero-copy stopped for a
 * connection if it did (a warning the first time, then debug lines: with
 * hundreds of trainers one reason is enough). */
static void conn_account_output(conn *c, uint64_t spliced0, uint64_t copied0)
{
    server *s = c->srv;
    s->bytes_spliced += c->out.spliced - spliced0;
    s->bytes_copied += c->out.copied - copied0;
    if (c->out.splice_errno) {
        int e = c->out.splice_errno;
        const char *why = e == ENOBUFS ? "no pipe of useful size: the user's pipe budget "
                                         "(fs.pipe-user-pages-soft) is spent"
                                       : strerror(e);
        if (!s->splice_warned)
            log_warn("%s: results are copied from now on: splicing them failed: %s (said once; "
                     "other connections that fall back say so at --log-level debug)",
                     c->peer, why);
        else
            log_debug("%s: results are copied from now on: splicing them failed: %s", c->peer, why);
        s->splice_warned = true;
        c->out.splice_errno = 0;
    }
}

int conn_flush(conn *c)
{
    uint64_t spliced0 = c->out.spliced, copied0 = c->out.copied;
    int rc = conn_flush_out(c);
    /* c stays allocated until the reactor's pass frees it, even when it
     * was closed */
    conn_account_output(c, spliced0, copied0);
    return rc;
}

static int conn_flush_out(conn *c)
{
    while (c->out.len > 0) {
        ssize_t n = outq_write(&c->out, c->fd);
        if (n > 0) {
            c->srv->bytes_out += (uint64_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* The peer is slow: finish on EV_WRITE. A closing connection
             * gets a deadline so that a peer that never reads cannot pin
             * it. */
            struct timeval tv = {2, 0};
            event_add(c->wev, c->closing ? &tv : NULL);
            return 0;
        }
        if (n < 0 && errno == EINTR)
            continue;
        conn_close(c, n == 0 ? "closed by peer" : strerror(errno));
        return -1;
    }
    event_del(c->wev);
    if (c->closing) {
        conn_close(c, "closed after error");
        return -1;
    }
    return 0;
}

/* Every connection costs a descriptor and an input buffer: one that does
 * not become a trainer in time (silent, or failing its hellos) goes. */
static void conn_on_hello_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn *c = arg;
    server *s = c->srv;
    if (c->fd >= 0 && !c->hello_done && !c->closing) {
        char msg[96];
        snprintf(msg, sizeof msg, "no hello within %g s", s->cfg.hello_timeout_s);
        conn_send_error(c, ERR_BAD_FRAME, msg, NULL); /* fatal: closes once written */
    }
}

static void conn_on_write(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    /* Closing may fail futures and queue peer_lost to others: the pass
     * writes that. */
    if (what & EV_TIMEOUT)
        conn_close(c, "peer did not read the error frame in time");
    else
        conn_flush(c);
}

/* ---- what is received --------------------------------------------------- */

/* The frame's payload, if any, is discarded: the reader follows it to its
 * end, and its chunks go nowhere. */
void conn_skip_payload(conn *c)
{
    c->sink = SINK_DISCARD;
}

void conn_call_free(kind_call *kc)
{
    if (kc->payload)
        psbuf_unref(kc->payload);
    if (kc->answer)
        psbuf_unref(kc->answer);
    free(kc);
}

/* ---- close ------------------------------------------------------------- */

void conn_close(conn *c, const char *why)
{
    server *s = c->srv;
    if (c->fd < 0)
        return; /* already closed, waiting to be reaped */
    if (c->hello_done)
        log_info("trainer rank %" PRIu64 " (%s) disconnected: %s", c->rank, c->peer, why);
    else
        log_debug("%s disconnected: %s", c->peer, why);
    event_del(c->rev);
    event_del(c->wev);
    evtimer_del(c->hello_ev);
    close(c->fd);
    c->fd = -1;
    for (size_t i = 0; i < xport_count; i++)
        if (xport_all[i]->close)
            xport_all[i]->close(c);
    if (c->push.f) {
        /* Part of this push may already be summed into the accumulator:
         * the future cannot be trusted any more. */
        futures_push_lost(&s->fut, &c->push);
    }
    conn_trace_forget(c);
    if (c->call) { /* cut off mid-payload: never handed to the kind */
        conn_call_free(c->call);
        c->call = NULL;
    }
    /* Calls in flight still complete (the table changes as the trainer
     * asked), but nobody hears of it: before anything below may drain
     * the device and run their `done`. */
    for (kind_call *kc = c->calls_head; kc; kc = kc->next)
        kc->owner = NULL;
    c->calls_head = c->calls_tail = NULL;
    c->ncalls = 0;
    c->calls_bytes = 0;
    c->calls_held = false;
    c->sink = SINK_DISCARD;
    if (c->hello_done)
        members_lost(&s->members, c->slot, c);
    conn_bury(c);
}

/* ---- free ---------------------------------------------------------------- */

void conn_free(conn *c)
{
    assert(c->fd < 0 && !c->call && !c->calls_head);
    event_free(c->rev);
    event_free(c->wev);
    event_free(c->hello_ev);
    outq_free(&c->out); /* drops the references to shared results */
    for (size_t i = xport_count; i-- > 0;) /* what each transport holds for c */
        if (xport_all[i]->free)
            xport_all[i]->free(c);
    push_ctx_free(&c->push);
    framed_free(&c->rd);
    free(c);
}
