"""Browser test of the web dashboard (web/), in headless Chromium.

It loads the dashboard from the server under test (start_target() below),
waits (bounded) until the phase badge shows the job's phase, a chart has
data, the nodes table has rows and the processed-metrics tables are there,
takes a screenshot, and checks that the browser console logged no SEVERE
entry. A second test stops the server and checks that the page says
"disconnected" and keeps its last data, with no uncaught exception.

Needs Debian's chromium, chromium-driver and python3-selenium (run with
/usr/bin/python3). Without them the test FAILS (it does not skip): CI
installs them (scripts/install-deps.sh).

Run: /usr/bin/python3 tests/integration/test_dashboard.py
Environment: PSBENCH_SCREENSHOT (default /tmp/psbench-dashboard.png),
PSBENCH_BIN (the build directory, once the real master is the target).
"""
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import psb  # noqa: E402
from browser import BrowserTestCase  # noqa: E402

SCREENSHOT = os.environ.get("PSBENCH_SCREENSHOT", "/tmp/psbench-dashboard.png")
WAIT_S = 20.0          # bound on every wait for the page
PHASES = ("waiting", "warmup", "running", "done", "failed")
TABLE_COLUMNS = ["metric", "count", "min", "max", "mean", "variance", "stdev", "p50", "p90", "p99"]

MOCK = os.path.join(HERE, "mock_master.py")
# The line the server under test prints once its HTTP side listens.
HTTP_READY_RE = re.compile(r"HTTP on http://([0-9.]+):(\d+)/")
MOCK_READY_RE = re.compile(r"http listening on (?:http://)?([0-9.]+):(\d+)")


# ---- the server under test -------------------------------------------------

def start_target(reg):
    """Start the real master with --local (a small, slow-enough job so the
    page sees it running) through `reg` (a psb.Registry, which always stops
    it); return (base URL of the dashboard, its psb.Proc)."""
    models = os.path.join(reg.workdir, "models.json")
    with open(models, "w") as f:
        json.dump({"Dash": {"model_class": "Synthetic",
                            "configurations": {"buckets": 4, "bucket_floats": 65536}}}, f)
    p = reg.start([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                   "--http", "127.0.0.1:0", "--linger", str(psb.LINGER_S), "--model", "Dash",
                   "--model-config-path", models, "--epochs", "200"], name="master")
    host, port = wait_for_line(p, HTTP_READY_RE)
    return "http://%s:%d/" % (host, port), p


def small_dummy_model(reg, name):
    """A models file in reg's folder with one small dense DummyModel,
    `name`; returns its path."""
    models = os.path.join(reg.workdir, name + "-models.json")
    with open(models, "w") as f:
        json.dump({name: {"model_class": "DummyModel",
                          "configurations": {"num_embeddings": 128, "embedding_dim": 64, "dense_input_size": 64,
                                             "dense_output_size": 128, "dense_layers_count": 1,
                                             "sparse": False}}}, f)
    return models


def start_pure_ddp(reg):
    """The real master with --local running the seed's pure-DDP baseline:
    DummyModel (small), --trainer DdpTrainer (allreduce_hook over Gloo), no
    server. Returns (base URL, its psb.Proc)."""
    models = small_dummy_model(reg, "SmallDdp")
    p = reg.start([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                   "--http", "127.0.0.1:0", "--linger", str(psb.LINGER_S), "--model", "SmallDdp",
                   "--model-config-path", models, "--trainer", "DdpTrainer", "--epochs", "300"],
                  name="master-ddp")
    host, port = wait_for_line(p, HTTP_READY_RE)
    return "http://%s:%d/" % (host, port), p


def start_ddp_rpc(reg):
    """The real master with --local running the seed's DDP + RPC benchmark
    (2 trainers, 2 embedding servers of 300 x 256). Returns (base URL, proc)."""
    p = reg.start([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                   "--http", "127.0.0.1:0", "--linger", str(psb.LINGER_S), "--number-ps", "2", "--embedding-dim", "256",
                   "--epochs", "400", "--warmup-cycles", "1"], name="master-ddp-rpc")
    host, port = wait_for_line(p, HTTP_READY_RE)
    return "http://%s:%d/" % (host, port), p


CTL_READY_RE = re.compile(r"control plane on ([0-9.]+):(\d+)")


