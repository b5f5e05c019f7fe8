/* test_frame.c — unit tests for shared/frame (wire protocol v1 header codec).
 *
 * Covers: encode -> decode round trip of every frame type (every field and
 * the `has` bits survive, consumed == 4 + H); incremental decoding (every
 * strict prefix is FRAME_NEED_MORE and consumes nothing); every malformed
 * header the decoder must refuse with FRAME_BAD and a reason in d->err;
 * FRAME_TOO_LARGE with the header still decoded; tolerance of unknown keys,
 * unknown types and non-minimal msgpack encodings; the error-code name
 * table; frame_push_payload_size (incl. overflow); and the encoder's
 * capacity and FRAME_HDR_MAX limits.
 *
 * Malformed headers are built with msgpack-c's packer or by hand, and are
 * always copied into exactly-sized heap buffers so that AddressSanitizer
 * catches any read past the bytes handed to the decoder. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <malloc.h>
#include <msgpack.h>

#include "shared/frame.h"
#include "shared/half.h"

/* ---- helpers ------------------------------------------------------------ */

/* Prefix `body` (n bytes) with its u32 big-endian length, in a fresh heap
 * buffer of exactly 4 + n + extra bytes (extra bytes are 0xAB). */
static uint8_t *make_frame(const void *body, size_t n, size_t extra, size_t *len)
{
    uint8_t *f = malloc(4 + n + extra + 1);
    assert_non_null(f);
    f[0] = (uint8_t)(n >> 24);
    f[1] = (uint8_t)(n >> 16);
    f[2] = (uint8_t)(n >> 8);
    f[3] = (uint8_t)n;
    if (n)
        memcpy(f + 4, body, n);
    memset(f + 4 + n, 0xAB, extra);
    *len = 4 + n + extra;
    return f;
}

static uint8_t *make_frame_sbuf(const msgpack_sbuffer *sb, size_t *len)
{
    return make_frame(sb->data, sb->size, 0, len);
}

static void pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void assert_str_is(frame_str s, const char *want)
{
    if (!frame_str_eq(s, want)) {
        print_error("string is \"%.*s\" (len %u), want \"%s\"\n", (int)s.n, s.p ? s.p : "",
                    (unsigned)s.n, want);
        fail();
    }
}

static void assert_str_same(frame_str a, frame_str b)
{
    assert_int_equal(a.n, b.n);
    if (a.n)
        assert_memory_equal(a.p, b.p, a.n);
}

/* Compare every field flagged in `has` (and has, type, layout, payload). */
static void assert_hdr_same(const frame_hdr *a, const frame_hdr *b)
{
    assert_int_equal(a->type, b->type);
    assert_str_same(a->type_str, b->type_str);
    assert_int_equal(a->has, b->has);
    assert_int_equal(a->payload, b->payload);
    assert_int_equal(a->layout, b->layout);
#define CMPU(bit, f)                                                                               \
    if (a->has & (bit))                                                                            \
        assert_int_equal(a->f, b->f);
#define CMPS(bit, f)                                                                               \
    if (a->has & (bit))                                                                            \
        assert_str_same(a->f, b->f);
    CMPU(FH_VERSION, version)
    CMPS(FH_ROLE, role)
    CMPU(FH_RANK, rank)
    CMPS(FH_TOKEN, token)
    CMPU(FH_SERVER, server)
    CMPU(FH_TRAINERS, trainers)
    CMPU(FH_BATCH, batch)
    CMPU(FH_BUCKET, bucket)
    CMPS(FH_DTYPE, dtype)
    CMPS(FH_LAYOUT, layout_str)
    CMPU(FH_COUNT, count)
    CMPU(FH_ROWS, rows)
    CMPU(FH_COLS, cols)
    CMPU(FH_NNZ, nnz)
    CMPS(FH_CODE, code)
    CMPS(FH_MESSAGE, message)
#undef CMPU
#undef CMPS
}

/* Encode h, decode it again from an exactly-sized heap copy, check that
 * consumed == 4 + H, and return the decoded header in *out (its strings
 * point into *keep, which the caller frees). */
static void roundtrip(const frame_hdr *h, frame_hdr *out, uint8_t **keep)
{
    uint8_t buf[4096];
    size_t n = frame_encode_header(h, buf, sizeof buf);
    assert_true(n > FRAME_PREFIX_LEN);
    uint32_t hl = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
    assert_int_equal(n, FRAME_PREFIX_LEN + hl);
    uint8_t *copy = malloc(n);
    assert_non_null(copy);
    memcpy(copy, buf, n);

    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    size_t consumed = 12345;
    frame_status st = frame_decode_header(&d, copy, n, out, &consumed);
    if (st != FRAME_OK)
        print_error("decode failed: %d (%s)\n", st, d.err);
    assert_int_equal(st, FRAME_OK);
    assert_int_equal(consumed, n);
    frame_decoder_free(&d);
    *keep = copy;
}

/* Decode a raw frame (exactly-sized copy) and expect FRAME_BAD, nothing
 * consumed, and a reason in d->err. */
static void expect_bad(const uint8_t *frame, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, frame, len);
    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    d.err[0] = '\0';
    frame_hdr h;
    size_t consumed = 999;
    frame_status st = frame_decode_header(&d, copy, len, &h, &consumed);
    if (st != FRAME_BAD)
        print_error("expected FRAME_BAD, got %d\n", st);
    assert_int_equal(st, FRAME_BAD);
    assert_int_equal(consumed, 0);
    assert_true(strlen(d.err) > 0);
    frame_decoder_free(&d);
    free(copy);
}

static void expect_bad_sbuf(const msgpack_sbuffer *sb)
{
    size_t len;
    uint8_t *f = make_frame_sbuf(sb, &len);
    expect_bad(f, len);
    free(f);
}

/* ---- round trips ------------------------------------------------------ */

