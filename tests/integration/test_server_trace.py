#!/usr/bin/env python3
"""A server's trace (issue 42): psbench-server with a trace ships its
spans to its master as `trace` messages (docs/protocol.md, "Extension:
the trace"), after each metrics report and, finally, on `stop` and on the
`reset` between runs (before its reset_done).

The master here is the test's (FakeMaster: the control protocol by hand),
so that every message the server sends is seen as sent; the trainers are
raw clients, so that each push's batch and bucket are known. Checked:

- push_recv, fold, resolve and answer_out for every (batch, bucket,
  trainer) of the timed pass, in that order, and nothing of the warm-up
  (its batches restart at 0 in the timed pass: the warm-up pushes another
  bucket here, and every span starts after the master's reset);
- the window (--trace-steps, or the assignment's "steps") keeps only its
  batches; the assignment's trace turns the server's on, and its own
  --trace does where the master sends none; no trace, no message;
- one final part, on `stop`; with a `reset` new_run, the run's final part
  before its reset_done, and the next run's trace holds only its spans;
- on fake-cuda (on cuda where $PSBENCH_SERVER_DEVICE says so: ctest's
  gpu_server_trace), a device_job per future on the lane "cuda stream",
  inside its resolve, from the raw clients and in a --local job's
  trace.json;
- the other kinds: average-batch and batch-update record the same four
  spans, embedding its calls (push_recv, fold, answer_out).

Run: PSBENCH_BIN=build /usr/bin/python3 tests/integration/test_server_trace.py
"""
import json
import os
import socket
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psb  # noqa: E402

# The order of a bucket's spans on the server, per (batch, bucket, trainer).
ORDER = ("push_recv", "fold", "resolve", "answer_out")


# The CUDA device the device_job checks run on: the fake GPU in every
# pass, a real one where ctest's gpu_server_trace asks for it.
CUDA_DEVICE = "cuda" if os.environ.get("PSBENCH_SERVER_DEVICE") == "cuda" else "fake-cuda"


