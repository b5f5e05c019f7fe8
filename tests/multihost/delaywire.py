"""delaywire.py — a network link with added latency, in user space.

For kernels without tc's netem (netns.py uses netem where it exists). Two
TAP devices are the link's ends: B is made in the namespace this process
starts in (the switch, where netns.py puts it on the bridge), A in the
namespace --a-netns names (the host, as its eth0). Every Ethernet frame
read from one end is written to the other; frames from A are held
--a-to-b-ms milliseconds first (and frames from B --b-to-a-ms), in order,
like netem's delay on A's egress. The TAP devices are not persistent:
they go when this process exits (SIGTERM ends it cleanly).

Run by netns.py as: ip netns exec SWITCH /usr/bin/python3 delaywire.py
  --a-netns HOSTNS --a-name eth0 --b-name wN --a-to-b-ms 50 --ready FILE
"""
import argparse
import collections
import ctypes
import fcntl
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
FRAME_MAX = 65536
QUEUE_MAX = 20000  # frames held per direction; more are dropped like a full queue


def tap_open(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    ifr = struct.pack("16sH22x", name.encode(), IFF_TAP | IFF_NO_PI)
    fcntl.ioctl(fd, TUNSETIFF, ifr)
    return fd


def enter_netns(name):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/run/netns/%s" % name, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "setns(%s): %s" % (name, os.strerror(err)))
    finally:
        os.close(fd)


class Direction(object):
    def __init__(self, src, dst, delay_s):
        self.src, self.dst, self.delay = src, dst, delay_s
        self.q = collections.deque()
        self.dropped = 0

    def read(self, now):
        while True:
            try:
                frame = os.read(self.src, FRAME_MAX)
            except BlockingIOError:
                return
            if not frame:
                return
            if len(self.q) >= QUEUE_MAX:
                self.dropped += 1
                continue
            self.q.append((now + self.delay, frame))

    def flush(self, now):
        while self.q and self.q[0][0] <= now:
            frame = self.q.popleft()[1]
            try:
                os.write(self.dst, frame)
            except (BlockingIOError, OSError):
                self.dropped += 1  # the far end is down: the frame is lost, as on a wire

    def next_due(self):
        return self.q[0][0] if self.q else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a-netns", required=True)
    ap.add_argument("--a-name", required=True)
    ap.add_argument("--b-name", required=True)
    ap.add_argument("--a-to-b-ms", type=float, default=0.0)
    ap.add_argument("--b-to-a-ms", type=float, default=0.0)
    ap.add_argument("--ready", required=True)
    o = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    b = tap_open(o.b_name)
    enter_netns(o.a_netns)
    a = tap_open(o.a_name)
    with open(o.ready, "w") as f:
        f.write("%d\n" % os.getpid())
    dirs = {a: Direction(a, b, o.a_to_b_ms / 1000.0), b: Direction(b, a, o.b_to_a_ms / 1000.0)}
    while not stop:
        now = time.monotonic()
        dues = [d.next_due() for d in dirs.values() if d.next_due() is not None]
        timeout = max(0.0, min(dues) - now) if dues else 0.5
        try:
            ready, _, _ = select.select([a, b], [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for fd in ready:
            dirs[fd].read(now)
        for d in dirs.values():
            d.flush(now)
    dropped = sum(d.dropped for d in dirs.values())
    print("delaywire: stopped (%d frames dropped)" % dropped, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
