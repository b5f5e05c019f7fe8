"""psb.py — shared helpers for the psbench integration tests.

The tests start the real binaries (psbench-server, psbench-trainer) on
127.0.0.1 with ephemeral ports and talk wire protocol v1 to them with a raw
client (socket + msgpack). Every process a test starts goes through a
Registry, which always stops it (SIGTERM, then SIGKILL after 5 s) when the
test ends, and an atexit hook does the same for anything left over.

Binaries are looked up in $PSBENCH_BIN (a directory), else in ../../build-test
relative to this file. Run with /usr/bin/python3 (python3-msgpack).
"""
import array
import atexit
import fcntl
import json
import mmap
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = "127.0.0.1"
READY_TIMEOUT = 10.0
STOP_GRACE = 5.0
RUN_TIMEOUT = 90  # a master run of the integration tests, start to end
# --linger for a master that a test still talks to once its run is over
# (its verdict, a late register's refusal): longer than any test waits, so
# the master is there by its own promise, not by luck on a loaded host; the
# test ends it with a signal (end_lingering, or the Registry's stop).
LINGER_S = 600
MIB = 1 << 20
# The ASan pass (tests/CMakeLists.txt sets it): a test whose whole training
# runs repeat code that the pass's other tests run skips there with
# unittest.skipIf(psb.ASAN, reason), and stays in the release pass.
ASAN = os.environ.get("PSBENCH_ASAN") == "1"


# ---- the repository's configurations -------------------------------------

def diverging_trainers(workdir, trainer_class):
    """The trainer configurations with trainer_class's "lr" at 1e30 (a
    float the configuration checks accept; 1e308, which no float holds, is
    refused with the configuration): the parameters overflow in the first
    step and the loss is no longer a number."""
    return trainer_config_with(workdir, trainer_class, "diverging.json", lr=1e30)


def trainer_config_with(workdir, trainer_class, name, **values):
    """configs/trainer_configurations.json with `values` set in
    trainer_class's configurations, written to workdir/NAME; its path."""
    with open(os.path.join(os.path.dirname(HERE), "..", "configs", "trainer_configurations.json")) as f:
        t = json.load(f)
    t[trainer_class]["configurations"].update(values)
    path = os.path.join(workdir, name)
    with open(path, "w") as f:
        json.dump(t, f)
    return path


# ---- binaries ------------------------------------------------------------

def bin_dir():
    d = os.environ.get("PSBENCH_BIN")
    if d:
        return os.path.abspath(d)
    return os.path.abspath(os.path.join(HERE, "..", "..", "build-test"))


def bin_path(name):
    """Path of binary `name` (psbench-server, psbench-trainer)."""
    d = bin_dir()
    for cand in (os.path.join(d, name), os.path.join(d, "server", name),
                 os.path.join(d, "trainer", name)):
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError("%s not found in %s (set PSBENCH_BIN to the build directory)" % (name, d))


def gpu_count():
    """GPUs the CUDA runtime sees here (0 where none answers or no runtime
    loads): what decides whether `--device cuda` may start."""
    import ctypes
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
        except OSError:
            continue
        n = ctypes.c_int(0)
        return n.value if rt.cudaGetDeviceCount(ctypes.byref(n)) == 0 else 0
    return 0


def job_warnings(res):
    """results.json's warnings less the hosts' (host_state: a busy or
    oversubscribed host, which depend on the machine the test runs on: a
    default --local job oversubscribes a 2-core host)."""
    hs = res.get("host_state") or {}
    return [w for w in res["warnings"] if w not in hs.get("warnings", [])]


def base_env(extra=None, drop_token=True):
    """The environment for a child: ours, without PSBENCH_TOKEN (unless a
    test sets it), with ASan told not to hide errors behind a 0 exit."""
    env = dict(os.environ)
    if drop_token:
        env.pop("PSBENCH_TOKEN", None)
    env.setdefault("ASAN_OPTIONS", "abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    # The master's host load (shared/hostinfo.h) read from a quiet host's
    # /proc: a busy test machine must not add "host was busy" warnings to
    # the runs of tests that check the warnings (test_runs checks the real
    # /proc and a busy one).
    env.setdefault("PSBENCH_PROC_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "proc_quiet"))
    if extra:
        env.update(extra)
    return env


def proc_dir_env(proc_dir):
    """base_env with the host's load read from proc_dir (None: the real
    /proc) instead of proc_quiet's."""
    env = base_env()
    env.pop("PSBENCH_PROC_DIR", None)
    if proc_dir:
        env["PSBENCH_PROC_DIR"] = proc_dir
    return env


# What places a process in a launched job: torchrun's, Slurm's, Kubernetes'
# and psbench-node's own variables (the tests' callers may run inside a
# Slurm job or a pod).
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "TORCHELASTIC_RUN_ID", "JOB_COMPLETION_INDEX", "PSBENCH_LAUNCHER",
                 "PSBENCH_BIN_DIR", "PSBENCH_TOKEN", "PSBENCH_TOKEN_FILE", "PSBENCH_NSERVER",
                 "PSBENCH_SERVER_ARGS", "PSBENCH_TRAINER_ARGS", "PSBENCH_SLURM")
LAUNCHER_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PSBENCH_RANK", "PSBENCH_WORLD", "PSBENCH_LOCAL",
                     "PSBENCH_MASTER", "PSBENCH_PORT", "PSBENCH_HTTP")


