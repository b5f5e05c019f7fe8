/* test_kernels.c — the CUDA server's kernels as the build embedded them
 * (server/cuda/kernels.h): a fatbin (its magic, its alignment) naming every
 * kernel kernels.h lists; and, where
 * a GPU answers, loaded by the CUDA runtime (cudaLibraryLoadData) with
 * every kernel found by name. Without a GPU that part skips, saying why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "server/cuda/kernels.h"
#include "shared/gpu/cudaload.h"
#include "shared/gpu.h"

static const char *const kernel_names[] = {PSB_KERNEL_NAMES};

static int contains(const unsigned char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return 1;
    return 0;
}

static void test_fatbin_shape(void **state)
{
    (void)state;
    assert_true(psb_kernels_fatbin_size > 64);
    uint32_t magic;
    memcpy(&magic, psb_kernels_fatbin, sizeof magic);
    assert_int_equal(magic, 0xBA55ED50u); /* a fatbin's header */
    assert_int_equal((uintptr_t)psb_kernels_fatbin % 16, 0);
    assert_int_equal(sizeof kernel_names / sizeof *kernel_names, PSB_K_COUNT);
    for (int k = 0; k < PSB_K_COUNT; k++)
        if (!contains(psb_kernels_fatbin, psb_kernels_fatbin_size, kernel_names[k]))
            fail_msg("the fatbin names no %s", kernel_names[k]);
}

static void test_fatbin_loads(void **state)
{
    (void)state;
    char why[512];
    if (gpu_probe_device(0, why, sizeof why) < 0) {
        print_message("no GPU: the fatbin is not loaded (%s)\n", why);
        skip();
    }
    const cudart_api *rt = cudaload_cudart(NULL, 0);
    cudaLibrary_t lib = NULL;
    cudaError_t e = rt->cudaLibraryLoadData(&lib, psb_kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0);
    if (e != cudaSuccess)
        fail_msg("cudaLibraryLoadData: %s", rt->cudaGetErrorString(e));
    for (int k = 0; k < PSB_K_COUNT; k++) {
        cudaKernel_t kern = NULL;
        e = rt->cudaLibraryGetKernel(&kern, lib, kernel_names[k]);
        if (e != cudaSuccess || !kern)
            fail_msg("cudaLibraryGetKernel(%s): %s", kernel_names[k], rt->cudaGetErrorString(e));
    }
    assert_int_equal(rt->cudaLibraryUnload(lib), cudaSuccess);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fatbin_shape),
        cmocka_unit_test(test_fatbin_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
