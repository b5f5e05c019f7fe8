/* test_device.c — the device interface's handle rules (server/device.h) on
 * the `cpu` and `test` devices.
 *
 *  - cpu: a devbuf's host image is its storage — a recv area is the buffer
 *    itself, and the psbuf a kind hands over is the very memory the
 *    arithmetic wrote;
 *  - test: recv areas are staging of random lengths (never shorter than
 *    DEVICE_AREA_MIN unless the buffer ends first), whose bytes land only
 *    through recv_done;
 *  - every job naming handles (sum-and-scale, SGD, gather, scatter-SGD,
 *    sparse emit) against the plain loops, on both devices, results read
 *    through to_host;
 *  - the breaches the test device must catch, each in a child process that
 *    must die with SIGABRT and say why: a host image read or taken before a
 *    to-host job (or after a write since), a buffer freed, folded into or
 *    received into while a job in flight names it, a sparse accumulator
 *    reset under its emit, a recv_done that matches no area, buffers left
 *    at destroy. A child doing the same steps rightly exits 0, so the
 *    harness itself can fail;
 *  - a narrow push's last fold (device_fold_narrow_out) and its fold with
 *    a stashed push (device_fold_narrow_pair) on every device, against
 *    reduce.c's loops and half.c's conversions, with a small fold pending
 *    before it;
 *  - the cuda device (server/cuda/device_cuda.c) on the fake GPU: every job
 *    above with the same bits; completions delivered later by the event
 *    loop, in submission order, with a GPU time; a drain with work in
 *    flight; buffers bigger than its staging chunks, round after round; a
 *    GPU operation that fails — every job in flight and after it completes
 *    with the error, none hangs; a narrow push's folds from a peer's
 *    memory (CUDA IPC). With PSBENCH_CUDA_DEVICE=cuda (ctest
 *    unit_device_cuda, label gpu) the same on a real GPU, but the injected
 *    failure: skipped (exit 77) where no GPU answers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/device.h"
#include "server/cuda/kernels_host.h"
#include "shared/gpu/cugpu.h"
#include "shared/clock.h"
#include "shared/cli.h"
#include "shared/gpu.h"
#include "server/reduce.h"
#include "shared/sparse.h"
#include "devfixture.h"
#include "fixture.h"
#include "devspec_of.h"

typedef dev_fixture fixture;

static void dev_open(fixture *x, const char *name)
{
    setenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US", "200", 1);
    setenv("PSBENCH_FAKE_GPU_DELAY_US", "100", 1);
    devfx_open(x, devspec_of(name), 1 << 24);
}


static int jobs_done;
static void count_done(device_job *j)
{
    (void)j;
    jobs_done++;
}

/* Submit j and wait for its done (cpu: inline; test: the drain delivers). */
static void run_job(fixture *x, device_job *j)
{
    int before = jobs_done;
    j->done = count_done;
    device_submit(x->dev, j);
    device_drain(x->dev);
    assert_int_equal(jobs_done, before + 1);
}

/* The host image of b, made host-visible first. */
static const float *read_back(fixture *x, devbuf *b)
{
    device_job j = {.op = JOB_BARRIER, .to_host = b};
    run_job(x, &j);
    return (const float *)(const void *)device_buf_host(x->dev, b)->data;
}

static devbuf *buf_of(fixture *x, const float *v, size_t n)
{
    devbuf *b = device_buf_new(x->dev, n * sizeof(float));
    assert_non_null(b);
    device_write(x->dev, b, 0, v, n * sizeof(float));
    return b;
}

static float val(size_t i, unsigned salt) { return (float)((i * 7919 + salt * 104729) % 1000) / 997.0f - 0.5f; }

/* ---- cpu: the host image is the storage ------------------------------------ */

static void test_cpu_host_image_is_storage(void **state)
{
    (void)state;
    fixture x;
    dev_open(&x, "cpu");
    devbuf *b = device_buf_new(x.dev, 4096);
    assert_non_null(b);
    size_t max;
    uint8_t *area = device_recv_area(x.dev, b, 1024, &max);
    assert_int_equal(max, 4096 - 1024); /* the rest of the buffer */
    for (size_t i = 0; i < 1024; i++)
        area[i] = (uint8_t)i;
    device_recv_done(x.dev, b, 1024, 1024);
    float one[4] = {1, 1, 1, 1};
    device_fold(x.dev, FOLD_COPY, b, 0, (const uint8_t *)one, 4, 0);
    psbuf *h = device_buf_host(x.dev, b); /* always host-visible on cpu */
    assert_ptr_equal(h->data + 1024, area); /* received in place */
    assert_int_equal(h->len, 4096);
    assert_true(((float *)(void *)h->data)[3] == 1.0f);
    /* The result handed over is that same buffer: no copy. */
    psbuf *taken = device_buf_take_host(x.dev, b);
    assert_ptr_equal(taken, h);
    assert_int_equal(taken->refs, 1);
    psbuf_unref(taken);
    /* Handles are recycled: the next buffer reuses the memory too. */
    devbuf *c = device_buf_new(x.dev, 4096);
    assert_ptr_equal(device_buf_host(x.dev, c)->data, h->data);
    device_buf_free(x.dev, c);
    devfx_close(&x);
}

/* ---- test: recv areas are staging ---------------------------------------------- */

static void test_test_device_recv_areas(void **state)
{
    (void)state;
    fixture x;
    dev_open(&x, "test");
    const size_t n = 5 * 1024 * 1024 + 12; /* several areas of up to 1 MiB */
    devbuf *b = device_buf_new(x.dev, n);
    assert_non_null(b);
    uint8_t *want = malloc(n);
    assert_non_null(want);
    for (size_t i = 0; i < n; i++)
        want[i] = (uint8_t)(i * 31 + 7);
    size_t off = 0, lens_seen = 0, last = 0;
    while (off < n) {
        size_t max;
        uint8_t *area = device_recv_area(x.dev, b, off, &max);
        assert_true(max >= (n - off < DEVICE_AREA_MIN ? n - off : DEVICE_AREA_MIN));
        assert_true(max <= n - off && max <= 16 * DEVICE_AREA_MIN);
        lens_seen += max != last;
        last = max;
        /* A receive that got nothing: the area is simply given again. */
        memset(area, 0xEE, max);
        area = device_recv_area(x.dev, b, off, &max);
        size_t take = max > 3 ? max - 3 : max; /* less than offered, as a short read */
        memcpy(area, want + off, take);
        device_recv_done(x.dev, b, off, take);
        off += take;
    }
    assert_true(lens_seen > 1); /* the lengths vary */
    const uint8_t *got = (const uint8_t *)read_back(&x, b);
    assert_memory_equal(got, want, n);
    device_buf_free(x.dev, b);
    free(want);
    devfx_close(&x);
}

/* ---- jobs on handles, both devices --------------------------------------------- */

