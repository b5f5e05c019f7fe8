/* test_half.c — fp32 <-> fp16 / bf16 (shared/half.h): the scalar reference
 * against a table of PyTorch's results, and every vector path this CPU can
 * run bit-equal to the scalar one: all 2^16 narrow patterns, a dense sample
 * of fp32 patterns (all 2^32 with --exhaustive, its own ctest), tails and
 * unaligned starts, the fold, the scaled and the cast-then-divide forms;
 * the GPU kernels' cast-then-multiply (half_elem.h) against them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/half.h"
#include "shared/half_elem.h"

#define MAX_PATHS 8

static const char *paths[MAX_PATHS];
static size_t npaths;
static const char *first_path; /* half_path() before any test changed it */

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* xorshift64*: the sample's patterns, the same every run */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* Known results: fp32 bits -> fp16 bits, bf16 bits. Where they come from:
 * fp16, finite: CPython's struct.pack('<e', x) (PyFloat_Pack2: IEEE round
 * half to even from the exact value), which is what c10's
 * fp16_ieee_from_fp32_value computes for every non-NaN input; the values
 * that overflow (struct refuses them) are ±inf by IEEE's rule: at or above
 * 65520, halfway from 65504 (odd mantissa) to 65536. fp16, NaN: the
 * algorithm's sign | 0x7E00. bf16: c10's round_to_nearest_even evaluated on
 * the integers, (u + 0x7FFF + ((u >> 16) & 1)) >> 16, 0x7FC0 for NaN. */
static const struct known {
    uint32_t f32;
    uint16_t f16, b16;
    const char *what;
} known[] = {
    {0x00000000, 0x0000, 0x0000, "+0"},
    {0x80000000, 0x8000, 0x8000, "-0"},
    {0x3F800000, 0x3C00, 0x3F80, "1"},
    {0xBF800000, 0xBC00, 0xBF80, "-1"},
    {0x40490FDB, 0x4248, 0x4049, "pi"},
    {0x3DCCCCCD, 0x2E66, 0x3DCD, "0.1"},
    {0xBDCCCCCD, 0xAE66, 0xBDCD, "-0.1"},
    {0x42F6E979, 0x57B7, 0x42F7, "123.456"},
    {0x3A800000, 0x1400, 0x3A80, "2^-10"},
    {0x477FE000, 0x7BFF, 0x4780, "65504, the largest fp16"},
    {0x477FEFFF, 0x7BFF, 0x4780, "just under the fp16 overflow tie"},
    {0x477FF000, 0x7C00, 0x4780, "65520: ties to even, fp16 inf"},
    {0x47800000, 0x7C00, 0x4780, "65536"},
    {0x4B000001, 0x7C00, 0x4B00, "2^23 + 1"},
    {0x7F7FFFFF, 0x7C00, 0x7F80, "FLT_MAX: bf16 rounds to inf"},
    {0xFF7FFFFF, 0xFC00, 0xFF80, "-FLT_MAX"},
    {0x7F800000, 0x7C00, 0x7F80, "+inf"},
    {0xFF800000, 0xFC00, 0xFF80, "-inf"},
    {0x7FC00000, 0x7E00, 0x7FC0, "quiet NaN"},
    {0xFFC00000, 0xFE00, 0x7FC0, "-quiet NaN: fp16 keeps the sign, bf16 not"},
    {0x7F800001, 0x7E00, 0x7FC0, "signalling NaN"},
    {0x7FFFFFFF, 0x7E00, 0x7FC0, "NaN, every payload bit"},
    {0xFFA5A5A5, 0xFE00, 0x7FC0, "-signalling NaN with a payload"},
    {0x7FE01000, 0x7E00, 0x7FC0, "NaN whose payload fp16 could carry"},
    {0x33800000, 0x0001, 0x3380, "2^-24, the smallest fp16 subnormal"},
    {0x33000000, 0x0000, 0x3300, "2^-25: ties to the even zero"},
    {0x33000001, 0x0001, 0x3300, "just above 2^-25"},
    {0x33C00000, 0x0002, 0x33C0, "1.5 * 2^-24: tie, to 2"},
    {0x34200000, 0x0002, 0x3420, "2.5 * 2^-24: tie, to 2"},
    {0x387FC000, 0x03FF, 0x3880, "the largest fp16 subnormal"},
    {0x387FE000, 0x0400, 0x3880, "tie between it and 2^-14: up"},
    {0x38800000, 0x0400, 0x3880, "2^-14, the smallest fp16 normal"},
    {0x3F801000, 0x3C00, 0x3F80, "1 + 2^-11: fp16 tie, to even"},
    {0x3F803000, 0x3C02, 0x3F80, "1 + 3 * 2^-11: fp16 tie, up"},
    {0x3F808000, 0x3C04, 0x3F80, "1 + 2^-8: bf16 tie, to even"},
    {0x3F818000, 0x3C0C, 0x3F82, "1 + 3 * 2^-8: bf16 tie, up"},
    {0x3F808001, 0x3C04, 0x3F81, "just above a bf16 tie"},
    {0x00000001, 0x0000, 0x0000, "the smallest fp32 subnormal"},
    {0x00008000, 0x0000, 0x0000, "fp32 subnormal, bf16 tie to zero"},
    {0x00018000, 0x0000, 0x0002, "fp32 subnormal, bf16 tie up: kept, not flushed"},
    {0x80018000, 0x8000, 0x8002, "its negative"},
    {0x007FFFFF, 0x0000, 0x0080, "the largest fp32 subnormal: bf16 rounds up to normal"},
    {0x00800000, 0x0000, 0x0080, "FLT_MIN"},
};
#define NKNOWN (sizeof known / sizeof known[0])

