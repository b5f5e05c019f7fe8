/* test_pending.c — unit tests for server/pending (the (batch, bucket)
 * futures table: create/find/remove, growth, stale marks, trainer-slot
 * bitmaps, foreach) and server/bufpool (aligned, reference-counted buffers
 * recycled across batches, the keep_bytes cap, the best-fit rule). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "server/bufpool.h"
#include "server/pending.h"

/* ---- pending table ----------------------------------------------------- */

static void test_create_find_remove(void **state)
{
    pending_table t;
    assert_int_equal(pending_init(&t, 4), 0);
    assert_null(pending_find(&t, 1, 2));

    future *a = pending_create(&t, 1, 2);
    assert_non_null(a);
    assert_int_equal(a->batch, 1);
    assert_int_equal(a->bucket, 2);
    /* A new entry is zeroed. */
    assert_int_equal(a->started, 0);
    assert_int_equal(a->completed, 0);
    assert_int_equal(a->state, FUTURE_OPEN);
    assert_false(a->cancelled);
    assert_null(a->kstate);
    assert_null(a->pushes);
    assert_non_null(a->pushed);
    for (uint32_t s = 0; s < 4; s++)
        assert_false(pending_has_slot(a, s));

    future *b = pending_create(&t, 2, 1); /* swapped key: a different entry */
    assert_non_null(b);
    assert_true(a != b);
    assert_int_equal(t.count, 2);
    assert_ptr_equal(pending_find(&t, 1, 2), a);
    assert_ptr_equal(pending_find(&t, 2, 1), b);
    assert_null(pending_find(&t, 1, 1));
    assert_null(pending_find(&t, 2, 2));

    pending_remove(&t, a, false);
    assert_int_equal(t.count, 1);
    assert_null(pending_find(&t, 1, 2));
    assert_ptr_equal(pending_find(&t, 2, 1), b);
    pending_free_entry(a);

    /* The same key can be created again after removal. */
    future *a2 = pending_create(&t, 1, 2);
    assert_non_null(a2);
    assert_ptr_equal(pending_find(&t, 1, 2), a2);
    assert_int_equal(t.count, 2);

    pending_destroy(&t, NULL, NULL);
    assert_null(t.heads);
    assert_int_equal(t.count, 0);
}

static void test_many_entries(void **state)
{
    enum { N = 10000, BUCKETS = 7 };
    pending_table t;
    assert_int_equal(pending_init(&t, 8), 0);
    size_t heads0 = t.nheads;
    future **ents = calloc(N, sizeof *ents);
    assert_non_null(ents);
    for (uint64_t i = 0; i < N; i++) {
        ents[i] = pending_create(&t, i / BUCKETS, i % BUCKETS);
        assert_non_null(ents[i]);
        ents[i]->count = i; /* a payload to recognise it by */
    }
    assert_int_equal(t.count, N);
    assert_true(t.nheads > heads0); /* it grew */
    assert_true(t.nheads >= N);
    assert_int_equal(t.nheads & (t.nheads - 1), 0);
    for (uint64_t i = 0; i < N; i++) {
        future *e = pending_find(&t, i / BUCKETS, i % BUCKETS);
        assert_ptr_equal(e, ents[i]);
        assert_int_equal(e->count, i);
    }
    assert_null(pending_find(&t, N / BUCKETS + 1, 0));
    assert_null(pending_find(&t, 0, BUCKETS));

    /* Remove every other entry; the rest stay findable. */
    for (uint64_t i = 0; i < N; i += 2) {
        pending_remove(&t, ents[i], false);
        pending_free_entry(ents[i]);
        ents[i] = NULL;
    }
    assert_int_equal(t.count, N / 2);
    for (uint64_t i = 0; i < N; i++) {
        future *e = pending_find(&t, i / BUCKETS, i % BUCKETS);
        if (i % 2 == 0)
            assert_null(e);
        else
            assert_ptr_equal(e, ents[i]);
    }
    pending_destroy(&t, NULL, NULL);
    free(ents);
}

