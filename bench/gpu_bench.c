/* gpu_bench.c — the GPU figures of bench/gpu_server.sh, each beside its
 * limit measured in the same run:
 *
 *   gpu-bench [--fake] [--device N] kernels [--max-bytes B]
 *     (a) the averaging kernels' bandwidth (bytes read and written per
 *     second, from CUDA events around R launches) as a ratio of a
 *     device-to-device copy of the same buffer size: psb_sum_scale over 2
 *     and 8 sources (the batch average, the batch-update step's sum) and
 *     psb_fold add-scale (one push of the streaming average), and the
 *     narrow pushes' folds of --compress bf16 (psb_fold_narrow_out: the
 *     last push's, into a 16-bit answer; psb_fold_narrow_pair: two
 *     trainers' pushes into their mean, all 16-bit; psb_fold_narrow_in: a
 *     push widened into the f32 accumulator), for buffers of 1 KiB,
 *     4 MiB and 64 MiB of floats (a narrow fold's elements as many);
 *
 *   gpu-bench [--fake] [--device N] embedding [--rows R]
 *     (c) the embedding server's kernels on an R x 64 table (default
 *     262144 rows: 64 MiB) and a lookup of 2048 bags of 8 random rows (a
 *     few named twice), each against a device-to-device copy of the table
 *     in the same run: psb_gather (the bags' sums), psb_scatter_sgd (the
 *     sparse step: a thread per looked-up row and column, the rows grouped
 *     on the host as the cuda device does), and the dense step (psb_zero,
 *     psb_bag_grad, psb_dense_sgd: the whole table's gradient and step);
 *
 *   gpu-bench [--fake] [--device N] roundtrip [--seconds S]
 *     (b) the GPU round trip of one bucket as the server's reactor sees it,
 *     through the cuda device itself (server/cuda/device_cuda.c): each
 *     trainer's push copied into pinned staging and to the GPU, the folds,
 *     the copy of the mean back into pinned memory, the host function
 *     waking the reactor's eventfd, the `done` callback — one bucket alone,
 *     then 4 and 16 in flight; for 8 pushes of 1 KiB and 2 of 4 MiB. The
 *     limit beside it: pinned host-to-device and device-to-host copy rates
 *     measured in the same run (for the 4 MiB bucket: its bytes at those
 *     rates).
 *
 * --fake runs the same on cugpu's fake GPU (host threads): it checks the
 * program and the script, its figures mean nothing and are labelled so.
 * Exit 0 after printing, 1 on a failure (no GPU answers: the reason).
 */
#include "server/cuda/kernels_host.h"
#include "server/device.h"
#include "shared/clock.h"
#include "shared/rowgroup.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bench_fail(const char *what, const char *why)
{
    fprintf(stderr, "gpu-bench: %s: %s\n", what, why);
    return 1;
}

static cugpu *bench_gpu(bool fake, int index, char *err, size_t errlen)
{
    if (fake)
        return cugpu_fake_new(&psb_kernels, 0, 0, err, errlen);
#ifdef PSBENCH_HAVE_CUDA
    return cugpu_cuda_new(index, &psb_kernels, err, errlen);
#else
    (void)index;
    snprintf(err, errlen, "this build has no CUDA (use --fake to check the program)");
    return NULL;
#endif
}

/* ---- (a) kernels ---------------------------------------------------------------- */

/* ms per operation of `op` run `reps` times between two events. */
typedef int (*bench_op)(cugpu *g, cugpu_stream *s, void *ctx);

static double bench_time(cugpu *g, cugpu_stream *s, bench_op op, void *ctx, int reps)
{
    cugpu_event *a = g->ops->event_new(g), *b = g->ops->event_new(g);
    double ms = -1;
    if (a && b) {
        for (int i = 0; i < 3; i++) /* warm-up */
            if (op(g, s, ctx) < 0)
                goto out;
        if (g->ops->event_record(g, s, a) < 0)
            goto out;
        for (int i = 0; i < reps; i++)
            if (op(g, s, ctx) < 0)
                goto out;
        float t;
        if (g->ops->event_record(g, s, b) < 0 || g->ops->sync(g, s) < 0 || g->ops->elapsed_ms(g, a, b, &t) < 0)
            goto out;
        ms = t / reps;
    }
out:
    if (a)
        g->ops->event_free(g, a);
    if (b)
        g->ops->event_free(g, b);
    return ms;
}