def start_gpu_nodes(reg):
    """A master started by hand with a CUDA server and a CUDA trainer on
    the fake GPU (every machine has it) beside a CPU trainer, slow enough
    for the page to see them: the nodes' devices and GPUs. Returns (base
    URL, the master's psb.Proc)."""
    models = small_dummy_model(reg, "SmallGpu")
    p = reg.start([psb.bin_path("psbench-master"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                   "--linger", str(psb.LINGER_S), "--model", "SmallGpu", "--model-config-path", models, "--ntrainer", "1",
                   "--ncudatrainer", "1", "--nserver", "0", "--ncudaserver", "1", "--placement", "shard",
                   "--epochs", "300"], name="master-gpu")
    host, port = wait_for_line(p, HTTP_READY_RE)
    chost, cport = wait_for_line(p, CTL_READY_RE)
    ctl = "%s:%d" % (chost, cport)
    reg.start([psb.bin_path("psbench-server"), "--master", ctl, "--device", "fake-cuda"], name="server-fake-gpu")
    reg.start([psb.bin_path("psbench-trainer"), "--master", ctl], name="trainer-cpu")
    reg.start([psb.bin_path("psbench-trainer"), "--master", ctl, "--device", "fake-cuda"], name="trainer-fake-gpu")
    return "http://%s:%d/" % (host, port), p


def wait_for_line(proc, regex, timeout=10.0):
    """The groups of the first match of `regex` in proc's stderr or stdout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = regex.search(proc.stderr()) or regex.search(proc.stdout())
        if m:
            return m.group(1), int(m.group(2))
        if not proc.alive():
            raise AssertionError("server under test exited early:\n" + proc.describe())
        time.sleep(0.05)
    raise AssertionError("server under test not listening within %.0f s:\n%s"
                         % (timeout, proc.describe()))


# ---- a fake master: the page's files and documents the test sets -----------

WEB_DIR = os.path.abspath(os.path.join(HERE, "..", "..", "web"))
WEB_TYPES = {".html": "text/html; charset=utf-8", ".js": "application/javascript", ".css": "text/css"}


class FakeMaster(object):
    """Serves web/ and the JSON documents in self.docs (path -> object, set
    by the test at any time) on 127.0.0.1; stop() stops it."""

    def __init__(self, docs):
        self.docs = docs
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):
                pass

            def reply(self, code, ctype, body):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path in fake.docs:
                    return self.reply(200, "application/json", json.dumps(fake.docs[path]).encode())
                rel = os.path.normpath(("/index.html" if path == "/" else path).lstrip("/"))
                full = os.path.join(WEB_DIR, rel)
                if rel.startswith("..") or not os.path.isfile(full):
                    return self.reply(404, "text/plain", b"not found\n")
                with open(full, "rb") as f:
                    self.reply(200, WEB_TYPES.get(os.path.splitext(full)[1], "text/plain"), f.read())

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.thread = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()
        self.base = "http://127.0.0.1:%d/" % self.srv.server_address[1]

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join(5)


M_BATCH = "batch_level_metric,batch_all"


def fake_point(t, k, window=True):
    """A history point at t: trainer 0's batch time cumulative p50 10 + k,
    its last-10-s window's p50 100 + k (apart, so the test sees which the
    chart plots)."""
    st = {"count": 10 * (k + 1), "mean": 10.0 + k, "p50": 10.0 + k, "p90": 11.0 + k, "p99": 12.0 + k}
    if window:
        st["window"] = {"seconds": 10.0, "count": 10, "mean": 100.0 + k, "p50": 100.0 + k, "p90": 101.0 + k}
    return {"t": t, "run": 1, "phase": "running", "pass": "timed",
            "groups": {"trainer": {"0": {M_BATCH: st}, "all": {M_BATCH: st}}}}


def fake_docs(headline, host_state, npoints=5):
    t0 = time.time() - npoints
    pts = [fake_point(t0 + i, i) for i in range(npoints)]
    return {
        "/api/v1/status": {"phase": "running", "error": None, "progress": {"batches_done": 50, "batches_total": 100},
                           "nodes": {"trainer": 1, "server": 0}, "elapsed_s": 5.0, "run": 1, "runs": 1,
                           "servers_initialising": [], "headline": headline, "host_state": host_state},
        "/api/v1/nodes": [{"role": "trainer", "rank": 0, "host": "h0", "device": "cpu", "state": "running",
                           "last_seen_s": 0.1}],
        "/api/v1/metrics": {"unit": "ms", "phase": "running",
                            "groups": {"trainer": {"all": {M_BATCH: {"count": 1234, "mean": 12.0, "p50": 11.0}},
                                                   "ranks": {}}}},
        "/api/v1/config": {"ntrainer": 1, "nserver": 0, "model": "Fake"},
        "/api/v1/history": {"period_s": 1, "window_s": 10, "max_points": 3600, "points": pts},
        "/api/v1/history/last": {"period_s": 1, "window_s": 10, "point": pts[-1]},
    }


def headline_row(steady=None):
    row = {"trainer": "all", "step_p50_ms": 12.3456, "step_p90_ms": 15.0, "samples_per_s": 5183.27,
           "shares": {"forward": 0.2512, "backward_compute": 0.4021, "exposed_comm": 0.1533, "optimizer": 0.1804,
                      "other": 0.013},
           "bytes_per_step": 1048576, "bytes_source": "gradient buckets", "comm_span_ms": 4.2,
           "effective_gb_per_s": 0.24966}
    if steady is not None:
        row["steady"] = steady
    return {"pass": "timed", "unit": "ms", "trainers": [dict(row, trainer="0"), row]}


# The headline as the page shows it, and what it used.
HEADLINE_JS = r"""
const q = (s) => document.querySelector(s);
const txt = (e, s) => (e && e.querySelector(s) ? e.querySelector(s).textContent : null);
const fig = (k) => { const e = q('#hl-' + k); return e ? {text: txt(e, '.fig-value'), n: txt(e, '.fig-n')} : null; };
return {figures: {step_p50: fig('step_p50'), samples_per_s: fig('samples_per_s'),
                  bytes_per_step: fig('bytes_per_step'), effective_gb_per_s: fig('effective_gb_per_s'),
                  shares: fig('shares')},
        shares: Object.fromEntries(Array.from(document.querySelectorAll('#hl-share-legend [data-key]')).map(
          (e) => [e.getAttribute('data-key'), e.querySelector('b').textContent])),
        segments: document.querySelectorAll('#hl-sharebar > span').length,
        few: q('#hl-few').hidden ? null : q('#hl-few').textContent,
        label: q('#hl-label').textContent,
        source: q('#headline').getAttribute('data-source'),
        top: q('#headline').getBoundingClientRect().top,
        chartsTop: q('#chart-trainer').getBoundingClientRect().top,
        busy: q('#busy').hidden ? null : Array.from(document.querySelectorAll('#busy-list li')).map((li) => li.textContent),
        state: window.psbenchState.headline};
