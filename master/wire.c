/* wire.c — the nodes' connections: accept, read, write, refuse, send, free
 * (wire.h). What comes in is gated here before any handler sees it: a
 * node that has not registered may send one register of bounded size; a
 * whole message goes to the handler of its type (the table run.c gives). */
#include "master/wire.h"
#include "master/admit.h"
#include "shared/log.h"
#include "shared/text.h"

#include <arpa/inet.h>
#include <assert.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Before a node has registered, the master takes no more than a register
 * needs: a header of WIRE_PREAUTH_HEADER bytes (type, token, payload) and
 * a body of WIRE_PREAUTH_BODY (a register with its environment is under
 * 2 KiB; a host with 16 GPUs, 6). A frame that declares more is refused at
 * its header, before any of it is buffered, and the connection goes: a peer
 * without the token cannot make the master hold more than this (times
 * ADMIT_MAX_PENDING connections) however much it declares. Once registered,
 * a node's messages may have up to CTL_MAX_BODY. */
#define WIRE_PREAUTH_HEADER 1024u
#define WIRE_PREAUTH_BODY (16u << 10)
#define WIRE_PREAUTH_FRAME (FRAME_PREFIX_LEN + WIRE_PREAUTH_HEADER + WIRE_PREAUTH_BODY)
/* A refused node has this long to read its reason and close. */
#define WIRE_REFUSED_LINGER_S 5.0
/* A connection that has not registered within this long is dropped: idle
 * ones would otherwise pile up (each holds a descriptor). */
#define WIRE_REGISTER_TIMEOUT_S 30.0

/* ---- sending ------------------------------------------------------------ */

/* Tell the listener how many connections have not registered (its bound,
 * admit.h). */
static void wire_count_pending(master *m)
{
    unsigned pending = 0;
    for (node *n = m->nodes; n; n = n->next)
        pending += !n->registered && n->bev != NULL;
    if (m->admit)
        admit_set_pending(m->admit, pending);
}

void wire_send(node *n, const char *type, json_t *body)
{
    if (!n->bev) {
        json_decref(body);
        return;
    }
    uint8_t *buf;
    size_t len;
    if (ctl_encode(type, NULL, body, &buf, &len) == 0) {
        bufferevent_write(n->bev, buf, len);
        free(buf);
    }
    json_decref(body);
}

void wire_send_all(master *m, const char *type, json_t *body)
{
    for (node *n = m->nodes; n; n = n->next)
        if (n->registered)
            wire_send(n, type, json_incref(body));
    json_decref(body);
}

/* Whether this retryable refusal's reason was logged within the last
 * WIRE_RETRY_SAY_S (and, if not, that it is now). */
#define WIRE_RETRY_SAY_S 60.0
static bool wire_retry_said(master *m, const char *reason)
{
    double now = master_now();
    size_t n = sizeof m->retry_said / sizeof m->retry_said[0], oldest = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(m->retry_said[i].reason, reason, sizeof m->retry_said[i].reason - 1) == 0 &&
            m->retry_said[i].t > 0) {
            if (now - m->retry_said[i].t < WIRE_RETRY_SAY_S)
                return true;
            oldest = i;
            break;
        }
        if (m->retry_said[i].t < m->retry_said[oldest].t)
            oldest = i;
    }
    snprintf(m->retry_said[oldest].reason, sizeof m->retry_said[oldest].reason, "%s", reason);
    m->retry_said[oldest].t = now;
    return false;
}

/* Refused: `stop` (refused) with the reason, then nothing more from it is
 * parsed (wire_on_read); once the reason is out our side ends
 * (wire_on_write), and the node closes — or is dropped after
 * WIRE_REFUSED_LINGER_S (wire_drop_idle). */
void wire_refuse(node *n, const char *reason, bool retry)
{
    assert(!n->registered && n->state == NS_CONNECTED);
    if (retry && wire_retry_said(n->m, reason))
        log_debug("refused %s: %s (it may retry)", n->peer_ip, reason);
    else
        log_warn("refused %s: %s", n->peer_ip, reason);
    json_t *body = json_pack("{s:s, s:s}", "status", "refused", "reason", reason);
    if (retry)
        json_object_set_new(body, "retry", json_true());
    wire_send(n, "stop", body);
    n->refused = true;
    n->t_refused = master_now();
}

void wire_registered(node *n)
{
    assert(n->registered && n->bev);
    /* No read mark any more: a registered node's messages may be as large
     * as the control plane allows. */
    bufferevent_setwatermark(n->bev, EV_READ, 0, 0);
    wire_count_pending(n->m);
}

/* ---- a node's life ------------------------------------------------------ */

static void wire_detach(node *n)
{
    if (n->bev) {
        bufferevent_free(n->bev);
        n->bev = NULL;
    }
}

void wire_free_node(node *n)
{
    wire_detach(n);
    json_decref(n->timed_result);
    json_decref(n->warmup_result);
    json_decref(n->diverged);
    json_decref(n->environment);
    json_decref(n->gpu_timed);
    json_decref(n->links);
    json_decref(n->calls);
    free(n);
}

/* A connection that never registered is gone (closed, malformed, refused,
 * silent): free it now, so that nothing of it stays however many come and
 * go. Only from the end of its own callbacks, or the tick. */
static void wire_forget(master *m, node *n)
{
    assert(!n->registered);
    for (node **pp = &m->nodes; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            break;
        }
    wire_free_node(n);
    wire_count_pending(m);
}

void wire_drop_idle(master *m, double now)
{
    for (node *n = m->nodes, *next; n; n = next) {
        next = n->next;
        if (n->registered)
            continue;
        if (n->refused && now - n->t_refused > WIRE_REFUSED_LINGER_S) {
            wire_forget(m, n);
        } else if (!n->refused && now - n->last_seen > WIRE_REGISTER_TIMEOUT_S) {
            log_warn("dropping a connection from %s: no register within %.0f s", n->peer_ip,
                     WIRE_REGISTER_TIMEOUT_S);
            wire_forget(m, n);
        }
    }
}

