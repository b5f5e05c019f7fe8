"""Every wait for a peer's first answer is bounded, and a peer that is not
psbench is named as such (issue 19, "a wait with no deadline").

A trainer or a server pointed with --master at something that is not a
psbench master — the master's own HTTP port, a TLS server, a peer that
answers garbage, a peer that accepts and never answers, a psbench server's
data port — fails within --connect-timeout (and a little slack) with one
line naming the address and what it looked like. The same for a trainer
pointed with --server at something that is not a psbench server.

The stand-in peers are tiny Python socket servers run by the test.

Run: PSBENCH_BIN=build /usr/bin/python3 tests/integration/test_no_deadline.py
"""
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

CONNECT_TIMEOUT = 3
SLACK = 4.0  # start-up, the HTTP probe (at most 2 s), exit


class FakePeer(object):
    """A listening socket on 127.0.0.1 whose accepted connections get
    `answer` (bytes) once the client's first bytes arrive, then are closed
    (close_after) or held open; answer None: never answer."""

    def __init__(self, answer, close_after=True):
        self.answer = answer
        self.close_after = close_after
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((psb.HOST, 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.addr = "%s:%d" % (psb.HOST, self.port)
        self.held = []
        self.stopping = False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stopping:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.held.append(c)
            if self.answer is None:
                continue
            try:
                c.settimeout(5)
                c.recv(65536)
                c.sendall(self.answer)
                if self.close_after:
                    c.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self):
        self.stopping = True
        try:
            self.ls.close()
        except OSError:
            pass
        for c in self.held:
            try:
                c.close()
            except OSError:
                pass


class QuietHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


# A TLS server's answer to a first byte that is no TLS record: a fatal
# alert (record type 21, TLS 1.2, alert "decode_error").
TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x32"
# An SMTP greeting: a protocol in which the server speaks first.
GARBAGE = b"220 mail.example.org ESMTP ready\r\n"


class NoDeadline(psb.PsbTestCase):

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.peers = []
        self.addCleanup(self.close_peers)

    def close_peers(self):
        for p in self.peers:
            p.close()

    def peer(self, answer, close_after=True):
        p = FakePeer(answer, close_after)
        self.peers.append(p)
        return p

    def http_server(self):
        """A Python HTTP server on an ephemeral port (stopped at the end)."""
        srv = ThreadingHTTPServer((psb.HOST, 0), QuietHandler)
        srv.daemon_threads = True
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()

        def stop():
            srv.shutdown()
            srv.server_close()
        self.addCleanup(stop)
        return "%s:%d" % (psb.HOST, srv.server_address[1])

    # Its masters' flags (psb.PsbTestCase.master).
    master_kw = dict(ntrainer=1, nserver=1)

    def run_node_to_end(self, args, limit):
        """Run a node to its end: (rc, stderr, seconds). Fails the test when
        it is still running after `limit` seconds (the wait had no
        deadline)."""
        t0 = time.monotonic()
        p = self.reg.start(args, name=os.path.basename(args[0]))
        try:
            rc = p.wait(limit)
        except subprocess.TimeoutExpired:
            self.fail("still waiting after %.0f s (--connect-timeout %d):\n%s" %
                      (limit, CONNECT_TIMEOUT, p.describe()))
        return rc, p.stderr(), time.monotonic() - t0

    def trainer_master(self, addr):
        return self.run_node_to_end([psb.bin_path("psbench-trainer"), "--master", addr, "--connect-timeout",
                              str(CONNECT_TIMEOUT)], CONNECT_TIMEOUT + SLACK)

    def server_master(self, addr):
        return self.run_node_to_end([psb.bin_path("psbench-server"), "--master", addr, "--listen", "127.0.0.1:0",
                              "--connect-timeout", str(CONNECT_TIMEOUT)], CONNECT_TIMEOUT + SLACK)

    def trainer_server(self, addr):
        return self.run_node_to_end([psb.bin_path("psbench-trainer"), "--server", addr, "--rank", "0", "--model",
                              "synthetic", "--buckets", "1", "--bucket-floats", "10", "--batches", "1",
                              "--connect-timeout", str(CONNECT_TIMEOUT)], CONNECT_TIMEOUT + SLACK)

    def assert_gave_up(self, result, want, what):
        rc, err, took = result
        self.assertNotEqual(rc, 0, "%s: %s" % (what, err))
        self.assertIn(want, psb.last_line(err), "%s:\n%s" % (what, err))
        self.assertIsNone(psb.sanitizer_report(err), err)
        return took

    # ---- --master at the master's own HTTP port ------------------------------

    def test_trainer_master_at_http_port(self):
        m = self.master()
        addr = m.http[len("http://"):].rstrip("/")
        took = self.assert_gave_up(self.trainer_master(addr),
                          "%s is not a psbench master (it answered like an HTTP server)" % addr, "trainer")
        self.assertLess(took, CONNECT_TIMEOUT + SLACK)
        self.assertTrue(m.alive(), m.describe())

    def test_server_master_at_http_port(self):
        m = self.master()
        addr = m.http[len("http://"):].rstrip("/")
        self.assert_gave_up(self.server_master(addr),
                   "%s is not a psbench master (it answered like an HTTP server)" % addr, "server")

    # ---- --master at peers that answer something else at once ---------------

    def test_tls_peer(self):
        p = self.peer(TLS_ALERT)
        want = "%s is not a psbench master (it answered with TLS)" % p.addr
        took = self.assert_gave_up(self.trainer_master(p.addr), want, "trainer")
        self.assertLess(took, CONNECT_TIMEOUT, "named at once, not after the timeout")
        took = self.assert_gave_up(self.server_master(p.addr), want, "server")
        self.assertLess(took, CONNECT_TIMEOUT, "named at once, not after the timeout")

    def test_garbage_peer(self):
        p = self.peer(GARBAGE)
        want = "%s is not a psbench master (it answered with bytes that are not psbench's protocol)" % p.addr
        took = self.assert_gave_up(self.trainer_master(p.addr), want, "trainer")
        self.assertLess(took, CONNECT_TIMEOUT)
        took = self.assert_gave_up(self.server_master(p.addr), want, "server")
        self.assertLess(took, CONNECT_TIMEOUT)

    def test_http_peer_that_answers(self):
        # An HTTP server that answers whatever it is sent, at once.
        p = self.peer(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        want = "%s is not a psbench master (it answered like an HTTP server)" % p.addr
        took = self.assert_gave_up(self.trainer_master(p.addr), want, "trainer")
        self.assertLess(took, CONNECT_TIMEOUT)

    def test_psbench_server_port_as_master(self):
        # A psbench server's data port answers the register with an error
        # frame: psbench, but not the control plane.
        s = self.reg.server(trainers=1)
        want = "%s is not a psbench master" % s.addr
        self.assert_gave_up(self.trainer_master(s.addr), want, "trainer")
        rc, err, _ = self.server_master(s.addr)
        self.assert_gave_up((rc, err, 0), want, "server")
        self.assertIn("data port", psb.last_line(err))

    # ---- --master at a peer that accepts and never answers --------------------

    def test_silent_peer(self):
        p = self.peer(None)
        want = ("%s accepted the connection but did not answer within %d s: is it a psbench master?" %
                (p.addr, CONNECT_TIMEOUT))
        took = self.assert_gave_up(self.trainer_master(p.addr), want, "trainer")
        self.assertGreaterEqual(took, CONNECT_TIMEOUT - 0.5)
        self.assert_gave_up(self.server_master(p.addr), want, "server")

    # ---- a trainer's --server -------------------------------------------------

    def test_trainer_server_at_http_port(self):
        addr = self.http_server()
        self.assert_gave_up(self.trainer_server(addr),
                   "%s is not a psbench server (it answered like an HTTP server)" % addr, "trainer")

    def test_trainer_server_at_tls_and_garbage(self):
        for answer, what in ((TLS_ALERT, "with TLS"), (GARBAGE, "with bytes that are not psbench's protocol")):
            p = self.peer(answer)
            took = self.assert_gave_up(self.trainer_server(p.addr),
                              "%s is not a psbench server (it answered %s)" % (p.addr, what), "trainer")
            self.assertLess(took, CONNECT_TIMEOUT)

    def test_trainer_server_silent(self):
        p = self.peer(None)
        self.assert_gave_up(self.trainer_server(p.addr),
                   "%s accepted the connection but did not answer within %d s: is it a psbench server?" %
                   (p.addr, CONNECT_TIMEOUT), "trainer")

    def test_real_master_still_joins(self):
        """The bounded first answer does not get in the way of a real master
        that waits for its servers before it assigns a trainer: the trainer
        registers, is acknowledged at once, and waits for its assignment
        longer than --connect-timeout."""
        m = self.master()
        tr = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--connect-timeout", "1"],
                            name="trainer")
        time.sleep(2.5)  # no server yet: the trainer waits for its assignment
        self.assertTrue(tr.alive(), tr.describe())
        m.signal(15)
        m.wait(20)
        tr.wait(20)


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
