"""What a peer can make the master hold or do before it has the token
(issue 27): its memory, its descriptors, its CPU, its HTTP answers.

- Connections that declare huge control frames without registering are
  refused at the header: the master's memory stays bounded and returns,
  and a node with a real register still joins.
- Connections that have not registered are limited: the master keeps at
  most 64 of them (the rest wait in the backlog).
- Out of descriptors (a low RLIMIT_NOFILE it cannot raise), the master
  tells each node it cannot take why, at once; it neither spins (its CPU
  time over a second of exhaustion) nor floods its log, the HTTP API still
  answers (descriptors are kept for it), and once descriptors are free a
  node joins.
- An HTTP request with hundreds of query parameters is answered (414 with
  the reason), as is one within the limit (200).
- A node that registers with a master whose run is over is told so.

Each bound is checked by construction (counts, generous ceilings), never
by timing.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_master_limits.py
"""
import json
import os
import resource
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import http_get, http_json  # noqa: E402

MIB = 1 << 20


def proc_cpu_s(pid):
    """utime + stime of pid (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def ctl_frame(kind, body, token=None):
    data = json.dumps(body).encode()
    h = {"type": kind, "payload": len(data)}
    if token is not None:
        h["token"] = token
    return psb.encode_frame(h, data)


def read_frame(sock, timeout=10.0):
    """One control frame from sock: (header, body dict); raises psb.Closed
    on EOF."""
    c = psb.RawClient.__new__(psb.RawClient)
    c.sock, c.buf, c.closed = sock, b"", False
    h, p = c.recv_frame(timeout)
    return h, (json.loads(p) if p else {})


class MasterLimits(psb.PsbTestCase):

    # Its masters' flags (psb.PsbTestCase.master; m.ctl_addr its control
    # plane's (host, port)).
    master_kw = dict(ntrainer=1, nserver=1)

    def connect(self, m, timeout=10.0):
        s = socket.create_connection(m.ctl_addr, timeout=timeout)
        self.addCleanup(s.close)
        return s

    def register_server(self, m):
        """A node with a real register joins: `registered` comes back."""
        s = self.connect(m)
        s.sendall(ctl_frame("register", {"role": "server", "host": "fake", "device": "cpu",
                                         "listen_host": "127.0.0.1", "port": 9}))
        h, body = read_frame(s)
        self.assertEqual(h.get("type"), "registered", (h, body, m.describe()))
        return s

    def test_unregistered_big_frames_refused_at_the_header(self):
        m = self.master()
        base = psb.proc_status(m.pid, "VmRSS")
        socks = []
        for _ in range(25):
            s = self.connect(m)
            s.sendall(psb.encode_frame({"type": "register", "payload": 16 * MIB}, auto_len=False))
            socks.append(s)
        # Push as much of the declared payloads as the master takes.
        chunk = b"x" * MIB
        for s in socks:
            s.setblocking(False)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for s in socks:
                try:
                    s.send(chunk)
                except (BlockingIOError, OSError):
                    pass
            time.sleep(0.01)
        peak = psb.proc_status(m.pid, "VmRSS")
        # A bound by construction: 25 x 16 MiB held would be 400 MiB.
        self.assertLess(peak - base, 64 * 1024, "RSS grew from %d to %d kB" % (base, peak))
        # Each connection was told why before it was closed.
        for s in socks:
            s.setblocking(True)
            s.settimeout(10)
            h, body = read_frame(s)
            self.assertEqual((h.get("type"), body.get("status")), ("stop", "refused"), (h, body))
            self.assertIn("first message must be a register of at most", body.get("reason"))
            s.close()
        time.sleep(0.5)
        self.assertLess(psb.proc_status(m.pid, "VmRSS") - base, 64 * 1024)
        self.assertTrue(m.alive(), m.describe())
        self.register_server(m)

    def test_unregistered_connections_are_limited(self):
        m = self.master()
        base = open_fds(m.pid)
        socks = [self.connect(m) for _ in range(100)]
        time.sleep(1.0)
        held = open_fds(m.pid) - base
        self.assertLessEqual(held, 64, "the master holds %d connections that never registered" % held)
        self.assertGreaterEqual(held, 32, "connections below the limit are taken (%d)" % held)
        for s in socks:
            s.close()
        # Once they go, a node joins (at once: nothing is left waiting).
        deadline = time.monotonic() + 10
        while open_fds(m.pid) > base and time.monotonic() < deadline:
            time.sleep(0.1)
        self.register_server(m)
        self.assertIn("have not registered yet", m.stderr())

    def test_out_of_descriptors(self):
        limit = 64

        def low_nofile():
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        m = self.master(preexec=low_nofile)
        lines0 = len(m.stderr().splitlines())
        socks = []
        refused = []
        for _ in range(2 * limit):
            s = self.connect(m, timeout=5.0)
            socks.append(s)
        # Those the master cannot keep are told why at once.
        deadline = time.monotonic() + 3.0
        waiting = list(socks)
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select(waiting, [], [], 0.2)
            for s in ready:
                waiting.remove(s)
                try:
                    h, body = read_frame(s, timeout=2.0)
                except (socket.timeout, psb.Closed):
                    continue
                refused.append(body.get("reason"))
        self.assertTrue(refused, "no connection was refused:\n" + m.describe())
        for why in refused:
            self.assertIn("the master is out of file descriptors (limit %d)" % limit, why)
            self.assertIn("ulimit -n", why)
        # More arrive while it is full: no spinning, no flood of lines.
        cpu0 = proc_cpu_s(m.pid)
        for _ in range(20):
            try:
                socks.append(self.connect(m, timeout=2.0))
            except OSError:
                pass
        time.sleep(1.0)
        self.assertLess(proc_cpu_s(m.pid) - cpu0, 0.5, "the master spins while out of descriptors")
        self.assertLess(len(m.stderr().splitlines()) - lines0, 20, m.stderr()[-3000:])
        # The HTTP API still answers (descriptors are kept for it).
        self.assertEqual(http_get(m.http + "/healthz")[:3:2], (200, "ok"))
        for s in socks:
            s.close()
        time.sleep(0.5)
        self.assertEqual(http_get(m.http + "/healthz")[:3:2], (200, "ok"))
        self.register_server(m)
        self.assertTrue(m.alive(), m.describe())

    def test_out_of_descriptors_taken_by_http_clients(self):
        """Descriptors taken by HTTP clients, not nodes: accept() itself
        fails (EMFILE) and a node is refused on the spare descriptor with
        the reason, at once; nothing spins."""
        limit = 64

        def low_nofile():
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        m = self.master(preexec=low_nofile)
        host, port = m.http[len("http://"):].rsplit(":", 1)
        idle = []
        for _ in range(limit):  # idle HTTP connections: MHD holds each (5 s)
            try:
                s = socket.create_connection((host, int(port)), timeout=2)
            except OSError:
                break
            self.addCleanup(s.close)
            idle.append(s)
        time.sleep(0.3)
        cpu0 = proc_cpu_s(m.pid)
        node = self.connect(m)
        h, body = read_frame(node, timeout=5)
        self.assertEqual((h.get("type"), body.get("status")), ("stop", "refused"), body)
        self.assertIn("the master is out of file descriptors (limit %d)" % limit, body.get("reason"))
        time.sleep(1.0)
        self.assertLess(proc_cpu_s(m.pid) - cpu0, 0.5, "the master spins while out of descriptors")
        for s in idle:
            s.close()
        time.sleep(0.5)
        self.register_server(m)

    def test_http_answers_many_query_parameters(self):
        m = self.master()
        host, port = m.http[len("http://"):].rsplit(":", 1)

        def get(path):
            """The answer to a GET as a browser sends it (keep-alive): its
            head and body, or "" when the master closed without one."""
            s = socket.create_connection((host, int(port)), timeout=10)
            try:
                s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
                data = b""
                while b"\r\n\r\n" not in data:
                    d = s.recv(65536)
                    if not d:
                        return data.decode("utf-8", "replace")
                    data += d
                head, body = data.split(b"\r\n\r\n", 1)
                length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                while length and len(body) < length[0]:
                    d = s.recv(65536)
                    if not d:
                        break
                    body += d
                return (head + b"\r\n\r\n" + body).decode("utf-8", "replace")
            except socket.timeout:
                return ""
            finally:
                s.close()
        for n in (450, 500, 1000, 2000):
            q = "&".join("a%d=%d" % (i, i) for i in range(n))
            r = get("/healthz?" + q)
            self.assertTrue(r.startswith("HTTP/1.1 414"), (n, r[:200]))
            self.assertIn("too many query parameters: at most 64", r)
        r = get("/healthz?" + "&".join("a%d=1" % i for i in range(64)))
        self.assertTrue(r.startswith("HTTP/1.1 200"), r[:200])
        self.assertTrue(r.endswith("ok"), r[-100:])

    def test_register_after_the_run_is_told_it_is_over(self):
        """A master whose run has ended (here: failed, lingering) tells a
        node that registers the run is over, not that it "has already
        started"."""
        m = self.master(linger=psb.LINGER_S)
        # A server whose register is taken, then gone: the run fails.
        s = self.register_server(m)
        s.close()
        st = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = http_json(m.http + "/api/v1/status")
            if st["phase"] == "failed":
                break
            time.sleep(0.05)
        self.assertEqual(st["phase"], "failed", st)
        t = self.connect(m)
        t.sendall(ctl_frame("register", {"role": "trainer", "host": "late", "device": "cpu"}))
        h, body = read_frame(t)
        self.assertEqual((h.get("type"), body.get("status")), ("stop", "refused"), body)
        self.assertIn("the run is over (failed: server 0 (fake) disconnected)", body.get("reason"))
        self.assertNotIn("already started", body.get("reason"))
        psb.end_lingering(self, m, 1)


if __name__ == "__main__":
    psb.main()
