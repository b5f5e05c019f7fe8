"""Big embedding tables and slow starts (issue 19).

- A table whose initialisation takes longer than --rpc-timeout (3 GiB
  here: about 8 s to fill at start on a small host, about 2.6 s again at the
  reset between the warm-up and the timed pass, when the master watches
  every node's heartbeat) runs to done with --rpc-timeout 4 (eight
  missed heartbeats: a loaded host may stall a process for a second or
  two, and the fill at start must still outlast it): the server
  keeps its heartbeat going while it fills the table in slices, and the
  master's status shows the progress (`servers_initialising`).
- Tables that cannot fit their host's memory are refused at assignment,
  with the sizes, before any server allocates; a standalone server refuses
  such a table at start. The host's memory is made small for the test with
  PSBENCH_TEST_MEM_BYTES (a test-only override of what servers read from
  /proc/meminfo), so that nothing large is ever allocated.

Run: PSBENCH_BIN=build /usr/bin/python3 tests/integration/test_big_table.py
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import http_json  # noqa: E402

MIB = 1 << 20
RPC_TIMEOUT_S = 4


class BigTable(psb.PsbTestCase):

    # Its masters run their job --local (psb.PsbTestCase.master).
    master_kw = dict(local=True)

    def test_slow_table_keeps_the_heartbeat(self):
        rows, cols = 3 << 19, 512  # 3 * 2^28 floats: 3 GiB
        total = rows * cols * 4
        # psbench's RPC pattern: the seed's would step the whole 3 GiB table
        # (and hold a second one, its dense gradient) at every update, for
        # longer than the 4 s this test allows; the fill is what it checks.
        m = self.master("--number-trainers", "1", "--number-ps", "1", "--number-embeddings", str(rows),
                        "--embedding-dim", str(cols), "--epochs", "1", "--warmup-cycles", "1",
                        "--rpc-timeout", str(RPC_TIMEOUT_S), "--rpc-pattern", "psbench")
        seen = []  # (phase, done_bytes) while a table was being filled
        fields = set()  # whether the status had servers_initialising
        deadline = time.monotonic() + 600
        rc = None
        while time.monotonic() < deadline:
            try:
                st = http_json(m.http + "/api/v1/status")
            except (OSError, AssertionError):
                st = None
            if st:
                fields.add("servers_initialising" in st)
                for s in st.get("servers_initialising", []):
                    self.assertEqual(s["rank"], 0, st)
                    self.assertEqual(s["total_bytes"], total, st)
                    self.assertLessEqual(s["done_bytes"], total, st)
                    seen.append((st["phase"], s["done_bytes"]))
            rc = m.returncode
            if rc is not None:
                break
            time.sleep(0.2)
        self.assertIsNotNone(rc, "the run did not end:\n" + m.describe())
        self.assertEqual(rc, 0, m.describe())
        self.assertIn("phase done", m.stderr())
        self.assertEqual(fields, {True}, "every status lists servers_initialising")
        # The fill at start outlasted --rpc-timeout, so the run was done
        # only because the server's heartbeat went on while it filled.
        fills = re.findall(r"embedding table ready \(3 GiB in ([\d.]+) s\)", m.stderr())
        self.assertTrue(fills, m.stderr())
        if float(fills[0]) <= RPC_TIMEOUT_S:
            sys.stderr.write("note: the table filled in %s s here, within --rpc-timeout %d: the heartbeat during "
                             "the fill was not put to the test on this host\n" % (fills[0], RPC_TIMEOUT_S))
        # Progress was shown while the table was filled: at start (waiting)
        # and again at the reset after the warm-up.
        at_start = [d for ph, d in seen if ph == "waiting"]
        at_reset = [d for ph, d in seen if ph == "warmup"]
        self.assertTrue(any(0 < d < total for d in at_start), seen)
        self.assertTrue(at_reset, seen)
        self.assertTrue(sorted(at_start) == at_start, "progress goes forward: %r" % at_start)

    def test_tables_over_host_memory_refused_at_assignment(self):
        rows, cols = 1 << 18, 256  # 2^26 floats: 256 MiB per server
        env = psb.base_env({"PSBENCH_TEST_MEM_BYTES": str(400 * MIB)})
        m = self.master("--number-trainers", "1", "--number-ps", "2", "--number-embeddings", str(rows),
                        "--embedding-dim", str(cols), "--epochs", "1", "--warmup-cycles", "1", env=env)
        try:
            rc = m.wait(60)
        except subprocess.TimeoutExpired:
            self.fail("the run was not refused:\n" + m.describe())
        self.assertEqual(rc, 1, m.describe())
        last = m.stderr().strip().splitlines()[-1]
        self.assertIn("2 tables of 256 MiB, each with its dense gradient of the same size (rpc_pattern seed)", last)
        self.assertIn("on a host with 400 MiB", last)
        # Refused before any server allocated its table; each server's last
        # line is the master's verdict.
        self.assertNotIn("initialising the embedding table", m.stderr())
        for r in (0, 1):
            self.assertIn("[server %d] psbench-server: the run failed: embedding tables too big" % r, m.stderr())

    def test_tables_that_fit_are_not_refused(self):
        rows, cols = 1 << 10, 256  # 1 MiB per server
        env = psb.base_env({"PSBENCH_TEST_MEM_BYTES": str(400 * MIB)})
        m = self.master("--number-trainers", "1", "--number-ps", "2", "--number-embeddings", str(rows),
                        "--embedding-dim", str(cols), "--epochs", "1", "--warmup-cycles", "1", env=env)
        self.assertEqual(m.wait(120), 0, m.describe())

    def test_standalone_refuses_a_table_too_big(self):
        env = psb.base_env({"PSBENCH_TEST_MEM_BYTES": str(100 * MIB)})
        s = self.reg.start([psb.bin_path("psbench-server"), "--standalone", "--trainers", "1", "--listen",
                            "127.0.0.1:0", "--kind", "embedding", "--num-embeddings", str(1 << 20),
                            "--embedding-dim", "64"], name="server", env=env)
        try:
            rc = s.wait(15)
        except subprocess.TimeoutExpired:
            self.fail("the server took the table:\n" + s.describe())
        self.assertEqual(rc, 2, s.describe())
        last = s.stderr().strip().splitlines()[-1]
        self.assertIn("256 MiB", last)
        self.assertIn("100 MiB", last)


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
