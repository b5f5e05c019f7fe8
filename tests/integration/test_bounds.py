"""Bounds and reasons on the data plane (issue 27): what one trainer
connection may make a server hold, the top of every counter's range, a
missing field said to be missing, ports checked where they are read, and a
node that fails while it sets up telling the master why.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_bounds.py
"""
import json
import os
import re
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import dense_push, expected_dense_mean  # noqa: E402
from psb import Master, http_get, wait_phase  # noqa: E402

U64_MAX = (1 << 64) - 1


# ---- what one trainer may make a server hold ---------------------------------

MIB = 1 << 20


def vm_bytes(pid):
    """VmRSS and VmHWM of pid, in bytes."""
    return {k: psb.proc_status(pid, k) * 1024 for k in ("VmRSS", "VmHWM")}


def push_until_refused(test, c, n, floats, batch0=10 ** 9, bucket=0):
    """Push n dense pushes of `floats` floats for far-future batches
    (batch0, batch0 + 1, ...) without reading; stop at the server's
    too_large. Returns how many pushes went out before it."""
    vals = [1.0] * floats
    frame0 = None
    for i in range(n):
        h, p = dense_push(batch0 + i, bucket, vals)
        try:
            c.send_frame(h, p, timeout=5)
        except (OSError, psb.Closed):
            break
        try:
            h, _ = c.recv_frame(0.05)
        except Exception:  # nothing yet: the push was taken
            continue
        frame0 = h
        break
    if frame0 is None:
        try:
            frame0, _ = c.recv_frame(2)
        except Exception:
            frame0 = None
    test.assertIsNotNone(frame0, "%d pushes of %d floats for far-future batches were all taken" % (n, floats))
    test.assertEqual(frame0.get("type"), "error", frame0)
    test.assertEqual(frame0.get("code"), "too_large", frame0)
    c.expect_closed()
    return frame0


class Held(psb.PsbTestCase):

    def wait_rss_below(self, server, limit, timeout=10):
        deadline = time.monotonic() + timeout
        st = vm_bytes(server.pid)
        while st["VmRSS"] > limit and time.monotonic() < deadline:
            time.sleep(0.05)
            st = vm_bytes(server.pid)
        return st

    def test_far_future_pushes_bounded_and_given_back(self):
        """The issue's probe: one trainer pushes buckets of 4 MiB for
        batches far in the future. The server takes 64 MiB of them (the
        standalone default), refuses the next one `too_large` and closes;
        its peak memory stays near that, and once the trainer has left the
        memory is given back."""
        # The cpu device: a GPU's device keeps bounded caches of pinned and
        # device memory for reuse (server/cuda/cuda_buf.c).
        s = self.reg.server(trainers=2, extra=["--device", "cpu"])
        base = vm_bytes(s.pid)["VmRSS"]
        c = self.client(s)
        self.hello_ok(c, 0)
        h = push_until_refused(self, c, 40, MIB)  # 40 x 4 MiB: 160 MiB asked for
        self.assertIn("has 16 pushes (67108864 bytes) waiting", h["message"])
        self.assertIn("at most 8192 pushes and 67108864 bytes waiting", h["message"])
        hwm = vm_bytes(s.pid)["VmHWM"]
        self.assertLess(hwm - base, 64 * MIB + 48 * MIB, "peak %d MiB over the start" % ((hwm - base) >> 20))
        st = self.wait_rss_below(s, base + 24 * MIB)
        self.assertLess(st["VmRSS"] - base, 24 * MIB, "%d MiB kept after the trainer left" %
                        ((st["VmRSS"] - base) >> 20))
        # The server serves the next job.
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        self.dense_round([a, b], 0, 0)

    def test_lost_trainer_futures_freed_while_others_stay(self):
        """A trainer that pushed far ahead leaves while another stays: the
        futures only it had pushed fail (nobody waits for them) and their
        memory goes back; the one that stays is told nothing it did not
        push."""
        s = self.reg.server(trainers=2, extra=["--device", "cpu"])
        base = vm_bytes(s.pid)["VmRSS"]
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        for i in range(12):  # 48 MiB, under the bound
            a.push(dense_push(10 ** 9 + i, 0, [1.0] * MIB))
        self.barrier(a)
        self.assertGreater(vm_bytes(s.pid)["VmRSS"] - base, 40 * MIB)
        a.close()
        st = self.wait_rss_below(s, base + 16 * MIB)
        self.assertLess(st["VmRSS"] - base, 16 * MIB, "%d MiB kept after the trainer left" %
                        ((st["VmRSS"] - base) >> 20))
        b.expect_nothing(0.2)
        self.assertTrue(s.alive(), s.describe())

    def test_bounds_follow_the_job(self):
        """With a master, the bounds come from the job's model: Tiny has 3
        buckets of 2000 floats, so one trainer may have 6 pushes (48000
        bytes) waiting and the session 3 buckets; beyond either, too_large
        naming the job."""
        path = os.path.join(self.reg.workdir, "models.json")
        with open(path, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 3, "bucket_floats": 2000, "sparse": False}}}, f)
        m = self.reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                            "--linger", "0", "--rpc-timeout", "30", "--model", "Tiny", "--model-config-path", path,
                            "--epochs", "1", "--ntrainer", "2", "--nserver", "1"], name="master", cls=Master)
        m.wait_ports()
        s = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                           name="server", cls=psb.Server)
        s.wait_ready()
        self.assertIn("one trainer may have 6 pushes and 48000 bytes waiting here", s.stderr())
        # A push bigger than two batches of the job: refused at once.
        c = self.client(s)
        self.hello_ok(c, 0)
        h = push_until_refused(self, c, 1, MIB)
        self.assertIn("this job: 3 buckets of 24000 bytes per batch at most", h["message"])
        # Pushes of the job's size: six wait, the seventh is refused.
        c = self.client(s)
        self.hello_ok(c, 0)
        h = push_until_refused(self, c, 7, 2000)
        self.assertIn("has 6 pushes (48000 bytes) waiting", h["message"])
        # Buckets: the session's first three resolve; a fourth is refused.
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        for k in range(3):
            self.dense_round([a, b], 0, k)
        a.push(dense_push(0, 7, [1.0] * 8))
        h = self.expect_error(a, "too_large")
        self.assertIn("bucket 7 would be the 4-th bucket of this session: it has at most 3", h["message"])


