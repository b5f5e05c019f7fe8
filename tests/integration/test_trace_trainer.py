#!/usr/bin/env python3
"""The trainer's trace (issue 42): a trainer that traces (its own --trace,
or the `trace` object of the master's assignment) records its compute
loop's spans, each bucket's, and its communication thread's frames, and
ships them to the master as `trace` messages after its reports, the last
part ("final": true) when the master's `stop` comes.

Each trainer here talks to a real master through a tap on its control
link (ControlTap): the tap passes every message on, keeps the trainer's
`trace` messages (the master needs no trace of its own for that), and may
add a `trace` object to the assignment as a master with --trace does. The
tests put the parts together and check them against the very samples
the trainer reported for the same steps (its `metrics` and `pass_done`
reports of the timed pass). And end to end: a `psbench-master --local
--trace` job's trace.json holds every trainer's spans, checked against its
results.json (steady_state's steps, each metric's count x mean); so do
the other workloads' (Synthetic, batch-update, the HybridModel in both
rpc patterns), each its own spans, and `psbench-master trace summarize`
reads their traces."""
import json
import os
import socket
import struct
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import msgpack  # noqa: E402

import psb  # noqa: E402

# A span's time and its metric's sample come from the same two clock
# readings (ns): the sample is (end - start) / 1e6 as a double, sent as
# JSON with every digit, the span's duration the same integer. They are
# equal but for the division's rounding, far below this bound (ms).
EXACT_MS = 1e-9

COMPUTE_METRICS = {
    "forward": "forward_metric,forward_pass",
    "backward_compute": "backward_metric,backward_compute",
    "exposed_wait": "hook_future_metric,exposed_wait",
    "optimizer": "optimizer_metric,step",
    "step": "batch_level_metric,batch_all",
}


