/* gpushare.h — a trainer's GPU as the transport sees it for CUDA IPC with
 * a server on the same GPU (docs/protocol.md, "CUDA IPC on one GPU").
 *
 * The training layer (train.c) owns the GPU and the memory its gradients
 * live in; the client (the export handshake) and rpc_hook (pushes by
 * offset, means copied device to device) only need these few things of
 * it, so they get them as this table and never see the compute layer.
 * Every call runs on the training thread (the client's handshake and
 * rpc_hook's ready and wait do).
 */
#ifndef PSBENCH_GPUSHARE_H
#define PSBENCH_GPUSHARE_H

#include <stddef.h>
#include <stdint.h>

#include "shared/devmem.h"
#include "shared/half.h"

#define GPUSHARE_HANDLE 64

typedef struct gpushare {
    char gpu[48];                        /* the GPU's UUID, as the server's welcome says its own */
    unsigned char mem[GPUSHARE_HANDLE];  /* the exported memory (the gradients) */
    unsigned char ev[GPUSHARE_HANDLE];   /* the event recorded before each push */
    uint64_t bytes;                      /* the exported memory's size */
    /* Narrow pushes (--compress): the byte offset of the gradients' narrow
     * shadow in the exported memory — the 16-bit copy of the float at byte
     * offset o lies at shadow + o / 2 — or 0: none (pushes are f32). */
    uint64_t shadow;
    devmem base;                         /* its device address: a bucket's `dev` is its offset from here */
    void *ctx;                           /* the calls' first argument */
    /* gpushare_init's: the compute context and buffer behind the calls
     * (opaque to the client and hooks) */
    void *impl_compute, *impl_buf;
    /* The event, now: everything enqueued so far (the bucket's writer, the
     * copies of earlier means) comes before it. */
    void (*record)(void *ctx);
    /* A server's exported memory, mapped here (none with err); closed once
     * no copy from it is in flight. */
    devmem (*open)(void *ctx, const unsigned char *mem, uint64_t bytes, char *err, size_t errlen);
    void (*close)(void *ctx, devmem p);
    /* bytes from src (a server's memory) to dst (inside the exported
     * memory), device to device, enqueued before whatever the trainer
     * enqueues next. */
    void (*copy)(void *ctx, devmem dst, devmem src, uint64_t bytes);
    /* bytes from host memory src to dst (inside the exported memory),
     * enqueued likewise: a mean that came on the socket after all (src
     * stays as it is until the trainer's next step). */
    void (*upload)(void *ctx, devmem dst, const void *src, uint64_t bytes);
    /* n floats at src (inside the exported memory) narrowed to type t into
     * dst (their place in the shadow); n 16-bit values of type t at src (a
     * server's memory) widened into the floats at dst (inside the exported
     * memory). Both enqueued likewise. */
    void (*narrow)(void *ctx, devmem dst, devmem src, uint64_t n, half_type t);
    void (*widen)(void *ctx, devmem dst, devmem src, uint64_t n, half_type t);
} gpushare;

/* The calls over a compute context `c` (compute.h) and its buffer `b` from
 * compute_alloc_shared, exported, whose narrow shadow (if any: 0) begins at
 * byte `shadow`: 0, or -1 with err (c has no GPU, b is not shareable).
 * g->ctx is g; c and b must outlive every call. */
struct compute;
struct cbuf;
int gpushare_init(gpushare *g, struct compute *c, struct cbuf *b, uint64_t shadow, char *err, size_t errlen);

#endif
