#!/usr/bin/env python3
"""CUDA IPC between a CUDA trainer and a CUDA server on one GPU (issue 28;
docs/protocol.md, "CUDA IPC on one GPU"), on the fake GPU of every machine
(shared/gpu/cugpu.h: IPC memory and events are sealed memfds a peer opens
through /proc; the tests' stand-in trainer makes its own the same way).

  - the protocol by hand: the welcome's offer, the export exchange, pushes
    folded from the trainer's GPU memory (after the trainer's event) and
    means read where the server wrote them, bit for bit, f32 and narrow
    (f16, bf16); every refusal
    (export before hello, on TCP, another GPU, a bad or unopenable handle,
    twice, a server that offers none) and every lie about an offset;
  - real trainers: 2 fake-cuda trainers through rpc_hook on a fake-cuda
    server exchange every dense bucket by CUDA IPC (their start line,
    results.json's links, the server's exit line) and train the very bits
    of the same run over TCP and of CPU trainers; average-batch likewise;
    no CUDA IPC with --transport tcp, --gpu-share 0 or a CPU server, each
    saying so; a trainer killed mid-run ends the run naming it and the
    server lives on; --runs keeps the server's descriptors and mappings
    flat; with --compress bf16, every bucket narrowed on the GPU and
    pushed by CUDA IPC, the same bits as over TCP, half the bytes lent;
  - Synthetic trainers (the benchmark's): every push by CUDA IPC from a
    master's job and from standalone trainers, results checked on the GPU
    (a wrong mean at either end of it caught, f32 and f16), none over TCP
    or sparse.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_cuda_ipc.py
The real trainers' devices are $PSBENCH_TRAINER_DEVICE and
$PSBENCH_SERVER_DEVICE (default fake-cuda; cuda on a GPU: run the class
Trainers there, the protocol by hand needs the fake GPU's handles).
"""
import fcntl
import json
import mmap
import os
import re
import signal
import struct
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import expected_dense_mean, parse_dense, dense_payload  # noqa: E402
from psb import ShmClient, sealed_memfd  # noqa: E402

MIB = 1 << 20
# Under ASan (psb.ASAN) the whole training runs are the release pass's
# (their memory is the same code's as the runs the ASan pass keeps: the
# killed trainer, the five runs); the suite stays within its time.
TDEV = os.environ.get("PSBENCH_TRAINER_DEVICE") or "fake-cuda"
SDEV = os.environ.get("PSBENCH_SERVER_DEVICE") or "fake-cuda"
# shared/gpu/cugpu_fake.c: a handle's bytes, and an IPC event's shared page.
FAKE_IPC_MAGIC = 0x3143504955504746
FAKE_EV_MAGIC = 0x56454B4146425350
IPC_MEM, IPC_EVENT = 1, 2
WIRE = struct.Struct("<QIiiIQQQ")  # magic, kind, pid, fd, zero, size, dev, ino
EVSYNC = struct.Struct("<QQQQQi")  # magic, recorded, completed, failed, t_ns, pid


def fake_handle(kind, fd, size, pid=None):
    st = os.fstat(fd)
    b = WIRE.pack(FAKE_IPC_MAGIC, kind, pid or os.getpid(), fd, 0, size, st.st_dev, st.st_ino)
    return b + bytes(64 - len(b))


def open_fake_handle(h):
    """Map the memory a fake GPU handle (bytes) names: (mmap, size)."""
    magic, kind, pid, fd, _, size, _, _ = WIRE.unpack(h[:WIRE.size])
    assert magic == FAKE_IPC_MAGIC and kind == IPC_MEM, (magic, kind)
    f = os.open("/proc/%d/fd/%d" % (pid, fd), os.O_RDONLY)
    try:
        return mmap.mmap(f, size, prot=mmap.PROT_READ), size
    finally:
        os.close(f)


def narrow_bytes(dtype, values):
    """values (exact in the type) as f16 or bf16 bits, little-endian."""
    if dtype == "f16":
        return b"".join(struct.pack("<e", v) for v in values)
    return b"".join(struct.pack("<f", v)[2:] for v in values)


