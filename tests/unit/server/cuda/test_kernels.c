/* test_kernels.c — the roles' kernels as the build embedded them (the
 * server's, server/cuda/kernels.h, and the trainer's, trainer/cuda/
 * kernels.h), through the tables the GPU layer runs them by
 * (cugpu_kernels, made from each role's kernel list): every row whole
 * (a kernel has a name, host loops and arguments; a library call has no
 * name and no arguments), no name twice, a fatbin (its magic, its
 * alignment) naming every kernel (the trainer's collectives' kernels too,
 * which are not rows); and, where a GPU answers, loaded by the
 * CUDA runtime (cudaLibraryLoadData) with every kernel found by name.
 * Without a GPU that part skips, saying why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "server/cuda/kernels_host.h"
#include "shared/gpu/cudaload.h"
#include "shared/gpu.h"
#include "trainer/cuda/kernels_host.h"

/* Each role's table, with the fatbin the build embedded for it. */
typedef struct role_kernels {
    const cugpu_kernels *k;
    const unsigned char *fatbin;
    const unsigned long *size;
    int kernels, library; /* the rows of each sort its kernels.h lists */
} role_kernels;

static const role_kernels roles[] = {
    {&psb_kernels, psb_kernels_fatbin, &psb_kernels_fatbin_size, PSB_K_COUNT, 0},
    {&trk_kernels, trk_kernels_fatbin, &trk_kernels_fatbin_size, TRK_K_COUNT - 1, 1},
};

static int contains(const unsigned char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return 1;
    return 0;
}

static void test_tables_whole(void **state)
{
    (void)state;
    for (size_t r = 0; r < sizeof roles / sizeof *roles; r++) {
        const cugpu_kernels *k = roles[r].k;
        int kernels = 0, library = 0;
        assert_non_null(k->table);
        assert_true(k->launch_size >= sizeof(int));
        for (int i = 0; i < k->count; i++) {
            const cugpu_kernel *row = &k->table[i];
            assert_non_null(row->run);
            if (!row->name) { /* a library call: the role enqueues it itself */
                assert_null(row->args);
                assert_non_null(k->library);
                library++;
                continue;
            }
            kernels++;
            assert_non_null(row->args);
            for (int j = 0; j < i; j++)
                if (k->table[j].name && strcmp(k->table[j].name, row->name) == 0)
                    fail_msg("%s: %s in rows %d and %d", k->what, row->name, j, i);
        }
        assert_int_equal(kernels, roles[r].kernels);
        assert_int_equal(library, roles[r].library);
    }
}

/* A launch's arguments: as many as its kernel's prototype takes, each a
 * pointer into the launch itself (what cudaLaunchKernel reads). */
static void test_args_point_into_the_launch(void **state)
{
    (void)state;
    psb_launch l = {.kernel = PSB_K_SGD};
    l.u.sgd.n = 1000;
    void *a[CUGPU_MAX_ARGS] = {0};
    size_t work = psb_kernels.table[PSB_K_SGD].args(&l, a);
    assert_int_equal(work, 1000);
    assert_ptr_equal(a[0], &l.u.sgd.param);
    assert_ptr_equal(a[4], &l.u.sgd.n);
    assert_ptr_equal(a[9], &l.u.sgd.out);
    assert_null(a[10]);
    trk_launch t = {.kernel = TRK_K_ZERO};
    t.u.zero.words = 7;
    void *b[CUGPU_MAX_ARGS] = {0};
    assert_int_equal(trk_kernels.table[TRK_K_ZERO].args(&t, b), 7);
    assert_ptr_equal(b[0], &t.u.zero.p);
    assert_ptr_equal(b[1], &t.u.zero.words);
    assert_null(b[2]);
    assert_int_equal(cugpu_launch_kernel(&t), TRK_K_ZERO);
}

/* Launched by the nccl collectives by name, not through the table
 * (trainer/cuda/kernels.h). */
static const char *const coll_kernels[] = {TRK_COLL_NARROW_MUL, TRK_COLL_WIDEN};

static void test_fatbin_shape(void **state)
{
    (void)state;
    for (size_t r = 0; r < sizeof roles / sizeof *roles; r++) {
        const unsigned char *fb = roles[r].fatbin;
        size_t size = (size_t)*roles[r].size;
        assert_true(size > 64);
        uint32_t magic;
        memcpy(&magic, fb, sizeof magic);
        assert_int_equal(magic, 0xBA55ED50u); /* a fatbin's header */
        assert_int_equal((uintptr_t)fb % 16, 0);
        for (int i = 0; i < roles[r].k->count; i++)
            if (roles[r].k->table[i].name && !contains(fb, size, roles[r].k->table[i].name))
                fail_msg("the fatbin of %s names no %s", roles[r].k->what, roles[r].k->table[i].name);
    }
    /* The trainer's collectives' kernels, in its fatbin but not its table. */
    for (size_t i = 0; i < sizeof coll_kernels / sizeof *coll_kernels; i++)
        if (!contains(trk_kernels_fatbin, (size_t)trk_kernels_fatbin_size, coll_kernels[i]))
            fail_msg("the trainer's fatbin names no %s", coll_kernels[i]);
}

static void test_fatbin_loads(void **state)
{
    (void)state;
    char why[512];
    if (gpu_probe_device(0, why, sizeof why) < 0) {
        print_message("no GPU: the fatbins are not loaded (%s)\n", why);
        skip();
    }
    const cudart_api *rt = cudaload_cudart(NULL, 0);
    for (size_t r = 0; r < sizeof roles / sizeof *roles; r++) {
        cudaLibrary_t lib = NULL;
        cudaError_t e = rt->cudaLibraryLoadData(&lib, roles[r].fatbin, NULL, NULL, 0, NULL, NULL, 0);
        if (e != cudaSuccess)
            fail_msg("cudaLibraryLoadData (%s): %s", roles[r].k->what, rt->cudaGetErrorString(e));
        for (int k = 0; k < roles[r].k->count; k++) {
            const char *name = roles[r].k->table[k].name;
            if (!name)
                continue;
            cudaKernel_t kern = NULL;
            e = rt->cudaLibraryGetKernel(&kern, lib, name);
            if (e != cudaSuccess || !kern)
                fail_msg("cudaLibraryGetKernel(%s): %s", name, rt->cudaGetErrorString(e));
        }
        for (size_t i = 0; roles[r].fatbin == trk_kernels_fatbin && i < sizeof coll_kernels / sizeof *coll_kernels;
             i++) {
            cudaKernel_t kern = NULL;
            e = rt->cudaLibraryGetKernel(&kern, lib, coll_kernels[i]);
            if (e != cudaSuccess || !kern)
                fail_msg("cudaLibraryGetKernel(%s): %s", coll_kernels[i], rt->cudaGetErrorString(e));
        }
        assert_int_equal(rt->cudaLibraryUnload(lib), cudaSuccess);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables_whole),
        cmocka_unit_test(test_args_point_into_the_launch),
        cmocka_unit_test(test_fatbin_shape),
        cmocka_unit_test(test_fatbin_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
