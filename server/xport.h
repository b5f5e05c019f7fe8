/* xport.h — the server's transports: where a trainer's bytes travel
 * (docs/protocol.md). One ops table per transport, each in its own file
 * (xport_tcp.c, xport_shm.c, xport_ipc.c), all in one registry
 * (xport_all, xport.c); the connection's files (conn*.c) ask the registry
 * and never branch on which transport it is.
 *
 * A transport is a place a payload can be: after its header on the socket
 * (tcp: the fallback every connection has), in the trainer's shared-memory
 * segment (shm: `at`) or in its exported GPU memory (ipc: `dev`). Each
 * negotiates at the hello, says what it offers in the welcome, finds a
 * push's payload, lends results where its trainers read them in place, and
 * releases what it holds for a connection; two are also links a trainer
 * connects over (tcp, and shm's Unix socket: conn.link). Its
 * per-connection state lives in the connection (conn.h: seg, rx_fd and
 * in_place for shm, ipc for CUDA IPC), changed only by its own file (and
 * rx_fd by the reader's check that no frame but the hello brings one).
 */
#ifndef PSBENCH_XPORT_H
#define PSBENCH_XPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/bufpool.h"
#include "server/conn.h"
#include "shared/frame.h"

struct server;

/* Where a push's payload is, and where a result is lent. */
typedef enum xport_place {
    XPORT_INLINE = 0, /* after the header, on the socket */
    XPORT_SEGMENT,    /* in the trainer's segment (`at`); results in the server's */
    XPORT_DEVICE,     /* in the trainer's GPU memory (`dev`); results in the device's shared memory */
    XPORT_PLACES
} xport_place;

/* A result (or params) for one or more connections: its header encoded at
 * most once per place, once for all of them, each only when some
 * connection needs it. */
typedef struct xport_answer {
    const frame_hdr *h; /* with payload = the payload's length */
    psbuf *payload;     /* NULL or empty: none */
    uint8_t buf[XPORT_PLACES][256];
    size_t len[XPORT_PLACES]; /* 0: not encoded yet */
    bool absent[XPORT_PLACES]; /* the payload is not in that place: nothing to lend there */
} xport_answer;

/* Where one push's payload is: decided once per push (xport_place_push). */
typedef struct xport_push {
    const struct xport_ops *x; /* the transport that holds it */
    uint64_t want;             /* the bytes its shape needs (frame_push_payload_size) */
    frame_hdr hv;              /* the header as if its payload followed it: `payload` its length */
    const uint8_t *bytes;      /* XPORT_SEGMENT: the payload, in the trainer's pages */
} xport_push;

typedef struct xport_ops {
    const char *name;  /* in logs */
    /* As a connection's link (conn.link: the socket it was accepted on,
     * TCP's or the Unix socket's): name the peer for logs, and read (the
     * Unix socket's reads take the descriptors that come with the bytes).
     * NULL for a transport that is no link (ipc). */
    void (*peer_name)(int fd, char *buf, size_t len);
    ssize_t (*recv)(conn *c, uint8_t *buf, size_t want);
    bool splice; /* as a link: a TCP socket, to which big results may be spliced (outq.h) */
    xport_place place; /* where its pushes' payloads are */
    /* The header field that places a push's payload with this transport;
     * 0: after the header (tcp, the one a push without such a field uses). */
    uint32_t field;
    /* The hello, before the trainer joins: 0 to go on, -1 when it was
     * answered here (an error, or shm's redirect). NULL: nothing to do. */
    int (*hello)(conn *c, const frame_hdr *h);
    /* The trainer joined: set up what this transport offers it
     * (reads_first: its hello's zerocopy promise) and add its fields to
     * the welcome w. NULL: nothing. */
    void (*welcome)(conn *c, bool reads_first, frame_hdr *w);
    /* Send the encoded welcome itself (shm: the segment's descriptor rides
     * with it); false: queue it as any frame. NULL: never. */
    bool (*send_welcome)(conn *c, uint8_t *buf, size_t n);
    /* A push that names this place: where its bytes are, checked before
     * anything reads them (p->hv, p->bytes). ERR_NONE, or the code to
     * answer with and why in msg. NULL: inline, nothing to check. */
    frame_errcode (*payload)(conn *c, const frame_hdr *h, xport_push *p, char *msg, size_t len);
    /* The push, admitted: its payload (p->hv.payload > 0) handed to the
     * futures layer from where it lies, counted in the server's figures.
     * NULL: inline, the reader streams it. */
    void (*take)(conn *c, const xport_push *p);
    /* Whether c reads answer a in this transport's place (on_gpu: its push
     * came from its GPU memory); then the header that names the payload
     * there, encoded once into a. NULL: never lends. */
    const uint8_t *(*lend)(conn *c, xport_answer *a, bool on_gpu, size_t *len);
    /* n bytes of a result were lent here: the server's figure. */
    void (*lent)(struct server *s, uint64_t n);
    /* Before every push on c, whatever its place (ipc: the device waits
     * for what the trainer recorded). NULL: nothing. */
    void (*before_push)(conn *c);
    /* The connection closed: what it holds that a closed socket no longer
     * needs (a descriptor not taken). NULL: nothing. */
    void (*close)(conn *c);
    /* The connection is freed: the rest (mappings; nothing reads them any
     * more). NULL: nothing. */
    void (*free)(conn *c);
} xport_ops;

extern const xport_ops xport_tcp, xport_shm, xport_ipc;

/* Every transport, each over the one before it (shm over the Unix
 * socket's link, ipc over shm's): the hello negotiates them in this order;
 * a push's place and a result's loan are looked up from the last, so a
 * push naming both `dev` and `at` is ipc's (which refuses it). */
extern const xport_ops *const xport_all[];
extern const size_t xport_count;

/* The transport that holds the payload of push h (tcp when h names no
 * place). */
const xport_ops *xport_of_push(const frame_hdr *h);

/* a: h with payload, nothing encoded yet. */
void xport_answer_init(xport_answer *a, const frame_hdr *h, psbuf *payload);

#endif
