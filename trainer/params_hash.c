/* params_hash.c — SHA-256 of a model's parameters (see params_hash.h). */
#include "trainer/params_hash.h"

#include <openssl/evp.h>
#include <stdlib.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the digest is of little-endian float32: "
                                                          "a big-endian host would need to swap bytes");
_Static_assert(sizeof(float) == 4, "float32");

/* SHA-256 of n floats (one contiguous run: parameters in order). */
int params_sha256_floats(const float *v, uint64_t n, char hex[65])
{
    hex[0] = '\0';
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -1;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, v, n * sizeof(float)) &&
             EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (!ok || mdlen != 32)
        return -1;
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
    return 0;
}

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
