#!/usr/bin/env bash
# trace_step.sh — what --trace costs a training step (issue 42: at most 2 %).
#
# DummyModel, rpc_hook, 2 trainers and 1 server on this host (psbench-master
# --local, DdpRpcTrainer's settings, bucket_cap_mb 25), over each transport
# (tcp, shm), ROUNDS times each way, alternated: plain, then with --trace
# (every step of the timed pass, the default ring of 65,536 spans: the
# whole pass fits, nothing dropped — the line says so if not). Per
# transport: the mean step of the timed pass (batch_level_metric,batch_all,
# both trainers) plain and traced, medians over the rounds, and their
# ratio traced / plain against the target (<= 1.02). The same run measures
# both: the host's noise moves them together. trace.json's size and its
# spans are shown.
#
#   bench/trace_step.sh [BUILD_DIR] [EPOCHS] [ROUNDS]   (defaults: build, 10, 3)
#
# All nodes started are stopped on any exit (bench/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
EPOCHS=${2:-10}
ROUNDS=${3:-3}
PY=/usr/bin/python3
BENCH_NAME=trace_step.sh
for b in psbench-master psbench-server psbench-trainer; do
  [[ -x $BUILD/$b ]] || { echo "trace_step.sh: $BUILD/$b not built" >&2; exit 1; }
done
. bench/lib.sh # TMP (removed at exit), PIDS (stopped at exit)
work=$TMP

run() { # out-dir, extra master args...
  local out=$1; shift
  "$BUILD/psbench-master" --local --listen 127.0.0.1:0 --http 127.0.0.1:0 --linger 0 --epochs "$EPOCHS" \
    --model DummyModel --trainer DdpRpcTrainer --bucket-cap-mb 25 --ddp-hook rpc_hook \
    --nserver 1 --ntrainer 2 --out "$out" "$@" >"$out.log" 2>&1 ||
    { echo "trace_step.sh: run failed:" >&2; tail -20 "$out.log" >&2; exit 1; }
}

for tr in tcp shm; do
  for r in $(seq 1 "$ROUNDS"); do
    echo "round $r/$ROUNDS over $tr: plain, then --trace ..." >&2
    run "$work/$tr-plain-$r" --transport "$tr"
    run "$work/$tr-trace-$r" --transport "$tr" --trace
  done
done

$PY - "$work" "$ROUNDS" <<'PYEOF'
import json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def step(d):
    r = json.load(open(os.path.join(d, "results.json")))
    return r["groups"]["trainer"]["all"]["batch_level_metric,batch_all"]["mean"]
print("DummyModel, rpc_hook, 2 trainers, 1 server: the timed pass's mean step (ms), medians of %d rounds" % rounds)
print("%-9s %10s %10s %8s  %s" % ("transport", "plain", "traced", "ratio", "target (traced/plain <= 1.02)"))
for tr in ("tcp", "shm"):
    plain = statistics.median(step("%s/%s-plain-%d" % (work, tr, i)) for i in range(1, rounds + 1))
    traced = statistics.median(step("%s/%s-trace-%d" % (work, tr, i)) for i in range(1, rounds + 1))
    ratio = traced / plain
    print("%-9s %10.2f %10.2f %8.3f  %s" % (tr, plain, traced, ratio, "met" if ratio <= 1.02 else "not met"))
    doc = json.load(open("%s/%s-trace-1/trace.json" % (work, tr)))
    spans = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X")
    dropped = sum(n.get("dropped", 0) for n in doc["metadata"]["nodes"])
    print("          trace.json: %.1f MB, %d spans%s" % (
        os.path.getsize("%s/%s-trace-1/trace.json" % (work, tr)) / 1e6, spans,
        ", %d dropped (raise --trace-buffer)" % dropped if dropped else ", none dropped"))
PYEOF
