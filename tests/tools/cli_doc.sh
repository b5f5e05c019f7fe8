#!/bin/sh
# cli_doc.sh — writes docs/cli.md, the four binaries' command lines, from
# their --help texts as tests/golden/ pins them (check_help.sh holds the
# golden files to the binaries byte for byte, so the page is the help).
#
#   tests/tools/cli_doc.sh            print the page on stdout
#   tests/tools/cli_doc.sh --check    exit 1, with a diff, if docs/cli.md differs
#
# After changing a help text (and its golden file), regenerate the page:
#   tests/tools/cli_doc.sh > docs/cli.md
set -u
here=$(dirname "$0")
golden=$here/../golden
doc=$here/../../docs/cli.md

page() {
    cat <<'HEAD'
# Command lines

The four binaries' `--help`, as they print it (generated from
`tests/golden/help-*.txt` by `tests/tools/cli_doc.sh`; the test `cli_doc`
fails when this page and the help texts part). A value named `seed` (the
`seed` placement, the `seed` RPC pattern) is PyTorch's benchmark's way of
doing that thing, not `--seed`, the job's random seed (docs/results.md says
what the results mean; docs/http-api.md the HTTP API; docs/protocol.md the
wire protocol).

Numbers, in flags, configuration files and sweep files, are decimal: digits,
for a real number an optional sign, point and exponent (`25`, `0.05`,
`1e-3`). Hex (`0x10`), blanks around a number, `inf`, `nan` and trailing
characters are refused; a leading zero keeps its decimal meaning (`010` is
ten). Each number is checked in the type it is used in: a learning rate or a
momentum that is 0 (or a subnormal) as the float trainers and servers step
in (`1e-46`), a bucket size in MB below one byte, seconds below the
millisecond waits are counted in (`0.0001`) and a file's number that a double
cannot hold (`1e-400`) are refused, not run as 0. A refusal shows a value of
more than 80 characters cut there, with its length (`'hhhh…' (1000000
characters)`).

Long options are taken by their whole names only, in every binary and
subcommand (`--hook_state` and `--hook-state` alike): a beginning of one is
no longer read as it (`--epoch 2` ran as `--epochs 2`). It is refused, exit 2,
with the nearest name: `psbench-master: unknown option --epoch: did you mean
--epochs?`.

- [psbench-master](#psbench-master): the run (`--local` starts every node itself)
- [psbench-master diff](#psbench-master-diff): two runs side by side
- [psbench-master sweep](#psbench-master-sweep): a matrix of runs, a table and a report
- [psbench-master trace](#psbench-master-trace): where a trace.json's time went
- [psbench-server](#psbench-server): a parameter server
- [psbench-trainer](#psbench-trainer): a trainer
- [psbench-node](#psbench-node): any rank of a launcher (torchrun, srun, Kubernetes, Ray)
HEAD
    for b in master master-diff master-sweep master-trace server trainer node; do
        title=psbench-$b
        [ "$b" = master-diff ] && title="psbench-master diff"
        [ "$b" = master-sweep ] && title="psbench-master sweep"
        [ "$b" = master-trace ] && title="psbench-master trace"
        printf '\n## %s\n\n```text\n' "$title"
        cat "$golden/help-$b.txt"
        printf '```\n'
    done
}

if [ "${1:-}" = --check ]; then
    out=$(mktemp) || exit 1
    trap 'rm -f "$out"' EXIT
    page >"$out"
    if ! cmp -s "$doc" "$out"; then
        echo "FAIL docs/cli.md differs from the help texts (regenerate: tests/tools/cli_doc.sh > docs/cli.md):"
        diff -u "$doc" "$out" | head -n 60
        exit 1
    fi
    echo "ok   docs/cli.md"
    exit 0
fi
page
