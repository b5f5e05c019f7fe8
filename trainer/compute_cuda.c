/* compute_cuda.c — the compute layer on a GPU (see compute.h), through the
 * GPU layer of shared/cugpu.h: one in-order stream, the trainer's kernels
 * (trainer/cuda/kernels.cu: cmath.h's arithmetic in the cpu layer's order)
 * and cuBLAS for the products, queued on it as library calls. The same code
 * runs on the fake GPU (device "fake-cuda": host memory, a worker thread
 * running the kernels' host loops and cblas_sgemm), so that every machine
 * tests it, under ASan and TSan too.
 *
 * Memory. A buffer's kind says where it is: device memory (stream-ordered
 * allocations on the context's stream: usable by what is queued after,
 * freed after what was queued before), pinned host memory (the GPU's
 * page-locked allocation), plain host memory (malloc). Host views exist for
 * the host kinds only; device buffers are NULL. Arithmetic takes device
 * buffers only (asserted).
 *
 * Order. read and write of device memory are async copies on the stream:
 * the host side must stay as it is until a mark recorded after them is done
 * (or compute_sync). A mark is an event recorded on the stream (the ring
 * of shared/gpu/evring.h, CC_MARKS events recorded again in turn; an old
 * mark whose event was recorded again is answered by a newer point, later
 * in the same order: never done too early). Host
 * memory buffers (pinned, host) are read and written by the host after the
 * stream has drained, so they see every write enqueued before.
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
 * Errors. The layer's calls return nothing: a GPU that fails (a launch, a
 * copy, a lost device) ends the process with the reason on stderr
 * (log_error: "compute (cuda): ..."), as a CPU trainer would end on a fault.
 */
#include "trainer/compute_impl.h"
#include "trainer/cuda/kernels_host.h"
#include "shared/devspec.h"
#include "shared/cugpu.h"
#include "shared/gpu.h"
#include "shared/gpu/evring.h"
#include "shared/gpu/staging.h"
#include "shared/log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PSBENCH_HAVE_CUDA
#include "shared/cudaload.h"
#endif

/* Events in the marks' ring (each one timed: compute_elapsed). */
#define CC_MARKS COMPUTE_TIMED_MARKS
/* The staging ring's chunks (a larger call gets a chunk its size), and the
 * bytes of chunks past which it waits for the GPU rather than make another:
 * two, one filled while the GPU reads the other. */
#define CC_STAGE_BYTES ((size_t)1 << 20)
#define CC_STAGE_LIMIT (2 * CC_STAGE_BYTES)
#define CC_ALIGN 16

typedef struct compute_cuda {
    compute base;
    char name[16]; /* "cuda" or "fake-cuda" */
    cugpu *g;
    cugpu_stream *s;
    void *blas;           /* cublasHandle_t (real GPU), else NULL */
    const void *blas_api; /* its cublas_api */
    evring marks;  /* the marks (shared/gpu/evring.h: the latest CC_MARKS held) */
    staging stage; /* host arguments on their way (shared/gpu/staging.h) */
    /* per-sample loss terms (device), grown as needed */
    devmem per;
    size_t per_cap;
    /* a failed context's staging sink (cc_stage_sink) */
    unsigned char *sink;
    size_t sink_cap;
    /* the host's scratch for grouping occurrences by row */
    struct cc_occ *occ;
    size_t occ_cap;
    uint64_t live; /* buffers not yet released */
    cugpu_event *ipc_ev; /* CUDA IPC: the event a peer waits for (compute_share_record); NULL: not made */
} compute_cuda;

typedef struct cc_occ {
    int64_t row;
    uint32_t pos;
} cc_occ;

static compute_cuda *cc(compute *c) { return (compute_cuda *)c; }

/* The GPU failed under `what` (g->err says how): the context has failed
 * (compute.h: it does nothing more; the trainer reports the reason). */
static void cc_fatal(compute_cuda *c, const char *what)
{
    compute_fail(&c->base, "compute (%s): %s: %s", c->name, what, c->g->err);
}

static bool cc_failed(const compute_cuda *c) { return compute_failed(&c->base); }

/* ---- order ---------------------------------------------------------------------- */

