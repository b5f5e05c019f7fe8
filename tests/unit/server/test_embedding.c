/* test_embedding.c — the embedding kind (server/kind_embedding.c) and its
 * arithmetic (reduce.c's gather, scatter SGD and dense SGD).
 *
 * The loops are compared with a plain reimplementation of the protocol's
 * rules (docs/protocol.md, "Kind `embedding`"), bit for bit: bags of 0, 1
 * and many rows, repeated indices. The kind is driven through its ops, as
 * the transport drives it, on the `cpu` device and on the `test` device
 * (completions late, from a worker thread): the table's initial values,
 * lookups, updates, a lookup that must see the updates sent before it
 * while they are still in flight, every refused call leaving the table as
 * it was, and reset. The table is filled a slice at a time (as the
 * server's reactor does, to keep its heartbeat): whatever the slices, it
 * holds the bits of one rng_fill_normal over the whole table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <event2/event.h>
#include <string.h>

#include "server/kinds.h"
#include "server/reduce.h"
#include "shared/rng.h"
#include "devfixture.h"
#include "devspec_of.h"

/* ---- the arithmetic against a plain reimplementation ------------------ */

/* Bag b of (off, bags, nnz): [off[b], end). */
static size_t ref_end(const int64_t *off, size_t bags, size_t nnz, size_t b)
{
    return b + 1 < bags ? (size_t)off[b + 1] : nnz;
}

static void ref_gather(float *out, const float *table, size_t cols, const int64_t *idx, size_t nnz,
                       const int64_t *off, size_t bags)
{
    for (size_t b = 0; b < bags; b++)
        for (size_t c = 0; c < cols; c++) {
            float sum = 0.0f;
            for (size_t i = (size_t)off[b]; i < ref_end(off, bags, nnz, b); i++)
                sum = sum + table[(size_t)idx[i] * cols + c];
            out[b * cols + c] = sum;
        }
}

static void ref_scatter(float *table, size_t cols, const int64_t *idx, size_t nnz, const int64_t *off,
                        size_t bags, const float *grad, float lr)
{
    for (size_t b = 0; b < bags; b++)
        for (size_t i = (size_t)off[b]; i < ref_end(off, bags, nnz, b); i++)
            for (size_t c = 0; c < cols; c++) {
                float step = lr * grad[b * cols + c];
                table[(size_t)idx[i] * cols + c] -= step;
            }
}

/* The dense rule (EmbeddingBag sparse=False, then SGD): a zeroed
 * table-sized gradient, each bag's gradient added to its positions' rows
 * in order, then every element stepped. */
static void ref_dense(float *table, size_t rows, size_t cols, const int64_t *idx, size_t nnz, const int64_t *off,
                      size_t bags, const float *grad, float lr)
{
    float *g = calloc(rows * cols, sizeof *g);
    assert_non_null(g);
    for (size_t b = 0; b < bags; b++)
        for (size_t i = (size_t)off[b]; i < ref_end(off, bags, nnz, b); i++)
            for (size_t c = 0; c < cols; c++)
                g[(size_t)idx[i] * cols + c] = g[(size_t)idx[i] * cols + c] + grad[b * cols + c];
    for (size_t e = 0; e < rows * cols; e++) {
        float step = lr * g[e];
        table[e] = table[e] - step;
    }
    free(g);
}

/* Bags of sizes 0, 1, 5, 0, 1, 12 (some indices repeated, one row named
 * three times in one bag), and an empty bag last. */
static const int64_t t_idx[] = {3, 7, 7, 0, 9, 2, 7, 1, 1, 1, 4, 8, 5, 6, 3, 2, 0, 9, 9};
static const int64_t t_off[] = {0, 0, 1, 6, 6, 7, 19};
#define T_NNZ (sizeof t_idx / sizeof t_idx[0])
#define T_BAGS (sizeof t_off / sizeof t_off[0])
#define T_ROWS 10
#define T_COLS 7

static void fill_table(float *t, size_t n, uint64_t seed)
{
    rng r;
    rng_seed(&r, seed, 42);
    rng_fill_normal(t, n, &r);
}

