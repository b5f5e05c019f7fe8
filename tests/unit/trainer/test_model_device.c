/* test_model_device.c — a model on a device against the same model on the
 * cpu, for the same weights and batch (issue 21, "Tests"): DummyModel dense
 * and sparse (the forward's loss and output probabilities, every gradient
 * with the sparse rows and values, the order of the ready callbacks, then a
 * few training steps' losses and parameters) and the HybridModel's dense
 * part (its loss, dense gradients and the looked-up rows' gradient, for
 * given rows: hybrid_dense_fwd_bwd).
 *
 * The device under test:
 *   - normally the cuda layer on the fake GPU ("fake-cuda": device memory
 *     without host views, every operation queued on the fake GPU's worker
 *     thread, the kernels' host loops and the host's BLAS) and the staged
 *     test layer ("staged": the cpu's arithmetic, copies that complete
 *     late). Both do the cpu's arithmetic in the cpu's order, so every
 *     value must be equal bit for bit: a difference is a bug.
 *   - with PSBENCH_COMPUTE=cuda (ctest unit_model_device_cuda, label gpu)
 *     GPU 0, exiting 77 with the reason where none answers. There the
 *     products are cuBLAS's (another summation order) and the softmax heads
 *     use CUDA's expf/exp/log (not glibc's, a few ulps apart), so floats
 *     are compared within TOL_REL = 1e-4 relative to the larger of the
 *     element and the tensor's largest magnitude — float32's epsilon is
 *     6e-8 and a reordered sum of K terms drifts by about sqrt(K) eps of
 *     their magnitudes (K <= 512 here: ~1.4e-6), so 1e-4 leaves ~70x margin
 *     while a wrong index, transpose or missing term is off by far more;
 *     elements near zero by cancellation are judged against the tensor's
 *     scale, not their own. Integers (sparse rows, nnz, callback order) and
 *     the initial weights (drawn on the host) are exact on every device.
 *
 * Device memory is read only through the compute layer's host access
 * (compute_host_read, or hybrid_dense_fwd_bwd's compute_read + sync), never
 * through a raw pointer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_variant.h"
#include "shared/metrics.h"
#include "shared/rng.h"
#include "trainer/compute.h"
#include "trainer/data.h"
#include "trainer/hybrid.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "devspec_of.h"

#define TOL_REL 1e-4

static const char *dut; /* the device under test: "fake-cuda", "staged" or "cuda:0" */
static bool exact;      /* the cpu's arithmetic: bit for bit */

/* ---- host access and comparison ------------------------------------------- */

/* s's floats on the host, a copy the caller frees: through
 * compute_host_read (the view where there is one, else a staging copy,
 * synchronised). */
static float *host_copy(compute *c, cspan s)
{
    float *stage = malloc((s.n ? s.n : 1) * sizeof *stage);
    assert_non_null(stage);
    const float *p = compute_host_read(c, s, stage);
    if (p != stage)
        memcpy(stage, p, s.n * sizeof *stage);
    return stage;
}

/* got (the device's) against want (the cpu's): bit for bit where exact,
 * else within TOL_REL (see the top). */
static void same_floats(const char *what, const float *got, const float *want, uint64_t n)
{
    if (exact) {
        for (uint64_t j = 0; j < n; j++) {
            if (memcmp(&got[j], &want[j], sizeof got[j]) != 0) {
                print_error("%s on %s [%llu]: %.9g, the cpu's %.9g (not bit-equal)\n", what, dut,
                            (unsigned long long)j, got[j], want[j]);
                fail();
            }
        }
        return;
    }
    double scale = 0;
    for (uint64_t j = 0; j < n; j++)
        scale = fmax(scale, fabs(want[j]));
    for (uint64_t j = 0; j < n; j++) {
        double a = got[j], w = want[j];
        if (!(fabs(a - w) <= TOL_REL * fmax(fabs(w), scale))) {
            print_error("%s on %s [%llu]: %.9g, the cpu's %.9g (|diff| %.3g > %.0e x %.3g)\n", what, dut,
                        (unsigned long long)j, a, w, fabs(a - w), TOL_REL, fmax(fabs(w), scale));
            fail();
        }
    }
}

