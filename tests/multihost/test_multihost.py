"""A psbench job across seven namespace hosts (mh.py): the master on head,
servers on ps1 and ps2, trainers on tr1..tr4, each started by hand with
--master and a token file, as on real hosts. The run completes; the nodes
API shows each node on its own host; the HTTP API answers from other
hosts' namespaces; every process exits 0.

Run (as root): PSBENCH_BIN=build-test /usr/bin/python3 tests/multihost/test_multihost.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mh  # noqa: E402
import psb  # noqa: E402


class MultihostRun(mh.MultihostCase):

    def test_run_across_hosts(self):
        m = self.start_master()
        servers, trainers = self.start_nodes()
        st = self.wait_phase(("done", "failed"), procs=[m] + servers + trainers)
        self.assertEqual(st["phase"], "done", st)
        self.assertEqual(st["nodes"], {"trainer": 4, "server": 2})
        for p in trainers + servers:
            self.assertEqual(p.wait(30), 0, p.describe())
        # Each node on its own host, as its own namespace's hostname says;
        # asked from a server's host and from a trainer's.
        for asker in ("ps2", "tr4"):
            nodes = self.http_json("/api/v1/nodes", host=asker)
            self.assertIsNotNone(nodes, "no nodes API from " + asker)
            hosts = sorted((n["role"], n["rank"], n["host"]) for n in nodes)
            self.assertEqual(hosts, sorted([("server", i, h) for i, h in enumerate(mh.SERVER_HOSTS)] +
                                           [("trainer", i, h) for i, h in enumerate(mh.TRAINER_HOSTS)]))
        code, body = self.http("/metrics", host="ps1")
        self.assertEqual(code, 200)
        self.assertIn('psbench_phase{phase="done"} 1', body)
        metrics = self.http_json("/api/v1/metrics", host="tr2")
        self.assertEqual(sorted(metrics["groups"]["trainer"]["ranks"]), ["0", "1", "2", "3"])
        m.signal(15)
        self.assertEqual(m.wait(20), 0, m.describe())
        with open(os.path.join(self.out_dir, "results.json")) as f:
            res = json.load(f)
        self.assertEqual(res["phase"], "done")
        self.assertIsNone(res["error"])
        for p in [m] + servers + trainers:
            self.assertNotIn(mh.TOKEN, p.stdout() + p.stderr(), p.name)


if __name__ == "__main__":
    psb.main()
