"""deploy/: the files a cluster user applies (issue 40), checked without a
cluster.

KubernetesFiles: every deploy/kubernetes/*.yaml validates offline against
Kubernetes' own schemas (tests/deploy/validate.mjs: npm's kubernetes-models,
plus a check that refuses fields the schemas do not define; JobSet's own
fields by hand, its Job template by the schema) and says what
docs/operations.md says: the rank is JOB_COMPLETION_INDEX (Indexed, no
rank given), the master is index 0 behind the headless Service's DNS name
(<job>-0.<service>, JobSet's <jobset>-<replicatedJob>-0-0.<subdomain>), the
ports are the ones psbench-node gives the master (asked of psbench-node
--dry-run with each file's own arguments), /dev/shm is a memory emptyDir
shared by the server and the trainers of the one-pod files, and the image
is the one scripts/build-image.sh tags. Skipped, saying why, where node,
npm or the npm packages (scripts/install-k8s-validate.sh) are missing.

Scripts: the torchrun example runs a whole job, its two "nodes" on this
host, under a stand-in torchrun (fake_torchrun.py: torchrun's environment
and its store's port held on node 0) — so that the example's command
line is the one that works; the sbatch script runs plain srun psbench-node
(its real run: tests/integration/test_slurm.py). Every process a test
starts is stopped on every exit path (psb.Registry).

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/deploy/test_deploy.py
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import psb  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")
K8S = sorted(glob.glob(os.path.join(DEPLOY, "kubernetes", "*.yaml")))
VALIDATE = os.path.join(HERE, "validate.mjs")
OPERATIONS = os.path.join(REPO, "docs", "operations.md")
WAIT = 120
MODELS = {"Tiny": {"model_class": "Synthetic",
                   "configurations": {"buckets": 3, "bucket_floats": 2000, "sparse": False}}}


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(psbench VERSION (\S+)", f.read()).group(1)


def why_no_validator():
    for tool, pkg in (("node", "nodejs"), ("npm", "npm")):
        if not shutil.which(tool):
            return "%s not found: scripts/install-deps.sh test installs %s" % (tool, pkg)
    if not os.path.isdir(os.path.join(HERE, "node_modules", "kubernetes-models")):
        return ("tests/deploy/node_modules has no kubernetes-models: run scripts/install-k8s-validate.sh "
                "(scripts/install-deps.sh test does)")
    return None


def validate(files):
    """(returncode, {"files": ..., "errors": [...]}) of validate.mjs."""
    r = subprocess.run(["node", VALIDATE] + list(files), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120, cwd=HERE)
    try:
        out = json.loads(r.stdout.decode())
    except ValueError:
        raise AssertionError("validate.mjs: exit %d: %s%s" % (r.returncode, r.stdout.decode()[-2000:],
                                                              r.stderr.decode()[-2000:]))
    return r.returncode, out


def flags(command):
    """{"--flag": value} of a container's command (--flag=value form)."""
    out = {}
    for a in command[1:]:
        k, eq, v = a.partition("=")
        out[k] = v if eq else True
    return out


def env_names(container):
    return {e["name"] for e in container.get("env", [])}


