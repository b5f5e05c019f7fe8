"""psbench-node: one command for every rank of a launcher (issue 40).

Each test starts the ranks of one world as a launcher would — the same
psbench-node command line, the environment torchrun (or srun) sets, one
process per rank — and checks what every rank did: the whole job runs and
every rank exits 0, results.json names the launcher and its variables; a
rank started twice is refused while the other runs; a rank missing until
the join timeout, or killed during the run, ends every rank non-zero; a
rank restarted while the master waits is taken, one that comes after the
run failed is told why (the master lingering). The
real torchrun runs where /usr/bin/python3 has torch (skipped otherwise).
Every process a test starts is stopped on every exit path (psb.Registry).

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_node.py
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

WAIT = 120  # a rank's end: the job (epochs 1) or a failure's propagation
# What a caller's environment could hold that would change the place.
PLACE_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RUN_ID", "JOB_COMPLETION_INDEX", "PSBENCH_LAUNCHER", "PSBENCH_BIN_DIR")


def node_env(extra):
    env = psb.base_env()
    for k in list(env):
        if k in PLACE_VARS or k.startswith(("SLURM_", "PSBENCH_RANK", "PSBENCH_WORLD", "PSBENCH_LOCAL",
                                            "PSBENCH_MASTER", "PSBENCH_PORT", "PSBENCH_HTTP")):
            del env[k]
    env.update(extra)
    return env


def torchrun_env(rank, world, port):
    """What torchrun sets for a rank of one node (its store on port)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
            "ROLE_RANK": str(rank), "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"}


def srun_env(rank, world, port):
    """What srun sets for task `rank` of `world` on this one node."""
    return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_LOCALID": str(rank),
            "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_ID": "0",
            "PSBENCH_PORT": str(port + 1), "PSBENCH_HTTP_PORT": str(port + 2)}


JOB = ["--ntrainer", "2", "--nserver", "1", "--log-level", "warn"]


