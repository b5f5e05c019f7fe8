/* coll_impl.h — what coll.c shares with the backends behind coll.h
 * (coll_gloo.cpp, coll_nccl.c): the part of a group every backend has, the
 * table of a backend's operations, and the checks both constructors make.
 * Callers use coll.h; only the coll sources include this.
 *
 * coll.c owns the dispatch: it checks arguments, makes a failed group fail
 * fast with its first reason, and calls a backend's operation only with
 * work to do (n > 0, bytes > 0, a non-zero total). A backend's operation
 * returns 0, or -1 with a one-line reason in err; after -1 coll.c marks the
 * group failed and never calls the backend again except to destroy it.
 */
#ifndef PSBENCH_COLL_IMPL_H
#define PSBENCH_COLL_IMPL_H

#include "trainer/coll.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest reason a group keeps (longer ones are cut). */
#define COLL_ERR_MAX 512

typedef struct coll_ops {
    const char *name; /* "gloo", "nccl" */
    int (*allreduce_sum_f32)(coll *c, float *buf, size_t n, char *err, size_t errlen);
    /* NULL: the backend has no device-memory collectives (gloo). */
    int (*allreduce_mean_f32_device)(coll *c, devf32 dbuf, size_t n, float scale, char *err, size_t errlen);
    int (*allgather)(coll *c, const void *in, size_t bytes, void *out, char *err, size_t errlen);
    /* counts: size entries, counts[rank] == bytes; total: their sum. */
    int (*allgatherv)(coll *c, const void *in, size_t bytes, const uint64_t *counts, uint64_t total, void *out,
                      char *err, size_t errlen);
    /* Frees impl and everything it holds (c->failed says whether to abort
     * rather than close cleanly); coll_free frees c itself. */
    void (*destroy)(coll *c);
    /* NULL: no fp16/bf16 allreduce (coll_has_half). t is HALF_FP16 or
     * HALF_BF16. Last, so that the tables that lack it end before it. */
    int (*allreduce_sum_half)(coll *c, uint16_t *buf, size_t n, half_type t, char *err, size_t errlen);
    /* NULL: no compressed allreduce of device buckets
     * (coll_has_half_device). t is HALF_FP16 or HALF_BF16. */
    int (*allreduce_compress_device)(coll *c, devf32 dbuf, size_t n, half_type t, char *err, size_t errlen);
} coll_ops;

struct coll {
    const coll_ops *ops;
    void *impl; /* the backend's state, owned by it (freed by ops->destroy) */
    uint32_t rank, size;
    bool failed;
    char failure[COLL_ERR_MAX]; /* the first failure's reason */
};

/* A group around a backend's state; NULL with err (impl is then still the
 * caller's to free). */
coll *coll_wrap(const coll_ops *ops, void *impl, uint32_t rank, uint32_t size, char *err, size_t errlen);

/* The checks both constructors make on their common arguments: 0, or -1
 * with err naming `backend`. */
int coll_check_args(const char *backend, uint32_t rank, uint32_t size, const coll_store *store, double timeout_s,
                    char *err, size_t errlen);

/* The store key `prefix`/`name` (prefix NULL or empty: `name`), malloc'd;
 * NULL when out of memory. */
char *coll_key(const char *prefix, const char *name);

/* Monotonic seconds. */
double coll_now(void);

/* Writing to a socket whose peer is gone raises SIGPIPE, which kills a
 * process that leaves it at its default; the Gloo transport writes with
 * writev(2), which cannot ask for MSG_NOSIGNAL. Sets SIGPIPE to SIG_IGN
 * when it is at SIG_DFL (a handler someone installed is left alone). */
void coll_ignore_sigpipe(void);

#ifdef __cplusplus
}
#endif

#endif
