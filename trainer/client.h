/* client.h — a trainer's connections to its servers (data plane).
 *
 * Pushes are queued and written with writev as the sockets take them;
 * results are parsed as they arrive and their payload handed, chunk by
 * chunk, to callbacks — so a trainer can check or apply a result without
 * buffering it whole, and can receive while it is still sending. One
 * thread, nonblocking sockets, poll().
 */
#ifndef PSBENCH_CLIENT_H
#define PSBENCH_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <poll.h>
#include <stdatomic.h>

#include "shared/frame.h"
#include "shared/framed.h"
#include "shared/half.h"
#include "shared/shm.h"
#include "shared/trace.h"
#include "trainer/gpushare.h"

/* What the client calls as results arrive. Each returns 0, or -1 with a
 * reason in err (the client then fails). Results from different servers
 * may arrive interleaved, chunk by chunk: begin sets *frame to whatever
 * identifies that result, and data and end get it back. `server` is the
 * connection's index in the list given to client_open. Frames handed over:
 * `result`, `params` (the answer to a batch-update `fetch`), `rows` (the
 * answer to an embedding `lookup`) and `updated` (an embedding `update`
 * sent with confirm, applied). */
typedef struct client_sink {
    int (*begin)(void *ctx, uint32_t server, const frame_hdr *h, void **frame, char *err, size_t errlen);
    /* off + n is a multiple of 4 except at the payload's end. */
    int (*data)(void *ctx, void *frame, uint64_t off, const uint8_t *p, size_t n, char *err, size_t errlen);
    int (*end)(void *ctx, void *frame, char *err, size_t errlen);
    void *ctx;
    /* A dense result whose mean lies in the server's GPU memory (CUDA IPC,
     * docs/protocol.md): n bytes at device address src, complete on the
     * GPU; between begin and end, instead of data. NULL: the client never
     * exports (client_cfg.gpu NULL), so no server sends one. */
    int (*dev)(void *ctx, void *frame, devmem src, uint64_t n, char *err, size_t errlen);
} client_sink;

typedef struct client_out {
    uint8_t hdr[512];
    size_t hlen;
    const uint8_t *payload; /* owned by the caller, valid until written */
    uint64_t plen;
    uint64_t done; /* bytes of hdr + payload written */
    /* Traced (client.trace open when queued): when it was queued, and
     * its ids for the frame_out span written once its last byte is; 0:
     * not traced. */
    uint64_t t_queued_ns;
    uint64_t t_first_ns; /* traced: the clock before the write that took its first bytes (0: none yet) */
    trace_ids ids;
} client_out;

/* A push's payload copied into the client's segment, per bucket id: the
 * next push of that bucket on that connection comes after its result,
 * hence after the server has read this one (the hello's zerocopy
 * promise), so the pages are reused then. */
typedef struct client_stage {
    uint64_t bucket;
    uint8_t *p;
    size_t cap;
} client_stage;

/* Where a connection's handshake stands (client_hello.c: client_hs_enter
 * is the one place that changes it, and the transport with it). Forward
 * only; a failure leaves the state where it failed (client_close releases
 * what the transport holds then). */
typedef enum client_hs {
    CLIENT_HS_CONNECTING = 0, /* no socket yet */
    CLIENT_HS_HELLO,          /* on TCP, hello sent: the first answer awaited */
    CLIENT_HS_FOLLOWED,       /* redirected: on the server's Unix socket, hello again */
    CLIENT_HS_WELCOMED,       /* the welcome taken; CUDA IPC offered or not */
    CLIENT_HS_READY,          /* handed to client_poll */
} client_hs;

struct xport_ops;

typedef struct client_conn {
    int fd;
    char addr[300];
    uint32_t server_rank;
    client_hs hs;
    /* How the link carries payloads (trainer/xport.h: TCP, shared memory,
     * CUDA IPC); set with hs. */
    const struct xport_ops *xp;
    /* Shared memory (docs/protocol.md): over the server's Unix socket,
     * pushes name their payload in the client's segment (cl->arena) and
     * results theirs in the server's (seg, mapped read-only). */
    shm_seg seg;
    int rx_fd;           /* a descriptor received and not taken yet */
    char link_note[200]; /* why this link is TCP where shared memory was tried ("": not tried) */
    bool no_segment;     /* shm, but the client's segment is larger than the server takes: pushes inline */
    /* CUDA IPC (shm links to a CUDA server on this trainer's GPU): the
     * server's exported GPU memory, mapped here (none: none), and why
     * there is none where the server offered it. */
    devmem srv_gpu;
    uint64_t srv_gpu_bytes;
    double gpu_open_ms; /* how long opening it took (cudaIpcOpenMemHandle: a first use; < 0: not opened) */
    char gpu_note[200];
    client_stage *stage; /* shared memory's (xport_shm.c): made and freed there */
    size_t nstage;
    client_out *q;
    size_t qhead, qlen, qcap;
    framed rd;   /* the results arriving */
    void *frame; /* the sink's cookie for the result being received */
    /* The trace (client.trace): this link's lanes, and when its last
     * traced frame out was written (a frame's span starts no earlier:
     * the link sends one frame after the other). */
    uint16_t trace_lane_out, trace_lane_in;
    uint64_t trace_last_out_ns;
} client_conn;

