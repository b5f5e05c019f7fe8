"""The master's HTTP API under slow consumers and a bounded flood, during a
run across namespace hosts (mh.py: master on head, servers on ps1 and ps2,
trainers on tr1..tr4, started by hand). Issue 13.

While the job runs (~10 s: a warm-up and a timed pass of a Synthetic model
with 1 MiB buckets), load clients (httpload.py) run in other hosts'
namespaces for ~8 s:
  ps1       48 slow consumers: readers of 1 byte per 0.5 s with a minimal
            receive buffer and connections that never read (of /metrics,
            /api/v1/metrics and the dashboard's 51 KB uPlot file: the
            master holds what the kernel's buffers do not take), requests
            sent 1 byte per 0.5 s
  tr1, tr2  a bounded flood: 150 concurrent connections each, 4,000
            requests each (at most 500 a second) over every endpoint (GET,
            HEAD, a 404, the dashboard's page)
  ps2       /healthz every ~0.2 s (curl, -m 10), the health check the load
            must not lock out
and the test samples the master's VmRSS, open descriptors and HTTP
connections (/proc/PID/fd against /proc/PID/net/tcp) throughout.

Asserts: the run completes (phase done, every node exits 0); every /healthz
is answered 200 within curl's bound; the flood gets answers (200/404 only)
and the per-IP limit refuses the excess (master/http.c: 64 per address; no
more ever seen open from one address, nor more than 256 in all);
VmRSS stays under its pre-load value plus what the HTTP limits allow
(HTTP_MAX_CONNS x (connection pool + biggest document) + 16 MiB of slack for
the allocator and the run's own growth); once the clients are gone the
master holds no HTTP connection and no more descriptors than before the
load (within the connection timeout, 30 s); MHD's messages are rate-limited
(at most one line a second); the master exits 0 on SIGTERM and no process
is left in any host's namespace. No timing thresholds: figures are printed, not judged.

Run (as root): PSBENCH_BIN=build-test /usr/bin/python3 tests/multihost/test_http_load.py
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mh  # noqa: E402
import psb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LOADER = os.path.join(HERE, "httpload.py")
# 4 buckets of 1 MiB a batch (~12 ms a batch here; Small's batches are too
# quick): 200 epochs are 400 batches a trainer in each of the two passes
# (warm-up, then timed), a job of ~10 s.
MODEL = {"model_class": "Synthetic", "configurations": {"buckets": 4, "bucket_floats": 262144, "sparse": False}}
EPOCHS = 200
HOLD_S = 8              # how long the slow consumers stay connected
FLOOD_CONNS = 150       # per flood host (two hosts: 300 concurrent)
FLOOD_REQUESTS = 4000   # per flood host (8,000 in all) ...
FLOOD_RATE = 500        # ... at most 500 a second per host: spread over the hold
# master/http.c's limits, for the memory bound and the checks.
HTTP_MAX_CONNS = 256
HTTP_MAX_PER_IP = 64
HTTP_CONN_MEMORY = 32 * 1024
HTTP_TIMEOUT_S = 30
SLACK = 16 << 20


def vmrss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


def descriptors(pid):
    """(open descriptors, HTTP connections among them, the most of those
    from one address) of pid: HTTP connections are its sockets whose local
    port is the HTTP port, the listener aside."""
    http_inodes = {}
    with open("/proc/%d/net/tcp" % pid) as f:   # pid's own namespace
        for row in f.readlines()[1:]:
            c = row.split()
            if int(c[1].split(":")[1], 16) == mh.HTTP_PORT and c[3] != "0A":
                http_inodes[c[9]] = c[2].split(":")[0]   # the peer's address
    fds = os.listdir("/proc/%d/fd" % pid)
    peers = {}
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        if m and m.group(1) in http_inodes:
            peer = http_inodes[m.group(1)]
            peers[peer] = peers.get(peer, 0) + 1
    return len(fds), sum(peers.values()), max(peers.values(), default=0)


class HttpLoad(mh.MultihostCase):

    def loader(self, host, name, *args):
        return self.start_on(self.h[host], ["/usr/bin/python3", LOADER, "--target",
                                            "%s:%d" % (self.head.addr, mh.HTTP_PORT), "--timeout", "120"]
                             + [str(a) for a in args], name)

    def test_slow_consumers_and_flood(self):
        with open(self.model_cfg, "w") as f:
            json.dump({"Medium": MODEL}, f)
        t_start = time.monotonic()
        m = self.start_master(epochs=EPOCHS, model="Medium")
        fds_idle = descriptors(m.pid)[0]
        servers, trainers = self.start_nodes()
        nodes = servers + trainers
        self.wait_phase(("warmup", "running", "done", "failed"), procs=[m] + nodes)
        # Before the load: the job under way, its nodes connected.
        rss_pre = vmrss(m.pid)
        fds_pre, http_pre, _ = descriptors(m.pid)
        t_load = time.monotonic()
        loaders = [
            self.loader("ps1", "slow-ps1", "--trickle", 16, "--noread", 16, "--slowsend", 16,
                        "--pause", 0.5, "--hold", HOLD_S),
            self.loader("tr1", "flood-tr1", "--flood-conns", FLOOD_CONNS, "--flood-requests", FLOOD_REQUESTS,
                        "--rate", FLOOD_RATE),
            self.loader("tr2", "flood-tr2", "--flood-conns", FLOOD_CONNS, "--flood-requests", FLOOD_REQUESTS,
                        "--rate", FLOOD_RATE),
        ]
        rss_max, fds_max, http_max, per_ip_max = rss_pre, fds_pre, http_pre, 0
        probes, probe_s = [], []
        t_done = None
        while any(p.alive() for p in loaders):
            rss_max = max(rss_max, vmrss(m.pid))
            fds, http, per_ip = descriptors(m.pid)
            fds_max, http_max, per_ip_max = max(fds_max, fds), max(http_max, http), max(per_ip_max, per_ip)
            t = time.monotonic()
            code, body = self.http("/healthz", host="ps2", timeout=10)
            probe_s.append(time.monotonic() - t)
            probes.append((code, body))
            if t_done is None:
                st = self.status(host="ps2")
                if st and st["phase"] in ("done", "failed"):
                    t_done = time.monotonic()
            if time.monotonic() - t_load > 150:
                self.fail("load clients still running after 150 s:\n" +
                          "\n\n".join(p.describe() for p in loaders))
            time.sleep(0.2)
        load_s = time.monotonic() - t_load
        results = {}
        for p in loaders:
            self.assertEqual(p.wait(5), 0, p.describe())
            results[p.name.split("-", 1)[1]] = json.loads(mh.last_line(p.stdout()))
        st = self.wait_phase(("done", "failed"), timeout=120, procs=[m] + nodes)
        t_done = t_done or time.monotonic()
        self.assertEqual(st["phase"], "done", st)
        for p in nodes:
            self.assertEqual(p.wait(30), 0, p.describe())

        # After the clients: no HTTP connection left, descriptors back
        # (waiting up to the connection timeout for any the master still
        # holds).
        deadline = time.monotonic() + HTTP_TIMEOUT_S + 10
        while True:
            fds_after, http_after, _ = descriptors(m.pid)
            if (http_after == 0 and fds_after <= fds_pre) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        rss_after = vmrss(m.pid)
        # The documents are at their biggest now (every metric of the run).
        docs = {p: len(self.http(p, host="head")[1].encode()) for p in
                ("/api/v1/status", "/api/v1/nodes", "/api/v1/metrics", "/metrics")}
        biggest = max(docs.values())
        bound = rss_pre + HTTP_MAX_CONNS * (HTTP_CONN_MEMORY + biggest) + SLACK

        # The figures.
        mib = lambda b: b / 1048576.0
        print("\nmaster during the load (%.1f s of load from %.1f s into the job; the job done after %.1f s; "
              "%d healthz probes):" % (load_s, t_load - t_start, t_done - t_start, len(probes)))
        print("  documents at the end (bytes): %s" % ", ".join("%s %d" % kv for kv in sorted(docs.items())))
        print("  VmRSS: before the load %.1f MiB, max %.1f MiB (+%.1f), after %.1f MiB; bound %.1f MiB "
              "(pre + %d x (%d KiB pool + %d B document) + %d MiB)" % (
                  mib(rss_pre), mib(rss_max), mib(rss_max - rss_pre), mib(rss_after), mib(bound),
                  HTTP_MAX_CONNS, HTTP_CONN_MEMORY // 1024, biggest, SLACK >> 20))
        print("  descriptors: before the nodes %d, before the load %d (HTTP %d), max %d (HTTP %d, %d from one "
              "address), after %d (HTTP %d)" % (fds_idle, fds_pre, http_pre, fds_max, http_max, per_ip_max,
                                                fds_after, http_after))
        ps = sorted(probe_s)
        print("  /healthz from ps2: %d probes, all 200: %s; curl round trip p50 %.3f s, max %.3f s" % (
            len(probes), all(c == 200 for c, _ in probes), ps[len(ps) // 2] if ps else 0, ps[-1] if ps else 0))
        for name, r in sorted(results.items()):
            print("  %s: %s" % (name, json.dumps(r, sort_keys=True)))
        http_lines = [ln for ln in m.stderr().splitlines() if ": http: " in ln]
        print("  MHD messages in the master's log: %d line(s)" % len(http_lines))

        # The checks.
        self.assertTrue(probes, "no health probe ran during the load")
        bad = [(c, b) for c, b in probes if c != 200 or b != "ok"]
        self.assertEqual(bad, [], "/healthz not answered during the load")
        for name in ("flood-tr1", "flood-tr2"):
            r = results[name]
            self.assertFalse(r["timed_out"], r)
            self.assertGreater(r["answers"], 0, r)
            self.assertLessEqual(set(r["status"]), {"200", "404"}, r)
        # 150 concurrent from one address against a limit of 64 a host.
        self.assertGreater(results["flood-tr1"]["rejected"] + results["flood-tr2"]["rejected"], 0,
                           "the per-IP limit never refused a connection")
        slow = results["slow-ps1"]
        self.assertFalse(slow["timed_out"], slow)
        self.assertGreater(slow["bytes_in"], 0, slow)
        self.assertLessEqual(rss_max, bound, "VmRSS %.1f MiB over the bound %.1f MiB" % (mib(rss_max), mib(bound)))
        self.assertLessEqual(http_max, HTTP_MAX_CONNS)
        self.assertLessEqual(per_ip_max, HTTP_MAX_PER_IP)
        self.assertEqual(http_after, 0, "HTTP connections still open %d s after the clients closed" %
                         (HTTP_TIMEOUT_S + 10))
        self.assertLessEqual(fds_after, fds_pre, "descriptors not back to the pre-load count")
        life_s = time.monotonic() - t_start
        self.assertLessEqual(len(http_lines), int(life_s) + 2,
                             "MHD's messages are not rate-limited:\n" + "\n".join(http_lines[:20]))

        # Still serving, the right documents.
        code, body = self.http("/metrics", host="ps2")
        self.assertEqual(code, 200)
        self.assertIn('psbench_phase{phase="done"} 1', body)
        m.signal(15)
        self.assertEqual(m.wait(20), 0, m.describe())
        with open(os.path.join(self.out_dir, "results.json")) as f:
            self.assertEqual(json.load(f)["phase"], "done")
        left = [p.name for p in [m] + nodes + loaders if p.alive()]
        self.assertEqual(left, [], "still running")
        for h in self.h.values():   # nothing else either, in any host
            r = subprocess.run(["ip", "netns", "pids", h.ns], stdout=subprocess.PIPE, check=True)
            self.assertEqual(r.stdout.split(), [], "processes left in %s" % h.name)
        print("  test wall time so far: %.1f s" % (time.monotonic() - t_start))


if __name__ == "__main__":
    psb.main()