def launcher_free_env(extra=None):
    """base_env without any of LAUNCHER_VARS or LAUNCHER_PREFIXES of our
    own caller, then `extra`: a job's place comes from the test alone."""
    env = base_env()
    for k in list(env):
        if k in LAUNCHER_VARS or k.startswith(LAUNCHER_PREFIXES):
            del env[k]
    env.update(extra or {})
    return env


def free_port(host=HOST):
    """A TCP port nobody listens on at host now (whoever takes it next
    should do so at once)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def free_port_run(n):
    """A port P with P .. P+n-1 all free on every address (MASTER_PORT and
    the master's ports beside it)."""
    for _ in range(200):
        base = free_port("127.0.0.1")
        if base + n > 65535:
            continue
        ok = True
        for p in range(base, base + n):
            t = socket.socket()
            try:
                t.bind(("0.0.0.0", p))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return base
    raise RuntimeError("no free run of %d ports" % n)


def proc_status(pid, key):
    """A /proc/PID/status field in kB (VmRSS, VmHWM, ...)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def last_line(text):
    """text's last line that is not blank, less its trailing blanks (""
    where none is)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def sanitizer_build(binary=None):
    """Whether this is an ASan or TSan build (whose shadow memory needs an
    unlimited address space): binary's own symbols where one is named,
    else what CMake told the tests (PSBENCH_ASAN, PSBENCH_TSAN)."""
    if binary:
        with open(binary, "rb") as f:
            data = f.read()
        return b"__asan_init" in data or b"__tsan_init" in data
    return ASAN or os.environ.get("PSBENCH_TSAN") == "1"


# ---- processes -----------------------------------------------------------

_LIVE = set()  # every Proc still possibly running, for the atexit hook


def _die_with_parent():
    """In the child before exec: get SIGKILL if the test runner dies, so a
    crashed or killed runner leaves no server behind (Linux only)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _preexec(extra):
    """The child's preexec_fn: _die_with_parent, then `extra` (a test's own
    set-up, e.g. a lower descriptor limit), if any."""
    if extra is None:
        return _die_with_parent

    def both():
        _die_with_parent()
        extra()
    return both


class Proc(object):
    """A started child whose stdout/stderr go to files (never a pipe that
    could fill up and block it)."""

    def __init__(self, args, env, workdir, name, preexec=None):
        self.args = list(args)
        self.name = name
        self.out_path = os.path.join(workdir, name + ".out")
        self.err_path = os.path.join(workdir, name + ".err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=err, env=env, close_fds=True,
                                          preexec_fn=_preexec(preexec))
        self.pid = self.popen.pid
        _LIVE.add(self)

    def alive(self):
        return self.popen.poll() is None

    def wait(self, timeout):
        """Exit code, or raise subprocess.TimeoutExpired."""
        rc = self.popen.wait(timeout=timeout)
        _LIVE.discard(self)
        return rc

    @property
    def returncode(self):
        return self.popen.poll()

    def stdout(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def signal(self, sig):
        if self.alive():
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass

    def stop(self, grace=STOP_GRACE):
        """SIGTERM, then SIGKILL after `grace` seconds. Returns the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                try:
                    self.popen.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
        _LIVE.discard(self)
        return self.popen.poll()

    def describe(self):
        return "%s (pid %d, rc %r)\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
            " ".join(self.args), self.pid, self.returncode, self.stdout()[-4000:],
            self.stderr()[-4000:])


