/* test_batch_update.c — unit tests for the batch-update trainer's arithmetic
 * (trainer/batch_update.c): the forward pass y = x W^T + b, the L1 loss and
 * its gradient against zero labels (sign(0) = 0), dW = dy^T x, db = column
 * sums, checked against sums written out by hand; and the servers' split
 * of the parameter vector into contiguous parts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "shared/rng.h"
#include "shared/part.h"
#include "trainer/batch_update.h"

/* The arithmetic on the cpu compute layer, from and to host arrays. */
static compute *dev;

static cbuf *upload(const float *p, uint64_t n)
{
    cbuf *b = compute_alloc(dev, n, COMPUTE_F32, COMPUTE_MEM_DEVICE, NULL, 0);
    assert_non_null(b);
    if (p)
        compute_write(dev, cspan_all(b), p);
    return b;
}

static void host_forward(const float *W, const float *bias, const float *x, uint64_t batch, uint64_t in,
                         uint64_t out, float *y)
{
    cbuf *w = upload(W, out * in), *b = upload(bias, out), *xb = upload(x, batch * in), *yb = upload(NULL, batch * out);
    batch_update_forward(dev, cspan_all(w), cspan_all(b), cspan_all(xb), batch, in, out, cspan_all(yb));
    compute_read(dev, cspan_all(yb), y);
    compute_sync(dev);
    compute_release(dev, w);
    compute_release(dev, b);
    compute_release(dev, xb);
    compute_release(dev, yb);
}

static double host_backward(const float *x, const float *y, uint64_t batch, uint64_t in, uint64_t out, float *dy,
                            float *dW, float *db)
{
    cbuf *xb = upload(x, batch * in), *yb = upload(y, batch * out), *dyb = upload(NULL, batch * out);
    cbuf *dWb = upload(NULL, out * in), *dbb = upload(NULL, out);
    cbuf *loss = compute_alloc(dev, 1, COMPUTE_F64, COMPUTE_MEM_DEVICE, NULL, 0);
    assert_non_null(loss);
    batch_update_backward(dev, cspan_all(xb), cspan_all(yb), batch, in, out, cspan_all(dyb), cspan_all(dWb),
                          cspan_all(dbb), cspan_all(loss));
    compute_read(dev, cspan_all(dyb), dy);
    compute_read(dev, cspan_all(dWb), dW);
    compute_read(dev, cspan_all(dbb), db);
    double l = compute_loss(dev, cspan_all(loss));
    cbuf *all[] = {xb, yb, dyb, dWb, dbb, loss};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        compute_release(dev, all[i]);
    return l;
}

/* Forward and backward on a 2 x 3 input, Linear(3, 2), against the
 * definitions computed element by element. */
static void test_small_by_hand(void **state)
{
    (void)state;
    const float W[6] = {1, 0, -1, 0.5f, 2, 0}; /* out 2 x in 3 */
    const float b[2] = {0.25f, -1};
    const float x[6] = {1, 2, 3, -1, 0, 1};   /* batch 2 x in 3 */
    float y[4], dy[4], dW[6], db[2];
    host_forward(W, b, x, 2, 3, 2, y);
    /* row 0: 1-3+0.25 = -1.75; 0.5+4-1 = 3.5. row 1: -1-1+0.25 = -1.75; -0.5-1 = -1.5 */
    const float ye[4] = {-1.75f, 3.5f, -1.75f, -1.5f};
    for (int k = 0; k < 4; k++)
        assert_float_equal(y[k], ye[k], 1e-6);
    double loss = host_backward(x, y, 2, 3, 2, dy, dW, db);
    assert_float_equal(loss, (1.75 + 3.5 + 1.75 + 1.5) / 4, 1e-9);
    const float g = 0.25f; /* 1 / (batch * out) */
    const float dye[4] = {-g, g, -g, -g};
    for (int k = 0; k < 4; k++)
        assert_true(dy[k] == dye[k]);
    /* dW[j][k] = sum_i dy[i][j] x[i][k] */
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < 3; k++)
            assert_float_equal(dW[j * 3 + k], dye[j] * x[k] + dye[2 + j] * x[3 + k], 1e-6);
    assert_float_equal(db[0], -2 * g, 1e-7);
    assert_float_equal(db[1], 0, 1e-7);
}