class WaitingConnections(psb.PsbTestCase):

    def test_connections_without_hello_are_bounded(self):
        """Connections that never say hello (no token needed to open them)
        are held at most the trainer count + 64 at a time; more are told
        `resources` and closed at once, and a trainer still gets in once
        they are gone."""
        s = self.reg.server(trainers=1)
        idle = [self.client(s) for _ in range(65)]
        for c in idle:
            c.send_raw(b"\0\0")  # half a frame prefix: read, never a hello
        extra = self.client(s)
        h = self.expect_error(extra, "resources")
        self.assertIn("65 connections that have not said hello yet (at most its 1 trainers + 64)", h["message"])
        extra.expect_closed()
        for c in idle:
            c.close()
        deadline = time.monotonic() + 10
        while True:
            c = self.client(s)
            h, _ = c.hello(0)
            if h.get("type") == "welcome" or time.monotonic() > deadline:
                break
            c.close()
            time.sleep(0.05)
        self.assertEqual(h.get("type"), "welcome", h)


class CallsInFlight(psb.PsbTestCase):

    def test_lookups_faster_than_the_device(self):
        """An embedding server on a device that completes later (the test
        device, a GPU's stand-in) reads no more from a trainer that has 64
        calls in flight until some complete: 400 lookups sent without
        reading are all answered, in order, and the server held them back
        rather than all at once."""
        env = psb.base_env({"PSBENCH_TEST_DEVICE_MAX_DELAY_US": "3000"})
        s = self.reg.server(trainers=1, kind="embedding", env=env,
                            extra=["--device", "test", "--num-embeddings", "16", "--embedding-dim", "8",
                                   "--log-level", "debug"])
        c = self.client(s)
        self.hello_ok(c, 0)
        n = 400
        frames = b"".join(psb.encode_frame({"type": "lookup", "batch": b, "nnz": 1, "bags": 1},
                                           struct.pack("<2q", b % 16, 0)) for b in range(n))
        c.send_raw(frames, timeout=30)
        for b in range(n):
            h, p = c.recv_frame(timeout=30)
            self.assertEqual((h.get("type"), h.get("batch"), h.get("bags")), ("rows", b, 1), h)
            self.assertEqual(len(p), 4 * 8)
        self.assertIn("calls (", s.stderr())
        self.assertIn("in flight: not reading until they complete", s.stderr())


# ---- the top of the counters' range ------------------------------------------

