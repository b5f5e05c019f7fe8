/* test_staging.c — the GPU rings both roles use (shared/gpu/staging.h,
 * shared/gpu/evring.h), on the fake GPU: the stream held (cugpu_fake_hold)
 * so that events are known to be incomplete, then let go.
 *
 * Staging: room, take and alignment; bytes through a chunk's twin; a full
 * chunk closed and another made while the GPU is behind (no limit: the
 * server's reactor never waits), the closed one reused once its event is
 * done; a large need; a limit (the trainer's) waited on instead of grown;
 * reset; a failed stream. Events: marks numbered in order, done and wait,
 * overwrite mode (the latest cap held, an older one answered by a later
 * point), grow mode (held until released, the ring doubling), elapsed, a
 * failed ring. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/cuda/kernels_host.h"
#include "shared/gpu/evring.h"
#include "shared/gpu/staging.h"

#define CHUNK 4096u

typedef struct fixture {
    cugpu *g;
    cugpu_stream *s;
    char hold[64]; /* while it exists, the fake GPU starts nothing */
} fixture;

/* A fake GPU and a stream; with `held`, the stream waits for unhold. */
static void fx_open(fixture *f, bool held, uint64_t fail_at)
{
    char err[512];
    memset(f, 0, sizeof *f);
    f->g = cugpu_fake_new(&psb_kernels, fail_at, 0, err, sizeof err);
    if (!f->g)
        fail_msg("%s", err);
    if (held) {
        snprintf(f->hold, sizeof f->hold, "/tmp/psb-staging-hold-XXXXXX");
        int fd = mkstemp(f->hold);
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(cugpu_fake_hold(f->g, f->hold), 0);
    }
    assert_non_null(f->s = f->g->ops->stream_new(f->g));
}

static void fx_unhold(fixture *f)
{
    if (f->hold[0]) {
        unlink(f->hold);
        f->hold[0] = 0;
    }
}

static void fx_close(fixture *f)
{
    fx_unhold(f);
    f->g->ops->stream_free(f->g, f->s);
    cugpu_destroy(f->g);
}

static size_t count_list(const staging_chunk *k)
{
    size_t n = 0;
    for (; k; k = k->next)
        n++;
    return n;
}

/* ---- staging --------------------------------------------------------------------- */

static void test_room_take(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, false, 0);
    staging r;
    staging_init(&r, f.g, f.s, CHUNK, 0);
    assert_int_equal(staging_left(&r), 0);
    assert_int_equal(staging_room(&r, 100), 0);
    assert_int_equal(r.allocs, 1);
    assert_int_equal(staging_used(&r), 0);
    assert_int_equal(staging_left(&r), CHUNK);
    staging_take(&r, 100);
    assert_int_equal(staging_used(&r), 128); /* the next use starts aligned */
    staging_take(&r, 64);
    assert_int_equal(staging_used(&r), 192);
    /* What fits stays in the chunk: no close, no new chunk. */
    assert_int_equal(staging_room(&r, CHUNK - 192), 0);
    assert_int_equal(staging_used(&r), 192);
    staging_take(&r, CHUNK - 192 - 1); /* the end, not past it */
    assert_int_equal(staging_used(&r), CHUNK);
    assert_int_equal(r.allocs, 1);
    staging_free(&r);
    fx_close(&f);
}

/* Bytes written at the host side reach the device twin by a copy, and
 * come back: the twin is the chunk's own device memory. */
static void test_twin_roundtrip(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, false, 0);
    staging r;
    staging_init(&r, f.g, f.s, CHUNK, 0);
    assert_int_equal(staging_room(&r, 256), 0);
    staging_take(&r, 10); /* not at the chunk's start */
    size_t at = staging_used(&r);
    uint8_t *h = staging_host_at(&r, at);
    for (int i = 0; i < 256; i++)
        h[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(f.g->ops->copy_h2d(f.g, f.s, staging_dev_at(&r, at), h, 256), 0);
    staging_take(&r, 256);
    uint8_t *back = f.g->ops->host_alloc(f.g, 256);
    assert_non_null(back);
    memset(back, 0, 256);
    assert_int_equal(f.g->ops->copy_d2h(f.g, f.s, back, staging_dev_at(&r, at), 256), 0);
    assert_int_equal(f.g->ops->sync(f.g, f.s), 0);
    assert_memory_equal(back, h, 256);
    f.g->ops->host_free(f.g, back);
    staging_free(&r);
    fx_close(&f);
}

/* The GPU behind (held): a full chunk is closed and another made rather
 * than wait; once the GPU is past the closed one, it is reused. */
