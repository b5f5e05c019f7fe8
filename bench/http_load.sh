#!/usr/bin/env bash
# http_load.sh — does HTTP load on the master slow the run down? (issue 13:
# slow consumers and a bounded flood of HTTP requests change the run's step
# time by less than 3 %)
#
#   bench/http_load.sh [BUILD_DIR] [ROUNDS]   (defaults: build, 5)
#   EPOCHS=N (default 2000: ~4 s of timed pass), RATE=RPS (flood requests a
#   second, default 200), FLOOD_CONNS=C (default 32), SLOW=N (slow consumers
#   of each kind, default 8)
#
# One short job, `psbench-master --local` with 2 trainers and 1 server on a
# small Synthetic model (4 buckets of 64 KiB a batch), run three ways each
# round, in an order that rotates from round to round (drift on a shared
# machine hits all three alike):
#   unloaded  nothing else runs;
#   loaded    the HTTP load below on the job's master, from its start to
#             its end;
#   control   the same load on another psbench-master on this host, one
#             that only waits for nodes: what the load costs the job through
#             this machine's 2 cores alone (the client, the kernel's TCP
#             work, an HTTP server), measured in the same run. loaded /
#             control is what serving it from the job's own master adds
#             (its documents are bigger than the idle master's).
# The load is one tests/multihost/httpload.py process on loopback:
#   - slow consumers: SLOW readers of 1 byte per 0.5 s (minimal receive
#     buffer), SLOW connections that never read, SLOW requests sent 1 byte
#     per 0.5 s;
#   - a flood rate-bounded to RATE requests a second over FLOOD_CONNS
#     connections, every endpoint in turn. Bounded so that the client does
#     not itself take a whole core of this 2-core machine from the job: its
#     own CPU is printed (share of one core).
# Loopback is one address: SLOW x 3 + FLOOD_CONNS stays under the master's
# per-address limit (64) by default (a few refusals still happen: the
# master counts a closed connection out only once it has cleaned it up).
# Prints, per round, the timed pass's step time (batch_level_metric,
# batch_all: p50 and mean over both trainers, results.json via --out) of
# each run, the ratios, the loaded run's requests, answers and refusals, the
# client's CPU and the job master's HTTP thread's CPU (MHD-single, sampled
# every 0.2 s, so up to 0.2 s short); then the medians of the ratios over
# the rounds, loaded / unloaded against the target (<= 1.03). A benchmark,
# not a test: a missed target still exits 0; a failed run exits 1. Every
# process it starts is stopped on any exit path.
set -euo pipefail

BUILD=${1:-build}
ROUNDS=${2:-5}
EPOCHS=${EPOCHS:-2000}
RATE=${RATE:-200}
FLOOD_CONNS=${FLOOD_CONNS:-32}
SLOW=${SLOW:-8}
TARGET=1.03
PY=/usr/bin/python3
BENCH_NAME=http_load

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
LOADER="$(cd "$(dirname "$0")/.." && pwd)/tests/multihost/httpload.py"

