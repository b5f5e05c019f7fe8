/* test_framed.c — the framed-stream reader (shared/framed.c): headers split
 * anywhere, payload chunks on whole units, back-to-back frames, broken
 * streams, compaction of the input buffer, direct receives with a carry,
 * and whole frames for buffered callers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "shared/framed.h"

/* ---- helpers ------------------------------------------------------------ */

/* Append a frame of type `type` (with batch = tag) and a payload of plen
 * bytes (byte i of frame `tag` is (tag * 31 + i) & 0xff) to buf. Returns
 * the new length. */
static size_t put_frame(uint8_t *buf, size_t len, const char *type, uint64_t tag, uint64_t plen)
{
    frame_hdr h = {0};
    h.type = FT_OTHER;
    h.type_str = frame_str_c(type);
    h.batch = tag;
    h.payload = plen;
    h.has = FH_BATCH | (plen ? FH_PAYLOAD : 0);
    size_t n = frame_encode_header(&h, buf + len, 1024);
    assert_true(n > 0);
    len += n;
    for (uint64_t i = 0; i < plen; i++)
        buf[len++] = (uint8_t)((tag * 31 + i) & 0xff);
    return len;
}

/* What a reader handed out, frame by frame. */
typedef struct seen {
    size_t frames;      /* headers */
    size_t ends;        /* FRAMED_END events */
    uint64_t tags[64];  /* batch of each header */
    uint64_t plens[64]; /* payload of each header */
    uint64_t got[64];   /* payload bytes seen per frame */
    size_t chunks;
    int bad_chunk;  /* a chunk that broke the unit rule or the order */
    int bad_byte;   /* a payload byte that differs */
    int bad_order;  /* END without header, header inside a payload */
    bool open;      /* between a header and its END */
} seen;

/* Take every event the reader has. Returns the last one (NEED_MORE unless
 * the stream broke). */
static framed_ev drain_events(framed *r, seen *s)
{
    for (;;) {
        framed_event ev;
        framed_ev k = framed_next(r, &ev);
        switch (k) {
        case FRAMED_HEADER:
            if (s->open)
                s->bad_order++;
            assert_true(s->frames < 64);
            s->tags[s->frames] = ev.hdr.batch;
            s->plens[s->frames] = ev.hdr.payload;
            s->got[s->frames] = 0;
            s->frames++;
            s->open = true;
            break;
        case FRAMED_DATA: {
            size_t f = s->frames - 1;
            if (!s->open || ev.n == 0 || ev.off != s->got[f] || ev.off + ev.n > s->plens[f])
                s->bad_chunk++;
            if ((ev.off + ev.n) % r->unit != 0 && ev.off + ev.n != s->plens[f])
                s->bad_chunk++;
            for (size_t i = 0; i < ev.n; i++)
                if (ev.data[i] != (uint8_t)((s->tags[f] * 31 + ev.off + i) & 0xff))
                    s->bad_byte++;
            s->got[f] += ev.n;
            s->chunks++;
            break;
        }
        case FRAMED_END:
            if (!s->open || s->got[s->frames - 1] != s->plens[s->frames - 1])
                s->bad_order++;
            s->open = false;
            s->ends++;
            break;
        default:
            return k;
        }
    }
}

static void assert_clean(const seen *s, size_t frames)
{
    assert_int_equal(s->frames, frames);
    assert_int_equal(s->ends, frames);
    assert_int_equal(s->bad_chunk, 0);
    assert_int_equal(s->bad_byte, 0);
    assert_int_equal(s->bad_order, 0);
    assert_false(s->open);
}

/* ---- tests -------------------------------------------------------------- */

/* A frame cut in two at every byte (header and payload), and fed one byte
 * at a time: the same header, the same payload, one END. */