class ControlTap(object):
    """A man in the middle on one node's control link to a master: listens
    on `port`; the node's connection is passed on to the master at
    master_addr, byte for byte, but for `trace` messages from the node,
    which are kept (not passed on), and, where `assign_trace` is given,
    the assignment, which gets it as its `trace` object. Every message is
    kept in `log` in arrival order: (direction "up" or "down", type,
    body)."""

    def __init__(self, master_addr, assign_trace=None):
        self.master_addr = master_addr
        self.assign_trace = assign_trace
        self.log = []
        self.lock = threading.Lock()
        self.socks = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((psb.HOST, 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        try:
            node, _ = self.listener.accept()
            master = socket.create_connection(self.master_addr)
        except OSError:
            return
        self.socks += [node, master]
        for src, dst, up in ((node, master, True), (master, node, False)):
            threading.Thread(target=self._pump, args=(src, dst, up), daemon=True).start()

    def _pump(self, src, dst, up):
        buf = b""
        try:
            while True:
                chunk = src.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 4:
                    (hl,) = struct.unpack(">I", buf[:4])
                    if len(buf) < 4 + hl:
                        break
                    header = msgpack.unpackb(buf[4:4 + hl], raw=False)
                    end = 4 + hl + header.get("payload", 0)
                    if len(buf) < end:
                        break
                    frame, payload, buf = buf[:end], buf[4 + hl:end], buf[end:]
                    body = json.loads(payload) if payload else {}
                    kind = header.get("type")
                    if not up and kind == "assign" and self.assign_trace is not None:
                        body["trace"] = self.assign_trace
                        data = json.dumps(body).encode()
                        header["payload"] = len(data)
                        frame = psb.encode_frame(header, data)
                    with self.lock:
                        self.log.append(("up" if up else "down", kind, body))
                    if not (up and kind == "trace"):
                        dst.sendall(frame)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        for s in [self.listener] + self.socks:
            try:
                s.close()
            except OSError:
                pass

    def messages(self):
        with self.lock:
            return list(self.log)


def tap_spans(test, tap):
    """The node's trace as the tap kept it, its parts put together:
    (head of the last part, [span dict...]), each span with name, lane,
    start, end (ns, the node's clock) and its ids. The parts are checked:
    one final, the last, after the master's stop."""
    msgs = tap.messages()
    parts = [(i, b) for i, (d, t, b) in enumerate(msgs) if d == "up" and t == "trace"]
    test.assertTrue(parts, "no trace message: %r" % [m[:2] for m in msgs])
    finals = [i for i, b in parts if b["final"]]
    test.assertEqual(finals, [parts[-1][0]], "one final part, the last")
    stops = [i for i, (d, t, _) in enumerate(msgs) if d == "down" and t == "stop"]
    test.assertTrue(stops and stops[0] < finals[0], "the final part comes once the master's stop has")
    spans = []
    for _, b in parts:
        d = b["dump"]
        for name, lane, start, dur, batch, bucket, trainer, server in d["events"]:
            spans.append({"name": d["names"][name], "lane": d["lanes"][lane], "start": d["t0"] + start,
                          "end": d["t0"] + start + dur, "batch": batch, "bucket": bucket, "trainer": trainer,
                          "server": server})
    return parts[-1][1]["dump"], spans


def timed_samples(tap, metric):
    """The samples of `metric` the node reported in its timed pass (its
    reports after the master's `start` of a phase other than warmup), in
    order."""
    out, timed = [], False
    for d, t, b in tap.messages():
        if d == "down" and t == "start":
            timed = b.get("phase") != "warmup"
        elif d == "up" and timed and t in ("metrics", "pass_done"):
            out += b.get("samples", {}).get(metric, [])
    return out


def by(spans, name):
    return [s for s in spans if s["name"] == name]


def trace_json_trainers(path):
    """A trace.json's trainers' spans, {rank: [span...]} as tap_spans
    gives them, times in ns on the master's clock (the same offset moves
    all of a trainer's spans: their order and lengths are its own), and
    the document's metadata.nodes by process."""
    with open(path) as f:
        doc = json.load(f)
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = {}
    for e in doc["traceEvents"]:
        if e["ph"] != "X" or not procs[e["pid"]].startswith("trainer "):
            continue
        start = round(e["ts"] * 1000)
        a = e["args"]
        spans.setdefault(int(procs[e["pid"]].split()[1]), []).append({
            "name": e["name"], "lane": lanes[(e["pid"], e["tid"])], "start": start,
            "end": start + round(e["dur"] * 1000), "batch": a.get("batch", -1), "bucket": a.get("bucket", -1),
            "trainer": a.get("trainer", -1), "server": a.get("server", -1)})
    return spans, {n["process"]: n for n in doc["metadata"]["nodes"]}


def span_ms(spans):
    """The spans' durations summed, in ms."""
    return sum(s["end"] - s["start"] for s in spans) / 1e6


class TrainerTrace(psb.PsbTestCase):
    STEPS, WARMUP = 5, 3

    def tapped_job(self, nserver=1, trainer_flags=(), assign_trace=None, ntrainer=2):
        """A DummyModel job through rpc_hook (buckets of at most 0.01 MB:
        several per step; shard placement: bucket k to server k mod
        nserver) on the cpu, its servers and trainers by hand, each
        trainer's control link through a tap. Returns the taps, by
        rank, once every node has ended well."""
        m = self.master("--ntrainer", str(ntrainer), "--nserver", str(nserver), "--steps", str(self.STEPS),
                        "--warmup-steps", str(self.WARMUP), "--bucket-cap-mb", "0.01", "--placement", "shard")
        servers = [self.node(m, "psbench-server", "cpu", "server") for _ in range(nserver)]
        taps, trainers = [], []
        for _ in range(ntrainer):
            tap = ControlTap(m.ctl_addr, assign_trace)
            self.addCleanup(tap.close)
            taps.append(tap)
            trainers.append(self.reg.start([psb.bin_path("psbench-trainer"), "--master", "%s:%d" % (psb.HOST, tap.port),
                                            "--device", "cpu"] + list(trainer_flags), name="trainer"))
        self.assertEqual(m.wait(120), 0, m.describe())
        for p in trainers + servers:
            self.assertEqual(p.wait(30), 0, p.describe())
        ranked = {}
        for tap, p in zip(taps, trainers):
            assign = [b for d, t, b in tap.messages() if d == "down" and t == "assign"][0]
            ranked[assign["rank"]] = (tap, p)
        self.assertEqual(sorted(ranked), list(range(ntrainer)))
        return [ranked[r] for r in range(ntrainer)]

    def check_trainer(self, rank, tap, steps, nserver):
        """Trainer `rank`'s trace, traced for `steps` of the timed pass:
        every span kind there, nested as the step runs, each bucket's
        chain whole, its frames, and every compute span equal to its
        metric's sample of the same step."""
        head, spans = tap_spans(self, tap)
        self.assertEqual((head["role"], head["rank"]), ("trainer", rank))
        self.assertEqual(head["dropped"]["count"], 0, head["dropped"])
        self.assertTrue(all(s["trainer"] == rank for s in spans))
        self.assertEqual(sorted({s["batch"] for s in spans}), list(steps))
        # One step span per step: the warm-up (whose batches count from 0
        # too) is never traced.
        step = {s["batch"]: s for s in by(spans, "step")}
        self.assertEqual(len(by(spans, "step")), len(steps))
        self.assertEqual(sorted(step), list(steps))
        parts = {}
        for name in ("forward", "backward_compute", "exposed_wait", "optimizer"):
            got = by(spans, name)
            self.assertEqual(sorted(s["batch"] for s in got), list(steps), name)
            for s in got:
                st = step[s["batch"]]
                self.assertTrue(st["start"] <= s["start"] <= s["end"] <= st["end"], (name, s, st))
                self.assertEqual((s["lane"], s["bucket"], s["server"]), ("compute", -1, -1), s)
                parts[(name, s["batch"])] = s
        for b in steps:  # in the step's order, each from where the last ended (the same reading)
            chain = [parts[(n, b)] for n in ("forward", "backward_compute", "exposed_wait", "optimizer")]
            self.assertEqual(chain[0]["start"], step[b]["start"])
            self.assertEqual(chain[-1]["end"], step[b]["end"])
            for x, y in zip(chain, chain[1:]):
                self.assertEqual(x["end"], y["start"], (x, y))
        # The sums (and each step) are the metrics' samples of those steps.
        for name, metric in COMPUTE_METRICS.items():
            samples = timed_samples(tap, metric)
            self.assertEqual(len(samples), self.STEPS, metric)
            for s in sorted(by(spans, name), key=lambda s: s["batch"]):
                self.assertAlmostEqual((s["end"] - s["start"]) / 1e6, samples[s["batch"]], delta=EXACT_MS,
                                       msg=(name, s["batch"]))
            total = sum(s["end"] - s["start"] for s in by(spans, name)) / 1e6
            want = sum(samples[b] for b in steps)
            self.assertAlmostEqual(total, want, delta=EXACT_MS * len(steps), msg=name)
        # Each bucket: ready -> wait -> apply, one each per traced step,
        # on its lane, apply inside the optimizer; its push and its answer
        # on the comm thread inside its wait, to and from its server.
        chains = {}
        for name in ("bucket_ready", "bucket_wait", "bucket_apply", "frame_out", "frame_in"):
            for s in by(spans, name):
                key = (s["batch"], s["bucket"])
                self.assertNotIn(name, chains.setdefault(key, {}), (name, s))
                chains[key][name] = s
        self.assertTrue(chains)
        buckets = {}
        for (b, k), c in chains.items():
            self.assertEqual(sorted(c), sorted(["bucket_ready", "bucket_wait", "bucket_apply", "frame_out",
                                                "frame_in"]), (b, k))
            buckets.setdefault(b, set()).add(k)
            r, w, a, o, i = (c[n] for n in ("bucket_ready", "bucket_wait", "bucket_apply", "frame_out", "frame_in"))
            self.assertTrue(r["start"] <= r["end"] == w["start"] <= w["end"] <= a["start"] <= a["end"], c)
            self.assertTrue(w["start"] <= o["start"] <= o["end"] <= i["start"] <= i["end"] == w["end"], c)
            opt = parts[("optimizer", b)]
            self.assertTrue(opt["start"] <= a["start"] and a["end"] <= opt["end"], (a, opt))
            self.assertTrue(step[b]["start"] <= r["start"], (r, step[b]))
            for s in c.values():
                self.assertEqual(s["server"], k % nserver, s)
            self.assertEqual({s["lane"] for s in (r, w, a)}, {"bucket %d" % k})
            self.assertEqual((o["lane"], i["lane"]), ("to server %d" % (k % nserver), "from server %d" % (k % nserver)))
        self.assertEqual(sorted(buckets), list(steps))
        # The waits are the hook's own samples (rpc_dense), in bucket
        # order step after step: step 0 has DDP's first-iteration bucket
        # (the DummyModel is dense: one), every later step the rebuilt ones.
        rpc = timed_samples(tap, "hook_future_metric,rpc_dense")
        rebuilt = {len(ks) for b, ks in buckets.items() if b > 0}
        self.assertEqual(len(rebuilt), 1, buckets)
        nr = rebuilt.pop()
        self.assertEqual(len(rpc), 1 + (self.STEPS - 1) * nr)
        for (b, k), c in chains.items():
            w = c["bucket_wait"]
            self.assertAlmostEqual((w["end"] - w["start"]) / 1e6, rpc[(0 if b == 0 else 1 + (b - 1) * nr) + k],
                                   delta=EXACT_MS, msg=(b, k))
        return spans, buckets

    def test_trainer_traced_by_hand(self):
        """Trainers with --trace under a master that does not trace: every
        step of the timed pass, its spans as the metrics say; two servers,
        each bucket's spans naming the one it went to."""
        taps = self.tapped_job(nserver=2, trainer_flags=("--trace",))
        for rank, (tap, p) in enumerate(taps):
            spans, buckets = self.check_trainer(rank, tap, range(self.STEPS), 2)
            # DDP's first iteration: every dense gradient one bucket; then
            # the rebuilt ones, several.
            self.assertEqual(buckets[0], {0}, buckets)
            self.assertGreater(len(buckets[1]), 1, buckets)
            self.assertIn("tracing steps 0 onwards of the timed pass", p.stderr())

    def test_master_trace_and_window(self):
        """The assignment's `trace` turns a trainer's trace on with the
        master's window and ring size; a trainer's own --trace-steps wins
        for that trainer."""
        taps = self.tapped_job(trainer_flags=(), assign_trace={"steps": [1, 2], "buffer": 4096}, ntrainer=1)
        tap, _ = taps[0]
        head, _ = tap_spans(self, tap)
        self.assertEqual((head["window"], head["capacity"]), ([1, 2], 4096))
        self.check_trainer(0, tap, range(1, 3), 1)
        taps = self.tapped_job(trainer_flags=("--trace-steps", "3:"), assign_trace={"steps": [1, 2], "buffer": 4096},
                        ntrainer=1)
        tap, _ = taps[0]
        head, _ = tap_spans(self, tap)
        self.assertEqual(head["window"][0], 3)
        self.check_trainer(0, tap, range(3, self.STEPS), 1)

    def test_small_buffer_drops(self):
        """--trace-buffer 8: each ring keeps its first 8 spans, the rest
        counted dropped (steps named), said in the trainer's log; nothing
        at all without --trace."""
        taps = self.tapped_job(trainer_flags=("--trace", "--trace-buffer", "8"), ntrainer=1)
        tap, p = taps[0]
        head, spans = tap_spans(self, tap)
        self.assertEqual(head["capacity"], 8)
        self.assertEqual(len(spans), 16)  # both rings full
        self.assertGreater(head["dropped"]["count"], 0)
        self.assertEqual(head["dropped"]["last_step"], self.STEPS - 1)
        # The first spans are kept: step 0's compute spans, in order.
        self.assertEqual([s["name"] for s in spans if s["lane"] == "compute"][:1], ["forward"])
        self.assertEqual(min(s["batch"] for s in spans), 0)
        self.assertRegex(p.stderr(), r"trace of trainer 0: [\d,]+ spans of steps \d+\.\.%d dropped" %
                         (self.STEPS - 1))
        taps = self.tapped_job(ntrainer=1)
        msgs = taps[0][0].messages()
        self.assertFalse([t for d, t, _ in msgs if t == "trace"])

    def local_trace(self, *extra, nserver=1):
        """A --local job with the master's --trace (DummyModel through
        rpc_hook, 2 trainers, 1 server, STEPS timed steps after WARMUP):
        (results.json, {rank: [span...]}) with each trainer's spans from
        DIR/trace.json as in tap_spans, times in ns on the master's clock
        (the same offset moves all of a trainer's spans: their order and
        lengths are its own), and the document's metadata.nodes by
        process."""
        out = os.path.join(self.reg.workdir, "local-%d" % len(os.listdir(self.reg.workdir)))
        rc, _, err = self.run_master("--trace", "--steps", str(self.STEPS), "--warmup-steps", str(self.WARMUP),
                                     "--bucket-cap-mb", "0.01", *extra, local=True, out=out, ntrainer=2,
                                     nserver=nserver)
        self.assertEqual(rc, 0, err[-3000:])
        spans, nodes = trace_json_trainers(os.path.join(out, "trace.json"))
        return psb.results_json(out), spans, nodes

    def check_local(self, res, spans, steps):
        """Each trainer's spans of trace.json: nested, each bucket's chain
        whole for every traced step, and the step spans equal to
        results.json's steady_state (each step after the first, ms kept
        to the ns), the compute spans' sums to its groups' count x mean
        where every step is traced."""
        self.assertEqual(sorted(spans), [0, 1])
        steady = {t["rank"]: t for t in res["steady_state"]["trainers"]}
        for rank, got in spans.items():
            self.assertEqual(sorted({s["batch"] for s in got}), list(steps), rank)
            step = {s["batch"]: s for s in by(got, "step")}
            self.assertEqual(sorted(step), list(steps))
            for name in ("forward", "backward_compute", "exposed_wait", "optimizer"):
                self.assertEqual(sorted(s["batch"] for s in by(got, name)), list(steps), name)
                for s in by(got, name):
                    st = step[s["batch"]]
                    self.assertTrue(st["start"] <= s["start"] <= s["end"] <= st["end"], (name, s, st))
            chains = {}
            for name in ("bucket_ready", "bucket_wait", "bucket_apply", "frame_out", "frame_in"):
                for s in by(got, name):
                    chains.setdefault((s["batch"], s["bucket"]), {})[name] = s
            self.assertEqual(sorted({b for b, _ in chains}), list(steps))
            for key, c in chains.items():
                self.assertEqual(len(c), 5, (key, sorted(c)))
                r, w, a = c["bucket_ready"], c["bucket_wait"], c["bucket_apply"]
                self.assertTrue(r["start"] <= r["end"] == w["start"] <= w["end"] <= a["start"] <= a["end"], c)
                self.assertTrue(w["start"] <= c["frame_out"]["start"] and c["frame_in"]["end"] == w["end"], c)
                self.assertEqual({s["server"] for s in c.values()}, {0}, c)
            # steady_state: the steps after the first, in order (ms to the
            # ns: within a ns of the span's length).
            first, rest = steady[rank]["first_step_ms"], steady[rank]["steps_ms"]
            for b, st in step.items():
                want = first if b == 0 else rest[b - 1]
                self.assertAlmostEqual((st["end"] - st["start"]) / 1e6, want, delta=1e-6, msg=(rank, b))
            if list(steps) != list(range(self.STEPS)):
                continue
            # The sums: count x mean of its samples (each kept to the ns;
            # the mean a double), within a ns per sample.
            groups = res["groups"]["trainer"]["ranks"][str(rank)]
            for name, metric in COMPUTE_METRICS.items():
                g = groups[metric]
                self.assertEqual(g["count"], self.STEPS, metric)
                total = sum(s["end"] - s["start"] for s in by(got, name)) / 1e6
                self.assertAlmostEqual(total, g["count"] * g["mean"], delta=1e-6 * g["count"], msg=(rank, name))
            g = groups["hook_future_metric,rpc_dense"]
            waits = by(got, "bucket_wait")
            self.assertEqual(len(waits), g["count"])
            self.assertAlmostEqual(sum(s["end"] - s["start"] for s in waits) / 1e6, g["count"] * g["mean"],
                                   delta=1e-6 * g["count"])

    def test_local_job_trace_json(self):
        """psbench-master --local --trace: every trainer's spans in
        trace.json, as the metrics say; --trace-steps 1:2 those steps
        alone; --trace-buffer 8 drops, and the metadata says so."""
        res, spans, nodes = self.local_trace()
        self.check_local(res, spans, range(self.STEPS))
        res, spans, nodes = self.local_trace("--trace-steps", "1:2")
        self.check_local(res, spans, range(1, 3))
        self.assertEqual(nodes["trainer 0"]["window"], [1, 2])
        _, spans, nodes = self.local_trace("--trace-buffer", "8")
        for rank in (0, 1):
            n = nodes["trainer %d" % rank]
            self.assertEqual(len(spans[rank]), 16)  # two rings of 8, both full
            self.assertGreater(n["dropped"], 0, n)
            self.assertRegex(n["dropped_message"], r"^trace of trainer %d.*: [\d,]+ spans of steps? [\d.]+ dropped: "
                                                   r"the ring holds 8; raise --trace-buffer" % rank)

    def test_allreduce_buckets(self):
        """allreduce_hook (no server): each bucket's ready, wait and apply
        in every traced step, no server in their ids and no frames (the
        communication thread is rpc_hook's); the waits sum to the hook's
        metric (gloo_dense_allreduce)."""
        res, spans, _ = self.local_trace("--ddp-hook", "allreduce_hook", nserver=0)
        self.assertEqual(sorted(spans), [0, 1])
        for rank, got in spans.items():
            self.assertEqual(by(got, "frame_out") + by(got, "frame_in"), [])
            chains = {}
            for name in ("bucket_ready", "bucket_wait", "bucket_apply"):
                for s in by(got, name):
                    self.assertEqual(s["server"], -1, s)
                    chains.setdefault((s["batch"], s["bucket"]), {})[name] = s
            self.assertEqual(sorted({b for b, _ in chains}), list(range(self.STEPS)))
            for key, c in chains.items():
                self.assertEqual(len(c), 3, (key, sorted(c)))
                r, w, a = c["bucket_ready"], c["bucket_wait"], c["bucket_apply"]
                self.assertTrue(r["start"] <= r["end"] == w["start"] <= w["end"] <= a["start"] <= a["end"], c)
            g = res["groups"]["trainer"]["ranks"][str(rank)]["hook_future_metric,gloo_dense_allreduce"]
            waits = by(got, "bucket_wait")
            self.assertEqual(len(waits), g["count"])
            self.assertAlmostEqual(sum(s["end"] - s["start"] for s in waits) / 1e6, g["count"] * g["mean"],
                                   delta=1e-6 * g["count"])

    def test_synthetic(self):
        """The Synthetic model (its client polled by the training thread):
        a step per batch (batch_all's readings), each bucket's wait (its
        rpc_dense sample) and frames, to server k mod 2 (shard)."""
        res, spans, _ = self.local_trace("--model", "Synthetic", "--placement", "shard", nserver=2)
        self.assertEqual(sorted(spans), [0, 1])
        for rank, got in spans.items():
            self.assertEqual(sorted({s["name"] for s in got}), ["bucket_wait", "frame_in", "frame_out", "step"])
            step = {s["batch"]: s for s in by(got, "step")}
            self.assertEqual(sorted(step), list(range(self.STEPS)))
            chains = {}
            for name in ("bucket_wait", "frame_out", "frame_in"):
                for s in by(got, name):
                    chains.setdefault((s["batch"], s["bucket"]), {})[name] = s
            for (b, k), c in chains.items():
                self.assertEqual(len(c), 3, ((b, k), sorted(c)))
                w, o, i = c["bucket_wait"], c["frame_out"], c["frame_in"]
                self.assertTrue(step[b]["start"] <= w["start"] <= o["start"] <= o["end"] <= i["start"] <= i["end"]
                                == w["end"] <= step[b]["end"], c)
                self.assertEqual({s["server"] for s in c.values()}, {k % 2}, c)
                self.assertEqual(w["lane"], "bucket %d" % k)
            groups = res["groups"]["trainer"]["ranks"][str(rank)]
            for name, metric in (("step", "batch_level_metric,batch_all"), ("bucket_wait",
                                                                            "hook_future_metric,rpc_dense")):
                g = groups[metric]
                self.assertEqual(len(by(got, name)), g["count"], name)
                self.assertAlmostEqual(sum(s["end"] - s["start"] for s in by(got, name)) / 1e6,
                                       g["count"] * g["mean"], delta=1e-6 * g["count"], msg=(rank, name))

    def workload_trace(self, *flags):
        """A --local job of 2 trainers and 2 servers with the master's
        --trace, flags choosing the workload: (results.json, {rank:
        [span...]} as trace_json_trainers gives them, `psbench-master
        trace summarize --json` of its trace.json, the document's
        metadata.nodes by process), the summary's text form read too."""
        out = os.path.join(self.reg.workdir, "workload-%d" % len(os.listdir(self.reg.workdir)))
        rc, _, err = self.run_master("--trace", *flags, local=True, out=out, ntrainer=2, nserver=2)
        self.assertEqual(rc, 0, err[-3000:])
        path = os.path.join(out, "trace.json")
        spans, nodes = trace_json_trainers(path)
        summarize = [psb.bin_path("psbench-master"), "trace", "summarize"]
        rc, text, err = self.reg.run(summarize + [path])
        self.assertEqual(rc, 0, err)
        self.assertIn("2 trainers, 2 servers", text.splitlines()[0], text)
        rc, js, err = self.reg.run(summarize + ["--json", path])
        self.assertEqual(rc, 0, err)
        return psb.results_json(out), spans, json.loads(js), nodes

    def steps_nested(self, rank, got, steps, loose=()):
        """Trainer rank's spans: its own, of the traced steps only, one
        `step` each, every span but those in loose within its step's.
        Returns the step spans by batch."""
        self.assertTrue(all(s["trainer"] == rank for s in got))
        self.assertEqual(sorted({s["batch"] for s in got}), steps)
        step = {s["batch"]: s for s in by(got, "step")}
        self.assertEqual(len(by(got, "step")), len(steps))
        self.assertEqual(sorted(step), steps)
        for s in got:
            st = step[s["batch"]]
            if s not in loose:
                self.assertTrue(st["start"] <= s["start"] <= s["end"] <= st["end"], (s, st))
        return step

    def assert_sums(self, res, rank, pairs):
        """Each (spans, metric) of pairs: as many spans as trainer rank's
        samples of metric in results.json, their durations' sum its count
        x mean (each sample kept to the ns)."""
        groups = res["groups"]["trainer"]["ranks"][str(rank)]
        for spans, metric in pairs:
            g = groups[metric]
            self.assertEqual(len(spans), g["count"], metric)
            self.assertAlmostEqual(span_ms(spans), g["count"] * g["mean"], delta=1e-6 * g["count"], msg=(rank, metric))

    def test_batch_update(self):
        """The batch-update trainer (its client polled by the training
        thread; the model split over 2 servers): per step forward and
        backward_compute, its round as bucket 0's bucket_ready,
        bucket_wait and bucket_apply (every server's: server -1), each
        part's push and result as frame_out and frame_in to and from its
        server, all in the step; the sums are its metrics'; summarize
        reads it, the round its bucket."""
        res, spans, summary, _ = self.workload_trace("--server", "BatchUpdateParameterServer", "--trainer",
                                                  "BatchUpdateTrainer", "--model", "BatchUpdateLinear", "--steps",
                                                  str(self.STEPS), "--warmup-steps", str(self.WARMUP))
        steps = list(range(self.STEPS))
        self.assertEqual(sorted(spans), [0, 1])
        for rank, got in spans.items():
            self.assertEqual(sorted({s["name"] for s in got}), sorted([
                "step", "forward", "backward_compute", "bucket_ready", "bucket_wait", "bucket_apply", "frame_out",
                "frame_in"]))
            step = self.steps_nested(rank, got, steps)
            for b in steps:
                mine = [s for s in got if s["batch"] == b]
                one = [s for s in mine if not s["name"].startswith("frame_")]
                self.assertEqual(sorted(s["name"] for s in one), sorted([
                    "step", "forward", "backward_compute", "bucket_ready", "bucket_wait", "bucket_apply"]), b)
                one = {s["name"]: s for s in one}
                f, c = one["forward"], one["backward_compute"]
                r, w, a = one["bucket_ready"], one["bucket_wait"], one["bucket_apply"]
                for s in (f, c):
                    self.assertEqual((s["lane"], s["bucket"], s["server"]), ("compute", -1, -1), s)
                for s in (r, w, a):
                    self.assertEqual((s["lane"], s["bucket"], s["server"]), ("bucket 0", 0, -1), s)
                # One reading ends a span and starts the next: the gradient
                # computed, every part queued, the last result in, the
                # parameters in place (the step's end).
                self.assertTrue(step[b]["start"] <= f["start"] <= f["end"] == c["start"] <= c["end"] == r["start"]
                                <= r["end"] == w["start"] <= w["end"] == a["start"] <= a["end"] == step[b]["end"],
                                (step[b], one))
                outs, ins = by(mine, "frame_out"), by(mine, "frame_in")
                self.assertEqual(sorted((s["server"], s["lane"], s["bucket"]) for s in outs),
                                 [(p, "to server %d" % p, 0) for p in (0, 1)])
                self.assertEqual(sorted((s["server"], s["lane"], s["bucket"]) for s in ins),
                                 [(p, "from server %d" % p, 0) for p in (0, 1)])
                for o in outs:  # queued before the wait, written in it
                    self.assertTrue(r["start"] <= o["start"] <= r["end"] <= o["end"] <= w["end"], (o, r, w))
                for i in ins:
                    self.assertTrue(w["start"] <= i["start"] <= i["end"] <= w["end"], (i, w))
                self.assertEqual(max(i["end"] for i in ins), w["end"])
            self.assert_sums(res, rank, [
                (by(got, "step"), "batch_level_metric,batch_all"), (by(got, "forward"), "forward_metric,forward_pass"),
                (by(got, "backward_compute"), "backward_metric,backward"),
                (by(got, "bucket_wait"), "hook_future_metric,update_and_fetch_model")])
        self.assertEqual(summary["steps"], steps)
        self.assertEqual((summary["trainers"], summary["servers"]), (2, 2))
        self.assertEqual([b["bucket"] for b in summary["buckets"]], [0])
        for part in ("queue", "apply"):  # the trainer's own spans: known for every step and trainer
            self.assertEqual(summary["buckets"][0][part]["n"], 2 * self.STEPS, part)

    HYBRID_STEPS = 10  # one epoch of the HybridTrainer configuration's batches

    def check_hybrid(self, res, spans, summary, nodes, seed):
        """The HybridModel's trace (2 trainers, 2 servers): per step the
        compute spans one after the other from the lookups' end (the
        lookups: the step's start to forward's, their metric's readings),
        the dense bucket's ready, wait and apply (server -1), every
        lookup's wait on its server's lane of calls (seed: one after the
        other; psbench: all at once), in the seed's pattern every update's
        wait inside exposed_wait, each call's frames inside its wait; the
        sums are the metrics'; the summary's critical path through the call
        answered last (nodes: the clocks, by process)."""
        steps = list(range(self.HYBRID_STEPS))
        self.assertEqual(sorted(spans), [0, 1])
        for rank, got in spans.items():
            self.assertEqual(sorted({s["name"] for s in got}), sorted([
                "step", "forward", "backward_compute", "exposed_wait", "optimizer", "bucket_ready", "bucket_wait",
                "bucket_apply", "frame_out", "frame_in"]))
            calls = [s for s in got if s["name"] == "bucket_wait" and s["bucket"] == -1]
            forward = {s["batch"]: s for s in by(got, "forward")}
            looked_up = [c for c in calls if c["end"] <= forward[c["batch"]]["start"]]
            # A frame in that ends no lookup's wait: an update's
            # confirmation (psbench: the pass's last batch's, awaited
            # after its step).
            updated = [i for i in by(got, "frame_in") if not any(
                (c["batch"], c["server"]) == (i["batch"], i["server"]) and c["start"] <= i["start"] and
                c["end"] == i["end"] for c in looked_up)]
            if seed:
                loose = []
                self.assertEqual(len(updated), 2 * self.HYBRID_STEPS)
            else:
                loose = updated
                self.assertEqual(sorted((i["batch"], i["server"]) for i in updated), [(steps[-1], 0), (steps[-1], 1)])
            step = self.steps_nested(rank, got, steps, loose)
            remote_lookup, remote_update, backward = [], [], []
            for b in steps:
                mine = [s for s in got if s["batch"] == b]
                comp = {s["name"]: s for s in mine if s["lane"] == "compute"}
                self.assertEqual(len(comp), len([s for s in mine if s["lane"] == "compute"]))
                self.assertEqual(sorted(comp), sorted(["step", "forward", "backward_compute", "exposed_wait",
                                                       "optimizer"]))
                st, f, c, e, o = (comp[n] for n in ("step", "forward", "backward_compute", "exposed_wait",
                                                     "optimizer"))
                self.assertTrue(st["start"] <= f["start"] <= f["end"] == c["start"] <= c["end"] == e["start"] <=
                                e["end"] == o["start"] <= o["end"] == st["end"], comp)
                for s in comp.values():
                    self.assertEqual((s["bucket"], s["server"]), (-1, -1), s)
                remote_lookup.append({"start": st["start"], "end": f["start"]})
                backward.append({"start": c["start"], "end": e["end"]})
                dense = {s["name"]: s for s in mine if s["bucket"] == 0}
                self.assertEqual(sorted(dense), ["bucket_apply", "bucket_ready", "bucket_wait"])
                self.assertEqual(len([s for s in mine if s["bucket"] == 0]), 3)
                r, w, a = dense["bucket_ready"], dense["bucket_wait"], dense["bucket_apply"]
                for s in (r, w, a):
                    self.assertEqual((s["lane"], s["server"]), ("bucket 0", -1), s)
                self.assertTrue(c["end"] == r["start"] <= r["end"] == w["start"] <= w["end"] <= o["start"], dense)
                self.assertEqual((a["start"], a["end"]), (o["start"], o["end"]))
                mycalls = [s for s in calls if s["batch"] == b]
                lookups = [s for s in mycalls if s["end"] <= f["start"]]
                updates = [s for s in mycalls if s not in lookups]
                self.assertEqual(sorted((s["server"], s["lane"]) for s in lookups),
                                 [(p, "rpc server %d" % p) for p in (0, 1)])
                lookups.sort(key=lambda s: s["server"])
                if seed:  # one server after the other
                    self.assertLessEqual(lookups[0]["end"], lookups[1]["start"], lookups)
                    self.assertEqual(sorted((s["server"], s["lane"]) for s in updates),
                                     [(p, "rpc server %d" % p) for p in (0, 1)])
                    for u in updates:
                        self.assertTrue(e["start"] <= u["start"] == updates[0]["start"] <= u["end"] <= e["end"],
                                        (u, e))
                    remote_update.append({"start": updates[0]["start"], "end": max(u["end"] for u in updates)})
                else:  # every server's at once, the updates not awaited
                    self.assertEqual(lookups[0]["start"], lookups[1]["start"], lookups)
                    self.assertEqual(updates, [])
                # Each awaited call's request out and answer in, inside its wait.
                for wait in lookups + updates:
                    p = wait["server"]
                    outs = [s for s in by(mine, "frame_out") if s["server"] == p and
                            wait["start"] <= s["start"] <= s["end"] <= wait["end"]]
                    ins = [s for s in by(mine, "frame_in") if s["server"] == p and
                           wait["start"] <= s["start"] <= s["end"] == wait["end"]]
                    self.assertEqual([(s["lane"], s["bucket"]) for s in outs], [("to server %d" % p, -1)], wait)
                    self.assertEqual([(s["lane"], s["bucket"]) for s in ins], [("from server %d" % p, -1)], wait)
                # A lookup and an update per server out; in, their answers
                # (psbench: the pass's last batch's confirmations too).
                self.assertEqual(sorted(s["server"] for s in by(mine, "frame_out")), [0, 0, 1, 1])
            pairs = [(by(got, "step"), "batch_level_metric,batch_all"),
                     (by(got, "forward"), "forward_metric,forward_pass"),
                     (by(got, "backward_compute"), "backward_metric,backward_compute"),
                     (by(got, "optimizer"), "optimizer_metric,step"), (backward, "backward_metric,backward"),
                     (remote_lookup, "embedding_metric,remote_lookup"),
                     ([s for s in by(got, "bucket_wait") if s["bucket"] == 0],
                      "hook_future_metric,gloo_dense_allreduce")]
            if seed:
                pairs.append((remote_update, "embedding_metric,remote_update"))
            self.assert_sums(res, rank, pairs)
        self.assertEqual(summary["steps"], steps)
        self.assertEqual((summary["trainers"], summary["servers"]), (2, 2))
        self.assertEqual([b["bucket"] for b in summary["buckets"]], [0])  # the dense one (the calls have none)
        self.assertEqual(summary["buckets"][0]["apply"]["n"], 2 * self.HYBRID_STEPS)
        # The critical path runs through the call answered last (seed: an
        # update, after the compute; psbench: a lookup, before it), its
        # server's spans within its wait, not another call's of the batch.
        rep = summary["representative"]
        self.assertIn(rep["batch"], steps)
        path = [rep["spans"][i] for i in rep["critical"]]
        names = ["frame_out", "push_recv", "fold", "answer_out", "frame_in", "bucket_wait", "exposed_wait",
                 "optimizer"]
        self.assertEqual([s["name"] for s in path], (["forward", "backward_compute"] if seed else []) + names, path)
        wait = [s for s in path if s["name"] == "bucket_wait"][0]

        def off_us(s):  # how far its node's clock may be off (us)
            return nodes[rep["lanes"][s["lane"]]["process"]]["uncertainty_ns"] / 1e3

        for s in path:
            if s["name"] in names[:5]:  # within the call's wait, give or take the two clocks'
                tol = off_us(s) + off_us(wait)
                # answer_out ends with its last byte in the socket: the
                # trainer may have read it (its wait over) before then.
                end = s["ts"] if s["name"] == "answer_out" else s["ts"] + s["dur"]
                self.assertTrue(wait["ts"] - tol <= s["ts"] <= end <= wait["ts"] + wait["dur"] + tol, (s, wait))

    def test_hybrid(self):
        """The HybridModel trainer (the DDP + RPC benchmark) in both
        rpc patterns: check_hybrid."""
        for pattern in ("seed", "psbench"):
            res, spans, summary, nodes = self.workload_trace("--embedding-dim", "256", "--steps",
                                                             str(self.HYBRID_STEPS), "--warmup-cycles", "1",
                                                             "--rpc-pattern", pattern)
            self.assertEqual(res["ddp_rpc"]["rpc_pattern"], pattern)
            self.check_hybrid(res, spans, summary, nodes, pattern == "seed")

    def test_workloads_on_fake_gpu(self):
        """The batch-update and HybridModel trainers on the fake GPU (their
        step metrics GPU-timed; the HybridModel's dense bucket staged
        through pinned memory): every traced step's spans, nested in it,
        the compute lane's one after the other — the host's view."""
        jobs = (
            (["--server", "BatchUpdateParameterServer", "--trainer", "BatchUpdateTrainer", "--model",
              "BatchUpdateLinear", "--steps", str(self.STEPS), "--warmup-steps", str(self.WARMUP)],
             self.STEPS, ["forward", "backward_compute"], "bucket_apply",
             "hook_future_metric,update_and_fetch_model"),
            (["--embedding-dim", "256", "--steps", str(self.HYBRID_STEPS), "--warmup-cycles", "1"],
             self.HYBRID_STEPS, ["forward", "backward_compute", "exposed_wait", "optimizer"], "optimizer",
             "hook_future_metric,gloo_dense_allreduce"))
        # Each: its flags, its steps, its compute lane's spans in order, the
        # span that ends the step, its bucket's metric (GPU-timed).
        for flags, nsteps, compute, last, bucket_metric in jobs:
            out = os.path.join(self.reg.workdir, "gpu-%d" % len(os.listdir(self.reg.workdir)))
            self.fake_gpu_job(out, 2, flags, bucket_metric)
            spans, _ = trace_json_trainers(os.path.join(out, "trace.json"))
            self.assertEqual(sorted(spans), [0, 1])
            for rank, got in spans.items():
                steps = list(range(nsteps))
                step = self.steps_nested(rank, got, steps)
                for b in steps:
                    chain = [s for n in compute for s in by(got, n) if s["batch"] == b]
                    self.assertEqual([s["name"] for s in chain], compute, b)
                    for x, y in zip(chain, chain[1:]):
                        self.assertEqual(x["end"], y["start"], (x, y))
                    self.assertEqual([s["end"] for s in by(got, last) if s["batch"] == b], [step[b]["end"]], b)
                    bucket = sorted(s["name"] for s in got if s["batch"] == b and s["bucket"] == 0 and
                                    s["lane"] == "bucket 0")
                    self.assertEqual(bucket, ["bucket_apply", "bucket_ready", "bucket_wait"], b)

    def fake_gpu_job(self, out, nserver, flags, gpu_metric):
        """A traced job of 2 trainers on the fake GPU and nserver CPU
        servers, with flags, into out; gpu_metric is GPU-timed in every
        trainer's results."""
        m = self.master("--trace", "--ntrainer", "0", "--ncudatrainer", "2", "--nserver", str(nserver), *flags,
                        out=out)
        nodes = [self.node(m, "psbench-server", "cpu", "server") for _ in range(nserver)]
        nodes += [self.node(m, "psbench-trainer", "fake-cuda", "trainer") for _ in range(2)]
        self.assertEqual(m.wait(120), 0, m.describe())
        for p in nodes:
            self.assertEqual(p.wait(30), 0, p.describe())
        for t in psb.results_json(out)["trainers"]:
            self.assertIn(gpu_metric, t.get("gpu_timed", []), t)

    def test_gpu_trainer_host_view(self):
        """Trainers on the fake GPU (their buckets staged through pinned
        memory; their step metrics GPU-timed): every traced step's compute
        spans, nested, and each bucket's chain whole — the host's view,
        whose sums are not the GPU-timed metrics'."""
        out = os.path.join(self.reg.workdir, "gpu")
        self.fake_gpu_job(out, 1, ("--placement", "shard", "--steps", str(self.STEPS), "--warmup-steps",
                                   str(self.WARMUP), "--bucket-cap-mb", "0.01"), "batch_level_metric,batch_all")
        with open(os.path.join(out, "trace.json")) as f:
            doc = json.load(f)
        procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
        for rank in (0, 1):
            got = [e for e in doc["traceEvents"] if e["ph"] == "X" and procs[e["pid"]] == "trainer %d" % rank]
            step = {e["args"]["batch"]: e for e in got if e["name"] == "step"}
            self.assertEqual(sorted(step), list(range(self.STEPS)))
            for e in got:
                st = step[e["args"]["batch"]]
                if e["name"] in ("forward", "backward_compute", "exposed_wait", "optimizer", "bucket_apply"):
                    self.assertTrue(st["ts"] <= e["ts"] and e["ts"] + e["dur"] <= st["ts"] + st["dur"] + 1e-3,
                                    (e, st))
            chains = {}
            for e in got:
                if e["name"] in ("bucket_ready", "bucket_wait", "bucket_apply", "frame_out", "frame_in"):
                    chains.setdefault((e["args"]["batch"], e["args"]["bucket"]), set()).add(e["name"])
            self.assertEqual(sorted({b for b, _ in chains}), list(range(self.STEPS)))
            for key, names in chains.items():
                self.assertEqual(len(names), 5, (key, names))

    def test_flags_need_master(self):
        """The trace goes to a master: without --master the flags are
        refused; a bad window is refused with the reason."""
        for extra in (("--trace",), ("--trace-steps", "1:2"), ("--trace-buffer", "10")):
            rc, _, err = self.reg.run([psb.bin_path("psbench-trainer"), "--server", "127.0.0.1:1", "--rank", "0",
                                       "--model", "synthetic"] + list(extra))
            self.assertEqual(rc, 2, (extra, err))
            self.assertIn("need --master HOST:PORT", err)
        rc, _, err = self.reg.run([psb.bin_path("psbench-trainer"), "--master", "127.0.0.1:1", "--trace-steps",
                                   "3:1"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--trace-steps: '3:1': the first step is after the last", err)


if __name__ == "__main__":
    psb.main()