static void check_jobs(const char *name)
{
    fixture x;
    dev_open(&x, name);
    enum { N = 3001, NSRC = 3 };
    float *v[NSRC];
    devbuf *b[NSRC];
    for (int s = 0; s < NSRC; s++) {
        v[s] = malloc(N * sizeof(float));
        assert_non_null(v[s]);
        for (size_t i = 0; i < N; i++)
            v[s][i] = val(i, (unsigned)s);
        b[s] = buf_of(&x, v[s], N);
    }

    /* Sum and scale into the first source. */
    device_job j = {.op = JOB_SUM_SCALE, .to_host = b[0]};
    j.u.sum.dst = b[0];
    j.u.sum.srcs = b;
    j.u.sum.nsrc = NSRC;
    j.u.sum.n = N;
    j.u.sum.scale = 0.25f;
    run_job(&x, &j);
    const float *sum = (const float *)(const void *)device_buf_host(x.dev, b[0])->data;
    for (size_t i = 0; i < N; i++) {
        float want = v[0][i];
        for (int s = 1; s < NSRC; s++)
            want += v[s][i];
        want *= 0.25f;
        assert_memory_equal(&sum[i], &want, sizeof want);
    }
    device_write(x.dev, b[0], 0, v[0], N * sizeof(float)); /* the source again */

    /* Two SGD steps against reduce.c's loop on plain arrays. */
    float *p = malloc(N * sizeof(float)), *m = malloc(N * sizeof(float)), *o = malloc(N * sizeof(float));
    assert_non_null(p);
    assert_non_null(m);
    assert_non_null(o);
    for (size_t i = 0; i < N; i++)
        p[i] = val(i, 9);
    devbuf *param = buf_of(&x, p, N), *mom = device_buf_new(x.dev, N * sizeof(float));
    devbuf *out = device_buf_new(x.dev, N * sizeof(float));
    for (int step = 0; step < 2; step++) {
        device_job s = {.op = JOB_SGD, .to_host = out};
        s.u.sgd.param = param;
        s.u.sgd.momentum_buf = mom;
        s.u.sgd.srcs = b;
        s.u.sgd.nsrc = NSRC;
        s.u.sgd.n = N;
        s.u.sgd.scale = 1.0f / 3;
        s.u.sgd.lr = 0.01f;
        s.u.sgd.momentum = 0.9f;
        s.u.sgd.first = step == 0;
        s.u.sgd.out = out;
        run_job(&x, &s);
        reduce_sgd_momentum_f32(p, m, src_at, v, NSRC, N, 1.0f / 3, 0.01f, 0.9f, step == 0, o);
        assert_memory_equal(device_buf_host(x.dev, out)->data, o, N * sizeof(float));
    }
    assert_memory_equal(read_back(&x, param), p, N * sizeof(float));
    assert_memory_equal(read_back(&x, mom), m, N * sizeof(float));

    /* Gather and scatter-SGD on a 30 x 100 table (param's first 3000). */
    int64_t idx[] = {3, 7, 7, 0, 29, 3}, off[] = {0, 1, 1, 5}; /* row 3 in bags 0 and 3: in that order */
    device_job g = {.op = JOB_GATHER};
    devbuf *rows = device_buf_new(x.dev, 4 * 100 * sizeof(float));
    g.u.bags.table = param;
    g.u.bags.cols = 100;
    g.u.bags.idx = idx;
    g.u.bags.off = off;
    g.u.bags.nnz = 6;
    g.u.bags.bags = 4;
    g.u.bags.out = rows;
    g.to_host = rows;
    run_job(&x, &g);
    float want_rows[400];
    reduce_gather_sum_f32(want_rows, p, 100, idx, 6, off, 4);
    assert_memory_equal(device_buf_host(x.dev, rows)->data, want_rows, sizeof want_rows);
    device_job sc = {.op = JOB_SCATTER_SGD};
    sc.u.bags = g.u.bags;
    sc.u.bags.out = NULL;
    float sgrad[400]; /* a gradient per bag, unlike each other: row 3's two steps differ by their order */
    for (size_t i = 0; i < 400; i++)
        sgrad[i] = val(i, 11) * 3.0f + (float)(i / 100) * 0.37f;
    sc.u.bags.grad = sgrad;
    sc.u.bags.lr = 0.5f;
    run_job(&x, &sc);
    reduce_scatter_sgd_f32(p, 100, idx, 6, off, 4, sgrad, 0.5f);
    assert_memory_equal(read_back(&x, param), p, N * sizeof(float));

    /* Dense SGD (the seed's pattern) on the same 30 x 100 table: a
     * table-sized gradient, its scratch full of garbage first (it must be
     * zeroed), every element stepped — reduce.c's bits on every device. */
    float *garbage = malloc(3000 * sizeof(float)), *gref = malloc(3000 * sizeof(float));
    assert_non_null(garbage);
    assert_non_null(gref);
    memset(garbage, 0x7f, 3000 * sizeof(float));
    devbuf *gsum = buf_of(&x, garbage, 3000);
    device_job dn = {.op = JOB_DENSE_SGD};
    dn.u.bags = sc.u.bags;
    dn.u.bags.gsum = gsum;
    dn.u.bags.rows = 30;
    dn.u.bags.lr = 0.125f;
    for (int step = 0; step < 2; step++) {
        run_job(&x, &dn);
        reduce_dense_bag_sgd_f32(p, gref, 30, 100, idx, 6, off, 4, sgrad, 0.125f);
    }
    assert_memory_equal(read_back(&x, param), p, N * sizeof(float));
    assert_memory_equal(read_back(&x, gsum), gref, 3000 * sizeof(float));
    device_buf_free(x.dev, gsum);
    free(garbage);
    free(gref);

    /* A sparse accumulator: two pushes with a shared row, emitted. */
    devsparse *sp = device_sparse_new(x.dev);
    sparse_acc ref;
    sparse_acc_init(&ref);
    assert_non_null(sp);
    device_sparse_reset(x.dev, sp, 10, 3);
    sparse_acc_reset(&ref, 10, 3);
    int64_t r1[] = {4, 1}, r2[] = {1, 9, 9};
    uint32_t slots[3];
    int64_t bad;
    assert_int_equal(device_sparse_map(x.dev, sp, (const uint8_t *)r1, 2, slots, &bad), 0);
    device_sparse_fold(x.dev, sp, slots, 0, (const uint8_t *)v[1], 6);
    assert_int_equal(sparse_acc_map(&ref, (const uint8_t *)r1, 2, slots, &bad), 0);
    sparse_acc_add(&ref, slots, 0, (const uint8_t *)v[1], 6);
    assert_int_equal(device_sparse_map(x.dev, sp, (const uint8_t *)r2, 3, slots, &bad), 0);
    device_sparse_fold(x.dev, sp, slots, 0, (const uint8_t *)v[2], 9);
    assert_int_equal(sparse_acc_map(&ref, (const uint8_t *)r2, 3, slots, &bad), 0);
    sparse_acc_add(&ref, slots, 0, (const uint8_t *)v[2], 9);
    int64_t bad_row[] = {10};
    assert_int_equal(device_sparse_map(x.dev, sp, (const uint8_t *)bad_row, 1, slots, &bad), -1);
    assert_int_equal(bad, 10);
    uint64_t size = device_sparse_result_size(x.dev, sp);
    assert_int_equal(size, 3 * (8 + 12));
    devbuf *emitted = device_buf_new(x.dev, size);
    device_job e = {.op = JOB_SPARSE_EMIT, .to_host = emitted};
    e.u.emit.acc = sp;
    e.u.emit.out = emitted;
    e.u.emit.scale = 0.5f;
    run_job(&x, &e);
    assert_int_equal(e.u.emit.status, 0);
    uint8_t want_sparse[60];
    assert_int_equal(sparse_acc_emit(&ref, 0.5f, want_sparse), 0);
    psbuf *res = device_buf_take_host(x.dev, emitted);
    assert_int_equal(res->len, size);
    assert_memory_equal(res->data, want_sparse, size);
    psbuf_unref(res);
    sparse_acc_free(&ref);
    device_sparse_free(x.dev, sp);

    for (int s = 0; s < NSRC; s++) {
        device_buf_free(x.dev, b[s]);
        free(v[s]);
    }
    device_buf_free(x.dev, param);
    device_buf_free(x.dev, mom);
    device_buf_free(x.dev, out);
    device_buf_free(x.dev, rows);
    free(p);
    free(m);
    free(o);
    devfx_close(&x);
}