static void test_gather_matches_reference(void **state)
{
    (void)state;
    float table[T_ROWS * T_COLS], got[T_BAGS * T_COLS], want[T_BAGS * T_COLS];
    fill_table(table, T_ROWS * T_COLS, 1);
    memset(got, 0xff, sizeof got); /* NaNs: every element must be written */
    reduce_gather_sum_f32(got, table, T_COLS, t_idx, T_NNZ, t_off, T_BAGS);
    ref_gather(want, table, T_COLS, t_idx, T_NNZ, t_off, T_BAGS);
    assert_memory_equal(got, want, sizeof got);
    /* Empty bags are zeros; a bag of one row is that row (0 + x). */
    for (size_t c = 0; c < T_COLS; c++) {
        assert_true(got[0 * T_COLS + c] == 0.0f);
        assert_true(got[6 * T_COLS + c] == 0.0f);
        assert_true(got[1 * T_COLS + c] == 0.0f + table[3 * T_COLS + c]);
    }
    /* A row named twice counts twice: bag 2 holds 7, 7, 0, 9, 2. */
    float s = 0.0f;
    s += table[7 * T_COLS];
    s += table[7 * T_COLS];
    s += table[0 * T_COLS];
    s += table[9 * T_COLS];
    s += table[2 * T_COLS];
    assert_true(got[2 * T_COLS] == s);
    /* No bags: nothing written. */
    reduce_gather_sum_f32(NULL, table, T_COLS, t_idx, T_NNZ, NULL, 0);
}

static void test_scatter_matches_reference(void **state)
{
    (void)state;
    float a[T_ROWS * T_COLS], b[T_ROWS * T_COLS], grad[T_BAGS * T_COLS];
    fill_table(a, T_ROWS * T_COLS, 2);
    memcpy(b, a, sizeof a);
    fill_table(grad, T_BAGS * T_COLS, 3);
    reduce_scatter_sgd_f32(a, T_COLS, t_idx, T_NNZ, t_off, T_BAGS, grad, 0.3f);
    ref_scatter(b, T_COLS, t_idx, T_NNZ, t_off, T_BAGS, grad, 0.3f);
    assert_memory_equal(a, b, sizeof a);
    /* Row 1 is named three times in bag 5: three steps of that bag's
     * gradient; row 8 once (bag 5). */
    float c[T_ROWS * T_COLS];
    fill_table(c, T_ROWS * T_COLS, 2);
    for (int k = 0; k < 3; k++) {
        float step = 0.3f * grad[5 * T_COLS];
        c[1 * T_COLS] = c[1 * T_COLS] - step;
    }
    assert_true(a[1 * T_COLS] == c[1 * T_COLS]);
    float step8 = 0.3f * grad[5 * T_COLS + 4];
    assert_true(a[8 * T_COLS + 4] == c[8 * T_COLS + 4] - step8);
}

static void test_dense_matches_reference(void **state)
{
    (void)state;
    float a[T_ROWS * T_COLS], b[T_ROWS * T_COLS], s[T_ROWS * T_COLS], grad[T_BAGS * T_COLS];
    float gsum[T_ROWS * T_COLS];
    fill_table(a, T_ROWS * T_COLS, 2);
    memcpy(b, a, sizeof a);
    memcpy(s, a, sizeof a);
    fill_table(grad, T_BAGS * T_COLS, 3);
    memset(gsum, 0xff, sizeof gsum); /* NaNs: the scratch must be zeroed first */
    reduce_dense_bag_sgd_f32(a, gsum, T_ROWS, T_COLS, t_idx, T_NNZ, t_off, T_BAGS, grad, 0.3f);
    ref_dense(b, T_ROWS, T_COLS, t_idx, T_NNZ, t_off, T_BAGS, grad, 0.3f);
    assert_memory_equal(a, b, sizeof a);
    /* Row 1 is named three times in bag 5: its gradient summed first, one
     * step — which rounds otherwise than three steps (the sparse rule). */
    float g1 = 0.0f;
    for (int k = 0; k < 3; k++)
        g1 = g1 + grad[5 * T_COLS];
    float step = 0.3f * g1;
    assert_true(a[1 * T_COLS] == s[1 * T_COLS] - step);
    reduce_scatter_sgd_f32(s, T_COLS, t_idx, T_NNZ, t_off, T_BAGS, grad, 0.3f);
    assert_memory_not_equal(a, s, sizeof a);
    /* Every row no bag names keeps its bits (t - lr * 0 = t). */
    float init[T_ROWS * T_COLS];
    fill_table(init, T_ROWS * T_COLS, 2);
    int64_t one_idx[] = {6}, one_off[] = {0};
    memcpy(a, init, sizeof a);
    reduce_dense_bag_sgd_f32(a, gsum, T_ROWS, T_COLS, one_idx, 1, one_off, 1, grad, 0.3f);
    for (size_t r = 0; r < T_ROWS; r++)
        if (r == 6)
            assert_memory_not_equal(a + r * T_COLS, init + r * T_COLS, T_COLS * sizeof(float));
        else
            assert_memory_equal(a + r * T_COLS, init + r * T_COLS, T_COLS * sizeof(float));
}

