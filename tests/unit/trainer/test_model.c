/* test_model.c — unit tests for the CPU training path: trainer/data (the
 * documented PRNG, DummyData generation, round-robin sharding), trainer/model
 * (layout, initialization, forward, backward and its ready callbacks, dense
 * and sparse embedding gradients, shape validation), trainer/optim (SGD,
 * momentum, sparse rows) and trainer/params_hash; and train.c's buckets and
 * the optimizer on the staged test device (compute_staged.c: no host view
 * of the model's memory, copies that complete late) and, for a hook that
 * takes device memory, on the fake GPU, against the cpu, bit for bit.
 *
 * Gradients are checked against central differences of an independent
 * double-precision reference forward written here from the model's
 * definition (not from model.c), with its own idea of the parameter layout.
 * Golden values (PRNG output, initial parameters, SHA-256 digests) were
 * computed once with a separate Python implementation of the documented
 * algorithms (hashlib + struct for the digests) and are hard-coded. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/rng.h"
#include "trainer/blasinfo.h"
#include "trainer/compute.h"
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/params_hash.h"
#include "trainer/train.h"
#include "devspec_of.h"

/* ---- fixtures ------------------------------------------------------------- */

#define T_B 3
#define T_L 5

/* The tiny model of the gradient checks: 7 rows of 4, two 4x4 layers. */
/* The compute layer every model of these tests runs on. */
static compute *dev;

static const model_config tiny_cfg = {
    .num_embeddings = 7, .embedding_dim = 4, .dense_input_size = 4, .dense_output_size = 4,
    .dense_layers_count = 2, .sparse = false,
};

/* One layer 4 -> 3: catches transposed in/out in the GEMM calls. */
static const model_config rect_cfg = {
    .num_embeddings = 7, .embedding_dim = 4, .dense_input_size = 4, .dense_output_size = 3,
    .dense_layers_count = 1, .sparse = false,
};

/* Repeated indices inside bags (3 twice in bag 0, 0 three times in bag 1,
 * 1 twice in bag 2) and across bags; row 4 is never used. */
static const int64_t t_idx[T_B * T_L] = {
    1, 3, 3, 6, 1, /* bag 0 */
    0, 0, 0, 2, 5, /* bag 1 */
    6, 3, 1, 1, 3, /* bag 2 */
};
static const int64_t t_tgt[T_B] = {2, 0, 1};

static data_batch tiny_batch(void)
{
    data_batch b = {.indices = t_idx, .targets = t_tgt, .len = T_B, .sample_length = T_L, .number = 0};
    return b;
}

static dummy_model *new_model(const model_config *cfg, uint64_t seed, uint32_t max_batch)
{
    char err[256] = "";
    dummy_model *m = model_new(dev, cfg, seed, max_batch, err, sizeof err);
    if (!m)
        print_error("model_new: %s\n", err);
    assert_non_null(m);
    return m;
}

/* ---- the double-precision reference --------------------------------------- */

#define R_MAXW 16

/* Offsets by the documented order: embedding, then per layer weight, bias. */
static uint64_t ref_weight_off(const model_config *c, uint32_t l)
{
    return c->num_embeddings * c->embedding_dim +
           (uint64_t)l * (c->dense_output_size * c->dense_input_size + c->dense_output_size);
}
static uint64_t ref_bias_off(const model_config *c, uint32_t l)
{
    return ref_weight_off(c, l) + c->dense_output_size * c->dense_input_size;
}

static void ref_softmax_f64(double *dst, const double *src, uint64_t n)
{
    double mx = src[0], sum = 0;
    for (uint64_t k = 1; k < n; k++)
        mx = fmax(mx, src[k]);
    for (uint64_t k = 0; k < n; k++)
        sum += (dst[k] = exp(src[k] - mx));
    for (uint64_t k = 0; k < n; k++)
        dst[k] /= sum;
}

/* The loss of the model definition (model.h) in double: EmbeddingBag mean,
 * the layers without activation, softmax, CrossEntropy on the softmax. */
static double ref_loss(const model_config *c, const double *P, const data_batch *b)
{
    uint64_t D = c->embedding_dim, C = c->dense_output_size;
    assert_true(D <= R_MAXW && C <= R_MAXW);
    double loss = 0;
    for (uint32_t s = 0; s < b->len; s++) {
        double x[R_MAXW] = {0}, y[R_MAXW], p[R_MAXW], q[R_MAXW];
        for (uint32_t t = 0; t < b->sample_length; t++)
            for (uint64_t k = 0; k < D; k++)
                x[k] += P[b->indices[s * b->sample_length + t] * D + k];
        for (uint64_t k = 0; k < D; k++)
            x[k] /= b->sample_length;
        uint64_t w = D;
        for (uint32_t l = 0; l < c->dense_layers_count; l++) {
            const double *W = P + ref_weight_off(c, l), *bias = P + ref_bias_off(c, l);
            for (uint64_t o = 0; o < C; o++) {
                y[o] = bias[o];
                for (uint64_t i = 0; i < w; i++)
                    y[o] += W[o * w + i] * x[i];
            }
            memcpy(x, y, C * sizeof *x);
            w = C;
        }
        ref_softmax_f64(p, x, C);
        ref_softmax_f64(q, p, C);
        loss -= log(q[b->targets[s]]);
    }
    return loss / b->len;
}

/* Central differences of ref_loss for every parameter, at m's values. */
static double *ref_numeric_grad(const dummy_model *m, const data_batch *b)
{
    const model_config *c = model_cfg(m);
    uint64_t n = model_total_size(m);
    double *P = malloc(n * sizeof *P), *G = malloc(n * sizeof *G);
    assert_non_null(P);
    assert_non_null(G);
    for (uint64_t j = 0; j < n; j++)
        P[j] = model_values_const(m)[j];
    const double h = 1e-5;
    for (uint64_t j = 0; j < n; j++) {
        double keep = P[j];
        P[j] = keep + h;
        double lp = ref_loss(c, P, b);
        P[j] = keep - h;
        double lm = ref_loss(c, P, b);
        P[j] = keep;
        G[j] = (lp - lm) / (2 * h);
    }
    free(P);
    return G;
}

/* got (float32) against want (double) for one tensor: elementwise relative
 * error < 1e-2, elements far below the tensor's scale compared absolutely. */
static void assert_grad_close(const char *what, const float *got, const double *want, uint64_t n)
{
    double scale = 0;
    for (uint64_t j = 0; j < n; j++)
        scale = fmax(scale, fabs(want[j]));
    assert_true(scale > 0); /* every tensor of the fixture has some gradient */
    for (uint64_t j = 0; j < n; j++) {
        double a = got[j], w = want[j];
        double big = fmax(fabs(a), fabs(w));
        double rel = big > 1e-3 * scale ? fabs(a - w) / big : fabs(a - w) / scale;
        if (!(rel < 1e-2)) {
            print_error("%s[%llu]: analytic %.9g, numeric %.9g (rel %.3g)\n", what, (unsigned long long)j, a, w,
                        rel);
            fail();
        }
    }
}

/* ---- data ------------------------------------------------------------------- */

