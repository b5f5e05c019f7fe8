/* frame.h — wire protocol v1: frame layout, header codec, error codes.
 *
 * Every message on a psbench TCP connection is
 *
 *     u32 big-endian H | H bytes: a msgpack map (the header) | P bytes payload
 *
 * with 1 <= H <= 65536 and P given by the header's "payload" field (absent
 * means 0). This module turns header bytes into a frame_hdr and back. It
 * never touches payload bytes: those are streamed by the owner of the
 * connection (the server reduces them as they arrive).
 *
 * Decoding is strict about what it knows and lenient about what it doesn't:
 * a known key with the wrong type is an error, an unknown key is skipped, so
 * later protocol extensions stay readable by older peers.
 */
#ifndef PSBENCH_FRAME_H
#define PSBENCH_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdbool.h>
#include <msgpack.h>

#define FRAME_PREFIX_LEN 4u
#define FRAME_HDR_MAX 65536u
#define FRAME_MAX_PAYLOAD_DEFAULT (1ull << 30)
#define FRAME_PROTOCOL_VERSION 1u

/* Message types. Unknown type strings decode as FT_OTHER (the receiver
 * decides whether that is an error: the server answers `unsupported`). */
typedef enum frame_type {
    FT_OTHER = 0,
    FT_HELLO,
    FT_WELCOME,
    FT_PUSH,
    FT_RESULT,
    FT_ERROR,
    FT_FETCH,  /* extension (batch-update): see docs/protocol.md */
    FT_PARAMS, /* extension (batch-update): the answer to fetch */
    FT_LOOKUP, /* extension (embedding): rows of the server's table, summed per bag */
    FT_ROWS,   /* extension (embedding): the answer to lookup */
    FT_UPDATE, /* extension (embedding): SGD on the rows a lookup named */
    FT_UPDATED, /* extension (embedding): an update asked with `ack` has been applied */
    FT_REDIRECT, /* extension (shm): the answer to a hello asking for shared memory: connect there */
    FT_EXPORT,   /* extension (CUDA IPC): device memory and an event, exported to the peer */
} frame_type;
#define FT_LAST FT_EXPORT

typedef enum frame_layout { LAYOUT_NONE = 0, LAYOUT_DENSE, LAYOUT_SPARSE, LAYOUT_OTHER } frame_layout;

/* Protocol error codes (the `code` field of an `error` frame). */
typedef enum frame_errcode {
    ERR_NONE = 0,
    ERR_BAD_FRAME,
    ERR_AUTH,
    ERR_STALE_BATCH,
    ERR_DUPLICATE_PUSH,
    ERR_SHAPE_MISMATCH,
    ERR_TOO_LARGE,
    ERR_UNSUPPORTED,
    ERR_PEER_LOST, /* extension: a peer vanished, the bucket can never resolve */
    ERR_BAD_INDEX, /* extension (embedding): an index or offset outside the rules */
    ERR_RESOURCES, /* extension: the server cannot take this connection (out of descriptors) */
    ERR_DEVICE,    /* extension: the server's device (a GPU) failed the work of this bucket or call */
    ERR_OTHER,     /* a code this build does not know */
} frame_errcode;

const char *frame_errcode_name(frame_errcode c);

/* A string inside a header. Decoded strings point into the header bytes
 * they came from and are valid only while those bytes are. */
typedef struct frame_str {
    const char *p;
    uint32_t n;
} frame_str;

/* s equals the C string lit. Inline so that, with a literal, strlen is a
 * constant: headers are compared on every frame. */
static inline bool frame_str_eq(frame_str s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && (n == 0 || memcmp(s.p, lit, n) == 0);
}

/* Presence bits of frame_hdr fields. */
enum {
    FH_PAYLOAD = 1u << 0,
    FH_VERSION = 1u << 1,
    FH_ROLE = 1u << 2,
    FH_RANK = 1u << 3,
    FH_TOKEN = 1u << 4,
    FH_SERVER = 1u << 5,
    FH_TRAINERS = 1u << 6,
    FH_BATCH = 1u << 7,
    FH_BUCKET = 1u << 8,
    FH_DTYPE = 1u << 9,
    FH_LAYOUT = 1u << 10,
    FH_COUNT = 1u << 11,
    FH_ROWS = 1u << 12,
    FH_COLS = 1u << 13,
    FH_NNZ = 1u << 14,
    FH_CODE = 1u << 15,
    FH_MESSAGE = 1u << 16,
    FH_ZEROCOPY = 1u << 17, /* extension (hello): see docs/protocol.md */
    FH_ROUND = 1u << 18,    /* extension (batch-update): the server's update round */
    FH_OFFSET = 1u << 19,   /* extension (batch-update): first element of a server's part */
    FH_TOTAL = 1u << 20,    /* extension (batch-update): elements of the whole model */
    FH_BAGS = 1u << 21,     /* extension (embedding): bags of a lookup/update/rows */
    FH_CONFIRM = 1u << 22,  /* extension (embedding): update: answer `updated` once applied */
    FH_GRAD = 1u << 23,     /* extension (embedding): update: the table's gradient, sparse or dense */
    FH_AT = 1u << 24,       /* extension (shm): the payload is in the sender's segment, at this offset */
    FH_SEGMENT = 1u << 25,  /* extension (shm): hello/welcome: a segment's size; its descriptor rides along */
    FH_SHM = 1u << 26,      /* extension (shm): redirect: the server's Unix socket (abstract name) */
    FH_TRANSPORT = 1u << 27, /* extension (shm): hello on TCP: `link` "shm" asks for shared memory */
    FH_SEGMAX = 1u << 28,   /* extension (shm): redirect: `maxshm`, the largest segment the server takes */
    FH_DEV = 1u << 29,      /* extension (CUDA IPC): the payload is in the sender's exported GPU memory, at this offset */
    FH_GPU = 1u << 30,      /* extension (CUDA IPC): welcome/export: the GPU's UUID */
    FH_IPC = 1u << 31,      /* extension (CUDA IPC): export: the IPC handles, hex (the last bit: `has` is full) */
};

