#!/usr/bin/env python3
"""The test-only loop transport (issue 41: a transport is a file of its own
and a line in each role's registry; server/xport_loop.c and
trainer/xport_loop.c, built with the tests): TCP on the loopback
interface, asked for by name (`link` "loop" in the hello, named back in
the welcome). A whole job trains over it the same bits as over TCP, the
master reports each link's transport by its name, and a hello asking for it
from another address, or on a server's Unix socket, is refused."""
import os
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402
from psb import dense_payload, dense_push, expected_dense_mean, parse_dense  # noqa: E402


def outward_address():
    """An address of this host that is not a loopback one (None: none)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 9))  # no packet: only picks the route's source
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


class Loop(psb.PsbTestCase):
    def test_round_over_loop_by_hand(self):
        """A hello asking for loop from 127.0.0.1 is welcomed with `link`
        "loop"; pushes travel inline and the mean is the kind's rule."""
        s = self.reg.server(trainers=2, extra=["--device", "cpu"])
        a, b = self.client(s), self.client(s)
        wa, _ = a.hello(0, extra={"link": "loop"})
        wb, _ = b.hello(1)
        self.assertEqual((wa["type"], wa.get("link")), ("welcome", "loop"), wa)
        self.assertNotIn("link", wb)  # a TCP trainer beside it stays on TCP
        va = [float(i % 7) for i in range(4096)]
        vb = [float(i % 5) - 2.0 for i in range(4096)]
        a.push(dense_push(0, 0, va))
        b.push(dense_push(0, 0, vb))
        ha, pa = a.recv_frame()
        hb, pb = b.recv_frame()
        self.assertEqual((ha["type"], hb["type"]), ("result", "result"), (ha, hb))
        self.assertEqual(parse_dense(pa), expected_dense_mean([va, vb], 2))
        self.assertEqual(pa, pb)

    def test_refused_from_another_address(self):
        """From an address that is not a loopback one: unsupported, saying
        the transport takes loopback trainers only."""
        addr = outward_address()
        if not addr:
            self.skipTest("this host has no address but loopback ones")
        s = self.reg.server(trainers=1, listen="0.0.0.0:0", extra=["--device", "cpu"])
        c = psb.RawClient(s.port, host=addr)
        self._clients.append(c)
        h, p = c.hello(0, extra={"link": "loop"})
        self.assertEqual((h["type"], h.get("code")), ("error", "unsupported"), h)
        self.assertIn("loopback", p.decode() + h.get("message", ""))

    def hand_server(self, welcome_link, env=None):
        """A server by hand (this test) that welcomes a trainer's hello with
        `link` welcome_link (None: none), then stops; the trainer's exit
        status and stderr, and the hello it said."""
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            tcp.bind((psb.HOST, 0))
            tcp.listen(1)
            tcp.settimeout(20)
            t = self.reg.trainer("%s:%d" % (psb.HOST, tcp.getsockname()[1]), 0, buckets=1, floats=16, batches=1,
                                 env=psb.base_env(env))
            a, _ = tcp.accept()
            with a:
                c = psb.RawClient.accepted(a)
                hello, _ = c.recv_frame()
                w = {"type": "welcome", "version": 1, "server": 0, "trainers": 1}
                if welcome_link:
                    w["link"] = welcome_link
                c.send_frame(w)
                rc = t.wait(30)
        finally:
            tcp.close()
        return rc, t.stderr(), hello

    def test_trainer_refuses_a_link_it_did_not_ask_for(self):
        """A welcome that names a transport the hello did not ask for
        (here loop, to a trainer asking for shared memory) fails the
        trainer, naming the server and the transport."""
        rc, err, hello = self.hand_server("loop")
        self.assertEqual(hello.get("link"), "shm", hello)
        self.assertGreater(rc, 0, err)
        self.assertRegex(err, r"its welcome puts the link on transport 'loop', which this trainer did not ask for")

    def test_trainer_fails_where_loop_is_not_taken(self):
        """$PSBENCH_XPORT_LOOP=1 asks for loop; a server that welcomes the
        hello without naming it (one built without it) fails the trainer,
        saying so: a test that asks for loop means to run over it."""
        rc, err, hello = self.hand_server(None, env={"PSBENCH_XPORT_LOOP": "1"})
        self.assertEqual(hello.get("link"), "loop", hello)
        self.assertGreater(rc, 0, err)
        self.assertRegex(err, r"did not take the loop transport")

    @unittest.skipIf(psb.ASAN, "two whole runs: the release pass's")
    def test_job_over_loop_equals_tcp(self):
        """$PSBENCH_XPORT_LOOP=1: every link takes the loop transport,
        results.json names it, and the losses and final parameters equal a
        TCP run's, bit for bit."""
        got = {}
        for name, transport, env in (("tcp", "tcp", {}), ("loop", "auto", {"PSBENCH_XPORT_LOOP": "1"})):
            out = os.path.join(self.reg.workdir, name)
            rc, _, err = self.run_master("--transport", transport, local=True, out=out, epochs=1,
                                         env=psb.base_env(env), timeout=240)
            self.assertEqual(rc, 0, (name, err[-3000:]))
            res = psb.results_json(out)
            links = [l for t in res["trainers"] for l in t["links"]]
            self.assertTrue(links, name)
            self.assertEqual({l["transport"] for l in links}, {name}, links)
            got[name] = [(t.get("loss_per_epoch"), t.get("final_params_sha256")) for t in res["trainers"]]
            self.assertTrue(all(d for _, d in got[name]), got)
        self.assertEqual(got["tcp"], got["loop"])


if __name__ == "__main__":
    psb.main()
