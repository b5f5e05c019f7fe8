/* test_compute.c — the trainer's compute layer (trainer/compute.h): the
 * device selection, buffers and host access (read, write, zero, host views
 * and the staging helpers, marks), and every operation against plain
 * reference loops written out here — bit-equal wherever the arithmetic is
 * the same operations in the same order (all but GEMM, whose summation
 * order is BLAS's: within float tolerance).
 *
 * Each check runs on the cpu layer, then on the cuda layer over the fake
 * GPU ("fake-cuda": device memory without host views, every operation
 * queued on a worker thread, the kernels' host loops): the same references,
 * so the same bits as the cpu's. With PSBENCH_COMPUTE=cuda (ctest
 * unit_compute_cuda, label gpu) they run on GPU 0 instead, exiting 77 with
 * the reason where none answers; there the softmax heads (expf, exp, log:
 * CUDA's, not glibc's) and GEMM (cuBLAS) are compared within a tolerance,
 * the rest bit for bit. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_variant.h"
#include "shared/rng.h"
#include "shared/metrics.h"
#include "trainer/compute.h"
#include "trainer/steptimer.h"
#include "devspec_of.h"

static compute *dev;
static const char *dev_name; /* "cpu", "fake-cuda" or "cuda" */
static bool exact;           /* transcendental functions are glibc's: bit-equal heads */

/* Host copies made by rd(), freed after each test. */
static void *copies[256];
static int ncopies;

/* b's elements on the host (a copy, synchronised). */
static void *rd(cbuf *b)
{
    size_t es = cbuf_dtype(b) == COMPUTE_F64 ? 8 : 4;
    void *h = malloc(cbuf_count(b) * es + 1);
    assert_non_null(h);
    assert_true(ncopies < (int)(sizeof copies / sizeof *copies));
    copies[ncopies++] = h;
    compute_read(dev, cspan_all(b), h);
    compute_sync(dev);
    return h;
}
static float *rdf(cbuf *b) { return rd(b); }

/* h into b, synchronised (so the caller may free h). */
static void wr(cbuf *b, const void *h)
{
    compute_write(dev, cspan_all(b), h);
    compute_sync(dev);
}

static int free_copies(void **state)
{
    (void)state;
    while (ncopies > 0)
        free(copies[--ncopies]);
    return 0;
}

/* got == want bit for bit, or (where the arithmetic may differ: a real
 * GPU's transcendental functions) within a few ulps. */
static void same_f32(const float *got, const float *want, size_t n, bool transcendental)
{
    if (exact || !transcendental) {
        assert_memory_equal(got, want, n * sizeof *got);
        return;
    }
    for (size_t i = 0; i < n; i++)
        assert_float_equal(got[i], want[i], 1e-6 + 1e-5 * fabs(want[i]));
}

static void same_f64(double got, double want, bool transcendental)
{
    if (exact || !transcendental)
        assert_true(got == want);
    else
        assert_float_equal(got, want, 1e-9 + 1e-6 * fabs(want));
}

static cbuf *mk(uint64_t n)
{
    char err[256] = "";
    cbuf *b = compute_alloc(dev, n, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, sizeof err);
    assert_non_null(b);
    return b;
}

/* A buffer of n floats drawn in [-1, 1) (seeded by n and salt). */
static cbuf *mk_rand(uint64_t n, uint64_t salt)
{
    cbuf *b = mk(n);
    float *h = malloc(n * sizeof *h);
    assert_non_null(h);
    rng r;
    rng_seed(&r, 1000 + salt, RNG_STREAM_MODEL);
    rng_fill_uniform(h, n, 1.0, &r);
    wr(b, h);
    free(h);
    return b;
}

static cspan all(cbuf *b) { return cspan_all(b); }

static cbuf *mk_loss(void)
{
    cbuf *b = compute_alloc(dev, 1, COMPUTE_F64, COMPUTE_MEM_DEVICE, NULL, 0);
    assert_non_null(b);
    return b;
}

static void test_select(void **state)
{
    (void)state;
    char err[256] = "";
    assert_string_equal(compute_name(dev), strcmp(dev_name, "cpu") == 0      ? "cpu"
                                           : strcmp(dev_name, "staged") == 0 ? "staged"
                                                                             : "cuda");
    /* cuda:0: a GPU, or refused in one line saying why. */
    compute *g = compute_new(devspec_of("cuda:0"), err, sizeof err);
    if (g) {
        assert_string_equal(compute_name(g), "cuda");
        compute_free(g);
    } else {
        assert_non_null(strstr(err, "--device cuda:0: "));
        assert_null(strchr(err, '\n'));
        char why[256];
        assert_int_equal(gpu_probe_device(0, why, sizeof why), -1); /* none answers, or no CUDA */
    }
    /* The server's test device is none of the compute layer's. */
    assert_null(compute_new((device_spec){.kind = DEVICE_TEST}, err, sizeof err));
    assert_string_equal(err, "compute on 'test': not a device (cpu, or cuda[:N])");
    compute *c = compute_new((device_spec){0}, err, sizeof err); /* zeroed: cpu */
    assert_non_null(c);
    assert_string_equal(compute_name(c), "cpu");
    compute_free(c);
    c = compute_new(devspec_of("fake-cuda"), err, sizeof err); /* every build */
    assert_non_null(c);
    assert_string_equal(compute_name(c), "cuda");
    compute_free(c);
}

/* compute_place: every spec as asked, but plain cuda: placed by rank on
 * the GPUs that answer, or refused saying why. */
