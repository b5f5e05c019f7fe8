/* test_future.c — the futures layer with real kinds on both devices: the
 * admission rules, answers, failures, the drain step (reset and shutdown
 * while device work is in flight) and the batch-update kind's arithmetic.
 *
 * Every scenario runs on the `cpu` device (answers inline) and on the
 * `test` device (answers later, from a worker thread through the event
 * loop), so the asynchronous path is exercised here under ASan and TSan
 * as well as in the integration tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <event2/event.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "server/bounds.h"
#include "server/future.h"
#include "server/kinds.h"
#include "shared/mean.h"
#include "shared/part.h"
#include "devfixture.h"
#include "devspec_of.h"

typedef struct fixture {
    dev_fixture d; /* the event loop, pool, device, metrics and kind */
    futures fut;
    futures_metrics fm;
    /* what the hooks saw */
    int answers, fails;
    uint64_t answered_batch, answered_round;
    uint64_t answered_slots; /* bitmap of f->pushed at the answer */
    float last[64];
    size_t last_n;
    uint8_t raw[16384]; /* the last answer's bytes, whole (narrow answers) */
    size_t raw_len;
    char fail_msg[256];
} fixture;

static void note_answer(void *ctx, future *f, psbuf *result)
{
    fixture *x = ctx;
    x->answers++;
    x->answered_batch = f->batch;
    x->answered_round = f->round;
    x->answered_slots = f->pushed[0];
    x->last_n = result->len / 4 < 64 ? result->len / 4 : 64;
    memcpy(x->last, result->data, x->last_n * 4);
    x->raw_len = result->len < sizeof x->raw ? result->len : sizeof x->raw;
    memcpy(x->raw, result->data, x->raw_len);
}

static void note_fail(void *ctx, future *f, frame_errcode code, const char *msg)
{
    (void)f;
    (void)code;
    fixture *x = ctx;
    x->fails++;
    snprintf(x->fail_msg, sizeof x->fail_msg, "%s", msg);
}

static void fut_open(fixture *x, const char *dev, const kind_config *kc)
{
    memset(x, 0, sizeof *x);
    setenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US", "300", 1);
    devfx_open_kind(&x->d, devspec_of(dev), 1 << 20, kc);
    x->fm = devfx_futures_metrics(&x->d);
    futures_hooks h = {.answer = note_answer, .fail = note_fail, .ctx = x};
    assert_int_equal(futures_init(&x->fut, x->d.k, kc->trainers, &h, &x->fm), 0);
}

static void fut_close(fixture *x)
{
    futures_destroy(&x->fut);
    devfx_close(&x->d);
}

/* Run the loop until `answers + fails` reaches n (the test device answers
 * from its worker thread through an eventfd). */
static void fx_wait(fixture *x, int n)
{
    for (int i = 0; i < 10000 && x->answers + x->fails < n; i++)
        event_base_loop(x->d.base, EVLOOP_ONCE);
    assert_int_equal(x->answers + x->fails, n);
}

static frame_hdr dense_hdr(uint64_t batch, uint64_t bucket, uint64_t count)
{
    frame_hdr h = {0};
    h.type = FT_PUSH;
    h.batch = batch;
    h.bucket = bucket;
    h.layout = LAYOUT_DENSE;
    h.count = count;
    h.payload = count * 4;
    h.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_COUNT | FH_PAYLOAD;
    return h;
}

/* One whole dense push from slot, in chunks of `chunk` floats. */
static frame_errcode push_dense(fixture *x, push_ctx *p, uint32_t slot, uint64_t batch, const float *v,
                                size_t n, size_t chunk)
{
    frame_hdr h = dense_hdr(batch, 0, n);
    char msg[256];
    frame_errcode code = futures_admit(&x->fut, &h, slot, slot, p, msg, sizeof msg);
    if (code != ERR_NONE)
        return code;
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        assert_int_equal(futures_push_data(&x->fut, p, off * 4, (const uint8_t *)(v + off), m * 4), 0);
    }
    futures_push_done(&x->fut, p);
    return ERR_NONE;
}

static const char *const devices[] = {"cpu", "test"};

/* ---- narrow pushes (f16, bf16: docs/protocol.md "Narrow pushes") ---- */

static uint16_t narrow_of(half_type t, float v) { return t == HALF_FP16 ? half_fp16_of(v) : half_bf16_of(v); }
static float widen_of(half_type t, uint16_t v)
{
    return t == HALF_FP16 ? half_fp16_to_float(v) : half_bf16_to_float(v);
}

static frame_hdr narrow_hdr(uint64_t batch, uint64_t count, half_type t)
{
    frame_hdr h = dense_hdr(batch, 0, count);
    h.dtype = frame_str_c(frame_dtype_name(t));
    h.payload = count * 2;
    return h;
}

#define NARROW_N 5000u /* more than a slice of kind_fold_narrow's scratch (2048) */

/* A chunk of a push's payload as the connection hands it over: where the
 * kind offers a place (direct: futures_push_direct, the stash of kind
 * average's first push) received there, in pieces that end on a float
 * boundary, else through futures_push_data (no further than the kind says
 * is worth reading). */
static void deliver(fixture *x, push_ctx *p, uint64_t off, const uint8_t *src, size_t n, bool direct)
{
    while (n > 0) {
        size_t max = 0, m;
        uint8_t *dst = direct ? futures_push_direct(&x->fut, p, off, &max) : NULL;
        if (dst && (m = (max < n ? max : n) & ~(size_t)3) > 0) {
            memcpy(dst, src, m);
            futures_push_direct_done(&x->fut, p, off, m);
        } else {
            m = max > 0 && max < n && (max & ~(size_t)3) > 0 ? max & ~(size_t)3 : n;
            assert_int_equal(futures_push_data(&x->fut, p, off, src, m), 0);
        }
        off += m;
        src += m;
        n -= m;
    }
}

