/* xport.h — how one of a trainer's connections to a server carries its
 * payloads: one ops table per transport (xport_tcp.c: inline on the TCP
 * socket; xport_shm.c: the server's Unix socket, payloads named in shared
 * segments; xport_ipc.c: that, with dense buckets in GPU memory by CUDA
 * IPC, building on shared memory), all in one registry (xport.c). The
 * client's send queue and result reader (client.c) and its handshake
 * (client_hello.c) reach a transport only through its table; a transport
 * calls what lies beneath it (client_io.c, client_impl.h) and, downward
 * only, shared memory's (ipc builds on it; tcp refuses `at` with its
 * check), which knows nothing of ipc. Calls run one way: client.c ->
 * client_hello.c -> transports -> client_io.c. docs/protocol.md has the
 * wire side of each. */
#ifndef PSBENCH_XPORT_H
#define PSBENCH_XPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/devmem.h"
#include "shared/frame.h"
#include "trainer/client.h"

/* The built-in transports' places in the registry. A connection starts
 * on TCP; the handshake moves it to a transport its hello asked for by
 * name (SHM: the server's redirect, followed; another: the welcome names
 * it) and from SHM to IPC (the server's offer, exported): forward in the
 * registry's order, never back. */
typedef enum xport_kind { XPORT_TCP = 0, XPORT_SHM, XPORT_IPC } xport_kind;

typedef struct xport_ops {
    /* How it describes itself: results.json's links[].transport ("tcp",
     * "shm") and links[].cuda_ipc; describe: the start line's words for
     * connection c ("TCP (no CUDA IPC: ...)"). */
    const char *link;
    bool cuda_ipc;
    void (*describe)(const client_conn *c, char *buf, size_t len);
    /* Hello: the descriptor this link hands over with it (the client's
     * segment; -1: none) and its size. */
    int (*hello_segment)(const client *cl, const client_conn *c, uint64_t *size);
    /* The handshake's reads: a descriptor that comes with them is kept in
     * c->rx_fd (the first; others closed). */
    ssize_t (*recv)(client_conn *c, uint8_t *dst, size_t room);
    /* The welcome, read on this link: take what it hands over (the
     * server's segment). 0, or -1 with err. */
    int (*welcomed)(client_conn *c, const frame_hdr *w, char *err, size_t errlen);
    /* The welcome's offer of CUDA IPC (`gpu`) is for this link. */
    bool gpu_link;
    /* Asked for by name: whether the first hello on TCP asks for this
     * transport (`link`, its link name); the last in the registry that
     * says so is asked for. NULL: never asked. */
    bool (*asked)(const client_cfg *cfg);
    /* Asked, and the server welcomed c on TCP without taking it (nor
     * redirecting it): 0 to go on over TCP, c->link_note saying why; -1
     * with err. A server that takes it in place says so in the welcome
     * (`link`, this transport's name): the handshake moves c here. */
    int (*declined)(const client_cfg *cfg, client_conn *c, char *err, size_t errlen);
    /* How a link moves onto this transport in the handshake, called while
     * c is still on the one before (NULL: never this way). follow (shm):
     * the server redirected c (TCP) to its Unix socket; connect there when
     * that is possible from here, making the client's segment: 1 when c's
     * socket is now the Unix one (the caller moves c to this transport), 0
     * when not, with why (c still on TCP), -1 when that is an error (why).
     * gpu_offer (ipc): the welcome on a gpu_link offers CUDA IPC; export
     * and open, or note why not (c->gpu_note); *ipc: c now exchanges dense
     * buckets on the GPU (the caller moves it here). 0, or -1 with err. */
    int (*follow)(client *cl, client_conn *c, const client_cfg *cfg, const frame_hdr *r, char *why, size_t len);
    int (*gpu_offer)(client *cl, client_conn *c, const frame_hdr *w, double timeout_s, bool *ipc, char *err,
                     size_t errlen);
    /* Stage or send: a push about to be queued, h and *payload (src->host
     * to begin with) rewritten to how its payload travels — inline
     * (unchanged), named in the client's segment (`at`, staged there
     * first when it lies elsewhere) or in GPU memory (`dev`). The one
     * place a push's wire form is decided. */
    void (*place)(client *cl, client_conn *c, frame_hdr *h, const client_src *src, const void **payload);
    /* Read a result in place: an answer that names where its payload lies
     * (`at`, `dev`), checked before anything reads it, begun at the sink
     * (client_begin) and handed over from there. 0, or -1 with err. */
    int (*read_in_place)(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen);
    /* Release what this link holds beyond the socket (segment, GPU
     * memory). */
    void (*close)(client *cl, client_conn *c);
} xport_ops;

/* The registry (xport.c): every transport, in the order a connection
 * may move through them; a built-in's table by its place; the place of
 * x; the transport whose link name is n bytes at p (NULL: none). */
extern const xport_ops *const xport_registry[];
extern const size_t xport_count;
const xport_ops *xport_get(xport_kind k);
size_t xport_order(const xport_ops *x);
const xport_ops *xport_named(const char *p, size_t n);

extern const xport_ops xport_tcp_ops, xport_shm_ops, xport_ipc_ops;

/* What CUDA IPC builds on shared memory (xport_shm.c), and what every
 * link refuses `at` with where it holds no segment. */
void xport_shm_place(client *cl, client_conn *c, frame_hdr *h, const client_src *src, const void **payload);
int xport_shm_read_at(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen);
void xport_shm_close(client *cl, client_conn *c);
/* read_in_place of a link that handed nothing over (tcp, loop): an answer
 * naming a segment (`at`) or GPU memory (`dev`) is refused, naming which
 * (the checks of the links that have them say why). -1 with err. */
int xport_refuse_in_place(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen);

#endif
