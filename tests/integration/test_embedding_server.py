"""The embedding kind of psbench-server (the DDP+RPC benchmark's parameter
server), spoken to by hand: lookups against a local EmbeddingBag(mode=sum)
computed from the same initial table, updates (SGD on the named rows), the
refusals (bad_index, shape_mismatch, unsupported) that keep the connection
and change nothing, and a trainer's update seen by its next lookup.

The seed's pattern (issue 26): an update with `grad` "dense" (the table's
dense gradient, then a step on every row) against a reference in float32,
bit for bit; `confirm` answered `updated` once applied, and only then; the
new fields' refusals; and the traffic the server counts by message type
(frames, bytes, payload bytes) equal to what crossed the socket.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_embedding_server.py
(PSBENCH_SERVER_DEVICE=test runs the same on the test device, where every
lookup and update completes late, from a worker thread.)
"""
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from bu_reference import Rng  # noqa: E402

f32 = psb.f32
RNG_STREAM_EMBEDDING = 2000

ROWS, COLS, LR, SEED = 20, 6, 0.05, 11


def initial_table(rows, cols, seed, rank):
    """The server's table: N(0, 1) from stream RNG_STREAM_EMBEDDING + rank,
    row-major, as a list of rows."""
    flat = Rng(seed, RNG_STREAM_EMBEDDING + rank).fill_normal(rows * cols)
    return [flat[r * cols:(r + 1) * cols] for r in range(rows)]


def bag_ends(offsets, nnz):
    return [offsets[b + 1] if b + 1 < len(offsets) else nnz for b in range(len(offsets))]


def embedding_bag_sum(table, indices, offsets):
    """EmbeddingBag(mode="sum") in float32: each bag from 0.0, rows added
    in index order."""
    cols = len(table[0])
    out = []
    for b, end in enumerate(bag_ends(offsets, len(indices))):
        row = [0.0] * cols
        for i in range(offsets[b], end):
            row = [f32(a + x) for a, x in zip(row, table[indices[i]])]
        out.append(row)
    return out


def apply_update(table, indices, offsets, grads, lr):
    """The server's SGD: bag by bag, position by position, in float32."""
    lr = f32(lr)
    for b, end in enumerate(bag_ends(offsets, len(indices))):
        for i in range(offsets[b], end):
            r = indices[i]
            table[r] = [f32(t - f32(lr * g)) for t, g in zip(table[r], grads[b])]


def apply_dense_update(table, indices, offsets, grads, lr):
    """The dense rule (EmbeddingBag sparse=False, then SGD): the table-sized
    gradient from 0.0, each bag's gradient added to the rows its positions
    name in order, in float32; then every element t - lr * g."""
    lr = f32(lr)
    cols = len(table[0])
    g = [[0.0] * cols for _ in table]
    for b, end in enumerate(bag_ends(offsets, len(indices))):
        for i in range(offsets[b], end):
            r = indices[i]
            g[r] = [f32(a + x) for a, x in zip(g[r], grads[b])]
    for r in range(len(table)):
        table[r] = [f32(t - f32(lr * x)) for t, x in zip(table[r], g[r])]


def pack_q(values):
    return struct.pack("<%dq" % len(values), *values)


def lookup_frame(batch, indices, offsets, **override):
    h = {"type": "lookup", "batch": batch, "nnz": len(indices), "bags": len(offsets)}
    h.update(override)
    return h, pack_q(indices) + pack_q(offsets)


def update_frame(batch, indices, offsets, grads, cols, **override):
    h = {"type": "update", "batch": batch, "nnz": len(indices), "bags": len(offsets), "cols": cols}
    h.update(override)
    flat = [v for row in grads for v in row]
    return h, pack_q(indices) + pack_q(offsets) + psb.dense_payload(flat)


