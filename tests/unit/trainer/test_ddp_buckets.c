/* test_ddp_buckets.c — trainer/ddp_buckets.c against the buckets PyTorch's
 * own DistributedDataParallel made for the same models and limits.
 *
 * The table below was generated once, on this project's development
 * machine, by `/usr/bin/python3 tests/tools/ddp_layouts.py --c` with
 * Debian's python3-torch 1.13.1: for each DummyModel shape, bucket_cap_mb
 * and first-bucket limit (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
 * it wrapped the seed's DummyModel in DDP on a one-rank Gloo group, ran
 * three iterations and read DDP's initial buckets (`bucket_sizes`, the
 * first iteration's) and its rebuilt ones
 * (`rebuilt_per_bucket_param_indices`). Parameter indices follow PyTorch's
 * (and model.h's) order: 0 the embedding, 1 + 2i layer i's weight, 2 + 2i
 * its bias. tests/integration/test_ddp_buckets.py asks DDP again where
 * torch is installed and compares with a real psbench run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/ddp_buckets.h"

#define END (-1)
#define MAXB 16
#define MAXP 32

typedef struct ddp_case {
    uint64_t num_embeddings, embedding_dim;
    uint32_t layers;
    bool sparse;
    double cap_mb;
    uint64_t first_bytes;
    uint32_t nrebuilt;
    int first[2][MAXP];      /* the first iteration's buckets (1, or 2 with a sparse embedding) */
    int rebuilt[MAXB][MAXP]; /* nrebuilt buckets */
} ddp_case;