static cmark cc_mark(compute *base)
{
    compute_cuda *c = cc(base);
    if (cc_failed(c)) /* nothing is recorded any more */
        evring_fail(&c->marks);
    cmark m;
    if (evring_mark(&c->marks, &m) < 0)
        cc_fatal(c, "an event");
    return m;
}

static bool cc_done(compute *base, cmark m)
{
    compute_cuda *c = cc(base);
    if (cc_failed(c)) /* failed: nothing more will complete */
        return true;
    int rc = evring_done(&c->marks, m);
    if (rc < 0) {
        cc_fatal(c, "an event");
        return true;
    }
    return rc == 0;
}

static void cc_wait(compute *base, cmark m)
{
    compute_cuda *c = cc(base);
    if (!cc_failed(c) && evring_wait(&c->marks, m) < 0) /* failed: the event will never complete */
        cc_fatal(c, "the stream");
}

/* cudaEventElapsedTime between the marks' events (created with timing:
 * cugpu's events are), once both completed; a mark whose event was
 * recorded again for a later mark cannot be timed any more. */
static int cc_elapsed(compute *base, cmark from, cmark to, double *ms)
{
    compute_cuda *c = cc(base);
    assert(from <= to && to <= c->marks.marks);
    if (from == 0 || !evring_held(&c->marks, from) || !evring_held(&c->marks, to) || cc_failed(c))
        return -1;
    if (!cc_done(base, to) || !cc_done(base, from))
        return 1;
    if (cc_failed(c))
        return -1;
    if (from == to) {
        *ms = 0;
        return 0;
    }
    float f = 0;
    if (evring_elapsed(&c->marks, from, to, &f) < 0) {
        cc_fatal(c, "an event's time");
        return -1;
    }
    *ms = f > 0 ? (double)f : 0.0;
    return 0;
}

static void cc_sync(compute *base)
{
    compute_cuda *c = cc(base);
    if (!cc_failed(c) && c->g->ops->sync(c->g, c->s) < 0)
        cc_fatal(c, "the stream");
    evring_reset(&c->marks);
    staging_reset(&c->stage); /* every chunk is free */
}

/* ---- launches and staging ----------------------------------------------------------- */

static void cc_launch(compute_cuda *c, const trk_launch *l)
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

/* ---- spans ------------------------------------------------------------------------- */

static float *cc_f32(cspan s)
{
    assert(cspan_valid(s) && s.buf->dtype == COMPUTE_F32 && s.buf->mem == COMPUTE_MEM_DEVICE);
    return (float *)s.buf->ptr + s.off;
}

static double *cc_f64(cspan s)
{
    assert(cspan_valid(s) && s.buf->dtype == COMPUTE_F64 && s.buf->mem == COMPUTE_MEM_DEVICE);
    return (double *)s.buf->ptr + s.off;
}

static void *cc_addr(cspan s) { return (char *)s.buf->ptr + s.off * compute_dtype_size(s.buf->dtype); }

/* A buffer of device memory (its tag says so) as the GPU layer takes it. */
static devmem cc_buf_dev(const cbuf *b)
{
    assert(b->mem == COMPUTE_MEM_DEVICE);
    return devmem_of(b->ptr);
}

/* A span of device memory, likewise. */
static devmem cc_dev(cspan s)
{
    assert(cspan_valid(s));
    return devmem_of(cc_addr(s));
}

/* ---- memory ------------------------------------------------------------------------ */

static void cc_zero_dev(compute_cuda *c, void *p, size_t bytes)
{
    trk_launch l = {.kernel = TRK_K_ZERO};
    l.u.zero.p = p;
    l.u.zero.words = bytes / 4;
    if (l.u.zero.words)
        cc_launch(c, &l);
}

