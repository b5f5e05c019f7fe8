"""Install and package: `cmake --install` into a fresh prefix, and the .deb
that CPack builds, unpacked with dpkg-deb into a fresh directory. From
each, the installed psbench-master runs a --local job from an unrelated
working directory with PSBENCH_CONFIG_DIR unset: it must find its configs
in <prefix>/share/psbench/configs (relative to its own path) and start the
installed server and trainers beside it.

Run: PSBENCH_BIN=build /usr/bin/python3 tests/integration/test_install.py
(PSBENCH_BIN is the configured build directory, binaries already built.)
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

BINARIES = ("psbench-master", "psbench-server", "psbench-trainer")
SCRIPTS = ("psbench-slurm",)  # each srun task's role under Slurm (test_slurm.py)
CONFIGS = ("benchmark_configurations.json", "data_configurations.json",
           "model_configurations.json", "server_configurations.json",
           "trainer_configurations.json", "grafana-dashboard.json", "prometheus.yml",
           "slurm/psbench.sbatch")
# The Debian packages of the libraries the binaries link (dpkg-shlibdeps
# names them; prefixes, so that another Debian release's t64 or soname
# suffixes still match).
DEPENDS = ("libc6", "libevent-core", "libjansson", "libmicrohttpd", "libmsgpackc",
           "libopenblas", "libssl", "libgloo", "libstdc++6")
JOB_TIMEOUT = 60


def cache_value(build, key):
    """A value from build/CMakeCache.txt, or None."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def tool(build, key, name):
    p = cache_value(build, key)
    if p and os.access(p, os.X_OK):
        return p
    return shutil.which(name)


class InstallTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.build = psb.bin_dir()
        if not os.path.isfile(os.path.join(cls.build, "CMakeCache.txt")):
            raise RuntimeError("%s is not a CMake build directory (set PSBENCH_BIN)" % cls.build)
        cls.cmake = tool(cls.build, "CMAKE_COMMAND", "cmake")
        cls.cpack = tool(cls.build, "CMAKE_CPACK_COMMAND", "cpack")
        cls.dpkg_deb = shutil.which("dpkg-deb")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="psbench-install-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def check(self, args, timeout=120, cwd=None):
        r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, "%s:\n%s" % (" ".join(args), out[-4000:]))
        return out

    def check_tree(self, prefix):
        """bin/ holds exactly the three binaries and psbench-slurm,
        share/psbench/configs the configs; no test, fuzz or bench binary
        anywhere."""
        self.assertEqual(sorted(os.listdir(os.path.join(prefix, "bin"))), sorted(BINARIES + SCRIPTS))
        for b in BINARIES + SCRIPTS:
            self.assertTrue(os.access(os.path.join(prefix, "bin", b), os.X_OK), b)
        confdir = os.path.join(prefix, "share", "psbench", "configs")
        for c in CONFIGS:
            self.assertTrue(os.path.isfile(os.path.join(confdir, c)), c)
        self.assertTrue(os.path.isfile(os.path.join(prefix, "share", "doc", "psbench", "README.md")))
        for root, _, files in os.walk(prefix):
            for f in files:
                self.assertFalse(f.startswith(("test_", "fuzz_", "bare-floor")),
                                 os.path.join(root, f))
        return confdir

    def run_job(self, prefix, confdir):
        """The installed master runs a --local job from a fresh working
        directory without PSBENCH_CONFIG_DIR; returns results.json."""
        cwd = tempfile.mkdtemp(dir=self.tmp, prefix="cwd-")
        out = os.path.join(cwd, "out")
        env = psb.base_env()
        env.pop("PSBENCH_CONFIG_DIR", None)
        log = os.path.join(cwd, "master.log")
        args = [os.path.join(prefix, "bin", "psbench-master"), "--local", "--listen", "127.0.0.1:0",
                "--http", "127.0.0.1:0", "--linger", "0", "--epochs", "1", "--model", "Synthetic",
                "--out", out]
        with open(log, "wb") as f:
            # The master's children get SIGTERM when it dies (PR_SET_PDEATHSIG
            # in master/launcher.c): stopping the master stops the job.
            p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                 cwd=cwd, env=env, preexec_fn=psb._die_with_parent)
            try:
                rc = p.wait(timeout=JOB_TIMEOUT)
            finally:
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(timeout=psb.STOP_GRACE)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
        with open(log, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        self.assertEqual(rc, 0, text[-4000:])
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done")
        self.assertEqual([t["rank"] for t in res["trainers"]], [0, 1])
        # The configs came from the installed tree, not the source tree.
        real = os.path.realpath(confdir)
        for k in ("data_config_path", "model_config_path", "trainer_config_path",
                  "server_config_path"):
            self.assertEqual(os.path.dirname(res["configuration"][k]), real, k)
        return res

    def test_cmake_install(self):
        prefix = os.path.join(self.tmp, "prefix")
        self.check([self.cmake, "--install", self.build, "--prefix", prefix])
        confdir = self.check_tree(prefix)
        self.run_job(prefix, confdir)

    def test_deb(self):
        if not self.cpack or not self.dpkg_deb:
            raise unittest.SkipTest("cpack or dpkg-deb not found: the .deb is not built")
        pkgdir = os.path.join(self.tmp, "pkg")
        self.check([self.cpack, "-G", "DEB", "-B", pkgdir], cwd=self.build, timeout=300)
        debs = glob.glob(os.path.join(pkgdir, "psbench_*.deb"))
        self.assertEqual(len(debs), 1, os.listdir(pkgdir))
        deb = debs[0]
        fields = {f: self.check([self.dpkg_deb, "-f", deb, f]).strip()
                  for f in ("Package", "Depends")}
        self.assertEqual(fields["Package"], "psbench")
        depends = [d.strip().split(" ")[0] for d in fields["Depends"].split(",")]
        for lib in DEPENDS:
            self.assertTrue(any(d.startswith(lib) for d in depends), (lib, fields["Depends"]))
        # CUDA and NCCL are optional: never required, so that the package
        # installs on a machine without them (or without a GPU driver).
        for d in depends:
            self.assertNotRegex(d, "cuda|nccl|nvidia", fields["Depends"])
        # The fresh prefix: the package's tree unpacked in an empty directory.
        root = os.path.join(self.tmp, "root")
        self.check([self.dpkg_deb, "-x", deb, root])
        prefix = os.path.join(root, "usr")
        confdir = self.check_tree(prefix)
        self.assertEqual(sorted(os.listdir(root)), ["usr"])
        self.run_job(prefix, confdir)


if __name__ == "__main__":
    psb.main()
