"""bu_mock_server.py — a small stand-in for `psbench-server --standalone
--kind batch-update`, written from docs/protocol.md ("Kind `batch-update`"),
for testing the trainer where the real server lacks that kind, and for
injecting server errors the real server would not produce on demand.

    bu_mock_server.py --master HOST:PORT [--listen HOST:PORT] [--nan-from-round R]
        joins a psbench-master as a server (register, assign with kind
        batch-update and its batch_update object, ready once listening,
        metrics reports with method_metric,update, reset, stop)
    bu_mock_server.py --standalone --trainers N [--listen HOST:PORT]
        [--kind batch-update] [--in-features IN] [--out-features OUT] [--lr LR]
        [--momentum M] [--batch-update-size K] [--seed S] [--part P/N]
        [--fail-with CODE]   answer the first push with an `error` frame
        [--nan-from-round R] from round R on, answer parameters whose first
                             element is NaN (a model gone bad: the
                             trainers' losses are then no numbers)

Prints "psbench-server: listening on HOST:PORT" on stderr when ready (the
line psb.Server waits for). One thread, selectors; exits on SIGTERM.
Run with /usr/bin/python3 (python3-msgpack).
"""
import argparse
import os
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bu_reference as ref  # noqa: E402
from mock_node import MockNode  # noqa: E402



class Mock(MockNode):
    KIND = "batch-update"

    def __init__(self, a):
        MockNode.__init__(self, a)
        p, n = a.part.split("/")
        self.p, self.n = int(p), int(n)
        self.total = a.out_features * a.in_features + a.out_features
        self.off = ref.part_begin(self.total, self.p, self.n)
        self.end = ref.part_begin(self.total, self.p + 1, self.n)
        self.k = a.batch_update_size or a.trainers
        full = ref.linear_init(a.in_features, a.out_features, a.seed)
        self.opt = ref.Sgd(full[self.off:self.end], a.lr, a.momentum)
        self.round = 0
        self.pushes = []  # (conn, grads)
        self.failed = False
        self.samples = []        # method_metric,update (ms) since the last report

    def configure(self, bu, trainers):
        """Settings from a master's assignment."""
        a = self.a
        a.in_features, a.out_features = bu["in_features"], bu["out_features"]
        a.lr, a.momentum, a.seed = bu["lr"], bu["momentum"], bu["seed"]
        a.trainers = trainers
        self.p, self.n = bu["part"], bu["parts"]
        self.k = bu["batch_update_size"]
        self.reset()

    def reset(self):
        a = self.a
        self.total = a.out_features * a.in_features + a.out_features
        self.off = ref.part_begin(self.total, self.p, self.n)
        self.end = ref.part_begin(self.total, self.p + 1, self.n)
        full = ref.linear_init(a.in_features, a.out_features, a.seed)
        self.opt = ref.Sgd(full[self.off:self.end], a.lr, a.momentum)
        self.round = 0
        self.pushes = []

    # ---- the master link (mock_node.py) ----
    def assigned(self, body):
        if body.get("kind") != "batch-update" or "batch_update" not in body:
            return "assignment is not batch-update"
        self.configure(body["batch_update"], body["trainers"])
        sys.stderr.write("mock server: assigned %r\n" % body)
        sys.stderr.flush()
        return None

    def report_body(self):
        body = {"samples": {"method_metric,update": self.samples}, "bytes_in": 0, "bytes_out": 0}
        self.samples = []
        return body

    def on_reset(self):
        self.reset()
        self.samples = []

    def params_payload(self):
        return struct.pack("<%df" % len(self.opt.p), *self.opt.p)

    def on_frame(self, c, hdr, payload):
        t = hdr.get("type")
        count = self.end - self.off
        if t == "hello":
            c.rank = hdr.get("rank")
            self.send(c, {"type": "welcome", "version": 1, "server": self.p,
                          "trainers": self.a.trainers})
        elif t == "fetch":
            self.send(c, {"type": "params", "bucket": 0, "round": self.round, "offset": self.off,
                          "count": count, "total": self.total, "dtype": "f32",
                          "layout": "dense"}, self.params_payload())
        elif t == "push":
            if self.a.fail_with:
                self.send(c, {"type": "error", "code": self.a.fail_with, "batch": hdr.get("batch"),
                              "bucket": 0, "message": "injected by the mock server"})
                return
            if hdr.get("count") != count:
                self.send(c, {"type": "error", "code": "shape_mismatch", "batch": hdr.get("batch"),
                              "bucket": 0, "message": "count %r, the part has %d" %
                              (hdr.get("count"), count)})
                return
            if any(pc is c for pc, _ in self.pushes):
                self.send(c, {"type": "error", "code": "duplicate_push", "batch": hdr.get("batch"),
                              "bucket": 0, "message": "already in this round"})
                return
            self.pushes.append((c, list(struct.unpack("<%df" % count, payload))))
            if len(self.pushes) == self.k:
                t0 = time.monotonic()
                self.opt.step(ref.mean_f32([g for _, g in self.pushes]))
                self.samples.append((time.monotonic() - t0) * 1e3)
                joined = self.round
                self.round += 1
                pl = self.params_payload()
                if self.a.nan_from_round is not None and self.round > self.a.nan_from_round:
                    pl = struct.pack("<f", float("nan")) + pl[4:]
                for pc, _ in self.pushes:
                    self.send(pc, {"type": "result", "batch": joined, "bucket": 0,
                                   "round": self.round, "dtype": "f32", "layout": "dense",
                                   "count": count}, pl)
                self.pushes = []

    def on_lost(self, c):
        if any(pc is c for pc, _ in self.pushes) or self.pushes:
            for pc, _ in self.pushes:
                if pc is not c:
                    self.send(pc, {"type": "error", "code": "peer_lost", "batch": self.round,
                                   "bucket": 0, "message": "trainer %r disconnected" % c.rank})
            self.pushes = []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--trainers", type=int, default=1)
    ap.add_argument("--master", default=None)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--kind", default="batch-update")
    ap.add_argument("--in-features", type=int, default=100)
    ap.add_argument("--out-features", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch-update-size", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", default="0/1")
    ap.add_argument("--fail-with", default=None)
    ap.add_argument("--nan-from-round", type=int, default=None)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Mock(a).run(a.master, a.listen)


if __name__ == "__main__":
    main()