static cbuf *cc_alloc(compute *base, uint64_t n, compute_dtype t, compute_mem mem, char *err, size_t errlen)
{
    compute_cuda *c = cc(base);
    cugpu *g = c->g;
    size_t es = compute_dtype_size(t);
    if (n > SIZE_MAX / es) {
        errbuf_set(err, errlen, "compute (%s): %llu elements do not fit in memory", c->name, (unsigned long long)n);
        return NULL;
    }
    size_t bytes = (size_t)n * es;
    void *p; /* the cbuf's address: device memory where mem says so (its tag) */
    if (mem == COMPUTE_MEM_DEVICE)
        p = g->ops->dev_alloc_async(g, c->s, bytes).p;
    else if (mem == COMPUTE_MEM_PINNED)
        p = g->ops->host_alloc(g, bytes);
    else
        p = calloc(n ? n : 1, es);
    if (!p) {
        errbuf_set(err, errlen, "compute (%s): out of %s memory for %llu elements (%s)", c->name,
                   mem == COMPUTE_MEM_DEVICE ? "device" : mem == COMPUTE_MEM_PINNED ? "pinned" : "host",
                   (unsigned long long)n, mem == COMPUTE_MEM_HOST ? "calloc" : g->err);
        return NULL;
    }
    if (mem == COMPUTE_MEM_DEVICE)
        cc_zero_dev(c, p, bytes);
    else if (mem == COMPUTE_MEM_PINNED)
        memset(p, 0, bytes);
    cbuf *b = cbuf_wrap(base, p, n, t, mem);
    if (!b) {
        if (mem == COMPUTE_MEM_DEVICE)
            g->ops->dev_free_async(g, c->s, devmem_of(p));
        else if (mem == COMPUTE_MEM_PINNED)
            g->ops->host_free(g, p);
        else
            free(p);
        errbuf_set(err, errlen, "compute (%s): out of memory", c->name);
        return NULL;
    }
    c->live++;
    return b;
}

static void cc_release(compute *base, cbuf *b)
{
    compute_cuda *c = cc(base);
    assert(b->owner == base && c->live > 0);
    c->live--;
    if (b->shared) {
        /* Not stream-ordered: wait for what may use it (a peer's folds
         * are the peer's business: it has closed or will close it). */
        cc_sync(base);
        c->g->ops->dev_free_ipc(c->g, cc_buf_dev(b));
    } else if (b->mem == COMPUTE_MEM_DEVICE && cc_failed(c)) {
        c->g->ops->dev_free(c->g, cc_buf_dev(b)); /* a failed stream runs nothing more, a queued free neither */
    } else if (b->mem == COMPUTE_MEM_DEVICE) {
        c->g->ops->dev_free_async(c->g, c->s, cc_buf_dev(b)); /* after what was queued before */
    } else {
        cc_sync(base); /* a copy in flight may still use it */
        if (b->mem == COMPUTE_MEM_PINNED)
            c->g->ops->host_free(c->g, b->ptr);
        else
            free(b->ptr);
    }
    free(b);
}

static void *cc_host_view(compute *base, cbuf *b)
{
    assert(b->owner == base);
    (void)base;
    return b->mem == COMPUTE_MEM_DEVICE ? NULL : b->ptr;
}

/* The fake GPU's device memory is host memory, so its device addresses
 * are host addresses: a test's stand-in for NCCL may use them as such. */
static devmem cc_device_view(compute *base, cbuf *b)
{
    assert(b->owner == base);
    (void)base;
    return b->mem == COMPUTE_MEM_DEVICE ? cc_buf_dev(b) : devmem_none();
}

static void cc_read(compute *base, cspan src, void *dst)
{
    compute_cuda *c = cc(base);
    assert(cspan_valid(src));
    size_t bytes = src.n * compute_dtype_size(src.buf->dtype);
    if (src.buf->mem != COMPUTE_MEM_DEVICE) {
        cc_sync(base);
        memcpy(dst, cc_addr(src), bytes);
    } else if (bytes && c->g->ops->copy_d2h(c->g, c->s, dst, cc_dev(src), bytes) < 0) {
        cc_fatal(c, "a copy to the host");
    }
}

static void cc_write(compute *base, cspan dst, const void *src)
{
    compute_cuda *c = cc(base);
    assert(cspan_valid(dst));
    size_t bytes = dst.n * compute_dtype_size(dst.buf->dtype);
    if (dst.buf->mem != COMPUTE_MEM_DEVICE) {
        cc_sync(base);
        memcpy(cc_addr(dst), src, bytes);
    } else if (bytes && c->g->ops->copy_h2d(c->g, c->s, cc_dev(dst), src, bytes) < 0) {
        cc_fatal(c, "a copy to the GPU");
    }
}

