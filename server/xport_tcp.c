/* xport_tcp.c — the transport every connection has: payloads after their
 * header on the socket (TCP, or the Unix socket of a trainer that handed
 * over no segment). Its only offer is splicing big results to a TCP
 * trainer that promises to read them before it pushes a later batch
 * (outq.h); the reader streams its pushes (conn_dispatch.c).
 */
#include "server/server.h"
#include "server/xport.h"
#include "shared/net.h"

#include <sys/socket.h>

static ssize_t xport_tcp_recv(conn *c, uint8_t *buf, size_t want)
{
    return recv(c->fd, buf, want, 0);
}

/* Results are lent only to a trainer that promises to read them before it
 * pushes a later batch: the protocol does not otherwise forbid pushing
 * ahead, and such a client would read reused pages. */
static void xport_tcp_welcome(conn *c, bool reads_first, frame_hdr *w)
{
    (void)w;
    server *s = c->srv;
    if (s->cfg.splice && reads_first && c->link->splice)
        outq_splice_on(&c->out, s->cfg.max_queued);
}

const xport_ops xport_tcp = {
    .name = "tcp",
    .peer_name = net_peer_name,
    .recv = xport_tcp_recv,
    .splice = true,
    .place = XPORT_INLINE,
    .field = 0,
    .welcome = xport_tcp_welcome,
};
