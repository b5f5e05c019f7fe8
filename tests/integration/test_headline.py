"""The run's headline (issue 30, master/headline.c): on stdout above the
per-rank tables, in results.json ("headline") and in /api/v1/status; and
--tables all|none, --log-level warn (the headline without the tables, nor
the nodes' own tables: nothing but the headline block and warnings).
What the master prints of servers: nothing for a job without any (and no
server.csv), no "all servers" table for one server, and the trainer_lag_R
rows in rank order.

The checks are consistency, not timing: every key there, the shares of the
step adding up to 1 (DummyModel's spans tile the step), the bytes per step
equal to what the trainers' buckets or the servers' traffic say, the rate
equal to bytes over the span.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_headline.py
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import http_json, wait_phase  # noqa: E402

ROW_KEYS = {"trainer", "step_p50_ms", "step_p90_ms", "samples_per_s", "shares", "bytes_per_step", "bytes_source",
            "comm_span_ms", "effective_gb_per_s", "wire_bytes_per_step", "wire_bytes_model", "steady"}
STEADY_KEYS = {"n", "first_step_ms", "step_p50_ms", "step_p90_ms", "step_mean_ms", "samples_per_s", "few_steps",
               "shares", "comm_span_ms", "algbw_gb_per_s", "busbw_gb_per_s"}
CI_KEYS = {"step_p50_ci95", "samples_per_s_ci95", "ci_method", "ci_block_steps"}
SHARE_KEYS = {"forward", "backward_compute", "exposed_comm", "optimizer", "other"}
HEADLINE = "headline (timed pass): step ms, samples/s"
MASTER_TABLE = "\nall trainers (ms)\n"


class Headline(psb.PsbTestCase):

    # Its masters' flags (psb.PsbTestCase.master).
    master_kw = dict(local=True, rpc_timeout=30)

    def finish(self, m):
        self.assertEqual(m.wait(psb.RUN_TIMEOUT), 0, m.describe())
        return m.stdout()

    def check_headline(self, h, ntrainer, exposed_tiles=True):
        self.assertEqual(set(h), {"pass", "unit", "trainers"})
        self.assertEqual(h["pass"], "timed")
        self.assertEqual(h["unit"], "ms")
        rows = h["trainers"]
        self.assertEqual([r["trainer"] for r in rows], [str(r) for r in range(ntrainer)] + ["all"])
        for r in rows:
            self.assertEqual(set(r), ROW_KEYS, r)
            self.assertLessEqual(r["step_p50_ms"], r["step_p90_ms"], r)
            self.assertGreater(r["samples_per_s"], 0, r)
            sh = r["shares"]
            self.assertEqual(set(sh), SHARE_KEYS, r)
            for k in SHARE_KEYS - {"other"}:
                self.assertGreaterEqual(sh[k], 0, r)
            # The four parts and the rest are the whole step ...
            self.assertAlmostEqual(sum(sh.values()), 1.0, places=9, msg=r)
            # ... and here the four tile it: the rest is rounding.
            if exposed_tiles:
                self.assertLess(abs(sh["other"]), 1e-3, r)
        self.assertAlmostEqual(rows[-1]["samples_per_s"], sum(r["samples_per_s"] for r in rows[:-1]), places=6)
        return rows

    def check_steady(self, res, exact=True):
        """The steady state (issue 38) against the steps results.json
        keeps: each rank's steps after its first, the first apart; "all"
        pools them; the intervals positive; the wire bytes by the hook."""
        rows = res["headline"]["trainers"]
        series = {str(t["rank"]): t for t in res["steady_state"]["trainers"]}
        self.assertEqual(res["steady_state"]["metric"], "batch_level_metric,batch_all")
        pooled = []
        for r in rows:
            sd = r["steady"]
            self.assertEqual(set(sd) - CI_KEYS, STEADY_KEYS, r)
            if exact:
                self.assertEqual(set(sd) & CI_KEYS, CI_KEYS, r)
                lo, hi = sd["step_p50_ci95"]
                self.assertTrue(0 < lo <= hi, sd)
                self.assertTrue(0 < sd["samples_per_s_ci95"][0] <= sd["samples_per_s_ci95"][1], sd)
            self.assertEqual(sd["few_steps"], sd["n"] < 20, sd)
            self.assertAlmostEqual(sum(sd["shares"].values()), 1.0, places=9)
            if r["trainer"] == "all":
                continue
            t = series[r["trainer"]]
            step = res["groups"]["trainer"]["ranks"][r["trainer"]]["batch_level_metric,batch_all"]
            self.assertEqual(sd["n"], step["count"] - 1)
            self.assertEqual(len(t["steps_ms"]), sd["n"])
            self.assertEqual(sd["first_step_ms"], t["first_step_ms"])
            self.assertAlmostEqual(sd["step_p50_ms"], quantile(t["steps_ms"], 0.5), places=6)
            self.assertAlmostEqual(sd["step_p90_ms"], quantile(t["steps_ms"], 0.9), places=6)
            mean = sum(t["steps_ms"]) / len(t["steps_ms"])
            self.assertAlmostEqual(sd["step_mean_ms"], mean, places=6)
            # The pass's mean is the steady steps' and the first one's.
            self.assertAlmostEqual(step["mean"], (mean * sd["n"] + sd["first_step_ms"]) / step["count"], places=6)
            pooled += t["steps_ms"]
        all_sd = rows[-1]["steady"]
        self.assertAlmostEqual(all_sd["step_p50_ms"], quantile(pooled, 0.5), places=6)
        self.assertEqual(all_sd["n"], min(r["steady"]["n"] for r in rows[:-1]))
        self.assertAlmostEqual(all_sd["samples_per_s"], sum(r["steady"]["samples_per_s"] for r in rows[:-1]),
                               places=6)
        return rows

    def test_dummy_model_default_tables(self):
        out = os.path.join(self.reg.workdir, "out")
        m = self.master("--epochs", "1", out=out, linger=str(psb.LINGER_S))
        st = wait_phase(self, m, ("done", "failed"))
        self.assertEqual(st["phase"], "done", m.describe())
        # The API's status carries the headline once the run is done.
        self.check_headline(st["headline"], 2)
        m.signal(15)  # leave --linger early
        so = self.finish(m)
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        for k in ("configuration", "environment", "groups", "trainers", "servers", "warnings", "phase"):
            self.assertIn(k, res)  # every key of before stays
        rows = self.check_headline(res["headline"], 2)
        self.check_steady(res)
        self.assertEqual([r["trainer"] for r in st["headline"]["trainers"]], [r["trainer"] for r in rows])
        for r, t in zip(rows, res["trainers"]):
            # Bytes: the gradient payload of the trainer's buckets, fp32.
            floats = sum(b["floats"] for b in t["buckets"]["rebuilt"])
            self.assertEqual(r["bytes_per_step"], 4 * floats)
            self.assertEqual(r["bytes_source"], "gradient buckets")
            span = res["groups"]["trainer"]["ranks"][r["trainer"]]["hook_future_metric,comm_span"]["mean"]
            self.assertAlmostEqual(r["comm_span_ms"], span, places=6)
            self.assertAlmostEqual(r["effective_gb_per_s"], r["bytes_per_step"] / (span / 1e3) / 1e9, places=9)
            step = res["groups"]["trainer"]["ranks"][r["trainer"]]["batch_level_metric,batch_all"]
            self.assertAlmostEqual(r["step_p50_ms"], step["p50"], places=6)
            # rpc_hook: the push and the mean back cross the wire; algbw
            # is the payload over the steady comm span.
            self.assertEqual(r["wire_bytes_per_step"], 2 * r["bytes_per_step"])
            self.assertAlmostEqual(r["steady"]["algbw_gb_per_s"],
                                   r["bytes_per_step"] / (r["steady"]["comm_span_ms"] / 1e3) / 1e9, places=9)
            self.assertAlmostEqual(r["steady"]["busbw_gb_per_s"], 2 * r["steady"]["algbw_gb_per_s"], places=9)
        # stdout: the headline, then (default --tables all) the tables.
        self.assertIn(HEADLINE, so)
        self.assertIn(MASTER_TABLE, so)
        self.assertLess(so.index(HEADLINE), so.index(MASTER_TABLE))
        self.assertIn("\ntrainer 1 (ms)\n", so)

    def test_tables_none_and_log_level_warn(self):
        for flags, tables in ((["--tables", "none"], False), (["--log-level", "warn"], False),
                              (["--log-level", "warn", "--tables", "all"], True)):
            out = os.path.join(self.reg.workdir, "out-" + "-".join(f.strip("-") for f in flags))
            # Run to the end (under --log-level warn the master does not
            # log its ports, which Master.wait_ports reads).
            rc, so, se = self.reg.run([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                                       "--http", "127.0.0.1:0", "--rpc-timeout", "30", "--linger", "0",
                                       "--epochs", "1", "--out", out] + flags, timeout=psb.RUN_TIMEOUT)
            self.assertEqual(rc, 0, se)
            self.assertIn(HEADLINE, so, flags)
            self.assertEqual(MASTER_TABLE in so, tables, (flags, so))
            self.assertEqual("\ntrainer 0 (ms)\n" in so, tables, (flags, so))
            # Nor the nodes' own tables (--local relays their stdout only
            # with the tables): "the headline only" (issue 40).
            nodes = tables and "warn" not in flags
            self.assertEqual("trainer metrics, timed pass (ms)" in so, nodes, (flags, so))
            self.assertEqual("server metrics (ms)" in so, nodes, (flags, so))
            if not tables:
                self.assertEqual([l for l in so.splitlines() if l.startswith(("[trainer ", "[server "))], [],
                                 (flags, so))
            if "warn" in flags:
                # Nothing above the headline but the run's verdict: not the
                # args echo, the dashboard, the warm-up line, nor a node's
                # own lines (its table, its summary; the nodes get the level
                # too, so their stderr is their warnings only).
                self.assertEqual(so[:so.index(HEADLINE)].strip(), "psbench run done", (flags, so))
                for line in so.splitlines() + se.splitlines():
                    self.assertFalse(line.startswith(("[trainer ", "[server ")) and ": warn" not in line
                                     and ": error" not in line, (flags, line))
                self.assertNotIn("trainer metrics, timed pass (ms)", so + se)
                self.assertNotIn("server metrics (ms)", so + se)
            # The files keep every table whatever stdout shows.
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            self.assertIn("0", res["groups"]["trainer"]["ranks"])
            self.check_headline(res["headline"], 2)

    def test_steps_and_the_first_step_apart(self):
        """--steps N: N steps per trainer in the timed pass (the data
        cycled: 5 batches an epoch here), --warmup-steps its own count; the
        steady state is every step after the first; fewer than 20 of them
        is said, on stdout and in JSON. --steps with --epochs is refused."""
        for steps, few in (("23", False), ("6", True)):
            out = os.path.join(self.reg.workdir, "out-" + steps)
            rc, so, se = self.reg.run([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                                       "--http", "127.0.0.1:0", "--rpc-timeout", "30", "--linger", "0",
                                       "--steps", steps, "--warmup-steps", "2", "--tables", "none",
                                       "--ddp-hook", "allreduce_hook", "--out", out], timeout=psb.RUN_TIMEOUT)
            self.assertEqual(rc, 0, se)
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            self.assertEqual(res["configuration"]["steps"], int(steps))
            self.assertEqual(res["configuration"]["warmup_steps"], 2)
            for rank in ("0", "1"):
                self.assertEqual(res["groups"]["trainer"]["ranks"][rank]["batch_level_metric,batch_all"]["count"],
                                 int(steps))
            # The data cycles: a loss per epoch begun (5 batches each).
            for t in res["trainers"]:
                self.assertEqual(len(t["loss_per_epoch"]), -(-int(steps) // 5))
            rows = self.check_steady(res)
            self.assertEqual(rows[-1]["steady"]["n"], int(steps) - 1)
            self.assertEqual(rows[-1]["steady"]["few_steps"], few)
            self.assertEqual("few steps (n=%d)" % (int(steps) - 1) in so, few, so)
            self.assertIn("steady state: each trainer's n steps after its first", so)
            # allreduce_hook: a ring's 2(n-1)/n each way, n = 2.
            r = rows[-1]
            self.assertEqual(r["wire_bytes_per_step"], 2 * r["bytes_per_step"])
            self.assertEqual(r["wire_bytes_model"], "ring allreduce: 2(n-1)/n of the payload each way")
            self.assertAlmostEqual(r["steady"]["busbw_gb_per_s"], r["steady"]["algbw_gb_per_s"], places=9)
        rc, so, se = self.reg.run([psb.bin_path("psbench-master"), "--local", "--steps", "5", "--epochs", "2"])
        self.assertEqual(rc, 2, se)
        self.assertIn("--steps and --epochs both say how long a pass is", se)

    def test_bad_tables_value(self):
        rc, so, se = self.reg.run([psb.bin_path("psbench-master"), "--local", "--tables", "some"])
        self.assertEqual(rc, 2, se)
        self.assertIn("--tables", se)

    def test_ddp_rpc_seed_table_kept(self):
        """The DDP + RPC benchmark: its table stays under the headline (also
        with --tables none); the bytes are the servers' traffic."""
        out = os.path.join(self.reg.workdir, "out")
        so = self.finish(self.master("--number-trainers", "2", "--number-ps", "2", "--embedding-dim", "256",
                                     "--epochs", "2", "--warmup-cycles", "1", "--tables", "none", out=out))
        self.assertIn(HEADLINE, so)
        self.assertNotIn(MASTER_TABLE, so)
        self.assertIn("DDP + RPC benchmark (timed pass, rpc_pattern seed): seconds per epoch, samples per second", so)
        self.assertLess(so.index(HEADLINE), so.index("DDP + RPC benchmark"))
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertIn("ddp_rpc", res)
        rows = self.check_headline(res["headline"], 2)
        traffic = res["ddp_rpc"]["traffic"]["per_trainer_batch"]["all"]["bytes"]
        for r in rows:
            self.assertEqual(r["bytes_source"], "server traffic")
            self.assertAlmostEqual(r["bytes_per_step"], traffic, places=6)