static void test_roundtrip_hello(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_HELLO;
    h.has = FH_VERSION | FH_ROLE | FH_RANK | FH_TOKEN;
    h.version = FRAME_PROTOCOL_VERSION;
    h.role = frame_str_c("trainer");
    h.rank = 17;
    h.token = frame_str_c("s3cr3t-t0ken");
    frame_hdr o;
    uint8_t *keep;
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.type, FT_HELLO);
    assert_str_is(o.type_str, "hello");
    assert_int_equal(o.has, FH_VERSION | FH_ROLE | FH_RANK | FH_TOKEN);
    assert_int_equal(o.version, 1);
    assert_str_is(o.role, "trainer");
    assert_int_equal(o.rank, 17);
    assert_str_is(o.token, "s3cr3t-t0ken");
    assert_int_equal(o.payload, 0);
    assert_int_equal(o.layout, LAYOUT_NONE);
    free(keep);
}

static void test_roundtrip_welcome(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_WELCOME;
    h.has = FH_VERSION | FH_SERVER | FH_TRAINERS;
    h.version = 1;
    h.server = 3;
    h.trainers = 64;
    frame_hdr o;
    uint8_t *keep;
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.type, FT_WELCOME);
    assert_str_is(o.type_str, "welcome");
    assert_int_equal(o.has, FH_VERSION | FH_SERVER | FH_TRAINERS);
    assert_int_equal(o.version, 1);
    assert_int_equal(o.server, 3);
    assert_int_equal(o.trainers, 64);
    free(keep);
}

static void test_roundtrip_dense_push(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_PUSH;
    h.has = FH_PAYLOAD | FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_COUNT;
    h.batch = 0x123456789abcULL; /* needs a uint64 encoding */
    h.bucket = 255;
    h.dtype = frame_str_c("f32");
    h.layout_str = frame_str_c("dense");
    h.count = 70000; /* uint32 encoding */
    h.payload = 4 * h.count;
    frame_hdr o;
    uint8_t *keep;
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.type, FT_PUSH);
    assert_str_is(o.type_str, "push");
    assert_int_equal(o.has, h.has);
    assert_int_equal(o.batch, 0x123456789abcULL);
    assert_int_equal(o.bucket, 255);
    assert_str_is(o.dtype, "f32");
    assert_str_is(o.layout_str, "dense");
    assert_int_equal(o.layout, LAYOUT_DENSE);
    assert_int_equal(o.count, 70000);
    assert_int_equal(o.payload, 280000);
    assert_int_equal(frame_push_payload_size(&o), 280000);
    free(keep);
}

static void test_roundtrip_sparse_push(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_PUSH;
    h.has = FH_PAYLOAD | FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_ROWS | FH_COLS | FH_NNZ;
    h.batch = 0;
    h.bucket = UINT64_MAX;
    h.dtype = frame_str_c("f32");
    h.layout_str = frame_str_c("sparse");
    h.rows = 1000000;
    h.cols = 16;
    h.nnz = 5;
    h.payload = 5 * (8 + 16 * 4);
    frame_hdr o;
    uint8_t *keep;
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.type, FT_PUSH);
    assert_int_equal(o.has, h.has);
    assert_int_equal(o.batch, 0);
    assert_int_equal(o.bucket, UINT64_MAX);
    assert_int_equal(o.layout, LAYOUT_SPARSE);
    assert_str_is(o.layout_str, "sparse");
    assert_str_is(o.dtype, "f32");
    assert_int_equal(o.rows, 1000000);
    assert_int_equal(o.cols, 16);
    assert_int_equal(o.nnz, 5);
    assert_int_equal(o.payload, 360);
    assert_int_equal(frame_push_payload_size(&o), 360);
    free(keep);
}

static void test_roundtrip_result(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_RESULT;
    h.has = FH_PAYLOAD | FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_COUNT;
    h.batch = 41;
    h.bucket = 2;
    h.dtype = frame_str_c("f32");
    h.layout_str = frame_str_c("dense");
    h.count = 3;
    h.payload = 12;
    /* What the decoder derives (the encoder ignores both). */
    h.layout = LAYOUT_DENSE;
    h.type_str = frame_str_c("result");
    frame_hdr o;
    uint8_t *keep;
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.type, FT_RESULT);
    assert_str_is(o.type_str, "result");
    assert_hdr_same(&h, &o);
    free(keep);
}

static void test_roundtrip_error(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_ERROR;
    h.has = FH_CODE | FH_MESSAGE | FH_BATCH | FH_BUCKET;
    h.code = frame_str_c("shape_mismatch");
    h.message = frame_str_c("count 10 differs from 12 (\xc3\xa9t\xc3\xa9)");
    h.batch = 9;
    h.bucket = 4;
    frame_hdr o;
    uint8_t *keep;
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.type, FT_ERROR);
    assert_str_is(o.type_str, "error");
    assert_int_equal(o.has, FH_CODE | FH_MESSAGE | FH_BATCH | FH_BUCKET);
    assert_str_is(o.code, "shape_mismatch");
    assert_str_is(o.message, "count 10 differs from 12 (\xc3\xa9t\xc3\xa9)");
    assert_int_equal(o.batch, 9);
    assert_int_equal(o.bucket, 4);
    free(keep);

    /* Without the optional batch/bucket, and an empty message. */
    h.has = FH_CODE | FH_MESSAGE;
    h.code = frame_str_c("auth");
    h.message = frame_str_c("");
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.has, FH_CODE | FH_MESSAGE);
    assert_str_is(o.code, "auth");
    assert_int_equal(o.message.n, 0);
    free(keep);
}

