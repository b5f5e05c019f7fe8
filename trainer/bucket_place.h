/* bucket_place.h — where a bucket leaves from for a hook when the
 * gradients have no host view (a context on a GPU, or the staged test
 * device): the one rule of train.c and hybrid.c, the place where the
 * compute layer's memory meets a hook's bucket (hook.h).
 *
 *   a dense bucket, to a hook that takes device memory (hook.device_dense:
 *   NCCL), on a context with device addresses (a GPU): the gradients
 *   themselves, in place (device_data, a devf32);
 *   every other: through the bucket's pinned twin (allocated here the
 *   first time), which the trainer fills from the gradients before handing
 *   the bucket over; a dense bucket's data is the twin's host view.
 */
#ifndef PSBENCH_BUCKET_PLACE_H
#define PSBENCH_BUCKET_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/compute.h"
#include "trainer/hook.h"

/* b's place for hook h on context c: grads is the dense bucket's gradients
 * (unused for a sparse one), *twin its pinned twin (NULL: made here, twin_n
 * floats, and kept there). Sets b->device_data, and b->data for a dense
 * bucket. 0, or -1 with err (no pinned memory for the twin). */
int bucket_place(hook_bucket *b, const hook *h, compute *c, cspan grads, cbuf **twin, uint64_t twin_n, char *err,
                 size_t errlen);

#endif
