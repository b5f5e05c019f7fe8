/* control.c — control-plane messages: JSON bodies in protocol v1 frames
 * (see control.h). */
#include "shared/control.h"
#include "shared/follow.h"
#include "shared/framed.h"
#include "shared/metrics.h"
#include "shared/net.h"
#include "shared/peer.h"
#include "shared/text.h"
#include "shared/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int ctl_encode(const char *type, const char *token, json_t *body, uint8_t **out, size_t *len)
{
    char *js = body ? json_dumps(body, JSON_COMPACT) : strdup("{}");
    if (!js)
        return -1;
    size_t jl = strlen(js);
    frame_hdr h = {0};
    h.type = FT_OTHER;
    h.type_str = frame_str_c(type);
    h.payload = jl;
    h.has = FH_PAYLOAD;
    if (token) {
        h.token = frame_str_c(token);
        h.has |= FH_TOKEN;
    }
    uint8_t hdr[1024];
    size_t hl = frame_encode_header(&h, hdr, sizeof hdr);
    uint8_t *buf = hl ? malloc(hl + jl) : NULL;
    if (!buf) {
        free(js);
        return -1;
    }
    memcpy(buf, hdr, hl);
    memcpy(buf + hl, js, jl);
    free(js);
    *out = buf;
    *len = hl + jl;
    return 0;
}

void ctl_msg_clear(ctl_msg *m)
{
    json_decref(m->body);
    memset(m, 0, sizeof *m);
}

frame_status ctl_decode(frame_decoder *d, const uint8_t *p, size_t len, ctl_msg *m, size_t *consumed)
{
    size_t need;
    return ctl_decode_view(d, p, len, m, consumed, &need);
}

frame_status ctl_decode_view(frame_decoder *d, const uint8_t *p, size_t len, ctl_msg *m, size_t *consumed,
                             size_t *need)
{
    frame_hdr h;
    const uint8_t *payload;
    size_t used;
    *consumed = 0;
    frame_status st = framed_whole(d, p, len, &h, &payload, &used, need);
    if (st != FRAME_OK)
        return st;
    if (h.type_str.n >= sizeof m->type) {
        snprintf(d->err, sizeof d->err, "control message type too long");
        return FRAME_BAD;
    }
    memset(m, 0, sizeof *m);
    /* Kept printable: the type goes into log lines ("unknown control
     * message '...'") and no known type needs an escape. */
    text_escape_n(h.type_str.p, h.type_str.n, m->type, sizeof m->type);
    /* A token over the limit is said, not dropped: the master names it
     * rather than asking for a token the node did send. */
    if ((h.has & FH_TOKEN) && h.token.n < sizeof m->token)
        memcpy(m->token, h.token.p, h.token.n);
    else if (h.has & FH_TOKEN)
        m->token_too_long = true;
    json_error_t je;
    if (h.payload == 0) {
        m->body = json_object();
    } else {
        m->body = json_loadb((const char *)payload, h.payload, JSON_REJECT_DUPLICATES, &je);
        if (!m->body || !json_is_object(m->body)) {
            char why[100];
            text_escape(m->body ? "" : je.text, why, sizeof why); /* it may quote the peer's bytes */
            snprintf(d->err, sizeof d->err, "control '%.31s': payload is not a JSON object%s%.80s", m->type,
                     m->body ? "" : ": ", why);
            json_decref(m->body);
            m->body = NULL;
            return FRAME_BAD;
        }
    }
    *consumed = used;
    return FRAME_OK;
}

frame_status ctl_read_stream(frame_decoder *d, size_t avail, ctl_view_fn view, void *ctx, ctl_msg *m,
                             size_t *consumed)
{
    *consumed = 0;
    size_t need = FRAME_PREFIX_LEN;
    for (;;) {
        if (avail < need)
            return FRAME_NEED_MORE;
        const uint8_t *p = view(ctx, need);
        if (!p) {
            snprintf(d->err, sizeof d->err, "out of memory");
            return FRAME_BAD;
        }
        size_t more;
        frame_status st = ctl_decode_view(d, p, need, m, consumed, &more);
        if (st != FRAME_NEED_MORE)
            return st;
        need = more; /* the prefix, then the header, then the payload */
    }
}

int ctl_connect(ctl_conn *c, const char *hostport, double timeout_s, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    frame_decoder_init(&c->dec, CTL_MAX_BODY);
    snprintf(c->peer, sizeof c->peer, "%s", hostport);
    char host[256];
    uint16_t port;
    if (net_parse_hostport(hostport, host, sizeof host, &port, 0, err, errlen) < 0)
        return -1;
    c->fd = net_connect(host, port, (int)(timeout_s * 1000), err, errlen);
    return c->fd < 0 ? -1 : 0;
}

void ctl_close(ctl_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    frame_decoder_free(&c->dec);
}

