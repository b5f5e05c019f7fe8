"""Protocol errors, provoked by a raw client against psbench-server
--trainers 2, and exact results.

After each bad behaviour the server must still serve a correct round: two
well-behaved raw clients push small integer vectors and both get the exact
float32 mean. Per DESIGN.md (wire protocol v1): after bad_frame, auth and
too_large the server answers and closes that connection; after
stale_batch, duplicate_push, shape_mismatch and unsupported it discards the
frame's payload and keeps the connection.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_errors.py
"""
import os
import resource
import re
import socket
import struct
import time
import sys

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import dense_push, sparse_push, expected_dense_mean, expected_sparse_mean  # noqa: E402

KINDS = ("average", "average-batch")


class ErrorsBase(psb.PsbTestCase):
    kind = "average"

    def server(self, trainers=2, **kw):
        return self.reg.server(trainers=trainers, kind=self.kind, **kw)

    def pair(self, server, token=None):
        a, b = self.client(server), self.client(server)
        self.hello_ok(a, 0, token)
        self.hello_ok(b, 1, token)
        return a, b

    def good_round_token(self, server, token, batch=1000):
        a, b = self.pair(server, token)
        self.dense_round([a, b], batch, 0)


# ---- bad_frame ---------------------------------------------------------------

class BadFrame(ErrorsBase):

    def test_push_before_hello(self):
        s = self.server()
        c = self.client(s)
        c.push(dense_push(0, 0, [1.0, 2.0, 3.0]))
        self.expect_error(c, "bad_frame")
        c.expect_closed()
        self.good_round(s)

    def test_other_type_before_hello(self):
        s = self.server()
        c = self.client(s)
        c.send_frame({"type": "ping"})
        self.expect_error(c, "bad_frame")
        c.expect_closed()
        self.good_round(s)

    def test_zero_length_prefix(self):
        s = self.server()
        c = self.client(s)
        c.send_raw(b"\0\0\0\0")
        self.expect_error(c, "bad_frame")
        c.expect_closed()
        self.good_round(s)

    def test_zero_length_prefix_after_hello(self):
        # The bad connection is a member (rank 0) while rank 1 stays: rank 0
        # reconnects and the pair still completes a correct round.
        s = self.server()
        a, b = self.pair(s)
        a.send_raw(b"\0\0\0\0")
        self.expect_error(a, "bad_frame")
        a.expect_closed()
        b.expect_nothing(0.2)
        a2 = self.client(s)
        self.hello_ok(a2, 0)
        self.dense_round([a2, b], 5, 0)

    def test_header_length_over_limit(self):
        s = self.server()
        c = self.client(s)
        c.send_raw(struct.pack(">I", 65537) + b"\x80")
        self.expect_error(c, "bad_frame")
        c.expect_closed()
        self.good_round(s)

    def test_header_not_msgpack(self):
        s = self.server()
        bad_headers = [
            b"\xc1\xc1\xc1\xc1\xc1",                       # never-used msgpack byte
            msgpack.packb([1, 2, 3]),                      # not a map
            msgpack.packb({"batch": 1}),                   # no "type"
            msgpack.packb({"type": 7}),                    # type not a string
            msgpack.packb({"type": "hello", "rank": "x"}),  # known field, wrong type
            msgpack.packb({1: 2, "type": "hello"}),        # key not a string
            msgpack.packb({"type": "hello"}) + b"\x00",    # trailing bytes
            msgpack.packb({"type": "hello", "version": 1})[:-1],  # truncated map
        ]
        for body in bad_headers:
            with self.subTest(body=body):
                c = self.client(s)
                c.send_raw(struct.pack(">I", len(body)) + body)
                self.expect_error(c, "bad_frame")
                c.expect_closed()
        self.good_round(s)

    def test_push_missing_fields_after_hello(self):
        s = self.server()
        a, b = self.pair(s)
        a.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "f32",
                      "layout": "dense"})  # no count
        self.expect_error(a, "bad_frame")
        a.expect_closed()
        a2 = self.client(s)
        self.hello_ok(a2, 0)
        self.dense_round([a2, b], 0, 0)

    def test_payload_size_disagrees_with_shape(self):
        s = self.server()
        a, b = self.pair(s)
        h, p = dense_push(0, 0, [1.0] * 4)
        a.send_frame(h, p + b"\0\0\0\0")  # 20 bytes for count 4
        self.expect_error(a, "bad_frame")
        a.expect_closed()
        a2 = self.client(s)
        self.hello_ok(a2, 0)
        self.dense_round([a2, b], 0, 0)

    def test_rank_already_connected(self):
        s = self.server()
        a, b = self.pair(s)
        dup = self.client(s)
        h, _ = dup.hello(0)
        self.assertEqual(h.get("type"), "error", h)
        self.assertEqual(h.get("code"), "bad_frame", h)
        dup.expect_closed()
        # the original rank-0 connection is unaffected
        a.expect_nothing(0.2)
        self.dense_round([a, b], 0, 0)
        self.dense_round([b, a], 1, 3)

    def test_third_rank_refused(self):
        s = self.server()
        a, b = self.pair(s)
        third = self.client(s)
        h, _ = third.hello(2)
        self.assertEqual((h.get("type"), h.get("code")), ("error", "bad_frame"), h)
        third.expect_closed()
        self.dense_round([a, b], 0, 0)

    def test_third_rank_refused_while_a_member_is_away(self):
        # rank 0 leaves while rank 1 stays: its slot is kept for rank 0.
        s = self.server()
        a, b = self.pair(s)
        a.close()
        third = self.client(s)
        h, _ = third.hello(2)
        self.assertEqual((h.get("type"), h.get("code")), ("error", "bad_frame"), h)
        third.expect_closed()
        a2 = self.client(s)
        self.hello_ok(a2, 0)
        self.dense_round([a2, b], 0, 0)

    def test_hello_without_rank(self):
        s = self.server()
        c = self.client(s)
        c.send_frame({"type": "hello", "version": 1, "role": "trainer"})
        self.expect_error(c, "bad_frame")
        c.expect_closed()
        self.good_round(s)

    def test_hello_with_payload(self):
        s = self.server()
        c = self.client(s)
        c.send_frame({"type": "hello", "version": 1, "role": "trainer", "rank": 0}, b"abcd")
        self.expect_error(c, "bad_frame")
        c.expect_closed()
        self.good_round(s)