class TopOfRange(psb.PsbTestCase):

    def test_batch_max_resolves_once(self):
        """Batch 2^64-1 resolves once; pushed again it is stale, and so
        are the older batches of its bucket (the mark used to wrap to 0:
        the same key answered twice, older batches no longer stale)."""
        s = self.reg.server(trainers=2)
        a, b = self.client(s), self.client(s)
        self.hello_ok(a, 0)
        self.hello_ok(b, 1)
        self.dense_round([a, b], U64_MAX, 3)
        for c in (a, b):
            c.push(dense_push(U64_MAX, 3, [1.0] * 8))
            self.expect_error(c, "stale_batch", batch=U64_MAX, bucket=3)
            c.push(dense_push(17, 3, [1.0] * 8))
            self.expect_error(c, "stale_batch", batch=17, bucket=3)
        # Another bucket is untouched; bucket 2^64-1 is a bucket like any.
        self.dense_round([a, b], 17, U64_MAX)
        self.dense_round([a, b], 0, 4)

    def test_welcome_trainer_count_beyond_range(self):
        """A server whose welcome says 2^32+2 trainers is refused by the
        trainer, not read as 2."""
        with MockServer(welcome={"type": "welcome", "version": 1, "server": 0,
                                 "trainers": (1 << 32) + 2}) as m:
            out = self.run_trainer(m.port)
        self.assertIn("says 4294967298 trainers (1..65536)", out)


# ---- a missing field is said to be missing --------------------------------

class MissingFields(psb.PsbTestCase):

    def test_hello_without_version(self):
        s = self.reg.server(trainers=1)
        c = self.client(s)
        c.send_frame({"type": "hello", "role": "trainer", "rank": 0})
        h = self.expect_error(c, "unsupported")
        self.assertIn("needs a version", h["message"])
        self.assertNotIn("version 0", h["message"])
        # The connection stays: a good hello then works.
        self.hello_ok(c, 0)

    def test_hello_without_role(self):
        s = self.reg.server(trainers=1)
        c = self.client(s)
        c.send_frame({"type": "hello", "version": 1, "rank": 0})
        h = self.expect_error(c, "unsupported")
        self.assertIn("needs a role", h["message"])

    def test_push_names_the_missing_field(self):
        s = self.reg.server(trainers=1)
        c = self.client(s)
        self.hello_ok(c, 0)
        h, p = dense_push(0, 0, [1.0, 2.0])
        del h["bucket"]
        c.send_frame(h, p)
        h = self.expect_error(c, "bad_frame")
        self.assertIn("missing: bucket", h["message"])

    def test_lookup_names_the_missing_field(self):
        s = self.reg.server(trainers=1, kind="embedding")
        c = self.client(s)
        self.hello_ok(c, 0)
        c.send_frame({"type": "lookup", "batch": 0, "bags": 0})
        h = self.expect_error(c, "bad_frame")
        self.assertIn("missing: nnz", h["message"])

    def test_welcome_without_version(self):
        with MockServer(welcome={"type": "welcome", "server": 0, "trainers": 1}) as m:
            out = self.run_trainer(m.port)
        self.assertIn("welcome without version", out)

    def test_result_without_batch(self):
        """A result that lacks its batch is refused naming the field, not
        taken for batch 0."""
        with MockServer(welcome={"type": "welcome", "version": 1, "server": 0, "trainers": 1},
                        result_drop="batch") as m:
            out = self.run_trainer(m.port)
        self.assertIn("sent a 'result' without batch", out)


# ---- ports, checked where they are read ------------------------------------

