/* params_out.c — writing parameters for --params-out (see params_out.h). */
#include "trainer/params_out.h"
#include "shared/atomicfile.h"

#include <assert.h>
#include <stdio.h>

int params_write(const char *path, const float *v, uint64_t n, char *err, size_t errlen)
{
    /* Whole or not at all: a comparison never reads a cut file. The error:
     * "--params-out: cannot write PATH: ENOSPC: ...". */
    int w = snprintf(err, errlen, "--params-out: ");
    assert(w > 0 && (size_t)w < errlen);
    return afile_write(path, v, (size_t)n * sizeof(float), err + w, errlen - (size_t)w);
}
