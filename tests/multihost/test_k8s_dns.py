"""The Kubernetes Indexed Job's ranks across namespace hosts (issue 40):
four hosts named as the Job's pods are (psb-0 .. psb-3), each resolving
the others' DNS names as a headless Service psb makes them
(psb-N.psb, psb-N.psb.default.svc.cluster.local; netns.Net.set_hosts), and
on each the command of deploy/kubernetes/psbench-indexed-job.yaml with
only JOB_COMPLETION_INDEX to tell them apart: index 0 becomes the master
(--master-rank 0) at psb-0.psb, the others reach it by that name. The
ranks start in reverse order; the job runs to the end, every rank exits
0, the master's results.json names the launcher and the index variable,
and each node ran on its own host. A master index on a host that the
name does not resolve to is refused at once, naming the variable.

Run (as root): PSBENCH_BIN=build-test /usr/bin/python3 tests/multihost/test_k8s_dns.py
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import mh  # noqa: E402
import netns  # noqa: E402
import psb  # noqa: E402

MANIFEST = os.path.join(HERE, "..", "..", "deploy", "kubernetes", "psbench-indexed-job.yaml")
SKIP = netns.unavailable()
PODS = ("psb-0", "psb-1", "psb-2", "psb-3")
# The manifest's container command (checked against the file below),
# less its --out (a folder of the test's here).
COMMAND = ["--master-rank=0", "--master-addr=psb-0.psb", "--ntrainer=2", "--nserver=1", "--connect-timeout=120"]
MODELS = {"Small": {"model_class": "Synthetic",
                    "configurations": {"buckets": 4, "bucket_floats": 16384, "sparse": False}}}
WAIT = 120


def pod_env(index, token):
    """The pod's environment: the index and the manifest's Secret, nothing
    of our own caller's launcher (psb.launcher_free_env)."""
    return psb.launcher_free_env({"JOB_COMPLETION_INDEX": str(index), "PSBENCH_TOKEN": token})


@unittest.skipIf(SKIP, SKIP or "")
class IndexedJobDns(mh.NetCase):

    def setUp(self):
        super().setUp()
        self.h = {name: self.net.add_host(name) for name in PODS}
        self.net.set_hosts([(h.addr, "%s.psb" % n, "%s.psb.default.svc.cluster.local" % n)
                            for n, h in self.h.items()])
        self.token = "k8s-dns-token-%d" % os.getpid()
        self.node = psb.bin_path("psbench-node")

    def start_pod(self, name, index, extra=()):
        return self.reg.start(self.h[name].wrap([self.node] + COMMAND + list(extra)),
                              env=pod_env(index, self.token), name=name)

    def test_manifest_command(self):
        """The command used here is the manifest's."""
        with open(MANIFEST) as f:
            text = f.read()
        for flag in COMMAND + ["--out=/results", "completionMode: Indexed", "subdomain: psb", "name: psb "]:
            self.assertIn(flag, text)

    def test_job_by_dns_name(self):
        cfg = os.path.join(self.reg.workdir, "models.json")
        with open(cfg, "w") as f:
            json.dump(MODELS, f)
        out = os.path.join(self.reg.workdir, "out")
        job = ["--model=Small", "--model-config-path=" + cfg, "--epochs=3", "--rpc-timeout=20", "--out=" + out]
        pods = {}
        for i in reversed(range(len(PODS))):
            pods[i] = self.start_pod(PODS[i], i, job)
        for i, p in sorted(pods.items()):
            try:
                rc = p.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.fail("%s still runs after %d s:\n%s" % (p.name, WAIT,
                                                             "\n".join(q.describe() for q in pods.values())))
            self.assertEqual(rc, 0, "\n".join(q.describe() for q in pods.values()))
        self.assertIn("psbench-node: kubernetes: rank 0 of 4 (JOB_COMPLETION_INDEX), master psb-0.psb:29500 "
                      "(--master-addr, default): the master (HTTP port 8080, default)", pods[0].stderr())
        roles = {1: "trainer 0", 2: "trainer 1", 3: "server 0"}
        for i, role in roles.items():
            self.assertIn("psbench-node: kubernetes: rank %d of 4 (JOB_COMPLETION_INDEX), master psb-0.psb:29500 "
                          "(--master-addr, default): %s" % (i, role), pods[i].stderr())
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done", res.get("error"))
        self.assertIsNone(res["error"])
        launcher = res["launcher"]
        self.assertEqual(launcher["name"], "kubernetes")
        self.assertEqual(launcher["variables"]["rank"], "JOB_COMPLETION_INDEX")
        self.assertEqual(launcher["master"], "psb-0.psb:29500")
        # Each node on its pod's host; the trainers and the server on
        # different hosts: TCP between them.
        hosts = sorted((t["rank"], t["host"]) for t in res["trainers"])
        self.assertEqual(hosts, [(0, "psb-1"), (1, "psb-2")])
        for t in res["trainers"]:
            self.assertEqual([ln["transport"] for ln in t["links"]], ["tcp"])
            self.assertIn(self.h["psb-3"].addr, t["links"][0]["address"])
        for p in pods.values():
            self.assertNotIn(self.token, p.stdout() + p.stderr(), p.name)

    def test_master_name_resolves_late(self):
        """The ranks start before the master's name exists (a pod's DNS
        record comes with the pod): they try the name again until it
        resolves, within --connect-timeout, and the job runs."""
        cfg = os.path.join(self.reg.workdir, "models.json")
        with open(cfg, "w") as f:
            json.dump(MODELS, f)
        entries = [(h.addr, "%s.psb" % n) for n, h in self.h.items()]
        self.net.set_hosts(entries[1:])  # no psb-0.psb yet
        job = ["--model=Small", "--model-config-path=" + cfg, "--epochs=1", "--rpc-timeout=20",
               "--out=" + os.path.join(self.reg.workdir, "out")]
        pods = {i: self.start_pod(PODS[i], i, job) for i in (1, 2, 3)}
        # Each has exec'd its role and tries the name that is not there
        # (before, the first try's "cannot resolve" ended it at once).
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not all(
                "psbench-node: kubernetes: rank" in p.stderr() for p in pods.values()):
            time.sleep(0.1)
        time.sleep(2)
        for p in pods.values():
            self.assertIsNone(p.returncode, p.describe())
        self.net.set_hosts(entries)  # written in place: the running nodes see it
        pods[0] = self.start_pod(PODS[0], 0, job)
        for i, p in sorted(pods.items()):
            try:
                rc = p.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.fail("%s still runs after %d s:\n%s" % (p.name, WAIT,
                                                             "\n".join(q.describe() for q in pods.values())))
            self.assertEqual(rc, 0, "\n".join(q.describe() for q in pods.values()))

    def test_master_index_elsewhere_refused(self):
        """Index 0 started on psb-1: psb-0.psb is not this host, refused
        (exit 2) before anything starts, naming --master-rank 0's rule."""
        p = self.start_pod("psb-1", 0)
        self.assertEqual(p.wait(30), 2, p.describe())
        self.assertRegex(p.stderr(), r"rank 0 is the master \(--master-rank 0\), but --master-addr=psb-0\.psb, "
                                     r"where the other ranks look for it, is not this host")


if __name__ == "__main__":
    psb.main()
