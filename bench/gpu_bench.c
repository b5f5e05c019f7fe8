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
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fake") == 0)
            fake = true;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            index = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
            max_bytes = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!what && (strcmp(argv[i], "kernels") == 0 || strcmp(argv[i], "roundtrip") == 0))
            what = argv[i];
        else {
            fprintf(stderr, "usage: gpu-bench [--fake] [--device N] kernels [--max-bytes B] | roundtrip "
                            "[--seconds S]\n");
            return 2;
        }
    }
    if (!what)
        return bench_fail("usage", "say kernels or roundtrip");
    char err[512];
    cugpu *g = bench_gpu(fake, index, err, sizeof err);
    if (!g)
        return bench_fail(fake ? "fake GPU" : "GPU", err);
    printf("GPU %d: %s%s\n", g->device, g->name, fake ? " — FAKE: these figures check the program only" : "");
    int rc;
    if (strcmp(what, "kernels") == 0) {
        rc = bench_kernels(g, max_bytes);
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
