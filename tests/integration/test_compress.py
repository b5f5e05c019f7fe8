"""--compress fp16|bf16|powersgd with allreduce_hook (issue 43): PyTorch's
fp16_compress_hook, bf16_compress_hook, powerSGD_hook and
batched_powerSGD_hook over Gloo (fp16 and bf16 over NCCL too).

- Two CPU trainers, pure DDP (--nserver 0), a dense DummyModel, by hand
  (each trainer writes --params-out): none, fp16 and bf16 runs complete;
  results.json's configuration resolves `compress`, each trainer's entry
  has `compress` and PyTorch's hook name (`comm_hook`), every rebuilt
  bucket `element_bytes` 2 (4 without compression), and the headline's
  bytes per step are half of fp32's.
- The parameters: both trainers bit-identical (the narrow allreduce gives
  every member the same bits); fp16 and bf16 differ from fp32's, and from
  each other, by a small relative distance (the gradients rounded to 11
  or 8 significant bits, not garbage); a second fp16 run is bit-identical
  to the first.
- CUDA trainers on the fake GPU allreducing on Gloo (--backend gloo) and
  on NCCL's stand-in (--backend nccl: narrowed, summed and widened in
  device memory): fp16 and bf16 end with the CPU trainers' parameters,
  bit for bit, and the same bytes per step.
- rpc_hook's narrow pushes (docs/protocol.md, "Narrow pushes"): two CPU
  trainers and a server of kind average (1 server; 2 with --placement
  shard, kind average-batch), fp16 and bf16 over TCP and shared memory:
  the trainers end bit-identical, within a relative distance of 1e-2 of
  the fp32 run's parameters (and not equal to them), `comm_hook` stays
  rpc_hook, every dense bucket's element_bytes is 2 and the headline's
  bytes per step half of fp32's.
- CUDA trainers on the fake GPU with rpc_hook and bf16 (to a CPU server:
  from host memory) end with the CPU trainers' parameters, bit for bit.
- CUDA servers (the fake GPU) take narrow pushes, kinds average and
  average-batch, from CPU and CUDA trainers, over TCP and shared memory,
  and by CUDA IPC (auto, CUDA trainers: narrowed on the GPU into the
  gradients' shadow): the CPU servers' parameters, bit for bit.
- The Synthetic model with fp16 and bf16 (TCP, shared memory, 1 and 2
  servers, and CUDA trainers by CUDA IPC): its trainers' bit-for-bit
  check of every narrow mean passes.
- The protocol by hand (a standalone server, raw clients): the welcome
  echoes the hello's dtype; f16 and bf16 pushes answered in their type
  with the mean of the widened pushes, narrowed (by a CPU and a CUDA
  server); a narrow push on a
  connection whose hello did not announce it, or a mixed (batch, bucket),
  refused; a batch-update server refuses a hello that announces one.
- A trainer whose server welcomes it without the echo (a fake server:
  one that does not know narrow pushes) fails in one line naming it.
- The HybridModel (the DDP + RPC benchmark): its dense part's
  allreduce_hook compresses with fp16, bf16 and powersgd (HybridTrainer's
  compress key): the trainers end with the same dense parameters, their
  entries say compress and PyTorch's hook name (none: neither key), and
  PowerSGD's steps and compressed bytes; its start_powerSGD_iter rule
  refused naming the flag.
- Refusals, one line, exit 2: --compress fp16 with sparse_rpc_hook, with
  a sparse Synthetic model, with a batch-update job; an unknown value.
- PowerSGD (--compress powersgd:4 --powersgd-start-iter 2): both trainers
  bit-identical; the loss finite and within 2% of fp32's, the parameters
  within a relative distance of 0.01 of fp32's (0.002 here) and not equal
  to them;
  results name the state (PyTorch's names) and the hook; the headline's
  bytes per step are the predicted mean over the pass's steps (2 plain
  fp32 steps, then P + Q + the uncompressed tensors, from the rebuilt
  buckets' parameters and shapes), below fp32's; batched_powerSGD_hook
  likewise (2 side r floats a bucket); a run no longer than
  start_powerSGD_iter (PyTorch's 1000) never compresses: a one-line
  warning, and the parameters are fp32's bit for bit (plain steps are
  allreduce_hook's arithmetic). Refusals: rpc_hook (why it is not built),
  sparse_rpc_hook, Synthetic, start_powerSGD_iter 1 with error feedback
  (PyTorch's rule), a :RANK after another value. CUDA trainers (the fake
  GPU) on Gloo and NCCL: their buckets staged through host memory, the
  CPU trainers' parameters and report, bit for bit. A sparse
  model: the embedding's bucket (a step's last) stays fp32, the steps
  still count.

The per-element arithmetic (cast, divide, the narrow sums' rounding) is
unit-tested against half.c's reference (unit_half); this suite checks the
hook uses it end to end.

Run: PSBENCH_BIN=build /usr/bin/python3 tests/integration/test_compress.py
"""
import json
import math
import os
import re
import socket
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

