/* cmath.h — the trainer's per-element and per-row arithmetic, shared by
 * the compute layer's implementations (compute_cpu.c; the CUDA kernels of
 * compute_cuda.c, trainer/cuda/kernels.cu, built with -fmad=false, and the
 * fake GPU's host loops, trainer/cuda/kernels_host.c), so that a CPU and a
 * GPU trainer compute each element with the same operations in the same
 * order. expf, exp and log are the exception on a GPU: CUDA's, within an
 * ulp or two of glibc's, so the softmax heads may differ in the last bits.
 *
 * Every function is `static inline`, and `__host__ __device__` under nvcc.
 * The row functions are written for one thread per row (a row is one
 * sample: a softmax, a loss head); the element functions for one thread per
 * element. Float operations stay as the CPU path always wrote them: the
 * bits of a CPU run do not change (tests/integration compares them).
 */
#ifndef PSBENCH_CMATH_H
#define PSBENCH_CMATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CM_FN static inline __host__ __device__
#else
#define CM_FN static inline
#endif

/* ReLU and its backward (the gradient passes where the input was > 0). */
CM_FN float cm_relu(float x) { return x > 0 ? x : 0.0f; }
CM_FN float cm_relu_bwd(float pre, float dy) { return pre > 0 ? dy : 0.0f; }

/* SGD: p + (-lr) g; momentum buffer: m b + g (PyTorch's, dampening 0). */
CM_FN float cm_sgd(float p, float nlr, float g) { return p + nlr * g; }
CM_FN float cm_momentum(float m, float b, float g) { return m * b + g; }

/* L1 loss against zero labels: |v| (in double) and its gradient g sign(v),
 * sign(0) = 0. */
CM_FN double cm_l1_loss(float v) { return v < 0 ? -(double)v : (double)v; }
CM_FN float cm_l1_grad(float v, float g) { return v > 0 ? g : v < 0 ? -g : 0.0f; }

/* dst = softmax(src) over n entries (max subtracted, sum in double). */
CM_FN void cm_softmax_row(float *dst, const float *src, uint64_t n)
{
    float mx = src[0];
    for (uint64_t k = 1; k < n; k++)
        mx = src[k] > mx ? src[k] : mx;
    double sum = 0;
    for (uint64_t k = 0; k < n; k++) {
        dst[k] = expf(src[k] - mx);
        sum += dst[k];
    }
    float inv = (float)(1.0 / sum);
    for (uint64_t k = 0; k < n; k++)
        dst[k] *= inv;
}

/* DummyModel's head on one sample: p = softmax(z), q = softmax(p); returns
 * log q[y] (the sample's loss is its negation: cross-entropy applied to the
 * softmax output, as the seed). q[y] >= e^0 / (C e^1) since p is in [0, 1],
 * so the log is always finite. */
CM_FN double cm_softmax_ce_row(const float *z, float *p, float *q, uint64_t C, int64_t y)
{
    cm_softmax_row(p, z, C);
    cm_softmax_row(q, p, C);
    return log((double)q[y]);
}

/* Its backward: g = (q - onehot(y)) invB, then dz = p (g - <g, p>). */
CM_FN void cm_softmax_ce_bwd_row(const float *p, const float *q, float *g, uint64_t C, int64_t y, float invB)
{
    double dot = 0;
    for (uint64_t k = 0; k < C; k++) {
        g[k] = (q[k] - (k == (uint64_t)y ? 1.0f : 0.0f)) * invB;
        dot += (double)g[k] * p[k];
    }
    float fdot = (float)dot;
    for (uint64_t k = 0; k < C; k++)
        g[k] = p[k] * (g[k] - fdot);
}

/* Cross-entropy of logits z (C classes) for target y, one row of R:
 * writes d = (softmax(z) - onehot(y)) / R and returns the row's loss
 * log(sum exp(z - max)) + max - z[y] (before the mean over R). */
CM_FN double cm_ce_logits_row(const float *z, float *d, int C, int64_t y, int R)
{
    float mx = z[0];
    for (int c = 1; c < C; c++)
        mx = z[c] > mx ? z[c] : mx;
    double sum = 0;
    for (int c = 0; c < C; c++)
        sum += exp((double)(z[c] - mx));
    double loss = log(sum) + mx - z[y];
    for (int c = 0; c < C; c++)
        d[c] = (float)(exp((double)(z[c] - mx)) / sum / R);
    d[y] -= 1.0f / (float)R;
    return loss;
}

#endif
