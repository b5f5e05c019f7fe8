/* bounds.h — what one trainer may make a server hold, derived from the
 * job (futures_limits, future.h).
 *
 * A psbench trainer pushes a batch only once it has every result of the
 * batch before (the synthetic run and every hook wait for them; batch-
 * update waits for its round's answer), so at any time it has at most one
 * batch of pushes waiting on a server: its buckets there. The bounds are
 * two batches of them — one batch of room for a protocol-v1 client that
 * pushes one batch ahead — taken from the job's model as the master sends
 * it (the `model` of a server's assignment): how many buckets a trainer
 * pushes per batch, their bytes, and how many distinct buckets the job
 * has. Standalone (no model), the --max-open-pushes and --max-open-bytes
 * flags, or their defaults, stand for it; then a trainer that holds
 * nothing may push one payload of any size (--max-payload bounds it), as
 * before there were bounds: without the model one push's size is unknown.
 */
#ifndef PSBENCH_BOUNDS_H
#define PSBENCH_BOUNDS_H

#include <stdint.h>

#include "server/future.h"
#include "shared/jobconf.h"

/* Batches one trainer may have waiting: the one being answered, and one
 * pushed ahead. */
#define BOUNDS_BATCHES 2u
/* Standalone defaults (no model known): DDP's and the hooks' most buckets
 * (4096) twice, 64 MiB of pushes (twice the 32 MiB batch of the README's
 * and the benchmarks' biggest standalone workload), and the Synthetic
 * model's most buckets. */
#define BOUNDS_DEFAULT_PUSHES (BOUNDS_BATCHES * 4096u)
#define BOUNDS_DEFAULT_BYTES (64ull << 20)
#define BOUNDS_DEFAULT_BUCKETS 65536u

/* Bounds given by flags (or their defaults), without a model. */
void bounds_from_flags(uint32_t pushes, uint64_t bytes, futures_limits *out);
/* Upper bounds of one trainer's pushes per batch for `m` (all its
 * buckets: placement may send them all to one server), times
 * BOUNDS_BATCHES; the job's distinct buckets. A model that pushes nothing
 * to servers (HybridModel) gets bounds that admit nothing. */
void bounds_from_model(const modelconf *m, futures_limits *out);

#endif
