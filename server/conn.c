/* conn.c — one trainer connection: framing, hello, the message handlers,
 * output.
 *
 * Reading: bytes land in the buffer of c->rd, the framed reader
 * (shared/framed.h), and are parsed in place; each decoded header goes to
 * the handler of its type (conn_handlers). The reader follows every
 * payload to its end; c->sink says whether its bytes go to a push or are
 * discarded. Once a push's header is admitted by the futures layer, its
 * payload is streamed there as it arrives (never buffered whole); when the
 * input buffer holds no more than a partial float and the push's kind can
 * take raw bytes at a fixed address, the payload is received there
 * directly, skipping one copy. A `lookup` or `update` (kind embedding)
 * is small: its payload is buffered whole (c->call) and then handed to
 * the kind, whose answer comes back through the call's `done`.
 *
 * Writing: every frame the server sends is encoded here — the futures'
 * outcomes too (conn_deliver_answer, conn_deliver_fail: members.c hands
 * them the connections) — and appended to c->out (an outq: header bytes,
 * payload by reference). A connection with output goes on the server's
 * flush list and asks for the reactor's end-of-iteration pass
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
#include "server/conn.h"
#include "server/conn_ipc.h"
#include "server/members.h"
#include "server/server.h"
#include "shared/clock.h"
#include "shared/text.h"
#include "shared/log.h"
#include "shared/net.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A payload remainder at least this large is received directly into its
 * destination when the input buffer is empty. */
#define CONN_DIRECT_MIN (16u * 1024u)
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
static void conn_send_welcome_fd(conn *c, uint8_t *buf, size_t n);
static int conn_take_segment(conn *c, const frame_hdr *h);
static void conn_send_redirect(conn *c, const frame_hdr *h);
static void conn_payload(conn *c, const uint8_t *p, size_t n, uint64_t off);

/* Write c's output in the reactor's pass at the end of this iteration. */
static void conn_want_flush(conn *c)
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
    if (shm)
        shm_peer_name(fd, c->peer, sizeof c->peer);
    else
        net_peer_name(fd, c->peer, sizeof c->peer);
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
static bool conn_over_cap(conn *c, const char *what)
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

/* A result (or params) for one or more connections: its header encoded
 * at most three times, once for all of them, each only when some
 * connection needs it — followed by the payload on the socket; naming the
 * payload by offset in the server's segment (`at`, read in place) when it
 * lies there; naming its device twin in the GPU memory the device shares
 * (`dev`, conn_ipc.h) for a connection whose push came from its own GPU
 * memory. Over shared memory the first is usually not encoded at all. */
typedef struct conn_answer {
    const frame_hdr *h; /* with payload = the payload's length */
    psbuf *payload;     /* NULL or empty: none */
    uint8_t buf[256], buf_at[256], buf_dev[256];
    size_t len, len_at, len_dev; /* 0: not encoded (len_at: the payload is not in the segment) */
} conn_answer;

/* h as read in place from the server's segment: `at` instead of a payload
 * after the header. 0 when payload is not in the segment. */
static size_t conn_encode_at(const server *s, const frame_hdr *h, const psbuf *payload, uint8_t *buf, size_t cap)
{
    uint64_t at;
    if (!payload || !payload->len || !shm_arena_owns(&s->arena, payload->data, payload->len, &at))
        return 0;
    frame_hdr ha = *h;
    ha.payload = 0;
    ha.has &= ~(uint32_t)FH_PAYLOAD;
    ha.at = at;
    ha.has |= FH_AT;
    return frame_encode_header(&ha, buf, cap);
}

static void conn_answer_init(conn_answer *a, const server *s, const frame_hdr *h, psbuf *payload)
{
    a->h = h;
    a->payload = payload;
    a->len = a->len_dev = 0;
    a->len_at = conn_encode_at(s, h, payload, a->buf_at, sizeof a->buf_at);
}

/* Queue answer a to c: the header bytes are copied, the payload added by
 * reference. A connection that reads it in place — in GPU memory, when
 * its push came from its own (on_gpu: it takes the mean device to device
 * into the same bucket), or in the server's segment — gets that header
 * (the payload named by offset), and the payload stays lent until it
 * pushes a later batch than `batch`. */
