/* client_impl.h — what the parts of the trainer's client share and no
 * caller needs: client.c (the send queue, the results), client_hello.c
 * (the handshake). Included by those files only. */
#ifndef PSBENCH_CLIENT_IMPL_H
#define PSBENCH_CLIENT_IMPL_H

#include <stddef.h>

#include "shared/frame.h"
#include "trainer/client.h"

/* Format an `error` frame from a server as a one-line reason. */
void client_error_frame(const client_conn *c, const frame_hdr *h, char *err, size_t errlen);

/* Hello and welcome on c, connected over TCP (client_hello.c): it leaves
 * c on the link the transport and the server allow, blocking, within
 * cfg->timeout_s. 0, or -1 with err. */
int client_handshake(client *cl, client_conn *c, const client_cfg *cfg, char *err, size_t errlen);

#endif