static void cc_zero(compute *base, cspan dst)
{
    compute_cuda *c = cc(base);
    assert(cspan_valid(dst));
    size_t bytes = dst.n * compute_dtype_size(dst.buf->dtype);
    if (dst.buf->mem != COMPUTE_MEM_DEVICE) {
        cc_sync(base);
        memset(cc_addr(dst), 0, bytes);
    } else {
        cc_zero_dev(c, cc_addr(dst), bytes);
    }
}

/* ---- dense layers ---------------------------------------------------------------------- */

static uint64_t cc_extent(uint64_t rows, uint64_t cols, uint64_t ld)
{
    assert(ld >= cols);
    return rows == 0 ? 0 : (rows - 1) * ld + cols;
}

static void cc_gemm(compute *base, bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha, cspan A,
                    uint64_t lda, cspan B, uint64_t ldb, float beta, cspan C, uint64_t ldc)
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

static void cc_bias_rows(compute *base, cspan bias, uint64_t rows, uint64_t cols, cspan y)
{
    assert(bias.n == cols && y.n >= rows * cols);
    trk_launch l = {.kernel = TRK_K_BIAS_ROWS};
    l.u.bias.y = cc_f32(y);
    l.u.bias.bias = cc_f32(bias);
    l.u.bias.rows = rows;
    l.u.bias.cols = cols;
    cc_launch(cc(base), &l);
}

static void cc_transpose_bias(compute *base, cspan src, cspan bias, uint64_t rows, uint64_t cols, cspan y)
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

static void cc_colsum(compute *base, cspan src, uint64_t rows, uint64_t cols, cspan dst, compute_sum_from from)
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

static void cc_relu(compute *base, cspan x, cspan y) { cc_relu_launch(base, TRK_K_RELU, x, y); }
static void cc_relu_bwd(compute *base, cspan pre, cspan dy) { cc_relu_launch(base, TRK_K_RELU_BWD, pre, dy); }

/* ---- EmbeddingBag (mean) ------------------------------------------------------------------ */

static void cc_bag_mean(compute *base, cspan table, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L, cspan out)
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