static void test_rng_golden(void **state)
{
    /* Python reimplementation of data.h's DummyData: seed 42, max_val 100,
     * 4 samples of 5, sparsity 20. */
    static const int64_t want_idx[20] = {71, 93, 21, 36, 77, 51, 43, 85, 25, 78,
                                         37, 8,  71, 71, 50, 94, 48, 82, 52, 78};
    static const int64_t want_tgt[4] = {94, 8, 30, 86};
    data_config c = {.max_val = 100, .sample_count = 4, .sample_length = 5, .sparsity_percentage = 20};
    char err[256];
    dummy_data *d = data_generate(&c, 42, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(d->index_count, 80);
    assert_memory_equal(d->indices, want_idx, sizeof want_idx);
    assert_memory_equal(d->targets, want_tgt, sizeof want_tgt);
    data_free(d);
}

/* rng.h's normal fill written out plainly, one pair at a time, with frexp
 * and the polynomial as the header defines them. */
static double ref_ln(double x)
{
    int ei;
    double m = frexp(x, &ei), e = ei;
    if (m < 0.70710678118654752440) {
        m = m + m;
        e = e - 1;
    }
    double t = (m - 1) / (m + 1), t2 = t * t, p = 1.0 / 25;
    for (int j = 11; j >= 0; j--)
        p = p * t2 + 1.0 / (2 * j + 1);
    return 2 * t * p + e * 0x1.62e42fefa39efp-1;
}

static void ref_fill_normal(float *p, uint64_t n, rng *r)
{
    for (uint64_t k = 0; k < n; k += 2) {
        double u, v, s;
        do {
            u = 2 * rng_unit(r) - 1;
            v = 2 * rng_unit(r) - 1;
            s = u * u + v * v;
        } while (s >= 1 || s == 0);
        double f = sqrt(-2 * ref_ln(s) / s);
        p[k] = (float)(u * f);
        if (k + 1 < n)
            p[k + 1] = (float)(v * f);
    }
}

/* The fill is blocked and vectorised; its bits must be the definition's, at
 * both widths, for lengths around the block size and odd ones, and it must
 * leave the stream where the definition does. Golden values from
 * tests/integration/bu_reference.py (seed 7, stream 3). */
static void test_rng_normal_definition(void **state)
{
    static const uint32_t golden[9] = {0x3e948762, 0x3f4ce9cb, 0x3f85ef86, 0xbfac7a20, 0xbf54ba8b,
                                       0xbf070f78, 0x3f84522c, 0x3fd0a0ea, 0x3f0d0b88};
    static const uint64_t lens[] = {0, 1, 2, 3, 9, 255, 256, 257, 258, 1000, 2000, 4097};
    enum { MAXN = 4097 };
    float *got = malloc(MAXN * sizeof *got), *want = malloc(MAXN * sizeof *want);
    assert_non_null(got);
    assert_non_null(want);
    for (int wide = 0; wide <= 1; wide++) {
        rng_use_wide(wide);
        rng a, b;
        rng_seed(&a, 7, 3);
        rng_fill_normal(got, 9, &a);
        assert_memory_equal(got, golden, sizeof golden);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            rng_seed(&a, 11 + li, 5);
            rng_seed(&b, 11 + li, 5);
            rng_fill_normal(got, lens[li], &a);
            ref_fill_normal(want, lens[li], &b);
            if (lens[li])
                assert_memory_equal(got, want, lens[li] * sizeof *got);
            assert_memory_equal(a.s, b.s, sizeof a.s); /* the stream moved on alike */
        }
        double sum = 0, sq = 0;
        rng_seed(&a, 1, 1);
        rng_fill_normal(got, MAXN, &a);
        for (int i = 0; i < MAXN; i++) {
            sum += got[i];
            sq += (double)got[i] * got[i];
        }
        assert_true(fabs(sum / MAXN) < 0.1);         /* mean 0, sd of the mean ~0.016 */
        assert_true(fabs(sq / MAXN - 1.0) < 0.1);    /* variance 1 */
    }
    rng_use_wide(-1);
    free(got);
    free(want);
}

static void test_data_deterministic(void **state)
{
    data_config c = {.max_val = 100, .sample_count = 100, .sample_length = 100, .sparsity_percentage = 20};
    char err[256];
    dummy_data *a = data_generate(&c, 7, err, sizeof err);
    dummy_data *b = data_generate(&c, 7, err, sizeof err);
    dummy_data *o = data_generate(&c, 8, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(o);
    size_t ni = 100 * 100 * sizeof(int64_t), nt = 100 * sizeof(int64_t);
    assert_memory_equal(a->indices, b->indices, ni);
    assert_memory_equal(a->targets, b->targets, nt);
    assert_memory_not_equal(a->indices, o->indices, ni);
    assert_memory_not_equal(a->targets, o->targets, nt);
    data_free(a);
    data_free(b);
    data_free(o);
}

static uint64_t count_distinct(const int64_t *v, uint64_t n, uint64_t max_val)
{
    uint8_t *seen = calloc(max_val, 1);
    assert_non_null(seen);
    uint64_t distinct = 0;
    for (uint64_t k = 0; k < n; k++) {
        assert_true(v[k] >= 0 && (uint64_t)v[k] < max_val);
        distinct += !seen[v[k]];
        seen[v[k]] = 1;
    }
    free(seen);
    return distinct;
}

static void test_data_sparsity(void **state)
{
    static const uint32_t sp[] = {0, 20, 80, 99};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) {
        data_config c = {.max_val = 100, .sample_count = 100, .sample_length = 100, .sparsity_percentage = sp[i]};
        char err[256];
        dummy_data *d = data_generate(&c, 3, err, sizeof err);
        assert_non_null(d);
        uint64_t want = 100 - sp[i];
        assert_int_equal(d->index_count, want);
        uint64_t distinct = count_distinct(d->indices, 100 * 100, 100);
        assert_true(distinct <= d->index_count);
        /* 10000 uniform draws from <= 100 values miss one with p < 1e-40. */
        assert_int_equal(distinct, d->index_count);
        count_distinct(d->targets, 100, 100); /* targets in [0, max_val) */
        data_free(d);
    }
    /* Exact integer floor: 30 * 71% = 21.3 -> 21. */
    data_config c = {.max_val = 30, .sample_count = 1, .sample_length = 1, .sparsity_percentage = 29};
    dummy_data *d = data_generate(&c, 1, NULL, 0);
    assert_non_null(d);
    assert_int_equal(d->index_count, 21);
    data_free(d);
}

static void test_data_invalid(void **state)
{
    char err[256] = "";
    data_config c = {.max_val = 100, .sample_count = 10, .sample_length = 10, .sparsity_percentage = 100};
    assert_null(data_generate(&c, 1, err, sizeof err));
    assert_non_null(strstr(err, "no index values"));
    c.sparsity_percentage = 0;
    c.sample_length = 0;
    assert_null(data_generate(&c, 1, err, sizeof err));
    c.sample_length = 10;
    c.max_val = 0;
    assert_null(data_generate(&c, 1, err, sizeof err));
}

