"""DDP's buckets, end to end: psbench's trainers cut the DummyModel's
gradients exactly where PyTorch's DistributedDataParallel does, for several
shapes, caps and first-bucket limits, and say so in results.json.

Where /usr/bin/python3 has torch (Debian's python3-torch), each case is
asked of DDP itself (tests/tools/ddp_layouts.py: a one-rank Gloo group,
three iterations, DDP's `rebuilt_per_bucket_param_indices` and
`bucket_sizes`) and compared with the `buckets` a real psbench run records
for every trainer: the rebuilt buckets (floats and parameters, in DDP's
order) and the first iteration's. Without torch the test is skipped with
that reason (tests/unit/trainer/test_ddp_buckets.c holds the same rules against a
table DDP produced once).

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_ddp_buckets.py
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import psb  # noqa: E402
from psb import Master  # noqa: E402

try:
    import torch  # noqa: F401
    import ddp_layouts
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# (num_embeddings, embedding_dim, dense_layers_count, sparse, bucket_cap_mb, first_bucket_mb)
CASES = [
    (256, 64, 4, False, 0.02, 0.05),
    (256, 64, 4, True, 0.02, 0.05),
    (128, 32, 6, False, 0.005, 0.0),
    (512, 32, 3, True, 0.01, 1.0),
]


@unittest.skipIf(not HAVE_TORCH, "torch is not installed for /usr/bin/python3 (Debian: python3-torch)")
class DdpBuckets(psb.PsbTestCase):

    def run_case(self, case):
        ne, ed, nl, sparse, cap, first = case
        models = os.path.join(self.reg.workdir, "models.json")
        with open(models, "w") as f:
            json.dump({"M": {"model_class": "DummyModel",
                             "configurations": {"num_embeddings": ne, "embedding_dim": ed, "dense_input_size": ed,
                                                "dense_output_size": ed, "dense_layers_count": nl,
                                                "sparse": sparse}}}, f)
        trainers = os.path.join(self.reg.workdir, "trainers.json")
        with open(trainers, "w") as f:
            json.dump({"T": {"trainer_class": "DdpTrainer",
                             "configurations": {"ddp_hook": "rpc_hook", "lr": 0.5, "bucket_cap_mb": cap,
                                                "first_bucket_mb": first}}}, f)
        datas = os.path.join(self.reg.workdir, "data.json")
        with open(datas, "w") as f:
            json.dump({"D": {"data_class": "DummyData",
                             "configurations": {"max_val": min(ne, ed), "sample_count": 40, "sample_length": 4,
                                                "sparsity_percentage": 0}}}, f)
        out = os.path.join(self.reg.workdir, "out-%d-%d-%d" % (ne, ed, nl))
        m = self.reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                            "--local", "--epochs", "1", "--model", "M", "--model-config-path", models,
                            "--trainer", "T", "--trainer-config-path", trainers, "--data", "D",
                            "--data-config-path", datas, "--out", out], name="master", cls=Master)
        m.wait_ports()
        self.assertEqual(m.wait(120), 0, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            return json.load(f)

    def test_buckets_as_ddp_makes_them(self):
        ddp_layouts.init()
        try:
            for case in CASES:
                ne, ed, nl, sparse, cap, first = case
                want = ddp_layouts.layout((ne, ed, nl, sparse, cap, int(first * 1024 * 1024)))
                res = self.run_case(case)
                names = ["embedding.weight"] + [n for i in range(nl) for n in ("dense.%d.weight" % i,
                                                                             "dense.%d.bias" % i)]
                for t in res["trainers"]:
                    b = t["buckets"]
                    self.assertEqual(b["layout"], "ddp")
                    self.assertEqual(b["bucket_cap_mb"], cap)
                    self.assertEqual(b["first_bucket_mb"], first)
                    for key, ddp in (("rebuilt", want["rebuilt"]), ("first_iteration", want["first_iteration"])):
                        got = [bk["parameters"] for bk in b[key]]
                        self.assertEqual(got, [[names[i] for i in bk] for bk in ddp], (case, key))
                        self.assertEqual([bk["floats"] for bk in b[key]],
                                         [sum(want["param_bytes"][i] for i in bk) // 4 for bk in ddp], (case, key))
                        self.assertEqual([bk["sparse"] for bk in b[key]],
                                         [sparse and bk == [0] for bk in ddp], (case, key))
        finally:
            ddp_layouts.done()


if __name__ == "__main__":
    psb.main()
