"""psbench-master sweep (issue 30): a matrix of jobs on one host, a row per
point, the PS / allreduce answer, sweep.csv (tidy), sweep.json, each
point's results.json, a sweep file, a failed point that does not stop the
others, refusals before anything runs, a signal that stops the sweep and
leaves its files, and --report DIR. (The report in Chromium:
test_sweep_report.py.)

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_sweep.py
"""
import csv
import json
import re
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

CSV_COLUMNS = ["point", "run", "label", "hook", "trainer", "model", "ntrainer", "nserver", "bucket_cap_mb",
               "device", "transport", "uses_servers", "status", "metric", "value", "unit", "n", "busy",
               "oversubscribed", "compress"]
RUN_METRICS = {"step_p50_ms", "step_p90_ms", "samples_per_s", "bytes_per_step", "comm_span_ms",
               "effective_gb_per_s", "exposed_comm_ms", "share_forward", "share_backward_compute",
               "share_exposed_comm", "share_optimizer", "share_other", "buckets", "steady_step_p50_ms",
               "steady_step_p90_ms", "steady_samples_per_s", "first_step_ms", "algbw_gb_per_s", "busbw_gb_per_s",
               "wire_bytes_per_step", "final_loss"}
SWEEP_TIMEOUT = 240
# A short job: 8 steps a run (7 steady), 2 warm-up steps (the points'
# figures are checked for their shape and consistency, not their size): the
# job's own --steps, fewer than the sweep would choose, so marked "few steps".
JOB = ["--steps", "8", "--warmup-steps", "2", "--set", "data.sample_count=60"]
ROW = (r"^ +(?P<point>\d+) +(?P<dims>.*?) +(?P<buckets>\d+|-) +(?P<mb>[\d.]+) +(?P<n>\d+) +(?P<step>[\d.]+) +"
       r"(?P<ci>\[[\d.]+, [\d.]+\]|-) +(?P<sps>[\d.]+) +(?P<exp>[\d.]+|-) +(?P<alg>[\d.]+|-) +(?P<bus>[\d.]+|-) +"
       r"(?P<ratio>[\d.]+|-) +(?P<rci>\[[\d.]+, [\d.]+\]|-) *(?P<marks>.*)$")