static int cc_cmp_occ(const void *a, const void *b)
{
    const cc_occ *x = a, *y = b;
    if (x->row != y->row)
        return (x->row > y->row) - (x->row < y->row);
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* The n keys grouped by row: c->occ sorted by (row, position); returns the
 * count of unique rows. */
static size_t cc_group(compute_cuda *c, const int64_t *keys, size_t n, uint64_t nrows)
{
    assert(n <= UINT32_MAX);
    if (n > c->occ_cap) {
        size_t cap = c->occ_cap ? c->occ_cap : 256;
        while (cap < n)
            cap *= 2;
        cc_occ *o = realloc(c->occ, cap * sizeof *o);
        if (!o) {
            compute_fail(&c->base, "compute (%s): out of host memory for %zu indices", c->name, n);
            return 0; /* the callers stop there */
        }
        c->occ = o;
        c->occ_cap = cap;
    }
    for (size_t k = 0; k < n; k++) {
        assert(keys[k] >= 0 && (uint64_t)keys[k] < nrows);
        (void)nrows;
        c->occ[k].row = keys[k];
        c->occ[k].pos = (uint32_t)k;
    }
    qsort(c->occ, n, sizeof *c->occ, cc_cmp_occ);
    size_t nu = 0;
    for (size_t k = 0; k < n; k++)
        nu += k == 0 || c->occ[k].row != c->occ[k - 1].row;
    return nu;
}

/* c->occ (n, nu unique rows) into the ring: the unique rows (to `rows` on
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
    size_t u = 0;
    for (size_t k = 0; k < n; k++) {
        if (k == 0 || c->occ[k].row != c->occ[k - 1].row) {
            urows[u] = c->occ[k].row;
            off[u++] = (uint32_t)k;
        }
        occ[k] = (uint32_t)(c->occ[k].pos / div);
    }
    off[nu] = (uint32_t)n;
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

static void cc_bag_mean_bwd_dense(compute *base, cspan dx, uint64_t D, const int64_t *idx, uint32_t B, uint64_t L,
                                  cspan G)
{
    compute_cuda *c = cc(base);
    assert(D >= 1 && L >= 1 && G.n % D == 0);
    float *T = cc_f32(G);
    cc_zero_dev(c, T, G.n * sizeof *T);
    cc_bag_bwd(c, dx, D, idx, B, L, G.n / D, NULL, T, true);
}

static uint64_t cc_bag_mean_bwd_sparse(compute *base, cspan dx, uint64_t D, const int64_t *idx, uint32_t B,
                                       uint64_t L, int64_t *rows, uint32_t *slot, cspan vals)
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

static void cc_softmax_ce(compute *base, cspan z, uint32_t B, uint64_t C, const int64_t *y, cspan prob, cspan q,
                          cspan loss)
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

static void cc_softmax_ce_bwd(compute *base, cspan prob, cspan q, uint32_t B, uint64_t C, const int64_t *y, cspan dz)
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

static void cc_ce_logits(compute *base, cspan z, uint32_t R, uint32_t C, const int64_t *y, cspan dz, cspan loss)
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

static void cc_l1(compute *base, cspan y, uint64_t n, cspan dy, cspan loss)
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

static void cc_sgd_dense(compute *base, cspan p, cspan g, cspan buf, float lr, float momentum, bool first)
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

static void cc_sgd_sparse(compute *base, cspan table, uint64_t cols, const int64_t *rows, const float *vals,
                          uint64_t nnz, float lr)
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

/* ---- the context ----------------------------------------------------------------------------- */

static void cc_destroy(compute *base)
{
    compute_cuda *c = cc(base);
    assert(c->live == 0 && "compute_free with buffers still allocated");
    cugpu *g = c->g;
    if (c->s)
        g->ops->sync(g, c->s);
#ifdef PSBENCH_HAVE_CUDA
    if (c->blas) /* before its stream goes */
        ((const cublas_api *)c->blas_api)->cublasDestroy((cublasHandle_t)c->blas);
#endif
    if (c->s) {
        if (cc_failed(c))
            g->ops->dev_free(g, c->per); /* a failed stream runs no queued free */
        else
            g->ops->dev_free_async(g, c->s, c->per);
        g->ops->stream_free(g, c->s); /* waits for the frees queued on it */
    }
    evring_free(&c->marks);
    if (c->ipc_ev)
        g->ops->event_free(g, c->ipc_ev);
    staging_free(&c->stage);
    free(c->occ);
    free(c->sink);
    cugpu_destroy(g);
    free(c);
}

/* ---- CUDA IPC (compute.h) ----------------------------------------------------------- */

static cbuf *cc_alloc_shared(compute *base, uint64_t n, compute_dtype t, char *err, size_t errlen)
{
    compute_cuda *c = cc(base);
    cugpu *g = c->g;
    size_t es = compute_dtype_size(t);
    if (n == 0 || n > SIZE_MAX / es) {
        errbuf_set(err, errlen, "compute (%s): %llu elements cannot be shared", c->name, (unsigned long long)n);
        return NULL;
    }
    size_t bytes = (size_t)n * es;
    devmem p = g->ops->dev_alloc_ipc(g, bytes);
    if (devmem_is_none(p)) {
        errbuf_set(err, errlen, "compute (%s): no shareable device memory for %llu elements: %s", c->name,
                   (unsigned long long)n, g->err);
        return NULL;
    }
    cc_zero_dev(c, p.p, bytes);
    cbuf *b = cbuf_wrap(base, p.p, n, t, COMPUTE_MEM_DEVICE);
    if (!b) {
        cc_sync(base);
        g->ops->dev_free_ipc(g, p);
        errbuf_set(err, errlen, "compute (%s): out of memory", c->name);
        return NULL;
    }
    b->shared = true;
    c->live++;
    return b;
}

static int cc_share_export(compute *base, cbuf *b, compute_share *x, char *err, size_t errlen)
{
    compute_cuda *c = cc(base);
    cugpu *g = c->g;
    if (!c->ipc_ev && !(c->ipc_ev = g->ops->event_new_ipc(g))) {
        errbuf_set(err, errlen, "compute (%s): an IPC event: %s", c->name, g->err);
        return -1;
    }
    cugpu_ipc_handle hm, he;
    if (g->ops->ipc_export(g, cc_buf_dev(b), &hm) < 0 || g->ops->event_export(g, c->ipc_ev, &he) < 0) {
        errbuf_set(err, errlen, "compute (%s): exporting: %s", c->name, g->err);
        return -1;
    }
    memset(x, 0, sizeof *x);
    snprintf(x->gpu, sizeof x->gpu, "%s", g->uuid);
    memcpy(x->mem, hm.bytes, sizeof x->mem);
    memcpy(x->ev, he.bytes, sizeof x->ev);
    x->bytes = b->n * compute_dtype_size(b->dtype);
    x->base = cc_buf_dev(b);
    return 0;
}

static void cc_share_record(compute *base)
{
    compute_cuda *c = cc(base);
    assert(c->ipc_ev);
    if (c->g->ops->event_record(c->g, c->s, c->ipc_ev) < 0)
        cc_fatal(c, "recording the IPC event");
}

static devmem cc_peer_open(compute *base, const unsigned char *mem, uint64_t bytes, char *err, size_t errlen)
{
    compute_cuda *c = cc(base);
    cugpu_ipc_handle h;
    memcpy(h.bytes, mem, sizeof h.bytes);
    devmem p = c->g->ops->ipc_open(c->g, &h, bytes);
    if (devmem_is_none(p))
        errbuf_set(err, errlen, "compute (%s): %s", c->name, c->g->err);
    return p;
}

static void cc_peer_close(compute *base, devmem p)
{
    compute_cuda *c = cc(base);
    cc_sync(base); /* no copy from it in flight */
    c->g->ops->ipc_close(c->g, p);
}

static void cc_first_ne(compute *base, cspan a, cspan b, cspan first)
{
    compute_cuda *c = cc(base);
    /* Constant host memory: valid however late the copy runs. */
    static const uint64_t none = UINT64_MAX;
    assert(a.n == b.n && first.n == 1 && first.buf->dtype == COMPUTE_F64);
    assert(a.buf->dtype == COMPUTE_F32 && b.buf->dtype == COMPUTE_F32);
    cc_write(base, first, &none);
    if (!a.n)
        return;
    trk_launch l = {.kernel = TRK_K_FIRST_NE};
    l.u.ne.a = cc_f32(a);
    l.u.ne.b = cc_f32(b);
    l.u.ne.n = a.n;
    l.u.ne.first = (unsigned long long *)cc_addr(first);
    cc_launch(c, &l);
}

static void cc_copy_from_peer(compute *base, cspan dst, devmem src)
{
    compute_cuda *c = cc(base);
    assert(cspan_valid(dst) && dst.buf->mem == COMPUTE_MEM_DEVICE);
    size_t bytes = dst.n * compute_dtype_size(dst.buf->dtype);
    if (bytes && c->g->ops->copy_d2d(c->g, c->s, cc_dev(dst), src, bytes) < 0)
        cc_fatal(c, "a copy from a peer's GPU memory");
}


static const compute_ops cuda_ops = {
    .name = "cuda",
    .destroy = cc_destroy,
    .alloc = cc_alloc,
    .release = cc_release,
    .host_view = cc_host_view,
    .device_view = cc_device_view,
    .read = cc_read,
    .write = cc_write,
    .zero = cc_zero,
    .mark = cc_mark,
    .done = cc_done,
    .wait = cc_wait,
    .sync = cc_sync,
    .elapsed = cc_elapsed,
    .gemm = cc_gemm,
    .bias_rows = cc_bias_rows,
    .transpose_bias = cc_transpose_bias,
    .colsum = cc_colsum,
    .relu = cc_relu,
    .relu_bwd = cc_relu_bwd,
    .bag_mean = cc_bag_mean,
    .bag_mean_bwd_dense = cc_bag_mean_bwd_dense,
    .bag_mean_bwd_sparse = cc_bag_mean_bwd_sparse,
    .softmax_ce = cc_softmax_ce,
    .softmax_ce_bwd = cc_softmax_ce_bwd,
    .ce_logits = cc_ce_logits,
    .l1 = cc_l1,
    .sgd_dense = cc_sgd_dense,
    .sgd_sparse = cc_sgd_sparse,
    .alloc_shared = cc_alloc_shared,
    .share_export = cc_share_export,
    .share_record = cc_share_record,
    .peer_open = cc_peer_open,
    .peer_close = cc_peer_close,
    .copy_from_peer = cc_copy_from_peer,
    .first_ne = cc_first_ne,
};

/* The context on g (taken over: destroyed with it, or here on failure). */
static compute *cc_new_on(cugpu *g, const char *name, char *err, size_t errlen)
{
    compute_cuda *c = calloc(1, sizeof *c);
    if (!c) {
        cugpu_destroy(g);
        errbuf_set(err, errlen, "compute on %s: out of memory", name);
        return NULL;
    }
    c->base.ops = &cuda_ops;
    c->g = g;
    snprintf(c->name, sizeof c->name, "%s", g->ops->name[0] == 'f' ? "fake-cuda" : "cuda");
    bool ok = (c->s = g->ops->stream_new(g)) != NULL && evring_init(&c->marks, g, c->s, CC_MARKS, false) == 0;
    if (ok) { /* the first chunk now: a GPU without room for it fails here, not mid-step */
        staging_init(&c->stage, g, c->s, CC_STAGE_BYTES, CC_STAGE_LIMIT);
        ok = staging_room(&c->stage, CC_STAGE_BYTES) == 0;
    }
    if (!ok) {
        errbuf_set(err, errlen, "compute on %s: %s", name, g->err);
        cc_destroy(&c->base);
        return NULL;
    }
    return &c->base;
}

#ifdef PSBENCH_HAVE_CUDA
/* cuBLAS on the GPU the calling thread has made current. */
static int cc_blas(compute_cuda *c, const char *name, char *err, size_t errlen)
{
    char why[400];
    const cublas_api *bl = cudaload_cublas(why, sizeof why);
    if (!bl) {
        errbuf_set(err, errlen, "compute on %s: %s", name, why);
        return -1;
    }
    cublasHandle_t h = NULL;
    cublasStatus_t st = bl->cublasCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        errbuf_set(err, errlen, "compute on %s: cublasCreate: cuBLAS status %d", name, (int)st);
        return -1;
    }
    c->blas = h;
    c->blas_api = bl;
    return 0;
}
#endif