class KubernetesFiles(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        why = why_no_validator()
        if why:
            raise unittest.SkipTest(why)
        cls.rc, cls.out = validate(K8S)
        cls.docs = {os.path.basename(k): v for k, v in cls.out["files"].items()}
        cls.node = psb.bin_path("psbench-node")
        cls.image = "localhost/psbench:%s" % project_version()

    def doc(self, name, kind):
        found = [d for d in self.docs[name] if d["kind"] == kind]
        self.assertEqual(len(found), 1, "%s: one %s" % (name, kind))
        return found[0]

    def dry_run(self, container, extra_env=None):
        """The master's (control, HTTP) ports and each rank's line, as
        psbench-node decides them from the container's own command and a
        pod's environment (no MASTER_PORT: Kubernetes sets none)."""
        cmd = container["command"]
        self.assertEqual(cmd[0], "psbench-node")
        r = subprocess.run([self.node] + cmd[1:] + ["--dry-run"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30, env=psb.launcher_free_env(extra_env))
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out)
        m = re.search(r"master: \S+psbench-master --listen 0\.0\.0\.0:(\d+) --http 0\.0\.0\.0:(\d+)", out)
        self.assertIsNotNone(m, out)
        return (int(m.group(1)), int(m.group(2))), out

    def assert_ports(self, container, ports):
        """The master's container declares psbench-node's two ports."""
        declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        self.assertEqual(declared, {"control": ports[0], "http": ports[1]})

    def assert_resources(self, container, gpu=False):
        res = container.get("resources", {})
        self.assertIn("cpu", res.get("requests", {}), container["name"])
        self.assertIn("memory", res.get("requests", {}), container["name"])
        self.assertIn("memory", res.get("limits", {}), container["name"])
        if gpu:
            self.assertEqual(res["requests"].get("nvidia.com/gpu"), 1, container["name"])
            self.assertEqual(res["limits"].get("nvidia.com/gpu"), 1, container["name"])
        else:
            self.assertNotIn("nvidia.com/gpu", res.get("limits", {}), container["name"])

    def assert_token_secret(self, container):
        tok = [e for e in container.get("env", []) if e["name"] == "PSBENCH_TOKEN"]
        self.assertEqual(len(tok), 1, container["name"])
        self.assertEqual(tok[0]["valueFrom"]["secretKeyRef"], {"name": "psb-token", "key": "token"})

    def assert_indexed_pods(self, job_spec, master_name):
        """An Indexed Job whose pods run one psbench-node command, the rank
        from JOB_COMPLETION_INDEX, the master at master_name."""
        self.assertEqual(job_spec["completionMode"], "Indexed")
        self.assertEqual(job_spec["completions"], 4)
        self.assertEqual(job_spec["parallelism"], 4)
        pod = job_spec["template"]["spec"]
        self.assertEqual(len(pod["containers"]), 1)
        c = pod["containers"][0]
        self.assertEqual(c["image"], self.image)
        f = flags(c["command"])
        self.assertEqual(f["--master-rank"], "0")
        self.assertEqual(f["--master-addr"], master_name)
        for given in ("--rank", "--world-size", "--port", "--http-port"):
            self.assertNotIn(given, f)  # the index is the rank; the ports psbench-node's
        self.assertFalse(env_names(c) & {"PSBENCH_RANK", "RANK", "MASTER_PORT", "PSBENCH_PORT",
                                         "PSBENCH_HTTP_PORT", "WORLD_SIZE"})
        self.assert_token_secret(c)
        self.assert_resources(c)
        ports, out = self.dry_run(c, {"JOB_COMPLETION_INDEX": "0"})
        self.assertEqual(ports, (29500, 8080))
        self.assertIn("master %s:29500" % master_name, out)
        self.assertRegex(out, r"rank 3: server 0: ")
        self.assertRegex(out, r"rank 1: trainer 0: ")
        self.assert_ports(c, ports)
        # The init container waits for that very name.
        init = pod["initContainers"][0]
        self.assertEqual(init["image"], self.image)
        self.assertIn("getent hosts %s " % master_name, init["command"][-1])
        self.assertEqual(pod["restartPolicy"], "Never")
        return pod, ports

    # ---- the tests -------------------------------------------------------------

    def test_schemas(self):
        """Every document of every file is valid as its kind."""
        self.assertEqual(self.out["errors"], [])
        self.assertEqual(self.rc, 0)
        self.assertEqual(sorted(self.docs), ["psbench-indexed-job.yaml", "psbench-jobset.yaml",
                                             "psbench-one-pod-gpu.yaml", "psbench-one-pod.yaml"])

    def test_validator_refuses(self):
        """The check has teeth: a misspelt field, a port as a string, a bad
        quantity, a JobSet field that does not exist, each refused."""
        tmp = tempfile.mkdtemp(prefix="psbench-deploy-")
        self.addCleanup(shutil.rmtree, tmp, True)
        cases = {"psbench-indexed-job.yaml": [("completionMode: Indexed", "completionMod: Indexed",
                                               "/spec/completionMod: not a field"),
                                              ("containerPort: 29500", 'containerPort: "29500"',
                                               "containerPort: type"),
                                              ("memory: 1Gi}", "memory: 1Gx}", "memory: format")],
                 "psbench-jobset.yaml": [("replicas: 1 ", "replica: 1 ", "/replica: not a field of this JobSet"),
                                         ("subdomain: psb ", "subdomian: psb ", "/subdomian: not a field"),
                                         ("backoffLimit: 0", "backoffLimit: none", "backoffLimit: type")],
                 "psbench-one-pod.yaml": [("medium: Memory", "medum: Memory", "/emptyDir/medum: not a field")]}
        for name, muts in cases.items():
            with open(os.path.join(DEPLOY, "kubernetes", name)) as f:
                text = f.read()
            for old, new, want in muts:
                self.assertIn(old, text, name)
                path = os.path.join(tmp, name)
                with open(path, "w") as f:
                    f.write(text.replace(old, new, 1))
                rc, out = validate([path])
                self.assertEqual(rc, 1, (name, new, out["errors"]))
                self.assertTrue(any(want in e for e in out["errors"]), (name, new, out["errors"]))

    def test_indexed_job(self):
        svc = self.doc("psbench-indexed-job.yaml", "Service")
        job = self.doc("psbench-indexed-job.yaml", "Job")
        name, service = job["metadata"]["name"], svc["metadata"]["name"]
        pod, ports = self.assert_indexed_pods(job["spec"], "%s-0.%s" % (name, service))
        # The headless Service: the pods' subdomain, their labels, the ports.
        self.assertEqual(pod["subdomain"], service)
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        self.assertIs(svc["spec"]["publishNotReadyAddresses"], True)
        labels = job["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v)
        self.assertEqual({p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]},
                         {"control": (ports[0], ports[0]), "http": (ports[1], ports[1])})

    def test_jobset(self):
        js = self.doc("psbench-jobset.yaml", "JobSet")
        self.assertEqual(js["apiVersion"], "jobset.x-k8s.io/v1alpha2")
        net = js["spec"]["network"]
        self.assertIs(net["enableDNSHostnames"], True)
        self.assertIs(net["publishNotReadyAddresses"], True)
        rjs = js["spec"]["replicatedJobs"]
        self.assertEqual(len(rjs), 1)
        self.assertEqual(rjs[0]["replicas"], 1)
        master = "%s-%s-0-0.%s" % (js["metadata"]["name"], rjs[0]["name"], net["subdomain"])
        self.assertEqual(master, "psb-workers-0-0.psb")
        self.assert_indexed_pods(rjs[0]["template"]["spec"], master)

    def one_pod(self, name, gpu):
        job = self.doc(name, "Job")
        pod = job["spec"]["template"]["spec"]
        cs = {c["name"]: c for c in pod["containers"]}
        self.assertEqual(sorted(cs), ["master", "server", "trainer-0", "trainer-1"])
        ranks = {}
        for cname, c in cs.items():
            self.assertTrue(c["image"].startswith("localhost/psbench"), c["image"])
            self.assertTrue(c["image"].endswith(":" + project_version()), c["image"])
            f = flags(c["command"])
            self.assertEqual(f["--master-addr"], "127.0.0.1")  # the pod's own loopback
            ranks[int(f["--rank"])] = cname
            self.assert_token_secret(c)
            self.assert_resources(c, gpu=gpu and cname.startswith("trainer"))
        # The map: each container's rank is its role's.
        ports, out = self.dry_run(cs["master"])
        self.assertEqual(ports, (29500, 8080))
        self.assert_ports(cs["master"], ports)
        for r, cname in ranks.items():
            role = {"master": r"master: ", "server": r"server 0: ", "trainer-0": r"trainer 0: ",
                    "trainer-1": r"trainer 1: "}[cname]
            self.assertRegex(out, r"(?m)^rank %d: %s" % (r, role))
            if gpu and cname.startswith("trainer"):
                self.assertRegex(out, r"(?m)^rank %d: .*--device cuda" % r)
        # /dev/shm: one memory emptyDir, in the server's and the trainers'.
        vols = {v["name"]: v for v in pod["volumes"]}
        shm = [n for n, v in vols.items() if v.get("emptyDir", {}).get("medium") == "Memory"]
        self.assertEqual(len(shm), 1)
        self.assertIn("sizeLimit", vols[shm[0]]["emptyDir"])
        for cname in ("server", "trainer-0", "trainer-1"):
            mounts = {m["mountPath"]: m["name"] for m in cs[cname].get("volumeMounts", [])}
            self.assertEqual(mounts.get("/dev/shm"), shm[0], cname)
        self.assertNotIn("/dev/shm", {m["mountPath"] for m in cs["master"].get("volumeMounts", [])})

    def test_one_pod(self):
        self.one_pod("psbench-one-pod.yaml", gpu=False)

    def test_one_pod_gpu(self):
        self.one_pod("psbench-one-pod-gpu.yaml", gpu=True)

    def test_docs(self):
        """docs/operations.md explains each file and says what they rely on."""
        with open(OPERATIONS) as f:
            doc = f.read()
        for path in K8S + glob.glob(os.path.join(DEPLOY, "*", "*")):
            name = "deploy/" + os.path.relpath(path, DEPLOY)
            self.assertTrue(name in doc, "docs/operations.md does not name " + name)
        for fact in ("JOB_COMPLETION_INDEX", "psb-0.psb", "psb-workers-0-0.psb", "29500", "8080", "/dev/shm",
                     "medium: Memory", "nvidia.com/gpu", "publishNotReadyAddresses", "scripts/build-image.sh",
                     "localhost/psbench:" + project_version()):
            self.assertTrue(fact in doc, "docs/operations.md does not say " + fact)


class Scripts(unittest.TestCase):

    def setUp(self):
        self.reg = psb.Registry()
        self.addCleanup(self.reg.stop_all)

    def test_sbatch_plain_srun(self):
        """The sbatch script's one srun line runs psbench-node itself (no
        wrapper), the master on task 0; bash parses it."""
        path = os.path.join(DEPLOY, "slurm", "psbench-node.sbatch")
        self.assertEqual(subprocess.run(["bash", "-n", path]).returncode, 0)
        with open(path) as f:
            text = f.read()
        self.assertRegex(text, r"(?m)^srun [^\n]*\\\n\s+psbench-node --master-rank 0 --nserver 1 ")
        self.assertNotIn("psbench-slurm", text)
        for want in ("#SBATCH --ntasks=4", "#SBATCH --cpus-per-task=", "#SBATCH --mem-per-cpu=", "29500", "8080",
                     "--gres=gpu:"):
            self.assertIn(want, text)

    def test_torchrun_two_nodes(self):
        """deploy/torchrun/psbench-torchrun.sh on "node 0" and "node 1" (both
        on this host, under fake_torchrun.py, which holds MASTER_PORT as
        torchrun's store does): the whole job runs, every rank exits 0,
        and results.json names torchrun and the master's ports beside it."""
        work = self.reg.workdir
        cfg = os.path.join(work, "models.json")
        with open(cfg, "w") as f:
            json.dump(MODELS, f)
        token = os.path.join(work, "token")
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"deploy-test-token\n")
        os.close(fd)
        port = psb.free_port_run(3)
        out = os.path.join(work, "out")
        bindir = os.path.dirname(psb.bin_path("psbench-node"))
        env = psb.launcher_free_env({"PATH": bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                         "TORCHRUN": "/usr/bin/python3 " + os.path.join(HERE, "fake_torchrun.py"),
                         "MASTER_PORT": str(port), "PSBENCH_TOKEN_FILE": token})
        script = os.path.join(DEPLOY, "torchrun", "psbench-torchrun.sh")
        job = ["--model", "Tiny", "--model-config-path", cfg, "--epochs", "1", "--out", out, "--log-level", "warn"]
        nodes = [self.reg.start([script, str(n), "127.0.0.1"] + job, env=env, name="node%d" % n) for n in (0, 1)]
        for p in nodes:
            try:
                rc = p.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.fail("%s still runs after %d s:\n%s" % (p.name, WAIT, "\n".join(q.describe() for q in nodes)))
            self.assertEqual(rc, 0, "\n".join(q.describe() for q in nodes))
        err0, err1 = nodes[0].stderr(), nodes[1].stderr()
        self.assertIn("psbench-node: torchrun: rank 0 of 4 (RANK, WORLD_SIZE)", err0)
        self.assertRegex(err0, r"rank 0 of 4 .*master 127\.0\.0\.1:%d \(MASTER_ADDR, MASTER_PORT\+1\): the master "
                               r"\(HTTP port %d, MASTER_PORT\+2\)" % (port + 1, port + 2))
        self.assertRegex(err1, r"psbench-node: torchrun: rank 3 of 4 .*: server 0")
        self.assertRegex(err1, r"psbench-node: torchrun: rank 2 of 4 .*: trainer 1")
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done", res.get("error"))
        self.assertEqual(res["launcher"]["name"], "torchrun")
        self.assertEqual(res["configuration"]["listen"], "0.0.0.0:%d" % (port + 1))
        self.assertIs(res["configuration"]["auth"], True)


if __name__ == "__main__":
    psb.main()
