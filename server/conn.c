/* conn.c — one trainer connection: its life, framing and dispatch, reads
 * and writes. The handlers live beside the part of the protocol they serve
 * (conn_int.h): the hello in conn_hello.c, pushes in conn_push.c, results
 * and `fetch` in conn_result.c, lookups and updates in conn_call.c.
 *
 * Reading: bytes land in the buffer of c->rd, the framed reader
 * (shared/framed.h), and are parsed in place; each decoded header goes to
 * the handler of its type (conn_handlers). The reader follows every
 * payload to its end; c->sink says whether its bytes go to a push, a call
 * or are discarded. Once a push's header is admitted by the futures layer,
 * its payload is streamed there as it arrives (never buffered whole); when
 * the input buffer holds no more than a partial float and the push's kind
 * can take raw bytes at a fixed address, the payload is received there
 * directly, skipping one copy.
 *
 * Writing: every frame the server sends is appended to c->out (an outq:
 * header bytes, payload by reference). A connection with output goes on the
 * server's flush list and asks for the reactor's end-of-iteration pass
 * (loopend_want), which calls conn_flush once per connection: the results
 * of many buckets, and of every trainer's input of this loop iteration,
 * leave in one writev. A closed connection goes on the graveyard list the
 * same way and is freed by that pass (conn_free), once no callback of the
 * iteration can hold it.
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
#include <sys/socket.h>
#include <unistd.h>

/* Bound on reads per readiness event, so one busy trainer cannot starve
 * the others on the same reactor. */
#define CONN_READS_PER_EVENT 8
/* Read size while a header is awaited on a connection whose last push was
 * large: enough for any usual header, little payload to copy. */
#define CONN_HEADER_READ 4096u

static void conn_on_read(evutil_socket_t fd, short what, void *arg);
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

conn *conn_new(server *s, int fd, bool shm)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->srv = s;
    c->fd = fd;
    c->shm = shm;
    c->seg = SHM_SEG_NONE;
    c->rx_fd = -1;
    c->slot = MEMBERS_NO_SLOT;
    c->link = shm ? &xport_shm : &xport_tcp;
    c->link->peer_name(fd, c->peer, sizeof c->peer);
    int rd_ok = framed_init(&c->rd, CONN_IBUF_SIZE, s->cfg.max_payload, 4);
    outq_init(&c->out);
    c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, conn_on_read, c);
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

/* ---- input ------------------------------------------------------------- */

/* The frame's payload, if any, is discarded: the reader follows it to its
 * end, and its chunks go nowhere. */
void conn_skip_payload(conn *c)
{
    c->sink = SINK_DISCARD;
}

static void conn_on_other(conn *c, const frame_hdr *h)
{
    if (!c->hello_done) {
        conn_send_error(c, ERR_BAD_FRAME, "first frame must be hello", h);
        return;
    }
    char msg[128];
    snprintf(msg, sizeof msg, "message type '%.*s' is not supported by a server",
             (int)(h->type_str.n > 64 ? 64 : h->type_str.n), h->type_str.p);
    conn_send_error(c, ERR_UNSUPPORTED, msg, h);
    conn_skip_payload(c);
}

/* The handler of each message type a trainer may send. */
static void (*const conn_handlers[])(conn *, const frame_hdr *) = {
    [FT_HELLO] = conn_on_hello,
    [FT_PUSH] = conn_on_push,
    [FT_FETCH] = conn_on_fetch,
    [FT_LOOKUP] = conn_on_call,
    [FT_UPDATE] = conn_on_call,
    [FT_EXPORT] = conn_on_export,
};

/* The fields that say where bytes are or which link to take, and the
 * message types that may carry them (checked in table order, before the
 * handler runs): where they mean something, nowhere else — a frame that
 * names bytes elsewhere would otherwise be read as one without a payload.
 * Every other field is each handler's to check. */
#define CONN_TYPE(t) (1u << (unsigned)(t))
typedef struct conn_field {
    uint32_t field; /* FH_* */
    uint32_t types; /* CONN_TYPE of each message type that may carry it */
    const char *msg; /* bad_frame's message when another type does */
} conn_field;
static const conn_field conn_fields[] = {
    {FH_AT, CONN_TYPE(FT_PUSH), "at (a payload in shared memory) is only for push"},
    {FH_TRANSPORT, CONN_TYPE(FT_HELLO), "transport is only for hello"},
    {FH_SEGMENT, CONN_TYPE(FT_HELLO) | CONN_TYPE(FT_EXPORT), "segment is only for hello and export"},
    {FH_DEV, CONN_TYPE(FT_PUSH), "dev (a payload in GPU memory) is only for push"},
};
_Static_assert(FT_EXPORT < 32, "conn_field.types has a bit per message type");

static void conn_dispatch(conn *c, const frame_hdr *h)
{
    void (*fn)(conn *, const frame_hdr *) = NULL;
    for (size_t i = 0; i < sizeof conn_fields / sizeof conn_fields[0]; i++) {
        const conn_field *r = &conn_fields[i];
        if ((h->has & r->field) && !(r->types & CONN_TYPE(h->type))) {
            conn_send_error(c, ERR_BAD_FRAME, r->msg, h);
            return;
        }
    }
    if (c->rx_fd >= 0 && (h->type != FT_HELLO || c->hello_done)) {
        conn_send_error(c, ERR_BAD_FRAME, "a descriptor came with a frame that takes none", h);
        return;
    }
    if ((size_t)h->type < sizeof conn_handlers / sizeof conn_handlers[0])
        fn = conn_handlers[h->type];
    (fn ? fn : conn_on_other)(c, h);
}