/* ---- the kind, through its ops ---------------------------------------- */

#define K_ROWS 12
#define K_COLS 5

typedef struct fixture {
    dev_fixture d; /* the event loop, pool, device, metrics and kind */
    int done;          /* calls completed */
    int order[64];     /* the update flag of each completed call */
    float rows[K_ROWS * K_COLS]; /* the last lookup's answer */
    uint64_t last_bags, last_cols, last_batch;
    bool dense;        /* mk_call's updates ask for the dense rule */
} fixture;

static void emb_open(fixture *x, const char *dev)
{
    memset(x, 0, sizeof *x);
    setenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US", "300", 1);
    kind_config kc = {.id = KIND_EMBEDDING, .trainers = 1};
    kc.emb = (embedding_config){.num_embeddings = K_ROWS, .embedding_dim = K_COLS, .lr = 0.25f, .seed = 9,
                                .rank = 3};
    devfx_open_kind(&x->d, devspec_of(dev), 1 << 20, &kc);
    /* start only seeds the fill: the table is filled by kind_fill. */
    assert_false(kind_ready(x->d.k));
    assert_int_equal(x->d.k->fill_total, K_ROWS * K_COLS * sizeof(float));
    assert_int_equal(kind_fill(x->d.k, UINT64_MAX), 0);
    assert_true(kind_ready(x->d.k));
}

static void emb_close(fixture *x)
{
    device_drain(x->d.dev);
    devfx_close(&x->d);
}

static void record_call(kind_call *c)
{
    fixture *x = c->owner;
    assert_true(x->done < 64);
    x->order[x->done++] = c->update;
    if (!c->update) {
        x->last_bags = c->bags;
        x->last_cols = c->cols;
        x->last_batch = c->batch;
        assert_int_equal(c->answer ? c->answer->len : 0, c->bags * c->cols * 4);
        if (c->answer)
            memcpy(x->rows, c->answer->data, c->answer->len);
    }
    if (c->payload)
        psbuf_unref(c->payload);
    if (c->answer)
        psbuf_unref(c->answer);
    free(c);
}

/* A call as the transport builds it; payload_len (SIZE_MAX: the right one)
 * lets a test lie about the size. */
static kind_call *mk_call(fixture *x, bool update, uint64_t batch, const int64_t *idx, size_t nnz,
                          const int64_t *off, size_t bags, const float *grad, size_t cols, size_t payload_len)
{
    kind_call *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->update = update;
    c->dense = update && x->dense;
    c->batch = batch;
    c->nnz = nnz;
    c->bags = bags;
    c->cols = update ? cols : 0;
    size_t len = 8 * (nnz + bags) + (update ? 4 * bags * cols : 0);
    if (payload_len != SIZE_MAX)
        len = payload_len;
    if (len) {
        c->payload = bufpool_get(&x->d.pool, len);
        assert_non_null(c->payload);
        memset(c->payload->data, 0, len);
        /* Whatever fits of indices, offsets and gradients (memcpy takes
         * no NULL source, even for 0 bytes). */
        size_t at = 0;
        if (nnz && 8 * nnz <= len - at)
            memcpy(c->payload->data + at, idx, 8 * nnz);
        at += 8 * nnz <= len ? 8 * nnz : len;
        if (bags && 8 * bags <= len - at)
            memcpy(c->payload->data + at, off, 8 * bags);
        at += 8 * bags <= len - at ? 8 * bags : len - at;
        if (update && bags && 4 * bags * cols <= len - at)
            memcpy(c->payload->data + at, grad, 4 * bags * cols);
    }
    c->done = record_call;
    c->owner = x;
    return c;
}

