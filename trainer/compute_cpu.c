/* compute_cpu.c — the compute layer on the CPU (see compute.h): CBLAS for
 * the products, plain loops for the rest (the per-element arithmetic from
 * cmath.h), every operation run inline on the calling thread, so each is
 * complete when it returns and a mark is only a counter. Every kind of
 * memory is host memory here: host views are the buffers themselves, and
 * reads and writes are memcpy.
 *
 * These loops are the ones model.c, hybrid.c, batch_update.c and optim.c
 * ran before the layer existed, operation for operation: a CPU run's bits
 * are those of earlier versions.
 */
#include "trainer/cmath.h"
#include "trainer/compute_impl.h"
#include "shared/clock.h"
#include "shared/log.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

typedef struct compute_cpu {
    compute base;
    cmark enqueued; /* operations and marks so far (a mark is the count at its time) */
    uint64_t live;  /* buffers not yet released */
    /* when each of the latest marks was taken (compute_elapsed) */
    cmark t_mark[COMPUTE_TIMED_MARKS];
    uint64_t t_ns[COMPUTE_TIMED_MARKS];
} compute_cpu;

static float *cpu_f32(cspan s)
{
    assert(cspan_valid(s) && s.buf->dtype == COMPUTE_F32);
    return (float *)s.buf->ptr + s.off;
}

static double *cpu_f64(cspan s)
{
    assert(cspan_valid(s) && s.buf->dtype == COMPUTE_F64);
    return (double *)s.buf->ptr + s.off;
}

static void cpu_op(compute *c) { ((compute_cpu *)c)->enqueued++; }

/* ---- memory ------------------------------------------------------------------- */

static cbuf *cpu_alloc(compute *c, uint64_t n, compute_dtype t, compute_mem mem, char *err, size_t errlen)
{
    size_t es = compute_dtype_size(t);
    void *p = n <= SIZE_MAX / es ? calloc(n ? n : 1, es) : NULL;
    cbuf *b = p ? cbuf_wrap(c, p, n, t, mem) : NULL;
    if (!b) {
        free(p);
        errbuf_set(err, errlen, "compute (cpu): out of memory for %llu elements", (unsigned long long)n);
        return NULL;
    }
    ((compute_cpu *)c)->live++;
    return b;
}

/* Host memory someone else owns (compute_lend): computed on as the
 * cpu's own, since all of its memory is host memory. */
static cbuf *cpu_lend(compute *c, void *p, uint64_t n, compute_dtype t, char *err, size_t errlen)
{
    cbuf *b = cbuf_wrap(c, p, n, t, COMPUTE_MEM_DEVICE);
    if (!b) {
        errbuf_set(err, errlen, "compute (cpu): out of memory");
        return NULL;
    }
    b->lent = true;
    ((compute_cpu *)c)->live++;
    return b;
}

static void cpu_release(compute *c, cbuf *b)
{
    assert(b->owner == c);
    assert(((compute_cpu *)c)->live > 0);
    ((compute_cpu *)c)->live--;
    if (!b->lent)
        free(b->ptr);
    free(b);
}

static void *cpu_host_view(compute *c, cbuf *b)
{
    assert(b->owner == c);
    return b->ptr;
}

static devmem cpu_device_view(compute *c, cbuf *b)
{
    assert(b->owner == c);
    (void)c;
    (void)b;
    return devmem_none(); /* no GPU */
}

static void cpu_read(compute *c, cspan src, void *dst)
{
    assert(cspan_valid(src));
    size_t es = compute_dtype_size(src.buf->dtype);
    memcpy(dst, (char *)src.buf->ptr + src.off * es, src.n * es);
    cpu_op(c);
}

static void cpu_write(compute *c, cspan dst, const void *src)
{
    assert(cspan_valid(dst));
    size_t es = compute_dtype_size(dst.buf->dtype);
    memcpy((char *)dst.buf->ptr + dst.off * es, src, dst.n * es);
    cpu_op(c);
}

static void cpu_zero(compute *c, cspan dst)
{
    assert(cspan_valid(dst));
    size_t es = compute_dtype_size(dst.buf->dtype);
    memset((char *)dst.buf->ptr + dst.off * es, 0, dst.n * es);
    cpu_op(c);
}

/* ---- order: everything is done on return -------------------------------------- */

/* The count so far, then the mark counted too (each mark its own point),
 * with the time it was taken. */
static cmark cpu_mark(compute *c)
{
    compute_cpu *p = (compute_cpu *)c;
    cmark m = p->enqueued++;
    p->t_mark[m % COMPUTE_TIMED_MARKS] = m;
    p->t_ns[m % COMPUTE_TIMED_MARKS] = clock_now_ns();
    return m;
}