typedef struct client {
    client_conn *conns;
    size_t nconns;
    shm_arena arena; /* the segment every shm link was handed (none: seg.base NULL) */
    /* Where push payloads go over shared memory ($PSBENCH_SHM_PUSH, for
     * measurements): CLIENT_PUSH_AUTO names payloads where they lie in
     * the segment (client_shared_alloc) and stages the others into it;
     * STAGE: client_shared_alloc gives nothing, every payload is staged;
     * INLINE: every payload goes on the Unix socket. */
    enum { CLIENT_PUSH_AUTO = 0, CLIENT_PUSH_STAGE, CLIENT_PUSH_INLINE } push_mode;
    struct pollfd *pfd; /* nconns + 1 (the wake fd) */
    uint32_t trainers; /* from the servers' welcome */
    client_sink sink;
    const gpushare *gpu; /* client_cfg's */
    half_type dtype;     /* client_cfg's: the narrow type announced (HALF_FP32: none) */
    /* Written by the polling thread, read by others (a trainer's reports):
     * relaxed atomics, one per read or write call. */
    _Atomic uint64_t bytes_out, bytes_in;
    /* Pushes named by offset in the segment, and how many of them were
     * copied there first (staged: their payload lay elsewhere). Same
     * rules as the byte counts. */
    _Atomic uint64_t pushes_at, pushes_staged;
    uint64_t rx_ns; /* CLOCK_MONOTONIC ns of the read that brought the bytes
                     * being dispatched: one clock read serves every result
                     * in them */
    int wake_fd; /* -1, or an fd whose readability ends client_poll early
                  * (another thread has new pushes for the polling one) */
    /* The trace (issue 42; trainer/ttrace.h): the polling thread's ring,
     * NULL where nothing is traced. A frame queued while it is open is a
     * frame_out span once written (lane: its link's trace_lane_out), ids
     * batch, bucket, trace_trainer and the link's server rank. */
    trace_ring *trace;
    int32_t trace_trainer;
} client;

/* Connect to every "HOST:PORT" in the comma-separated list (retrying while
 * refused, all of them within timeout_s) — over the server's Unix socket
 * and shared memory where the transport allows and the server is on this
 * host (a `probe` on its TCP port names the socket; auto falls back to TCP
 * saying why in link_note, shm fails) —, say hello as trainer `rank`, wait
 * for each welcome at most timeout_s from its connection. Returns 0 or -1
 * with err set: a peer that answers in another protocol, or not at all, is
 * named (shared/peer.h: "HOST:PORT is not a psbench server (it answered
 * like an HTTP server)"). On -1 it holds nothing (client_close on it is a
 * no-op). */
typedef struct client_cfg {
    const char *servers; /* "HOST:PORT[,...]" */
    uint64_t rank;
    const char *token;   /* NULL: none */
    double timeout_s;
    psb_transport transport; /* auto: shared memory with a server on this host (probed), TCP otherwise */
    /* NULL, or the trainer's GPU and the memory its gradients live in:
     * exported to a server on the same GPU that offers CUDA IPC (the
     * sink then needs `dev`). */
    const gpushare *gpu;
    /* The type of its dense pushes when narrow (--compress fp16|bf16:
     * HALF_FP16, HALF_BF16; docs/protocol.md "Narrow pushes"): announced
     * in every hello (`dtype`), and a server whose welcome does not echo it
     * fails the open, named. HALF_FP32 (the zero value): f32, nothing
     * announced. */
    half_type dtype;
} client_cfg;

int client_open(client *cl, const client_cfg *cfg, const client_sink *sink, char *err, size_t errlen);
/* Memory in the client's shared segment (NULL: none, no shm link, or
 * $PSBENCH_SHM_PUSH says otherwise): a push whose payload lies there is
 * named by offset, copying nothing. Freed with client_shared_free, or
 * with the client (client_close). */
void *client_shared_alloc(client *cl, size_t bytes);
void client_shared_free(client *cl, void *p);
/* How connection i travels: "shm" or "tcp". */
const char *client_link(const client *cl, size_t i);
/* Connection i in words, for the start line: "TCP" or "shared memory",
 * then " + CUDA IPC" or why not (" (no CUDA IPC: ...)"). */
void client_describe(const client *cl, size_t i, char *buf, size_t len);
/* Whether connection i exchanges dense buckets by CUDA IPC; else, where
 * its server offered it, why not (note: "" when not offered). */
bool client_link_gpu(const client *cl, size_t i, const char **note);
/* Whether every connection exchanges dense buckets by CUDA IPC. */
bool client_all_gpu(const client *cl);
void client_close(client *cl);
/* Where a push's payload lies: host bytes (NULL: none), and where on_dev
 * the same bytes at offset dev in the trainer's exported GPU memory
 * (client_cfg.gpu). The caller says where they are, never how they
 * travel: the link decides that, once (trainer/xport.h: inline, named in
 * the client's segment, or by CUDA IPC). */
typedef struct client_src {
    const void *host;
    uint64_t dev;
    bool on_dev;
} client_src;

/* Queue a frame (header fields in h, its payload's size in h->payload;
 * payload bytes stay the caller's until written) on connection i.
 * Returns 0 or -1. */
int client_queue_src(client *cl, size_t i, const frame_hdr *h, const client_src *src, char *err, size_t errlen);
/* The same, with the payload at host address payload. */
int client_queue(client *cl, size_t i, const frame_hdr *h, const void *payload, char *err, size_t errlen);
/* Do I/O for at most timeout_ms: write what is queued, read and dispatch
 * what arrives. Returns 0, or -1 with err set (connection lost, error
 * frame, sink failure). */
int client_poll(client *cl, int timeout_ms, char *err, size_t errlen);
/* True when nothing is queued for writing. */
bool client_idle_out(const client *cl);

#endif