static void test_shard_round_robin(void **state)
{
    /* 23 samples in batches of 5: batches 0..3 full, batch 4 of 3 samples. */
    data_config c = {.max_val = 10, .sample_count = 23, .sample_length = 3, .sparsity_percentage = 0};
    char err[256];
    dummy_data *d = data_generate(&c, 5, err, sizeof err);
    assert_non_null(d);

    static const struct {
        uint32_t n, keep, dropped;
    } cases[] = {{1, 5, 0}, {2, 2, 1}, {3, 1, 2}, {5, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (uint32_t r = 0; r < cases[i].n; r++) {
            data_shard *s = data_shard_new(d, 5, r, cases[i].n, err, sizeof err);
            assert_non_null(s);
            assert_int_equal(s->total_batches, 5);
            assert_int_equal(s->nbatches, cases[i].keep);
            assert_int_equal(s->dropped, cases[i].dropped);
            uint32_t maxlen = 0;
            for (uint64_t k = 0; k < s->nbatches; k++) {
                const data_batch *b = &s->batches[k];
                uint64_t num = r + k * cases[i].n;
                assert_int_equal(b->number, num);
                assert_ptr_equal(b->indices, d->indices + num * 5 * 3);
                assert_ptr_equal(b->targets, d->targets + num * 5);
                assert_int_equal(b->sample_length, 3);
                assert_int_equal(b->len, num == 4 ? 3 : 5);
                maxlen = b->len > maxlen ? b->len : maxlen;
            }
            assert_int_equal(s->max_len, maxlen);
            data_shard_free(s);
        }
    }
    /* Every trainer of 5 gets one batch; trainer 4 the partial one. */
    data_shard *s = data_shard_new(d, 5, 4, 5, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(s->batches[0].len, 3);
    assert_int_equal(s->max_len, 3);
    data_shard_free(s);

    /* 6 trainers for 5 batches: someone would get nothing. */
    assert_null(data_shard_new(d, 5, 0, 6, err, sizeof err));
    assert_non_null(strstr(err, "fewer than the 6 trainers"));
    assert_null(data_shard_new(d, 5, 2, 2, err, sizeof err)); /* rank out of range */
    assert_null(data_shard_new(d, 0, 0, 1, err, sizeof err));
    data_free(d);
}

/* ---- model: layout, init, validation ------------------------------------------ */

static void test_model_layout(void **state)
{
    dummy_model *m = new_model(&tiny_cfg, 1, T_B);
    static const char *const names[] = {"embedding.weight", "dense.0.weight", "dense.0.bias", "dense.1.weight",
                                        "dense.1.bias"};
    static const uint64_t sizes[] = {28, 16, 4, 16, 4};
    assert_int_equal(model_nparams(m), 5);
    assert_int_equal(model_total_size(m), 68);
    uint64_t off = 0;
    for (uint32_t i = 0; i < 5; i++) {
        const model_param_info *p = model_param(m, i);
        assert_string_equal(p->name, names[i]);
        assert_int_equal(p->size, sizes[i]);
        assert_int_equal(p->offset, off);
        assert_int_equal(p->ndim, i == 0 || i % 2 == 1 ? 2 : 1);
        assert_int_equal(p->shape[0] * p->shape[1], p->size);
        assert_false(p->sparse);
        assert_ptr_equal(model_param_values(m, i), model_values(m) + off);
        assert_ptr_equal(model_param_grad(m, i), model_grads(m) + off);
        off += p->size;
    }
    assert_int_equal(model_param(m, 0)->shape[0], 7);
    assert_int_equal(model_param(m, 0)->shape[1], 4);
    model_free(m);

    /* Sparse: the embedding has no dense gradient buffer. */
    model_config sc = tiny_cfg;
    sc.sparse = true;
    m = new_model(&sc, 1, T_B);
    assert_true(model_param(m, 0)->sparse);
    assert_null(model_param_grad(m, 0));
    assert_non_null(model_param_grad(m, 1));
    model_free(m);
}

static float from_hex(const char *s)
{
    return strtof(s, NULL);
}

static void test_model_init(void **state)
{
    /* Python reimplementation of model.h's initialization, seed 1234. */
    static const char *const emb[] = {"0x1.822ea4p-4",  "-0x1.98a34ep+0", "0x1.91e04ep-1",
                                      "-0x1.15018ep+0", "-0x1.2d497ap-5", "-0x1.d9c864p-2"};
    static const char *const w0[] = {"0x1.d34e94p-2", "-0x1.6bf8eap-2", "-0x1.93129p-2", "-0x1.c2e3aep-4"};
    dummy_model *m = new_model(&tiny_cfg, 1234, T_B);
    for (int k = 0; k < 6; k++)
        assert_true(model_param_values(m, 0)[k] == from_hex(emb[k]));
    for (int k = 0; k < 4; k++)
        assert_true(model_param_values(m, 1)[k] == from_hex(w0[k]));
    /* Linear values within U(-1/sqrt(in), 1/sqrt(in)) = (-0.5, 0.5). */
    for (uint32_t i = 1; i < model_nparams(m); i++)
        for (uint64_t k = 0; k < model_param(m, i)->size; k++)
            assert_true(fabsf(model_param_values(m, i)[k]) <= 0.5f);

    /* Same seed: same values whatever `sparse`; another seed: different. */
    model_config sc = tiny_cfg;
    sc.sparse = true;
    dummy_model *s = new_model(&sc, 1234, 1);
    dummy_model *o = new_model(&tiny_cfg, 1235, T_B);
    assert_memory_equal(model_values(m), model_values(s), 68 * sizeof(float));
    assert_memory_not_equal(model_values(m), model_values(o), 68 * sizeof(float));
    model_free(m);
    model_free(s);
    model_free(o);
}

static void test_model_validation(void **state)
{
    char err[256] = "";
    model_config c = tiny_cfg;
    c.embedding_dim = 5;
    assert_null(model_new(dev, &c, 1, 1, err, sizeof err));
    assert_non_null(strstr(err, "embedding_dim (5) must equal dense_input_size (4)"));

    c = tiny_cfg;
    c.dense_output_size = 3; /* two layers 4 -> 3 -> ? cannot chain */
    assert_null(model_new(dev, &c, 1, 1, err, sizeof err));
    assert_non_null(strstr(err, "dense_output_size (3) must equal dense_input_size (4)"));

    c = tiny_cfg;
    c.dense_layers_count = 0;
    assert_null(model_new(dev, &c, 1, 1, err, sizeof err));
    assert_null(model_new(dev, &tiny_cfg, 1, 0, err, sizeof err)); /* max_batch 0 */

    /* Data against the model: indices must be rows, targets classes. */
    dummy_model *m = new_model(&rect_cfg, 1, 4); /* 7 rows, 3 classes */
    data_config dc = {.max_val = 3, .sample_count = 4, .sample_length = 2, .sparsity_percentage = 0};
    dummy_data *d = data_generate(&dc, 1, err, sizeof err);
    assert_int_equal(model_check_data(m, d, err, sizeof err), 0);
    data_free(d);
    dc.max_val = 5; /* targets up to 4 >= 3 classes */
    d = data_generate(&dc, 1, err, sizeof err);
    assert_int_equal(model_check_data(m, d, err, sizeof err), -1);
    assert_non_null(strstr(err, "dense_output_size=3 classes"));
    data_free(d);
    dc.max_val = 8; /* indices up to 7 >= 7 rows */
    d = data_generate(&dc, 1, err, sizeof err);
    assert_int_equal(model_check_data(m, d, err, sizeof err), -1);
    assert_non_null(strstr(err, "num_embeddings=7 rows"));
    data_free(d);
    model_free(m);
}

/* ---- model: forward and gradients --------------------------------------------- */

static void check_gradients(const model_config *cfg, const data_batch *b)
{
    dummy_model *m = new_model(cfg, 99, b->len);
    double *P = malloc(model_total_size(m) * sizeof *P);
    assert_non_null(P);
    for (uint64_t j = 0; j < model_total_size(m); j++)
        P[j] = model_values(m)[j];
    double want_loss = ref_loss(cfg, P, b);
    free(P);

    double loss = model_forward(m, b);
    assert_true(fabs(loss - want_loss) <= 1e-5 * want_loss);
    model_backward(m, b, NULL, NULL);
    double *G = ref_numeric_grad(m, b);
    for (uint32_t i = 0; i < model_nparams(m); i++) {
        const model_param_info *p = model_param(m, i);
        assert_grad_close(p->name, model_param_grad(m, i), G + p->offset, p->size);
    }
    /* Row 4 is in no bag: its gradient is exactly zero. */
    for (uint64_t k = 0; k < cfg->embedding_dim; k++)
        assert_true(model_param_grad(m, 0)[4 * cfg->embedding_dim + k] == 0.0f);
    free(G);
    model_free(m);
}

static void test_gradcheck_dense(void **state)
{
    data_batch b = tiny_batch();
    check_gradients(&tiny_cfg, &b);
}

static void test_gradcheck_rect(void **state)
{
    data_batch b = tiny_batch(); /* targets 2, 0, 1 < 3 classes */
    check_gradients(&rect_cfg, &b);
}

static void test_gradcheck_sparse(void **state)
{
    data_batch b = tiny_batch();
    model_config sc = tiny_cfg;
    sc.sparse = true;
    dummy_model *dm = new_model(&tiny_cfg, 99, T_B);
    dummy_model *sm = new_model(&sc, 99, T_B);
    double ld = model_forward(dm, &b), ls = model_forward(sm, &b);
    assert_true(ld == ls);
    model_backward(dm, &b, NULL, NULL);
    model_backward(sm, &b, NULL, NULL);

    const int64_t *rows;
    const float *vals;
    uint64_t nnz = model_sparse_grad(sm, &rows, &vals);
    static const int64_t want_rows[] = {0, 1, 2, 3, 5, 6}; /* unique, ascending; 4 unused */
    assert_int_equal(nnz, 6);
    assert_memory_equal(rows, want_rows, sizeof want_rows);

    /* The sparse rows are the dense gradient's nonzero rows, bit for bit
     * (same operations in the same order), and the rows left out are zero. */
    const float *G = model_param_grad(dm, 0);
    uint64_t D = sc.embedding_dim;
    for (uint64_t k = 0; k < nnz; k++)
        assert_memory_equal(vals + k * D, G + rows[k] * D, D * sizeof(float));
    for (uint64_t k = 0; k < D; k++)
        assert_true(G[4 * D + k] == 0.0f);
    /* Dense parameters agree too. */
    for (uint32_t i = 1; i < model_nparams(sm); i++)
        assert_memory_equal(model_param_grad(sm, i), model_param_grad(dm, i),
                            model_param(sm, i)->size * sizeof(float));
    /* And the sparse rows against the numeric reference directly. */
    double *N = ref_numeric_grad(sm, &b);
    double want[6 * 4];
    for (uint64_t k = 0; k < nnz; k++)
        for (uint64_t c = 0; c < D; c++)
            want[k * D + c] = N[rows[k] * D + c];
    assert_grad_close("embedding.weight (sparse)", vals, want, nnz * D);
    free(N);

    model_zero_grad(sm);
    assert_int_equal(model_sparse_grad(sm, &rows, &vals), 0);
    model_free(dm);
    model_free(sm);
}

/* Records the order of ready callbacks and a snapshot of each gradient at
 * the moment it was announced. */
typedef struct ready_log {
    dummy_model *m;
    uint32_t n;
    uint32_t order[16];
    float *snap[16];
    uint64_t snap_nnz;
    int64_t snap_rows[16];
} ready_log;

static void log_ready(void *ctx, uint32_t i)
{
    ready_log *log = ctx;
    assert_true(log->n < 16 && i < model_nparams(log->m));
    log->order[log->n++] = i;
    const model_param_info *p = model_param(log->m, i);
    log->snap[i] = malloc(p->size * sizeof(float));
    assert_non_null(log->snap[i]);
    if (p->sparse) {
        const int64_t *rows;
        const float *vals;
        log->snap_nnz = model_sparse_grad(log->m, &rows, &vals);
        memcpy(log->snap_rows, rows, log->snap_nnz * sizeof *rows);
        memcpy(log->snap[i], vals, log->snap_nnz * p->shape[1] * sizeof(float));
    } else {
        memcpy(log->snap[i], model_param_grad(log->m, i), p->size * sizeof(float));
    }
}

static void check_ready_order(bool sparse)
{
    model_config c = tiny_cfg;
    c.sparse = sparse;
    c.dense_layers_count = 3;
    c.dense_output_size = 4;
    data_batch b = tiny_batch();
    ready_log log = {.m = new_model(&c, 5, T_B)};
    dummy_model *m = log.m;
    /* Garbage in every gradient buffer: a snapshot taken before a
     * gradient is written would keep it and differ from the final one. */
    memset(model_grads(m), 0xff, model_total_size(m) * sizeof(float));
    model_forward(m, &b);
    model_backward(m, &b, log_ready, &log);

    static const uint32_t want[] = {6, 5, 4, 3, 2, 1, 0}; /* reverse parameter order */
    assert_int_equal(log.n, model_nparams(m));
    assert_memory_equal(log.order, want, sizeof want);
    for (uint32_t i = 0; i < model_nparams(m); i++) {
        const model_param_info *p = model_param(m, i);
        if (p->sparse) {
            const int64_t *rows;
            const float *vals;
            uint64_t nnz = model_sparse_grad(m, &rows, &vals);
            assert_int_equal(nnz, log.snap_nnz);
            assert_memory_equal(rows, log.snap_rows, nnz * sizeof *rows);
            assert_memory_equal(vals, log.snap[i], nnz * p->shape[1] * sizeof(float));
        } else {
            assert_memory_equal(model_param_grad(m, i), log.snap[i], p->size * sizeof(float));
        }
        free(log.snap[i]);
    }
    model_free(m);
}

static void test_ready_order_dense(void **state) { check_ready_order(false); }
static void test_ready_order_sparse(void **state) { check_ready_order(true); }

/* ---- SGD ------------------------------------------------------------------------ */

/* Set every value and gradient of m to small dyadic numbers so that the
 * hand-computed results are exact in float32. */
static void set_dyadic(dummy_model *m, float v0, float g0)
{
    for (uint64_t j = 0; j < model_total_size(m); j++) {
        model_values(m)[j] = v0 + (float)(j % 4) * 0.25f;
        model_grads(m)[j] = g0 * (float)(1 + j % 2);
    }
}

static void test_sgd_plain(void **state)
{
    dummy_model *m = new_model(&tiny_cfg, 1, 1);
    char err[256];
    sgd *o = sgd_new(m, 0.5, 0.0, err, sizeof err);
    assert_non_null(o);
    set_dyadic(m, 1.0f, 0.25f);
    sgd_step(o, m);
    /* p = (1 + (j%4)/4) - 0.5 * 0.25 * (1 + j%2) */
    for (uint64_t j = 0; j < model_total_size(m); j++) {
        float want = 1.0f + (float)(j % 4) * 0.25f - 0.125f * (float)(1 + j % 2);
        assert_true(model_values(m)[j] == want);
    }
    /* One parameter from an outside gradient. */
    float g[4] = {1, -2, 0.5f, 0};
    float before[4];
    memcpy(before, model_param_values(m, 2), sizeof before);
    assert_int_equal(sgd_step_dense(o, m, 2, g, err, sizeof err), 0);
    for (int k = 0; k < 4; k++)
        assert_true(model_param_values(m, 2)[k] == before[k] - 0.5f * g[k]);
    sgd_free(o);
    model_free(m);
}

static void test_sgd_momentum(void **state)
{
    dummy_model *m = new_model(&tiny_cfg, 1, 1);
    char err[256];
    sgd *o = sgd_new(m, 0.25, 0.5, err, sizeof err);
    assert_non_null(o);
    float *p = model_param_values(m, 2), *g = model_param_grad(m, 2);
    /* Step 1: buf = g = 0.5; p = 1 - 0.25 * 0.5 = 0.875.
     * Step 2: g = 0.25; buf = 0.5 * 0.5 + 0.25 = 0.5; p = 0.875 - 0.125 = 0.75.
     * Step 3: g = -1; buf = 0.25 - 1 = -0.75; p = 0.75 + 0.1875 = 0.9375. */
    static const float gs[3] = {0.5f, 0.25f, -1.0f}, want[3] = {0.875f, 0.75f, 0.9375f};
    p[0] = 1.0f;
    for (int step = 0; step < 3; step++) {
        g[0] = gs[step];
        sgd_step(o, m);
        assert_true(p[0] == want[step]);
    }
    sgd_free(o);
    model_free(m);
}

static void test_sgd_sparse(void **state)
{
    model_config sc = tiny_cfg;
    sc.sparse = true;
    dummy_model *m = new_model(&sc, 1, T_B);
    char err[256] = "";
    /* Momentum with a sparse gradient is refused, like PyTorch. */
    assert_null(sgd_new(m, 0.1, 0.9, err, sizeof err));
    assert_non_null(strstr(err, "sparse"));
    assert_non_null(strstr(err, "embedding.weight"));

    sgd *o = sgd_new(m, 0.5, 0.0, err, sizeof err);
    assert_non_null(o);
    float *E = model_param_values(m, 0);
    for (int k = 0; k < 28; k++)
        E[k] = 1.0f;
    /* Rows 5 and 1, unsorted, row 1 twice (summed). */
    static const int64_t rows[3] = {5, 1, 1};
    static const float vals[12] = {1, 1, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f, 0.25f};
    assert_int_equal(sgd_step_sparse(o, m, 0, rows, vals, 3, err, sizeof err), 0);
    for (int r = 0; r < 7; r++)
        for (int k = 0; k < 4; k++)
            assert_true(E[r * 4 + k] == (r == 5 ? 0.5f : r == 1 ? 0.625f : 1.0f));
    /* Out-of-range rows are refused with nothing updated. */
    static const int64_t bad[2] = {2, 7};
    assert_int_equal(sgd_step_sparse(o, m, 0, bad, vals, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "out of range"));
    assert_true(E[2 * 4] == 1.0f);

    /* sgd_step with the model's own sparse gradient: untouched row 4 stays. */
    data_batch b = tiny_batch();
    float row4[4];
    memcpy(row4, E + 16, sizeof row4);
    model_forward(m, &b);
    model_backward(m, &b, NULL, NULL);
    float row0[4];
    memcpy(row0, E, sizeof row0);
    sgd_step(o, m);
    assert_memory_equal(E + 16, row4, sizeof row4);
    assert_memory_not_equal(E, row0, sizeof row0);
    sgd_free(o);
    model_free(m);
}

static double train_steps(const model_config *c, double lr, double momentum, int steps, double *first)
{
    data_batch b = tiny_batch();
    dummy_model *m = new_model(c, 11, T_B);
    char err[256];
    sgd *o = sgd_new(m, lr, momentum, err, sizeof err);
    assert_non_null(o);
    double loss = 0;
    for (int s = 0; s < steps; s++) {
        model_zero_grad(m);
        loss = model_forward(m, &b);
        if (s == 0)
            *first = loss;
        model_backward(m, &b, NULL, NULL);
        sgd_step(o, m);
    }
    loss = model_forward(m, &b);
    sgd_free(o);
    model_free(m);
    return loss;
}

static void test_training_loss_falls(void **state)
{
    model_config sc = tiny_cfg;
    sc.sparse = true;
    /* The loss is CrossEntropy of a softmax output over 4 classes: it lies
     * in (log(e + 3) - 1, log 4) = (0.744, 1.386), a narrow band. */
    double first, last;
    last = train_steps(&tiny_cfg, 1.0, 0.0, 100, &first);
    print_message("dense, plain:    %.6f -> %.6f\n", first, last);
    assert_true(last < first - 0.1);
    last = train_steps(&tiny_cfg, 0.5, 0.9, 100, &first);
    print_message("dense, momentum: %.6f -> %.6f\n", first, last);
    assert_true(last < first - 0.1);
    last = train_steps(&sc, 1.0, 0.0, 100, &first);
    print_message("sparse, plain:   %.6f -> %.6f\n", first, last);
    assert_true(last < first - 0.1);
}

/* ---- params_sha256 ---------------------------------------------------------------- */

static void test_params_sha256(void **state)
{
    /* 2 rows of 2, one layer 2 -> 2: 4 + 4 + 2 = 10 floats. */
    model_config c = {.num_embeddings = 2, .embedding_dim = 2, .dense_input_size = 2, .dense_output_size = 2,
                      .dense_layers_count = 1, .sparse = false};
    static const float vals[10] = {0.5f, -1.25f, 3.0f, 0.0f, 0.125f, -2.0f, 1e-3f, 65504.0f, -0.0f, 7.75f};
    dummy_model *m = new_model(&c, 1, 1);
    assert_int_equal(model_total_size(m), 10);
    memcpy(model_values(m), vals, sizeof vals);
    char hex[65];
    assert_int_equal(params_sha256(m, hex), 0);
    /* hashlib.sha256(struct.pack('<10f', *vals)).hexdigest() */
    assert_string_equal(hex, "46c2da2f2fe5909fdf9f405bb93841ab8eb6351969c2e090b02283923e9d141d");

    model_values(m)[9] = 7.5f;
    char hex2[65];
    assert_int_equal(params_sha256(m, hex2), 0);
    assert_int_equal(strlen(hex2), 64);
    assert_string_not_equal(hex, hex2);
    model_values(m)[9] = 7.75f;
    model_values(m)[8] = 0.0f; /* -0.0 -> +0.0: equal as floats, not as bytes */
    assert_int_equal(params_sha256(m, hex2), 0);
    assert_string_not_equal(hex, hex2);
    model_free(m);
}

/* ---- blasinfo: the warning on generic BLAS kernels ------------------------ */

static bool cpu_avx2(const char *ext) { return strcmp(ext, "avx2") == 0; }
static bool cpu_avx512(const char *ext) { return strcmp(ext, "avx2") == 0 || strcmp(ext, "avx512f") == 0; }
static bool cpu_bf16(const char *ext) { return cpu_avx512(ext) || strcmp(ext, "avx512_bf16") == 0; }
static bool cpu_sse(const char *ext) { return strcmp(ext, "sse4_2") == 0; }

static void test_blas_generic_warning(void **state)
{
    (void)state;
    char w[512] = "";
    /* A generic core on an AVX2 CPU: named, with the core to set. */
    assert_int_equal(blasinfo_generic_warning("Prescott", NULL, cpu_avx2, w, sizeof w), 1);
    assert_non_null(strstr(w, "'Prescott'"));
    assert_non_null(strstr(w, "did not recognise"));
    assert_non_null(strstr(w, "OPENBLAS_CORETYPE=Haswell"));
    assert_int_equal(blasinfo_generic_warning("CORE2", NULL, cpu_avx512, w, sizeof w), 1); /* any case */
    assert_non_null(strstr(w, "OPENBLAS_CORETYPE=SkylakeX"));
    assert_int_equal(blasinfo_generic_warning("Sandybridge", NULL, cpu_bf16, w, sizeof w), 1);
    assert_non_null(strstr(w, "OPENBLAS_CORETYPE=Cooperlake"));
    /* Set by the user: said so, not blamed on the detection. */
    assert_int_equal(blasinfo_generic_warning("Prescott", "Prescott", cpu_avx2, w, sizeof w), 1);
    assert_non_null(strstr(w, "OPENBLAS_CORETYPE=Prescott makes"));
    assert_null(strstr(w, "did not recognise"));
    /* No warning: AVX2 kernels, or a CPU without AVX2, or no core. */
    memset(w, 0, sizeof w);
    assert_int_equal(blasinfo_generic_warning("Haswell", NULL, cpu_avx2, w, sizeof w), 0);
    assert_int_equal(blasinfo_generic_warning("Cooperlake", NULL, cpu_bf16, w, sizeof w), 0);
    assert_int_equal(blasinfo_generic_warning("Prescott", NULL, cpu_sse, w, sizeof w), 0);
    assert_int_equal(blasinfo_generic_warning(NULL, NULL, cpu_avx2, w, sizeof w), 0);
    assert_string_equal(w, "");
}

/* The library describes itself: name, version, core, threads. */
static void test_blas_describe(void **state)
{
    (void)state;
    json_t *j = blasinfo_json();
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "library")), "OpenBLAS");
    assert_true(strlen(json_string_value(json_object_get(j, "core"))) > 0);
    assert_int_equal(json_integer_value(json_object_get(j, "threads")), 1); /* OPENBLAS_NUM_THREADS=1 (ctest) */
    char line[256];
    blasinfo_describe(line, sizeof line);
    char want[128];
    snprintf(want, sizeof want, "OpenBLAS %s, %s kernels, 1 thread", json_string_value(json_object_get(j, "version")),
             json_string_value(json_object_get(j, "core")));
    assert_string_equal(line, want);
    json_decref(j);
}

