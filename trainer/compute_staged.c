/* compute_staged.c — a test device of the compute layer (compute.h), as the
 * server's `test` device is one of the server's: compute_new("staged").
 * Tests only: it lets every machine run the paths a GPU takes, where the
 * model's memory is not host-visible and host copies complete late.
 *
 *   - the arithmetic is the cpu's (compute_cpu.c, run inline on the
 *     buffers of an inner cpu context): the same bits as "cpu";
 *   - compute_host_view is NULL for COMPUTE_MEM_DEVICE buffers (pinned and
 *     host buffers have their views);
 *   - compute_read and compute_write are deferred, as a stream's async
 *     copies: queued and run only when the order needs them — before the
 *     next operation of the context (which must see them), or at
 *     compute_wait, compute_sync, compute_done (which completes them after
 *     answering false once) and at release. Until then a read's
 *     destination holds a poison (all bits set: NaN floats) and a write's
 *     source is not yet read, so a caller that reads what a copy writes
 *     before its mark is done, or reuses a write's source too early, gets
 *     the wrong bits, and a test comparing against "cpu" fails.
 *
 * Marks count operations and copies alike (compute.h's order); a mark is
 * done once no copy enqueued before it is pending.
 */
#include "trainer/compute_impl.h"
#include "shared/clock.h"
#include "shared/log.h"

#include <stdlib.h>
#include <string.h>

typedef struct staged_copy {
    bool to_host;  /* compute_read: span -> host; else compute_write: host -> span */
    cspan span;
    void *host;    /* the read's destination / the write's source */
    cmark seq;     /* its place in the order (the mark just before it) */
} staged_copy;

typedef struct compute_staged {
    compute base;
    compute *cpu;       /* the arithmetic and the memory */
    cmark enqueued;     /* operations, copies and marks so far */
    staged_copy *q;     /* pending copies, in order */
    size_t nq, capq;
    /* when each of the latest marks was taken (compute_elapsed: the cpu's) */
    cmark t_mark[COMPUTE_TIMED_MARKS];
    uint64_t t_ns[COMPUTE_TIMED_MARKS];
} compute_staged;

static compute_staged *st(compute *c) { return (compute_staged *)c; }

static void st_run(const staged_copy *k)
{
    size_t es = compute_dtype_size(k->span.buf->dtype);
    char *dev = (char *)k->span.buf->ptr + k->span.off * es;
    if (k->to_host)
        memcpy(k->host, dev, k->span.n * es);
    else
        memcpy(dev, k->host, k->span.n * es);
}

/* Complete every pending copy, in order. */
static void st_flush(compute *c)
{
    compute_staged *s = st(c);
    for (size_t i = 0; i < s->nq; i++)
        st_run(&s->q[i]);
    s->nq = 0;
}

/* Before an operation: the copies before it complete; it is counted. */
static compute *st_op(compute *c)
{
    st_flush(c);
    st(c)->enqueued++;
    return st(c)->cpu;
}

static void st_queue(compute *c, bool to_host, cspan span, void *host)
{
    assert(cspan_valid(span));
    compute_staged *s = st(c);
    if (s->nq == s->capq) {
        size_t cap = s->capq ? 2 * s->capq : 16;
        staged_copy *q = realloc(s->q, cap * sizeof *q);
        if (!q) { /* a test device: out of memory, copy at once */
            staged_copy k = {to_host, span, host, s->enqueued};
            st_flush(c);
            st_run(&k);
            s->enqueued++;
            return;
        }
        s->q = q;
        s->capq = cap;
    }
    s->q[s->nq++] = (staged_copy){to_host, span, host, s->enqueued};
    if (to_host) /* the poison until the copy completes */
        memset(host, 0xff, span.n * compute_dtype_size(span.buf->dtype));
    s->enqueued++;
}

/* ---- memory ---------------------------------------------------------------- */

static cbuf *st_alloc(compute *c, uint64_t n, compute_dtype t, compute_mem mem, char *err, size_t errlen)
{
    compute *cpu = st(c)->cpu;
    return cpu->ops->alloc(cpu, n, t, mem, err, errlen);
}

