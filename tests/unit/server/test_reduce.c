/* test_reduce.c — unit tests for server/reduce: dense f32 accumulation from
 * unaligned little-endian bytes, scaling, the 1/N mean factor, and the
 * sparse accumulator (coalescing duplicate rows within and across pushes,
 * ascending unique emission, empty pushes, index validation that inserts
 * nothing, values arriving in uneven chunks that cross row boundaries,
 * reset to a new shape, and growth to many distinct rows).
 *
 * Expected values come from a straightforward scalar reference computed in
 * the test (or by hand); test values are small integers or dyadic fractions
 * so that float sums are exact regardless of summation order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "server/reduce.h"
#include "shared/mean.h"
#include "fixture.h"

/* ---- helpers ------------------------------------------------------------ */

static void put_f32(uint8_t *p, float f)
{
    memcpy(p, &f, 4); /* the test host is little-endian, like the wire */
}

static float get_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static int64_t get_i64(const uint8_t *p)
{
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void assert_float_eq(float got, float want)
{
    if (memcmp(&got, &want, sizeof got) != 0 && !(got == want)) {
        print_error("got %.9g, want %.9g\n", (double)got, (double)want);
        fail();
    }
}

/* A sparse push: nnz int64 indices then nnz*cols float32, as raw bytes. */
typedef struct push {
    uint8_t *idx;  /* nnz * 8 bytes */
    uint8_t *vals; /* nnz * cols * 4 bytes */
    uint64_t nnz, cols;
} push;

static push make_push(const int64_t *rows, uint64_t nnz, uint64_t cols, float (*val)(uint64_t, uint64_t, uint64_t))
{
    push p = {malloc(nnz * 8 + 1), malloc(nnz * cols * 4 + 1), nnz, cols};
    assert_non_null(p.idx);
    assert_non_null(p.vals);
    for (uint64_t i = 0; i < nnz; i++) {
        memcpy(p.idx + 8 * i, &rows[i], 8);
        for (uint64_t c = 0; c < cols; c++)
            put_f32(p.vals + 4 * (i * cols + c), val(i, (uint64_t)rows[i], c));
    }
    return p;
}

static void free_push(push *p)
{
    free(p->idx);
    free(p->vals);
}

/* Map the push's indices and add all of its values in one chunk. */
static void acc_push(sparse_acc *a, const push *p)
{
    uint32_t *slots = malloc((p->nnz ? p->nnz : 1) * sizeof *slots);
    assert_non_null(slots);
    int64_t bad = 12345;
    assert_int_equal(sparse_acc_map(a, p->idx, p->nnz, slots, &bad), 0);
    assert_int_equal(bad, 12345);
    sparse_acc_add(a, slots, 0, p->vals, p->nnz * p->cols);
    free(slots);
}

/* Emit and check: indices ascending and unique, equal to want_rows, and
 * values equal to want[r * cols + c] * scale. */
static void check_emit(const sparse_acc *a, float scale, const int64_t *want_rows, size_t nrows,
                       const float *want_vals)
{
    uint64_t cols = a->cols;
    assert_int_equal(sparse_acc_result_size(a), nrows * (8 + 4 * cols));
    size_t sz = (size_t)sparse_acc_result_size(a);
    uint8_t *out = malloc(sz + 1);
    assert_non_null(out);
    assert_int_equal(sparse_acc_emit(a, scale, out), 0);
    for (size_t i = 0; i < nrows; i++) {
        int64_t r = get_i64(out + 8 * i);
        if (r != want_rows[i]) {
            print_error("row %zu: index %lld, want %lld\n", i, (long long)r,
                        (long long)want_rows[i]);
            fail();
        }
        if (i > 0)
            assert_true(get_i64(out + 8 * (i - 1)) < r);
        for (uint64_t c = 0; c < cols; c++) {
            float got = get_f32(out + 8 * nrows + 4 * (i * cols + c));
            assert_float_eq(got, want_vals[i * cols + c] * scale);
        }
    }
    free(out);
}

/* ---- dense ------------------------------------------------------------- */

static void test_add_unaligned(void **state)
{
    enum { N = 1027 }; /* odd: exercises any vector tail */
    uint8_t *raw = malloc(4 * N + 8);
    float *acc = malloc(N * sizeof *acc);
    float *ref = malloc(N * sizeof *ref);
    assert_non_null(raw);
    assert_non_null(acc);
    assert_non_null(ref);
    for (int shift = 1; shift <= 3; shift++) {
        uint8_t *src = raw + shift; /* never 4-byte aligned */
        for (int i = 0; i < N; i++) {
            float v = (float)((i * 37) % 101 - 50) * 0.25f;
            put_f32(src + 4 * i, v);
            acc[i] = (float)i * 0.5f;
            ref[i] = acc[i] + v;
        }
        reduce_add_f32(acc, src, N);
        for (int i = 0; i < N; i++)
            assert_float_eq(acc[i], ref[i]);
        /* A second add accumulates. */
        reduce_add_f32(acc, src, N);
        for (int i = 0; i < N; i++)
            assert_float_eq(acc[i], ref[i] + get_f32(src + 4 * i));
    }
    /* n = 0 touches nothing. */
    acc[0] = 7.0f;
    reduce_add_f32(acc, raw + 1, 0);
    assert_float_eq(acc[0], 7.0f);
    free(raw);
    free(acc);
    free(ref);
}

/* The portable and the AVX2 loops (where the CPU has AVX2) give the same
 * bits as plain float arithmetic, for every alignment of src and every
 * length around the vector widths. */
static void test_dense_loops_each_width(void **state)
{
    enum { N = 1000 };
    uint8_t *raw = malloc(4 * N + 8);
    float *acc = malloc(N * sizeof *acc);
    float *want = malloc(N * sizeof *want);
    assert_non_null(raw);
    assert_non_null(acc);
    assert_non_null(want);
    const float s = mean_scale(3);
    for (int wide = 0; wide <= 1; wide++) {
        bool on = reduce_use_wide(wide);
        if (wide == 0)
            assert_false(on);
        for (int shift = 0; shift <= 3; shift++) {
            uint8_t *src = raw + shift;
            for (size_t t = 0; t <= 45; t++) {
                /* 0..40 (every vector tail), a few more, and a long one */
                static const size_t more[] = {63, 64, 65, 255, N};
                size_t len = t <= 40 ? t : more[t - 41];
                for (size_t i = 0; i < len; i++)
                    put_f32(src + 4 * i, (float)((i * 7919) % 2003) * 0.01f - 9.99f);
                for (int op = 0; op < 3; op++) {
                    for (size_t i = 0; i < len; i++) {
                        acc[i] = (float)((i * 104729) % 997) * 0.37f;
                        volatile float x = get_f32(src + 4 * i), a = acc[i];
                        want[i] = op == 0 ? a + x : op == 1 ? (a + x) * s : x * s;
                    }
                    if (len < N)
                        acc[len] = want[len] = -1.0f; /* past the end: untouched */
                    if (op == 0)
                        reduce_add_f32(acc, src, len);
                    else if (op == 1)
                        reduce_add_scale_f32(acc, src, len, s);
                    else
                        reduce_copy_scale_f32(acc, src, len, s);
                    size_t check = len < N ? len + 1 : len;
                    if (memcmp(acc, want, check * sizeof *acc) != 0) {
                        print_error("wide %d shift %d n %zu op %d differs\n", wide, shift, len, op);
                        fail();
                    }
                }
            }
        }
    }
    reduce_use_wide(-1);
    free(raw);
    free(acc);
    free(want);
}

static void test_copy_unaligned(void **state)
{
    enum { N = 33 };
    uint8_t raw[4 * N + 4];
    float acc[N];
    for (int i = 0; i < N; i++)
        put_f32(raw + 3 + 4 * i, (float)i - 16.5f);
    for (int i = 0; i < N; i++)
        acc[i] = 1000.0f;
    reduce_copy_f32(acc, raw + 3, N);
    for (int i = 0; i < N; i++)
        assert_float_eq(acc[i], (float)i - 16.5f);
}

static void test_scale(void **state)
{
    float a[9] = {0.0f, 1.0f, -2.0f, 3.5f, 1e30f, -1e-30f, 8.0f, 12.0f, 0.75f};
    float ref[9];
    for (int i = 0; i < 9; i++)
        ref[i] = a[i] * 0.25f;
    reduce_scale_f32(a, 9, 0.25f);
    for (int i = 0; i < 9; i++)
        assert_float_eq(a[i], ref[i]);
    /* n limits the range. */
    float b[3] = {2.0f, 2.0f, 2.0f};
    reduce_scale_f32(b, 2, 3.0f);
    assert_float_eq(b[0], 6.0f);
    assert_float_eq(b[1], 6.0f);
    assert_float_eq(b[2], 2.0f);
}

static void test_mean_scale(void **state)
{
    assert_float_eq(mean_scale(1), 1.0f);
    assert_float_eq(mean_scale(2), 0.5f);
    assert_float_eq(mean_scale(4), 0.25f);
    volatile float three = 3.0f; /* computed at run time, in float */
    float want = 1.0f / three;
    assert_float_eq(mean_scale(3), want);
    /* The reciprocal, rounded to float — not a double 1/3. */
    assert_true(mean_scale(3) == 1.0f / 3.0f);
    assert_true((double)mean_scale(3) != 1.0 / 3.0);
}

/* ---- sparse ------------------------------------------------------------ */

static float val_a(uint64_t i, uint64_t row, uint64_t c)
{
    return (float)(i + 1) + (float)c * 0.5f; /* depends on the position in the push */
}

static void test_sparse_duplicates_coalesce(void **state)
{
    sparse_acc a;
    sparse_acc_init(&a);
    sparse_acc_reset(&a, 100, 3);
    /* Rows out of order with duplicates: 42 three times, 7 twice. */
    const int64_t rows[] = {42, 7, 99, 42, 0, 7, 42};
    push p = make_push(rows, 7, 3, val_a);
    acc_push(&a, &p);
    assert_int_equal(a.nslots, 4);

    /* Reference: sum of val_a over positions of each row. */
    const int64_t want_rows[] = {0, 7, 42, 99};
    float want[4 * 3];
    memset(want, 0, sizeof want);
    for (uint64_t i = 0; i < 7; i++) {
        int k = rows[i] == 0 ? 0 : rows[i] == 7 ? 1 : rows[i] == 42 ? 2 : 3;
        for (uint64_t c = 0; c < 3; c++)
            want[k * 3 + c] += val_a(i, (uint64_t)rows[i], c);
    }
    /* Spot check the reference by hand: row 42 at positions 0, 3, 6 -> 1+4+7 at col 0. */
    assert_float_eq(want[2 * 3 + 0], 12.0f);
    assert_float_eq(want[1 * 3 + 2], 2.0f + 1.0f + 6.0f + 1.0f); /* row 7, col 2: (2+1)+(6+1) */

    check_emit(&a, 1.0f, want_rows, 4, want);
    check_emit(&a, 0.5f, want_rows, 4, want);
    check_emit(&a, mean_scale(3), want_rows, 4, want);
    free_push(&p);
    sparse_acc_free(&a);
}

static float val_one(uint64_t i, uint64_t row, uint64_t c) { return 1.0f; }
static float val_row(uint64_t i, uint64_t row, uint64_t c) { return (float)row * 2.0f + (float)c; }

static void test_sparse_two_pushes(void **state)
{
    sparse_acc a;
    sparse_acc_init(&a);
    sparse_acc_reset(&a, 1000, 2);
    const int64_t r1[] = {5, 900, 17};
    const int64_t r2[] = {17, 3, 5, 999};
    push p1 = make_push(r1, 3, 2, val_one);
    push p2 = make_push(r2, 4, 2, val_row);
    acc_push(&a, &p1);
    acc_push(&a, &p2);
    assert_int_equal(a.nslots, 5);

    const int64_t want_rows[] = {3, 5, 17, 900, 999};
    const float want[] = {
        6.0f,    7.0f,    /* 3: only push 2 */
        11.0f,   12.0f,   /* 5: 1 + 10, 1 + 11 */
        35.0f,   36.0f,   /* 17: 1 + 34, 1 + 35 */
        1.0f,    1.0f,    /* 900: only push 1 */
        1998.0f, 1999.0f, /* 999: only push 2 */
    };
    check_emit(&a, 1.0f, want_rows, 5, want);
    check_emit(&a, mean_scale(2), want_rows, 5, want);
    free_push(&p1);
    free_push(&p2);
    sparse_acc_free(&a);
}

static void test_sparse_empty_push(void **state)
{
    sparse_acc a;
    sparse_acc_init(&a);
    sparse_acc_reset(&a, 10, 4);
    uint32_t slot;
    int64_t bad = -7;
    uint8_t dummy = 0;
    assert_int_equal(sparse_acc_map(&a, &dummy, 0, &slot, &bad), 0);
    assert_int_equal(bad, -7);
    sparse_acc_add(&a, &slot, 0, &dummy, 0);
    assert_int_equal(a.nslots, 0);
    assert_int_equal(sparse_acc_result_size(&a), 0);
    uint8_t out[1] = {0xee};
    assert_int_equal(sparse_acc_emit(&a, 0.5f, out), 0);
    assert_int_equal(out[0], 0xee); /* nothing written */
    sparse_acc_free(&a);

    /* Same on a freshly initialised accumulator never given a shape
     * beyond reset (no tables allocated yet), via emit into a heap buffer
     * of size 0 (+1 so malloc returns something). */
    sparse_acc_init(&a);
    sparse_acc_reset(&a, 0, 1);
    assert_int_equal(sparse_acc_result_size(&a), 0);
    uint8_t *o = malloc(1);
    assert_non_null(o);
    assert_int_equal(sparse_acc_emit(&a, 1.0f, o), 0);
    free(o);
    sparse_acc_free(&a);
}

static void test_sparse_bad_index(void **state)
{
    sparse_acc a;
    sparse_acc_init(&a);
    sparse_acc_reset(&a, 50, 2);
    const int64_t good[] = {1, 2};
    push pg = make_push(good, 2, 2, val_one);
    acc_push(&a, &pg);
    assert_int_equal(a.nslots, 2);

    static const int64_t bads[] = {50, -1, 51, INT64_MIN, INT64_MAX};
    for (size_t k = 0; k < sizeof bads / sizeof bads[0]; k++) {
        /* New valid rows before and after the bad one: none get inserted. */
        const int64_t rows[] = {10, 11, bads[k], 12};
        push p = make_push(rows, 4, 2, val_one);
        uint32_t slots[4];
        int64_t bad = 0;
        assert_int_equal(sparse_acc_map(&a, p.idx, 4, slots, &bad), -1);
        assert_int_equal(bad, bads[k]);
        assert_int_equal(a.nslots, 2);
        assert_int_equal(sparse_indices_check(p.idx, 4, 50, &bad), -1);
        assert_int_equal(bad, bads[k]);
        free_push(&p);
    }
    /* Row 49 is the last valid one. */
    const int64_t last[] = {49};
    push pl = make_push(last, 1, 2, val_one);
    acc_push(&a, &pl);
    assert_int_equal(a.nslots, 3);

    /* The result holds only the valid pushes. */
    const int64_t want_rows[] = {1, 2, 49};
    const float want[] = {1, 1, 1, 1, 1, 1};
    check_emit(&a, 1.0f, want_rows, 3, want);
    free_push(&pg);
    free_push(&pl);
    sparse_acc_free(&a);
}

static void test_sparse_indices_check(void **state)
{
    uint8_t idx[8 * 5];
    const int64_t ok[] = {0, 4, 2, 2, 1};
    memcpy(idx, ok, sizeof ok);
    int64_t bad = 99;
    assert_int_equal(sparse_indices_check(idx, 5, 5, &bad), 0);
    assert_int_equal(bad, 99);
    assert_int_equal(sparse_indices_check(idx, 5, 4, &bad), -1); /* 4 >= rows */
    assert_int_equal(bad, 4);
    assert_int_equal(sparse_indices_check(idx, 0, 0, &bad), 0);  /* nothing to check */
    bad = 99;
    assert_int_equal(sparse_indices_check(idx, 1, 0, &bad), -1); /* rows = 0: no row is valid */
    assert_int_equal(bad, 0);
    /* The first bad index is reported. */
    const int64_t two_bad[] = {1, -3, 7};
    memcpy(idx, two_bad, sizeof two_bad);
    assert_int_equal(sparse_indices_check(idx, 3, 5, &bad), -1);
    assert_int_equal(bad, -3);
    /* Unaligned indices are read correctly. */
    uint8_t raw[8 * 3 + 1];
    const int64_t un[] = {3, 1, 5};
    memcpy(raw + 1, un, sizeof un);
    assert_int_equal(sparse_indices_check(raw + 1, 3, 6, &bad), 0);
    assert_int_equal(sparse_indices_check(raw + 1, 3, 5, &bad), -1);
    assert_int_equal(bad, 5);
    /* rows near the int64 limit. */
    const int64_t big[] = {INT64_MAX - 1};
    memcpy(idx, big, 8);
    assert_int_equal(sparse_indices_check(idx, 1, (uint64_t)INT64_MAX, &bad), 0);
    assert_int_equal(sparse_indices_check(idx, 1, (uint64_t)INT64_MAX - 1, &bad), -1);
}

static float val_pos(uint64_t i, uint64_t row, uint64_t c) { return (float)(i * 16 + c) * 0.125f; }

/* Values streamed in uneven chunks that start and end mid-row give the same
 * result as one chunk, for several chunkings. */
static void test_sparse_chunked_add(void **state)
{
    enum { COLS = 5, NNZ = 9 };
    const int64_t rows[NNZ] = {8, 3, 8, 0, 19, 3, 11, 8, 2};
    push p = make_push(rows, NNZ, COLS, val_pos);

    /* Reference: one chunk. */
    sparse_acc ref;
    sparse_acc_init(&ref);
    sparse_acc_reset(&ref, 20, COLS);
    acc_push(&ref, &p);
    uint64_t sz = sparse_acc_result_size(&ref);
    uint8_t *want = malloc(sz);
    assert_non_null(want);
    assert_int_equal(sparse_acc_emit(&ref, 1.0f, want), 0);
    assert_int_equal(ref.nslots, 6);

    static const size_t chunkings[][8] = {
        {1, 2, 3, 4, 5, 6, 7, 17}, /* sums to 45 = NNZ * COLS */
        {7, 7, 7, 7, 7, 7, 3, 0},
        {44, 1, 0},
        {1, 44, 0},
        {4, 6, 4, 6, 4, 6, 15, 0},
        {13, 13, 13, 6, 0},
    };
    for (size_t k = 0; k < sizeof chunkings / sizeof chunkings[0]; k++) {
        sparse_acc a;
        sparse_acc_init(&a);
        sparse_acc_reset(&a, 20, COLS);
        uint32_t slots[NNZ];
        int64_t bad;
        assert_int_equal(sparse_acc_map(&a, p.idx, NNZ, slots, &bad), 0);
        uint64_t e = 0;
        for (size_t j = 0; j < 8 && chunkings[k][j]; j++) {
            size_t n = chunkings[k][j];
            /* Copy the chunk to its own odd-aligned buffer, as a socket read would. */
            uint8_t *chunk = malloc(4 * n + 1);
            assert_non_null(chunk);
            memcpy(chunk + 1, p.vals + 4 * e, 4 * n);
            sparse_acc_add(&a, slots, e, chunk + 1, n);
            free(chunk);
            e += n;
        }
        assert_int_equal(e, NNZ * COLS);
        assert_int_equal(sparse_acc_result_size(&a), sz);
        uint8_t *got = malloc(sz);
        assert_non_null(got);
        assert_int_equal(sparse_acc_emit(&a, 1.0f, got), 0);
        if (memcmp(got, want, sz) != 0) {
            print_error("chunking %zu differs from the single chunk\n", k);
            fail();
        }
        free(got);
        sparse_acc_free(&a);
    }

    /* And the single chunk matches a hand-built reference. */
    const int64_t want_rows[] = {0, 2, 3, 8, 11, 19};
    float wv[6 * COLS];
    memset(wv, 0, sizeof wv);
    for (uint64_t i = 0; i < NNZ; i++) {
        int k = 0;
        while (want_rows[k] != rows[i])
            k++;
        for (uint64_t c = 0; c < COLS; c++)
            wv[k * COLS + c] += val_pos(i, 0, c);
    }
    check_emit(&ref, 1.0f, want_rows, 6, wv);
    free(want);
    sparse_acc_free(&ref);
    free_push(&p);
}

static void test_sparse_reset(void **state)
{
    sparse_acc a;
    sparse_acc_init(&a);
    sparse_acc_reset(&a, 100, 4);
    const int64_t r1[] = {10, 20, 30};
    push p1 = make_push(r1, 3, 4, val_row);
    acc_push(&a, &p1);
    assert_int_equal(a.nslots, 3);

    /* Same shape: the old rows are gone, new ones start from zero. */
    sparse_acc_reset(&a, 100, 4);
    assert_int_equal(a.nslots, 0);
    assert_int_equal(sparse_acc_result_size(&a), 0);
    const int64_t r2[] = {20, 5};
    push p2 = make_push(r2, 2, 4, val_one);
    acc_push(&a, &p2);
    {
        const int64_t want_rows[] = {5, 20};
        const float want[] = {1, 1, 1, 1, 1, 1, 1, 1}; /* row 20 not carried over */
        check_emit(&a, 1.0f, want_rows, 2, want);
    }

    /* Different cols, wider than before (storage must be resized). */
    sparse_acc_reset(&a, 10, 9);
    assert_int_equal(a.nslots, 0);
    const int64_t r3[] = {9, 0, 9};
    push p3 = make_push(r3, 3, 9, val_row);
    acc_push(&a, &p3);
    {
        const int64_t want_rows[] = {0, 9};
        float want[2 * 9];
        for (int c = 0; c < 9; c++) {
            want[c] = (float)c;
            want[9 + c] = 2.0f * (18.0f + (float)c);
        }
        check_emit(&a, 0.5f, want_rows, 2, want);
    }
    /* Fewer rows than an earlier index: that index is now out of range. */
    uint32_t slots[3];
    int64_t bad = 0;
    assert_int_equal(sparse_acc_map(&a, p1.idx, 3, slots, &bad), -1);
    assert_int_equal(bad, 10);

    /* Narrower. */
    sparse_acc_reset(&a, 1000, 1);
    const int64_t r4[] = {999, 0, 500, 999};
    push p4 = make_push(r4, 4, 1, val_row);
    acc_push(&a, &p4);
    {
        const int64_t want_rows[] = {0, 500, 999};
        const float want[] = {0.0f, 1000.0f, 3996.0f};
        check_emit(&a, 1.0f, want_rows, 3, want);
    }

    /* Much wider again, with more rows than the earlier storage holds in
     * floats but fewer than its slot capacity (catches storage kept across
     * a change of cols). */
    enum { WIDE = 64, NW = 200 };
    sparse_acc_reset(&a, 1000, WIDE);
    int64_t r5[NW];
    for (int i = 0; i < NW; i++)
        r5[i] = 999 - 3 * i;
    push p5 = make_push(r5, NW, WIDE, val_row);
    acc_push(&a, &p5);
    assert_int_equal(a.nslots, NW);
    {
        int64_t want_rows[NW];
        float *want = malloc(NW * WIDE * sizeof *want);
        assert_non_null(want);
        for (int i = 0; i < NW; i++) {
            want_rows[i] = r5[NW - 1 - i];
            for (int c = 0; c < WIDE; c++)
                want[i * WIDE + c] = (float)want_rows[i] * 2.0f + (float)c;
        }
        check_emit(&a, 1.0f, want_rows, NW, want);
        free(want);
    }
    free_push(&p5);
    free_push(&p1);
    free_push(&p2);
    free_push(&p3);
    free_push(&p4);
    sparse_acc_free(&a);
}

static float val_rowneg(uint64_t i, uint64_t row, uint64_t c)
{
    return c == 0 ? (float)(row % 1024) : -1.0f;
}

/* Many distinct rows: the hash table and slot storage grow many times, and
 * every row keeps its values. Pushed twice (second time in reverse order)
 * so every row is hit once per push through the grown table. */
static void test_sparse_many_rows(void **state)
{
    enum { N = 100000, COLS = 2 };
    const uint64_t ROWS = 10000000;
    int64_t *rows = malloc(N * sizeof *rows);
    int64_t *rev = malloc(N * sizeof *rev);
    assert_non_null(rows);
    assert_non_null(rev);
    for (uint64_t i = 0; i < N; i++) {
        /* Distinct, scattered, not sorted: 7919 is prime, coprime to ROWS. */
        rows[i] = (int64_t)((i * 7919 + 13) % ROWS);
    }
    for (uint64_t i = 0; i < N; i++)
        rev[i] = rows[N - 1 - i];
    push p1 = make_push(rows, N, COLS, val_rowneg);
    push p2 = make_push(rev, N, COLS, val_rowneg);

    sparse_acc a;
    sparse_acc_init(&a);
    sparse_acc_reset(&a, ROWS, COLS);
    acc_push(&a, &p1);
    assert_int_equal(a.nslots, N);
    assert_true(a.hcap >= 2 * (size_t)N);
    acc_push(&a, &p2);
    assert_int_equal(a.nslots, N);

    uint64_t sz = sparse_acc_result_size(&a);
    assert_int_equal(sz, (uint64_t)N * (8 + 4 * COLS));
    uint8_t *out = malloc(sz);
    assert_non_null(out);
    assert_int_equal(sparse_acc_emit(&a, 0.5f, out), 0);
    /* The sorted distinct rows, to compare against. */
    int64_t *sorted = malloc(N * sizeof *sorted);
    assert_non_null(sorted);
    /* Sort through a presence map: O(ROWS), simple, independent of qsort. */
    uint8_t *present = calloc(ROWS, 1);
    assert_non_null(present);
    for (uint64_t i = 0; i < N; i++)
        present[rows[i]] = 1;
    size_t k = 0;
    for (uint64_t r = 0; r < ROWS; r++)
        if (present[r])
            sorted[k++] = (int64_t)r;
    assert_int_equal(k, N);
    free(present);

    for (uint64_t i = 0; i < N; i++) {
        int64_t r = get_i64(out + 8 * i);
        if (r != sorted[i]) {
            print_error("row %llu: %lld want %lld\n", (unsigned long long)i, (long long)r,
                        (long long)sorted[i]);
            fail();
        }
        /* two pushes of (row % 1024, -1), times 0.5 */
        assert_float_eq(get_f32(out + 8 * (uint64_t)N + 4 * (i * COLS)), (float)(r % 1024));
        assert_float_eq(get_f32(out + 8 * (uint64_t)N + 4 * (i * COLS + 1)), -1.0f);
    }
    free(sorted);
    free(out);
    free(rows);
    free(rev);
    free_push(&p1);
    free_push(&p2);
    sparse_acc_free(&a);
}

/* The sources of a step, as a device hands them over. */
/* The fused SGD step equals the three passes it replaced (sum in source
 * order, scale, step), bit for bit, across chunk boundaries, for 1..3
 * sources, the first step and later ones, with and without the copy out. */
static void test_sgd_momentum_fused(void **state)
{
    static const size_t lens[] = {1, 7, 1023, 1024, 1025, 2048, 3001};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        for (uint32_t nsrc = 1; nsrc <= 3; nsrc++) {
            float *src[3], *p1 = malloc(n * 4), *b1 = malloc(n * 4), *p2 = malloc(n * 4), *b2 = malloc(n * 4);
            float *out = malloc(n * 4), *sum = malloc(n * 4);
            assert_non_null(p1);
            assert_non_null(b1);
            assert_non_null(p2);
            assert_non_null(b2);
            assert_non_null(out);
            assert_non_null(sum);
            for (uint32_t s = 0; s < nsrc; s++) {
                src[s] = malloc(n * 4);
                assert_non_null(src[s]);
                for (size_t i = 0; i < n; i++)
                    src[s][i] = (float)((i * 7919 + s * 104729) % 1000) / 997.0f - 0.5f;
            }
            for (size_t i = 0; i < n; i++) {
                p1[i] = p2[i] = (float)(i % 13) * 0.01f - 0.06f;
                b1[i] = b2[i] = (float)(i % 5) * 0.1f;
            }
            float scale = mean_scale(nsrc), lr = 0.001f, mom = 0.9f;
            for (int step = 0; step < 2; step++) {
                bool first = step == 0;
                reduce_sgd_momentum_f32(p1, b1, src_at, src, nsrc, n, scale, lr, mom, first, step ? out : NULL);
                for (size_t i = 0; i < n; i++) {
                    float g = src[0][i];
                    for (uint32_t s = 1; s < nsrc; s++)
                        g += src[s][i];
                    sum[i] = g * scale;
                    float b = first ? sum[i] : mom * b2[i] + sum[i];
                    b2[i] = b;
                    p2[i] = p2[i] - lr * b;
                }
                assert_memory_equal(p1, p2, n * 4);
                assert_memory_equal(b1, b2, n * 4);
            }
            assert_memory_equal(out, p2, n * 4);
            for (uint32_t s = 0; s < nsrc; s++)
                free(src[s]);
            free(p1);
            free(b1);
            free(p2);
            free(b2);
            free(out);
            free(sum);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_unaligned),
        cmocka_unit_test(test_dense_loops_each_width),
        cmocka_unit_test(test_copy_unaligned),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_mean_scale),
        cmocka_unit_test(test_sparse_duplicates_coalesce),
        cmocka_unit_test(test_sparse_two_pushes),
        cmocka_unit_test(test_sparse_empty_push),
        cmocka_unit_test(test_sparse_bad_index),
        cmocka_unit_test(test_sparse_indices_check),
        cmocka_unit_test(test_sparse_chunked_add),
        cmocka_unit_test(test_sparse_reset),
        cmocka_unit_test(test_sparse_many_rows),
        cmocka_unit_test(test_sgd_momentum_fused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
