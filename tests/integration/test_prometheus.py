"""A real Prometheus server (Debian's prometheus package) scrapes a running
psbench-master and finds psbench series with the right labels.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_prometheus.py
"""
import json
import os
import re
import shutil
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import Master, http_get, http_json  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAFANA = os.path.join(ROOT, "configs", "grafana-dashboard.json")
HTTP_API = os.path.join(ROOT, "docs", "http-api.md")

# The step histogram's bucket bounds (le, seconds) as docs/http-api.md
# lists them, then +Inf.
STEP_BOUNDS = ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5",
               "10", "20", "60", "+Inf"]
# The headline's figures as gauges: family, the row's key (a tuple: in an
# object of the row), the factor to base units.
HEADLINE_GAUGES = [("psbench_step_p50_seconds", ("step_p50_ms",), 1e-3),
                   ("psbench_step_p90_seconds", ("step_p90_ms",), 1e-3),
                   ("psbench_samples_per_second", ("samples_per_s",), 1),
                   ("psbench_bytes_per_step", ("bytes_per_step",), 1),
                   ("psbench_comm_span_seconds", ("comm_span_ms",), 1e-3),
                   ("psbench_effective_bytes_per_second", ("effective_gb_per_s",), 1e9),
                   ("psbench_steady_step_p50_seconds", ("steady", "step_p50_ms"), 1e-3),
                   ("psbench_steady_step_p90_seconds", ("steady", "step_p90_ms"), 1e-3),
                   ("psbench_steady_samples_per_second", ("steady", "samples_per_s"), 1),
                   ("psbench_steady_steps", ("steady", "n"), 1)]
SHARE_PARTS = ("forward", "backward_compute", "exposed_comm", "optimizer", "other")
# Families only some jobs have: an embedding server's rows, the headline's
# steady-state figures (where its rows carry them).
CONDITIONAL_FAMILIES = {"psbench_embedding_rows_touched_total", "psbench_steady_step_p50_seconds",
                        "psbench_steady_step_p90_seconds", "psbench_steady_samples_per_second",
                        "psbench_steady_steps"}
# The headline's families: each there where a row knows its figure (a
# workload without a comm span has no psbench_comm_span_seconds).
HEADLINE_FAMILIES = {fam for fam, _, _ in HEADLINE_GAUGES} | {"psbench_step_share"}

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def _unescape(v):
    return re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse_exposition(text):
    """Prometheus text format 0.0.4 as ({family: type}, [(name, {label:
    value}, value)]): enough of it for psbench's exposition."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
        elif line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m, line
            labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group(2) or "")}
            samples.append((m.group(1), labels, float(m.group(3))))
    return types, samples


def series(samples, name, **labels):
    """The samples of name whose labels include `labels`."""
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def family_of(name, types):
    """The family a sample or a query's name belongs to (a histogram's or a
    summary's suffixes folded)."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[:-len(suffix)]
        if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
            return base
    return name


def documented_families():
    """The families of docs/http-api.md's "/metrics (Prometheus)" table."""
    with open(HTTP_API) as f:
        doc = f.read()
    section = doc[doc.index("## `/metrics` (Prometheus)"):]
    return set(re.findall(r"^\| `(psbench_[a-z0-9_]+)` \|", section, re.M))


def histogram_quantile(q, buckets):
    """Prometheus' histogram_quantile over [(le, cumulative count)] sorted by
    le, +Inf last: linear inside the bucket the rank falls in."""
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / (cum - below) if cum > below else lower
        lower, below = le, cum
    return lower


def step_buckets(samples, **labels):
    """{le: count} summed over the step histogram's series that match labels."""
    out = {}
    for l, v in series(samples, "psbench_step_duration_seconds_bucket", **labels):
        out[l["le"]] = out.get(l["le"], 0) + v
    return sorted(((float(le), c) for le, c in out.items()), key=lambda x: x[0])


