"""The seed's DDP + RPC benchmark end to end: HybridModel trainers, embedding
tables on parameter servers (kind `embedding`), the dense part averaged by
allreduce_hook over Gloo.

- 2 trainers x 2 servers (--local) and x 8 servers (by hand): the dense
  parameters end bit-identical on both trainers, the loss falls over the
  epochs, the servers report lookups, updates and rows touched, and the
  seed's table (seconds per epoch, samples per second) is printed and in
  results.json.
- The dense part on the staged test device (PSBENCH_TRAINER_COMPUTE=staged)
  ends with the cpu's bits.
- The seed's flags select the benchmark; a shape the dense part cannot
  take (number_ps x embedding_dim not a multiple of 512) is refused at
  start with the reason.
- A loss that stops being a number (HybridTrainer's lr 1e30) fails the run
  where it happens: results.json's error and trainers[].diverged, the
  master's and every trainer's last line name the epoch and the batch;
  with --allow-divergence the run goes on and ends done with a warning.
- The RPC pattern (issue 26): the seed's by default, psbench's with
  --rpc-pattern psbench; both complete with equal dense parameters on the
  trainers, results.json and the tables name the pattern, and the traffic
  each server counted per batch is what the batches' shapes make it: per
  trainer, server and batch one lookup, one rows, one update and (seed)
  one updated; psbench: one updated per trainer and server a pass.
- On stand-in servers that log when calls arrive and answers leave
  (emb_mock_server.py, answers held 50 ms): the seed's pattern has at most
  one lookup of a trainer outstanding, server after server, and no lookup
  while an update is unconfirmed; psbench's visibly has both (so the
  checks can fail).
(The servers' arithmetic and their refusals of bad lookups, with nothing
changed: test_embedding_server.py.)

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_ddp_rpc.py
"""
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import psb  # noqa: E402
from psb import http_get, http_json  # noqa: E402

EMB_MOCK = os.path.join(HERE, "emb_mock_server.py")


def check_pattern_log(events, nserver):
    """Replays a stand-in server log (emb_mock_server.py: every server's
    events of every trainer) trainer by trainer, in time order. Returns
    {"max_outstanding": the most lookups of one trainer unanswered at once,
     "out_of_order": lookups not to the server after the last one's (0, 1,
     ..., nserver-1, 0, ...), "unconfirmed_lookups": lookups that arrived
     while an update of that trainer asked for confirm had none yet, or
     while an unconfirmed update of it was the last call it made,
     "updates": [(confirm, grad), ...] per trainer}."""
    out = {"max_outstanding": 0, "out_of_order": 0, "unconfirmed_lookups": 0, "updates": {}}
    for tr in sorted({e["trainer"] for e in events if e["trainer"] is not None}):
        evs = sorted((e for e in events if e["trainer"] == tr), key=lambda e: e["t"])
        outstanding, expect, pending = 0, 0, set()
        ups = out["updates"].setdefault(tr, [])
        for e in evs:
            if e["ev"] == "lookup":
                outstanding += 1
                out["max_outstanding"] = max(out["max_outstanding"], outstanding)
                if e["server"] != expect:
                    out["out_of_order"] += 1
                expect = (e["server"] + 1) % nserver
                if pending:
                    out["unconfirmed_lookups"] += 1
            elif e["ev"] == "rows":
                outstanding -= 1
            elif e["ev"] == "update":
                ups.append((e["confirm"], e["grad"]))
                pending.add(e["server"])
            elif e["ev"] == "updated":
                pending.discard(e["server"])
        # psbench: updates are never confirmed but the pass's last; forget
        # them once a lookup came after them (that lookup was counted).
    return out