"""

# What the trainer chart plots now.
CHART_JS = r"""
const st = window.psbenchState;
const c = st.charts.trainer;
return {mode: st.mode, shown: st.shownMode, stat: st.stat, caption: document.querySelector('#chart-shown').textContent,
        labels: c.labels || [], cols: (c.data || []).slice(1), polls: st.okPolls,
        modeSelect: document.querySelector('#mode-select').value};
"""


def fmt_ms(v):
    return "%.2f ms" % v


def fmt_sps(v):
    return "%.0f" % v if v >= 100 else "%.1f" % v


def fmt_bytes(v):
    for k, u in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if v >= k:
            return "%.2f %s" % (v / k, u)
    return "%.0f B" % v


def fmt_share(v):
    return "%.1f%%" % (100 * v)


# ---- helpers ---------------------------------------------------------------

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(url, timeout=5.0):
    with _NO_PROXY.open(url, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))




# What the page shows, read in one go.
PAGE_STATE_JS = r"""
const q = (s) => document.querySelector(s);
const num = (s) => { const e = q(s); return e ? Number(e.getAttribute('data-points')) : -1; };
const st = window.psbenchState;
return {
  phase: q('#phase') ? q('#phase').textContent.trim() : null,
  dataPhase: q('#phase') ? q('#phase').getAttribute('data-phase') : null,
  conn: q('#conn') ? q('#conn').textContent.trim() : null,
  connected: q('#conn') ? q('#conn').getAttribute('data-connected') : null,
  progress: q('#progress-text') ? q('#progress-text').textContent : null,
  nodeRows: document.querySelectorAll('#nodes tbody tr').length,
  nodeCells: Array.from(document.querySelectorAll('#nodes tbody tr')).map((tr) => tr.cells.length),
  points: {trainer: num('#chart-trainer'), server: num('#chart-server')},
  warmupPoints: q('#chart-trainer') ? Number(q('#chart-trainer').getAttribute('data-warmup-points')) : -1,
  timedPoints: q('#chart-trainer') ? Number(q('#chart-trainer').getAttribute('data-timed-points')) : -1,
  breakdownSeries: q('#chart-breakdown') ? Number(q('#chart-breakdown').getAttribute('data-series')) : -1,
  breakdownShown: q('#fig-breakdown') ? !q('#fig-breakdown').hidden : false,
  serverShown: q('#fig-server') ? !q('#fig-server').hidden : false,
  experiment: Object.fromEntries(Array.from(document.querySelectorAll('#experiment [data-key]')).map(
    (e) => [e.getAttribute('data-key'), e.querySelector('b').textContent])),
  samples: st ? st.samples.length : -1,
  historyPoints: st ? st.historyPoints : -1,
  canvases: document.querySelectorAll('.chart canvas').length,
  tables: document.querySelectorAll('.metrics-group table').length,
  hasState: typeof st === 'object' && st !== null,
  okPolls: st ? st.okPolls : -1,
};
"""

# The metric names of the "all trainers" table.
TABLE_NAMES_JS = r"""
const d = document.querySelector('#metrics-trainer details[data-key="all"]');
if (!d) return null;
return Array.from(d.querySelectorAll('tbody tr')).map((tr) => tr.cells[0].textContent.trim());
"""

# The header and the "batch_all" row of the "all trainers" table.
TABLE_JS = r"""
const d = document.querySelector('#metrics-trainer details[data-key="all"]');
if (!d) return null;
const head = Array.from(d.querySelectorAll('thead th')).map((th) => th.textContent.trim());
const row = Array.from(d.querySelectorAll('tbody tr')).find(
  (tr) => tr.cells[0].textContent.trim() === 'batch_level_metric,batch_all');