def check_exposition(tc, text, status, metrics, ntrainer, run_info, environment):
    """What a done run's /metrics says beside the summaries (issue 38):
    every family typed, the build and run info, the headline's figures as
    /api/v1/status has them (in base units; a null one absent), the step
    histogram per trainer rank (cumulative, +Inf = _count = the step count
    of /api/v1/metrics), type,name in halves."""
    types, samples = parse_exposition(text)
    for fam, typ in (("psbench_build_info", "gauge"), ("psbench_run_info", "gauge"),
                     ("psbench_step_duration_seconds", "histogram"), ("psbench_step_p50_seconds", "gauge"),
                     ("psbench_step_p90_seconds", "gauge"), ("psbench_samples_per_second", "gauge"),
                     ("psbench_metric_duration_seconds", "summary"),
                     ("psbench_role_metric_duration_seconds", "summary")):
        tc.assertEqual(types.get(fam), typ, fam)
    for fam in HEADLINE_FAMILIES & set(types):  # the rest where the workload has the figures
        tc.assertEqual(types[fam], "gauge", fam)
    # Every family is documented, and every documented one that is not
    # conditional is there (the headline's: figure by figure, below).
    fams = set(types)
    doc = documented_families()
    tc.assertEqual(fams - doc, set())
    tc.assertEqual(doc - fams - CONDITIONAL_FAMILIES - HEADLINE_FAMILIES, set())
    for n, _, _ in samples:
        tc.assertIn(family_of(n, types), types, n)
    # The build and the run.
    b = series(samples, "psbench_build_info")
    tc.assertEqual(len(b), 1, b)
    tc.assertEqual(b[0], ({"version": environment["psbench_version"], "compiler": environment["compiler"],
                           "protocol": "1"}, 1.0))
    r = series(samples, "psbench_run_info")
    tc.assertEqual(len(r), 1, r)
    tc.assertEqual(r[0], (run_info, 1.0))
    # type,name in halves on both summaries, every sample.
    for fam in ("psbench_metric_duration_seconds", "psbench_role_metric_duration_seconds"):
        got = [l for n, l, _ in samples if family_of(n, types) == fam]
        tc.assertTrue(got, fam)
        for l in got:
            kind, _, name = l["metric"].partition(",")
            tc.assertEqual((l["metric_type"], l["metric_name"]), (kind, name), l)
            want = {"role", "metric", "run", "pass", "metric_type", "metric_name"} | (
                {"rank"} if fam == "psbench_metric_duration_seconds" else set())
            tc.assertEqual(set(l) - {"quantile"}, want, l)
    # The headline: each figure as the status has it, a null one absent.
    rows = status["headline"]["trainers"]
    tc.assertEqual([row["trainer"] for row in rows], [str(r) for r in range(ntrainer)] + ["all"])
    lab = {"run": str(status["run"]), "pass": "timed"}
    for row in rows:
        tc.assertIsNotNone(row["step_p50_ms"], row)  # not vacuous: the run has steps
        for fam, path, k in HEADLINE_GAUGES:
            v = row
            for key in path:
                v = v.get(key) if isinstance(v, dict) else None
            got = series(samples, fam, trainer=row["trainer"])
            if v is None:
                tc.assertEqual(got, [], (fam, row))
                continue
            tc.assertEqual(len(got), 1, (fam, row))
            tc.assertEqual(got[0][0], dict(lab, trainer=row["trainer"]))
            tc.assertAlmostEqual(got[0][1], v * k, delta=1e-12 * max(1.0, abs(v * k)), msg=(fam, row))
        for part in SHARE_PARTS:
            v = row["shares"][part]
            got = series(samples, "psbench_step_share", trainer=row["trainer"], part=part)
            tc.assertEqual(len(got), 0 if v is None else 1, (part, row))
            if v is not None:  # the status's 15 significant digits
                tc.assertAlmostEqual(got[0][1], v, delta=1e-12, msg=(part, row))
    if not any("steady" in row for row in rows):
        tc.assertFalse([n for n in types if n.startswith("psbench_steady_")])
    # The step histogram, per trainer rank.
    ranks = metrics["groups"]["trainer"]["ranks"]
    tc.assertEqual(sorted({l["rank"] for l, _ in series(samples, "psbench_step_duration_seconds_count")}),
                   sorted(str(r) for r in range(ntrainer)))
    for r in range(ntrainer):
        step = ranks[str(r)]["batch_level_metric,batch_all"]
        got = series(samples, "psbench_step_duration_seconds_bucket", rank=str(r))
        tc.assertEqual([l["le"] for l, _ in got], STEP_BOUNDS)
        for l, _ in got:
            tc.assertEqual(set(l), {"rank", "run", "pass", "le"}, l)
            tc.assertEqual((l["run"], l["pass"]), (lab["run"], "timed"))
        counts = [v for _, v in got]
        tc.assertEqual(counts, sorted(counts), got)  # cumulative: never decreasing
        count = series(samples, "psbench_step_duration_seconds_count", rank=str(r))
        tc.assertEqual(len(count), 1)
        tc.assertEqual(counts[-1], count[0][1])
        tc.assertEqual(count[0][1], step["count"])
        tc.assertGreater(step["count"], 0)
        total = series(samples, "psbench_step_duration_seconds_sum", rank=str(r))[0][1]
        tc.assertAlmostEqual(total, step["mean"] * step["count"] / 1000, delta=1e-9 * max(1.0, total))
        # Each step counted under the bounds it does not exceed: none
        # below the fastest step, all from the slowest on.
        for (l, v) in got[:-1]:
            le = float(l["le"]) * 1000
            if le < step["min"]:
                tc.assertEqual(v, 0, (l, step))
            if le >= step["max"]:
                tc.assertEqual(v, step["count"], (l, step))
    return types, samples