typedef struct kctx {
    devmem dst, src[8];
    const float *const *srcs; /* device array of src (a launch's argument) */
    unsigned nsrc;
    size_t n;
} kctx;

static int op_copy(cugpu *g, cugpu_stream *s, void *ctx)
{
    kctx *k = ctx;
    return g->ops->copy_d2d(g, s, k->dst, k->src[0], k->n * sizeof(float));
}

static int op_sum(cugpu *g, cugpu_stream *s, void *ctx)
{
    kctx *k = ctx;
    psb_launch l = {.kernel = PSB_K_SUM_SCALE};
    l.u.sum.dst = devmem_f32(k->dst).p;
    l.u.sum.srcs = k->srcs;
    l.u.sum.nsrc = k->nsrc;
    l.u.sum.n = k->n;
    l.u.sum.scale = 1.0f / (float)k->nsrc;
    l.u.sum.vec = 1; /* device allocations: 16-byte aligned */
    return g->ops->launch(g, s, &l);
}

static int op_fold(cugpu *g, cugpu_stream *s, void *ctx)
{
    kctx *k = ctx;
    psb_launch l = {.kernel = PSB_K_FOLD};
    l.u.fold.op = PSB_FOLD_ADD_SCALE;
    l.u.fold.acc = devmem_f32(k->dst).p;
    l.u.fold.src = devmem_f32(k->src[0]).p;
    l.u.fold.n = k->n;
    l.u.fold.s = 0.5f;
    return g->ops->launch(g, s, &l);
}

/* A narrow push's last fold (--compress bf16): acc f32 read, the push's
 * and the answer's 16-bit values (into dst, as 16-bit). */
static int op_narrow_out(cugpu *g, cugpu_stream *s, void *ctx)
{
    kctx *k = ctx;
    psb_launch l = {.kernel = PSB_K_FOLD_NARROW_OUT};
    l.u.narrow.op = PSB_FOLD_ADD_SCALE;
    l.u.narrow.bf = 1;
    l.u.narrow.out = (uint16_t *)k->dst.p;
    l.u.narrow.acc = devmem_f32(k->src[1]).p;
    l.u.narrow.src = (const uint16_t *)k->src[0].p;
    l.u.narrow.n = k->n;
    l.u.narrow.s = 0.5f;
    return g->ops->launch(g, s, &l);
}

/* A narrow push widened as it is added to the f32 accumulator (a middle
 * push with 3 trainers or more; average-batch's stored copy): acc read and
 * written, the push's 16-bit values read. */
static int op_narrow_in(cugpu *g, cugpu_stream *s, void *ctx)
{
    kctx *k = ctx;
    psb_launch l = {.kernel = PSB_K_FOLD_NARROW_IN};
    l.u.widen.op = PSB_FOLD_ADD;
    l.u.widen.bf = 1;
    l.u.widen.acc = devmem_f32(k->dst).p;
    l.u.widen.src = (const uint16_t *)k->src[0].p;
    l.u.widen.n = k->n;
    l.u.widen.s = 0;
    return g->ops->launch(g, s, &l);
}

/* Two trainers' narrow pushes (--compress bf16): the stash and the second
 * push read, their mean written, all 16-bit. */