static frame_errcode call(fixture *x, kind_call *c)
{
    char msg[256];
    frame_errcode code = c->update ? x->d.k->ops->update(x->d.k, c, msg, sizeof msg)
                                   : x->d.k->ops->lookup(x->d.k, c, msg, sizeof msg);
    if (code != ERR_NONE) {
        assert_true(msg[0] != '\0');
        if (c->payload)
            psbuf_unref(c->payload);
        assert_null(c->answer);
        free(c);
    }
    return code;
}

/* The whole table, read back with one single-row bag per row. */
static void read_table(fixture *x, float *out)
{
    int64_t idx[K_ROWS], off[K_ROWS];
    for (int i = 0; i < K_ROWS; i++)
        idx[i] = off[i] = i;
    device_drain(x->d.dev); /* earlier calls complete first */
    int before = x->done;
    assert_int_equal(call(x, mk_call(x, false, 77, idx, K_ROWS, off, K_ROWS, NULL, 0, SIZE_MAX)), ERR_NONE);
    device_drain(x->d.dev);
    assert_int_equal(x->done, before + 1);
    assert_int_equal(x->last_bags, K_ROWS);
    assert_int_equal(x->last_cols, K_COLS);
    assert_int_equal(x->last_batch, 77);
    /* A one-row bag is 0.0f + the row: the row itself, except -0.0 → +0.0
     * (the table is normal draws: no zeros). */
    memcpy(out, x->rows, sizeof x->rows);
}

static void initial_table(float *t)
{
    rng r;
    rng_seed(&r, 9, RNG_STREAM_EMBEDDING + 3);
    rng_fill_normal(t, K_ROWS * K_COLS, &r);
}