/* ---- training on memory without host views (the staged test device) ------ */

/* A hook of one trainer that scales: a dense bucket's "mean" is its data
 * times 0.5 in place, a sparse one's its rows with values times 0.5 —
 * not the identity, so a mean that never reaches the gradients shows. It
 * works in hook_ready, on what it is handed: a bucket handed over before
 * its copy is done holds the staged device's poison (NaN). */
typedef struct scale_hook {
    hook base;
    uint32_t next_id;  /* buckets are handed over in id order */
    uint32_t waited;   /* and waited for in id order, each once handed over */
    uint64_t handed;   /* over the whole run */
    uint64_t poisoned; /* values that were NaN when handed over */
    uint64_t on_device; /* dense buckets handed over in device memory */
    /* the first two batches' buckets as handed over: floats (dense) or
     * rows' floats (sparse, negative), in order */
    int64_t seen[2][16];
    uint32_t nseen[2];
    unsigned wait_sleep_us; /* each wait sleeps this long: an exposed wait of at least that */
    /* Lending (scale_lend_ops: hook_send_memory): memory it owns, asked
     * for how many times, and the dense buckets handed over that lay in
     * it. lend_none: it has none to lend. */
    float *lent;
    size_t lent_bytes;
    uint32_t asked;
    bool lend_none;
    uint64_t in_lent;
} scale_hook;

