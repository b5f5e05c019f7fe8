"""A real Prometheus server (Debian's prometheus package) scrapes a running
psbench-master and finds psbench series with the right labels.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_prometheus.py
"""
import json
import os
import shutil
import socket
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import Master, http_json  # noqa: E402


GRAFANA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "configs", "grafana-dashboard.json")


def free_port():
    s = socket.socket()
    s.bind((psb.HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


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
        pport = free_port()
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


if __name__ == "__main__":
    psb.main()