static void run_lookup_update(const char *dev)
{
    fixture x;
    emb_open(&x, dev);
    float t[K_ROWS * K_COLS], want[K_ROWS * K_COLS];
    initial_table(want);
    read_table(&x, t);
    assert_memory_equal(t, want, sizeof t);

    /* A lookup: bags of 0, 1, 3 (a repeat) and 0 rows. */
    int64_t idx[] = {4, 11, 2, 11}, off[] = {0, 0, 1, 4};
    assert_int_equal(call(&x, mk_call(&x, false, 5, idx, 4, off, 4, NULL, 0, SIZE_MAX)), ERR_NONE);
    device_drain(x.d.dev);
    float exp[4 * K_COLS];
    ref_gather(exp, want, K_COLS, idx, 4, off, 4);
    assert_int_equal(x.last_bags, 4);
    assert_int_equal(x.last_batch, 5);
    assert_memory_equal(x.rows, exp, sizeof exp);

    /* Updates, then a lookup, without waiting in between: the lookup sees
     * both updates (the device runs them in order). */
    float g1[4 * K_COLS], g2[1 * K_COLS];
    for (int i = 0; i < 4 * K_COLS; i++)
        g1[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K_COLS; i++)
        g2[i] = 0.5f * (float)i;
    int64_t idx2[] = {11}, off2[] = {0};
    int before = x.done;
    assert_int_equal(call(&x, mk_call(&x, true, 6, idx, 4, off, 4, g1, K_COLS, SIZE_MAX)), ERR_NONE);
    assert_int_equal(call(&x, mk_call(&x, true, 7, idx2, 1, off2, 1, g2, K_COLS, SIZE_MAX)), ERR_NONE);
    int64_t all[K_ROWS], alloff[K_ROWS];
    for (int i = 0; i < K_ROWS; i++)
        all[i] = alloff[i] = i;
    assert_int_equal(call(&x, mk_call(&x, false, 8, all, K_ROWS, alloff, K_ROWS, NULL, 0, SIZE_MAX)), ERR_NONE);
    device_drain(x.d.dev);
    assert_int_equal(x.done, before + 3);
    assert_int_equal(x.order[before], 1);
    assert_int_equal(x.order[before + 1], 1);
    assert_int_equal(x.order[before + 2], 0);
    ref_scatter(want, K_COLS, idx, 4, off, 4, g1, 0.25f);
    ref_scatter(want, K_COLS, idx2, 1, off2, 1, g2, 0.25f);
    assert_memory_equal(x.rows, want, sizeof want);
    /* Rows nobody named are unchanged; row 11 moved three times. */
    float init[K_ROWS * K_COLS];
    initial_table(init);
    assert_memory_equal(x.rows, init, 2 * K_COLS * sizeof(float));
    assert_true(x.rows[11 * K_COLS + 1] != init[11 * K_COLS + 1]);
    /* Index positions of updates: 4 + 1. */
    assert_int_equal(x.d.k->rows_touched, 5);
    assert_int_equal(x.d.k->m_update->count, 2);

    /* Empty calls: no bags (an empty answer), and bags that are all
     * empty (no indices). */
    assert_int_equal(call(&x, mk_call(&x, false, 9, NULL, 0, NULL, 0, NULL, 0, SIZE_MAX)), ERR_NONE);
    device_drain(x.d.dev);
    assert_int_equal(x.last_bags, 0);
    int64_t zeros[] = {0, 0};
    assert_int_equal(call(&x, mk_call(&x, false, 10, NULL, 0, zeros, 2, NULL, 0, SIZE_MAX)), ERR_NONE);
    device_drain(x.d.dev);
    assert_int_equal(x.last_bags, 2);
    for (int i = 0; i < 2 * K_COLS; i++)
        assert_true(x.rows[i] == 0.0f);
    float gz[2 * K_COLS] = {1};
    assert_int_equal(call(&x, mk_call(&x, true, 11, NULL, 0, zeros, 2, gz, K_COLS, SIZE_MAX)), ERR_NONE);
    device_drain(x.d.dev);
    read_table(&x, t);
    assert_memory_equal(t, want, sizeof t);

    /* Reset: the table from the seed again, filled in the smallest slices. */
    x.d.k->ops->reset(x.d.k);
    assert_false(kind_ready(x.d.k));
    while (kind_fill(x.d.k, 1) > 0)
        ;
    read_table(&x, t);
    assert_memory_equal(t, init, sizeof t);
    emb_close(&x);
}

static void test_lookup_update_cpu(void **state)
{
    (void)state;
    run_lookup_update("cpu");
}

static void test_lookup_update_test_device(void **state)
{
    (void)state;
    run_lookup_update("test");
}

