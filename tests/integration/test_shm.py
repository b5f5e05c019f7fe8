#!/usr/bin/env python3
"""Shared memory between roles on one host (issue 28; docs/protocol.md,
"Shared memory on one host"): the redirect, the segments and their checks,
pushes and results by offset, what a bad peer gets, failures, and the
kinds' results over shared memory equal to TCP's, bit for bit."""
import fcntl
import json
import mmap
import os
import re
import signal
import socket
import subprocess
import sys
import time
import unittest


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import encode_frame, dense_payload, expected_dense_mean, parse_dense  # noqa: E402
from psb import Master, sealed_memfd  # noqa: E402

MIB = psb.MIB


class AcceptedPeer(psb.RawClient):
    """The server's end of a connection a trainer made: frames by hand for
    a hostile server (descriptors that come are kept in fds)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.closed = False
        self.fds = []

    def _recv_chunk(self, n):
        if self.sock.family != socket.AF_UNIX:
            return self.sock.recv(n)
        data, fds, _, _ = socket.recv_fds(self.sock, n, 4)
        self.fds += fds
        return data


class Shm(psb.PsbTestCase):
    # -- the protocol by hand -------------------------------------------------
    def test_round_by_offset_and_result_in_place(self):
        """Two trainers push by offset; both read the mean where the server
        wrote it, once; it equals TCP's (and the kind's rule) bit for bit."""
        s = self.reg.server(trainers=2, extra=["--device", "cpu"])
        a, b = self.shm_client(s), self.shm_client(s)
        wa, wb = a.hello_shm(0), b.hello_shm(1)
        self.assertEqual(wa["type"], "welcome", wa)
        self.assertGreater(wa["segment"], 0)
        n = 65536
        va = [float(i % 97) * 0.25 for i in range(n)]
        vb = [float(i % 13) - 3.5 for i in range(n)]
        a.put(8192, va)
        b.put(0, vb)
        a.push_at(0, 0, n, 8192)
        b.push_at(0, 0, n, 0)
        ha, pa = a.result()
        hb, pb = b.result()
        self.assertEqual((ha["type"], hb["type"]), ("result", "result"), (ha, hb))
        self.assertIn("at", ha)
        self.assertEqual(ha["at"], hb["at"])  # written once, read by both
        self.assertNotIn("payload", ha)
        self.assertEqual(parse_dense(pa), expected_dense_mean([va, vb], 2))
        self.assertEqual(pa, pb)
        # The server's segment: sealed against shrinking and growing.
        with self.assertRaises(PermissionError):
            os.ftruncate(a.server_seg_fd, 0)
        with self.assertRaises(PermissionError):
            os.ftruncate(a.server_seg_fd, 1 << 40)

    def test_offset_outside_the_segment(self):
        """A push naming bytes beyond its segment (or straddling its end, or
        off a float boundary) is bad_frame and the connection closes; the
        server reads nothing there and serves the next trainers."""
        s = self.reg.server(trainers=1, extra=["--device", "cpu"])
        for at, count in ((4 * MIB, 1), (4 * MIB - 8, 4), (2, 4), ((1 << 64) - 4, 2)):
            c = self.shm_client(s)
            c.hello_shm(0)
            c.push_at(0, 0, count, at)
            h, _ = c.recv_frame()
            self.assertEqual((h["type"], h["code"]), ("error", "bad_frame"), (at, h))
            self.assertRegex(h["message"], r"push names bytes \d+\.\.\d+ of a segment of 4194304 bytes")
            c.expect_closed()
            c.close()
        self.good_round(s, ranks=(0,))

    def test_at_where_it_means_nothing(self):
        """`at` on TCP, or on a frame other than push; a payload and `at`
        at once: bad_frame, closed."""
        s = self.reg.server(trainers=1, extra=["--device", "cpu"])
        c = self.client(s)
        self.hello_ok(c, 0)
        c.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "f32", "layout": "dense", "count": 1,
                      "at": 0})
        h = self.expect_error(c, "bad_frame")
        self.assertIn("on a TCP connection", h["message"])
        c.expect_closed()
        d = self.shm_client(s)
        d.hello_shm(0)
        d.send_frame({"type": "fetch", "at": 0})
        self.assertIn("only for push", self.expect_error(d, "bad_frame")["message"])
        e = self.shm_client(s)
        e.hello_shm(0)
        e.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "f32", "layout": "dense", "count": 1,
                      "at": 0}, dense_payload([1.0]))
        self.assertIn("both a payload and at", self.expect_error(e, "bad_frame")["message"])
        self.good_round(s, ranks=(0,))

    def test_segments_refused(self):
        """Segments a server does not map: not sealed against shrinking,
        larger than --max-shm, not what the hello says, or promised and not
        sent. Each is bad_frame naming why; the server stays."""
        s = self.reg.server(trainers=1, extra=["--device", "cpu", "--max-shm", "8M"])
        cases = [
            (dict(seg_fd=sealed_memfd(MIB, seals=0)), None, "not sealed against shrinking"),
            (dict(size=16 * MIB), None, "at most 8388608 taken"),
            (dict(size=MIB), {"segment": 2 * MIB}, "its segment is 2097152 bytes; it is 1048576"),
            (dict(size=MIB, send_segment=False), {"segment": MIB}, "no descriptor came with it"),
        ]
        for kw, extra, why in cases:
            c = self.shm_client(s, **kw)
            w = c.hello_shm(0, extra=extra)
            self.assertEqual((w["type"], w.get("code")), ("error", "bad_frame"), (why, w))
            self.assertIn(why, w["message"])
            c.expect_closed()
        # A pipe is not a segment.
        r, wfd = os.pipe()
        try:
            c = self.shm_client(s, size=MIB)
            c.redirect(0)
            socket.send_fds(c.sock, [encode_frame({"type": "hello", "version": 1, "role": "trainer", "rank": 0,
                                                   "segment": MIB})], [r])
            h, _ = c.recv_frame()
            self.assertIn("not a memfd", h["message"])
        finally:
            os.close(r)
            os.close(wfd)
        self.good_round(s, ranks=(0,))

    def hugetlb_memfd(self, size):
        """A hugetlbfs memfd of `size` bytes sealed against shrinking and
        growing (it seals, and its size is what it says, like any memfd),
        or the test skipped with the kernel's reason."""
        try:
            fd = os.memfd_create("psbench-test-huge", os.MFD_HUGETLB | os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
        except OSError as e:
            self.skipTest("memfd_create(MFD_HUGETLB): %s" % e)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        except OSError as e:
            os.close(fd)
            self.skipTest("a sealed hugetlbfs memfd of %d bytes: %s" % (size, e))
        return fd

    def test_segment_not_shared_memory(self):
        """A segment that seals and maps like a memfd but is not ordinary
        shared memory — a hugetlbfs memfd, whose pages may be missing at
        the first touch (SIGBUS on a host with no huge page free) — is
        bad_frame before the server maps it; the server never folds from
        it, lives, and serves the next trainers."""
        s = self.reg.server(trainers=1, extra=["--device", "cpu"])
        fd = self.hugetlb_memfd(2 * MIB)
        try:
            c = self.shm_client(s, seg_fd=fd, map_segment=False)
            w = c.hello_shm(0)
            if w.get("type") == "welcome":
                c.push_at(0, 0, 16, 0)  # the fold that would touch its pages
            self.assertEqual((w["type"], w.get("code")), ("error", "bad_frame"), w)
            self.assertIn("the segment sent is on hugetlbfs, not ordinary shared memory", w["message"])
            c.expect_closed()
        finally:
            os.close(fd)
        self.assert_server_alive(s)
        self.good_round(s, ranks=(0,))

    def test_segment_on_disk_refused(self):
        """A file on disk (not shared memory: it cannot be sealed) sent as
        a segment: bad_frame, on every host; the server serves on."""
        s = self.reg.server(trainers=1, extra=["--device", "cpu"])
        fd = None
        for d in (self.reg.workdir, "/var/tmp", os.getcwd()):
            try:
                fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
                break
            except OSError:
                continue
        if fd is None:
            self.fail("no folder here takes an O_TMPFILE file")
        try:
            os.ftruncate(fd, MIB)
            c = self.shm_client(s, seg_fd=fd)
            w = c.hello_shm(0)
            self.assertEqual((w["type"], w.get("code")), ("error", "bad_frame"), w)
            self.assertRegex(w["message"], r"the segment sent (is not a memfd|is on .*not ordinary shared memory)")
            c.expect_closed()
        finally:
            os.close(fd)
        self.good_round(s, ranks=(0,))

    def test_trainer_refuses_a_server_segment_not_shared_memory(self):
        """The trainer's side of the same check: a hostile server (this
        test, by hand) redirects it to a Unix socket and welcomes it with a
        hugetlbfs memfd as its result segment, then answers its push with a
        result in that segment. The trainer refuses the segment before it
        maps it — it fails naming the server and why, and is never killed
        by SIGBUS."""
        fd = self.hugetlb_memfd(2 * MIB)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conns, peers = [], []
        try:
            tcp.bind((psb.HOST, 0))
            tcp.listen(1)
            tcp.settimeout(20)
            name = "psbench-test-hostile-%d-%d" % (os.getpid(), int(time.monotonic() * 1e6))
            uds.bind("\0" + name)
            uds.listen(1)
            uds.settimeout(20)
            t = self.reg.trainer("%s:%d" % (psb.HOST, tcp.getsockname()[1]), 0, buckets=1, floats=16, batches=1,
                                 extra=("--transport", "shm"))
            a, _ = tcp.accept()
            conns.append(a)
            c = AcceptedPeer(a)
            peers.append(c)
            h, _ = c.recv_frame()
            self.assertEqual((h["type"], h.get("link")), ("hello", "shm"), h)
            c.send_frame({"type": "redirect", "version": 1, "server": 0, "shm": name, "segment": 2 * MIB,
                          "maxshm": 64 * MIB})
            u, _ = uds.accept()
            conns.append(u)
            p = AcceptedPeer(u)
            peers.append(p)
            h, _ = p.recv_frame()
            self.assertEqual(h["type"], "hello", h)
            welcome = encode_frame({"type": "welcome", "version": 1, "server": 0, "trainers": 1,
                                    "segment": 2 * MIB})
            socket.send_fds(u, [welcome], [fd])
            # Where the segment was taken: each push answered by a result
            # in it (the trainer's read of it is the touch that kills).
            try:
                while True:
                    h, _ = p.recv_frame(timeout=20)
                    if h.get("type") == "push":
                        p.send_frame({"type": "result", "batch": h["batch"], "bucket": h["bucket"], "dtype": "f32",
                                      "layout": "dense", "count": h["count"], "at": 0})
            except (psb.Closed, OSError):
                pass
            rc = t.wait(30)
            self.assertGreater(rc, 0, t.describe())  # an exit with an error, not a signal
            self.assertRegex(t.stderr(), r"its segment: the segment sent is on hugetlbfs, not ordinary shared memory")
        finally:
            for x in conns + [tcp, uds]:
                x.close()
            for x in peers:
                for f in x.fds:
                    os.close(f)
            os.close(fd)

    def test_descriptor_with_another_frame(self):
        """A descriptor sent with anything but the hello is bad_frame: the
        server closes it and the connection, and keeps no descriptor."""
        s = self.reg.server(trainers=1, extra=["--device", "cpu"])
        before = len(os.listdir("/proc/%d/fd" % s.pid))
        for _ in range(5):
            c = self.shm_client(s, size=MIB)
            c.hello_shm(0)
            extra = sealed_memfd(MIB)
            socket.send_fds(c.sock, [encode_frame({"type": "fetch"})], [extra, extra])
            os.close(extra)
            h, _ = c.recv_frame()
            self.assertEqual((h["type"], h["code"]), ("error", "bad_frame"), h)
            self.assertIn("descriptor", h["message"])
            c.expect_closed()
            c.close()
        deadline = time.monotonic() + 5
        while len(os.listdir("/proc/%d/fd" % s.pid)) > before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(len(os.listdir("/proc/%d/fd" % s.pid)), before)

    def test_peer_that_stops_reading(self):
        """A trainer that pushes on and never reads: its results are lent
        in place up to --max-queued, then go on the socket, and once more
        than --max-queued bytes wait unread it is dropped; the server
        stays."""
        s = self.reg.server(trainers=1, extra=["--device", "cpu", "--max-queued", "256K", "--log-level", "debug"])
        c = self.shm_client(s, size=MIB)
        c.hello_shm(0)
        # Each push of a later batch ends the earlier results' loans (the
        # hello's promise), so what waits unread is headers: many rounds.
        n = 1024
        c.put(0, [1.0] * n)
        dropped = False
        for batch in range(100000):
            try:
                c.push_at(batch, 0, n, 0)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                dropped = True
                break
        if not dropped:
            c.drain_until_closed(timeout=10)
        deadline = time.monotonic() + 10
        while "bytes of results queued and not read" not in s.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("bytes of results queued and not read", s.stderr())
        self.good_round(s, ranks=(0,))

    # -- psbench's trainers -----------------------------------------------------
    def run_pair(self, server_extra, trainer_extra, batches=5, floats=100000):
        s = self.reg.server(trainers=2, extra=list(server_extra))
        ts = [self.reg.trainer(s, r, buckets=3, floats=floats, batches=batches, extra=tuple(trainer_extra))
              for r in range(2)]
        for t in ts:
            t.wait(60)
        return s, ts

    def test_transport_choices(self):
        """auto takes shared memory on one host; shm insists (a one-line
        error where the server offers TCP only); a server with --transport
        shm refuses a TCP hello, saying why; tcp never asks."""
        s, ts = self.run_pair(["--transport", "tcp"], ["--transport", "shm"])
        for t in ts:
            self.assertNotEqual(t.returncode, 0)
            self.assertRegex(t.stderr().strip().splitlines()[-1], r"offers no shared memory \(--transport shm")
        s.stop()
        s, ts = self.run_pair(["--transport", "shm"], ["--transport", "tcp"])
        for t in ts:
            self.assertNotEqual(t.returncode, 0)
            self.assertIn("shared memory only (--transport shm)", t.stderr())
        s.stop()
        s, ts = self.run_pair(["--transport", "shm"], ["--transport", "auto"])
        for t in ts:
            self.assertEqual(t.returncode, 0, t.describe())
        rc, out, _ = s.terminate_and_wait()
        self.assertRegex(out, r" 30 pushes folded from trainers' segments")

    def test_push_payloads_inline_on_the_socket(self):
        """PSBENCH_SHM_PUSH=inline: pushes travel on the Unix socket (the
        results are still read in place); the same checks pass."""
        s = self.reg.server(trainers=2)
        env = psb.base_env({"PSBENCH_SHM_PUSH": "inline"})
        ts = [self.reg.trainer(s, r, buckets=2, floats=70000, batches=4, env=env) for r in range(2)]
        for t in ts:
            self.assertEqual(t.wait(60), 0, t.describe())
        rc, out, _ = s.terminate_and_wait()
        self.assertRegex(out, r" 0 pushes folded from trainers' segments")
        m = re.search(r"(\d+) read in place", out)
        self.assertEqual(int(m.group(1)), 2 * 2 * 4 * 70000 * 4, out)

    def test_server_taking_smaller_segments(self):
        """A server whose --max-shm is below the trainers' usual segment:
        they make theirs that small (the redirect says the bound), and run
        over shared memory; a second server taking less than the segment
        made for the first gets none (its pushes on the socket) and still
        serves."""
        a = self.reg.server(trainers=2, extra=["--max-shm", "64M"])
        b = self.reg.server(trainers=2, extra=["--max-shm", "8M"])
        ts = [self.reg.trainer([a, b], r, buckets=4, floats=70000, batches=4, extra=("--transport", "shm"))
              for r in range(2)]
        for t in ts:
            self.assertEqual(t.wait(60), 0, t.describe())
        rc, out_a, _ = a.terminate_and_wait()
        rc, out_b, _ = b.terminate_and_wait()
        self.assertRegex(out_a, r" 16 pushes folded from trainers' segments")  # buckets 0, 2 x 4 batches x 2
        self.assertRegex(out_b, r" 0 pushes folded from trainers' segments")
        self.assertRegex(out_b, r"[1-9]\d* read in place")

    def segments_mapped_by(self, s, n, timeout=60.0):
        """Waits until server s maps n trainers' segments (each trainer's
        hello taken: it is in the session)."""
        deadline = time.monotonic() + timeout
        while True:
            with open("/proc/%d/maps" % s.pid) as f:
                segs = {ln.split()[4] for ln in f if "memfd:psbench-trainer" in ln}
            if len(segs) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        self.assertGreaterEqual(len(segs), n, s.describe())

    def test_trainer_killed_mid_run(self):
        """A trainer killed while buckets are in flight: the other is told
        peer_lost (one line), the server stays and serves a new session."""
        for delay in (0.3, 0.6):
            s = self.reg.server(trainers=2)
            ts = [self.reg.trainer(s, r, buckets=4, floats=262144, batches=100000) for r in range(2)]
            # Both in the session first: a trainer killed before its hello
            # is one the server never knew, and the other would wait for
            # it (a loaded host, ASan, can take longer than the delay).
            self.segments_mapped_by(s, 2)
            time.sleep(delay)
            ts[0].signal(signal.SIGKILL)
            self.assertNotEqual(ts[1].wait(60), 0)
            self.assertRegex(ts[1].stderr(), r"peer_lost|closed the connection")
            self.assertTrue(s.alive(), s.describe())
            self.good_round(s)
            s.stop()

    def test_server_killed_while_trainers_hold_its_segment(self):
        """The server dies under trainers that map its segment: they end
        with a one-line error naming it, never SIGBUS."""
        s = self.reg.server(trainers=2)
        ts = [self.reg.trainer(s, r, buckets=4, floats=262144, batches=100000) for r in range(2)]
        time.sleep(0.5)
        s.signal(signal.SIGKILL)
        for t in ts:
            rc = t.wait(60)
            self.assertEqual(rc, 1, t.describe())
            self.assertIn("server 127.0.0.1:%d" % s.port, t.stderr().strip().splitlines()[-1])

    def test_trainer_segment_sealed(self):
        """What a psbench trainer hands over cannot be shrunk by anyone, and
        the server maps it read-only (no writable mapping of it exists)."""
        s = self.reg.server(trainers=2)
        t = self.reg.trainer(s, 0, buckets=2, floats=1000, batches=100000)  # waits for rank 1
        deadline = time.monotonic() + 20
        seg = None
        while seg is None and time.monotonic() < deadline:
            for fd in os.listdir("/proc/%d/fd" % t.pid):
                try:
                    if os.readlink("/proc/%d/fd/%s" % (t.pid, fd)).startswith("/memfd:psbench-trainer"):
                        seg = "/proc/%d/fd/%s" % (t.pid, fd)
                except OSError:
                    pass
            time.sleep(0.05)
        self.assertIsNotNone(seg, t.describe())
        fd = os.open(seg, os.O_RDWR)
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            self.assertTrue(seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW, seals)
            with self.assertRaises(PermissionError):
                os.ftruncate(fd, 0)
            with self.assertRaises(PermissionError):  # future writes sealed: no writable mapping
                mmap.mmap(fd, 4096)
        finally:
            os.close(fd)
        with open("/proc/%d/maps" % s.pid) as f:
            maps = [ln for ln in f if "memfd:psbench-trainer" in ln]
        self.assertTrue(maps, "the server maps the trainer's segment")
        for ln in maps:
            self.assertEqual(ln.split()[1][:2], "r-", ln)
        t.stop()


# -- whole runs: the kinds over each transport ------------------------------------

def master_run(transport, args, out):
    cmd = [psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
           "--linger", "0", "--out", out, "--transport", transport] + list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=psb.base_env(), timeout=240,
                       text=True)
    return p


