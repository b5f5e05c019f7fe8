/* test_memneed.c — unit tests for trainer/memneed: a job's need (the
 * DummyModel's values, gradients, momentum and activations, its data;
 * OpenBLAS's buffer only where the host computes), the check against the
 * address-space and data limits and the host's available memory ("out of
 * memory" with every figure), and the reservation of OpenBLAS's buffer:
 * refused with a reason where it cannot be mapped, never a hang. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cblas.h>

#include "trainer/memneed.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static train_job dummy_job(void)
{
    train_job j;
    memset(&j, 0, sizeof j);
    j.model = (model_config){.num_embeddings = 1024, .embedding_dim = 1024, .dense_input_size = 1024,
                             .dense_output_size = 1024, .dense_layers_count = 8, .sparse = false};
    j.data = (data_config){.max_val = 100, .sample_count = 100, .sample_length = 100, .sparsity_percentage = 20};
    j.batch_size = 10;
    return j;
}

static void test_need(void **state)
{
    (void)state;
    train_job j = dummy_job();
    memneed n;
    memneed_dummy(&j, true, &n);
    uint64_t params = 1024 * 1024 + 8 * (1024 * 1024 + 1024);
    uint64_t act = 10 * 1024 + 8 * 10 * 1024 + 2 * 10 * 1024 + 2 * 10 * 1024;
    assert_int_equal(n.model, (2 * params + act) * 4);
    assert_int_equal(n.data, (100 * 100 + 100 + 100) * 8);
    assert_int_equal(n.blas, MEMNEED_BLAS_BUFFER);
    assert_int_equal(n.stacks, 0);
    j.momentum = 0.9; /* its buffer */
    memneed_dummy(&j, true, &n);
    assert_int_equal(n.model, (3 * params + act) * 4);
    /* PowerSGD with error feedback: every dense bucket's error */
    psgd_conf pc;
    psgd_conf_default(&pc);
    memneed_add_powersgd(&j, &pc, &n);
    assert_int_equal(n.model, (4 * params + act) * 4);
    memneed_dummy(&j, true, &n);
    pc.error_feedback = false;
    memneed_add_powersgd(&j, &pc, &n);
    assert_int_equal(n.model, (3 * params + act) * 4);
    j.model.sparse = true; /* the embedding's bucket keeps no error */
    pc.error_feedback = true;
    memneed_dummy(&j, true, &n);
    uint64_t before = n.model;
    memneed_add_powersgd(&j, &pc, &n);
    assert_int_equal(n.model - before, (params - 1024 * 1024) * 4);
    j.model.sparse = false;
    memneed_dummy(&j, false, &n); /* on a GPU: the twins, no product on the host */
    assert_int_equal(n.model, params * 4);
    assert_int_equal(n.blas, 0);
    memneed_add_threads(&n, 2);
    assert_true(n.stacks >= 2 * 16384);

    memneed_linear(100, 30, 20, true, &n);
    assert_int_equal(n.model, (2 * 3030 + 20 * 130) * 4);
    assert_int_equal(n.blas, MEMNEED_BLAS_BUFFER);
    memneed_synthetic(1000, &n);
    assert_int_equal(n.model, 8000);
    assert_int_equal(n.blas, 0);
    memneed_hybrid(true, &n);
    assert_int_equal(n.model + n.data, 0);
    assert_int_equal(n.blas, MEMNEED_BLAS_BUFFER);
}

