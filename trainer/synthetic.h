/* synthetic.h — the synthetic model: a pure communication benchmark.
 *
 * Each batch, a trainer pushes K buckets of deterministic data whose mean
 * over all trainers it can predict exactly, and checks every element of
 * every result as it streams in. Values are small integers, so sums are
 * exact in float32 whatever the order the server adds them in; the mean is
 * the sum times 1/N, the same operation the server performs, so results
 * are compared bit for bit.
 *
 * CUDA IPC (docs/protocol.md, "CUDA IPC on one GPU"): a dense synthetic
 * trainer on a GPU may keep its pushes in shareable GPU memory
 * (synthetic_gpu) for servers on that GPU to fold from. A result that then
 * comes in the server's GPU memory is checked whole on the GPU, where it
 * is (synthetic.c): no mean is copied to the host, only one number per
 * bucket that is 0 when every element is the expected one.
 */
#ifndef PSBENCH_SYNTHETIC_H
#define PSBENCH_SYNTHETIC_H

#include <stdbool.h>
#include <stdint.h>

#include "shared/devspec.h"
#include "shared/half.h"
#include "shared/metrics.h"
#include "trainer/client.h"
#include "trainer/gpushare.h"

typedef struct synthetic_config {
    uint64_t rank; /* data rank: 0..N-1 among the trainers sharing these servers */
    uint32_t buckets;
    uint64_t bucket_floats;   /* floats per bucket (the largest, with sizes) */
    const uint64_t *sizes;    /* dense only: floats of each bucket, or NULL for
                               * bucket_floats each (copied by synthetic_new) */
    uint64_t batches;
    uint64_t warmup; /* batches run first and left out of the metrics and timing */
    bool sparse;
    uint32_t sparse_cols;
    double rpc_timeout_s;
    /* Dense pushes' type (--compress): HALF_FP32 (the zero value), or
     * HALF_FP16 / HALF_BF16, announced in the client's hello
     * (docs/protocol.md, "Narrow pushes"): the ramp narrowed once, the
     * mean predicted as the server computes it (synthetic.c). Sparse
     * buckets stay f32. */
    half_type dtype;
} synthetic_config;

typedef struct synthetic_report {
    uint64_t batches;
    double seconds;
    uint64_t bytes_pushed;
    /* Results of the timed batches that came over CUDA IPC (checked
     * whole on the GPU). */
    uint64_t results_gpu;
} synthetic_report;

typedef struct synthetic synthetic;

/* Set up buffers for cfg; the sink to give client_open. */
synthetic *synthetic_new(const synthetic_config *cfg, metrics *m);
void synthetic_free(synthetic *s);
/* Its dense pushes' type (cfg.dtype). */
half_type synthetic_dtype(const synthetic *s);
client_sink synthetic_sink(synthetic *s);
/* CUDA IPC: a compute context on `device` (a GPU: cuda:N, fake-cuda),
 * the dense ramp in shareable memory there (pushes over links whose server
 * took the export name their window in it), and what checking results on
 * the GPU takes (synthetic.c). Returns the table to give client_cfg.gpu (it
 * lives as long as s), or NULL with why where it cannot be made (not a GPU,
 * no shareable memory, sparse): the run then goes on from host memory. s
 * owns the context and the buffer: close the client before synthetic_free
 * (it closes servers' memory through them). */
const gpushare *synthetic_gpu(synthetic *s, device_spec device, char *why, size_t whylen);
/* Called after every batch and at least every 250 ms while waiting for
 * results (the master link reports metrics and reads control messages
 * there). Returns 0, or -1 to abort the run with a reason in err. */
typedef int (*synthetic_tick_fn)(void *ctx, uint64_t batches_done, char *err, size_t errlen);
void synthetic_set_tick(synthetic *s, synthetic_tick_fn fn, void *ctx);
/* The timed batches of the next synthetic_run (a master's pass: its
 * start's count, which --warmup-steps may make differ between passes). */
void synthetic_set_batches(synthetic *s, uint64_t batches);
/* Record into the trainer's trace (ttrace.h; NULL or off: nothing), cl
 * being the client it runs through (its frames too): each traced batch's
 * step (the batch_all metric's readings), each bucket's bucket_wait (its
 * rpc metric's: pushed -> its result's last byte read), frame_out and
 * frame_in, all on the training thread's ring. Before the first run. */
struct ttrace;
void synthetic_set_trace(synthetic *s, struct ttrace *tt, client *cl);
/* Run cfg.warmup + cfg.batches batches (numbered from 0) through cl; the
 * report and the metrics cover the last cfg.batches. Returns 0, or -1
 * with a reason in err. May be called again for another pass. */
int synthetic_run(synthetic *s, client *cl, synthetic_report *rep, char *err, size_t errlen);

#endif
