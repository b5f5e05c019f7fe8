"""mock_node.py — what the tests' stand-in servers share (bu_mock_server.py,
emb_mock_server.py): the master link (register, the assignment, reports,
reset and stop), the data plane's framing, and one select loop that
accepts trainers and hands each whole frame to the stand-in.

A stand-in subclasses MockNode and gives KIND (the kind it serves, for its
start line), assigned(body) (the assignment: return None to accept it, or
the reason to exit), report_body(), on_reset(), on_frame(c, hdr, payload)
and, if it cares, on_lost(c).
"""
import json
import os
import selectors
import socket
import struct
import sys
import time

import msgpack


class Conn(object):
    """One trainer's connection: its socket, the bytes not yet framed, its
    rank once it said hello."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.rank = None


class MockNode(object):
    KIND = "?"

    def __init__(self, a):
        self.a = a
        self.sel = selectors.DefaultSelector()
        self.ctl = None  # the master link, when there is one
        self.ctl_buf = b""
        self.last_report = 0.0

    # ---- what a stand-in gives ----
    def assigned(self, body):
        return None

    def report_body(self):
        return {"samples": {}, "bytes_in": 0, "bytes_out": 0}

    def on_reset(self):
        pass

    def on_frame(self, c, hdr, payload):
        raise NotImplementedError

    def on_lost(self, c):
        pass

    # ---- control plane ----
    def ctl_send(self, typ, body):
        js = json.dumps(body).encode()
        hdr = msgpack.packb({"type": typ, "payload": len(js)}, use_bin_type=True)
        self.ctl.sendall(struct.pack(">I", len(hdr)) + hdr + js)

    def ctl_recv(self):
        """Complete control messages in the buffer: [(type, body)]."""
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
        self.ctl_send(typ, self.report_body())
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
                    why = self.assigned(body)
                    if why:
                        sys.exit("mock server: %s: %r" % (why, body))
                    return

    def on_ctl(self):
        data = self.ctl.recv(65536)
        if not data:
            sys.exit(0)
        self.ctl_buf += data
        for typ, _ in self.ctl_recv():
            if typ == "reset":
                self.on_reset()
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
        """The next whole frame of c's buffer, (header, payload), or None."""
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

    def run(self, master, listen, tick_s=0.5):
        """Listen, join the master (if any: ready at once, nothing to fill),
        then serve until the master says stop."""
        host, port = listen.rsplit(":", 1)
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, int(port)))
        ls.listen(64)
        ls.setblocking(False)
        self.sel.register(ls, selectors.EVENT_READ, None)
        if master:
            self.join(master, ls.getsockname()[1])
            self.sel.register(self.ctl, selectors.EVENT_READ, "ctl")
            self.report()
            self.ctl_send("ready", {})
        sys.stderr.write("psbench-server: listening on %s:%d (kind %s, mock)\n" % (ls.getsockname() + (self.KIND,)))
        sys.stderr.flush()
        while True:
            if self.ctl and time.monotonic() - self.last_report >= 0.5:
                self.report()
            for key, _ in self.sel.select(timeout=tick_s):
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
                    self.on_lost(c)
                    continue
                c.buf += data
                while True:
                    f = self.frame(c)
                    if f is None:
                        break
                    self.on_frame(c, *f)
