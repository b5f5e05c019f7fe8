"""A whole psbench job in containers (issue 40): the image that
scripts/build-image.sh builds from this build's .deb (deploy/container/
Containerfile on a debootstrap'd bookworm base), run with podman as the
Indexed Job runs it — four containers, each `psbench-node` with its
JOB_COMPLETION_INDEX, --master-rank 0 and the master by name — a master,
a server and two trainers, over the host's network, the trainers sharing
the server's IPC namespace and so its /dev/shm, as the containers of one
pod do. The job runs to the end, every container exits 0, results.json
names the launcher (kubernetes), and each trainer's start line says its
link to the server is shared memory (`auto`). (What makes it shared memory
is the network namespace they share, here the host's: psbench's segments
are memfds passed over an abstract socket, not /dev/shm files; by hand,
with private IPC namespaces, the link is shared memory all the same.)

Labelled `container`: not in scripts/test.sh's runs (minutes: the base
image's debootstrap the first time, the .deb's install every time). Run
with `ctest -L container` in a build folder, or
PSBENCH_BIN=build-test /usr/bin/python3 tests/container/test_container.py.
Needs root and podman, runc and debootstrap (scripts/install-deps.sh
container; skipped, saying so, where they are missing). Every container it
starts is removed, and the test's image too, on every exit path (the base
image stays: scripts/build-image.sh reuses it).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import psb  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD_IMAGE = os.path.join(REPO, "scripts", "build-image.sh")
CONF = os.path.join(REPO, "deploy", "container", "containers.conf")
BUILD_TIMEOUT = 1500
WAIT = 180
LIMITS = ["--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
MODELS = {"Small": {"model_class": "Synthetic",
                    "configurations": {"buckets": 4, "bucket_floats": 16384, "sparse": False}}}


def why_not():
    if os.geteuid() != 0:
        return "the container test runs podman as root"
    missing = [t for t in ("podman", "runc", "debootstrap") if not shutil.which(t, path=os.environ.get("PATH", "") +
                                                                               ":/usr/sbin:/sbin")]
    if missing:
        return "%s not installed: scripts/install-deps.sh container installs them" % ", ".join(missing)
    return None


def podman_env():
    env = psb.base_env()
    env.setdefault("CONTAINERS_CONF", CONF)
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    return env


class ContainerJob(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        why = why_not()
        if why:
            raise unittest.SkipTest(why)
        cls.tag = "localhost/psbench-ctest:%d" % os.getpid()
        t0 = time.monotonic()
        r = subprocess.run([BUILD_IMAGE, "--build-dir", psb.bin_dir(), "--tag", cls.tag], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=podman_env(), timeout=BUILD_TIMEOUT)
        out = r.stdout.decode("utf-8", "replace")
        if r.returncode != 0:
            cls.remove_image()
            raise AssertionError("scripts/build-image.sh: exit %d:\n%s" % (r.returncode, out[-6000:]))
        cls.build_s = time.monotonic() - t0
        print("image: %s (%.0f s)" % (out.strip().splitlines()[-1], cls.build_s), file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.remove_image()

    @classmethod
    def remove_image(cls):
        subprocess.run(["podman", "rmi", "--force", "--ignore", cls.tag], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=podman_env(), timeout=120)

    def setUp(self):
        self.reg = psb.Registry()
        self.names = []
        self.addCleanup(self.reg.stop_all)
        self.addCleanup(self.remove_containers)

    def remove_containers(self):
        if self.names:
            subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0"] + self.names,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=podman_env(), timeout=120)

    def run_container(self, role, index, podman_args, node_args):
        """`podman run` in the foreground (its output is the container's),
        psbench-node with this index as the Indexed Job gives it."""
        name = "psbench-ctest-%d-%s" % (os.getpid(), role)
        self.names.append(name)
        args = (["podman", "run", "--rm", "--name", name, "--network", "host"] + LIMITS +
                ["-e", "JOB_COMPLETION_INDEX=%d" % index, "-e", "PSBENCH_TOKEN=" + self.token] +
                podman_args + [self.tag, "psbench-node", "--master-rank=0", "--master-addr=" + self.master_name,
                               "--ntrainer=2", "--nserver=1", "--port=%d" % self.ctl, "--http-port=%d" % self.http,
                               "--connect-timeout=60"] + node_args)
        return self.reg.start(args, env=podman_env(), name=role)

    def wait_running(self, name, proc, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = subprocess.run(["podman", "inspect", "--format", "{{.State.Running}}", name], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=podman_env(), timeout=30)
            if r.stdout.decode().strip() == "true":
                return
            if not proc.alive():
                self.fail("%s ended before it ran:\n%s" % (name, proc.describe()))
            time.sleep(0.2)
        self.fail("%s not running after %d s:\n%s" % (name, timeout, proc.describe()))

    def test_job_in_containers(self):
        """Master, server, two trainers: four containers, one job."""
        self.token = "ctest-token-%d" % os.getpid()
        self.ctl, self.http = psb.free_port("0.0.0.0"), psb.free_port("0.0.0.0")
        # The master by a name, as in a cluster: this host's own name
        # when it resolves, else localhost.
        host = socket.gethostname()
        try:
            socket.getaddrinfo(host, None)
            self.master_name = host
        except OSError:
            self.master_name = "localhost"
        job = os.path.join(self.reg.workdir, "job")
        os.mkdir(job)
        os.chmod(job, 0o777)  # the image's user (10001) writes the results here
        with open(os.path.join(job, "models.json"), "w") as f:
            json.dump(MODELS, f)
        t0 = time.monotonic()
        master = self.run_container("master", 0, ["-v", job + ":/job"],
                                    ["--model=Small", "--model-config-path=/job/models.json", "--epochs=3",
                                     "--out=/job/out", "--rpc-timeout=30"])
        server_name = "psbench-ctest-%d-server" % os.getpid()
        server = self.run_container("server", 3, ["--ipc", "shareable"], [])
        self.wait_running(server_name, server)
        trainers = [self.run_container("trainer%d" % i, 1 + i, ["--ipc", "container:" + server_name], [])
                    for i in range(2)]
        procs = [master, server] + trainers
        for p in procs:
            try:
                rc = p.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.fail("%s still runs after %d s:\n%s" % (p.name, WAIT, "\n".join(q.describe() for q in procs)))
            self.assertEqual(rc, 0, "\n".join(q.describe() for q in procs))
        job_s = time.monotonic() - t0
        with open(os.path.join(job, "out", "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done", res.get("error"))
        self.assertEqual(res["launcher"]["name"], "kubernetes")
        self.assertEqual(res["launcher"]["variables"]["rank"], "JOB_COMPLETION_INDEX")
        self.assertEqual(res["configuration"]["listen"], "0.0.0.0:%d" % self.ctl)
        self.assertIn("psbench-node: kubernetes: rank 0 of 4 (JOB_COMPLETION_INDEX)", master.stderr())
        self.assertIn("psbench-node: kubernetes: rank 3 of 4 (JOB_COMPLETION_INDEX)", server.stderr())
        for i, t in enumerate(trainers):
            err = t.stderr()
            self.assertIn("psbench-node: kubernetes: rank %d of 4 (JOB_COMPLETION_INDEX)" % (1 + i), err)
            self.assertIn("psbench-trainer: trainer %d: transport: server 0 shared memory" % i, err)
        for link in (t["links"] for t in res["trainers"]):
            self.assertEqual([ln["transport"] for ln in link], ["shm"], link)
        print("job in containers: %.1f s" % job_s, file=sys.stderr)


if __name__ == "__main__":
    psb.main()
