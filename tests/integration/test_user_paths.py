"""Paths a user names, read and written (issues 27 and 39; shared/userpath.h).

Read: a configuration file, a --token-file of any binary, a results.json
given to `diff` that is not a regular file (a FIFO, a directory, a device)
is refused at once, naming the path and what it is: a FIFO used to block
the master for ever without a word, a directory read as "'[' or '{'
expected".

Written: --out of the master, --params-out and --summary-json of a trainer,
diff's --csv are checked before any work (exit 2, one line): a file where a
folder must be, a folder or a FIFO where a file must be. A run must not
execute for minutes and then end with "cannot write".

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_user_paths.py
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

# Every refusal here comes before any work: far below this. A FIFO that
# blocked would end the command here instead (subprocess.TimeoutExpired).
QUICK_S = 20


class UserPaths(psb.PsbTestCase):

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.tmp = self.reg.workdir
        self.fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(self.fifo)
        self.dir = os.path.join(self.tmp, "adir")
        os.mkdir(self.dir)
        self.model_cfg = os.path.join(self.tmp, "models.json")
        with open(self.model_cfg, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 2, "bucket_floats": 64}}}, f)
        self.token = os.path.join(self.tmp, "token")
        with open(self.token, "w") as f:
            f.write("secret-token\n")
        os.chmod(self.token, 0o600)

    def master_args(self, *extra):
        return [psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                "--linger", "0", "--model", "Tiny", "--model-config-path", self.model_cfg, "--epochs", "1"] + list(extra)

    def refused_at_once(self, args, want, code=2):
        """args exits `code` at once with one line on stderr that ends with
        `want`; nothing was run (no child's output, no args line)."""
        rc, out, err = self.reg.run(args, timeout=QUICK_S)
        lines = err.strip().splitlines()
        self.assertEqual(rc, code, (args, out, err))
        self.assertEqual(len(lines), 1, (args, err))
        self.assertTrue(lines[0].endswith(want), (args, lines[0], want))
        self.assertNotIn("args:", out)
        self.assertNotIn("[trainer", err)
        return lines[0]

    # ---- read ------------------------------------------------------------------

    def test_configuration_paths(self):
        """Each of the four configuration paths: a FIFO, a directory and a
        character device are refused naming the path and what it is."""
        for flag, what in (("--data-config-path", "data"), ("--model-config-path", "model"),
                           ("--trainer-config-path", "trainer"), ("--server-config-path", "server")):
            for path, kind in ((self.fifo, "a FIFO (named pipe)"), (self.dir, "a directory"),
                               ("/dev/null", "a character device")):
                with self.subTest(flag=flag, path=path):
                    self.refused_at_once(self.master_args(flag, path),
                                 "cannot read %s configurations %s: %s, not a regular file" % (what, path, kind))

    def test_token_file(self):
        """--token-file of the master, a server and a trainer: a FIFO or a
        directory is refused naming it; the regular file still works."""
        cmds = {
            "psbench-master": self.master_args(),
            "psbench-server": [psb.bin_path("psbench-server"), "--standalone", "--trainers", "1",
                               "--listen", "127.0.0.1:0"],
            "psbench-trainer": [psb.bin_path("psbench-trainer"), "--master", "127.0.0.1:1", "--connect-timeout", "1"],
        }
        for prog, base in cmds.items():
            for path, kind in ((self.fifo, "a FIFO (named pipe)"), (self.dir, "a directory")):
                with self.subTest(prog=prog, path=path):
                    line = self.refused_at_once(base + ["--token-file", path],
                                        "--token-file %s: %s, not a regular file" % (path, kind), code=2)
                    self.assertTrue(line.startswith(prog + ": "), line)

    def test_diff_inputs(self):
        diff = [psb.bin_path("psbench-master"), "diff"]
        res = os.path.join(self.tmp, "results.json")
        with open(res, "w") as f:
            json.dump({"phase": "done", "groups": {}}, f)
        self.refused_at_once(diff + [self.fifo, res], "cannot read %s: a FIFO (named pipe), not a regular file" % self.fifo,
                     code=1)
        self.refused_at_once(diff + [res, self.dir], "cannot read %s: a directory, not a regular file" % self.dir, code=1)

    def test_sweep_inputs(self):
        """Issue 39: the files a sweep reads, named or inside a folder named:
        `sweep --report DIR` with DIR/sweep.json a FIFO (it hung), a folder
        (it said "'[' or '{' expected"), a device; --sweep-file the same.
        Each refused at once, one line naming the path and what it is."""
        sweep = [psb.bin_path("psbench-master"), "sweep"]
        for kind, make in (("a FIFO (named pipe)", os.mkfifo), ("a directory", os.mkdir),
                           ("a character device", lambda p: os.symlink("/dev/null", p))):
            with self.subTest(kind=kind):
                d = os.path.join(self.tmp, "rep-" + kind.split()[1])
                os.mkdir(d)
                make(os.path.join(d, "sweep.json"))
                self.refused_at_once(sweep + ["--report", d], "--report %s: cannot read %s/sweep.json: %s, not a regular file"
                             % (d, d, kind), code=1)
        for path, kind in ((self.fifo, "a FIFO (named pipe)"), (self.dir, "a directory"),
                           ("/dev/zero", "a character device")):
            with self.subTest(path=path):
                self.refused_at_once(sweep + ["--local", "--sweep-file", path],
                             "--sweep-file %s: %s, not a regular file" % (path, kind))

    def test_read_size_is_bounded(self):
        """A file larger than psbench reads (256 MiB; a sparse one here) is
        refused from its size at once, not read into memory: a sweep file, a
        configuration file, a diff input, a sweep.json under --report."""
        huge = os.path.join(self.tmp, "huge.json")
        with open(huge, "w") as f:
            f.truncate((256 << 20) + 1)
        want = "larger than 256 MiB (the most psbench reads of a file)"
        self.refused_at_once([psb.bin_path("psbench-master"), "sweep", "--local", "--sweep-file", huge],
                     "--sweep-file %s: %s" % (huge, want))
        self.refused_at_once(self.master_args("--model-config-path", huge),
                     "cannot read model configurations %s: %s" % (huge, want))
        res = os.path.join(self.tmp, "results.json")
        with open(res, "w") as f:
            json.dump({"phase": "done", "groups": {}}, f)
        self.refused_at_once([psb.bin_path("psbench-master"), "diff", res, huge], "cannot read %s: %s" % (huge, want), code=1)
        rep = os.path.join(self.tmp, "rep")
        os.mkdir(rep)
        os.link(huge, os.path.join(rep, "sweep.json"))
        self.refused_at_once([psb.bin_path("psbench-master"), "sweep", "--report", rep],
                     "cannot read %s/sweep.json: %s" % (rep, want), code=1)

    # ---- written ----------------------------------------------------------------

    def test_master_out(self):
        """--out: an existing file (even an executable one, which passed the
        old check), a folder or FIFO where results.json goes, a file where
        --runs' run-001/ goes, a file among its parents: refused at start."""
        exe = os.path.join(self.tmp, "exe")
        with open(exe, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(exe, 0o755)
        self.refused_at_once(self.master_args("--out", exe), "--out %s: %s is a regular file, not a directory" % (exe, exe))
        self.refused_at_once(self.master_args("--out", exe + "/sub"),
                     "--out %s/sub: %s is a regular file, not a directory" % (exe, exe))
        out = os.path.join(self.tmp, "out")
        os.makedirs(os.path.join(out, "results.json"))
        self.refused_at_once(self.master_args("--out", out),
                     "--out %s: %s/results.json is a directory, not a regular file" % (out, out))
        out2 = os.path.join(self.tmp, "out2")
        os.makedirs(out2)
        os.mkfifo(os.path.join(out2, "server.csv"))
        self.refused_at_once(self.master_args("--out", out2),
                     "--out %s: %s/server.csv is a FIFO (named pipe), not a regular file" % (out2, out2))
        runs = os.path.join(self.tmp, "runs")
        os.makedirs(runs)
        open(os.path.join(runs, "run-001"), "w").close()
        self.refused_at_once(self.master_args("--out", runs, "--runs", "2"),
                     "--out %s: %s/run-001 is a regular file, not a directory" % (runs, runs))
        # A missing folder is made, parents too, and the run writes there.
        fresh = os.path.join(self.tmp, "a", "b", "c")
        rc, out, err = self.reg.run(self.master_args("--out", fresh), timeout=120)
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.isfile(os.path.join(fresh, "results.json")))
        self.assertEqual([n for n in os.listdir(fresh) if ".tmp." in n], [])

    def test_trainer_outputs(self):
        """--params-out (with a master, and standalone) and --summary-json:
        refused before the trainer connects to anything."""
        target = os.path.join(self.tmp, "token")  # a regular file: no folder under it
        with_master = [psb.bin_path("psbench-trainer"), "--master", "127.0.0.1:1", "--connect-timeout", "1"]
        standalone = [psb.bin_path("psbench-trainer"), "--server", "127.0.0.1:1", "--rank", "0",
                      "--connect-timeout", "1"]
        cases = ((with_master + ["--params-out", self.dir], "--params-out %s: %s is a directory, not a regular file"
                  % (self.dir, self.dir)),
                 (with_master + ["--params-out", target + "/p.bin"],
                  "--params-out %s/p.bin: %s is a regular file, not a directory" % (target, target)),
                 (standalone + ["--model", "batch-update", "--params-out", self.fifo],
                  "--params-out %s: %s is a FIFO (named pipe), not a regular file" % (self.fifo, self.fifo)),
                 (standalone + ["--model", "synthetic", "--summary-json", self.dir],
                  "--summary-json %s: %s is a directory, not a regular file" % (self.dir, self.dir)))
        for args, want in cases:
            with self.subTest(args=args[-2:]):
                self.refused_at_once(args, "psbench-trainer: " + want)
        # A missing folder is made at start.
        made = os.path.join(self.tmp, "new", "dir")
        rc, out, err = self.reg.run(with_master + ["--params-out", os.path.join(made, "p.bin")], timeout=QUICK_S)
        self.assertNotEqual(rc, 0)
        self.assertNotIn("--params-out", err)
        self.assertTrue(os.path.isdir(made))
        self.assertEqual(os.listdir(made), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
