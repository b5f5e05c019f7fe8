"""The host's state is part of the result (issue 38): every host that took
part is measured over the timed pass from the nodes' reports (`host`) and
the master's own readings; results.json's host_state, /api/v1/status's and
the warnings say whether a host was busy (steal, other processes) or
oversubscribed (more busy processes than cores), and --quiet-host waits
for a quiet host before a run.

No test here says the real host is not busy (other work shares it): the
"not busy" case reads a fake /proc ($PSBENCH_PROC_DIR) whose ticks move.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_host_state.py
"""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import http_json  # noqa: E402

RUN_TIMEOUT = 120


class FakeProc:
    """A fake /proc (loadavg, stat) whose "cpu" ticks move with the clock,
    100 a second per CPU, all idle (quiet) or all user (busy): a thread
    rewrites stat ten times a second, each file whole (rename)."""

    def __init__(self, path, busy, cpus=2):
        self.path, self.busy, self.cpus = path, busy, cpus
        os.makedirs(path)
        with open(os.path.join(path, "loadavg"), "w") as f:
            f.write("0.50 0.40 0.30 1/99 1\n")
        self.t0 = time.monotonic()
        self.stop_ev = threading.Event()
        self.write()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def write(self):
        ticks = 1000 + int((time.monotonic() - self.t0) * 100 * self.cpus)
        user, idle = (ticks, 1000) if self.busy else (100, ticks)
        tmp = os.path.join(self.path, "stat.tmp")
        with open(tmp, "w") as f:
            f.write("cpu  %d 0 100 %d 0 0 0 0 0 0\nprocs_running %d\n" % (user, idle, 3 if self.busy else 1))
        os.replace(tmp, os.path.join(self.path, "stat"))

    def run(self):
        while not self.stop_ev.wait(0.1):
            self.write()

    def stop(self):
        self.stop_ev.set()
        self.thread.join()