class Ports(psb.PsbTestCase):

    def flag_error(self, args):
        """Run args (a binary and its flags); it must exit 2 at once with
        one line: that line."""
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=psb.base_env(),
                           timeout=20)
        err = r.stderr.decode(errors="replace").strip()
        self.assertEqual(r.returncode, 2, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        return err

    def test_server_flags(self):
        srv = psb.bin_path("psbench-server")
        for flag, args, want in (
                ("--listen", ["--standalone", "--trainers", "1", "--listen", "127.0.0.1:70000"],
                 "port 70000 is outside 0..65535"),
                ("--listen", ["--standalone", "--trainers", "1", "--listen", "127.0.0.1:+80"],
                 "the port must be a number"),
                ("--master", ["--master", "127.0.0.1:70000"], "port 70000 is outside 1..65535"),
                ("--master", ["--master", "127.0.0.1:0"], "port 0 is outside 1..65535"),
                ("--advertise", ["--master", "127.0.0.1:1", "--connect-timeout", "1", "--advertise",
                                 "10.0.0.1:5000"], "without a port"),
                ("--advertise", ["--master", "127.0.0.1:1", "--connect-timeout", "1", "--advertise",
                                 "vm\npsbench-master: x"], "not a host name or address")):
            with self.subTest(flag=flag, args=args):
                err = self.flag_error([srv] + args)
                self.assertIn("psbench-server: %s: " % flag, err)
                self.assertIn(want, err)

    def test_trainer_flags(self):
        tr = psb.bin_path("psbench-trainer")
        base = ["--rank", "0", "--model", "synthetic", "--connect-timeout", "1"]
        for flag, args, want in (
                ("--server", ["--server", "127.0.0.1:1,127.0.0.1:70000"] + base, "port 70000 is outside 1..65535"),
                ("--server", ["--server", "127.0.0.1:1,,127.0.0.1:2"] + base, "empty or too long address"),
                ("--master", ["--master", "127.0.0.1:99999"], "port 99999 is outside 1..65535"),
                ("--collective-host", ["--master", "127.0.0.1:1", "--collective-host", "10.0.0.1:7"],
                 "without a port")):
            with self.subTest(flag=flag, args=args):
                err = self.flag_error([tr] + args)
                self.assertIn("psbench-trainer: %s: " % flag, err)
                self.assertIn(want, err)

    def test_master_flags(self):
        r = subprocess.run([psb.bin_path("psbench-master"), "--http", "127.0.0.1:99999"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=psb.base_env(), timeout=20)
        err = r.stderr.decode(errors="replace")
        self.assertEqual(r.returncode, 2, err)
        self.assertIn("--http '127.0.0.1:99999': port 99999 is outside 0..65535", err)

    def test_register_port_out_of_range(self):
        """A server registering port 70000 (or none, or a host with a port
        or control characters in `advertise`) is refused with the field
        and value named; the master keeps waiting for a good server."""
        m = self.reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                            "--ntrainer", "1", "--nserver", "1", "--linger", "0", "--rpc-timeout", "20"],
                           name="master", cls=Master)
        m.wait_ports()
        for extra, want in (({"port": 70000}, "port 70000 is outside 1..65535"),
                            ({"port": "80"}, "must be a whole number"),
                            ({}, "\"port\" is missing"),
                            ({"port": 9, "advertise": "10.0.0.1:5000"}, "\"advertise\": '10.0.0.1:5000' is not a host"),
                            ({"port": 9, "advertise": "vm\n\x1b[31m"}, "advertise must be printable text")):
            with self.subTest(extra=extra):
                body = {"role": "server", "host": "fake", "device": "cpu", "listen_host": "127.0.0.1", "pid": 1}
                body.update(extra)
                ans = ctl_exchange(m.ctl, "register", body)
                self.assertEqual(ans[0]["type"], "stop", ans)
                self.assertEqual(ans[1].get("status"), "refused", ans)
                self.assertIn(want, ans[1].get("reason", ""))
        st = wait_phase(self, m, ("waiting",), timeout=5)
        self.assertIsNone(st.get("error"), st)
        self.assertTrue(m.alive(), m.describe())


# ---- a node that cannot set up says why -------------------------------------