static void scale_ready(hook *h, hook_bucket *b)
{
    scale_hook *s = (scale_hook *)h;
    if (b->id == 0) { /* a new batch: the last one's buckets were all waited for */
        assert_int_equal(s->waited, s->next_id);
        s->next_id = s->waited = 0;
    }
    assert_int_equal(b->id, s->next_id);
    s->next_id++;
    s->handed++;
    if (b->batch < 2 && s->nseen[b->batch] < 16)
        s->seen[b->batch][s->nseen[b->batch]++] = b->sparse ? -(int64_t)(b->rows * b->cols) : (int64_t)b->count;
    if (!b->sparse) {
        /* Exactly one of the two; device memory only for a hook that takes
         * it. On the fake GPU a device address is a host address (cugpu.h),
         * so this hook scales it in place as NCCL would on a GPU: a bucket
         * handed over before its writer is done gives other bits than the
         * cpu's (the fake GPU's workers run late: PSBENCH_FAKE_GPU_DELAY_US). */
        bool on_device = !devf32_is_none(b->device_data);
        assert_true((b->data != NULL) != on_device);
        assert_true(!on_device || s->base.device_dense);
        float *d = on_device ? b->device_data.p : b->data; /* the fake GPU's: host memory */
        s->on_device += on_device;
        s->in_lent += s->lent && d >= s->lent && d + b->count <= s->lent + s->lent_bytes / sizeof(float);
        for (uint64_t k = 0; k < b->count; k++) {
            s->poisoned += isnan(d[k]);
            d[k] *= 0.5f;
        }
    } else {
        assert_int_equal(hook_bucket_reserve(b, b->nnz), 0);
        b->result_nnz = b->nnz;
        memcpy(b->result, b->idx, b->nnz * 8);
        float *v = (float *)(void *)(b->result + b->nnz * 8);
        for (uint64_t k = 0; k < b->nnz * b->cols; k++) {
            s->poisoned += isnan(b->vals[k]);
            v[k] = b->vals[k] * 0.5f;
        }
    }
    b->t_ready_ns = b->t_done_ns = 1;
}

