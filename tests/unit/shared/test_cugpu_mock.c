/* test_cugpu_mock.c — shared/gpu/cugpu_cuda.c, the real GPU's implementation,
 * over a stand-in CUDA runtime and driver (tests/unit/shared/mock_cuda.c, found
 * first on LD_LIBRARY_PATH: ctest unit_cugpu_mockcuda): what it does with
 * a peer's IPC handle and the size the peer claims for it, on a machine
 * with no GPU.
 *
 * The size a peer claims (a trainer's `segment` in its export, a server's
 * answer) bounds every offset it names later; ipc_open checks it against
 * the opened allocation's own (cuMemGetAddressRange) and closes the handle
 * again when it does not hold. PSBENCH_MOCK_NO_DRIVER=1 (ctest
 * unit_cugpu_mockcuda_nodriver: a folder with the stand-in runtime and no
 * libcuda.so.1): no GPU is made without the driver, with the reason.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shared/gpu/cudaload.h"
#include "shared/gpu/cugpu.h"

#define MIB ((size_t)1 << 20)

/* The stand-in's levers (dlsym: the library is dlopen'ed by cudaload.c). */
static struct {
    int (*opens)(void);
    int (*closes)(void);
    void (*set_open_offset)(size_t);
    void (*set_range_fails)(int);
} mock;

static const cugpu_kernel no_table[1] = {{NULL, NULL, NULL}};
static const cugpu_kernels no_kernels = {
    .what = "no kernels", .fatbin = (const unsigned char *)"", .table = no_table, .count = 0, .archs = "none"};

static void mock_sym(void *h, const char *name, void *slot, size_t size)
{
    void *s = dlsym(h, name);
    if (!s)
        fail_msg("%s lacks %s: the real CUDA runtime was found, not the stand-in (LD_LIBRARY_PATH)",
                 cudaload_cudart_soname(), name);
    memcpy(slot, &s, size);
}

/* The runtime cudaload.c opened is the stand-in, and its levers. */
static int setup(void **state)
{
    (void)state;
    char err[512];
    if (!cudaload_cudart(err, sizeof err))
        fail_msg("the stand-in runtime does not load: %s", err);
    void *h = dlopen(cudaload_cudart_soname(), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    int (*is_mock)(void);
    mock_sym(h, "mock_cuda_is_mock", &is_mock, sizeof is_mock);
    assert_int_equal(is_mock(), 1);
    mock_sym(h, "mock_cuda_opens", &mock.opens, sizeof mock.opens);
    mock_sym(h, "mock_cuda_closes", &mock.closes, sizeof mock.closes);
    mock_sym(h, "mock_cuda_set_open_offset", &mock.set_open_offset, sizeof mock.set_open_offset);
    mock_sym(h, "mock_cuda_set_range_fails", &mock.set_range_fails, sizeof mock.set_range_fails);
    dlclose(h); /* RTLD_NOLOAD took a reference: cudaload.c's stays */
    return 0;
}

static int no_driver(void)
{
    const char *e = getenv("PSBENCH_MOCK_NO_DRIVER");
    return e && strcmp(e, "1") == 0;
}

static void test_claims_checked_against_the_allocation(void **state)
{
    (void)state;
    if (no_driver())
        skip();
    char err[512];
    cugpu *g = cugpu_cuda_new(0, &no_kernels, err, sizeof err);
    if (!g)
        fail_msg("cugpu_cuda_new on the stand-in: %s", err);
    const cugpu_ops *o = g->ops;
    devmem d = o->dev_alloc_ipc(g, MIB);
    assert_non_null(d.p);
    cugpu_ipc_handle h;
    assert_int_equal(o->ipc_export(g, d, &h), 0);

    /* The claim within the allocation: opened, the allocation's base. */
    int opens = mock.opens(), closes = mock.closes();
    devmem p = o->ipc_open(g, &h, MIB);
    assert_ptr_equal(p.p, d.p);
    o->ipc_close(g, p);
    p = o->ipc_open(g, &h, 4096);
    assert_non_null(p.p);
    o->ipc_close(g, p);
    assert_int_equal(mock.opens() - opens, 2);
    assert_int_equal(mock.closes() - closes, 2);

    /* Claims beyond it (a trainer that exports 1 MiB and says 64 GiB, or
     * one byte more): refused, and the handle closed again. */
    const size_t claims[] = {(size_t)64 << 30, MIB + 1, SIZE_MAX};
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++) {
        opens = mock.opens(), closes = mock.closes();
        assert_null(o->ipc_open(g, &h, claims[i]).p);
        assert_non_null(strstr(g->err, "holds 1048576 bytes"));
        assert_int_equal(mock.opens() - opens, 1);
        assert_int_equal(mock.closes() - closes, 1);
    }

    /* An opened pointer that is not the allocation's start. */
    mock.set_open_offset(4096);
    opens = mock.opens(), closes = mock.closes();
    assert_null(o->ipc_open(g, &h, 4096).p);
    assert_non_null(strstr(g->err, "not at its start"));
    assert_int_equal(mock.closes() - closes, mock.opens() - opens);
    mock.set_open_offset(0);

    /* The driver cannot say: refused too, never taken on trust. */
    mock.set_range_fails(1);
    opens = mock.opens(), closes = mock.closes();
    assert_null(o->ipc_open(g, &h, 4096).p);
    assert_non_null(strstr(g->err, "cuMemGetAddressRange"));
    assert_int_equal(mock.closes() - closes, mock.opens() - opens);
    assert_int_equal(mock.opens() - opens, 1);
    mock.set_range_fails(0);

    o->dev_free_ipc(g, d);
    cugpu_destroy(g);
}

/* Where the driver's library is missing no GPU is made (its size checks
 * could not run), and the reason names it. */
static void test_no_driver_no_gpu(void **state)
{
    (void)state;
    if (!no_driver())
        skip();
    void *real = dlopen(cudaload_cudrv_soname(), RTLD_NOW | RTLD_LOCAL);
    if (real) {
        /* A driver installed where the loader looks: its absence cannot be
         * staged by LD_LIBRARY_PATH. */
        dlclose(real);
        print_message("skipped: %s is installed here\n", cudaload_cudrv_soname());
        skip();
    }
    char err[512] = "";
    assert_null(cugpu_cuda_new(0, &no_kernels, err, sizeof err));
    assert_non_null(strstr(err, "libcuda.so.1 not found"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claims_checked_against_the_allocation),
        cmocka_unit_test(test_no_driver_no_gpu),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
