"""netns.py — several hosts on one machine, for the multihost tests.

A Net is a small switched network made of Linux network namespaces:

    psb<pid>-sw   the switch: a namespace of its own holding bridge br0
    psb<pid>-<h>  one namespace per host, its eth0 (10.77.0.N/24) joined to
                  the bridge by a veth pair (the switch side is p<N>)

Each process a test starts "on" a host runs in that host's namespace and in
a UTS namespace of its own whose hostname is the host's name, so psbench's
nodes report their own hosts. Only the hosts' addresses are used: nothing
crosses the machine's own loopback or interfaces, and the test's processes
reach a host's HTTP port from another host's namespace.

Faults on a host's link:
  link_down()/link_up()   `ip link set eth0 down|up` in the host
  add_delay(ms)           `tc qdisc add dev eth0 root netem delay MS` where
                          the kernel has netem; otherwise the host's link is
                          rebuilt as a userspace wire (delaywire.py: two TAP
                          devices and a process that forwards every frame
                          from the host MS later), with the same effect: the
                          host's outgoing packets arrive MS late.

Names: set_hosts() gives every host the same /etc/hosts (as a cluster's
DNS would answer: e.g. a Kubernetes pod's <hostname>.<subdomain>), written
as /etc/netns/<namespace>/hosts, which `ip netns exec` bind-mounts over
/etc/hosts for the processes it starts there (iproute2's convention for
per-namespace configuration files); the machine's own /etc/hosts is not
touched.

Everything a Net made (namespaces, links, wire processes, /etc/netns/
files) is removed by
destroy(), which every test calls on every exit path (tearDown, atexit and
SIGTERM); namespaces left over by a runner killed with SIGKILL are removed
by the next Net (stale_cleanup: those whose pid is gone).

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; unavailable() says
why a machine cannot run these tests, for a clean skip.
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUBNET = "10.77.0"
PREFIX = "psb"
NETNS_ETC = "/etc/netns"  # ip netns exec: /etc/netns/<ns>/FILE is bind-mounted on /etc/FILE


def _run(args, check=True, timeout=20):
    r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(args), r.returncode,
                                                r.stderr.decode("utf-8", "replace").strip()))
    return r


def _ns_list():
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.decode().splitlines() if line.strip()]


def stale_cleanup():
    """Remove namespaces (and their /etc/netns files) of earlier runs whose
    test process is gone."""
    for ns in _ns_list():  # a Net's (psb<pid>n<k>-…) and the probes' (psb<pid>-probe)
        m = re.match(r"^%s(\d+)(?:n\d+)?-" % PREFIX, ns)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            _run(["ip", "netns", "del", ns], check=False)
    for ns in (os.listdir(NETNS_ETC) if os.path.isdir(NETNS_ETC) else []):
        m = re.match(r"^%s(\d+)n\d+-" % PREFIX, ns)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            shutil.rmtree(os.path.join(NETNS_ETC, ns), ignore_errors=True)


def unavailable():
    """None when this machine can make namespace hosts, else why not."""
    if os.geteuid() != 0:
        return "multihost tests need root (network namespaces, veth, bridges)"
    for tool in ("ip", "unshare", "hostname"):
        if not shutil.which(tool):
            return "multihost tests need %s (iproute2 / util-linux / hostname)" % tool
    probe = "%s%d-probe" % (PREFIX, os.getpid())
    try:
        _run(["ip", "netns", "add", probe])
        _run(["ip", "netns", "exec", probe, "unshare", "--uts", "hostname", "probe"])
        _run(["ip", "-n", probe, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return "network namespaces are not allowed here: %s" % e
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def netem_available():
    """Whether the kernel has tc's netem qdisc (probed on a scratch veth)."""
    probe = "%s%d-netem" % (PREFIX, os.getpid())
    try:
        _run(["ip", "netns", "add", probe])
        _run(["ip", "-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0"])
        r = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "a0", "root", "netem",
                  "delay", "1ms"], check=False)
        return r.returncode == 0
    except (RuntimeError, OSError):
        return False
    finally:
        _run(["ip", "netns", "del", probe], check=False)