static int conn_queue_result(conn *c, conn_answer *a, uint64_t batch, bool on_gpu)
{
    if (c->closing || conn_over_cap(c, "results"))
        return -1;
    psbuf *payload = a->payload;
    const uint8_t *lent = NULL;
    size_t lent_len = 0;
    if (on_gpu && payload && payload->twin) {
        assert(c->ipc.peer);
        if (!a->len_dev) {
            a->len_dev = conn_ipc_encode_result(a->h, payload, a->buf_dev, sizeof a->buf_dev);
            assert(a->len_dev > 0);
        }
        lent = a->buf_dev;
        lent_len = a->len_dev;
    } else if (a->len_at && c->in_place) { /* len_at: the payload lies in the segment */
        lent = a->buf_at;
        lent_len = a->len_at;
    }
    /* A result kept on the device only (every pusher reads it there):
     * only a CUDA IPC link can have pushed into it. */
    assert(!payload || !payload->twin_only || lent == a->buf_dev);
    if (lent) {
        /* Within --max-queued of loans; a twin-only result is lent
         * whatever the loans (it has nothing to send on the socket; its
         * memory is the device's share, bounded by --gpu-share). */
        uint64_t cap = payload->twin_only ? UINT64_MAX : c->srv->cfg.max_queued;
        int r = outq_push_shared(&c->out, lent, lent_len, payload, batch, cap);
        if (r < 0)
            return -1;
        if (r == 0) {
            c->srv->bytes_out += payload->len;
            if (lent == a->buf_dev)
                c->srv->bytes_gpu_lent += payload->len;
            else
                c->srv->bytes_in_place += payload->len;
            conn_want_flush(c);
            return 0;
        }
        /* past the loans' cap: sent on the socket like any other */
    }
    if (!a->len) {
        a->len = frame_encode_header(a->h, a->buf, sizeof a->buf);
        assert(a->len > 0);
    }
    if (outq_push(&c->out, a->buf, a->len, payload && payload->len ? payload : NULL, batch) < 0)
        return -1;
    conn_want_flush(c);
    return 0;
}

static bool conn_code_is_fatal(frame_errcode code)
{
    return code == ERR_BAD_FRAME || code == ERR_AUTH || code == ERR_TOO_LARGE;
}

/* Queue an error frame. `fatal` codes close the connection after it is
 * written. */
static void conn_send_error(conn *c, frame_errcode code, const char *msg, const frame_hdr *about)
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

/* ---- pushes ------------------------------------------------------------ */

/* The current push was refused half-way (its bytes were invalid): the
 * futures layer forgets it; the rest of its payload is discarded. */
static void conn_push_abort(conn *c)
{
    assert(c->sink == SINK_PUSH);
    if (c->push.f)
        futures_push_abort(&c->srv->fut, &c->push);
    c->sink = SINK_DISCARD;
}

void conn_push_forget(conn *c)
{
    assert(!c->push.f); /* the futures layer has let go of every push */
    if (c->sink == SINK_PUSH)
        c->sink = SINK_DISCARD;
}

static void conn_push_finish(conn *c)
{
    c->sink = SINK_DISCARD;
    if (!c->push.f)
        return; /* its future failed meanwhile: the bytes were discarded */
    c->srv->pushes++;
    futures_push_done(&c->srv->fut, &c->push);
}

/* The frame's payload, if any, is discarded: the reader follows it to its
 * end, and its chunks go nowhere. */
static void conn_skip_payload(conn *c)
{
    c->sink = SINK_DISCARD;
}

/* Check the shape fields of a push header. Returns ERR_NONE, or the code
 * to answer with and a message in msg. */
static frame_errcode conn_check_push(const frame_hdr *h, char *msg, size_t len)
{
    const uint32_t need = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT;
    char missing[96];
    if (frame_missing(h->has, need, missing, sizeof missing)) {
        snprintf(msg, len, "push needs batch, bucket, dtype and layout (missing: %s)", missing);
        return ERR_BAD_FRAME;
    }
    if (h->layout == LAYOUT_DENSE && !(h->has & FH_COUNT)) {
        snprintf(msg, len, "dense push needs count (missing)");
        return ERR_BAD_FRAME;
    }
    if (h->layout == LAYOUT_SPARSE && frame_missing(h->has, FH_ROWS | FH_COLS | FH_NNZ, missing, sizeof missing)) {
        snprintf(msg, len, "sparse push needs rows, cols and nnz (missing: %s)", missing);
        return ERR_BAD_FRAME;
    }
    if (h->layout == LAYOUT_SPARSE && h->cols == 0) {
        snprintf(msg, len, "sparse push with cols = 0");
        return ERR_BAD_FRAME;
    }
    if (!frame_str_eq(h->dtype, "f32")) {
        snprintf(msg, len, "dtype '%.*s' is not supported (only f32)", (int)h->dtype.n, h->dtype.p);
        return ERR_UNSUPPORTED;
    }
    if (h->layout != LAYOUT_DENSE && h->layout != LAYOUT_SPARSE) {
        snprintf(msg, len, "layout '%.*s' is not supported (dense or sparse)", (int)h->layout_str.n,
                 h->layout_str.p);
        return ERR_UNSUPPORTED;
    }
    /* Only a frame we can interpret can be inconsistent with itself. */
    if (h->layout == LAYOUT_DENSE || h->layout == LAYOUT_SPARSE) {
        uint64_t want = frame_push_payload_size(h);
        if (want != h->payload) {
            snprintf(msg, len, "payload is %" PRIu64 " bytes but the shape needs %" PRIu64, h->payload,
                     want);
            return ERR_BAD_FRAME;
        }
    }
    return ERR_NONE;
}

/* A push whose payload lies in the trainer's segment (`at`): where its
 * bytes are, checked against the segment before anything reads them. The
 * header is seen as if its payload followed it (hv: `payload` = the
 * shape's bytes), so that everything after — the shape checks, admission,
 * the kind — is TCP's. NULL after an error was sent (a lie about where the
 * bytes are closes the connection: bad_frame). */