class EmbeddingServer(psb.PsbTestCase):

    def server_emb(self, rank=0, trainers=1, rows=ROWS, cols=COLS, extra=()):
        return self.reg.server(trainers=trainers, kind="embedding",
                               extra=["--num-embeddings", str(rows), "--embedding-dim", str(cols),
                                      "--lr", str(LR), "--seed", str(SEED), "--rank", str(rank)] +
                               list(extra))

    def trainer(self, server, rank=0):
        c = self.client(server)
        self.hello_ok(c, rank)
        return c

    def lookup(self, c, batch, indices, offsets, cols=COLS):
        c.send_frame(*lookup_frame(batch, indices, offsets))
        h, p = c.recv_frame()
        self.assertEqual(h.get("type"), "rows", h)
        self.assertEqual((h["batch"], h["bags"], h["cols"], h["dtype"]), (batch, len(offsets), cols, "f32"), h)
        self.assertEqual(h.get("payload", 0), 4 * len(offsets) * cols, h)
        self.assertEqual(len(p), 4 * len(offsets) * cols)
        flat = psb.parse_dense(p)
        return [flat[b * cols:(b + 1) * cols] for b in range(len(offsets))]

    def read_table(self, c, rows=ROWS, cols=COLS, batch=900):
        """Every row, with single-index bags (0.0 + row = the row)."""
        return self.lookup(c, batch, list(range(rows)), list(range(rows)), cols)

    def assert_rows_equal(self, got, want, what=""):
        # Exact float32 equality, compared as bytes (so -0.0 != 0.0 too).
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(psb.dense_payload(g), psb.dense_payload(w),
                             "%s row %d: got %r want %r" % (what, i, g, w))
        self.assertEqual(len(got), len(want))

    # ---- lookups --------------------------------------------------------

    def test_lookup_matches_embedding_bag(self):
        s = self.server_emb(rank=2)
        c = self.trainer(s)
        table = initial_table(ROWS, COLS, SEED, 2)
        self.assert_rows_equal(self.read_table(c), table, "initial table")
        # Bags of 0, 1, many (with a row named three times), 0, 1, many.
        indices = [5, 3, 3, 19, 3, 0, 7, 7, 12, 1, 2, 4, 6, 8]
        offsets = [0, 0, 1, 6, 6, 7]
        got = self.lookup(c, 7, indices, offsets)
        self.assert_rows_equal(got, embedding_bag_sum(table, indices, offsets), "lookup")
        self.assertEqual(got[0], [0.0] * COLS)
        self.assertEqual(got[3], [0.0] * COLS)
        # No bags at all: an empty answer; bags but no indices: zero rows.
        self.assertEqual(self.lookup(c, 8, [], []), [])
        self.assertEqual(self.lookup(c, 9, [], [0, 0, 0]), [[0.0] * COLS] * 3)

    def test_default_shape_is_the_seeds(self):
        s = self.reg.server(trainers=1, kind="embedding")      # 300 x 64, seed 0, rank 0
        c = self.trainer(s)
        got = self.lookup(c, 0, [0, 299, 299], [0, 1], cols=64)
        table = initial_table(300, 64, 0, 0)
        self.assert_rows_equal(got, embedding_bag_sum(table, [0, 299, 299], [0, 1]))

    # ---- updates --------------------------------------------------------

    def test_update_changes_exactly_the_touched_rows(self):
        s0, s1 = self.server_emb(rank=0), self.server_emb(rank=1)
        c0, c1 = self.trainer(s0), self.trainer(s1)
        t0 = initial_table(ROWS, COLS, SEED, 0)
        t1 = initial_table(ROWS, COLS, SEED, 1)
        self.assertNotEqual(t0, t1)                     # each server its own table
        # Row 4 is named twice in bag 0 and once in bag 2; row 9 in bags 0
        # and 2; bag 1 is empty.
        indices = [4, 9, 4, 4, 9, 13]
        offsets = [0, 3, 3]
        grads = [[0.5 * (b + 1) + 0.25 * k for k in range(COLS)] for b in range(3)]
        c0.send_frame(*update_frame(1, indices, offsets, grads, COLS))
        want = [list(r) for r in t0]
        apply_update(want, indices, offsets, grads, LR)
        got = self.read_table(c0)                       # also: the update is seen
        self.assert_rows_equal(got, want, "after the update")
        for r in range(ROWS):
            if r in (4, 9, 13):
                self.assertNotEqual(got[r], t0[r], r)
            else:
                self.assertEqual(got[r], t0[r], r)
        # The summed bag gradients, within float rounding: row 4 moved by
        # lr * (2 g0 + g2).
        for k in range(COLS):
            moved = t0[4][k] - got[4][k]
            self.assertAlmostEqual(moved, LR * (2 * grads[0][k] + grads[2][k]), places=5)
        # The other server did not change.
        self.assert_rows_equal(self.read_table(c1), t1, "the other server")
        # rows_touched in the exit line: 6 index positions.
        rc, out, err = s0.terminate_and_wait()
        self.assertEqual(rc, 0, err)
        self.assertIn("1 updates, 6 rows touched", out)
        self.assertEqual(psb.metric_count(out, "method_metric,update"), 1, out)
        self.assertEqual(psb.metric_count(out, "method_metric,lookup"), 1, out)

    def test_update_then_lookup_is_ordered(self):
        s = self.server_emb()
        c = self.trainer(s)
        table = initial_table(ROWS, COLS, SEED, 0)
        # Many updates and lookups back to back, never waiting before the
        # lookup: each lookup must see every update sent before it.
        frames, want = [], []
        for b in range(30):
            indices = [(b * 7 + k) % ROWS for k in range(5)] + [b % ROWS]
            offsets = [0, 2]
            grads = [[float((b + k) % 5) - 2.0 for k in range(COLS)],
                     [0.125 * (b % 3) for _ in range(COLS)]]
            frames.append(lookup_frame(2 * b, indices, offsets))
            want.append(embedding_bag_sum(table, indices, offsets))
            frames.append(update_frame(2 * b + 1, indices, offsets, grads, COLS))
            apply_update(table, indices, offsets, grads, LR)
        c.send_raw(b"".join(psb.encode_frame(h, p) for h, p in frames))
        for b in range(30):
            h, p = c.recv_frame()
            self.assertEqual((h.get("type"), h.get("batch")), ("rows", 2 * b), h)
            flat = psb.parse_dense(p)
            self.assert_rows_equal([flat[:COLS], flat[COLS:]], want[b], "lookup %d" % b)
        self.assert_rows_equal(self.read_table(c), table, "the final table")

    def test_one_trainers_update_is_seen_by_another(self):
        # Two trainers, one table: a's update is applied before b's later
        # lookup (the device runs calls in the order they came in).
        s = self.server_emb(trainers=2)
        a, b = self.trainer(s, 0), self.trainer(s, 1)
        table = initial_table(ROWS, COLS, SEED, 0)
        a.send_frame(*update_frame(0, [3], [0], [[1.0] * COLS], COLS))
        self.barrier(a)                                   # a's update is applied
        apply_update(table, [3], [0], [[1.0] * COLS], LR)
        self.assert_rows_equal(self.lookup(b, 0, [3], [0]), [table[3]])

    # ---- the seed's pattern: dense gradients, confirmed updates -----------

    def test_dense_update_steps_the_whole_table(self):
        s = self.server_emb()
        c = self.trainer(s)
        table = initial_table(ROWS, COLS, SEED, 0)
        # Row 4 three times (twice in bag 0, once in bag 2), row 9 twice,
        # bag 1 empty: the dense rule sums a row's gradients before its one
        # step, which rounds otherwise than the sparse rule's step each.
        indices = [4, 9, 4, 4, 9, 13]
        offsets = [0, 3, 3]
        grads = [[f32(0.1 * (b + 1) + 0.37 * k) for k in range(COLS)] for b in range(3)]  # as sent
        dense = [list(r) for r in table]
        apply_dense_update(dense, indices, offsets, grads, LR)
        sparse = [list(r) for r in table]
        apply_update(sparse, indices, offsets, grads, LR)
        self.assertNotEqual(dense, sparse)  # the data tells the rules apart
        c.send_frame(*update_frame(5, indices, offsets, grads, COLS, grad="dense", confirm=1))
        h, p = c.recv_frame()
        self.assertEqual(h, {"type": "updated", "batch": 5})
        self.assertEqual(p, b"")
        got = self.read_table(c)
        self.assert_rows_equal(got, dense, "after a dense update")
        for r in range(ROWS):
            self.assertEqual(got[r] != table[r], r in (4, 9, 13), r)
        # grad "sparse" is the default's rule.
        c.send_frame(*update_frame(6, indices, offsets, grads, COLS, grad="sparse"))
        apply_update(dense, indices, offsets, grads, LR)
        self.assert_rows_equal(self.read_table(c), dense, "after a sparse update")
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, err)
        self.assertIn("2 updates, 12 rows touched", out)

    def test_confirm_answers_once_applied(self):
        s = self.server_emb(trainers=2)
        a, b = self.trainer(s, 0), self.trainer(s, 1)
        table = initial_table(ROWS, COLS, SEED, 0)
        # Without confirm (or with 0) an update is not answered: the next
        # frame is the lookup's rows, which see it.
        a.send_frame(*update_frame(0, [3], [0], [[1.0] * COLS], COLS))
        a.send_frame(*update_frame(1, [3], [0], [[1.0] * COLS], COLS, confirm=0))
        for g in range(2):
            apply_update(table, [3], [0], [[1.0] * COLS], LR)
        self.assert_rows_equal(self.lookup(a, 2, [3], [0]), [table[3]])
        # With confirm: `updated` with the update's batch, once applied —
        # another trainer's lookup after it sees the update; many in a row
        # are answered in order.
        for k in range(5):
            a.send_frame(*update_frame(10 + k, [k], [0], [[0.5] * COLS], COLS, confirm=1, grad="dense"))
            apply_dense_update(table, [k], [0], [[0.5] * COLS], LR)
        for k in range(5):
            h, p = a.recv_frame()
            self.assertEqual((h.get("type"), h.get("batch"), p), ("updated", 10 + k, b""), h)
        self.assert_rows_equal(self.lookup(b, 0, list(range(5)), list(range(5))), table[:5])
        a.expect_nothing()

    def test_new_fields_refused_and_nothing_changes(self):
        s = self.server_emb()
        c = self.trainer(s)
        before = self.read_table(c)
        g = [[100.0] * COLS]
        # Values the fields do not take: unsupported, the payload skipped,
        # no `updated`, the table as it was.
        c.send_frame(*update_frame(1, [0], [0], g, COLS, grad="sparsest", confirm=1))
        self.expect_error(c, "unsupported", batch=1)
        c.send_frame(*update_frame(2, [0], [0], g, COLS, confirm=2))
        self.expect_error(c, "unsupported", batch=2)
        # A refused call that asked for confirm is answered by its error
        # only; the dense rule refuses what the sparse one does, first.
        for batch, (idx, off, code) in enumerate((([0, ROWS], [0], "bad_index"), ([0, 1], [1], "bad_index"),
                                                  ([0, 1], [0, 3], "bad_index")), start=3):
            c.send_frame(*update_frame(batch, idx, off, g * len(off), COLS, grad="dense", confirm=1))
            self.expect_error(c, code, batch=batch)
        c.send_frame(*update_frame(8, [0], [0], [[1.0] * (COLS + 1)], COLS + 1, grad="dense", confirm=1))
        self.expect_error(c, "shape_mismatch", batch=8)
        h, p = update_frame(9, [0, 1], [0], g, COLS, grad="dense", confirm=1)
        c.send_frame(h, p[:-4])
        self.expect_error(c, "shape_mismatch", batch=9)
        # On a lookup both fields mean nothing (ignored).
        self.assert_rows_equal(self.lookup_with(c, 10, [0], [0], grad="dense", confirm=1), [before[0]])
        self.barrier(c)                               # no `updated` came before the barrier's answer
        self.assert_rows_equal(self.read_table(c), before, "after the refusals")
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, err)
        self.assertIn("0 updates, 0 rows touched", out)
        # The wrong type is a malformed header: bad_frame, the connection closes.
        s = self.server_emb()
        c = self.trainer(s)
        c.send_frame(*update_frame(1, [0], [0], g, COLS, confirm="yes"))
        self.expect_error(c, "bad_frame")
        c.expect_closed()
        self.assert_server_alive(s)

    def lookup_with(self, c, batch, indices, offsets, **extra):
        c.send_frame(*lookup_frame(batch, indices, offsets, **extra))
        h, p = c.recv_frame()
        self.assertEqual((h.get("type"), h.get("batch")), ("rows", batch), h)
        flat = psb.parse_dense(p)
        return [flat[b * COLS:(b + 1) * COLS] for b in range(len(offsets))]

    def test_traffic_counted_by_message_type(self):
        """The server's `calls` (its exit line here; the master's results
        from its reports): every lookup and update received, every rows and
        updated sent — frames, bytes on the wire, payload bytes — equal to
        what the socket carried."""
        s = self.server_emb()
        c = self.trainer(s)
        sent = {"lookup": [0, 0, 0], "update": [0, 0, 0]}
        got = {"rows": [0, 0, 0], "updated": [0, 0, 0]}

        def send(kind, hp):
            frame = psb.encode_frame(*hp)
            c.send_raw(frame)
            sent[kind] = [sent[kind][0] + 1, sent[kind][1] + len(frame), sent[kind][2] + len(hp[1])]

        def recv(kind):
            h, p = c.recv_frame()
            self.assertEqual(h.get("type"), kind, h)
            got[kind] = [got[kind][0] + 1, got[kind][1] + c.last_size, got[kind][2] + len(p)]

        for b in range(7):
            idx = [(b * 3 + k) % ROWS for k in range(2 + b)]
            off = [0, 1] if b % 2 else [0]
            send("lookup", lookup_frame(b, idx, off))
            recv("rows")
            send("update", update_frame(b, idx, off, [[0.25] * COLS] * len(off), COLS, grad="dense",
                                        confirm=1))
            recv("updated")
            send("update", update_frame(100 + b, idx, off, [[0.25] * COLS] * len(off), COLS))
        send("lookup", lookup_frame(99, [ROWS], [0]))        # refused: counted as received
        self.expect_error(c, "bad_index", batch=99)
        self.barrier(c)
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, err)
        want = dict(sent, **got)
        line = [l for l in out.splitlines() if ": calls:" in l]
        self.assertEqual(len(line), 1, out)
        for kind in ("lookup", "rows", "update", "updated"):
            f, b, p = want[kind]
            self.assertIn("%s %d (%d bytes, %d payload)" % (kind, f, b, p), line[0])
        self.assertEqual(want["lookup"][0], 8)
        self.assertEqual(want["updated"], [7, got["updated"][1], 0])

    # ---- refusals -------------------------------------------------------

    def test_bad_calls_keep_the_connection_and_change_nothing(self):
        s = self.server_emb()
        c = self.trainer(s)
        # Change the table first (so "unchanged" means more than "initial").
        c.send_frame(*update_frame(0, [1, 2], [0], [[1.0] * COLS], COLS))
        before = self.read_table(c)
        g3 = [[100.0] * COLS] * 3
        bad = [
            ("index == num_embeddings", [0, 1, ROWS], [0, 1, 2], "bad_index"),
            ("negative index", [0, -1, 2], [0, 1, 2], "bad_index"),
            ("offsets[0] != 0", [0, 1, 2], [1, 2, 2], "bad_index"),
            ("decreasing offsets", [0, 1, 2], [0, 2, 1], "bad_index"),
            ("offset past nnz", [0, 1, 2], [0, 1, 4], "bad_index"),
        ]
        for batch, (what, idx, off, code) in enumerate(bad):
            c.send_frame(*lookup_frame(100 + batch, idx, off))
            self.expect_error(c, code, batch=100 + batch)
            c.send_frame(*update_frame(200 + batch, idx, off, g3, COLS))
            self.expect_error(c, code, batch=200 + batch)
        # Wrong cols (payload sized for them, or for the right ones).
        c.send_frame(*update_frame(300, [0], [0], [[1.0] * (COLS + 1)], COLS + 1))
        self.expect_error(c, "shape_mismatch", batch=300)
        h, p = update_frame(301, [0], [0], [[1.0] * COLS], COLS)
        h["cols"] = COLS - 1
        c.send_frame(h, p)
        self.expect_error(c, "shape_mismatch", batch=301)
        # Wrong payload sizes: the frame's payload is read and discarded.
        h, p = lookup_frame(302, [0, 1], [0])
        c.send_frame(h, p + pack_q([5]))
        self.expect_error(c, "shape_mismatch", batch=302)
        h, p = lookup_frame(303, [0, 1], [0])
        c.send_frame(h, p[:-8])
        self.expect_error(c, "shape_mismatch", batch=303)
        h, p = update_frame(304, [0, 1], [0], [[1.0] * COLS], COLS)
        c.send_frame(h, p[:-4])
        self.expect_error(c, "shape_mismatch", batch=304)
        h, p = update_frame(305, [0, 1], [0], [[1.0] * COLS], COLS, nnz=3)
        c.send_frame(h, p)
        self.expect_error(c, "shape_mismatch", batch=305)
        # Push and fetch are not for this kind.
        c.push(psb.dense_push(0, 0, [1.0] * COLS))
        self.expect_error(c, "unsupported")
        c.push(psb.sparse_push(0, 0, ROWS, COLS, [1], [1.0] * COLS))
        self.expect_error(c, "unsupported")
        c.send_frame({"type": "fetch"})
        self.expect_error(c, "unsupported")
        # The connection still works and nothing changed.
        self.assert_rows_equal(self.read_table(c), before, "after the refusals")
        self.assert_server_alive(s)
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, err)
        self.assertIn("1 updates, 2 rows touched", out)

    def test_lookup_and_update_on_an_average_server_are_unsupported(self):
        s = self.reg.server(trainers=1)
        c = self.trainer(s)
        c.send_frame(*lookup_frame(3, [0, 1], [0]))
        self.expect_error(c, "unsupported", batch=3)
        c.send_frame(*update_frame(4, [0], [0], [[1.0] * COLS], COLS))
        self.expect_error(c, "unsupported", batch=4)
        c.push(psb.dense_push(0, 0, [2.0, 4.0]))        # the connection still works
        h, p = c.recv_frame()
        self.assertEqual(psb.parse_dense(p), [2.0, 4.0])

    def test_lookup_before_hello_is_bad_frame(self):
        s = self.server_emb()
        c = self.client(s)
        c.send_frame(*lookup_frame(0, [0], [0]))
        self.expect_error(c, "bad_frame")
        c.expect_closed()

    def test_trainer_gone_with_calls_in_flight(self):
        # A trainer that sends calls and leaves at once: the server stays
        # up (answers to a closed connection are dropped) and the next job
        # starts from a fresh table.
        s = self.server_emb()
        c = self.trainer(s)
        frames = []
        for b in range(20):
            frames.append(update_frame(b, [b % ROWS], [0], [[1.0] * COLS], COLS))
            frames.append(lookup_frame(b, list(range(ROWS)), [0]))
        c.send_raw(b"".join(psb.encode_frame(h, p) for h, p in frames))
        c.close()
        deadline = time.monotonic() + 10
        while "all trainers left" not in s.stderr():
            self.assertLess(time.monotonic(), deadline, s.describe())
            time.sleep(0.02)
        d = self.trainer(s)
        self.assert_rows_equal(self.read_table(d), initial_table(ROWS, COLS, SEED, 0), "a new job")
        self.assert_server_alive(s)

    def test_cli(self):
        for args, why in ((["--kind", "embedding", "--num-embeddings", "65536", "--embedding-dim", "32769"],
                           "2^31"),
                          (["--kind", "embedding", "--num-embeddings", "0"], "--num-embeddings"),
                          (["--kind", "embedding", "--embedding-dim", "x"], "--embedding-dim"),
                          (["--num-embeddings", "3"], "need --kind embedding"),
                          (["--kind", "embedding", "--momentum", "0.5"], "need --kind batch-update"),
                          (["--lr", "0.1"], "--lr and --seed need")):
            rc, _, err = self.reg.run([psb.bin_path("psbench-server"), "--standalone", "--trainers", "1",
                                       "--listen", "127.0.0.1:0"] + args, timeout=20)
            self.assertNotEqual(rc, 0, args)
            self.assertIn(why, err, (args, err))
            self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    psb.main()
