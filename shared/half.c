/* half.c — fp32 <-> fp16 / bf16 over arrays (half.h): the scalar reference,
 * the vector paths (F16C + AVX2; AVX-512 with and without AVX-512 BF16),
 * and the choice among them, made once from cpuid. The vector functions
 * carry target attributes: the rest of the build keeps its flags, and the
 * binary runs on CPUs without these instructions (the scalar path). */
#include "shared/half.h"
#include "shared/half_elem.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define HALF_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ---- types ---- */

static const struct {
    const char *name;
    size_t size;
} half_types[HALF_NTYPES] = {
    [HALF_FP32] = {"fp32", 4},
    [HALF_FP16] = {"fp16", 2},
    [HALF_BF16] = {"bf16", 2},
};

size_t half_type_size(half_type t)
{
    assert(t >= 0 && t < HALF_NTYPES);
    return half_types[t].size;
}

const char *half_type_name(half_type t)
{
    assert(t >= 0 && t < HALF_NTYPES);
    return half_types[t].name;
}

int half_type_parse(const char *name)
{
    for (int t = 0; name && t < HALF_NTYPES; t++)
        if (strcmp(name, half_types[t].name) == 0)
            return t;
    return -1;
}

/* ---- one value: half_elem.h's, the one definition the GPU's kernels share ---- */

psb_fp16 half_fp16_of(float x) { return he_fp16_of(x); }
float half_fp16_to_float(psb_fp16 h) { return he_fp16_to_float(h); }
psb_bf16 half_bf16_of(float x) { return he_bf16_of(x); }
float half_bf16_to_float(psb_bf16 b) { return he_bf16_to_float(b); }

/* ---- paths ---- */

typedef struct half_ops {
    const char *name;
    void (*to_fp16)(uint16_t *dst, const float *src, size_t n, float s);
    void (*from_fp16)(float *dst, const uint16_t *src, size_t n);
    void (*to_bf16)(uint16_t *dst, const float *src, size_t n, float s);
    void (*from_bf16)(float *dst, const uint16_t *src, size_t n);
    void (*fold_fp16)(float *acc, const uint16_t *src, size_t n);
    void (*fold_bf16)(float *acc, const uint16_t *src, size_t n);
    /* narrow(float(narrow(src[i])) / d), in registers */
    void (*div_fp16)(uint16_t *dst, const float *src, size_t n, float d);
    void (*div_bf16)(uint16_t *dst, const float *src, size_t n, float d);
    /* half_pair_mean / half_pair_sum (half.h) fused in registers; NULL:
     * the path's own conversions over chunks on the stack */
    void (*pair_mean_fp16)(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n, float s);
    void (*pair_mean_bf16)(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n, float s);
    void (*pair_sum_fp16)(float *dst, const uint16_t *a, const uint16_t *b, size_t n);
    void (*pair_sum_bf16)(float *dst, const uint16_t *a, const uint16_t *b, size_t n);
    bool (*usable)(void);
} half_ops;

/* The scalar path: the reference, and every vector path's tail. Each
 * narrowing multiplies by s first; s = 1 changes no bits of any input
 * (x * 1 is x, a signalling NaN made quiet, which narrows the same). */
/* Element i of an array at any address (half.h: "any alignment"): a
 * narrow push's payload follows its header in a server's input buffer, at
 * whatever offset the header left. memcpy is one load or store on x86. */
static inline float half_ld_f32(const float *p, size_t i)
{
    float v;
    memcpy(&v, (const char *)p + i * sizeof v, sizeof v);
    return v;
}
static inline void half_st_f32(float *p, size_t i, float v) { memcpy((char *)p + i * sizeof v, &v, sizeof v); }
static inline uint16_t half_ld_u16(const uint16_t *p, size_t i)
{
    uint16_t v;
    memcpy(&v, (const char *)p + i * sizeof v, sizeof v);
    return v;
}
static inline void half_st_u16(uint16_t *p, size_t i, uint16_t v) { memcpy((char *)p + i * sizeof v, &v, sizeof v); }