class HelloTimeout(ErrorsBase):
    """A connection that does not become a trainer in --hello-timeout
    seconds (silent, or only failed hellos) is answered bad_frame and
    closed; trainers that said hello are not touched by it."""

    def test_silent_and_failing_connections_are_closed(self):
        s = self.server(extra=("--hello-timeout", "1"))
        silent = self.client(s)
        failing = self.client(s)
        h, _ = failing.hello(0, version=2)  # unsupported: connection kept
        self.assertEqual((h.get("type"), h.get("code")), ("error", "unsupported"), h)
        a, b = self.pair(s)
        for c in (silent, failing):
            frames = c.expect_closed(timeout=10)
            self.assertEqual([(f[0].get("type"), f[0].get("code")) for f in frames], [("error", "bad_frame")])
            self.assertIn("no hello", frames[0][0].get("message", ""))
        time.sleep(1.2)  # past the timeout for a and b too: they stay
        self.dense_round([a, b], 0, 0)
        self.assert_server_alive(s)


class DescriptorsRunOut(ErrorsBase):
    """Out of descriptors, the server answers each connection waiting in its
    backlog with `resources` (through the descriptor it keeps spare) and
    closes it, instead of leaving it there or spinning on a listener that
    stays readable, and accepts again once connections go away.
    (test_fd_limit.py: the trainers' side and the master's.)"""

    def test_refuses_then_recovers(self):
        # The limit is set once the server is up: what it holds then (a real
        # GPU's runtime holds dozens: seen on an H200) plus 24, so that its
        # descriptors run out before its cap on connections yet to say
        # hello (its trainers + 64) refuses first.
        s = self.reg.start([psb.bin_path("psbench-server"), "--standalone", "--trainers", "3",
                            "--listen", "%s:0" % psb.HOST], name="server", cls=psb.Server)
        s.wait_ready()
        pid = s.server_pid()
        limit = len(os.listdir("/proc/%d/fd" % pid)) + 24
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
        a, b = self.pair(s)
        extra = [self.client(s) for _ in range(limit + 8)]  # more than it can take
        refused = 0
        for c in extra:
            try:
                h, _ = c.recv_frame(0.3)
            except socket.timeout:
                continue  # accepted: it waits for a hello
            self.assertEqual((h.get("type"), h.get("code")), ("error", "resources"), h)
            self.assertIn("out of file descriptors (limit %d)" % limit, h.get("message"))
            c.expect_closed()
            refused += 1
        self.assertGreaterEqual(refused, 8, s.describe())
        self.assert_server_alive(s)
        # Said once, not once per refusal (nor a loop of retries).
        self.assertEqual(s.stderr().count("refused a trainer"), 1, s.stderr()[-2000:])
        self.assertNotIn("not accepting for 1 s", s.stderr())
        for c in extra:
            c.close()
        time.sleep(0.2)
        c = self.client(s)
        self.hello_ok(c, 2)  # accepted again
        self.dense_round([a, b, c], 0, 0)


