/* frame.c — wire protocol v1: header decoding and encoding (see frame.h). */
#include "shared/frame.h"
#include "shared/half.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static const char *const errcode_names[] = {
    [ERR_NONE] = "none",
    [ERR_BAD_FRAME] = "bad_frame",
    [ERR_AUTH] = "auth",
    [ERR_STALE_BATCH] = "stale_batch",
    [ERR_DUPLICATE_PUSH] = "duplicate_push",
    [ERR_SHAPE_MISMATCH] = "shape_mismatch",
    [ERR_TOO_LARGE] = "too_large",
    [ERR_UNSUPPORTED] = "unsupported",
    [ERR_PEER_LOST] = "peer_lost",
    [ERR_BAD_INDEX] = "bad_index",
    [ERR_RESOURCES] = "resources",
    [ERR_DEVICE] = "device",
    [ERR_OTHER] = "other",
};

const char *frame_errcode_name(frame_errcode c)
{
    if ((unsigned)c >= sizeof errcode_names / sizeof errcode_names[0])
        return "other";
    return errcode_names[c];
}

static const char *const type_names[] = {
    [FT_OTHER] = "", [FT_HELLO] = "hello",   [FT_WELCOME] = "welcome",
    [FT_PUSH] = "push", [FT_RESULT] = "result", [FT_ERROR] = "error",
    [FT_FETCH] = "fetch", [FT_PARAMS] = "params", [FT_LOOKUP] = "lookup",
    [FT_ROWS] = "rows", [FT_UPDATE] = "update", [FT_UPDATED] = "updated",
    [FT_REDIRECT] = "redirect", [FT_EXPORT] = "export",
};

const char *frame_type_name(frame_type t)
{
    if ((unsigned)t >= sizeof type_names / sizeof type_names[0])
        return "";
    return type_names[t];
}

frame_str frame_str_c(const char *s)
{
    frame_str r = {s, s ? (uint32_t)strlen(s) : 0};
    return r;
}

void frame_decoder_init(frame_decoder *d, uint64_t max_payload)
{
    d->max_payload = max_payload;
    d->max_header = FRAME_HDR_MAX;
    d->err[0] = '\0';
}

void frame_decoder_free(frame_decoder *d)
{
    (void)d; /* nothing allocated; kept so callers need not change */
}

/* ---- decoding ---------------------------------------------------------- */

typedef enum { FK_UINT, FK_STR } field_kind;

typedef struct field_spec {
    const char *key;
    uint8_t klen;
    uint64_t word; /* the key as a frame_word (filled before main) */
    uint32_t bit;
    field_kind kind;
    size_t off; /* offset of the uint64_t or frame_str in frame_hdr */
} field_spec;

#define U(k, b, f) {k, sizeof k - 1, 0, b, FK_UINT, offsetof(frame_hdr, f)}
#define S(k, b, f) {k, sizeof k - 1, 0, b, FK_STR, offsetof(frame_hdr, f)}
static field_spec fields[] = {
    U("payload", FH_PAYLOAD, payload), U("version", FH_VERSION, version),
    S("role", FH_ROLE, role),          U("rank", FH_RANK, rank),
    S("token", FH_TOKEN, token),       U("server", FH_SERVER, server),
    U("trainers", FH_TRAINERS, trainers), U("batch", FH_BATCH, batch),
    U("bucket", FH_BUCKET, bucket),    S("dtype", FH_DTYPE, dtype),
    S("layout", FH_LAYOUT, layout_str), U("count", FH_COUNT, count),
    U("rows", FH_ROWS, rows),          U("cols", FH_COLS, cols),
    U("nnz", FH_NNZ, nnz),             S("code", FH_CODE, code),
    S("message", FH_MESSAGE, message), U("zerocopy", FH_ZEROCOPY, zerocopy),
    U("round", FH_ROUND, round),       U("offset", FH_OFFSET, offset),
    U("total", FH_TOTAL, total),       U("bags", FH_BAGS, bags),
    U("confirm", FH_CONFIRM, confirm), S("grad", FH_GRAD, grad),
    U("at", FH_AT, at),                U("segment", FH_SEGMENT, segment),
    S("shm", FH_SHM, shm),             S("link", FH_TRANSPORT, transport),
    U("maxshm", FH_SEGMAX, segmax),    U("dev", FH_DEV, dev),
    S("gpu", FH_GPU, gpu),             S("ipc", FH_IPC, ipc),
};
#undef U
#undef S
#define NFIELDS (sizeof fields / sizeof fields[0])