static const uint8_t *conn_shm_payload(conn *c, const frame_hdr *h, frame_hdr *hv)
{
    char msg[256];
    *hv = *h;
    if (!c->seg.base) {
        conn_send_error(c, ERR_BAD_FRAME,
                        c->shm ? "push names shared memory (at) but this trainer's hello handed over no segment"
                               : "push names shared memory (at) on a TCP connection",
                        h);
        return NULL;
    }
    if (h->payload) {
        conn_send_error(c, ERR_BAD_FRAME, "push has both a payload and at: one or the other", h);
        return NULL;
    }
    uint64_t want = frame_push_payload_size(h);
    if (want == UINT64_MAX)
        return (const uint8_t *)""; /* conn_check_push names what is wrong with the shape */
    if (want > c->srv->cfg.max_payload) {
        snprintf(msg, sizeof msg, "push of %" PRIu64 " bytes: more than this server's --max-payload %" PRIu64, want,
                 c->srv->cfg.max_payload);
        conn_send_error(c, ERR_TOO_LARGE, msg, h);
        return NULL;
    }
    if (h->at % 4 || !shm_seg_holds(&c->seg, h->at, want)) {
        snprintf(msg, sizeof msg,
                 "push names bytes %" PRIu64 "..%" PRIu64 " of a segment of %" PRIu64 " bytes%s", h->at,
                 h->at + want, c->seg.size, h->at % 4 ? " (not on a float boundary)" : "");
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return NULL;
    }
    hv->payload = want;
    hv->has |= FH_PAYLOAD;
    return c->seg.base + h->at;
}

static void conn_on_push(conn *c, const frame_hdr *h0)
{
    server *s = c->srv;
    char msg[256];
    if (!c->hello_done) {
        conn_send_error(c, ERR_BAD_FRAME, "push before hello", h0);
        return;
    }
    frame_hdr hv;
    const frame_hdr *h = h0;
    const uint8_t *shared = NULL; /* the payload, in the trainer's segment */
    bool on_gpu = false;          /* the payload, in the trainer's GPU memory (CUDA IPC) */
    if (h0->has & FH_DEV) {
        frame_errcode code = conn_ipc_push(&c->ipc, h0, s->cfg.max_payload, &hv, msg, sizeof msg);
        if (code != ERR_NONE) {
            conn_send_error(c, code, msg, h0);
            return;
        }
        h = &hv;
        on_gpu = true;
    } else if (h0->has & FH_AT) {
        if (!(shared = conn_shm_payload(c, h0, &hv)))
            return;
        h = &hv;
    }
    /* The device's later work waits for what the trainer recorded before
     * this push: its gradients written, and its reads of results lent to
     * it done (docs/protocol.md, CUDA IPC). */
    if (c->ipc.peer)
        device_peer_wait(s->dev, c->ipc.peer);
    /* A trainer pushes a batch only once it has read every result of the
     * batches before: the results of those it was lent are free again. */
    if (h->has & FH_BATCH)
        outq_return(&c->out, h->batch);
    frame_errcode code = conn_check_push(h, msg, sizeof msg);
    if (code == ERR_NONE)
        code = futures_admit(&s->fut, h, c->slot, c->rank, &c->push, msg, sizeof msg);
    if (code != ERR_NONE) {
        conn_send_error(c, code, msg, h);
        if (!c->closing)
            conn_skip_payload(c);
        return;
    }
    c->sink = SINK_PUSH;
    c->big_pushes = !shared && !on_gpu && h->payload >= CONN_DIRECT_MIN;
    if (on_gpu && h->payload) {
        /* Folded on the GPU from the trainer's memory. */
        s->bytes_in += h->payload;
        s->pushes_gpu++;
        if (c->push.f) {
            pending_set_gpu_slot(c->push.f, c->slot);
            futures_push_peer(&s->fut, &c->push, c->ipc.peer, h->dev);
        }
        conn_push_finish(c);
    } else if (shared && h->payload) {
        /* Folded straight from the trainer's pages: no socket, no copy
         * into a buffer first. */
        s->bytes_in += h->payload;
        s->pushes_in_place++;
        conn_payload(c, shared, h->payload, 0);
        if (c->sink == SINK_PUSH)
            conn_push_finish(c);
    } else if (h->payload == 0) {
        conn_push_finish(c); /* sink is SINK_DISCARD again: the reader's
                              * FRAMED_END for it does nothing more */
    }
}

