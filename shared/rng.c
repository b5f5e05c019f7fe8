/* rng.c — xoshiro256** and the deterministic fills (see rng.h for the exact
 * definitions, which are part of the contract). */
#include "shared/rng.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define RNG_GOLDEN 0x9E3779B97F4A7C15ull

/* ---- PRNG ------------------------------------------------------------------ */

static uint64_t rng_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += RNG_GOLDEN);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * RNG_GOLDEN);
    for (int k = 0; k < 4; k++)
        r->s[k] = rng_splitmix64(&x);
    /* splitmix64 is a bijection of distinct inputs, so the four words
     * cannot all be zero (the one state xoshiro must avoid). */
    assert(r->s[0] | r->s[1] | r->s[2] | r->s[3]);
}

uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return result;
}

uint64_t rng_below(rng *r, uint64_t n)
{
    assert(n >= 1);
    /* Values below t would make the low residues more likely; t < n, so
     * a draw is rejected with probability < n / 2^64. */
    uint64_t t = (0 - n) % n;
    uint64_t x;
    do
        x = rng_next(r);
    while (x < t);
    return x % n;
}

double rng_unit(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* ---- normals ---------------------------------------------------------------- */

/* The polar method draws pairs (u, v) until 0 < s = u^2 + v^2 < 1, then
 * scales both by f = sqrt(-2 ln(s) / s) (rng.h has the exact definition).
 * It is done in blocks of RNG_BLOCK pairs, in two steps, because the two
 * steps want different code:
 *   1. the draws: candidates are written unconditionally and the index
 *      advances only on acceptance, so the 21% rejections cost no branch
 *      mispredictions;
 *   2. the scales: a straight loop of IEEE operations only (ln by its
 *      range reduction and a fixed polynomial, no libm), which compilers
 *      vectorise; on x86-64 it is compiled a second time for AVX2 and picked
 *      by what the CPU has. Lanes are independent and there is no FMA
 *      (-ffp-contract=off, and the AVX2 clone does not enable FMA), so
 *      both widths give the same bits as the scalar definition.
 * 2,000 normals (the batch-update trainer's randn(20, 100)) took 43 us with
 * the former series of 20 divisions and 7.5 us this way (clang, AVX2, AMD
 * EPYC). */
enum { RNG_BLOCK = 128 };

/* 1/(2j+1) for j = 0..12: ln m = 2 atanh(t) = 2 t sum t^(2j) / (2j+1), with
 * |t| < 0.1716 the first left-out term is below 2^-60 of the sum. */
#define RNG_LN_C(j) (1.0 / (2 * (j) + 1))

/* f[i] = sqrt(-2 ln(s[i]) / s[i]) for 0 < s[i] < 1 (normal doubles: s is a
 * sum of squares of multiples of 2^-52, at least 2^-104). */
static inline __attribute__((always_inline)) void rng_scales_body(const double *restrict s, double *restrict f,
                                                                  size_t n)
{
    uint64_t mbits[RNG_BLOCK], ebits[RNG_BLOCK];
    double mant[RNG_BLOCK], expo[RNG_BLOCK];
    assert(n <= RNG_BLOCK);
    /* frexp by bits: m in [1/2, 1) and, through the 2^52 trick, e + 2^52
     * as a double (exact; s > 0, so the sign bit is clear). */
    for (size_t i = 0; i < n; i++) {
        uint64_t b;
        memcpy(&b, &s[i], sizeof b);
        mbits[i] = (b & 0x000fffffffffffffull) | (1022ull << 52);
        ebits[i] = 0x4330000000000000ull | (b >> 52);
    }
    memcpy(mant, mbits, n * sizeof *mant);
    memcpy(expo, ebits, n * sizeof *expo);
    for (size_t i = 0; i < n; i++) {
        double m = mant[i], e = (expo[i] - 0x1p52) - 1022;
        /* m in [sqrt(1/2), sqrt(2)): lo is 1 or 0, so both lines are exact. */
        double lo = m < 0.70710678118654752440 ? 1.0 : 0.0;
        m = m + m * lo;
        e = e - lo;
        double t = (m - 1) / (m + 1), t2 = t * t;
        double p = RNG_LN_C(12);
        p = p * t2 + RNG_LN_C(11);
        p = p * t2 + RNG_LN_C(10);
        p = p * t2 + RNG_LN_C(9);
        p = p * t2 + RNG_LN_C(8);
        p = p * t2 + RNG_LN_C(7);
        p = p * t2 + RNG_LN_C(6);
        p = p * t2 + RNG_LN_C(5);
        p = p * t2 + RNG_LN_C(4);
        p = p * t2 + RNG_LN_C(3);
        p = p * t2 + RNG_LN_C(2);
        p = p * t2 + RNG_LN_C(1);
        p = p * t2 + RNG_LN_C(0);
        double ln = 2 * t * p + e * 0x1.62e42fefa39efp-1; /* ln 2 */
        f[i] = sqrt(-2 * ln / s[i]);
    }
}

static void rng_scales_base(const double *restrict s, double *restrict f, size_t n)
{
    rng_scales_body(s, f, n);
}

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define RNG_HAVE_AVX2 1
__attribute__((target("avx2"))) static void rng_scales_avx2(const double *restrict s, double *restrict f, size_t n)
{
    rng_scales_body(s, f, n);
}
#endif

/* -1: not decided yet; then 0 (base) or 1 (AVX2). Set once per process
 * (or by a test between fills), read by every fill. */
static int rng_wide_sel = -1;

bool rng_use_wide(int want)
{
#ifdef RNG_HAVE_AVX2
    __builtin_cpu_init();
    bool cpu = __builtin_cpu_supports("avx2");
#else
    bool cpu = false;
#endif
    rng_wide_sel = want == 0 ? 0 : cpu ? 1 : 0;
    return rng_wide_sel == 1;
}

static void rng_scales(const double *restrict s, double *restrict f, size_t n)
{
    if (rng_wide_sel < 0)
        rng_use_wide(-1);
#ifdef RNG_HAVE_AVX2
    if (rng_wide_sel == 1) {
        rng_scales_avx2(s, f, n);
        return;
    }
#endif
    rng_scales_base(s, f, n);
}

void rng_fill_normal(float *p, uint64_t n, rng *r)
{
    double u[RNG_BLOCK], v[RNG_BLOCK], s[RNG_BLOCK], f[RNG_BLOCK];
    uint64_t k = 0;
    while (k < n) {
        uint64_t left = (n - k + 1) / 2; /* pairs still to draw */
        size_t want = left < RNG_BLOCK ? (size_t)left : RNG_BLOCK;
        for (size_t i = 0; i < want;) {
            double a = 2 * rng_unit(r) - 1, b = 2 * rng_unit(r) - 1, q = a * a + b * b;
            u[i] = a;
            v[i] = b;
            s[i] = q;
            i += (q < 1) & (q != 0);
        }
        rng_scales(s, f, want);
        for (size_t i = 0; i < want; i++, k += 2) {
            p[k] = (float)(u[i] * f[i]);
            if (k + 1 < n)
                p[k + 1] = (float)(v[i] * f[i]);
        }
    }
}

void rng_fill_uniform(float *p, uint64_t n, double bound, rng *r)
{
    for (uint64_t k = 0; k < n; k++)
        p[k] = (float)(bound * (2 * rng_unit(r) - 1));
}

