"""--follow (issue 30): servers and trainers started by hand that serve job
after job of whatever master listens at --master. A sweep without --local
runs every point on them; with --runs N by hand the follower trainers join
every run by themselves; a node the master refuses with "retry" (no place
for it in this job) waits, one it refuses for good (a wrong token) exits
non-zero at once; a follower exits 0 once --follow-idle passes without a
job, saying why.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_follow.py
"""
import json
import os
import re
import socket
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import Master  # noqa: E402

RUN_TIMEOUT = 240
IDLE_S = 5
# How long a follower may take to notice it has had no job for IDLE_S: a
# generous bound, not a measurement.
EXIT_TIMEOUT = 90


class HostilePeer(object):
    """Something at a follower's --master that is no psbench master:
    silent (accepts, says nothing), close (accepts and closes at once),
    garbage (answers bytes that are not psbench's), blackhole (its accept
    queue full, so that SYNs go unanswered)."""

    def __init__(self, mode):
        self.mode = mode
        self.accepted = 0
        self.conns = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((psb.HOST, 0))
        self.addr = "%s:%d" % (psb.HOST, self.sock.getsockname()[1])
        if mode == "blackhole":
            # A backlog of 0 holds one connection; those queued fill it and
            # the kernel drops every later SYN: a connect waits, unanswered.
            self.sock.listen(0)
            for _ in range(3):
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.setblocking(False)
                try:
                    c.connect(self.sock.getsockname())
                except (BlockingIOError, InterruptedError):
                    pass
                self.conns.append(c)
            return
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve_hostile, daemon=True)
        self.thread.start()

    def _serve_hostile(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "close":
                c.close()
                continue
            if self.mode == "garbage":
                try:
                    c.sendall(b"220 hello, this is no psbench master\r\n")
                except OSError:
                    pass
            self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


class Follow(psb.PsbTestCase):

    def follower(self, binary, master, name, *extra, idle=IDLE_S):
        args = [psb.bin_path(binary), "--master", master, "--follow", "--follow-idle", str(idle)]
        if binary == "psbench-server":
            args += ["--listen", "127.0.0.1:0"]
        return self.reg.start(args + list(extra), name=name)

    def assert_idle_exit(self, p, jobs):
        """p exits 0 by itself once idle, its last line saying why."""
        self.assertEqual(p.wait(EXIT_TIMEOUT), 0, p.describe())
        last = p.stderr().strip().splitlines()[-1]
        self.assertRegex(last, r"no job for %d s \(--follow-idle\) after %d job\(s\): exiting \(last: " %
                         (IDLE_S, jobs), p.describe())

    def test_sweep_by_hand(self):
        """A sweep without --local: two servers and two trainers follow it;
        every point takes what it needs (rpc_hook one server, allreduce
        none), the rest wait; both points done, the comparison made; then
        each follower exits 0 by itself. (--order sequential: the rpc_hook
        point first, as the matrix has it; interleaved, the allreduce point
        may come first and the servers, with nothing to do for longer than
        IDLE_S on a slow build, leave before the point that needs them.)"""
        port = psb.free_port()
        ctl = "%s:%d" % (psb.HOST, port)
        servers = [self.follower("psbench-server", ctl, "server%d" % i) for i in range(2)]
        trainers = [self.follower("psbench-trainer", ctl, "trainer%d" % i) for i in range(2)]
        out = os.path.join(self.reg.workdir, "sw")
        rc, so, se = self.reg.run([psb.bin_path("psbench-master"), "sweep", "--listen", ctl, "--http",
                                   "127.0.0.1:0", "--ddp-hook", "rpc_hook,allreduce_hook", "--nserver", "1",
                                   "--steps", "6", "--order", "sequential", "--out", out], timeout=RUN_TIMEOUT)
        self.assertEqual(rc, 0, "%s\n%s\n%s" % (so, se, "\n".join(p.describe() for p in servers + trainers)))
        self.assertIn("# nodes started by hand: start them with --master HOST:PORT --follow", so)
        for i, label in ((1, "rpc_hook"), (2, "allreduce_hook")):
            self.assertIn("# point %d of 2 (%s): running; nodes started by hand join it (--follow)\n" % (i, label),
                          so)
        with open(os.path.join(out, "sweep.json")) as f:
            doc = json.load(f)
        self.assertEqual([(p["config"]["hook"], p["status"]) for p in doc["points"]],
                         [("rpc_hook", "done"), ("allreduce_hook", "done")])
        self.assertEqual([(c["ps_point"], c["allreduce_point"]) for c in doc["comparisons"]], [(1, 2)])
        self.assertIn("PS/AR", so)
        # Each trainer ran both points; one server the first, the other none.
        for t in trainers:
            self.assert_idle_exit(t, 2)
            self.assertEqual(len(re.findall(r"job \d ended \(done\)", t.stderr())), 2, t.describe())
        for s in servers:
            self.assertEqual(s.wait(EXIT_TIMEOUT), 0, s.describe())
        errs = [s.stderr() for s in servers]
        self.assertEqual(sum(len(re.findall(r"job 1 ended \(done\)", e)) for e in errs), 1, errs)
        self.assertEqual(sorted(re.search(r"after (\d) job\(s\)", e).group(1) for e in errs), ["0", "1"])
        # The allreduce point has no servers: they were told so, and waited.
        self.assertIn("no job yet: the master refused this server: ", "".join(errs))
        for s in servers:
            self.assert_idle_exit(s, int(re.search(r"after (\d) job\(s\)", s.stderr()).group(1)))

    def test_runs_by_hand(self):
        """--runs 2 by hand: the server stays, the follower trainers join
        each run by themselves; both runs done."""
        out = os.path.join(self.reg.workdir, "out")
        m = self.reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                            "--linger", "0", "--ntrainer", "2", "--nserver", "1", "--epochs", "1", "--runs", "2",
                            "--out", out], name="master", cls=Master)
        m.wait_ports()
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                             name="server", cls=psb.Server)
        trainers = [self.follower("psbench-trainer", m.ctl, "trainer%d" % i) for i in range(2)]
        self.assertEqual(m.wait(RUN_TIMEOUT), 0, "\n".join(p.describe() for p in [m, srv] + trainers))
        for run in (1, 2):
            with open(os.path.join(out, "run-%03d" % run, "results.json")) as f:
                res = json.load(f)
            self.assertEqual((res["phase"], res["run"], res["runs"]), ("done", run, 2))
            self.assertEqual([t["rank"] for t in res["trainers"]], [0, 1])
        self.assertEqual(srv.wait(30), 0, srv.describe())
        for t in trainers:
            self.assert_idle_exit(t, 2)

    def test_refused_for_good(self):
        """A wrong token under --follow: non-zero at once, with the reason
        (no retrying); without --follow the exit codes are as before."""
        m = self.reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                            "--linger", "0", "--ntrainer", "1", "--nserver", "1", "--token", "good"],
                           name="master", cls=Master)
        m.wait_ports()
        for binary, role in (("psbench-trainer", "trainer"), ("psbench-server", "server")):
            p = self.follower(binary, m.ctl, role, "--token", "bad", idle=600)
            self.assertEqual(p.wait(30), 2, p.describe())
            last = p.stderr().strip().splitlines()[-1]
            self.assertEqual(last, "%s: the master refused this %s: wrong token" % (binary, role), p.describe())
        self.assertTrue(m.alive(), m.describe())
        m.stop()

    def test_flags(self):
        """--follow needs --master; --follow-idle needs --follow."""
        for binary, args, want in (
                ("psbench-trainer", ["--follow"], "--follow needs --master HOST:PORT"),
                ("psbench-server", ["--standalone", "--trainers", "1", "--follow"], "--follow needs --master"),
                ("psbench-server", ["--master", "127.0.0.1:9", "--follow-idle", "3"],
                 "--follow-idle needs --follow"),
                ("psbench-trainer", ["--master", "127.0.0.1:9", "--follow-idle", "3"],
                 "--follow-idle needs --follow"),
                ("psbench-trainer", ["--master", "127.0.0.1:9", "--follow", "--follow-idle", "0"],
                 "--follow-idle")):
            rc, so, se = self.reg.run([psb.bin_path(binary)] + args)
            self.assertEqual(rc, 2, (args, se))
            self.assertIn(want, se, args)

    def test_idle_without_master(self):
        """No master ever listens: exit 0 after --follow-idle, naming the
        last reason (the master could not be reached)."""
        ctl = "%s:%d" % (psb.HOST, psb.free_port())
        p = self.follower("psbench-trainer", ctl, "trainer")
        self.assert_idle_exit(p, 0)
        self.assertIn("cannot connect to %s" % ctl, p.stderr().strip().splitlines()[-1])

    def hostile(self, mode):
        peer = HostilePeer(mode)
        self.addCleanup(peer.close)
        return peer

    def test_peers_that_are_no_master(self):
        """Issue 39: a peer that accepts and stays silent, closes at once,
        answers garbage, or never answers the SYN: each try waits no longer
        than --follow-idle has left (not the whole --connect-timeout), is
        no job (no "job N ended", the idle clock not restarted), and the
        follower exits 0 once --follow-idle passes, its last line naming
        the peer. --connect-timeout 600: a try that waited it out could not
        end before the test's bound."""
        idle = 2
        procs = []
        for mode, why in (("silent", "accepted the connection but did not answer within"),
                          ("close", "closed the connection without answering"),
                          ("garbage", "is not a psbench master (it answered with bytes that are not psbench's"),
                          ("blackhole", "cannot connect to")):
            peer = self.hostile(mode)
            for binary in ("psbench-trainer", "psbench-server"):
                p = self.follower(binary, peer.addr, "%s-%s" % (binary, mode), "--connect-timeout", "600",
                                  idle=idle)
                procs.append((p, peer, why))
        for p, peer, why in procs:
            # The promise: --follow-idle, plus one try's teardown (the HTTP
            # probe of a silent peer, FOLLOW_TEARDOWN_S at most); the bound
            # here is far wider, and far below --connect-timeout.
            self.assertEqual(p.wait(EXIT_TIMEOUT), 0, p.describe())
            err = p.stderr()
            last = err.strip().splitlines()[-1]
            self.assertRegex(last, r"no job for %d s \(--follow-idle\) after 0 job\(s\): exiting \(last: " % idle,
                             p.describe())
            self.assertIn(why, last, p.describe())
            self.assertNotIn("ended (failed)", err, p.describe())
            if peer.mode != "blackhole":
                self.assertIn(peer.addr, last, p.describe())

    def wait_for(self, what, timeout=EXIT_TIMEOUT):
        deadline = time.time() + timeout
        while not what():
            self.assertLess(time.time(), deadline, "timed out waiting")
            time.sleep(0.05)

    def test_signals_while_waiting(self):
        """Issue 39: SIGINT, SIGTERM and SIGHUP to a follower that waits for
        a master (a silent peer's answer, or between tries where none
        listens) end it with exit 0 and a last line naming the signal."""
        silent = self.hostile("silent")
        refused = "%s:%d" % (psb.HOST, psb.free_port())
        for binary in ("psbench-trainer", "psbench-server"):
            for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")):
                for where, addr in (("silent", silent.addr), ("refused", refused)):
                    before = silent.accepted
                    # Refused: tries of 1 s, so that it soon says why and waits between them.
                    p = self.follower(binary, addr, "%s-%s-%s" % (binary, name, where),
                                      *(["--connect-timeout", "1"] if where == "refused" else []), idle=600)
                    if where == "silent":  # its try is connected, waiting for the first answer
                        self.wait_for(lambda: silent.accepted > before or not p.alive())
                    else:  # it has said why it has no job: it waits between tries
                        self.wait_for(lambda: "no job yet: cannot connect" in p.stderr() or not p.alive())
                    p.signal(sig)
                    self.assertEqual(p.wait(EXIT_TIMEOUT), 0, p.describe())
                    last = p.stderr().strip().splitlines()[-1]
                    self.assertEqual(last, "%s: %s: stopped while waiting for a job (after 0 job(s)): exiting" %
                                     (binary, name), p.describe())


if __name__ == "__main__":
    unittest.main()