/* `fetch` (batch-update): the current parameters of this server's part. */
static void conn_on_fetch(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    if (h->payload) {
        conn_send_error(c, ERR_BAD_FRAME, "fetch carries no payload", h);
        return;
    }
    if (!s->kind->ops->fetch) {
        char msg[96];
        snprintf(msg, sizeof msg, "a %s server has no parameters to fetch", s->kind->ops->name);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    frame_hdr out = {0};
    out.type = FT_PARAMS;
    psbuf *payload = NULL;
    if (s->kind->ops->fetch(s->kind, &out, &payload) < 0) {
        conn_send_error(c, ERR_TOO_LARGE, "server out of memory", h);
        return;
    }
    out.payload = payload->len;
    out.has |= FH_PAYLOAD;
    conn_answer a;
    conn_answer_init(&a, s, &out, payload);
    /* Tagged batch 0: if it is spliced or read in place, the loan ends at
     * the trainer's first push of a later batch. The kind never writes
     * this buffer again (each step answers with a new one), so a loan is
     * safe either way. */
    conn_queue_result(c, &a, 0, false);
    psbuf_unref(payload);
}

/* ---- lookups and updates (kind embedding) -------------------------------- */

static void conn_call_free(kind_call *kc)
{
    if (kc->payload)
        psbuf_unref(kc->payload);
    if (kc->answer)
        psbuf_unref(kc->answer);
    free(kc);
}

/* Calls handed to the kind and not yet done are bounded per connection:
 * on a device that completes later (a GPU), a trainer that sends calls
 * faster than they complete would otherwise make the server hold every
 * payload. Past CONN_MAX_CALLS calls or --max-queued bytes of them, the
 * connection is not read until calls complete — they always do, so this
 * waits, it never deadlocks; a psbench trainer has two at most (an update,
 * then the next lookup, whose rows it waits for). */
#define CONN_MAX_CALLS 64u

static bool conn_calls_over(const conn *c)
{
    return c->ncalls >= CONN_MAX_CALLS || c->calls_bytes >= c->srv->cfg.max_queued;
}

static void conn_calls_throttle(conn *c)
{
    if (c->calls_held || c->fd < 0 || c->closing || !conn_calls_over(c))
        return;
    c->calls_held = true;
    event_del(c->rev);
    log_debug("%s: %u calls (%" PRIu64 " bytes) in flight: not reading until they complete", c->peer, c->ncalls,
              c->calls_bytes);
}

/* kc leaves c's calls in flight (done, or refused). */
static void conn_calls_untrack(conn *c, const kind_call *kc)
{
    assert(c->ncalls > 0);
    c->ncalls--;
    c->calls_bytes -= kc->payload ? kc->payload->len : 0;
    if (c->calls_held && !conn_calls_over(c)) {
        c->calls_held = false;
        if (c->fd < 0 || c->closing)
            return;
        /* Frames already in the input buffer wait for no socket event:
         * the read callback takes them first (from the loop, not from
         * inside this completion). While the kind fills, conn_hold
         * releases the connection later. */
        c->calls_resume = true;
        if (c->srv->filling)
            return;
        if (event_add(c->rev, NULL) < 0)
            conn_close(c, "cannot watch the connection");
        else
            event_active(c->rev, EV_READ, 0);
    }
}

/* The kind has applied a call (on the reactor thread, in call order): a
 * lookup is answered with its rows. A call whose connection closed meanwhile
 * is only freed. */
static void conn_call_done(kind_call *kc)
{
    conn *c = kc->owner;
    if (c) {
        assert(c->calls_head == kc); /* the device completes in submission order */
        c->calls_head = kc->next;
        if (!c->calls_head)
            c->calls_tail = NULL;
        conn_calls_untrack(c, kc);
    }
    if (c && kc->error) {
        /* The device failed the call: the trainer is told, lookup or
         * update alike, and the connection stays. */
        frame_hdr about = {0};
        about.batch = kc->batch;
        about.has = FH_BATCH;
        conn_send_error(c, ERR_DEVICE, kc->error, &about);
    } else if (c && !kc->update) {
        frame_hdr h = {0};
        h.type = FT_ROWS;
        h.batch = kc->batch;
        h.bags = kc->bags;
        h.cols = kc->cols;
        h.dtype = frame_str_c("f32");
        h.payload = kc->answer ? kc->answer->len : 0;
        h.has = FH_BATCH | FH_BAGS | FH_COLS | FH_DTYPE | FH_PAYLOAD;
        uint8_t buf[128];
        size_t n = frame_encode_header(&h, buf, sizeof buf);
        assert(n > 0);
        /* Copied, never lent: this trainer pushes no later batch that
         * would give a lent buffer back. */
        if (!c->closing && !conn_over_cap(c, "rows") &&
            outq_push_copy(&c->out, buf, n, kc->answer && kc->answer->len ? kc->answer : NULL) == 0) {
            c->srv->results++;
            call_count_add(&c->srv->calls[CALLS_ROWS], n, h.payload);
            conn_want_flush(c);
        }
    } else if (c && kc->confirm) {
        /* An update that asked for it: applied (its job completed). */
        frame_hdr h = {0};
        h.type = FT_UPDATED;
        h.batch = kc->batch;
        h.has = FH_BATCH;
        uint8_t buf[64];
        size_t n = frame_encode_header(&h, buf, sizeof buf);
        assert(n > 0);
        if (!c->closing && !conn_over_cap(c, "updated") && outq_push(&c->out, buf, n, NULL, 0) == 0) {
            call_count_add(&c->srv->calls[CALLS_UPDATED], n, 0);
            conn_want_flush(c);
        }
    }
    conn_call_free(kc);
}

/* The call's whole payload is in: hand it to the kind. */
static void conn_call_finish(conn *c)
{
    server *s = c->srv;
    kind_call *kc = c->call;
    c->call = NULL;
    c->sink = SINK_DISCARD;
    kc->t_ns = clock_now_ns();
    kc->done = conn_call_done;
    kc->owner = c;
    /* In the list before the kind sees it: the cpu device calls done
     * before lookup/update return. */
    kc->next = NULL;
    kind_call *prev_tail = c->calls_tail;
    if (prev_tail)
        prev_tail->next = kc;
    else
        c->calls_head = kc;
    c->calls_tail = kc;
    c->ncalls++;
    c->calls_bytes += kc->payload ? kc->payload->len : 0;
    char msg[256];
    bool update = kc->update; /* kc may be gone once the kind has it (done ran inline) */
    frame_errcode code = update ? s->kind->ops->update(s->kind, kc, msg, sizeof msg)
                                : s->kind->ops->lookup(s->kind, kc, msg, sizeof msg);
    if (code == ERR_NONE) {
        if (update)
            s->updates++;
        else
            s->lookups++;
        conn_calls_throttle(c);
        return;
    }
    /* Refused: done will never run; take it off the list again (it is the
     * tail: nothing was added since). */
    assert(c->calls_tail == kc);
    c->calls_tail = prev_tail;
    if (prev_tail)
        prev_tail->next = NULL;
    else
        c->calls_head = NULL;
    conn_calls_untrack(c, kc);
    frame_hdr about = {0};
    about.batch = kc->batch;
    about.has = FH_BATCH;
    conn_send_error(c, code, msg, &about);
    conn_call_free(kc);
}

/* Check the fields of a lookup/update header. ERR_NONE, or the code to
 * answer with and a message in msg. */
static frame_errcode conn_check_call(conn *c, const frame_hdr *h, bool update, char *msg, size_t len)
{
    const char *what = update ? "update" : "lookup";
    if (!(update ? c->srv->kind->ops->update : c->srv->kind->ops->lookup)) {
        snprintf(msg, len, "a %s server takes no %s (kind embedding does)", c->srv->kind->ops->name, what);
        return ERR_UNSUPPORTED;
    }
    const uint32_t need = FH_BATCH | FH_NNZ | FH_BAGS | (update ? FH_COLS : 0);
    char missing[96];
    if (frame_missing(h->has, need, missing, sizeof missing)) {
        snprintf(msg, len, "%s (missing: %s)",
                 update ? "update needs batch, nnz, bags and cols" : "lookup needs batch, nnz and bags", missing);
        return ERR_BAD_FRAME;
    }
    if ((h->has & FH_DTYPE) && !frame_str_eq(h->dtype, "f32")) {
        snprintf(msg, len, "dtype '%.*s' is not supported (only f32)", (int)(h->dtype.n > 32 ? 32 : h->dtype.n),
                 h->dtype.p);
        return ERR_UNSUPPORTED;
    }
    /* An update's optional `confirm` and `grad` (a lookup ignores them). */
    if (update && (h->has & FH_CONFIRM) && h->confirm > 1) {
        snprintf(msg, len, "update: confirm %" PRIu64 " is not supported (0 or 1)", h->confirm);
        return ERR_UNSUPPORTED;
    }
    if (update && (h->has & FH_GRAD) && !frame_str_eq(h->grad, "sparse") && !frame_str_eq(h->grad, "dense")) {
        snprintf(msg, len, "update: grad '%.*s' is not supported (sparse or dense)",
                 (int)(h->grad.n > 32 ? 32 : h->grad.n), h->grad.p);
        return ERR_UNSUPPORTED;
    }
    /* The payload's size must follow from the header (the kind checks cols
     * against its table). */
    uint64_t want = UINT64_MAX;
    if (h->nnz <= UINT64_MAX / 16 && h->bags <= UINT64_MAX / 16) {
        want = 8 * (h->nnz + h->bags);
        if (update && h->cols && h->bags > (UINT64_MAX - want) / 4 / h->cols)
            want = UINT64_MAX;
        else if (update)
            want += 4 * h->bags * h->cols;
    }
    if (want != h->payload) {
        if (want == UINT64_MAX)
            snprintf(msg, len, "%s: nnz %" PRIu64 " and bags %" PRIu64 " are too large", what, h->nnz, h->bags);
        else
            snprintf(msg, len, "%s payload is %" PRIu64 " bytes but nnz, bags%s need %" PRIu64, what, h->payload,
                     update ? " and cols" : "", want);
        return ERR_SHAPE_MISMATCH;
    }
    return ERR_NONE;
}

/* `lookup` and `update`: the payload is buffered whole (c->call), then
 * handed to the kind (conn_call_finish). */
static void conn_on_call(conn *c, const frame_hdr *h)
{
    bool update = h->type == FT_UPDATE;
    char msg[256];
    call_count_add(&c->srv->calls[update ? CALLS_UPDATE : CALLS_LOOKUP], c->hlen, h->payload);
    if (!c->hello_done) {
        conn_send_error(c, ERR_BAD_FRAME, update ? "update before hello" : "lookup before hello", h);
        return;
    }
    frame_errcode code = conn_check_call(c, h, update, msg, sizeof msg);
    if (code != ERR_NONE) {
        conn_send_error(c, code, msg, h);
        if (!c->closing)
            conn_skip_payload(c);
        return;
    }
    assert(!c->call);
    kind_call *kc = calloc(1, sizeof *kc);
    psbuf *payload = h->payload ? bufpool_get(&c->srv->pool, h->payload) : NULL;
    if (!kc || (h->payload && !payload)) {
        free(kc);
        if (payload)
            psbuf_unref(payload);
        conn_send_error(c, ERR_TOO_LARGE, "server out of memory", h);
        return;
    }
    kc->update = update;
    kc->batch = h->batch;
    kc->nnz = h->nnz;
    kc->bags = h->bags;
    kc->cols = update ? h->cols : 0;
    kc->dense = update && (h->has & FH_GRAD) && frame_str_eq(h->grad, "dense");
    kc->confirm = update && (h->has & FH_CONFIRM) && h->confirm == 1;
    kc->payload = payload;
    c->call = kc;
    c->sink = SINK_CALL;
    if (!h->payload)
        conn_call_finish(c);
}

/* ---- hello ------------------------------------------------------------- */

/* Compare without an early exit, so that timing does not leak the token. */
static bool conn_token_ok(const char *want, frame_str got)
{
    size_t n = strlen(want);
    unsigned diff = (unsigned)(n ^ got.n);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < got.n ? got.p[i] : 0);
    return diff == 0;
}

