"""A server out of file descriptors refuses further trainers with a clear
error instead of leaving them stalled until their timeouts (issue 19).

The server runs with a low RLIMIT_NOFILE (soft = hard, so it cannot raise
it) and more trainers connect than it has descriptors for: those that fit
are welcomed, the others get `error` with code `resources` naming the
server and its limit, at once. A descriptor given back (a trainer leaves)
lets the next one in. With a master, the server reports it on its control
link and the master fails the run naming the server.

Run: PSBENCH_BIN=build /usr/bin/python3 tests/integration/test_fd_limit.py
"""
import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import Master  # noqa: E402

LIMIT = 16
CLIENTS = 24  # more than LIMIT: some must be refused


def low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


class FdLimit(psb.PsbTestCase):

    def connect_many(self, port, n):
        """Open n connections, each saying hello as its own rank; returns
        [(client, answer header)] where the answer is None if nothing came
        within 3 s (a stalled trainer)."""
        out = []
        for r in range(n):
            c = self.client(port, timeout=3.0)
            try:
                h, _ = c.hello(r, timeout=3.0)
            except socket.timeout:
                h = None
            except psb.Closed:
                h = {"type": "closed"}
            out.append((c, h))
        return out

    def check_refused(self, answers):
        welcomed = [h for _, h in answers if h and h.get("type") == "welcome"]
        refused = [h for _, h in answers if h and h.get("type") == "error"]
        stalled = [i for i, (_, h) in enumerate(answers) if h is None]
        self.assertFalse(stalled, "trainers left without an answer: %r (answers %r)" %
                         (stalled, [h for _, h in answers]))
        self.assertTrue(welcomed, answers)
        self.assertTrue(refused, "no trainer was refused: %r" % [h for _, h in answers])
        for h in refused:
            self.assertEqual(h.get("code"), "resources", h)
            self.assertIn("server 0 is out of file descriptors (limit %d)" % LIMIT, h.get("message"))
            self.assertIn("ulimit -n", h.get("message"))
        # Once the first is refused, every later one is too (none fits).
        kinds = [h.get("type") for _, h in answers]
        first = kinds.index("error")
        self.assertTrue(all(k == "error" for k in kinds[first:]), kinds)
        return first

    def test_standalone_refuses_at_hello(self):
        s = self.reg.server(trainers=CLIENTS, preexec=low_nofile)
        answers = self.connect_many(s.port, CLIENTS)
        fit = self.check_refused(answers)
        # The refused connections were closed by the server.
        for c, h in answers[fit:]:
            c.expect_closed(5)
        # A trainer leaves: its descriptor lets the next one in.
        answers[0][0].close()
        time.sleep(0.3)
        c = self.client(s, timeout=3.0)
        h, _ = c.hello(0, timeout=3.0)
        self.assertEqual(h.get("type"), "welcome", h)
        self.assertIn("out of file descriptors", s.stderr())
        rc, _, err = s.terminate_and_wait()
        self.assertEqual(rc, 0, err)

    def test_master_fails_the_run_naming_the_server(self):
        m = self.reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                            "--ntrainer", "1", "--nserver", "1", "--linger", "0"], name="master", cls=Master)
        m.wait_ports()
        s = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                           name="server", cls=psb.Server, preexec=low_nofile)
        s.wait_ready()
        answers = []
        for r in range(CLIENTS):
            try:
                c = self.client(s.port, timeout=3.0)
            except (ConnectionRefusedError, ConnectionResetError):
                break  # the run already ended on the refusal: the server has closed its listener
            answers.append(c)
            if not s.alive() or not m.alive():
                break
        try:
            rc = m.wait(15)
        except subprocess.TimeoutExpired:
            self.fail("the master did not fail the run:\n%s\n%s" % (m.describe(), s.describe()))
        self.assertEqual(rc, 1, m.describe())
        last = m.stderr().strip().splitlines()[-1]
        self.assertIn("server 0", last)
        self.assertIn("out of file descriptors (limit %d)" % LIMIT, last)
        self.assertEqual(s.wait(15), 1, s.describe())
        self.assertIn("out of file descriptors", s.stderr().strip().splitlines()[-1])


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