static void test_place(void **state)
{
    (void)state;
    char err[256] = "";
    const char *same[] = {"cpu", "cuda:3", "fake-cuda", "staged"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        device_spec out = {DEVICE_TEST, 77};
        assert_int_equal(compute_place(devspec_of(same[i]), 5, &out, err, sizeof err), 0);
        assert_int_equal(out.kind, devspec_of(same[i]).kind);
        assert_int_equal(out.index, devspec_of(same[i]).index);
    }
    device_spec out;
    char why[256];
    int n = gpu_count(why, sizeof why);
    if (compute_place(devspec_of("cuda"), 5, &out, err, sizeof err) == 0) {
        assert_true(n >= 1);
        assert_int_equal(out.kind, DEVICE_CUDA);
        assert_int_equal(out.index, 5 % n);
    } else {
        assert_true(n < 1);
        assert_non_null(strstr(err, "--device cuda: "));
    }
}

static void test_memory(void **state)
{
    (void)state;
    bool cpu = strcmp(dev_name, "cpu") == 0;
    cbuf *b = mk(10);
    assert_int_equal(cbuf_count(b), 10);
    assert_int_equal(cbuf_mem(b), COMPUTE_MEM_DEVICE);
    assert_int_equal(cbuf_dtype(b), COMPUTE_F32);
    float *v = compute_host_view(dev, b);
    assert_true(cpu ? v != NULL : v == NULL); /* device memory has no view on a GPU */
    float *z = rdf(b);
    for (int i = 0; i < 10; i++)
        assert_true(z[i] == 0.0f); /* zeroed */
    const float src[4] = {1.5f, -2, 3, 4};
    compute_write(dev, cspan_at(b, 3, 4), src);
    float back[6];
    compute_read(dev, cspan_at(b, 2, 6), back);
    compute_sync(dev);
    assert_true(back[0] == 0 && back[1] == 1.5f && back[2] == -2 && back[3] == 3 && back[4] == 4 && back[5] == 0);
    compute_zero(dev, cspan_sub(cspan_at(b, 2, 6), 2, 2));
    z = rdf(b);
    assert_true(z[3] == 1.5f && z[4] == 0 && z[5] == 0 && z[6] == 4);
    /* The cpu's host access is zero-copy: views, never the stage; a GPU's
     * goes through the stage. */
    float stage[4];
    const float *r = compute_host_read(dev, cspan_at(b, 3, 4), stage);
    assert_ptr_equal(compute_span_view(dev, cspan_at(b, 3, 4)), cpu ? v + 3 : NULL);
    assert_ptr_equal(r, cpu ? v + 3 : stage);
    assert_true(r[0] == 1.5f && r[1] == 0 && r[3] == 4);
    float *w = compute_host_write_begin(dev, cspan_at(b, 3, 4), stage);
    assert_ptr_equal(w, cpu ? v + 3 : stage);
    w[0] = 9;
    compute_host_write_end(dev, cspan_at(b, 3, 4), w);
    compute_sync(dev);
    assert_true(rdf(b)[3] == 9);
    /* Marks: in order; done once waited for. */
    cmark m1 = compute_mark(dev);
    compute_zero(dev, all(b));
    cmark m2 = compute_mark(dev);
    assert_true(m2 > m1);
    compute_wait(dev, m2);
    assert_true(compute_done(dev, m1) && compute_done(dev, m2));
    /* Memory kinds and doubles; pinned memory has a host view everywhere. */
    cbuf *p = compute_alloc(dev, 3, COMPUTE_F64, COMPUTE_MEM_PINNED, NULL, 0);
    assert_non_null(p);
    assert_int_equal(cbuf_mem(p), COMPUTE_MEM_PINNED);
    double *pv = compute_host_view(dev, p);
    assert_non_null(pv);
    assert_true(pv[0] == 0 && pv[1] == 0 && pv[2] == 0);
    const double d[1] = {0.1};
    compute_write(dev, cspan_at(p, 1, 1), d);
    assert_true(compute_loss(dev, cspan_at(p, 1, 1)) == 0.1);
    assert_true(pv[1] == 0.1);
    /* A device range read into pinned memory: there once its mark is done. */
    cbuf *pf = compute_alloc(dev, 4, COMPUTE_F32, COMPUTE_MEM_PINNED, NULL, 0);
    cbuf *h = compute_alloc(dev, 2, COMPUTE_F32, COMPUTE_MEM_HOST, NULL, 0);
    assert_non_null(pf);
    assert_non_null(h);
    assert_non_null(compute_host_view(dev, h));
    compute_write(dev, cspan_at(b, 0, 4), src);
    compute_read(dev, cspan_at(b, 0, 4), compute_host_view(dev, pf));
    cmark m3 = compute_mark(dev);
    compute_wait(dev, m3);
    assert_true(compute_done(dev, m3));
    assert_memory_equal(compute_host_view(dev, pf), src, sizeof src);
    compute_release(dev, h);
    compute_release(dev, pf);
    compute_release(dev, p);
    compute_release(dev, b);
    compute_release(dev, NULL);
}

/* Many marks (more than a GPU's ring of events): each done once waited
 * for, and an old one still answers. */
static void test_marks(void **state)
{
    (void)state;
    cbuf *b = mk(64);
    cmark first = compute_mark(dev), last = first;
    for (int i = 0; i < 600; i++) {
        compute_zero(dev, all(b));
        cmark m = compute_mark(dev);
        assert_true(m > last);
        last = m;
        if (i % 97 == 0) {
            compute_wait(dev, m);
            assert_true(compute_done(dev, m));
        }
    }
    compute_wait(dev, first);
    compute_wait(dev, last);
    assert_true(compute_done(dev, first) && compute_done(dev, last));
    compute_release(dev, b);
}