class Host(object):
    def __init__(self, net, name, index):
        self.net = net
        self.name = name
        self.index = index
        self.ns = "%s-%s" % (net.prefix, name)
        self.addr = "%s.%d" % (SUBNET, index)
        self.port = "p%d" % index   # the switch side of its link
        self.wire = None            # the delay wire's process, when there is one
        self.delay_ms = 0

    def wrap(self, args):
        """args run on this host: its network namespace and its hostname."""
        return ["ip", "netns", "exec", self.ns, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.name] + list(args)

    def sh(self, *args, check=True, timeout=20):
        """Run a command in this host's namespace (setup and faults)."""
        return _run(["ip", "netns", "exec", self.ns] + list(args), check=check, timeout=timeout)

    def link_down(self):
        self.sh("ip", "link", "set", "eth0", "down")

    def link_up(self):
        self.sh("ip", "link", "set", "eth0", "up")
        # The connected route comes back with the link; wait until it has.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            r = self.sh("ip", "-4", "route", "show", "dev", "eth0", check=False)
            if SUBNET in r.stdout.decode():
                return
            time.sleep(0.05)
        raise RuntimeError("%s: no route on eth0 after link up" % self.name)

    def add_delay(self, ms):
        """Delay every packet this host sends by ms milliseconds. Returns
        how: "netem" or "wire"."""
        if self.net.netem is None:
            self.net.netem = netem_available()
        self.delay_ms = ms
        if self.net.netem:
            self.sh("tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "%dms" % ms)
            return "netem"
        # Rebuild the link as a wire: drop the veth, let delaywire.py make
        # eth0 (in the host) and w<N> (on the switch) as TAP devices.
        self.net._sw("ip", "link", "del", self.port)
        tap_sw = "w%d" % self.index
        ready = os.path.join(self.net.dir, "wire-%s.ready" % self.name)
        log = open(os.path.join(self.net.dir, "wire-%s.log" % self.name), "wb")
        self.wire = subprocess.Popen(
            ["ip", "netns", "exec", self.net.sw, "/usr/bin/python3", os.path.join(HERE, "delaywire.py"),
             "--a-netns", self.ns, "--a-name", "eth0", "--b-name", tap_sw, "--a-to-b-ms", str(ms),
             "--ready", ready], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 10
        while not os.path.exists(ready):
            if self.wire.poll() is not None or time.monotonic() > deadline:
                with open(os.path.join(self.net.dir, "wire-%s.log" % self.name), "rb") as f:
                    raise RuntimeError("delay wire for %s did not start: %s" %
                                       (self.name, f.read().decode("utf-8", "replace")))
            time.sleep(0.02)
        self.net._sw("ip", "link", "set", tap_sw, "master", "br0")
        self.net._sw("ip", "link", "set", tap_sw, "up")
        self._address()
        return "wire"

    def _address(self):
        self.sh("ip", "addr", "add", "%s/24" % self.addr, "dev", "eth0")
        self.sh("ip", "link", "set", "eth0", "up")

    def stop_wire(self):
        if self.wire and self.wire.poll() is None:
            self.wire.terminate()
            try:
                self.wire.wait(5)
            except subprocess.TimeoutExpired:
                self.wire.kill()
                self.wire.wait(5)
        self.wire = None


class Net(object):
    """The switch and its hosts; destroy() removes all of it."""

    _live = set()

    def __init__(self, workdir):
        stale_cleanup()
        self.prefix = "%s%d" % (PREFIX, os.getpid())
        # Two Nets in one process (one per test) must not share names.
        Net._count = getattr(Net, "_count", 0) + 1
        self.prefix += "n%d" % Net._count
        self.sw = self.prefix + "-sw"
        self.dir = workdir
        self.hosts = {}
        self.netem = None
        self.made = []
        self.etc_dirs = []
        Net._live.add(self)
        _run(["ip", "netns", "add", self.sw])
        self.made.append(self.sw)
        self._sw("ip", "link", "set", "lo", "up")
        self._sw("ip", "link", "add", "br0", "type", "bridge")
        self._sw("ip", "link", "set", "br0", "up")

    def _sw(self, *args):
        return _run(["ip", "netns", "exec", self.sw] + list(args))

    def add_host(self, name):
        assert name not in self.hosts and len(self.hosts) < 250
        h = Host(self, name, len(self.hosts) + 1)
        _run(["ip", "netns", "add", h.ns])
        self.made.append(h.ns)
        h.sh("ip", "link", "set", "lo", "up")
        _run(["ip", "link", "add", "eth0", "netns", h.ns, "type", "veth", "peer", "name", h.port,
              "netns", self.sw])
        self._sw("ip", "link", "set", h.port, "master", "br0")
        self._sw("ip", "link", "set", h.port, "up")
        h._address()
        self.hosts[name] = h
        return h

    def set_hosts(self, entries):
        """Every host's /etc/hosts: localhost and entries, each (address,
        name, ...). Only processes started after it see it."""
        text = "127.0.0.1\tlocalhost\n::1\tlocalhost\n" + "".join(
            "%s\t%s\n" % (e[0], " ".join(e[1:])) for e in entries)
        if not os.path.isdir(NETNS_ETC):
            os.makedirs(NETNS_ETC)
            self.etc_made = True  # removed again once empty
        for h in self.hosts.values():
            d = os.path.join(NETNS_ETC, h.ns)
            if d not in self.etc_dirs:
                os.makedirs(d, exist_ok=True)
                self.etc_dirs.append(d)
            with open(os.path.join(d, "hosts"), "w") as f:
                f.write(text)

    def destroy(self):
        for h in self.hosts.values():
            h.stop_wire()
        for ns in reversed(self.made):
            _run(["ip", "netns", "del", ns], check=False)
        self.made = []
        for d in self.etc_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.etc_dirs = []
        if getattr(self, "etc_made", False):
            try:
                os.rmdir(NETNS_ETC)
            except OSError:
                pass  # another Net's files are there
            self.etc_made = False
        Net._live.discard(self)

    @staticmethod
    def destroy_all():
        for n in list(Net._live):
            n.destroy()


atexit.register(Net.destroy_all)


def leftovers():
    """Namespaces of this process, and their /etc/netns folders, still
    present (for the tests' own check)."""
    mine = "%s%d" % (PREFIX, os.getpid())
    etc = os.listdir(NETNS_ETC) if os.path.isdir(NETNS_ETC) else []
    return ([ns for ns in _ns_list() if ns.startswith(mine + "n")] +
            [os.path.join(NETNS_ETC, d) for d in etc if d.startswith(mine + "n")])


if __name__ == "__main__":
    print(unavailable() or "namespace hosts: available; netem: %s" % netem_available())
    sys.exit(0)