/* Every field at once, plus an FT_OTHER type and an unknown layout. */
static void test_roundtrip_all_fields_other_type(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_OTHER;
    h.type_str = frame_str_c("gossip");
    h.has = FH_PAYLOAD | FH_VERSION | FH_ROLE | FH_RANK | FH_TOKEN | FH_SERVER | FH_TRAINERS |
            FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_COUNT | FH_ROWS | FH_COLS | FH_NNZ |
            FH_CODE | FH_MESSAGE;
    h.payload = 1;
    h.version = 2;
    h.role = frame_str_c("observer");
    h.rank = 3;
    h.token = frame_str_c("t");
    h.server = 4;
    h.trainers = 5;
    h.batch = 6;
    h.bucket = 7;
    h.dtype = frame_str_c("bf16");
    h.layout_str = frame_str_c("csr");
    h.count = 8;
    h.rows = 9;
    h.cols = 10;
    h.nnz = 11;
    h.code = frame_str_c("peer_lost");
    h.message = frame_str_c("m");
    frame_hdr o;
    uint8_t *keep;
    roundtrip(&h, &o, &keep);
    assert_int_equal(o.type, FT_OTHER);
    assert_str_is(o.type_str, "gossip");
    assert_int_equal(o.layout, LAYOUT_OTHER);
    h.layout = LAYOUT_OTHER; /* the encoder ignores h.layout; the decoder derives it */
    assert_hdr_same(&h, &o);
    assert_int_equal(o.payload, 1);
    assert_int_equal(o.nnz, 11);
    assert_str_is(o.role, "observer");
    free(keep);
}

/* ---- incremental decoding ---------------------------------------------- */

static void test_incremental(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_PUSH;
    h.has = FH_PAYLOAD | FH_BATCH | FH_BUCKET | FH_DTYPE | FH_LAYOUT | FH_COUNT;
    h.batch = 1000;
    h.bucket = 1;
    h.dtype = frame_str_c("f32");
    h.layout_str = frame_str_c("dense");
    h.count = 2;
    h.payload = 8;
    uint8_t buf[512];
    size_t n = frame_encode_header(&h, buf, sizeof buf);
    assert_true(n > 4);

    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    for (size_t len = 0; len < n; len++) {
        uint8_t *p = malloc(len ? len : 1); /* exactly len bytes: ASan sees overreads */
        assert_non_null(p);
        memcpy(p, buf, len);
        frame_hdr o;
        size_t consumed = 777;
        frame_status st = frame_decode_header(&d, p, len, &o, &consumed);
        if (st != FRAME_NEED_MORE)
            print_error("prefix of %zu/%zu bytes gave %d\n", len, n, st);
        assert_int_equal(st, FRAME_NEED_MORE);
        assert_int_equal(consumed, 0);
        free(p);
    }
    /* The full header, then the full header followed by payload bytes. */
    for (int extra = 0; extra <= 1; extra++) {
        size_t len = n + (extra ? 8 : 0);
        uint8_t *p = malloc(len);
        assert_non_null(p);
        memcpy(p, buf, n);
        memset(p + n, 0x5a, len - n);
        frame_hdr o;
        size_t consumed = 0;
        assert_int_equal(frame_decode_header(&d, p, len, &o, &consumed), FRAME_OK);
        assert_int_equal(consumed, n);
        assert_int_equal(o.type, FT_PUSH);
        assert_int_equal(o.batch, 1000);
        assert_int_equal(o.payload, 8);
        free(p);
    }
    frame_decoder_free(&d);
}

/* Two frames back to back, decoded with one decoder, strings of the first
 * still valid after the second decode (they point into the input). */
static void test_back_to_back(void **state)
{
    frame_hdr a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.type = FT_HELLO;
    a.has = FH_ROLE | FH_RANK;
    a.role = frame_str_c("trainer");
    a.rank = 1;
    b.type = FT_ERROR;
    b.has = FH_CODE;
    b.code = frame_str_c("unsupported");
    uint8_t buf[256];
    size_t na = frame_encode_header(&a, buf, sizeof buf);
    assert_true(na > 0);
    size_t nb = frame_encode_header(&b, buf + na, sizeof buf - na);
    assert_true(nb > 0);

    frame_decoder d;
    frame_decoder_init(&d, 16);
    frame_hdr o1, o2;
    size_t c1, c2;
    assert_int_equal(frame_decode_header(&d, buf, na + nb, &o1, &c1), FRAME_OK);
    assert_int_equal(c1, na);
    assert_int_equal(frame_decode_header(&d, buf + c1, na + nb - c1, &o2, &c2), FRAME_OK);
    assert_int_equal(c2, nb);
    assert_int_equal(o1.type, FT_HELLO);
    assert_str_is(o1.role, "trainer");
    assert_int_equal(o2.type, FT_ERROR);
    assert_str_is(o2.code, "unsupported");
    assert_int_equal(o2.has, FH_CODE);
    frame_decoder_free(&d);
}

/* ---- malformed headers ------------------------------------------------- */

static void test_bad_header_length(void **state)
{
    /* H = 0: refused at once, even with nothing after the prefix. */
    const uint8_t zero[] = {0, 0, 0, 0};
    expect_bad(zero, sizeof zero);
    /* H = 0 followed by bytes that would be a valid map: still refused. */
    const uint8_t zero_more[] = {0, 0, 0, 0, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa1, 'x'};
    expect_bad(zero_more, sizeof zero_more);
    /* H = 65537: refused without waiting for 65537 bytes. */
    const uint8_t big[] = {0, 1, 0, 1};
    expect_bad(big, sizeof big);
    /* H = 0xffffffff. */
    const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 0x80};
    expect_bad(huge, sizeof huge);
    /* H = 65536 with too few bytes is NEED_MORE, not BAD (the limit is inclusive). */
    const uint8_t max[] = {0, 1, 0, 0, 0x81};
    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed = 5;
    assert_int_equal(frame_decode_header(&d, max, sizeof max, &o, &consumed), FRAME_NEED_MORE);
    assert_int_equal(consumed, 0);
    frame_decoder_free(&d);
}

/* A header of exactly FRAME_HDR_MAX bytes is valid and encodable; one byte
 * more is neither. */
