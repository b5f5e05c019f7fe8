#!/usr/bin/env bash
# server_throughput.sh — psbench-server's rounds/s next to the bare floor.
#
#   bench/server_throughput.sh [BUILD_DIR] [SECONDS] [PAIRS]   (defaults: build, 5, 3)
#
# Two workloads, each run by
#   1. bare-floor (bench/bare_floor.c): the floor every parameter server pays,
#      a bare epoll server that only moves the same bytes (no framing, no
#      arithmetic), driven by forked clients, for SECONDS;
#   2. psbench: `psbench-server --standalone` and N `psbench-trainer --model
#      synthetic` processes, with as many batches as the floor did rounds in
#      SECONDS (at least 20), so both run about as long.
#     big:   2 trainers x  4 buckets x 1,048,576 floats (4 MiB per bucket)
#     small: 8 trainers x 16 buckets x       256 floats (1 KiB per bucket)
# Both copy replies into the sockets; SERVER_ARGS=--splice measures
# psbench-server splicing results of 64 KiB and more (zero-copy) instead.
# Each workload runs PAIRS times, floor then psbench, so that both see the
# same state of a shared machine; the verdict uses the median of the pairs'
# ratios (one pair's ratio swings by 10-20 % on a noisy 2-core VM),
# plus, once, iperf3's single-stream loopback rate as a reference (when
# iperf3 is installed). Prints a table per workload and the targets (psbench
# at >= 1.0 of the floor on big, >= 0.5 on small) as met / not met. This is a
# benchmark, not a test: missed targets still exit 0; a failing run (a binary
# missing, a trainer exiting non-zero, a server that never listens) exits 1.
# Every process the script starts is killed on any exit path.
set -euo pipefail

BUILD=${1:-build}
DURATION=${2:-5}
REPEAT=${3:-3}
WARMUP=3   # rounds both sides run before timing starts
# Extra psbench-server flags, e.g. SERVER_ARGS=--splice to measure the
# server splicing big results (zero-copy) instead of copying them.
read -r -a SERVER_EXTRA <<<"${SERVER_ARGS:-}"
PY=/usr/bin/python3
BENCH_NAME=server_throughput

