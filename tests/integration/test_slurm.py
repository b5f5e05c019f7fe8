"""Launch under Slurm: configs/slurm/psbench.sbatch and scripts/psbench-slurm.

LauncherTests run psbench-slurm with a made-up Slurm environment and stand-in
binaries (scripts that print their arguments): --help, the one-line errors
(not under Slurm, not in a step, too few tasks, refused options) and the
role, rank and flags each task gets. They need no Slurm.

SlurmTests bring up a real single-host Slurm under a temporary directory —
munged with its own key and socket, slurmctld and slurmd in the foreground
as children of this test, a generated slurm.conf (private ports, state,
spool, logs and pid files in the directory; SLURM_CONF points every Slurm
command at it) — and submit psbench.sbatch: each job runs a whole psbench
job (master, servers, trainers from one srun) to results.json. Every
daemon and every process of the test's cluster is stopped and the
directory removed on every exit path (tearDownClass, atexit, SIGTERM and
SIGHUP through psb.main's handler). Where Slurm cannot start (not root, a
binary missing, munged or a daemon failing, the node never idle) the tests
are skipped with the reason.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_slurm.py
"""
import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

REPO = os.path.abspath(os.path.join(psb.HERE, "..", ".."))
LAUNCHER = os.path.join(REPO, "scripts", "psbench-slurm")
SBATCH_SCRIPT = os.path.join(REPO, "configs", "slurm", "psbench.sbatch")
# deploy/'s sbatch script: plain srun psbench-node, no wrapper (issue 40).
NODE_SBATCH = os.path.join(REPO, "deploy", "slurm", "psbench-node.sbatch")
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "squeue",
               "scancel")
START_TIMEOUT = 30   # munged, slurmctld, slurmd up and the node idle
JOB_TIMEOUT = 90     # one psbench job, submission to end
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-n:]
    except OSError as e:
        return "(%s)" % e


# ---- psbench-slurm without Slurm -------------------------------------------

FAKE_BIN = """#!/bin/sh
# Stand-in for %s: prints its name and arguments, one per line.
echo %s
for a in "$@"; do echo "$a"; done
"""