/* The time between marks (compute_elapsed): positive across work, in
 * order (a span holds its parts), zero from a mark to itself, and a mark
 * too old to be timed refused. */
static void test_elapsed(void **state)
{
    (void)state;
    cbuf *b = mk(1 << 16);
    cmark m0 = compute_mark(dev);
    for (int i = 0; i < 8; i++)
        compute_zero(dev, all(b));
    cmark m1 = compute_mark(dev);
    for (int i = 0; i < 8; i++)
        compute_zero(dev, all(b));
    cmark m2 = compute_mark(dev);
    cmark m3 = compute_mark(dev); /* nothing between: a point of its own */
    assert_true(m0 < m1 && m1 < m2 && m2 < m3);
    compute_wait(dev, m3);
    double a = -1, bb = -1, c = -1, z = -1, e = -1;
    assert_int_equal(compute_elapsed(dev, m0, m1, &a), 0);
    assert_int_equal(compute_elapsed(dev, m1, m2, &bb), 0);
    assert_int_equal(compute_elapsed(dev, m0, m2, &c), 0);
    assert_int_equal(compute_elapsed(dev, m2, m3, &e), 0);
    assert_int_equal(compute_elapsed(dev, m1, m1, &z), 0);
    assert_true(a > 0 && bb > 0 && e >= 0);
    assert_true(c + 1e-3 >= a && c + 1e-3 >= bb);  /* the whole holds its parts */
    assert_true(c <= a + bb + 1e-3 && c < 60e3); /* and is no more than them */
    assert_true(z == 0);
    /* Only the latest COMPUTE_TIMED_MARKS marks can be timed. */
    cmark last = m3;
    for (int i = 0; i < COMPUTE_TIMED_MARKS; i++)
        last = compute_mark(dev);
    compute_wait(dev, last);
    assert_int_equal(compute_elapsed(dev, m0, last, &a), -1);
    assert_int_equal(compute_elapsed(dev, last, last, &a), 0);
    compute_release(dev, b);
}

/* A fake-cuda context whose GPU holds every operation while the file
 * `path` (a mkstemp template, filled in) exists: unlink it to go on. */
static compute *held_fake_gpu(char *path)
{
    char err[512];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    setenv("PSBENCH_FAKE_GPU_HOLD", path, 1);
    compute *g = compute_new(devspec_of("fake-cuda"), err, sizeof err);
    unsetenv("PSBENCH_FAKE_GPU_HOLD");
    assert_non_null(g);
    return g;
}

/* A GPU's marks are not timed before they are done: the fake GPU held
 * (PSBENCH_FAKE_GPU_HOLD), compute_elapsed answers 1 without waiting, then
 * the time once the hold is lifted and the marks are done. The staged
 * device likewise while a copy before its mark is pending. */
static void test_elapsed_not_before_done(void **state)
{
    (void)state;
    char err[512], path[] = "/tmp/psbench-compute-hold-XXXXXX";
    compute *g = held_fake_gpu(path);
    cbuf *b = compute_alloc(g, 1 << 12, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, sizeof err);
    assert_non_null(b);
    cmark m0 = compute_mark(g);
    compute_zero(g, cspan_all(b));
    cmark m1 = compute_mark(g);
    double ms = -1;
    assert_int_equal(compute_elapsed(g, m0, m1, &ms), 1);
    assert_false(compute_done(g, m1));
    assert_true(ms == -1); /* untouched */
    unlink(path);
    compute_wait(g, m1);
    assert_int_equal(compute_elapsed(g, m0, m1, &ms), 0);
    assert_true(ms > 0);
    compute_release(g, b);
    compute_free(g);

    compute *s = compute_new(devspec_of("staged"), err, sizeof err);
    assert_non_null(s);
    assert_false(compute_lends(s)); /* its memory has no host view: nothing lent is computed on */
    cbuf *d = compute_alloc(s, 8, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, sizeof err);
    float back[8];
    cmark s0 = compute_mark(s);
    compute_read(s, cspan_all(d), back);
    cmark s1 = compute_mark(s);
    assert_int_equal(compute_elapsed(s, s0, s1, &ms), 1); /* the copy is pending */
    compute_wait(s, s1);
    assert_int_equal(compute_elapsed(s, s0, s1, &ms), 0);
    assert_true(ms >= 0);
    compute_release(s, d);
    compute_free(s);
}

/* A GPU that fails under a context (the fake GPU's injected failure of
 * its Nth operation, as a launch failure or a lost device fails a real
 * stream): the context keeps the first reason and does nothing more —
 * later operations return at once, marks, waits and syncs return, reads
 * leave their destination as it was, the loss reads NaN, an allocation
 * fails with the reason — and the process goes on (it used to exit). */