/* Every kind that takes narrow pushes, on the cpu, test and cuda (the fake
 * GPU's) devices, f16 and bf16, 1 to 4 trainers, pushes interleaved in
 * chunks of different sizes, received directly where the kind offers it
 * and through push_data: the answer is narrow(mean of the widened
 * pushes), the mean as f32 pushes of those values give it (the sum in the
 * order the pushes reached each element for kind average, in slot order
 * for average-batch; times 1/N), bit for bit. */
static void test_narrow_mean_bit_exact(void **state)
{
    (void)state;
    static uint16_t v[4][NARROW_N];
    static uint8_t order[NARROW_N][4]; /* the slots in the order they reached each element */
    static uint8_t nreached[NARROW_N];
    static const char *const narrow_devices[] = {"cpu", "test", "fake-cuda"};
    for (int d = 0; d < 3; d++)
        for (int kid = 0; kid < 2; kid++)
            for (int ti = 0; ti < 2; ti++)
                for (uint32_t ntr = 1; ntr <= 4; ntr++) {
                    bool direct = (ntr + (uint32_t)ti) % 2 == 0;
                    half_type t = ti ? HALF_BF16 : HALF_FP16;
                    fixture x;
                    kind_config kc = {.id = kid ? KIND_AVERAGE_BATCH : KIND_AVERAGE, .trainers = ntr};
                    fut_open(&x, narrow_devices[d], &kc);
                    uint32_t seed = 12345u + ntr;
                    for (uint32_t s = 0; s < ntr; s++)
                        for (uint32_t i = 0; i < NARROW_N; i++) {
                            seed = seed * 1664525u + 1013904223u;
                            /* magnitudes from 2^-20 to 2^10, both signs: rounding shows everywhere */
                            float mag = ldexpf(1.0f + (float)(seed >> 9) / 8388608.0f, (int)(seed % 31) - 20);
                            v[s][i] = narrow_of(t, (seed & 1) ? -mag : mag);
                        }
                    frame_hdr h = narrow_hdr(3, NARROW_N, t);
                    push_ctx p[4] = {{0}};
                    char msg[256];
                    for (uint32_t s = 0; s < ntr; s++)
                        assert_int_equal(futures_admit(&x.fut, &h, s, s, &p[s], msg, sizeof msg), ERR_NONE);
                    /* Each push in chunks of its own size (elements, even: whole floats of the
                     * payload), round robin: a chunk meets the others' progress mid-way, so
                     * one call copies, adds and adds-and-scales parts of it. */
                    const size_t chunk[4] = {1234, 500, 2002, 3000};
                    size_t at[4] = {0, 0, 0, 0};
                    memset(nreached, 0, sizeof nreached);
                    for (bool more = true; more;) {
                        more = false;
                        for (uint32_t s = 0; s < ntr; s++) {
                            if (at[s] == NARROW_N)
                                continue;
                            size_t m = NARROW_N - at[s] < chunk[s] ? NARROW_N - at[s] : chunk[s];
                            for (size_t i = at[s]; i < at[s] + m; i++) {
                                uint8_t r = nreached[i]++;
                                order[i][r] = (uint8_t)(kid ? r : s); /* average-batch: slot order */
                            }
                            deliver(&x, &p[s], at[s] * 2, (const uint8_t *)(v[s] + at[s]), m * 2, direct);
                            at[s] += m;
                            more = true;
                        }
                    }
                    for (uint32_t s = 0; s < ntr; s++)
                        futures_push_done(&x.fut, &p[s]);
                    fx_wait(&x, 1);
                    assert_int_equal(x.answers, 1);
                    assert_int_equal(x.raw_len, NARROW_N * 2);
                    float scale = mean_scale(ntr);
                    for (uint32_t i = 0; i < NARROW_N; i++) {
                        float sum = widen_of(t, v[order[i][0]][i]);
                        for (uint32_t s = 1; s < ntr; s++)
                            sum += widen_of(t, v[order[i][s]][i]);
                        uint16_t want = narrow_of(t, sum * scale), got;
                        memcpy(&got, x.raw + 2 * i, 2);
                        if (got != want)
                            fail_msg("%s %s %s %u trainers: element %u is 0x%04x, want 0x%04x", narrow_devices[d],
                                     kid ? "average-batch" : "average", half_type_name(t), ntr, i, got, want);
                    }
                    fut_close(&x);
                }
}

/* The rules of narrow pushes at the futures layer: one type per (batch,
 * bucket) (shape_mismatch, naming both), no narrow sparse push, no narrow
 * push to a kind that does not fold them (unsupported); the payload's
 * size follows the type (frame_push_payload_size), and what a slot holds
 * is the narrow payload's bytes. */