size_t frame_missing(uint32_t has, uint32_t need, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    if ((has & need) == need)
        return 0; /* the usual case, asked of every push and result: no walk of the table */
    for (size_t i = 0; i < NFIELDS; i++) {
        if (!(need & fields[i].bit) || (has & fields[i].bit))
            continue;
        int w = snprintf(buf + used, len > used ? len - used : 0, "%s%s", used ? ", " : "", fields[i].key);
        if (w < 0 || (size_t)w >= (len > used ? len - used : 0))
            break;
        used += (size_t)w;
    }
    return used;
}

/* The header is read straight from its bytes rather than through
 * msgpack_unpack: msgpack-c reserves memory for as many elements as an
 * array or map header announces before it checks that the bytes exist (9
 * bytes claiming 2^32 entries ask for ~128 GiB), and a protocol header is a
 * flat map of scalars that needs no object tree. This reader allocates
 * nothing, never reads past the H bytes it is given, and skips the values
 * of unknown keys whatever their type. */
typedef struct mp_cur {
    const uint8_t *p, *end;
} mp_cur;

static uint64_t mp_be(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < w; i++)
        v = v << 8 | p[i];
    return v;
}

/* Read a string: 1 ok, 0 not a string (nothing consumed), -1 truncated. */
static int mp_read_str(mp_cur *c, frame_str *out)
{
    if (c->p >= c->end)
        return -1;
    uint8_t b = *c->p;
    unsigned w;
    uint64_t n;
    if (b >= 0xa0 && b <= 0xbf) {
        w = 0;
        n = b & 0x1f;
    } else if (b >= 0xd9 && b <= 0xdb) {
        w = 1u << (b - 0xd9);
        if ((size_t)(c->end - c->p) < 1 + w)
            return -1;
        n = mp_be(c->p + 1, w);
    } else {
        return 0;
    }
    if ((uint64_t)(c->end - c->p - 1 - w) < n)
        return -1;
    out->p = (const char *)c->p + 1 + w;
    out->n = (uint32_t)n;
    c->p += 1 + w + n;
    return 1;
}

/* Read an integer: 1 ok, 0 not an integer, -2 negative, -1 truncated. */
static int mp_read_uint(mp_cur *c, uint64_t *out)
{
    if (c->p >= c->end)
        return -1;
    uint8_t b = *c->p;
    if (b <= 0x7f) {
        *out = b;
        c->p++;
        return 1;
    }
    if (b >= 0xe0)
        return -2;
    if (b < 0xcc || b > 0xd3)
        return 0;
    unsigned w = 1u << ((b - 0xcc) & 3);
    if ((size_t)(c->end - c->p) < 1 + w)
        return -1;
    uint64_t v = mp_be(c->p + 1, w);
    if (b >= 0xd0 && (v >> (8 * w - 1)) & 1)
        return -2; /* a signed encoding of a negative number */
    *out = v;
    c->p += 1 + w;
    return 1;
}

/* Skip one object of any type. 0 ok, -1 truncated or invalid. Nested
 * containers are counted, not recursed into, and a container may not
 * announce more elements than bytes remain. */
static int mp_skip(mp_cur *c)
{
    uint64_t items = 1;
    while (items > 0) {
        if (c->p >= c->end)
            return -1;
        uint8_t b = *c->p++;
        size_t left = (size_t)(c->end - c->p);
        uint64_t skip = 0, elems = 0;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixint, nil, bool */
        } else if (b == 0xc1) {
            return -1; /* never used */
        } else if (b >= 0xa0 && b <= 0xbf) {
            skip = b & 0x1f;
        } else if (b >= 0x90 && b <= 0x9f) {
            elems = b & 0x0f;
        } else if (b >= 0x80 && b <= 0x8f) {
            elems = 2 * (uint64_t)(b & 0x0f);
        } else {
            static const uint8_t width[] = {
                /* c4..c6 bin */ 1, 2, 4, /* c7..c9 ext */ 1, 2, 4, /* ca cb float */ 4, 8,
                /* cc..cf uint */ 1, 2, 4, 8, /* d0..d3 int */ 1, 2, 4, 8,
                /* d4..d8 fixext */ 2, 3, 5, 9, 17, /* d9..db str */ 1, 2, 4,
                /* dc dd array */ 2, 4, /* de df map */ 2, 4};
            unsigned w = width[b - 0xc4];
            bool prefixed = (b >= 0xc4 && b <= 0xc9) || b >= 0xd9;
            if (!prefixed) {
                skip = w;
            } else {
                if (left < w)
                    return -1;
                uint64_t v = mp_be(c->p, w);
                c->p += w;
                left -= w;
                if (b == 0xdc || b == 0xdd)
                    elems = v;
                else if (b == 0xde || b == 0xdf)
                    elems = 2 * v;
                else
                    skip = v + (b >= 0xc7 && b <= 0xc9); /* ext: + its type byte */
            }
        }
        if (skip > left || elems > left)
            return -1;
        c->p += skip;
        items = items - 1 + elems;
    }
    return 0;
}

