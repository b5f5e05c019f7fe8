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
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import Master  # noqa: E402

RUN_TIMEOUT = 240
IDLE_S = 5
# How long a follower may take to notice it has had no job for IDLE_S: a
# generous bound, not a measurement.
EXIT_TIMEOUT = 90


def free_port():
    """A port nobody listens on now (the master takes it just after)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((psb.HOST, 0))
        return s.getsockname()[1]
    finally:
        s.close()


class Follow(psb.PsbTestCase):

    def follower(self, binary, master, name, *extra):
        args = [psb.bin_path(binary), "--master", master, "--follow", "--follow-idle", str(IDLE_S)]
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
        port = free_port()
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
            p = self.follower(binary, m.ctl, role, "--token", "bad", "--follow-idle", "600")
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
        ctl = "%s:%d" % (psb.HOST, free_port())
        p = self.follower("psbench-trainer", ctl, "trainer")
        self.assert_idle_exit(p, 0)
        self.assertIn("cannot connect to %s" % ctl, p.stderr().strip().splitlines()[-1])


if __name__ == "__main__":
    unittest.main()
