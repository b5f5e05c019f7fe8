/* hooks.h — making a hook by its name (the trainer configuration's
 * ddp_hook), and the constructors of the implementations:
 *
 *   hook_rpc.c        rpc_hook: buckets to the servers (client + comm thread)
 *   hook_allreduce.c  buckets allreduced on one collective group (coll.h),
 *                     on a thread of its own
 *   hook_split.c      sparse buckets to one hook, dense ones to another:
 *                     sparse_rpc_hook and hybrid_hook are splits
 *
 * The run driver builds the setup from the master's assignment.
 */
#ifndef PSBENCH_HOOKS_H
#define PSBENCH_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/metrics.h"
#include "trainer/coll.h"
#include "trainer/hook.h"
#include "shared/shm.h"

typedef struct hook_setup {
    const char *hook;      /* rpc_hook, allreduce_hook, sparse_rpc_hook, hybrid_hook */
    const char *backend;   /* the collectives' backend: gloo, nccl or multi (gloo on the CPU) */
    int cuda_device;       /* -1: a CPU trainer */
    bool fake_gpu;         /* a trainer on the fake GPU (tests): NCCL is its stand-in, coll_nccl_fake_new */
    bool sparse_model;     /* the model has a sparse bucket (its metrics exist) */
    uint32_t rank, ntrainer; /* this trainer in the group of all trainers */
    /* rpc */
    const char *servers;   /* "HOST:PORT,..." or NULL/"" (no servers) */
    const char *token;
    double connect_timeout_s;
    double rpc_timeout_s;  /* every wait, and every collective */
    psb_transport transport; /* to the servers */
    /* NULL, or the trainer's GPU and its gradients' shared memory: rpc
     * takes dense buckets in GPU memory where every server it talks to
     * exchanges them by CUDA IPC (gpushare.h). */
    const struct gpushare *gpu;
    /* collectives */
    const coll_store *store; /* rendezvous */
    const char *store_prefix; /* keys of this job's groups start with it */
    const char *coll_host;  /* where this trainer's Gloo transport listens (NULL: host name) */
    metrics *m;
} hook_setup;

/* The hook s->hook names, connected (servers) and rendezvoused (groups).
 * NULL with a one-line reason in err. */
hook *hooks_new(const hook_setup *s, char *err, size_t errlen);

/* Buckets to the servers; `dense` / `sparse`: which buckets it will get
 * (their metrics exist only then). */
hook *hook_rpc_new(const hook_setup *s, const char *name, bool dense, bool sparse, char *err, size_t errlen);

/* A hook that allreduces every bucket it gets on `group` (taken over: freed
 * with the hook). Metric names: "<dense_metric>" and "<sparse_metric>" (NULL:
 * the hook gets no bucket of that kind). */
hook *hook_allreduce_new(const char *name, coll *group, double timeout_s, metrics *m, const char *dense_metric,
                         const char *sparse_metric, char *err, size_t errlen);

/* Sparse buckets to `sparse`, dense ones to `dense` (both taken over). */
hook *hook_split_new(const char *name, hook *sparse, hook *dense, char *err, size_t errlen);

#endif