MODELS = {
    "Tiny": {"model_class": "DummyModel",
             "configurations": {"num_embeddings": 128, "embedding_dim": 32, "dense_input_size": 32,
                                "dense_output_size": 128, "dense_layers_count": 1, "sparse": False}},
    "TinySparse": {"model_class": "DummyModel",
                   "configurations": {"num_embeddings": 128, "embedding_dim": 32, "dense_input_size": 32,
                                      "dense_output_size": 128, "dense_layers_count": 1, "sparse": True}},
    "Syn": {"model_class": "Synthetic", "configurations": {"buckets": 2, "bucket_floats": 100, "sparse": False}},
    "SynSparse": {"model_class": "Synthetic", "configurations": {"buckets": 2, "bucket_floats": 100,
                                                                 "sparse": True}},
    "Lin": {"model_class": "Linear", "configurations": {"in_features": 10, "out_features": 3}},
}
HOOK_NAMES = {"none": "allreduce_hook", "fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}


class Compress(psb.PsbTestCase):

    def setUp(self):
        super().setUp()
        self.models = os.path.join(self.reg.workdir, "models.json")
        with open(self.models, "w") as f:
            json.dump(MODELS, f)
        self.master_kw = dict(linger=None, rpc_timeout=30, model_config=self.models)

    def compress_job(self, compress, tag, *extra, master_out=None):
        """A 2-trainer allreduce_hook job with --compress `compress` (and
        `extra` flags), its trainers started by hand: (results.json, each
        trainer's final parameters as an array of floats). master_out: a
        list the master process is appended to."""
        out = os.path.join(self.reg.workdir, "out-" + tag)
        m = self.master("--model", "Tiny", "--ddp-hook", "allreduce_hook", "--nserver", "0", "--ntrainer", "2",
                        "--epochs", "2", "--batch-size", "5", "--compress", compress, *extra, out=out)
        if master_out is not None:
            master_out.append(m)
        paths = []
        for r in range(2):
            p = os.path.join(self.reg.workdir, "params-%s-%d.bin" % (tag, r))
            paths.append(p)
            self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r), "--params-out", p],
                           name="trainer%d-%s" % (r, tag))
        res = self.results(out, m)
        return res, [psb.params_of(p) for p in paths]

    @staticmethod
    def compress_distance(a, b):
        """||a - b|| / ||b||."""
        num = math.sqrt(sum((x - y) * (x - y) for x, y in zip(a, b)))
        return num / math.sqrt(sum(y * y for y in b))

    def test_fp16_and_bf16_as_pytorch_names_them(self):
        runs = {c: self.compress_job(c, c) for c in ("none", "fp16", "bf16")}
        bytes_of = {}
        for c, (res, params) in runs.items():
            self.assertEqual(res["phase"], "done", c)
            self.assertEqual(res["configuration"]["resolved"]["compress"], c)
            self.assertEqual(res["configuration"]["compress"], c)  # the flag's echo
            for t in res["trainers"]:
                self.assertEqual(t["compress"], c, t)
                self.assertEqual(t["comm_hook"], HOOK_NAMES[c], t)
                for b in t["buckets"]["rebuilt"]:
                    self.assertEqual(b["element_bytes"], 4 if c == "none" else 2, (c, b))
            rows = res["headline"]["trainers"]
            for r, t in zip(rows, res["trainers"]):
                floats = sum(b["floats"] for b in t["buckets"]["rebuilt"])
                self.assertEqual(r["bytes_per_step"], (4 if c == "none" else 2) * floats, (c, r))
            bytes_of[c] = rows[-1]["bytes_per_step"]
            self.assertEqual(len(params[0]), len(params[1]), c)
            self.assertGreater(len(params[0]), 0, c)
            self.assertEqual(params[0].tobytes(), params[1].tobytes(), "%s: the trainers differ" % c)
        self.assertEqual(bytes_of["fp16"] * 2, bytes_of["none"])
        self.assertEqual(bytes_of["bf16"] * 2, bytes_of["none"])
        fp32 = runs["none"][1][0]
        for c in ("fp16", "bf16"):
            got = runs[c][1][0]
            self.assertNotEqual(got.tobytes(), fp32.tobytes(), "%s: no rounding shows" % c)
            d = self.compress_distance(got, fp32)
            self.assertLess(d, 1e-3, "%s: relative distance %g from fp32's" % (c, d))
        self.assertNotEqual(runs["fp16"][1][0].tobytes(), runs["bf16"][1][0].tobytes())
        # Deterministic: the same job again, the same bits.
        _, again = self.compress_job("fp16", "fp16-again")
        self.assertEqual(again[0].tobytes(), runs["fp16"][1][0].tobytes())

    def test_fake_gpu_trainers(self):
        """CUDA trainers (the fake GPU: its kernels' arithmetic is the cpu
        layer's, bit for bit) compress their buckets as CPU trainers do:
        allreducing on Gloo (their buckets staged through host memory), and
        on NCCL (its stand-in on the fake GPU: the buckets narrowed, summed
        and widened where they are, the division by the world size as
        CUDA's multiply by 1/2, which is exact) — the same final
        parameters, for fp16 and bf16, and the same bytes per step."""
        for compress in ("fp16", "bf16"):
            digests, per_step = {}, {}
            for device, backend in (("cpu", "gloo"), ("fake-cuda", "gloo"), ("fake-cuda", "nccl")):
                tag = "%s-%s-%s" % (compress, device, backend)
                out = os.path.join(self.reg.workdir, "out-dev-" + tag)
                cuda = device != "cpu"
                m = self.master("--model", "Tiny", "--ddp-hook", "allreduce_hook", "--nserver", "0",
                                "--ntrainer", "0" if cuda else "2", "--ncudatrainer", "2" if cuda else "0",
                                "--backend", backend, "--epochs", "2", "--batch-size", "5", "--compress", compress,
                                out=out)
                for r in range(2):
                    self.node(m, "psbench-trainer", device, "trainer%d-%s" % (r, tag))
                res = self.results(out, m)
                got = {t["final_params_sha256"] for t in res["trainers"]}
                self.assertEqual(len(got), 1, (tag, res["trainers"]))
                self.assertEqual({t["comm_hook"] for t in res["trainers"]}, {HOOK_NAMES[compress]}, tag)
                self.assertEqual({t["compress"] for t in res["trainers"]}, {compress}, tag)
                digests[(device, backend)] = got.pop()
                per_step[(device, backend)] = [r["bytes_per_step"] for r in res["headline"]["trainers"]]
            self.assertEqual(len(set(digests.values())), 1, (compress, digests))
            self.assertEqual(len({tuple(v) for v in per_step.values()}), 1, (compress, per_step))

    # -- PowerSGD ---------------------------------------------------------------

    # Tiny's parameters: rows x cols as PyTorch's tensor.view(shape[0], -1)
    SHAPES = {"embedding.weight": (128, 32), "dense.0.weight": (128, 32), "dense.0.bias": (128, 1)}

    @classmethod
    def psgd_floats(cls, bucket, rank, batched):
        """The floats a compressed step allreduces for one bucket: per
        tensor P + Q where PyTorch's _should_compress says so (min rate 2),
        the tensor itself otherwise; batched: 2 side r."""
        if batched:
            side = math.isqrt(bucket["floats"] - 1) + 1
            return 2 * side * min(side, rank)
        n = 0
        for p in bucket["parameters"]:
            rows, cols = cls.SHAPES[p]
            r = min(rows, cols, rank)
            n += (rows + cols) * r if (rows + cols) * r * 2 < rows * cols else rows * cols
        return n

    def check_powersgd(self, res, params, rank, start, batched):
        """Both trainers identical and what results.json says of the run."""
        self.assertEqual(res["phase"], "done")
        hook = "batched_powerSGD_hook" if batched else "powerSGD_hook"
        resolved = res["configuration"]["resolved"]
        self.assertEqual(resolved["compress"], "powersgd")
        state = {"matrix_approximation_rank": rank, "start_powerSGD_iter": start, "min_compression_rate": 2.0,
                 "use_error_feedback": True, "warm_start": True, "orthogonalization_epsilon": 0.0,
                 "random_seed": 0, "compression_stats_logging_frequency": 10000,
                 "batch_tensors_with_same_shape": False, "hook": hook}
        self.assertEqual(resolved["powersgd"], state)
        self.assertEqual(params[0].tobytes(), params[1].tobytes(), "the trainers differ")
        rows = res["headline"]["trainers"]
        for r, t in zip(rows, res["trainers"]):
            self.assertEqual(t["compress"], "powersgd")
            self.assertEqual(t["comm_hook"], hook)
            ps = t["powersgd"]
            self.assertEqual({k: ps[k] for k in state}, state)
            steps = ps["plain_steps"] + ps["compressed_steps"]
            self.assertEqual(ps["plain_steps"], min(start, steps))
            floats = sum(b["floats"] for b in t["buckets"]["rebuilt"])
            per = 4 * sum(self.psgd_floats(b, rank, batched) for b in t["buckets"]["rebuilt"])
            if ps["compressed_steps"]:
                self.assertEqual(ps["bytes_per_compressed_step"], per)
            else:
                self.assertIsNone(ps["bytes_per_compressed_step"])
            want = (ps["plain_steps"] * 4 * floats + ps["compressed_steps"] * per) / steps
            self.assertAlmostEqual(ps["bytes_per_step"], want, places=6)
            self.assertAlmostEqual(r["bytes_per_step"], want, places=6)
            for loss in t["loss_per_epoch"]:
                self.assertTrue(math.isfinite(loss), t["loss_per_epoch"])
        return rows[-1]["bytes_per_step"]

    def test_powersgd(self):
        none, fp32 = self.compress_job("none", "psgd-none")
        res, params = self.compress_job("powersgd:4", "psgd4", "--powersgd-start-iter", "2")
        self.assertEqual(res["configuration"]["compress"], "powersgd:4")  # the flag's echo
        got = self.check_powersgd(res, params, 4, 2, False)
        self.assertLess(got, none["headline"]["trainers"][-1]["bytes_per_step"])
        t = res["trainers"][0]
        self.assertEqual(t["powersgd"]["plain_steps"], 2)
        self.assertGreater(t["powersgd"]["compressed_steps"], 0)
        # Low-rank gradients, error feedback: close to fp32's training,
        # not the same.
        self.assertNotEqual(params[0].tobytes(), fp32[0].tobytes())
        d = self.compress_distance(params[0], fp32[0])
        self.assertLess(d, 0.01, "relative distance %g from fp32's" % d)
        for a, b in zip(t["loss_per_epoch"], none["trainers"][0]["loss_per_epoch"]):
            self.assertLess(abs(a - b), 0.02 * abs(b), (t["loss_per_epoch"], none["trainers"][0]["loss_per_epoch"]))
        # batched_powerSGD_hook: every bucket one square, padded
        res, params = self.compress_job("powersgd:2", "psgd-b", "--powersgd-start-iter", "3", "--powersgd-batched")
        self.check_powersgd(res, params, 2, 3, True)
        # PyTorch's default start: 1000 plain steps, longer than the run:
        # said once, and fp32's arithmetic bit for bit.
        masters = []
        res, params = self.compress_job("powersgd", "psgd-never", master_out=masters)
        self.check_powersgd(res, params, 1, 1000, False)
        self.assertEqual(params[0].tobytes(), fp32[0].tobytes())
        warn = [ln for ln in masters[0].stderr().splitlines() if "start_powerSGD_iter" in ln]
        self.assertEqual(len(warn), 1, masters[0].stderr())
        self.assertIn("--compress powersgd: start_powerSGD_iter 1000 >= the run's ", warn[0])
        self.assertIn("steps: it never compresses", warn[0])

    def test_powersgd_cuda_trainers(self):
        """CUDA trainers (the fake GPU) on Gloo and on NCCL (its stand-in):
        their buckets are staged through pinned host memory, where
        PowerSGD factors them as a CPU trainer's, its P and Q summed by the
        group (NCCL's staged through its device buffer); layer-wise and
        batched, the CPU trainers' parameters bit for bit (the sum of two
        is one add whatever the backend), and the same PowerSGD report."""
        for batched in (False, True):
            digests, reports = {}, {}
            for device, backend in (("cpu", "gloo"), ("fake-cuda", "gloo"), ("fake-cuda", "nccl")):
                tag = "psgd-%s-%s-%s" % (device, backend, "batched" if batched else "layer")
                out = os.path.join(self.reg.workdir, "out-" + tag)
                cuda = device != "cpu"
                m = self.master("--model", "Tiny", "--ddp-hook", "allreduce_hook", "--nserver", "0",
                                "--ntrainer", "0" if cuda else "2", "--ncudatrainer", "2" if cuda else "0",
                                "--backend", backend, "--epochs", "2", "--batch-size", "5", "--compress",
                                "powersgd:2", "--powersgd-start-iter", "2",
                                *(["--powersgd-batched"] if batched else []), out=out)
                trainers = [self.node(m, "psbench-trainer", device, "trainer%d-%s" % (r, tag)) for r in range(2)]
                res = self.results(out, m)
                got = {t["final_params_sha256"] for t in res["trainers"]}
                self.assertEqual(len(got), 1, (tag, res["trainers"]))
                digests[(device, backend)] = got.pop()
                t = res["trainers"][0]
                self.assertGreater(t["powersgd"]["compressed_steps"], 0, tag)
                reports[(device, backend)] = (t["comm_hook"], t["powersgd"],
                                              res["headline"]["trainers"][0]["bytes_per_step"])
                if backend == "nccl":  # staged, not handed over in device memory
                    for tr in trainers:
                        self.assertEqual(tr.wait(30), 0, tr.describe())
                        self.assertRegex(tr.stderr(), r"allreduce_hook: 0 bucket\(s\) handed over in device memory, "
                                         r"[1-9]\d* through pinned host memory", tr.describe())
            self.assertEqual(len(set(digests.values())), 1, (batched, digests))
            self.assertEqual(len({repr(r) for r in reports.values()}), 1, (batched, reports))

    def test_powersgd_sparse_model(self):
        """A sparse embedding's bucket (the step's last: the dense layer
        fills a first bucket of 0.01 MiB before it) stays fp32; the
        steps still count, so the dense buckets are compressed after
        start_powerSGD_iter; the headline adds the sparse bucket as
        without compression."""
        out = os.path.join(self.reg.workdir, "out-psgd-sparse")
        m = self.master("--model", "TinySparse", "--ddp-hook", "allreduce_hook", "--nserver", "0", "--ntrainer", "2",
                        "--epochs", "2", "--batch-size", "5", "--compress", "powersgd:4", "--powersgd-start-iter",
                        "2", "--set", "trainer.first_bucket_mb=0.01", out=out)
        for r in range(2):
            self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r)],
                           name="trainer%d-sparse" % r)
        res = self.results(out, m)
        self.assertEqual(len({t["final_params_sha256"] for t in res["trainers"]}), 1)
        for r, t in zip(res["headline"]["trainers"], res["trainers"]):
            ps = t["powersgd"]
            self.assertEqual(ps["plain_steps"], 2)
            self.assertGreater(ps["compressed_steps"], 0)
            rebuilt = t["buckets"]["rebuilt"]
            self.assertTrue(rebuilt[-1]["sparse"], rebuilt)
            dense = [b for b in rebuilt if not b["sparse"]]
            self.assertEqual(ps["bytes_per_compressed_step"], 4 * sum(self.psgd_floats(b, 4, False) for b in dense))
            sparse = sum(4 * b["floats"] for b in rebuilt if b["sparse"])
            self.assertAlmostEqual(r["bytes_per_step"], ps["bytes_per_step"] + sparse, places=6)

    def test_powersgd_refusals(self):
        line = self.compress_refusal("--model", "Tiny", "--ddp-hook", "rpc_hook", "--compress", "powersgd")
        self.assertIn("--compress powersgd: PowerSGD through the parameter servers is not built: ", line)
        line = self.compress_refusal("--model", "Tiny", "--ddp-hook", "sparse_rpc_hook", "--compress", "powersgd:2")
        self.assertIn("--compress powersgd: only allreduce_hook runs PowerSGD", line)
        line = self.compress_refusal("--model", "Syn", "--compress", "powersgd")
        self.assertIn("(Synthetic) pushes fp32 buckets to the servers and has no tensors to factor", line)
        line = self.compress_refusal("--model", "Tiny", "--ddp-hook", "allreduce_hook", "--nserver", "0",
                                     "--compress", "powersgd", "--powersgd-start-iter", "1")
        self.assertIn("\"start_powerSGD_iter\" must be > 1 with use_error_feedback on, got 1", line)
        line = self.compress_refusal("--model", "Tiny", "--compress", "bf16:4")
        self.assertIn("only powersgd takes a :RANK", line)

    # -- rpc_hook: narrow pushes ------------------------------------------------

    def rpc_job(self, compress, transport, tag, nserver=1, kind=None):
        """A 2-trainer rpc_hook job with --compress, its servers and
        trainers started by hand on `transport`: (results.json, each
        trainer's final parameters)."""
        out = os.path.join(self.reg.workdir, "out-" + tag)
        extra = ["--placement", "shard"] if nserver > 1 else []
        if kind:
            extra += ["--server", kind]
        m = self.master("--model", "Tiny", "--ddp-hook", "rpc_hook", "--nserver", str(nserver), "--ntrainer", "2",
                        "--epochs", "2", "--batch-size", "5", "--compress", compress, *extra, out=out)
        paths = []
        for r in range(2):
            p = os.path.join(self.reg.workdir, "params-%s-%d.bin" % (tag, r))
            paths.append(p)
            self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r), "--params-out", p,
                            "--transport", transport], name="trainer%d-%s" % (r, tag))
        for s in range(nserver):
            self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--transport", transport],
                           name="server%d-%s" % (s, tag))
        res = self.results(out, m)
        return res, [psb.params_of(p) for p in paths]

    def test_rpc_hook_narrow_pushes(self):
        base_res, base = self.rpc_job("none", "tcp", "rpc-none")
        fp32 = base[0]
        self.assertEqual(base[0].tobytes(), base[1].tobytes())
        base_bytes = base_res["headline"]["trainers"][-1]["bytes_per_step"]
        runs = [("fp16", "tcp", 1, None), ("bf16", "tcp", 2, "AverageBatchParameterServer"), ("bf16", "shm", 1, None),
                ("fp16", "shm", 2, None)]
        for c, transport, ns, kind in runs:
            tag = "rpc-%s-%s-%d" % (c, transport, ns)
            res, params = self.rpc_job(c, transport, tag, ns, kind)
            self.assertEqual(res["phase"], "done", tag)
            self.assertEqual(res["configuration"]["resolved"]["compress"], c, tag)
            for t in res["trainers"]:
                self.assertEqual(t["compress"], c, tag)
                self.assertEqual(t["comm_hook"], "rpc_hook", tag)
                self.assertEqual({l["transport"] for l in t["links"]}, {transport}, (tag, t["links"]))
                for b in t["buckets"]["rebuilt"]:
                    self.assertEqual(b["element_bytes"], 2, (tag, b))
            self.assertEqual(res["headline"]["trainers"][-1]["bytes_per_step"] * 2, base_bytes, tag)
            self.assertEqual(params[0].tobytes(), params[1].tobytes(), "%s: the trainers differ" % tag)
            self.assertNotEqual(params[0].tobytes(), fp32.tobytes(), "%s: no rounding shows" % tag)
            d = self.compress_distance(params[0], fp32)
            self.assertLess(d, 1e-2, "%s: relative distance %g from fp32's" % (tag, d))

    def test_fake_gpu_trainers_rpc_hook(self):
        """CUDA trainers (the fake GPU) push narrow from host memory (a CPU
        server offers no CUDA IPC) to a CPU server over shared memory: the
        CPU trainers' bf16 parameters, bit for bit."""
        digests = {}
        for device in ("cpu", "fake-cuda"):
            out = os.path.join(self.reg.workdir, "out-rpc-dev-" + device)
            cuda = device != "cpu"
            m = self.master("--model", "Tiny", "--ddp-hook", "rpc_hook", "--nserver", "1", "--placement", "shard",
                            "--ntrainer", "0" if cuda else "2", "--ncudatrainer", "2" if cuda else "0",
                            "--epochs", "2", "--batch-size", "5", "--compress", "bf16", out=out)
            for r in range(2):
                self.node(m, "psbench-trainer", device, "trainer%d-%s" % (r, device), extra=("--transport", "shm"))
            self.node(m, "psbench-server", "cpu", "server-" + device, extra=("--transport", "shm"))
            res = self.results(out, m)
            got = {t["final_params_sha256"] for t in res["trainers"]}
            self.assertEqual(len(got), 1, (device, res["trainers"]))
            for t in res["trainers"]:
                self.assertEqual([(l["transport"], l["cuda_ipc"]) for l in t["links"]], [("shm", False)], device)
            digests[device] = got.pop()
        self.assertEqual(digests["fake-cuda"], digests["cpu"])

    def test_cuda_server_narrow_pushes(self):
        """CUDA servers (the fake GPU: its kernels' arithmetic is the cpu
        device's, bit for bit) take narrow pushes: the last fold of each
        element widens, folds and narrows on the GPU (psb_fold_narrow_out),
        average-batch's stored pushes are widened as they come. Kind
        average and average-batch, CPU and CUDA trainers, TCP and shared
        memory, and, for CUDA trainers on a CUDA server, the transport
        `auto` picks: CUDA IPC (each bucket narrowed on the GPU into the
        gradients' shadow, folded from there, the mean lent in the push's
        type and widened on the GPU): every run ends with the parameters
        of the same job on CPU servers, bit for bit, in the push's type."""
        want = {}
        runs = [("bf16", "cpu", "cpu", "tcp", None), ("bf16", "cpu", "fake-cuda", "tcp", None),
                ("bf16", "fake-cuda", "fake-cuda", "auto", None), ("fp16", "cpu", "cpu", "shm", "batch"),
                ("fp16", "cpu", "fake-cuda", "shm", "batch"), ("fp16", "fake-cuda", "fake-cuda", "tcp", "batch"),
                ("fp16", "fake-cuda", "fake-cuda", "auto", "batch")]
        for c, tdev, sdev, transport, kind in runs:
            tag = "cudasrv-%s-%s-%s-%s-%s" % (c, tdev, sdev, transport, kind)
            out = os.path.join(self.reg.workdir, "out-" + tag)
            cuda_t, cuda_s = tdev != "cpu", sdev != "cpu"
            extra = ["--server", "AverageBatchParameterServer"] if kind else []
            m = self.master("--model", "Tiny", "--ddp-hook", "rpc_hook", "--placement", "shard",
                            "--nserver", "0" if cuda_s else "1", "--ncudaserver", "1" if cuda_s else "0",
                            "--ntrainer", "0" if cuda_t else "2", "--ncudatrainer", "2" if cuda_t else "0",
                            "--epochs", "2", "--batch-size", "5", "--compress", c, *extra, out=out)
            for r in range(2):
                self.node(m, "psbench-trainer", tdev, "trainer%d-%s" % (r, tag), extra=("--transport", transport))
            self.node(m, "psbench-server", sdev, "server-" + tag, extra=("--transport", transport))
            res = self.results(out, m)
            self.assertEqual(res["phase"], "done", tag)
            got = {t["final_params_sha256"] for t in res["trainers"]}
            self.assertEqual(len(got), 1, (tag, res["trainers"]))
            for t in res["trainers"]:
                self.assertEqual(t["compress"], c, tag)
                for b in t["buckets"]["rebuilt"]:
                    self.assertEqual(b["element_bytes"], 2, (tag, b))
                # by CUDA IPC where `auto` finds both on one GPU
                ipc = transport == "auto" and cuda_t and cuda_s
                want_link = ("shm" if transport == "auto" else transport, ipc)
                self.assertEqual([(l["transport"], l["cuda_ipc"]) for l in t["links"]], [want_link], tag)
            key = (c, kind)
            if key not in want:
                self.assertEqual((tdev, sdev), ("cpu", "cpu"), tag)  # the reference comes first
                want[key] = got.pop()
            else:
                self.assertEqual(got.pop(), want[key], "%s: not the CPU server's parameters" % tag)

    def test_synthetic_narrow_pushes(self):
        """The Synthetic model with --compress: its trainers check every
        element of every narrow mean bit for bit against what they predict
        (a mismatch fails the run), over TCP and shared memory, 2 servers
        (shard) for one of them, a CUDA server (the fake GPU's) for one,
        and CUDA trainers on a CUDA server by CUDA IPC for the last (the
        narrow ramp in their exported memory, every mean widened and
        checked on the GPU); bf16 rounds its ramp's larger values, so the
        bf16 check is not the f32 one's."""
        for c, transport, ns, tdev, sdev in (("bf16", "tcp", 1, "cpu", "cpu"), ("bf16", "shm", 2, "cpu", "cpu"),
                                             ("fp16", "shm", 1, "cpu", "cpu"), ("fp16", "tcp", 1, "cpu", "fake-cuda"),
                                             ("bf16", "auto", 1, "fake-cuda", "fake-cuda")):
            tag = "syn-%s-%s-%s-%s" % (c, transport, tdev, sdev)
            out = os.path.join(self.reg.workdir, "out-" + tag)
            cuda_t, cuda_s = tdev != "cpu", sdev != "cpu"
            extra = ["--placement", "shard"] if ns > 1 or cuda_s else []
            m = self.master("--model", "Syn", "--nserver", "0" if cuda_s else str(ns), "--ncudaserver",
                            str(ns) if cuda_s else "0", "--ntrainer", "0" if cuda_t else "2",
                            "--ncudatrainer", "2" if cuda_t else "0", "--epochs", "2",
                            "--batch-size", "5", "--compress", c, *extra, out=out)
            logs = []
            for r in range(2):
                logs.append(self.node(m, "psbench-trainer", tdev, "trainer%d-%s" % (r, tag),
                                      extra=("--rank", str(r), "--transport", transport)))
            servers = [self.node(m, "psbench-server", sdev, "server%d-%s" % (k, tag), extra=("--transport", transport))
                       for k in range(ns)]
            res = self.results(out, m)
            self.assertEqual(res["phase"], "done", tag)
            for t in res["trainers"]:
                self.assertEqual(t["compress"], c, tag)
                want = [("shm", True)] if cuda_t else [(transport, False)] * ns
                self.assertEqual([(l["transport"], l["cuda_ipc"]) for l in t["links"]], want, (tag, t["links"]))
            if cuda_t:  # every push narrow from the GPU's memory
                for p in logs:
                    p.wait(30)
                    self.assertIn("synthetic: bf16 pushes from GPU memory", p.stderr() + p.stdout(), tag)
                servers[0].wait(30)
                pushes = re.search(r"psbench-server \d+: (\d+) pushes in", servers[0].stdout())
                self.assertIsNotNone(pushes, servers[0].stdout())
                self.assertIn("CUDA IPC: %s pushes folded from trainers' GPU memory" % pushes.group(1),
                              servers[0].stdout(), tag)

    # -- the protocol by hand ------------------------------------------------------

    @staticmethod
    def f16_bits(v):
        return struct.unpack("<H", struct.pack("<e", v))[0]

    @staticmethod
    def bf16_bits(v):
        # values here are exact in bf16: the top half of the float32
        return struct.unpack("<I", struct.pack("<f", v))[0] >> 16

    def narrow_payload(self, dtype, values):
        bits = self.f16_bits if dtype == "f16" else self.bf16_bits
        return b"".join(struct.pack("<H", bits(v)) for v in values)

    def test_protocol_by_hand(self):
        srv = self.reg.server(trainers=2)
        a, b = self.client(srv), self.client(srv)
        w = self.hello_ok(a, 0, extra={"dtype": "bf16"})
        self.assertEqual(w.get("dtype"), "bf16")
        w = self.hello_ok(b, 1)
        self.assertNotIn("dtype", w)
        # b announced none: its narrow push is refused, the connection kept.
        vals = [1.0, -2.5, 3.0, 0.125]
        b.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "bf16", "layout": "dense", "count": 4},
                     self.narrow_payload("bf16", vals))
        e = self.expect_error(b, "unsupported")
        self.assertIn("announced no narrow type", e["message"])
        # An f32 push from b and a bf16 one from a into one (batch, bucket): mixed.
        b.push(psb.dense_push(0, 0, vals))
        self.barrier(b)
        a.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "bf16", "layout": "dense", "count": 4},
                     self.narrow_payload("bf16", vals))
        e = self.expect_error(a, "shape_mismatch")
        self.assertIn("dtype bf16 differs from f32", e["message"])
        a.close()
        b.close()
        srv.terminate_and_wait()
        # Two trainers announcing f16 on one server, a CPU one and a CUDA one
        # (the fake GPU's: the last fold narrows on its GPU): answered in
        # that type, the mean of the widened pushes narrowed.
        va, vb = [1.0, 2.0, -3.0, 0.5, 7.0], [3.0, 2.0, 1.0, 0.25, 8.0]
        for device in ("fake-cuda", "cpu"):
            srv = self.reg.server(trainers=2, extra=["--device", device])
            a, b = self.client(srv), self.client(srv)
            self.assertEqual(self.hello_ok(a, 0, extra={"dtype": "f16"}).get("dtype"), "f16")
            self.assertEqual(self.hello_ok(b, 1, extra={"dtype": "f16"}).get("dtype"), "f16")
            for c, v in ((a, va), (b, vb)):
                c.send_frame({"type": "push", "batch": 0, "bucket": 0, "dtype": "f16", "layout": "dense",
                              "count": 5}, self.narrow_payload("f16", v))
            want = self.narrow_payload("f16", [(x + y) * 0.5 for x, y in zip(va, vb)])
            for c in (a, b):
                h, p = c.recv_frame()
                self.assertEqual((h.get("type"), h.get("dtype"), h.get("count")), ("result", "f16", 5), (device, h))
                self.assertEqual(p, want, device)
            if device != "cpu":
                a.close()
                b.close()
                srv.terminate_and_wait()
        # A wrong payload size for the narrow type: bad_frame (count x 2 bytes).
        a.send_frame({"type": "push", "batch": 1, "bucket": 0, "dtype": "f16", "layout": "dense", "count": 5},
                     self.narrow_payload("f16", va) + b"\0\0")
        self.expect_error(a, "bad_frame")
        srv.terminate_and_wait()
        # A batch-update server takes no narrow pushes: its hello is refused, saying why.
        srv = self.reg.server(trainers=1, kind="batch-update")
        c = self.client(srv)
        h, _ = c.hello(0, extra={"dtype": "bf16"})
        self.assertEqual((h.get("type"), h.get("code")), ("error", "unsupported"), h)
        self.assertIn("does not take bf16 pushes", h.get("message"))
        srv.terminate_and_wait()
        # A name that is no type.
        srv = self.reg.server(trainers=1)
        c = self.client(srv)
        h, _ = c.hello(0, extra={"dtype": "f64"})
        self.assertEqual((h.get("type"), h.get("code")), ("error", "unsupported"), h)
        self.assertIn("hello dtype 'f64' is not f32, f16 or bf16", h.get("message"))

    def test_welcome_without_echo(self):
        """A server that does not know narrow pushes welcomes the trainer
        without the echo: the trainer fails in one line naming it, before
        any push."""
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind((psb.HOST, 0))
        ls.listen(1)
        ls.settimeout(30)
        self.addCleanup(ls.close)
        port = ls.getsockname()[1]
        seen = {}

        def fake_server():
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            c = psb.RawClient.accepted(conn)
            try:
                h, _ = c.recv_frame(30)
                seen["hello"] = h
                c.send_frame({"type": "welcome", "version": 1, "server": 0, "trainers": 1})
                seen["next"] = c.recv_frame(30)[0]
            except (psb.Closed, OSError, socket.timeout):
                pass
            c.close()
        th = threading.Thread(target=fake_server)
        th.start()
        rc, out, err = self.reg.run([psb.bin_path("psbench-trainer"), "--server", "%s:%d" % (psb.HOST, port),
                                     "--rank", "0", "--model", "synthetic", "--transport", "tcp",
                                     "--compress", "bf16", "--batches", "1"], timeout=60)
        th.join(60)
        self.assertNotEqual(rc, 0, err)
        self.assertEqual(seen.get("hello", {}).get("dtype"), "bf16", seen)
        self.assertNotIn("next", seen, "the trainer pushed to a server that did not take bf16")
        last = psb.last_line(err)
        self.assertIn("server %s:%d does not take bf16 pushes (--compress bf16)" % (psb.HOST, port), last)

    # -- refusals ---------------------------------------------------------------

    def compress_refusal(self, *args, **kw):
        rc, out, err = self.run_master(*args, timeout=60, **kw)
        self.assertEqual(rc, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        return lines[0]

    def test_refusals(self):
        line = self.compress_refusal("--model", "Tiny", "--ddp-hook", "sparse_rpc_hook", "--compress", "bf16")
        self.assertIn("--compress bf16: only allreduce_hook (PyTorch's bf16_compress_hook) and rpc_hook", line)
        self.assertIn("sparse_rpc_hook", line)
        line = self.compress_refusal("--model", "SynSparse", "--compress", "fp16")
        self.assertIn("(Synthetic) pushes sparse buckets, which stay fp32", line)
        line = self.compress_refusal("--model", "Lin", "--server", "BatchUpdateParameterServer", "--trainer",
                                     "BatchUpdateTrainer", "--compress", "fp16")
        self.assertIn("--compress fp16: trainer 'BatchUpdateTrainer' (BatchUpdateTrainer) has no \"compress\"", line)
        # The standalone synthetic trainer: dense pushes only.
        rc, out, err = self.reg.run([psb.bin_path("psbench-trainer"), "--server", "127.0.0.1:9", "--rank", "0",
                                     "--model", "synthetic", "--sparse", "--compress", "bf16"], timeout=30)
        self.assertNotEqual(rc, 0)
        self.assertIn("--compress: --sparse pushes stay f32", psb.last_line(err))
        line = self.compress_refusal("--model", "Tiny", "--compress", "fp8")
        self.assertIn("--compress: ", line)
        self.assertIn("fp8", line)
        # The HybridModel's dense part: PowerSGD's own rule, the file and the
        # flags that changed its entry named
        line = self.compress_refusal("--number-trainers", "2", "--number-ps", "2", "--embedding-dim", "256",
                                     "--compress", "powersgd", "--powersgd-start-iter", "1", model_config=None)
        self.assertIn("trainer_configurations.json with --compress powersgd --powersgd-start-iter 1: trainer "
                      "\"HybridTrainer\": \"start_powerSGD_iter\" must be > 1 with use_error_feedback on, got 1",
                      line)

    def test_hybrid_model_dense_part(self):
        """The seed's DDP + RPC benchmark: the HybridModel's dense part is a
        DDP model under allreduce_hook, so --compress fp16|bf16 is PyTorch's
        compress hook on it (HybridTrainer's compress key), and
        --compress powersgd:2 its powerSGD_hook (the dense part's ten
        tensors, PyTorch's shapes, in DDP's order). Its trainers end with
        the same dense parameters (the allreduces give every member the
        same bits), say compress and PyTorch's hook name, and the
        configuration resolves it; PowerSGD reports its steps and the
        bytes of a compressed step (rank 2: P and Q of the five weights,
        the biases whole but the last layer's 8 x 1, 3448 floats); without
        the flag the trainers' entries are as before (neither key)."""
        for c in ("none", "fp16", "bf16", "powersgd:2"):
            out = os.path.join(self.reg.workdir, "hybrid-" + c.replace(":", "-"))
            extra = () if c == "none" else ("--compress", c)
            if c.startswith("powersgd"):
                extra += ("--powersgd-start-iter", "2")
            m = self.master("--number-trainers", "2", "--number-ps", "2", "--embedding-dim", "256", "--epochs", "2",
                            "--local", *extra, out=out, model_config=None)
            res = self.results(out, m)
            self.assertEqual(res["phase"], "done", c)
            self.assertEqual(len(res["trainers"]), 2, c)
            digests = {t["final_params_sha256"] for t in res["trainers"]}
            self.assertEqual(len(digests), 1, "%s: the trainers' dense parts differ" % c)
            for t in res["trainers"]:
                self.assertTrue(all(math.isfinite(x) for x in t["loss_per_epoch"]), t)
                if c == "none":
                    self.assertNotIn("compress", t)
                    self.assertNotIn("comm_hook", t)
                elif c.startswith("powersgd"):
                    self.assertEqual((t["compress"], t["comm_hook"]), ("powersgd", "powerSGD_hook"), t)
                    ps = t["powersgd"]
                    self.assertEqual(ps["plain_steps"], 2, ps)
                    self.assertEqual(ps["compressed_steps"], 2 * 10 - 2, ps)  # 2 epochs of 10 batches
                    self.assertEqual(ps["bytes_per_compressed_step"], 4 * 3448, ps)
                else:
                    self.assertEqual((t["compress"], t["comm_hook"]), (c, HOOK_NAMES[c]), t)
            self.assertEqual(res["configuration"]["resolved"]["compress"], c.split(":")[0])


if __name__ == "__main__":
    psb.main()
