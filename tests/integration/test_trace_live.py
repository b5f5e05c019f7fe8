#!/usr/bin/env python3
"""GET /api/v1/trace/step (master/publish.c, master/trace_an.h) and the
dashboard's drawing of it (web/timeline.js through web/app.js).

A master under --trace whose nodes are this test, registered by hand on
the control link (no clock: their times are taken as sent), sends each
node's trace in parts (`trace` messages, docs/protocol.md): two trainers
and one server, a step per batch whose answer is known — trainer t, at
batch b from b ms: step [0, 100] us, forward [0, 10], backward_compute
[10, 30], bucket 0 ready [20, 21], frame_out [22, 23], frame_in [40, 42],
optimizer [90, 100]; the server: push_recv of t [24+t, 25+t], fold [25+t,
26+t], resolve [30, 31], answer_out to t [32+t, 33+t]. While trainer 1 has
sent batch 0 only, the endpoint answers batch 0 (the latest step every
trainer has whole); once it sends batch 1, batch 1. Then the dashboard
draws it: a lane per node's lane, the buckets' hops, the critical path,
with a clean console. A master without --trace answers 404 with the
reason, and its dashboard never asks.

Needs Debian's chromium, chromium-driver and python3-selenium for the
dashboard's test (browser.py; it FAILS without them)."""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import psb  # noqa: E402
from browser import BrowserTestCase  # noqa: E402

WAIT_S = 20.0
US = 1000

TRAINER_NAMES = ["step", "forward", "backward_compute", "bucket_ready", "frame_out", "frame_in", "optimizer"]
SERVER_NAMES = ["push_recv", "fold", "resolve", "answer_out"]
CRITICAL = ["forward", "backward_compute", "bucket_ready", "frame_out", "push_recv", "fold", "resolve",
            "answer_out", "frame_in", "optimizer"]

# What the dashboard drew, read in one go.
DASH_TRACE_JS = r"""
const box = document.getElementById('trace-step');
const card = document.getElementById('trace-card');
return {
  hidden: card ? card.hidden : null,
  batch: box ? box.getAttribute('data-batch') : null,
  lanes: box ? Array.from(box.querySelectorAll('.tl-lane text')).map((t) => t.textContent) : [],
  bars: box ? box.querySelectorAll('rect.tl-bar').length : 0,
  flows: box ? box.querySelectorAll('line.tl-flow').length : 0,
  critical: box ? box.querySelectorAll('rect.tl-critical').length : 0,
  drawn: window.psbenchState ? window.psbenchState.traceDrawn : null,
  empty: document.getElementById('trace-empty') ? document.getElementById('trace-empty').hidden : null,
};
"""


class HandNode(object):
    """A node registered by hand on a master's control link."""

    def __init__(self, test, m, body):
        self.c = psb.RawClient(m.ctl_addr[1], host=m.ctl_addr[0])
        test.addCleanup(self.c.sock.close)
        self.send("register", body)

    def send(self, type_, body):
        data = json.dumps(body).encode()
        self.c.sock.sendall(psb.encode_frame({"type": type_, "payload": len(data)}, data))

    def assignment(self, seconds=10.0):
        while True:
            h, p = self.c.recv_frame(seconds)
            if h["type"] == "assign":
                return json.loads(p or b"{}")

    def trace_part(self, role, rank, lanes, names, events, final=False):
        self.send("trace", {"final": final, "dump": {
            "v": 1, "role": role, "rank": rank, "window": [0, 3], "capacity": 1024, "lanes": lanes,
            "names": names, "dropped": {"count": 0, "first_step": -1, "last_step": -1}, "t0": 0,
            "events": events}})


def trainer_events(t, batches):
    """Trainer t's spans of those batches ([name, lane, start, dur, batch, bucket, trainer, server])."""
    ev = []
    for b in batches:
        base = b * 1000 * US

        def span(name, lane, a, z, bucket=-1, server=-1):
            ev.append([TRAINER_NAMES.index(name), lane, base + a * US, (z - a) * US, b, bucket, t, server])
        span("step", 0, 0, 100)
        span("forward", 0, 0, 10)
        span("backward_compute", 0, 10, 30)
        span("bucket_ready", 0, 20, 21, 0, 0)
        span("frame_out", 1, 22, 23, 0, 0)
        span("frame_in", 1, 40, 42, 0, 0)
        span("optimizer", 0, 90, 100)
    return ev


def server_events(batches):
    ev = []
    for b in batches:
        base = b * 1000 * US

        def span(name, a, z, t):
            ev.append([SERVER_NAMES.index(name), 0, base + a * US, (z - a) * US, b, 0, t, 0])
        for t in (0, 1):
            span("push_recv", 24 + t, 25 + t, t)
            span("fold", 25 + t, 26 + t, t)
            span("answer_out", 32 + t, 33 + t, t)
        span("resolve", 30, 31, -1)
    return ev


