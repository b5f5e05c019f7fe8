/* devices.c — the --device names and the device each one makes
 * (device.h's device_new): the one file that knows every device. */
#include "server/cuda/kernels_host.h"
#include "server/device.h"
#include "server/reduce.h"
#include "shared/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

device *device_new(const char *name, struct event_base *base, bufpool *pool, char *err, size_t errlen)
{
    /* Decide the fold loops' width now, before any other thread may fold. */
    reduce_use_wide(-1);
    if (strcmp(name, "cpu") == 0) {
        device *d = device_cpu_new(pool);
        if (!d)
            snprintf(err, errlen, "out of memory");
        return d;
    }
    if (strcmp(name, "test") == 0)
        return device_test_new(base, pool, err, errlen);
    if (strcmp(name, "fake-cuda") == 0) {
        cugpu *g = cugpu_fake_from_env(&psb_kernels, CUGPU_FAKE_DELAY_US_SERVER, err, errlen);
        return g ? device_cuda_new(base, g, err, errlen) : NULL;
    }
    int index = -1;
    if (strncmp(name, "cuda", 4) == 0 && cli_parse_device("--device", name, &index, err, errlen) == 0 &&
        index >= 0) {
#ifdef PSBENCH_HAVE_CUDA
        cugpu *g = cugpu_cuda_new(index, &psb_kernels, err, errlen);
        return g ? device_cuda_new(base, g, err, errlen) : NULL;
#else
        snprintf(err, errlen, "--device %s: this build has no CUDA (configured without the CUDA toolkit, or with "
                              "-DPSBENCH_CUDA=OFF): use --device cpu", name);
        return NULL;
#endif
    }
    snprintf(err, errlen, "device '%s' is not in this build (cpu, cuda[:N]; test and fake-cuda for tests)", name);
    return NULL;
}
