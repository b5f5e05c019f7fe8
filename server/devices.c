/* devices.c — the device each --device kind makes (device.h's device_new;
 * the names are shared/devspec.h's): the one file that knows every
 * device. */
#include "server/cuda/kernels_host.h"
#include "server/device.h"
#include "server/reduce.h"

#include <stdio.h>

device *device_new(device_spec dev, struct event_base *base, bufpool *pool, char *err, size_t errlen)
{
    char name[DEVSPEC_NAME_MAX];
    /* Decide the fold loops' width now, before any other thread may fold. */
    reduce_use_wide(-1);
    switch (dev.kind) {
    case DEVICE_CPU: {
        device *d = device_cpu_new(pool);
        if (!d)
            snprintf(err, errlen, "out of memory");
        return d;
    }
    case DEVICE_TEST:
        return device_test_new(base, pool, err, errlen);
    case DEVICE_FAKE_CUDA: {
        cugpu *g = cugpu_fake_from_env(&psb_kernels, CUGPU_FAKE_DELAY_US_SERVER, err, errlen);
        return g ? device_cuda_new(base, g, err, errlen) : NULL;
    }
    case DEVICE_CUDA: {
#ifdef PSBENCH_HAVE_CUDA
        cugpu *g = cugpu_cuda_new(devspec_gpu(dev), &psb_kernels, err, errlen);
        return g ? device_cuda_new(base, g, err, errlen) : NULL;
#else
        snprintf(err, errlen, "--device %s: this build has no CUDA (configured without the CUDA toolkit, or with "
                              "-DPSBENCH_CUDA=OFF): use --device cpu", devspec_name(dev, name));
        return NULL;
#endif
    }
    case DEVICE_STAGED: /* the trainer's compute layer's, not a server's */
        break;
    }
    snprintf(err, errlen, "device '%s' is not in this build (cpu, cuda[:N]; test and fake-cuda for tests)",
             devspec_name(dev, name));
    return NULL;
}