static void test_stale(void **state)
{
    pending_table t;
    assert_int_equal(pending_init(&t, 2), 0);

    /* Nothing resolved yet: nothing is stale. */
    assert_false(pending_is_stale(&t, 0, 0));
    assert_false(pending_is_stale(&t, 5, 3));

    future *e = pending_create(&t, 5, 3);
    assert_non_null(e);
    assert_false(pending_is_stale(&t, 5, 3)); /* open, not resolved */

    /* Removal without resolution (e.g. failed) marks nothing. */
    pending_remove(&t, e, false);
    pending_free_entry(e);
    assert_false(pending_is_stale(&t, 5, 3));
    assert_false(pending_is_stale(&t, 4, 3));
    assert_false(pending_is_stale(&t, 0, 3));

    e = pending_create(&t, 5, 3);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, 5, 3));  /* the resolved one */
    assert_true(pending_is_stale(&t, 4, 3));  /* older batches of that bucket */
    assert_true(pending_is_stale(&t, 0, 3));
    assert_false(pending_is_stale(&t, 6, 3)); /* newer batch */
    assert_false(pending_is_stale(&t, 100, 3));
    assert_false(pending_is_stale(&t, 5, 2)); /* other buckets */
    assert_false(pending_is_stale(&t, 5, 4));
    assert_false(pending_is_stale(&t, 0, 0));

    /* Resolving an older batch later does not move the mark back. */
    e = pending_create(&t, 2, 3);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, 5, 3));
    assert_false(pending_is_stale(&t, 6, 3));

    /* A newer batch moves it forward. */
    e = pending_create(&t, 9, 3);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, 9, 3));
    assert_true(pending_is_stale(&t, 7, 3));
    assert_false(pending_is_stale(&t, 10, 3));

    /* A non-resolving removal of a newer batch does not move it. */
    e = pending_create(&t, 20, 3);
    assert_non_null(e);
    pending_remove(&t, e, false);
    pending_free_entry(e);
    assert_false(pending_is_stale(&t, 20, 3));
    assert_false(pending_is_stale(&t, 15, 3));
    assert_true(pending_is_stale(&t, 9, 3));

    /* A second bucket keeps its own mark. */
    e = pending_create(&t, 1, 7);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, 1, 7));
    assert_false(pending_is_stale(&t, 2, 7));
    assert_true(pending_is_stale(&t, 9, 3));

    /* A new session (pending_clear) forgets every entry and mark, and the
     * table stays usable. */
    future *open = pending_create(&t, 4, 4);
    assert_non_null(open);
    pending_clear(&t, NULL, NULL);
    assert_int_equal(t.count, 0);
    assert_null(pending_find(&t, 4, 4));
    assert_false(pending_is_stale(&t, 9, 3));
    assert_false(pending_is_stale(&t, 0, 3));
    assert_false(pending_is_stale(&t, 1, 7));
    /* ... and marks again from scratch. */
    e = pending_create(&t, 0, 3);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, 0, 3));
    assert_false(pending_is_stale(&t, 1, 3));
    assert_false(pending_is_stale(&t, 1, 7));

    pending_destroy(&t, NULL, NULL);
}

/* The top of the batch range (issue 27): batch 2^64-1 resolved stays
 * resolved, and older batches of its bucket stay stale, instead of the
 * mark wrapping to "nothing resolved". Bucket 2^64-1 is a bucket like any
 * other. */
static void test_stale_top_of_range(void **state)
{
    (void)state;
    pending_table t;
    assert_int_equal(pending_init(&t, 2), 0);
    future *e = pending_create(&t, 7, 1);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    e = pending_create(&t, UINT64_MAX, 1);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, UINT64_MAX, 1)); /* answered once: never again */
    assert_true(pending_is_stale(&t, UINT64_MAX - 1, 1));
    assert_true(pending_is_stale(&t, 7, 1));
    assert_true(pending_is_stale(&t, 0, 1));
    assert_false(pending_is_stale(&t, 0, 2));
    assert_true(pending_has_mark(&t, 1));
    assert_false(pending_has_mark(&t, 2));

    e = pending_create(&t, UINT64_MAX, UINT64_MAX);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, UINT64_MAX, UINT64_MAX));
    assert_true(pending_is_stale(&t, 0, UINT64_MAX));
    assert_true(pending_has_mark(&t, UINT64_MAX));
    /* Batch 0 resolved is a mark too (nothing is "0 = none"). */
    e = pending_create(&t, 0, 5);
    assert_non_null(e);
    pending_remove(&t, e, true);
    pending_free_entry(e);
    assert_true(pending_is_stale(&t, 0, 5));
    assert_false(pending_is_stale(&t, 1, 5));
    pending_destroy(&t, NULL, NULL);
}