# ---- auth ------------------------------------------------------------------------

class Auth(ErrorsBase):

    def test_missing_and_wrong_token(self):
        s = self.server(token="s3cret")
        for tok in (None, "wrong", "s3cre", "s3crett", ""):
            with self.subTest(token=tok):
                c = self.client(s)
                h, _ = c.hello(0, token=tok)
                self.assertEqual((h.get("type"), h.get("code")), ("error", "auth"), h)
                self.assertTrue(h.get("message"))
                c.expect_closed()
        # refused hellos took no slot: ranks 0 and 1 still join
        self.good_round_token(s, "s3cret")

    def test_token_not_needed_is_ignored(self):
        s = self.server()
        a, b = self.pair(s, token="anything")
        self.dense_round([a, b], 0, 0)


# ---- stale_batch -----------------------------------------------------------

class StaleBatch(ErrorsBase):

    def run_stale(self):
        s = self.server()
        a, b = self.pair(s)
        self.dense_round([a, b], 0, 0)
        a.push(dense_push(0, 0, [9.0] * 8))
        self.expect_error(a, "stale_batch", batch=0, bucket=0)
        a.expect_nothing(0.2)  # connection kept
        # a following valid push on the same connection works
        self.dense_round([a, b], 1, 0)
        # older than the newest resolved batch of the bucket: stale too
        b.push(dense_push(0, 0, [9.0] * 8))
        self.expect_error(b, "stale_batch", batch=0, bucket=0)
        self.dense_round([b, a], 2, 0)
        # another bucket is independent: batch 0 of bucket 1 is fine
        self.dense_round([a, b], 0, 1)

    def test_stale_batch(self):
        self.run_stale()

    def test_stale_batch_average_batch(self):
        self.kind = "average-batch"
        self.run_stale()


# ---- duplicate_push ----------------------------------------------------------

class DuplicatePush(ErrorsBase):

    def run_dup(self, sparse=False):
        s = self.server()
        a, b = self.pair(s)
        if not sparse:
            va = [float(i + 1) for i in range(16)]
            vdup = [1000.0 + i for i in range(16)]
            vb = [float(3 * i - 7) for i in range(16)]
            a.push(dense_push(1, 0, va))
            a.push(dense_push(1, 0, vdup))
            # (b pushes only after a got the error: a's push came first)
            self.expect_error(a, "duplicate_push", batch=1, bucket=0)
            a.expect_nothing(0.2)
            b.push(dense_push(1, 0, vb))
            exp = expected_dense_mean([va, vb], 2)
            self.expect_dense_result(a, 1, 0, exp)
            self.expect_dense_result(b, 1, 0, exp)
        else:
            pa = ([1, 4], [1.0, 2.0, 3.0, 4.0])
            pdup = ([1, 2, 3], [100.0] * 6)
            pb = ([4, 0], [5.0, 6.0, 7.0, 8.0])
            a.push(sparse_push(1, 0, 8, 2, *pa))
            a.push(sparse_push(1, 0, 8, 2, *pdup))
            self.expect_error(a, "duplicate_push", batch=1, bucket=0)
            b.push(sparse_push(1, 0, 8, 2, *pb))
            idx, vals = expected_sparse_mean([pa, pb], 2, 2)
            self.expect_sparse_result(a, 1, 0, 8, 2, idx, vals)
            self.expect_sparse_result(b, 1, 0, 8, 2, idx, vals)
        self.dense_round([a, b], 2, 0)

    def test_duplicate_push_dense(self):
        self.run_dup()

    def test_duplicate_push_dense_average_batch(self):
        self.kind = "average-batch"
        self.run_dup()

    def test_duplicate_push_sparse(self):
        self.run_dup(sparse=True)

    def test_duplicate_push_sparse_average_batch(self):
        self.kind = "average-batch"
        self.run_dup(sparse=True)