class PrometheusScrape(psb.PsbTestCase):

    def test_prometheus_scrapes_master(self):
        prom = shutil.which("prometheus")
        self.assertIsNotNone(prom, "prometheus is not installed (scripts/install-deps.sh installs it)")
        conf = os.path.join(self.reg.workdir, "models.json")
        with open(conf, "w") as f:
            # A DummyModel: its trainers time the step's parts (forward,
            # backward, optimizer, exposed wait) that the Grafana
            # dashboard's breakdown panels show; Synthetic ones do not.
            json.dump({"Slow": {"model_class": "DummyModel",
                                "configurations": {"num_embeddings": 128, "embedding_dim": 64,
                                                   "dense_input_size": 64, "dense_output_size": 128,
                                                   "dense_layers_count": 1, "sparse": False}}}, f)
        m = self.reg.start([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0",
                            "--http", "127.0.0.1:0", "--linger", str(psb.LINGER_S), "--model", "Slow",
                            "--model-config-path", conf, "--epochs", "40", "--rpc-timeout", "15"],
                           name="master", cls=Master)
        m.wait_ports()
        target = m.http[len("http://"):]
        pport = psb.free_port()
        pconf = os.path.join(self.reg.workdir, "prometheus.yml")
        with open(pconf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: psbench\n    metrics_path: /metrics\n"
                    "    static_configs:\n      - targets: ['%s']\n" % target)
        self.reg.start([prom, "--config.file=" + pconf,
                        "--storage.tsdb.path=" + os.path.join(self.reg.workdir, "tsdb"),
                        "--web.listen-address=127.0.0.1:%d" % pport, "--log.level=warn"],
                       name="prometheus")
        api = "http://127.0.0.1:%d/api/v1/query?query=" % pport
        q = urllib.parse.quote('psbench_metric_duration_seconds{metric="batch_level_metric,batch_all"}')
        deadline = time.monotonic() + 60
        found = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(api + q, timeout=2) as r:
                    res = json.loads(r.read().decode())
                series = res["data"]["result"]
                if any(s["metric"].get("rank") == "0" and s["metric"].get("role") == "trainer"
                       for s in series):
                    found = series
                    break
            except OSError:
                pass
            time.sleep(0.5)
        self.assertIsNotNone(found, "Prometheus never saw psbench series:\n" + m.describe())
        labels = found[0]["metric"]
        self.assertEqual(labels["job"], "psbench")
        self.assertIn("quantile", labels)
        for s in found:
            self.assertEqual(s["metric"]["role"], "trainer")
            # Per rank only: the whole role's view is a family of its own
            # (a sum() here counted it twice), and each series says the run
            # and the pass its figures are from.
            self.assertIn(s["metric"]["rank"], ("0", "1"))
            self.assertEqual(s["metric"]["run"], "1")
            self.assertIn(s["metric"]["pass"], ("warmup", "timed"))
        q = urllib.parse.quote('psbench_role_metric_duration_seconds_count{metric="batch_level_metric,batch_all"}')
        with urllib.request.urlopen(api + q, timeout=5) as r:
            role = json.loads(r.read().decode())["data"]["result"]
        self.assertTrue(role, "no psbench_role_metric_duration_seconds series")
        for s in role:
            self.assertEqual(s["metric"]["role"], "trainer")
            self.assertNotIn("rank", s["metric"])
            self.assertEqual(s["metric"]["run"], "1")
        # The Grafana dashboard's breakdown panels answer, with the four
        # parts of the step (the trainers here report all four).
        with open(GRAFANA) as f:
            panels = {p["title"]: p for p in json.load(f)["panels"]}
        want = {"forward_metric,forward_pass", "backward_metric,backward_compute", "optimizer_metric,step",
                "hook_future_metric,exposed_wait"}
        for title in ("Where the step goes, all trainers (mean, timed pass)", "Step breakdown per trainer rank (p50)"):
            expr = panels[title]["targets"][0]["expr"].replace("$instance", ".*")
            deadline = time.monotonic() + 60
            metrics = set()
            while time.monotonic() < deadline and metrics != want:
                with urllib.request.urlopen(api + urllib.parse.quote(expr), timeout=5) as r:
                    res = json.loads(r.read().decode())
                self.assertEqual(res["status"], "success", (title, res))
                metrics = {s["metric"].get("metric") for s in res["data"]["result"]}
                time.sleep(0.5)
            self.assertEqual(metrics, want, title)
        # The phase gauge and a counter arrive too.
        with urllib.request.urlopen(api + urllib.parse.quote("psbench_phase"), timeout=5) as r:
            phases = {s["metric"]["phase"] for s in json.loads(r.read().decode())["data"]["result"]}
        self.assertTrue({"waiting", "warmup", "running", "done", "failed"} <= phases, phases)
        self.assertEqual(http_json(m.http + "/api/v1/status")["error"], None)
        self.check_issue38(m, api)

    def query(self, api, expr):
        with urllib.request.urlopen(api + urllib.parse.quote(expr), timeout=5) as r:
            res = json.loads(r.read().decode())
        self.assertEqual(res["status"], "success", (expr, res))
        return res["data"]["result"]

    def query_until(self, api, expr, done, what):
        """expr's result once done(result) holds (Prometheus scrapes every
        second); fails saying what never came."""
        deadline = time.monotonic() + 60
        res = None
        while time.monotonic() < deadline:
            res = self.query(api, expr)
            if done(res):
                return res
            time.sleep(0.5)
        self.fail("%s: %s never came (last: %s)" % (what, expr, res))

    def check_issue38(self, m, api):
        """The families of issue 38 as Prometheus itself reads them, once
        the run is done (its figures no longer change): the step histogram
        aggregated over ranks with histogram_quantile, the run info, the
        headline's gauges; and every query of the Grafana dashboard names
        only families the master exports, and runs."""
        st = psb.wait_phase(self, m, ("done", "failed"))
        self.assertEqual(st["phase"], "done", m.describe())
        text = http_get(m.http + "/metrics")[2]
        status = http_json(m.http + "/api/v1/status")
        env = http_json(m.http + "/api/v1/nodes")[0]["environment"]
        transport = os.environ.get("PSBENCH_TRANSPORT") or "auto"
        run_info = {"hook": "rpc_hook", "model": "Slow", "trainer": "DdpRpcTrainer", "trainer_class": "DdpTrainer",
                    "server_kind": "average", "bucket_cap_mb": "25", "device": "cpu", "transport": transport,
                    "ntrainer": "2", "nserver": "1", "run": "1"}
        types, samples = check_exposition(self, text, status, http_json(m.http + "/api/v1/metrics"), 2, run_info,
                                          env)
        # histogram_quantile over both ranks' buckets: Prometheus' answer
        # is the one its rule gives on the exposition's buckets.
        want = histogram_quantile(0.5, step_buckets(samples, **{"pass": "timed"}))
        self.assertGreater(want, 0)
        expr = 'histogram_quantile(0.5, sum by (le) (psbench_step_duration_seconds_bucket{pass="timed"}))'
        self.query_until(api, expr, lambda res: len(res) == 1 and
                         abs(float(res[0]["value"][1]) - want) <= 1e-9 * want, "the step's median of all trainers")
        # The job, as labels.
        res = self.query_until(api, "psbench_run_info", lambda res: len(res) == 1, "psbench_run_info")
        labels = dict(res[0]["metric"])
        self.assertEqual((labels.pop("__name__"), labels.pop("job"), labels.pop("instance")),
                         ("psbench_run_info", "psbench", m.http[len("http://"):]))
        self.assertEqual(labels, run_info)
        # The headline's step p50 of all trainers, in seconds.
        p50 = [r for r in status["headline"]["trainers"] if r["trainer"] == "all"][0]["step_p50_ms"] / 1000
        self.query_until(api, 'psbench_step_p50_seconds{trainer="all",pass="timed"}',
                         lambda res: len(res) == 1 and abs(float(res[0]["value"][1]) - p50) <= 1e-12,
                         "the headline's p50")
        # The dashboard: its queries name only families the master exports
        # (or exports where the job has them) and documents, and each runs.
        with open(GRAFANA) as f:
            dash = json.load(f)
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        for v in dash["templating"]["list"]:
            q = re.match(r"label_values\((.*), *\w+\)$", v["query"]["query"])
            self.assertIsNotNone(q, v)
            exprs.append(q.group(1))
        exported = set(types) | CONDITIONAL_FAMILIES | HEADLINE_FAMILIES
        documented = documented_families()
        for e in exprs:
            e = e.replace("$instance", ".*")
            for name in re.findall(r"\bpsbench_[a-z0-9_]+", e):
                fam = family_of(name, types)
                self.assertIn(fam, exported, e)
                self.assertIn(fam, documented, e)
            self.query(api, e)
        # The new panels answer for this job.
        panels = {p["id"]: p for p in dash["panels"]}
        for pid, label in ((11, "model"), (12, "trainer"), (13, "trainer"), (14, "part")):
            expr = panels[pid]["targets"][0]["expr"].replace("$instance", ".*")
            res = self.query_until(api, expr, lambda res: len(res) > 0, panels[pid]["title"])
            self.assertTrue(all(label in r["metric"] for r in res), res)
        res = self.query(api, panels[11]["targets"][0]["expr"].replace("$instance", ".*"))
        self.assertEqual((res[0]["metric"]["model"], res[0]["metric"]["version"]), ("Slow", env["psbench_version"]))
        parts = {r["metric"]["part"] for r in self.query(api, panels[14]["targets"][0]["expr"].replace(
            "$instance", ".*"))}
        self.assertEqual(parts, set(SHARE_PARTS))


if __name__ == "__main__":
    psb.main()
