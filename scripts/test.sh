#!/usr/bin/env bash
# One command from a fresh clone to a green test run:
#   dependencies (run's and the tests') → configure → build (warnings are
#   errors) → ctest,
# then the same tests again under AddressSanitizer + UBSan, plus the
# server's integration tests on the `test` device (futures that resolve
# late, from a worker thread), and those again under ThreadSanitizer with
# the trainer's threaded tests (hooks, collectives). Not the container test
# (label container: minutes; `ctest -L container` runs it, after
# scripts/build-image.sh's tools are installed). The multihost tests
# (network namespaces, as root) run in the release pass, the faults also
# under ASan; they skip with a reason where namespaces are not allowed.
#
#   scripts/test.sh              everything
#   PSBENCH_NO_SANITIZE=1 scripts/test.sh   skip the sanitizer passes
#
# Its build folders are its own: build-test/ (release), build-asan/ and
# build-tsan/, all with clang when present (so that the fuzz target is built
# and run) and RelWithDebInfo; scripts/run.sh keeps build/. Either may run
# first, in any order, any number of times. PSBENCH_CONFIGURE_ONLY=1 only
# configures the folders (tests/integration/test_scripts.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/configure.sh
. scripts/configure.sh

configure_only=${PSBENCH_CONFIGURE_ONLY:-0}
if [ "$configure_only" != 1 ]; then
  scripts/install-deps.sh test
fi

jobs=$(nproc 2>/dev/null || echo 2)
# clang when present, so that the fuzz target is built and run too.
if command -v clang >/dev/null 2>&1; then cc=clang; else cc=cc; fi

# One test more at once than the machine has cores: most tests wait (on
# peers, timeouts, a browser) more than they compute — at as many as the
# cores the CPU sat 11-51 % idle through the ASan pass — and each one uses
# its own ports, folders and namespaces (tests/integration/psb.py,
# tests/multihost/netns.py). The suite has passed twice in a row with two
# copies of it at -j2 each on 2 cores (4 at once: issue 38's check), more
# than this asks of one host.
test_jobs=$((jobs + 1))

# The targets a selection of tests runs: each test's own executable (a unit
# test) and the four binaries the scripts' tests start. A sanitizer pass
# builds only these (about half of its build). ctest names a test's
# executable only once it exists, so the names come from the release
# build, which this script builds whole first; a selected test it cannot
# place means: build everything.
selected_targets() { # build-dir, ctest selection flags (one word)
  # shellcheck disable=SC2086  # $2 is a list of ctest flags
  (cd "$1" && ctest --show-only=json-v1 $2) > "$1/selected-tests.json"
  (cd build-test && ctest --show-only=json-v1) | /usr/bin/python3 -c '
import json, os, sys
builds = tuple(os.path.realpath(d) + os.sep for d in ("build-test", os.path.dirname(sys.argv[1])))
known = {t["name"]: (t.get("command") or [None])[0] for t in json.load(sys.stdin)["tests"]}
names = {"psbench-master", "psbench-server", "psbench-trainer", "psbench-node"}
for t in json.load(open(sys.argv[1]))["tests"]:
    cmd = (t.get("command") or [None])[0] or known.get(t["name"])
    if cmd is None:
        print("all")
        sys.exit(0)
    exe = os.path.realpath(cmd)
    if exe.startswith(builds):
        names.add(os.path.basename(exe))
print(" ".join(sorted(names)))' "$1/selected-tests.json"
}

run_suite() { # build-dir, ctest args (quoted as one word), all|selected, extra cmake args...
  local dir=$1 select=$2 what=$3; shift 3
  # Every option this script relies on is named, so that a folder left
  # with other options (a hand-made build without tests) is set right.
  psb_configure "$dir" "$cc" RelWithDebInfo -DPSBENCH_WERROR=ON -DPSBENCH_TESTS=ON "$@"
  [ "$configure_only" = 1 ] && return 0
  if [ "$what" = selected ]; then
    # shellcheck disable=SC2046  # one target name per word
    cmake --build "$dir" -j "$jobs" --target $(selected_targets "$dir" "$select")
  else
    cmake --build "$dir" -j "$jobs"
  fi
  # shellcheck disable=SC2086  # $select is a list of ctest flags
  (cd "$dir" && ctest --output-on-failure -j "$test_jobs" $select)
}

