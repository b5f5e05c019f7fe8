#!/usr/bin/python3
"""httpload.py — a load client for the master's HTTP API (issue 13: slow
consumers and a bounded flood), used by tests/multihost/test_http_load.py
and bench/http_load.sh. Standard library only; one thread, one selector.

Two kinds of load, both optional, run together:

  slow consumers (kept open for --hold seconds, then closed; one the
  master closes is reopened after 0.5 s while the hold lasts):
    --trickle N   GET /metrics (the biggest document) or, every other one,
                  the dashboard's biggest file (uPlot, 51 KB), then read the
                  answer 1 byte every --pause seconds, with a receive buffer
                  as small as the kernel allows (the master's socket fills
                  up and the master holds the rest of the answer)
    --noread N    GET /api/v1/metrics or uPlot, then never read (only
                  notice, by peeking once a second, that the master closed)
    --slowsend N  GET /api/v1/status sent 1 byte every --pause seconds; the
                  answer is read at once and the next request trickled out
                  the same way

  a bounded flood:
    --flood-conns C --flood-requests R [--rate RPS]
                  C concurrent keep-alive connections sending R requests in
                  all over every endpoint (GET, every fifth one HEAD, and a
                  404), one request at a time per connection, at most RPS
                  requests a second over all of them (0: no bound). A
                  connection the master closes after an answer is reopened
                  at once, one it refused or reset after 1 s, while
                  requests are left. Connections take turns (first come,
                  first served) when the rate bound holds them back.

SIGTERM ends the load early (a benchmark runs it for as long as a job
lasts: --hold and --flood-requests large); the figures are still printed.

Prints one JSON line on stdout when done: requests sent, answers by status,
connections the master closed before answering anything (`rejected`: a
connection limit), closed after answering (`closed`), reset, failed to
connect; bytes read; flood answer latencies (ms); the client's own CPU
seconds (user + system) and wall time. Exits 0 once it has connected at
least once, 1 if it never could, 2 on bad arguments.

  httpload.py --target 10.77.0.1:8080 --trickle 10 --noread 10 --slowsend 5 \\
              --hold 8 --flood-conns 150 --flood-requests 3000
"""
import argparse
import collections
import errno
import json
import resource
import selectors
import signal
import socket
import sys
import time

FLOOD_PATHS = ("/healthz", "/api/v1/status", "/api/v1/nodes", "/api/v1/metrics", "/metrics", "/",
               "/no-such-page")


SLOW_PATHS = {"trickle": ("/metrics", "/vendor/uplot/uPlot.iife.min.js"),
              "noread": ("/api/v1/metrics", "/vendor/uplot/uPlot.iife.min.js")}


def request_bytes(method, path, host):
    return ("%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: psbench-httpload\r\nAccept: */*\r\n\r\n" %
            (method, path, host)).encode()


class Response(object):
    """Incremental parser of one HTTP/1.1 answer (Content-Length framed)."""

    def __init__(self, head_only):
        self.buf = b""
        self.head_only = head_only
        self.status = None
        self.length = 0
        self.close = False

    def feed(self, data):
        """True once the answer is complete."""
        self.buf += data
        if self.status is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = self.buf[:end].decode("latin-1").split("\r\n")
            self.buf = self.buf[end + 4:]
            self.status = int(head[0].split()[1])
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length" and not self.head_only:
                    self.length = int(value.strip())
                elif name == "connection" and "close" in value.lower():
                    self.close = True
        return len(self.buf) >= self.length


class Conn(object):
    def __init__(self, kind):
        self.kind = kind
        self.sock = None
        self.state = "connecting"   # connecting, wait_token, sending, reading, dead
        self.out = b""
        self.resp = None
        self.due = None             # monotonic time of the next timed step
        self.ev = 0                 # selector events watched
        self.answers = 0
        self.t_req = 0.0