static int op_narrow_pair(cugpu *g, cugpu_stream *s, void *ctx)
{
    kctx *k = ctx;
    psb_launch l = {.kernel = PSB_K_FOLD_NARROW_PAIR};
    l.u.pair.op = PSB_FOLD_ADD_SCALE;
    l.u.pair.bf = 1;
    l.u.pair.out = (uint16_t *)k->dst.p;
    l.u.pair.stash = (const uint16_t *)k->src[1].p;
    l.u.pair.src = (const uint16_t *)k->src[0].p;
    l.u.pair.n = k->n;
    l.u.pair.s = 0.5f;
    return g->ops->launch(g, s, &l);
}

static int bench_kernels(cugpu *g, size_t max_bytes)
{
    cugpu_stream *s = g->ops->stream_new(g);
    if (!s)
        return bench_fail("stream", g->err);
    static const size_t sizes[] = {1024, 4u << 20, 64u << 20};
    printf("%-26s %10s %12s %12s %12s %8s\n", "kernel", "bytes", "us/launch", "GB/s moved", "copy GB/s", "ratio");
    int rc = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && !rc; si++) {
        size_t bytes = sizes[si];
        if (bytes > max_bytes)
            continue;
        kctx k = {.n = bytes / sizeof(float)};
        void **ptrs = NULL;
        if (devmem_is_none(k.dst = g->ops->dev_alloc(g, bytes)))
            return bench_fail("device memory", g->err);
        for (int i = 0; i < 8; i++)
            if (devmem_is_none(k.src[i] = g->ops->dev_alloc(g, bytes)))
                return bench_fail("device memory", g->err);
        /* Sources' contents do not matter to the rate; make them finite. */
        float *host = g->ops->host_alloc(g, bytes);
        ptrs = g->ops->host_alloc(g, 8 * sizeof(void *));
        devmem dsrcs = g->ops->dev_alloc(g, 8 * sizeof(void *));
        if (!host || !ptrs || devmem_is_none(dsrcs))
            return bench_fail("memory", g->err);
        for (size_t i = 0; i < k.n; i++)
            host[i] = (float)(i % 251) * 0.01f;
        for (int i = 0; i < 8; i++) {
            ptrs[i] = k.src[i].p; /* the kernel's array of device addresses */
            g->ops->copy_h2d(g, s, k.src[i], host, bytes);
        }
        g->ops->copy_h2d(g, s, k.dst, host, bytes);
        g->ops->copy_h2d(g, s, dsrcs, ptrs, 8 * sizeof(void *));
        k.srcs = dsrcs.p;
        int reps = bytes >= (64u << 20) ? 20 : bytes >= (4u << 20) ? 200 : 2000;
        double copy_ms = bench_time(g, s, op_copy, &k, reps);
        if (copy_ms <= 0) {
            rc = bench_fail("copy", g->err);
            break;
        }
        double copy_rate = 2.0 * (double)bytes / (copy_ms / 1e3) / 1e9;
        struct {
            const char *name;
            bench_op op;
            unsigned nsrc;
            double moved; /* bytes read and written, in buffers */
        } rows[] = {{"psb_sum_scale, 2 sources", op_sum, 2, 3},
                    {"psb_sum_scale, 8 sources", op_sum, 8, 9},
                    {"psb_fold add-scale", op_fold, 1, 3},
                    /* per element: acc 4 + push 2 + answer 2 bytes; stash 2 + push 2 + answer 2; acc 4 + push 2
                     * + acc 4 */
                    {"psb_fold_narrow_out bf16", op_narrow_out, 1, 2},
                    {"psb_fold_narrow_pair bf16", op_narrow_pair, 1, 1.5},
                    {"psb_fold_narrow_in bf16", op_narrow_in, 1, 2.5}};
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            k.nsrc = rows[r].nsrc;
            double ms = bench_time(g, s, rows[r].op, &k, reps);
            if (ms <= 0) {
                rc = bench_fail(rows[r].name, g->err);
                break;
            }
            double rate = rows[r].moved * (double)bytes / (ms / 1e3) / 1e9;
            printf("%-26s %10zu %12.2f %12.1f %12.1f %8.3f\n", rows[r].name, bytes, ms * 1e3, rate, copy_rate,
                   rate / copy_rate);
        }
        g->ops->host_free(g, host);
        g->ops->host_free(g, ptrs);
        g->ops->dev_free(g, dsrcs);
        g->ops->dev_free(g, k.dst);
        for (int i = 0; i < 8; i++)
            g->ops->dev_free(g, k.src[i]);
    }
    g->ops->stream_free(g, s);
    return rc;
}