static void test_narrow_rules(void **state)
{
    (void)state;
    fixture x;
    kind_config kc = {.id = KIND_AVERAGE, .trainers = 2};
    fut_open(&x, "cpu", &kc);
    push_ctx a = {0}, b = {0};
    char msg[256];
    frame_hdr h16 = narrow_hdr(0, 8, HALF_FP16), hb = narrow_hdr(0, 8, HALF_BF16), h32 = dense_hdr(0, 0, 8);
    h32.dtype = frame_str_c("f32");
    assert_int_equal(frame_push_payload_size(&h16), 16);
    assert_int_equal(frame_push_payload_size(&h32), 32);
    assert_int_equal(futures_admit(&x.fut, &h16, 0, 0, &a, msg, sizeof msg), ERR_NONE);
    assert_int_equal(x.fut.held_bytes[0], 16);
    assert_int_equal(futures_admit(&x.fut, &hb, 1, 1, &b, msg, sizeof msg), ERR_SHAPE_MISMATCH);
    assert_non_null(strstr(msg, "dtype bf16 differs from f16 of the other pushes of batch 0 bucket 0"));
    assert_int_equal(futures_admit(&x.fut, &h32, 1, 1, &b, msg, sizeof msg), ERR_SHAPE_MISMATCH);
    assert_non_null(strstr(msg, "dtype f32 differs from f16"));
    /* An f32 future refuses a narrow push the same way. */
    frame_hdr h32b = dense_hdr(1, 0, 8);
    frame_hdr h16b = narrow_hdr(1, 8, HALF_FP16);
    push_ctx c = {0}, d = {0};
    assert_int_equal(futures_admit(&x.fut, &h32b, 0, 0, &c, msg, sizeof msg), ERR_NONE);
    assert_int_equal(futures_admit(&x.fut, &h16b, 1, 1, &d, msg, sizeof msg), ERR_SHAPE_MISMATCH);
    assert_non_null(strstr(msg, "dtype f16 differs from f32"));
    /* Sparse pushes stay f32. */
    frame_hdr hs = {0};
    hs.type = FT_PUSH;
    hs.batch = 2;
    hs.layout = LAYOUT_SPARSE;
    hs.rows = 4;
    hs.cols = 2;
    hs.nnz = 1;
    hs.dtype = frame_str_c("bf16");
    hs.has = FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_ROWS | FH_COLS | FH_NNZ | FH_PAYLOAD;
    hs.payload = frame_push_payload_size(&hs);
    assert_int_equal(hs.payload, 8 + 2 * 4); /* a sparse payload is f32 whatever the name */
    assert_int_equal(futures_admit(&x.fut, &hs, 0, 0, &d, msg, sizeof msg), ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "a sparse push in bf16"));
    /* Abort the open pushes (nothing folded) before closing. */
    futures_push_abort(&x.fut, &a);
    futures_push_abort(&x.fut, &c);
    fut_close(&x);
    /* A kind that does not fold narrow pushes refuses them. */
    kind_config bu = {.id = KIND_BATCH_UPDATE, .trainers = 2};
    bu.bu.in_features = 4;
    bu.bu.out_features = 2;
    bu.bu.lr = 0.1f;
    bu.bu.momentum = 0.9f;
    bu.bu.parts = 1;
    fut_open(&x, "cpu", &bu);
    frame_hdr hbu = narrow_hdr(0, 10, HALF_BF16);
    push_ctx e = {0};
    assert_int_equal(futures_admit(&x.fut, &hbu, 0, 0, &e, msg, sizeof msg), ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "to a server of kind batch-update"));
    fut_close(&x);
}

static void test_average_mean_both_kinds(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++)
        for (int kid = 0; kid < 2; kid++) {
            fixture x;
            kind_config kc = {.id = kid ? KIND_AVERAGE_BATCH : KIND_AVERAGE, .trainers = 3};
            fut_open(&x, devices[d], &kc);
            push_ctx p[3] = {{0}};
            float v[3][10];
            for (int t = 0; t < 3; t++)
                for (int i = 0; i < 10; i++)
                    v[t][i] = (float)(t * 10 + i);
            /* Interleave the three pushes chunk by chunk, as sockets do. */
            frame_hdr h = dense_hdr(7, 0, 10);
            char msg[256];
            for (int t = 0; t < 3; t++)
                assert_int_equal(futures_admit(&x.fut, &h, (uint32_t)t, (uint64_t)t, &p[t], msg, sizeof msg),
                                 ERR_NONE);
            for (size_t off = 0; off < 10; off += 4)
                for (int t = 0; t < 3; t++) {
                    size_t m = 10 - off < 4 ? 10 - off : 4;
                    assert_int_equal(
                        futures_push_data(&x.fut, &p[t], off * 4, (const uint8_t *)(v[t] + off), m * 4), 0);
                }
            for (int t = 0; t < 3; t++)
                futures_push_done(&x.fut, &p[t]);
            fx_wait(&x, 1);
            assert_int_equal(x.answers, 1);
            assert_int_equal(x.answered_batch, 7);
            assert_int_equal(x.answered_slots, 7u);
            for (int i = 0; i < 10; i++) {
                float want = ((float)i + (float)(10 + i) + (float)(20 + i)) * mean_scale(3);
                assert_true(fabsf(x.last[i] - want) <= 1e-5f * fabsf(want) + 1e-6f);
            }
            /* The resolved key is stale now; a new batch opens. */
            assert_int_equal(push_dense(&x, &p[0], 0, 7, v[0], 10, 10), ERR_STALE_BATCH);
            assert_int_equal(push_dense(&x, &p[0], 0, 8, v[0], 10, 10), ERR_NONE);
            fut_close(&x);
        }
}

static void test_admission_rules(void **state)
{
    (void)state;
    fixture x;
    kind_config kc = {.id = KIND_AVERAGE, .trainers = 2};
    fut_open(&x, "cpu", &kc);
    push_ctx a = {0}, b = {0};
    float v[4] = {1, 2, 3, 4};
    assert_int_equal(push_dense(&x, &a, 0, 0, v, 4, 4), ERR_NONE);
    /* The same slot again: duplicate. */
    assert_int_equal(push_dense(&x, &b, 0, 0, v, 4, 4), ERR_DUPLICATE_PUSH);
    /* Another count: shape mismatch. */
    assert_int_equal(push_dense(&x, &b, 1, 0, v, 3, 3), ERR_SHAPE_MISMATCH);
    /* A trainer lost: the open future it has not pushed to fails... */
    futures_member_lost(&x.fut, 1, 1);
    assert_int_equal(x.fails, 1);
    assert_non_null(strstr(x.fail_msg, "rank 1 disconnected"));
    /* ...later pushes to it are peer_lost, and so is a new future. */
    assert_int_equal(push_dense(&x, &b, 0, 0, v, 4, 4), ERR_PEER_LOST);
    assert_int_equal(push_dense(&x, &b, 0, 1, v, 4, 4), ERR_PEER_LOST);
    /* It comes back: new futures are admitted again. */
    futures_member_back(&x.fut, 1);
    assert_int_equal(push_dense(&x, &b, 0, 1, v, 4, 4), ERR_NONE);
    fut_close(&x);
}

