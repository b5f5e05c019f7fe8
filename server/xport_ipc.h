/* xport_ipc.h — the CUDA IPC transport's state on a trainer connection,
 * and its `export` exchange (docs/protocol.md, "CUDA IPC on one GPU"); its
 * ops are xport_ipc (xport.h). For the connection (conn.h holds the
 * state) and the export's handler (conn_hello.c): this decides and
 * encodes; the connection sends. */
#ifndef PSBENCH_XPORT_IPC_H
#define PSBENCH_XPORT_IPC_H

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
 * only by xport_ipc.c. */
typedef struct xport_ipc_state {
    bool offered;   /* the welcome offered it (`gpu`) */
    devpeer *peer;  /* the trainer's export, open on the device; NULL: none taken */
    uint64_t bytes; /* of GPU memory the trainer exported */
} xport_ipc_state;

/* The server's answer to the `export` of the trainer `who` (rank) over a
 * link after its hello (shm: a shared-memory one): ERR_NONE with the reply
 * frame encoded into reply (*rlen bytes; x->peer open from then on), or
 * the code to answer with and why in msg (nothing changed). */
frame_errcode xport_ipc_export(struct server *s, xport_ipc_state *x, bool shm, const char *who, uint64_t rank,
                               const frame_hdr *h, uint8_t *reply, size_t cap, size_t *rlen, char *msg,
                               size_t len);

#endif
