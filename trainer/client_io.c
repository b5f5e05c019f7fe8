/* client_io.c — what the trainer's client does for its transports and its
 * handshake alike (client_impl.h), beneath both: an answer begun at the
 * sink, a server's `error` frame worded, the handshake's blocking read of
 * one answer, a `dev` answer's bytes checked against the server's GPU
 * memory (refused on every link that exported none), and the start line's
 * words for a link without CUDA IPC. Calls nothing above it: the
 * transports (xport_*.c), the handshake (client_hello.c) and the client
 * (client.c) call it. */
#include "trainer/client_impl.h"
#include "shared/clock.h"
#include "shared/peer.h"
#include "shared/text.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

/* Format an `error` frame from a server as a one-line reason. */
void client_error_frame(const client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    char where[96] = "", code[64], msg[512];
    if ((h->has & FH_BATCH) && (h->has & FH_BUCKET))
        snprintf(where, sizeof where, " (batch %" PRIu64 " bucket %" PRIu64 ")", h->batch, h->bucket);
    /* The server's words go into this trainer's last line: escaped. */
    text_escape_n(h->message.p ? (const char *)h->message.p : "", h->message.p ? h->message.n : 0, msg, sizeof msg);
    if (!(h->has & FH_CODE)) {
        snprintf(err, errlen, "server %s answered an error without a code%s: %s", c->addr, where, msg);
        return;
    }
    text_escape_n(h->code.p ? (const char *)h->code.p : "", h->code.p ? h->code.n : 0, code, sizeof code);
    snprintf(err, errlen, "server %s answered %s%s: %s", c->addr, code, where, msg);
}

/* The sink's begin for the answer h on c (its cookie in c->frame). */
int client_begin(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    c->frame = NULL;
    return cl->sink.begin(cl->sink.ctx, (uint32_t)(c - cl->conns), h, &c->frame, err, errlen);
}

/* The first bytes the server sent, before any frame was handed out: what
 * the reader holds (nothing of the first frame is consumed before it is
 * whole). */
static const uint8_t *client_first_bytes(const client_conn *c, size_t *n)
{
    *n = framed_buffered(&c->rd);
    return c->rd.buf + c->rd.off;
}

/* Blocking read of exactly one frame header (no payload) during the
 * handshake, for at most timeout_s: the server's first answer (`want`:
 * welcome; FT_REDIRECT: a redirect or a welcome), or its answer to an
 * export (FT_EXPORT: 1 when it is an error, which *h describes). A peer
 * that is not a psbench server is named (shared/peer.h). */
int client_read_answer(client_conn *c, frame_type want, double timeout_s, frame_hdr *h, char *err, size_t errlen)
{
    long long deadline = clock_now_ms() + (long long)(timeout_s * 1000);
    for (;;) {
        framed_event ev;
        framed_ev k = framed_next(&c->rd, &ev);
        if (k == FRAMED_HEADER) {
            *h = ev.hdr;
            if (h->type == FT_ERROR && want == FT_EXPORT && !h->payload) {
                /* A refused export: the caller goes on without it. */
                k = framed_next(&c->rd, &ev);
                assert(k == FRAMED_END);
                return 1;
            }
            if (h->type == FT_ERROR) {
                client_error_frame(c, h, err, errlen);
                return -1;
            }
            if ((h->type != want && !(want == FT_REDIRECT && h->type == FT_WELCOME)) || h->payload) {
                char type[160];
                text_escape_n((const char *)h->type_str.p, h->type_str.n > 32 ? 32 : h->type_str.n, type, sizeof type);
                snprintf(err, errlen, "%s is not a psbench server (it answered a psbench '%s' frame%s)", c->addr, type,
                         h->type == FT_OTHER ? ", as the master's control port does" : ", not welcome");
                return -1;
            }
            k = framed_next(&c->rd, &ev); /* the end of its (empty) payload */
            assert(k == FRAMED_END);
            return 0;
        }
        size_t n;
        const uint8_t *first = client_first_bytes(c, &n);
        if (k != FRAMED_NEED_MORE) {
            if (!peer_not_psbench(c->addr, "server", first, n, err, errlen))
                snprintf(err, errlen, "server %s: bad frame: %s", c->addr, framed_err(&c->rd));
            return -1;
        }
        long long left = deadline - clock_now_ms();
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
            if (n == 0 || !peer_not_psbench(c->addr, "server", first, n, err, errlen))
                peer_no_answer(c->addr, "server", false, timeout_s, err, errlen);
            return -1;
        }
        size_t room;
        uint8_t *dst = framed_space(&c->rd, &room);
        ssize_t r = c->xp->recv(c, dst, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            first = client_first_bytes(c, &n);
            if (n == 0)
                peer_no_answer(c->addr, "server", true, 0, err, errlen);
            else if (!peer_not_psbench(c->addr, "server", first, n, err, errlen))
                snprintf(err, errlen, "server %s closed the connection during hello", c->addr);
            return -1;
        }
        framed_wrote(&c->rd, (size_t)r);
    }
}

/* Where a `dev` answer's bytes lie in the server's GPU memory that c
 * holds open (*want of them from h->dev), checked before anything reads
 * them: refused, naming why, where none was exported (every link but CUDA
 * IPC), where they fall outside it, or where the answer is not a dense
 * result or params, or also carries a payload or `at`. */
int client_check_dev(const client *cl, const client_conn *c, const frame_hdr *h, uint64_t *want, char *err,
                     size_t errlen)
{
    bool result = h->type == FT_RESULT && h->layout == LAYOUT_DENSE;
    *want = result                                               ? frame_push_payload_size(h)
            : h->type == FT_PARAMS && h->count <= UINT64_MAX / 4 ? h->count * 4
                                                                 : UINT64_MAX;
    /* its elements' alignment: a narrow result's (f16, bf16) 2 bytes, else a float's */
    int dt = result ? frame_dtype_type(h->dtype) : HALF_FP32;
    uint64_t align = dt == HALF_FP16 || dt == HALF_BF16 ? 2 : 4;
    if (devmem_is_none(c->srv_gpu) || !cl->sink.dev || h->payload || (h->has & FH_AT) || *want == UINT64_MAX ||
        h->dev % align || h->dev > c->srv_gpu_bytes || *want > c->srv_gpu_bytes - h->dev) {
        snprintf(err, errlen, "server %s sent a '%s' naming bytes %" PRIu64 "..+%" PRIu64 " of %s", c->addr,
                 frame_type_name(h->type), h->dev, *want == UINT64_MAX ? 0 : *want,
                 !devmem_is_none(c->srv_gpu) ? "its GPU memory, outside it (or not a dense result, or with a payload too)"
                                             : "GPU memory it never exported to this trainer");
        return -1;
    }
    return 0;
}

void client_describe_no_ipc(const client_conn *c, const char *words, const char *dflt, char *buf, size_t len)
{
    snprintf(buf, len, "%s (no CUDA IPC: %s)", words, c->gpu_note[0] ? c->gpu_note : dflt);
}
