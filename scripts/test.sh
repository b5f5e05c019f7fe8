#!/usr/bin/env bash
# One command from a fresh clone to a green test run:
#   dependencies → configure → build (warnings are errors) → ctest,
# then the same tests again under AddressSanitizer + UBSan, plus the
# server's integration tests on the `test` device (futures that resolve
# late, from a worker thread), and those again under ThreadSanitizer with
# the trainer's threaded tests (hooks, collectives). The multihost tests
# (network namespaces, as root) run in the release pass, the faults also
# under ASan; they skip with a reason where namespaces are not allowed.
#
#   scripts/test.sh              everything
#   PSBENCH_NO_SANITIZE=1 scripts/test.sh   skip the sanitizer passes
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # build-dir, ctest args (quoted as one word), extra cmake args...
  local dir=$1 select=$2; shift 2
  cmake -S . -B "$dir" -DPSBENCH_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  # shellcheck disable=SC2086  # $select is a list of ctest flags
  (cd "$dir" && ctest --output-on-failure -j 1 $select)
}

echo "== release build + tests (build/)"
# clang when present, so that the fuzz target is built and run too.
if command -v clang >/dev/null 2>&1; then cc=clang; else cc=cc; fi
CC=$cc run_suite build ""

if [ "${PSBENCH_NO_SANITIZE:-0}" != 1 ]; then
  echo "== ASan + UBSan build + tests (build-asan/)"
  # The fuzz target already runs under ASan in the first pass.
  # Not again under ASan: the soak and the HTTP load (they measure memory,
  # which ASan's quarantine inflates on purpose) and Slurm (it runs the
  # same binaries as the faults tests do, slower). The faults run here too.
  CC=$cc ASAN_OPTIONS=detect_leaks=1 run_suite build-asan "-E multihost_soak|multihost_http_load|integration_slurm" \
    -DPSBENCH_SANITIZE=ON -DPSBENCH_FUZZ=OFF \
    -DPSBENCH_DEVICE_TEST_SUITE=ON
  echo "== ThreadSanitizer build + the server's tests on the test device and the trainer's threads (build-tsan/)"
  CC=$cc TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" run_suite build-tsan "-L server|threads" \
    -DPSBENCH_TSAN=ON -DPSBENCH_FUZZ=OFF -DPSBENCH_DEVICE_TEST_SUITE=ON
fi
echo "scripts/test.sh: all tests passed"
