/* hybrid.h — the seed's HybridModel (PyTorch's benchmark_ddp_rpc.py): the
 * sparse part lives on parameter servers of kind `embedding`, the dense
 * part is replicated on every trainer and averaged by allreduce.
 *
 * Forward: one `lookup` (indices, offsets: EmbeddingBag's) on every server,
 * the P answers (bags x D each) concatenated to bags x (P*D) and reshaped to
 * rows of 512 (P*D must be a multiple of 512: the seed asserts P*D >= 512
 * and its reshape needs the rest), then the seed's dense part
 *   Linear(512, 256) -> Linear(256, 128) -> ReLU -> Linear(128, 64)
 *   -> Linear(64, 32) -> Linear(32, 8)
 * and cross-entropy against targets in [0, 8).
 * Backward: the dense gradients are one bucket through the hook
 * (allreduce_hook: averaged over the trainers), then SGD (lr) on the dense
 * part; every server gets an `update` with the gradient of its lookup —
 * one row per bag: what PyTorch's distributed autograd sends too
 * (bench/pytorch_ddp_rpc_traffic.py measured it) — and applies SGD
 * (docs/protocol.md, "Kind `embedding`").
 *
 * How the trainer talks to the servers is the trainer configuration's
 * `rpc_pattern`:
 *   seed (the default): the seed's — the lookups one server after the
 *     other, each awaited (its rpc_sync); the updates with `grad` "dense"
 *     (its EmbeddingBag is not sparse: the server forms the table-sized
 *     gradient and steps every row) and `confirm`, every server's
 *     `updated` awaited before the step (its synchronous backward and
 *     DistributedOptimizer.step): the next batch starts once every server
 *     has applied this one's update;
 *   psbench: every server's lookup at once, the updates with the sparse
 *     rule (a step per named row) and not answered — except the pass's
 *     last, so that a pass ends with every update applied; the next
 *     batch's lookups queue behind them on each connection.
 *
 * Data as the seed makes it, per batch: 20..50 indices in
 * [0, num_embeddings), bag offsets from 0 advancing by 1..10 while below the
 * index count, one target in [0, 8) per output row; from --seed and the
 * trainer's rank (rng stream RNG_STREAM_HYBRID + rank), the stream started
 * again every epoch: an epoch is the same `batches` batches, so the loss
 * over epochs shows the model learning them (the seed's generator draws
 * new random targets every epoch, which no model can learn). The dense part starts as PyTorch's Linear: U(-k, k), k = 1/sqrt(in),
 * weights then biases layer by layer, from stream RNG_STREAM_MODEL (the same
 * on every trainer, as DDP's broadcast makes it); each pass starts from a
 * fresh model, as the seed builds one.
 *
 * The dense part runs on the compute layer of hybrid_config.device
 * (compute.h: the cpu today). Where its gradients have no host view (a
 * device's memory), the dense bucket is a twin in pinned memory: the
 * gradients copied into it after backward, handed to the hook once that
 * copy's mark is done, the mean copied back before the step.
 */
#ifndef PSBENCH_HYBRID_H
#define PSBENCH_HYBRID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/devspec.h"
#include "shared/metrics.h"
#include "trainer/client.h"
#include "trainer/hook.h"
#include "trainer/loss_check.h"

#define HYBRID_ROW 512     /* the dense part's input width */
#define HYBRID_CLASSES 8

/* The trainer configuration's rpc_pattern (hybrid.h's top). */
typedef enum hybrid_pattern { HYBRID_SEED = 0, HYBRID_PSBENCH } hybrid_pattern;
/* "seed" or "psbench"; and back: 0, or -1 for another name. */
const char *hybrid_pattern_name(hybrid_pattern p);
int hybrid_pattern_parse(const char *name, hybrid_pattern *out);