/* ---- (c) the embedding kernels ---------------------------------------------------- */

enum { EMB_COLS = 64, EMB_BAGS = 2048, EMB_PER_BAG = 8 };

typedef struct ectx {
    devmem table, copy, gsum, out, grad;
    psb_launch gather, scatter, zero, bag_grad, dense;
    size_t table_bytes;
} ectx;

static int op_emb_copy(cugpu *g, cugpu_stream *s, void *ctx)
{
    ectx *e = ctx;
    return g->ops->copy_d2d(g, s, e->copy, e->table, e->table_bytes);
}

static int op_emb_gather(cugpu *g, cugpu_stream *s, void *ctx) { return g->ops->launch(g, s, &((ectx *)ctx)->gather); }
static int op_emb_scatter(cugpu *g, cugpu_stream *s, void *ctx)
{
    return g->ops->launch(g, s, &((ectx *)ctx)->scatter);
}

static int op_emb_dense(cugpu *g, cugpu_stream *s, void *ctx)
{
    ectx *e = ctx;
    if (g->ops->launch(g, s, &e->zero) < 0 || g->ops->launch(g, s, &e->bag_grad) < 0)
        return -1;
    return g->ops->launch(g, s, &e->dense);
}

/* n bytes from host to a new device buffer (none on failure). */
static devmem emb_upload(cugpu *g, cugpu_stream *s, const void *src, size_t n)
{
    devmem d = g->ops->dev_alloc(g, n ? n : 4);
    if (!devmem_is_none(d) && n && (g->ops->copy_h2d(g, s, d, src, n) < 0 || g->ops->sync(g, s) < 0))
        return devmem_none();
    return d;
}

