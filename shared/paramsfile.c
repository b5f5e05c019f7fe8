/* paramsfile.c — a run's final parameters as a file (see paramsfile.h). */
#include "shared/paramsfile.h"
#include "shared/atomicfile.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the file is little-endian: a big-endian host would "
                                                          "need to swap bytes");
_Static_assert(sizeof(float) == 4, "float32");

int paramsfile_sha256(const float *v, uint64_t n, char hex[65])
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

/* 64 hex digits into 32 bytes; -1 if they are not. */
static int paramsfile_unhex(const char *hex, uint8_t out[32])
{
    for (int i = 0; i < 64; i++) {
        char c = hex[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] | d : d << 4);
    }
    return hex[64] == '\0' ? 0 : -1;
}

static void paramsfile_put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void paramsfile_put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

int paramsfile_write(const char *path, const float *v, uint64_t n, const char hex[65], char *err, size_t errlen)
{
    uint8_t md[32];
    if (paramsfile_unhex(hex, md) < 0) {
        snprintf(err, errlen, "cannot write %s: no digest of the parameters", path);
        return -1;
    }
    size_t len = PARAMSFILE_HEADER + (size_t)n * 4;
    uint8_t *buf = malloc(len);
    if (!buf) {
        snprintf(err, errlen, "cannot write %s: out of memory", path);
        return -1;
    }
    memcpy(buf, PARAMSFILE_MAGIC, 8);
    paramsfile_put32(buf + 8, PARAMSFILE_VERSION);
    paramsfile_put32(buf + 12, 4);
    paramsfile_put64(buf + 16, n);
    memcpy(buf + 24, md, 32);
    if (n)
        memcpy(buf + PARAMSFILE_HEADER, v, (size_t)n * 4);
    int rc = afile_write(path, buf, len, err, errlen);
    free(buf);
    return rc;
}

int paramsfile_read(const char *path, uint64_t max, float **v, uint64_t *n, char hex[65], char *err, size_t errlen)
{
    *v = NULL;
    *n = 0;
    hex[0] = '\0';
    char *buf = NULL, why[512];
    size_t len = 0;
    if (userpath_read(path, PARAMSFILE_HEADER + (size_t)max * 4, &buf, &len, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s: %s", path, why);
        return -1;
    }
    uint32_t version = 0, eb = 0;
    uint64_t count = 0;
    if (len >= 24) {
        memcpy(&version, buf + 8, 4);
        memcpy(&eb, buf + 12, 4);
        memcpy(&count, buf + 16, 8);
    }
    int rc = -1;
    if (len < PARAMSFILE_HEADER || memcmp(buf, PARAMSFILE_MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s: not a parameters file (no \"%s\" header)", path, PARAMSFILE_MAGIC);
    } else if (version != PARAMSFILE_VERSION || eb != 4) {
        snprintf(err, errlen,
                 "%s: a parameters file of version %u with %u-byte elements (this reads version %u, "
                 "float32)",
                 path, version, eb, PARAMSFILE_VERSION);
    } else if (count > max) {
        snprintf(err, errlen, "%s: %llu parameters, more than the %llu read", path, (unsigned long long)count,
                 (unsigned long long)max);
    } else if (len != PARAMSFILE_HEADER + count * 4) {
        snprintf(err, errlen, "%s: %zu bytes for %llu parameters (%llu expected): %s", path, len,
                 (unsigned long long)count, (unsigned long long)(PARAMSFILE_HEADER + count * 4),
                 len < PARAMSFILE_HEADER + count * 4 ? "cut short" : "bytes beyond them");
    } else {
        float *p = malloc(count ? count * 4 : 1);
        char got[65];
        uint8_t want[32], have[32];
        if (!p) {
            snprintf(err, errlen, "%s: out of memory for %llu parameters", path, (unsigned long long)count);
        } else {
            memcpy(p, buf + PARAMSFILE_HEADER, count * 4);
            memcpy(want, buf + 24, 32);
            if (paramsfile_sha256(p, count, got) < 0 || paramsfile_unhex(got, have) < 0) {
                snprintf(err, errlen, "%s: cannot compute the parameters' digest", path);
            } else if (memcmp(want, have, 32) != 0) {
                snprintf(err, errlen, "%s: its digest does not match its parameters (the file was changed)", path);
            } else {
                *v = p;
                p = NULL;
                *n = count;
                memcpy(hex, got, 65);
                rc = 0;
            }
        }
        free(p);
    }
    free(buf);
    return rc;
}

int paramsfile_of_results(const char *dir, const char *what, const json_t *final_params, float **v, uint64_t *n,
                          char *why, size_t whylen)
{
    *v = NULL;
    *n = 0;
    if (!json_is_object(final_params)) {
        snprintf(why, whylen, "%s has no final_params (a run without them: an older psbench, or no --out)", what);
        return -1;
    }
    json_t *file = json_object_get(final_params, "file");
    if (!json_is_string(file)) {
        const char *w = json_string_value(json_object_get(final_params, "why"));
        text_shown ws;
        snprintf(why, whylen, "%s has no parameters file: %s", what, w ? text_show(w, 0, &ws) : "not said why");
        return -1;
    }
    const char *name = json_string_value(file);
    text_shown ns;
    if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        snprintf(why, whylen, "%s: final_params.file %s is not a file name beside it", what, text_show(name, '"', &ns));
        return -1;
    }
    char path[4400], err[600], hex[65];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (paramsfile_read(path, PARAMSFILE_MAX_FLOATS, v, n, hex, err, sizeof err) < 0) {
        snprintf(why, whylen, "%s", err);
        return -1;
    }
    const char *want = json_string_value(json_object_get(final_params, "sha256"));
    if (!want || strcmp(want, hex) != 0) {
        snprintf(why, whylen, "%s holds other parameters than %s names (digest %.12s..., not %.12s...)", path, what,
                 hex, want ? want : "null");
        free(*v);
        *v = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

double paramsfile_l2_norm(const float *v, uint64_t n)
{
    double s = 0;
    for (uint64_t i = 0; i < n; i++)
        s += (double)v[i] * (double)v[i];
    return sqrt(s);
}

double paramsfile_rel_distance(const float *a, const float *b, uint64_t n)
{
    double d = 0, na = 0;
    for (uint64_t i = 0; i < n; i++) {
        double x = (double)b[i] - (double)a[i];
        d += x * x;
        na += (double)a[i] * (double)a[i];
    }
    if (d == 0)
        return 0;
    return na == 0 ? INFINITY : sqrt(d) / sqrt(na);
}
