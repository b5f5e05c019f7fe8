/* bufpool.h — reference-counted payload buffers, recycled across batches.
 *
 * An accumulator becomes the result buffer when its bucket resolves; the
 * same buffer is then queued (by reference) on every waiting trainer's
 * output. When the last reference drops, it returns to the pool, so a steady
 * state of batches allocates no payload-sized memory.
 *
 * Buffers of BUFPOOL_MAP_MIN bytes or more are whole pages of their own
 * (mmap). Their pages can be spliced into sockets (outq.c): the kernel then
 * holds the pages, not a copy, until the peer reads them. Such a buffer must
 * not be written again before then; when that cannot be known any more (the
 * connection closed first), it is marked no_recycle and unmapped instead of
 * reused. Unmapping is safe: the pages live on, unchanged, while the kernel
 * holds them.
 */
#ifndef PSBENCH_BUFPOOL_H
#define PSBENCH_BUFPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BUFPOOL_MAP_MIN (64u * 1024u)

typedef struct bufpool bufpool;

/* Where a pool's memory comes from, when not from the C heap and mmap: the
 * cuda device's pool of pinned host memory (cudaHostAlloc). alloc returns
 * memory aligned to 64 bytes or NULL; free gets what alloc returned.
 * Buffers of BUFPOOL_MAP_MIN bytes or more are asked for in whole pages;
 * where alloc returned them page-aligned they count as pages of their own
 * (`mapped`: they may be spliced). Since such memory may go back to an
 * allocator that hands the same pages out again (a driver's cache of
 * pinned pages), a no_recycle buffer of this pool is never freed before
 * the pool is destroyed (the server's end): it is set aside. */
typedef struct bufpool_mem {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    /* NULL, or: a buffer's device twin (psbuf.twin) is given back, as the
     * buffer's last reference drops. */
    void (*twin_free)(void *ctx, uint64_t twin);
    void *ctx;
} bufpool_mem;

typedef struct psbuf {
    bufpool *pool;
    uint8_t *data; /* 64-byte aligned */
    size_t cap;
    size_t len;
    int refs;
    bool mapped;     /* data is an mmap of its own (cap is whole pages) */
    bool custom;     /* data came from the pool's bufpool_mem */
    bool no_recycle; /* pages may still be in a socket: unmap, never reuse */
    /* 0, or the same bytes in the GPU memory the cuda device shares with
     * its peers (device.h, device_share): their offset there plus one.
     * Owned by the buffer while it lives: given back with its last
     * reference (bufpool_mem.twin_free). */
    uint64_t twin;
    bool twin_only;  /* only the twin holds the bytes (nobody reads them on the host) */
    struct psbuf *next; /* free list */
} psbuf;

struct bufpool {
    psbuf *free;
    size_t free_bytes;
    size_t keep_bytes;  /* free buffers beyond this are released */
    uint64_t allocs;    /* payload-sized allocations made (for tests/metrics) */
    size_t live;        /* buffers handed out and not yet returned */
    bufpool_mem mem;    /* alloc NULL: the heap and mmap */
    psbuf *aside;       /* custom memory that may still be in a socket */
};

void bufpool_init(bufpool *p, size_t keep_bytes);
/* A pool whose memory comes from `mem` (never mapped: not spliced). */
void bufpool_init_mem(bufpool *p, size_t keep_bytes, const bufpool_mem *mem);
void bufpool_destroy(bufpool *p); /* every buffer must have been returned */
/* A buffer of at least `len` bytes with refs = 1, or NULL. */
psbuf *bufpool_get(bufpool *p, size_t len);
/* Release free buffers until at most keep_bytes of them remain. */
void bufpool_trim(bufpool *p, size_t keep_bytes);
void psbuf_ref(psbuf *b);
void psbuf_unref(psbuf *b);

#endif