static void use(const char *path) { assert_int_equal(half_set_path(path), 0); }

static void test_types(void **state)
{
    (void)state;
    assert_int_equal(half_type_size(HALF_FP32), 4);
    assert_int_equal(half_type_size(HALF_FP16), 2);
    assert_int_equal(half_type_size(HALF_BF16), 2);
    assert_string_equal(half_type_name(HALF_FP32), "fp32");
    assert_string_equal(half_type_name(HALF_FP16), "fp16");
    assert_string_equal(half_type_name(HALF_BF16), "bf16");
    for (int t = 0; t < HALF_NTYPES; t++)
        assert_int_equal(half_type_parse(half_type_name(t)), t);
    assert_int_equal(half_type_parse("FP16"), -1);
    assert_int_equal(half_type_parse("fp8"), -1);
    assert_int_equal(half_type_parse(""), -1);
    assert_int_equal(half_type_parse(NULL), -1);
    /* half_narrow and half_widen: the type's own functions */
    float x[5] = {1.0f, -2.5f, 3.14159f, 65504.0f, 1e-8f}, w1[5], w2[5];
    uint16_t n1[5], n2[5];
    half_narrow(HALF_FP16, n1, x, 5);
    half_to_fp16(n2, x, 5);
    assert_memory_equal(n1, n2, sizeof n1);
    half_widen(HALF_FP16, w1, n1, 5);
    half_from_fp16(w2, n2, 5);
    assert_memory_equal(w1, w2, sizeof w1);
    half_narrow(HALF_BF16, n1, x, 5);
    half_to_bf16(n2, x, 5);
    assert_memory_equal(n1, n2, sizeof n1);
    assert_memory_not_equal(n1, (uint16_t[5]){0}, sizeof n1);
    half_widen(HALF_BF16, w1, n1, 5);
    half_from_bf16(w2, n2, 5);
    assert_memory_equal(w1, w2, sizeof w1);
}

/* The path chosen at the first call: the scalar one where
 * PSBENCH_HALF_SCALAR=1 (ctest unit_half_scalar), otherwise the last one
 * half_paths lists (the widest this CPU runs). */
static void test_paths(void **state)
{
    (void)state;
    assert_true(npaths >= 1);
    assert_string_equal(paths[0], "scalar");
    const char *env = getenv("PSBENCH_HALF_SCALAR");
    if (env && strcmp(env, "1") == 0)
        assert_string_equal(first_path, "scalar");
    else
        assert_string_equal(first_path, paths[npaths - 1]);
    assert_int_equal(half_set_path("no-such-path"), -1);
    assert_string_equal(half_path(), first_path); /* a refused name changes nothing */
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        assert_string_equal(half_path(), paths[p]);
    }
    printf("half paths here:");
    for (size_t p = 0; p < npaths; p++)
        printf(" %s", paths[p]);
    printf(" (default %s)\n", first_path);
}

/* The table through the one-value functions and, as one array (long enough
 * for every path's vector body), through each path. */
static void test_known(void **state)
{
    (void)state;
    float in[NKNOWN];
    psb_fp16 h[NKNOWN];
    psb_bf16 b[NKNOWN];
    for (size_t i = 0; i < NKNOWN; i++) {
        in[i] = float_of(known[i].f32);
        if (half_fp16_of(in[i]) != known[i].f16 || half_bf16_of(in[i]) != known[i].b16)
            fail_msg("%s (0x%08X): fp16 0x%04X want 0x%04X, bf16 0x%04X want 0x%04X", known[i].what, known[i].f32,
                     half_fp16_of(in[i]), known[i].f16, half_bf16_of(in[i]), known[i].b16);
    }
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        half_to_fp16(h, in, NKNOWN);
        half_to_bf16(b, in, NKNOWN);
        for (size_t i = 0; i < NKNOWN; i++)
            if (h[i] != known[i].f16 || b[i] != known[i].b16)
                fail_msg("%s: %s: fp16 0x%04X want 0x%04X, bf16 0x%04X want 0x%04X", paths[p], known[i].what, h[i],
                         known[i].f16, b[i], known[i].b16);
    }
}

