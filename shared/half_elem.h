/* half_elem.h — one value's fp32 <-> fp16 / bf16 conversion, the reference
 * semantics half.h states, as functions a CPU and a GPU both compile: every
 * function is `static inline`, and `__host__ __device__` under nvcc. half.c's
 * scalar path (the reference its vector paths are tested against) is these
 * functions; so are the CUDA kernels that compress a trainer's buckets on
 * its GPU (trainer/cuda/kernels.cu: trk_narrow_mul, trk_widen) and the fake
 * GPU's host loops standing in for them. One definition, so that a CPU, the
 * fake GPU and a GPU narrow every value to the same bits.
 *
 * Everything is done on the integer bits, so no result depends on a rounding
 * mode or an FTZ/DAZ setting, on either side. */
#ifndef PSBENCH_HALF_ELEM_H
#define PSBENCH_HALF_ELEM_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define HE_FN static inline __host__ __device__
#else
#define HE_FN static inline
#endif

HE_FN uint32_t he_bits(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

HE_FN float he_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* fp32 -> fp16: IEEE round to nearest even, subnormals kept, overflow to
 * ±inf, every NaN to sign | 0x7E00. The magnitude is classified by its fp32
 * bits, then rounded to nearest even on the bits fp16 drops. */
HE_FN uint16_t he_fp16_of(float x)
{
    uint32_t u = he_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFF;
    if (a > 0x7F800000) /* NaN: the quiet NaN, sign kept, payload dropped */
        return sign | 0x7E00;
    /* 65520 (0x477FF000) lies halfway between 65504, the largest fp16 (odd
     * mantissa), and 65536: ties to even take it, and all above, to inf. */
    if (a >= 0x477FF000)
        return sign | 0x7C00;
    if (a >= 0x38800000) { /* >= 2^-14: a normal fp16 */
        /* Rebias the exponent (127 - 15 = 112) in place; a carry out of the
         * mantissa correctly moves to the next binade (or to 0x7C00, which
         * the test above keeps from happening). */
        uint32_t r = a - (112u << 23);
        r += 0xFFF + ((r >> 13) & 1);
        return sign | (uint16_t)(r >> 13);
    }
    /* An fp16 subnormal, or zero: units of 2^-24. Below 2^-25 (e < 102)
     * everything rounds to zero; 2^-25 itself ties to the even zero. */
    uint32_t e = a >> 23;
    if (e < 102)
        return sign;
    uint32_t m = (a & 0x7FFFFF) | 0x800000; /* value = m * 2^(e - 150) */
    uint32_t shift = 126 - e;               /* 14..24: value / 2^-24 = m >> shift */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    q += rem > halfway || (rem == halfway && (q & 1));
    return sign | (uint16_t)q; /* q = 0x400 (rounded up to 2^-14) is the right encoding */
}

/* fp16 -> fp32, exact; a NaN keeps its sign and payload and comes out quiet. */
HE_FN float he_fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) /* inf, or a NaN made quiet (bit 22), sign and payload kept */
        return he_float(sign | 0x7F800000 | (m << 13) | (m ? 0x400000 : 0));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in fp32 (a normal) */
        if (m == 0)
            return he_float(sign);
        /* normalise on the bits (no float arithmetic: a GPU flushing
         * subnormal operands would not matter here, but DAZ on a CPU
         * thread must not either): m = 1.f * 2^k, k = 0..9 */
        uint32_t k = 0;
        while (!(m & 0x400)) {
            m <<= 1;
            k++;
        }
        return he_float(sign | ((113 - k) << 23) | ((m & 0x3FF) << 13));
    }
    return he_float(sign | ((e + 112) << 23) | (m << 13));
}

/* fp32 -> bf16: every NaN to 0x7FC0 (sign dropped), otherwise round to
 * nearest even on the bits (subnormals rounded, never flushed). */
HE_FN uint16_t he_bf16_of(float x)
{
    uint32_t u = he_bits(x);
    if ((u & 0x7FFFFFFF) > 0x7F800000)
        return 0x7FC0;
    /* Round to nearest even on the 16 bits dropped: add just under half an
     * ulp, plus one when the kept part is odd, and truncate. */
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* bf16 -> fp32: the 16 bits shifted up. */
HE_FN float he_bf16_to_float(uint16_t b) { return he_float((uint32_t)b << 16); }

/* By type: bf != 0 for bf16, else fp16. */
HE_FN uint16_t he_narrow(int bf, float x) { return bf ? he_bf16_of(x) : he_fp16_of(x); }
HE_FN float he_widen(int bf, uint16_t h) { return bf ? he_bf16_to_float(h) : he_fp16_to_float(h); }

/* PyTorch's _compress_hook on a CUDA bucket, one element: the cast, then
 * ATen's CUDA division by a CPU scalar, which multiplies by its fp32
 * reciprocal (div_true_kernel_cuda: a * (1 / d) in opmath, rounded back):
 * narrow(float(narrow(x)) * inv), inv = 1.0f / d. (The CPU kernel divides;
 * half.h says where the two differ.) */
HE_FN uint16_t he_narrow_mul(int bf, float x, float inv) { return he_narrow(bf, he_widen(bf, he_narrow(bf, x)) * inv); }

#endif