class Server(Proc):
    """A psbench-server; `port` is known once it printed its ready line."""

    READY_RE = re.compile(r"listening on ([0-9.]+):(\d+)")

    def __init__(self, *a, **kw):
        Proc.__init__(self, *a, **kw)
        self.port = None

    def _wrapped(self):
        """Under $PSBENCH_SERVER_WRAP (compute-sanitizer) the process
        started is the wrapper: the server's pids among its descendants."""
        if os.path.basename(self.args[0]) == "psbench-server":
            return []
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            try:
                with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            for k in kids:
                try:
                    with open("/proc/%d/comm" % k) as f:
                        if f.read().strip() == "psbench-server":
                            found.append(k)
                except OSError:
                    pass
                todo.append(k)
        return found

    def server_pid(self):
        """The server's own pid, also under a wrapper."""
        return (self._wrapped() or [self.pid])[0]

    def signal(self, sig):
        """To the server itself, also when a wrapper started it (a wrapper
        such as compute-sanitizer dies of a SIGTERM instead of passing it
        on; the server exits cleanly and the wrapper with its code)."""
        pids = self._wrapped() if self.alive() else []
        if not pids:
            Proc.signal(self, sig)
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def wait_ready(self, timeout=READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.READY_RE.search(self.stderr())
            if m:
                self.port = int(m.group(2))
                return self.port
            if not self.alive():
                raise AssertionError("server exited before it was ready:\n" + self.describe())
            time.sleep(0.02)
        raise AssertionError("server not ready within %.0f s:\n%s" % (timeout, self.describe()))

    @property
    def addr(self):
        return "%s:%d" % (HOST, self.port)

    def terminate_and_wait(self, timeout=15.0):
        """SIGTERM and wait for a clean exit; returns (rc, stdout, stderr).
        Falls back to SIGKILL (and returns its code) if it hangs."""
        self.signal(signal.SIGTERM)
        try:
            rc = self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop(grace=1.0)
            raise AssertionError("server did not exit within %.0f s of SIGTERM:\n%s" %
                                 (timeout, self.describe()))
        return rc, self.stdout(), self.stderr()


_SANITIZER_RE = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer|"
                           r"========= ERROR SUMMARY: [1-9]")


def sanitizer_report(text):
    """The first lines of an ASan/LSan/UBSan/TSan report in `text`, or None."""
    m = _SANITIZER_RE.search(text)
    if not m:
        return None
    start = text.rfind("\n", 0, m.start()) + 1
    return text[start:start + 3000]


def metric_count(table_text, metric):
    """The `count` column of `metric` in a metrics table, or None."""
    for line in table_text.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == metric:
            return int(f[1])
    return None


def metric_row(table_text, metric):
    """The row of `metric` in a metrics table as a dict (count, min, max,
    mean, variance, stdev, p50, p90, p99; values as printed, in ms), or
    None. Metric names with spaces are not found (split on whitespace)."""
    cols = ("count", "min", "max", "mean", "variance", "stdev", "p50", "p90", "p99")
    for line in table_text.splitlines():
        f = line.split()
        if len(f) == 1 + len(cols) and f[0] == metric:
            row = dict(zip(cols, (float(x) for x in f[1:])))
            row["count"] = int(row["count"])
            return row
    return None


def metric_names(table_text):
    """The metrics of a metrics table, in the order it prints them (the
    first word of each row below the header)."""
    names, seen_header = [], False
    for line in table_text.splitlines():
        f = line.split()
        if f[:2] == ["metric", "count"]:
            seen_header = True
            continue
        if seen_header and len(f) >= 10:
            names.append(" ".join(f[:-9]))
        elif seen_header:
            break
    return names


PARAM_INDEX_BATCH = "parameter_server_batch_metric,param_index_batch"
PARAM_INDEX_STRAGGLER = "parameter_server_straggler_metric,param_index_straggler"
# The same two measured from the first push's header (psbench's extension).
PARAM_INDEX_BATCH_FROM_HEADER = "parameter_server_batch_metric,param_index_batch_from_header"
PARAM_INDEX_STRAGGLER_FROM_HEADER = "parameter_server_straggler_metric,param_index_straggler_from_header"


