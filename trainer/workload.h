/* workload.h — what a trainer under a master runs, behind one table, as
 * hooks are behind hook_ops: DummyModel training (train.c), batch-update
 * (batch_update.c), the HybridModel (hybrid.c) and the Synthetic model
 * (synthetic.c). run.c sets one up from the assignment (each model's own
 * setup) and then drives it through these calls only: passes, the pass
 * report, parameters out, bytes, reset and free.
 *
 * Each model computes on the compute layer (compute.h) of the trainer's
 * --device, which run.c names in the model's configuration.
 *
 * A workload owns its model object, the hook it sends buckets through
 * (NULL: none) and the client it speaks to servers with (closed: none);
 * workload_free is the one place they are freed.
 */
#ifndef PSBENCH_WORKLOAD_H
#define PSBENCH_WORKLOAD_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "trainer/batch_update.h"
#include "trainer/client.h"
#include "trainer/hook.h"
#include "trainer/hybrid.h"
#include "trainer/loss_check.h"
#include "trainer/synthetic.h"
#include "trainer/train.h"

/* Called after every batch: 0, or -1 with a reason in err to stop. */
typedef int (*workload_tick_fn)(void *ctx, uint64_t batches_done, char *err, size_t errlen);

typedef struct workload workload;

typedef struct workload_ops {
    const char *name; /* the model's class: "DummyModel", "Linear", "HybridModel", "Synthetic" */
    /* One pass of `batches` batches (the master's count; a model whose
     * pass length is its own ignores it). *done: batches run, or 0 when
     * the tick counted them. *extra: NULL, or fields of pass_done beyond
     * the losses and the digest (an object, given to the caller). 0, or
     * -1 with a reason in err. */
    int (*pass)(workload *w, uint64_t batches, workload_tick_fn tick, void *ctx, uint64_t *done, json_t **extra,
                char *err, size_t errlen);
    /* The last pass's mean loss per epoch; NULL: the model has no loss. */
    const double *(*loss_per_epoch)(const workload *w, uint64_t *n);
    /* The parameters in the order --params-out writes them, on the host
     * (read back from a device where they have no view; NULL then: out of
     * memory); NULL op: none. */
    const float *(*params)(const workload *w, uint64_t *n);
    /* The last pass's first non-finite loss, if any; NULL op: no loss. */
    const loss_check *(*divergence)(const workload *w);
    /* Frees the model object (the hook and the client are the base's). */
    void (*free)(workload *w);
} workload_ops;

struct workload {
    const workload_ops *ops;
    hook *h;     /* buckets (DummyModel; HybridModel's dense part); NULL: none */
    client cl;   /* its own connections to servers (cl_open) */
    bool cl_open;
};

/* Each model's workload around its object (which it owns from here on, as
 * it owns h; NULL with "out of memory" in err, the object freed). */
workload *workload_dummy_new(train *tr, hook *h, char *err, size_t errlen);
workload *workload_linear_new(batch_update *bu, uint64_t batches, char *err, size_t errlen);
workload *workload_hybrid_new(hybrid *hy, hook *h, char *err, size_t errlen);
workload *workload_synthetic_new(synthetic *syn, char *err, size_t errlen);

/* Its links to servers, for the master: [{"server", "address",
 * "transport": "shm" or "tcp", "note": why TCP where shared memory was
 * tried, or null}] (NULL: out of memory). */
json_t *workload_links(const workload *w);

/* Open the workload's client to `servers` (the model's sink). 0 or -1. */
int workload_open_client(workload *w, const client_cfg *cfg, const client_sink *sink, char *err, size_t errlen);

/* pass_done's body for the pass just run (named `pass`, "warm-up" or
 * "timed"): loss_per_epoch and final_params_sha256 (nulls for a model
 * with neither), a divergence the job allowed, and the model's extra. */
json_t *workload_pass_report(const workload *w, const char *pass, json_t *extra);
/* --params-out: the parameters as raw little-endian float32 (nothing for
 * a model with none). 0 or -1 with err. */
int workload_write_params(const workload *w, const char *path, char *err, size_t errlen);
/* Between passes: the hook's state. */
void workload_reset(workload *w);
/* Bytes through its client and hook (added to *in and *out). */
void workload_bytes(const workload *w, uint64_t *in, uint64_t *out);
/* Pushes so far named by offset in a shared segment, and how many of
 * them were copied there first (staged), over its client and hook (added
 * to *at and *staged). */
void workload_shm_pushes(const workload *w, uint64_t *at, uint64_t *staged);
/* NULL: nothing. The hook goes first (its threads stop before the memory
 * they send from goes), then the client, then the model's object: memory
 * the hook lent the model (train_new) is never touched after the hook. */
void workload_free(workload *w);

#endif
