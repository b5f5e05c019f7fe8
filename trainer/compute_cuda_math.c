/* compute_cuda_math.c — the cuda compute context's arithmetic (compute.h's
 * ops on the GPU, through shared/gpu/cugpu.h): dense layers (cuBLAS for the
 * products), the EmbeddingBag, the loss heads, SGD; and what they stand on,
 * the launches and the staging of their host arguments.
 *
 * Host arguments (indices, targets, the sparse rows and values) are copied
 * at once into the staging ring (shared/gpu/staging.h, the server's too:
 * chunks of pinned memory, each with a device twin), uploaded on the stream
 * into the twin and read there by the kernels: callers may reuse theirs on
 * return. A chunk is written again only once the event recorded when it
 * was closed is done; past CC_STAGE_LIMIT bytes of chunks the ring waits
 * for that rather than make another. The embedding's backward and the sparse SGD
 * group their occurrences by row on the host (the unique rows ascending,
 * each row's occurrences in batch order: the cpu layer's order of
 * summation per element), so that one GPU thread owns each element.
 *
 * Losses are doubles in device memory: each sample's term by a kernel, the
 * sum in sample order by one thread (compute_loss reads it back).
 *
 */
#include "trainer/compute_cuda_int.h"
#include "shared/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- launches and staging ----------------------------------------------------------- */

void cc_launch(compute_cuda *c, const trk_launch *l)
{
    if (!cc_failed(c) && c->g->ops->launch(c->g, c->s, l) < 0)
        cc_fatal(c, "a kernel");
}

/* One call's host arguments: `len` bytes of the staging ring, taken at
 * once (whatever reads them is queued before the call returns, so before
 * the ring's next room, which may close their chunk). In a failed context,
 * a sink: host scratch that is never uploaded (the call's launches are
 * skipped), so that the call finishes its host work and returns. */
typedef struct cc_stage {
    unsigned char *host;
    devmem dev;
    size_t len, used;
    bool sink;
} cc_stage;

static size_t cc_round(size_t n) { return (n + CC_ALIGN - 1) / CC_ALIGN * CC_ALIGN; }

/* Room for `bytes` (the sum of the parts, each rounded to CC_ALIGN). */
static cc_stage cc_stage_sink(compute_cuda *c, size_t bytes)
{
    if (bytes > c->sink_cap) {
        unsigned char *p = realloc(c->sink, bytes);
        if (!p) { /* the host itself is out of memory: nothing sensible is left */
            log_error("compute (%s): out of host memory (%zu bytes) after: %s", c->name, bytes, c->base.failure);
            abort();
        }
        c->sink = p;
        c->sink_cap = bytes;
    }
    cc_stage st = {c->sink, devmem_none(), bytes, 0, true};
    return st;
}

static cc_stage cc_stage_begin(compute_cuda *c, size_t bytes)
{
    if (cc_failed(c))
        return cc_stage_sink(c, bytes);
    if (staging_room(&c->stage, bytes ? bytes : 1) < 0) {
        compute_fail(&c->base, "compute (%s): the staging ring: %s", c->name, c->stage.err);
        return cc_stage_sink(c, bytes);
    }
    size_t at = staging_used(&c->stage);
    cc_stage st = {staging_host_at(&c->stage, at), staging_dev_at(&c->stage, at), bytes, 0, false};
    if (bytes)
        staging_take(&c->stage, bytes);
    return st;
}

/* A part of n bytes: its host address (to fill) and device address (as a
 * kernel's launch takes it). */
static void *cc_stage_part(cc_stage *st, size_t n, void **dev)
{
    size_t at = st->used;
    st->used += cc_round(n);
    assert(st->used <= st->len);
    *dev = st->sink ? NULL : devmem_at(st->dev, at).p;
    return st->host + at;
}

static const void *cc_stage_copy(cc_stage *st, const void *src, size_t n)
{
    void *dev;
    memcpy(cc_stage_part(st, n, &dev), src, n);
    return dev;
}

/* The parts filled: upload them (before the kernels that read them). */
static void cc_stage_upload(compute_cuda *c, const cc_stage *st)
{
    if (st->sink || cc_failed(c))
        return;
    if (st->used && c->g->ops->copy_h2d(c->g, c->s, st->dev, st->host, st->used) < 0)
        cc_fatal(c, "a copy");
}

