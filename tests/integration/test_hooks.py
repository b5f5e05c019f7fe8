"""The trainer's communication hooks and the pure-DDP baseline (--nserver 0):
allreduce_hook, sparse_rpc_hook and hybrid_hook over Gloo, next to rpc_hook.

- allreduce_hook with 1, 2 and 4 trainers, dense and sparse models: every
  trainer ends with bit-identical parameters, equal (within float tolerance)
  to one process training on the union of the batches.
- With 2 trainers the four hooks end with the same bits on the sparse model:
  a mean is the sum times mean_scale(N) whichever way it travels (a server,
  a Gloo allreduce, a gathered and coalesced sparse allreduce).
- --nserver 0 from the master, --local and by hand: no server starts, the
  hook's metrics are in the tables, /api/v1/metrics and /metrics.
- A trainer killed mid-allreduce: every other process exits with a one-line
  reason within --rpc-timeout, and the master names the killed trainer.
- The staged test device (PSBENCH_TRAINER_COMPUTE=staged): buckets from
  memory without host views end with the cpu's bits.
- Refusals: rpc_hook without servers, --backend nccl on CPU trainers, an
  unknown hook.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_hooks.py
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import http_get, http_json  # noqa: E402

SMALL = {"num_embeddings": 128, "embedding_dim": 64, "dense_input_size": 64, "dense_output_size": 128,
         "dense_layers_count": 1}
MODELS = {
    "Small": {"model_class": "DummyModel", "configurations": dict(SMALL, sparse=False)},
    "SmallSparse": {"model_class": "DummyModel", "configurations": dict(SMALL, sparse=True)},
    # Big enough that a pass lasts a few seconds (the kill test).
    "Slow": {"model_class": "DummyModel",
             "configurations": {"num_embeddings": 512, "embedding_dim": 512, "dense_input_size": 512,
                                "dense_output_size": 512, "dense_layers_count": 4, "sparse": False}},
}
HOOKS = ("rpc_hook", "allreduce_hook", "sparse_rpc_hook", "hybrid_hook")
SERVERLESS = ("allreduce_hook", "hybrid_hook")


class Hooks(psb.PsbTestCase):

    def setUp(self):
        super().setUp()
        self.models = os.path.join(self.reg.workdir, "models.json")
        with open(self.models, "w") as f:
            json.dump(MODELS, f)
        # Its masters' flags (psb.PsbTestCase.master).
        self.master_kw = dict(local=True, linger=None, rpc_timeout=30, model_config=self.models)

    def by_hand(self, hook, model, ntrainer, batch_size, nserver=0, epochs=2):
        """A job started by hand (master, servers, trainers each their own
        process); returns every trainer's final parameters."""
        m = self.master("--model", model, "--ddp-hook", hook, "--nserver", str(nserver), "--epochs",
                        str(epochs), "--ntrainer", str(ntrainer), "--batch-size", str(batch_size), local=False)
        for s in range(nserver):
            self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                           name="server%d" % s)
        paths = []
        for r in range(ntrainer):
            p = os.path.join(self.reg.workdir, "params-%s-%s-%d-%d.bin" % (hook, model, ntrainer, r))
            paths.append(p)
            self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r),
                            "--params-out", p], name="trainer%d" % r)
        self.assertEqual(m.wait(180), 0, m.describe())
        if nserver == 0:
            self.assertIn("pure DDP", m.stderr())
        return [psb.params_of(p) for p in paths]

    def assert_close(self, a, b, what):
        self.assertEqual(len(a), len(b), what)
        worst = max(abs(x - y) / (1e-3 + abs(y)) for x, y in zip(a, b))
        self.assertLess(worst, 1e-3, what)

    # -- allreduce_hook: identical trainers, equal to one process on the union --

    def check_union(self, model):
        one = self.by_hand("allreduce_hook", model, 1, 20)
        for n in (2, 4):
            got = self.by_hand("allreduce_hook", model, n, 20 // n)
            for r in range(1, n):
                self.assertEqual(got[r].tobytes(), got[0].tobytes(), "%s: trainer %d of %d differs" % (model, r, n))
            self.assert_close(got[0], one[0], "%s: %d trainers vs one on the union" % (model, n))
        # Training moved the parameters (a zero-step run would also "agree").
        init = self.by_hand("allreduce_hook", model, 1, 20, epochs=1)
        self.assertNotEqual(init[0].tobytes(), one[0].tobytes())

    def test_allreduce_dense_matches_one_process(self):
        self.check_union("Small")

    def test_allreduce_sparse_matches_one_process(self):
        self.check_union("SmallSparse")

    # -- every hook: the same bits as the server path --------------------------

    def test_every_hook_equals_the_server_path(self):
        shas, metrics = {}, {}
        for hook in HOOKS:
            out = os.path.join(self.reg.workdir, "out-" + hook)
            nserver = "0" if hook in SERVERLESS else "1"
            m = self.master("--model", "SmallSparse", "--ddp-hook", hook, "--nserver", nserver, "--epochs", "2",
                            out=out)
            res = self.results(out, m)
            got = {t["final_params_sha256"] for t in res["trainers"]}
            self.assertEqual(len(got), 1, (hook, res["trainers"]))
            shas[hook] = got.pop()
            metrics[hook] = set(res["groups"]["trainer"]["all"])
            self.assertEqual(len(res["groups"].get("server", {}).get("ranks", {})), int(nserver), hook)
            # Hooks that talk to a server say how (the split hook through
            # its sparse part): one link per trainer, none without servers.
            for t in res["trainers"]:
                self.assertEqual(len(t["links"]), int(nserver), (hook, t["links"]))
        self.assertEqual(len(set(shas.values())), 1, shas)
        want = {
            "rpc_hook": {"hook_future_metric,rpc_dense", "hook_future_metric,rpc_sparse"},
            "allreduce_hook": {"hook_future_metric,gloo_dense_allreduce", "hook_future_metric,gloo_sparse_allreduce"},
            "sparse_rpc_hook": {"hook_future_metric,rpc_sparse", "hook_future_metric,gloo_dense_allreduce"},
            "hybrid_hook": {"hook_c10d_metric,gloo_sparse_allreduce", "hook_future_metric,gloo_dense_allreduce"},
        }
        for hook, names in want.items():
            self.assertTrue(names <= metrics[hook], (hook, names, metrics[hook]))
            others = {n for n in metrics[hook] if ("allreduce" in n or "rpc_" in n) and n not in names}
            self.assertEqual(others, set(), hook)

    # -- buckets from memory without host views ---------------------------------

    def test_staged_compute_same_bits(self):
        """--local jobs whose trainers compute on the staged test device
        (PSBENCH_TRAINER_COMPUTE=staged: no host view of the model's memory,
        copies that complete late) end with the cpu's parameters: buckets
        through pinned twins, handed over after their copies, the means
        copied back before the step (train.c), for rpc_hook and
        allreduce_hook, dense and sparse."""
        for model, hook in (("SmallSparse", "rpc_hook"), ("SmallSparse", "allreduce_hook"),
                            ("Small", "allreduce_hook")):
            shas = {}
            for compute in ("cpu", "staged"):
                out = os.path.join(self.reg.workdir, "out-%s-%s-%s" % (model, hook, compute))
                nserver = "0" if hook in SERVERLESS else "1"
                env = psb.base_env({"PSBENCH_TRAINER_COMPUTE": compute} if compute == "staged" else None)
                m = self.master("--model", model, "--ddp-hook", hook, "--nserver", nserver, "--epochs", "2",
                                out=out, env=env)
                res = self.results(out, m)
                got = {t["final_params_sha256"] for t in res["trainers"]}
                self.assertEqual(len(got), 1, (model, hook, compute, res["trainers"]))
                shas[compute] = got.pop()
                if compute == "staged":
                    self.assertIn("computing on 'staged'", m.stderr(), m.describe())
            self.assertEqual(shas["staged"], shas["cpu"], (model, hook))

    # -- the pure-DDP baseline from the master ----------------------------------

    def test_pure_ddp_local_everywhere(self):
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--model", "Small", "--trainer", "DdpTrainer", "--epochs", "3", "--linger", str(psb.LINGER_S),
                        out=out)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "phase done" not in m.stderr():
            self.assertTrue(m.alive(), m.describe())
            time.sleep(0.2)
        self.assertIn("phase done", m.stderr(), m.describe())
        metric = "hook_future_metric,gloo_dense_allreduce"
        status = http_json(m.http + "/api/v1/status")
        self.assertEqual(status["nodes"], {"trainer": 2, "server": 0})
        nodes = http_json(m.http + "/api/v1/nodes")
        self.assertEqual(sorted(n["role"] for n in nodes), ["trainer", "trainer"])
        api = http_json(m.http + "/api/v1/metrics")
        self.assertGreater(api["groups"]["trainer"]["all"][metric]["count"], 0)
        self.assertIn(metric, api["groups"]["trainer"]["ranks"]["1"])
        code, _, prom = http_get(m.http + "/metrics")
        self.assertEqual(code, 200)
        self.assertIn('metric="%s"' % metric, prom)
        code, _, page = http_get(m.http + "/")
        self.assertEqual(code, 200)
        self.assertIn("<title>psbench</title>", page)
        self.assertIn(metric, m.stdout())  # the tables
        m.signal(signal.SIGTERM)
        self.assertEqual(m.wait(30), 0, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(len({t["final_params_sha256"] for t in res["trainers"]}), 1)
        self.assertEqual(res["configuration"]["nserver"], 0)

    # -- a trainer killed mid-allreduce ----------------------------------------

    def test_trainer_killed_mid_allreduce(self):
        timeout = 10
        m = self.master("--model", "Slow", "--trainer", "DdpTrainer", "--ntrainer", "3", "--epochs", "50",
                        local=False, rpc_timeout=timeout)
        trainers = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r)],
                                   name="trainer%d" % r) for r in range(3)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "warmup:" not in m.stderr():
            self.assertTrue(m.alive(), m.describe())
            time.sleep(0.1)
        self.assertIn("warmup:", m.stderr(), m.describe())  # batches are flowing
        trainers[1].signal(signal.SIGKILL)
        t0 = time.monotonic()
        for r in (0, 2):
            rc = trainers[r].wait(timeout + 15)
            self.assertIsNotNone(rc, "trainer %d still running" % r)
            self.assertNotEqual(rc, 0)
            last = trainers[r].stderr().strip().splitlines()[-1]
            self.assertTrue(last.startswith("psbench-trainer: "), last)
        self.assertLess(time.monotonic() - t0, timeout + 5)
        self.assertNotEqual(m.wait(30), 0)
        err = m.stderr()
        self.assertRegex(err, r"run failed: trainer 1 \([^)]*\) disconnected", err)

    # -- refusals ---------------------------------------------------------------

    def master_refusal(self, *args):
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http",
                                     "127.0.0.1:0", "--model-config-path", self.models] + list(args))
        self.assertNotEqual(rc, 0)
        lines = err.strip().splitlines()
        self.assertTrue(lines, err)
        return lines[-1]

    def test_refusals(self):
        self.assertIn("rpc_hook sends buckets to parameter servers", self.master_refusal("--model", "Small", "--nserver", "0"))
        self.assertIn("--backend nccl needs CUDA trainers",
                      self.master_refusal("--model", "Small", "--trainer", "DdpTrainer", "--backend", "nccl"))
        self.assertIn("is not rpc_hook, allreduce_hook, sparse_rpc_hook or hybrid_hook",
                      self.master_refusal("--model", "Small", "--ddp-hook", "gossip_hook"))


if __name__ == "__main__":
    psb.main()
