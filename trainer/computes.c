/* computes.c — the compute layer's devices by name (compute_new) and the
 * placement of plain --device cuda (compute_place): the one file that knows
 * every implementation, as server/devices.c is for the server's devices. */
#include "trainer/compute_impl.h"
#include "shared/gpu.h"
#include "shared/log.h"

#include <stdio.h>
#include <string.h>

compute *compute_new(const char *name, char *err, size_t errlen)
{
    if (!name || strcmp(name, "cpu") == 0)
        return compute_cpu_new(err, errlen);
    if (strcmp(name, "staged") == 0) /* tests only (compute_staged.c) */
        return compute_staged_new(err, errlen);
    /* cuda[:N]: a GPU (refused in one line where none answers or the build
     * has no CUDA); fake-cuda: the same code on the fake GPU, for tests. */
    if ((strncmp(name, "cuda", 4) == 0 && (name[4] == '\0' || name[4] == ':')) || strcmp(name, "fake-cuda") == 0)
        return compute_cuda_new(name, err, errlen);
    errbuf_set(err, errlen, "compute on '%s': not a device (cpu, or cuda[:N])", name);
    return NULL;
}

int compute_place(const char *asked, uint64_t rank, char *out, size_t outlen, char *err, size_t errlen)
{
    if (!asked || strcmp(asked, "cuda") != 0) {
        snprintf(out, outlen, "%s", asked ? asked : "cpu");
        return 0;
    }
    char why[400];
    int n = gpu_count(why, sizeof why);
    if (n < 1) {
        errbuf_set(err, errlen, "--device cuda: %s", why);
        return -1;
    }
    snprintf(out, outlen, "cuda:%d", (int)(rank % (uint64_t)n));
    return 0;
}