static const ddp_case cases[] = {
    {1024, 1024, 8, false, 25, 1048576, 3, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}}, {{16, 15, END}, {14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, END}, {0, END}}},
    {1024, 1024, 8, true, 25, 1048576, 3, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}, {0, END}}, {{16, 15, END}, {14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, END}, {0, END}}},
    {1024, 1024, 8, false, 4, 1048576, 9, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}}, {{16, 15, END}, {14, 13, END}, {12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {1024, 1024, 8, true, 4, 1048576, 9, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}, {0, END}}, {{16, 15, END}, {14, 13, END}, {12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {1024, 1024, 8, false, 1, 1048576, 9, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}}, {{16, 15, END}, {14, 13, END}, {12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {1024, 1024, 8, false, 0.5, 1048576, 9, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}}, {{16, 15, END}, {14, 13, END}, {12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {1024, 1024, 8, false, 100, 1048576, 2, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}}, {{16, 15, END}, {14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, END}}},
    {1024, 1024, 8, false, 25, 0, 3, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}}, {{16, END}, {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, END}, {2, 1, 0, END}}},
    {1024, 1024, 8, false, 25, 8388608, 2, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, END}}, {{16, 15, 14, 13, END}, {12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, END}}},
    {1024, 1024, 10, false, 25, 1048576, 3, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, END}}, {{20, 19, END}, {18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, END}, {4, 3, 2, 1, 0, END}}},
    {1024, 1024, 10, true, 13.5, 1048576, 5, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, END}, {0, END}}, {{20, 19, END}, {18, 17, 16, 15, 14, 13, 12, 11, END}, {10, 9, 8, 7, 6, 5, 4, 3, END}, {0, END}, {2, 1, END}}},
    {1024, 1024, 1, false, 25, 1048576, 2, {{0, 1, 2, END}}, {{2, 1, END}, {0, END}}},
    {1024, 1024, 1, true, 0.25, 1048576, 2, {{1, 2, END}, {0, END}}, {{2, 1, END}, {0, END}}},
    {4096, 256, 6, false, 0.25, 1048576, 4, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, END}}, {{12, 11, 10, 9, 8, 7, 6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {4096, 256, 6, true, 0.25, 1048576, 4, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, END}, {0, END}}, {{12, 11, 10, 9, 8, 7, 6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {4096, 256, 6, true, 0.25, 65536, 7, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, END}, {0, END}}, {{12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {4096, 256, 6, false, 0.1, 65536, 7, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, END}}, {{12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {300, 64, 3, false, 0.01, 1048576, 1, {{0, 1, 2, 3, 4, 5, 6, END}}, {{6, 5, 4, 3, 2, 1, 0, END}}},
    {300, 64, 3, true, 0.01, 1048576, 2, {{1, 2, 3, 4, 5, 6, END}, {0, END}}, {{0, END}, {6, 5, 4, 3, 2, 1, END}}},
    {300, 64, 3, true, 0.01, 4096, 4, {{1, 2, 3, 4, 5, 6, END}, {0, END}}, {{6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {300, 64, 3, false, 0.01, 4096, 4, {{0, 1, 2, 3, 4, 5, 6, END}}, {{6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {300, 64, 3, true, 0.001, 1000, 4, {{1, 2, 3, 4, 5, 6, END}, {0, END}}, {{6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {64, 16, 3, false, 0.001, 1048576, 1, {{0, 1, 2, 3, 4, 5, 6, END}}, {{6, 5, 4, 3, 2, 1, 0, END}}},
    {64, 16, 3, true, 0.001, 1048576, 2, {{1, 2, 3, 4, 5, 6, END}, {0, END}}, {{0, END}, {6, 5, 4, 3, 2, 1, END}}},
    {64, 16, 3, true, 0.001, 100, 4, {{1, 2, 3, 4, 5, 6, END}, {0, END}}, {{6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {64, 16, 3, false, 0.0001, 100, 4, {{0, 1, 2, 3, 4, 5, 6, END}}, {{6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {64, 16, 12, false, 0.002, 1024, 7, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, END}}, {{24, 23, END}, {22, 21, 20, 19, END}, {18, 17, 16, 15, END}, {14, 13, 12, 11, END}, {10, 9, 8, 7, END}, {6, 5, 4, 3, END}, {2, 1, 0, END}}},
    {64, 16, 12, true, 0.002, 1024, 8, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, END}, {0, END}}, {{24, 23, END}, {22, 21, 20, 19, END}, {18, 17, 16, 15, END}, {14, 13, 12, 11, END}, {10, 9, 8, 7, END}, {6, 5, 4, 3, END}, {0, END}, {2, 1, END}}},
    {100000, 32, 4, false, 1, 1048576, 1, {{0, 1, 2, 3, 4, 5, 6, 7, 8, END}}, {{8, 7, 6, 5, 4, 3, 2, 1, 0, END}}},
    {100000, 32, 4, true, 1, 1048576, 2, {{1, 2, 3, 4, 5, 6, 7, 8, END}, {0, END}}, {{0, END}, {8, 7, 6, 5, 4, 3, 2, 1, END}}},
    {100000, 32, 4, true, 25, 1048576, 2, {{1, 2, 3, 4, 5, 6, 7, 8, END}, {0, END}}, {{0, END}, {8, 7, 6, 5, 4, 3, 2, 1, END}}},
    {512, 512, 5, false, 1, 1048576, 6, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, END}}, {{10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {512, 512, 5, false, 1.0001, 1048576, 6, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, END}}, {{10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {512, 512, 5, true, 2, 524288, 4, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, END}, {0, END}}, {{10, 9, END}, {8, 7, 6, 5, END}, {4, 3, 2, 1, END}, {0, END}}},
    {2048, 128, 7, false, 0.0625, 65536, 8, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, END}}, {{14, 13, END}, {12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
    {2048, 128, 7, true, 0.0625, 65536, 8, {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, END}, {0, END}}, {{14, 13, END}, {12, 11, END}, {10, 9, END}, {8, 7, END}, {6, 5, END}, {4, 3, END}, {2, 1, END}, {0, END}}},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* The DummyModel's parameters as model.h lays them out. */
static uint32_t case_params(const ddp_case *c, uint64_t *bytes, bool *sparse)
{
    uint32_t n = 1 + 2 * c->layers;
    bytes[0] = c->num_embeddings * c->embedding_dim * 4;
    sparse[0] = c->sparse;
    for (uint32_t l = 0; l < c->layers; l++) {
        bytes[1 + 2 * l] = c->embedding_dim * c->embedding_dim * 4;
        bytes[2 + 2 * l] = c->embedding_dim * 4;
        sparse[1 + 2 * l] = sparse[2 + 2 * l] = false;
    }
    return n;
}

static void expect_layout(const ddpb_layout *l, const int (*want)[MAXP], uint32_t nwant, size_t ci)
{
    if (l->nbuckets != nwant)
        fail_msg("case %zu: %u buckets, DDP made %u", ci, l->nbuckets, nwant);
    for (uint32_t k = 0; k < nwant; k++) {
        uint32_t c = 0;
        while (want[k][c] != END)
            c++;
        if (ddpb_count(l, k) != c)
            fail_msg("case %zu bucket %u: %u parameters, DDP's has %u", ci, k, ddpb_count(l, k), c);
        for (uint32_t j = 0; j < c; j++)
            if (l->param[l->start[k] + j] != (uint32_t)want[k][j])
                fail_msg("case %zu bucket %u position %u: parameter %u, DDP's %d", ci, k, j,
                         l->param[l->start[k] + j], want[k][j]);
    }
}

static void test_rebuilt_as_ddp(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < NCASES; ci++) {
        const ddp_case *c = &cases[ci];
        uint64_t bytes[MAXP];
        bool sparse[MAXP];
        uint32_t ready[MAXP];
        uint32_t n = case_params(c, bytes, sparse);
        for (uint32_t i = 0; i < n; i++)
            ready[i] = n - 1 - i; /* backward's order: model.h */
        ddpb_layout l;
        assert_int_equal(ddpb_rebuilt(bytes, sparse, ready, n, c->first_bytes, ddpb_cap_bytes(c->cap_mb), &l), 0);
        expect_layout(&l, c->rebuilt, c->nrebuilt, ci);
        ddpb_free(&l);
    }
}

static void test_first_iteration_as_ddp(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < NCASES; ci++) {
        const ddp_case *c = &cases[ci];
        uint64_t bytes[MAXP];
        bool sparse[MAXP];
        uint32_t n = case_params(c, bytes, sparse);
        ddpb_layout l;
        assert_int_equal(ddpb_initial(bytes, sparse, n, &l), 0);
        expect_layout(&l, c->first, c->sparse ? 2 : 1, ci);
        ddpb_free(&l);
    }
}

/* The figures: DummyModel at 25 MB is 1,049,600 + 7,347,200 +
 * 1,048,576 floats under DDP; at 4 MB, 9 buckets. */
static void test_dummy_model_figures(void **state)
{
    (void)state;
    const ddp_case c = {.num_embeddings = 1024, .embedding_dim = 1024, .layers = 8};
    uint64_t bytes[MAXP];
    bool sparse[MAXP];
    uint32_t ready[MAXP];
    uint32_t n = case_params(&c, bytes, sparse);
    for (uint32_t i = 0; i < n; i++)
        ready[i] = n - 1 - i;
    ddpb_layout l;
    assert_int_equal(ddpb_rebuilt(bytes, sparse, ready, n, ddpb_cap_bytes(DDPB_FIRST_BUCKET_MB), ddpb_cap_bytes(25), &l),
                     0);
    assert_int_equal(l.nbuckets, 3);
    assert_int_equal(ddpb_bytes(&l, 0, bytes) / 4, 1049600);
    assert_int_equal(ddpb_bytes(&l, 1, bytes) / 4, 7347200);
    assert_int_equal(ddpb_bytes(&l, 2, bytes) / 4, 1048576);
    ddpb_free(&l);
    assert_int_equal(ddpb_rebuilt(bytes, sparse, ready, n, ddpb_cap_bytes(1), ddpb_cap_bytes(4), &l), 0);
    assert_int_equal(l.nbuckets, 9);
    ddpb_free(&l);
}

/* The closing rule on its own: a bucket closes once it reaches the limit
 * (>=), keeping the parameter that crossed it; the open one comes last;
 * the first limit applies once, the second to every later bucket; a ready
 * order that is not the reverse one is followed as given. */
static void test_closing_rule(void **state)
{
    (void)state;
    const uint64_t bytes[] = {10, 10, 10, 5, 5, 30, 1};
    const bool sparse[] = {false, false, true, false, false, false, false};
    const uint32_t ready[] = {0, 1, 2, 3, 4, 5, 6};
    ddpb_layout l;
    /* first limit 10: {0}; then 20: {1, (2 alone before), 3, 4} reaches 20 at 4; {5} 30 >= 20; {6} open */
    assert_int_equal(ddpb_rebuilt(bytes, sparse, ready, 7, 10, 20, &l), 0);
    const int want[][MAXP] = {{0, END}, {2, END}, {1, 3, 4, END}, {5, END}, {6, END}};
    expect_layout(&l, want, 5, 0);
    ddpb_free(&l);
    /* a limit of 0 closes every dense bucket at its first parameter */
    assert_int_equal(ddpb_rebuilt(bytes, sparse, ready, 7, 0, 0, &l), 0);
    assert_int_equal(l.nbuckets, 7);
    ddpb_free(&l);
    assert_int_equal(ddpb_cap_bytes(0.001), 1048);
    assert_int_equal(ddpb_cap_bytes(25), 26214400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rebuilt_as_ddp),
        cmocka_unit_test(test_first_iteration_as_ddp),
        cmocka_unit_test(test_dummy_model_figures),
        cmocka_unit_test(test_closing_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