static frame_status frame_bad(frame_decoder *d, const char *fmt, const char *arg)
{
    snprintf(d->err, sizeof d->err, fmt, arg);
    return FRAME_BAD;
}

/* Header keys and the names of types and layouts are at most 8 bytes, a
 * dozen of them on every frame: each is compared as one zero-padded
 * little-endian word rather than byte by byte. p[0, n) lies inside
 * [p, end); a full word is loaded only when 8 bytes are there. */
#define FRAME_WORD_MAX 8u
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "header words are little-endian");

static uint64_t frame_word(const char *p, uint32_t n, const char *end)
{
    assert(n <= FRAME_WORD_MAX && n <= (size_t)(end - p));
    uint64_t w = 0;
    if (end - p >= 8) {
        memcpy(&w, p, 8);
        if (n < 8)
            w &= ((uint64_t)1 << (8 * n)) - 1;
    } else {
        memcpy(&w, p, n);
    }
    return w;
}

static uint64_t frame_word_c(const char *lit)
{
    return frame_word(lit, (uint32_t)strlen(lit), lit + strlen(lit));
}

/* Words of the names compared on every frame (filled before main). */
static uint64_t type_word, type_name_word[FT_LAST + 1], dense_word, sparse_word;
static uint32_t type_name_len[FT_LAST + 1];

static frame_type type_from_str(frame_str s, const char *end)
{
    if (s.n > FRAME_WORD_MAX)
        return FT_OTHER;
    uint64_t w = frame_word(s.p, s.n, end);
    for (unsigned t = FT_HELLO; t <= FT_LAST; t++)
        if (w == type_name_word[t] && s.n == type_name_len[t])
            return (frame_type)t;
    return FT_OTHER;
}

static frame_layout layout_from_str(frame_str s, const char *end)
{
    if (s.n == 5 && frame_word(s.p, 5, end) == dense_word)
        return LAYOUT_DENSE;
    if (s.n == 6 && frame_word(s.p, 6, end) == sparse_word)
        return LAYOUT_SPARSE;
    return LAYOUT_OTHER;
}

/* Known keys by a tiny hash of their length and three bytes, which is
 * collision-free for protocol v1's keys (checked when the table is built,
 * before main); a hit is then confirmed byte by byte. */
#define FIELD_HASH_SIZE 64
static int8_t field_by_hash[FIELD_HASH_SIZE];

static unsigned frame_key_hash(const char *p, uint32_t n)
{
    assert(n >= 2);
    return (n * 2 + (uint8_t)p[0] + (uint8_t)p[1] * 3u + (uint8_t)p[n - 1] * 3u) & (FIELD_HASH_SIZE - 1);
}

__attribute__((constructor)) static void frame_fields_index(void)
{
    memset(field_by_hash, -1, sizeof field_by_hash);
    type_word = frame_word_c("type");
    for (unsigned t = FT_HELLO; t <= FT_LAST; t++)
    {
        type_name_word[t] = frame_word_c(type_names[t]);
        type_name_len[t] = (uint32_t)strlen(type_names[t]);
    }
    dense_word = frame_word_c("dense");
    sparse_word = frame_word_c("sparse");
    for (size_t f = 0; f < NFIELDS; f++) {
        assert(fields[f].klen <= FRAME_WORD_MAX); /* a longer key needs a longer compare */
        fields[f].word = frame_word_c(fields[f].key);
        unsigned h = frame_key_hash(fields[f].key, fields[f].klen);
        assert(field_by_hash[h] == -1); /* a new key must keep the hash collision-free */
        field_by_hash[h] = (int8_t)f;
    }
}