static void same_double(const char *what, double got, double want)
{
    if (exact ? memcmp(&got, &want, sizeof got) == 0 : fabs(got - want) <= TOL_REL * fabs(want))
        return;
    print_error("%s on %s: %.17g, the cpu's %.17g\n", what, dut, got, want);
    fail();
}

/* ---- DummyModel ------------------------------------------------------------ */

/* A few hundred rows, a few layers; the batch's bags repeat rows inside and
 * across bags, and most rows are never touched. */
#define DM_ROWS 300
#define DM_B 6
#define DM_L 5
#define DM_STEPS 4

static model_config dm_cfg(bool sparse)
{
    model_config c = {.num_embeddings = DM_ROWS, .embedding_dim = 24, .dense_input_size = 24,
                      .dense_output_size = 24, .dense_layers_count = 3, .sparse = sparse};
    return c;
}

/* Batch k's indices (DM_B x DM_L) and targets (DM_B), drawn from k; the
 * first indices of every bag repeat (rows 7 and 11). */
static data_batch dm_batch(uint64_t k, int64_t *idx, int64_t *tgt, uint64_t classes)
{
    rng r;
    rng_seed(&r, 1000 + k, 0);
    for (uint64_t i = 0; i < DM_B * DM_L; i++)
        idx[i] = (int64_t)rng_below(&r, DM_ROWS);
    for (uint32_t b = 0; b < DM_B; b++) {
        idx[b * DM_L] = 7;
        idx[b * DM_L + 1] = b % 2 ? 11 : 7;
        tgt[b] = (int64_t)rng_below(&r, classes);
    }
    data_batch d = {.indices = idx, .targets = tgt, .len = DM_B, .sample_length = DM_L, .number = k};
    return d;
}

typedef struct side {
    compute *dev;
    dummy_model *m;
    uint32_t order[64]; /* the ready callbacks, in order */
    uint32_t nready;
} side;

static void note_ready(void *ctx, uint32_t i)
{
    side *s = ctx;
    assert_true(s->nready < sizeof s->order / sizeof *s->order);
    s->order[s->nready++] = i;
}

static void side_open(side *s, const char *device, const model_config *c)
{
    char err[256] = "";
    memset(s, 0, sizeof *s);
    s->dev = compute_new(devspec_of(device), err, sizeof err);
    if (!s->dev)
        print_error("compute_new(%s): %s\n", device, err);
    assert_non_null(s->dev);
    s->m = model_new(s->dev, c, 42, DM_B, err, sizeof err);
    if (!s->m)
        print_error("model_new on %s: %s\n", device, err);
    assert_non_null(s->m);
}

static void side_close(side *s)
{
    model_free(s->m);
    compute_free(s->dev);
}

/* Every parameter of a and b equal (as same_floats), named. */
static void same_params(const char *when, side *d, side *c)
{
    for (uint32_t i = 0; i < model_nparams(c->m); i++) {
        float *got = host_copy(d->dev, model_values_span(d->m, i));
        float *want = host_copy(c->dev, model_values_span(c->m, i));
        char what[96];
        snprintf(what, sizeof what, "%s: %s", when, model_param(c->m, i)->name);
        same_floats(what, got, want, model_param(c->m, i)->size);
        free(got);
        free(want);
    }
}

/* One forward and backward of the same batch on both sides: the loss, the
 * output probabilities, the ready order and every gradient. */