/* What one trainer may hold (futures_limits): pushes and bytes per slot,
 * counted from admission until the answer, a failure or an abort, and the
 * distinct buckets of a session. */
static void test_hold_bounds(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        fixture x;
        kind_config kc = {.id = KIND_AVERAGE, .trainers = 2};
        fut_open(&x, devices[d], &kc);
        futures_limits lim = {.pushes = 3, .bytes = 40, .buckets = 2};
        snprintf(lim.source, sizeof lim.source, "test");
        futures_set_limits(&x.fut, &lim);
        push_ctx p[8] = {{0}};
        float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        char msg[256];
        /* Slot 0: three pushes of 8 bytes wait (far ahead); the fourth is
         * refused. */
        for (int i = 0; i < 3; i++)
            assert_int_equal(push_dense(&x, &p[i], 0, 100 + (uint64_t)i, v, 2, 2), ERR_NONE);
        assert_int_equal(x.fut.held_n[0], 3);
        assert_int_equal(x.fut.held_bytes[0], 24);
        frame_hdr h = dense_hdr(103, 0, 2);
        assert_int_equal(futures_admit(&x.fut, &h, 0, 0, &p[3], msg, sizeof msg), ERR_TOO_LARGE);
        assert_non_null(strstr(msg, "has 3 pushes (24 bytes) waiting"));
        assert_non_null(strstr(msg, "(test)"));
        /* Slot 1 is counted on its own: joining slot 0's futures resolves
         * them, and both slots hold nothing after the answers. */
        for (int i = 0; i < 3; i++)
            assert_int_equal(push_dense(&x, &p[4], 1, 100 + (uint64_t)i, v, 2, 2), ERR_NONE);
        fx_wait(&x, 3);
        assert_int_equal(x.fut.held_n[0], 0);
        assert_int_equal(x.fut.held_n[1], 0);
        assert_int_equal(x.fut.held_bytes[0], 0);
        /* Bytes: 5 floats (20 bytes) twice fit 40, a third does not. */
        assert_int_equal(push_dense(&x, &p[0], 0, 200, v, 5, 5), ERR_NONE);
        assert_int_equal(push_dense(&x, &p[1], 0, 201, v, 5, 5), ERR_NONE);
        h = dense_hdr(202, 0, 5);
        assert_int_equal(futures_admit(&x.fut, &h, 0, 0, &p[2], msg, sizeof msg), ERR_TOO_LARGE);
        /* A push refused half-way gives its share back. */
        assert_int_equal(x.fut.held_bytes[0], 40);
        futures_member_lost(&x.fut, 0, 0); /* nobody else pushed them: they fail, memory back */
        assert_int_equal(x.fut.held_n[0], 0);
        assert_int_equal(x.fut.held_bytes[0], 0);
        futures_member_back(&x.fut, 0);
        /* Buckets: bucket 0 resolved above; one more new bucket, then no more. */
        assert_int_equal(push_dense(&x, &p[0], 0, 300, v, 2, 2), ERR_NONE);
        assert_int_equal(push_dense(&x, &p[1], 1, 300, v, 2, 2), ERR_NONE);
        fx_wait(&x, 6); /* 3 answers, 2 failures, and this one */
        h = dense_hdr(300, 1, 2);
        assert_int_equal(futures_admit(&x.fut, &h, 0, 0, &p[2], msg, sizeof msg), ERR_NONE);
        assert_int_equal(futures_push_data(&x.fut, &p[2], 0, (const uint8_t *)v, 8), 0);
        futures_push_done(&x.fut, &p[2]);
        h = dense_hdr(300, 1, 2);
        assert_int_equal(futures_admit(&x.fut, &h, 1, 1, &p[3], msg, sizeof msg), ERR_NONE);
        assert_int_equal(futures_push_data(&x.fut, &p[3], 0, (const uint8_t *)v, 8), 0);
        futures_push_done(&x.fut, &p[3]);
        for (int i = 0; i < 1000 && x.fut.table.nmarks < 2; i++)
            event_base_loop(x.d.base, EVLOOP_ONCE);
        assert_int_equal(x.fut.table.nmarks, 2);
        h = dense_hdr(300, 2, 2);
        assert_int_equal(futures_admit(&x.fut, &h, 0, 0, &p[4], msg, sizeof msg), ERR_TOO_LARGE);
        assert_non_null(strstr(msg, "bucket 2 would be the 3-th bucket"));
        futures_reset(&x.fut);
        /* Without the job's model (the flags' bounds), a trainer holding
         * nothing may push any size: --max-payload bounds that one. */
        lim.first_free = true;
        lim.buckets = 0;
        futures_set_limits(&x.fut, &lim);
        assert_int_equal(push_dense(&x, &p[0], 0, 400, v, 8, 8), ERR_NONE); /* 32 bytes */
        h = dense_hdr(401, 0, 3);
        assert_int_equal(futures_admit(&x.fut, &h, 0, 0, &p[1], msg, sizeof msg), ERR_TOO_LARGE); /* 32 + 12 > 40 */
        futures_reset(&x.fut);
        float big[16] = {0};
        assert_int_equal(push_dense(&x, &p[0], 0, 500, big, 16, 16), ERR_NONE); /* 64 bytes > 40: the first */
        h = dense_hdr(501, 0, 1);
        assert_int_equal(futures_admit(&x.fut, &h, 0, 0, &p[1], msg, sizeof msg), ERR_TOO_LARGE);
        futures_reset(&x.fut);
        assert_int_equal(x.fut.held_n[0], 0);
        fut_close(&x);
    }
}