static void test_header_max_size(void **state)
{
    /* fixmap(2) "type" "error" "message" str16(L): 1+5+6+8+3+L bytes. */
    size_t L = FRAME_HDR_MAX - 23;
    char *msg = malloc(L + 2);
    assert_non_null(msg);
    memset(msg, 'q', L + 1);
    msg[L] = '\0';

    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_ERROR;
    h.has = FH_MESSAGE;
    h.message = frame_str_c(msg);
    size_t cap = FRAME_HDR_MAX + 100;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    size_t n = frame_encode_header(&h, buf, cap);
    assert_int_equal(n, 4 + FRAME_HDR_MAX);
    assert_int_equal(buf[0], 0);
    assert_int_equal(buf[1], 1);
    assert_int_equal(buf[2], 0);
    assert_int_equal(buf[3], 0);

    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed = 0;
    assert_int_equal(frame_decode_header(&d, buf, n, &o, &consumed), FRAME_OK);
    assert_int_equal(consumed, 4 + FRAME_HDR_MAX);
    assert_int_equal(o.type, FT_ERROR);
    assert_int_equal(o.message.n, L);
    assert_int_equal(o.message.p[L - 1], 'q');

    /* One more byte of message: the encoder refuses (would exceed the limit). */
    msg[L] = 'q';
    msg[L + 1] = '\0';
    h.message = frame_str_c(msg);
    assert_int_equal(frame_encode_header(&h, buf, cap), 0);

    frame_decoder_free(&d);
    free(buf);
    free(msg);
}

static void test_bad_not_a_map(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    /* An array holding what would be a valid header's keys. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    pk_str(&pk, "type");
    pk_str(&pk, "hello");
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* A positive integer. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_uint32(&pk, 100000);
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* A string, nil, and a one-byte positive fixint, by hand. */
    const uint8_t str[] = {0, 0, 0, 5, 0xa4, 't', 'y', 'p', 'e'};
    expect_bad(str, sizeof str);
    const uint8_t nil[] = {0, 0, 0, 1, 0xc0};
    expect_bad(nil, sizeof nil);
    const uint8_t fixint[] = {0, 0, 0, 1, 0x07};
    expect_bad(fixint, sizeof fixint);
}

static void test_bad_non_string_key(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "type");
    pk_str(&pk, "hello");
    msgpack_pack_uint8(&pk, 1);
    pk_str(&pk, "x");
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* A bin key spelling "type" is not a string key either. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_bin(&pk, 4);
    msgpack_pack_bin_body(&pk, "type", 4);
    pk_str(&pk, "hello");
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);
}

static void test_bad_missing_type(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "batch");
    msgpack_pack_uint8(&pk, 1);
    pk_str(&pk, "types"); /* close, but not "type" */
    pk_str(&pk, "push");
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* The empty map. */
    const uint8_t empty[] = {0, 0, 0, 1, 0x80};
    expect_bad(empty, sizeof empty);
}

static void test_bad_type_not_string(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    pk_str(&pk, "type");
    msgpack_pack_uint8(&pk, 3);
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* bin "hello" */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    pk_str(&pk, "type");
    msgpack_pack_bin(&pk, 5);
    msgpack_pack_bin_body(&pk, "hello", 5);
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);
}

static void test_bad_field_types(void **state)
{
    static const char *const uint_keys[] = {"payload", "version", "rank", "server", "trainers",
                                            "batch", "bucket", "count", "rows", "cols", "nnz"};
    static const char *const str_keys[] = {"role", "token", "dtype", "layout", "code", "message"};
    msgpack_sbuffer sb;
    msgpack_packer pk;

    for (size_t i = 0; i < sizeof uint_keys / sizeof uint_keys[0]; i++) {
        /* string value */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, "type");
        pk_str(&pk, "push");
        pk_str(&pk, uint_keys[i]);
        pk_str(&pk, "x");
        expect_bad_sbuf(&sb);
        msgpack_sbuffer_destroy(&sb);
        /* negative integer */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, "type");
        pk_str(&pk, "push");
        pk_str(&pk, uint_keys[i]);
        msgpack_pack_int64(&pk, -1);
        expect_bad_sbuf(&sb);
        msgpack_sbuffer_destroy(&sb);
        /* float */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, uint_keys[i]);
        msgpack_pack_double(&pk, 1.0);
        pk_str(&pk, "type");
        pk_str(&pk, "push");
        expect_bad_sbuf(&sb);
        msgpack_sbuffer_destroy(&sb);
    }
    for (size_t i = 0; i < sizeof str_keys / sizeof str_keys[0]; i++) {
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        pk_str(&pk, "type");
        pk_str(&pk, "error");
        pk_str(&pk, str_keys[i]);
        msgpack_pack_uint8(&pk, 1);
        expect_bad_sbuf(&sb);
        msgpack_sbuffer_destroy(&sb);
    }
}

static void test_bad_negative_batch(void **state)
{
    /* {"type":"push","batch":-5,"bucket":0}, negative fixint by hand. */
    const uint8_t f[] = {0, 0, 0, 0x1a, 0x83, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'p', 'u', 's', 'h',
                         0xa5, 'b', 'a', 't', 'c', 'h', 0xfb, 0xa6, 'b', 'u', 'c', 'k', 'e', 't',
                         0x00};
    assert_int_equal(sizeof f, 4 + 0x1a);
    assert_int_equal(f[21], 0xfb);
    expect_bad(f, sizeof f);
    /* The same frame with batch = 5 is fine (checks the bytes above). */
    uint8_t g[sizeof f];
    memcpy(g, f, sizeof f);
    g[21] = 0x05;
    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed;
    assert_int_equal(frame_decode_header(&d, g, sizeof g, &o, &consumed), FRAME_OK);
    assert_int_equal(o.batch, 5);
    assert_int_equal(o.has, FH_BATCH | FH_BUCKET);
    frame_decoder_free(&d);
}