# name trainers buckets floats-per-bucket target-ratio
WORKLOADS=(
    "big 2 4 1048576 1.0"
    "small 8 16 256 0.5"
)

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# Wait up to $2 seconds for a TCP socket listening on port $1 (any address,
# IPv4 or IPv6) while pid $3 lives: iperf3 buffers its "Server listening"
# line when stdout is not a tty.
bs_wait_listening() {
    local port=$1 secs=$2 pid=$3 i
    for ((i = 0; i < secs * 10; i++)); do
        "$PY" -c 'import sys
port = ":%04X" % int(sys.argv[1])
for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = [l.split() for l in open(name).readlines()[1:]]
    except OSError:
        continue
    if any(r[1].endswith(port) and r[3] == "0A" for r in rows):
        sys.exit(0)
sys.exit(1)' "$port" && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

bs_table_header() {
    printf '%-9s %-15s %10s %17s %13s %13s %15s\n' workload impl rounds/s \
        grad_bytes_in/s round_p50_ms round_p99_ms ratio_to_floor
}

# bs_table_row WORKLOAD IMPL RPS BYTES_IN P50 P99 RATIO
bs_table_row() {
    bench_py '"%-9s %-15s %10.1f %17s %13.3f %13.3f %15.2f" % (a[0], a[1], f[2], format(round(f[3]), ","), f[4], f[5], f[6])' "$@"
}

# ---- the three runners ---------------------------------------------------

# bs_iperf3: prints the reference line (or why there is none).
bs_iperf3() {
    if ! command -v iperf3 >/dev/null 2>&1; then
        echo "iperf3: not installed"
        return
    fi
    local port spid bps
    port=$(bench_free_port)
    iperf3 -s -1 -p "$port" >"$TMP/iperf3-server.log" 2>&1 &
    spid=$!
    PIDS+=("$spid")
    if ! bs_wait_listening "$port" 10 "$spid"; then
        echo "iperf3: server did not start ($(tail -n 1 "$TMP/iperf3-server.log"))"
        return
    fi
    bench_log "iperf3: single stream over loopback, 3 s"
    iperf3 -c 127.0.0.1 -p "$port" -t 3 -J >"$TMP/iperf3.json" 2>"$TMP/iperf3.err" || true
    bench_wait "$spid"
    if ! bps=$("$PY" -c 'import json, sys
print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"])' \
        "$TMP/iperf3.json" 2>/dev/null); then
        echo "iperf3: failed ($(tail -n 1 "$TMP/iperf3.err" 2>/dev/null))"
        return
    fi
    bench_py '"iperf3 single-stream loopback: %.1f Gbit/s = %s bytes/s" % (f[0] / 1e9, format(round(f[0] / 8), ","))' "$bps"
}

# bs_floor NAME N K S: runs bare-floor; sets FLOOR_RPS FLOOR_BYTES FLOOR_P50 FLOOR_P99.
bs_floor() {
    local name=$1 n=$2 k=$3 s=$4 pid rc kv
    bench_log "$name: bare-floor --clients $n --buckets $k --bytes $s --seconds $DURATION"
    "$BUILD/bare-floor" --clients "$n" --buckets "$k" --bytes "$s" --seconds "$DURATION" \
        --warmup-rounds "$WARMUP" >"$TMP/floor-$name.out" 2>"$TMP/floor-$name.err" &
    pid=$!
    PIDS+=("$pid")
    bench_wait "$pid"
    rc=$WAIT_RC
    [[ $rc -eq 0 ]] || bench_die "bare-floor ($name) exited with $rc: $(tail -n 1 "$TMP/floor-$name.err")"
    local line
    line=$(grep -m1 '^bare-floor ' "$TMP/floor-$name.out") ||
        bench_die "bare-floor ($name) printed no result line"
    FLOOR_RPS='' FLOOR_BYTES='' FLOOR_P50='' FLOOR_P99=''
    for kv in ${line#bare-floor }; do
        case ${kv%%=*} in
            rounds_per_s) FLOOR_RPS=${kv#*=} ;;
            bytes_in_per_s) FLOOR_BYTES=${kv#*=} ;;
            p50_ms) FLOOR_P50=${kv#*=} ;;
            p99_ms) FLOOR_P99=${kv#*=} ;;
        esac
    done
    [[ -n $FLOOR_RPS && -n $FLOOR_BYTES && -n $FLOOR_P50 && -n $FLOOR_P99 ]] ||
        bench_die "bare-floor ($name): unreadable result line: $line"
}

# bs_psbench NAME N K F BATCHES: one standalone server, N synthetic trainers;
# sets PS_RPS PS_P50 PS_P99 (means over the trainers' --summary-json).
bs_psbench() {
    local name=$1 n=$2 k=$3 f=$4 batches=$5 port spid rc r
    local dir="$TMP/psbench-$name"
    mkdir -p "$dir"
    port=$(bench_free_port)
    bench_log "$name: psbench-server --standalone --trainers $n ${SERVER_ARGS:-}; $n trainers x $batches batches"
    "$BUILD/psbench-server" --standalone --trainers "$n" --listen "127.0.0.1:$port" \
        ${SERVER_EXTRA[@]+"${SERVER_EXTRA[@]}"} >"$dir/server.out" 2>"$dir/server.err" &
    spid=$!
    PIDS+=("$spid")
    if ! bench_wait_for_line "$dir/server.err" "psbench-server: listening on 127.0.0.1:$port" 10 "$spid"; then
        kill -0 "$spid" 2>/dev/null ||
            bench_die "psbench-server ($name) exited before listening: $(tail -n 1 "$dir/server.err")"
        bench_die "psbench-server ($name) did not report listening on 127.0.0.1:$port within 10 s"
    fi

    # A hung run fails instead of hanging the benchmark.
    local limit
    limit=$(bench_py 'max(60, int(20 * f[0]))' "$DURATION")
    local tpids=()
    for ((r = 0; r < n; r++)); do
        timeout --kill-after=5 "$limit" \
            "$BUILD/psbench-trainer" --server "127.0.0.1:$port" --rank "$r" \
            --model synthetic --buckets "$k" --bucket-floats "$f" --batches "$batches" \
            --warmup-batches "$WARMUP" --summary-json "$dir/trainer$r.json" >"$dir/trainer$r.log" 2>&1 &
        tpids+=("$!")
        PIDS+=("$!")
    done
    for ((r = 0; r < n; r++)); do
        bench_wait "${tpids[$r]}"
        rc=$WAIT_RC
        [[ $rc -ne 124 ]] || bench_die "psbench-trainer rank $r ($name) timed out after $limit s"
        [[ $rc -eq 0 ]] ||
            bench_die "psbench-trainer rank $r ($name) exited with $rc: $(tail -n 1 "$dir/trainer$r.log")"
    done

    kill -TERM "$spid" 2>/dev/null || true
    bench_wait "$spid"
    rc=$WAIT_RC
    [[ $rc -eq 0 || $rc -eq 143 ]] ||
        bench_log "warning: psbench-server ($name) exited with $rc after SIGTERM: $(tail -n 1 "$dir/server.err")"

    local summary
    summary=$("$PY" - "$batches" "$dir"/trainer*.json <<'EOF'
import json, sys
want = int(sys.argv[1])
docs = []
for path in sys.argv[2:]:
    with open(path) as fh:
        d = json.load(fh)
    for key in ("batches", "seconds", "rounds_per_s", "batch_p50_ms", "batch_p99_ms"):
        if key not in d:
            sys.exit("%s: no %r" % (path, key))
    if d["batches"] != want:
        print("server_throughput: warning: %s ran %s batches, asked %d" % (path, d["batches"], want),
              file=sys.stderr)
    docs.append(d)
if not docs:
    sys.exit("no --summary-json files")
mean = lambda key: sum(float(d[key]) for d in docs) / len(docs)
print(mean("rounds_per_s"), mean("batch_p50_ms"), mean("batch_p99_ms"))
EOF
    ) || bench_die "psbench ($name): unreadable trainer summaries in $dir"
    read -r PS_RPS PS_P50 PS_P99 <<<"$summary"
    # How the server sent the results: spliced (zero-copy) or copied.
    PS_SPLICED=$(sed -n 's/.*result payload bytes: \([0-9]*\) spliced (zero-copy), \([0-9]*\) copied.*/\1 \2/p' \
        "$dir/server.out")
}

# ---- main ----------------------------------------------------------------

if ! [[ $DURATION =~ ^[0-9]+([.][0-9]+)?$ ]] || [[ $(bench_py 'f[0] > 0' "$DURATION") != True ]]; then
    bench_die "SECONDS must be a positive number, got '$DURATION'"
fi
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || bench_die "PAIRS must be a positive whole number, got '$REPEAT'"
for bin in bare-floor psbench-server psbench-trainer; do
    [[ -x $BUILD/$bin ]] || bench_die "$BUILD/$bin not found (build first: cmake --build $BUILD)"
done
[[ -x $PY ]] || bench_die "$PY not found"

bs_iperf3
echo

RESULTS=()   # "name ratio target" per workload
for w in "${WORKLOADS[@]}"; do
    read -r name n k f target <<<"$w"
    s=$((f * 4))
    bs_table_header
    ratios=() floors=() pss=()
    for ((rep = 1; rep <= REPEAT; rep++)); do
        bs_floor "$name" "$n" "$k" "$s"
        batches=$(bench_py 'max(20, round(f[0] * f[1]))' "$FLOOR_RPS" "$DURATION")
        bs_psbench "$name" "$n" "$k" "$f" "$batches"
        ps_bytes=$(bench_py 'f[0] * f[1] * f[2] * f[3]' "$n" "$k" "$s" "$PS_RPS")
        ratio=$(bench_py 'f[0] / f[1] if f[1] > 0 else 0.0' "$PS_RPS" "$FLOOR_RPS")
        bs_table_row "$name" "bare-floor #$rep" "$FLOOR_RPS" "$FLOOR_BYTES" "$FLOOR_P50" "$FLOOR_P99" 1
        bs_table_row "$name" "psbench #$rep" "$PS_RPS" "$ps_bytes" "$PS_P50" "$PS_P99" "$ratio"
        ratios+=("$ratio") floors+=("$FLOOR_RPS") pss+=("$PS_RPS")
    done
    med=$(bench_py '__import__("statistics").median(f)' "${ratios[@]}")
    bench_py '"%-9s %-15s %10.1f  (floor rounds/s, median of %d)" % (a[0], "median", __import__("statistics").median(f[1:]), len(f) - 1)' \
        "$name" "${floors[@]}"
    bench_py '"%-9s %-15s %10.1f  (psbench rounds/s, median of %d)" % (a[0], "median", __import__("statistics").median(f[1:]), len(f) - 1)' \
        "$name" "${pss[@]}"
    bench_py '"%-9s %-15s %10s  ratio_to_floor, median of the %d pairs: %.3f (range %.3f..%.3f)" % (a[0], "median", "", len(f) - 2, f[1], min(f[2:]), max(f[2:]))' \
        "$name" "$med" "${ratios[@]}"
    if [[ -n ${PS_SPLICED:-} ]]; then
        read -r sp cp <<<"$PS_SPLICED"
        bench_py '"%-9s psbench-server sent %.0f %% of result bytes spliced (zero-copy), the rest copied" % (a[0], 100.0 * f[1] / (f[1] + f[2]) if f[1] + f[2] > 0 else 0.0)' \
            "$name" "$sp" "$cp"
    fi
    echo
    RESULTS+=("$name $med $target")
done

echo "targets (informational; median over $REPEAT pairs of psbench rounds/s over the floor's):"
for res in "${RESULTS[@]}"; do
    read -r name ratio target <<<"$res"
    bench_py '"  %-6s %.3f  target >= %.2f  %s" % (a[0], f[1], f[2], "met" if f[1] >= f[2] else "not met")' \
        "$name" "$ratio" "$target"
done
exit 0
