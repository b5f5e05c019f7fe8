/* params_hash.c — SHA-256 of a model's parameters (see params_hash.h). */
#include "trainer/params_hash.h"

#include "shared/paramsfile.h"

#include <stdlib.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the digest is of little-endian float32: "
                                                          "a big-endian host would need to swap bytes");
_Static_assert(sizeof(float) == 4, "float32");

/* SHA-256 of n floats (one contiguous run: parameters in order): the
 * run's parameters file holds the same digest (shared/paramsfile.h). */
int params_sha256_floats(const float *v, uint64_t n, char hex[65]) { return paramsfile_sha256(v, n, hex); }

int params_sha256(const dummy_model *m, char hex[65])
{
    /* The parameters are one flat allocation in parameter order, with
     * nothing in between (model.h), so the digest of that run is the
     * digest parameter by parameter. */
    const float *v = model_values_const(m);
    if (v)
        return params_sha256_floats(v, model_total_size(m), hex);
    /* No host view (a device's memory): read back, waited for. */
    uint64_t n = model_total_size(m);
    float *h = malloc(n * sizeof *h);
    if (!h) {
        hex[0] = '\0';
        return -1;
    }
    compute *dev = model_compute(m);
    compute_read(dev, cspan_all(model_values_buf((dummy_model *)m)), h);
    compute_sync(dev);
    int rc = params_sha256_floats(h, n, hex);
    free(h);
    return rc;
}