/* Widening, by value: exact, NaNs quiet with their sign and payload. */
static void test_widen_values(void **state)
{
    (void)state;
    static const struct {
        uint16_t h;
        uint32_t f32;
    } w16[] = {
        {0x0000, 0x00000000}, {0x8000, 0x80000000}, {0x3C00, 0x3F800000}, {0x7BFF, 0x477FE000}, {0x0001, 0x33800000},
        {0x03FF, 0x387FC000}, {0x0400, 0x38800000}, {0x7C00, 0x7F800000}, {0xFC00, 0xFF800000}, {0x7E00, 0x7FC00000},
        {0xFE00, 0xFFC00000}, {0x7C01, 0x7FC02000}, {0xFDFF, 0xFFFFE000},
    };
    for (size_t i = 0; i < sizeof w16 / sizeof w16[0]; i++)
        if (bits_of(half_fp16_to_float(w16[i].h)) != w16[i].f32)
            fail_msg("fp16 0x%04X -> 0x%08X, want 0x%08X", w16[i].h, bits_of(half_fp16_to_float(w16[i].h)), w16[i].f32);
    assert_int_equal(bits_of(half_bf16_to_float(0x7FC0)), 0x7FC00000);
    assert_int_equal(bits_of(half_bf16_to_float(0xFF81)), 0xFF810000); /* a signalling NaN stays one */
    assert_int_equal(bits_of(half_bf16_to_float(0x0001)), 0x00010000);
}

/* All 2^16 narrow patterns, every path, widened and folded, against the
 * one-value functions. */
static void test_widen_all(void **state)
{
    (void)state;
    enum { N = 65536 };
    uint16_t *in = malloc(N * sizeof *in);
    float *out = malloc(N * sizeof *out);
    assert_non_null(in);
    assert_non_null(out);
    for (uint32_t i = 0; i < N; i++)
        in[i] = (uint16_t)i;
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        for (int bf = 0; bf < 2; bf++) {
            (bf ? half_from_bf16 : half_from_fp16)(out, in, N);
            for (uint32_t i = 0; i < N; i++) {
                uint32_t want = bits_of(bf ? half_bf16_to_float(in[i]) : half_fp16_to_float(in[i]));
                if (bits_of(out[i]) != want)
                    fail_msg("%s: %s 0x%04X -> 0x%08X, want 0x%08X", paths[p], bf ? "bf16" : "fp16", i, bits_of(out[i]),
                             want);
            }
        }
    }
    free(in);
    free(out);
}

/* The fp32 patterns the sample covers whole: 8192 around each edge, both
 * signs. */
static const uint32_t edges[] = {
    0x00000000, 0x00008000, 0x007FFFFF, 0x00800000, 0x33000000, 0x33800000, 0x387FE000, 0x38800000,
    0x3F800000, 0x477FE000, 0x477FF000, 0x7F7FFFFF, 0x7F800000, 0x7F801000, 0x7FC00000, 0x7FFFF000,
};

/* Each path narrows `in` (n patterns) as the reference does, s = 1 and s. */
static void check_narrow(const uint32_t *in, size_t n, float s)
{
    float *x = malloc(n * sizeof *x);
    uint16_t *h = malloc(n * sizeof *h), *b = malloc(n * sizeof *b);
    assert_non_null(x);
    assert_non_null(h);
    assert_non_null(b);
    memcpy(x, in, n * sizeof *x);
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        half_to_fp16_scaled(h, x, n, s);
        half_to_bf16_scaled(b, x, n, s);
        for (size_t i = 0; i < n; i++) {
            float v = x[i] * s;
            if (h[i] != half_fp16_of(v) || b[i] != half_bf16_of(v))
                fail_msg("%s: 0x%08X * %g: fp16 0x%04X want 0x%04X, bf16 0x%04X want 0x%04X", paths[p], in[i],
                         (double)s, h[i], half_fp16_of(v), b[i], half_bf16_of(v));
        }
        if (s == 1.0f) { /* the unscaled entry points too */
            half_to_fp16(h, x, n);
            half_to_bf16(b, x, n);
            for (size_t i = 0; i < n; i++)
                if (h[i] != half_fp16_of(x[i]) || b[i] != half_bf16_of(x[i]))
                    fail_msg("%s: 0x%08X unscaled", paths[p], in[i]);
        }
    }
    free(x);
    free(h);
    free(b);
}