/* Hand payload bytes (at offset off in the payload) to the sink. */
void conn_payload(conn *c, const uint8_t *p, size_t n, uint64_t off)
{
    server *s = c->srv;
    if (c->sink == SINK_CALL) {
        assert(off + n <= c->call->payload->len);
        memcpy(c->call->payload->data + off, p, n);
        return;
    }
    if (c->sink == SINK_PUSH && c->push.f && futures_push_data(&s->fut, &c->push, off, p, n) < 0) {
        frame_hdr about = {0};
        about.batch = c->push.f->batch;
        about.bucket = c->push.f->bucket;
        about.has = FH_BATCH | FH_BUCKET;
        conn_send_error(c, ERR_SHAPE_MISMATCH, c->push.err, &about);
        conn_push_abort(c);
    }
}

/* Parse everything complete in the input buffer. The reader hands payload
 * chunks over in whole floats (a partial one waits for its other bytes),
 * and a payload's end before anything after it. */
static void conn_process(conn *c)
{
    while (!c->closing && !c->calls_held) {
        framed_event ev;
        switch (framed_next(&c->rd, &ev)) {
        case FRAMED_NEED_MORE:
            return;
        case FRAMED_DATA:
            conn_payload(c, ev.data, ev.n, ev.off);
            break;
        case FRAMED_END:
            if (c->sink == SINK_PUSH)
                conn_push_finish(c);
            else if (c->sink == SINK_CALL)
                conn_call_finish(c);
            break;
        case FRAMED_HEADER:
            c->hlen = ev.hlen;
            conn_dispatch(c, &ev.hdr);
            break;
        case FRAMED_BAD:
            conn_send_error(c, ERR_BAD_FRAME, framed_err(&c->rd), NULL);
            return;
        case FRAMED_TOO_LARGE:
            conn_send_error(c, ERR_TOO_LARGE, framed_err(&c->rd), &ev.hdr);
            return;
        }
    }
}

/* Receive payload bytes straight into the backend's buffer, after the
 * partial float (0 to 3 bytes) the input buffer may hold from the last
 * read. Returns the recv() result. */
static ssize_t conn_read_direct(conn *c, uint8_t *dst, size_t max)
{
    server *s = c->srv;
    size_t carry = framed_direct_carry(&c->rd, dst);
    assert(carry < max);
    ssize_t r = recv(c->fd, dst + carry, max - carry, 0);
    if (r <= 0)
        return r;
    s->bytes_in += (uint64_t)r;
    uint64_t off = framed_payload_off(&c->rd);
    /* The backend's view stays on a float boundary: a partial float goes
     * back to the input buffer and is handled with the next bytes. */
    size_t keep = framed_direct_done(&c->rd, dst, carry + (size_t)r);
    if (keep)
        futures_push_direct_done(&s->fut, &c->push, off, keep);
    conn_process(c); /* the payload's end, when these bytes were the last */
    return r;
}

static void conn_on_read(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    server *s = c->srv;
    if (c->calls_resume) {
        c->calls_resume = false;
        conn_process(c);
        if (c->fd < 0)
            return; /* closed by what it held */
    }
    for (int i = 0; i < CONN_READS_PER_EVENT && !c->closing && !c->calls_held; i++) {
        ssize_t r;
        size_t want;
        uint8_t *dst = NULL;
        size_t max = 0;
        /* In a payload, the input buffer holds at most a partial float
         * (conn_process hands over everything else). */
        size_t carry = framed_buffered(&c->rd);
        if (framed_in_payload(&c->rd) && c->sink == SINK_PUSH && c->push.f && carry < 4 &&
            framed_payload_left(&c->rd) >= CONN_DIRECT_MIN &&
            (dst = futures_push_direct(&s->fut, &c->push, framed_payload_off(&c->rd), &max)) != NULL) {
            want = max - carry;
            r = conn_read_direct(c, dst, max);
        } else {
            uint8_t *buf = framed_space(&c->rd, &want);
            if (want == 0) /* cannot happen: conn_process takes every event */
                break;
            if (dst == NULL && max > carry && max - carry < want)
                want = max - carry; /* up to where it may be received directly */
            else if (!framed_in_payload(&c->rd) && c->big_pushes && want > CONN_HEADER_READ)
                want = CONN_HEADER_READ; /* the header, not the payload behind it:
                                          * that one may go straight to its place */
            r = c->link->recv(c, buf, want);
            if (r > 0) {
                framed_wrote(&c->rd, (size_t)r);
                s->bytes_in += (uint64_t)r;
                conn_process(c);
            }
        }
        if (r == 0) {
            conn_close(c, framed_in_payload(&c->rd) ? "closed by peer in the middle of a frame"
                                                    : "closed by peer");
            break;
        }
        if (r < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                conn_close(c, strerror(errno));
            break;
        }
        if ((size_t)r < want)
            break; /* the socket is drained */
    }
    /* What this produced (answers, errors, closes) is written and freed by
     * the reactor's pass, after every other callback of this iteration. */
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
