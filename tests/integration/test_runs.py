"""psbench-master --runs N: the same master runs the job N times back to
back. The servers stay registered and connected between runs (told
`reset`, not `stop`); the trainers are per run (--local starts them again;
by hand they join again with --master). Each run's results are whole and
its own: DIR/run-001/results.json, ... and one summary line per run.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_runs.py
"""
import csv
import json
import math
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import http_json  # noqa: E402

RUN_TIMEOUT = 120


class Runs(psb.PsbTestCase):

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.model_cfg = os.path.join(self.reg.workdir, "models.json")
        with open(self.model_cfg, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 3, "bucket_floats": 2000, "sparse": False}}}, f)
        self.out = os.path.join(self.reg.workdir, "out")
        # Its masters' flags (psb.PsbTestCase.master).
        self.master_kw = dict(rpc_timeout=15, out=self.out)

    def status(self, m):
        try:
            return http_json(m.http + "/api/v1/status")
        except OSError:
            return None

    def wait_status(self, m, pred, what, timeout=RUN_TIMEOUT, procs=()):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            st = self.status(m)
            last = st or last
            if st and pred(st):
                return st
            if not m.alive():
                break
            time.sleep(0.05)
        self.fail("never %s (last status %r):\n%s" % (what, last, "\n\n".join(
            p.describe() for p in (m,) + tuple(procs))))

    def run_results(self, run):
        """Run `run`'s results.json (psb.PsbTestCase.results)."""
        return self.results(os.path.join(self.out, "run-%03d" % run))

    def test_local_three_runs(self):
        """--local, the real DummyModel over one server: three runs, each
        with its own whole results; the same seed gives the same training
        every run (the server kept nothing of the run before)."""
        m = self.master("--local", "--epochs", "1", "--runs", "3")
        self.assertEqual(m.wait(RUN_TIMEOUT), 0, m.describe())
        so = m.stdout()
        # One summary line per run, in order.
        lines = re.findall(r"^run (\d+)/3 done: 2 trainer\(s\) x (\d+) batches, timed pass ([0-9.]+) s$", so, re.M)
        self.assertEqual([int(r) for r, _, _ in lines], [1, 2, 3], so[-3000:])
        batches = int(lines[0][1])
        self.assertEqual(batches, 5)  # DummyData: 10 batches an epoch, dealt over 2 trainers
        self.assertFalse(os.path.exists(os.path.join(self.out, "results.json")))
        hashes, losses = set(), set()
        p50s = []
        for run in (1, 2, 3):
            res = self.run_results(run)
            self.assertEqual((res["phase"], res["error"], res["run"], res["runs"]), ("done", None, run, 3))
            self.assertEqual([t["rank"] for t in res["trainers"]], [0, 1])
            tr = res["groups"]["trainer"]
            # This run's timed pass only: nothing of the run before, nor of its warm-up.
            self.assertEqual(tr["all"]["batch_level_metric,batch_all"]["count"], 2 * batches)
            for r in ("0", "1"):
                self.assertEqual(tr["ranks"][r]["batch_level_metric,batch_all"]["count"], batches)
            sv = res["groups"]["server"]
            self.assertEqual(sorted(sv["ranks"]), ["0"])
            self.assertGreater(sv["all"]["parameter_server_batch_metric,param_index_batch"]["count"], 0)
            for g in ("trainer", "server"):
                # Every row says which run it is (the last column, "run").
                with open(os.path.join(self.out, "run-%03d" % run, g + ".csv"), newline="") as f:
                    rows = list(csv.reader(f))
                self.assertEqual(rows[0][-1], "run", rows[0])
                self.assertGreater(len(rows), 1, g)
                self.assertEqual({r[-1] for r in rows[1:]}, {str(run)}, (g, run))
            for t in res["trainers"]:
                hashes.add(t["final_params_sha256"])
                losses.add(tuple(t["loss_per_epoch"]))
            self.assertGreater(res["training_seconds"], 0)
            p50s.append(res["headline"]["trainers"][-1]["step_p50_ms"])
        # The summary across the runs (issue 30): printed after the last
        # run, and in DIR/summary.json with each run's figure as its value.
        self.assertEqual(len(re.findall(r"^summary over 3 runs, all trainers", so, re.M)), 1, so[-3000:])
        self.assertRegex(so, r"(?m)^step_p50_ms +3 +\S+ +\S+ +\[\S+, \S+\]$")
        with open(os.path.join(self.out, "summary.json")) as f:
            summ = json.load(f)
        self.assertEqual((summ["runs"], summ["confidence"], summ["interval"]), (3, 0.95, "Student t on the log scale (3 runs or more)"))
        allrow = [t for t in summ["trainers"] if t["trainer"] == "all"][0]
        c = allrow["step_p50_ms"]
        self.assertEqual(c["values"], p50s)
        mean = sum(p50s) / 3
        sd = (sum((v - mean) ** 2 for v in p50s) / 2) ** 0.5
        self.assertAlmostEqual(c["mean"], mean, places=9)
        self.assertAlmostEqual(c["stdev"], sd, places=9)
        # A time: Student t on the log scale, never below 0 (issue 38).
        logs = [math.log(v) for v in p50s]
        lm = sum(logs) / 3
        half = 4.3027 * (sum((v - lm) ** 2 for v in logs) / 2) ** 0.5 / 3 ** 0.5
        self.assertAlmostEqual(c["ci95"][0], math.exp(lm - half), places=9)
        self.assertAlmostEqual(c["ci95"][1], math.exp(lm + half), places=9)
        self.assertGreater(c["ci95"][0], 0)
        self.assertEqual(sorted(t["trainer"] for t in summ["trainers"]), ["0", "1", "all"])
        # diff of two runs of the series: comparable (the same configuration),
        # each side the series' mean and interval, the same: within noise.
        rc, dout, derr = self.reg.run([psb.bin_path("psbench-master"), "diff",
                                       os.path.join(self.out, "run-001", "results.json"),
                                       os.path.join(self.out, "run-003", "results.json")])
        self.assertEqual(rc, 0, derr)
        # (diff says each side's warnings first: a 2-core host's
        # oversubscribed one among them.)
        body = "".join(l for l in dout.splitlines(True)
                       if not re.match(r"[AB]: warning: host \S+ is oversubscribed", l))
        self.assertTrue(body.startswith("comparable: yes, the same configuration"), dout[:400])
        self.assertRegex(dout, r"(?m)^  step_p50_ms .* \+0\.0%  within noise$")
        self.assertIn("noise: within noise where the two 95% intervals overlap (3 and 3 runs)", dout)
        # Every run trains the same model from the same seed to the same end.
        self.assertEqual(len(hashes), 1, hashes)
        self.assertEqual(len(losses), 2, losses)  # one per trainer (its own data), the same every run
        # The server is started once, the trainers once per run.
        err = m.stderr()
        self.assertEqual(err.count("[server 0] psbench-server: listening"), 1, err[-3000:])
        self.assertEqual(len(re.findall(r"run [23] of 3: waiting for 2 trainer", err)), 2)
        self.assertEqual(len(re.findall(r"^psbench-master: phase done$", err, re.M)), 3)

    def test_by_hand_until_stopped(self):
        """--runs 0 with a server started by hand: it stays (same process)
        across runs while trainers come and go; the status says which run
        this is; a signal between runs ends everything cleanly (exit 0)."""
        m = self.master("--ntrainer", "2", "--nserver", "1", "--model", "Tiny", "--model-config-path",
                        self.model_cfg, "--epochs", "2", "--runs", "0")
        st = self.status(m)
        self.assertEqual((st["phase"], st["run"], st["runs"]), ("waiting", 1, 0))
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                             name="server", cls=psb.Server)
        for run in (1, 2):
            trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl],
                                  name="trainer%d-%d" % (run, i)) for i in range(2)]
            for t in trs:
                self.assertEqual(t.wait(RUN_TIMEOUT), 0, t.describe())
            st = self.wait_status(m, lambda s: s["run"] == run + 1 and s["phase"] == "waiting",
                                  "waiting for run %d" % (run + 1), procs=[srv] + trs)
            self.assertIsNone(st["error"])
            self.assertEqual(st["nodes"], {"trainer": 0, "server": 1})
            self.assertEqual(st["progress"], {"batches_done": 0, "batches_total": 2 * 10})
            self.assertTrue(srv.alive(), srv.describe())
            nodes = http_json(m.http + "/api/v1/nodes")
            self.assertEqual([(n["role"], n["state"]) for n in nodes], [("server", "ready")])
            met = http_json(m.http + "/api/v1/metrics")
            self.assertEqual(met["groups"]["trainer"]["all"], {})  # cleared for the next run
            res = self.run_results(run)
            self.assertEqual((res["phase"], res["run"], res["runs"]), ("done", run, 0))
            self.assertEqual(res["groups"]["trainer"]["all"]["batch_level_metric,batch_all"]["count"], 2 * 10)
            self.assertEqual(res["groups"]["server"]["all"]["parameter_server_batch_metric,param_index_batch"]
                             ["count"], 3 * 10)
        # Between runs, nobody of run 3 in yet: a signal ends it cleanly.
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(30), 0, m.describe())
        self.assertEqual(srv.wait(30), 0, srv.describe())
        self.assertIn("stopped after run 2", m.stderr())
        # The series' summary (summary.h) covers the two runs done.
        self.assertEqual(sorted(os.listdir(self.out)), ["run-001", "run-002", "summary.json"])
        with open(os.path.join(self.out, "summary.json")) as f:
            self.assertEqual(json.load(f)["runs"], 2)
        self.assertIn("summary over 2 runs", m.stdout())
        self.assertIn("run 2 done:", m.stdout())
        self.assertIn("all trainers left: ready for a new job", srv.stderr())

    def test_failed_run_ends_the_master(self):
        """A run that fails ends the master (non-zero) whatever runs remain;
        the server hears stop(failed), not another reset."""
        m = self.master("--ntrainer", "2", "--nserver", "1", "--model", "Tiny", "--model-config-path",
                        self.model_cfg, "--epochs", "2", "--runs", "5")
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                             name="server", cls=psb.Server)
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl], name="trainer%d" % i)
               for i in range(2)]
        for t in trs:
            self.assertEqual(t.wait(RUN_TIMEOUT), 0, t.describe())
        self.wait_status(m, lambda s: s["run"] == 2 and s["phase"] == "waiting", "waiting for run 2",
                         procs=[srv])
        # Run 2: one trainer joins, then dies before the other comes.
        t = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl], name="trainer-lost")
        self.wait_status(m, lambda s: s["nodes"]["trainer"] == 1, "a trainer in run 2", procs=[srv, t])
        t.signal(signal.SIGKILL)
        # With --linger 0 the master leaves as soon as the failed run's
        # files are written: its verdict is read from them, not from a
        # status it may no longer serve.
        self.assertEqual(m.wait(30), 1, m.describe())
        self.assertEqual(srv.wait(30), 1, srv.describe())
        self.assertIn("the run failed: trainer 0", psb_last_line(srv.stderr()))
        self.assertEqual(self.run_results(1)["phase"], "done")
        res = self.run_results(2)
        self.assertEqual((res["phase"], res["run"]), ("failed", 2))
        self.assertRegex(res["error"], r"^trainer 0 \(.*\) disconnected")
        self.assertRegex(m.stdout(), r"(?m)^run 2/5 failed: trainer 0 ")


    def load_run(self, proc_dir):
        """One --local run of the Tiny model with the master reading the host's
        load from proc_dir (None: the real /proc); its results.json."""
        m = self.master("--epochs", "1", local=True, env=psb.proc_dir_env(proc_dir), ports=False)
        return self.results(self.out, m, timeout=RUN_TIMEOUT), m.stdout()

    def test_host_load(self):
        """results.json's host_load: the master host's load average and CPU
        ticks at the start and end of each pass, read from /proc; a host
        whose load is above its CPUs, or whose steal over a pass is above
        5 %, is busy: a warning in the output and in results.json."""
        res, so = self.load_run(None)
        one = os.path.join(self.reg.workdir, "one.json")
        os.rename(os.path.join(self.out, "results.json"), one)
        hl = res["host_load"]
        self.assertEqual(sorted(hl), ["timed", "warm-up"])
        for p in hl.values():
            for end in ("start", "end"):
                self.assertEqual(len(p[end]["loadavg"]), 3)
                self.assertGreater(p[end]["cpus"], 0)
                self.assertGreaterEqual(p["end"]["cpu_ticks"], p["start"]["cpu_ticks"])
            self.assertIn("busy", p)
        # A quiet host: no warning.
        res, so = self.load_run(os.path.join(os.path.dirname(os.path.abspath(__file__)), "proc_quiet"))
        self.assertEqual(psb.job_warnings(res), [])
        self.assertEqual(res["host_load"]["timed"]["steal_share"], None)  # no tick between the readings
        self.assertFalse(res["host_load"]["timed"]["busy"])
        # A busy one: load 512 on any machine's CPUs.
        busy = os.path.join(self.reg.workdir, "proc_busy")
        os.makedirs(busy)
        with open(os.path.join(busy, "loadavg"), "w") as f:
            f.write("512.00 300.00 100.00 9/99 1\n")
        with open(os.path.join(busy, "stat"), "w") as f:
            f.write("cpu  100 0 100 1000 0 0 0 50 0 0\n")
        res, so = self.load_run(busy)
        self.assertEqual(res["host_load"]["timed"]["start"]["loadavg"], [512.0, 300.0, 100.0])
        self.assertEqual(res["host_load"]["timed"]["start"]["steal_ticks"], 50)
        self.assertTrue(res["host_load"]["timed"]["busy"])
        w = [x for x in res["warnings"] if "host was busy" in x]
        self.assertEqual(len(w), 2, res["warnings"])  # warm-up and timed
        self.assertIn("during the timed pass (load average 512.00 at its start, 512.00 at its end", w[1])
        self.assertIn("warning: the master's host was busy during the timed pass", so)
        # diff of two single runs: no noise estimate; the busy run's warning
        # is said before the figures.
        rc, dout, derr = self.reg.run([psb.bin_path("psbench-master"), "diff", one,
                                       os.path.join(self.out, "results.json")])
        self.assertEqual(rc, 0, derr)
        self.assertIn("one run each: no noise estimate", dout)
        self.assertIn("B: warning: the master's host was busy during the timed pass", dout)
        self.assertRegex(dout, r"(?m)^comparable: yes, the same configuration; ")


def psb_last_line(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


if __name__ == "__main__":
    psb.main()
