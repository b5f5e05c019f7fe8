/* half.h — fp32 <-> fp16 and fp32 <-> bf16 on the CPU, over arrays: the
 * foundation of `--compress fp16|bf16` (issue 43). A trainer narrows its
 * gradients before the wire, a server folds narrow pushes into an fp32
 * accumulator and narrows the mean it answers with, an allreduce hook does
 * PyTorch's cast-then-divide. Every result is bit-equal to PyTorch's CPU
 * scalar conversions:
 *
 *   fp32 -> fp16  c10/util/Half.h fp16_ieee_from_fp32_value: IEEE round to
 *                 nearest even, fp16 subnormals kept (no flush), overflow
 *                 to ±inf, every NaN to sign | 0x7E00 (payload dropped).
 *   fp16 -> fp32  fp16_ieee_to_fp32_value: exact; a NaN keeps its sign and
 *                 payload and comes out quiet (its top mantissa bit set,
 *                 as an x86 multiply quiets it).
 *   fp32 -> bf16  c10/util/BFloat16.h round_to_nearest_even: every NaN to
 *                 0x7FC0 (sign dropped), otherwise round to nearest even on
 *                 the bits (fp32 subnormals rounded, never flushed; the
 *                 largest finite values round to ±inf).
 *   bf16 -> fp32  the 16 bits shifted up, nothing else.
 *
 * (PyTorch's own vectorised CPU copies use vcvtps2ph, which keeps a NaN's
 * payload bits: for NaN inputs its bits depend on its path; this library
 * follows the scalar functions above on every path.)
 *
 * A scalar path is always there and is the reference; vector paths (F16C
 * with AVX2, AVX-512 BF16) are chosen once, at the first call, from what
 * the CPU has, and are tested bit-equal to it over every input pattern.
 * PSBENCH_HALF_SCALAR=1 in the environment forces the scalar path;
 * half_path() names the path in use, for logs and results.
 *
 * The narrow types are uint16_t typedefs, not structs: the buffers are wire
 * bytes (memcpy'd, sent, shared between processes and devices) and no
 * arithmetic is ever done on them; a struct would add nothing but casts at
 * those boundaries. The two names say which encoding a buffer holds. */
#ifndef PSBENCH_HALF_H
#define PSBENCH_HALF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t psb_fp16; /* IEEE 754 binary16 bits */
typedef uint16_t psb_bf16; /* bfloat16 bits: an fp32's top half */

/* A value's type on the wire. */
typedef enum half_type { HALF_FP32, HALF_FP16, HALF_BF16, HALF_NTYPES } half_type;

/* Bytes per element: 4, 2, 2. */
size_t half_type_size(half_type t);
/* "fp32", "fp16", "bf16". */
const char *half_type_name(half_type t);
/* The type a name names; -1 for any other name (NULL included). */
int half_type_parse(const char *name);

/* ---- one value: the reference semantics ---- */
psb_fp16 half_fp16_of(float x);
float half_fp16_to_float(psb_fp16 h);
psb_bf16 half_bf16_of(float x);
float half_bf16_to_float(psb_bf16 b);

/* ---- arrays (any alignment; n may be 0; dst and src must not overlap) ---- */
void half_to_fp16(psb_fp16 *dst, const float *src, size_t n);
void half_from_fp16(float *dst, const psb_fp16 *src, size_t n);
void half_to_bf16(psb_bf16 *dst, const float *src, size_t n);
void half_from_bf16(float *dst, const psb_bf16 *src, size_t n);
/* The same by type (t: HALF_FP16 or HALF_BF16; dst, src: arrays of t) */
void half_narrow(half_type t, void *dst, const float *src, size_t n);
void half_widen(half_type t, float *dst, const void *src, size_t n);

/* The server's fold of a narrow push: acc[i] += (float)src[i], an fp32
 * add of the exact widened value. */
void half_fold_fp16(float *acc, const psb_fp16 *src, size_t n);
void half_fold_bf16(float *acc, const psb_bf16 *src, size_t n);

/* Scale, then narrow: dst[i] = narrow(src[i] * s), one fp32 multiply
 * rounded once, then the conversion above. The order of the fp32 hooks
 * (_allreduce_fut divides "first to avoid overflow, especially for FP16")
 * and the fused form for a psbench-native narrow push of a mean. */