/* The per-sample loss terms: n doubles of device memory, in stream order
 * (as a kernel's launch takes them). */
static double *cc_per(compute_cuda *c, size_t n)
{
    if (n > c->per_cap) {
        cugpu *g = c->g;
        if (cc_failed(c))
            g->ops->dev_free(g, c->per);
        else
            g->ops->dev_free_async(g, c->s, c->per);
        size_t cap = c->per_cap ? c->per_cap : 256;
        while (cap < n)
            cap *= 2;
        if (devmem_is_none(c->per = g->ops->dev_alloc_async(g, c->s, cap * sizeof(double)))) {
            cc_fatal(c, "the loss terms");
            c->per_cap = 0; /* a failed context launches nothing that would use it */
            return NULL;
        }
        c->per_cap = cap;
    }
    return c->per.p;
}

void cc_zero_dev(compute_cuda *c, void *p, size_t bytes)
{
    trk_launch l = {.kernel = TRK_K_ZERO};
    l.u.zero.p = p;
    l.u.zero.words = bytes / 4;
    if (l.u.zero.words)
        cc_launch(c, &l);
}

/* ---- dense layers ---------------------------------------------------------------------- */

static uint64_t cc_extent(uint64_t rows, uint64_t cols, uint64_t ld)
{
    assert(ld >= cols);
    return rows == 0 ? 0 : (rows - 1) * ld + cols;
}

void cc_gemm(compute *base, bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha, cspan A, uint64_t lda,
             cspan B, uint64_t ldb, float beta, cspan C, uint64_t ldc)
{
    compute_cuda *c = cc(base);
    assert(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX &&
           ldc <= INT32_MAX);
    assert(cc_extent(ta ? K : M, ta ? M : K, lda) <= A.n);
    assert(cc_extent(tb ? N : K, tb ? K : N, ldb) <= B.n);
    assert(cc_extent(M, N, ldc) <= C.n);
    trk_launch l = {.kernel = TRK_L_GEMM};
    l.u.gemm.ta = ta;
    l.u.gemm.tb = tb;
    l.u.gemm.M = (int)M;
    l.u.gemm.N = (int)N;
    l.u.gemm.K = (int)K;
    l.u.gemm.lda = (int)lda;
    l.u.gemm.ldb = (int)ldb;
    l.u.gemm.ldc = (int)ldc;
    l.u.gemm.alpha = alpha;
    l.u.gemm.beta = beta;
    l.u.gemm.A = cc_f32(A);
    l.u.gemm.B = cc_f32(B);
    l.u.gemm.C = cc_f32(C);
    l.u.gemm.handle = c->blas;
    l.u.gemm.api = c->blas_api;
    if (M && N)
        cc_launch(c, &l);
}

void cc_bias_rows(compute *base, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    assert(bias.n == cols && y.n >= rows * cols);
    trk_launch l = {.kernel = TRK_K_BIAS_ROWS};
    l.u.bias.y = cc_f32(y);
    l.u.bias.bias = cc_f32(bias);
    l.u.bias.rows = rows;
    l.u.bias.cols = cols;
    cc_launch(cc(base), &l);
}

void cc_transpose_bias(compute *base, cspan src, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    assert(src.n >= rows * cols && bias.n == cols && y.n >= rows * cols);
    trk_launch l = {.kernel = TRK_K_TRANSPOSE_BIAS};
    l.u.bias.y = cc_f32(y);
    l.u.bias.src = cc_f32(src);
    l.u.bias.bias = cc_f32(bias);
    l.u.bias.rows = rows;
    l.u.bias.cols = cols;
    cc_launch(cc(base), &l);
}

void cc_colsum(compute *base, cspan src, uint64_t rows, uint64_t cols, cspan dst, compute_sum_from from)
{
    assert(src.n >= rows * cols && dst.n == cols && rows >= 1);
    trk_launch l = {.kernel = TRK_K_COLSUM};
    l.u.colsum.dst = cc_f32(dst);
    l.u.colsum.src = cc_f32(src);
    l.u.colsum.rows = rows;
    l.u.colsum.cols = cols;
    l.u.colsum.from_row0 = from == COMPUTE_SUM_FROM_ROW0;
    cc_launch(cc(base), &l);
}

/* ReLU forward (y from x) and backward (dy masked by pre, in place): one
 * launch shape, x read and y written element by element. */
