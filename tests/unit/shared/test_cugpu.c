/* test_cugpu.c — shared/gpu/cugpu.h with the server's kernels (psb_kernels):
 * the fake GPU everywhere (run under ASan and TSan by scripts/test.sh), and the same checks on the real one
 * where a GPU answers (PSBENCH_CUGPU=cuda; ctest unit_cugpu_cuda, label
 * gpu, skipped otherwise).
 *
 * What the cuda device relies on: a stream runs its operations in order
 * (a copy, then a kernel on what it copied, then the copy back, then a
 * host function that sees it all); several streams run independently;
 * events time what is between them; an operation that fails fails its
 * stream — later operations and host functions do not run, query says
 * why, and new work is refused — and freeing a stream waits for it.
 *
 * What CUDA IPC between a trainer and a server relies on: a stream waits
 * for an event (local, or another process's) as it stood when the wait was
 * queued; exported memory and events opened by a peer show that peer the
 * exporter's bytes and ordering; bad handles are refused with a reason.
 * CUDA opens no handle in the process that exported it, so the tests of
 * two GPUs in one process are the fake GPU's; the cross-process test (a
 * child: this binary again, fork and exec) runs on both. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/cuda/kernels_host.h"
#include "server/cuda/cumath.h"
#include "shared/gpu.h"

static cugpu *gpu_new(uint64_t fail_at)
{
    char err[512];
    const char *which = getenv("PSBENCH_CUGPU");
    cugpu *g;
    if (which && strcmp(which, "cuda") == 0) {
#ifdef PSBENCH_HAVE_CUDA
        if (gpu_probe_device(0, err, sizeof err) < 0) {
            print_message("no GPU: %s\n", err);
            return NULL;
        }
        if (fail_at)
            return NULL; /* failures are injected on the fake GPU only */
        g = cugpu_cuda_new(0, &psb_kernels, err, sizeof err);
#else
        print_message("this build has no CUDA\n");
        return NULL;
#endif
    } else {
        g = cugpu_fake_new(&psb_kernels, fail_at, 300, err, sizeof err);
    }
    if (!g)
        fail_msg("%s", err);
    return g;
}

typedef struct seen {
    pthread_mutex_t mu;
    int calls;
    float first; /* what the host function saw in the result */
} seen;

static void count_host_fn(void *arg)
{
    seen *s = arg;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    pthread_mutex_unlock(&s->mu);
}

static int calls(seen *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->calls;
    pthread_mutex_unlock(&s->mu);
    return n;
}

enum { N = 100003 };

/* Two pushes folded in, the mean copied back, a host function after: the
 * bytes are the cpu's, and the host function runs after the copy. */
static void test_in_order(void **state)
{
    (void)state;
    cugpu *g = gpu_new(0);
    if (!g)
        skip();
    float *h_in = g->ops->host_alloc(g, 2 * N * sizeof(float)), *h_out = g->ops->host_alloc(g, N * sizeof(float));
    devmem d_acc = g->ops->dev_alloc(g, N * sizeof(float)), d_stage = g->ops->dev_alloc(g, 2 * N * sizeof(float));
    assert_non_null(h_in);
    assert_non_null(h_out);
    assert_non_null(d_acc.p);
    assert_non_null(d_stage.p);
    for (size_t i = 0; i < 2 * N; i++)
        h_in[i] = (float)(i % 1000) * 0.37f - 11.0f;
    cugpu_stream *s = g->ops->stream_new(g);
    assert_non_null(s);
    cugpu_event *e0 = g->ops->event_new(g), *e1 = g->ops->event_new(g);
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    const float scale = 0.5f;
    assert_int_equal(g->ops->event_record(g, s, e0), 0);
    assert_int_equal(g->ops->copy_h2d(g, s, d_stage, h_in, 2 * N * sizeof(float)), 0);
    psb_launch l = {.kernel = PSB_K_FOLD};
    l.u.fold.op = PSB_FOLD_COPY;
    l.u.fold.acc = devmem_f32(d_acc).p;
    l.u.fold.src = devmem_f32(d_stage).p;
    l.u.fold.n = N;
    assert_int_equal(g->ops->launch(g, s, &l), 0);
    l.u.fold.op = PSB_FOLD_ADD_SCALE;
    l.u.fold.src = devf32_at(devmem_f32(d_stage), N).p;
    l.u.fold.s = scale;
    assert_int_equal(g->ops->launch(g, s, &l), 0);
    assert_int_equal(g->ops->copy_d2h(g, s, h_out, d_acc, N * sizeof(float)), 0);
    assert_int_equal(g->ops->event_record(g, s, e1), 0);
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);
    assert_int_equal(g->ops->sync(g, s), 0);
    assert_int_equal(calls(&done), 1);
    assert_int_equal(g->ops->query(g, s), 0);
    for (size_t i = 0; i < N; i++) {
        float want = cumath_fold_add_scale(h_in[i], h_in[N + i], scale);
        if (memcmp(&want, &h_out[i], sizeof want) != 0)
            fail_msg("element %zu: %g, want %g", i, (double)h_out[i], (double)want);
    }
    float ms = -1;
    assert_int_equal(g->ops->elapsed_ms(g, e0, e1, &ms), 0);
    assert_true(ms >= 0);
    g->ops->event_free(g, e0);
    g->ops->event_free(g, e1);
    g->ops->stream_free(g, s);
    g->ops->dev_free(g, d_acc);
    g->ops->dev_free(g, d_stage);
    g->ops->host_free(g, h_in);
    g->ops->host_free(g, h_out);
    cugpu_destroy(g);
}

/* Work queued, then the stream freed at once: freeing waits for it (the
 * host functions run), nothing is left behind. */
static void test_free_waits(void **state)
{
    (void)state;
    cugpu *g = gpu_new(0);
    if (!g)
        skip();
    cugpu_stream *s[3];
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    for (int k = 0; k < 3; k++) {
        s[k] = g->ops->stream_new(g);
        assert_non_null(s[k]);
        for (int i = 0; i < 20; i++)
            assert_int_equal(g->ops->host_fn(g, s[k], count_host_fn, &done), 0);
    }
    for (int k = 0; k < 3; k++)
        g->ops->stream_free(g, s[k]);
    assert_int_equal(calls(&done), 60);
    cugpu_destroy(g);
}

/* Stream-ordered memory: buffers allocated on the stream, used by the work
 * queued after, and freed at once behind it — the free waits for that work
 * without the caller waiting (on the fake GPU a free that ran early would
 * be a use after free, which ASan reports); the result is right; memory
 * freed on a failed stream goes too (ASan's leak check). */
