"""The trace across hosts whose clocks disagree (issue 42): a job on
namespace hosts — the master on head, a server on ps1, trainers on tr1
and tr2 — with a clock skew put on purpose between the hosts (the
test-only PSBENCH_TEST_CLOCK_SKEW_NS: ps1's node reads 3 s ahead, tr2's
2 s behind). The master's offsets find the skews (within their stated
uncertainty), and the merged trace.json still orders each bucket's push
before the server's fold of it and the server's answer before the
trainer reads it, within the two nodes' uncertainties: without the
alignment ps1's spans would come 3 s late and tr2's 2 s early.

Run (as root): PSBENCH_BIN=build-test /usr/bin/python3 tests/multihost/test_trace_skew.py
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mh  # noqa: E402
import psb  # noqa: E402

SKEW_NS = {"ps1": 3 * 10 ** 9, "tr1": 0, "tr2": -2 * 10 ** 9}
# The offsets' estimates hold the true skew within their uncertainty; a
# reading of clock_now_ns between the namespaces adds nothing (one
# machine, one clock), so the bound is the uncertainty itself plus 1 us of
# rounding in the trace's microseconds.
ROUNDING_US = 1.0


class TraceSkew(mh.MultihostCase):
    hosts = ("head", "ps1", "tr1", "tr2")

    def node(self, host, binary, *args):
        env = ["env", "PSBENCH_TEST_CLOCK_SKEW_NS=%d" % SKEW_NS[host]]
        return self.start_on(self.h[host], env + [psb.bin_path(binary), "--master", self.master_addr,
                                                  "--token-file", self.token_path] + list(args),
                             "%s-%s" % (binary, host))

    def test_skewed_clocks_aligned(self):
        m = self.start_on(self.head, [
            psb.bin_path("psbench-master"), "--listen", "%s:%d" % (self.head.addr, mh.CTL_PORT),
            "--http", "%s:%d" % (self.head.addr, mh.HTTP_PORT), "--ntrainer", "2", "--nserver", "1",
            "--model", "DummyModel", "--epochs", "1", "--rpc-timeout", "20", "--linger", "0",
            "--trace", "--trace-steps", "2:6", "--out", self.out_dir, "--token-file", self.token_path], "master")
        self.wait_http(m)
        procs = [self.node("ps1", "psbench-server", "--listen", "%s:0" % self.h["ps1"].addr, "--rank", "0"),
                 self.node("tr1", "psbench-trainer", "--rank", "0"),
                 self.node("tr2", "psbench-trainer", "--rank", "1")]
        self.assertEqual(m.wait(240), 0, m.describe())
        for p in procs:
            self.assertEqual(p.wait(30), 0, p.describe())
        with open(os.path.join(self.out_dir, "trace.json")) as f:
            doc = json.load(f)
        nodes = {n["process"]: n for n in doc["metadata"]["nodes"]}
        for proc, host in (("server 0", "ps1"), ("trainer 0", "tr1"), ("trainer 1", "tr2")):
            n = nodes[proc]
            self.assertEqual(n["clock"], "aligned", n)
            self.assertLessEqual(abs(n["offset_ns"] - SKEW_NS[host]), n["uncertainty_ns"], n)
        unc_us = {p: n.get("uncertainty_ns", 0) / 1000.0 for p, n in nodes.items()}
        procs_by_pid = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
                        if e["ph"] == "M" and e["name"] == "process_name"}
        spans = collections.defaultdict(list)
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and e["name"] in ("frame_out", "fold", "answer_out", "frame_in"):
                a = e["args"]
                spans[(a["batch"], a["bucket"], a["trainer"], e["name"])].append((procs_by_pid[e["pid"]], e))
        checked = 0
        for (batch, bucket, trainer, name), got in spans.items():
            if name != "frame_out":
                continue
            tproc, out = got[0]
            for sproc, fold in spans.get((batch, bucket, trainer, "fold"), []):
                slack = unc_us[tproc] + unc_us[sproc] + ROUNDING_US
                self.assertGreaterEqual(fold["ts"] + fold["dur"] + slack, out["ts"],
                                        "fold of (%d, %d) from trainer %d ends before its push began" %
                                        (batch, bucket, trainer))
                checked += 1
            for sproc, ans in spans.get((batch, bucket, trainer, "answer_out"), []):
                for _, fin in spans.get((batch, bucket, trainer, "frame_in"), []):
                    slack = unc_us[tproc] + unc_us[sproc] + ROUNDING_US
                    self.assertGreaterEqual(fin["ts"] + fin["dur"] + slack, ans["ts"],
                                            "answer of (%d, %d) to trainer %d read before it was sent" %
                                            (batch, bucket, trainer))
        # Steps 2..6 of 2 trainers, every bucket: folds were found and ordered.
        self.assertGreaterEqual(checked, 10, sorted(spans)[:20])


if __name__ == "__main__":
    psb.main()
