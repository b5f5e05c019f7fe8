"""Install and package: `cmake --install` into a fresh prefix, and the .deb
that CPack builds, unpacked with dpkg-deb into a fresh directory. From
each, the installed psbench-master runs a --local job from an unrelated
working directory with PSBENCH_CONFIG_DIR unset: it must find its configs
in <prefix>/share/psbench/configs (relative to its own path) and start the
installed server and trainers beside it.

CUDA is optional: no installed binary links the CUDA runtime, cuBLAS or
NCCL (they are loaded on first use, shared/gpu/cudaload.h), the jobs run with
those libraries hidden from the loader (tests/tools/hide-cuda-libs.sh: as
root, in a mount namespace), and there the installed trainer's --device
cuda names the missing soname. The licence (BSD-3-Clause, LICENSE) is in
the repository, in the installed tree's share/doc/psbench and in the .deb
(its listing, dpkg-deb -c), with the Debian copyright file that also
carries uPlot's MIT notice. The .deb's Depends is checked against what
its binaries need (readelf -d: every NEEDED library's Debian package), so
that the test follows the build, whatever the compiler and linker decided;
the CUDA libraries are Recommends only.

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_install.py
(PSBENCH_BIN is the configured build directory, binaries already built.)
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

BINARIES = ("psbench-master", "psbench-server", "psbench-trainer", "psbench-node")
SCRIPTS = ("psbench-slurm",)  # each srun task's role under Slurm (test_slurm.py)
CONFIGS = ("benchmark_configurations.json", "data_configurations.json",
           "model_configurations.json", "server_configurations.json",
           "trainer_configurations.json", "grafana-dashboard.json", "prometheus.yml",
           "slurm/psbench.sbatch")
JOB_TIMEOUT = 60
HIDE_CUDA = os.path.join(psb.HERE, "..", "tools", "hide-cuda-libs.sh")
CUDA_SONAME = re.compile(r"^lib(cudart|cublas|cublasLt|nccl)\.so")


SOURCE = os.path.join(psb.HERE, "..", "..")


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def needed(binary):
    """The NEEDED entries of an ELF file (readelf -d)."""
    out = subprocess.run(["readelf", "-d", binary], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         check=True).stdout.decode()
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def library_path(soname):
    """Where the loader finds soname (ld.so's cache; this machine's
    architecture first), or None."""
    out = subprocess.run(["ldconfig", "-p"], stdout=subprocess.PIPE, check=True).stdout.decode()
    found = []
    for line in out.splitlines()[1:]:
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)$", line)
        if m and m.group(1) == soname:
            found.append((os.uname().machine.replace("_", "-") not in m.group(2), m.group(3)))
    return sorted(found)[0][1] if found else None


def owning_package(path):
    """The Debian package that owns a library file, trying the path as
    given, its real path and the /usr-merged twin (/lib <-> /usr/lib)."""
    cands = [path, os.path.realpath(path)]
    for c in list(cands):
        if c.startswith("/usr/lib/"):
            cands.append(c[len("/usr"):])
        elif c.startswith("/lib/"):
            cands.append("/usr" + c)
    for c in cands:
        r = subprocess.run(["dpkg", "-S", c], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if r.returncode == 0:
            # "libjansson4:amd64: /usr/lib/x86_64-linux-gnu/libjansson.so.4"
            return r.stdout.decode().split(":")[0].strip()
    return None


def shlib_package(pkg, soname):
    """The package a binary that needs soname depends on, as the owning
    package's own symbols or shlibs file says (what dpkg-shlibdeps uses:
    e.g. libopenblas.so.0, owned by libopenblas0-pthread, gives
    libopenblas0), else the owning package itself."""
    m = re.match(r"^(.*)\.so\.(.*)$", soname)
    for ctl in ("symbols", "shlibs"):
        r = subprocess.run(["dpkg-query", "--control-show", pkg, ctl], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            continue
        for line in r.stdout.decode().splitlines():
            f = line.split()
            if ctl == "symbols" and len(f) >= 2 and f[0] == soname:
                return f[1]
            if ctl == "shlibs" and m and len(f) >= 3 and f[0] == m.group(1) and f[1] == m.group(2):
                return f[2]
    return pkg


def hidden_cuda(args):
    """args run with the CUDA libraries hidden, or (None, why) where that
    cannot be done here (not root, no namespaces, no CUDA to hide)."""
    r = subprocess.run([HIDE_CUDA, "true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode == 77:
        return None, r.stdout.decode().strip()
    if r.returncode != 0:
        raise AssertionError("hide-cuda-libs.sh: %s" % r.stdout.decode())
    return [HIDE_CUDA] + list(args), None


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

    def run_ok(self, args, timeout=120, cwd=None):
        r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, "%s:\n%s" % (" ".join(args), out[-4000:]))
        return out

    def check_tree(self, prefix):
        """bin/ holds exactly the four binaries and psbench-slurm,
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
                self.assertFalse(f.startswith(("test_", "fuzz_", "bare-floor", "mem-floor")),
                                 os.path.join(root, f))
        return confdir

    def check_licence(self, prefix):
        """share/doc/psbench holds LICENSE as the repository has it and the
        copyright file in Debian's machine-readable format: psbench's
        BSD-3-Clause and uPlot's MIT notice, each licence text whole."""
        doc = os.path.join(prefix, "share", "doc", "psbench")
        licence = read_text(os.path.join(SOURCE, "LICENSE"))
        self.assertEqual(read_text(os.path.join(doc, "LICENSE")), licence)
        text = read_text(os.path.join(doc, "copyright"))
        self.assertTrue(text.startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/"
                                        "1.0/\n"), text[:200])
        paragraphs = text.split("\n\n")
        files = {}
        licences = {}
        for p in paragraphs:
            fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", p, re.M))
            if "Files" in fields:
                files[fields["Files"]] = fields
            elif "License" in fields and "Format" not in fields:
                # The text: the continuation lines, " ." for an empty line.
                body = [line[1:] for line in p.split("\n")[1:]]
                licences[fields["License"]] = "\n".join("" if line == "." else line for line in body)
        self.assertEqual(files["*"]["License"], "BSD-3-Clause")
        self.assertEqual(files["*"]["Copyright"], "2026, the psbench authors")
        self.assertEqual(files["web/vendor/uplot/*"]["License"], "Expat")
        self.assertIn("Leon Sorokin", files["web/vendor/uplot/*"]["Copyright"])
        self.assertEqual(licences["BSD-3-Clause"].strip(), licence.strip())
        self.assertEqual(licences["Expat"].strip(),
                         read_text(os.path.join(SOURCE, "web", "vendor", "uplot", "LICENSE")).strip())

    def test_licence_in_the_repository(self):
        """LICENSE: the BSD 3-Clause License, the psbench authors', named
        in the README."""
        licence = read_text(os.path.join(SOURCE, "LICENSE"))
        self.assertTrue(licence.startswith("BSD 3-Clause License\n\nCopyright (c) 2026, the psbench authors\n"))
        self.assertIn("3. Neither the name of the copyright holder nor the names of its", licence)
        readme = read_text(os.path.join(SOURCE, "README.md"))
        self.assertIn("BSD 3-Clause License", readme)
        self.assertIn("`LICENSE`", readme)
        with open(os.path.join(self.build, "CPackConfig.cmake")) as f:
            self.assertRegex(f.read(), r'set\(CPACK_RESOURCE_FILE_LICENSE "[^"]*/LICENSE"\)')

    def check_no_cuda_linked(self, prefix):
        """No installed binary links a CUDA library: they start without
        CUDA, which is loaded only when a CUDA path is taken."""
        for b in BINARIES:
            libs = needed(os.path.join(prefix, "bin", b))
            self.assertEqual([n for n in libs if CUDA_SONAME.match(n)], [], (b, libs))

    def check_device_cuda_hidden(self, prefix):
        """Where this build has CUDA and the libraries can be hidden: the
        installed trainer's --device cuda names the runtime's soname."""
        if cache_value(self.build, "PSBENCH_HAVE_NCCL") != "ON":
            return
        args, why = hidden_cuda([os.path.join(prefix, "bin", "psbench-trainer"), "--device", "cuda",
                                 "--server", "127.0.0.1:9", "--rank", "0", "--model", "synthetic"])
        if not args:
            print("--device cuda with the CUDA libraries hidden: not checked (%s)" % why)
            return
        r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=30, env=psb.base_env())
        err = r.stderr.decode().strip()
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(err, r"^psbench-trainer: --device cuda: libcudart\.so\.[0-9]+ not found "
                              r"\(install the CUDA runtime or use --device cpu\)$")

    def run_installed_job(self, prefix, confdir):
        """The installed master runs a --local job from a fresh working
        directory without PSBENCH_CONFIG_DIR, with the CUDA libraries
        hidden from the loader where that can be done; returns
        results.json."""
        cwd = tempfile.mkdtemp(dir=self.tmp, prefix="cwd-")
        out = os.path.join(cwd, "out")
        env = psb.base_env()
        env.pop("PSBENCH_CONFIG_DIR", None)
        log = os.path.join(cwd, "master.log")
        args = [os.path.join(prefix, "bin", "psbench-master"), "--local", "--listen", "127.0.0.1:0",
                "--http", "127.0.0.1:0", "--linger", "0", "--epochs", "1", "--model", "Synthetic",
                "--out", out]
        hidden, why = hidden_cuda(args)
        if hidden:
            args = hidden
        else:
            print("the job ran with the CUDA libraries visible (%s)" % why)
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
        self.run_ok([self.cmake, "--install", self.build, "--prefix", prefix])
        confdir = self.check_tree(prefix)
        self.check_licence(prefix)
        self.check_no_cuda_linked(prefix)
        self.run_installed_job(prefix, confdir)
        self.check_device_cuda_hidden(prefix)

    def test_deb(self):
        if not self.cpack or not self.dpkg_deb:
            raise unittest.SkipTest("cpack or dpkg-deb not found: the .deb is not built")
        pkgdir = os.path.join(self.tmp, "pkg")
        self.run_ok([self.cpack, "-G", "DEB", "-B", pkgdir], cwd=self.build, timeout=300)
        debs = glob.glob(os.path.join(pkgdir, "psbench_*.deb"))
        self.assertEqual(len(debs), 1, os.listdir(pkgdir))
        deb = debs[0]
        fields = {f: self.run_ok([self.dpkg_deb, "-f", deb, f]).strip()
                  for f in ("Package", "Depends")}
        recommends = subprocess.run([self.dpkg_deb, "-f", deb, "Recommends"], stdout=subprocess.PIPE,
                                    check=True).stdout.decode().strip()
        self.assertEqual(fields["Package"], "psbench")
        depends = [d.strip().split(" ")[0] for d in fields["Depends"].split(",")]
        # CUDA and NCCL are optional: never required, so that the package
        # installs on a machine without them (or without a GPU driver).
        for d in depends:
            self.assertNotRegex(d, "cuda|nccl|nvidia|cublas", fields["Depends"])
        if cache_value(self.build, "PSBENCH_HAVE_NCCL") == "ON":
            for r in ("libnccl2", "cuda-cudart-", "libcublas-"):
                self.assertIn(r, recommends)
        # The licence and the copyright file where Debian's policy puts them.
        listing = self.run_ok([self.dpkg_deb, "-c", deb])
        paths = [line.split()[-1] for line in listing.splitlines() if line.strip()]
        for f in ("./usr/share/doc/psbench/LICENSE", "./usr/share/doc/psbench/copyright"):
            self.assertIn(f, paths, listing)
        # The fresh prefix: the package's tree unpacked in an empty directory.
        root = os.path.join(self.tmp, "root")
        self.run_ok([self.dpkg_deb, "-x", deb, root])
        prefix = os.path.join(root, "usr")
        # Depends holds the package of every library the packaged binaries
        # need (what the link decided: with --as-needed, a library used
        # only through inline functions is not needed at all).
        self.check_no_cuda_linked(prefix)
        for b in BINARIES:
            for soname in needed(os.path.join(prefix, "bin", b)):
                path = library_path(soname)
                self.assertIsNotNone(path, "%s needs %s, which the loader does not know" % (b, soname))
                owner = owning_package(path)
                self.assertIsNotNone(owner, "no Debian package owns %s (%s, needed by %s)" % (path, soname, b))
                pkg = shlib_package(owner, soname)
                self.assertIn(pkg, depends, "%s needs %s from %s: not in Depends %s" %
                              (b, soname, pkg, fields["Depends"]))
        confdir = self.check_tree(prefix)
        self.check_licence(prefix)
        self.assertEqual(sorted(os.listdir(root)), ["usr"])
        self.run_installed_job(prefix, confdir)
        self.check_device_cuda_hidden(prefix)


if __name__ == "__main__":
    psb.main()