static void half_scalar_to_fp16(uint16_t *dst, const float *src, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        half_st_u16(dst, i, he_fp16_of(half_ld_f32(src, i) * s));
}

static void half_scalar_from_fp16(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        half_st_f32(dst, i, he_fp16_to_float(half_ld_u16(src, i)));
}

static void half_scalar_to_bf16(uint16_t *dst, const float *src, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        half_st_u16(dst, i, he_bf16_of(half_ld_f32(src, i) * s));
}

static void half_scalar_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        half_st_f32(dst, i, he_bf16_to_float(half_ld_u16(src, i)));
}

static void half_scalar_fold_fp16(float *acc, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        half_st_f32(acc, i, half_ld_f32(acc, i) + he_fp16_to_float(half_ld_u16(src, i)));
}

static void half_scalar_fold_bf16(float *acc, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        half_st_f32(acc, i, half_ld_f32(acc, i) + he_bf16_to_float(half_ld_u16(src, i)));
}

static void half_scalar_div_fp16(uint16_t *dst, const float *src, size_t n, float d)
{
    for (size_t i = 0; i < n; i++)
        half_st_u16(dst, i, he_fp16_of(he_fp16_to_float(he_fp16_of(half_ld_f32(src, i))) / d));
}

static void half_scalar_div_bf16(uint16_t *dst, const float *src, size_t n, float d)
{
    for (size_t i = 0; i < n; i++)
        half_st_u16(dst, i, he_bf16_of(he_bf16_to_float(he_bf16_of(half_ld_f32(src, i))) / d));
}

/* The pair folds on one element each: the reference. */
static void half_scalar_pair_mean(int bf, uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        half_st_u16(dst, i, he_narrow(bf, (he_widen(bf, half_ld_u16(a, i)) + he_widen(bf, half_ld_u16(b, i))) * s));
}

static void half_scalar_pair_sum(int bf, float *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        half_st_f32(dst, i, he_widen(bf, half_ld_u16(a, i)) + he_widen(bf, half_ld_u16(b, i)));
}

static void half_scalar_pair_mean_fp16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n, float s)
{
    half_scalar_pair_mean(0, dst, a, b, n, s);
}
static void half_scalar_pair_mean_bf16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n, float s)
{
    half_scalar_pair_mean(1, dst, a, b, n, s);
}
static void half_scalar_pair_sum_fp16(float *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    half_scalar_pair_sum(0, dst, a, b, n);
}
static void half_scalar_pair_sum_bf16(float *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    half_scalar_pair_sum(1, dst, a, b, n);
}

static bool half_scalar_usable(void) { return true; }

#ifdef HALF_X86

/* What the CPU and the OS offer: cpuid's feature bits, and XCR0's say that
 * the OS saves the YMM (and ZMM) registers. */
typedef struct half_cpu {
    bool avx2_f16c, avx512, avx512_bf16;
} half_cpu;

static half_cpu half_cpu_probe(void)
{
    half_cpu c = {0};
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d))
        return c;
    bool f16c = cx & (1u << 29), osxsave = cx & (1u << 27), avx = cx & (1u << 28);
    if (!osxsave || !avx)
        return c;
    uint32_t xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    bool ymm = (xlo & 0x6) == 0x6, zmm = (xlo & 0xE6) == 0xE6;
    if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d))
        return c;
    bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
    bool bf16 = false;
    if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &cx, &d))
        bf16 = a & (1u << 5);
    c.avx2_f16c = ymm && avx2 && f16c;
    c.avx512 = c.avx2_f16c && zmm && avx512f && avx512bw && avx512vl;
    c.avx512_bf16 = c.avx512 && bf16;
    return c;
}