static void test_stream_ordered_memory(void **state)
{
    (void)state;
    cugpu *g = gpu_new(0);
    if (!g)
        skip();
    cugpu_stream *s = g->ops->stream_new(g);
    assert_non_null(s);
    float *h_in = g->ops->host_alloc(g, N * sizeof(float)), *h_out = g->ops->host_alloc(g, N * sizeof(float));
    devmem d_keep = g->ops->dev_alloc(g, N * sizeof(float));
    assert_non_null(h_in);
    assert_non_null(h_out);
    assert_non_null(d_keep.p);
    for (size_t i = 0; i < N; i++)
        h_in[i] = (float)(i % 997) * 0.25f - 3.0f;
    for (int round = 0; round < 8; round++) {
        devmem d_tmp = g->ops->dev_alloc_async(g, s, N * sizeof(float));
        assert_non_null(d_tmp.p);
        assert_int_equal(g->ops->copy_h2d(g, s, d_tmp, h_in, N * sizeof(float)), 0);
        psb_launch l = {.kernel = PSB_K_FOLD};
        l.u.fold.op = round == 0 ? PSB_FOLD_COPY : PSB_FOLD_ADD;
        l.u.fold.acc = devmem_f32(d_keep).p;
        l.u.fold.src = devmem_f32(d_tmp).p;
        l.u.fold.n = N;
        assert_int_equal(g->ops->launch(g, s, &l), 0);
        g->ops->dev_free_async(g, s, d_tmp); /* behind the fold that reads it */
    }
    assert_int_equal(g->ops->copy_d2h(g, s, h_out, d_keep, N * sizeof(float)), 0);
    assert_int_equal(g->ops->sync(g, s), 0);
    for (size_t i = 0; i < N; i++) {
        float want = h_in[i];
        for (int r = 1; r < 8; r++)
            want = cumath_fold_add(want, h_in[i]);
        if (memcmp(&want, &h_out[i], sizeof want) != 0)
            fail_msg("element %zu: %g, want %g", i, (double)h_out[i], (double)want);
    }
    g->ops->stream_free(g, s);
    g->ops->dev_free(g, d_keep);
    g->ops->host_free(g, h_in);
    g->ops->host_free(g, h_out);
    cugpu_destroy(g);

    /* A failed stream (its 2nd operation): what is freed on it still goes. */
    if (!(g = gpu_new(2)))
        return;
    s = g->ops->stream_new(g);
    float *h = g->ops->host_alloc(g, 16 * sizeof(float));
    memset(h, 0, 16 * sizeof(float));
    devmem d1 = g->ops->dev_alloc_async(g, s, 16 * sizeof(float)), d2 = g->ops->dev_alloc_async(g, s, 64);
    assert_int_equal(g->ops->copy_h2d(g, s, d1, h, 16 * sizeof(float)), 0); /* 1: runs */
    assert_int_equal(g->ops->copy_d2h(g, s, h, d1, 16 * sizeof(float)), 0); /* 2: fails */
    g->ops->dev_free_async(g, s, d1); /* queued behind the failure */
    assert_int_equal(g->ops->sync(g, s), -1);
    g->ops->dev_free_async(g, s, d2); /* on a stream already failed */
    g->ops->stream_free(g, s);
    g->ops->host_free(g, h);
    cugpu_destroy(g);
}

/* The 3rd operation fails: the 4th and the host functions never run,
 * query and sync say why, and the stream takes no more work. */
static void test_failure(void **state)
{
    (void)state;
    cugpu *g = gpu_new(3);
    if (!g)
        skip();
    cugpu_stream *s = g->ops->stream_new(g);
    float *h = g->ops->host_alloc(g, 16 * sizeof(float));
    devmem d = g->ops->dev_alloc(g, 16 * sizeof(float));
    memset(h, 0, 16 * sizeof(float));
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);            /* 1: runs */
    assert_int_equal(g->ops->copy_h2d(g, s, d, h, 16 * sizeof(float)), 0); /* 2: runs */
    assert_int_equal(g->ops->copy_d2h(g, s, h, d, 16 * sizeof(float)), 0); /* 3: fails */
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);            /* never */
    assert_int_equal(g->ops->sync(g, s), -1);
    assert_int_equal(g->ops->query(g, s), -1);
    assert_non_null(strstr(g->err, "injected failure of operation 3"));
    assert_int_equal(calls(&done), 1);
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), -1); /* refused at once */
    assert_non_null(strstr(g->err, "injected failure"));
    g->ops->stream_free(g, s);
    assert_int_equal(calls(&done), 1);
    g->ops->dev_free(g, d);
    g->ops->host_free(g, h);
    cugpu_destroy(g);
}

/* The fake GPU's hold (what the integration tests keep a job in flight
 * with): nothing starts while the file exists, everything runs, in order,
 * once it is gone. Fake GPU only. */
static void test_fake_hold(void **state)
{
    (void)state;
    const char *which = getenv("PSBENCH_CUGPU");
    if (which && strcmp(which, "cuda") == 0)
        skip();
    char err[512], path[] = "/tmp/psbench-cugpu-hold-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    cugpu *g = cugpu_fake_new(&psb_kernels, 0, 0, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(cugpu_fake_hold(g, path), 0);
    cugpu_stream *s = g->ops->stream_new(g);
    assert_non_null(s);
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    for (int i = 0; i < 3; i++)
        assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(calls(&done), 0);
    assert_int_equal(g->ops->query(g, s), 1); /* busy */
    unlink(path);
    assert_int_equal(g->ops->sync(g, s), 0);
    assert_int_equal(calls(&done), 3);
    g->ops->stream_free(g, s);
    cugpu_destroy(g);
}

/* The fake GPU from the environment (cugpu_fake_from_env), as both roles
 * make it: the role's default delay where the environment says nothing (or
 * not a whole number), the environment's values where it does. */
static void fake_env_clear(void)
{
    unsetenv("PSBENCH_FAKE_GPU_FAIL_AT");
    unsetenv("PSBENCH_FAKE_GPU_DELAY_US");
    unsetenv("PSBENCH_FAKE_GPU_HOLD");
}