/* sign(0) = 0: a zero output contributes nothing to any gradient. */
static void test_zero_output(void **state)
{
    (void)state;
    const float W[2] = {0, 0}, b[1] = {0}, x[4] = {3, -2, 1, 5}; /* Linear(2, 1), batch 2 */
    float y[2], dy[2], dW[2] = {9, 9}, db[1] = {9};
    host_forward(W, b, x, 2, 2, 1, y);
    assert_true(y[0] == 0 && y[1] == 0);
    double loss = host_backward(x, y, 2, 2, 1, dy, dW, db);
    assert_true(loss == 0);
    assert_true(dy[0] == 0 && dy[1] == 0);
    assert_true(dW[0] == 0 && dW[1] == 0 && db[0] == 0);
}

/* A seed-sized case (Linear(100, 30), batch 20, random data) against a
 * double-precision reference of every element. */
static void test_seed_size_reference(void **state)
{
    (void)state;
    enum { B = 20, IN = 100, OUT = 30 };
    static float W[OUT * IN], bias[OUT], x[B * IN], y[B * OUT], dy[B * OUT], dW[OUT * IN], db[OUT];
    rng r;
    rng_seed(&r, 7, RNG_STREAM_MODEL);
    rng_fill_uniform(W, OUT * IN, 0.1, &r);
    rng_fill_uniform(bias, OUT, 0.1, &r);
    rng_seed(&r, 7, RNG_STREAM_INPUTS);
    rng_fill_normal(x, B * IN, &r);
    host_forward(W, bias, x, B, IN, OUT, y);
    host_backward(x, y, B, IN, OUT, dy, dW, db);
    static double dWe[OUT * IN], dbe[OUT];
    memset(dWe, 0, sizeof dWe);
    memset(dbe, 0, sizeof dbe);
    for (int i = 0; i < B; i++)
        for (int j = 0; j < OUT; j++) {
            double s = bias[j];
            for (int k = 0; k < IN; k++)
                s += (double)x[i * IN + k] * W[j * IN + k];
            assert_float_equal(y[i * OUT + j], s, 1e-4);
            double d = s > 0 ? 1.0 / (B * OUT) : s < 0 ? -1.0 / (B * OUT) : 0;
            assert_float_equal(dy[i * OUT + j], d, 1e-9);
            dbe[j] += d;
            for (int k = 0; k < IN; k++)
                dWe[j * IN + k] += d * x[i * IN + k];
        }
    for (int k = 0; k < OUT * IN; k++)
        assert_float_equal(dW[k], dWe[k], 1e-6);
    for (int j = 0; j < OUT; j++)
        assert_float_equal(db[j], dbe[j], 1e-6);
}

/* Part p of n: [floor(p*total/n), floor((p+1)*total/n)), covering the
 * vector exactly. */
static void test_parts(void **state)
{
    (void)state;
    assert_int_equal(part_begin(3030, 0, 2), 0);
    assert_int_equal(part_begin(3030, 1, 2), 1515);
    assert_int_equal(part_begin(3030, 2, 2), 3030);
    assert_int_equal(part_begin(10, 1, 3), 3);
    assert_int_equal(part_begin(10, 2, 3), 6);
    assert_int_equal(part_begin(10, 3, 3), 10);
    /* No overflow for large models and many parts. */
    uint64_t total = (1ull << 31) + 7;
    assert_int_equal(part_begin(total, 4095, 4096), (uint64_t)(((unsigned __int128)4095 * total) / 4096));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_by_hand),
        cmocka_unit_test(test_zero_output),
        cmocka_unit_test(test_seed_size_reference),
        cmocka_unit_test(test_parts),
    };
    dev = compute_new((device_spec){.kind = DEVICE_CPU}, NULL, 0);
    if (!dev)
        return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    compute_free(dev);
    return rc;
}