static bool half_avx2_usable(void) { return half_cpu_probe().avx2_f16c; }
static bool half_avx512_usable(void) { return half_cpu_probe().avx512; }
static bool half_avx512bf16_usable(void) { return half_cpu_probe().avx512_bf16; }

/* ---- F16C + AVX2: 8 lanes ---- */
#define HALF_AVX2 __attribute__((target("avx2,f16c")))

/* NaN lanes made the quiet NaN with the lane's sign and no payload, which
 * vcvtps2ph narrows to sign | 0x7E00 as the reference does (on its own it
 * keeps the payload's top bits). */
HALF_AVX2 static __m256 half_avx2_fp16_nan(__m256 x)
{
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_ps(x, _mm256_or_ps(_mm256_and_ps(x, sign), qnan), nan);
}

HALF_AVX2 static __m128i half_avx2_fp16(__m256 x)
{
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) /* rare: the fix off the common path */
        x = half_avx2_fp16_nan(x);
    return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

HALF_AVX2 static void half_avx2_to_fp16(uint16_t *dst, const float *src, size_t n, float s)
{
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    if (s == 1.0f) /* the plain cast: no multiply (x * 1 would change no bits) */
        for (; i + 16 <= n; i += 16) {
            __m128i a = half_avx2_fp16(_mm256_loadu_ps(src + i));
            __m128i b = half_avx2_fp16(_mm256_loadu_ps(src + i + 8));
            _mm_storeu_si128((__m128i *)(dst + i), a);
            _mm_storeu_si128((__m128i *)(dst + i + 8), b);
        }
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), half_avx2_fp16(_mm256_mul_ps(_mm256_loadu_ps(src + i), vs)));
    half_scalar_to_fp16(dst + i, src + i, n - i, s);
}

HALF_AVX2 static void half_avx2_from_fp16(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) { /* two vectors a turn: the converts overlap */
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        _mm256_storeu_ps(dst + i, a);
        _mm256_storeu_ps(dst + i + 8, b);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    half_scalar_from_fp16(dst + i, src + i, n - i);
}

/* The reference's rounding on the bits, NaN lanes 0x7FC0; 32-bit results
 * (all <= 0xFFFF) in the low halves. */
HALF_AVX2 static __m256i half_avx2_bf16_round(__m256 x)
{
    const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
    __m256i u = _mm256_castps_si256(x);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), odd), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
}

HALF_AVX2 static void half_avx2_to_bf16(uint16_t *dst, const float *src, size_t n, float s)
{
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    if (s == 1.0f) /* as half_avx2_to_fp16 */
        for (; i + 16 <= n; i += 16) {
            __m256i lo = half_avx2_bf16_round(_mm256_loadu_ps(src + i));
            __m256i hi = half_avx2_bf16_round(_mm256_loadu_ps(src + i + 8));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
        }
    for (; i + 16 <= n; i += 16) {
        __m256i lo = half_avx2_bf16_round(_mm256_mul_ps(_mm256_loadu_ps(src + i), vs));
        __m256i hi = half_avx2_bf16_round(_mm256_mul_ps(_mm256_loadu_ps(src + i + 8), vs));
        /* packus works per 128-bit lane: [lo0-3 hi0-3 | lo4-7 hi4-7];
         * the permute puts the four quarters in order. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    half_scalar_to_bf16(dst + i, src + i, n - i, s);
}

HALF_AVX2 static void half_avx2_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
    }
    half_scalar_from_bf16(dst + i, src + i, n - i);
}

HALF_AVX2 static void half_avx2_fold_fp16(float *acc, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), a));
        _mm256_storeu_ps(acc + i + 8, _mm256_add_ps(_mm256_loadu_ps(acc + i + 8), b));
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
    }
    half_scalar_fold_fp16(acc + i, src + i, n - i);
}

HALF_AVX2 static void half_avx2_fold_bf16(float *acc, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
    }
    half_scalar_fold_bf16(acc + i, src + i, n - i);
}

HALF_AVX2 static __m256 half_avx2_fp16_round(__m256 x)
{
    return _mm256_cvtph_ps(_mm256_cvtps_ph(half_avx2_fp16_nan(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

HALF_AVX2 static void half_avx2_div_fp16(uint16_t *dst, const float *src, size_t n, float d)
{
    const __m256 vd = _mm256_set1_ps(d);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 q = _mm256_div_ps(half_avx2_fp16_round(_mm256_loadu_ps(src + i)), vd);
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(half_avx2_fp16_nan(q), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    half_scalar_div_fp16(dst + i, src + i, n - i, d);
}

/* bf16 rounded and widened back: the value the narrow type holds */
HALF_AVX2 static __m256 half_avx2_bf16_value(__m256 x)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(half_avx2_bf16_round(x), 16));
}