static const field_spec *frame_field(frame_str k, uint64_t word)
{
    if (k.n < 2 || k.n > FRAME_WORD_MAX)
        return NULL; /* no key of protocol v1 is that short or long */
    int f = field_by_hash[frame_key_hash(k.p, k.n)];
    if (f < 0 || fields[f].klen != k.n || fields[f].word != word)
        return NULL;
    return &fields[f];
}

/* Fill *out from the H header bytes at p. */
static frame_status decode_map(frame_decoder *d, const uint8_t *p, size_t h, frame_hdr *out)
{
    mp_cur c = {p, p + h};
    uint8_t b = *c.p;
    uint64_t n;
    if (b >= 0x80 && b <= 0x8f) {
        n = b & 0x0f;
        c.p++;
    } else if (b == 0xde || b == 0xdf) {
        unsigned w = b == 0xde ? 2 : 4;
        if (h < 1 + w)
            return frame_bad(d, "header map is truncated%s", "");
        n = mp_be(c.p + 1, w);
        c.p += 1 + w;
    } else {
        return frame_bad(d, "header is not a msgpack map%s", "");
    }
    if (n > (uint64_t)(c.end - c.p) / 2)
        return frame_bad(d, "header map announces more entries than it has bytes%s", "");
    bool have_type = false;
    for (uint64_t i = 0; i < n; i++) {
        frame_str key;
        int r = mp_read_str(&c, &key);
        if (r < 0)
            return frame_bad(d, "header map is truncated%s", "");
        if (r == 0)
            return frame_bad(d, "header key is not a string%s", "");
        uint64_t word = key.n <= FRAME_WORD_MAX ? frame_word(key.p, key.n, (const char *)c.end) : 0;
        if (key.n == 4 && word == type_word) {
            if (have_type)
                return frame_bad(d, "field \"type\" appears twice%s", "");
            r = mp_read_str(&c, &out->type_str);
            if (r < 0)
                return frame_bad(d, "header map is truncated%s", "");
            if (r == 0)
                return frame_bad(d, "field \"type\" is not a string%s", "");
            have_type = true;
            continue;
        }
        const field_spec *fs = frame_field(key, word);
        if (!fs) {
            if (mp_skip(&c) < 0)
                return frame_bad(d, "header is not valid msgpack%s", "");
            continue;
        }
        if (out->has & fs->bit)
            return frame_bad(d, "field \"%s\" appears twice", fs->key);
        char *slot = (char *)out + fs->off;
        if (fs->kind == FK_UINT) {
            uint64_t v;
            r = mp_read_uint(&c, &v);
            if (r == -1)
                return frame_bad(d, "header map is truncated%s", "");
            if (r != 1)
                return frame_bad(d, "field \"%s\" is not an unsigned integer", fs->key);
            memcpy(slot, &v, sizeof v);
        } else {
            frame_str v;
            r = mp_read_str(&c, &v);
            if (r < 0)
                return frame_bad(d, "header map is truncated%s", "");
            if (r == 0)
                return frame_bad(d, "field \"%s\" is not a string", fs->key);
            memcpy(slot, &v, sizeof v);
        }
        out->has |= fs->bit;
    }
    if (c.p != c.end)
        return frame_bad(d, "trailing bytes after the header map%s", "");
    if (!have_type)
        return frame_bad(d, "header has no \"type\" field%s", "");
    out->type = type_from_str(out->type_str, (const char *)c.end);
    out->layout = (out->has & FH_LAYOUT) ? layout_from_str(out->layout_str, (const char *)c.end) : LAYOUT_NONE;
    if (!(out->has & FH_PAYLOAD))
        out->payload = 0;
    return FRAME_OK;
}

frame_status frame_decode_header(frame_decoder *d, const uint8_t *p, size_t len, frame_hdr *out,
                                 size_t *consumed)
{
    *consumed = 0;
    if (len < FRAME_PREFIX_LEN)
        return FRAME_NEED_MORE;
    uint32_t h = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    if (h == 0 || h > FRAME_HDR_MAX) {
        snprintf(d->err, sizeof d->err, "header length %u outside 1..%u", h, FRAME_HDR_MAX);
        return FRAME_BAD;
    }
    if (h > d->max_header) {
        memset(out, 0, sizeof *out);
        snprintf(d->err, sizeof d->err, "header of %u bytes exceeds the limit of %u", h, d->max_header);
        return FRAME_TOO_LARGE;
    }
    if (len - FRAME_PREFIX_LEN < h)
        return FRAME_NEED_MORE;
    memset(out, 0, sizeof *out);
    frame_status st = decode_map(d, p + FRAME_PREFIX_LEN, h, out);
    if (st != FRAME_OK)
        return st;
    *consumed = FRAME_PREFIX_LEN + h;
    if (out->payload > d->max_payload) {
        snprintf(d->err, sizeof d->err, "payload of %llu bytes exceeds the limit of %llu",
                 (unsigned long long)out->payload, (unsigned long long)d->max_payload);
        return FRAME_TOO_LARGE;
    }
    return FRAME_OK;
}

