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
import selectors
import signal
import socket
import struct
import sys
import time

import msgpack


class Conn(object):
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.rank = None


class Mock(object):
    def __init__(self, a):
        self.a = a
        self.rank = None
        self.trainers = 1
        self.cols = 64
        self.sel = selectors.DefaultSelector()
        self.ctl = None
        self.ctl_buf = b""
        self.last_report = 0.0
        self.log = open(a.log, "a", buffering=1)

    def event(self, c, ev, hdr=None):
        hdr = hdr or {}
        self.log.write(json.dumps({"t": time.monotonic(), "server": self.rank, "trainer": c.rank if c else None,
                                   "ev": ev, "batch": hdr.get("batch"), "confirm": hdr.get("confirm"),
                                   "grad": hdr.get("grad")}) + "\n")

    # ---- control plane ----
    def ctl_send(self, typ, body):
        js = json.dumps(body).encode()
        hdr = msgpack.packb({"type": typ, "payload": len(js)}, use_bin_type=True)
        self.ctl.sendall(struct.pack(">I", len(hdr)) + hdr + js)

    def ctl_recv(self):
        out = []
        while len(self.ctl_buf) >= 4:
            h = struct.unpack(">I", self.ctl_buf[:4])[0]
            if len(self.ctl_buf) < 4 + h:
                break
            hdr = msgpack.unpackb(self.ctl_buf[4:4 + h], raw=False)
            p = hdr.get("payload", 0)
            if len(self.ctl_buf) < 4 + h + p:
                break
            body = json.loads(self.ctl_buf[4 + h:4 + h + p] or b"{}")
            self.ctl_buf = self.ctl_buf[4 + h + p:]
            out.append((hdr["type"], body))
        return out

    def report(self, typ="metrics"):
        self.ctl_send(typ, {"samples": {}, "bytes_in": 0, "bytes_out": 0, "rows_touched": 0})
        self.last_report = time.monotonic()

    def join(self, master, port):
        host, mport = master.rsplit(":", 1)
        self.ctl = socket.create_connection((host, int(mport)))
        self.ctl_send("register", {"role": "server", "host": socket.gethostname(), "device": "cpu",
                                   "pid": os.getpid(), "listen_host": "127.0.0.1", "port": port})
        while True:
            data = self.ctl.recv(65536)
            if not data:
                sys.exit("mock server: the master closed the connection")
            self.ctl_buf += data
            for typ, body in self.ctl_recv():
                if typ == "stop":
                    sys.exit("mock server: refused: %s" % body.get("reason"))
                if typ == "assign":
                    if body.get("kind") != "embedding" or "embedding" not in body:
                        sys.exit("mock server: assignment is not embedding: %r" % body)
                    self.rank = body["rank"]
                    self.trainers = body["trainers"]
                    self.cols = body["embedding"]["embedding_dim"]
                    return

    def on_ctl(self):
        data = self.ctl.recv(65536)
        if not data:
            sys.exit(0)
        self.ctl_buf += data
        for typ, _ in self.ctl_recv():
            if typ == "reset":
                self.event(None, "reset")
                self.report()
                self.ctl_send("reset_done", {})
            elif typ == "stop":
                self.report()
                sys.exit(0)

    # ---- data plane ----
    def send(self, c, hdr, payload=b""):
        if payload:
            hdr["payload"] = len(payload)
        body = msgpack.packb(hdr, use_bin_type=True)
        try:
            c.sock.sendall(struct.pack(">I", len(body)) + body + payload)
        except OSError:
            pass

    def frame(self, c):
        if len(c.buf) < 4:
            return None
        h = struct.unpack(">I", c.buf[:4])[0]
        if len(c.buf) < 4 + h:
            return None
        hdr = msgpack.unpackb(c.buf[4:4 + h], raw=False)
        p = hdr.get("payload", 0)
        if len(c.buf) < 4 + h + p:
            return None
        payload = c.buf[4 + h:4 + h + p]
        c.buf = c.buf[4 + h + p:]
        return hdr, payload

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

    def run(self):
        host, port = self.a.listen.rsplit(":", 1)
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, int(port)))
        ls.listen(64)
        ls.setblocking(False)
        self.sel.register(ls, selectors.EVENT_READ, None)
        self.join(self.a.master, ls.getsockname()[1])
        self.sel.register(self.ctl, selectors.EVENT_READ, "ctl")
        self.report()
        self.ctl_send("ready", {})
        sys.stderr.write("psbench-server: listening on %s:%d (kind embedding, mock)\n" % ls.getsockname())
        sys.stderr.flush()
        while True:
            if time.monotonic() - self.last_report >= 0.5:
                self.report()
            for key, _ in self.sel.select(timeout=0.25):
                if key.data == "ctl":
                    self.on_ctl()
                    continue
                if key.data is None:
                    s, _ = ls.accept()
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    s.setblocking(True)
                    self.sel.register(s, selectors.EVENT_READ, Conn(s))
                    continue
                c = key.data
                try:
                    data = c.sock.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    self.sel.unregister(c.sock)
                    c.sock.close()
                    continue
                c.buf += data
                while True:
                    f = self.frame(c)
                    if f is None:
                        break
                    self.on_frame(c, *f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--delay-ms", type=float, default=50.0)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Mock(a).run()


if __name__ == "__main__":
    main()