HALF_AVX2 static void half_avx2_div_bf16(uint16_t *dst, const float *src, size_t n, float d)
{
    const __m256 vd = _mm256_set1_ps(d);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = half_avx2_bf16_round(_mm256_div_ps(half_avx2_bf16_value(_mm256_loadu_ps(src + i)), vd));
        __m256i hi = half_avx2_bf16_round(_mm256_div_ps(half_avx2_bf16_value(_mm256_loadu_ps(src + i + 8)), vd));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
    }
    half_scalar_div_bf16(dst + i, src + i, n - i, d);
}

/* ---- AVX-512 (F, BW, VL; F16C on zmm): 16 lanes ---- */
#define HALF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define HALF_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c")))

HALF_AVX512 static __mmask16 half_avx512_nan(__m512 x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); }

/* As half_avx2_fp16_nan: NaN lanes the signed quiet NaN without payload,
 * then vcvtps2ph. */
HALF_AVX512 static __m256i half_avx512_fp16(__m512 x)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u), qnan = _mm512_set1_epi32(0x7FC00000);
    __mmask16 nan = half_avx512_nan(x);
    if (nan) { /* rare: the fix stays off the common path */
        __m512i u = _mm512_castps_si512(x);
        u = _mm512_mask_mov_epi32(u, nan, _mm512_or_si512(_mm512_and_si512(u, sign), qnan));
        x = _mm512_castsi512_ps(u);
    }
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

HALF_AVX512 static void half_avx512_to_fp16(uint16_t *dst, const float *src, size_t n, float s)
{
    const __m512 vs = _mm512_set1_ps(s);
    size_t i = 0;
    if (s == 1.0f) /* the plain cast: no multiply (x * 1 would change no bits) */
        for (; i + 32 <= n; i += 32) {
            __m256i a = half_avx512_fp16(_mm512_loadu_ps(src + i));
            __m256i b = half_avx512_fp16(_mm512_loadu_ps(src + i + 16));
            _mm256_storeu_si256((__m256i *)(dst + i), a);
            _mm256_storeu_si256((__m256i *)(dst + i + 16), b);
        }
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), half_avx512_fp16(_mm512_mul_ps(_mm512_loadu_ps(src + i), vs)));
    half_scalar_to_fp16(dst + i, src + i, n - i, s);
}

HALF_AVX512 static void half_avx512_div_fp16(uint16_t *dst, const float *src, size_t n, float d)
{
    const __m512 vd = _mm512_set1_ps(d);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 c = _mm512_cvtph_ps(half_avx512_fp16(_mm512_loadu_ps(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), half_avx512_fp16(_mm512_div_ps(c, vd)));
    }
    half_scalar_div_fp16(dst + i, src + i, n - i, d);
}

HALF_AVX512 static void half_avx512_from_fp16(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* two vectors a turn: the converts overlap */
        __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, a);
        _mm512_storeu_ps(dst + i + 16, b);
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    half_scalar_from_fp16(dst + i, src + i, n - i);
}

