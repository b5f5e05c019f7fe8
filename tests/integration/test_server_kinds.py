"""The batch-update kind of psbench-server, spoken to by hand (raw frames):
fetch, rounds, the update's arithmetic, the admission errors, a trainer lost
mid-round, and a new job on the same server afterwards. Also: message types
a kind does not have are refused without closing the connection.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_server_kinds.py
(PSBENCH_SERVER_DEVICE=test runs the same on the test device.)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402


def f32(x):
    return psb.f32(x)


class BatchUpdateServer(psb.PsbTestCase):

    def server_bu(self, trainers=2, extra=()):
        return self.reg.server(trainers=trainers, kind="batch-update",
                               extra=["--in-features", "3", "--out-features", "2", "--lr", "0.5",
                                      "--momentum", "0.9", "--seed", "7"] + list(extra))

    def fetch(self, c):
        c.send_frame({"type": "fetch"})
        h, p = c.recv_frame()
        self.assertEqual(h.get("type"), "params", h)
        self.assertEqual(h["count"], len(p) // 4)
        return h, psb.parse_dense(p)

    def test_rounds_and_arithmetic(self):
        s = self.server_bu()
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        h, p0 = self.fetch(a)
        self.assertEqual((h["round"], h["offset"], h["count"], h["total"]), (0, 0, 8, 8))
        _, p0b = self.fetch(b)
        self.assertEqual(p0, p0b)
        k = 1 / 3 ** 0.5
        self.assertTrue(all(-k <= v <= k for v in p0), p0)
        g1 = [1, 2, 3, 4, 5, 6, 7, 8]
        g2 = [-1, 0, 1, 2, 3, 4, 5, 6]
        want, buf = list(p0), [0.0] * 8
        for rnd in range(3):
            a.push(psb.dense_push(40 + rnd, 0, g1))
            b.push(psb.dense_push(rnd, 0, g2))
            for c in (a, b):
                h, p = c.recv_frame()
                self.assertEqual(h.get("type"), "result", h)
                self.assertEqual((h["batch"], h["round"], h["count"]), (rnd, rnd + 1, 8))
                got = psb.parse_dense(p)
            for i in range(8):
                g = f32(f32(g1[i] + g2[i]) * psb.mean_scale(2))
                buf[i] = g if rnd == 0 else f32(f32(0.9 * buf[i]) + g)
                want[i] = f32(want[i] - f32(0.5 * buf[i]))
            for i in range(8):
                self.assertAlmostEqual(got[i], want[i], places=5)
        h, p = self.fetch(b)
        self.assertEqual(h["round"], 3)
        self.assertEqual(p, got)

    def test_admission_errors_keep_the_connection(self):
        s = self.server_bu()
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        a.push(psb.dense_push(0, 0, [1.0] * 7))          # the part has 8 elements
        self.expect_error(a, "shape_mismatch")
        a.push(psb.sparse_push(0, 0, 4, 2, [1], [1.0, 2.0]))
        self.expect_error(a, "unsupported")
        a.push(psb.dense_push(0, 1, [1.0] * 8))          # one bucket only
        self.expect_error(a, "unsupported")
        a.push(psb.dense_push(0, 0, [1.0] * 8))
        a.push(psb.dense_push(1, 0, [1.0] * 8))          # still in the open round
        self.expect_error(a, "duplicate_push")
        b.push(psb.dense_push(0, 0, [3.0] * 8))
        for c in (a, b):
            h, _ = c.recv_frame()
            self.assertEqual(h.get("type"), "result", h)

    def test_fetch_on_an_average_server_is_unsupported(self):
        s = self.reg.server(trainers=1)
        c = self.client(s)
        self.hello_ok(c, 0)
        c.send_frame({"type": "fetch"})
        self.expect_error(c, "unsupported")
        c.push(psb.dense_push(0, 0, [2.0, 4.0]))       # the connection still works
        h, p = c.recv_frame()
        self.assertEqual(psb.parse_dense(p), [2.0, 4.0])

    def test_trainer_lost_mid_round_then_a_new_job(self):
        s = self.server_bu()
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        _, p0 = self.fetch(a)
        a.push(psb.dense_push(0, 0, [1.0] * 8))
        # b sends half of its push, then goes away.
        hdr, payload = psb.dense_push(0, 0, [2.0] * 8)
        b.send_raw(psb.encode_frame(hdr, payload)[:-12])
        b.close()
        self.expect_error(a, "peer_lost", batch=0, bucket=0)
        a.push(psb.dense_push(1, 0, [1.0] * 8))
        self.expect_error(a, "peer_lost")
        a.close()
        # Everybody left: the next job starts from a fresh model.
        c, d = self.client(s), self.client(s)
        self.hello_ok(c, 0)
        self.hello_ok(d, 1)
        h, p = self.fetch(c)
        self.assertEqual((h["round"], p), (0, p0))
        c.push(psb.dense_push(0, 0, [1.0] * 8))
        d.push(psb.dense_push(0, 0, [1.0] * 8))
        for x in (c, d):
            h, _ = x.recv_frame()
            self.assertEqual((h.get("type"), h.get("round")), ("result", 1), h)

    def test_batch_update_size_below_the_trainer_count(self):
        s = self.server_bu(trainers=3, extra=["--batch-update-size", "2"])
        cs = [self.client(s) for _ in range(3)]
        for r, c in enumerate(cs):
            self.hello_ok(c, r)
        cs[0].push(psb.dense_push(0, 0, [1.0] * 8))
        cs[1].push(psb.dense_push(0, 0, [1.0] * 8))
        for c in cs[:2]:
            h, _ = c.recv_frame()
            self.assertEqual((h["batch"], h["round"]), (0, 1), h)
        cs[2].push(psb.dense_push(0, 0, [1.0] * 8))    # opens round 1
        cs[0].push(psb.dense_push(1, 0, [1.0] * 8))
        for c in (cs[2], cs[0]):
            h, _ = c.recv_frame()
            self.assertEqual((h["batch"], h["round"]), (1, 2), h)

    def test_cli(self):
        for args, why in ((["--kind", "batch-update", "--part", "2/2"], "--part"),
                          (["--in-features", "3"], "need --kind batch-update"),
                          (["--kind", "batch-update", "--lr", "x"], "--lr"),
                          (["--kind", "batch-update", "--batch-update-size", "5"], "more than the 2"),
                          (["--kind", "nope"], "batch-update"),
                          (["--device", "gpu"], "--device")):
            rc, _, err = self.reg.run([psb.bin_path("psbench-server"), "--standalone", "--trainers", "2",
                                       "--listen", "127.0.0.1:0"] + args, timeout=20)
            self.assertNotEqual(rc, 0, args)
            self.assertIn(why, err, (args, err))
            self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    psb.main()
