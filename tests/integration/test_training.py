"""Real training on CPU through the parameter server: DummyData, DummyModel,
DDP-style buckets, SGD.

- Synchronous training leaves every trainer with bit-identical parameters
  (same final_params_sha256), and the loss falls over epochs.
- Two trainers with batch size B through the server end equal (within float
  tolerance) to one trainer with batch size 2B: round-robin dealing gives
  that trainer exactly the union of the two trainers' batches at each step.
- The sparse model trains end to end (the other hooks: test_hooks.py).
- --compute-nice lowers the compute thread only: the communication thread
  stays at the process's level.
- The master's --lr (the seed's scripts') is the lr the trainers step with.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_training.py
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

SMALL_MODEL = {"model_class": "DummyModel",
               "configurations": {"num_embeddings": 128, "embedding_dim": 64,
                                  "dense_input_size": 64, "dense_output_size": 128,
                                  "dense_layers_count": 1, "sparse": False}}


class Training(psb.PsbTestCase):

    # Its masters' flags (psb.PsbTestCase.master): the master's own --linger.
    master_kw = dict(local=True, linger=None, rpc_timeout=30)

    def test_identical_parameters_and_falling_loss(self):
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--model", "DummyModel", "--epochs", "4", out=out)
        res = self.results(out, m)
        shas = {t["final_params_sha256"] for t in res["trainers"]}
        self.assertEqual(len(shas), 1, res["trainers"])
        self.assertRegex(shas.pop(), r"^[0-9a-f]{64}$")
        for t in res["trainers"]:
            loss = t["loss_per_epoch"]
            self.assertEqual(len(loss), 4)
            for a, b in zip(loss, loss[1:]):
                self.assertLess(b, a, loss)
        tr = res["groups"]["trainer"]["all"]
        for k in ("forward_metric,forward_pass", "backward_metric,backward", "backward_metric,backward_compute",
                  "hook_future_metric,rpc_dense", "batch_level_metric,batch_all"):
            self.assertIn(k, tr)
        self.assertEqual(tr["batch_level_metric,batch_all"]["count"], 2 * 4 * 5)
        # backward is the seed's loss.backward() under DDP: each step's
        # compute and its wait for the means (exposed_wait).
        bwd, cmp, exp = (tr[k] for k in ("backward_metric,backward", "backward_metric,backward_compute",
                                         "hook_future_metric,exposed_wait"))
        self.assertEqual(bwd["count"], cmp["count"])
        self.assertAlmostEqual(bwd["mean"], cmp["mean"] + exp["mean"], delta=1e-3)
        self.assertGreaterEqual(bwd["min"], cmp["min"])
        for t in res["trainers"]:
            # DDP's buckets for the DummyModel at 25 MB (1 MiB first bucket),
            # the whole model one bucket in a pass's first iteration
            b = t["buckets"]
            self.assertEqual([k["floats"] for k in b["rebuilt"]], [1049600, 7347200, 1048576], b)
            self.assertEqual([k["floats"] for k in b["first_iteration"]], [9445376], b)
            self.assertEqual(b["rebuilt"][0]["parameters"], ["dense.7.bias", "dense.7.weight"])
            # each pass from a fresh model (the seed builds one per pass):
            # the warm-up and the timed pass run the same training
            self.assertEqual(t["warmup"]["loss_per_epoch"], t["loss_per_epoch"], t)
            self.assertEqual(t["warmup"]["final_params_sha256"], t["final_params_sha256"], t)

    def test_two_servers_same_parameters(self):
        """Buckets sharded over two servers: their results arrive
        interleaved on the trainer, and training ends exactly where it does
        with one server (the mean of a bucket does not depend on which
        server computes it)."""
        shas = []
        for nserver in ("1", "2"):
            out = os.path.join(self.reg.workdir, "out" + nserver)
            m = self.master("--model", "DummyModel", "--epochs", "2", "--nserver", nserver,
                            "--placement", "shard", out=out)
            res = self.results(out, m)
            got = {t["final_params_sha256"] for t in res["trainers"]}
            self.assertEqual(len(got), 1, res["trainers"])
            shas.append(got.pop())
        self.assertEqual(shas[0], shas[1])

    def test_many_buckets(self):
        """One bucket per parameter, 261 of them (a tiny cap and first
        bucket): the optimizer waits for every one (it once waited for the
        first 256 only)."""
        models = os.path.join(self.reg.workdir, "deep.json")
        with open(models, "w") as f:
            json.dump({"Deep": {"model_class": "DummyModel",
                                "configurations": {"num_embeddings": 100, "embedding_dim": 100,
                                                   "dense_input_size": 100, "dense_output_size": 100,
                                                   "dense_layers_count": 130, "sparse": False}}}, f)
        trainers = os.path.join(self.reg.workdir, "tiny.json")
        with open(trainers, "w") as f:
            json.dump({"Tiny": {"trainer_class": "DdpTrainer",
                                "configurations": {"ddp_hook": "rpc_hook", "lr": 0.5,
                                                   "bucket_cap_mb": 0.000001,
                                                   "first_bucket_mb": 0.000001}}}, f)
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--model", "Deep", "--model-config-path", models, "--trainer", "Tiny",
                        "--trainer-config-path", trainers, "--epochs", "1", out=out)
        res = self.results(out, m)
        self.assertEqual(len({t["final_params_sha256"] for t in res["trainers"]}), 1)
        self.assertIn("261 bucket(s)", m.stdout() + m.stderr())

    def test_sparse_model(self):
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--model", "DummyModelSparse", "--epochs", "2", out=out)
        res = self.results(out, m)
        self.assertEqual(len({t["final_params_sha256"] for t in res["trainers"]}), 1)
        self.assertIn("hook_future_metric,rpc_sparse", res["groups"]["trainer"]["all"])

    def run_by_hand(self, ntrainer, batch_size, model_cfg):
        m = self.master("--model", "Small", "--model-config-path", model_cfg, "--epochs", "2",
                        "--ntrainer", str(ntrainer), "--batch-size", str(batch_size), local=False)
        self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                       name="server")
        paths = []
        for r in range(ntrainer):
            p = os.path.join(self.reg.workdir, "params-%d-%d.bin" % (ntrainer, r))
            paths.append(p)
            self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r),
                            "--params-out", p], name="trainer%d" % r)
        self.assertEqual(m.wait(120), 0, m.describe())
        return [psb.params_of(p) for p in paths]

    def test_matches_one_process_on_the_union(self):
        cfg = os.path.join(self.reg.workdir, "models.json")
        with open(cfg, "w") as f:
            json.dump({"Small": SMALL_MODEL}, f)
        two = self.run_by_hand(2, 10, cfg)
        one = self.run_by_hand(1, 20, cfg)
        self.assertEqual(two[0].tobytes(), two[1].tobytes())  # bit-identical trainers
        a, b = two[0], one[0]
        self.assertEqual(len(a), len(b))
        worst = max(abs(x - y) / (1e-3 + abs(y)) for x, y in zip(a, b))
        self.assertLess(worst, 1e-3)
        # And training did something: the parameters moved from the start.
        init = self.run_init(cfg)
        moved = max(abs(x - y) for x, y in zip(a, init))
        self.assertGreater(moved, 1e-6)

    DIVERGED_RE = (r"loss diverged at epoch (\d+), batch (\d+) of the warm-up pass \(loss = (nan|inf|-inf)\)")

    def test_loss_divergence_fails_the_run(self):
        """A loss that becomes NaN or infinite stops the trainer at that
        batch and fails the run: the reason (status, results.json, the
        master's and each trainer's last line) names the epoch and the
        batch; results.json's trainers carry where; every process exits
        non-zero."""
        out = os.path.join(self.reg.workdir, "out")
        diverging = psb.diverging_trainers(self.reg.workdir, "DdpRpcTrainer")
        m = self.master("--model", "DummyModel", "--epochs", "2", "--trainer-config-path", diverging,
                        "--linger", "0", local=False, out=out)
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                             name="server")
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r)],
                              name="trainer%d" % r) for r in range(2)]
        self.assertEqual(m.wait(120), 1, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "failed")
        self.assertRegex(res["error"], r"^trainer \d \(.*\) failed: " + self.DIVERGED_RE +
                         r": lower the learning rate")
        last = m.stderr().strip().splitlines()[-1]
        self.assertRegex(last, r"^psbench-master: run failed: trainer \d \(.*\) failed: " + self.DIVERGED_RE)
        diverged = [t["diverged"] for t in res["trainers"] if t["diverged"]]
        self.assertTrue(diverged, res["trainers"])
        for d in diverged:
            self.assertEqual(d["pass"], "warm-up")
            self.assertIn(d["loss"], ("nan", "inf", "-inf"))
            self.assertIsInstance(d["epoch"], int)
            self.assertIsInstance(d["batch"], int)
        first = diverged[0]
        self.assertIn("epoch %d, batch %d" % (first["epoch"], first["batch"]), res["error"])
        self.assertEqual(psb.job_warnings(res), [])
        for t in trs:
            self.assertNotEqual(t.wait(60), 0, t.describe())
            tl = t.stderr().strip().splitlines()[-1]
            self.assertRegex(tl, r"^psbench-trainer: the run failed: trainer \d \(.*\) failed: " + self.DIVERGED_RE,
                             t.describe())
        self.assertNotEqual(srv.wait(60), 0, srv.describe())

    def test_loss_divergence_allowed(self):
        """With --allow-divergence the trainers go on past a loss that is
        not finite and the run ends done, with a warning in the master's
        output and results.json; the losses are recorded ("nan", "inf":
        JSON has no NaN), never dropped."""
        out = os.path.join(self.reg.workdir, "out")
        diverging = psb.diverging_trainers(self.reg.workdir, "DdpRpcTrainer")
        m = self.master("--model", "DummyModel", "--epochs", "2", "--trainer-config-path", diverging,
                        "--allow-divergence", "--linger", "0", out=out)
        res = self.results(out, m)
        self.assertEqual(res["phase"], "done")
        self.assertIs(res["configuration"]["allow_divergence"], True)
        self.assertEqual(len(psb.job_warnings(res)), 2, psb.job_warnings(res))
        for r, (t, w) in enumerate(zip(res["trainers"], psb.job_warnings(res))):
            self.assertRegex(w, r"^trainer %d \(.*\): " % r + self.DIVERGED_RE +
                             r"; the run went on \(--allow-divergence\)$")
            d = t["diverged"]
            self.assertEqual(d["pass"], "warm-up")
            self.assertIn("epoch %d, batch %d" % (d["epoch"], d["batch"]), w)
            self.assertEqual(len(t["loss_per_epoch"]), 2, t)
            for v in t["loss_per_epoch"]:
                self.assertIn(v, ("nan", "inf", "-inf"), t)
            self.assertIn("warning: " + w, m.stdout())
        self.assertRegex(m.stderr(), r"psbench-master: warn: trainer 0 \(.*\): " + self.DIVERGED_RE)

    def test_lr_flag_reaches_the_trainers(self):
        """The seed's scripts' --lr replaces the trainer configuration's lr
        (50 in configs/, which trains) in the trainers' steps: with --lr=1e30
        (the seed's `--lr=` spelling) the loss diverges, as it does with
        that lr in the file (test_loss_divergence_allowed)."""
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--model", "DummyModel", "--epochs", "1", "--lr=1e30", "--allow-divergence", "--linger", "0",
                        out=out)
        res = self.results(out, m)
        self.assertEqual(res["phase"], "done")
        self.assertEqual(res["configuration"]["lr"], 1e30)
        self.assertEqual(res["configuration"]["resolved"]["trainer"]["configurations"]["lr"], 1e30)
        self.assertEqual(len(psb.job_warnings(res)), 2, psb.job_warnings(res))
        for t in res["trainers"]:
            self.assertTrue(t["diverged"], t)

    @staticmethod
    def thread_nices(pid):
        """{tid: nice} of a live process's threads (from /proc)."""
        out = {}
        task = "/proc/%d/task" % pid
        for tid in os.listdir(task):
            try:
                with open(os.path.join(task, tid, "stat")) as f:
                    stat = f.read()
            except OSError:
                continue  # the thread ended meanwhile
            fields = stat[stat.rindex(")") + 2:].split()
            out[int(tid)] = int(fields[16])  # field 19 of proc(5): nice
        return out

    def test_compute_thread_priority(self):
        self.assert_cli_rejects(["--compute-nice", "20"], "outside 0..19")
        self.assert_cli_rejects(["--compute-nice", "x"], "not a whole number")
        m = self.master("--model", "DummyModel", "--epochs", "4", local=False)
        self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                       name="server")
        lowered = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", "0",
                                  "--compute-nice", "7"], name="trainer0")
        level = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", "1",
                                "--compute-nice", "0"], name="trainer1")
        # While training: trainer 0 has its compute thread at 7 and the
        # rest at 0; trainer 1 has every thread at 0.
        seen, deadline = None, time.time() + 60
        while time.time() < deadline and lowered.alive() and level.alive():
            if "compute thread at nice 7" in lowered.stderr():
                seen = (self.thread_nices(lowered.pid), self.thread_nices(level.pid))
                if len(seen[0]) >= 2:
                    break
            time.sleep(0.05)
        self.assertIsNotNone(seen, lowered.describe())
        nices0, nices1 = seen
        self.assertEqual(sorted(nices0.values()).count(7), 1, nices0)
        self.assertIn(0, nices0.values(), nices0)  # the communication thread
        self.assertEqual(set(nices1.values()), {0}, nices1)
        self.assertEqual(m.wait(240), 0, m.describe())

    def assert_cli_rejects(self, args, why):
        rc, _, err = self.reg.run([psb.bin_path("psbench-trainer"), "--master", "127.0.0.1:1"] + args)
        self.assertNotEqual(rc, 0)
        self.assertIn(why, err)

    def run_init(self, cfg):
        """Parameters after 0 steps: a run whose learning rate is 0."""
        tc = psb.trainer_config_with(self.reg.workdir, "DdpRpcTrainer", "trainers.json", lr=1e-30)
        m = self.master("--model", "Small", "--model-config-path", cfg, "--epochs", "1",
                        "--ntrainer", "1", "--trainer-config-path", tc, local=False)
        self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                       name="server")
        p = os.path.join(self.reg.workdir, "params-init.bin")
        self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--params-out", p],
                       name="trainer-init")
        self.assertEqual(m.wait(120), 0, m.describe())
        return psb.params_of(p)


if __name__ == "__main__":
    psb.main()
