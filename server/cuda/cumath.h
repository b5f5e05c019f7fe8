/* cumath.h — the per-element arithmetic of the server's CUDA kernels,
 * written once for the GPU and the host.
 *
 * kernels.cu calls these on the GPU; the host compiles the same functions
 * (tests/unit/server/cuda/test_cumath.c runs them against the cpu device's loops in
 * server/reduce.c, element by element, bit for bit). Every operation is
 * rounded on its own, as the CPU does it: a product is never fused with
 * the add that follows (the GPU would contract a*b+c into one FMA, which
 * rounds once and so differs in the last bit). Sums run in the order the
 * CPU uses (the sources in slot order, the positions of a bag in order),
 * so that a CUDA server's results equal a CPU server's.
 *
 * Plain C when the C compiler reads it; __host__ __device__ under nvcc.
 */
#ifndef PSBENCH_CUMATH_H
#define PSBENCH_CUMATH_H

#include <stdint.h>

#include "shared/half_elem.h"

#if defined(__CUDACC__)
#define CUMATH_FN static __host__ __device__ __forceinline__
#else
#define CUMATH_FN static inline
#endif

/* a + b and a * b, each rounded once to float (no contraction). */
CUMATH_FN float cumath_add(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    volatile float r = a + b; /* a store: no fusing with a neighbour */
    return r;
#endif
}

CUMATH_FN float cumath_mul(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    volatile float r = a * b;
    return r;
#endif
}

CUMATH_FN float cumath_sub(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    volatile float r = a - b;
    return r;
#endif
}

/* The dense folds (server/device.h's fold ops) for one element. */
CUMATH_FN float cumath_fold_add(float acc, float x) { return cumath_add(acc, x); }
CUMATH_FN float cumath_fold_add_scale(float acc, float x, float s) { return cumath_mul(cumath_add(acc, x), s); }
CUMATH_FN float cumath_fold_copy_scale(float x, float s) { return cumath_mul(x, s); }

/* The last fold of a narrow push (server/device.h, device_fold_narrow_out)
 * for one element: x16 (fp16, or bf16 where bf) widened, folded into acc
 * by ADD_SCALE (add_scale true) or COPY_SCALE, the f32 result narrowed
 * (shared/half_elem.h: the cpu device's half.c conversions, bit for bit). */
CUMATH_FN uint16_t cumath_fold_narrow_out(int add_scale, float acc, uint16_t x16, float s, int bf)
{
    float x = he_widen(bf, x16);
    return he_narrow(bf, add_scale ? cumath_fold_add_scale(acc, x, s) : cumath_fold_copy_scale(x, s));
}

/* One step of SGD with momentum (PyTorch's: dampening 0, no Nesterov) for
 * one element whose gradient mean is g: buf = first ? g : momentum*buf + g;
 * param = param - lr*buf. */
CUMATH_FN void cumath_sgd(float *param, float *buf, float g, float lr, float momentum, int first)
{
    float b = first ? g : cumath_add(cumath_mul(momentum, *buf), g);
    *buf = b;
    *param = cumath_sub(*param, cumath_mul(lr, b));
}

/* Scatter SGD on one table element: row = row - lr * grad. */
CUMATH_FN float cumath_scatter_step(float row, float grad, float lr) { return cumath_sub(row, cumath_mul(lr, grad)); }

/* device_fold_narrow_pair for one element: the stash's value and the
 * push's, widened (a, x), added (the accumulator's first write); or, for
 * the mean of two pushes, the 16-bit a16 and x16 widened, added, scaled
 * and narrowed. */
CUMATH_FN float cumath_pair_sum(float a, float x) { return cumath_fold_add(a, x); }
CUMATH_FN uint16_t cumath_pair_mean_narrow(uint16_t a16, uint16_t x16, float s, int bf)
{
    return he_narrow(bf, cumath_fold_add_scale(he_widen(bf, a16), he_widen(bf, x16), s));
}

#endif
