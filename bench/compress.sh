#!/usr/bin/env bash
# compress.sh — what --compress buys on this host (issue 43's targets), each
# ratio between runs of the same round, alternated, so that the host's
# noise moves both sides together.
#
#   bench/compress.sh [BUILD_DIR] [SECONDS] [ROUNDS] [EPOCHS]   (defaults: build, 3, 3, 10)
#
# 1. Big buckets through a server (2 trainers x 4 x 4 MiB, the synthetic
#    trainers of bench/server_throughput.sh's "big" workload, one
#    repetition of SECONDS per run): fp32 pushes, then bf16 pushes
#    (TRAINER_ARGS="--compress bf16": docs/protocol.md, "Narrow pushes"),
#    ROUNDS times. Per transport the median of the rounds' paired ratios
#    bf16 / fp32 of rounds/s, against the targets: tcp >= 1.7, shm >= 1.3.
# 2. The DummyModel step (psbench-master --local, 2 trainers, the
#    DdpRpcTrainer's settings at bucket_cap_mb 25 as bench/train_step.sh's
#    rpc_hook row, EPOCHS epochs), ROUNDS rounds, each run once a round:
#      rpc_hook over tcp, fp32 then bf16 (target: bf16 faster, ratio < 1);
#      allreduce_hook on Gloo (no server), fp32, bf16 and powersgd:4 (with
#      --powersgd-start-iter 2: PyTorch's 1000 plain steps would outlast
#      the run), their steps and bytes per step shown (no target).
#    The timed pass's mean step (batch_level_metric,batch_all, both
#    trainers) and the headline's bytes per step, medians over the rounds.
# 3. The conversions against a memcpy of the same input bytes
#    (BUILD_DIR/half-bench, when built: its own table).
#
# This is a benchmark, not a test: missed targets exit 0; a failing run
# exits 1. Every process started is stopped on any exit (bench/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SECONDS_PER_RUN=${2:-3}
ROUNDS=${3:-3}
EPOCHS=${4:-10}
PY=/usr/bin/python3
BENCH_NAME="compress"
for b in psbench-master psbench-server psbench-trainer; do
    [[ -x $BUILD/$b ]] || { echo "compress.sh: $BUILD/$b not built" >&2; exit 1; }
done
. bench/lib.sh # TMP (removed at exit), PIDS (stopped at exit)
work=$TMP

# ---- 1. big buckets through a server -----------------------------------
for r in $(seq 1 "$ROUNDS"); do
    for dt in none bf16; do
        bench_log "round $r/$ROUNDS: big buckets, --compress $dt ..."
        WORKLOADS=big TRAINER_ARGS="--compress $dt" bench/server_throughput.sh "$BUILD" "$SECONDS_PER_RUN" 1 \
            >"$work/big-$dt-$r.log" 2>&1 ||
            { tail -20 "$work/big-$dt-$r.log" >&2; bench_die "server_throughput.sh failed (--compress $dt)"; }
    done
done

# ---- 2. the DummyModel step ------------------------------------------------

step_run() { # out-dir, extra master args...
    local out=$1
    shift
    "$BUILD/psbench-master" --local --listen 127.0.0.1:0 --http 127.0.0.1:0 --linger 0 --epochs "$EPOCHS" \
        --model DummyModel --trainer DdpRpcTrainer --bucket-cap-mb 25 --ntrainer 2 \
        --out "$out" "$@" >"$out.log" 2>&1 ||
        { tail -20 "$out.log" >&2; bench_die "run failed: $*"; }
}

for r in $(seq 1 "$ROUNDS"); do
    bench_log "round $r/$ROUNDS: DummyModel steps ..."
    step_run "$work/rpc-none-$r" --ddp-hook rpc_hook --nserver 1 --transport tcp
    step_run "$work/rpc-bf16-$r" --ddp-hook rpc_hook --nserver 1 --transport tcp --compress bf16
    step_run "$work/ar-none-$r" --ddp-hook allreduce_hook --nserver 0
    step_run "$work/ar-bf16-$r" --ddp-hook allreduce_hook --nserver 0 --compress bf16
    step_run "$work/ar-psgd-$r" --ddp-hook allreduce_hook --nserver 0 --compress powersgd:4 \
        --powersgd-start-iter 2
done

$PY - "$work" "$ROUNDS" "$EPOCHS" <<'PYEOF'
import json, re, statistics, sys
work, rounds, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
med = statistics.median

def rps(log, transport):
    for line in open(log):
        m = re.match(r"big\s+median\s+psbench %s\s+([0-9.]+)\s+rounds/s" % re.escape(transport), line)
        if m:
            return float(m.group(1))
    raise SystemExit("compress.sh: no median for psbench %s in %s" % (transport, log))

print("1. big buckets through a server: 2 trainers x 4 x 4 MiB (synthetic), rounds/s; %d rounds" % rounds)
print("%-9s %10s %10s %8s %15s  %s" % ("transport", "fp32", "bf16", "ratio", "range", "target"))
for tr, want in (("tcp", 1.7), ("shm", 1.3)):
    f = [rps("%s/big-none-%d.log" % (work, i), tr) for i in range(1, rounds + 1)]
    b = [rps("%s/big-bf16-%d.log" % (work, i), tr) for i in range(1, rounds + 1)]
    r = [y / x for x, y in zip(f, b)]
    print("%-9s %10.1f %10.1f %8.3f %7.3f..%-7.3f  bf16/fp32 >= %.1f: %s"
          % (tr, med(f), med(b), med(r), min(r), max(r), want, "met" if med(r) >= want else "not met"))

def fig(d):
    res = json.load(open("%s/results.json" % d))
    step = res["groups"]["trainer"]["all"]["batch_level_metric,batch_all"]["mean"]
    return step, res["headline"]["trainers"][-1]["bytes_per_step"]

def row(name, tag):
    s = [fig("%s/%s-%d" % (work, tag, i)) for i in range(1, rounds + 1)]
    return name, med(x for x, _ in s), med(y for _, y in s)

print()
print("2. DummyModel, 2 trainers, bucket_cap_mb 25, %s epochs: the timed pass's mean step, medians of %d rounds"
      % (epochs, rounds))
print("%-34s %10s %14s %8s  %s" % ("run", "step ms", "bytes/step", "ratio", "target"))
for base, others, target in ((("rpc_hook tcp fp32", "rpc-none"), [("rpc_hook tcp bf16", "rpc-bf16")], 1.0),
                             (("allreduce_hook gloo fp32", "ar-none"),
                              [("allreduce_hook gloo bf16", "ar-bf16"),
                               ("allreduce_hook gloo powersgd:4", "ar-psgd")], None)):
    name, s0, b0 = row(*base)
    print("%-34s %10.2f %14s %8s" % (name, s0, format(round(b0), ","), "1"))
    for o in others:
        name, s, b = row(*o)
        verdict = ("step/fp32 < %.1f: %s" % (target, "met" if s / s0 < target else "not met")) if target else "shown"
        print("%-34s %10.2f %14s %8.3f  %s (bytes %.3f of fp32's)" % (name, s, format(round(b), ","), s / s0,
                                                                       verdict, b / b0))
PYEOF

# ---- 3. the conversions --------------------------------------------------------
if [[ -x $BUILD/half-bench ]]; then
    echo
    echo "3. the conversions (half-bench: each against a memcpy of the same input bytes)"
    "$BUILD/half-bench"
else
    echo
    echo "3. the conversions: $BUILD/half-bench not built (PSBENCH_TESTS or the bench targets)"
fi
exit 0
