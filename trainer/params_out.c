/* params_out.c — writing parameters for --params-out (see params_out.h). */
#include "trainer/params_out.h"
#include "shared/atomicfile.h"

#include <stdio.h>

int params_write(const char *path, const float *v, uint64_t n, char *err, size_t errlen)
{
    /* Whole or not at all: a comparison never reads a cut file. */
    char why[4400];
    if (afile_write(path, v, (size_t)n * sizeof(float), why, sizeof why) < 0) {
        snprintf(err, errlen, "--params-out: %s", why);
        return -1;
    }
    return 0;
}
