/* bufpool.h — reference-counted payload buffers, recycled across batches.
 *
 * An accumulator becomes the result buffer when its bucket resolves; the
 * same buffer is then queued (by reference) on every waiting trainer's
 * output. When the last reference drops, it returns to the pool, so a steady
 * state of batches allocates no payload-sized memory.
 */
#ifndef PSBENCH_BUFPOOL_H
#define PSBENCH_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct bufpool bufpool;

typedef struct psbuf {
    bufpool *pool;
    uint8_t *data; /* 64-byte aligned */
    size_t cap;
    size_t len;
    int refs;
    struct psbuf *next; /* free list */
} psbuf;

struct bufpool {
    psbuf *free;
    size_t free_bytes;
    size_t keep_bytes;  /* free buffers beyond this are released */
    uint64_t allocs;    /* payload-sized allocations made (for tests/metrics) */
    size_t live;        /* buffers handed out and not yet returned */
};

void bufpool_init(bufpool *p, size_t keep_bytes);
void bufpool_destroy(bufpool *p); /* every buffer must have been returned */
/* A buffer of at least `len` bytes with refs = 1, or NULL. */
psbuf *bufpool_get(bufpool *p, size_t len);
void psbuf_ref(psbuf *b);
void psbuf_unref(psbuf *b);

#endif