class Runs(psb.PsbTestCase):
    JOBS = {
        "average": ["--epochs", "1"],
        "average-batch": ["--epochs", "1", "--server", "AverageBatchParameterServer"],
        "batch-update": ["--server", "BatchUpdateParameterServer", "--model", "BatchUpdateLinear", "--trainer",
                         "BatchUpdateTrainer", "--epochs", "1"],
        # One trainer: two trainers' sparse updates reach the tables in
        # an order no transport fixes (the seed's Hogwild-style updates).
        "embedding": ["--number-trainers", "1", "--number-ps", "2", "--embedding-dim", "256", "--epochs", "1",
                      "--warmup-cycles", "1"],
    }

    @unittest.skipIf(psb.ASAN, "training runs over both transports: the release pass's; the segments' code runs "
                               "under ASan in the tests beside it")
    def test_kinds_equal_over_both_transports(self):
        """Each kind trains the same bits over shared memory as over TCP:
        losses and final parameters' digests equal, every link as asked."""
        for kind, args in self.JOBS.items():
            got = {}
            for transport in ("tcp", "shm"):
                out = os.path.join(self.reg.workdir, "%s-%s" % (kind, transport))
                p = master_run(transport, args, out)
                self.assertEqual(p.returncode, 0, (kind, transport, p.stderr[-3000:]))
                with open(os.path.join(out, "results.json")) as f:
                    res = json.load(f)
                links = [l for t in res["trainers"] for l in t["links"]]
                self.assertTrue(links, (kind, transport))
                self.assertEqual({l["transport"] for l in links}, {transport}, (kind, links))
                got[transport] = [(t.get("loss_per_epoch"), t.get("final_params_sha256")) for t in res["trainers"]]
                self.assertTrue(all(d for _, d in got[transport]), (kind, got))
            self.assertEqual(got["tcp"], got["shm"], kind)

    def test_runs_keep_descriptors_and_mappings_flat(self):
        """--runs 20 on one master: the server's descriptors and mappings
        after the last run are what they were after the second."""
        cmd = [psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
               "--linger", "0", "--transport", "shm", "--runs", "20", "--model", "Synthetic", "--epochs", "1",
               "--log-level", "info"]
        m = self.reg.start(cmd, name="master")
        counts = {}
        deadline = time.monotonic() + 240
        server_pid = None
        while m.alive() and time.monotonic() < deadline:
            if server_pid is None:
                for line in subprocess.run(["pgrep", "-P", str(m.pid), "psbench-server"], stdout=subprocess.PIPE,
                                           text=True).stdout.split():
                    server_pid = int(line)
            runs = re.findall(r"run (\d+) of 20", m.stdout() + m.stderr())
            if server_pid and runs:
                r = int(runs[-1])
                try:
                    fds = len(os.listdir("/proc/%d/fd" % server_pid))
                    with open("/proc/%d/maps" % server_pid) as f:
                        maps = sum(1 for _ in f)
                except OSError:
                    break
                counts.setdefault(r, []).append((fds, maps))
            time.sleep(0.02)
        self.assertEqual(m.wait(60), 0, m.describe())
        self.assertIn(2, counts, (counts.keys(), m.describe()))
        late = max(counts)
        self.assertGreaterEqual(late, 15, counts.keys())
        # The floor of the last runs against the ceiling of the first: a
        # run's samples fall in and between its passes, and the mappings
        # of one mid-run sample vary by one (the last run may be seen only
        # once, mid-run), while a leak raises every later sample by a run's
        # share each run.
        late_samples = [c for r in range(late - 3, late + 1) for c in counts.get(r, [])]
        early_samples = [c for r in range(2, 6) for c in counts.get(r, [])]
        self.assertLessEqual(min(late_samples), max(early_samples), counts)