static void test_grow_then_reuse(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, true, 0);
    staging r;
    staging_init(&r, f.g, f.s, CHUNK, 0);
    assert_int_equal(staging_room(&r, CHUNK), 0);
    staging_chunk *first = r.cur;
    staging_take(&r, CHUNK);
    assert_int_equal(staging_room(&r, 1), 0); /* closes the first: not done (held) */
    assert_ptr_not_equal(r.cur, first);
    assert_ptr_equal(r.closed_head, first);
    assert_int_equal(r.allocs, 2);
    assert_int_equal(r.held, 2 * CHUNK);
    staging_chunk *second = r.cur;
    staging_take(&r, CHUNK);
    assert_int_equal(staging_room(&r, 1), 0); /* still held: a third */
    staging_chunk *third = r.cur;
    assert_int_equal(r.allocs, 3);
    assert_int_equal(count_list(r.closed_head), 2);
    staging_take(&r, CHUNK);
    fx_unhold(&f);
    assert_int_equal(f.g->ops->sync(f.g, f.s), 0);
    /* Done: the oldest closed chunk is reused, nothing new is made. */
    assert_int_equal(staging_room(&r, 1), 0);
    assert_int_equal(r.allocs, 3);
    assert_true(r.cur == first || r.cur == second || r.cur == third);
    assert_int_equal(staging_used(&r), 0);
    /* The first two were done, the third closed just now (done or not
     * yet): one is current, the others idle or closed. */
    assert_true(r.closed_head == NULL || (r.closed_head == r.closed_tail && r.closed_head == third));
    assert_int_equal(count_list(r.closed_head) + count_list(r.idle), 2);
    staging_free(&r);
    fx_close(&f);
}

/* A need larger than a chunk: a chunk of its own, rounded to 4 KiB, kept
 * and reused for what it holds. The stream is held until the big chunk
 * has been closed and passed over: done at once (an empty stream), it
 * would be the one taken next (a race the test does not want). */
static void test_large_need(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, true, 0);
    staging r;
    staging_init(&r, f.g, f.s, CHUNK, 0);
    assert_int_equal(staging_room(&r, 3 * CHUNK + 5), 0);
    staging_chunk *big = r.cur;
    assert_int_equal(big->cap, 4 * CHUNK);
    staging_take(&r, 3 * CHUNK + 5);
    assert_int_equal(staging_room(&r, CHUNK), 0); /* 4096 - 3*4096-64 left: closes */
    assert_ptr_not_equal(r.cur, big); /* the big one is closed, not done (held) */
    staging_take(&r, CHUNK);
    fx_unhold(&f);
    assert_int_equal(f.g->ops->sync(f.g, f.s), 0);
    assert_int_equal(staging_room(&r, 2 * CHUNK), 0); /* only the big one holds it */
    assert_ptr_equal(r.cur, big);
    assert_int_equal(r.allocs, 2);
    staging_free(&r);
    fx_close(&f);
}

static void *unhold_later(void *arg)
{
    fixture *f = arg;
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    unlink(f->hold);
    return NULL;
}

/* With a limit, the ring waits for the oldest closed chunk rather than
 * make one past it (the trainer's). */
static void test_limit_waits(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, true, 0);
    staging r;
    staging_init(&r, f.g, f.s, CHUNK, 2 * CHUNK);
    assert_int_equal(staging_room(&r, CHUNK), 0);
    staging_chunk *first = r.cur;
    staging_take(&r, CHUNK);
    assert_int_equal(staging_room(&r, CHUNK), 0); /* a second: within the limit */
    staging_take(&r, CHUNK);
    assert_int_equal(r.allocs, 2);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, unhold_later, &f), 0);
    assert_int_equal(staging_room(&r, CHUNK), 0); /* waits for the first */
    assert_int_equal(pthread_join(t, NULL), 0);
    f.hold[0] = 0;
    assert_int_equal(r.allocs, 2);
    assert_int_equal(r.held, 2 * CHUNK);
    assert_ptr_equal(r.cur, first);
    /* Larger than any chunk: made whatever the limit (nothing else holds it). */
    staging_take(&r, CHUNK);
    assert_int_equal(staging_room(&r, 2 * CHUNK), 0);
    assert_int_equal(r.cur->cap, 2 * CHUNK);
    assert_int_equal(r.allocs, 3);
    staging_free(&r);
    fx_close(&f);
}