/* ---- reading ------------------------------------------------------------ */

static const wire_handler *wire_handler_of(const wire_ops *ops, const char *type)
{
    for (size_t i = 0; i < ops->nhandlers; i++)
        if (strcmp(ops->handlers[i].type, type) == 0)
            return &ops->handlers[i];
    return NULL;
}

/* A whole message: to its type's handler. Every message is a sign of life
 * (the silence checks); before a register, nothing else is taken. */
static void wire_dispatch(master *m, node *n, ctl_msg *msg)
{
    assert(n->bev && !n->refused && n->registered == (n->state != NS_CONNECTED));
    n->last_seen = master_now();
    const wire_handler *h = wire_handler_of(m->wire, msg->type);
    if (!n->registered && !(h && h->before_register)) {
        wire_refuse(n, "the first message must be register", false);
        return;
    }
    if (!h) {
        char type[sizeof msg->type * 4];
        text_escape(msg->type, type, sizeof type);
        log_warn("%s %u sent unknown control message '%s'", agg_role_name(n->role), n->rank, type);
        return;
    }
    h->fn(m, n, msg);
}

/* ctl_read_stream's view of an input evbuffer. */
static const uint8_t *wire_pullup(void *in, size_t n)
{
    return evbuffer_pullup(in, (ev_ssize_t)n);
}

/* Bytes that are no control message (dec's words): a node that has not
 * registered and declared too much is refused at the header (none of the
 * rest is read); otherwise the connection goes, a registered node's end
 * being the layer above's to judge. */
static void wire_on_bad_frame(master *m, node *n, frame_status st, const frame_decoder *dec)
{
    char what[sizeof dec->err * 2];
    text_escape(dec->err, what, sizeof what); /* it may quote the peer's bytes */
    if (!n->registered && st == FRAME_TOO_LARGE) {
        char why[300];
        snprintf(why, sizeof why, "a node's first message must be a register of at most %u bytes (%s)",
                 WIRE_PREAUTH_FRAME, dec->err);
        wire_refuse(n, why, false);
        return;
    }
    if (n->registered) {
        m->wire->broken(m, n, what);
    } else {
        char who[300];
        node_describe(n, who, sizeof who);
        log_warn("%s sent a malformed control message: %s", who, what);
    }
    wire_detach(n);
}

static void wire_on_read(struct bufferevent *bev, void *arg)
{
    node *n = arg;
    master *m = n->m;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (n->refused) {
        /* Told why already: whatever follows stays unread. The read mark
         * (at most one register) stops libevent reading it, so that a peer
         * that goes on sending costs no memory and no work; one that
         * closes is seen (its EOF fits under the mark) and freed. */
        return;
    }
    frame_decoder dec;
    frame_decoder_init(&dec, CTL_MAX_BODY);
    while (n->bev && !n->refused) {
        /* The bounds before registration: a register's size at most (a
         * register earlier in this loop lifts them). */
        dec.max_payload = n->registered ? CTL_MAX_BODY : WIRE_PREAUTH_BODY;
        dec.max_header = n->registered ? FRAME_HDR_MAX : WIRE_PREAUTH_HEADER;
        ctl_msg msg;
        size_t used;
        frame_status st = ctl_read_stream(&dec, evbuffer_get_length(in), wire_pullup, in, &msg, &used);
        if (st == FRAME_NEED_MORE)
            break;
        if (st != FRAME_OK) {
            wire_on_bad_frame(m, n, st, &dec);
            break;
        }
        evbuffer_drain(in, used);
        wire_dispatch(m, n, &msg);
        ctl_msg_clear(&msg);
    }
    frame_decoder_free(&dec);
    if (!n->bev && !n->registered)
        wire_forget(m, n);
}

/* Output written: a refused node's reason is out, so our side ends (a FIN
 * after the reason; the node closes once it has read it). */
static void wire_on_write(struct bufferevent *bev, void *arg)
{
    node *n = arg;
    if (n->refused && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        shutdown(bufferevent_getfd(bev), SHUT_WR);
}

static void wire_on_event(struct bufferevent *bev, short what, void *arg)
{
    node *n = arg;
    master *m = n->m;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    wire_detach(n);
    if (!n->registered) {
        wire_forget(m, n);
        return;
    }
    m->wire->closed(m, n);
}

void wire_on_accept(void *master_arg, int fd, const struct sockaddr *sa, int salen)
{
    (void)salen;
    master *m = master_arg;
    node *n = calloc(1, sizeof *n);
    if (!n) {
        evutil_closesocket(fd);
        return;
    }
    n->m = m;
    n->state = NS_CONNECTED;
    n->last_seen = master_now();
    n->rows_touched = -1;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, n->peer_ip,
                  sizeof n->peer_ip);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, n->peer_ip,
                  sizeof n->peer_ip);
    n->bev = bufferevent_socket_new(m->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!n->bev) {
        evutil_closesocket(fd);
        free(n);
        return;
    }
    bufferevent_setcb(n->bev, wire_on_read, wire_on_write, wire_on_event, n);
    /* Until it registers, the input buffer holds one register at most:
     * libevent stops reading at the mark (wire_on_read has refused any
     * frame that would not fit by then). */
    bufferevent_setwatermark(n->bev, EV_READ, 0, WIRE_PREAUTH_FRAME);
    bufferevent_enable(n->bev, EV_READ | EV_WRITE);
    n->next = m->nodes;
    m->nodes = n;
    wire_count_pending(m);
}