/* Each path's cast-then-divide as the one-value functions compose it. */
static void check_cast_div(const uint32_t *in, size_t n, float d)
{
    float *x = malloc(n * sizeof *x);
    uint16_t *h = malloc(n * sizeof *h), *b = malloc(n * sizeof *b);
    assert_non_null(x);
    assert_non_null(h);
    assert_non_null(b);
    memcpy(x, in, n * sizeof *x);
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        half_to_fp16_div(h, x, n, d);
        half_to_bf16_div(b, x, n, d);
        for (size_t i = 0; i < n; i++) {
            uint16_t wh = half_fp16_of(half_fp16_to_float(half_fp16_of(x[i])) / d);
            uint16_t wb = half_bf16_of(half_bf16_to_float(half_bf16_of(x[i])) / d);
            if (h[i] != wh || b[i] != wb)
                fail_msg("%s: 0x%08X cast then / %g: fp16 0x%04X want 0x%04X, bf16 0x%04X want 0x%04X", paths[p], in[i],
                         (double)d, h[i], wh, b[i], wb);
        }
    }
    free(x);
    free(h);
    free(b);
}

static void test_narrow_sample(void **state)
{
    (void)state;
    size_t nedge = sizeof edges / sizeof edges[0], n = 2 * nedge * 8192 + (1u << 22);
    uint32_t *in = malloc(n * sizeof *in);
    assert_non_null(in);
    size_t k = 0;
    for (size_t e = 0; e < nedge; e++)
        for (uint32_t d = 0; d < 8192; d++) {
            uint32_t u = edges[e] - 4096 + d;
            in[k++] = u & 0x7FFFFFFF;
            in[k++] = u | 0x80000000;
        }
    while (k < n)
        in[k++] = rnd32();
    check_narrow(in, n, 1.0f);
    check_narrow(in, 1u << 18, 0.25f); /* exact scaling */
    check_narrow(in, 1u << 18, 1.0f / 3);
    check_narrow(in + (1u << 18), 1u << 18, 3e5f);           /* to overflow */
    check_cast_div(in, 2 * nedge * 8192 + (1u << 18), 3.0f); /* the edges, and random patterns */
    /* every fp16 value: d = 14 meets exact fp16 ties (91 * 2^-24 / 14) that
     * a reciprocal multiply would round the other way */
    for (uint32_t h = 0; h < 65536; h++)
        in[h] = bits_of(half_fp16_to_float((uint16_t)h));
    check_cast_div(in, 65536, 14.0f);
    check_cast_div(in, 65536, 28.0f);
    free(in);
}

/* Unaligned starts (0..3 elements off) and every length 0..67: each path,
 * each function, the same as the reference, and not one element written
 * past the end. */
static void test_tails(void **state)
{
    (void)state;
    enum { LEN = 68, OFF = 4, GUARD = 8, SIZE = LEN + OFF + GUARD };
    float src[SIZE], wide[SIZE], acc[SIZE], want_acc[SIZE];
    uint16_t nsrc[SIZE], narrow[SIZE];
    for (size_t i = 0; i < SIZE; i++) {
        src[i] = (float)((int)(rnd32() % 200001) - 100000) * 0.37f;
        nsrc[i] = (uint16_t)rnd32();
    }
    src[5] = float_of(0x7FA00001); /* a NaN and a subnormal inside the vectors */
    src[9] = float_of(0x00018000);
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        for (size_t off = 0; off < OFF; off++)
            for (size_t n = 0; n < LEN; n++) {
                for (int bf = 0; bf < 2; bf++) {
                    memset(narrow, 0xA5, sizeof narrow);
                    (bf ? half_to_bf16 : half_to_fp16)(narrow + off, src + off, n);
                    for (size_t i = 0; i < SIZE; i++) {
                        uint16_t want = i < off || i >= off + n ? 0xA5A5
                                        : bf                    ? half_bf16_of(src[i])
                                                                : half_fp16_of(src[i]);
                        if (narrow[i] != want)
                            fail_msg("%s: to %s off %zu n %zu: [%zu] 0x%04X want 0x%04X", paths[p],
                                     bf ? "bf16" : "fp16", off, n, i, narrow[i], want);
                    }
                    memset(wide, 0xA5, sizeof wide);
                    (bf ? half_from_bf16 : half_from_fp16)(wide + off, nsrc + off, n);
                    for (size_t i = 0; i < SIZE; i++) {
                        uint32_t want = i < off || i >= off + n ? 0xA5A5A5A5
                                        : bf                    ? bits_of(half_bf16_to_float(nsrc[i]))
                                                                : bits_of(half_fp16_to_float(nsrc[i]));
                        if (bits_of(wide[i]) != want)
                            fail_msg("%s: from %s off %zu n %zu: [%zu]", paths[p], bf ? "bf16" : "fp16", off, n, i);
                    }
                    memcpy(acc, src, sizeof acc);
                    memcpy(want_acc, src, sizeof acc);
                    (bf ? half_fold_bf16 : half_fold_fp16)(acc + off, nsrc + off, n);
                    for (size_t i = off; i < off + n; i++)
                        want_acc[i] += bf ? half_bf16_to_float(nsrc[i]) : half_fp16_to_float(nsrc[i]);
                    if (memcmp(acc, want_acc, sizeof acc) != 0)
                        fail_msg("%s: fold %s off %zu n %zu", paths[p], bf ? "bf16" : "fp16", off, n);
                }
            }
    }
}

