/* params_out.c — writing parameters for --params-out (see params_out.h). */
#include "trainer/params_out.h"

#include <stdbool.h>
#include <stdio.h>

int params_write(const char *path, const float *v, uint64_t n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(v, sizeof(float), (size_t)n, f) == (size_t)n;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok) {
        snprintf(err, errlen, "--params-out %s: cannot write", path);
        return -1;
    }
    return 0;
}