/* The reference's rounding on the bits, NaN lanes 0x7FC0, in 32-bit lanes. */
HALF_AVX512 static __m512i half_avx512_bf16_round32(__m512 x)
{
    const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, bias), odd), 16);
    return _mm512_mask_mov_epi32(r, half_avx512_nan(x), _mm512_set1_epi32(0x7FC0));
}

/* The same, narrowed to 16 bits. */
HALF_AVX512 static __m256i half_avx512_bf16_round(__m512 x)
{
    return _mm512_cvtepi32_epi16(half_avx512_bf16_round32(x));
}

HALF_AVX512 static void half_avx512_to_bf16(uint16_t *dst, const float *src, size_t n, float s)
{
    const __m512 vs = _mm512_set1_ps(s);
    size_t i = 0;
    if (s == 1.0f) /* as half_avx512_to_fp16 */
        for (; i + 32 <= n; i += 32) {
            __m256i a = half_avx512_bf16_round(_mm512_loadu_ps(src + i));
            __m256i b = half_avx512_bf16_round(_mm512_loadu_ps(src + i + 16));
            _mm256_storeu_si256((__m256i *)(dst + i), a);
            _mm256_storeu_si256((__m256i *)(dst + i + 16), b);
        }
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), half_avx512_bf16_round(_mm512_mul_ps(_mm512_loadu_ps(src + i), vs)));
    half_scalar_to_bf16(dst + i, src + i, n - i, s);
}

HALF_AVX512 static void half_avx512_div_bf16(uint16_t *dst, const float *src, size_t n, float d)
{
    const __m512 vd = _mm512_set1_ps(d);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i r = half_avx512_bf16_round32(_mm512_loadu_ps(src + i));
        __m512 c = _mm512_castsi512_ps(_mm512_slli_epi32(r, 16));
        _mm256_storeu_si256((__m256i *)(dst + i), half_avx512_bf16_round(_mm512_div_ps(c, vd)));
    }
    half_scalar_div_bf16(dst + i, src + i, n - i, d);
}

/* vcvtneps2bf16 rounds to nearest even as the reference does, but reads an
 * fp32 subnormal as zero and keeps a NaN's sign and payload. A vector with
 * any such lane (exponent all zeros or all ones, mantissa not zero: rare in
 * gradients) takes the integer rounding instead; infinities need nothing. */
HALF_AVX512BF16 static __m256i half_avx512bf16_round(__m512 x)
{
    const __m512i expo = _mm512_set1_epi32(0x7F800000), mant = _mm512_set1_epi32(0x007FFFFF);
    __m512i u = _mm512_castps_si512(x), e = _mm512_and_si512(u, expo);
    __mmask16 odd = (_mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()) | _mm512_cmpeq_epi32_mask(e, expo)) &
                    _mm512_test_epi32_mask(u, mant);
    if (odd)
        return half_avx512_bf16_round(x);
    return (__m256i)_mm512_cvtneps_pbh(x);
}

HALF_AVX512BF16 static void half_avx512bf16_to_bf16(uint16_t *dst, const float *src, size_t n, float s)
{
    const __m512 vs = _mm512_set1_ps(s);
    size_t i = 0;
    if (s == 1.0f) /* as half_avx512_to_fp16 */
        for (; i + 32 <= n; i += 32) {
            __m256i a = half_avx512bf16_round(_mm512_loadu_ps(src + i));
            __m256i b = half_avx512bf16_round(_mm512_loadu_ps(src + i + 16));
            _mm256_storeu_si256((__m256i *)(dst + i), a);
            _mm256_storeu_si256((__m256i *)(dst + i + 16), b);
        }
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), half_avx512bf16_round(_mm512_mul_ps(_mm512_loadu_ps(src + i), vs)));
    half_scalar_to_bf16(dst + i, src + i, n - i, s);
}

HALF_AVX512 static void half_avx512_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(a, 16));
        _mm512_storeu_si512(dst + i + 16, _mm512_slli_epi32(b, 16));
    }
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
    }
    half_scalar_from_bf16(dst + i, src + i, n - i);
}