class LauncherTests(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="psbench-slurm-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.bin = os.path.join(self.tmp, "bin")
        os.mkdir(self.bin)
        for b in ("psbench-master", "psbench-server", "psbench-trainer"):
            p = os.path.join(self.bin, b)
            with open(p, "w") as f:
                f.write(FAKE_BIN % (b, b))
            os.chmod(p, 0o755)

    def launch(self, args=(), env=None):
        r = subprocess.run([LAUNCHER] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=psb.launcher_free_env(env), timeout=20)
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def task(self, procid, ntasks, args=(), env=None):
        """The launcher as task `procid` of `ntasks` on nodes n1,n2 (task 0
        on n1); returns (rc, [exec'd program, args...], stderr)."""
        e = {"SLURM_PROCID": str(procid), "SLURM_NTASKS": str(ntasks), "SLURM_STEP_ID": "0",
             "SLURM_STEP_NODELIST": "n1,n2", "SLURMD_NODENAME": "n1" if procid == 0 else "n2",
             "PSBENCH_BIN_DIR": self.bin}
        e.update(env or {})
        rc, out, err = self.launch(args, e)
        return rc, out.splitlines(), err

    def assert_error(self, rc, err, *words):
        self.assertEqual(rc, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("psbench-slurm: "), err)
        for w in words:
            self.assertIn(w, lines[0])

    def test_help(self):
        rc, out, err = self.launch(["--help"])
        self.assertEqual(rc, 0, err)
        for w in ("usage: srun psbench-slurm", "SLURM_NTASKS", "PSBENCH_NSERVER", "PSBENCH_PORT",
                  "psbench.sbatch"):
            self.assertIn(w, out)

    def test_not_under_slurm(self):
        rc, out, err = self.launch()
        self.assert_error(rc, err, "not under Slurm", "srun")
        # The batch script itself (no step): not a role either.
        rc, out, err = self.launch(env={"SLURM_PROCID": "0", "SLURM_NTASKS": "4"})
        self.assert_error(rc, err, "not in a job step", "srun")

    def test_too_few_tasks(self):
        rc, out, err = self.task(0, 2)
        self.assert_error(rc, err, "SLURM_NTASKS=2 is too small", "--ntasks=3")
        rc, out, err = self.task(0, 4, env={"PSBENCH_NSERVER": "3"})
        self.assert_error(rc, err, "SLURM_NTASKS=4 is too small", "3 server(s)", "--ntasks=5")
        rc, out, err = self.task(0, 4, ["--nserver", "4"])
        self.assert_error(rc, err, "too small", "--nserver", "--ntasks=6")

    def test_refused_options(self):
        for args, words in ((["--local"], ("--local",)),
                            (["--listen", "0.0.0.0:1"], ("--listen", "PSBENCH_PORT")),
                            (["--master_port", "1"], ("--master-port",)),
                            (["--ncudatrainer", "1"], ("--ncudatrainer", "CPU")),
                            (["--ntrainer", "5"], ("--ntrainer 5", "room for 2 trainer(s)")),
                            (["--nserver", "x"], ("not a count",))):
            rc, out, err = self.task(0, 4, args)
            self.assert_error(rc, err, *words)
        rc, out, err = self.task(0, 4, env={"PSBENCH_PORT": "70000"})
        self.assert_error(rc, err, "PSBENCH_PORT")
        rc, out, err = self.task(0, 4, env={"PSBENCH_BIN_DIR": os.path.join(self.tmp, "none")})
        self.assert_error(rc, err, "psbench-master not found")
        # Task 0 elsewhere than the first node: the others would not find it.
        rc, out, err = self.task(0, 4, env={"SLURMD_NODENAME": "n2"})
        self.assert_error(rc, err, "task 0", "n2", "n1")

    def test_binaries_beside_launcher(self):
        """Installed, psbench-slurm sits in bin/ with the binaries: it takes
        those (not PATH's) without PSBENCH_BIN_DIR."""
        shutil.copy(LAUNCHER, self.bin)
        e = {"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n1",
             "PATH": "/usr/bin:/bin"}
        r = subprocess.run([os.path.join(self.bin, "psbench-slurm")], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=psb.launcher_free_env(e), timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().splitlines(), ["psbench-server", "--master", "n1:29500", "--rank", "0"])

    def test_node_list_without_scontrol(self):
        """Where scontrol is not on PATH, a ranged node list is expanded by
        psbench-node --print-hostnames (the rules scontrol has: zero
        padding kept), found in PSBENCH_BIN_DIR; without either, one line."""
        path = os.path.join(self.tmp, "path")
        os.mkdir(path)
        for tool in ("bash", "dirname", "head", "tr", "cat"):
            os.symlink(shutil.which(tool), os.path.join(path, tool))
        e = {"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_STEP_ID": "0",
             "SLURM_STEP_NODELIST": "node[07-08,10]", "PATH": path, "PSBENCH_BIN_DIR": self.bin}
        rc, out, err = self.launch(env=e)
        self.assert_error(rc, err, "cannot expand the node list 'node[07-08,10]'", "psbench-node")
        os.symlink(psb.bin_path("psbench-node"), os.path.join(self.bin, "psbench-node"))
        rc, out, err = self.launch(env=e)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(), ["psbench-server", "--master", "node07:29500", "--rank", "0"])

    def test_roles(self):
        """1 master, 2 servers, 2 trainers: the program, ranks and flags of each task."""
        env = {"PSBENCH_NSERVER": "2", "PSBENCH_PORT": "29555", "PSBENCH_HTTP_PORT": "8555",
               "PSBENCH_TOKEN_FILE": "/some/token", "PSBENCH_TRAINER_ARGS": "--log-level debug"}
        args = ["--model", "Tiny", "--epochs=1"]
        rc, out, err = self.task(0, 5, args, env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, ["psbench-master", "--listen", "0.0.0.0:29555", "--http", "0.0.0.0:8555",
                               "--nserver", "2", "--ntrainer", "2", "--token-file", "/some/token",
                               "--model", "Tiny", "--epochs=1"])
        self.assertIn("master on n1:29555", err)
        for procid, want in ((1, ["psbench-server", "--master", "n1:29555", "--rank", "0"]),
                             (2, ["psbench-server", "--master", "n1:29555", "--rank", "1"]),
                             (3, ["psbench-trainer", "--master", "n1:29555", "--rank", "0"]),
                             (4, ["psbench-trainer", "--master", "n1:29555", "--rank", "1"])):
            rc, out, err = self.task(procid, 5, args, env)
            self.assertEqual(rc, 0, err)
            extra = ["--log-level", "debug"] if want[0] == "psbench-trainer" else []
            self.assertEqual(out, want + ["--token-file", "/some/token"] + extra, procid)
        # --nserver / --number-ps on the command line beat PSBENCH_NSERVER and
        # pass through as given; a matching --ntrainer is accepted.
        rc, out, err = self.task(0, 5, ["--nserver=1", "--ntrainer", "3"], env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out[5:], ["--token-file", "/some/token", "--nserver", "1", "--ntrainer", "3"])
        rc, out, err = self.task(1, 5, ["--number_ps", "0"])
        self.assertEqual(out[:1], ["psbench-trainer"], err)
        # PSBENCH_MASTER_ADDR replaces the first node's name.
        rc, out, err = self.task(3, 5, [], {"PSBENCH_MASTER_ADDR": "10.0.0.7"})
        self.assertEqual(out[:3], ["psbench-trainer", "--master", "10.0.0.7:29500"], err)


