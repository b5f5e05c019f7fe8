#!/usr/bin/env python3
"""`psbench-master trace summarize FILE` (master/tools/trace_sum.c) on a
trace whose answer is known exactly: fixtures/trace/trace.json, the
synthetic job of tests/unit/master/test_trace_an.c written by trace_out
(that test holds the file to it byte for byte; its comment lays the job
out). Two trainers, one server, batches 0..3, buckets 0 and 1; per
(bucket, trainer t) the parts are, in us: queue 2+t, wire 6 / 2, straggler
0 / 3, fold 4+t, return 3+t, apply 1+t; the representative step is batch 3
and its critical path runs from trainer 0's forward to trainer 1's
optimizer. Also: --json, --help, and the refusals (no file, not JSON, not
a trace, a bad command line) with their exit statuses."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import psb  # noqa: E402

FIXTURE = os.path.join(HERE, "fixtures", "trace", "trace.json")

# (median, max) in ms of each part over the 4 steps x 2 trainers: the
# median of an even count is the mean of the two middle ones.
PARTS = {
    "queue": (0.0025, 0.003),
    "wire": (0.004, 0.006),
    "straggler": (0.0015, 0.003),
    "fold": (0.0045, 0.005),
    "return": (0.0035, 0.004),
    "apply": (0.0015, 0.002),
}

CRITICAL = [
    ("trainer 0", "main", "forward"), ("trainer 0", "main", "backward_compute"),
    ("trainer 0", "main", "bucket_ready"), ("trainer 0", "comm", "frame_out"),
    ("server 0", "reactor", "push_recv"), ("server 0", "reactor", "fold"),
    ("server 0", "reactor", "resolve"), ("server 0", "reactor", "answer_out"),
    ("trainer 1", "comm", "frame_in"), ("trainer 1", "main", "bucket_wait"),
    ("trainer 1", "main", "exposed_wait"), ("trainer 1", "main", "optimizer"),
]


class TraceSummary(psb.PsbTestCase):
    def summarize(self, *args):
        return self.reg.run([psb.bin_path("psbench-master"), "trace", "summarize"] + list(args))

    def test_text(self):
        """The table's figures (3 decimals of ms), the step, the path."""
        rc, out, err = self.summarize(FIXTURE)
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertIn("2 trainers, 1 server; 4 steps traced (batches 0..3)", lines[0])
        head = [i for i, l in enumerate(lines) if l.split()[:2] == ["bucket", "n"]]
        self.assertEqual(len(head), 1, out)
        self.assertEqual(lines[head[0]].split()[2:], list(PARTS))
        for k in (0, 1):
            cells = lines[head[0] + 1 + k].split()
            self.assertEqual(cells[:2], [str(k), "8"], out)
            # "median / max" per part; wire, fold and return's medians are
            # not halfway between two printed decimals
            self.assertEqual(cells[2 + 3 * 1: 2 + 3 * 2], ["0.004", "/", "0.006"], out)
            self.assertEqual(cells[2 + 3 * 3: 2 + 3 * 4][1:], ["/", "0.005"], out)
            self.assertEqual(cells[2 + 3 * 4: 2 + 3 * 5][1:], ["/", "0.004"], out)
        rep = [l for l in lines if l.startswith("Representative step:")]
        self.assertEqual(len(rep), 1, out)
        self.assertIn("batch 3 (its slowest trainer's step 0.070 ms", rep[0])
        self.assertIn("trainer 1's optimizer could start", out)
        start = [i for i, l in enumerate(lines) if l.strip().startswith("start ms")][0]
        rows = [l.split() for l in lines[start + 1: start + 1 + len(CRITICAL)]]
        self.assertEqual([(r[2] + " " + r[3], r[4], r[5]) for r in rows], CRITICAL, out)
        self.assertEqual(rows[0][:2], ["0.000", "0.010"])     # forward, from the step's start
        self.assertEqual(rows[-1][:2], ["0.065", "0.005"])    # the optimizer

    def test_json(self):
        """--json: every part's n, median and max exactly; the step's JSON."""
        rc, out, err = self.summarize("--json", FIXTURE)
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["steps"], [0, 1, 2, 3])
        self.assertEqual((doc["trainers"], doc["servers"]), (2, 1))
        self.assertEqual([b["bucket"] for b in doc["buckets"]], [0, 1])
        for b in doc["buckets"]:
            self.assertEqual(b["n"], 8)
            for part, (med, mx) in PARTS.items():
                self.assertEqual(b[part]["n"], 8, part)
                self.assertAlmostEqual(b[part]["median_ms"], med, places=12, msg=part)
                self.assertAlmostEqual(b[part]["max_ms"], mx, places=12, msg=part)
        rep = doc["representative"]
        self.assertEqual(rep["batch"], 3)
        lanes, spans = rep["lanes"], rep["spans"]
        path = [(lanes[spans[i]["lane"]]["process"], lanes[spans[i]["lane"]]["lane"], spans[i]["name"])
                for i in rep["critical"]]
        self.assertEqual(path, CRITICAL)
        self.assertEqual(len(rep["flows"]), 8)

    def test_help_and_refusals(self):
        exe = psb.bin_path("psbench-master")
        rc, out, err = self.reg.run([exe, "trace", "--help"])
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("usage: psbench-master trace summarize [--json] FILE", out)
        missing = os.path.join(self.reg.workdir, "nowhere.json")
        rc, out, err = self.summarize(missing)
        self.assertEqual(rc, 1)
        self.assertIn("psbench-master trace: cannot read %s" % missing, err)
        bad = os.path.join(self.reg.workdir, "bad.json")
        with open(bad, "w") as f:
            f.write("{\"traceEvents\": [")
        rc, out, err = self.summarize(bad)
        self.assertEqual(rc, 1)
        self.assertIn("%s:1:" % bad, err)
        self.assertIn("invalid JSON", err)
        other = os.path.join(self.reg.workdir, "results.json")
        with open(other, "w") as f:
            json.dump({"groups": {}}, f)
        rc, out, err = self.summarize(other)
        self.assertEqual(rc, 1)
        self.assertIn("%s: not a trace.json: no traceEvents array" % other, err)
        self.assertEqual(out, "")
        rc, out, err = self.reg.run([exe, "trace"])
        self.assertEqual(rc, 2)
        self.assertIn("give a command: summarize FILE", err)
        rc, out, err = self.reg.run([exe, "trace", "summarise", FIXTURE])
        self.assertEqual(rc, 2)
        self.assertIn("unknown command 'summarise'", err)
        rc, out, err = self.summarize("--jsn", FIXTURE)
        self.assertEqual(rc, 2)
        self.assertIn("unknown option --jsn: did you mean --json?", err)
        rc, out, err = self.summarize(FIXTURE, FIXTURE)
        self.assertEqual(rc, 2)
        self.assertIn("too many arguments", err)


if __name__ == "__main__":
    psb.main()