void half_to_fp16_scaled(psb_fp16 *dst, const float *src, size_t n, float s);
void half_to_bf16_scaled(psb_bf16 *dst, const float *src, size_t n, float s);

/* Cast, then divide in the narrow type: PyTorch's fp16_compress_hook and
 * bf16_compress_hook (torch/distributed/algorithms/ddp_comm_hooks/
 * default_hooks.py, _compress_hook: `buffer.to(dtype).div_(world_size)`).
 * The cast comes FIRST, so a value beyond 65504 is already ±inf in fp16
 * before the division, and the quotient is rounded twice. ATen's CPU
 * div_true_kernel divides a reduced-precision tensor by a scalar in fp32
 * (opmath) and rounds back: dst[i] = narrow(float(narrow(src[i])) / d),
 * which is what these compute. ATen's CUDA kernel multiplies by the fp32
 * reciprocal 1/d instead. Over every fp16 and bf16 value and d = 1..1024
 * the two agree except in 1346 fp16 cases, all with d >= 14, where the
 * exact quotient is an fp16 tie: 91 * 2^-24 / 14 = 6.5 * 2^-24 is 0x0006
 * here (ties to even), 0x0007 through the reciprocal. The GPU side matches
 * its own. */
void half_to_fp16_div(psb_fp16 *dst, const float *src, size_t n, float d);
void half_to_bf16_div(psb_bf16 *dst, const float *src, size_t n, float d);

/* The element-wise sum of two narrow arrays: dst[i] = narrow(float(a[i]) +
 * float(b[i])), one fp32 add of the exact widened values rounded once by
 * the conversions above: the reduction of an fp16 or bf16 allreduce
 * (`--compress`), as PyTorch's Gloo process group sums them (gloo::float16
 * and c10::BFloat16 both add in float and round to nearest even; gloo's
 * F16C path differs from these only in a NaN's payload bits). dst may be a
 * or b itself (in place), otherwise none of the three may overlap. */
void half_sum_fp16(psb_fp16 *dst, const psb_fp16 *a, const psb_fp16 *b, size_t n);
void half_sum_bf16(psb_bf16 *dst, const psb_bf16 *a, const psb_bf16 *b, size_t n);

/* The folds of two narrow pushes on a server (device_fold_narrow_pair):
 * a and b arrays of t (HALF_FP16 or HALF_BF16), any alignment, n may be 0.
 *   half_pair_mean  dst[i] = narrow((float(a[i]) + float(b[i])) * s): the
 *                   add and the multiply each rounded to fp32, then the
 *                   conversion above; s not NaN; dst (an array of t)
 *                   overlapping neither;
 *   half_pair_sum   dst[i] = float(a[i]) + float(b[i]), fp32; dst any
 *                   alignment, overlapping neither.
 * One pass over memory on the AVX-512 paths (in registers); the others
 * widen into chunks on the stack. */
void half_pair_mean(half_type t, uint16_t *dst, const void *a, const void *b, size_t n, float s);
void half_pair_sum(half_type t, float *dst, const void *a, const void *b, size_t n);

/* ---- paths ---- */

/* The path in use (fixed at the first call of any array function;
 * PSBENCH_HALF_SCALAR=1 forces "scalar"):
 *   "scalar"      plain C, on any CPU: the reference
 *   "avx2+f16c"   8 lanes: vcvtps2ph / vcvtph2ps; bf16 rounded on the bits
 *   "avx512bf16"  avx512 below, but fp32 -> bf16 by vcvtneps2bf16 (AVX-512
 *                 BF16), its subnormal and NaN lanes put right
 *   "avx512"      16 lanes (AVX-512 F, BW, VL): as avx2+f16c on zmm
 * The default is the last of these the CPU runs: avx512 wherever AVX-512
 * is, BF16 or not, because half-bench found vcvtneps2bf16 with its fix-up
 * no faster than rounding on the bits from memory and slower from L2. */
const char *half_path(void);

/* The paths this CPU can run, the scalar one first, into names[0..max);
 * returns how many there are (the count even where max is smaller). */
size_t half_paths(const char **names, size_t max);

/* Tests and benches only: use the path so named from now on; -1 (and no
 * change) where this CPU cannot run it. Not safe while other threads
 * convert. */
int half_set_path(const char *name);

#ifdef __cplusplus
}
#endif

#endif
