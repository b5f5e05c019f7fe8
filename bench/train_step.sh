#!/usr/bin/env bash
# train_step.sh — where a training step's time goes, and how bucket size
# changes it.
#
# DummyModel, 2 trainers and 1 server on this host (psbench-master --local),
# once per bucket cap: the step split into forward, backward, exposed
# communication (how long the optimizer waits for buckets after backward
# ends) and the overlap fraction (the part of the communication span hidden
# behind backward). Then, per cap, the same buckets (sizes and order, as the
# trainer logs them) through the Synthetic model: pure communication, the
# floor for that traffic on this host.
#
#   bench/train_step.sh [BUILD_DIR] [EPOCHS] [CAP_MB ...]
#                       (defaults: build, 10, caps 25 and 4)
#
# 25 MB is DDP's default bucket_cap_mb (and DdpRpcTrainer's); every other
# setting is DdpRpcTrainer's. Target (informational): exposed communication
# <= 25% of compute (forward + backward). Trainers run with their default
# --compute-nice (communication scheduled ahead of backward).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
EPOCHS=${2:-10}
shift $(($# < 2 ? $# : 2))
CAPS=("$@")
[ ${#CAPS[@]} -gt 0 ] || CAPS=(25 4)
PY=/usr/bin/python3
for b in psbench-master psbench-server psbench-trainer; do
  [ -x "$BUILD/$b" ] || { echo "train_step.sh: $BUILD/$b not built" >&2; exit 1; }
done
[[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "train_step.sh: EPOCHS must be a positive whole number" >&2; exit 1; }
for cap in "${CAPS[@]}"; do
  [[ $cap =~ ^[0-9]+(\.[0-9]+)?$ ]] && [[ $cap != 0 ]] ||
    { echo "train_step.sh: bucket cap '$cap' is not a positive number of MB" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() { # out-dir, extra master args...
  local out=$1; shift
  "$BUILD/psbench-master" --local --listen 127.0.0.1:0 --http 127.0.0.1:0 --linger 0 \
    --epochs "$EPOCHS" --out "$out" "$@" >"$out.log" 2>&1 ||
    { echo "train_step.sh: run failed:" >&2; tail -20 "$out.log" >&2; exit 1; }
}

# One trainer configuration per cap: DdpRpcTrainer with bucket_cap_mb set.
$PY - "$work" configs/trainer_configurations.json "${CAPS[@]}" <<'EOF'
import json, sys
work, path, caps = sys.argv[1], sys.argv[2], sys.argv[3:]
base = json.load(open(path))["DdpRpcTrainer"]
out = {}
for cap in caps:
    t = json.loads(json.dumps(base))
    t["configurations"]["bucket_cap_mb"] = float(cap)
    out["Cap" + cap] = t
json.dump(out, open(work + "/trainers.json", "w"), indent=1)
EOF

for cap in "${CAPS[@]}"; do
  echo "DummyModel, bucket_cap_mb $cap, 2 trainers, 1 server, $EPOCHS epochs (timed pass) ..." >&2
  run "$work/model-$cap" --model DummyModel --trainer "Cap$cap" --trainer-config-path "$work/trainers.json"
  # The buckets the trainer made (it logs their sizes), replayed through
  # the Synthetic model: the same sizes in the same order.
  $PY - "$work" "$cap" <<'EOF'
import json, re, sys
work, cap = sys.argv[1], sys.argv[2]
log = open(work + "/model-" + cap + ".log").read()
found = re.search(r"\[trainer 0\] psbench-trainer: bucket floats: ([0-9 s]+)$", log, re.M)
if not found:
    sys.exit("train_step.sh: the trainer did not log its bucket sizes")
sizes = [int(x.rstrip("s")) for x in found.group(1).split()]
json.dump({"Replay": {"model_class": "Synthetic", "configurations": {"bucket_sizes": sizes}}},
          open(work + "/replay-" + cap + ".json", "w"))
print("  %d buckets, %d floats in all; replay: the same sizes" % (len(sizes), sum(sizes)), file=sys.stderr)
EOF
  echo "Synthetic replay of the same traffic ..." >&2
  run "$work/replay-$cap" --model Replay --model-config-path "$work/replay-$cap.json"
done

$PY - "$work" "${CAPS[@]}" <<'EOF'
import json, sys
work, caps = sys.argv[1], sys.argv[2:]
def mean(r, k):
    s = r["groups"]["trainer"]["all"].get(k)
    return s["mean"] if s else float("nan")
print("step (ms, means over the timed pass of both trainers)")
print("%-8s %8s %8s %8s %8s %8s %8s %8s %8s %10s  %s" % (
    "cap_MB", "forward", "backward", "exposed", "exp/comp", "optim", "step", "span", "overlap",
    "pure_comm", "target (exposed <= 25% of compute)"))
for cap in caps:
    m = json.load(open(work + "/model-" + cap + "/results.json"))
    s = json.load(open(work + "/replay-" + cap + "/results.json"))
    fwd, bwd = mean(m, "forward_metric,forward_pass"), mean(m, "backward_metric,backward")
    exposed, span = mean(m, "hook_future_metric,exposed_wait"), mean(m, "hook_future_metric,comm_span")
    opt, step = mean(m, "optimizer_metric,step"), mean(m, "batch_level_metric,batch_all")
    compute = fwd + bwd
    overlap = 1 - exposed / span if span > 0 else float("nan")
    pure = mean(s, "batch_level_metric,batch_all")
    print("%-8s %8.2f %8.2f %8.2f %7.0f%% %8.2f %8.2f %8.2f %8.3f %10.2f  %s" % (
        cap, fwd, bwd, exposed, 100 * exposed / compute, opt, step, span, overlap, pure,
        "met" if exposed <= 0.25 * compute else "not met"))
print("exposed: the optimizer's wait for buckets after backward; span: first push to last")
print("result; overlap: share of the span hidden behind backward; pure_comm: the same")
print("traffic through the Synthetic model, ms per step.")
EOF