/* A trainer that pushed alone and left: its futures fail (nobody waits
 * for them, and their memory goes back), while a future a connected
 * trainer pushed to stays open (the lost one's push in it is whole). */
static void test_lost_alone_futures_fail(void **state)
{
    (void)state;
    fixture x;
    kind_config kc = {.id = KIND_AVERAGE, .trainers = 3};
    fut_open(&x, "cpu", &kc);
    push_ctx a = {0}, b = {0}, c = {0};
    float v[4] = {1, 2, 3, 4};
    assert_int_equal(push_dense(&x, &a, 0, 7, v, 4, 4), ERR_NONE); /* slot 0 alone */
    assert_int_equal(push_dense(&x, &b, 0, 8, v, 4, 4), ERR_NONE); /* slots 0 and 1 */
    assert_int_equal(push_dense(&x, &c, 1, 8, v, 4, 4), ERR_NONE);
    futures_member_lost(&x.fut, 0, 0);
    /* batch 7 failed (its only pusher left); batch 8 waits: slot 1 is in it */
    assert_non_null(pending_find(&x.fut.table, 7, 0));
    assert_int_equal(pending_find(&x.fut.table, 7, 0)->state, FUTURE_FAILED);
    assert_int_equal(pending_find(&x.fut.table, 8, 0)->state, FUTURE_OPEN);
    assert_int_equal(x.fut.held_n[0], 1); /* its push into batch 8 still counts */
    assert_int_equal(x.fut.held_n[1], 1);
    assert_int_equal(x.fails, 1);
    fut_close(&x);
}

/* The bounds a job's model gives (server/bounds.h): two batches of one
 * trainer's buckets. */
static void test_bounds_from_model(void **state)
{
    (void)state;
    futures_limits l;
    modelconf m;
    memset(&m, 0, sizeof m);
    m.cls = MODEL_SYNTHETIC;
    m.syn.buckets = 3;
    m.syn.bucket_floats = 2000;
    bounds_from_model(&m, &l);
    assert_int_equal(l.pushes, 6);
    assert_int_equal(l.bytes, 48000);
    assert_int_equal(l.buckets, 3);
    m.syn.sparse = true;
    m.syn.sparse_cols = 16; /* 125 rows of 16 floats and an index each */
    bounds_from_model(&m, &l);
    assert_int_equal(l.bytes, 2 * 3 * 125 * (8 + 64));
    uint64_t sizes[2] = {10, 30};
    m.syn.sparse = false;
    m.syn.buckets = 2;
    m.syn.sizes = sizes;
    bounds_from_model(&m, &l);
    assert_int_equal(l.bytes, 2 * 160);
    memset(&m, 0, sizeof m);
    m.cls = MODEL_DUMMY; /* 2 layers of 4x4 (+4), a 5x4 embedding */
    m.dummy.num_embeddings = 5;
    m.dummy.embedding_dim = 4;
    m.dummy.dense_input_size = 4;
    m.dummy.dense_output_size = 4;
    m.dummy.dense_layers_count = 2;
    bounds_from_model(&m, &l);
    assert_int_equal(l.pushes, 2 * 5);
    assert_int_equal(l.bytes, 2 * 4 * (2 * 20 + 20));
    m.dummy.sparse = true; /* the embedding's rows travel sparse, with their indices */
    bounds_from_model(&m, &l);
    assert_int_equal(l.bytes, 2 * (4 * 40 + 5 * (8 + 16)));
    memset(&m, 0, sizeof m);
    m.cls = MODEL_LINEAR;
    m.linear.in_features = 100;
    m.linear.out_features = 30;
    bounds_from_model(&m, &l);
    assert_int_equal(l.pushes, 2);
    assert_int_equal(l.bytes, 2 * 4 * 3030);
}

/* Refusals name the trainer lost first (the cause: others may leave
 * because of it), while it is still lost; once it is back, one still
 * lost. */
static void test_refusal_names_the_first_lost(void **state)
{
    (void)state;
    fixture x;
    kind_config kc = {.id = KIND_AVERAGE, .trainers = 4};
    fut_open(&x, "cpu", &kc);
    push_ctx p = {0};
    char msg[256];
    frame_hdr h = dense_hdr(0, 0, 4);
    futures_member_lost(&x.fut, 2, 12);
    futures_member_lost(&x.fut, 1, 11);
    futures_member_lost(&x.fut, 3, 13);
    assert_int_equal(futures_admit(&x.fut, &h, 0, 10, &p, msg, sizeof msg), ERR_PEER_LOST);
    assert_string_equal(msg, "trainer rank 12 disconnected; no bucket can complete");
    futures_member_back(&x.fut, 1);
    assert_int_equal(futures_admit(&x.fut, &h, 0, 10, &p, msg, sizeof msg), ERR_PEER_LOST);
    assert_non_null(strstr(msg, "trainer rank 12 "));
    futures_member_back(&x.fut, 2);
    assert_int_equal(futures_admit(&x.fut, &h, 0, 10, &p, msg, sizeof msg), ERR_PEER_LOST);
    assert_non_null(strstr(msg, "trainer rank 13 "));
    futures_member_back(&x.fut, 3);
    assert_int_equal(futures_admit(&x.fut, &h, 0, 10, &p, msg, sizeof msg), ERR_NONE);
    futures_push_abort(&x.fut, &p);
    fut_close(&x);
}