static void test_gpu_failure(void **state)
{
    (void)state;
    char err[512] = "";
    setenv("PSBENCH_FAKE_GPU_FAIL_AT", "3", 1);
    compute *g = compute_new(devspec_of("fake-cuda"), err, sizeof err);
    unsetenv("PSBENCH_FAKE_GPU_FAIL_AT");
    assert_non_null(g);
    assert_int_equal(compute_status(g, err, sizeof err), 0);
    cbuf *b = compute_alloc(g, 1 << 10, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, sizeof err);
    cbuf *l = compute_alloc(g, 1, COMPUTE_F64, COMPUTE_MEM_DEVICE, err, sizeof err);
    assert_non_null(b);
    assert_non_null(l);
    int64_t y[2] = {0, 1};
    for (int k = 0; k < 6; k++) { /* operations 1.. : the third fails, the rest are refused */
        compute_zero(g, cspan_all(b));
        compute_mark(g);
        compute_softmax_ce(g, cspan_at(b, 0, 8), 2, 4, y, cspan_at(b, 8, 8), cspan_at(b, 16, 8), cspan_all(l));
    }
    cmark m = compute_mark(g);
    compute_wait(g, m); /* returns: nothing will complete */
    assert_true(compute_done(g, m));
    compute_sync(g);
    double ms = -1;
    assert_int_equal(compute_elapsed(g, m, m, &ms), -1);
    float back[4] = {7, 7, 7, 7};
    compute_read(g, cspan_at(b, 0, 4), back);
    compute_sync(g);
    assert_true(back[0] == 7 && back[3] == 7);
    assert_true(isnan(compute_loss(g, cspan_all(l))));
    assert_int_equal(compute_status(g, err, sizeof err), -1);
    assert_non_null(strstr(err, "compute (fake-cuda): "));
    assert_non_null(strstr(err, "injected failure of operation 3"));
    char again[512] = "";
    assert_null(compute_alloc(g, 4, COMPUTE_F32, COMPUTE_MEM_DEVICE, again, sizeof again));
    assert_string_equal(again, err); /* the first reason, kept */
    compute_release(g, b);
    compute_release(g, l);
    compute_free(g);
}

/* The step timer (trainer/steptimer.h) on the fake GPU, held: steps end
 * without waiting and without a sample while their marks are not done;
 * once the GPU goes on, a flush records every span and every own sample
 * (a bucket's, steptimer_sample) of every kept step, all marked GPU-timed;
 * a step whose sample reaches further back than the marks a context can
 * time is left out whole and counted; dropped steps are never recorded. */
static void test_steptimer(void **state)
{
    (void)state;
    char err[512], path[] = "/tmp/psbench-stept-hold-XXXXXX";
    compute *g = held_fake_gpu(path);
    metrics *m = metrics_new();
    assert_non_null(m);
    steptimer t;
    steptimer_init(&t, g);
    assert_true(steptimer_on(&t));
    stats *first = steptimer_span(&t, m, "span,first", 0, 1), *whole = steptimer_span(&t, m, "span,whole", 0, 2);
    stats *own = metrics_get(m, "hook,own");
    assert_non_null(first);
    assert_non_null(whole);
    assert_non_null(own);
    cbuf *b = compute_alloc(g, 1 << 12, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, sizeof err);
    assert_non_null(b);
    for (int step = 0; step < 5; step++) {
        if (step == 2) /* the first two dropped, kept and not done (a failed pass's) */
            steptimer_drop(&t);
        steptimer_mark(&t, 0);
        compute_zero(g, cspan_all(b));
        steptimer_mark(&t, 1);
        cmark x = compute_mark(g);
        compute_zero(g, cspan_all(b));
        cmark y = compute_mark(g);
        steptimer_sample(&t, own, x, y);
        steptimer_sample(&t, own, x, y);
        steptimer_mark(&t, 2);
        steptimer_end(&t); /* held: kept, nothing recorded, no wait */
    }
    assert_int_equal(first->count, 0);
    assert_int_equal(own->count, 0);
    unlink(path); /* the GPU goes on */
    steptimer_flush(&t);
    assert_int_equal(first->count, 3);
    assert_int_equal(whole->count, 3);
    assert_int_equal(own->count, 6);
    assert_true(own->min >= 0 && own->max <= whole->max && first->max <= whole->max);
    assert_int_equal(metrics_gpu_timed_count(m), 3);
    assert_int_equal(t.lost, 0);

    /* Too far back: the step is left out whole (its spans too). */
    steptimer_mark(&t, 0);
    cmark old = compute_mark(g);
    for (int k = 0; k < COMPUTE_TIMED_MARKS + 1; k++)
        compute_mark(g);
    steptimer_sample(&t, own, old, compute_mark(g));
    steptimer_mark(&t, 1);
    steptimer_mark(&t, 2);
    steptimer_end(&t);
    steptimer_flush(&t);
    assert_int_equal(t.lost, 1);
    assert_int_equal(whole->count, 3);
    assert_int_equal(own->count, 6);

    steptimer_release(&t);
    compute_release(g, b);
    compute_free(g);
    metrics_free(m);
}

