/* xport.h — how one of a trainer's connections to a server carries its
 * payloads: one ops table per transport (xport_tcp.c: inline on the TCP
 * socket; xport_shm.c: the server's Unix socket, payloads named in shared
 * segments; xport_ipc.c: that, with dense buckets in GPU memory by CUDA
 * IPC), all in one registry (xport.c). The client's send queue and
 * result reader (client.c) and its handshake (client_hello.c) call a
 * connection's table and name no transport; docs/protocol.md has the
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

/* The registry's index. A connection starts on TCP; the handshake moves
 * it to SHM (the server's redirect, followed) and from there to IPC (the
 * server's offer, exported): never back. */
typedef enum xport_kind { XPORT_TCP = 0, XPORT_SHM, XPORT_IPC, XPORT_KINDS } xport_kind;

/* Where an answer's payload lies when it did not come on the socket
 * (xport_ops.in_place): host, in the server's segment; or dev, in the
 * server's GPU memory (devmem_none() otherwise). */
typedef struct xport_in {
    const uint8_t *host;
    devmem dev;
} xport_in;

typedef struct xport_ops {
    xport_kind kind;
    /* How it describes itself: results.json's links[].transport ("tcp",
     * "shm") and links[].cuda_ipc; the start line's words, and the reason
     * there is no CUDA IPC when nothing more precise was noted. */
    const char *link;
    bool cuda_ipc;
    const char *words;
    const char *no_ipc;
    /* Hello: the descriptor this link hands over with it (the client's
     * segment; -1: none) and its size. */
    int (*hello_segment)(const client *cl, const client_conn *c, uint64_t *size);
    /* The handshake's reads: a descriptor that comes with them is kept in
     * c->rx_fd (the first; others closed). */
    ssize_t (*recv)(client_conn *c, uint8_t *dst, size_t room);
    /* The welcome, read on this link: take what it hands over (the
     * server's segment). 0, or -1 with err. */
    int (*welcomed)(client_conn *c, const frame_hdr *w, char *err, size_t errlen);
    /* The welcome offers CUDA IPC (`gpu`): export and open, or note why
     * not (c->gpu_note). *ipc: c now exchanges dense buckets on the GPU.
     * NULL: the offer is not for this link. 0, or -1 with err. */
    int (*gpu_offer)(client *cl, client_conn *c, const frame_hdr *w, double timeout_s, bool *ipc, char *err,
                     size_t errlen);
    /* A push about to be queued: h and *payload rewritten to how its
     * payload travels — inline (unchanged), named in the client's segment
     * (`at`, staged there first when it lies elsewhere) or on the GPU
     * (`dev`). */
    void (*place)(client *cl, client_conn *c, frame_hdr *h, const void **payload);
    /* An answer that names where its payload lies (`at`, `dev`): where,
     * checked before anything reads it; hv is h as if the payload
     * followed. 0, or -1 with err. */
    int (*in_place)(const client *cl, const client_conn *c, const frame_hdr *h, frame_hdr *hv, xport_in *in,
                    char *err, size_t errlen);
    /* Release what this link holds beyond the socket (segment, GPU
     * memory). */
    void (*close)(client *cl, client_conn *c);
} xport_ops;

/* The registry: the table of transport k. */
const xport_ops *xport_get(xport_kind k);

extern const xport_ops xport_tcp_ops, xport_shm_ops, xport_ipc_ops;

/* What CUDA IPC builds on shared memory (xport_shm.c). */
int xport_shm_follow(client *cl, client_conn *c, const frame_hdr *r, char *why, size_t len);
void xport_shm_place(client *cl, client_conn *c, frame_hdr *h, const void **payload);
int xport_shm_answer_at(const client_conn *c, const frame_hdr *h, frame_hdr *hv, xport_in *in, char *err,
                        size_t errlen);
/* What the others refuse with (xport_ipc.c): an answer naming GPU memory. */
int xport_ipc_answer_dev(const client *cl, const client_conn *c, const frame_hdr *h, frame_hdr *hv, xport_in *in,
                         char *err, size_t errlen);
int xport_ipc_export(client *cl, client_conn *c, const frame_hdr *w, double timeout_s, bool *ipc, char *err,
                     size_t errlen);

#endif
