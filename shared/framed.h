/* framed.h — the one framed-stream reader: protocol v1 frames out of a byte
 * stream, incrementally.
 *
 * A framed reader owns an input buffer that its owner fills (recv() into
 * framed_space(), then framed_wrote(); or framed_feed() with bytes from
 * elsewhere) and hands back, one framed_next() at a time, what those bytes
 * hold:
 *
 *     FRAMED_HEADER  a frame's decoded header (frame_decode_header)
 *     FRAMED_DATA    a chunk of that frame's payload, in place in the buffer
 *     FRAMED_END     that frame's payload is complete (also right after a
 *                    header whose payload is 0)
 *     FRAMED_NEED_MORE  nothing more until more bytes arrive
 *     FRAMED_BAD / FRAMED_TOO_LARGE  the stream is broken (see framed_next)
 *
 * Payload chunks are cut on `unit`-byte boundaries (4: whole float32s)
 * except at the payload's end, so a consumer never sees a partial element;
 * the 0 to unit-1 bytes of a partial element wait in the buffer (the
 * "carry") for the next bytes. Unit 1 hands over every byte as it comes.
 *
 * The owner may also take payload bytes itself, outside the buffer (receive
 * them straight into their destination): framed_direct_carry() and
 * framed_direct_done() keep the reader's position and the carry right.
 *
 * For callers that want a frame buffered whole (control messages: a JSON
 * body), framed_whole() looks at a contiguous byte view and says whether
 * one whole frame is there and, if not, how many bytes it needs.
 *
 * Pointers handed out (header strings, data chunks) point into the buffer
 * and stay valid until the next framed_space, framed_feed,
 * framed_direct_done or framed_free.
 * One thread; nothing here blocks or does I/O.
 */
#ifndef PSBENCH_FRAMED_H
#define PSBENCH_FRAMED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/frame.h"

/* Smallest buffer a reader accepts: any header fits. */
#define FRAMED_MIN_CAP (FRAME_PREFIX_LEN + FRAME_HDR_MAX)

/* What framed_next found. */
typedef enum framed_ev {
    FRAMED_NEED_MORE = 0, /* nothing to hand out until more bytes arrive */
    FRAMED_HEADER,        /* ev->hdr: the next frame's header (consumed) */
    FRAMED_DATA,          /* ev->data, ev->n: payload bytes at ev->off (consumed) */
    FRAMED_END,           /* the current frame's payload is complete */
    FRAMED_BAD,           /* malformed header: nothing consumed (framed_err) */
    FRAMED_TOO_LARGE,     /* ev->hdr decoded and consumed, but its payload is
                           * over the limit (framed_err) */
} framed_ev;

/* One event. Only the fields of its kind are set. */
typedef struct framed_event {
    frame_hdr hdr;       /* FRAMED_HEADER, FRAMED_TOO_LARGE */
    size_t hlen;         /* FRAMED_HEADER, FRAMED_TOO_LARGE: the prefix and header's bytes (4 + H) */
    const uint8_t *data; /* FRAMED_DATA */
    size_t n;            /* FRAMED_DATA */
    uint64_t off;        /* FRAMED_DATA: offset of data in the payload */
} framed_event;

/* Reader states (framed.c; exposed for framed_in_payload and tests). */
typedef enum framed_state {
    FRAMED_S_HEADER = 0, /* waiting for a header */
    FRAMED_S_PAYLOAD,    /* payload bytes outstanding */
    FRAMED_S_END,        /* payload complete, FRAMED_END not yet handed out */
    FRAMED_S_FAILED,     /* FRAMED_BAD / FRAMED_TOO_LARGE was handed out */
} framed_state;

typedef struct framed {
    uint8_t *buf;
    size_t cap;
    size_t off, len;           /* unparsed bytes: buf[off, len) */
    uint64_t pay_off, pay_len; /* progress through the current payload */
    framed_state state;
    framed_ev failed;     /* FRAMED_S_FAILED: what to answer from now on */
    unsigned unit;        /* payload chunk granularity: 1, 2, 4 or 8 bytes */
    frame_decoder dec;    /* max_payload, and the reason of a failure */
} framed;

/* A reader with a `cap`-byte buffer (>= FRAMED_MIN_CAP), refusing payloads
 * over max_payload (FRAMED_TOO_LARGE), cutting payload chunks on `unit`-byte
 * boundaries. Returns 0, or -1 when out of memory. */
int framed_init(framed *r, size_t cap, uint64_t max_payload, unsigned unit);
void framed_free(framed *r);

