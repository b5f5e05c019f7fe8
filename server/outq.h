/* outq.h — a connection's output queue: frames waiting to be written.
 *
 * Each entry is a frame's header bytes (copied, they are small) and an
 * optional payload held by reference (psbuf), so one result buffer serves
 * every trainer without a copy. Entries live in a growable ring, so a
 * steady state of rounds allocates nothing; outq_write sends as many
 * frames as the socket takes in one writev.
 *
 * Zero-copy payloads (outq_splice_on): a large payload does not go through
 * writev, which copies it into the socket, but is spliced (server/zcopy.h):
 * the peer's read copies it out of the buffer's own pages. The buffer must
 * then stay unchanged until the peer has read it, which the server learns
 * only from the protocol: a trainer that said hello with `zerocopy` 1
 * pushes a later batch only after reading every result of the batches
 * before (other peers get copies). So a payload spliced in full is not
 * released but *lent*: the queue keeps its reference, tagged with the
 * result's batch, until outq_return sees a push of a later batch (or
 * outq_return_all a pass boundary). A queue freed with loans still out marks
 * those buffers no_recycle, so that they are unmapped rather than reused.
 * Loans are bounded (lend_cap bytes); past it, payloads are copied again.
 */
#ifndef PSBENCH_OUTQ_H
#define PSBENCH_OUTQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/bufpool.h"
#include "server/zcopy.h"

#define OUTQ_INLINE_HDR 200 /* larger headers (long error messages) go to the heap */

/* How an entry's payload leaves: decided when its header is written. */
typedef enum outq_mode { OUTQ_UNDECIDED = 0, OUTQ_COPY, OUTQ_SPLICE } outq_mode;

typedef struct outq_item {
    uint8_t small[OUTQ_INLINE_HDR];
    uint8_t *hdr; /* small, or malloc'd */
    uint32_t hlen;
    outq_mode mode;
    bool lent_pages; /* some payload bytes went into the socket by reference */
    psbuf *payload;  /* NULL: header only */
    uint64_t tag;   /* the batch a result answers (the loan's tag) */
    uint64_t done;  /* bytes of hdr + payload already in the socket */
    /* The trace (issue 42; outq_trace_last): when the frame was queued (0:
     * not traced) and what it answers, for the owner's `written`. */
    uint64_t trace_t0_ns, trace_nvtx;
    uint64_t trace_batch, trace_bucket;
} outq_item;

typedef struct outq_loan {
    psbuf *buf;
    uint64_t tag;
    bool shared; /* read in place from shared memory (outq_push_shared), not spliced */
} outq_loan;

typedef struct outq {
    outq_item *items;
    size_t head, len, cap; /* ring */
    uint64_t bytes;        /* unwritten bytes */
    /* zero-copy payloads */
    bool splice;         /* on (outq_splice_on), and not failed since */
    int splice_errno;    /* why splicing stopped (0: it did not); for a log line */
    zcopy zc;            /* the head payload's pages on their way */
    outq_loan *loans;
    size_t nloans, loans_cap;
    uint64_t lent_bytes, lend_cap;
    uint64_t spliced, copied; /* payload bytes sent each way (for the exit line) */
    /* NULL, or called as a traced frame's last byte goes into the socket
     * (for a payload read in place: its header), before it is dropped:
     * the trace's answer_out ends. */
    void (*written)(void *ctx, outq_item *it);
    void *written_ctx;
} outq;

void outq_init(outq *q);
/* From now on, send payloads of ZCOPY_MIN bytes or more by splicing their
 * pages, holding at most lend_cap bytes of them on loan. Only for a peer
 * that reads every result of a batch before pushing a later one. */
void outq_splice_on(outq *q, uint64_t lend_cap);
/* Drop everything (payload references released; spliced loans and a
 * payload that was partly spliced are marked no_recycle; a shared loan is
 * only released: its peer could at most read the pages again, never
 * change them). */
void outq_free(outq *q);
/* Append a frame; takes a new reference on payload. tag: the batch the
 * frame answers (used only if the payload is spliced). 0 or -1 (memory). */
int outq_push(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload, uint64_t tag);
/* Append a frame whose payload is always copied, never lent: for answers
 * no later push of the peer gives back (an embedding lookup's rows). */
int outq_push_copy(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload);
/* Append a frame whose payload the peer reads where it lies, in shared
 * memory its header names by offset (docs/protocol.md, "Shared memory"):
 * only the header is written; the payload is lent at once, tagged `tag`,
 * until outq_return says the peer has read it. Returns 0; 1 when lending it
 * would pass cap bytes on loan (send it another way); -1 on no memory. */
int outq_push_shared(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload, uint64_t tag, uint64_t cap);
/* The frame appended last is traced: queued at t0_ns (with its NVTX
 * range), answering batch and bucket (the owner's `written` records it). */
void outq_trace_last(outq *q, uint64_t t0_ns, uint64_t nvtx, uint64_t batch, uint64_t bucket);
/* Write as much as the socket takes (one writev, or one splice step).
 * Returns bytes written, or -1 with errno (EAGAIN when the socket is full). */
ssize_t outq_write(outq *q, int fd);
/* The peer pushed batch `batch`: it has read every result of earlier
 * batches, so their loans end (the buffers may be reused). */
void outq_return(outq *q, uint64_t batch);
/* A pass boundary: the peer has read every result; all loans end. */
void outq_return_all(outq *q);

#endif
