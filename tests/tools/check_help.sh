#!/bin/sh
# check_help.sh — every binary's --help (and -h) against its golden text in
# tests/golden/, byte for byte: the option tables (shared/opts.h) produce
# the help, and the text people read must not change with the code that
# makes it. Exit 0, or 1 with a unified diff of each difference.
#
#   tests/tools/check_help.sh BUILD_DIR
#
# To change a help text on purpose: edit the option table, then copy the
# binary's new output over the golden file in the same commit.
set -u
bin=${1:?usage: check_help.sh BUILD_DIR}
golden=$(dirname "$0")/../golden
out=$(mktemp -d) || exit 1
trap 'rm -rf "$out"' EXIT
fail=0

# check NAME GOLDEN COMMAND...: stdout equals GOLDEN, stderr is empty, exit 0.
check() {
    name=$1 want=$2
    shift 2
    "$@" >"$out/stdout" 2>"$out/stderr"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL $name: exit status $rc"; cat "$out/stderr"; fail=1; return
    fi
    if [ -s "$out/stderr" ]; then
        echo "FAIL $name: wrote to stderr:"; cat "$out/stderr"; fail=1; return
    fi
    if ! cmp -s "$want" "$out/stdout"; then
        echo "FAIL $name: differs from $want:"
        diff -u "$want" "$out/stdout" | head -n 60
        fail=1; return
    fi
    echo "ok   $name"
}

for b in master server trainer node; do
    check "psbench-$b --help" "$golden/help-$b.txt" "$bin/psbench-$b" --help
    check "psbench-$b -h" "$golden/help-$b.txt" "$bin/psbench-$b" -h
done
check "psbench-master diff --help" "$golden/help-master-diff.txt" "$bin/psbench-master" diff --help
check "psbench-master diff -h" "$golden/help-master-diff.txt" "$bin/psbench-master" diff -h
check "psbench-master sweep --help" "$golden/help-master-sweep.txt" "$bin/psbench-master" sweep --help
check "psbench-master sweep -h" "$golden/help-master-sweep.txt" "$bin/psbench-master" sweep -h
check "psbench-master trace --help" "$golden/help-master-trace.txt" "$bin/psbench-master" trace --help
check "psbench-master trace -h" "$golden/help-master-trace.txt" "$bin/psbench-master" trace -h
exit $fail
