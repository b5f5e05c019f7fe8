/* bucket_place.c — a bucket's place for its hook (see bucket_place.h). */
#include "trainer/bucket_place.h"

int bucket_place(hook_bucket *b, const hook *h, compute *c, cspan grads, cbuf **twin, uint64_t twin_n, char *err,
                 size_t errlen)
{
    devmem dev = !b->sparse && h->device_dense ? compute_span_device(c, grads) : devmem_none();
    b->device_data = devmem_f32(dev);
    if (!devmem_is_none(dev)) {
        b->data = NULL;
        return 0;
    }
    if (!*twin && !(*twin = compute_alloc(c, twin_n, COMPUTE_F32, COMPUTE_MEM_PINNED, err, errlen)))
        return -1;
    if (!b->sparse)
        b->data = compute_host_view(c, *twin);
    return 0;
}