compute *compute_cuda_new(device_spec dev, char *err, size_t errlen)
{
    char name[DEVSPEC_NAME_MAX], why[512];
    devspec_name(dev, name);
    assert(devspec_on_gpu(dev));
    if (dev.kind == DEVICE_FAKE_CUDA) {
        /* Tests: the environment's fake GPU, as the server's fake-cuda
         * device's (cugpu_fake_from_env: the trainer's default delay). */
        cugpu *g = cugpu_fake_from_env(&trk_kernels, CUGPU_FAKE_DELAY_US_TRAINER, why, sizeof why);
        if (!g) {
            errbuf_set(err, errlen, "compute on %s: %s", name, why);
            return NULL;
        }
        return cc_new_on(g, name, err, errlen);
    }
    int index = devspec_gpu(dev); /* plain "cuda" here (unplaced): GPU 0 */
#ifdef PSBENCH_HAVE_CUDA
    if (gpu_check_device(name, index, why, sizeof why) < 0) {
        errbuf_set(err, errlen, "%s", why);
        return NULL;
    }
    cugpu *g = cugpu_cuda_new(index, &trk_kernels, why, sizeof why);
    if (!g) {
        errbuf_set(err, errlen, "--device %s: %s", name, why);
        return NULL;
    }
    compute *base = cc_new_on(g, name, err, errlen);
    if (base && cc_blas(cc(base), name, err, errlen) < 0) {
        cc_destroy(base);
        return NULL;
    }
    return base;
#else
    (void)index;
    (void)why;
    errbuf_set(err, errlen, "--device %s: this build has no CUDA (configured without the CUDA toolkit, or with "
               "-DPSBENCH_CUDA=OFF): use --device cpu", name);
    return NULL;
#endif
}
