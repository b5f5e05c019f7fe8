"""CUDA trainers (issue 21), from the outside: DummyModel trained with the
compute layer on a GPU, its buckets staged through pinned memory to the
hooks, against CUDA and CPU servers.

  - 2 CUDA trainers and 1 CUDA server (the seed's --ncudatrainer /
    --ncudaserver placement), and 2 CUDA trainers on a CPU server (shard
    placement): the run is done and both trainers end with the same
    parameters. On the fake GPU (every machine: the kernels' host loops,
    cuBLAS's product on CBLAS) those are also the CPU run's, bit for bit;
  - a CUDA trainer killed mid-run ends the run naming it, as on CPUs; one
    whose GPU fails (the fake GPU's injected failure) reports `failed` with
    the compute layer's reason and exits by itself;
  - the batch-update Linear on CUDA trainers: forward and backward
    GPU-timed;
  - NCCL on the trainers' device buffers: allreduce_hook with --backend
    nccl hands every dense bucket over in device memory (no pinned twin),
    and the DDP + RPC benchmark's dense part likewise. On a GPU one rank
    (one GPU cannot hold two); on the fake GPU two, through NCCL's stand-in
    (a Gloo group on the fake GPU's memory, coll_nccl_fake_new), ending
    with the CPU trainers' Gloo parameters bit for bit; --compress fp16
    there too (the buckets narrowed, summed and widened on the GPU);
  - on a host with one GPU, --backend nccl with 2 CUDA trainers refused at
    their registration (NCCL cannot hold two ranks on one GPU).

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_cuda_trainer.py
The trainers' device is $PSBENCH_TRAINER_DEVICE (default fake-cuda; cuda on
a GPU), the CUDA servers' $PSBENCH_SERVER_DEVICE (likewise).
"""
import math
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

TDEV = os.environ.get("PSBENCH_TRAINER_DEVICE") or "fake-cuda"
SDEV = os.environ.get("PSBENCH_SERVER_DEVICE") or "fake-cuda"
FAKE = TDEV == "fake-cuda"