static void test_bad_duplicate_key(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    pk_str(&pk, "push");
    pk_str(&pk, "batch");
    msgpack_pack_uint8(&pk, 1);
    pk_str(&pk, "batch");
    msgpack_pack_uint8(&pk, 2);
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* Duplicate string field. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "token");
    pk_str(&pk, "a");
    pk_str(&pk, "type");
    pk_str(&pk, "hello");
    pk_str(&pk, "token");
    pk_str(&pk, "a");
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* Duplicate "type". */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "type");
    pk_str(&pk, "hello");
    pk_str(&pk, "type");
    pk_str(&pk, "push");
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);
}

static void test_bad_truncated_inside_h(void **state)
{
    /* A map announcing 3 entries holding only 2: H covers exactly the bytes
     * present, so this is malformed, not "need more". */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    pk_str(&pk, "push");
    pk_str(&pk, "batch");
    msgpack_pack_uint8(&pk, 1);
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);

    /* A complete map {"type":"push","batch":1,"layout":"dense"} with H
     * covering only a strict prefix of it: every cut is malformed. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    pk_str(&pk, "push");
    pk_str(&pk, "batch");
    msgpack_pack_uint8(&pk, 1);
    pk_str(&pk, "layout");
    pk_str(&pk, "dense");
    for (size_t cut = 1; cut < sb.size; cut++) {
        size_t len;
        uint8_t *f = make_frame(sb.data, cut, 0, &len);
        expect_bad(f, len);
        free(f);
    }
    /* ... and the same cuts followed by the rest of the map (payload bytes
     * from the decoder's point of view): still malformed. */
    for (size_t cut = 1; cut < sb.size; cut++) {
        uint8_t *f = malloc(4 + sb.size);
        assert_non_null(f);
        f[0] = 0, f[1] = 0, f[2] = (uint8_t)(cut >> 8), f[3] = (uint8_t)cut;
        memcpy(f + 4, sb.data, sb.size);
        expect_bad(f, 4 + sb.size);
        free(f);
    }
    msgpack_sbuffer_destroy(&sb);

    /* {"type": str8 of 16 bytes} with only the str8 header inside H. */
    const uint8_t cut_str[] = {0, 0, 0, 8, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xd9, 0x10};
    expect_bad(cut_str, sizeof cut_str);
}

static void test_bad_trailing_bytes(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    pk_str(&pk, "type");
    pk_str(&pk, "hello");
    msgpack_pack_nil(&pk); /* inside H, after the map */
    expect_bad_sbuf(&sb);

    /* Two maps inside one H. */
    msgpack_pack_map(&pk, 0);
    expect_bad_sbuf(&sb);
    msgpack_sbuffer_destroy(&sb);
}

static void test_bad_invalid_byte(void **state)
{
    const uint8_t only[] = {0, 0, 0, 1, 0xc1};
    expect_bad(only, sizeof only);
    /* {"type": <0xc1>} */
    const uint8_t in_val[] = {0, 0, 0, 7, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xc1};
    expect_bad(in_val, sizeof in_val);
    /* {"type":"hello", "x": <0xc1>} — an unknown key's value must still parse. */
    const uint8_t in_unknown[] = {0, 0, 0, 0x0f, 0x82, 0xa4, 't', 'y', 'p', 'e', 0xa5,
                                  'h', 'e', 'l', 'l', 'o', 0xa1, 'x', 0xc1};
    expect_bad(in_unknown, sizeof in_unknown);
}

/* A container that announces far more elements than H can hold is
 * malformed, and decoding it must cost memory in proportion to H, not to
 * the announced count (a 9-byte frame must not make the server allocate
 * gigabytes, which an ASan build of the server turns into an abort for
 * counts near 2^32). The heap the process holds after the decode (malloc's
 * in-use and mmap'd bytes) must not grow by more than a small bound. */