static int bench_embedding(cugpu *g, size_t rows)
{
    cugpu_stream *s = g->ops->stream_new(g);
    if (!s)
        return bench_fail("stream", g->err);
    const size_t nnz = (size_t)EMB_BAGS * EMB_PER_BAG, cols = EMB_COLS;
    ectx e = {.table_bytes = rows * cols * sizeof(float)};
    int64_t *idx = malloc(nnz * sizeof *idx), *off = malloc(EMB_BAGS * sizeof *off);
    float *host = malloc(e.table_bytes > EMB_BAGS * cols * 4 ? e.table_bytes : EMB_BAGS * cols * 4);
    int64_t *urows = malloc(nnz * sizeof *urows);
    uint32_t *uoff = malloc((nnz + 1) * sizeof *uoff), *occ = malloc(nnz * sizeof *occ),
             *bag_of = malloc(nnz * sizeof *bag_of);
    rowgroup rg = {0};
    if (!idx || !off || !host || !urows || !uoff || !occ || !bag_of)
        return bench_fail("host memory", "out of memory");
    uint64_t x = 88172645463325252ull; /* xorshift: the same lookup every run */
    for (size_t i = 0; i < nnz; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        idx[i] = (int64_t)(x % rows);
        if (i % 97 == 5)
            idx[i] = idx[i - 1]; /* a row named twice, as lookups do */
        bag_of[i] = (uint32_t)(i / EMB_PER_BAG);
    }
    for (size_t b = 0; b < EMB_BAGS; b++)
        off[b] = (int64_t)(b * EMB_PER_BAG);
    if (rowgroup_sort(&rg, idx, nnz) < 0)
        return bench_fail("host memory", "out of memory");
    rowgroup_csr(&rg, bag_of, 1, urows, uoff, occ);
    for (size_t i = 0; i < e.table_bytes / 4; i++)
        host[i] = (float)(i % 251) * 0.01f;
    e.table = emb_upload(g, s, host, e.table_bytes);
    e.copy = g->ops->dev_alloc(g, e.table_bytes);
    e.gsum = g->ops->dev_alloc(g, e.table_bytes);
    e.out = g->ops->dev_alloc(g, EMB_BAGS * cols * sizeof(float));
    e.grad = emb_upload(g, s, host, EMB_BAGS * cols * sizeof(float));
    devmem d_idx = emb_upload(g, s, idx, nnz * sizeof *idx), d_off = emb_upload(g, s, off, EMB_BAGS * sizeof *off);
    devmem d_urows = emb_upload(g, s, urows, rg.nu * sizeof *urows);
    devmem d_uoff = emb_upload(g, s, uoff, (rg.nu + 1) * sizeof *uoff), d_occ = emb_upload(g, s, occ, nnz * 4);
    if (devmem_is_none(e.table) || devmem_is_none(e.copy) || devmem_is_none(e.gsum) || devmem_is_none(e.out) ||
        devmem_is_none(e.grad) || devmem_is_none(d_idx) || devmem_is_none(d_off) || devmem_is_none(d_urows) ||
        devmem_is_none(d_uoff) || devmem_is_none(d_occ))
        return bench_fail("device memory", g->err);
    psb_launch b = {.kernel = PSB_K_GATHER};
    b.u.bags.table = devmem_f32(e.table).p;
    b.u.bags.cols = cols;
    b.u.bags.idx = d_idx.p;
    b.u.bags.off = d_off.p;
    b.u.bags.nnz = nnz;
    b.u.bags.bags = EMB_BAGS;
    b.u.bags.out = devmem_f32(e.out).p;
    b.u.bags.grad = devmem_f32(e.grad).p;
    b.u.bags.lr = 1e-6f;
    e.gather = b;
    e.bag_grad = b;
    e.bag_grad.kernel = PSB_K_BAG_GRAD;
    e.bag_grad.u.bags.table = devmem_f32(e.gsum).p;
    e.scatter = (psb_launch){.kernel = PSB_K_SCATTER_SGD};
    e.scatter.u.rows.table = devmem_f32(e.table).p;
    e.scatter.u.rows.cols = cols;
    e.scatter.u.rows.urows = d_urows.p;
    e.scatter.u.rows.uoff = d_uoff.p;
    e.scatter.u.rows.occ = d_occ.p;
    e.scatter.u.rows.nu = rg.nu;
    e.scatter.u.rows.grad = devmem_f32(e.grad).p;
    e.scatter.u.rows.lr = 1e-6f;
    e.zero = (psb_launch){.kernel = PSB_K_ZERO};
    e.zero.u.dense.table = devmem_f32(e.gsum).p;
    e.zero.u.dense.n = rows * cols;
    e.dense = (psb_launch){.kernel = PSB_K_DENSE_SGD};
    e.dense.u.dense.table = devmem_f32(e.table).p;
    e.dense.u.dense.gsum = devmem_f32(e.gsum).p;
    e.dense.u.dense.n = rows * cols;
    e.dense.u.dense.lr = 1e-6f;
    printf("table %zu x %zu floats (%.1f MiB), %d bags of %d rows (%zu rows named, %zu unique)\n", rows, cols,
           (double)e.table_bytes / (1 << 20), EMB_BAGS, EMB_PER_BAG, nnz, rg.nu);
    printf("%-34s %12s %14s %8s\n", "kernel", "us/launch", "table copy us", "ratio");
    int reps = 20, rc = 0;
    double copy_ms = bench_time(g, s, op_emb_copy, &e, reps);
    struct {
        const char *name;
        bench_op op;
    } rows_[] = {{"psb_gather", op_emb_gather},
                 {"psb_scatter_sgd (row-parallel)", op_emb_scatter},
                 {"dense step (zero, bag_grad, sgd)", op_emb_dense}};
    for (size_t r = 0; r < sizeof rows_ / sizeof rows_[0] && copy_ms > 0; r++) {
        double ms = bench_time(g, s, rows_[r].op, &e, reps);
        if (ms <= 0) {
            rc = bench_fail(rows_[r].name, g->err);
            break;
        }
        /* the ratio: the kernel's time over the copy's (the dense step
         * touches the table 4 times over: zero, and sgd's read + write of
         * table and gsum's read) */
        printf("%-34s %12.2f %14.2f %8.3f\n", rows_[r].name, ms * 1e3, copy_ms * 1e3, ms / copy_ms);
    }
    if (copy_ms <= 0)
        rc = bench_fail("copy", g->err);
    devmem all[] = {e.table, e.copy, e.gsum, e.out, e.grad, d_idx, d_off, d_urows, d_uoff, d_occ};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        g->ops->dev_free(g, all[i]);
    g->ops->stream_free(g, s);
    rowgroup_free(&rg);
    free(idx);
    free(off);
    free(host);
    free(urows);
    free(uoff);
    free(occ);
    free(bag_of);
    return rc;
}

