"""The master's flags people reach for (issue 30): --dry-run's plan,
--bucket-cap-mb and --set overriding the configuration files (and refused
with the key and what it must be), --help's configuration IDs, and --local
picking free ports when its default ones are taken; numbers decimal and
checked in the type they are used in (issue 39).

Run: PSBENCH_BIN=build-test /usr/bin/python3 tests/integration/test_flags.py
"""
import errno
import json
import os
import re
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs")


class FlagTests(psb.PsbTestCase):

    def setUp(self):
        psb.PsbTestCase.setUp(self)
        self.model_cfg = os.path.join(self.reg.workdir, "models.json")
        with open(self.model_cfg, "w") as f:
            json.dump({"Tiny": {"model_class": "Synthetic",
                                "configurations": {"buckets": 3, "bucket_floats": 2000,
                                                   "sparse": False}}}, f)

    # Its masters run to completion with the test's flags alone
    # (psb.PsbTestCase.run_master).
    master_kw = dict(listen=False, linger=None)

    # ---- --dry-run ---------------------------------------------------------

    def test_dry_run_prints_the_plan_and_starts_nothing(self):
        # The control port is one a run would bind: a dry run must not.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            rc, out, err = self.run_master("--dry-run", "--ntrainer", "4", "--nserver", "2", "--model", "Tiny",
                                       "--model-config-path", self.model_cfg, "--listen",
                                       "127.0.0.1:%d" % port, "--http", "127.0.0.1:0")
        self.assertEqual(rc, 0, err)
        self.assertIn("dry run: nothing is started", out)
        self.assertIn("job: 4 trainer(s) (0 CUDA), 2 server(s) (0 CUDA)", out)
        self.assertIn("placement: seed (trainer r feeds server r / 2)", out)
        self.assertIn("  server 0 <- trainer(s) 0 1\n", out)
        self.assertIn("  server 1 <- trainer(s) 2 3\n", out)
        self.assertIn("buckets: 3 of 2000 floats (dense): 24000 bytes per trainer per step each way", out)
        self.assertIn("ports: control 127.0.0.1:%d, HTTP 127.0.0.1:0" % port, out)
        self.assertNotIn("control plane on", err)

    def test_dry_run_of_a_dummy_model_leaves_the_buckets_to_the_trainers(self):
        rc, out, err = self.run_master("--dry-run", "--ddp-hook", "allreduce_hook", "--bucket-cap-mb", "4",
                                   "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
        self.assertEqual(rc, 0, err)
        # allreduce_hook uses no server: the job has none, and says nothing of them.
        self.assertIn("placement: pure DDP: the trainers allreduce among themselves (gloo)", out)
        # (args: and plan: are for programs: every key, nserver 0 included.)
        words = [line for line in out.splitlines() if not line.startswith(("args: ", "plan: "))]
        self.assertNotIn("server", "\n".join(words))
        plan = json.loads([line for line in out.splitlines() if line.startswith("plan: ")][0][6:])
        self.assertEqual((plan["hook"], plan["uses_servers"], plan["nserver"], plan["bucket_cap_mb"]),
                         ("allreduce_hook", False, 0, 4.0))
        self.assertIn("bucket_cap_mb 4, first_bucket_mb 1", out)
        self.assertIn("the trainers' to know", out)

    def test_dry_run_of_batch_update_counts_the_linear_model(self):
        rc, out, err = self.run_master("--dry-run", "--trainer", "BatchUpdateTrainer", "--server",
                                   "BatchUpdateParameterServer", "--model", "BatchUpdateLinear", "--nserver", "2",
                                   "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
        self.assertEqual(rc, 0, err)
        self.assertIn("placement: every trainer feeds every server (batch-update", out)
        # configs/: Linear(100, 30): 3000 weights and 30 biases.
        self.assertIn("buckets: the Linear model's 3030 parameters, split over the 2 server(s): 12120 bytes", out)

    # ---- --set and --bucket-cap-mb -----------------------------------------

    def test_set_and_bucket_cap_override_the_files_and_are_recorded(self):
        out_dir = os.path.join(self.reg.workdir, "out")
        rc, out, err = self.run_master("--local", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                                   "--trainer", "DdpTrainer", "--nserver", "0", "--epochs", "1",
                                   "--bucket-cap-mb", "2", "--set", "trainer.momentum=0.5",
                                   "--set", "trainer.first_bucket_mb=0.5", "--set", "data.sample_count=40",
                                   "--out", out_dir, "--log-level", "warn")
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out_dir, "results.json")) as f:
            conf = json.load(f)["configuration"]
        self.assertEqual(conf["set"], {"trainer": {"momentum": 0.5, "first_bucket_mb": 0.5},
                                       "data": {"sample_count": 40}})
        self.assertEqual(conf["bucket_cap_mb"], 2)
        tconf = conf["resolved"]["trainer"]["configurations"]
        self.assertEqual((tconf["bucket_cap_mb"], tconf["momentum"], tconf["first_bucket_mb"]), (2, 0.5, 0.5))
        self.assertEqual(conf["resolved"]["data"]["configurations"]["sample_count"], 40)

    def test_set_refused_naming_the_key_and_what_it_must_be(self):
        cases = [
            (["--set", "trainer.momentum=2"],
             "--set trainer.momentum=2: trainer 'DdpRpcTrainer' (DdpTrainer): \"momentum\" must be a number "
             "in [0, 1), got 2\n"),
            (["--set", "trainer.lr=fast"],
             "--set trainer.lr=fast: trainer 'DdpRpcTrainer' (DdpTrainer): \"lr\" must be a number in "
             "(0, 3.40282346638529e+38], got \"fast\" (a string)\n"),
            (["--set", "trainer.speed=1"],
             "--set trainer.speed=1: trainer 'DdpRpcTrainer' (DdpTrainer) has no \"speed\" (it takes ddp_hook, "
             "lr, momentum, bucket_cap_mb, first_bucket_mb, compress, matrix_approximation_rank, "
             "start_powerSGD_iter, min_compression_rate, use_error_feedback, warm_start, "
             "orthogonalization_epsilon, random_seed, compression_stats_logging_frequency, powersgd_hook, "
             "hook_state, iteration_step, preprocess_data, create_criterion, create_ddp_model, "
             "create_optimizer)\n"),
            (["--set", "data.sparsity_percentage=100"],
             "--set data.sparsity_percentage=100: data 'DummyData' (DummyData): \"sparsity_percentage\" must be "
             "a whole number in 0..99, got 100\n"),
            (["--set", "server"], "--set: 'server' is not KIND.KEY=VALUE with KIND trainer, model, data or "
             "server (e.g. trainer.bucket_cap_mb=4)\n"),
            (["--bucket-cap-mb", "0"],
             "--bucket-cap-mb: must be a number in (0, 1048576], got 0.0\n"),
            (["--trainer", "HybridTrainer", "--model", "HybridModel", "--server", "EmbeddingParameterServer",
              "--bucket-cap-mb", "4"],
             "--bucket-cap-mb 4.0: trainer 'HybridTrainer' (HybridTrainer) has no \"bucket_cap_mb\""),
            # A DDP + RPC flag chose the server for a DummyModel: said so
            (["--model", "DummyModel", "--warmup-cycles", "1"],
             "model 'DummyModel' is DummyModel, but a flag of the DDP + RPC benchmark (--number-ps, "
             "--number-embeddings, --embedding-dim, --warmup-cycles or --rpc-pattern) selects that benchmark's "
             "server EmbeddingParameterServer, whose model is a HybridModel"),
        ]
        for args, want in cases:
            rc, out, err = self.run_master("--dry-run", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", *args)
            self.assertEqual(rc, 2, (args, out, err))
            self.assertEqual(err[:len("psbench-master: " + want)], "psbench-master: " + want, args)
            self.assertNotIn("dry run", out)

    # ---- --help ------------------------------------------------------------

    def test_numbers_are_decimal_and_checked_in_their_type(self):
        """Issue 39: every binary's numbers are decimal (no hex, no blanks,
        no "inf"), and checked in the type they are used in: an lr that a
        float holds as 0, a bucket cap below one byte, a wait below a
        millisecond are refused (exit 2, one line naming the flag), not
        run as 0."""
        master = [psb.bin_path("psbench-master"), "--dry-run", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"]
        server = [psb.bin_path("psbench-server"), "--standalone", "--trainers", "1", "--listen", "127.0.0.1:0"]
        trainer = [psb.bin_path("psbench-trainer"), "--master", "127.0.0.1:1"]
        cases = [
            (master + ["--lr", "1e-46"], "--lr: must be a number in (0, 3.40282346638529e+38], got 1e-46 (it is 0 as a "
                                         "float"),
            (master + ["--lr", "1e-39"], "(it is 0 as a float"),
            (master + ["--bucket-cap-mb", "0x10"], "--bucket-cap-mb: must be a number in (0, 1048576], got '0x10'"),
            (master + ["--bucket-cap-mb", "1e-7"], "got 1e-7 (less than 1 byte, it would be 0)"),
            (master + ["--set", "trainer.lr=1e-46"], '"lr" must be a number in (0, 3.40282346638529e+38], got 1e-46'),
            (master + ["--ntrainer", "0x2"], "--ntrainer: '0x2' is not a whole number"),
            (master + ["--ntrainer", " 2"], "--ntrainer: ' 2' is not a whole number"),
            (master + ["--rpc-timeout", "inf"], "--rpc-timeout: 'inf' is not a positive number of seconds"),
            (master + ["--rpc-timeout", "0.0005"], "0.0005 s is less than the 0.001 s psbench can wait"),
            (server + ["--lr", "1e-46"], "--lr: 1e-46: it is 0 as a float"),
            (server + ["--momentum", "0x1p-2"], "--momentum: '0x1p-2' is not a number in 0..1e6"),
            (server + ["--part", "+0/2"], "--part: '+0/2' is not P/N"),
            (trainer + ["--connect-timeout", "0x10"], "--connect-timeout: '0x10' is not a positive number of seconds"),
            (trainer + ["--device", "cuda: 1"], "--device 'cuda: 1' is not cpu, cuda or cuda:N"),
        ]
        for args, want in cases:
            with self.subTest(args=args[-2:]):
                rc, out, err = self.reg.run(args, timeout=30)
                self.assertEqual(rc, 2, (args, out, err))
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(want, err)
        # A config file's number is read as written or refused: 1e-400
        # would be 0 (a momentum of 0 runs as another setting).
        cfg = os.path.join(self.reg.workdir, "trainers.json")
        with open(cfg, "w") as f:
            f.write('{"T": {"trainer_class": "DdpTrainer", "configurations": {"ddp_hook": "rpc_hook", "lr": 0.1, '
                    '"momentum": 1e-400}}}')
        rc, out, err = self.run_master("--dry-run", "--trainer", "T", "--trainer-config-path", cfg)
        self.assertEqual(rc, 2, err)
        self.assertIn("trainer configurations %s:1:" % cfg, err)
        self.assertIn("1e-400 is too small for a number (it would be read as 0)", err)
        # The smallest an lr may be still runs as itself; a leading zero is decimal.
        rc, out, err = self.run_master("--dry-run", "--lr", "1.2e-38", "--ntrainer", "02", "--listen", "127.0.0.1:0",
                                   "--http", "127.0.0.1:0")
        self.assertEqual(rc, 0, err)
        self.assertIn('"ntrainer":2', out)

    def test_help_lists_the_configuration_ids_of_the_files_given(self):
        rc, out, err = self.run_master("--help", "--model-config-path", self.model_cfg)
        self.assertEqual(rc, 0, err)
        self.assertIn("Examples:\n", out)
        self.assertIn("\n  --model   Tiny\n", out)
        with open(os.path.join(CONFIGS, "trainer_configurations.json")) as f:
            ids = list(json.load(f))
        ids_part = out[out.index("\nConfiguration IDs"):]
        line = re.search(r"\n  --trainer (.*(?:\n {12}.*)*)\n", ids_part).group(1)
        self.assertEqual(re.split(r",\s+", line), ids)

    # ---- whole option names only (issue 40) ----------------------------------

    def test_whole_option_names_only_with_the_nearest_suggested(self):
        """A beginning of a long name ("--epoch" for --epochs) was taken
        as the name (getopt_long's abbreviations): every binary and
        subcommand refuses it at once, exit 2, naming the nearest name,
        and starts nothing."""
        master, server, trainer = (psb.bin_path(b) for b in ("psbench-master", "psbench-server",
                                                             "psbench-trainer"))
        sweep_out = os.path.join(self.reg.workdir, "sweep")
        cases = [
            ([master, "--dry-run", "--epoch", "2"], "psbench-master: unknown option --epoch: did you mean --epochs?"),
            ([master, "--dry-run", "--ntrain=2"], "psbench-master: unknown option --ntrain: did you mean --ntrainer?"),
            ([server, "--liste", "127.0.0.1:0"], "psbench-server: unknown option --liste: did you mean --listen?"),
            ([trainer, "--maste", "127.0.0.1:9", "--rank", "0"],
             "psbench-trainer: unknown option --maste: did you mean --master?"),
            ([master, "sweep", "--ntrainer", "1,2", "--epoch", "1", "--out", sweep_out],
             "psbench-master sweep: unknown option --epoch: did you mean --epochs? (psbench-master sweep --help)"),
            ([master, "sweep", "--ntrainer", "1,2", "--order-see", "3", "--out", sweep_out],
             "psbench-master sweep: unknown option --order-see: did you mean --order-seed? "
             "(psbench-master sweep --help)"),
            ([master, "diff", "--forc", "a.json", "b.json"],
             "psbench-master diff: unknown option --forc: did you mean --force?"),
        ]
        for args, line in cases:
            rc, out, err = self.reg.run(args)
            self.assertEqual(rc, 2, (args, err))
            self.assertEqual(err.splitlines()[0], line, args)
        self.assertFalse(os.path.exists(sweep_out))

    # ---- a port in use (issue 40) -------------------------------------------

    def test_a_port_in_use_names_its_flag_and_exits_2(self):
        """A --listen or --http address that is taken is a bad value of
        that flag: one line naming it, exit 2 (it was exit 1 and a bare
        "cannot listen on ..."), in the master and in a standalone server;
        nothing is started."""
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        self.addCleanup(taken.close)
        port = taken.getsockname()[1]
        addr = "127.0.0.1:%d" % port
        hint = "Address already in use (another process has the port: give another one, or port 0 for any free one)"
        cases = [
            ([psb.bin_path("psbench-master"), "--listen", addr, "--http", "127.0.0.1:0"],
             "psbench-master: --listen %s: cannot listen there: %s" % (addr, hint)),
            ([psb.bin_path("psbench-master"), "--local", "--listen", "127.0.0.1:0", "--http", addr],
             "psbench-master: --http %s: cannot listen there: %s" % (addr, hint)),
            ([psb.bin_path("psbench-server"), "--standalone", "--trainers", "1", "--listen", addr],
             "psbench-server: --listen %s: cannot listen there: %s" % (addr, hint)),
        ]
        for args, line in cases:
            rc, out, err = self.reg.run(args)
            self.assertEqual(rc, 2, (args, err))
            self.assertEqual(err.strip().splitlines()[-1], line, args)
            self.assertNotIn("[trainer ", out + err)

    # ---- --local's ports ---------------------------------------------------

    def test_local_picks_free_ports_when_the_defaults_are_taken(self):
        # The test holds both ports itself: one held by someone else (a
        # second copy of this suite, say) may be let go before the master
        # binds, so it waits its turn for each (a while at most).
        held = []
        deadline = time.monotonic() + 120
        for port in (29500, 8080):
            while True:
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", port))
                    s.listen(1)
                    held.append(s)
                    break
                except OSError as e:
                    s.close()
                    self.assertEqual(e.errno, errno.EADDRINUSE)
                    if time.monotonic() > deadline:
                        for h in held:
                            h.close()
                        self.skipTest("port %d stayed taken by another process for 120 s" % port)
                    time.sleep(0.2)
        try:
            rc, out, err = self.run_master("--local", "--model", "Tiny", "--model-config-path", self.model_cfg,
                                       "--epochs", "1")
        finally:
            for s in held:
                s.close()
        self.assertEqual(rc, 0, err)
        m = re.search(r"control port 29500 on 127\.0\.0\.1 is taken: using (\d+) instead", err)
        self.assertTrue(m, err)
        self.assertNotEqual(m.group(1), "29500")
        m = re.search(r"HTTP port 8080 on 127\.0\.0\.1 is taken: using (\d+) instead", err)
        self.assertTrue(m, err)
        self.assertIn("dashboard: http://127.0.0.1:%s/\n" % m.group(1), out)


if __name__ == "__main__":
    unittest.main()
