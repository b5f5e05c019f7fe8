/* test_devspec.c — --device parsed once (shared/devspec.c): every spelling
 * with its kind and index, every refusal with its text, each role's set of
 * kinds, the names given back, and cli_parse_device (its thin wrapper). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "shared/cli.h"
#include "shared/devspec.h"

/* Every kind, spelled out (DEVSPEC_ALL must be the same). */
#define ALL_KINDS                                                                                          \
    (DEVSPEC_KIND(DEVICE_CPU) | DEVSPEC_KIND(DEVICE_CUDA) | DEVSPEC_KIND(DEVICE_FAKE_CUDA) |               \
     DEVSPEC_KIND(DEVICE_STAGED) | DEVSPEC_KIND(DEVICE_TEST))

static void accepts(const char *s, unsigned kinds, device_kind kind, int index, const char *name)
{
    device_spec d = {.kind = DEVICE_TEST, .index = 99};
    char err[256] = "", buf[DEVSPEC_NAME_MAX];
    if (devspec_parse("--device", s, kinds, &d, err, sizeof err) != 0)
        fail_msg("'%s' refused: %s", s, err);
    assert_int_equal(d.kind, kind);
    assert_int_equal(d.index, index);
    assert_string_equal(devspec_name(d, buf), name);
}

static void refuses_device(const char *s, unsigned kinds)
{
    device_spec d = {.kind = DEVICE_TEST, .index = 99};
    char err[256] = "", want[256];
    assert_int_equal(devspec_parse("--device", s, kinds, &d, err, sizeof err), -1);
    snprintf(want, sizeof want, "--device '%s' is not cpu, cuda or cuda:N (N: a GPU's index, 0..255)", s);
    assert_string_equal(err, want);
    assert_int_equal(d.kind, DEVICE_TEST); /* untouched */
    assert_int_equal(d.index, 99);
}

static void test_spellings(void **state)
{
    (void)state;
    accepts("cpu", ALL_KINDS, DEVICE_CPU, -1, "cpu");
    accepts("cuda", ALL_KINDS, DEVICE_CUDA, -1, "cuda");
    accepts("cuda:0", ALL_KINDS, DEVICE_CUDA, 0, "cuda:0");
    accepts("cuda:3", ALL_KINDS, DEVICE_CUDA, 3, "cuda:3");
    accepts("cuda:255", ALL_KINDS, DEVICE_CUDA, 255, "cuda:255");
    accepts("fake-cuda", ALL_KINDS, DEVICE_FAKE_CUDA, -1, "fake-cuda");
    accepts("staged", ALL_KINDS, DEVICE_STAGED, -1, "staged");
    accepts("test", ALL_KINDS, DEVICE_TEST, -1, "test");
    /* The number as cli_parse_u64 reads it: decimal, leading zeros keep
     * that meaning, and the name gives it in decimal (blanks are refused
     * since issue 39, as in every number). */
    accepts("cuda:007", ALL_KINDS, DEVICE_CUDA, 7, "cuda:7");
}