class SetupFailures(psb.PsbTestCase):

    # A master that, once its run failed, keeps serving (HTTP, and a
    # register's refusal) for --linger LINGER_S seconds: the tests read its
    # verdict after the node that failed it is gone, and a master with
    # --linger 0 may have left by then. end_lingering stops it.
    master_kw = dict(linger=psb.LINGER_S, rpc_timeout=20)

    def tiny_model(self):
        path = os.path.join(self.reg.workdir, "models.json")
        with open(path, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 3, "bucket_floats": 2000, "sparse": False}}}, f)
        return ["--model", "Tiny", "--model-config-path", path, "--epochs", "1"]

    def test_server_without_memory_for_its_table(self):
        """A server that cannot allocate its embedding table (an address
        space limit stands for a host without the memory) reports
        `failed`: the master's verdict names the out-of-memory and the
        size, not "server 0 disconnected"."""
        srv = psb.bin_path("psbench-server")
        if psb.sanitizer_build(srv):
            self.skipTest("sanitizer build: no address-space limit possible")
        rows, cols = 1 << 22, 512  # 2^31 floats: 8 GiB
        m = self.master("--number-trainers", "1", "--number-ps", "1", "--number-embeddings", str(rows),
                        "--embedding-dim", str(cols), "--warmup-cycles", "1")

        def limit_as():
            resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        s = self.reg.start([srv, "--master", m.ctl, "--listen", "127.0.0.1:0"],
                           env=psb.base_env({"PSBENCH_TEST_MEM_BYTES": str(64 << 30)}), name="server",
                           preexec=limit_as)
        self.assertEqual(s.wait(30), 1, s.describe())
        st = wait_phase(self, m, ("failed",), timeout=10)
        self.assertRegex(st["error"], r"^server 0 \(.*\) failed: embedding: out of memory for a table of "
                                      r"4194304 x 512 floats \(8(\.0)? GiB\)")
        last = s.stderr().strip().splitlines()[-1]
        self.assertEqual(last, "psbench-server: the run failed: " + st["error"])
        # A trainer that comes now is told why the run failed, not that it
        # "has already started".
        ans = ctl_exchange(m.ctl, "register", {"role": "trainer", "host": "late", "device": "cpu", "pid": 1})
        self.assertEqual((ans[0]["type"], ans[1].get("status")), ("stop", "refused"), ans)
        self.assertEqual(ans[1].get("reason"), "the run is over (failed: %s)" % st["error"])
        psb.end_lingering(self, m, 1)

    def test_server_port_taken(self):
        """A server whose fixed --listen port is taken tells the master so
        (its register names the port it asked for)."""
        m = self.master(*(self.tiny_model() + ["--ntrainer", "1", "--nserver", "1"]))
        taken = socket.socket()
        taken.bind((psb.HOST, 0))
        taken.listen(1)
        self.addCleanup(taken.close)
        port = taken.getsockname()[1]
        s = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen",
                            "%s:%d" % (psb.HOST, port)], name="server")
        self.assertEqual(s.wait(30), 1, s.describe())
        st = wait_phase(self, m, ("failed",), timeout=10)
        self.assertRegex(st["error"], r"^server 0 \(.*\) failed: --listen %s:%d: cannot listen there: "
                                       r"Address already in use" % (re.escape(psb.HOST), port))
        ans = ctl_exchange(m.ctl, "register", {"role": "trainer", "host": "late", "device": "cpu", "pid": 1})
        self.assertEqual((ans[0]["type"], ans[1].get("status")), ("stop", "refused"), ans)
        self.assertEqual(ans[1].get("reason"), "the run is over (failed: %s)" % st["error"])
        psb.end_lingering(self, m, 1)

    def test_cuda_server_without_gpu(self):
        """--local with a CUDA server where no GPU answers: the master's
        verdict gives the reason in words (from the server's `failed`),
        not "server 0 (pid N) exited with status 2"."""
        if psb.gpu_count() > 0:
            self.skipTest("a GPU answers here")
        m = self.master(*(self.tiny_model() + ["--ntrainer", "0", "--ncudatrainer", "1", "--nserver", "0",
                                               "--ncudaserver", "1"]), local=True, linger=0)
        self.assertEqual(m.wait(60), 1, m.describe())
        last = m.stderr().strip().splitlines()[-1]
        self.assertRegex(last, r"^psbench-master: run failed: server 0 \(.*\) failed: --device cuda: "
                               r"(no CUDA device answers|libcudart|this build has no CUDA)")

    def test_cuda_trainer_without_gpu(self):
        """A trainer asked for --device cuda where no GPU answers joins
        only to report it: the master's verdict names the trainer and the
        reason, and so does the trainer's last line."""
        if psb.gpu_count() > 0:
            self.skipTest("a GPU answers here")
        m = self.master(*(self.tiny_model() + ["--ntrainer", "0", "--ncudatrainer", "1", "--nserver", "0",
                                               "--ncudaserver", "1"]))
        t = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--device", "cuda"],
                           name="trainer")
        self.assertEqual(t.wait(30), 1, t.describe())
        st = wait_phase(self, m, ("failed",), timeout=10)
        self.assertRegex(st["error"], r"^trainer 0 \(.*\) failed: --device cuda: ")
        last = t.stderr().strip().splitlines()[-1]
        self.assertEqual(last, "psbench-trainer: the run failed: " + st["error"])
        psb.end_lingering(self, m, 1)

    def test_cuda_trainer_without_gpu_nor_master(self):
        """--device cuda where no GPU answers, pointed at a master that is
        not there: the trainer says why it cannot run at once, while it
        still tries to reach the master (it waited out the whole connect
        timeout, 30 s, before saying a word), then exits non-zero naming
        the cause and that no master heard it."""
        if psb.gpu_count() > 0:
            self.skipTest("a GPU answers here")
        nobody = socket.socket()  # bound, never listening: connections are refused
        nobody.bind((psb.HOST, 0))
        self.addCleanup(nobody.close)
        addr = "%s:%d" % (psb.HOST, nobody.getsockname()[1])
        t = self.reg.start([psb.bin_path("psbench-trainer"), "--master", addr, "--device", "cuda"],
                           name="trainer")
        said = re.compile(r"^psbench-trainer: error: --device cuda: .*: this trainer cannot run; telling the "
                          r"master at %s \(up to 30 s, --connect-timeout\)$" % re.escape(addr), re.M)
        deadline = time.monotonic() + 60
        while not said.search(t.stderr()) and t.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertRegex(t.stderr(), said)
        self.assertTrue(t.alive(), "said only once the connect timeout was over: " + t.describe())
        t.stop()
        # Given a short connect timeout, it ends: the cause, and that the
        # master was not told.
        t = self.reg.start([psb.bin_path("psbench-trainer"), "--master", addr, "--device", "cuda",
                            "--connect-timeout", "0.5"], name="trainer2")
        self.assertEqual(t.wait(60), 1, t.describe())
        last = t.stderr().strip().splitlines()[-1]
        self.assertRegex(last, r"^psbench-trainer: --device cuda: .* \(not told to the master: cannot connect to "
                               + re.escape(addr) + r": Connection refused\)$")


