/* test_cudaload.c — shared/gpu/cudaload.c: the CUDA runtime, cuBLAS, NCCL and
 * the driver loaded on first use, by the sonames of this build's toolkit.
 *
 * Where the libraries are installed (the CUDA toolkit's machines), every
 * table loads and every symbol of it is resolved, with no GPU needed; run
 * under tests/tools/hide-cuda-libs.sh (ctest unit_cudaload_hidden), every
 * load fails with "<soname> not found", the same reason on every call.
 * PSBENCH_EXPECT_CUDA_LIBS says which of the two the test must see:
 * "present", "absent", or unset: whatever an independent dlopen of the
 * runtime's soname finds.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shared/gpu/cudaload.h"

/* What the loader must find: 1 present, 0 absent. */
static int expect_present(void)
{
    const char *e = getenv("PSBENCH_EXPECT_CUDA_LIBS");
    if (e && strcmp(e, "present") == 0)
        return 1;
    if (e && strcmp(e, "absent") == 0)
        return 0;
    void *h = dlopen(cudaload_cudart_soname(), RTLD_NOW | RTLD_LOCAL);
    if (h)
        dlclose(h);
    return h != NULL;
}

static void test_sonames(void **state)
{
    (void)state;
    char want[64];
    snprintf(want, sizeof want, "libcudart.so.%d", CUDART_VERSION / 1000);
    assert_string_equal(cudaload_cudart_soname(), want);
#ifdef PSBENCH_HAVE_NCCL
    snprintf(want, sizeof want, "libnccl.so.%d", NCCL_MAJOR);
    assert_string_equal(cudaload_nccl_soname(), want);
#endif
    snprintf(want, sizeof want, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    assert_string_equal(cudaload_cublas_soname(), want);
}

/* Every pointer of a table after its soname is set. */
#define ASSERT_ALL_SET(t)                                                                                       \
    do {                                                                                                        \
        const unsigned char *p_ = (const unsigned char *)(t) + sizeof(const char *);                            \
        const unsigned char *end_ = (const unsigned char *)(t) + sizeof *(t);                                   \
        for (; p_ + sizeof(void (*)(void)) <= end_; p_ += sizeof(void (*)(void))) {                             \
            void (*fn_)(void);                                                                                  \
            memcpy(&fn_, p_, sizeof fn_);                                                                       \
            assert_non_null(fn_);                                                                               \
        }                                                                                                       \
    } while (0)

static void test_present(void **state)
{
    (void)state;
    if (!expect_present())
        skip();
    char err[600] = "";
    const cudart_api *rt = cudaload_cudart(err, sizeof err);
    assert_non_null(rt);
    assert_string_equal(rt->soname, cudaload_cudart_soname());
    ASSERT_ALL_SET(rt);
    /* The runtime answers its version with or without a GPU. */
    int v = 0;
    assert_int_equal(rt->cudaRuntimeGetVersion(&v), cudaSuccess);
    assert_int_equal(v / 1000, CUDART_VERSION / 1000);
    assert_ptr_equal(cudaload_cudart(NULL, 0), rt); /* loaded once */

#ifdef PSBENCH_HAVE_NCCL
    const nccl_api *nc = cudaload_nccl(err, sizeof err);
    assert_non_null(nc);
    ASSERT_ALL_SET(nc);
    int nv = 0;
    assert_int_equal(nc->ncclGetVersion(&nv), ncclSuccess);
    assert_true(nv / 10000 == NCCL_MAJOR || nv / 1000 == NCCL_MAJOR); /* 2.9+: 10000 * major; older: 1000 */
    assert_string_equal(nc->ncclGetErrorString(ncclInvalidArgument), nc->ncclGetErrorString(ncclInvalidArgument));
#endif

    const cublas_api *cb = cudaload_cublas(err, sizeof err);
    assert_non_null(cb);
    ASSERT_ALL_SET(cb);
#ifdef PSBENCH_HAVE_NCCL
    print_message("loaded %s (runtime %d), %s (NCCL %d), %s\n", rt->soname, v, nc->soname, nv, cb->soname);
#else
    print_message("loaded %s (runtime %d), %s (no NCCL in this build)\n", rt->soname, v, cb->soname);
#endif
}

static void test_absent(void **state)
{
    (void)state;
    if (expect_present())
        skip();
    char err[600] = "", again[600] = "";
    char want[128];
    assert_null(cudaload_cudart(err, sizeof err));
    snprintf(want, sizeof want, "%s not found", cudaload_cudart_soname());
    assert_string_equal(err, want);
    assert_null(cudaload_cudart(again, sizeof again)); /* the same reason, at once */
    assert_string_equal(again, err);
    assert_null(cudaload_cudart(NULL, 0)); /* no buffer: no reason, no crash */
    /* NCCL and cuBLAS need the runtime: its absence is the reason given. */
#ifdef PSBENCH_HAVE_NCCL
    memset(again, 0, sizeof again);
    assert_null(cudaload_nccl(again, sizeof again));
    assert_string_equal(again, want);
#endif
    memset(again, 0, sizeof again);
    assert_null(cudaload_cublas(again, sizeof again));
    assert_string_equal(again, want);
}

/* The driver's table (libcuda.so.1: the NVIDIA driver's, not the
 * toolkit's) loads where the loader finds the driver, and says so by its
 * soname where it does not — the same reason on every call. */
static void test_driver(void **state)
{
    (void)state;
    assert_string_equal(cudaload_cudrv_soname(), "libcuda.so.1");
    void *h = dlopen(cudaload_cudrv_soname(), RTLD_NOW | RTLD_LOCAL);
    char err[600] = "", again[600] = "";
    const cudrv_api *d = cudaload_cudrv(err, sizeof err);
    if (h) {
        dlclose(h);
        assert_non_null(d);
        assert_string_equal(d->soname, "libcuda.so.1");
        ASSERT_ALL_SET(d);
        assert_ptr_equal(cudaload_cudrv(NULL, 0), d);
        return;
    }
    assert_null(d);
    assert_string_equal(err, "libcuda.so.1 not found");
    assert_null(cudaload_cudrv(again, sizeof again));
    assert_string_equal(again, err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sonames),
        cmocka_unit_test(test_present),
        cmocka_unit_test(test_absent),
        cmocka_unit_test(test_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
