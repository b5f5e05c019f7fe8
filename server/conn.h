/* conn.h — one trainer connection on the server's reactor (transport).
 *
 * Input is read into a fixed per-connection buffer (a framed reader,
 * shared/framed.h) and parsed in place: a header is decoded once it is
 * complete and handed to the handler of its message type; a push's payload
 * is handed to the futures layer chunk by chunk as it arrives — or received
 * straight into its destination when no arithmetic is needed. A lookup's
 * or update's payload (small) is buffered whole and then handed to the
 * kind. Output goes through an outq; results are added by
 * reference, never copied per trainer, and written by the reactor's pass
 * at the end of the loop iteration (server.h). Nothing here knows what a
 * push means: that is the kind's, below the futures.
 */
#ifndef PSBENCH_CONN_H
#define PSBENCH_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/kind.h"
#include "server/outq.h"
#include "server/strace.h"
#include "server/xport_ipc.h"
#include "server/xport_shm.h"
#include "shared/frame.h"
#include "shared/framed.h"
#include "shared/shm.h"

struct server;
struct event;
struct xport_ops;

#define CONN_IBUF_SIZE (256u * 1024u) /* fits any header (<= 64 KiB + 4) */

/* What the payload bytes being read are for. */
typedef enum conn_sink {
    SINK_DISCARD = 0,
    SINK_PUSH, /* a push: streamed to the futures layer */
    SINK_CALL, /* a lookup or update: buffered whole, then handed to the kind */
} conn_sink;

typedef struct conn {
    struct server *srv;
    int fd;
    /* The socket's transport: xport_shm (shm) or xport_tcp, or one that a
     * hello on TCP took by name (its own hello hook sets it). */
    const struct xport_ops *link;
    /* A descriptor that came with the bytes read (over the Unix socket)
     * and is not taken yet: at most one, the hello's. Changed only by the
     * shm transport (xport_shm.c) and the reader (conn_dispatch.c). */
    int rx_fd;
    xport_shm_state shm; /* shared memory: the trainer's segment, results in place (xport_shm.h) */
    xport_ipc_state ipc; /* CUDA IPC: offered, and the trainer's export (xport_ipc.h) */
    char peer[64];
    struct event *rev, *wev;
    struct event *hello_ev; /* closes a connection that never says hello */
    framed rd;      /* the input buffer, and where the stream is in a frame */
    conn_sink sink; /* what the current payload's bytes are for */
    push_ctx push;  /* the push being received (SINK_PUSH) */
    /* The trace (strace.h) of the push or call being received: its
     * push_recv, and its fold from its first chunk handed to the kind to
     * the end of the last one (tr_fold_end_ns); the header's batch and
     * bucket (a call's: none). */
    strace_mark tr_recv, tr_fold;
    uint64_t tr_fold_end_ns, tr_batch, tr_bucket;
    kind_call *call; /* the lookup/update being received (SINK_CALL) */
    size_t hlen;     /* the prefix and header bytes of the frame being handled */
    kind_call *calls_head, *calls_tail; /* handed to the kind, not yet done (in order) */
    uint32_t ncalls;      /* of them */
    uint64_t calls_bytes; /* their payload bytes */
    bool calls_held;      /* not read until some complete (conn_call.c: conn_calls_throttle) */
    bool calls_resume;    /* released: parse what the input buffer holds first */
    outq out;
    bool hello_done;
    bool closing; /* stop reading; close once the output is written */
    uint32_t slot;  /* members.h; MEMBERS_NO_SLOT before hello */
    uint64_t rank;
    /* The type its hello announced for its dense pushes (`dtype`,
     * docs/protocol.md "Narrow pushes"): HALF_FP32 when it announced none;
     * a push in f16 or bf16 is taken only in this type. */
    half_type dtype;
    bool in_flush;  /* on server->flush_head */
    bool big_pushes; /* the last push had a payload worth receiving directly */
    struct conn *flush_next;
    struct conn *prev, *next; /* server->conns, or server->graveyard once closed */
} conn;

/* Accept fd as a new connection (shm: from the Unix socket). Returns NULL
 * on allocation failure (fd is closed then). */
conn *conn_new(struct server *s, int fd, bool shm);
/* Close now: release everything; a push in flight fails its entry. The
 * connection goes on the graveyard, freed by the reactor's pass. */
void conn_close(conn *c, const char *why);
/* Write as much queued output as the socket takes; arm EV_WRITE for the
 * rest. Returns -1 if the connection was closed. The reactor's pass calls
 * it for each connection on the flush list. */
int conn_flush(conn *c);
/* members_ops.answer: f's result header, encoded once, queued to each
 * connection in eps with `result` by reference. ctx: the server. */
void conn_deliver_answer(void *ctx, void *const *eps, uint32_t n, const future *f, psbuf *result);
/* members_ops.fail: `code` with msg, about f, to each connection. */
void conn_deliver_fail(void *ctx, void *const *eps, uint32_t n, const future *f, frame_errcode code,
                       const char *msg);
/* Between passes: a push cut off by the reset is forgotten (the futures
 * layer has dropped it); its remaining bytes are discarded. A lookup or
 * update being received carries on (it applies to the fresh state). */
void conn_push_forget(conn *c);
/* Hold (stop reading, and stop the hello deadline) or release a
 * connection's input: the reactor holds every trainer's while the kind is
 * not ready (a table being filled), so that nothing — a hello's welcome
 * included — is answered before it is. Releasing restarts the hello
 * deadline of a connection that has not said hello. */
void conn_hold(conn *c, bool hold);
/* Free a closed connection (the reactor's pass, from the graveyard). */
void conn_free(conn *c);

#endif
