"""psbench-server's cuda device, from the outside: what only a GPU device
does. (Every other integration test of the server also runs on it:
device_fakecuda_* in ctest on the fake GPU, gpu_server_* on a real one.)

  - a bucket resolves, and is answered, while another bucket's pushes are
    still streaming in (copied to the GPU as they arrive);
  - the method metrics of every kind are GPU times (events on the
    device's stream): one per job, strictly positive, and below the wall
    time of the batch, lookup or update they belong to;
  - a GPU that fails under the work: every bucket it touches, and every one
    after, is answered with the error code `device` naming the GPU; the
    server's log names it once; lookups of an embedding server likewise;
    nothing hangs and the server still ends cleanly on SIGTERM (fake GPU
    only: a real one cannot be made to fail on purpose);
  - a trainer lost while its bucket's job is in flight on the GPU (held
    there on the fake GPU, PSBENCH_FAKE_GPU_HOLD): buckets that can no
    longer complete fail at once with peer_lost naming it, the bucket in
    flight is answered to the others, a session that ends under a job
    drains it, and real trainers end naming the lost one;
  - the start line names the GPU;
  - narrow pushes (--compress fp16|bf16: docs/protocol.md, "Narrow
    pushes"), kinds average (2 and 3 trainers: the stash, the pair fold,
    the accumulator) and average-batch, buckets of 300,001 elements: the
    answers are the mean of the widened pushes, summed in f32 in the order
    the pushes came, narrowed, bit for bit as computed here in Python.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_cuda_server.py
The device is $PSBENCH_SERVER_DEVICE (default fake-cuda; cuda on a GPU).
"""
import os
import re
import signal
import struct
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

DEVICE = os.environ.get("PSBENCH_SERVER_DEVICE") or "fake-cuda"
FAKE = DEVICE == "fake-cuda"