/* The server's fold over many pushes: finite narrow values (NaN payloads
 * aside, the fold is the plain fp32 sum), each path the scalar loop's
 * bits. */
static void test_fold(void **state)
{
    (void)state;
    enum { N = 100003, PUSHES = 4 };
    float *x = malloc(N * sizeof *x), *acc = malloc(N * sizeof *acc), *want = malloc(N * sizeof *want);
    uint16_t *push = malloc(N * sizeof *push);
    assert_non_null(x);
    assert_non_null(acc);
    assert_non_null(want);
    assert_non_null(push);
    for (int bf = 0; bf < 2; bf++)
        for (size_t p = 0; p < npaths; p++) {
            use(paths[p]);
            memset(acc, 0, N * sizeof *acc);
            memset(want, 0, N * sizeof *want);
            for (int k = 0; k < PUSHES; k++) {
                for (size_t i = 0; i < N; i++)
                    x[i] = ((float)rnd32() / 4294967296.0f - 0.5f) * 1e-2f * (float)(k + 1);
                (bf ? half_to_bf16 : half_to_fp16)(push, x, N);
                (bf ? half_fold_bf16 : half_fold_fp16)(acc, push, N);
                for (size_t i = 0; i < N; i++)
                    want[i] += bf ? half_bf16_to_float(push[i]) : half_fp16_to_float(push[i]);
            }
            if (memcmp(acc, want, N * sizeof *acc) != 0)
                fail_msg("%s: fold %s differs from the scalar loop", paths[p], bf ? "bf16" : "fp16");
        }
    free(x);
    free(acc);
    free(want);
    free(push);
}

/* half.h's arrays may lie at any address (a narrow push's payload follows
 * its header in a server's input buffer at whatever offset the header
 * left): every function on every path, each array one byte off, gives the
 * aligned call's bytes. (The scalar loops indexed uint16_t pointers: UBSan
 * reported misaligned loads.) */
static void test_misaligned(void **state)
{
    (void)state;
    enum { N = 37 }; /* a vector body and a scalar tail on every path */
    float x[N], fw[N], facc[N];
    uint16_t h[N], hw[N];
    _Alignas(16) unsigned char buf_in[N * 4 + 1], buf_out[N * 4 + 1];
    for (size_t i = 0; i < N; i++)
        x[i] = ((float)rnd32() / 4294967296.0f - 0.5f) * 3.0f;
    for (int bf = 0; bf < 2; bf++)
        for (size_t p = 0; p < npaths; p++) {
            use(paths[p]);
            const char *what = bf ? "bf16" : "fp16";
            /* narrowing (plain, scaled, cast/div): src and dst at odd addresses */
            memcpy(buf_in + 1, x, sizeof x);
            (bf ? half_to_bf16 : half_to_fp16)(hw, x, N);
            (bf ? half_to_bf16 : half_to_fp16)((uint16_t *)(void *)(buf_out + 1), (const float *)(void *)(buf_in + 1),
                                               N);
            if (memcmp(buf_out + 1, hw, sizeof hw) != 0)
                fail_msg("%s: to_%s misaligned differs", paths[p], what);
            (bf ? half_to_bf16_scaled : half_to_fp16_scaled)(hw, x, N, 0.25f);
            (bf ? half_to_bf16_scaled : half_to_fp16_scaled)((uint16_t *)(void *)(buf_out + 1),
                                                             (const float *)(void *)(buf_in + 1), N, 0.25f);
            if (memcmp(buf_out + 1, hw, sizeof hw) != 0)
                fail_msg("%s: to_%s_scaled misaligned differs", paths[p], what);
            (bf ? half_to_bf16_div : half_to_fp16_div)(hw, x, N, 3.0f);
            (bf ? half_to_bf16_div : half_to_fp16_div)((uint16_t *)(void *)(buf_out + 1),
                                                       (const float *)(void *)(buf_in + 1), N, 3.0f);
            if (memcmp(buf_out + 1, hw, sizeof hw) != 0)
                fail_msg("%s: to_%s_div misaligned differs", paths[p], what);
            /* widening and the fold: src and dst (acc) at odd addresses */
            memcpy(h, hw, sizeof h);
            memcpy(buf_in + 1, h, sizeof h);
            (bf ? half_from_bf16 : half_from_fp16)(fw, h, N);
            (bf ? half_from_bf16 : half_from_fp16)((float *)(void *)(buf_out + 1),
                                                   (const uint16_t *)(void *)(buf_in + 1), N);
            if (memcmp(buf_out + 1, fw, sizeof fw) != 0)
                fail_msg("%s: from_%s misaligned differs", paths[p], what);
            memcpy(facc, x, sizeof facc);
            (bf ? half_fold_bf16 : half_fold_fp16)(facc, h, N);
            memcpy(buf_out + 1, x, sizeof x);
            (bf ? half_fold_bf16 : half_fold_fp16)((float *)(void *)(buf_out + 1),
                                                   (const uint16_t *)(void *)(buf_in + 1), N);
            if (memcmp(buf_out + 1, facc, sizeof facc) != 0)
                fail_msg("%s: fold_%s misaligned differs", paths[p], what);
        }
}

