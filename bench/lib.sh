# lib.sh — what the bench scripts share: logging, background processes
# (every one still running is stopped on any exit: TERM, then KILL after
# 2 s), arithmetic through python, free ports.
#
# Source it after setting BENCH_NAME (log prefix and scratch folder name)
# and PY (the python with the standard library); it sets PIDS (processes to
# reap: add each one started), TMP (a scratch folder removed at exit) and
# the EXIT/INT/TERM traps.
# shellcheck shell=bash

PIDS=()            # every background process still to be reaped
TMP=$(mktemp -d "${TMPDIR:-/tmp}/psbench-$BENCH_NAME.XXXXXX")

bench_log() { printf '%s\n' "$BENCH_NAME: $*" >&2; }
bench_die() { bench_log "error: $*"; exit 1; }

# shellcheck disable=SC2317  # invoked by the EXIT trap
bench_cleanup() {
    local pid alive=()
    for pid in ${PIDS[@]+"${PIDS[@]}"}; do
        if kill -TERM "$pid" 2>/dev/null; then alive+=("$pid"); fi
    done
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        local left=()
        for pid in ${alive[@]+"${alive[@]}"}; do
            if kill -0 "$pid" 2>/dev/null; then left+=("$pid"); fi
        done
        alive=(${left[@]+"${left[@]}"})
        [[ ${#alive[@]} -eq 0 ]] && break
        sleep 0.1
    done
    for pid in ${alive[@]+"${alive[@]}"}; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in ${PIDS[@]+"${PIDS[@]}"}; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Drop a reaped process from PIDS.
bench_forget() {
    local pid keep=()
    for pid in ${PIDS[@]+"${PIDS[@]}"}; do
        [[ $pid == "$1" ]] || keep+=("$pid")
    done
    PIDS=(${keep[@]+"${keep[@]}"})
}

# Wait for a background process (not in a subshell: it must be our child);
# its exit status goes to WAIT_RC, never fails.
# shellcheck disable=SC2034  # WAIT_RC is read by the scripts that source this file
WAIT_RC=0
# shellcheck disable=SC2034
bench_wait() {
    WAIT_RC=0
    wait "$1" || WAIT_RC=$?
    bench_forget "$1"
}

# Arithmetic and formatting go through python: bench_py EXPR [ARGS...] prints
# eval(EXPR) with the arguments in `a` (strings) and `f` (floats).
bench_py() {
    local expr=$1; shift
    "$PY" -c 'import sys
a = sys.argv[2:]
def num(x):
    try: return float(x)
    except ValueError: return float("nan")
f = [num(x) for x in a]
print(eval(sys.argv[1]))' "$expr" "$@"
}

bench_free_port() {
    "$PY" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Wait up to $3 seconds for the fixed string $2 in file $1 while pid $4 lives.
bench_wait_for_line() {
    local file=$1 line=$2 secs=$3 pid=$4 i
    for ((i = 0; i < secs * 10; i++)); do
        grep -qF -- "$line" "$file" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# The start-wait-check of a background process: wait up to SECS seconds for
# the fixed string LINE in FILE while PID lives; if it never comes, die
# saying whether WHAT exited first (with FILE's last lines) or stayed silent.
#   bench_expect_line WHAT FILE LINE SECS PID
bench_expect_line() {
    local what=$1 file=$2 line=$3 secs=$4 pid=$5
    bench_wait_for_line "$file" "$line" "$secs" "$pid" && return 0
    kill -0 "$pid" 2>/dev/null ||
        bench_die "$what exited before printing \"$line\": $(tail -n 3 "$file" 2>/dev/null | tr '\n' ' ')"
    bench_die "$what did not print \"$line\" within $secs s: $(tail -n 3 "$file" 2>/dev/null | tr '\n' ' ')"
}
