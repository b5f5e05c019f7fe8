/* device_host.h — what the device implementations share: the layout of
 * the handles, the host-memory devices' (cpu, test) buffers, sparse
 * accumulators and one implementation of the arithmetic. Private to
 * server/device_*.c and server/cuda/ (cuda_buf.c keeps the cuda device's sparse
 * accumulators on the host too); the layers above see only device.h,
 * where devbuf and devsparse are opaque.
 *
 * A host devbuf is a psbuf from the server's pool: its storage and its
 * host image are the same bytes, and `dev` is none. A cuda devbuf's
 * storage is `dev` (device memory) and `host` its pinned image, made at
 * the first to-host. Handles are recycled (a round of K buckets would
 * otherwise allocate K of them). `jobs` and `host_valid` are the test and
 * cuda devices' bookkeeping; the cpu device leaves them alone.
 */
#ifndef PSBENCH_DEVICE_HOST_H
#define PSBENCH_DEVICE_HOST_H

#include "server/device.h"
#include "server/reduce.h"
#include "shared/devmem.h"
#include "shared/sparse.h"

#include <assert.h>

struct devbuf {
    psbuf *host;         /* host devices: storage and host image (host->len is
                          * the size); cuda: the pinned image, or NULL */
    devmem dev;          /* cuda: device memory of dev_cap bytes; else none */
    size_t dev_cap;
    size_t bytes;        /* the size asked for */
    uint32_t jobs;       /* test, cuda: times jobs in flight name it */
    bool host_valid;     /* test, cuda: a to-host completed and nothing wrote it since */
    uint64_t share_off;  /* cuda: dev lies in the device's shared memory, at this offset (else RANGES_NONE) */
    bool host_only;      /* cuda: only the host image was written (a sparse emit): dev holds nothing */
    uint32_t chain;      /* cuda: its chain in the batch of small folds ... */
    uint64_t chain_gen;  /* ... when this is that batch's number (else none) */
    struct devbuf *next; /* the spare list */
};

struct devsparse {
    sparse_acc acc;
    uint32_t jobs; /* test: emit jobs in flight naming it */
};

typedef struct device_host {
    bufpool *pool;
    devbuf *spare; /* recycled handles */
    size_t nspare;
} device_host;

void device_host_init(device_host *h, bufpool *pool);
/* Free the recycled handles (every devbuf was freed). */
void device_host_free(device_host *h);
/* A handle over a fresh psbuf of `bytes` bytes; NULL when out of memory. */
devbuf *device_host_buf_new(device_host *h, size_t bytes);
/* Drop the psbuf reference and recycle the handle. */
void device_host_buf_free(device_host *h, devbuf *b);
/* Recycle the handle, giving its psbuf reference to the caller. */
psbuf *device_host_buf_take(device_host *h, devbuf *b);

devsparse *device_host_sparse_new(void);
void device_host_sparse_free(devsparse *s);

/* The arithmetic, on host memory: a fold (inline: it is the data path of
 * every push), and a job's work (no completion, no to-host: nothing to
 * copy). */
static inline void device_host_fold(device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                                    float s)
{
    assert((elem_off + n) * sizeof(float) <= acc->host->len);
    float *a = (float *)(void *)acc->host->data + elem_off;
    switch (op) {
    case FOLD_COPY:
        reduce_copy_f32(a, src, n);
        break;
    case FOLD_ADD:
        reduce_add_f32(a, src, n);
        break;
    case FOLD_ADD_SCALE:
        reduce_add_scale_f32(a, src, n, s);
        break;
    case FOLD_COPY_SCALE:
        reduce_copy_scale_f32(a, src, n, s);
        break;
    }
}
/* device_fold_narrow_out on host memory (device.h): a slice at a time
 * widened into a scratch in L1, folded there as reduce.c folds f32, and
 * narrowed into out. */
void device_host_fold_narrow_out(device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off, const uint8_t *src,
                                 size_t n, float s, half_type t);
/* device_fold_narrow_pair on host memory (device.h): half_pair_sum and
 * half_pair_mean (shared/half.h). */
void device_host_fold_narrow_pair(device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out, uint64_t elem_off,
                                  const uint8_t *src, size_t n, float s, half_type t);
void device_host_job_run(device_job *j);

/* Every devbuf a job names (to_host included), with whether the job
 * writes it; and its devsparse, if any. */
void device_host_job_bufs(const device_job *j, void (*fn)(devbuf *b, bool writes, void *arg), void *arg);
devsparse *device_host_job_sparse(const device_job *j);

#endif
