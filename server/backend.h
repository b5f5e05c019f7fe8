/* backend.h — where a server's averaging arithmetic runs.
 *
 * The reactor never does arithmetic itself: it hands each push's payload
 * bytes to the backend as they arrive from the socket and asks it to
 * resolve an entry once every push is in. A backend may finish
 * asynchronously (a CUDA backend enqueues the work on a stream and wakes the
 * reactor from a host callback); it reports completion with
 * server_entry_resolved() on the reactor thread.
 */
#ifndef PSBENCH_BACKEND_H
#define PSBENCH_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/pending.h"

struct server;

typedef struct backend backend;

/* One push in progress, owned by the connection that receives it. The
 * backend keeps its per-push scratch here (index buffers of a sparse push),
 * so that it is reused from one push to the next. */
typedef struct push_ctx {
    pending_entry *e;
    uint32_t slot;
    bool first;            /* this push opened e */
    uint64_t len;          /* payload bytes */
    uint64_t nnz;          /* sparse: rows in this push */
    uint8_t *idx;          /* sparse: the raw int64 indices */
    uint32_t *rowslot;     /* sparse: accumulator slot of each row */
    uint64_t idx_cap;      /* capacity of idx/rowslot in rows */
    char err[128];         /* reason when push_data fails */
} push_ctx;

typedef struct backend_ops {
    const char *name;
    /* A push into p->e was accepted: allocate what it needs. 0 or -1. */
    int (*push_begin)(backend *b, push_ctx *p);
    /* Where payload bytes from offset `off` may be received directly (no
     * arithmetic needed for them), and how many; NULL if they must go
     * through push_data. With NULL, a non-zero *max is how many bytes are
     * worth reading for push_data before this push may be received
     * directly (reading more would have push_data copy the excess). */
    uint8_t *(*push_direct)(backend *b, push_ctx *p, uint64_t off, size_t *max);
    /* n bytes were received at the pointer push_direct gave for `off`. The
     * caller keeps off + n on a float boundary (or the payload's end). */
    void (*push_direct_done)(backend *b, push_ctx *p, uint64_t off, size_t n);
    /* `n` payload bytes at offset `off` arrived (any alignment of src;
     * off + n is a multiple of 4 unless it is the end of the payload).
     * Returns 0, or -1 when the push is invalid (p->err says why: the
     * caller answers shape_mismatch and calls push_abort). */
    int (*push_data)(backend *b, push_ctx *p, uint64_t off, const uint8_t *src, size_t n);
    /* The push stops before its payload is complete: forget it. */
    void (*push_abort)(backend *b, push_ctx *p);
    /* Every push of e is in: compute the mean and call
     * server_entry_resolved (now or later, on the reactor thread). */
    void (*resolve)(backend *b, pending_entry *e);
    /* Free whatever e holds (failed or finished entries). */
    void (*release)(backend *b, pending_entry *e);
    void (*destroy)(backend *b);
} backend_ops;

struct backend {
    const backend_ops *ops;
    struct server *srv;
};

backend *backend_cpu_new(struct server *srv);
void push_ctx_free(push_ctx *p);

#endif
