"""The batch-update benchmark (the seed's BatchUpdateParameterServer,
parameter_server_test.py): psbench-trainer --model batch-update and the
master's BatchUpdateParameterServer / Linear / BatchUpdateTrainer configs.

- Final parameters (--params-out) equal a Python recomputation from the
  deterministic data (bu_reference.py: rng streams, Linear init, inputs,
  L1 gradients, mean, SGD with momentum) within float tolerance, and every
  trainer ends with the same parameters: one server, two servers (parts),
  a warm-up pass before the timed one.
- Server errors (an error frame, a trainer lost, a model of another shape)
  end the trainer non-zero with one line saying why.
- The master: config errors, the args echo, "benchmark warmup done", "Time
  spent training", the seed's debug lines, the metrics in results.json, the
  API and Prometheus, by hand and with --local.
- A model gone bad under the master (the stand-in's NaN parameters: no lr
  the real server accepts overflows a Linear model's L1 steps) fails the
  run where the loss diverged, in results.json (error, trainers[].diverged)
  and every trainer's last line; --allow-divergence ends it done, warned.

The server is `psbench-server --kind batch-update` when the build has it,
else the Python stand-in bu_mock_server.py (tests that need --local, which
starts the real binary, are skipped then).

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_batch_update.py
"""
import csv
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
import bu_reference as ref  # noqa: E402
from psb import http_get, http_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK = os.path.join(HERE, "bu_mock_server.py")
TRAINER_METRICS = ("batch_level_metric,batch_all", "forward_metric,forward_pass",
                   "backward_metric,backward", "hook_future_metric,update_and_fetch_model",
                   "method_metric,get_model")
SEED_LINES = ("processing one batch", "reporting grads", "got updated model")


