"""mh.py — a psbench job across namespace hosts, for the multihost tests.

MultihostCase.setUp makes a Net (netns.py) with the hosts

    head            the master (control 10.77.0.1:29500, HTTP :8080: each
                    host has its own ports, so the defaults are used)
    ps1, ps2        psbench-server, started by hand with --master
    tr1 .. tr4      psbench-trainer, started by hand with --master

and tearDown stops every process (psb.Registry) and removes the Net, on
every exit path. The job's token comes from a mode-600 file (--token-file)
on every node, as docs/operations.md recommends. HTTP requests are made
from a host's namespace (curl run there), never from the test's own.

Skips the whole module with a clear message where namespaces cannot be
made (netns.unavailable()).
"""
import json
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import netns  # noqa: E402
import psb  # noqa: E402

CTL_PORT = 29500
HTTP_PORT = 8080
TOKEN = "mh-token-%d" % os.getpid()
SKIP = netns.unavailable()
TRAINER_HOSTS = ("tr1", "tr2", "tr3", "tr4")
SERVER_HOSTS = ("ps1", "ps2")
MODELS = {
    # 2 x 4 buckets of 64 KiB a batch; a pass of 20 epochs is ~1 s on 2 cores.
    "Small": {"model_class": "Synthetic",
              "configurations": {"buckets": 4, "bucket_floats": 16384, "sparse": False}},
}


last_line = psb.last_line  # mh.last_line: test_http_load's