static bool cpu_done(compute *c, cmark m)
{
    assert(m <= ((compute_cpu *)c)->enqueued);
    return true;
}

static void cpu_wait(compute *c, cmark m) { assert(m <= ((compute_cpu *)c)->enqueued); }
static void cpu_sync(compute *c) { (void)c; }

/* The clock between the two marks' times (everything is done). */
static int cpu_elapsed(compute *c, cmark from, cmark to, double *ms)
{
    compute_cpu *p = (compute_cpu *)c;
    assert(from <= to && to < p->enqueued);
    size_t a = from % COMPUTE_TIMED_MARKS, b = to % COMPUTE_TIMED_MARKS;
    if (p->t_mark[a] != from || p->t_mark[b] != to)
        return -1;
    *ms = clock_ms(p->t_ns[a], p->t_ns[b]);
    return 0;
}

static void cpu_destroy(compute *c)
{
    assert(((compute_cpu *)c)->live == 0 && "compute_free with buffers still allocated");
    free(c);
}

/* ---- dense layers ---------------------------------------------------------------- */

/* The elements a row-major rows x cols operand with leading dimension ld
 * spans. */
__attribute__((unused)) /* read by asserts alone: unused under NDEBUG */
static uint64_t cpu_extent(uint64_t rows, uint64_t cols, uint64_t ld)
{
    assert(ld >= cols);
    return rows == 0 ? 0 : (rows - 1) * ld + cols;
}

static void cpu_gemm(compute *c, bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha, cspan A,
                     uint64_t lda, cspan B, uint64_t ldb, float beta, cspan C, uint64_t ldc)
{
    assert(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX &&
           ldc <= INT32_MAX);
    assert(cpu_extent(ta ? K : M, ta ? M : K, lda) <= A.n);
    assert(cpu_extent(tb ? N : K, tb ? K : N, ldb) <= B.n);
    assert(cpu_extent(M, N, ldc) <= C.n);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, cpu_f32(A), (int)lda, cpu_f32(B), (int)ldb, beta, cpu_f32(C), (int)ldc);
    cpu_op(c);
}

static void cpu_bias_rows(compute *c, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    assert(bias.n == cols && y.n >= rows * cols);
    const float *b = cpu_f32(bias);
    float *out = cpu_f32(y);
    for (uint64_t i = 0; i < rows; i++)
        memcpy(out + i * cols, b, cols * sizeof *out);
    cpu_op(c);
}

static void cpu_transpose_bias(compute *c, cspan src, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    assert(src.n >= rows * cols && bias.n == cols && y.n >= rows * cols);
    const float *s = cpu_f32(src), *b = cpu_f32(bias);
    float *out = cpu_f32(y);
    for (uint64_t i = 0; i < rows; i++)
        for (uint64_t j = 0; j < cols; j++)
            out[i * cols + j] = s[j * rows + i] + b[j];
    cpu_op(c);
}

static void cpu_colsum(compute *c, cspan src, uint64_t rows, uint64_t cols, cspan dst, compute_sum_from from)
{
    assert(src.n >= rows * cols && dst.n == cols && rows >= 1);
    const float *s = cpu_f32(src);
    float *d = cpu_f32(dst);
    uint64_t first = 0;
    if (from == COMPUTE_SUM_FROM_ROW0) {
        memcpy(d, s, cols * sizeof *d);
        first = 1;
    } else {
        memset(d, 0, cols * sizeof *d);
    }
    for (uint64_t i = first; i < rows; i++)
        for (uint64_t j = 0; j < cols; j++)
            d[j] += s[i * cols + j];
    cpu_op(c);
}

static void cpu_relu(compute *c, cspan x, cspan y)
{
    assert(x.n == y.n);
    const float *in = cpu_f32(x);
    float *out = cpu_f32(y);
    for (uint64_t i = 0; i < x.n; i++)
        out[i] = cm_relu(in[i]);
    cpu_op(c);
}

static void cpu_relu_bwd(compute *c, cspan pre, cspan dy)
{
    assert(pre.n == dy.n);
    const float *p = cpu_f32(pre);
    float *d = cpu_f32(dy);
    for (uint64_t i = 0; i < dy.n; i++)
        d[i] = cm_relu_bwd(p[i], d[i]);
    cpu_op(c);
}

/* ---- EmbeddingBag (mean) ------------------------------------------------------------ */

static void cpu_bag_mean(compute *c, cspan table, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan out)
{
    assert(D >= 1 && L >= 1 && table.n % D == 0 && out.n >= (uint64_t)B * D);
    uint64_t nrows = table.n / D;
    const float *W = cpu_f32(table);
    float *x = cpu_f32(out);
    for (uint32_t s = 0; s < B; s++) {
        float *o = x + s * D;
        memset(o, 0, D * sizeof *o);
        for (uint64_t t = 0; t < L; t++) {
            int64_t r = idx[s * L + t];
            assert(r >= 0 && (uint64_t)r < nrows);
            (void)nrows;
            const float *row = W + (uint64_t)r * D;
            for (uint64_t k = 0; k < D; k++)
                o[k] += row[k];
        }
        for (uint64_t k = 0; k < D; k++)
            o[k] /= (float)L; /* mean: the sum over the bag's size, as PyTorch */
    }
    cpu_op(c);
}

