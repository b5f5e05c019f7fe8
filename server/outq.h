/* outq.h — a connection's output queue: frames waiting to be written.
 *
 * Each entry is a frame's header bytes (copied, they are small) and an
 * optional payload held by reference (psbuf), so one result buffer serves
 * every trainer without a copy. Entries live in a growable ring, so a
 * steady state of rounds allocates nothing; outq_write sends as many
 * frames as the socket takes in one writev.
 */
#ifndef PSBENCH_OUTQ_H
#define PSBENCH_OUTQ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/bufpool.h"

#define OUTQ_INLINE_HDR 200 /* larger headers (long error messages) go to the heap */

typedef struct outq_item {
    uint8_t small[OUTQ_INLINE_HDR];
    uint8_t *hdr; /* small, or malloc'd */
    uint32_t hlen;
    psbuf *payload; /* NULL: header only */
    uint64_t done;  /* bytes of hdr + payload already written */
} outq_item;

typedef struct outq {
    outq_item *items;
    size_t head, len, cap; /* ring */
    uint64_t bytes;        /* unwritten bytes */
} outq;

void outq_init(outq *q);
/* Drop everything (payload references released). */
void outq_free(outq *q);
/* Append a frame; takes a new reference on payload. 0 or -1 (memory). */
int outq_push(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload);
/* writev as much as the socket takes. Returns bytes written, or -1 with
 * errno (EAGAIN when the socket is full). */
ssize_t outq_write(outq *q, int fd);

#endif