def quantile(values, q):
    """numpy's default (linear) quantile, as shared/stats.h computes it."""
    v = sorted(values)
    h = q * (len(v) - 1)
    k = int(h)
    return v[k] + (h - k) * (v[k + 1] - v[k]) if k + 1 < len(v) else v[k]


def table_metrics(text, title):
    """The metric names of the table titled `title` (the master's or a
    node's relayed one, its "[server 0] " prefix dropped), in order."""
    lines = text.splitlines()
    names = []
    for i, line in enumerate(lines):
        if line.split("] ", 1)[-1] != title:
            continue
        prefix = line[:len(line) - len(title)]
        for row in lines[i + 2:]:  # past the header
            if not row.startswith(prefix) or not row[len(prefix):].strip():
                break
            name = row[len(prefix):].split()[0]
            if name.startswith("GPU-timed"):
                break
            names.append(name)
        return names
    raise AssertionError("no table %r in:\n%s" % (title, text))


def lag_ranks(names):
    """The ranks of the trainer_lag_R rows among names, in their order."""
    return [int(n.rsplit("_", 1)[1]) for n in names if n.startswith("parameter_server_straggler_metric,trainer_lag_")]


class Servers(psb.PsbTestCase):
    """What the master says of servers: as much as the job has."""

    # Its masters' flags (psb.PsbTestCase.run_master).
    master_kw = dict(local=True, rpc_timeout=30, epochs=1)

    def test_job_without_servers_says_nothing_of_servers(self):
        out = os.path.join(self.reg.workdir, "out")
        os.makedirs(out)
        # An earlier job's server.csv in the folder would pass for this one's.
        with open(os.path.join(out, "server.csv"), "w") as f:
            f.write("rank,metric\nall,\"old\"\n")
        rc, so, se = self.run_master("--ddp-hook", "allreduce_hook", out=out)
        self.assertEqual(rc, 0, so + se)
        self.assertIn(HEADLINE, so)
        self.assertIn("pure DDP", se)
        # The args echo lists every flag, --nserver 0 and --server among them.
        for line in (so + se).splitlines():
            if not line.startswith(("args: ", "plan: ")):  # for programs: every key
                self.assertNotIn("server", line.lower(), line)
        self.assertEqual(sorted(os.listdir(out)), ["results.json", "trainer.csv"])
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["servers"], [])
        self.assertEqual(res["groups"]["server"], {"all": {}, "ranks": {}})  # the API's shape
        # The dry run's plan too.
        rc, dso, dse = self.reg.run([psb.bin_path("psbench-master"), "--local", "--dry-run", "--ddp-hook",
                                     "allreduce_hook", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        self.assertEqual(rc, 0, dse)
        self.assertIn("placement: pure DDP: the trainers allreduce among themselves", dso)
        for line in (dso + dse).splitlines():
            if not line.startswith(("args: ", "plan: ")):  # for programs: every key
                self.assertNotIn("server", line.lower(), line)

    def test_one_server_no_all_servers_table_lags_in_rank_order(self):
        # Four trainers join the one server in whatever order they start.
        rc, so, se = self.run_master("--ntrainer", "4", "--nserver", "1")
        self.assertEqual(rc, 0, so + se)
        self.assertNotIn("\nall servers (ms)\n", so)
        self.assertIn(MASTER_TABLE, so)
        self.assertEqual(lag_ranks(table_metrics(so, "server 0 (ms)")), [0, 1, 2, 3])
        # The server's own table, relayed from it as it exits.
        self.assertEqual(lag_ranks(table_metrics(so, "server metrics (ms)")), [0, 1, 2, 3])

    def test_two_servers_all_servers_table_lags_in_rank_order(self):
        # The seed's placement: server 0 feeds trainers 0, 1; server 1 2, 3.
        rc, so, se = self.run_master("--ntrainer", "4", "--nserver", "2")
        self.assertEqual(rc, 0, so + se)
        self.assertEqual(lag_ranks(table_metrics(so, "all servers (ms)")), [0, 1, 2, 3])
        self.assertEqual(lag_ranks(table_metrics(so, "server 0 (ms)")), [0, 1])
        self.assertEqual(lag_ranks(table_metrics(so, "server 1 (ms)")), [2, 3])


if __name__ == "__main__":
    unittest.main()
