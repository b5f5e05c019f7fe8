"""End-to-end tests: real psbench-server + psbench-trainer processes.

Every trainer checks every element of every result against the mean it
predicts and exits 0 only if all matched; the server's metrics table
(printed on SIGTERM) must count one param_index_batch per (batch, bucket).

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_e2e.py
"""
import json
import os
import re
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

TRAINER_TIMEOUT = 90


class E2E(psb.PsbTestCase):

    def wait_trainers(self, trainers, timeout=TRAINER_TIMEOUT):
        for t in trainers:
            try:
                rc = t.wait(timeout)
            except Exception:
                self.fail("trainer did not finish within %d s:\n%s" % (timeout, t.describe()))
            self.assertEqual(rc, 0, "trainer failed:\n" + t.describe())
            self.assertIn("every result checked", t.stdout(), t.describe())

    def stop_server(self, server, expect_batches):
        rc, out, err = server.terminate_and_wait()
        self.assertEqual(rc, 0, "server exit code:\n" + server.describe())
        self.assertIn("server metrics (ms)", out)
        self.assertEqual(psb.metric_count(out, psb.PARAM_INDEX_BATCH), expect_batches,
                         "param_index_batch count:\n" + out)
        return out, err

    def run_standalone_job(self, n, kind, sparse, buckets=3, floats=1000, batches=5):
        """A standalone server of `kind` and its n trainers, run to their
        end (no master)."""
        server = self.reg.server(trainers=n, kind=kind)
        trainers = [self.reg.trainer(server, r, buckets=buckets, floats=floats, batches=batches,
                                     sparse=sparse) for r in range(n)]
        self.wait_trainers(trainers)
        self.stop_server(server, batches * buckets)

    # -- the big dense case: exercises the server's direct-receive path
    def test_big_dense_2_trainers(self):
        self.run_standalone_job(2, "average", False, buckets=2, floats=1048576, batches=3)

    def test_big_dense_2_trainers_average_batch(self):
        self.run_standalone_job(2, "average-batch", False, buckets=2, floats=1048576, batches=3)

    # -- steady state: payload buffers are recycled, not allocated per push
    def allocs_for(self, kind, sparse, batches):
        n, buckets = 2, 4
        server = self.reg.server(trainers=n, kind=kind)
        trainers = [self.reg.trainer(server, r, buckets=buckets, floats=4096, batches=batches,
                                     sparse=sparse) for r in range(n)]
        self.wait_trainers(trainers)
        out, _ = self.stop_server(server, batches * buckets)
        m = re.search(r"(\d+) payload buffers allocated", out)
        self.assertIsNotNone(m, out)
        return int(m.group(1))

    def test_buffers_recycled(self):
        for kind in ("average", "average-batch"):
            for sparse in (False, True):
                few = self.allocs_for(kind, sparse, 3)
                many = self.allocs_for(kind, sparse, 60)
                # 60 batches x 4 buckets would be 240+ allocations without
                # reuse; with it, the count depends on how many buffers are
                # in flight at once, not on the number of batches.
                self.assertLess(many, 60, (kind, sparse, few, many))
                self.assertLessEqual(many, few + 12, (kind, sparse, few, many))

    # -- zero-copy results (--splice): big results are spliced, lent to each
    #    trainer until it pushes a later batch, then recycled like the others
    def spliced_run(self, kind, batches, extra=("--splice",), transport="tcp"):
        # Splicing is TCP's: over shared memory results are read in place.
        n, buckets, floats = 2, 3, 65536  # 256 KiB results: spliced
        server = self.reg.server(trainers=n, kind=kind, extra=tuple(extra) + ("--transport", transport))
        trainers = [self.reg.trainer(server, r, buckets=buckets, floats=floats, batches=batches,
                                     extra=("--transport", transport)) for r in range(n)]
        self.wait_trainers(trainers)
        out, _ = self.stop_server(server, batches * buckets)
        m = re.search(r"(\d+) payload buffers allocated", out)
        z = re.search(r"result payload bytes: (\d+) spliced \(zero-copy\), (\d+) copied, (\d+) read in place", out)
        self.assertIsNotNone(m, out)
        self.assertIsNotNone(z, out)
        result_bytes = n * batches * buckets * floats * 4  # every result to every trainer
        if transport == "tcp":
            self.assertEqual(int(z.group(3)), 0, out)
            return int(m.group(1)), int(z.group(1)), int(z.group(2)), result_bytes
        return int(m.group(1)), int(z.group(3)), int(z.group(1)) + int(z.group(2)), result_bytes

    def test_results_read_in_place_and_recycled(self):
        """Over shared memory every result is read where the server wrote
        it (nothing spliced or copied), lent until the trainer pushes a
        later batch, then recycled: buffers in use stay about two batches'
        worth, whatever the batch count (as with splicing)."""
        if os.environ.get("PSBENCH_SERVER_DEVICE", "cpu") not in ("cpu", "test"):
            self.skipTest("a GPU device's results are pinned host images, sent on the socket")
        for kind in ("average", "average-batch"):
            few, in_place, other, total = self.spliced_run(kind, 3, extra=(), transport="shm")
            self.assertEqual((in_place, other), (total, 0), kind)
            many, in_place, other, total = self.spliced_run(kind, 40, extra=(), transport="shm")
            self.assertEqual((in_place, other), (total, 0), kind)
            self.assertLessEqual(many, few + 6, (kind, few, many))

    def test_results_spliced_and_recycled(self):
        for kind in ("average", "average-batch"):
            few, spliced, copied, total = self.spliced_run(kind, 3)
            self.assertEqual((spliced, copied), (total, 0), kind)
            many, spliced, copied, total = self.spliced_run(kind, 40)
            self.assertEqual((spliced, copied), (total, 0), kind)
            # Loans end when the trainers push the next batch: buffers in
            # use stay about two batches' worth, whatever the batch count.
            self.assertLessEqual(many, few + 6, (kind, few, many))

    # -- BLAS threads: OpenBLAS starts its workers before main; the trainer
    #    runs itself again with OPENBLAS_NUM_THREADS=1 unless it is set
    def trainer_threads(self, env):
        import time
        server = self.reg.server(trainers=2)  # rank 1 never comes: rank 0 waits
        t = self.reg.trainer(server, 0, batches=3, extra=("--rpc-timeout", "60"), env=env)
        deadline = time.monotonic() + 20
        while "1 server(s)" not in t.stdout() + t.stderr():
            self.assertTrue(t.alive(), t.describe())
            self.assertLess(time.monotonic(), deadline, t.describe())
            time.sleep(0.05)
        tasks = len(os.listdir("/proc/%d/task" % t.pid))
        with open("/proc/%d/comm" % t.pid) as f:
            self.assertEqual(f.read().strip(), "psbench-trainer")  # what pkill sees
        with open("/proc/%d/environ" % t.pid, "rb") as f:
            blas = [v for v in f.read().split(b"\0") if v.startswith(b"OPENBLAS_NUM_THREADS=")]
        t.stop()
        server.stop()
        return tasks, blas

    def test_trainer_runs_one_blas_thread(self):
        env = psb.base_env()
        env.pop("OPENBLAS_NUM_THREADS", None)
        self.assertEqual(self.trainer_threads(env), (1, [b"OPENBLAS_NUM_THREADS=1"]))

    def test_trainer_keeps_blas_threads_asked_for(self):
        if (os.cpu_count() or 1) < 2:
            self.skipTest("OpenBLAS starts no worker thread on one core")
        if os.environ.get("PSBENCH_TSAN") == "1":
            self.skipTest("ThreadSanitizer adds a thread of its own next to OpenBLAS's")
        env = psb.base_env({"OPENBLAS_NUM_THREADS": "2"})
        self.assertEqual(self.trainer_threads(env), (2, [b"OPENBLAS_NUM_THREADS=2"]))

    def test_descriptor_limit_raised(self):
        # Each connection may hold a pipe besides its socket: the server
        # lifts its soft descriptor limit to the hard one.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard <= 64:
            self.skipTest("hard descriptor limit %d leaves nothing to raise" % hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        try:
            server = self.reg.server(trainers=1)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        with open("/proc/%d/limits" % server.pid) as f:
            line = [ln for ln in f if ln.startswith("Max open files")][0]
        got_soft, got_hard = line.split()[3:5]
        self.assertEqual(got_soft, got_hard, line)

    def test_results_copied_by_default(self):
        for extra in ((), ("--no-splice",)):
            _, spliced, copied, total = self.spliced_run("average", 3, extra=extra)
            self.assertEqual((spliced, copied), (0, total), extra)

    # -- two servers, one trainer set, buckets round-robin
    def test_two_servers(self):
        n, buckets, batches = 2, 3, 4
        a = self.reg.server(trainers=n)
        b = self.reg.server(trainers=n, kind="average-batch")
        trainers = [self.reg.trainer([a, b], r, buckets=buckets, floats=500, batches=batches)
                    for r in range(n)]
        self.wait_trainers(trainers)
        # bucket k goes to server k mod 2: a gets 0 and 2, b gets 1
        self.stop_server(a, batches * 2)
        self.stop_server(b, batches * 1)

    def test_two_servers_sparse(self):
        n, buckets, batches = 3, 4, 3
        a = self.reg.server(trainers=n)
        b = self.reg.server(trainers=n)
        trainers = [self.reg.trainer([a, b], r, buckets=buckets, floats=400, batches=batches,
                                     sparse=True) for r in range(n)]
        self.wait_trainers(trainers)
        self.stop_server(a, batches * 2)
        self.stop_server(b, batches * 2)

    def test_two_servers_big_results_interleave(self):
        """Results larger than a read arrive from both servers at once, so
        the trainer sees them interleaved chunk by chunk (dense and sparse)."""
        for sparse, floats in ((False, 300000), (True, 120000)):
            n, buckets, batches = 2, 4, 3
            a = self.reg.server(trainers=n)
            b = self.reg.server(trainers=n)
            trainers = [self.reg.trainer([a, b], r, buckets=buckets, floats=floats, batches=batches,
                                         sparse=sparse) for r in range(n)]
            self.wait_trainers(trainers)
            self.stop_server(a, batches * 2)
            self.stop_server(b, batches * 2)

    # -- server reuse: a second job after the first one finished
    def test_server_reuse(self):
        server = self.reg.server(trainers=2)
        first = [self.reg.trainer(server, r, buckets=3, floats=1000, batches=5) for r in range(2)]
        self.wait_trainers(first)
        # A different shape and layout: nothing of the old job may linger.
        second = [self.reg.trainer(server, r, buckets=2, floats=700, batches=4, sparse=True)
                  for r in range(2)]
        self.wait_trainers(second)
        third = [self.reg.trainer(server, r, buckets=3, floats=1000, batches=2) for r in (1, 0)]
        self.wait_trainers(third)
        out, err = self.stop_server(server, 5 * 3 + 4 * 2 + 2 * 3)
        self.assertIn("ready for a new job", err)

    # -- summary JSON
    def test_summary_json(self):
        server = self.reg.server(trainers=1)
        path = os.path.join(self.reg.workdir, "summary.json")
        t = self.reg.trainer(server, 0, buckets=2, floats=256, batches=7,
                             extra=["--summary-json", path])
        self.wait_trainers([t])
        with open(path) as f:
            s = json.load(f)
        self.assertEqual(s["batches"], 7)
        self.assertEqual(s["bytes_pushed"], 7 * 2 * 256 * 4)
        for k in ("seconds", "rounds_per_s", "batch_p50_ms", "batch_p99_ms"):
            self.assertIn(k, s)
        # Written whole (a temporary renamed): none is left beside it.
        self.assertEqual([n for n in os.listdir(self.reg.workdir) if ".tmp." in n], [])
        # A missing folder is made at start; a summary that cannot be
        # written (a file where its folder must be) is refused at start,
        # naming why, before the trainer pushes anything.
        made = os.path.join(self.reg.workdir, "no-such-dir", "summary.json")
        t = self.reg.trainer(server, 0, buckets=2, floats=256, batches=7, extra=["--summary-json", made])
        self.wait_trainers([t])
        self.assertTrue(os.path.isfile(made))
        bad = os.path.join(path, "summary.json")
        t = self.reg.trainer(server, 0, buckets=2, floats=256, batches=7, extra=["--summary-json", bad])
        self.assertEqual(t.wait(60), 2, t.describe())
        self.assertEqual(t.stderr().strip(), "psbench-trainer: --summary-json %s: %s is a regular file, not a "
                         "directory" % (bad, path))
        self.stop_server(server, 28)

    def test_interleaved_odd_chunks(self):
        """Two pushes of one large dense bucket arrive interleaved in chunks
        of odd sizes: reads end inside floats, and the push ahead (received
        straight into the accumulator) changes hands again and again. The
        mean is still exact, batch after batch, for both kinds."""
        import random
        import time
        for kind in ("average", "average-batch"):
            server = self.reg.server(trainers=2, kind=kind)
            a, b = self.client(server), self.client(server)
            self.hello_ok(a, 0)
            self.hello_ok(b, 1)
            n = 40000  # 160,000 bytes: above the direct-receive threshold
            rnd = random.Random(7)
            for batch in range(3):
                va = [rnd.uniform(-4, 4) for _ in range(n)]
                vb = [rnd.uniform(-4, 4) for _ in range(n)]
                fa = psb.encode_frame(*psb.dense_push(batch, 0, va))
                fb = psb.encode_frame(*psb.dense_push(batch, 0, vb))
                ia = ib = 0
                sizes = [1, 3, 4097, 13, 30001, 7, 65537, 2, 999]
                k = 0
                while ia < len(fa) or ib < len(fb):
                    step = sizes[k % len(sizes)]
                    k += 1
                    # Alternate, sometimes letting one side run ahead.
                    if ia < len(fa) and (k % 3 != 0 or ib >= len(fb)):
                        a.send_raw(fa[ia:ia + step])
                        ia += step
                    if ib < len(fb) and (k % 4 != 0 or ia >= len(fa)):
                        b.send_raw(fb[ib:ib + step])
                        ib += step
                    if k % 5 == 0:
                        time.sleep(0.002)  # let the server read what is there
                want = psb.expected_dense_mean([va, vb], 2)
                for c in (a, b):
                    h, payload = c.recv_frame(20)
                    self.assertEqual(h.get("type"), "result", h)
                    self.assertEqual((h.get("batch"), h.get("bucket")), (batch, 0))
                    self.assertEqual(psb.parse_dense(payload), want, "%s batch %d" % (kind, batch))
            a.close()
            b.close()
            self.stop_server(server, 3)

    def test_warmup_batches(self):
        """Warm-up batches travel (the server sees them, results are checked)
        but stay out of the trainer's metrics and summary."""
        server = self.reg.server(trainers=2)
        path = os.path.join(self.reg.workdir, "summary.json")
        ts = [self.reg.trainer(server, r, buckets=2, floats=256, batches=4,
                               extra=["--warmup-batches", "3"] + (["--summary-json", path] if r == 0 else []))
              for r in range(2)]
        self.wait_trainers(ts)
        for t in ts:
            self.assertEqual(psb.metric_count(t.stdout(), "batch_level_metric,batch_all"), 4, t.stdout())
            self.assertEqual(psb.metric_count(t.stdout(), "hook_future_metric,rpc_dense"), 8, t.stdout())
        with open(path) as f:
            s = json.load(f)
        self.assertEqual(s["batches"], 4)
        self.assertEqual(s["bytes_pushed"], 4 * 2 * 256 * 4)
        self.stop_server(server, (3 + 4) * 2)
        rc, _, err = self.reg.run([psb.bin_path("psbench-trainer"), "--master", "127.0.0.1:1",
                                   "--warmup-batches", "2"])
        self.assertNotEqual(rc, 0)
        self.assertIn("warm-up pass", err)

    # -- token
    def test_token_env_ok_wrong_token_fails(self):
        server = self.reg.server(trainers=2, token="s3cret")
        env = psb.base_env({"PSBENCH_TOKEN": "s3cret"})
        # a wrong token first: refused, and it must not take a slot
        bad = self.reg.trainer(server, 0, token="wrong", batches=2)
        try:
            rc = bad.wait(30)
        except Exception:
            self.fail("trainer with a wrong token hung:\n" + bad.describe())
        self.assertNotEqual(rc, 0, bad.describe())
        self.assertIn("auth", bad.stderr(), bad.describe())
        none = self.reg.trainer(server, 1, batches=2)
        self.assertNotEqual(none.wait(30), 0, none.describe())
        self.assertIn("auth", none.stderr(), none.describe())
        good = [self.reg.trainer(server, r, batches=3, env=env) for r in range(2)]
        self.wait_trainers(good)
        self.stop_server(server, 3 * 3)

    def test_token_from_server_env(self):
        server = self.reg.server(trainers=1, env=psb.base_env({"PSBENCH_TOKEN": "envtok"}))
        bad = self.reg.trainer(server, 0, batches=1)
        self.assertNotEqual(bad.wait(30), 0, bad.describe())
        self.assertIn("auth", bad.stderr())
        good = self.reg.trainer(server, 0, batches=2, token="envtok")
        self.wait_trainers([good])
        self.stop_server(server, 2 * 3)

    # -- --help / --version
    def test_help_and_version(self):
        for name in ("psbench-server", "psbench-trainer"):
            rc, out, err = self.reg.run([psb.bin_path(name), "--help"])
            self.assertEqual(rc, 0, err)
            self.assertIn("usage", out.lower())
            rc, out, err = self.reg.run([psb.bin_path(name), "-h"])
            self.assertEqual(rc, 0, err)
            rc, out, err = self.reg.run([psb.bin_path(name), "--version"])
            self.assertEqual(rc, 0, err)
            self.assertRegex(out, r"^%s \d+\.\d+" % name)

    # -- bad command lines
    def assert_cli_fails(self, name, args, needle=None):
        rc, out, err = self.reg.run([psb.bin_path(name)] + args, timeout=20)
        self.assertNotEqual(rc, 0, "%s %r exited 0" % (name, args))
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, "%s %r: want one line on stderr, got %r" %
                         (name, args, err))
        self.assertTrue(lines[0].startswith(name + ":"), lines[0])
        if needle:
            self.assertIn(needle, lines[0])

    def test_server_bad_cli(self):
        s = "psbench-server"
        base = ["--standalone", "--listen", "127.0.0.1:0"]
        cases = [
            (base + ["--trainers", "0"], "--trainers"),
            (base + ["--trainers", "-1"], "--trainers"),
            (base + ["--trainers", "abc"], "--trainers"),
            (base + ["--trainers", "70000"], "--trainers"),
            (base + ["--trainers", "2", "--kind", "foo"], "--kind"),
            (["--standalone", "--trainers", "2", "--listen", "nonsense"], None),
            (["--standalone", "--trainers", "2", "--listen", "127.0.0.1:99999"], None),
            (base + ["--trainers", "2", "--bogus"], "--bogus"),
            (base + ["--trainers", "2", "--max-payload", "12Q"], "--max-payload"),
            (base + ["--trainers", "2", "--log-level", "loud"], "--log-level"),
            (base + ["--trainers", "2", "stray"], "stray"),
            (base + ["--trainers"], None),
            (["--listen", "127.0.0.1:0", "--trainers", "2"], None),  # no --standalone
            (["--standalone", "--listen", "127.0.0.1:0"], "--trainers"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                self.assert_cli_fails(s, args, needle)

    def test_server_listen_in_use(self):
        server = self.reg.server(trainers=1)
        self.assert_cli_fails("psbench-server", ["--standalone", "--trainers", "1", "--listen",
                                                 server.addr])

    def test_trainer_bad_cli(self):
        t = "psbench-trainer"
        base = ["--server", "127.0.0.1:1", "--rank", "0", "--model", "synthetic"]
        cases = [
            (base + ["--buckets", "0"], "--buckets"),
            (base + ["--batches", "0"], "--batches"),
            (base + ["--bucket-floats", "x"], "--bucket-floats"),
            (base + ["--rpc-timeout", "-1"], "--rpc-timeout"),
            (base + ["--bogus"], "--bogus"),
            (["--server", "127.0.0.1:1", "--rank", "0", "--model", "foo"], "--model"),
            (["--server", "127.0.0.1:1", "--model", "synthetic"], "--rank"),
            (["--rank", "0", "--model", "synthetic"], "--server"),
            (["--server", "127.0.0.1:1", "--rank", "-3", "--model", "synthetic"], "--rank"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                self.assert_cli_fails(t, args, needle)

    def test_device_cuda_refused_with_the_reason(self):
        """--device cuda[:N]: one line naming why it cannot run here — the
        CUDA runtime missing (its soname), no GPU answering, no such GPU,
        no CUDA in this build; a bad spelling names the accepted ones.
        Hidden libraries (tests/tools/hide-cuda-libs.sh, as root) give the
        soname. A binary whose GPU answers starts instead: not asked."""
        reasons = (r"libcudart\.so\.\d+ not found \(install the CUDA runtime or use --device cpu\)|"
                   r"no CUDA device answers \(cudaGetDeviceCount: .*; use --device cpu\)|"
                   r"CUDA device \d+ does not exist|this build has no CUDA|computes on the CPU only")
        gpus = psb.gpu_count()
        argv = {"psbench-trainer": ["--server", "127.0.0.1:9", "--rank", "0", "--model", "synthetic"],
                "psbench-server": ["--standalone", "--trainers", "1", "--listen", "127.0.0.1:0"]}
        hide = os.path.join(psb.HERE, "..", "tools", "hide-cuda-libs.sh")
        for name, rest in argv.items():
            for dev, index in (("cuda", 0), ("cuda:3", 3)):
                if index < gpus:
                    continue  # it answers: the binary starts (tests of the GPU paths run it)
                with self.subTest(binary=name, device=dev):
                    self.assert_cli_fails(name, ["--device", dev] + rest, "--device %s: " % dev)
                    rc, _, err = self.reg.run([psb.bin_path(name), "--device", dev] + rest, timeout=20)
                    self.assertRegex(err.strip(), reasons)
            self.assert_cli_fails(name, ["--device", "cuda:x"] + rest, "is not cpu, cuda or cuda:N")
            rc, _, err = self.reg.run([hide, psb.bin_path(name), "--device", "cuda"] + rest, timeout=20)
            if rc == 77:
                continue  # not root, or no CUDA installed to hide: said on stderr
            self.assertNotEqual(rc, 0)
            if "this build has no CUDA" not in err:
                self.assertRegex(err.strip(), r"^%s: --device cuda: libcudart\.so\.\d+ not found \(install the "
                                              r"CUDA runtime or use --device cpu\)$" % name)

    def test_trainer_no_server_listening(self):
        # A port nobody listens on (bind, note, close): connect fails in time.
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        self.assert_cli_fails("psbench-trainer", [
            "--server", "127.0.0.1:%d" % port, "--rank", "0", "--model", "synthetic",
            "--connect-timeout", "1", "--batches", "1"])

    def test_trainer_rank_outside(self):
        server = self.reg.server(trainers=1)
        self.assert_cli_fails("psbench-trainer", [
            "--server", server.addr, "--rank", "3", "--model", "synthetic", "--batches", "1"],
            "rank")
        # the server is still usable by a proper trainer afterwards
        t = self.reg.trainer(server, 0, batches=2)
        self.wait_trainers([t])
        self.stop_server(server, 2 * 3)


def _make_case(n, kind, sparse):
    def test(self):
        self.run_standalone_job(n, kind, sparse)
    test.__name__ = "test_n%d_%s_%s" % (n, kind.replace("-", "_"), "sparse" if sparse else "dense")
    test.__doc__ = "%d trainers, kind %s, %s" % (n, kind, "sparse" if sparse else "dense")
    return test


for _n in (1, 2, 4, 8):
    for _kind in ("average", "average-batch"):
        for _sparse in (False, True):
            _t = _make_case(_n, _kind, _sparse)
            setattr(E2E, _t.__name__, _t)


if __name__ == "__main__":
    psb.main()