int ctl_send(ctl_conn *c, const char *type, const char *token, json_t *body, char *err, size_t errlen)
{
    uint8_t *buf;
    size_t len;
    if (ctl_encode(type, token, body, &buf, &len) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t off = 0;
    double deadline = c->send_timeout_s > 0 ? clock_now_s() + c->send_timeout_s : 0;
    while (off < len) {
        ssize_t w = send(c->fd, buf + off, len - off, MSG_NOSIGNAL | (deadline > 0 ? MSG_DONTWAIT : 0));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && deadline > 0) {
            /* No room: wait for some, but not past the bound. */
            double left = deadline - clock_now_s();
            struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
            int r = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
            if (r > 0 || (r < 0 && errno == EINTR))
                continue;
            c->lost = true;
            snprintf(err, errlen, "master %s: nothing could be sent for %g s (is this host cut off from it?)",
                     c->peer, c->send_timeout_s);
            free(buf);
            return -1;
        }
        if (w <= 0) {
            c->lost = true;
            snprintf(err, errlen, "master %s: connection lost (%s)", c->peer, strerror(errno));
            free(buf);
            return -1;
        }
        off += (size_t)w;
    }
    free(buf);
    return 0;
}

int ctl_recv(ctl_conn *c, int timeout_ms, ctl_msg *m, char *err, size_t errlen)
{
    for (;;) {
        size_t used;
        frame_status st = ctl_decode(&c->dec, c->buf, c->len, m, &used);
        if (st == FRAME_OK) {
            memmove(c->buf, c->buf + used, c->len - used);
            c->len -= used;
            if (c->heard == CTL_HEARD_NOTHING)
                c->heard = CTL_HEARD_FRAME;
            return 1;
        }
        if (st != FRAME_NEED_MORE) {
            if (c->heard != CTL_HEARD_NOTHING || !peer_not_psbench(c->peer, "master", c->buf, c->len, err, errlen))
                snprintf(err, errlen, "master %s sent a bad frame: %s", c->peer, c->dec.err);
            return -1;
        }
        struct pollfd pfd = {c->fd, POLLIN, 0};
        int rc = poll(&pfd, 1, timeout_ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return rc == 0 ? 0 : -1;
        if (c->cap - c->len < 65536) {
            size_t cap = c->cap ? c->cap * 2 : 131072;
            uint8_t *nb = realloc(c->buf, cap);
            if (!nb) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            c->buf = nb;
            c->cap = cap;
        }
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            c->lost = true;
            if (c->heard != CTL_HEARD_NOTHING)
                snprintf(err, errlen, "master %s closed the control connection", c->peer);
            else if (c->len == 0)
                peer_no_answer(c->peer, "master", true, 0, err, errlen);
            else if (!peer_not_psbench(c->peer, "master", c->buf, c->len, err, errlen))
                snprintf(err, errlen, "master %s closed the connection in the middle of its first message",
                         c->peer);
            return -1;
        }
        c->len += (size_t)r;
        timeout_ms = 0; /* got bytes: parse, then only take what is there */
    }
}

int ctl_recv_first(ctl_conn *c, double timeout_s, ctl_msg *m, char *err, size_t errlen)
{
    double now = clock_now_s();
    if (c->answer_by > 0 && timeout_s > c->answer_by - now) {
        /* A follower's try: no longer than it has left, yet long enough
         * for a master that listens. */
        timeout_s = c->answer_by - now;
        if (timeout_s < CTL_FIRST_MIN_S)
            timeout_s = CTL_FIRST_MIN_S;
    }
    double deadline = now + timeout_s;
    for (;;) {
        double left = deadline - clock_now_s();
        if (left <= 0) {
            if (c->len == 0 || !peer_not_psbench(c->peer, "master", c->buf, c->len, err, errlen))
                peer_no_answer(c->peer, "master", false, timeout_s, err, errlen);
            return -1;
        }
        int got = ctl_recv(c, (int)(left * 1000) + 1, m, err, errlen);
        if (got < 0)
            return -1;
        if (got == 0)
            continue;
        if (strcmp(m->type, "registered") == 0 || strcmp(m->type, "assign") == 0 || strcmp(m->type, "stop") == 0) {
            c->heard = CTL_HEARD_MASTER;
            follow_say_answered(); /* under --follow: a job, however it ends */
            return 1;
        }
        /* psbench, but not the control plane: a server's data port answers
         * a register with `error` (bad_frame, no hello). */
        snprintf(err, errlen, "%s is not a psbench master (it answered a psbench '%.31s' frame%s)", c->peer,
                 m->type, strcmp(m->type, "error") == 0 ? ", as a server's data port does" : "");
        ctl_msg_clear(m);
        return -1;
    }
}

const char *ctl_str(json_t *o, const char *key, const char *dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

const char *ctl_text(json_t *o, const char *key, const char *dflt, char *buf, size_t len)
{
    text_escape(ctl_str(o, key, dflt), buf, len);
    return buf;
}

int64_t ctl_int(json_t *o, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

double ctl_num(json_t *o, const char *key, double dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

json_t *ctl_take_samples(struct metrics *m)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < metrics_size(m); i++) {
        const double *v;
        size_t n = metrics_pending(m, i, &v);
        if (n == 0)
            continue;
        json_t *a = json_array();
        for (size_t k = 0; k < n; k++)
            json_array_append_new(a, json_real(v[k]));
        json_object_set_new(o, metrics_key_at(m, i), a);
    }
    metrics_clear_pending(m);
    return o;
}
