"""The sweep's report.html (master/tools/sweep_report.c, web/report.js), in
headless Chromium.

Each test copies a sweep document to a folder of its own, has
`psbench-master sweep --report DIR` write DIR/report.html from it, checks
the file is self-contained (nothing loaded from anywhere: no script or
stylesheet by URL, the document inlined and readable back), then opens it
from disk in Chromium and checks what the page shows: the answer first,
the comparison table, the charts (or the line saying why one is not
drawn), a breakdown bar per point, the environment table, and a browser
console with no error and no warning. The first test saves a screenshot.

The fixture (fixtures/sweep/sweep.json) is a real sweep's document from
before the steady state (no "steady", no "verdict": the page falls back
to its summaries): hooks rpc_hook and allreduce_hook x ntrainer 1, 2 x
bucket_cap_mb 1, 4, 25, two runs each (DummyModel, --epochs 2, on a 2-CPU
VM), one point marked failed by hand.

The second fixture (fixtures/sweep/sweep-v38.json) is a real document of
the current format (issue 38: the steady state, its intervals, verdicts,
busy and oversubscribed marks, the schedule): `psbench-master sweep
--local --ddp-hook rpc_hook,allreduce_hook --bucket-cap-mb 1,25
--ntrainer 1,2 --runs 3 --steps 12 --warmup-steps 2 --set
data.sample_count=60`, 3 runs a point, n = 11 steady steps (few steps).
On the shared VM every point came out busy and the ntrainer=2 rpc_hook
points oversubscribed, as written. The run named a winner at all four
comparisons; one was edited by hand to have none: the comparison of
points 3 and 4 (ntrainer=1 bucket_cap_mb=25) has verdict "no difference
beyond noise", within_noise true and ratio_ci95_low 0.94 (was 1.06, so
that its interval contains 1). Nothing else was edited.

Needs Debian's chromium, chromium-driver and python3-selenium (run with
/usr/bin/python3). Without them the test FAILS (it does not skip): CI
installs them (scripts/install-deps.sh).

Run: /usr/bin/python3 tests/integration/test_sweep_report.py
Environment: PSBENCH_SWEEP_SCREENSHOT (default /tmp/psbench-sweep-report.png;
the v38 fixture's page goes beside it, -v38 before the extension),
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
FIXTURE38 = os.path.join(HERE, "fixtures", "sweep", "sweep-v38.json")
TRACE_FIXTURE = os.path.join(HERE, "fixtures", "trace", "trace.json")

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

# What the issue-38 parts of the page show: the banner, the comparison
# table's cells with their classes, the points table's header and cells
# (interval cells' hover text), the charts' uPlot series and bands, the
# breakdown's whiskers.
V38_STATE_JS = r"""
const q = (s) => document.querySelector(s);
const txt = (e) => (e ? e.textContent.trim() : null);
const cells = (tr) => Array.from(tr.cells).map((c) => ({text: c.textContent.trim(), cls: c.className, title: c.title}));
const plot = (k) => {
  const p = window.psbenchReport.plots[k];
  if (!p) return null;
  const u = p.uplot;
  return {series: u.series.map((s) => s.label), shown: u.series.map((s) => s.show),
          bands: (u.bands || []).map((b) => b.series), data: u.data, declared: p.bands,
          legendRows: Array.from(u.root.querySelectorAll('.u-legend tr.u-series')).map(
            (tr) => getComputedStyle(tr).display !== 'none')};
};
const banner = q('#busy');
return {
  sections: Array.from(q('#report').children).map((e) => e.id),
  banner: txt(banner),
  bannerTitle: banner ? txt(banner.querySelector('h2')) : null,
  bannerPoints: banner ? Array.from(banner.querySelectorAll('.busy-points li')).map(
    (li) => ({point: Number(li.getAttribute('data-point')), text: li.textContent.trim()})) : [],
  bannerWarnings: banner ? Array.from(banner.querySelectorAll('.busy-warnings li')).map((li) => li.textContent) : [],
  answer: txt(q('#answer .answer-line')),
  compHead: Array.from(document.querySelectorAll('#answer thead th')).map((e) => e.textContent.trim()),
  comparisons: Array.from(document.querySelectorAll('#answer tbody tr')).map(
    (tr) => ({verdict: tr.getAttribute('data-verdict'), cls: tr.className, cells: cells(tr)})),
  pointHead: Array.from(document.querySelectorAll('#points thead th')).map((e) => e.textContent.trim()),
  points: Array.from(document.querySelectorAll('#points tbody tr:not(.error-row)')).map(cells),
  pointNotes: Array.from(document.querySelectorAll('#points .note')).map((e) => e.textContent),
  cap: plot('cap'),
  scaling: plot('scaling'),
  capNote: txt(q('#cap .note')),
  bars: Array.from(document.querySelectorAll('#breakdown .bar')).map((b) => Number(b.getAttribute('data-point'))),
  whiskers: Array.from(document.querySelectorAll('#breakdown .bar-wrap .whisker')).map((w) => ({
    point: Number(w.getAttribute('data-point')), lo: Number(w.getAttribute('data-lo')),
    hi: Number(w.getAttribute('data-hi')), width: w.getBoundingClientRect().width,
    height: w.getBoundingClientRect().height, title: w.title})),
  breakdownNote: Array.from(document.querySelectorAll('#breakdown .note')).map((e) => e.textContent).join(' '),
  facts: txt(q('#sweep-facts')),
};
"""


# The timelines (web/timeline.js): per traced point its lanes' labels, bars,
# flows, the critical path's spans (in the path's order) and the buckets'
# table.
TIMELINE_STATE_JS = r"""
const drawn = window.psbenchReport.timelines || [];
return {
  sections: Array.from(document.querySelector('#report').children).map((e) => e.id),
  points: Array.from(document.querySelectorAll('#timelines .tl-point')).map((e) => Number(e.getAttribute('data-point'))),
  timelines: Array.from(document.querySelectorAll('#timelines .tl-point')).map((box, k) => {
    const bars = Array.from(box.querySelectorAll('rect.tl-bar'));
    const crit = bars.filter((b) => b.classList.contains('tl-critical'))
      .sort((a, b) => Number(a.getAttribute('data-span')) - Number(b.getAttribute('data-span')));
    return {
      point: Number(box.getAttribute('data-point')),
      lanes: Array.from(box.querySelectorAll('.tl-lane text')).map((t) => t.textContent),
      bars: bars.length,
      flows: box.querySelectorAll('line.tl-flow').length,
      flowBuckets: Array.from(box.querySelectorAll('line.tl-flow')).map(
        (l) => l.getAttribute('data-bucket') + '/' + l.getAttribute('data-trainer')),
      critical: crit.map((b) => b.getAttribute('data-name')),
      criticalLine: box.querySelector('polyline.tl-critical-line') !== null,
      bucketRows: box.querySelectorAll('table.tl-buckets tbody tr').length,
      drawn: (({lanes, bars, flows, critical}) => ({lanes, bars, flows, critical}))(drawn[k] || {}),
    };
  }),
};
"""


def ranges(nums):
    """[1, 2, 3, 5] as "1–3, 5" (the page's run ranges)."""
    out, s, i = [], sorted(nums), 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append("%d–%d" % (s[i], s[j]) if j > i else str(s[i]))
        i = j + 1
    return ", ".join(out)


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
        # A winner's colour only beyond noise.
        classes = driver.execute_script(
            "return Array.from(document.querySelectorAll('#answer tbody tr')).map((tr) => tr.cells[5].className);")
        for cls, c in zip(classes, doc["comparisons"]):
            want = "" if c["within_noise"] else "faster-" + c["faster"]
            self.assertEqual(cls, want, (cls, c))

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
        # An older document's bands: its summaries' intervals (two runs each).
        bands = driver.execute_script("const p = window.psbenchReport.plots; "
                                      "return [p.cap.uplot.bands.length, p.scaling.uplot.bands.length];")
        self.assertEqual(bands, [4, 6], s["report"]["plots"])

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

    # -- the current format (issue 38) --------------------------------------

    def open_v38(self, driver, doc, name):
        path, _ = self.render(doc, name)
        self.open_report(driver, path)
        return driver.execute_script(V38_STATE_JS)

    def test_v38(self):
        """The steady state's figures with their intervals everywhere: the
        busy banner first, verdicts (a winner's colour only where there is
        one), n and the marks, bands on both charts, whiskers on the bars."""
        with open(FIXTURE38) as f:
            doc = json.load(f)
        points = {p["point"]: p for p in doc["points"]}
        driver = self.start_browser()
        s = self.open_v38(driver, doc, "v38")
        root, ext = os.path.splitext(SCREENSHOT)
        self.screenshot(driver, root + "-v38" + ext)

        self.assertEqual(s["sections"], ["busy", "answer", "points", "cap", "breakdown", "scaling", "environment"], s)
        self.assertIn("order interleaved (seed %d)" % doc["order_seed"], s["facts"])
        self.assertNotIn("steps chosen", s["facts"])  # null here: --steps was given

        # The banner: every busy or oversubscribed point (here all of them),
        # its busy runs, its figures and its comparisons' ratio, then the
        # host's distinct warnings.
        marked = [p for p in doc["points"] if p["busy"] or p["oversubscribed"]]
        self.assertTrue(marked and any(p["oversubscribed"] for p in marked))
        self.assertEqual([b["point"] for b in s["bannerPoints"]], [p["point"] for p in marked], s["bannerPoints"])
        for b, p in zip(s["bannerPoints"], marked):
            self.assertIn("point %d (%s)" % (p["point"], p["label"]), b["text"])
            self.assertIn("busy in %s %s of %d" % ("run" if len(p["busy_runs"]) == 1 else "runs",
                                                   ranges(p["busy_runs"]), len(p["runs"])), b["text"])
            self.assertIn("step p50 %.2f ms" % p["steady"]["step_p50_ms"]["mean"], b["text"])
            self.assertIn("%.1f samples/s" % p["steady"]["samples_per_s"]["mean"], b["text"])
            c = [c for c in doc["comparisons"] if p["point"] in (c["ps_point"], c["allreduce_point"])][0]
            other = c["allreduce_point"] if c["ps_point"] == p["point"] else c["ps_point"]
            self.assertIn("PS / allreduce %.2f\u00d7 (with point %d)" % (c["ps_over_allreduce"], other), b["text"])
            self.assertIn("measured a busy host and the scheduler too" if p["oversubscribed"]
                          else "measured a busy host too", b["text"])
            self.assertEqual("oversubscribed" in b["text"], p["oversubscribed"], b)
        warnings = []
        for p in marked:
            warnings += [w for w in p["host_warnings"] if w not in warnings]
        self.assertEqual(s["bannerWarnings"], warnings)

        # The answer from the verdicts.
        verdicts = [c["verdict"] for c in doc["comparisons"]]
        self.assertEqual(sorted(set(verdicts)), ["allreduce", "no difference beyond noise", "ps"], verdicts)
        r = [c["ps_over_allreduce"] for c in doc["comparisons"]]
        self.assertEqual(s["answer"], "Of 4 configurations compared, the parameter server is faster beyond noise at %d "
                         "and allreduce at %d; no difference beyond noise at %d; the parameter server's steady step is "
                         "%.2f\u00d7\u2013%.2f\u00d7 allreduce's. 4 of them measured a busy or oversubscribed host "
                         "(the warning above)." % (verdicts.count("ps"), verdicts.count("allreduce"),
                                                   verdicts.count("no difference beyond noise"), min(r), max(r)))
        self.assertEqual(s["compHead"], ["configuration", "PS hook", "PS step ms", "allreduce step ms", "PS / allreduce",
                                         "95% interval", "method", "n", "faster", "host"], s["compHead"])
        self.assertEqual(len(s["comparisons"]), len(doc["comparisons"]))
        for row, c in zip(s["comparisons"], doc["comparisons"]):
            t = [x["text"] for x in row["cells"]]
            self.assertEqual(row["verdict"], c["verdict"], row)
            self.assertEqual(t[2:8], ["%.2f" % c["ps_step_ms"], "%.2f" % c["allreduce_step_ms"],
                                      "%.2f\u00d7" % c["ps_over_allreduce"],
                                      "[%.2f, %.2f]" % (c["ratio_ci95_low"], c["ratio_ci95_high"]),
                                      c["ci_method"], str(c["n"])], row)
            faster = row["cells"][8]
            if c["verdict"] in ("ps", "allreduce"):
                self.assertEqual(faster["cls"], "faster-" + c["verdict"], row)
                self.assertEqual(faster["text"], "parameter server" if c["verdict"] == "ps" else "allreduce", row)
            else:
                self.assertNotIn("faster-", faster["cls"], row)
                self.assertEqual(faster["text"], "no difference beyond noise", row)
            self.assertEqual("busy" in t[9], c["busy"], row)
            self.assertEqual("oversubscribed" in t[9], c["oversubscribed"], row)
            self.assertEqual(row["cls"], "host-marked" if c["busy"] or c["oversubscribed"] else "", row)

        # The points: n, both intervals (their method on hover), the marks.
        self.assertEqual(s["pointHead"], ["point", "label", "status", "buckets", "bytes/step", "n", "step p50 ms",
                                          "95% interval", "samples/s", "95% interval", "exposed comm", "algbw GB/s",
                                          "busbw GB/s", "marks"], s["pointHead"])
        self.assertEqual(len(s["points"]), len(doc["points"]))
        for row, p in zip(s["points"], doc["points"]):
            t = [x["text"] for x in row]
            st = p["steady"]
            step, sps = st["step_p50_ms"], st["samples_per_s"]
            self.assertEqual(t[5:13], [str(p["n"]), "%.2f" % step["mean"],
                                       "[%.2f, %.2f]" % (step["ci95_low"], step["ci95_high"]),
                                       "%.1f" % sps["mean"], "[%.1f, %.1f]" % (sps["ci95_low"], sps["ci95_high"]),
                                       "%.1f %%" % (100 * st["shares"]["exposed_comm"]),
                                       "%.3f" % st["algbw_gb_per_s"]["mean"], "%.3f" % st["busbw_gb_per_s"]["mean"]], row)
            self.assertIn(step["method"], row[7]["title"])
            self.assertIn(sps["method"], row[9]["title"])
            marks = t[13]
            self.assertEqual("busy (%d of %d runs)" % (len(p["busy_runs"]), len(p["runs"])) in marks, p["busy"], marks)
            self.assertEqual("oversubscribed" in marks, p["oversubscribed"], marks)
            self.assertEqual("few steps (n=%d)" % p["n"] in marks, p["few_steps"], marks)
        notes = " ".join(s["pointNotes"])
        for words in ("Steady state", "n: steady steps", "log-t over runs", "block bootstrap over steps"):
            self.assertIn(words, notes)

        # The charts: a band per line, between two extra series (the
        # interval's high and low) that the legend does not list, holding
        # the steady figures' intervals.
        for key, xdim, fig in (("cap", "bucket_cap_mb", "step_p50_ms"), ("scaling", "ntrainer", "samples_per_s")):
            c = s[key]
            self.assertIsNotNone(c, key)
            nlines = len(c["declared"])
            self.assertEqual(nlines, 4, c)
            self.assertEqual(len(c["bands"]), nlines, c)
            self.assertEqual(len(c["series"]), 1 + 3 * nlines, c)
            for d, (hi, lo) in zip(c["declared"], c["bands"]):
                self.assertEqual(c["series"][hi], d["series"] + " 95% high", c["series"])
                self.assertEqual(c["series"][lo], d["series"] + " 95% low", c["series"])
                self.assertEqual(c["data"][hi], d["hi"])
                self.assertEqual(c["data"][lo], d["lo"])
            got = sorted((x, round(c["data"][lo][i], 9), round(c["data"][hi][i], 9))
                         for hi, lo in c["bands"] for i, x in enumerate(c["data"][0]) if c["data"][hi][i] is not None)
            want = sorted((p["config"][xdim], round(p["steady"][fig]["ci95_low"], 9), round(p["steady"][fig]["ci95_high"], 9))
                          for p in doc["points"])
            self.assertEqual(got, want, key)
            # The legend: the x row and one per line; the band edges hidden.
            self.assertEqual(c["legendRows"], [True] * (1 + nlines) + [False] * (2 * nlines), c["legendRows"])
        self.assertIn("95% interval", s["capNote"])

        # The breakdown: the steady shares, a whisker per point over the
        # runs' range of where exposed communication ends.
        self.assertEqual(s["bars"], [p["point"] for p in doc["points"]], s)
        self.assertEqual([w["point"] for w in s["whiskers"]], [p["point"] for p in doc["points"]], s["whiskers"])
        for w in s["whiskers"]:
            ends = [sum(r["headline"]["steady"]["shares"][k] for k in ("forward", "backward_compute", "exposed_comm"))
                    for r in points[w["point"]]["runs"]]
            self.assertAlmostEqual(w["lo"], min(ends), places=9)
            self.assertAlmostEqual(w["hi"], max(ends), places=9)
            self.assertGreater(w["height"], 0, w)
            self.assertIn("over %d runs" % len(ends), w["title"])
        self.assertIn("whisker", s["breakdownNote"])
        self.assert_console_clean(driver)

    def test_v38_quiet_and_partly_busy(self):
        """The same document with the host marks changed: one busy point
        and one oversubscribed one are all the banner names (a warning
        that is HTML shown as text); with no mark anywhere there is no
        banner. Also: the steps the sweep chose in the facts, and a
        comparison without a noise estimate (no winner, no colour)."""
        with open(FIXTURE38) as f:
            real = json.load(f)
        doc = copy.deepcopy(real)
        for p in doc["points"]:
            p.update(busy=False, busy_runs=[], oversubscribed=False, host_warnings=[])
        for c in doc["comparisons"]:
            c.update(busy=False, oversubscribed=False)
        quiet = copy.deepcopy(doc)
        busy_warning = "host vm was busy during the timed pass: CPU steal was 9 % (more than 5 % is busy): its figures may be noise"
        over_warning = real["points"][4]["host_warnings"][1]
        self.assertIn("oversubscribed", over_warning)
        doc["points"][2].update(busy=True, busy_runs=[2], host_warnings=[busy_warning, HOSTILE])
        doc["points"][5].update(oversubscribed=True, host_warnings=[over_warning])
        doc["comparisons"][1]["busy"] = True            # points 3 and 4
        doc["comparisons"][2]["oversubscribed"] = True  # points 5 and 6
        doc["comparisons"][3].update(verdict="no noise estimate", within_noise=False, noise_known=False,
                                     ratio_ci95_low=None, ratio_ci95_high=None)
        doc["steps_chosen"] = 51

        driver = self.start_browser()
        s = self.open_v38(driver, doc, "partly-busy")
        self.assertEqual(s["sections"][:2], ["busy", "answer"], s["sections"])
        self.assertIn("2 points of 8", s["bannerTitle"])
        self.assertEqual([b["point"] for b in s["bannerPoints"]], [3, 6], s["bannerPoints"])
        self.assertIn("busy in run 2 of 3", s["bannerPoints"][0]["text"])
        self.assertIn("measured a busy host too", s["bannerPoints"][0]["text"])
        self.assertIn("(with point 4)", s["bannerPoints"][0]["text"])
        self.assertIn(": oversubscribed.", s["bannerPoints"][1]["text"])
        self.assertIn("measured the scheduler too", s["bannerPoints"][1]["text"])
        self.assertEqual(s["bannerWarnings"], [busy_warning, HOSTILE, over_warning])  # as text
        self.assertFalse(driver.execute_script("return window.pwned === 1 || !!document.querySelector('#report img');"))
        self.assertIn("steps chosen: 51", s["facts"])
        self.assertTrue(s["answer"].endswith("no noise estimate at 1; the parameter server's steady step is %.2f\u00d7\u2013"
                                             "%.2f\u00d7 allreduce's. 2 of them measured a busy or oversubscribed host "
                                             "(the warning above)." % (
                                                 min(c["ps_over_allreduce"] for c in doc["comparisons"]),
                                                 max(c["ps_over_allreduce"] for c in doc["comparisons"]))), s["answer"])
        self.assertEqual([r["cls"] for r in s["comparisons"]], ["", "host-marked", "host-marked", ""])
        none = s["comparisons"][3]["cells"]
        self.assertEqual([none[5]["text"], none[8]["text"], none[8]["cls"]], ["\u2013", "no noise estimate", "no-winner"])
        self.assertEqual([r[13]["text"] for r in s["points"]][1:3], ["few steps (n=11)", "busy (1 of 3 runs)few steps (n=11)"])
        self.assert_console_clean(driver)

        s = self.open_v38(driver, quiet, "quiet")
        self.assertIsNone(s["banner"], s["banner"])
        self.assertEqual(s["sections"][0], "answer", s["sections"])
        self.assertTrue(s["answer"].endswith("allreduce's."), s["answer"])
        self.assertNotIn("steps chosen", s["facts"])
        self.assert_console_clean(driver)

    def test_timelines(self):
        """Points with a traced step (sweep.json's "trace_step", as the
        sweep embeds it: here `psbench-master trace summarize --json`'s
        representative step of the synthetic trace, fixtures/trace/, the
        same function) get the timeline section: per point a lane per
        trainer's and server's lane, a bar per span, a line per bucket's
        hop, the critical path outlined; points without one get none;
        the console stays clean."""
        rc, out, err = self.reg.run([psb.bin_path("psbench-master"), "trace", "summarize", "--json", TRACE_FIXTURE])
        self.assertEqual(rc, 0, err)
        step = json.loads(out)["representative"]
        with open(FIXTURE38) as f:
            doc = json.load(f)
        for p in doc["points"]:
            p["trace_step"] = step if p["point"] in (1, 2) else None
        path, _ = self.render(doc, "timelines")
        driver = self.start_browser()
        self.open_report(driver, path)
        s = driver.execute_script(TIMELINE_STATE_JS)
        self.assertEqual(s["sections"][-3:], ["timelines", "scaling", "environment"], s["sections"])
        self.assertEqual(s["points"], [1, 2], s)
        for k, tl in enumerate(s["timelines"]):
            self.assertEqual(tl["point"], k + 1)
            # trainer 0 main, comm; trainer 1 main, comm; server 0 reactor
            self.assertEqual(tl["lanes"], ["trainer 0 \u00b7 main", "trainer 0 \u00b7 comm", "trainer 1 \u00b7 main",
                                            "trainer 1 \u00b7 comm", "server 0 \u00b7 reactor"], tl)
            self.assertEqual(tl["bars"], len(step["spans"]), tl)
            # each (bucket, trainer): frame_out -> push_recv, answer_out -> frame_in
            self.assertEqual(tl["flows"], 8, tl)
            self.assertEqual(sorted(tl["flowBuckets"]), ["0/0", "0/0", "0/1", "0/1", "1/0", "1/0", "1/1", "1/1"], tl)
            # outlined: the path's spans (in the page's order, by span)
            self.assertEqual(tl["critical"], [step["spans"][i]["name"] for i in sorted(step["critical"])], tl)
            self.assertIn("forward", tl["critical"])
            self.assertIn("optimizer", tl["critical"])
            self.assertTrue(tl["criticalLine"], tl)
            self.assertEqual(tl["bucketRows"], len(step["buckets"]), tl)
            self.assertEqual(tl["drawn"], {"lanes": 5, "bars": len(step["spans"]), "flows": 8, "critical": 12}, tl)
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