static void test_push_lost_midway_fails_future(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        fixture x;
        kind_config kc = {.id = KIND_AVERAGE, .trainers = 2};
        fut_open(&x, devices[d], &kc);
        push_ctx a = {0}, b = {0};
        float v[8] = {0};
        assert_int_equal(push_dense(&x, &a, 0, 0, v, 8, 8), ERR_NONE);
        frame_hdr h = dense_hdr(0, 0, 8);
        char msg[128];
        assert_int_equal(futures_admit(&x.fut, &h, 1, 1, &b, msg, sizeof msg), ERR_NONE);
        assert_int_equal(futures_push_data(&x.fut, &b, 0, (const uint8_t *)v, 16), 0);
        futures_push_lost(&x.fut, &b);
        assert_null(b.f);
        assert_int_equal(x.fails, 1);
        assert_int_equal(x.answers, 0);
        fut_close(&x);
    }
}

/* Reset and shutdown while the device still works on a future: the drain
 * waits for it, nobody is answered, nothing leaks (ASan) or races (TSan). */
static void test_drain_in_flight(void **state)
{
    (void)state;
    for (int kid = 0; kid < 3; kid++)
        for (int shutdown = 0; shutdown < 2; shutdown++) {
            fixture x;
            kind_config kc = {.id = (kind_id)kid, .trainers = 2,
                              .bu = {.in_features = 3, .out_features = 2, .lr = 0.1f, .momentum = 0.9f,
                                     .parts = 1}};
            setenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US", "20000", 1);
            fut_open(&x, "test", &kc);
            push_ctx a = {0}, b = {0};
            size_t n = kid == KIND_BATCH_UPDATE ? 8 : 16;
            float v[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
            assert_int_equal(push_dense(&x, &a, 0, 0, v, n, 3), ERR_NONE);
            assert_int_equal(push_dense(&x, &b, 1, 0, v, n, 5), ERR_NONE);
            assert_int_equal(x.fut.resolving, 1); /* in flight on the worker */
            if (!shutdown) {
                futures_reset(&x.fut);
                assert_int_equal(x.fut.resolving, 0);
                assert_int_equal(x.answers, 0);
                /* A fresh pass starts at batch 0 again. */
                assert_int_equal(push_dense(&x, &a, 0, 0, v, n, 4), ERR_NONE);
                assert_int_equal(push_dense(&x, &b, 1, 0, v, n, 4), ERR_NONE);
                fx_wait(&x, 1);
                assert_int_equal(x.answers, 1);
            }
            fut_close(&x); /* shutdown: futures_destroy drains */
            assert_int_equal(x.fails, 0);
        }
}

/* The trace's hook (futures_hooks.trace): begin as a future goes to the
 * kind, end before its answer (answered), and end unanswered for one
 * drained in flight; a future's own fields carry its mark between. */
static char trace_seen[64];
static void note_trace(void *ctx, future *f, bool begin, bool answered)
{
    fixture *x = ctx;
    size_t n = strlen(trace_seen);
    if (begin) {
        assert_int_equal(f->trace_t0_ns, 0); /* a fresh future: no mark yet */
        f->trace_t0_ns = 42;
    } else {
        assert_int_equal(f->trace_t0_ns, 42);
    }
    snprintf(trace_seen + n, sizeof trace_seen - n, "%s%d", begin ? "B" : answered ? "E" : "X", x->answers);
}

static void test_trace_hook(void **state)
{
    (void)state;
    for (int drained = 0; drained < 2; drained++) {
        fixture x;
        kind_config kc = {.id = KIND_AVERAGE, .trainers = 2};
        setenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US", drained ? "20000" : "300", 1);
        fut_open(&x, "test", &kc);
        x.fut.hooks.trace = note_trace;
        x.fut.hooks.trace_ctx = &x;
        trace_seen[0] = '\0';
        push_ctx a = {0}, b = {0};
        float v[4] = {2, 4, 6, 8};
        assert_int_equal(push_dense(&x, &a, 0, 0, v, 4, 4), ERR_NONE);
        assert_string_equal(trace_seen, ""); /* not every push in yet */
        assert_int_equal(push_dense(&x, &b, 1, 0, v, 4, 4), ERR_NONE);
        assert_string_equal(trace_seen, "B0");
        if (drained) {
            futures_reset(&x.fut);
            assert_string_equal(trace_seen, "B0X0"); /* ended, unanswered */
        } else {
            fx_wait(&x, 1);
            assert_string_equal(trace_seen, "B0E0"); /* ended before the answer went */
        }
        fut_close(&x);
    }
}

/* A trainer lost after its push is in, while the bucket resolves: the
 * others still get the answer. */
static void test_lost_while_resolving(void **state)
{
    (void)state;
    fixture x;
    kind_config kc = {.id = KIND_AVERAGE, .trainers = 2};
    fut_open(&x, "test", &kc);
    push_ctx a = {0}, b = {0};
    float v[4] = {2, 4, 6, 8};
    assert_int_equal(push_dense(&x, &a, 0, 0, v, 4, 4), ERR_NONE);
    assert_int_equal(push_dense(&x, &b, 1, 0, v, 4, 4), ERR_NONE);
    futures_member_lost(&x.fut, 1, 1);
    assert_int_equal(x.fails, 0); /* nothing open was missing its push */
    fx_wait(&x, 1);
    assert_int_equal(x.answers, 1);
    assert_true(x.last[3] == 8.0f);
    fut_close(&x);
}

/* The seed's BatchUpdateParameterServer: rounds, the mean of the round's
 * gradients, SGD with momentum, fetch, reset to a fresh model. */
static void test_batch_update_rounds(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        fixture x;
        kind_config kc = {.id = KIND_BATCH_UPDATE, .trainers = 2,
                          .bu = {.in_features = 2, .out_features = 2, .lr = 0.5f, .momentum = 0.9f,
                                 .seed = 42, .parts = 1}};
        fut_open(&x, devices[d], &kc);
        const size_t n = 6; /* W 2x2 + b 2 */
        frame_hdr out = {0};
        psbuf *pb;
        assert_int_equal(x.d.k->ops->fetch(x.d.k, &out, &pb), 0);
        assert_int_equal(out.count, n);
        assert_int_equal(out.total, n);
        assert_int_equal(out.offset, 0);
        assert_int_equal(out.round, 0);
        float p0[6], buf[6] = {0};
        memcpy(p0, pb->data, sizeof p0);
        psbuf_unref(pb);
        for (size_t i = 0; i < n; i++)
            assert_true(fabsf(p0[i]) <= 1.0f / sqrtf(2.0f)); /* U(-k, k), k = 1/sqrt(in) */

        /* Wrong count: shape_mismatch; sparse: unsupported. */
        push_ctx a = {0}, b = {0};
        float g1[6] = {1, 2, 3, 4, 5, 6}, g2[6] = {3, 2, 1, 0, -1, -2};
        assert_int_equal(push_dense(&x, &a, 0, 0, g1, 5, 5), ERR_SHAPE_MISMATCH);
        float want[6];
        memcpy(want, p0, sizeof want);
        for (int round = 0; round < 2; round++) {
            /* The trainers' batch numbers do not matter: rounds do. */
            assert_int_equal(push_dense(&x, &a, 0, 100 + round, g1, n, 4), ERR_NONE);
            assert_int_equal(push_dense(&x, &a, 0, 100 + round, g1, n, 4), ERR_DUPLICATE_PUSH);
            assert_int_equal(push_dense(&x, &b, 1, 7, g2, n, 2), ERR_NONE);
            fx_wait(&x, round + 1);
            for (size_t i = 0; i < n; i++) {
                float g = (g1[i] + g2[i]) * mean_scale(2);
                buf[i] = round == 0 ? g : 0.9f * buf[i] + g;
                want[i] = want[i] - 0.5f * buf[i];
                assert_true(fabsf(x.last[i] - want[i]) <= 1e-6f);
            }
            assert_int_equal(x.answered_batch, round);
            assert_int_equal(x.answered_round, round + 1);
        }
        assert_int_equal(x.d.k->ops->fetch(x.d.k, &out, &pb), 0);
        assert_int_equal(out.round, 2);
        assert_memory_equal(pb->data, x.last, n * 4);
        psbuf_unref(pb);
        /* Reset: a fresh model from the seed, round 0. */
        futures_reset(&x.fut);
        assert_int_equal(x.d.k->ops->fetch(x.d.k, &out, &pb), 0);
        assert_int_equal(out.round, 0);
        assert_memory_equal(pb->data, p0, n * 4);
        psbuf_unref(pb);
        fut_close(&x);
    }
}