static int scale_wait(hook *h, hook_bucket **bs, uint32_t n, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    scale_hook *s = (scale_hook *)h;
    if (s->wait_sleep_us)
        usleep(s->wait_sleep_us);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(bs[i]->id < s->next_id); /* handed over before it is waited for */
        assert_int_equal(bs[i]->id, s->waited);
        s->waited++;
    }
    return 0;
}

static void scale_destroy(hook *h) { (void)h; }

static const hook_ops scale_ops = {.ready = scale_ready, .wait = scale_wait, .destroy = scale_destroy};

/* Memory to send from (hook_send_memory), the hook's own: NaN, so that
 * gradients the model did not write show (it is lent as it is). */
static void *scale_send_memory(hook *h, size_t bytes)
{
    scale_hook *s = (scale_hook *)h;
    s->asked++;
    assert_int_equal(s->handed, 0); /* before the first bucket, as hook.h says */
    assert_null(s->lent);            /* once: one model */
    if (s->lend_none)
        return NULL;
    s->lent = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    assert_non_null(s->lent);
    s->lent_bytes = bytes;
    for (size_t k = 0; k < bytes / sizeof(float); k++)
        s->lent[k] = NAN;
    return s->lent;
}

static const hook_ops scale_lend_ops = {
    .ready = scale_ready, .wait = scale_wait, .send_memory = scale_send_memory, .destroy = scale_destroy};

/* The small job these tests train: 2 epochs of 8 batches, DDP's buckets:
 * the first iteration of the pass one dense bucket (and the sparse
 * embedding's), every later one 4 (TINY_BUCKETS). */
#define TINY_BATCHES (2 * 8)
#define TINY_BUCKETS 4
/* The tiny job's pass as the master's --epochs 2 gives it. */
static uint64_t t_steps(const train *t) { return 2 * train_batches_per_epoch(t); }
static train_job tiny_job(const char *device, bool sparse, double momentum)
{
    train_job j = {
        .model = {.num_embeddings = 50, .embedding_dim = 8, .dense_input_size = 8, .dense_output_size = 8,
                  .dense_layers_count = 3, .sparse = sparse},
        .data = {.max_val = 8, .sample_count = 30, .sample_length = 4, .sparsity_percentage = 0},
        .seed = 11, .batch_size = 4, .epochs = 2, .rank = 0, .ntrainer = 1,
        .lr = 0.2, .momentum = momentum,
        /* 60 floats, the first bucket too: a layer's bias and weight (72) a
         * bucket, the embedding one of its own */
        .bucket_cap_mb = 240.0 / (1024 * 1024), .first_bucket_mb = 240.0 / (1024 * 1024),
        .device = devspec_of(device),
    };
    return j;
}

/* A few epochs of train.c on `device` with the scaling hook; the final
 * parameters (a copy) and the loss of the last epoch. */
static float *train_on(const char *device, bool sparse, double momentum, uint64_t *n, double *loss,
                       uint64_t *handed, bool device_hook, uint64_t *on_device)
{
    train_job j = tiny_job(device, sparse, momentum);
    metrics *m = metrics_new();
    assert_non_null(m);
    char err[256] = "";
    train *t = train_new(&j, NULL, m, err, sizeof err);
    if (!t)
        print_error("train_new on %s: %s\n", device, err);
    assert_non_null(t);
    scale_hook sh = {.base = {.ops = &scale_ops, .name = "scale_hook", .device_dense = device_hook}};
    assert_int_equal(train_pass(t, &sh.base, t_steps(t), NULL, NULL, err, sizeof err), 0);
    assert_int_equal(sh.poisoned, 0);
    assert_int_equal(sh.waited, sh.next_id); /* the last batch's too */
    *handed = sh.handed;
    if (on_device)
        *on_device = sh.on_device;
    uint64_t ne;
    *loss = train_loss_per_epoch(t, &ne)[ne - 1];
    const float *p = train_params(t, n);
    assert_non_null(p);
    float *copy = malloc(*n * sizeof *copy);
    assert_non_null(copy);
    memcpy(copy, p, *n * sizeof *copy);
    char hex[65];
    assert_int_equal(params_sha256(train_model(t), hex), 0);
    train_free(t);
    metrics_free(m);
    return copy;
}

static void check_staged_equals_cpu(bool sparse, double momentum)
{
    uint64_t nc, ns, hc, hs;
    double lc, ls;
    float *pc = train_on("cpu", sparse, momentum, &nc, &lc, &hc, false, NULL);
    float *ps = train_on("staged", sparse, momentum, &ns, &ls, &hs, false, NULL);
    assert_int_equal(nc, ns);
    assert_int_equal(hc, hs);
    assert_int_equal(hc, (sparse ? 2 : 1) + (TINY_BATCHES - 1) * TINY_BUCKETS);
    assert_memory_equal(pc, ps, nc * sizeof *pc);
    assert_memory_equal(&lc, &ls, sizeof lc);
    free(pc);
    free(ps);
}

/* DummyModel trained through train.c's buckets on the staged device (no
 * host view of the gradients: pinned twins, copies that complete late)
 * ends with the cpu's parameters, bit for bit. */
/* DDP's buckets (ddp_buckets.h) through train.c, handed over in id order
 * (scale_ready asserts it): the pass's first batch one bucket of every
 * dense gradient (and the sparse embedding's), every later batch the
 * rebuilt ones — a layer's bias and weight, first the last layer's, the
 * embedding alone; the layout as results.json lists it. */
