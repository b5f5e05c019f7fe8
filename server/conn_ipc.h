/* conn_ipc.h — CUDA IPC on a trainer connection (docs/protocol.md, "CUDA
 * IPC on one GPU"): the offer in the welcome, the `export` exchange, pushes
 * and results named by an offset in GPU memory. Private to the ipc
 * transport (xport_ipc.c) and the export's handler (conn_hello.c): it
 * decides and encodes; the connection sends. */
#ifndef PSBENCH_CONN_IPC_H
#define PSBENCH_CONN_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/bufpool.h"
#include "server/device.h"
#include "shared/frame.h"

struct server;

/* One connection's CUDA IPC: what its welcome offered and, once the
 * trainer's export is taken, its GPU memory and event, open on the
 * server's device (pushes name bytes there, `dev`; results name theirs in
 * the device's shared memory). Held by the connection (conn.h), changed
 * only here. */
typedef struct conn_ipc {
    bool offered;   /* the welcome offered it (`gpu`) */
    devpeer *peer;  /* the trainer's export, open on the device; NULL: none taken */
    uint64_t bytes; /* of GPU memory the trainer exported */
} conn_ipc;

/* Whether a welcome offers CUDA IPC (`gpu`): a shared-memory link (shm), a
 * device with peers, a kind that takes pushes from them, --gpu-share > 0. */
bool conn_ipc_offer(const struct server *s, bool shm);
/* The server's answer to the `export` of the trainer `who` (rank) over a
 * link after its hello (shm: a shared-memory one): ERR_NONE with the reply
 * frame encoded into reply (*rlen bytes; x->peer open from then on), or
 * the code to answer with and why in msg (nothing changed). */
frame_errcode conn_ipc_export(struct server *s, conn_ipc *x, bool shm, const char *who, uint64_t rank,
                              const frame_hdr *h, uint8_t *reply, size_t cap, size_t *rlen, char *msg, size_t len);
/* A push naming `dev`: checked against x's export (ERR_BAD_FRAME: the
 * connection closes; ERR_TOO_LARGE), and *hv = h with its payload length,
 * for the checks every push goes through. */
frame_errcode conn_ipc_push(const conn_ipc *x, const frame_hdr *h, uint64_t max_payload, frame_hdr *hv, char *msg,
                            size_t len);
/* h as read from the GPU memory the server shares (`dev`, no payload), 0
 * when the result has no bytes there (psbuf.twin). */
size_t conn_ipc_encode_result(const frame_hdr *h, const psbuf *payload, uint8_t *buf, size_t cap);
/* The connection is over: its peer goes back to the device. */
void conn_ipc_close(struct server *s, conn_ipc *x);

#endif
