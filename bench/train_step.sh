#!/usr/bin/env bash
# train_step.sh — where a training step's time goes, by communication hook
# and bucket size.
#
# DummyModel, 2 trainers on this host (psbench-master --local), once per
# hook and bucket cap: rpc_hook and sparse_rpc_hook with 1 server,
# allreduce_hook with none (the seed's pure-DDP baseline, Gloo). The step
# is split into forward, backward, exposed communication (how long the
# optimizer waits for buckets after backward ends) and the overlap fraction
# (the part of the communication span hidden behind backward). Then, per
# cap, rpc_hook's buckets (sizes and order, as the trainer logs them)
# through the Synthetic model: pure communication, the floor for that
# traffic on this host.
#
#   bench/train_step.sh [BUILD_DIR] [EPOCHS] [CAP_MB ...]
#                       (defaults: build, 10, caps 25 and 4)
#   HOOKS="rpc_hook allreduce_hook sparse_rpc_hook" (default) picks hooks;
#   MODEL=DummyModelSparse runs the sparse model instead.
#
# 25 MB is DDP's default bucket_cap_mb (and DdpRpcTrainer's); every other
# setting is DdpRpcTrainer's. Targets (informational): exposed communication
# <= 25% of compute (forward + backward); allreduce_hook's step at most 0.8
# of PyTorch 1.13 DDP's with Gloo on this 2-core host (about 90 ms per batch
# for DummyModel 1024 x 8, batch 10, 2 trainers, one BLAS thread each: a
# figure measured once, outside this script). Trainers run with their
# default --compute-nice (communication scheduled ahead of backward).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
EPOCHS=${2:-10}
shift $(($# < 2 ? $# : 2))
CAPS=("$@")
[ ${#CAPS[@]} -gt 0 ] || CAPS=(25 4)
read -r -a HOOK_LIST <<<"${HOOKS:-rpc_hook allreduce_hook sparse_rpc_hook}"
MODEL=${MODEL:-DummyModel}
PYTORCH_DDP_MS=90   # PyTorch 1.13 DDP (Gloo), DummyModel 1024 x 8, batch 10, 2 trainers, this host
PY=/usr/bin/python3
for b in psbench-master psbench-server psbench-trainer; do
  [ -x "$BUILD/$b" ] || { echo "train_step.sh: $BUILD/$b not built" >&2; exit 1; }
done
[[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "train_step.sh: EPOCHS must be a positive whole number" >&2; exit 1; }
for cap in "${CAPS[@]}"; do
  [[ $cap =~ ^[0-9]+(\.[0-9]+)?$ ]] && [[ $cap != 0 ]] ||
    { echo "train_step.sh: bucket cap '$cap' is not a positive number of MB" >&2; exit 1; }
done
for hook in "${HOOK_LIST[@]}"; do
  case $hook in rpc_hook|allreduce_hook|sparse_rpc_hook|hybrid_hook) ;;
    *) echo "train_step.sh: hook '$hook' is not rpc_hook, allreduce_hook, sparse_rpc_hook or hybrid_hook" >&2
       exit 1 ;;
  esac
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
  for hook in "${HOOK_LIST[@]}"; do
    nserver=1
    [[ $hook == allreduce_hook || $hook == hybrid_hook ]] && nserver=0
    echo "$MODEL, $hook, bucket_cap_mb $cap, 2 trainers, $nserver server(s), $EPOCHS epochs (timed pass) ..." >&2
    run "$work/model-$cap-$hook" --model "$MODEL" --trainer "Cap$cap" --trainer-config-path "$work/trainers.json" \
      --ddp-hook "$hook" --nserver "$nserver"
  done
  [[ " ${HOOK_LIST[*]} " == *" rpc_hook "* ]] || continue
  # rpc_hook's buckets (the trainer logs their sizes), replayed through
  # the Synthetic model: the same sizes in the same order.
  $PY - "$work" "$cap" <<'EOF'
import json, re, sys
work, cap = sys.argv[1], sys.argv[2]
log = open(work + "/model-" + cap + "-rpc_hook.log").read()
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

$PY - "$work" "$PYTORCH_DDP_MS" "$MODEL" "${#CAPS[@]}" "${CAPS[@]}" "${HOOK_LIST[@]}" <<'EOF'
import json, os, sys
work, torch_ms, model, ncaps = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
caps, hooks = sys.argv[5:5 + ncaps], sys.argv[5 + ncaps:]
def mean(r, k):
    s = r["groups"]["trainer"]["all"].get(k)
    return s["mean"] if s else float("nan")
print("%s step (ms, means over the timed pass of both trainers)" % model)
print("%-6s %-16s %8s %8s %8s %8s %8s %8s %8s %8s %10s  %s" % (
    "cap_MB", "hook", "forward", "backward", "exposed", "exp/comp", "optim", "step", "span", "overlap",
    "pure_comm", "target (exposed <= 25% of compute)"))
steps = {}
for cap in caps:
    replay = work + "/replay-" + cap + "/results.json"
    pure = mean(json.load(open(replay)), "batch_level_metric,batch_all") if os.path.exists(replay) else None
    for hook in hooks:
        m = json.load(open(work + "/model-" + cap + "-" + hook + "/results.json"))
        fwd, bwd = mean(m, "forward_metric,forward_pass"), mean(m, "backward_metric,backward")
        exposed, span = mean(m, "hook_future_metric,exposed_wait"), mean(m, "hook_future_metric,comm_span")
        opt, step = mean(m, "optimizer_metric,step"), mean(m, "batch_level_metric,batch_all")
        steps[(cap, hook)] = step
        compute = fwd + bwd
        overlap = 1 - exposed / span if span > 0 else float("nan")
        print("%-6s %-16s %8.2f %8.2f %8.2f %7.0f%% %8.2f %8.2f %8.2f %8.3f %10s  %s" % (
            cap, hook, fwd, bwd, exposed, 100 * exposed / compute, opt, step, span, overlap,
            "%.2f" % pure if pure is not None and hook == "rpc_hook" else "-",
            "met" if exposed <= 0.25 * compute else "not met"))
print("exposed: the optimizer's wait for buckets after backward; span: first bucket handed")
print("over to last mean back; overlap: share of the span hidden behind backward; pure_comm:")
print("rpc_hook's traffic through the Synthetic model, ms per step.")
if model == "DummyModel":
    for cap in caps:
        if (cap, "allreduce_hook") in steps:
            s = steps[(cap, "allreduce_hook")]
            print("cap %s MB: allreduce_hook step %.1f ms = %.2f of PyTorch 1.13 DDP's ~%.0f ms on this host "
                  "(target <= 0.80: %s)" % (cap, s, s / torch_ms, torch_ms, "met" if s <= 0.8 * torch_ms else "not met"))
EOF