class Registry(object):
    """Starts processes and stops every one of them in stop_all()."""

    def __init__(self):
        self.procs = []
        self.workdir = tempfile.mkdtemp(prefix="psbench-it-")
        self.n = 0

    def _name(self, base):
        self.n += 1
        return "%02d-%s" % (self.n, base)

    def start(self, args, env=None, name="proc", cls=Proc, preexec=None):
        p = cls(args, env if env is not None else base_env(), self.workdir, self._name(name), preexec)
        self.procs.append(p)
        return p

    def server(self, trainers=2, kind=None, token=None, listen=None, extra=(), env=None,
               ready=True, preexec=None):
        # $PSBENCH_SERVER_WRAP: a command that runs the server (tools/
        # gpu-sanitize.sh: compute-sanitizer over the servers of the gpu
        # suites).
        wrap = os.environ.get("PSBENCH_SERVER_WRAP", "").split()
        args = wrap + [bin_path("psbench-server"), "--standalone", "--trainers", str(trainers),
                       "--listen", listen or ("%s:0" % HOST)]
        if kind:
            args += ["--kind", kind]
        if token is not None:
            args += ["--token", token]
        args += list(extra)
        s = self.start(args, env=env, name="server", cls=Server, preexec=preexec)
        if ready:
            s.wait_ready()
        return s

    def trainer(self, servers, rank, buckets=3, floats=1000, batches=5, sparse=False,
                token=None, extra=(), env=None):
        if isinstance(servers, Server):
            servers = servers.addr
        elif isinstance(servers, (list, tuple)):
            servers = ",".join(s.addr if isinstance(s, Server) else s for s in servers)
        args = [bin_path("psbench-trainer"), "--server", servers, "--rank", str(rank),
                "--model", "synthetic", "--buckets", str(buckets), "--bucket-floats",
                str(floats), "--batches", str(batches), "--connect-timeout", "10"]
        if sparse:
            args.append("--sparse")
        if token is not None:
            args += ["--token", token]
        args += list(extra)
        return self.start(args, env=env, name="trainer%d" % rank)

    def run(self, args, timeout=30, env=None):
        """Run a short command to completion: (rc, stdout, stderr)."""
        r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env if env is not None else base_env(),
                           timeout=timeout)
        return (r.returncode, r.stdout.decode("utf-8", "replace"),
                r.stderr.decode("utf-8", "replace"))

    def stop_all(self):
        """Stop every process; returns the sanitizer reports found in their
        stderr (list of (process description, excerpt))."""
        for p in reversed(self.procs):
            p.stop()
        reports = []
        for p in self.procs:
            try:
                excerpt = sanitizer_report(p.stderr())
            except OSError:
                excerpt = None
            if excerpt:
                reports.append((" ".join(p.args), excerpt))
        self.procs = []
        shutil.rmtree(self.workdir, ignore_errors=True)
        return reports


def _stop_leftovers():
    for p in list(_LIVE):
        p.stop()


atexit.register(_stop_leftovers)


# ---- float32 arithmetic and payloads ---------------------------------------

_F32 = struct.Struct("<f")


# f32(x): a Python float rounded to float32, like a C float. Written once,
# in bu_reference.py, which the mock servers load without this module.
from bu_reference import f32  # noqa: E402,F401


def mean_scale(n):
    """The server's scale factor: 1.0f / (float)n."""
    return f32(1.0 / f32(float(n)))


def expected_dense_mean(pushes, n):
    """Mean as the server computes it: float32 sum in the given order, then
    times float32(1/n). `pushes`: lists of numbers of equal length."""
    scale = mean_scale(n)
    out = []
    for i in range(len(pushes[0])):
        acc = f32(pushes[0][i])
        for p in pushes[1:]:
            acc = f32(acc + f32(p[i]))
        out.append(f32(acc * scale))
    return out


def expected_sparse_mean(pushes, n, cols):
    """pushes: list of (indices, values) with values row-major (len(indices)
    * cols). Returns (ascending unique indices, flat values) as the server
    emits them."""
    scale = mean_scale(n)
    rows = {}
    for idx, vals in pushes:
        for i, r in enumerate(idx):
            acc = rows.setdefault(r, [0.0] * cols)
            for c in range(cols):
                acc[c] = f32(acc[c] + f32(vals[i * cols + c]))
    keys = sorted(rows)
    flat = []
    for r in keys:
        flat.extend(f32(v * scale) for v in rows[r])
    return keys, flat