static void test_split_everywhere(void **state)
{
    (void)state;
    uint8_t buf[256];
    size_t len = put_frame(buf, 0, "result", 7, 22); /* 5.5 floats */
    for (size_t cut = 0; cut <= len; cut++) {
        framed r;
        assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
        seen s = {0};
        assert_int_equal(framed_feed(&r, buf, cut), cut);
        assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
        assert_int_equal(framed_feed(&r, buf + cut, len - cut), len - cut);
        assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
        assert_clean(&s, 1);
        assert_int_equal(s.tags[0], 7);
        assert_int_equal(s.got[0], 22);
        assert_int_equal(framed_buffered(&r), 0);
        framed_free(&r);
    }
    framed r;
    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
    seen s = {0};
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(framed_feed(&r, buf + i, 1), 1);
        assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
    }
    assert_clean(&s, 1);
    assert_int_equal(s.chunks, 6); /* 5 whole floats, then the 2-byte end */
    framed_free(&r);
}

/* Chunks end on whole floats except at the payload's end, whatever the
 * arrival pattern; with unit 1 every byte goes out as it comes. */
static void test_whole_floats(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = put_frame(buf, 0, "result", 3, 301);
    for (size_t step = 1; step <= 9; step++) {
        for (unsigned unit = 1; unit <= 4; unit *= 4) {
            framed r;
            assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, unit), 0);
            seen s = {0};
            for (size_t off = 0; off < len; off += step) {
                size_t n = len - off < step ? len - off : step;
                assert_int_equal(framed_feed(&r, buf + off, n), n);
                assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
                /* Inside the payload at most a partial unit waits. */
                if (framed_in_payload(&r))
                    assert_true(framed_buffered(&r) < unit);
            }
            assert_clean(&s, 1);
            assert_int_equal(s.got[0], 301);
            framed_free(&r);
        }
    }
}

/* Several frames in one buffer, payloads empty, aligned and not: each
 * header, its chunks and its END in order. */
static void test_back_to_back(void **state)
{
    (void)state;
    uint8_t buf[1024];
    size_t len = 0;
    len = put_frame(buf, len, "welcome", 1, 0);
    len = put_frame(buf, len, "result", 2, 8);
    len = put_frame(buf, len, "result", 3, 6);
    len = put_frame(buf, len, "params", 4, 0);
    framed r;
    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
    framed_feed(&r, buf, len);
    framed_ev want[] = {FRAMED_HEADER, FRAMED_END, FRAMED_HEADER, FRAMED_DATA,      FRAMED_END,
                        FRAMED_HEADER, FRAMED_DATA, FRAMED_END,   FRAMED_HEADER,    FRAMED_END,
                        FRAMED_NEED_MORE};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        framed_event ev;
        assert_int_equal(framed_next(&r, &ev), want[i]);
        if (want[i] == FRAMED_DATA)
            assert_int_equal(ev.n, i == 3 ? 8 : 6);
    }
    framed_free(&r);

    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
    seen s = {0};
    framed_feed(&r, buf, len);
    assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
    assert_clean(&s, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(s.tags[i], i + 1);
    framed_free(&r);
}

/* A malformed header is FRAMED_BAD with nothing consumed; a payload over
 * the limit is FRAMED_TOO_LARGE with the header decoded. Both stick. */