return {head: head, row: row ? Array.from(row.cells).map((c) => c.textContent.trim()) : null};
"""


class Dashboard(BrowserTestCase):

    WHAT = "the dashboard test"

    # -- browser ------------------------------------------------------------

    def page_state(self, driver):
        return driver.execute_script(PAGE_STATE_JS)

    def wait_page(self, driver, what, cond, timeout=WAIT_S):
        """Poll the page until cond(page_state) is true; fail after `timeout`."""
        return self.wait_js(driver, what, PAGE_STATE_JS, cond, timeout)

    def wait_live(self, driver, base):
        """Wait until the badge shows the job's phase (as /api/v1/status
        says it, just before or just after reading the page), a chart has
        data, and the nodes and metrics tables have rows."""
        deadline = time.monotonic() + WAIT_S
        s, phases = None, None
        while time.monotonic() < deadline:
            before = get_json(base + "api/v1/status")["phase"]
            s = self.page_state(driver)
            after = get_json(base + "api/v1/status")["phase"]
            phases = (before, after)
            if (s["phase"] in phases and s["dataPhase"] == s["phase"]
                    and max(s["points"].values()) >= 1 and s["nodeRows"] >= 1
                    and s["tables"] >= 1 and s["connected"] == "true"):
                return s
            time.sleep(0.2)
        self.fail("dashboard not live within %.0f s; phase from the API %r; page: %r; console: %r"
                  % (WAIT_S, phases, s, driver.get_log("browser")))

    def assert_no_severe(self, logs, allow=None):
        bad = [e for e in logs if e.get("level") == "SEVERE"
               and not (allow and allow.search(e.get("message", "")))]
        self.assertEqual(bad, [], "the page logged errors to the browser console")

    # -- tests --------------------------------------------------------------

    def test_dashboard_live(self):
        base, _ = start_target(self.reg)
        driver = self.start_browser()
        try:
            driver.get(base)
            self.assertEqual(driver.title, "psbench")
            s = self.wait_live(driver, base)
            self.assertIn(s["phase"], PHASES)
            self.assertTrue(s["hasState"], "window.psbenchState is missing")
            self.assertGreaterEqual(s["canvases"], 1, s)
            self.assertTrue(all(n == 6 for n in s["nodeCells"]), s)
            nodes = get_json(base + "api/v1/nodes")
            self.assertEqual(s["nodeRows"], len(nodes), (s, nodes))

            t = driver.execute_script(TABLE_JS)
            self.assertIsNotNone(t, "no 'all trainers' metrics table")
            self.assertEqual(t["head"], TABLE_COLUMNS)
            self.assertIsNotNone(t["row"], "no batch_all row in the 'all trainers' table")
            self.assertRegex(t["row"][1], r"^\d+$")
            for cell in t["row"][2:]:
                self.assertRegex(cell, r"^-?\d+\.\d{3}$", t["row"])

            # The y axis' tick labels: as many decimals as the step needs
            # (ticks 2.5 apart once printed as 375/378/380/383/385).
            ticks = driver.execute_script("const f = window.psbenchFormat.ticks; return ["
                                          "f([375, 377.5, 380, 382.5, 385]), f([0, 0.05, 0.1]),"
                                          "f([100, 200, 300]), f([0.1, 0.2, 0.30000000000000004])];")
            self.assertEqual(ticks, [["375.0", "377.5", "380.0", "382.5", "385.0"], ["0.00", "0.05", "0.10"],
                                     ["100", "200", "300"], ["0.1", "0.2", "0.3"]])

            # A few more polls so that the screenshot shows lines, not dots.
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and self.page_state(driver)["points"]["trainer"] < 6:
                time.sleep(0.25)
            self.screenshot(driver, SCREENSHOT)
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_opened_after_the_run(self):
        """A page opened once the run is over (during --linger) draws the
        whole run from the master's history, the warm-up and the timed
        pass apart, shows the experiment from api/v1/config and the
        breakdown chart, and adds no point after `done`."""
        models = small_dummy_model(self.reg, "Late")
        p = self.reg.start([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                            "--http", "127.0.0.1:0", "--linger", str(psb.LINGER_S), "--model", "Late",
                            "--model-config-path", models, "--epochs", "30", "--rpc-timeout", "15"],
                           name="master-late")
        host, port = wait_for_line(p, HTTP_READY_RE)
        base = "http://%s:%d/" % (host, port)
        deadline = time.monotonic() + psb.RUN_TIMEOUT
        while time.monotonic() < deadline and get_json(base + "api/v1/status")["phase"] not in ("done", "failed"):
            time.sleep(0.2)
        self.assertEqual(get_json(base + "api/v1/status")["phase"], "done", p.describe())
        hist = get_json(base + "api/v1/history")["points"]
        self.assertEqual(hist[-1]["phase"], "done")
        cfg = get_json(base + "api/v1/config")
        driver = self.start_browser()
        try:
            driver.get(base)
            s = self.wait_page(driver, "draw the run from the history",
                               lambda s: s["phase"] == "done" and s["experiment"].get("transport")
                               and s["points"]["trainer"] >= 2)
            self.assertEqual(s["historyPoints"], len(hist), s)
            # The warm-up and the timed pass, apart.
            self.assertGreaterEqual(s["warmupPoints"], 1, s)
            self.assertGreaterEqual(s["timedPoints"], 1, s)
            # The experiment, as api/v1/config says it.
            e = s["experiment"]
            self.assertEqual(e["model"], "Late")
            self.assertEqual(e["hook"], cfg["resolved"]["trainer"]["configurations"]["ddp_hook"])
            self.assertEqual(e["trainers"], "2")
            self.assertEqual(e["servers"], "1")
            self.assertEqual(e["placement"], cfg["placement"])
            self.assertEqual(e["bucket_cap_mb"],
                             "%g MB" % cfg["resolved"]["trainer"]["configurations"]["bucket_cap_mb"])
            self.assertEqual(e["device"], "cpu")
            self.assertIn(e["transport"], ("shm", "tcp", "shm+tcp"))
            # The breakdown: the trainers report forward, backward, optimizer, exposed wait.
            self.assertTrue(s["breakdownShown"], s)
            self.assertEqual(s["breakdownSeries"], 4, s)
            self.assertTrue(s["serverShown"], s)
            # The headline: the status's "all" row, exact once done, n the
            # "all trainers" batch_all count (or the steady figures' own).
            st = get_json(base + "api/v1/status")
            row = [r for r in st["headline"]["trainers"] if r["trainer"] == "all"][0]
            h = driver.execute_script(HEADLINE_JS)
            steady = row.get("steady")
            src = steady if steady and steady.get("step_p50_ms") is not None else row
            self.assertEqual(h["figures"]["step_p50"]["text"], fmt_ms(src["step_p50_ms"]), h)
            n = steady["n"] if src is steady else \
                get_json(base + "api/v1/metrics")["groups"]["trainer"]["all"][M_BATCH]["count"]
            self.assertTrue(h["figures"]["step_p50"]["n"].endswith("n = %d" % n), h)
            if row["bytes_per_step"] is not None:
                self.assertEqual(h["figures"]["bytes_per_step"]["text"], fmt_bytes(row["bytes_per_step"]), h)
            for k, share in row["shares"].items():
                if share is not None and not (steady and "shares" in steady):
                    self.assertEqual(h["shares"][k], fmt_share(share), h)
            self.assertIn("final", h["label"])
            # No more points after done, however many polls follow.
            polls = s["okPolls"]
            self.wait_page(driver, "poll twice more", lambda t: t["okPolls"] >= polls + 2)
            after = self.page_state(driver)
            self.assertEqual(after["samples"], s["samples"], (s, after))
            self.screenshot(driver, SCREENSHOT.replace(".png", "-late.png"))
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_disconnected_keeps_data(self):
        base, proc = start_target(self.reg)
        driver = self.start_browser()
        try:
            driver.get(base)
            live = self.wait_live(driver, base)
            self.assert_no_severe(driver.get_log("browser"))
            # Gone at once, as a crashed master would be (a SIGTERM would
            # first fail the run and publish that phase).
            proc.signal(signal.SIGKILL)
            proc.stop()
            s = self.wait_page(driver, "say disconnected",
                               lambda s: s["conn"] == "disconnected" and s["connected"] == "false")
            self.assertEqual(s["phase"], live["phase"], "the last phase must stay on the badge")
            self.assertGreaterEqual(s["nodeRows"], live["nodeRows"])
            self.assertGreaterEqual(s["tables"], live["tables"])
            self.assertGreaterEqual(max(s["points"].values()), max(live["points"].values()))
            time.sleep(2.5)  # a retry or two while the master is gone
            # The browser itself reports each refused request; anything else
            # (an uncaught exception above all) is a failure.
            self.assert_no_severe(driver.get_log("browser"),
                                  allow=re.compile(r"net::ERR_CONNECTION_REFUSED|Failed to load resource"))
        finally:
            driver.quit()

    def test_pure_ddp(self):
        """--nserver 0 (allreduce among trainers): trainer nodes only, and the
        allreduce's metric in the 'all trainers' table."""
        base, _ = start_pure_ddp(self.reg)
        driver = self.start_browser()
        try:
            driver.get(base)
            s = self.wait_live(driver, base)
            self.assertEqual(s["nodeRows"], 2, s)
            roles = driver.execute_script(
                "return Array.from(document.querySelectorAll('#nodes tbody tr')).map((tr) => tr.textContent)")
            self.assertTrue(all("trainer" in r and "server" not in r for r in roles), roles)
            # No server: no server chart.
            s = self.wait_page(driver, "hide the server chart", lambda s: not s["serverShown"])
            self.assertEqual(s["experiment"]["servers"], "0", s)
            deadline = time.monotonic() + WAIT_S
            names = None
            while time.monotonic() < deadline:
                names = driver.execute_script(TABLE_NAMES_JS) or []
                if "hook_future_metric,gloo_dense_allreduce" in names:
                    break
                time.sleep(0.2)
            self.assertIn("hook_future_metric,gloo_dense_allreduce", names)
            self.assertNotIn("hook_future_metric,rpc_dense", names)
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_ddp_rpc_servers(self):
        """Embedding servers: their lookup and update times in the 'all
        servers' table, and their rows touched under the tables."""
        base, _ = start_ddp_rpc(self.reg)
        driver = self.start_browser()
        try:
            driver.get(base)
            self.wait_live(driver, base)
            server_names = r"""
const d = document.querySelector('#metrics-server details[data-key="all"]');
if (!d) return [];
return Array.from(d.querySelectorAll('tbody tr')).map((tr) => tr.cells[0].textContent.trim());
"""
            deadline = time.monotonic() + WAIT_S
            names, counters = [], None
            while time.monotonic() < deadline:
                names = driver.execute_script(server_names) or []
                counters = driver.execute_script(
                    "const e = document.querySelector('#metrics-counters');"
                    "return e && !e.hidden ? [e.textContent, e.getAttribute('data-all')] : null;")
                if "method_metric,update" in names and counters and int(counters[1] or 0) > 0:
                    break
                time.sleep(0.2)
            self.assertIn("method_metric,lookup", names)
            self.assertIn("method_metric,update", names)
            self.assertIsNotNone(counters)
            self.assertIn("embedding rows touched by updates: server 0:", counters[0])
            self.assertGreater(int(counters[1]), 0)
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_gpu_nodes_named(self):
        """Each node's device, and for a GPU its name from the node's
        environment: the CUDA server's GPU, the CUDA trainer's (the fake
        GPU's here), a CPU trainer's plain `cpu`."""
        base, _ = start_gpu_nodes(self.reg)
        driver = self.start_browser()
        try:
            driver.get(base)
            deadline = time.monotonic() + WAIT_S
            cells = []
            while time.monotonic() < deadline:
                cells = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#nodes tbody tr')).map("
                    "(tr) => [tr.cells[0].textContent, tr.cells[1].textContent, tr.cells[3].textContent])") or []
                if len(cells) == 3 and all("\u00b7" in c[2] for c in cells if c[2] != "cpu"):
                    break
                time.sleep(0.2)
            by = {(r, k): d for r, k, d in cells}
            self.assertEqual(len(by), 3, cells)
            nodes = {(n["role"], str(n["rank"])): n for n in get_json(base + "api/v1/nodes")}
            srv = nodes[("server", "0")]
            self.assertEqual(by[("server", "0")], "cuda \u00b7 " + srv["environment"]["gpu"]["name"], cells)
            devs = sorted(by[("trainer", r)] for r in ("0", "1"))
            self.assertEqual(devs[0], "cpu", cells)
            self.assertEqual(devs[1], "fake-cuda \u00b7 fake GPU (host memory; tests only)", cells)
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    # -- the headline, the chart's window, the busy banner (a fake master) --

    def fake_master(self, docs):
        fm = FakeMaster(docs)
        self.addCleanup(fm.stop)
        return fm

    def open_fresh(self, driver, base):
        """The page with no stored choice, once its chart holds the history."""
        driver.get(base)
        driver.execute_script("window.localStorage.clear()")
        driver.get(base)
        return self.wait_js(driver, "plot the history", CHART_JS, lambda c: c["cols"] and len(c["cols"][0]) >= 5)

    def wait_js(self, driver, what, js, cond, timeout=WAIT_S):
        """Poll js on the page until cond(its value) is true; fail after `timeout`."""
        deadline = time.monotonic() + timeout
        v = None
        while time.monotonic() < deadline:
            v = driver.execute_script(js)
            if cond(v):
                return v
            time.sleep(0.2)
        self.fail("page did not %s within %.0f s; last: %r; console: %r"
                  % (what, timeout, v, driver.get_log("browser")))

    def test_headline_pass_figures(self):
        """No steady figures: the pass's, each with n from the metrics'
        batch_all count; no busy banner for a host_state that is null."""
        hl = headline_row()
        fm = self.fake_master(fake_docs(hl, None))
        driver = self.start_browser()
        try:
            driver.get(fm.base)
            v = self.wait_js(driver, "show the headline", HEADLINE_JS, lambda v: v["source"] == "pass")
            row = hl["trainers"][-1]
            f = v["figures"]
            self.assertEqual(f["step_p50"]["text"], fmt_ms(row["step_p50_ms"]))
            self.assertEqual(f["step_p50"]["text"], "12.35 ms")
            self.assertEqual(f["samples_per_s"]["text"], fmt_sps(row["samples_per_s"]))
            self.assertEqual(f["bytes_per_step"]["text"], fmt_bytes(row["bytes_per_step"]))
            self.assertEqual(f["effective_gb_per_s"]["text"], "%.2f GB/s" % row["effective_gb_per_s"])
            for k, share in row["shares"].items():
                self.assertEqual(v["shares"][k], fmt_share(share), v["shares"])
            self.assertEqual(v["segments"], 5)
            for k in f:
                self.assertEqual(f[k]["n"], "n = 1234", (k, f[k]))  # batch_all's count, /api/v1/metrics
            self.assertIsNone(v["few"])
            self.assertIn("timed pass", v["label"])
            self.assertLess(v["top"], v["chartsTop"], "the headline opens the page")
            self.assertIsNone(v["busy"])
            # host_state false: still none.
            fm.docs["/api/v1/status"]["host_state"] = {"busy": False, "oversubscribed": False, "warnings": []}
            polls = driver.execute_script("return window.psbenchState.okPolls")
            self.wait_js(driver, "poll twice", "return window.psbenchState.okPolls", lambda n: n >= polls + 2)
            self.assertIsNone(driver.execute_script(HEADLINE_JS)["busy"])
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_headline_steady_and_busy(self):
        """The steady figures where the row has them, labelled, with their
        n and the few-steps mark; the busy banner with the warnings, gone
        when the host is no longer said busy."""
        steady = {"n": 37, "step_p50_ms": 11.111, "step_p90_ms": 13.0, "samples_per_s": 87.26,
                  "few_steps": True}
        warnings = ["host a was busy during the timed pass: load 3.1 on 2 cores",
                    "host b was busy during the timed pass: 40% steal"]
        hl = headline_row(steady)
        fm = self.fake_master(fake_docs(hl, {"busy": True, "oversubscribed": False, "warnings": warnings}))
        driver = self.start_browser()
        try:
            driver.get(fm.base)
            v = self.wait_js(driver, "show the steady headline", HEADLINE_JS,
                             lambda v: v["source"] == "steady" and v["busy"])
            f = v["figures"]
            self.assertEqual(f["step_p50"]["text"], fmt_ms(steady["step_p50_ms"]))
            self.assertEqual(f["samples_per_s"]["text"], fmt_sps(steady["samples_per_s"]))
            self.assertEqual(f["samples_per_s"]["text"], "87.3")
            self.assertEqual(f["step_p50"]["n"], "steady state \u00b7 n = 37")
            self.assertEqual(f["samples_per_s"]["n"], "steady state \u00b7 n = 37")
            # What the steady object lacks is the pass's, with the pass's n.
            self.assertEqual(f["bytes_per_step"]["text"], fmt_bytes(hl["trainers"][-1]["bytes_per_step"]))
            self.assertEqual(f["bytes_per_step"]["n"], "n = 1234")
            self.assertEqual(v["few"], "few steps (n=37)")
            self.assertIn("steady state", v["label"])
            self.assertEqual(v["busy"], warnings)
            self.screenshot(driver, SCREENSHOT.replace(".png", "-headline.png"))
            # Oversubscribed alone shows it too; neither: gone.
            fm.docs["/api/v1/status"]["host_state"] = {"busy": None, "oversubscribed": True,
                                                       "warnings": ["host a: 6 processes on 2 cores"]}
            self.wait_js(driver, "show the oversubscribed warning", HEADLINE_JS,
                         lambda v: v["busy"] == ["host a: 6 processes on 2 cores"])
            fm.docs["/api/v1/status"]["host_state"] = {"busy": False, "oversubscribed": False, "warnings": []}
            self.wait_js(driver, "hide the banner", HEADLINE_JS, lambda v: v["busy"] is None)
            steady["few_steps"] = False
            self.wait_js(driver, "drop the few-steps mark", HEADLINE_JS, lambda v: v["few"] is None)
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_chart_window_or_cumulative(self):
        """The chart plots the last 10 s window's p50 by default; the
        choice of the cumulative one plots the cumulative p50, says so, and
        outlives a reload; the next points come from history/last."""
        fm = self.fake_master(fake_docs(headline_row(), None))
        driver = self.start_browser()
        try:
            c = self.open_fresh(driver, fm.base)
            self.assertEqual((c["mode"], c["shown"], c["stat"]), ("window", "window", "p50"), c)
            self.assertEqual(c["labels"], ["trainer 0"])
            self.assertEqual(c["cols"][0][:5], [100.0, 101.0, 102.0, 103.0, 104.0])
            self.assertIn("over the last 10 s", c["caption"])
            # A new point from history/last.
            t = fm.docs["/api/v1/history"]["points"][-1]["t"] + 1
            fm.docs["/api/v1/history/last"] = {"period_s": 1, "window_s": 10, "point": fake_point(t, 5)}
            c = self.wait_js(driver, "take the next point", CHART_JS, lambda c: 105.0 in c["cols"][0])
            self.assertEqual(c["cols"][0][-1], 105.0)
            # The cumulative choice.
            driver.execute_script("const s = document.querySelector('#mode-select'); s.value = 'cumulative';"
                                  "s.dispatchEvent(new Event('change'));")
            c = driver.execute_script(CHART_JS)
            self.assertEqual(c["shown"], "cumulative", c)
            self.assertEqual(c["cols"][0], [10.0, 11.0, 12.0, 13.0, 14.0, 15.0])
            self.assertIn("cumulative", c["caption"])
            driver.refresh()
            c = self.wait_js(driver, "plot after the reload", CHART_JS, lambda c: c["cols"] and len(c["cols"][0]) >= 5)
            self.assertEqual((c["mode"], c["shown"], c["modeSelect"]), ("cumulative", "cumulative", "cumulative"), c)
            self.assertEqual(c["cols"][0][:5], [10.0, 11.0, 12.0, 13.0, 14.0])
            # Back to the window, p90 over it.
            driver.execute_script("const s = document.querySelector('#mode-select'); s.value = 'window';"
                                  "s.dispatchEvent(new Event('change'));"
                                  "const t = document.querySelector('#stat-select'); t.value = 'p90';"
                                  "t.dispatchEvent(new Event('change'));")
            c = driver.execute_script(CHART_JS)
            self.assertEqual((c["shown"], c["stat"]), ("window", "p90"))
            self.assertEqual(c["cols"][0][:3], [101.0, 102.0, 103.0])
            self.assertIn("p90 over the last 10 s", c["caption"])
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_chart_without_window(self):
        """A master that sends no window (an older one): the chart plots the
        cumulative figures whatever the choice, and says why."""
        docs = fake_docs(headline_row(), None)
        pts = [fake_point(p["t"], i, window=False) for i, p in enumerate(docs["/api/v1/history"]["points"])]
        docs["/api/v1/history"]["points"] = pts
        docs["/api/v1/history/last"]["point"] = pts[-1]
        fm = self.fake_master(docs)
        driver = self.start_browser()
        try:
            c = self.open_fresh(driver, fm.base)
            self.assertEqual((c["mode"], c["shown"]), ("window", "cumulative"), c)
            self.assertEqual(c["cols"][0][:5], [10.0, 11.0, 12.0, 13.0, 14.0])
            self.assertIn("sends no 10 s window", c["caption"])
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()

    def test_relative_urls_behind_prefix(self):
        # A property of the page, not of the server: always uses the mock.
        p = self.reg.start([sys.executable, MOCK, "--http", "127.0.0.1:0", "--prefix", "/ps/bench"],
                           name="mock-prefix")
        host, port = wait_for_line(p, MOCK_READY_RE)
        base = "http://%s:%d/ps/bench/" % (host, port)
        driver = self.start_browser()
        try:
            driver.get(base)
            self.wait_live(driver, base)
            self.assert_no_severe(driver.get_log("browser"))
        finally:
            driver.quit()


if __name__ == "__main__":
    psb.main()