class Load(object):
    def __init__(self, a):
        self.a = a
        host, _, port = a.target.rpartition(":")
        self.addr = (host, int(port))
        self.sel = selectors.DefaultSelector()
        self.t0 = time.monotonic()
        self.slow_end = self.t0 + a.hold
        self.flood_left = a.flood_requests
        self.tokens = 1.0
        self.t_tokens = self.t0
        self.conns = []
        self.reopen = []            # (time, kind)
        self.waiting = collections.deque()  # flood connections waiting for a token, in turn
        self.lat = []
        self.nsent = 0
        self.nslow = 0
        self.stop = False           # set by SIGTERM: stop now, print the figures
        self.st = {"sent": 0, "answers": 0, "status": {}, "bytes_in": 0, "rejected": 0, "closed": 0,
                   "reset": 0, "connect_failed": 0, "connections_opened": 0, "slow_open_at_end": 0,
                   "stopped": False, "timed_out": False}

    # ---- helpers -----------------------------------------------------------

    def token(self, now):
        """Rate bound of the flood: a token bucket of 50 ms worth."""
        if self.a.rate <= 0:
            return True
        self.tokens = min(self.tokens + (now - self.t_tokens) * self.a.rate, max(1.0, self.a.rate / 20.0))
        self.t_tokens = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def watch(self, c, ev):
        if ev == c.ev:
            return
        if c.ev == 0:
            self.sel.register(c.sock, ev, c)
        elif ev == 0:
            self.sel.unregister(c.sock)
        else:
            self.sel.modify(c.sock, ev, c)
        c.ev = ev

    def wanted(self, kind, now):
        return self.flood_left > 0 if kind == "flood" else now < self.slow_end

    def open(self, kind, now):
        c = Conn(kind)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if kind in ("trickle", "noread"):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
        s.setblocking(False)
        c.sock = s
        self.st["connections_opened"] += 1
        err = s.connect_ex(self.addr)
        if err not in (0, errno.EINPROGRESS):
            s.close()
            self.st["connect_failed"] += 1
            self.reopen.append((now + 0.5, kind))
            return
        self.conns.append(c)
        self.watch(c, selectors.EVENT_WRITE)

    def drop(self, c):
        self.watch(c, 0)
        c.sock.close()
        c.state = "dead"
        c.due = None

    def lost(self, c, why, now):
        """The master closed or reset c (or it never connected): count it,
        reopen one like it later if still wanted."""
        if why == "closed" and c.answers == 0:
            why = "rejected"
        self.st[why] += 1
        self.drop(c)
        if self.wanted(c.kind, now):
            # At once after an answer (a server may close a connection
            # after any answer); after a refusal or a reset, a pause.
            pause = 0.0 if why == "closed" else 1.0 if c.kind == "flood" else 0.5
            self.reopen.append((now + pause, c.kind))

    # ---- requests ----------------------------------------------------------

    def next_request(self, c, now):
        if c.kind == "flood":
            if self.flood_left <= 0:
                self.drop(c)
            elif self.waiting or not self.token(now):
                # Wait in turn (first come, first served), watching for a
                # close: the master may refuse a connection (per-IP limit).
                c.state, c.due = "wait_token", None
                self.waiting.append(c)
                self.watch(c, selectors.EVENT_READ)
            else:
                self.flood_send(c, now)
            return
        if c.kind == "slowsend":
            c.out = request_bytes("GET", "/api/v1/status", self.a.target)
            c.resp = Response(False)
            c.state, c.due = "sending", now   # timed: a byte per --pause
            self.watch(c, 0)
        else:
            # Half ask for a document, half for the biggest static file
            # (51 KB: more than the kernel's socket buffers take, so the
            # master itself holds the rest of the answer).
            self.nslow += 1
            path = SLOW_PATHS[c.kind][self.nslow % 2]
            c.out = request_bytes("GET", path, self.a.target)
            c.resp = Response(False)
            c.state, c.due = "sending", None
            self.watch(c, selectors.EVENT_WRITE)
        c.t_req = now
        self.st["sent"] += 1

    def flood_send(self, c, now):
        """A flood request on c (its token taken)."""
        self.flood_left -= 1
        n = self.nsent
        self.nsent += 1
        method = "HEAD" if n % 5 == 4 else "GET"
        c.out = request_bytes(method, FLOOD_PATHS[n % len(FLOOD_PATHS)], self.a.target)
        c.resp = Response(method == "HEAD")
        c.state, c.due = "sending", None
        self.watch(c, selectors.EVENT_WRITE)
        c.t_req = now
        self.st["sent"] += 1

    def sent_all(self, c, now):
        if c.kind in ("flood", "slowsend"):
            c.state, c.due = "reading", None
            self.watch(c, selectors.EVENT_READ)
        else:                       # trickle and noread: timed steps only
            c.state, c.due = "reading", now + self.a.pause
            self.watch(c, 0)

    def got(self, c, data, now):
        self.st["bytes_in"] += len(data)
        if not c.resp.feed(data):
            return
        c.answers += 1
        self.st["answers"] += 1
        code = str(c.resp.status)
        self.st["status"][code] = self.st["status"].get(code, 0) + 1
        if c.kind == "flood":
            self.lat.append(now - c.t_req)
        if c.resp.close:
            self.lost(c, "closed", now)
        else:
            self.next_request(c, now)

    # ---- events ------------------------------------------------------------

    def on_write(self, c, now):
        if c.state == "connecting":
            if c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self.st["connect_failed"] += 1
                self.drop(c)
                if self.wanted(c.kind, now):
                    self.reopen.append((now + 0.5, c.kind))
                return
            self.next_request(c, now)
            return
        try:
            n = c.sock.send(c.out)
        except BlockingIOError:
            return
        except OSError:
            self.lost(c, "reset", now)
            return
        c.out = c.out[n:]
        if not c.out:
            self.sent_all(c, now)

    def on_read(self, c, now):
        if c.state == "wait_token":         # nothing asked: a close (or junk)
            self.lost(c, "closed", now)
            return
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self.lost(c, "reset", now)
            return
        if not data:
            self.lost(c, "closed", now)
            return
        self.got(c, data, now)

    def on_timer(self, c, now):
        c.due = None
        if c.state == "sending":            # slowsend: one more byte
            try:
                n = c.sock.send(c.out[:1])
            except BlockingIOError:
                n = 0
            except OSError:
                self.lost(c, "reset", now)
                return
            c.out = c.out[n:]
            if c.out:
                c.due = now + self.a.pause
            else:
                self.sent_all(c, now)
        elif c.state == "reading":          # trickle: read 1 byte; noread: peek
            c.due = now + (self.a.pause if c.kind == "trickle" else 1.0)
            flags = socket.MSG_DONTWAIT | (socket.MSG_PEEK if c.kind == "noread" else 0)
            try:
                data = c.sock.recv(1, flags)
            except BlockingIOError:
                return
            except OSError:
                self.lost(c, "reset", now)
                return
            if not data:
                self.lost(c, "closed", now)
            elif c.kind == "trickle":
                self.got(c, data, now)     # a complete answer: the next request

    # ---- loop --------------------------------------------------------------

    def flood_busy(self):
        return self.flood_left > 0 or any(c.kind == "flood" and c.state != "dead" for c in self.conns)

    def run(self):
        a = self.a
        now = self.t0
        for kind, n in (("trickle", a.trickle), ("noread", a.noread), ("slowsend", a.slowsend),
                        ("flood", a.flood_conns if a.flood_requests > 0 else 0)):
            for _ in range(n):
                self.open(kind, now)
        while True:
            now = time.monotonic()
            if self.stop:
                self.st["stopped"] = True
                break
            if now - self.t0 > a.timeout:
                self.st["timed_out"] = True
                break
            if now >= self.slow_end and not self.flood_busy():
                break
            self.conns = [c for c in self.conns if c.state != "dead"]
            due, self.reopen = [r for r in self.reopen if r[0] <= now], [r for r in self.reopen if r[0] > now]
            for _, kind in due:
                if self.wanted(kind, now):
                    self.open(kind, now)
            # Flood connections waiting for a token, in turn.
            while self.waiting and self.waiting[0].state != "wait_token":
                self.waiting.popleft()
            while self.waiting and self.flood_left > 0 and self.token(now):
                c = self.waiting.popleft()
                if c.state == "wait_token":
                    self.flood_send(c, now)
            if self.flood_left <= 0:        # nothing left to ask: close the waiting ones
                while self.waiting:
                    c = self.waiting.popleft()
                    if c.state == "wait_token":
                        self.drop(c)
            wake = now + (0.005 if self.waiting else 0.05)
            for c in list(self.conns):
                if c.due is not None and c.state != "dead":
                    if c.due <= now:
                        self.on_timer(c, now)
                    if c.due is not None:
                        wake = min(wake, c.due)
            for t, _ in self.reopen:
                wake = min(wake, t)
            for key, ev in self.sel.select(timeout=max(0.0, wake - time.monotonic())):
                c = key.data
                if c.state == "dead":
                    continue
                now = time.monotonic()
                if ev & selectors.EVENT_WRITE:
                    self.on_write(c, now)
                elif ev & selectors.EVENT_READ:
                    self.on_read(c, now)
        for c in self.conns:
            if c.state != "dead":
                if c.kind != "flood":
                    self.st["slow_open_at_end"] += 1
                self.drop(c)
        self.lat.sort()
        if self.lat:
            pick = lambda q: round(1e3 * self.lat[min(len(self.lat) - 1, int(q * len(self.lat)))], 2)
            self.st["flood_latency_ms"] = {"p50": pick(0.5), "p99": pick(0.99), "max": pick(1.0)}
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.st["cpu_s"] = round(ru.ru_utime + ru.ru_stime, 3)
        self.st["wall_s"] = round(time.monotonic() - self.t0, 3)
        return self.st