# ---- shape_mismatch ------------------------------------------------------------

class ShapeMismatch(ErrorsBase):

    def run_dense(self):
        s = self.server()
        a, b = self.pair(s)
        va = [float(i) for i in range(8)]
        vb = [float(10 - i) for i in range(8)]
        a.push(dense_push(0, 0, va))
        self.barrier(a)  # a's push is first: b's is the one that mismatches
        b.push(dense_push(0, 0, [5.0] * 4))           # count differs
        self.expect_error(b, "shape_mismatch", batch=0, bucket=0)
        b.push(sparse_push(0, 0, 8, 1, [1], [2.0]))   # layout differs
        self.expect_error(b, "shape_mismatch", batch=0, bucket=0)
        b.expect_nothing(0.2)                          # connection kept
        b.push(dense_push(0, 0, vb))
        exp = expected_dense_mean([va, vb], 2)
        self.expect_dense_result(a, 0, 0, exp)
        self.expect_dense_result(b, 0, 0, exp)
        self.dense_round([a, b], 1, 0)

    def test_dense_count(self):
        self.run_dense()

    def test_dense_count_average_batch(self):
        self.kind = "average-batch"
        self.run_dense()

    def run_sparse(self, bad_first):
        s = self.server()
        a, b = self.pair(s)
        rows, cols = 10, 2
        pa = ([3, 7], [1.0, 2.0, 3.0, 4.0])
        pb = ([4, 3], [5.0, 6.0, 7.0, 8.0])
        if not bad_first:
            a.push(sparse_push(0, 0, rows, cols, *pa))
            self.barrier(a)
        # index out of range (== rows), then negative, then rows/cols differ
        for bad in ([2, 10], [-1]):
            b.push(sparse_push(0, 0, rows, cols, bad, [9.0] * (2 * len(bad))))
            self.expect_error(b, "shape_mismatch", batch=0, bucket=0)
        if not bad_first:
            b.push(sparse_push(0, 0, rows + 1, cols, [1], [9.0, 9.0]))
            self.expect_error(b, "shape_mismatch", batch=0, bucket=0)
            b.push(sparse_push(0, 0, rows, cols + 1, [1], [9.0, 9.0, 9.0]))
            self.expect_error(b, "shape_mismatch", batch=0, bucket=0)
        b.expect_nothing(0.2)
        if bad_first:
            a.push(sparse_push(0, 0, rows, cols, *pa))
        b.push(sparse_push(0, 0, rows, cols, *pb))
        idx, vals = expected_sparse_mean([pa, pb], 2, cols)
        self.expect_sparse_result(a, 0, 0, rows, cols, idx, vals)
        self.expect_sparse_result(b, 0, 0, rows, cols, idx, vals)
        self.dense_round([a, b], 1, 0)

    def run_sparse_large_bad_index(self):
        """A push large enough to be received straight into the server's
        buffers, its header apart from its payload: a bad row index is
        still refused at once (shape_mismatch) and the bucket then completes
        with good pushes."""
        s = self.server()
        a, b = self.pair(s)
        rows, cols, nnz = 10, 1, 8192  # 64 KiB of indices
        idx = [i % rows for i in range(nnz)]
        bad = list(idx)
        bad[nnz - 5] = 1000000
        frame = psb.encode_frame(*sparse_push(0, 0, rows, cols, bad, [1.0] * nnz))
        hl = 4 + struct.unpack(">I", frame[:4])[0]
        a.send_raw(frame[:hl])
        time.sleep(0.3)  # the server parses the header before the payload comes
        a.send_raw(frame[hl:])
        self.expect_error(a, "shape_mismatch", batch=0, bucket=0)
        pa = (idx, [1.0] * nnz)
        pb = (idx, [3.0] * nnz)
        a.push(sparse_push(0, 0, rows, cols, *pa))
        b.push(sparse_push(0, 0, rows, cols, *pb))
        want_idx, want_vals = expected_sparse_mean([pa, pb], 2, cols)
        self.expect_sparse_result(a, 0, 0, rows, cols, want_idx, want_vals)
        self.expect_sparse_result(b, 0, 0, rows, cols, want_idx, want_vals)

    def test_sparse_large_bad_index(self):
        self.run_sparse_large_bad_index()

    def test_sparse_large_bad_index_average_batch(self):
        self.kind = "average-batch"
        self.run_sparse_large_bad_index()

    def test_sparse_index_out_of_range(self):
        self.run_sparse(bad_first=False)

    def test_sparse_index_out_of_range_average_batch(self):
        self.kind = "average-batch"
        self.run_sparse(bad_first=False)

    def test_sparse_bad_push_first(self):
        self.run_sparse(bad_first=True)

    def test_sparse_bad_push_first_average_batch(self):
        self.kind = "average-batch"
        self.run_sparse(bad_first=True)


