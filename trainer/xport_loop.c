/* xport_loop.c — a test-only transport of a trainer's connection
 * (xport.h), built with the tests (PSBENCH_TEST_XPORTS): TCP to a server
 * on this host's loopback interface, asked for by name. It is here to show,
 * and to keep showing, that a transport is a file of its own and a line in
 * the registry (xport.c): nothing else in the client knows it.
 *
 * $PSBENCH_XPORT_LOOP=1 in the trainer's environment makes every link's
 * first hello ask for it (`link` "loop", in place of shared memory's); a
 * server built with it takes it from a loopback address and says so in its
 * welcome (`link` "loop"), and the handshake moves the link here. Payloads
 * travel inline on the socket, as on TCP; results.json names the link's
 * transport "loop". A server that does not take it is an error: a test
 * that asks for it means to run over it. */
#include "trainer/client_impl.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool xloop_asked(const client_cfg *cfg)
{
    (void)cfg;
    const char *v = getenv("PSBENCH_XPORT_LOOP");
    return v && strcmp(v, "1") == 0;
}

static int xloop_declined(const client_cfg *cfg, client_conn *c, char *err, size_t errlen)
{
    (void)cfg;
    snprintf(err, errlen,
             "server %s did not take the loop transport ($PSBENCH_XPORT_LOOP=1 asks for it: a test build's server "
             "on this host's loopback takes it)",
             c->addr);
    return -1;
}

static int xloop_hello_segment(const client *cl, const client_conn *c, uint64_t *size)
{
    (void)cl, (void)c, (void)size;
    return -1; /* no segment: payloads are inline */
}

static ssize_t xloop_recv(client_conn *c, uint8_t *dst, size_t room)
{
    return recv(c->fd, dst, room, 0);
}

/* The handshake reads the welcome on TCP and moves the link here after it:
 * this is never the link a welcome is read on. */
static int xloop_welcomed(client_conn *c, const frame_hdr *w, char *err, size_t errlen)
{
    (void)w;
    snprintf(err, errlen, "server %s: a welcome on a loop link, which was welcomed already", c->addr);
    return -1;
}

static void xloop_place(client *cl, client_conn *c, frame_hdr *h, const client_src *src, const void **payload)
{
    (void)cl, (void)c, (void)h, (void)payload;
    assert(src->host || !src->on_dev);
}

static void xloop_close(client *cl, client_conn *c)
{
    (void)cl, (void)c; /* the socket is the client's */
}

static void xloop_describe(const client_conn *c, char *buf, size_t len)
{
    client_describe_no_ipc(c, "loop (TCP on the loopback interface)", "a test transport", buf, len);
}

const xport_ops xport_loop_ops = {
    .link = "loop",
    .cuda_ipc = false,
    .describe = xloop_describe,
    .hello_segment = xloop_hello_segment,
    .recv = xloop_recv,
    .welcomed = xloop_welcomed,
    .gpu_link = false,
    .asked = xloop_asked,
    .declined = xloop_declined,
    .follow = NULL,
    .gpu_offer = NULL,
    .place = xloop_place,
    .read_in_place = xport_refuse_in_place, /* nothing handed over: as TCP */
    .close = xloop_close,
};
