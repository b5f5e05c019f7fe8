/* conn_dispatch.c — a trainer connection's input: accepted (conn_new),
 * read, framed and dispatched to the handlers. It is the top of the
 * connection's files: it calls the handlers (conn_hello.c, conn_push.c,
 * conn_result.c, conn_call.c) and the services of conn.c below them
 * (conn_int.h), and nothing calls it but the reactor (conn_new, conn.h)
 * and libevent (its read callback).
 *
 * Reading: bytes land in the buffer of c->rd, the framed reader
 * (shared/framed.h), and are parsed in place; each decoded header goes to
 * the handler of its type (conn_handlers), after the fields only some
 * types may carry are checked (conn_fields). The reader follows every
 * payload to its end; c->sink says whether its bytes go to a push, a call
 * or are discarded, and whose end it is (conn_push_finish,
 * conn_call_finish). Once a push's header is admitted by the futures
 * layer, its payload is streamed there as it arrives (never buffered
 * whole); when the input buffer holds no more than a partial float and the
 * push's kind can take raw bytes at a fixed address, the payload is
 * received there directly, skipping one copy.
 */
#include "server/conn_int.h"
#include "server/server.h"
#include "server/xport.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Bound on reads per readiness event, so one busy trainer cannot starve
 * the others on the same reactor. */
#define CONN_READS_PER_EVENT 8
/* Read size while a header is awaited on a connection whose last push was
 * large: enough for any usual header, little payload to copy. */
#define CONN_HEADER_READ 4096u

static void conn_on_read(evutil_socket_t fd, short what, void *arg);

conn *conn_new(server *s, int fd, bool shm)
{
    return conn_open(s, fd, shm, conn_on_read);
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

/* Hand payload bytes (at offset off in the payload) to the sink: a push's
 * to the futures layer (conn_push.c), a call's into its buffer. */
static void conn_payload(conn *c, const uint8_t *p, size_t n, uint64_t off)
{
    if (c->sink == SINK_CALL) {
        assert(off + n <= c->call->payload->len);
        memcpy(c->call->payload->data + off, p, n);
        return;
    }
    if (c->sink == SINK_PUSH)
        conn_push_data(c, p, n, off);
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
    if (keep) {
        conn_fold_begin(c);
        futures_push_direct_done(&s->fut, &c->push, off, keep);
        conn_fold_end(c);
    }
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