static void st_release(compute *c, cbuf *b)
{
    st_flush(c); /* a copy may still name it */
    compute *cpu = st(c)->cpu;
    cpu->ops->release(cpu, b);
}

static void *st_host_view(compute *c, cbuf *b)
{
    assert(b->owner == st(c)->cpu);
    return b->mem == COMPUTE_MEM_DEVICE ? NULL : b->ptr;
}

static devmem st_device_view(compute *c, cbuf *b)
{
    assert(b->owner == st(c)->cpu);
    (void)c;
    (void)b;
    return devmem_none(); /* host memory posing as a device's: no GPU address */
}

static void st_read(compute *c, cspan src, void *dst) { st_queue(c, true, src, dst); }
static void st_write(compute *c, cspan dst, const void *src) { st_queue(c, false, dst, (void *)src); }

static void st_zero(compute *c, cspan dst)
{
    compute *cpu = st_op(c);
    cpu->ops->zero(cpu, dst);
}

/* ---- order ------------------------------------------------------------------ */

/* The count so far, then the mark counted too (each mark its own point,
 * every later copy after it), with the time it was taken. */
static cmark st_mark(compute *c)
{
    compute_staged *s = st(c);
    cmark m = s->enqueued++;
    s->t_mark[m % COMPUTE_TIMED_MARKS] = m;
    s->t_ns[m % COMPUTE_TIMED_MARKS] = clock_now_ns();
    return m;
}

/* No copy enqueued before m is pending. */
static bool st_reached(const compute_staged *s, cmark m) { return s->nq == 0 || s->q[0].seq >= m; }

static bool st_done(compute *c, cmark m)
{
    compute_staged *s = st(c);
    assert(m <= s->enqueued);
    bool done = st_reached(s, m);
    st_flush(c); /* asked once, it progresses: done the next time */
    return done;
}

/* As the cpu's (the times the marks were taken), once both are done: not
 * before (asking does not make them progress). */
static int st_elapsed(compute *c, cmark from, cmark to, double *ms)
{
    compute_staged *s = st(c);
    assert(from <= to && to < s->enqueued);
    if (!st_reached(s, to))
        return 1;
    size_t a = from % COMPUTE_TIMED_MARKS, b = to % COMPUTE_TIMED_MARKS;
    if (s->t_mark[a] != from || s->t_mark[b] != to)
        return -1;
    *ms = clock_ms(s->t_ns[a], s->t_ns[b]);
    return 0;
}

static void st_wait(compute *c, cmark m)
{
    assert(m <= st(c)->enqueued);
    st_flush(c);
}

static void st_sync(compute *c) { st_flush(c); }

static void st_destroy(compute *c)
{
    st_flush(c);
    compute_free(st(c)->cpu);
    free(st(c)->q);
    free(c);
}

/* ---- arithmetic: the cpu's, after the copies before it ------------------------ */