HALF_AVX512 static void half_avx512_fold_fp16(float *acc, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), a));
        _mm512_storeu_ps(acc + i + 16, _mm512_add_ps(_mm512_loadu_ps(acc + i + 16), b));
    }
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), v));
    }
    half_scalar_fold_fp16(acc + i, src + i, n - i);
}

HALF_AVX512 static void half_avx512_fold_bf16(float *acc, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        __m512 va = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16)), vb = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
        _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), va));
        _mm512_storeu_ps(acc + i + 16, _mm512_add_ps(_mm512_loadu_ps(acc + i + 16), vb));
    }
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), v));
    }
    half_scalar_fold_bf16(acc + i, src + i, n - i);
}

/* The pair folds in registers: both widened, added, (scaled and
 * narrowed), one pass over memory. */
HALF_AVX512 static __m512 half_avx512_ld_fp16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
HALF_AVX512 static __m512 half_avx512_ld_bf16(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

HALF_AVX512 static void half_avx512_pair_mean_fp16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n,
                                                   float s)
{
    const __m512 vs = _mm512_set1_ps(s);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 m = _mm512_mul_ps(_mm512_add_ps(half_avx512_ld_fp16(a + i), half_avx512_ld_fp16(b + i)), vs);
        _mm256_storeu_si256((__m256i *)(dst + i), half_avx512_fp16(m));
    }
    half_scalar_pair_mean(0, dst + i, a + i, b + i, n - i, s);
}

HALF_AVX512 static void half_avx512_pair_mean_bf16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n,
                                                   float s)
{
    const __m512 vs = _mm512_set1_ps(s);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 m = _mm512_mul_ps(_mm512_add_ps(half_avx512_ld_bf16(a + i), half_avx512_ld_bf16(b + i)), vs);
        _mm256_storeu_si256((__m256i *)(dst + i), half_avx512_bf16_round(m));
    }
    half_scalar_pair_mean(1, dst + i, a + i, b + i, n - i, s);
}

HALF_AVX512 static void half_avx512_pair_sum_fp16(float *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_add_ps(half_avx512_ld_fp16(a + i), half_avx512_ld_fp16(b + i)));
    half_scalar_pair_sum(0, dst + i, a + i, b + i, n - i);
}

HALF_AVX512 static void half_avx512_pair_sum_bf16(float *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_add_ps(half_avx512_ld_bf16(a + i), half_avx512_ld_bf16(b + i)));
    half_scalar_pair_sum(1, dst + i, a + i, b + i, n - i);
}

#endif /* HALF_X86 */

/* Scalar first; the default is the last one this CPU can run. avx512bf16
 * comes before avx512: half-bench measured vcvtneps2bf16 (with its
 * subnormal test and NaN fix) no faster than the integer rounding from
 * memory and about 0.65 of it from L2, so where both run, avx512 is the
 * default and avx512bf16 stays a path to measure and test. */
#define HALF_OPS(nm, p, to_bf16_fn, ok)                                                                                \
    .name = nm, .to_fp16 = p##_to_fp16, .from_fp16 = p##_from_fp16, .to_bf16 = to_bf16_fn, .from_bf16 = p##_from_bf16, \
    .fold_fp16 = p##_fold_fp16, .fold_bf16 = p##_fold_bf16, .div_fp16 = p##_div_fp16, .div_bf16 = p##_div_bf16,        \
    .usable = ok
/* A path's fused pair folds (scalar's are the reference, avx2's the
 * chunked default: see half_pair_mean). */
#define HALF_PAIRS(p)                                                                                                  \
    .pair_mean_fp16 = p##_pair_mean_fp16, .pair_mean_bf16 = p##_pair_mean_bf16, .pair_sum_fp16 = p##_pair_sum_fp16,    \
    .pair_sum_bf16 = p##_pair_sum_bf16