/* PyTorch's compress hooks: cast first, then divide (in fp32, rounded back
 * to the narrow type). A value beyond fp16's range is inf before the
 * division: the order shows, against the scaled form. */
static void test_cast_div(void **state)
{
    (void)state;
    enum { N = 3000 };
    float x[N];
    uint16_t got[N], want[N];
    for (size_t i = 0; i < N; i++)
        x[i] = float_of(rnd32());
    x[0] = 70000.0f;
    x[1] = -1e5f;
    x[2] = 1.0f;
    x[3] = float_of(0x00018000);
    static const float ds[] = {2, 3, 4, 7, 8};
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++)
            for (int bf = 0; bf < 2; bf++) {
                float d = ds[k];
                (bf ? half_to_bf16_div : half_to_fp16_div)(got, x, N, d);
                for (size_t i = 0; i < N; i++) {
                    float c = bf ? half_bf16_to_float(half_bf16_of(x[i])) : half_fp16_to_float(half_fp16_of(x[i]));
                    want[i] = bf ? half_bf16_of(c / d) : half_fp16_of(c / d);
                }
                if (memcmp(got, want, sizeof got) != 0)
                    fail_msg("%s: %s cast then divide by %g", paths[p], bf ? "bf16" : "fp16", (double)d);
            }
        half_to_fp16_div(got, x, 3, 2.0f);
        assert_int_equal(got[0], 0x7C00); /* 70000: inf, then inf / 2 */
        assert_int_equal(got[1], 0xFC00);
        assert_int_equal(got[2], 0x3800); /* 0.5 */
        half_to_fp16_scaled(got, x, 2, 0.5f);
        assert_int_equal(got[0], half_fp16_of(35000.0f)); /* divided first: finite */
        assert_int_equal(got[0], 0x7846);
        /* divided, not multiplied by the reciprocal (ATen's CPU kernel, not
         * its CUDA one): 91 * 2^-24 / 14 is an exact fp16 tie, to even; in
         * a vector body and in a tail */
        float tie[17];
        for (size_t i = 0; i < 17; i++)
            tie[i] = half_fp16_to_float(0x005B);
        half_to_fp16_div(got, tie, 17, 14.0f);
        for (size_t i = 0; i < 17; i++)
            assert_int_equal(got[i], 0x0006);
    }
}

/* shared/half_elem.h's cast-then-multiply, the per-element function of the
 * GPU's compression kernel (trk_narrow_mul) and the fake GPU's loops: the
 * cast as half.c's, then ATen's CUDA division, times the fp32 reciprocal.
 * Over every fp16 and bf16 value: for d a power of two (1/d exact) it is
 * the CPU's cast-then-divide bit for bit; for d = 14 it is not, and
 * exactly where the quotient's two roundings part (91 * 2^-24 / 14, the
 * tie above, rounds up to 0x0007 through the reciprocal). Its widening is
 * half.c's (all 2^16 patterns). */
static void test_narrow_mul(void **state)
{
    (void)state;
    for (int bf = 0; bf < 2; bf++)
        for (uint32_t h = 0; h < 0x10000; h++) {
            float x = bf ? half_bf16_to_float((uint16_t)h) : half_fp16_to_float((uint16_t)h);
            float w = he_widen(bf, (uint16_t)h);
            if (memcmp(&w, &x, sizeof w) != 0)
                fail_msg("he_widen(%d, 0x%04X) = %a, half.c's %a", bf, h, (double)w, (double)x);
            if (isnan(x))
                continue; /* a NaN's payload: half.h */
            for (float d = 1; d <= 1024; d *= 2) {
                uint16_t div = 0;
                (bf ? half_to_bf16_div : half_to_fp16_div)(&div, &x, 1, d);
                if (he_narrow_mul(bf, x, 1.0f / d) != div)
                    fail_msg("%s 0x%04X / %g: 0x%04X times the reciprocal, 0x%04X divided", bf ? "bf16" : "fp16", h,
                             (double)d, he_narrow_mul(bf, x, 1.0f / d), div);
            }
        }
    /* d = 14: the two kernels part on the tie and nowhere else but on
     * such cases (counted, not assumed to be none). */
    float tie = half_fp16_to_float(0x005B);
    uint16_t div = 0;
    half_to_fp16_div(&div, &tie, 1, 14.0f);
    assert_int_equal(div, 0x0006);
    assert_int_equal(he_narrow_mul(0, tie, 1.0f / 14.0f), 0x0007);
    unsigned parted = 0;
    for (uint32_t h = 0; h < 0x7C00; h++) {
        float x = half_fp16_to_float((uint16_t)h);
        half_to_fp16_div(&div, &x, 1, 14.0f);
        if (he_narrow_mul(0, x, 1.0f / 14.0f) != div) {
            parted++;
            /* only where x / 14 is (nearly) an fp16 tie: one ulp apart */
            assert_true(abs((int)he_narrow_mul(0, x, 1.0f / 14.0f) - (int)div) == 1);
        }
    }
    assert_true(parted > 0 && parted < 100);
}

