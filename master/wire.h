/* wire.h — the master's side of its nodes' connections: accepting them,
 * reading framed control messages within the bounds of a node that has not
 * registered, handing each whole message to the handler of its type,
 * sending, refusing, and freeing a node.
 *
 * The bottom of the control plane: it knows no run. What a message means
 * is the layer above's (run.c hands it the table of handlers); so is what a
 * registered node's lost connection means. A node that never registered is
 * wire's alone, from its accept to its free.
 */
#ifndef PSBENCH_MASTER_WIRE_H
#define PSBENCH_MASTER_WIRE_H

#include "master/master.h"
#include "shared/control.h"

#include <sys/socket.h>

/* The handler of one message type. */
typedef struct wire_handler {
    const char *type;
    void (*fn)(master *m, node *n, ctl_msg *msg);
    bool before_register; /* may come from a node that has not registered (only register) */
} wire_handler;

typedef struct wire_ops {
    const wire_handler *handlers;
    size_t nhandlers;
    /* A registered node's connection ended (closed by the peer, or an
     * error); it is detached already. */
    void (*closed)(master *m, node *n);
    /* A registered node sent bytes that are not a control message (what:
     * the decoder's words, escaped); it is detached already. */
    void (*broken)(master *m, node *n, const char *what);
} wire_ops;

/* admit.h's callback: a connection within the bounds becomes a node. */
void wire_on_accept(void *master_arg, int fd, const struct sockaddr *sa, int salen);
/* Queue a message to n (nothing once it is disconnected). Takes body. */
void wire_send(node *n, const char *type, json_t *body);
/* The same message to every registered node. Takes body. */
void wire_send_all(master *m, const char *type, json_t *body);
/* Refuse a node that has not registered: `stop` (refused) with the reason;
 * nothing more from it is read, and it is freed once it closes or after a
 * few seconds (wire_drop_idle). retry: the node may try again later (no
 * place for it in this job, the run is over; "retry": true in the stop,
 * docs/protocol.md), not a refusal for good (a wrong token). */
void wire_refuse(node *n, const char *reason, bool retry);
/* A registered node authenticated: its messages may have the control
 * plane's size, and it no longer counts against the pending bound. */
void wire_registered(node *n);
/* Connections that never registered and are done with (silent for the
 * register timeout, or refused and given their time to read why): freed.
 * From the tick. */
void wire_drop_idle(master *m, double now);
/* The one place a node and what it owns are freed (its connection too). */
void wire_free_node(node *n);

#endif