static void test_fake_env_defaults(void **state)
{
    (void)state;
    fake_env_clear();
    cugpu_fake_env e = cugpu_fake_env_read(CUGPU_FAKE_DELAY_US_SERVER);
    assert_int_equal(e.fail_at, 0);
    assert_int_equal(e.delay_us, 200);
    assert_null(e.hold);
    e = cugpu_fake_env_read(CUGPU_FAKE_DELAY_US_TRAINER);
    assert_int_equal(e.fail_at, 0);
    assert_int_equal(e.delay_us, 0);
    assert_null(e.hold);
    /* Said: the same for either role. */
    setenv("PSBENCH_FAKE_GPU_FAIL_AT", "40", 1);
    setenv("PSBENCH_FAKE_GPU_DELAY_US", "300", 1);
    setenv("PSBENCH_FAKE_GPU_HOLD", "/tmp/some-file", 1);
    for (unsigned def = 0; def <= 200; def += 200) {
        e = cugpu_fake_env_read(def);
        assert_int_equal(e.fail_at, 40);
        assert_int_equal(e.delay_us, 300);
        assert_string_equal(e.hold, "/tmp/some-file");
    }
    setenv("PSBENCH_FAKE_GPU_DELAY_US", "0", 1); /* said 0: no delay, even on the server */
    assert_int_equal(cugpu_fake_env_read(CUGPU_FAKE_DELAY_US_SERVER).delay_us, 0);
    /* Empty or not a whole number: as if unset. */
    const char *bad[] = {"", "12x", "abc", "99999999999999999999999", "4294967296"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("PSBENCH_FAKE_GPU_FAIL_AT", bad[i], 1);
        setenv("PSBENCH_FAKE_GPU_DELAY_US", bad[i], 1);
        setenv("PSBENCH_FAKE_GPU_HOLD", "", 1);
        e = cugpu_fake_env_read(CUGPU_FAKE_DELAY_US_SERVER);
        if (i < 4) /* 2^32 is a fail_at, only too big a delay */
            assert_int_equal(e.fail_at, 0);
        assert_int_equal(e.delay_us, 200);
        assert_null(e.hold);
    }
    fake_env_clear();
}

/* What the environment says is what the GPU does: the K-th operation
 * fails; while the hold file exists nothing runs. */
static void test_fake_from_env(void **state)
{
    (void)state;
    char err[512], path[] = "/tmp/psbench-cugpu-env-hold-XXXXXX";
    fake_env_clear();
    setenv("PSBENCH_FAKE_GPU_FAIL_AT", "2", 1);
    cugpu *g = cugpu_fake_from_env(&psb_kernels, CUGPU_FAKE_DELAY_US_TRAINER, err, sizeof err);
    assert_non_null(g);
    cugpu_stream *s = g->ops->stream_new(g);
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);
    assert_int_equal(g->ops->sync(g, s), -1);
    assert_non_null(strstr(g->err, "injected failure of operation 2"));
    assert_int_equal(calls(&done), 1);
    g->ops->stream_free(g, s);
    cugpu_destroy(g);

    fake_env_clear();
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    setenv("PSBENCH_FAKE_GPU_HOLD", path, 1);
    g = cugpu_fake_from_env(&psb_kernels, CUGPU_FAKE_DELAY_US_SERVER, err, sizeof err);
    fake_env_clear();
    assert_non_null(g);
    s = g->ops->stream_new(g);
    done.calls = 0;
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);
    assert_int_equal(g->ops->query(g, s), 1); /* held: it cannot have run */
    assert_int_equal(calls(&done), 0);
    unlink(path);
    assert_int_equal(g->ops->sync(g, s), 0);
    assert_int_equal(calls(&done), 1);
    g->ops->stream_free(g, s);
    cugpu_destroy(g);
}

/* ---- IPC and stream_wait ---------------------------------------------------- */

