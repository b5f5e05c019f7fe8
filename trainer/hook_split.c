/* hook_split.c — a hook made of two: sparse buckets to one, dense buckets
 * to the other. sparse_rpc_hook is (sparse: rpc, dense: allreduce);
 * hybrid_hook is (sparse: allreduce on a Gloo group, dense: allreduce on
 * the NCCL group, or a second Gloo group on the CPU). Each half records
 * its own metrics.
 */
#include "trainer/hook_impl.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct split_hook {
    hook base;
    hook *sparse, *dense;
} split_hook;

static void split_ready(hook *h, hook_bucket *b)
{
    split_hook *s = (split_hook *)h;
    hook_ready(b->sparse ? s->sparse : s->dense, b, b->batch);
}

static int split_wait(hook *h, hook_bucket **bs, uint32_t n, char *err, size_t errlen)
{
    split_hook *s = (split_hook *)h;
    hook_bucket *sp[HOOK_MAX_BUCKETS], *de[HOOK_MAX_BUCKETS];
    uint32_t ns = 0, nd = 0;
    assert(n <= HOOK_MAX_BUCKETS);
    for (uint32_t i = 0; i < n; i++) {
        if (bs[i]->sparse)
            sp[ns++] = bs[i];
        else
            de[nd++] = bs[i];
    }
    if (nd && hook_wait(s->dense, de, nd, err, errlen) < 0)
        return -1;
    if (ns && hook_wait(s->sparse, sp, ns, err, errlen) < 0)
        return -1;
    return 0;
}

static void split_reset(hook *h)
{
    split_hook *s = (split_hook *)h;
    hook_reset(s->sparse);
    hook_reset(s->dense);
}

static void split_bytes(const hook *h, uint64_t *in, uint64_t *out)
{
    const split_hook *s = (const split_hook *)h;
    hook_bytes(s->sparse, in, out);
    hook_bytes(s->dense, in, out);
}

/* The part that talks to servers (sparse_rpc_hook: the sparse one). */
static const struct client *split_client(const hook *h)
{
    const split_hook *s = (const split_hook *)h;
    const struct client *c = hook_client(s->sparse);
    return c ? c : hook_client(s->dense);
}

/* Dense buckets go to the dense part: its memory, if any
 * (sparse_rpc_hook's and hybrid_hook's: collectives, none). */
static void *split_send_memory(hook *h, size_t bytes)
{
    return hook_send_memory(((split_hook *)h)->dense, bytes);
}

static void split_destroy(hook *h)
{
    split_hook *s = (split_hook *)h;
    hook_free(s->sparse);
    hook_free(s->dense);
    free(s);
}

static const hook_ops split_ops = {
    .ready = split_ready,
    .wait = split_wait,
    .reset = split_reset,
    .bytes = split_bytes,
    .client = split_client,
    .send_memory = split_send_memory,
    .destroy = split_destroy,
};

hook *hook_split_new(const char *name, hook *sparse, hook *dense, char *err, size_t errlen)
{
    split_hook *s = calloc(1, sizeof *s);
    if (!s) {
        hook_free(sparse);
        hook_free(dense);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->base.ops = &split_ops;
    s->base.name = name;
    s->sparse = sparse;
    s->dense = dense;
    s->base.device_dense = dense->device_dense; /* only dense buckets go there */
    return &s->base;
}