def main():
    p = argparse.ArgumentParser(description="A load client for the master's HTTP API (slow consumers, "
                                            "a bounded flood).")
    p.add_argument("--target", required=True, help="HOST:PORT of the master's HTTP API")
    p.add_argument("--trickle", type=int, default=0, help="slow readers (1 byte per --pause)")
    p.add_argument("--noread", type=int, default=0, help="connections that never read")
    p.add_argument("--slowsend", type=int, default=0, help="requests sent 1 byte per --pause")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between a slow consumer's bytes")
    p.add_argument("--hold", type=float, default=0.0, help="seconds the slow consumers stay open")
    p.add_argument("--flood-conns", type=int, default=0, help="concurrent flood connections")
    p.add_argument("--flood-requests", type=int, default=0, help="flood requests in all")
    p.add_argument("--rate", type=float, default=0.0, help="flood requests per second (0: unbounded)")
    p.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    a = p.parse_args()
    if min(a.trickle, a.noread, a.slowsend, a.flood_conns, a.flood_requests, a.rate, a.hold) < 0 or a.pause <= 0:
        p.error("counts, --rate and --hold must be >= 0 and --pause > 0")
    if a.flood_requests > 0 and a.flood_conns == 0:
        p.error("--flood-requests needs --flood-conns")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.trickle + a.noread + a.slowsend + a.flood_conns + 64
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    load = Load(a)

    def on_term(signum, frame):
        load.stop = True
    signal.signal(signal.SIGTERM, on_term)
    st = load.run()
    print(json.dumps(st, sort_keys=True))
    sys.stdout.flush()
    return 0 if st["connections_opened"] > st["connect_failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
