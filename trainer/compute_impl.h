/* compute_impl.h — what compute.c shares with the implementations behind
 * compute.h (compute_cpu.c, compute_cuda.c): the buffer handle's fields
 * and each implementation's constructor. Models use compute.h only; only
 * the compute sources include this.
 */
#ifndef PSBENCH_COMPUTE_IMPL_H
#define PSBENCH_COMPUTE_IMPL_H

#include "trainer/compute.h"

struct cbuf {
    void *ptr;           /* host address (cpu, pinned, host) or device address (cuda's device memory) */
    uint64_t n;          /* elements */
    compute_dtype dtype;
    compute_mem mem;
    bool lent;           /* ptr is the lender's (compute_lend): release frees the handle only */
    compute *owner;      /* the context that allocated it */
    bool shared;         /* device memory another process may open (compute_alloc_shared) */
};

static inline size_t compute_dtype_size(compute_dtype t) { return t == COMPUTE_F64 ? 8 : 4; }

/* The span's elements exist: off + n <= the buffer's count. */
static inline bool cspan_valid(cspan s) { return s.buf && s.off <= s.buf->n && s.n <= s.buf->n - s.off; }

/* A buffer around ptr (already allocated by the implementation); NULL
 * when out of memory (ptr is then still the caller's). */
cbuf *cbuf_wrap(compute *c, void *ptr, uint64_t n, compute_dtype t, compute_mem mem);

/* The context has failed (compute.h): the first reason is kept, later
 * ones are dropped. */
void compute_fail(compute *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The implementations: NULL with err. compute_cuda_new: dev is a GPU
 * ("cuda", "cuda:N") or the fake one ("fake-cuda"): devspec_on_gpu
 * (compute_cuda.c). */
compute *compute_cpu_new(char *err, size_t errlen);
compute *compute_cuda_new(device_spec dev, char *err, size_t errlen);
/* Tests only: the cpu's arithmetic on memory without host views, copies
 * completed late (compute_staged.c). */
compute *compute_staged_new(char *err, size_t errlen);

#endif
