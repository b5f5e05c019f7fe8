/* coll.h — a group of trainers and the collectives the hooks need: the
 * transport below allreduce_hook, sparse_rpc_hook and hybrid_hook.
 *
 * Two backends behind one interface:
 *   gloo — CPU collectives over TCP (Debian's libgloo, the library behind
 *          PyTorch's CPU DDP), reached through coll_gloo.cpp, the one C++
 *          file in the project;
 *   nccl — GPU collectives (compiled in where the CUDA toolkit and NCCL are
 *          found, PSBENCH_HAVE_NCCL); the host-buffer calls below stage
 *          through device memory; coll_allreduce_mean_f32_device runs on
 *          the caller's device buffer itself (a CUDA trainer's gradients).
 *
 * Rendezvous goes through a key-value store the caller provides (the
 * trainer's is the master, over the control connection): every member sets
 * what the others need under `prefix` and reads theirs. A group is used by
 * one thread at a time; every member must issue the same collectives in the
 * same order. Every call is bounded by the group's timeout (--rpc-timeout):
 * a lost or silent peer makes it return -1 with a one-line reason, never
 * hang. After a failure the group is unusable: free it.
 */
#ifndef PSBENCH_COLL_H
#define PSBENCH_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/devmem.h"
#include "shared/half.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rendezvous store. set: 0, or -1 with err. get: waits until the key
 * exists (up to the store's own deadline), then *val is a malloc'd copy the
 * caller frees and *len its size: 0, or -1 with err. */
typedef struct coll_store {
    int (*set)(void *ctx, const char *key, const void *val, size_t len, char *err, size_t errlen);
    int (*get)(void *ctx, const char *key, uint8_t **val, size_t *len, char *err, size_t errlen);
    void *ctx;
} coll_store;

typedef struct coll coll;

/* A Gloo group of `size` members, this one `rank`: its TCP transport binds
 * to `host` (an address or name of this host that the other members can
 * reach; NULL: the host name). NULL with err.
 * Joining waits for each member's keys as long as the store's get does,
 * then up to timeout_s for the connections. Gloo listens on one ephemeral
 * port of `host` per peer while joining (the ports cannot be chosen) and
 * then keeps size-1 TCP connections and one thread; a peer lost mid-write
 * raises SIGPIPE, so this sets SIGPIPE to SIG_IGN where it is at SIG_DFL.
 * A group of one opens nothing and uses no store: its collectives copy. */
coll *coll_gloo_new(uint32_t rank, uint32_t size, const char *host, const coll_store *store, const char *prefix,
                    double timeout_s, char *err, size_t errlen);

/* An NCCL group on CUDA device `cuda_device`; rank 0 creates the unique id
 * and shares it through the store. NULL with err (also in builds without
 * NCCL: "this build has no NCCL"). */
coll *coll_nccl_new(uint32_t rank, uint32_t size, int cuda_device, const coll_store *store, const char *prefix,
                    double timeout_s, char *err, size_t errlen);

/* NCCL's stand-in for trainers on the fake GPU (fake-cuda: tests, any
 * machine): a Gloo group (arguments as coll_gloo_new's) that also takes
 * device memory (coll_on_device), which on the fake GPU is host memory.
 * It lets a fake-cuda trainer's NCCL paths — buckets handed over in
 * device memory, means made there — run end to end without a GPU. */
coll *coll_nccl_fake_new(uint32_t rank, uint32_t size, const char *host, const coll_store *store, const char *prefix,
                         double timeout_s, char *err, size_t errlen);

/* Whether this build has NCCL compiled in. */
bool coll_have_nccl(void);

/* "gloo" or "nccl". */
const char *coll_backend(const coll *c);
uint32_t coll_rank(const coll *c);
uint32_t coll_size(const coll *c);

/* buf[0..n) = the element-wise sum of every member's buf, identical bits on
 * every member. 0, or -1 with err. */
int coll_allreduce_sum_f32(coll *c, float *buf, size_t n, char *err, size_t errlen);

/* buf[0..n) (t: HALF_FP16 or HALF_BF16 bits) = the element-wise sum of
 * every member's buf, each add done in float and rounded to t
 * (half_sum_fp16/bf16): what PyTorch's Gloo process group computes for a
 * Half or BFloat16 tensor, the allreduce of fp16_compress_hook and
 * bf16_compress_hook. Identical bits on every member. 0, or -1 with err;
 * -1 naming the backend for one without narrow collectives
 * (coll_has_half). */
int coll_allreduce_sum_half(coll *c, uint16_t *buf, size_t n, half_type t, char *err, size_t errlen);

/* Whether the group has coll_allreduce_sum_half, on host buffers: gloo
 * (NCCL compresses device buckets: coll_has_half_device). */
bool coll_has_half(const coll *c);

/* Whether the group runs collectives on device memory
 * (coll_allreduce_mean_f32_device): nccl. */
bool coll_on_device(const coll *c);

/* dbuf[0..n) (device memory of the group's GPU, written by work that is
 * complete before the call) = the element-wise sum of every member's dbuf,
 * then times `scale` (one float multiply per element, as a host loop does:
 * the same bits as coll_allreduce_sum_f32 followed by that loop). Runs on
 * the group's own stream; returns once an event recorded after it is
 * complete (polled, bounded by the group's timeout). 0, or -1 with err;
 * -1 with "not on device memory" for a group without it (gloo). */
int coll_allreduce_mean_f32_device(coll *c, devf32 dbuf, size_t n, float scale, char *err, size_t errlen);

/* PyTorch's fp16_compress_hook / bf16_compress_hook (t: HALF_FP16 or
 * HALF_BF16) on a bucket in device memory, as CUDA runs it: dbuf[0..n)
 * (written by work complete before the call) cast to t and times the fp32
 * reciprocal of the group's size (ATen's CUDA division by a scalar:
 * shared/half_elem.h, he_narrow_mul), summed across members in t (each add
 * rounded to t: NCCL's sum of Half and BFloat16, in its own order beyond
 * two members), then cast back into dbuf (he_widen). The narrow values
 * live in the group's own device buffer; completion as
 * coll_allreduce_mean_f32_device's. 0, or -1 with err; -1 naming the
 * backend for one without it (coll_has_half_device). */
int coll_allreduce_compress_device(coll *c, devf32 dbuf, size_t n, half_type t, char *err, size_t errlen);

/* Whether the group has coll_allreduce_compress_device: nccl, and its
 * stand-in on the fake GPU. */
bool coll_has_half_device(const coll *c);

/* out = every member's `bytes` bytes of in, in rank order (size * bytes). */
int coll_allgather(coll *c, const void *in, size_t bytes, void *out, char *err, size_t errlen);

/* out = every member's in, in rank order, member r contributing counts[r]
 * bytes (counts[rank] == bytes; out holds their sum). */
int coll_allgatherv(coll *c, const void *in, size_t bytes, const uint64_t *counts, void *out, char *err,
                    size_t errlen);

void coll_free(coll *c);

#ifdef __cplusplus
}
#endif

#endif