class DdpRpc(psb.PsbTestCase):

    # Its masters' flags (psb.PsbTestCase.master).
    master_kw = dict(local=True, rpc_timeout=30)

    def check_ddp_rpc(self, res, nserver, epochs, pattern="seed"):
        self.assertEqual(res["ddp_rpc"]["rpc_pattern"], pattern)
        self.assertEqual(res["configuration"]["resolved"]["trainer"]["configurations"]["rpc_pattern"], pattern)
        trainers = res["trainers"]
        self.assertEqual(len(trainers), 2)
        self.assertEqual(len({t["final_params_sha256"] for t in trainers}), 1, trainers)
        for t in trainers:
            loss = t["loss_per_epoch"]
            self.assertEqual(len(loss), epochs)
            self.assertLess(loss[-1], 0.8 * loss[0], loss)  # it learns the epoch's batches
            self.assertGreater(t["bags"], 0)
        tr = res["groups"]["trainer"]["all"]
        for k in ("batch_level_metric,batch_all", "embedding_metric,remote_lookup", "forward_metric,forward_pass",
                  "backward_metric,backward", "backward_metric,backward_compute",
                  "hook_future_metric,gloo_dense_allreduce", "epoch_metric,epoch"):
            self.assertIn(k, tr)
        # backward holds its compute and the waits before the step
        self.assertGreaterEqual(tr["backward_metric,backward"]["mean"] + 1e-6,
                                tr["backward_metric,backward_compute"]["mean"])
        self.assertEqual(tr["epoch_metric,epoch"]["count"], 2 * epochs)
        sv = res["groups"]["server"]
        self.assertEqual(sorted(sv["ranks"]), [str(r) for r in range(nserver)])
        for k in ("method_metric,lookup", "method_metric,update"):
            self.assertGreater(sv["all"][k]["count"], 0, k)
        ddp = res["ddp_rpc"]
        self.assertEqual(sorted(r["trainer"] for r in ddp["epochs"]), ["0", "1", "all"])
        for row in ddp["epochs"]:
            self.assertGreater(row["p50_s_per_epoch"], 0)
            self.assertLessEqual(row["p50_s_per_epoch"], row["p95_s_per_epoch"])
            self.assertGreater(row["p50_samples_per_s"], 0)
        touched = ddp["rows_touched"]
        self.assertEqual(sorted(touched), [str(r) for r in range(nserver)])
        self.assertTrue(all(v and v > 0 for v in touched.values()), touched)

    def test_two_servers_local(self):
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--number-trainers", "2", "--number-ps", "2", "--embedding-dim", "256",
                        "--epochs", "15", "--warmup-cycles", "2", out=out, linger=str(psb.LINGER_S))
        deadline_s = 240
        # While it lingers: the servers' rows in the nodes API and Prometheus.
        t0 = time.monotonic()
        while time.monotonic() - t0 < deadline_s and "phase done" not in m.stderr():
            self.assertTrue(m.alive(), m.describe())
            time.sleep(0.2)
        self.assertIn("phase done", m.stderr(), m.describe())
        nodes = http_json(m.http + "/api/v1/nodes")
        servers = [n for n in nodes if n["role"] == "server"]
        self.assertEqual(len(servers), 2)
        self.assertTrue(all(n["rows_touched"] > 0 for n in servers), servers)
        code, _, prom = http_get(m.http + "/metrics")
        self.assertIn('psbench_embedding_rows_touched_total{rank="1"}', prom)
        self.assertIn('metric="method_metric,lookup"', prom)
        m.signal(15)
        rc = m.wait(30)
        self.assertEqual(rc, 0, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.check_ddp_rpc(res, 2, 15)
        self.assertEqual(res["configuration"]["warmup_cycles"], 2)
        self.assertIn("DDP + RPC benchmark (timed pass, rpc_pattern seed): seconds per epoch, samples per second", m.stdout())
        self.assertEqual(res["metrics_pass"], "timed")
        self.assertEqual(res["ddp_rpc"]["pass"], "timed")

    def test_traffic_per_batch_in_each_pattern(self):
        """Both patterns complete (2 trainers, 2 servers), each labelled; the
        traffic the servers counted in the timed pass, per trainer and
        batch, is one lookup, rows and update per server (and, seed, one
        updated; psbench, one updated per trainer and server in the pass),
        with payloads the batches' shapes give: lookup 8 x (indices +
        bags), rows 4 x bags x D, update both, updated none."""
        T, P, D, epochs = 2, 2, 256, 10
        B = epochs * 10  # the HybridTrainer's 10 batches per epoch
        for pattern in ("seed", "psbench"):
            out = os.path.join(self.reg.workdir, "out-" + pattern)
            m = self.master("--number-trainers", str(T), "--number-ps", str(P), "--embedding-dim", str(D),
                            "--epochs", str(epochs), "--warmup-cycles", "1", "--rpc-pattern", pattern, out=out)
            self.assertEqual(m.wait(240), 0, m.describe())
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            self.check_ddp_rpc(res, P, epochs, pattern)
            self.assertEqual(res["configuration"]["rpc_pattern"], pattern)
            bags = sum(t["bags"] for t in res["trainers"])
            indices = sum(t["indices"] for t in res["trainers"])
            self.assertGreater(indices, bags)
            traffic = res["ddp_rpc"]["traffic"]
            self.assertEqual(sorted(traffic["servers"]), [str(p) for p in range(P)])
            want_updated = T * B if pattern == "seed" else T
            for p, calls in traffic["servers"].items():
                self.assertEqual({k: v["frames"] for k, v in calls.items()},
                                 {"lookup": T * B, "rows": T * B, "update": T * B, "updated": want_updated},
                                 (pattern, p, calls))
                self.assertEqual(calls["lookup"]["payload_bytes"], 8 * (indices + bags), (pattern, p))
                self.assertEqual(calls["rows"]["payload_bytes"], 4 * bags * D, (pattern, p))
                self.assertEqual(calls["update"]["payload_bytes"], 8 * (indices + bags) + 4 * bags * D, (pattern, p))
                self.assertEqual(calls["updated"]["payload_bytes"], 0)
                for k, v in calls.items():  # a prefix and a small header per frame
                    per = (v["bytes"] - v["payload_bytes"]) / v["frames"]
                    self.assertTrue(4 + 10 <= per <= 4 + 120, (pattern, k, per))
            per = traffic["per_trainer_batch"]
            self.assertEqual(per["lookup"]["frames"], P)
            self.assertEqual(per["update"]["frames"], P)
            self.assertAlmostEqual(per["updated"]["frames"], P if pattern == "seed" else P / B)
            self.assertAlmostEqual(per["all"]["bytes"], sum(per[k]["bytes"] for k in ("lookup", "rows", "update",
                                                                                       "updated")))
            self.assertIn("DDP + RPC benchmark (timed pass, rpc_pattern %s)" % pattern, m.stdout())
            self.assertIn("traffic per trainer and batch, all servers (rpc_pattern %s)" % pattern, m.stdout())
            self.assertIn("rpc_pattern %s (" % pattern, m.stderr())  # the master's and trainers' start lines
            self.assertEqual(m.stderr().count("10 batches per epoch, rpc_pattern %s" % pattern), T, m.stderr())

    def test_patterns_on_logging_servers(self):
        """Stand-in servers log when calls arrive and answers leave, each
        answer held 50 ms: the seed's pattern never has two lookups of a
        trainer outstanding, asks the servers in order, and sends no lookup
        before every update of the batch is confirmed; every update asks
        for the dense rule and confirm. psbench's visibly overlaps its
        lookups and does not wait (so these checks can fail)."""
        P = 2
        for pattern in ("seed", "psbench"):
            log = os.path.join(self.reg.workdir, "calls-%s.jsonl" % pattern)
            m = self.master("--model", "HybridModel", "--trainer", "HybridTrainer", "--server",
                            "EmbeddingParameterServer", "--nserver", str(P), "--ntrainer", "2", "--embedding-dim",
                            "256", "--epochs", "1", "--warmup-cycles", "1", "--rpc-pattern", pattern, local=False)
            for s in range(P):
                self.reg.start([sys.executable, EMB_MOCK, "--master", m.ctl, "--log", log], name="mock%d" % s)
            for r in range(2):
                self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r)],
                               name="trainer%d" % r)
            self.assertEqual(m.wait(240), 0, m.describe())
            with open(log) as f:
                events = [json.loads(line) for line in f]
            got = check_pattern_log(events, P)
            lookups = sum(1 for e in events if e["ev"] == "lookup")
            self.assertEqual(lookups, 2 * P * 20, pattern)  # 2 trainers, 2 passes of 10 batches
            if pattern == "seed":
                self.assertEqual(got["max_outstanding"], 1, got)
                self.assertEqual(got["out_of_order"], 0, got)
                self.assertEqual(got["unconfirmed_lookups"], 0, got)
                for ups in got["updates"].values():
                    self.assertEqual(set(ups), {(1, "dense")}, ups)
            else:
                self.assertEqual(got["max_outstanding"], P, got)
                self.assertGreater(got["unconfirmed_lookups"], 0, got)
                for ups in got["updates"].values():
                    # Unconfirmed, the sparse rule (no grad); each pass's
                    # last update on each server asks for confirm.
                    self.assertEqual(ups.count((1, None)), 2 * P, ups)
                    self.assertEqual(ups.count((None, None)), len(ups) - 2 * P, ups)

    def test_staged_compute_same_bits(self):
        """The dense part on the staged test device (PSBENCH_TRAINER_COMPUTE=
        staged: no host view of its memory, copies that complete late): the
        dense bucket through a pinned twin, the mean copied back before the
        step; the same parameters as on the cpu. One trainer, so that the
        servers apply the updates in one order and runs repeat bit for bit
        (two trainers' updates reach the servers in either order): its
        mean is the gradient itself, so this checks the staged path end to
        end, not that the mean is copied back (test_model.c's scaling hook
        does, for train.c)."""
        shas = {}
        for compute in ("cpu", "staged"):
            out = os.path.join(self.reg.workdir, "out-" + compute)
            env = psb.base_env({"PSBENCH_TRAINER_COMPUTE": compute} if compute == "staged" else None)
            m = self.master("--number-trainers", "1", "--number-ps", "2", "--embedding-dim", "256", "--epochs", "3",
                            out=out, env=env)
            self.assertEqual(m.wait(120), 0, m.describe())
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            got = {t["final_params_sha256"] for t in res["trainers"]}
            self.assertEqual(len(got), 1, res["trainers"])
            shas[compute] = got.pop()
            if compute == "staged":
                self.assertIn("computing on 'staged'", m.stderr(), m.describe())
        self.assertEqual(shas["staged"], shas["cpu"])

    def test_eight_servers_by_hand(self):
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--model", "HybridModel", "--trainer", "HybridTrainer", "--server",
                        "EmbeddingParameterServer", "--nserver", "8", "--ntrainer", "2", "--epochs", "12",
                        "--warmup-cycles", "1", local=False, out=out)
        for s in range(8):
            self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                           name="server%d" % s)
        paths = []
        for r in range(2):
            p = os.path.join(self.reg.workdir, "dense-%d.bin" % r)
            paths.append(p)
            self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r),
                            "--params-out", p], name="trainer%d" % r)
        self.assertEqual(m.wait(240), 0, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.check_ddp_rpc(res, 8, 12)
        dense = [psb.params_of(p) for p in paths]
        # 512*256+256 + 256*128+128 + 128*64+64 + 64*32+32 + 32*8+8
        self.assertEqual(len(dense[0]), 174824)
        self.assertEqual(dense[0].tobytes(), dense[1].tobytes())

    # Batch 0 computes with the initial parameters (a finite loss); its step
    # at lr 1e30 overflows them, so batch 1 is where the loss diverges, on
    # both trainers (the allreduce leaves them the same dense parameters).
    DIVERGED = "loss diverged at epoch 0, batch 1 of the warm-up pass (loss = nan)"

    def test_loss_divergence_fails_the_run(self):
        """The HybridModel's loss becomes NaN: the trainers stop at that
        batch, the run fails, and results.json (error, trainers[].diverged)
        and the master's and each trainer's last line say where; every
        process exits non-zero."""
        out = os.path.join(self.reg.workdir, "out")
        diverging = psb.diverging_trainers(self.reg.workdir, "HybridTrainer")
        m = self.master("--number-trainers", "2", "--number-ps", "2", "--embedding-dim", "256", "--epochs", "3",
                        "--warmup-cycles", "1", "--trainer-config-path", diverging, local=False,
                        out=out)
        srvs = [self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"],
                               name="server%d" % s) for s in range(2)]
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r)],
                              name="trainer%d" % r) for r in range(2)]
        self.assertEqual(m.wait(120), 1, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "failed")
        self.assertIs(res["configuration"]["allow_divergence"], False)
        self.assertRegex(res["error"], r"^trainer \d \(.*\) failed: " + re.escape(self.DIVERGED) +
                         r": lower the learning rate")
        last = m.stderr().strip().splitlines()[-1]
        self.assertRegex(last, r"^psbench-master: run failed: trainer \d \(.*\) failed: " + re.escape(self.DIVERGED))
        # The trainer the error names records where; any other that
        # reported in time records the same place.
        named = int(re.match(r"^trainer (\d)", res["error"]).group(1))
        want = {"pass": "warm-up", "epoch": 0, "batch": 1, "loss": "nan"}
        self.assertEqual(res["trainers"][named]["diverged"], want, res["trainers"])
        for t in res["trainers"]:
            self.assertIn(t["diverged"], (want, None), t)
        self.assertEqual(psb.job_warnings(res), [])
        # No epoch was timed: no table header without rows.
        self.assertIn("DDP + RPC benchmark: no epoch of the timed pass completed", m.stdout())
        self.assertNotIn("DDP + RPC benchmark (timed pass)", m.stdout())
        for t in trs:
            self.assertNotEqual(t.wait(60), 0, t.describe())
            tl = t.stderr().strip().splitlines()[-1]
            self.assertRegex(tl, r"^psbench-trainer: the run failed: trainer \d \(.*\) failed: " +
                             re.escape(self.DIVERGED), t.describe())
        for s in srvs:
            self.assertNotEqual(s.wait(60), 0, s.describe())

    def test_failed_in_warmup_labels_its_epochs(self):
        """A run that fails in its warm-up pass, after epochs of it were
        timed: its figures are the warm-up's and say so (the DDP + RPC
        table, the line before the tables, results.json's metrics_pass and
        ddp_rpc.pass), never as the timed pass's with 0.0 samples/s: the
        samples per second are not known ("-", null)."""
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--number-trainers", "2", "--number-ps", "1", "--embedding-dim", "512", "--epochs", "1",
                        "--warmup-cycles", "100000", local=False, out=out)
        self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"], name="server")
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", str(r)],
                              name="trainer%d" % r) for r in range(2)]
        # Once the master has an epoch of each trainer (the warm-up pass has
        # 100000: it is still running), a trainer dies.
        deadline = time.monotonic() + 120
        while True:
            self.assertLess(time.monotonic(), deadline, m.describe())
            self.assertTrue(m.alive(), m.describe())
            met = http_json(m.http + "/api/v1/metrics")
            ranks = met.get("groups", {}).get("trainer", {}).get("ranks", {})
            if all(ranks.get(str(r), {}).get("epoch_metric,epoch", {}).get("count", 0) >= 1 for r in range(2)):
                break
            time.sleep(0.2)
        self.assertEqual(met["phase"], "warmup")
        trs[1].signal(9)
        self.assertEqual(m.wait(60), 1, m.describe())
        text = m.stdout()
        self.assertIn("the figures below are the warm-up pass's (the run failed before its timed pass)", text)
        self.assertIn("DDP + RPC benchmark (warm-up pass: the run failed before its timed pass, rpc_pattern seed): "
                      "seconds per epoch, samples per second (-: not known)", text)
        self.assertNotIn("(timed pass", text)
        rows = [ln.split() for ln in text[text.index("DDP + RPC benchmark"):].splitlines()[3:6]]
        self.assertEqual(sorted(r[0] for r in rows), ["0", "1", "all"], text)
        for r in rows:
            self.assertEqual(r[2::2], ["-"] * 4, r)
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "failed")
        self.assertEqual(res["metrics_pass"], "warm-up")
        self.assertEqual(res["ddp_rpc"]["pass"], "warm-up")
        for row in res["ddp_rpc"]["epochs"]:
            self.assertGreater(row["p50_s_per_epoch"], 0)
            for k in ("p50", "p75", "p90", "p95"):
                self.assertIsNone(row[k + "_samples_per_s"], row)

    def test_loss_divergence_allowed(self):
        """With --allow-divergence the HybridTrainers go on past the NaN
        loss: the run ends done, each trainer's divergence is a warning
        (output and results.json) and in trainers[].diverged, the losses are
        recorded as "nan" for every epoch, never dropped."""
        out = os.path.join(self.reg.workdir, "out")
        diverging = psb.diverging_trainers(self.reg.workdir, "HybridTrainer")
        m = self.master("--number-trainers", "2", "--number-ps", "2", "--embedding-dim", "256", "--epochs", "3",
                        "--warmup-cycles", "1", "--trainer-config-path", diverging,
                        "--allow-divergence", out=out)
        self.assertEqual(m.wait(120), 0, m.describe())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done")
        self.assertIs(res["configuration"]["allow_divergence"], True)
        self.assertEqual(len(psb.job_warnings(res)), 2, psb.job_warnings(res))
        for r, (t, w) in enumerate(zip(res["trainers"], psb.job_warnings(res))):
            self.assertRegex(w, r"^trainer %d \(.*\): " % r + re.escape(self.DIVERGED) +
                             r"; the run went on \(--allow-divergence\)$")
            self.assertEqual(t["diverged"], {"pass": "warm-up", "epoch": 0, "batch": 1, "loss": "nan"}, t)
            self.assertEqual(t["loss_per_epoch"], ["nan"] * 3, t)
            self.assertIn("warning: " + w, m.stdout())
        self.assertEqual(len({t["final_params_sha256"] for t in res["trainers"]}), 1, res["trainers"])

    def test_shapes_refused(self):
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http",
                                     "127.0.0.1:0", "--number-ps", "3", "--embedding-dim", "64"])
        self.assertNotEqual(rc, 0)
        self.assertIn("must be at least 512 and a multiple of it", err.strip().splitlines()[-1])
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http",
                                     "127.0.0.1:0", "--model", "HybridModel", "--server", "AverageParameterServer",
                                     "--trainer", "HybridTrainer", "--nserver", "8", "--placement", "shard"])
        self.assertNotEqual(rc, 0)
        self.assertIn("EmbeddingParameterServer", err.strip().splitlines()[-1])


if __name__ == "__main__":
    psb.main()