/* C = alpha op(A) op(B) + beta C in double, against compute_gemm. */
static void check_gemm(bool ta, bool tb, uint64_t M, uint64_t N, uint64_t K, float alpha, float beta)
{
    cbuf *A = mk_rand(M * K, 1), *B = mk_rand(K * N, 2), *C = mk_rand(M * N, 3);
    uint64_t lda = ta ? M : K, ldb = tb ? K : N;
    double *want = malloc(M * N * sizeof *want);
    assert_non_null(want);
    const float *a = rdf(A), *b = rdf(B), *c0 = rdf(C);
    for (uint64_t i = 0; i < M; i++)
        for (uint64_t j = 0; j < N; j++) {
            double s = 0;
            for (uint64_t k = 0; k < K; k++)
                s += (double)(ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
            want[i * N + j] = alpha * s + beta * (double)c0[i * N + j];
        }
    compute_gemm(dev, ta, tb, M, N, K, alpha, all(A), lda, all(B), ldb, beta, all(C), N);
    const float *c = rdf(C);
    for (uint64_t i = 0; i < M * N; i++)
        assert_float_equal(c[i], want[i], 1e-4);
    free(want);
    compute_release(dev, A);
    compute_release(dev, B);
    compute_release(dev, C);
}

static void test_gemm(void **state)
{
    (void)state;
    check_gemm(false, false, 5, 7, 3, 1.0f, 0.0f);
    check_gemm(false, true, 4, 6, 9, 1.0f, 1.0f);
    check_gemm(true, false, 8, 3, 5, 1.0f, 0.0f);
    check_gemm(true, true, 2, 5, 4, 0.5f, 0.25f);
    check_gemm(false, false, 33, 17, 65, 1.0f, 0.0f);
}

static void test_bias_transpose_colsum(void **state)
{
    (void)state;
    enum { R = 5, C = 7 };
    cbuf *bias = mk_rand(C, 4), *src = mk_rand(R * C, 5), *y = mk(R * C), *d = mk(C);
    const float *hb = rdf(bias), *hs = rdf(src);
    compute_bias_rows(dev, all(bias), R, C, all(y));
    const float *hy = rdf(y);
    for (int i = 0; i < R; i++)
        assert_memory_equal(hy + i * C, hb, C * sizeof(float));
    /* src is C x R here: y[i][j] = src[j][i] + bias[j] */
    compute_transpose_bias(dev, all(src), all(bias), R, C, all(y));
    hy = rdf(y);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            assert_true(hy[i * C + j] == hs[j * R + i] + hb[j]);
    /* Column sums of src as R x C, both ways of starting. */
    compute_colsum(dev, all(src), R, C, all(d), COMPUTE_SUM_FROM_ROW0);
    const float *hd = rdf(d);
    for (int j = 0; j < C; j++) {
        float s = hs[j];
        for (int i = 1; i < R; i++)
            s += hs[i * C + j];
        assert_true(hd[j] == s);
    }
    compute_colsum(dev, all(src), R, C, all(d), COMPUTE_SUM_FROM_ZERO);
    hd = rdf(d);
    for (int j = 0; j < C; j++) {
        float s = 0;
        for (int i = 0; i < R; i++)
            s += hs[i * C + j];
        assert_true(hd[j] == s);
    }
    /* From zero, -0 sums to +0; from row 0 a lone -0 stays. */
    const float nz = -0.0f;
    cbuf *one = mk(1), *o = mk(1);
    wr(one, &nz);
    compute_colsum(dev, all(one), 1, 1, all(o), COMPUTE_SUM_FROM_ROW0);
    assert_true(signbit(rdf(o)[0]));
    compute_colsum(dev, all(one), 1, 1, all(o), COMPUTE_SUM_FROM_ZERO);
    assert_false(signbit(rdf(o)[0]));
    cbuf *bufs[] = {bias, src, y, d, one, o};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        compute_release(dev, bufs[i]);
}

static void test_relu(void **state)
{
    (void)state;
    enum { N = 50 };
    cbuf *x = mk_rand(N, 6), *y = mk(N), *dy = mk_rand(N, 7);
    const float *dy0 = rdf(dy);
    float *hx = rdf(x);
    hx[0] = 0.0f;
    wr(x, hx);
    compute_relu(dev, all(x), all(y));
    compute_relu_bwd(dev, all(x), all(dy));
    const float *hy = rdf(y), *hdy = rdf(dy);
    for (int i = 0; i < N; i++) {
        float v = hx[i];
        assert_true(hy[i] == (v > 0 ? v : 0.0f));
        assert_true(hdy[i] == (v > 0 ? dy0[i] : 0.0f));
    }
    compute_release(dev, x);
    compute_release(dev, y);
    compute_release(dev, dy);
}

static void test_embedding_bag(void **state)
{
    (void)state;
    enum { ROWS = 9, D = 3, B = 3, L = 4 };
    int64_t idx[B * L] = {4, 1, 4, 8, 0, 8, 8, 2, 7, 1, 5, 1};
    cbuf *W = mk_rand(ROWS * D, 8), *out = mk(B * D), *dx = mk_rand(B * D, 9), *G = mk_rand(ROWS * D, 10);
    cbuf *vals = mk(ROWS * D);
    const float *hW = rdf(W);
    compute_bag_mean(dev, all(W), D, idx, B, L, all(out));
    memset(idx, 0xff, sizeof idx); /* the caller's to reuse on return */
    const int64_t idx0[B * L] = {4, 1, 4, 8, 0, 8, 8, 2, 7, 1, 5, 1};
    memcpy(idx, idx0, sizeof idx);
    const float *ho = rdf(out);
    for (int s = 0; s < B; s++)
        for (int k = 0; k < D; k++) {
            float acc = 0;
            for (int t = 0; t < L; t++)
                acc += hW[idx[s * L + t] * D + k];
            assert_true(ho[s * D + k] == acc / (float)L);
        }
    /* Dense backward: dx / L, scattered once per occurrence. */
    float g[B * D], want[ROWS * D];
    const float *dx0 = rdf(dx);
    for (int k = 0; k < B * D; k++)
        g[k] = dx0[k] / (float)L;
    memset(want, 0, sizeof want);
    for (int s = 0; s < B; s++)
        for (int t = 0; t < L; t++)
            for (int k = 0; k < D; k++)
                want[idx[s * L + t] * D + k] += g[s * D + k];
    compute_bag_mean_bwd_dense(dev, all(dx), D, idx, B, L, all(G));
    assert_memory_equal(rdf(G), want, sizeof want);
    assert_memory_equal(rdf(dx), g, sizeof g); /* scratch: divided in place */
    /* Sparse: the unique rows ascending, their rows of the dense result. */
    wr(dx, dx0);
    int64_t rows[ROWS];
    uint32_t slot[ROWS];
    for (int r = 0; r < ROWS; r++)
        slot[r] = COMPUTE_NO_SLOT;
    uint64_t nnz = compute_bag_mean_bwd_sparse(dev, all(dx), D, idx, B, L, rows, slot, all(vals));
    const int64_t want_rows[] = {0, 1, 2, 4, 5, 7, 8};
    assert_int_equal(nnz, 7);
    assert_memory_equal(rows, want_rows, sizeof want_rows);
    const float *hv = rdf(vals);
    for (uint64_t k = 0; k < nnz; k++)
        assert_memory_equal(hv + k * D, want + rows[k] * D, D * sizeof(float));
    for (int r = 0; r < ROWS; r++)
        assert_int_equal(slot[r], COMPUTE_NO_SLOT);
    cbuf *bufs[] = {W, out, dx, G, vals};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        compute_release(dev, bufs[i]);
}

/* softmax over n, as DummyModel always computed it. */
static void ref_softmax_f32(float *dst, const float *src, int n)
{
    float mx = src[0];
    for (int k = 1; k < n; k++)
        mx = src[k] > mx ? src[k] : mx;
    double sum = 0;
    for (int k = 0; k < n; k++) {
        dst[k] = expf(src[k] - mx);
        sum += dst[k];
    }
    float inv = (float)(1.0 / sum);
    for (int k = 0; k < n; k++)
        dst[k] *= inv;
}

static void test_softmax_ce(void **state)
{
    (void)state;
    enum { B = 4, C = 6 };
    const int64_t y[B] = {0, 5, 2, 2};
    cbuf *z = mk_rand(B * C, 11), *p = mk(B * C), *q = mk(B * C), *dz = mk(B * C), *loss = mk_loss();
    float *hz = rdf(z);
    for (int k = 0; k < B * C; k++)
        hz[k] *= 4;
    wr(z, hz);
    compute_softmax_ce(dev, all(z), B, C, y, all(p), all(q), all(loss));
    float wp[B * C], wq[B * C], wg[B * C];
    double wl = 0;
    for (int s = 0; s < B; s++) {
        ref_softmax_f32(wp + s * C, hz + s * C, C);
        ref_softmax_f32(wq + s * C, wp + s * C, C);
        wl -= log((double)wq[s * C + y[s]]);
    }
    same_f32(rdf(p), wp, B * C, true);
    same_f32(rdf(q), wq, B * C, true);
    same_f64(compute_loss(dev, all(loss)), wl / B, true);
    /* The backward from the layer's own p and q: bit for bit everywhere. */
    const float *hp = rdf(p), *hq = rdf(q);
    compute_softmax_ce_bwd(dev, all(p), all(q), B, C, y, all(dz));
    float invB = 1.0f / (float)B;
    for (int s = 0; s < B; s++) {
        float *g = wg + s * C;
        double dot = 0;
        for (int k = 0; k < C; k++) {
            g[k] = (hq[s * C + k] - (k == y[s] ? 1.0f : 0.0f)) * invB;
            dot += (double)g[k] * hp[s * C + k];
        }
        for (int k = 0; k < C; k++)
            g[k] = hp[s * C + k] * (g[k] - (float)dot);
    }
    same_f32(rdf(dz), wg, B * C, false);
    cbuf *bufs[] = {z, p, q, dz, loss};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        compute_release(dev, bufs[i]);
}

static void test_ce_logits_and_l1(void **state)
{
    (void)state;
    enum { R = 5, C = 8 };
    const int64_t y[R] = {7, 0, 3, 3, 1};
    cbuf *z = mk_rand(R * C, 12), *dz = mk(R * C), *loss = mk_loss();
    compute_ce_logits(dev, all(z), R, C, y, all(dz), all(loss));
    const float *hz = rdf(z);
    float wd[R * C];
    double wl = 0;
    for (int i = 0; i < R; i++) {
        const float *zi = hz + i * C;
        float mx = zi[0];
        for (int c = 1; c < C; c++)
            mx = zi[c] > mx ? zi[c] : mx;
        double sum = 0;
        for (int c = 0; c < C; c++)
            sum += exp((double)(zi[c] - mx));
        wl += log(sum) + mx - zi[y[i]];
        for (int c = 0; c < C; c++)
            wd[i * C + c] = (float)(exp((double)(zi[c] - mx)) / sum / R);
        wd[i * C + y[i]] -= 1.0f / (float)R;
    }
    same_f32(rdf(dz), wd, R * C, true);
    same_f64(compute_loss(dev, all(loss)), wl / R, true);

    /* L1 against zeros; sign(0) = 0. */
    enum { N = 12 };
    cbuf *v = mk_rand(N, 13), *dv = mk(N);
    float *hv = rdf(v);
    hv[3] = 0.0f;
    wr(v, hv);
    compute_l1(dev, all(v), N, all(dv), all(loss));
    const float *hdv = rdf(dv);
    double l1 = 0;
    float g = 1.0f / (float)N;
    for (int k = 0; k < N; k++) {
        float x = hv[k];
        l1 += x < 0 ? -(double)x : (double)x;
        assert_true(hdv[k] == (x > 0 ? g : x < 0 ? -g : 0.0f));
    }
    assert_true(compute_loss(dev, all(loss)) == l1 / N);
    cbuf *bufs[] = {z, dz, loss, v, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        compute_release(dev, bufs[i]);
}

static void test_sgd(void **state)
{
    (void)state;
    enum { N = 9 };
    cbuf *p = mk_rand(N, 14), *g = mk_rand(N, 15), *m = mk(N);
    float w[N], b[N];
    const float lr = 0.1f, mom = 0.9f;
    const float *hg = rdf(g);
    memcpy(w, rdf(p), sizeof w);
    /* plain: p -= lr g */
    compute_sgd_dense(dev, all(p), all(g), cspan_none(), lr, 0.0f, false);
    for (int k = 0; k < N; k++)
        w[k] += -lr * hg[k];
    assert_memory_equal(rdf(p), w, sizeof w);
    /* momentum: the first step copies g, later ones decay it */
    for (int step = 0; step < 3; step++) {
        compute_sgd_dense(dev, all(p), all(g), all(m), lr, mom, step == 0);
        for (int k = 0; k < N; k++) {
            b[k] = step == 0 ? hg[k] : mom * b[k] + hg[k];
            w[k] += -lr * b[k];
        }
        assert_memory_equal(rdf(m), b, sizeof b);
        assert_memory_equal(rdf(p), w, sizeof w);
    }
    /* sparse: rows of a 3 x 3 table, a repeated row applied twice */
    int64_t rows[3] = {2, 0, 2};
    float vals[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    compute_sgd_sparse(dev, all(p), 3, rows, vals, 3, 0.5f);
    for (int k = 0; k < 3; k++) {
        w[6 + k] += -0.5f * vals[k];
        w[k] += -0.5f * vals[3 + k];
        w[6 + k] += -0.5f * vals[6 + k];
    }
    memset(rows, 0, sizeof rows); /* the caller's to reuse on return */
    memset(vals, 0, sizeof vals);
    assert_memory_equal(rdf(p), w, sizeof w);
    compute_release(dev, p);
    compute_release(dev, g);
    compute_release(dev, m);
}

/* Host arguments larger than a GPU's first staging ring, and many calls in
 * flight around it: each call's own indices and values, checked against
 * the cpu layer run alongside. */
static void test_staging(void **state)
{
    (void)state;
    enum { ROWS = 4096, COLS = 64, ROUNDS = 12 };
    char err[256];
    compute *cpu = compute_new(devspec_of("cpu"), err, sizeof err);
    assert_non_null(cpu);
    cbuf *t = mk_rand(ROWS * COLS, 16);
    cbuf *ct = compute_alloc(cpu, ROWS * COLS, COMPUTE_F32, COMPUTE_MEM_DEVICE, NULL, 0);
    assert_non_null(ct);
    compute_write(cpu, cspan_all(ct), rdf(t));
    rng r;
    rng_seed(&r, 77, RNG_STREAM_MODEL);
    for (int round = 0; round < ROUNDS; round++) {
        /* round 5: 6 MiB of values at once (the ring grows) */
        uint64_t nnz = round == 5 ? 24576 : 1500 + 100 * round;
        int64_t *rows = malloc(nnz * sizeof *rows);
        float *vals = malloc(nnz * COLS * sizeof *vals);
        assert_non_null(rows);
        assert_non_null(vals);
        for (uint64_t k = 0; k < nnz; k++)
            rows[k] = (int64_t)(rng_next(&r) % ROWS);
        rng_fill_uniform(vals, nnz * COLS, 1.0, &r);
        compute_sgd_sparse(dev, all(t), COLS, rows, vals, nnz, 0.01f);
        compute_sgd_sparse(cpu, cspan_all(ct), COLS, rows, vals, nnz, 0.01f);
        free(rows); /* at once: the layer took its copy */
        free(vals);
    }
    assert_memory_equal(rdf(t), compute_host_view(cpu, ct), ROWS * COLS * sizeof(float));
    compute_release(dev, t);
    compute_release(cpu, ct);
    compute_free(cpu);
}

/* Lent memory (compute_lend): the cpu computes on the lender's bytes as
 * on its own, and releasing the buffer leaves them to the lender (freed
 * here after the release: a release that freed them too would be a double
 * free under ASan); a device with memory of its own refuses, saying why. */
static void test_lend(void **state)
{
    (void)state;
    enum { N = 1000 };
    char err[256] = "";
    float *mine = aligned_alloc(4096, 4096);
    assert_non_null(mine);
    for (int k = 0; k < N; k++)
        mine[k] = (float)k;
    if (strcmp(dev_name, "cpu") != 0) {
        assert_false(compute_lends(dev));
        assert_null(compute_lend(dev, mine, N, COMPUTE_F32, err, sizeof err));
        assert_non_null(strstr(err, "memory of its own only"));
        free(mine);
        return;
    }
    assert_true(compute_lends(dev));
    cbuf *b = compute_lend(dev, mine, N, COMPUTE_F32, err, sizeof err);
    assert_non_null(b);
    assert_ptr_equal(compute_host_view(dev, b), mine);
    assert_int_equal(cbuf_count(b), N);
    assert_int_equal(cbuf_mem(b), COMPUTE_MEM_DEVICE);
    cbuf *g = compute_alloc(dev, N, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, sizeof err);
    assert_non_null(g);
    float ones[N];
    for (int k = 0; k < N; k++)
        ones[k] = 1.0f;
    compute_write(dev, cspan_all(g), ones);
    compute_sgd_dense(dev, cspan_all(b), cspan_all(g), cspan_none(), 0.5f, 0.0f, true);
    compute_zero(dev, cspan_at(b, 0, 10));
    compute_sync(dev);
    for (int k = 0; k < N; k++)
        assert_true(mine[k] == (k < 10 ? 0.0f : (float)k - 0.5f));
    compute_release(dev, g);
    compute_release(dev, b);
    assert_true(mine[N - 1] == (float)(N - 1) - 0.5f); /* still the lender's, untouched */
    free(mine);
}

/* The staged test device (compute_staged.c): no host view of device
 * memory; copies complete late, in order, a read's destination poisoned
 * until its mark is waited on; the arithmetic is the cpu's. */
static void test_staged(void **state)
{
    (void)state;
    char err[256] = "";
    compute *s = compute_new(devspec_of("staged"), err, sizeof err);
    assert_non_null(s);
    assert_string_equal(compute_name(s), "staged");
    cbuf *d = compute_alloc(s, 8, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, sizeof err);
    cbuf *p = compute_alloc(s, 8, COMPUTE_F32, COMPUTE_MEM_PINNED, err, sizeof err);
    cbuf *h = compute_alloc(s, 8, COMPUTE_F32, COMPUTE_MEM_HOST, err, sizeof err);
    assert_non_null(d);
    assert_non_null(p);
    assert_non_null(h);
    assert_null(compute_host_view(s, d));
    assert_null(compute_span_view(s, cspan_at(d, 2, 3)));
    float *pv = compute_host_view(s, p);
    assert_non_null(pv);
    assert_non_null(compute_host_view(s, h));
    /* A write reads its source late: changing it before the wait shows. */
    float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    compute_write(s, cspan_all(d), src);
    cmark mw = compute_mark(s);
    src[0] = 100; /* too early: the device gets 100 */
    compute_wait(s, mw);
    src[0] = 200; /* after the wait: the device keeps 100 */
    /* A read lands late: the destination is poisoned until then. */
    compute_read(s, cspan_at(d, 0, 4), pv);
    cmark m = compute_mark(s);
    assert_true(isnan(pv[0]) && isnan(pv[3]));
    assert_true(pv[4] == 0.0f); /* outside the read: untouched */
    assert_false(compute_done(s, m)); /* asked once: not yet, and it progresses */
    assert_true(compute_done(s, m));
    assert_true(pv[0] == 100 && pv[1] == 2 && pv[3] == 4);
    /* An operation sees every copy enqueued before it. */
    const float two[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    compute_write(s, cspan_all(d), two);
    compute_sgd_dense(s, cspan_all(d), cspan_all(d), cspan_none(), 0.25f, 0.0f, false); /* 2 - 0.5 */
    float back[8];
    compute_read(s, cspan_all(d), back);
    compute_sync(s);
    for (int k = 0; k < 8; k++)
        assert_true(back[k] == 1.5f);
    /* The staging helpers copy (and synchronise) where there is no view. */
    float stage[8];
    const float *r = compute_host_read(s, cspan_all(d), stage);
    assert_ptr_equal(r, stage);
    assert_true(stage[7] == 1.5f);
    float *w = compute_host_write_begin(s, cspan_at(d, 1, 2), stage);
    assert_ptr_equal(w, stage);
    w[0] = -1;
    w[1] = -2;
    compute_host_write_end(s, cspan_at(d, 1, 2), w);
    compute_read(s, cspan_at(d, 0, 4), back);
    compute_sync(s);
    assert_true(back[0] == 1.5f && back[1] == -1 && back[2] == -2 && back[3] == 1.5f);
    /* A loss (a double in device memory) through compute_loss. */
    cbuf *l = compute_alloc(s, 1, COMPUTE_F64, COMPUTE_MEM_DEVICE, NULL, 0);
    assert_non_null(l);
    const double v = 0.1;
    compute_write(s, cspan_all(l), &v);
    assert_true(compute_loss(s, cspan_all(l)) == 0.1);
    compute_release(s, l);
    compute_release(s, d);
    compute_release(s, p);
    compute_release(s, h);
    compute_free(s);
}

static int run_compute_on(const char *name)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_select, free_copies),
        cmocka_unit_test(test_place),
        cmocka_unit_test_teardown(test_memory, free_copies),
        cmocka_unit_test_teardown(test_marks, free_copies),
        cmocka_unit_test_teardown(test_elapsed, free_copies),
        cmocka_unit_test_teardown(test_gemm, free_copies),
        cmocka_unit_test_teardown(test_bias_transpose_colsum, free_copies),
        cmocka_unit_test_teardown(test_relu, free_copies),
        cmocka_unit_test_teardown(test_embedding_bag, free_copies),
        cmocka_unit_test_teardown(test_softmax_ce, free_copies),
        cmocka_unit_test_teardown(test_ce_logits_and_l1, free_copies),
        cmocka_unit_test_teardown(test_sgd, free_copies),
        cmocka_unit_test_teardown(test_staging, free_copies),
        cmocka_unit_test_teardown(test_lend, free_copies),
    };
    char err[512], group[64];
    dev_name = name;
    exact = strcmp(name, "cuda") != 0;
    dev = compute_new(devspec_of(name), err, sizeof err);
    if (!dev) {
        print_error("compute_new(%s): %s\n", name, err);
        return 1;
    }
    snprintf(group, sizeof group, "compute on %s", name);
    int rc = _cmocka_run_group_tests(group, tests, sizeof tests / sizeof *tests, NULL, NULL);
    compute_free(dev);
    return rc;
}

int main(void)
{
    bool ready;
    if (gpu_variant(&ready))
        return ready ? run_compute_on("cuda") : GPU_VARIANT_SKIP;
    int rc = run_compute_on("cpu");
    rc |= run_compute_on("fake-cuda");
    rc |= run_compute_on("staged");
    const struct CMUnitTest staged[] = {cmocka_unit_test(test_staged), cmocka_unit_test(test_elapsed_not_before_done),
                                        cmocka_unit_test(test_gpu_failure), cmocka_unit_test(test_steptimer)};
    return rc | cmocka_run_group_tests_name("the staged test device; a held and a failing fake GPU", staged, NULL, NULL);
}
