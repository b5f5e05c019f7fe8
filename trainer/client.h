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
} client_sink;

typedef struct client_out {
    uint8_t hdr[512];
    size_t hlen;
    const uint8_t *payload; /* owned by the caller, valid until written */
    uint64_t plen;
    uint64_t done; /* bytes of hdr + payload written */
} client_out;

typedef struct client_conn {
    int fd;
    char addr[300];
    uint32_t server_rank;
    client_out *q;
    size_t qhead, qlen, qcap;
    framed rd;   /* the results arriving */
    void *frame; /* the sink's cookie for the result being received */
} client_conn;

typedef struct client {
    client_conn *conns;
    size_t nconns;
    struct pollfd *pfd; /* nconns + 1 (the wake fd) */
    uint32_t trainers; /* from the servers' welcome */
    client_sink sink;
    /* Written by the polling thread, read by others (a trainer's reports):
     * relaxed atomics, one per read or write call. */
    _Atomic uint64_t bytes_out, bytes_in;
    uint64_t rx_ns; /* CLOCK_MONOTONIC ns of the read that brought the bytes
                     * being dispatched: one clock read serves every result
                     * in them */
    int wake_fd; /* -1, or an fd whose readability ends client_poll early
                  * (another thread has new pushes for the polling one) */
} client;

/* Connect to every "HOST:PORT" in the comma-separated list (retrying while
 * refused, all of them within timeout_s), say hello as trainer `rank`, wait
 * for each welcome at most timeout_s from its connection. Returns 0 or -1
 * with err set: a peer that answers in another protocol, or not at all, is
 * named (shared/peer.h: "HOST:PORT is not a psbench server (it answered
 * like an HTTP server)"). On -1 it holds nothing (client_close on it is a
 * no-op). */
int client_open(client *cl, const char *servers, uint64_t rank, const char *token, double timeout_s,
                const client_sink *sink, char *err, size_t errlen);
void client_close(client *cl);
/* Queue a frame (header fields in h; payload bytes stay the caller's
 * until written) on connection i. Returns 0 or -1. */
int client_queue(client *cl, size_t i, const frame_hdr *h, const void *payload, char *err, size_t errlen);
/* Do I/O for at most timeout_ms: write what is queued, read and dispatch
 * what arrives. Returns 0, or -1 with err set (connection lost, error
 * frame, sink failure). */
int client_poll(client *cl, int timeout_ms, char *err, size_t errlen);
/* True when nothing is queued for writing. */
bool client_idle_out(const client *cl);

#endif