/* Every refused call: the right code, nothing changed, no done. */
static void run_refusals(const char *dev)
{
    fixture x;
    emb_open(&x, dev);
    float before[K_ROWS * K_COLS], after[K_ROWS * K_COLS];
    /* Change the table first, so "unchanged" is not just "initial". */
    int64_t i0[] = {1, 2}, o0[] = {0};
    float g0[K_COLS] = {1, 2, 3, 4, 5};
    assert_int_equal(call(&x, mk_call(&x, true, 0, i0, 2, o0, 1, g0, K_COLS, SIZE_MAX)), ERR_NONE);
    read_table(&x, before);
    int done0 = x.done;
    float g[3 * K_COLS];
    for (int i = 0; i < 3 * K_COLS; i++)
        g[i] = 100.0f + (float)i;
    struct {
        const char *what;
        int64_t idx[4];
        size_t nnz;
        int64_t off[3];
        size_t bags;
        size_t cols;        /* for updates */
        ptrdiff_t len_diff; /* payload bytes more than the header says */
        frame_errcode code;
    } bad[] = {
        /* The last index is bad: nothing before it may have been applied. */
        {"index == num_embeddings", {0, 1, 2, K_ROWS}, 4, {0, 1, 2}, 3, K_COLS, 0, ERR_BAD_INDEX},
        {"negative index", {0, -1, 2, 3}, 4, {0, 1, 2}, 3, K_COLS, 0, ERR_BAD_INDEX},
        {"huge index", {0, 1, INT64_MAX, 3}, 4, {0, 1, 2}, 3, K_COLS, 0, ERR_BAD_INDEX},
        {"offsets[0] != 0", {0, 1, 2, 3}, 4, {1, 2, 3}, 3, K_COLS, 0, ERR_BAD_INDEX},
        {"decreasing offsets", {0, 1, 2, 3}, 4, {0, 3, 2}, 3, K_COLS, 0, ERR_BAD_INDEX},
        {"offset past nnz", {0, 1, 2, 3}, 4, {0, 1, 5}, 3, K_COLS, 0, ERR_BAD_INDEX},
        {"negative offset", {0, 1, 2, 3}, 4, {0, -1, 2}, 3, K_COLS, 0, ERR_BAD_INDEX},
        {"nnz > 0 with offsets past it", {0}, 1, {0, 2}, 2, K_COLS, 0, ERR_BAD_INDEX},
        {"payload too short", {0, 1, 2, 3}, 4, {0, 1, 2}, 3, K_COLS, -8, ERR_SHAPE_MISMATCH},
        {"payload too long", {0, 1, 2, 3}, 4, {0, 1, 2}, 3, K_COLS, 4, ERR_SHAPE_MISMATCH},
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        for (int upd = 0; upd < 2; upd++) {
            size_t right = 8 * (bad[t].nnz + bad[t].bags) + (upd ? 4 * bad[t].bags * K_COLS : 0);
            kind_call *c = mk_call(&x, upd, 40 + t, bad[t].idx, bad[t].nnz, bad[t].off, bad[t].bags, g, K_COLS,
                                   (size_t)((ptrdiff_t)right + bad[t].len_diff));
            frame_errcode code = call(&x, c);
            if (code != bad[t].code)
                fail_msg("%s (%s): code %d, want %d", bad[t].what, upd ? "update" : "lookup", code, bad[t].code);
        }
    }
    /* cols other than embedding_dim (the payload sized for those cols). */
    int64_t i1[] = {0}, o1[] = {0};
    assert_int_equal(call(&x, mk_call(&x, true, 60, i1, 1, o1, 1, g, K_COLS - 1, SIZE_MAX)), ERR_SHAPE_MISMATCH);
    assert_int_equal(call(&x, mk_call(&x, true, 61, i1, 1, o1, 1, g, K_COLS + 1, SIZE_MAX)), ERR_SHAPE_MISMATCH);
    device_drain(x.d.dev);
    assert_int_equal(x.done, done0); /* no refused call completed */
    read_table(&x, after);
    assert_memory_equal(after, before, sizeof after);
    assert_int_equal(x.d.k->rows_touched, 2);
    emb_close(&x);
}

/* Dense updates (the seed's pattern) on a device, against ref_dense: in
 * order with lookups, refused as sparse ones are, the gradient's scratch
 * made at the first and reused. */
static void run_dense(const char *dev)
{
    fixture x;
    emb_open(&x, dev);
    x.dense = true;
    float want[K_ROWS * K_COLS], t[K_ROWS * K_COLS];
    initial_table(want);
    int64_t idx[] = {4, 11, 2, 11, 11}, off[] = {0, 0, 1, 4};
    float g1[4 * K_COLS], g2[1 * K_COLS];
    for (int i = 0; i < 4 * K_COLS; i++)
        g1[i] = 0.37f * (float)(i % 7) - 1.1f;
    for (int i = 0; i < K_COLS; i++)
        g2[i] = 0.5f * (float)i + 0.01f;
    int64_t idx2[] = {11}, off2[] = {0};
    /* Two updates and a lookup without waiting: the lookup sees both. */
    assert_int_equal(call(&x, mk_call(&x, true, 1, idx, 5, off, 4, g1, K_COLS, SIZE_MAX)), ERR_NONE);
    assert_int_equal(call(&x, mk_call(&x, true, 2, idx2, 1, off2, 1, g2, K_COLS, SIZE_MAX)), ERR_NONE);
    int64_t bad[] = {K_ROWS}, boff[] = {0};
    assert_int_equal(call(&x, mk_call(&x, true, 3, bad, 1, boff, 1, g2, K_COLS, SIZE_MAX)), ERR_BAD_INDEX);
    read_table(&x, t);
    ref_dense(want, K_ROWS, K_COLS, idx, 5, off, 4, g1, 0.25f);
    ref_dense(want, K_ROWS, K_COLS, idx2, 1, off2, 1, g2, 0.25f);
    assert_memory_equal(t, want, sizeof t);
    assert_int_equal(x.d.k->rows_touched, 6);
    /* No bags at all: a zero gradient, the table unchanged. */
    assert_int_equal(call(&x, mk_call(&x, true, 4, NULL, 0, NULL, 0, NULL, K_COLS, SIZE_MAX)), ERR_NONE);
    read_table(&x, t);
    assert_memory_equal(t, want, sizeof t);
    emb_close(&x);
}

