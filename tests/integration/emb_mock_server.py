"""emb_mock_server.py — a small stand-in for `psbench-server --kind
embedding`, written from docs/protocol.md ("Kind `embedding`"), that logs
when each call arrives and each answer leaves, so that a test can check how
a HybridModel trainer talks to its servers (issue 26: the seed's pattern
looks the servers up one after the other and waits for every update to be
applied before the next batch; psbench's does neither).

    emb_mock_server.py --master HOST:PORT --log FILE [--listen HOST:PORT] [--delay-ms MS]

joins a psbench-master as a server (register, assign with kind embedding
and its embedding object, ready at once, metrics reports, reset, stop) and
answers every `lookup` with zero rows and every `update` sent with
`confirm` with `updated` — each answer held MS milliseconds (default 50)
first, so that a trainer that does not wait for it shows up in the log.
Every event is one JSON line in FILE, written as it happens:

    {"t": MONOTONIC_S, "server": RANK, "trainer": RANK, "ev": "lookup"|"rows"|"update"|"updated"|"reset",
     "batch": N, "confirm": 0|1|null, "grad": "dense"|"sparse"|null}

("lookup" and "update" when the frame has arrived, "rows" and "updated"
just before the answer is sent; t is time.monotonic(), CLOCK_MONOTONIC,
the same clock in every process of the host). One thread, selectors;
exits on the master's stop or SIGTERM. Run with /usr/bin/python3.
"""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mock_node import MockNode  # noqa: E402



class Mock(MockNode):
    KIND = "embedding"

    def __init__(self, a):
        MockNode.__init__(self, a)
        self.rank = None
        self.trainers = 1
        self.cols = 64
        self.log = open(a.log, "a", buffering=1)

    def event(self, c, ev, hdr=None):
        hdr = hdr or {}
        self.log.write(json.dumps({"t": time.monotonic(), "server": self.rank, "trainer": c.rank if c else None,
                                   "ev": ev, "batch": hdr.get("batch"), "confirm": hdr.get("confirm"),
                                   "grad": hdr.get("grad")}) + "\n")

    # ---- the master link (mock_node.py) ----
    def assigned(self, body):
        if body.get("kind") != "embedding" or "embedding" not in body:
            return "assignment is not embedding"
        self.rank = body["rank"]
        self.trainers = body["trainers"]
        self.cols = body["embedding"]["embedding_dim"]
        return None

    def report_body(self):
        return {"samples": {}, "bytes_in": 0, "bytes_out": 0, "rows_touched": 0}

    def on_reset(self):
        self.event(None, "reset")
        self.report()

    def hold(self):
        time.sleep(self.a.delay_ms / 1000.0)

    def on_frame(self, c, hdr, payload):
        t = hdr.get("type")
        if t == "hello":
            c.rank = hdr.get("rank")
            self.send(c, {"type": "welcome", "version": 1, "server": self.rank, "trainers": self.trainers})
        elif t == "lookup":
            self.event(c, "lookup", hdr)
            self.hold()
            bags = hdr["bags"]
            self.event(c, "rows", hdr)
            self.send(c, {"type": "rows", "batch": hdr["batch"], "bags": bags, "cols": self.cols, "dtype": "f32"},
                      bytes(4 * bags * self.cols))
        elif t == "update":
            self.event(c, "update", hdr)
            if hdr.get("confirm") == 1:
                self.hold()
                self.event(c, "updated", hdr)
                self.send(c, {"type": "updated", "batch": hdr["batch"]})
        else:
            self.send(c, {"type": "error", "code": "unsupported", "message": "mock: %r" % t})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--delay-ms", type=float, default=50.0)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Mock(a).run(a.master, a.listen, tick_s=0.25)


if __name__ == "__main__":
    main()
