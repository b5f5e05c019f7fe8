/* conn_int.h — what the files of one trainer connection share (private to
 * server/conn*.c and the transports, xport*.c; everything else sees
 * conn.h).
 *
 * The files are layered, and calls run one way, down:
 *   conn_dispatch.c  accepting, the read loop, framing and dispatch
 *   conn_hello.c, conn_push.c, conn_result.c, conn_call.c  the handlers,
 *                    each beside the part of the protocol it serves; and
 *                    the transports (xport.h: where a payload is, how a
 *                    result is lent), which the handlers ask through their
 *                    ops and which finish a push they take (conn_push.c)
 *   conn.c           the connection's life (open, hold, close, free), its
 *                    output, and the services below every handler
 * No file calls one above it by name: conn.c knows nothing of the handlers
 * or the reader (conn_dispatch.c hands conn_open its read callback), and
 * the handlers nothing of the reader.
 */
#ifndef PSBENCH_CONN_INT_H
#define PSBENCH_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "server/conn.h"
#include "shared/frame.h"

/* A payload remainder at least this large is received directly into its
 * destination when the input buffer is empty. */
#define CONN_DIRECT_MIN (16u * 1024u)

/* ---- conn.c: the connection's life, output, and the services below ---- */

/* A new connection on fd (shm: from the Unix socket), its input read by
 * on_read (conn_dispatch.c's reader). Returns NULL on allocation failure
 * (fd is closed then). */
conn *conn_open(struct server *s, int fd, bool shm, event_callback_fn on_read);
/* Write c's output in the reactor's pass at the end of this iteration. */
void conn_want_flush(conn *c);
/* Past --max-queued bytes of output c is dropped (closing); true then. */
bool conn_over_cap(conn *c, const char *what);
/* Queue an error frame; bad_frame, auth and too_large close the
 * connection once it is written. */
void conn_send_error(conn *c, frame_errcode code, const char *msg, const frame_hdr *about);
/* The answer just queued to c (a result; a call's rows or updated) is
 * traced: its answer_out begins now, and ends as outq writes its last
 * byte. */
void conn_trace_queued(conn *c, uint64_t batch, uint64_t bucket);
/* The frame's payload, if any, is discarded. */
void conn_skip_payload(conn *c);
/* Free a call (its payload and answer): by its done, or by conn_close
 * when it was cut off mid-payload. */
void conn_call_free(kind_call *kc);

/* ---- the handlers (conn_dispatch.c's conn_handlers) ---- */

void conn_on_hello(conn *c, const frame_hdr *h);  /* conn_hello.c */
void conn_on_export(conn *c, const frame_hdr *h); /* conn_hello.c */
void conn_on_push(conn *c, const frame_hdr *h);   /* conn_push.c */
void conn_on_fetch(conn *c, const frame_hdr *h);  /* conn_result.c */
void conn_on_call(conn *c, const frame_hdr *h);   /* conn_call.c: lookup and update */

/* ---- conn_push.c: the push being received ---- */

/* Payload bytes (at offset off in the payload) of the push being
 * received, to the futures layer: from the reader, or from a transport
 * that takes the payload from where it lies. Bytes the futures layer
 * refuses answer shape_mismatch, and the push is forgotten, the rest of it
 * discarded. */
void conn_push_data(conn *c, const uint8_t *p, size_t n, uint64_t off);
/* Its payload is all in: the futures layer has it. */
void conn_push_finish(conn *c);
/* The trace's fold of the push being received: bytes of it are handed to
 * the kind from now (begin) until now (end), around each handover. */
void conn_fold_begin(conn *c);
void conn_fold_end(conn *c);
/* The trace of what was being received is forgotten (refused, cut off). */
void conn_trace_forget(conn *c);

/* ---- conn_call.c: the lookup/update being received ---- */

/* Its whole payload is in: handed to the kind. */
void conn_call_finish(conn *c);

#endif