static void check_ddp_buckets(const char *device, bool sparse)
{
    train_job j = tiny_job(device, sparse, 0.0);
    metrics *m = metrics_new();
    char err[256] = "";
    train *t = train_new(&j, NULL, m, err, sizeof err);
    assert_non_null(t);
    scale_hook sh = {.base = {.ops = &scale_ops, .name = "scale_hook"}};
    assert_int_equal(train_pass(t, &sh.base, t_steps(t), NULL, NULL, err, sizeof err), 0);
    const int64_t layer = 8 * 8 + 8, emb = 50 * 8;
    if (sparse) {
        assert_int_equal(sh.nseen[0], 2);
        assert_int_equal(sh.seen[0][0], 3 * layer);
        assert_int_equal(sh.seen[0][1], -emb);
    } else {
        assert_int_equal(sh.nseen[0], 1);
        assert_int_equal(sh.seen[0][0], 3 * layer + emb);
    }
    assert_int_equal(sh.nseen[1], TINY_BUCKETS);
    for (int k = 0; k < 3; k++)
        assert_int_equal(sh.seen[1][k], layer);
    assert_int_equal(sh.seen[1][3], sparse ? -emb : emb);
    assert_int_equal(sh.handed, (sparse ? 2 : 1) + (TINY_BATCHES - 1) * TINY_BUCKETS);
    json_t *b = train_buckets_json(t);
    assert_non_null(b);
    json_t *first = json_object_get(b, "first_iteration"), *rebuilt = json_object_get(b, "rebuilt");
    assert_int_equal(json_array_size(first), sparse ? 2 : 1);
    assert_int_equal(json_array_size(rebuilt), TINY_BUCKETS);
    /* DDP's order inside a bucket: definition order in the first
     * iteration's, backward's in the rebuilt ones */
    json_t *p0 = json_object_get(json_array_get(first, 0), "parameters");
    assert_string_equal(json_string_value(json_array_get(p0, 0)), sparse ? "dense.0.weight" : "embedding.weight");
    json_t *r0 = json_array_get(rebuilt, 0);
    assert_int_equal(json_integer_value(json_object_get(r0, "floats")), layer);
    assert_string_equal(json_string_value(json_array_get(json_object_get(r0, "parameters"), 0)), "dense.2.bias");
    assert_string_equal(json_string_value(json_array_get(json_object_get(r0, "parameters"), 1)), "dense.2.weight");
    json_t *r3 = json_array_get(rebuilt, 3);
    assert_int_equal(json_is_true(json_object_get(r3, "sparse")), sparse);
    assert_string_equal(json_string_value(json_array_get(json_object_get(r3, "parameters"), 0)), "embedding.weight");
    json_decref(b);
    train_free(t);
    metrics_free(m);
}

static void test_train_ddp_buckets(void **state)
{
    (void)state;
    check_ddp_buckets("cpu", false);
    check_ddp_buckets("cpu", true);
    check_ddp_buckets("staged", false);
    check_ddp_buckets("staged", true);
}

/* Every pass starts from a fresh model and optimizer, as the seed's: a
 * second pass repeats the first bit for bit (losses and parameters), with
 * momentum too (a momentum kept from the first pass would show). */
static void check_fresh_pass(const char *device)
{
    train_job j = tiny_job(device, false, 0.9);
    metrics *m = metrics_new();
    char err[256] = "";
    train *t = train_new(&j, NULL, m, err, sizeof err);
    assert_non_null(t);
    double loss[2][2];
    float *params[2];
    for (int pass = 0; pass < 2; pass++) {
        scale_hook sh = {.base = {.ops = &scale_ops, .name = "scale_hook"}};
        assert_int_equal(train_pass(t, &sh.base, t_steps(t), NULL, NULL, err, sizeof err), 0);
        uint64_t ne, n;
        const double *l = train_loss_per_epoch(t, &ne);
        assert_int_equal(ne, 2);
        memcpy(loss[pass], l, sizeof loss[pass]);
        const float *p = train_params(t, &n);
        params[pass] = malloc(n * sizeof *params[pass]);
        assert_non_null(params[pass]);
        memcpy(params[pass], p, n * sizeof *params[pass]);
        if (pass == 1)
            assert_memory_equal(params[0], params[1], n * sizeof *params[0]);
    }
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    free(params[0]);
    free(params[1]);
    train_free(t);
    metrics_free(m);
}

static void test_train_fresh_model_per_pass(void **state)
{
    (void)state;
    check_fresh_pass("cpu");
    check_fresh_pass("staged");
}

/* backward is the seed's loss.backward() under DDP: the compute and the
 * wait for the means; backward_compute the compute alone. A hook whose
 * every wait takes at least 2 ms: each step's backward is its compute plus
 * its exposed wait (>= 2 ms). */
static void test_train_backward_includes_wait(void **state)
{
    (void)state;
    train_job j = tiny_job("cpu", false, 0.0);
    metrics *m = metrics_new();
    char err[256] = "";
    train *t = train_new(&j, NULL, m, err, sizeof err);
    assert_non_null(t);
    scale_hook sh = {.base = {.ops = &scale_ops, .name = "scale_hook"}, .wait_sleep_us = 2000};
    assert_int_equal(train_pass(t, &sh.base, t_steps(t), NULL, NULL, err, sizeof err), 0);
    stats *bwd = metrics_get(m, "backward_metric,backward");
    stats *cmp = metrics_get(m, "backward_metric,backward_compute");
    stats *exp = metrics_get(m, "hook_future_metric,exposed_wait");
    assert_int_equal(bwd->count, TINY_BATCHES);
    assert_int_equal(cmp->count, TINY_BATCHES);
    assert_int_equal(exp->count, TINY_BATCHES);
    assert_true(exp->min >= 2.0);
    assert_true(bwd->min >= 2.0);
    assert_true(fabs(bwd->sum - (cmp->sum + exp->sum)) < 1e-6 * TINY_BATCHES);
    for (size_t i = 0; i < bwd->nsamples; i++)
        assert_true(bwd->samples[i] >= cmp->samples[i] + exp->samples[i] - 1e-6);
    train_free(t);
    metrics_free(m);
}

static int count_ticks(void *ctx, uint64_t batches_done, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    uint64_t *n = ctx;
    assert_int_equal(batches_done, *n + 1); /* one tick a step, numbered from 1 */
    *n = batches_done;
    return 0;
}

/* --steps: a pass of any number of steps cycles the data as epochs; the
 * last epoch is partial, its loss the mean of the batches it had; the
 * epochs it completed are those of a pass of whole epochs, bit for bit. */
static void test_train_steps_cycle_the_data(void **state)
{
    (void)state;
    double loss[2][4];
    uint64_t nloss[2];
    const uint64_t steps[2] = {29, 24}; /* 3 epochs of 8 and 5 batches; 3 epochs */
    for (int r = 0; r < 2; r++) {
        train_job j = tiny_job("cpu", false, 0.9);
        metrics *m = metrics_new();
        char err[256] = "";
        train *t = train_new(&j, NULL, m, err, sizeof err);
        assert_non_null(t);
        assert_int_equal(train_batches_per_epoch(t), 8);
        scale_hook sh = {.base = {.ops = &scale_ops, .name = "scale_hook"}};
        uint64_t ticks = 0;
        assert_int_equal(train_pass(t, &sh.base, steps[r], count_ticks, &ticks, err, sizeof err), 0);
        assert_int_equal(ticks, steps[r]);
        assert_int_equal(metrics_get(m, "batch_level_metric,batch_all")->count, steps[r]);
        const double *le = train_loss_per_epoch(t, &nloss[r]);
        assert_int_equal(nloss[r], (steps[r] + 7) / 8);
        for (uint64_t e = 0; e < nloss[r]; e++) {
            assert_true(isfinite(le[e]));
            loss[r][e] = le[e];
        }
        train_free(t);
        metrics_free(m);
    }
    for (int e = 0; e < 3; e++)
        assert_memory_equal(&loss[0][e], &loss[1][e], sizeof(double));
}

static void test_train_staged_dense(void **state) { check_staged_equals_cpu(false, 0.0); }
static void test_train_staged_momentum(void **state) { check_staged_equals_cpu(false, 0.9); }
static void test_train_staged_sparse(void **state) { check_staged_equals_cpu(true, 0.0); }

/* A hook that takes device memory (as allreduce_hook on an NCCL group): on
 * the fake GPU, with its workers running late, train.c hands dense buckets
 * over in device memory, each once its writer is done, no twin between,
 * and the run ends with the cpu's parameters bit for bit (fake-cuda
 * computes the cpu's bits). On the cpu, and for sparse buckets, the same
 * hook gets host memory. */