/* More buckets than the initial mark capacity: every mark survives the
 * realloc. */
static void test_stale_many_buckets(void **state)
{
    enum { B = 300 };
    pending_table t;
    assert_int_equal(pending_init(&t, 1), 0);
    for (uint64_t b = 0; b < B; b++) {
        future *e = pending_create(&t, b + 10, b);
        assert_non_null(e);
        pending_remove(&t, e, true);
        pending_free_entry(e);
    }
    for (uint64_t b = 0; b < B; b++) {
        assert_true(pending_is_stale(&t, b + 10, b));
        assert_true(pending_is_stale(&t, 0, b));
        assert_false(pending_is_stale(&t, b + 11, b));
    }
    assert_false(pending_is_stale(&t, 0, B));
    pending_destroy(&t, NULL, NULL);
}

static void test_slots(void **state)
{
    pending_table t;
    assert_int_equal(pending_init(&t, 256), 0);
    future *e = pending_create(&t, 0, 0);
    assert_non_null(e);
    static const uint32_t probe[] = {0, 1, 62, 63, 64, 65, 127, 128, 199, 200, 201, 255};
    const size_t np = sizeof probe / sizeof probe[0];
    for (size_t i = 0; i < np; i++)
        assert_false(pending_has_slot(e, probe[i]));

    static const uint32_t set[] = {0, 63, 64, 200};
    for (size_t i = 0; i < 4; i++)
        pending_set_slot(e, set[i]);
    for (uint32_t s = 0; s < 256; s++) {
        bool want = s == 0 || s == 63 || s == 64 || s == 200;
        if (pending_has_slot(e, s) != want) {
            print_error("slot %u: has=%d want=%d\n", s, !want, want);
            fail();
        }
    }
    /* Setting twice is idempotent. */
    pending_set_slot(e, 63);
    assert_true(pending_has_slot(e, 63));

    pending_clear_slot(e, 63);
    assert_false(pending_has_slot(e, 63));
    assert_true(pending_has_slot(e, 0));
    assert_true(pending_has_slot(e, 64));
    assert_true(pending_has_slot(e, 200));
    pending_clear_slot(e, 0);
    pending_clear_slot(e, 200);
    assert_false(pending_has_slot(e, 0));
    assert_false(pending_has_slot(e, 200));
    assert_true(pending_has_slot(e, 64));
    pending_clear_slot(e, 64);
    for (uint32_t s = 0; s < 256; s++)
        assert_false(pending_has_slot(e, s));
    /* The last slot works too. */
    pending_set_slot(e, 255);
    assert_true(pending_has_slot(e, 255));
    assert_false(pending_has_slot(e, 254));

    /* Entries have independent bitmaps. */
    future *f = pending_create(&t, 0, 1);
    assert_non_null(f);
    assert_false(pending_has_slot(f, 255));
    pending_set_slot(f, 3);
    assert_false(pending_has_slot(e, 3));

    pending_destroy(&t, NULL, NULL);
}

struct visit {
    int *seen; /* indexed by batch */
    size_t n;
    size_t calls;
};

static void visit_fn(future *e, void *arg)
{
    struct visit *v = arg;
    v->calls++;
    if (e->batch < v->n)
        v->seen[e->batch]++;
}

static void test_foreach(void **state)
{
    enum { N = 700 }; /* past the initial 256 heads: visits after a grow */
    pending_table t;
    assert_int_equal(pending_init(&t, 2), 0);

    int seen[N];
    struct visit v = {seen, N, 0};
    memset(seen, 0, sizeof seen);
    pending_foreach(&t, visit_fn, &v);
    assert_int_equal(v.calls, 0);

    for (uint64_t i = 0; i < N; i++)
        assert_non_null(pending_create(&t, i, 42));
    future *gone = pending_find(&t, 13, 42);
    assert_non_null(gone);
    pending_remove(&t, gone, false);
    pending_free_entry(gone);

    pending_foreach(&t, visit_fn, &v);
    assert_int_equal(v.calls, N - 1);
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], i == 13 ? 0 : 1);
    pending_destroy(&t, NULL, NULL);
}

static void count_free(future *e, void *arg)
{
    (*(size_t *)arg)++;
}