static void test_check(void **state)
{
    (void)state;
    memneed n = {.model = 72 * MiB, .data = 1 * MiB, .blas = MEMNEED_BLAS_BUFFER, .stacks = 8 * MiB};
    memroom r = {UINT64_MAX, 50 * MiB, UINT64_MAX, 20 * MiB, 20 * GiB};
    char err[512] = "";
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), 0);

    /* ulimit -v 200 MiB: the whole need, its parts, the limit, what is
     * left and what is in use. */
    r.as_limit = 200 * MiB;
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), -1);
    assert_string_equal(err, "out of memory: this trainer needs about 209 MiB (model 72 MiB, data 1 MiB, OpenBLAS's "
                             "buffer 128 MiB, thread stacks 8 MiB) more, and its address-space limit (ulimit -v) of "
                             "200 MiB leaves 150 MiB (50 MiB in use): raise the limit or choose a smaller model or "
                             "data set");
    r.as_limit = 259 * MiB; /* exactly enough */
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), 0);
    r.as_limit = 40 * MiB; /* less than in use already */
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "of 40 MiB leaves 0 B (50 MiB in use)"));

    r.as_limit = UINT64_MAX;
    r.data_limit = 100 * MiB;
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "its data-segment limit (ulimit -d) of 100 MiB leaves 80 MiB (20 MiB in use)"));

    /* The host: what must be resident (OpenBLAS's buffer and the stacks
     * are address space, touched in part). */
    r.data_limit = UINT64_MAX;
    r.available = 64 * MiB;
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), -1);
    assert_string_equal(err, "out of memory: this trainer needs about 73 MiB (model 72 MiB, data 1 MiB) in memory, "
                             "and its host has 64 MiB available (MemAvailable): choose a smaller model or data "
                             "set, or a host with more memory");
    r.available = 73 * MiB;
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), 0);
    /* Unknown use: no refusal on a guess. */
    r = (memroom){10 * MiB, UINT64_MAX, 10 * MiB, UINT64_MAX, UINT64_MAX};
    assert_int_equal(memneed_check(&n, &r, err, sizeof err), 0);
}

static void test_room(void **state)
{
    (void)state;
    memroom r;
    memneed_room(&r);
    assert_true(r.as_used > 0 && r.as_used != UINT64_MAX);
    assert_true(r.data_used > 0 && r.data_used != UINT64_MAX);
    assert_true(r.available > 0);
}

/* Under an address-space limit that leaves less than OpenBLAS's buffer,
 * the reservation says so (before it, OpenBLAS itself retried mmap for
 * ever: alarm() turns such a hang into a failure). Not under a sanitizer:
 * its shadow memory needs an unlimited address space. */
static void test_reserve_blas(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip();
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    skip();
#endif
#endif
    memneed n = {.blas = MEMNEED_BLAS_BUFFER};
    memroom room;
    memneed_room(&room);
    struct rlimit saved, lim;
    assert_int_equal(getrlimit(RLIMIT_AS, &saved), 0);
    lim = saved;
    lim.rlim_cur = room.as_used + 64 * MiB;
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    char err[512] = "";
    alarm(30);
    int rc = memneed_reserve_blas(&n, err, sizeof err);
    alarm(0);
    assert_int_equal(setrlimit(RLIMIT_AS, &saved), 0);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "out of memory: OpenBLAS needs a buffer of 128 MiB and this process cannot map it"));

    /* With room, it maps it: the address space grows by the buffer. */
    assert_int_equal(memneed_reserve_blas(&n, err, sizeof err), 0);
    memroom after;
    memneed_room(&after);
    assert_true(after.as_used >= room.as_used + MEMNEED_BLAS_BUFFER);
    /* ...and keeps it: a later product maps nothing more, under a limit
     * that leaves no room for another buffer (OpenBLAS's pool is the
     * process's: the trainer's products reuse it). */
    enum { N = 300 };
    static float a[N * N], b[N * N], c[N * N];
    for (int i = 0; i < N * N; i++)
        a[i] = b[i] = 1.0f;
    lim.rlim_cur = after.as_used + 16 * MiB;
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    alarm(30);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
    alarm(0);
    assert_int_equal(setrlimit(RLIMIT_AS, &saved), 0);
    assert_true(c[0] == (float)N && c[N * N - 1] == (float)N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_need),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_room),
        cmocka_unit_test(test_reserve_blas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
