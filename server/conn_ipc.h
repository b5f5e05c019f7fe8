/* conn_ipc.h — CUDA IPC on a trainer connection (docs/protocol.md, "CUDA
 * IPC on one GPU"): the offer in the welcome, the `export` exchange, pushes
 * and results named by an offset in GPU memory. Private to the transport
 * (conn.c): it decides and encodes; conn.c sends. */
#ifndef PSBENCH_CONN_IPC_H
#define PSBENCH_CONN_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/bufpool.h"
#include "server/conn.h"
#include "shared/frame.h"

/* Whether c's welcome offers CUDA IPC (`gpu`): a shared-memory link, a
 * device with peers, a kind that takes pushes from them, --gpu-share > 0. */
bool conn_ipc_offer(const conn *c);
/* The server's answer to a trainer's `export`: ERR_NONE with the reply
 * frame encoded into reply (*rlen bytes; c's peer open from then on), or
 * the code to answer with and why in msg (nothing changed). */
frame_errcode conn_ipc_export(conn *c, const frame_hdr *h, uint8_t *reply, size_t cap, size_t *rlen, char *msg,
                              size_t len);
/* A push naming `dev`: checked against c's peer (ERR_BAD_FRAME: the
 * connection closes; ERR_TOO_LARGE), and *hv = h with its payload length,
 * for the checks every push goes through. */
frame_errcode conn_ipc_push(const conn *c, const frame_hdr *h, uint64_t max_payload, frame_hdr *hv, char *msg,
                            size_t len);
/* h as read from the GPU memory the server shares (`dev`, no payload), 0
 * when the result has no bytes there (psbuf.twin). */
size_t conn_ipc_encode_result(const frame_hdr *h, const psbuf *payload, uint8_t *buf, size_t cap);
/* The connection is over: its peer goes back to the device. */
void conn_ipc_close(conn *c);

#endif
