"""The sweep's report.html (master/sweep_report.c, web/report.js), in
headless Chromium.

Each test copies a sweep document to a folder of its own, has
`psbench-master sweep --report DIR` write DIR/report.html from it, checks
the file is self-contained (nothing loaded from anywhere: no script or
stylesheet by URL, the document inlined and readable back), then opens it
from disk in Chromium and checks what the page shows: the answer first,
the comparison table, the charts (or the line saying why one is not
drawn), a breakdown bar per point, the environment table, and a browser
console with no error and no warning. The first test saves a screenshot.

The fixture (fixtures/sweep/sweep.json) is a real sweep's document: hooks
rpc_hook and allreduce_hook x ntrainer 1, 2 x bucket_cap_mb 1, 4, 25,
two runs each (DummyModel, --epochs 2, on a 2-CPU VM), one point marked
failed by hand.

Needs Debian's chromium, chromium-driver and python3-selenium (run with
/usr/bin/python3). Without them the test FAILS (it does not skip): CI
installs them (scripts/install-deps.sh).

Run: /usr/bin/python3 tests/integration/test_sweep_report.py
Environment: PSBENCH_SWEEP_SCREENSHOT (default /tmp/psbench-sweep-report.png),
PSBENCH_BIN (the build directory).
"""
import copy
import json
import os
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import psb  # noqa: E402
from browser import BrowserTestCase  # noqa: E402

SCREENSHOT = os.environ.get("PSBENCH_SWEEP_SCREENSHOT", "/tmp/psbench-sweep-report.png")
WAIT_S = 20.0          # bound on every wait for the page
FIXTURE = os.path.join(HERE, "fixtures", "sweep", "sweep.json")

# A string that would break out of the data island if it were not escaped,
# and run script if it were put into the page as HTML.
HOSTILE = "</script><img src=x onerror=\"window.pwned=1\"><b>bold</b>"




# What the page shows, read in one go.
PAGE_STATE_JS = r"""
const q = (s) => document.querySelector(s);
const txt = (e) => (e ? e.textContent.trim() : null);
const rows = (s) => Array.from(document.querySelectorAll(s)).map(
  (tr) => Array.from(tr.cells).map((c) => c.textContent.trim()));
const main = q('#report');
return {
  report: window.psbenchReport || null,
  pwned: window.pwned === 1,
  sections: main ? Array.from(main.children).map((e) => e.id) : [],
  answer: txt(q('#answer .answer-line')),
  comparisons: rows('#answer tbody tr'),
  points: rows('#points tbody tr:not(.error-row)'),
  errors: rows('#points tbody tr.error-row'),
  capCanvases: document.querySelectorAll('#chart-cap canvas').length,
  capSeries: q('#chart-cap') ? Number(q('#chart-cap').getAttribute('data-series')) : -1,
  scalingCanvases: document.querySelectorAll('#chart-scaling canvas').length,
  scalingSeries: q('#chart-scaling') ? Number(q('#chart-scaling').getAttribute('data-series')) : -1,
  canvases: document.querySelectorAll('#report canvas').length,
  capNote: txt(q('#cap .note')),
  scalingNote: txt(q('#scaling .note')),
  bars: Array.from(document.querySelectorAll('#breakdown .bar')).map((b) => Number(b.getAttribute('data-point'))),
  barSegments: Array.from(document.querySelectorAll('#breakdown .bar')).map((b) => b.children.length),
  noBars: Array.from(document.querySelectorAll('#breakdown .bar-none')).map((e) => e.textContent.trim()),
  environment: rows('#environment tbody tr'),
  envHead: Array.from(document.querySelectorAll('#environment thead th')).map((e) => e.textContent.trim()),
  facts: txt(q('#sweep-facts')),
  images: document.querySelectorAll('#report img').length,
};
"""