static void cc_relu_launch(compute *base, int kernel, cspan x, cspan y)
{
    assert(x.n == y.n);
    trk_launch l = {.kernel = kernel};
    l.u.relu.y = cc_f32(y);
    l.u.relu.x = cc_f32(x);
    l.u.relu.n = x.n;
    cc_launch(cc(base), &l);
}

void cc_relu(compute *base, cspan x, cspan y) { cc_relu_launch(base, TRK_K_RELU, x, y); }
void cc_relu_bwd(compute *base, cspan pre, cspan dy) { cc_relu_launch(base, TRK_K_RELU_BWD, pre, dy); }

/* ---- EmbeddingBag (mean) ------------------------------------------------------------------ */

void cc_bag_mean(compute *base, cspan table, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan out)
{
    compute_cuda *c = cc(base);
    assert(D >= 1 && L >= 1 && table.n % D == 0 && out.n >= (uint64_t)B * D);
    size_t n = (size_t)B * L;
#ifndef NDEBUG
    for (size_t k = 0; k < n; k++)
        assert(idx[k] >= 0 && (uint64_t)idx[k] < table.n / D);
#endif
    cc_stage st = cc_stage_begin(c, cc_round(n * sizeof *idx));
    trk_launch l = {.kernel = TRK_K_BAG_MEAN};
    l.u.bag.idx = cc_stage_copy(&st, idx, n * sizeof *idx);
    cc_stage_upload(c, &st);
    l.u.bag.out = cc_f32(out);
    l.u.bag.table = cc_f32(table);
    l.u.bag.D = D;
    l.u.bag.B = B;
    l.u.bag.L = L;
    cc_launch(c, &l);
}

/* dx /= L on the GPU: PyTorch's mean backward, once per bag. */
static float *cc_bag_scale(compute_cuda *c, cspan dx, uint64_t D, uint32_t B, uint64_t L)
{
    assert(dx.n >= (uint64_t)B * D);
    trk_launch l = {.kernel = TRK_K_SCALE_DIV};
    l.u.scale.g = cc_f32(dx);
    l.u.scale.n = (size_t)B * D;
    l.u.scale.d = (float)L;
    cc_launch(c, &l);
    return l.u.scale.g;
}

/* The n keys grouped by row (shared/rowgroup.h, in c->rg); returns the
 * count of unique rows. */
static size_t cc_group(compute_cuda *c, const int64_t *keys, size_t n, uint64_t nrows)
{
    for (size_t k = 0; k < n; k++)
        assert(keys[k] >= 0 && (uint64_t)keys[k] < nrows);
    (void)nrows;
    if (rowgroup_sort(&c->rg, keys, n) < 0) {
        compute_fail(&c->base, "compute (%s): out of host memory for %zu indices", c->name, n);
        return 0; /* the callers stop there */
    }
    return c->rg.nu;
}

/* c->rg (n, nu unique rows) into the ring: the unique rows (to `rows` on
 * the host too where not NULL), each one's first occurrence in off (nu + 1
 * entries) and the occurrences' positions / div (the sample of an index,
 * or an update's own number) in occ. */
static void cc_group_stage(compute_cuda *c, cc_stage *st, size_t n, size_t nu, uint64_t div, int64_t *rows,
                           const int64_t **d_rows, const uint32_t **d_off, const uint32_t **d_occ)
{
    void *dr, *doff, *docc;
    int64_t *urows = cc_stage_part(st, nu * sizeof *urows, &dr);
    uint32_t *off = cc_stage_part(st, (nu + 1) * sizeof *off, &doff);
    uint32_t *occ = cc_stage_part(st, n * sizeof *occ, &docc);
    assert(c->rg.n == n && c->rg.nu == nu);
    rowgroup_csr(&c->rg, NULL, div, urows, off, occ);
    if (rows)
        memcpy(rows, urows, nu * sizeof *rows);
    *d_rows = dr;
    *d_off = doff;
    *d_occ = docc;
}

static size_t cc_group_bytes(size_t n, size_t nu)
{
    return cc_round(nu * sizeof(int64_t)) + cc_round((nu + 1) * sizeof(uint32_t)) + cc_round(n * sizeof(uint32_t));
}