def dense_payload(values):
    a = array.array("f", values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def sparse_payload(indices, values):
    i = array.array("q", indices)
    v = array.array("f", values)
    if sys.byteorder != "little":
        i.byteswap()
        v.byteswap()
    return i.tobytes() + v.tobytes()


def parse_dense(payload):
    n = len(payload) // 4
    return list(struct.unpack("<%df" % n, payload[:4 * n]))


def parse_sparse(payload, nnz, cols):
    idx = list(struct.unpack("<%dq" % nnz, payload[:8 * nnz]))
    vals = list(struct.unpack("<%df" % (nnz * cols), payload[8 * nnz:8 * nnz + 4 * nnz * cols]))
    return idx, vals


def dense_push(batch, bucket, values, dtype="f32"):
    """(header, payload) of a dense push."""
    h = {"type": "push", "batch": batch, "bucket": bucket, "dtype": dtype, "layout": "dense",
         "count": len(values)}
    return h, dense_payload(values)


def sparse_push(batch, bucket, rows, cols, indices, values):
    """(header, payload) of a sparse push; values row-major, len(indices)*cols."""
    assert len(values) == len(indices) * cols
    h = {"type": "push", "batch": batch, "bucket": bucket, "dtype": "f32", "layout": "sparse",
         "rows": rows, "cols": cols, "nnz": len(indices)}
    return h, sparse_payload(indices, values)


# ---- raw protocol client -------------------------------------------------

class Closed(Exception):
    """The peer closed (or reset) the connection."""


def encode_frame(header, payload=b"", auto_len=True):
    h = dict(header)
    if auto_len and payload and "payload" not in h:
        h["payload"] = len(payload)
    body = msgpack.packb(h, use_bin_type=True)
    return struct.pack(">I", len(body)) + body + payload


class RawClient(object):
    """One TCP connection speaking wire protocol v1 by hand."""

    def __init__(self, port, host=HOST, timeout=10.0, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.closed = False

    @classmethod
    def accepted(cls, sock):
        """The server's end of a connection a trainer made: a server by
        hand (the test's)."""
        c = cls.__new__(cls)
        c.sock, c.buf, c.closed = sock, b"", False
        return c

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # sending
    def send_raw(self, data, timeout=10.0):
        self.sock.settimeout(timeout)
        self.sock.sendall(data)

    def send_frame(self, header, payload=b"", auto_len=True, timeout=10.0):
        self.send_raw(encode_frame(header, payload, auto_len), timeout)

    def push(self, hp, timeout=10.0):
        """Send a (header, payload) pair from dense_push/sparse_push."""
        self.send_frame(hp[0], hp[1], timeout=timeout)

    def hello(self, rank, token=None, version=1, role="trainer", timeout=10.0, extra=None):
        """Send hello (with any `extra` fields) and return the answer
        (header, payload)."""
        h = {"type": "hello", "version": version, "role": role, "rank": rank}
        if token is not None:
            h["token"] = token
        h.update(extra or {})
        self.send_frame(h)
        return self.recv_frame(timeout)

    # receiving
    def _recv_chunk(self, n):
        """One read of up to n bytes (a subclass may take descriptors too)."""
        return self.sock.recv(n)

    def _fill(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out waiting for %d bytes" % n)
            self.sock.settimeout(left)
            try:
                chunk = self._recv_chunk(max(65536, n - len(self.buf)))
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as e:
                raise Closed(str(e))
            if not chunk:
                raise Closed("EOF")
            self.buf += chunk

    def recv_frame(self, timeout=10.0):
        """Next frame as (header dict, payload bytes). Raises Closed on EOF
        or reset, socket.timeout when nothing complete arrives in time."""
        deadline = time.monotonic() + timeout
        self._fill(4, deadline)
        (hl,) = struct.unpack(">I", self.buf[:4])
        self._fill(4 + hl, deadline)
        header = msgpack.unpackb(self.buf[4:4 + hl], raw=False)
        plen = header.get("payload", 0)
        self._fill(4 + hl + plen, deadline)
        payload = self.buf[4 + hl:4 + hl + plen]
        self.buf = self.buf[4 + hl + plen:]
        self.last_size = 4 + hl + plen  # the frame's bytes on the wire
        return header, payload

    def expect_closed(self, timeout=10.0):
        """Read (and drop) everything until EOF or reset; fail on timeout.
        Returns the frames read before the close."""
        deadline = time.monotonic() + timeout
        frames = []
        while True:
            try:
                frames.append(self.recv_frame(max(0.01, deadline - time.monotonic())))
            except Closed:
                return frames
            except socket.timeout:
                raise AssertionError("connection still open after %.1f s (frames: %r)" %
                                     (timeout, [f[0] for f in frames]))

    def drain_until_closed(self, timeout=10.0):
        """Like expect_closed but without parsing (for huge backlogs).
        Returns bytes read, or raises AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        total = len(self.buf)
        self.buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("connection still open after %.1f s" % timeout)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
                return total
            except socket.timeout:
                continue
            if not chunk:
                return total
            total += len(chunk)

    def expect_nothing(self, wait=0.3):
        """Assert no frame arrives within `wait` seconds and the connection
        stays open."""
        try:
            h, _ = self.recv_frame(wait)
        except socket.timeout:
            return
        raise AssertionError("unexpected frame %r" % (h,))


# ---- test base -------------------------------------------------------------

class StopsProcesses(object):
    """For a unittest.TestCase with a Registry in self.reg: _stop_processes
    (a cleanup) stops every process it started and fails the test with
    the sanitizer reports they left."""

    def _stop_processes(self):
        reports = self.reg.stop_all()
        if reports:
            self.fail("sanitizer report(s):\n" + "\n\n".join(
                "%s:\n%s" % r for r in reports))


class PsbTestCase(StopsProcesses, unittest.TestCase):
    """Gives each test a Registry (self.reg) that stops everything, a
    list of raw clients closed at the end, and its masters (master,
    run_master) with their results (results)."""

    def setUp(self):
        self.reg = Registry()
        self.addCleanup(self._stop_processes)
        self._clients = []
        self.addCleanup(self._close_clients)

    def _close_clients(self):
        for c in self._clients:
            c.close()

    def client(self, server_or_port, **kw):
        port = server_or_port.port if isinstance(server_or_port, Server) else server_or_port
        c = RawClient(port, **kw)
        self._clients.append(c)
        return c

    def shm_client(self, server, **kw):
        """A ShmClient of server's, closed at the end."""
        c = ShmClient(server.port, **kw)
        self._clients.append(c)
        return c

    # This class's masters (self.master, self.run_master): master_argv's
    # keywords (master_kw) and the flags before a call's own (master_flags),
    # class attributes, or set in setUp where they name the test's own
    # files; a call's own keywords win over master_kw.
    master_kw = {}
    master_flags = ()

    def _master_argv(self, extra, kw):
        return master_argv(*(tuple(self.master_flags) + tuple(extra)), **dict(self.master_kw, **kw))

    def master(self, *extra, env=None, preexec=None, ports=True, **kw):
        """A psbench-master started in self.reg (stopped at the test's end)
        with master_argv(*master_flags, *extra, **master_kw and kw), in env
        (None: base_env()) with preexec in the child; its ports read
        (wait_ports) unless `ports` is False."""
        m = self.reg.start(self._master_argv(extra, kw), env=env, name="master", cls=Master, preexec=preexec)
        if ports:
            m.wait_ports()
        return m

    def run_master(self, *extra, timeout=RUN_TIMEOUT, env=None, **kw):
        """psbench-master with master's command line run to completion
        (Registry.run, killed after `timeout` s): (rc, stdout, stderr)."""
        return self.reg.run(self._master_argv(extra, kw), timeout=timeout, env=env)

    def node(self, m, binary, device, name, extra=()):
        """A node (binary: psbench-server, psbench-trainer) of master m's
        job on `device`, started by hand in self.reg."""
        return self.reg.start([bin_path(binary), "--master", m.ctl, "--device", device] + list(extra), name=name)

    def results(self, out, m=None, timeout=240):
        """results_json(out); where m is given, first its exit, within
        `timeout` s, checked to be 0."""
        if m is not None:
            rc = m.wait(timeout)
            self.assertEqual(rc, 0, m.describe())
        return results_json(out)

    def wait_phase(self, m, phases, timeout=None):
        """wait_phase (below) for this test."""
        return wait_phase(self, m, phases, RUN_TIMEOUT if timeout is None else timeout)

    def hello_ok(self, c, rank, token=None, extra=None):
        h, p = c.hello(rank, token=token, extra=extra)
        self.assertEqual(h.get("type"), "welcome", "hello rank %d: %r" % (rank, h))
        self.assertEqual(h.get("version"), 1)
        return h

    def expect_error(self, c, code, timeout=10.0, batch=None, bucket=None):
        try:
            h, p = c.recv_frame(timeout)
        except Closed as e:
            self.fail("expected error %s, connection closed instead (%s)" % (code, e))
        self.assertEqual(h.get("type"), "error", "expected error %s, got %r" % (code, h))
        self.assertEqual(h.get("code"), code, "wrong error code: %r" % (h,))
        self.assertIsInstance(h.get("message"), str)
        self.assertTrue(h.get("message"), "error without a message: %r" % (h,))
        if batch is not None:
            self.assertEqual(h.get("batch"), batch, "%r" % (h,))
        if bucket is not None:
            self.assertEqual(h.get("bucket"), bucket, "%r" % (h,))
        self.assertEqual(p, b"")
        return h

    def barrier(self, c):
        """Make sure the server has processed everything c sent so far: a
        frame of an unknown type is answered `unsupported` in order, after
        every earlier frame of c. Only after hello."""
        c.send_frame({"type": "psb-test-barrier"})
        self.expect_error(c, "unsupported")

    def expect_dense_result(self, c, batch, bucket, expected, timeout=10.0):
        h, p = c.recv_frame(timeout)
        self.assertEqual(h.get("type"), "result", "expected a result, got %r" % (h,))
        self.assertEqual((h.get("batch"), h.get("bucket")), (batch, bucket), "%r" % (h,))
        self.assertEqual(h.get("layout"), "dense")
        self.assertEqual(h.get("dtype"), "f32")
        self.assertEqual(h.get("count"), len(expected))
        self.assertEqual(len(p), 4 * len(expected))
        got = parse_dense(p)
        # Exact comparison, bit for bit (as float32 values).
        self.assertEqual(dense_payload(got), dense_payload(expected),
                         "mean differs: got %r expected %r" % (got[:16], expected[:16]))
        return h

    def expect_sparse_result(self, c, batch, bucket, rows, cols, exp_idx, exp_vals,
                             timeout=10.0):
        h, p = c.recv_frame(timeout)
        self.assertEqual(h.get("type"), "result", "expected a result, got %r" % (h,))
        self.assertEqual((h.get("batch"), h.get("bucket")), (batch, bucket), "%r" % (h,))
        self.assertEqual(h.get("layout"), "sparse")
        self.assertEqual((h.get("rows"), h.get("cols")), (rows, cols))
        self.assertEqual(h.get("nnz"), len(exp_idx), "%r" % (h,))
        self.assertEqual(len(p), len(exp_idx) * (8 + 4 * cols))
        idx, vals = parse_sparse(p, len(exp_idx), cols)
        self.assertEqual(idx, exp_idx)
        self.assertEqual(dense_payload(vals), dense_payload(exp_vals),
                         "sparse mean differs: got %r expected %r" % (vals, exp_vals))
        return h

    def dense_round(self, clients, batch, bucket, n=None, base=1):
        """Every client in `clients` (all `n` trainers) pushes a small
        integer vector; every one must get the exact mean."""
        n = n or len(clients)
        count = 8
        pushes = [[float(base + 3 * i + j) for j in range(count)] for i in range(len(clients))]
        for c, vals in zip(clients, pushes):
            c.push(dense_push(batch, bucket, vals))
        exp = expected_dense_mean(pushes, n)
        for c in clients:
            self.expect_dense_result(c, batch, bucket, exp)

    def good_round(self, server, batch=1000, bucket=0, clients=None, ranks=(0, 1)):
        """A correct round: with `clients` (already said hello) or with new
        raw clients for `ranks`. Returns the clients."""
        if clients is None:
            clients = [self.client(server) for _ in ranks]
            for c, r in zip(clients, ranks):
                self.hello_ok(c, r)
        self.dense_round(clients, batch, bucket)
        return clients

    def assert_server_alive(self, server):
        self.assertTrue(server.alive(), "server died:\n" + server.describe())


def _on_sigterm(signum, frame):
    # Turn SIGTERM (e.g. a ctest timeout) into a normal exit so that the
    # cleanups and the atexit hook stop every child.
    raise SystemExit(128 + signum)


def main():
    """unittest.main with a final "N passed, M failed" line."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        bin_path("psbench-server")
        bin_path("psbench-trainer")
    except RuntimeError as e:
        print("psb: %s" % e, file=sys.stderr)
        sys.exit(1)
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    failed = len(r.failures) + len(r.errors) + len(getattr(r, "unexpectedSuccesses", []))
    skipped = len(r.skipped)
    passed = r.testsRun - failed - skipped
    print("%d passed, %d failed%s" % (passed, failed, ", %d skipped" % skipped if skipped else ""))
    sys.exit(0 if failed == 0 and r.testsRun > 0 else 1)


# ---- the master: a psbench-master process and its HTTP API ----------------

def master_argv(*extra, listen=True, local=False, linger=0, rpc_timeout=None, model=None, model_config=None,
                epochs=None, ntrainer=None, nserver=None, out=None):
    """psbench-master's command line: its control plane and HTTP on
    ephemeral ports of HOST (listen), then each of --linger, --rpc-timeout,
    --model, --model-config-path, --epochs, --ntrainer, --nserver and
    --out whose keyword is not None (None: the master's own default),
    --local where `local`, then `extra` (last: a flag given again there
    wins)."""
    args = [bin_path("psbench-master")]
    if listen:
        args += ["--listen", "%s:0" % HOST, "--http", "%s:0" % HOST]
    for flag, value in (("--linger", linger), ("--rpc-timeout", rpc_timeout), ("--model", model),
                        ("--model-config-path", model_config), ("--epochs", epochs), ("--ntrainer", ntrainer),
                        ("--nserver", nserver), ("--out", out)):
        if value is not None:
            args += [flag, str(value)]
    if local:
        args.append("--local")
    return args + list(extra)


def params_of(path):
    """The parameters a trainer's --params-out wrote to path: raw
    little-endian float32, as an array('f')."""
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def results_json(out):
    """The results.json a master wrote to its --out directory `out`."""
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f)


class Master(Proc):
    CTL_RE = re.compile(r"control plane on ([0-9.]+):(\d+)")
    HTTP_RE = re.compile(r"HTTP on http://([0-9.]+):(\d+)/")

    def wait_ports(self, timeout=10.0):
        """The ports it printed: ctl ("HOST:PORT"), ctl_addr ((HOST, PORT))
        and http (its base URL)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            err = self.stderr()
            c, h = self.CTL_RE.search(err), self.HTTP_RE.search(err)
            if c and h:
                self.ctl = "%s:%s" % (HOST, c.group(2))
                self.ctl_addr = (HOST, int(c.group(2)))
                self.http = "http://%s:%s" % (HOST, h.group(2))
                return
            if not self.alive():
                raise AssertionError("master exited early:\n" + self.describe())
            time.sleep(0.02)
        raise AssertionError("master did not print its ports:\n" + self.describe())


def http_get(url, method="GET", timeout=5.0):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode("utf-8", "replace")


def wait_phase(test, m, phases, timeout=RUN_TIMEOUT):
    """Poll m's /api/v1/status until its phase is one of phases; returns
    the status, or fails `test` with the last one seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = http_json(m.http + "/api/v1/status")
        except OSError:
            last = None
        if last and last["phase"] in phases:
            return last
        time.sleep(0.05)
    test.fail("phase never reached %s (last %r):\n%s" % (phases, last, m.describe()))


def end_lingering(test, m, code):
    """End a master that lingers after its run (--linger LINGER_S): it is
    still there (its linger is not over), and a signal ends it with the
    run's exit code (docs/operations.md: a signal during --linger leaves
    now; a failed run stays 1, a done one 0)."""
    test.assertTrue(m.alive(), "the master left during its --linger:\n" + m.describe())
    m.signal(signal.SIGTERM)
    test.assertEqual(m.wait(RUN_TIMEOUT), code, m.describe())


def http_json(url):
    code, ctype, body = http_get(url)
    assert code == 200, (url, code, body)
    assert ctype.startswith("application/json"), (url, ctype)
    return json.loads(body)


# ---- shared memory: a trainer by hand over the server's Unix socket ------

def sealed_memfd(size, seals=fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW):
    fd = os.memfd_create("psbench-test", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


class ShmClient(RawClient):
    """A trainer by hand over the server's Unix socket: TCP hello asking
    for shared memory, the redirect followed, then hello with a segment."""

    def __init__(self, port, size=4 * MIB, seg_fd=None, send_segment=True, map_segment=True, **kw):
        super().__init__(port, **kw)
        self.fds = []
        self.seg_fd = seg_fd if seg_fd is not None else sealed_memfd(size)
        # map_segment False: a segment this process cannot map (a hugetlbfs
        # memfd with no huge page free), sent only.
        self.seg = mmap.mmap(self.seg_fd, os.fstat(self.seg_fd).st_size) if map_segment else None
        self.send_segment = send_segment
        self.server_seg = None

    def redirect(self, rank):
        h, _ = super().hello(rank, extra={"link": "shm"})
        assert h["type"] == "redirect", h
        self.sock.close()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect("\0" + h["shm"])
        self.buf = b""
        return h

    def hello_shm(self, rank, extra=None):
        self.redirect(rank)
        h = {"type": "hello", "version": 1, "role": "trainer", "rank": rank, "zerocopy": 1}
        fds = []
        if self.send_segment:
            h["segment"] = os.fstat(self.seg_fd).st_size
            fds = [self.seg_fd]
        h.update(extra or {})
        socket.send_fds(self.sock, [encode_frame(h)], fds)
        w, _ = self.recv_frame()
        if w.get("segment") and self.fds:
            fd = self.fds.pop(0)
            self.server_seg = mmap.mmap(fd, w["segment"], prot=mmap.PROT_READ)
            self.server_seg_fd = fd
        return w

    def _recv_chunk(self, n):
        if self.sock.family != socket.AF_UNIX:
            return super()._recv_chunk(n)
        data, fds, _, _ = socket.recv_fds(self.sock, n, 4)
        self.fds += fds
        return data

    def put(self, at, values):
        b = dense_payload(values)
        self.seg[at:at + len(b)] = b
        return len(b)

    def push_at(self, batch, bucket, count, at):
        self.send_frame({"type": "push", "batch": batch, "bucket": bucket, "dtype": "f32", "layout": "dense",
                         "count": count, "at": at})

    def result(self, timeout=10.0):
        """The next frame; a result's payload read from the server's
        segment when it names one."""
        h, p = self.recv_frame(timeout)
        if h.get("type") == "result" and "at" in h:
            n = 4 * h["count"]
            p = bytes(self.server_seg[h["at"]:h["at"] + n])
        return h, p

    def close(self):
        super().close()
        for fd in self.fds:
            os.close(fd)
        self.fds = []