[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || bench_die "ROUNDS must be a positive whole number, got '$ROUNDS'"
for v in EPOCHS FLOOD_CONNS SLOW RATE; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || bench_die "$v must be a positive whole number, got '${!v}'"
done
for b in psbench-master psbench-server psbench-trainer; do
    [[ -x $BUILD/$b ]] || bench_die "$BUILD/$b not found (build first: cmake --build $BUILD)"
done
[[ -x $PY ]] || bench_die "$PY not found"
[[ -f $LOADER ]] || bench_die "$LOADER not found"
TCK=$(getconf CLK_TCK)

cat >"$TMP/models.json" <<'EOF'
{"Small": {"model_class": "Synthetic",
           "configurations": {"buckets": 4, "bucket_floats": 16384, "sparse": false}}}
EOF

# hl_ticks STAT_FILE: CPU ticks (user + system) in it, into TICKS (kept
# when the file is gone). Builtins only: it runs every 0.2 s during a job.
hl_ticks() {
    local f
    read -r -a f <"$1" 2>/dev/null || return 0
    TICKS=$((f[13] + f[14]))
}

# hl_thread PID NAME: the stat file of PID's thread NAME, into THREAD_STAT.
hl_thread() {
    local t comm
    for t in /proc/"$1"/task/*; do
        read -r comm <"$t/comm" 2>/dev/null || continue
        if [[ $comm == "$2" ]]; then THREAD_STAT=$t/stat; return 0; fi
    done
}

# hl_run NAME MODE (unloaded, loaded, control): one job; writes its step
# time, the HTTP thread's and the master's CPU and the load's figures to
# $TMP/NAME.row (JSON).
hl_run() {
    local name=$1 mode=$2 port target mpid lpid='' rc http_ticks=0 master_ticks=0
    local out=$TMP/$name
    port=$(bench_free_port)
    "$BUILD/psbench-master" --local --listen 127.0.0.1:0 --http "127.0.0.1:$port" --linger 0 \
        --ntrainer 2 --nserver 1 --model Small --model-config-path "$TMP/models.json" \
        --epochs "$EPOCHS" --out "$out" >"$out.log" 2>&1 &
    mpid=$!
    PIDS+=("$mpid")
    if [[ $mode != unloaded ]]; then
        bench_expect_line "$name: psbench-master" "$out.log" "HTTP on http://127.0.0.1:$port/" 10 "$mpid"
        target=$port
        if [[ $mode == control ]]; then
            kill -0 "$IDLE_PID" 2>/dev/null || bench_die "the control's master died: $(tail -n 3 "$TMP/idle.log")"
            target=$IDLE_PORT
        fi
        "$PY" "$LOADER" --target "127.0.0.1:$target" --trickle "$SLOW" --noread "$SLOW" --slowsend "$SLOW" \
            --pause 0.5 --hold 3600 --flood-conns "$FLOOD_CONNS" --flood-requests 1000000000 \
            --rate "$RATE" --timeout 3600 >"$out.load" 2>"$out.load.err" &
        lpid=$!
        PIDS+=("$lpid")
    fi
    # Sample the master's CPU (all threads, and its HTTP thread) until it ends.
    THREAD_STAT=
    while kill -0 "$mpid" 2>/dev/null; do
        [[ -n $THREAD_STAT ]] || hl_thread "$mpid" MHD-single
        if [[ -n $THREAD_STAT ]]; then TICKS=$http_ticks; hl_ticks "$THREAD_STAT"; http_ticks=$TICKS; fi
        TICKS=$master_ticks; hl_ticks "/proc/$mpid/stat"; master_ticks=$TICKS
        sleep 0.2
    done
    bench_wait "$mpid"
    rc=$WAIT_RC
    if [[ -n $lpid ]]; then
        kill -TERM "$lpid" 2>/dev/null || true
        bench_wait "$lpid"
        [[ $WAIT_RC -eq 0 ]] || bench_die "$name: the load client exited with $WAIT_RC: $(tail -n 3 "$out.load.err")"
    else
        echo '{}' >"$out.load"
    fi
    [[ $rc -eq 0 ]] || bench_die "$name: psbench-master exited with $rc: $(tail -n 5 "$out.log")"
    "$PY" - "$out/results.json" "$out.load" "$http_ticks" "$master_ticks" "$TCK" >"$out.row" <<'EOF' ||
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("phase") != "done":
    sys.exit("phase %r" % r.get("phase"))
s = r["groups"]["trainer"]["all"]["batch_level_metric,batch_all"]
load = json.load(open(sys.argv[2]))
tck = float(sys.argv[5])
print(json.dumps({"p50": s["p50"], "mean": s["mean"], "count": s["count"], "http_cpu": int(sys.argv[3]) / tck,
                  "master_cpu": int(sys.argv[4]) / tck, "load": load}))
EOF
        bench_die "$name: no step time in $out/results.json"
}

# The control's target: a master that waits for nodes that never come (its
# join timeout is the larger of --rpc-timeout and 120 s: a day).
IDLE_PORT=$(bench_free_port)
"$BUILD/psbench-master" --listen 127.0.0.1:0 --http "127.0.0.1:$IDLE_PORT" --ntrainer 1 --nserver 1 \
    --rpc-timeout 86400 >"$TMP/idle.log" 2>&1 &
IDLE_PID=$!
PIDS+=("$IDLE_PID")
bench_expect_line "the control's psbench-master" "$TMP/idle.log" "HTTP on http://127.0.0.1:$IDLE_PORT/" 10 "$IDLE_PID"

bench_log "$ROUNDS round(s) of: psbench-master --local, 2 trainers, 1 server, Synthetic 4 x 64 KiB buckets," \
    "$EPOCHS epochs; unloaded, loaded and control runs in a rotating order"
bench_log "load (one httpload.py on loopback): $SLOW trickling + $SLOW never-reading + $SLOW slow-sending consumers," \
    "a flood of $FLOOD_CONNS connections rate-bounded to $RATE requests/s (so the client does not take a core itself)"
MODES=(unloaded loaded control)
for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < 3; k++)); do
        mode=${MODES[$(((r - 1 + k) % 3))]}
        bench_log "round $r: $mode ..."
        hl_run "r$r-$mode" "$mode"
    done
done
kill -0 "$IDLE_PID" 2>/dev/null || bench_die "the control's master died: $(tail -n 3 "$TMP/idle.log")"

"$PY" - "$TMP" "$ROUNDS" "$TARGET" "$RATE" <<'EOF'
import json, statistics, sys
tmp, rounds, target, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rows = []
print("%-5s %-13s %-13s %-13s %-13s %-13s %-13s %8s %8s %7s %5s %6s" % (
    "round", "unloaded", "loaded", "control", "load/unload", "ctrl/unload", "load/ctrl", "requests",
    "answered", "refused", "cli%", "http_s"))
pair = lambda x: "%5.3f/%-7.3f" % x
for r in range(1, rounds + 1):
    u, l, c = (json.load(open("%s/r%d-%s.row" % (tmp, r, m))) for m in ("unloaded", "loaded", "control"))
    ld = l["load"]
    lu = (l["p50"] / u["p50"], l["mean"] / u["mean"])
    cu = (c["p50"] / u["p50"], c["mean"] / u["mean"])
    lc = (l["p50"] / c["p50"], l["mean"] / c["mean"])
    cli = 100.0 * ld["cpu_s"] / ld["wall_s"]
    rows.append((lu, cu, lc, cli, ld["wall_s"]))
    print("%-5d %s %s %s %s %s %s %8d %8d %7d %4.0f%% %6.2f" % (
        r, pair((u["p50"], u["mean"])), pair((l["p50"], l["mean"])), pair((c["p50"], c["mean"])),
        pair(lu), pair(cu), pair(lc), ld["sent"], ld["answers"], ld["rejected"] + ld["reset"], cli,
        l["http_cpu"]))
med = lambda i, j: statistics.median(x[i][j] for x in rows)
print("step time in ms, p50/mean of the timed pass (both trainers); ratios p50/mean within a round;")
print("requests, answered, refused (closed before an answer, or reset): the loaded run's load (flood bound"
      " %.0f/s); cli%%: the load client's own CPU, share of one core; http_s: CPU seconds of the job"
      " master's HTTP thread in the loaded run." % rate)
lu_p, lu_m = med(0, 0), med(0, 1)
print("median over %d rounds: loaded / unloaded p50 %.3f, mean %.3f (target: step time changes by less than"
      " 3 %%, <= %.2f: p50 %s, mean %s)" % (rounds, lu_p, lu_m, target, "met" if lu_p <= target else "not met",
                                           "met" if lu_m <= target else "not met"))
print("  control / unloaded p50 %.3f, mean %.3f: the same load on another master on this host;"
      " loaded / control p50 %.3f, mean %.3f: what serving it from the job's own master adds" % (
          med(1, 0), med(1, 1), med(2, 0), med(2, 1)))
print("  the load client used a median %.0f%% of one core over %.1f s" % (
    statistics.median(x[3] for x in rows), statistics.median(x[4] for x in rows)))
EOF
