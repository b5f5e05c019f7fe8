"""Who may join a run: where the master and the servers listen, the
warning for ports open beyond loopback without a token, --token-file, and
that the token never shows in logs, results.json or the HTTP API.

Ports: every process here listens on port 0 (an ephemeral port) except in
test_local_defaults_to_loopback, whose point is that a `--local` master
given no --listen / --http picks 127.0.0.1 itself. There the control port
comes from the seed's `--master-port 0`, which sets only the port and keeps
the default host (so the check stands), and HTTP takes its default,
127.0.0.1:8080: when another process holds 8080 the master cannot bind it,
and the test then checks the address the master chose (its `args:` line,
printed before binding) and the control port, and says that it skipped the
HTTP bind check.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_join.py
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import Master, http_get  # noqa: E402

TOKEN = "s3cr3t-TOKEN-xyz"
WRONG = "wr0ng-TOKEN-abc"
RUN_TIMEOUT = 90
CTL_WARN_RE = re.compile(r"psbench-master: warn: control port ([0-9.]+):(\d+) accepts nodes from any host "
                         r"and no token is set")
HTTP_WARN_RE = re.compile(r"psbench-master: warn: HTTP port ([0-9.]+):(\d+) .*run's metrics")
SRV_WARN_RE = re.compile(r"psbench-server: warn: data port ([0-9.]+):(\d+) accepts trainers from any host "
                         r"and no token is set")


def args_line(text):
    """The master's `args: {...}` line, parsed."""
    m = re.search(r"^args: (\{.*\})$", text, re.M)
    assert m, "no args line in:\n" + text
    return json.loads(m.group(1))