static const half_ops half_table[] = {
    {HALF_OPS("scalar", half_scalar, half_scalar_to_bf16, half_scalar_usable), HALF_PAIRS(half_scalar)},
#ifdef HALF_X86
    {HALF_OPS("avx2+f16c", half_avx2, half_avx2_to_bf16, half_avx2_usable)},
    {HALF_OPS("avx512bf16", half_avx512, half_avx512bf16_to_bf16, half_avx512bf16_usable), HALF_PAIRS(half_avx512)},
    {HALF_OPS("avx512", half_avx512, half_avx512_to_bf16, half_avx512_usable), HALF_PAIRS(half_avx512)},
#endif
};
#define HALF_NPATHS (sizeof half_table / sizeof half_table[0])

static pthread_once_t half_once = PTHREAD_ONCE_INIT;
static const half_ops *half_cur;

static void half_choose(void)
{
    const char *env = getenv("PSBENCH_HALF_SCALAR");
    half_cur = &half_table[0];
    if (env && strcmp(env, "1") == 0)
        return;
    for (size_t p = 1; p < HALF_NPATHS; p++)
        if (half_table[p].usable())
            half_cur = &half_table[p];
}

static const half_ops *half_ops_get(void)
{
    pthread_once(&half_once, half_choose);
    return half_cur;
}

const char *half_path(void) { return half_ops_get()->name; }

size_t half_paths(const char **names, size_t max)
{
    size_t k = 0;
    for (size_t p = 0; p < HALF_NPATHS; p++)
        if (half_table[p].usable()) {
            if (k < max)
                names[k] = half_table[p].name;
            k++;
        }
    return k;
}

int half_set_path(const char *name)
{
    half_ops_get(); /* the once has run: it cannot overwrite this choice later */
    for (size_t p = 0; p < HALF_NPATHS; p++)
        if (strcmp(half_table[p].name, name) == 0 && half_table[p].usable()) {
            half_cur = &half_table[p];
            return 0;
        }
    return -1;
}

/* ---- arrays ---- */

void half_to_fp16(psb_fp16 *dst, const float *src, size_t n) { half_ops_get()->to_fp16(dst, src, n, 1.0f); }
void half_from_fp16(float *dst, const psb_fp16 *src, size_t n) { half_ops_get()->from_fp16(dst, src, n); }
void half_to_bf16(psb_bf16 *dst, const float *src, size_t n) { half_ops_get()->to_bf16(dst, src, n, 1.0f); }
void half_from_bf16(float *dst, const psb_bf16 *src, size_t n) { half_ops_get()->from_bf16(dst, src, n); }
void half_fold_fp16(float *acc, const psb_fp16 *src, size_t n) { half_ops_get()->fold_fp16(acc, src, n); }

void half_narrow(half_type t, void *dst, const float *src, size_t n)
{
    assert(t == HALF_FP16 || t == HALF_BF16);
    if (t == HALF_FP16)
        half_to_fp16(dst, src, n);
    else
        half_to_bf16(dst, src, n);
}

void half_widen(half_type t, float *dst, const void *src, size_t n)
{
    assert(t == HALF_FP16 || t == HALF_BF16);
    if (t == HALF_FP16)
        half_from_fp16(dst, src, n);
    else
        half_from_bf16(dst, src, n);
}
void half_fold_bf16(float *acc, const psb_bf16 *src, size_t n) { half_ops_get()->fold_bf16(acc, src, n); }

/* A NaN scale would make which NaN a lane keeps (and so an fp16 NaN's
 * sign) depend on the operand order of the multiply. */
void half_to_fp16_scaled(psb_fp16 *dst, const float *src, size_t n, float s)
{
    assert(!isnan(s));
    half_ops_get()->to_fp16(dst, src, n, s);
}

void half_to_bf16_scaled(psb_bf16 *dst, const float *src, size_t n, float s)
{
    assert(!isnan(s));
    half_ops_get()->to_bf16(dst, src, n, s);
}