class CudaTrainer(psb.PsbTestCase):

    # Its masters' flags (psb.PsbTestCase.master).
    master_kw = dict(rpc_timeout=30)

    def run_job(self, job, server_device, ntrainers=2, logs=None):
        """The job by hand: its server on server_device (None: none), its
        trainers on TDEV; returns results.json (the trainers' logs appended
        to `logs` when given)."""
        out = os.path.join(self.reg.workdir, "out-%d" % len(os.listdir(self.reg.workdir)))
        m = self.master(*job, out=out)
        if server_device:
            self.node(m, "psbench-server", server_device, "server")
        trainers = [self.node(m, "psbench-trainer", TDEV, "trainer") for _ in range(ntrainers)]
        self.assertEqual(m.wait(240), 0, m.describe())
        for t in trainers:
            self.assertEqual(t.wait(30), 0, t.describe())
            if logs is not None:
                logs.append(t.stderr())
        return self.results(out)

    def cpu_digest(self, *job):
        """The same DummyModel job on CPU trainers and a CPU server."""
        out = os.path.join(self.reg.workdir, "out-cpu-%d" % len(os.listdir(self.reg.workdir)))
        m = self.master("--local", *job, out=out)
        self.assertEqual(m.wait(240), 0, m.describe())
        trainers = self.results(out)["trainers"]
        # CPU trainers time on the host's clock: none GPU-timed.
        for t in trainers:
            self.assertEqual(t["gpu_timed"], [], t)
        digests = {t["final_params_sha256"] for t in trainers}
        self.assertEqual(len(digests), 1)
        return digests.pop()

    def check_trainers(self, res):
        self.assertEqual(res["phase"], "done", res.get("error"))
        tr = res["trainers"]
        self.assertEqual(len(tr), 2)
        digests = {t["final_params_sha256"] for t in tr}
        self.assertEqual(len(digests), 1, "the trainers' parameters differ: %r" % tr)
        for t in tr:
            self.assertTrue(t["loss_per_epoch"], t)
            for v in t["loss_per_epoch"]:
                self.assertTrue(isinstance(v, float) and math.isfinite(v), t)
        return digests.pop()

    STEP = {"forward_metric,forward_pass", "backward_metric,backward", "backward_metric,backward_compute",
            "optimizer_metric,step", "batch_level_metric,batch_all"}
    HOOK = {"hook_future_metric,exposed_wait", "hook_future_metric,comm_span", "hook_future_metric,rpc_dense"}

    def check_gpu_timed(self, res):
        """Each CUDA trainer times every metric of its step on its GPU
        (events on its stream, the seed's cuda=True): forward, backward, the
        optimizer and the batch, one sample per batch, each positive and no
        larger than the batch's (the batch's span holds each of them, step by
        step); and the hook's — each bucket's (from the mark after its
        gradients to the mark after its mean is back), the exposed wait, the
        communication span — each within the batch's span too."""
        ranks = res["groups"]["trainer"]["ranks"]
        for t in res["trainers"]:
            mine = ranks[str(t["rank"])]
            self.assertEqual(sorted(t["gpu_timed"]), sorted(mine), t)  # all of them
            self.assertEqual(set(t["gpu_timed"]), self.STEP | self.HOOK, t)
            batch = mine["batch_level_metric,batch_all"]
            self.assertGreater(batch["count"], 0, mine)
            for name in self.STEP | self.HOOK:
                st = mine[name]
                if name in self.STEP:
                    self.assertEqual(st["count"], batch["count"], (name, mine))
                    self.assertGreater(st["min"], 0, (name, st))
                elif name == "hook_future_metric,rpc_dense":  # per bucket: DDP's, one in a pass's first batch
                    b = t["buckets"]
                    dense = [sum(not k["sparse"] for k in b[w]) for w in ("first_iteration", "rebuilt")]
                    self.assertEqual(st["count"], dense[0] + (batch["count"] - 1) * dense[1], (name, mine, b))
                    self.assertGreaterEqual(st["min"], 0, (name, st))
                else:  # per batch
                    self.assertEqual(st["count"], batch["count"], (name, mine))
                    self.assertGreaterEqual(st["min"], 0, (name, st))
                self.assertLessEqual(st["max"], batch["max"] + 1e-6, (name, st, batch))
            # backward is the seed's (loss.backward() under DDP): each
            # step's compute on the stream and its wait for the means
            bwd, cmp, exp = (mine[k] for k in ("backward_metric,backward", "backward_metric,backward_compute",
                                               "hook_future_metric,exposed_wait"))
            self.assertAlmostEqual(bwd["mean"], cmp["mean"] + exp["mean"], delta=1e-3)
            self.assertGreaterEqual(bwd["min"] + 1e-6, cmp["min"])

    def test_cuda_trainers_on_a_cuda_server(self):
        res = self.run_job(("--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "0", "--ncudaserver", "1",
                            "--epochs", "2"), SDEV)
        digest = self.check_trainers(res)
        # What each node computed with: the trainers' GPUs (UUIDs; NCCL's
        # version where it loads), the CUDA server's GPU.
        for t in res["trainers"]:
            self.assertEqual(t["device"], TDEV)
            env = t["environment"]
            self.assertTrue(env["gpus"], env)
            for g in env["gpus"]:
                self.assertTrue(g["name"] and g["uuid"], g)
            self.assertIn("cuda_index", env)
            if not FAKE:
                self.assertRegex(env.get("nccl", ""), r"^\d+\.\d+\.\d+$", env)
                self.assertTrue(all(g.get("memory_bytes", 0) > 0 for g in env["gpus"]), env)
        srv = res["servers"][0]
        self.assertEqual(srv["device"], "cuda")
        self.assertTrue(srv["environment"]["gpu"]["name"], srv)
        self.check_gpu_timed(res)
        if FAKE:
            self.assertEqual(digest, self.cpu_digest("--ntrainer", "2", "--nserver", "1", "--epochs", "2"))

    def test_cuda_trainers_on_a_cpu_server(self):
        res = self.run_job(("--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "1", "--ncudaserver", "0",
                            "--placement", "shard", "--epochs", "2"), "cpu")
        digest = self.check_trainers(res)
        self.check_gpu_timed(res)
        if FAKE:
            self.assertEqual(digest, self.cpu_digest("--ntrainer", "2", "--nserver", "1", "--epochs", "2"))

    def test_cuda_trainer_killed_names_it(self):
        m = self.master("--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "0", "--ncudaserver", "1",
                        "--epochs", "100")
        self.node(m, "psbench-server", SDEV, "server")
        t0 = self.node(m, "psbench-trainer", TDEV, "trainer")
        t1 = self.node(m, "psbench-trainer", TDEV, "trainer")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "phase warmup" not in m.stderr() and m.alive():
            time.sleep(0.05)
        self.assertIn("phase warmup", m.stderr(), m.describe())
        time.sleep(0.5)  # mid-pass: buckets on their way
        # Which process is trainer 1: its start line says.
        victim, other = (t1, t0) if "trainer 1:" in t1.stderr() else (t0, t1)
        victim.signal(signal.SIGKILL)
        self.assertEqual(m.wait(60), 1, m.describe())
        self.assertRegex(m.stderr().strip().splitlines()[-1], r"trainer 1 .*(disconnected|failed|silent)")
        self.assertNotEqual(other.wait(60), 0, other.describe())

    def test_batch_update_on_cuda_trainers(self):
        """The batch-update Linear on CUDA trainers: done; its forward,
        backward, hook (the push to the new parameters back on the device)
        and batch GPU-timed (marks on the stream), get_model the host's."""
        res = self.run_job(("--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "1", "--ncudaserver", "0",
                            "--placement", "shard", "--server", "BatchUpdateParameterServer", "--model",
                            "BatchUpdateLinear", "--trainer", "BatchUpdateTrainer", "--epochs", "2"), "cpu")
        self.assertEqual(res["phase"], "done", res.get("error"))
        for t in res["trainers"]:
            self.assertEqual(sorted(t["gpu_timed"]), ["backward_metric,backward", "batch_level_metric,batch_all",
                                                      "forward_metric,forward_pass",
                                                      "hook_future_metric,update_and_fetch_model"], t)
        ranks = res["groups"]["trainer"]["ranks"]
        for r, mine in ranks.items():
            batch = mine["batch_level_metric,batch_all"]
            for name in ("forward_metric,forward_pass", "backward_metric,backward",
                         "hook_future_metric,update_and_fetch_model"):
                self.assertEqual(mine[name]["count"], batch["count"], (r, name, mine))
                self.assertGreater(mine[name]["min"], 0, (r, name))
                self.assertLessEqual(mine[name]["max"], batch["max"] + 1e-6, (r, name, mine))

    @unittest.skipIf(not FAKE, "the failure is the fake GPU's, injected")
    def test_cuda_trainer_gpu_failure_reported(self):
        """A trainer whose GPU fails mid-run (the fake GPU's injected
        failure: a launch failure, a lost device) reports `failed` with the
        compute layer's reason, which ends the run naming it; it exits on
        its own (no crash, no hang) and so does its peer."""
        m = self.master("--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "1", "--ncudaserver", "0",
                        "--placement", "shard", "--epochs", "100")
        self.node(m, "psbench-server", "cpu", "server")
        ok = self.node(m, "psbench-trainer", TDEV, "trainer")
        env = psb.base_env({"PSBENCH_FAKE_GPU_FAIL_AT": "2000"})
        bad = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--device", TDEV], env=env,
                             name="trainer-failing")
        self.assertEqual(m.wait(120), 1, m.describe())
        last = m.stderr().strip().splitlines()[-1]
        self.assertRegex(last, r"trainer \d+ \(.*\) failed: .*compute \(fake-cuda\): .*injected failure of "
                         r"operation 2000", m.describe())
        rc = bad.wait(60)
        self.assertGreater(rc, 0, bad.describe())  # an exit code of its own, not a signal
        self.assertIn("injected failure of operation 2000", bad.stderr(), bad.describe())
        self.assertNotEqual(ok.wait(60), 0, ok.describe())
        # The peer ends on the master's verdict, which names the GPU: the
        # failing trainer told the master before it left the server (else
        # the peer's peer_lost could reach the master first and be named).
        self.assertIn("injected failure of operation 2000", ok.stderr(), ok.describe())

    def test_nccl_allreduce_on_device_buffers(self):
        """allreduce_hook on NCCL: every dense bucket leaves from the
        gradients in device memory (the trainer's log counts them), the
        mean comes back there; one rank on a GPU, two on the fake GPU."""
        n = 2 if FAKE else 1
        logs = []
        res = self.run_job(("--ntrainer", "0", "--ncudatrainer", str(n), "--nserver", "0", "--trainer",
                            "DdpTrainer", "--backend", "nccl", "--epochs", "2"), None, ntrainers=n, logs=logs)
        self.assertEqual(res["phase"], "done", res.get("error"))
        self.assertEqual(res["configuration"]["backend"], "nccl")
        for log in logs:
            self.assertRegex(log, r"allreduce_hook: [1-9]\d* bucket\(s\) handed over in device memory, 0 through "
                             r"pinned host memory", log)
        tr = res["groups"]["trainer"]["all"]
        self.assertGreater(tr["hook_future_metric,nccl_dense_allreduce"]["count"], 0, tr)
        self.assertNotIn("hook_future_metric,gloo_dense_allreduce", tr)
        for t in res["trainers"]:
            self.assertIn("hook_future_metric,nccl_dense_allreduce", t["gpu_timed"], t)
        digests = {t["final_params_sha256"] for t in res["trainers"]}
        self.assertEqual(len(digests), 1, res["trainers"])
        if FAKE:  # the sum of two, times 1/2: Gloo's bits on CPU trainers
            self.assertEqual(digests.pop(), self.cpu_digest("--ntrainer", "2", "--nserver", "0", "--trainer",
                                                            "DdpTrainer", "--backend", "gloo", "--epochs", "2"))

    def test_nccl_compress_on_device_buffers(self):
        """--compress fp16 on NCCL (PyTorch's fp16_compress_hook on CUDA):
        the buckets narrowed, summed in fp16 and widened back on the
        trainers' GPU, from device memory; half the bytes per step; on
        the fake GPU (two ranks, times 1/2 exact) the CPU trainers' Gloo
        fp16 parameters bit for bit."""
        n = 2 if FAKE else 1
        logs = []
        job = ("--nserver", "0", "--trainer", "DdpTrainer", "--epochs", "2", "--compress", "fp16")
        res = self.run_job(("--ntrainer", "0", "--ncudatrainer", str(n), "--backend", "nccl") + job, None,
                           ntrainers=n, logs=logs)
        self.assertEqual(res["phase"], "done", res.get("error"))
        for log in logs:
            self.assertRegex(log, r"allreduce_hook: [1-9]\d* bucket\(s\) handed over in device memory, 0 through "
                             r"pinned host memory", log)
        for t, row in zip(res["trainers"], res["headline"]["trainers"]):
            self.assertEqual(t["comm_hook"], "fp16_compress_hook", t)
            floats = sum(b["floats"] for b in t["buckets"]["rebuilt"])
            self.assertEqual(row["bytes_per_step"], 2 * floats, row)
            self.assertTrue(all(math.isfinite(x) for x in t["loss_per_epoch"]), t["loss_per_epoch"])
        digests = {t["final_params_sha256"] for t in res["trainers"]}
        self.assertEqual(len(digests), 1, res["trainers"])
        if FAKE:
            self.assertEqual(digests.pop(), self.cpu_digest("--ntrainer", "2", "--backend", "gloo", *job))

    def test_nccl_ddp_rpc_dense_on_device(self):
        """The DDP + RPC benchmark's dense part on NCCL: the HybridModel's
        dense bucket leaves from device memory, compressed to bf16 there
        (HybridTrainer's compress); the run is done and the trainers
        agree."""
        n = 2 if FAKE else 1
        logs = []
        res = self.run_job(("--ntrainer", "0", "--ncudatrainer", str(n), "--number-ps", "1", "--embedding-dim",
                            "512", "--backend", "nccl", "--epochs", "3", "--warmup-cycles", "1", "--compress", "bf16"),
                           "cpu", ntrainers=n, logs=logs)
        self.assertEqual(res["phase"], "done", res.get("error"))
        self.assertEqual({t["comm_hook"] for t in res["trainers"]}, {"bf16_compress_hook"}, res["trainers"])
        for log in logs:
            self.assertIn("allreduce_hook: the dense bucket is handed over in device memory", log)
        tr = res["groups"]["trainer"]["all"]
        self.assertGreater(tr["hook_future_metric,nccl_dense_allreduce"]["count"], 0, tr)
        self.assertEqual(len({t["final_params_sha256"] for t in res["trainers"]}), 1, res["trainers"])
        for t in res["trainers"]:  # the bucket GPU-timed; the remote lookup and the epoch the host's
            self.assertIn("hook_future_metric,nccl_dense_allreduce", t["gpu_timed"], t)
            self.assertNotIn("embedding_metric,remote_lookup", t["gpu_timed"], t)
            self.assertNotIn("epoch_metric,epoch", t["gpu_timed"], t)

    @unittest.skipIf(FAKE or psb.gpu_count() != 1, "needs a host with exactly one GPU")
    def test_nccl_two_trainers_on_one_gpu_refused(self):
        m = self.master("--local", "--ntrainer", "0", "--ncudatrainer", "2", "--nserver", "0", "--trainer",
                        "DdpTrainer", "--backend", "nccl")
        self.assertEqual(m.wait(120), 1, m.describe())
        self.assertIn("NCCL cannot hold two ranks on one GPU", m.stderr())


if __name__ == "__main__":
    psb.main()