def load_shard(loader, tests, pattern):
    """A module's unittest load_tests (`load_tests = mh.load_shard`): its
    tests, or with $PSBENCH_SHARD "I/N" only those whose place in name
    order is I modulo N, so that ctest runs a long file as N tests side by
    side (tests/CMakeLists.txt) and a test added later falls into one."""
    spec = os.environ.get("PSBENCH_SHARD", "")
    if not spec:
        return tests
    i, n = (int(x) for x in spec.split("/"))
    assert 0 <= i < n, spec

    def flat(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from flat(t)
            else:
                yield t
    shard = unittest.TestSuite()
    for k, t in enumerate(sorted(flat(tests), key=lambda t: t.id())):
        if k % n == i:
            shard.addTest(t)
    return shard


class NetCase(psb.StopsProcesses, unittest.TestCase):
    """A Registry of processes (self.reg) and a Net (self.net, no hosts
    yet) per test. At the end the processes stop, failing the test with
    their sanitizer reports, then the Net goes, and nothing of it (a
    namespace, an /etc/netns folder) may be left."""

    def setUp(self):
        # Cleanups run last-in first-out: processes stop, then the Net goes.
        self.reg = psb.Registry()
        self.net = netns.Net(self.reg.workdir)
        self.addCleanup(self._destroy_net)
        self.addCleanup(self._stop_processes)

    def _destroy_net(self):
        self.net.destroy()
        self.assertEqual(netns.leftovers(), [], "namespaces or /etc/netns files left behind")


@unittest.skipIf(SKIP, SKIP or "")
class MultihostCase(NetCase):
    """The Net's hosts (above) and the job's token and models."""

    hosts = ("head",) + SERVER_HOSTS + TRAINER_HOSTS

    def setUp(self):
        super().setUp()
        self.h = {name: self.net.add_host(name) for name in self.hosts}
        self.head = self.h["head"]
        self.master_addr = "%s:%d" % (self.head.addr, CTL_PORT)
        self.http_base = "http://%s:%d" % (self.head.addr, HTTP_PORT)
        self.token_path = os.path.join(self.reg.workdir, "token")
        fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(TOKEN + "\n")
        self.model_cfg = os.path.join(self.reg.workdir, "models.json")
        with open(self.model_cfg, "w") as f:
            json.dump(MODELS, f)
        self.out_dir = os.path.join(self.reg.workdir, "out")

    # ---- processes -----------------------------------------------------------

    def start_on(self, host, args, name):
        return self.reg.start(host.wrap(args), name=name)

    def start_master(self, *extra, epochs=20, rpc_timeout=10, linger=psb.LINGER_S, model="Small"):
        """The master on the head host. It lingers (psb.LINGER_S) by
        default: the tests read its status and metrics once the run is
        over, after waiting on the nodes, and end it with a signal."""
        args = [psb.bin_path("psbench-master"),
                "--listen", "%s:%d" % (self.head.addr, CTL_PORT),
                "--http", "%s:%d" % (self.head.addr, HTTP_PORT),
                "--ntrainer", str(len(TRAINER_HOSTS)), "--nserver", str(len(SERVER_HOSTS)),
                "--placement", "shard", "--model", model, "--model-config-path", self.model_cfg,
                "--epochs", str(epochs), "--rpc-timeout", str(rpc_timeout), "--linger", str(linger),
                "--out", self.out_dir, "--token-file", self.token_path] + list(extra)
        m = self.start_on(self.head, args, "master")
        self.wait_http(m)
        return m

    def start_nodes(self, rpc_timeout=10):
        """Two servers and four trainers, by hand, each on its own host.
        Returns (servers, trainers) in host order."""
        servers = [self.start_on(self.h[n], [psb.bin_path("psbench-server"), "--master", self.master_addr,
                                             "--listen", "%s:0" % self.h[n].addr, "--rank", str(i),
                                             "--token-file", self.token_path], "server-" + n)
                   for i, n in enumerate(SERVER_HOSTS)]
        trainers = [self.start_on(self.h[n], [psb.bin_path("psbench-trainer"), "--master", self.master_addr,
                                              "--rank", str(i), "--rpc-timeout", str(rpc_timeout),
                                              "--token-file", self.token_path], "trainer-" + n)
                    for i, n in enumerate(TRAINER_HOSTS)]
        return servers, trainers

    # ---- HTTP from a host's namespace ----------------------------------------

    def http(self, path, host="tr1", timeout=5):
        """(status, body) of GET path on the master, from `host`'s namespace;
        (None, error) when it cannot be reached."""
        r = self.h[host].sh("curl", "-sS", "-m", str(timeout), "-o", "-", "-w", "\n%{http_code}",
                            self.http_base + path, check=False, timeout=timeout + 5)
        out = r.stdout.decode("utf-8", "replace")
        if r.returncode != 0:
            return None, r.stderr.decode("utf-8", "replace").strip()
        body, _, code = out.rpartition("\n")
        return int(code), body

    def http_json(self, path, host="tr1"):
        code, body = self.http(path, host)
        if code != 200:
            return None
        return json.loads(body)

    def wait_http(self, m, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not m.alive():
                self.fail("master exited early:\n" + m.describe())
            if self.http("/healthz", host="head")[0] == 200:
                return
            time.sleep(0.1)
        self.fail("master's HTTP did not answer:\n" + m.describe())

    def status(self, host="tr1"):
        return self.http_json("/api/v1/status", host)

    def wait_phase(self, phases, timeout=60, host="head", procs=()):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            st = self.status(host)
            if st:
                last = st
                if st["phase"] in phases:
                    return st
            time.sleep(0.1)
        self.fail("phase never reached %s (last %r):\n%s" % (
            phases, last, "\n\n".join(p.describe() for p in procs)))

    def wait_exit(self, procs, timeout):
        """Every proc's exit code, failing the test if one outlives timeout."""
        deadline = time.monotonic() + timeout
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.fail("%s still running %.0f s after the fault:\n%s" % (p.name, timeout, p.describe()))
        return codes

    def assert_one_line_reason(self, p, *needles):
        """p ended non-zero and its last stderr line says why, naming each
        of needles (regexes)."""
        line = last_line(p.stderr())
        self.assertNotEqual(p.returncode, 0, p.describe())
        self.assertRegex(line, r"^psbench-(master|server|trainer)", "%s: last line %r" % (p.name, line))
        for n in needles:
            self.assertRegex(line, n, "%s: last line %r does not name %s" % (p.name, line, n))
        return line

