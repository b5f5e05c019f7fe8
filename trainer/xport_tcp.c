/* xport_tcp.c — the TCP transport of a trainer's connection (xport.h):
 * every payload inline on the socket, both ways. Where a connection
 * starts; the handshake may move it on (client_hello.c). */
#include "trainer/client_impl.h"

#include <assert.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static int xtcp_hello_segment(const client *cl, const client_conn *c, uint64_t *size)
{
    (void)cl, (void)c, (void)size;
    return -1;
}

static ssize_t xtcp_recv(client_conn *c, uint8_t *dst, size_t room)
{
    return recv(c->fd, dst, room, 0);
}

/* No descriptor travels on TCP: a welcome that names a segment is wrong. */
static int xtcp_welcomed(client_conn *c, const frame_hdr *w, char *err, size_t errlen)
{
    if (c->rx_fd >= 0)
        close(c->rx_fd);
    c->rx_fd = -1;
    if (!(w->has & FH_SEGMENT))
        return 0;
    snprintf(err, errlen, "server %s: its welcome names a segment on a TCP connection", c->addr);
    return -1;
}

/* Inline: the payload as given (bytes only in GPU memory never come
 * here: a caller has them only where every link is CUDA IPC). */
static void xtcp_place(client *cl, client_conn *c, frame_hdr *h, const client_src *src, const void **payload)
{
    (void)cl, (void)c, (void)h, (void)payload;
    assert(src->host || !src->on_dev);
}

static void xtcp_close(client *cl, client_conn *c)
{
    (void)cl, (void)c; /* the socket is the client's */
}

static void xtcp_describe(const client_conn *c, char *buf, size_t len)
{
    client_describe_no_ipc(c, "TCP", "it runs over shared memory only", buf, len);
}

const xport_ops xport_tcp_ops = {
    .link = "tcp",
    .cuda_ipc = false,
    .describe = xtcp_describe,
    .hello_segment = xtcp_hello_segment,
    .recv = xtcp_recv,
    .welcomed = xtcp_welcomed,
    .gpu_link = false, /* CUDA IPC is offered on the Unix socket only */
    .follow = NULL,
    .gpu_offer = NULL,
    .place = xtcp_place,
    .read_in_place = xport_refuse_in_place,
    .close = xtcp_close,
};