class JoinTests(psb.PsbTestCase):

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        d = self.reg.workdir
        self.model_cfg = os.path.join(d, "models.json")
        with open(self.model_cfg, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 3, "bucket_floats": 2000,
                                                   "sparse": False}}}, f)
        self.tok = self.token_file("token", TOKEN + "\n")
        self.wrong = self.token_file("wrong", WRONG + "\n")

    def token_file(self, name, text, mode=0o600):
        p = os.path.join(self.reg.workdir, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)
        return p

    def job_args(self, *extra):
        return [psb.bin_path("psbench-master"), "--model", "Tiny", "--model-config-path",
                self.model_cfg, "--epochs", "1", "--rpc-timeout", "15"] + list(extra)

    def start_job_master(self, *extra, env=None):
        m = self.reg.start(self.job_args(*extra), env=env, name="master", cls=Master)
        m.wait_ports()
        # The warnings come right after the ports, before the "job:" line.
        deadline = time.monotonic() + 10
        while "psbench-master: job:" not in m.stderr():
            self.assertTrue(m.alive() and time.monotonic() < deadline, m.describe())
            time.sleep(0.02)
        return m

    def assert_no_token(self, where, text, token=TOKEN):
        self.assertNotIn(token, text, "the token shows in %s" % where)

    # ---- where the master listens ------------------------------------------

    def test_local_defaults_to_loopback(self):
        rc, out, err = self.reg.run(self.job_args("--local", "--master-port", "0", "--linger", "0"),
                                    timeout=120)
        a = args_line(out)
        self.assertEqual(a["listen"], "127.0.0.1:0")
        self.assertEqual(a["http"], "127.0.0.1:8080")
        self.assertIsNone(CTL_WARN_RE.search(err), err)
        self.assertIsNone(HTTP_WARN_RE.search(err), err)
        self.assertNotIn("warn: data port", err + out)
        if rc != 0 and "8080" in err and "in use" in err:
            sys.stderr.write("test_local_defaults_to_loopback: 127.0.0.1:8080 is busy; skipping the "
                             "HTTP bind check\n")
            self.assertRegex(err, r"control plane on 127\.0\.0\.1:\d+")
            return
        self.assertEqual(rc, 0, err[-3000:])
        self.assertRegex(err, r"control plane on 127\.0\.0\.1:\d+")
        # 8080 taken (another master on a shared host): --local takes a
        # free port instead, on loopback still, and says so.
        taken = re.search(r"psbench-master: warn: HTTP port 8080 on 127\.0\.0\.1 is taken: using (\d+) "
                          r"instead", err)
        self.assertIn("HTTP on http://127.0.0.1:%s/" % (taken.group(1) if taken else "8080"), err)
        # The spawned server listens on loopback too.
        self.assertRegex(err, r"\[server 0\] psbench-server: listening on 127\.0\.0\.1:\d+")

    def test_not_local_keeps_wildcard(self):
        """Without --local nodes come from other hosts: the control port
        stays on 0.0.0.0 (and, without a token, warns: one line, naming the
        bound port); an HTTP port on loopback does not warn."""
        m = self.start_job_master("--master-port", "0", "--http", "127.0.0.1:0", "--linger", "0")
        a = args_line(m.stdout())
        self.assertEqual(a["listen"], "0.0.0.0:0")
        err = m.stderr()
        ctl = CTL_WARN_RE.findall(err)
        self.assertEqual(ctl, [("0.0.0.0", m.ctl.split(":")[1])], err)
        self.assertIsNone(HTTP_WARN_RE.search(err), err)

    # ---- the warning ----------------------------------------------------------

    def test_master_warns_beyond_loopback_without_token(self):
        m = self.start_job_master("--listen", "0.0.0.0:0", "--http", "0.0.0.0:0", "--linger", "0")
        err = m.stderr()
        self.assertEqual(CTL_WARN_RE.findall(err), [("0.0.0.0", m.ctl.split(":")[1])], err)
        self.assertEqual(HTTP_WARN_RE.findall(err), [("0.0.0.0", m.http.rsplit(":", 1)[1])], err)
        self.assertEqual(len([l for l in err.splitlines() if ": warn: " in l]), 2, err)

    def test_master_with_token_does_not_warn(self):
        m = self.start_job_master("--listen", "0.0.0.0:0", "--http", "0.0.0.0:0", "--linger", "0",
                              "--token-file", self.tok)
        err = m.stderr()
        self.assertIsNone(CTL_WARN_RE.search(err), err)
        self.assertIsNone(HTTP_WARN_RE.search(err), err)
        self.assertNotIn(": warn: ", err)
        self.assertTrue(args_line(m.stdout())["auth"])
        # The token from the environment counts as well.
        env = psb.base_env({"PSBENCH_TOKEN": TOKEN})
        m2 = self.start_job_master("--listen", "0.0.0.0:0", "--http", "0.0.0.0:0", "--linger", "0", env=env)
        self.assertNotIn(": warn: ", m2.stderr())
        for p in (m, m2):
            self.assert_no_token(p.name, p.stdout() + p.stderr())

    def test_token_file_readable_by_others_warns(self):
        loose = self.token_file("loose", TOKEN + "\n", mode=0o644)
        m = self.start_job_master("--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--linger", "0",
                              "--token-file", loose)
        warns = [l for l in m.stderr().splitlines() if ": warn: " in l]
        self.assertEqual(len(warns), 1, m.stderr())
        self.assertIn(loose, warns[0])
        self.assertIn("chmod 600", warns[0])

    def test_server_warns_beyond_loopback_without_token(self):
        s = self.reg.server(trainers=1, listen="0.0.0.0:0")
        err = s.stderr()
        self.assertEqual(SRV_WARN_RE.findall(err), [("0.0.0.0", str(s.port))], err)
        s2 = self.reg.server(trainers=1, listen="127.0.0.1:0")
        self.assertNotIn("warn", s2.stderr())
        s3 = self.reg.server(trainers=1, listen="0.0.0.0:0", extra=("--token-file", self.tok))
        self.assertNotIn("warn", s3.stderr())
        # A trainer with the token from its own file is served.
        t = self.reg.trainer(s3, 0, extra=("--token-file", self.tok))
        self.assertEqual(t.wait(30), 0, t.describe())
        rc, out, err = s3.terminate_and_wait()
        self.assertEqual(rc, 0, err)
        for p in (s3, t):
            self.assert_no_token(p.name, p.stdout() + p.stderr())

    # ---- --token-file ------------------------------------------------------------

    def test_token_file_errors(self):
        empty = self.token_file("empty", "")
        blank = self.token_file("blank", "\n\nsecond-line\n")
        missing = os.path.join(self.reg.workdir, "missing")
        cmds = {
            "psbench-master": self.job_args("--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"),
            "psbench-server": [psb.bin_path("psbench-server"), "--standalone", "--trainers", "1",
                               "--listen", "127.0.0.1:0"],
            "psbench-trainer": [psb.bin_path("psbench-trainer"), "--master", "127.0.0.1:1"],
        }
        for prog, base in cmds.items():
            for path in (empty, blank, missing):
                rc, out, err = self.reg.run(base + ["--token-file", path], timeout=20)
                self.assertNotEqual(rc, 0, (prog, path, out, err))
                lines = err.strip().splitlines()
                self.assertEqual(len(lines), 1, (prog, path, err))
                self.assertTrue(lines[0].startswith(prog + ": --token-file " + path), (prog, err))
            rc, out, err = self.reg.run([psb.bin_path(prog), "--help"])
            self.assertEqual(rc, 0)
            self.assertIn("--token-file FILE", out)

    def test_token_file_run_and_refusals(self):
        """Master, server and trainers take the token from a file; the file
        beats PSBENCH_TOKEN (the master's environment holds another one),
        --token beats the file; a wrong token is refused. The token shows
        nowhere: output at debug level, results.json, the HTTP API."""
        out_dir = os.path.join(self.reg.workdir, "out")
        env = psb.base_env({"PSBENCH_TOKEN": "env-token-unused"})
        m = self.start_job_master("--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--linger", str(psb.LINGER_S),
                              "--token-file", self.tok, "--out", out_dir, "--log-level", "debug", env=env)
        # Refused: a wrong token in the file; the environment's token (the
        # file wins on the master); --token over a right file.
        for name, extra, penv in (
                ("wrongfile", ["--token-file", self.wrong], None),
                ("envtoken", [], psb.base_env({"PSBENCH_TOKEN": "env-token-unused"})),
                ("flagwins", ["--token", WRONG, "--token-file", self.tok], None)):
            rc, out, err = self.reg.run([psb.bin_path("psbench-trainer"), "--master", m.ctl,
                                         "--log-level", "debug"] + extra, timeout=30, env=penv)
            self.assertNotEqual(rc, 0, (name, err))
            self.assertIn("token", err, (name, err))
            self.assert_no_token(name, out + err)
            self.assert_no_token(name, out + err, WRONG)
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0",
                              "--token-file", self.tok, "--log-level", "debug"], name="server",
                             cls=psb.Server)
        trs = [self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--token-file", self.tok,
                               "--log-level", "debug"], name="trainer%d" % i) for i in range(2)]
        st = self.wait_phase(m, ("done", "failed"))
        self.assertEqual(st["phase"], "done", m.describe())
        for p in trs + [srv]:
            self.assertEqual(p.wait(60), 0, p.describe())
        bodies = {}
        for path in ("/api/v1/status", "/api/v1/nodes", "/api/v1/metrics", "/metrics", "/"):
            code, _, body = http_get(m.http + path)
            self.assertEqual(code, 200, path)
            bodies[path] = body
        with open(os.path.join(out_dir, "results.json")) as f:
            results = f.read()
        self.assertIs(json.loads(results)["configuration"]["auth"], True)
        m.stop()
        for where, text in list(bodies.items()) + [("results.json", results)]:
            self.assert_no_token(where, text)
        for name in os.listdir(out_dir):
            with open(os.path.join(out_dir, name), errors="replace") as f:
                self.assert_no_token(name, f.read())
        for p in [m, srv] + trs:
            self.assert_no_token(p.name, p.stdout() + p.stderr())
            self.assert_no_token(p.name, p.stdout() + p.stderr(), WRONG)
            self.assertNotIn("env-token-unused", p.stdout() + p.stderr())

    # ---- --rank: what was asked for, or a refusal ---------------------------------

    def nodes(self, m):
        code, _, body = http_get(m.http + "/api/v1/nodes")
        self.assertEqual(code, 200, body)
        return json.loads(body)

    def wait_node(self, m, role, rank, timeout=30):
        """The node `role` `rank` once it is registered (nodes API)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in self.nodes(m):
                if n["role"] == role and n["rank"] == rank:
                    return n
            time.sleep(0.05)
        self.fail("%s %d never registered:\n%s" % (role, rank, m.describe()))

    def node_refused(self, m, role, rank, why_re):
        """A node of `role` asking for `rank` exits non-zero, its last line
        the master's refusal matching why_re."""
        rc, out, err = self.reg.run([psb.bin_path("psbench-" + role), "--master", m.ctl, "--rank", str(rank)]
                                    + (["--listen", "127.0.0.1:0"] if role == "server" else []), timeout=30)
        self.assertNotEqual(rc, 0, err)
        last = err.strip().splitlines()[-1]
        self.assertTrue(last.startswith("psbench-%s: the master refused this %s: " % (role, role)), err)
        self.assertRegex(last, why_re)
        return last

    def test_rank_taken_or_outside_is_refused(self):
        """A second `--rank 0` is refused naming the node that holds rank 0
        (which keeps it); the real rank 1 then joins and the run completes.
        `--rank 7` in a 2-trainer job, and a server rank beyond the job's
        servers, are refused as outside the job's ranks, and the run is not
        disturbed."""
        out_dir = os.path.join(self.reg.workdir, "out")
        m = self.start_job_master("--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--linger", str(psb.LINGER_S),
                              "--ntrainer", "2", "--nserver", "1", "--out", out_dir)
        srv = self.reg.start([psb.bin_path("psbench-server"), "--master", m.ctl, "--listen", "127.0.0.1:0",
                              "--rank", "0"], name="server", cls=psb.Server)
        self.wait_node(m, "server", 0)
        self.node_refused(m, "server", 0, r"server rank 0 is taken \(by the server on \S+, pid %d\)$" % srv.pid)
        self.node_refused(m, "server", 1, r"--rank 1 is outside 0\.\.0 \(this job has 1 server\)$")
        t0 = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", "0"], name="trainer0")
        first = self.wait_node(m, "trainer", 0)
        self.node_refused(m, "trainer", 0, r"trainer rank 0 is taken \(by the trainer on %s, pid %d\)$"
                     % (re.escape(first["host"]), t0.pid))
        self.node_refused(m, "trainer", 7, r"--rank 7 is outside 0\.\.1 \(this job has 2 trainers\)$")
        # The first keeps rank 0; the refused ones took no slot.
        trainers = [n for n in self.nodes(m) if n["role"] == "trainer"]
        self.assertEqual([n["rank"] for n in trainers], [0], trainers)
        self.assertEqual(json.loads(http_get(m.http + "/api/v1/status")[2])["phase"], "waiting")
        t1 = self.reg.start([psb.bin_path("psbench-trainer"), "--master", m.ctl, "--rank", "1"], name="trainer1")
        st = self.wait_phase(m, ("done", "failed"))
        self.assertEqual(st["phase"], "done", m.describe())
        for p in (t0, t1, srv):
            self.assertEqual(p.wait(60), 0, p.describe())
        with open(os.path.join(out_dir, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done")
        self.assertEqual([t["rank"] for t in res["trainers"]], [0, 1])
        m.stop()

    def test_local_run_with_token_file(self):
        """--local hands the token to its nodes (through the environment,
        never their command line): the run completes; at debug level the
        token shows nowhere in the relayed output."""
        out_dir = os.path.join(self.reg.workdir, "out")
        rc, out, err = self.reg.run(self.job_args("--local", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                                                  "--linger", "0", "--token-file", self.tok, "--out", out_dir,
                                                  "--log-level", "debug"), timeout=120)
        self.assertEqual(rc, 0, err[-3000:])
        self.assertIn("[trainer 1]", out + err)
        self.assert_no_token("master output", out + err)
        for name in os.listdir(out_dir):
            with open(os.path.join(out_dir, name), errors="replace") as f:
                self.assert_no_token(name, f.read())


if __name__ == "__main__":
    psb.main()