static void st_gemm(compute *c, bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha, cspan A,
                    uint64_t lda, cspan B, uint64_t ldb, float beta, cspan C, uint64_t ldc)
{
    compute *cpu = st_op(c);
    cpu->ops->gemm(cpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void st_bias_rows(compute *c, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    compute *cpu = st_op(c);
    cpu->ops->bias_rows(cpu, bias, rows, cols, y);
}

static void st_transpose_bias(compute *c, cspan src, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    compute *cpu = st_op(c);
    cpu->ops->transpose_bias(cpu, src, bias, rows, cols, y);
}

static void st_colsum(compute *c, cspan src, uint64_t rows, uint64_t cols, cspan dst, compute_sum_from from)
{
    compute *cpu = st_op(c);
    cpu->ops->colsum(cpu, src, rows, cols, dst, from);
}

static void st_relu(compute *c, cspan x, cspan y)
{
    compute *cpu = st_op(c);
    cpu->ops->relu(cpu, x, y);
}

static void st_relu_bwd(compute *c, cspan pre, cspan dy)
{
    compute *cpu = st_op(c);
    cpu->ops->relu_bwd(cpu, pre, dy);
}

static void st_bag_mean(compute *c, cspan table, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan out)
{
    compute *cpu = st_op(c);
    cpu->ops->bag_mean(cpu, table, D, idx, B, L, out);
}

static void st_bag_mean_bwd_dense(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                  cspan G)
{
    compute *cpu = st_op(c);
    cpu->ops->bag_mean_bwd_dense(cpu, dx, D, idx, B, L, G);
}

static uint64_t st_bag_mean_bwd_sparse(compute *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                       int64_t *rows, uint32_t *slot, cspan vals)
{
    compute *cpu = st_op(c);
    return cpu->ops->bag_mean_bwd_sparse(cpu, dx, D, idx, B, L, rows, slot, vals);
}

static void st_softmax_ce(compute *c, cspan z, uint32_t B, uint64_t C, const int64_t *y, cspan prob, cspan q,
                          cspan loss)
{
    compute *cpu = st_op(c);
    cpu->ops->softmax_ce(cpu, z, B, C, y, prob, q, loss);
}

static void st_softmax_ce_bwd(compute *c, cspan prob, cspan q, uint32_t B, uint64_t C, const int64_t *y, cspan dz)
{
    compute *cpu = st_op(c);
    cpu->ops->softmax_ce_bwd(cpu, prob, q, B, C, y, dz);
}

static void st_ce_logits(compute *c, cspan z, uint32_t R, uint32_t C, const int64_t *y, cspan dz, cspan loss)
{
    compute *cpu = st_op(c);
    cpu->ops->ce_logits(cpu, z, R, C, y, dz, loss);
}

static void st_l1(compute *c, cspan y, uint64_t n, cspan dy, cspan loss)
{
    compute *cpu = st_op(c);
    cpu->ops->l1(cpu, y, n, dy, loss);
}

static void st_sgd_dense(compute *c, cspan p, cspan g, cspan buf, float lr, float momentum, bool first)
{
    compute *cpu = st_op(c);
    cpu->ops->sgd_dense(cpu, p, g, buf, lr, momentum, first);
}

static void st_sgd_sparse(compute *c, cspan table, uint64_t cols, const int64_t *rows, const float *vals,
                          uint64_t nnz, float lr)
{
    compute *cpu = st_op(c);
    cpu->ops->sgd_sparse(cpu, table, cols, rows, vals, nnz, lr);
}

static const compute_ops staged_ops = {
    .name = "staged",
    .destroy = st_destroy,
    .alloc = st_alloc,
    .release = st_release,
    .host_view = st_host_view,
    .device_view = st_device_view,
    .read = st_read,
    .write = st_write,
    .zero = st_zero,
    .mark = st_mark,
    .done = st_done,
    .wait = st_wait,
    .sync = st_sync,
    .elapsed = st_elapsed,
    .gemm = st_gemm,
    .bias_rows = st_bias_rows,
    .transpose_bias = st_transpose_bias,
    .colsum = st_colsum,
    .relu = st_relu,
    .relu_bwd = st_relu_bwd,
    .bag_mean = st_bag_mean,
    .bag_mean_bwd_dense = st_bag_mean_bwd_dense,
    .bag_mean_bwd_sparse = st_bag_mean_bwd_sparse,
    .softmax_ce = st_softmax_ce,
    .softmax_ce_bwd = st_softmax_ce_bwd,
    .ce_logits = st_ce_logits,
    .l1 = st_l1,
    .sgd_dense = st_sgd_dense,
    .sgd_sparse = st_sgd_sparse,
};

compute *compute_staged_new(char *err, size_t errlen)
{
    compute_staged *s = calloc(1, sizeof *s);
    if (!s) {
        errbuf_set(err, errlen, "compute (staged): out of memory");
        return NULL;
    }
    if (!(s->cpu = compute_cpu_new(err, errlen))) {
        free(s);
        return NULL;
    }
    s->base.ops = &staged_ops;
    for (size_t i = 0; i < COMPUTE_TIMED_MARKS; i++)
        s->t_mark[i] = UINT64_MAX; /* no mark taken there yet */
    return &s->base;
}