/* ---- encoding ---------------------------------------------------------- */

typedef struct fixed_buf {
    uint8_t *p;
    size_t len, cap;
    bool overflow;
} fixed_buf;

static int fixed_write(void *data, const char *buf, size_t n)
{
    fixed_buf *fb = data;
    if (fb->overflow || fb->cap - fb->len < n) {
        fb->overflow = true;
        return -1;
    }
    memcpy(fb->p + fb->len, buf, n);
    fb->len += n;
    return 0;
}

static void pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

size_t frame_encode_header(const frame_hdr *h, uint8_t *buf, size_t cap)
{
    if (cap < FRAME_PREFIX_LEN)
        return 0;
    size_t body_cap = cap - FRAME_PREFIX_LEN;
    if (body_cap > FRAME_HDR_MAX)
        body_cap = FRAME_HDR_MAX;
    fixed_buf fb = {buf + FRAME_PREFIX_LEN, 0, body_cap, false};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, fixed_write);

    uint32_t n = 1;
    for (size_t f = 0; f < NFIELDS; f++)
        n += (h->has & fields[f].bit) != 0;
    msgpack_pack_map(&pk, n);
    pack_str(&pk, "type", 4);
    if (h->type == FT_OTHER)
        pack_str(&pk, h->type_str.p, h->type_str.n);
    else {
        const char *t = frame_type_name(h->type);
        pack_str(&pk, t, strlen(t));
    }
    for (size_t f = 0; f < NFIELDS; f++) {
        const field_spec *fs = &fields[f];
        if (!(h->has & fs->bit))
            continue;
        pack_str(&pk, fs->key, fs->klen);
        const char *slot = (const char *)h + fs->off;
        if (fs->kind == FK_UINT) {
            uint64_t v;
            memcpy(&v, slot, sizeof v);
            msgpack_pack_uint64(&pk, v);
        } else {
            frame_str s;
            memcpy(&s, slot, sizeof s);
            pack_str(&pk, s.p ? s.p : "", s.p ? s.n : 0);
        }
    }
    if (fb.overflow || fb.len == 0)
        return 0;
    uint32_t hl = (uint32_t)fb.len;
    buf[0] = (uint8_t)(hl >> 24);
    buf[1] = (uint8_t)(hl >> 16);
    buf[2] = (uint8_t)(hl >> 8);
    buf[3] = (uint8_t)hl;
    return FRAME_PREFIX_LEN + hl;
}

int frame_dtype_type(frame_str s)
{
    if (s.n == 0 || frame_str_eq(s, "f32"))
        return HALF_FP32;
    if (frame_str_eq(s, "f16"))
        return HALF_FP16;
    if (frame_str_eq(s, "bf16"))
        return HALF_BF16;
    return -1;
}

const char *frame_dtype_name(int t)
{
    assert(t == HALF_FP32 || t == HALF_FP16 || t == HALF_BF16);
    return t == HALF_FP16 ? "f16" : t == HALF_BF16 ? "bf16" : "f32";
}

uint64_t frame_push_payload_size(const frame_hdr *h)
{
    if (h->layout == LAYOUT_DENSE) {
        /* A name that is no type counts as f32: whoever reads the frame
         * refuses the dtype before its size matters. */
        int t = frame_dtype_type(h->dtype);
        uint64_t esz = t == HALF_FP16 || t == HALF_BF16 ? 2 : 4;
        if (h->count > UINT64_MAX / esz)
            return UINT64_MAX;
        return h->count * esz;
    }
    if (h->layout == LAYOUT_SPARSE) {
        if (h->cols > (UINT64_MAX / 4 - 8) || h->nnz > UINT64_MAX / (8 + 4 * h->cols))
            return UINT64_MAX;
        return h->nnz * (8 + 4 * h->cols);
    }
    return UINT64_MAX;
}