# ---- too_large ---------------------------------------------------------------

class TooLarge(ErrorsBase):

    def test_too_large(self):
        s = self.server(extra=["--max-payload", "1024"])
        a, b = self.pair(s)
        h, _ = dense_push(0, 0, [0.0] * 1024)
        h["payload"] = 4096
        # Send only the header: the server must refuse without reading the
        # payload (and we avoid a reset racing its error frame).
        a.send_frame(h)
        self.expect_error(a, "too_large", batch=0, bucket=0)
        a.expect_closed()
        # a payload at the limit is fine
        a2 = self.client(s)
        self.hello_ok(a2, 0)
        va = [float(i) for i in range(256)]
        vb = [float(-i) for i in range(256)]
        a2.push(dense_push(0, 0, va))
        b.push(dense_push(0, 0, vb))
        exp = expected_dense_mean([va, vb], 2)
        self.expect_dense_result(a2, 0, 0, exp)
        self.expect_dense_result(b, 0, 0, exp)
        self.dense_round([a2, b], 1, 0)

    def test_too_large_before_hello(self):
        s = self.server(extra=["--max-payload", "1K"])
        c = self.client(s)
        c.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "f32",
                      "layout": "dense", "count": 1000, "payload": 4000})
        self.expect_error(c, "too_large")
        c.expect_closed()
        self.good_round(s)


# ---- unsupported -------------------------------------------------------------

class Unsupported(ErrorsBase):

    def test_dtype_f16_four_byte_payload(self):
        # f16 dtype, payload sized count*4 (what the server's size check
        # expects): unsupported, payload discarded, connection kept.
        s = self.server()
        a, b = self.pair(s)
        h = {"type": "push", "batch": 0, "bucket": 0, "dtype": "f16", "layout": "dense",
             "count": 8}
        # a payload that would parse as a hello frame if it were not skipped
        junk = psb.encode_frame({"type": "x"})
        junk = (junk + b"\0" * 32)[:32]
        a.send_frame(h, junk)
        self.expect_error(a, "unsupported", batch=0, bucket=0)
        a.expect_nothing(0.2)
        self.dense_round([a, b], 0, 0)

    def test_dtype_f16_natural_payload(self):
        # A real f16 push carries 2 bytes per element. The frame is well
        # formed (its length is in "payload"), only the dtype is unknown:
        # DESIGN.md says `unsupported` and keep the connection.
        s = self.server()
        a, b = self.pair(s)
        h = {"type": "push", "batch": 0, "bucket": 0, "dtype": "f16", "layout": "dense",
             "count": 8}
        a.send_frame(h, b"\x00\x3c" * 8)  # eight 1.0 in f16
        self.expect_error(a, "unsupported", batch=0, bucket=0)
        a.expect_nothing(0.2)
        self.dense_round([a, b], 0, 0)

    def test_layout_unknown(self):
        s = self.server()
        a, b = self.pair(s)
        a.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "f32",
                      "layout": "coo", "count": 2}, b"\0" * 8)
        self.expect_error(a, "unsupported", batch=0, bucket=0)
        a.expect_nothing(0.2)
        self.dense_round([a, b], 0, 0)

    def test_unknown_type_after_hello(self):
        s = self.server()
        a, b = self.pair(s)
        a.send_frame({"type": "gossip", "payload": 40}, b"\x00\x00\x00\x08" + b"\x81" * 36)
        self.expect_error(a, "unsupported")
        a.expect_nothing(0.2)
        b.send_frame({"type": "result", "batch": 0})
        self.expect_error(b, "unsupported")
        self.dense_round([a, b], 0, 0)

    def test_hello_version_2(self):
        s = self.server()
        c = self.client(s)
        h, _ = c.hello(0, version=2)
        self.assertEqual((h.get("type"), h.get("code")), ("error", "unsupported"), h)
        # connection kept: a v1 hello on it works
        self.hello_ok(c, 0)
        b = self.client(s)
        self.hello_ok(b, 1)
        self.dense_round([c, b], 0, 0)

    def test_hello_role_not_trainer(self):
        s = self.server()
        c = self.client(s)
        h, _ = c.hello(0, role="server")
        self.assertEqual((h.get("type"), h.get("code")), ("error", "unsupported"), h)
        self.hello_ok(c, 0)
        b = self.client(s)
        self.hello_ok(b, 1)
        self.dense_round([c, b], 0, 0)

    def test_second_hello(self):
        s = self.server()
        a, b = self.pair(s)
        h, _ = a.hello(0)
        self.assertEqual((h.get("type"), h.get("code")), ("error", "unsupported"), h)
        self.dense_round([a, b], 0, 0)