static bool on_cuda(void)
{
    const char *which = getenv("PSBENCH_CUGPU");
    return which && strcmp(which, "cuda") == 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* A fake GPU held while the file `hold` exists (it may not yet). */
static cugpu *fake_held(const char *hold)
{
    char err[512];
    cugpu *g = cugpu_fake_new(&psb_kernels, 0, 300, err, sizeof err);
    if (!g)
        fail_msg("%s", err);
    assert_int_equal(cugpu_fake_hold(g, hold), 0);
    return g;
}

static void hold_path(char *path, size_t len)
{
    snprintf(path, len, "/tmp/psbench-cugpu-ipc-hold-%d-XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

static void hold_on(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

/* Whether the host functions of `s` were called n times within ms (a
 * check that fails, where sync would hang). */
static bool calls_within(seen *s, int n, long ms)
{
    for (long t = 0; t < ms; t++) {
        if (calls(s) >= n)
            return true;
        sleep_ms(1);
    }
    return calls(s) >= n;
}

static float ramp_at(size_t i) { return (float)(i % 1000) * 0.37f - 11.0f; }

/* Exported memory between two fake GPUs: the bytes either writes the other
 * reads; sizes are checked; handles that are no allocation, or no longer
 * one, are refused with the reason. */
static void test_ipc_memory(void **state)
{
    (void)state;
    if (on_cuda())
        skip(); /* CUDA opens no handle in the exporting process */
    cugpu *a = gpu_new(0), *b = gpu_new(0);
    const size_t bytes = N * sizeof(float);
    float *h_in = a->ops->host_alloc(a, bytes), *h_out = b->ops->host_alloc(b, bytes);
    assert_non_null(h_in);
    assert_non_null(h_out);
    for (size_t i = 0; i < N; i++)
        h_in[i] = ramp_at(i);
    devmem d = a->ops->dev_alloc_ipc(a, bytes);
    assert_non_null(d.p);
    cugpu_ipc_handle h, h_again;
    assert_int_equal(a->ops->ipc_export(a, d, &h), 0);
    assert_int_equal(a->ops->ipc_export(a, d, &h_again), 0);
    assert_memory_equal(&h, &h_again, sizeof h); /* the same each time */
    assert_int_equal(a->ops->ipc_export(a, devmem_at(d, sizeof(float)), &h_again), -1); /* not a base */
    assert_non_null(strstr(a->err, "not the base of an IPC allocation"));
    devmem plain = a->ops->dev_alloc(a, 64);
    assert_int_equal(a->ops->ipc_export(a, plain, &h_again), -1); /* not exportable memory */
    a->ops->dev_free(a, plain);

    assert_null(b->ops->ipc_open(b, &h, bytes + 1).p);
    assert_non_null(strstr(b->err, "holds"));
    devmem p = b->ops->ipc_open(b, &h, bytes);
    assert_non_null(p.p);
    assert_ptr_not_equal(p.p, d.p);

    /* a writes, b reads */
    cugpu_stream *sa = a->ops->stream_new(a), *sb = b->ops->stream_new(b);
    assert_int_equal(a->ops->copy_h2d(a, sa, d, h_in, bytes), 0);
    assert_int_equal(a->ops->sync(a, sa), 0);
    assert_int_equal(b->ops->copy_d2h(b, sb, h_out, p, bytes), 0);
    assert_int_equal(b->ops->sync(b, sb), 0);
    assert_memory_equal(h_out, h_in, bytes);
    /* b writes (a kernel on the opened memory), a reads */
    psb_launch l = {.kernel = PSB_K_FOLD};
    l.u.fold.op = PSB_FOLD_ADD_SCALE;
    l.u.fold.acc = devmem_f32(p).p;
    l.u.fold.src = devmem_f32(p).p;
    l.u.fold.s = 0.5f;
    l.u.fold.n = N;
    assert_int_equal(b->ops->launch(b, sb, &l), 0);
    assert_int_equal(b->ops->sync(b, sb), 0);
    assert_int_equal(a->ops->copy_d2h(a, sa, h_out, d, bytes), 0);
    assert_int_equal(a->ops->sync(a, sa), 0);
    for (size_t i = 0; i < N; i++) {
        float want = cumath_fold_add_scale(h_in[i], h_in[i], 0.5f);
        if (memcmp(&want, &h_out[i], sizeof want) != 0)
            fail_msg("element %zu: %g, want %g", i, (double)h_out[i], (double)want);
    }

    /* Bad handles: never a crash, always a reason. */
    cugpu_ipc_handle bad;
    memset(&bad, 0, sizeof bad);
    assert_null(b->ops->ipc_open(b, &bad, 4).p);
    assert_non_null(strstr(b->err, "bad magic"));
    bad = h;
    bad.bytes[0] ^= 0x5a;
    assert_null(b->ops->ipc_open(b, &bad, 4).p);
    assert_non_null(strstr(b->err, "bad magic"));
    for (size_t i = 0; i < sizeof bad.bytes; i++)
        bad.bytes[i] = (unsigned char)(i * 131 + 7);
    assert_null(b->ops->ipc_open(b, &bad, 4).p);
    cugpu_event *e = a->ops->event_new_ipc(a);
    assert_non_null(e);
    cugpu_ipc_handle he;
    assert_int_equal(a->ops->event_export(a, e, &he), 0);
    assert_null(b->ops->ipc_open(b, &he, 4).p); /* an event's handle */
    assert_non_null(strstr(b->err, "of an event where one of memory"));
    assert_null(b->ops->event_open(b, &h)); /* memory's, as an event */
    assert_non_null(strstr(b->err, "of memory where one of an event"));
    a->ops->event_free(a, e);
    /* Freed: its descriptor is closed (or its number another file's). */
    devmem d2 = a->ops->dev_alloc_ipc(a, 4096);
    cugpu_ipc_handle h2;
    assert_int_equal(a->ops->ipc_export(a, d2, &h2), 0);
    a->ops->dev_free_ipc(a, d2);
    assert_null(b->ops->ipc_open(b, &h2, 4096).p);
    assert_true(strstr(b->err, "has no descriptor") || strstr(b->err, "another file now"));
    devmem d3 = a->ops->dev_alloc_ipc(a, 4096); /* likely the same number again */
    assert_non_null(d3.p);
    assert_null(b->ops->ipc_open(b, &h2, 4096).p);
    assert_true(strstr(b->err, "has no descriptor") || strstr(b->err, "another file now"));
    a->ops->dev_free_ipc(a, d3);

    /* The opened mapping outlives the exporter's free (its own pages). */
    b->ops->ipc_close(b, p);
    a->ops->stream_free(a, sa);
    b->ops->stream_free(b, sb);
    a->ops->dev_free_ipc(a, d);
    a->ops->host_free(a, h_in);
    b->ops->host_free(b, h_out);
    cugpu_destroy(a);
    cugpu_destroy(b);
}

/* A fake GPU handle's bytes, as shared/gpu/cugpu_fake.c lays them out (a
 * peer can write any): magic, kind, pid, descriptor, zero, size, device,
 * inode. */
typedef struct wire {
    uint64_t magic;
    uint32_t kind;
    int32_t pid, fd;
    uint32_t zero;
    uint64_t size, dev, ino;
} wire;

static cugpu_ipc_handle forged_handle(uint32_t kind, int fd, uint64_t size)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    wire w = {.magic = 0x3143504955504746ull, .kind = kind, .pid = (int32_t)getpid(), .fd = fd, .size = size,
              .dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino};
    cugpu_ipc_handle h;
    memset(&h, 0, sizeof h);
    memcpy(h.bytes, &w, sizeof w);
    return h;
}

static int sealed_memfd(unsigned flags, size_t size)
{
    int fd = memfd_create("t", MFD_ALLOW_SEALING | flags);
    if (fd >= 0 && (ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The size a peer claims is checked against the object the handle opens,
 * as the real GPU checks it (cuMemGetAddressRange): the memfd's own size,
 * not the handle's size field (the peer's word too). A claim within the
 * object is taken whatever the handle says; beyond it, refused and
 * nothing left mapped. */
static void test_ipc_claim_against_the_object(void **state)
{
    (void)state;
    if (on_cuda())
        skip(); /* the handles are the fake GPU's */
    cugpu *b = gpu_new(0);
    const size_t mib = (size_t)1 << 20;
    int fd = sealed_memfd(0, mib);
    assert_true(fd >= 0);
    cugpu_ipc_handle h = forged_handle(1, fd, 4096); /* the handle understates it */
    devmem p = b->ops->ipc_open(b, &h, mib);
    assert_non_null(p.p);
    b->ops->ipc_close(b, p);
    const size_t claims[] = {mib + 1, (size_t)64 << 30, SIZE_MAX};
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++) {
        assert_null(b->ops->ipc_open(b, &h, claims[i]).p);
        assert_non_null(strstr(b->err, "the exported allocation holds 1048576 bytes"));
    }
    h = forged_handle(1, fd, 2 * mib); /* overstates it */
    assert_null(b->ops->ipc_open(b, &h, 4096).p);
    assert_non_null(strstr(b->err, "is not a sealed memfd of 2097152 bytes"));
    close(fd);
    cugpu_destroy(b);
}

/* Memory or an event's page that is not ordinary shared memory (a
 * hugetlbfs memfd: its pages may be missing at the first touch, SIGBUS)
 * is refused before it is mapped. Skipped, with the reason, where the
 * kernel makes no hugetlbfs memfd. */
static void test_ipc_hugetlb_refused(void **state)
{
    (void)state;
    if (on_cuda())
        skip();
    const size_t huge = (size_t)2 << 20;
    int fd = sealed_memfd(MFD_HUGETLB, huge);
    if (fd < 0) {
        print_message("skipped: a sealed hugetlbfs memfd of 2 MiB: %s\n", strerror(errno));
        skip();
    }
    cugpu *b = gpu_new(0);
    cugpu_ipc_handle h = forged_handle(1, fd, huge);
    assert_null(b->ops->ipc_open(b, &h, 4096).p);
    assert_non_null(strstr(b->err, "is on hugetlbfs, not ordinary shared memory"));
    h = forged_handle(2, fd, huge);
    assert_null(b->ops->event_open(b, &h));
    assert_non_null(strstr(b->err, "is on hugetlbfs, not ordinary shared memory"));
    close(fd);
    cugpu_destroy(b);
}

/* An IPC event orders another GPU's stream: b waits for a's copy, held
 * late (a's hold file), before it reads what a wrote. Without the wait, b
 * would read zeros (the memory is fresh) and run its host function at
 * once. */
static void test_ipc_event_orders(void **state)
{
    (void)state;
    if (on_cuda())
        skip();
    char path[128];
    hold_path(path, sizeof path); /* a is held from the start */
    cugpu *a = fake_held(path), *b = gpu_new(0);
    const size_t bytes = N * sizeof(float);
    float *h_in = a->ops->host_alloc(a, bytes), *h_out = b->ops->host_alloc(b, bytes);
    for (size_t i = 0; i < N; i++)
        h_in[i] = ramp_at(i);
    memset(h_out, 0, bytes);
    devmem d = a->ops->dev_alloc_ipc(a, bytes);
    cugpu_event *e = a->ops->event_new_ipc(a);
    assert_non_null(d.p);
    assert_non_null(e);
    cugpu_ipc_handle hm, he;
    assert_int_equal(a->ops->ipc_export(a, d, &hm), 0);
    assert_int_equal(a->ops->event_export(a, e, &he), 0);
    devmem p = b->ops->ipc_open(b, &hm, bytes);
    cugpu_event *eb = b->ops->event_open(b, &he);
    assert_non_null(p.p);
    assert_non_null(eb);
    assert_int_equal(b->ops->event_query(b, eb), 0); /* never recorded: complete */
    cugpu_event *local = a->ops->event_new(a);
    float ms;
    assert_int_equal(a->ops->elapsed_ms(a, local, e, &ms), -1); /* no timing */
    a->ops->event_free(a, local);

    cugpu_stream *sa = a->ops->stream_new(a), *sb = b->ops->stream_new(b);
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    assert_int_equal(a->ops->copy_h2d(a, sa, d, h_in, bytes), 0);
    assert_int_equal(a->ops->event_record(a, sa, e), 0);
    assert_int_equal(b->ops->stream_wait(b, sb, eb), 0);
    assert_int_equal(b->ops->copy_d2h(b, sb, h_out, p, bytes), 0);
    assert_int_equal(b->ops->host_fn(b, sb, count_host_fn, &done), 0);
    sleep_ms(60);
    assert_int_equal(calls(&done), 0);
    assert_int_equal(b->ops->query(b, sb), 1);
    assert_int_equal(b->ops->event_query(b, eb), 1); /* the record is seen through the shared page */
    assert_int_equal(a->ops->event_query(a, e), 1);
    unlink(path);
    assert_int_equal(b->ops->sync(b, sb), 0);
    assert_int_equal(calls(&done), 1);
    assert_memory_equal(h_out, h_in, bytes);
    assert_int_equal(b->ops->event_query(b, eb), 0);
    assert_int_equal(a->ops->event_query(a, e), 0);

    /* The opened event is freed while a wait on it is still queued: the
     * wait holds it (and a's, freed as well, lives in the page). */
    hold_on(path);
    assert_int_equal(a->ops->event_record(a, sa, e), 0);
    assert_int_equal(b->ops->stream_wait(b, sb, eb), 0);
    assert_int_equal(b->ops->host_fn(b, sb, count_host_fn, &done), 0);
    b->ops->event_free(b, eb);
    a->ops->event_free(a, e);
    sleep_ms(30);
    assert_int_equal(calls(&done), 1);
    unlink(path);
    assert_int_equal(b->ops->sync(b, sb), 0);
    assert_int_equal(calls(&done), 2);

    a->ops->stream_free(a, sa);
    b->ops->stream_free(b, sb);
    b->ops->ipc_close(b, p);
    a->ops->dev_free_ipc(a, d);
    a->ops->host_free(a, h_in);
    b->ops->host_free(b, h_out);
    cugpu_destroy(a);
    cugpu_destroy(b);
}

/* stream_wait on local events: an event never recorded makes no wait; a
 * wait is for the record that was the latest when it was queued — not for
 * one made after it. On the real GPU the order (a copy, then a stream that
 * waits and reads) is checked; the lateness, which needs the fake's hold,
 * on the fake GPU only. */
static void test_stream_wait_local(void **state)
{
    (void)state;
    cugpu *g = gpu_new(0);
    if (!g)
        skip();
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    cugpu_stream *s1 = g->ops->stream_new(g), *s2 = g->ops->stream_new(g);
    cugpu_event *never = g->ops->event_new(g), *never_ipc = g->ops->event_new_ipc(g);
    assert_non_null(never);
    assert_non_null(never_ipc);
    assert_int_equal(g->ops->stream_wait(g, s2, never), 0);
    assert_int_equal(g->ops->stream_wait(g, s2, never_ipc), 0);
    assert_int_equal(g->ops->host_fn(g, s2, count_host_fn, &done), 0);
    assert_int_equal(g->ops->sync(g, s2), 0);
    assert_int_equal(calls(&done), 1);
    g->ops->event_free(g, never);
    g->ops->event_free(g, never_ipc);

    /* s2 reads what s1 copied, after s1's event. */
    const size_t bytes = N * sizeof(float);
    float *h_in = g->ops->host_alloc(g, bytes), *h_out = g->ops->host_alloc(g, bytes);
    devmem d = g->ops->dev_alloc(g, bytes);
    for (size_t i = 0; i < N; i++)
        h_in[i] = ramp_at(i);
    cugpu_event *e = g->ops->event_new(g);
    assert_int_equal(g->ops->copy_h2d(g, s1, d, h_in, bytes), 0);
    assert_int_equal(g->ops->event_record(g, s1, e), 0);
    assert_int_equal(g->ops->stream_wait(g, s2, e), 0);
    assert_int_equal(g->ops->copy_d2h(g, s2, h_out, d, bytes), 0);
    assert_int_equal(g->ops->sync(g, s2), 0);
    assert_memory_equal(h_out, h_in, bytes);
    assert_int_equal(g->ops->sync(g, s1), 0);
    g->ops->event_free(g, e);
    g->ops->stream_free(g, s1);
    g->ops->stream_free(g, s2);
    g->ops->dev_free(g, d);
    g->ops->host_free(g, h_in);
    g->ops->host_free(g, h_out);
    cugpu_destroy(g);
    if (on_cuda())
        return;

    /* Lateness, on two fake GPUs (a hold stops a whole GPU): a's event,
     * recorded once and complete; then a held and e recorded again. A wait
     * queued between the two records does not wait for the second, even
     * when it runs after it was queued (b held meanwhile); one queued after
     * it does. */
    char path[128], path_b[128];
    hold_path(path, sizeof path);
    unlink(path); /* not held yet */
    hold_path(path_b, sizeof path_b); /* held */
    cugpu *a = fake_held(path), *b = fake_held(path_b);
    cugpu_stream *sa = a->ops->stream_new(a), *sb = b->ops->stream_new(b);
    e = a->ops->event_new(a);
    assert_int_equal(a->ops->event_record(a, sa, e), 0);
    assert_int_equal(a->ops->sync(a, sa), 0);
    hold_on(path);
    assert_int_equal(b->ops->stream_wait(b, sb, e), 0); /* for record 1, complete */
    assert_int_equal(a->ops->event_record(a, sa, e), 0); /* record 2, held */
    assert_int_equal(b->ops->host_fn(b, sb, count_host_fn, &done), 0);
    unlink(path_b); /* b's wait runs now, record 2 queued */
    if (!calls_within(&done, 2, 5000))
        fail_msg("a wait waited for a record made after it");
    assert_int_equal(a->ops->query(a, sa), 1);
    assert_int_equal(a->ops->event_query(a, e), 1);
    assert_int_equal(b->ops->stream_wait(b, sb, e), 0); /* for record 2 */
    assert_int_equal(b->ops->host_fn(b, sb, count_host_fn, &done), 0);
    sleep_ms(60);
    assert_int_equal(calls(&done), 2);
    assert_int_equal(b->ops->query(b, sb), 1);
    unlink(path);
    assert_int_equal(b->ops->sync(b, sb), 0);
    assert_int_equal(calls(&done), 3);
    assert_int_equal(a->ops->event_query(a, e), 0);
    a->ops->event_free(a, e);
    a->ops->stream_free(a, sa);
    b->ops->stream_free(b, sb);
    cugpu_destroy(a);
    cugpu_destroy(b);
}

/* A wait is an operation: injected failures count it. A wait for a record
 * that will never run (its stream failed) fails the waiting stream instead
 * of waiting forever. Fake GPU only. */
static void test_stream_wait_failures(void **state)
{
    (void)state;
    if (on_cuda())
        skip();
    cugpu *g = gpu_new(2);
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    cugpu_stream *s = g->ops->stream_new(g);
    cugpu_event *e = g->ops->event_new(g);
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0); /* 1: runs */
    assert_int_equal(g->ops->stream_wait(g, s, e), 0);          /* 2: fails */
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0); /* never */
    assert_int_equal(g->ops->sync(g, s), -1);
    assert_non_null(strstr(g->err, "injected failure of operation 2"));
    assert_int_equal(calls(&done), 1);
    g->ops->event_free(g, e);
    g->ops->stream_free(g, s);
    cugpu_destroy(g);

    /* a's stream fails at its first operation; its record behind it never
     * runs: b's wait on it (through IPC, as another process would) fails. */
    cugpu *a = gpu_new(1), *b = gpu_new(0);
    cugpu_stream *sa = a->ops->stream_new(a), *sb = b->ops->stream_new(b);
    cugpu_event *ea = a->ops->event_new_ipc(a);
    cugpu_ipc_handle he;
    assert_int_equal(a->ops->event_export(a, ea, &he), 0);
    cugpu_event *eb = b->ops->event_open(b, &he);
    assert_non_null(eb);
    assert_int_equal(a->ops->host_fn(a, sa, count_host_fn, &done), 0); /* 1: fails */
    (void)a->ops->event_record(a, sa, ea); /* skipped, or refused if the failure came first */
    assert_int_equal(b->ops->stream_wait(b, sb, eb), 0);
    assert_int_equal(b->ops->host_fn(b, sb, count_host_fn, &done), 0);
    assert_int_equal(b->ops->sync(b, sb), -1);
    assert_non_null(strstr(b->err, "will never complete"));
    assert_int_equal(calls(&done), 1);
    assert_int_equal(a->ops->sync(a, sa), -1);
    b->ops->event_free(b, eb);
    a->ops->event_free(a, ea);
    a->ops->stream_free(a, sa);
    b->ops->stream_free(b, sb);
    cugpu_destroy(a);
    cugpu_destroy(b);
}

/* ---- the other process: this binary again ---------------------------------------- */

/* PSBENCH_CUGPU_IPC_CHILD="MODE RFD WFD [HOLD]": main runs ipc_child. */
#define IPC_CHILD_ENV "PSBENCH_CUGPU_IPC_CHILD"

/* n bytes, or -1 (the peer is gone, or 30 s passed: a test never hangs). */
static int pipe_read(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc = poll(&pfd, 1, 30 * 1000);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int pipe_write(int fd, const void *buf, size_t n)
{
    for (size_t put = 0; put < n;) {
        ssize_t w = write(fd, (const char *)buf + put, n - put);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        put += (size_t)w;
    }
    return 0;
}

/* The child: started with pipes to its parent, the handles come and go as
 * bytes, as a protocol's frame would carry them. */
typedef struct ipc_child_ctx {
    cugpu *g;
    int rfd, wfd;
} ipc_child_ctx;

#define CHILD_CHECK(cond)                                                                                         \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            fprintf(stderr, "ipc child: %s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond,                     \
                    c->g ? c->g->err : "");                                                                       \
            return 1;                                                                                             \
        }                                                                                                         \
    } while (0)

