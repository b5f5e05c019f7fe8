#!/usr/bin/python3
"""make_corpus.py — write the seed corpus of fuzz_frame (tests/fuzz/corpus/).

Each seed is a byte stream of wire-protocol v1 frames
(u32 big-endian H | H bytes msgpack header map | payload). Uses Debian's
python3-msgpack. Run from anywhere:

    /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import os
import struct

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def frame(header, payload=b""):
    h = msgpack.packb(header, use_bin_type=True)
    return struct.pack(">I", len(h)) + h + payload


def f32_bytes(*vals):
    return struct.pack("<%df" % len(vals), *vals)


def i64(*vals):
    return struct.pack("<%dq" % len(vals), *vals)


def seeds():
    hello = frame({"type": "hello", "version": 1, "role": "trainer", "rank": 3,
                   "token": "s3cr3t"})
    welcome = frame({"type": "welcome", "version": 1, "server": 0, "trainers": 4})
    dense = frame({"type": "push", "batch": 7, "bucket": 1, "dtype": "f32",
                   "layout": "dense", "count": 4, "payload": 16},
                  f32_bytes(1.0, -2.5, 0.25, 8.0))
    # nnz = 2, cols = 3: 2 int64 indices, then 6 float32.
    sparse = frame({"type": "push", "batch": 7, "bucket": 2, "dtype": "f32",
                    "layout": "sparse", "rows": 1000, "cols": 3, "nnz": 2,
                    "payload": 2 * 8 + 2 * 3 * 4},
                   i64(999, 4) + f32_bytes(1, 2, 3, 4, 5, 6))
    error = frame({"type": "error", "code": "stale_batch",
                   "message": "batch 3 bucket 1 already resolved", "batch": 3,
                   "bucket": 1})
    result = frame({"type": "result", "batch": 7, "bucket": 1, "dtype": "f32",
                    "layout": "dense", "count": 2, "payload": 8}, f32_bytes(0.5, 0.5))
    too_large = frame({"type": "push", "batch": 1, "bucket": 0, "dtype": "f32",
                       "layout": "dense", "count": 1 << 30, "payload": 1 << 32})
    unknown = frame({"type": "gossip", "x": [1, -2, {"k": None}], "payload": 3,
                     "rank": 2**64 - 1}, b"abc")
    return {
        "hello": hello,
        "push_dense": dense,
        "push_sparse": sparse,
        "error": error,
        # Frames back to back, as one connection delivers them.
        "stream_session": hello + welcome + dense + result + error,
        # A frame cut in the middle of its header.
        "truncated": dense[: 4 + 9],
        # Header length 0 and header length 65537 (both refused).
        "bad_len_zero": b"\x00\x00\x00\x00" + hello[4:],
        "bad_len_65537": b"\x00\x01\x00\x01" + hello[4:],
        # Payload over the fuzzer's 1 MiB limit, then more frames.
        "too_large_then_hello": too_large + hello,
        # Unknown type and unknown keys, then a sparse push.
        "unknown_then_sparse": unknown + sparse,
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds()), OUT))


if __name__ == "__main__":
    main()