static void check_device_buckets(bool sparse, double momentum)
{
    setenv("PSBENCH_FAKE_GPU_DELAY_US", "300", 1);
    uint64_t nc, nf, hc, hf, dc = 0, df = 0;
    double lc, lf;
    float *pc = train_on("cpu", sparse, momentum, &nc, &lc, &hc, true, &dc);
    float *pf = train_on("fake-cuda", sparse, momentum, &nf, &lf, &hf, true, &df);
    unsetenv("PSBENCH_FAKE_GPU_DELAY_US");
    assert_int_equal(nc, nf);
    assert_int_equal(hc, hf);
    assert_int_equal(dc, 0);           /* the cpu's gradients are host memory */
    assert_true(df >= 2 * 7 * 3);      /* 7 batches an epoch, 3 dense buckets or more */
    assert_true(df < hf || !sparse);   /* the sparse bucket: host memory */
    assert_memory_equal(pc, pf, nc * sizeof *pc);
    assert_memory_equal(&lc, &lf, sizeof lc);
    free(pc);
    free(pf);
}

/* A run through a hook that lends memory to send from (train_new with the
 * hook): the final parameters and loss, as train_on's; whether the model's
 * gradients were lent. */
static float *train_lending(const char *device, bool sparse, double momentum, scale_hook *sh, uint64_t *n,
                            double *loss, bool *lent)
{
    train_job j = tiny_job(device, sparse, momentum);
    metrics *m = metrics_new();
    assert_non_null(m);
    char err[256] = "";
    sh->base.ops = &scale_lend_ops;
    sh->base.name = "scale_hook";
    train *t = train_new(&j, &sh->base, m, err, sizeof err);
    assert_non_null(t);
    *lent = model_grads_lent(train_model(t));
    assert_int_equal(train_pass(t, &sh->base, t_steps(t), NULL, NULL, err, sizeof err), 0);
    assert_int_equal(sh->poisoned, 0);
    uint64_t ne;
    *loss = train_loss_per_epoch(t, &ne)[ne - 1];
    const float *p = train_params(t, n);
    assert_non_null(p);
    float *copy = malloc(*n * sizeof *copy);
    assert_non_null(copy);
    memcpy(copy, p, *n * sizeof *copy);
    train_free(t);
    free(sh->lent); /* the hook's, after the model: as a workload frees them */
    metrics_free(m);
    return copy;
}

/* A hook that lends memory to send from (rpc_hook's shared segment): on
 * the cpu the model's gradients are computed there — every dense bucket
 * handed over lies in it — with the bits of a run in the layer's own
 * memory; a hook with none to lend, and a device that computes on memory
 * of its own only (staged), leave them in the layer's memory, the same
 * bits again. */
static void check_lent_grads(bool sparse, double momentum)
{
    uint64_t n0, n, h0;
    double l0, l;
    bool lent;
    float *p0 = train_on("cpu", sparse, momentum, &n0, &l0, &h0, false, NULL);

    scale_hook sh = {0};
    float *p = train_lending("cpu", sparse, momentum, &sh, &n, &l, &lent);
    assert_true(lent);
    assert_int_equal(sh.asked, 1);
    assert_int_equal(n, n0);
    assert_int_equal(sh.handed, h0);
    /* every dense bucket: all but the sparse embedding's, one a batch */
    assert_int_equal(sh.in_lent, h0 - (sparse ? TINY_BATCHES : 0));
    assert_memory_equal(p, p0, n * sizeof *p);
    assert_memory_equal(&l, &l0, sizeof l);
    free(p);

    scale_hook none = {.lend_none = true};
    p = train_lending("cpu", sparse, momentum, &none, &n, &l, &lent);
    assert_false(lent);
    assert_int_equal(none.asked, 1);
    assert_int_equal(none.in_lent, 0);
    assert_memory_equal(p, p0, n * sizeof *p);
    free(p);

    scale_hook staged = {0};
    p = train_lending("staged", sparse, momentum, &staged, &n, &l, &lent);
    assert_false(lent);
    assert_int_equal(staged.asked, 0); /* not asked: it could not compute there */
    assert_memory_equal(p, p0, n * sizeof *p);
    free(p);
    free(p0);
}

static void test_train_lent_dense(void **state) { check_lent_grads(false, 0.9); }
static void test_train_lent_sparse(void **state) { check_lent_grads(true, 0.0); }

static void test_train_device_dense(void **state) { check_device_buckets(false, 0.9); }
static void test_train_device_sparse(void **state) { check_device_buckets(true, 0.0); }

/* A GPU that fails mid-pass (the fake GPU's injected failure): train_pass
 * stops with the layer's reason — not a divergence, not an exit — and
 * nothing is handed to the hook after the failure; the train frees. */
static void test_train_gpu_failure(void **state)
{
    (void)state;
    train_job j = tiny_job("fake-cuda", false, 0.0);
    metrics *m = metrics_new();
    assert_non_null(m);
    char err[512] = "";
    setenv("PSBENCH_FAKE_GPU_FAIL_AT", "400", 1); /* a few batches in */
    train *t = train_new(&j, NULL, m, err, sizeof err);
    unsetenv("PSBENCH_FAKE_GPU_FAIL_AT");
    assert_non_null(t);
    scale_hook sh = {.base = {.ops = &scale_ops, .name = "scale_hook"}};
    assert_int_equal(train_pass(t, &sh.base, t_steps(t), NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "compute (fake-cuda): "));
    assert_non_null(strstr(err, "injected failure of operation 400"));
    assert_true(sh.handed > 0 && sh.handed < 1 + (TINY_BATCHES - 1) * TINY_BUCKETS);
    assert_int_equal(sh.poisoned, 0);
    train_free(t);
    metrics_free(m);
}

/* sgd_step on the model's own sparse gradient where it has no host view,
 * and params_sha256 of parameters without one: as on the cpu. */
static void test_sgd_step_staged(void **state)
{
    model_config sc = tiny_cfg;
    sc.sparse = true;
    data_batch b = tiny_batch();
    char hex[2][65];
    for (int k = 0; k < 2; k++) {
        char err[256] = "";
        compute *d = compute_new(devspec_of(k ? "staged" : "cpu"), err, sizeof err);
        assert_non_null(d);
        dummy_model *m = model_new(d, &sc, 5, T_B, err, sizeof err);
        assert_non_null(m);
        assert_true((model_values(m) == NULL) == (k == 1));
        sgd *o = sgd_new(m, 0.5, 0.0, err, sizeof err);
        assert_non_null(o);
        for (int s = 0; s < 3; s++) {
            model_forward(m, &b);
            model_backward(m, &b, NULL, NULL);
            sgd_step(o, m);
        }
        assert_int_equal(params_sha256(m, hex[k]), 0);
        sgd_free(o);
        model_free(m);
        compute_free(d);
    }
    assert_string_equal(hex[0], hex[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_generic_warning),
        cmocka_unit_test(test_blas_describe),
        cmocka_unit_test(test_rng_golden),
        cmocka_unit_test(test_rng_normal_definition),
        cmocka_unit_test(test_data_deterministic),
        cmocka_unit_test(test_data_sparsity),
        cmocka_unit_test(test_data_invalid),
        cmocka_unit_test(test_shard_round_robin),
        cmocka_unit_test(test_model_layout),
        cmocka_unit_test(test_model_init),
        cmocka_unit_test(test_model_validation),
        cmocka_unit_test(test_gradcheck_dense),
        cmocka_unit_test(test_gradcheck_rect),
        cmocka_unit_test(test_gradcheck_sparse),
        cmocka_unit_test(test_ready_order_dense),
        cmocka_unit_test(test_ready_order_sparse),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_sparse),
        cmocka_unit_test(test_training_loss_falls),
        cmocka_unit_test(test_params_sha256),
        cmocka_unit_test(test_sgd_step_staged),
        cmocka_unit_test(test_train_ddp_buckets),
        cmocka_unit_test(test_train_fresh_model_per_pass),
        cmocka_unit_test(test_train_backward_includes_wait),
        cmocka_unit_test(test_train_steps_cycle_the_data),
        cmocka_unit_test(test_train_staged_dense),
        cmocka_unit_test(test_train_staged_momentum),
        cmocka_unit_test(test_train_staged_sparse),
        cmocka_unit_test(test_train_lent_dense),
        cmocka_unit_test(test_train_lent_sparse),
        cmocka_unit_test(test_train_device_dense),
        cmocka_unit_test(test_train_device_sparse),
        cmocka_unit_test(test_train_gpu_failure),
    };
    dev = compute_new((device_spec){.kind = DEVICE_CPU}, NULL, 0);
    if (!dev)
        return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    compute_free(dev);
    return rc;
}
