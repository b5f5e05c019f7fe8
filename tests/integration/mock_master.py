#!/usr/bin/env python3
"""mock_master.py — a stand-in for psbench-master's HTTP side, for the
dashboard test and for working on web/ without a real job.

Serves the files of web/ (GET / is web/index.html) and fake but
contract-shaped JSON (docs: ../../../shared/DESIGN.md, "HTTP API of the
master") for /api/v1/status, /api/v1/nodes and /api/v1/metrics, with values
that change over time: the job goes waiting -> warmup -> running -> done on a
clock, trainers and servers produce samples, and the running statistics
follow them.

    python3 tests/integration/mock_master.py [--http 127.0.0.1:0] [--prefix /psbench]
        [--trainers 4] [--servers 2] [--run-seconds 60] [--fail]

Prints "mock-master: http listening on http://HOST:PORT/" on stderr once it
accepts connections. Stops on SIGTERM/SIGINT. Standard library only.
"""
import argparse
import json
import math
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
WEB_DIR = os.path.abspath(os.path.join(HERE, "..", "..", "web"))

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "application/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".md": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}

M_BATCH = "batch_level_metric,batch_all"
M_FWD = "forward_metric,forward_pass"
M_BWD = "backward_metric,backward"
M_RPC = "hook_future_metric,rpc_dense"
M_PS_BATCH = "parameter_server_batch_metric,param_index_batch"
M_PS_STRAG = "parameter_server_straggler_metric,param_index_straggler"
M_PS_BATCH_H = "parameter_server_batch_metric,param_index_batch_from_header"
M_PS_STRAG_H = "parameter_server_straggler_metric,param_index_straggler_from_header"
M_AVG = "method_metric,average computation"


def stats(xs):
    """STATS of a list of samples (ms), like the master's: population
    variance, nearest-rank percentiles."""
    n = len(xs)
    if n == 0:
        return None
    s = sorted(xs)
    mean = sum(s) / n
    var = sum((x - mean) ** 2 for x in s) / n

    def pct(p):
        return s[min(n - 1, max(0, int(math.ceil(p / 100.0 * n)) - 1))]
    return {"count": n, "min": s[0], "max": s[-1], "mean": mean, "variance": var,
            "stdev": math.sqrt(var), "p50": pct(50), "p75": pct(75), "p90": pct(90),
            "p95": pct(95), "p99": pct(99)}


class Job(object):
    """A fake job on a clock. Thread-safe (the HTTP server is threaded)."""

    WAITING_S = 1.0
    WARMUP_S = 2.0

    def __init__(self, trainers, servers, run_seconds, fail):
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.ntrainer, self.nserver = trainers, servers
        self.run_seconds = run_seconds
        self.fail = fail
        self.batches_per_trainer = 100
        self.rng = random.Random(1234)
        # samples[(role, rank)][metric] -> list of ms
        self.samples = {}
        self.done_batches = [0] * trainers
        self.last_step = None

    def config(self):
        """/api/v1/config's keys that the page reads, as the real master
        writes them."""
        return {"ntrainer": self.ntrainer, "ncudatrainer": 0, "nserver": self.nserver, "ncudaserver": 0,
                "model": "MockModel", "trainer": "DdpRpcTrainer", "placement": "seed", "transport": "auto",
                "resolved": {"model": {"id": "MockModel", "class": "Synthetic", "configurations": {}},
                             "trainer": {"id": "DdpRpcTrainer", "class": "DdpTrainer",
                                         "configurations": {"ddp_hook": "rpc_hook", "bucket_cap_mb": 25}}}}

    def phase_at(self, t):
        if t < self.WAITING_S:
            return "waiting"
        if t < self.WAITING_S + self.WARMUP_S:
            return "warmup"
        if t < self.WAITING_S + self.WARMUP_S + self.run_seconds:
            return "running"
        return "failed" if self.fail else "done"

    def _add(self, role, rank, metric, v):
        self.samples.setdefault((role, rank), {}).setdefault(metric, []).append(v)

    def _advance(self):
        """Produce the samples of the batches finished since the last call."""
        now = time.monotonic() - self.t0
        run_start = self.WAITING_S + self.WARMUP_S
        if now < run_start:
            return now
        run_t = min(now - run_start, self.run_seconds)
        target = min(self.batches_per_trainer,
                     int(self.batches_per_trainer * run_t / self.run_seconds))
        for r in range(self.ntrainer):
            while self.done_batches[r] < target:
                b = self.done_batches[r]
                wave = 1.0 + 0.25 * math.sin(b / 7.0 + r)
                fwd = (4.0 + r) * wave + self.rng.random()
                bwd = 2 * fwd + self.rng.random()
                rpc = 6.0 + 2 * self.rng.random() + (8.0 if r == self.ntrainer - 1 else 0.0)
                self._add("trainer", r, M_FWD, fwd)
                self._add("trainer", r, M_BWD, bwd)
                self._add("trainer", r, M_RPC, rpc)
                self._add("trainer", r, M_BATCH, fwd + bwd + rpc + self.rng.random())
                srv = r // max(1, self.ntrainer // self.nserver) if self.nserver else 0
                srv = min(srv, self.nserver - 1)
                if srv >= 0:
                    # A real server's rows: the seed's two, then the same
                    # from the first push's header (its transfer on top).
                    ps_batch = 3.0 + srv + self.rng.random() * wave
                    ps_strag = 1.0 + 2.0 * self.rng.random() * wave
                    xfer = 0.5 + self.rng.random()
                    self._add("server", srv, M_PS_BATCH, ps_batch)
                    self._add("server", srv, M_PS_STRAG, ps_strag)
                    self._add("server", srv, M_PS_BATCH_H, ps_batch + xfer)
                    self._add("server", srv, M_PS_STRAG_H, ps_strag + xfer)
                    self._add("server", srv, M_AVG, 0.2 + 0.05 * self.rng.random())
                self.done_batches[r] += 1
        return now

    def status(self):
        with self.lock:
            t = self._advance()
            phase = self.phase_at(t)
            return {"phase": phase,
                    "error": "trainer 1 lost (mock)" if phase == "failed" else None,
                    "progress": {"batches_done": sum(self.done_batches),
                                 "batches_total": self.batches_per_trainer * self.ntrainer},
                    "nodes": {"trainer": self.ntrainer, "server": self.nserver},
                    "elapsed_s": round(t, 3)}

    def nodes(self):
        with self.lock:
            t = self._advance()
            phase = self.phase_at(t)
            state = {"waiting": "registered", "warmup": "running", "running": "running",
                     "done": "done", "failed": "failed"}[phase]
            out = []
            for r in range(self.nserver):
                out.append({"role": "server", "rank": r, "host": "127.0.0.1",
                            "device": "cpu", "state": state,
                            "last_seen_s": round((t * 3.7 + r) % 0.5, 3)})
            for r in range(self.ntrainer):
                out.append({"role": "trainer", "rank": r, "host": "127.0.0.1",
                            "device": "cuda:%d" % r if r % 2 else "cpu", "state": state,
                            "last_seen_s": round((t * 2.3 + r) % 0.5, 3)})
            return out

    def metrics(self):
        with self.lock:
            t = self._advance()
            groups = {}
            for role in ("trainer", "server"):
                ranks, combined = {}, {}
                n = self.ntrainer if role == "trainer" else self.nserver
                for r in range(n):
                    per = self.samples.get((role, r), {})
                    if per:
                        ranks[str(r)] = {m: stats(v) for m, v in sorted(per.items())}
                    for m, v in per.items():
                        combined.setdefault(m, []).extend(v)
                groups[role] = {"all": {m: stats(v) for m, v in sorted(combined.items())},
                                "ranks": ranks}
            return {"unit": "ms", "phase": self.phase_at(t), "groups": groups}