static void check_dummy_fwd_bwd(bool sparse)
{
    model_config c = dm_cfg(sparse);
    side cpu, d;
    side_open(&cpu, "cpu", &c);
    side_open(&d, dut, &c);
    /* A device's memory has no host view: the test reads it as a GPU's. */
    assert_null(model_values(d.m));
    assert_non_null(model_values(cpu.m));
    /* The same weights: drawn on the host on every device, so exact. */
    bool was = exact;
    exact = true;
    same_params("initial", &d, &cpu);
    exact = was;

    int64_t idx[DM_B * DM_L], tgt[DM_B];
    data_batch b = dm_batch(0, idx, tgt, c.dense_output_size);
    double lc = model_forward(cpu.m, &b), ld = model_forward(d.m, &b);
    same_double("loss", ld, lc);
    float *pc = host_copy(cpu.dev, model_prob_span(cpu.m, DM_B));
    float *pd = host_copy(d.dev, model_prob_span(d.m, DM_B));
    same_floats("softmax output", pd, pc, DM_B * c.dense_output_size);
    free(pc);
    free(pd);

    model_backward(cpu.m, &b, note_ready, &cpu);
    model_backward(d.m, &b, note_ready, &d);
    assert_int_equal(d.nready, model_nparams(cpu.m));
    assert_memory_equal(d.order, cpu.order, cpu.nready * sizeof *cpu.order);

    for (uint32_t i = 0; i < model_nparams(cpu.m); i++) {
        const model_param_info *pi = model_param(cpu.m, i);
        cspan gc = model_grad_span(cpu.m, i), gd = model_grad_span(d.m, i);
        if (pi->sparse) {
            const int64_t *rc, *rd;
            const float *unused;
            uint64_t nc = model_sparse_grad(cpu.m, &rc, &unused);
            uint64_t nd = model_sparse_grad(d.m, &rd, &unused);
            assert_int_equal(nd, nc);
            assert_true(nc > 1 && nc < DM_B * DM_L); /* repeats coalesced */
            assert_memory_equal(rd, rc, nc * sizeof *rc);
            gc = cspan_sub(gc, 0, nc * c.embedding_dim);
            gd = cspan_sub(gd, 0, nc * c.embedding_dim);
        }
        float *want = host_copy(cpu.dev, gc), *got = host_copy(d.dev, gd);
        char what[64];
        snprintf(what, sizeof what, "gradient of %s", pi->name);
        same_floats(what, got, want, gc.n);
        free(want);
        free(got);
    }
    side_close(&cpu);
    side_close(&d);
}

static void test_dummy_dense(void **state)
{
    (void)state;
    check_dummy_fwd_bwd(false);
}

static void test_dummy_sparse(void **state)
{
    (void)state;
    check_dummy_fwd_bwd(true);
}

/* DM_STEPS steps of SGD over different batches on both sides: each step's
 * loss, and the parameters after the last. */
static void check_dummy_training(bool sparse, double momentum)
{
    model_config c = dm_cfg(sparse);
    side cpu, d;
    side_open(&cpu, "cpu", &c);
    side_open(&d, dut, &c);
    char err[256] = "";
    sgd *oc = sgd_new(cpu.m, 0.5, momentum, err, sizeof err);
    sgd *od = sgd_new(d.m, 0.5, momentum, err, sizeof err);
    assert_non_null(oc);
    assert_non_null(od);
    for (uint64_t k = 0; k < DM_STEPS; k++) {
        int64_t idx[DM_B * DM_L], tgt[DM_B];
        data_batch b = dm_batch(k, idx, tgt, c.dense_output_size);
        model_zero_grad(cpu.m);
        model_zero_grad(d.m);
        double lc = model_forward(cpu.m, &b), ld = model_forward(d.m, &b);
        char what[32];
        snprintf(what, sizeof what, "loss of step %llu", (unsigned long long)k);
        same_double(what, ld, lc);
        model_backward(cpu.m, &b, NULL, NULL);
        model_backward(d.m, &b, NULL, NULL);
        sgd_step(oc, cpu.m);
        sgd_step(od, d.m);
    }
    same_params("after training", &d, &cpu);
    /* It trained: the parameters moved from the initial ones. */
    dummy_model *init = model_new(cpu.dev, &c, 42, DM_B, err, sizeof err);
    assert_non_null(init);
    float *a = host_copy(cpu.dev, cspan_all(model_values_buf(init)));
    float *z = host_copy(cpu.dev, cspan_all(model_values_buf(cpu.m)));
    assert_memory_not_equal(a, z, model_total_size(init) * sizeof *a);
    free(a);
    free(z);
    model_free(init);
    sgd_free(oc);
    sgd_free(od);
    side_close(&cpu);
    side_close(&d);
}

static void test_dummy_train_dense(void **state)
{
    (void)state;
    check_dummy_training(false, 0.0);
}

static void test_dummy_train_momentum(void **state)
{
    (void)state;
    check_dummy_training(false, 0.9);
}