static void test_bad_huge_container_count(void **state)
{
    static const uint32_t counts[] = {(1u << 20) + 1, 1u << 24};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        uint32_t n = counts[i];
        /* The header itself: map32 announcing n entries, nothing else. */
        const uint8_t top[] = {0, 0, 0, 5, 0xdf, (uint8_t)(n >> 24), (uint8_t)(n >> 16),
                               (uint8_t)(n >> 8), (uint8_t)n};
        /* {"type":"hello","x": array32 announcing n elements}. */
        const uint8_t nested[] = {0, 0, 0, 19, 0x82, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'h', 'e', 'l',
                                  'l', 'o', 0xa1, 'x', 0xdd, (uint8_t)(n >> 24),
                                  (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
        const uint8_t *cases[] = {top, nested};
        const size_t lens[] = {sizeof top, sizeof nested};
        for (size_t k = 0; k < 2; k++) {
            frame_decoder d;
            frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
            d.err[0] = '\0';
            frame_hdr o;
            size_t consumed = 3;
            struct mallinfo2 before = mallinfo2();
            assert_int_equal(frame_decode_header(&d, cases[k], lens[k], &o, &consumed), FRAME_BAD);
            struct mallinfo2 after = mallinfo2();
            assert_int_equal(consumed, 0);
            assert_true(strlen(d.err) > 0);
            /* Memory held after decoding must not grow with the count the
             * header announces (heap and mmap'd blocks alike). */
            size_t held_before = before.uordblks + before.hblkhd;
            size_t held_after = after.uordblks + after.hblkhd;
            if (held_after > held_before + (1u << 20)) {
                print_error("%s container announcing %u elements in a %zu-byte header: the "
                            "decoder holds %zu more bytes\n",
                            k ? "nested array32" : "top-level map32", (unsigned)n, lens[k] - 4,
                            held_after - held_before);
                frame_decoder_free(&d);
                fail();
            }
            frame_decoder_free(&d);
        }
    }
}

/* ---- too large, unknowns, non-minimal encodings ------------------------ */

static void test_too_large(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_PUSH;
    h.has = FH_PAYLOAD | FH_BATCH | FH_BUCKET | FH_LAYOUT | FH_COUNT;
    h.batch = 77;
    h.bucket = 5;
    h.layout_str = frame_str_c("dense");
    h.count = 251;
    h.payload = 1004;
    uint8_t buf[256];
    size_t n = frame_encode_header(&h, buf, sizeof buf);
    assert_true(n > 0);

    frame_decoder d;
    frame_decoder_init(&d, 1000);
    d.err[0] = '\0';
    frame_hdr o;
    size_t consumed = 0;
    assert_int_equal(frame_decode_header(&d, buf, n, &o, &consumed), FRAME_TOO_LARGE);
    assert_int_equal(consumed, n);
    assert_true(strlen(d.err) > 0);
    assert_int_equal(o.type, FT_PUSH);
    assert_true(o.has & FH_BATCH);
    assert_true(o.has & FH_BUCKET);
    assert_int_equal(o.batch, 77);
    assert_int_equal(o.bucket, 5);
    assert_int_equal(o.payload, 1004);
    frame_decoder_free(&d);

    /* Exactly at the limit is fine. */
    frame_decoder_init(&d, 1004);
    assert_int_equal(frame_decode_header(&d, buf, n, &o, &consumed), FRAME_OK);
    assert_int_equal(consumed, n);
    frame_decoder_free(&d);

    /* Payload UINT64_MAX against the default limit. */
    h.payload = UINT64_MAX;
    n = frame_encode_header(&h, buf, sizeof buf);
    assert_true(n > 0);
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    assert_int_equal(frame_decode_header(&d, buf, n, &o, &consumed), FRAME_TOO_LARGE);
    assert_int_equal(consumed, n);
    assert_int_equal(o.payload, UINT64_MAX);
    assert_int_equal(o.batch, 77);
    frame_decoder_free(&d);
}

static void test_unknown_keys_ignored(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 7);
    pk_str(&pk, "zzz");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int8(&pk, -3);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_uint8(&pk, 1); /* non-string key nested inside an unknown value: fine */
    msgpack_pack_nil(&pk);
    pk_str(&pk, "type");
    pk_str(&pk, "hello");
    pk_str(&pk, "weird");
    msgpack_pack_int64(&pk, -12345678);
    pk_str(&pk, "rank");
    msgpack_pack_uint8(&pk, 5);
    pk_str(&pk, "Rank"); /* keys are case sensitive: unknown */
    pk_str(&pk, "x");
    pk_str(&pk, "weird"); /* duplicate unknown keys are not an error */
    msgpack_pack_double(&pk, 2.5);
    pk_str(&pk, "");
    msgpack_pack_true(&pk);
    size_t len;
    uint8_t *f = make_frame_sbuf(&sb, &len);
    msgpack_sbuffer_destroy(&sb);

    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed = 0;
    frame_status st = frame_decode_header(&d, f, len, &o, &consumed);
    if (st != FRAME_OK)
        print_error("%s\n", d.err);
    assert_int_equal(st, FRAME_OK);
    assert_int_equal(consumed, len);
    assert_int_equal(o.type, FT_HELLO);
    assert_int_equal(o.has, FH_RANK);
    assert_int_equal(o.rank, 5);
    assert_int_equal(o.payload, 0);
    frame_decoder_free(&d);
    free(f);
}

static void test_unknown_type(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "type");
    pk_str(&pk, "pushx");
    pk_str(&pk, "payload");
    msgpack_pack_uint16(&pk, 300);
    size_t len;
    uint8_t *f = make_frame_sbuf(&sb, &len);
    msgpack_sbuffer_destroy(&sb);

    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed = 0;
    assert_int_equal(frame_decode_header(&d, f, len, &o, &consumed), FRAME_OK);
    assert_int_equal(o.type, FT_OTHER);
    assert_str_is(o.type_str, "pushx");
    assert_int_equal(o.payload, 300);
    assert_int_equal(o.has, FH_PAYLOAD);
    assert_int_equal(consumed, len);
    free(f);

    /* Type names are case sensitive, and the empty string is FT_OTHER too. */
    const uint8_t upper[] = {0, 0, 0, 12, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'H', 'e', 'l', 'l',
                             'o'};
    assert_int_equal(frame_decode_header(&d, upper, sizeof upper, &o, &consumed), FRAME_OK);
    assert_int_equal(o.type, FT_OTHER);
    assert_str_is(o.type_str, "Hello");
    const uint8_t empty[] = {0, 0, 0, 7, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa0};
    assert_int_equal(frame_decode_header(&d, empty, sizeof empty, &o, &consumed), FRAME_OK);
    assert_int_equal(o.type, FT_OTHER);
    assert_int_equal(o.type_str.n, 0);
    frame_decoder_free(&d);
}

static void pk_bytes(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* Keys and names are matched as whole words: a known name with a NUL or
 * a byte more, a prefix of one, or a key longer than any known key is
 * unknown; a known key in the last bytes of the header (fewer than a word
 * left) is still found. */
static void test_names_matched_whole(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 8);
    pk_bytes(&pk, "type", 4);
    pk_bytes(&pk, "push\0", 5);
    pk_bytes(&pk, "rank\0", 5);
    msgpack_pack_uint8(&pk, 7);
    pk_bytes(&pk, "ran", 3);
    msgpack_pack_uint8(&pk, 8);
    pk_bytes(&pk, "trainersX", 9);
    msgpack_pack_uint8(&pk, 9);
    pk_bytes(&pk, "layout", 6);
    pk_bytes(&pk, "dense\0", 6);
    pk_bytes(&pk, "batch", 5);
    msgpack_pack_uint8(&pk, 3);
    pk_bytes(&pk, "bucketz", 7);
    msgpack_pack_uint8(&pk, 4);
    pk_bytes(&pk, "nnz", 3); /* 5 bytes from the end */
    msgpack_pack_uint8(&pk, 2);
    size_t len;
    uint8_t *f = make_frame_sbuf(&sb, &len);
    msgpack_sbuffer_destroy(&sb);

    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed = 0;
    frame_status st = frame_decode_header(&d, f, len, &o, &consumed);
    if (st != FRAME_OK)
        print_error("%s\n", d.err);
    assert_int_equal(st, FRAME_OK);
    assert_int_equal(consumed, len);
    assert_int_equal(o.type, FT_OTHER);
    assert_int_equal(o.type_str.n, 5);
    assert_int_equal(o.has, FH_LAYOUT | FH_BATCH | FH_NNZ);
    assert_int_equal(o.layout, LAYOUT_OTHER);
    assert_int_equal(o.batch, 3);
    assert_int_equal(o.nnz, 2);
    free(f);

    /* The shortest header: "type" and a name right at the end. */
    const uint8_t tiny[] = {0, 0, 0, 11, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'p', 'u', 's', 'h'};
    assert_int_equal(frame_decode_header(&d, tiny, sizeof tiny, &o, &consumed), FRAME_OK);
    assert_int_equal(o.type, FT_PUSH);
    frame_decoder_free(&d);
}

