"""The master's verdicts and what it accepts from registered nodes (issue 27).

- A node that falls silent after it registered is named within
  --rpc-timeout in every phase (here: before the warm-up, where only the
  120 s join timeout used to end the wait, without a name).
- A stopped server is named, not a trainer that waits on it.
- A master that was itself stopped (longer than --rpc-timeout) blames no
  node for its own pause: the run goes on.
- Every field of a node's messages is checked: a bad sample (negative,
  1e308 ms, not a number), a bad metric name (a newline, no comma), bad
  counters, gpu_timed, pass_done's results; the run fails naming the node
  and the field. A register with a bad field is refused naming the field.
- Peer strings (host, a failure's reason, the BLAS warning) are escaped in
  every log line and verdict: a host "vm\\npsbench-master: phase done\\e[31m"
  forges no line and colours nothing.
- One token limit, 255 bytes, checked where the token is read, in all
  three binaries and for every source (--token, --token-file,
  PSBENCH_TOKEN); a node sending a longer one is told so.

Fake nodes (raw control connections) make the timing of silence exact;
real nodes where the behaviour of real ones matters.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_master_verdicts.py
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import http_json  # noqa: E402

RPC = 2


class FakeNode(object):
    """A node on a raw control connection: it registers at once and sends
    what the test says."""

    def __init__(self, test, m, role, token=None, **fields):
        host, port = m.ctl.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        test.addCleanup(self.sock.close)
        self.raw = psb.RawClient.__new__(psb.RawClient)
        self.raw.sock, self.raw.buf, self.raw.closed = self.sock, b"", False
        self.role = role
        body = {"role": role, "host": "fake", "device": "cpu", "pid": os.getpid()}
        if role == "server":
            body.update({"listen_host": "127.0.0.1", "port": 9})
        body.update(fields)
        self.send("register", body, token)

    def send(self, kind, body=None, token=None):
        data = json.dumps(body if body is not None else {}).encode()
        h = {"type": kind, "payload": len(data)}
        if token is not None:
            h["token"] = token
        self.sock.sendall(psb.encode_frame(h, data))

    def recv(self, timeout=10.0):
        h, p = self.raw.recv_frame(timeout)
        return h.get("type"), (json.loads(p) if p else {})

    def expect(self, kind, timeout=10.0):
        """Read until a message of `kind`; its body."""
        deadline = time.monotonic() + timeout
        while True:
            t, body = self.recv(max(0.01, deadline - time.monotonic()))
            if t == kind:
                return body
            if t == "stop":
                raise AssertionError("stopped while waiting for %s: %r" % (kind, body))

    def beat(self):
        body = {"samples": {}, "bytes_in": 0, "bytes_out": 0}
        if self.role == "trainer":
            body["batches_done"] = 0
        self.send("metrics", body)


class Verdicts(psb.PsbTestCase):

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.models = os.path.join(self.reg.workdir, "models.json")
        with open(self.models, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 2, "bucket_floats": 1000, "sparse": False}},
                       "Slow": {"model_class": "Synthetic",
                                "configurations": {"buckets": 4, "bucket_floats": 262144, "sparse": False}}}, f)
        # Its masters' flags (psb.PsbTestCase.master): one trainer and one
        # server on Tiny, 1 epoch, --rpc-timeout RPC.
        self.master_kw = dict(model="Tiny", model_config=self.models, epochs=1, rpc_timeout=RPC, ntrainer=1,
                              nserver=1)

    def exit_code_within(self, p, timeout=20):
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail("%s did not end within %d s:\n%s" % (p.name, timeout, p.describe()))

    def to_warmup(self, m):
        """A fake server and trainer, both ready: the warm-up starts."""
        srv = FakeNode(self, m, "server")
        srv.expect("registered")
        srv.expect("assign")
        srv.send("ready")
        tr = FakeNode(self, m, "trainer")
        tr.expect("registered")
        tr.expect("assign")
        tr.send("ready")
        tr.expect("start")
        return srv, tr

    def close_on_stop(self, *nodes):
        """Each fake node reads until the master's stop and leaves, as real
        ones do (the master waits a few seconds for nodes that stay)."""
        for n in nodes:
            try:
                n.expect("stop", timeout=20)
            except psb.Closed:
                pass
            n.sock.close()

    def wait_failed(self, m, timeout=30):
        """Wait for the master's verdict (status failed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and m.alive():
            try:
                if http_json(m.http + "/api/v1/status")["phase"] == "failed":
                    return
            except OSError:
                pass
            time.sleep(0.05)

    def stop_later(self, pid):
        """SIGSTOP pid; at the end, SIGCONT it so that it can be stopped."""
        os.kill(pid, signal.SIGSTOP)

        def cont():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.addCleanup(cont)

    # ---- silence -----------------------------------------------------------

    def test_silent_after_register_is_named_within_the_timeout(self):
        """A trainer stopped right after it registered (before any pass):
        named within --rpc-timeout, not 120 s later without a name."""
        m = self.master(ntrainer=2)
        late = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", "1"], name="trainer1")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            nodes = http_json(m.http + "/api/v1/nodes")
            if any(n["role"] == "trainer" and n["rank"] == 1 for n in nodes):
                break
            time.sleep(0.05)
        self.stop_later(late.pid)  # registered, waiting for its assignment
        self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0"], name="server")
        self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", "0"], name="trainer0")
        self.wait_failed(m)
        os.kill(late.pid, signal.SIGCONT)  # it hears the verdict and leaves
        self.assertEqual(self.exit_code_within(m, 20), 1, m.describe())
        self.assertRegex(psb.last_line(m.stderr()), r"run failed: trainer 1 \([^)]*\) sent nothing for [0-9.]+ s "
                                            r"\(--rpc-timeout\)")

    def test_stopped_server_is_named(self):
        m = self.master(local=True, model="Slow", epochs=1000, rpc_timeout=3, ntrainer=2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and http_json(m.http + "/api/v1/status")["phase"] == "waiting":
            time.sleep(0.05)
        server = None
        with open("/proc/%d/task/%d/children" % (m.pid, m.pid)) as f:
            for pid in map(int, f.read().split()):
                with open("/proc/%d/comm" % pid) as c:
                    if c.read().strip() == "psbench-server":
                        server = pid
        self.assertIsNotNone(server, m.describe())
        time.sleep(0.5)  # in the pass: the trainers wait on it batch after batch
        self.stop_later(server)
        self.wait_failed(m)
        os.kill(server, signal.SIGCONT)
        self.assertEqual(self.exit_code_within(m, 30), 1, m.describe())
        last = psb.last_line(m.stderr())
        self.assertRegex(last, r"run failed: server 0 \([^)]*\) (sent nothing for|went silent)", m.stderr()[-3000:])

    def test_server_named_before_the_trainers_that_wait_on_it(self):
        """Trainers fall silent as they wait on a server, some a little
        before it does (their last report came earlier): the server is
        named, with the trainers that wait on it."""
        m = self.master(ntrainer=2)
        srv = FakeNode(self, m, "server")
        srv.expect("registered")
        srv.expect("assign")
        srv.send("ready")
        trainers = [FakeNode(self, m, "trainer") for _ in range(2)]
        for t in trainers:
            t.expect("registered")
            t.expect("assign")
            t.send("ready")
        for t in trainers:
            t.expect("start")
        for t in trainers:  # their last reports, then they wait on the server
            t.beat()
        end = time.monotonic() + 0.4
        while time.monotonic() < end:
            srv.beat()
            time.sleep(0.1)
        # The server stops too (SIGSTOP): every node is silent now.
        self.close_on_stop(srv, *trainers)
        self.assertEqual(self.exit_code_within(m, 20), 1, m.describe())
        last = psb.last_line(m.stderr())
        self.assertRegex(last, r"run failed: server 0 \(fake\) (sent nothing for|went silent) [0-9.]+ s"
                               r".*trainers 0, 1, which wait on it, went silent too")

    def test_master_paused_blames_no_node(self):
        """The master stopped for more than --rpc-timeout (its nodes too, as
        in a suspended VM): when it runs again nobody is blamed for the
        silence it did not hear, and the run goes on."""
        m = self.master()
        srv, tr = self.to_warmup(m)

        def beat_for(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                srv.beat()
                tr.beat()
                time.sleep(0.2)
        beat_for(1.0)
        os.kill(m.pid, signal.SIGSTOP)
        time.sleep(1.75 * RPC)
        os.kill(m.pid, signal.SIGCONT)
        time.sleep(1.5)  # its nodes wake up a little later than it does
        beat_for(RPC + 1.0)
        self.assertTrue(m.alive(), m.describe())
        self.assertEqual(http_json(m.http + "/api/v1/status")["phase"], "warmup")
        self.assertIn("this master did not run for", m.stderr())
        self.assertNotIn("sent nothing", m.stderr())
        # ... and it still names a node that does go silent.
        self.close_on_stop(srv, tr)
        self.assertEqual(self.exit_code_within(m, 20), 1, m.describe())
        self.assertRegex(psb.last_line(m.stderr()), r"server 0 \(fake\) sent nothing for")

    # ---- what nodes send -----------------------------------------------------

    def check_fails(self, send, want):
        """A fresh master in its warm-up; send(server, trainer) sends the
        bad message; the run fails naming the node and `want`."""
        m = self.master()
        srv, tr = self.to_warmup(m)
        send(srv, tr)
        self.close_on_stop(srv, tr)
        self.assertEqual(self.exit_code_within(m, 20), 1, m.describe())
        last = psb.last_line(m.stderr())
        self.assertIn(want, last)
        self.assertNotIn("\x1b", m.stderr())
        return last

    def test_bad_reports_fail_the_run_naming_node_and_field(self):
        cases = [
            ("trainer", "metrics", {"samples": {"batch_level_metric,batch_all": [-5]}},
             'trainer 0 (fake) sent bad metrics: a sample of "batch_level_metric,batch_all" must be a duration'),
            ("trainer", "metrics", {"samples": {"batch_level_metric,batch_all": [1e308]}}, "got 1e+308"),
            ("trainer", "metrics", {"samples": {"batch_level_metric,batch_all": ["fast"]}}, "got a string"),
            ("server", "metrics", {"samples": {"method_metric,x\npsbench-master: phase done": [1]}},
             'server 0 (fake) sent bad metrics: samples: metric name "method_metric,x\\npsbench-master: phase done"'),
            ("trainer", "metrics", {"samples": {"nocomma": [1]}}, 'metric name "nocomma" is not "TYPE,NAME"'),
            ("trainer", "metrics", {"gpu_timed": ["forward_metric,\x1b[31mred"]}, "gpu_timed: metric name"),
            ("server", "metrics", {"gpu_timed": ["forward_metric,forward_pass"]}, "gpu_timed must be a trainer's"),
            ("trainer", "metrics", {"bytes_in": "5"}, "bytes_in: counters must be whole numbers >= 0, got a string"),
            ("trainer", "metrics", {"batches_done": 1.5}, "batches_done: counters must be whole numbers"),
            ("server", "metrics", {"rows_touched": -1}, "rows_touched must be a whole number >= 0"),
            ("trainer", "pass_done", {"batches_done": 1, "loss_per_epoch": ["slow"]},
             "trainer 0 (fake) sent a bad pass_done: loss_per_epoch[0] must be a number"),
            ("trainer", "pass_done", {"batches_done": 1, "final_params_sha256": "zz"},
             "final_params_sha256 must be 64 lowercase hex digits"),
            ("trainer", "pass_done", {"batches_done": 1, "epochs": -1}, "epochs must be a whole number"),
            ("trainer", "pass_done", {"batches_done": 1, "buckets": {
                "layout": "ddp", "first_bucket_mb": 1, "bucket_cap_mb": 25, "rebuilt": [],
                "first_iteration": [{"floats": -1, "sparse": False, "parameters": []}]}},
             "buckets.first_iteration[0] must be"),
        ]
        for role, kind, body, want in cases:
            with self.subTest(role=role, kind=kind, body=body):
                self.check_fails(lambda s, t: (s if role == "server" else t).send(kind, body), want)

    def test_bad_register_refused_naming_the_field(self):
        m = self.master()
        cases = [
            ("server", {"port": 70000}, "bad register: port 70000 is outside 1..65535"),
            ("server", {"port": "9"}, "bad register: port must be a whole number in 1..65535, got a string"),
            ("trainer", {"pid": "me"}, "bad register: pid must be a whole number"),
            ("trainer", {"device": "cuda\n0"}, 'bad register: device must be printable text, got "cuda\\n0"'),
            ("trainer", {"environment": [1]}, "bad register: environment must be an object, got a list"),
            ("trainer", {"host": "h" * 300}, "bad register: host must have 1..255 bytes, got 300"),
            ("server", {"advertise": "a b"}, "bad register: advertise must be a host name or address"),
        ]
        for role, fields, want in cases:
            with self.subTest(role=role, fields=fields):
                n = FakeNode(self, m, role, **fields)
                body = n.expect("stop")
                self.assertEqual(body.get("status"), "refused", body)
                self.assertTrue(body.get("reason", "").startswith(want), (body, want))
        # Refusals do not disturb the run: a good server still registers.
        FakeNode(self, m, "server").expect("registered")
        self.assertTrue(m.alive(), m.describe())

    def test_peer_strings_escaped(self):
        # The status is read once the run has failed: the master lingers.
        m = self.master(rpc_timeout=10, linger=psb.LINGER_S)
        srv = FakeNode(self, m, "server")
        srv.expect("registered")
        srv.expect("assign")
        srv.send("ready")
        forged = "vm\npsbench-master: phase done\x1b[31m"
        tr = FakeNode(self, m, "trainer", host=forged,
                      environment={"blas": {"warning": "slow\r\npsbench-master: run done\x1b]0;title\x07"}})
        tr.expect("registered")
        tr.expect("assign")
        tr.send("failed", {"reason": "boom\n\x1b[2Jpsbench-master: phase done\u202e"})
        self.close_on_stop(srv, tr)
        st = psb.wait_phase(self, m, ("failed",), timeout=20)
        psb.end_lingering(self, m, 1)
        err = m.stderr()
        for ch in ("\x1b", "\x07", "\r", "\u202e"):
            self.assertNotIn(ch, err)
        for line in err.splitlines():
            self.assertFalse(line.startswith("psbench-master: phase done"), line)
            self.assertFalse(line.startswith("psbench-master: run done"), line)
        self.assertIn("trainer 0 registered from vm\\npsbench-master: phase done\\x1b[31m", err)
        self.assertIn("slow\\r\\npsbench-master: run done\\x1b]0;title\\x07", err)
        self.assertIn("failed: boom\\n\\x1b[2Jpsbench-master: phase done\\u202e", psb.last_line(m.stderr()))
        # The status says the verdict as the last line does, escaped alike.
        self.assertNotIn("\x1b", st["error"])
        self.assertEqual(psb.last_line(m.stderr()), "psbench-master: run failed: " + st["error"])

    # ---- the token ---------------------------------------------------------------

    def test_token_limit_in_every_binary(self):
        long_token = "t" * 256
        path = os.path.join(self.reg.workdir, "token")
        with open(path, "w") as f:
            f.write(long_token + "\n")
        os.chmod(path, 0o600)
        base = {"psbench-master": ["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--ntrainer", "1",
                                   "--nserver", "1"],
                "psbench-server": ["--standalone", "--trainers", "1", "--listen", "127.0.0.1:0"],
                "psbench-trainer": ["--master", "127.0.0.1:9", "--connect-timeout", "1"]}
        for binary, args in base.items():
            for how, extra, env, source in (("flag", ["--token", long_token], {}, "--token"),
                                            ("file", ["--token-file", path], {}, "--token-file " + path),
                                            ("env", [], {"PSBENCH_TOKEN": long_token}, "PSBENCH_TOKEN")):
                with self.subTest(binary=binary, how=how):
                    p = self.reg.start([psb.bin_path(binary)] + args + extra, name=binary,
                                       env=psb.base_env(env, drop_token=not env))
                    rc = self.exit_code_within(p, 10)
                    self.assertNotEqual(rc, 0, p.describe())
                    self.assertIn("%s: the token is longer than 255 bytes" % source, p.stderr())
                    self.assertNotIn(long_token, p.stderr())
        # 255 bytes is a token; a node that sends more is told why.
        m = self.master("--token", "t" * 255)
        FakeNode(self, m, "server", token="t" * 255).expect("registered")
        body = FakeNode(self, m, "trainer", token=long_token).expect("stop")
        self.assertIn("its token is longer than 255 bytes", body.get("reason"))


if __name__ == "__main__":
    psb.main()