static cugpu *child_gpu(const char *hold)
{
    char err[512];
    cugpu *g;
#ifdef PSBENCH_HAVE_CUDA
    if (on_cuda())
        g = cugpu_cuda_new(0, &psb_kernels, err, sizeof err);
    else
#endif
        g = cugpu_fake_new(&psb_kernels, 0, 300, err, sizeof err);
    if (!g)
        fprintf(stderr, "ipc child: %s\n", err);
    else if (hold && !on_cuda() && cugpu_fake_hold(g, hold) < 0) {
        cugpu_destroy(g);
        g = NULL;
    }
    return g;
}

/* "peer": the server's part. It opens the parent's memory and event, waits
 * on its stream for the parent's record (held late on the fake GPU until
 * this side says it has queued its work), reads the parent's bytes, folds
 * them into memory of its own (a kernel reading the opened memory) and
 * records its own event, exports both; the parent waits on that event and
 * reads the result. Everything is released before it exits 0. */
static int ipc_child_peer(ipc_child_ctx *c)
{
    const size_t bytes = N * sizeof(float);
    cugpu *g = c->g;
    cugpu_ipc_handle hm, he;
    CHILD_CHECK(pipe_read(c->rfd, &hm, sizeof hm) == 0 && pipe_read(c->rfd, &he, sizeof he) == 0);
    devmem p = g->ops->ipc_open(g, &hm, bytes);
    CHILD_CHECK(!devmem_is_none(p));
    cugpu_event *e = g->ops->event_open(g, &he);
    CHILD_CHECK(e != NULL);
    cugpu_stream *s = g->ops->stream_new(g);
    float *h = g->ops->host_alloc(g, bytes);
    devmem d = g->ops->dev_alloc_ipc(g, bytes);
    cugpu_event *mine = g->ops->event_new_ipc(g);
    CHILD_CHECK(s && h && d.p && mine);
    memset(h, 0, bytes);
    CHILD_CHECK(g->ops->stream_wait(g, s, e) == 0);
    CHILD_CHECK(g->ops->copy_d2h(g, s, h, p, bytes) == 0);
    if (!on_cuda()) {
        /* The parent's GPU is held: this stream must be waiting. */
        sleep_ms(60);
        CHILD_CHECK(g->ops->query(g, s) == 1);
        CHILD_CHECK(g->ops->event_query(g, e) == 1);
    }
    CHILD_CHECK(pipe_write(c->wfd, "q", 1) == 0); /* queued: the parent lets its GPU go */
    CHILD_CHECK(g->ops->sync(g, s) == 0);
    for (size_t i = 0; i < N; i++) {
        float want = ramp_at(i);
        if (memcmp(&want, &h[i], sizeof want) != 0) {
            fprintf(stderr, "ipc child: element %zu: %g, want %g\n", i, (double)h[i], (double)want);
            return 1;
        }
    }
    psb_launch l = {.kernel = PSB_K_FOLD};
    l.u.fold.op = PSB_FOLD_COPY;
    l.u.fold.acc = devmem_f32(d).p;
    l.u.fold.src = devmem_f32(p).p;
    l.u.fold.n = N;
    CHILD_CHECK(g->ops->launch(g, s, &l) == 0);
    l.u.fold.op = PSB_FOLD_ADD_SCALE;
    l.u.fold.s = 0.5f;
    CHILD_CHECK(g->ops->launch(g, s, &l) == 0);
    CHILD_CHECK(g->ops->event_record(g, s, mine) == 0);
    cugpu_ipc_handle rm, re;
    CHILD_CHECK(g->ops->ipc_export(g, d, &rm) == 0 && g->ops->event_export(g, mine, &re) == 0);
    CHILD_CHECK(pipe_write(c->wfd, &rm, sizeof rm) == 0 && pipe_write(c->wfd, &re, sizeof re) == 0);
    char done;
    CHILD_CHECK(pipe_read(c->rfd, &done, 1) == 0 && done == 'd'); /* the parent read it all */
    CHILD_CHECK(g->ops->sync(g, s) == 0);
    g->ops->stream_free(g, s);
    g->ops->event_free(g, mine);
    g->ops->event_free(g, e);
    g->ops->ipc_close(g, p);
    g->ops->dev_free_ipc(g, d);
    g->ops->host_free(g, h);
    return 0;
}

