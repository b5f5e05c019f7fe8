/* server.h — the state of one psbench-server process and its transport
 * layer: reactor.c (the event loop, the listener, signals, the kind's
 * fill, and the end-of-iteration pass that writes output and frees closed
 * connections), conn*.c (one trainer connection: its life and output in
 * conn.c, its reads, framing and dispatch in conn_dispatch.c, a handler per
 * message type in the other conn_*.c, every frame the server sends; where
 * the bytes travel is a transport's, xport.h) and members.c (the
 * trainer slots, where the futures' outcomes go). The calls go one way:
 * reactor → conn → members; conn asks for the pass through loopend.h,
 * never by calling the reactor. Below the transport: the futures
 * (future.h), the kinds (kind.h) and the devices (device.h);
 * docs/architecture.md draws the layers. Everything runs on one thread (a
 * device may use threads of its own and delivers its completions on this
 * one). */
#ifndef PSBENCH_SERVER_H
#define PSBENCH_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "shared/frame.h"
#include "shared/clock.h"
#include "shared/metrics.h"
#include "server/bufpool.h"
#include "server/device.h"
#include "server/future.h"
#include "server/kinds.h"
#include "server/kind.h"
#include "server/loopend.h"
#include "server/members.h"
#include "server/strace.h"
#include "shared/shm.h"
#include "shared/tracejob.h"

struct event_base;
struct event;
struct conn;

typedef struct server_config {
    char host[256];
    uint16_t port;
    uint32_t trainers;    /* pushes expected per (batch, bucket) */
    uint32_t rank;        /* this server's rank (0 standalone) */
    kind_config kind;     /* what the server does (kind.h); kind.trainers = trainers */
    device_spec device;   /* --device (shared/devspec.h); zeroed: the cpu */
    const char *token;    /* NULL: none required */
    uint64_t max_payload;
    uint64_t max_queued;  /* output bytes queued per connection before it is dropped */
    int listen_fd;        /* >= 0: already listening (bound before joining a master) */
    bool splice;          /* lend big results to trainers that promise (outq.h:
                           * zero-copy); false: copy every result */
    double hello_timeout_s; /* a connection that has not said hello by then is closed */
    double master_timeout_s; /* with a master: the run's --rpc-timeout (its assignment) */
    futures_limits open;     /* what one trainer may hold (future.h): --max-open-*, or the job's */
    bool open_flags;         /* --max-open-* given: they win over the job's */
    psb_transport transport; /* auto/shm: also on a Unix socket, results in shared memory; tcp: TCP only */
    uint64_t max_shm;        /* the largest segment a trainer may hand over (--max-shm) */
    uint64_t gpu_share;      /* GPU memory shared with CUDA trainers on the GPU (--gpu-share; 0: no CUDA IPC) */
    trace_flags trace_flags; /* --trace, --trace-steps, --trace-buffer */
    trace_conf trace;        /* the trace (issue 42): the assignment's with the flags (master_link_join);
                              * .on false: none */
} server_config;

/* The embedding kind's traffic by message type (extension: the metrics'
 * `calls`, docs/protocol.md): frames, their bytes on the wire (prefix,
 * header and payload) and their payload bytes. Counted as frames arrive
 * (every lookup and update, refused or not) and as answers are queued. */
typedef struct call_count {
    uint64_t frames, bytes, payload;
} call_count;
enum { CALLS_LOOKUP = 0, CALLS_ROWS, CALLS_UPDATE, CALLS_UPDATED, CALLS_TYPES };
/* The message type each CALLS_* counts ("lookup", "rows", ...). */
extern const char *const server_calls_names[CALLS_TYPES];

static inline void call_count_add(call_count *c, uint64_t hlen, uint64_t payload)
{
    c->frames++;
    c->bytes += hlen + payload;
    c->payload += payload;
}