/* Several servers split the flat vector into contiguous parts. */
static void test_batch_update_parts(void **state)
{
    (void)state;
    uint64_t total = 3030, covered = 0, prev_end = 0;
    for (uint32_t p = 0; p < 7; p++) {
        uint64_t b = part_begin(total, p, 7), e = part_begin(total, p + 1, 7);
        assert_int_equal(b, prev_end);
        assert_true(e - b == total / 7 || e - b == total / 7 + 1);
        covered += e - b;
        prev_end = e;
    }
    assert_int_equal(covered, total);
    /* A part's initial values are that slice of the whole vector. */
    fixture whole, part;
    kind_config kc = {.id = KIND_BATCH_UPDATE, .trainers = 1,
                      .bu = {.in_features = 100, .out_features = 30, .lr = 0.001f, .momentum = 0.9f,
                             .seed = 5, .parts = 1}};
    fut_open(&whole, "cpu", &kc);
    kc.bu.part = 2;
    kc.bu.parts = 3;
    fut_open(&part, "cpu", &kc);
    frame_hdr o1 = {0}, o2 = {0};
    psbuf *b1, *b2;
    assert_int_equal(whole.d.k->ops->fetch(whole.d.k, &o1, &b1), 0);
    assert_int_equal(part.d.k->ops->fetch(part.d.k, &o2, &b2), 0);
    assert_int_equal(o2.offset, 2020);
    assert_int_equal(o2.count, 1010);
    assert_memory_equal(b2->data, b1->data + 4 * 2020, 1010 * 4);
    psbuf_unref(b1);
    psbuf_unref(b2);
    fut_close(&whole);
    fut_close(&part);
}

/* The test device completes jobs in submission order, later than submit. */
static int order_seen[32], norder;
static void order_done(device_job *j) { order_seen[norder++] = (int)(intptr_t)j->arg; }

/* The per-trainer straggler metric: each slot's push complete, measured
 * from the future's first push received whole, goes to that slot's stats
 * only; a slot without one (NULL) records nothing; the last pusher lags
 * the most. */
static void test_lag_per_slot(void **state)
{
    (void)state;
    fixture x;
    kind_config kc = {.id = KIND_AVERAGE, .trainers = 3};
    fut_open(&x, "cpu", &kc);
    stats *lag0 = metrics_get(x.d.m, "lag0"), *lag2 = metrics_get(x.d.m, "lag2");
    futures_set_lag_metric(&x.fut, 0, lag0);
    futures_set_lag_metric(&x.fut, 2, lag2);
    float v[4] = {1, 2, 3, 4};
    for (uint64_t b = 0; b < 3; b++) {
        push_ctx p[3] = {{0}};
        assert_int_equal(push_dense(&x, &p[0], 0, b, v, 4, 4), ERR_NONE);
        assert_int_equal(push_dense(&x, &p[1], 1, b, v, 4, 4), ERR_NONE);
        struct timespec ms2 = {0, 2000000};
        nanosleep(&ms2, NULL); /* slot 2 is the straggler */
        assert_int_equal(push_dense(&x, &p[2], 2, b, v, 4, 4), ERR_NONE);
        fx_wait(&x, (int)b + 1);
    }
    assert_int_equal(lag0->count, 3);
    assert_int_equal(lag2->count, 3);
    assert_true(lag2->min >= 2.0);
    assert_true(lag0->max < lag2->min);
    futures_set_lag_metric(&x.fut, 2, NULL);
    fut_close(&x);
}

