"""What compression costs, shown (issue 43, point 3).

- Each run with --out records trainer 0's final parameters beside its
  results.json (params.bin: header, count, SHA-256, float32), named in
  results.json's final_params with their count, digest (every trainer's
  final_params_sha256: DDP ends them identical) and L2 norm.
- `psbench-master diff` of an fp32 run and a --compress bf16 run of the
  same job (allreduce_hook on Gloo, two CPU trainers, pure DDP): the loss
  per epoch of both with B-A, and the relative L2 distance of the final
  parameters, which is > 0 (bf16 rounds every bucket) and below 1e-3 (the
  gradients rounded to 8 significant bits, not garbage); --csv has the
  rows. The same job twice: distance 0, every loss difference 0. A run
  whose params.bin is gone: "not comparable", naming it.
- `psbench-master sweep --compress none,bf16`: the dimension expands into
  one point per value (--compress in each point's command line), each
  point's final loss, and the bf16 point's loss difference and parameter
  distance against the none point in the table, sweep.json, sweep.csv and
  report.html. A value the master refuses for a point's hook (bf16 with
  rpc_hook, before parameter servers compress) refuses the sweep before
  anything runs, naming the point, as any point's bad value.

Run: PSBENCH_BIN=build /usr/bin/python3 tests/integration/test_compress_cost.py
"""
import csv
import json
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

MODELS = {
    "Tiny": {"model_class": "DummyModel",
             "configurations": {"num_embeddings": 128, "embedding_dim": 32, "dense_input_size": 32,
                                "dense_output_size": 128, "dense_layers_count": 1, "sparse": False}},
}
# The relative distance bf16 may move the final parameters from fp32's in
# this short job (measured: about 2.5e-05).
BF16_TOLERANCE = 1e-3
JOB = ["--model", "Tiny", "--ddp-hook", "allreduce_hook", "--nserver", "0", "--ntrainer", "2", "--batch-size", "5"]