static void test_bad_and_too_large(void **state)
{
    (void)state;
    const uint8_t zero_len[] = {0, 0, 0, 0, 0x80};
    const uint8_t long_len[] = {0, 1, 0, 1, 0x80};            /* 65537 */
    const uint8_t not_map[] = {0, 0, 0, 2, 0x92, 0x01};       /* an array */
    const uint8_t no_type[] = {0, 0, 0, 1, 0x80, 1, 2, 3, 4}; /* {} */
    const uint8_t *cases[] = {zero_len, long_len, not_map, no_type};
    const size_t lens[] = {sizeof zero_len, sizeof long_len, sizeof not_map, sizeof no_type};
    for (size_t i = 0; i < 4; i++) {
        framed r;
        assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
        framed_feed(&r, cases[i], lens[i]);
        framed_event ev;
        assert_int_equal(framed_next(&r, &ev), FRAMED_BAD);
        assert_true(strlen(framed_err(&r)) > 0);
        assert_int_equal(framed_buffered(&r), lens[i]);
        assert_int_equal(framed_next(&r, &ev), FRAMED_BAD);
        framed_free(&r);
    }
    /* A good frame, then a bad one: the good one comes out whole first. */
    uint8_t buf[256];
    size_t len = put_frame(buf, 0, "result", 5, 4);
    memcpy(buf + len, zero_len, sizeof zero_len);
    framed r;
    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
    framed_feed(&r, buf, len + sizeof zero_len);
    seen s = {0};
    assert_int_equal(drain_events(&r, &s), FRAMED_BAD);
    assert_clean(&s, 1);
    framed_free(&r);

    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, 100, 4), 0);
    len = put_frame(buf, 0, "push", 9, 101);
    framed_feed(&r, buf, len);
    framed_event ev;
    assert_int_equal(framed_next(&r, &ev), FRAMED_TOO_LARGE);
    assert_int_equal(ev.hdr.batch, 9);
    assert_int_equal(ev.hdr.payload, 101);
    assert_int_equal(framed_buffered(&r), 101); /* the header was consumed */
    assert_non_null(strstr(framed_err(&r), "exceeds the limit"));
    assert_int_equal(framed_next(&r, &ev), FRAMED_TOO_LARGE);
    framed_free(&r);

    /* At the limit is fine. */
    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, 101, 4), 0);
    framed_feed(&r, buf, len);
    s = (seen){0};
    assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
    assert_clean(&s, 1);
    framed_free(&r);
}

/* The buffer is reused: a partial header near the end moves to the front
 * when room runs short, and a long stream through a small buffer comes out
 * intact whatever the arrival pattern. */
static void test_compaction(void **state)
{
    (void)state;
    framed r;
    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
    /* Fill past half the buffer with one frame, then start another. */
    size_t big = FRAMED_MIN_CAP / 2 + 1000;
    uint8_t *buf = malloc(4 * FRAMED_MIN_CAP);
    assert_non_null(buf);
    size_t l1 = put_frame(buf, 0, "result", 1, big);
    size_t l2 = put_frame(buf, l1, "result", 2, 12);
    size_t cut = l1 + 5; /* 5 bytes into the second header */
    assert_int_equal(framed_feed(&r, buf, cut), cut);
    seen s = {0};
    assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
    assert_int_equal(framed_buffered(&r), 5);
    size_t room;
    uint8_t *at = framed_space(&r, &room);
    assert_ptr_equal(at, r.buf + 5); /* moved down */
    assert_int_equal(r.off, 0);
    assert_int_equal(room, r.cap - 5);
    framed_wrote(&r, 0);
    assert_int_equal(framed_feed(&r, buf + cut, l2 - cut), l2 - cut);
    assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
    assert_clean(&s, 2);
    /* Everything handed out: the next fill starts at the front. */
    at = framed_space(&r, &room);
    assert_ptr_equal(at, r.buf);
    assert_int_equal(room, r.cap);
    framed_free(&r);

    /* 60 frames, about 3.5 buffers in all, in pieces of varying size. */
    size_t len = 0;
    for (uint64_t f = 0; f < 60; f++)
        len = put_frame(buf, len, f % 3 ? "result" : "params", f, (f * 977) % 7001);
    assert_true(len > 3 * FRAMED_MIN_CAP);
    for (size_t piece = 1000; piece <= 70000; piece = piece * 3 + 7) {
        assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
        s = (seen){0};
        size_t off = 0, turn = 0;
        while (off < len) {
            size_t want = piece + (turn++ % 5) * 13;
            size_t n = framed_feed(&r, buf + off, len - off < want ? len - off : want);
            assert_true(n > 0);
            off += n;
            assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
        }
        assert_clean(&s, 60);
        framed_free(&r);
    }
    free(buf);
}

/* The owner receives payload bytes outside the buffer: the carry goes
 * first, a partial float after them comes back as the new carry, and the
 * position goes on from there. */