/* Any valid msgpack spelling of the header is accepted: str8/str16 keys,
 * uint64-encoded small numbers, signed formats holding non-negative values,
 * map16. */
static void test_non_minimal_encodings(void **state)
{
    const uint8_t f[] = {
        0, 0, 0, 0,
        0xde, 0x00, 0x04,                                    /* map16, 4 entries */
        0xd9, 0x04, 't', 'y', 'p', 'e',                      /* str8 "type" */
        0xda, 0x00, 0x04, 'p', 'u', 's', 'h',                /* str16 "push" */
        0xa5, 'b', 'a', 't', 'c', 'h',
        0xcf, 0, 0, 0, 0, 0, 0, 0, 42,                        /* uint64 42 */
        0xa6, 'b', 'u', 'c', 'k', 'e', 't',
        0xd3, 0, 0, 0, 0, 0, 0, 0, 7,                         /* int64 7 */
        0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd',
        0xd0, 0x00,                                           /* int8 0 */
    };
    uint8_t g[sizeof f];
    memcpy(g, f, sizeof f);
    g[3] = (uint8_t)(sizeof f - 4);
    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed = 0;
    frame_status st = frame_decode_header(&d, g, sizeof g, &o, &consumed);
    if (st != FRAME_OK)
        print_error("%s\n", d.err);
    assert_int_equal(st, FRAME_OK);
    assert_int_equal(consumed, sizeof g);
    assert_int_equal(o.type, FT_PUSH);
    assert_int_equal(o.batch, 42);
    assert_int_equal(o.bucket, 7);
    assert_int_equal(o.payload, 0);
    assert_int_equal(o.has, FH_BATCH | FH_BUCKET | FH_PAYLOAD);
    frame_decoder_free(&d);
}

/* A decoder reused after FRAME_BAD decodes the next good frame normally,
 * with no field left over from the bad one. */
static void test_reuse_after_bad(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    pk_str(&pk, "push");
    pk_str(&pk, "batch");
    msgpack_pack_uint8(&pk, 9);
    pk_str(&pk, "count");
    pk_str(&pk, "nope");
    size_t blen;
    uint8_t *bad = make_frame_sbuf(&sb, &blen);
    msgpack_sbuffer_destroy(&sb);

    frame_decoder d;
    frame_decoder_init(&d, FRAME_MAX_PAYLOAD_DEFAULT);
    frame_hdr o;
    size_t consumed;
    assert_int_equal(frame_decode_header(&d, bad, blen, &o, &consumed), FRAME_BAD);
    const uint8_t good[] = {0, 0, 0, 13, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa6, 'r', 'e', 's',
                            'u', 'l', 't'};
    assert_int_equal(frame_decode_header(&d, good, sizeof good, &o, &consumed), FRAME_OK);
    assert_int_equal(o.type, FT_RESULT);
    assert_int_equal(o.has, 0);
    assert_int_equal(o.batch, 0);
    assert_int_equal(o.payload, 0);
    frame_decoder_free(&d);
    free(bad);
}

/* ---- error codes, payload sizes, encoder limits ------------------------ */

static void test_errcodes(void **state)
{
    static const struct {
        frame_errcode c;
        const char *name;
    } tab[] = {
        {ERR_BAD_FRAME, "bad_frame"},       {ERR_AUTH, "auth"},
        {ERR_STALE_BATCH, "stale_batch"},   {ERR_DUPLICATE_PUSH, "duplicate_push"},
        {ERR_SHAPE_MISMATCH, "shape_mismatch"}, {ERR_TOO_LARGE, "too_large"},
        {ERR_UNSUPPORTED, "unsupported"},   {ERR_PEER_LOST, "peer_lost"},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        assert_string_equal(frame_errcode_name(tab[i].c), tab[i].name);
    }
    /* Out-of-range values name as "other". */
    assert_string_equal(frame_errcode_name(ERR_OTHER), "other");
    assert_string_equal(frame_errcode_name((frame_errcode)1000), "other");
}

