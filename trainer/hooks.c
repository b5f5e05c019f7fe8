/* hooks.c — making a hook by its name (see hooks.h). */
#include "trainer/hooks.h"
#include "trainer/hook_impl.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* The backend of the dense collectives: --backend nccl (or multi on a GPU
 * trainer) is NCCL, everything else Gloo. NULL with err when NCCL is asked
 * of a CPU trainer or a build without it. A trainer on the fake GPU is a
 * GPU trainer whose NCCL is coll_nccl_fake_new's stand-in. */
static const char *hooks_dense_backend(const hook_setup *s, char *err, size_t errlen)
{
    const char *b = s->backend && *s->backend ? s->backend : "gloo";
    if (strcmp(b, "gloo") == 0)
        return "gloo";
    if (strcmp(b, "multi") == 0)
        return (s->device.kind == DEVICE_CUDA && coll_have_nccl()) || s->device.kind == DEVICE_FAKE_CUDA ? "nccl"
                                                                                                          : "gloo";
    if (strcmp(b, "nccl") == 0) {
        if (!devspec_on_gpu(s->device)) {
            snprintf(err, errlen, "--backend nccl needs CUDA trainers (--ncudatrainer); CPU trainers use gloo "
                     "(--backend gloo, or multi: NCCL on GPUs, Gloo on CPUs)");
            return NULL;
        }
        return "nccl";
    }
    snprintf(err, errlen, "--backend '%s' is not gloo, nccl or multi", b);
    return NULL;
}

/* A group of every trainer on `backend`, its keys under prefix/part. */
static coll *hooks_group(const hook_setup *s, const char *backend, const char *part, char *err, size_t errlen)
{
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/%s/%s", s->store_prefix ? s->store_prefix : "psbench", s->hook, part);
    if (strcmp(backend, "nccl") == 0 && s->device.kind == DEVICE_FAKE_CUDA)
        return coll_nccl_fake_new(s->rank, s->ntrainer, s->coll_host, s->store, prefix, s->rpc_timeout_s, err,
                                  errlen);
    if (strcmp(backend, "nccl") == 0) {
        /* A GPU, placed: hooks_dense_backend gives NCCL to no other. */
        assert(s->device.kind == DEVICE_CUDA && s->device.index >= 0);
        return coll_nccl_new(s->rank, s->ntrainer, devspec_cuda_index(s->device), s->store, prefix,
                             s->rpc_timeout_s, err, errlen);
    }
    return coll_gloo_new(s->rank, s->ntrainer, s->coll_host, s->store, prefix, s->rpc_timeout_s, err, errlen);
}

/* allreduce_hook's, and the dense half of sparse_rpc_hook's, on backend. */
static hook *hooks_allreduce(const hook_setup *s, const char *name, const char *backend, const char *part,
                             bool dense, bool sparse, const char *sparse_metric, char *err, size_t errlen)
{
    coll *g = hooks_group(s, backend, part, err, errlen);
    if (!g)
        return NULL;
    char dm[96], sm[96];
    snprintf(dm, sizeof dm, "hook_future_metric,%s_dense_allreduce", backend);
    if (sparse_metric)
        snprintf(sm, sizeof sm, "%s", sparse_metric);
    else
        snprintf(sm, sizeof sm, "hook_future_metric,%s_sparse_allreduce", backend);
    /* Dense buckets only: PyTorch's compress hooks take a bucket's flat
     * dense buffer; sparse ones stay fp32. */
    return hook_allreduce_new(name, g, dense ? s->compress : HALF_FP32, dense ? s->powersgd : NULL, s->rpc_timeout_s,
                              s->m, dense ? dm : NULL, sparse ? sm : NULL, err, errlen);
}

hook *hooks_new(const hook_setup *s, char *err, size_t errlen)
{
    const char *name = s->hook && *s->hook ? s->hook : "rpc_hook";
    if (s->compress != HALF_FP32 && strcmp(name, "allreduce_hook") != 0 && strcmp(name, "rpc_hook") != 0 &&
        strcmp(name, "rpc") != 0) {
        /* The master refuses it first (config_check.c); a job from elsewhere too. */
        snprintf(err, errlen, "--compress %s: %s does not compress yet (allreduce_hook and rpc_hook do)",
                 half_type_name(s->compress), name);
        return NULL;
    }
    if (s->powersgd && strcmp(name, "allreduce_hook") != 0) {
        snprintf(err, errlen, "--compress powersgd: %s does not compress yet (allreduce_hook does)", name);
        return NULL;
    }
    if (strcmp(name, "rpc_hook") == 0 || strcmp(name, "rpc") == 0)
        return hook_rpc_new(s, "rpc_hook", true, s->sparse_model, err, errlen);
    if (strcmp(name, "hybrid_hook") == 0) {
        /* PyTorch's hybrid: sparse gradients on a Gloo group through c10d,
         * dense ones on NCCL — on Gloo too where the trainers are CPUs. */
        hook *sp = hooks_allreduce(s, "hybrid_hook", "gloo", "sparse", false, true,
                                   "hook_c10d_metric,gloo_sparse_allreduce", err, errlen);
        if (!sp)
            return NULL;
        const char *hd = devspec_on_gpu(s->device) ? "nccl" : "gloo";
        hook *de = hooks_allreduce(s, "hybrid_hook", hd, "dense", true, false, NULL, err, errlen);
        if (!de) {
            hook_free(sp);
            return NULL;
        }
        return hook_split_new("hybrid_hook", sp, de, err, errlen);
    }
    if (strcmp(name, "allreduce_hook") != 0 && strcmp(name, "sparse_rpc_hook") != 0) {
        snprintf(err, errlen, "hook '%s' is not rpc_hook, allreduce_hook, sparse_rpc_hook or hybrid_hook", name);
        return NULL;
    }
    const char *dense = hooks_dense_backend(s, err, errlen);
    if (!dense)
        return NULL;
    if (strcmp(name, "allreduce_hook") == 0)
        return hooks_allreduce(s, "allreduce_hook", dense, "all", true, s->sparse_model, NULL, err, errlen);
    /* sparse_rpc_hook */
    hook *sp = hook_rpc_new(s, "sparse_rpc_hook", false, true, err, errlen);
    if (!sp)
        return NULL;
    hook *de = hooks_allreduce(s, "sparse_rpc_hook", dense, "dense", true, false, NULL, err, errlen);
    if (!de) {
        hook_free(sp);
        return NULL;
    }
    return hook_split_new("sparse_rpc_hook", sp, de, err, errlen);
}