def ctl_exchange(addr, kind, body, timeout=10.0):
    """Send one control message on a new connection; the first answer as
    (header, JSON body)."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as c:
        data = json.dumps(body).encode()
        c.sendall(psb.encode_frame({"type": kind, "payload": len(data)}, data))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            chunk = c.recv(65536)
            if not chunk:
                raise AssertionError("the master closed the connection without an answer")
            buf += chunk
        hl = struct.unpack(">I", buf[:4])[0]
        h = msgpack.unpackb(buf[4:4 + hl], raw=False)
        plen = h.get("payload", 0)
        while len(buf) < 4 + hl + plen:
            chunk = c.recv(65536)
            if not chunk:
                break
            buf += chunk
        return h, json.loads(buf[4 + hl:4 + hl + plen] or b"{}")


def _run_trainer(self, port):
    """A synthetic trainer against `port` (1 bucket, 1 batch); its stderr.
    It must fail (non-zero) within its timeouts."""
    r = subprocess.run([psb.bin_path("psbench-trainer"), "--server", "%s:%d" % (psb.HOST, port), "--rank", "0",
                        "--model", "synthetic", "--buckets", "1", "--bucket-floats", "4", "--batches", "1",
                        "--connect-timeout", "5", "--rpc-timeout", "5"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=psb.base_env(), timeout=30)
    err = r.stderr.decode(errors="replace")
    self.assertNotEqual(r.returncode, 0, err)
    return err


psb.PsbTestCase.run_trainer = _run_trainer


class MockServer(object):
    """A data-plane peer that answers a hello with `welcome` and each push
    with a result (less the field `result_drop`), from a thread."""

    def __init__(self, welcome, result_drop=None):
        self.welcome = welcome
        self.result_drop = result_drop
        self.lsock = socket.socket()
        self.lsock.bind((psb.HOST, 0))
        self.lsock.listen(4)
        self.lsock.settimeout(20)
        self.port = self.lsock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.lsock.close()
        self.thread.join(10)

    def _serve(self):
        try:
            conn, _ = self.lsock.accept()
        except OSError:
            return
        conn.settimeout(20)
        buf = b""
        try:
            while True:
                while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                hl = struct.unpack(">I", buf[:4])[0]
                h = msgpack.unpackb(buf[4:4 + hl], raw=False)
                plen = h.get("payload", 0)
                while len(buf) < 4 + hl + plen:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                payload = buf[4 + hl:4 + hl + plen]
                buf = buf[4 + hl + plen:]
                if h.get("type") == "hello":
                    conn.sendall(psb.encode_frame(self.welcome))
                elif h.get("type") == "push":
                    r = {"type": "result", "batch": h["batch"], "bucket": h["bucket"], "dtype": "f32",
                         "layout": "dense", "count": h["count"]}
                    r.pop(self.result_drop, None)
                    conn.sendall(psb.encode_frame(r, payload))
        except OSError:
            return
        finally:
            conn.close()


if __name__ == "__main__":
    psb.main()