# -- a real model's gradients in the trainer's segment ----------------------------

# DummyModels small enough for a quick run; Roomy's gradients (1.5 MiB)
# do not fit a 1 MiB segment.
GRAD_MODELS = {
    "Small": {"model_class": "DummyModel",
              "configurations": {"num_embeddings": 128, "embedding_dim": 64, "dense_input_size": 64,
                                 "dense_output_size": 128, "dense_layers_count": 1, "sparse": False}},
    "Roomy": {"model_class": "DummyModel",
              "configurations": {"num_embeddings": 1024, "embedding_dim": 256, "dense_input_size": 256,
                                 "dense_output_size": 256, "dense_layers_count": 2, "sparse": False}},
}
PUSHES_RE = re.compile(r"\[trainer (\d+)\] psbench-trainer: timed pass done: (\d+) pushes so far by offset in the "
                       r"shared segment, (\d+) of them staged")
FOLDED_RE = re.compile(r" (\d+) pushes folded from trainers' segments")


class ModelGradients(psb.PsbTestCase):
    """DummyModel through rpc_hook over shared memory: its gradients are
    computed in the trainer's segment (train_new, hook_send_memory), so
    every dense push is named where it lies — none staged —, with the bits
    of a TCP run; where the segment has no room, or PSBENCH_SHM_PUSH=stage
    keeps them out, they stay in ordinary memory, every push staged, the
    same bits again."""

    def setUp(self):
        super().setUp()
        self.models = os.path.join(self.reg.workdir, "models.json")
        with open(self.models, "w") as f:
            json.dump(GRAD_MODELS, f)

    def local_run(self, name, transport, env=None):
        """A --local job (2 trainers, rpc_hook, 1 server); its output and results."""
        out = os.path.join(self.reg.workdir, name)
        cmd = [psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
               "--linger", "0", "--out", out, "--transport", transport, "--model-config-path", self.models,
               "--model", "Small", "--ddp-hook", "rpc_hook", "--nserver", "1", "--epochs", "1"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=psb.base_env(env),
                           timeout=240, text=True)
        self.assertEqual(p.returncode, 0, (name, p.stderr[-3000:]))
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        return p.stdout + p.stderr, res

    def pushes(self, log):
        """{rank: (pushes by offset, staged)} from the trainers' timed pass lines."""
        return {int(r): (int(n), int(st)) for r, n, st in PUSHES_RE.findall(log)}

    @staticmethod
    def shas(res):
        return [t["final_params_sha256"] for t in res["trainers"]]

    def test_pushes_from_the_segment_copy_nothing(self):
        """Over shared memory no push of the model's is staged, and the
        server folds each from the segment; with PSBENCH_SHM_PUSH=stage
        every one is; both with TCP's bits."""
        tcp_log, tcp = self.local_run("tcp", "tcp")
        self.assertEqual(self.pushes(tcp_log), {}, "TCP names nothing in a segment")
        self.assertNotIn("shared memory: dense buckets", tcp_log)
        self.assertTrue(all(self.shas(tcp)), tcp["trainers"])

        log, res = self.local_run("shm", "shm")
        self.assertEqual(log.count("in rpc_hook's shared memory: dense buckets are sent without a copy"), 2, log)
        got = self.pushes(log)
        self.assertEqual(sorted(got), [0, 1], log)
        for rank, (n, staged) in got.items():
            self.assertGreater(n, 0, rank)
            self.assertEqual(staged, 0, (rank, log))
        self.assertEqual(int(FOLDED_RE.search(log).group(1)), sum(n for n, _ in got.values()), log)
        self.assertEqual(self.shas(res), self.shas(tcp))

        # Kept out of the segment: every push copied there first.
        log, res = self.local_run("stage", "shm", {"PSBENCH_SHM_PUSH": "stage"})
        self.assertNotIn("shared memory: dense buckets", log)
        self.assertIn("gradients in ordinary memory ($PSBENCH_SHM_PUSH=stage)", log)
        got = self.pushes(log)
        self.assertEqual(sorted(got), [0, 1], log)
        for rank, (n, staged) in got.items():
            self.assertGreater(n, 0, rank)
            self.assertEqual(staged, n, (rank, log))
        self.assertEqual(self.shas(res), self.shas(tcp))

    def job_by_hand(self, name, transport, max_shm=None):
        """Master, a server (--max-shm) and 2 trainers, each a process of
        its own; the trainers' final parameters and logs."""
        args = [psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                "--model-config-path", self.models, "--model", "Roomy", "--ddp-hook", "rpc_hook",
                "--nserver", "1", "--ntrainer", "2", "--epochs", "1"]
        m = self.reg.start(args, name="master-" + name, cls=Master)
        m.wait_ports()
        extra = ["--max-shm", str(max_shm)] if max_shm else []
        self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"] + extra,
                       name="server-" + name)
        ts, paths = [], []
        for r in range(2):
            p = os.path.join(self.reg.workdir, "params-%s-%d.bin" % (name, r))
            paths.append(p)
            ts.append(self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r),
                                      "--transport", transport, "--params-out", p], name="trainer-%s-%d" % (name, r)))
        self.assertEqual(m.wait(180), 0, m.describe())
        for t in ts:
            self.assertEqual(t.wait(60), 0, t.describe())
        params = []
        for p in paths:
            with open(p, "rb") as f:
                params.append(f.read())
        return params, [t.stderr() for t in ts]

    def test_segment_without_room_for_the_gradients(self):
        """A segment of 1 MiB (the server's --max-shm) cannot hold Roomy's
        1.5 MiB of gradients: each trainer says so once and trains from
        ordinary memory over shared memory, with TCP's bits."""
        tcp, _ = self.job_by_hand("tcp", "tcp")
        got, logs = self.job_by_hand("small-segment", "shm", max_shm=1 << 20)
        for log in logs:
            self.assertEqual(log.count("no room for 1.5 MiB of gradients in the shared segment (1.0 MiB)"), 1, log)
            self.assertNotIn("dense buckets are sent without a copy", log)
            self.assertIn("transport: server 0 shared memory", log)
        self.assertEqual(got[0], got[1])
        self.assertEqual(got, tcp)


if __name__ == "__main__":
    psb.main()