static void conn_on_hello(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    char msg[256];
    if (h->payload) {
        conn_send_error(c, ERR_BAD_FRAME, "hello carries no payload", h);
        return;
    }
    if (c->hello_done) {
        conn_send_error(c, ERR_UNSUPPORTED, "hello already done on this connection", h);
        return;
    }
    /* A field that is missing says so: "version 0" would send the user
     * looking for a peer that speaks protocol 0. */
    if (!(h->has & FH_VERSION)) {
        snprintf(msg, sizeof msg, "hello needs a version (this server speaks protocol %u)", FRAME_PROTOCOL_VERSION);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    if (h->version != FRAME_PROTOCOL_VERSION) {
        snprintf(msg, sizeof msg, "protocol version %" PRIu64 " is not supported (this server speaks %u)",
                 h->version, FRAME_PROTOCOL_VERSION);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    if (s->cfg.token && (!(h->has & FH_TOKEN) || !conn_token_ok(s->cfg.token, h->token))) {
        conn_send_error(c, ERR_AUTH, (h->has & FH_TOKEN) ? "wrong token" : "this server needs a token", h);
        return;
    }
    if (!(h->has & FH_ROLE)) {
        conn_send_error(c, ERR_UNSUPPORTED, "hello needs a role (\"trainer\")", h);
        return;
    }
    if (!frame_str_eq(h->role, "trainer")) {
        conn_send_error(c, ERR_UNSUPPORTED, "only role \"trainer\" may connect to a server", h);
        return;
    }
    if (!(h->has & FH_RANK)) {
        conn_send_error(c, ERR_BAD_FRAME, "hello needs a rank", h);
        return;
    }
    bool asks_shm = (h->has & FH_TRANSPORT) && frame_str_eq(h->transport, "shm");
    if (!c->shm && asks_shm && s->shm_fd >= 0) {
        conn_send_redirect(c, h);
        return;
    }
    if (!c->shm && s->cfg.transport == PSB_TRANSPORT_SHM) {
        conn_send_error(c, ERR_UNSUPPORTED,
                        "this server takes trainers over shared memory only (--transport shm): run the trainer on "
                        "this host, or the server with --transport auto",
                        h);
        return;
    }
    if (conn_take_segment(c, h) < 0)
        return;
    uint32_t slot = members_join(&s->members, c, c->peer, h->rank, msg, sizeof msg);
    if (slot == MEMBERS_NO_SLOT) {
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return;
    }
    c->hello_done = true;
    assert(s->nwaiting > 0);
    s->nwaiting--;
    evtimer_del(c->hello_ev);
    /* Results are lent only to a trainer that promises to read them before
     * it pushes a later batch: the protocol does not otherwise forbid
     * pushing ahead, and such a client would read reused pages. */
    bool reads_first = (h->has & FH_ZEROCOPY) && h->zerocopy == 1;
    if (s->cfg.splice && reads_first && !c->shm)
        outq_splice_on(&c->out, s->cfg.max_queued);
    c->in_place = c->shm && reads_first && s->arena.seg.base;
    c->ipc.offered = reads_first && conn_ipc_offer(s, c->shm);
    c->slot = slot;
    c->rank = h->rank;

    frame_hdr w = {0};
    w.type = FT_WELCOME;
    w.version = FRAME_PROTOCOL_VERSION;
    w.server = s->cfg.rank;
    w.trainers = s->cfg.trainers;
    w.has = FH_VERSION | FH_SERVER | FH_TRAINERS;
    if (c->in_place) {
        w.segment = s->arena.seg.size;
        w.has |= FH_SEGMENT;
    }
    if (c->ipc.offered) {
        w.gpu = frame_str_c(device_gpu_id(s->dev));
        w.has |= FH_GPU;
    }
    uint8_t buf[192];
    size_t n = frame_encode_header(&w, buf, sizeof buf);
    assert(n > 0);
    if (c->in_place)
        conn_send_welcome_fd(c, buf, n);
    else
        outq_push(&c->out, buf, n, NULL, 0);
    conn_want_flush(c);
    log_debug("trainer rank %" PRIu64 " joined from %s (slot %u, %s)", c->rank, c->peer, slot,
              c->shm ? (c->seg.base ? "shared memory" : "Unix socket, payloads inline") : "TCP");
}

/* A welcome that hands over the server's segment: its descriptor rides
 * with the frame's first byte, so it is sent here, at once, rather than
 * through the output queue (which writes with writev). Nothing is queued
 * before a hello is answered but errors; a short frame always fits an
 * empty socket buffer. Where it does not (or errors wait), the welcome
 * goes without the segment and results travel on the socket. */
static void conn_send_welcome_fd(conn *c, uint8_t *buf, size_t n)
{
    if (c->out.len == 0) {
        struct iovec iov = {buf, n};
        ssize_t w = shm_send_fd(c->fd, &iov, 1, c->srv->arena.seg.fd);
        if (w == (ssize_t)n) {
            c->srv->bytes_out += n;
            return;
        }
        if (w > 0) {
            conn_close(c, "the welcome did not fit the socket");
            return;
        }
    }
    c->in_place = false;
    frame_hdr w = {0};
    w.type = FT_WELCOME;
    w.version = FRAME_PROTOCOL_VERSION;
    w.server = c->srv->cfg.rank;
    w.trainers = c->srv->cfg.trainers;
    w.has = FH_VERSION | FH_SERVER | FH_TRAINERS;
    n = frame_encode_header(&w, buf, 128);
    assert(n > 0);
    outq_push(&c->out, buf, n, NULL, 0);
}

/* A hello over the Unix socket may hand over the trainer's segment (`segment`:
 * its size, the descriptor with the frame): mapped read-only once checked
 * (shared/shm.h: a memfd sealed against shrinking, of at most --max-shm
 * bytes). -1 after the error was sent. */
static int conn_take_segment(conn *c, const frame_hdr *h)
{
    char msg[256], why[200];
    if (!(h->has & FH_SEGMENT)) {
        if (c->rx_fd >= 0) {
            conn_send_error(c, ERR_BAD_FRAME, "a descriptor came with a hello that names no segment", h);
            return -1;
        }
        return 0;
    }
    if (!c->shm) {
        conn_send_error(c, ERR_BAD_FRAME, "hello names a segment on a TCP connection", h);
        return -1;
    }
    if (c->rx_fd < 0) {
        conn_send_error(c, ERR_BAD_FRAME, "hello names a segment but no descriptor came with it", h);
        return -1;
    }
    int fd = c->rx_fd;
    c->rx_fd = -1;
    if (shm_seg_map_peer(&c->seg, fd, c->srv->cfg.max_shm, why, sizeof why) < 0) {
        snprintf(msg, sizeof msg, "%s (--max-shm %" PRIu64 ")", why, c->srv->cfg.max_shm);
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return -1;
    }
    if (c->seg.size != h->segment) {
        snprintf(msg, sizeof msg, "hello says its segment is %" PRIu64 " bytes; it is %" PRIu64, h->segment,
                 c->seg.size);
        shm_seg_close(&c->seg);
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return -1;
    }
    return 0;
}

/* A hello on TCP that asks for shared memory (`link` "shm") from a
 * server that offers it: not a join, but `redirect` naming the Unix
 * socket, the size of the segment results would be read from (so the
 * trainer can tell whether it could map it) and the largest segment this
 * server takes (--max-shm). The trainer connects there if it is on this
 * host, or says hello again here without asking. */
static void conn_send_redirect(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    (void)h;
    frame_hdr a = {0};
    a.type = FT_REDIRECT;
    a.version = FRAME_PROTOCOL_VERSION;
    a.server = s->cfg.rank;
    a.shm = frame_str_c(s->shm_name);
    a.segment = s->arena.seg.size;
    a.segmax = s->cfg.max_shm;
    a.has = FH_VERSION | FH_SERVER | FH_SHM | FH_SEGMENT | FH_SEGMAX;
    uint8_t buf[256];
    size_t n = frame_encode_header(&a, buf, sizeof buf);
    assert(n > 0);
    outq_push(&c->out, buf, n, NULL, 0);
    conn_want_flush(c);
    log_debug("%s asks for shared memory: redirected to @%s", c->peer, s->shm_name);
}

/* `export` (CUDA IPC): the trainer's GPU memory and event for the server's
 * shared GPU memory (conn_ipc.c decides). */
static void conn_on_export(conn *c, const frame_hdr *h)
{
    char msg[400];
    uint8_t reply[512];
    size_t n = 0;
    frame_errcode code = ERR_BAD_FRAME;
    if (!c->hello_done)
        snprintf(msg, sizeof msg, "export before hello");
    else
        code = conn_ipc_export(c->srv, &c->ipc, c->shm, c->peer, c->rank, h, reply, sizeof reply, &n, msg,
                               sizeof msg);
    if (code != ERR_NONE) {
        conn_send_error(c, code, msg, h);
        conn_skip_payload(c);
        return;
    }
    outq_push(&c->out, reply, n, NULL, 0);
    conn_want_flush(c);
}

/* ---- input ------------------------------------------------------------- */

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

static void conn_dispatch(conn *c, const frame_hdr *h)
{
    void (*fn)(conn *, const frame_hdr *) = NULL;
    /* Shared memory's fields where they mean something, nowhere else: a
     * frame that names bytes elsewhere would otherwise be read as one
     * without a payload. */
    if ((h->has & FH_AT) && h->type != FT_PUSH) {
        conn_send_error(c, ERR_BAD_FRAME, "at (a payload in shared memory) is only for push", h);
        return;
    }
    if ((h->has & FH_TRANSPORT) && h->type != FT_HELLO) {
        conn_send_error(c, ERR_BAD_FRAME, "transport is only for hello", h);
        return;
    }
    if ((h->has & FH_SEGMENT) && h->type != FT_HELLO && h->type != FT_EXPORT) {
        conn_send_error(c, ERR_BAD_FRAME, "segment is only for hello and export", h);
        return;
    }
    if ((h->has & FH_DEV) && h->type != FT_PUSH) {
        conn_send_error(c, ERR_BAD_FRAME, "dev (a payload in GPU memory) is only for push", h);
        return;
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
static void conn_payload(conn *c, const uint8_t *p, size_t n, uint64_t off)
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

/* recv, or on the Unix socket recvmsg: a descriptor that comes with the
 * bytes waits in c->rx_fd for the frame that takes it (a hello with a
 * segment). More than one, or any after the hello, is a broken peer:
 * closed with bad_frame (conn_dispatch), never kept. */
static ssize_t conn_recv(conn *c, uint8_t *buf, size_t want)
{
    if (!c->shm)
        return recv(c->fd, buf, want, 0);
    int fds[4];
    int nfds = 0;
    bool trunc = false;
    ssize_t r = shm_recv_fds(c->fd, buf, want, fds, &nfds, 4, &trunc);
    if (nfds == 0 && !trunc)
        return r;
    for (int i = 0; i < nfds; i++) {
        if (c->rx_fd < 0 && nfds == 1 && !trunc && !c->hello_done)
            c->rx_fd = fds[i];
        else
            close(fds[i]);
    }
    if (trunc || nfds > 1 || c->hello_done) {
        if (c->rx_fd >= 0) {
            close(c->rx_fd);
            c->rx_fd = -1;
        }
        conn_send_error(c, ERR_BAD_FRAME, "descriptors came that no frame takes (one, with the hello, at most)",
                        NULL);
    }
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
            r = conn_recv(c, buf, want);
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
    if (c->rx_fd >= 0) {
        close(c->rx_fd);
        c->rx_fd = -1;
    }
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

/* ---- the futures' outcomes (members_ops) -------------------------------- */

void conn_deliver_fail(void *ctx, void *const *eps, uint32_t n, const future *f, frame_errcode code,
                       const char *msg)
{
    (void)ctx;
    frame_hdr about = {0};
    about.batch = f->batch;
    about.bucket = f->bucket;
    about.has = FH_BATCH | FH_BUCKET;
    for (uint32_t i = 0; i < n; i++)
        conn_send_error(eps[i], code, msg, &about);
}

/* One header for every pusher, encoded once; the payload shared by
 * reference. */
void conn_deliver_answer(void *ctx, void *const *eps, uint32_t n, const future *f, psbuf *result)
{
    server *s = ctx;
    frame_hdr h = {0};
    h.type = FT_RESULT;
    h.batch = f->batch;
    h.bucket = f->bucket;
    h.dtype = frame_str_c("f32");
    h.layout = f->layout;
    h.layout_str = frame_str_c(f->layout == LAYOUT_DENSE ? "dense" : "sparse");
    h.payload = result->len;
    h.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_PAYLOAD;
    if (f->layout == LAYOUT_DENSE) {
        h.count = f->count;
        h.has |= FH_COUNT;
    } else {
        h.rows = f->rows;
        h.cols = f->cols;
        h.nnz = result->len / (8 + 4 * f->cols);
        h.has |= FH_ROWS | FH_COLS | FH_NNZ;
    }
    if (f->round) {
        h.round = f->round;
        h.has |= FH_ROUND;
    }
    conn_answer a;
    conn_answer_init(&a, s, &h, result);
    for (uint32_t i = 0; i < n; i++)
        if (conn_queue_result(eps[i], &a, f->batch, pending_gpu_slot(f, ((conn *)eps[i])->slot)) == 0)
            s->results++;
    if (result && result->twin_only)
        s->results_gpu_only++;
}

/* ---- free ---------------------------------------------------------------- */

void conn_free(conn *c)
{
    assert(c->fd < 0 && !c->call && !c->calls_head);
    event_free(c->rev);
    event_free(c->wev);
    event_free(c->hello_ev);
    outq_free(&c->out); /* drops the references to shared results */
    conn_ipc_close(c->srv, &c->ipc); /* unmapped once the device's folds from it are done */
    shm_seg_close(&c->seg); /* nothing reads it after the close: no push in flight */
    push_ctx_free(&c->push);
    framed_free(&c->rd);
    free(c);
}