typedef struct server {
    server_config cfg;
    struct event_base *base;
    struct event *listen_ev;
    struct event *accept_pause_ev; /* re-arms listen_ev after running out of descriptors */
    int spare_fd;                  /* /dev/null, given up to answer a trainer when out of descriptors */
    uint64_t refused_fds;          /* trainers refused for want of a descriptor */
    double t_refused_warn;         /* when that was last a warning */
    double t_waiting_warn;         /* when a refusal for too many connections without hello was */
    struct event *fill_ev;         /* the kind's next fill slice */
    bool filling;                  /* the kind is not ready: trainers' input is held */
    double t_fill;                 /* when the fill began (seconds, CLOCK_MONOTONIC) */
    bool stopping;                 /* server_free has begun: no new fill */
    struct event *sig_ev[2];
    int listen_fd;
    uint16_t bound_port;
    /* Shared memory (cfg.transport auto or shm; docs/protocol.md): trainers
     * on this host connect to an abstract Unix socket, and the pool's large
     * buffers — accumulators, hence results — live in one segment they map
     * read-only. shm_fd -1: none. */
    int shm_fd;
    struct event *shm_ev;
    char shm_name[96];
    shm_arena arena;
    futures fut;
    kind *kind;
    device *dev;
    bufpool pool;
    metrics *metrics;
    members members;          /* the trainer slots (members.h) */
    uint32_t nconns;
    uint32_t nwaiting;        /* of them, those that have not said hello yet */
    /* conn.c keeps these lists and asks for the pass (loopend_want) when
     * it adds to the last two; the pass (reactor.c) empties them. */
    struct conn *conns;       /* every open connection */
    struct conn *flush_head;  /* connections with output to write */
    struct conn *graveyard;   /* closed, freed once no callback holds them */
    loopend pass;             /* the end of each loop iteration: write, then free */
    uint64_t bytes_in, bytes_out, pushes, results;
    uint64_t lookups, updates; /* embedding: calls handed to the kind */
    call_count calls[CALLS_TYPES]; /* embedding: frames by type since the start or the last reset */
    uint64_t bytes_spliced, bytes_copied; /* result payload bytes, by how they left */
    uint64_t bytes_in_place;              /* result payload bytes read in place (shared memory) */
    uint64_t pushes_in_place;             /* pushes folded from a trainer's segment */
    uint64_t pushes_gpu, bytes_gpu_lent;  /* CUDA IPC: pushes folded from a trainer's GPU memory; result
                                           * bytes trainers read from the server's */
    uint64_t results_gpu_only;            /* CUDA IPC: results never copied to the host (every reader a peer) */
    uint64_t ipc_opens, ipc_open_ns;      /* CUDA IPC: trainers' exports opened, and the time that took (a
                                           * connection's first use: never inside a step) */
    bool splice_warned;                   /* a connection fell back to copies (said once) */
    strace trace;             /* this server's spans (strace.h); inert when it does not trace */
    struct master_link *link; /* NULL standalone */
    /* Called when the last trainer has left (a session ends): the master
     * link sets it, since a reset between runs waits for this. NULL: none. */
    void (*trainers_left)(struct server *s);
    /* Called when the kind has become ready (its fill done, after start or
     * a reset); NULL: none. The master link answers `ready` or `reset_done`
     * from it. */
    void (*kind_ready)(struct server *s);
    /* Called with the reason when a trainer was refused for want of a file
     * descriptor; NULL: none. The master link reports it. */
    void (*out_of_fds)(struct server *s, const char *why);
    int exit_code;            /* set by the master link's stop */
    char exit_reason[640];
} server;

/* reactor.c */
int server_init(server *s, const server_config *cfg, char *err, size_t errlen);
int server_run(server *s);
void server_free(server *s);
/* Between passes: forget every future and resolved mark, clear metrics;
 * connections and trainer slots stay. The kind may then fill its state
 * again (a fresh table), holding trainers' input until it is ready. */
void server_reset(server *s);

#endif