class NodeTests(unittest.TestCase):

    def setUp(self):
        self.reg = psb.Registry()
        self.addCleanup(self.reg.stop_all)
        self.node = psb.bin_path("psbench-node")
        self.out = os.path.join(self.reg.workdir, "out")

    def start(self, env, args, name):
        return self.reg.start([self.node] + list(args), env=node_env(env), name=name)

    def world(self, env_of, ranks, args, world=4):
        port = psb.free_port_run(3)
        self.port = port
        return {r: self.start(env_of(r, world, port), args, "rank%d" % r) for r in ranks}

    def wait_all(self, procs):
        rcs = {}
        for r, p in procs.items():
            try:
                rcs[r] = p.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.fail("rank %s still runs after %d s:\n%s" % (r, WAIT, p.describe()))
        return rcs

    def describe(self, procs):
        return "\n".join(p.describe() for p in procs.values())

    # ---- whole jobs ------------------------------------------------------

    def test_torchrun_environment(self):
        procs = self.world(torchrun_env, range(4), JOB + ["--epochs", "1", "--out", self.out])
        rcs = self.wait_all(procs)
        self.assertEqual(rcs, {0: 0, 1: 0, 2: 0, 3: 0}, self.describe(procs))
        res = psb.results_json(self.out)
        self.assertEqual(res["phase"], "done")
        la = res["launcher"]
        self.assertEqual(la["name"], "torchrun")
        self.assertEqual(la["map"], "pytorch")
        self.assertEqual((la["rank"], la["role"], la["world_size"], la["local_rank"]), (3, "master", 4, 3))
        self.assertEqual(la["master"], "127.0.0.1:%d" % (self.port + 1))
        self.assertEqual(la["http_port"], self.port + 2)
        self.assertEqual(la["variables"], {"rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
                                           "master_addr": "MASTER_ADDR", "port": "MASTER_PORT+1",
                                           "http_port": "MASTER_PORT+2"})
        # The start lines name every value's variable; each rank its role.
        line = "psbench-node: torchrun: rank 3 of 4 (RANK, WORLD_SIZE), local rank 3 (LOCAL_RANK), master " \
               "127.0.0.1:%d (MASTER_ADDR, MASTER_PORT+1): the master (HTTP port %d, MASTER_PORT+2)" % (
                   self.port + 1, self.port + 2)
        self.assertIn(line, procs[3].stderr())
        self.assertIn(": trainer 0\n", procs[0].stderr())
        self.assertIn(": trainer 1\n", procs[1].stderr())
        self.assertIn(": server 0\n", procs[2].stderr())
        self.assertEqual(len(res["trainers"]), 2)
        self.assertEqual(len(res["servers"]), 1)

    def test_srun_environment(self):
        procs = self.world(srun_env, range(4), JOB + ["--master-rank", "0", "--epochs", "1", "--out", self.out])
        rcs = self.wait_all(procs)
        self.assertEqual(rcs, {0: 0, 1: 0, 2: 0, 3: 0}, self.describe(procs))
        la = psb.results_json(self.out)["launcher"]
        self.assertEqual((la["name"], la["map"], la["rank"]), ("slurm", "master-first", 0))
        self.assertEqual(la["variables"]["rank"], "SLURM_PROCID")
        self.assertEqual(la["variables"]["master_addr"], "SLURM_JOB_NODELIST")
        self.assertEqual(la["variables"]["port"], "PSBENCH_PORT")
        self.assertIn("psbench-node: slurm: rank 0 of 4 (SLURM_PROCID, SLURM_NTASKS), local rank 0 (SLURM_LOCALID), "
                      "master localhost:%d (SLURM_JOB_NODELIST, PSBENCH_PORT): the master" % (self.port + 1),
                      procs[0].stderr())
        self.assertIn(": trainer 0\n", procs[1].stderr())
        self.assertIn(": server 0\n", procs[3].stderr())

    # ---- failures --------------------------------------------------------

    def test_rank_started_twice(self):
        procs = self.world(torchrun_env, range(4), JOB + ["--epochs", "1"])
        twin = self.start(torchrun_env(0, 4, self.port), JOB + ["--epochs", "1"], "rank0-again")
        rcs = self.wait_all(procs)
        trc = twin.wait(WAIT)
        # One of the two rank-0 trainers is refused; the other runs the job.
        self.assertEqual((rcs[1], rcs[2], rcs[3]), (0, 0, 0), self.describe(procs))
        pair = sorted([rcs[0], trc])
        self.assertEqual(pair[0], 0, self.describe(procs) + twin.describe())
        self.assertNotEqual(pair[1], 0, self.describe(procs) + twin.describe())
        refused = twin if trc != 0 else procs[0]
        self.assertRegex(refused.stderr(), r"rank 0.*(taken|already)")

    def test_rank_missing_until_join_timeout(self):
        # The server (rank 2) never comes.
        procs = self.world(torchrun_env, (0, 1, 3), JOB + ["--epochs", "1", "--join-timeout", "2",
                                                           "--out", self.out])
        rcs = self.wait_all(procs)
        for r, rc in rcs.items():
            self.assertNotEqual(rc, 0, "rank %d\n%s" % (r, self.describe(procs)))
        self.assertRegex(procs[3].stderr(), r"run failed: only \d of 2 trainers and 0 of 1 servers joined within 2 s")
        res = psb.results_json(self.out)
        self.assertEqual(res["phase"], "failed")
        self.assertEqual(res["launcher"]["name"], "torchrun")

    def test_lost_rank(self):
        procs = self.world(torchrun_env, range(4), JOB[:-2] + ["--log-level", "info", "--epochs", "100000"])
        # Trainer 1 (rank 1) once it has reached its server: then killed.
        deadline = time.monotonic() + WAIT
        while "transport:" not in procs[1].stderr():
            self.assertTrue(procs[1].alive(), self.describe(procs))
            self.assertLess(time.monotonic(), deadline, self.describe(procs))
            time.sleep(0.1)
        procs[1].signal(signal.SIGKILL)
        rcs = self.wait_all(procs)
        for r, rc in rcs.items():
            self.assertNotEqual(rc, 0, "rank %d\n%s" % (r, self.describe(procs)))

    # ---- a rank restarted by its launcher -----------------------------------

    def test_rank_restarted_while_the_master_waits(self):
        # Rank 0's first life crashes before it joins (a stand-in trainer
        # that exits 1, as a crash while loading would); its launcher starts
        # it again (a pod restarted, TORCHELASTIC_RESTART_COUNT 1) while the
        # master still waits for its world: the second life is taken and the
        # job runs to the end.
        procs = self.world(torchrun_env, (1, 2, 3), JOB + ["--epochs", "1", "--out", self.out])
        crash = os.path.join(self.reg.workdir, "crash")
        os.mkdir(crash)
        with open(os.path.join(crash, "psbench-trainer"), "w") as f:
            f.write("#!/bin/sh\necho 'stand-in trainer: crashed before joining' >&2\nexit 1\n")
        os.chmod(os.path.join(crash, "psbench-trainer"), 0o755)
        env = torchrun_env(0, 4, self.port)
        env["PSBENCH_BIN_DIR"] = crash
        first = self.start(env, JOB + ["--epochs", "1", "--out", self.out], "rank0-first")
        self.assertEqual(first.wait(WAIT), 1, first.describe())
        self.assertIn("crashed before joining", first.stderr())
        for r in (1, 2, 3):
            self.assertTrue(procs[r].alive(), "rank %d left before rank 0 came back\n%s" % (r, self.describe(procs)))
        env = torchrun_env(0, 4, self.port)
        env["TORCHELASTIC_RESTART_COUNT"] = "1"
        procs[0] = self.start(env, JOB + ["--epochs", "1", "--out", self.out], "rank0-again")
        rcs = self.wait_all(procs)
        self.assertEqual(rcs, {0: 0, 1: 0, 2: 0, 3: 0}, self.describe(procs))
        res = psb.results_json(self.out)
        self.assertEqual(res["phase"], "done")
        self.assertEqual(len(res["trainers"]), 2)

    def test_rank_after_the_master_failed_is_told_why(self):
        # The server (rank 2) comes only after the master has failed the run
        # for want of it; the master stays (--linger) and tells the late
        # server why it cannot be taken: the run's verdict, not a silence.
        procs = self.world(torchrun_env, (0, 1, 3), JOB + ["--epochs", "1", "--join-timeout", "2", "--linger", "60",
                                                           "--out", self.out])
        for r in (0, 1):
            try:
                rc = procs[r].wait(WAIT)
            except subprocess.TimeoutExpired:
                self.fail("rank %d still runs after %d s:\n%s" % (r, WAIT, self.describe(procs)))
            self.assertNotEqual(rc, 0, self.describe(procs))
        deadline = time.monotonic() + WAIT
        while "run failed" not in procs[3].stderr():
            self.assertTrue(procs[3].alive(), self.describe(procs))
            self.assertLess(time.monotonic(), deadline, self.describe(procs))
            time.sleep(0.1)
        late = self.start(torchrun_env(2, 4, self.port), JOB + ["--epochs", "1", "--out", self.out], "rank2-late")
        try:
            rc = late.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.fail("the late server still runs after %d s:\n%s" % (WAIT, late.describe()))
        self.assertNotEqual(rc, 0, late.describe())
        self.assertRegex(late.stderr(), r"the run is over \(failed: only \d of 2 trainers and 0 of 1 servers joined "
                                        r"within 2 s")
        self.assertTrue(procs[3].alive(), self.describe(procs))
        procs[3].signal(signal.SIGTERM)  # during --linger: the master leaves now
        self.assertNotEqual(procs[3].wait(WAIT), 0, self.describe(procs))
        self.assertEqual(psb.results_json(self.out)["phase"], "failed")

    # ---- refusals and the map ---------------------------------------------

    def run_node(self, env, args):
        return self.reg.run([self.node] + list(args), env=node_env(env))

    def assert_refused(self, rc, err, *words):
        self.assertEqual(rc, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("psbench-node: "), err)
        for w in words:
            self.assertIn(w, lines[0])

    def test_dry_run(self):
        env = torchrun_env(1, 6, 29400)
        rc, out, err = self.run_node(env, ["--dry-run", "--ntrainer", "1", "--ncudatrainer", "2", "--nserver", "1",
                                           "--ncudaserver", "1", "--epochs", "3"])
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "torchrun: world of 6 (WORLD_SIZE), master 127.0.0.1:29401 (MASTER_ADDR, "
                                   "MASTER_PORT+1); map: PyTorch's (trainers, servers, the master last)")
        d = os.path.dirname(self.node)
        self.assertEqual(lines[1:], [
            "rank 0: trainer 0: %s/psbench-trainer --master 127.0.0.1:29401 --rank 0" % d,
            "rank 1: trainer 1: %s/psbench-trainer --master 127.0.0.1:29401 --rank 1 --device cuda:LOCAL_RANK" % d,
            "rank 2: trainer 2: %s/psbench-trainer --master 127.0.0.1:29401 --rank 2 --device cuda:LOCAL_RANK" % d,
            "rank 3: server 0: %s/psbench-server --master 127.0.0.1:29401 --rank 0" % d,
            "rank 4: server 1: %s/psbench-server --master 127.0.0.1:29401 --rank 1 --device cuda:LOCAL_RANK" % d,
            "rank 5: master: %s/psbench-master --listen 0.0.0.0:29401 --http 0.0.0.0:29402 --ntrainer 1 "
            "--ncudatrainer 2 --nserver 1 --ncudaserver 1 --epochs 3" % d])
        # --master-rank 0, a derived count; a flag beats PSBENCH_* beats MASTER_*.
        env["PSBENCH_PORT"] = "7000"
        env["PSBENCH_MASTER_ADDR"] = "head"
        rc, out, err = self.run_node(env, ["--dry-run", "--master-rank", "0", "--nserver", "2", "--port", "7100"])
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertIn("master head:7100 (PSBENCH_MASTER_ADDR, --port)", lines[0])
        self.assertTrue(lines[1].startswith("rank 0: master: "), out)
        self.assertIn("--listen 0.0.0.0:7100 --http 0.0.0.0:29402 --ntrainer 3 --nserver 2", lines[1])
        self.assertTrue(lines[4].startswith("rank 3: trainer 2: "), out)
        self.assertTrue(lines[6].startswith("rank 5: server 1: "), out)
        # The wrong world size is refused, naming the sizes.
        rc, out, err = self.run_node(env, ["--dry-run", "--ntrainer", "2", "--nserver", "2"])
        self.assert_refused(rc, err, "WORLD_SIZE=6, but 2 trainer(s) + 2 server(s) + the master make 5")

    def test_refusals(self):
        port = 29400
        # The master's rank on a host that is not MASTER_ADDR's.
        env = torchrun_env(3, 4, port)
        env["MASTER_ADDR"] = "192.0.2.1"
        rc, out, err = self.run_node(env, JOB)
        self.assert_refused(rc, err, "rank 3 is the master", "MASTER_ADDR=192.0.2.1", "--master-rank 0")
        # No launcher at all.
        rc, out, err = self.run_node({}, JOB)
        self.assert_refused(rc, err, "no rank", "--rank", "--dry-run")
        # psbench-node decides where the master listens.
        rc, out, err = self.run_node(torchrun_env(0, 4, port), JOB + ["--listen", "0.0.0.0:1"])
        self.assert_refused(rc, err, "--listen", "--port")
        # A bad variable names itself.
        env = torchrun_env(0, 4, port)
        env["LOCAL_RANK"] = "x"
        rc, out, err = self.run_node(env, JOB)
        self.assert_refused(rc, err, "LOCAL_RANK='x' is not a local rank")
        # Kubernetes: no master address for a trainer.
        rc, out, err = self.run_node({"JOB_COMPLETION_INDEX": "1"}, JOB)
        self.assert_refused(rc, err, "no master address", "--master-rank 0")
        # A role's binary missing: said, exit 2.
        empty = os.path.join(self.reg.workdir, "empty")
        os.mkdir(empty)
        env = torchrun_env(0, 4, port)
        env["PSBENCH_BIN_DIR"] = empty
        rc, out, err = self.run_node(env, JOB)
        self.assertEqual(rc, 2, err)
        self.assertIn("cannot run %s/psbench-trainer" % empty, err)

    def test_print_hostnames(self):
        rc, out, err = self.run_node({}, ["--print-hostnames", "node[01-03,7],a[1-2],b3"])
        self.assertEqual((rc, out), (0, "node01\nnode02\nnode03\nnode7\na1\na2\nb3\n"), err)
        rc, out, err = self.run_node({}, ["--print-hostnames", "node[3-1]"])
        self.assert_refused(rc, err, "'3-1' is not a range")

    # ---- the real torchrun ------------------------------------------------

    def test_real_torchrun(self):
        probe = subprocess.run(["/usr/bin/python3", "-c", "import torch"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            self.skipTest("/usr/bin/python3 has no torch: the environment torchrun sets is tested above")
        port = psb.free_port_run(3)
        # --redirects 1 --tee 2: Debian's torch 1.13 under Python 3.11 cannot
        # parse its own defaults ("0": Std.from_str finds no member, as 3.11
        # no longer iterates a flag's zero member) and fails before any
        # worker starts; single-bit values parse on every version.
        p = self.reg.start(["/usr/bin/python3", "-m", "torch.distributed.run", "--no_python", "--nproc_per_node",
                            "4", "--master_addr", "127.0.0.1", "--master_port", str(port),
                            "--redirects", "1", "--tee", "2", self.node] + JOB +
                           ["--epochs", "1", "--out", self.out], env=node_env({}), name="torchrun")
        self.assertEqual(p.wait(WAIT * 2), 0, p.describe())
        self.assertEqual(psb.results_json(self.out)["launcher"]["name"], "torchrun")


if __name__ == "__main__":
    psb.main()