/* Where to put new bytes and how many fit (*room > 0 unless the owner
 * stopped taking events mid-stream). Moves the unparsed tail to the front
 * of the buffer when it would leave too little room: pointers handed out
 * before are invalid after this call. */
uint8_t *framed_space(framed *r, size_t *room);
/* n bytes were written at framed_space(). */
void framed_wrote(framed *r, size_t n);
/* Copy up to n bytes in (framed_space + framed_wrote). Returns how many
 * were taken: fewer than n when the buffer is full. */
size_t framed_feed(framed *r, const void *p, size_t n);

/* framed_next's part for the header (and failed) states. */
framed_ev framed_next_header(framed *r, framed_event *ev);

/* The next event. FRAMED_BAD and FRAMED_TOO_LARGE leave the reader failed
 * (a stream cannot be resynchronised): every later call answers the same,
 * without a header. Inline: it runs once per payload chunk and frame end
 * on the trainers' and servers' hot paths. */
static inline framed_ev framed_next(framed *r, framed_event *ev)
{
    if (r->state == FRAMED_S_PAYLOAD) {
        size_t avail = r->len - r->off;
        uint64_t left = r->pay_len - r->pay_off;
        uint64_t end = r->pay_off + (avail < left ? avail : left);
        /* Hand over whole units only, except at the payload's end. */
        if (end < r->pay_len)
            end &= ~(uint64_t)(r->unit - 1);
        if (end <= r->pay_off)
            return FRAMED_NEED_MORE;
        size_t n = (size_t)(end - r->pay_off);
        ev->data = r->buf + r->off;
        ev->n = n;
        ev->off = r->pay_off;
        r->off += n;
        r->pay_off = end;
        if (end == r->pay_len)
            r->state = FRAMED_S_END;
        return FRAMED_DATA;
    }
    if (r->state == FRAMED_S_END) {
        r->state = FRAMED_S_HEADER;
        return FRAMED_END;
    }
    if (r->len - r->off < FRAME_PREFIX_LEN && r->state == FRAMED_S_HEADER)
        return FRAMED_NEED_MORE;
    return framed_next_header(r, ev);
}

/* The reason of the failure (FRAMED_BAD, FRAMED_TOO_LARGE). */
static inline const char *framed_err(const framed *r)
{
    return r->dec.err;
}
/* Bytes received and not yet handed out. */
static inline size_t framed_buffered(const framed *r)
{
    return r->len - r->off;
}
/* Inside a frame's payload: payload bytes are still to come. */
static inline bool framed_in_payload(const framed *r)
{
    return r->state == FRAMED_S_PAYLOAD;
}
/* Payload bytes of the current frame not yet handed out or taken. */
static inline uint64_t framed_payload_left(const framed *r)
{
    return r->state == FRAMED_S_PAYLOAD ? r->pay_len - r->pay_off : 0;
}
/* Offset in the payload of the next payload byte. */
static inline uint64_t framed_payload_off(const framed *r)
{
    return r->pay_off;
}

/* Receiving payload bytes directly (outside the buffer). Only in a payload
 * and once framed_next has handed out all it could (NEED_MORE), so that the
 * buffer holds just the carry: fewer than `unit` bytes.
 *
 * framed_direct_carry copies the carry to dst and returns its length; the
 * owner then receives the following bytes at dst + carry. The buffer is
 * not changed (a receive that fails loses nothing).
 *
 * framed_direct_done says that dst now holds n bytes (carry included) that
 * continue the payload at framed_payload_off(). Returns how many of them
 * (from dst) the owner takes as payload: whole units, or up to the
 * payload's end; n must not exceed framed_payload_left(). The partial unit
 * after them goes back into the buffer as the new carry. When the payload
 * is complete, framed_next hands out FRAMED_END next. */
size_t framed_direct_carry(const framed *r, uint8_t *dst);
size_t framed_direct_done(framed *r, const uint8_t *dst, size_t n);

/* One whole frame, header and payload, at the start of the contiguous
 * bytes p[0, len), for callers that buffer frames whole.
 *   FRAME_OK: *h is its header, *payload points at its h->payload payload
 *     bytes in p, *consumed is the frame's size.
 *   FRAME_NEED_MORE: *need is how many bytes from p a later call needs to
 *     see to get further (the prefix, then the header, then the payload);
 *     always more than len.
 *   FRAME_BAD / FRAME_TOO_LARGE: d->err says why.
 * The decoder's max_payload bounds the payload. */
frame_status framed_whole(frame_decoder *d, const uint8_t *p, size_t len, frame_hdr *h,
                          const uint8_t **payload, size_t *consumed, size_t *need);

#endif
