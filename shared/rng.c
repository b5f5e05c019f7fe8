/* rng.c — xoshiro256** and the deterministic fills (see rng.h for the exact
 * definitions, which are part of the contract). */
#include "shared/rng.h"

#include <assert.h>
#include <math.h>

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

/* ln(x) for finite x > 0 from IEEE basic operations only (see rng.h):
 * x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(t),
 * t = (m-1)/(m+1), |t| < 0.172; 20 odd terms leave < 1e-30 of the series. */
static double rng_ln(double x)
{
    assert(x > 0 && isfinite(x));
    int e;
    double m = frexp(x, &e);
    if (m < 0.70710678118654752440) {
        m *= 2;
        e -= 1;
    }
    double t = (m - 1) / (m + 1);
    double t2 = t * t, term = t, sum = 0;
    for (int k = 1; k < 40; k += 2) {
        sum += term / k;
        term *= t2;
    }
    return 2 * sum + e * 0x1.62e42fefa39efp-1; /* ln 2 */
}

void rng_fill_normal(float *p, uint64_t n, rng *r)
{
    for (uint64_t k = 0; k < n; k += 2) {
        double u, v, s;
        do {
            u = 2 * rng_unit(r) - 1;
            v = 2 * rng_unit(r) - 1;
            s = u * u + v * v;
        } while (s >= 1 || s == 0);
        double f = sqrt(-2 * rng_ln(s) / s);
        p[k] = (float)(u * f);
        if (k + 1 < n)
            p[k + 1] = (float)(v * f);
    }
}

void rng_fill_uniform(float *p, uint64_t n, double bound, rng *r)
{
    for (uint64_t k = 0; k < n; k++)
        p[k] = (float)(bound * (2 * rng_unit(r) - 1));
}

