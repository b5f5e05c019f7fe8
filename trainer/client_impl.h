/* client_impl.h — what the parts of the trainer's client share and no
 * caller needs: client.c (the send queue, the results), client_hello.c
 * (the handshake), the transports (xport_*.c) and client_io.c, the
 * services beneath them all. Included by those files only. Calls run one
 * way: client.c -> client_hello.c -> the transports (through their ops
 * tables, xport.h) -> client_io.c. */
#ifndef PSBENCH_CLIENT_IMPL_H
#define PSBENCH_CLIENT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "shared/frame.h"
#include "trainer/client.h"
#include "trainer/xport.h"

/* client_io.c: */

/* Format an `error` frame from a server as a one-line reason. */
void client_error_frame(const client_conn *c, const frame_hdr *h, char *err, size_t errlen);

/* The sink's begin for the answer h on c (its cookie in c->frame), which
 * the transports call too once they have found a payload in place. */
int client_begin(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen);

/* Blocking read of exactly one frame header (no payload) during the
 * handshake, for at most timeout_s: the server's first answer (`want`:
 * welcome; FT_REDIRECT: a redirect or a welcome), or its answer to an
 * export (FT_EXPORT: 1 when it is an error, which *h describes). */
int client_read_answer(client_conn *c, frame_type want, double timeout_s, frame_hdr *h, char *err, size_t errlen);

/* Where a `dev` answer's bytes lie in the server's GPU memory that c
 * holds open: *want of them from h->dev, checked; -1 with err where none
 * was exported (every link but CUDA IPC) or they are not a dense result's
 * within it. */
int client_check_dev(const client *cl, const client_conn *c, const frame_hdr *h, uint64_t *want, char *err,
                     size_t errlen);

/* "WORDS (no CUDA IPC: why)", why being c's note or dflt: the start line
 * of a link without CUDA IPC. */
void client_describe_no_ipc(const client_conn *c, const char *words, const char *dflt, char *buf, size_t len);

/* client_hello.c: */

/* Move c's handshake to st, on transport k (client_hello.c): the one
 * place either changes. */
void client_hs_enter(client_conn *c, client_hs st, const xport_ops *x);

/* Hello and welcome on c, connected over TCP (client_hello.c): it leaves
 * c on the link the transport and the server allow, blocking, within
 * cfg->timeout_s. 0, or -1 with err. */
int client_handshake(client *cl, client_conn *c, const client_cfg *cfg, char *err, size_t errlen);

#endif