/* The backward's values: for each unique row, dx's rows of its samples
 * summed in batch order, into dst (row urows[u] where dense, row u where
 * compact). */
static uint64_t cc_bag_bwd(compute_cuda *c, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                           uint64_t nrows, int64_t *rows, float *dst, bool dense)
{
    const float *g = cc_bag_scale(c, dx, D, B, L);
    size_t n = (size_t)B * L, nu = cc_group(c, idx, n, nrows);
    if (cc_failed(c))
        return 0;
    cc_stage st = cc_stage_begin(c, cc_group_bytes(n, nu));
    trk_launch l = {.kernel = TRK_K_BAG_BWD};
    const int64_t *d_rows;
    cc_group_stage(c, &st, n, nu, L, rows, &d_rows, &l.u.bag_bwd.off, &l.u.bag_bwd.occ);
    cc_stage_upload(c, &st);
    l.u.bag_bwd.dst = dst;
    l.u.bag_bwd.dst_rows = dense ? d_rows : NULL;
    l.u.bag_bwd.g = g;
    l.u.bag_bwd.D = D;
    l.u.bag_bwd.nnz = nu;
    if (nu)
        cc_launch(c, &l);
    return nu;
}

void cc_bag_mean_bwd_dense(compute *base, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan G)
{
    compute_cuda *c = cc(base);
    assert(D >= 1 && L >= 1 && G.n % D == 0);
    float *T = cc_f32(G);
    cc_zero_dev(c, T, G.n * sizeof *T);
    cc_bag_bwd(c, dx, D, idx, B, L, G.n / D, NULL, T, true);
}

uint64_t cc_bag_mean_bwd_sparse(compute *base, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                int64_t *rows, uint32_t *slot, cspan vals)
{
    compute_cuda *c = cc(base);
    assert(D >= 1 && L >= 1);
    (void)slot; /* grouped by sorting: the slots stay COMPUTE_NO_SLOT */
    float *v = cc_f32(vals);
    uint64_t nnz = cc_bag_bwd(c, dx, D, idx, B, L, UINT64_MAX, rows, v, false);
    assert(vals.n >= nnz * D);
    return nnz;
}

/* ---- loss heads ---------------------------------------------------------------------------- */

static void cc_loss_sum(compute_cuda *c, cspan loss, const double *per, size_t n, bool negate, double div)
{
    assert(loss.n == 1);
    trk_launch l = {.kernel = TRK_K_LOSS_SUM};
    l.u.sum.loss = cc_f64(loss);
    l.u.sum.per = per;
    l.u.sum.n = n;
    l.u.sum.negate = negate;
    l.u.sum.div = div;
    cc_launch(c, &l);
}

static const int64_t *cc_targets(compute_cuda *c, cc_stage *st, const int64_t *y, size_t n, uint64_t C)
{
#ifndef NDEBUG
    for (size_t k = 0; k < n; k++)
        assert(y[k] >= 0 && (uint64_t)y[k] < C);
#endif
    (void)C;
    *st = cc_stage_begin(c, cc_round(n * sizeof *y));
    const int64_t *d = cc_stage_copy(st, y, n * sizeof *y);
    cc_stage_upload(c, st);
    return d;
}

void cc_softmax_ce(compute *base, cspan z, uint32_t B, uint64_t C, const int64_t *y, cspan prob, cspan q, cspan loss)
{
    compute_cuda *c = cc(base);
    uint64_t n = (uint64_t)B * C;
    assert(B >= 1 && z.n >= n && prob.n >= n && q.n >= n && loss.n == 1);
    (void)n; /* only the assertion reads it */
    cc_stage st;
    trk_launch l = {.kernel = TRK_K_SOFTMAX_CE};
    l.u.head.y = cc_targets(c, &st, y, B, C);
    l.u.head.z = cc_f32(z);
    l.u.head.p = cc_f32(prob);
    l.u.head.q = cc_f32(q);
    l.u.head.B = B;
    l.u.head.C = C;
    l.u.head.per = cc_per(c, B);
    cc_launch(c, &l);
    cc_loss_sum(c, loss, l.u.head.per, B, true, (double)B);
}