/* Where the clock starts (issue 26), for every kind with futures on both
 * devices: slot 0's header is admitted, its payload arrives DELAY later,
 * then slot 1 pushes whole. The seed's figures start when slot 0's push is
 * whole, the *_from_header ones at its header: by construction each of the
 * latter is at least DELAY more (no timing threshold). Slot 0, whole first,
 * lags 0; slot 1's lag is the straggler figure itself. */
static void test_clock_starts_when_the_first_push_is_whole(void **state)
{
    (void)state;
    const double delay_ms = 20;
    for (int d = 0; d < 2; d++)
        for (int kid = 0; kid < 3; kid++) {
            fixture x;
            kind_config kc = {.id = kid == 0 ? KIND_AVERAGE : kid == 1 ? KIND_AVERAGE_BATCH : KIND_BATCH_UPDATE,
                              .trainers = 2,
                              .bu = {.in_features = 2, .out_features = 2, .lr = 0.5f, .momentum = 0.9f,
                                     .seed = 42, .parts = 1}};
            fut_open(&x, devices[d], &kc);
            stats *lag0 = metrics_get(x.d.m, "lag0"), *lag1 = metrics_get(x.d.m, "lag1");
            futures_set_lag_metric(&x.fut, 0, lag0);
            futures_set_lag_metric(&x.fut, 1, lag1);
            const size_t n = 6; /* batch-update: W 2x2 + b 2 */
            float v[6] = {1, 2, 3, 4, 5, 6};
            frame_hdr h = dense_hdr(0, 0, n);
            char msg[256];
            push_ctx p0 = {0}, p1 = {0};
            assert_int_equal(futures_admit(&x.fut, &h, 0, 0, &p0, msg, sizeof msg), ERR_NONE);
            struct timespec ts = {0, (long)(delay_ms * 1e6)};
            nanosleep(&ts, NULL);
            assert_int_equal(futures_push_data(&x.fut, &p0, 0, (const uint8_t *)v, n * 4), 0);
            futures_push_done(&x.fut, &p0);
            assert_int_equal(push_dense(&x, &p1, 1, 0, v, n, n), ERR_NONE);
            fx_wait(&x, 1);
            assert_int_equal(x.answers, 1);
            stats *m[] = {x.fm.batch, x.fm.straggler, x.fm.batch_from_header, x.fm.straggler_from_header, lag0,
                          lag1};
            for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
                assert_int_equal(m[i]->count, 1);
            /* (1e-9: the ms are quotients of whole ns; one rounding each) */
            assert_true(x.fm.straggler_from_header->min >= x.fm.straggler->max + delay_ms - 1e-9);
            assert_true(x.fm.batch_from_header->min >= x.fm.batch->max + delay_ms - 1e-9);
            assert_true(x.fm.batch->min >= x.fm.straggler->max);
            assert_true(lag0->max == 0.0);
            assert_true(lag1->max == x.fm.straggler->max);
            fut_close(&x);
        }
}

static void test_device_order(void **state)
{
    (void)state;
    setenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US", "500", 1);
    struct event_base *base = event_base_new();
    char err[128];
    bufpool pool;
    bufpool_init(&pool, 1 << 20);
    device *d = device_new((device_spec){.kind = DEVICE_TEST}, base, &pool, err, sizeof err);
    assert_non_null(d);
    device_job jobs[32];
    norder = 0;
    for (int i = 0; i < 32; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].op = JOB_BARRIER;
        jobs[i].done = order_done;
        jobs[i].arg = (void *)(intptr_t)i;
        device_submit(d, &jobs[i]);
    }
    assert_int_equal(norder, 0); /* nothing completes inside submit */
    while (norder < 16)
        event_base_loop(base, EVLOOP_ONCE);
    device_drain(d); /* the rest, delivered before drain returns */
    assert_int_equal(norder, 32);
    for (int i = 0; i < 32; i++)
        assert_int_equal(order_seen[i], i);
    device_destroy(d);
    event_base_free(base);
    /* The trainer's staged device is not a server's. */
    assert_null(device_new((device_spec){.kind = DEVICE_STAGED}, NULL, &pool, err, sizeof err));
    assert_string_equal(err, "device 'staged' is not in this build (cpu, cuda[:N]; test and fake-cuda for tests)");
    bufpool_destroy(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_average_mean_both_kinds),
        cmocka_unit_test(test_narrow_mean_bit_exact),
        cmocka_unit_test(test_narrow_rules),
        cmocka_unit_test(test_admission_rules),
        cmocka_unit_test(test_hold_bounds),
        cmocka_unit_test(test_bounds_from_model),
        cmocka_unit_test(test_lost_alone_futures_fail),
        cmocka_unit_test(test_refusal_names_the_first_lost),
        cmocka_unit_test(test_push_lost_midway_fails_future),
        cmocka_unit_test(test_drain_in_flight),
        cmocka_unit_test(test_lost_while_resolving),
        cmocka_unit_test(test_trace_hook),
        cmocka_unit_test(test_batch_update_rounds),
        cmocka_unit_test(test_batch_update_parts),
        cmocka_unit_test(test_device_order),
        cmocka_unit_test(test_lag_per_slot),
        cmocka_unit_test(test_clock_starts_when_the_first_push_is_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