static void test_dense_cpu(void **state)
{
    (void)state;
    run_dense("cpu");
}

static void test_dense_test_device(void **state)
{
    (void)state;
    run_dense("test");
}

/* The cuda device's kernels on the fake GPU: the cpu's bits. */
static void test_dense_fake_cuda(void **state)
{
    (void)state;
    run_dense("fake-cuda");
}

static void test_refusals_cpu(void **state)
{
    (void)state;
    run_refusals("cpu");
}

static void test_refusals_test_device(void **state)
{
    (void)state;
    run_refusals("test");
}

/* ---- the table's fill, a slice at a time ------------------------------- */

static float *slice_rows; /* where the read-back lookup's answer goes */

static void slice_done(kind_call *c)
{
    memcpy(slice_rows, c->answer->data, c->answer->len);
    psbuf_unref(c->answer);
    c->answer = NULL;
}

/* A rows x cols table filled in slices of `budget` bytes (as often as it
 * takes) equals one rng_fill_normal over the whole table, bit for bit, and
 * so does the table after a reset filled in slices of `budget2` — on the
 * cpu device (the fill writes the table in place) and on the test device
 * (through staging areas of random lengths). */
static void check_fill_on(const char *devname, uint64_t rows, uint64_t cols, uint64_t budget, uint64_t budget2)
{
    struct event_base *base = event_base_new();
    char err[256];
    bufpool pool;
    bufpool_init(&pool, 1 << 24);
    device *dev = device_new(devspec_of(devname), base, &pool, err, sizeof err);
    assert_non_null(dev);
    metrics *m = metrics_new();
    kind_config kc = {.id = KIND_EMBEDDING, .trainers = 1};
    kc.emb = (embedding_config){.num_embeddings = rows, .embedding_dim = cols, .lr = 0.05f, .seed = 42, .rank = 5};
    kind *k = kind_new(&kc, dev, &pool, m, err, sizeof err);
    assert_non_null(k);
    uint64_t n = rows * cols;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    rng r;
    rng_seed(&r, 42, RNG_STREAM_EMBEDDING + 5);
    rng_fill_normal(want, n, &r);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            k->ops->reset(k);
        assert_false(kind_ready(k));
        assert_int_equal(k->fill_total, n * sizeof(float));
        assert_int_equal(k->fill_left, n * sizeof(float));
        uint64_t left = k->fill_left, slices = 0, b = pass ? budget2 : budget;
        while (left > 0) {
            uint64_t now = kind_fill(k, b);
            assert_true(now < left); /* every slice moves */
            left = now;
            slices++;
        }
        assert_true(kind_ready(k));
        /* Slices of whole blocks (256 floats) unless the budget is larger. */
        uint64_t per = b / 4 < 256 ? 256 : b / 4 - (b / 4) % 256;
        assert_int_equal(slices, per >= n ? 1 : (n + per - 1) / per);
        /* Read it back: every row a bag of its own. */
        psbuf *payload = bufpool_get(&pool, 16 * rows);
        assert_non_null(payload);
        int64_t *q = (int64_t *)(void *)payload->data;
        for (uint64_t i = 0; i < rows; i++)
            q[i] = q[rows + i] = (int64_t)i;
        kind_call c = {.update = false, .batch = 1, .nnz = rows, .bags = rows, .payload = payload, .done = slice_done};
        slice_rows = got;
        char msg[128];
        assert_int_equal(k->ops->lookup(k, &c, msg, sizeof msg), ERR_NONE);
        device_drain(dev);
        psbuf_unref(payload);
        assert_memory_equal(got, want, n * sizeof *got);
    }
    free(want);
    free(got);
    kind_free(k);
    device_destroy(dev);
    bufpool_destroy(&pool);
    metrics_free(m);
    event_base_free(base);
}

