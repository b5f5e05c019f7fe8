/* control.h — the control plane between the master and its nodes.
 *
 * Same framing as the data plane (protocol v1 frames); the header carries
 * "type" (and "token" on register), the payload is one JSON object with the
 * message's fields. Messages, node → master: register, ready, metrics
 * (also the heartbeat), pass_done, reset_done, failed; master → node:
 * registered (the answer to a register, at once), assign, start, reset,
 * stop. docs/protocol.md lists their fields.
 */
#ifndef PSBENCH_CONTROL_H
#define PSBENCH_CONTROL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/cli.h"
#include "shared/frame.h"

#define CTL_MAX_BODY (16u << 20) /* a control message's JSON, at most */

/* Encode a frame of `type` with body (may be NULL: empty object) into a
 * malloc'd buffer. Returns 0 or -1. */
int ctl_encode(const char *type, const char *token, json_t *body, uint8_t **out, size_t *len);

/* One decoded control message. */
typedef struct ctl_msg {
    char type[32];
    char token[CLI_TOKEN_MAX + 1];
    bool token_too_long; /* the header's token has more than CLI_TOKEN_MAX bytes (token is then "") */
    json_t *body; /* owned by the message; ctl_msg_clear frees it */
} ctl_msg;

void ctl_msg_clear(ctl_msg *m);

/* Decode one message at the start of p[0, len). FRAME_OK: *consumed bytes
 * used; FRAME_NEED_MORE; FRAME_BAD / FRAME_TOO_LARGE with d->err set (a
 * payload that is not a JSON object is FRAME_BAD). */
frame_status ctl_decode(frame_decoder *d, const uint8_t *p, size_t len, ctl_msg *m, size_t *consumed);
/* ctl_decode that also says, on FRAME_NEED_MORE, how many bytes from p a
 * later call needs to see (*need > len; see framed_whole). */
frame_status ctl_decode_view(frame_decoder *d, const uint8_t *p, size_t len, ctl_msg *m, size_t *consumed,
                             size_t *need);

/* A contiguous view of the first n bytes of a stream buffered elsewhere
 * (n never exceeds what the caller said is there), or NULL when out of
 * memory. With a libevent evbuffer: evbuffer_pullup(ctx, n). */
typedef const uint8_t *(*ctl_view_fn)(void *ctx, size_t n);

/* Read one message from the start of a stream of which `avail` bytes are
 * buffered elsewhere (the input evbuffer of a bufferevent), looking at no
 * more of it than the message needs: the prefix, then the header, then the
 * payload. FRAME_OK: *m is the message; drain *consumed bytes.
 * FRAME_NEED_MORE: wait for more bytes; FRAME_BAD / FRAME_TOO_LARGE: d->err
 * says why. Keeps shared/ free of libevent: the caller's view function
 * pulls the bytes up. */
frame_status ctl_read_stream(frame_decoder *d, size_t avail, ctl_view_fn view, void *ctx, ctl_msg *m,
                             size_t *consumed);

/* What a blocking control connection has heard from its peer, in order:
 * nothing yet; psbench frames, but no master's first answer (a server's
 * data port answers `error`); a master's first answer (ctl_recv_first:
 * `registered`, `assign` or `stop`), after which the peer is a master. */
typedef enum {
    CTL_HEARD_NOTHING = 0,
    CTL_HEARD_FRAME,
    CTL_HEARD_MASTER,
} ctl_heard;

/* A blocking control connection (the trainer's and the server's side). */
typedef struct ctl_conn {
    int fd;
    frame_decoder dec;
    uint8_t *buf;
    size_t len, cap;
    char peer[300];
    ctl_heard heard;
    bool lost;     /* the connection ended: the peer closed it, or a send failed */
    double answer_by; /* the clock (clock_now_s) by which ctl_recv_first gives up whatever its
                       * timeout (0: none): a follower's try (shared/follow.h) ends when what
                       * --follow-idle has left is spent, the connect and the answer together */
    double send_timeout_s; /* ctl_send gives up after this long without room to write (0: waits):
                            * with the link down on this host no segment leaves, so TCP's
                            * user timeout, which counts unacknowledged data, may never fire */
} ctl_conn;

/* Whether a master answered here (its first answer came). Until it does,
 * whatever the try ends on (a refused or blackholed connect, a peer that
 * closes, stays silent or answers in another protocol) is no job: a
 * follower (shared/follow.h) says why and tries again. */
static inline bool ctl_master_answered(const ctl_conn *c)
{
    return c->heard == CTL_HEARD_MASTER;
}

/* The shortest wait for a first answer that ctl_conn.answer_by leaves: a
 * master that listens answers at once. */
#define CTL_FIRST_MIN_S 0.5

/* Connect to HOST:PORT, retrying for up to timeout_s while refused. */
int ctl_connect(ctl_conn *c, const char *hostport, double timeout_s, char *err, size_t errlen);
void ctl_close(ctl_conn *c);
int ctl_send(ctl_conn *c, const char *type, const char *token, json_t *body, char *err, size_t errlen);
/* Wait up to timeout_ms for one message. 1 got one, 0 timed out, -1 error
 * (connection closed, malformed). Before the first message, bytes that are
 * not psbench's, or a close, are named as shared/peer.h says. */
int ctl_recv(ctl_conn *c, int timeout_ms, ctl_msg *m, char *err, size_t errlen);
/* The master's first answer to our register, waited for at most timeout_s
 * (--connect-timeout), and not past c->answer_by where set (but at least
 * CTL_FIRST_MIN_S): `registered`, `assign` or `stop`. 1 with *m, or -1
 * with err naming the peer: silent (probed for HTTP), closed, answering in
 * another protocol, or with a psbench frame that is no control message (a
 * server's data port). */
int ctl_recv_first(ctl_conn *c, double timeout_s, ctl_msg *m, char *err, size_t errlen);

/* The samples recorded since the last call, as {"type,name": [ms, ...]},
 * then forgotten (see metrics_enable_reporting). */
struct metrics;
json_t *ctl_take_samples(struct metrics *m);

/* Helpers to read a JSON body with defaults. */
const char *ctl_str(json_t *o, const char *key, const char *dflt);
/* ctl_str escaped for printing (shared/text.h) into buf: the peer's free
 * text (a reason) as it may go into a log line. Returns buf. */
const char *ctl_text(json_t *o, const char *key, const char *dflt, char *buf, size_t len);
int64_t ctl_int(json_t *o, const char *key, int64_t dflt);
double ctl_num(json_t *o, const char *key, double dflt);

#endif