class SweepReport(BrowserTestCase):

    WHAT = "the sweep report test"

    # -- the file -----------------------------------------------------------

    def render(self, doc, name):
        """DIR/report.html from `doc` by `psbench-master sweep --report DIR`;
        returns (its path, its text)."""
        d = os.path.join(self.reg.workdir, name)
        os.makedirs(d)
        with open(os.path.join(d, "sweep.json"), "w") as f:
            json.dump(doc, f, indent=1)
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "sweep", "--report", d])
        self.assertEqual(rc, 0, "sweep --report failed:\n%s%s" % (out, err))
        path = os.path.join(d, "report.html")
        with open(path, encoding="utf-8") as f:
            html = f.read()
        self.assert_self_contained(html, doc)
        return path, html

    def assert_self_contained(self, html, doc):
        self.assertTrue(html.startswith("<!DOCTYPE html>"), html[:80])
        self.assertNotRegex(html, r"(?i)<script[^>]*\ssrc\s*=", "a script loaded by URL")
        self.assertNotRegex(html, r"(?i)<link[^>]*\shref\s*=", "a stylesheet (or anything) loaded by URL")
        self.assertNotRegex(html, r"(?i)\s(src|href)\s*=\s*[\"']?\s*(https?:)?//", "a network load")
        self.assertNotRegex(html, r"(?i)@import|url\(\s*[\"']?\s*(https?:)?//", "a stylesheet loading by URL")
        self.assertIn("Content-Security-Policy", html)
        # uPlot's licence notice, above the library.
        notice = html.find("Copyright (c) 2022 Leon Sorokin")
        self.assertGreater(notice, 0, "uPlot's copyright notice is missing")
        self.assertIn("Permission is hereby granted", html)
        self.assertLess(notice, html.find("var uPlot"), "the notice must come before the inlined uPlot")
        # The document, once, readable back as it was.
        m = re.search(r'<script type="application/json" id="psbench-sweep">(.*?)</script>', html, re.S)
        self.assertIsNotNone(m, "no sweep document in the page")
        self.assertNotIn("<", m.group(1), "a '<' left unescaped in the data island")
        self.assertEqual(json.loads(m.group(1)), doc)

    # -- browser ------------------------------------------------------------

    def start_browser(self):
        driver = BrowserTestCase.start_browser(self)
        self.addCleanup(driver.quit)
        return driver

    def open_report(self, driver, path):
        """Load the file and wait (bounded) until report.js says it is done."""
        driver.get("file://" + path)
        deadline = time.monotonic() + WAIT_S
        s = None
        while time.monotonic() < deadline:
            s = driver.execute_script(PAGE_STATE_JS)
            if s["report"] and s["report"].get("ready"):
                return s
            time.sleep(0.2)
        self.fail("the report did not draw within %.0f s; last state: %r; console: %r"
                  % (WAIT_S, s, driver.get_log("browser")))

    def assert_console_clean(self, driver):
        logs = driver.get_log("browser")
        bad = [e for e in logs if e.get("level") in ("SEVERE", "WARNING")]
        self.assertEqual(bad, [], "the page logged errors or warnings to the browser console")

    # -- tests --------------------------------------------------------------

    def test_fixture(self):
        with open(FIXTURE) as f:
            doc = json.load(f)
        path, html = self.render(doc, "sweep")
        # The answer table's rows are in the file itself only as data; the page draws them.
        driver = self.start_browser()
        s = self.open_report(driver, path)
        self.screenshot(driver, SCREENSHOT)

        # The answer first, then the rest in the reader's order.
        self.assertEqual(s["sections"], ["answer", "points", "cap", "breakdown", "scaling", "environment"], s)
        # Faster only beyond noise: 4 of the 5 pairs' intervals overlap.
        self.assertEqual(s["answer"], "Beyond noise, the parameter server is faster at 1 of 5 points and allreduce "
                         "at 0; 4 within noise (the 95% intervals overlap); the parameter server's step is "
                         "0.63\u00d7\u20131.22\u00d7 allreduce's.")
        self.assertIn("psbench-master sweep --local --ddp-hook rpc_hook,allreduce_hook", s["facts"])
        self.assertIn(doc["started_at"], s["facts"])

        # One comparison row per comparison, in the document's order.
        self.assertEqual(len(s["comparisons"]), len(doc["comparisons"]), s["comparisons"])
        points = {p["point"]: p for p in doc["points"]}
        for row, c in zip(s["comparisons"], doc["comparisons"]):
            cfg = points[c["ps_point"]]["config"]
            self.assertEqual(row[0], "ntrainer=%d bucket_cap_mb=%d" % (cfg["ntrainer"], cfg["bucket_cap_mb"]), row)
            self.assertEqual(row[1], c["ps_hook"], row)
            self.assertEqual(row[2], "%.2f" % c["ps_step_ms"], row)
            self.assertEqual(row[3], "%.2f" % c["allreduce_step_ms"], row)
            self.assertEqual(row[4], "%.2f\u00d7" % c["ps_over_allreduce"], row)
            self.assertEqual(row[5], "parameter server" if c["faster"] == "ps" else "allreduce", row)
            self.assertEqual(row[6], "within noise" if c["within_noise"] else "beyond noise", row)

        # The points: one row each, the failed one's error under it.
        self.assertEqual([r[0] for r in s["points"]], [str(p["point"]) for p in doc["points"]])
        failed = [p for p in doc["points"] if p["status"] == "failed"]
        self.assertEqual(len(failed), 1)
        self.assertEqual(s["errors"], [[failed[0]["error"]]])
        row = s["points"][0]
        self.assertEqual(row[1:4], [doc["points"][0]["label"], "done", str(doc["points"][0]["buckets"])], row)

        # The charts: bucket cap (one series per hook x ntrainer), scaling
        # (one per hook x bucket cap).
        self.assertEqual(s["report"]["charts"], 2, s)
        self.assertGreaterEqual(s["capCanvases"], 1, s)
        self.assertGreaterEqual(s["scalingCanvases"], 1, s)
        self.assertEqual(s["capSeries"], 4, s)
        self.assertEqual(s["scalingSeries"], 6, s)

        # A breakdown bar per point with figures, a line for the failed one.
        self.assertEqual(s["bars"], [p["point"] for p in doc["points"] if p["shares"]], s)
        self.assertTrue(all(n >= 3 for n in s["barSegments"]), s)
        self.assertEqual(s["noBars"], ["no figures (failed)"], s)

        # Every node's environment, one row per role here (one host).
        self.assertEqual(s["envHead"][:4], ["role", "ranks", "host", "device"], s)
        env = {r[0]: r for r in s["environment"]}
        self.assertEqual(sorted(env), ["master", "server", "trainer"], s["environment"])
        t = doc["points"][2]["environment"]["trainers"][0]["environment"]
        self.assertEqual(env["trainer"][1:5], ["0\u20131", t["hostname"], "cpu", t["cpu_model"]], env)
        self.assertIn(t["blas"]["library"] + " " + t["blas"]["version"], env["trainer"][10])
        self.assertEqual(env["trainer"][11], "1\u20138, 10\u201312", env)
        self.assertEqual(env["server"][11], "1, 3, 5, 7, 11", env)
        self.assert_console_clean(driver)

    def test_one_run_no_variation_hostile_strings(self):
        """One run per point, one bucket cap and one trainer count (no
        charts: a line each says why), and strings that are HTML: shown as
        text, never run or parsed."""
        with open(FIXTURE) as f:
            full = json.load(f)
        keep = [p for p in full["points"] if p["config"]["ntrainer"] == 2 and p["config"]["bucket_cap_mb"] == 4]
        self.assertEqual(len(keep), 2)
        doc = copy.deepcopy(full)
        doc["runs"] = 1
        doc["dimensions"] = ["hook"]
        doc["points"] = copy.deepcopy(keep)
        for p in doc["points"]:
            p["runs"] = p["runs"][:1]
            for k, st in p["summary"].items():
                p["summary"][k] = {"n": 1, "mean": st["mean"], "sd": None, "ci95_low": None, "ci95_high": None}
        doc["points"][1]["label"] = HOSTILE
        doc["points"][1]["status"] = "failed"
        doc["points"][1]["error"] = HOSTILE
        doc["points"][1].update(runs=[], summary=None, shares=None, buckets=None)
        doc["comparisons"] = [dict(c, within_noise=False, noise_known=False) for c in full["comparisons"]
                              if c["ps_point"] == keep[0]["point"]]
        path, html = self.render(doc, "hostile")
        self.assertNotIn(HOSTILE, html)

        driver = self.start_browser()
        s = self.open_report(driver, path)
        self.assertFalse(s["pwned"], "a string from the document ran as HTML")
        self.assertEqual(s["images"], 0, s)
        self.assertTrue(s["answer"].endswith("(one run per point: no noise estimate)."), s["answer"])
        self.assertEqual(len(s["comparisons"]), 1, s)
        self.assertEqual(s["comparisons"][0][0], "the job's", s)
        self.assertEqual(s["comparisons"][0][6], "one run: no noise estimate", s)
        self.assertEqual(s["points"][1][1], HOSTILE, s)
        self.assertEqual(s["errors"], [[HOSTILE]], s)
        self.assertEqual(s["canvases"], 0, s)
        self.assertEqual(sorted(s["report"]["skipped"]), ["cap", "scaling"], s)
        self.assertIn("Not drawn: the sweep ran one bucket cap (4 MB)", s["capNote"])
        self.assertIn("Not drawn: the number of trainers did not vary (2)", s["scalingNote"])
        self.assertEqual(s["bars"], [keep[0]["point"]], s)
        self.assert_console_clean(driver)

    def test_no_comparison(self):
        """Only allreduce ran: the answer says why there is none."""
        with open(FIXTURE) as f:
            doc = json.load(f)
        doc["points"] = [p for p in doc["points"] if not p["config"]["uses_servers"]]
        doc["comparisons"] = []
        path, _ = self.render(doc, "allreduce-only")
        driver = self.start_browser()
        s = self.open_report(driver, path)
        self.assertEqual(s["sections"][0], "answer", s)
        self.assertEqual(s["answer"], "No answer: no point used a parameter-server hook.", s)
        self.assertEqual(s["comparisons"], [], s)
        self.assertEqual(len(s["points"]), len(doc["points"]), s)
        self.assert_console_clean(driver)

    def test_write_error(self):
        """A report that cannot be written: the sweep says so, naming the
        path, and leaves what was there."""
        d = os.path.join(self.reg.workdir, "blocked")
        os.makedirs(os.path.join(d, "report.html"))
        shutil.copy(FIXTURE, os.path.join(d, "sweep.json"))
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "sweep", "--report", d])
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("cannot write %s/report.html: EISDIR" % d, err)
        self.assertTrue(os.path.isdir(os.path.join(d, "report.html")))
        self.assertEqual(sorted(os.listdir(d)), ["report.html", "sweep.json"], "a temporary file was left")


if __name__ == "__main__":
    psb.main()