# ---- exact results -------------------------------------------------------------

class Results(ErrorsBase):

    def run_three(self):
        # 1/3 is not exact in float32: the result must be
        # float32(sum * float32(1/3)), bit for bit.
        s = self.server(trainers=3)
        cs = [self.client(s) for _ in range(3)]
        for r, c in enumerate(cs):
            self.hello_ok(c, r)
        pushes = [[0.5 * (i % 7) + r - 0.25 * r for i in range(64)] for r in range(3)]
        for c, v in zip(cs, pushes):
            c.push(dense_push(0, 2, v))
        exp = expected_dense_mean(pushes, 3)
        for c in cs:
            self.expect_dense_result(c, 0, 2, exp)
        # identical pushes: mean of x is float32(3x * float32(1/3)), not x
        v = [1.0, 3.0, 5.0, 7.0, 100.0, -11.0]
        for c in cs:
            c.push(dense_push(1, 2, v))
        exp = expected_dense_mean([v, v, v], 3)
        for c in cs:
            self.expect_dense_result(c, 1, 2, exp)

    def test_exact_mean_three_trainers(self):
        self.run_three()

    def test_exact_mean_three_trainers_average_batch(self):
        self.kind = "average-batch"
        self.run_three()

    def run_interleaved(self):
        # A big first push that is overtaken by the second one half-way:
        # the server receives the first push directly into its accumulator,
        # then must switch to adding without losing or doubling anything.
        s = self.server()
        a, b = self.pair(s)
        n = 100000
        va = [float((i % 97) - 48) for i in range(n)]
        vb = [float((i % 89) * 2 - 80) for i in range(n)]
        ha, pa = dense_push(0, 0, va)
        hb, pb = dense_push(0, 0, vb)
        fa = psb.encode_frame(ha, pa)
        cut = len(fa) - len(pa) + 123 * 1024 + 2  # mid-float, mid-payload
        a.send_raw(fa[:cut])
        time.sleep(0.2)
        b.push((hb, pb))
        time.sleep(0.2)
        a.send_raw(fa[cut:])
        exp = expected_dense_mean([va, vb], 2)
        self.expect_dense_result(a, 0, 0, exp)
        self.expect_dense_result(b, 0, 0, exp)
        self.dense_round([a, b], 1, 0)

    def test_interleaved_big_pushes(self):
        self.run_interleaved()

    def test_interleaved_big_pushes_average_batch(self):
        self.kind = "average-batch"
        self.run_interleaved()

    def run_sparse_coalesce(self):
        s = self.server()
        a, b = self.pair(s)
        rows, cols = 20, 3
        # duplicates within one push (5 twice) and rows shared across pushes (2)
        pa = ([5, 2, 5, 9], [float(v) for v in range(1, 13)])
        pb = ([2, 17, 0], [float(-v) for v in range(1, 10)])
        a.push(sparse_push(4, 1, rows, cols, *pa))
        b.push(sparse_push(4, 1, rows, cols, *pb))
        idx, vals = expected_sparse_mean([pa, pb], 2, cols)
        self.assertEqual(idx, [0, 2, 5, 9, 17])
        self.expect_sparse_result(a, 4, 1, rows, cols, idx, vals)
        self.expect_sparse_result(b, 4, 1, rows, cols, idx, vals)

    def test_sparse_coalesce(self):
        self.run_sparse_coalesce()

    def test_sparse_coalesce_average_batch(self):
        self.kind = "average-batch"
        self.run_sparse_coalesce()

    def run_sparse_empty(self):
        s = self.server()
        a, b = self.pair(s)
        rows, cols = 6, 2
        pb = ([4, 1, 4], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        a.push(sparse_push(0, 0, rows, cols, [], []))
        self.barrier(a)  # the empty push opens the entry
        b.push(sparse_push(0, 0, rows, cols, *pb))
        idx, vals = expected_sparse_mean([pb], 2, cols)
        self.expect_sparse_result(a, 0, 0, rows, cols, idx, vals)
        self.expect_sparse_result(b, 0, 0, rows, cols, idx, vals)
        # the other order, then both empty
        a.push(sparse_push(1, 0, rows, cols, *pb))
        self.barrier(a)  # the non-empty push opens the entry this time
        b.push(sparse_push(1, 0, rows, cols, [], []))
        self.expect_sparse_result(a, 1, 0, rows, cols, idx, vals)
        self.expect_sparse_result(b, 1, 0, rows, cols, idx, vals)
        a.push(sparse_push(2, 0, rows, cols, [], []))
        b.push(sparse_push(2, 0, rows, cols, [], []))
        self.expect_sparse_result(a, 2, 0, rows, cols, [], [])
        self.expect_sparse_result(b, 2, 0, rows, cols, [], [])
        self.dense_round([a, b], 3, 0)

    def test_sparse_empty_push(self):
        self.run_sparse_empty()

    def test_sparse_empty_push_average_batch(self):
        self.kind = "average-batch"
        self.run_sparse_empty()

    def test_many_buckets_in_flight(self):
        # Several (batch, bucket) futures open at once, completed in a
        # different order than they were opened.
        s = self.server()
        a, b = self.pair(s)
        pushes = {}
        for k in range(6):
            va = [float(k * 10 + j) for j in range(5)]
            vb = [float(j - k) for j in range(5)]
            pushes[k] = (va, vb)
            a.push(dense_push(0, k, va))
        self.barrier(a)
        for k in reversed(range(6)):
            b.push(dense_push(0, k, pushes[k][1]))
        got = {}
        for c in (a, b):
            for _ in range(6):
                h, p = c.recv_frame(10)
                self.assertEqual(h.get("type"), "result", h)
                k = h["bucket"]
                exp = expected_dense_mean(list(pushes[k]), 2)
                self.assertEqual(p, psb.dense_payload(exp), "bucket %d" % k)
                got.setdefault(k, 0)
                got[k] += 1
        self.assertEqual(got, {k: 2 for k in range(6)})



# ---- spliced (zero-copy) results --------------------------------------------

ZEROCOPY = {"zerocopy": 1}


class SplicedResults(ErrorsBase):
    """With --splice, results of 64 KiB and more go by splice to trainers that said hello
    with zerocopy=1 (they read every result of a batch before pushing the
    next): the trainer reads straight from the result buffer's pages. Such a
    buffer must not be reused while a trainer has not read it, however far
    the other trainers race ahead; and a client that did not promise gets
    copies, so it may push ahead as the protocol allows."""

    n = 32768  # floats: 128 KiB results

    def server(self, trainers=2, extra=("--splice",), **kw):
        return super().server(trainers=trainers, extra=extra, **kw)

    def values(self, rank, batch, bucket):
        return [float(((i * 7 + rank * 31 + batch * 13 + bucket * 5) % 251) - 125) for i in range(self.n)]

    def spliced_bytes(self, s):
        rc, out, _ = s.terminate_and_wait()
        self.assertEqual(rc, 0, s.describe())
        m = re.search(r"result payload bytes: (\d+) spliced \(zero-copy\), (\d+) copied", out)
        self.assertIsNotNone(m, out)
        return int(m.group(1)), int(m.group(2))

    def run_slow_reader(self):
        s = self.server()
        # a receive buffer that holds whole results: the server's splice of
        # them completes long before this trainer reads them
        slow, fast = self.client(s, rcvbuf=1 << 20), self.client(s)
        self.hello_ok(slow, 0, extra=ZEROCOPY)
        self.hello_ok(fast, 1, extra=ZEROCOPY)
        buckets, batches = 2, 4

        def push_batch(c, rank, b):
            for k in range(buckets):
                c.push(dense_push(b, k, self.values(rank, b, k)))

        def read_batch(c, b):
            for k in range(buckets):
                exp = expected_dense_mean([self.values(0, b, k), self.values(1, b, k)], 2)
                self.expect_dense_result(c, b, k, exp)

        push_batch(slow, 0, 0)
        push_batch(fast, 1, 0)
        for b in range(batches):
            read_batch(fast, b)
            if b + 1 < batches:
                # The fast trainer's next batch is received while the slow
                # one's results of this batch still wait, unread.
                push_batch(fast, 1, b + 1)
                self.barrier(fast)
            read_batch(slow, b)
            if b + 1 < batches:
                push_batch(slow, 0, b + 1)
        spliced, copied = self.spliced_bytes(s)
        self.assertEqual((spliced, copied), (2 * batches * buckets * self.n * 4, 0))

    def test_slow_reader_gets_its_results_intact(self):
        self.run_slow_reader()

    def test_slow_reader_gets_its_results_intact_average_batch(self):
        self.kind = "average-batch"
        self.run_slow_reader()

    def test_client_that_pushes_ahead_gets_copies(self):
        # `a` did not promise to read before pushing on: it pushes batches 1
        # and 2 before reading batch 0, which protocol v1 allows. Its
        # results are copied, so batch 0's buffer may be reused at once.
        s = self.server()
        a = self.client(s, rcvbuf=1 << 20)
        b = self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1, extra=ZEROCOPY)
        v = self.values
        mean = [expected_dense_mean([v(0, t, 0), v(1, t, 0)], 2) for t in range(3)]
        a.push(dense_push(0, 0, v(0, 0, 0)))
        b.push(dense_push(0, 0, v(1, 0, 0)))
        self.expect_dense_result(b, 0, 0, mean[0])
        a.push(dense_push(1, 0, v(0, 1, 0)))  # ahead: batch 0 unread
        b.push(dense_push(1, 0, v(1, 1, 0)))
        self.expect_dense_result(b, 1, 0, mean[1])  # so a's batch-1 push was taken too
        a.push(dense_push(2, 0, v(0, 2, 0)))  # batch 0's buffer may take this push
        # a cannot be given a barrier (its unread results come first): give
        # the server time to take the push before batch 0 is read
        time.sleep(0.3)
        self.expect_dense_result(a, 0, 0, mean[0])
        self.expect_dense_result(a, 1, 0, mean[1])
        b.push(dense_push(2, 0, v(1, 2, 0)))
        self.expect_dense_result(a, 2, 0, mean[2])
        self.expect_dense_result(b, 2, 0, mean[2])
        spliced, copied = self.spliced_bytes(s)
        n = self.n * 4
        self.assertEqual((spliced, copied), (3 * n, 3 * n))  # b's spliced, a's copied

    def copies_for_everyone(self, extra):
        s = self.server(extra=extra)
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0, extra=ZEROCOPY)
        self.hello_ok(b, 1, extra=ZEROCOPY)
        exp = expected_dense_mean([self.values(0, 0, 0), self.values(1, 0, 0)], 2)
        a.push(dense_push(0, 0, self.values(0, 0, 0)))
        b.push(dense_push(0, 0, self.values(1, 0, 0)))
        self.expect_dense_result(a, 0, 0, exp)
        self.expect_dense_result(b, 0, 0, exp)
        self.assertEqual(self.spliced_bytes(s), (0, 2 * self.n * 4))

    def test_no_splice_copies_for_everyone(self):
        self.copies_for_everyone(("--splice", "--no-splice"))  # the last one wins

    def test_copies_for_everyone_by_default(self):
        self.copies_for_everyone(())

if __name__ == "__main__":
    psb.main()