void cc_softmax_ce_bwd(compute *base, cspan prob, cspan q, uint32_t B, uint64_t C, const int64_t *y, cspan dz)
{
    compute_cuda *c = cc(base);
    uint64_t n = (uint64_t)B * C;
    assert(B >= 1 && prob.n >= n && q.n >= n && dz.n >= n);
    (void)n; /* only the assertion reads it */
    cc_stage st;
    trk_launch l = {.kernel = TRK_K_SOFTMAX_CE_BWD};
    l.u.head.y = cc_targets(c, &st, y, B, C);
    l.u.head.p = cc_f32(prob);
    l.u.head.q = cc_f32(q);
    l.u.head.dz = cc_f32(dz);
    l.u.head.B = B;
    l.u.head.C = C;
    l.u.head.invB = 1.0f / (float)B;
    cc_launch(c, &l);
}

void cc_ce_logits(compute *base, cspan z, uint32_t R, uint32_t C, const int64_t *y, cspan dz, cspan loss)
{
    compute_cuda *c = cc(base);
    uint64_t n = (uint64_t)R * C;
    assert(R >= 1 && R <= INT32_MAX && C <= INT32_MAX && z.n >= n && dz.n >= n && loss.n == 1);
    (void)n; /* only the assertion reads it */
    cc_stage st;
    trk_launch l = {.kernel = TRK_K_CE_LOGITS};
    l.u.head.y = cc_targets(c, &st, y, R, C);
    l.u.head.z = cc_f32(z);
    l.u.head.dz = cc_f32(dz);
    l.u.head.B = R;
    l.u.head.C = C;
    l.u.head.per = cc_per(c, R);
    cc_launch(c, &l);
    cc_loss_sum(c, loss, l.u.head.per, R, false, (double)(int)R);
}

void cc_l1(compute *base, cspan y, uint64_t n, cspan dy, cspan loss)
{
    compute_cuda *c = cc(base);
    assert(n >= 1 && y.n >= n && dy.n >= n && loss.n == 1);
    trk_launch l = {.kernel = TRK_K_L1};
    l.u.l1.v = cc_f32(y);
    l.u.l1.dv = cc_f32(dy);
    l.u.l1.n = n;
    l.u.l1.g = 1.0f / (float)n;
    l.u.l1.per = cc_per(c, n);
    cc_launch(c, &l);
    cc_loss_sum(c, loss, l.u.l1.per, n, false, (double)n);
}

/* ---- SGD ------------------------------------------------------------------------------------- */

void cc_sgd_dense(compute *base, cspan p, cspan g, cspan buf, float lr, float momentum, bool first)
{
    assert(p.n == g.n);
    trk_launch l = {.kernel = TRK_K_SGD};
    l.u.sgd.w = cc_f32(p);
    l.u.sgd.g = cc_f32(g);
    l.u.sgd.n = p.n;
    l.u.sgd.nlr = -lr;
    l.u.sgd.momentum = momentum;
    if (!buf.buf) {
        l.u.sgd.mode = TRK_SGD_PLAIN;
    } else {
        assert(buf.n == p.n);
        l.u.sgd.buf = cc_f32(buf);
        l.u.sgd.mode = first ? TRK_SGD_FIRST : TRK_SGD_MOMENTUM;
    }
    cc_launch(cc(base), &l);
}

void cc_sgd_sparse(compute *base, cspan table, uint64_t cols, const int64_t *rows, const float *vals, uint64_t nnz,
                   float lr)
{
    compute_cuda *c = cc(base);
    assert(cols >= 1 && table.n % cols == 0);
    float *T = cc_f32(table);
    if (nnz == 0)
        return;
    size_t nu = cc_group(c, rows, nnz, table.n / cols), vbytes = nnz * cols * sizeof *vals;
    if (cc_failed(c))
        return;
    cc_stage st = cc_stage_begin(c, cc_group_bytes(nnz, nu) + cc_round(vbytes));
    trk_launch l = {.kernel = TRK_K_SGD_ROWS};
    cc_group_stage(c, &st, nnz, nu, 1, NULL, &l.u.sgd_rows.urows, &l.u.sgd_rows.off, &l.u.sgd_rows.occ);
    l.u.sgd_rows.vals = cc_stage_copy(&st, vals, vbytes);
    cc_stage_upload(c, &st);
    l.u.sgd_rows.table = T;
    l.u.sgd_rows.cols = cols;
    l.u.sgd_rows.nu = nu;
    l.u.sgd_rows.nlr = -lr;
    cc_launch(c, &l);
}
