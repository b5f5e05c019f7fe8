#!/usr/bin/env bash
# train_step.sh — where a training step's time goes.
#
# DummyModel, 2 trainers and 1 server on this host (psbench-master --local):
# the step split into forward, backward, exposed communication (how long
# the optimizer waits for buckets after backward ends) and the overlap
# fraction (the part of the step's communication hidden behind backward).
# Then the same bucket sizes through the Synthetic model: pure
# communication, the floor for that traffic on this host.
#
#   bench/train_step.sh [BUILD_DIR] [EPOCHS]      (defaults: build, 10)
#
# Target (informational): exposed communication <= 25% of compute
# (forward + backward).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
EPOCHS=${2:-10}
PY=/usr/bin/python3
for b in psbench-master psbench-server psbench-trainer; do
  [ -x "$BUILD/$b" ] || { echo "train_step.sh: $BUILD/$b not built" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() { # out-dir, extra master args...
  local out=$1; shift
  "$BUILD/psbench-master" --local --listen 127.0.0.1:0 --http 127.0.0.1:0 --linger 0 \
    --epochs "$EPOCHS" --out "$out" "$@" >"$out.log" 2>&1 ||
    { echo "train_step.sh: run failed:" >&2; tail -20 "$out.log" >&2; exit 1; }
}

echo "DummyModel, 2 trainers, 1 server, $EPOCHS epochs (timed pass) ..." >&2
run "$work/model" --model DummyModel

# The model's buckets, to replay them through the Synthetic model: DDP's
# 25 MB cap over DummyModel's parameters, as the trainer logs them.
$PY - "$work" <<'EOF'
import json, sys
work = sys.argv[1]
r = json.load(open(work + "/model/results.json"))
m = r["configuration"]["resolved"]["model"]["configurations"]
params = m["num_embeddings"] * m["embedding_dim"] + m["dense_layers_count"] * (
    m["dense_input_size"] * m["dense_output_size"] + m["dense_output_size"])
cap = 25 * 1024 * 1024 // 4
buckets = -(-params // cap)
floats = params // buckets
json.dump({"Replay": {"model_class": "Synthetic",
                      "configurations": {"buckets": buckets, "bucket_floats": floats}}},
          open(work + "/replay.json", "w"))
print("%d parameters -> %d buckets of %d floats" % (params, buckets, floats), file=sys.stderr)
EOF
echo "Synthetic replay of the same buckets ..." >&2
run "$work/replay" --model Replay --model-config-path "$work/replay.json"

$PY - "$work" <<'EOF'
import json, sys
work = sys.argv[1]
def mean(r, k):
    s = r["groups"]["trainer"]["all"].get(k)
    return s["mean"] if s else float("nan")
m = json.load(open(work + "/model/results.json"))
s = json.load(open(work + "/replay/results.json"))
fwd, bwd = mean(m, "forward_metric,forward_pass"), mean(m, "backward_metric,backward")
exposed, span = mean(m, "hook_future_metric,exposed_wait"), mean(m, "hook_future_metric,comm_span")
opt, step = mean(m, "optimizer_metric,step"), mean(m, "batch_level_metric,batch_all")
compute = fwd + bwd
overlap = 1 - exposed / span if span > 0 else float("nan")
pure = mean(s, "batch_level_metric,batch_all")
print("step (ms, means over the timed pass of both trainers)")
print("  forward              %8.3f" % fwd)
print("  backward             %8.3f" % bwd)
print("  exposed comm         %8.3f   (%.0f%% of compute)" % (exposed, 100 * exposed / compute))
print("  optimizer            %8.3f" % opt)
print("  whole step           %8.3f" % step)
print("  comm span            %8.3f   (first push to last result)" % span)
print("  overlap fraction     %8.3f   (share of the comm span hidden behind backward)" % overlap)
print("  pure comm, same buckets (Synthetic): %.3f ms per step" % pure)
print("target: exposed comm <= 25%% of compute: %s" % ("met" if exposed <= 0.25 * compute else "not met"))
EOF