/* "gone": exports memory and an event recorded on its held GPU (so the
 * record never completes), then waits to be killed. */
static int ipc_child_gone(ipc_child_ctx *c)
{
    cugpu *g = c->g;
    cugpu_stream *s = g->ops->stream_new(g);
    devmem d = g->ops->dev_alloc_ipc(g, 4096);
    cugpu_event *e = g->ops->event_new_ipc(g);
    CHILD_CHECK(s && d.p && e);
    CHILD_CHECK(g->ops->event_record(g, s, e) == 0);
    cugpu_ipc_handle hm, he;
    CHILD_CHECK(g->ops->ipc_export(g, d, &hm) == 0 && g->ops->event_export(g, e, &he) == 0);
    CHILD_CHECK(pipe_write(c->wfd, &hm, sizeof hm) == 0 && pipe_write(c->wfd, &he, sizeof he) == 0);
    char never;
    (void)pipe_read(c->rfd, &never, 1);
    fprintf(stderr, "ipc child: not killed\n");
    return 1;
}

static int ipc_child(const char *spec)
{
    char mode[16], hold[256] = "";
    ipc_child_ctx c = {NULL, -1, -1};
    if (sscanf(spec, "%15s %d %d %255s", mode, &c.rfd, &c.wfd, hold) < 3) {
        fprintf(stderr, "ipc child: bad %s: %s\n", IPC_CHILD_ENV, spec);
        return 2;
    }
    if (!(c.g = child_gpu(hold[0] ? hold : NULL)))
        return 1;
    int rc = strcmp(mode, "peer") == 0 ? ipc_child_peer(&c) : strcmp(mode, "gone") == 0 ? ipc_child_gone(&c) : 2;
    cugpu_destroy(c.g);
    close(c.rfd);
    close(c.wfd);
    return rc;
}

