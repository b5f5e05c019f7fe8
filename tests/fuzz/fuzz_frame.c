/* fuzz_frame.c — libFuzzer target for the wire-protocol header decoder
 * (shared/frame.c: frame_decode_header, frame_encode_header).
 *
 * The input is treated as a byte stream of frames, as a connection would
 * deliver it: decode at the current offset (max_payload 1 MiB); on
 * FRAME_OK / FRAME_TOO_LARGE advance by `consumed` and skip up to `payload`
 * bytes; stop on FRAME_NEED_MORE or FRAME_BAD. AddressSanitizer and UBSan
 * catch memory errors; on top of that, three oracles abort():
 *   - the documented contract: consumed == 4 + H on OK/TOO_LARGE, 0 on
 *     NEED_MORE/BAD, and a non-empty d->err on BAD/TOO_LARGE;
 *   - a strict-prefix check: the same frame cut short by one byte must be
 *     FRAME_NEED_MORE (decoding must not depend on bytes past 4 + H);
 *   - a round trip: every decoded header is re-encoded with
 *     frame_encode_header and decoded again, and the type, `has` bits,
 *     payload, layout and every field flagged in `has` must be equal
 *     (strings compared by content).
 *
 * Build (see tests/CMakeLists.txt, or by hand):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *         tests/fuzz/fuzz_frame.c shared/frame.c -lmsgpackc -o fuzz_frame
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/frame.h"

#define FUZZ_MAX_PAYLOAD (1u << 20)
#define REENC_CAP (70u * 1024u)

static frame_decoder dec;
static int dec_ready;
static uint8_t reenc[REENC_CAP];

static void die(const char *what)
{
    fprintf(stderr, "fuzz_frame oracle failed: %s (err: \"%s\")\n", what, dec.err);
    abort();
}

static int str_same(frame_str a, frame_str b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

static void check_same(const frame_hdr *a, const frame_hdr *b)
{
    if (a->type != b->type)
        die("type differs after re-encoding");
    if (!str_same(a->type_str, b->type_str))
        die("type string differs after re-encoding");
    if (a->has != b->has)
        die("has bits differ after re-encoding");
    if (a->payload != b->payload)
        die("payload differs after re-encoding");
    if (a->layout != b->layout)
        die("layout differs after re-encoding");
#define CU(bit, f)                                                                                 \
    if ((a->has & (bit)) && a->f != b->f)                                                          \
        die(#f " differs after re-encoding");
#define CS(bit, f)                                                                                 \
    if ((a->has & (bit)) && !str_same(a->f, b->f))                                                 \
        die(#f " differs after re-encoding");
    CU(FH_VERSION, version)
    CS(FH_ROLE, role)
    CU(FH_RANK, rank)
    CS(FH_TOKEN, token)
    CU(FH_SERVER, server)
    CU(FH_TRAINERS, trainers)
    CU(FH_BATCH, batch)
    CU(FH_BUCKET, bucket)
    CS(FH_DTYPE, dtype)
    CS(FH_LAYOUT, layout_str)
    CU(FH_COUNT, count)
    CU(FH_ROWS, rows)
    CU(FH_COLS, cols)
    CU(FH_NNZ, nnz)
    CS(FH_CODE, code)
    CS(FH_MESSAGE, message)
#undef CU
#undef CS
}

/* Re-encode a decoded header and decode the result again. The decoded
 * header's strings point into the fuzzer's input, which stays valid. */
static void reencode_check(const frame_hdr *h, frame_status first, size_t first_h)
{
    size_t n = frame_encode_header(h, reenc, sizeof reenc);
    /* The decoded header fit in H <= 65536 bytes; its known fields alone,
     * minimally encoded, fit too. */
    if (n == 0)
        die("a decoded header could not be re-encoded");
    if (n > first_h)
        die("re-encoding is longer than the original header");
    frame_hdr h2;
    size_t consumed = 0;
    frame_status st = frame_decode_header(&dec, reenc, n, &h2, &consumed);
    if (st != first)
        die("re-encoded header decodes with a different status");
    if (consumed != n)
        die("re-encoded header: consumed != encoded length");
    check_same(h, &h2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dec_ready) {
        frame_decoder_init(&dec, FUZZ_MAX_PAYLOAD);
        dec_ready = 1;
    }
    size_t off = 0;
    while (off < size) {
        const uint8_t *p = data + off;
        size_t len = size - off;
        frame_hdr h;
        size_t consumed = 12345;
        dec.err[0] = '\0';
        frame_status st = frame_decode_header(&dec, p, len, &h, &consumed);
        if (st == FRAME_NEED_MORE || st == FRAME_BAD) {
            if (consumed != 0)
                die("consumed != 0 on NEED_MORE/BAD");
            if (st == FRAME_BAD && dec.err[0] == '\0')
                die("FRAME_BAD without a reason");
            break;
        }
        if (st != FRAME_OK && st != FRAME_TOO_LARGE)
            die("unknown status");
        uint32_t hl = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (consumed != FRAME_PREFIX_LEN + (size_t)hl || consumed > len)
            die("consumed != 4 + H");
        if (st == FRAME_TOO_LARGE && (h.payload <= FUZZ_MAX_PAYLOAD || dec.err[0] == '\0'))
            die("FRAME_TOO_LARGE for a payload within the limit, or without a reason");
        if (st == FRAME_OK && h.payload > FUZZ_MAX_PAYLOAD)
            die("FRAME_OK for a payload over the limit");
        if (!(h.has & FH_PAYLOAD) && h.payload != 0)
            die("payload set without FH_PAYLOAD");

        /* One byte short of the header must be NEED_MORE. */
        {
            frame_hdr hs;
            size_t cs = 1;
            if (frame_decode_header(&dec, p, consumed - 1, &hs, &cs) != FRAME_NEED_MORE || cs != 0)
                die("a strict prefix of a complete header is not NEED_MORE");
        }

        reencode_check(&h, st, consumed);

        off += consumed;
        uint64_t skip = h.payload;
        if (skip > size - off)
            skip = size - off;
        off += (size_t)skip;
    }
    return 0;
}