class CompressCost(psb.PsbTestCase):

    def setUp(self):
        super().setUp()
        self.models = os.path.join(self.reg.workdir, "models.json")
        with open(self.models, "w") as f:
            json.dump(MODELS, f)

    def test_slow_parameters_are_waited_for(self):
        """Trainer 0's parameters that come later than the nodes' 5 s of
        last reports (PSBENCH_TEST_PARAMS_PAUSE_MS: 6 s before its part, as
        a big model's on a loaded host) are waited for: params.bin is
        written, trainer 0 exits 0."""
        out = os.path.join(self.reg.workdir, "slow")
        env = dict(psb.base_env(), PSBENCH_TEST_PARAMS_PAUSE_MS="6000")
        rc, o, e = self.run_master("--local", "--model-config-path", self.models, *JOB, "--epochs", "1",
                                   out=out, timeout=120, env=env)
        self.assertEqual(rc, 0, o + e)
        with open(os.path.join(out, "results.json")) as f:
            fp = json.load(f)["final_params"]
        self.assertEqual((fp["file"], fp["why"]), ("params.bin", None), fp)
        self.assertTrue(os.path.exists(os.path.join(out, "params.bin")))
        self.assertNotIn("did not reach the master", e)

    def test_params_max(self):
        """--params-max below the model's parameters: no params.bin, and
        results.json says why, with their count, digest and norm."""
        out = os.path.join(self.reg.workdir, "small-max")
        rc, o, e = self.run_master("--local", "--model-config-path", self.models, *JOB, "--epochs", "1",
                                   "--params-max", "100", out=out, timeout=120)
        self.assertEqual(rc, 0, o + e)
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        fp = res["final_params"]
        self.assertIsNone(fp["file"], fp)
        self.assertEqual(fp["count"], 8320)
        self.assertEqual(fp["sha256"], res["trainers"][0]["final_params_sha256"])
        self.assertGreater(fp["l2_norm"], 0)
        self.assertIn("the model has 8320 parameters, more than the 100 ", fp["why"])
        self.assertIn("this run records (--params-max, at most 16777216): their norm and digest only", fp["why"])
        self.assertFalse(os.path.exists(os.path.join(out, "params.bin")))
        self.assertEqual(res["configuration"]["params_max"], 100)

    def cost_run(self, compress, tag):
        """A --local run of JOB with --compress `compress`: its folder."""
        out = os.path.join(self.reg.workdir, tag)
        rc, o, e = self.run_master("--local", "--model-config-path", self.models, *JOB, "--epochs", "2",
                                   "--compress", compress, out=out, timeout=120)
        self.assertEqual(rc, 0, o + e)
        return out

    def cost_diff(self, a, b, *extra):
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "diff", *extra,
                                     os.path.join(a, "results.json"), os.path.join(b, "results.json")], timeout=30)
        self.assertEqual(rc, 0, out + err)
        return out

    def distance_of(self, out):
        m = re.search(r"^relative distance \|\|B-A\|\|/\|\|A\|\|: (\S+) \((\d+) parameters\)$", out, re.M)
        self.assertIsNotNone(m, out)
        return float(m.group(1)), int(m.group(2))

    def loss_rows(self, out):
        """(trainer, epoch) -> (A, B, B-A) of diff's loss table."""
        rows = {}
        for line in out.splitlines():
            m = re.match(r"^ +(\d+) +(\d+) +(\S+) +(\S+) +(\S+)$", line)
            if m:
                rows[(int(m.group(1)), int(m.group(2)))] = tuple(float(x) for x in m.group(3, 4, 5))
        return rows

    def test_params_file_and_diff(self):
        fp32, bf16, again = self.cost_run("none", "fp32"), self.cost_run("bf16", "bf16"), self.cost_run("none", "fp32-again")
        res = psb.results_json(fp32)
        fp = res["final_params"]
        self.assertEqual((fp["trainer"], fp["file"], fp["why"]), (0, "params.bin", None), fp)
        self.assertEqual({t["final_params_sha256"] for t in res["trainers"]}, {fp["sha256"]})
        with open(os.path.join(fp32, "params.bin"), "rb") as f:
            raw = f.read()
        magic, version, eb, count = struct.unpack("<8sIIQ", raw[:24])
        self.assertEqual((magic, version, eb, count), (b"PSBPARAM", 1, 4, fp["count"]))
        self.assertEqual(len(raw), 56 + 4 * count)
        floats = struct.unpack("<%df" % count, raw[56:])
        self.assertAlmostEqual(sum(x * x for x in floats) ** 0.5, fp["l2_norm"], places=9)

        out = self.cost_diff(fp32, bf16, "--csv", os.path.join(self.reg.workdir, "d.csv"))
        d, n = self.distance_of(out)
        self.assertEqual(n, count)
        self.assertGreater(d, 0, out)
        self.assertLess(d, BF16_TOLERANCE, out)
        rows = self.loss_rows(out)
        self.assertEqual(sorted(rows), [(0, 1), (0, 2), (1, 1), (1, 2)], out)
        b = psb.results_json(bf16)
        for (t, e), (la, lb, diff) in rows.items():
            self.assertAlmostEqual(la, res["trainers"][t]["loss_per_epoch"][e - 1], places=6)
            self.assertAlmostEqual(lb, b["trainers"][t]["loss_per_epoch"][e - 1], places=6)
            self.assertAlmostEqual(diff, lb - la, places=6)
        with open(os.path.join(self.reg.workdir, "d.csv")) as f:
            body = [r for r in csv.reader(f) if r[0] == "training"]
        dist = [r for r in body if r[2:4] == ["final_params", "relative_l2_distance"]]
        self.assertEqual(len(dist), 1, body)
        self.assertAlmostEqual(float(dist[0][6]), d, delta=d * 1e-5)
        self.assertEqual(len([r for r in body if r[2].startswith("loss_epoch_")]), 4, body)

        # The same job twice: the same parameters, the same losses.
        out = self.cost_diff(fp32, again)
        self.assertEqual(self.distance_of(out), (0.0, count))
        self.assertEqual({r[2] for r in self.loss_rows(out).values()}, {0.0}, out)

        # A file gone: not comparable, and why.
        os.unlink(os.path.join(bf16, "params.bin"))
        out = self.cost_diff(fp32, bf16)
        self.assertRegex(out, r"relative distance \|\|B-A\|\|/\|\|A\|\|: not comparable: .*bf16/params.bin")

    def test_sweep_over_compress(self):
        sweep = [psb.bin_path("psbench-master"), "sweep", "--local", "--model-config-path", self.models, *JOB,
                 "--steps", "8", "--warmup-steps", "2", "--no-trace"]
        # The expansion: a point per value, --compress in its command line.
        rc, out, err = self.reg.run(sweep + ["--compress", "none,bf16", "--dry-run"], timeout=60)
        self.assertEqual(rc, 0, out + err)
        cmds = re.findall(r"command: .*", out)
        self.assertEqual(len(cmds), 2, out)
        self.assertIn("--compress none --ddp-hook allreduce_hook", cmds[0])
        self.assertIn("--compress bf16 --ddp-hook allreduce_hook", cmds[1])
        # Its points record the parameters up to the file's bound.
        for c in cmds:
            self.assertIn(" --params-max 16777216", c)
        rc, out, err = self.reg.run(sweep + ["--compress", "none,bf16", "--params-max", "9000", "--dry-run"],
                                    timeout=60)
        self.assertEqual(rc, 0, out + err)
        self.assertNotIn("16777216", out)
        # A value the hook refuses: the sweep is refused before anything runs.
        d = os.path.join(self.reg.workdir, "refused")
        rc, out, err = self.reg.run(sweep + ["--ddp-hook", "rpc_hook,allreduce_hook", "--nserver", "1",
                                             "--compress", "none,powersgd", "--out", d], timeout=60)
        self.assertEqual(rc, 2, out + err)
        self.assertIn("point 3 of 4 (", err)
        self.assertIn("is refused: psbench-master: --compress powersgd: PowerSGD through the parameter servers is "
                      "not built", err)
        self.assertFalse(os.path.exists(os.path.join(d, "points", "001", "results.json")))

        d = os.path.join(self.reg.workdir, "sw")
        rc, out, err = self.reg.run(sweep + ["--compress", "none,bf16", "--out", d], timeout=240)
        self.assertEqual(rc, 0, out + err)
        header = [line for line in out.splitlines() if line.startswith("# point")]
        self.assertEqual(header[0].split()[1:3], ["point", "compress"], out)
        self.assertEqual(header[0].split()[-4:], ["loss", "dloss", "pdist", "marks"], out)
        with open(os.path.join(d, "sweep.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["dimensions"], ["compress"])
        none, bf16 = doc["points"]
        self.assertEqual((none["config"]["compress"], bf16["config"]["compress"]), ("none", "bf16"))
        self.assertIsNone(none["vs_fp32"])
        vs = bf16["vs_fp32"]
        self.assertEqual((vs["point"], vs["fp32_point"], vs["compress"], vs["why"]), (2, 1, "bf16", None), vs)
        self.assertEqual(doc["compression"], [vs])
        self.assertAlmostEqual(vs["loss_diff"], bf16["final_loss"] - none["final_loss"], places=12)
        self.assertGreater(vs["params_distance"], 0)
        self.assertLess(vs["params_distance"], BF16_TOLERANCE)
        # The distance is the files': the same as diff's of the two runs.
        out_diff = self.cost_diff(os.path.join(d, "points", "001"), os.path.join(d, "points", "002"))
        self.assertAlmostEqual(self.distance_of(out_diff)[0], vs["params_distance"],
                               delta=vs["params_distance"] * 1e-5)
        row = [line for line in out.splitlines() if re.match(r"^ +2 +bf16 ", line)]
        self.assertEqual(len(row), 1, out)
        self.assertIn("%.3g" % vs["params_distance"], row[0])
        self.assertIn("# compression: every point: bf16 (point 2) against none (point 1): loss ", out)
        with open(os.path.join(d, "sweep.csv")) as f:
            table = list(csv.DictReader(f))
        self.assertEqual({r["compress"] for r in table}, {"none", "bf16"})
        got = {(r["point"], r["metric"]): float(r["value"]) for r in table
               if r["metric"] in ("final_loss", "loss_vs_fp32", "params_distance_vs_fp32")}
        self.assertEqual(sorted(got), [("1", "final_loss"), ("2", "final_loss"), ("2", "loss_vs_fp32"),
                                       ("2", "params_distance_vs_fp32")])
        self.assertAlmostEqual(got[("2", "params_distance_vs_fp32")], vs["params_distance"], places=12)
        with open(os.path.join(d, "report.html")) as f:
            html = f.read()
        self.assertIn('"vs_fp32"', html)
        self.assertIn("Compression: what it costs", html)  # report.js's section, inlined


if __name__ == "__main__":
    psb.main()