static void test_direct(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = put_frame(buf, 0, "push", 4, 40);
    size_t hl = len - 40;
    framed r;
    assert_int_equal(framed_init(&r, FRAMED_MIN_CAP, UINT64_MAX, 4), 0);
    framed_feed(&r, buf, hl + 6);
    seen s = {0};
    assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
    assert_int_equal(s.got[0], 4);
    assert_true(framed_in_payload(&r));
    assert_int_equal(framed_payload_left(&r), 36);
    assert_int_equal(framed_payload_off(&r), 4);

    uint8_t dst[64];
    size_t carry = framed_direct_carry(&r, dst);
    assert_int_equal(carry, 2);
    memcpy(dst + carry, buf + hl + 6, 11); /* "received" */
    size_t keep = framed_direct_done(&r, dst, carry + 11);
    assert_int_equal(keep, 12);
    assert_memory_equal(dst, buf + hl + 4, 12);
    assert_int_equal(framed_payload_off(&r), 16);
    assert_int_equal(framed_buffered(&r), 1); /* the new carry */

    /* Too little for a whole float: nothing taken, all carried. */
    carry = framed_direct_carry(&r, dst);
    assert_int_equal(carry, 1);
    memcpy(dst + carry, buf + hl + 17, 1);
    assert_int_equal(framed_direct_done(&r, dst, 2), 0);
    assert_int_equal(framed_buffered(&r), 2);
    assert_int_equal(framed_payload_off(&r), 16);

    /* The rest, to the payload's end: all taken, END next. */
    carry = framed_direct_carry(&r, dst);
    memcpy(dst + carry, buf + hl + 18, 22);
    assert_int_equal(framed_direct_done(&r, dst, carry + 22), 24);
    assert_memory_equal(dst, buf + hl + 16, 24);
    assert_false(framed_in_payload(&r));
    assert_int_equal(framed_buffered(&r), 0);
    framed_event ev;
    assert_int_equal(framed_next(&r, &ev), FRAMED_END);
    assert_int_equal(framed_next(&r, &ev), FRAMED_NEED_MORE);

    /* The stream goes on in the buffer. */
    len = put_frame(buf, 0, "push", 5, 3);
    framed_feed(&r, buf, len);
    s = (seen){0};
    assert_int_equal(drain_events(&r, &s), FRAMED_NEED_MORE);
    assert_clean(&s, 1);
    framed_free(&r);
}

/* framed_whole: a frame buffered whole. Every prefix asks for more, and
 * says how much: the prefix, the header, then the payload. */
static void test_whole(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = put_frame(buf, 0, "assign", 6, 50);
    size_t hl = len - 50;
    len = put_frame(buf, len, "start", 7, 0); /* a second frame behind it */
    frame_decoder d;
    frame_decoder_init(&d, 1000);
    frame_hdr h;
    const uint8_t *payload;
    size_t used, need;
    for (size_t cut = 0; cut < hl + 50; cut++) {
        assert_int_equal(framed_whole(&d, buf, cut, &h, &payload, &used, &need), FRAME_NEED_MORE);
        assert_int_equal(used, 0);
        assert_true(need > cut);
        size_t want = cut < FRAME_PREFIX_LEN ? FRAME_PREFIX_LEN : cut < hl ? hl : hl + 50;
        assert_int_equal(need, want);
    }
    assert_int_equal(framed_whole(&d, buf, len, &h, &payload, &used, &need), FRAME_OK);
    assert_int_equal(used, hl + 50);
    assert_ptr_equal(payload, buf + hl);
    assert_int_equal(h.batch, 6);
    assert_int_equal(h.payload, 50);
    assert_int_equal(framed_whole(&d, buf + used, len - used, &h, &payload, &used, &need), FRAME_OK);
    assert_int_equal(h.batch, 7);
    assert_int_equal(h.payload, 0);
    frame_decoder_free(&d);

    frame_decoder_init(&d, 49);
    assert_int_equal(framed_whole(&d, buf, hl, &h, &payload, &used, &need), FRAME_TOO_LARGE);
    const uint8_t bad[] = {0, 0, 0, 0};
    assert_int_equal(framed_whole(&d, bad, sizeof bad, &h, &payload, &used, &need), FRAME_BAD);
    assert_int_equal(used, 0);
    frame_decoder_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_everywhere), cmocka_unit_test(test_whole_floats),
        cmocka_unit_test(test_back_to_back),     cmocka_unit_test(test_bad_and_too_large),
        cmocka_unit_test(test_compaction),       cmocka_unit_test(test_direct),
        cmocka_unit_test(test_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
