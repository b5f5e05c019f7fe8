"""The README's two commands, scripts/run.sh and scripts/test.sh, in any
order: each configures build folders of its own, with its own compiler and
build type, and never inherits the other's (CMake keeps a folder's first
compiler whatever CC says later). And each installs its own packages: run.sh
what building and running need, test.sh also what only the tests use.

Cheap by design: the scripts' configure steps alone (PSBENCH_CONFIGURE_ONLY=1:
no packages, no build, no tests) run against a throw-away copy of the source
tree, in both orders, and the resulting CMake caches are read. The scripts
and cmake run in a fresh environment (clean_env): nothing of the caller's
(test.sh's own PSBENCH_NO_SANITIZE=1, a user's CC or CFLAGS) reaches them;
ctest runs this suite with such variables set to prove it.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_scripts.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

SRC = os.path.abspath(os.path.join(psb.HERE, "..", ".."))
# Packages only the test suite (or packaging and the benchmarks'
# references) uses: never installed by run.sh.
TEST_ONLY = ("libcmocka-dev", "clang", "libclang-rt-14-dev", "python3-msgpack", "iperf3", "prometheus",
             "chromium", "chromium-driver", "python3-selenium", "slurm-wlm", "munge", "dpkg-dev", "nodejs", "npm")
# A hang's bound for one script's configure steps (a loaded host runs
# them several times slower).
SCRIPT_TIMEOUT_S = 600
# What building and running cannot do without.
RUN_NEEDS = ("cmake", "pkg-config", "libevent-dev", "libmsgpack-dev", "libjansson-dev", "libmicrohttpd-dev",
             "libopenblas-dev", "libssl-dev", "libgloo-dev", "g++")


# What a login shell has, kept for the scripts and cmake; nothing else of
# the caller's environment reaches them. test.sh's own quick form
# (PSBENCH_NO_SANITIZE=1 scripts/test.sh) runs this suite with that
# variable set, and a user's CC, CFLAGS, CMAKE_GENERATOR or
# PSBENCH_CMAKE_ARGS would choose the folders' options in its place:
# the scripts must be checked as a fresh shell runs them.
KEPT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TERM")


def clean_env(extra=None):
    """A fresh environment for the scripts and cmake: KEPT_ENV from ours,
    then `extra`."""
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    env.update(extra or {})
    return env


def cache(build):
    """A CMakeCache.txt as a dict (key -> value), {} when absent."""
    out = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if ":" in line and "=" in line and not line.startswith(("#", "//")):
                    k, rest = line.split(":", 1)
                    out[k] = rest.split("=", 1)[1].rstrip("\n")
    except OSError:
        pass
    return out


def real(path):
    return os.path.realpath(shutil.which(path) or path)


class ScriptsTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # script() runs both without CC (a user's CC would choose run.sh's
        # compiler): run.sh then takes the system's cc.
        cls.cc_run = real("cc")
        cls.cc_test = real("clang") if shutil.which("clang") else real("cc")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="psbench-scripts-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def tree(self):
        """A copy of the sources, without build folders or results."""
        dst = os.path.join(self.tmp, "src-%d" % len(os.listdir(self.tmp)))
        shutil.copytree(SRC, dst, symlinks=True,
                        ignore=shutil.ignore_patterns("build*", ".git", "psbench-out", "__pycache__",
                                                      ".devkit.tgz", "kit-env.sh"))
        return dst

    def script(self, tree, name, extra_env=None):
        # Configuring is the cost here (about 3 s a folder on 2 cores; 10 s
        # more where the CUDA toolkit is detected: PSBENCH_CMAKE_ARGS turns
        # that off, and the caches show it was passed).
        env = clean_env({"PSBENCH_CONFIGURE_ONLY": "1", "PSBENCH_CMAKE_ARGS": "-DPSBENCH_CUDA=OFF"})
        if extra_env:
            env.update(extra_env)
        r = subprocess.run([os.path.join(tree, "scripts", name)], cwd=tree, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=SCRIPT_TIMEOUT_S)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, "%s:\n%s" % (name, out[-3000:]))
        return out

    def assert_run_build(self, tree):
        c = cache(os.path.join(tree, "build"))
        self.assertEqual(real(c.get("CMAKE_C_COMPILER", "")), self.cc_run, "build/ (run.sh's)")
        self.assertEqual(c.get("CMAKE_BUILD_TYPE"), "RelWithDebInfo")
        self.assertEqual(c.get("PSBENCH_TESTS"), "OFF")
        self.assertEqual(c.get("PSBENCH_CUDA"), "OFF")  # $PSBENCH_CMAKE_ARGS
        self.assertEqual(c.get("CMAKE_HOME_DIRECTORY"), tree)

    def assert_test_builds(self, tree, sanitizers=True):
        dirs = (("build-test", {}), ("build-asan", {"PSBENCH_SANITIZE": "ON"}), ("build-tsan", {"PSBENCH_TSAN": "ON"}))
        for d, extra in dirs if sanitizers else dirs[:1]:
            c = cache(os.path.join(tree, d))
            self.assertEqual(real(c.get("CMAKE_C_COMPILER", "")), self.cc_test, d)
            self.assertEqual(c.get("CMAKE_BUILD_TYPE"), "RelWithDebInfo", d)
            self.assertEqual(c.get("PSBENCH_WERROR"), "ON", d)
            self.assertNotEqual(c.get("PSBENCH_TESTS"), "OFF", d)
            self.assertEqual(c.get("PSBENCH_CUDA"), "OFF", d)  # $PSBENCH_CMAKE_ARGS
            for k, v in extra.items():
                self.assertEqual(c.get(k), v, (d, k))

    def test_run_then_test_then_run(self):
        tree = self.tree()
        self.script(tree, "run.sh")
        self.assert_run_build(tree)
        first = cache(os.path.join(tree, "build"))
        self.script(tree, "test.sh")
        self.assert_test_builds(tree)
        self.assertEqual(cache(os.path.join(tree, "build")), first, "test.sh touched run.sh's build/")
        self.script(tree, "run.sh")
        self.assert_run_build(tree)
        self.assert_test_builds(tree)

    def test_test_then_run_then_test(self):
        # build-asan/ and build-tsan/ follow the same path as build-test/
        # (test_run_then_test_then_run configures all three): here only it.
        tree = self.tree()
        quick = {"PSBENCH_NO_SANITIZE": "1"}
        self.script(tree, "test.sh", quick)
        self.assert_test_builds(tree, sanitizers=False)
        self.script(tree, "run.sh")
        self.assert_run_build(tree)
        self.assert_test_builds(tree, sanitizers=False)
        self.script(tree, "test.sh", quick)
        self.assert_test_builds(tree, sanitizers=False)
        self.assert_run_build(tree)

    def test_reconfigures_a_foreign_folder(self):
        """A folder configured with another compiler and build type (an
        older script, a hand-made build) is configured again, not reused:
        what issue 18 met (test.sh reusing run.sh's gcc build)."""
        if self.cc_test == self.cc_run:
            raise unittest.SkipTest("one compiler here (%s): nothing to switch between" % self.cc_run)
        tree = self.tree()
        for d, cc in (("build", self.cc_test), ("build-test", self.cc_run)):
            r = subprocess.run(["cmake", "-S", tree, "-B", os.path.join(tree, d), "-DCMAKE_C_COMPILER=" + cc,
                                "-DCMAKE_BUILD_TYPE=Debug", "-DPSBENCH_TESTS=OFF", "-DPSBENCH_CUDA=OFF"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=SCRIPT_TIMEOUT_S, env=clean_env())
            self.assertEqual(r.returncode, 0, r.stdout.decode()[-2000:])
        out = self.script(tree, "run.sh")
        self.assertIn("configuring it again", out)
        self.assert_run_build(tree)
        out = self.script(tree, "test.sh", {"PSBENCH_NO_SANITIZE": "1"})
        self.assertIn("configuring it again", out)
        c = cache(os.path.join(tree, "build-test"))
        self.assertEqual(real(c.get("CMAKE_C_COMPILER", "")), self.cc_test)
        self.assertEqual(c.get("CMAKE_BUILD_TYPE"), "RelWithDebInfo")
        self.assertEqual(c.get("PSBENCH_TESTS"), "ON")

    def test_options_set_again(self):
        """A build-test/ with test.sh's compiler and build type but other
        options (configured by hand without tests or the fuzz target) gets
        test.sh's options back: it names every one it relies on."""
        tree = self.tree()
        d = os.path.join(tree, "build-test")
        r = subprocess.run(["cmake", "-S", tree, "-B", d, "-DCMAKE_C_COMPILER=" + self.cc_test,
                            "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DPSBENCH_TESTS=OFF", "-DPSBENCH_FUZZ=OFF",
                            "-DPSBENCH_SANITIZE=ON", "-DPSBENCH_CUDA=OFF"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=SCRIPT_TIMEOUT_S, env=clean_env())
        self.assertEqual(r.returncode, 0, r.stdout.decode()[-2000:])
        self.script(tree, "test.sh", {"PSBENCH_NO_SANITIZE": "1"})
        c = cache(d)
        self.assertEqual(c.get("PSBENCH_TESTS"), "ON")
        self.assertEqual(c.get("PSBENCH_FUZZ"), "ON")
        self.assertEqual(c.get("PSBENCH_SANITIZE"), "OFF")

    def test_cuda_optional(self):
        """CUDA is optional at build time: PSBENCH_CUDA=OFF configures a
        CPU-only build where the toolkit is installed, and a toolkit
        without NCCL's header builds the CUDA paths without NCCL. (The
        builds themselves were checked by hand: configuring is this
        test's whole cost.)"""
        tree = self.tree()
        for extra, want in ((["-DPSBENCH_CUDA=OFF"], "psbench: CUDA OFF, NCCL OFF"),
                            (["-DNCCL_INCLUDE_DIR=" + os.path.join(self.tmp, "no-nccl")], ", NCCL OFF")):
            d = os.path.join(self.tmp, "b%d" % len(os.listdir(self.tmp)))
            r = subprocess.run(["cmake", "-S", tree, "-B", d, "-DCMAKE_C_COMPILER=" + self.cc_test,
                                "-DPSBENCH_TESTS=OFF"] + extra,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=SCRIPT_TIMEOUT_S, env=clean_env())
            out = r.stdout.decode("utf-8", "replace")
            self.assertEqual(r.returncode, 0, out[-2000:])
            self.assertIn(want, out)

    def test_packages(self):
        """run.sh's set has what building and running need and none of the
        test-only packages; test.sh's has both."""
        def pkgs(which):
            r = subprocess.run([os.path.join(SRC, "scripts", "install-deps.sh"), "--list", which],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30, env=clean_env())
            self.assertEqual(r.returncode, 0, r.stdout.decode())
            return r.stdout.decode().split()
        run, test, container = pkgs("run"), pkgs("test"), pkgs("container")
        # scripts/build-image.sh's own set: the container tools only.
        self.assertEqual(sorted(container), ["debootstrap", "podman", "runc"])
        self.assertEqual([p for p in container if p in run or p in test], [])
        for p in TEST_ONLY:
            self.assertNotIn(p, run)
            self.assertIn(p, test)
        for p in RUN_NEEDS:
            self.assertIn(p, run)
        self.assertEqual([p for p in run if p not in test], [])
        # The scripts ask for their own sets.
        for name, which in (("run.sh", "install-deps.sh run"), ("test.sh", "install-deps.sh test"),
                            ("build-image.sh", "install-deps.sh\" container")):
            with open(os.path.join(SRC, "scripts", name)) as f:
                self.assertIn(which, f.read(), name)


if __name__ == "__main__":
    psb.main()