/* dx /= L: PyTorch's mean backward, once per bag. */
static float *cpu_bag_scale(cspan dx, uint64_t D, uint32_t B, uint64_t L)
{
    assert(dx.n >= (uint64_t)B * D);
    float *g = cpu_f32(dx);
    float fl = (float)L;
    for (uint64_t k = 0; k < (uint64_t)B * D; k++)
        g[k] /= fl;
    return g;
}

static void cpu_bag_mean_bwd_dense(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                   cspan G)
{
    assert(D >= 1 && G.n % D == 0);
    const float *g = cpu_bag_scale(dx, D, B, L);
    float *T = cpu_f32(G);
    memset(T, 0, G.n * sizeof *T);
    for (uint32_t s = 0; s < B; s++) {
        const float *gs = g + s * D;
        for (uint64_t t = 0; t < L; t++) {
            assert(idx[s * L + t] >= 0 && (uint64_t)idx[s * L + t] < G.n / D);
            float *row = T + (uint64_t)idx[s * L + t] * D;
            for (uint64_t k = 0; k < D; k++)
                row[k] += gs[k];
        }
    }
    cpu_op(c);
}

static int cpu_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Collect the unique rows of the batch (marking them in slot, so the cost
 * is O(B L + nnz log nnz), never O(table rows)), sort them, then accumulate
 * into nnz compact rows. */
static uint64_t cpu_bag_mean_bwd_sparse(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                        int64_t *rows, uint32_t *slot, cspan vals)
{
    const float *g = cpu_bag_scale(dx, D, B, L);
    uint64_t nnz = 0;
    for (uint64_t k = 0; k < (uint64_t)B * L; k++) {
        int64_t r = idx[k];
        if (slot[r] == COMPUTE_NO_SLOT) {
            slot[r] = 0; /* mark; the real slot is set after sorting */
            rows[nnz++] = r;
        }
    }
    qsort(rows, nnz, sizeof *rows, cpu_cmp_i64);
    for (uint64_t k = 0; k < nnz; k++)
        slot[rows[k]] = (uint32_t)k;
    assert(vals.n >= nnz * D);
    float *v = cpu_f32(vals);
    memset(v, 0, nnz * D * sizeof *v);
    for (uint32_t s = 0; s < B; s++) {
        const float *gs = g + s * D;
        for (uint64_t t = 0; t < L; t++) {
            float *row = v + (uint64_t)slot[idx[s * L + t]] * D;
            for (uint64_t k = 0; k < D; k++)
                row[k] += gs[k];
        }
    }
    for (uint64_t k = 0; k < nnz; k++)
        slot[rows[k]] = COMPUTE_NO_SLOT;
    cpu_op(c);
    return nnz;
}

/* ---- loss heads ---------------------------------------------------------------------- */

static void cpu_softmax_ce(compute *c, cspan z, uint32_t B, uint64_t C, const int64_t *y, cspan prob, cspan q,
                           cspan loss)
{
    __attribute__((unused)) uint64_t n = (uint64_t)B * C;
    assert(B >= 1 && z.n >= n && prob.n >= n && q.n >= n && loss.n == 1);
    const float *zs = cpu_f32(z);
    float *p = cpu_f32(prob), *qs = cpu_f32(q);
    double sum = 0;
    for (uint32_t s = 0; s < B; s++) {
        assert(y[s] >= 0 && (uint64_t)y[s] < C);
        sum -= cm_softmax_ce_row(zs + s * C, p + s * C, qs + s * C, C, y[s]);
    }
    *cpu_f64(loss) = sum / B;
    cpu_op(c);
}

static void cpu_softmax_ce_bwd(compute *c, cspan prob, cspan q, uint32_t B, uint64_t C, const int64_t *y, cspan dz)
{
    __attribute__((unused)) uint64_t n = (uint64_t)B * C;
    assert(B >= 1 && prob.n >= n && q.n >= n && dz.n >= n);
    const float *p = cpu_f32(prob), *qs = cpu_f32(q);
    float *g = cpu_f32(dz);
    float invB = 1.0f / (float)B;
    for (uint32_t s = 0; s < B; s++)
        cm_softmax_ce_bwd_row(p + s * C, qs + s * C, g + s * C, C, y[s], invB);
    cpu_op(c);
}

