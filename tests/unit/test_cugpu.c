/* test_cugpu.c — shared/cugpu.h with the server's kernels (psb_kernels):
 * the fake GPU everywhere (run under ASan and TSan by scripts/test.sh), and the same checks on the real one
 * where a GPU answers (PSBENCH_CUGPU=cuda; ctest unit_cugpu_cuda, label
 * gpu, skipped otherwise).
 *
 * What the cuda device relies on: a stream runs its operations in order
 * (a copy, then a kernel on what it copied, then the copy back, then a
 * host function that sees it all); several streams run independently;
 * events time what is between them; an operation that fails fails its
 * stream — later operations and host functions do not run, query says
 * why, and new work is refused — and freeing a stream waits for it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void on_done(void *arg)
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
    float *d_acc = g->ops->dev_alloc(g, N * sizeof(float)), *d_stage = g->ops->dev_alloc(g, 2 * N * sizeof(float));
    assert_non_null(h_in);
    assert_non_null(h_out);
    assert_non_null(d_acc);
    assert_non_null(d_stage);
    for (size_t i = 0; i < 2 * N; i++)
        h_in[i] = (float)(i % 1000) * 0.37f - 11.0f;
    cugpu_stream *s = g->ops->stream_new(g);
    assert_non_null(s);
    cugpu_event *e0 = g->ops->event_new(g), *e1 = g->ops->event_new(g);
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    const float scale = 0.5f;
    assert_int_equal(g->ops->event_record(g, s, e0), 0);
    assert_int_equal(g->ops->copy(g, s, d_stage, h_in, 2 * N * sizeof(float), CUGPU_H2D), 0);
    psb_launch l = {.kernel = PSB_K_FOLD};
    l.u.fold.op = PSB_FOLD_COPY;
    l.u.fold.acc = d_acc;
    l.u.fold.src = d_stage;
    l.u.fold.n = N;
    assert_int_equal(g->ops->launch(g, s, &l), 0);
    l.u.fold.op = PSB_FOLD_ADD_SCALE;
    l.u.fold.src = d_stage + N;
    l.u.fold.s = scale;
    assert_int_equal(g->ops->launch(g, s, &l), 0);
    assert_int_equal(g->ops->copy(g, s, h_out, d_acc, N * sizeof(float), CUGPU_D2H), 0);
    assert_int_equal(g->ops->event_record(g, s, e1), 0);
    assert_int_equal(g->ops->host_fn(g, s, on_done, &done), 0);
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
            assert_int_equal(g->ops->host_fn(g, s[k], on_done, &done), 0);
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
    float *d_keep = g->ops->dev_alloc(g, N * sizeof(float));
    assert_non_null(h_in);
    assert_non_null(h_out);
    assert_non_null(d_keep);
    for (size_t i = 0; i < N; i++)
        h_in[i] = (float)(i % 997) * 0.25f - 3.0f;
    for (int round = 0; round < 8; round++) {
        float *d_tmp = g->ops->dev_alloc_async(g, s, N * sizeof(float));
        assert_non_null(d_tmp);
        assert_int_equal(g->ops->copy(g, s, d_tmp, h_in, N * sizeof(float), CUGPU_H2D), 0);
        psb_launch l = {.kernel = PSB_K_FOLD};
        l.u.fold.op = round == 0 ? PSB_FOLD_COPY : PSB_FOLD_ADD;
        l.u.fold.acc = d_keep;
        l.u.fold.src = d_tmp;
        l.u.fold.n = N;
        assert_int_equal(g->ops->launch(g, s, &l), 0);
        g->ops->dev_free_async(g, s, d_tmp); /* behind the fold that reads it */
    }
    assert_int_equal(g->ops->copy(g, s, h_out, d_keep, N * sizeof(float), CUGPU_D2H), 0);
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
    float *d1 = g->ops->dev_alloc_async(g, s, 16 * sizeof(float)), *d2 = g->ops->dev_alloc_async(g, s, 64);
    assert_int_equal(g->ops->copy(g, s, d1, h, 16 * sizeof(float), CUGPU_H2D), 0); /* 1: runs */
    assert_int_equal(g->ops->copy(g, s, h, d1, 16 * sizeof(float), CUGPU_D2H), 0); /* 2: fails */
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
    float *h = g->ops->host_alloc(g, 16 * sizeof(float)), *d = g->ops->dev_alloc(g, 16 * sizeof(float));
    memset(h, 0, 16 * sizeof(float));
    seen done = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
    assert_int_equal(g->ops->host_fn(g, s, on_done, &done), 0);            /* 1: runs */
    assert_int_equal(g->ops->copy(g, s, d, h, 16 * sizeof(float), CUGPU_H2D), 0); /* 2: runs */
    assert_int_equal(g->ops->copy(g, s, h, d, 16 * sizeof(float), CUGPU_D2H), 0); /* 3: fails */
    assert_int_equal(g->ops->host_fn(g, s, on_done, &done), 0);            /* never */
    assert_int_equal(g->ops->sync(g, s), -1);
    assert_int_equal(g->ops->query(g, s), -1);
    assert_non_null(strstr(g->err, "injected failure of operation 3"));
    assert_int_equal(calls(&done), 1);
    assert_int_equal(g->ops->host_fn(g, s, on_done, &done), -1); /* refused at once */
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
        assert_int_equal(g->ops->host_fn(g, s, on_done, &done), 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order),
        cmocka_unit_test(test_free_waits),
        cmocka_unit_test(test_failure),
        cmocka_unit_test(test_stream_ordered_memory),
        cmocka_unit_test(test_fake_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