/* ---- (b) the bucket round trip through the cuda device ----------------------------- */

typedef struct rt_bucket {
    devbuf *acc;
    device_job job;
    int *left;
} rt_bucket;

static void rt_done(device_job *j)
{
    rt_bucket *b = j->arg;
    (*b->left)--;
}

/* Submit one bucket: the first push received into the accumulator (the
 * direct receive), the others folded from host memory (a socket's buffer),
 * the last with the mean's scale, then the mean made host-visible. */
static void rt_bucket_start(device *d, rt_bucket *b, const uint8_t *push, size_t bytes, int pushes)
{
    device_write(d, b->acc, 0, push, bytes);
    for (int p = 1; p < pushes; p++)
        device_fold(d, p + 1 < pushes ? FOLD_ADD : FOLD_ADD_SCALE, b->acc, 0, push, bytes / sizeof(float),
                    1.0f / (float)pushes);
    memset(&b->job, 0, sizeof b->job);
    b->job.op = JOB_BARRIER;
    b->job.to_host = b->acc;
    b->job.done = rt_done;
    b->job.arg = b;
    device_submit(d, &b->job);
}

static int bench_roundtrip(struct event_base *base, device *d, double seconds)
{
    static const struct {
        const char *name;
        int pushes;
        size_t bytes;
    } loads[] = {{"8 x 1 KiB", 8, 1024}, {"2 x 4 MiB", 2, 4u << 20}};
    static const int flights[] = {1, 4, 16};
    printf("%-10s %9s %14s %14s %10s\n", "bucket", "in flight", "us per bucket", "buckets/s", "rounds");
    for (size_t li = 0; li < 2; li++) {
        size_t bytes = loads[li].bytes;
        uint8_t *push = malloc(bytes);
        if (!push)
            return bench_fail("memory", "out of memory");
        for (size_t i = 0; i < bytes / 4; i++)
            ((float *)(void *)push)[i] = (float)(i % 13);
        for (size_t fi = 0; fi < 3; fi++) {
            int flight = flights[fi];
            rt_bucket b[16];
            int left = 0;
            for (int i = 0; i < flight; i++) {
                b[i].left = &left;
                if (!(b[i].acc = device_buf_new(d, bytes)))
                    return bench_fail("device memory", "cannot allocate a bucket");
            }
            uint64_t t0 = clock_now_ns(), rounds = 0;
            double elapsed = 0;
            while (elapsed < seconds || rounds < 3) {
                left = flight;
                for (int i = 0; i < flight; i++)
                    rt_bucket_start(d, &b[i], push, bytes, loads[li].pushes);
                while (left > 0)
                    event_base_loop(base, EVLOOP_ONCE);
                rounds++;
                elapsed = (double)(clock_now_ns() - t0) / 1e9;
            }
            for (int i = 0; i < flight; i++) {
                if (b[i].job.error)
                    return bench_fail("the device", b[i].job.error);
                device_buf_free(d, b[i].acc);
            }
            double per = elapsed / (double)(rounds * (uint64_t)flight);
            printf("%-10s %9d %14.1f %14.0f %10llu\n", loads[li].name, flight, per * 1e6, 1.0 / per,
                   (unsigned long long)rounds);
        }
        free(push);
    }
    return 0;
}

