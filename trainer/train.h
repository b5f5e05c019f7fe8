/* train.h — real training: DummyData and DummyModel (on the compute layer
 * of train_job.device: the cpu today), gradients
 * cut into DDP-style buckets that go to the communication hook (hook.h:
 * servers or collectives) while the rest of backward runs, SGD once every
 * bucket's mean is back.
 *
 * Buckets: exactly DDP's (ddp_buckets.h): in the first iteration of every
 * pass every dense gradient is one bucket, handed over once backward has
 * finished them; from the second, the parameters in the order backward
 * finishes them (the reverse of theirs), a bucket closed once it reaches
 * first_bucket_mb (the first) or bucket_cap_mb (every later one); a sparse
 * embedding is a bucket of its own and travels sparse (only the touched
 * rows). Buckets leave in id order, as DDP reduces them. A dense bucket is
 * a contiguous range of the model's flat gradient buffer, so the hook
 * sends it in place and the mean comes back into the same place.
 *
 * Passes: each starts from a fresh model (the seed's initial parameters,
 * no momentum), as the seed builds a new model and DDP wrapper for its
 * warm-up and again for its timed pass.
 *
 * Metrics (the seed's names keep the seed's meanings): backward is
 * loss.backward() under DDP — the compute and the wait for every bucket's
 * mean (exposed_wait) —, backward_compute the compute alone.
 *
 * Staged buckets: where the gradients have no host view (a device's
 * memory: compute.h), each bucket has a twin in pinned host memory that
 * train.c owns (the sparse one sized for the largest batch's rows). When
 * backward finishes a bucket's last parameter, the copy of its range (the
 * sparse one: its values; its rows are host memory) into the twin is
 * enqueued and its mark recorded; backward goes on, and the bucket is
 * handed to the hook, in bucket order, once that mark is done (polled at
 * every later bucket, waited for after backward), so a hook never reads a
 * gradient before the copy — nor the copy before the op that wrote the
 * gradient. A dense mean comes back in the twin and is copied into the
 * gradient range before the optimizer's steps, enqueued ahead of them. On
 * the cpu (host views) none of this runs: the hook gets the gradients
 * themselves, zero copies — in memory the hook lends where it has some
 * (train_new), so that it sends them without a copy either.
 */
#ifndef PSBENCH_TRAIN_H
#define PSBENCH_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "shared/devspec.h"
#include "shared/metrics.h"
#include "trainer/hook.h"
#include "trainer/data.h"
#include "trainer/loss_check.h"
#include "trainer/model.h"

typedef struct train_job {
    model_config model;
    data_config data;
    uint64_t seed, batch_size, epochs;
    uint32_t rank, ntrainer; /* the data is dealt round-robin over all trainers */
    double lr, momentum, bucket_cap_mb;
    double first_bucket_mb; /* DDP's first bucket (ddp_buckets.h; DDPB_FIRST_BUCKET_MB) */
    bool allow_divergence; /* a loss that is not finite: go on (else the pass stops there) */
    device_spec device;    /* the compute layer's device (compute_new); zeroed: the cpu */
    half_type compress;    /* dense buckets' type on the wire (--compress); zeroed: fp32 */
} train_job;

typedef struct train train;

/* Called after every batch (the master link reports there). 0, or -1 to
 * stop with a reason in err. */
typedef int (*train_tick_fn)(void *ctx, uint64_t batches_done, char *err, size_t errlen);

/* h: the hook its buckets will go to (train_pass's), or NULL (not known
 * yet). Where h lends memory that dense buckets leave from without a copy
 * (hook_send_memory: rpc_hook over shared memory) and the model computes
 * on host memory (the cpu), the model's gradients are computed there
 * (model_new_lent), so that no push copies them; elsewhere, and when h has
 * none to lend, in the compute layer's own memory. The log says which. */
train *train_new(const train_job *j, hook *h, metrics *m, char *err, size_t errlen);
/* The gradients as shared with a CUDA server on this GPU (the job's
 * model.grads_shared, on a GPU): NULL with why where they are not
 * shareable. Valid until train_free. */
struct gpushare;
const struct gpushare *train_gpushare(train *t, char *why, size_t whylen);
void train_free(train *t);
/* Record into the trainer's trace (ttrace.h; NULL or off: nothing): on
 * the training thread's ring, each traced step's forward,
 * backward_compute, exposed_wait, optimizer and step — the very clock
 * readings of its metrics (on a device, the host's view: its metrics are
 * then the stream's) — and each bucket's bucket_ready, bucket_wait and
 * bucket_apply. Before the first pass. */
struct ttrace;
void train_set_trace(train *t, struct ttrace *tt);
/* This trainer's batches in one epoch of its data shard. */
uint64_t train_batches_per_epoch(const train *t);
/* One pass of `steps` batches: this trainer's batches in order, the data
 * cycled as epochs as often as needed (the master's --epochs gives whole
 * epochs, --steps any count), buckets through h. Batch numbers restart at
 * 0 each pass. 0 or -1 with err (among the reasons: the loss diverged,
 * train_divergence). */
int train_pass(train *t, hook *h, uint64_t steps, train_tick_fn tick, void *ctx, char *err, size_t errlen);
/* The bucket layouts, for the pass's report (results.json):
 * {"layout": "ddp", "first_bucket_mb", "bucket_cap_mb", "first_iteration":
 * [BUCKET, ...], "rebuilt": [BUCKET, ...]}, BUCKET = {"floats", "sparse",
 * "element_bytes" (on the wire: 4, 2 for a dense bucket with --compress
 * fp16|bf16), "parameters": [names in DDP's order]}. New reference (NULL:
 * memory). */
json_t *train_buckets_json(const train *t);

/* The job's --compress (HALF_FP32: none). */
half_type train_compress(const train *t);
/* Mean loss of each epoch of the last pass. */
const double *train_loss_per_epoch(const train *t, uint64_t *n);
/* The last pass's first loss that was not finite, if any (loss_check.h):
 * train_pass stops there with the reason in err unless allow_divergence. */
const loss_check *train_divergence(const train *t);
/* The model (tests compare parameters across trainers). */
const dummy_model *train_model(const train *t);
/* Its parameters on the host (n floats): the values' view, or a copy read
 * back now into memory the train owns (staged). NULL: out of memory. */
const float *train_params(train *t, uint64_t *n);

#endif