static void check_fill_in_slices(uint64_t rows, uint64_t cols, uint64_t budget, uint64_t budget2)
{
    check_fill_on("cpu", rows, cols, budget, budget2);
    check_fill_on("test", rows, cols, budget, budget2);
}

static void test_fill_in_slices(void **state)
{
    (void)state;
    check_fill_in_slices(7, 143, 1, 4096);             /* 1001 floats: odd, a last half pair */
    check_fill_in_slices(1, 1, 1, UINT64_MAX);          /* one float */
    check_fill_in_slices(3, 256, 1024, 1000);           /* whole blocks; a budget off the blocks */
    check_fill_in_slices(1000, 257, 4 * 4096 + 4, 12345); /* 257,000 floats in slices of 4096 */
    check_fill_in_slices(1000, 257, UINT64_MAX, 4);     /* one slice; then blocks of 256 */
}

static void test_config_limits(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    char err[256];
    bufpool pool;
    bufpool_init(&pool, 1 << 20);
    device *dev = device_new((device_spec){.kind = DEVICE_CPU}, base, &pool, err, sizeof err);
    metrics *m = metrics_new();
    kind_config kc = {.id = KIND_EMBEDDING, .trainers = 1};
    uint64_t shapes[][2] = {{0, 4}, {4, 0}, {1ull << 16, (1ull << 15) + 1}, {1ull << 31, 2}, {UINT64_MAX, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        kc.emb = (embedding_config){.num_embeddings = shapes[i][0], .embedding_dim = shapes[i][1], .lr = 0.05f};
        err[0] = '\0';
        assert_null(kind_new(&kc, dev, &pool, m, err, sizeof err));
        assert_non_null(strstr(err, "2^31"));
        assert_null(strchr(err, '\n'));
    }
    kc.emb = (embedding_config){.num_embeddings = 3, .embedding_dim = 2, .lr = -1.0f};
    assert_null(kind_new(&kc, dev, &pool, m, err, sizeof err));
    /* The seed's shape. */
    kc.emb = (embedding_config){.num_embeddings = 300, .embedding_dim = 64, .lr = 0.05f};
    kind *k = kind_new(&kc, dev, &pool, m, err, sizeof err);
    assert_non_null(k);
    assert_string_equal(kind_name(KIND_EMBEDDING), "embedding");
    kind_id id;
    assert_int_equal(kind_parse("embedding", &id), 0);
    assert_int_equal(id, KIND_EMBEDDING);
    /* No push, no fetch. */
    frame_hdr h = {0};
    uint64_t batch;
    char msg[128];
    assert_int_equal(k->ops->admit(k, &h, &batch, msg, sizeof msg), ERR_UNSUPPORTED);
    assert_null(k->ops->fetch);
    kind_free(k);
    device_destroy(dev);
    bufpool_destroy(&pool);
    metrics_free(m);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_matches_reference),
        cmocka_unit_test(test_scatter_matches_reference),
        cmocka_unit_test(test_dense_matches_reference),
        cmocka_unit_test(test_dense_cpu),
        cmocka_unit_test(test_dense_test_device),
        cmocka_unit_test(test_dense_fake_cuda),
        cmocka_unit_test(test_lookup_update_cpu),
        cmocka_unit_test(test_lookup_update_test_device),
        cmocka_unit_test(test_refusals_cpu),
        cmocka_unit_test(test_refusals_test_device),
        cmocka_unit_test(test_config_limits),
        cmocka_unit_test(test_fill_in_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