/* half_pair_mean and half_pair_sum (a server's fold of two narrow
 * pushes) on every path against the per-element definition (half_elem.h:
 * widen both, one fp32 add, one multiply, narrow): every 16-bit pattern
 * as a, against another pattern as b, two scales, fp16 and bf16, at a
 * misaligned start and over every tail length. Where both inputs are NaN
 * the result must be a NaN (which of the two the add keeps is the
 * compiler's operand order: half.h). */
static void test_pair(void **state)
{
    (void)state;
    enum { M = 65536 + 19 };
    uint16_t *a = malloc((M + 1) * sizeof *a), *b = malloc((M + 1) * sizeof *b);
    uint16_t *mean = malloc((M + 1) * sizeof *mean);
    float *sum = malloc((M + 1) * sizeof *sum);
    assert_true(a && b && mean && sum);
    static const float scales[] = {1.0f / 3.0f, 0.5f};
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        for (int bf = 0; bf < 2; bf++) {
            half_type t = bf ? HALF_BF16 : HALF_FP16;
            for (int mis = 0; mis < 2; mis++) { /* mis: every array one element off its alignment */
                uint16_t *x = a + mis, *y = b + mis, *o = mean + mis;
                float *q = sum + mis;
                for (size_t i = 0; i < M; i++) {
                    x[i] = (uint16_t)i;
                    y[i] = (uint16_t)(i * 40503u + 7);
                }
                for (size_t k = 0; k < sizeof scales / sizeof *scales; k++) {
                    half_pair_mean(t, o, x, y, M, scales[k]);
                    half_pair_sum(t, q, x, y, M);
                    for (size_t i = 0; i < M; i++) {
                        float wa = he_widen(bf, x[i]), wb = he_widen(bf, y[i]);
                        float ws = wa + wb;
                        uint16_t wm = he_narrow(bf, ws * scales[k]);
                        if (isnan(wa) && isnan(wb)) {
                            assert_true(isnan(he_widen(bf, o[i])) && isnan(q[i]));
                            continue;
                        }
                        if (o[i] != wm || memcmp(&q[i], &ws, sizeof ws) != 0)
                            fail_msg("%s %s pair [%zu] 0x%04X, 0x%04X: mean 0x%04X want 0x%04X, sum %a want %a",
                                     paths[p], bf ? "bf16" : "fp16", i, x[i], y[i], o[i], wm, (double)q[i], (double)ws);
                    }
                }
                for (size_t n = 0; n < 40; n++) { /* tails: nothing past n written */
                    o[n] = 0xDEAD;
                    half_pair_mean(t, o, x, y, n, 0.5f);
                    assert_int_equal(o[n], 0xDEAD);
                }
            }
        }
    }
    use(first_path);
    free(a);
    free(b);
    free(mean);
    free(sum);
}

/* Every fp32 pattern, both narrowings, every path (unit_half_exhaustive). */
static void test_exhaustive(void **state)
{
    (void)state;
    enum { CHUNK = 1 << 20 };
    float *x = malloc(CHUNK * sizeof *x);
    uint16_t *rh = malloc(CHUNK * sizeof *rh), *rb = malloc(CHUNK * sizeof *rb);
    uint16_t *h = malloc(CHUNK * sizeof *h), *b = malloc(CHUNK * sizeof *b);
    assert_non_null(x);
    assert_non_null(rh);
    assert_non_null(rb);
    assert_non_null(h);
    assert_non_null(b);
    for (uint64_t base = 0; base < (1ull << 32); base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            x[i] = float_of((uint32_t)(base + i));
            rh[i] = half_fp16_of(x[i]);
            rb[i] = half_bf16_of(x[i]);
        }
        for (size_t p = 1; p < npaths; p++) {
            use(paths[p]);
            half_to_fp16(h, x, CHUNK);
            half_to_bf16(b, x, CHUNK);
            if (memcmp(h, rh, CHUNK * sizeof *h) != 0 || memcmp(b, rb, CHUNK * sizeof *b) != 0)
                for (uint32_t i = 0; i < CHUNK; i++)
                    if (h[i] != rh[i] || b[i] != rb[i])
                        fail_msg("%s: 0x%08X: fp16 0x%04X want 0x%04X, bf16 0x%04X want 0x%04X", paths[p],
                                 (uint32_t)(base + i), h[i], rh[i], b[i], rb[i]);
        }
    }
    free(x);
    free(rh);
    free(rb);
    free(h);
    free(b);
}