echo "== release build + tests (build-test/)"
run_suite build-test "-LE container" all -DPSBENCH_SANITIZE=OFF -DPSBENCH_TSAN=OFF -DPSBENCH_FUZZ=ON -DPSBENCH_DEVICE_TEST_SUITE=OFF

if [ "${PSBENCH_NO_SANITIZE:-0}" != 1 ]; then
  echo "== ASan + UBSan build + tests (build-asan/)"
  # The fuzz target already runs under ASan in the first pass.
  # Not again under ASan: the soak and the HTTP load (they measure memory,
  # which ASan's quarantine inflates on purpose), Slurm (it runs the same
  # binaries as the faults tests do, slower), the scripts' configure guard
  # (no binary of the build in it), the 3 GiB table (its fill is the rng's
  # loop; unit_embedding fills in slices under ASan) and the first-answer
  # deadlines (waits for timeouts; unit_control sniffs peers under ASan).
  # Nor the browser's tests (dashboard, report: Chromium drives pages whose
  # endpoints integration_master and integration_prometheus read here),
  # the host-state runs (its arithmetic is unit_hoststate's, here; every
  # node reads /proc in every run here), the training runs (the models'
  # code is unit_model's and unit_compute's here, the hooks' and buckets'
  # integration_hooks' and integration_ddp_buckets') and the packaging (a
  # --local job from an installed tree: the binaries' code is the other
  # tests'), nor deploy/'s files (their one job is the torchrun example's,
  # whose psbench-node runs under ASan in integration_node). The end-to-end
  # and batch-update suites run here on the test device (device_test_e2e,
  # device_test_batch_update: the same files over TCP, futures resolved
  # late); their shared-memory path is every --local job's here. Inside
  # the files that stay, a test made of whole training runs that repeat
  # what the others run skips here (unittest.skipIf(psb.ASAN, why)).
  # Nor threads_trace_trainer (integration_trace_trainer's --local jobs
  # again, for TSan's pass; the whole file runs here), nor every fp32
  # pattern through the conversions (unit_half_exhaustive: minutes at
  # ASan's pace; unit_half's samples and every 16-bit pattern run here).
  # The faults run here too. The server's suites over TCP run here on the
  # test device (device_test_*; tcp_* are the release pass's). The
  # server's suites on the fake GPU run in the release and TSan passes
  # (their memory is unit_device's and integration_cuda_server's, which
  # run here). Of the suites on the test
  # device, the master's runs under TSan only (55 s here: its servers'
  # memory is integration_master's, which runs here on the cpu device) and
  # the training's here only (138 s under TSan, the pass's longest: its
  # trainers' threads are integration_hooks' and integration_ddp_rpc's
  # there, the test device's worker every other device_test_ suite's).
  ASAN_OPTIONS=detect_leaks=1 run_suite build-asan \
    "-LE container -E deploy_files|multihost_soak|multihost_http_load|integration_slurm|integration_scripts|integration_big_table|integration_no_deadline|integration_dashboard|integration_sweep_report|integration_host_state|integration_training|integration_install|integration_e2e|integration_batch_update|device_fakecuda_|device_test_master|tcp_|threads_trace_trainer|unit_half_exhaustive" \
    selected -DPSBENCH_SANITIZE=ON -DPSBENCH_FUZZ=OFF -DPSBENCH_DEVICE_TEST_SUITE=ON
  echo "== ThreadSanitizer build + the server's tests on the test device and the trainer's threads (build-tsan/)"
  # Not under TSan: the back-to-back runs' suite on the fake GPU (long
  # runs at TSan's pace; the fake GPU's threads are the other
  # device_fakecuda_ suites' and unit_cugpu's here), nor the server's
  # trace on it (whole --local jobs: its spans are recorded on the reactor's
  # thread alone, integration_server_trace's in the release pass), nor the
  # training's on the test device (the ASan pass's, above).
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" run_suite build-tsan \
    "-L server|threads -LE container -E device_fakecuda_runs|device_fakecuda_server_trace|device_test_training" \
    selected -DPSBENCH_TSAN=ON -DPSBENCH_FUZZ=OFF -DPSBENCH_DEVICE_TEST_SUITE=ON
fi
if [ "$configure_only" = 1 ]; then
  echo "scripts/test.sh: configured"
else
  echo "scripts/test.sh: all tests passed"
fi