/* Every header field protocol v1 knows, decoded. `has` says which were
 * present. `type` is always present in a valid header. */
typedef struct frame_hdr {
    frame_type type;
    frame_str type_str;
    uint32_t has;
    uint64_t payload;
    uint64_t version;
    frame_str role;
    uint64_t rank;
    frame_str token;
    uint64_t server;
    uint64_t trainers;
    uint64_t batch;
    uint64_t bucket;
    frame_str dtype;
    frame_layout layout;
    frame_str layout_str;
    uint64_t count;
    uint64_t rows;
    uint64_t cols;
    uint64_t nnz;
    frame_str code;
    frame_str message;
    uint64_t zerocopy; /* hello: 1 = results may be lent (read before pushing on) */
    uint64_t round;    /* batch-update: result/params: updates applied so far */
    uint64_t offset;   /* batch-update: params: the part's first element */
    uint64_t total;    /* batch-update: params: elements of the whole model */
    uint64_t bags;     /* embedding: lookup/update/rows: the number of bags */
    uint64_t confirm;  /* embedding: update: 1 = answer `updated` once it is applied */
    frame_str grad;    /* embedding: update: "sparse" (absent) or "dense" (docs/protocol.md) */
    uint64_t at;       /* shm: push/result/params: where the payload lies in the sender's segment */
    uint64_t segment;  /* shm: hello/welcome: the size of the segment passed with the frame */
    frame_str shm;     /* shm: redirect: the abstract Unix socket name */
    frame_str transport; /* shm: hello on TCP: "shm" = redirect me if you can */
    uint64_t segmax;   /* shm: redirect: the largest segment the server maps (--max-shm) */
    uint64_t dev;      /* CUDA IPC: push/result/params: where the payload lies in the sender's exported GPU memory */
    frame_str gpu;     /* CUDA IPC: welcome/export: the GPU's UUID ("GPU-...", or "fake") */
    frame_str ipc;     /* CUDA IPC: export: hex of the memory handle (and, from a trainer, the event's) */
} frame_hdr;

/* Result of frame_decode_header. */
typedef enum frame_status {
    FRAME_OK = 0,        /* a header was decoded */
    FRAME_NEED_MORE = 1, /* not enough bytes yet; nothing consumed */
    FRAME_BAD = -1,      /* malformed: protocol error `bad_frame` */
    FRAME_TOO_LARGE = -2 /* well-formed but payload > max_payload: `too_large` */
} frame_status;

/* Decoding settings and the reason of the last failure. Decoding itself
 * allocates nothing. */
typedef struct frame_decoder {
    uint64_t max_payload;
    /* Longest header taken (FRAME_HDR_MAX unless the owner lowers it: the
     * master does before a node has registered). A longer one, well-formed
     * or not, is FRAME_TOO_LARGE before any byte of it is looked at. */
    uint32_t max_header;
    char err[160]; /* reason of the last FRAME_BAD / FRAME_TOO_LARGE */
} frame_decoder;

void frame_decoder_init(frame_decoder *d, uint64_t max_payload);
void frame_decoder_free(frame_decoder *d);

/* Look at the `len` bytes at `p`, the start of a frame. On FRAME_OK the
 * header is in *out and *consumed is 4 + H (payload bytes, if any, follow).
 * On FRAME_TOO_LARGE *out holds the decoded header too (so an error reply
 * can name the batch and bucket) and *consumed is 4 + H — except for a
 * header longer than d->max_header: nothing decoded (*out zeroed), nothing
 * consumed. On FRAME_NEED_MORE
 * and FRAME_BAD nothing is consumed; d->err says what is wrong.
 * Never reads beyond p[len - 1]. */
frame_status frame_decode_header(frame_decoder *d, const uint8_t *p, size_t len, frame_hdr *out,
                                 size_t *consumed);

/* Encode `h` (its type from h->type, or h->type_str for FT_OTHER, and the
 * fields whose FH_ bit is set) as prefix + header into buf. Returns the
 * number of bytes written, or 0 if it does not fit in `cap` or would exceed
 * FRAME_HDR_MAX. */
size_t frame_encode_header(const frame_hdr *h, uint8_t *buf, size_t cap);

/* Convenience constructors for the common frames. */
frame_str frame_str_c(const char *s);
const char *frame_type_name(frame_type t);

/* The names of the fields in `need` that `has` lacks, in the header's
 * key order, comma-separated, into buf ("" when none): so that a refusal
 * says which field is missing rather than what its absence reads as (a
 * missing version is not "version 0"). Returns the length written. */
size_t frame_missing(uint32_t has, uint32_t need, char *buf, size_t len);

/* The element type a `dtype` names (a push, a result; a hello and
 * welcome: the narrow type a trainer pushes, docs/protocol.md "Narrow
 * pushes"): "f32" -> HALF_FP32, "f16" -> HALF_FP16, "bf16" -> HALF_BF16
 * (shared/half.h's half_type), -1 for any other name. An absent dtype
 * (s.n == 0) is f32: the protocol's one type before the extension. */
int frame_dtype_type(frame_str s);
/* The wire name of a half_type: "f32", "f16", "bf16". */
const char *frame_dtype_name(int half_type);

/* Payload size of a push/result described by h, or UINT64_MAX on overflow
 * (dense: count * 4, or count * 2 for a dtype of f16 or bf16; sparse:
 * nnz*8 + nnz*cols*4). */
uint64_t frame_push_payload_size(const frame_hdr *h);

#endif