static void test_destroy_calls_free_fn(void **state)
{
    pending_table t;
    assert_int_equal(pending_init(&t, 2), 0);
    for (uint64_t i = 0; i < 300; i++)
        assert_non_null(pending_create(&t, i, i % 3));
    size_t n = 0;
    pending_destroy(&t, count_free, &n);
    assert_int_equal(n, 300);
}

/* ---- bufpool ----------------------------------------------------------- */

static void test_bufpool_get(void **state)
{
    bufpool p;
    bufpool_init(&p, 1 << 20);
    static const size_t sizes[] = {0, 1, 3, 63, 64, 65, 1000, 4096, 100001};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        psbuf *b = bufpool_get(&p, sizes[i]);
        assert_non_null(b);
        assert_non_null(b->data);
        assert_int_equal((uintptr_t)b->data % 64, 0);
        assert_int_equal(b->refs, 1);
        assert_int_equal(b->len, sizes[i]);
        assert_true(b->cap >= sizes[i]);
        assert_ptr_equal(b->pool, &p);
        assert_int_equal(p.live, 1);
        memset(b->data, 0x5c, b->cap); /* the whole capacity is usable */
        psbuf_unref(b);
        assert_int_equal(p.live, 0);
    }
    bufpool_destroy(&p);
}

static void test_bufpool_reuse(void **state)
{
    bufpool p;
    bufpool_init(&p, 1 << 20);
    psbuf *a = bufpool_get(&p, 1000);
    assert_non_null(a);
    uint8_t *data = a->data;
    assert_int_equal(p.allocs, 1);
    psbuf_unref(a);
    assert_int_equal(p.live, 0);
    assert_ptr_equal(p.free, a);
    assert_int_equal(p.free_bytes, a->cap);

    /* Steady state: the same size comes back, nothing new is allocated. */
    for (int round = 0; round < 100; round++) {
        psbuf *b = bufpool_get(&p, 1000);
        assert_non_null(b);
        assert_ptr_equal(b->data, data);
        assert_int_equal(b->refs, 1);
        assert_int_equal(b->len, 1000);
        assert_int_equal(p.free_bytes, 0);
        psbuf_unref(b);
    }
    assert_int_equal(p.allocs, 1);

    /* Two sizes in flight at once, as two buckets would be. */
    psbuf *x = bufpool_get(&p, 1000);
    psbuf *y = bufpool_get(&p, 5000);
    assert_int_equal(p.allocs, 2);
    assert_int_equal(p.live, 2);
    uint8_t *ydata = y->data;
    psbuf_unref(x);
    psbuf_unref(y);
    for (int round = 0; round < 50; round++) {
        psbuf *yy = bufpool_get(&p, 5000);
        psbuf *xx = bufpool_get(&p, 1000);
        assert_ptr_equal(xx->data, data);
        assert_ptr_equal(yy->data, ydata);
        psbuf_unref(xx);
        psbuf_unref(yy);
    }
    assert_int_equal(p.allocs, 2);

    /* A slightly smaller request (within a factor of two) reuses it too. */
    psbuf *s = bufpool_get(&p, 600);
    assert_ptr_equal(s->data, data);
    assert_int_equal(s->len, 600);
    assert_int_equal(p.allocs, 2);
    psbuf_unref(s);
    bufpool_destroy(&p);
}

static void test_bufpool_refs(void **state)
{
    bufpool p;
    bufpool_init(&p, 1 << 20);
    psbuf *b = bufpool_get(&p, 256);
    assert_non_null(b);
    psbuf_ref(b);
    psbuf_ref(b);
    assert_int_equal(b->refs, 3);
    psbuf_unref(b);
    assert_int_equal(b->refs, 2);
    assert_int_equal(p.live, 1);
    assert_null(p.free); /* still referenced: not back in the pool */
    psbuf_unref(b);
    assert_int_equal(b->refs, 1);
    assert_null(p.free);
    assert_int_equal(p.free_bytes, 0);
    psbuf_unref(b);
    assert_int_equal(p.live, 0);
    assert_ptr_equal(p.free, b);
    assert_int_equal(p.free_bytes, b->cap);
    /* Handed out again with a fresh count. */
    psbuf *c = bufpool_get(&p, 256);
    assert_ptr_equal(c, b);
    assert_int_equal(c->refs, 1);
    assert_int_equal(p.live, 1);
    psbuf_unref(c);
    bufpool_destroy(&p);
}