static void cpu_ce_logits(compute *c, cspan z, uint32_t R, uint32_t C, const int64_t *y, cspan dz, cspan loss)
{
    __attribute__((unused)) uint64_t n = (uint64_t)R * C;
    assert(R >= 1 && R <= INT32_MAX && C <= INT32_MAX && z.n >= n && dz.n >= n && loss.n == 1);
    const float *zs = cpu_f32(z);
    float *d = cpu_f32(dz);
    double sum = 0;
    for (uint32_t i = 0; i < R; i++) {
        assert(y[i] >= 0 && (uint64_t)y[i] < C);
        sum += cm_ce_logits_row(zs + (size_t)i * C, d + (size_t)i * C, (int)C, y[i], (int)R);
    }
    *cpu_f64(loss) = sum / (int)R;
    cpu_op(c);
}

static void cpu_l1(compute *c, cspan y, uint64_t n, cspan dy, cspan loss)
{
    assert(n >= 1 && y.n >= n && dy.n >= n && loss.n == 1);
    const float *v = cpu_f32(y);
    float *d = cpu_f32(dy);
    float g = 1.0f / (float)n;
    double sum = 0;
    for (uint64_t k = 0; k < n; k++) {
        sum += cm_l1_loss(v[k]);
        d[k] = cm_l1_grad(v[k], g);
    }
    *cpu_f64(loss) = sum / (double)n;
    cpu_op(c);
}

/* ---- SGD ---------------------------------------------------------------------------- */

static void cpu_sgd_dense(compute *c, cspan p, cspan g, cspan buf, float lr, float momentum, bool first)
{
    assert(p.n == g.n);
    float *w = cpu_f32(p);
    const float *grad = cpu_f32(g);
    uint64_t n = p.n;
    float nlr = -lr;
    if (!buf.buf) {
        for (uint64_t k = 0; k < n; k++)
            w[k] = cm_sgd(w[k], nlr, grad[k]);
        cpu_op(c);
        return;
    }
    assert(buf.n == n);
    float *b = cpu_f32(buf);
    if (first) {
        memcpy(b, grad, n * sizeof *b); /* PyTorch: buf = clone(grad) on the first step */
    } else {
        for (uint64_t k = 0; k < n; k++)
            b[k] = cm_momentum(momentum, b[k], grad[k]);
    }
    for (uint64_t k = 0; k < n; k++)
        w[k] = cm_sgd(w[k], nlr, b[k]);
    cpu_op(c);
}

static void cpu_sgd_sparse(compute *c, cspan table, uint64_t cols, const int64_t *rows, const float *vals,
                           uint64_t nnz, float lr)
{
    assert(cols >= 1 && table.n % cols == 0);
    float *p = cpu_f32(table);
    float nlr = -lr;
    for (uint64_t k = 0; k < nnz; k++) {
        assert(rows[k] >= 0 && (uint64_t)rows[k] < table.n / cols);
        float *row = p + (uint64_t)rows[k] * cols;
        const float *g = vals + k * cols;
        for (uint64_t j = 0; j < cols; j++)
            row[j] = cm_sgd(row[j], nlr, g[j]);
    }
    cpu_op(c);
}

static const compute_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .lend = cpu_lend,
    .host_view = cpu_host_view,
    .device_view = cpu_device_view,
    .read = cpu_read,
    .write = cpu_write,
    .zero = cpu_zero,
    .mark = cpu_mark,
    .done = cpu_done,
    .wait = cpu_wait,
    .sync = cpu_sync,
    .elapsed = cpu_elapsed,
    .gemm = cpu_gemm,
    .bias_rows = cpu_bias_rows,
    .transpose_bias = cpu_transpose_bias,
    .colsum = cpu_colsum,
    .relu = cpu_relu,
    .relu_bwd = cpu_relu_bwd,
    .bag_mean = cpu_bag_mean,
    .bag_mean_bwd_dense = cpu_bag_mean_bwd_dense,
    .bag_mean_bwd_sparse = cpu_bag_mean_bwd_sparse,
    .softmax_ce = cpu_softmax_ce,
    .softmax_ce_bwd = cpu_softmax_ce_bwd,
    .ce_logits = cpu_ce_logits,
    .l1 = cpu_l1,
    .sgd_dense = cpu_sgd_dense,
    .sgd_sparse = cpu_sgd_sparse,
};

compute *compute_cpu_new(char *err, size_t errlen)
{
    compute_cpu *c = calloc(1, sizeof *c);
    if (!c) {
        errbuf_set(err, errlen, "compute (cpu): out of memory");
        return NULL;
    }
    c->base.ops = &cpu_ops;
    for (size_t i = 0; i < COMPUTE_TIMED_MARKS; i++)
        c->t_mark[i] = UINT64_MAX; /* no mark taken there yet */
    return &c->base;
}
