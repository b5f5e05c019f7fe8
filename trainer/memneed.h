/* memneed.h — the memory a trainer's job will need, checked before it
 * computes anything, so that a trainer that cannot get it says "out of
 * memory" with the figures instead of failing part way, or hanging.
 *
 * The hang: OpenBLAS maps one buffer (BUFFER_SIZE: 128 MiB on x86-64) at
 * its first product, and when mmap refuses it, blas_memory_alloc tries
 * again for ever: under `ulimit -v` a trainer spun inside cblas_sgemm
 * without a word. So a trainer (1) compares its job's need (model,
 * activations, data, that buffer) with the room its limits and its host
 * leave (memneed_room, memneed_check), and (2) has OpenBLAS map its buffer
 * at start, while that can still be checked: a mapping of the buffer's
 * size is tried and given back first (memneed_reserve_blas). OpenBLAS
 * keeps the buffer for the process's life and reuses it for every later
 * product (its pool is process-wide; a trainer's products never overlap),
 * so no later product maps again. Later allocations of the trainer's own
 * fail as NULL and are reported ("model: out of memory").
 *
 * The need is a floor, not a bound: the arrays the job must have (values
 * and gradients, momentum, activations, data, the buffer); buffers that
 * come and go (messages, the hook's results) are not counted. A refusal
 * means the job cannot run; passing means it may.
 */
#ifndef PSBENCH_MEMNEED_H
#define PSBENCH_MEMNEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/jobconf.h"
#include "trainer/train.h"

/* OpenBLAS's buffer on the builds a trainer meets: BUFFER_SIZE (32 << 22)
 * of x86-64 and of ARMv8's Neoverse and SVE cores (others map 32 << 20:
 * checking for the larger refuses only a job with less than 128 MiB left). */
#define MEMNEED_BLAS_BUFFER ((uint64_t)32 << 22)

typedef struct memneed {
    uint64_t model; /* bytes: parameters, gradients, momentum, activations (host memory) */
    uint64_t data;  /* bytes: the data set */
    uint64_t blas;  /* bytes: OpenBLAS's buffer (address space, touched in part); 0 when the job
                     * computes no product on the host */
    uint64_t stacks; /* bytes: the stacks of the threads the job starts (address space) */
} memneed;

/* The room this process has now. UINT64_MAX: no limit / not known. */
typedef struct memroom {
    uint64_t as_limit, as_used;     /* RLIMIT_AS (ulimit -v) and the address space mapped (VmSize) */
    uint64_t data_limit, data_used; /* RLIMIT_DATA (ulimit -d) and the data segment (VmData) */
    uint64_t available;             /* the host's MemAvailable */
} memroom;

/* A DummyModel job (train.h). host_model: its memory is host memory and
 * its products OpenBLAS's (device cpu, staged, fake-cuda:
 * devspec_host_memory); else (a GPU) the host holds the gradients' pinned
 * twins and computes no product. */
void memneed_dummy(const train_job *j, bool host_model, memneed *n);
/* Add PowerSGD's state to a DummyModel job's need (memneed_dummy first;
 * --compress powersgd): with error feedback, each dense bucket's error
 * (its floats; batched, its zero-padded square: at least that), so the
 * model's dense floats (a sparse embedding's bucket stays fp32 and keeps
 * none). P, Q and the scratch, a few rows per matrix, are not counted. */
void memneed_add_powersgd(const train_job *j, const psgd_conf *p, memneed *n);
/* The batch-update Linear(in, out), batch examples a batch. */
void memneed_linear(uint64_t in, uint64_t out, uint64_t batch, bool host_model, memneed *n);
/* The HybridModel's dense part (under 2 MiB: only OpenBLAS's buffer counts). */
void memneed_hybrid(bool host_model, memneed *n);
/* The synthetic model: floats in all of a batch's buckets, pushed and
 * answered (no product). */
void memneed_synthetic(uint64_t floats, memneed *n);
/* Add the stacks of `threads` threads of the default size (what
 * pthread_create maps for each: glibc's default, from RLIMIT_STACK). */
void memneed_add_threads(memneed *n, unsigned threads);

/* This process's limits and use, and the host's available memory. */
void memneed_room(memroom *r);

/* 0 when the need fits the room, else -1 with a line starting "out of
 * memory: " in err naming the need (its parts), the limit, what it leaves
 * and what is in use. */
int memneed_check(const memneed *n, const memroom *r, char *err, size_t errlen);

/* Have OpenBLAS map its buffer now (nothing when n->blas is 0): a mapping
 * of that size tried and given back, then one product. 0, or -1 with
 * "out of memory: ..." in err (the product is never started then). */
int memneed_reserve_blas(const memneed *n, char *err, size_t errlen);

#endif