static void test_bufpool_keep_cap(void **state)
{
    bufpool p;
    bufpool_init(&p, 2048); /* room for two 1024-byte buffers */
    psbuf *b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = bufpool_get(&p, 1024);
        assert_non_null(b[i]);
        assert_int_equal(b[i]->cap, 1024);
    }
    assert_int_equal(p.allocs, 4);
    assert_int_equal(p.live, 4);
    for (int i = 0; i < 4; i++)
        psbuf_unref(b[i]);
    assert_int_equal(p.live, 0);
    assert_int_equal(p.free_bytes, 2048); /* two kept, two released */
    size_t nfree = 0;
    for (psbuf *f = p.free; f; f = f->next)
        nfree++;
    assert_int_equal(nfree, 2);

    /* Four again: two come from the pool, two are new allocations. */
    for (int i = 0; i < 4; i++)
        b[i] = bufpool_get(&p, 1024);
    assert_int_equal(p.allocs, 6);
    assert_int_equal(p.free_bytes, 0);
    for (int i = 0; i < 4; i++)
        psbuf_unref(b[i]);
    assert_true(p.free_bytes <= p.keep_bytes);
    bufpool_destroy(&p);

    /* keep_bytes = 0: nothing is ever kept. */
    bufpool_init(&p, 0);
    psbuf *z = bufpool_get(&p, 64);
    psbuf_unref(z);
    assert_null(p.free);
    assert_int_equal(p.free_bytes, 0);
    z = bufpool_get(&p, 64);
    assert_int_equal(p.allocs, 2);
    psbuf_unref(z);
    bufpool_destroy(&p);
}

static void test_bufpool_best_fit(void **state)
{
    bufpool p;
    bufpool_init(&p, 1 << 20);
    psbuf *big = bufpool_get(&p, 4096);
    assert_non_null(big);
    assert_int_equal(big->cap, 4096);
    psbuf_unref(big);
    assert_int_equal(p.allocs, 1);

    /* Less than half of the free buffer: it is not taken. */
    psbuf *small = bufpool_get(&p, 2047);
    assert_non_null(small);
    assert_true(small != big);
    assert_int_equal(p.allocs, 2);
    assert_ptr_equal(p.free, big); /* still in the pool */
    psbuf *tiny = bufpool_get(&p, 10);
    assert_true(tiny != big);
    assert_int_equal(p.allocs, 3);
    /* Too big for it: not taken either. */
    psbuf *bigger = bufpool_get(&p, 4097);
    assert_true(bigger != big);
    assert_int_equal(p.allocs, 4);
    /* Exactly half: taken. */
    psbuf *half = bufpool_get(&p, 2048);
    assert_ptr_equal(half, big);
    assert_int_equal(half->len, 2048);
    assert_int_equal(p.allocs, 4);
    psbuf_unref(small);
    psbuf_unref(tiny);
    psbuf_unref(bigger);
    psbuf_unref(half);

    /* Among several fits, the smallest is chosen. */
    bufpool_destroy(&p);
    bufpool_init(&p, 1 << 20);
    psbuf *c1 = bufpool_get(&p, 1536);
    psbuf *c2 = bufpool_get(&p, 1024);
    psbuf *c3 = bufpool_get(&p, 1984);
    psbuf_unref(c1);
    psbuf_unref(c2);
    psbuf_unref(c3);
    psbuf *pick = bufpool_get(&p, 1000);
    assert_ptr_equal(pick, c2);
    psbuf *pick2 = bufpool_get(&p, 1000);
    assert_ptr_equal(pick2, c1);
    assert_int_equal(p.allocs, 3);
    psbuf_unref(pick);
    psbuf_unref(pick2);
    bufpool_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_find_remove),
        cmocka_unit_test(test_many_entries),
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_stale_many_buckets),
        cmocka_unit_test(test_stale_top_of_range),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_foreach),
        cmocka_unit_test(test_destroy_calls_free_fn),
        cmocka_unit_test(test_bufpool_get),
        cmocka_unit_test(test_bufpool_reuse),
        cmocka_unit_test(test_bufpool_refs),
        cmocka_unit_test(test_bufpool_keep_cap),
        cmocka_unit_test(test_bufpool_best_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