class HostState(psb.PsbTestCase):

    # 60 steps (a second or two): every node reports inside the timed
    # pass (twice a second), so each has a window; a pass shorter than
    # a report's period may leave a node without one (its busy: null).
    master_flags = ("--steps", "60", "--warmup-steps", "5")

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.out = os.path.join(self.reg.workdir, "out")
        # Its masters' flags (psb.PsbTestCase.master).
        self.master_kw = dict(rpc_timeout=15, out=self.out, local=True)
        self.fakes = []

    def tearDown(self):
        for f in self.fakes:
            f.stop()
        psb.PsbTestCase.tearDown(self)

    def fake_proc(self, name, busy):
        f = FakeProc(os.path.join(self.reg.workdir, name), busy)
        self.fakes.append(f)
        return f.path

    def master_on(self, proc_dir, *extra, **kw):
        """self.master with the host's load read from proc_dir (None: the
        real /proc), its ports not waited for."""
        return self.master(*extra, env=psb.proc_dir_env(proc_dir), ports=False, **kw)

    def check_shape(self, hs):
        self.assertEqual(sorted(hs), ["busy", "hosts", "oversubscribed", "warnings"])
        for h in hs["hosts"]:
            self.assertEqual(sorted(h), ["cpus", "host", "job_processes", "master", "oversubscribed", "servers",
                                         "timed", "trainers"])
            self.assertEqual(h["job_processes"], len(h["trainers"]) + len(h["servers"]))
            self.assertEqual(sorted(h["timed"]), sorted([
                "seconds", "load1_start", "load1_end", "runnable_start", "runnable_end", "runnable_per_core",
                "steal_share", "cpu_busy_share", "job_cpu_share", "other_cpu_share", "busy", "why"]))

    def test_busy_loops(self):
        """Two busy loops beside a run on the real /proc: the run's host
        was busy, and its why names the other processes."""
        loops = [self.reg.start(["/usr/bin/python3", "-c", "while True: pass"], name="loop%d" % i)
                 for i in range(2)]
        res = self.results(self.out, self.master_on(None), timeout=RUN_TIMEOUT)
        for p in loops:
            p.stop(grace=0)
        hs = res["host_state"]
        self.check_shape(hs)
        self.assertIs(hs["busy"], True, hs)
        self.assertEqual(len(hs["hosts"]), 1, hs)
        h = hs["hosts"][0]
        self.assertTrue(h["master"])
        self.assertEqual((h["trainers"], h["servers"]), ([0, 1], [0]))
        self.assertIs(h["timed"]["busy"], True, h)
        self.assertIn("other processes used", h["timed"]["why"])
        self.assertGreater(h["timed"]["other_cpu_share"], 0.10)
        self.assertGreater(h["timed"]["job_cpu_share"], 0)
        w = [x for x in hs["warnings"] if "was busy during the timed pass: other processes used" in x]
        self.assertEqual(len(w), 1, hs["warnings"])
        self.assertIn(w[0], res["warnings"])

    def test_quiet_fake_proc(self):
        """A fake /proc whose ticks are all idle: no other load, no steal:
        not busy, and no busy warning."""
        res = self.results(self.out, self.master_on(self.fake_proc("proc_idle", busy=False)), timeout=RUN_TIMEOUT)
        hs = res["host_state"]
        self.check_shape(hs)
        self.assertIs(hs["busy"], False, hs)
        t = hs["hosts"][0]["timed"]
        self.assertIs(t["busy"], False, t)
        self.assertIsNone(t["why"])
        self.assertEqual(t["steal_share"], 0)
        self.assertEqual(t["cpu_busy_share"], 0)
        self.assertEqual(t["other_cpu_share"], 0)
        self.assertEqual((t["runnable_start"], t["runnable_end"], t["load1_start"]), (1, 1, 0.5))
        self.assertEqual(t["runnable_per_core"], 0.5)
        self.assertFalse([x for x in res["warnings"] if "was busy" in x or "not quiet" in x], res["warnings"])

    def test_oversubscribed(self):
        """--ntrainer 4 with every process on one core (the master's
        affinity, which its --local children inherit): 5 busy processes on
        1 core, in results.json, /api/v1/status and the warnings."""
        m = self.master_on(None, "--ntrainer", "4", preexec=lambda: os.sched_setaffinity(0, {0}), linger=30)
        m.wait_ports()
        deadline = time.monotonic() + RUN_TIMEOUT
        st = None
        while time.monotonic() < deadline:
            try:
                st = http_json(m.http + "/api/v1/status")
            except OSError:
                st = None
            if st and st["phase"] in ("done", "failed"):
                break
            time.sleep(0.1)
        self.assertEqual(st["phase"], "done", st)
        self.assertIs(st["host_state"]["oversubscribed"], True, st)
        line = [x for x in st["host_state"]["warnings"] if "is oversubscribed" in x]
        self.assertEqual(len(line), 1, st["host_state"])
        self.assertIn("the job started 5 busy processes (4 trainers, 1 server) on 1 cores", line[0])
        m.signal(signal.SIGTERM)  # out of its --linger
        m.wait(RUN_TIMEOUT)
        with open(os.path.join(self.out, "results.json")) as f:
            res = json.load(f)
        hs = res["host_state"]
        self.check_shape(hs)
        self.assertIs(hs["oversubscribed"], True)
        h = hs["hosts"][0]
        self.assertEqual((h["cpus"], h["job_processes"], h["oversubscribed"]), (1, 5, True))
        self.assertEqual(h["trainers"], [0, 1, 2, 3])
        self.assertIn(line[0], hs["warnings"])
        self.assertIn(line[0], res["warnings"])

    def test_quiet_host_waits(self):
        """--quiet-host on a fake /proc that is all busy: the master says
        what it waits for, waits its seconds, then runs marked busy."""
        m = self.master_on(self.fake_proc("proc_busy", busy=True), "--quiet-host", "2")
        res = self.results(self.out, m, timeout=RUN_TIMEOUT)
        out = m.stdout() + m.stderr()
        self.assertEqual(out.count("--quiet-host: waiting up to 2 s for host"), 1, out)
        hs = res["host_state"]
        self.assertIs(hs["busy"], True, hs)
        w = [x for x in hs["warnings"] if "was not quiet after waiting 2 s: other processes used" in x]
        self.assertEqual(len(w), 1, hs["warnings"])
        self.assertIn(w[0], res["warnings"])


if __name__ == "__main__":
    psb.main()