void half_to_fp16_div(psb_fp16 *dst, const float *src, size_t n, float d) { half_ops_get()->div_fp16(dst, src, n, d); }
void half_to_bf16_div(psb_bf16 *dst, const float *src, size_t n, float d) { half_ops_get()->div_bf16(dst, src, n, d); }

/* Chunks on the stack, so that the sums use the vector conversions; a
 * chunk is read whole before it is written, which lets dst be a or b. */
#define HALF_SUM_CHUNK 256

void half_sum_fp16(psb_fp16 *dst, const psb_fp16 *a, const psb_fp16 *b, size_t n)
{
    float x[HALF_SUM_CHUNK], y[HALF_SUM_CHUNK];
    for (size_t off = 0; off < n; off += HALF_SUM_CHUNK) {
        size_t k = n - off < HALF_SUM_CHUNK ? n - off : HALF_SUM_CHUNK;
        half_from_fp16(x, a + off, k);
        half_from_fp16(y, b + off, k);
        for (size_t i = 0; i < k; i++)
            x[i] += y[i];
        half_to_fp16(dst + off, x, k);
    }
}

void half_pair_mean(half_type t, uint16_t *dst, const void *a, const void *b, size_t n, float s)
{
    assert(t == HALF_FP16 || t == HALF_BF16);
    assert(!isnan(s));
    const half_ops *o = half_ops_get();
    const uint16_t *x = a, *y = b;
    void (*fused)(uint16_t *, const uint16_t *, const uint16_t *, size_t, float) =
        t == HALF_FP16 ? o->pair_mean_fp16 : o->pair_mean_bf16;
    if (fused) {
        fused(dst, x, y, n, s);
        return;
    }
    float u[HALF_SUM_CHUNK], v[HALF_SUM_CHUNK];
    for (size_t off = 0; off < n; off += HALF_SUM_CHUNK) {
        size_t k = n - off < HALF_SUM_CHUNK ? n - off : HALF_SUM_CHUNK;
        half_widen(t, u, x + off, k);
        half_widen(t, v, y + off, k);
        for (size_t i = 0; i < k; i++)
            u[i] = u[i] + v[i];
        (t == HALF_FP16 ? o->to_fp16 : o->to_bf16)(dst + off, u, k, s);
    }
}

void half_pair_sum(half_type t, float *dst, const void *a, const void *b, size_t n)
{
    assert(t == HALF_FP16 || t == HALF_BF16);
    const half_ops *o = half_ops_get();
    const uint16_t *x = a, *y = b;
    void (*fused)(float *, const uint16_t *, const uint16_t *, size_t) =
        t == HALF_FP16 ? o->pair_sum_fp16 : o->pair_sum_bf16;
    if (fused) {
        fused(dst, x, y, n);
        return;
    }
    float u[HALF_SUM_CHUNK], v[HALF_SUM_CHUNK];
    for (size_t off = 0; off < n; off += HALF_SUM_CHUNK) {
        size_t k = n - off < HALF_SUM_CHUNK ? n - off : HALF_SUM_CHUNK;
        half_widen(t, u, x + off, k);
        half_widen(t, v, y + off, k);
        for (size_t i = 0; i < k; i++)
            half_st_f32(dst + off, i, u[i] + v[i]);
    }
}

void half_sum_bf16(psb_bf16 *dst, const psb_bf16 *a, const psb_bf16 *b, size_t n)
{
    float x[HALF_SUM_CHUNK], y[HALF_SUM_CHUNK];
    for (size_t off = 0; off < n; off += HALF_SUM_CHUNK) {
        size_t k = n - off < HALF_SUM_CHUNK ? n - off : HALF_SUM_CHUNK;
        half_from_bf16(x, a + off, k);
        half_from_bf16(y, b + off, k);
        for (size_t i = 0; i < k; i++)
            x[i] += y[i];
        half_to_bf16(dst + off, x, k);
    }
}