class FakeMaster(object):
    """The control side of one server: it takes the server's register,
    assigns it, and from then on records every message (type, body, the
    time it was read, time.monotonic_ns: the server's clock) on a thread."""

    def __init__(self, test):
        self.test = test
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind((psb.HOST, 0))
        self.lsock.listen(1)
        test.addCleanup(self.lsock.close)
        self.addr = "%s:%d" % self.lsock.getsockname()
        self.msgs = []
        self.cond = threading.Condition()
        self.closed = False
        self.conn = None

    def send(self, kind, body=None):
        data = json.dumps(body if body is not None else {}).encode()
        self.conn.sock.sendall(psb.encode_frame({"type": kind, "payload": len(data)}, data))

    def accept(self, assign, timeout=30):
        """The server's register, then `registered` and `assign`."""
        self.lsock.settimeout(timeout)
        sock, _ = self.lsock.accept()
        self.test.addCleanup(sock.close)
        self.conn = psb.RawClient.accepted(sock)
        h, p = self.conn.recv_frame(timeout)
        self.test.assertEqual(h.get("type"), "register", h)
        self.register = json.loads(p)
        self.send("registered", {"rank": 0})
        self.send("assign", assign)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                h, p = self.conn.recv_frame(3600)
            except (psb.Closed, socket.timeout, OSError):
                with self.cond:
                    self.closed = True
                    self.cond.notify_all()
                return
            with self.cond:
                self.msgs.append((h.get("type"), json.loads(p) if p else {}, time.monotonic_ns()))
                self.cond.notify_all()

    def wait_for(self, pred, what, timeout=30):
        """Until pred(messages) is true; returns its value."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = pred(self.msgs)
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    self.test.fail("no %s from the server (got %r)" % (what, [m[0] for m in self.msgs]))
                self.cond.wait(left)

    def wait_type(self, kind, after=0, timeout=30):
        """The index of the first message of `kind` from index `after` on."""
        def find(msgs):
            for i in range(after, len(msgs)):
                if msgs[i][0] == kind:
                    return i + 1
            return None
        return self.wait_for(find, kind, timeout) - 1

    def traces(self, first=0, last=None):
        """The `trace` bodies among messages [first, last)."""
        with self.cond:
            return [b for t, b, _ in self.msgs[first:last] if t == "trace"]


def spans(parts):
    """The spans of trace parts as dicts: name, lane (names), start and end
    (the server's clock, ns), batch, bucket, trainer, server."""
    out = []
    for p in parts:
        d = p["dump"]
        for name, lane, start, dur, batch, bucket, trainer, server in d["events"]:
            t = d["t0"] + start
            out.append({"name": d["names"][name], "lane": d["lanes"][lane], "start": t, "end": t + dur,
                        "batch": batch, "bucket": bucket, "trainer": trainer, "server": server})
    return out


class ServerTrace(psb.PsbTestCase):

    def server_of_master(self, kind="average", trainers=2, trace=None, flags=(), device="cpu", extra_assign=None):
        """A server of the test's master: its kind, trainer count, the
        assignment's trace object (None: none) and its own flags."""
        fm = FakeMaster(self)
        args = [psb.bin_path("psbench-server"), "--master", fm.addr, "--listen", "%s:0" % psb.HOST,
                "--device", device, "--connect-timeout", "10"] + list(flags)
        srv = self.reg.start(args, name="server", cls=psb.Server)
        assign = {"rank": 0, "trainers": trainers, "kind": kind, "rpc_timeout": 30}
        if trace is not None:
            assign["trace"] = trace
        assign.update(extra_assign or {})
        fm.accept(assign)
        srv.wait_ready()
        fm.wait_type("ready")
        return fm, srv

    def trainers(self, srv, n=2):
        cs = [self.client(srv) for _ in range(n)]
        for r, c in enumerate(cs):
            self.hello_ok(c, r)
        return cs

    def reset(self, fm, new_run=False):
        """The master's reset; the index of the server's reset_done."""
        sent = len(fm.msgs)
        fm.send("reset", {"new_run": True} if new_run else {})
        return fm.wait_type("reset_done", after=sent)

    def stop(self, fm, srv):
        """`stop` (done): the server exits 0 with its final trace sent."""
        fm.send("stop", {"status": "done"})
        self.assertEqual(srv.wait(30), 0, srv.describe())
        fm.wait_for(lambda m: fm.closed, "close")

    def final(self, parts):
        """Exactly one part says final, the last."""
        finals = [p["final"] for p in parts]
        self.assertTrue(finals and finals[-1], finals)
        self.assertEqual(finals.count(True), 1, finals)

    def check_order(self, sp, keys, names=ORDER):
        """Each key (batch, bucket, trainer) has one of each span in
        names, and they follow one another: each starts once the one
        before has (and a push's fold lies within its push_recv, its
        push_recv ends before the resolve, the resolve before the answer
        goes)."""
        by = {}
        for s in sp:
            if s["name"] == "resolve":
                for tr in {k[2] for k in keys}:
                    by.setdefault((s["batch"], s["bucket"], tr), {}).setdefault("resolve", []).append(s)
            else:
                by.setdefault((s["batch"], s["bucket"], s["trainer"]), {}).setdefault(s["name"], []).append(s)
        for k in keys:
            got = by.get(k, {})
            for n in names:
                self.assertEqual(len(got.get(n, [])), 1, (k, n, got))
            one = {n: got[n][0] for n in names}
            for a, b in zip(names, names[1:]):
                self.assertLessEqual(one[a]["start"], one[b]["start"], (k, a, b, one))
            if "fold" in one:
                self.assertLessEqual(one["fold"]["end"], one["push_recv"]["end"], (k, one))
            if "resolve" in one:
                self.assertLessEqual(one["push_recv"]["end"], one["resolve"]["start"] + 0, (k, one))
                self.assertLessEqual(one["resolve"]["end"], one["answer_out"]["start"], (k, one))
            for s in one.values():
                self.assertLessEqual(s["start"], s["end"], s)
                self.assertEqual(s["server"], 0, s)

    def warmup_and_timed(self, fm, cs, batches, buckets, warm_bucket=7):
        """A warm-up (two batches of warm_bucket), the master's reset, then
        the timed pass: batches x buckets. Returns when the reset was
        sent (ns)."""
        for b in range(2):
            self.dense_round(cs, b, warm_bucket)
        t_reset = time.monotonic_ns()
        self.reset(fm)
        for b in range(batches):
            for k in buckets:
                self.dense_round(cs, b, k)
        return t_reset

    # ---- the average kind, the master's trace --------------------------------

    def test_spans_of_the_timed_pass(self):
        """The assignment's trace: every (batch, bucket, trainer) of the
        timed pass has its four spans in order on the lane "reactor"; the
        warm-up left none; parts go out as the run goes (after a metrics
        report), the final one on stop."""
        fm, srv = self.server_of_master(trace={"steps": [0, 1000], "buffer": 4096})
        cs = self.trainers(srv)
        t_reset = self.warmup_and_timed(fm, cs, 3, (0, 1))
        # A part during the run, right behind a metrics report.
        fm.wait_for(lambda m: any(t == "trace" and b["dump"]["events"] for t, b, _ in m), "trace part")
        with fm.cond:
            types = [t for t, _, _ in fm.msgs]
        first = types.index("trace")
        self.assertEqual(types[first - 1], "metrics", types)
        self.stop(fm, srv)
        parts = fm.traces()
        self.final(parts)
        self.assertFalse(parts[0]["final"])
        d = parts[-1]["dump"]
        self.assertEqual((d["role"], d["rank"], d["window"], d["capacity"]), ("server", 0, [0, 1000], 4096), d)
        self.assertEqual(d["lanes"], ["reactor"])
        self.assertEqual(d["dropped"]["count"], 0)
        sp = spans(parts)
        self.assertEqual({s["lane"] for s in sp}, {"reactor"})
        self.assertEqual({s["name"] for s in sp}, set(ORDER))
        self.assertNotIn(7, {s["bucket"] for s in sp})
        self.assertTrue(all(s["start"] >= t_reset for s in sp), min(s["start"] for s in sp) - t_reset)
        keys = [(b, k, t) for b in range(3) for k in (0, 1) for t in (0, 1)]
        self.check_order(sp, keys)
        self.assertEqual(len(sp), 3 * len(keys) + 3 * 2)  # push_recv, fold, answer_out each; a resolve per future
        self.assertEqual({s["trainer"] for s in sp if s["name"] == "resolve"}, {-1})

    def test_window_from_the_flags(self):
        """The server's own --trace and --trace-steps 1:2 (the master sends
        no trace): batches 1 and 2 only; --trace-buffer sets the ring."""
        fm, srv = self.server_of_master(flags=("--trace", "--trace-steps", "1:2", "--trace-buffer", "100"))
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 4, (0,))
        self.stop(fm, srv)
        parts = fm.traces()
        self.final(parts)
        sp = spans(parts)
        self.assertEqual(parts[-1]["dump"]["window"], [1, 2])
        self.assertEqual(parts[-1]["dump"]["capacity"], 100)
        self.assertEqual({s["batch"] for s in sp}, {1, 2})
        self.check_order(sp, [(b, 0, t) for b in (1, 2) for t in (0, 1)])

    def test_full_ring(self):
        """A ring of 10 spans over 4 batches of 7 spans each: the first 10
        are kept, the other 18 counted dropped, in the dump and in the
        server's log."""
        fm, srv = self.server_of_master(trace={"steps": [0, 1000], "buffer": 10})
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 4, (0,))
        self.stop(fm, srv)
        parts = fm.traces()
        sp = spans(parts)
        self.assertEqual(len(sp), 10)
        self.assertEqual(parts[-1]["dump"]["dropped"], {"count": 18, "first_step": 1, "last_step": 3})
        self.assertEqual({s["batch"] for s in sp}, {0, 1})
        self.check_order(sp, [(0, 0, t) for t in (0, 1)])
        self.assertIn("trace of server 0: 18 spans of steps 1..3 dropped: the ring holds 10; raise --trace-buffer",
                      srv.stderr())

    def test_flags_win_over_the_assignment(self):
        """--trace-steps given wins over the assignment's steps."""
        fm, srv = self.server_of_master(trace={"steps": [0, 0], "buffer": 4096}, flags=("--trace-steps", "2"))
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 3, (0,))
        self.stop(fm, srv)
        sp = spans(fm.traces())
        self.assertEqual({s["batch"] for s in sp}, {2})

    def test_no_trace_no_message(self):
        """Neither the master nor the flags trace: no `trace` message."""
        fm, srv = self.server_of_master()
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 2, (0,))
        fm.wait_type("metrics", after=len(fm.msgs))
        self.stop(fm, srv)
        self.assertEqual(fm.traces(), [])

    def test_standalone_refuses_trace(self):
        rc, _, err = self.reg.run([psb.bin_path("psbench-server"), "--standalone", "--trainers", "1", "--trace"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--trace, --trace-steps and --trace-buffer need --master", err)
        rc, _, err = self.reg.run([psb.bin_path("psbench-server"), "--master", "127.0.0.1:9", "--trace-steps", "3:1"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--trace-steps: '3:1': the first step is after the last", err)

    # ---- runs back to back ----------------------------------------------------------

    def test_runs(self):
        """`reset` new_run: the run's final part before its reset_done;
        the next run's trace (after it) holds its own spans only."""
        fm, srv = self.server_of_master(trace={"steps": [0, 1000], "buffer": 4096})
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 2, (0, 1))
        sent = len(fm.msgs)
        fm.send("reset", {"new_run": True})
        fm.wait_type("metrics", after=sent)
        for c in cs:
            c.close()
        done1 = fm.wait_type("reset_done", after=sent)
        run1 = fm.traces(0, done1)
        self.final(run1)
        # Run 2: new trainers, a warm-up and a timed pass of bucket 2.
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 2, (2,))
        self.stop(fm, srv)
        run2 = fm.traces(done1)
        self.final(run2)
        sp1, sp2 = spans(run1), spans(run2)
        self.assertEqual({s["bucket"] for s in sp1}, {0, 1})
        self.assertEqual({s["bucket"] for s in sp2}, {2})
        self.check_order(sp1, [(b, k, t) for b in range(2) for k in (0, 1) for t in (0, 1)])
        self.check_order(sp2, [(b, 2, t) for b in range(2) for t in (0, 1)])
        t_done1 = fm.msgs[done1][2]
        self.assertTrue(all(s["start"] > max(x["end"] for x in sp1) for s in sp2))
        self.assertTrue(all(s["end"] <= t_done1 for s in sp1))

    # ---- the device's stream ------------------------------------------------------------

    def test_fake_cuda_device_jobs(self):
        """fake-cuda (or cuda, CUDA_DEVICE): a device_job per future on the lane "cuda stream",
        within its resolve."""
        fm, srv = self.server_of_master(trace={"steps": [0, 1000], "buffer": 4096}, device=CUDA_DEVICE)
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 2, (0, 1))
        self.stop(fm, srv)
        parts = fm.traces()
        self.final(parts)
        self.assertEqual(parts[-1]["dump"]["lanes"], ["reactor", "cuda stream"])
        sp = spans(parts)
        self.check_order(sp, [(b, k, t) for b in range(2) for k in (0, 1) for t in (0, 1)])
        jobs = [s for s in sp if s["name"] == "device_job"]
        self.assertEqual(sorted((s["batch"], s["bucket"]) for s in jobs), [(b, k) for b in range(2) for k in (0, 1)])
        self.assertEqual({s["lane"] for s in jobs}, {"cuda stream"})
        self.assertEqual({s["lane"] for s in sp if s["name"] != "device_job"}, {"reactor"})
        resolves = {(s["batch"], s["bucket"]): s for s in sp if s["name"] == "resolve"}
        for j in jobs:
            r = resolves[(j["batch"], j["bucket"])]
            self.assertEqual(j["trainer"], -1)
            self.assertLessEqual(r["start"], j["start"], (r, j))
            self.assertLessEqual(j["end"], r["end"], (r, j))

    # ---- the other kinds ------------------------------------------------------------------

    def test_average_batch(self):
        fm, srv = self.server_of_master(kind="average-batch", trace={"steps": [0, 1000], "buffer": 4096})
        cs = self.trainers(srv)
        self.warmup_and_timed(fm, cs, 2, (0, 3))
        self.stop(fm, srv)
        self.check_order(spans(fm.traces()), [(b, k, t) for b in range(2) for k in (0, 3) for t in (0, 1)])

    def test_batch_update(self):
        """batch-update: a round's pushes (one per trainer, bucket 0, in
        step: round N is batch N) and its answer."""
        bu = {"in_features": 2, "out_features": 1, "batch_update_size": 0, "part": 0, "parts": 1, "seed": 0,
              "lr": 0.1, "momentum": 0.9}
        fm, srv = self.server_of_master(kind="batch-update", trace={"steps": [0, 1000], "buffer": 4096},
                             extra_assign={"batch_update": bu})
        cs = self.trainers(srv)

        def rounds(n):
            for b in range(n):
                for c in cs:
                    c.push(psb.dense_push(b, 0, [1.0, 2.0, 3.0]))
                for c in cs:
                    h, _ = c.recv_frame()
                    self.assertEqual((h.get("type"), h.get("batch"), h.get("round")), ("result", b, b + 1), h)
        rounds(2)
        self.reset(fm)
        rounds(3)
        self.stop(fm, srv)
        self.check_order(spans(fm.traces()), [(b, 0, t) for b in range(3) for t in (0, 1)])

    def test_embedding_calls(self):
        """embedding: each lookup and update is a push_recv, its work a
        fold, its rows (and an update's `updated`) an answer_out."""
        emb = {"num_embeddings": 10, "embedding_dim": 4, "seed": 1, "lr": 0.1}
        fm, srv = self.server_of_master(kind="embedding", trainers=1, trace={"steps": [0, 1000], "buffer": 4096},
                             extra_assign={"embedding": emb})
        c, = self.trainers(srv, 1)
        q = lambda vs: struct.pack("<%dq" % len(vs), *vs)  # noqa: E731

        def calls(n):
            for b in range(n):
                c.send_frame({"type": "lookup", "batch": b, "nnz": 2, "bags": 1}, q([1, 2]) + q([0]))
                h, _ = c.recv_frame()
                self.assertEqual((h.get("type"), h.get("batch")), ("rows", b), h)
                c.send_frame({"type": "update", "batch": b, "nnz": 2, "bags": 1, "cols": 4, "confirm": 1},
                             q([1, 2]) + q([0]) + psb.dense_payload([0.5] * 4))
                h, _ = c.recv_frame()
                self.assertEqual((h.get("type"), h.get("batch")), ("updated", b), h)
        calls(2)
        self.reset(fm)
        calls(3)
        self.stop(fm, srv)
        sp = spans(fm.traces())
        self.assertEqual({s["name"] for s in sp}, {"push_recv", "fold", "answer_out"})
        self.assertEqual({s["bucket"] for s in sp}, {-1})
        for b in range(3):
            rank = {"push_recv": 0, "fold": 1, "answer_out": 2}
            mine = sorted((s for s in sp if s["batch"] == b), key=lambda s: (s["start"], rank[s["name"]]))
            # lookup: in, applied, rows out; then the update's the same.
            self.assertEqual([s["name"] for s in mine], ["push_recv", "fold", "answer_out"] * 2, mine)
            self.assertEqual({s["trainer"] for s in mine}, {0})


class EndToEnd(psb.PsbTestCase):
    """With psbench-master --local --trace: the server's spans in the run's
    trace.json, on the master's clock."""

    def server_spans(self, out):
        """server 0's spans in out/trace.json: (name, batch, bucket,
        trainer) -> [event]."""
        with open(os.path.join(out, "trace.json")) as f:
            doc = json.load(f)
        names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
        lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "thread_name"}
        got = {}
        for e in doc["traceEvents"]:
            if e["ph"] == "X" and names[e["pid"]] == "server 0":
                e["lane"] = lanes.get((e["pid"], e["tid"]))
                a = e["args"]
                # an id that does not apply is left out of args
                key = (e["name"], a.get("batch", -1), a.get("bucket", -1), a.get("trainer", -1))
                got.setdefault(key, []).append(e)
        return got

    def check_run(self, out, batches, trainers):
        """Each (batch, bucket, trainer) of batches has one push_recv, fold
        and answer_out, its (batch, bucket) one resolve, in that order. (A
        batch's buckets are the model's: DDP's first batch has a layout of
        its own.)"""
        got = self.server_spans(out)
        self.assertTrue(got, "no span of server 0 in %s/trace.json" % out)
        # device_job too where $PSBENCH_SERVER_DEVICE puts the servers on
        # a CUDA device: one per future, on the lane "cuda stream", inside
        # its resolve (checked below).
        jobs = {(k[1], k[2]): v for k, v in got.items() if k[0] == "device_job"}
        got = {k: v for k, v in got.items() if k[0] != "device_job"}
        on_cuda = os.environ.get("PSBENCH_SERVER_DEVICE") in ("cuda", "fake-cuda")
        self.assertEqual({k[0] for k in got}, set(ORDER), sorted(got))
        self.assertEqual({k[1] for k in got}, set(batches), sorted(got))
        futures = {(k[1], k[2]) for k in got}
        for b, k in futures:
            res = got.get(("resolve", b, k, -1), [])
            self.assertEqual(len(res), 1, (b, k, res))
            if on_cuda:
                job = jobs.get((b, k), [])
                self.assertEqual(len(job), 1, (b, k, job))
                self.assertEqual(job[0]["lane"], "cuda stream", job)
                # On the master's clock, in microseconds with nanoseconds'
                # decimals: inside its resolve.
                self.assertLessEqual(res[0]["ts"], job[0]["ts"] + 1e-3, (res, job))
                self.assertLessEqual(job[0]["ts"] + job[0]["dur"], res[0]["ts"] + res[0]["dur"] + 1e-3, (res, job))
            else:
                self.assertNotIn((b, k), jobs)
            for t in range(trainers):
                one = {}
                for n in ("push_recv", "fold", "answer_out"):
                    evs = got.get((n, b, k, t), [])
                    self.assertEqual(len(evs), 1, (n, b, k, t, evs))
                    one[n] = evs[0]
                one["resolve"] = res[0]
                for a, z in zip(ORDER, ORDER[1:]):
                    self.assertLessEqual(one[a]["ts"], one[z]["ts"], (b, k, t, a, z, one))
        self.assertEqual(sum(len(v) for v in got.values()), len(futures) * (3 * trainers + 1))

    def test_local_job(self):
        """A --local job traced over steps 1:2: the server's four spans for
        each of those batches' buckets and trainers, nothing of the others."""
        out = os.path.join(self.reg.workdir, "traced")
        rc, _, err = self.run_master("--trace", "--trace-steps", "1:2", local=True, out=out, epochs=1, ntrainer=2,
                                     nserver=1)
        self.assertEqual(rc, 0, err[-3000:])
        self.check_run(out, (1, 2), 2)

    def test_runs(self):
        """--runs 2: each run's trace.json holds that run's spans, once."""
        out = os.path.join(self.reg.workdir, "runs")
        rc, _, err = self.run_master("--trace", "--trace-steps", "0:1", "--runs", "2", local=True, out=out,
                                     epochs=1, ntrainer=2, nserver=1)
        self.assertEqual(rc, 0, err[-3000:])
        for run in ("run-001", "run-002"):
            self.check_run(os.path.join(out, run), (0, 1), 2)

if __name__ == "__main__":
    psb.main()
