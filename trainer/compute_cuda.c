/* compute_cuda.c — the compute layer on a GPU (see compute.h), through the
 * GPU layer of shared/gpu/cugpu.h: one in-order stream, the trainer's kernels
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
 * in the same order: never done too early). Host memory buffers (pinned,
 * host) are read and written by the host after the stream has drained, so
 * they see every write enqueued before.
 *
 * This file is the context (order, memory, CUDA IPC, the ops table); the
 * arithmetic, with the staging of its host arguments, is
 * compute_cuda_math.c (one way: this file calls into that one).
 *
 * Errors. The layer's calls return nothing: a GPU that fails (a launch, a
 * copy, a lost device) ends the process with the reason on stderr
 * (log_error: "compute (cuda): ..."), as a CPU trainer would end on a fault.
 */
#include "trainer/compute_cuda_int.h"
#include "shared/devspec.h"
#include "shared/gpu.h"
#include "shared/log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#ifdef PSBENCH_HAVE_CUDA
#include "shared/gpu/cudaload.h"
#endif

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

/* ---- memory ------------------------------------------------------------------------ */

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
    rowgroup_free(&c->rg);
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

static void cc_narrow(compute *base, devmem dst, cspan src, int bf)
{
    compute_cuda *c = cc(base);
    assert(cspan_valid(src) && src.buf->dtype == COMPUTE_F32 && (uintptr_t)dst.p % 2 == 0);
    if (!src.n)
        return;
    trk_launch l = {.kernel = TRK_K_NARROW};
    l.u.half.dst = dst.p;
    l.u.half.src = cc_f32(src);
    l.u.half.n = src.n;
    l.u.half.bf = bf;
    cc_launch(c, &l);
}

static void cc_widen(compute *base, cspan dst, devmem src, int bf)
{
    compute_cuda *c = cc(base);
    assert(cspan_valid(dst) && dst.buf->dtype == COMPUTE_F32 && (uintptr_t)src.p % 2 == 0);
    if (!dst.n)
        return;
    trk_launch l = {.kernel = TRK_K_WIDEN};
    l.u.half.dst = cc_f32(dst);
    l.u.half.src = src.p;
    l.u.half.n = dst.n;
    l.u.half.bf = bf;
    cc_launch(c, &l);
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
    .narrow = cc_narrow,
    .widen = cc_widen,
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
