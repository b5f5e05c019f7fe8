"""Faults across namespace hosts (mh.py: master on head, servers on ps1 and
ps2, trainers on tr1..tr4, started by hand). For each fault: nothing
outlives the fault by more than --rpc-timeout and a few seconds, the node
at fault is named in /api/v1/status and in the last line of every process
that saw it, and no result is ever wrong (the synthetic trainers check every
element of every result they get, and exit non-zero on a mismatch).

  kill -9 of a trainer, a server, the master mid-run
  a trainer's link down for 2 s, then up: TCP retransmits, the run completes
  a trainer's link down for good: the master names it silent; the
      trainer itself ends by its own --rpc-timeout
  a server's link down for good: the master names it; the server ends when
      its reports to the master go unacknowledged for --rpc-timeout
  a trainer stopped (SIGSTOP): named as silent, like a host cut off
  50 ms added to one trainer's outgoing packets: the run completes and that
      trainer stands out in parameter_server_straggler_metric,trainer_lag_R

docs/operations.md states these rules for users.

Run (as root): PSBENCH_BIN=build-test /usr/bin/python3 tests/multihost/test_faults.py
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mh  # noqa: E402
import psb  # noqa: E402

RPC_TIMEOUT = 6
BLIP_RPC_TIMEOUT = 20
# After a fault is noticed: the master's 1 s hold, a trainer's 3 s wait for
# the master's verdict, process exit.
AFTER_S = RPC_TIMEOUT + 12
LONG_EPOCHS = 1500  # a pass of several seconds (more under ASan): the faults come 0.5 s in


# ctest runs this file in two shards (PSBENCH_SHARD, tests/CMakeLists.txt).
load_tests = mh.load_shard


class Faults(mh.MultihostCase):

    def start_job(self, epochs=LONG_EPOCHS):
        # --linger keeps the failed status up for the test to read; the
        # test then ends the linger with SIGTERM (the exit code stays).
        m = self.start_master(epochs=epochs, rpc_timeout=RPC_TIMEOUT)
        servers, trainers = self.start_nodes(rpc_timeout=RPC_TIMEOUT)
        self.wait_phase(("running",), procs=[m] + servers + trainers)
        time.sleep(0.5)
        return m, servers, trainers

    def assert_failed_naming(self, who, procs):
        """The status names `who`; then the master's linger is cut short."""
        st = self.wait_phase(("failed", "done"), timeout=AFTER_S, procs=procs)
        self.assertEqual(st["phase"], "failed", st)
        self.assertRegex(st["error"], "^" + who, st)
        procs[0].signal(signal.SIGTERM)
        return st

    def assert_all_end_naming(self, procs, who):
        self.wait_exit(procs, AFTER_S)
        for p in procs:
            self.assert_one_line_reason(p, who)

    # ---- kill -9 -------------------------------------------------------------

    def test_kill_trainer(self):
        m, servers, trainers = self.start_job()
        trainers[2].signal(signal.SIGKILL)
        who = r"trainer 2 \(tr3\)"
        self.assert_failed_naming(who, [m] + servers + trainers)
        self.assert_all_end_naming([m] + servers + trainers[:2] + trainers[3:], who)

    def test_kill_server(self):
        m, servers, trainers = self.start_job()
        servers[1].signal(signal.SIGKILL)
        who = r"server 1 \(ps2\)"
        self.assert_failed_naming(who, [m] + servers + trainers)
        self.assert_all_end_naming([m, servers[0]] + trainers, who)

    def test_kill_master(self):
        m, servers, trainers = self.start_job()
        m.signal(signal.SIGKILL)
        # No master, no status API: every node names the master it lost.
        self.assert_all_end_naming(servers + trainers, r"lost the master.*%s" % self.master_addr.replace(".", r"\."))

    # ---- links -------------------------------------------------------------------

    def test_link_blip_recovers(self):
        """Down for 2 s (well inside --rpc-timeout), then up: TCP's
        retransmissions carry on and the run completes correctly.

        TCP backs off exponentially while the link is down (0.2, 0.4,
        0.8, 1.6, 3.2 s …): a retransmission that falls just before the
        link and its route are back (later on a loaded host) waits for the
        next, up to 6 s after the blip began. --rpc-timeout 6 failed so
        beside a second copy of the suite; BLIP_RPC_TIMEOUT outlasts two
        more backoffs."""
        m = self.start_master(epochs=800, rpc_timeout=BLIP_RPC_TIMEOUT)
        servers, trainers = self.start_nodes(rpc_timeout=BLIP_RPC_TIMEOUT)
        self.wait_phase(("running",), procs=[m] + servers + trainers)
        tr3 = self.h["tr3"]
        tr3.link_down()
        time.sleep(2)
        tr3.link_up()
        # The blip was mid-run: the pass had not ended.
        st = self.status()
        self.assertEqual(st["phase"], "running", st)
        self.assertLess(st["progress"]["batches_done"], st["progress"]["batches_total"])
        st = self.wait_phase(("failed", "done"), timeout=120, procs=[m] + servers + trainers)
        self.assertEqual(st["phase"], "done", st)
        self.assertEqual(st["progress"]["batches_done"], st["progress"]["batches_total"])
        for p in servers + trainers:
            self.assertEqual(p.wait(30), 0, p.describe())
        m.signal(signal.SIGTERM)  # leave --linger early
        self.assertEqual(m.wait(30), 0, m.describe())

    def test_trainer_link_cut(self):
        m, servers, trainers = self.start_job()
        self.h["tr3"].link_down()
        who = r"trainer 2 \(tr3\)"
        self.assert_failed_naming(who, [m] + servers + trainers)
        others = [m] + servers + trainers[:2] + trainers[3:]
        self.assert_all_end_naming(others, who)
        # The cut-off trainer cannot hear the verdict: it ends by its own
        # timeout and says it heard nothing from the master.
        self.wait_exit([trainers[2]], AFTER_S)
        self.assert_one_line_reason(trainers[2], "timed out|lost the master", "master")

    def test_server_link_cut(self):
        m, servers, trainers = self.start_job()
        self.h["ps2"].link_down()
        who = r"server 1 \(ps2\)"
        self.assert_failed_naming(who, [m] + servers + trainers)
        self.assert_all_end_naming([m, servers[0]] + trainers, who)
        # The server itself: its reports go unacknowledged for
        # --rpc-timeout and it ends, naming the master it lost.
        self.wait_exit([servers[1]], AFTER_S)
        self.assert_one_line_reason(servers[1], "lost the master")

    def test_stopped_trainer_is_named(self):
        """SIGSTOP: the process lives, its connections stay open, it says
        nothing. The master names it once it has been silent too long; the
        others end naming it."""
        m, servers, trainers = self.start_job()
        trainers[1].signal(signal.SIGSTOP)
        self.addCleanup(trainers[1].signal, signal.SIGKILL)
        who = r"trainer 1 \(tr2\)"
        self.assert_failed_naming(who, [m] + servers + trainers)
        self.assert_all_end_naming([m] + servers + [trainers[0]] + trainers[2:], who)

    # ---- latency -------------------------------------------------------------------

    def test_delayed_trainer_is_the_straggler(self):
        how = self.h["tr3"].add_delay(50)
        m = self.start_master(epochs=5, rpc_timeout=30)
        servers, trainers = self.start_nodes(rpc_timeout=30)
        st = self.wait_phase(("failed", "done"), timeout=120, procs=[m] + servers + trainers)
        self.assertEqual(st["phase"], "done", st)
        for p in servers + trainers:
            self.assertEqual(p.wait(30), 0, p.describe())
        metrics = self.http_json("/api/v1/metrics", host="ps1")
        for rank, ms in metrics["groups"]["server"]["ranks"].items():
            lag = {r: ms["parameter_server_straggler_metric,trainer_lag_%d" % r]["p50"] for r in range(4)}
            # tr3 is trainer 2: 50 ms late on every push (delay by %s).
            self.assertGreaterEqual(lag[2], 40.0, (rank, how, lag))
            for r in (0, 1, 3):
                self.assertLess(lag[r], lag[2] / 4, (rank, how, lag))
            self.assertGreaterEqual(ms["parameter_server_straggler_metric,param_index_straggler"]["p50"], 40.0)
        code, prom = self.http("/metrics", host="tr1")
        self.assertEqual(code, 200)
        self.assertIn('metric="parameter_server_straggler_metric,trainer_lag_2"', prom)


if __name__ == "__main__":
    psb.main()