static void test_dummy_train_sparse(void **state)
{
    (void)state;
    check_dummy_training(true, 0.0);
}

/* ---- HybridModel's dense part ------------------------------------------------ */

static hybrid *hybrid_on(const char *device, metrics *mt, uint32_t P, uint64_t D)
{
    hybrid_config hc = {.number_ps = P, .num_embeddings = 300, .embedding_dim = D, .batches = 1, .lr = 0.05,
                        .seed = 9, .rank = 0, .rpc_timeout_s = 10, .device = devspec_of(device)};
    char err[256] = "";
    hybrid *h = hybrid_new(&hc, mt, err, sizeof err);
    if (!h)
        print_error("hybrid_new on %s: %s\n", device, err);
    assert_non_null(h);
    return h;
}

/* R rows of the dense part's input and their targets, drawn from salt:
 * rows in [-1, 1) as the looked-up rows' means are of order one. */
static void hybrid_input(uint64_t R, uint64_t salt, float **rows, int64_t **tgt)
{
    *rows = malloc(R * HYBRID_ROW * sizeof **rows);
    *tgt = malloc(R * sizeof **tgt);
    assert_non_null(*rows);
    assert_non_null(*tgt);
    rng r;
    rng_seed(&r, salt, 1);
    rng_fill_uniform(*rows, R * HYBRID_ROW, 1.0, &r);
    for (uint64_t i = 0; i < R; i++)
        (*tgt)[i] = (int64_t)rng_below(&r, HYBRID_CLASSES);
}

/* The smallest |ReLU input| of the dense part for these rows, in double on
 * the host from the parameters p (hybrid.h: Linear(512, 256), then
 * Linear(256, 128) and the ReLU; weights out x in, row-major, then biases,
 * layer by layer). A ReLU input this close to 0 could take the other side
 * on a GPU (its products differ from the cpu's by ~1e-8 here) and switch a
 * whole term of the gradients: a legitimate difference, not a bug, so the
 * fixtures must have none. */
static double hybrid_min_relu_input(const float *p, const float *rows, uint64_t R)
{
    const float *W0 = p, *b0 = W0 + 256 * HYBRID_ROW, *W1 = b0 + 256, *b1 = W1 + 128 * 256;
    double mn = INFINITY, h[256];
    for (uint64_t r = 0; r < R; r++) {
        const float *x = rows + r * HYBRID_ROW;
        for (int o = 0; o < 256; o++) {
            h[o] = b0[o];
            for (int i = 0; i < HYBRID_ROW; i++)
                h[o] += (double)W0[o * HYBRID_ROW + i] * x[i];
        }
        for (int o = 0; o < 128; o++) {
            double pre = b1[o];
            for (int i = 0; i < 256; i++)
                pre += (double)W1[o * 256 + i] * h[i];
            mn = fmin(mn, fabs(pre));
        }
    }
    return mn;
}

/* The dense part on the cpu and on the device for R rows: loss, dense
 * gradients and the rows' gradient. */
