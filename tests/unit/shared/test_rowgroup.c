/* test_rowgroup.c — a lookup's indices grouped by row (shared/rowgroup.c):
 * the unique rows ascending, each one's occurrences in position order
 * (what keeps a repeated row's GPU updates in the CPU's order), each
 * standing for its position / div or for what `of` maps it to; against a
 * plain count over random lookups with many repeats, and the scratch kept
 * from one call to the next. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "shared/rowgroup.h"

static void test_small(void **state)
{
    (void)state;
    rowgroup g = {0};
    const int64_t keys[] = {7, 3, 7, 0, 3, 3};
    assert_int_equal(rowgroup_sort(&g, keys, 6), 0);
    assert_int_equal(g.n, 6);
    assert_int_equal(g.nu, 3);
    int64_t urows[6];
    uint32_t off[7], occ[6];
    rowgroup_csr(&g, NULL, 2, urows, off, occ); /* 2 indices a sample */
    const int64_t want_rows[] = {0, 3, 7};
    const uint32_t want_off[] = {0, 1, 4, 6};
    /* row 0: position 3 (sample 1); row 3: positions 1, 4, 5; row 7: 0, 2 */
    const uint32_t want_occ[] = {1, 0, 2, 2, 0, 1};
    assert_memory_equal(urows, want_rows, sizeof want_rows);
    assert_memory_equal(off, want_off, sizeof want_off);
    assert_memory_equal(occ, want_occ, sizeof want_occ);
    const uint32_t bag_of[] = {10, 11, 12, 13, 14, 15};
    rowgroup_csr(&g, bag_of, 0, urows, off, occ);
    const uint32_t want_bags[] = {13, 11, 14, 15, 10, 12};
    assert_memory_equal(occ, want_bags, sizeof want_bags);
    assert_int_equal(rowgroup_sort(&g, keys, 0), 0); /* none: no rows */
    assert_int_equal(g.nu, 0);
    rowgroup_csr(&g, NULL, 1, urows, off, occ);
    assert_int_equal(off[0], 0);
    rowgroup_free(&g);
    assert_null(g.occ);
}

static void test_random(void **state)
{
    (void)state;
    rowgroup g = {0};
    enum { N = 5000, ROWS = 97 };
    int64_t *keys = malloc(N * sizeof *keys), *urows = malloc(N * sizeof *urows);
    uint32_t *off = malloc((N + 1) * sizeof *off), *occ = malloc(N * sizeof *occ);
    assert_true(keys && urows && off && occ);
    uint32_t seed = 12345;
    for (int round = 0; round < 3; round++) {
        size_t n = N / (size_t)(round + 1); /* smaller after larger: the scratch is kept */
        unsigned count[ROWS] = {0};
        for (size_t k = 0; k < n; k++) {
            seed = seed * 1103515245u + 12345u;
            keys[k] = (int64_t)((seed >> 8) % ROWS);
            count[keys[k]]++;
        }
        assert_int_equal(rowgroup_sort(&g, keys, n), 0);
        rowgroup_csr(&g, NULL, 1, urows, off, occ);
        size_t u = 0;
        for (int64_t r = 0; r < ROWS; r++) {
            if (!count[r])
                continue;
            assert_true(u < g.nu);
            assert_int_equal(urows[u], r);
            assert_int_equal(off[u + 1] - off[u], count[r]);
            for (uint32_t k = off[u]; k < off[u + 1]; k++) {
                assert_int_equal(keys[occ[k]], r);               /* each occurrence is of its row */
                assert_true(k == off[u] || occ[k] > occ[k - 1]); /* in position order */
            }
            u++;
        }
        assert_int_equal(u, g.nu);
        assert_int_equal(off[g.nu], n);
    }
    rowgroup_free(&g);
    free(keys);
    free(urows);
    free(off);
    free(occ);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_small), cmocka_unit_test(test_random)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
