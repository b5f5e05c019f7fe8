"""End-to-end tests of psbench-master: rendezvous, phases, live metrics over
HTTP (JSON + Prometheus), results files, failures.

Every run uses the Synthetic model with small buckets (a model config
written for the test) so that a pass takes a fraction of a second.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_master.py
"""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import Master, http_get, http_json  # noqa: E402,F401
from test_prometheus import check_exposition  # noqa: E402

RUN_TIMEOUT = psb.RUN_TIMEOUT
STATS_KEYS = {"count", "min", "max", "mean", "variance", "stdev", "p50", "p75", "p90", "p95", "p99"}
# trainer.csv's and server.csv's columns: the statistics, then the job's
# configuration (as a sweep's sweep.csv names it).
CSV_HEADER = ["rank", "metric", "count", "min", "max", "mean", "variance", "stdev", "p50", "p75", "p90", "p95", "p99",
              "hook", "trainer", "model", "ntrainer", "nserver", "bucket_cap_mb", "device", "transport", "run"]


class MasterTests(psb.PsbTestCase):

    def promtool_check(self, text, quiet=False):
        """Prometheus' own parser accepts the exposition (promtool comes
        with Debian's prometheus package: scripts/install-deps.sh test).
        Only the GPU suite (a GPU host without Debian's packages) may lack
        it: there the check is left out, saying so; anywhere else its
        absence fails."""
        if shutil.which("promtool") is None:
            if os.environ.get("PSBENCH_SERVER_DEVICE", "").startswith("cuda"):
                print("promtool check left out: no promtool on this GPU host", file=sys.stderr)
                return
            self.fail("promtool not found (scripts/install-deps.sh test installs it)")
        r = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout.decode() + r.stderr.decode())
        if quiet:  # not even a lint warning
            self.assertEqual(r.stdout.decode().strip() + r.stderr.decode().strip(), "")

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.confdir = os.path.join(self.reg.workdir, "configs")
        os.makedirs(self.confdir)
        self.model_cfg = os.path.join(self.confdir, "models.json")
        with open(self.model_cfg, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 3, "bucket_floats": 2000,
                                                   "sparse": False}},
                       "Sizes": {"model_class": "Synthetic",
                                 "configurations": {"bucket_sizes": [5000, 17, 70000]}},
                       "Slow": {"model_class": "Synthetic",
                                "configurations": {"buckets": 4, "bucket_floats": 262144,
                                                   "sparse": False}}}, f)
        # Its masters' flags (psb.PsbTestCase.master): a --local job of
        # Tiny, 2 epochs, lingering.
        self.master_kw = dict(local=True, model="Tiny", model_config=self.model_cfg, epochs=2, linger=psb.LINGER_S,
                              rpc_timeout=15)

    def check_stats(self, s):
        self.assertEqual(set(s), STATS_KEYS)
        self.assertIsInstance(s["count"], int)
        self.assertLessEqual(s["min"], s["p50"])
        self.assertLessEqual(s["p50"], s["p99"] + 1e-9)
        self.assertLessEqual(s["p99"], s["max"] + 1e-9)

    def check_done_run(self, m, ntrainer, nserver, batches_per_trainer):
        st = self.wait_phase(m, ("done", "failed"))
        self.assertEqual(st["phase"], "done", m.describe())
        self.assertIsNone(st["error"])
        self.assertEqual(st["nodes"], {"trainer": ntrainer, "server": nserver})
        self.assertEqual(st["progress"]["batches_total"], ntrainer * batches_per_trainer)
        self.assertEqual(st["progress"]["batches_done"], ntrainer * batches_per_trainer)
        nodes = http_json(m.http + "/api/v1/nodes")
        self.assertEqual(sorted((n["role"], n["rank"]) for n in nodes),
                         sorted([("trainer", r) for r in range(ntrainer)] +
                                [("server", r) for r in range(nserver)]))
        for n in nodes:
            # The contract's keys, and psbench's extension: what the node
            # computes with (issue 18).
            # psbench's too: a trainer's links to its servers and their
            # transport in a word (issue 28): shared memory on one host
            # unless the suite runs on TCP (PSBENCH_TRANSPORT=tcp).
            want = {"role", "rank", "host", "device", "state", "last_seen_s", "environment"}
            if n["role"] == "trainer" and nserver:
                want |= {"transport", "links"}
                tr = "tcp" if os.environ.get("PSBENCH_TRANSPORT") == "tcp" else "shm"
                self.assertEqual(n["transport"], tr, n)
                self.assertEqual(sorted(l["server"] for l in n["links"]),
                                 sorted(set(l["server"] for l in n["links"])), n)
                for l in n["links"]:
                    self.assertEqual(l["transport"], tr, n)
                    self.assertIsNone(l["note"], n)
            self.assertEqual(set(n), want)
            env = n["environment"]
            for k in ("cpu_model", "cpus", "kernel", "compiler", "simd", "psbench_version"):
                self.assertIn(k, env)
            if n["role"] == "trainer":
                self.assertEqual(env["blas"]["library"], "OpenBLAS")
                self.assertRegex(env["blas"]["version"], r"^\d+\.\d+")
                self.assertTrue(env["blas"]["core"])
                self.assertEqual(env["blas"]["threads"], 1)
            else:
                self.assertIn(env["fold"], ("avx2", "portable"))
        met = http_json(m.http + "/api/v1/metrics")
        self.assertEqual(met["unit"], "ms")
        self.assertEqual(met["phase"], "done")
        tr = met["groups"]["trainer"]
        batch = tr["all"]["batch_level_metric,batch_all"]
        self.check_stats(batch)
        # The timed pass only: the warm-up's samples were reset.
        self.assertEqual(batch["count"], ntrainer * batches_per_trainer)
        self.assertEqual(sorted(tr["ranks"]), sorted(str(r) for r in range(ntrainer)))
        for r in range(ntrainer):
            self.assertEqual(tr["ranks"][str(r)]["batch_level_metric,batch_all"]["count"],
                             batches_per_trainer)
            self.check_stats(tr["ranks"][str(r)]["hook_future_metric,rpc_dense"])
        sv = met["groups"]["server"]
        if nserver == 1:
            # One server, 3 buckets: one future per bucket per batch.
            self.assertEqual(
                sv["all"]["parameter_server_batch_metric,param_index_batch"]["count"],
                3 * batches_per_trainer)
        return met

    def check_config(self, m):
        """/api/v1/config: the resolved configuration, as results.json's
        "configuration" holds it (it was 404)."""
        code, ctype, body = http_get(m.http + "/api/v1/config")
        self.assertEqual(code, 200, body)
        self.assertTrue(ctype.startswith("application/json"), ctype)
        cfg = json.loads(body)
        self.assertEqual(cfg["model"], "Tiny")
        self.assertEqual(cfg["epochs"], 2)
        self.assertIs(cfg["auth"], False)  # the token never: only whether there is one
        self.assertEqual(cfg["resolved"]["model"]["id"], "Tiny")
        self.assertIn("bucket_cap_mb", cfg["resolved"]["trainer"]["configurations"])
        return cfg

    def check_history(self, m, ntrainer):
        """/api/v1/history: the charts' points from the warm-up to `done`,
        oldest first, and none after `done` (the run has ended: the
        master lingers)."""
        h = http_json(m.http + "/api/v1/history")
        self.assertEqual(h["max_points"], 3600)
        pts = h["points"]
        self.assertGreaterEqual(len(pts), 3, pts)
        phases = [p["phase"] for p in pts]
        self.assertEqual(phases[0], "warmup", phases)
        self.assertEqual(phases[-1], "done", phases)
        self.assertEqual(phases.count("done"), 1, phases)
        self.assertIn("running", phases)
        # warmup, then running: the passes apart, in order
        self.assertEqual(phases, sorted(phases, key=["warmup", "running", "done"].index))
        ts = [p["t"] for p in pts]
        self.assertEqual(ts, sorted(ts))
        self.assertTrue(all(p["run"] == 1 for p in pts))
        self.assertEqual({p["pass"] for p in pts if p["phase"] == "running"}, {"timed"})
        last = pts[-1]["groups"]["trainer"]
        met = http_json(m.http + "/api/v1/metrics")["groups"]["trainer"]
        for r in range(ntrainer):
            self.assertEqual(last[str(r)]["batch_level_metric,batch_all"]["count"],
                             met["ranks"][str(r)]["batch_level_metric,batch_all"]["count"])
            self.assertEqual(set(last[str(r)]["batch_level_metric,batch_all"]),
                             {"count", "mean", "p50", "p90", "p99", "window"})
            w = last[str(r)]["batch_level_metric,batch_all"]["window"]
            self.assertEqual(set(w), {"seconds", "count", "mean", "p50", "p90"})
            # The last 10 s of the pass at most: no more than the pass's count.
            self.assertLessEqual(w["count"], last[str(r)]["batch_level_metric,batch_all"]["count"])
        # The master lingers: no more points.
        time.sleep(1.5)
        self.assertEqual(len(http_json(m.http + "/api/v1/history")["points"]), len(pts))

    def check_prometheus(self, m):
        code, ctype, text = http_get(m.http + "/metrics")
        self.assertEqual(code, 200)
        self.assertTrue(ctype.startswith("text/plain"), ctype)
        self.assertIn("# TYPE psbench_metric_duration_seconds summary", text)
        # Labelled with the run and the pass (issue 30); the whole role's
        # view is a family of its own, so that a sum() over the per-rank
        # one counts each sample once. type,name in halves too (issue 38).
        self.assertRegex(text, r'psbench_metric_duration_seconds\{role="trainer",rank="0",'
                               r'metric="batch_level_metric,batch_all",run="1",pass="timed",'
                               r'metric_type="batch_level_metric",metric_name="batch_all",quantile="0.5"\} ')
        self.assertNotIn('rank="all"', text)
        self.assertIn("# TYPE psbench_role_metric_duration_seconds summary", text)
        per_rank = re.findall(r'^psbench_metric_duration_seconds_count\{role="trainer",rank="\d+",'
                              r'metric="batch_level_metric,batch_all"[^}]*\} (\d+)$', text, re.M)
        role = re.findall(r'^psbench_role_metric_duration_seconds_count\{role="trainer",'
                          r'metric="batch_level_metric,batch_all",run="1",pass="timed",'
                          r'metric_type="batch_level_metric",metric_name="batch_all"\} (\d+)$', text, re.M)
        self.assertEqual(len(per_rank), 2, text)
        self.assertEqual(len(role), 1, text)
        self.assertEqual(sum(int(v) for v in per_rank), int(role[0]))
        self.assertRegex(text, r'psbench_phase\{phase="done"\} 1')
        self.assertIn("psbench_batches_completed_total", text)
        self.assertIn('psbench_nodes{role="trainer"', text)
        self.assertIn('psbench_payload_bytes_total{role="trainer",rank="0",direction="out"}', text)
        # Issue 38: the build, the job, the headline as gauges, the step
        # histogram. The figures of a done run do not change: the status,
        # the metrics and the exposition read alike.
        status = http_json(m.http + "/api/v1/status")
        metrics = http_json(m.http + "/api/v1/metrics")
        env = http_json(m.http + "/api/v1/nodes")[0]["environment"]
        transport = os.environ.get("PSBENCH_TRANSPORT") or "auto"
        check_exposition(self, text, status, metrics, 2,
                         {"hook": "rpc_hook", "model": "Tiny", "trainer": "DdpRpcTrainer",
                          "trainer_class": "DdpTrainer", "server_kind": "average", "bucket_cap_mb": "25",
                          "device": "cpu", "transport": transport, "ntrainer": "2", "nserver": "1", "run": "1"},
                         env)
        self.promtool_check(text, quiet=True)

    # DummyData: 100 samples / batch size 10 = 10 batches per epoch, dealt
    # round-robin to the trainers.
    def batches(self, ntrainer, epochs):
        return epochs * (10 // ntrainer)

    def test_done_shown_once_files_are_written(self):
        """A script that polls /api/v1/status for `done` may read the run's
        files the moment it sees it: the master publishes `done` only after
        results.json and the CSVs are written (it once published first)."""
        out = os.path.join(self.reg.workdir, "out")
        m = self.master(out=out)
        deadline = time.monotonic() + RUN_TIMEOUT
        phase = None
        while time.monotonic() < deadline and phase != "done":
            try:  # as fast as the API answers: the window was milliseconds
                phase = http_json(m.http + "/api/v1/status")["phase"]
            except OSError:
                continue
            self.assertNotEqual(phase, "failed", m.describe())
        self.assertEqual(phase, "done", m.describe())
        with open(os.path.join(out, "results.json")) as f:
            self.assertEqual(json.load(f)["phase"], "done")
        for name in ("trainer.csv", "server.csv"):
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        m.signal(signal.SIGTERM)  # leave --linger early
        self.assertEqual(m.wait(20), 0, m.describe())

    def test_history_across_runs(self):
        """--runs 2: the history keeps both runs, each from its warm-up to
        its one `done`, in order; Prometheus labels the figures run 2."""
        m = self.master("--runs", "2")
        deadline = time.monotonic() + RUN_TIMEOUT
        st = None
        while time.monotonic() < deadline:
            st = http_json(m.http + "/api/v1/status")
            if st["phase"] == "failed" or (st["run"], st["phase"]) == (2, "done"):
                break
            time.sleep(0.1)
        self.assertEqual((st["run"], st["phase"]), (2, "done"), m.describe())
        pts = http_json(m.http + "/api/v1/history")["points"]
        runs = [p["run"] for p in pts]
        self.assertEqual(runs, sorted(runs))
        for run in (1, 2):
            phases = [p["phase"] for p in pts if p["run"] == run]
            self.assertEqual(phases[0], "warmup", (run, phases))
            self.assertEqual(phases[-1], "done", (run, phases))
            self.assertEqual(phases.count("done"), 1, (run, phases))
            self.assertIn("running", phases)
        # The warm-up's last figures are kept, whole, however short it was.
        warm = [p for p in pts if p["run"] == 1 and p["phase"] == "warmup"][-1]
        self.assertEqual(warm["pass"], "warmup")
        self.assertEqual(warm["groups"]["trainer"]["all"]["batch_level_metric,batch_all"]["count"],
                         2 * self.batches(2, 2))
        text = http_get(m.http + "/metrics")[2]
        self.assertIn('metric="batch_level_metric,batch_all",run="2",pass="timed"', text)
        self.assertNotIn('run="1"', text)
        m.signal(signal.SIGTERM)  # leave --linger early
        self.assertEqual(m.wait(20), 0, m.describe())

    def test_local_default_shape(self):
        out = os.path.join(self.reg.workdir, "out")
        m = self.master(out=out)
        # Live: the API answers while the job runs.
        self.assertEqual(http_get(m.http + "/healthz")[2], "ok")
        self.check_done_run(m, 2, 1, self.batches(2, 2))
        self.check_prometheus(m)
        cfg = self.check_config(m)
        self.check_history(m, 2)
        m.signal(signal.SIGTERM)  # leave --linger early
        self.assertEqual(m.wait(20), 0, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done")
        self.assertEqual([t["rank"] for t in res["trainers"]], [0, 1])
        for t in res["trainers"]:
            self.assertIn("host", t)
        self.assertIn("batch_level_metric,batch_all", res["groups"]["trainer"]["all"])
        self.assertIn("configuration", res)
        self.assertEqual(cfg, res["configuration"])
        self.assertIn("environment", res)
        # The CSVs: the statistics' columns, then the job's configuration as
        # a sweep's sweep.csv names it, on every row. (The transport is
        # --local's default: $PSBENCH_TRANSPORT's where the suite sets it.)
        transport = os.environ.get("PSBENCH_TRANSPORT") or "auto"
        for g in ("trainer", "server"):
            with open(os.path.join(out, g + ".csv"), newline="") as f:
                rows = list(csv.reader(f))
            self.assertEqual(rows[0], CSV_HEADER, g)
            self.assertGreater(len(rows), 1, g)
            for row in rows[1:]:
                conf = dict(zip(rows[0][13:], row[13:]))
                self.assertEqual(len(row), len(CSV_HEADER), row)
                self.assertEqual(conf, {"hook": "rpc_hook", "trainer": "DdpRpcTrainer", "model": "Tiny",
                                        "ntrainer": "2", "nserver": "1", "bucket_cap_mb": "25", "device": "cpu",
                                        "transport": transport, "run": "1"}, (g, row))
            self.assertIn("batch_level_metric,batch_all" if g == "trainer"
                          else "parameter_server_batch_metric,param_index_batch", [r[1] for r in rows])
        # The tables: combined and per rank, the seed printer's columns; the
        # servers' combined table only from two servers on.
        so = m.stdout()
        self.assertIn("all trainers (ms)", so)
        self.assertIn("trainer 1 (ms)", so)
        self.assertIn("\nserver 0 (ms)\n", so)
        self.assertNotIn("all servers (ms)", so)
        self.assertIn("[trainer 0]", so + m.stderr())
        # diff of a run against itself: every change is 0.
        rc, dout, derr = self.reg.run([psb.bin_path("psbench-master"), "diff",
                                       os.path.join(out, "results.json"),
                                       os.path.join(out, "results.json")])
        self.assertEqual(rc, 0, derr)
        self.assertIn("batch_level_metric,batch_all", dout)
        rc, _, derr = self.reg.run([psb.bin_path("psbench-master"), "diff",
                                    os.path.join(out, "results.json"), "/nonexistent.json"])
        self.assertNotEqual(rc, 0)
        self.assertIn("/nonexistent.json", derr)

    def test_environment(self):
        """What every node computed with is recorded (results.json, the
        nodes API), a trainer whose OpenBLAS runs pre-AVX2 kernels on an
        AVX2 CPU is warned about (by itself, by the master, in
        results.json), and diff shows the difference before the figures."""
        with open("/proc/cpuinfo") as f:
            if " avx2" not in f.read():
                self.skipTest("this CPU has no AVX2: no kernels to fall short of")
        res, text = {}, {}
        for core in ("Prescott", "Haswell"):
            out = os.path.join(self.reg.workdir, "out-" + core)
            m = self.master(out=out, linger=0, epochs=1, env=psb.base_env({"OPENBLAS_CORETYPE": core}))
            self.assertEqual(m.wait(RUN_TIMEOUT), 0, m.describe())
            text[core] = m.stdout() + m.stderr()
            with open(os.path.join(out, "results.json")) as f:
                res[core] = json.load(f)
        for core, r in res.items():
            self.assertEqual([t["environment"]["blas"]["core"] for t in r["trainers"]], [core, core])
            self.assertEqual([s["rank"] for s in r["servers"]], [0])
            self.assertIn(r["servers"][0]["environment"]["fold"], ("avx2", "portable"))
            for t in r["trainers"]:
                self.assertEqual(t["environment"]["cpu_model"], r["environment"]["cpu_model"])
                self.assertRegex(text[core], r"\[trainer %d\] psbench-trainer: trainer %d: psbench [0-9.]+; "
                                             r"BLAS OpenBLAS [0-9.]+, %s kernels, 1 thread; CPU " %
                                 (t["rank"], t["rank"], core))
        warnings = psb.job_warnings(res["Prescott"])
        self.assertEqual(len(warnings), 2, warnings)
        for r, w in enumerate(warnings):
            self.assertTrue(w.startswith("trainer %d (" % r), w)
            self.assertIn("OPENBLAS_CORETYPE=Prescott", w)
        self.assertEqual(text["Prescott"].count("psbench-master: warn: trainer"), 2)
        self.assertEqual(psb.job_warnings(res["Haswell"]), [])
        self.assertNotIn("OPENBLAS_CORETYPE", text["Haswell"])
        rc, dout, derr = self.reg.run([psb.bin_path("psbench-master"), "diff",
                                       os.path.join(self.reg.workdir, "out-Prescott", "results.json"),
                                       os.path.join(self.reg.workdir, "out-Haswell", "results.json")])
        self.assertEqual(rc, 0, derr)
        line = 'every trainer (2): blas.core: "Prescott" -> "Haswell"'
        self.assertIn(line, dout)
        self.assertLess(dout.index("environment differences"), dout.index("== trainer: all ranks =="))

    def test_local_children_follow_listen_address(self):
        """--local children reach the master where it listens (here another
        loopback address than 127.0.0.1, which the master does not serve)."""
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.2:0",
                                     "--http", "127.0.0.1:0", "--linger", "0", "--model", "Tiny",
                                     "--model-config-path", self.model_cfg, "--epochs", "1"], timeout=120)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn("127.0.0.2", err + out)

    def test_by_hand(self):
        m = self.master(local=False)
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen",
                              "127.0.0.1:0"], name="server", cls=psb.Server)
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl],
                              name="trainer%d" % i) for i in range(2)]
        self.check_done_run(m, 2, 1, self.batches(2, 2))
        for p in trs + [srv]:
            self.assertEqual(p.wait(30), 0, p.describe())

    def test_seed_placement_per_device_group(self):
        """Seed placement splits CPU trainers over CPU servers and CUDA
        trainers over the CUDA servers after them (2 + 1 trainers, 1 + 1
        servers: 2 trainers on server 0, 1 on server 1). Nodes are started
        by hand; this build's trainers all run on the CPU."""
        m = self.master("--ntrainer", "2", "--nserver", "1", "--ncudatrainer", "1",
                        "--ncudaserver", "1", local=False)
        for i in range(2):
            self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--rank", str(i),
                            "--listen", "127.0.0.1:0"], name="server%d" % i, cls=psb.Server)
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(i)],
                              name="trainer%d" % i) for i in range(3)]
        st = self.wait_phase(m, ("done", "failed"))
        self.assertEqual(st and st["phase"], "done", m.describe())
        met = http_json(m.http + "/api/v1/metrics")
        ranks = met["groups"]["server"]["ranks"]
        # Every trainer pushes 3 buckets a batch; a server counts each
        # (batch, bucket) once: the same count for both groups.
        b = 10 // 3  # batches per trainer per epoch, 2 epochs
        self.assertEqual(ranks["0"]["parameter_server_batch_metric,param_index_batch"]["count"], 3 * 2 * b)
        self.assertEqual(ranks["1"]["parameter_server_batch_metric,param_index_batch"]["count"], 3 * 2 * b)
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(20), 0, m.describe())
        for t in trs:
            self.assertEqual(t.wait(20), 0, t.describe())

    def test_seed_placement_cuda_groups_of_two(self):
        """Seed placement with a CUDA group ratio above 1 over several CUDA
        servers (the seed's get_cuda_server_rank): --ntrainer 2
        --ncudatrainer 4 --nserver 1 --ncudaserver 2 puts CPU trainers 0, 1
        on server 0, CUDA trainers 2, 3 on server 1 and 4, 5 on server 2.
        The CUDA servers run the cuda device (on the fake GPU unless the
        suite names a real one); the trainers all run on the CPU (CUDA
        trainers are not in this version). Each trainer's assignment is
        checked twice: the server address it was given, and the server whose
        per-trainer lag metric carries its rank."""
        cuda_dev = os.environ.get("PSBENCH_SERVER_DEVICE") or ""
        if not cuda_dev.startswith(("cuda", "fake-cuda")):
            cuda_dev = "fake-cuda"
        m = self.master("--ntrainer", "2", "--nserver", "1", "--ncudatrainer", "4",
                        "--ncudaserver", "2", local=False)
        srvs = []
        for i in range(3):
            dev = [] if i == 0 else ["--device", cuda_dev]
            srvs.append(self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--rank", str(i),
                                        "--listen", "127.0.0.1:0"] + dev, name="server%d" % i, cls=psb.Server))
        for s in srvs:
            s.wait_ready()
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(i)],
                              name="trainer%d" % i) for i in range(6)]
        st = self.wait_phase(m, ("done", "failed"))
        self.assertEqual(st and st["phase"], "done", m.describe())
        want = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}
        # The address each trainer was assigned (its start line).
        for t, s in want.items():
            line = re.search(r"trainer %d: model Synthetic, servers (\S+),? " % t, trs[t].stderr())
            self.assertTrue(line, trs[t].describe())
            self.assertEqual(line.group(1).rstrip(","), srvs[s].addr, "trainer %d" % t)
        # Which server each trainer pushed to: its lag metric is there only.
        met = http_json(m.http + "/api/v1/metrics")
        ranks = met["groups"]["server"]["ranks"]
        self.assertEqual(sorted(ranks), ["0", "1", "2"])
        for s in range(3):
            lag = sorted(int(k.rsplit("_", 1)[1]) for k in ranks[str(s)]
                         if k.startswith("parameter_server_straggler_metric,trainer_lag_"))
            self.assertEqual(lag, [t for t in sorted(want) if want[t] == s], "server %d: %r" % (s, ranks[str(s)]))
            # 3 buckets a batch, 10 // 6 = 1 batch per epoch, 2 epochs.
            self.assertEqual(ranks[str(s)]["parameter_server_batch_metric,param_index_batch"]["count"], 3 * 2)
        # The CUDA slots say so (fake-cuda registers as cuda).
        nodes = {(n["role"], n["rank"]): n for n in http_json(m.http + "/api/v1/nodes")}
        for s in (1, 2):
            self.assertEqual(nodes[("server", s)]["device"], "cuda")
        for t in range(6):
            self.assertEqual(nodes[("trainer", t)]["device"], "cpu")
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(20), 0, m.describe())
        for t in trs:
            self.assertEqual(t.wait(20), 0, t.describe())

    def test_local_cpu_slots_take_the_server_device_default(self):
        """--local starts a CPU server slot without --device, so the server's
        default holds: $PSBENCH_SERVER_DEVICE (here fake-cuda, registered as
        cuda) — what makes the fake-cuda and gpu suites' --local runs run on
        the device they name."""
        m = self.master(env=psb.base_env({"PSBENCH_SERVER_DEVICE": "fake-cuda"}))
        self.check_done_run(m, 2, 1, self.batches(2, 2))
        nodes = {(n["role"], n["rank"]): n["device"] for n in http_json(m.http + "/api/v1/nodes")}
        self.assertEqual(nodes, {("server", 0): "cuda", ("trainer", 0): "cpu", ("trainer", 1): "cpu"})
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(20), 0, m.describe())
        self.assertRegex(m.stderr(), r"\[server 0\] .*listening on .*device cuda \(GPU 0: fake GPU")

    def test_local_cuda_slots_get_device_cuda(self):
        """--local gives `--device cuda` to the CUDA slots (the last
        --ncudaserver servers and --ncudatrainer trainers) and no --device to
        the others. The master is run from a copy beside wrappers of the two
        binaries that record their arguments, then start the real ones with
        `--device cuda` made what this host can run: fake-cuda for a server
        unless the suite names a real GPU, cpu for a trainer (CUDA trainers
        are not in this version)."""
        d = os.path.join(self.reg.workdir, "wrapped", "bin")  # not beside the test's configs/
        os.makedirs(d)
        shutil.copy2(psb.bin_path("psbench-master"), d)
        suite = os.environ.get("PSBENCH_SERVER_DEVICE") or ""
        for name, cuda_as in (("psbench-server", suite if suite.startswith("cuda") else "fake-cuda"),
                              ("psbench-trainer", "cpu")):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write('#!/bin/sh\n'
                        'printf "%%s\\n" "$@" > "%s/$$.args"\n'
                        'prev=\n'
                        'for a do\n'
                        '    shift\n'
                        '    if [ "$prev" = --device ] && [ "$a" = cuda ]; then a=%s; fi\n'
                        '    set -- "$@" "$a"\n'
                        '    prev=$a\n'
                        'done\n'
                        'exec "%s" "$@"\n' % (d, cuda_as, psb.bin_path(name)))
            os.chmod(path, 0o755)
        args = [os.path.join(d, "psbench-master"), "--local", "--listen", "127.0.0.1:0", "--http",
                "127.0.0.1:0", "--linger", str(psb.LINGER_S), "--model", "Tiny", "--model-config-path",
                self.model_cfg, "--epochs", "2", "--rpc-timeout", "15", "--ntrainer", "1", "--ncudatrainer", "1",
                "--nserver", "1", "--ncudaserver", "1"]
        m = self.reg.start(args, name="master", cls=Master)
        m.wait_ports()
        st = self.wait_phase(m, ("done", "failed"))
        self.assertEqual(st["phase"], "done", m.describe())
        nodes = {(n["role"], n["rank"]): n["device"] for n in http_json(m.http + "/api/v1/nodes")}
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(20), 0, m.describe())
        slots = {}
        for fn in os.listdir(d):
            if fn.endswith(".args"):
                with open(os.path.join(d, fn)) as f:
                    argv = f.read().splitlines()
                role = "server" if "--listen" in argv else "trainer"
                slots[(role, int(argv[argv.index("--rank") + 1]))] = argv
        self.assertEqual(sorted(slots), [("server", 0), ("server", 1), ("trainer", 0), ("trainer", 1)])
        for (role, rank), argv in slots.items():
            if rank == 1:
                self.assertEqual(argv[argv.index("--device") + 1], "cuda", (role, argv))
                self.assertEqual(argv.count("--device"), 1, (role, argv))
            else:
                self.assertNotIn("--device", argv, (role, argv))
        # The CUDA server ran the cuda device; the CPU one its default.
        self.assertEqual(nodes[("server", 1)], "cuda")
        self.assertEqual(nodes[("server", 0)], "cuda" if "cuda" in suite else "cpu")

    def test_shard_two_servers(self):
        m = self.master("--nserver", "2", "--ntrainer", "2", "--placement", "shard")
        self.check_done_run(m, 2, 2, self.batches(2, 2))
        met = http_json(m.http + "/api/v1/metrics")
        ranks = met["groups"]["server"]["ranks"]
        self.assertEqual(sorted(ranks), ["0", "1"])
        # 3 buckets over 2 servers: server 0 gets buckets 0 and 2, server 1 bucket 1.
        b = self.batches(2, 2)
        self.assertEqual(ranks["0"]["parameter_server_batch_metric,param_index_batch"]["count"], 2 * b)
        self.assertEqual(ranks["1"]["parameter_server_batch_metric,param_index_batch"]["count"], b)

    def test_bucket_sizes(self):
        """A Synthetic model with buckets of different sizes (a real model's,
        replayed): every result is checked by the trainers, and each bucket
        reaches the server at its own size."""
        m = self.master("--nserver", "2", "--placement", "shard", model="Sizes")
        self.check_done_run(m, 2, 2, self.batches(2, 2))
        met = http_json(m.http + "/api/v1/metrics")
        b = self.batches(2, 2)
        ranks = met["groups"]["server"]["ranks"]
        # buckets 0 and 2 on server 0, bucket 1 on server 1
        self.assertEqual(ranks["0"]["parameter_server_batch_metric,param_index_batch"]["count"], 2 * b)
        self.assertEqual(ranks["1"]["parameter_server_batch_metric,param_index_batch"]["count"], b)
        tr = met["groups"]["trainer"]["all"]
        self.assertEqual(tr["hook_future_metric,rpc_dense"]["count"], 2 * 3 * b)
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(20), 0, m.describe())

    def test_trainer_killed(self):
        # The failed status is read after the run ends: the master lingers
        # for it (with --linger 0 it may be gone by then).
        m = self.master("--transport", "tcp", model="Slow", epochs=400)  # TCP: see test_live_metrics_during_run
        self.wait_phase(m, ("warmup", "running"))
        # Trainer 1 is the master's child started with --rank 1.
        out = subprocess.run(["pgrep", "-P", str(m.pid), "-f", "psbench-trainer.*--rank 1"],
                             stdout=subprocess.PIPE).stdout.decode().split()
        self.assertTrue(out, "no trainer 1 child found")
        os.kill(int(out[0]), signal.SIGKILL)
        st = self.wait_phase(m, ("failed", "done"), timeout=30)
        self.assertEqual(st["phase"], "failed")
        self.assertIn("trainer 1", st["error"])
        psb.end_lingering(self, m, 1)
        self.assertIn("trainer 1", m.stderr())
        # Every child is gone.
        left = subprocess.run(["pgrep", "-P", str(m.pid)], stdout=subprocess.PIPE).stdout.split()
        self.assertEqual(left, [])

    def test_live_metrics_during_run(self):
        # Long enough (some 5 s here) that the live checks below mostly
        # happen while it runs; on a loaded machine the run may be done
        # first, and the master lingers so that they still find it (they
        # take `done` too). Over TCP: the Slow model's time is its
        # traffic, which shared memory moves 5 times faster.
        m = self.master("--transport", "tcp", model="Slow", epochs=150)
        st = self.wait_phase(m, ("running",))
        self.assertIsNone(st["error"])
        # While the timed pass runs, counts grow and every view is well-formed.
        deadline = time.monotonic() + 30
        count = 0
        while time.monotonic() < deadline and count == 0:
            met = http_json(m.http + "/api/v1/metrics")
            all_tr = met["groups"]["trainer"]["all"]
            if "batch_level_metric,batch_all" in all_tr:
                self.check_stats(all_tr["batch_level_metric,batch_all"])
                count = all_tr["batch_level_metric,batch_all"]["count"]
            time.sleep(0.2)
        self.assertGreater(count, 0, m.describe())
        self.assertIn(met["phase"], ("running", "done"))
        code, _, text = http_get(m.http + "/metrics")
        self.assertEqual(code, 200)
        self.promtool_check(text)
        self.assertRegex(text, r'psbench_phase\{phase="(running|done)"\} 1')
        st = http_json(m.http + "/api/v1/status")
        self.assertGreater(st["progress"]["batches_done"], 0)
        self.assertEqual(self.wait_phase(m, ("done", "failed"))["phase"], "done", m.describe())
        psb.end_lingering(self, m, 0)
        self.assertIn("phase done", m.stderr())

    def test_progress_line_says_the_time_left(self):
        """The progress line (every 2 s while a pass runs) gains the time
        left at the pace so far, once a batch is in (issue 40): a run far
        too long to end first (stopped here once the line is seen)."""
        m = self.master(epochs=100000, linger=0)
        line = re.compile(r"^psbench-master: (warmup|running): ([0-9]+)/([0-9]+) batches \([0-9]+%\), "
                          r"[0-9.]+ s(.*)$", re.M)
        deadline = time.monotonic() + RUN_TIMEOUT
        seen = []
        while time.monotonic() < deadline and m.alive():
            seen = [g for g in line.findall(m.stderr()) if int(g[1]) > 0]
            if seen:
                break
            time.sleep(0.2)
        self.assertTrue(seen, m.describe())
        # In the warm-up: its rest and the timed pass, at its pace.
        self.assertRegex(seen[0][3], r"^, time left ~([0-9]+\.[0-9] s|[0-9]+ s|[0-9]+ min [0-9]+ s)$", m.describe())
        for g in line.findall(m.stderr()):
            self.assertEqual(int(g[1]) > 0, g[3].startswith(", time left ~"), g)  # none before a batch is in
        m.stop()

    def test_token(self):
        m = self.master("--token", "s3cret", local=False, linger=0)
        rc, out, err = self.reg.run([psb.bin_path("psbench-trainer"), "--master", m.ctl], timeout=30)
        self.assertNotEqual(rc, 0)
        self.assertIn("token", err)
        env = psb.base_env()
        env["PSBENCH_TOKEN"] = "s3cret"
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen",
                              "127.0.0.1:0"], env=env, name="server", cls=psb.Server)
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl], env=env,
                              name="trainer%d" % i) for i in range(2)]
        for p in trs + [srv]:
            self.assertEqual(p.wait(60), 0, p.describe())
        self.assertEqual(m.wait(30), 0, m.describe())

    def test_signals_end_the_run(self):
        """SIGINT, SIGTERM and SIGHUP during a run: the run fails naming the
        signal (status, results.json, the master's last line), every child
        is stopped, and the master exits 128 + the signal's number, as
        shells expect (130, 143, 129)."""
        for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")):
            out = os.path.join(self.reg.workdir, "out-" + name)
            m = self.master("--transport", "tcp", model="Slow", epochs=400, linger=0, out=out)  # TCP: see test_live_metrics_during_run
            self.wait_phase(m, ("warmup", "running"))
            kids = subprocess.run(["pgrep", "-P", str(m.pid)], stdout=subprocess.PIPE).stdout.split()
            self.assertEqual(len(kids), 3)
            m.signal(sig)
            rc = m.wait(30)
            self.assertEqual(rc, 128 + sig, (name, m.describe()))
            last = m.stderr().strip().splitlines()[-1]
            self.assertEqual(last, "psbench-master: run failed: interrupted (%s)" % name, m.describe())
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            self.assertEqual(res["phase"], "failed")
            self.assertEqual(res["error"], "interrupted (%s)" % name)
            for pid in kids:
                self.assertFalse(os.path.exists("/proc/%d" % int(pid)) and
                                 open("/proc/%d/stat" % int(pid)).read().split()[2] != "Z",
                                 "child %s survived the master (%s)" % (pid, name))

    def test_results_on_full_disk(self):
        """--out on a full file system (a 256 KiB tmpfs, filled, in a
        private mount namespace): results.json and the CSVs are written to
        a temporary file and renamed, so the complete files of an earlier
        run stay as they were, no temporary or cut file is left, the error
        names ENOSPC, and the master exits non-zero."""
        if os.geteuid() != 0 or not shutil.which("unshare"):
            self.skipTest("needs root and unshare(1) to mount a small tmpfs in a private mount namespace")
        out = os.path.join(self.reg.workdir, "full")
        os.makedirs(out)
        old = {"results.json": json.dumps({"phase": "done", "old": True}, indent=2) + "\n",
               "trainer.csv": "rank,metric\nall,\"old\"\n", "server.csv": "rank,metric\nall,\"old\"\n"}
        seed = os.path.join(self.reg.workdir, "seed")
        os.makedirs(seed)
        for name, text in old.items():
            with open(os.path.join(seed, name), "w") as f:
                f.write(text)
        after = os.path.join(self.reg.workdir, "after")
        master = [psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                  "--linger", "0", "--model", "Tiny", "--model-config-path", self.model_cfg, "--epochs", "1",
                  "--out", out]
        # Inside the namespace: mount, put the old run's files, fill the
        # rest, run the master, then copy out what it left.
        script = ("set -u; mount -t tmpfs -o size=256k psbench-full \"$1\" || exit 99; cp \"$2\"/* \"$1\"/; "
                  "head -c 1048576 /dev/zero > \"$1\"/filler 2>/dev/null; "
                  "shift 3; \"$@\"; rc=$?; mkdir -p \"$A\"; ls -A \"$O\" > \"$A\"/listing; "
                  "cp \"$O\"/*.json \"$O\"/*.csv \"$A\"/ 2>/dev/null; exit $rc")
        env = psb.base_env({"A": after, "O": out})
        p = self.reg.start(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", out, seed,
                            "unused"] + master, env=env, name="fullmaster")
        rc = p.wait(120)
        if rc == 99:
            self.skipTest("cannot mount a tmpfs here: " + p.stderr()[-300:])
        self.assertNotEqual(rc, 0, p.describe())
        err = p.stderr()
        self.assertRegex(err, r"cannot write %s/results\.json: ENOSPC: No space left on device"
                         % re.escape(out), p.describe())
        self.assertIn("phase done", err)  # the run itself completed
        with open(os.path.join(after, "listing")) as f:
            listing = sorted(f.read().split())
        self.assertEqual(listing, ["filler", "results.json", "server.csv", "trainer.csv"], listing)
        for name, text in old.items():
            with open(os.path.join(after, name)) as f:
                self.assertEqual(f.read(), text, name)

    @staticmethod
    def non_loopback_address():
        """An IPv4 address of this host outside 127.0.0.0/8, or None."""
        import socket
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
                ip = s.getsockname()[0]
        except OSError:
            return None
        return None if ip.startswith("127.") or ip == "0.0.0.0" else ip

    @staticmethod
    def hold(port, n, source="127.0.0.1", partial=False):
        """n connections to the HTTP port from `source` that send nothing,
        or half a request line."""
        import socket
        socks = []
        for _ in range(n):
            c = socket.create_connection(("127.0.0.1" if source.startswith("127.") else source, port),
                                         timeout=10, source_address=(source, 0))
            if partial:
                c.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            socks.append(c)
        return socks

    @staticmethod
    def closed_by_server(c, timeout):
        """Whether the server closes c within timeout seconds."""
        import socket
        c.settimeout(timeout)
        try:
            return c.recv(4096) == b""
        except socket.timeout:
            return False
        except OSError:
            return True  # reset

    def test_health_with_slow_clients(self):
        """A slow client holding connections cannot starve other clients of
        /healthz: loopback is not held to the per-address limit (a local
        probe shares 127.0.0.1 with a local flood), a connection that sends
        no complete request is closed within seconds (HTTP_REQUEST_TIMEOUT_S),
        while a keep-alive connection that sent one stays for the longer
        idle timeout. From another address, the 65th connection is refused
        at once and the health check from loopback still answers."""
        import socket
        m = self.master(local=False, linger=0)
        port = int(m.http.rsplit(":", 1)[1])
        keep = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.addCleanup(keep.close)
        req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        keep.sendall(req)
        self.assertIn(b"200 OK", keep.recv(4096))
        t_keep = time.monotonic()
        flood = self.hold(port, 40) + self.hold(port, 40, partial=True)
        for c in flood:
            self.addCleanup(c.close)
        # 80 connections from 127.0.0.1 are open; the health check answers.
        code, _, body = http_get(m.http + "/healthz", timeout=10)
        self.assertEqual((code, body), (200, "ok"))
        # None of them completed a request: each is closed within seconds
        # (bounded wait; the limit is 5 s without progress).
        for c in flood:
            self.assertTrue(self.closed_by_server(c, 20), "a connection without a request stayed open")
        # The keep-alive connection that sent a request outlives that limit.
        time.sleep(max(0.0, 7.0 - (time.monotonic() - t_keep)))
        keep.sendall(req)
        self.assertIn(b"200 OK", keep.recv(4096))
        ip = self.non_loopback_address()
        if ip is None:
            sys.stderr.write("test_health_with_slow_clients: no non-loopback address; skipping the "
                             "per-address limit check\n")
            return
        m2 = self.master("--http", "0.0.0.0:0", local=False, linger=0)
        port2 = int(m2.http.rsplit(":", 1)[1])
        held = self.hold(port2, 64, source=ip)
        for c in held:
            self.addCleanup(c.close)
        extra = self.hold(port2, 1, source=ip)[0]
        self.addCleanup(extra.close)
        self.assertTrue(self.closed_by_server(extra, 4), "a 65th connection from %s was accepted" % ip)
        code, _, body = http_get("http://127.0.0.1:%d/healthz" % port2, timeout=10)
        self.assertEqual((code, body), (200, "ok"))

    def test_http_read_only(self):
        m = self.master(epochs=1)
        self.wait_phase(m, ("done",))
        self.assertEqual(http_get(m.http + "/api/v1/status", method="POST")[0], 405)
        self.assertEqual(http_get(m.http + "/api/v1/status", method="DELETE")[0], 405)
        self.assertEqual(http_get(m.http + "/nope")[0], 404)
        self.assertEqual(http_get(m.http + "/../../etc/passwd")[0], 404)
        code, ctype, body = http_get(m.http + "/")
        self.assertEqual(code, 200)
        self.assertTrue(ctype.startswith("text/html"), ctype)
        self.assertEqual(http_get(m.http + "/api/v1/status", method="HEAD")[0], 200)

    def test_server_stop_right_behind_assign(self):
        """A master whose `assign` and `stop` reach a server in one read: the
        server acts on the stop (it used to lose the bytes read with the
        assignment and wait forever)."""
        import socket
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        port = ls.getsockname()[1]
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", "127.0.0.1:%d" % port,
                              "--listen", "127.0.0.1:0"], name="server")
        ls.settimeout(20)
        c, _ = ls.accept()
        ls.close()
        try:
            c.settimeout(10)
            self.assertTrue(c.recv(65536))  # register

            def ctl(kind, body):
                data = json.dumps(body).encode()
                return psb.encode_frame({"type": kind, "payload": len(data)}, data)
            c.sendall(ctl("assign", {"rank": 0, "trainers": 1, "kind": "average"}) +
                      ctl("stop", {"status": "failed", "reason": "test stop"}))
            self.assertEqual(srv.wait(10), 1, srv.describe())
            self.assertIn("test stop", srv.stderr())
        finally:
            c.close()

    def fake_node(self, m, role, **extra):
        """A raw control connection that registers as `role` (extra: more
        fields of the register body)."""
        import socket
        host, port = m.ctl.rsplit(":", 1)
        c = socket.create_connection((host, int(port)), timeout=10)
        self.addCleanup(c.close)
        body = {"role": role, "host": "fake", "device": "cpu"}
        body.update(extra)
        if role == "server":
            body.update({"listen_host": "127.0.0.1", "port": 9})
        self.ctl_send(c, "register", body)
        return c

    @staticmethod
    def ctl_send(c, kind, body):
        data = json.dumps(body).encode()
        c.sendall(psb.encode_frame({"type": kind, "payload": len(data)}, data))

    def test_nccl_refused_for_two_trainers_on_one_gpu(self):
        """NCCL cannot hold two ranks on one GPU: CUDA trainers of one NCCL
        group whose registrations place them on the same GPU of one host
        (plain --device cuda: GPU rank mod the GPUs it shows) end the run
        at the second registration, naming both, the GPU and what to do.
        Other hosts, other GPUs, or --backend gloo: no refusal."""
        def gpus(*ids):
            return {"gpus": [{"name": "G", "uuid": u} for u in ids], "cuda_index": -1}
        job = ("--model", "DummyModel", "--trainer", "DdpTrainer", "--ntrainer", "0", "--ncudatrainer", "2",
               "--nserver", "0")

        def master(backend):
            m = self.reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                                "--linger", "0", "--backend", backend] + list(job), name="master", cls=Master)
            m.wait_ports()
            return m
        # Two trainers on a host with one GPU: refused.
        m = master("nccl")
        self.fake_node(m, "trainer", device="cuda", host="h1", environment=gpus("GPU-aaaa"))
        self.fake_node(m, "trainer", device="cuda", host="h1", environment=gpus("GPU-aaaa"))
        self.assertEqual(m.wait(20), 1, m.describe())
        self.assertRegex(m.stderr(), r"--backend nccl: trainers 0 and 1 would share GPU GPU-aaaa on h1, and NCCL "
                                     r"cannot hold two ranks on one GPU: use --backend gloo")
        # Two GPUs on the host (ranks 0 and 1 take one each), another host,
        # an explicit index, or Gloo: the run waits for its servers-less
        # start as usual (no refusal within a second).
        for backend, second in (("nccl", dict(host="h1", environment=gpus("GPU-aaaa", "GPU-bbbb"))),
                                ("nccl", dict(host="h2", environment=gpus("GPU-aaaa"))),
                                ("multi", dict(host="h1", environment={"gpus": [{"uuid": "GPU-aaaa"}, {"uuid": "GPU-bbbb"}],
                                                                      "cuda_index": 1})),
                                ("gloo", dict(host="h1", environment=gpus("GPU-aaaa")))):
            with self.subTest(backend=backend, second=second):
                first_env = gpus("GPU-aaaa", "GPU-bbbb") if "GPU-bbbb" in json.dumps(second) else gpus("GPU-aaaa")
                m = master(backend)
                a = self.fake_node(m, "trainer", device="cuda", host="h1", environment=first_env)
                b = self.fake_node(m, "trainer", device="cuda", **second)
                time.sleep(1.0)
                self.assertIsNone(m.returncode, m.describe())
                self.assertNotIn("would share GPU", m.stderr())
                a.close()
                b.close()
                m.stop()

    def test_control_messages_out_of_turn_or_bad(self):
        """Control messages a node may not send now, or counters that are
        not whole numbers >= 0, fail the run with a reason rather than
        skipping the passes or corrupting the totals."""
        cases = (("pass_done", {"batches_done": 10}, "sent pass_done out of turn"),
                 ("metrics", {"batches_done": -1, "bytes_in": -5}, "counters must be whole numbers"))
        for kind, body, why in cases:
            m = self.master("--ntrainer", "1", "--nserver", "1", local=False, linger=0)
            srv = self.fake_node(m, "server")
            tr = self.fake_node(m, "trainer")
            time.sleep(0.3)  # both assigned
            self.ctl_send(tr, kind, body)
            self.assertEqual(m.wait(20), 1, m.describe())
            self.assertIn(why, m.stderr())
            srv.close()
            tr.close()

    def test_bad_flags(self):
        for args, word in ((["--model", "Tiny", "--ntrainer", "3", "--nserver", "2"], "divisible"),
                           (["--batch_size", "0"], "batch"),
                           (["--model", "NoSuchModel"], "NoSuchModel"),
                           (["--bogus"], "bogus"),
                           # --out is created (parents too) or refused before the run
                           (["--model", "Tiny", "--out", "/proc/no-such-dir/out"], "cannot create")):
            rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--local",
                                         "--model-config-path", self.model_cfg] + args)
            self.assertNotEqual(rc, 0, args)
            self.assertIn(word, err, (args, err))
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--help"])
        self.assertEqual(rc, 0)
        self.assertIn("--batch-size", out)

    # The seed launcher's flags that set a trainer configuration key, and
    # its experiment scripts' --create_optimizer and --lr (issue 26):
    # (dash spelling, underscore spelling, key, allowed value, refused value,
    # what the refusal names as allowed).
    SEED_TRAINER_FLAGS = (
        ("--preprocess-data", "--preprocess_data", "preprocess_data", "preprocess_dummy_data", "real",
         '"preprocess_dummy_data" (the only one psbench has)'),
        ("--create-criterion", "--create_criterion", "create_criterion", "cel", "mse",
         '"cel" (the only one psbench has)'),
        ("--create-ddp-model", "--create_ddp_model", "create_ddp_model", "basic_ddp_model", "fancy",
         '"basic_ddp_model" (the only one psbench has)'),
        ("--hook-state", "--hook_state", "hook_state", "BasicHookState", "FancyHookState",
         '"BasicHookState" (the only one psbench has)'),
        ("--iteration-step", "--iteration_step", "iteration_step", "basic_iteration_step", "fancy_step",
         '"basic_iteration_step" (the only one psbench has)'),
        ("--create-optimizer", "--create_optimizer", "create_optimizer", "sgd_optimizer", "adam_optimizer",
         '"sgd_optimizer" (the only one psbench has)'),
        ("--lr", "--lr", "lr", "0.25", "fast", "a number in (0, 3.40282346638529e+38]"),
    )

    def test_seed_trainer_flags_reach_the_trainers(self):
        """Every one of them, in the spellings the seed's scripts use
        (--hook_state X, --create_optimizer=X), reaches the configuration
        the trainers are assigned: the args line and results.json
        (configuration, and its resolved trainer entry: the assignment's)."""
        out = os.path.join(self.reg.workdir, "out")
        args = []
        for i, (dash, under, key, good, bad, allowed) in enumerate(self.SEED_TRAINER_FLAGS):
            spelling = (dash, under)[i % 2]
            args += ["%s=%s" % (spelling, good)] if i % 3 == 0 else [spelling, good]
        m = self.master(*args, out=out, epochs=1, linger=0)
        self.assertEqual(m.wait(RUN_TIMEOUT), 0, m.describe())
        echo = [l for l in m.stdout().splitlines() if l.startswith("args: ")]
        self.assertEqual(len(echo), 1, m.stdout())
        echo = json.loads(echo[0][len("args: "):])
        with open(os.path.join(out, "results.json")) as f:
            conf = json.load(f)["configuration"]
        tc = conf["resolved"]["trainer"]["configurations"]
        for dash, under, key, good, bad, allowed in self.SEED_TRAINER_FLAGS:
            want = 0.25 if key == "lr" else good
            self.assertEqual(echo[key], want, (key, echo))
            self.assertEqual(conf[key], want, (key, conf))
            self.assertEqual(tc[key], want, (key, tc))
        self.assertNotEqual(tc["lr"], 50.0)  # the file's, replaced

    def test_seed_trainer_flags_refused(self):
        """A value psbench does not have, in either spelling: exit 2, one
        line naming the flag and what it must be."""
        for dash, under, key, good, bad, allowed in self.SEED_TRAINER_FLAGS:
            for spelling in {dash, under}:
                self.assert_master_refuses([spelling, bad], ["%s: must be %s, got " % (dash, allowed), bad])
        # The seed's --ddp-hook too, with its list.
        for spelling in ("--ddp-hook", "--ddp_hook"):
            self.assert_master_refuses([spelling, "ring_hook"], ["--ddp-hook: 'ring_hook' is not rpc_hook, allreduce_hook, "
                                                          "sparse_rpc_hook or hybrid_hook"])
        # A class without the key is refused, naming what it takes.
        self.assert_master_refuses(["--server", "BatchUpdateParameterServer", "--model", "BatchUpdateLinear",
                             "--trainer", "BatchUpdateTrainer", "--lr", "0.1"],
                            ["--lr 0.1: trainer 'BatchUpdateTrainer' (BatchUpdateTrainer) has no \"lr\" "
                             "(it takes batch_size, batches)"])
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--help"])
        self.assertEqual(rc, 0)
        for dash, _, _, _, _, _ in self.SEED_TRAINER_FLAGS:
            self.assertIn(dash, out)
        self.assertIn("Where psbench's defaults differ from PyTorch's launcher", out)

    def config_copy(self, name, edit):
        """configs/NAME with edit(dict) applied, written to the test's dir."""
        with open(os.path.join(os.path.dirname(psb.HERE), "..", "configs", name)) as f:
            conf = json.load(f)
        edit(conf)
        path = os.path.join(self.confdir, name)
        with open(path, "w") as f:
            json.dump(conf, f)
        return path

    def assert_master_refuses(self, args, want):
        """The master refuses args before it starts anything: exit 2, one
        line naming what is wrong, no args line, no --out directory, no
        child's output."""
        out_dir = os.path.join(self.reg.workdir, "never-made")
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                                     "--http", "127.0.0.1:0", "--out", out_dir] + args)
        self.assertEqual(rc, 2, (args, out, err))
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        for w in want:
            self.assertIn(w, err, (args, err))
        self.assertNotIn("args:", out)
        self.assertNotIn("[trainer", err)
        self.assertFalse(os.path.exists(out_dir))
        return err

    def test_config_values_refused(self):
        """A configuration value of the wrong type or out of range is
        refused with the file, the id, the key, what it must be and what it
        is; it never runs with a default in its place."""
        def lr_fast(t):
            t["DdpRpcTrainer"]["configurations"]["lr"] = "fast"
        path = self.config_copy("trainer_configurations.json", lr_fast)
        self.assert_master_refuses(["--model", "Tiny", "--model-config-path", self.model_cfg,
                             "--trainer-config-path", path],
                            [path + ': trainer "DdpRpcTrainer": "lr" must be a number in (0, 3.40282346638529e+38], '
                                    'got "fast" (a string)'])

        def cap_negative(t):
            t["DdpTrainer"]["configurations"]["bucket_cap_mb"] = -1
        path = self.config_copy("trainer_configurations.json", cap_negative)
        err = self.assert_master_refuses(["--model", "DummyModel", "--trainer", "DdpTrainer",
                                   "--trainer-config-path", path],
                                  ['"bucket_cap_mb" must be a number in (0, 1048576], got -1'])
        self.assertNotIn("18446744073709551615", err)

        def no_layers(m):
            del m["DummyModel"]["configurations"]["dense_layers_count"]
        path = self.config_copy("model_configurations.json", no_layers)
        self.assert_master_refuses(["--model-config-path", path],
                            [path + ': model "DummyModel": "dense_layers_count" must be a whole number in '
                                    '1..10000, got nothing'])

        def unknown_trainer(t):
            t["DdpRpcTrainer"]["trainer_class"] = "FancyTrainer"
        path = self.config_copy("trainer_configurations.json", unknown_trainer)
        self.assert_master_refuses(["--model", "Tiny", "--model-config-path", self.model_cfg,
                             "--trainer-config-path", path],
                            ['"trainer_class" must be one of DdpTrainer, BatchUpdateTrainer, HybridTrainer, '
                             'got "FancyTrainer"'])

    def test_config_value_named_before_placement(self):
        """The seed's DDP + RPC benchmark with a bad value in its files and
        counts the seed placement would refuse (2 trainers, 8 servers): the
        file's key is named, not the divisibility it would upset."""
        def neg_dim(m):
            m["HybridModel"]["configurations"]["embedding_dim"] = -64

        def huge_table(m):
            m["HybridModel"]["configurations"]["num_embeddings"] = 10 ** 12

        def lr_text(s):
            s["EmbeddingParameterServer"]["configurations"]["lr"] = "slow"
        flags = ["--model", "HybridModel", "--trainer", "HybridTrainer", "--server", "EmbeddingParameterServer",
                 "--ntrainer", "2", "--nserver", "8"]
        for name, edit, opt, want in (
                ("model_configurations.json", neg_dim, "--model-config-path",
                 'model "HybridModel": "embedding_dim" must be a whole number in 1..1048576, got -64'),
                ("model_configurations.json", huge_table, "--model-config-path",
                 'model "HybridModel": "num_embeddings" must be a whole number in 1..2147483648, '
                 'got 1000000000000'),
                ("server_configurations.json", lr_text, "--server-config-path",
                 'server "EmbeddingParameterServer": "lr" must be a number in (0, 1000000], got "slow"')):
            path = self.config_copy(name, edit)
            err = self.assert_master_refuses(flags + [opt, path], [path + ": " + want])
            self.assertNotIn("divisible", err)
        # The same flags with the shipped files pass the files' checks and
        # the placement's (this benchmark has no seed placement): only the
        # CPU trainers' --backend nccl, added so that nothing starts, is
        # refused.
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http",
                                     "127.0.0.1:0", "--backend", "nccl"] + flags)
        self.assertEqual(rc, 2, err)
        self.assertIn("--backend nccl needs CUDA trainers", err)
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--version"])
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    psb.main()