static void test_refusals(void **state)
{
    (void)state;
    const char *bad[] = {"",        "tpu",     "CPU",     "Cuda",     "cuda:",    "cuda:x",  "cuda:-1",
                         "cuda:+1", "cuda:256", "cuda:1x", "cuda:0:1", "cuda0",    "cuda1",   "cpu:0",
                         "fake",    "fake-cuda:0", "staged:1", "test ",  " cpu",    "cuda:99999999999999999999",
                         "cuda: 1", "cuda:0x1", "cuda:1e0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        refuses_device(bad[i], ALL_KINDS);
}

/* Each role's set: a test name outside it is refused as an unknown one. */
static void test_roles(void **state)
{
    (void)state;
    assert_int_equal(DEVSPEC_ALL, ALL_KINDS);
    accepts("cpu", DEVSPEC_SERVER, DEVICE_CPU, -1, "cpu");
    accepts("cuda:1", DEVSPEC_SERVER, DEVICE_CUDA, 1, "cuda:1");
    accepts("fake-cuda", DEVSPEC_SERVER, DEVICE_FAKE_CUDA, -1, "fake-cuda");
    accepts("test", DEVSPEC_SERVER, DEVICE_TEST, -1, "test");
    refuses_device("staged", DEVSPEC_SERVER);

    accepts("cpu", DEVSPEC_TRAINER, DEVICE_CPU, -1, "cpu");
    accepts("cuda", DEVSPEC_TRAINER, DEVICE_CUDA, -1, "cuda");
    accepts("fake-cuda", DEVSPEC_TRAINER, DEVICE_FAKE_CUDA, -1, "fake-cuda");
    refuses_device("staged", DEVSPEC_TRAINER);
    refuses_device("test", DEVSPEC_TRAINER);

    accepts("staged", DEVSPEC_COMPUTE, DEVICE_STAGED, -1, "staged");
    accepts("fake-cuda", DEVSPEC_COMPUTE, DEVICE_FAKE_CUDA, -1, "fake-cuda");
    refuses_device("test", DEVSPEC_COMPUTE);

    refuses_device("cuda", DEVSPEC_KIND(DEVICE_CPU));
    refuses_device("cuda:2", DEVSPEC_KIND(DEVICE_CPU));
    refuses_device("cpu", DEVSPEC_KIND(DEVICE_CUDA));
}

/* The option's name is the caller's: an environment variable's too. */
static void test_option_name(void **state)
{
    (void)state;
    device_spec d;
    char err[256];
    assert_int_equal(devspec_parse("PSBENCH_SERVER_DEVICE", "gpu", DEVSPEC_SERVER, &d, err, sizeof err), -1);
    assert_string_equal(err, "PSBENCH_SERVER_DEVICE 'gpu' is not cpu, cuda or cuda:N (N: a GPU's index, 0..255)");
}

static void test_questions(void **state)
{
    (void)state;
    device_spec cpu = {0}, gpu = {DEVICE_CUDA, 2}, any = {DEVICE_CUDA, -1}, fake = {DEVICE_FAKE_CUDA, -1},
                staged = {DEVICE_STAGED, -1}, test = {DEVICE_TEST, -1};
    char buf[DEVSPEC_NAME_MAX];
    assert_string_equal(devspec_name(cpu, buf), "cpu"); /* zeroed: the cpu */
    assert_false(devspec_on_gpu(cpu));
    assert_true(devspec_on_gpu(gpu));
    assert_true(devspec_on_gpu(any));
    assert_true(devspec_on_gpu(fake));
    assert_false(devspec_on_gpu(staged));
    assert_false(devspec_on_gpu(test));
    assert_true(devspec_host_memory(cpu));
    assert_false(devspec_host_memory(gpu));
    assert_false(devspec_host_memory(any));
    assert_true(devspec_host_memory(fake));
    assert_true(devspec_host_memory(staged));
    assert_int_equal(devspec_cuda_index(gpu), 2);
    assert_int_equal(devspec_cuda_index(any), -1);
    assert_int_equal(devspec_cuda_index(fake), -1);
    assert_int_equal(devspec_cuda_index(cpu), -1);
    assert_int_equal(devspec_gpu(gpu), 2);
    assert_int_equal(devspec_gpu(any), 0);
}

/* cli_parse_device: cpu -1, plain cuda 0, cuda:N N; the rest refused. */
static void test_cli_wrapper(void **state)
{
    (void)state;
    int index = 42;
    char err[256];
    assert_int_equal(cli_parse_device("--device", "cpu", &index, err, sizeof err), 0);
    assert_int_equal(index, -1);
    assert_int_equal(cli_parse_device("--device", "cuda", &index, err, sizeof err), 0);
    assert_int_equal(index, 0);
    assert_int_equal(cli_parse_device("--device", "cuda:5", &index, err, sizeof err), 0);
    assert_int_equal(index, 5);
    index = 42;
    assert_int_equal(cli_parse_device("--device", "fake-cuda", &index, err, sizeof err), -1);
    assert_string_equal(err, "--device 'fake-cuda' is not cpu, cuda or cuda:N (N: a GPU's index, 0..255)");
    assert_int_equal(cli_parse_device("--device", "cuda:x", &index, err, sizeof err), -1);
    assert_int_equal(index, 42);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spellings),   cmocka_unit_test(test_refusals),    cmocka_unit_test(test_roles),
        cmocka_unit_test(test_option_name), cmocka_unit_test(test_questions), cmocka_unit_test(test_cli_wrapper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
