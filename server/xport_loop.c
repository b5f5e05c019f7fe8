/* xport_loop.c — a test-only transport (xport.h), built with the tests
 * (PSBENCH_TEST_XPORTS): TCP from a trainer on this host's loopback
 * interface, asked for by name. It is here to show, and to keep showing,
 * that a transport is a file of its own and a line in the registry
 * (xport.c): nothing in the connection's files knows it.
 *
 * A hello on TCP with `link` "loop" from a loopback address (127.0.0.0/8,
 * ::1, an IPv4-mapped 127.x) moves the connection's link to this table; the
 * welcome says `link` "loop" back, so that the trainer knows it was taken.
 * From any other address it is refused (`unsupported`). Payloads travel
 * inline, as on TCP, and the TCP transport's offer (splicing big results)
 * holds for it too: its welcome runs for every connection not on the Unix
 * socket. */
#include "server/conn_int.h"
#include "server/server.h"
#include "server/xport.h"
#include "shared/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

extern const xport_ops xport_loop; /* below; xport.c enters it in the registry */

static ssize_t xport_loop_recv(conn *c, uint8_t *buf, size_t want)
{
    return recv(c->fd, buf, want, 0);
}

/* Whether fd's peer is on a loopback address. */
static bool xport_loop_peer(int fd)
{
    struct sockaddr_storage ss;
    socklen_t n = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &n) < 0)
        return false;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static int xport_loop_hello(conn *c, const frame_hdr *h)
{
    if (!(h->has & FH_TRANSPORT) || !frame_str_eq(h->transport, "loop"))
        return 0;
    if (c->link != &xport_tcp) {
        conn_send_error(c, ERR_UNSUPPORTED, "the loop transport is asked for on TCP only", h);
        return -1;
    }
    if (!xport_loop_peer(c->fd)) {
        conn_send_error(c, ERR_UNSUPPORTED,
                        "the loop transport takes trainers on this host's loopback addresses only (a test transport)",
                        h);
        return -1;
    }
    c->link = &xport_loop;
    return 0;
}

static void xport_loop_welcome(conn *c, bool reads_first, frame_hdr *w)
{
    (void)reads_first;
    if (c->link != &xport_loop)
        return;
    w->transport = frame_str_c("loop");
    w->has |= FH_TRANSPORT;
}

const xport_ops xport_loop = {
    .name = "loop",
    .peer_name = net_peer_name,
    .recv = xport_loop_recv,
    .splice = true,
    .place = XPORT_INLINE,
    .field = 0,
    .hello = xport_loop_hello,
    .welcome = xport_loop_welcome,
};