static void check_hybrid(uint32_t P, uint64_t D, uint64_t R)
{
    metrics *mc = metrics_new(), *md = metrics_new();
    assert_non_null(mc);
    assert_non_null(md);
    hybrid *hc = hybrid_on("cpu", mc, P, D), *hd = hybrid_on(dut, md, P, D);
    assert_true(R <= hybrid_dense_max_rows(hc));
    uint64_t n, nd;
    const float *p0 = hybrid_dense_params(hc, &n);
    const float *p1 = hybrid_dense_params(hd, &nd); /* read back through the layer */
    assert_int_equal(nd, n);
    assert_memory_equal(p1, p0, n * sizeof *p0); /* the same weights: drawn on the host */

    float *rows;
    int64_t *tgt;
    hybrid_input(R, 100 + R, &rows, &tgt);
    double margin = hybrid_min_relu_input(p0, rows, R);
    print_message("%llu rows: smallest |ReLU input| %.3g\n", (unsigned long long)R, margin);
    assert_true(margin > 1e-6);
    float *gc = malloc(n * sizeof *gc), *gd = malloc(n * sizeof *gd);
    float *xc = malloc(R * HYBRID_ROW * sizeof *xc), *xd = malloc(R * HYBRID_ROW * sizeof *xd);
    assert_true(gc && gd && xc && xd);
    double lc, ld;
    char err[256] = "";
    assert_int_equal(hybrid_dense_fwd_bwd(hc, rows, tgt, R, &lc, gc, xc, err, sizeof err), 0);
    assert_int_equal(hybrid_dense_fwd_bwd(hd, rows, tgt, R, &ld, gd, xd, err, sizeof err), 0);
    assert_true(isfinite(lc) && lc > 0);
    same_double("HybridModel loss", ld, lc);
    same_floats("HybridModel dense gradients", gd, gc, n);
    same_floats("HybridModel rows' gradient", xd, xc, R * HYBRID_ROW);
    /* Every dense tensor has some gradient (the ReLU did not cut it all). */
    double sum = 0;
    for (uint64_t j = 0; j < n; j++)
        sum += fabs(gc[j]);
    assert_true(sum > 0);

    free(rows);
    free(tgt);
    free(gc);
    free(gd);
    free(xc);
    free(xd);
    hybrid_free(hc);
    hybrid_free(hd);
    metrics_free(mc);
    metrics_free(md);
}

/* The seed's shape (2 servers of 256 columns: one row of 512 per bag). */
static void test_hybrid_dense(void **state)
{
    (void)state;
    check_hybrid(2, 256, 24);
}

/* One server of 8192 columns: 16 rows of 512 per bag, a full batch of
 * HYBRID_MAX_INDICES bags (800 rows: more targets than the 400 the trainer
 * once had room for). */
static void test_hybrid_dense_wide(void **state)
{
    (void)state;
    metrics *mt = metrics_new();
    assert_non_null(mt);
    hybrid *h = hybrid_on("cpu", mt, 1, 8192);
    uint64_t R = hybrid_dense_max_rows(h);
    assert_int_equal(R, 800);
    hybrid_free(h);
    metrics_free(mt);
    check_hybrid(1, 8192, R);
}

/* The entry point refuses what the dense part cannot take. */
static void test_hybrid_dense_refused(void **state)
{
    (void)state;
    metrics *mt = metrics_new();
    assert_non_null(mt);
    hybrid *h = hybrid_on(dut, mt, 2, 256);
    float *rows;
    int64_t *tgt;
    hybrid_input(2, 5, &rows, &tgt);
    double loss;
    char err[256] = "";
    assert_int_equal(hybrid_dense_fwd_bwd(h, rows, tgt, 0, &loss, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "rows"));
    tgt[1] = HYBRID_CLASSES;
    assert_int_equal(hybrid_dense_fwd_bwd(h, rows, tgt, 2, &loss, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "target 1"));
    tgt[1] = 0;
    assert_int_equal(hybrid_dense_fwd_bwd(h, rows, tgt, 2, &loss, NULL, NULL, err, sizeof err), 0);
    free(rows);
    free(tgt);
    hybrid_free(h);
    metrics_free(mt);
}

/* ---- main ------------------------------------------------------------------------ */

static int run_models_on(const char *name)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dummy_dense),
        cmocka_unit_test(test_dummy_sparse),
        cmocka_unit_test(test_dummy_train_dense),
        cmocka_unit_test(test_dummy_train_momentum),
        cmocka_unit_test(test_dummy_train_sparse),
        cmocka_unit_test(test_hybrid_dense),
        cmocka_unit_test(test_hybrid_dense_wide),
        cmocka_unit_test(test_hybrid_dense_refused),
    };
    char group[64];
    dut = name;
    exact = strncmp(name, "cuda", 4) != 0; /* a real GPU */
    snprintf(group, sizeof group, "models on %s against the cpu", name);
    return _cmocka_run_group_tests(group, tests, sizeof tests / sizeof *tests, NULL, NULL);
}

int main(void)
{
    bool ready;
    if (gpu_variant(&ready))
        return ready ? run_models_on("cuda:0") /* the GPU gpu_probe_device answered for */ : GPU_VARIANT_SKIP;
    int rc = run_models_on("fake-cuda");
    return rc | run_models_on("staged");
}
