/* rng.h — psbench's one documented PRNG and the deterministic fills built on
 * it, shared by every role that must produce the same bytes from the same
 * seed on any host: the trainer's data and model initialization, the
 * batch-update server's parameters, the batch-update trainer's inputs.
 *
 * xoshiro256** (Blackman & Vigna), state seeded by splitmix64:
 *   x = seed ^ (stream * 0x9E3779B97F4A7C15)
 *   for k in 0..3: x += 0x9E3779B97F4A7C15; z = x;
 *                  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *                  z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
 *                  s[k] = z ^ (z >> 31)
 * Derived draws:
 *   below(n), n >= 1: unbiased by rejection: t = (2^64 - n) mod n; draw x
 *     until x >= t; return x mod n.
 *   unit(): (x >> 11) * 2^-53, in [0, 1).
 * The stream number keeps independent uses (data, model initialization,
 * per-trainer inputs) apart when they are given the same seed.
 *
 * Fills (each value rounded to float32 once, at the end):
 *   uniform(k): U(-k, k) = k * (2 * unit() - 1).
 *   normal: N(0, 1) by Marsaglia's polar method in double: u = 2 unit() - 1,
 *     v = 2 unit() - 1, s = u*u + v*v, redrawn until 0 < s < 1;
 *     f = sqrt(-2 * ln(s) / s); the pair u*f, v*f (rounded to float) fills
 *     the next two elements (a last odd element uses the first of a pair).
 *     ln is computed here from IEEE basic operations only, not by libm, so
 *     the values are bit-identical on every IEEE-754 host whatever its libm
 *     (rng.c is compiled with -ffp-contract=off: no a*b+c becomes an FMA):
 *       m, e = frexp(s) (m in [1/2, 1)); if m < 0.70710678118654752440:
 *       m = m + m, e = e - 1; t = (m - 1) / (m + 1); t2 = t * t;
 *       p = c12; then p = p * t2 + cj for j = 11 down to 0, where
 *       cj = 1.0 / (2j + 1) rounded to double;
 *       ln(s) = 2 * t * p + e * ln2, ln2 = 0x1.62e42fefa39efp-1,
 *     each operation in that order, left to right, in double.
 */
#ifndef PSBENCH_RNG_H
#define PSBENCH_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct rng {
    uint64_t s[4];
} rng;

/* Streams in use. A batch-update trainer of rank R draws its inputs from
 * stream RNG_STREAM_INPUTS + R; embedding server S initializes its table
 * from RNG_STREAM_EMBEDDING + S; a HybridModel trainer of rank R draws its
 * batches from RNG_STREAM_HYBRID + R; PowerSGD's random Q come from
 * RNG_STREAM_POWERSGD (trainer/powersgd.h), the same on every trainer. */
enum {
    RNG_STREAM_DATA = 1,
    RNG_STREAM_MODEL = 2,
    RNG_STREAM_INPUTS = 1000,
    RNG_STREAM_EMBEDDING = 2000,
    RNG_STREAM_HYBRID = 3000,
    RNG_STREAM_POWERSGD = 4000,
};

void rng_seed(rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(rng *r);
uint64_t rng_below(rng *r, uint64_t n);
double rng_unit(rng *r);

/* p[0..n) ~ U(-bound, bound). */
void rng_fill_uniform(float *p, uint64_t n, double bound, rng *r);
/* p[0..n) ~ N(0, 1). */
void rng_fill_normal(float *p, uint64_t n, rng *r);
/* Which code computes the normals' scales (same bits either way): want 0
 * the portable loop, otherwise AVX2 where the CPU has it. Returns whether
 * AVX2 is used. Decided by the first fill when nobody asked; tests switch. */
bool rng_use_wide(int want);

#endif