class IpcClient(ShmClient):
    """A CUDA trainer by hand on the fake GPU: its 'GPU memory' and event
    are sealed memfds, exported as the fake GPU exports them."""

    def __init__(self, port, gpu_bytes=1 * MIB, **kw):
        super().__init__(port, **kw)
        self.gpu_fd = sealed_memfd(gpu_bytes)
        self.gpu = mmap.mmap(self.gpu_fd, gpu_bytes)
        self.gpu_bytes = gpu_bytes
        self.ev_fd = sealed_memfd(4096)
        self.ev = mmap.mmap(self.ev_fd, 4096)
        self.ev[0:EVSYNC.size] = EVSYNC.pack(FAKE_EV_MAGIC, 0, 0, 0, 0, 0)
        self.server_gpu = None

    def ipc_hex(self):
        return (fake_handle(IPC_MEM, self.gpu_fd, self.gpu_bytes) +
                fake_handle(IPC_EVENT, self.ev_fd, 4096)).hex()

    def export(self, gpu="fake", ipc=None, segment=None):
        self.send_frame({"type": "export", "gpu": gpu, "segment": self.gpu_bytes if segment is None else segment,
                         "ipc": self.ipc_hex() if ipc is None else ipc})
        h, _ = self.recv_frame()
        if h.get("type") == "export":
            self.server_gpu, size = open_fake_handle(bytes.fromhex(h["ipc"]))
            assert size == h["segment"], (size, h)
        return h

    def put_gpu(self, at, values):
        b = dense_payload(values)
        self.gpu[at:at + len(b)] = b
        return len(b)

    def record(self, complete):
        """The event recorded (number n + 1), complete or not yet."""
        _, rec, done, failed, t, _ = EVSYNC.unpack(self.ev[0:EVSYNC.size])
        rec += 1
        self.ev[0:EVSYNC.size] = EVSYNC.pack(FAKE_EV_MAGIC, rec, rec if complete else done, failed, t, os.getpid())

    def complete(self):
        _, rec, _, failed, t, pid = EVSYNC.unpack(self.ev[0:EVSYNC.size])
        self.ev[0:EVSYNC.size] = EVSYNC.pack(FAKE_EV_MAGIC, rec, rec, failed, t, pid)

    def push_dev(self, batch, bucket, count, dev, extra=None):
        h = {"type": "push", "batch": batch, "bucket": bucket, "dtype": "f32", "layout": "dense", "count": count,
             "dev": dev}
        h.update(extra or {})
        self.send_frame(h)

    def result(self, timeout=10.0):
        h, p = self.recv_frame(timeout)
        if h.get("type") == "result" and "dev" in h:
            n = (2 if h.get("dtype") in ("f16", "bf16") else 4) * h["count"]
            p = bytes(self.server_gpu[h["dev"]:h["dev"] + n])
        return h, p

    def close(self):
        super().close()
        for m in (self.gpu, self.ev, self.server_gpu):
            if m is not None:
                m.close()
        for fd in (self.gpu_fd, self.ev_fd):
            if fd >= 0:
                os.close(fd)
        self.gpu_fd = self.ev_fd = -1
        self.gpu = self.ev = self.server_gpu = None


