/* comm.h — the communication thread below rpc_hook (hook_rpc.c).
 *
 * Backward runs on the trainer's main thread; the moment a bucket's
 * gradients are complete the main thread hands the bucket to this thread
 * (comm_push, through the hook) and goes on computing. This thread owns the client: it writes
 * pushes, reads results straight into the bucket's destination (a dense
 * result overwrites the gradients it averaged, a sparse one lands in the
 * bucket's own buffer), and marks buckets done. The optimizer waits with
 * comm_wait. One mutex guards the hand-over; the bytes themselves are never
 * touched by both threads at once (see model.h on gradient ownership).
 */
#ifndef PSBENCH_COMM_H
#define PSBENCH_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "shared/frame.h"
#include "shared/half.h"
#include "trainer/client.h"

/* Bucket ids are 0..COMM_MAX_BUCKETS-1. */
#define COMM_MAX_BUCKETS 4096

typedef struct comm_bucket {
    uint32_t id;            /* the bucket number on the wire */
    uint32_t server;        /* the client connection it goes to (set by comm_push) */
    frame_hdr hdr;          /* the push header (batch set by comm_push) */
    const uint8_t *payload; /* dense: the gradients; sparse: indices then rows (NULL: on_dev only) */
    bool on_dev;            /* dense: the gradients lie at dev in the trainer's exported GPU memory */
    uint64_t dev;
    float *dense_dst;       /* dense: where the mean goes (may equal payload) */
    half_type wire;         /* dense: the push's element type, and its answer's (HALF_FP32, the zero
                             * value; f16, bf16 with --compress: payload narrow, the mean widened
                             * into dense_dst as it arrives) */
    uint8_t *result;        /* sparse: the coalesced mean (owned, grows) */
    devmem result_dev;      /* dense, CUDA IPC: the mean in the server's GPU memory (else none) */
    uint64_t result_cap, result_len, result_nnz;
    uint64_t t_push_ns, t_done_ns;
    uint64_t t_in_ns;       /* the read that brought its answer's header (the client's rx_ns) */
    bool done;              /* guarded by the comm mutex */
} comm_bucket;

typedef struct comm comm;

/* Start the thread on an opened client (comm takes over its sink and its
 * polling). tt: the trainer's trace (NULL: none); the client's trace ring
 * (ttrace_links) is then this thread's: each bucket taken sets its step
 * (ttrace_step_of its batch), each answer read is a frame_in span. NULL
 * with err set. */
struct ttrace;
comm *comm_start(client *cl, double rpc_timeout_s, const struct ttrace *tt, char *err, size_t errlen);
/* Hand bucket b (batch `batch`) to the thread, for connection `server`. */
void comm_push(comm *c, comm_bucket *b, uint32_t server, uint64_t batch);
/* Wait until every bucket in bs is done. 0, or -1 with err (connection
 * lost, error frame, --rpc-timeout). */
int comm_wait(comm *c, comm_bucket **bs, uint32_t n, char *err, size_t errlen);
/* Stop the thread (the client is the caller's again). */
void comm_stop(comm *c);

#endif