static void test_push_payload_size(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.layout = LAYOUT_DENSE;
    h.count = 10;
    assert_int_equal(frame_push_payload_size(&h), 40);
    /* Narrow pushes (docs/protocol.md, "Narrow pushes"): 2 bytes an
     * element; a name that is no type counts as f32 (refused first). */
    h.dtype = frame_str_c("f16");
    assert_int_equal(frame_push_payload_size(&h), 20);
    h.dtype = frame_str_c("bf16");
    assert_int_equal(frame_push_payload_size(&h), 20);
    h.count = UINT64_MAX / 2 + 1;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.count = 10;
    h.dtype = frame_str_c("f64");
    assert_int_equal(frame_push_payload_size(&h), 40);
    h.dtype = frame_str_c("f32");
    assert_int_equal(frame_push_payload_size(&h), 40);
    assert_int_equal(frame_dtype_type(frame_str_c("f32")), HALF_FP32);
    assert_int_equal(frame_dtype_type((frame_str){0}), HALF_FP32);
    assert_int_equal(frame_dtype_type(frame_str_c("f16")), HALF_FP16);
    assert_int_equal(frame_dtype_type(frame_str_c("bf16")), HALF_BF16);
    assert_int_equal(frame_dtype_type(frame_str_c("fp16")), -1); /* --compress's name, not the wire's */
    assert_int_equal(frame_dtype_type(frame_str_c("bf1")), -1);
    assert_string_equal(frame_dtype_name(HALF_FP16), "f16");
    assert_string_equal(frame_dtype_name(HALF_BF16), "bf16");
    assert_string_equal(frame_dtype_name(HALF_FP32), "f32");
    h.dtype = (frame_str){0};
    h.count = 0;
    assert_int_equal(frame_push_payload_size(&h), 0);
    h.count = UINT64_MAX / 4;
    assert_int_equal(frame_push_payload_size(&h), (UINT64_MAX / 4) * 4);
    h.count = UINT64_MAX / 4 + 1;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.count = UINT64_MAX;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);

    memset(&h, 0, sizeof h);
    h.layout = LAYOUT_SPARSE;
    h.nnz = 3;
    h.cols = 4;
    assert_int_equal(frame_push_payload_size(&h), 3 * 8 + 3 * 4 * 4);
    h.nnz = 0;
    assert_int_equal(frame_push_payload_size(&h), 0);
    h.nnz = 7;
    h.cols = 1;
    assert_int_equal(frame_push_payload_size(&h), 7 * 12);
    h.nnz = UINT64_MAX;
    h.cols = 1;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.nnz = 1ull << 61;
    h.cols = 1;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX); /* 12 << 61 overflows */
    h.nnz = UINT64_MAX / 12; /* the largest nnz that fits with cols = 1 */
    assert_int_equal(frame_push_payload_size(&h), (UINT64_MAX / 12) * 12);
    h.nnz = UINT64_MAX / 12 + 1;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.nnz = 1;
    h.cols = UINT64_MAX;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.nnz = 1;
    h.cols = UINT64_MAX / 4;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.nnz = 2;
    h.cols = 1ull << 61; /* 4*cols fits, (8+4*cols)*2 does not */
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.nnz = 1ull << 20;
    h.cols = 1ull << 20;
    assert_int_equal(frame_push_payload_size(&h), (1ull << 20) * (8 + (4ull << 20)));

    /* Neither dense nor sparse: no size. */
    h.layout = LAYOUT_NONE;
    h.nnz = 1;
    h.cols = 1;
    h.count = 1;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
    h.layout = LAYOUT_OTHER;
    assert_int_equal(frame_push_payload_size(&h), UINT64_MAX);
}

static void test_encode_small_buffer(void **state)
{
    frame_hdr h;
    memset(&h, 0, sizeof h);
    h.type = FT_ERROR;
    h.has = FH_CODE | FH_MESSAGE | FH_BATCH;
    h.code = frame_str_c("too_large");
    h.message = frame_str_c("payload of 2000000000 bytes exceeds the limit");
    h.batch = 1ull << 40;
    uint8_t ref[512];
    size_t need = frame_encode_header(&h, ref, sizeof ref);
    assert_true(need > 4);

    uint8_t buf[512];
    for (size_t cap = 0; cap < need; cap++) {
        memset(buf, 0xee, sizeof buf);
        if (frame_encode_header(&h, buf, cap) != 0) {
            print_error("cap %zu < %zu accepted\n", cap, need);
            fail();
        }
        /* Nothing written past cap. */
        for (size_t i = cap; i < sizeof buf; i++)
            assert_int_equal(buf[i], 0xee);
    }
    assert_int_equal(frame_encode_header(&h, buf, need), need);
    assert_memory_equal(buf, ref, need);
}

static void test_str_helpers(void **state)
{
    frame_str s = frame_str_c("dense");
    assert_int_equal(s.n, 5);
    assert_true(frame_str_eq(s, "dense"));
    assert_false(frame_str_eq(s, "dens"));
    assert_false(frame_str_eq(s, "densee"));
    frame_str e = frame_str_c(NULL);
    assert_int_equal(e.n, 0);
    assert_true(frame_str_eq(e, ""));
    assert_string_equal(frame_type_name(FT_HELLO), "hello");
    assert_string_equal(frame_type_name(FT_WELCOME), "welcome");
    assert_string_equal(frame_type_name(FT_PUSH), "push");
    assert_string_equal(frame_type_name(FT_RESULT), "result");
    assert_string_equal(frame_type_name(FT_ERROR), "error");
    assert_string_equal(frame_type_name(FT_OTHER), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_hello),
        cmocka_unit_test(test_roundtrip_welcome),
        cmocka_unit_test(test_roundtrip_dense_push),
        cmocka_unit_test(test_roundtrip_sparse_push),
        cmocka_unit_test(test_roundtrip_result),
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_roundtrip_all_fields_other_type),
        cmocka_unit_test(test_incremental),
        cmocka_unit_test(test_back_to_back),
        cmocka_unit_test(test_bad_header_length),
        cmocka_unit_test(test_header_max_size),
        cmocka_unit_test(test_bad_not_a_map),
        cmocka_unit_test(test_bad_non_string_key),
        cmocka_unit_test(test_bad_missing_type),
        cmocka_unit_test(test_bad_type_not_string),
        cmocka_unit_test(test_bad_field_types),
        cmocka_unit_test(test_bad_negative_batch),
        cmocka_unit_test(test_bad_duplicate_key),
        cmocka_unit_test(test_bad_truncated_inside_h),
        cmocka_unit_test(test_bad_trailing_bytes),
        cmocka_unit_test(test_bad_invalid_byte),
        cmocka_unit_test(test_bad_huge_container_count),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_unknown_keys_ignored),
        cmocka_unit_test(test_unknown_type),
        cmocka_unit_test(test_names_matched_whole),
        cmocka_unit_test(test_non_minimal_encodings),
        cmocka_unit_test(test_reuse_after_bad),
        cmocka_unit_test(test_errcodes),
        cmocka_unit_test(test_push_payload_size),
        cmocka_unit_test(test_encode_small_buffer),
        cmocka_unit_test(test_str_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