def make_handler(job, prefix):
    class Handler(BaseHTTPRequestHandler):
        server_version = "psbench-mock-master"

        def log_message(self, fmt, *args):  # quiet
            pass

        def send_body(self, code, ctype, body):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def send_json(self, obj):
            self.send_body(200, "application/json", json.dumps(obj).encode("utf-8"))

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            path = self.path.split("?", 1)[0].split("#", 1)[0]
            if prefix:
                if path == prefix:
                    self.send_response(301)
                    self.send_header("Location", prefix + "/")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if not path.startswith(prefix + "/"):
                    return self.send_body(404, "text/plain; charset=utf-8", b"not found\n")
                path = path[len(prefix):]
            if path == "/healthz":
                return self.send_body(200, "text/plain; charset=utf-8", b"ok\n")
            if path == "/api/v1/status":
                return self.send_json(job.status())
            if path == "/api/v1/nodes":
                return self.send_json(job.nodes())
            if path == "/api/v1/metrics":
                return self.send_json(job.metrics())
            if path == "/api/v1/config":
                return self.send_json(job.config())
            if path == "/api/v1/history":
                # The mock keeps no history: the page starts from its own polls.
                return self.send_json({"period_s": 1, "max_points": 3600, "points": []})
            if path == "/api/v1/history/last":
                return self.send_json({"period_s": 1, "window_s": 10, "point": None})
            if path == "/":
                path = "/index.html"
            rel = os.path.normpath(path.lstrip("/"))
            full = os.path.join(WEB_DIR, rel)
            if rel.startswith("..") or os.path.isabs(rel) or not os.path.isfile(full):
                return self.send_body(404, "text/plain; charset=utf-8", b"not found\n")
            ext = os.path.splitext(full)[1].lower()
            with open(full, "rb") as f:
                body = f.read()
            self.send_body(200, CONTENT_TYPES.get(ext, "text/plain; charset=utf-8"), body)

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--http", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: any)")
    ap.add_argument("--prefix", default="", help="serve everything under this path prefix")
    ap.add_argument("--trainers", type=int, default=4)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--run-seconds", type=float, default=60.0)
    ap.add_argument("--fail", action="store_true", help="end in phase 'failed' instead of 'done'")
    a = ap.parse_args()
    host, _, port = a.http.rpartition(":")
    job = Job(a.trainers, a.servers, a.run_seconds, a.fail)
    srv = ThreadingHTTPServer((host or "127.0.0.1", int(port)), make_handler(job, a.prefix.rstrip("/")))
    srv.daemon_threads = True

    def stop(signum, frame):
        # shutdown() waits for serve_forever to return: call it off the main thread.
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    h, p = srv.server_address[:2]
    sys.stderr.write("mock-master: http listening on http://%s:%d%s/\n" % (h, p, a.prefix.rstrip("/")))
    sys.stderr.flush()
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
