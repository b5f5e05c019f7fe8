/* computes.c — the compute layer's devices by name (compute_new) and the
 * placement of plain --device cuda (compute_place): the one file that knows
 * every implementation, as server/devices.c is for the server's devices. */
#include "trainer/compute_impl.h"
#include "shared/gpu.h"
#include "shared/log.h"

#include <stdio.h>

compute *compute_new(device_spec dev, char *err, size_t errlen)
{
    char name[DEVSPEC_NAME_MAX];
    switch (dev.kind) {
    case DEVICE_CPU:
        return compute_cpu_new(err, errlen);
    case DEVICE_STAGED: /* tests only (compute_staged.c) */
        return compute_staged_new(err, errlen);
    /* cuda[:N]: a GPU (refused in one line where none answers or the build
     * has no CUDA); fake-cuda: the same code on the fake GPU, for tests. */
    case DEVICE_CUDA:
    case DEVICE_FAKE_CUDA:
        return compute_cuda_new(dev, err, errlen);
    case DEVICE_TEST: /* the server's */
        break;
    }
    errbuf_set(err, errlen, "compute on '%s': not a device (cpu, or cuda[:N])", devspec_name(dev, name));
    return NULL;
}

int compute_place(device_spec asked, uint64_t rank, device_spec *out, char *err, size_t errlen)
{
    *out = asked;
    if (asked.kind != DEVICE_CUDA || asked.index >= 0)
        return 0;
    char why[400];
    int n = gpu_count(why, sizeof why);
    if (n < 1) {
        errbuf_set(err, errlen, "--device cuda: %s", why);
        return -1;
    }
    out->index = (int)(rank % (uint64_t)n);
    return 0;
}