class SweepTests(psb.PsbTestCase):

    def sweep(self, *args, timeout=SWEEP_TIMEOUT):
        return self.reg.run([psb.bin_path("psbench-master"), "sweep"] + list(args), timeout=timeout)

    def out(self, name="sw"):
        return os.path.join(self.reg.workdir, name)

    def load(self, path):
        with open(path) as f:
            return json.load(f)

    def rows(self, out):
        """The table's rows: (point, the rest split) for lines not starting with '#'."""
        return [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]

    # ---- a matrix, end to end ------------------------------------------------

    def test_progress_on_a_terminal_rewrites_its_line(self):
        """On a terminal the progress is one line that rewrites itself
        (carriage return, erase to the end of the line), erased when the
        run ends: nothing of it is left among the lines (issue 40)."""
        import pty
        d = self.out()
        master_fd, slave_fd = pty.openpty()
        try:
            p = subprocess.Popen([psb.bin_path("psbench-master"), "sweep", "--local", "--ddp-hook",
                                  "rpc_hook,allreduce_hook", "--order", "sequential", "--out", d] + JOB,
                                 stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=slave_fd, env=psb.base_env(),
                                 preexec_fn=psb._die_with_parent)
        finally:
            os.close(slave_fd)
        chunks = []
        try:
            out = p.communicate(timeout=SWEEP_TIMEOUT)[0].decode()
            while True:  # the terminal's side: all of it is in once the sweep has ended
                try:
                    b = os.read(master_fd, 65536)
                except OSError:  # EIO: no writer left
                    break
                if not b:
                    break
                chunks.append(b)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master_fd)
        self.assertEqual(p.returncode, 0, out)
        tty = b"".join(chunks).decode("utf-8", "replace")
        self.assertIn("\r\x1b[Ksweep: point 1 of 2: rpc_hook, run 1 of 1\r\x1b[K", tty)
        self.assertRegex(tty, r"\r\x1b\[Ksweep: point 2 of 2: allreduce_hook, run 1 of 1, time left ~[^\r\n]+\r\x1b\[K")
        self.assertNotRegex(tty, r"sweep: point [^\r]*\n")  # never a line of its own

    @unittest.skipIf(psb.ASAN, "twelve training runs: the release pass's; the sweep's own code runs under ASan "
                               "in the tests below")
    def test_hooks_by_bucket_caps_with_runs(self):
        d = self.out()
        rc, out, err = self.sweep("--local", "--ddp-hook", "rpc_hook,allreduce_hook", "--bucket-cap-mb", "1,25",
                                  "--runs", "2", "--out", d, *JOB)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("# psbench-master sweep: 4 point(s) x 2 run(s)", out)
        self.assertIn("the same at every point: trainer DdpRpcTrainer, model DummyModel, ntrainer 2", out)
        header = [line for line in out.splitlines() if line.startswith("# point")]
        self.assertEqual(len(header), 1, out)
        self.assertEqual(header[0].split()[1:], ["point", "bucket_cap_mb", "hook", "buckets", "MB/step", "n", "step_ms",
                                                 "95%", "interval", "samples/s", "exposed%", "algbw", "busbw", "PS/AR",
                                                 "PS/AR", "95%", "marks"])
        rows = [re.match(ROW, line) for line in out.splitlines() if line.strip() and not line.startswith("#")]
        self.assertTrue(all(rows), out)
        self.assertEqual([(r["point"], r["dims"].split()) for r in rows],
                         [("1", ["1", "rpc_hook"]), ("2", ["1", "allreduce_hook"]), ("3", ["25", "rpc_hook"]),
                          ("4", ["25", "allreduce_hook"])], out)
        # A smaller cap cuts more buckets; the ratio and its interval are
        # on the pair's second row; n is the steady steps (8 - the first),
        # fewer than 20: said on every row.
        self.assertGreater(int(rows[0]["buckets"]), int(rows[2]["buckets"]))
        self.assertEqual((rows[0]["ratio"], rows[0]["rci"]), ("-", "-"))
        self.assertRegex(rows[1]["ratio"], r"^\d+\.\d\d$")
        self.assertRegex(rows[1]["rci"], r"^\[\d+\.\d\d, \d+\.\d\d\]$")
        for r in rows:
            self.assertEqual(r["n"], "7")
            self.assertIn("few steps (n=7)", r["marks"])
            lo, hi = (float(x) for x in r["ci"][1:-1].split(", "))  # an interval, never below 0
            self.assertTrue(0 < lo <= hi, r["ci"])
        self.assertRegex(out, r"# the answer: of 2 point\(s\), the parameter server is faster beyond noise at \d+, "
                              r"allreduce at \d+, no difference beyond noise at \d+")
        self.assertIn("bucket_cap_mb=1: rpc_hook", out)
        self.assertIn("# order: interleaved", out)
        self.assertRegex(out, r"# order seed: \d+ \(--order-seed \d+ repeats")
        self.assertNotIn("# steps:", out)  # the job's --steps: its choice
        # While a point runs (issue 40): a line per run on stderr (not a
        # terminal), every run of the 4 points, and the time left once a
        # run has ended.
        progress = re.findall(r"^sweep: point ([1-4]) of 4: (rpc_hook|allreduce_hook) bucket_cap_mb=(1|25), "
                              r"run ([12]) of 2(, time left ~.*)?$", err, re.M)
        self.assertEqual(len(progress), 8, err)
        self.assertEqual(sorted((p[0], p[3]) for p in progress),
                         [(k, r) for k in "1234" for r in "12"], err)
        self.assertEqual([bool(p[4]) for p in progress], [False] + [True] * 7, err)
        for p in progress[1:]:
            self.assertRegex(p[4], r"^, time left ~([0-9]+\.[0-9] s|[0-9]+ s|[0-9]+ min [0-9]+ s)$")
        self.assertNotIn("\r", err)

        doc = self.load(os.path.join(d, "sweep.json"))
        self.assertEqual(doc["psbench_sweep"], 1)
        self.assertEqual(doc["runs"], 2)
        self.assertEqual(doc["dimensions"], ["bucket_cap_mb", "hook"])
        self.assertEqual(doc["command"][:3], ["psbench-master", "sweep", "--local"])
        self.assertEqual(len(doc["points"]), 4)
        # Interleaved: each pair's runs alternate, the first side drawn.
        sched = [(e["point"], e["run"]) for e in doc["schedule"]]
        self.assertEqual(len(sched), 8)
        for pair in ((1, 2), (3, 4)):
            seq = [pt for pt, _ in sched if pt in pair]
            self.assertEqual(seq, [seq[0], seq[1]] * 2, sched)
            self.assertNotEqual(seq[0], seq[1])
        self.assertEqual(doc["order"], "interleaved")
        for p in doc["points"]:
            self.assertEqual(p["status"], "done", p.get("error"))
            self.assertEqual(len(p["runs"]), 2)
            self.assertEqual(p["summary"]["step_p50_ms"]["n"], 2)
            # Two runs: no t-interval across them (issue 38) ...
            self.assertIsNone(p["summary"]["step_p50_ms"]["ci95_low"])
            # ... the steady state's from the steps within them, positive.
            sd = p["steady"]["step_p50_ms"]
            self.assertEqual(sd["method"], "block bootstrap over steps")
            self.assertTrue(0 < sd["ci95_low"] <= sd["ci95_high"], sd)
            self.assertTrue(0 < p["steady"]["samples_per_s"]["ci95_low"], p["steady"])
            self.assertEqual((p["n"], p["few_steps"]), (7, True))
            self.assertEqual(p["busy"], bool(p["busy_runs"]))
            self.assertIsInstance(p["oversubscribed"], bool)
            # The steady p50 is the runs' mean of each run's pooled median.
            self.assertAlmostEqual(sd["mean"], sum(r["headline"]["steady"]["step_p50_ms"] for r in p["runs"]) / 2,
                                   places=6)
            self.assertAlmostEqual(sum(p["shares"].values()), 1.0, places=6)
            self.assertTrue(p["environment"]["trainers"], p["environment"])
            for r in (1, 2):  # every run's files under the sweep's folder
                self.assertTrue(os.path.isfile(os.path.join(d, p["dir"], "run-%03d" % r, "results.json")))
            self.assertTrue(os.path.isfile(os.path.join(d, p["dir"], "master.log")))
        cfg = doc["points"][1]["config"]
        self.assertEqual((cfg["hook"], cfg["nserver"], cfg["uses_servers"], cfg["bucket_cap_mb"]),
                         ("allreduce_hook", 0, False, 1.0))
        self.assertEqual(doc["points"][0]["config"]["nserver"], 1)
        self.assertEqual([(c["ps_point"], c["allreduce_point"]) for c in doc["comparisons"]], [(1, 2), (3, 4)])
        for c in doc["comparisons"]:
            ps = doc["points"][c["ps_point"] - 1]["steady"]["step_p50_ms"]["mean"]
            ar = doc["points"][c["allreduce_point"] - 1]["steady"]["step_p50_ms"]["mean"]
            self.assertAlmostEqual(c["ps_over_allreduce"], ps / ar, places=9)
            self.assertEqual(c["faster"], "ps" if ps < ar else "allreduce")
            self.assertTrue(c["noise_known"])
            # The verdict from the ratio's own interval, never from overlaps.
            lo, hi = c["ratio_ci95_low"], c["ratio_ci95_high"]
            self.assertTrue(0 < lo <= hi, c)
            self.assertEqual(c["within_noise"], lo <= 1 <= hi)
            self.assertEqual(c["verdict"], "no difference beyond noise" if lo <= 1 <= hi
                             else "allreduce" if lo > 1 else "ps")
            self.assertEqual(c["ci_method"], "two-stage bootstrap (runs, then blocks of steps)")

        with open(os.path.join(d, "sweep.csv")) as f:
            table = list(csv.reader(f))
        self.assertEqual(table[0], CSV_COLUMNS)
        body = [dict(zip(CSV_COLUMNS, r)) for r in table[1:]]
        self.assertEqual(len(body), 4 * 2 * len(RUN_METRICS))  # point x run x metric
        self.assertEqual({r["metric"] for r in body}, RUN_METRICS)
        one = [r for r in body if r["point"] == "2" and r["run"] == "2" and r["metric"] == "step_p50_ms"]
        self.assertEqual(len(one), 1)
        self.assertEqual((one[0]["hook"], one[0]["nserver"], one[0]["bucket_cap_mb"], one[0]["unit"]),
                         ("allreduce_hook", "0", "1", "ms"))
        self.assertAlmostEqual(float(one[0]["value"]),
                               doc["points"][1]["runs"][1]["headline"]["step_p50_ms"], places=6)
        # --report DIR writes the report again from sweep.json.
        report = os.path.join(d, "report.html")
        self.assertGreater(os.path.getsize(report), 1000)
        os.unlink(report)
        rc, out, err = self.sweep("--report", d)
        self.assertEqual(rc, 0, err)
        self.assertGreater(os.path.getsize(report), 1000)

    def test_sweep_file_and_a_hook_without_servers_runs_once(self):
        f = os.path.join(self.reg.workdir, "sweep-file.json")
        with open(f, "w") as fh:
            json.dump({"dimensions": {"hook": ["rpc_hook", "allreduce_hook"], "nserver": [1, 2],
                                      "ntrainer": [4]},
                       "runs": 1, "job": JOB}, fh)
        d = self.out()
        rc, out, err = self.sweep("--sweep-file", f, "--local", "--out", d)
        self.assertEqual(rc, 0, out + err)
        doc = self.load(os.path.join(d, "sweep.json"))
        # allreduce_hook uses no server: one point for it, not one per count.
        self.assertEqual([(p["config"]["hook"], p["config"]["nserver"], p["config"]["ntrainer"])
                          for p in doc["points"]],
                         [("rpc_hook", 1, 4), ("allreduce_hook", 0, 4), ("rpc_hook", 2, 4)])
        self.assertEqual(doc["dimensions"], ["nserver", "hook"])
        # Each run traced its last steps (trace.json beside its results);
        # each point says which step it drew (null where no step of the
        # trace is whole on every trainer: the nodes record no span).
        for p in doc["points"]:
            self.assertTrue(os.path.isfile(os.path.join(d, p["dir"], "trace.json")), p["dir"])
            self.assertIn("trace_step", p)
            if p["trace_step"] is not None:
                self.assertIn(p["trace_step"]["batch"], range(3, 8), p["trace_step"])  # --steps 8: 3:7
        # Both PS points are compared with the one allreduce point.
        self.assertEqual([(c["ps_point"], c["allreduce_point"]) for c in doc["comparisons"]], [(1, 2), (3, 2)])
        # One run a point: the steps within it still give the noise.
        self.assertTrue(doc["comparisons"][0]["noise_known"])
        self.assertIsNotNone(doc["comparisons"][0]["ratio_ci95_low"])
        # The command line wins over the file; --dry-run shows the points, runs nothing.
        d2 = self.out("sw2")
        rc, out, err = self.sweep("--sweep-file", f, "--local", "--out", d2, "--nserver", "2,4", "--ddp-hook",
                                  "rpc_hook", "--dry-run")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("dry run, nothing is started: 2 point(s) x 1 run(s)", out)
        self.assertIn("point 1: nserver=2\n", out)
        self.assertIn("command: psbench-master --steps 8 --warmup-steps 2 --set data.sample_count=60 --local --ddp-hook "
                      "rpc_hook --ntrainer 4 --nserver 2 --runs 1 --out %s/points/001 --trace --trace-steps 3:7\n"
                      % d2, out)
        self.assertIn('"nserver":4', out)
        self.assertFalse(os.path.exists(d2))

    def test_device_dimension_sets_the_cuda_counts(self):
        # Planned only (--dry-run): no GPU is needed to see what a cuda point runs.
        rc, out, err = self.sweep("--local", "--device", "cpu,cuda", "--ddp-hook", "rpc_hook,allreduce_hook",
                                  "--ntrainer", "2", "--dry-run")
        self.assertEqual(rc, 0, out + err)
        cmds = [line.split("command: psbench-master ", 1)[1] for line in out.splitlines() if "command: " in line]
        # The default --epochs gives 50 steps a trainer (49 steady): the sweep runs
        # --steps 51 (50 steady) with a warm-up of 10 instead, and says so.
        self.assertIn("# steps: the default --epochs gives 50 step(s) per trainer at point 1", out)
        self.assertEqual(cmds, [
            "--local --steps 51 --warmup-steps 10 --ddp-hook rpc_hook --ntrainer 2 --runs 1 --out DIR/points/001"
            " --trace --trace-steps 46:50",
            "--local --steps 51 --warmup-steps 10 --ddp-hook allreduce_hook --ntrainer 2 --runs 1 "
            "--out DIR/points/002 --trace --trace-steps 46:50",
            "--local --steps 51 --warmup-steps 10 --ddp-hook rpc_hook --ntrainer 0 --ncudatrainer 2 --nserver 0 "
            "--ncudaserver 1 --runs 1 --out DIR/points/003 --trace --trace-steps 46:50",
            "--local --steps 51 --warmup-steps 10 --ddp-hook allreduce_hook --ntrainer 0 --ncudatrainer 2 "
            "--nserver 0 --runs 1 --out DIR/points/004 --trace --trace-steps 46:50"])
        configs = [json.loads(line.split("config: ", 1)[1]) for line in out.splitlines() if "config: " in line]
        self.assertEqual([(c["device"], c["ntrainer"], c["nserver"]) for c in configs],
                         [("cpu", 2, 1), ("cpu", 2, 0), ("cuda", 2, 1), ("cuda", 2, 0)])

    def test_enough_steps_and_the_order(self):
        """--epochs that gives fewer than 50 steady steps a trainer: the
        sweep runs --steps 51 instead (the --epochs dropped, a warm-up of
        10 unless given), says so, and plans every point with it; the
        job's own --steps is its choice. --order sequential runs a point's
        runs back to back; an interleaved order repeats with its seed."""
        rc, out, err = self.sweep("--local", "--ddp-hook", "rpc_hook,allreduce_hook", "--epochs", "2",
                                  "--warmup-steps", "3", "--runs", "3", "--dry-run")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("# steps: --epochs gives 10 step(s) per trainer at point 1 (rpc_hook), 9 steady-state after "
                      "the first; every point runs --steps 51 instead", out)
        cmds = [line.split("command: psbench-master ", 1)[1] for line in out.splitlines() if "command: " in line]
        self.assertEqual(cmds[0], "--local --warmup-steps 3 --steps 51 --ddp-hook rpc_hook --runs 1 "
                                  "--out DIR/points/001/run-NNN --trace --trace-steps 46:50")
        self.assertIn("the runs of points that differ only in the hook alternating (--order interleaved)", out)
        rc, out, err = self.sweep("--local", "--ddp-hook", "rpc_hook", "--steps", "5", "--dry-run")
        self.assertEqual(rc, 0, out + err)
        self.assertNotIn("# steps:", out)
        self.assertIn("--local --steps 5 --ddp-hook rpc_hook --runs 1", out)
        # Each run traces the last 5 steps of its timed pass (all 3 of a
        # shorter one); --no-trace: not; the job's own --trace-steps: its
        # window.
        self.assertIn("--out DIR/points/001 --trace --trace-steps 0:4\n", out)
        rc, out, err = self.sweep("--local", "--ddp-hook", "rpc_hook", "--steps", "3", "--dry-run")
        self.assertIn("--out DIR/points/001 --trace --trace-steps 0:2\n", out)
        for flags, tail in ((["--no-trace"], "--out DIR/points/001"),
                            (["--trace-steps", "1:2"], "--out DIR/points/001 --trace")):
            rc, out, err = self.sweep("--local", "--ddp-hook", "rpc_hook", "--steps", "5", "--dry-run", *flags)
            self.assertEqual(rc, 0, out + err)
            cmd = [line for line in out.splitlines() if "command: " in line][0]
            self.assertTrue(cmd.endswith(tail), cmd)
            self.assertEqual(cmd.count("--trace-steps"), len(flags) - 1, cmd)
        for bad, want in ((["--order", "random"], "--order 'random': interleaved or sequential"),
                          (["--order-seed", "-1"], "--order-seed '-1': a whole number")):
            rc, out, err = self.sweep("--local", "--dry-run", *bad)
            self.assertEqual(rc, 2, err)
            self.assertIn(want, err)
        # Sequential, for real: a point's runs back to back. (Four training
        # runs: the release pass's; the plan above is the sweep's code.)
        if psb.ASAN:
            return
        d = self.out()
        rc, out, err = self.sweep("--local", "--ddp-hook", "rpc_hook,allreduce_hook", "--runs", "2", "--order",
                                  "sequential", "--out", d, *JOB)
        self.assertEqual(rc, 0, out + err)
        doc = self.load(os.path.join(d, "sweep.json"))
        self.assertEqual([(e["point"], e["run"]) for e in doc["schedule"]], [(1, 1), (1, 2), (2, 1), (2, 2)])
        self.assertEqual(doc["order"], "sequential")
        # Each point's runs: their files, one log, and the series' summary
        # beside them (psbench-master diff reads its noise there).
        for p in doc["points"]:
            for r in (1, 2):
                self.assertTrue(os.path.isfile(os.path.join(d, p["dir"], "run-%03d" % r, "results.json")))
            with open(os.path.join(d, p["dir"], "master.log")) as fh:
                self.assertEqual(fh.read().count("psbench run done"), 2)
            self.assertEqual(self.load(os.path.join(d, p["dir"], "summary.json"))["runs"], 2)

    def test_a_failed_point_does_not_stop_the_others(self):
        cfg = os.path.join(self.reg.workdir, "trainers.json")
        with open(os.path.join(psb.HERE, "..", "..", "configs", "trainer_configurations.json")) as fh:
            trainers = json.load(fh)
        diverge = json.loads(json.dumps(trainers["DdpRpcTrainer"]))
        diverge["configurations"]["lr"] = 3e38  # the loss is NaN at once: the run fails
        trainers["Diverge"] = diverge
        with open(cfg, "w") as fh:
            json.dump(trainers, fh)
        d = self.out()
        # (The whole data set: the loss is checked after the first batches.)
        rc, out, err = self.sweep("--local", "--trainer", "Diverge,DdpRpcTrainer", "--trainer-config-path", cfg,
                                  "--out", d, "--epochs", "1")
        self.assertEqual(rc, 1, out + err)
        rows = self.rows(out)
        self.assertEqual(rows[0][:3], ["1", "Diverge", "FAILED:"], out)
        self.assertIn("loss diverged", out)
        self.assertEqual(rows[1][:2], ["2", "DdpRpcTrainer"])
        self.assertNotIn("FAILED", " ".join(rows[1]))
        doc = self.load(os.path.join(d, "sweep.json"))
        self.assertEqual([p["status"] for p in doc["points"]], ["failed", "done"])
        self.assertIn("loss diverged", doc["points"][0]["error"])
        self.assertEqual(doc["points"][0]["runs"], [])
        with open(os.path.join(d, "sweep.csv")) as fh:
            table = list(csv.DictReader(fh))
        self.assertEqual({r["point"] for r in table}, {"2"})

    # ---- refused before anything runs -------------------------------------------

    def test_refusals(self):
        d = self.out()
        cases = [
            (["--local", "--ntrainer", "2,x"], "point 2 of 2 (--ntrainer x) is refused: psbench-master: --ntrainer"),
            (["--local", "--ntrainer", "2,,4"], "--ntrainer '2,,4': an empty value"),
            (["--local", "--ntrainer", "2,2"], "'2' is given twice"),
            (["--local", "--ncudatrainer", "1"], "--ncudatrainer: the sweep sets it for each point"),
            (["--local", "--runs", "0"], "--runs '0': a number of runs per point"),
            (["--local", "--device", "tpu"], "--device 'tpu': cpu or cuda"),
            (["--local", "--ddp-hook"], "--ddp-hook needs a value"),
        ]
        for args, want in cases:
            rc, out, err = self.sweep(*(["--out", d] + args))
            self.assertEqual(rc, 2, "%s: %s%s" % (args, out, err))
            self.assertIn(want, err, args)
            self.assertEqual(out, "", args)
            self.assertFalse(os.path.exists(os.path.join(d, "points")), args)
        bad = os.path.join(self.reg.workdir, "bad.json")
        for doc, want in (({"dimension": {}}, 'unknown key "dimension"'),
                          ({"dimensions": {"hooks": ["rpc_hook"]}}, 'unknown dimension "hooks"'),
                          ({"dimensions": {"hook": []}}, '"hook" must be a non-empty list'),
                          ({"runs": "3"}, '"runs" must be an integer')):
            with open(bad, "w") as fh:
                json.dump(doc, fh)
            rc, out, err = self.sweep("--local", "--sweep-file", bad, "--out", d)
            self.assertEqual(rc, 2, err)
            self.assertIn(want, err)
        # A folder that holds a sweep is not written over.
        os.makedirs(os.path.join(d, "points"))
        rc, out, err = self.sweep("--local", "--out", d)
        self.assertEqual(rc, 2)
        self.assertIn("holds a sweep already", err)
        rc, out, err = self.sweep("--report", self.reg.workdir)
        self.assertEqual(rc, 1)
        self.assertIn("sweep.json", err)

    # ---- bounds and echoes (issue 39) ---------------------------------------------

    def test_points_are_bounded(self):
        """A 100 x 100 matrix is refused at once (not four minutes of
        planning first), naming the product, its factors and --max-points;
        --max-points raises and lowers the bound; a matrix that passes says
        how many points its plan checked and how long that took."""
        d = self.out()
        big = os.path.join(self.reg.workdir, "hundred.json")
        with open(big, "w") as fh:
            json.dump({"dimensions": {"ntrainer": list(range(1, 101)), "bucket_cap_mb": list(range(1, 101))}}, fh)
        rc, out, err = self.sweep("--local", "--sweep-file", big, "--out", d, timeout=20)
        self.assertEqual(rc, 2, err)
        self.assertEqual(out, "")
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("the matrix has 10000 points (ntrainer 100 x bucket_cap_mb 100), more than --max-points 1000",
                      err)
        self.assertIn("raise --max-points (at most 100000)", err)
        self.assertFalse(os.path.exists(os.path.join(d, "points")))
        rc, out, err = self.sweep("--local", "--ntrainer", "1,2,3", "--bucket-cap-mb", "1,2", "--max-points", "5",
                                  "--dry-run", timeout=20)
        self.assertEqual(rc, 2, err)
        self.assertIn("the matrix has 6 points (ntrainer 3 x bucket_cap_mb 2), more than --max-points 5", err)
        for bad in ("0", "x", "0x10", " 5", "100001"):
            rc, out, err = self.sweep("--local", "--max-points", bad, "--dry-run", timeout=20)
            self.assertEqual(rc, 2, (bad, err))
            self.assertIn("--max-points '%s': a number of points, 1 to 100000" % bad, err)
        rc, out, err = self.sweep("--local", "--ntrainer", "1,2,3", "--bucket-cap-mb", "1,2", "--max-points", "6",
                                  "--dry-run", *JOB)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"# plan: 6 point\(s\) checked in \d+\.\d s\n")
        self.assertIn("dry run, nothing is started: 6 point(s)", out)

    def test_long_values_are_cut_in_refusals(self):
        """A value of 60000 characters in a
        point's flags, a list given twice, an unknown key of a sweep file:
        each refusal is one short line that says the value's length; a
        sweep-file value longer than a flag can be is refused as such."""
        d = self.out()
        long = "h" * 60000
        cases = [
            (["--local", "--ddp-hook", long], "(60000 characters)"),
            (["--local", "--ntrainer", long + "," + long], "(60000 characters) is given twice"),
            (["--local", "--order", long], "(60000 characters): interleaved or sequential"),
        ]
        for args, want in cases:
            rc, out, err = self.sweep(*(["--out", d] + args), timeout=60)
            self.assertEqual(rc, 2, err[:500])
            self.assertIn(want, err)
            self.assertLess(len(err), 1200, err[:500])
            self.assertNotIn("h" * 81, err)
        bad = os.path.join(self.reg.workdir, "long.json")
        for doc, want in (({"h" * 1000000: 1}, "(1000000 characters) (dimensions, runs, job)"),
                          ({"dimensions": {"hook": ["h" * 1000000]}}, '"hook" item 1 must be a string or a number'),
                          ({"job": ["--ddp-hook", "h" * 1000000]}, '"job" must be a list of flags')):
            with open(bad, "w") as fh:
                json.dump(doc, fh)
            rc, out, err = self.sweep("--local", "--sweep-file", bad, "--out", d, timeout=60)
            self.assertEqual(rc, 2, err[:500])
            self.assertIn(want, err)
            self.assertLess(len(err), 600, err[:500])

    def run_sweep_into(self, out_dir, preexec=None):
        args = [psb.bin_path("psbench-master"), "sweep", "--local", "--out", out_dir, "--ddp-hook", "rpc_hook"] + JOB
        r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=psb.base_env(), timeout=SWEEP_TIMEOUT, preexec_fn=preexec)
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def test_a_write_error_keeps_its_reason(self):
        """Files of at most 4 KiB (RLIMIT_FSIZE: every write past it fails
        with EFBIG, as on a full disk): the point's master.log is cut short
        and its results.json cannot be written. The point's reason is the
        master's own line naming the file and the error, kept by the sweep
        from the master's output (not the log's last line that fitted), and
        says the log is incomplete; the sweep's own files that cannot be
        written are named with the error."""
        d = self.out()

        def small_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            import resource
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

        rc, out, err = self.run_sweep_into(d, small_files)
        self.assertEqual(rc, 1, out + err)
        row = [line for line in out.splitlines() if "FAILED" in line]
        self.assertEqual(len(row), 1, out)
        self.assertIn("FAILED: exit 1: psbench-master: error: cannot write %s/points/001/results.json: EFBIG" % d,
                      row[0])
        self.assertIn("(points/001/master.log is incomplete: File too large)", row[0])
        self.assertEqual(os.path.getsize(os.path.join(d, "points", "001", "master.log")), 4096)
        self.assertIn("psbench-master sweep: cannot write %s/report.html: EFBIG: File too large" % d, err)

    def test_a_full_disk_keeps_the_reason(self):
        """The same on a file system that fills up (a 64 KiB tmpfs, filled
        but for 8 KiB before the sweep starts): ENOSPC named in the point's
        reason. Needs mount (root here); skipped where it is not allowed."""
        mnt = os.path.join(self.reg.workdir, "small")
        os.makedirs(mnt)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if r.returncode != 0:
            self.skipTest("cannot mount a tmpfs here: %s" % r.stderr.decode().strip())
        try:
            with open(os.path.join(mnt, "filler"), "wb") as fh:
                fh.write(b"\0" * (56 * 1024))
            d = os.path.join(mnt, "sw")
            rc, out, err = self.run_sweep_into(d)
            self.assertEqual(rc, 1, out + err)
            row = [line for line in out.splitlines() if "FAILED" in line]
            self.assertEqual(len(row), 1, out)
            self.assertIn("No space left on device", row[0])
            self.assertIn("psbench-master: error: cannot write", row[0])
        finally:
            subprocess.run(["umount", "-l", mnt])

    # ---- a signal ---------------------------------------------------------------

    def test_a_signal_stops_the_sweep_and_its_files_say_so(self):
        d = self.out()
        p = subprocess.Popen([psb.bin_path("psbench-master"), "sweep", "--local", "--ntrainer", "2,3,4",
                              "--out", d] + JOB, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=psb.base_env(), text=True)
        try:
            lines = []
            deadline = time.time() + SWEEP_TIMEOUT
            while time.time() < deadline:
                line = p.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if line.split()[:1] == ["1"]:  # the first point's row
                    break
            self.assertTrue(lines and lines[-1].split()[:1] == ["1"], "".join(lines))
            p.send_signal(signal.SIGINT)
            rest, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        out = "".join(lines) + rest
        # Issue 39: as the master ends for a signal (128 + its number), not
        # 1, which says a point failed.
        self.assertEqual(p.returncode, 130, out + err)
        self.assertEqual(out.strip().splitlines()[-1],
                         "# stopped by a signal (SIGINT): 1 of 3 point(s) done, 0 failed, 2 not run (marked so in "
                         "sweep.json and sweep.csv); exit 130", out)
        doc = self.load(os.path.join(d, "sweep.json"))
        states = [q["status"] for q in doc["points"]]
        self.assertEqual(states, ["done", "not run", "not run"], states)
        # The point the signal stopped says so (the signal may also come
        # before point 2 starts); one never started has no error.
        if doc["points"][1]["error"] is not None:
            self.assertRegex(doc["points"][1]["error"], r"^stopped by SIGINT during its run: ", doc["points"][1])
        self.assertIsNone(doc["points"][2]["error"], doc["points"][2])
        with open(os.path.join(d, "sweep.csv")) as f:
            by_point = {r["point"]: r["status"] for r in csv.DictReader(f)}
        self.assertEqual(by_point.get("1"), "done", by_point)
        self.assert_no_process_left(d)

    def assert_no_process_left(self, d):
        """No point's master is left."""
        time.sleep(0.5)
        r = subprocess.run(["pgrep", "-f", d], stdout=subprocess.PIPE, text=True)
        self.assertEqual(r.stdout.strip(), "", "processes left: " + r.stdout)

    def test_sigterm_and_sighup_stop_the_sweep(self):
        """Issue 39: SIGTERM, and SIGHUP (a closed terminal; the master
        treats it as SIGTERM) during the first point: the point's master
        ends its run, every point is "not run", the files are written and
        the sweep exits 143 / 129, as the master does."""
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")):
            d = self.out("sw-" + name)
            p = subprocess.Popen([psb.bin_path("psbench-master"), "sweep", "--local", "--ntrainer", "2,3",
                                  "--out", d] + JOB, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=psb.base_env(), text=True)
            try:
                # The first point's master has started once its log exists.
                log = os.path.join(d, "points", "001", "master.log")
                deadline = time.time() + SWEEP_TIMEOUT
                while not os.path.exists(log) and p.poll() is None and time.time() < deadline:
                    time.sleep(0.05)
                self.assertTrue(os.path.exists(log), name)
                p.send_signal(sig)
                out, err = p.communicate(timeout=SWEEP_TIMEOUT)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.assertEqual(p.returncode, 128 + sig, out + err)
            last = out.strip().splitlines()[-1]
            self.assertRegex(last, r"^# stopped by a signal \(%s\): \d of 2 point\(s\) done, 0 failed, \d not run "
                             r"\(marked so in sweep.json and sweep.csv\); exit %d$" % (name, 128 + sig), out)
            doc = self.load(os.path.join(d, "sweep.json"))
            states = [q["status"] for q in doc["points"]]
            self.assertEqual(states[-1], "not run", states)
            self.assertNotIn("failed", states, states)
            self.assert_no_process_left(d)


if __name__ == "__main__":
    unittest.main()