/* The reductions of a compressed allreduce: narrow(float(a) + float(b)),
 * rounded once. Known sums first (ties both ways, overflow, subnormals
 * kept), then every path against the scalar functions over random bit
 * patterns (NaNs, infinities and subnormals among them), in place as
 * Gloo calls it and across chunk boundaries. */
static uint16_t sum_ref(int bf, uint16_t a, uint16_t b)
{
    if (bf)
        return half_bf16_of(half_bf16_to_float(a) + half_bf16_to_float(b));
    return half_fp16_of(half_fp16_to_float(a) + half_fp16_to_float(b));
}

static void test_sum(void **state)
{
    (void)state;
    static const struct {
        int bf;
        uint16_t a, b, want;
        const char *what;
    } sums[] = {
        {0, 0x3C00, 0x1000, 0x3C00, "fp16 1 + 2^-11: tie, to even"},
        {0, 0x3C01, 0x1000, 0x3C02, "fp16 (1 + 2^-10) + 2^-11: tie, up"},
        {0, 0x7BFF, 0x7BFF, 0x7C00, "fp16 65504 + 65504: inf"},
        {0, 0x0001, 0x0001, 0x0002, "fp16 subnormals add, not flushed"},
        {0, 0x3C00, 0xBC00, 0x0000, "fp16 1 - 1"},
        {1, 0x3F80, 0x3B80, 0x3F80, "bf16 1 + 2^-8: tie, to even"},
        {1, 0x3F81, 0x3B80, 0x3F82, "bf16 (1 + 2^-7) + 2^-8: tie, up"},
        {1, 0x7F7F, 0x7F7F, 0x7F80, "bf16 largest + largest: inf"},
        {1, 0x7F80, 0xFF80, 0x7FC0, "bf16 inf - inf: the NaN"},
        {1, 0x0001, 0x0001, 0x0002, "bf16 subnormals add, not flushed"},
    };
    for (size_t p = 0; p < npaths; p++) {
        use(paths[p]);
        for (size_t i = 0; i < sizeof sums / sizeof sums[0]; i++) {
            uint16_t got = 0;
            (sums[i].bf ? half_sum_bf16 : half_sum_fp16)(&got, &sums[i].a, &sums[i].b, 1);
            if (got != sums[i].want)
                fail_msg("%s: %s: 0x%04X, want 0x%04X", paths[p], sums[i].what, got, sums[i].want);
        }
    }
    enum { N = 100003 };
    uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *out = malloc(N * sizeof *out);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(out);
    for (int bf = 0; bf < 2; bf++)
        for (size_t p = 0; p < npaths; p++) {
            use(paths[p]);
            for (size_t i = 0; i < N; i++) {
                a[i] = (uint16_t)rnd32();
                b[i] = (uint16_t)rnd32();
            }
            memcpy(out, a, N * sizeof *a);
            (bf ? half_sum_bf16 : half_sum_fp16)(out, out, b, N); /* in place, as Gloo calls it */
            for (size_t i = 0; i < N; i++)
                if (out[i] != sum_ref(bf, a[i], b[i]))
                    fail_msg("%s: %s sum of 0x%04X and 0x%04X at %zu: 0x%04X, want 0x%04X", paths[p],
                             bf ? "bf16" : "fp16", a[i], b[i], i, out[i], sum_ref(bf, a[i], b[i]));
        }
    free(a);
    free(b);
    free(out);
}

int main(int argc, char **argv)
{
    first_path = half_path();
    npaths = half_paths(paths, MAX_PATHS);
    if (npaths > MAX_PATHS)
        return 1;
    if (argc > 1 && strcmp(argv[1], "--exhaustive") == 0) {
        const struct CMUnitTest all[] = {cmocka_unit_test(test_exhaustive)};
        return cmocka_run_group_tests(all, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),        cmocka_unit_test(test_paths),      cmocka_unit_test(test_known),
        cmocka_unit_test(test_widen_values), cmocka_unit_test(test_widen_all),  cmocka_unit_test(test_narrow_sample),
        cmocka_unit_test(test_tails),        cmocka_unit_test(test_fold),       cmocka_unit_test(test_cast_div),
        cmocka_unit_test(test_sum),          cmocka_unit_test(test_misaligned), cmocka_unit_test(test_narrow_mul),
        cmocka_unit_test(test_pair),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
