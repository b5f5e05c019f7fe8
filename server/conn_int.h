/* conn_int.h — what the files of one trainer connection share (private to
 * server/conn*.c; everything else sees conn.h).
 *
 * conn.c keeps the connection's life, its reads, framing and dispatch, and
 * its output; the handlers live beside the part of the protocol they
 * serve: pushes in conn_push.c, results and `fetch` in conn_result.c,
 * lookups and updates in conn_call.c, the hello and `export` in
 * conn_hello.c. They, and the transports (xport.h: where a payload is,
 * how a result is lent), reach back into conn.c only through what is
 * declared here.
 */
#ifndef PSBENCH_CONN_INT_H
#define PSBENCH_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/conn.h"
#include "shared/frame.h"

/* A payload remainder at least this large is received directly into its
 * destination when the input buffer is empty. */
#define CONN_DIRECT_MIN (16u * 1024u)

/* ---- conn.c: output and input ---- */

/* Write c's output in the reactor's pass at the end of this iteration. */
void conn_want_flush(conn *c);
/* Past --max-queued bytes of output c is dropped (closing); true then. */
bool conn_over_cap(conn *c, const char *what);
/* Queue an error frame; bad_frame, auth and too_large close the
 * connection once it is written. */
void conn_send_error(conn *c, frame_errcode code, const char *msg, const frame_hdr *about);
/* The frame's payload, if any, is discarded. */
void conn_skip_payload(conn *c);
/* Hand payload bytes (at offset off in the payload) to the sink. */
void conn_payload(conn *c, const uint8_t *p, size_t n, uint64_t off);

/* ---- the handlers (conn.c's conn_handlers) ---- */

void conn_on_hello(conn *c, const frame_hdr *h);  /* conn_hello.c */
void conn_on_export(conn *c, const frame_hdr *h); /* conn_hello.c */
void conn_on_push(conn *c, const frame_hdr *h);   /* conn_push.c */
void conn_on_fetch(conn *c, const frame_hdr *h);  /* conn_result.c */
void conn_on_call(conn *c, const frame_hdr *h);   /* conn_call.c: lookup and update */

/* ---- conn_push.c: the push being received ---- */

/* Its payload is all in: the futures layer has it. */
void conn_push_finish(conn *c);
/* Refused half-way (its bytes were invalid): forgotten, the rest discarded. */
void conn_push_abort(conn *c);

/* ---- conn_call.c: the lookup/update being received ---- */

/* Its whole payload is in: handed to the kind. */
void conn_call_finish(conn *c);
/* Free a call (its payload and answer). */
void conn_call_free(kind_call *kc);

#endif