/* After a drain: every chunk idle, the current one empty. */
static void test_reset(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, true, 0);
    staging r;
    staging_init(&r, f.g, f.s, CHUNK, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(staging_room(&r, CHUNK), 0);
        staging_take(&r, CHUNK);
    }
    assert_int_equal(count_list(r.closed_head), 2);
    fx_unhold(&f);
    assert_int_equal(f.g->ops->sync(f.g, f.s), 0);
    staging_reset(&r);
    assert_null(r.closed_head);
    assert_null(r.closed_tail);
    assert_int_equal(count_list(r.idle), 2);
    assert_int_equal(staging_used(&r), 0);
    assert_int_equal(staging_left(&r), CHUNK);
    /* The idle ones serve the next rounds: nothing new. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(staging_room(&r, CHUNK), 0);
        staging_take(&r, CHUNK);
    }
    assert_int_equal(r.allocs, 3);
    staging_free(&r);
    assert_int_equal(r.held, 0);
    assert_null(r.cur);
    fx_close(&f);
}

/* A failed stream: a limited ring's wait gives up with the reason. */
static void test_failed_stream(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, false, 1); /* the first operation fails: the first close's record */
    staging r;
    staging_init(&r, f.g, f.s, CHUNK, CHUNK);
    assert_int_equal(staging_room(&r, CHUNK), 0);
    staging_take(&r, CHUNK);
    assert_int_equal(staging_room(&r, CHUNK), -1);
    assert_non_null(strstr(r.err, "injected failure"));
    staging_free(&r);
    fx_close(&f);
}

/* ---- events ---------------------------------------------------------------------- */

static void test_marks_overwrite(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, true, 0);
    evring r;
    assert_int_equal(evring_init(&r, f.g, f.s, 4, false), 0);
    evmark m[7] = {0};
    for (int i = 1; i <= 6; i++) {
        assert_int_equal(evring_mark(&r, &m[i]), 0);
        assert_int_equal(m[i], (evmark)i); /* numbered in order */
    }
    assert_false(evring_held(&r, m[1]));
    assert_false(evring_held(&r, m[2]));
    for (int i = 3; i <= 6; i++)
        assert_true(evring_held(&r, m[i]));
    assert_int_equal(evring_done(&r, m[1]), 1); /* held: nothing ran */
    assert_int_equal(evring_done(&r, m[6]), 1);
    fx_unhold(&f);
    assert_int_equal(evring_wait(&r, m[4]), 0);
    assert_int_equal(evring_wait(&r, m[6]), 0);
    assert_int_equal(evring_done(&r, m[1]), 0); /* by a later point */
    float ms = -1;
    assert_int_equal(evring_elapsed(&r, m[3], m[6], &ms), 0);
    assert_true(ms >= 0);
    assert_int_equal(evring_elapsed(&r, m[1], m[6], &ms), -1); /* recorded again */
    evring_free(&r);
    fx_close(&f);
}

static void test_marks_grow(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, true, 0);
    evring r;
    assert_int_equal(evring_init(&r, f.g, f.s, 2, true), 0);
    evmark m[10] = {0};
    for (int i = 1; i <= 5; i++)
        assert_int_equal(evring_mark(&r, &m[i]), 0);
    assert_true(r.cap >= 5); /* grown: nothing was released */
    for (int i = 1; i <= 5; i++)
        assert_true(evring_held(&r, m[i]));
    size_t cap = r.cap;
    evring_release(&r, m[3]);
    assert_false(evring_held(&r, m[3]));
    assert_true(evring_held(&r, m[4]));
    for (int i = 6; i <= 9; i++) /* free slots, then a released one again */
        assert_int_equal(evring_mark(&r, &m[i]), 0);
    assert_int_equal(r.cap, cap);
    for (int i = 4; i <= 9; i++)
        assert_true(evring_held(&r, m[i]));
    fx_unhold(&f);
    assert_int_equal(f.g->ops->sync(f.g, f.s), 0);
    float ms = -1;
    assert_int_equal(evring_elapsed(&r, m[4], m[9], &ms), 0);
    assert_true(ms >= 0);
    evring_reset(&r);
    assert_int_equal(evring_done(&r, m[9]), 0);
    evring_free(&r);
    fx_close(&f);
}

static void test_marks_failed(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, false, 2);
    evring r;
    assert_int_equal(evring_init(&r, f.g, f.s, 4, false), 0);
    evmark a, b;
    assert_int_equal(evring_mark(&r, &a), 0);
    assert_int_equal(evring_mark(&r, &b), 0); /* its record fails on the stream */
    assert_int_equal(evring_wait(&r, b), -1);
    assert_non_null(strstr(f.g->err, "injected failure"));
    evring_fail(&r);
    evmark c;
    assert_int_equal(evring_mark(&r, &c), 0); /* numbered on, nothing recorded */
    assert_int_equal(c, b + 1);
    assert_int_equal(evring_done(&r, c), 0);
    assert_false(evring_held(&r, a));
    float ms;
    assert_int_equal(evring_elapsed(&r, a, b, &ms), -1);
    evring_free(&r);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_room_take),       cmocka_unit_test(test_twin_roundtrip),
        cmocka_unit_test(test_grow_then_reuse), cmocka_unit_test(test_large_need),
        cmocka_unit_test(test_limit_waits),     cmocka_unit_test(test_reset),
        cmocka_unit_test(test_failed_stream),   cmocka_unit_test(test_marks_overwrite),
        cmocka_unit_test(test_marks_grow),      cmocka_unit_test(test_marks_failed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