/* Pinned host<->device copy rates, for the round trip's limit. */
static int bench_copies(cugpu *g)
{
    cugpu_stream *s = g->ops->stream_new(g);
    size_t bytes = 64u << 20;
    void *h = g->ops->host_alloc(g, bytes);
    devmem dv = g->ops->dev_alloc(g, bytes);
    if (!s || !h || devmem_is_none(dv))
        return bench_fail("memory", g->err);
    memset(h, 0, bytes);
    for (int dir = 0; dir < 2; dir++) {
        cugpu_event *a = g->ops->event_new(g), *b = g->ops->event_new(g);
        float ms = 0;
        for (int i = 0; i < 11; i++) { /* the first one unmeasured */
            if (i == 1)
                g->ops->event_record(g, s, a);
            if (dir)
                g->ops->copy_d2h(g, s, h, dv, bytes);
            else
                g->ops->copy_h2d(g, s, dv, h, bytes);
        }
        g->ops->event_record(g, s, b);
        if (g->ops->sync(g, s) < 0 || g->ops->elapsed_ms(g, a, b, &ms) < 0)
            return bench_fail("copy", g->err);
        printf("limit: pinned %s copy %.1f GB/s (64 MiB, 10 copies)\n", dir ? "device-to-host" : "host-to-device",
               10.0 * (double)bytes / (ms / 1e3) / 1e9);
        g->ops->event_free(g, a);
        g->ops->event_free(g, b);
    }
    g->ops->host_free(g, h);
    g->ops->dev_free(g, dv);
    g->ops->stream_free(g, s);
    return 0;
}

int main(int argc, char **argv)
{
    bool fake = false;
    int index = 0;
    const char *what = NULL;
    size_t max_bytes = (size_t)64 << 20;
    double seconds = 1.0;
    size_t rows = 262144;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fake") == 0)
            fake = true;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            index = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
            max_bytes = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc && strtoull(argv[i + 1], NULL, 10) > 0)
            rows = strtoull(argv[++i], NULL, 10);
        else if (!what && (strcmp(argv[i], "kernels") == 0 || strcmp(argv[i], "roundtrip") == 0 ||
                           strcmp(argv[i], "embedding") == 0))
            what = argv[i];
        else {
            fprintf(stderr, "usage: gpu-bench [--fake] [--device N] kernels [--max-bytes B] | embedding [--rows R] "
                            "| roundtrip [--seconds S]\n");
            return 2;
        }
    }
    if (!what)
        return bench_fail("usage", "say kernels, embedding or roundtrip");
    char err[512];
    cugpu *g = bench_gpu(fake, index, err, sizeof err);
    if (!g)
        return bench_fail(fake ? "fake GPU" : "GPU", err);
    printf("GPU %d: %s%s\n", g->device, g->name, fake ? " — FAKE: these figures check the program only" : "");
    int rc;
    if (strcmp(what, "kernels") == 0 || strcmp(what, "embedding") == 0) {
        rc = strcmp(what, "kernels") == 0 ? bench_kernels(g, max_bytes) : bench_embedding(g, rows);
        cugpu_destroy(g);
        return rc;
    }
    rc = bench_copies(g);
    if (rc) {
        cugpu_destroy(g);
        return rc;
    }
    struct event_base *base = event_base_new();
    device *d = base ? device_cuda_new(base, g, err, sizeof err) : NULL; /* owns g now */
    if (!d)
        return bench_fail("the cuda device", base ? err : "no event base");
    rc = bench_roundtrip(base, d, seconds);
    device_destroy(d);
    event_base_free(base);
    return rc;
}