typedef struct child {
    pid_t pid;
    int to, from; /* the parent's ends */
} child;

/* This binary again (exec: a fresh process, as CUDA needs after a fork),
 * in `mode`. */
static child child_start(const char *mode, const char *hold)
{
    int down[2], up[2];
    assert_int_equal(pipe(down), 0);
    assert_int_equal(pipe(up), 0);
    child ch = {fork(), down[1], up[0]};
    assert_true(ch.pid >= 0);
    if (ch.pid == 0) {
        char spec[512];
        snprintf(spec, sizeof spec, "%s %d %d %s", mode, down[0], up[1], hold ? hold : "");
        close(down[1]);
        close(up[0]);
        setenv(IPC_CHILD_ENV, spec, 1);
        execl("/proc/self/exe", "test_cugpu", (char *)NULL);
        _exit(127);
    }
    close(down[0]);
    close(up[1]);
    return ch;
}

static int child_end(child *ch)
{
    close(ch->to);
    close(ch->from);
    int status = 0;
    while (waitpid(ch->pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    return status;
}

/* Across processes, both ways (the trainer's part here, the server's in
 * the child): the child waits for this side's event, held late on the fake
 * GPU, and reads its memory; this side waits for the child's event and
 * reads the child's result. The child's exit status says its checks
 * passed. */
static void test_ipc_child(void **state)
{
    (void)state;
    cugpu *g = gpu_new(0);
    if (!g)
        skip();
    cugpu_destroy(g);
    char path[128];
    hold_path(path, sizeof path);
    child ch = child_start("peer", NULL);
    g = on_cuda() ? gpu_new(0) : fake_held(path);
    if (on_cuda())
        unlink(path);
    const size_t bytes = N * sizeof(float);
    float *h_in = g->ops->host_alloc(g, bytes), *h_out = g->ops->host_alloc(g, bytes);
    devmem d = g->ops->dev_alloc_ipc(g, bytes);
    cugpu_event *e = g->ops->event_new_ipc(g);
    cugpu_stream *s = g->ops->stream_new(g);
    assert_non_null(h_in);
    assert_non_null(h_out);
    assert_non_null(d.p);
    assert_non_null(e);
    assert_non_null(s);
    for (size_t i = 0; i < N; i++)
        h_in[i] = ramp_at(i);
    assert_int_equal(g->ops->copy_h2d(g, s, d, h_in, bytes), 0);
    assert_int_equal(g->ops->event_record(g, s, e), 0);
    cugpu_ipc_handle hm, he;
    assert_int_equal(g->ops->ipc_export(g, d, &hm), 0);
    assert_int_equal(g->ops->event_export(g, e, &he), 0);
    assert_int_equal(pipe_write(ch.to, &hm, sizeof hm), 0);
    assert_int_equal(pipe_write(ch.to, &he, sizeof he), 0);
    char q = 0;
    assert_int_equal(pipe_read(ch.from, &q, 1), 0);
    assert_int_equal(q, 'q');
    unlink(path); /* the child's stream waits on ours: let it go */
    cugpu_ipc_handle rm, re;
    assert_int_equal(pipe_read(ch.from, &rm, sizeof rm), 0);
    assert_int_equal(pipe_read(ch.from, &re, sizeof re), 0);
    devmem p = g->ops->ipc_open(g, &rm, bytes);
    assert_non_null(p.p);
    cugpu_event *pe = g->ops->event_open(g, &re);
    assert_non_null(pe);
    memset(h_out, 0, bytes);
    assert_int_equal(g->ops->stream_wait(g, s, pe), 0);
    assert_int_equal(g->ops->copy_d2h(g, s, h_out, p, bytes), 0);
    assert_int_equal(g->ops->sync(g, s), 0);
    assert_int_equal(g->ops->event_query(g, pe), 0);
    for (size_t i = 0; i < N; i++) {
        float want = cumath_fold_add_scale(h_in[i], h_in[i], 0.5f);
        if (memcmp(&want, &h_out[i], sizeof want) != 0)
            fail_msg("element %zu: %g, want %g", i, (double)h_out[i], (double)want);
    }
    g->ops->ipc_close(g, p);
    g->ops->event_free(g, pe);
    assert_int_equal(pipe_write(ch.to, "d", 1), 0);
    int status = child_end(&ch);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    g->ops->stream_free(g, s);
    g->ops->event_free(g, e);
    g->ops->dev_free_ipc(g, d);
    g->ops->host_free(g, h_in);
    g->ops->host_free(g, h_out);
    cugpu_destroy(g);
}

/* A peer killed with a record of its event queued (never to complete): a
 * wait on it fails once the peer is gone — a zombie not yet reaped is gone
 * too — instead of hanging; its memory can no longer be opened. Fake GPU
 * only. */
static void test_ipc_peer_gone(void **state)
{
    (void)state;
    if (on_cuda())
        skip();
    char path[128];
    hold_path(path, sizeof path); /* the child's GPU, held throughout */
    child ch = child_start("gone", path);
    cugpu_ipc_handle hm, he;
    assert_int_equal(pipe_read(ch.from, &hm, sizeof hm), 0);
    assert_int_equal(pipe_read(ch.from, &he, sizeof he), 0);
    cugpu *g = gpu_new(0);
    cugpu_event *e = g->ops->event_open(g, &he);
    assert_non_null(e);
    assert_int_equal(g->ops->event_query(g, e), 1); /* recorded there, held */
    cugpu_stream *s = g->ops->stream_new(g);
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    assert_int_equal(g->ops->stream_wait(g, s, e), 0);
    assert_int_equal(g->ops->host_fn(g, s, count_host_fn, &done), 0);
    sleep_ms(60);
    assert_int_equal(g->ops->query(g, s), 1); /* waiting: the peer lives */
    assert_int_equal(kill(ch.pid, SIGKILL), 0);
    assert_int_equal(g->ops->sync(g, s), -1); /* not reaped yet */
    assert_non_null(strstr(g->err, "which is gone"));
    assert_int_equal(calls(&done), 0);
    int status = child_end(&ch);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_null(g->ops->ipc_open(g, &hm, 4096).p);
    assert_non_null(strstr(g->err, "has no descriptor"));
    g->ops->event_free(g, e);
    g->ops->stream_free(g, s);
    cugpu_destroy(g);
    unlink(path);
}

int main(void)
{
    const char *child_spec = getenv(IPC_CHILD_ENV);
    if (child_spec)
        return ipc_child(child_spec);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order),
        cmocka_unit_test(test_free_waits),
        cmocka_unit_test(test_failure),
        cmocka_unit_test(test_stream_ordered_memory),
        cmocka_unit_test(test_fake_hold),
        cmocka_unit_test(test_fake_env_defaults),
        cmocka_unit_test(test_fake_from_env),
        cmocka_unit_test(test_ipc_memory),
        cmocka_unit_test(test_ipc_claim_against_the_object),
        cmocka_unit_test(test_ipc_hugetlb_refused),
        cmocka_unit_test(test_ipc_event_orders),
        cmocka_unit_test(test_stream_wait_local),
        cmocka_unit_test(test_stream_wait_failures),
        cmocka_unit_test(test_ipc_child),
        cmocka_unit_test(test_ipc_peer_gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