def real_server_has_kind():
    try:
        r = subprocess.run([psb.bin_path("psbench-server"), "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"batch-update" in r.stdout


REAL = real_server_has_kind()


def server_cmd():
    if REAL:
        return [psb.bin_path("psbench-server")]
    return [sys.executable, MOCK]


class BatchUpdate(psb.PsbTestCase):

    # ---- helpers -----------------------------------------------------------

    def bu_server(self, trainers, part="0/1", extra=(), cmd=None):
        args = (cmd or server_cmd()) + ["--standalone", "--trainers", str(trainers), "--listen",
                                        "%s:0" % psb.HOST, "--kind", "batch-update", "--part", part]
        s = self.reg.start(args + list(extra), name="server", cls=psb.Server)
        s.wait_ready()
        return s

    def bu_trainer(self, servers, rank, batches, extra=(), params=True):
        addrs = ",".join(s.addr for s in servers)
        args = [psb.bin_path("psbench-trainer"), "--server", addrs, "--rank", str(rank), "--model",
                "batch-update", "--batches", str(batches), "--connect-timeout", "10",
                "--rpc-timeout", "30"]
        out = None
        if params:
            out = os.path.join(self.reg.workdir, "params%d-%d.bin" % (rank, self.reg.n))
            args += ["--params-out", out]
        p = self.reg.start(args + list(extra), name="trainer%d" % rank)
        p.params_path = out
        return p

    def assert_params_close(self, got, want, start):
        """got == want within float32 rounding, measured against how far
        training moved the parameters from `start`."""
        self.assertEqual(len(got), len(want))
        moved = max(abs(a - b) for a, b in zip(want, start))
        err = max(abs(a - b) for a, b in zip(got, want))
        self.assertGreater(moved, 1e-5, "training did not move the parameters")
        # float32 sums in another order: far below one step's size
        self.assertLess(err, 1e-3 * moved + 1e-7, "max error %g, moved %g" % (err, moved))

    def run_standalone(self, trainers, servers, batches, extra=(), passes=(None,)):
        n = len(servers)
        srv = [self.bu_server(trainers, "%d/%d" % (p, n)) for p in range(n)]
        # extra: flags, or a function of the rank giving them
        trs = [self.bu_trainer(srv, r, batches, extra(r) if callable(extra) else extra)
               for r in range(trainers)]
        for t in trs:
            self.assertEqual(t.wait(120), 0, t.describe())
        params = [ref.read_params(t.params_path) for t in trs]
        for p in params[1:]:
            self.assertEqual(p, params[0], "trainers ended with different parameters")
        want, _ = ref.train(100, 30, 20, batches, trainers, 0, passes=passes)
        self.assert_params_close(params[0], want, ref.linear_init(100, 30, 0))
        return trs

    # ---- standalone --------------------------------------------------------

    def test_two_trainers_one_server(self):
        trs = self.run_standalone(2, [None], 6, extra=("--log-level", "debug"))
        out, err = trs[0].stdout(), trs[0].stderr()
        self.assertRegex(out, r"psbench-trainer 0: 6 batches, 6 server updates in [0-9.]+ s "
                              r"\([0-9.]+ rounds/s\)")
        for k in TRAINER_METRICS:
            self.assertEqual(psb.metric_count(out, k), 1 if k == "method_metric,get_model" else 6,
                             (k, out))
        # The seed's lines, in order, once per batch.
        lines = [l for l in err.splitlines() if "trainer0 " in l]
        want = ["trainer0 " + s for s in SEED_LINES] * 6
        self.assertEqual([l[l.index("trainer0 "):] for l in lines], want, err)

    def test_two_servers_split_the_model(self):
        self.run_standalone(2, [None, None], 5)

    def test_three_servers_one_trainer(self):
        self.run_standalone(1, [None, None, None], 4)

    def test_warmup_pass_then_timed_pass(self):
        """--warmup-batches: a pass of W batches, then the timed pass; the
        server (standalone, no reset) goes on from the warm-up's state, and
        both passes draw the same inputs from the start."""
        def flags(rank):
            return ("--warmup-batches", "2", "--summary-json",
                    os.path.join(self.reg.workdir, "s%d.json" % rank))
        trs = self.run_standalone(2, [None], 3, extra=flags, passes=(2, 3))
        with open(os.path.join(self.reg.workdir, "s0.json")) as f:
            s = json.load(f)
        self.assertEqual(s["batches"], 3)
        self.assertEqual(s["rounds"], 3)
        self.assertGreater(s["rounds_per_s"], 0)
        self.assertEqual(psb.metric_count(trs[0].stdout(), "batch_level_metric,batch_all"), 3)

    def test_other_seed_and_sizes(self):
        srv = [self.bu_server(2, "%d/2" % p, extra=("--in-features", "7", "--out-features", "5",
                                                     "--seed", "9")) for p in range(2)]
        extra = ("--in-features", "7", "--out-features", "5", "--seed", "9", "--batch-size", "3")
        trs = [self.bu_trainer(srv, r, 4, extra) for r in range(2)]
        for t in trs:
            self.assertEqual(t.wait(60), 0, t.describe())
        got = ref.read_params(trs[0].params_path)
        self.assertEqual(got, ref.read_params(trs[1].params_path))
        want, _ = ref.train(7, 5, 3, 4, 2, 9)
        self.assert_params_close(got, want, ref.linear_init(7, 5, 9))

    # ---- errors --------------------------------------------------------------

    def assert_one_line_failure(self, p, *needles):
        rc = p.wait(60)
        self.assertNotEqual(rc, 0, p.describe())
        # Everything but the start-up line (info) is the one-line reason.
        err = [l for l in p.stderr().splitlines() if not re.match(r"psbench-trainer: rank \d+: Linear\(", l)]
        self.assertEqual(len(err), 1, p.describe())
        for n in needles:
            self.assertIn(n, err[0])

    def test_error_frame_ends_the_trainer(self):
        # The stand-in answers the first push with an error, as a server
        # would a push it refuses.
        s = self.bu_server(1, extra=("--fail-with", "shape_mismatch"), cmd=[sys.executable, MOCK])
        t = self.bu_trainer([s], 0, 3, params=False)
        self.assert_one_line_failure(t, "shape_mismatch", "rank 0")

    def test_loss_diverged_ends_the_trainer(self):
        """Parameters that are no longer numbers (the stand-in answers
        round 1 with a NaN): the next batch's loss is NaN, and the trainer
        stops there, saying where, rather than pushing NaN gradients on."""
        s = self.bu_server(1, extra=("--nan-from-round", "1"), cmd=[sys.executable, MOCK])
        t = self.bu_trainer([s], 0, 5, params=False)
        # Rounds 0 and 1 are numbers; round 1's answer (the parameters of
        # batch 2) holds the NaN.
        self.assert_one_line_failure(t, "rank 0: loss diverged at epoch 0, batch 2 (loss = nan)",
                                     "lower the learning rate")

    def test_model_of_another_shape(self):
        s = self.bu_server(1, extra=("--out-features", "31"))
        t = self.bu_trainer([s], 0, 3, params=False)
        self.assert_one_line_failure(t, "elements", "in_features/out_features")

    def test_servers_out_of_part_order(self):
        srv = [self.bu_server(1, "%d/2" % p) for p in range(2)]
        t = self.bu_trainer(list(reversed(srv)), 0, 3, params=False)
        self.assert_one_line_failure(t, "part order")

    def test_trainer_lost_mid_round(self):
        """Trainer 0 pushes batch 0 and waits for the round; trainer 1
        joins and leaves without pushing: the round can never complete,
        trainer 0 is told peer_lost and exits non-zero."""
        s = self.bu_server(2)
        t0 = self.bu_trainer([s], 0, 3, params=False)
        time.sleep(1.0)  # trainer 0 fetched and pushed; its round waits for rank 1
        self.assertTrue(t0.alive(), t0.describe())
        c = self.client(s)
        self.hello_ok(c, 1)
        c.close()
        self.assert_one_line_failure(t0, "peer_lost")

    def test_usage_errors(self):
        tr = psb.bin_path("psbench-trainer")
        for args, want in [
            (["--server", "127.0.0.1:1", "--rank", "0", "--model", "synthetic", "--in-features", "3"],
             "are for --model batch-update"),
            (["--server", "127.0.0.1:1", "--rank", "0", "--model", "nope"],
             "is not synthetic or batch-update"),
            (["--server", "127.0.0.1:1", "--rank", "0", "--model", "batch-update", "--batch-size", "0"],
             "--batch-size"),
            (["--master", "127.0.0.1:1", "--seed", "3"], "the master assigns"),
        ]:
            rc, out, err = self.reg.run([tr] + args)
            self.assertNotEqual(rc, 0, args)
            self.assertIn(want, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
        rc, out, _ = self.reg.run([tr, "--help"])
        self.assertEqual(rc, 0)
        self.assertIn("--model batch-update", out)
        self.assertIn("--in-features", out)

    # ---- the master ------------------------------------------------------------

    # The batch-update job (psb.PsbTestCase.master).
    master_kw = dict(rpc_timeout=30, model="BatchUpdateLinear")
    master_flags = ("--server", "BatchUpdateParameterServer", "--trainer", "BatchUpdateTrainer")

    def test_master_config_errors(self):
        ms = psb.bin_path("psbench-master")
        for args, want in [
            (["--server", "BatchUpdateParameterServer"], "needs a model of class Linear"),
            (["--server", "BatchUpdateParameterServer", "--model", "BatchUpdateLinear"],
             "needs a trainer of class BatchUpdateTrainer"),
            (["--model", "BatchUpdateLinear"], "trains only through a BatchUpdateParameterServer"),
            (["--trainer", "BatchUpdateTrainer"], "trains only through a BatchUpdateParameterServer"),
            (["--server", "BatchUpdateParameterServer", "--model", "BatchUpdateLinear", "--trainer",
              "BatchUpdateTrainer", "--nserver", "0"], "--nserver"),
        ]:
            rc, out, err = self.reg.run([ms, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"] + args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(want, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
        # 3 trainers, 2 servers: the seed placement would refuse it, but every
        # trainer feeds every server here (no run is started: a bad
        # --backend is refused after the placement checks).
        rc, out, err = self.reg.run([ms, "--server", "BatchUpdateParameterServer", "--model",
                                     "BatchUpdateLinear", "--trainer", "BatchUpdateTrainer",
                                     "--ntrainer", "3", "--nserver", "2", "--backend", "mpi"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--backend 'mpi'", err)
        self.assertNotIn("divisible", err)
        # Rounds that never fill: 3 trainers x 3 batches, rounds of 2.
        cfg = os.path.join(self.reg.workdir, "cfg")
        os.makedirs(cfg)
        with open(os.path.join(cfg, "s.json"), "w") as f:
            json.dump({"BU2": {"server_class": "BatchUpdateParameterServer",
                               "configurations": {"batch_update_size": 2}}}, f)
        with open(os.path.join(cfg, "t.json"), "w") as f:
            json.dump({"BatchUpdateTrainer": {"trainer_class": "BatchUpdateTrainer",
                                              "configurations": {"batch_size": 20, "batches": 3}}}, f)
        rc, out, err = self.reg.run([ms, "--server", "BU2", "--server-config-path",
                                     os.path.join(cfg, "s.json"), "--trainer-config-path",
                                     os.path.join(cfg, "t.json"), "--model", "BatchUpdateLinear",
                                     "--trainer", "BatchUpdateTrainer", "--ntrainer", "3",
                                     "--epochs", "1"])
        self.assertEqual(rc, 2, err)
        self.assertIn("does not divide the 9 pushes per pass", err)

    def check_master_output(self, m, epochs, batch_size=20):
        so = m.stdout()
        a = re.search(r"^args: (\{.*\})$", so, re.M)
        self.assertIsNotNone(a, so)
        args = json.loads(a.group(1))
        self.assertEqual(args["server"], "BatchUpdateParameterServer")
        self.assertEqual(args["batch_size"], batch_size)
        self.assertEqual(args["epochs"], epochs)
        for k in ("ntrainer", "nserver", "model", "trainer", "seed", "rpc_timeout", "placement"):
            self.assertIn(k, args)
        self.assertNotIn("token", args)
        self.assertIn("benchmark warmup done", so)
        t = re.search(r"^Time spent training: ([0-9.]+) s$", so, re.M)
        self.assertIsNotNone(t, so)
        self.assertLess(so.index("benchmark warmup done"), t.start())
        return float(t.group(1))

    def test_master_by_hand_two_servers(self):
        """Servers and trainers started by hand; 2 epochs x 4 batches per
        pass; the timed pass starts from a fresh model (reset), so the final
        parameters are 8 rounds from the initialization."""
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--ntrainer", "2", "--nserver", "2", "--epochs", "2", linger=psb.LINGER_S, out=out)
        for i in range(2):
            self.reg.start(server_cmd() + ["--master", m.ctl, "--listen", "127.0.0.1:0"],
                           name="server%d" % i)
        trs = []
        for i in range(2):
            p = os.path.join(self.reg.workdir, "m%d.bin" % i)
            t = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--params-out", p],
                               name="trainer%d" % i)
            t.params_path = p
            trs.append(t)
        for t in trs:
            self.assertEqual(t.wait(120), 0, t.describe())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = http_json(m.http + "/api/v1/status")
            if st["phase"] in ("done", "failed"):
                break
            time.sleep(0.1)
        self.assertEqual(st["phase"], "done", m.describe())
        self.assertEqual(st["progress"]["batches_done"], 2 * 8)
        # The API and Prometheus carry the new metrics by the generic paths.
        mj = http_json(m.http + "/api/v1/metrics")
        for k in TRAINER_METRICS:
            self.assertIn(k, mj["groups"]["trainer"]["all"])
        self.assertIn("method_metric,update", mj["groups"]["server"]["all"])
        code, _, prom = http_get(m.http + "/metrics")
        self.assertEqual(code, 200)
        self.assertIn('metric="hook_future_metric,update_and_fetch_model"', prom)
        self.assertIn('metric="method_metric,update"', prom)
        m.signal(signal.SIGTERM)  # leave --linger early
        self.assertEqual(m.wait(30), 0, m.describe())
        self.check_master_output(m, 2)
        # The CSVs' configuration columns: a BatchUpdateTrainer has no DDP
        # buckets, so no bucket cap (empty, as in a sweep's sweep.csv).
        with open(os.path.join(out, "trainer.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        self.assertTrue(rows)
        self.assertEqual({(r["trainer"], r["model"], r["nserver"], r["bucket_cap_mb"]) for r in rows},
                         {("BatchUpdateTrainer", "BatchUpdateLinear", "2", "")})
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        tr = res["groups"]["trainer"]["all"]
        self.assertEqual(tr["batch_level_metric,batch_all"]["count"], 2 * 8)
        self.assertEqual(tr["method_metric,get_model"]["count"], 2)
        self.assertEqual(res["groups"]["server"]["all"]["method_metric,update"]["count"], 2 * 8)
        self.assertGreater(res["training_seconds"], 0)
        self.assertEqual(res["configuration"]["resolved"]["server_kind"], "batch-update")
        self.assertEqual(res["configuration"]["resolved"]["batch_update"]["batch_update_size"], 2)
        params = [ref.read_params(t.params_path) for t in trs]
        self.assertEqual(params[0], params[1])
        want, losses = ref.train(100, 30, 20, 8, 2, 0)
        self.assert_params_close(params[0], want, ref.linear_init(100, 30, 0))
        # Every trainer reports the digest of its final parameters (those
        # --params-out wrote) and its L1 loss per epoch (2 epochs of 4
        # batches), as DummyModel trainers do.
        for t, entry in zip(trs, res["trainers"]):
            with open(t.params_path, "rb") as f:
                self.assertEqual(entry["final_params_sha256"], hashlib.sha256(f.read()).hexdigest())
            self.assertEqual(len(entry["loss_per_epoch"]), 2)
        for e in range(2):
            mean = sum(entry["loss_per_epoch"][e] for entry in res["trainers"]) / 2
            self.assertAlmostEqual(mean, sum(losses[4 * e:4 * e + 4]) / 4, delta=1e-5 * abs(mean))

    def master_nan_run(self, *extra):
        """A run by hand of 2 trainers, 1 epoch of 4 batches per pass, on a
        stand-in server (joined to the master) whose parameters hold a NaN
        from round 1 on. Returns (master, trainers, results.json); the
        master has exited."""
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--ntrainer", "2", "--nserver", "1", "--epochs", "1", *extra, out=out)
        self.reg.start([sys.executable, MOCK, "--master", m.ctl, "--listen", "127.0.0.1:0", "--nan-from-round",
                        "1"], name="server")
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl], name="trainer%d" % i)
               for i in range(2)]
        m.wait(120)
        with open(os.path.join(out, "results.json")) as f:
            return m, trs, json.load(f)

    # Rounds 0 and 1 answer numbers; round 1's answer (the parameters of
    # batch 2) holds the NaN: both trainers' losses diverge there.
    DIVERGED = "loss diverged at epoch 0, batch 2 of the warm-up pass (loss = nan)"

    def test_master_loss_diverged_fails_the_run(self):
        """The trainers stop at the batch whose loss is NaN and the run
        fails: results.json's error and trainers[].diverged say where, as
        do the master's and every trainer's last line."""
        m, trs, res = self.master_nan_run()
        self.assertEqual(m.returncode, 1, m.describe())
        self.assertEqual(res["phase"], "failed")
        self.assertRegex(res["error"], r"^trainer \d \(.*\) failed: " + re.escape(self.DIVERGED) +
                         r": lower the learning rate")
        self.assertRegex(m.stderr().strip().splitlines()[-1],
                         r"^psbench-master: run failed: trainer \d \(.*\) failed: " + re.escape(self.DIVERGED))
        # The trainer the error names records where; the other, if its
        # report came in time, the same place.
        named = int(re.match(r"^trainer (\d)", res["error"]).group(1))
        want = {"pass": "warm-up", "epoch": 0, "batch": 2, "loss": "nan"}
        self.assertEqual(res["trainers"][named]["diverged"], want, res["trainers"])
        for t in res["trainers"]:
            self.assertIn(t["diverged"], (want, None), t)
        self.assertEqual(psb.job_warnings(res), [])
        for t in trs:
            self.assertNotEqual(t.wait(60), 0, t.describe())
            self.assertRegex(t.stderr().strip().splitlines()[-1],
                             r"^psbench-trainer: the run failed: trainer \d \(.*\) failed: " +
                             re.escape(self.DIVERGED), t.describe())

    def test_master_loss_diverged_allowed(self):
        """With --allow-divergence the trainers push on past the NaN loss:
        the run ends done, each trainer's divergence is in
        trainers[].diverged and a warning, its losses "nan"."""
        m, trs, res = self.master_nan_run("--allow-divergence")
        self.assertEqual(m.returncode, 0, m.describe())
        self.assertEqual(res["phase"], "done")
        self.assertEqual(len(psb.job_warnings(res)), 2, psb.job_warnings(res))
        for r, (t, w) in enumerate(zip(res["trainers"], psb.job_warnings(res))):
            self.assertEqual(t["diverged"], {"pass": "warm-up", "epoch": 0, "batch": 2, "loss": "nan"}, t)
            self.assertRegex(w, r"^trainer %d \(.*\): " % r + re.escape(self.DIVERGED) +
                             r"; the run went on \(--allow-divergence\)$")
            self.assertEqual(t["loss_per_epoch"], ["nan"], t)
        for t in trs:
            self.assertEqual(t.wait(60), 0, t.describe())

    def test_master_local_debug_lines(self):
        if not REAL:
            self.skipTest("psbench-server has no --kind batch-update yet (--local starts it)")
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--local", "--epochs", "1", "--batch-size", "5", "--log-level", "debug",
                        "--seed", "3", out=out)
        rc = m.wait(120)
        self.assertEqual(rc, 0, m.describe())
        secs = self.check_master_output(m, 1, batch_size=5)
        self.assertGreater(secs, 0)
        text = m.stdout() + m.stderr()
        for r in range(2):
            for s in SEED_LINES:
                # warm-up and timed pass: 4 batches each
                self.assertEqual(text.count("trainer%d %s" % (r, s)), 8, (r, s))
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        for k in TRAINER_METRICS:
            self.assertIn(k, res["groups"]["trainer"]["all"])
        self.assertIn("method_metric,update", res["groups"]["server"]["all"])


if __name__ == "__main__":
    psb.main()