typedef struct hybrid_config {
    uint32_t number_ps;      /* servers (the client's connections, in rank order) */
    uint64_t num_embeddings; /* rows of every server's table (seed: 300) */
    uint64_t embedding_dim;  /* its columns (seed: 64) */
    uint64_t batches;        /* per epoch (seed: 10) */
    double lr;               /* SGD on the dense part (seed: 0.05) */
    uint64_t seed, rank;
    double rpc_timeout_s;    /* bound on each wait for the servers' answers */
    bool allow_divergence;   /* a loss that is not finite: go on (else the pass stops there) */
    device_spec device;      /* the dense part's compute layer (compute_new); zeroed: the cpu */
    hybrid_pattern pattern;  /* how lookups and updates go (the top of this file) */
} hybrid_config;

typedef struct hybrid_report {
    uint64_t epochs, batches;
    uint64_t samples;        /* bags looked up over the pass */
    uint64_t indices;        /* their indices (the lookups' nnz), over the pass */
    double seconds;
} hybrid_report;

typedef struct hybrid hybrid;

/* Called after every batch (the master link reports there): 0, or -1 with
 * a reason in err to stop. */
typedef int (*hybrid_tick_fn)(void *ctx, uint64_t batches_done, char *err, size_t errlen);

/* NULL with err: a shape the seed cannot reshape, or out of memory. */
hybrid *hybrid_new(const hybrid_config *c, metrics *m, char *err, size_t errlen);
void hybrid_free(hybrid *h);
/* The sink to give client_open (answers to lookups). */
client_sink hybrid_sink(hybrid *h);
/* Record into the trainer's trace (ttrace.h; NULL or off: nothing), cl
 * being the client it runs through (polled by this thread: its frames
 * too), all on the training thread's ring: each traced batch's step,
 * forward, backward_compute, exposed_wait and optimizer (the readings of
 * its metrics: the lookups are the step's start to forward's), the dense
 * bucket's bucket_ready, bucket_wait (the hook's sample) and
 * bucket_apply, and each call the step awaits (every lookup; the seed
 * pattern's updates) as a bucket_wait of no bucket, its server's, with
 * its frame_in. No clock is read for the trace. After client_open,
 * before the first pass. */
struct ttrace;
void hybrid_set_trace(hybrid *h, struct ttrace *tt, client *cl);
/* One pass of `batches` batches (whole epochs of the configuration's
 * batches) from a fresh dense model: lookups and updates through cl, the
 * dense bucket through hk. 0 or -1 with err. */
int hybrid_pass(hybrid *h, client *cl, hook *hk, uint64_t batches, hybrid_tick_fn tick, void *ctx,
                hybrid_report *rep, char *err, size_t errlen);
/* Mean loss of each epoch of the last pass. */
const double *hybrid_loss_per_epoch(const hybrid *h, uint64_t *n);
/* The last pass's first loss that was not finite, if any (loss_check.h):
 * hybrid_pass stops there with the reason in err unless allow_divergence. */
const loss_check *hybrid_divergence(const hybrid *h);
/* The dense part's parameters (weights and biases, layer by layer) on the
 * host: their view, or a copy read back now into memory the hybrid owns
 * (no host view). NULL: out of memory. */
const float *hybrid_dense_params(hybrid *h, uint64_t *n);

/* Tests only (tests/unit/trainer/test_model_device.c compares devices with it):
 * the dense part's forward and backward on given looked-up rows, without
 * servers or a hook, at the parameters h holds (hybrid_new's, or where the
 * last pass left them; nothing is stepped). rows: R x HYBRID_ROW floats,
 * the rows the lookups' answers would have assembled; targets: R classes in
 * [0, HYBRID_CLASSES); R in 1..hybrid_dense_max_rows. Sets *loss to the
 * mean cross-entropy, and copies back through the compute layer (read and
 * synchronised) the dense gradients into grads (hybrid_dense_params' n
 * floats) and the rows' gradient (R x HYBRID_ROW: what the updates carry,
 * before it is cut per server) into rows_grad, each where not NULL.
 * 0, or -1 with the reason in err (R or a target out of range). */
int hybrid_dense_fwd_bwd(hybrid *h, const float *rows, const int64_t *targets, uint64_t R, double *loss,
                         float *grads, float *rows_grad, char *err, size_t errlen);
/* The most rows one batch can have: HYBRID_MAX_INDICES bags of k rows. */
uint64_t hybrid_dense_max_rows(const hybrid *h);

#endif