class Protocol(psb.PsbTestCase):
    def assertSame(self, got, want):
        """Long float lists, equal bit for bit (the first difference named:
        unittest's diff of 65536 floats takes minutes)."""
        self.assertEqual(len(got), len(want))
        bad = next((i for i, (g, w) in enumerate(zip(got, want)) if struct.pack("<f", g) != struct.pack("<f", w)),
                   None)
        self.assertIsNone(bad, None if bad is None else "element %d: %r, want %r" % (bad, got[bad], want[bad]))

    def ipc_client(self, server, **kw):
        c = IpcClient(server.port, **kw)
        self._clients.append(c)
        return c

    def fake_server(self, trainers, extra=()):
        return self.reg.server(trainers=trainers, extra=["--device", "fake-cuda"] + list(extra))

    def test_round_by_device_offset(self):
        """Two trainers export, push by offset in their GPU memory, and read
        the mean where the server wrote it — once, in its shared memory —
        equal to the kind's rule bit for bit; the server folds a push only
        once the trainer's event has completed (values written after the
        push, before the event completes, are the ones averaged)."""
        s = self.fake_server(2)
        a, b = self.ipc_client(s), self.ipc_client(s)
        wa, wb = a.hello_shm(0), b.hello_shm(1)
        self.assertEqual((wa.get("gpu"), wb.get("gpu")), ("fake", "fake"), (wa, wb))
        ea, eb = a.export(), b.export()
        self.assertEqual((ea["type"], eb["type"]), ("export", "export"), (ea, eb))
        self.assertEqual(ea["gpu"], "fake")
        self.assertEqual(ea["ipc"], eb["ipc"])  # one shared memory for every trainer
        n = 65536
        va = [float(i % 97) * 0.25 for i in range(n)]
        vb = [float(i % 13) - 3.5 for i in range(n)]
        a.put_gpu(4096, va)
        a.record(complete=True)
        a.push_dev(0, 0, n, 4096)
        # b's gradients are "still being written" when it pushes: garbage
        # now, the real values only once its event completes.
        b.put_gpu(0, [1e30] * n)
        b.record(complete=False)
        b.push_dev(0, 0, n, 0)
        time.sleep(0.3)
        b.put_gpu(0, vb)
        b.complete()
        ha, pa = a.result()
        hb, pb = b.result()
        self.assertEqual((ha["type"], hb["type"]), ("result", "result"), (ha, hb))
        self.assertIn("dev", ha)
        self.assertNotIn("payload", ha)
        self.assertEqual(ha["dev"], hb["dev"])  # written once, read by both
        self.assertSame(parse_dense(pa), expected_dense_mean([va, vb], 2))
        self.assertEqual(pa, pb)
        # A second round: the first result's memory is lent until each
        # pushes a later batch; the means stay right.
        va2 = [x + 1.0 for x in va]
        a.put_gpu(4096, va2)
        a.record(complete=True)
        b.record(complete=True)
        a.push_dev(1, 0, n, 4096)
        b.push_dev(1, 0, n, 0)
        _, pa2 = a.result()
        _, pb2 = b.result()
        self.assertSame(parse_dense(pa2), expected_dense_mean([va2, vb], 2))
        self.assertEqual(pa2, pb2)
        a.close()
        b.close()
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"CUDA IPC: 4 pushes folded from trainers' GPU memory, %d result bytes read by "
                              r"trainers from the server's, 2 results never copied to the host" % (4 * 4 * n))

    def test_mixed_readers(self):
        """One trainer by CUDA IPC, one over shared memory without an
        export: the mean is copied to the host for the second (on its
        socket), read in GPU memory by the first; the same bits."""
        s = self.fake_server(2)
        a = self.ipc_client(s)
        b = self.shm_client(s)
        a.hello_shm(0)
        b.hello_shm(1)
        a.export()
        n = 4096
        va = [float(i) * 0.5 for i in range(n)]
        vb = [1.0 - float(i) for i in range(n)]
        a.put_gpu(0, va)
        a.record(complete=True)
        a.push_dev(0, 0, n, 0)
        b.put(0, vb)
        b.push_at(0, 0, n, 0)
        ha, pa = a.result()
        hb, pb = b.result()
        self.assertIn("dev", ha)
        self.assertNotIn("dev", hb)
        self.assertSame(parse_dense(pa), expected_dense_mean([va, vb], 2))
        self.assertEqual(pa, pb)
        # A trainer with an export that pushes from host memory (its
        # segment) reads that bucket's mean as such a push's: not by dev.
        a.put(0, va)
        a.push_at(1, 0, n, 0)
        b.push_at(1, 0, n, 0)
        ha, pa = a.result()
        hb, pb = b.result()
        self.assertNotIn("dev", ha)
        self.assertEqual(pa, pb)
        self.assertSame(parse_dense(pa), expected_dense_mean([va, vb], 2))
        a.close()
        b.close()
        rc, out, _ = s.terminate_and_wait()
        self.assertRegex(out, r"CUDA IPC: 1 pushes folded .*, 0 results never copied to the host")

    def test_export_refused(self):
        """What cannot be taken is refused with the reason (unsupported:
        the trainer goes on without CUDA IPC) or, for a frame in the wrong
        place, bad_frame and the connection closes."""
        s = self.fake_server(1)
        # before hello; on TCP
        c = self.ipc_client(s)
        c.send_frame({"type": "export", "gpu": "fake", "segment": 4096, "ipc": "00" * 128})
        h = self.expect_error(c, "bad_frame")
        self.assertIn("export before hello", h["message"])
        c.expect_closed()
        t = self.client(s)
        self.hello_ok(t, 0)
        t.send_frame({"type": "export", "gpu": "fake", "segment": 4096, "ipc": "00" * 128})
        h = self.expect_error(t, "bad_frame")
        self.assertIn("TCP", h["message"])
        t.expect_closed()
        # over shared memory: each lie refused, the connection stays
        c = self.ipc_client(s)
        c.hello_shm(0)
        for kw, pat in (({"gpu": "GPU-0000"}, r"names GPU GPU-0000; this server computes on fake"),
                        ({"ipc": "zz" * 128}, r"must be 256 hex digits"),
                        ({"ipc": "00" * 64}, r"must be 256 hex digits"),
                        ({"ipc": "00" * 128}, r"cannot open the trainer's export: .*not an IPC handle"),
                        ({"segment": 0}, r"export of 0 bytes"),
                        ({"segment": 2 * MIB}, r"cannot open the trainer's export: .*holds 1048576 bytes"),
                        # a claim far beyond the export (the server's kernels
                        # would read past it), checked against the memory
                        # opened, not against --max-shm or the handle's word
                        ({"segment": 64 << 30}, r"the exported allocation holds 1048576 bytes, 68719476736 "),
                        ({"segment": 2 * MIB, "ipc": (fake_handle(IPC_MEM, c.gpu_fd, 2 * MIB) +
                                                      fake_handle(IPC_EVENT, c.ev_fd, 4096)).hex()},
                         r"not a sealed memfd of 2097152 bytes")):
            h = c.export(**kw)
            self.assertEqual((h["type"], h.get("code")), ("error", "unsupported"), (kw, h))
            self.assertRegex(h["message"], pat)
        # GPU memory or an event that is not ordinary shared memory (a
        # hugetlbfs memfd: SIGBUS at the first touch where no huge page is
        # free), where the kernel makes one
        try:
            huge = os.memfd_create("psbench-test-huge", os.MFD_HUGETLB | os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            os.ftruncate(huge, 2 * MIB)
            fcntl.fcntl(huge, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        except OSError as e:
            print("hugetlbfs cases skipped: %s" % e, file=sys.stderr)
            huge = None
        if huge is not None:
            try:
                mem, ev = fake_handle(IPC_MEM, c.gpu_fd, c.gpu_bytes), fake_handle(IPC_EVENT, c.ev_fd, 4096)
                for ipc in ((fake_handle(IPC_MEM, huge, 2 * MIB) + ev).hex(),
                            (mem + fake_handle(IPC_EVENT, huge, 2 * MIB)).hex()):
                    h = c.export(ipc=ipc, segment=4096)
                    self.assertEqual((h["type"], h.get("code")), ("error", "unsupported"), h)
                    self.assertRegex(h["message"], r"is on hugetlbfs, not ordinary shared memory")
            finally:
                os.close(huge)
        # a handle of a descriptor this process does not have
        bad = (fake_handle(IPC_MEM, c.gpu_fd, c.gpu_bytes)[:16] + struct.pack("<i", 999) +
               fake_handle(IPC_MEM, c.gpu_fd, c.gpu_bytes)[20:]).hex() + fake_handle(IPC_EVENT, c.ev_fd, 4096).hex()
        h = c.export(ipc=bad)
        self.assertRegex(h["message"], r"has no descriptor 999")
        self.assertEqual(c.export()["type"], "export")
        h = c.export()
        self.assertEqual((h["type"], h.get("code")), ("error", "unsupported"))
        self.assertIn("already", h["message"])
        # a server that offers none: --gpu-share 0, or a CPU device
        for extra in (["--device", "fake-cuda", "--gpu-share", "0"], ["--device", "cpu"]):
            s2 = self.reg.server(trainers=1, extra=extra)
            c = self.ipc_client(s2)
            w = c.hello_shm(0)
            self.assertNotIn("gpu", w)
            h = c.export()
            self.assertEqual((h["type"], h.get("code")), ("error", "unsupported"), (extra, h))
            self.assertIn("offered no CUDA IPC", h["message"])

    def test_device_offsets_checked(self):
        """A push naming `dev` is checked against what the trainer exported
        before the GPU reads a byte: outside it, off a float boundary, with
        no export, sparse, or with `at` too: bad_frame, closed; more than
        --max-payload: too_large. `dev` on any other frame: bad_frame."""
        s = self.fake_server(1, extra=["--max-payload", "65536"])
        cases = (
            (True, 1 * MIB, 1, None, r"push names bytes 1048576\.\.1048580 of 1048576 bytes of exported GPU"),
            (True, 1 * MIB - 8, 4, None, r"push names bytes"),
            (True, 2, 4, None, r"not on a float boundary"),
            (True, (1 << 64) - 4, 2, None, r"push names bytes"),
            (False, 0, 4, None, r"without an export"),
            (True, 0, 4, {"at": 0}, r"names dev and also at"),
            (True, 0, 4, {"layout": "sparse", "rows": 4, "cols": 1, "nnz": 1}, r"dense, with a count"),
        )
        for export, dev, count, extra, pat in cases:
            c = self.ipc_client(s)
            c.hello_shm(0)
            if export:
                self.assertEqual(c.export()["type"], "export")
            c.push_dev(0, 0, count, dev, extra)
            h = self.expect_error(c, "bad_frame")
            self.assertRegex(h["message"], pat, (dev, count, extra))
            c.expect_closed()
            c.close()
        c = self.ipc_client(s)
        c.hello_shm(0)
        c.export()
        c.push_dev(0, 0, 65536, 0)
        h = self.expect_error(c, "too_large")
        c.close()
        c = self.ipc_client(s)
        c.hello_shm(0)
        c.send_frame({"type": "fetch", "dev": 0})
        h = self.expect_error(c, "bad_frame")
        self.assertIn("dev (a payload in GPU memory) is only for push", h["message"])
        c.close()
        # the server is fine: a good round by device offset
        c = self.ipc_client(s)
        c.hello_shm(0)
        c.export()
        c.put_gpu(0, [1.5, 2.5, -3.0])
        c.record(complete=True)
        c.push_dev(0, 0, 3, 0)
        h, p = c.result()
        self.assertEqual(parse_dense(p), [1.5, 2.5, -3.0])

    def test_narrow_pushes_by_device_offset(self):
        """Narrow pushes (--compress; docs/protocol.md, "Narrow pushes") by
        CUDA IPC: named by `dev` at any 2-byte offset of the exported
        memory, count x 2 bytes checked against the export, folded on the
        GPU from where they lie — the first kept as it came, the second
        added to it, a third widened into the sum, the last's fold
        narrowed — and the mean, in the push's type, lent where the server
        wrote it. Four trainers in f16, two in bf16 (the pair's mean
        straight into the answer); exact values, so the mean is known."""
        for dtype, ntr in (("f16", 4), ("bf16", 2)):
            s = self.fake_server(ntr)
            cs = [self.ipc_client(s) for _ in range(ntr)]
            for r, c in enumerate(cs):
                w = c.hello_shm(r, extra={"dtype": dtype})
                self.assertEqual((w.get("gpu"), w.get("dtype")), ("fake", dtype), w)
                self.assertEqual(c.export()["type"], "export")
            n = 5000
            vals = [[float((i * (r + 3)) % 17) - 8.0 + 0.25 * r for i in range(n)] for r in range(ntr)]
            for rnd in range(2):
                for r, c in enumerate(cs):
                    at = 2 + 1024 * r  # not on a float boundary
                    b = narrow_bytes(dtype, vals[r])
                    c.gpu[at:at + len(b)] = b
                    c.record(complete=True)
                    c.push_dev(rnd, 0, n, at, {"dtype": dtype})
                want = narrow_bytes(dtype, [sum(v[i] for v in vals) / ntr for i in range(n)])
                got = [c.result() for c in cs]
                for h, p in got:
                    self.assertEqual((h.get("type"), h.get("dtype"), h.get("count")), ("result", dtype, n), h)
                    self.assertIn("dev", h)
                    self.assertEqual(p, want, (dtype, rnd))
                self.assertEqual(len({h["dev"] for h, _ in got}), 1)  # written once, read by all
            # its size is the narrow type's: count x 2 bytes against the export
            c = cs[0]
            c.push_dev(2, 0, (c.gpu_bytes - 2) // 2 + 1, 2, {"dtype": dtype})
            h = self.expect_error(c, "bad_frame")
            self.assertRegex(h["message"], r"push names bytes 2\.\.%d of %d" % (c.gpu_bytes + 2, c.gpu_bytes))
            c.expect_closed()
            for c in cs:
                c.close()
            rc, out, err = s.terminate_and_wait()
            self.assertEqual(rc, 0, err)
            self.assertRegex(out, r"CUDA IPC: %d pushes folded from trainers' GPU memory, %d result bytes read by "
                                  r"trainers from the server's, 2 results never copied to the host"
                             % (2 * ntr, 2 * ntr * 2 * n))
        # an odd offset, and a type the hello did not announce
        s = self.fake_server(1)
        c = self.ipc_client(s)
        c.hello_shm(0, extra={"dtype": "f16"})
        c.export()
        c.push_dev(0, 0, 4, 3, {"dtype": "f16"})
        h = self.expect_error(c, "bad_frame")
        self.assertIn("not on a 2-byte boundary", h["message"])
        c.close()
        c = self.ipc_client(s)
        c.hello_shm(0)
        c.export()
        c.push_dev(0, 0, 4, 0, {"dtype": "bf16"})
        h = self.expect_error(c, "unsupported")
        self.assertIn("announced no narrow type", h["message"])
        c.close()

    def test_trainer_lost_with_its_memory_open(self):
        """A trainer that vanishes after its push (its memory and event
        still open on the server) fails the bucket as on TCP (peer_lost to
        the others); the server unmaps it and serves the next round."""
        s = self.fake_server(2)
        a, b = self.ipc_client(s), self.ipc_client(s)
        a.hello_shm(0)
        b.hello_shm(1)
        a.export()
        b.export()
        a.put_gpu(0, [1.0] * 1024)
        a.record(complete=True)
        a.push_dev(0, 0, 1024, 0)
        time.sleep(0.2)
        maps_before = self.server_maps(s)
        b.close()
        h = self.expect_error(a, "peer_lost")
        # b's memory is unmapped once the device is past its folds.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.server_maps(s) >= maps_before:
            time.sleep(0.05)
        self.assertLess(self.server_maps(s), maps_before)
        c = self.ipc_client(s)
        c.hello_shm(1)
        c.export()
        for t in (a, c):
            t.put_gpu(0, [2.0] * 8)
            t.record(complete=True)
            t.push_dev(1, 0, 8, 0)
        for t in (a, c):
            h, p = t.result()
            self.assertEqual(parse_dense(p), [2.0] * 8)

    def server_maps(self, s):
        with open("/proc/%d/maps" % s.pid) as f:
            return sum(1 for line in f if "psbench-test" in line)


class MasterJob(object):
    """A master's job with its nodes started by hand (psb.PsbTestCase.node;
    a mixin of psb.PsbTestCase's)."""

    # Its masters' flags (psb.PsbTestCase.master).
    master_kw = dict(rpc_timeout=30)

    def run_job(self, job, server_device=SDEV, trainer_device=TDEV, server_extra=(), trainer_extra=()):
        """(results.json, the server's stdout, the trainers' stderr)."""
        out = os.path.join(self.reg.workdir, "out-%d" % len(os.listdir(self.reg.workdir)))
        m = self.master(*job, out=out)
        s = self.node(m, "psbench-server", server_device, "server", server_extra)
        trainers = [self.node(m, "psbench-trainer", trainer_device, "trainer", trainer_extra) for _ in range(2)]
        self.assertEqual(m.wait(240), 0, m.describe())
        logs = []
        for t in trainers:
            self.assertEqual(t.wait(30), 0, t.describe())
            logs.append(t.stderr())
        self.assertEqual(s.wait(30), 0, s.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done", res.get("error"))
        return res, s.stdout(), logs


class Trainers(MasterJob, psb.PsbTestCase):
    """Real trainers on the fake GPU, their nodes started by hand."""

    JOB = ("--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "0", "--ncudaserver", "1", "--epochs", "2")

    def digests(self, res):
        d = {t["final_params_sha256"] for t in res["trainers"]}
        self.assertEqual(len(d), 1, res["trainers"])
        return d.pop()

    def ipc_pushes(self, server_out):
        m = re.search(r"CUDA IPC: (\d+) pushes folded from trainers' GPU memory, (\d+) result bytes read by trainers "
                      r"from the server's, (\d+) results never copied", server_out)
        self.assertTrue(m, server_out)
        self.assertLessEqual(int(m.group(3)) * 2, int(m.group(1)))
        return int(m.group(1)), int(m.group(2))

    @unittest.skipIf(psb.ASAN, "four training runs: the release pass's (see psb.ASAN above)")
    def test_rpc_hook_over_cuda_ipc_equals_tcp(self):
        """Every dense bucket by CUDA IPC (the start line, results.json's
        links, the server's count: every push), the same bits as the run
        over TCP, for average and average-batch servers."""
        for kind in ((), ("--server", "AverageBatchParameterServer")):
            res, sout, logs = self.run_job(self.JOB + kind)
            for log in logs:
                self.assertRegex(log, r"trainer \d: transport: server 0 shared memory \+ CUDA IPC")
                self.assertRegex(log, r"rpc_hook: \d+ bucket\(s\) handed over in device memory, 0 through pinned")
            for t in res["trainers"]:
                self.assertEqual([(l["transport"], l["cuda_ipc"], l["cuda_ipc_note"]) for l in t["links"]],
                                 [("shm", True, None)], t["links"])
                # opening the server's memory: a first use, timed apart from every step
                self.assertIsInstance(t["links"][0]["cuda_ipc_open_ms"], float, t["links"])
                self.assertGreaterEqual(t["links"][0]["cuda_ipc_open_ms"], 0)
            self.assertRegex(sout, r"CUDA IPC opens: 2 trainers' exports opened in [0-9.]+ ms \([0-9.]+ ms each\), "
                                   r"each once, as its connection began")
            pushes, lent = self.ipc_pushes(sout)
            self.assertGreater(pushes, 0)
            self.assertGreater(lent, 0)
            # every result read on the GPU only: none copied to the host
            self.assertRegex(sout, r", %d results never copied to the host" % (pushes // 2))
            tcp, tout, tlogs = self.run_job(self.JOB + kind, server_extra=("--transport", "tcp"),
                                            trainer_extra=("--transport", "tcp"))
            self.assertEqual(self.ipc_pushes(tout), (0, 0))
            for t in tcp["trainers"]:
                self.assertEqual([(l["transport"], l["cuda_ipc"], l["cuda_ipc_open_ms"]) for l in t["links"]],
                                 [("tcp", False, None)])
            self.assertNotIn("CUDA IPC opens", tout)
            self.assertEqual(self.digests(res), self.digests(tcp), kind)
            self.assertEqual([t["loss_per_epoch"] for t in res["trainers"]],
                             [t["loss_per_epoch"] for t in tcp["trainers"]])

    @unittest.skipIf(psb.ASAN, "three training runs: the release pass's (see psb.ASAN above)")
    def test_narrow_rpc_hook_over_cuda_ipc_equals_tcp(self):
        """--compress bf16 (docs/protocol.md, "Narrow pushes"): every dense
        bucket narrowed on the GPU into the gradients' shadow and pushed by
        CUDA IPC, every mean lent in bf16 (2 bytes an element read from the
        server's memory) and widened on the GPU — the same bits as the run
        over TCP, where the trainer narrows and widens on the host; half
        the bytes lent of the same job in f32."""
        job = self.JOB + ("--compress", "bf16")
        res, sout, logs = self.run_job(job)
        for log in logs:
            self.assertRegex(log, r"rpc_hook: \d+ bucket\(s\) handed over in device memory, 0 through pinned")
        for t in res["trainers"]:
            self.assertEqual(t["compress"], "bf16")
            self.assertEqual([(l["transport"], l["cuda_ipc"]) for l in t["links"]], [("shm", True)], t["links"])
        pushes, lent = self.ipc_pushes(sout)
        self.assertGreater(pushes, 0)
        self.assertRegex(sout, r", %d results never copied to the host" % (pushes // 2))
        tcp, tout, _ = self.run_job(job, server_extra=("--transport", "tcp"), trainer_extra=("--transport", "tcp"))
        self.assertEqual(self.ipc_pushes(tout), (0, 0))
        self.assertEqual(self.digests(res), self.digests(tcp))
        # the lent means are narrow: half the bytes of the same job's in f32
        _, f32out, _ = self.run_job(self.JOB)
        self.assertEqual((pushes * 2, lent * 2), (self.ipc_pushes(f32out)[0] * 2, self.ipc_pushes(f32out)[1]))

    @unittest.skipIf(psb.ASAN, "two training runs: the release pass's (see psb.ASAN above)")
    def test_no_cuda_ipc_where_the_server_offers_none(self):
        """--gpu-share 0 on the server: shared memory with pinned staging,
        the same bits; a CPU server likewise (no offer: no note)."""
        res, sout, logs = self.run_job(self.JOB, server_extra=("--gpu-share", "0"))
        self.assertEqual(self.ipc_pushes(sout), (0, 0))
        for t in res["trainers"]:
            self.assertEqual([(l["transport"], l["cuda_ipc"]) for l in t["links"]], [("shm", False)])
        for log in logs:
            self.assertRegex(log, r"transport: server 0 shared memory\n")
        cpu, cout, _ = self.run_job(self.JOB, server_device="cpu")
        self.assertNotIn("CUDA IPC", cout)
        self.assertEqual(self.digests(res), self.digests(cpu))

    def test_trainer_killed_mid_run(self):
        """A CUDA trainer killed while it exchanges buckets by CUDA IPC: the
        run ends naming it; the server ends by itself with the run's reason
        (its peers unmapped, its exit lines written: no crash, no hang)."""
        out = os.path.join(self.reg.workdir, "killed")
        # One warm-up step, then a timed pass far longer than the test.
        m = self.master(*(self.JOB[:-2] + ("--warmup-steps", "1", "--steps", "5000")), out=out)
        s = self.node(m, "psbench-server", SDEV, "server")
        t0 = self.node(m, "psbench-trainer", TDEV, "trainer")
        t1 = self.node(m, "psbench-trainer", TDEV, "trainer")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "CUDA IPC" not in t1.stderr():
            time.sleep(0.05)
        time.sleep(0.5)
        t1.signal(signal.SIGKILL)
        self.assertNotEqual(m.wait(120), 0)
        self.assertRegex(m.stderr() + m.stdout(), r"trainer \d+ \(.*\)")
        t0.wait(60)
        self.assertEqual(s.wait(60), 1, s.describe())
        self.assertRegex(s.stderr(), r"the run failed: trainer \d+ .*disconnected")
        self.assertRegex(s.stdout(), r"CUDA IPC: [1-9]\d* pushes folded")

    def test_server_killed_mid_run(self):
        """The CUDA server killed while trainers read means in its GPU
        memory: the run ends naming it, every trainer ends by itself."""
        out = os.path.join(self.reg.workdir, "server-killed")
        # One warm-up step, then a timed pass far longer than the test.
        m = self.master(*(self.JOB[:-2] + ("--warmup-steps", "1", "--steps", "5000")), out=out)
        s = self.node(m, "psbench-server", SDEV, "server")
        ts = [self.node(m, "psbench-trainer", TDEV, "trainer") for _ in range(2)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "phase running" not in m.stderr() and m.alive():
            time.sleep(0.05)
        time.sleep(0.5)
        s.signal(signal.SIGKILL)
        self.assertNotEqual(m.wait(120), 0)
        self.assertRegex(m.stderr().strip().splitlines()[-1], r"server 0 .*disconnected")
        for t in ts:
            self.assertNotEqual(t.wait(60), 0, t.describe())
            self.assertNotIn("Sanitizer", t.stderr())

    def test_runs_keep_descriptors_and_mappings_flat(self):
        """Five runs of CUDA IPC trainers on one CUDA server (trainers come
        and go, the server stays): its descriptors and mappings after the
        last run are what they were after the second — every trainer's
        memory and event unmapped, nothing lent left behind."""
        m = self.master(*(self.JOB[:-1] + ("1", "--runs", "0")))
        s = self.node(m, "psbench-server", SDEV, "server")
        counts = {}
        for run in range(1, 6):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # run `run` waits for its trainers
                with urllib.request.urlopen(m.http + "/api/v1/status", timeout=10) as r:
                    st = json.load(r)
                if st["run"] == run and st["phase"] == "waiting":
                    break
                time.sleep(0.05)
            ts = [self.node(m, "psbench-trainer", TDEV, "trainer%d" % run) for _ in range(2)]
            for t in ts:
                self.assertEqual(t.wait(120), 0, t.describe())
                self.assertIn("+ CUDA IPC", t.stderr())
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and s.stderr().count("all trainers left") < run:
                time.sleep(0.05)
            self.assertEqual(s.stderr().count("all trainers left"), run, s.describe())
            # Shared mappings only (memfds: trainers' segments, their GPU
            # memory and events on the fake GPU, the server's own): the
            # allocators' anonymous mappings grow as they please (ASan's).
            # A closed trainer's are unmapped once the device's barrier
            # after its close completes: the fewest seen within a second.
            seen = []
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                with open("/proc/%d/maps" % s.pid) as f:
                    maps = sum(1 for line in f if "memfd:" in line)
                seen.append((len(os.listdir("/proc/%d/fd" % s.pid)), maps))
                time.sleep(0.05)
            counts[run] = min(seen)
        self.assertLessEqual(counts[5][0], counts[2][0], counts)
        self.assertLessEqual(counts[5][1], counts[2][1], counts)
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(30), 0, m.describe())
        self.assertEqual(s.wait(30), 0, s.describe())
        self.assertRegex(s.stdout(), r"CUDA IPC: [1-9]\d* pushes folded")


class Synthetic(MasterJob, psb.PsbTestCase):
    """The Synthetic trainer on the fake GPU: its ramp in exported GPU
    memory, pushes by device offset, results read in the server's GPU
    memory and checked whole there (every element compared with the
    expected mean by a kernel; only the first that differs comes back).
    The first two tests take $PSBENCH_TRAINER_DEVICE and
    $PSBENCH_SERVER_DEVICE (gpu_cuda_ipc runs them on a GPU); the wrong
    mean needs the fake GPU's handles."""

    # A mean under 1 KiB comes on the socket (the server's choice: it costs
    # less than a kernel), checked on the host; the others on the GPU.
    SIZES = [17, 2048, 2049, 70000]
    ON_GPU = [n for n in SIZES if n * 4 >= 1024]

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.model_cfg = os.path.join(self.reg.workdir, "models.json")
        with open(self.model_cfg, "w") as f:
            json.dump({"Sizes": {"model_class": "Synthetic", "configurations": {"bucket_sizes": self.SIZES}}}, f)

    def server_counts(self, out):
        """(pushes in, pushes folded from trainers' GPU memory, results never
        copied to the host) from the server's exit lines (0s: no CUDA IPC line)."""
        pushes = int(re.search(r"psbench-server \d+: (\d+) pushes in", out).group(1))
        m = re.search(r"CUDA IPC: (\d+) pushes folded from trainers' GPU memory, \d+ result bytes read by trainers "
                      r"from the server's, (\d+) results never copied", out)
        return pushes, int(m.group(1)) if m else 0, int(m.group(2)) if m else 0

    def on_gpu(self, log):
        return [int(a) for a in re.findall(r"synthetic: (\d+) results over CUDA IPC checked whole on the GPU", log)]

    def test_job_over_cuda_ipc_and_over_tcp(self):
        """A master's job, 2 fake-cuda trainers and a fake-cuda server:
        every push by CUDA IPC (the server's count is all of them), every
        result of 1 KiB or more read and checked on the GPU, the small one
        on the socket in the same batches; the same job over TCP passes
        with no CUDA IPC, every result checked on the host."""
        job = ("--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "0", "--ncudaserver", "1", "--epochs", "2",
               "--model", "Sizes", "--model-config-path", self.model_cfg)
        res, sout, logs = self.run_job(job)
        pushes, ipc, never = self.server_counts(sout)
        self.assertGreater(pushes, 0, sout)
        self.assertEqual(ipc, pushes, sout)
        # every mean of 1 KiB or more stayed on the GPU
        self.assertEqual(never * 2 * len(self.SIZES), pushes * len(self.ON_GPU), sout)
        for t, log in zip(res["trainers"], logs):
            self.assertEqual([(l["transport"], l["cuda_ipc"]) for l in t["links"]], [("shm", True)], t["links"])
            self.assertIn("every result over CUDA IPC checked whole on the GPU", log)
            passes = self.on_gpu(log)
            self.assertTrue(passes, log)
            for results in passes:
                self.assertGreater(results, 0, log)
                self.assertEqual(results % len(self.ON_GPU), 0, log)
        tcp, tout, tlogs = self.run_job(job, server_extra=("--transport", "tcp"),
                                        trainer_extra=("--transport", "tcp"))
        self.assertEqual(self.server_counts(tout)[1:], (0, 0), tout)
        for t, log in zip(tcp["trainers"], tlogs):
            self.assertEqual([(l["transport"], l["cuda_ipc"]) for l in t["links"]], [("tcp", False)])
            self.assertEqual(self.on_gpu(log), [], log)

    def test_standalone_trainers(self):
        """psbench-trainer --model synthetic --device fake-cuda by hand (as
        bench/server_throughput.sh starts them): CUDA IPC over shm, its
        results checked on the GPU; --sparse stays off the GPU (sparse
        pushes never travel by CUDA IPC)."""
        s = self.reg.server(trainers=2, extra=["--device", SDEV])
        ts = [self.reg.trainer(s, r, buckets=3, floats=5000, batches=4,
                               extra=["--device", TDEV, "--transport", "shm"]) for r in range(2)]
        for t in ts:
            self.assertEqual(t.wait(60), 0, t.describe())
            self.assertIn("every result checked (12 of them over CUDA IPC, on the GPU)", t.stdout())
            self.assertIn(": shared memory + CUDA IPC", t.stderr())
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(self.server_counts(out), (24, 24, 12), out)
        s = self.reg.server(trainers=2, extra=["--device", SDEV])
        ts = [self.reg.trainer(s, r, buckets=2, floats=640, batches=3, sparse=True,
                               extra=["--device", TDEV, "--transport", "shm"]) for r in range(2)]
        for t in ts:
            self.assertEqual(t.wait(60), 0, t.describe())
            self.assertNotIn("CUDA IPC", t.stderr())
            self.assertRegex(t.stdout(), r"every result checked\n")
        rc, out, err = s.terminate_and_wait()
        self.assertEqual(self.server_counts(out), (12, 0, 0), out)

    def test_wrong_mean_caught_on_the_gpu(self):
        """A real synthetic trainer (rank 0) and rank 1 by hand, whose push
        is its ramp window but for one element — near either end, in the
        middle, or NaN: the trainer fails naming the bucket, the element
        and the value of the mean it checked on the GPU. Without the fault,
        it passes. The same with --compress fp16: both push f16 by CUDA
        IPC (the trainer's narrowed on the GPU), the f16 mean is widened
        on the GPU and checked there."""
        n = 5000
        cases = [("f32", bad) for bad in (None, 3, n // 2 + 1, n - 3, "nan")]
        cases += [("f16", bad) for bad in (None, 3, n - 3, "nan")]  # --compress: widened on the GPU to compare
        for dtype, bad in cases:
            with self.subTest(dtype=dtype, bad=bad):
                s = self.reg.server(trainers=2, extra=["--device", "fake-cuda"])
                narrow = ["--compress", "fp16"] if dtype == "f16" else []
                t = self.reg.trainer(s, 0, buckets=1, floats=n, batches=1,
                                     extra=["--device", "fake-cuda", "--transport", "shm"] + narrow)
                c = IpcClient(s.port)
                self._clients.append(c)
                w = c.hello_shm(1, extra={"dtype": dtype} if narrow else None)
                self.assertEqual(w.get("dtype", "f32"), dtype, w)
                self.assertEqual(c.export()["type"], "export")
                # synthetic.c: rank 1's push of batch 0 bucket 0 starts at ramp phase 7
                vals = [float(((7 + i) & 1023) - 512) for i in range(n)]
                if bad == "nan":
                    vals[1000] = float("nan")
                elif bad is not None:
                    vals[bad] += 2.0
                if narrow:  # the ramp's values are exact in f16
                    b = narrow_bytes("f16", vals)
                    c.gpu[2:2 + len(b)] = b
                else:
                    c.put_gpu(0, vals)
                c.record(complete=True)
                c.push_dev(0, 0, n, 2 if narrow else 0, {"dtype": dtype})
                h, _ = c.result()
                self.assertEqual(h.get("type"), "result", h)
                if bad is None:
                    self.assertEqual(t.wait(60), 0, t.describe())
                    self.assertIn("1 of them over CUDA IPC", t.stdout())
                else:
                    self.assertEqual(t.wait(60), 1, t.describe())
                    self.assertRegex(t.stderr(), r"wrong mean in batch 0 bucket 0 element %d: got %s, expected .* "
                                                 r"\(a result over CUDA IPC, checked on the GPU\)" %
                                     (1000 if bad == "nan" else bad, "nan" if bad == "nan" else ".*"))
                c.close()
                s.terminate_and_wait()


if __name__ == "__main__":
    psb.main()
