/* staging.h — a staging ring: host bytes on their way to the GPU, for both
 * roles (the server's recv areas, fold sources and the arrays a job
 * uploads: server/cuda/; the trainer's host arguments: indices, targets,
 * sparse rows: trainer/compute_cuda.c).
 *
 * The ring is chunks of pinned host memory, each with a device twin of
 * the same size, used one after the other. The caller writes bytes at the
 * current chunk's `used` (staging_host), queues their copy to the twin
 * (staging_dev) and whatever reads them there, and takes them
 * (staging_take). A chunk that cannot hold the next need is closed: an
 * event is recorded on the stream, after everything queued that reads it,
 * and the chunk is reused once that event is complete. When no closed chunk
 * is complete, the ring makes another rather than wait — unless the caller
 * set a limit: past `limit` bytes of chunks it waits for the oldest closed
 * one instead (the trainer may block; the server's reactor never does: its
 * limit is 0).
 *
 * Invariants: every chunk is in exactly one place — cur (being filled),
 * closed (its event recorded; oldest first) or idle (reusable, used = 0);
 * cur->used <= cur->cap. The ring owns its chunks (host memory, device
 * twin, event); staging_free is the one place they are freed.
 *
 * The caller's rule: whatever reads the current chunk must be queued on the
 * stream before the next staging_room (that call may close it). The server
 * keeps its batch of small folds in the current chunk and enqueues it first
 * (server/cuda/cuda_batch.c).
 *
 * Threads: one caller.
 */
#ifndef PSBENCH_GPU_STAGING_H
#define PSBENCH_GPU_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "shared/gpu/cugpu.h"

/* The alignment of each take: the next use starts 64-byte aligned (the
 * server's kernels load float4 where aligned; the trainer's parts need 16). */
#define STAGING_ALIGN 64u

typedef struct staging_chunk {
    uint8_t *host; /* pinned */
    devmem dev;    /* its device twin */
    size_t cap, used;
    cugpu_event *ev; /* recorded when the chunk was closed */
    struct staging_chunk *next;
} staging_chunk;

typedef struct staging {
    cugpu *g;
    cugpu_stream *s;
    size_t chunk;    /* a chunk's usual size (a larger need gets a chunk its size) */
    size_t limit;    /* 0: grow, never wait; else see the top of this file */
    size_t held;     /* bytes of the chunks made */
    uint64_t allocs; /* chunks made (or tried): the server counts them as allocations */
    staging_chunk *cur;
    staging_chunk *closed_head, *closed_tail; /* waiting for their event, oldest first */
    staging_chunk *idle;                      /* reusable */
    char err[600];                            /* why staging_room failed */
} staging;

/* An empty ring on stream s of g (nothing is allocated until the first
 * staging_room). */
void staging_init(staging *r, cugpu *g, cugpu_stream *s, size_t chunk, size_t limit);

/* Make the current chunk hold `need` more bytes: close it when it cannot,
 * and take the oldest closed chunk the GPU is done with, an idle one that
 * fits, or a new one. 0, or -1 with the reason in r->err (the stream
 * failed, or no memory). */
int staging_room(staging *r, size_t need);

/* n bytes taken from the current chunk (the next use starts aligned; the
 * chunk's end at most). */
void staging_take(staging *r, size_t n);

/* The current chunk's bytes in use, and its room (0: none yet). */
static inline size_t staging_used(const staging *r) { return r->cur ? r->cur->used : 0; }
static inline size_t staging_left(const staging *r) { return r->cur ? r->cur->cap - r->cur->used : 0; }

/* The current chunk at offset `off`: its host bytes, their device twin. */
static inline uint8_t *staging_host_at(const staging *r, size_t off) { return r->cur->host + off; }
static inline devmem staging_dev_at(const staging *r, size_t off) { return devmem_at(r->cur->dev, off); }

/* The stream is idle (after a drain or a sync): every chunk is reusable. */
void staging_reset(staging *r);

/* Frees every chunk (the stream idle or gone). */
void staging_free(staging *r);

#endif
