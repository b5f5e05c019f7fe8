"""psbench-server's cuda device, from the outside: what only a GPU device
does. (Every other integration test of the server also runs on it:
device_fakecuda_* in ctest on the fake GPU, gpu_server_* on a real one.)

  - a bucket resolves, and is answered, while another bucket's pushes are
    still streaming in (copied to the GPU as they arrive);
  - the method metrics are GPU times (events on the device's stream): as
    many as buckets, positive, and never longer than their batch;
  - a GPU that fails under the work: every bucket it touches, and every one
    after, is answered with the error code `device` naming the GPU; the
    server's log names it once; lookups of an embedding server likewise;
    nothing hangs and the server still ends cleanly on SIGTERM (fake GPU
    only: a real one cannot be made to fail on purpose);
  - the start line names the GPU.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_cuda_server.py
The device is $PSBENCH_SERVER_DEVICE (default fake-cuda; cuda on a GPU).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

DEVICE = os.environ.get("PSBENCH_SERVER_DEVICE") or "fake-cuda"
FAKE = DEVICE == "fake-cuda"


class CudaServer(psb.PsbTestCase):

    def server(self, trainers=2, kind=None, extra=(), env=None):
        return self.reg.server(trainers=trainers, kind=kind, extra=["--device", DEVICE] + list(extra),
                               env=psb.base_env(env or {}))

    def test_start_line_names_the_gpu(self):
        s = self.server()
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, s.describe())
        self.assertRegex(err, r"device cuda \(GPU 0: [^)]+\)", err)

    def test_bucket_answered_while_another_streams_in(self):
        s = self.server()
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

    def test_method_metrics_are_gpu_times(self):
        for kind, metric in (("average", "method_metric,average computation"),
                             ("average-batch", "method_metric,average computation")):
            with self.subTest(kind=kind):
                # The fake GPU's operations take up to 300 us each: its
                # event times are never all zero.
                s = self.server(kind=kind, env={"PSBENCH_FAKE_GPU_DELAY_US": "300"})
                batches, buckets = 6, 3
                trainers = [self.reg.trainer(s, r, buckets=buckets, floats=50000, batches=batches)
                            for r in range(2)]
                for t in trainers:
                    rc = t.wait(120)
                    self.assertEqual(rc, 0, t.describe())
                rc, out, _ = s.terminate_and_wait()
                self.assertEqual(rc, 0, s.describe())
                rows = {}
                for line in out.splitlines():
                    for name in (metric, psb.PARAM_INDEX_BATCH):
                        if line.startswith(name + " "):
                            rows[name] = [float(x) for x in line[len(name):].split()]
                self.assertIn(metric, rows, out)
                count, mn, mx, mean = rows[metric][:4]
                self.assertEqual(count, batches * buckets, out)
                self.assertGreaterEqual(mn, 0.0, out)
                self.assertGreater(mean, 0.0, out)
                self.assertLessEqual(mx, rows[psb.PARAM_INDEX_BATCH][2], out)

    def test_gpu_failure_fails_buckets_with_code_device(self):
        if not FAKE:
            self.skipTest("a real GPU cannot be made to fail on purpose")
        # Operation 40 of the fake GPU fails: a few rounds succeed, then
        # every bucket fails with `device`.
        s = self.server(env={"PSBENCH_FAKE_GPU_FAIL_AT": "40"})
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
        s = self.server(trainers=1, kind="embedding",
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
