/* ddp_buckets.h — gradient buckets exactly as PyTorch's
 * DistributedDataParallel makes them, so that a psbench bucket carries what
 * the same bucket carries under DDP (torch 1.13's
 * torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size,
 * and torch/nn/parallel/distributed.py).
 *
 * DDP buckets twice:
 * - For its first iteration (DDP's initial assignment, find_unused_parameters
 *   off): every dense parameter in one bucket of unlimited size, in
 *   definition order, each parameter with a sparse gradient in a bucket of
 *   its own; the buckets in the reverse order of their smallest parameter
 *   index. The dense bucket is ready only once backward has finished every
 *   dense gradient: its reduction follows backward.
 * - From the second iteration on (the Reducer's rebuild, from the order in
 *   which the first iteration's gradients became ready): walking the
 *   parameters in that order, a sparse one is a bucket of its own at once;
 *   a dense one joins the open bucket, which closes once its bytes *reach*
 *   the limit (the parameter that crosses it stays in); the first limit is
 *   first_cap (DDP's first bucket, 1 MiB by default), every later one cap
 *   (bucket_cap_mb x 2^20, truncated). The open bucket, if any, comes last.
 *   The buckets keep the order they were made in (no sort).
 * DDP reduces the buckets in their order: bucket k starts once buckets
 * 0..k are all ready (train.c hands them over so).
 *
 * tests/unit/trainer/test_ddp_buckets.c holds these rules against a table that
 * PyTorch's own DDP produced (tests/tools/ddp_layouts.py).
 */
#ifndef PSBENCH_DDP_BUCKETS_H
#define PSBENCH_DDP_BUCKETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* DDP's _DEFAULT_FIRST_BUCKET_BYTES, in MiB: a trainer configuration's
 * first_bucket_mb default. */
#define DDPB_FIRST_BUCKET_MB 1.0

typedef struct ddpb_layout {
    uint32_t nbuckets;
    uint32_t nparams;
    uint32_t *start; /* nbuckets + 1: bucket k's parameters are param[start[k] .. start[k+1]) */
    uint32_t *param; /* nparams parameter indices, bucket by bucket, in DDP's order */
} ddpb_layout;

/* The rebuilt buckets: parameter i has bytes[i] bytes of gradient and a
 * sparse gradient when sparse[i]; ready[0..n) is every parameter index
 * once, in the order the gradients became ready. 0, or -1 (out of
 * memory) with *out empty. */
int ddpb_rebuilt(const uint64_t *bytes, const bool *sparse, const uint32_t *ready, uint32_t n, uint64_t first_cap,
                 uint64_t cap, ddpb_layout *out);
/* The first iteration's buckets. 0, or -1 (out of memory). */
int ddpb_initial(const uint64_t *bytes, const bool *sparse, uint32_t n, ddpb_layout *out);
/* A limit in MiB as DDP turns it into bytes: int(mb * 1024 * 1024). */
uint64_t ddpb_cap_bytes(double mb);
/* Bucket k's parameter count and bytes. */
static inline uint32_t ddpb_count(const ddpb_layout *l, uint32_t k) { return l->start[k + 1] - l->start[k]; }
uint64_t ddpb_bytes(const ddpb_layout *l, uint32_t k, const uint64_t *bytes);
void ddpb_free(ddpb_layout *l);

#endif
