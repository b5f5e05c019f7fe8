/* framed.c — the framed-stream reader (see framed.h). */
#include "shared/framed.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int framed_init(framed *r, size_t cap, uint64_t max_payload, unsigned unit)
{
    assert(cap >= FRAMED_MIN_CAP);
    assert(unit == 1 || unit == 2 || unit == 4 || unit == 8);
    memset(r, 0, sizeof *r);
    r->unit = unit;
    frame_decoder_init(&r->dec, max_payload);
    r->buf = malloc(cap);
    if (!r->buf)
        return -1;
    r->cap = cap;
    return 0;
}

void framed_free(framed *r)
{
    free(r->buf);
    frame_decoder_free(&r->dec);
    memset(r, 0, sizeof *r);
}

uint8_t *framed_space(framed *r, size_t *room)
{
    if (r->off == r->len) {
        r->off = r->len = 0;
    } else if (r->off > 0 && r->len > r->cap / 2) {
        /* Keep room for a whole header: move the unparsed tail (a partial
         * header, or a carry) down. */
        memmove(r->buf, r->buf + r->off, r->len - r->off);
        r->len -= r->off;
        r->off = 0;
    }
    *room = r->cap - r->len;
    return r->buf + r->len;
}

void framed_wrote(framed *r, size_t n)
{
    assert(n <= r->cap - r->len);
    r->len += n;
}

size_t framed_feed(framed *r, const void *p, size_t n)
{
    size_t room;
    uint8_t *dst = framed_space(r, &room);
    if (n > room)
        n = room;
    memcpy(dst, p, n);
    r->len += n;
    return n;
}

framed_ev framed_next_header(framed *r, framed_event *ev)
{
    if (r->state == FRAMED_S_FAILED)
        return r->failed;
    assert(r->state == FRAMED_S_HEADER);
    size_t used;
    frame_status st = frame_decode_header(&r->dec, r->buf + r->off, r->len - r->off, &ev->hdr, &used);
    switch (st) {
    case FRAME_NEED_MORE:
        return FRAMED_NEED_MORE;
    case FRAME_BAD:
        r->state = FRAMED_S_FAILED;
        r->failed = FRAMED_BAD;
        return FRAMED_BAD;
    case FRAME_TOO_LARGE:
        ev->hlen = used;
        r->off += used;
        r->state = FRAMED_S_FAILED;
        r->failed = FRAMED_TOO_LARGE;
        return FRAMED_TOO_LARGE;
    case FRAME_OK:
        break;
    }
    ev->hlen = used;
    r->off += used;
    r->pay_off = 0;
    r->pay_len = ev->hdr.payload;
    r->state = ev->hdr.payload ? FRAMED_S_PAYLOAD : FRAMED_S_END;
    return FRAMED_HEADER;
}

size_t framed_direct_carry(const framed *r, uint8_t *dst)
{
    size_t carry = r->len - r->off;
    assert(r->state == FRAMED_S_PAYLOAD && carry < r->unit);
    memcpy(dst, r->buf + r->off, carry);
    return carry;
}

size_t framed_direct_done(framed *r, const uint8_t *dst, size_t n)
{
    assert(r->state == FRAMED_S_PAYLOAD && r->len - r->off < r->unit);
    assert(n <= r->pay_len - r->pay_off);
    r->off = r->len = 0;
    uint64_t end = r->pay_off + n;
    /* Keep the owner's view on a unit boundary: a partial unit goes back
     * to the buffer and is handled with the next bytes. */
    if (end < r->pay_len)
        end &= ~(uint64_t)(r->unit - 1);
    size_t keep = (size_t)(end - r->pay_off);
    if (keep < n) {
        memcpy(r->buf, dst + keep, n - keep);
        r->len = n - keep;
    }
    r->pay_off = end;
    if (end == r->pay_len)
        r->state = FRAMED_S_END;
    return keep;
}

frame_status framed_whole(frame_decoder *d, const uint8_t *p, size_t len, frame_hdr *h,
                          const uint8_t **payload, size_t *consumed, size_t *need)
{
    *consumed = 0;
    size_t hl;
    frame_status st = frame_decode_header(d, p, len, h, &hl);
    if (st == FRAME_NEED_MORE) {
        if (len < FRAME_PREFIX_LEN) {
            *need = FRAME_PREFIX_LEN;
        } else { /* a valid length (frame_decode_header checked it) */
            uint32_t hlen = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
            *need = FRAME_PREFIX_LEN + (size_t)hlen;
        }
        assert(*need > len);
        return FRAME_NEED_MORE;
    }
    if (st != FRAME_OK)
        return st;
    if (len - hl < h->payload) {
        *need = h->payload > SIZE_MAX - hl ? SIZE_MAX : hl + (size_t)h->payload;
        return FRAME_NEED_MORE;
    }
    *payload = p + hl;
    *consumed = hl + (size_t)h->payload;
    return FRAME_OK;
}