class CudaServer(psb.PsbTestCase):

    def cuda_server(self, trainers=2, kind=None, extra=(), env=None):
        return self.reg.server(trainers=trainers, kind=kind, extra=["--device", DEVICE] + list(extra),
                               env=psb.base_env(env or {}))

    def test_start_line_names_the_gpu(self):
        s = self.cuda_server()
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, s.describe())
        self.assertRegex(err, r"device cuda \(GPU 0: [^)]+\)", err)

    # -- narrow pushes: their folds on the GPU ---------------------------------

    @staticmethod
    def f32(x):
        """x rounded to float32 (an add or a multiply of two float32
        values, done in double, rounded once more: the same as float32's
        own, double having more than twice the bits)."""
        return struct.unpack("<f", struct.pack("<f", x))[0]

    @staticmethod
    def widen(dtype, h):
        if dtype == "f16":
            return struct.unpack("<e", struct.pack("<H", h))[0]
        return struct.unpack("<f", struct.pack("<I", h << 16))[0]

    @staticmethod
    def narrow(dtype, x):
        if dtype == "f16":
            return struct.unpack("<H", struct.pack("<e", x))[0]  # round half to even
        u = struct.unpack("<I", struct.pack("<f", x))[0]
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF

    def test_narrow_pushes_folded_on_the_gpu(self):
        n = 300001
        for dtype in ("f16", "bf16"):
            for kind, ntr in ((None, 2), (None, 3), ("average-batch", 2)):
                s = self.cuda_server(trainers=ntr, kind=kind)
                cs = [self.client(s) for _ in range(ntr)]
                for r, c in enumerate(cs):
                    self.assertEqual(self.hello_ok(c, r, extra={"dtype": dtype}).get("dtype"), dtype)
                # values of many magnitudes, exact in the narrow type
                pushes = [[self.narrow(dtype, ((i * 7919 + r * 104729) % 2001 - 1000) * 2.0 ** ((i + r) % 9 - 6))
                           for i in range(n)] for r in range(ntr)]
                for c, p in zip(cs, pushes):  # in slot order: the order each element sees them
                    c.send_frame({"type": "push", "batch": 2, "bucket": 0, "dtype": dtype, "layout": "dense",
                                  "count": n}, struct.pack("<%dH" % n, *p))
                scale = self.f32(1.0 / ntr)
                want = []
                for i in range(n):
                    acc = self.widen(dtype, pushes[0][i])
                    for r in range(1, ntr):
                        acc = self.f32(acc + self.widen(dtype, pushes[r][i]))
                    want.append(self.narrow(dtype, self.f32(acc * scale)))
                want = struct.pack("<%dH" % n, *want)
                for c in cs:
                    h, p = c.recv_frame(60)
                    self.assertEqual((h.get("type"), h.get("dtype"), h.get("count")), ("result", dtype, n),
                                     (dtype, kind, ntr, h))
                    if p != want:
                        self.fail("%s %s %d trainers: the mean differs at element %d" %
                                  (dtype, kind or "average", ntr,
                                   next(i for i in range(n) if p[2 * i:2 * i + 2] != want[2 * i:2 * i + 2])))
                for c in cs:
                    c.close()
                rc, out, err = s.terminate_and_wait()
                self.assertEqual(rc, 0, s.describe())

    def test_bucket_answered_while_another_streams_in(self):
        s = self.cuda_server()
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        big = [float(i % 97) for i in range(1 << 20)]  # 4 MiB
        frame = psb.encode_frame(*psb.dense_push(5, 1, big))
        vals = [[1.0, 2.0, 3.0], [5.0, 7.0, 11.0]]
        # a: bucket 0, then bucket 1 whole; b: bucket 0, then half of
        # bucket 1 (a frame at a time per connection) ...
        a.push(psb.dense_push(5, 0, vals[0]))
        a.send_raw(frame)
        b.push(psb.dense_push(5, 0, vals[1]))
        b.send_raw(frame[:len(frame) // 2])
        # ... bucket 0 is answered while bucket 1 is still streaming in.
        exp = psb.expected_dense_mean(vals, 2)
        self.expect_dense_result(a, 5, 0, exp)
        self.expect_dense_result(b, 5, 0, exp)
        b.send_raw(frame[len(frame) // 2:])
        exp = psb.expected_dense_mean([big, big], 2)
        self.expect_dense_result(a, 5, 1, exp, timeout=30)
        self.expect_dense_result(b, 5, 1, exp, timeout=30)

    # The columns of the server's metrics table after `count`, and those
    # that are order statistics (or the mean): where every sample of one
    # metric is below its own sample of another (the same futures, calls),
    # each of these is below the other's too.
    COLUMNS = ("min", "max", "mean", "variance", "stdev", "p50", "p90", "p99")
    ORDERED = ("min", "max", "mean", "p50", "p90", "p99")

    def metric_rows(self, out, names):
        """{name: {"count": n, "min": .., ...}} for each of names in the
        server's exit table."""
        rows = {}
        for line in out.splitlines():
            for name in names:
                if line.startswith(name + " "):
                    v = line[len(name):].split()
                    rows[name] = dict(zip(("count",) + self.COLUMNS, [int(v[0])] + [float(x) for x in v[1:]]))
        for name in names:
            self.assertIn(name, rows, out)
        return rows

    @staticmethod
    def summary(samples):
        """The table's order statistics of samples (numpy's 'linear'
        quantiles, as shared/stats.c computes them)."""
        x = sorted(samples)

        def q(p):
            h = p * (len(x) - 1)
            lo = int(h)
            return x[lo] + (h - lo) * (x[min(lo + 1, len(x) - 1)] - x[lo])
        return {"min": x[0], "max": x[-1], "mean": sum(x) / len(x), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99)}

    def assert_gpu_times(self, gpu, wall, count, out, slack=0.0):
        """gpu: a method metric's row, GPU times; wall: the row (or
        summary) of wall times each sample of which is at least its own GPU
        sample. Counted right, strictly positive, and below the wall times
        wherever the statistics allow the comparison."""
        self.assertEqual(gpu["count"], count, out)
        self.assertGreater(gpu["min"], 0.0, out)
        for col in self.ORDERED:
            self.assertLessEqual(gpu[col], wall[col] + slack, "%s: %r above %r\n%s" % (col, gpu, wall, out))

    def test_method_metrics_are_gpu_times(self):
        """Each kind's method metrics are GPU times (events around each job
        on the device's stream): one per job, every one positive, and below
        the wall time of what the job belongs to — a future's batch metric
        (first push to results queued) for average, average-batch and
        batch-update; for embedding, each lookup's round trip seen by the
        trainer, and for an update the round trip of it and the lookup
        after it (the device runs them in order)."""
        # The fake GPU's operations take up to 300 us each: its event times
        # are never all zero.
        env = {"PSBENCH_FAKE_GPU_DELAY_US": "300"}
        batches = 6
        for kind, metric, buckets in (("average", "method_metric,average computation", 3),
                                      ("average-batch", "method_metric,average computation", 3),
                                      ("batch-update", "method_metric,update", 1)):
            with self.subTest(kind=kind):
                s = self.cuda_server(kind=kind, env=env)
                if kind == "batch-update":
                    trainers = [self.reg.start([psb.bin_path("psbench-trainer"), "--server", s.addr, "--rank",
                                                str(r), "--model", "batch-update", "--batches", str(batches),
                                                "--connect-timeout", "10"], name="trainer%d" % r)
                                for r in range(2)]
                else:
                    trainers = [self.reg.trainer(s, r, buckets=buckets, floats=50000, batches=batches)
                                for r in range(2)]
                for t in trainers:
                    rc = t.wait(120)
                    self.assertEqual(rc, 0, t.describe())
                rc, out, _ = s.terminate_and_wait()
                self.assertEqual(rc, 0, s.describe())
                rows = self.metric_rows(out, (metric, psb.PARAM_INDEX_BATCH))
                self.assertEqual(rows[psb.PARAM_INDEX_BATCH]["count"], batches * buckets, out)
                self.assert_gpu_times(rows[metric], rows[psb.PARAM_INDEX_BATCH], batches * buckets, out)
        with self.subTest(kind="embedding"):
            rows_n, cols, bags, per_bag = 1000, 64, 32, 8
            s = self.cuda_server(trainers=1, kind="embedding",
                            extra=["--num-embeddings", str(rows_n), "--embedding-dim", str(cols), "--lr", "0.01",
                                   "--seed", "3"], env=env)
            c = self.client(s)
            self.hello_ok(c, 0)
            pack = lambda v: b"".join(int(x).to_bytes(8, "little", signed=True) for x in v)  # noqa: E731
            offsets = pack([b * per_bag for b in range(bags)])
            grads = psb.dense_payload([0.001 * ((k % 7) - 3) for k in range(bags * cols)])
            n, walls_lookup, walls_update = 8, [], []
            for i in range(n):
                idx = pack([(i * 37 + k * 11) % rows_n for k in range(bags * per_bag)])
                look = psb.encode_frame({"type": "lookup", "batch": 2 * i, "nnz": bags * per_bag, "bags": bags},
                                        idx + offsets)
                upd = psb.encode_frame({"type": "update", "batch": 2 * i + 1, "nnz": bags * per_bag, "bags": bags,
                                        "cols": cols}, idx + offsets + grads)
                for frames, walls in ((look, [walls_lookup]), (upd + look, [walls_update, walls_lookup])):
                    t0 = time.monotonic()
                    c.send_raw(frames)
                    h, _ = c.recv_frame()
                    ms = (time.monotonic() - t0) * 1000.0
                    self.assertEqual(h.get("type"), "rows", h)
                    for w in walls:
                        w.append(ms)
            rc, out, _ = s.terminate_and_wait()
            self.assertEqual(rc, 0, s.describe())
            rows = self.metric_rows(out, ("method_metric,lookup", "method_metric,update"))
            # the table's 3 decimals against the client's exact figures
            self.assert_gpu_times(rows["method_metric,lookup"], self.summary(walls_lookup), 2 * n, out, 0.0006)
            self.assert_gpu_times(rows["method_metric,update"], self.summary(walls_update), n, out, 0.0006)

    # ---- trainers lost, and resets, with work in flight on the GPU --------

    def gpu_hold(self):
        """(env for the server, hold(), release()): on the fake GPU, while
        the hold is on no GPU operation starts (PSBENCH_FAKE_GPU_HOLD), so a
        job is in flight for as long as the test needs; on a real GPU there
        is no such lever and both are no-ops (the test's assertions hold
        whether a job is still in flight or not, only the interleaving is
        then left to chance). The hold always ends before the processes are
        stopped (the fake GPU's streams finish their work before it goes)."""
        if not FAKE:
            return {}, (lambda: None), (lambda: None)
        path = os.path.join(self.reg.workdir, "gpu-hold")

        def hold():
            open(path, "w").close()

        def release():
            if os.path.exists(path):
                os.unlink(path)
        self.addCleanup(release)
        return {"PSBENCH_FAKE_GPU_HOLD": path}, hold, release

    def collect(self, c, keys, timeout=30):
        """Frames from c until one for each (type, batch, bucket) in keys
        (type "result" or an error code), in whatever order they come:
        {key: (header, payload)}. Fails on any other frame."""
        got = {}
        while len(got) < len(keys):
            h, p = c.recv_frame(timeout)
            key = (h.get("code") if h.get("type") == "error" else h.get("type"), h.get("batch"), h.get("bucket"))
            self.assertIn(key, keys, "unexpected frame %r" % (h,))
            self.assertNotIn(key, got, "twice: %r" % (h,))
            got[key] = (h, p)
        return got

    # Only the fake GPU can hold a job in flight for as long as the test
    # needs; a real one (seen: an H200) may finish a 16 MiB job before the
    # loss arrives, and no size makes that certain without a timing bet.
    @unittest.skipUnless(FAKE, "a job held in flight at the loss needs the fake GPU's hold")
    def test_trainer_lost_while_its_bucket_is_on_the_gpu(self):
        self.run_lost_with_bucket_on_the_gpu("average")

    @unittest.skipUnless(FAKE, "a job held in flight at the loss needs the fake GPU's hold")
    def test_trainer_lost_while_its_bucket_is_on_the_gpu_average_batch(self):
        self.run_lost_with_bucket_on_the_gpu("average-batch")

    def run_lost_with_bucket_on_the_gpu(self, kind):
        """Three trainers; bucket 0 has all three pushes and its job is in
        flight on the GPU (held there on the fake GPU), bucket 1 has two
        pushes, their folds in flight too. Trainer 2 is lost. Bucket 1, which
        can never complete, fails at once with peer_lost naming trainer 2
        (its buffers go while folds into them are still queued: the device
        must keep them until the GPU is done); so does a new bucket.
        Bucket 0 had every push: once its job finishes, the survivors get
        its exact mean. Trainer 2 comes back and a round works again. Then
        every trainer leaves with a bucket's job in flight: the new session
        waits for the GPU, drops the answer nobody waits for, and the next
        job starts at batch 0. The server ends cleanly."""
        env, hold, release = self.gpu_hold()
        s = self.cuda_server(trainers=3, kind=kind, env=env)
        a, b, c = (self.client(s) for _ in range(3))
        for r, x in enumerate((a, b, c)):
            self.hello_ok(x, r)
        n = 50000 if FAKE else 1 << 22  # a real GPU's job should still run at the loss
        vals = [[float((7 * r + i) % 29) for i in range(n)] for r in range(3)]
        hold()
        for x, v in zip((a, b, c), vals):
            x.push(psb.dense_push(0, 0, v))
        a.push(psb.dense_push(0, 1, vals[0]))
        b.push(psb.dense_push(0, 1, vals[1]))
        for x in (a, b, c):
            self.barrier(x)
        c.close()
        # a push to a bucket nobody has pushed to yet, after the loss
        # (sent once a has been told about bucket 1 on the fake GPU, so
        # that it surely comes after the loss)
        keys = {("result", 0, 0), ("peer_lost", 0, 1), ("peer_lost", 0, 2)}
        if FAKE:
            for x in (a, b):
                h = self.expect_error(x, "peer_lost", batch=0, bucket=1)
                self.assertIn("trainer rank 2", h["message"], h)
            a.push(psb.dense_push(0, 2, vals[0][:8]))
            h = self.expect_error(a, "peer_lost", batch=0, bucket=2)
            self.assertIn("trainer rank 2", h["message"], h)
            # bucket 0 is still on the GPU
            a.expect_nothing(0.3)
            b.expect_nothing(0.1)
            release()
            got = {k: self.collect(x, {("result", 0, 0)}) for k, x in (("a", a), ("b", b))}
        else:
            time.sleep(0.2)  # the loss is seen before the push below
            a.push(psb.dense_push(0, 2, vals[0][:8]))
            got = {"a": self.collect(a, keys),
                   "b": self.collect(b, {("result", 0, 0), ("peer_lost", 0, 1)})}
            for frames in got.values():
                for key, (h, _) in frames.items():
                    if key[0] == "peer_lost":
                        self.assertIn("trainer rank 2", h["message"], h)
        exp = psb.dense_payload(psb.expected_dense_mean(vals, 3))
        for frames in got.values():
            h, p = frames[("result", 0, 0)]
            self.assertEqual(h.get("count"), n, h)
            self.assertTrue(p == exp, "bucket 0's mean differs")
        self.assert_server_alive(s)
        # trainer 2 back: the three work again
        c2 = self.client(s)
        self.hello_ok(c2, 2)
        self.dense_round([a, b, c2], 1, 0)
        # everyone leaves with a job in flight: the session's end drains it
        hold()
        for x, v in zip((a, b, c2), vals):
            x.push(psb.dense_push(2, 0, v))
        for x in (a, b, c2):
            self.barrier(x)
        for x in (a, b, c2):
            x.close()
        time.sleep(0.3)
        left = "all trainers left: ready for a new job"
        if FAKE:
            # not before the GPU is done with the job
            self.assertNotIn(left, s.stderr())
        release()
        deadline = time.monotonic() + 20
        while left not in s.stderr() and time.monotonic() < deadline:
            self.assert_server_alive(s)
            time.sleep(0.02)
        self.assertIn(left, s.stderr(), s.describe())
        self.good_round(s, batch=0, bucket=0, ranks=(0, 1, 2))
        rc, _, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, s.describe())

    def test_trainer_killed_with_its_batch_on_the_gpu(self):
        """Real trainers: while their first batch's jobs are held on the
        (fake) GPU, trainer 2 is killed. The two others end within their
        --rpc-timeout, non-zero, naming trainer 2 (whatever their pushes
        had reached: a bucket without its push fails, and every later
        one); the server stays up, serves a new job, and ends cleanly."""
        env, hold, release = self.gpu_hold()
        s = self.cuda_server(trainers=3, env=env)
        hold()
        trs = [self.reg.trainer(s, r, buckets=3, floats=50000, batches=100000, extra=["--rpc-timeout", "20"])
               for r in range(3)]
        time.sleep(1.0)  # connected, batch 0 pushed (held on the fake GPU)
        for t in trs:
            self.assertTrue(t.alive(), t.describe())
        trs[2].signal(signal.SIGKILL)
        trs[2].wait(10)
        release()
        for t in trs[:2]:
            try:
                rc = t.wait(30)
            except subprocess.TimeoutExpired:
                self.fail("trainer still running 30 s after trainer 2 was killed:\n" + t.describe())
            self.assertNotEqual(rc, 0, t.describe())
            self.assertRegex(t.stderr(), r"peer_lost.*trainer rank 2|trainer rank 2.*peer_lost", t.describe())
        self.assert_server_alive(s)
        deadline = time.monotonic() + 20
        while "all trainers left" not in s.stderr() and time.monotonic() < deadline:
            time.sleep(0.02)
        fresh = [self.reg.trainer(s, r, buckets=2, floats=1000, batches=3) for r in range(3)]
        for t in fresh:
            self.assertEqual(t.wait(60), 0, t.describe())
        rc, _, _ = s.terminate_and_wait()
        self.assertEqual(rc, 0, s.describe())

    def test_gpu_failure_fails_buckets_with_code_device(self):
        if not FAKE:
            self.skipTest("a real GPU cannot be made to fail on purpose")
        # Operation 40 of the fake GPU fails: a few rounds succeed, then
        # every bucket fails with `device`.
        s = self.cuda_server(env={"PSBENCH_FAKE_GPU_FAIL_AT": "40"})
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        good = failed = 0
        for batch in range(40):
            a.push(psb.dense_push(batch, 0, [1.0] * 64))
            b.push(psb.dense_push(batch, 0, [3.0] * 64))
            ha, _ = a.recv_frame()
            hb, _ = b.recv_frame()
            self.assertEqual(ha.get("type"), hb.get("type"), (ha, hb))
            if ha.get("type") == "result":
                self.assertEqual(failed, 0, "a result after the GPU failed: %r" % ha)
                good += 1
                continue
            for h in (ha, hb):
                self.assertEqual((h.get("type"), h.get("code"), h.get("batch"), h.get("bucket")),
                                 ("error", "device", batch, 0), h)
                self.assertRegex(h["message"], r"GPU 0 \(fake GPU[^)]*\)\) failed: fake GPU: injected failure", h)
            failed += 1
        self.assertGreater(good, 0)
        self.assertGreater(failed, 10)
        self.assert_server_alive(s)
        rc, _, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, s.describe())
        self.assertEqual(len(re.findall(r"device cuda: GPU 0 .* failed: .*every bucket from now on fails", err)),
                         1, err)

    def test_gpu_failure_fails_lookups_with_code_device(self):
        if not FAKE:
            self.skipTest("a real GPU cannot be made to fail on purpose")
        s = self.cuda_server(trainers=1, kind="embedding",
                        extra=["--num-embeddings", "50", "--embedding-dim", "4", "--lr", "0.1", "--seed", "3"],
                        env={"PSBENCH_FAKE_GPU_FAIL_AT": "30"})
        c = self.client(s)
        self.hello_ok(c, 0)
        pack = lambda v: b"".join(int(x).to_bytes(8, "little", signed=True) for x in v)  # noqa: E731
        codes = []
        for batch in range(30):
            c.send_frame({"type": "lookup", "batch": batch, "nnz": 3, "bags": 2}, pack([1, 7, 9]) + pack([0, 2]))
            h, _ = c.recv_frame()
            codes.append(h.get("type") if h.get("type") == "rows" else h.get("code"))
            if h.get("type") == "error":
                self.assertEqual(h.get("batch"), batch, h)
                self.assertIn("injected failure", h.get("message", ""), h)
        self.assertIn("rows", codes)
        self.assertEqual(codes[codes.index("device"):], ["device"] * (len(codes) - codes.index("device")), codes)
        self.assert_server_alive(s)
        rc, _, _ = s.terminate_and_wait()
        self.assertEqual(rc, 0, s.describe())


if __name__ == "__main__":
    psb.main()
