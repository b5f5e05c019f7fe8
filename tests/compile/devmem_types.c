/* devmem_types.c — device memory and host memory are different types at
 * the boundaries (shared/devmem.h): each DEVMEM_CASE from 1 on hands one
 * kind where the other is expected and must FAIL to compile; case 0 is the
 * same calls written right and must compile (so that a failure of the
 * others is the types', not a broken include). Compiled, never run, by
 * tests/compile/compile_fail.cmake (ctest unit_devmem_types). */
#include <stdlib.h>

#include "shared/gpu/cugpu.h"
#include "trainer/coll.h"
#include "trainer/compute.h"
#include "trainer/hook.h"

#ifndef DEVMEM_CASE
#error "DEVMEM_CASE is not set"
#endif

int devmem_types(cugpu *g, cugpu_stream *s, coll *c, compute *cc, hook_bucket *b, cspan span);
int devmem_types(cugpu *g, cugpu_stream *s, coll *c, compute *cc, hook_bucket *b, cspan span)
{
    float host[16] = {0};
    void *raw = malloc(64);
    devmem d = g->ops->dev_alloc(g, sizeof host);
    int rc = 0;
#if DEVMEM_CASE == 0
    /* Right: device memory where device memory goes, host where host. */
    rc |= g->ops->copy_h2d(g, s, d, host, sizeof host);
    rc |= g->ops->copy_d2h(g, s, host, d, sizeof host);
    rc |= g->ops->copy_d2d(g, s, d, devmem_at(d, 0), sizeof host);
    rc |= coll_allreduce_mean_f32_device(c, devmem_f32(d), 16, 0.5f, NULL, 0);
    rc |= coll_allreduce_sum_f32(c, host, 16, NULL, 0);
    b->device_data = devmem_f32(compute_span_device(cc, span));
    b->data = host;
    compute_copy_from_peer(cc, span, d);
    g->ops->dev_free(g, d);
#elif DEVMEM_CASE == 1
    /* A host buffer to the collectives' device entry point. */
    rc |= coll_allreduce_mean_f32_device(c, host, 16, 0.5f, NULL, 0);
#elif DEVMEM_CASE == 2
    /* Host memory as a host-to-device copy's destination. */
    rc |= g->ops->copy_h2d(g, s, raw, host, sizeof host);
#elif DEVMEM_CASE == 3
    /* Device memory as a device-to-host copy's (host) destination. */
    rc |= g->ops->copy_d2h(g, s, d, d, sizeof host);
#elif DEVMEM_CASE == 4
    /* A host pointer into a bucket's device memory. */
    b->device_data = host;
#elif DEVMEM_CASE == 5
    /* malloc's memory freed as the GPU's. */
    g->ops->dev_free(g, raw);
#elif DEVMEM_CASE == 6
    /* Device memory where the collectives take host memory. */
    rc |= coll_allreduce_sum_f32(c, devmem_f32(d), 16, NULL, 0);
#elif DEVMEM_CASE == 7
    /* A host pointer as a peer's memory to copy from. */
    compute_copy_from_peer(cc, span, raw);
#elif DEVMEM_CASE == 8
    /* The compute layer's device address as a host pointer. */
    b->data = compute_span_device(cc, span);
#else
#error "no such DEVMEM_CASE"
#endif
    (void)b, (void)span, (void)cc;
    free(raw);
    return rc;
}