class TraceLive(BrowserTestCase):
    WHAT = "the live trace test"

    def traced_job(self):
        """A traced master and its three nodes by hand: (master, server, t0, t1)."""
        out = os.path.join(self.reg.workdir, "live")
        m = self.master("--trace", "--trace-steps", "0:3", "--rpc-timeout", "60", out=out, ntrainer=2, nserver=1)
        server = HandNode(self, m, {"role": "server", "host": "hs", "device": "cpu", "listen_host": "127.0.0.1",
                                    "port": 9})
        server.assignment()
        server.send("ready", {})
        t0 = HandNode(self, m, {"role": "trainer", "host": "ha", "device": "cpu"})
        t1 = HandNode(self, m, {"role": "trainer", "host": "hb", "device": "cpu"})
        self.assertEqual([t.assignment().get("rank") for t in (t0, t1)], [0, 1])
        return m, server, t0, t1

    def step_until(self, m, batch):
        """GET /api/v1/trace/step until it answers that batch (bounded)."""
        deadline = time.monotonic() + WAIT_S
        last = None
        while time.monotonic() < deadline:
            code, ctype, body = psb.http_get(m.http + "/api/v1/trace/step")
            last = (code, body[:300])
            if code == 200:
                self.assertEqual(ctype, "application/json")
                doc = json.loads(body)
                if doc.get("batch") == batch:
                    return doc
            time.sleep(0.2)
        self.fail("/api/v1/trace/step never answered batch %d; last: %r" % (batch, last))

    def test_endpoint_and_dashboard(self):
        m, server, t0, t1 = self.traced_job()
        # Nothing yet: an empty answer with the reason.
        code, _, body = psb.http_get(m.http + "/api/v1/trace/step")
        self.assertEqual(code, 200, body)
        self.assertIsNone(json.loads(body)["batch"], body)
        self.assertIn("reason", json.loads(body))
        server.trace_part("server", 0, ["reactor"], SERVER_NAMES, server_events([0, 1]))
        t0.trace_part("trainer", 0, ["main", "comm"], TRAINER_NAMES, trainer_events(0, [0, 1]))
        t1.trace_part("trainer", 1, ["main", "comm"], TRAINER_NAMES, trainer_events(1, [0]))
        step = self.step_until(m, 0)
        lanes = [(l["process"], l["lane"]) for l in step["lanes"]]
        self.assertEqual(lanes, [("trainer 0", "main"), ("trainer 0", "comm"), ("trainer 1", "main"),
                                 ("trainer 1", "comm"), ("server 0", "reactor")])
        self.assertEqual(step["trainers"], 2)
        self.assertEqual(len(step["spans"]), 2 * 7 + 7)
        self.assertEqual(len(step["flows"]), 4)
        # Both trainers' optimizers start together: the first of them
        # (trainer 0) is the one walked back from; its answer, bucket 0,
        # left the server at 32 us, after the fold of the last push in
        # (trainer 1's, in at 26 us).
        self.assertEqual([step["spans"][i]["name"] for i in step["critical"]], CRITICAL)
        fold = step["spans"][step["critical"][CRITICAL.index("fold")]]
        self.assertEqual(fold["trainer"], 1)
        parts = {(b["bucket"], b["trainer"]): b for b in step["buckets"]}
        self.assertEqual(sorted(parts), [(0, 0), (0, 1)])
        for t in (0, 1):
            b = parts[(0, t)]
            self.assertAlmostEqual(b["queue_ms"], 0.002, places=9)
            self.assertAlmostEqual(b["wire_ms"], (3 + t) / 1000, places=9)
            self.assertAlmostEqual(b["straggler_ms"], (1 - t) / 1000, places=9)
            self.assertAlmostEqual(b["fold_ms"], (6 + t) / 1000, places=9)
            self.assertAlmostEqual(b["return_ms"], (10 - t) / 1000, places=9)
            self.assertIsNone(b["apply_ms"])  # no bucket_apply span: unknown

        # Trainer 1's batch 1 comes: the latest whole step is batch 1.
        t1.trace_part("trainer", 1, ["main", "comm"], TRAINER_NAMES, trainer_events(1, [1]))
        step = self.step_until(m, 1)
        self.assertEqual(len(step["spans"]), 2 * 7 + 7)

        # The dashboard draws it with timeline.js.
        driver = self.start_browser()
        self.addCleanup(driver.quit)
        driver.get(m.http + "/")
        deadline = time.monotonic() + WAIT_S
        s = None
        while time.monotonic() < deadline:
            s = driver.execute_script(DASH_TRACE_JS)
            if s["batch"] == "1" and s["flows"]:
                break
            time.sleep(0.2)
        else:
            self.fail("the dashboard did not draw the step: %r; console: %r" % (s, driver.get_log("browser")))
        self.assertFalse(s["hidden"])
        self.assertTrue(s["empty"])
        self.assertEqual(s["lanes"], ["trainer 0 \u00b7 main", "trainer 0 \u00b7 comm", "trainer 1 \u00b7 main",
                                      "trainer 1 \u00b7 comm", "server 0 \u00b7 reactor"], s)
        self.assertEqual(s["bars"], 21, s)
        self.assertEqual(s["flows"], 4, s)
        self.assertEqual(s["critical"], len(CRITICAL), s)
        self.assertEqual(s["drawn"], {"lanes": 5, "bars": 21, "flows": 4, "critical": len(CRITICAL)}, s)
        bad = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        self.assertEqual(bad, [], "the page logged errors to the browser console")

    def test_not_traced(self):
        """No --trace: 404 with the reason; the dashboard's card stays
        hidden and it never asks (a clean console: no 404 logged)."""
        m = self.master(ntrainer=1, nserver=1)
        code, ctype, body = psb.http_get(m.http + "/api/v1/trace/step")
        self.assertEqual((code, ctype), (404, "application/json"), body)
        doc = json.loads(body)
        self.assertIsNone(doc["batch"])
        self.assertIn("does not trace", doc["reason"])
        driver = self.start_browser()
        self.addCleanup(driver.quit)
        driver.get(m.http + "/")
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            polls = driver.execute_script("return window.psbenchState ? window.psbenchState.polls : 0")
            if polls >= 3:
                break
            time.sleep(0.2)
        s = driver.execute_script(DASH_TRACE_JS)
        self.assertTrue(s["hidden"], s)
        self.assertEqual(s["bars"], 0)
        bad = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        self.assertEqual(bad, [], "the page logged errors to the browser console")


if __name__ == "__main__":
    psb.main()