# ---- a real single-host Slurm -----------------------------------------------

SLURM_CONF = """# slurm.conf of test_slurm.py's private single-host cluster.
ClusterName=psbtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=psb Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


class Cluster(object):
    """munged, slurmctld and slurmd in a temporary directory. start() raises
    unittest.SkipTest naming what failed; stop() is idempotent and runs on
    every exit path."""

    def __init__(self):
        self.dir = None
        self.procs = {}
        self.stopped = False

    # -- start -------------------------------------------------------------
    def start(self):
        if os.geteuid() != 0:
            raise unittest.SkipTest("a private Slurm needs root (slurmd runs jobs as their user)")
        missing = [t for t in SLURM_TOOLS if not shutil.which(t, path=os.environ.get("PATH", "") +
                                                             ":/usr/sbin:/sbin")]
        if missing:
            raise unittest.SkipTest("Slurm/munge not installed (missing %s: Debian packages slurm-wlm "
                                    "and munge)" % ", ".join(missing))
        self.dir = tempfile.mkdtemp(prefix="psbench-slurm-")
        os.chmod(self.dir, 0o755)  # munged wants its socket's directories searchable by all
        atexit.register(self.stop)
        for d in ("state", "spool", "run", "log", "munge", "job"):
            os.mkdir(os.path.join(self.dir, d), 0o755)
        self.host = socket.gethostname().split(".")[0]
        try:
            socket.gethostbyname(self.host)
            self.master_addr = None
        except OSError:
            self.master_addr = "127.0.0.1"  # the node's name does not resolve: reach it by address
        self.start_munged()
        self.conf = os.path.join(self.dir, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(host=self.host, ctld_port=psb.free_port(""), slurmd_port=psb.free_port(""),
                                      munge_socket=self.munge_socket, dir=self.dir,
                                      cpus=os.cpu_count() or 1))
        self.env = psb.launcher_free_env({"SLURM_CONF": self.conf})
        self.env["PATH"] = self.env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
        self.spawn("slurmctld", ["slurmctld", "-D", "-c"])
        self.spawn("slurmd", ["slurmd", "-D", "-N", self.host])
        deadline = time.monotonic() + START_TIMEOUT
        state = ""
        while time.monotonic() < deadline:
            for name in ("slurmctld", "slurmd"):
                if self.procs[name].poll() is not None:
                    self.skip("%s exited (rc %s)" % (name, self.procs[name].returncode))
            r = self.run(["sinfo", "-h", "-N", "-n", self.host, "-o", "%T"], check=False)
            state = r.stdout.strip()
            if state == "idle":
                return
            time.sleep(0.3)
        self.skip("node %s never became idle (sinfo: %r)" % (self.host, state))

    def start_munged(self):
        keydir = os.path.join(self.dir, "munge-key")
        os.mkdir(keydir, 0o700)
        key = os.path.join(keydir, "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.write(fd, os.urandom(1024))
        os.close(fd)
        m = os.path.join(self.dir, "munge")
        self.munge_socket = os.path.join(m, "munge.socket")
        self.spawn("munged", ["munged", "--foreground", "--socket=" + self.munge_socket,
                              "--key-file=" + key, "--pid-file=" + os.path.join(m, "munged.pid"),
                              "--log-file=" + os.path.join(m, "munged.log"),
                              "--seed-file=" + os.path.join(m, "munged.seed")], env=psb.launcher_free_env())
        deadline = time.monotonic() + START_TIMEOUT
        while not os.path.exists(self.munge_socket):
            if self.procs["munged"].poll() is not None or time.monotonic() > deadline:
                self.skip("munged did not start")
            time.sleep(0.05)

    def spawn(self, name, args, env=None):
        out = open(os.path.join(self.dir, "log", name + ".out"), "wb")
        try:
            self.procs[name] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT, env=env or self.env,
                                                cwd=self.dir, preexec_fn=psb._die_with_parent)
        except OSError as e:
            self.skip("cannot start %s: %s" % (name, e))
        finally:
            out.close()

    def logs(self):
        """The output of the daemons started so far, with their exit codes."""
        return "\n".join("--- %s (%s) ---\n%s" % (
            n, "running" if p.poll() is None else "rc %s" % p.returncode,
            tail(os.path.join(self.dir, "log", n + ".out"), 1500)) for n, p in self.procs.items())

    def skip(self, why):
        text = "single-host Slurm did not start: %s\n%s" % (why, self.logs())
        self.stop()
        raise unittest.SkipTest(text)

    def run(self, args, check=True, timeout=30, env=None):
        r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=env or self.env, timeout=timeout,
                           universal_newlines=True)
        if check and r.returncode != 0:
            raise AssertionError("%s: rc %d\n%s" % (" ".join(args), r.returncode, r.stdout))
        return r

    # -- jobs -------------------------------------------------------------------
    def job_state(self, jobid):
        r = self.run(["scontrol", "show", "job", "-o", jobid], check=False)
        m = re.search(r"\bJobState=(\S+)", r.stdout)
        e = re.search(r"\bExitCode=(\d+):(\d+)", r.stdout)
        return (m.group(1) if m else None), (int(e.group(1)) if e else None), r.stdout

    def sbatch(self, sbatch_args, script_args, env, script=SBATCH_SCRIPT):
        """Submit psbench.sbatch (or script); wait for the end. Returns
        (state, exit code, output)."""
        r = self.run(["sbatch", "--parsable"] + sbatch_args + [script] + script_args, env=env)
        jobid = r.stdout.strip().split(";")[0]
        deadline = time.monotonic() + JOB_TIMEOUT
        state, code, info = None, None, ""
        while time.monotonic() < deadline:
            state, code, info = self.job_state(jobid)
            if state in TERMINAL:
                break
            time.sleep(0.3)
        else:
            self.run(["scancel", jobid], check=False)
            raise AssertionError("job %s not done within %d s (state %s):\n%s\n%s" %
                                 (jobid, JOB_TIMEOUT, state, info, self.logs()))
        out = re.search(r"\bStdOut=(\S+)", info)
        return jobid, state, code, tail(out.group(1), 20000) if out else "(no StdOut in %s)" % info

    # -- stop -------------------------------------------------------------------
    def own_pids(self):
        """Processes of this cluster: every one whose environment names our
        slurm.conf (slurmstepd, the job's tasks, daemons), but not us."""
        needle = ("SLURM_CONF=%s\0" % self.conf).encode()
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % p, "rb") as f:
                    if needle in f.read() + b"\0":
                        pids.append(int(p))
            except OSError:
                pass
        return pids

    def stop(self):
        if self.stopped or self.dir is None:
            return
        self.stopped = True
        conf = getattr(self, "conf", None)
        ctld = self.procs.get("slurmctld")
        if conf and ctld is not None and ctld.poll() is None:
            # Jobs first, so that slurmd ends their steps.
            try:
                r = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10)
                ids = r.stdout.split()
                if ids:
                    self.run(["scancel"] + ids, check=False, timeout=10)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and self.run(
                            ["squeue", "-h", "-o", "%i"], check=False, timeout=10).stdout.strip():
                        time.sleep(0.2)
            except (subprocess.SubprocessError, OSError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=psb.STOP_GRACE)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if conf:
            left = self.own_pids()
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in left:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
                deadline = time.monotonic() + psb.STOP_GRACE
                while left and time.monotonic() < deadline:
                    left = [p for p in left if os.path.exists("/proc/%d" % p) and
                            not _zombie(p)]
                    time.sleep(0.1)
                if not left:
                    break
        shutil.rmtree(self.dir, ignore_errors=True)


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class SlurmTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        signal.signal(signal.SIGHUP, lambda s, f: sys.exit(128 + s))
        cls.cluster = Cluster()
        try:
            cls.cluster.start()
        except BaseException:
            cls.cluster.stop()
            raise
        c = cls.cluster
        cls.model_cfg = os.path.join(c.dir, "job", "models.json")
        with open(cls.model_cfg, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 3, "bucket_floats": 2000,
                                                   "sparse": False}}}, f)
        # The job finds psbench-slurm and the binaries on PATH, as installed.
        dirs = []
        for b in ("psbench-master", "psbench-server", "psbench-trainer"):
            d = os.path.dirname(psb.bin_path(b))
            if d not in dirs:
                dirs.append(d)
        cls.path = ":".join(dirs + [os.path.dirname(LAUNCHER), c.env["PATH"]])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def job(self, ntasks, script_args, env=None, script=SBATCH_SCRIPT, sbatch_extra=()):
        c = self.cluster
        e = dict(c.env)
        e.update({"PATH": self.path, "PSBENCH_PORT": str(psb.free_port("")),
                  "PSBENCH_HTTP_PORT": str(psb.free_port(""))})
        if c.master_addr:
            e["PSBENCH_MASTER_ADDR"] = c.master_addr
        e.update(env or {})
        workdir = os.path.join(c.dir, "job")
        sb = ["--nodes=1", "--ntasks=%d" % ntasks, "--overcommit", "--chdir=" + workdir,
              "--output=" + os.path.join(workdir, "slurm-%j.out")] + list(sbatch_extra)
        args = ["--model", "Tiny", "--model-config-path", self.model_cfg, "--epochs", "1",
                "--rpc-timeout", "15"] + list(script_args)
        jobid, state, code, out = c.sbatch(sb, args, e, script)
        self.assertIsNone(psb.sanitizer_report(out), out)
        return jobid, state, code, out, e

    def check_job(self, path, ntrainer, nserver, port):
        with open(path) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done", res.get("error"))
        self.assertEqual([t["rank"] for t in res["trainers"]], list(range(ntrainer)))
        self.assertEqual(sorted(res["groups"]["server"]["ranks"]), [str(i) for i in range(nserver)])
        conf = res["configuration"]
        self.assertEqual((conf["ntrainer"], conf["nserver"]), (ntrainer, nserver))
        self.assertEqual(conf["listen"], "0.0.0.0:%s" % port)
        self.assertIs(conf["auth"], True)  # the job's token
        return res

    def test_default_job(self):
        """4 tasks: master, 1 server, 2 trainers; the sbatch script's random
        token (no warning about open ports) and its default --out."""
        jobid, state, code, out, env = self.job(4, [])
        self.assertEqual((state, code), ("COMPLETED", 0), out)
        self.assertIn("0: psbench-slurm: task 0 of 4: master on ", out)
        self.assertRegex(out, r"(?m)^1: psbench-server: joined master \S+ as server 0")
        self.assertRegex(out, r"(?m)^3: psbench-trainer: trainer 1: ")
        self.assertNotIn(": warn: ", out)  # every port has the token
        self.check_job(os.path.join(self.cluster.dir, "job", "psbench-%s" % jobid, "results.json"),
                           2, 1, env["PSBENCH_PORT"])

    def test_two_servers_token_file(self):
        """--nserver 2 through the script, 5 tasks (2 trainers), shard
        placement; the token from PSBENCH_TOKEN_FILE, shown nowhere."""
        token = "slurm-test-token-%d" % os.getpid()
        tok = os.path.join(self.cluster.dir, "job", "token")
        fd = os.open(tok, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (token + "\n").encode())
        os.close(fd)
        outdir = os.path.join(self.cluster.dir, "job", "two")
        jobid, state, code, out, env = self.job(5, ["--nserver", "2", "--placement", "shard", "--out", outdir],
                                                {"PSBENCH_TOKEN_FILE": tok})
        self.assertEqual((state, code), ("COMPLETED", 0), out)
        self.assertRegex(out, r"(?m)^2: psbench-server: joined master \S+ as server 1")
        self.assertNotIn(": warn: ", out)
        self.assertNotIn(token, out)
        res = self.check_job(os.path.join(outdir, "results.json"), 2, 2, env["PSBENCH_PORT"])
        self.assertEqual(res["configuration"]["placement"], "shard")
        with open(os.path.join(outdir, "results.json")) as f:
            self.assertNotIn(token, f.read())

    def test_deploy_sbatch_plain_srun(self):
        """deploy/slurm/psbench-node.sbatch: one srun line of psbench-node
        itself; task 0 the master (--master-rank 0), tasks 1 and 2 the
        trainers, 3 the server, each from srun's variables; its random
        token, its default --out."""
        # This one-node cluster has no memory to give (RealMemory 1 MB)
        # and 1 or 2 CPUs: the script's requests are lowered here.
        jobid, state, code, out, env = self.job(4, [], script=NODE_SBATCH,
                                                sbatch_extra=["--mem-per-cpu=1", "--cpus-per-task=1"])
        self.assertEqual((state, code), ("COMPLETED", 0), out)
        self.assertRegex(out, r"(?m)^0: psbench-node: slurm: rank 0 of 4 \(SLURM_PROCID, SLURM_NTASKS\).*: the master")
        self.assertRegex(out, r"(?m)^1: psbench-node: slurm: rank 1 of 4 .*: trainer 0$")
        self.assertRegex(out, r"(?m)^3: psbench-node: slurm: rank 3 of 4 .*: server 0$")
        self.assertNotIn("psbench-slurm: ", out)  # no wrapper
        self.assertNotIn(": warn: ", out)  # every port has the token
        res = self.check_job(os.path.join(self.cluster.dir, "job", "psbench-%s" % jobid, "results.json"),
                                 2, 1, env["PSBENCH_PORT"])
        self.assertEqual(res["launcher"]["name"], "slurm")

    def test_too_few_tasks(self):
        """2 tasks cannot hold a master, a server and a trainer: the job
        fails at once with the launcher's reason."""
        jobid, state, code, out, env = self.job(2, [])
        self.assertEqual(state, "FAILED", out)
        self.assertNotEqual(code, 0, out)
        self.assertIn("psbench-slurm: SLURM_NTASKS=2 is too small", out)


if __name__ == "__main__":
    psb.main()
