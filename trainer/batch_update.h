/* batch_update.h — the trainer of the seed's BatchUpdateParameterServer
 * benchmark (Trainer in PyTorch's parameter_server_test.py), exactly as
 * docs/protocol.md, "Kind `batch-update`", specifies it.
 *
 * The servers own a Linear(in, out) model, one flat float32 vector
 * [weight (out x in, row-major), bias (out)] split by contiguous ranges:
 * server p of n holds elements [floor(p*total/n), floor((p+1)*total/n)).
 * A pass: `fetch` the parameters from every server and assemble them
 * (method_metric,get_model); then per batch: inputs x ~ randn(batch, in)
 * from rng stream RNG_STREAM_INPUTS + rank (reseeded from the seed at the
 * start of every pass), forward y = x W^T + b (forward_metric,forward_pass),
 * L1 loss against zero labels and its gradient (backward_metric,backward),
 * one dense `push` per server of its part of [dW, db], and every server's
 * `result` becomes the parameters (hook_future_metric,update_and_fetch_model:
 * push queued to the last result read; batch_level_metric,batch_all: the
 * whole batch). Single-threaded: the client is polled while waiting; the
 * next batch's inputs are drawn while a round is out (same values, same
 * order), so a batch's time holds the draw only where it outlasts the round.
 */
#ifndef PSBENCH_BATCH_UPDATE_H
#define PSBENCH_BATCH_UPDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/metrics.h"
#include "trainer/client.h"
#include "trainer/compute.h"
#include "trainer/loss_check.h"

typedef struct batch_update_config {
    uint64_t rank;          /* inputs come from stream RNG_STREAM_INPUTS + rank */
    uint64_t in_features;   /* the seed: 100 */
    uint64_t out_features;  /* the seed: 30 */
    uint64_t batch_size;    /* the seed: 20 */
    uint64_t seed;
    double rpc_timeout_s;   /* longest wait for a fetch's or a batch's answers */
    uint64_t epochs;        /* a pass's batches are this many epochs of equal length, for
                             * loss_per_epoch (0 or 1: the pass is one epoch) */
    bool allow_divergence;  /* a loss that is not finite: go on (else the pass stops there) */
    device_spec device;     /* the compute layer's device (compute_new); zeroed: the cpu */
} batch_update_config;

typedef struct batch_update_report {
    uint64_t batches;       /* batches run in the pass */
    double seconds;         /* the batches (the fetch before them left out) */
    uint64_t rounds;        /* server updates during the pass, as server 0 counts them */
    uint64_t bytes_pushed;  /* gradient payload bytes */
} batch_update_report;

typedef struct batch_update batch_update; /* opaque */

/* Called while waiting (at least every 250 ms) and after each batch with
 * the batches done so far; returns 0, or -1 with err set to end the pass. */
typedef int (*batch_update_tick_fn)(void *ctx, uint64_t batches_done, char *err, size_t errlen);

/* NULL with err set on a bad configuration or no memory. */
batch_update *batch_update_new(const batch_update_config *cfg, metrics *m, char *err, size_t errlen);
void batch_update_free(batch_update *b);
void batch_update_set_tick(batch_update *b, batch_update_tick_fn fn, void *ctx);
/* The sink to give client_open: it receives `params` and `result` frames. */
client_sink batch_update_sink(batch_update *b);
/* Record into the trainer's trace (ttrace.h; NULL or off: nothing), cl
 * being the client it runs through (polled by this thread: its frames
 * too), all on the training thread's ring: each traced batch's step,
 * forward and backward_compute (the readings of batch_all, forward_pass
 * and backward), and its round as bucket 0's bucket_ready (the gradient
 * computed -> every part queued), bucket_wait (-> the last result read:
 * update_and_fetch_model's sample) and bucket_apply (-> the parameters
 * in place), and each part's frame_out and frame_in. No clock is read for
 * the trace. After client_open, before the first pass. */
struct ttrace;
void batch_update_set_trace(batch_update *b, struct ttrace *tt, client *cl);

/* One pass over `cl` (its connections in part order): fetch, reseed the
 * inputs, `batches` batches whose pushes carry batch numbers first_batch,
 * first_batch+1, ... Metrics are recorded when `record` is true. A server's
 * error frame, a lost connection, a malformed answer or --rpc-timeout ends
 * it: -1 with a one-line reason in err. */
int batch_update_pass(batch_update *b, client *cl, uint64_t batches, uint64_t first_batch, bool record,
                      batch_update_report *rep, char *err, size_t errlen);

/* The last pass's L1 loss per epoch: each the mean of its batches' losses
 * (the loss of the parameters a batch started from); *n epochs. */
const double *batch_update_loss_per_epoch(const batch_update *b, uint64_t *n);

/* The last pass's first loss that was not finite, if any (loss_check.h):
 * batch_update_pass stops there with the reason in err unless
 * allow_divergence. */
const loss_check *batch_update_divergence(const batch_update *b);

/* The whole model's parameters as last received ([W, b], total elements). */
const float *batch_update_params(const batch_update *b, uint64_t *total);
/* Write them as raw little-endian float32. Returns 0 or -1 with err. */
int batch_update_write_params(const batch_update *b, const char *path, char *err, size_t errlen);

/* The arithmetic on compute layer c, exposed for the unit test. W is
 * out x in, row-major; x is batch x in; y and dy are batch x out.
 * forward: y = x W^T + bias.
 * backward: loss (1 double) = mean(|y|), dy = sign(y) / (batch*out) with
 * sign(0) = 0, dW = dy^T x (out x in), db = column sums of dy. */
void batch_update_forward(compute *c, cspan W, cspan bias, cspan x, uint64_t batch, uint64_t in, uint64_t out,
                          cspan y);
void batch_update_backward(compute *c, cspan x, cspan y, uint64_t batch, uint64_t in, uint64_t out, cspan dy,
                           cspan dW, cspan db, cspan loss);

#endif