static void test_jobs_cpu(void **state)
{
    (void)state;
    check_jobs("cpu");
}

static void test_jobs_test_device(void **state)
{
    (void)state;
    check_jobs("test");
}

/* ---- breaches the test device catches ------------------------------------------ */

/* Run fn(breach) in a child process with its own test device; return how
 * it ended, and what it wrote to stderr in `out`. */
static int child_run(void (*fn)(fixture *x, bool breach), bool breach, char *out, size_t outlen)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        dup2(pfd[1], 2);
        alarm(20); /* a check that never fires must not hang the suite */
        fixture x;
        dev_open(&x, "test");
        fn(&x, breach);
        devfx_close(&x);
        _exit(0);
    }
    close(pfd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < outlen && (r = read(pfd[0], out + n, outlen - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(pfd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void expect_caught(void (*fn)(fixture *x, bool breach), const char *why)
{
    char out[2048];
    int status = child_run(fn, false, out, sizeof out);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the rightful steps did not exit 0 (status 0x%x): %s", status, out);
    status = child_run(fn, true, out, sizeof out);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("the breach was not caught (status 0x%x): %s", status, out);
    if (!strstr(out, "test device: ") || !strstr(out, why))
        fail_msg("the reason does not say '%s': %s", why, out);
}

/* A slow job naming b, left in flight (nobody runs the loop). */
static device_job slow_job;
static void slow_done(device_job *j) { (void)j; }
static void submit_on(fixture *x, devbuf *b)
{
    memset(&slow_job, 0, sizeof slow_job);
    slow_job.op = JOB_SUM_SCALE;
    static devbuf *srcs[1];
    srcs[0] = b;
    slow_job.u.sum.dst = b;
    slow_job.u.sum.srcs = srcs;
    slow_job.u.sum.nsrc = 1;
    slow_job.u.sum.n = 4;
    slow_job.u.sum.scale = 1;
    slow_job.done = slow_done;
    device_submit(x->dev, &slow_job);
}

static const float four[4] = {1, 2, 3, 4};

static void breach_host_before_to_host(fixture *x, bool breach)
{
    devbuf *b = buf_of(x, four, 4);
    if (!breach)
        read_back(x, b);
    (void)device_buf_host(x->dev, b);
    device_buf_free(x->dev, b);
}

static void breach_take_before_to_host(fixture *x, bool breach)
{
    devbuf *b = buf_of(x, four, 4);
    if (!breach) {
        device_job j = {.op = JOB_BARRIER, .to_host = b};
        run_job(x, &j);
    }
    psbuf_unref(device_buf_take_host(x->dev, b));
}

static void breach_host_after_write(fixture *x, bool breach)
{
    devbuf *b = buf_of(x, four, 4);
    read_back(x, b);
    device_fold(x->dev, FOLD_ADD, b, 0, (const uint8_t *)four, 4, 0);
    if (!breach)
        read_back(x, b);
    (void)device_buf_host(x->dev, b);
    device_buf_free(x->dev, b);
}

static void breach_free_in_flight(fixture *x, bool breach)
{
    devbuf *b = buf_of(x, four, 4);
    submit_on(x, b);
    if (!breach)
        device_drain(x->dev);
    device_buf_free(x->dev, b);
    device_drain(x->dev);
}

static void breach_fold_in_flight(fixture *x, bool breach)
{
    devbuf *b = buf_of(x, four, 4);
    submit_on(x, b);
    if (!breach)
        device_drain(x->dev);
    device_fold(x->dev, FOLD_ADD, b, 0, (const uint8_t *)four, 4, 0);
    device_drain(x->dev);
    device_buf_free(x->dev, b);
}

static void breach_recv_in_flight(fixture *x, bool breach)
{
    devbuf *b = buf_of(x, four, 4);
    submit_on(x, b);
    if (!breach)
        device_drain(x->dev);
    size_t max;
    (void)device_recv_area(x->dev, b, 0, &max);
    device_drain(x->dev);
    device_buf_free(x->dev, b);
}

static void breach_read_in_flight(fixture *x, bool breach)
{
    devbuf *b = buf_of(x, four, 4);
    read_back(x, b);
    device_job j = {.op = JOB_BARRIER, .to_host = b, .done = slow_done};
    device_submit(x->dev, &j);
    if (!breach)
        device_drain(x->dev);
    (void)device_buf_host(x->dev, b);
    device_drain(x->dev);
    device_buf_free(x->dev, b);
}

static void breach_sparse_reset_in_flight(fixture *x, bool breach)
{
    devsparse *s = device_sparse_new(x->dev);
    device_sparse_reset(x->dev, s, 4, 1);
    devbuf *out = device_buf_new(x->dev, device_sparse_result_size(x->dev, s));
    device_job j = {.op = JOB_SPARSE_EMIT, .done = slow_done};
    j.u.emit.acc = s;
    j.u.emit.out = out;
    j.u.emit.scale = 1;
    device_submit(x->dev, &j);
    if (!breach)
        device_drain(x->dev);
    device_sparse_reset(x->dev, s, 4, 1);
    device_drain(x->dev);
    device_buf_free(x->dev, out);
    device_sparse_free(x->dev, s);
}

static void breach_recv_done_without_area(fixture *x, bool breach)
{
    devbuf *a = device_buf_new(x->dev, 64), *b = device_buf_new(x->dev, 64);
    size_t max;
    uint8_t *area = device_recv_area(x->dev, a, 0, &max);
    memset(area, 0, 64);
    if (breach) /* another call ends the area */
        device_fold(x->dev, FOLD_COPY, b, 0, (const uint8_t *)four, 4, 0);
    device_recv_done(x->dev, a, 0, 64);
    device_buf_free(x->dev, a);
    device_buf_free(x->dev, b);
}

static void breach_recv_done_elsewhere(fixture *x, bool breach)
{
    devbuf *a = device_buf_new(x->dev, 64);
    size_t max;
    (void)device_recv_area(x->dev, a, 0, &max);
    device_recv_done(x->dev, a, breach ? 4 : 0, 16); /* not where the area was */
    device_buf_free(x->dev, a);
}

static void breach_left_at_destroy(fixture *x, bool breach)
{
    devbuf *b = device_buf_new(x->dev, 64);
    if (!breach) {
        device_buf_free(x->dev, b);
        return;
    }
    /* The pool would complain too; the device says it first. */
    (void)b;
}

static void test_breaches_caught(void **state)
{
    (void)state;
    expect_caught(breach_host_before_to_host, "reading a host image no to-host job made host-visible");
    expect_caught(breach_take_before_to_host, "taking a host image no to-host job made host-visible");
    expect_caught(breach_host_after_write, "reading a host image no to-host job made host-visible");
    expect_caught(breach_free_in_flight, "freeing a buffer that a job in flight uses");
    expect_caught(breach_fold_in_flight, "folding into a buffer that a job in flight uses");
    expect_caught(breach_recv_in_flight, "receiving into a buffer that a job in flight uses");
    expect_caught(breach_read_in_flight, "reading a buffer that a job in flight uses");
    expect_caught(breach_sparse_reset_in_flight, "resetting a sparse accumulator that a job in flight uses");
    expect_caught(breach_recv_done_without_area, "matches no recv area given just before");
    expect_caught(breach_recv_done_elsewhere, "matches no recv area given just before");
    expect_caught(breach_left_at_destroy, "destroyed with 1 buffer(s) or accumulator(s) not freed");
}

/* ---- narrow pushes' last fold (--compress fp16|bf16) ------------------------ */

/* device_fold_narrow_out on device `name`: an accumulator with a small
 * f32 fold still pending into it (batched on the cuda device: it must land
 * first), then the last fold of a narrow push, ADD_SCALE on the first
 * part, COPY_SCALE on the rest, bigger than the cuda device's staging
 * chunks; the answer read back through to_host, against reduce.c's loops
 * and half.c's conversions; the accumulator is left as it was. */
static void check_narrow_out(const char *name)
{
    fixture x;
    dev_open(&x, name);
    enum { N = (4 << 20) / 2 + 1001, K = 777 };
    float *acc = malloc(N * sizeof *acc), *wide = malloc(N * sizeof *wide);
    uint16_t *push = malloc(N * sizeof *push), *want = malloc(N * sizeof *want);
    assert_true(acc && wide && push && want);
    for (size_t i = 0; i < N; i++)
        acc[i] = val(i, 1);
    float bump[8];
    for (size_t i = 0; i < 8; i++)
        bump[i] = val(i, 9);
    for (int bf = 0; bf <= 1; bf++) {
        half_type t = bf ? HALF_BF16 : HALF_FP16;
        for (size_t i = 0; i < N; i++)
            wide[i] = val(i, 2 + (unsigned)bf) * 3.0f;
        half_narrow(t, push, wide, N);
        devbuf *a = buf_of(&x, acc, N), *out = device_buf_new(x.dev, N * 2);
        assert_non_null(out);
        device_fold(x.dev, FOLD_ADD, a, 3, (const uint8_t *)bump, 8, 0); /* small: batched on cuda */
        const float s = 1.0f / 3.0f;
        device_fold_narrow_out(x.dev, FOLD_ADD_SCALE, a, out, 0, (const uint8_t *)push, K, s, t);
        device_fold_narrow_out(x.dev, FOLD_COPY_SCALE, a, out, K, (const uint8_t *)(push + K), N - K, s, t);
        /* the cpu's: the push widened, reduce.c's fold, narrowed */
        float *ref = malloc(N * sizeof *ref);
        assert_non_null(ref);
        memcpy(ref, acc, N * sizeof *ref);
        reduce_add_f32(ref + 3, (const uint8_t *)bump, 8);
        float *w = malloc(N * sizeof *w);
        assert_non_null(w);
        half_widen(t, w, push, N);
        reduce_add_scale_f32(ref, (const uint8_t *)w, K, s);
        reduce_copy_scale_f32(ref + K, (const uint8_t *)(w + K), N - K, s);
        half_narrow(t, want, ref, N);
        const uint16_t *got = (const uint16_t *)(const void *)read_back(&x, out);
        for (size_t i = 0; i < N; i++)
            if (got[i] != want[i])
                fail_msg("%s %s [%zu]: 0x%04X, want 0x%04X", name, bf ? "bf16" : "fp16", i, got[i], want[i]);
        /* acc: read, not written (but the small fold) */
        memcpy(ref, acc, N * sizeof *ref);
        reduce_add_f32(ref + 3, (const uint8_t *)bump, 8);
        assert_memory_equal(read_back(&x, a), ref, N * sizeof *ref);
        /* device_fold_narrow_pair: a stash (the acc's values narrowed,
         * received as bytes) and the push: their sum into a fresh
         * accumulator on [0, K), their mean narrowed into out beyond */
        uint16_t *sv = malloc(N * sizeof *sv);
        assert_non_null(sv);
        half_narrow(t, sv, acc, N);
        devbuf *stash = device_buf_new(x.dev, N * 2), *a2 = device_buf_new(x.dev, N * 4);
        assert_true(stash && a2);
        device_write(x.dev, stash, 0, sv, N * 2);
        device_fold_narrow_pair(x.dev, FOLD_ADD, stash, a2, out, 0, (const uint8_t *)push, K, 0, t);
        device_fold_narrow_pair(x.dev, FOLD_ADD_SCALE, stash, NULL, out, K, (const uint8_t *)(push + K), N - K, s, t);
        half_widen(t, ref, sv, N); /* the stash copied widened, then reduce.c's folds */
        reduce_add_f32(ref, (const uint8_t *)w, K);
        reduce_add_scale_f32(ref + K, (const uint8_t *)(w + K), N - K, s);
        half_narrow(t, want, ref, N);
        got = (const uint16_t *)(const void *)read_back(&x, out);
        for (size_t i = K; i < N; i++)
            if (got[i] != want[i])
                fail_msg("%s %s pair mean [%zu]: 0x%04X, want 0x%04X", name, bf ? "bf16" : "fp16", i, got[i], want[i]);
        assert_memory_equal(read_back(&x, a2), ref, K * sizeof *ref);
        device_buf_free(x.dev, stash);
        device_buf_free(x.dev, a2);
        free(sv);
        free(ref);
        free(w);
        device_buf_free(x.dev, a);
        device_buf_free(x.dev, out);
    }
    free(acc);
    free(wide);
    free(push);
    free(want);
    devfx_close(&x);
}

static void test_narrow_out_cpu(void **state)
{
    (void)state;
    check_narrow_out("cpu");
    check_narrow_out("test");
}

/* ---- the cuda device (fake GPU; a real one with PSBENCH_CUDA_DEVICE=cuda) -------- */

/* "fake-cuda", or "cuda" for the gpu-labelled run. */
static const char *cuda_name(void)
{
    const char *n = getenv("PSBENCH_CUDA_DEVICE");
    return n && *n ? n : "fake-cuda";
}

static void test_jobs_cuda(void **state)
{
    (void)state;
    check_jobs(cuda_name());
}

/* psb_fold_narrow_out on the cuda device: the cpu's bits. */
static void test_cuda_narrow_out(void **state)
{
    (void)state;
    check_narrow_out(cuda_name());
}

enum { NJOBS = 24 };
static int order[NJOBS], norder;
static double gpu_ms[NJOBS];
static const char *errors[NJOBS];

static void record_done(device_job *j)
{
    int i = (int)(intptr_t)j->arg;
    order[norder++] = i;
    gpu_ms[i] = j->gpu_ms;
    errors[i] = j->error;
}

/* NJOBS jobs on bufs of n floats each: sums of two buffers, made
 * host-visible. */
static void submit_sums(fixture *x, device_job *jobs, devbuf **bufs, devbuf *(*srcs)[2], size_t n)
{
    norder = 0;
    for (int i = 0; i < NJOBS; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].op = JOB_SUM_SCALE;
        srcs[i][0] = bufs[i];
        srcs[i][1] = bufs[NJOBS]; /* one second source, read by every job */
        jobs[i].u.sum.dst = bufs[i];
        jobs[i].u.sum.srcs = srcs[i];
        jobs[i].u.sum.nsrc = 2;
        jobs[i].u.sum.n = n;
        jobs[i].u.sum.scale = 0.5f;
        jobs[i].to_host = bufs[i];
        jobs[i].done = record_done;
        jobs[i].arg = (void *)(intptr_t)i;
        jobs[i].error = "not run";
        jobs[i].gpu_ms = -2;
        device_submit(x->dev, &jobs[i]);
    }
}

static void check_sums(fixture *x, devbuf **bufs, size_t n, float shared)
{
    for (int i = 0; i < NJOBS; i++) {
        assert_int_equal(order[i], i); /* submission order */
        assert_null(errors[i]);
        assert_true(gpu_ms[i] >= 0); /* timed on the stream */
        const float *v = (const float *)(const void *)device_buf_host(x->dev, bufs[i])->data;
        float want = (val(7, (unsigned)i) + shared) * 0.5f;
        assert_memory_equal(&v[7], &want, sizeof want);
    }
}

/* Completions come later, from the event loop, in order, timed; and a drain
 * with work in flight delivers everything before it returns. */
static void test_cuda_completion(void **state)
{
    (void)state;
    fixture x;
    dev_open(&x, cuda_name());
    enum { N = 4099 };
    devbuf *bufs[NJOBS + 1];
    devbuf *srcs[NJOBS][2];
    device_job jobs[NJOBS];
    float *v = malloc(N * sizeof(float));
    assert_non_null(v);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i <= NJOBS; i++) {
            for (size_t k = 0; k < N; k++)
                v[k] = val(k, (unsigned)i);
            bufs[i] = buf_of(&x, v, N);
        }
        uint64_t t0 = clock_now_ns();
        submit_sums(&x, jobs, bufs, srcs, N);
        assert_int_equal(norder, 0); /* nothing completes inside submit */
        if (round < 2) {
            /* The reactor's way: the loop until every done has run. */
            while (norder < NJOBS)
                event_base_loop(x.base, EVLOOP_ONCE);
        } else {
            device_drain(x.dev); /* with all of them in flight */
            assert_int_equal(norder, NJOBS);
        }
        double wall = clock_ms(t0, clock_now_ns());
        check_sums(&x, bufs, N, val(7, NJOBS));
        for (int i = 0; i < NJOBS; i++)
            assert_true(gpu_ms[i] <= wall);
        for (int i = 0; i <= NJOBS; i++)
            device_buf_free(x.dev, bufs[i]);
    }
    free(v);
    devfx_close(&x);
}

/* Buffers larger than a staging chunk (4 MiB), written, folded into and read
 * back round after round: the ring grows, then is reused. */
static void test_cuda_big_buffers(void **state)
{
    (void)state;
    fixture x;
    dev_open(&x, cuda_name());
    enum { N = (9 << 20) / 4 + 333 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(want);
    for (size_t i = 0; i < N; i++) {
        a[i] = val(i, 1);
        b[i] = val(i, 2);
    }
    for (int round = 0; round < 4; round++) {
        devbuf *acc = device_buf_new(x.dev, N * sizeof(float));
        assert_non_null(acc);
        device_write(x.dev, acc, 0, a, N * sizeof(float));
        /* From a misaligned source, as a socket's buffer can be. */
        uint8_t *raw = malloc(N * sizeof(float) + 1);
        assert_non_null(raw);
        memcpy(raw + 1, b, N * sizeof(float));
        device_fold(x.dev, FOLD_ADD_SCALE, acc, 0, raw + 1, N, 0.5f);
        free(raw);
        memcpy(want, a, N * sizeof(float));
        reduce_add_scale_f32(want, (const uint8_t *)b, N, 0.5f);
        assert_memory_equal(read_back(&x, acc), want, N * sizeof(float));
        device_buf_free(x.dev, acc);
    }
    free(a);
    free(b);
    free(want);
    devfx_close(&x);
}

/* Small folds (batched per iteration: one copy, one launch) into many
 * buffers, interleaved as pushes of many buckets arrive, past a staging
 * chunk's end; then each buffer's mean read back: the same bits as the
 * host loops. A buffer freed with folds still batched, and one handed out
 * again at once, keep their order too. */
static void test_cuda_small_batches(void **state)
{
    (void)state;
    fixture x;
    dev_open(&x, cuda_name());
    enum { NBUF = 150, N = 1000, STEPS = 8 };
    static float want[NBUF][N];
    static device_job jobs[NBUF];
    devbuf *bufs[NBUF];
    uint8_t *raw = malloc(N * sizeof(float) + 3);
    float *v = malloc(N * sizeof(float));
    assert_non_null(raw);
    assert_non_null(v);
    for (int round = 0; round < 2; round++) {
        for (int b = 0; b < NBUF; b++)
            assert_non_null(bufs[b] = device_buf_new(x.dev, N * sizeof(float)));
        for (int step = 0; step < STEPS; step++)
            for (int b = 0; b < NBUF; b++) {
                device_fold_op op = step == 0 ? FOLD_COPY : step == STEPS - 1 ? FOLD_ADD_SCALE : FOLD_ADD;
                for (size_t i = 0; i < N; i++)
                    v[i] = val(i, (unsigned)(b * 31 + step + round));
                memcpy(raw + 3, v, N * sizeof(float)); /* misaligned, as a socket buffer */
                device_fold(x.dev, op, bufs[b], 0, raw + 3, N, 0.125f);
                if (step == 0)
                    memcpy(want[b], v, sizeof want[b]);
                else if (op == FOLD_ADD)
                    reduce_add_f32(want[b], (const uint8_t *)v, N);
                else
                    reduce_add_scale_f32(want[b], (const uint8_t *)v, N, 0.125f);
            }
        norder = 0;
        for (int b = 0; b < NBUF; b++) {
            memset(&jobs[b], 0, sizeof jobs[b]);
            jobs[b].op = JOB_BARRIER;
            jobs[b].to_host = bufs[b];
            jobs[b].done = count_done;
            device_submit(x.dev, &jobs[b]);
        }
        int before = jobs_done;
        while (jobs_done < before + NBUF)
            event_base_loop(x.base, EVLOOP_ONCE);
        for (int b = 0; b < NBUF; b++) {
            assert_null(jobs[b].error);
            assert_memory_equal(device_buf_host(x.dev, bufs[b])->data, want[b], sizeof want[b]);
            device_buf_free(x.dev, bufs[b]);
        }
    }
    /* Freed with a fold batched, then its memory handed out again. */
    for (size_t i = 0; i < N; i++)
        v[i] = val(i, 77);
    devbuf *a = device_buf_new(x.dev, N * sizeof(float));
    device_fold(x.dev, FOLD_COPY, a, 0, (const uint8_t *)v, N, 0);
    device_buf_free(x.dev, a);
    devbuf *b = device_buf_new(x.dev, N * sizeof(float));
    device_fold(x.dev, FOLD_COPY_SCALE, b, 0, (const uint8_t *)v, N, 2.0f);
    memcpy(want[0], v, sizeof want[0]);
    reduce_scale_f32(want[0], N, 2.0f);
    assert_memory_equal(read_back(&x, b), want[0], sizeof want[0]);
    device_buf_free(x.dev, b);
    free(raw);
    free(v);
    devfx_close(&x);
}

/* A GPU operation fails: the jobs in flight and every later one complete
 * with the error (naming the GPU), in order, from the loop; nothing hangs. */
static void test_cuda_failure(void **state)
{
    (void)state;
    if (strcmp(cuda_name(), "fake-cuda") != 0)
        skip(); /* nothing to inject on a real GPU */
    for (int fail_at = 1; fail_at <= 60; fail_at += 7) {
        char at[16];
        snprintf(at, sizeof at, "%d", fail_at);
        setenv("PSBENCH_FAKE_GPU_FAIL_AT", at, 1);
        fixture x;
        dev_open(&x, "fake-cuda");
        unsetenv("PSBENCH_FAKE_GPU_FAIL_AT");
        enum { N = 513 };
        devbuf *bufs[NJOBS + 1];
        devbuf *srcs[NJOBS][2];
        device_job jobs[NJOBS];
        float v[N];
        for (int i = 0; i <= NJOBS; i++) {
            for (size_t k = 0; k < N; k++)
                v[k] = val(k, (unsigned)i);
            bufs[i] = buf_of(&x, v, N);
        }
        submit_sums(&x, jobs, bufs, srcs, N);
        while (norder < NJOBS)
            event_base_loop(x.base, EVLOOP_ONCE);
        int failed = 0;
        for (int i = 0; i < NJOBS; i++) {
            assert_int_equal(order[i], i);
            if (errors[i]) {
                failed++;
                assert_non_null(strstr(errors[i], "GPU 0 (fake GPU"));
                assert_non_null(strstr(errors[i], "failed: fake GPU: injected failure"));
            } else {
                assert_int_equal(failed, 0); /* once failed, every later job fails */
            }
        }
        assert_true(failed > 0);
        /* The device stays failed: a new job fails too, from the loop. */
        device_job late = {.op = JOB_BARRIER, .to_host = bufs[0], .done = record_done, .arg = (void *)(intptr_t)0};
        norder = 0;
        device_submit(x.dev, &late);
        assert_int_equal(norder, 0);
        while (norder < 1)
            event_base_loop(x.base, EVLOOP_ONCE);
        assert_non_null(errors[0]);
        for (int i = 0; i <= NJOBS; i++)
            device_buf_free(x.dev, bufs[i]);
        devfx_close(&x);
    }
}

/* Out of device memory is NULL from buf_new, and the device goes on. */
/* ---- peers: CUDA IPC on the fake GPU ------------------------------------------
 *
 * A "trainer" is a second fake GPU in this process (the fake opens its own
 * exports): its IPC memory holds pushes, its IPC event orders them. The
 * device folds from that memory (after waiting for the event's record,
 * which a held stream keeps incomplete while the pushed bytes are still
 * being written), keeps a dense result in its shared memory, lends it with
 * no host copy (psbuf.twin), gets the range back with the psbuf's last
 * reference, and unmaps a closed peer once the job after it completes. */

static int count_maps(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void test_cuda_peers(void **state)
{
    (void)state;
    if (strcmp(cuda_name(), "fake-cuda") != 0)
        skip(); /* CUDA opens no handle in the process that exported it: integration gpu_cuda_ipc covers it */
    char err[512], hold[64];
    snprintf(hold, sizeof hold, "/tmp/psb-peer-hold-%d", (int)getpid());
    cugpu *tg = cugpu_fake_new(&psb_kernels, 0, 0, err, sizeof err);
    assert_non_null(tg);
    assert_int_equal(cugpu_fake_hold(tg, hold), 0);
    cugpu_stream *ts = tg->ops->stream_new(tg);
    assert_non_null(ts);
    enum { N = 4096 };
    devmem dmem = tg->ops->dev_alloc_ipc(tg, 4 * N * sizeof(float));
    float *mem = dmem.p; /* the fake's device memory is the host's */
    assert_non_null(mem);
    cugpu_event *ev = tg->ops->event_new_ipc(tg);
    assert_non_null(ev);
    cugpu_ipc_handle hm, he;
    assert_int_equal(tg->ops->ipc_export(tg, dmem, &hm), 0);
    assert_int_equal(tg->ops->event_export(tg, ev, &he), 0);

    fixture x;
    dev_open(&x, "fake-cuda");
    assert_true(device_has_peers(x.dev));
    assert_string_equal(device_gpu_id(x.dev), "fake");
    int maps0 = count_maps("memfd:");
    devpeer *p = device_peer_open(x.dev, hm.bytes, 4 * N * sizeof(float), he.bytes, err, sizeof err);
    assert_non_null(p);
    /* A handle that is no allocation, or smaller than its word: refused. */
    uint8_t junk[DEVICE_IPC_HANDLE] = {0};
    assert_null(device_peer_open(x.dev, junk, 64, he.bytes, err, sizeof err));
    assert_null(device_peer_open(x.dev, hm.bytes, 8 * N * sizeof(float), he.bytes, err, sizeof err));
    assert_non_null(strstr(err, "holds"));
    uint8_t share[DEVICE_IPC_HANDLE];
    uint64_t share_bytes = 0;
    assert_int_equal(device_share(x.dev, 1 << 20, share, &share_bytes, err, sizeof err), 0);
    assert_int_equal(share_bytes, 1 << 20);
    cugpu_ipc_handle hs;
    memcpy(hs.bytes, share, sizeof hs.bytes);
    devmem dshared = tg->ops->ipc_open(tg, &hs, share_bytes); /* as a trainer reads results */
    float *shared = dshared.p;
    assert_non_null(shared);

    float want[N];
    for (size_t i = 0; i < N; i++) {
        mem[N + i] = val(i, 3); /* second push: complete from the start */
        mem[i] = 1e30f;         /* first push: not written yet */
        want[i] = val(i, 4);
    }
    /* The first push is "being written": its record waits behind the hold. */
    FILE *h = fopen(hold, "w");
    assert_non_null(h);
    fclose(h);
    assert_int_equal(tg->ops->event_record(tg, ts, ev), 0);
    devbuf *acc = device_buf_new(x.dev, N * sizeof(float));
    assert_non_null(acc);
    assert_true(device_buf_lendable(x.dev, acc));
    device_peer_wait(x.dev, p);
    device_fold_peer(x.dev, FOLD_COPY, acc, 0, p, 0, N, 0);
    device_fold_peer(x.dev, FOLD_ADD_SCALE, acc, 0, p, N * sizeof(float), N, 0.5f);
    device_job j = {.op = JOB_BARRIER}; /* no to_host: the result stays on the GPU */
    j.done = count_done;
    int before = jobs_done;
    device_submit(x.dev, &j);
    event_base_loop(x.base, EVLOOP_NONBLOCK);
    usleep(50 * 1000);
    memcpy(mem, want, sizeof want); /* written, then the record completes */
    unlink(hold);
    device_drain(x.dev);
    assert_int_equal(jobs_done, before + 1);
    assert_null(j.error);
    float mean[N];
    memcpy(mean, want, sizeof mean);
    reduce_add_scale_f32(mean, (const uint8_t *)(mem + N), N, 0.5f);
    psbuf *r = device_buf_lend(x.dev, acc);
    assert_non_null(r);
    assert_true(r->twin && r->twin_only);
    assert_int_equal(r->len, N * sizeof(float));
    assert_memory_equal((const uint8_t *)shared + (r->twin - 1), mean, sizeof mean);
    /* Lent: its range is the psbuf's. A buffer as large as the rest of the
     * shared memory does not fit there until the psbuf goes. */
    uint64_t rest = share_bytes - N * sizeof(float);
    devbuf *big = device_buf_new(x.dev, rest + 1);
    assert_non_null(big);
    assert_false(device_buf_lendable(x.dev, big)); /* ordinary device memory */
    device_buf_free(x.dev, big);
    psbuf_unref(r);
    big = device_buf_new(x.dev, share_bytes);
    assert_non_null(big);
    assert_true(device_buf_lendable(x.dev, big)); /* the whole of it again */
    device_buf_free(x.dev, big);
    /* A closed peer stays mapped until the job after it completes. */
    int maps_open = count_maps("memfd:");
    assert_true(maps_open > maps0);
    device_peer_close(x.dev, p);
    device_job j2 = {.op = JOB_BARRIER};
    run_job(&x, &j2);
    assert_true(count_maps("memfd:") < maps_open);
    devfx_close(&x);
    tg->ops->ipc_close(tg, dshared);
    tg->ops->event_free(tg, ev);
    tg->ops->dev_free_ipc(tg, dmem);
    tg->ops->stream_free(tg, ts);
    cugpu_destroy(tg);
}

/* A "trainer" on a second fake GPU in this process: `bytes` of its IPC
 * memory and its IPC event, exported, opened by the cuda device of x as a
 * peer (peer_trainer_close undoes it all). */
typedef struct peer_trainer {
    cugpu *tg;
    devmem mem;
    cugpu_event *ev;
    devpeer *p;
} peer_trainer;

static void peer_trainer_open(peer_trainer *t, fixture *x, size_t bytes)
{
    char err[512];
    assert_non_null(t->tg = cugpu_fake_new(&psb_kernels, 0, 0, err, sizeof err));
    t->mem = t->tg->ops->dev_alloc_ipc(t->tg, bytes);
    assert_non_null(t->mem.p);
    assert_non_null(t->ev = t->tg->ops->event_new_ipc(t->tg));
    cugpu_ipc_handle hm, he;
    assert_int_equal(t->tg->ops->ipc_export(t->tg, t->mem, &hm), 0);
    assert_int_equal(t->tg->ops->event_export(t->tg, t->ev, &he), 0);
    t->p = device_peer_open(x->dev, hm.bytes, bytes, he.bytes, err, sizeof err);
    assert_non_null(t->p);
}

static void peer_trainer_close(peer_trainer *t, fixture *x)
{
    device_peer_close(x->dev, t->p);
    devfx_close(x);
    t->tg->ops->event_free(t->tg, t->ev);
    t->tg->ops->dev_free_ipc(t->tg, t->mem);
    cugpu_destroy(t->tg);
}

/* A narrow push from a peer's memory (CUDA IPC, --compress): the first
 * copied into a stash as it is, the second added to it (the pair's fold),
 * a third added widened (device_fold_narrow), the last's fold narrowed
 * into the answer; the pair's mean of two likewise; every one read where
 * it lies at a 2-byte (not 4-byte) offset, against half.c's conversions
 * and reduce.c's loops. And device_fold_narrow from host bytes (the cuda
 * device widens on the GPU, where the others are handed floats). */
static void test_cuda_peer_narrow(void **state)
{
    (void)state;
    if (strcmp(cuda_name(), "fake-cuda") != 0)
        skip(); /* as test_cuda_peers */
    enum { N = 3000, P = 4 };
    const size_t bytes = 2 + (size_t)P * N * 2;
    fixture x;
    dev_open(&x, "fake-cuda");
    peer_trainer pt;
    peer_trainer_open(&pt, &x, bytes);
    devpeer *p = pt.p;
    uint16_t *mem = (uint16_t *)((uint8_t *)pt.mem.p + 2);
    float *w = malloc((size_t)P * N * sizeof *w), *ref = malloc(N * sizeof *ref);
    uint16_t *want = malloc(N * sizeof *want);
    assert_true(w && ref && want);
    for (int bf = 0; bf <= 1; bf++) {
        half_type t = bf ? HALF_BF16 : HALF_FP16;
        for (size_t k = 0; k < P; k++) {
            for (size_t i = 0; i < N; i++)
                ref[i] = val(i, 5 + (unsigned)k) * 7.0f;
            half_narrow(t, mem + k * N, ref, N);
            half_widen(t, w + k * N, mem + k * N, N);
        }
        devsrc src = {.peer = p, .at = 2};
        const float s = 0.25f;
        devbuf *stash = device_buf_new(x.dev, N * 2), *acc = device_buf_new(x.dev, N * 4),
               *out = device_buf_new(x.dev, N * 2);
        assert_true(stash && acc && out);
        device_peer_wait(x.dev, p);
        device_write_from(x.dev, stash, 0, src, 0, N * 2);
        device_fold_narrow_pair_from(x.dev, FOLD_ADD, stash, acc, out, 0, src, N * 2, N, 0, t);
        x.dev->ops->peers->fold_narrow(x.dev, FOLD_ADD, acc, 0, p, 2 + 2 * N * 2, N, 0, t);
        device_fold_narrow_out_from(x.dev, FOLD_ADD_SCALE, acc, out, 0, src, 3 * N * 2, N, s, t);
        memcpy(ref, w, N * sizeof *ref);
        reduce_add_f32(ref, (const uint8_t *)(w + N), N);
        reduce_add_f32(ref, (const uint8_t *)(w + 2 * N), N);
        reduce_add_scale_f32(ref, (const uint8_t *)(w + 3 * N), N, s);
        half_narrow(t, want, ref, N);
        assert_memory_equal(read_back(&x, out), want, N * 2);
        /* two pushes: the pair's mean straight into the answer */
        device_fold_narrow_pair_from(x.dev, FOLD_ADD_SCALE, stash, NULL, out, 0, src, N * 2, N, s, t);
        memcpy(ref, w, N * sizeof *ref);
        reduce_add_scale_f32(ref, (const uint8_t *)(w + N), N, s);
        half_narrow(t, want, ref, N);
        assert_memory_equal(read_back(&x, out), want, N * 2);
        /* from host bytes: a copy widened, then an add */
        device_fold_narrow(x.dev, FOLD_COPY, acc, 0, (const uint8_t *)mem, N, 0, t);
        device_fold_narrow(x.dev, FOLD_ADD, acc, 0, (const uint8_t *)(mem + N), N, 0, t);
        memcpy(ref, w, N * sizeof *ref);
        reduce_add_f32(ref, (const uint8_t *)(w + N), N);
        assert_memory_equal(read_back(&x, acc), ref, N * 4);
        device_buf_free(x.dev, stash);
        device_buf_free(x.dev, acc);
        device_buf_free(x.dev, out);
    }
    free(w);
    free(ref);
    free(want);
    peer_trainer_close(&pt, &x);
}

/* Small folds from a peer's memory join the iteration's batch (one launch
 * for many trainers' small pushes): interleaved on one accumulator with
 * small folds from host bytes (staged), they land in order; a batch of
 * peer folds alone (nothing staged) runs too. */
static void test_cuda_peer_small_batched(void **state)
{
    (void)state;
    if (strcmp(cuda_name(), "fake-cuda") != 0)
        skip(); /* as test_cuda_peers */
    enum { N = 500, P = 3 };
    fixture x;
    dev_open(&x, "fake-cuda");
    peer_trainer pt;
    peer_trainer_open(&pt, &x, P * N * sizeof(float));
    devpeer *p = pt.p;
    float *mem = pt.mem.p;
    float h0[N], h1[N], want[N], want2[N];
    for (size_t i = 0; i < N; i++) {
        h0[i] = val(i, 21);
        h1[i] = val(i, 22) * 2.0f;
        for (size_t k = 0; k < P; k++)
            mem[k * N + i] = val(i, 30 + (unsigned)k) * 3.0f;
    }
    devbuf *acc = device_buf_new(x.dev, N * sizeof(float)), *acc2 = device_buf_new(x.dev, N * sizeof(float));
    assert_true(acc && acc2);
    device_peer_wait(x.dev, p);
    device_fold(x.dev, FOLD_COPY, acc, 0, (const uint8_t *)h0, N, 0);
    device_fold_peer(x.dev, FOLD_ADD, acc, 0, p, 0, N, 0);
    device_fold(x.dev, FOLD_ADD, acc, 0, (const uint8_t *)h1, N, 0);
    device_fold_peer(x.dev, FOLD_ADD_SCALE, acc, 0, p, N * sizeof(float), N, 0.25f);
    device_fold_peer(x.dev, FOLD_COPY, acc2, 0, p, N * sizeof(float), N, 0);
    device_fold_peer(x.dev, FOLD_ADD_SCALE, acc2, 0, p, 2 * N * sizeof(float), N, 0.5f);
    memcpy(want, h0, sizeof want);
    reduce_add_f32(want, (const uint8_t *)mem, N);
    reduce_add_f32(want, (const uint8_t *)h1, N);
    reduce_add_scale_f32(want, (const uint8_t *)(mem + N), N, 0.25f);
    memcpy(want2, mem + N, sizeof want2);
    reduce_add_scale_f32(want2, (const uint8_t *)(mem + 2 * N), N, 0.5f);
    assert_memory_equal(read_back(&x, acc), want, sizeof want);
    assert_memory_equal(read_back(&x, acc2), want2, sizeof want2);
    /* peer folds alone, in a batch of their own */
    device_fold_peer(x.dev, FOLD_COPY, acc2, 0, p, 0, N, 0);
    device_fold_peer(x.dev, FOLD_ADD, acc2, 0, p, 2 * N * sizeof(float), N, 0);
    memcpy(want2, mem, sizeof want2);
    reduce_add_f32(want2, (const uint8_t *)(mem + 2 * N), N);
    assert_memory_equal(read_back(&x, acc2), want2, sizeof want2);
    device_buf_free(x.dev, acc);
    device_buf_free(x.dev, acc2);
    peer_trainer_close(&pt, &x);
}

static void test_cuda_out_of_memory(void **state)
{
    (void)state;
    fixture x;
    dev_open(&x, cuda_name());
    assert_null(device_buf_new(x.dev, (size_t)1 << 52));
    float v[5] = {1, 2, 3, 4, 5};
    devbuf *b = buf_of(&x, v, 5);
    assert_memory_equal(read_back(&x, b), v, sizeof v);
    device_buf_free(x.dev, b);
    devfx_close(&x);
}

int main(void)
{
    const struct CMUnitTest cuda_tests[] = {
        cmocka_unit_test(test_jobs_cuda),          cmocka_unit_test(test_cuda_narrow_out),
        cmocka_unit_test(test_cuda_completion),    cmocka_unit_test(test_cuda_big_buffers),
        cmocka_unit_test(test_cuda_small_batches), cmocka_unit_test(test_cuda_failure),
        cmocka_unit_test(test_cuda_out_of_memory), cmocka_unit_test(test_cuda_peers),
        cmocka_unit_test(test_cuda_peer_narrow),   cmocka_unit_test(test_cuda_peer_small_batched),
    };
    if (strcmp(cuda_name(), "fake-cuda") != 0) {
        /* The gpu-labelled run: the cuda tests only, on a GPU that answers. */
        char err[512];
        int index = -1;
        if (cli_parse_device("PSBENCH_CUDA_DEVICE", cuda_name(), &index, err, sizeof err) < 0 || index < 0 ||
            gpu_probe_device(index, err, sizeof err) < 0) {
            printf("skipped: %s\n", index < 0 ? "PSBENCH_CUDA_DEVICE is not cuda[:N]" : err);
            return 77;
        }
        return cmocka_run_group_tests(cuda_tests, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_host_image_is_storage),
        cmocka_unit_test(test_test_device_recv_areas),
        cmocka_unit_test(test_jobs_cpu),
        cmocka_unit_test(test_jobs_test_device),
        cmocka_unit_test(test_narrow_out_cpu),
        cmocka_unit_test(test_breaches_caught),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc ? rc : cmocka_run_group_tests(cuda_tests, NULL, NULL);
}
